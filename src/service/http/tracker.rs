//! The tracker (docs/swarm.md, "Peers and the tracker"): `POST /boot/IMAGE/blocks/DIGEST/where`,
//! a client agent's report of the chunks it holds and its question where to fetch those it
//! misses, answered by `boot::tracker` for the agent's room. A thin route: it reads who asks
//! (the lease holder of the address, its pool, its subnet), the manifest the digest names
//! (its count of chunks) and the report (`proto::swarm`); the swarm decides.
//!
//! Answered only to a client of a pool with `nbd.peers` (403 to anyone else, 404 when the
//! client's pool does not share: its agent then fetches from the servers alone, as without a
//! tracker). A malformed report is a 400 naming its line.

use super::blocks::{bad_digest, export_of, find};
use super::web::{Web, not_found};
use crate::boot::prefetch;
use crate::boot::tracker::Swarm;
use crate::config::RootProto;
use crate::image::blocks;
use crate::proto::swarm::Report;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::net::{IpAddr, SocketAddr};

/// `POST /boot/IMAGE/blocks/DIGEST/where`.
pub async fn ask(
    State(web): State<Web>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path((name, digest)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let ip = peer.ip();
    let room = {
        let config = web.config.load();
        let member = web.identity.holder(ip).and_then(|mac| config.member(mac));
        let Some(member) = member.filter(|m| m.pool.root == RootProto::Nbd) else {
            return (
                StatusCode::FORBIDDEN,
                "the tracker answers the agents of an NBD pool's clients\n",
            )
                .into_response();
        };
        if !member.pool.nbd_peers {
            return not_found("this client's pool does not share its root's chunks (nbd.peers)");
        }
        let subnet = match ip {
            IpAddr::V4(v4) => config.dhcp.subnet_of(v4).map(|s| s.subnet.to_string()),
            IpAddr::V6(_) => None,
        };
        format!(
            "{} {}",
            member.pool.name,
            subnet.unwrap_or_else(|| "-".into())
        )
    };
    let Some(digest) = blocks::parse_hex(&digest) else {
        return bad_digest();
    };
    let Some(found) = find(&web, name.clone(), digest).await else {
        return not_found("no root image with that block manifest");
    };
    let chunks = found.blocks.digests.len() as u64;
    let report = match Report::decode(&body, chunks) {
        Ok(r) => r,
        Err(e) => {
            return (StatusCode::BAD_REQUEST, format!("a tracker report: {e}\n")).into_response();
        }
    };
    let tracker = &web.tracker;
    let key = (name.clone(), digest, room);
    let new = !tracker
        .swarms
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .has(&key);
    // A new swarm's prefetch order: a kept trace of a boot of this very root image over NBD
    // (`boot::prefetch`), read off the async threads and outside the tracker's lock.
    let order = if new {
        let dir = web.config.load().server.state_dir.join("traces");
        let export = export_of(&web, &name, &found);
        let chunk = u64::from(found.blocks.chunk);
        tokio::task::spawn_blocking(move || {
            let kept = crate::record::trace::kept_nbd(&dir, &name);
            prefetch::recorded_order(kept, &export, chunk, chunks)
        })
        .await
        .ok()
        .flatten()
    } else {
        None
    };
    let now_ms = tracker.began.elapsed().as_millis() as u64;
    let (answer, moved) = {
        let mut swarms = tracker.swarms.lock().unwrap_or_else(|e| e.into_inner());
        let swarm: &mut Swarm = swarms.get(key, chunks, now_ms, order);
        let before = swarm.tally;
        let answer = swarm.ask(ip, &report, now_ms);
        let after = swarm.tally;
        (
            answer,
            (
                after.to_holders - before.to_holders,
                after.merged - before.merged,
                after.to_server - before.to_server,
                after.banned - before.banned,
            ),
        )
    };
    let http = web.metrics.http();
    http.tracked_to_holders.add(moved.0);
    http.tracked_to_receiver.add(moved.1);
    http.tracked_to_server.add(moved.2);
    if moved.3 > 0 {
        tracing::warn!(client = %ip, bad = ?report.bad, "a client's agent reported a peer that sent a bad chunk: it is named no more");
    }
    (
        [(header::CONTENT_TYPE, "text/plain; charset=us-ascii")],
        answer.encode(),
    )
        .into_response()
}

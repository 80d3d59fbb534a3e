//! What a client's agent reads an NBD root by (docs/swarm.md): `GET /boot/IMAGE/blocks/DIGEST`,
//! the block manifest whose SHA-256 is DIGEST, and `GET /boot/IMAGE/blocks/DIGEST/INDEX`,
//! chunk INDEX of the root image that manifest describes, with `Range` inside it. Read-only,
//! found by digest (`image::blocks_file::find`), for the clients of an NBD pool (as the NBD
//! service serves them), the readers of the API (`readers.rs`) and the read token's holders.

use super::guard::{carried, unauthorized};
use super::readers;
use super::web::{Web, not_found};
use crate::boot::exports::{ServesFor, is_client};
use crate::config::RootProto;
use crate::image::blocks::{self, Sha};
use crate::image::blocks_file;
use crate::proto::httpfile;
use crate::record::{Kind, Proto};
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::os::unix::fs::FileExt as _;
use std::sync::Arc;

/// The manifest whose SHA-256 is DIGEST, of a root image of IMAGE.
pub async fn manifest(
    State(web): State<Web>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    Path((name, digest)): Path<(String, String)>,
) -> Response {
    if let Some(refused) = refusal(&web, peer, &headers, query.as_deref()) {
        return refused;
    }
    let Some(digest) = blocks::parse_hex(&digest) else {
        return bad_digest();
    };
    match find(&web, name.clone(), digest).await {
        Some(found) => {
            record_attach(&web, peer, &name, &found);
            (
                [(header::CONTENT_TYPE, "text/plain; charset=us-ascii")],
                found.text.to_vec(),
            )
                .into_response()
        }
        None => not_found("no root image with that block manifest"),
    }
}

/// A client's agent fetches the manifest once, as it starts serving the root (again after a
/// restart): the root's attach, for the record, as an NBD handshake or an NFS MOUNT is. Its
/// export is the image's NBD export, at the revision whose root image the manifest is of.
/// Only for a client (an address leasing from a pool): a reader of the API is not booting.
fn record_attach(web: &Web, peer: SocketAddr, image: &str, found: &blocks_file::Found) {
    let Some(who) = booting(web, peer) else {
        return;
    };
    let export = export_of(web, image, found);
    web.recorder.record(
        who,
        Kind::RootAttach {
            proto: Proto::Http,
            export: export.into(),
        },
    );
}

/// The NBD export a boot of the root image `found` (of image `image`) attaches when it reads
/// it from the server: the image's export, at the revision of the manifest's root image.
pub(super) fn export_of(web: &Web, image: &str, found: &blocks_file::Found) -> String {
    let config = web.config.load();
    let export = config
        .images
        .get(image)
        .map_or(image, |i| i.nbd_export.as_str());
    let path = found.image.to_string_lossy();
    match crate::config::names::revision_of(&path) {
        Some(id) => crate::config::names::at_revision(export, id),
        None => export.to_string(),
    }
}

/// Who a chunk or manifest request is about, for the record, when it is a client's (the
/// address holds a lease of an NBD pool): `None` for a reader of the API or a token holder.
fn booting(web: &Web, peer: SocketAddr) -> Option<crate::record::Who> {
    let config = web.config.load();
    let ip = peer.ip();
    is_client(
        &config,
        ServesFor::Root(RootProto::Nbd),
        ip,
        web.identity.holder(ip),
    )
    .then(|| crate::service::who_at(&web.identity, ip))
    .flatten()
}

/// Chunk INDEX of the root image whose manifest's SHA-256 is DIGEST: its bytes as they are
/// on disk (the agent checks them against the manifest), or the `Range` of them asked for.
/// Its ETag is the chunk's SHA-256.
pub async fn chunk(
    State(web): State<Web>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    Path((name, digest, index)): Path<(String, String, String)>,
) -> Response {
    if let Some(refused) = refusal(&web, peer, &headers, query.as_deref()) {
        return refused;
    }
    let Some(digest) = blocks::parse_hex(&digest) else {
        return bad_digest();
    };
    let Ok(index) = index.parse::<u64>() else {
        return (StatusCode::BAD_REQUEST, "a chunk's index is a number\n").into_response();
    };
    let Some(found) = find(&web, name, digest).await else {
        return not_found("no root image with that block manifest");
    };
    let Some((offset, len)) = found.blocks.span(index) else {
        return not_found("no such chunk");
    };
    let path = found.image.clone();
    let read = tokio::task::spawn_blocking(move || -> std::io::Result<_> {
        let file = std::fs::File::open(&path)?;
        let modified = file.metadata()?.modified()?;
        let mut buf = vec![0u8; len as usize];
        file.read_exact_at(&mut buf, offset)?;
        Ok((buf, modified))
    })
    .await;
    let Ok(Ok((bytes, modified))) = read else {
        tracing::warn!(image = %found.image.display(), index, "a chunk of a root image could not be read");
        return not_found("no such chunk");
    };
    let validators = httpfile::Validators {
        etag: format!("\"{}\"", blocks::hex(&found.blocks.digests[index as usize])),
        modified,
    };
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let conditions = httpfile::Conditions {
        if_none_match: text(header::IF_NONE_MATCH),
        if_modified_since: None,
        range: text(header::RANGE),
        if_range: text(header::IF_RANGE),
    };
    let len = u64::from(len);
    let response = Response::builder()
        .header(header::ETAG, &validators.etag)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::CONTENT_TYPE, "application/octet-stream");
    let (status, start, end) = match httpfile::answer(len, &validators, &conditions) {
        httpfile::Answer::Full => (StatusCode::OK, 0, len),
        httpfile::Answer::Partial { start, end } => (StatusCode::PARTIAL_CONTENT, start, end + 1),
        httpfile::Answer::NotModified => (StatusCode::NOT_MODIFIED, 0, 0),
        httpfile::Answer::Unsatisfiable => {
            return response
                .status(StatusCode::RANGE_NOT_SATISFIABLE)
                .header(header::CONTENT_RANGE, format!("bytes */{len}"))
                .body(Body::empty())
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
        }
    };
    let mut response = response.status(status);
    if status == StatusCode::PARTIAL_CONTENT {
        response = response.header(
            header::CONTENT_RANGE,
            format!("bytes {start}-{}/{len}", end - 1),
        );
    }
    let body = bytes::Bytes::from(bytes).slice(start as usize..end as usize);
    if status != StatusCode::NOT_MODIFIED {
        web.metrics.http().chunks_sent.inc();
    }
    // The root's payload, as the NBD service records its read replies: an agent's chunks are
    // its client's root (issue 47 part 5, docs/swarm.md). One event a chunk, 256 KiB.
    if !body.is_empty()
        && let Some(who) = booting(&web, peer)
    {
        web.recorder.record(
            who,
            Kind::RootRead {
                proto: Proto::Http,
                bytes: body.len() as u64,
            },
        );
    }
    response
        .body(Body::from(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Who may read a root's chunks: a client of an NBD pool (the address holds its lease, as
/// the NBD service asks), a reader of the API, or anyone with the read token. `None`: go on.
fn refusal(
    web: &Web,
    peer: SocketAddr,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Option<Response> {
    let config = web.config.load();
    let ip = peer.ip();
    if is_client(
        &config,
        ServesFor::Root(RootProto::Nbd),
        ip,
        web.identity.holder(ip),
    ) || readers::reader(&config, ip, "/boot/", readers::host_holds).may_read()
    {
        return None;
    }
    match config.server.read_token.as_deref() {
        Some(token) if carried(headers, query, token).any() => None,
        Some(_) => Some(unauthorized()),
        None => Some(
            (
                StatusCode::FORBIDDEN,
                "a root's chunks are for the clients of an NBD pool and the readers of the API\n",
            )
                .into_response(),
        ),
    }
}

/// The manifests found so far, for every daemon of the process: keyed by image folder and
/// digest and checked against their files at each use, so one daemon's entry is as true for
/// another reading the same folder.
static KNOWN: std::sync::LazyLock<blocks_file::Known> = std::sync::LazyLock::new(Default::default);

/// The root image of image `name` whose manifest has `digest`, looked for off the runtime.
pub(super) async fn find(web: &Web, name: String, digest: Sha) -> Option<Arc<blocks_file::Found>> {
    let image = web.config.load().images.get(&name).cloned()?;
    tokio::task::spawn_blocking(move || blocks_file::find(&image, &digest, &KNOWN))
        .await
        .ok()
        .flatten()
}

pub(super) fn bad_digest() -> Response {
    (
        StatusCode::BAD_REQUEST,
        "a block manifest is named by its sha256 in 64 lowercase hex digits\n",
    )
        .into_response()
}

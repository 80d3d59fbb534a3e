//! Boot files over HTTP: the per-client iPXE script, loaders, each image's kernel and
//! initrd (with ranges), trace files; each file recorded when its last byte is handed over.

use super::web::{Web, not_found};
use crate::boot::next::{Entry, Firmware, MEMTEST_BIOS, MEMTEST_UEFI, Target};
use crate::boot::script;
use crate::config::Mac;
use crate::export::boot_files::{self, NotServed};
use crate::proto::httpfile;
use crate::record::event::{Micros, NextBootNote, now_micros};
use crate::record::{FileKind, Kind, Outcome, Proto, Recorder, Who};
use crate::trace::format::What;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::response::Response;
use std::net::SocketAddr;
use std::path::PathBuf;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

/// A file is read and sent this much at a time, and `QUEUED` chunks wait for the connection
/// at most: a reader that stops reading holds `CHUNK` x (`QUEUED` + 2) of memory (one chunk
/// being read, one being written), 768 KiB, whatever the file's size. Each read is a trip
/// through tokio's blocking pool: 64 KiB chunks cost a third of the throughput of a fast
/// client on loopback, so the bound is kept by the queue, not by smaller chunks.
pub(super) const CHUNK: usize = 256 * 1024;
const QUEUED: usize = 1;

/// A client's iPXE script. It names the client's address and kernel command line: with
/// `server.read_token` set, only the client it is for (the address that holds its lease)
/// gets it without the token.
pub(super) async fn boot_script(
    State(web): State<Web>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(mac): Path<String>,
    headers: HeaderMap,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    let received = now_micros();
    let Ok(mac) = mac.trim_end_matches(".ipxe").parse::<Mac>() else {
        return (StatusCode::BAD_REQUEST, "not a MAC address\n").into_response();
    };
    let its_own = web.identity.holder(peer.ip()) == Some(mac);
    // The config this script is made with, whatever a reload does meanwhile.
    let config = web.config.load();
    if let Some(token) = config.server.read_token.as_deref()
        && !its_own
        && !super::guard::carried(&headers, query.as_deref(), token).any()
    {
        tracing::info!(%mac, %peer, "boot script asked for by another address without the read token; refused");
        return super::guard::unauthorized();
    }
    let Some(member) = config.member(mac) else {
        tracing::info!(%mac, "script asked for by a client in no pool");
        return not_found("no pool lists this client");
    };
    // The link its DHCP answer named (a client that never asked us for DHCP: the primary).
    let (link, client, arch) = {
        let leases = web.identity.read();
        let client = leases
            .get(mac)
            .filter(|l| l.state == crate::boot::leases::State::Bound)
            .map(|l| l.ip);
        (
            web.identity.link(mac).unwrap_or(config.server.address),
            client,
            leases.arch(mac),
        )
    };
    // What its firmware's architecture boots (option 93, kept in its lease).
    let member = member.on_arch(arch);
    // A client that asks over IPv6 (DHCPv6 gave it the script's URL) fetches its kernel and
    // initrd over IPv6 too.
    let files = match (peer.ip(), config.server.address6) {
        (std::net::IpAddr::V6(p), Some(six)) if p.to_ipv4_mapped().is_none() => six.into(),
        _ => link.into(),
    };
    // A next boot an admin set (`bootpool next-boot`) takes the place of the pool's image.
    let next = web.next.applying(mac, client, &member.pool.name);
    let image = match next.as_ref().map(|e| &e.target) {
        Some(Target::Image(name)) => config.images.get(name).cloned(),
        Some(Target::Revision(name, rev)) => config
            .images
            .get(name)
            .map(|i| std::sync::Arc::new(crate::config::names::revision(i, rev.as_str()))),
        _ => None,
    };
    let image = match image {
        Some(image) => crate::image::serve::for_boot(&config, &image),
        // The pool's, or the client entry's own image or revision (a canary).
        None => crate::image::serve::for_member(&config, &member),
    };
    // An agent's root: the site's other members holding it too, after the boot's own link.
    let image = web
        .site
        .with_root_sources(&config, member.pool, image, link);
    let text = match &next {
        Some(entry) => {
            let memtest = &config.server.memtest;
            let next = script::Next {
                entry,
                firmware: Firmware::of(arch),
                memtest: memtest.join(MEMTEST_BIOS).is_file()
                    && memtest.join(MEMTEST_UEFI).is_file(),
            };
            script::next_script(&config, &member, &image, mac, link, client, files, &next)
        }
        None => script::ipxe_script(&config, &member, &image, mac, link, client, files),
    };
    // A milestone of the client's boot only when the client asked: the address it asks from
    // holds its lease. Anyone else (an admin's curl on the server, a monitoring probe) gets the
    // script and leaves no boot behind.
    if !its_own {
        tracing::info!(%mac, %peer, "boot script fetched from an address that is not the client's; served, not recorded");
    } else {
        if let Some(entry) = &next {
            next_boot_taken(&web, mac, entry);
        }
        web.recorder.record(
            Who::Mac(mac),
            Kind::File {
                proto: Proto::Http,
                kind: FileKind::Script,
                path: format!("/boot/script/{mac}.ipxe"),
                bytes: text.len() as u64,
                outcome: Outcome::Complete,
            },
        );
        trace_file(
            &web.recorder,
            peer,
            received,
            format!("/boot/script/{mac}.ipxe"),
            text.len() as u64,
        );
    }
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
}

/// The client's own script applied `entry`: recorded with its boot, and a once entry used up
/// (the boot it applies to has started).
fn next_boot_taken(web: &Web, mac: Mac, entry: &Entry) {
    tracing::info!(%mac, next_boot = %entry.sentence(), "boot script applies a next boot");
    web.recorder.record(
        Who::Mac(mac),
        Kind::NextBoot(NextBootNote {
            target: entry.target.to_string(),
            once: entry.once,
            scope: entry.scope.to_string(),
            set_at: entry.set_at,
            by: entry.by.clone(),
        }),
    );
    if entry.once
        && let Err(e) = web.next.consume(mac, &entry.scope)
    {
        tracing::error!(%mac, error = %e, "next boot: the state file could not be written; the once entry stays");
    }
}

pub(super) async fn loader(
    State(web): State<Web>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(file): Path<String>,
) -> Response {
    // Only plain names of files in the loaders folder, as TFTP serves them.
    if file.contains('/') {
        return not_found("no such loader");
    }
    let shown = format!("/boot/loaders/{file}");
    boot_file(&web, peer, &headers, &file, shown).await
}

pub(super) async fn image_file(
    State(web): State<Web>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((image, file)): Path<(String, String)>,
) -> Response {
    // Only the two boot files of an image are served over HTTP, by the names pools.yaml
    // gives them (`boot_files`); the root goes by NFS or NBD.
    let shown = format!("/boot/{image}/{file}");
    boot_file(&web, peer, &headers, &format!("{image}/{file}"), shown).await
}

/// Serves a boot file by the name TFTP would use for it (`LOADER` or `IMAGE/FILE`).
pub(super) async fn boot_file(
    web: &Web,
    peer: SocketAddr,
    headers: &HeaderMap,
    name: &str,
    shown: String,
) -> Response {
    // On a blocking thread: a revision this server lacks has its file fetched first.
    let (config, asked) = (web.config.load(), name.to_string());
    let resolved = tokio::task::spawn_blocking(move || boot_files::resolve(&config, &asked))
        .await
        .unwrap_or(Err(NotServed::Missing));
    match resolved {
        Ok((path, kind)) => send_file(web, peer, headers, path, kind, name, shown).await,
        Err(e) => {
            crate::service::warn_not_served(&e);
            match &e {
                NotServed::Outside { .. } => {
                    record_missing(web, peer, name, &format!("{shown}: {}", e.reason()));
                }
                NotServed::Missing => {
                    static MISSING: crate::service::bounds::LogLimit =
                        crate::service::bounds::LogLimit::new();
                    if let Some(suppressed) = MISSING.allow() {
                        tracing::warn!(file = %shown, suppressed, "boot file missing");
                    }
                    record_missing(web, peer, name, &format!("{shown}: not found"));
                }
                NotServed::Denied => {}
            }
            (http_status(&e), "no such file\n").into_response()
        }
    }
}

/// The HTTP status for a boot file not served: not found, whatever the reason (the reason
/// is logged and recorded, not told).
fn http_status(e: &NotServed) -> StatusCode {
    match e {
        NotServed::Denied | NotServed::Missing | NotServed::Outside { .. } => StatusCode::NOT_FOUND,
    }
}

/// Writes an HTTP file to the client's boot trace, if it keeps one.
pub(super) fn trace_file(
    recorder: &Recorder,
    peer: SocketAddr,
    received: Micros,
    name: String,
    bytes: u64,
) {
    if let Some(ip) = crate::service::ipv4_of(peer.ip())
        && recorder.tracer().wants(ip)
    {
        let what = What::File {
            proto: "http".into(),
            name,
            bytes,
            blksize: None,
            windowsize: None,
        };
        recorder.tracer().op(ip, received, what);
    }
}

/// A kernel, initrd or loader bootpool handed out is missing: the client cannot go on. Other
/// names are probes and fail nothing.
pub(super) fn record_missing(web: &Web, peer: SocketAddr, name: &str, reason: &str) {
    if let (true, Some(who)) = (
        boot_files::handed_out(&web.config.load(), name),
        crate::service::who_at(&web.identity, peer.ip()),
    ) {
        web.recorder.record(
            who,
            Kind::Failed {
                proto: Some(Proto::Http),
                reason: reason.to_string(),
            },
        );
    }
}

/// Streams a file, or the byte range asked for, and records the transfer when it ends. A range
/// counts as the file complete only when it reaches the last byte (a resumed download); a 304
/// is recorded as a complete transfer of 0 bytes, since the client holds the file.
pub(super) async fn send_file(
    web: &Web,
    peer: SocketAddr,
    headers: &HeaderMap,
    path: PathBuf,
    kind: FileKind,
    name: &str,
    shown: String,
) -> Response {
    let received = now_micros();
    let mut file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "boot file missing");
            // Gone since it was resolved.
            record_missing(web, peer, name, &format!("{shown}: not found"));
            return not_found("no such file");
        }
    };
    let (len, modified) = match file.metadata().await {
        Ok(m) if m.is_file() => (m.len(), m.modified().unwrap_or(std::time::UNIX_EPOCH)),
        _ => return not_found("no such file"),
    };
    let validators = httpfile::Validators::new(len, modified);
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let conditions = httpfile::Conditions {
        if_none_match: text(header::IF_NONE_MATCH),
        if_modified_since: text(header::IF_MODIFIED_SINCE),
        range: text(header::RANGE),
        if_range: text(header::IF_RANGE),
    };
    let answer = httpfile::answer(len, &validators, &conditions);
    let who = crate::service::who_at(&web.identity, peer.ip());
    let response = Response::builder()
        .header(header::ETAG, &validators.etag)
        .header(header::LAST_MODIFIED, validators.last_modified())
        .header(header::ACCEPT_RANGES, "bytes");
    let (status, start, end) = match answer {
        httpfile::Answer::Full => (StatusCode::OK, 0, len),
        httpfile::Answer::Partial { start, end } => (StatusCode::PARTIAL_CONTENT, start, end + 1),
        httpfile::Answer::NotModified => {
            tracing::info!(peer = %peer, path = %shown, "http file not modified");
            if let Some(who) = who {
                web.recorder.record(
                    who,
                    Kind::File {
                        proto: Proto::Http,
                        kind,
                        path: shown,
                        bytes: 0,
                        outcome: Outcome::Complete,
                    },
                );
            }
            return response
                .status(StatusCode::NOT_MODIFIED)
                .body(Body::empty())
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
        }
        httpfile::Answer::Unsatisfiable => {
            return response
                .status(StatusCode::RANGE_NOT_SATISFIABLE)
                .header(header::CONTENT_RANGE, format!("bytes */{len}"))
                .body(Body::empty())
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
        }
    };
    if start > 0
        && let Err(e) = file.seek(std::io::SeekFrom::Start(start)).await
    {
        tracing::warn!(path = %path.display(), error = %e, "boot file seek failed");
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(QUEUED);
    let recorder = web.recorder.clone();
    let whole = end == len;
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        let want = end - start;
        let mut sent = 0u64;
        let mut outcome = Outcome::Complete;
        while sent < want {
            let mut buf = vec![0u8; CHUNK.min((want - sent) as usize)];
            let n = match file.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    outcome = Outcome::Aborted;
                    break;
                }
                Ok(n) => n,
            };
            buf.truncate(n);
            if tx.send(Ok(buf.into())).await.is_err() {
                outcome = Outcome::Aborted;
                break;
            }
            sent += n as u64;
        }
        // The channel holds a few chunks: the transfer is done when the body took them all.
        tx.closed().await;
        tracing::info!(peer = %peer, path = %shown, bytes = sent, from = start, ms = started.elapsed().as_millis() as u64, ?outcome, "http file");
        // A range that stops short of the end leaves the file incomplete on the client.
        if outcome == Outcome::Complete && !whole {
            outcome = Outcome::Aborted;
        }
        trace_file(&recorder, peer, received, shown.clone(), sent);
        if let Some(who) = who {
            recorder.record(
                who,
                Kind::File {
                    proto: Proto::Http,
                    kind,
                    path: shown,
                    bytes: sent,
                    outcome,
                },
            );
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut response = response
        .status(status)
        .header(header::CONTENT_LENGTH, end - start)
        .header(header::CONTENT_TYPE, "application/octet-stream");
    if status == StatusCode::PARTIAL_CONTENT {
        response = response.header(
            header::CONTENT_RANGE,
            format!("bytes {start}-{}/{len}", end - 1),
        );
    }
    response
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

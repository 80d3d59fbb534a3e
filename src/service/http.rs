//! HTTP: boot files and per-client iPXE scripts under `/boot/`, the JSON API under `/api/v1/`,
//! the dashboard at `/`. Every boot file sent is recorded when its last byte has been handed
//! to the connection, so the kernel phase ends when the download does.
//!
//! Connections are accepted here (HTTP/1.1 through hyper), not by `axum::serve`, to bound
//! them: `limits.http_connections` in all and `limits.http_per_client` per address (past
//! them a connection is closed at once and counted as refused), a request's headers must
//! arrive within `limits.http_header_timeout` (hyper's header timer, which also runs while a
//! kept-alive connection waits for its next request), and a connection that moves no byte
//! either way for `limits.http_idle_timeout` is closed (a stalled download too; the event
//! stream sends something every second).

use super::boot_files;
use crate::boot::script;
use crate::config::{Config, Mac};
use crate::proto::httpfile;
use crate::record::egress::{Egress, LinkKind};
use crate::record::event::{Micros, now_micros};
use crate::record::view::{self, BootView, SummaryView, WaveView};
use crate::record::{FileKind, Kind, Outcome, Proto, Recorder, Records, Service, Who, wave};
use crate::shutdown::Shutdown;
use crate::trace::format::What;
use axum::Json;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

const CHUNK: usize = 256 * 1024;

/// What the HTTP handlers share.
#[derive(Clone)]
pub struct Web {
    pub config: Arc<Config>,
    pub recorder: Recorder,
    pub records: Arc<Records>,
    pub egress: Arc<Egress>,
    /// Who is at which address (`service::identity`).
    pub identity: super::identity::Identity,
    /// The server's links (their pacing figures, for /metrics).
    pub links: Arc<super::links::Links>,
    /// The DHCP service, for the actions on the lease table.
    pub dhcp: super::dhcp::Commands,
}

/// Serves `listener`: plain HTTP, or HTTPS with `tls` (`server.tls`, the same routes; its
/// connection limits are its own).
pub async fn serve(
    listener: super::Listener,
    web: Web,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let limits = web.config.limits.clone();
    let recorder = web.recorder.clone();
    let app = router(web);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.http_connections));
    let per_client = super::bounds::PerAddress::new(limits.http_per_client);
    static REFUSED: super::bounds::LogLimit = super::bounds::LogLimit::new();
    loop {
        let Some((stream, peer, paced)) = super::accept(&listener, &shutdown, "http").await else {
            break;
        };
        let held = match slots.clone().try_acquire_owned() {
            Ok(total) => per_client.take(peer.ip()).map(|one| (total, one)),
            Err(_) => None,
        };
        let Some(held) = held else {
            // Closed at once: a refused connection costs no task and no buffer.
            recorder.refused(Service::Http);
            if let Some(suppressed) = REFUSED.allow() {
                tracing::warn!(%peer, total = limits.http_connections,
                    per_client = limits.http_per_client, suppressed,
                    "http connection refused: too many");
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = app.clone();
        let stop = shutdown.clone();
        let limits = limits.clone();
        let tls = tls.clone();
        shutdown.spawn(async move {
            let _held = (held, paced);
            serve_connection(stream, peer, service, &limits, tls, stop).await;
        });
    }
    Ok(())
}

/// One HTTP/1.1 connection, bounded by the header and idle timeouts; ends gracefully (the
/// request being answered finishes) at shutdown. With `tls`, the TLS handshake comes first,
/// within the header timeout.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    app: axum::Router,
    limits: &crate::config::Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: Shutdown,
) {
    // Until the first request starts, the connection holds no buffer of hyper's (8 KiB): a
    // silent one waits here, for the header timeout at most, as hyper would have.
    // (`peek`, not `readable`, which may wake for nothing.)
    let mut byte = [0u8; 1];
    let first = tokio::select! {
        r = tokio::time::timeout(limits.http_header_timeout, stream.peek(&mut byte)) => r,
        _ = shutdown.wait() => return,
    };
    if !matches!(first, Ok(Ok(n)) if n > 0) {
        return;
    }
    let (io, last) = Watched::new(stream);
    let Some(tls) = tls else {
        // Boxed: a task waiting above is not the size of hyper's connection state.
        return Box::pin(serve_requests(io, last, peer, app, limits, shutdown)).await;
    };
    let handshake = Box::pin(tls.accept(io));
    let io = tokio::select! {
        r = tokio::time::timeout(limits.http_header_timeout, handshake) => r,
        _ = shutdown.wait() => return,
    };
    match io {
        Ok(Ok(io)) => Box::pin(serve_requests(io, last, peer, app, limits, shutdown)).await,
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "tls handshake failed"),
        Err(_) => tracing::debug!(%peer, "tls handshake timed out"),
    }
}

/// `serve_connection` once the client has sent something (and, over TLS, shaken hands).
async fn serve_requests<S>(
    io: S,
    last: LastActivity,
    peer: SocketAddr,
    app: axum::Router,
    limits: &crate::config::Limits,
    shutdown: Shutdown,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use hyper_util::rt::{TokioIo, TokioTimer};
    // The handlers learn the peer as they would from `axum::serve`.
    let service = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
        use tower_service::Service as _;
        req.extensions_mut().insert(ConnectInfo(peer));
        app.clone().call(req)
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.http_header_timeout);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let idle = limits.http_idle_timeout;
    let mut stopping = false;
    loop {
        let quiet = last.quiet();
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = tokio::time::sleep(idle.saturating_sub(quiet)) => {
                if last.quiet() >= idle {
                    tracing::debug!(idle_s = idle.as_secs_f64(), "http connection idle; closed");
                    return;
                }
            }
            _ = shutdown.wait(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// When a connection last moved a byte, shared between its stream and its watchdog.
#[derive(Clone)]
struct LastActivity(Arc<std::sync::atomic::AtomicU64>, std::time::Instant);

impl LastActivity {
    fn touch(&self) {
        let ms = self.1.elapsed().as_millis() as u64;
        self.0.store(ms, std::sync::atomic::Ordering::Relaxed);
    }
    fn quiet(&self) -> std::time::Duration {
        let at = self.0.load(std::sync::atomic::Ordering::Relaxed);
        self.1
            .elapsed()
            .saturating_sub(std::time::Duration::from_millis(at))
    }
}

/// A TCP stream that notes when it last read or wrote anything (under TLS, if any, so
/// handshakes and records count as activity too).
struct Watched {
    inner: tokio::net::TcpStream,
    last: LastActivity,
}

impl Watched {
    fn new(inner: tokio::net::TcpStream) -> (Watched, LastActivity) {
        let last = LastActivity(Arc::default(), std::time::Instant::now());
        (
            Watched {
                inner,
                last: last.clone(),
            },
            last,
        )
    }
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.last.touch();
        }
        r
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.last.touch();
        }
        r
    }
    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.last.touch();
        }
        r
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

pub fn router(web: Web) -> axum::Router {
    axum::Router::new()
        .route("/boot/script/{mac}", get(boot_script))
        .route("/boot/loaders/{file}", get(loader))
        .route("/boot/{image}/{*file}", get(image_file))
        .route("/api/v1/booted", post(booted))
        .route("/api/v1/failed", post(failed))
        .route("/api/v1/boots", get(boots))
        .route("/api/v1/boots/{id}/console", get(boot_console))
        .route("/api/v1/waves", get(waves))
        .route("/api/v1/waves/{id}", get(wave_by_id))
        .route("/api/v1/compare", get(compare))
        .route("/api/v1/egress", get(egress))
        .route("/api/v1/stream", get(stream))
        .route("/metrics", get(super::metrics::render))
        .route("/api/v1/pools", get(pools))
        .route("/api/v1/images", get(super::images_api::images))
        .route("/api/v1/clients", get(clients))
        .route("/api/v1/leases/{mac}/release", post(release_lease))
        .merge(super::web::routes())
        .layer(axum::middleware::from_fn_with_state(
            web.clone(),
            read_guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            web.clone(),
            count_request,
        ))
        .with_state(web)
}

/// The cookie a browser keeps the read token in, once it opened a page with `?token=`.
const TOKEN_COOKIE: &str = "bootpool_token";

/// With `server.read_token` set, the dashboard, the read API, the stream and /metrics need
/// it: as `Authorization: Bearer TOKEN` (scripts, Prometheus), or a `?token=TOKEN` on any of
/// them, which also sets a cookie so the dashboard's own requests carry it. Boot files and
/// the clients' reports never need it (their rule is the lease table's). 401 otherwise.
async fn read_guard(
    State(web): State<Web>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(token) = web.config.server.read_token.as_deref() else {
        return next.run(req).await;
    };
    let path = req.uri().path();
    let post = req.method() == axum::http::Method::POST;
    let client_route =
        path.starts_with("/boot/") || (post && matches!(path, "/api/v1/booted" | "/api/v1/failed"));
    // Actions ask their own token (`admin_refusal`), never the read token.
    let action = post && path.starts_with("/api/v1/leases/");
    if client_route || action {
        return next.run(req).await;
    }
    let same = |given: &str| same_token(given, token);
    let headers = req.headers();
    let bearer = bearer(headers).is_some_and(same);
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix(TOKEN_COOKIE)?.strip_prefix('='))
        .any(same);
    let query = req
        .uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|kv| kv.strip_prefix("token="))
        .any(same);
    if !(bearer || cookie || query) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"bootpool\"")],
            "this server needs its read token: Authorization: Bearer TOKEN, or ?token=TOKEN\n",
        )
            .into_response();
    }
    let mut res = next.run(req).await;
    if query && !cookie {
        let set = format!("{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
        if let Ok(v) = axum::http::HeaderValue::from_str(&set) {
            res.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    res
}

/// The token of an `Authorization: Bearer TOKEN` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// Whether `given` is `token`, compared in time independent of where they differ.
fn same_token(given: &str, token: &str) -> bool {
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// An action (one that changes what the server does, not only what it records) needs
/// `server.admin_token` as `Authorization: Bearer TOKEN`: never a cookie or a query (a page
/// the admin opens cannot make the browser act), and never the read token. Without the key,
/// actions are off (403). `None`: the action may go on; else the refusal.
fn admin_refusal(web: &Web, headers: &HeaderMap) -> Option<Response> {
    let Some(token) = web.config.server.admin_token.as_deref() else {
        return Some(
            (
                StatusCode::FORBIDDEN,
                "actions are off: pools.yaml sets no server.admin_token\n",
            )
                .into_response(),
        );
    };
    if bearer(headers).is_some_and(|t| same_token(t, token)) {
        return None;
    }
    Some(
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"bootpool admin\"")],
            "this action needs the admin token: Authorization: Bearer TOKEN\n",
        )
            .into_response(),
    )
}

/// `POST /api/v1/leases/MAC/release`: ends the MAC's binding through the DHCP service (as a
/// DHCPRELEASE would: the address goes back to the range, and NFS and NBD stop serving it to
/// that address). 200 with the address released, 404 when the MAC holds no lease.
async fn release_lease(
    State(web): State<Web>,
    Path(mac): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = admin_refusal(&web, &headers) {
        return refusal;
    }
    let Ok(mac) = mac.parse::<Mac>() else {
        return (
            StatusCode::BAD_REQUEST,
            format!("`{mac}` is not a MAC address\n"),
        )
            .into_response();
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    let asked = web
        .dhcp
        .send(super::dhcp::Command::Release { mac, reply })
        .await;
    let released = match (
        asked,
        tokio::time::timeout(std::time::Duration::from_secs(5), answer).await,
    ) {
        (Ok(()), Ok(Ok(released))) => released,
        _ => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "the DHCP service did not answer\n",
            )
                .into_response();
        }
    };
    // The DHCP service logs the release.
    match released {
        Some(ip) => Json(serde_json::json!({ "mac": mac.to_string(), "ip": ip, "released": true }))
            .into_response(),
        None => (StatusCode::NOT_FOUND, format!("{mac} holds no lease\n")).into_response(),
    }
}

/// Counts every request, and those answered with a 4xx as refused, for `/metrics`.
async fn count_request(
    State(web): State<Web>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    web.recorder.request(Service::Http);
    let res = next.run(req).await;
    if res.status().is_client_error() {
        web.recorder.refused(Service::Http);
    }
    res
}

fn not_found(what: &str) -> Response {
    (StatusCode::NOT_FOUND, format!("{what}\n")).into_response()
}

async fn boot_script(
    State(web): State<Web>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(mac): Path<String>,
) -> Response {
    let received = now_micros();
    let Ok(mac) = mac.trim_end_matches(".ipxe").parse::<Mac>() else {
        return (StatusCode::BAD_REQUEST, "not a MAC address\n").into_response();
    };
    let Some(member) = web.config.member(mac) else {
        tracing::info!(%mac, "script asked for by a client in no pool");
        return not_found("no pool lists this client");
    };
    // The link its DHCP answer named (a client that never asked us for DHCP: the primary).
    let (link, client) = {
        let leases = web.identity.read();
        let client = leases
            .get(mac)
            .filter(|l| l.state == crate::boot::leases::State::Bound)
            .map(|l| l.ip);
        (
            leases.link(mac).unwrap_or(web.config.server.address),
            client,
        )
    };
    let text = script::ipxe_script(&web.config, &member, mac, link, client);
    // A milestone of the client's boot only when the client asked: the address it asks from
    // holds its lease. Anyone else (an admin's curl on the server, a monitoring probe) gets the
    // script and leaves no boot behind.
    if web.identity.holder(peer.ip()) != Some(mac) {
        tracing::info!(%mac, %peer, "boot script fetched from an address that is not the client's; served, not recorded");
    } else {
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

async fn loader(
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

async fn image_file(
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
async fn boot_file(
    web: &Web,
    peer: SocketAddr,
    headers: &HeaderMap,
    name: &str,
    shown: String,
) -> Response {
    match boot_files::resolve(&web.config, name) {
        Ok((path, kind)) => send_file(web, peer, headers, path, kind, name, shown).await,
        Err(boot_files::Refused(code, why)) => {
            if why == boot_files::OUTSIDE {
                // boot_files logged the file and where it points.
                record_missing(web, peer, name, &format!("{shown}: {why}"));
            } else if code == crate::proto::tftp::err::NOT_FOUND {
                static MISSING: super::bounds::LogLimit = super::bounds::LogLimit::new();
                if let Some(suppressed) = MISSING.allow() {
                    tracing::warn!(file = %shown, suppressed, "boot file missing");
                }
                record_missing(web, peer, name, &format!("{shown}: not found"));
            }
            not_found("no such file")
        }
    }
}

/// Writes an HTTP file to the client's boot trace, if it keeps one.
fn trace_file(recorder: &Recorder, peer: SocketAddr, received: Micros, name: String, bytes: u64) {
    if let Some(ip) = super::ipv4_of(peer.ip())
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
fn record_missing(web: &Web, peer: SocketAddr, name: &str, reason: &str) {
    if let (true, Some(ip)) = (
        boot_files::handed_out(&web.config, name),
        super::ipv4_of(peer.ip()),
    ) {
        web.recorder.record(
            Who::Ip(ip),
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
async fn send_file(
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
    let who = super::ipv4_of(peer.ip()).map(Who::Ip);
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
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(4);
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

#[derive(Debug, Default, Deserialize)]
struct BootedBody {
    uptime_s: Option<f64>,
    root_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct FailedBody {
    reason: Option<String>,
}

/// Longest reason kept from a client's failure report.
const REASON_MAX: usize = 200;

/// The client reporting on its own boot, as the lease table knows the address it calls from:
/// only the holder of a lease writes a boot record (on a loopback server, the test's own host
/// is its client). A stranger gets 403, an empty body is no details, any other body must be
/// a JSON object of the documented fields (400 if not).
fn reporter<T: serde::de::DeserializeOwned + Default>(
    web: &Web,
    peer: SocketAddr,
    body: &[u8],
) -> Result<(Who, T), (StatusCode, String)> {
    let Some(ip) = super::ipv4_of(peer.ip()) else {
        return Err((StatusCode::BAD_REQUEST, "IPv4 clients only\n".into()));
    };
    let who = match web.identity.holder(peer.ip()) {
        Some(mac) => Who::Mac(mac),
        None if crate::boot::exports::loopback_test(&web.config, ip) => Who::Ip(ip),
        None => {
            static REFUSED: super::bounds::LogLimit = super::bounds::LogLimit::new();
            if let Some(suppressed) = REFUSED.allow() {
                tracing::warn!(%ip, suppressed, "boot report from an address that holds no lease; refused");
            }
            let msg = "this address holds no lease: a client reports only its own boot\n";
            return Err((StatusCode::FORBIDDEN, msg.into()));
        }
    };
    let details = if body.iter().all(u8::is_ascii_whitespace) {
        T::default()
    } else {
        serde_json::from_slice(body).map_err(|e| {
            let msg = format!("the body is not the JSON object documented in docs/api.md: {e}\n");
            (StatusCode::BAD_REQUEST, msg)
        })?
    };
    Ok((who, details))
}

/// The client reports that it is up (the demo image's init does, `docs/api.md`).
async fn booted(
    State(web): State<Web>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: axum::body::Bytes,
) -> Response {
    let (who, body) = match reporter::<BootedBody>(&web, peer, &body) {
        Ok(x) => x,
        Err(refusal) => return refusal.into_response(),
    };
    let uptime_s = body.uptime_s.filter(|u| u.is_finite() && *u >= 0.0);
    let root_bytes = body.root_bytes;
    tracing::info!(client = ?who, ?uptime_s, ?root_bytes, "client reports booted");
    web.recorder.record(
        who,
        Kind::Booted {
            uptime_s,
            root_bytes,
        },
    );
    StatusCode::NO_CONTENT.into_response()
}

/// The client reports that its boot failed, e.g. from the initrd's emergency hook.
async fn failed(
    State(web): State<Web>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: axum::body::Bytes,
) -> Response {
    let (who, body) = match reporter::<FailedBody>(&web, peer, &body) {
        Ok(x) => x,
        Err(refusal) => return refusal.into_response(),
    };
    let mut reason = body
        .reason
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "reported by the client".into());
    if reason.len() > REASON_MAX {
        let mut end = REASON_MAX;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    tracing::info!(client = ?who, %reason, "client reports failure");
    web.recorder.record(
        who,
        Kind::Failed {
            proto: None,
            reason,
        },
    );
    StatusCode::NO_CONTENT.into_response()
}

#[derive(Debug, Deserialize)]
struct BootsQuery {
    pool: Option<String>,
    mac: Option<String>,
    /// Unix seconds: only boots that started at or after this.
    since: Option<f64>,
}

async fn boots(State(web): State<Web>, Query(q): Query<BootsQuery>) -> Json<Vec<BootView>> {
    Json(web.records.read(|t| {
        t.boots()
            .iter()
            .filter(|b| q.pool.as_ref().is_none_or(|p| b.pool.as_ref() == Some(p)))
            .filter(|b| {
                q.mac
                    .as_ref()
                    .is_none_or(|m| m.parse::<Mac>().is_ok_and(|m| m == b.mac))
            })
            .filter(|b| q.since.is_none_or(|s| b.start as f64 / 1e6 >= s))
            .map(BootView::of)
            .collect()
    }))
}

/// Waves without their boots: what a list of waves needs.
#[derive(Serialize)]
struct WaveLine {
    id: u64,
    pool: String,
    start: f64,
    summary: SummaryView,
}

async fn waves(State(web): State<Web>) -> Json<Vec<WaveLine>> {
    Json(web.records.read(|t| {
        wave::waves(t.boots(), now_micros())
            .iter()
            .map(|w| WaveLine {
                id: w.id,
                pool: w.pool.clone(),
                start: w.start,
                summary: (&w.summary).into(),
            })
            .collect()
    }))
}

/// One boot's console lines, dropped count and cause (docs/api.md).
async fn boot_console(State(web): State<Web>, Path(id): Path<u64>) -> Response {
    let found = web.records.read(|t| {
        t.boots()
            .iter()
            .find(|b| b.id == id)
            .map(|b| crate::record::console::View::of(b, now_micros()))
    });
    match found {
        Some(v) => Json(v).into_response(),
        None => not_found("no such boot"),
    }
}

async fn wave_by_id(State(web): State<Web>, Path(id): Path<u64>) -> Response {
    match find_wave(&web, id) {
        Some(w) => Json(w).into_response(),
        None => not_found("no such wave"),
    }
}

#[derive(Debug, Deserialize)]
struct CompareQuery {
    a: u64,
    b: u64,
}

async fn compare(State(web): State<Web>, Query(q): Query<CompareQuery>) -> Response {
    match (find_wave(&web, q.a), find_wave(&web, q.b)) {
        (Some(a), Some(b)) => Json(view::compare(a, b)).into_response(),
        _ => not_found("no such wave"),
    }
}

pub fn find_wave(web: &Web, id: u64) -> Option<WaveView> {
    web.records.read(|t| {
        let now = now_micros();
        wave::waves(t.boots(), now)
            .iter()
            .find(|w| w.id == id)
            .map(|w| WaveView::at(w, t.boots(), now))
    })
}

#[derive(Serialize)]
struct PoolLine {
    name: String,
    image: String,
    root: String,
    /// How many MACs the pool lists.
    clients: u64,
    latest_wave: Option<u64>,
    /// The pool's machines: the MACs it lists (a range only when it is short enough to be a
    /// room), then any other MAC seen booting in the pool. The room view draws one tile each.
    machines: Vec<MachineLine>,
    /// False when a listed range was too long to enumerate: `machines` then holds only the
    /// MACs of that range that have booted.
    machines_complete: bool,
}

#[derive(Serialize)]
struct MachineLine {
    mac: Mac,
    name: Option<String>,
    ip: Option<std::net::Ipv4Addr>,
    /// Listed in pools.yaml (false: seen booting in this pool, no longer listed there).
    listed: bool,
}

/// A range longer than this is not a room's list of machines but a catch-all.
const ENUMERATE_MAX: u64 = 1024;

async fn pools(State(web): State<Web>) -> Json<Vec<PoolLine>> {
    let (latest, seen) = web.records.read(|t| {
        let latest: BTreeMap<String, u64> = wave::waves(t.boots(), now_micros())
            .into_iter()
            .map(|w| (w.pool, w.id))
            .collect();
        let mut seen: BTreeMap<String, std::collections::BTreeSet<Mac>> = BTreeMap::new();
        for b in t.boots() {
            if let Some(pool) = &b.pool {
                seen.entry(pool.clone()).or_default().insert(b.mac);
            }
        }
        (latest, seen)
    });
    let none = Default::default();
    Json(
        web.config
            .pools
            .values()
            .map(|p| {
                let seen = seen.get(&p.name).unwrap_or(&none);
                let mut machines = Vec::new();
                let mut complete = true;
                for e in &p.clients {
                    let listed = |mac| MachineLine {
                        mac,
                        name: e.name.clone(),
                        ip: e.ip,
                        listed: true,
                    };
                    if e.macs.len() <= ENUMERATE_MAX {
                        machines
                            .extend((0..e.macs.len()).filter_map(|n| e.macs.nth(n)).map(listed));
                    } else {
                        complete = false;
                        machines.extend(
                            seen.iter()
                                .filter(|m| e.macs.contains(**m))
                                .map(|m| listed(*m)),
                        );
                    }
                }
                for &mac in seen {
                    if !p.clients.iter().any(|e| e.macs.contains(mac)) {
                        machines.push(MachineLine {
                            mac,
                            name: None,
                            ip: None,
                            listed: false,
                        });
                    }
                }
                PoolLine {
                    name: p.name.clone(),
                    image: p.image.name.clone(),
                    root: p.root.to_string(),
                    clients: p.clients.iter().map(|e| e.macs.len()).sum(),
                    latest_wave: latest.get(&p.name).copied(),
                    machines,
                    machines_complete: complete,
                }
            })
            .collect(),
    )
}

#[derive(Serialize)]
struct ClientLine {
    mac: String,
    name: Option<String>,
    pool: Option<String>,
    ip: Option<std::net::Ipv4Addr>,
    boots: usize,
    last: Option<BootView>,
}

/// Every client that has booted at least once, with its newest boot.
async fn clients(State(web): State<Web>) -> Json<Vec<ClientLine>> {
    let mut by_mac: BTreeMap<Mac, (usize, Option<BootView>)> = BTreeMap::new();
    web.records.read(|t| {
        for b in t.boots() {
            let e = by_mac.entry(b.mac).or_default();
            e.0 += 1;
            e.1 = Some(BootView::of(b));
        }
    });
    Json(
        by_mac
            .into_iter()
            .map(|(mac, (boots, last))| {
                let member = web.config.member(mac);
                ClientLine {
                    mac: mac.to_string(),
                    name: member.as_ref().and_then(|m| m.entry.name.clone()),
                    pool: member.map(|m| m.pool.name.clone()),
                    ip: last.as_ref().and_then(|b| b.ip),
                    boots,
                    last,
                }
            })
            .collect(),
    )
}

#[derive(Debug, Deserialize)]
struct EgressQuery {
    since: Option<f64>,
    step: Option<f64>,
}

#[derive(Serialize)]
struct EgressView {
    step_s: f64,
    links: Vec<LinkSeries>,
    protocols: Vec<ProtoSeries>,
}

#[derive(Serialize)]
struct LinkSeries {
    name: String,
    kind: LinkKind,
    master: Option<String>,
    speed_mbps: Option<u32>,
    /// The addresses of `server.links` this interface holds: the clients whose `link` is one
    /// of them boot over it.
    addresses: Vec<std::net::Ipv4Addr>,
    points: Vec<LinkPoint>,
}

#[derive(Serialize)]
struct LinkPoint {
    t: f64,
    tx_bytes_s: f64,
    rx_bytes_s: f64,
    /// Bytes counted in this bucket (rates times the sampled time, exactly).
    tx_bytes: f64,
    rx_bytes: f64,
}

#[derive(Serialize)]
struct ProtoSeries {
    proto: String,
    points: Vec<ProtoPoint>,
}

#[derive(Serialize)]
struct ProtoPoint {
    t: f64,
    bytes_s: f64,
}

/// Egress per link and per protocol, averaged into `step`-second buckets.
async fn egress(State(web): State<Web>, Query(q): Query<EgressQuery>) -> Json<EgressView> {
    let now = crate::record::event::now_micros() as f64 / 1e6;
    let since = q.since.unwrap_or(now - 600.0);
    let step = q
        .step
        .filter(|s| s.is_finite() && *s >= 1.0)
        .unwrap_or(1.0)
        .min(3600.0);
    let samples = web.egress.samples_since(since);
    // Bucket start -> (seconds sampled, per-link byte sums, per-protocol byte sums).
    type Sums = (f64, BTreeMap<String, (f64, f64)>, BTreeMap<String, f64>);
    let mut buckets: BTreeMap<i64, Sums> = BTreeMap::new();
    for s in &samples {
        let b = buckets.entry((s.t / step).floor() as i64).or_default();
        b.0 += s.seconds;
        for l in &s.links {
            let e = b.1.entry(l.name.clone()).or_default();
            e.0 += l.tx_bytes_s * s.seconds;
            e.1 += l.rx_bytes_s * s.seconds;
        }
        for (p, v) in &s.protocols {
            *b.2.entry(p.clone()).or_default() += v * s.seconds;
        }
    }
    let links = web
        .egress
        .links()
        .into_iter()
        .map(|l| LinkSeries {
            points: buckets
                .iter()
                .filter_map(|(k, (secs, links, _))| {
                    let (tx, rx) = links.get(&l.name)?;
                    Some(LinkPoint {
                        t: *k as f64 * step,
                        tx_bytes_s: tx / secs,
                        rx_bytes_s: rx / secs,
                        tx_bytes: *tx,
                        rx_bytes: *rx,
                    })
                })
                .collect(),
            name: l.name,
            kind: l.kind,
            master: l.master,
            speed_mbps: l.speed_mbps,
            addresses: l.addresses,
        })
        .collect();
    let protos: std::collections::BTreeSet<String> = samples
        .iter()
        .flat_map(|s| s.protocols.keys().cloned())
        .collect();
    let protocols = protos
        .into_iter()
        .map(|p| ProtoSeries {
            points: buckets
                .iter()
                .map(|(k, (secs, _, sums))| ProtoPoint {
                    t: *k as f64 * step,
                    bytes_s: sums.get(&p).copied().unwrap_or(0.0) / secs,
                })
                .collect(),
            proto: p,
        })
        .collect();
    Json(EgressView {
        step_s: step,
        links,
        protocols,
    })
}

/// Server-Sent Events: `boot` whenever a boot changes, `egress` every second.
async fn stream(State(web): State<Web>) -> impl IntoResponse {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use futures_util::StreamExt;
    use tokio_stream::wrappers::{BroadcastStream, IntervalStream};
    let boots = BroadcastStream::new(web.records.changes.subscribe()).filter_map(|b| async move {
        // A lagging reader skips what it missed; the next change of each boot catches it up.
        let b = b.ok()?;
        Event::default()
            .event("boot")
            .json_data(b)
            .ok()
            .map(Ok::<_, std::convert::Infallible>)
    });
    let egress = web.egress.clone();
    let ticks = IntervalStream::new(tokio::time::interval(std::time::Duration::from_secs(1)))
        .filter_map(move |_| {
            let latest = egress.latest();
            async move {
                let s = latest?;
                Event::default().event("egress").json_data(s).ok().map(Ok)
            }
        });
    Sse::new(futures_util::stream::select(boots, ticks)).keep_alive(KeepAlive::default())
}

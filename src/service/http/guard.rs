//! Who may read and act: `server.read_token` for the dashboard, the read API and /metrics
//! (bearer header or cookie) from anyone, else the rule of `readers.rs`; the admin token for
//! the actions (every POST of the API but the clients' own reports).

use super::readers::{self, Reader};
use super::web::Web;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::response::Response;
use std::net::SocketAddr;

/// The cookie a browser keeps the read token in, once it opened a page with `?token=`.
pub(super) const TOKEN_COOKIE: &str = "bootpool_token";

/// The dashboard, the read API, the stream, the consoles and /metrics: read with the read
/// token (`server.read_token`) from anywhere, as `Authorization: Bearer TOKEN` (scripts,
/// Prometheus) or a `?token=TOKEN` on any of them, which also sets a cookie so the dashboard's
/// own requests carry it; without it only by whom `readers::reader` lets read (the server host,
/// `server.admin_networks`, /metrics with `server.metrics_open`; never a client subnet). Boot
/// files and the clients' reports never need it (their rule is the lease table's); a client's
/// boot script (its address and command line) needs the token from anyone but that client
/// when one is set (`http::boot::boot_script`, with `carried`); actions ask the admin token
/// in their handlers. 401 (a read token is set) or 403 otherwise.
pub(super) async fn read_guard(
    State(web): State<Web>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let config = web.config.load();
    let path = req.uri().path();
    let post = req.method() == axum::http::Method::POST;
    let client_route =
        path.starts_with("/boot/") || (post && matches!(path, "/api/v1/booted" | "/api/v1/failed"));
    // Actions (every other POST of the API) ask their own token (`admin_refusal`), never
    // the read token.
    let action = post && path.starts_with("/api/v1/");
    if client_route || action {
        return next.run(req).await;
    }
    let token = config.server.read_token.as_deref();
    if let Some(token) = token {
        let carried = carried(req.headers(), req.uri().query(), token);
        if carried.any() {
            let mut res = next.run(req).await;
            if carried.query && !carried.cookie {
                let set = format!("{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
                if let Ok(v) = axum::http::HeaderValue::from_str(&set) {
                    res.headers_mut().append(header::SET_COOKIE, v);
                }
            }
            return res;
        }
    }
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let reader = peer.map_or(Reader::Elsewhere, |ip| {
        readers::reader(&config, ip, path, readers::host_holds)
    });
    if reader.may_read() {
        return next.run(req).await;
    }
    static REFUSED: crate::service::bounds::LogLimit = crate::service::bounds::LogLimit::new();
    if let Some(suppressed) = REFUSED.allow() {
        tracing::info!(peer = ?peer, ?reader, path, suppressed, "read refused: not the server host nor server.admin_networks, and no read token");
    }
    match token {
        Some(_) => unauthorized(),
        None => (
            StatusCode::FORBIDDEN,
            match reader {
                Reader::Client => "a client subnet reads bootpool's dashboard and API only with server.read_token, which is not set\n",
                _ => "this address may not read bootpool's dashboard and API: read from the server host, from an address of server.admin_networks, or set server.read_token (docs/security.md)\n",
            },
        )
            .into_response(),
    }
}

/// Where a request carried the read token.
pub(super) struct Carried {
    pub bearer: bool,
    pub cookie: bool,
    pub query: bool,
}

impl Carried {
    pub fn any(&self) -> bool {
        self.bearer || self.cookie || self.query
    }
}

/// Whether a request with `headers` and `query` carries the read `token` (as a bearer
/// header, the cookie or `?token=`), and where.
pub(super) fn carried(headers: &HeaderMap, query: Option<&str>, token: &str) -> Carried {
    let same = |given: &str| same_token(given, token);
    let bearer = bearer(headers).is_some_and(same);
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix(TOKEN_COOKIE)?.strip_prefix('='))
        .any(same);
    let query = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|kv| kv.strip_prefix("token="))
        .any(same);
    Carried {
        bearer,
        cookie,
        query,
    }
}

/// The answer to a request that needed the read token and did not carry it.
pub(super) fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer realm=\"bootpool\"")],
        "this server needs its read token: Authorization: Bearer TOKEN, or ?token=TOKEN\n",
    )
        .into_response()
}

/// The token of an `Authorization: Bearer TOKEN` header.
pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// Whether `given` is `token`, compared in time independent of where they differ.
pub(super) fn same_token(given: &str, token: &str) -> bool {
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
pub(super) fn admin_refusal(web: &Web, headers: &HeaderMap) -> Option<Response> {
    let config = web.config.load();
    let Some(token) = config.server.admin_token.as_deref() else {
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

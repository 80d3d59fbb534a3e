//! Who may read and act: `server.read_token` for the dashboard, the read API and /metrics
//! (bearer header or cookie), the admin token for the lease actions.

use super::web::Web;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::response::Response;

/// The cookie a browser keeps the read token in, once it opened a page with `?token=`.
pub(super) const TOKEN_COOKIE: &str = "bootpool_token";

/// With `server.read_token` set, the dashboard, the read API, the stream and /metrics need
/// it: as `Authorization: Bearer TOKEN` (scripts, Prometheus), or a `?token=TOKEN` on any of
/// them, which also sets a cookie so the dashboard's own requests carry it. Boot files and
/// the clients' reports never need it (their rule is the lease table's); a client's boot
/// script (its address and command line) needs it from anyone but that client
/// (`http::boot::boot_script`, with `carried`). 401 otherwise.
pub(super) async fn read_guard(
    State(web): State<Web>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let config = web.config.load();
    let Some(token) = config.server.read_token.as_deref() else {
        return next.run(req).await;
    };
    let path = req.uri().path();
    let post = req.method() == axum::http::Method::POST;
    let client_route =
        path.starts_with("/boot/") || (post && matches!(path, "/api/v1/booted" | "/api/v1/failed"));
    // Actions ask their own token (`admin_refusal`), never the read token.
    let action = post
        && (path.starts_with("/api/v1/leases/")
            || matches!(path, "/api/v1/next-boot" | "/api/v1/wake"));
    if client_route || action {
        return next.run(req).await;
    }
    let carried = carried(req.headers(), req.uri().query(), token);
    if !carried.any() {
        return unauthorized();
    }
    let mut res = next.run(req).await;
    if carried.query && !carried.cookie {
        let set = format!("{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
        if let Ok(v) = axum::http::HeaderValue::from_str(&set) {
            res.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    res
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

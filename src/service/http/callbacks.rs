//! The booted system's calls: `POST /api/v1/booted` and `/failed`, believed only from the
//! address the client's lease holds.

use super::web::Web;
use crate::record::{Kind, Who};
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;
use serde::Deserialize;
use std::net::SocketAddr;

#[derive(Debug, Default, Deserialize)]
pub(super) struct BootedBody {
    pub(super) uptime_s: Option<f64>,
    pub(super) root_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct FailedBody {
    pub(super) reason: Option<String>,
}

/// Longest reason kept from a client's failure report.
pub(super) const REASON_MAX: usize = 200;

/// The client reporting on its own boot, as the lease table knows the address it calls from:
/// only the holder of a lease writes a boot record (on a loopback server, the test's own host
/// is its client). A stranger gets 403, an empty body is no details, any other body must be
/// a JSON object of the documented fields (400 if not).
pub(super) fn reporter<T: serde::de::DeserializeOwned + Default>(
    web: &Web,
    peer: SocketAddr,
    body: &[u8],
) -> Result<(Who, T), (StatusCode, String)> {
    let Some(ip) = crate::service::ipv4_of(peer.ip()) else {
        return Err((StatusCode::BAD_REQUEST, "IPv4 clients only\n".into()));
    };
    let who = match web.identity.holder(peer.ip()) {
        Some(mac) => Who::Mac(mac),
        None if crate::boot::exports::loopback_test(&web.config.load(), ip) => Who::Ip(ip),
        None => {
            static REFUSED: crate::service::bounds::LogLimit =
                crate::service::bounds::LogLimit::new();
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
pub(super) async fn booted(
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
pub(super) async fn failed(
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

//! `POST /api/v1/wake` (admin token): Wake-on-LAN for a client, a room or a pool, paced
//! (`service::wake`); answers the wake, whose id its boots carry. `GET /api/v1/wakes` (read
//! side): the wakes so far.

use super::guard::admin_refusal;
use super::web::Web;
use crate::config::{Mac, Subnet};
use crate::service::wake::{WakeRecord, Whom};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

/// One of `client`, `room`, `pool`; `per_second` (default `boot::wake::DEFAULT_PER_SECOND`),
/// bounded by the links.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WakeBody {
    client: Option<String>,
    room: Option<String>,
    pool: Option<String>,
    per_second: Option<u32>,
}

pub(super) async fn wake(
    State(web): State<Web>,
    headers: HeaderMap,
    body: Result<Json<WakeBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    if let Some(refusal) = admin_refusal(&web, &headers) {
        return refusal;
    }
    let bad = |reason: String| (StatusCode::BAD_REQUEST, format!("{reason}\n")).into_response();
    let body = match body {
        Ok(Json(b)) => b,
        Err(e) => return bad(e.body_text()),
    };
    if body.per_second == Some(0) {
        return bad("per_second: must be at least 1".into());
    }
    let whom = match (body.client, body.room, body.pool) {
        (Some(mac), None, None) => match mac.parse::<Mac>() {
            Ok(mac) => Whom::Client(mac),
            Err(e) => return bad(format!("client: {e}")),
        },
        (None, Some(room), None) => match room.parse::<Subnet>() {
            Ok(subnet) => Whom::Room(subnet),
            Err(e) => return bad(format!("room: {e}")),
        },
        (None, None, Some(pool)) => Whom::Pool(pool),
        _ => return bad("name exactly one of client, room, pool".into()),
    };
    match web.wake.wake(&whom, body.per_second, "admin") {
        Ok(record) => Json(record).into_response(),
        Err(reason) => (StatusCode::NOT_FOUND, format!("{reason}\n")).into_response(),
    }
}

pub(super) async fn wakes(State(web): State<Web>) -> Json<Vec<WakeRecord>> {
    Json(web.wake.wakes())
}

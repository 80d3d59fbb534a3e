//! The unknown clients and their enrolment: `GET /api/v1/unknown` (read token) lists the
//! clients no pool lists that asked (`service::unknown`); `POST /api/v1/clients` (admin token)
//! enrols one into a pool (`service::enrol`: the enrolments file, then a reload), and it
//! boots at its next request; `POST /api/v1/clients/MAC/remove` (admin token) takes one out.

use super::guard::admin_refusal;
use super::web::Web;
use crate::config::Mac;
use crate::config::enrolments::{Enrolment, Refused};
use crate::service::enrol::Failed;
use crate::service::unknown::Stranger;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

/// `GET /api/v1/unknown`: the clients no pool lists that asked, the one seen last first
/// (a client enrolled since is left out).
pub(super) async fn unknown(State(web): State<Web>) -> Json<Vec<Stranger>> {
    let config = web.config.load();
    let mut listed = web.unknown.list();
    listed.retain(|s| config.listed(s.mac).is_none());
    Json(listed)
}

/// The body of `POST /api/v1/clients`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Enrol {
    mac: String,
    pool: String,
    name: Option<String>,
}

/// `POST /api/v1/clients` with `{mac, pool, name?}`: 200 with the client and the config
/// generation that serves it; 400 for a bad MAC, 409 when the pools or the enrolments say no
/// (the MAC listed, no such pool, the name taken), 500 when the file could not be written or
/// the reload failed.
pub(super) async fn enrol(
    State(web): State<Web>,
    headers: HeaderMap,
    body: Result<Json<Enrol>, axum::extract::rejection::JsonRejection>,
) -> Response {
    if let Some(refusal) = admin_refusal(&web, &headers) {
        return refusal;
    }
    let Json(body) = match body {
        Ok(body) => body,
        Err(e) => {
            let why = format!("the body must be {{\"mac\", \"pool\", \"name\"?}}: {e}\n");
            return (StatusCode::BAD_REQUEST, why).into_response();
        }
    };
    let mac = match body.mac.parse::<Mac>() {
        Ok(mac) => mac,
        Err(why) => return (StatusCode::BAD_REQUEST, format!("{why}\n")).into_response(),
    };
    let name = body.name.filter(|n| !n.trim().is_empty());
    let enrolment = Enrolment {
        mac,
        pool: body.pool,
        name,
    };
    let config = web.config.load();
    match web.enrol.enrol(&config, enrolment.clone()).await {
        Ok(done) => {
            web.unknown.forget(mac);
            tracing::info!(%mac, pool = %enrolment.pool, name = enrolment.name.as_deref().unwrap_or("-"),
                file = %done.file.display(), generation = done.generation, "client enrolled by the API");
            Json(serde_json::json!({
                "mac": mac.to_string(),
                "pool": enrolment.pool,
                "name": enrolment.name,
                "file": done.file,
                "generation": done.generation,
            }))
            .into_response()
        }
        Err(Failed::Refused(Refused::Conflict(why))) => {
            (StatusCode::CONFLICT, format!("{why}\n")).into_response()
        }
        Err(e) => {
            tracing::error!(%mac, error = %e, "enrolment failed");
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()
        }
    }
}

/// `POST /api/v1/clients/MAC/remove`: the machine taken out of the enrolments file, then the config
/// reloaded, so it is refused at its next request. 200 with the MAC and the generation that
/// serves the change; 400 for a bad MAC; 409 when the enrolments file does not hold it (one
/// listed in pools.yaml is named, to be removed there); 500 when the file could not be
/// written or the reload failed.
pub(super) async fn unenrol(
    State(web): State<Web>,
    headers: HeaderMap,
    axum::extract::Path(mac): axum::extract::Path<String>,
) -> Response {
    if let Some(refusal) = admin_refusal(&web, &headers) {
        return refusal;
    }
    let mac = match mac.parse::<Mac>() {
        Ok(mac) => mac,
        Err(why) => return (StatusCode::BAD_REQUEST, format!("{why}\n")).into_response(),
    };
    let config = web.config.load();
    match web.enrol.unenrol(&config, mac).await {
        Ok(done) => {
            tracing::info!(%mac, file = %done.file.display(), generation = done.generation,
                "client removed by the API");
            Json(serde_json::json!({
                "mac": mac.to_string(),
                "file": done.file,
                "generation": done.generation,
            }))
            .into_response()
        }
        Err(Failed::Refused(Refused::Conflict(why))) => {
            (StatusCode::CONFLICT, format!("{why}\n")).into_response()
        }
        Err(e) => {
            tracing::error!(%mac, error = %e, "removal failed");
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()
        }
    }
}

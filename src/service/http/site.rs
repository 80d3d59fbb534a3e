//! `GET /api/v1/site` (read side): the members of this server's site, live or not, their
//! links, rooms and share of the clients, as this server sees them (`site::report`), each
//! one's clients by the state of their newest boot, and whether the records' database
//! answers (`record::follow`); and keepalived's word that this host took a member's address
//! over or gave it back (admin).

use super::guard::admin_refusal;
use super::web::Web;
use crate::site::report::Report;
use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use std::collections::BTreeMap;

/// The site as this member sees it, with whether its records' database answers and each
/// member's clients by the state of their newest boot.
#[derive(serde::Serialize)]
pub(super) struct SiteView {
    #[serde(flatten)]
    report: Report,
    /// Whether the records' database answers, and what waits in `state_dir/records.spool`.
    records: crate::record::follow::Reach,
    /// Per member, its clients whose newest boot it recorded: booting, booted, failed.
    clients: BTreeMap<String, Clients>,
}

#[derive(Default, serde::Serialize)]
pub(super) struct Clients {
    booting: usize,
    booted: usize,
    failed: usize,
}

pub(super) async fn site(State(web): State<Web>) -> Json<SiteView> {
    use crate::record::BootResult;
    let site = &web.site;
    let me = &site.me().name;
    let mut clients: BTreeMap<String, Clients> = BTreeMap::new();
    let newest: Vec<_> = web.records.read(|t| {
        let mut last = BTreeMap::new();
        for b in t.boots() {
            last.insert(b.mac, b.result);
        }
        last.into_iter().collect()
    });
    for (mac, result) in newest {
        let c = clients
            .entry(web.records.site.member_of(mac, me))
            .or_default();
        match result {
            BootResult::Running => c.booting += 1,
            BootResult::Booted => c.booted += 1,
            BootResult::Failed => c.failed += 1,
        }
    }
    Json(SiteView {
        report: Report::of_member(&site.view(), site.me(), site.shared()),
        records: web.records.site.reach(),
        clients,
    })
}

/// `{"address": "10.0.0.1"}`: an address of a member of the site.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AddressBody {
    address: std::net::Ipv4Addr,
}

/// `POST /api/v1/site/takeover` (admin token; keepalived's notify through `bootpool site
/// takeover`): this host is now the master of a member's address. It is served from now on,
/// and the connections other members recorded to it are tickled (`service::takeover`).
pub(super) async fn takeover(
    State(web): State<Web>,
    headers: HeaderMap,
    body: Result<Json<AddressBody>, JsonRejection>,
) -> Response {
    move_address(&web, &headers, body, true)
}

/// `POST /api/v1/site/release` (admin token; `bootpool site release`): this host no longer
/// holds a member's address; connections made to it are refused again.
pub(super) async fn release(
    State(web): State<Web>,
    headers: HeaderMap,
    body: Result<Json<AddressBody>, JsonRejection>,
) -> Response {
    move_address(&web, &headers, body, false)
}

fn move_address(
    web: &Web,
    headers: &HeaderMap,
    body: Result<Json<AddressBody>, JsonRejection>,
    take: bool,
) -> Response {
    if let Some(refusal) = admin_refusal(web, headers) {
        return refusal;
    }
    let ip = match body {
        Ok(Json(b)) => b.address,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{}\n", e.body_text())).into_response(),
    };
    let site = &web.site;
    let view = site.view();
    let members = view.seen().iter().map(|s| &s.member).chain([site.me()]);
    let Some(owner) = members
        .into_iter()
        .find(|m| m.links.contains(&ip) || m.addresses.contains(&ip.into()))
    else {
        return (
            StatusCode::NOT_FOUND,
            format!("{ip} is no member's address (server.address, server.links) in this site\n"),
        )
            .into_response();
    };
    let owner = owner.name.clone();
    match take {
        true => site.held().take(ip),
        false => {
            site.held().release(ip);
        }
    }
    tracing::info!(address = %ip, owner, held = take, "site address {}",
        if take { "taken over" } else { "released" });
    Json(serde_json::json!({ "address": ip, "owner": owner, "held": take })).into_response()
}

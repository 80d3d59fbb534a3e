//! `POST /api/v1/next-boot` (admin token): what a client, a room or a pool boots next, once
//! or until changed (`boot::next`), kept by `service::next_boot`; `GET /api/v1/next-boot`
//! (read side): what stands.

use super::guard::admin_refusal;
use super::web::Web;
use crate::boot::next::{Entry, MEMTEST_BIOS, MEMTEST_UEFI, NextBoots, Scope, Target};
use crate::config::{Config, Mac, Subnet};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

/// The request's body: one of `client`, `room`, `pool`; `boot` a target; `once` (default
/// false: until changed).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NextBootBody {
    client: Option<String>,
    room: Option<String>,
    pool: Option<String>,
    boot: String,
    #[serde(default)]
    once: bool,
}

pub(super) async fn set_next_boot(
    State(web): State<Web>,
    headers: HeaderMap,
    body: Result<Json<NextBootBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    if let Some(refusal) = admin_refusal(&web, &headers) {
        return refusal;
    }
    let Json(body) = match body {
        Ok(b) => b,
        Err(e) => return bad(e.body_text()),
    };
    let config = web.config.load();
    let entry = match entry_of(&config, body) {
        Ok(e) => e,
        Err((status, reason)) => return (status, format!("{reason}\n")).into_response(),
    };
    if let Err(e) = web.next.set(entry.clone()) {
        tracing::error!(error = %e, "next boot: the state file could not be written");
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the next-boot state could not be written: {e}\n"),
        )
            .into_response();
    }
    tracing::info!(next_boot = %entry.sentence(), "next boot set");
    Json(entry).into_response()
}

pub(super) async fn next_boots(State(web): State<Web>) -> Json<NextBoots> {
    Json(web.next.all())
}

fn bad(reason: String) -> Response {
    (StatusCode::BAD_REQUEST, format!("{reason}\n")).into_response()
}

/// The entry a request says, checked against the config: its scope exists, its target can be
/// served to it.
fn entry_of(config: &Config, body: NextBootBody) -> Result<Entry, (StatusCode, String)> {
    let bad = |reason: String| (StatusCode::BAD_REQUEST, reason);
    let scope = match (body.client, body.room, body.pool) {
        (Some(mac), None, None) => {
            let mac: Mac = mac.parse().map_err(|e| bad(format!("client: {e}")))?;
            if config.member(mac).is_none() {
                return Err((
                    StatusCode::NOT_FOUND,
                    format!("client {mac}: no pool lists it"),
                ));
            }
            Scope::Client(mac)
        }
        (None, Some(room), None) => {
            let subnet: Subnet = room.parse().map_err(|e| bad(format!("room: {e}")))?;
            if !config.dhcp.subnets.iter().any(|s| s.subnet == subnet) {
                let known: Vec<String> = config
                    .dhcp
                    .subnets
                    .iter()
                    .map(|s| s.subnet.to_string())
                    .collect();
                return Err((
                    StatusCode::NOT_FOUND,
                    format!(
                        "room {subnet}: not one of dhcp.subnets ({})",
                        known.join(", ")
                    ),
                ));
            }
            Scope::Room(subnet)
        }
        (None, None, Some(pool)) => {
            if !config.pools.contains_key(&pool) {
                return Err((StatusCode::NOT_FOUND, format!("pool {pool}: no such pool")));
            }
            Scope::Pool(pool)
        }
        _ => return Err(bad("name exactly one of client, room, pool".into())),
    };
    let target: Target = body
        .boot
        .parse()
        .map_err(|e: String| bad(format!("boot: {e}")))?;
    servable(config, &scope, &target).map_err(|reason| (StatusCode::CONFLICT, reason))?;
    Ok(Entry {
        scope,
        target,
        once: body.once,
        set_at: crate::record::event::now_micros() / 1_000_000,
        by: "admin".into(),
        used: Vec::new(),
    })
}

/// Whether `target` can be served to `scope`: an image the config has, which the pools of a
/// client or a pool may mount by the root rule (`boot::exports::root_allowed`: a pool's clients
/// mount only its own images); a revision on disk; memtest86+'s files in `server.memtest`.
fn servable(config: &Config, scope: &Scope, target: &Target) -> Result<(), String> {
    let image = match target {
        Target::Image(name) | Target::Revision(name, _) => {
            let Some(image) = config.images.get(name) else {
                return Err(format!("{target}: no image {name} in the config"));
            };
            image
        }
        Target::Memtest => {
            let dir = &config.server.memtest;
            return match [MEMTEST_BIOS, MEMTEST_UEFI]
                .iter()
                .all(|f| dir.join(f).is_file())
            {
                true => Ok(()),
                false => Err(format!(
                    "memtest: {} lacks {MEMTEST_BIOS} and {MEMTEST_UEFI} (install Debian's \
                     memtest86+ package, or set server.memtest)",
                    dir.display()
                )),
            };
        }
        Target::Local | Target::Menu | Target::Default => return Ok(()),
    };
    if let Target::Revision(_, rev) = target
        && !crate::image::store::rev_dir(&image.dir, rev.as_str()).is_dir()
    {
        return Err(format!(
            "{target}: image {} has no revision {rev} (bootpool image list {})",
            image.name, image.name
        ));
    }
    let pool = match scope {
        Scope::Client(mac) => config.member(*mac).map(|m| m.pool),
        Scope::Pool(p) => config.pools.get(p),
        Scope::Room(_) => None,
    };
    if let Some(pool) = pool
        && !pool.images().iter().any(|i| i.name == image.name)
    {
        return Err(format!(
            "{target}: pool {}'s clients may mount only its own images ({}), by the root rule",
            pool.name,
            pool.images()
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(())
}

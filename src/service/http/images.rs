//! `GET /api/v1/images`: each image's revisions, the active one, and how many running clients
//! need a reboot to get it (`image::usage`, over the in-memory boots); and the admin's
//! `POST /api/v1/images/NAME/activate`.

use super::guard::admin_refusal;
use super::web::{Web, not_found};
use crate::config::{Config, Image, Wire};
use crate::image::copies::{self, Kind};
use crate::image::{serve, store, usage};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize)]
pub struct ImageLine {
    pub image: String,
    /// False for a folder assembled by hand (no revisions).
    pub revisions_managed: bool,
    /// The active revision's id and label (`r7`).
    pub active: Option<String>,
    pub active_label: Option<String>,
    pub revisions: Vec<RevisionLine>,
    /// Clients whose newest boot runs a revision of this image, and those on another than
    /// the active one.
    pub clients: usize,
    pub need_reboot: usize,
    /// `image demo: 12 of 40 running clients need a reboot to get r7 (ID)`.
    pub summary: Option<String>,
    /// For `initrd_wire: zstd`: the serving initrd's size and what a client gets now.
    pub initrd_wire: Option<WireLine>,
    /// For `root_wire: zstd`: the serving root image's size and what a boot starting now
    /// gets.
    pub root_wire: Option<WireLine>,
}

#[derive(Debug, Serialize)]
pub struct WireLine {
    pub file_bytes: u64,
    #[serde(flatten)]
    pub status: copies::Status,
}

#[derive(Debug, Serialize)]
pub struct RevisionLine {
    pub id: String,
    pub label: String,
    pub hash: String,
    pub format: String,
    pub imported_at: u64,
    pub clients: usize,
}

pub async fn images(State(web): State<Web>) -> Json<Vec<ImageLine>> {
    let now = crate::record::event::now_micros();
    let config = web.config.load();
    let running = web.records.read(|t| usage::running(&config, t, now, None));
    let lines = tokio::task::spawn_blocking(move || {
        config
            .images
            .values()
            .map(|image| {
                let managed = store::managed(&image.dir);
                let revs = store::list(&image.dir).unwrap_or_default();
                let active = usage::active_revisions_of(image);
                let behind = usage::behind(&running, &active).into_iter().next();
                ImageLine {
                    image: image.name.clone(),
                    revisions_managed: managed,
                    active: behind.as_ref().map(|b| b.active.clone()),
                    active_label: behind.as_ref().map(|b| b.label.clone()),
                    revisions: revs
                        .iter()
                        .map(|r| RevisionLine {
                            id: r.id.clone(),
                            label: r.label(),
                            hash: r.meta.hash.clone(),
                            format: r.meta.format.clone(),
                            imported_at: r.meta.imported_at,
                            clients: running
                                .iter()
                                .filter(|c| c.image == image.name && c.revision == r.id)
                                .count(),
                        })
                        .collect(),
                    clients: behind.as_ref().map_or(0, |b| b.clients),
                    need_reboot: behind.as_ref().map_or(0, |b| b.need_reboot),
                    summary: behind.as_ref().map(usage::Behind::sentence),
                    initrd_wire: wire_line(&config, image, Kind::Initrd),
                    root_wire: wire_line(&config, image, Kind::Root),
                }
            })
            .collect()
    })
    .await
    .unwrap_or_default();
    Json(lines)
}

/// The `initrd_wire` or `root_wire` line of an image: its serving revision's file.
fn wire_line(config: &Config, image: &std::sync::Arc<Image>, kind: Kind) -> Option<WireLine> {
    let serving = serve::serving(image);
    let (wire, file) = match kind {
        Kind::Initrd => (image.initrd_wire, serving.initrd()),
        Kind::Root => (image.root_wire, serving.root_image()),
    };
    if wire != Wire::Zstd {
        return None;
    }
    Some(WireLine {
        file_bytes: std::fs::metadata(&file).map_or(0, |m| m.len()),
        status: copies::status(&config.server.state_dir, &file, kind),
    })
}

#[derive(Debug, Deserialize)]
pub struct ActivateBody {
    /// A revision's label (`r7`) or id (its first four characters or more).
    pub rev: String,
}

/// `POST /api/v1/images/NAME/activate` with `{"rev": "r7"}` (admin token): makes that
/// revision the active one, as `bootpool image activate NAME REV` does (the same code,
/// `image::cli::activate`): boots starting from now get it, running clients keep theirs. 200
/// with the sentence the CLI prints, 404 for an image the config does not name, 400 for a
/// revision it cannot find or an image without revisions.
pub async fn activate(
    State(web): State<Web>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Some(refusal) = admin_refusal(&web, &headers) {
        return refusal;
    }
    let body: ActivateBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            let msg = format!("the body must be {{\"rev\": \"r7\"}} (docs/api.md): {e}\n");
            return (StatusCode::BAD_REQUEST, msg).into_response();
        }
    };
    let config = web.config.load();
    if !config.images.contains_key(&name) {
        return not_found(&format!("no image `{name}` in the config"));
    }
    let rev = body.rev.clone();
    let done = tokio::task::spawn_blocking(move || {
        crate::image::cli::activate(&config, &name, &rev).map(|said| (name, said))
    })
    .await;
    match done {
        Ok(Ok((name, said))) => {
            tracing::info!(image = %name, rev = %body.rev, "image activated through the API");
            Json(serde_json::json!({ "image": name, "activated": true, "message": said }))
                .into_response()
        }
        Ok(Err(e)) => (StatusCode::BAD_REQUEST, format!("{e:#}\n")).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the activation did not finish\n",
        )
            .into_response(),
    }
}

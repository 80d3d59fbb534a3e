//! `GET /api/v1/images`: each image's revisions, the active one, and how many running clients
//! need a reboot to get it (`image::usage`, over the in-memory boots).

use super::web::Web;
use crate::config::{Config, Image, Wire};
use crate::image::copies::{self, Kind};
use crate::image::{serve, store, usage};
use axum::Json;
use axum::extract::State;
use serde::Serialize;

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

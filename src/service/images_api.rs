//! `GET /api/v1/images`: each image's revisions, the active one, and how many running clients
//! need a reboot to get it (`image::usage`, over the in-memory boots).

use super::http::Web;
use crate::config::{Config, Image, Wire};
use crate::export::wire;
use crate::export::wire::Kind;
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
    pub status: wire::Status,
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
    let config = web.config.clone();
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
        status: wire::status(&config.server.state_dir, &file, kind),
    })
}

/// The images whose initrd's or root's wire copy is still being made, from `GET
/// /api/v1/images`'s body.
pub fn wire_pending(body: &str) -> anyhow::Result<Vec<String>> {
    let images: Vec<serde_json::Value> = serde_json::from_str(body)?;
    Ok(images
        .iter()
        .filter(|i| i["initrd_wire"]["state"] == "pending" || i["root_wire"]["state"] == "pending")
        .filter_map(|i| i["image"].as_str().map(String::from))
        .collect())
}

/// Asks the images API (`fetch` returns its body) until no image's wire copy is pending,
/// for `WIRE_WAIT` at most, saying on stderr what it waits for (again every 30 s): `bootpool
/// lab` and `bootpool storm` (`who`) power their room on after it, so every client of a run
/// gets the same files. A first root copy takes minutes (the demo's: about one on one
/// niced core).
pub fn wait_while_wire_pending(
    who: &str,
    fetch: &mut dyn FnMut() -> anyhow::Result<String>,
) -> anyhow::Result<()> {
    const WIRE_WAIT: std::time::Duration = std::time::Duration::from_secs(900);
    let started = std::time::Instant::now();
    let mut said: Option<std::time::Instant> = None;
    while started.elapsed() < WIRE_WAIT {
        let pending = wire_pending(&fetch()?)?;
        if pending.is_empty() {
            return Ok(());
        }
        if said.is_none_or(|at| at.elapsed().as_secs() >= 30) {
            eprintln!(
                "{who}: waiting for the wire copies (initrd, root image) of {} ({} s so far)",
                pending.join(", "),
                started.elapsed().as_secs()
            );
            said = Some(std::time::Instant::now());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    anyhow::bail!(
        "the wire copies were not made within {} s (see the daemon's log)",
        WIRE_WAIT.as_secs()
    )
}

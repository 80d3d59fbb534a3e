//! The JSON API under `/api/v1/` (docs/api.md): boots, waves, compare, pools, clients,
//! egress, the event stream, and the admin's lease release.

use super::guard::admin_refusal;
use super::web::{Web, not_found};
use crate::config::Mac;
use crate::record::egress::LinkKind;
use crate::record::event::now_micros;
use crate::record::view::{BootView, SummaryView, WaveView};
use crate::record::{view, wave};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /api/v1/leases/MAC/release`: ends the MAC's binding through the DHCP service (as a
/// DHCPRELEASE would: the address goes back to the range, and NFS and NBD stop serving it to
/// that address). 200 with the address released, 404 when the MAC holds no lease.
pub(super) async fn release_lease(
    State(web): State<Web>,
    Path(mac): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = admin_refusal(&web, &headers) {
        return refusal;
    }
    let Ok(mac) = mac.parse::<Mac>() else {
        return (
            StatusCode::BAD_REQUEST,
            format!("`{mac}` is not a MAC address\n"),
        )
            .into_response();
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    let asked = web
        .dhcp
        .send(crate::service::dhcp::Command::Release { mac, reply })
        .await;
    let released = match (
        asked,
        tokio::time::timeout(std::time::Duration::from_secs(5), answer).await,
    ) {
        (Ok(()), Ok(Ok(released))) => released,
        _ => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "the DHCP service did not answer\n",
            )
                .into_response();
        }
    };
    // The DHCP service logs the release.
    match released {
        Some(ip) => Json(serde_json::json!({ "mac": mac.to_string(), "ip": ip, "released": true }))
            .into_response(),
        None => (StatusCode::NOT_FOUND, format!("{mac} holds no lease\n")).into_response(),
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct BootsQuery {
    pub(super) pool: Option<String>,
    pub(super) mac: Option<String>,
    /// Unix seconds: only boots that started at or after this.
    pub(super) since: Option<f64>,
}

pub(super) async fn boots(
    State(web): State<Web>,
    Query(q): Query<BootsQuery>,
) -> Json<Vec<BootView>> {
    Json(web.records.read(|t| {
        let now = now_micros();
        let waves = wave::Membership::of(t.boots());
        t.boots()
            .iter()
            .filter(|b| q.pool.as_ref().is_none_or(|p| b.pool.as_ref() == Some(p)))
            .filter(|b| {
                q.mac
                    .as_ref()
                    .is_none_or(|m| m.parse::<Mac>().is_ok_and(|m| m == b.mac))
            })
            .filter(|b| q.since.is_none_or(|s| b.start as f64 / 1e6 >= s))
            .map(|b| BootView::in_wave(b, waves.wave(b.id), now))
            .collect()
    }))
}

/// Waves without their boots: what a list of waves needs.
#[derive(Serialize)]
pub(super) struct WaveLine {
    pub(super) id: u64,
    pub(super) pool: String,
    pub(super) start: f64,
    pub(super) wake: Option<wave::WaveWake>,
    pub(super) summary: SummaryView,
}

pub(super) async fn waves(State(web): State<Web>) -> Json<Vec<WaveLine>> {
    Json(web.records.read(|t| {
        wave::waves(t.boots(), now_micros())
            .iter()
            .map(|w| WaveLine {
                id: w.id,
                pool: w.pool.clone(),
                start: w.start,
                wake: w.wake,
                summary: (&w.summary).into(),
            })
            .collect()
    }))
}

/// One boot's console lines, dropped count and cause (docs/api.md).
pub(super) async fn boot_console(State(web): State<Web>, Path(id): Path<u64>) -> Response {
    let found = web.records.read(|t| {
        t.boots()
            .iter()
            .find(|b| b.id == id)
            .map(|b| crate::record::view::ConsoleView::of(b, now_micros()))
    });
    match found {
        Some(v) => Json(v).into_response(),
        None => not_found("no such boot"),
    }
}

pub(super) async fn wave_by_id(State(web): State<Web>, Path(id): Path<u64>) -> Response {
    match find_wave(&web, id) {
        Some(w) => Json(w).into_response(),
        None => not_found("no such wave"),
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct CompareQuery {
    pub(super) a: u64,
    pub(super) b: u64,
}

pub(super) async fn compare(State(web): State<Web>, Query(q): Query<CompareQuery>) -> Response {
    match (find_wave(&web, q.a), find_wave(&web, q.b)) {
        (Some(a), Some(b)) => Json(view::compare(a, b)).into_response(),
        _ => not_found("no such wave"),
    }
}

pub fn find_wave(web: &Web, id: u64) -> Option<WaveView> {
    web.records.read(|t| {
        let now = now_micros();
        wave::waves(t.boots(), now)
            .iter()
            .find(|w| w.id == id)
            .map(|w| WaveView::at(w, t.boots(), now))
    })
}

#[derive(Serialize)]
pub(super) struct PoolLine {
    pub(super) name: String,
    pub(super) image: String,
    /// The image each firmware family its `arch` names boots instead (`arm64` -> image).
    pub(super) arch: std::collections::BTreeMap<String, String>,
    pub(super) root: String,
    /// How many MACs the pool lists.
    pub(super) clients: u64,
    pub(super) latest_wave: Option<u64>,
    /// The pool's machines: the MACs it lists (a range only when it is short enough to be a
    /// room), then any other MAC seen booting in the pool. The room view draws one tile each.
    pub(super) machines: Vec<MachineLine>,
    /// False when a listed range was too long to enumerate: `machines` then holds only the
    /// MACs of that range that have booted.
    pub(super) machines_complete: bool,
}

#[derive(Serialize)]
pub(super) struct MachineLine {
    pub(super) mac: Mac,
    pub(super) name: Option<String>,
    pub(super) ip: Option<std::net::Ipv4Addr>,
    /// Listed in pools.yaml (false: seen booting in this pool, no longer listed there).
    pub(super) listed: bool,
}

/// A range longer than this is not a room's list of machines but a catch-all.
pub(super) const ENUMERATE_MAX: u64 = 1024;

/// The config served: its file, generation (1 at start, one more per reload applied) and
/// digest (`config::Live`), as `/metrics`' `bootpool_config_generation`; and its rooms, the
/// DHCP subnets, each with its uplink's capacity in bits/s (`null`: none declared).
pub(super) async fn config(State(web): State<Web>) -> Json<serde_json::Value> {
    let served = web.config.served();
    let rooms: Vec<serde_json::Value> = served
        .config
        .dhcp
        .subnets
        .iter()
        .map(|s| {
            serde_json::json!({
                "subnet": s.subnet.to_string(),
                "uplink_bps": s.uplink_mbps.map(|m| u64::from(m) * 1_000_000),
            })
        })
        .collect();
    Json(serde_json::json!({
        "file": served.config.file,
        "generation": served.generation,
        "digest": served.digest,
        "rooms": rooms,
    }))
}

pub(super) async fn pools(State(web): State<Web>) -> Json<Vec<PoolLine>> {
    let (latest, seen) = web.records.read(|t| {
        let latest: BTreeMap<String, u64> = wave::waves(t.boots(), now_micros())
            .into_iter()
            .map(|w| (w.pool, w.id))
            .collect();
        let mut seen: BTreeMap<String, std::collections::BTreeSet<Mac>> = BTreeMap::new();
        for b in t.boots() {
            if let Some(pool) = &b.pool {
                seen.entry(pool.clone()).or_default().insert(b.mac);
            }
        }
        (latest, seen)
    });
    let none = Default::default();
    let config = web.config.load();
    Json(
        config
            .pools
            .values()
            .map(|p| {
                let seen = seen.get(&p.name).unwrap_or(&none);
                let mut machines = Vec::new();
                let mut complete = true;
                for e in &p.clients {
                    let listed = |mac| MachineLine {
                        mac,
                        name: e.name_of(mac),
                        ip: e.ip,
                        listed: true,
                    };
                    if e.macs.len() <= ENUMERATE_MAX {
                        machines
                            .extend((0..e.macs.len()).filter_map(|n| e.macs.nth(n)).map(listed));
                    } else {
                        complete = false;
                        machines.extend(
                            seen.iter()
                                .filter(|m| e.macs.contains(**m))
                                .map(|m| listed(*m)),
                        );
                    }
                }
                for &mac in seen {
                    if !p.clients.iter().any(|e| e.macs.contains(mac)) {
                        machines.push(MachineLine {
                            mac,
                            name: None,
                            ip: None,
                            listed: false,
                        });
                    }
                }
                PoolLine {
                    name: p.name.clone(),
                    image: p.image.name.clone(),
                    arch: p
                        .arch
                        .iter()
                        .map(|(a, v)| (a.name().to_string(), v.image.name.clone()))
                        .collect(),
                    root: p.root.to_string(),
                    clients: p.clients.iter().map(|e| e.macs.len()).sum(),
                    latest_wave: latest.get(&p.name).copied(),
                    machines,
                    machines_complete: complete,
                }
            })
            .collect(),
    )
}

#[derive(Serialize)]
pub(super) struct ClientLine {
    pub(super) mac: String,
    pub(super) name: Option<String>,
    pub(super) pool: Option<String>,
    pub(super) ip: Option<std::net::Ipv4Addr>,
    pub(super) boots: usize,
    pub(super) last: Option<BootView>,
}

/// Every client that has booted at least once, with its newest boot.
pub(super) async fn clients(State(web): State<Web>) -> Json<Vec<ClientLine>> {
    let mut by_mac: BTreeMap<Mac, (usize, Option<BootView>)> = BTreeMap::new();
    web.records.read(|t| {
        let now = now_micros();
        let waves = wave::Membership::of(t.boots());
        let mut last = BTreeMap::new();
        for b in t.boots() {
            by_mac.entry(b.mac).or_default().0 += 1;
            last.insert(b.mac, b);
        }
        for (mac, b) in last {
            by_mac.entry(mac).or_default().1 = Some(BootView::in_wave(b, waves.wave(b.id), now));
        }
    });
    let config = web.config.load();
    Json(
        by_mac
            .into_iter()
            .map(|(mac, (boots, last))| {
                let member = config.member(mac);
                ClientLine {
                    mac: mac.to_string(),
                    name: member.as_ref().and_then(|m| m.name()),
                    pool: member.map(|m| m.pool.name.clone()),
                    ip: last.as_ref().and_then(|b| b.ip),
                    boots,
                    last,
                }
            })
            .collect(),
    )
}

#[derive(Debug, Deserialize)]
pub(super) struct EgressQuery {
    pub(super) since: Option<f64>,
    pub(super) step: Option<f64>,
}

#[derive(Serialize)]
pub(super) struct EgressView {
    pub(super) step_s: f64,
    pub(super) links: Vec<LinkSeries>,
    pub(super) protocols: Vec<ProtoSeries>,
}

#[derive(Serialize)]
pub(super) struct LinkSeries {
    pub(super) name: String,
    pub(super) kind: LinkKind,
    pub(super) master: Option<String>,
    pub(super) speed_mbps: Option<u32>,
    /// The addresses of `server.links` this interface holds: the clients whose `link` is one
    /// of them boot over it.
    pub(super) addresses: Vec<std::net::Ipv4Addr>,
    pub(super) points: Vec<LinkPoint>,
}

#[derive(Serialize)]
pub(super) struct LinkPoint {
    pub(super) t: f64,
    pub(super) tx_bytes_s: f64,
    pub(super) rx_bytes_s: f64,
    /// Bytes counted in this bucket (rates times the sampled time, exactly).
    pub(super) tx_bytes: f64,
    pub(super) rx_bytes: f64,
}

#[derive(Serialize)]
pub(super) struct ProtoSeries {
    pub(super) proto: String,
    pub(super) points: Vec<ProtoPoint>,
}

#[derive(Serialize)]
pub(super) struct ProtoPoint {
    pub(super) t: f64,
    pub(super) bytes_s: f64,
}

/// Egress per link and per protocol, averaged into `step`-second buckets.
pub(super) async fn egress(
    State(web): State<Web>,
    Query(q): Query<EgressQuery>,
) -> Json<EgressView> {
    let now = crate::record::event::now_micros() as f64 / 1e6;
    let since = q.since.unwrap_or(now - 600.0);
    let step = q
        .step
        .filter(|s| s.is_finite() && *s >= 1.0)
        .unwrap_or(1.0)
        .min(3600.0);
    let samples = web.egress.samples_since(since);
    // Bucket start -> (seconds sampled, per-link byte sums, per-protocol byte sums).
    type Sums = (f64, BTreeMap<String, (f64, f64)>, BTreeMap<String, f64>);
    let mut buckets: BTreeMap<i64, Sums> = BTreeMap::new();
    for s in &samples {
        let b = buckets.entry((s.t / step).floor() as i64).or_default();
        b.0 += s.seconds;
        for l in &s.links {
            let e = b.1.entry(l.name.clone()).or_default();
            e.0 += l.tx_bytes_s * s.seconds;
            e.1 += l.rx_bytes_s * s.seconds;
        }
        for (p, v) in &s.protocols {
            *b.2.entry(p.clone()).or_default() += v * s.seconds;
        }
    }
    let links = web
        .egress
        .links()
        .into_iter()
        .map(|l| LinkSeries {
            points: buckets
                .iter()
                .filter_map(|(k, (secs, links, _))| {
                    let (tx, rx) = links.get(&l.name)?;
                    Some(LinkPoint {
                        t: *k as f64 * step,
                        tx_bytes_s: tx / secs,
                        rx_bytes_s: rx / secs,
                        tx_bytes: *tx,
                        rx_bytes: *rx,
                    })
                })
                .collect(),
            name: l.name,
            kind: l.kind,
            master: l.master,
            speed_mbps: l.speed_mbps,
            addresses: l.addresses,
        })
        .collect();
    let protos: std::collections::BTreeSet<String> = samples
        .iter()
        .flat_map(|s| s.protocols.keys().cloned())
        .collect();
    let protocols = protos
        .into_iter()
        .map(|p| ProtoSeries {
            points: buckets
                .iter()
                .map(|(k, (secs, _, sums))| ProtoPoint {
                    t: *k as f64 * step,
                    bytes_s: sums.get(&p).copied().unwrap_or(0.0) / secs,
                })
                .collect(),
            proto: p,
        })
        .collect();
    Json(EgressView {
        step_s: step,
        links,
        protocols,
    })
}

/// Server-Sent Events: `boot` whenever a boot changes, `egress` every second.
pub(super) async fn stream(State(web): State<Web>) -> impl IntoResponse {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use futures_util::StreamExt;
    use tokio_stream::wrappers::{BroadcastStream, IntervalStream};
    let boots = BroadcastStream::new(web.records.changes.subscribe()).filter_map(|b| async move {
        // A lagging reader skips what it missed; the next change of each boot catches it up.
        let b = b.ok()?;
        Event::default()
            .event("boot")
            .json_data(b)
            .ok()
            .map(Ok::<_, std::convert::Infallible>)
    });
    let egress = web.egress.clone();
    let ticks = IntervalStream::new(tokio::time::interval(std::time::Duration::from_secs(1)))
        .filter_map(move |_| {
            let latest = egress.latest();
            async move {
                let s = latest?;
                Event::default().event("egress").json_data(s).ok().map(Ok)
            }
        });
    Sse::new(futures_util::stream::select(boots, ticks)).keep_alive(KeepAlive::default())
}

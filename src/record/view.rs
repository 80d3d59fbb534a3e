//! The shapes the API and `bootpool report` show: boots with their phases in seconds, waves
//! with their boots, and the comparison of two waves. Serialized as JSON; documented in
//! docs/api.md.

use super::event::Proto;
use super::timeline::{Boot, BootResult};
use super::wave::{Summary, Wave};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BootView {
    pub id: u64,
    pub mac: String,
    pub ip: Option<Ipv4Addr>,
    pub pool: Option<String>,
    /// The server link (address) it was told to boot from.
    #[serde(default)]
    pub link: Option<Ipv4Addr>,
    pub root: Option<Proto>,
    /// `running`, `booted`, `failed`, or `timed_out` (running, but silent for `SILENCE_S`).
    pub result: String,
    /// For a timed-out or failed boot, the phase it stopped in.
    pub stopped_in: Option<String>,
    /// For a failed boot, why: what the server refused or lacked, or what the client said.
    #[serde(default)]
    pub failure: Option<String>,
    /// Unix seconds of the first DHCP DISCOVER.
    pub start: f64,
    /// First DISCOVER to the booted call.
    pub duration_s: Option<f64>,
    /// The client's own uptime when it reported up (includes firmware time before DHCP).
    pub uptime_s: Option<f64>,
    /// The root bytes the client itself counted (reported with its booted call).
    pub client_root_bytes: Option<u64>,
    pub phases: Vec<PhaseView>,
    /// The phase it is in now (`booted` once done): dhcp, loader, ipxe, kernel, initrd, root.
    pub current_phase: String,
    /// Unix seconds of the newest event of this boot.
    pub last_event: f64,
    /// Payload bytes sent to the client, per protocol.
    pub bytes: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseView {
    pub name: String,
    pub start: f64,
    pub seconds: f64,
}

/// A boot that has not reported up and sent nothing for this long has timed out. Five minutes
/// is far beyond any phase of a healthy boot, even 40 clients at once under emulation.
pub const SILENCE_S: f64 = 300.0;

impl BootView {
    pub fn of(b: &Boot) -> BootView {
        let now = super::event::now_micros();
        let silent = (now - b.last_event) as f64 / 1e6 > SILENCE_S;
        let timed_out = b.result == BootResult::Running && silent;
        BootView {
            id: b.id,
            mac: b.mac.to_string(),
            ip: b.ip,
            pool: b.pool.clone(),
            link: b.link,
            root: b.root,
            result: match b.result {
                BootResult::Running if timed_out => "timed_out",
                BootResult::Running => "running",
                BootResult::Booted => "booted",
                BootResult::Failed => "failed",
            }
            .into(),
            stopped_in: (timed_out || b.result == BootResult::Failed)
                .then(|| b.current_phase().to_string()),
            failure: b.failure.as_ref().map(|f| match f.proto {
                Some(p) => format!("{}: {}", proto_name(p), f.reason),
                None => format!("client: {}", f.reason),
            }),
            start: b.start as f64 / 1e6,
            duration_s: b.duration_s(),
            uptime_s: b.uptime_s,
            client_root_bytes: b.client_root_bytes,
            phases: b
                .phases()
                .into_iter()
                .map(|p| PhaseView {
                    name: p.name.into(),
                    start: p.start as f64 / 1e6,
                    seconds: (p.end - p.start) as f64 / 1e6,
                })
                .collect(),
            current_phase: b.current_phase().into(),
            last_event: b.last_event as f64 / 1e6,
            bytes: b
                .bytes
                .iter()
                .map(|(p, n)| (proto_name(*p).into(), *n))
                .collect(),
        }
    }

    pub fn phase_s(&self, name: &str) -> Option<f64> {
        self.phases
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.seconds)
    }

    pub fn total_bytes(&self) -> u64 {
        self.bytes.values().sum()
    }
}

pub fn proto_name(p: Proto) -> &'static str {
    match p {
        Proto::Dhcp => "dhcp",
        Proto::Tftp => "tftp",
        Proto::Http => "http",
        Proto::Nfs => "nfs",
        Proto::Nbd => "nbd",
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaveView {
    pub id: u64,
    pub pool: String,
    pub start: f64,
    pub summary: SummaryView,
    pub boots: Vec<BootView>,
}

/// `wave::Summary` with owned keys, so it reads back from JSON too.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SummaryView {
    pub clients: usize,
    pub booted: usize,
    pub running: usize,
    #[serde(default)]
    pub failed: usize,
    pub median_s: Option<f64>,
    pub p95_s: Option<f64>,
    pub max_s: Option<f64>,
    pub phase_median_s: BTreeMap<String, f64>,
    pub bytes_per_client: BTreeMap<String, f64>,
}

impl From<&Summary> for SummaryView {
    fn from(s: &Summary) -> SummaryView {
        SummaryView {
            clients: s.clients,
            booted: s.booted,
            running: s.running,
            failed: s.failed,
            median_s: s.median_s,
            p95_s: s.p95_s,
            max_s: s.max_s,
            phase_median_s: s
                .phase_median_s
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            bytes_per_client: s.bytes_per_client.clone(),
        }
    }
}

impl WaveView {
    pub fn of(w: &Wave, boots: &[Boot]) -> WaveView {
        WaveView {
            id: w.id,
            pool: w.pool.clone(),
            start: w.start,
            summary: (&w.summary).into(),
            boots: w
                .boot_ids
                .iter()
                .filter_map(|id| boots.iter().find(|b| b.id == *id))
                .map(BootView::of)
                .collect(),
        }
    }
}

/// Two waves side by side, with a sentence that states the difference.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub a: WaveView,
    pub b: WaveView,
    pub sentence: String,
}

pub fn compare(a: WaveView, b: WaveView) -> Comparison {
    let label = |w: &WaveView| {
        let root = w
            .boots
            .iter()
            .find_map(|b| b.root)
            .map(proto_name)
            .unwrap_or("?");
        format!(
            "wave {} ({}, {} root, {} clients)",
            w.id, w.pool, root, w.summary.clients
        )
    };
    let sentence = match (a.summary.median_s, b.summary.median_s) {
        (Some(ma), Some(mb)) => {
            let (fast, slow, fm, sm) = if ma <= mb {
                (&a, &b, ma, mb)
            } else {
                (&b, &a, mb, ma)
            };
            // The phase that differs most explains where the time went.
            let mut widest = None;
            for (name, fs) in &fast.summary.phase_median_s {
                if let Some(ss) = slow.summary.phase_median_s.get(name) {
                    let d = ss - fs;
                    if widest.as_ref().is_none_or(|(_, w)| d > *w) {
                        widest = Some((name.clone(), d));
                    }
                }
            }
            let mut s = format!(
                "{} booted in a median {:.1} s, {:.1} s ({:.0}%) faster than {} at {:.1} s",
                label(fast),
                fm,
                sm - fm,
                if sm > 0.0 {
                    (sm - fm) / sm * 100.0
                } else {
                    0.0
                },
                label(slow),
                sm
            );
            if let Some((name, d)) = widest.filter(|(_, d)| *d > 0.0) {
                s.push_str(&format!(
                    "; most of the difference is in the {name} phase ({d:.1} s)"
                ));
            }
            s.push('.');
            s
        }
        _ => format!(
            "{} and {} cannot be compared yet: one has no booted client.",
            label(&a),
            label(&b)
        ),
    };
    Comparison { a, b, sentence }
}

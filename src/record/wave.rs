//! Waves: boots of one pool that start close together, i.e. one power-on of a room. Pure data:
//! computed from boots whenever asked, so a wave grows as late clients join it.

use super::event::Micros;
use super::timeline::{Boot, PHASES};
use super::view::result_at;
use serde::Serialize;
use std::collections::BTreeMap;

/// A boot that starts more than this long after the previous one of its pool starts a new wave
/// (as does a machine booting a second time).
pub const GAP_S: f64 = 120.0;

#[derive(Debug, Clone, Serialize)]
pub struct Wave {
    /// The id of its first boot: stable as the wave grows.
    pub id: u64,
    pub pool: String,
    /// Unix seconds of the first and last boot start.
    pub start: f64,
    pub last_start: f64,
    pub boot_ids: Vec<u64>,
    pub summary: Summary,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub clients: usize,
    /// Each boot counted once, by its result at the time the summary was made (as the API
    /// shows each boot): `booted + running + failed + timed_out == clients`.
    pub booted: usize,
    pub running: usize,
    pub failed: usize,
    pub timed_out: usize,
    /// Boot time (first DISCOVER to booted call) over the booted clients, seconds.
    pub median_s: Option<f64>,
    pub p95_s: Option<f64>,
    pub max_s: Option<f64>,
    /// Median seconds of each phase over the clients that went through it.
    pub phase_median_s: BTreeMap<&'static str, f64>,
    /// Mean payload bytes per client, per protocol.
    pub bytes_per_client: BTreeMap<String, f64>,
}

/// Groups boots into waves, newest last; summaries count each boot's result at `now`.
pub fn waves(boots: &[Boot], now: Micros) -> Vec<Wave> {
    let mut by_pool: BTreeMap<&str, Vec<&Boot>> = BTreeMap::new();
    for b in boots {
        // Boots of clients in no pool (seen after a config change) have no wave.
        if let Some(pool) = b.pool.as_deref() {
            by_pool.entry(pool).or_default().push(b);
        }
    }
    let mut out = Vec::new();
    for (pool, mut list) in by_pool {
        list.sort_by_key(|b| (b.start, b.id));
        let mut group: Vec<&Boot> = Vec::new();
        for b in list {
            if let Some(last) = group.last() {
                // A machine that boots again is a new power-on of the room, however soon.
                let again = group.iter().any(|g| g.mac == b.mac);
                if again || (b.start - last.start) as f64 / 1e6 > GAP_S {
                    out.push(make_wave(pool, &group, now));
                    group.clear();
                }
            }
            group.push(b);
        }
        if !group.is_empty() {
            out.push(make_wave(pool, &group, now));
        }
    }
    out.sort_by(|a, b| a.start.total_cmp(&b.start).then(a.id.cmp(&b.id)));
    out
}

fn make_wave(pool: &str, boots: &[&Boot], now: Micros) -> Wave {
    Wave {
        id: boots[0].id,
        pool: pool.to_string(),
        start: boots[0].start as f64 / 1e6,
        last_start: boots[boots.len() - 1].start as f64 / 1e6,
        boot_ids: boots.iter().map(|b| b.id).collect(),
        summary: summarize(boots, now),
    }
}

pub fn summarize(boots: &[&Boot], now: Micros) -> Summary {
    let mut times: Vec<f64> = boots.iter().filter_map(|b| b.duration_s()).collect();
    times.sort_by(f64::total_cmp);
    let mut phase_times: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    let mut bytes: BTreeMap<String, u64> = BTreeMap::new();
    for b in boots {
        for p in b.phases() {
            phase_times
                .entry(p.name)
                .or_default()
                .push((p.end - p.start) as f64 / 1e6);
        }
        for (proto, n) in &b.bytes {
            *bytes
                .entry(format!("{proto:?}").to_lowercase())
                .or_default() += n;
        }
    }
    let mut phase_median_s = BTreeMap::new();
    for name in PHASES {
        if let Some(mut v) = phase_times.remove(name) {
            v.sort_by(f64::total_cmp);
            if let Some(m) = percentile(&v, 50.0) {
                phase_median_s.insert(name, m);
            }
        }
    }
    let n = boots.len().max(1) as f64;
    let count = |result: &str| boots.iter().filter(|b| result_at(b, now) == result).count();
    Summary {
        clients: boots.len(),
        booted: count("booted"),
        running: count("running"),
        failed: count("failed"),
        timed_out: count("timed_out"),
        median_s: percentile(&times, 50.0),
        p95_s: percentile(&times, 95.0),
        max_s: times.last().copied(),
        phase_median_s,
        bytes_per_client: bytes.into_iter().map(|(k, v)| (k, v as f64 / n)).collect(),
    }
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mac;
    use crate::record::event::{Event, Kind, Who};
    use crate::record::timeline::Timelines;

    fn boot(t: &mut Timelines, mac: u8, pool: &str, start_s: i64, took_s: Option<i64>) {
        let mac = Mac([0x52, 0x54, 0, 0x77, 0, mac]);
        let ip = std::net::Ipv4Addr::new(10, 77, 0, mac.0[5]);
        let at = start_s * 1_000_000;
        let ev = |at, kind| Event {
            at,
            who: Who::Mac(mac),
            kind,
        };
        t.apply(&ev(
            at,
            Kind::DhcpDiscover {
                pool: None,
                pxe: true,
                ipxe: true,
            },
        ));
        t.apply(&ev(
            at + 1_000_000,
            Kind::DhcpAck {
                ip,
                pxe: true,
                ipxe: true,
                pool: pool.into(),
                link: None,
            },
        ));
        if let Some(took) = took_s {
            t.apply(&ev(
                at + took * 1_000_000,
                Kind::Booted {
                    uptime_s: None,
                    root_bytes: None,
                },
            ));
        }
    }

    /// The tests' clock: after every boot below, within 5 minutes of the last events.
    const NOW: Micros = 5100 * 1_000_000;

    #[test]
    fn boots_close_together_form_one_wave_per_pool() {
        let mut t = Timelines::default();
        boot(&mut t, 1, "a", 1000, Some(20));
        boot(&mut t, 2, "a", 1005, Some(30));
        boot(&mut t, 3, "a", 1010, None);
        boot(&mut t, 4, "b", 1001, Some(40));
        boot(&mut t, 5, "a", 5000, Some(25));
        let w = waves(t.boots(), NOW);
        let shape: Vec<(&str, usize)> = w
            .iter()
            .map(|w| (w.pool.as_str(), w.boot_ids.len()))
            .collect();
        assert_eq!(shape, [("a", 3), ("b", 1), ("a", 1)]);
        let s = &w[0].summary;
        // The third boot went silent long before NOW.
        assert_eq!(
            (s.clients, s.booted, s.running, s.timed_out),
            (3, 2, 0, 1)
        );
        assert_eq!((s.median_s, s.max_s), (Some(20.0), Some(30.0)));
        assert_eq!(s.phase_median_s.get("dhcp"), Some(&1.0));
        assert_eq!(w[0].id, w[0].boot_ids[0]);
    }

    /// Each boot is counted by its result as the API shows it: eight boots that went silent
    /// are running until the silence passes `SILENCE_S`, then timed out, never both.
    #[test]
    fn a_wave_counts_its_boots_as_they_stand() {
        let mut t = Timelines::default();
        for mac in 1..=8 {
            boot(&mut t, mac, "a", 1000 + i64::from(mac), None);
        }
        // The last event of each is its ACK, one second after its DISCOVER.
        let last = 1009 * 1_000_000;
        let silence = (crate::record::view::SILENCE_S * 1e6) as Micros;
        let soon = waves(t.boots(), last + 10_000_000);
        let s = &soon[0].summary;
        assert_eq!((s.running, s.timed_out), (8, 0));
        let later = waves(t.boots(), last + silence + 1);
        let s = &later[0].summary;
        assert_eq!(
            (s.clients, s.booted, s.running, s.failed, s.timed_out),
            (8, 0, 0, 0, 8)
        );
    }

    #[test]
    fn a_client_that_never_got_an_ack_counts_in_its_pools_wave() {
        let mut t = Timelines::default();
        boot(&mut t, 1, "a", 1000, Some(20));
        // Firmware that asked and gave up: DISCOVERs only, with the pool DHCP found for it.
        let mac = Mac([0x52, 0x54, 0, 0x77, 0, 9]);
        for at in [1001, 1005, 1013] {
            t.apply(&Event {
                at: at * 1_000_000,
                who: Who::Mac(mac),
                kind: Kind::DhcpDiscover {
                    pool: Some("a".into()),
                    pxe: true,
                    ipxe: false,
                },
            });
        }
        let w = waves(t.boots(), NOW);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].summary.clients, 2);
        assert_eq!(w[0].summary.booted, 1);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(10.0));
        assert_eq!(percentile(&v, 95.0), Some(19.0));
        assert_eq!(percentile(&v, 100.0), Some(20.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}

//! Waves: boots of one pool that start close together, i.e. one power-on of a room. Pure data:
//! computed from boots whenever asked, so a wave grows as late clients join it.
//!
//! The rule depends only on when each boot started and which machine it is, never on the
//! order in which boots arrived: a pool's boots are first cut wherever two starts (in time
//! order) are more than `GAP_S` apart; a run that still holds one machine twice is cut at the
//! widest gap between starts that lies between two of that machine's boots, and again until
//! no run holds a machine twice. A single test boot 25 s before its room powers on is then a
//! wave of its own, whichever of the room's DISCOVERs came first. A wake (`bootpool wake`, a
//! pool's schedule) is a power-on said out loud: the boots it started (each boot's `wake`) are
//! a wave of their own in each pool, whatever their gaps, and the rule above cuts the others.

use super::event::Micros;
use super::standing::result_at;
use super::timeline::{Boot, PHASES};
use serde::Serialize;
use std::collections::BTreeMap;

/// A boot that starts more than this long after the previous one of its pool (in time order)
/// starts a new wave.
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
    /// The wake that started its boots, if a wake did.
    pub wake: Option<WaveWake>,
    pub summary: Summary,
}

/// The wake a wave is: its id (`POST /api/v1/wake`) and its time (its first magic packet).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct WaveWake {
    pub id: u64,
    /// Unix seconds.
    pub at: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub clients: usize,
    /// Each boot counted once, by its result at the time the summary was made (as the API
    /// shows each boot): `booted + running + failed + timed_out == clients`.
    pub booted: usize,
    /// Of the booted, those whose end bootpool inferred (no booted call from the client).
    pub inferred: usize,
    pub running: usize,
    pub failed: usize,
    pub timed_out: usize,
    /// Boot time (first DISCOVER to the end, reported or inferred) over the booted clients,
    /// seconds.
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
    let mut out: Vec<Wave> = groups(boots)
        .into_iter()
        .map(|(pool, group)| make_wave(pool, &group, now))
        .collect();
    out.sort_by(|a, b| a.start.total_cmp(&b.start).then(a.id.cmp(&b.id)));
    out
}

/// The waves' boots, each wave in start order with its pool: the rule of this module.
fn groups(boots: &[Boot]) -> Vec<(&str, Vec<&Boot>)> {
    let mut by_pool: BTreeMap<&str, Vec<&Boot>> = BTreeMap::new();
    for b in boots {
        // Boots of clients in no pool (seen after a config change) have no wave.
        if let Some(pool) = b.pool.as_deref() {
            by_pool.entry(pool).or_default().push(b);
        }
    }
    let mut out = Vec::new();
    let gap = (GAP_S * 1e6) as Micros;
    for (pool, all) in by_pool {
        // A wake's boots are its wave; the gaps and repeats cut the rest.
        let mut by_wake: BTreeMap<u64, Vec<&Boot>> = BTreeMap::new();
        let mut list = Vec::new();
        for b in all {
            match b.wake {
                Some(wake) => by_wake.entry(wake).or_default().push(b),
                None => list.push(b),
            }
        }
        for mut wake in by_wake.into_values() {
            wake.sort_by_key(|b| (b.start, b.id));
            for range in without_repeats(&wake) {
                out.push((pool, wake[range].to_vec()));
            }
        }
        list.sort_by_key(|b| (b.start, b.id));
        let mut from = 0;
        for k in 1..=list.len() {
            if k == list.len() || list[k].start - list[k - 1].start > gap {
                for range in without_repeats(&list[from..k]) {
                    out.push((pool, list[from..k][range].to_vec()));
                }
                from = k;
            }
        }
    }
    out
}

/// Which wave each boot is in, for the boot views (`view::BootView::in_wave`): made once for
/// a whole answer, since a boot's wave depends on the boots around it.
pub struct Membership<'a> {
    groups: Vec<Vec<&'a Boot>>,
    by_boot: std::collections::HashMap<u64, usize>,
}

impl<'a> Membership<'a> {
    pub fn of(boots: &'a [Boot]) -> Membership<'a> {
        let groups: Vec<Vec<&Boot>> = groups(boots).into_iter().map(|(_, g)| g).collect();
        let by_boot = groups
            .iter()
            .enumerate()
            .flat_map(|(i, g)| g.iter().map(move |b| (b.id, i)))
            .collect();
        Membership { groups, by_boot }
    }

    /// The id of the wave boot `id` is in, with that wave's boots; None for a boot in no pool.
    pub fn wave(&self, id: u64) -> Option<(u64, &[&'a Boot])> {
        let g = &self.groups[*self.by_boot.get(&id)?];
        Some((g[0].id, g))
    }
}

/// Cuts a run of boots (in start order, none more than `GAP_S` after the one before) into
/// parts in which no machine boots twice: a machine that boots again is a new power-on of the
/// room, however soon. Each cut goes where the run's starts are furthest apart among the places
/// that separate a machine's boots, so the parts do not depend on the order boots arrived in.
fn without_repeats(run: &[&Boot]) -> Vec<std::ops::Range<usize>> {
    let mut parts = Vec::new();
    let mut todo = Vec::new();
    todo.push(0..run.len());
    while let Some(range) = todo.pop() {
        match widest_cut(&run[range.clone()]) {
            None => parts.push(range),
            Some(k) => {
                todo.push(range.start + k..range.end);
                todo.push(range.start..range.start + k);
            }
        }
    }
    parts.sort_by_key(|r| r.start);
    parts
}

/// The index before which to cut `run` (a cut before `k` parts `..k` from `k..`), if a machine
/// boots twice in it: of the cuts that fall between two consecutive boots of one machine, the
/// one with the widest gap between the starts either side of it (the earliest of equals).
fn widest_cut(run: &[&Boot]) -> Option<usize> {
    // Each pair of one machine's consecutive boots (i, j) covers the cuts before i+1..=j;
    // `separating` counts, at each cut, the pairs that cover it.
    let mut pairs = vec![0i64; run.len() + 1];
    let mut last = std::collections::HashMap::new();
    for (j, b) in run.iter().enumerate() {
        if let Some(i) = last.insert(b.mac, j) {
            pairs[i + 1] += 1;
            pairs[j + 1] -= 1;
        }
    }
    let mut separating = 0;
    let mut best: Option<(Micros, usize)> = None;
    for k in 1..run.len() {
        separating += pairs[k];
        let gap = run[k].start - run[k - 1].start;
        if separating > 0 && best.is_none_or(|(widest, _)| gap > widest) {
            best = Some((gap, k));
        }
    }
    best.map(|(_, k)| k)
}

fn make_wave(pool: &str, boots: &[&Boot], now: Micros) -> Wave {
    Wave {
        id: boots[0].id,
        pool: pool.to_string(),
        start: boots[0].start as f64 / 1e6,
        last_start: boots[boots.len() - 1].start as f64 / 1e6,
        boot_ids: boots.iter().map(|b| b.id).collect(),
        wake: boots[0].wake.map(|id| WaveWake {
            id,
            at: boots
                .iter()
                .filter_map(|b| b.wake_at)
                .min()
                .unwrap_or(boots[0].start) as f64
                / 1e6,
        }),
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
        inferred: boots
            .iter()
            .filter(|b| {
                result_at(b, now) == "booted"
                    && b.end()
                        .is_some_and(|(_, e)| e == super::timeline::End::Inferred)
            })
            .count(),
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
                answered: true,
                pool: None,
                pxe: true,
                ipxe: true,
                arch: None,
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
                relayed: None,
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
        assert_eq!((s.clients, s.booted, s.running, s.timed_out), (3, 2, 0, 1));
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
        let silence = (crate::record::standing::SILENCE_S * 1e6) as Micros;
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

    /// A single test boot of one machine, then its room (that machine too) powered on 25 s
    /// later: the test boot is a wave of its own and the room one wave, whichever machine's
    /// DISCOVER came first.
    #[test]
    fn waves_do_not_depend_on_which_discover_came_first() {
        for first in 0..8u8 {
            let mut t = Timelines::default();
            boot(&mut t, 1, "a", 1000, Some(10));
            // The room in the order its DISCOVERs arrived, starting with machine `first + 1`.
            for k in 0..8u8 {
                let mac = (first + k) % 8 + 1;
                boot_at(&mut t, mac, "a", 1_025_000_000 + i64::from(k) * 50_000);
            }
            let w = waves(t.boots(), NOW);
            let shape: Vec<Vec<u8>> = w
                .iter()
                .map(|w| {
                    let mut macs: Vec<u8> = w
                        .boot_ids
                        .iter()
                        .map(|id| t.boots()[*id as usize - 1].mac.0[5])
                        .collect();
                    macs.sort();
                    macs
                })
                .collect();
            assert_eq!(
                shape,
                [vec![1], (1..=8).collect()],
                "machine {} first",
                first + 1
            );
        }
    }

    /// A machine that boots again within a run of boots (none 120 s after the one before)
    /// splits it where the starts are furthest apart between its two boots.
    #[test]
    fn a_machine_booting_again_cuts_the_run_at_its_widest_gap() {
        let mut t = Timelines::default();
        boot(&mut t, 1, "a", 1000, Some(20));
        for (mac, at) in [(2, 1100), (3, 1210), (1, 1260)] {
            boot_at(&mut t, mac, "a", at * 1_000_000);
        }
        let w = waves(t.boots(), NOW);
        let sizes: Vec<usize> = w.iter().map(|w| w.boot_ids.len()).collect();
        assert_eq!(sizes, [2, 2]);
        assert_eq!(w[1].start, 1210.0);
    }

    /// Each boot's wave in the views is the wave `waves` puts it in, with that wave's boots.
    #[test]
    fn membership_names_the_wave_each_boot_is_in() {
        let mut t = Timelines::default();
        boot(&mut t, 1, "a", 1000, Some(20));
        for (mac, at) in [(2, 1100), (3, 1210), (1, 1260)] {
            boot_at(&mut t, mac, "a", at * 1_000_000);
        }
        boot(&mut t, 4, "b", 1001, Some(40));
        let m = Membership::of(t.boots());
        for w in waves(t.boots(), NOW) {
            for id in &w.boot_ids {
                let (wave, boots) = m.wave(*id).expect("a wave");
                assert_eq!(wave, w.id);
                let ids: Vec<u64> = boots.iter().map(|b| b.id).collect();
                assert_eq!(ids, w.boot_ids);
            }
        }
        assert!(m.wave(99).is_none());
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
                    answered: true,
                    pool: Some("a".into()),
                    pxe: true,
                    ipxe: false,
                    arch: None,
                },
            });
        }
        let w = waves(t.boots(), NOW);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].summary.clients, 2);
        assert_eq!(w[0].summary.booted, 1);
    }

    /// A wake's magic packet to machine `mac` at `at_s`.
    fn woken(t: &mut Timelines, mac: u8, wake: u64, at_s: i64) {
        t.apply(&Event {
            at: at_s * 1_000_000,
            who: Who::Mac(Mac([0x52, 0x54, 0, 0x77, 0, mac])),
            kind: Kind::Woken { wake },
        });
    }

    /// The machines of each wave (by the MAC's last byte, sorted) and the wake it is.
    fn shape(t: &Timelines) -> Vec<(Vec<u8>, Option<WaveWake>)> {
        waves(t.boots(), NOW)
            .iter()
            .map(|w| {
                let mut macs: Vec<u8> = w
                    .boot_ids
                    .iter()
                    .map(|id| t.boots()[*id as usize - 1].mac.0[5])
                    .collect();
                macs.sort();
                (macs, w.wake)
            })
            .collect()
    }

    /// A wake is a wave of its own: the boots its packets started, with its id and its time
    /// (its first packet), however far apart the pacing put them; machines powered on by hand
    /// just before or meanwhile are not in it, and the same machines woken again are the next
    /// wake's wave.
    #[test]
    fn a_wake_opens_a_wave_of_its_own() {
        let mut t = Timelines::default();
        boot(&mut t, 9, "a", 995, Some(20));
        for (mac, at) in [(1, 1000), (2, 1001), (3, 1200)] {
            woken(&mut t, mac, 4, at);
        }
        boot(&mut t, 1, "a", 1010, Some(20));
        boot(&mut t, 2, "a", 1012, Some(20));
        boot(&mut t, 8, "a", 1015, Some(20));
        // More than 120 s after the wake's boot before it: the wake's still.
        boot(&mut t, 3, "a", 1205, None);
        woken(&mut t, 1, 5, 3000);
        boot(&mut t, 1, "a", 3004, Some(20));
        let wake = |id, at| Some(WaveWake { id, at });
        assert_eq!(
            shape(&t),
            [
                (vec![8, 9], None),
                (vec![1, 2, 3], wake(4, 1000.0)),
                (vec![1], wake(5, 3000.0)),
            ]
        );
        // The boots' waves say the same.
        let m = Membership::of(t.boots());
        let third = t.boots().iter().find(|b| b.mac.0[5] == 3).unwrap();
        let (id, boots) = m.wave(third.id).unwrap();
        assert_eq!((id, boots.len()), (t.boots()[1].id, 3));
    }

    /// A wake's wave does not depend on the order its machines' DISCOVERs arrived in, nor on
    /// a machine of another pool woken with it: each pool's woken boots are its wave.
    #[test]
    fn a_wakes_wave_is_the_same_whichever_discover_came_first() {
        for first in 0..4u8 {
            let mut t = Timelines::default();
            for mac in 1..=5 {
                woken(&mut t, mac, 2, 1000 + i64::from(mac));
            }
            boot(&mut t, 5, "b", 1020, Some(10));
            for k in 0..4u8 {
                let mac = (first + k) % 4 + 1;
                boot_at(&mut t, mac, "a", 1_010_000_000 + i64::from(mac) * 1_000_000);
            }
            let wake = Some(WaveWake { id: 2, at: 1001.0 });
            assert_eq!(
                shape(&t),
                [(vec![1, 2, 3, 4], wake), (vec![5], wake)],
                "machine {} first",
                first + 1
            );
        }
    }

    /// A boot's DISCOVER and ACK at `at` (micros), nothing after.
    fn boot_at(t: &mut Timelines, mac: u8, pool: &str, at: Micros) {
        let mac = Mac([0x52, 0x54, 0, 0x77, 0, mac]);
        let ip = std::net::Ipv4Addr::new(10, 77, 0, mac.0[5]);
        for (at, kind) in [
            (
                at,
                Kind::DhcpDiscover {
                    answered: true,
                    pool: None,
                    pxe: true,
                    ipxe: false,
                    arch: None,
                },
            ),
            (
                at + 10_000,
                Kind::DhcpAck {
                    ip,
                    pxe: true,
                    ipxe: false,
                    pool: pool.into(),
                    link: None,
                    relayed: None,
                },
            ),
        ] {
            t.apply(&Event {
                at,
                who: Who::Mac(mac),
                kind,
            });
        }
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

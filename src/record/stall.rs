//! Stalls: a running boot silent for far longer than the other boots of its wave spent in the
//! phase it is in. Pure: the boot views (`view::BootView`) carry the verdict, so the dashboard
//! shows the server's rule instead of keeping one of its own.

use super::event::Micros;
use super::standing::result_at;
use super::timeline::Boot;

/// A boot is stalled once silent for more than this many times the others' median in its
/// phase...
pub const FACTOR: f64 = 3.0;
/// ...taking that median as at least this, so a phase the others went through in a blink
/// (dhcp, ipxe) does not call a boot stalled after a fraction of a second.
pub const MEDIAN_FLOOR_S: f64 = 1.0;

/// The silence (seconds since its last event) past which `b` is stalled, judged at `now`
/// against `others` (the other boots of its wave; `b` itself is skipped if there): `FACTOR`
/// times the median time they spent in the phase `b` is in, counting only the phases they
/// left. None when `b` is not running or none of them went through its phase.
pub fn stall_after_s(b: &Boot, others: &[&Boot], now: Micros) -> Option<f64> {
    if result_at(b, now) != "running" {
        return None;
    }
    let phase = b.current_phase();
    let mut spent: Vec<f64> = others
        .iter()
        .filter(|o| o.id != b.id)
        .flat_map(|o| {
            // A phase another boot is still in is not a time it spent there.
            let still_in = result_at(o, now) == "running" && o.current_phase() == phase;
            o.phases()
                .into_iter()
                .filter(move |p| p.name == phase && !still_in)
                .map(|p| (p.end - p.start) as f64 / 1e6)
        })
        .collect();
    spent.sort_by(f64::total_cmp);
    median(&spent).map(|m| FACTOR * m.max(MEDIAN_FLOOR_S))
}

/// How long `b` has been silent at `now`, if it is stalled then.
pub fn stalled_s(b: &Boot, others: &[&Boot], now: Micros) -> Option<f64> {
    let after = stall_after_s(b, others, now)?;
    let silent = (now - b.last_event) as f64 / 1e6;
    (silent > after).then_some(silent)
}

/// The median of sorted values, the mean of the middle two for an even count.
fn median(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mac;
    use crate::record::event::{Event, Kind, Who};
    use crate::record::timeline::Timelines;

    const S: Micros = 1_000_000;

    /// A boot of machine `mac` that DISCOVERs at `start_s` and, with `dhcp_s`, is ACKed that
    /// much later (leaving dhcp); with `up`, it reports up right after.
    fn boot(t: &mut Timelines, mac: u8, start_s: i64, dhcp_s: Option<i64>, up: bool) {
        let mac = Mac([0x52, 0x54, 0, 0x77, 1, mac]);
        let ev = |at, kind| Event {
            at,
            who: Who::Mac(mac),
            kind,
        };
        t.apply(&ev(
            start_s * S,
            Kind::DhcpDiscover {
                answered: true,
                pool: Some("a".into()),
                pxe: true,
                ipxe: true,
                arch: None,
            },
        ));
        if let Some(d) = dhcp_s {
            t.apply(&ev(
                (start_s + d) * S,
                Kind::DhcpAck {
                    ip: std::net::Ipv4Addr::new(10, 77, 1, mac.0[5]),
                    pxe: true,
                    ipxe: true,
                    pool: "a".into(),
                    link: None,
                    relayed: None,
                },
            ));
            if up {
                t.apply(&ev(
                    (start_s + d) * S + 1,
                    Kind::Booted {
                        uptime_s: None,
                        root_bytes: None,
                    },
                ));
            }
        }
    }

    /// Three boots that spent 2, 3 and 4 s in dhcp (median 3 s) and one still in dhcp: silent
    /// 10 s it is stalled, 8 s it is not; alone, or once up, never.
    #[test]
    fn a_running_boot_silent_for_over_three_medians_of_its_phase_is_stalled() {
        let mut t = Timelines::default();
        for (mac, took) in [(1, 2), (2, 3), (3, 4)] {
            boot(&mut t, mac, 1000, Some(took), true);
        }
        boot(&mut t, 4, 1000, None, false);
        let all: Vec<&Boot> = t.boots().iter().collect();
        let (others, stuck) = (&all[..3], all[3]);
        assert_eq!(stall_after_s(stuck, others, 1000 * S), Some(9.0));
        assert_eq!(stalled_s(stuck, others, 1010 * S), Some(10.0));
        assert_eq!(stalled_s(stuck, others, 1008 * S), None);
        assert_eq!(stalled_s(stuck, &[], 1010 * S), None);
        // Itself among the others changes nothing.
        assert_eq!(stalled_s(stuck, &all, 1010 * S), Some(10.0));
        // A booted boot is never stalled.
        assert_eq!(stall_after_s(all[0], &all[1..], 1100 * S), None);
    }

    /// The others' median counts as at least a second: after a 0 s dhcp, 3 s of silence.
    #[test]
    fn a_phase_the_others_went_through_at_once_still_gives_three_seconds() {
        let mut t = Timelines::default();
        boot(&mut t, 1, 1000, Some(0), false);
        boot(&mut t, 2, 1000, None, false);
        let all: Vec<&Boot> = t.boots().iter().collect();
        assert_eq!(stall_after_s(all[1], &all, 1000 * S), Some(3.0));
        // The first is past dhcp; no other went through its phase (ipxe).
        assert_eq!(stall_after_s(all[0], &all, 1000 * S), None);
    }

    #[test]
    fn medians_of_even_counts_are_the_mean_of_the_middle_two() {
        assert_eq!(median(&[2.0, 3.0, 4.0, 9.0]), Some(3.5));
        assert_eq!(median(&[5.0]), Some(5.0));
        assert_eq!(median(&[]), None);
    }
}

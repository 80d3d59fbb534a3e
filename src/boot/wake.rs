//! Wake-on-LAN policy on plain data: how fast a wave of wakes goes (the pacing rule), when
//! each of its packets is sent, and when a pool's wake schedule (`pools.NAME.wake`) is due.
//! The packet is `proto::wol`'s, the sending `service::wake`'s.

use crate::config::WakeSchedule;
use std::time::Duration;

/// Wakes a second when neither the request nor the pool's schedule says.
pub const DEFAULT_PER_SECOND: u32 = 10;

/// How fast a wave goes, and what bounded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    pub per_second: u32,
    /// The bound the links set (`pace`), when they set one.
    pub links_allow: Option<u32>,
}

/// The pacing rule: as many wakes a second as asked, but no more than the server's links can
/// carry whole boots of: their capacity in bytes a second (summed over `server.links`) divided
/// by the bytes one boot takes (the median of the pool's recorded boots that booted), and never
/// under one a second. Unknown capacity or boot size: the asked rate stands.
pub fn pace(asked: u32, capacity_bytes: Option<u64>, boot_bytes: Option<u64>) -> Pace {
    let links_allow = match (capacity_bytes, boot_bytes) {
        (Some(c), Some(b)) if b > 0 => Some(u32::try_from(c / b).unwrap_or(u32::MAX).max(1)),
        _ => None,
    };
    let asked = asked.max(1);
    Pace {
        per_second: links_allow.map_or(asked, |l| asked.min(l)),
        links_allow,
    }
}

/// When each of `n` packets goes, from the wave's start: evenly, `per_second` a second.
pub fn offsets(n: usize, per_second: u32) -> Vec<Duration> {
    let step = Duration::from_secs(1) / per_second.max(1);
    (0..n).map(|i| step * i as u32).collect()
}

/// The median of `bytes` (a pool's booted boots' payload), if there are any.
pub fn median(mut bytes: Vec<u64>) -> Option<u64> {
    bytes.sort_unstable();
    bytes.get(bytes.len() / 2).copied()
}

/// Whether `schedule` falls due in the local time interval `(after, upto]` (Unix seconds
/// shifted by the local offset): a day it names, at its minute.
pub fn due(schedule: &WakeSchedule, after: i64, upto: i64) -> bool {
    if upto <= after {
        return false;
    }
    let first_day = after.div_euclid(86_400);
    let last_day = upto.div_euclid(86_400);
    (first_day..=last_day).any(|day| {
        // 1970-01-01 was a Thursday: day 0 is weekday 3 (Monday 0).
        let weekday = (day + 3).rem_euclid(7) as usize;
        let at = day * 86_400 + i64::from(schedule.minute) * 60;
        schedule.days[weekday] && after < at && at <= upto
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_links_bound_the_asked_rate_and_never_below_one() {
        // 1 Gbit/s carries 125 MB a second: four 30 MB boots, so at most 4 wakes a second.
        assert_eq!(
            pace(10, Some(125_000_000), Some(30_000_000)),
            Pace {
                per_second: 4,
                links_allow: Some(4)
            }
        );
        assert_eq!(pace(2, Some(125_000_000), Some(30_000_000)).per_second, 2);
        // A boot larger than a second of the links: still one a second.
        assert_eq!(pace(10, Some(125_000_000), Some(400_000_000)).per_second, 1);
        assert_eq!(pace(10, None, Some(1)).per_second, 10);
        assert_eq!(pace(10, Some(1), None).links_allow, None);
        assert_eq!(pace(0, None, None).per_second, 1);
    }

    #[test]
    fn packets_are_spread_evenly() {
        let o = offsets(5, 4);
        assert_eq!(o.len(), 5);
        assert_eq!(o[0], Duration::ZERO);
        assert_eq!(o[1], Duration::from_millis(250));
        assert_eq!(o[4], Duration::from_secs(1));
        assert_eq!(median(vec![5, 1, 9]), Some(5));
        assert_eq!(median(vec![]), None);
    }

    #[test]
    fn a_schedule_is_due_once_on_its_days_at_its_minute() {
        // Weekdays at 07:45.
        let s = WakeSchedule {
            minute: 7 * 60 + 45,
            days: [true, true, true, true, true, false, false],
            per_second: None,
        };
        // 2026-12-07 is a Monday: day 20794.
        let monday = 20_794 * 86_400;
        let at = monday + (7 * 60 + 45) * 60;
        assert!(due(&s, at - 30, at));
        assert!(!due(&s, at, at + 30), "once");
        assert!(!due(&s, at - 60, at - 1));
        assert!(due(&s, at - 3 * 86_400, at), "over days");
        // Saturday and Sunday are not named.
        assert!(!due(&s, at + 5 * 86_400 - 30, at + 5 * 86_400));
        assert!(!due(&s, at + 6 * 86_400 - 30, at + 6 * 86_400));
        assert!(due(&s, at + 7 * 86_400 - 30, at + 7 * 86_400));
    }
}

//! The records of a site's other members, followed (issue 46): the cursor over the shared
//! `events` table's ids that says which rows to ask for next, which member recorded each
//! client's newest events, and whether the database answers, as the API shows it. Policy and
//! state only: the writer (`mod.rs`) does the reading, through `store::events_after`.
//!
//! Ids are handed out when a row is inserted but seen by others only once its transaction
//! commits, so a member's batch may become visible after a later id of another member's: an
//! id passed over is a **gap**, asked for again at every read until it shows up or `GAP_WAIT`
//! has passed (a transaction rolled back, or a row already deleted, leaves one for good).

use super::event::Micros;
use crate::config::Mac;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::RwLock;
use std::time::{Duration, Instant};

/// How long an id passed over is asked for again: far longer than a batch's transaction.
pub const GAP_WAIT: Duration = Duration::from_secs(30);
/// Gaps kept at most (the oldest go first): a rolled-back batch of a few thousand rows fits.
const MAX_GAPS: usize = 20_000;

/// Where the reads of the others' rows stand.
#[derive(Debug, Default)]
pub struct Cursor {
    /// Every id at or below this was read or given up.
    after: i64,
    /// Ids above none of which was seen yet, and since when they are missing.
    gaps: BTreeMap<i64, Instant>,
}

impl Cursor {
    /// A cursor past the rows up to `after` (those replayed at start).
    pub fn past(after: i64) -> Cursor {
        Cursor {
            after,
            gaps: BTreeMap::new(),
        }
    }

    /// The highest id read.
    pub fn after(&self) -> i64 {
        self.after
    }

    /// The ids passed over, to ask for again.
    pub fn gaps(&self) -> Vec<i64> {
        self.gaps.keys().copied().collect()
    }

    /// Takes the ids of one read (in order); returns those that are new, not seen before. The
    /// ids between the last one read and each new one that did not come are gaps from `now`;
    /// gaps older than `GAP_WAIT` are given up.
    pub fn took(&mut self, ids: &[i64], now: Instant) -> Vec<i64> {
        let new = ids
            .iter()
            .copied()
            .filter(|&id| self.see(id, now))
            .collect();
        self.expire(now);
        new
    }

    /// Takes one id read (in order, as a replay reads them): whether it is new.
    pub fn see(&mut self, id: i64, now: Instant) -> bool {
        if id > self.after {
            // Only the newest `MAX_GAPS` of a hole: older ones would be dropped at once.
            let from = (self.after + 1).max(id - MAX_GAPS as i64);
            for missing in from..id {
                self.gaps.insert(missing, now);
            }
            self.after = id;
            true
        } else {
            self.gaps.remove(&id).is_some()
        }
    }

    /// Gives up the gaps older than `GAP_WAIT`, and the oldest past `MAX_GAPS`.
    pub fn expire(&mut self, now: Instant) {
        self.gaps
            .retain(|_, since| now.saturating_duration_since(*since) < GAP_WAIT);
        while self.gaps.len() > MAX_GAPS {
            self.gaps.pop_first();
        }
    }
}

/// Whether the records' database answers, as `GET /api/v1/site` shows it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Reach {
    /// The records are in PostgreSQL, shared by the site (else SQLite: always reachable).
    pub shared: bool,
    /// The store took the last write or read.
    pub reachable: bool,
    /// Since when it is as it is (Unix microseconds).
    pub since: Micros,
    /// Why it does not answer.
    pub error: Option<String>,
    /// Events and egress samples parked in `state_dir/records.spool`, waiting for it.
    pub parked: usize,
}

/// What the API reads of the site's records besides the timelines.
#[derive(Debug, Default)]
pub struct Site {
    reach: RwLock<Reach>,
    /// The member whose events a client's newest boot came from, for the clients another
    /// member recorded (absent: this one).
    by: RwLock<HashMap<Mac, String>>,
}

impl Site {
    pub fn reach(&self) -> Reach {
        self.reach.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Sets whether the store answers (the time changes only with the answer).
    pub fn set_reach(&self, shared: bool, error: Option<String>, parked: usize, now: Micros) {
        let mut r = self.reach.write().unwrap_or_else(|e| e.into_inner());
        let reachable = error.is_none();
        if r.reachable != reachable || r.since == 0 {
            r.since = now;
        }
        *r = Reach {
            shared,
            reachable,
            error,
            parked,
            since: r.since,
        };
    }

    /// `mac`'s events came from `member` (`None`: from this member).
    pub fn recorded(&self, marks: impl IntoIterator<Item = (Mac, Option<String>)>) {
        let mut by = self.by.write().unwrap_or_else(|e| e.into_inner());
        for (mac, member) in marks {
            match member {
                Some(m) => by.insert(mac, m),
                None => by.remove(&mac),
            };
        }
    }

    /// The member `mac`'s newest events came from, or `me`.
    pub fn member_of(&self, mac: Mac, me: &str) -> String {
        self.by
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&mac)
            .map_or_else(|| me.to_string(), Clone::clone)
    }

    /// Forgets every mark (the timelines were read again from the store).
    pub fn clear(&self) {
        self.by.write().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_passed_over_are_asked_again_until_they_come_or_are_given_up() {
        let t0 = Instant::now();
        let mut c = Cursor::past(10);
        assert_eq!(c.took(&[11, 12, 15], t0), [11, 12, 15]);
        assert_eq!(c.after(), 15);
        // 13 and 14 were in a transaction still open: asked for again.
        assert_eq!(c.gaps(), [13, 14]);
        // 14 commits; read again with the next new row, never twice.
        assert_eq!(c.took(&[14, 16], t0 + Duration::from_secs(1)), [14, 16]);
        assert_eq!(
            c.took(&[14, 16], t0 + Duration::from_secs(1)),
            Vec::<i64>::new()
        );
        assert_eq!(c.gaps(), [13]);
        // 13 never comes (rolled back): given up after GAP_WAIT.
        c.took(&[], t0 + GAP_WAIT);
        assert!(c.gaps().is_empty());
        // Nothing at or below the start is new.
        assert_eq!(c.took(&[3, 9], t0 + GAP_WAIT), Vec::<i64>::new());
    }

    #[test]
    fn a_huge_hole_keeps_only_the_newest_gaps() {
        let mut c = Cursor::past(0);
        c.took(&[MAX_GAPS as i64 + 101], Instant::now());
        let gaps = c.gaps();
        assert_eq!(gaps.len(), MAX_GAPS);
        assert_eq!(gaps[0], 101);
    }

    #[test]
    fn the_reach_keeps_the_time_it_changed() {
        let s = Site::default();
        s.set_reach(true, Some("refused".into()), 3, 100);
        s.set_reach(true, Some("refused".into()), 5, 200);
        let r = s.reach();
        assert!(!r.reachable && r.since == 100 && r.parked == 5);
        s.set_reach(true, None, 0, 300);
        assert!(s.reach().reachable && s.reach().since == 300);
    }
}

//! Which site member served a boot, phase by phase (issue 47 part 5). Pure data: no I/O, no
//! clock.
//!
//! In a site each event row carries the member that wrote it (`events.member`, `follow.rs`).
//! A boot keeps, from the events that are service (`serves`: a DHCP answer, a boot file sent, a
//! root attached or read), its **stints**: runs of events by one member, each from its first
//! event to its last, in time order. A phase's servers are the stints that reach into it, in
//! order, each with the time it took over: one member for a phase served by one, `a` then `b`
//! for a phase a failover moved (`b`'s first event there). A phase runs from the milestone
//! before it (excluded: that event ends the phase before) to its own (included), the first
//! phase from the boot's first event; the last phase a boot is in (`root` once up) stays open,
//! so the reads a running system makes of its root after the boot's end still say who serves it.
//!
//! Events of other members come a second or so late (they are read from the database), so a
//! stint may be learnt out of order: an event inside another member's stint splits it in two
//! around itself (that member's first and last events lie on both sides of it).

use super::event::{Kind, Micros};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Stints kept per boot: a failover or two and a placement fit many times over. Past it
/// (members taking turns, as a client fetching chunks from several could), a turn is only
/// counted (`Served::unkept`).
pub const MAX_STINTS: usize = 32;

/// A run of a boot's service events by one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stint {
    pub member: Arc<str>,
    /// Its first event and its last.
    pub from: Micros,
    pub to: Micros,
}

/// One member's turn in a phase: who, and from when (its first event in the phase, or the
/// phase's start for a member serving since before it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    pub member: String,
    /// Unix microseconds.
    pub at: Micros,
}

/// A boot's stints, in time order.
#[derive(Debug, Clone, Default)]
pub struct Served {
    stints: Vec<Stint>,
    /// Events past `MAX_STINTS` that would have begun a turn of another member: counted, not
    /// kept (the turn they interrupt runs on over them).
    unkept: u32,
}

/// Whether an event is a member serving the client (and not the client talking of itself, or
/// a connection ending): a DHCP answer, a boot file, a root attached or read.
pub fn serves(kind: &Kind) -> bool {
    match kind {
        Kind::DhcpDiscover { answered, .. } => *answered,
        Kind::DhcpAck { .. } | Kind::Dhcp6Reply { .. } => true,
        Kind::File { .. } | Kind::RootAttach { .. } | Kind::RootRead { .. } => true,
        Kind::RootDetach { .. }
        | Kind::Booted { .. }
        | Kind::Failed { .. }
        | Kind::NextBoot(_)
        | Kind::Woken { .. } => false,
    }
}

impl Served {
    /// The stints, in time order.
    pub fn stints(&self) -> &[Stint] {
        &self.stints
    }

    /// Turns not kept (past `MAX_STINTS`).
    pub fn unkept(&self) -> u32 {
        self.unkept
    }

    /// `member` served the client at `at`.
    pub fn saw(&mut self, member: &str, at: Micros) {
        // The last stint that began at or before `at`.
        let i = self.stints.partition_point(|s| s.from <= at);
        if i > 0 {
            let before = &mut self.stints[i - 1];
            if &*before.member == member {
                before.to = before.to.max(at);
                return;
            }
            if before.to > at {
                // Inside another member's stint: split it around this event.
                if self.stints.len() + 2 > MAX_STINTS {
                    self.unkept += 1;
                    return;
                }
                let before = &mut self.stints[i - 1];
                let after = Stint {
                    member: before.member.clone(),
                    from: at,
                    to: before.to,
                };
                before.to = at;
                self.stints.insert(i, after);
                self.stints.insert(i, stint(member, at));
                return;
            }
        }
        // The next stint is this member's and starts later: it starts here now.
        if let Some(next) = self.stints.get_mut(i)
            && &*next.member == member
        {
            next.from = at;
            return;
        }
        if self.stints.len() >= MAX_STINTS {
            self.unkept += 1;
            return;
        }
        self.stints.insert(i, stint(member, at));
    }

    /// The members that served the span after `start` up to `end` (`first`: `start` itself
    /// too; `end` `None`: open), each with the time its turn began, a member named again only
    /// after another's turn.
    pub fn turns(&self, start: Micros, end: Option<Micros>, first: bool) -> Vec<Turn> {
        let mut out: Vec<Turn> = Vec::new();
        for s in &self.stints {
            let after_start = if first { s.to >= start } else { s.to > start };
            let before_end = end.is_none_or(|e| s.from <= e);
            if !(after_start && before_end) {
                continue;
            }
            if out.last().is_some_and(|t| *t.member == *s.member) {
                continue;
            }
            out.push(Turn {
                member: s.member.to_string(),
                at: s.from.max(start),
            });
        }
        out
    }
}

fn stint(member: &str, at: Micros) -> Stint {
    Stint {
        member: member.into(),
        from: at,
        to: at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = 1_000_000;

    fn names(turns: &[Turn]) -> Vec<(&str, Micros)> {
        turns
            .iter()
            .map(|t| (t.member.as_str(), t.at / S))
            .collect()
    }

    #[test]
    fn one_member_then_another_after_a_takeover() {
        let mut s = Served::default();
        for t in [0, 1, 3, 10, 11] {
            s.saw("a", t * S);
        }
        for t in [40, 41, 60] {
            s.saw("b", t * S);
        }
        assert_eq!(s.stints().len(), 2);
        // dhcp 0..1, first phase: a alone.
        assert_eq!(names(&s.turns(0, Some(S), true)), [("a", 0)]);
        // The root from 10 s, open: a, then b from its first read.
        assert_eq!(names(&s.turns(10 * S, None, false)), [("a", 10), ("b", 40)]);
        // A span after the takeover: b alone.
        assert_eq!(names(&s.turns(45 * S, None, false)), [("b", 45)]);
        // The milestone that ends a phase is not the next one's.
        assert_eq!(names(&s.turns(11 * S, Some(40 * S), false)), [("b", 40)]);
    }

    #[test]
    fn a_late_event_inside_another_members_stint_splits_it() {
        let mut s = Served::default();
        for t in [0, 5, 10] {
            s.saw("a", t * S);
        }
        // b's row, read a second late, happened at 7 s.
        s.saw("b", 7 * S);
        let members: Vec<(&str, Micros, Micros)> = s
            .stints()
            .iter()
            .map(|x| (&*x.member, x.from / S, x.to / S))
            .collect();
        assert_eq!(members, [("a", 0, 7), ("b", 7, 7), ("a", 7, 10)]);
        assert_eq!(
            names(&s.turns(0, None, true)),
            [("a", 0), ("b", 7), ("a", 7)]
        );
        // A late event of the member whose stint follows starts that stint earlier.
        let mut s = Served::default();
        s.saw("a", 0);
        s.saw("b", 20 * S);
        s.saw("b", 12 * S);
        assert_eq!(names(&s.turns(0, None, true)), [("a", 0), ("b", 12)]);
        assert_eq!(s.stints().len(), 2);
    }

    #[test]
    fn members_taking_turns_past_the_cap_are_counted() {
        let mut s = Served::default();
        for t in 0..(MAX_STINTS as i64 + 10) {
            s.saw(if t % 2 == 0 { "a" } else { "b" }, t * S);
        }
        assert_eq!(s.stints().len(), MAX_STINTS);
        // Past the cap, each of a's events would begin a turn and is counted; b's go on with
        // b's last turn.
        assert_eq!(s.unkept(), 5);
        assert_eq!(&*s.stints()[MAX_STINTS - 1].member, "b");
        assert_eq!(s.stints()[MAX_STINTS - 1].to, (MAX_STINTS as i64 + 9) * S);
    }
}

//! Which member of a site answers which client: policy over the members' rows. The live
//! members (a heartbeat younger than `DEAD_AFTER`, this one always) in name order split RFC
//! 3074's 256 buckets by the bucket's number modulo their count, as Kea's load balancing
//! does; a client belongs to the member of its bucket. A read that fails freezes the view:
//! the members last seen live stay so until the database answers again, never an empty site.

use super::hash;
use super::member::Seen;
use std::time::Duration;

/// A member whose heartbeat is older than this is dead to the others, and its clients theirs.
pub const DEAD_AFTER: Duration = Duration::from_secs(2);

/// One member's view of the site.
#[derive(Debug, Clone)]
pub struct View {
    me: String,
    /// Every member's row as last read, live or not, by name.
    seen: Vec<Seen>,
    /// The names of the live members, sorted; `me` among them.
    live: Vec<String>,
    /// The last read failed: `live` is the one before it.
    frozen: bool,
}

impl View {
    /// The view of a server before any read, or of one alone (no site): it answers everyone.
    pub fn alone(me: &str) -> View {
        View {
            me: me.to_string(),
            seen: Vec::new(),
            live: vec![me.to_string()],
            frozen: false,
        }
    }

    /// The site as someone who is no member sees it (`bootpool site`): the live members by
    /// their heartbeats alone.
    pub fn outside(mut seen: Vec<Seen>) -> View {
        seen.sort_by(|a, b| a.member.name.cmp(&b.member.name));
        let live = seen
            .iter()
            .filter(|s| s.age_s < DEAD_AFTER.as_secs_f64())
            .map(|s| s.member.name.clone())
            .collect();
        View {
            me: String::new(),
            seen,
            live,
            frozen: false,
        }
    }

    /// A fresh read of every member's row. Returns whether the live members changed.
    pub fn read(&mut self, mut seen: Vec<Seen>) -> bool {
        seen.sort_by(|a, b| a.member.name.cmp(&b.member.name));
        let mut live: Vec<String> = seen
            .iter()
            .filter(|s| s.age_s < DEAD_AFTER.as_secs_f64() || s.member.name == self.me)
            .map(|s| s.member.name.clone())
            .collect();
        if !live.contains(&self.me) {
            live.push(self.me.clone());
            live.sort();
        }
        self.seen = seen;
        self.frozen = false;
        let changed = live != self.live;
        self.live = live;
        changed
    }

    /// The database did not answer: the live members stay as they were.
    pub fn unreachable(&mut self) {
        self.frozen = true;
    }

    pub fn frozen(&self) -> bool {
        self.frozen
    }

    pub fn me(&self) -> &str {
        &self.me
    }

    /// The live members' names, in name order.
    pub fn live(&self) -> &[String] {
        &self.live
    }

    /// Every member as last read.
    pub fn seen(&self) -> &[Seen] {
        &self.seen
    }

    /// The member that answers the client of bucket `bucket`.
    pub fn owner_of_bucket(&self, bucket: u8) -> &str {
        &self.live[usize::from(bucket) % self.live.len()]
    }

    /// The member that answers the client whose key (hardware address, DUID) is `key`.
    pub fn owner(&self, key: &[u8]) -> &str {
        self.owner_of_bucket(hash::bucket(key))
    }

    /// Whether this member answers that client.
    pub fn mine(&self, key: &[u8]) -> bool {
        self.owner(key) == self.me
    }

    /// How many of the 256 buckets `name` holds.
    pub fn buckets_of(&self, name: &str) -> usize {
        if self.live.is_empty() {
            return 0;
        }
        (0..=255u8)
            .filter(|&b| self.owner_of_bucket(b) == name)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::member::Member;

    fn seen(name: &str, age_s: f64) -> Seen {
        Seen {
            member: Member::named(name),
            heartbeat: 0,
            age_s,
            load: Vec::new(),
        }
    }

    fn macs() -> impl Iterator<Item = [u8; 6]> {
        (0..4096u16).map(|n| {
            let [hi, lo] = n.to_be_bytes();
            [0x52, 0x54, 0x00, 0x10, hi, lo]
        })
    }

    #[test]
    fn alone_a_server_answers_everyone() {
        let v = View::alone("a");
        assert!(macs().all(|m| v.mine(&m)));
        assert_eq!(v.buckets_of("a"), 256);
    }

    #[test]
    fn every_client_has_exactly_one_owner_and_all_members_agree() {
        let rows = vec![seen("c", 0.1), seen("a", 0.5), seen("b", 1.9)];
        let views: Vec<View> = ["a", "b", "c"]
            .iter()
            .map(|me| {
                let mut v = View::alone(me);
                v.read(rows.clone());
                v
            })
            .collect();
        let mut per = [0usize; 3];
        for mac in macs() {
            let mine: Vec<usize> = (0..3).filter(|&i| views[i].mine(&mac)).collect();
            assert_eq!(mine.len(), 1, "{mac:?}: {mine:?}");
            per[mine[0]] += 1;
            // Every member names the same owner.
            assert!(views.iter().all(|v| v.owner(&mac) == views[0].owner(&mac)));
        }
        // The buckets split as evenly as 256 splits by 3, and the clients close to it.
        assert_eq!(
            ["a", "b", "c"].map(|n| views[0].buckets_of(n)),
            [86, 85, 85]
        );
        assert!(per.iter().all(|&n| (1100..1650).contains(&n)), "{per:?}");
    }

    #[test]
    fn the_split_of_two_is_by_parity_in_name_order() {
        let mut v = View::alone("b");
        v.read(vec![seen("b", 0.0), seen("a", 0.0)]);
        assert_eq!(v.live(), ["a", "b"]);
        assert!((0..=255u8).all(|b| v.owner_of_bucket(b) == ["a", "b"][usize::from(b % 2)]));
    }

    #[test]
    fn a_silent_member_loses_its_clients_to_the_live_ones() {
        let mut v = View::alone("a");
        assert!(v.read(vec![seen("a", 0.2), seen("b", 0.4)]));
        let theirs: Vec<[u8; 6]> = macs().filter(|m| !v.mine(m)).collect();
        assert!(!theirs.is_empty());
        // b's heartbeat is now older than DEAD_AFTER: everything is a's.
        assert!(v.read(vec![seen("a", 0.2), seen("b", 2.5)]));
        assert!(theirs.iter().all(|m| v.mine(m)));
        assert_eq!(v.live(), ["a"]);
        // Still listed, as dead.
        assert_eq!(v.seen().len(), 2);
        // b beats again: its clients go back to it.
        assert!(v.read(vec![seen("a", 0.2), seen("b", 0.1)]));
        assert!(theirs.iter().all(|m| !v.mine(m)));
    }

    #[test]
    fn this_member_counts_live_even_before_its_own_row_is_read() {
        let mut v = View::alone("b");
        v.read(vec![seen("a", 0.1)]);
        assert_eq!(v.live(), ["a", "b"]);
        // Its own row late (a slow write): still live in its own view.
        v.read(vec![seen("a", 0.1), seen("b", 9.0)]);
        assert_eq!(v.live(), ["a", "b"]);
    }

    #[test]
    fn from_outside_only_heartbeats_count() {
        let v = View::outside(vec![seen("b", 3.0), seen("a", 0.3)]);
        assert_eq!(v.live(), ["a"]);
        assert_eq!((v.buckets_of("a"), v.buckets_of("b")), (256, 0));
        let none = View::outside(vec![seen("a", 30.0)]);
        assert!(none.live().is_empty());
        assert_eq!(none.buckets_of("a"), 0);
    }

    #[test]
    fn an_unreachable_database_freezes_the_view() {
        let mut v = View::alone("a");
        v.read(vec![seen("a", 0.1), seen("b", 0.1), seen("c", 0.1)]);
        let before: Vec<bool> = macs().map(|m| v.mine(&m)).collect();
        for _ in 0..10 {
            v.unreachable();
        }
        assert!(v.frozen());
        assert_eq!(v.live(), ["a", "b", "c"]);
        assert_eq!(macs().map(|m| v.mine(&m)).collect::<Vec<_>>(), before);
        // The next read thaws it.
        v.read(vec![seen("a", 0.1), seen("b", 0.1), seen("c", 0.1)]);
        assert!(!v.frozen());
    }
}

//! What a site lets one member's lease table give out, pure: its own part of each range for
//! fresh addresses (address number modulo the live members, this member's place among them),
//! and the other members' bound leases as last read from the site's table, none of which goes
//! to another client and each of which its own client keeps (docs/site.md, "Leases").
//! One rule for both families: DHCPv4 leases (`Share`) and DHCPv6 bindings (`Share6`), an
//! address's part being its number (32 or 128 bits) modulo the live members.
//! No I/O and no clock (`now` is seconds since the Unix epoch, passed in).

use crate::config::Mac;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

/// An address a site splits among its members by its number.
pub trait Address: Copy + Ord + std::fmt::Debug {
    fn number(self) -> u128;
}

impl Address for Ipv4Addr {
    fn number(self) -> u128 {
        u128::from(u32::from(self))
    }
}

impl Address for Ipv6Addr {
    fn number(self) -> u128 {
        u128::from(self)
    }
}

/// A lease another member wrote to the site's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held<A = Ipv4Addr> {
    pub mac: Mac,
    pub ip: A,
    /// Seconds since the epoch when it ends.
    pub expires: u64,
    /// The server link its client was told to boot from (DHCPv4 only).
    pub link: Option<Ipv4Addr>,
}

/// Another member's DHCPv6 binding.
pub type Held6 = Held<Ipv6Addr>;

/// One member's share of the site's ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share<A = Ipv4Addr> {
    /// This member's place among the live members (in name order).
    place: u32,
    /// How many members are live (0 or 1: every address is this member's).
    members: u32,
    /// The others' leases by address.
    by_ip: BTreeMap<A, Held<A>>,
    /// The same by client.
    by_mac: BTreeMap<Mac, A>,
}

/// One member's share of the site's DHCPv6 range.
pub type Share6 = Share<Ipv6Addr>;

impl<A> Default for Share<A> {
    fn default() -> Share<A> {
        Share {
            place: 0,
            members: 0,
            by_ip: BTreeMap::new(),
            by_mac: BTreeMap::new(),
        }
    }
}

impl<A: Address> Share<A> {
    /// Member `place` of `members` live ones, the others holding `held`. Of two rows naming
    /// one address (a conflict being settled) the later-ending is kept.
    pub fn new(place: usize, members: usize, held: impl IntoIterator<Item = Held<A>>) -> Share<A> {
        let mut share = Share {
            place: u32::try_from(place).unwrap_or(0),
            members: u32::try_from(members).unwrap_or(0),
            ..Share::default()
        };
        for h in held {
            if share
                .by_ip
                .get(&h.ip)
                .is_some_and(|o| o.expires >= h.expires)
            {
                continue;
            }
            if let Some(old) = share.by_mac.insert(h.mac, h.ip)
                && old != h.ip
            {
                // A client with rows on two subnets: the later-ending wins.
                if share
                    .by_ip
                    .get(&old)
                    .is_some_and(|o| o.expires >= h.expires)
                {
                    share.by_mac.insert(h.mac, old);
                    continue;
                }
                share.by_ip.remove(&old);
            }
            if let Some(other) = share.by_ip.insert(h.ip, h.clone())
                && other.mac != h.mac
            {
                share.by_mac.remove(&other.mac);
            }
        }
        share
    }

    /// The same leases seen by member `place` of `members` (the live members changed).
    pub fn with_members(&self, place: usize, members: usize) -> Share<A> {
        Share {
            place: u32::try_from(place).unwrap_or(0),
            members: u32::try_from(members).unwrap_or(0),
            ..self.clone()
        }
    }

    /// Whether this is the share of member `place` of `members` live ones.
    pub fn is_for(&self, place: usize, members: usize) -> bool {
        (self.place as usize, self.members as usize) == (place, members)
    }

    /// The other members' leases.
    pub fn held(&self) -> impl Iterator<Item = &Held<A>> {
        self.by_ip.values()
    }

    /// Whether this member may give `ip` to a client that has never held it: its number
    /// modulo the live members is this member's place.
    pub fn fresh_is_mine(&self, ip: A) -> bool {
        self.members <= 1 || ip.number() % u128::from(self.members) == u128::from(self.place)
    }

    /// This member's part of the addresses numbered `first..=last`: the lowest of them and
    /// the step from one to the next (the live members' count); `None` when it has none.
    pub fn part(&self, first: u128, last: u128) -> Option<(u128, u128)> {
        if self.members <= 1 {
            return (first <= last).then_some((first, 1));
        }
        let n = u128::from(self.members);
        let ahead = (u128::from(self.place) + n - first % n) % n;
        let lowest = first.checked_add(ahead)?;
        (lowest <= last).then_some((lowest, n))
    }

    /// Whether another member's lease holds `ip` for a client other than `mac` now.
    pub fn held_for_other(&self, mac: Mac, ip: A, now: u64) -> bool {
        self.by_ip
            .get(&ip)
            .is_some_and(|h| h.mac != mac && h.expires > now)
    }

    /// The client another member's lease holds `ip` for now, if any.
    pub fn at(&self, ip: A, now: u64) -> Option<&Held<A>> {
        self.by_ip.get(&ip).filter(|h| h.expires > now)
    }

    /// The lease another member holds for `mac` now, if any.
    pub fn bound(&self, mac: Mac, now: u64) -> Option<&Held<A>> {
        let ip = self.by_mac.get(&mac)?;
        self.by_ip.get(ip).filter(|h| h.expires > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(n: u8) -> Mac {
        Mac([0x52, 0x54, 0, 0x46, 0, n])
    }

    /// Who another member's lease holds an address for, while it has not ended: the client
    /// the services take for a client here too (`service::identity`).
    #[test]
    fn the_client_at_an_address_of_anothers_lease() {
        let ip = Ipv4Addr::new(10, 46, 0, 3);
        let held = Held {
            mac: mac(7),
            ip,
            expires: 100,
            link: Some(Ipv4Addr::new(10, 46, 0, 2)),
        };
        let share = Share::new(1, 2, [held.clone()]);
        assert_eq!(share.at(ip, 10), Some(&held));
        assert_eq!(
            share.at(Ipv4Addr::new(10, 46, 0, 4), 10),
            None,
            "a stranger"
        );
        assert_eq!(share.at(ip, 100), None, "ended");
    }
    fn ip(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 46, 0, n)
    }
    fn held(m: u8, i: u8, expires: u64) -> Held {
        Held {
            mac: mac(m),
            ip: ip(i),
            expires,
            link: None,
        }
    }

    #[test]
    fn the_live_members_split_every_address_exactly_once() {
        for members in 1..=5usize {
            let shares: Vec<Share> = (0..members).map(|p| Share::new(p, members, [])).collect();
            for n in 0..=255u8 {
                let mine = shares.iter().filter(|s| s.fresh_is_mine(ip(n))).count();
                assert_eq!(mine, 1, "{members} members, .{n}");
            }
        }
        // Alone (or no site): everything.
        let alone = Share::default();
        assert!((0..=255u8).all(|n| alone.fresh_is_mine(ip(n))));
        // Two members: by the address's parity.
        let second = Share::new(1, 2, []);
        assert!(second.fresh_is_mine(ip(101)) && !second.fresh_is_mine(ip(100)));
        // A member dying gives the survivor every address.
        assert!(second.with_members(0, 1).fresh_is_mine(ip(100)));
    }

    #[test]
    fn another_members_lease_is_its_clients_alone_until_it_ends() {
        let s = Share::new(0, 2, [held(1, 10, 100), held(2, 11, 50)]);
        assert!(s.held_for_other(mac(3), ip(10), 99));
        assert!(!s.held_for_other(mac(1), ip(10), 99), "its own client");
        assert!(!s.held_for_other(mac(3), ip(10), 100), "ended");
        assert!(!s.held_for_other(mac(3), ip(12), 0), "nobody's");
        assert_eq!(s.bound(mac(1), 99).map(|h| h.ip), Some(ip(10)));
        assert_eq!(s.bound(mac(2), 50), None);
        assert_eq!(s.bound(mac(3), 0), None);
        assert_eq!(s.held().count(), 2);
    }

    #[test]
    fn of_two_rows_for_one_address_or_one_client_the_later_ending_wins() {
        // Two clients on one address (a conflict not settled yet).
        let s = Share::new(0, 2, [held(1, 10, 100), held(2, 10, 200)]);
        assert_eq!(s.bound(mac(2), 0).map(|h| h.ip), Some(ip(10)));
        assert_eq!(s.bound(mac(1), 0), None);
        let s = Share::new(0, 2, [held(2, 10, 200), held(1, 10, 100)]);
        assert_eq!(s.bound(mac(2), 0).map(|h| h.ip), Some(ip(10)));
        assert_eq!(s.bound(mac(1), 0), None);
        // One client on two subnets' addresses.
        let s = Share::new(0, 2, [held(1, 10, 100), held(1, 20, 300)]);
        assert_eq!(s.bound(mac(1), 0).map(|h| h.ip), Some(ip(20)));
        assert_eq!(s.held().count(), 1);
        let s = Share::new(0, 2, [held(1, 20, 300), held(1, 10, 100)]);
        assert_eq!(s.bound(mac(1), 0).map(|h| h.ip), Some(ip(20)));
        assert_eq!(s.held().count(), 1);
    }

    /// A DHCPv6 range split among the live members: every address of it exactly one
    /// member's, by the same rule as DHCPv4's, and `part` walks exactly a member's own.
    #[test]
    fn an_ipv6_range_is_split_by_the_same_rule_and_part_walks_a_members_own() {
        let first: Ipv6Addr = "fd46::ff".parse().unwrap();
        let (lo, hi) = (first.number(), first.number() + 20);
        for members in 1..=4usize {
            let shares: Vec<Share6> = (0..members).map(|p| Share::new(p, members, [])).collect();
            for a in lo..=hi {
                let mine: Vec<usize> = (0..members)
                    .filter(|&p| shares[p].fresh_is_mine(Ipv6Addr::from(a)))
                    .collect();
                assert_eq!(mine.len(), 1, "{members} members, {a:x}");
                // `part` gives the same addresses, lowest first.
                let (start, step) = shares[mine[0]].part(lo, hi).unwrap();
                assert!(
                    start <= a && (a - start) % step == 0,
                    "{members} members, {a:x}"
                );
                assert!(start < lo + step, "the lowest of the part");
            }
        }
        // A range too short for a member's part: none.
        assert_eq!(Share6::new(0, 4, []).part(lo, lo), None);
        assert_eq!(Share6::new(3, 4, []).part(lo, lo), Some((lo, 4)));
        assert_eq!(Share6::default().part(lo, lo), Some((lo, 1)));
        // Near the top of the address space: no overflow.
        assert_eq!(Share6::new(0, 2, []).part(u128::MAX, u128::MAX), None);
        assert_eq!(
            Share6::new(1, 2, []).part(u128::MAX, u128::MAX),
            Some((u128::MAX, 2))
        );
        // Another member's binding: its client's alone until it ends.
        let other = Held6 {
            mac: mac(1),
            ip: first,
            expires: 100,
            link: None,
        };
        let s = Share6::new(0, 2, [other]);
        assert!(s.held_for_other(mac(2), first, 99));
        assert_eq!(s.bound(mac(1), 99).map(|h| h.ip), Some(first));
        assert_eq!(s.at(first, 100), None, "ended");
    }
}

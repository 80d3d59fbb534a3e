//! What a site lets one member's lease table give out, pure: its own part of each range for
//! fresh addresses (address number modulo the live members, this member's place among them),
//! and the other members' bound leases as last read from the site's table, none of which goes
//! to another client and each of which its own client keeps (docs/site.md, "Leases").
//! No I/O and no clock (`now` is seconds since the Unix epoch, passed in).

use crate::config::Mac;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// A lease another member wrote to the site's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub mac: Mac,
    pub ip: Ipv4Addr,
    /// Seconds since the epoch when it ends.
    pub expires: u64,
    /// The server link its client was told to boot from.
    pub link: Option<Ipv4Addr>,
}

/// One member's share of the site's ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Share {
    /// This member's place among the live members (in name order).
    place: u32,
    /// How many members are live (0 or 1: every address is this member's).
    members: u32,
    /// The others' leases by address.
    by_ip: BTreeMap<Ipv4Addr, Held>,
    /// The same by client.
    by_mac: BTreeMap<Mac, Ipv4Addr>,
}

impl Share {
    /// Member `place` of `members` live ones, the others holding `held`. Of two rows naming
    /// one address (a conflict being settled) the later-ending is kept.
    pub fn new(place: usize, members: usize, held: impl IntoIterator<Item = Held>) -> Share {
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
    pub fn with_members(&self, place: usize, members: usize) -> Share {
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
    pub fn held(&self) -> impl Iterator<Item = &Held> {
        self.by_ip.values()
    }

    /// Whether this member may give `ip` to a client that has never held it: its number
    /// modulo the live members is this member's place.
    pub fn fresh_is_mine(&self, ip: Ipv4Addr) -> bool {
        self.members <= 1 || u32::from(ip) % self.members == self.place
    }

    /// Whether another member's lease holds `ip` for a client other than `mac` now.
    pub fn held_for_other(&self, mac: Mac, ip: Ipv4Addr, now: u64) -> bool {
        self.by_ip
            .get(&ip)
            .is_some_and(|h| h.mac != mac && h.expires > now)
    }

    /// The client another member's lease holds `ip` for now, if any.
    pub fn at(&self, ip: Ipv4Addr, now: u64) -> Option<&Held> {
        self.by_ip.get(&ip).filter(|h| h.expires > now)
    }

    /// The lease another member holds for `mac` now, if any.
    pub fn bound(&self, mac: Mac, now: u64) -> Option<&Held> {
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
}

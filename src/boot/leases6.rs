//! DHCPv6 bindings as plain data: which client holds which address of `dhcp6.range` until
//! when. A client is its MAC (read from its DUID, its link-local address or option 79; only
//! a MAC can be in a pool), one address per client whatever its IAID. No I/O and no clock:
//! `now` is seconds since the epoch. Saved whole in `state_dir` by the service
//! (`service::leases6_file`, `saved` and `restore`), so a restart keeps every binding.
//!
//! Invariants: an address is held by at most one MAC; a MAC keeps its address across renewals
//! and after expiry until someone else needs it. Beside the bindings, the addresses clients
//! formed themselves (SLAAC, `observe`): the EUI-64 address of a MAC that asked DHCPv6 for
//! its options only (iPXE, told O and not M by the router advertisement).

use crate::config::Mac;
use std::collections::BTreeMap;
use std::net::Ipv6Addr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding6 {
    pub addr: Ipv6Addr,
    /// Seconds since the epoch when the address's valid lifetime ends.
    pub expires: u64,
}

/// A binding as it is saved: its client, address and end, and the DUID that bound it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Saved6 {
    pub mac: Mac,
    pub addr: Ipv6Addr,
    pub expires: u64,
    /// The DUID, in hex.
    pub duid: String,
}

#[derive(Debug, Clone, Default)]
pub struct Leases6 {
    range: Option<(Ipv6Addr, Ipv6Addr)>,
    by_mac: BTreeMap<Mac, Binding6>,
    by_addr: BTreeMap<Ipv6Addr, Mac>,
    /// The DUID (option 1) of the message that bound each MAC's address last: a RELEASE or
    /// DECLINE must carry it.
    duids: BTreeMap<Mac, Vec<u8>>,
    /// Self-formed addresses: holder and until when.
    formed: BTreeMap<Ipv6Addr, (Mac, u64)>,
}

impl Leases6 {
    pub fn new(range: (Ipv6Addr, Ipv6Addr)) -> Leases6 {
        Leases6 {
            range: Some(range),
            ..Leases6::default()
        }
    }

    /// `mac`'s address: the one it holds (or held), else the lowest free one of the range,
    /// else the one expired longest; held until `expires`, for the client that said `duid`.
    /// `None`: the range is full.
    pub fn bind(&mut self, mac: Mac, duid: &[u8], now: u64, expires: u64) -> Option<Ipv6Addr> {
        let addr = match self.by_mac.get(&mac) {
            Some(b) => b.addr,
            None => self.fresh().or_else(|| self.oldest_expired(now))?,
        };
        if let Some(old) = self.by_addr.insert(addr, mac)
            && old != mac
        {
            self.by_mac.remove(&old);
            self.duids.remove(&old);
        }
        self.by_mac.insert(mac, Binding6 { addr, expires });
        self.duids.insert(mac, duid.to_vec());
        Some(addr)
    }

    /// The address `mac` would be given, without binding it (an ADVERTISE holds nothing).
    pub fn peek(&self, mac: Mac, now: u64) -> Option<Ipv6Addr> {
        match self.by_mac.get(&mac) {
            Some(b) => Some(b.addr),
            None => self.fresh().or_else(|| self.oldest_expired(now)),
        }
    }

    /// `mac` gives its address back (RELEASE) or found it in use (DECLINE): it ends now,
    /// if the message carries the DUID that bound it and names the address it holds (a
    /// message for another client's DUID, or for an address it does not hold, is not the
    /// holder's: it changes nothing). Returns whether it ended.
    pub fn end(&mut self, mac: Mac, duid: &[u8], named: &[Ipv6Addr], now: u64) -> bool {
        let Some(b) = self.by_mac.get_mut(&mac) else {
            return false;
        };
        let holders = self.duids.get(&mac).is_some_and(|d| d == duid);
        if !holders || !named.contains(&b.addr) {
            return false;
        }
        b.expires = b.expires.min(now);
        true
    }

    /// Every binding, by client, as it is saved.
    pub fn saved(&self) -> Vec<Saved6> {
        self.by_mac
            .iter()
            .map(|(mac, b)| Saved6 {
                mac: *mac,
                addr: b.addr,
                expires: b.expires,
                duid: self
                    .duids
                    .get(mac)
                    .map(|d| d.iter().map(|b| format!("{b:02x}")).collect())
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// Takes back bindings saved: those inside the range, an address to its first client
    /// only (a damaged or hand-edited file never gives one address twice). Answers how many
    /// were taken.
    pub fn restore(&mut self, saved: impl IntoIterator<Item = Saved6>) -> usize {
        let mut taken = 0;
        for s in saved {
            let inside = self
                .range
                .is_some_and(|(first, last)| (first..=last).contains(&s.addr));
            if !inside || self.by_addr.contains_key(&s.addr) || self.by_mac.contains_key(&s.mac) {
                continue;
            }
            let duid = (0..s.duid.len() / 2)
                .filter_map(|i| u8::from_str_radix(s.duid.get(2 * i..2 * i + 2)?, 16).ok())
                .collect();
            self.by_addr.insert(s.addr, s.mac);
            self.by_mac.insert(
                s.mac,
                Binding6 {
                    addr: s.addr,
                    expires: s.expires,
                },
            );
            self.duids.insert(s.mac, duid);
            taken += 1;
        }
        taken
    }

    pub fn get(&self, mac: Mac) -> Option<Binding6> {
        self.by_mac.get(&mac).copied()
    }

    /// `mac` is at `addr`, an address it formed itself, until `expires`. An address of the
    /// range stays the bindings'.
    pub fn observe(&mut self, mac: Mac, addr: Ipv6Addr, expires: u64) {
        if !self.by_addr.contains_key(&addr) {
            self.formed.insert(addr, (mac, expires));
        }
    }

    /// The MAC whose binding (or self-formed address) holds `addr` at `now`.
    pub fn holder(&self, addr: Ipv6Addr, now: u64) -> Option<Mac> {
        if let Some(mac) = self.by_addr.get(&addr) {
            return (self.by_mac.get(mac)?.expires > now).then_some(*mac);
        }
        let (mac, expires) = self.formed.get(&addr)?;
        (*expires > now).then_some(*mac)
    }

    /// The lowest address of the range no binding has: one walk over the bindings in order.
    fn fresh(&self) -> Option<Ipv6Addr> {
        let (first, last) = self.range?;
        let (first, last) = (u128::from(first), u128::from(last));
        let mut next = first;
        for addr in self
            .by_addr
            .range(Ipv6Addr::from(first)..=Ipv6Addr::from(last))
        {
            let a = u128::from(*addr.0);
            if a > next {
                break;
            }
            next = a.checked_add(1)?;
        }
        (next <= last).then(|| Ipv6Addr::from(next))
    }

    fn oldest_expired(&self, now: u64) -> Option<Ipv6Addr> {
        self.by_mac
            .values()
            .filter(|b| b.expires <= now)
            .min_by_key(|b| b.expires)
            .map(|b| b.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(n: u8) -> Mac {
        Mac([0x52, 0x54, 0, 0x77, 0, n])
    }

    #[test]
    fn a_client_keeps_its_address_and_a_full_range_reuses_the_oldest_expired() {
        let a: Ipv6Addr = "fd77::100".parse().unwrap();
        let b: Ipv6Addr = "fd77::101".parse().unwrap();
        let mut t = Leases6::new((a, b));
        assert_eq!(t.peek(mac(1), 0), Some(a));
        assert_eq!(t.bind(mac(1), &[1], 0, 100), Some(a));
        assert_eq!(t.bind(mac(1), &[1], 50, 150), Some(a), "a renewal keeps it");
        assert_eq!(t.bind(mac(2), &[2], 0, 80), Some(b));
        assert_eq!(t.bind(mac(3), &[3], 10, 90), None, "full");
        assert_eq!(t.holder(b, 79), Some(mac(2)));
        assert_eq!(t.holder(b, 80), None, "expired");
        // mac 2's has ended: mac 3 takes it, and mac 2 is forgotten.
        assert_eq!(t.bind(mac(3), &[3], 81, 200), Some(b));
        assert_eq!(t.holder(b, 100), Some(mac(3)));
        assert_eq!(t.get(mac(2)), None);
        // Another client's DUID, or an address it does not hold: nothing ends.
        assert!(!t.end(mac(1), &[2], &[a], 120));
        assert!(!t.end(mac(1), &[1], &[b], 120));
        assert!(!t.end(mac(1), &[1], &[], 120));
        assert_eq!(t.holder(a, 121), Some(mac(1)));
        assert!(t.end(mac(1), &[1], &[b, a], 120));
        assert_eq!(t.holder(a, 121), None);
        // Released, still remembered: it gets the same address back.
        assert_eq!(t.bind(mac(1), &[1], 130, 300), Some(a));
        // An address a client formed itself, outside the range.
        let formed: Ipv6Addr = "fd77::5054:ff:fe77:1".parse().unwrap();
        t.observe(mac(1), formed, 400);
        assert_eq!(t.holder(formed, 399), Some(mac(1)));
        assert_eq!(t.holder(formed, 400), None);
        t.observe(mac(9), b, 1000);
        assert_eq!(
            t.holder(b, 150),
            Some(mac(3)),
            "a bound address stays its binding's"
        );
    }

    #[test]
    fn bindings_saved_are_taken_back_with_their_duids_once_each_and_inside_the_range() {
        let range = ("fd77::1".parse().unwrap(), "fd77::ff".parse().unwrap());
        let mut t = Leases6::new(range);
        t.bind(mac(1), &[0, 3, 0xab], 0, 100);
        t.bind(mac(2), &[2], 0, 200);
        let saved = t.saved();
        assert_eq!(saved[0].duid, "0003ab");
        let mut back = Leases6::new(range);
        let mut extra = saved.clone();
        // A second client on an address, an address outside the range: left out.
        extra.push(Saved6 {
            mac: mac(3),
            ..saved[0].clone()
        });
        extra.push(Saved6 {
            mac: mac(4),
            addr: "fd78::1".parse().unwrap(),
            expires: 100,
            duid: String::new(),
        });
        assert_eq!(back.restore(extra), 2);
        assert_eq!(back.saved(), saved);
        // The next client gets a fresh address, the DUID still guards a RELEASE.
        assert_eq!(
            back.bind(mac(5), &[5], 0, 100),
            Some("fd77::3".parse().unwrap())
        );
        assert!(!back.end(mac(1), &[9], &["fd77::1".parse().unwrap()], 50));
        assert!(back.end(mac(1), &[0, 3, 0xab], &["fd77::1".parse().unwrap()], 50));
    }

    #[test]
    fn the_lowest_free_address_fills_gaps() {
        let mut t = Leases6::new(("fd77::1".parse().unwrap(), "fd77::ffff".parse().unwrap()));
        for n in 1..=3 {
            t.bind(mac(n), &[n], 0, 100);
        }
        assert_eq!(
            t.get(mac(3)).unwrap().addr,
            "fd77::3".parse::<Ipv6Addr>().unwrap()
        );
        // An address taken over by another MAC frees nothing; a new MAC gets fd77::4.
        assert_eq!(
            t.bind(mac(9), &[9], 0, 100),
            Some("fd77::4".parse().unwrap())
        );
    }
}

//! The lease table as plain data: which MAC holds which address until when. The DHCP service
//! owns an instance and persists it; this file has no I/O and no clock (`now` is seconds since
//! the Unix epoch, passed in).
//!
//! Invariants: an address is held by at most one MAC; a reserved address goes only to its
//! MAC; a MAC keeps its address across expiry and release until someone else needs it; a MAC
//! with a valid binding is never moved to another address by a REQUEST (RFC 2131 4.3.2: the
//! server NAKs), so a forged REQUEST cannot take a running client's place.
//!
//! The table is also the daemon's one answer to "who is at this address" (`holder`): NFS,
//! NBD, the overlays and the API ask it, through `service::identity`. In proxy mode the table
//! gives nothing out and only learns: the bindings iPXE and firmware report on port 4011.
//!
//! In a site (`share`, `lease_share`), fresh addresses come only from this member's part of
//! each range, an address another member's lease holds goes to nobody else, and a client
//! another member's lease holds is given that lease when it first asks here.

use super::lease_share::Share;
use crate::config::{DhcpSubnet, Mac};
use crate::proto::dhcp::Relayed;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

/// How long an address that a client declined (found in use) stays out of the pool.
pub const DECLINE_QUARANTINE_S: u64 = 600;
/// How long after the ACK that bound an address (SELECTING, INIT-REBOOT) its client may
/// decline it. RFC 2131 (3.1.5, 4.4.1) has the client check the address (ARP) right after
/// that ACK and send DHCPDECLINE from 0.0.0.0 if another host answers; RFC 5227's probes
/// take under 10 s. A DECLINE carries nothing only the client could send (its source is
/// 0.0.0.0, its MAC and option 50 anyone on the segment can copy), so one heard later, or
/// after a mere renewal, is taken for a forgery and changes nothing.
pub const DECLINE_WINDOW_S: u64 = 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Offered, not yet requested; held only briefly.
    Offered,
    Bound,
    /// Released by the client or expired; remembered so the MAC gets it again.
    Free,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub ip: Ipv4Addr,
    pub state: State,
    /// Seconds since the epoch when the hold ends.
    pub expires: u64,
    /// The server link (one of `server.links`) this MAC is told to boot from; it outlives
    /// the lease's state changes, so a client keeps its link across renewals and restarts.
    pub link: Option<Ipv4Addr>,
    /// The architecture (option 93) the MAC's boot firmware or iPXE last said, which picks
    /// what its pool hands it later in the boot (`Member::on_arch`): the script and GRUB's
    /// config are asked for by address, without option 93. The initrd's own DHCP, which does
    /// not send the option, leaves it alone.
    pub arch: Option<u16>,
    /// The relay that carried the MAC's last request and what its option 82 said (`None`:
    /// the last came without one).
    pub relayed: Option<Relayed>,
}

/// Why a REQUEST cannot be granted (the client gets a NAK).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{0} is reserved for another client")]
    ReservedElsewhere(Ipv4Addr),
    #[error("this client's reserved address is {0}")]
    NotItsReservation(Ipv4Addr),
    #[error("{0} is outside the range")]
    OutOfRange(Ipv4Addr),
    #[error("{0} is not on the subnet the request came from")]
    OtherSubnet(Ipv4Addr),
    #[error("{0} is held by another client")]
    Taken(Ipv4Addr),
    #[error("{0} was declined recently")]
    Declined(Ipv4Addr),
    #[error("{0} was not offered to this client")]
    NotOffered(Ipv4Addr),
    #[error("this client holds {0}")]
    HoldsAnother(Ipv4Addr),
}

#[derive(Debug, Clone, Default)]
pub struct Leases {
    /// Every subnet's range, each subnet's addresses apart (`config::Dhcp::subnets`).
    ranges: Vec<(Ipv4Addr, Ipv4Addr)>,
    reserved: BTreeMap<Mac, Ipv4Addr>,
    leases: BTreeMap<Mac, Lease>,
    /// The same leases by address (an address has at most one entry), so that choosing and
    /// checking an address does not walk the whole table: that made each offer O(n^2).
    by_ip: BTreeMap<Ipv4Addr, Mac>,
    reserved_ips: BTreeMap<Ipv4Addr, Mac>,
    /// Address -> end of its quarantine.
    declined: BTreeMap<Ipv4Addr, u64>,
    /// Who declined each quarantined address (in memory only): that client renewing the
    /// address from the address itself takes it back (`reclaim`).
    declined_by: BTreeMap<Ipv4Addr, Mac>,
    /// The ACKs that bound an address afresh and when: the DECLINE window (in memory only).
    fresh_acks: BTreeMap<Mac, (Ipv4Addr, u64)>,
    /// A proxy's table: it learns bindings (`observe`) instead of giving addresses.
    learning: bool,
    /// Per range of `ranges`: every address of it below this one has been used (or is
    /// reserved or declined): the search for a fresh address starts here, so an offer in a busy
    /// range is not a walk over every lease. Lowered whenever an address leaves the table.
    fresh_from: Vec<u32>,
    /// In a site: this member's part of the ranges and the others' leases (`None`: alone).
    share: Option<Arc<Share>>,
}

impl Leases {
    /// The table of an authoritative server that gives from `ranges` (one per subnet).
    pub fn new(
        ranges: Vec<(Ipv4Addr, Ipv4Addr)>,
        reservations: impl IntoIterator<Item = (Mac, Ipv4Addr)>,
    ) -> Leases {
        let reserved: BTreeMap<Mac, Ipv4Addr> = reservations.into_iter().collect();
        Leases {
            fresh_from: vec![0; ranges.len()],
            ranges,
            reserved_ips: reserved.iter().map(|(m, ip)| (*ip, *m)).collect(),
            reserved,
            ..Leases::default()
        }
    }

    /// A reloaded config's ranges (one per subnet) and fixed addresses (`clients[].ip`), from
    /// now on. Every lease held stays, and is renewed, until its client lets it go: a client
    /// whose address a narrower range leaves out keeps it while it runs, and gets one of the
    /// ranges at its next boot.
    pub fn reconfigure(
        &mut self,
        ranges: Vec<(Ipv4Addr, Ipv4Addr)>,
        reservations: impl IntoIterator<Item = (Mac, Ipv4Addr)>,
    ) {
        let reserved: BTreeMap<Mac, Ipv4Addr> = reservations.into_iter().collect();
        self.reserved_ips = reserved.iter().map(|(m, ip)| (*ip, *m)).collect();
        self.reserved = reserved;
        if !self.learning {
            self.ranges = ranges;
        }
        self.fresh_from = vec![0; self.ranges.len()];
    }

    /// The site's share as last read (`lease_share`): fresh addresses from this member's part
    /// of each range only, the others' leases kept for their clients.
    pub fn set_share(&mut self, share: Arc<Share>) {
        // A part that grew (a member died) holds fresh addresses below the search point.
        self.fresh_from = vec![0; self.ranges.len()];
        self.share = Some(share);
    }

    /// Whether another member's lease holds `ip` for another client.
    fn held_elsewhere(&self, mac: Mac, ip: Ipv4Addr, now: u64) -> bool {
        self.share
            .as_ref()
            .is_some_and(|s| s.held_for_other(mac, ip, now))
    }

    /// Whether `ip` is this member's to give to a client that never held it.
    fn fresh_is_mine(&self, ip: Ipv4Addr) -> bool {
        self.share.as_ref().is_none_or(|s| s.fresh_is_mine(ip))
    }

    /// A client that holds no valid binding here but another member's lease: that lease is
    /// taken into this table (the member died, or the client's bucket moved here), so the
    /// client keeps its address. Not when a binding here holds that address for another.
    fn adopt(&mut self, mac: Mac, now: u64) {
        let Some(held) = self.share.as_ref().and_then(|s| s.bound(mac, now)).cloned() else {
            return;
        };
        let bound_here = self
            .leases
            .get(&mac)
            .is_some_and(|l| l.state == State::Bound && l.expires > now);
        if bound_here
            || self.held_by_other(mac, held.ip, now)
            || self.reserved_to_other(mac, held.ip)
        {
            return;
        }
        self.take(
            mac,
            Lease {
                ip: held.ip,
                state: State::Bound,
                expires: held.expires,
                link: held.link,
                arch: None,
                relayed: None,
            },
        );
    }

    /// The site's table refused `mac`'s lease of `ip` (another client holds it there): the
    /// lease ends here, and the client's next REQUEST is refused. Returns whether it held it.
    pub fn withdraw(&mut self, mac: Mac, ip: Ipv4Addr) -> bool {
        if self.leases.get(&mac).is_none_or(|l| l.ip != ip) || self.reserved.contains_key(&mac) {
            return false;
        }
        self.leases.remove(&mac);
        self.forget_ip(ip);
        true
    }

    /// The table of a proxy, which gives no address and learns who is where (`observe`).
    pub fn learning(reservations: impl IntoIterator<Item = (Mac, Ipv4Addr)>) -> Leases {
        Leases {
            learning: true,
            ..Leases::new(Vec::new(), reservations)
        }
    }

    /// Who is at `ip` now: the MAC a pool lists with that fixed address, or the MAC whose
    /// binding (unexpired) holds it. An offer not yet requested is nobody's.
    pub fn holder(&self, ip: Ipv4Addr, now: u64) -> Option<Mac> {
        if let Some(mac) = self.reserved_ips.get(&ip) {
            return Some(*mac);
        }
        let mac = self.by_ip.get(&ip)?;
        let l = self.leases.get(mac)?;
        (l.state == State::Bound && l.expires > now).then_some(*mac)
    }

    /// The MAC whose binding (unexpired) holds `ip` now, whatever the fixed addresses say.
    pub fn bound_to(&self, ip: Ipv4Addr, now: u64) -> Option<Mac> {
        let mac = self.by_ip.get(&ip)?;
        let l = self.leases.get(mac)?;
        (l.state == State::Bound && l.expires > now).then_some(*mac)
    }

    /// The fixed address a pool lists for `mac`.
    pub fn reserved(&self, mac: Mac) -> Option<Ipv4Addr> {
        self.reserved.get(&mac).copied()
    }

    pub fn get(&self, mac: Mac) -> Option<&Lease> {
        self.leases.get(&mac)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Mac, &Lease)> {
        self.leases.iter()
    }

    /// Entries in the table (any state).
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Declined addresses and the end of their quarantine.
    pub fn declined(&self) -> impl Iterator<Item = (Ipv4Addr, u64)> + '_ {
        self.declined.iter().map(|(ip, until)| (*ip, *until))
    }

    /// Whether `ip` is in one of the ranges.
    fn in_a_range(&self, ip: Ipv4Addr) -> bool {
        self.ranges.iter().any(|r| within(*r, ip))
    }

    /// Another MAC holds `ip` now (an unexpired offer or binding).
    fn held_by_other(&self, mac: Mac, ip: Ipv4Addr, now: u64) -> bool {
        self.by_ip.get(&ip).is_some_and(|m| {
            *m != mac
                && self
                    .leases
                    .get(m)
                    .is_some_and(|l| l.state != State::Free && l.expires > now)
        })
    }

    fn reserved_to_other(&self, mac: Mac, ip: Ipv4Addr) -> bool {
        self.reserved_ips.get(&ip).is_some_and(|m| *m != mac)
    }

    fn declined_now(&self, ip: Ipv4Addr, now: u64) -> bool {
        self.declined.get(&ip).is_some_and(|until| *until > now)
    }

    /// Whether `mac` may have dynamic address `ip` of the range `on` gives now.
    fn usable(&self, mac: Mac, ip: Ipv4Addr, on: &DhcpSubnet, now: u64) -> Result<(), Refusal> {
        if self.reserved_to_other(mac, ip) {
            return Err(Refusal::ReservedElsewhere(ip));
        }
        if !on.range.is_some_and(|r| within(r, ip)) {
            return Err(Refusal::OutOfRange(ip));
        }
        if self.held_by_other(mac, ip, now) || self.held_elsewhere(mac, ip, now) {
            return Err(Refusal::Taken(ip));
        }
        if self.declined_now(ip, now) {
            return Err(Refusal::Declined(ip));
        }
        Ok(())
    }

    /// Chooses an address of subnet `on` (the one the DISCOVER came from) and holds it for
    /// `hold_s`. Prefers the reservation, then the MAC's previous address, then the one it
    /// asked for, then an address nobody has used, then the one that has been free longest.
    /// `None`: the range is exhausted, or the MAC's reservation is on another subnet.
    pub fn offer(
        &mut self,
        mac: Mac,
        requested: Option<Ipv4Addr>,
        on: &DhcpSubnet,
        now: u64,
        hold_s: u64,
    ) -> Option<Ipv4Addr> {
        self.adopt(mac, now);
        let ip = self.choose(mac, requested, on, now)?;
        let current = self.leases.get(&mac);
        // Offering what it already holds bound must not shorten or downgrade that binding.
        let keep =
            current.is_some_and(|l| l.ip == ip && l.state == State::Bound && l.expires > now);
        if !keep {
            self.take(
                mac,
                Lease {
                    ip,
                    state: State::Offered,
                    expires: now + hold_s,
                    link: None,
                    arch: None,
                    relayed: None,
                },
            );
        }
        Some(ip)
    }

    fn choose(
        &mut self,
        mac: Mac,
        requested: Option<Ipv4Addr>,
        on: &DhcpSubnet,
        now: u64,
    ) -> Option<Ipv4Addr> {
        if let Some(ip) = self.reserved.get(&mac) {
            return on.subnet.contains(*ip).then_some(*ip);
        }
        let previous = self.leases.get(&mac).map(|l| l.ip);
        // What the client asks for is fresh to it unless it held it: only from our part.
        let requested = requested.filter(|ip| Some(*ip) == previous || self.fresh_is_mine(*ip));
        for ip in [previous, requested].into_iter().flatten() {
            if self.usable(mac, ip, on, now).is_ok() {
                return Some(ip);
            }
        }
        let (first, last) = on.range?;
        let k = self.ranges.iter().position(|r| *r == (first, last))?;
        // In a site, this member's own part of the range first; once that is full, an address
        // of another's part that no lease of the site holds (members with ranges of their own
        // lose nothing; on one shared range the site's table settles a rare clash).
        self.search(mac, on, now, k, true).or_else(|| {
            self.share
                .is_some()
                .then(|| self.search(mac, on, now, k, false))?
        })
    }

    /// A fresh address of range `k` (`on`'s), else the one free longest; of this member's
    /// part only if `mine_only`.
    fn search(
        &mut self,
        mac: Mac,
        on: &DhcpSubnet,
        now: u64,
        k: usize,
        mine_only: bool,
    ) -> Option<Ipv4Addr> {
        let (first, last) = self.ranges[k];
        let allowed = |t: &Leases, ip| !mine_only || t.fresh_is_mine(ip);
        // An address nobody has used, from where the last search stopped.
        for n in self.fresh_from[k].max(u32::from(first))..=u32::from(last) {
            let ip = Ipv4Addr::from(n);
            if !self.by_ip.contains_key(&ip)
                && allowed(self, ip)
                && self.usable(mac, ip, on, now).is_ok()
            {
                self.fresh_from[k] = n;
                return Some(ip);
            }
        }
        // None left: the one free longest (a quarantine that ended below `fresh_from`, or an
        // address of this member's part below it, is found here too).
        let mut oldest: Option<(u64, Ipv4Addr)> = None;
        for n in u32::from(first)..=u32::from(last) {
            let ip = Ipv4Addr::from(n);
            if !allowed(self, ip) || self.usable(mac, ip, on, now).is_err() {
                continue;
            }
            match self
                .by_ip
                .get(&ip)
                .and_then(|m| self.leases.get(m))
                .map(|l| l.expires)
            {
                None => return Some(ip),
                Some(ended) if oldest.is_none_or(|(e, _)| ended < e) => oldest = Some((ended, ip)),
                Some(_) => {}
            }
        }
        oldest.map(|(_, ip)| ip)
    }

    /// Records `lease` for `mac` (keeping the MAC's link), dropping any stale memory of the
    /// address for other MACs.
    fn take(&mut self, mac: Mac, mut lease: Lease) {
        if let Some(old) = self.leases.get(&mac) {
            lease.link = lease.link.or(old.link);
            lease.arch = lease.arch.or(old.arch);
            lease.relayed = lease.relayed.take().or_else(|| old.relayed.clone());
        }
        let ip = lease.ip;
        if let Some(other) = self.by_ip.get(&ip).copied()
            && other != mac
        {
            self.leases.remove(&other);
        }
        if let Some(old) = self.leases.insert(mac, lease) {
            self.forget_ip(old.ip);
        }
        self.by_ip.insert(ip, mac);
    }

    /// Drops `ip` from the address index; it may be fresh again.
    fn forget_ip(&mut self, ip: Ipv4Addr) {
        self.by_ip.remove(&ip);
        for (range, from) in self.ranges.iter().zip(&mut self.fresh_from) {
            if within(*range, ip) {
                *from = (*from).min(u32::from(ip));
            }
        }
    }

    /// Grants a REQUEST in the SELECTING state (it names our server): only for the address
    /// offered to this MAC (or the one it holds, which an offer keeps).
    pub fn ack_offer(
        &mut self,
        mac: Mac,
        ip: Ipv4Addr,
        on: &DhcpSubnet,
        now: u64,
        lease_s: u64,
    ) -> Result<(), Refusal> {
        if self.leases.get(&mac).map(|l| l.ip) != Some(ip) {
            return Err(Refusal::NotOffered(ip));
        }
        self.ack(mac, ip, on, now, lease_s)
    }

    /// Grants a REQUEST for `ip` on subnet `on` (the one it came from) for `lease_s` seconds
    /// (INIT-REBOOT, RENEWING, REBINDING): never to a MAC whose valid binding is another
    /// address, nor an address of another subnet (a client moved to another segment).
    pub fn ack(
        &mut self,
        mac: Mac,
        ip: Ipv4Addr,
        on: &DhcpSubnet,
        now: u64,
        lease_s: u64,
    ) -> Result<(), Refusal> {
        if !on.subnet.contains(ip) {
            return Err(Refusal::OtherSubnet(ip));
        }
        self.adopt(mac, now);
        match self.reserved.get(&mac) {
            Some(r) if *r != ip => return Err(Refusal::NotItsReservation(*r)),
            Some(_) => {
                // A reservation is this MAC's whatever the range says.
                if self.held_by_other(mac, ip, now) {
                    return Err(Refusal::Taken(ip));
                }
            }
            None => {
                if let Some(l) = self.leases.get(&mac)
                    && l.ip != ip
                    && l.state == State::Bound
                    && l.expires > now
                {
                    return Err(Refusal::HoldsAnother(l.ip));
                }
                // Its own binding renewed: kept where a reload narrowed the range since.
                let renewing = self
                    .leases
                    .get(&mac)
                    .is_some_and(|l| l.ip == ip && l.state == State::Bound && l.expires > now);
                if renewing && self.reserved_to_other(mac, ip) {
                    return Err(Refusal::ReservedElsewhere(ip));
                } else if !renewing {
                    self.usable(mac, ip, on, now)?;
                }
            }
        }
        self.take(
            mac,
            Lease {
                ip,
                state: State::Bound,
                expires: now + lease_s,
                link: None,
                arch: None,
                relayed: None,
            },
        );
        Ok(())
    }

    /// A proxy learned that `mac` is at `ip` (its REQUEST on port 4011, from a MAC seen on
    /// port 67): the binding for `secs`, replacing whoever the table had there. The address
    /// came from another DHCP server, which is the authority on it.
    pub fn observe(&mut self, mac: Mac, ip: Ipv4Addr, now: u64, secs: u64) {
        self.take(
            mac,
            Lease {
                ip,
                state: State::Bound,
                expires: now + secs,
                link: None,
                arch: None,
                relayed: None,
            },
        );
    }

    /// The server link `mac` boots from, if one was chosen for it.
    pub fn link(&self, mac: Mac) -> Option<Ipv4Addr> {
        self.leases.get(&mac).and_then(|l| l.link)
    }

    /// Gives `mac` (which has an entry: call after an offer, ACK or observation) `link`.
    /// Returns whether that changed anything.
    pub fn set_link(&mut self, mac: Mac, link: Ipv4Addr) -> bool {
        match self.leases.get_mut(&mac) {
            Some(l) if l.link != Some(link) => {
                l.link = Some(link);
                true
            }
            _ => false,
        }
    }

    /// The architecture `mac`'s firmware said (option 93), if it said one.
    pub fn arch(&self, mac: Mac) -> Option<u16> {
        self.leases.get(&mac).and_then(|l| l.arch)
    }

    /// Notes the architecture `mac` (which has an entry) said. Returns whether that changed
    /// anything.
    pub fn set_arch(&mut self, mac: Mac, arch: u16) -> bool {
        match self.leases.get_mut(&mac) {
            Some(l) if l.arch != Some(arch) => {
                l.arch = Some(arch);
                true
            }
            _ => false,
        }
    }

    /// Where `mac`'s last request came from, if a relay carried it.
    pub fn relayed(&self, mac: Mac) -> Option<&Relayed> {
        self.leases.get(&mac).and_then(|l| l.relayed.as_ref())
    }

    /// Notes where `mac` (which has an entry) last asked from: through a relay (`Some`) or
    /// not. Returns whether that changed anything.
    pub fn set_relayed(&mut self, mac: Mac, relayed: Option<Relayed>) -> bool {
        match self.leases.get_mut(&mac) {
            Some(l) if l.relayed != relayed => {
                l.relayed = relayed;
                true
            }
            _ => false,
        }
    }

    /// A DHCPRELEASE: the address is free again but remembered for this MAC.
    pub fn release(&mut self, mac: Mac, ip: Ipv4Addr, now: u64) -> bool {
        match self.leases.get_mut(&mac) {
            Some(l) if l.ip == ip && l.state != State::Free => {
                l.state = State::Free;
                l.expires = now;
                true
            }
            _ => false,
        }
    }

    /// Notes that an ACK bound `ip` to `mac` afresh (SELECTING or INIT-REBOOT, not a
    /// renewal): the client may decline it for `DECLINE_WINDOW_S`.
    pub fn acked_fresh(&mut self, mac: Mac, ip: Ipv4Addr, now: u64) {
        self.fresh_acks.insert(mac, (ip, now));
    }

    /// A DHCPDECLINE: someone else answers on `ip`; keep it out of the pool for a while. Only
    /// for the address `mac` holds, within `DECLINE_WINDOW_S` of the ACK that bound it;
    /// anything else changes nothing (false).
    pub fn decline(&mut self, mac: Mac, ip: Ipv4Addr, now: u64) -> bool {
        let in_window = self
            .fresh_acks
            .get(&mac)
            .is_some_and(|&(acked, at)| acked == ip && now <= at + DECLINE_WINDOW_S);
        if !in_window || self.leases.get(&mac).is_none_or(|l| l.ip != ip) {
            return false;
        }
        self.fresh_acks.remove(&mac);
        self.leases.remove(&mac);
        self.forget_ip(ip);
        self.declined.insert(ip, now + DECLINE_QUARANTINE_S);
        self.declined_by.insert(ip, mac);
        true
    }

    /// `mac` renews `ip` from `ip` itself after declining it: it uses the address after all
    /// (a DECLINE in its name was forged), so the quarantine ends and the renewal may be
    /// granted. Returns whether it did.
    pub fn reclaim(&mut self, mac: Mac, ip: Ipv4Addr) -> bool {
        if self.declined_by.get(&ip) != Some(&mac) {
            return false;
        }
        self.declined_by.remove(&ip);
        self.declined.remove(&ip).is_some()
    }

    /// The client chose another server's offer: let ours go.
    pub fn withdraw_offer(&mut self, mac: Mac, now: u64) -> bool {
        match self.leases.get_mut(&mac) {
            Some(l) if l.state == State::Offered => {
                l.state = State::Free;
                l.expires = now;
                true
            }
            _ => false,
        }
    }

    /// Marks leases whose time has passed as free and forgets ended quarantines.
    pub fn expire(&mut self, now: u64) {
        for l in self.leases.values_mut() {
            if l.state != State::Free && l.expires <= now {
                l.state = State::Free;
            }
        }
        self.declined.retain(|_, until| *until > now);
        let declined = &self.declined;
        self.declined_by.retain(|ip, _| declined.contains_key(ip));
        self.fresh_acks
            .retain(|_, (_, at)| now <= *at + DECLINE_WINDOW_S);
    }

    /// The persisted form.
    pub fn to_saved(&self) -> Saved {
        Saved {
            leases: self
                .leases
                .iter()
                .map(|(mac, l)| SavedLease {
                    mac: mac.to_string(),
                    ip: l.ip,
                    state: l.state,
                    expires: l.expires,
                    link: l.link,
                    arch: l.arch,
                    relayed: l.relayed.clone(),
                })
                .collect(),
            declined: self
                .declined
                .iter()
                .map(|(ip, until)| (*ip, *until))
                .collect(),
            journal: 0,
        }
    }

    /// Loads saved leases into a table built from the current config. Entries the config no
    /// longer allows (address out of range, now reserved for someone else, a duplicate) are
    /// skipped and counted in the result.
    pub fn restore(&mut self, saved: Saved) -> usize {
        let mut skipped = 0;
        for s in saved.leases {
            let Ok(mac) = s.mac.parse::<Mac>() else {
                skipped += 1;
                continue;
            };
            let allowed = match self.reserved.get(&mac) {
                Some(r) => *r == s.ip,
                None if self.learning => !self.reserved_to_other(mac, s.ip),
                None => self.in_a_range(s.ip) && !self.reserved_to_other(mac, s.ip),
            };
            // A MAC listed twice keeps its first entry, as an address listed twice does.
            let duplicate = self.by_ip.contains_key(&s.ip) || self.leases.contains_key(&mac);
            if !allowed || duplicate {
                skipped += 1;
                continue;
            }
            let lease = Lease {
                ip: s.ip,
                state: s.state,
                expires: s.expires,
                link: s.link,
                arch: s.arch,
                relayed: s.relayed,
            };
            self.leases.insert(mac, lease);
            self.by_ip.insert(s.ip, mac);
        }
        self.declined.extend(saved.declined);
        skipped
    }
}

/// leases.json (see `service::lease_file`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Saved {
    pub leases: Vec<SavedLease>,
    #[serde(default)]
    pub declined: Vec<(Ipv4Addr, u64)>,
    /// The generation of the journal that continues this snapshot.
    #[serde(default)]
    pub journal: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedLease {
    pub mac: String,
    pub ip: Ipv4Addr,
    pub state: State,
    pub expires: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<Ipv4Addr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relayed: Option<Relayed>,
}

/// Whether `ip` is in the inclusive range `r`.
fn within(r: (Ipv4Addr, Ipv4Addr), ip: Ipv4Addr) -> bool {
    (u32::from(r.0)..=u32::from(r.1)).contains(&u32::from(ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A subnet holding every address, with `t`'s first range: what a one-subnet server's
    /// requests come from.
    fn on(t: &Leases) -> DhcpSubnet {
        DhcpSubnet {
            subnet: "0.0.0.0/0".parse().unwrap(),
            range: t.ranges.first().copied(),
            router: None,
            dns: Vec::new(),
            lease: std::time::Duration::from_secs(3600),
            uplink_mbps: None,
        }
    }

    #[test]
    fn a_mac_keeps_its_link_across_offer_ack_release_and_a_restore() {
        let mut t = table();
        let link = Ipv4Addr::new(10, 77, 0, 2);
        assert!(!t.set_link(mac(5), link), "no entry yet: nothing to set");
        let a = t.offer(mac(5), None, &on(&t), 0, 10).unwrap();
        assert!(t.set_link(mac(5), link));
        assert!(!t.set_link(mac(5), link), "unchanged");
        t.ack_offer(mac(5), a, &on(&t), 1, 100).unwrap();
        assert_eq!(t.link(mac(5)), Some(link));
        assert!(t.release(mac(5), a, 2));
        t.offer(mac(5), None, &on(&t), 3, 10).unwrap();
        assert_eq!(t.link(mac(5)), Some(link));
        let json = serde_json::to_string(&t.to_saved()).unwrap();
        let mut fresh = table();
        fresh.restore(serde_json::from_str(&json).unwrap());
        assert_eq!(fresh.link(mac(5)), Some(link));
        assert_eq!(t.link(mac(2)), None);
    }

    /// The architecture the firmware said outlives the initrd's DHCP (an ACK with none) and
    /// a restart, and is written only when it is there.
    #[test]
    fn a_mac_keeps_its_firmwares_architecture() {
        let mut t = table();
        let a = t.offer(mac(5), None, &on(&t), 0, 10).unwrap();
        assert_eq!(t.arch(mac(5)), None);
        assert!(t.set_arch(mac(5), 11));
        assert!(!t.set_arch(mac(5), 11), "unchanged");
        t.ack_offer(mac(5), a, &on(&t), 1, 100).unwrap();
        t.ack(mac(5), a, &on(&t), 2, 100).unwrap();
        assert_eq!(t.arch(mac(5)), Some(11));
        let json = serde_json::to_string(&t.to_saved()).unwrap();
        assert_eq!(json.matches("\"arch\":11").count(), 1, "{json}");
        let mut fresh = table();
        fresh.restore(serde_json::from_str(&json).unwrap());
        assert_eq!(fresh.arch(mac(5)), Some(11));
        // Saved before the field: no architecture.
        let old = json.replace(",\"arch\":11", "");
        let mut fresh = table();
        fresh.restore(serde_json::from_str(&old).unwrap());
        assert_eq!(fresh.arch(mac(5)), None);
    }

    #[test]
    fn a_reloaded_range_gives_new_addresses_and_keeps_every_lease_held() {
        let mut t = table();
        let a = t.offer(mac(10), None, &on(&t), 0, 60).unwrap();
        t.ack_offer(mac(10), a, &on(&t), 1, 3600).unwrap();
        assert_eq!(a, ip(100));
        // The range moves to .110-.111 and mac 3 gets a fixed address.
        t.reconfigure(vec![(ip(110), ip(111))], [(mac(3), ip(50))]);
        let now_on = on(&t);
        // The running client renews what it holds, outside the range now.
        assert_eq!(t.ack(mac(10), a, &now_on, 100, 3600), Ok(()));
        assert_eq!(t.bound_to(a, 101), Some(mac(10)));
        assert_eq!(t.bound_to(ip(50), 101), None);
        assert_eq!(t.holder(a, 101), Some(mac(10)));
        // A newcomer gets an address of the new range; mac 3 its fixed one, mac 2 no longer.
        assert_eq!(t.offer(mac(11), None, &now_on, 102, 60), Some(ip(110)));
        assert_eq!(t.offer(mac(3), None, &now_on, 102, 60), Some(ip(50)));
        assert_eq!(t.reserved(mac(2)), None);
        // Once its lease has ended, the old address is out of range for anyone.
        assert_eq!(
            t.ack(mac(12), ip(101), &now_on, 200, 3600),
            Err(Refusal::OutOfRange(ip(101)))
        );
        check_index(&t);
    }

    /// Two members on one range: each gives fresh addresses from its own part only, never an
    /// address the other's lease holds, and takes over the other's client with its address.
    #[test]
    fn members_sharing_a_range_never_give_one_address_twice() {
        use crate::boot::lease_share::{Held, Share};
        let range = (ip(100), ip(107));
        let mut a = Leases::new(vec![range], []);
        let mut b = Leases::new(vec![range], []);
        a.set_share(Arc::new(Share::new(0, 2, [])));
        b.set_share(Arc::new(Share::new(1, 2, [])));
        let mut given = Vec::new();
        for n in 10..14 {
            for (t, m) in [(&mut a, mac(n)), (&mut b, mac(n + 10))] {
                let o = t.offer(m, None, &on(t), 0, 60).unwrap();
                t.ack_offer(m, o, &on(t), 0, 3600).unwrap();
                given.push(o);
            }
        }
        given.sort();
        assert_eq!(given, (100..=107).map(ip).collect::<Vec<_>>());
        assert!(a.iter().all(|(_, l)| u32::from(l.ip) % 2 == 0));
        // Its part full and every other address held by b's leases: nothing to offer; a
        // REQUEST for an address b's lease holds is refused.
        let held: Vec<Held> = b
            .iter()
            .map(|(m, l)| Held {
                mac: *m,
                ip: l.ip,
                expires: l.expires,
                link: Some(ip(1)),
            })
            .collect();
        a.set_share(Arc::new(Share::new(0, 2, held.clone())));
        assert_eq!(a.offer(mac(30), Some(ip(101)), &on(&a), 1, 60), None);
        assert_eq!(
            a.ack(mac(30), ip(101), &on(&a), 1, 3600),
            Err(Refusal::Taken(ip(101)))
        );
        // b dies: a alone. b's client renewing (or rebooting) keeps its address through a,
        // with its link; a stranger still cannot take one of b's addresses.
        a.set_share(Arc::new(Share::new(0, 1, held)));
        let (m, l) = b.iter().next().map(|(m, l)| (*m, l.clone())).unwrap();
        assert_eq!(a.ack(m, l.ip, &on(&a), 5, 3600), Ok(()));
        assert_eq!(a.holder(l.ip, 6), Some(m));
        assert_eq!(a.link(m), Some(ip(1)));
        let (m2, l2) = b.iter().nth(1).map(|(m, l)| (*m, l.clone())).unwrap();
        assert_eq!(a.offer(m2, None, &on(&a), 5, 60), Some(l2.ip));
        assert_eq!(a.get(m2).unwrap().state, State::Bound, "adopted bound");
        let (_, l3) = b.iter().nth(2).map(|(m, l)| (*m, l.clone())).unwrap();
        assert_eq!(
            a.ack(mac(31), l3.ip, &on(&a), 5, 3600),
            Err(Refusal::Taken(l3.ip))
        );
        // A conflict the site's table found: the loser's lease is withdrawn.
        assert!(a.withdraw(m, l.ip));
        assert_eq!(a.get(m), None);
        assert!(!a.withdraw(m, l.ip));
        check_index(&a);
    }

    /// A member whose own part of a range is full takes an address of another's part that no
    /// lease of the site holds: members given ranges of their own lose no address.
    #[test]
    fn a_member_with_its_part_full_takes_what_nobody_holds() {
        use crate::boot::lease_share::{Held, Share};
        let mut t = Leases::new(vec![(ip(100), ip(103))], []);
        t.set_share(Arc::new(Share::new(1, 2, [])));
        let got: Vec<Ipv4Addr> = (10..14)
            .map(|n| t.offer(mac(n), None, &on(&t), 0, 60).unwrap())
            .collect();
        // Its own part (odd addresses) first, then the rest.
        assert_eq!(got, [ip(101), ip(103), ip(100), ip(102)]);
        // Not an address another member's lease holds.
        let mut t = Leases::new(vec![(ip(100), ip(103))], []);
        let other = Held {
            mac: mac(20),
            ip: ip(100),
            expires: 100,
            link: None,
        };
        t.set_share(Arc::new(Share::new(1, 2, [other])));
        let got: Vec<Option<Ipv4Addr>> = (10..14)
            .map(|n| t.offer(mac(n), None, &on(&t), 0, 60))
            .collect();
        assert_eq!(got, [Some(ip(101)), Some(ip(103)), Some(ip(102)), None]);
    }

    /// The address index says exactly what the table says.
    fn check_index(t: &Leases) {
        assert_eq!(t.by_ip.len(), t.leases.len());
        for (ip, m) in &t.by_ip {
            assert_eq!(t.leases.get(m).map(|l| l.ip), Some(*ip));
        }
    }

    fn mac(n: u8) -> Mac {
        Mac([0x52, 0x54, 0, 0x77, 0, n])
    }
    fn ip(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, 0, n)
    }
    fn table() -> Leases {
        // Range .100-.103; mac 1 reserved .11 (outside), mac 2 reserved .101 (inside).
        Leases::new(
            vec![(ip(100), ip(103))],
            [(mac(1), ip(11)), (mac(2), ip(101))],
        )
    }

    #[test]
    fn a_request_never_moves_a_valid_binding_and_selecting_takes_only_the_offer() {
        let mut t = table();
        let a = t.offer(mac(10), None, &on(&t), 0, 60).unwrap();
        // SELECTING: only what was offered.
        assert_eq!(
            t.ack_offer(mac(10), ip(103), &on(&t), 1, 3600),
            Err(Refusal::NotOffered(ip(103)))
        );
        assert_eq!(t.ack_offer(mac(10), a, &on(&t), 1, 3600), Ok(()));
        assert_eq!(t.holder(a, 2), Some(mac(10)));
        // A forged REQUEST with its MAC for another free address: NAK, the binding stays.
        assert_eq!(
            t.ack(mac(10), ip(103), &on(&t), 5, 3600),
            Err(Refusal::HoldsAnother(a))
        );
        assert_eq!(t.get(mac(10)).unwrap().ip, a);
        // A MAC with no offer cannot SELECT anything.
        assert_eq!(
            t.ack_offer(mac(11), ip(102), &on(&t), 5, 3600),
            Err(Refusal::NotOffered(ip(102)))
        );
        // Once the binding has expired the client may come back elsewhere.
        assert_eq!(t.holder(a, 3601), None);
        assert_eq!(t.ack(mac(10), ip(103), &on(&t), 3601, 3600), Ok(()));
        // Offers are nobody's; fixed addresses are their MAC's even unleased.
        let o = t.offer(mac(12), None, &on(&t), 3601, 60).unwrap();
        assert_eq!(t.holder(o, 3602), None);
        assert_eq!(t.holder(ip(11), 0), Some(mac(1)));
    }

    #[test]
    fn a_learning_table_keeps_what_it_observed_across_a_restart() {
        let mut t = Leases::learning([]);
        t.observe(mac(10), Ipv4Addr::new(192, 168, 5, 7), 100, 60);
        assert_eq!(t.holder(Ipv4Addr::new(192, 168, 5, 7), 120), Some(mac(10)));
        // Another MAC reported at that address takes it: the other server gave it out.
        t.observe(mac(11), Ipv4Addr::new(192, 168, 5, 7), 130, 60);
        assert_eq!(t.holder(Ipv4Addr::new(192, 168, 5, 7), 131), Some(mac(11)));
        check_index(&t);
        let mut back = Leases::learning([]);
        assert_eq!(back.restore(t.to_saved()), 0);
        assert_eq!(
            back.holder(Ipv4Addr::new(192, 168, 5, 7), 131),
            Some(mac(11))
        );
        assert_eq!(back.holder(Ipv4Addr::new(192, 168, 5, 7), 191), None);
    }

    #[test]
    fn reservations_win_and_are_never_given_to_others() {
        let mut t = table();
        assert_eq!(t.offer(mac(1), Some(ip(100)), &on(&t), 0, 60), Some(ip(11)));
        assert_eq!(t.ack(mac(1), ip(11), &on(&t), 0, 3600), Ok(()));
        assert_eq!(
            t.ack(mac(1), ip(100), &on(&t), 0, 3600),
            Err(Refusal::NotItsReservation(ip(11)))
        );
        // .101 is skipped for everybody else, even when asked for.
        let mut got = Vec::new();
        for n in 10..13 {
            let a = t.offer(mac(n), Some(ip(101)), &on(&t), 0, 60).unwrap();
            t.ack(mac(n), a, &on(&t), 0, 3600).unwrap();
            got.push(a);
        }
        assert_eq!(got, [ip(100), ip(102), ip(103)]);
        assert_eq!(
            t.ack(mac(20), ip(101), &on(&t), 0, 3600),
            Err(Refusal::ReservedElsewhere(ip(101)))
        );
        // The range is full now.
        assert_eq!(t.offer(mac(20), None, &on(&t), 0, 60), None);
        assert_eq!(t.offer(mac(2), None, &on(&t), 0, 60), Some(ip(101)));
    }

    #[test]
    fn same_mac_same_address_even_after_release_and_expiry() {
        let mut t = table();
        let a = t.offer(mac(10), None, &on(&t), 100, 60).unwrap();
        t.ack(mac(10), a, &on(&t), 100, 3600).unwrap();
        assert!(t.release(mac(10), a, 200));
        assert_eq!(t.get(mac(10)).unwrap().state, State::Free);
        assert_eq!(t.offer(mac(10), None, &on(&t), 300, 60), Some(a));
        t.ack(mac(10), a, &on(&t), 300, 10).unwrap();
        t.expire(10_000);
        assert_eq!(t.get(mac(10)).unwrap().state, State::Free);
        assert_eq!(t.offer(mac(10), None, &on(&t), 10_000, 60), Some(a));
    }

    #[test]
    fn a_free_address_is_reused_oldest_first_when_the_range_runs_out() {
        let mut t = table();
        for (n, at) in [(10, 0), (11, 10), (12, 20)] {
            let a = t.offer(mac(n), None, &on(&t), at, 60).unwrap();
            t.ack(mac(n), a, &on(&t), at, 100).unwrap();
        }
        assert_eq!(t.offer(mac(13), None, &on(&t), 50, 60), None);
        // At 115 the first lease (ended 100) and the second (ended 110) are over.
        let a = t.offer(mac(13), None, &on(&t), 115, 60).unwrap();
        assert_eq!(a, ip(100));
        assert_eq!(
            t.get(mac(10)),
            None,
            "the old holder's memory of .100 is dropped"
        );
        assert_eq!(
            t.ack(mac(10), ip(100), &on(&t), 115, 100),
            Err(Refusal::Taken(ip(100)))
        );
    }

    #[test]
    fn never_a_duplicate() {
        let mut t = table();
        let mut now = 0;
        for round in 0..50u64 {
            for n in 10..16 {
                now += 7;
                if let Some(a) =
                    t.offer(mac(n), Some(ip(100 + (round % 4) as u8)), &on(&t), now, 30)
                {
                    let _ = t.ack(mac(n), a, &on(&t), now, 40 + round);
                }
                if (n + round as u8).is_multiple_of(3)
                    && let Some(l) = t.get(mac(n)).cloned()
                {
                    t.release(mac(n), l.ip, now);
                }
            }
            t.expire(now);
            let live: Vec<Ipv4Addr> = t
                .iter()
                .filter(|(_, l)| l.state != State::Free && l.expires > now)
                .map(|(_, l)| l.ip)
                .collect();
            let mut dedup = live.clone();
            dedup.sort();
            dedup.dedup();
            assert_eq!(live.len(), dedup.len(), "round {round}: {live:?}");
        }
    }

    #[test]
    fn offers_are_held_then_lapse_and_can_be_withdrawn() {
        let mut t = table();
        let a = t.offer(mac(10), None, &on(&t), 0, 60).unwrap();
        assert_ne!(t.offer(mac(11), None, &on(&t), 30, 60), Some(a));
        assert_eq!(
            t.offer(mac(12), Some(a), &on(&t), 61, 60),
            Some(a),
            "the hold lapsed"
        );
        assert!(t.withdraw_offer(mac(12), 62));
        assert_eq!(t.ack(mac(13), a, &on(&t), 62, 100), Ok(()));
    }

    #[test]
    fn declined_addresses_rest_in_quarantine() {
        let mut t = table();
        let a = t.offer(mac(10), None, &on(&t), 0, 60).unwrap();
        t.ack(mac(10), a, &on(&t), 0, 100).unwrap();
        t.acked_fresh(mac(10), a, 0);
        assert!(t.decline(mac(10), a, 5));
        assert_ne!(t.offer(mac(10), None, &on(&t), 6, 60), Some(a));
        assert_eq!(
            t.ack(mac(11), a, &on(&t), 6, 100),
            Err(Refusal::Declined(a))
        );
        t.expire(5 + DECLINE_QUARANTINE_S);
        assert_eq!(
            t.ack(mac(11), a, &on(&t), 5 + DECLINE_QUARANTINE_S, 100),
            Ok(())
        );
    }

    #[test]
    fn saved_leases_round_trip_and_bad_entries_are_skipped() {
        let mut t = table();
        let a = t.offer(mac(10), None, &on(&t), 0, 60).unwrap();
        t.ack(mac(10), a, &on(&t), 0, 100).unwrap();
        t.ack(mac(1), ip(11), &on(&t), 0, 100).unwrap();
        let mut saved = t.to_saved();
        let json = serde_json::to_string(&saved).unwrap();
        let back: Saved = serde_json::from_str(&json).unwrap();
        assert_eq!(back, saved);
        saved.leases.push(SavedLease {
            mac: "nonsense".into(),
            ip: ip(102),
            state: State::Bound,
            expires: 100,
            link: None,
            arch: None,
            relayed: None,
        });
        saved.leases.push(SavedLease {
            mac: mac(30).to_string(),
            ip: ip(101),
            state: State::Bound,
            expires: 100,
            link: None,
            arch: None,
            relayed: None,
        });
        saved.leases.push(SavedLease {
            mac: mac(31).to_string(),
            ip: a,
            state: State::Bound,
            expires: 100,
            link: None,
            arch: None,
            relayed: None,
        });
        let mut fresh = table();
        assert_eq!(fresh.restore(saved), 3);
        assert_eq!(fresh.get(mac(10)).map(|l| l.ip), Some(a));
        assert_eq!(fresh.offer(mac(10), None, &on(&fresh), 1, 60), Some(a));
        assert_eq!(
            fresh.get(mac(10)).unwrap().state,
            State::Bound,
            "an offer keeps the binding"
        );
    }

    #[test]
    fn random_operations_keep_the_index_and_one_holder_per_address() {
        let range = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 12));
        let mut t = Leases::new(vec![range], [(mac(1), Ipv4Addr::new(10, 0, 0, 3))]);
        let mut x: u64 = 0x1234_5678_9abc_def1;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut now = 1000;
        for _ in 0..20_000 {
            let m = mac(next(20) as u8);
            let ip = Ipv4Addr::new(10, 0, 0, next(14) as u8);
            now += next(3);
            match next(7) {
                0 | 1 => {
                    t.offer(m, Some(ip).filter(|_| next(2) == 0), &on(&t), now, 60);
                }
                2 | 3 => {
                    if t.ack(m, ip, &on(&t), now, 1 + next(100)).is_ok() && next(2) == 0 {
                        t.acked_fresh(m, ip, now);
                    }
                }
                4 => {
                    t.release(m, ip, now);
                }
                5 => {
                    t.decline(m, ip, now);
                }
                _ => t.expire(now),
            }
            check_index(&t);
            // No address is held (unexpired, not free) by two MACs.
            let mut held = std::collections::BTreeSet::new();
            for l in t.leases.values() {
                if l.state != State::Free && l.expires > now {
                    assert!(held.insert(l.ip), "{:?}", t.leases);
                }
            }
        }
        // And a saved table restores to the same index.
        let mut back = Leases::new(vec![range], [(mac(1), Ipv4Addr::new(10, 0, 0, 3))]);
        assert_eq!(back.restore(t.to_saved()), 0);
        check_index(&back);
        assert_eq!(back.leases, t.leases);
    }

    #[test]
    fn fresh_addresses_come_first_and_a_declined_one_returns_after_its_quarantine() {
        let m = |n: u8| Mac([0x52, 0x54, 0, 0, 0, n]);
        let ip = |n: u8| Ipv4Addr::new(10, 0, 0, n);
        let mut t = Leases::new(vec![(ip(1), ip(5))], []);
        assert_eq!(t.offer(m(1), None, &on(&t), 0, 60), Some(ip(1)));
        assert_eq!(t.offer(m(2), None, &on(&t), 0, 60), Some(ip(2)));
        t.ack(m(1), ip(1), &on(&t), 0, 60).unwrap();
        t.acked_fresh(m(1), ip(1), 0);
        assert!(t.decline(m(1), ip(1), 0));
        // .1 is in quarantine: the next fresh address is .3, then .4, .5.
        assert_eq!(t.offer(m(3), None, &on(&t), 0, 60), Some(ip(3)));
        let later = DECLINE_QUARANTINE_S + 1;
        assert_eq!(t.offer(m(4), None, &on(&t), later, 60), Some(ip(4)));
        assert_eq!(t.offer(m(5), None, &on(&t), later, 60), Some(ip(5)));
        // No fresh address past the search point: .1, out of quarantine, is found again.
        assert_eq!(t.offer(m(6), None, &on(&t), later, 60), Some(ip(1)));
        check_index(&t);
    }

    /// A DECLINE changes the lease only for the address the client holds, within the window
    /// after the ACK that bound it (not a renewal's); the client that declined, renewing from
    /// the address, takes it back, and nobody else can.
    #[test]
    fn a_decline_counts_only_in_the_window_after_a_fresh_ack() {
        let mut t = table();
        let a = t.offer(mac(10), None, &on(&t), 0, 60).unwrap();
        t.ack(mac(10), a, &on(&t), 0, 100).unwrap();
        // A renewal's ACK opens no window.
        assert!(!t.decline(mac(10), a, 1));
        t.acked_fresh(mac(10), a, 0);
        let other = Ipv4Addr::new(10, 0, 0, 99);
        assert!(!t.decline(mac(10), other, 1), "not the held address");
        assert!(!t.decline(mac(11), a, 1), "not the holder");
        assert!(!t.decline(mac(10), a, DECLINE_WINDOW_S + 1), "too late");
        assert_eq!(t.get(mac(10)).map(|l| l.ip), Some(a));
        // In the window: the address rests, the client's lease ends.
        assert!(t.decline(mac(10), a, 2));
        assert_eq!(
            t.ack(mac(10), a, &on(&t), 3, 100),
            Err(Refusal::Declined(a))
        );
        assert!(!t.reclaim(mac(11), a));
        assert_eq!(
            t.ack(mac(11), a, &on(&t), 3, 100),
            Err(Refusal::Declined(a))
        );
        // Its holder renewing from it: the DECLINE was not its own; the renewal is granted.
        assert!(t.reclaim(mac(10), a));
        assert_eq!(t.ack(mac(10), a, &on(&t), 4, 100), Ok(()));
        assert_eq!(t.holder(a, 5), Some(mac(10)));
    }
}

//! Where firmware waits, link by link: the firmware DHCP clients waiting for an answer on
//! each paced link, and the TFTP transfers running on it. `pacing` asks each round for each
//! link's headroom, so only the link a waiting firmware's packets leave by gives up its last
//! part to them (`fair_share::HEADROOM`); the other links stay full (docs/links.md,
//! "Headroom").
//!
//! A firmware waits on a timer from its DHCP DISCOVER until its TFTP transfer starts: after a
//! DISCOVER it may collect offers for seconds (`AFTER_DISCOVER`); after its REQUEST the ACK
//! leaves at once and its TFTP request follows within milliseconds (`AFTER_REQUEST`), and the
//! transfer then holds its link for as long as it runs, and `AFTER_TRANSFER` after (a next
//! file is asked at once). So each firmware client's hold is its latest message's: a REQUEST
//! ends the wait its DISCOVER began. A room that powers on at once gives its links back
//! when its last firmware has its loader, not seconds later.
//!
//! The services tell it through a `FirmwareWatch` (cheap to clone; nothing when no link is
//! paced): the DHCP service at a firmware's request (`dhcp`, by its MAC; DHCPv6's by none,
//! `asked`), the TFTP service for as long as a transfer runs (`FirmwareWatch::transfer`'s
//! guard). A request is placed on the link whose address it reached; when the kernel did not
//! say, or that address is no paced link's (an IPv6 request, `server.address` on an interface
//! of unknown capacity), on every link, as the safe side. At most `MAX_CLIENTS` firmware
//! clients are followed one by one; past that (a room of forged MACs) a request holds its
//! link as a DISCOVER would, whatever it was.

use super::fair_share;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a firmware's DHCP DISCOVER (and any DHCPv6 message, whose client is not followed)
/// keeps its link's headroom: a PXE firmware may collect offers that long before it asks for
/// one, and its first DHCP or TFTP retransmit comes after about 3-4 s.
pub const AFTER_DISCOVER: Duration = Duration::from_secs(3);

/// How long a firmware's DHCP REQUEST (or any message but a DISCOVER) keeps it: the ACK is sent
/// at once, and the TFTP request that follows it starts a transfer, which holds the link itself.
pub const AFTER_REQUEST: Duration = Duration::from_secs(1);

/// How long the end of a TFTP transfer keeps it: a firmware that loads several files (shim,
/// then GRUB and its config) asks for the next at once.
pub const AFTER_TRANSFER: Duration = Duration::from_secs(1);

/// How many firmware clients are followed one by one.
pub const MAX_CLIENTS: usize = 4096;

/// What a firmware's DHCP message says of its wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dhcp {
    /// A DISCOVER: it may wait for offers for `AFTER_DISCOVER`.
    Discover,
    /// A REQUEST, or anything else: its answer leaves now (`AFTER_REQUEST`).
    Request,
}

impl Dhcp {
    fn hold(self) -> Duration {
        match self {
            Dhcp::Discover => AFTER_DISCOVER,
            Dhcp::Request => AFTER_REQUEST,
        }
    }
}

/// The firmware seen on each paced link.
pub struct Firmware {
    /// What the milliseconds below count from.
    epoch: Instant,
    /// Per paced link (in the pacer's order): its address, and what waits there.
    links: Vec<(Ipv4Addr, Waiting)>,
    /// Per firmware client (its MAC): its wait.
    clients: Mutex<HashMap<[u8; 6], Wait>>,
}

/// A firmware client's wait.
#[derive(Clone, Copy)]
struct Wait {
    /// The link it waits on (`None`: every one).
    link: Option<usize>,
    /// Until when, milliseconds after `epoch`.
    until_ms: u64,
}

#[derive(Default)]
struct Waiting {
    /// TFTP transfers running on the link.
    transfers: AtomicU32,
    /// Until when (milliseconds after `epoch`) the link keeps its headroom for waits that are
    /// no one client's: DHCPv6, a transfer's end, clients past `MAX_CLIENTS`.
    until_ms: AtomicU64,
}

impl Firmware {
    /// Nothing seen yet on the links at `addresses`.
    pub fn new(addresses: &[Ipv4Addr], epoch: Instant) -> Firmware {
        Firmware {
            epoch,
            links: addresses.iter().map(|a| (*a, Waiting::default())).collect(),
            clients: Mutex::new(HashMap::new()),
        }
    }

    fn ms(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_millis() as u64
    }

    /// The link a firmware's packets sent from `local` leave by: the one holding the address,
    /// else every one (`None`).
    fn link_of(&self, local: Option<Ipv4Addr>) -> Option<usize> {
        local.and_then(|l| self.links.iter().position(|(a, _)| *a == l))
    }

    /// The links `link` names: that one, or every one.
    fn on(&self, link: Option<usize>) -> impl Iterator<Item = &Waiting> {
        self.links
            .iter()
            .enumerate()
            .filter(move |(i, _)| link.is_none_or(|one| one == *i))
            .map(|(_, (_, w))| w)
    }

    /// Something no one client's reached `local` at `now`: its links keep the headroom for
    /// `hold`.
    pub fn asked(&self, local: Option<Ipv4Addr>, now: Instant, hold: Duration) {
        let until = self.ms(now + hold);
        for w in self.on(self.link_of(local)) {
            w.until_ms.fetch_max(until, Ordering::Relaxed);
        }
    }

    /// Firmware `mac`'s DHCP message `kind` reached `local` at `now`: its wait is now that
    /// message's, on that link.
    pub fn dhcp(&self, mac: [u8; 6], local: Option<Ipv4Addr>, kind: Dhcp, now: Instant) {
        let link = self.link_of(local);
        let until = self.ms(now + kind.hold());
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if !clients.contains_key(&mac) && clients.len() >= MAX_CLIENTS {
            let at = self.ms(now);
            clients.retain(|_, w| w.until_ms > at);
            if clients.len() >= MAX_CLIENTS {
                drop(clients);
                self.asked(local, now, AFTER_DISCOVER);
                return;
            }
        }
        let wait = Wait {
            link,
            until_ms: until,
        };
        clients.insert(mac, wait);
    }

    /// The share of each link's capacity paced traffic may use at `now`, in the pacer's
    /// order: `HEADROOM` while a TFTP transfer runs on it or a firmware waits there, else the
    /// whole link (`QUIET_HEADROOM`). The clients' waits are read (and the ended ones dropped)
    /// once for every link.
    pub fn headrooms(&self, now: Instant) -> Vec<f64> {
        let at = self.ms(now);
        let mut waiting: Vec<bool> = self
            .links
            .iter()
            .map(|(_, w)| {
                w.transfers.load(Ordering::Relaxed) > 0 || w.until_ms.load(Ordering::Relaxed) > at
            })
            .collect();
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients.retain(|_, w| w.until_ms > at);
        for w in clients.values() {
            match w.link {
                Some(one) => waiting[one] = true,
                None => waiting.iter_mut().for_each(|on| *on = true),
            }
        }
        let share = |on: bool| {
            if on {
                fair_share::HEADROOM
            } else {
                fair_share::QUIET_HEADROOM
            }
        };
        waiting.into_iter().map(share).collect()
    }

    /// `headrooms` of link `link` alone; a link the pacer does not have is whole.
    #[cfg(test)]
    fn headroom(&self, link: usize, now: Instant) -> f64 {
        self.headrooms(now)
            .get(link)
            .copied()
            .unwrap_or(fair_share::QUIET_HEADROOM)
    }
}

/// The services' handle on `Firmware`; nothing when no link is paced.
#[derive(Clone, Default)]
pub struct FirmwareWatch(Option<Arc<Firmware>>);

impl FirmwareWatch {
    pub fn of(firmware: Arc<Firmware>) -> FirmwareWatch {
        FirmwareWatch(Some(firmware))
    }

    /// A firmware's DHCPv6 message reached the server (which address, the kernel does not
    /// say): every link keeps the headroom for `AFTER_DISCOVER`.
    pub fn asked(&self, local: Option<Ipv4Addr>) {
        if let Some(f) = &self.0 {
            f.asked(local, Instant::now(), AFTER_DISCOVER);
        }
    }

    /// Firmware `mac`'s DHCP message `kind` reached the server's address `local` (`None`: not
    /// known).
    pub fn dhcp(&self, mac: [u8; 6], local: Option<Ipv4Addr>, kind: Dhcp) {
        if let Some(f) = &self.0 {
            f.dhcp(mac, local, kind, Instant::now());
        }
    }

    /// A TFTP transfer sent from `local` starts: its link keeps the headroom until the
    /// returned guard drops (the transfer's end), and `AFTER_TRANSFER` after.
    pub fn transfer(&self, local: Option<Ipv4Addr>) -> FirmwareTransfer {
        let Some(f) = &self.0 else {
            return FirmwareTransfer(None);
        };
        for w in f.on(f.link_of(local)) {
            w.transfers.fetch_add(1, Ordering::Relaxed);
        }
        FirmwareTransfer(Some((f.clone(), local)))
    }
}

/// A running TFTP transfer's hold on its link's headroom (`FirmwareWatch::transfer`).
pub struct FirmwareTransfer(Option<(Arc<Firmware>, Option<Ipv4Addr>)>);

impl Drop for FirmwareTransfer {
    fn drop(&mut self) {
        if let Some((f, local)) = self.0.take() {
            f.asked(local, Instant::now(), AFTER_TRANSFER);
            for w in f.on(f.link_of(local)) {
                w.transfers.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fair_share::{HEADROOM, QUIET_HEADROOM};

    const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    const MAC: [u8; 6] = [0x52, 0x54, 0, 0, 0, 1];
    const OTHER: [u8; 6] = [0x52, 0x54, 0, 0, 0, 2];

    fn both(f: &Firmware, at: Instant) -> (f64, f64) {
        (f.headroom(0, at), f.headroom(1, at))
    }

    #[test]
    fn only_the_link_a_firmware_waits_on_keeps_the_headroom() {
        let t0 = Instant::now();
        let f = Firmware::new(&[A, B], t0);
        // Nothing asked yet: both links whole.
        assert_eq!(both(&f, t0), (QUIET_HEADROOM, QUIET_HEADROOM));
        // A DISCOVER on the second link's address: that link alone, for AFTER_DISCOVER.
        f.dhcp(MAC, Some(B), Dhcp::Discover, t0);
        assert_eq!(both(&f, t0), (QUIET_HEADROOM, HEADROOM));
        let half = t0 + AFTER_DISCOVER / 2;
        assert_eq!(f.headroom(1, half), HEADROOM);
        assert_eq!(f.headroom(1, t0 + AFTER_DISCOVER), QUIET_HEADROOM);
        // An address no paced link holds, or none known: every link.
        f.dhcp(
            OTHER,
            Some(Ipv4Addr::new(192, 168, 1, 1)),
            Dhcp::Discover,
            half,
        );
        assert_eq!(both(&f, half), (HEADROOM, HEADROOM));
        let later = half + AFTER_DISCOVER;
        f.asked(None, later, AFTER_DISCOVER);
        assert_eq!(both(&f, later), (HEADROOM, HEADROOM));
        assert_eq!(
            both(&f, later + AFTER_DISCOVER),
            (QUIET_HEADROOM, QUIET_HEADROOM)
        );
        // A link the pacer does not have is whole.
        assert_eq!(f.headroom(7, later), QUIET_HEADROOM);
    }

    #[test]
    fn a_firmwares_request_ends_the_wait_its_discover_began() {
        let t0 = Instant::now();
        let f = Firmware::new(&[A, B], t0);
        let soon = t0 + Duration::from_millis(20);
        f.dhcp(MAC, Some(A), Dhcp::Discover, t0);
        f.dhcp(MAC, Some(A), Dhcp::Request, soon);
        // The ACK leaves at once; the link is whole again AFTER_REQUEST later, not
        // AFTER_DISCOVER after the DISCOVER.
        assert_eq!(f.headroom(0, soon + AFTER_REQUEST / 2), HEADROOM);
        assert_eq!(f.headroom(0, soon + AFTER_REQUEST), QUIET_HEADROOM);
        // Another client's DISCOVER is its own wait.
        f.dhcp(MAC, Some(A), Dhcp::Discover, soon);
        f.dhcp(OTHER, Some(A), Dhcp::Request, soon);
        assert_eq!(f.headroom(0, soon + AFTER_REQUEST), HEADROOM);
    }

    #[test]
    fn past_the_clients_followed_a_request_holds_its_link_as_a_discover() {
        let t0 = Instant::now();
        let f = Firmware::new(&[A, B], t0);
        for n in 0..MAX_CLIENTS as u32 {
            let b = n.to_be_bytes();
            f.dhcp([2, 0, b[0], b[1], b[2], b[3]], Some(A), Dhcp::Request, t0);
        }
        f.dhcp(MAC, Some(B), Dhcp::Request, t0);
        assert_eq!(f.clients.lock().unwrap().len(), MAX_CLIENTS);
        assert_eq!(f.headroom(1, t0 + AFTER_REQUEST), HEADROOM);
        assert_eq!(f.headroom(1, t0 + AFTER_DISCOVER), QUIET_HEADROOM);
        // Once the followed ones' waits are over, there is room again.
        let later = t0 + AFTER_DISCOVER;
        f.dhcp(MAC, Some(B), Dhcp::Request, later);
        assert_eq!(f.clients.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_running_transfer_keeps_its_links_headroom_until_it_ends() {
        let f = Arc::new(Firmware::new(&[A, B], Instant::now()));
        let watch = FirmwareWatch::of(f.clone());
        let transfer = watch.transfer(Some(A));
        // However long it runs.
        let long = Instant::now() + AFTER_DISCOVER * 10;
        assert_eq!(both(&f, long), (HEADROOM, QUIET_HEADROOM));
        let two = watch.transfer(Some(A));
        drop(transfer);
        assert_eq!(f.headroom(0, long), HEADROOM);
        drop(two);
        // Its end holds the link AFTER_TRANSFER more.
        let ended = Instant::now();
        assert_eq!(f.headroom(0, ended), HEADROOM);
        assert_eq!(f.headroom(0, ended + AFTER_TRANSFER), QUIET_HEADROOM);
        // No pacer: the handle does nothing.
        drop(FirmwareWatch::default().transfer(Some(A)));
        FirmwareWatch::default().dhcp(MAC, Some(A), Dhcp::Discover);
    }
}

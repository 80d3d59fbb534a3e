//! Where firmware waits, link by link: the firmware DHCP and TFTP requests each paced link
//! carried last, and the TFTP transfers running on it. `pacing` asks each round for each
//! link's headroom (`fair_share::headroom`), so only the link a waiting firmware's packets
//! leave by gives up its last part to them; the other links stay full (docs/links.md,
//! "Headroom").
//!
//! The services tell it through a `FirmwareWatch` (cheap to clone; nothing when no link is
//! paced): the DHCP service at a firmware's request, the TFTP service for as long as a
//! transfer runs (`FirmwareWatch::transfer`'s guard). A request is placed on the link whose
//! address it reached; when the kernel did not say, or that address is no paced link's (an
//! IPv6 request, `server.address` on an interface of unknown capacity), on every link, as
//! the safe side.

use super::fair_share;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The firmware seen on each paced link.
pub struct Firmware {
    /// What `last_ms` counts from.
    epoch: Instant,
    /// Per paced link (in the pacer's order): its address, and what waits there.
    links: Vec<(Ipv4Addr, Waiting)>,
}

#[derive(Default)]
struct Waiting {
    /// TFTP transfers running on the link.
    transfers: AtomicU32,
    /// When a firmware's last request came (milliseconds after `epoch`, plus one; 0: none).
    last_ms: AtomicU64,
}

impl Firmware {
    /// Nothing seen yet on the links at `addresses`.
    pub fn new(addresses: &[Ipv4Addr], epoch: Instant) -> Firmware {
        Firmware {
            epoch,
            links: addresses.iter().map(|a| (*a, Waiting::default())).collect(),
        }
    }

    /// The links a firmware's packets sent from `local` leave by: the one holding the
    /// address, else every one.
    fn on(&self, local: Option<Ipv4Addr>) -> impl Iterator<Item = &Waiting> {
        let one = local.and_then(|l| self.links.iter().position(|(a, _)| *a == l));
        self.links
            .iter()
            .enumerate()
            .filter(move |(i, _)| one.is_none_or(|one| one == *i))
            .map(|(_, (_, w))| w)
    }

    /// A firmware's DHCP or TFTP request reached `local` at `now`.
    pub fn asked(&self, local: Option<Ipv4Addr>, now: Instant) {
        let ms = now.saturating_duration_since(self.epoch).as_millis() as u64 + 1;
        for w in self.on(local) {
            w.last_ms.fetch_max(ms, Ordering::Relaxed);
        }
    }

    /// The share of link `link`'s capacity paced traffic may use at `now`: `HEADROOM` while a
    /// TFTP transfer runs on it or within `FIRMWARE_QUIET` of a firmware's request there,
    /// else the whole link (`QUIET_HEADROOM`).
    pub fn headroom(&self, link: usize, now: Instant) -> f64 {
        let Some((_, w)) = self.links.get(link) else {
            return fair_share::QUIET_HEADROOM;
        };
        if w.transfers.load(Ordering::Relaxed) > 0 {
            return fair_share::HEADROOM;
        }
        let since = match w.last_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => {
                let at = self.epoch + Duration::from_millis(ms - 1);
                Some(now.saturating_duration_since(at))
            }
        };
        fair_share::headroom(since)
    }
}

/// The services' handle on `Firmware`; nothing when no link is paced.
#[derive(Clone, Default)]
pub struct FirmwareWatch(Option<Arc<Firmware>>);

impl FirmwareWatch {
    pub fn of(firmware: Arc<Firmware>) -> FirmwareWatch {
        FirmwareWatch(Some(firmware))
    }

    /// A firmware's DHCP or TFTP request reached the server's address `local` (`None`: not
    /// known, or IPv6).
    pub fn asked(&self, local: Option<Ipv4Addr>) {
        if let Some(f) = &self.0 {
            f.asked(local, Instant::now());
        }
    }

    /// A TFTP transfer sent from `local` starts: its link keeps the headroom until the
    /// returned guard drops (the transfer's end), and `FIRMWARE_QUIET` after.
    pub fn transfer(&self, local: Option<Ipv4Addr>) -> FirmwareTransfer {
        let Some(f) = &self.0 else {
            return FirmwareTransfer(None);
        };
        f.asked(local, Instant::now());
        for w in f.on(local) {
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
            f.asked(local, Instant::now());
            for w in f.on(local) {
                w.transfers.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fair_share::{FIRMWARE_QUIET, HEADROOM, QUIET_HEADROOM};

    const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

    #[test]
    fn only_the_link_a_firmware_asked_on_keeps_the_headroom() {
        let t0 = Instant::now();
        let f = Firmware::new(&[A, B], t0);
        // Nothing asked yet: both links whole.
        assert_eq!(
            (f.headroom(0, t0), f.headroom(1, t0)),
            (QUIET_HEADROOM, QUIET_HEADROOM)
        );
        // A request on the second link's address: that link alone, for FIRMWARE_QUIET.
        f.asked(Some(B), t0);
        assert_eq!(
            (f.headroom(0, t0), f.headroom(1, t0)),
            (QUIET_HEADROOM, HEADROOM)
        );
        let half = t0 + FIRMWARE_QUIET / 2;
        assert_eq!(f.headroom(1, half), HEADROOM);
        assert_eq!(f.headroom(1, t0 + FIRMWARE_QUIET), QUIET_HEADROOM);
        // An address no paced link holds, or none known: every link.
        f.asked(Some(Ipv4Addr::new(192, 168, 1, 1)), half);
        assert_eq!(
            (f.headroom(0, half), f.headroom(1, half)),
            (HEADROOM, HEADROOM)
        );
        let later = half + FIRMWARE_QUIET;
        f.asked(None, later);
        assert_eq!(
            (f.headroom(0, later), f.headroom(1, later)),
            (HEADROOM, HEADROOM)
        );
        // A link the pacer does not have is whole.
        assert_eq!(f.headroom(7, later), QUIET_HEADROOM);
    }

    #[test]
    fn a_running_transfer_keeps_its_links_headroom_until_it_ends() {
        let f = Arc::new(Firmware::new(&[A, B], Instant::now()));
        let watch = FirmwareWatch::of(f.clone());
        let transfer = watch.transfer(Some(A));
        // However long it runs.
        let long = Instant::now() + FIRMWARE_QUIET * 10;
        assert_eq!(
            (f.headroom(0, long), f.headroom(1, long)),
            (HEADROOM, QUIET_HEADROOM)
        );
        let both = watch.transfer(Some(A));
        drop(transfer);
        assert_eq!(f.headroom(0, long), HEADROOM);
        drop(both);
        // Its end counts as the link's last request.
        let ended = Instant::now();
        assert_eq!(f.headroom(0, ended), HEADROOM);
        assert_eq!(f.headroom(0, ended + FIRMWARE_QUIET), QUIET_HEADROOM);
        // No pacer: the handle does nothing.
        drop(FirmwareWatch::default().transfer(Some(A)));
    }
}

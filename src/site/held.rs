//! The addresses this host holds for the site beyond its own: those keepalived made it the
//! VRRP master of (`bootpool site takeover`, docs/failover.md), which the NFS and NBD checks
//! accept while they are held, and the queue of takeovers the daemon acts on (a listener on
//! the address, tickle ACKs to its connections).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Mutex, RwLock};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

#[derive(Debug)]
pub struct Held {
    now: RwLock<BTreeSet<Ipv4Addr>>,
    taken: UnboundedSender<Ipv4Addr>,
    /// Taken once, by the task acting on takeovers.
    takeovers: Mutex<Option<UnboundedReceiver<Ipv4Addr>>>,
}

impl Default for Held {
    fn default() -> Held {
        let (taken, takeovers) = unbounded_channel();
        Held {
            now: RwLock::default(),
            taken,
            takeovers: Mutex::new(Some(takeovers)),
        }
    }
}

impl Held {
    /// This host is now `ip`'s master: held, and queued for the takeover's work (again, if
    /// it was held already: keepalived says so once per transition).
    pub fn take(&self, ip: Ipv4Addr) {
        self.now
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(ip);
        let _ = self.taken.send(ip);
    }

    /// This host no longer holds `ip`; whether it did.
    pub fn release(&self, ip: Ipv4Addr) -> bool {
        self.now
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&ip)
    }

    /// Whether `ip` (a connection's local address) is one this host holds for the site.
    pub fn holds(&self, ip: IpAddr) -> bool {
        let v4 = match ip {
            IpAddr::V4(v4) => Some(v4),
            IpAddr::V6(v6) => v6.to_ipv4_mapped(),
        };
        v4.is_some_and(|v4| {
            self.now
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&v4)
        })
    }

    /// The addresses held now.
    pub fn all(&self) -> Vec<Ipv4Addr> {
        let now = self.now.read().unwrap_or_else(|e| e.into_inner());
        now.iter().copied().collect()
    }

    /// The takeovers, in order, for the one task that acts on them (`None` the second time).
    pub fn takeovers(&self) -> Option<UnboundedReceiver<Ipv4Addr>> {
        self.takeovers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_held_from_its_takeover_to_its_release_and_each_takeover_is_queued() {
        let held = Held::default();
        let ip = Ipv4Addr::new(10, 0, 0, 1);
        let mut q = held.takeovers().unwrap();
        assert!(held.takeovers().is_none());
        assert!(!held.holds(ip.into()));
        held.take(ip);
        assert!(held.holds(ip.into()));
        assert!(held.holds(ip.to_ipv6_mapped().into()));
        assert!(!held.holds(Ipv4Addr::new(10, 0, 0, 2).into()));
        assert!(held.release(ip));
        assert!(!held.release(ip));
        assert!(!held.holds(ip.into()));
        held.take(ip);
        assert_eq!((q.try_recv(), q.try_recv()), (Ok(ip), Ok(ip)));
        assert!(q.try_recv().is_err());
        assert_eq!(held.all(), [ip]);
    }
}

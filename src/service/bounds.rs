//! Small bounds the services share: a service's slots, for its clients and, apart, for
//! strangers (`Slots`); log lines rate-limited per call site (`LogLimit`, from `crate::log_limit`) so that a flood of refusals or strangers writes a few
//! lines and a count, not one line per packet; and the root connections' bound on a silent peer
//! (`lose_silent_peers`).

pub use crate::log_limit::LogLimit;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Who an address is to a service (`boot::exports::is_client`): one of the clients it is for,
/// or a stranger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    Client,
    Stranger,
}

/// How many slots a pool holds at once, in all and for one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    pub total: usize,
    pub per_address: usize,
}

/// Why no slot was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    /// Every slot of the pool is held.
    Pool,
    /// The address holds its share.
    Address,
}

impl Full {
    pub fn reason(self) -> &'static str {
        match self {
            Full::Pool => "every slot held",
            Full::Address => "this address holds its share",
        }
    }
}

/// A service's slots (connections, or TFTP transfers): its clients share one pool, strangers
/// a small one of their own, and every address is held to its share of its pool. So however
/// many addresses a host on the clients' network (or the campus side) sends from, without a
/// lease it holds at most the strangers' pool, and the room's slots stay the room's. Held
/// slots and refusals are counted in the service's `metrics::Slots` (/metrics:
/// `bootpool_slots_*`). Each listener has its own: a service's IPv6 listener (HTTP, NBD) holds
/// pools of the same sizes beside its IPv4 one, and both count into the same figures.
#[derive(Clone)]
pub struct Slots {
    inner: Arc<SlotsInner>,
}

struct SlotsInner {
    metrics: crate::metrics::Metrics,
    counts: fn(&crate::metrics::Metrics) -> &crate::metrics::Slots,
    clients: Mutex<Held>,
    strangers: Mutex<Held>,
    /// The clients' caps (a reload may change them: `set_client_caps`), the strangers'.
    client_caps: Mutex<Caps>,
    stranger_caps: Caps,
}

/// One pool's slots held: in all, and per address.
#[derive(Default)]
struct Held {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// One held slot; given back when dropped.
pub struct Slot {
    inner: Arc<SlotsInner>,
    ip: IpAddr,
    standing: Standing,
}

impl Slots {
    /// `counts` picks the service's figures out of `metrics` (`|m| &m.nfs().slots`).
    pub fn new(
        metrics: crate::metrics::Metrics,
        counts: fn(&crate::metrics::Metrics) -> &crate::metrics::Slots,
        clients: Caps,
        strangers: Caps,
    ) -> Slots {
        let inner = SlotsInner {
            metrics,
            counts,
            clients: Mutex::default(),
            strangers: Mutex::default(),
            client_caps: Mutex::new(clients),
            stranger_caps: strangers,
        };
        for standing in [Standing::Client, Standing::Stranger] {
            inner.show_caps(standing);
        }
        Slots {
            inner: Arc::new(inner),
        }
    }

    /// The clients' caps from now on (a reloaded config's `limits`): slots held past them
    /// stay held, and new ones wait until the pool is back under them.
    pub fn set_client_caps(&self, caps: Caps) {
        let mut current = self
            .inner
            .client_caps
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if *current != caps {
            *current = caps;
            drop(current);
            self.inner.show_caps(Standing::Client);
        }
    }

    /// A slot for `ip` in its standing's pool, or why not (counted).
    pub fn take(&self, ip: IpAddr, standing: Standing) -> Result<Slot, Full> {
        self.take_within(ip, standing, true)
    }

    /// A slot for `ip` held to its address's share only: for a newcomer whose pool is full
    /// while another connection is giving its slot up (NBD's longest idle one).
    pub fn take_over(&self, ip: IpAddr, standing: Standing) -> Result<Slot, Full> {
        self.take_within(ip, standing, false)
    }

    fn take_within(&self, ip: IpAddr, standing: Standing, pool_cap: bool) -> Result<Slot, Full> {
        let inner = &self.inner;
        let caps = inner.caps(standing);
        let figures = inner.figures(standing);
        let mut held = inner.held(standing);
        let mine = held.by_address.get(&ip).copied().unwrap_or(0);
        let full = if mine >= caps.per_address {
            figures.full_per_address.inc();
            Some(Full::Address)
        } else if pool_cap && held.total >= caps.total {
            figures.full.inc();
            Some(Full::Pool)
        } else {
            None
        };
        if let Some(full) = full {
            return Err(full);
        }
        held.total += 1;
        *held.by_address.entry(ip).or_insert(0) += 1;
        figures.held.inc();
        Ok(Slot {
            inner: inner.clone(),
            ip,
            standing,
        })
    }

    /// The caps of a standing's pool.
    pub fn caps(&self, standing: Standing) -> Caps {
        self.inner.caps(standing)
    }
}

impl SlotsInner {
    fn caps(&self, standing: Standing) -> Caps {
        match standing {
            Standing::Client => *self.client_caps.lock().unwrap_or_else(|e| e.into_inner()),
            Standing::Stranger => self.stranger_caps,
        }
    }

    /// The caps of a standing's pool, in /metrics.
    fn show_caps(&self, standing: Standing) {
        let (c, figures) = (self.caps(standing), self.figures(standing));
        figures.cap.set(c.total as u64);
        figures.cap_per_address.set(c.per_address as u64);
    }

    fn figures(&self, standing: Standing) -> &crate::metrics::SlotPool {
        let all = (self.counts)(&self.metrics);
        match standing {
            Standing::Client => &all.clients,
            Standing::Stranger => &all.strangers,
        }
    }

    fn held(&self, standing: Standing) -> std::sync::MutexGuard<'_, Held> {
        match standing {
            Standing::Client => &self.clients,
            Standing::Stranger => &self.strangers,
        }
        .lock()
        .unwrap_or_else(|e| e.into_inner())
    }
}

impl Slot {
    pub fn standing(&self) -> Standing {
        self.standing
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.inner.held(self.standing);
        if let Some(n) = held.by_address.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.by_address.remove(&self.ip);
            }
            held.total -= 1;
            self.inner.figures(self.standing).held.sub(1);
        }
    }
}

/// Ends a root connection whose peer answers nothing for about `after`: TCP keepalive probes
/// from half of it on (six, evenly spaced) and a bound on unacknowledged data, so that a client
/// powered off or cut off mid-read is seen (its reads and writes fail with `TimedOut`) instead
/// of holding the connection forever. A live client, however idle, answers the probes.
pub fn lose_silent_peers(stream: &impl std::os::fd::AsFd, after: Duration) -> std::io::Result<()> {
    const PROBES: u32 = 6;
    let idle = (after / 2).max(Duration::from_secs(1));
    let interval = (after.saturating_sub(idle) / PROBES).max(Duration::from_secs(1));
    let sock = socket2::SockRef::from(stream);
    sock.set_tcp_keepalive(
        &socket2::TcpKeepalive::new()
            .with_time(idle)
            .with_interval(interval)
            .with_retries(PROBES),
    )?;
    sock.set_tcp_user_timeout(Some(after.max(Duration::from_secs(1))))
}

/// Did `lose_silent_peers`'s bound end this read or write (the peer acknowledged nothing)?
/// Linux reports the give-up as `ETIMEDOUT`, or as the last ICMP error the unanswered probes
/// met (`EHOSTUNREACH` once the client's address no longer answers ARP: it is powered off);
/// an established connection reports those only when it gives up. Not a socket's own read
/// or write timeout, which reports `EAGAIN`.
pub fn is_lost(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ETIMEDOUT | libc::EHOSTUNREACH | libc::ENETUNREACH)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strangers_hold_their_own_small_pool_and_never_the_clients_slots() {
        let m = crate::metrics::Metrics::default();
        let slots = Slots::new(
            m.clone(),
            |m| &m.nfs().slots,
            Caps {
                total: 3,
                per_address: 2,
            },
            Caps {
                total: 2,
                per_address: 1,
            },
        );
        let ip = |n: u8| IpAddr::from([10, 0, 0, n]);
        // Many strangers' addresses fill only their pool.
        let s1 = slots.take(ip(101), Standing::Stranger).unwrap();
        assert_eq!(
            slots.take(ip(101), Standing::Stranger).err(),
            Some(Full::Address)
        );
        let _s2 = slots.take(ip(102), Standing::Stranger).unwrap();
        assert_eq!(
            slots.take(ip(103), Standing::Stranger).err(),
            Some(Full::Pool)
        );
        // The clients' slots are all there, each address to its share.
        let c1 = slots.take(ip(1), Standing::Client).unwrap();
        let _c2 = slots.take(ip(1), Standing::Client).unwrap();
        assert_eq!(
            slots.take(ip(1), Standing::Client).err(),
            Some(Full::Address)
        );
        let _c3 = slots.take(ip(2), Standing::Client).unwrap();
        assert_eq!(slots.take(ip(3), Standing::Client).err(), Some(Full::Pool));
        // Past a full pool only by take_over, and still within the address's share.
        let c4 = slots.take_over(ip(3), Standing::Client).unwrap();
        assert_eq!(
            slots.take_over(ip(1), Standing::Client).err(),
            Some(Full::Address)
        );
        let n = &m.nfs().slots;
        assert_eq!(n.clients.held.get(), 4);
        assert_eq!(n.strangers.held.get(), 2);
        assert_eq!(n.strangers.full.get(), 1);
        assert_eq!(n.strangers.full_per_address.get(), 1);
        assert_eq!(n.clients.cap.get(), 3);
        assert_eq!(n.strangers.cap_per_address.get(), 1);
        drop((s1, c1, c4));
        assert_eq!(n.clients.held.get(), 2);
        assert_eq!(n.strangers.held.get(), 1);
        assert!(slots.take(ip(103), Standing::Stranger).is_ok());
    }
}

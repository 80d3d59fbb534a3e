//! Small bounds the services share: connections counted per source address (`PerAddress`), and
//! log lines rate-limited per call site (`LogLimit`, from `crate::log_limit`) so that a flood of refusals or strangers
//! writes a few lines and a count, not one line per packet; and the root connections' bound on
//! a silent peer (`lose_silent_peers`).

pub use crate::log_limit::LogLimit;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Connections held per source address, each at most `cap`.
#[derive(Clone)]
pub struct PerAddress {
    cap: usize,
    held: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One connection's place in its address's count; given back when dropped.
pub struct AddressSlot {
    held: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl PerAddress {
    pub fn new(cap: usize) -> PerAddress {
        PerAddress {
            cap,
            held: Arc::default(),
        }
    }

    /// A slot for `ip`, or None when it holds `cap` already.
    pub fn take(&self, ip: IpAddr) -> Option<AddressSlot> {
        let mut t = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let n = t.entry(ip).or_insert(0);
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(AddressSlot {
            held: self.held.clone(),
            ip,
        })
    }

    pub fn cap(&self) -> usize {
        self.cap
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut t = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = t.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                t.remove(&self.ip);
            }
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
    fn per_address_slots_are_capped_and_given_back() {
        let p = PerAddress::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let x = p.take(a).unwrap();
        let _y = p.take(a).unwrap();
        assert!(p.take(a).is_none());
        assert!(p.take(b).is_some());
        drop(x);
        assert!(p.take(a).is_some());
    }
}

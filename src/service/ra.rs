//! Router advertisements for `dhcp6.router_advertisements: send`: on each of the server's
//! interfaces, the advertisement `proto::ra` builds (O flag: boot options from DHCPv6;
//! `dhcp6.subnet` on-link and for SLAAC; not a default router), paced as RFC 4861 6.2.4 and
//! 6.2.6 say (`Pacer`): unsolicited ones a random `MIN_INTERVAL` to `MAX_INTERVAL` apart, an
//! answer to router solicitations a random up to `MAX_RA_DELAY` later, and never two within
//! `MIN_DELAY_BETWEEN_RAS`: any number of solicitations draw at most one advertisement per
//! 3 s. EDK2 reaches the server only through an on-link prefix (its HTTP boot waits up to
//! 10 s for one), and iPXE starts DHCPv6 only when an advertisement sets M or O (`proto::ra`
//! says why O and not M). The raw ICMPv6 sockets (hop limit 255, joined to ff02::2) are
//! app.rs's.

use crate::proto::ra;
use std::net::{Ipv6Addr, SocketAddrV6};
use std::time::Duration;
use tokio::time::Instant;

/// Unsolicited advertisements are a random time between these apart (RFC 4861 6.2.1's
/// MinRtrAdvInterval, at least 3 s and at most 0.75 MaxRtrAdvInterval, and
/// MaxRtrAdvInterval, at least 4 s): often, for firmware that waits for one.
const MIN_INTERVAL: Duration = Duration::from_secs(3);
const MAX_INTERVAL: Duration = Duration::from_secs(6);
/// RFC 4861 10: an answer to a solicitation waits a random time up to this...
const MAX_RA_DELAY: Duration = Duration::from_millis(500);
/// ...and no multicast advertisement follows another sooner than this.
const MIN_DELAY_BETWEEN_RAS: Duration = Duration::from_secs(3);
/// The prefix's valid lifetime in each advertisement.
const PREFIX_VALID_S: u32 = 1800;
/// All nodes on the link.
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// One interface's raw ICMPv6 socket, and its index (the advertisements' scope). The socket is
/// held as tokio's `UdpSocket`, which only wraps a datagram descriptor: `recv_from` and
/// `send_to` are the same system calls on a raw socket, with no unsafe registration of ours.
pub struct Advertiser {
    pub iface: String,
    pub index: u32,
    pub socket: tokio::net::UdpSocket,
}

/// Sends advertisements on every interface until shutdown.
pub async fn serve(advertisers: Vec<Advertiser>, shared: super::Shared) -> anyhow::Result<()> {
    // `dhcp6` cannot change while the daemon runs (`config::reload`).
    let config = shared.config.load();
    let Some(d) = config.dhcp6.as_ref() else {
        return Ok(());
    };
    let message = ra::advertisement(d.subnet.network, d.subnet.prefix, PREFIX_VALID_S, true);
    let mut tasks = Vec::new();
    for a in advertisers {
        let message = message.clone();
        let shutdown = shared.shutdown.clone();
        tasks.push(tokio::spawn(async move {
            tracing::info!(iface = %a.iface, "sending router advertisements");
            let to = SocketAddrV6::new(ALL_NODES, 0, 0, a.index);
            let mut pacer = Pacer::new(Instant::now());
            let mut buf = [0u8; 1500];
            loop {
                tokio::select! {
                    _ = shutdown.wait() => break,
                    _ = tokio::time::sleep_until(pacer.next()) => {
                        if let Err(e) = a.socket.send_to(&message, to).await {
                            tracing::debug!(iface = %a.iface, error = %e, "router advertisement not sent");
                        }
                        pacer.sent(Instant::now(), random(MAX_INTERVAL - MIN_INTERVAL));
                    }
                    r = a.socket.recv_from(&mut buf) => {
                        if let Ok((n, _)) = r && ra::is_solicitation(&buf[..n]) {
                            pacer.solicited(Instant::now(), random(MAX_RA_DELAY));
                        }
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}

/// When an interface's next advertisement goes (RFC 4861 6.2.4, 6.2.6): one clock for the
/// unsolicited ones and the answers, so that all of them are `MIN_DELAY_BETWEEN_RAS` apart.
#[derive(Debug, Clone, Copy)]
pub struct Pacer {
    last: Option<Instant>,
    next: Instant,
}

impl Pacer {
    /// The first advertisement goes at once.
    pub fn new(now: Instant) -> Pacer {
        Pacer {
            last: None,
            next: now,
        }
    }

    pub fn next(&self) -> Instant {
        self.next
    }

    /// An advertisement went at `now`; the next unsolicited one `MIN_INTERVAL` plus `jitter`
    /// (below `MAX_INTERVAL - MIN_INTERVAL`) later.
    pub fn sent(&mut self, now: Instant, jitter: Duration) {
        self.last = Some(now);
        self.next = now + MIN_INTERVAL + jitter.min(MAX_INTERVAL - MIN_INTERVAL);
    }

    /// A solicitation came at `now`: the answer goes `delay` (below `MAX_RA_DELAY`) later, or
    /// `MIN_DELAY_BETWEEN_RAS` after the last advertisement if that is later; one already
    /// due sooner answers it too.
    pub fn solicited(&mut self, now: Instant, delay: Duration) {
        let mut at = now + delay.min(MAX_RA_DELAY);
        if let Some(last) = self.last {
            at = at.max(last + MIN_DELAY_BETWEEN_RAS);
        }
        self.next = self.next.min(at);
    }
}

/// A random duration below `max` (no cryptography needed: it only spreads the routers' and
/// hosts' timers, RFC 4861 6.2.4).
fn random(max: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let nanos = max.as_nanos().max(1) as u64;
    Duration::from_nanos(h.finish() % nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2,000 solicitations in 10 s draw one advertisement per `MIN_DELAY_BETWEEN_RAS` at most,
    /// each within `MAX_RA_DELAY` (or the 3 s spacing) of the first solicitation it answers.
    #[test]
    fn a_storm_of_solicitations_draws_an_advertisement_per_3_s_at_most() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0);
        // The first one at once, then the next unsolicited one 3 to 6 s later.
        assert_eq!(p.next(), t0);
        p.sent(t0, Duration::from_secs(2));
        assert_eq!(p.next(), t0 + Duration::from_secs(5));
        let mut sent = vec![t0];
        for k in 1..=2000u32 {
            let now = t0 + Duration::from_millis(5) * k;
            while p.next() <= now {
                let at = p.next();
                sent.push(at);
                p.sent(at, MAX_INTERVAL);
            }
            p.solicited(now, Duration::from_millis(u64::from(k % 7) * 100));
        }
        assert!(
            sent.len() <= 1 + 10 / 3 + 1,
            "{} advertisements",
            sent.len()
        );
        for w in sent.windows(2) {
            assert!(w[1] - w[0] >= MIN_DELAY_BETWEEN_RAS, "{:?}", w[1] - w[0]);
        }
        // A lone solicitation long after: answered within MAX_RA_DELAY.
        let later = t0 + Duration::from_secs(60);
        let mut p = Pacer::new(t0);
        p.sent(t0, Duration::ZERO);
        p.sent(later - Duration::from_secs(4), MAX_INTERVAL);
        assert_eq!(p.next(), later + Duration::from_secs(2));
        p.solicited(later, Duration::from_millis(499));
        assert_eq!(p.next(), later + Duration::from_millis(499));
        assert!(random(MAX_RA_DELAY) < MAX_RA_DELAY);
    }
}

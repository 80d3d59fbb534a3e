//! The clients' consoles: a UDP listener on `server.ports.console` (netconsole's 6666 by
//! default; 514 when iPXE's syslog console is wanted too). A datagram's source address is
//! told apart by the lease table (`identity`), the one answer to who is at an address: a
//! client's lines go to its newest boot's record, a stranger's datagram is dropped and counted
//! (`bootpool_refused_total{service="console"}`). Each client's lines pass a token bucket
//! (`LINES_PER_S`, bursts of `BURST_LINES`): a client that floods its console loses its own
//! lines past it, counted in `bootpool_console_lines_dropped_total{why="rate"}`, and nobody
//! else's. Lines come from `proto::console`.

use super::bounds::LogLimit;
use crate::config::Mac;
use crate::proto::console;
use std::collections::HashMap;
use std::time::Instant;
use tokio::net::UdpSocket;

static STRANGERS: LogLimit = LogLimit::new();
static FLOODS: LogLimit = LogLimit::new();
/// Socket receive buffer: some thousands of console lines (capped by `net.core.rmem_max`).
const RECV_BUFFER: usize = 4 << 20;
/// Lines a client's console may send per second, on average.
pub const LINES_PER_S: f64 = 200.0;
/// Lines it may send at once: a kernel's netconsole replays its whole log when it starts
/// (some hundreds of lines, a thousand and more on a big machine).
pub const BURST_LINES: f64 = 4000.0;
/// Buckets kept before the full ones (clients quiet for `BURST_LINES / LINES_PER_S`) are
/// forgotten; only lease holders get one, so this is a room's size, not a flood's.
const BUCKETS_KEPT: usize = 4096;

/// A token bucket: how many lines a client may send now.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    pub fn new(now: Instant) -> Bucket {
        Bucket {
            tokens: BURST_LINES,
            at: now,
        }
    }

    /// Of `lines` wanted at `now`, how many may pass (the rest are dropped).
    pub fn take(&mut self, lines: usize, now: Instant) -> usize {
        let since = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + since * LINES_PER_S).min(BURST_LINES);
        self.at = now;
        let passed = (self.tokens.floor() as usize).min(lines);
        self.tokens -= passed as f64;
        passed
    }

    fn full(&self, now: Instant) -> bool {
        let since = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens + since * LINES_PER_S >= BURST_LINES
    }
}

pub async fn serve(udp: UdpSocket, shared: super::Shared) -> anyhow::Result<()> {
    let super::Shared {
        identity,
        recorder,
        metrics,
        shutdown,
        ..
    } = shared;
    // A kernel's netconsole replays its whole log at once when it starts (hundreds of lines,
    // a datagram each), and a room's clients start theirs within seconds: the kernel queue
    // must hold the burst while this task catches up.
    if let Err(e) = socket2::SockRef::from(&udp).set_recv_buffer_size(RECV_BUFFER) {
        tracing::debug!(error = %e, "console receive buffer not enlarged");
    }
    let mut buckets: HashMap<Mac, Bucket> = HashMap::new();
    // Past a UDP datagram's largest payload nothing more can come.
    let mut buf = vec![0u8; 65_536];
    loop {
        let (n, peer) = tokio::select! {
            _ = shutdown.wait() => return Ok(()),
            r = udp.recv_from(&mut buf) => match r {
                Ok(x) => x,
                // ICMP errors surface here; they are not fatal.
                Err(_) => continue,
            },
        };
        let Some(mac) = identity.holder(peer.ip()) else {
            metrics.console().refused.inc();
            if let Some(suppressed) = STRANGERS.allow() {
                tracing::info!(%peer, suppressed, "console datagram from an address no lease holds; dropped");
            }
            continue;
        };
        metrics.console().requests.inc();
        let mut lines = console::lines(&buf[..n]);
        if lines.is_empty() {
            continue;
        }
        let now = Instant::now();
        if buckets.len() >= BUCKETS_KEPT && !buckets.contains_key(&mac) {
            buckets.retain(|_, b| !b.full(now));
        }
        let passed = buckets
            .entry(mac)
            .or_insert_with(|| Bucket::new(now))
            .take(lines.len(), now);
        if passed < lines.len() {
            metrics.console().limited.add((lines.len() - passed) as u64);
            if let Some(suppressed) = FLOODS.allow() {
                tracing::info!(%mac, %peer, suppressed, lines_per_s = LINES_PER_S,
                    "console lines over the client's rate; dropped");
            }
            lines.truncate(passed);
        }
        if !lines.is_empty() {
            recorder.console(mac, lines);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_bucket_passes_a_burst_then_its_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::new(t0);
        assert_eq!(b.take(3000, t0), 3000);
        assert_eq!(b.take(3000, t0), BURST_LINES as usize - 3000);
        assert_eq!(b.take(10, t0), 0);
        // A second later: a second's worth, not more.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(b.take(100_000, t1), LINES_PER_S as usize);
        // Quiet for long: full again, never past the burst.
        let t2 = t1 + Duration::from_secs(3600);
        assert!(b.full(t2));
        assert_eq!(b.take(100_000, t2), BURST_LINES as usize);
    }
}

//! Log lines: where they go (`to_stderr`, the one setup of both binaries), and lines
//! rate-limited per call site, so that a flood of refusals or strangers writes a few lines and a
//! count, not one line per packet. The services and the link steering share the limit
//! (`service::bounds` hands it to the services under its old name).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Sends the process's log lines to stderr, filtered by `BOOTPOOL_LOG` (tracing's filter
/// syntax, e.g. `bootpool=debug`; `info` when unset or not understood), coloured only on a
/// terminal. Called once, first thing, by `bootpool` and `bootpool-instruments`.
pub fn to_stderr() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BOOTPOOL_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Lines one call site may write per `WINDOW`; past them lines are counted, and the next line
/// written says how many were held back (`suppressed`).
pub const BURST: u64 = 10;
pub const WINDOW: Duration = Duration::from_secs(10);

/// A rate limit for one log call site, usable as a `static`:
///
/// ```ignore
/// static LOG: LogLimit = LogLimit::new();
/// if let Some(suppressed) = LOG.allow() { tracing::warn!(suppressed, "..."); }
/// ```
pub struct LogLimit {
    /// The window (milliseconds since the process's first use) and lines written in it,
    /// packed as window << 16 | lines.
    state: AtomicU64,
    held_back: AtomicU64,
}

impl Default for LogLimit {
    fn default() -> Self {
        Self::new()
    }
}

impl LogLimit {
    pub const fn new() -> LogLimit {
        LogLimit {
            state: AtomicU64::new(0),
            held_back: AtomicU64::new(0),
        }
    }

    /// Some(lines held back since the last one written) when this line may be written.
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(since_start())
    }

    fn allow_at(&self, now: Duration) -> Option<u64> {
        let window = now.as_millis() as u64 / WINDOW.as_millis() as u64 + 1;
        let mut cur = self.state.load(Relaxed);
        loop {
            let (w, n) = (cur >> 16, cur & 0xffff);
            let next = if w == window {
                if n >= BURST {
                    self.held_back.fetch_add(1, Relaxed);
                    return None;
                }
                cur + 1
            } else {
                window << 16 | 1
            };
            match self
                .state
                .compare_exchange_weak(cur, next, Relaxed, Relaxed)
            {
                Ok(_) => return Some(self.held_back.swap(0, Relaxed)),
                Err(seen) => cur = seen,
            }
        }
    }
}

fn since_start() -> Duration {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_writes_a_burst_per_window_then_the_count_held_back() {
        let l = LogLimit::new();
        let t0 = Duration::from_secs(100);
        let written: Vec<_> = (0..1000).filter_map(|_| l.allow_at(t0)).collect();
        assert_eq!(written, vec![0; BURST as usize]);
        // The next window's first line reports what the last one held back.
        assert_eq!(l.allow_at(t0 + WINDOW), Some(1000 - BURST));
        assert_eq!(l.allow_at(t0 + WINDOW), Some(0));
    }
}

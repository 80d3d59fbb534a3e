//! How the storm's clients ride out their server's death, as the kernel's clients do: the
//! timers the NFS and NBD replays copy, the NFS client's reconnect back-off, and a client's
//! longest stall (the longest gap between two answers it got), and the report's row of a
//! member's death (`--fail`, which `fail` brings about).
//!
//! NFS is a hard mount over TCP with the kernel's defaults (`nfs(5)`): `timeo=600` (a call
//! unanswered for 60 s is sent again on a new connection) and `retrans=2` (after two such
//! timeouts the kernel logs "server not responding" and, hard, goes on). A connection the
//! server reset is reconnected at once; one the server closed (its FIN, as a process killed
//! with -9 leaves) or a connect that failed waits the RPC transport's re-establish time,
//! 3 s at first and doubled on each failure in a row up to 300 s (`XS_TCP_INIT_REEST_TO`,
//! `XS_TCP_MAX_REEST_TO` in the kernel's net/sunrpc/xprtsock.c), the same address each time.
//!
//! NBD is the kernel's NBD client with a dead-connection timeout, reconfigured by the agent
//! of docs/failover.md: a read unanswered for 30 s (the block layer's default request
//! timeout) or a connection that breaks keeps the reads queued, and the agent reconnects to
//! the same address every second and hands the new socket over; the queued reads are sent
//! again on it.

use std::time::Duration;

/// NFS `timeo=600`: tenths of a second an NFS call over TCP waits for its answer.
pub const NFS_TIMEO: Duration = Duration::from_secs(60);
/// NFS `retrans=2`: timeouts before the kernel says "server not responding" (a hard mount
/// goes on after it).
pub const NFS_RETRANS: u32 = 2;
/// The RPC transport's first and longest wait before it reconnects to a server that closed
/// the connection or refused the connect.
pub const REESTABLISH_FIRST: Duration = Duration::from_secs(3);
pub const REESTABLISH_MAX: Duration = Duration::from_secs(300);
/// NBD: how long a read waits for its answer before the connection is taken as dead.
pub const NBD_TIMEOUT: Duration = Duration::from_secs(30);
/// NBD: the agent's wait between two reconnect tries.
pub const NBD_RECONNECT_EVERY: Duration = Duration::from_secs(1);
/// How long a client goes on trying a server that never comes back before its boot is
/// counted failed: the storm's bound, not the kernel's (a hard mount tries for ever).
pub const GIVE_UP: Duration = Duration::from_secs(300);

/// How a connection ended, which decides when the client reconnects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// The server (or a tickle's answer) reset it: reconnect at once.
    Reset,
    /// The server closed it, a connect failed, or a call timed out: back off first.
    Closed,
}

/// The NFS client's reconnect back-off (the transport's re-establish time).
#[derive(Debug, Default, Clone, Copy)]
pub struct Backoff {
    next: Duration,
}

impl Backoff {
    /// How long to wait before the next connect after a connection was `lost`.
    pub fn wait(&mut self, lost: Lost) -> Duration {
        match lost {
            Lost::Reset => Duration::ZERO,
            Lost::Closed => {
                let wait = self.next.max(REESTABLISH_FIRST);
                self.next = (wait * 2).min(REESTABLISH_MAX);
                wait
            }
        }
    }

    /// A call was answered on the new connection: the next loss starts afresh.
    pub fn answered(&mut self) {
        self.next = Duration::ZERO;
    }
}

/// The longest gap between two of `answers` (seconds, any order): (from, to).
pub fn longest_gap(answers: &[f64]) -> Option<(f64, f64)> {
    gaps(answers).max_by(|a, b| (a.1 - a.0).total_cmp(&(b.1 - b.0)))
}

/// The longest gap between two of `answers` that ends after `at` (a failure at `at` is
/// waited out in the gap that holds it, or in one after it).
pub fn longest_gap_after(answers: &[f64], at: f64) -> Option<(f64, f64)> {
    gaps(answers)
        .filter(|&(_, to)| to > at)
        .max_by(|a, b| (a.1 - a.0).total_cmp(&(b.1 - b.0)))
}

fn gaps(answers: &[f64]) -> impl Iterator<Item = (f64, f64)> {
    let mut sorted = answers.to_vec();
    sorted.sort_by(f64::total_cmp);
    let pairs: Vec<(f64, f64)> = sorted.windows(2).map(|w| (w[0], w[1])).collect();
    pairs.into_iter()
}

/// How a member dies in the storm (`--fail`, `fail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Its bootpool and keepalived killed with -9; the host stays up.
    Kill,
    /// Its links taken down, then its bootpool and keepalived killed with -9.
    Linkdown,
}

/// The report's row of a server's death (`--fail`): who died how and when, and how the
/// room took it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FailureRow {
    /// `kill` or `linkdown`.
    pub kind: String,
    pub member: String,
    pub address: std::net::Ipv4Addr,
    /// Seconds from power-on.
    pub at_s: f64,
    pub clients: usize,
    pub booted: usize,
    /// Clients whose boot failed and that booted again from the start.
    pub restarted: usize,
    /// Clients that made a root connection again.
    pub reconnected: usize,
    /// The longest stall of any client in a gap that ends after the failure (think times
    /// included), its client and its start (seconds from power-on).
    pub longest_stall_s: Option<f64>,
    pub longest_stall_client: Option<usize>,
    pub longest_stall_from_s: Option<f64>,
    /// The goal for the longest stall: 5 s after kill -9, 15 s after link-down.
    pub goal_s: f64,
}

impl FailureRow {
    pub fn render(&self) -> String {
        let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
        format!(
            "failure: {} of member {} ({}) at {:.1} s: {} of {} booted, {} restarted their boot, {} reconnected their root; longest stall after it {} s (goal <= {} s), client {} from {} s\n",
            self.kind,
            self.member,
            self.address,
            self.at_s,
            self.booted,
            self.clients,
            self.restarted,
            self.reconnected,
            f(self.longest_stall_s),
            self.goal_s,
            self.longest_stall_client
                .map_or("-".into(), |i| i.to_string()),
            f(self.longest_stall_from_s),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_reconnects_at_once_and_a_close_backs_off_doubling() {
        let mut b = Backoff::default();
        assert_eq!(b.wait(Lost::Reset), Duration::ZERO);
        assert_eq!(b.wait(Lost::Closed), Duration::from_secs(3));
        assert_eq!(b.wait(Lost::Closed), Duration::from_secs(6));
        assert_eq!(b.wait(Lost::Closed), Duration::from_secs(12));
        b.answered();
        assert_eq!(b.wait(Lost::Closed), Duration::from_secs(3));
        for _ in 0..10 {
            b.wait(Lost::Closed);
        }
        assert_eq!(b.wait(Lost::Closed), REESTABLISH_MAX);
    }

    #[test]
    fn the_longest_gap_after_a_failure_is_the_one_that_ends_after_it() {
        let answers = [0.0, 10.0, 10.5, 11.0, 13.0, 13.2];
        assert_eq!(longest_gap(&answers), Some((0.0, 10.0)));
        assert_eq!(longest_gap_after(&answers, 10.7), Some((11.0, 13.0)));
        assert_eq!(longest_gap_after(&answers, 12.0), Some((11.0, 13.0)));
        assert_eq!(longest_gap_after(&answers, 14.0), None);
        assert_eq!(longest_gap(&[1.0]), None);
    }
}

//! Which source a chunk is fetched from next, pure (docs/swarm.md, "Peers and the tracker"):
//! the peers the tracker named for it, in its order, less those this agent caught sending a
//! bad chunk (never asked again) and those that were silent lately (skipped for `SILENT_FOR_MS`)
//! and those already tried for this chunk; then the server, always the last source. Time is
//! an argument (milliseconds on any clock that does not go back).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};

/// A peer that did not answer in time is skipped this long.
pub const SILENT_FOR_MS: u64 = 10_000;

/// Where to fetch from next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Peer(SocketAddr),
    /// The servers (`sources.rs`): no named peer is left.
    Server,
}

/// How a try went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Good,
    /// It answered with bytes the manifest refused.
    Bad,
    /// No answer in time, or the connection failed.
    Silent,
    /// It answered that it does not hold the chunk (yet): no fault of its.
    Lacks,
}

/// What the agent knows of its peers.
#[derive(Debug, Default)]
pub struct Book {
    banned: HashSet<IpAddr>,
    silent_since: HashMap<IpAddr, u64>,
}

impl Book {
    /// The next source for a chunk the tracker named `named` for, after `tried`.
    pub fn next(&self, named: &[SocketAddr], tried: &[SocketAddr], now_ms: u64) -> Next {
        named
            .iter()
            .find(|p| {
                !tried.contains(p)
                    && !self.banned.contains(&p.ip())
                    && self
                        .silent_since
                        .get(&p.ip())
                        .is_none_or(|&t| now_ms.saturating_sub(t) >= SILENT_FOR_MS)
            })
            .map_or(Next::Server, |p| Next::Peer(*p))
    }

    /// Notes how a try of `peer` went; true when the tracker is to be told (a peer newly
    /// caught sending a bad chunk, or newly silent).
    pub fn after(&mut self, peer: IpAddr, outcome: Outcome, now_ms: u64) -> bool {
        match outcome {
            Outcome::Good => {
                self.silent_since.remove(&peer);
                false
            }
            Outcome::Lacks => false,
            Outcome::Bad => self.banned.insert(peer),
            Outcome::Silent => self.silent_since.insert(peer, now_ms).is_none(),
        }
    }

    pub fn banned(&self, peer: IpAddr) -> bool {
        self.banned.contains(&peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(last: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, last], 10810))
    }

    #[test]
    fn named_peers_in_order_then_the_server() {
        let b = Book::default();
        let named = [at(1), at(2)];
        assert_eq!(b.next(&named, &[], 0), Next::Peer(at(1)));
        assert_eq!(b.next(&named, &[at(1)], 0), Next::Peer(at(2)));
        assert_eq!(b.next(&named, &[at(1), at(2)], 0), Next::Server);
        assert_eq!(b.next(&[], &[], 0), Next::Server);
    }

    #[test]
    fn a_peer_that_sent_a_bad_chunk_is_never_asked_again() {
        let mut b = Book::default();
        assert!(b.after(at(1).ip(), Outcome::Bad, 0));
        assert!(!b.after(at(1).ip(), Outcome::Bad, 1), "told once");
        assert_eq!(b.next(&[at(1), at(2)], &[], u64::MAX), Next::Peer(at(2)));
        // A good answer later (another chunk) does not clear it.
        b.after(at(1).ip(), Outcome::Good, 2);
        assert_eq!(b.next(&[at(1)], &[], u64::MAX), Next::Server);
        assert!(b.banned(at(1).ip()));
    }

    #[test]
    fn a_silent_peer_is_skipped_for_a_while_and_a_lacking_one_is_not() {
        let mut b = Book::default();
        assert!(b.after(at(1).ip(), Outcome::Silent, 100));
        assert_eq!(b.next(&[at(1), at(2)], &[], 100), Next::Peer(at(2)));
        assert_eq!(b.next(&[at(1)], &[], 100 + SILENT_FOR_MS - 1), Next::Server);
        assert_eq!(
            b.next(&[at(1)], &[], 100 + SILENT_FOR_MS),
            Next::Peer(at(1))
        );
        assert!(!b.after(at(2).ip(), Outcome::Lacks, 100));
        assert_eq!(b.next(&[at(2)], &[], 101), Next::Peer(at(2)));
        // Silent, then good again: asked at once.
        b.after(at(1).ip(), Outcome::Good, 200);
        assert_eq!(b.next(&[at(1)], &[], 201), Next::Peer(at(1)));
    }
}

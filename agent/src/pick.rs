//! Which source a chunk is fetched from next, pure (docs/swarm.md, "Peers and the tracker"):
//! the peers the tracker named for it, in its order, less those this agent caught sending a
//! bad chunk (never asked again) and those that were silent lately (skipped for `SILENT_FOR_MS`)
//! and those already tried for this chunk; then the server, always the last source. A peer
//! that has not yet sent this agent a good chunk is asked for one chunk at a time (the
//! prefetch fetches several at once): a peer sending bad bytes is caught by its first answer
//! and costs this agent one chunk's try, however many are in flight. Time is an argument
//! (milliseconds on any clock that does not go back).

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
    /// Peers that sent this agent a good chunk.
    proven: HashSet<IpAddr>,
    /// Peers not proven yet with a try in flight: asked for nothing else until it ends.
    trying: HashSet<IpAddr>,
}

impl Book {
    /// The next source for a chunk the tracker named `named` for, after `tried`; a peer not
    /// proven yet is then taken as tried until `after` says how it went.
    pub fn next(&mut self, named: &[SocketAddr], tried: &[SocketAddr], now_ms: u64) -> Next {
        let found = named.iter().find(|p| {
            !tried.contains(p)
                && !self.banned.contains(&p.ip())
                && !self.trying.contains(&p.ip())
                && self
                    .silent_since
                    .get(&p.ip())
                    .is_none_or(|&t| now_ms.saturating_sub(t) >= SILENT_FOR_MS)
        });
        match found {
            Some(p) => {
                if !self.proven.contains(&p.ip()) {
                    self.trying.insert(p.ip());
                }
                Next::Peer(*p)
            }
            None => Next::Server,
        }
    }

    /// Notes how a try of `peer` went; true when the tracker is to be told (a peer newly
    /// caught sending a bad chunk, or newly silent).
    pub fn after(&mut self, peer: IpAddr, outcome: Outcome, now_ms: u64) -> bool {
        self.trying.remove(&peer);
        match outcome {
            Outcome::Good => {
                self.silent_since.remove(&peer);
                self.proven.insert(peer);
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
    fn a_peer_not_proven_is_asked_one_chunk_at_a_time_and_a_proven_one_for_several() {
        let mut b = Book::default();
        let named = [at(1), at(2)];
        assert_eq!(b.next(&named, &[], 0), Next::Peer(at(1)));
        // A second fetch while the first is in flight: at(1) is not proven yet.
        assert_eq!(b.next(&named, &[], 0), Next::Peer(at(2)));
        assert_eq!(b.next(&named, &[], 0), Next::Server);
        b.after(at(1).ip(), Outcome::Good, 1);
        assert_eq!(b.next(&named, &[], 1), Next::Peer(at(1)));
        assert_eq!(
            b.next(&named, &[], 1),
            Next::Peer(at(1)),
            "proven: several at once"
        );
        // at(2) sent a bad chunk: its one try ended it.
        assert!(b.after(at(2).ip(), Outcome::Bad, 2));
        assert_eq!(b.next(&[at(2)], &[], 3), Next::Server);
        // A lacking answer ends a try too, and leaves the peer unproven.
        let mut b = Book::default();
        assert_eq!(b.next(&[at(3)], &[], 0), Next::Peer(at(3)));
        b.after(at(3).ip(), Outcome::Lacks, 1);
        assert_eq!(b.next(&[at(3)], &[], 1), Next::Peer(at(3)));
        assert_eq!(b.next(&[at(3)], &[], 1), Next::Server);
    }

    #[test]
    fn named_peers_in_order_then_the_server() {
        let mut b = Book::default();
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

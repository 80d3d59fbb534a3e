//! The tracker's policy (docs/swarm.md, "Peers and the tracker"), pure: for one room booting
//! one root image (a `Swarm`: the image's manifest, one pool's clients on one subnet), which
//! agent holds which chunk, and where an agent that misses a chunk is sent. Plain data in and
//! out, time an argument; the route (`service/http/tracker.rs`) reads the request and keeps
//! the swarms.
//!
//! For each chunk wanted: up to `NAMED` agents of the room that hold it, those with the fewest
//! uploads in flight first (named first for a chunk in the last `UPLOAD_FOR_MS` whose asker has
//! not said since that it holds it), then those named least so far (the load spread over the
//! room's uplinks); else the agent already receiving it from the server, asked at most
//! `RECEIVING_FOR` ago (concurrent misses merged onto it); else none, and the asker is then
//! the one receiving it: the server sends each chunk into the room about once (BitTorrent's
//! super-seeding, BEP 16). The prefetch order each agent is handed is the swarm's, spread
//! (`boot::prefetch::spread`): the k-th agent to ask starts each window of it at its own
//! place, so agents that start together take different chunks from the server and then
//! trade them. A peer some agent reported bad is never named again; one reported gone, or
//! silent for `FORGET_AFTER`, is forgotten until it asks again. The server is every agent's
//! last source whatever is answered here.

use crate::proto::swarm::{Answer, Report};
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};

/// Peers named for one chunk.
pub const NAMED: usize = 3;
/// How long the agent handed a chunk from the server counts as receiving it.
pub const RECEIVING_FOR_MS: u64 = 5_000;
/// An agent that has not reported for this long is forgotten (agents report at least every
/// 10 s while they serve peers).
pub const FORGET_AFTER_MS: u64 = 60_000;
/// How long an agent named first for a chunk counts as uploading it, unless its asker says it
/// holds the chunk before: the agent's own limit on a peer's whole chunk (`PEER_CHUNK_WITHIN`).
pub const UPLOAD_FOR_MS: u64 = 2_000;
/// Agents one swarm keeps; past it a newcomer is answered but not kept (it fetches from the
/// server and serves nobody).
pub const MAX_AGENTS: usize = 4096;

/// One agent of the room.
#[derive(Debug, Clone)]
struct Agent {
    port: u16,
    /// Chunk I held: bit I.
    held: Vec<u64>,
    seen_ms: u64,
    /// Times it was named as a source.
    named: u64,
    /// A peer reported it gone: named to nobody until it reports again, its chunks kept
    /// (its reports say only what it got since the last one).
    gone: bool,
}

impl Agent {
    /// Whether it may be named to others.
    fn named_ok(&self) -> bool {
        self.port != 0 && !self.gone
    }

    fn holds(&self, i: u64) -> bool {
        self.held
            .get((i / 64) as usize)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
}

/// What one swarm did, for its log and the tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Wants answered with peers that held the chunk.
    pub to_holders: u64,
    /// Wants answered with the peer receiving the chunk (merged misses).
    pub merged: u64,
    /// Wants answered with the server (the asker receives it into the room).
    pub to_server: u64,
    /// Peers reported bad, never named again.
    pub banned: u64,
}

/// One room booting one root image.
#[derive(Debug, Clone)]
pub struct Swarm {
    chunks: u64,
    /// The prefetch order handed out: a recorded boot's chunk order, else ascending.
    order: Option<Vec<u64>>,
    agents: HashMap<IpAddr, Agent>,
    /// Chunk -> the agent the server is sending it to, and since when.
    receiving: HashMap<u64, (IpAddr, u64)>,
    /// (Asker, chunk) -> the agent named first to send it, and since when: uploads in flight.
    uploads: HashMap<(IpAddr, u64), (IpAddr, u64)>,
    /// Agents handed the prefetch order so far: the next one's place in `spread`.
    orders_given: usize,
    banned: HashSet<IpAddr>,
    pub tally: Tally,
}

impl Swarm {
    /// A swarm for an image of `chunks` chunks; `order`, a recorded boot's chunk order, if any.
    pub fn new(chunks: u64, order: Option<Vec<u64>>) -> Swarm {
        Swarm {
            chunks,
            order: order.map(|o| o.into_iter().filter(|&i| i < chunks).collect()),
            agents: HashMap::new(),
            receiving: HashMap::new(),
            uploads: HashMap::new(),
            orders_given: 0,
            banned: HashSet::new(),
            tally: Tally::default(),
        }
    }

    /// The agent at `ip` reports and asks, at `now_ms`; its answer. Its report's indices are
    /// the codec's, all below the image's count of chunks.
    pub fn ask(&mut self, ip: IpAddr, report: &Report, now_ms: u64) -> Answer {
        self.agents
            .retain(|_, a| now_ms.saturating_sub(a.seen_ms) < FORGET_AFTER_MS);
        for bad in &report.bad {
            if *bad != ip && self.banned.insert(*bad) {
                self.tally.banned += 1;
            }
            self.forget(*bad);
        }
        for gone in &report.gone {
            if *gone != ip {
                self.set_gone(*gone);
            }
        }
        let words = self.chunks.div_ceil(64) as usize;
        let kept = self.agents.len() < MAX_AGENTS || self.agents.contains_key(&ip);
        if kept && !self.banned.contains(&ip) {
            let agent = self.agents.entry(ip).or_insert_with(|| Agent {
                port: report.port,
                held: vec![0; words],
                seen_ms: now_ms,
                named: 0,
                gone: false,
            });
            agent.port = report.port;
            agent.seen_ms = now_ms;
            agent.gone = false;
            for i in report.have.iter() {
                agent.held[(i / 64) as usize] |= 1 << (i % 64);
                if self.receiving.get(&i).is_some_and(|(r, _)| *r == ip) {
                    self.receiving.remove(&i);
                }
            }
        }
        // What it now holds is no longer on its way to it.
        for i in report.have.iter() {
            self.uploads.remove(&(ip, i));
        }
        self.uploads
            .retain(|_, (_, since)| now_ms.saturating_sub(*since) < UPLOAD_FOR_MS);
        let from = report
            .want
            .iter()
            .map(|i| (i, self.sources(ip, i, now_ms)))
            .collect();
        let peers = self
            .agents
            .iter()
            .filter(|(a, agent)| **a != ip && agent.named_ok())
            .map(|(a, agent)| SocketAddr::new(*a, agent.port))
            .collect();
        let order = report.order.then(|| {
            let k = self.orders_given;
            self.orders_given += 1;
            match &self.order {
                Some(o) => super::prefetch::spread(o, k),
                None => super::prefetch::spread(&(0..self.chunks).collect::<Vec<_>>(), k),
            }
        });
        Answer { peers, from, order }
    }

    /// Where `ip` fetches chunk `i` (none named: the server), as the module says.
    fn sources(&mut self, ip: IpAddr, i: u64, now_ms: u64) -> Vec<SocketAddr> {
        let mut holders: Vec<(&IpAddr, &Agent)> = self
            .agents
            .iter()
            .filter(|(a, agent)| **a != ip && agent.named_ok() && agent.holds(i))
            .collect();
        if !holders.is_empty() {
            // The fewest uploads in flight first, then named least; the address breaks ties,
            // so an answer is the same for the same state.
            let mut busy: HashMap<IpAddr, usize> = HashMap::new();
            for (from, _) in self.uploads.values() {
                *busy.entry(*from).or_default() += 1;
            }
            holders
                .sort_by_key(|(a, agent)| (busy.get(*a).copied().unwrap_or(0), agent.named, **a));
            let chosen: Vec<IpAddr> = holders.iter().take(NAMED).map(|(a, _)| **a).collect();
            self.tally.to_holders += 1;
            // The asker tries them in order: the first is the one likely to send it.
            self.uploads.insert((ip, i), (chosen[0], now_ms));
            return chosen
                .into_iter()
                .map(|a| {
                    let agent = self.agents.get_mut(&a).expect("a holder");
                    agent.named += 1;
                    SocketAddr::new(a, agent.port)
                })
                .collect();
        }
        let receiver = self.receiving.get(&i).and_then(|&(r, since)| {
            let fresh = now_ms.saturating_sub(since) < RECEIVING_FOR_MS;
            let agent = self.agents.get(&r).filter(|a| a.named_ok())?;
            (r != ip && fresh).then(|| SocketAddr::new(r, agent.port))
        });
        if let Some(r) = receiver {
            self.tally.merged += 1;
            self.uploads.insert((ip, i), (r.ip(), now_ms));
            return vec![r];
        }
        if self.agents.contains_key(&ip) {
            self.receiving.insert(i, (ip, now_ms));
        }
        self.tally.to_server += 1;
        Vec::new()
    }

    /// A peer said `ip` did not answer: it is named to nobody until it reports again (it may
    /// be switched off, or only slow), its chunks kept for then; what it was receiving goes
    /// to the next asker.
    fn set_gone(&mut self, ip: IpAddr) {
        if let Some(a) = self.agents.get_mut(&ip) {
            a.gone = true;
        }
        self.receiving.retain(|_, (r, _)| *r != ip);
        self.uploads.retain(|_, (from, _)| *from != ip);
    }

    fn forget(&mut self, ip: IpAddr) {
        self.agents.remove(&ip);
        self.receiving.retain(|_, (r, _)| *r != ip);
        self.uploads
            .retain(|(asker, _), (from, _)| *asker != ip && *from != ip);
    }

    /// Agents kept.
    pub fn agents(&self) -> usize {
        self.agents.len()
    }
}

/// Which swarm: the image's name, its manifest's digest, and the room (the pool and the
/// client subnet, as the route writes them).
pub type Key = (String, [u8; 32], String);

/// Swarms kept at most; past it the one asked least recently is dropped (its agents are
/// answered from the server until they report again).
pub const MAX_SWARMS: usize = 256;

/// Every swarm the tracker keeps, each with when it was last asked.
#[derive(Debug, Default)]
pub struct Swarms {
    swarms: std::collections::HashMap<Key, (Swarm, u64)>,
}

impl Swarms {
    /// Whether the swarm `key` is kept (a new one is made with a prefetch order that costs
    /// reading the kept traces: `boot::prefetch`, done outside the tracker's lock).
    pub fn has(&self, key: &Key) -> bool {
        self.swarms.contains_key(key)
    }

    /// The swarm `key`, made for an image of `chunks` chunks if it is new (with `order`, a
    /// recorded boot's chunk order, if any; ignored for a swarm already kept), asked at
    /// `now_ms`.
    pub fn get(
        &mut self,
        key: Key,
        chunks: u64,
        now_ms: u64,
        order: Option<Vec<u64>>,
    ) -> &mut Swarm {
        if !self.swarms.contains_key(&key) && self.swarms.len() >= MAX_SWARMS {
            let oldest = self
                .swarms
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.swarms.remove(&k);
            }
        }
        let entry = self
            .swarms
            .entry(key)
            .or_insert_with(|| (Swarm::new(chunks, order), now_ms));
        entry.1 = now_ms;
        &mut entry.0
    }

    pub fn len(&self) -> usize {
        self.swarms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.swarms.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::swarm::Ranges;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn at(last: u8) -> SocketAddr {
        SocketAddr::new(ip(last), 10810)
    }

    fn report(have: &[u64], want: &[u64]) -> Report {
        Report {
            port: 10810,
            have: Ranges::of(have),
            want: Ranges::of(want),
            ..Report::default()
        }
    }

    fn from(a: &Answer, i: u64) -> Vec<SocketAddr> {
        a.from.iter().find(|(c, _)| *c == i).unwrap().1.clone()
    }

    #[test]
    fn the_first_asker_gets_the_server_and_concurrent_askers_get_the_first() {
        let mut s = Swarm::new(8, None);
        assert!(from(&s.ask(ip(1), &report(&[], &[3]), 0), 3).is_empty());
        // Merged onto the one receiving it, while it does.
        assert_eq!(from(&s.ask(ip(2), &report(&[], &[3]), 10), 3), vec![at(1)]);
        assert_eq!(from(&s.ask(ip(3), &report(&[], &[3]), 20), 3), vec![at(1)]);
        // It reports it holds it: named as a holder, with the others that got it from it.
        s.ask(ip(2), &report(&[3], &[]), 30);
        let a = s.ask(ip(4), &report(&[], &[3]), 40);
        assert_eq!(from(&a, 3).len(), 1, "{a:?}");
        let both = s.ask(ip(1), &report(&[3], &[]), 50);
        assert!(both.from.is_empty());
        let a = s.ask(ip(4), &report(&[], &[3]), 60);
        assert_eq!(from(&a, 3).len(), 2);
        assert!(!from(&a, 3).contains(&at(4)));
        assert_eq!(s.tally.to_server, 1);
        assert_eq!(s.tally.merged, 2);
    }

    #[test]
    fn a_receiver_silent_too_long_is_no_longer_named_and_the_next_asker_receives() {
        let mut s = Swarm::new(4, None);
        s.ask(ip(1), &report(&[], &[0]), 0);
        let a = s.ask(ip(2), &report(&[], &[0]), RECEIVING_FOR_MS + 1);
        assert!(from(&a, 0).is_empty());
        assert_eq!(
            from(&s.ask(ip(3), &report(&[], &[0]), RECEIVING_FOR_MS + 2), 0),
            vec![at(2)]
        );
    }

    #[test]
    fn holders_named_least_come_first_and_at_most_three() {
        let mut s = Swarm::new(2, None);
        for k in 1..=5 {
            s.ask(ip(k), &report(&[0, 1], &[]), 0);
        }
        let a = s.ask(ip(9), &report(&[], &[0]), 1);
        assert_eq!(from(&a, 0), vec![at(1), at(2), at(3)]);
        // Agent 1 is sending chunk 0 to 9 still: 2 and 3, named as often, come first.
        let b = s.ask(ip(8), &report(&[], &[1]), 2);
        assert_eq!(from(&b, 1), vec![at(4), at(5), at(2)]);
        // Everyone the asker may serve: the room's agents but itself.
        assert_eq!(b.peers.len(), 6);
        assert!(!b.peers.contains(&at(8)));
    }

    #[test]
    fn holders_with_fewer_uploads_in_flight_come_first_until_their_askers_hold_the_chunk() {
        let mut s = Swarm::new(4, None);
        s.ask(ip(1), &report(&[0, 1], &[]), 0);
        s.ask(ip(2), &report(&[0, 1], &[]), 0);
        assert_eq!(
            from(&s.ask(ip(9), &report(&[], &[0]), 1), 0),
            vec![at(1), at(2)]
        );
        // 1 is sending to 9: 2 first, though named as often and later in address.
        assert_eq!(
            from(&s.ask(ip(8), &report(&[], &[0]), 2), 0),
            vec![at(2), at(1)]
        );
        // 9 holds it now: 1 is free again, and is named for 9's next chunk.
        assert_eq!(
            from(&s.ask(ip(9), &report(&[0], &[1]), 3), 1),
            vec![at(1), at(2)]
        );
        // 2's upload to 8 (since 2) is past its time, 1's to 9 (since 3) is not.
        let late = 2 + UPLOAD_FOR_MS;
        assert_eq!(
            from(&s.ask(ip(7), &report(&[], &[1]), late), 1),
            vec![at(2), at(1)]
        );
        // An agent merged onto the one receiving a chunk counts as that one's upload.
        s.ask(ip(3), &report(&[], &[2]), late);
        assert_eq!(
            from(&s.ask(ip(4), &report(&[], &[2]), late), 2),
            vec![at(3)]
        );
        assert!(s.uploads.values().any(|(f, _)| *f == ip(3)));
        // A peer forgotten takes its uploads with it.
        let mut gone = report(&[], &[]);
        gone.gone = vec![ip(3)];
        s.ask(ip(4), &gone, late);
        assert!(!s.uploads.values().any(|(f, _)| *f == ip(3)));
    }

    #[test]
    fn each_agent_is_handed_the_order_spread_by_its_place_among_the_askers() {
        let mut asked = report(&[], &[]);
        asked.order = true;
        let recorded: Vec<u64> = (0..40).rev().collect();
        let mut s = Swarm::new(40, Some(recorded.clone()));
        assert_eq!(s.ask(ip(1), &asked, 0).order, Some(recorded.clone()));
        let second = s.ask(ip(2), &asked, 0).order.unwrap();
        assert_eq!(second, crate::boot::prefetch::spread(&recorded, 1));
        assert_ne!(second[0], recorded[0]);
        // A report that does not ask for it takes no place.
        s.ask(ip(3), &report(&[], &[]), 0);
        let third = s.ask(ip(4), &asked, 0).order.unwrap();
        assert_eq!(third, crate::boot::prefetch::spread(&recorded, 2));
        // Without a recorded order: ascending, spread the same way.
        let mut s = Swarm::new(40, None);
        s.ask(ip(1), &asked, 0);
        let ascending: Vec<u64> = (0..40).collect();
        assert_eq!(
            s.ask(ip(2), &asked, 0).order,
            Some(crate::boot::prefetch::spread(&ascending, 1))
        );
    }

    #[test]
    fn a_peer_reported_bad_is_never_named_again_even_when_it_reports_again() {
        let mut s = Swarm::new(2, None);
        s.ask(ip(1), &report(&[0], &[]), 0);
        s.ask(ip(2), &report(&[0], &[]), 0);
        let mut bad = report(&[], &[0]);
        bad.bad = vec![ip(1)];
        assert_eq!(from(&s.ask(ip(3), &bad, 1), 0), vec![at(2)]);
        s.ask(ip(1), &report(&[0, 1], &[]), 2);
        let a = s.ask(ip(4), &report(&[], &[0, 1]), 3);
        assert_eq!(from(&a, 0), vec![at(2)]);
        assert!(from(&a, 1).is_empty(), "{a:?}");
        assert!(!a.peers.contains(&at(1)));
        assert_eq!(s.tally.banned, 1);
        // An agent cannot ban itself out of reach of others' reports, nor is it named by its own.
        let mut own = report(&[], &[]);
        own.bad = vec![ip(4)];
        s.ask(ip(4), &own, 4);
        assert_eq!(s.tally.banned, 1);
    }

    /// A peer reported gone is named to nobody until it reports again; then it is named for
    /// the chunks it reported before (a report says only what is new since the last: the
    /// tracker forgetting them sent every later asker of those chunks to the server). One
    /// silent for `FORGET_AFTER_MS` is forgotten.
    #[test]
    fn a_peer_reported_gone_is_named_again_with_its_chunks_once_it_reports_and_a_silent_one_forgotten()
     {
        let mut s = Swarm::new(2, None);
        s.ask(ip(1), &report(&[0], &[]), 0);
        let mut gone = report(&[], &[0]);
        gone.gone = vec![ip(1)];
        assert!(from(&s.ask(ip(2), &gone, 1), 0).is_empty());
        assert!(s.ask(ip(2), &report(&[], &[]), 1).peers.is_empty());
        s.ask(ip(1), &report(&[], &[]), 2);
        assert_eq!(from(&s.ask(ip(3), &report(&[], &[0]), 3), 0), vec![at(1)]);
        let late = FORGET_AFTER_MS + 10;
        let a = s.ask(ip(4), &report(&[], &[0]), late);
        assert!(from(&a, 0).is_empty());
        assert_eq!(s.agents(), 1);
    }

    #[test]
    fn the_order_is_the_recorded_ones_else_ascending_and_only_when_asked() {
        let mut asked = report(&[], &[]);
        asked.order = true;
        let mut s = Swarm::new(4, Some(vec![2, 0, 9]));
        assert_eq!(s.ask(ip(1), &asked, 0).order, Some(vec![2, 0]));
        assert_eq!(s.ask(ip(1), &report(&[], &[]), 0).order, None);
        let mut s = Swarm::new(3, None);
        assert_eq!(s.ask(ip(1), &asked, 0).order, Some(vec![0, 1, 2]));
    }

    #[test]
    fn swarms_are_kept_apart_by_room_and_the_oldest_goes_first() {
        let mut all = Swarms::default();
        let key = |room: &str| ("demo".to_string(), [7; 32], room.to_string());
        all.get(key("a"), 4, 0, None)
            .ask(ip(1), &report(&[0], &[]), 0);
        let other = all
            .get(key("b"), 4, 1, None)
            .ask(ip(2), &report(&[], &[0]), 1);
        assert!(
            from(&other, 0).is_empty(),
            "another room's holder is not named"
        );
        for k in 0..MAX_SWARMS as u64 {
            all.get(key(&format!("r{k}")), 4, 2 + k, None);
        }
        assert_eq!(all.len(), MAX_SWARMS);
        let again = all
            .get(key("a"), 4, 9999, None)
            .ask(ip(3), &report(&[], &[0]), 9999);
        assert!(from(&again, 0).is_empty(), "room a was dropped, the oldest");
    }

    #[test]
    fn a_new_swarm_takes_the_recorded_order_and_a_kept_one_keeps_its_own() {
        let mut all = Swarms::default();
        let key = ("demo".to_string(), [7; 32], "room".to_string());
        let mut asked = report(&[], &[]);
        asked.order = true;
        assert!(!all.has(&key));
        let a = all
            .get(key.clone(), 8, 0, Some(vec![5, 1]))
            .ask(ip(1), &asked, 0);
        assert_eq!(a.order, Some(vec![5, 1]));
        assert!(all.has(&key));
        let b = all.get(key, 8, 1, Some(vec![2])).ask(ip(2), &asked, 1);
        assert_eq!(
            b.order,
            Some(vec![5, 1]),
            "the order the swarm was made with"
        );
    }

    #[test]
    fn an_agent_serving_no_peers_is_never_named() {
        let mut s = Swarm::new(2, None);
        let mut quiet = report(&[0], &[1]);
        quiet.port = 0;
        s.ask(ip(1), &quiet, 0);
        let a = s.ask(ip(2), &report(&[], &[0, 1]), 1);
        assert!(from(&a, 0).is_empty() && from(&a, 1).is_empty(), "{a:?}");
        assert!(a.peers.is_empty());
    }
}

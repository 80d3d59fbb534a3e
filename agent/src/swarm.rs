//! The agent's side of the room's swarm (docs/swarm.md, "Peers and the tracker"), when it is
//! given `--peers`: it tells the tracker (the server, `POST .../blocks/DIGEST/where` on the
//! source that answered last) what it holds and asks where to fetch a chunk it misses; it
//! fetches that chunk from the peers named (`GET http://PEER/chunks/DIGEST/INDEX`, each given
//! `PEER_WAIT` to answer), checks it against the manifest, and tells the tracker of a peer that
//! sent a bad one (never asked again, `pick.rs`) or was silent. When no peer gives the chunk
//! the caller fetches it from the servers (`sources.rs`), always the last source. A tracker
//! that fails is left alone for a rest that starts at `TRACKER_REST_FIRST` and doubles with
//! each failure in a row up to `TRACKER_REST` (`Rest`, pure), one that does not share for
//! `TRACKER_OFF`: the agent is then the unicast one. It also keeps who may ask it for chunks:
//! the peers the tracker last named.

use crate::blocks::{self, Blocks};
use crate::http::{self, Conn, Url};
use crate::pick::{Book, Next, Outcome};
use crate::slabs::{Bytes, Slabs};
use crate::sources::Sources;
use crate::wire::{Answer, Ranges, Report};
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

/// How long a peer may take to connect, and then to send each next byte: a silent peer costs
/// a chunk about this much before the next source is tried.
pub const PEER_WAIT: Duration = Duration::from_millis(1000);
/// How long a peer may take to send a whole chunk (256 KiB: 2 ms at 1 Gbit/s); one slower is
/// left as a silent one is.
pub const PEER_CHUNK_WITHIN: Duration = Duration::from_secs(2);
/// How long the tracker may take to answer.
const TRACKER_WAIT: Duration = Duration::from_millis(1500);
/// After a tracker call that failed (no answer in time, a refused connection, an answer that
/// does not read), none is made for `TRACKER_REST_FIRST`, doubled with each failure in a
/// row up to `TRACKER_REST`; a call that succeeds starts it again (chunks come from the
/// servers meanwhile: a rest of 5 s after one timed-out call under load had a 120-client
/// storm room fetch 18.5 copies from the server). After a tracker that does not share (403,
/// 404), none for `TRACKER_OFF`.
pub const TRACKER_REST_FIRST: Duration = Duration::from_millis(250);
pub const TRACKER_REST: Duration = Duration::from_secs(5);
pub const TRACKER_OFF: Duration = Duration::from_secs(60);
/// The agent reports at least this often while it serves, so the tracker keeps naming it.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);
/// Asking the tracker again who the peers are, for an address it does not know, at most
/// this often (a request waits for the next time it may).
const REFRESH_EVERY: Duration = Duration::from_millis(50);

/// What the agent's swarm did, for its log and its tests.
#[derive(Default, Debug)]
pub struct Counts {
    /// Chunks fetched from peers and accepted.
    pub from_peers: AtomicU64,
    /// Chunks peers sent that the manifest refused.
    pub peer_refused: AtomicU64,
    /// Tries of a peer that did not answer in time.
    pub peer_silent: AtomicU64,
    /// Chunks served to peers.
    pub served: AtomicU64,
    /// Tracker calls that failed.
    pub tracker_failed: AtomicU64,
    /// Chunks left to the servers, by why: no tracker answer (a failed call or its rest), no
    /// peer named, or every peer named failed (and of those tries, the ones a peer answered
    /// that it lacks the chunk: a receiving peer's wait ran out).
    pub unanswered: AtomicU64,
    pub none_named: AtomicU64,
    pub peers_failed: AtomicU64,
    pub peer_lacked: AtomicU64,
}

/// What the next report carries.
#[derive(Default)]
struct Pending {
    have: Vec<u64>,
    bad: Vec<IpAddr>,
    gone: Vec<IpAddr>,
}

/// The agent's swarm.
pub struct Swarm {
    /// The port it serves peers on.
    pub port: u16,
    digest: String,
    chunks: u64,
    began: Instant,
    book: Mutex<Book>,
    allowed: RwLock<HashSet<IpAddr>>,
    pending: Mutex<Pending>,
    peer_conns: Mutex<HashMap<SocketAddr, Vec<Conn>>>,
    tracker_conns: Mutex<Vec<Conn>>,
    rest: Mutex<Rest>,
    last_report: Mutex<Instant>,
    last_refresh: Mutex<Option<Instant>>,
    pub counts: Counts,
}

impl Swarm {
    pub fn new(port: u16, blocks: &Blocks) -> Swarm {
        Swarm {
            port,
            digest: blocks::hex(&blocks.digest()),
            chunks: blocks.digests.len() as u64,
            began: Instant::now(),
            book: Mutex::default(),
            allowed: RwLock::default(),
            pending: Mutex::default(),
            peer_conns: Mutex::default(),
            tracker_conns: Mutex::default(),
            rest: Mutex::default(),
            last_report: Mutex::new(Instant::now()),
            last_refresh: Mutex::default(),
            counts: Counts::default(),
        }
    }

    /// The manifest's digest in hex, as peers' URLs name it.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    fn now_ms(&self) -> u64 {
        self.began.elapsed().as_millis() as u64
    }

    /// Reports to the tracker and asks it where `want` is (and the prefetch order, with
    /// `order`); `None` when it did not answer, does not share, or is resting.
    pub fn ask(&self, sources: &Sources, want: &[u64], order: bool) -> Option<Answer> {
        if lock(&self.rest).resting(Instant::now()) {
            return None;
        }
        let taken = std::mem::take(&mut *lock(&self.pending));
        let report = Report {
            port: self.port,
            have: Ranges::of(&taken.have),
            want: Ranges::of(want),
            bad: taken.bad.clone(),
            gone: taken.gone.clone(),
            order,
        };
        *lock(&self.last_report) = Instant::now();
        let source = sources.current();
        let url = source.url.with_path(format!("{}/where", source.url.path));
        let answer = self
            .post(&url, report.encode().as_bytes())
            .and_then(|body| Answer::decode(&body, self.chunks).map_err(|e| (false, e)));
        match answer {
            Ok(a) => {
                lock(&self.rest).answered();
                *write(&self.allowed) = a.peers.iter().map(SocketAddr::ip).collect();
                Some(a)
            }
            Err((off, why)) => {
                // What it was to say is said at the next call that reaches it.
                let mut p = lock(&self.pending);
                p.have.extend(taken.have);
                p.bad.extend(taken.bad);
                p.gone.extend(taken.gone);
                drop(p);
                self.counts.tracker_failed.fetch_add(1, Ordering::Relaxed);
                let rest = lock(&self.rest).failed(Instant::now(), off);
                eprintln!(
                    "bootpool-agent: tracker http://{}{}: {why}; chunks from the servers for {:.2} s",
                    url.authority,
                    url.path,
                    rest.as_secs_f64()
                );
                None
            }
        }
    }

    /// One POST to the tracker on a kept connection or a new one; `Err((true, _))` when it
    /// answered that it does not share (403, 404).
    fn post(&self, url: &Url, body: &[u8]) -> Result<Vec<u8>, (bool, String)> {
        let kept = lock(&self.tracker_conns).pop();
        let mut conn = match kept {
            Some(c) => c,
            None => Conn::connect_within(url, TRACKER_WAIT, TRACKER_WAIT)
                .map_err(|e| (false, e.to_string()))?,
        };
        let mut got = conn.post(url, body, crate::wire::MAX_TEXT as u64);
        if matches!(got, Err(http::Error::Io(_))) {
            // A kept connection the server closed since: once more on a new one.
            conn = Conn::connect_within(url, TRACKER_WAIT, TRACKER_WAIT)
                .map_err(|e| (false, e.to_string()))?;
            got = conn.post(url, body, crate::wire::MAX_TEXT as u64);
        }
        if conn.reusable() && !matches!(got, Err(http::Error::Io(_))) {
            lock(&self.tracker_conns).push(conn);
        }
        got.map_err(|e| {
            let off = matches!(e, http::Error::Status(403 | 404, _));
            (off, e.to_string())
        })
    }

    /// Chunk `index` from the peers the tracker names, checked against `blocks`, received
    /// into `slabs`; `None` when none gave it (the servers then do).
    pub fn fetch(
        &self,
        sources: &Sources,
        blocks: &Blocks,
        slabs: &Slabs,
        index: u64,
    ) -> Option<Bytes> {
        let Some(answer) = self.ask(sources, &[index], false) else {
            self.counts.unanswered.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let named: Vec<SocketAddr> = answer
            .from
            .into_iter()
            .find(|(i, _)| *i == index)
            .map(|(_, n)| n)
            .unwrap_or_default();
        let mut tried = Vec::new();
        loop {
            let next = lock(&self.book).next(&named, &tried, self.now_ms());
            let Next::Peer(peer) = next else {
                let why = if tried.is_empty() {
                    &self.counts.none_named
                } else {
                    &self.counts.peers_failed
                };
                why.fetch_add(1, Ordering::Relaxed);
                return None;
            };
            tried.push(peer);
            let (outcome, got) = match self.get(peer, index, slabs) {
                Ok(bytes) if blocks.holds(index, &bytes) => (Outcome::Good, Some(bytes)),
                Ok(bytes) => {
                    self.counts.peer_refused.fetch_add(1, Ordering::Relaxed);
                    eprintln!(
                        "bootpool-agent: chunk {index}: peer {peer} sent {} bytes of SHA-256 {}, not the manifest's {}: refused, and that peer is asked no more",
                        bytes.len(),
                        blocks::hex(&blocks::sha(&bytes)),
                        blocks::hex(&blocks.digests[index as usize])
                    );
                    (Outcome::Bad, None)
                }
                Err(outcome) => (outcome, None),
            };
            if outcome == Outcome::Lacks {
                self.counts.peer_lacked.fetch_add(1, Ordering::Relaxed);
            }
            if outcome == Outcome::Silent {
                self.counts.peer_silent.fetch_add(1, Ordering::Relaxed);
                eprintln!(
                    "bootpool-agent: chunk {index}: peer {peer} did not answer; trying the next source"
                );
            }
            let tell = lock(&self.book).after(peer.ip(), outcome, self.now_ms());
            if tell {
                let mut p = lock(&self.pending);
                match outcome {
                    Outcome::Bad => p.bad.push(peer.ip()),
                    _ => p.gone.push(peer.ip()),
                }
            }
            if outcome == Outcome::Bad {
                // Told at once, so the tracker names it to nobody else.
                self.ask(sources, &[], false);
            }
            if let Some(bytes) = got {
                self.counts.from_peers.fetch_add(1, Ordering::Relaxed);
                return Some(bytes);
            }
        }
    }

    /// GETs chunk `index` from `peer`; how it failed otherwise.
    fn get(&self, peer: SocketAddr, index: u64, slabs: &Slabs) -> Result<Bytes, Outcome> {
        let url = Url {
            authority: peer.to_string(),
            host: peer.ip().to_string(),
            port: peer.port(),
            path: format!("/chunks/{}/{index}", self.digest),
        };
        let max = u64::from(blocks::MAX_CHUNK);
        let kept = lock(&self.peer_conns).get_mut(&peer).and_then(Vec::pop);
        let was_kept = kept.is_some();
        let mut conn = match kept {
            Some(c) => c,
            None => {
                Conn::connect_within(&url, PEER_WAIT, PEER_WAIT).map_err(|_| Outcome::Silent)?
            }
        };
        conn.within(PEER_CHUNK_WITHIN);
        let mut got = conn.get_into(&url, max, |n| slabs.take(n));
        // A kept connection the peer closed since: once more on a new one (not after a
        // deadline passed: the peer is slow, not gone).
        let stale = matches!(&got, Err(http::Error::Io(e))
            if !matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock));
        if was_kept && stale {
            conn = Conn::connect_within(&url, PEER_WAIT, PEER_WAIT).map_err(|_| Outcome::Silent)?;
            conn.within(PEER_CHUNK_WITHIN);
            got = conn.get_into(&url, max, |n| slabs.take(n));
        }
        if conn.reusable() && !matches!(got, Err(http::Error::Io(_))) {
            lock(&self.peer_conns).entry(peer).or_default().push(conn);
        }
        got.map_err(|e| match e {
            http::Error::Io(_) => Outcome::Silent,
            http::Error::Status(..) => Outcome::Lacks,
            http::Error::Malformed(_) => Outcome::Bad,
        })
    }

    /// Chunk `index` is held, checked: told at the next report.
    pub fn held(&self, index: u64) {
        lock(&self.pending).have.push(index);
    }

    /// Whether `ip` may ask this agent for chunks: a peer the tracker named. An address it does
    /// not know has the tracker asked again, one request at a time and at most every
    /// `REFRESH_EVERY` (a peer that joined since the last answer is named in the next).
    pub fn may_serve(&self, ip: IpAddr, sources: &Sources) -> bool {
        if lock(&self.book).banned(ip) {
            return false;
        }
        if read(&self.allowed).contains(&ip) {
            return true;
        }
        let mut last = lock(&self.last_refresh);
        if read(&self.allowed).contains(&ip) {
            return true;
        }
        if let Some(left) = last.and_then(|t| REFRESH_EVERY.checked_sub(t.elapsed())) {
            std::thread::sleep(left);
        }
        *last = Some(Instant::now());
        self.ask(sources, &[], false);
        read(&self.allowed).contains(&ip)
    }

    /// What it fetched and served so far, for the log: `N chunks held, P from peers, S from the
    /// servers; served V to peers; refused R from peers, T silent; to the servers: U
    /// unanswered, E none named, F peers failed (L lacked)`.
    pub fn summary(&self, held: u64) -> String {
        let c = &self.counts;
        let peers = c.from_peers.load(Ordering::Relaxed);
        format!(
            "{held} chunks held, {peers} from peers, {} from the servers; served {} to peers; refused {} from peers, {} silent; to the servers: {} unanswered, {} none named, {} peers failed ({} lacked)",
            held - peers,
            c.served.load(Ordering::Relaxed),
            c.peer_refused.load(Ordering::Relaxed),
            c.peer_silent.load(Ordering::Relaxed),
            c.unanswered.load(Ordering::Relaxed),
            c.none_named.load(Ordering::Relaxed),
            c.peers_failed.load(Ordering::Relaxed),
            c.peer_lacked.load(Ordering::Relaxed),
        )
    }

    /// Whether a report is due (none for `REPORT_EVERY`).
    pub fn report_due(&self) -> bool {
        lock(&self.last_report).elapsed() >= REPORT_EVERY
    }
}

/// The rest after the `failures`-th tracker failure in a row (1 for the first):
/// `TRACKER_REST_FIRST` doubled for each one before it, `TRACKER_REST` at most.
pub fn tracker_rest(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    TRACKER_REST_FIRST
        .saturating_mul(1 << doublings)
        .min(TRACKER_REST)
}

/// When the tracker may be called again, and how many of its calls failed in a row.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Rest {
    until: Option<Instant>,
    failures: u32,
}

impl Rest {
    /// Whether no call is made at `now`.
    pub fn resting(&self, now: Instant) -> bool {
        self.until.is_some_and(|t| now < t)
    }

    /// A call answered: the next failure rests `TRACKER_REST_FIRST` again.
    pub fn answered(&mut self) {
        self.failures = 0;
    }

    /// A call failed at `now` (`off`: the tracker answered that it does not share); how long
    /// no call is made from `now`. A call that fails while a rest is on (one that several
    /// fetching threads made at once) counts no more failures: the rest already set stands.
    pub fn failed(&mut self, now: Instant, off: bool) -> Duration {
        if off {
            self.until = Some(now + TRACKER_OFF);
            return TRACKER_OFF;
        }
        let left = self.until.and_then(|t| t.checked_duration_since(now));
        if let Some(left) = left.filter(|l| !l.is_zero()) {
            return left;
        }
        self.failures = self.failures.saturating_add(1);
        let rest = tracker_rest(self.failures);
        self.until = Some(now + rest);
        rest
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_after_failures_in_a_row_doubles_from_a_quarter_second_to_five() {
        let ms = |n| tracker_rest(n).as_millis();
        assert_eq!(
            (1..=7).map(ms).collect::<Vec<_>>(),
            [250, 500, 1000, 2000, 4000, 5000, 5000]
        );
        assert_eq!(ms(0), 250);
        assert_eq!(ms(u32::MAX), 5000);
    }

    #[test]
    fn a_rest_grows_while_calls_fail_and_starts_again_after_an_answer() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut r = Rest::default();
        assert!(!r.resting(t0));
        assert_eq!(r.failed(t0, false), Duration::from_millis(250));
        assert!(r.resting(at(249)) && !r.resting(at(250)));
        // Another thread's call, made before the rest, fails within it: no second failure.
        assert_eq!(r.failed(at(100), false), Duration::from_millis(150));
        assert_eq!(r.failed(at(250), false), Duration::from_millis(500));
        assert_eq!(r.failed(at(750), false), Duration::from_millis(1000));
        r.answered();
        assert_eq!(r.failed(at(2000), false), Duration::from_millis(250));
        // A tracker that does not share: a minute, whatever came before.
        assert_eq!(r.failed(at(3000), true), TRACKER_OFF);
        assert!(r.resting(at(62_999)) && !r.resting(at(63_000)));
    }
}

//! The root's chunks as the agent holds them: the block manifest fetched and checked against
//! the digest it was named by, and each chunk fetched from the server when a read first needs
//! it, checked against the manifest before any byte of it is used (a bad one refused and
//! fetched again), then kept in memory. Concurrent reads of one missing chunk wait for the one
//! fetch.

use crate::blocks::{self, Blocks, Sha};
use crate::http::{self, Conn, Url};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Tries of one fetch (a chunk or the manifest) before the read fails, the first pause
/// between them and the growth of each next one (0.1 s, 0.2 s, 0.4 s, 0.8 s: 1.5 s in all).
const ATTEMPTS: u32 = 5;
const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The largest manifest the agent takes: 2^24 chunks of 65 bytes and its head.
const MAX_MANIFEST: u64 = (blocks::MAX_CHUNKS + 1) * 65;

enum Slot {
    Missing,
    /// A thread is fetching it; the others wait on `Store::ready`.
    Fetching,
    Held(Arc<Vec<u8>>),
}

/// What the agent has done, for its log and its tests.
#[derive(Default, Debug)]
pub struct Counts {
    /// Chunks fetched and accepted.
    pub fetched: AtomicU64,
    /// Their bytes.
    pub bytes: AtomicU64,
    /// Chunks refused: a length or a digest that is not the manifest's.
    pub refused: AtomicU64,
}

/// The root image as checked chunks.
pub struct Store {
    pub blocks: Blocks,
    /// The manifest's URL, `.../blocks/DIGEST`; chunk I is at `.../blocks/DIGEST/I`.
    url: Url,
    slots: Mutex<Vec<Slot>>,
    ready: Condvar,
    /// Idle kept-alive connections to the server.
    conns: Mutex<Vec<Conn>>,
    pub counts: Counts,
}

/// The digest a manifest URL names: its last path segment.
pub fn digest_of(url: &Url) -> Result<Sha, String> {
    let last = url.path.rsplit('/').next().unwrap_or_default();
    blocks::parse_hex(last).ok_or_else(|| {
        format!(
            "{}: a manifest URL ends with the manifest's sha256 (64 lowercase hex digits), not `{last}`",
            url.path
        )
    })
}

impl Store {
    /// Fetches the manifest `url` names and checks it: its SHA-256 must be the URL's last
    /// segment, and it must read as a block manifest.
    pub fn open(url: Url) -> Result<Store, String> {
        let digest = digest_of(&url)?;
        let conns = Mutex::new(Vec::new());
        let (_, blocks) = with_retries(&conns, &url, MAX_MANIFEST, "the block manifest", |text| {
            if blocks::sha(text) != digest {
                return Err(format!(
                    "its SHA-256 is {}, not the {} asked for",
                    blocks::hex(&blocks::sha(text)),
                    blocks::hex(&digest)
                ));
            }
            Blocks::decode(text).map_err(|e| e.to_string())
        })?;
        let slots = (0..blocks.digests.len()).map(|_| Slot::Missing).collect();
        Ok(Store {
            blocks,
            url,
            slots: Mutex::new(slots),
            ready: Condvar::new(),
            conns,
            counts: Counts::default(),
        })
    }

    /// Chunk `index`, fetched and checked if it is not held yet.
    pub fn chunk(&self, index: u64) -> Result<Arc<Vec<u8>>, String> {
        let i = index as usize;
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match &slots[i] {
                Slot::Held(bytes) => return Ok(bytes.clone()),
                Slot::Fetching => {
                    slots = self.ready.wait(slots).unwrap_or_else(|e| e.into_inner());
                }
                Slot::Missing => break,
            }
        }
        slots[i] = Slot::Fetching;
        drop(slots);
        let got = self.fetch(index);
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots[i] = match &got {
            Ok(bytes) => Slot::Held(bytes.clone()),
            Err(_) => Slot::Missing,
        };
        self.ready.notify_all();
        got
    }

    fn fetch(&self, index: u64) -> Result<Arc<Vec<u8>>, String> {
        let url = self.url.with_path(format!("{}/{index}", self.url.path));
        let what = format!("chunk {index}");
        let (bytes, ()) = with_retries(
            &self.conns,
            &url,
            u64::from(self.blocks.chunk),
            &what,
            |b| {
                if self.blocks.holds(index, b) {
                    Ok(())
                } else {
                    self.counts.refused.fetch_add(1, Ordering::Relaxed);
                    Err(format!(
                        "refused: {} bytes of SHA-256 {}, not the manifest's {}",
                        b.len(),
                        blocks::hex(&blocks::sha(b)),
                        blocks::hex(&self.blocks.digests[index as usize])
                    ))
                }
            },
        )?;
        self.counts.fetched.fetch_add(1, Ordering::Relaxed);
        self.counts
            .bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(Arc::new(bytes))
    }

    /// The chunks holding `len` bytes of the image from `offset`, each with the range of it
    /// that falls in them, in order (the caller keeps them in the image: `nbd::Request::verdict`
    /// checked the bounds). Pieces, not a copy: the NBD reply is written from them.
    pub fn read(&self, offset: u64, len: u32) -> Result<Vec<Piece>, String> {
        let chunk = u64::from(self.blocks.chunk);
        let end = offset + u64::from(len);
        let mut at = offset;
        let mut pieces = Vec::new();
        while at < end {
            let index = at / chunk;
            let bytes = self.chunk(index)?;
            let from = (at - index * chunk) as usize;
            let to = ((end - index * chunk) as usize).min(bytes.len());
            pieces.push(Piece { bytes, from, to });
            at = index * chunk + to as u64;
        }
        Ok(pieces)
    }
}

/// Bytes `from..to` of a chunk held.
pub struct Piece {
    bytes: Arc<Vec<u8>>,
    from: usize,
    to: usize,
}

impl std::ops::Deref for Piece {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[self.from..self.to]
    }
}

/// GETs `url` until `check` takes its body, at most `ATTEMPTS` times with growing pauses,
/// each failure logged: the body and what `check` made of it, else the last one's reason.
fn with_retries<T>(
    conns: &Mutex<Vec<Conn>>,
    url: &Url,
    max: u64,
    what: &str,
    mut check: impl FnMut(&[u8]) -> Result<T, String>,
) -> Result<(Vec<u8>, T), String> {
    let mut pause = FIRST_PAUSE;
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        if attempt > 1 {
            std::thread::sleep(pause);
            pause *= 2;
        }
        last = match get(conns, url, max).and_then(|b| check(&b).map(|v| (b, v))) {
            Ok(got) => return Ok(got),
            Err(e) => format!("http://{}{}: {e}", url.authority, url.path),
        };
        eprintln!("bootpool-agent: {what}: {last} (try {attempt} of {ATTEMPTS})");
    }
    Err(last)
}

/// One GET on an idle kept-alive connection, or a new one: a kept connection the server has
/// closed since (its idle timeout) is dropped and the GET made again on a new one at once.
fn get(conns: &Mutex<Vec<Conn>>, url: &Url, max: u64) -> Result<Vec<u8>, String> {
    let idle = conns.lock().unwrap_or_else(|e| e.into_inner()).pop();
    if let Some(mut conn) = idle {
        match conn.get(url, max) {
            Err(http::Error::Io(_)) => {}
            got => {
                if conn.reusable() {
                    conns.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
                }
                return got.map_err(|e| e.to_string());
            }
        }
    }
    let mut conn =
        Conn::connect(url).map_err(|e| format!("connecting to {}: {e}", url.authority))?;
    let got = conn.get(url, max);
    if conn.reusable() && !matches!(got, Err(http::Error::Io(_))) {
        conns.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
    }
    got.map_err(|e| e.to_string())
}

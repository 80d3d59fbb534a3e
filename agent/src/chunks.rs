//! The root's chunks as the agent holds them: the block manifest fetched and checked against
//! the digest it was named by, and each chunk fetched from a source (`sources.rs`, which
//! moves to the next one when a fetch fails) when a read first needs it, checked against the
//! manifest before any byte of it is used (a bad one refused and fetched again), then kept in
//! memory. Concurrent reads of one missing chunk wait for the one fetch. With a swarm
//! (`swarm.rs`, `--peers`), a chunk is first asked of the peers the tracker names, and the
//! servers are the last source.

use crate::blocks::{self, Blocks, Sha};
use crate::http::Url;
use crate::slabs::{Bytes, Slabs};
use crate::sources::Sources;
use crate::swarm::Swarm;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// The largest manifest the agent takes: 2^24 chunks of 65 bytes and its head.
const MAX_MANIFEST: u64 = (blocks::MAX_CHUNKS + 1) * 65;

enum Slot {
    Missing,
    /// A thread is fetching it; the others wait on `Store::ready`.
    Fetching,
    Held(Arc<Bytes>),
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
    /// The servers, each by the manifest's URL, `.../blocks/DIGEST`; chunk I is at
    /// `.../blocks/DIGEST/I`.
    pub sources: Sources,
    slots: Mutex<Vec<Slot>>,
    ready: Condvar,
    /// Where chunks are received into (`slabs.rs`).
    slabs: Slabs,
    pub counts: Counts,
    /// The room's peers and the tracker, when the agent shares (`--peers`).
    pub swarm: Option<Swarm>,
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
    /// Fetches the manifest the `urls` name (one server's each, all of one digest) and
    /// checks it: its SHA-256 must be the URLs' last segment, and it must read as a block
    /// manifest.
    pub fn open(urls: Vec<Url>) -> Result<Store, String> {
        let first = urls.first().ok_or("no source given")?;
        let digest = digest_of(first)?;
        for u in &urls[1..] {
            if digest_of(u)? != digest {
                return Err(format!(
                    "http://{}{} names another manifest than http://{}{}: every source serves the same root",
                    u.authority, u.path, first.authority, first.path
                ));
            }
        }
        let sources = Sources::new(urls)?;
        let manifest = |n| vec![0; n];
        let (_, blocks) =
            sources.fetch("", MAX_MANIFEST, "the block manifest", manifest, |text| {
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
            sources,
            slots: Mutex::new(slots),
            ready: Condvar::new(),
            slabs: Slabs::default(),
            counts: Counts::default(),
            swarm: None,
        })
    }

    /// Shares with the room: peers are asked first, and the agent serves them on `port`.
    pub fn share(&mut self, port: u16) {
        self.swarm = Some(Swarm::new(port, &self.blocks));
    }

    /// Chunk `index` if it is held, or once held if a fetch of it ends within `wait` (a peer
    /// the tracker sent here while this agent receives it); `None` otherwise.
    pub fn held_within(&self, index: u64, wait: std::time::Duration) -> Option<Arc<Bytes>> {
        let i = usize::try_from(index).ok()?;
        let until = std::time::Instant::now() + wait;
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match slots.get(i)? {
                Slot::Held(bytes) => return Some(bytes.clone()),
                Slot::Missing => return None,
                Slot::Fetching => {
                    let left = until.checked_duration_since(std::time::Instant::now())?;
                    slots = self
                        .ready
                        .wait_timeout(slots, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }

    /// Chunk `index`, fetched and checked if it is not held yet.
    pub fn chunk(&self, index: u64) -> Result<Arc<Bytes>, String> {
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
        drop(slots);
        if let (Some(swarm), Ok(_)) = (&self.swarm, &got) {
            swarm.held(index);
        }
        got
    }

    fn fetch(&self, index: u64) -> Result<Arc<Bytes>, String> {
        let from_peer = self
            .swarm
            .as_ref()
            .and_then(|s| s.fetch(&self.sources, &self.blocks, &self.slabs, index));
        if let Some(bytes) = from_peer {
            self.counts.fetched.fetch_add(1, Ordering::Relaxed);
            self.counts
                .bytes
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            return Ok(Arc::new(bytes));
        }
        let what = format!("chunk {index}");
        let (bytes, ()) = self.sources.fetch(
            &format!("/{index}"),
            u64::from(self.blocks.chunk),
            &what,
            |n| self.slabs.take(n),
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
    bytes: Arc<Bytes>,
    from: usize,
    to: usize,
}

impl std::ops::Deref for Piece {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[self.from..self.to]
    }
}

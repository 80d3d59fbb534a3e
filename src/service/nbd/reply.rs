//! One reply ready to go (header and where its data lies) and the pool of page-aligned
//! buffers READ data is read into.

use crate::proto::nbd as p;
use crate::sys::page_buf::PageBuf;
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;

/// One reply ready to go: the header, and the payload if it carries one. Header and payload
/// leave in one `writev`, so neither is copied to join them.
pub(super) struct Reply {
    pub(super) head: [u8; p::SIMPLE_REPLY_LEN],
    pub(super) body: Body,
    pub(super) payload: u64,
    /// Held until written: the request slot, the buffer bytes, the connection's read-ahead.
    pub(super) _slot: OwnedSemaphorePermit,
    pub(super) _buffer: Option<OwnedSemaphorePermit>,
    pub(super) _ahead: Option<OwnedSemaphorePermit>,
}

/// A READ's data.
pub(super) enum Body {
    None,
    /// The first `payload` bytes of a pooled buffer, returned to the pool once written.
    Buf(PageBuf),
    /// A range of a `store: ram` image, sent from where it lies (no copy of our own).
    Ram(Arc<Vec<u8>>, usize),
}

impl Reply {
    pub(super) fn data(&self) -> &[u8] {
        let len = self.payload as usize;
        match &self.body {
            Body::None => &[],
            Body::Buf(b) => &b[..len],
            Body::Ram(b, offset) => &b[*offset..][..len],
        }
    }
}

/// Reply buffers kept for reuse across requests and connections. A fresh buffer per READ is
/// zeroed first and faulted in page by page; a reused one is neither. Buffers are
/// page-aligned (see `page_buf`) and keep their capacity, so reuse never zeroes again.
pub(super) struct BufPool {
    free: std::sync::Mutex<(Vec<PageBuf>, usize)>,
}

/// Idle reply buffers kept, in bytes, over all connections (in-flight ones are bounded by
/// `BUFFER_BUDGET`).
const POOL_BYTES: usize = 64 << 20;

impl BufPool {
    pub(super) fn new() -> BufPool {
        BufPool {
            free: std::sync::Mutex::new((Vec::new(), 0)),
        }
    }

    /// A buffer of `len` bytes (its contents are stale: the caller fills them).
    pub(super) fn take(&self, len: usize) -> PageBuf {
        let found = {
            let mut g = self.free.lock().unwrap_or_else(poisoned);
            let (free, held) = &mut *g;
            // The most recently returned first: its bytes are likeliest still in the cache.
            let i = free.iter().rposition(|b| b.capacity() >= len);
            let b = match i {
                Some(i) => Some(free.swap_remove(i)),
                None => free.pop(),
            };
            if let Some(b) = &b {
                *held -= b.capacity();
            }
            b
        };
        match found {
            Some(mut b) if b.capacity() >= len => {
                b.set_len(len);
                b
            }
            _ => PageBuf::zeroed(len),
        }
    }

    pub(super) fn put(&self, b: PageBuf) {
        let mut g = self.free.lock().unwrap_or_else(poisoned);
        let (free, held) = &mut *g;
        if *held + b.capacity() <= POOL_BYTES {
            *held += b.capacity();
            free.push(b);
        }
    }
}
pub(super) fn plain(errno: u32, cookie: u64, slot: OwnedSemaphorePermit) -> Reply {
    Reply {
        head: p::simple_reply(errno, cookie),
        body: Body::None,
        payload: 0,
        _slot: slot,
        _buffer: None,
        _ahead: None,
    }
}

/// A lock's value whatever a panicking holder left: what the replies and overlays guard stays
/// whole (each change is one assignment).
pub(super) fn poisoned<T>(e: std::sync::PoisonError<T>) -> T {
    e.into_inner()
}

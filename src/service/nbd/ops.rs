//! Requests that need a blocking thread: READs the base cannot answer at once, and writes,
//! zeroes, trims and flushes through the client's copy-on-write overlay.

use super::conn::Exports;
use super::reply::{Body, Reply, plain, poisoned};
use super::source::Source;
use crate::export::cow::CowError;
use crate::metrics::Nbd;
use crate::proto::nbd::{self as p, Verdict};
use crate::service::bounds::LogLimit;
use std::io;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A request that needs a blocking thread (file I/O, or the overlay's lock): its verdict, a
/// READ, WRITE, WRITE_ZEROES, TRIM or FLUSH, and a WRITE's data.
pub(super) struct Op {
    verdict: Verdict,
    /// A WRITE's payload, and its share of the buffer budget (held until written).
    data: Option<(Vec<u8>, OwnedSemaphorePermit)>,
}

impl Op {
    /// A request without a payload.
    pub(super) fn of(verdict: Verdict) -> Op {
        Op {
            verdict,
            data: None,
        }
    }

    /// A WRITE with its payload.
    pub(super) fn write(verdict: Verdict, data: Vec<u8>, buffer: OwnedSemaphorePermit) -> Op {
        Op {
            verdict,
            data: Some((data, buffer)),
        }
    }
}

/// Runs one operation on a blocking thread; an I/O error becomes EIO, a full overlay ENOSPC.
pub(super) async fn run_op(
    source: Arc<Source>,
    buffers: Arc<Semaphore>,
    exports: Arc<Exports>,
    op: Op,
    cookie: u64,
    slot: OwnedSemaphorePermit,
    counts: &Nbd,
) -> Reply {
    if let Verdict::Read { offset, len } = op.verdict {
        let reply = read(source, buffers, exports, offset, len, cookie, slot).await;
        if reply.payload == 0 && len > 0 {
            counts.errors.inc();
        }
        return reply;
    }
    let result = tokio::task::spawn_blocking(move || -> Result<u64, CowError> {
        let Some(overlay) = &source.overlay else {
            return Err(io::Error::other("no overlay").into());
        };
        let base = &*source.image;
        let mut o = overlay.write().unwrap_or_else(poisoned);
        let (fua, written) = match (op.verdict, &op.data) {
            (Verdict::Write { offset, fua, .. }, Some((data, _))) => {
                o.write(base, data, offset)?;
                (fua, data.len() as u64)
            }
            (Verdict::Zeroes { offset, len, fua }, _) => {
                o.write_zeroes(base, offset, len as u64)?;
                (fua, 0)
            }
            (Verdict::Trim { offset, len, fua }, _) => {
                o.trim(offset, len as u64)?;
                (fua, 0)
            }
            (Verdict::Flush, _) => (true, 0),
            // READs are handled above; transmit hands nothing else here.
            _ => return Err(io::Error::other("not an overlay operation").into()),
        };
        if fua {
            o.flush()?;
        }
        Ok(written)
    })
    .await;
    let errno = match result {
        Ok(Ok(written)) => {
            if written > 0 {
                counts.writes.inc();
                counts.written.add(written);
            }
            0
        }
        Ok(Err(CowError::NoSpace)) => {
            counts.no_space.inc();
            p::ENOSPC
        }
        Ok(Err(CowError::TotalFull)) => {
            // Not this client's doing alone: say so, a few lines at a time.
            static FULL: LogLimit = LogLimit::new();
            counts.no_space.inc();
            if let Some(suppressed) = FULL.allow() {
                tracing::warn!(
                    suppressed,
                    "nbd write refused (ENOSPC): the copy-on-write total \
                    of all clients (limits.cow_ram_total / cow_disk_total) is reached"
                );
            }
            p::ENOSPC
        }
        Ok(Err(CowError::Io(e))) => {
            tracing::error!(error = %e, "nbd overlay operation failed");
            p::EIO
        }
        Err(e) => {
            tracing::error!(error = %e, "nbd overlay task failed");
            p::EIO
        }
    };
    if errno != 0 {
        counts.errors.inc();
    }
    plain(errno, cookie, slot)
}

/// Reads one READ's data into a reply buffer; an I/O error becomes EIO.
async fn read(
    source: Arc<Source>,
    buffers: Arc<Semaphore>,
    exports: Arc<Exports>,
    offset: u64,
    len: u32,
    cookie: u64,
    slot: OwnedSemaphorePermit,
) -> Reply {
    // len <= MAX_PAYLOAD < BUFFER_BUDGET, so this always can be granted eventually.
    let Ok(buffer) = buffers.acquire_many_owned(len.max(1)).await else {
        return plain(p::EIO, cookie, slot);
    };
    let result = tokio::task::spawn_blocking(move || {
        let mut bytes = exports.pool.take(len as usize);
        let out = &mut bytes[..len as usize];
        let r = match &source.overlay {
            Some(o) => o
                .read()
                .unwrap_or_else(poisoned)
                .read(&*source.image, out, offset),
            None => source.image.read_at(out, offset),
        };
        match r {
            Ok(()) => Ok(bytes),
            Err(e) => {
                exports.pool.put(bytes);
                Err(e)
            }
        }
    })
    .await;
    match result {
        Ok(Ok(bytes)) => Reply {
            head: p::simple_reply(0, cookie),
            body: Body::Buf(bytes),
            payload: len as u64,
            _slot: slot,
            _buffer: Some(buffer),
            _ahead: None,
        },
        Ok(Err(e)) => {
            tracing::error!(offset, len, error = %e, "nbd image read failed");
            plain(p::EIO, cookie, slot)
        }
        Err(e) => {
            tracing::error!(error = %e, "nbd read task failed");
            plain(p::EIO, cookie, slot)
        }
    }
}

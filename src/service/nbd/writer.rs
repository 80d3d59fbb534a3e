//! A connection's sending side: batched writev of queued replies, READs sent inline by the
//! request reader from the page cache or the image's mapping, and root reads recorded in
//! aggregate.

use super::conn::{DRAIN_TIMEOUT, Exports};
use super::reply::{Body, Reply};
use super::source::Source;
use crate::export::mapping::MappedRange;
use crate::metrics::Metrics;
use crate::proto::nbd as p;
use crate::record::event::Micros;
use crate::record::{Kind, Proto, Recorder, Who};
use crate::trace::format::What;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Replies queued behind one another go out in one writev until this many bytes or replies.
const BATCH_BYTES: usize = 64 << 10;
const BATCH_REPLIES: usize = 64;
/// Root reads are recorded at most once per interval, or sooner once this many bytes pile up.
const RECORD_INTERVAL: Duration = Duration::from_secs(1);
const RECORD_BYTES: u64 = 16 << 20;

/// Writes every reply of `batch` (header, then data) with as few `writev` calls as it takes.
async fn write_all_vectored(wr: &mut OwnedWriteHalf, batch: &[Reply]) -> io::Result<()> {
    let mut slices: Vec<io::IoSlice> = Vec::with_capacity(batch.len() * 2);
    for r in batch {
        slices.push(io::IoSlice::new(&r.head));
        let data = r.data();
        if !data.is_empty() {
            slices.push(io::IoSlice::new(data));
        }
    }
    write_slices(wr, &mut slices).await
}

async fn write_slices(wr: &mut OwnedWriteHalf, slices: &mut [io::IoSlice<'_>]) -> io::Result<()> {
    let mut rest = slices;
    while !rest.is_empty() {
        let n = wr.write_vectored(rest).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        io::IoSlice::advance_slices(&mut rest, n);
    }
    Ok(())
}

/// A connection's sending side, shared by its writer task and by its request reader, which
/// sends a cached READ itself when nobody else is writing: the buffer it just filled is then
/// still in its CPU's cache for the socket copy (handing it to the writer task, often on the
/// other CPU, made that copy 2.5x dearer per byte than nbdkit's, which reads and sends in
/// one thread).
pub(super) struct Out {
    pub(super) wr: tokio::sync::Mutex<OwnedWriteHalf>,
    pub(super) exports: Arc<Exports>,
    pub(super) recorder: Recorder,
    pub(super) who: Option<Who>,
    /// This connection's payload bytes, for its summary line.
    pub(super) sent: AtomicU64,
    /// Bytes sent but not yet recorded as root reads.
    pub(super) pending: AtomicU64,
    pub(super) metrics: Metrics,
    pub(super) write_timeout: Duration,
    /// For a client that keeps a boot trace: each request not yet answered, by cookie, with
    /// when it was received.
    pub(super) traced: Option<std::sync::Mutex<std::collections::HashMap<u64, (Micros, What)>>>,
}

impl Out {
    /// Traces the request `cookie`, now that its reply is written.
    fn answered(&self, cookie: u64) {
        let (Some(traced), Some(Who::Ip(ip))) = (&self.traced, self.who) else {
            return;
        };
        let op = traced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&cookie);
        if let Some((received, what)) = op {
            self.recorder.tracer().op(ip, received, what);
        }
    }

    /// Writes `batch` within the write timeout, then counts it and returns its buffers.
    pub(super) async fn send(
        &self,
        wr: &mut OwnedWriteHalf,
        batch: &mut Vec<Reply>,
    ) -> io::Result<()> {
        let written = write_all_vectored(wr, batch);
        match tokio::time::timeout(self.write_timeout, written).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
        }
        let (mut reads, mut payload) = (0, 0);
        for reply in batch.drain(..) {
            if self.traced.is_some() {
                let cookie = u64::from_be_bytes(reply.head[8..16].try_into().expect("8 bytes"));
                self.answered(cookie);
            }
            if reply.payload > 0 {
                reads += 1;
                payload += reply.payload;
            }
            if let Body::Buf(b) = reply.body {
                self.exports.pool.put(b);
            }
        }
        self.count(reads, payload);
        Ok(())
    }

    /// Counts `reads` READ replies carrying `payload` bytes in all, once sent.
    fn count(&self, reads: u64, payload: u64) {
        if payload == 0 {
            return;
        }
        let counts = self.metrics.nbd();
        counts.reads.add(reads);
        counts.bytes.add(payload);
        self.sent.fetch_add(payload, Relaxed);
        if self.pending.fetch_add(payload, Relaxed) + payload >= RECORD_BYTES {
            self.record();
        }
    }

    /// Records the bytes sent since the last call as one root read.
    fn record(&self) {
        let bytes = self.pending.swap(0, Relaxed);
        if let Some(who) = self.who
            && bytes > 0
        {
            self.recorder.record(
                who,
                Kind::RootRead {
                    proto: Proto::Nbd,
                    bytes,
                },
            );
        }
    }
}
/// How a READ sent from the reader task ended.
pub(super) enum Inline {
    Sent,
    /// Not all in the page cache; nothing was sent.
    NotCached,
    /// The read failed; nothing was sent.
    Failed(io::Error),
    /// The client stopped taking data.
    Broken,
}

/// Sends one READ of `len` bytes at `offset` from the page cache, copied into a pooled
/// buffer and written at once after its header in one `writev`.
pub(super) async fn send_cached(
    out: &Out,
    wr: &mut OwnedWriteHalf,
    source: &Source,
    offset: u64,
    len: u32,
    cookie: u64,
) -> Inline {
    let len = len as usize;
    let head = p::simple_reply(0, cookie);
    if let Some(data) = source.image.cached_range(offset, len) {
        // From the mapping: the kernel copies page cache to socket once, no buffer of ours.
        let written = tokio::time::timeout(out.write_timeout, write_mapped(wr, &head, data)).await;
        if !matches!(written, Ok(Ok(()))) {
            return Inline::Broken;
        }
        out.count(1, len as u64);
        out.answered(cookie);
        return Inline::Sent;
    }
    let mut buf = out.exports.pool.take(len);
    match source.image.read_now(&mut buf[..len], offset) {
        Some(Ok(())) => {}
        None => {
            out.exports.pool.put(buf);
            return Inline::NotCached;
        }
        Some(Err(e)) => {
            out.exports.pool.put(buf);
            return Inline::Failed(e);
        }
    }
    let mut slices = [io::IoSlice::new(&head), io::IoSlice::new(&buf[..len])];
    let written = tokio::time::timeout(out.write_timeout, write_slices(wr, &mut slices)).await;
    out.exports.pool.put(buf);
    if !matches!(written, Ok(Ok(()))) {
        return Inline::Broken;
    }
    out.count(1, len as u64);
    out.answered(cookie);
    Inline::Sent
}

/// Writes `head`, then `data` from the image's mapping. The mapped bytes go to the kernel as
/// an iovec and are never read here (see `export::mapping`): a file truncated under us fails
/// the write with EFAULT.
async fn write_mapped(
    wr: &mut OwnedWriteHalf,
    head: &[u8],
    data: MappedRange<'_>,
) -> io::Result<()> {
    let stream: &TcpStream = wr.as_ref();
    let fd = std::os::fd::AsFd::as_fd(stream);
    let total = head.len() + data.len();
    let mut done = 0;
    while done < total {
        let n = stream
            .async_io(Interest::WRITABLE, || data.writev(fd, head, &[], done))
            .await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        done += n;
    }
    Ok(())
}

/// Sends replies as they complete, and records root reads in aggregate.
pub(super) async fn write_replies(
    out: Arc<Out>,
    mut rx: mpsc::Receiver<Reply>,
    broken: CancellationToken,
) {
    let mut tick = tokio::time::interval(RECORD_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut batch = Vec::new();
    loop {
        tokio::select! {
            reply = rx.recv() => {
                let Some(reply) = reply else { break };
                // Replies already queued go out in the same writev, small ones many at a
                // time: one syscall for a burst of 4 KiB reads instead of one each.
                let mut bytes = reply.head.len() + reply.payload as usize;
                batch.push(reply);
                while bytes < BATCH_BYTES && batch.len() < BATCH_REPLIES {
                    let Ok(next) = rx.try_recv() else { break };
                    bytes += next.head.len() + next.payload as usize;
                    batch.push(next);
                }
                let mut wr = out.wr.lock().await;
                if out.send(&mut wr, &mut batch).await.is_err() {
                    broken.cancel();
                    break;
                }
            }
            _ = tick.tick() => out.record(),
        }
    }
    out.record();
    // A restart may hand the connection over (`service::handover`): its sending side stays
    // open (one not handed over is closed when dropped).
    if !out.exports.handover.armed() {
        let mut wr = out.wr.lock().await;
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, wr.shutdown()).await;
    }
}

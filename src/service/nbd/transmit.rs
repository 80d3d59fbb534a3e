//! The transmission phase: one connection's request loop, which path each READ takes, and
//! the requests handed to a blocking thread.

use super::conn::{Attached, Conn, DRAIN_TIMEOUT};
use super::ops::{Op, run_op};
use super::reply::{Body, Reply, plain};
use super::source::Source;
use super::writer::{Inline, Out, send_cached, write_replies};
use crate::proto::nbd::{self as p, Request, Verdict};
use crate::record::Who;
use crate::record::event::now_micros;
use crate::trace::format::What;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Bytes of cached READ data a connection copies ahead of what its writer has sent. Past
/// this its reader waits, so each buffer goes out while its bytes are still in the CPU's
/// cache, and the client's own copy reads warm data (fio's 1 MiB reads: 2.2 -> 2.5 GB/s
/// against 32 MiB ahead; BENCHMARKS.md).
const READ_AHEAD: u32 = 2 << 20;
/// A cached READ at least this big is sent by the connection's reader when the writer is
/// idle (see `Out`); smaller ones go through the writer task, which sends a burst of them in
/// one writev (sent one by one, 4 KiB random reads were ~7% slower in one run).
const INLINE_MIN: u32 = 64 << 10;
/// Bytes of requests read ahead per connection.
const REQUEST_BUFFER: usize = 4 << 10;

/// A connection ended by a restart that hands it over (`service::handover`): its socket and
/// the request bytes read from it but not taken, in order.
pub(super) struct Quiet {
    pub(super) stream: TcpStream,
    pub(super) pending: Vec<u8>,
}

impl Conn {
    /// The transmission phase, `pending` the request bytes a previous program read and did
    /// not take (`service::handover`). Returns (requests, bytes sent, how it ended), and the
    /// connection itself when the daemon stopped to hand it over between two requests.
    ///
    /// Longer than the house's ~150 lines on purpose: it is the one loop every NBD request passes
    /// through, read as a pipeline from top to bottom (a request slot, the request, its
    /// verdict, the inline or blocking or overlay path, then the drain); its parts share the
    /// reader, the writer task, the slots and the cancellation, and split apart they would
    /// pass those seven handles back and forth on the hottest path the root has.
    pub(super) async fn transmit(
        &self,
        stream: TcpStream,
        attached: Attached,
        pending: Vec<u8>,
    ) -> (u64, u64, TransmitEnd, Option<Quiet>) {
        let ahead = Arc::new(Semaphore::new(READ_AHEAD as usize));
        let (rd, wr) = stream.into_split();
        // Requests are 28 bytes: read them from a buffer, many per syscall when pipelined.
        let rd = std::io::Cursor::new(pending).chain(rd);
        let mut rd = tokio::io::BufReader::with_capacity(REQUEST_BUFFER, rd);
        // A request header read in part when the daemon stopped (handed over with the rest).
        let mut h = [0; p::REQUEST_LEN];
        let mut got = 0;
        // Whether the connection stands between two requests (nothing of one half read).
        let mut between = true;
        let (tx, rx) = mpsc::channel::<Reply>(self.limits.max_in_flight);
        let slots = Arc::new(Semaphore::new(self.limits.max_in_flight));
        // The writer cancels this when the client stops taking replies.
        let broken = CancellationToken::new();
        let out = Arc::new(Out {
            wr: tokio::sync::Mutex::new(wr),
            exports: self.exports.clone(),
            recorder: self.recorder.clone(),
            who: self.who(),
            sent: AtomicU64::new(0),
            pending: AtomicU64::new(0),
            metrics: self.metrics.clone(),
            write_timeout: self.limits.write_timeout,
            traced: self
                .who()
                .filter(|w| matches!(w, Who::Ip(ip) if self.recorder.tracer().wants(*ip)))
                .map(|_| Default::default()),
        });
        let mut writer = tokio::spawn(write_replies(out.clone(), rx, broken.clone()));
        let source = Arc::new(Source {
            image: attached.image,
            overlay: attached.cow.as_ref().map(|l| l.overlay.clone()),
        });
        let writable = source.overlay.is_some();
        let reader = Reader {
            conn: self,
            source: &source,
            out: &out,
            ahead: &ahead,
            broken: &broken,
        };
        let size = source.image.size();
        let mut tasks = JoinSet::new();
        let mut requests = 0u64;
        let end = 'requests: loop {
            let slot = tokio::select! {
                s = slots.clone().acquire_owned() => s.expect("never closed"),
                _ = self.shutdown.wait() => break TransmitEnd::Shutdown,
                _ = broken.cancelled() => break TransmitEnd::WriteFailed,
            };
            // `read` gives up nothing when shutdown wins (`read_exact` may have taken part
            // of a header): what arrived of the header stays in `h[..got]`.
            got = 0;
            let r = loop {
                let r = tokio::select! {
                    r = rd.read(&mut h[got..]) => r,
                    _ = self.shutdown.wait() => break 'requests TransmitEnd::Shutdown,
                    _ = broken.cancelled() => break 'requests TransmitEnd::WriteFailed,
                    _ = self.activity.evict.cancelled() => break 'requests TransmitEnd::Evicted,
                };
                match r {
                    Ok(0) => break Err(io::ErrorKind::UnexpectedEof.into()),
                    Ok(n) if got + n == p::REQUEST_LEN => break Ok(()),
                    Ok(n) => got += n,
                    Err(e) => break Err(e),
                }
            };
            got = 0;
            self.activity.touch();
            if let Err(e) = r {
                break match e.kind() {
                    io::ErrorKind::UnexpectedEof => TransmitEnd::Closed,
                    io::ErrorKind::ConnectionReset => TransmitEnd::Reset,
                    // Keepalive probes or sent data went unanswered: powered off, or cut off.
                    _ if crate::service::bounds::is_lost(&e) => TransmitEnd::Lost,
                    _ => TransmitEnd::ReadFailed,
                };
            }
            let req = match Request::decode(&h) {
                Ok(r) => r,
                Err(e) => {
                    // Out of step with the client: nothing after this can be trusted.
                    self.metrics.nbd().malformed.inc();
                    tracing::warn!(peer = %self.peer, error = %e, "nbd bad request");
                    break TransmitEnd::BadRequest;
                }
            };
            requests += 1;
            self.metrics.nbd().requests.inc();
            let cookie = req.cookie;
            if let Some(traced) = &out.traced {
                let what = What::Nbd {
                    cmd: cmd_name(req.kind).into(),
                    offset: req.offset,
                    len: req.len.into(),
                    export: None,
                };
                let mut pending = traced.lock().unwrap_or_else(|e| e.into_inner());
                pending.insert(cookie, (now_micros(), what));
            }
            let verdict = req.verdict(size, writable);
            let (op, slot) = match verdict {
                Verdict::Read { offset, len } => {
                    // Data only the base holds, in memory or the page cache, is sent from
                    // here: a hop to a blocking thread costs more than the copy.
                    let path = read_path(&source, offset, len);
                    match reader.answer(path, offset, len, cookie, slot).await {
                        Answered::Queue(reply) => {
                            if tx.send(reply).await.is_err() {
                                break TransmitEnd::WriteFailed;
                            }
                            continue;
                        }
                        Answered::Sent => continue,
                        Answered::End(why) => {
                            // This READ may be unanswered, or half sent.
                            between = false;
                            break why;
                        }
                        Answered::Blocking(slot) => (Op::of(verdict), slot),
                    }
                }
                Verdict::Write { len, .. } => {
                    let Ok(buffer) = self.buffers.clone().acquire_many_owned(len.max(1)).await
                    else {
                        between = false;
                        break TransmitEnd::Shutdown;
                    };
                    let mut data = vec![0; len as usize];
                    let r = tokio::select! {
                        r = rd.read_exact(&mut data) => r,
                        _ = self.shutdown.wait() => {
                            between = false;
                            break TransmitEnd::Shutdown;
                        }
                    };
                    if r.is_err() {
                        break TransmitEnd::Closed;
                    }
                    (Op::write(verdict, data, buffer), slot)
                }
                Verdict::Zeroes { .. } | Verdict::Trim { .. } | Verdict::Flush => {
                    (Op::of(verdict), slot)
                }
                Verdict::Ok => {
                    if tx.send(plain(0, cookie, slot)).await.is_err() {
                        break TransmitEnd::WriteFailed;
                    }
                    continue;
                }
                Verdict::Error { errno, drain } => {
                    let mut payload = (&mut rd).take(drain as u64);
                    let mut sink = tokio::io::sink();
                    let drained = tokio::select! {
                        r = tokio::io::copy(&mut payload, &mut sink) => r,
                        _ = self.shutdown.wait() => {
                            between = false;
                            break TransmitEnd::Shutdown;
                        }
                    };
                    if !matches!(drained, Ok(n) if n == drain as u64) {
                        break TransmitEnd::Closed;
                    }
                    self.metrics.nbd().errors.inc();
                    tracing::debug!(peer = %self.peer, kind = req.kind, errno, "nbd request refused");
                    if tx.send(plain(errno, cookie, slot)).await.is_err() {
                        break TransmitEnd::WriteFailed;
                    }
                    continue;
                }
                Verdict::Disconnect if req.kind == p::CMD_DISC => break TransmitEnd::Disconnect,
                Verdict::Disconnect => {
                    self.metrics.nbd().malformed.inc();
                    tracing::warn!(peer = %self.peer, kind = req.kind, len = req.len, "nbd absurd request");
                    break TransmitEnd::BadRequest;
                }
            };
            let (source, tx, buffers) = (source.clone(), tx.clone(), self.buffers.clone());
            let (metrics, exports) = (self.metrics.clone(), self.exports.clone());
            tasks.spawn(async move {
                let reply = run_op(source, buffers, exports, op, cookie, slot, metrics.nbd()).await;
                let _ = tx.send(reply).await;
            });
            // Forget finished tasks so the set stays small.
            while tasks.try_join_next().is_some() {}
        };
        // The document asks for outstanding requests to be answered before closing.
        drop(tx);
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        let answered = drained.is_ok();
        if !answered {
            tasks.abort_all();
        }
        if tokio::time::timeout(DRAIN_TIMEOUT, &mut writer)
            .await
            .is_err()
        {
            writer.abort();
        }
        // The lease (attached.cow) is dropped here, after the last operation on it.
        let writable = attached.cow.is_some();
        drop(attached.cow);
        let sent = out.sent.load(Relaxed);
        // Handed over: a read-only connection stopped between requests, every reply sent.
        let handing = end == TransmitEnd::Shutdown
            && between
            && answered
            && !writable
            && self.exports.handover.armed()
            && writer.is_finished();
        let quiet = if handing {
            Arc::try_unwrap(out).ok().and_then(|out| {
                let mut pending = h[..got].to_vec();
                pending.extend_from_slice(rd.buffer());
                let (cursor, rd) = rd.into_inner().into_inner();
                let at = usize::try_from(cursor.position()).unwrap_or(usize::MAX);
                pending.extend_from_slice(cursor.get_ref().get(at..).unwrap_or_default());
                let stream = rd.reunite(out.wr.into_inner()).ok()?;
                Some(Quiet { stream, pending })
            })
        } else {
            None
        };
        (requests, sent, end, quiet)
    }
}

/// A request's name in a boot trace.
pub(super) fn cmd_name(kind: u16) -> &'static str {
    match kind {
        p::CMD_READ => "read",
        p::CMD_WRITE => "write",
        p::CMD_DISC => "disc",
        p::CMD_FLUSH => "flush",
        p::CMD_TRIM => "trim",
        p::CMD_CACHE => "cache",
        p::CMD_WRITE_ZEROES => "write_zeroes",
        _ => "other",
    }
}

/// Which way a READ's data goes out.
pub(super) enum ReadPath<'a> {
    /// From a `store: ram` image's own bytes, queued for the writer (no copy of ours).
    Ram(&'a Arc<Vec<u8>>),
    /// Sent by the request reader itself from the page cache when the writer is idle (see
    /// `Out`); else, or when the page cache lacks it, as `Cached`.
    Inline,
    /// Copied from the page cache into a pooled buffer and queued for the writer; when the
    /// page cache lacks it, as `Blocking`.
    Cached,
    /// Read on a blocking thread: the client's overlay holds part of it (or a write holds
    /// the overlay), or the page cache lacks it.
    Blocking,
}

/// The path a READ of `len` bytes at `offset` takes first.
pub(super) fn read_path(source: &Source, offset: u64, len: u32) -> ReadPath<'_> {
    if !source.base_only(offset, len) {
        ReadPath::Blocking
    } else if let Some(ram) = source.image.ram() {
        ReadPath::Ram(ram)
    } else if len >= INLINE_MIN {
        ReadPath::Inline
    } else {
        ReadPath::Cached
    }
}

/// How a READ the request reader tried to answer itself went.
enum Answered {
    /// A reply for the writer task.
    Queue(Reply),
    /// Sent already, the data or its error.
    Sent,
    /// Not answered: the request's slot back, for a blocking thread.
    Blocking(OwnedSemaphorePermit),
    /// The connection ends, for this reason.
    End(TransmitEnd),
}

/// How an attached connection ended: the log line says it, and the record learns from it
/// whether the client went (`Detach`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TransmitEnd {
    /// NBD_CMD_DISC: the client let go of its root.
    Disconnect,
    /// The client closed the connection without a DISC.
    Closed,
    Reset,
    /// The client acknowledged nothing for `limits.root_lost_after`.
    Lost,
    ReadFailed,
    WriteFailed,
    /// A request no client sends.
    BadRequest,
    /// Idle while every slot was wanted: its slot went to a new connection.
    Evicted,
    Shutdown,
}

impl std::fmt::Display for TransmitEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TransmitEnd::Disconnect => "disconnect",
            TransmitEnd::Closed => "client closed",
            TransmitEnd::Reset => "client reset",
            TransmitEnd::Lost => "client lost",
            TransmitEnd::ReadFailed => "read failed",
            TransmitEnd::WriteFailed => "write failed",
            TransmitEnd::BadRequest => "bad request",
            TransmitEnd::Evicted => "idle; its slot went to a new connection",
            TransmitEnd::Shutdown => "shutdown",
        })
    }
}

/// What a connection's request reader needs to answer a READ itself.
struct Reader<'a> {
    conn: &'a Conn,
    source: &'a Source,
    out: &'a Out,
    /// The bytes of cached READ data copied ahead of what the writer has sent (`READ_AHEAD`).
    ahead: &'a Arc<Semaphore>,
    broken: &'a CancellationToken,
}

impl Reader<'_> {
    /// Answers a READ by `path`, falling back along the paths as the page cache requires.
    async fn answer(
        &self,
        path: ReadPath<'_>,
        offset: u64,
        len: u32,
        cookie: u64,
        slot: OwnedSemaphorePermit,
    ) -> Answered {
        let slot = match path {
            ReadPath::Blocking => return Answered::Blocking(slot),
            ReadPath::Ram(ram) => {
                // Sent from the image's own bytes, no copy of ours.
                return Answered::Queue(Reply {
                    head: p::simple_reply(0, cookie),
                    body: Body::Ram(ram.clone(), offset as usize),
                    payload: len as u64,
                    _slot: slot,
                    _buffer: None,
                    _ahead: None,
                });
            }
            ReadPath::Inline => match self.inline(offset, len, cookie, slot).await {
                Ok(answered) => return answered,
                Err(slot) => slot,
            },
            ReadPath::Cached => slot,
        };
        self.cached(offset, len, cookie, slot).await
    }

    /// Reads and sends here when the writer is idle (see `Out`); Err(slot) when it is busy,
    /// the buffer budget is spent, or the page cache lacks the data.
    async fn inline(
        &self,
        offset: u64,
        len: u32,
        cookie: u64,
        slot: OwnedSemaphorePermit,
    ) -> Result<Answered, OwnedSemaphorePermit> {
        let Ok(mut wr) = self.out.wr.try_lock() else {
            return Err(slot);
        };
        let Ok(_budget) = self.conn.buffers.try_acquire_many(len) else {
            return Err(slot);
        };
        let sent = tokio::select! {
            r = send_cached(self.out, &mut wr, self.source, offset, len, cookie) => r,
            _ = self.conn.shutdown.wait() => return Ok(Answered::End(TransmitEnd::Shutdown)),
        };
        match sent {
            Inline::Sent => Ok(Answered::Sent),
            Inline::Failed(e) => {
                tracing::error!(offset, len, error = %e, "nbd image read failed");
                self.conn.metrics.nbd().errors.inc();
                let mut one = vec![plain(p::EIO, cookie, slot)];
                if self.out.send(&mut wr, &mut one).await.is_err() {
                    self.broken.cancel();
                    return Ok(Answered::End(TransmitEnd::WriteFailed));
                }
                Ok(Answered::Sent)
            }
            Inline::Broken => {
                self.broken.cancel();
                Ok(Answered::End(TransmitEnd::WriteFailed))
            }
            // Not in the page cache: a blocking thread reads it.
            Inline::NotCached => Err(slot),
        }
    }

    /// Copies the data from the page cache into a pooled buffer for the writer, at most
    /// `READ_AHEAD` ahead of what it has sent.
    async fn cached(
        &self,
        offset: u64,
        len: u32,
        cookie: u64,
        slot: OwnedSemaphorePermit,
    ) -> Answered {
        let ahead = tokio::select! {
            p = self.ahead.clone().acquire_many_owned(len.clamp(1, READ_AHEAD)) => {
                p.expect("never closed")
            }
            _ = self.conn.shutdown.wait() => return Answered::End(TransmitEnd::Shutdown),
            _ = self.broken.cancelled() => return Answered::End(TransmitEnd::WriteFailed),
        };
        let Ok(buffer) = self.conn.buffers.clone().try_acquire_many_owned(len.max(1)) else {
            return Answered::Blocking(slot);
        };
        let pool = &self.conn.exports.pool;
        let mut bytes = pool.take(len as usize);
        match self
            .source
            .image
            .read_now(&mut bytes[..len as usize], offset)
        {
            Some(Ok(())) => Answered::Queue(Reply {
                head: p::simple_reply(0, cookie),
                body: Body::Buf(bytes),
                payload: len as u64,
                _slot: slot,
                _buffer: Some(buffer),
                _ahead: Some(ahead),
            }),
            Some(Err(e)) => {
                pool.put(bytes);
                tracing::error!(offset, len, error = %e, "nbd image read failed");
                self.conn.metrics.nbd().errors.inc();
                Answered::Queue(plain(p::EIO, cookie, slot))
            }
            // Not all in the page cache: read on a blocking thread.
            None => {
                pool.put(bytes);
                Answered::Blocking(slot)
            }
        }
    }
}

//! The data exchange of TFTP transfers, once `tftp` has accepted a request: blocks out, ACKs
//! in, retransmission on silence, until the last block is acknowledged.
//!
//! A thread per CPU runs many transfers from one epoll set, as dnsmasq does in one process.
//! A lock-step transfer waits for one ACK per block; with a thread per transfer, every ACK
//! woke that transfer's thread, and when a room fetched at once the switching between twenty
//! threads took CPU the clients needed. A loop thread instead finds several ACKs per wake-up.
//! One loop for all CPUs was too few: it got one CPU share among twenty runnable clients. A
//! loop with a quick client polls before it sleeps (`quick_read`), as the thread did, so a
//! single transfer loses nothing.
//!
//! Files are read in the loop (read-ahead in large chunks): boot files sit in the page cache
//! after the first client, and dnsmasq and tftpd-hpa read the same way.

use crate::proto::tftp::{self as wire, Next, Packet, Sender, err};
use crate::record::Outcome;
use crate::service::quick_read::QuickWait;
use crate::shutdown::Shutdown;
use crate::sys::epoll::{Epoll, Events, Wake};
use std::io::IoSlice;
use std::net::{SocketAddr, UdpSocket};
use std::ops::RangeInclusive;
use std::os::fd::AsFd as _;
use std::os::unix::fs::FileExt as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// Retransmissions of the same window before giving up.
const MAX_RETRIES: u32 = 5;
/// How often an idle loop looks at the shutdown flag.
const SHUTDOWN_POLL: Duration = Duration::from_millis(250);
/// How much a file source reads at once.
const READ_AHEAD: usize = 256 * 1024;
/// The loop's own token for its wake-up eventfd; transfers use their slot index.
const WAKE_TOKEN: u64 = u64::MAX;

/// Whoever accepted the transfer: told about bad packets as they come, and about the end.
pub trait Owner: Send {
    /// A packet from the client that is no part of the exchange.
    fn malformed(&self);
    /// The transfer is over; `acked` bytes reached the client.
    fn ended(self: Box<Self>, outcome: Outcome, acked: u64);
}

/// Where the bytes come from.
pub enum Source {
    /// Read ahead in large chunks with `pread`: a transfer walks the file in order.
    File {
        file: std::fs::File,
        chunk: Vec<u8>,
        /// Where in the file `chunk` starts, and how much of it was read.
        chunk_start: u64,
        filled: usize,
    },
    Memory(Vec<u8>),
    /// A file sent as netascii, converted as it goes: the converted bytes from a little before
    /// the window in flight on, never the whole file.
    Netascii {
        file: std::fs::File,
        /// Converted bytes, the first at `out_start` of the netascii stream.
        out: Vec<u8>,
        out_start: u64,
        /// Where in the file the bytes after `out` start.
        read_to: u64,
    },
}

impl Source {
    pub fn file(file: std::fs::File) -> Source {
        Source::File {
            file,
            chunk: Vec::new(),
            chunk_start: 0,
            filled: 0,
        }
    }

    /// `file` as netascii, and that netascii's length (one pass over the file, `READ_AHEAD`
    /// at a time).
    pub fn netascii(file: std::fs::File) -> std::io::Result<(Source, u64)> {
        let mut buf = vec![0u8; READ_AHEAD];
        let (mut at, mut len) = (0u64, 0u64);
        loop {
            match file.read_at(&mut buf, at)? {
                0 => break,
                n => {
                    len += wire::netascii_len(&buf[..n]);
                    at += n as u64;
                }
            }
        }
        let source = Source::Netascii {
            file,
            out: Vec::new(),
            out_start: 0,
            read_to: 0,
        };
        Ok((source, len))
    }

    /// The `len` bytes from `start`.
    fn block(&mut self, start: u64, len: usize) -> std::io::Result<&[u8]> {
        match self {
            Source::File {
                file,
                chunk,
                chunk_start,
                filled,
            } => {
                let end = start + len as u64;
                let held = *chunk_start..=*chunk_start + *filled as u64;
                if !(held.contains(&start) && held.contains(&end)) {
                    // Sized once and refilled in place: zeroing it again for every refill
                    // would cost more than the copy saved by sending from it.
                    if chunk.len() < READ_AHEAD.max(len) {
                        chunk.resize(READ_AHEAD.max(len), 0);
                    }
                    *filled = 0;
                    *chunk_start = start;
                    while *filled < chunk.len() {
                        match file.read_at(&mut chunk[*filled..], start + *filled as u64)? {
                            0 => break,
                            n => *filled += n,
                        }
                    }
                    if *filled < len {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                }
                let at = (start - *chunk_start) as usize;
                Ok(&chunk[at..at + len])
            }
            Source::Netascii {
                file,
                out,
                out_start,
                read_to,
            } => {
                if start < *out_start {
                    // A retransmission from further back than was kept: convert from the top.
                    out.clear();
                    (*out_start, *read_to) = (0, 0);
                }
                // Keep `READ_AHEAD` before `start` for retransmissions; let go of the rest.
                let keep_from = start.saturating_sub(READ_AHEAD as u64).max(*out_start);
                out.drain(..(keep_from - *out_start) as usize);
                *out_start = keep_from;
                let end = start + len as u64;
                let mut raw = Vec::new();
                while *out_start + (out.len() as u64) < end {
                    raw.resize(READ_AHEAD, 0);
                    let n = file.read_at(&mut raw, *read_to)?;
                    if n == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    wire::extend_netascii(out, &raw[..n]);
                    *read_to += n as u64;
                }
                let at = (start - *out_start) as usize;
                Ok(&out[at..at + len])
            }
            Source::Memory(m) => {
                let s = usize::try_from(start).unwrap_or(usize::MAX);
                Ok(m.get(s..s.saturating_add(len))
                    .ok_or(std::io::ErrorKind::UnexpectedEof)?)
            }
        }
    }
}

/// One transfer's exchange.
pub struct Transfer {
    sock: UdpSocket,
    peer: SocketAddr,
    source: Source,
    tx: Sender,
    /// The OACK, until the client acknowledges it with ACK 0.
    oack: Option<Vec<u8>>,
    rto: Duration,
    retries: u32,
    /// When the window in flight is sent again. Set only when something is sent: stray or
    /// duplicate packets do not extend it.
    deadline: Instant,
    /// The transfer ends here however it is going (`limits.tftp_lifetime`).
    expires: Instant,
    owner: Box<dyn Owner>,
}

impl Transfer {
    /// `sock` is the transfer's own socket (its TID); `oack` the negotiated options, empty
    /// when the client asked for none; `rto` the retransmission interval; `lifetime` how long
    /// the transfer may last in all.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        sock: UdpSocket,
        peer: SocketAddr,
        source: Source,
        tx: Sender,
        oack: &[(String, String)],
        rto: Duration,
        lifetime: Duration,
        owner: Box<dyn Owner>,
    ) -> Transfer {
        let now = Instant::now();
        Transfer {
            sock,
            peer,
            source,
            tx,
            oack: (!oack.is_empty()).then(|| wire::encode_oack(oack)),
            rto,
            retries: 0,
            deadline: now,
            expires: now + lifetime,
            owner,
        }
    }

    fn end(self, outcome: Outcome) {
        let acked = match outcome {
            Outcome::Complete => self.tx.size(),
            _ => self.tx.acked_bytes(),
        };
        self.owner.ended(outcome, acked);
    }

    /// Sends the OACK or the window now due.
    fn send(&mut self, window: RangeInclusive<u64>, now: Instant) -> Result<(), Outcome> {
        let sent = match &self.oack {
            Some(oack) => self.sock.send_to(oack, self.peer).map(|_| ()),
            None => self.send_blocks(window),
        };
        if let Err(e) = sent {
            tracing::debug!(peer = %self.peer, error = %e, "tftp send failed");
            return Err(Outcome::Aborted);
        }
        self.deadline = (now + self.rto).min(self.expires);
        Ok(())
    }

    /// Sends the blocks of one window, each straight from the read-ahead chunk behind its
    /// header (sendmsg with two pieces; no copy into a packet buffer).
    fn send_blocks(&mut self, blocks: RangeInclusive<u64>) -> std::io::Result<()> {
        let sock = socket2::SockRef::from(&self.sock);
        let to = socket2::SockAddr::from(self.peer);
        for n in blocks {
            let (start, len) = self.tx.span(n);
            let header = wire::data_header(Sender::wire(n));
            let data = self.source.block(start, len)?;
            match sock.send_to_vectored(&[IoSlice::new(&header), IoSlice::new(data)], &to) {
                Ok(_) => {}
                // The socket's send buffer is full: as good as lost on the way, and the
                // retransmission timer resends it.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads one packet (the socket is ready) and answers it.
    fn on_readable(&mut self, buf: &mut [u8], now: Instant) -> Result<(), Outcome> {
        let (n, from) = match self.sock.recv_from(buf) {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            // ICMP port unreachable and the like: the client is gone.
            Err(e) => {
                tracing::debug!(peer = %self.peer, error = %e, "tftp receive failed");
                return Err(Outcome::Aborted);
            }
        };
        if from != self.peer {
            let _ = self.sock.send_to(
                &wire::encode_error(err::UNKNOWN_TID, "unknown transfer id"),
                from,
            );
            return Ok(());
        }
        match wire::decode(&buf[..n]) {
            Ok(Packet::Ack(0)) if self.oack.is_some() => {
                self.oack = None;
                self.retries = 0;
                self.send(self.tx.window(), now)
            }
            Ok(Packet::Ack(n)) if self.oack.is_none() => match self.tx.on_ack(n) {
                Next::Done => Err(Outcome::Complete),
                Next::Send(window) => {
                    self.retries = 0;
                    self.send(window, now)
                }
                Next::Wait => Ok(()),
            },
            Ok(Packet::Error { code, message }) => {
                tracing::debug!(peer = %self.peer, code, %message, "tftp client ended the transfer");
                Err(Outcome::Aborted)
            }
            _ => {
                self.owner.malformed();
                Ok(())
            }
        }
    }

    /// Sends the window in flight again if its time is up, or gives up.
    fn on_timer(&mut self, now: Instant) -> Result<(), Outcome> {
        if now >= self.expires {
            tracing::info!(peer = %self.peer, "tftp transfer past limits.tftp_lifetime; ended");
            return Err(Outcome::TimedOut);
        }
        if now < self.deadline {
            return Ok(());
        }
        self.retries += 1;
        if self.retries > MAX_RETRIES {
            return Err(Outcome::TimedOut);
        }
        self.send(self.tx.window(), now)
    }
}

/// The loop threads. Transfers go to the loop running the fewest.
pub struct Transfers {
    loops: Vec<Handle>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

struct Handle {
    queue: mpsc::Sender<Transfer>,
    wake: Arc<Wake>,
    running: Arc<AtomicUsize>,
}

impl Transfers {
    /// Starts the loops; they abort their transfers and end when `shutdown` is triggered.
    pub fn start(shutdown: &Shutdown) -> std::io::Result<Transfers> {
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let mut loops = Vec::new();
        let mut threads = Vec::new();
        for i in 0..n {
            let (queue, incoming) = mpsc::channel();
            let wake = Arc::new(Wake::new()?);
            let running = Arc::new(AtomicUsize::new(0));
            let epoll = Epoll::new()?;
            epoll.add(wake.as_fd(), WAKE_TOKEN)?;
            let mut l = Loop {
                epoll,
                wake: wake.clone(),
                incoming,
                running: running.clone(),
                slots: Vec::new(),
                free: Vec::new(),
                next_timer: None,
            };
            let stop = shutdown.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("tftp-{i}"))
                    .spawn(move || l.run(&stop))?,
            );
            loops.push(Handle {
                queue,
                wake,
                running,
            });
        }
        Ok(Transfers {
            loops,
            threads: Mutex::new(threads),
        })
    }

    /// Hands `t` to a loop, which sends its first packet.
    pub fn add(&self, t: Transfer) {
        let Some(h) = self
            .loops
            .iter()
            .min_by_key(|h| h.running.load(Ordering::Relaxed))
        else {
            return t.end(Outcome::Aborted);
        };
        h.running.fetch_add(1, Ordering::Relaxed);
        match h.queue.send(t) {
            Ok(()) => h.wake.wake(),
            // The loop has stopped: the daemon is shutting down.
            Err(mpsc::SendError(t)) => t.end(Outcome::Aborted),
        }
    }

    /// Waits for the loops to end (after shutdown), so no transfer outlives the stop.
    pub fn join(&self) {
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

struct Loop {
    epoll: Epoll,
    wake: Arc<Wake>,
    incoming: mpsc::Receiver<Transfer>,
    running: Arc<AtomicUsize>,
    /// Transfers by token; `free` lists the empty slots.
    slots: Vec<Option<Transfer>>,
    free: Vec<usize>,
    /// No transfer's deadline is earlier than this. Deadlines only move later, so it stays
    /// a lower bound without rescanning every transfer after every packet.
    next_timer: Option<Instant>,
}

impl Loop {
    fn run(&mut self, shutdown: &Shutdown) {
        let mut events = Events::with_capacity(64);
        let mut buf = vec![0u8; 2048];
        let mut quick = QuickWait::default();
        while !shutdown.is_triggered() {
            self.take_new();
            let now = Instant::now();
            let timeout = self
                .next_timer
                .map_or(SHUTDOWN_POLL, |t| t.saturating_duration_since(now))
                .min(SHUTDOWN_POLL);
            if let Err(e) = self.wait(&mut events, timeout, &mut quick) {
                tracing::error!(error = %e, "tftp transfer loop cannot wait; aborting its transfers");
                break;
            }
            let now = Instant::now();
            for token in events.tokens() {
                if token == WAKE_TOKEN {
                    self.wake.clear();
                    continue;
                }
                let i = token as usize;
                if let Some(Some(t)) = self.slots.get_mut(i)
                    && let Err(outcome) = t.on_readable(&mut buf, now)
                {
                    self.finish(i, outcome);
                }
            }
            if self.next_timer.is_some_and(|t| now >= t) {
                self.fire_timers(now);
            }
        }
        for i in 0..self.slots.len() {
            if self.slots[i].is_some() {
                self.finish(i, Outcome::Aborted);
            }
        }
    }

    /// Waits for ready sockets. While the loop's clients answer quickly, it first looks
    /// without sleeping for a short while (an empty `epoll_wait(0)` takes no lock).
    fn wait(
        &self,
        events: &mut Events,
        timeout: Duration,
        quick: &mut QuickWait,
    ) -> std::io::Result<()> {
        let busy = self.free.len() < self.slots.len();
        if busy {
            let mut failed = None;
            let found = quick.spin(|| match self.epoll.wait(events, Duration::ZERO) {
                Ok(()) => events.tokens().next().is_some(),
                Err(e) => {
                    failed = Some(e);
                    true
                }
            });
            if let Some(e) = failed {
                return Err(e);
            }
            if found {
                return Ok(());
            }
        }
        let started = Instant::now();
        self.epoll.wait(events, timeout)?;
        // An idle loop's long waits mark it slow, so it does not count among the quick
        // waiters that keep others from polling.
        quick.waited(started.elapsed());
        Ok(())
    }

    /// Starts the transfers handed over since the last look.
    fn take_new(&mut self) {
        while let Ok(t) = self.incoming.try_recv() {
            let i = self.free.pop().unwrap_or_else(|| {
                self.slots.push(None);
                self.slots.len() - 1
            });
            let watched = self.epoll.add(t.sock.as_fd(), i as u64);
            let t = self.slots[i].insert(t);
            if let Err(e) = watched {
                tracing::error!(error = %e, "tftp cannot watch a transfer socket");
                self.finish(i, Outcome::Aborted);
                continue;
            }
            let window = t.tx.window();
            match t.send(window, Instant::now()) {
                Ok(()) => self.next_timer = Some(earliest(self.next_timer, t.deadline)),
                Err(outcome) => self.finish(i, outcome),
            }
        }
    }

    /// Retransmits or gives up on every transfer whose deadline passed; finds the next one.
    fn fire_timers(&mut self, now: Instant) {
        let mut next: Option<Instant> = None;
        for i in 0..self.slots.len() {
            let Some(t) = &mut self.slots[i] else {
                continue;
            };
            match t.on_timer(now) {
                Ok(()) => next = Some(earliest(next, t.deadline)),
                Err(outcome) => self.finish(i, outcome),
            }
        }
        self.next_timer = next;
    }

    fn finish(&mut self, i: usize, outcome: Outcome) {
        let Some(t) = self.slots[i].take() else {
            return;
        };
        let _ = self.epoll.remove(t.sock.as_fd());
        self.free.push(i);
        self.running.fetch_sub(1, Ordering::Relaxed);
        t.end(outcome);
    }
}

fn earliest(a: Option<Instant>, b: Instant) -> Instant {
    a.map_or(b, |a| a.min(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A netascii source gives the bytes of the whole file converted at once, block by block
    /// in order, for a window sent again from its start, and for a block far behind, while
    /// holding a bounded part of the converted file.
    #[test]
    fn netascii_is_converted_as_it_is_sent() {
        let mut data = Vec::new();
        for k in 0..(3 * READ_AHEAD) {
            data.push(match k % 97 {
                0 => b'\n',
                13 => b'\r',
                n => b'a' + (n % 26) as u8,
            });
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("text");
        std::fs::write(&path, &data).unwrap();
        let whole = wire::to_netascii(&data);
        let (mut source, len) = Source::netascii(std::fs::File::open(&path).unwrap()).unwrap();
        assert_eq!(len, whole.len() as u64);
        let block = 1468;
        let span = |k: u64| {
            let start = k * block as u64;
            (start, (len - start).min(block as u64) as usize)
        };
        let blocks = len.div_ceil(block as u64);
        for k in 0..blocks {
            // Every eighth block, the window of four before it is sent again.
            let again = if k % 8 == 7 { k - 3..=k } else { k..=k };
            for j in again {
                let (start, n) = span(j);
                let got = source.block(start, n).unwrap().to_vec();
                assert_eq!(got, whole[start as usize..start as usize + n], "block {j}");
            }
            if let Source::Netascii { out, .. } = &source {
                assert!(out.len() <= 3 * READ_AHEAD + block, "{} held", out.len());
            }
        }
        // A block from the top again: converted anew.
        let (start, n) = span(1);
        assert_eq!(
            source.block(start, n).unwrap(),
            &whole[start as usize..start as usize + n]
        );
    }
}

//! TFTP service, read-only: the loaders folder (`undionly.kpxe`) and each image's boot files
//! (`IMAGE/vmlinuz`, `IMAGE/initrd.img`), nothing else. Every transfer runs on its own
//! ephemeral socket with retransmission and a bounded number of retries, ends at once on a
//! client ERROR, and is recorded when it ends. The number of transfers at once is capped.
//!
//! Our own server rather than async-tftp: we need to know when and how a transfer ended (the
//! loader phase ends there), to stop on a client ERROR (EDK2's tsize probe), windowsize, and
//! no extra dependency; the protocol part is small and lives in `proto::tftp`.

use super::boot_files::{Refused, handed_out, resolve};
use crate::config::Config;
use crate::proto::tftp::{self as wire, Mode, Next, Packet, Sender, err};
use crate::record::{Kind, Outcome, Proto, Recorder, Service, Who};
use crate::service::quick_read::QuickWait;
use crate::shutdown::Shutdown;
use std::io::Read;
use std::net::UdpSocket;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use std::time::Instant;
use tokio::sync::Semaphore;

/// Transfers at once; a room of a few hundred PCs fits, a flood does not.
pub const MAX_TRANSFERS: usize = 256;
/// Transfers at once from one address. Firmware fetches one file at a time (two with EDK2's
/// size probe); the room behind a NAT, or a test rig on loopback, needs more. The bound keeps
/// one confused or hostile address from taking the whole room's share of `MAX_TRANSFERS`.
pub const MAX_PER_CLIENT: usize = 32;
/// Retransmission interval when the client names none.
const DEFAULT_RTO: Duration = Duration::from_secs(1);
/// Retransmissions of the same window before giving up.
const MAX_RETRIES: u32 = 5;
/// netascii is converted in memory; boot files are sent octet, so this only bounds misuse.
const MAX_NETASCII: u64 = 16 << 20;

#[derive(Debug, Default)]
pub struct Counters {
    pub malformed: AtomicU64,
    pub refused: AtomicU64,
    pub busy: AtomicU64,
}

pub async fn serve(
    socket: tokio::net::UdpSocket,
    config: Arc<Config>,
    recorder: Recorder,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let limit = Arc::new(Semaphore::new(MAX_TRANSFERS));
    let per_client = PerClient::default();
    let counters = Arc::new(Counters::default());
    let mut buf = vec![0u8; wire::MAX_REQUEST + 1];
    loop {
        let (n, peer) = tokio::select! {
            _ = shutdown.wait() => break,
            r = socket.recv_from(&mut buf) => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!(error = %e, "tftp receive error");
                    continue;
                }
            },
        };
        match wire::decode(&buf[..n]) {
            Ok(Packet::Read(req)) => {
                recorder.request(Service::Tftp);
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    recorder.refused(Service::Tftp);
                    let c = counters.busy.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::warn!(%peer, file = %req.file, limit = MAX_TRANSFERS, refused = c,
                        "tftp transfer limit reached; refusing");
                    let _ = socket
                        .send_to(&wire::encode_error(err::NOT_DEFINED, "server busy"), peer)
                        .await;
                    continue;
                };
                let Some(slot) = per_client.take(peer.ip()) else {
                    recorder.refused(Service::Tftp);
                    let c = counters.busy.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::warn!(%peer, file = %req.file, limit = MAX_PER_CLIENT, refused = c,
                        "tftp per-client transfer limit reached; refusing");
                    let _ = socket
                        .send_to(
                            &wire::encode_error(err::NOT_DEFINED, "too many transfers"),
                            peer,
                        )
                        .await;
                    continue;
                };
                let t = Transfer {
                    peer,
                    req,
                    config: config.clone(),
                    recorder: recorder.clone(),
                    counters: counters.clone(),
                };
                let stop = shutdown.clone();
                shutdown.spawn(async move {
                    let _ = tokio::task::spawn_blocking(move || t.run(stop)).await;
                    drop((permit, slot));
                });
            }
            Ok(Packet::Write(req)) => {
                recorder.request(Service::Tftp);
                recorder.refused(Service::Tftp);
                counters.refused.fetch_add(1, Ordering::Relaxed);
                tracing::info!(%peer, file = %req.file, "tftp write refused");
                let _ = socket
                    .send_to(&wire::encode_error(err::ACCESS, "read-only server"), peer)
                    .await;
            }
            Ok(other) => {
                // A late packet of a finished transfer, or a confused client.
                recorder.malformed(Service::Tftp);
                counters.malformed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%peer, packet = ?short(&other), "tftp packet on the request port dropped");
            }
            Err(e) => {
                recorder.malformed(Service::Tftp);
                let c = counters.malformed.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::debug!(%peer, error = %e, malformed = c, "tftp packet dropped");
            }
        }
    }
    Ok(())
}

/// Transfers running per client address.
#[derive(Clone, Default)]
struct PerClient(Arc<std::sync::Mutex<std::collections::HashMap<IpAddr, usize>>>);

/// One of a client's transfer slots; given back when dropped.
struct Slot {
    table: PerClient,
    ip: IpAddr,
}

impl PerClient {
    fn take(&self, ip: IpAddr) -> Option<Slot> {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = t.entry(ip).or_insert(0);
        if *n >= MAX_PER_CLIENT {
            return None;
        }
        *n += 1;
        Some(Slot {
            table: self.clone(),
            ip,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut t = self.table.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = t.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                t.remove(&self.ip);
            }
        }
    }
}

fn short(p: &Packet) -> &'static str {
    match p {
        Packet::Read(_) => "rrq",
        Packet::Write(_) => "wrq",
        Packet::Data { .. } => "data",
        Packet::Ack(_) => "ack",
        Packet::Error { .. } => "error",
        Packet::Oack(_) => "oack",
    }
}

struct Transfer {
    peer: SocketAddr,
    req: wire::Request,
    config: Arc<Config>,
    recorder: Recorder,
    counters: Arc<Counters>,
}

/// Where the bytes come from.
enum Source {
    /// Read ahead in large chunks with `pread`: a transfer walks the file in order.
    File {
        file: std::fs::File,
        chunk: Vec<u8>,
        chunk_start: u64,
    },
    Memory(Vec<u8>),
}

/// How much a file source reads at once.
const READ_AHEAD: usize = 256 * 1024;

impl Source {
    fn file(file: std::fs::File) -> Source {
        Source::File {
            file,
            chunk: Vec::new(),
            chunk_start: 0,
        }
    }

    /// Appends `len` bytes from `start` to `out`.
    fn read(&mut self, start: u64, len: usize, out: &mut Vec<u8>) -> std::io::Result<()> {
        match self {
            Source::File {
                file,
                chunk,
                chunk_start,
            } => {
                let end = start + len as u64;
                let held = *chunk_start..=*chunk_start + chunk.len() as u64;
                if !(held.contains(&start) && held.contains(&end)) {
                    chunk.clear();
                    chunk.resize(READ_AHEAD.max(len), 0);
                    let mut filled = 0;
                    while filled < chunk.len() {
                        match file.read_at(&mut chunk[filled..], start + filled as u64)? {
                            0 => break,
                            n => filled += n,
                        }
                    }
                    chunk.truncate(filled);
                    *chunk_start = start;
                    if filled < len {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                }
                let at = (start - *chunk_start) as usize;
                out.extend_from_slice(&chunk[at..at + len]);
            }
            Source::Memory(m) => {
                let s = usize::try_from(start).unwrap_or(usize::MAX);
                let data = m
                    .get(s..s.saturating_add(len))
                    .ok_or(std::io::ErrorKind::UnexpectedEof)?;
                out.extend_from_slice(data);
            }
        }
        Ok(())
    }
}

/// How often a waiting transfer looks at the shutdown flag.
const SHUTDOWN_POLL: Duration = Duration::from_millis(250);

/// What one wait for a client packet brought.
enum Heard {
    Packet(usize, SocketAddr),
    Nothing,
    Failed(std::io::Error),
}

impl Transfer {
    /// Runs on a thread of its own with a blocking socket: a lock-step transfer is one round
    /// trip per block, and a thread parked in `recvfrom` answers an ACK sooner than a task
    /// woken through the reactor (tftpd-hpa and atftpd work the same way).
    fn run(self, shutdown: Shutdown) {
        let local = match self.peer.ip() {
            IpAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            IpAddr::V6(_) => SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0)),
        };
        let sock = match UdpSocket::bind(local) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "tftp cannot open a transfer socket");
                return;
            }
        };
        let file = self.req.file.clone();
        let (path, kind) = match resolve(&self.config, &file) {
            Ok(x) => x,
            Err(Refused(code, text)) => {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                self.recorder.refused(Service::Tftp);
                tracing::info!(peer = %self.peer, %file, reason = text, "tftp read refused");
                if code == err::NOT_FOUND {
                    self.missing(&file, text);
                }
                let _ = sock.send_to(&wire::encode_error(code, text), self.peer);
                return;
            }
        };
        let (source, size) = match open(&path, self.req.mode) {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(peer = %self.peer, %file, error = %e, "tftp cannot read file");
                self.recorder.refused(Service::Tftp);
                self.missing(&file, "cannot read file");
                let _ = sock.send_to(
                    &wire::encode_error(err::NOT_FOUND, "cannot read file"),
                    self.peer,
                );
                return;
            }
        };
        let started = Instant::now();
        let (settings, oack) = wire::negotiate(&self.req.options, Some(size));
        let mut tx = Sender::new(size, settings);
        let outcome = self.send(&sock, source, &mut tx, &oack, settings, &shutdown);
        let bytes = match outcome {
            Outcome::Complete => size,
            _ => tx.acked_bytes(),
        };
        tracing::info!(peer = %self.peer, %file, bytes, size, ?outcome, mode = %self.req.mode,
            blksize = settings.blksize, windowsize = settings.windowsize,
            ms = started.elapsed().as_millis() as u64, "tftp transfer");
        let Some(who) = super::ipv4_of(self.peer.ip()).map(Who::Ip) else {
            return;
        };
        self.recorder.record(
            who,
            Kind::File {
                proto: Proto::Tftp,
                kind,
                path: file,
                bytes,
                outcome,
            },
        );
    }

    /// Records a failed boot when the missing file is one bootpool hands out (a loader it
    /// names in DHCP, an image's kernel or initrd): without it the client cannot go on. Other
    /// names are probes (iPXE looks for `autoexec.ipxe`) and fail nothing.
    fn missing(&self, file: &str, why: &str) {
        if !handed_out(&self.config, file) {
            return;
        }
        if let Some(ip) = super::ipv4_of(self.peer.ip()) {
            self.recorder.record(
                Who::Ip(ip),
                Kind::Failed {
                    proto: Some(Proto::Tftp),
                    reason: format!("{file}: {why}"),
                },
            );
        }
    }

    /// Runs the exchange until every block is acknowledged, the client gives up, it stops
    /// answering, or the daemon stops.
    fn send(
        &self,
        sock: &UdpSocket,
        mut source: Source,
        tx: &mut Sender,
        oack: &[(String, String)],
        settings: wire::Settings,
        shutdown: &Shutdown,
    ) -> Outcome {
        let rto = settings
            .timeout_s
            .map_or(DEFAULT_RTO, |s| Duration::from_secs(u64::from(s)));
        // With options, the client must first acknowledge the OACK with ACK 0.
        let mut awaiting_oack = !oack.is_empty();
        let oack_bytes = wire::encode_oack(oack);
        let mut packet = Vec::with_capacity(4 + usize::from(settings.blksize));
        let mut retries = 0;
        let mut inbuf = vec![0u8; 2048];
        let mut timeout = None;
        let mut quick = QuickWait::default();
        let mut resend = true;
        let mut window = tx.window();
        // Set only when something is sent: stray or duplicate packets do not extend it.
        let mut deadline = Instant::now() + rto;
        loop {
            if resend {
                resend = false;
                let sent = if awaiting_oack {
                    sock.send_to(&oack_bytes, self.peer).map(|_| ())
                } else {
                    self.send_blocks(sock, &mut source, tx, window.clone(), &mut packet)
                };
                if let Err(e) = sent {
                    tracing::debug!(peer = %self.peer, error = %e, "tftp send failed");
                    return Outcome::Aborted;
                }
                deadline = Instant::now() + rto;
            }
            let (n, from) = match wait(sock, &mut inbuf, deadline, &mut timeout, &mut quick) {
                Heard::Packet(n, from) => (n, from),
                Heard::Nothing if shutdown.is_triggered() => return Outcome::Aborted,
                Heard::Nothing if Instant::now() < deadline => continue,
                Heard::Nothing => {
                    retries += 1;
                    if retries > MAX_RETRIES {
                        return Outcome::TimedOut;
                    }
                    window = tx.window();
                    resend = true;
                    continue;
                }
                Heard::Failed(e) => {
                    tracing::debug!(peer = %self.peer, error = %e, "tftp receive failed");
                    return Outcome::Aborted;
                }
            };
            if from != self.peer {
                let _ = sock.send_to(
                    &wire::encode_error(err::UNKNOWN_TID, "unknown transfer id"),
                    from,
                );
                continue;
            }
            match wire::decode(&inbuf[..n]) {
                Ok(Packet::Ack(0)) if awaiting_oack => {
                    awaiting_oack = false;
                    retries = 0;
                    window = tx.window();
                    resend = true;
                }
                Ok(Packet::Ack(n)) if !awaiting_oack => match tx.on_ack(n) {
                    Next::Done => return Outcome::Complete,
                    Next::Send(w) => {
                        retries = 0;
                        window = w;
                        resend = true;
                    }
                    Next::Wait => {}
                },
                Ok(Packet::Error { code, message }) => {
                    tracing::debug!(peer = %self.peer, code, %message, "tftp client ended the transfer");
                    return Outcome::Aborted;
                }
                _ => {
                    self.counters.malformed.fetch_add(1, Ordering::Relaxed);
                    self.recorder.malformed(Service::Tftp);
                }
            }
        }
    }

    /// Sends the blocks of one window, each built in the same buffer.
    fn send_blocks(
        &self,
        sock: &UdpSocket,
        source: &mut Source,
        tx: &Sender,
        blocks: std::ops::RangeInclusive<u64>,
        packet: &mut Vec<u8>,
    ) -> std::io::Result<()> {
        for n in blocks {
            let (start, len) = tx.span(n);
            packet.clear();
            packet.extend_from_slice(&wire::data_header(Sender::wire(n)));
            source.read(start, len, packet)?;
            sock.send_to(packet, self.peer)?;
        }
        Ok(())
    }
}

/// Waits for one packet until `deadline`, waking at least every `SHUTDOWN_POLL`. `timeout` is
/// the socket's read timeout as last set: while it is still right (most waits, since an ACK
/// comes long before the deadline) it is not set again, which saves a system call per block.
/// A client that has been ACKing quickly is polled for first (`quick_read`): a lock-step
/// transfer waits for one ACK per block, and a sleeping thread's wake-up costs more than it.
fn wait(
    sock: &UdpSocket,
    buf: &mut [u8],
    deadline: Instant,
    timeout: &mut Option<Duration>,
    quick: &mut QuickWait,
) -> Heard {
    use std::os::fd::AsFd as _;
    let polled = quick.poll(sock.as_fd());
    let started = Instant::now();
    let left = deadline.saturating_duration_since(Instant::now());
    let slice = left.min(SHUTDOWN_POLL).max(Duration::from_millis(1));
    if *timeout != Some(slice) {
        if let Err(e) = sock.set_read_timeout(Some(slice)) {
            return Heard::Failed(e);
        }
        *timeout = Some(slice);
    }
    let got = sock.recv_from(buf);
    if !polled {
        quick.waited(started.elapsed());
    }
    match got {
        Ok((n, from)) => Heard::Packet(n, from),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Heard::Nothing
        }
        // ICMP port unreachable and the like: the client is gone.
        Err(e) => Heard::Failed(e),
    }
}

fn open(path: &Path, mode: Mode) -> std::io::Result<(Source, u64)> {
    let mut f = std::fs::File::open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    match mode {
        Mode::Octet => Ok((Source::file(f), meta.len())),
        Mode::Netascii => {
            if meta.len() > MAX_NETASCII {
                return Err(std::io::Error::other("too large for netascii"));
            }
            let mut raw = Vec::new();
            f.read_to_end(&mut raw)?;
            let text = wire::to_netascii(&raw);
            let len = text.len() as u64;
            Ok((Source::Memory(text), len))
        }
    }
}

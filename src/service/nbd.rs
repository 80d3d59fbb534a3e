//! NBD service: serves the root images (`export::image`) over TCP, read-only or, for images
//! with `cow:`, writable through a per-client copy-on-write overlay (`service::overlays`,
//! `export::cow`), speaking the fixed-newstyle handshake and simple replies of `proto::nbd`.
//! It loads `store: ram` images into memory before serving. It owns the limits: a cap on
//! connections, a handshake deadline, a bound on requests and bytes in flight, TCP keepalive
//! for clients that vanish, write timeouts; and it records each attach and the bytes read.
//!
//! There is no plain idle timeout once a client is attached: a booted kernel client can go
//! minutes without touching its root and would lose it. Keepalive finds peers that powered
//! off. Instead, connections are capped per source address (`limits.nbd_per_client`), and
//! when every slot is taken a new connection takes the slot of the attached connection that
//! has been idle longest, if that one has been idle `limits.nbd_idle_timeout` or more: a
//! stranger holding idle connections cannot lock the room out, and a quiet booted client is
//! only disconnected when its slot is needed.

use crate::boot::exports::root_allowed;
use crate::config::{Config, Image, RootProto, Store};
use crate::export::cow::{CowError, Overlay};
use crate::export::image::{self, BlockImage};
use crate::export::mapping::{MappedRange, Mapping};
use crate::proto::nbd::{
    self as p, ClientFlags, Malformed, OptRequest, OptionHeader, Request, Verdict,
};
use crate::record::event::{Detach, Micros, now_micros};
use crate::record::{Kind, Proto, Recorder, Records, Service, Who};
use crate::service::identity::Identity;
use crate::service::overlays::{Lease, Overlays};
use crate::service::page_buf::PageBuf;
use crate::shutdown::Shutdown;
use crate::trace::format::What;
use std::collections::HashMap;
use std::io;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The service's bounds. `Default` is what the daemon uses; tests shrink them.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; more are accepted and closed at once (counted), unless
    /// an idle one gives its slot up (`idle_timeout`).
    pub max_connections: usize,
    /// Connections served at once from one address; more are closed at once (counted).
    pub per_client: usize,
    /// An attached connection that sent no request for this long gives its slot to a new
    /// connection that finds every slot taken.
    pub idle_timeout: Duration,
    /// Requests one connection may have in flight; the next is not read until one is
    /// answered, so a pipelining client is pushed back through TCP.
    pub max_in_flight: usize,
    /// A client must finish option haggling within this.
    pub handshake_timeout: Duration,
    /// A reply the client does not take within this ends the connection.
    pub write_timeout: Duration,
    /// How long a copy-on-write overlay outlives its client's last connection (and how long
    /// overlays kept on disk from before a restart wait to be claimed).
    pub cow_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits::of(&crate::config::Limits::default())
    }
}

impl Limits {
    /// The bounds `pools.yaml`'s `limits` section sets; the rest are fixed.
    pub fn of(l: &crate::config::Limits) -> Limits {
        Limits {
            max_connections: l.nbd_connections,
            per_client: l.nbd_per_client,
            idle_timeout: l.nbd_idle_timeout,
            max_in_flight: 64,
            handshake_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(60),
            cow_grace: Duration::from_secs(300),
        }
    }
}

/// Read buffers held across all connections; one READ may be up to 32 MiB.
const BUFFER_BUDGET: usize = 256 << 20;
/// Options one handshake may send before we call it abuse.
const MAX_OPTIONS: usize = 64;
/// After DISC or shutdown, how long in-flight replies may take.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Keepalive: first probe after this much silence, then every interval, give up after retries.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(60);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_RETRIES: u32 = 6;
/// Replies queued behind one another go out in one writev until this many bytes or replies.
const BATCH_BYTES: usize = 64 << 10;
const BATCH_REPLIES: usize = 64;
/// Bytes of cached READ data a connection copies ahead of what its writer has sent. Past
/// this its reader waits, so each buffer goes out while its bytes are still in the CPU's
/// cache, and the client's own copy reads warm data (fio's 1 MiB reads: 2.2 -> 2.5 GB/s
/// against 32 MiB ahead; BENCHMARKS.md).
const READ_AHEAD: u32 = 2 << 20;
/// A cached READ at least this big is sent by the connection's reader when the writer is
/// idle (see `Out`); smaller ones go through the writer task, which sends a burst of them in
/// one writev (sent one by one, 4 KiB random reads were ~7% slower in one run).
const INLINE_MIN: u32 = 64 << 10;
/// How often image mappings whose file was deleted or replaced are let go of.
const FORGET_STALE_EVERY: Duration = Duration::from_secs(30);
/// Bytes of requests read ahead per connection.
const REQUEST_BUFFER: usize = 4 << 10;
/// Root reads are recorded at most once per interval, or sooner once this many bytes pile up.
const RECORD_INTERVAL: Duration = Duration::from_secs(1);
const RECORD_BYTES: u64 = 16 << 20;

/// Without `cow`: read-only; FLUSH is a no-op; every connection sees the same bytes.
const READ_ONLY_FLAGS: u16 =
    p::TFLAG_HAS_FLAGS | p::TFLAG_READ_ONLY | p::TFLAG_SEND_FLUSH | p::TFLAG_CAN_MULTI_CONN;
/// With `cow`: writable. Multi-conn stays true because every connection of one client shares
/// its overlay, and FLUSH syncs that whole overlay.
const COW_FLAGS: u16 = p::TFLAG_HAS_FLAGS
    | p::TFLAG_SEND_FLUSH
    | p::TFLAG_SEND_FUA
    | p::TFLAG_SEND_TRIM
    | p::TFLAG_SEND_WRITE_ZEROES
    | p::TFLAG_CAN_MULTI_CONN;

fn flags_of(image: &Image) -> u16 {
    if image.cow.is_some() {
        COW_FLAGS
    } else {
        READ_ONLY_FLAGS
    }
}

/// What the service has seen, for logs now and metrics later.
#[derive(Debug, Default)]
pub struct Stats {
    pub connections: AtomicU64,
    /// Connections closed at once because `Limits::max_connections` were open.
    pub refused: AtomicU64,
    pub attached: AtomicU64,
    /// Bad magic, unknown flags, oversized or unparsable options, absurd requests.
    pub malformed: AtomicU64,
    /// Transmission requests answered with an error.
    pub errors: AtomicU64,
    pub reads: AtomicU64,
    pub bytes: AtomicU64,
    /// WRITE requests done on copy-on-write exports, and their payload bytes.
    pub writes: AtomicU64,
    pub written: AtomicU64,
    /// Writes refused because the client's overlay bound was reached.
    pub no_space: AtomicU64,
}

/// What every connection shares: images held in memory, the overlays, the records.
struct Exports {
    ram: HashMap<String, Arc<Vec<u8>>>,
    pool: BufPool,
    overlays: Arc<Overlays>,
    records: Arc<Records>,
    identity: Identity,
}

/// Loads each exported `store: ram` image, with a progress bar when stderr is a terminal.
fn load_ram_images(config: &Config) -> io::Result<HashMap<String, Arc<Vec<u8>>>> {
    let mut ram = HashMap::new();
    for img in image::exported(config) {
        if img.store != Store::Ram {
            continue;
        }
        let name = img.name.clone();
        let started = Instant::now();
        let mut bar = Progress::new(&name);
        let bytes = image::load(&img, &mut |done, total| bar.show(done, total))?;
        bar.finish();
        let secs = started.elapsed().as_secs_f64();
        tracing::info!(
            image = %name, mib = bytes.len() >> 20, secs,
            mib_per_s = (bytes.len() >> 20) as f64 / secs.max(1e-6),
            "nbd image loaded into memory"
        );
        // By export name: each image revision is an export of its own.
        ram.insert(img.nbd_export.clone(), bytes);
    }
    Ok(ram)
}

/// A one-line progress bar on stderr, drawn only when stderr is a terminal.
struct Progress {
    name: String,
    tty: bool,
    drawn: u64,
}

impl Progress {
    fn new(name: &str) -> Progress {
        Progress {
            name: name.to_string(),
            tty: io::stderr().is_terminal(),
            drawn: u64::MAX,
        }
    }

    fn show(&mut self, done: u64, total: u64) {
        const WIDTH: u64 = 40;
        let pct = (done * 100).checked_div(total).unwrap_or(100);
        if !self.tty || pct == self.drawn {
            return;
        }
        self.drawn = pct;
        let full = (pct * WIDTH / 100) as usize;
        let bar = format!("{}{}", "#".repeat(full), " ".repeat(WIDTH as usize - full));
        let mut e = io::stderr().lock();
        let _ = write!(
            e,
            "\rloading {} [{bar}] {pct:3}% {}/{} MiB",
            self.name,
            done >> 20,
            total >> 20
        );
        let _ = e.flush();
    }

    fn finish(&self) {
        if self.tty {
            eprintln!();
        }
    }
}

pub async fn serve(
    listener: super::Listener,
    config: Arc<Config>,
    recorder: Recorder,
    records: Arc<Records>,
    identity: Identity,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let limits = Limits::of(&config.limits);
    let stats = Arc::default();
    serve_with(
        listener, config, recorder, records, identity, shutdown, limits, stats,
    )
    .await
}

/// `serve` within `limits`, counting into `stats`.
// The shared dependencies become one value when every service starts from one table (the
// service contract of issue 20); until then they are listed.
#[allow(clippy::too_many_arguments)]
pub async fn serve_with(
    listener: super::Listener,
    config: Arc<Config>,
    recorder: Recorder,
    records: Arc<Records>,
    identity: Identity,
    shutdown: Shutdown,
    limits: Limits,
    stats: Arc<Stats>,
) -> anyhow::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let per_client = super::bounds::PerAddress::new(limits.per_client);
    let idle = Arc::new(IdleConns::default());
    static REFUSED: super::bounds::LogLimit = super::bounds::LogLimit::new();
    let buffers = Arc::new(Semaphore::new(BUFFER_BUDGET));
    // Clients that connect meanwhile wait in the listen backlog.
    let c = config.clone();
    let ram = tokio::task::spawn_blocking(move || load_ram_images(&c)).await??;
    let exports = Arc::new(Exports {
        ram,
        pool: BufPool::new(),
        overlays: Overlays::new(&config, limits.cow_grace, shutdown.clone()),
        records,
        identity,
    });
    tracing::info!(exports = ?image::export_names(&config), "nbd serving");
    let mut sweep = tokio::time::interval(FORGET_STALE_EVERY);
    loop {
        let accepted = tokio::select! {
            r = super::accept(&listener, &shutdown, "nbd") => r,
            _ = sweep.tick() => {
                // An image deleted or replaced: free its mapping (and disk space) once unused.
                tokio::task::spawn_blocking(Mapping::forget_stale);
                continue;
            }
        };
        let Some((stream, peer, paced)) = accepted else {
            break;
        };
        let refuse = |why: &'static str| {
            stats.refused.fetch_add(1, Relaxed);
            recorder.refused(Service::Nbd);
            if let Some(suppressed) = REFUSED.allow() {
                tracing::warn!(%peer, max = limits.max_connections, per_client = limits.per_client,
                    suppressed, "nbd connection refused: {why}");
            }
        };
        let Some(mine) = per_client.take(peer.ip()) else {
            refuse("too many from this address");
            continue;
        };
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => Some(slot),
            // Every slot taken: the longest-idle attached connection may give its up.
            Err(_) if idle.evict_one(limits.idle_timeout) => None,
            Err(_) => {
                refuse("too many");
                continue;
            }
        };
        stats.connections.fetch_add(1, Relaxed);
        let activity = idle.register();
        let conn = Conn {
            peer,
            config: config.clone(),
            recorder: recorder.clone(),
            shutdown: shutdown.clone(),
            stats: stats.clone(),
            buffers: buffers.clone(),
            exports: exports.clone(),
            limits,
            activity,
        };
        let slots = slots.clone();
        shutdown.spawn(async move {
            let _mine = (mine, paced);
            let _slot = match slot {
                Some(s) => s,
                // The evicted connection lets go of its slot as it ends.
                None => match tokio::time::timeout(DRAIN_TIMEOUT, slots.acquire_owned()).await {
                    Ok(Ok(s)) => s,
                    _ => return,
                },
            };
            conn.run(stream).await;
        });
    }
    tracing::info!(
        connections = stats.connections.load(Relaxed),
        attached = stats.attached.load(Relaxed),
        refused = stats.refused.load(Relaxed),
        malformed = stats.malformed.load(Relaxed),
        reads = stats.reads.load(Relaxed),
        bytes = stats.bytes.load(Relaxed),
        "nbd stopped"
    );
    Ok(())
}

/// Why a handshake ended without an export.
#[derive(Debug)]
enum HandshakeEnd {
    Io(io::Error),
    Malformed(Malformed),
    /// NBD_OPT_EXPORT_NAME for an export we lack: the document says hard disconnect.
    UnknownExport(String),
    TooManyOptions,
    Aborted,
}

impl std::fmt::Display for HandshakeEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeEnd::Io(e) => write!(f, "{e}"),
            HandshakeEnd::Malformed(e) => write!(f, "{e}"),
            HandshakeEnd::UnknownExport(name) => write!(f, "unknown export `{name}`"),
            HandshakeEnd::TooManyOptions => write!(f, "more than {MAX_OPTIONS} options"),
            HandshakeEnd::Aborted => write!(f, "aborted by client"),
        }
    }
}

impl From<io::Error> for HandshakeEnd {
    fn from(e: io::Error) -> Self {
        HandshakeEnd::Io(e)
    }
}

impl From<Malformed> for HandshakeEnd {
    fn from(e: Malformed) -> Self {
        HandshakeEnd::Malformed(e)
    }
}

/// One reply ready to go: the header, and the payload if it carries one. Header and payload
/// leave in one `writev`, so neither is copied to join them.
struct Reply {
    head: [u8; p::SIMPLE_REPLY_LEN],
    body: Body,
    payload: u64,
    /// Held until written: the request slot, the buffer bytes, the connection's read-ahead.
    _slot: OwnedSemaphorePermit,
    _buffer: Option<OwnedSemaphorePermit>,
    _ahead: Option<OwnedSemaphorePermit>,
}

/// A READ's data.
enum Body {
    None,
    /// The first `payload` bytes of a pooled buffer, returned to the pool once written.
    Buf(PageBuf),
    /// A range of a `store: ram` image, sent from where it lies (no copy of our own).
    Ram(Arc<Vec<u8>>, usize),
}

impl Reply {
    fn data(&self) -> &[u8] {
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
struct BufPool {
    free: std::sync::Mutex<(Vec<PageBuf>, usize)>,
}

/// Idle reply buffers kept, in bytes, over all connections (in-flight ones are bounded by
/// `BUFFER_BUDGET`).
const POOL_BYTES: usize = 64 << 20;

impl BufPool {
    fn new() -> BufPool {
        BufPool {
            free: std::sync::Mutex::new((Vec::new(), 0)),
        }
    }

    /// A buffer of `len` bytes (its contents are stale: the caller fills them).
    fn take(&self, len: usize) -> PageBuf {
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

    fn put(&self, b: PageBuf) {
        let mut g = self.free.lock().unwrap_or_else(poisoned);
        let (free, held) = &mut *g;
        if *held + b.capacity() <= POOL_BYTES {
            *held += b.capacity();
            free.push(b);
        }
    }
}

/// Why an export cannot be opened for a client.
enum Unavailable {
    /// No such export.
    Unknown,
    /// Not this client's (`boot::exports::root_allowed`); counted as refused.
    Refused,
    /// Its file cannot be opened (logged).
    Failed,
}

struct Conn {
    peer: SocketAddr,
    config: Arc<Config>,
    recorder: Recorder,
    shutdown: Shutdown,
    stats: Arc<Stats>,
    buffers: Arc<Semaphore>,
    exports: Arc<Exports>,
    limits: Limits,
    activity: Activity,
}

/// Open connections that may be asked to give their slot up: each one's last request and the
/// token that ends it.
#[derive(Default)]
struct IdleConns {
    conns: std::sync::Mutex<HashMap<u64, (Arc<AtomicU64>, CancellationToken)>>,
    next: AtomicU64,
    epoch: std::sync::OnceLock<Instant>,
}

impl IdleConns {
    fn now_ms(&self) -> u64 {
        self.epoch.get_or_init(Instant::now).elapsed().as_millis() as u64
    }

    fn register(self: &Arc<Self>) -> Activity {
        let id = self.next.fetch_add(1, Relaxed);
        let last = Arc::new(AtomicU64::new(self.now_ms()));
        let evict = CancellationToken::new();
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        conns.insert(id, (last.clone(), evict.clone()));
        Activity {
            id,
            last,
            evict,
            owner: self.clone(),
        }
    }

    /// Ends the connection idle longest, if it has been idle `at_least`; true if one was.
    fn evict_one(&self, at_least: Duration) -> bool {
        let now = self.now_ms();
        let conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let oldest = conns
            .values()
            .filter(|(_, evict)| !evict.is_cancelled())
            .min_by_key(|(last, _)| last.load(Relaxed));
        match oldest {
            Some((last, evict))
                if now.saturating_sub(last.load(Relaxed)) >= at_least.as_millis() as u64 =>
            {
                evict.cancel();
                true
            }
            _ => false,
        }
    }
}

/// One connection's entry in `IdleConns`, removed when dropped.
struct Activity {
    id: u64,
    last: Arc<AtomicU64>,
    evict: CancellationToken,
    owner: Arc<IdleConns>,
}

impl Activity {
    fn touch(&self) {
        self.last.store(self.owner.now_ms(), Relaxed);
    }
}

impl Drop for Activity {
    fn drop(&mut self) {
        let mut conns = self.owner.conns.lock().unwrap_or_else(|e| e.into_inner());
        conns.remove(&self.id);
    }
}

/// What a connection is attached to: the image, and the client's overlay if it is writable.
struct Attached {
    image: Arc<BlockImage>,
    cow: Option<Lease>,
}

impl Conn {
    fn who(&self) -> Option<Who> {
        super::ipv4_of(self.peer.ip()).map(Who::Ip)
    }

    async fn run(self, mut stream: TcpStream) {
        let started = Instant::now();
        let received = now_micros();
        let _ = stream.set_nodelay(true);
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL)
            .with_retries(KEEPALIVE_RETRIES);
        let sock = socket2::SockRef::from(&stream);
        if let Err(e) = sock.set_tcp_keepalive(&keepalive) {
            tracing::warn!(peer = %self.peer, error = %e, "nbd cannot set keepalive");
        }
        // Unacknowledged replies to a vanished peer also end the connection.
        let _ = sock.set_tcp_user_timeout(Some(self.limits.write_timeout));

        let handshake = tokio::select! {
            r = tokio::time::timeout(self.limits.handshake_timeout, self.handshake(&mut stream)) => r,
            _ = self.shutdown.wait() => return,
        };
        let attached = match handshake {
            Ok(Ok(a)) => a,
            Ok(Err(end)) => {
                if matches!(
                    end,
                    HandshakeEnd::Malformed(_) | HandshakeEnd::TooManyOptions
                ) {
                    self.stats.malformed.fetch_add(1, Relaxed);
                    self.recorder.malformed(Service::Nbd);
                }
                match end {
                    HandshakeEnd::Aborted => {
                        tracing::debug!(peer = %self.peer, "nbd handshake aborted by client")
                    }
                    HandshakeEnd::Io(e) => {
                        tracing::debug!(peer = %self.peer, error = %e, "nbd handshake ended")
                    }
                    end => {
                        static REFUSED: super::bounds::LogLimit = super::bounds::LogLimit::new();
                        if let Some(suppressed) = REFUSED.allow() {
                            tracing::warn!(peer = %self.peer, reason = %end, suppressed,
                                "nbd handshake refused")
                        }
                    }
                }
                return;
            }
            Err(_) => {
                static SLOW: super::bounds::LogLimit = super::bounds::LogLimit::new();
                if let Some(suppressed) = SLOW.allow() {
                    tracing::warn!(peer = %self.peer, suppressed, "nbd handshake timed out");
                }
                return;
            }
        };
        self.stats.attached.fetch_add(1, Relaxed);
        let export = attached.image.name().to_string();
        if let Some(who) = self.who() {
            self.recorder.record(
                who,
                Kind::RootAttach {
                    proto: Proto::Nbd,
                    export: export.clone(),
                },
            );
        }
        if let Some(Who::Ip(ip)) = self.who() {
            let what = What::Nbd {
                cmd: "attach".into(),
                offset: 0,
                len: 0,
                export: Some(export.clone()),
            };
            self.recorder.tracer().op(ip, received, what);
        }
        let cow = attached.cow.is_some();
        let (requests, bytes, end) = self.transmit(stream, attached).await;
        // How the client left, for the record (a powered-off or restarted client is gone).
        let how = match end {
            "disconnect" => Some(Detach::Disconnect),
            "client closed" => Some(Detach::Closed),
            "client reset" => Some(Detach::Reset),
            _ => None,
        };
        if let (Some(how), Some(who)) = (how, self.who()) {
            self.recorder.record(
                who,
                Kind::RootDetach {
                    proto: Proto::Nbd,
                    how,
                },
            );
        }
        tracing::info!(
            peer = %self.peer, %export, cow, requests, bytes, secs = started.elapsed().as_secs_f64(),
            end, "nbd connection closed"
        );
    }

    /// Whether this client may attach image `name`: the one root access rule.
    fn may_use(&self, name: &str) -> bool {
        let ip = super::ipv4_of(self.peer.ip()).unwrap_or(std::net::Ipv4Addr::UNSPECIFIED);
        let holder = self.exports.identity.holder(self.peer.ip());
        root_allowed(&self.config, RootProto::Nbd, name, ip, holder)
    }

    async fn open(&self, name: &str) -> Result<(BlockImage, Arc<Image>), Unavailable> {
        let image = image::lookup(&self.config, name).ok_or(Unavailable::Unknown)?;
        if !self.may_use(&image.name) {
            self.recorder.refused(Service::Nbd);
            static REFUSED: super::bounds::LogLimit = super::bounds::LogLimit::new();
            if let Some(suppressed) = REFUSED.allow() {
                tracing::warn!(peer = %self.peer, export = %image.name, suppressed, "nbd client holds no lease of a pool booting this image over nbd; refused");
            }
            return Err(Unavailable::Refused);
        }
        if let Some(bytes) = self.exports.ram.get(&image.nbd_export) {
            let opened = BlockImage::in_memory(&image.nbd_export, bytes.clone());
            return Ok((opened, image));
        }
        // Opening touches the disk: keep it off the async workers.
        let img = image.clone();
        let opened = tokio::task::spawn_blocking(move || BlockImage::open(&img))
            .await
            .unwrap_or_else(|e| Err(io::Error::other(e)));
        match opened {
            Ok(o) => Ok((o, image)),
            Err(e) => {
                tracing::error!(export = name, error = %e, "nbd cannot open image");
                Err(Unavailable::Failed)
            }
        }
    }

    /// The attachment for an opened image: with the client's overlay if it has `cow`.
    async fn attach(&self, opened: BlockImage, image: Arc<Image>) -> io::Result<Attached> {
        if image.cow.is_none() {
            return Ok(Attached {
                image: Arc::new(opened),
                cow: None,
            });
        }
        let (exports, ip, size) = (self.exports.clone(), self.peer.ip(), opened.size());
        // May read or create overlay files.
        let lease = tokio::task::spawn_blocking(move || {
            let (client, boot) = Overlays::client_key(&exports.identity, &exports.records, ip);
            exports.overlays.attach(&image, size, &client, boot)
        })
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)));
        if let Err(e) = &lease {
            tracing::error!(peer = %self.peer, export = opened.name(), error = %e, "nbd cannot attach overlay");
        }
        Ok(Attached {
            image: Arc::new(opened),
            cow: Some(lease?),
        })
    }

    /// A client asked to attach an export it cannot have: its root will not come up.
    fn root_refused(&self, name: &str) {
        self.recorder.refused(Service::Nbd);
        if let Some(who) = self.who() {
            self.recorder.record(
                who,
                Kind::Failed {
                    proto: Some(Proto::Nbd),
                    reason: format!("no export `{name}` for this client"),
                },
            );
        }
    }

    /// Option haggling, up to the export the client settles on.
    async fn handshake(&self, stream: &mut TcpStream) -> Result<Attached, HandshakeEnd> {
        stream.write_all(&p::greeting()).await?;
        let mut f = [0; 4];
        stream.read_exact(&mut f).await?;
        // A client without FIXED_NEWSTYLE only knows EXPORT_NAME, which works the same.
        let flags = ClientFlags::decode(f)?;
        for _ in 0..MAX_OPTIONS {
            let mut h = [0; p::OPTION_HEADER_LEN];
            stream.read_exact(&mut h).await?;
            let h = OptionHeader::decode(&h)?;
            let mut data = vec![0; h.len as usize];
            stream.read_exact(&mut data).await?;
            let mut out = Vec::new();
            self.recorder.request(Service::Nbd);
            match OptRequest::decode(h.option, &data) {
                Err(e) if h.option == p::OPT_EXPORT_NAME => return Err(e.into()),
                Err(e) => {
                    self.stats.malformed.fetch_add(1, Relaxed);
                    self.recorder.malformed(Service::Nbd);
                    tracing::debug!(peer = %self.peer, option = h.option, error = %e, "nbd bad option");
                    p::opt_error(&mut out, h.option, p::REP_ERR_INVALID, &e.to_string());
                }
                Ok(OptRequest::ExportName(name)) => match self.open(&name).await {
                    Ok((opened, image)) => {
                        let flags_out = flags_of(&image);
                        // EXPORT_NAME cannot carry an error: a failed overlay is a hang-up.
                        let attached = self.attach(opened, image).await?;
                        p::export_name_reply(
                            &mut out,
                            attached.image.size(),
                            flags_out,
                            flags.no_zeroes,
                        );
                        stream.write_all(&out).await?;
                        return Ok(attached);
                    }
                    Err(_) => {
                        self.root_refused(&name);
                        return Err(HandshakeEnd::UnknownExport(name));
                    }
                },
                Ok(OptRequest::Abort) => {
                    p::opt_reply(&mut out, p::OPT_ABORT, p::REP_ACK, &[]);
                    // The client may already be gone; that is fine.
                    let _ = stream.write_all(&out).await;
                    return Err(HandshakeEnd::Aborted);
                }
                Ok(OptRequest::List) => {
                    // A client is shown only what it may attach.
                    for img in image::exported(&self.config) {
                        if self.may_use(&img.name) {
                            p::opt_server(&mut out, &img.nbd_export);
                        }
                    }
                    p::opt_reply(&mut out, p::OPT_LIST, p::REP_ACK, &[]);
                }
                Ok(OptRequest::Info { go, name, requests }) => {
                    let option = if go { p::OPT_GO } else { p::OPT_INFO };
                    match self.open(&name).await {
                        Err(Unavailable::Unknown) => {
                            // Asking to attach (GO) is the initrd wanting its root; INFO is
                            // only a question.
                            if go {
                                self.root_refused(&name);
                            }
                            let msg = format!("no export named `{name}`");
                            p::opt_error(&mut out, option, p::REP_ERR_UNKNOWN, &msg);
                        }
                        Err(Unavailable::Refused) => {
                            if go {
                                self.root_refused(&name);
                            }
                            let msg = format!("`{name}` is not exported to this client");
                            p::opt_error(&mut out, option, p::REP_ERR_POLICY, &msg);
                        }
                        Err(Unavailable::Failed) => {
                            p::opt_error(
                                &mut out,
                                option,
                                p::REP_ERR_UNKNOWN,
                                "export unavailable",
                            );
                        }
                        Ok((opened, image)) => {
                            p::info_export(&mut out, option, opened.size(), flags_of(&image));
                            if name.is_empty() || requests.contains(&p::INFO_NAME) {
                                p::info_name(&mut out, option, opened.name());
                            }
                            // Sent unasked too: these are the defaults, so it binds nobody.
                            p::info_block_size(
                                &mut out,
                                option,
                                p::MIN_BLOCK,
                                p::PREFERRED_BLOCK,
                                p::MAX_PAYLOAD,
                            );
                            if go {
                                match self.attach(opened, image).await {
                                    Ok(attached) => {
                                        p::opt_reply(&mut out, option, p::REP_ACK, &[]);
                                        stream.write_all(&out).await?;
                                        return Ok(attached);
                                    }
                                    Err(_) => {
                                        out.clear();
                                        p::opt_error(
                                            &mut out,
                                            option,
                                            p::REP_ERR_UNKNOWN,
                                            "export unavailable",
                                        );
                                    }
                                }
                            } else {
                                p::opt_reply(&mut out, option, p::REP_ACK, &[]);
                            }
                        }
                    }
                }
                Ok(OptRequest::Unsupported(option)) => {
                    // Structured replies, TLS, metadata contexts: the client falls back.
                    p::opt_error(&mut out, option, p::REP_ERR_UNSUP, "unsupported option");
                }
            }
            stream.write_all(&out).await?;
        }
        Err(HandshakeEnd::TooManyOptions)
    }

    /// The transmission phase. Returns (requests, bytes sent, how it ended).
    async fn transmit(&self, stream: TcpStream, attached: Attached) -> (u64, u64, &'static str) {
        let ahead = Arc::new(Semaphore::new(READ_AHEAD as usize));
        let (rd, wr) = stream.into_split();
        // Requests are 28 bytes: read them from a buffer, many per syscall when pipelined.
        let mut rd = tokio::io::BufReader::with_capacity(REQUEST_BUFFER, rd);
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
            stats: self.stats.clone(),
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
        let size = source.image.size();
        let mut tasks = JoinSet::new();
        let mut requests = 0u64;
        let end = loop {
            let slot = tokio::select! {
                s = slots.clone().acquire_owned() => s.expect("never closed"),
                _ = self.shutdown.wait() => break "shutdown",
                _ = broken.cancelled() => break "write failed",
            };
            let mut h = [0; p::REQUEST_LEN];
            let r = tokio::select! {
                r = rd.read_exact(&mut h) => r,
                _ = self.shutdown.wait() => break "shutdown",
                _ = broken.cancelled() => break "write failed",
                _ = self.activity.evict.cancelled() => break "idle; its slot went to a new connection",
            };
            self.activity.touch();
            if let Err(e) = r {
                break match e.kind() {
                    io::ErrorKind::UnexpectedEof => "client closed",
                    io::ErrorKind::ConnectionReset => "client reset",
                    _ => "read failed",
                };
            }
            let req = match Request::decode(&h) {
                Ok(r) => r,
                Err(e) => {
                    // Out of step with the client: nothing after this can be trusted.
                    self.stats.malformed.fetch_add(1, Relaxed);
                    self.recorder.malformed(Service::Nbd);
                    tracing::warn!(peer = %self.peer, error = %e, "nbd bad request");
                    break "bad request";
                }
            };
            requests += 1;
            self.recorder.request(Service::Nbd);
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
            let op = match req.verdict(size, writable) {
                Verdict::Read { offset, len } => {
                    // Data only the base holds, in memory or the page cache, is sent from
                    // here: a hop to a blocking thread costs more than the copy.
                    if source.base_only(offset, len) {
                        if let Some(ram) = source.image.ram() {
                            // Sent from the image's own bytes, no copy of ours.
                            let reply = Reply {
                                head: p::simple_reply(0, cookie),
                                body: Body::Ram(ram.clone(), offset as usize),
                                payload: len as u64,
                                _slot: slot,
                                _buffer: None,
                                _ahead: None,
                            };
                            if tx.send(reply).await.is_err() {
                                break "write failed";
                            }
                            continue;
                        }
                        // Writer idle: read and send here (see `Out`).
                        if len >= INLINE_MIN
                            && let Ok(mut wr) = out.wr.try_lock()
                            && let Ok(_budget) = self.buffers.try_acquire_many(len)
                        {
                            let sent = tokio::select! {
                                r = send_cached(&out, &mut wr, &source, offset, len, cookie) => r,
                                _ = self.shutdown.wait() => break "shutdown",
                            };
                            match sent {
                                Inline::Sent => continue,
                                Inline::Failed(e) => {
                                    tracing::error!(offset, len, error = %e, "nbd image read failed");
                                    self.stats.errors.fetch_add(1, Relaxed);
                                    let mut one = vec![plain(p::EIO, cookie, slot)];
                                    if out.send(&mut wr, &mut one).await.is_err() {
                                        broken.cancel();
                                        break "write failed";
                                    }
                                    continue;
                                }
                                Inline::Broken => {
                                    broken.cancel();
                                    break "write failed";
                                }
                                // Not in the page cache: a blocking thread reads it, below.
                                Inline::NotCached => {}
                            }
                        }
                        let ahead = tokio::select! {
                            p = ahead.clone().acquire_many_owned(len.clamp(1, READ_AHEAD)) => {
                                p.expect("never closed")
                            }
                            _ = self.shutdown.wait() => break "shutdown",
                            _ = broken.cancelled() => break "write failed",
                        };
                        if let Ok(buffer) = self.buffers.clone().try_acquire_many_owned(len.max(1))
                        {
                            let mut bytes = self.exports.pool.take(len as usize);
                            match source.image.read_now(&mut bytes[..len as usize], offset) {
                                Some(Ok(())) => {
                                    let reply = Reply {
                                        head: p::simple_reply(0, cookie),
                                        body: Body::Buf(bytes),
                                        payload: len as u64,
                                        _slot: slot,
                                        _buffer: Some(buffer),
                                        _ahead: Some(ahead),
                                    };
                                    if tx.send(reply).await.is_err() {
                                        break "write failed";
                                    }
                                    continue;
                                }
                                Some(Err(e)) => {
                                    self.exports.pool.put(bytes);
                                    tracing::error!(offset, len, error = %e, "nbd image read failed");
                                    self.stats.errors.fetch_add(1, Relaxed);
                                    if tx.send(plain(p::EIO, cookie, slot)).await.is_err() {
                                        break "write failed";
                                    }
                                    continue;
                                }
                                // Not all in the page cache: read on a blocking thread.
                                None => self.exports.pool.put(bytes),
                            }
                        }
                    }
                    Op::Read { offset, len }
                }
                Verdict::Write { offset, len, fua } => {
                    let Ok(buffer) = self.buffers.clone().acquire_many_owned(len.max(1)).await
                    else {
                        break "shutdown";
                    };
                    let mut data = vec![0; len as usize];
                    let r = tokio::select! {
                        r = rd.read_exact(&mut data) => r,
                        _ = self.shutdown.wait() => break "shutdown",
                    };
                    if r.is_err() {
                        break "client closed";
                    }
                    Op::Write {
                        offset,
                        data,
                        fua,
                        _buffer: buffer,
                    }
                }
                Verdict::Zeroes { offset, len, fua } => Op::Zeroes { offset, len, fua },
                Verdict::Trim { offset, len, fua } => Op::Trim { offset, len, fua },
                Verdict::Flush => Op::Flush,
                Verdict::Ok => {
                    if tx.send(plain(0, cookie, slot)).await.is_err() {
                        break "write failed";
                    }
                    continue;
                }
                Verdict::Error { errno, drain } => {
                    let mut payload = (&mut rd).take(drain as u64);
                    let mut sink = tokio::io::sink();
                    let drained = tokio::select! {
                        r = tokio::io::copy(&mut payload, &mut sink) => r,
                        _ = self.shutdown.wait() => break "shutdown",
                    };
                    if !matches!(drained, Ok(n) if n == drain as u64) {
                        break "client closed";
                    }
                    self.stats.errors.fetch_add(1, Relaxed);
                    tracing::debug!(peer = %self.peer, kind = req.kind, errno, "nbd request refused");
                    if tx.send(plain(errno, cookie, slot)).await.is_err() {
                        break "write failed";
                    }
                    continue;
                }
                Verdict::Disconnect if req.kind == p::CMD_DISC => break "disconnect",
                Verdict::Disconnect => {
                    self.stats.malformed.fetch_add(1, Relaxed);
                    self.recorder.malformed(Service::Nbd);
                    tracing::warn!(peer = %self.peer, kind = req.kind, len = req.len, "nbd absurd request");
                    break "bad request";
                }
            };
            let (source, tx, buffers) = (source.clone(), tx.clone(), self.buffers.clone());
            let (stats, exports) = (self.stats.clone(), self.exports.clone());
            tasks.spawn(async move {
                let reply = run_op(source, buffers, exports, op, cookie, slot, &stats).await;
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
        if drained.is_err() {
            tasks.abort_all();
        }
        if tokio::time::timeout(DRAIN_TIMEOUT, &mut writer)
            .await
            .is_err()
        {
            writer.abort();
        }
        // The lease (attached.cow) is dropped here, after the last operation on it.
        drop(attached.cow);
        (requests, out.sent.load(Relaxed), end)
    }
}

/// What one connection reads from: the image, and the client's overlay on top if writable.
struct Source {
    image: Arc<BlockImage>,
    overlay: Option<Arc<RwLock<Overlay>>>,
}

impl Source {
    /// Whether the base image alone answers a READ of `len` at `offset`: no overlay, or
    /// one without a block of that range. A READ that overlaps a WRITE not yet answered
    /// may see either (the NBD document leaves their order to the server); a WRITE already
    /// answered is in the overlay, so a later READ is not sent from the base. False when a
    /// write holds the overlay's lock (it may be waiting for the disk): the READ then
    /// goes to a blocking thread.
    fn base_only(&self, offset: u64, len: u32) -> bool {
        match &self.overlay {
            None => true,
            Some(o) => o
                .try_read()
                .is_ok_and(|o| o.untouched(offset, u64::from(len))),
        }
    }
}

/// A request that needs a blocking thread (file I/O, or the overlay's lock).
enum Op {
    Read {
        offset: u64,
        len: u32,
    },
    Write {
        offset: u64,
        data: Vec<u8>,
        fua: bool,
        _buffer: OwnedSemaphorePermit,
    },
    Zeroes {
        offset: u64,
        len: u32,
        fua: bool,
    },
    Trim {
        offset: u64,
        len: u32,
        fua: bool,
    },
    Flush,
}

fn plain(errno: u32, cookie: u64, slot: OwnedSemaphorePermit) -> Reply {
    Reply {
        head: p::simple_reply(errno, cookie),
        body: Body::None,
        payload: 0,
        _slot: slot,
        _buffer: None,
        _ahead: None,
    }
}

fn poisoned<T>(e: std::sync::PoisonError<T>) -> T {
    e.into_inner()
}

/// Runs one operation on a blocking thread; an I/O error becomes EIO, a full overlay ENOSPC.
async fn run_op(
    source: Arc<Source>,
    buffers: Arc<Semaphore>,
    exports: Arc<Exports>,
    op: Op,
    cookie: u64,
    slot: OwnedSemaphorePermit,
    stats: &Stats,
) -> Reply {
    if let Op::Read { offset, len } = op {
        let reply = read(source, buffers, exports, offset, len, cookie, slot).await;
        if reply.payload == 0 && len > 0 {
            stats.errors.fetch_add(1, Relaxed);
        }
        return reply;
    }
    let result = tokio::task::spawn_blocking(move || -> Result<u64, CowError> {
        let Some(overlay) = &source.overlay else {
            return Err(io::Error::other("no overlay").into());
        };
        let base = &*source.image;
        let mut o = overlay.write().unwrap_or_else(poisoned);
        let (fua, written) = match op {
            Op::Write {
                offset, data, fua, ..
            } => {
                o.write(base, &data, offset)?;
                (fua, data.len() as u64)
            }
            Op::Zeroes { offset, len, fua } => {
                o.write_zeroes(base, offset, len as u64)?;
                (fua, 0)
            }
            Op::Trim { offset, len, fua } => {
                o.trim(offset, len as u64)?;
                (fua, 0)
            }
            Op::Flush => (true, 0),
            Op::Read { .. } => unreachable!("handled above"),
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
                stats.writes.fetch_add(1, Relaxed);
                stats.written.fetch_add(written, Relaxed);
            }
            0
        }
        Ok(Err(CowError::NoSpace)) => {
            stats.no_space.fetch_add(1, Relaxed);
            p::ENOSPC
        }
        Ok(Err(CowError::TotalFull)) => {
            // Not this client's doing alone: say so, a few lines at a time.
            static FULL: super::bounds::LogLimit = super::bounds::LogLimit::new();
            stats.no_space.fetch_add(1, Relaxed);
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
        stats.errors.fetch_add(1, Relaxed);
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
struct Out {
    wr: tokio::sync::Mutex<OwnedWriteHalf>,
    exports: Arc<Exports>,
    recorder: Recorder,
    who: Option<Who>,
    /// This connection's payload bytes, for its summary line.
    sent: AtomicU64,
    /// Bytes sent but not yet recorded as root reads.
    pending: AtomicU64,
    stats: Arc<Stats>,
    write_timeout: Duration,
    /// For a client that keeps a boot trace: each request not yet answered, by cookie, with
    /// when it was received.
    traced: Option<std::sync::Mutex<std::collections::HashMap<u64, (Micros, What)>>>,
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
    async fn send(&self, wr: &mut OwnedWriteHalf, batch: &mut Vec<Reply>) -> io::Result<()> {
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
        self.stats.reads.fetch_add(reads, Relaxed);
        self.stats.bytes.fetch_add(payload, Relaxed);
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

/// A request's name in a boot trace.
fn cmd_name(kind: u16) -> &'static str {
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

/// How a READ sent from the reader task ended.
enum Inline {
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
async fn send_cached(
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
    let fd = stream.as_raw_fd();
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
async fn write_replies(out: Arc<Out>, mut rx: mpsc::Receiver<Reply>, broken: CancellationToken) {
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
    let mut wr = out.wr.lock().await;
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, wr.shutdown()).await;
}

#[cfg(test)]
mod tests {
    //! The service's own duties (recording, limits, shutdown), with a minimal client; the
    //! protocol itself is driven by real clients in tests/nbd.rs.
    use super::*;
    use crate::record::{self, Records};
    use tokio::net::TcpListener;

    const IMAGE: usize = 3 << 20;
    const CONFIG: &str = "\
server:
  address: 127.0.0.1
  http: 127.0.0.1:0
  state_dir: var/
  loaders: loaders/
dhcp:
  mode: authoritative
  subnet: 127.0.0.0/8
  range: 127.0.0.100-127.0.0.199
  lease: 1h
images:
  demo: { dir: demo, store: disk }
pools:
  room:
    image: demo
    root: nbd
    cmdline: console=ttyS0
    clients:
      - { macs: \"52:54:00:77:00:10-52:54:00:77:00:1f\" }
";

    struct Setup {
        _dir: tempfile::TempDir,
        addr: SocketAddr,
        shutdown: Shutdown,
        stats: Arc<Stats>,
        recorder: Recorder,
        records: Arc<Records>,
        served: tokio::task::JoinHandle<anyhow::Result<()>>,
    }

    async fn start(limits: Limits) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("demo")).unwrap();
        let bytes: Vec<u8> = (0..IMAGE).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("demo/rootfs.img"), bytes).unwrap();
        let config = Config::parse(&dir.path().join("pools.yaml"), CONFIG).unwrap();
        let shutdown = Shutdown::new();
        let (recorder, records) = record::start(&config.server, &shutdown).await.unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stats = Arc::new(Stats::default());
        let served = tokio::spawn(serve_with(
            listener.into(),
            Arc::new(config),
            recorder.clone(),
            records.clone(),
            crate::service::identity::Identity::default(),
            shutdown.clone(),
            limits,
            stats.clone(),
        ));
        Setup {
            _dir: dir,
            addr,
            shutdown,
            stats,
            recorder,
            records,
            served,
        }
    }

    async fn bounded<T>(f: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(10), f)
            .await
            .expect("nbd service stalled")
    }

    /// Greets and sends NBD_OPT_GO for `demo`; returns the attached stream.
    async fn attach(addr: SocketAddr) -> TcpStream {
        let mut s = bounded(TcpStream::connect(addr)).await.unwrap();
        let mut g = [0; 18];
        bounded(s.read_exact(&mut g)).await.unwrap();
        let mut msg = 3u32.to_be_bytes().to_vec();
        msg.extend_from_slice(&p::IHAVEOPT.to_be_bytes());
        msg.extend_from_slice(&p::OPT_GO.to_be_bytes());
        msg.extend_from_slice(&10u32.to_be_bytes());
        msg.extend_from_slice(&4u32.to_be_bytes());
        msg.extend_from_slice(b"demo");
        msg.extend_from_slice(&0u16.to_be_bytes());
        s.write_all(&msg).await.unwrap();
        loop {
            let mut h = [0; 20];
            bounded(s.read_exact(&mut h)).await.unwrap();
            let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
            let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
            let mut data = vec![0; len as usize];
            bounded(s.read_exact(&mut data)).await.unwrap();
            match kind {
                p::REP_ACK => return s,
                p::REP_INFO => continue,
                other => panic!("GO refused: {other:#x}"),
            }
        }
    }

    async fn expect_closed(s: &mut TcpStream) {
        let mut buf = [0; 1024];
        loop {
            match bounded(s.read(&mut buf)).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    }

    #[tokio::test]
    async fn attach_and_reads_are_recorded_for_the_leased_client() {
        let t = start(Limits::default()).await;
        let mac = "52:54:00:77:00:11".parse().unwrap();
        t.recorder.record(
            Who::Mac(mac),
            Kind::DhcpDiscover {
                pool: None,
                pxe: true,
                ipxe: false,
            },
        );
        t.recorder.record(
            Who::Mac(mac),
            Kind::DhcpAck {
                ip: "127.0.0.1".parse().unwrap(),
                pxe: true,
                ipxe: false,
                pool: "room".into(),
                link: None,
            },
        );
        let mut s = attach(t.addr).await;
        let (chunk, chunks) = (256 << 10, 5u64);
        for i in 0..chunks {
            let req = Request {
                flags: 0,
                kind: p::CMD_READ,
                cookie: i,
                offset: i * chunk as u64,
                len: chunk,
            };
            s.write_all(&req.encode()).await.unwrap();
        }
        let mut reply = vec![0; p::SIMPLE_REPLY_LEN + chunk as usize];
        for _ in 0..chunks {
            bounded(s.read_exact(&mut reply)).await.unwrap();
        }
        let disc = Request {
            flags: 0,
            kind: p::CMD_DISC,
            cookie: 99,
            offset: 0,
            len: 0,
        };
        s.write_all(&disc.encode()).await.unwrap();
        expect_closed(&mut s).await;
        t.shutdown.stop_and_wait().await;
        let boots = t.records.read(|tl| tl.boots().to_vec());
        assert_eq!(boots.len(), 1);
        assert_eq!(boots[0].root, Some(Proto::Nbd));
        assert_eq!(
            boots[0].bytes.get(&Proto::Nbd),
            Some(&(chunks * chunk as u64))
        );
        assert_eq!(t.stats.reads.load(Relaxed), chunks);
    }

    #[tokio::test]
    async fn cached_reads_carry_the_images_bytes_and_a_cut_image_fails_only_its_reads() {
        let t = start(Limits::default()).await;
        // Not leased: read-only, no overlay, so cached READs go out from the mapping.
        let mut s = attach(t.addr).await;
        let len = 1u32 << 20;
        let read = |cookie: u64| Request {
            flags: 0,
            kind: p::CMD_READ,
            cookie,
            offset: len as u64,
            len,
        };
        s.write_all(&read(1).encode()).await.unwrap();
        let mut reply = vec![0; p::SIMPLE_REPLY_LEN + len as usize];
        bounded(s.read_exact(&mut reply)).await.unwrap();
        assert_eq!(reply[..p::SIMPLE_REPLY_LEN], p::simple_reply(0, 1));
        let want: Vec<u8> = (len as usize..2 * len as usize)
            .map(|i| (i % 251) as u8)
            .collect();
        assert!(reply[p::SIMPLE_REPLY_LEN..] == want[..], "bytes differ");
        // The image is cut short under the attached client: its READ is an error, not a
        // signal that takes the daemon down.
        let image = t._dir.path().join("demo/rootfs.img");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&image)
            .unwrap()
            .set_len(0)
            .unwrap();
        s.write_all(&read(2).encode()).await.unwrap();
        let mut head = [0; p::SIMPLE_REPLY_LEN];
        bounded(s.read_exact(&mut head)).await.unwrap();
        assert_eq!(head, p::simple_reply(p::EIO, 2));
        assert_eq!(t.stats.errors.load(Relaxed), 1);
        // The daemon serves on.
        std::fs::write(&image, vec![1u8; 4096]).unwrap();
        let _again = attach(t.addr).await;
        t.shutdown.stop_and_wait().await;
    }

    #[tokio::test]
    async fn connections_past_the_cap_are_closed_and_counted() {
        let limits = Limits {
            max_connections: 2,
            ..Limits::default()
        };
        let t = start(limits).await;
        let _a = attach(t.addr).await;
        let _b = attach(t.addr).await;
        let mut c = bounded(TcpStream::connect(t.addr)).await.unwrap();
        expect_closed(&mut c).await;
        assert_eq!(t.stats.refused.load(Relaxed), 1);
        drop(_a);
        // A freed slot is usable again; the close is noticed asynchronously, so retry.
        let mut d = None;
        for _ in 0..100 {
            let mut s = bounded(TcpStream::connect(t.addr)).await.unwrap();
            let mut g = [0; 18];
            if bounded(s.read_exact(&mut g)).await.is_ok() {
                d = Some(s);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(d.is_some(), "a slot never came free");
        t.shutdown.stop_and_wait().await;
    }

    #[tokio::test]
    async fn shutdown_ends_attached_and_haggling_connections() {
        let t = start(Limits::default()).await;
        let mut attached = attach(t.addr).await;
        let mut haggling = bounded(TcpStream::connect(t.addr)).await.unwrap();
        let mut g = [0; 18];
        bounded(haggling.read_exact(&mut g)).await.unwrap();
        bounded(t.shutdown.stop_and_wait()).await;
        expect_closed(&mut attached).await;
        expect_closed(&mut haggling).await;
        bounded(t.served).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_silent_client_is_dropped_after_the_handshake_deadline() {
        let limits = Limits {
            handshake_timeout: Duration::from_millis(200),
            ..Limits::default()
        };
        let t = start(limits).await;
        let mut s = bounded(TcpStream::connect(t.addr)).await.unwrap();
        // Say nothing: the server must hang up on its own.
        expect_closed(&mut s).await;
        t.shutdown.stop_and_wait().await;
    }
}

//! NFS service: MOUNT and NFSv3 for every image whose pool says `root: nfs`, on the port `app`
//! bound. nfs3_server does the protocol, over our read-only `export::tree::Tree`.
//!
//! Why a relay: nfs3_server only serves connections it accepts itself, and its public
//! per-connection entry (`process_socket`) stamps handles with a start-up time, so handles would
//! go stale on every restart. So it listens on a private loopback port with a fixed generation,
//! and each client connection accepted here is relayed to it. The relay knows the client's
//! address, owns the limits (connection cap, idle timeout, shutdown), and reads the RPC headers
//! going by (`proto::rpcpeek`) to record MNT and READ bytes per client.

use crate::config::{Config, RootProto};
use crate::export::tree::Tree;
use crate::proto::rpcpeek::{self, Records};
use crate::record::{Kind, Proto, Recorder, Who};
use crate::shutdown::Shutdown;
use anyhow::Context as _;
use nfs3_server::tcp::{NFSTcp, NFSTcpListener};
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Fixed, so handles stay valid across restarts; what makes them unique is in `TreeHandle`.
const GENERATION: u64 = 1;
const MAX_CONNECTIONS: usize = 1024;
/// Like knfsd: a client that said nothing for this long is dropped; NFS clients reconnect.
const IDLE: Duration = Duration::from_secs(360);
/// How often READ bytes are reported and idleness checked.
const TICK: Duration = Duration::from_secs(1);
/// Outstanding calls remembered per connection for accounting.
const MAX_PENDING: usize = 4096;
const CONNECT_BACKEND: Duration = Duration::from_secs(5);

/// Streams whose RPC framing could not be followed (accounting stopped for them).
static MALFORMED: AtomicU64 = AtomicU64::new(0);

pub fn malformed_streams() -> u64 {
    MALFORMED.load(Ordering::Relaxed)
}

pub async fn serve(
    listener: TcpListener,
    config: Arc<Config>,
    recorder: Recorder,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let images: BTreeMap<String, _> = config
        .pools
        .values()
        .filter(|p| p.root == RootProto::Nfs)
        .map(|p| (p.image.name.clone(), p.image.root_tree()))
        .collect();
    let tree = Tree::new(images);
    let exports: Vec<&str> = tree.exports().collect();
    tracing::info!(exports = ?exports, "nfs exports");
    let backend = NFSTcpListener::bind_with_generation("127.0.0.1:0", tree, GENERATION)
        .await
        .context("binding the nfs backend on loopback")?;
    let backend_addr = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), backend.get_listen_port());
    let stop = shutdown.clone();
    shutdown.spawn(async move {
        tokio::select! {
            r = backend.handle_forever() => {
                if let Err(e) = r {
                    tracing::error!(error = %e, "nfs backend stopped");
                    stop.trigger();
                }
            }
            _ = stop.wait() => {}
        }
    });

    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.wait() => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "nfs accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(client = %peer, limit = MAX_CONNECTIONS, "nfs connection refused: too many");
            continue;
        };
        let (recorder, stop) = (recorder.clone(), shutdown.clone());
        shutdown.spawn(async move {
            relay(stream, peer, backend_addr, recorder, stop).await;
            drop(slot);
        });
    }
    Ok(())
}

enum Waiting {
    Mount(String),
    Read,
}

/// What the relay has seen on one connection.
#[derive(Default)]
struct Seen {
    waiting: HashMap<u32, Waiting>,
    /// READ payload not yet reported.
    unreported: u64,
    total: u64,
    mounts: u32,
}

impl Seen {
    fn on_call(&mut self, rec: &[u8]) {
        let Some(c) = rpcpeek::call(rec) else { return };
        let what = match (c.prog, c.proc_) {
            (rpcpeek::PROG_NFS, rpcpeek::NFSPROC3_READ) => Waiting::Read,
            (rpcpeek::PROG_MOUNT, rpcpeek::MOUNTPROC3_MNT) => match rpcpeek::mnt_path(c.args) {
                Some(p) => Waiting::Mount(String::from_utf8_lossy(p).into_owned()),
                None => return,
            },
            _ => return,
        };
        if self.waiting.len() < MAX_PENDING {
            self.waiting.insert(c.xid, what);
        }
    }

    fn on_reply(&mut self, rec: &[u8], recorder: &Recorder, who: Who) {
        let Some(r) = rpcpeek::reply(rec) else { return };
        let Some(what) = self.waiting.remove(&r.xid) else {
            return;
        };
        let Some(results) = r.results else { return };
        match what {
            Waiting::Read => {
                let n = u64::from(rpcpeek::read_count(results).unwrap_or(0));
                self.unreported += n;
                self.total += n;
            }
            Waiting::Mount(export) if rpcpeek::mnt_ok(results) => {
                self.mounts += 1;
                recorder.record(
                    who,
                    Kind::RootAttach {
                        proto: Proto::Nfs,
                        export,
                    },
                );
            }
            Waiting::Mount(_) => {}
        }
    }

    fn flush(&mut self, recorder: &Recorder, who: Who) {
        if self.unreported > 0 {
            let bytes = std::mem::take(&mut self.unreported);
            recorder.record(
                who,
                Kind::RootRead {
                    proto: Proto::Nfs,
                    bytes,
                },
            );
        }
    }
}

fn lock(m: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Relays one client connection to the backend until either side closes, the client idles
/// out or the daemon stops.
async fn relay(
    client: TcpStream,
    peer: SocketAddr,
    backend: SocketAddr,
    recorder: Recorder,
    shutdown: Shutdown,
) {
    let ip = match peer.ip() {
        IpAddr::V4(ip) => ip,
        IpAddr::V6(ip) => ip.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
    };
    let who = Who::Ip(ip);
    let server = match tokio::time::timeout(CONNECT_BACKEND, TcpStream::connect(backend)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::error!(client = %peer, error = %e, "nfs backend unreachable");
            return;
        }
        Err(_) => {
            tracing::error!(client = %peer, "nfs backend connect timed out");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let started = Instant::now();
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let seen = Mutex::new(Seen::default());
    // Milliseconds since `started` of the last byte from the client.
    let last_heard = AtomicU64::new(0);

    let up = async {
        let mut buf = vec![0u8; 64 * 1024];
        let mut calls = Records::new();
        let mut peeking = true;
        loop {
            let n = match cr.read(&mut buf).await {
                Ok(0) | Err(_) => return "client closed",
                Ok(n) => n,
            };
            last_heard.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
            if peeking {
                let mut s = lock(&seen);
                if calls.feed(&buf[..n], |rec| s.on_call(rec)).is_err() {
                    peeking = false;
                    MALFORMED.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(client = %peer, "nfs call stream not rpc-framed; not accounting it");
                }
            }
            if sw.write_all(&buf[..n]).await.is_err() {
                return "backend closed";
            }
        }
    };
    let down = async {
        let mut buf = vec![0u8; 256 * 1024];
        let mut replies = Records::new();
        let mut peeking = true;
        loop {
            let n = match sr.read(&mut buf).await {
                Ok(0) | Err(_) => return "backend closed",
                Ok(n) => n,
            };
            if peeking {
                let mut s = lock(&seen);
                if replies
                    .feed(&buf[..n], |rec| s.on_reply(rec, &recorder, who))
                    .is_err()
                {
                    peeking = false;
                    MALFORMED.fetch_add(1, Ordering::Relaxed);
                }
            }
            if cw.write_all(&buf[..n]).await.is_err() {
                return "client closed";
            }
        }
    };
    let watch = async {
        let mut tick = tokio::time::interval(TICK);
        loop {
            tick.tick().await;
            lock(&seen).flush(&recorder, who);
            let quiet = started.elapsed().as_millis() as u64 - last_heard.load(Ordering::Relaxed);
            if quiet > IDLE.as_millis() as u64 {
                return "idle";
            }
        }
    };
    let why = tokio::select! {
        w = up => w,
        w = down => w,
        w = watch => w,
        _ = shutdown.wait() => "shutdown",
    };
    let mut s = lock(&seen);
    s.flush(&recorder, who);
    tracing::info!(
        client = %peer, why, mounts = s.mounts, read_bytes = s.total,
        secs = started.elapsed().as_secs(), "nfs connection ended"
    );
}

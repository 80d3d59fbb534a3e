//! bootpool's client agent (docs/swarm.md): given the URL of an NBD root's block manifest
//! (`http://SERVER/boot/IMAGE/blocks/DIGEST`) on one server or several, it fetches the
//! manifest, checks it against the digest, and serves the root as a read-only NBD export on a
//! local socket, every read answered from chunks fetched on demand from the servers, the next
//! one when one fails, and checked against the manifest. With `--peers` it shares with its
//! room: it asks the server's tracker where a chunk is, fetches it from the peers named first,
//! serves the chunks it holds to them, and prefetches in the tracker's order (`swarm.rs`,
//! `peers.rs`). The block manifest's, NBD's and the tracker's codecs are the daemon's own
//! files, compiled here too (one source for each format; the agent links nothing of the
//! daemon's crate), and so is the sys room's `slabs.rs`, the memory chunks are received into.

#[path = "../../src/image/blocks.rs"]
pub mod blocks;
#[allow(
    dead_code,
    reason = "the daemon's NBD codec, of which the agent uses the read-only half"
)]
#[path = "../../src/proto/nbd.rs"]
mod nbd;
#[path = "../../src/sys/slabs.rs"]
pub mod slabs;
#[path = "../../src/proto/swarm.rs"]
pub mod wire;

pub mod chunks;
pub mod http;
pub mod peers;
pub mod pick;
pub mod serve;
pub mod sources;
pub mod swarm;

use std::sync::Arc;

/// Where the agent serves the root.
#[derive(Debug, Clone)]
pub enum Listen {
    /// `ADDRESS:PORT`; port 0 picks one (`Agent::tcp` tells which).
    Tcp(std::net::SocketAddr),
    Unix(std::path::PathBuf),
}

/// An agent serving: its store, and where it listens.
pub struct Agent {
    pub store: Arc<chunks::Store>,
    /// The TCP address bound, when it listens on TCP.
    pub tcp: Option<std::net::SocketAddr>,
    /// The address it serves peers on, when it shares.
    pub peers: Option<std::net::SocketAddr>,
}

/// Fetches and checks the manifest at `sources` (each a manifest URL or a comma list of them,
/// one a server, tried in that order), binds `listen`, and serves the root as export `name`
/// (and as the default export, "") on threads of its own; the agent, once it listens.
pub fn start(sources: &[&str], listen: &Listen, name: &str) -> Result<Agent, String> {
    start_sharing(sources, listen, name, None)
}

/// As `start`, and with `peers`, an address to serve the room's peers on (port 0 picks one),
/// sharing with the room through the tracker; the swarm's threads: the peer server, a report
/// every `swarm::REPORT_EVERY` at least, and the prefetch in the tracker's order.
pub fn start_sharing(
    sources: &[&str],
    listen: &Listen,
    name: &str,
    peers: Option<std::net::SocketAddr>,
) -> Result<Agent, String> {
    let urls = sources
        .iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.is_empty())
        .map(http::Url::parse)
        .collect::<Result<Vec<_>, _>>()?;
    let mut store = chunks::Store::open(urls)?;
    let peer_listener = match peers {
        Some(addr) => {
            let l = std::net::TcpListener::bind(addr)
                .map_err(|e| format!("binding {addr} for peers: {e}"))?;
            let bound = l.local_addr().map_err(|e| e.to_string())?;
            store.share(bound.port());
            Some((l, bound))
        }
        None => None,
    };
    let store = Arc::new(store);
    let peers = peer_listener.as_ref().map(|(_, bound)| *bound);
    if let Some((l, _)) = peer_listener {
        share(l, &store)?;
    }
    let (listener, tcp) = match listen {
        Listen::Tcp(addr) => {
            let l =
                std::net::TcpListener::bind(addr).map_err(|e| format!("binding {addr}: {e}"))?;
            let bound = l.local_addr().map_err(|e| e.to_string())?;
            (serve::Listener::Tcp(l), Some(bound))
        }
        Listen::Unix(path) => {
            // A socket left by an earlier agent is replaced; any other file is not touched.
            use std::os::unix::fs::FileTypeExt as _;
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
                let _ = std::fs::remove_file(path);
            }
            let l = std::os::unix::net::UnixListener::bind(path)
                .map_err(|e| format!("binding {}: {e}", path.display()))?;
            (serve::Listener::Unix(l), None)
        }
    };
    let (s, n) = (store.clone(), Arc::<str>::from(name));
    std::thread::Builder::new()
        .name("nbd-accept".into())
        .spawn(move || listener.serve(s, n))
        .map_err(|e| e.to_string())?;
    Ok(Agent { store, tcp, peers })
}

/// Chunks fetched ahead at once: each fetch waits a round trip to the tracker and one to a
/// peer or server before its bytes flow, so one at a time leaves a client's link idle
/// between chunks. A corrupting peer may so be asked for this many chunks before its first
/// refusal bans it (none of its bytes is used).
pub const PREFETCH_AT_ONCE: usize = 4;

/// Fetches the chunks of `order`, `PREFETCH_AT_ONCE` at a time, each started in the order's
/// order (a chunk that cannot be had now is read, and fetched, when the kernel asks).
fn prefetch(store: &chunks::Store, order: &[u64]) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..PREFETCH_AT_ONCE.min(order.len()) {
            scope.spawn(|| {
                while let Some(&i) =
                    order.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    let _ = store.chunk(i);
                }
            });
        }
    });
}

/// The swarm's threads: the peer server on `listener`, the reports, and the prefetch.
fn share(listener: std::net::TcpListener, store: &Arc<chunks::Store>) -> Result<(), String> {
    let s = store.clone();
    std::thread::Builder::new()
        .name("peers".into())
        .spawn(move || peers::serve(listener, s))
        .map_err(|e| e.to_string())?;
    let s = store.clone();
    std::thread::Builder::new()
        .name("prefetch".into())
        .spawn(move || {
            let Some(swarm) = s.swarm.as_ref() else {
                return;
            };
            let order = swarm
                .ask(&s.sources, &[], true)
                .and_then(|a| a.order)
                .unwrap_or_default();
            let ahead = order.len();
            prefetch(&s, &order);
            if ahead > 0 {
                eprintln!(
                    "bootpool-agent: prefetched {ahead} chunks; {}",
                    swarm.summary(s.counts.fetched.load(std::sync::atomic::Ordering::Relaxed))
                );
            }
            // The summary again whenever it changed (at most once a second): the last line
            // of the log is what the agent did until then (the storm reads it).
            let mut said =
                swarm.summary(s.counts.fetched.load(std::sync::atomic::Ordering::Relaxed));
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                if swarm.report_due() {
                    swarm.ask(&s.sources, &[], false);
                }
                let now =
                    swarm.summary(s.counts.fetched.load(std::sync::atomic::Ordering::Relaxed));
                if now != said {
                    eprintln!("bootpool-agent: {now}");
                    said = now;
                }
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}

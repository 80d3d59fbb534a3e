//! NBD service: serves the root images (`export::image`) over TCP, read-only or, for images
//! with `cow:`, writable through a per-client copy-on-write overlay (`service::overlays`,
//! `export::cow`), speaking the fixed-newstyle handshake and simple replies of `proto::nbd`.
//! It loads `store: ram` images into memory before serving (a revision learned since at its
//! first attach). It owns the limits: a cap on
//! connections, a handshake deadline, a bound on requests and bytes in flight, TCP keepalive
//! for clients that vanish, write timeouts; and it records each attach and the bytes read.
//!
//! There is no plain idle timeout once a client is attached: a booted kernel client can go
//! minutes without touching its root and would lose it. Keepalive finds peers that powered
//! off. Instead, connections are capped per source address (`limits.nbd_per_client`), and
//! when every slot is taken a new connection takes the slot of the attached connection that
//! has been idle longest, if that one has been idle `limits.nbd_idle_timeout` or more: a
//! quiet booted client is only disconnected when its slot is needed. Addresses that hold no
//! lease of an NBD pool share a small pool of their own (`STRANGERS`) and have
//! `STRANGER_HANDSHAKE` to hear their refusal, so however many addresses a host sends from, it
//! cannot take the room's slots; connections made to an address that is not one of the
//! server's links (the campus side) are closed at once.
//!
//! The rooms: `handshake.rs` (option haggling up to an attached export), `transmit.rs` (the
//! request loop and which path each READ takes), `ops.rs` (requests run on a blocking
//! thread), `reply.rs` (replies and their pooled buffers), `writer.rs` (the sending side:
//! batched writev, inline sends from the page cache or the image's mapping), `idle.rs`
//! (which connection gives its slot up), `conn.rs` (a connection's state and the limits, which
//! the others read). This file holds the accept loop and a connection's life. The files import
//! one way: this one names them, they never name it back.

mod conn;
mod handshake;
mod idle;
mod ops;
mod reply;
mod source;
mod transmit;
mod writer;

pub use conn::Limits;

use super::Carries;
use super::bounds::{Caps, Full, Slot, Slots, Standing};
use crate::boot::exports::ServesFor;
use crate::config::{Config, RootProto};
use crate::export::image::{self, RamImages};
use crate::export::mapping::Mapping;
use crate::record::event::{Detach, now_micros};
use crate::record::{Kind, Proto, Who};
use crate::service::overlays::Overlays;
use crate::trace::format::What;
use conn::{Attached, Conn, Exports};
use handshake::HandshakeEnd;
use idle::IdleConns;
use reply::BufPool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use transmit::TransmitEnd;

/// Addresses with no lease of an NBD pool: enough for a probe to hear its refusal.
const STRANGERS: Caps = Caps {
    total: 16,
    per_address: 2,
};
/// A stranger's handshake ends this long after it began (its options are refused anyway).
const STRANGER_HANDSHAKE: Duration = Duration::from_secs(5);

/// Read buffers held across all connections; one READ may be up to 64 MiB (`MAX_PAYLOAD`).
const BUFFER_BUDGET: usize = 256 << 20;
/// How often image mappings whose file was deleted or replaced are let go of.
const FORGET_STALE_EVERY: Duration = Duration::from_secs(30);

/// The NBD service, within the daemon's `limits` as they stand when each connection arrives.
pub async fn serve(listener: super::Listener, shared: super::Shared) -> anyhow::Result<()> {
    serve_with(listener, shared, |config| Limits::of(&config.limits)).await
}

/// `serve` within the limits `limits_of` the config as it stands when a connection arrives
/// (the daemon's: its `limits` section, which a reload may change).
pub async fn serve_with(
    listener: super::Listener,
    shared: super::Shared,
    limits_of: impl Fn(&Config) -> Limits,
) -> anyhow::Result<()> {
    let super::Shared {
        config: live,
        recorder,
        metrics,
        records,
        identity,
        handover,
        site,
        shutdown,
        ..
    } = shared;
    let config = live.load();
    let limits = limits_of(&config);
    let clients = Caps {
        total: limits.max_connections,
        per_address: limits.per_client,
    };
    let slots = Slots::new(metrics.clone(), |m| &m.nbd().slots, clients, STRANGERS);
    let idle = Arc::new(IdleConns::default());
    static REFUSED: super::bounds::LogLimit = super::bounds::LogLimit::new();
    let buffers = Arc::new(Semaphore::new(BUFFER_BUDGET));
    // Clients that connect meanwhile wait in the listen backlog.
    let c = config.clone();
    let ram = tokio::task::spawn_blocking(move || RamImages::load(&c)).await??;
    let exports = Arc::new(Exports {
        ram: Arc::new(ram),
        pool: BufPool::new(),
        overlays: Overlays::new(&config, limits.cow_grace, shutdown.clone()),
        records,
        identity,
        handover,
    });
    tracing::info!(exports = ?image::export_names(&config), "nbd serving");
    // A connection taken up or accepted, under the config and limits of that moment.
    let new_conn = |peer, config: &Arc<Config>, limits, standing| Conn {
        peer,
        config: config.clone(),
        recorder: recorder.clone(),
        shutdown: shutdown.clone(),
        metrics: metrics.clone(),
        buffers: buffers.clone(),
        exports: exports.clone(),
        limits,
        activity: idle.register(),
        stranger: standing == Standing::Stranger,
    };
    // The connections a restart handed over (`service::handover`): taken up before any new one.
    for handed in exports.handover.take() {
        let Some((stream, peer)) = std::net::TcpStream::set_nonblocking(&handed.stream, true)
            .and_then(|()| TcpStream::from_std(handed.stream))
            .and_then(|s| s.peer_addr().map(|p| (s, p)))
            .map_err(|e| tracing::warn!(error = %e, "nbd connection not taken over"))
            .ok()
        else {
            continue;
        };
        let standing =
            exports
                .identity
                .standing(&config, ServesFor::Root(RootProto::Nbd), peer.ip());
        let Ok(slot) = slots.take(peer.ip(), standing) else {
            tracing::warn!(%peer, "nbd connection not taken over: no slot");
            continue;
        };
        metrics.nbd().connections.inc();
        let conn = new_conn(peer, &config, limits, standing);
        let (export, size, pending) = (handed.export, handed.size, handed.pending);
        // Recorded again: the site's rows of the process before are cleared.
        let recorded = super::record_conn(&site, &stream, peer);
        shutdown.spawn(async move {
            let _held = (slot, recorded);
            conn.resume(stream, &export, size, pending).await;
        });
    }
    let mut sweep = tokio::time::interval(FORGET_STALE_EVERY);
    loop {
        let accepted = tokio::select! {
            r = super::accept(&listener, &shutdown, "nbd", Carries::BlockRoot) => r,
            _ = sweep.tick() => {
                // An image deleted or replaced: free its mapping (and disk space) once unused,
                // and its copy in memory.
                let (ram, config) = (exports.ram.clone(), live.load());
                tokio::task::spawn_blocking(move || {
                    Mapping::forget_stale();
                    ram.drop_removed(&config);
                });
                continue;
            }
        };
        let Some((stream, peer, paced)) = accepted else {
            break;
        };
        // A connection keeps the config it was accepted under: its export stays the one
        // (and the revision) it attached, its limits those of then.
        let config = live.load();
        let limits = limits_of(&config);
        slots.set_client_caps(Caps {
            total: limits.max_connections,
            per_address: limits.per_client,
        });
        let refuse = |why: &'static str| {
            metrics.nbd().full.inc();
            metrics.nbd().refused.inc();
            if let Some(suppressed) = REFUSED.allow() {
                tracing::warn!(%peer, max = limits.max_connections, per_client = limits.per_client,
                    suppressed, "nbd connection refused: {why}");
            }
        };
        if !super::made_to_us(&config, &site, &stream) {
            refuse("not made to an address of the server's links");
            continue;
        }
        let standing =
            exports
                .identity
                .standing(&config, ServesFor::Root(RootProto::Nbd), peer.ip());
        let slot = match slot_for(&slots, &idle, peer.ip(), standing, &limits) {
            Ok(slot) => slot,
            Err(full) => {
                refuse(full.reason());
                continue;
            }
        };
        metrics.nbd().connections.inc();
        let conn = new_conn(peer, &config, limits, standing);
        let recorded = super::record_conn(&site, &stream, peer);
        shutdown.spawn(async move {
            let _held = (slot, paced, recorded);
            conn.run(stream).await;
        });
    }
    let counts = metrics.nbd();
    tracing::info!(
        connections = counts.connections.get(),
        attached = counts.attached.get(),
        refused = counts.full.get(),
        malformed = counts.malformed.get(),
        reads = counts.reads.get(),
        bytes = counts.bytes.get(),
        "nbd stopped"
    );
    Ok(())
}

/// A slot for a connection from `ip`; when every client slot is taken, a client's
/// connection may have the longest-idle attached connection's (which gives it up).
fn slot_for(
    slots: &Slots,
    idle: &IdleConns,
    ip: std::net::IpAddr,
    standing: Standing,
    limits: &Limits,
) -> Result<Slot, Full> {
    match slots.take(ip, standing) {
        Err(Full::Pool) if standing == Standing::Client && idle.evict_one(limits.idle_timeout) => {
            slots.take_over(ip, standing)
        }
        taken => taken,
    }
}

impl Conn {
    async fn run(self, mut stream: TcpStream) {
        let started = Instant::now();
        let received = now_micros();
        let _ = stream.set_nodelay(true);
        if let Err(e) = super::bounds::lose_silent_peers(&stream, self.limits.lost_after) {
            tracing::warn!(peer = %self.peer, error = %e, "nbd cannot set keepalive");
        }

        let deadline = if self.stranger {
            self.limits.handshake_timeout.min(STRANGER_HANDSHAKE)
        } else {
            self.limits.handshake_timeout
        };
        let handshake = tokio::select! {
            r = tokio::time::timeout(deadline, self.handshake(&mut stream)) => r,
            _ = self.shutdown.wait() => return,
        };
        let attached = match handshake {
            Ok(Ok(a)) => a,
            Ok(Err(end)) => {
                if matches!(
                    end,
                    HandshakeEnd::Malformed(_) | HandshakeEnd::TooManyOptions
                ) {
                    self.metrics.nbd().malformed.inc();
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
        self.metrics.nbd().attached.inc();
        let export = attached.image.name().to_string();
        if let Some(who) = self.who() {
            self.recorder.record(
                who,
                Kind::RootAttach {
                    proto: Proto::Nbd,
                    export: export.clone().into(),
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
        self.serve_attached(stream, attached, Vec::new(), started, received)
            .await;
    }

    /// A connection a restart handed over (`service::handover`), attached to `export` (its
    /// revision resolved) of `size` bytes: opened again as the handshake would, and served
    /// from `pending`, the request bytes read and not taken. An export gone or changed in
    /// size since is closed.
    async fn resume(self, mut stream: TcpStream, export: &str, size: u64, pending: Vec<u8>) {
        let (started, received) = (Instant::now(), now_micros());
        if let Err(e) = super::bounds::lose_silent_peers(&stream, self.limits.lost_after) {
            tracing::warn!(peer = %self.peer, error = %e, "nbd cannot set keepalive");
        }
        let attached = match self.reopen(export).await {
            Some(a) if a.image.size() == size => a,
            found => {
                tracing::warn!(peer = %self.peer, export, size, now = ?found.map(|a| a.image.size()),
                    "nbd connection handed over not taken up: its export is gone or changed");
                let _ = tokio::io::AsyncWriteExt::shutdown(&mut stream).await;
                return;
            }
        };
        tracing::info!(peer = %self.peer, export, pending = pending.len(),
            "nbd connection taken over from the daemon before the restart");
        self.serve_attached(stream, attached, pending, started, received)
            .await;
    }

    /// An attached connection's life: its requests served, how it ended logged and recorded;
    /// or, stopped by a restart, handed over to the next program.
    async fn serve_attached(
        &self,
        stream: TcpStream,
        attached: Attached,
        pending: Vec<u8>,
        started: Instant,
        received: crate::record::event::Micros,
    ) {
        let export = attached.image.name().to_string();
        let cow = attached.cow.is_some();
        let size = attached.image.size();
        let (requests, bytes, end, quiet) = self.transmit(stream, attached, pending).await;
        if let Some(quiet) = quiet {
            let stream = quiet.stream.into_std();
            match stream.and_then(|s| s.set_nonblocking(false).map(|()| s)) {
                Ok(stream) => {
                    tracing::info!(peer = %self.peer, %export, requests, bytes,
                        pending = quiet.pending.len(), "nbd connection handed over to the restarted daemon");
                    self.exports
                        .handover
                        .hand(crate::service::handover::Handed {
                            stream,
                            export,
                            size,
                            pending: quiet.pending,
                        });
                    return;
                }
                Err(e) => {
                    tracing::warn!(peer = %self.peer, error = %e, "nbd connection not handed over")
                }
            }
        }
        // How the client left, for the record (a powered-off or restarted client is gone).
        let how = match end {
            TransmitEnd::Disconnect => Some(Detach::Disconnect),
            TransmitEnd::Closed => Some(Detach::Closed),
            TransmitEnd::Reset => Some(Detach::Reset),
            TransmitEnd::Lost => Some(Detach::Lost),
            _ => None,
        };
        if let (Some(how), Some(who)) = (how, self.who()) {
            self.recorder.record(
                who,
                Kind::RootDetach {
                    proto: Proto::Nbd,
                    how,
                    since: Some(received),
                },
            );
        }
        tracing::info!(
            peer = %self.peer, %export, cow, requests, bytes, secs = started.elapsed().as_secs_f64(),
            %end, "nbd connection closed"
        );
    }
}

#[cfg(test)]
mod tests;

//! Portmapper service on the port `app` bound (111 by default), over UDP and TCP, so that stock
//! initramfs tools and `mount -t nfs` find MOUNT and NFS without `port=` options. The answers
//! come from `proto::portmap`; this file owns framing, limits and timeouts.

use crate::metrics::Portmap;
use crate::proto::portmap::{self, Mapping, Outcome};
use crate::shutdown::Shutdown;
use crate::steer::fair_share::Carries;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;

const MAX_CONNECTIONS: usize = 64;
/// A portmapper exchange is one or two calls; a quiet connection is dropped.
const IDLE: Duration = Duration::from_secs(30);

/// The portmapper on each of the server's own addresses: a TCP listener and a UDP socket
/// on each (`app::own_addresses`), one table.
pub async fn serve(
    tcp: Vec<TcpListener>,
    udp: Vec<UdpSocket>,
    shared: super::Shared,
) -> anyhow::Result<()> {
    let super::Shared {
        config,
        metrics,
        shutdown,
        ..
    } = shared;
    // Ports cannot change while the daemon runs (`config::reload`).
    let ports = config.load().server.ports;
    let table: Arc<[Mapping]> = portmap::table(ports.nfs, ports.portmap).into();
    for udp in udp {
        let stop = shutdown.clone();
        let udp_table = table.clone();
        let udp_metrics = metrics.clone();
        shutdown
            .spawn(async move { serve_udp(udp, &udp_table, udp_metrics.portmap(), stop).await });
    }
    // Unlinked listeners (`Listener::from`): a portmapper exchange is neither steered nor
    // paced, so what it carries is never read.
    let tcp: Vec<super::Listener> = tcp.into_iter().map(super::Listener::from).collect();

    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Some((stream, peer, _)) =
            super::accept_any(&tcp, &shutdown, "portmap", Carries::BootFiles).await
        else {
            return Ok(());
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            metrics.portmap().refused.inc();
            tracing::warn!(client = %peer, "portmap connection refused: too many");
            continue;
        };
        let (table, stop, metrics) = (table.clone(), shutdown.clone(), metrics.clone());
        shutdown.spawn(async move {
            tokio::select! {
                _ = connection(stream, &table, metrics.portmap()) => {}
                _ = stop.wait() => {}
            }
            drop(slot);
        });
    }
}

async fn serve_udp(udp: UdpSocket, table: &[Mapping], counts: &Portmap, shutdown: Shutdown) {
    let mut buf = vec![0u8; portmap::MAX_CALL + 1];
    loop {
        let (n, peer) = tokio::select! {
            _ = shutdown.wait() => return,
            r = udp.recv_from(&mut buf) => match r {
                Ok(x) => x,
                // ICMP errors from earlier replies surface here; they are not fatal.
                Err(_) => continue,
            },
        };
        match portmap::answer(&buf[..n], table) {
            Some(a) => {
                counts.requests.inc();
                log(&a.outcome, peer, "udp");
                let _ = udp.send_to(&a.reply, peer).await;
            }
            None => {
                counts.malformed.inc();
            }
        }
    }
}

/// One TCP connection: record-marked calls, each a single fragment no larger than
/// `MAX_CALL`; anything else closes the connection.
async fn connection(mut s: TcpStream, table: &[Mapping], counts: &Portmap) {
    let peer = s.peer_addr().ok();
    let mut call = Vec::with_capacity(portmap::MAX_CALL);
    loop {
        let mut mark = [0u8; 4];
        match tokio::time::timeout(IDLE, s.read_exact(&mut mark)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let word = u32::from_be_bytes(mark);
        let len = (word & 0x7fff_ffff) as usize;
        if word & 0x8000_0000 == 0 || len > portmap::MAX_CALL {
            counts.malformed.inc();
            return;
        }
        call.resize(len, 0);
        match tokio::time::timeout(IDLE, s.read_exact(&mut call)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let Some(a) = portmap::answer(&call, table) else {
            counts.malformed.inc();
            return;
        };
        counts.requests.inc();
        if let Some(peer) = peer {
            log(&a.outcome, peer, "tcp");
        }
        let mut out = Vec::with_capacity(4 + a.reply.len());
        out.extend_from_slice(&(0x8000_0000 | a.reply.len() as u32).to_be_bytes());
        out.extend_from_slice(&a.reply);
        if tokio::time::timeout(IDLE, s.write_all(&out)).await.is_err() {
            return;
        }
    }
}

fn log(outcome: &Outcome, peer: std::net::SocketAddr, transport: &str) {
    match outcome {
        Outcome::GetPort(m) => tracing::debug!(
            client = %peer, transport, prog = m.prog, vers = m.vers, prot = m.prot, port = m.port,
            "portmap getport"
        ),
        Outcome::Refused(why) => {
            tracing::debug!(client = %peer, transport, why, "portmap call refused")
        }
        Outcome::Null | Outcome::Dump => {}
    }
}

//! The clients' consoles: a UDP listener on `server.ports.console` (netconsole's 6666 by
//! default; 514 when iPXE's syslog console is wanted too). A datagram's source address is
//! told apart by the lease table (`identity`), the one answer to who is at an address: a
//! client's lines go to its newest boot's record, a stranger's datagram is dropped and counted
//! (`bootpool_refused_total{service="console"}`). Lines come from `proto::console`.

use super::bounds::LogLimit;
use crate::proto::console;
use tokio::net::UdpSocket;

static STRANGERS: LogLimit = LogLimit::new();
/// Socket receive buffer: some thousands of console lines (capped by `net.core.rmem_max`).
const RECV_BUFFER: usize = 4 << 20;

pub async fn serve(udp: UdpSocket, shared: super::Shared) -> anyhow::Result<()> {
    let super::Shared {
        identity,
        recorder,
        metrics,
        shutdown,
        ..
    } = shared;
    // A kernel's netconsole replays its whole log at once when it starts (hundreds of lines,
    // a datagram each), and a room's clients start theirs within seconds: the kernel queue
    // must hold the burst while this task catches up.
    if let Err(e) = socket2::SockRef::from(&udp).set_recv_buffer_size(RECV_BUFFER) {
        tracing::debug!(error = %e, "console receive buffer not enlarged");
    }
    // Past a UDP datagram's largest payload nothing more can come.
    let mut buf = vec![0u8; 65_536];
    loop {
        let (n, peer) = tokio::select! {
            _ = shutdown.wait() => return Ok(()),
            r = udp.recv_from(&mut buf) => match r {
                Ok(x) => x,
                // ICMP errors surface here; they are not fatal.
                Err(_) => continue,
            },
        };
        let Some(mac) = identity.holder(peer.ip()) else {
            metrics.console().refused.inc();
            if let Some(suppressed) = STRANGERS.allow() {
                tracing::info!(%peer, suppressed, "console datagram from an address no lease holds; dropped");
            }
            continue;
        };
        metrics.console().requests.inc();
        let lines = console::lines(&buf[..n]);
        if !lines.is_empty() {
            recorder.console(mac, lines);
        }
    }
}

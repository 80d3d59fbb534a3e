//! Router advertisements for `dhcp6.router_advertisements: send`: on each of the server's
//! interfaces, every `INTERVAL` and at once to a router solicitation, the advertisement
//! `proto::ra` builds (O flag: boot options from DHCPv6; `dhcp6.subnet` on-link and for
//! SLAAC; not a default router). EDK2 reaches the server only through an on-link prefix
//! (its HTTP boot waits up to 10 s for one), and iPXE starts DHCPv6 only when an advertisement
//! sets M or O (`proto::ra` says why O and not M). The raw ICMPv6 sockets (hop limit 255,
//! joined to ff02::2) are app.rs's.

use crate::proto::ra;
use std::net::{Ipv6Addr, SocketAddrV6};
use std::time::Duration;

/// Between unsolicited advertisements (RFC 4861's MinRtrAdvInterval is 3 s at least).
const INTERVAL: Duration = Duration::from_secs(3);
/// The prefix's valid lifetime in each advertisement.
const PREFIX_VALID_S: u32 = 1800;
/// All nodes on the link.
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// One interface's raw ICMPv6 socket, and its index (the advertisements' scope). The socket is
/// held as tokio's `UdpSocket`, which only wraps a datagram descriptor: `recv_from` and
/// `send_to` are the same system calls on a raw socket, with no unsafe registration of ours.
pub struct Advertiser {
    pub iface: String,
    pub index: u32,
    pub socket: tokio::net::UdpSocket,
}

/// Sends advertisements on every interface until shutdown.
pub async fn serve(advertisers: Vec<Advertiser>, shared: super::Shared) -> anyhow::Result<()> {
    let Some(d) = shared.config.dhcp6.as_ref() else {
        return Ok(());
    };
    let message = ra::advertisement(d.subnet.network, d.subnet.prefix, PREFIX_VALID_S, true);
    let mut tasks = Vec::new();
    for a in advertisers {
        let message = message.clone();
        let shutdown = shared.shutdown.clone();
        tasks.push(tokio::spawn(async move {
            tracing::info!(iface = %a.iface, "sending router advertisements");
            let to = SocketAddrV6::new(ALL_NODES, 0, 0, a.index);
            let mut tick = tokio::time::interval(INTERVAL);
            let mut buf = [0u8; 1500];
            loop {
                let send = tokio::select! {
                    _ = shutdown.wait() => break,
                    _ = tick.tick() => true,
                    r = a.socket.recv_from(&mut buf) => match r {
                        Ok((n, _)) => ra::is_solicitation(&buf[..n]),
                        Err(_) => false,
                    },
                };
                if send && let Err(e) = a.socket.send_to(&message, to).await {
                    tracing::debug!(iface = %a.iface, error = %e, "router advertisement not sent");
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}

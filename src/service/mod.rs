//! I/O shells, one per listener. Each serves the socket `app` bound for it, owns its limits,
//! timeouts and retransmission, and records boot events.

pub mod boot_files;
pub mod bounds;
pub mod dhcp;
pub mod epoll;
pub mod fair_share;
pub mod http;
pub mod identity;
pub mod lease_file;
pub mod metrics;
pub mod nbd;
pub mod nfs;
pub mod overlays;
pub mod page_buf;
pub mod placement;
pub mod portmap;
pub mod quick_read;
pub mod tftp;
pub mod tftp_transfers;
pub mod web;

use crate::shutdown::Shutdown;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use tokio::net::{TcpListener, TcpStream};

/// A peer's IPv4 address, also when a dual-stack socket shows it IPv4-mapped; clients are
/// known by their DHCP lease, which is IPv4.
pub fn ipv4_of(ip: IpAddr) -> Option<Ipv4Addr> {
    match ip {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(a) => a.to_ipv4_mapped(),
    }
}

/// The next connection on `listener`, or `None` once `shutdown` fires. An accept error (out
/// of descriptors and the like) is logged and waited out for 100 ms instead of spinning.
pub async fn accept(
    listener: &TcpListener,
    shutdown: &Shutdown,
    service: &'static str,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        tokio::select! {
            _ = shutdown.wait() => return None,
            r = listener.accept() => match r {
                Ok(x) => return Some(x),
                Err(e) => {
                    tracing::warn!(error = %e, service, "accept failed");
                    tokio::select! {
                        _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
                        _ = shutdown.wait() => return None,
                    }
                }
            },
        }
    }
}

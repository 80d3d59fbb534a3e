//! I/O shells, one per listener. Each serves the socket `app` bound for it, owns its limits,
//! timeouts and retransmission, and records boot events.

pub mod boot_files;
pub mod bounds;
pub mod dhcp;
pub mod epoll;
pub mod http;
pub mod identity;
pub mod lease_file;
pub mod metrics;
pub mod nbd;
pub mod nfs;
pub mod overlays;
pub mod page_buf;
pub mod portmap;
pub mod quick_read;
pub mod tftp;
pub mod tftp_transfers;
pub mod web;

use std::net::{IpAddr, Ipv4Addr};

/// A peer's IPv4 address, also when a dual-stack socket shows it IPv4-mapped; clients are
/// known by their DHCP lease, which is IPv4.
pub fn ipv4_of(ip: IpAddr) -> Option<Ipv4Addr> {
    match ip {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(a) => a.to_ipv4_mapped(),
    }
}

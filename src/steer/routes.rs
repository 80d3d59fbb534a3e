//! A routing table per server link, chosen by a socket mark: what lets the pacer move a
//! client's replies to another link in the middle of a connection (docs/links.md, "Moving
//! clients between links").
//!
//! For the `i`th link: table `mark(i)` holds `SUBNET dev DEVICE src ADDRESS`, and a rule at
//! priority `RULE_PRIORITY + i` sends what carries the mark `mark(i)` to that table. A socket
//! marked so (SO_MARK) sends by that link whatever its source address; what it receives is not
//! filtered by interface, as it would be for a socket bound to one (SO_BINDTODEVICE), so a mark
//! can change while the client goes on sending to the address it was given. Installed at start,
//! idempotently (a route is replaced, an existing rule kept), and left in place at exit: a mark
//! nobody sets routes nothing. Needs CAP_NET_ADMIN; without it the links are bound as before.

use crate::proto::netlink;
use crate::sys::netlink::Netlink;
use std::io::{Error, ErrorKind};
use std::net::Ipv4Addr;

/// The first link's mark and table ("bo" and 1): high enough to stay clear of the small marks
/// and table numbers admins and firewalls use.
const MARK_BASE: u32 = 0x626f_0001;
/// The first link's rule's priority: before the main table's (32766).
pub const RULE_PRIORITY: u32 = 30_000;

/// The mark (and the table) of the `i`th link.
pub fn mark(i: usize) -> u32 {
    MARK_BASE + i as u32
}

/// One link to route: its interface's index and its address.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub ifindex: u32,
    pub address: Ipv4Addr,
}

/// Installs the table and the rule of each of `links` for the subnet `network/prefix`.
pub fn install(links: &[Route], network: Ipv4Addr, prefix: u8) -> std::io::Result<()> {
    let socket = open()?;
    for (i, link) in links.iter().enumerate() {
        let seq = 2 * i as u32 + 1;
        let route = netlink::route_request(
            seq,
            network.octets(),
            prefix,
            link.ifindex,
            link.address.octets(),
            mark(i),
        );
        match ask(&socket, &route)? {
            0 => {}
            e => return Err(Error::from_raw_os_error(-e)),
        }
        let rule = netlink::rule_request(seq + 1, RULE_PRIORITY + i as u32, mark(i), mark(i));
        match ask(&socket, &rule)? {
            0 => {}
            e if -e == libc::EEXIST => {}
            e => return Err(Error::from_raw_os_error(-e)),
        }
    }
    Ok(())
}

fn open() -> std::io::Result<Netlink> {
    let socket = Netlink::open()?;
    socket.set_recv_timeout(std::time::Duration::from_secs(2))?;
    Ok(socket)
}

/// Sends one request and returns the kernel's answer (0, or a negative errno).
fn ask(socket: &Netlink, request: &[u8]) -> std::io::Result<i32> {
    socket.send(request)?;
    let mut buf = [0u8; 1024];
    let n = socket.recv(&mut buf)?;
    netlink::ack(&buf[..n]).ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidData,
            "no netlink answer to a route request",
        )
    })
}

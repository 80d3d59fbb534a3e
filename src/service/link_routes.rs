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
use std::io::{Error, ErrorKind};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

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

fn open() -> std::io::Result<OwnedFd> {
    // SAFETY: socket() returns a new descriptor or -1; a new one is owned here.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: a descriptor just returned by socket() and owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let tv = libc::timeval {
        tv_sec: 2,
        tv_usec: 0,
    };
    // SAFETY: a timeval of the size given, read by the kernel.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(Error::last_os_error());
    }
    Ok(fd)
}

/// Sends one request and returns the kernel's answer (0, or a negative errno).
fn ask(socket: &OwnedFd, request: &[u8]) -> std::io::Result<i32> {
    // SAFETY: sends the bytes of `request`, which outlives the call.
    let sent = unsafe {
        libc::send(
            socket.as_raw_fd(),
            request.as_ptr().cast(),
            request.len(),
            0,
        )
    };
    if sent < 0 {
        return Err(Error::last_os_error());
    }
    let mut buf = [0u8; 1024];
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::recv(socket.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(Error::last_os_error());
    }
    netlink::ack(&buf[..n as usize]).ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidData,
            "no netlink answer to a route request",
        )
    })
}

//! Teaching the kernel a booting client's MAC (an ARP cache entry, SIOCSARP) so that a DHCP
//! answer can go to the client alone, as RFC 2131 4.1 asks when the client has no address yet
//! and did not set the broadcast flag: the kernel cannot ask ARP for an address nobody holds.
//! dnsmasq and ISC dhcpd do the same. Without it every OFFER and ACK is a broadcast that every
//! machine of a room powering on at once must read and throw away.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;

/// Enters `ip` at `mac` in the ARP cache of the interface the kernel routes `ip` through
/// (no device named: the kernel looks the route up, the same lookup the answer's send makes).
/// The entry is an ordinary complete one (ATF_COM): it ages out as any learned entry does and
/// is refreshed by the client's own traffic. Needs CAP_NET_ADMIN.
pub fn teach(socket: &impl AsFd, ip: Ipv4Addr, mac: [u8; 6]) -> io::Result<()> {
    crate::sys::sock::set_arp_entry(socket.as_fd(), ip, mac)
}

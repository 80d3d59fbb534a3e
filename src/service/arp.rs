//! Teaching the kernel a booting client's MAC (an ARP cache entry, SIOCSARP) so that a DHCP
//! answer can go to the client alone, as RFC 2131 4.1 asks when the client has no address yet
//! and did not set the broadcast flag: the kernel cannot ask ARP for an address nobody holds.
//! dnsmasq and ISC dhcpd do the same. Without it every OFFER and ACK is a broadcast that every
//! machine of a room powering on at once must read and throw away.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;

/// Enters `ip` at `mac` in the ARP cache of the interface the kernel routes `ip` through
/// (no device named: the kernel looks the route up, the same lookup the answer's send makes).
/// The entry is an ordinary complete one (ATF_COM): it ages out as any learned entry does and
/// is refreshed by the client's own traffic. Needs CAP_NET_ADMIN.
pub fn teach(socket: &impl AsRawFd, ip: Ipv4Addr, mac: [u8; 6]) -> io::Result<()> {
    // SAFETY: arpreq is plain old data; all-zero is a valid value of it.
    let mut req: libc::arpreq = unsafe { zeroed() };
    let pa = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in fits in the sockaddr it is copied over (both 16 bytes).
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&pa as *const libc::sockaddr_in).cast::<u8>(),
            (&mut req.arp_pa as *mut libc::sockaddr).cast::<u8>(),
            size_of::<libc::sockaddr_in>(),
        );
    }
    req.arp_ha.sa_family = libc::ARPHRD_ETHER;
    for (dst, src) in req.arp_ha.sa_data.iter_mut().zip(mac) {
        *dst = src as libc::c_char;
    }
    req.arp_flags = libc::ATF_COM;
    // SAFETY: SIOCSARP reads one arpreq, which lives for the call; the descriptor is the
    // caller's open socket.
    let r = unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSARP, &req) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

//! Socket calls that neither std, tokio nor socket2 make: `TCP_INFO`, `SO_MAX_PACING_RATE`,
//! `IP_PKTINFO` and the `recvmsg` that reads it, `poll` and a non-blocking `recv`, the ARP
//! cache's `SIOCSARP`, the host's IPv4 addresses (`getifaddrs`), interface indexes, and
//! packet sockets (`AF_PACKET`) with their drop counter.

use std::ffi::CStr;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd};

use super::{check, check_len};

/// SO_MAX_PACING_RATE of asm-generic/socket.h (x86, arm, riscv, ...; sparc's differs), which
/// the libc crate does not export on every target.
#[cfg(not(target_arch = "sparc64"))]
const SO_MAX_PACING_RATE: libc::c_int = 47;
#[cfg(target_arch = "sparc64")]
const SO_MAX_PACING_RATE: libc::c_int = 0x31;

/// `getsockopt(IPPROTO_TCP, TCP_INFO)` into `buf`: how many bytes the kernel wrote.
pub fn tcp_info(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `buf` and says how many.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    Ok((len as usize).min(buf.len()))
}

/// `setsockopt(fd, level, name, value)`: the option's value is `value`'s bytes. The kernel
/// reads exactly `size_of::<T>()` of them (a wrong size for the option is its `EINVAL`), so
/// any plain `T` is memory-safe here; the caller picks the one the option wants.
pub(super) fn set_option<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a live reference to `size_of::<T>()` bytes, read (not written) by
    // the kernel during the call, on a descriptor the caller borrows.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// `SO_MAX_PACING_RATE`: the socket sends at most `rate` bytes/s (all ones: no cap).
pub fn set_max_pacing_rate(fd: BorrowedFd<'_>, rate: libc::c_ulong) -> io::Result<()> {
    set_option(fd, libc::SOL_SOCKET, SO_MAX_PACING_RATE, &rate)
}

/// `IP_PKTINFO` on: each datagram received says which local address it was sent to
/// (`recv_pktinfo`).
pub fn enable_pktinfo(fd: BorrowedFd<'_>) -> io::Result<()> {
    let on: libc::c_int = 1;
    set_option(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, &on)
}

/// One `recvmsg` on an IPv4 UDP socket with `IP_PKTINFO` on: the datagram's length, its
/// sender and the local address a reply should come from (`None` if the kernel did not say).
/// A datagram longer than `buf` is cut short, as `recv_from` cuts it.
pub fn recv_pktinfo(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<(usize, SocketAddr, Option<Ipv4Addr>)> {
    // SAFETY: all-zero is a valid sockaddr_in.
    let mut from: libc::sockaddr_in = unsafe { zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room, aligned for cmsghdr, for the IP_PKTINFO message.
    let mut control = [0u64; 8];
    // SAFETY: all-zero is a valid msghdr (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = (&mut from as *mut libc::sockaddr_in).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: every pointer in `msg` points at a live buffer of the length it states.
    let n = check_len(unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, 0) })?;
    if i32::from(from.sin_family) != libc::AF_INET {
        return Err(io::Error::other("a datagram from a non-IPv4 sender"));
    }
    let peer = SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(from.sin_addr.s_addr)),
        u16::from_be(from.sin_port),
    );
    let mut local = None;
    // SAFETY: walking, with libc's macros, the control messages the kernel wrote into
    // `control` (msg_controllen now says how much); the data of IP_PKTINFO is an in_pktinfo,
    // read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_PKTINFO {
                let info: libc::in_pktinfo = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                // The local address a reply should come from (the destination, for unicast).
                let at = Ipv4Addr::from(u32::from_be(info.ipi_spec_dst.s_addr));
                local = (!at.is_unspecified()).then_some(at);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n, peer.into(), local))
}

/// `poll` for input on `fd` for up to `timeout_ms` milliseconds (0 looks without waiting):
/// whether it is readable. An interrupted wait is an `Interrupted` error.
pub fn poll_readable(fd: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, alive for the call.
    Ok(check(unsafe { libc::poll(&mut pfd, 1, timeout_ms) })? > 0)
}

/// `recv(MSG_DONTWAIT)` into `buf`: `WouldBlock` when nothing waits.
pub fn recv_dontwait(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`, which is valid for them.
    check_len(unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    })
}

/// `SIOCSARP` through `fd` (any IPv4 socket): enters `ip` at `mac` in the ARP cache of the
/// interface the kernel routes `ip` through (no device named), as a complete entry
/// (`ATF_COM`) that ages like a learned one. Needs CAP_NET_ADMIN.
pub fn set_arp_entry(fd: BorrowedFd<'_>, ip: Ipv4Addr, mac: [u8; 6]) -> io::Result<()> {
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
    // SAFETY: sockaddr_in fits in the sockaddr it is copied over (both 16 bytes), and the two
    // are distinct locals.
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
    // SAFETY: SIOCSARP reads one arpreq, which lives for the call; the descriptor is open.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCSARP, &req) })?;
    Ok(())
}

/// Every IPv4 address of this network namespace with the name it is listed under (the
/// interface's, or the address's label such as `eth0:1`), by `getifaddrs`.
pub fn ipv4_addresses() -> io::Result<Vec<(String, Ipv4Addr)>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list that is read here and freed once below.
    check(unsafe { libc::getifaddrs(&mut head) })?;
    let mut out = Vec::new();
    let mut at = head;
    while !at.is_null() {
        // SAFETY: a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*at };
        at = ifa.ifa_next;
        // SAFETY: ifa_addr, when set, points at a sockaddr of the family it names.
        let Some(sa) = (unsafe { ifa.ifa_addr.as_ref() }) else {
            continue;
        };
        if i32::from(sa.sa_family) != libc::AF_INET {
            continue;
        }
        // SAFETY: an AF_INET address is a sockaddr_in; the name is a C string of the list.
        let (sin, name) = unsafe {
            (
                &*(ifa.ifa_addr as *const libc::sockaddr_in),
                CStr::from_ptr(ifa.ifa_name),
            )
        };
        let name = name.to_string_lossy().into_owned();
        out.push((name, Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))));
    }
    // SAFETY: the list from getifaddrs above, freed once; nothing borrowed from it remains.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// `if_nametoindex`: the interface's index, 0 when there is no such interface (errno says
/// why).
pub fn if_index(name: &CStr) -> u32 {
    // SAFETY: a NUL-terminated name that lives for the call.
    unsafe { libc::if_nametoindex(name.as_ptr()) }
}

/// A new packet socket (`AF_PACKET`, `SOCK_DGRAM`: frames without their link header) for
/// the ethertype `proto` (network byte order), close-on-exec.
pub fn packet_socket(proto: u16) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2), taking numbers only; the result is checked before it is owned.
    let raw = check(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::c_int::from(proto),
        )
    })?;
    // SAFETY: `raw` is a descriptor just opened and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Binds a packet socket to the interface `ifindex`, for the ethertype `proto` (network byte
/// order).
pub fn bind_packet(fd: BorrowedFd<'_>, proto: u16, ifindex: u32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value of it.
    let mut at: libc::sockaddr_ll = unsafe { zeroed() };
    at.sll_family = libc::AF_PACKET as u16;
    at.sll_protocol = proto;
    at.sll_ifindex = ifindex as i32;
    // SAFETY: binds an open descriptor to an address of the size given, alive for the call.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&at as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Attaches a classic BPF program (SO_ATTACH_FILTER): the kernel queues on the socket only
/// what the program accepts.
pub fn attach_filter(fd: BorrowedFd<'_>, program: &[libc::sock_filter]) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: the kernel copies `prog` and the `len` instructions it points to during the
    // call; both outlive it.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&prog as *const libc::sock_fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Frames a packet socket dropped for want of room since it was opened, or last asked
/// (`PACKET_STATISTICS`).
pub fn packet_drops(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: tpacket_stats is plain old data; all-zero is a valid value of it.
    let mut st: libc::tpacket_stats = unsafe { zeroed() };
    let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `st`.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut st as *mut libc::tpacket_stats).cast(),
            &mut len,
        )
    })?;
    Ok(u64::from(st.tp_drops))
}

//! Which of the host's addresses a UDP datagram was sent to (IP_PKTINFO), for a socket bound
//! to 0.0.0.0: TFTP answers each request from the address it was asked at, on the link that
//! holds it (a server with several links has several addresses on the clients' subnet).

use std::io;
use std::mem::size_of;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};
use tokio::net::UdpSocket;

/// Asks the kernel to say, with each datagram received on `socket`, where it was sent.
pub fn enable(socket: &impl AsRawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: an int option on a descriptor the caller holds.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_PKTINFO,
            (&on as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The next datagram on an IPv4 socket `enable`d above: its length, its sender and the local
/// address it was sent to (`None` if the kernel did not say). A datagram longer than `buf`
/// is cut short, as `recv_from` cuts it.
pub async fn recv_from(
    socket: &UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, SocketAddr, Option<Ipv4Addr>)> {
    let fd = socket.as_raw_fd();
    socket
        .async_io(tokio::io::Interest::READABLE, || recvmsg(fd, buf))
        .await
}

fn recvmsg(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, SocketAddr, Option<Ipv4Addr>)> {
    // SAFETY: all-zero is a valid sockaddr_in and msghdr.
    let mut from: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room, aligned for cmsghdr, for the IP_PKTINFO message.
    let mut control = [0u64; 8];
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut from as *mut libc::sockaddr_in).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: every pointer in `msg` points at a live buffer of the length it states.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if i32::from(from.sin_family) != libc::AF_INET {
        return Err(io::Error::other("a datagram from a non-IPv4 sender"));
    }
    let peer = SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(from.sin_addr.s_addr)),
        u16::from_be(from.sin_port),
    );
    let mut local = None;
    // SAFETY: walking, with libc's macros, the control messages the kernel wrote into
    // `control` (msg_controllen now says how much); the data of IP_PKTINFO is an in_pktinfo.
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
    Ok((n as usize, peer.into(), local))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_datagram_says_which_address_it_was_sent_to() {
        let socket = UdpSocket::bind("0.0.0.0:0").await.unwrap();
        enable(&socket).unwrap();
        let port = socket.local_addr().unwrap().port();
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for to in [Ipv4Addr::LOCALHOST, Ipv4Addr::new(127, 0, 0, 7)] {
            sender.send_to(b"hello", (to, port)).unwrap();
            let mut buf = [0u8; 3];
            let (n, from, local) = recv_from(&socket, &mut buf).await.unwrap();
            // Cut short like recv_from.
            assert_eq!((n, &buf), (3, b"hel"));
            assert_eq!(from, sender.local_addr().unwrap());
            assert_eq!(local, Some(to));
        }
    }
}

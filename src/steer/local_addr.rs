//! Which of the host's addresses a UDP datagram was sent to (IP_PKTINFO), for a socket bound
//! to 0.0.0.0: TFTP answers each request from the address it was asked at, on the link that
//! holds it (a server with several links has several addresses on the clients' subnet), and
//! DHCP answers an unrelayed request from the subnet of the address it reached.

use crate::sys;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use tokio::net::UdpSocket;

/// Asks the kernel to say, with each datagram received on `socket`, where it was sent.
pub fn enable(socket: &impl AsFd) -> io::Result<()> {
    sys::sock::enable_pktinfo(socket.as_fd())
}

/// The next datagram on an IPv4 socket `enable`d above: its length, its sender and the local
/// address it was sent to (`None` if the kernel did not say). A datagram longer than `buf`
/// is cut short, as `recv_from` cuts it.
pub async fn recv_from(
    socket: &UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, SocketAddr, Option<Ipv4Addr>)> {
    let fd = socket.as_fd();
    socket
        .async_io(tokio::io::Interest::READABLE, || {
            sys::sock::recv_pktinfo(fd, buf)
        })
        .await
}

/// As `recv_from`, without waiting: `WouldBlock` when no datagram is queued.
pub fn try_recv_from(
    socket: &UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, SocketAddr, Option<Ipv4Addr>)> {
    let fd = socket.as_fd();
    socket.try_io(tokio::io::Interest::READABLE, || {
        sys::sock::recv_pktinfo(fd, buf)
    })
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

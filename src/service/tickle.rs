//! Sends tickle ACKs (`proto::tickle`) for connections whose server address this host has
//! just taken over, so their clients reset and reconnect at once (docs/failover.md): one raw
//! IPv4 packet per connection, through a raw socket (CAP_NET_RAW).

use crate::proto::tickle;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::SocketAddrV4;

/// Sends one tickle from each connection's server end to its client end, `(server, client)`;
/// how many were sent, or why none could be (no raw socket: CAP_NET_RAW missing).
pub fn send(conns: &[(SocketAddrV4, SocketAddrV4)]) -> std::io::Result<usize> {
    // IPPROTO_RAW: the packet carries its own IP header (IP_HDRINCL).
    let socket = Socket::new(
        Domain::IPV4,
        Type::RAW,
        Some(Protocol::from(libc::IPPROTO_RAW)),
    )?;
    let mut sent = 0;
    for &(server, client) in conns {
        let end = |a: SocketAddrV4| tickle::End {
            ip: a.ip().octets(),
            port: a.port(),
        };
        let packet = tickle::ack(end(server), end(client));
        match socket.send_to(&packet, &SockAddr::from(client)) {
            Ok(_) => sent += 1,
            Err(e) => tracing::warn!(%server, %client, error = %e, "tickle ACK not sent"),
        }
    }
    Ok(sent)
}

//! A PXE ROM's DHCPDISCOVER, made by hand and broadcast from a namespace, and the OFFERs that
//! come back: what proxy mode answers on port 67 (relay.rs's proxy through dhcrelay, site.rs's
//! proxy members); and the REQUEST such a ROM then sends to its boot server's port 4011. Each call uses a transaction id of its own, so a late offer to an earlier
//! DISCOVER is never counted as an answer to this one.

use super::netns::Link;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// One OFFER as the client read it.
#[derive(Clone, Debug, PartialEq)]
pub struct Offer {
    /// Its server identifier (option 54).
    pub server: Ipv4Addr,
    pub yiaddr: Ipv4Addr,
    /// next-server.
    pub siaddr: Ipv4Addr,
    /// The boot file (option 67), empty when none.
    pub file: String,
}

static XID: AtomicU32 = AtomicU32::new(0x5150_0001);

/// Sends a BIOS PXE firmware's DISCOVER (broadcast flag set, class `PXEClient`, architecture
/// 0) as `mac` on `dev` inside namespace `ns`, and collects the OFFERs to it for `wait`.
pub fn offers(ns: &str, dev: &str, mac: [u8; 6], wait: Duration) -> Vec<Offer> {
    use dhcproto::v4::{DhcpOption, MessageType, OptionCode};
    let dev = dev.to_string();
    Link::within(ns, move || {
        let socket = socket(&dev, Ipv4Addr::UNSPECIFIED);
        socket.set_broadcast(true).unwrap();
        let mut m = firmware(MessageType::Discover, Ipv4Addr::UNSPECIFIED, &mac);
        m.set_flags(dhcproto::v4::Flags::new(0x8000));
        replies(&socket, &m, "255.255.255.255:67", MessageType::Offer, wait)
            .into_iter()
            .map(|r| Offer {
                server: match r.opts().get(OptionCode::ServerIdentifier) {
                    Some(DhcpOption::ServerIdentifier(ip)) => *ip,
                    _ => Ipv4Addr::UNSPECIFIED,
                },
                yiaddr: r.yiaddr(),
                siaddr: r.siaddr(),
                file: boot_file(&r),
            })
            .collect()
    })
}

/// Sends the REQUEST a BIOS PXE firmware sends its boot server on port 4011 once it holds an
/// address (`ciaddr`, which `dev` in namespace `ns` must hold) as `mac`, from port 68, and
/// returns the first ACK's boot file if one came within `wait` (`None`: silence).
pub fn ack_on_4011(
    ns: &str,
    dev: &str,
    mac: [u8; 6],
    ciaddr: Ipv4Addr,
    server: Ipv4Addr,
    wait: Duration,
) -> Option<String> {
    use dhcproto::v4::MessageType;
    let dev = dev.to_string();
    Link::within(ns, move || {
        let socket = socket(&dev, ciaddr);
        let m = firmware(MessageType::Request, ciaddr, &mac);
        let acks = replies(&socket, &m, (server, 4011), MessageType::Ack, wait);
        acks.first().map(boot_file)
    })
}

/// A UDP socket on `dev`, port 68 of `ip`.
fn socket(dev: &str, ip: Ipv4Addr) -> std::net::UdpSocket {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
    socket.bind_device(Some(dev.as_bytes())).unwrap();
    socket.set_reuse_address(true).unwrap();
    let at: std::net::SocketAddr = (ip, 68).into();
    socket.bind(&at.into()).unwrap();
    socket.into()
}

/// A BIOS PXE firmware's message (class `PXEClient`, architecture 0) of `kind` as `mac`, with
/// a transaction id of its own.
fn firmware(
    kind: dhcproto::v4::MessageType,
    ciaddr: Ipv4Addr,
    mac: &[u8; 6],
) -> dhcproto::v4::Message {
    use dhcproto::v4::{self, DhcpOption};
    let xid = XID.fetch_add(1, Ordering::Relaxed);
    let any = Ipv4Addr::UNSPECIFIED;
    let mut m = v4::Message::new_with_id(xid, ciaddr, any, any, any, mac);
    let o = m.opts_mut();
    o.insert(DhcpOption::MessageType(kind));
    o.insert(DhcpOption::ClassIdentifier(
        b"PXEClient:Arch:00000:UNDI:002001".to_vec(),
    ));
    o.insert(DhcpOption::ClientSystemArchitecture(
        v4::Architecture::X86_Bios,
    ));
    m
}

/// Sends `m` to `to` and collects the answers of `kind` to it for `wait`.
fn replies(
    socket: &std::net::UdpSocket,
    m: &dhcproto::v4::Message,
    to: impl std::net::ToSocketAddrs,
    kind: dhcproto::v4::MessageType,
    wait: Duration,
) -> Vec<dhcproto::v4::Message> {
    use dhcproto::{Decodable, Encodable};
    socket.send_to(&m.to_vec().unwrap(), to).unwrap();
    let mut got = Vec::new();
    let end = Instant::now() + wait;
    let mut buf = [0u8; 1500];
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        socket
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        let Ok(n) = socket.recv(&mut buf) else { break };
        let Ok(r) = dhcproto::v4::Message::from_bytes(&buf[..n]) else {
            continue;
        };
        if r.xid() == m.xid() && r.opts().msg_type() == Some(kind) {
            got.push(r);
        }
    }
    got
}

/// The boot file (option 67) of `r`, empty when none.
fn boot_file(r: &dhcproto::v4::Message) -> String {
    use dhcproto::v4::{DhcpOption, OptionCode};
    match r.opts().get(OptionCode::BootfileName) {
        Some(DhcpOption::BootfileName(f)) => String::from_utf8_lossy(f).into_owned(),
        _ => String::new(),
    }
}

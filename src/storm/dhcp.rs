//! A simulated client's DHCP, with the `dhcp4r` crate's codec (not the server's `dhcproto`
//! path, so a misreading the two shared could not hide) and the firmware's timers: PXE
//! retransmits a DISCOVER or REQUEST after 4, 8, 16 and 32 seconds and then gives up (the PXE
//! specification's schedule, which EDK2 and iPXE follow).

use anyhow::{Context, bail};
use dhcp4r::options::{self, DhcpOption, MessageType, RawDhcpOption};
use dhcp4r::packet::Packet;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

/// The PXE schedule: how long each try waits for its answer.
pub const PXE_TIMEOUTS: [u64; 4] = [4, 8, 16, 32];

/// What the client says about itself.
#[derive(Debug, Clone, Copy)]
pub struct Identity {
    pub mac: [u8; 6],
    /// Boot firmware or iPXE (option 60 `PXEClient`, 93, 94, 97).
    pub pxe: bool,
    /// iPXE's user class (option 77 `iPXE`).
    pub ipxe: bool,
    /// Option 93.
    pub arch: u16,
}

/// A lease as the ACK gave it.
#[derive(Debug, Clone)]
pub struct Lease {
    pub ip: Ipv4Addr,
    pub server: Ipv4Addr,
    pub prefix: u8,
    /// siaddr: where the loader comes from over TFTP (unspecified when the ACK names none).
    pub next_server: Ipv4Addr,
    /// Option 67: the loader's name, or (for iPXE) the script's URL.
    pub boot_file: Option<String>,
}

/// An exchange's outcome, with the retransmits it needed.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tries {
    pub retransmits: u32,
}

/// The client's DHCP socket: port 68 on its own link (in its own namespace).
pub fn socket(dev: &str) -> anyhow::Result<UdpSocket> {
    let s = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    s.set_reuse_address(true)?;
    s.set_broadcast(true)?;
    s.bind_device(Some(dev.as_bytes()))
        .with_context(|| format!("binding DHCP to {dev}"))?;
    s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 68).into())
        .context("binding DHCP port 68")?;
    Ok(s.into())
}

fn request_packet(id: &Identity, xid: u32, secs: u16, kind: MessageType) -> Packet {
    let mut options = vec![
        DhcpOption::DhcpMessageType(kind),
        DhcpOption::ParameterRequestList(vec![1, 3, 6, 12, 15, 17, 43, 60, 66, 67, 175]),
        raw(
            options::MAXIMUM_DHCP_MESSAGE_SIZE,
            1472u16.to_be_bytes().to_vec(),
        ),
    ];
    if id.pxe {
        options.push(raw(
            60,
            format!("PXEClient:Arch:{:05}:UNDI:002001", id.arch).into_bytes(),
        ));
        options.push(raw(93, id.arch.to_be_bytes().to_vec()));
        options.push(raw(94, vec![1, 2, 1]));
        let mut uuid = vec![0u8; 17];
        uuid[11..17].copy_from_slice(&id.mac);
        options.push(raw(97, uuid));
    }
    if id.ipxe {
        options.push(raw(77, b"iPXE".to_vec()));
    }
    Packet {
        reply: false,
        hops: 0,
        xid,
        secs,
        broadcast: true,
        ciaddr: Ipv4Addr::UNSPECIFIED,
        yiaddr: Ipv4Addr::UNSPECIFIED,
        siaddr: Ipv4Addr::UNSPECIFIED,
        giaddr: Ipv4Addr::UNSPECIFIED,
        chaddr: id.mac,
        options,
    }
}

fn raw(code: u8, data: Vec<u8>) -> DhcpOption {
    DhcpOption::Unrecognized(RawDhcpOption { code, data })
}

/// Sends `p` until an answer of type `want` for `xid` comes, on the PXE schedule (`scale`
/// stretches or shrinks the waits). A NAK ends the exchange with an error.
fn exchange(
    sock: &UdpSocket,
    p: &mut Packet,
    want: MessageType,
    scale: f64,
    tries: &mut Tries,
    started: Instant,
) -> anyhow::Result<Packet> {
    let to = SocketAddrV4::new(Ipv4Addr::BROADCAST, 67);
    let mut buf = vec![0u8; 1500];
    let mut out = vec![0u8; 1500];
    for (n, secs) in PXE_TIMEOUTS.iter().enumerate() {
        if n > 0 {
            tries.retransmits += 1;
        }
        p.secs = started.elapsed().as_secs().min(u16::MAX as u64) as u16;
        let bytes = p.encode(&mut out).to_vec();
        sock.send_to(&bytes, to).context("sending DHCP")?;
        let deadline = Instant::now() + Duration::from_secs_f64(*secs as f64 * scale);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            sock.set_read_timeout(Some(left))?;
            let n = match sock.recv_from(&mut buf) {
                Ok((n, _)) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            let Ok(reply) = Packet::from(&buf[..n]) else {
                continue;
            };
            if !reply.reply || reply.xid != p.xid || reply.chaddr != p.chaddr {
                continue;
            }
            match reply.message_type() {
                Ok(t) if t == want => return Ok(reply),
                Ok(MessageType::Nak) => bail!("DHCP NAK"),
                _ => continue,
            }
        }
    }
    let want = match want {
        MessageType::Offer => "OFFER",
        _ => "ACK",
    };
    bail!(
        "no DHCP {want} after {} tries over {} s (the firmware gives up)",
        PXE_TIMEOUTS.len(),
        PXE_TIMEOUTS.iter().sum::<u64>()
    )
}

/// An OFFER, kept for the REQUEST that follows it.
pub struct Offer {
    xid: u32,
    yiaddr: Ipv4Addr,
    server: Ipv4Addr,
}

/// DISCOVER until an OFFER comes.
pub fn discover(
    sock: &UdpSocket,
    id: &Identity,
    xid: u32,
    tries: &mut Tries,
) -> anyhow::Result<Offer> {
    let mut discover = request_packet(id, xid, 0, MessageType::Discover);
    let offer = exchange(
        sock,
        &mut discover,
        MessageType::Offer,
        1.0,
        tries,
        Instant::now(),
    )?;
    let server = match offer.option(options::SERVER_IDENTIFIER) {
        Some(DhcpOption::ServerIdentifier(s)) => *s,
        _ => bail!("DHCP OFFER without a server identifier"),
    };
    Ok(Offer {
        xid,
        yiaddr: offer.yiaddr,
        server,
    })
}

/// REQUEST the offered address until the ACK comes.
pub fn request(
    sock: &UdpSocket,
    id: &Identity,
    offer: &Offer,
    tries: &mut Tries,
) -> anyhow::Result<Lease> {
    let mut request = request_packet(id, offer.xid, 0, MessageType::Request);
    request
        .options
        .push(DhcpOption::RequestedIpAddress(offer.yiaddr));
    request
        .options
        .push(DhcpOption::ServerIdentifier(offer.server));
    let ack = exchange(
        sock,
        &mut request,
        MessageType::Ack,
        1.0,
        tries,
        Instant::now(),
    )?;
    // dhcp4r decodes option 1 as a raw option.
    let prefix = match ack.option(options::SUBNET_MASK) {
        Some(DhcpOption::SubnetMask(m)) => u32::from(*m).count_ones() as u8,
        Some(DhcpOption::Unrecognized(r)) if r.data.len() == 4 => {
            u32::from_be_bytes(r.data[..4].try_into().expect("4 bytes")).count_ones() as u8
        }
        _ => bail!("DHCP ACK without a subnet mask"),
    };
    let boot_file = match ack.option(67) {
        Some(DhcpOption::Unrecognized(r)) => Some(String::from_utf8_lossy(&r.data).into_owned()),
        _ => None,
    };
    Ok(Lease {
        ip: ack.yiaddr,
        server: offer.server,
        prefix,
        next_server: ack.siaddr,
        boot_file,
    })
}

//! A simulated client's DHCP, with the `dhcp4r` crate's codec (not the server's `dhcproto`
//! path, so a misreading the two shared could not hide) and the firmware's timers: PXE
//! retransmits a DISCOVER or REQUEST after 4, 8, 16 and 32 seconds and then gives up (the PXE
//! specification's schedule, which EDK2 and iPXE follow).
//!
//! Answers are read off the link (`Frames`, an AF_PACKET socket open for one exchange), as a
//! firmware reads them off its NIC: a client with no address yet that did not set the
//! broadcast flag (iPXE, udhcpc) is answered by unicast to the address it is offered, which the
//! kernel would not hand to a UDP socket of a namespace that does not hold that address.

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
    /// Frames the link socket had no room for (the client fell behind the link).
    pub dropped: u64,
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
        // iPXE and udhcpc leave the flag clear while they have no address; EDK2's and other
        // vendors' PXE firmware set it.
        broadcast: id.pxe && !id.ipxe,
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

/// The server refused the REQUEST (a DHCPNAK): the client starts again from a DISCOVER, as
/// RFC 2131 (3.1, 4.4.1) has it and PXE firmware does (`client::dhcp`).
#[derive(Debug)]
pub struct Nak;

impl std::fmt::Display for Nak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DHCP NAK")
    }
}

impl std::error::Error for Nak {}

/// Sends `p` until an answer of type `want` for `xid` comes, on the PXE schedule (`scale`
/// stretches or shrinks the waits). A NAK ends the exchange with `Nak`. Whatever the
/// outcome, the frames the link's socket had no room for count in `tries`.
fn exchange(
    sock: &UdpSocket,
    p: &mut Packet,
    want: MessageType,
    scale: f64,
    tries: &mut Tries,
    started: Instant,
) -> anyhow::Result<Packet> {
    let frames = Frames::open(sock)?;
    let answer = send_until_answered(sock, &frames, p, want, scale, tries, started);
    tries.dropped += frames.dropped();
    answer
}

/// `exchange`'s tries, reading the answers off `frames`.
fn send_until_answered(
    sock: &UdpSocket,
    frames: &Frames<'_>,
    p: &mut Packet,
    want: MessageType,
    scale: f64,
    tries: &mut Tries,
    started: Instant,
) -> anyhow::Result<Packet> {
    let to = SocketAddrV4::new(Ipv4Addr::BROADCAST, 67);
    let mut buf = vec![0u8; 1600];
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
            let Some(payload) = frames.next(&mut buf, left)? else {
                break;
            };
            let Ok(reply) = Packet::from(payload) else {
                continue;
            };
            if !reply.reply || reply.xid != p.xid || reply.chaddr != p.chaddr {
                continue;
            }
            match reply.message_type() {
                Ok(t) if t == want => return Ok(reply),
                Ok(MessageType::Nak) => return Err(Nak.into()),
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
        Some(DhcpOption::Unrecognized(r)) => Some(boot_file_name(&r.data)),
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

/// Option 67 as firmware reads it: a name that ends at its first NUL, if it has one
/// (dnsmasq sends the C string's terminator with it).
fn boot_file_name(data: &[u8]) -> String {
    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    String::from_utf8_lossy(&data[..end]).into_owned()
}

/// The client's link, read as its NIC would be: every IPv4 datagram to UDP port 68 that
/// arrives on the device the DHCP socket is bound to, whoever it is addressed to. Open for one
/// exchange only (it sees all of the link's traffic); the UDP socket still sends, and whatever
/// the kernel queues on it meanwhile is thrown away, so its buffer cannot fill.
struct Frames<'a> {
    fd: std::os::fd::OwnedFd,
    udp: &'a UdpSocket,
}

impl<'a> Frames<'a> {
    fn open(udp: &'a UdpSocket) -> anyhow::Result<Frames<'a>> {
        use bootpool::sys::sock;
        use std::os::fd::AsFd as _;
        let dev = socket2::SockRef::from(udp)
            .device()?
            .context("the DHCP socket is bound to no device")?;
        let name = std::ffi::CString::new(dev)?;
        let ifindex = sock::if_index(&name);
        if ifindex == 0 {
            return Err(std::io::Error::last_os_error()).context("finding the link's index");
        }
        let proto = (libc::ETH_P_IP as u16).to_be();
        let fd = sock::packet_socket(proto).context("opening a packet socket")?;
        sock::attach_filter(fd.as_fd(), &TO_PORT_68).context("filtering the packet socket")?;
        sock::bind_packet(fd.as_fd(), proto, ifindex).context("binding the packet socket")?;
        Ok(Frames { fd, udp })
    }

    /// The next DHCP payload to port 68 within `wait`, or `None` when the wait is over.
    fn next<'b>(&self, buf: &'b mut [u8], wait: Duration) -> anyhow::Result<Option<&'b [u8]>> {
        use std::os::fd::AsFd as _;
        let deadline = Instant::now() + wait;
        loop {
            self.drain_udp();
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
            match bootpool::sys::sock::poll_readable(self.fd.as_fd(), ms) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
            let n = match bootpool::sys::sock::recv_dontwait(self.fd.as_fd(), buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e.into()),
            };
            if let Some((start, end)) = udp_payload_to_68(&buf[..n]) {
                return Ok(Some(&buf[start..end]));
            }
        }
    }

    /// Throws away what the UDP socket holds (the same answers, when they were broadcast).
    fn drain_udp(&self) {
        let mut scratch = [0u8; 1600];
        let _ = self.udp.set_nonblocking(true);
        while self.udp.recv_from(&mut scratch).is_ok() {}
        let _ = self.udp.set_nonblocking(false);
    }

    /// Frames dropped for want of room since the socket was opened (PACKET_STATISTICS).
    fn dropped(&self) -> u64 {
        use std::os::fd::AsFd as _;
        bootpool::sys::sock::packet_drops(self.fd.as_fd()).unwrap_or(0)
    }
}

/// What the kernel queues on a client's packet socket: whole UDP datagrams to port 68, as
/// `udp_payload_to_68` reads them (a classic BPF program over the IPv4 header, which is where
/// an ETH_P_IP datagram socket's data starts). Without it the socket's buffer also holds every
/// other client's broadcast DISCOVER and REQUEST: a room of 200 powering on at once floods
/// each client's link with 400 frames, which filled the buffer of a client not scheduled in
/// time, and its OFFER was lost among them.
const TO_PORT_68: [libc::sock_filter; 9] = {
    const fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
        libc::sock_filter { code, jt, jf, k }
    }
    [
        op(LD_B_ABS, 0, 0, 9),  // 0: the protocol
        op(JEQ, 0, 6, 17),      // 1: UDP, else 8
        op(LD_H_ABS, 0, 0, 6),  // 2: flags and fragment offset
        op(JSET, 4, 0, 0x3fff), // 3: a fragment: 8
        op(LDX_MSH, 0, 0, 0),   // 4: X = the header's length
        op(LD_H_IND, 0, 0, 2),  // 5: the UDP destination port
        op(JEQ, 0, 1, 68),      // 6: 68, else 8
        op(RET, 0, 0, 0xffff),  // 7: keep it whole
        op(RET, 0, 0, 0),       // 8: not for a DHCP client
    ]
};

// The classic BPF instructions `TO_PORT_68` uses.
/// A = the byte at k.
const LD_B_ABS: u16 = (libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16;
/// A = the half-word at k.
const LD_H_ABS: u16 = (libc::BPF_LD | libc::BPF_H | libc::BPF_ABS) as u16;
/// A = the half-word at X + k.
const LD_H_IND: u16 = (libc::BPF_LD | libc::BPF_H | libc::BPF_IND) as u16;
/// X = 4 x (the byte at k & 0xf): an IPv4 header's length.
const LDX_MSH: u16 = (libc::BPF_LDX | libc::BPF_B | libc::BPF_MSH) as u16;
/// Jump by jt if A == k, else by jf.
const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
/// Jump by jt if A & k != 0, else by jf.
const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
/// Keep k bytes of the packet (0: drop it).
const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// Where the UDP payload of an IPv4 datagram to port 68 lies in `ip`, if it is one (whole,
/// not a fragment).
fn udp_payload_to_68(ip: &[u8]) -> Option<(usize, usize)> {
    let ihl = usize::from(*ip.first()? & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ihl < 20 || ip.len() < ihl + 8 || ip[9] != 17 {
        return None;
    }
    // More fragments, or an offset: not a whole datagram.
    if u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]])).min(ip.len());
    let udp = &ip[ihl..];
    if u16::from_be_bytes([udp[2], udp[3]]) != 68 {
        return None;
    }
    let end = (ihl + usize::from(u16::from_be_bytes([udp[4], udp[5]]))).min(total);
    (end >= ihl + 8).then_some((ihl + 8, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(dport: u16, payload: &[u8], frag: u16) -> Vec<u8> {
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let total = (20 + 8 + payload.len()) as u16;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[6..8].copy_from_slice(&frag.to_be_bytes());
        ip.extend_from_slice(&67u16.to_be_bytes());
        ip.extend_from_slice(&dport.to_be_bytes());
        ip.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 0]);
        ip.extend_from_slice(payload);
        ip
    }

    #[test]
    fn a_datagram_to_port_68_gives_its_payload_and_nothing_else_does() {
        let d = datagram(68, b"offer", 0);
        let (a, b) = udp_payload_to_68(&d).unwrap();
        assert_eq!(&d[a..b], b"offer");
        assert_eq!(udp_payload_to_68(&datagram(67, b"offer", 0)), None);
        // A fragment (more fragments set) is not a whole answer.
        assert_eq!(udp_payload_to_68(&datagram(68, b"offer", 0x2000)), None);
        let mut tcp = datagram(68, b"x", 0);
        tcp[9] = 6;
        assert_eq!(udp_payload_to_68(&tcp), None);
        // Cut short: never past the bytes there are.
        for n in 0..d.len() {
            if let Some((a, b)) = udp_payload_to_68(&d[..n]) {
                assert!(a <= b && b <= n);
            }
        }
        assert_eq!(udp_payload_to_68(&[]), None);
    }

    #[test]
    fn a_boot_file_name_ends_at_its_nul() {
        assert_eq!(boot_file_name(b"undionly.kpxe\0"), "undionly.kpxe");
        assert_eq!(boot_file_name(b"undionly.kpxe"), "undionly.kpxe");
        assert_eq!(
            boot_file_name(b"http://10.78.0.1:8080/boot/script/x.ipxe\0\0"),
            "http://10.78.0.1:8080/boot/script/x.ipxe"
        );
        assert_eq!(boot_file_name(b""), "");
    }

    /// Runs a classic BPF program as the kernel would, for the opcodes `TO_PORT_68` uses: a
    /// load past the packet's end rejects it.
    fn run_filter(program: &[libc::sock_filter], pkt: &[u8]) -> u32 {
        let byte = |at: usize| pkt.get(at).map(|b| u32::from(*b));
        let half = |at: usize| Some(byte(at)? << 8 | byte(at + 1)?);
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        loop {
            let f = program[pc];
            let k = f.k as usize;
            pc += 1;
            let loaded = match f.code {
                LD_B_ABS => byte(k),
                LD_H_ABS => half(k),
                LD_H_IND => half(x as usize + k),
                LDX_MSH => {
                    let Some(b) = byte(k) else { return 0 };
                    x = 4 * (b & 0xf);
                    continue;
                }
                JEQ | JSET => {
                    let hit = if f.code == JEQ {
                        a == f.k
                    } else {
                        a & f.k != 0
                    };
                    pc += usize::from(if hit { f.jt } else { f.jf });
                    continue;
                }
                RET => return f.k,
                other => panic!("opcode {other:#x} not in this interpreter"),
            };
            let Some(v) = loaded else { return 0 };
            a = v;
        }
    }

    #[test]
    fn the_kernel_queues_what_the_reader_takes() {
        let keeps = |pkt: &[u8]| run_filter(&TO_PORT_68, pkt) > 0;
        let offer = datagram(68, b"offer", 0);
        assert!(keeps(&offer));
        // A DISCOVER of another client, a fragment, TCP: not queued.
        assert!(!keeps(&datagram(67, b"discover", 0)));
        assert!(!keeps(&datagram(68, b"offer", 0x2000)));
        assert!(!keeps(&datagram(68, b"offer", 0x0001)));
        let mut tcp = datagram(68, b"x", 0);
        tcp[9] = 6;
        assert!(!keeps(&tcp));
        // The port is found after IP options too.
        let mut long = datagram(68, b"offer", 0);
        long[0] = 0x46;
        long.splice(20..20, [1, 1, 1, 1]);
        assert!(keeps(&long));
        long[0] = 0x45;
        assert!(!keeps(&long), "without the options the port read is theirs");
        // The filter keeps what the reader takes, over every cut of a datagram.
        for n in 0..=offer.len() {
            let cut = &offer[..n];
            if udp_payload_to_68(cut).is_some() {
                assert!(keeps(cut), "cut at {n}");
            }
        }
    }
}

//! DHCPv4 on the wire. Requests are read by our own total pre-pass over the fixed header and
//! the raw options, because dhcproto stops silently at the first option it cannot decode and
//! so can hide options 60/93/97 that boot policy needs. Replies are built with dhcproto.

use core::fmt;
use core::net::Ipv4Addr;
use dhcproto::v4::{self, DhcpOption, Flags, MessageType, Opcode};
use dhcproto::{Encodable, Encoder};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// Fixed BOOTP header (236 bytes) plus the magic cookie.
const HEADER: usize = 236;
const COOKIE: [u8; 4] = [99, 130, 83, 99];
/// Larger than any Ethernet frame; anything bigger is not a DHCP packet we answer.
pub const MAX_PACKET: usize = 1500;
/// BOOTP's minimum message size; some PXE ROMs ignore shorter replies.
const MIN_REPLY: usize = 300;

pub mod opt {
    pub const PAD: u8 = 0;
    pub const REQUESTED_IP: u8 = 50;
    pub const OVERLOAD: u8 = 52;
    pub const MESSAGE_TYPE: u8 = 53;
    pub const SERVER_ID: u8 = 54;
    pub const PARAMS: u8 = 55;
    pub const VENDOR_CLASS: u8 = 60;
    pub const CLIENT_ID: u8 = 61;
    pub const USER_CLASS: u8 = 77;
    pub const RELAY_AGENT: u8 = 82;
    pub const ARCH: u8 = 93;
    pub const NDI: u8 = 94;
    pub const UUID: u8 = 97;
    pub const SUBNET_SELECTION: u8 = 118;
    pub const IPXE_ENCAP: u8 = 175;
    pub const END: u8 = 255;
}

/// Client architecture types from option 93 (RFC 4578, IANA registry).
pub mod arch {
    pub const BIOS: u16 = 0;
    pub const EFI_IA32: u16 = 6;
    pub const EFI_BC: u16 = 7;
    pub const EFI_X64: u16 = 9;
    pub const EFI_ARM64: u16 = 11;
    pub const EFI_IA32_HTTP: u16 = 15;
    pub const EFI_X64_HTTP: u16 = 16;
    pub const EFI_ARM32_HTTP: u16 = 18;
    pub const EFI_ARM64_HTTP: u16 = 19;
}

/// DHCP message types (option 53, RFC 2132 9.6) that clients send.
pub mod msg {
    pub const DISCOVER: u8 = 1;
    pub const REQUEST: u8 = 3;
    pub const DECLINE: u8 = 4;
    pub const RELEASE: u8 = 7;
    pub const INFORM: u8 = 8;
}

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DropReason {
    #[error("shorter than a BOOTP header")]
    Short,
    #[error("longer than {MAX_PACKET} bytes")]
    Long,
    #[error("not a BOOTREQUEST")]
    NotRequest,
    #[error("not Ethernet (htype 1, hlen 6)")]
    NotEthernet,
    #[error("no DHCP magic cookie")]
    NoCookie,
    #[error("no DHCP message type")]
    NoMessageType,
}

/// What a BOOTREQUEST says, read without trusting any option to be well formed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub xid: u32,
    pub secs: u16,
    pub flags: u16,
    pub ciaddr: Ipv4Addr,
    pub giaddr: Ipv4Addr,
    pub mac: [u8; 6],
    /// Option values by code; repeated options are concatenated (RFC 3396).
    pub options: BTreeMap<u8, Vec<u8>>,
    /// The options area ended without END or with a length running past the packet.
    pub truncated: bool,
}

impl Request {
    pub fn broadcast_flag(&self) -> bool {
        self.flags & 0x8000 != 0
    }

    /// Option 53, the DHCP message type.
    pub fn message_type(&self) -> Option<u8> {
        self.fixed::<1>(opt::MESSAGE_TYPE).map(|b| b[0])
    }

    pub fn requested_ip(&self) -> Option<Ipv4Addr> {
        self.fixed::<4>(opt::REQUESTED_IP).map(Ipv4Addr::from)
    }

    pub fn server_id(&self) -> Option<Ipv4Addr> {
        self.fixed::<4>(opt::SERVER_ID).map(Ipv4Addr::from)
    }

    pub fn params(&self) -> &[u8] {
        self.options.get(&opt::PARAMS).map_or(&[], Vec::as_slice)
    }

    pub fn vendor_class(&self) -> Option<&[u8]> {
        self.options.get(&opt::VENDOR_CLASS).map(Vec::as_slice)
    }

    pub fn client_id(&self) -> Option<&[u8]> {
        self.options.get(&opt::CLIENT_ID).map(Vec::as_slice)
    }

    /// Option 93: the first architecture listed (it is a list of 16-bit types).
    pub fn arch(&self) -> Option<u16> {
        let v = self.options.get(&opt::ARCH)?;
        (v.len() >= 2 && v.len() % 2 == 0).then(|| u16::from_be_bytes([v[0], v[1]]))
    }

    /// Option 94: network interface identifier (type, major, minor).
    pub fn ndi(&self) -> Option<[u8; 3]> {
        self.fixed::<3>(opt::NDI)
    }

    /// Option 97: client machine identifier (type 0 then a 16-byte UUID).
    pub fn uuid(&self) -> Option<&[u8]> {
        self.options.get(&opt::UUID).map(Vec::as_slice)
    }

    /// Option 60 starts with `PXEClient` or `HTTPClient`.
    pub fn is_pxe(&self) -> bool {
        self.vendor_class()
            .is_some_and(|v| v.starts_with(b"PXEClient") || v.starts_with(b"HTTPClient"))
    }

    /// Option 60 starts with `HTTPClient`: UEFI HTTP boot, which wants a URL and its class back.
    pub fn is_http_client(&self) -> bool {
        self.vendor_class()
            .is_some_and(|v| v.starts_with(b"HTTPClient"))
    }

    /// iPXE says who it is with user class `iPXE` (option 77, raw or RFC 3004 framed) and
    /// its own encapsulated options (175).
    pub fn is_ipxe(&self) -> bool {
        let user = self.options.get(&opt::USER_CLASS);
        user.is_some_and(|u| u.windows(4).any(|w| w == b"iPXE"))
            || self.options.contains_key(&opt::IPXE_ENCAP)
    }

    /// Option 82, what a relay agent said of the client (RFC 3046), if a relay added it.
    pub fn relay_agent(&self) -> Option<RelayAgent> {
        self.options
            .get(&opt::RELAY_AGENT)
            .map(|v| RelayAgent::parse(v))
    }

    /// Option 118 (RFC 3011): the subnet the client asks to be given an address on.
    pub fn subnet_selection(&self) -> Option<Ipv4Addr> {
        self.fixed::<4>(opt::SUBNET_SELECTION).map(Ipv4Addr::from)
    }

    fn fixed<const N: usize>(&self, code: u8) -> Option<[u8; N]> {
        self.options.get(&code)?.as_slice().try_into().ok()
    }
}

/// Option 82's sub-options bootpool reads (RFC 3046, RFC 3527): who the relay says the client
/// is, and on which subnet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayAgent {
    /// Sub-option 1: the circuit the request came in on (a switch port, a VLAN).
    pub circuit_id: Option<AgentId>,
    /// Sub-option 2: the relay agent itself (its MAC, a name).
    pub remote_id: Option<AgentId>,
    /// Sub-option 5 (RFC 3527): the client's subnet, when giaddr is only where replies go.
    pub link_selection: Option<Ipv4Addr>,
}

impl RelayAgent {
    const CIRCUIT_ID: u8 = 1;
    const REMOTE_ID: u8 = 2;
    const LINK_SELECTION: u8 = 5;

    /// Reads option 82's value: code, length, value sub-options. Total: what a damaged
    /// sub-option leaves unread is absent, and the first of a repeated one counts.
    pub fn parse(value: &[u8]) -> RelayAgent {
        let mut agent = RelayAgent::default();
        let mut rest = value;
        while let [code, len, tail @ ..] = rest {
            let Some(data) = tail.get(..usize::from(*len)) else {
                break;
            };
            match *code {
                Self::CIRCUIT_ID if agent.circuit_id.is_none() => {
                    agent.circuit_id = Some(AgentId(data.to_vec()))
                }
                Self::REMOTE_ID if agent.remote_id.is_none() => {
                    agent.remote_id = Some(AgentId(data.to_vec()))
                }
                Self::LINK_SELECTION if agent.link_selection.is_none() => {
                    agent.link_selection = <[u8; 4]>::try_from(data).ok().map(Ipv4Addr::from)
                }
                _ => {}
            }
            rest = &tail[usize::from(*len)..];
        }
        agent
    }
}

/// Where a relayed request came from, as the lease and the boot record keep it: the relay's
/// address on the client's segment (giaddr) and what its option 82 said of the client, so an
/// admin sees the switch port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relayed {
    pub giaddr: Ipv4Addr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_id: Option<AgentId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_id: Option<AgentId>,
}

impl Request {
    /// Where the request came from, if a relay carried it.
    pub fn relayed(&self) -> Option<Relayed> {
        if self.giaddr.is_unspecified() {
            return None;
        }
        let agent = self.relay_agent().unwrap_or_default();
        Some(Relayed {
            giaddr: self.giaddr,
            circuit_id: agent.circuit_id,
            remote_id: agent.remote_id,
        })
    }
}

/// A relay agent's circuit or remote id: opaque bytes, most often a port's or a switch's name.
/// Shown (and stored) as that text when it is printable ASCII and does not start with `0x`,
/// else as `0x` and its bytes in hex; read back either way.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AgentId(pub Vec<u8>);

impl AgentId {
    fn is_text(&self) -> bool {
        !self.0.is_empty()
            && self.0.iter().all(|b| (0x20..0x7f).contains(b))
            && !self.0.starts_with(b"0x")
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_text() {
            return f.write_str(&String::from_utf8_lossy(&self.0));
        }
        f.write_str("0x")?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl core::str::FromStr for AgentId {
    type Err = core::convert::Infallible;
    /// The inverse of `Display`: `0x` and an even number of hex digits are bytes, anything
    /// else is its own text.
    fn from_str(s: &str) -> Result<AgentId, Self::Err> {
        let hex = s
            .strip_prefix("0x")
            .filter(|h| h.len() % 2 == 0 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        Ok(AgentId(match hex {
            Some(h) => (0..h.len())
                .step_by(2)
                .filter_map(|i| u8::from_str_radix(&h[i..i + 2], 16).ok())
                .collect(),
            None => s.as_bytes().to_vec(),
        }))
    }
}

impl Serialize for AgentId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AgentId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AgentId, D::Error> {
        match String::deserialize(d)?.parse() {
            Ok(id) => Ok(id),
            Err(never) => match never {},
        }
    }
}

/// Reads a BOOTREQUEST. Total: any byte string gives a request or a reason, never a panic.
pub fn parse_request(buf: &[u8]) -> Result<Request, DropReason> {
    if buf.len() > MAX_PACKET {
        return Err(DropReason::Long);
    }
    if buf.len() < HEADER + COOKIE.len() {
        return Err(DropReason::Short);
    }
    if buf[0] != 1 {
        return Err(DropReason::NotRequest);
    }
    if buf[1] != 1 || buf[2] != 6 {
        return Err(DropReason::NotEthernet);
    }
    if buf[HEADER..HEADER + 4] != COOKIE {
        return Err(DropReason::NoCookie);
    }
    let u32_at = |i: usize| u32::from_be_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&buf[28..34]);
    let mut req = Request {
        xid: u32_at(4),
        secs: u16::from_be_bytes([buf[8], buf[9]]),
        flags: u16::from_be_bytes([buf[10], buf[11]]),
        ciaddr: Ipv4Addr::from(u32_at(12)),
        giaddr: Ipv4Addr::from(u32_at(24)),
        mac,
        options: BTreeMap::new(),
        truncated: false,
    };
    req.truncated = !walk_options(&buf[HEADER + 4..], &mut req.options);
    // Option 52 moves more options into the `file` (1) and/or `sname` (2) fields.
    if let Some(&[overload]) = req.options.get(&opt::OVERLOAD).map(Vec::as_slice) {
        if overload & 1 != 0 {
            walk_options(&buf[108..236], &mut req.options);
        }
        if overload & 2 != 0 {
            walk_options(&buf[44..108], &mut req.options);
        }
    }
    if req.message_type().is_none() {
        return Err(DropReason::NoMessageType);
    }
    Ok(req)
}

/// Walks code/length/value triples into `out`; false when the area ends badly (no END, or a
/// length that runs past the end). What was read before the damage is kept.
fn walk_options(area: &[u8], out: &mut BTreeMap<u8, Vec<u8>>) -> bool {
    let mut i = 0;
    while i < area.len() {
        let code = area[i];
        match code {
            opt::PAD => i += 1,
            opt::END => return true,
            _ => {
                let Some(&len) = area.get(i + 1) else {
                    return false;
                };
                let start = i + 2;
                let Some(value) = area.get(start..start + usize::from(len)) else {
                    return false;
                };
                out.entry(code).or_default().extend_from_slice(value);
                i = start + usize::from(len);
            }
        }
    }
    false
}

/// Everything a reply says; the service fills it from policy and the lease table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub kind: ReplyKind,
    pub xid: u32,
    pub flags: u16,
    pub mac: [u8; 6],
    pub ciaddr: Ipv4Addr,
    pub yiaddr: Ipv4Addr,
    pub siaddr: Ipv4Addr,
    pub giaddr: Ipv4Addr,
    pub server_id: Ipv4Addr,
    pub subnet_mask: Option<Ipv4Addr>,
    pub router: Option<Ipv4Addr>,
    pub dns: Vec<Ipv4Addr>,
    /// Option 7 (log server): where iPXE's syslog console sends (UDP 514).
    pub log_server: Option<Ipv4Addr>,
    /// Option 12 (host name): the client's `name`.
    pub host_name: Option<String>,
    pub lease_secs: Option<u32>,
    /// Boot file name (`file` field and option 67).
    pub boot_file: Option<String>,
    /// TFTP server name (option 66); siaddr says the same as an address.
    pub tftp_server: Option<String>,
    /// Option 60 as the client class expects it back (`PXEClient`, `HTTPClient`): PXE ROMs
    /// take an offer without it for a plain address and wait seconds for a proxyDHCP one.
    pub class: Option<ServerClass>,
    /// Option 43 with PXE discovery control: firmware PXE then loads `file` at once.
    pub pxe_discovery: Option<u8>,
    /// Option 97 echoed (PXE spec: a boot server returns the client's machine identifier).
    pub uuid: Option<Vec<u8>>,
    /// Option 175.176 `no-pxedhcp`: iPXE stops waiting for proxyDHCP offers.
    pub ipxe_no_proxy: bool,
    /// Option 56, for a NAK.
    pub message: Option<String>,
    /// Option 82 as the relay sent it, echoed back whole (RFC 3046 2.2); dhcproto writes it
    /// last.
    pub relay_agent: Option<Vec<u8>>,
    /// Option 118 as it was sent, echoed back (RFC 3011 3).
    pub subnet_selection: Option<Ipv4Addr>,
}

/// The class a boot server answers with in option 60.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerClass {
    Pxe,
    Http,
}

impl ServerClass {
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            ServerClass::Pxe => b"PXEClient",
            ServerClass::Http => b"HTTPClient",
        }
    }
}

/// PXE discovery control (option 43 sub-option 6) bit 3: boot the file named in the offer,
/// with no boot server discovery (PXE 2.1, table 2-1).
pub const PXE_BOOT_FILE_ONLY: u8 = 8;
/// PXE vendor sub-option for discovery control.
const PXE_DISCOVERY_CONTROL: u8 = 6;
/// iPXE's encapsulated options (175) sub-option 176: ignore proxyDHCP.
const IPXE_NO_PXEDHCP: u8 = 176;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    Offer,
    Ack,
    Nak,
}

/// Encodes a BOOTREPLY.
pub fn encode_reply(r: &Reply) -> Result<Vec<u8>, dhcproto::error::EncodeError> {
    let mut m = v4::Message::new_with_id(r.xid, r.ciaddr, r.yiaddr, r.siaddr, r.giaddr, &r.mac);
    m.set_opcode(Opcode::BootReply);
    m.set_flags(Flags::new(r.flags));
    let o = m.opts_mut();
    o.insert(DhcpOption::MessageType(match r.kind {
        ReplyKind::Offer => MessageType::Offer,
        ReplyKind::Ack => MessageType::Ack,
        ReplyKind::Nak => MessageType::Nak,
    }));
    o.insert(DhcpOption::ServerIdentifier(r.server_id));
    if let Some(msg) = &r.message {
        o.insert(DhcpOption::Message(msg.clone()));
    }
    if let Some(agent) = &r.relay_agent {
        o.insert(DhcpOption::Unknown(v4::UnknownOption::new(
            v4::OptionCode::RelayAgentInformation,
            agent.clone(),
        )));
    }
    if let Some(subnet) = r.subnet_selection {
        o.insert(DhcpOption::SubnetSelection(subnet));
    }
    if r.kind != ReplyKind::Nak {
        if let Some(mask) = r.subnet_mask {
            o.insert(DhcpOption::SubnetMask(mask));
        }
        if let Some(router) = r.router {
            o.insert(DhcpOption::Router(vec![router]));
        }
        if !r.dns.is_empty() {
            o.insert(DhcpOption::DomainNameServer(r.dns.clone()));
        }
        if let Some(log) = r.log_server {
            o.insert(DhcpOption::LogServer(vec![log]));
        }
        if let Some(name) = &r.host_name {
            o.insert(DhcpOption::Hostname(name.clone()));
        }
        if let Some(secs) = r.lease_secs {
            o.insert(DhcpOption::AddressLeaseTime(secs));
            o.insert(DhcpOption::Renewal(secs / 2));
            o.insert(DhcpOption::Rebinding(secs / 8 * 7));
        }
        if let Some(name) = &r.tftp_server {
            o.insert(DhcpOption::TFTPServerName(name.as_bytes().to_vec()));
        }
        if let Some(file) = &r.boot_file {
            o.insert(DhcpOption::BootfileName(file.as_bytes().to_vec()));
        }
        if let Some(class) = r.class {
            o.insert(DhcpOption::ClassIdentifier(class.as_bytes().to_vec()));
        }
        if let Some(control) = r.pxe_discovery {
            o.insert(DhcpOption::VendorExtensions(vec![
                PXE_DISCOVERY_CONTROL,
                1,
                control,
                opt::END,
            ]));
        }
        // Only a well-formed identifier (type 0, 16 bytes) goes back; it fits one option.
        if let Some(uuid) = r.uuid.as_ref().filter(|u| u.len() == 17 && u[0] == 0) {
            o.insert(DhcpOption::ClientMachineIdentifier(uuid.clone()));
        }
        if r.ipxe_no_proxy {
            o.insert(DhcpOption::Unknown(v4::UnknownOption::new(
                v4::OptionCode::from(opt::IPXE_ENCAP),
                vec![IPXE_NO_PXEDHCP, 1, 1],
            )));
        }
    }
    // The legacy `file` field holds 128 bytes; a longer name travels in option 67 only.
    if let Some(file) = r.boot_file.as_ref().filter(|f| f.len() < 128)
        && r.kind != ReplyKind::Nak
    {
        m.set_fname_str(file);
    }
    let mut buf = Vec::with_capacity(MIN_REPLY);
    m.encode(&mut Encoder::new(&mut buf))?;
    if buf.len() < MIN_REPLY {
        buf.resize(MIN_REPLY, opt::PAD);
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dhcproto::Decodable;

    /// A BOOTREQUEST with the given raw options area (after the cookie).
    pub(crate) fn request(mac: [u8; 6], options: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; HEADER];
        b[0] = 1;
        b[1] = 1;
        b[2] = 6;
        b[4..8].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        b[10] = 0x80;
        b[28..34].copy_from_slice(&mac);
        b.extend_from_slice(&COOKIE);
        b.extend_from_slice(options);
        b
    }

    const MAC: [u8; 6] = [0x52, 0x54, 0, 0x77, 0, 1];

    #[test]
    fn reads_a_pxe_discover() {
        let mut o = vec![53, 1, 1, 93, 2, 0, 7, 94, 3, 1, 3, 16, 60, 9];
        o.extend_from_slice(b"PXEClient");
        o.extend_from_slice(&[97, 17, 0]);
        o.extend_from_slice(&[0xab; 16]);
        o.extend_from_slice(&[55, 3, 1, 3, 67, 255]);
        let r = parse_request(&request(MAC, &o)).unwrap();
        assert_eq!(r.message_type(), Some(1));
        assert_eq!(r.arch(), Some(7));
        assert_eq!(r.ndi(), Some([1, 3, 16]));
        assert_eq!(r.uuid().map(<[u8]>::len), Some(17));
        assert_eq!(r.params(), &[1, 3, 67]);
        assert!(r.is_pxe() && !r.is_ipxe() && !r.truncated && r.broadcast_flag());
        assert_eq!(r.mac, MAC);
        assert_eq!(r.xid, 0x1234_5678);
    }

    #[test]
    fn garbage_before_option_93_does_not_hide_it() {
        // Option 50 with 2 bytes and 54 with 7: both undecodable as addresses. dhcproto gives
        // up at the first; the raw walk skips them by their lengths and still sees 93 and 77.
        let mut o = vec![53, 1, 3, 50, 2, 10, 77, 54, 7, 1, 2, 3, 4, 5, 6, 7];
        o.extend_from_slice(&[93, 2, 0, 9, 77, 4]);
        o.extend_from_slice(b"iPXE");
        o.push(255);
        let raw = request(MAC, &o);
        assert!(
            v4::Message::from_bytes(&raw).is_err()
                || v4::Message::from_bytes(&raw)
                    .unwrap()
                    .opts()
                    .get(v4::OptionCode::ClientSystemArchitecture)
                    .is_none(),
            "dhcproto now reads past damage; the pre-pass may be simplified"
        );
        let r = parse_request(&raw).unwrap();
        assert_eq!(r.arch(), Some(9));
        assert!(r.is_ipxe());
        assert_eq!(r.requested_ip(), None);
        assert_eq!(r.server_id(), None);
    }

    #[test]
    fn truncated_options_keep_what_came_before() {
        let o = [53, 1, 1, 93, 2, 0, 0, 60, 200, b'P', b'X'];
        let r = parse_request(&request(MAC, &o)).unwrap();
        assert!(r.truncated);
        assert_eq!(r.arch(), Some(0));
        assert_eq!(r.vendor_class(), None);
        // A lone code byte at the very end.
        let r = parse_request(&request(MAC, &[53, 1, 1, 61])).unwrap();
        assert!(r.truncated);
    }

    #[test]
    fn repeated_options_concatenate_and_overload_is_followed() {
        let mut raw = request(MAC, &[53, 1, 1, 60, 3, b'P', b'X', b'E', 60, 6]);
        raw.extend_from_slice(b"Client");
        raw.extend_from_slice(&[52, 1, 1, 255]);
        // Option 93 hidden in the `file` field.
        raw[108..113].copy_from_slice(&[93, 2, 0, 6, 255]);
        let r = parse_request(&raw).unwrap();
        assert_eq!(r.vendor_class(), Some(&b"PXEClient"[..]));
        assert_eq!(r.arch(), Some(6));
    }

    #[test]
    fn malformed_packets_are_refused_with_a_reason() {
        let good = request(MAC, &[53, 1, 1, 255]);
        assert_eq!(parse_request(&good[..100]), Err(DropReason::Short));
        assert_eq!(parse_request(&[]), Err(DropReason::Short));
        let mut b = good.clone();
        b[0] = 2;
        assert_eq!(parse_request(&b), Err(DropReason::NotRequest));
        let mut b = good.clone();
        b[2] = 16;
        assert_eq!(parse_request(&b), Err(DropReason::NotEthernet));
        let mut b = good.clone();
        b[HEADER] = 0;
        assert_eq!(parse_request(&b), Err(DropReason::NoCookie));
        let b = request(MAC, &[12, 1, b'x', 255]);
        assert_eq!(parse_request(&b), Err(DropReason::NoMessageType));
        let mut b = good.clone();
        b.resize(MAX_PACKET + 1, 0);
        assert_eq!(parse_request(&b), Err(DropReason::Long));
        // Every prefix and every single-byte corruption is total.
        for n in 0..good.len() {
            let _ = parse_request(&good[..n]);
        }
        for i in 0..good.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut b = good.clone();
                b[i] = v;
                let _ = parse_request(&b);
            }
        }
    }

    /// Option 82's circuit id, remote id and link selection, and option 118, as relays and
    /// clients send them; a damaged sub-option keeps what came before it; both echoed back,
    /// option 82 verbatim and last.
    #[test]
    fn relay_agent_and_subnet_selection_are_read_and_echoed() {
        let agent = [
            1, 4, b'e', b't', b'h', b'0', 2, 6, 0, 0x16, 0x3e, 1, 2, 3, 9, 0, 5, 4, 10, 20, 0, 0,
        ];
        let mut o = vec![53, 1, 1, 118, 4, 10, 30, 0, 0, 82, agent.len() as u8];
        o.extend_from_slice(&agent);
        o.push(255);
        let r = parse_request(&request(MAC, &o)).unwrap();
        let a = r.relay_agent().unwrap();
        assert_eq!(a.circuit_id.unwrap().to_string(), "eth0");
        assert_eq!(a.remote_id.unwrap().to_string(), "0x00163e010203");
        assert_eq!(a.link_selection, Some(Ipv4Addr::new(10, 20, 0, 0)));
        assert_eq!(r.subnet_selection(), Some(Ipv4Addr::new(10, 30, 0, 0)));
        let damaged = RelayAgent::parse(&[1, 2, b'p', b'1', 2, 9, 1, 5, 2, 10, 20]);
        assert_eq!(damaged.circuit_id, Some(AgentId(b"p1".to_vec())));
        assert_eq!((damaged.remote_id, damaged.link_selection), (None, None));
        assert_eq!(RelayAgent::parse(&[5, 2, 10, 20]).link_selection, None);
        for id in [b"Gi1/0/7".to_vec(), vec![0, 1, 2], b"0xab".to_vec(), vec![]] {
            let shown = AgentId(id.clone()).to_string();
            assert_eq!(shown.parse::<AgentId>().unwrap(), AgentId(id), "{shown}");
        }
        let nak = Reply {
            kind: ReplyKind::Nak,
            xid: 7,
            flags: 0,
            mac: MAC,
            ciaddr: Ipv4Addr::UNSPECIFIED,
            yiaddr: Ipv4Addr::UNSPECIFIED,
            siaddr: Ipv4Addr::UNSPECIFIED,
            giaddr: Ipv4Addr::new(10, 20, 0, 1),
            server_id: Ipv4Addr::new(10, 77, 0, 1),
            subnet_mask: None,
            router: None,
            dns: Vec::new(),
            log_server: None,
            host_name: None,
            lease_secs: None,
            boot_file: None,
            tftp_server: None,
            class: None,
            pxe_discovery: None,
            uuid: None,
            ipxe_no_proxy: true,
            message: Some("no".into()),
            relay_agent: Some(agent.to_vec()),
            subnet_selection: Some(Ipv4Addr::new(10, 30, 0, 0)),
        };
        let bytes = encode_reply(&nak).unwrap();
        let mut echoed = vec![82, agent.len() as u8];
        echoed.extend_from_slice(&agent);
        echoed.push(opt::END);
        assert!(
            bytes.windows(echoed.len()).any(|w| w == echoed),
            "option 82 verbatim, then END: {bytes:?}"
        );
        let m = v4::Message::from_bytes(&bytes).unwrap();
        assert_eq!(
            m.opts().get(v4::OptionCode::SubnetSelection),
            Some(&DhcpOption::SubnetSelection(Ipv4Addr::new(10, 30, 0, 0)))
        );
    }

    #[test]
    fn replies_decode_with_what_was_put_in() {
        let reply = Reply {
            kind: ReplyKind::Offer,
            xid: 7,
            flags: 0x8000,
            mac: MAC,
            ciaddr: Ipv4Addr::UNSPECIFIED,
            yiaddr: Ipv4Addr::new(10, 77, 0, 100),
            siaddr: Ipv4Addr::new(10, 77, 0, 1),
            giaddr: Ipv4Addr::UNSPECIFIED,
            server_id: Ipv4Addr::new(10, 77, 0, 1),
            subnet_mask: Some(Ipv4Addr::new(255, 255, 255, 0)),
            router: Some(Ipv4Addr::new(10, 77, 0, 1)),
            dns: vec![Ipv4Addr::new(10, 77, 0, 53)],
            log_server: Some(Ipv4Addr::new(10, 77, 0, 1)),
            host_name: Some("pc07".into()),
            lease_secs: Some(3600),
            boot_file: Some("undionly.kpxe".into()),
            tftp_server: Some("10.77.0.1".into()),
            class: Some(ServerClass::Pxe),
            pxe_discovery: Some(PXE_BOOT_FILE_ONLY),
            uuid: Some([&[0u8][..], &[0xab; 16]].concat()),
            ipxe_no_proxy: true,
            message: None,
            relay_agent: None,
            subnet_selection: None,
        };
        let bytes = encode_reply(&reply).unwrap();
        assert!(bytes.len() >= MIN_REPLY);
        let m = v4::Message::from_bytes(&bytes).unwrap();
        assert_eq!(m.opcode(), Opcode::BootReply);
        assert_eq!(m.xid(), 7);
        assert_eq!(m.yiaddr(), reply.yiaddr);
        assert_eq!(m.siaddr(), reply.siaddr);
        assert_eq!(m.chaddr(), &MAC);
        assert!(m.flags().broadcast());
        // dhcproto's decoder keeps the field's terminating NUL.
        let fname = m.fname().unwrap();
        assert_eq!(fname.split(|b| *b == 0).next(), Some(&b"undionly.kpxe"[..]));
        assert_eq!(m.opts().msg_type(), Some(MessageType::Offer));
        assert_eq!(
            m.opts().get(v4::OptionCode::AddressLeaseTime),
            Some(&DhcpOption::AddressLeaseTime(3600))
        );
        assert_eq!(
            m.opts().get(v4::OptionCode::BootfileName),
            Some(&DhcpOption::BootfileName(b"undionly.kpxe".to_vec()))
        );
        assert_eq!(
            m.opts().get(v4::OptionCode::LogServer),
            Some(&DhcpOption::LogServer(vec![Ipv4Addr::new(10, 77, 0, 1)]))
        );
        assert_eq!(
            m.opts().get(v4::OptionCode::Hostname),
            Some(&DhcpOption::Hostname("pc07".into()))
        );
        assert_eq!(
            m.opts().get(v4::OptionCode::ClassIdentifier),
            Some(&DhcpOption::ClassIdentifier(b"PXEClient".to_vec()))
        );
        assert_eq!(
            m.opts().get(v4::OptionCode::VendorExtensions),
            Some(&DhcpOption::VendorExtensions(vec![6, 1, 8, 255]))
        );
        assert_eq!(
            m.opts().get(v4::OptionCode::ClientMachineIdentifier),
            Some(&DhcpOption::ClientMachineIdentifier(
                reply.uuid.clone().unwrap()
            ))
        );
        let ipxe = m.opts().get(v4::OptionCode::from(opt::IPXE_ENCAP));
        assert!(
            matches!(ipxe, Some(DhcpOption::Unknown(u)) if u.data() == [176, 1, 1]),
            "{ipxe:?}"
        );
        // A malformed identifier is not echoed; HTTP boot gets its own class back.
        let other = encode_reply(&Reply {
            uuid: Some(vec![1, 2, 3]),
            class: Some(ServerClass::Http),
            ..reply.clone()
        })
        .unwrap();
        let m = v4::Message::from_bytes(&other).unwrap();
        assert!(
            m.opts()
                .get(v4::OptionCode::ClientMachineIdentifier)
                .is_none()
        );
        assert_eq!(
            m.opts().get(v4::OptionCode::ClassIdentifier),
            Some(&DhcpOption::ClassIdentifier(b"HTTPClient".to_vec()))
        );
        let nak = encode_reply(&Reply {
            kind: ReplyKind::Nak,
            message: Some("address not yours".into()),
            ..reply
        })
        .unwrap();
        let m = v4::Message::from_bytes(&nak).unwrap();
        assert_eq!(m.opts().msg_type(), Some(MessageType::Nak));
        assert!(m.opts().get(v4::OptionCode::AddressLeaseTime).is_none());
        assert_eq!(m.fname(), None);
    }
}

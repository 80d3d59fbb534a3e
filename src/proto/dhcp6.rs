//! DHCPv6 on the wire (RFC 8415, with RFC 5970's network boot options 59-62). Requests are read
//! by our own total pre-pass, as on the v4 side: dhcproto's v6 decoder knows neither the
//! boot-file URL (59) nor its parameters (60) nor the client link-layer address (79), and
//! stops at the first option it cannot decode. Replies are built with dhcproto's v6 types,
//! the boot options as its `Unknown` options. Also how a client's MAC is read from what it
//! sent: its DUID (DUID-LL, DUID-LLT), its EUI-64 link-local source address, or option 79;
//! and the Client FQDN option (RFC 4704) that carries the client's name back.

use core::net::Ipv6Addr;
use dhcproto::v6::{self, DhcpOption, IAAddr, IANA, MessageType, Status, StatusCode};
use dhcproto::{Encodable, Encoder};
use std::collections::BTreeMap;

/// Larger than any Ethernet frame's UDP payload; anything bigger is dropped.
pub const MAX_PACKET: usize = 1500;
/// Longest DUID a client may send (RFC 8415 11.1: 128 octets after the type).
const MAX_DUID: usize = 130;
/// IA_NAs read from one message; a client asks for one per interface.
const MAX_IAS: usize = 8;

pub mod opt {
    pub const CLIENT_ID: u16 = 1;
    pub const SERVER_ID: u16 = 2;
    pub const IA_NA: u16 = 3;
    pub const IA_ADDR: u16 = 5;
    pub const ORO: u16 = 6;
    pub const RELAY_MSG: u16 = 9;
    pub const RAPID_COMMIT: u16 = 14;
    pub const USER_CLASS: u16 = 15;
    pub const VENDOR_CLASS: u16 = 16;
    pub const INTERFACE_ID: u16 = 18;
    pub const DNS_SERVERS: u16 = 23;
    pub const CLIENT_FQDN: u16 = 39;
    pub const BOOTFILE_URL: u16 = 59;
    pub const BOOTFILE_PARAM: u16 = 60;
    pub const CLIENT_ARCH: u16 = 61;
    pub const NII: u16 = 62;
    pub const CLIENT_LINKLAYER: u16 = 79;
}

/// Message types (RFC 8415 7.3) clients send.
pub mod msg {
    pub const SOLICIT: u8 = 1;
    pub const REQUEST: u8 = 3;
    pub const CONFIRM: u8 = 4;
    pub const RENEW: u8 = 5;
    pub const REBIND: u8 = 6;
    pub const RELEASE: u8 = 8;
    pub const DECLINE: u8 = 9;
    pub const INFORMATION_REQUEST: u8 = 11;
    /// A relay's message to a server, the client's (or another relay's) inside (RFC 8415 9).
    pub const RELAY_FORW: u8 = 12;
    /// A server's answer to a relay, the answer to the client inside.
    pub const RELAY_REPL: u8 = 13;
}

/// Relays a message may have come through (RFC 8415 7.6: HOP_COUNT_LIMIT).
const MAX_HOPS: usize = 8;
/// A RELAY-FORW's fixed part: type, hop count, link address, peer address.
const RELAY_HEADER: usize = 34;

/// The enterprise number EDK2 (and so OVMF) puts in its vendor class (option 16): 343, Intel.
pub const EDK2_ENTERPRISE: u32 = 343;

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DropReason {
    #[error("shorter than a DHCPv6 header")]
    Short,
    #[error("longer than {MAX_PACKET} bytes")]
    Long,
    #[error("not a message a client sends to a server")]
    NotClientMessage,
    #[error("an option's length runs past the end of the message")]
    Truncated,
    #[error("no client identifier (or one longer than a DUID may be)")]
    NoClientId,
    #[error("a relay message without the message it relays, or through more than 8 relays")]
    BadRelay,
}

/// One relay a client's message came through (RFC 8415 9.1), as its RELAY-FORW said: what
/// the RELAY-REPL carrying the answer back repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayHop {
    pub hop_count: u8,
    /// An address on the client's link (`::` when the relay has none to give).
    pub link_address: Ipv6Addr,
    /// Where the relay heard the message from: the client, or the relay below it.
    pub peer_address: Ipv6Addr,
    /// Option 18, the relay's name for the interface it heard on, echoed back.
    pub interface_id: Option<Vec<u8>>,
}

/// Unwraps RELAY-FORW messages: the relays, the server's side first, and the message inside
/// the last (a client's, for `parse_request`). A message that is not relayed comes back with
/// no relays. Total.
pub fn unwrap_relays(buf: &[u8]) -> Result<(Vec<RelayHop>, &[u8]), DropReason> {
    if buf.len() > MAX_PACKET {
        return Err(DropReason::Long);
    }
    let mut hops = Vec::new();
    let mut message = buf;
    while message.first() == Some(&msg::RELAY_FORW) {
        if hops.len() == MAX_HOPS {
            return Err(DropReason::BadRelay);
        }
        let head = message.get(..RELAY_HEADER).ok_or(DropReason::Short)?;
        let address = |at: usize| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&head[at..at + 16]);
            Ipv6Addr::from(a)
        };
        let mut area = &message[RELAY_HEADER..];
        let (mut inner, mut interface_id) = (None, None);
        while !area.is_empty() {
            let (code, value, rest) = next_option(area).ok_or(DropReason::Truncated)?;
            area = rest;
            match code {
                opt::RELAY_MSG => inner = inner.or(Some(value)),
                opt::INTERFACE_ID => interface_id = interface_id.or(Some(value.to_vec())),
                _ => {}
            }
        }
        hops.push(RelayHop {
            hop_count: head[1],
            link_address: address(2),
            peer_address: address(18),
            interface_id,
        });
        message = inner.ok_or(DropReason::BadRelay)?;
    }
    Ok((hops, message))
}

/// `reply` (an encoded ADVERTISE or REPLY) inside a RELAY-REPL for each of `hops`, the relay
/// nearest the client innermost (RFC 8415 19.3); `None` if that outgrows an option's length.
pub fn wrap_relays(hops: &[RelayHop], reply: Vec<u8>) -> Option<Vec<u8>> {
    hops.iter().rev().try_fold(reply, |inner, hop| {
        let mut m = vec![msg::RELAY_REPL, hop.hop_count];
        m.extend_from_slice(&hop.link_address.octets());
        m.extend_from_slice(&hop.peer_address.octets());
        if let Some(id) = &hop.interface_id {
            m.extend_from_slice(&opt::INTERFACE_ID.to_be_bytes());
            m.extend_from_slice(&u16::try_from(id.len()).ok()?.to_be_bytes());
            m.extend_from_slice(id);
        }
        m.extend_from_slice(&opt::RELAY_MSG.to_be_bytes());
        m.extend_from_slice(&u16::try_from(inner.len()).ok()?.to_be_bytes());
        m.extend_from_slice(&inner);
        Some(m)
    })
}

/// One IA_NA a client asked for: its IAID and the addresses it named in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IaNa {
    pub iaid: u32,
    pub addrs: Vec<Ipv6Addr>,
}

/// What a client message says, read without trusting any option to be well formed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub msg_type: u8,
    pub xid: [u8; 3],
    /// Option 1, the client's DUID.
    pub client_id: Vec<u8>,
    /// Option values by code, the first of each code (IA_NAs are in `ia_na`).
    pub options: BTreeMap<u16, Vec<u8>>,
    pub ia_na: Vec<IaNa>,
}

impl Request {
    pub fn server_id(&self) -> Option<&[u8]> {
        self.options.get(&opt::SERVER_ID).map(Vec::as_slice)
    }

    pub fn rapid_commit(&self) -> bool {
        self.options.contains_key(&opt::RAPID_COMMIT)
    }

    /// Option 6: the options the client asks for.
    pub fn requested(&self) -> Vec<u16> {
        let v = self.options.get(&opt::ORO).map_or(&[][..], Vec::as_slice);
        v.chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect()
    }

    /// Option 61: the first architecture listed (RFC 4578's types, as option 93 on v4).
    pub fn arch(&self) -> Option<u16> {
        let v = self.options.get(&opt::CLIENT_ARCH)?;
        (v.len() >= 2 && v.len() % 2 == 0).then(|| u16::from_be_bytes([v[0], v[1]]))
    }

    /// Option 16's class strings after the enterprise number (`PXEClient:Arch:...`,
    /// `HTTPClient:Arch:...`).
    pub fn vendor_classes(&self) -> Vec<&[u8]> {
        let v = self
            .options
            .get(&opt::VENDOR_CLASS)
            .map_or(&[][..], Vec::as_slice);
        v.get(4..).map(opaque_list).unwrap_or_default()
    }

    /// Option 15's user classes (iPXE says `iPXE`).
    pub fn user_classes(&self) -> Vec<&[u8]> {
        let v = self
            .options
            .get(&opt::USER_CLASS)
            .map_or(&[][..], Vec::as_slice);
        opaque_list(v)
    }

    /// A vendor class starts with `PXEClient` or `HTTPClient`: boot firmware.
    pub fn is_pxe(&self) -> bool {
        self.vendor_classes()
            .iter()
            .any(|c| c.starts_with(b"PXEClient") || c.starts_with(b"HTTPClient"))
    }

    /// A vendor class starts with `HTTPClient`: UEFI HTTP boot.
    pub fn is_http_client(&self) -> bool {
        self.vendor_classes()
            .iter()
            .any(|c| c.starts_with(b"HTTPClient"))
    }

    /// The flags of the client's Client FQDN option (39, RFC 4704) when it sent one and asks
    /// for it in option 6: only then may a server send the option back (RFC 4704 section 6).
    pub fn asks_fqdn(&self) -> Option<u8> {
        let flags = *self.options.get(&opt::CLIENT_FQDN)?.first()?;
        self.requested()
            .contains(&opt::CLIENT_FQDN)
            .then_some(flags)
    }

    /// iPXE's user class.
    pub fn is_ipxe(&self) -> bool {
        self.user_classes().iter().any(|c| *c == b"iPXE")
    }

    /// Option 79 (RFC 6939, added by a relay): an Ethernet client's link-layer address.
    pub fn client_linklayer(&self) -> Option<[u8; 6]> {
        let v = self.options.get(&opt::CLIENT_LINKLAYER)?;
        match v.as_slice() {
            [0, 1, mac @ ..] => mac.try_into().ok(),
            _ => None,
        }
    }

    /// The client's MAC, from the first that says it: its DUID (LL or LLT over Ethernet), the
    /// EUI-64 link-local address it sent from, option 79. `None`: known only by its DUID.
    pub fn mac(&self, source: Ipv6Addr) -> Option<[u8; 6]> {
        mac_of_duid(&self.client_id)
            .or_else(|| mac_of_link_local(source))
            .or_else(|| self.client_linklayer())
    }
}

/// A list of 16-bit-length-prefixed opaque strings (option 15's and 16's data); stops at the
/// first that runs past the end.
fn opaque_list(mut v: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while let [a, b, rest @ ..] = v {
        let len = usize::from(u16::from_be_bytes([*a, *b]));
        let Some(item) = rest.get(..len) else { break };
        out.push(item);
        v = &rest[len..];
    }
    out
}

/// The Ethernet address in a DUID-LLT (type 1) or DUID-LL (type 3) of hardware type 1.
pub fn mac_of_duid(duid: &[u8]) -> Option<[u8; 6]> {
    match duid {
        [0, 1, 0, 1, _, _, _, _, mac @ ..] | [0, 3, 0, 1, mac @ ..] => mac.try_into().ok(),
        _ => None,
    }
}

/// The MAC inside an EUI-64 link-local address (fe80::/64, `ff:fe` in the middle, the
/// universal/local bit flipped back), as firmware and iPXE form theirs.
pub fn mac_of_link_local(ip: Ipv6Addr) -> Option<[u8; 6]> {
    let b = ip.octets();
    let link_local = b[0] == 0xfe && b[1] == 0x80 && b[2..8].iter().all(|&x| x == 0);
    (link_local && b[11] == 0xff && b[12] == 0xfe)
        .then(|| [b[8] ^ 0x02, b[9], b[10], b[13], b[14], b[15]])
}

/// The address a client with `mac` forms for itself in the /64 `prefix` (SLAAC with an
/// EUI-64 interface identifier, RFC 4862 and RFC 4291 appendix A), as iPXE does.
pub fn eui64(prefix: Ipv6Addr, mac: [u8; 6]) -> Ipv6Addr {
    let mut b = prefix.octets();
    b[8..].copy_from_slice(&[
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ]);
    Ipv6Addr::from(b)
}

/// Reads a client message. Total: any byte string gives a request or a reason, never a panic.
pub fn parse_request(buf: &[u8]) -> Result<Request, DropReason> {
    if buf.len() > MAX_PACKET {
        return Err(DropReason::Long);
    }
    let [msg_type, x0, x1, x2, rest @ ..] = buf else {
        return Err(DropReason::Short);
    };
    let mut area = rest;
    let client_messages = [
        msg::SOLICIT,
        msg::REQUEST,
        msg::CONFIRM,
        msg::RENEW,
        msg::REBIND,
        msg::RELEASE,
        msg::DECLINE,
        msg::INFORMATION_REQUEST,
    ];
    if !client_messages.contains(msg_type) {
        return Err(DropReason::NotClientMessage);
    }
    let mut options = BTreeMap::new();
    let mut ia_na = Vec::new();
    while !area.is_empty() {
        let (code, value, rest) = next_option(area).ok_or(DropReason::Truncated)?;
        area = rest;
        if code == opt::IA_NA {
            if let Some(ia) = read_ia_na(value)
                && ia_na.len() < MAX_IAS
            {
                ia_na.push(ia);
            }
        } else {
            options.entry(code).or_insert_with(|| value.to_vec());
        }
    }
    let client_id = options
        .remove(&opt::CLIENT_ID)
        .filter(|d| (3..=MAX_DUID).contains(&d.len()));
    // An INFORMATION-REQUEST may leave out its client identifier (RFC 8415 18.2.6); then
    // nothing ties it to a client, and there is nothing to boot from it.
    let client_id = client_id.ok_or(DropReason::NoClientId)?;
    Ok(Request {
        msg_type: *msg_type,
        xid: [*x0, *x1, *x2],
        client_id,
        options,
        ia_na,
    })
}

/// The first option of `area`: code, value and what follows; `None` if its length runs past.
fn next_option(area: &[u8]) -> Option<(u16, &[u8], &[u8])> {
    let [c0, c1, l0, l1, rest @ ..] = area else {
        return None;
    };
    let len = usize::from(u16::from_be_bytes([*l0, *l1]));
    let value = rest.get(..len)?;
    Some((u16::from_be_bytes([*c0, *c1]), value, &rest[len..]))
}

/// IA_NA: IAID, T1, T2, then options, of which the IA addresses are kept.
fn read_ia_na(v: &[u8]) -> Option<IaNa> {
    let (head, mut area) = (v.get(..12)?, &v[12..]);
    let iaid = u32::from_be_bytes(head[..4].try_into().ok()?);
    let mut addrs = Vec::new();
    while let Some((code, value, rest)) = next_option(area) {
        area = rest;
        if code == opt::IA_ADDR
            && let Some(a) = value.get(..16)
            && addrs.len() < MAX_IAS
        {
            let a: [u8; 16] = a.try_into().ok()?;
            addrs.push(Ipv6Addr::from(a));
        }
    }
    Some(IaNa { iaid, addrs })
}

/// What an IA_NA of a reply says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IaAnswer {
    /// This address, for these preferred and valid lifetimes (seconds).
    Address {
        addr: Ipv6Addr,
        preferred: u32,
        valid: u32,
    },
    /// The IA with a status and no address (NoAddrsAvail, NoBinding, ...).
    Status(Status, &'static str),
}

/// Everything a reply says; the service fills it from policy and its bindings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// ADVERTISE or REPLY.
    pub advertise: bool,
    pub xid: [u8; 3],
    pub client_id: Vec<u8>,
    pub server_id: Vec<u8>,
    /// One answer per IA_NA the client sent, by IAID.
    pub ia_na: Vec<(u32, IaAnswer)>,
    /// A status for the whole message (RELEASE, DECLINE, CONFIRM's answers).
    pub status: Option<(Status, &'static str)>,
    pub rapid_commit: bool,
    /// Option 16 with the class the firmware looks for (`HTTPClient`): EDK2's HTTP boot takes
    /// an offer as a boot offer only with it.
    pub class: Option<&'static [u8]>,
    pub dns: Vec<Ipv6Addr>,
    /// Option 59, the boot file's URL (`tftp://[ADDR]/NAME` or `http://[ADDR]:PORT/...`).
    pub boot_url: Option<String>,
    /// Option 39, the client's name, for a client that sent option 39 with these flags and
    /// asked for it (`Request::asks_fqdn`).
    pub fqdn: Option<(String, u8)>,
}

/// Option 39's flags (RFC 4704 4.1): S, the server updates the AAAA record; O, the server
/// overrode the client's S; N, the server updates no DNS record.
mod fqdn_flag {
    pub const S: u8 = 0x01;
    pub const O: u8 = 0x02;
    pub const N: u8 = 0x04;
}

/// Option 39's value for `name` answering a client's `flags`: bootpool updates no DNS, so N
/// is set and S clear, and O says so when the client had asked the server to (S). The name in
/// RFC 1035's wire form: fully qualified (ending in the root's empty label) when given with a
/// final dot, else partial (the client's domain to be added), as a bare host name is.
pub fn client_fqdn(name: &str, flags: u8) -> Vec<u8> {
    let overridden = if flags & fqdn_flag::S != 0 {
        fqdn_flag::O
    } else {
        0
    };
    let mut v = vec![fqdn_flag::N | overridden];
    let (labels, qualified) = match name.strip_suffix('.') {
        Some(n) => (n, true),
        None => (name, false),
    };
    for label in labels.split('.').filter(|l| !l.is_empty()) {
        let label = &label.as_bytes()[..label.len().min(63)];
        v.push(label.len() as u8);
        v.extend_from_slice(label);
    }
    if qualified {
        v.push(0);
    }
    v
}

/// A server DUID of type DUID-EN (RFC 8415 11.3) under the documentation enterprise number
/// 32473 (RFC 5612), identified by `id` (the server's IPv6 address): stable across restarts.
pub fn server_duid(id: Ipv6Addr) -> Vec<u8> {
    let mut duid = vec![0, 2];
    duid.extend_from_slice(&32473u32.to_be_bytes());
    duid.extend_from_slice(&id.octets());
    duid
}

/// Encodes an ADVERTISE or REPLY. dhcproto keeps options sorted by code, so the boot-file URL
/// (59) comes after the vendor class: EDK2 reads the URL as a C string, and what follows it
/// in the message (nothing, here) must not run into it.
pub fn encode_reply(r: &Reply) -> Result<Vec<u8>, dhcproto::error::EncodeError> {
    let kind = if r.advertise {
        MessageType::Advertise
    } else {
        MessageType::Reply
    };
    let mut m = v6::Message::new_with_id(kind, r.xid);
    let o = m.opts_mut();
    o.insert(DhcpOption::ClientId(r.client_id.clone()));
    o.insert(DhcpOption::ServerId(r.server_id.clone()));
    for (iaid, answer) in &r.ia_na {
        let mut inner = v6::DhcpOptions::new();
        match answer {
            IaAnswer::Address {
                addr,
                preferred,
                valid,
            } => inner.insert(DhcpOption::IAAddr(IAAddr {
                addr: *addr,
                preferred_life: *preferred,
                valid_life: *valid,
                opts: v6::DhcpOptions::new(),
            })),
            IaAnswer::Status(status, msg) => inner.insert(DhcpOption::StatusCode(StatusCode {
                status: *status,
                msg: (*msg).to_string(),
            })),
        }
        let valid = match answer {
            IaAnswer::Address { valid, .. } => *valid,
            IaAnswer::Status(..) => 0,
        };
        o.insert(DhcpOption::IANA(IANA {
            id: *iaid,
            t1: valid / 2,
            t2: valid / 8 * 7,
            opts: inner,
        }));
    }
    if let Some((status, msg)) = r.status {
        o.insert(DhcpOption::StatusCode(StatusCode {
            status,
            msg: msg.to_string(),
        }));
    }
    if r.rapid_commit {
        o.insert(DhcpOption::RapidCommit);
    }
    // Built by hand: dhcproto 0.15 writes option 16's length as 4 plus the number of class
    // strings, not their bytes, and EDK2 then finds no class in it.
    if let Some(class) = r.class {
        let mut v = EDK2_ENTERPRISE.to_be_bytes().to_vec();
        v.extend_from_slice(&(class.len() as u16).to_be_bytes());
        v.extend_from_slice(class);
        o.insert(DhcpOption::Unknown(v6::UnknownOption::new(
            v6::OptionCode::from(opt::VENDOR_CLASS),
            v,
        )));
    }
    if !r.dns.is_empty() {
        o.insert(DhcpOption::DomainNameServers(r.dns.clone()));
    }
    if let Some((name, flags)) = &r.fqdn {
        o.insert(DhcpOption::Unknown(v6::UnknownOption::new(
            v6::OptionCode::from(opt::CLIENT_FQDN),
            client_fqdn(name, *flags),
        )));
    }
    if let Some(url) = &r.boot_url {
        o.insert(DhcpOption::Unknown(v6::UnknownOption::new(
            v6::OptionCode::from(opt::BOOTFILE_URL),
            url.as_bytes().to_vec(),
        )));
    }
    let mut out = Vec::with_capacity(256);
    m.encode(&mut Encoder::new(&mut out))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dhcproto::Decodable;

    fn option(code: u16, value: &[u8]) -> Vec<u8> {
        let mut o = code.to_be_bytes().to_vec();
        o.extend_from_slice(&(value.len() as u16).to_be_bytes());
        o.extend_from_slice(value);
        o
    }

    /// A SOLICIT as OVMF's HTTP boot sends it: DUID-LLT, an IA_NA, ORO 59 60 23 16, NII,
    /// arch 16 and the vendor class `HTTPClient:Arch:00016:UNDI:003000` under 343.
    fn edk2_solicit() -> Vec<u8> {
        let mut m = vec![msg::SOLICIT, 0x12, 0x34, 0x56];
        m.extend(option(
            opt::CLIENT_ID,
            &[0, 1, 0, 1, 1, 2, 3, 4, 0x52, 0x54, 0, 0x77, 1, 2],
        ));
        m.extend(option(opt::IA_NA, &[0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0]));
        m.extend(option(opt::ORO, &[0, 59, 0, 60, 0, 23, 0, 16]));
        m.extend(option(opt::NII, &[1, 3, 0]));
        m.extend(option(opt::CLIENT_ARCH, &[0, 16]));
        let class = b"HTTPClient:Arch:00016:UNDI:003000";
        let mut v = EDK2_ENTERPRISE.to_be_bytes().to_vec();
        v.extend_from_slice(&(class.len() as u16).to_be_bytes());
        v.extend_from_slice(class);
        m.extend(option(opt::VENDOR_CLASS, &v));
        m
    }

    #[test]
    fn reads_what_edk2_http_boot_sends() {
        let r = parse_request(&edk2_solicit()).unwrap();
        assert_eq!(r.msg_type, msg::SOLICIT);
        assert_eq!(r.xid, [0x12, 0x34, 0x56]);
        assert_eq!(r.arch(), Some(16));
        assert!(r.is_pxe() && r.is_http_client() && !r.is_ipxe());
        assert_eq!(r.requested(), vec![59, 60, 23, 16]);
        assert_eq!(
            r.ia_na,
            vec![IaNa {
                iaid: 9,
                addrs: vec![]
            }]
        );
        assert_eq!(
            r.mac(Ipv6Addr::UNSPECIFIED),
            Some([0x52, 0x54, 0, 0x77, 1, 2])
        );
    }

    #[test]
    fn a_mac_from_the_duid_the_link_local_source_or_option_79() {
        assert_eq!(
            mac_of_duid(&[0, 3, 0, 1, 0x52, 0x54, 0, 1, 2, 3]),
            Some([0x52, 0x54, 0, 1, 2, 3])
        );
        // DUID-UUID (iPXE, some firmware) names no MAC; nor does an LL of another hardware.
        assert_eq!(mac_of_duid(&[0, 4, 1, 2, 3, 4, 5, 6, 7, 8]), None);
        assert_eq!(mac_of_duid(&[0, 3, 0, 6, 1, 2, 3, 4, 5, 6]), None);
        let ll: Ipv6Addr = "fe80::5054:ff:fe77:102".parse().unwrap();
        assert_eq!(mac_of_link_local(ll), Some([0x52, 0x54, 0, 0x77, 1, 2]));
        assert_eq!(
            eui64("fe80::".parse().unwrap(), [0x52, 0x54, 0, 0x77, 1, 2]),
            ll
        );
        // A privacy or stable-random link-local address hides it.
        let random: Ipv6Addr = "fe80::1c2d:3e4f:5a6b:7c8d".parse().unwrap();
        assert_eq!(mac_of_link_local(random), None);
        let global: Ipv6Addr = "fd77::5054:ff:fe77:102".parse().unwrap();
        assert_eq!(mac_of_link_local(global), None);
        let mut m = vec![msg::SOLICIT, 0, 0, 1];
        m.extend(option(opt::CLIENT_ID, &[0, 4, 9, 9, 9, 9, 9, 9, 9, 9]));
        m.extend(option(opt::CLIENT_LINKLAYER, &[0, 1, 2, 0, 0, 0, 0, 7]));
        let r = parse_request(&m).unwrap();
        assert_eq!(r.mac(ll), Some([0x52, 0x54, 0, 0x77, 1, 2]));
        assert_eq!(r.mac(random), Some([2, 0, 0, 0, 0, 7]));
    }

    #[test]
    fn drops_what_no_client_sends() {
        assert_eq!(parse_request(&[1, 2]), Err(DropReason::Short));
        assert_eq!(
            parse_request(&[msg::SOLICIT, 0, 0, 0]),
            Err(DropReason::NoClientId)
        );
        // ADVERTISE (a server's) and RELAY-FORW (12).
        assert_eq!(
            parse_request(&[2, 0, 0, 0]),
            Err(DropReason::NotClientMessage)
        );
        assert_eq!(
            parse_request(&[12, 0, 0, 0]),
            Err(DropReason::NotClientMessage)
        );
        let mut cut = edk2_solicit();
        cut.pop();
        assert_eq!(parse_request(&cut), Err(DropReason::Truncated));
        assert_eq!(
            parse_request(&vec![1; MAX_PACKET + 1]),
            Err(DropReason::Long)
        );
    }

    /// A RELAY-FORW as a relay sends it, with `inner` and an interface id.
    fn relay_forw(hop: u8, link: &str, peer: &str, inner: &[u8]) -> Vec<u8> {
        let mut m = vec![msg::RELAY_FORW, hop];
        m.extend_from_slice(&link.parse::<Ipv6Addr>().unwrap().octets());
        m.extend_from_slice(&peer.parse::<Ipv6Addr>().unwrap().octets());
        m.extend(option(opt::INTERFACE_ID, format!("port{hop}").as_bytes()));
        m.extend(option(opt::RELAY_MSG, inner));
        m
    }

    /// Two relays: unwrapped to the client's SOLICIT, each hop's addresses and interface id
    /// read; the answer wrapped back in one RELAY-REPL per hop, the same addresses and ids, the
    /// client's relay innermost. Damaged relay messages are refused, and every cut is total.
    #[test]
    fn relayed_messages_are_unwrapped_and_answers_wrapped_back() {
        let solicit = edk2_solicit();
        let near = relay_forw(0, "fd77:20::1", "fe80::5054:ff:fe77:5", &solicit);
        let far = relay_forw(1, "::", "fd77:30::1", &near);
        let (hops, inner) = unwrap_relays(&far).unwrap();
        assert_eq!(inner, &solicit[..]);
        assert!(parse_request(inner).is_ok());
        assert_eq!(hops.len(), 2);
        assert_eq!(
            hops[1].link_address,
            "fd77:20::1".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            hops[1].peer_address,
            "fe80::5054:ff:fe77:5".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(hops[0].interface_id.as_deref(), Some(&b"port1"[..]));
        let (none, same) = unwrap_relays(&solicit).unwrap();
        assert!(none.is_empty() && same == &solicit[..]);
        let answer = vec![7u8, 1, 2, 3];
        let wrapped = wrap_relays(&hops, answer.clone()).unwrap();
        let expected_near = {
            let mut m = near.clone();
            m[0] = msg::RELAY_REPL;
            let at = m.len() - solicit.len() - 2;
            m.truncate(at);
            m.extend_from_slice(&(answer.len() as u16).to_be_bytes());
            m.extend_from_slice(&answer);
            m
        };
        let mut expected = far.clone();
        expected[0] = msg::RELAY_REPL;
        let at = expected.len() - near.len() - 2;
        expected.truncate(at);
        expected.extend_from_slice(&(expected_near.len() as u16).to_be_bytes());
        expected.extend_from_slice(&expected_near);
        assert_eq!(wrapped, expected);
        // No relayed message inside; too many hops; a cut anywhere.
        let mut empty = vec![msg::RELAY_FORW, 0];
        empty.extend_from_slice(&[0; 32]);
        assert_eq!(unwrap_relays(&empty), Err(DropReason::BadRelay));
        let mut deep = solicit.clone();
        for hop in 0..=8 {
            deep = relay_forw(hop, "::", "::", &deep);
        }
        assert_eq!(unwrap_relays(&deep), Err(DropReason::BadRelay));
        for cut in 0..far.len() {
            let _ = unwrap_relays(&far[..cut]);
        }
    }

    #[test]
    fn every_byte_string_is_read_or_refused() {
        // A cheap deterministic walk over prefixes and bit flips of a real message.
        let base = edk2_solicit();
        for cut in 0..base.len() {
            let _ = parse_request(&base[..cut]);
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut m = base.clone();
            let i = (x as usize) % m.len();
            m[i] ^= (x >> 32) as u8;
            let _ = parse_request(&m);
        }
    }

    #[test]
    fn a_reply_carries_the_address_the_class_and_the_url_last() {
        let reply = Reply {
            advertise: true,
            xid: [1, 2, 3],
            client_id: vec![0, 3, 0, 1, 1, 2, 3, 4, 5, 6],
            server_id: server_duid("fd77::1".parse().unwrap()),
            ia_na: vec![(
                9,
                IaAnswer::Address {
                    addr: "fd77::100".parse().unwrap(),
                    preferred: 3600,
                    valid: 7200,
                },
            )],
            status: None,
            rapid_commit: false,
            class: Some(b"HTTPClient"),
            dns: vec![],
            boot_url: Some("http://[fd77::1]:8080/boot/loaders/snponly.efi".into()),
            fqdn: Some(("pc05".into(), 0x01)),
        };
        let bytes = encode_reply(&reply).unwrap();
        let m = v6::Message::decode(&mut dhcproto::Decoder::new(&bytes)).unwrap();
        assert_eq!(m.msg_type(), MessageType::Advertise);
        assert_eq!(m.xid(), [1, 2, 3]);
        let url = b"http://[fd77::1]:8080/boot/loaders/snponly.efi";
        assert!(bytes.ends_with(url), "the URL is the last option");
        // EDK2's test: the enterprise number, then the class string at offset 6 of option
        // 16's value, whose length covers it.
        let mut area = &bytes[4..];
        let (mut class, mut fqdn) = (None, None);
        while let Some((code, value, rest)) = next_option(area) {
            match code {
                opt::VENDOR_CLASS => class = Some(value.to_vec()),
                opt::CLIENT_FQDN => fqdn = Some(value.to_vec()),
                _ => {}
            }
            area = rest;
        }
        assert_eq!(fqdn.unwrap(), b"\x06\x04pc05");
        assert!(area.is_empty(), "every option's length is right");
        let class = class.expect("option 16");
        assert_eq!(class.len(), 16);
        assert_eq!(&class[..4], &EDK2_ENTERPRISE.to_be_bytes());
        assert_eq!(&class[4..6], &[0, 10]);
        assert_eq!(&class[6..], b"HTTPClient");
        let Some(DhcpOption::IANA(ia)) = m.opts().get(v6::OptionCode::IANA) else {
            panic!("no IA_NA");
        };
        assert_eq!(ia.id, 9);
        assert_eq!((ia.t1, ia.t2), (3600, 6300));
    }

    /// RFC 4704: option 39 goes back only to a client that sent it and asked for it; the
    /// name partial unless given with its final dot, N set (bootpool updates no DNS) and O
    /// where the client had asked the server to update (S).
    #[test]
    fn the_client_fqdn_goes_to_a_client_that_sent_and_asked_for_it() {
        let solicit = |opts: &[Vec<u8>]| {
            let mut m = vec![msg::SOLICIT, 0, 0, 1];
            m.extend(option(opt::CLIENT_ID, &[0, 3, 0, 1, 1, 2, 3, 4, 5, 6]));
            for o in opts {
                m.extend_from_slice(o);
            }
            parse_request(&m).unwrap()
        };
        let oro = option(opt::ORO, &[0, 23, 0, 39]);
        let sent = option(opt::CLIENT_FQDN, &[0x01, 4, b'h', b'o', b's', b't']);
        assert_eq!(
            solicit(&[oro.clone(), sent.clone()]).asks_fqdn(),
            Some(0x01)
        );
        assert_eq!(solicit(&[sent]).asks_fqdn(), None, "not in the ORO");
        assert_eq!(solicit(&[oro]).asks_fqdn(), None, "not sent");
        assert_eq!(client_fqdn("pc05", 0), b"\x04\x04pc05");
        assert_eq!(client_fqdn("pc05", 0x01), b"\x06\x04pc05");
        assert_eq!(
            client_fqdn("pc05.lab.example.", 0x04),
            b"\x04\x04pc05\x03lab\x07example\x00"
        );
    }
}

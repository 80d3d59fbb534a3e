//! rtnetlink link dump, just what egress sampling needs: the request for RTM_GETLINK and a
//! total parser of the answer into each link's index, name, master, kind and 64-bit byte
//! counters. Constants are the kernel's uapi values (linux/rtnetlink.h, linux/if_link.h).

const NLMSG_HDR: usize = 16;
const IFINFO: usize = 16;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const IFLA_IFNAME: u16 = 3;
const IFLA_MASTER: u16 = 10;
const IFLA_LINKINFO: u16 = 18;
const IFLA_STATS64: u16 = 23;
const IFLA_INFO_KIND: u16 = 1;
/// Attribute type bits that are flags, not the type (NLA_F_NESTED, NLA_F_NET_BYTEORDER).
const NLA_TYPE_MASK: u16 = 0x3fff;

/// One link as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// Index of the bond, team or bridge this link is a member of.
    pub master: Option<u32>,
    /// `bond`, `bridge`, `team`, `veth`, `tun`, ... (none for plain hardware NICs).
    pub kind: Option<String>,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

/// The RTM_GETLINK dump request.
pub fn dump_request(seq: u32) -> Vec<u8> {
    let len = (NLMSG_HDR + IFINFO) as u32;
    let mut b = Vec::with_capacity(len as usize);
    b.extend_from_slice(&len.to_ne_bytes());
    b.extend_from_slice(&RTM_GETLINK.to_ne_bytes());
    b.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    // ifinfomsg: family AF_UNSPEC, everything else zero.
    b.extend_from_slice(&[0u8; IFINFO]);
    b
}

/// What one datagram of the dump held.
#[derive(Debug, PartialEq, Eq)]
pub enum Part {
    Links(Vec<Link>),
    /// The dump is complete.
    Done(Vec<Link>),
    /// The kernel answered with an error (negative errno).
    Error(i32),
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Parses one received datagram; `None` if it is malformed.
pub fn parse(datagram: &[u8]) -> Option<Part> {
    let mut links = Vec::new();
    let mut at = 0;
    while at + NLMSG_HDR <= datagram.len() {
        let len = u32_at(datagram, at)? as usize;
        let kind = u16_at(datagram, at + 4)?;
        if len < NLMSG_HDR || at + len > datagram.len() {
            return None;
        }
        let body = &datagram[at + NLMSG_HDR..at + len];
        match kind {
            NLMSG_DONE => return Some(Part::Done(links)),
            NLMSG_ERROR => {
                return Some(Part::Error(i32::from_ne_bytes(
                    body.get(0..4)?.try_into().ok()?,
                )));
            }
            RTM_NEWLINK => links.push(parse_link(body)?),
            _ => {}
        }
        at += align(len);
    }
    Some(Part::Links(links))
}

fn align(n: usize) -> usize {
    (n + 3) & !3
}

fn parse_link(body: &[u8]) -> Option<Link> {
    let index = u32_at(body, 4)?;
    let mut link = Link {
        index,
        ..Link::default()
    };
    for (kind, data) in attributes(body.get(IFINFO..)?)? {
        match kind {
            IFLA_IFNAME => {
                link.name = String::from_utf8_lossy(data.split(|b| *b == 0).next()?).into_owned()
            }
            IFLA_MASTER => link.master = u32_at(data, 0).filter(|m| *m != 0),
            IFLA_STATS64 => {
                // rtnl_link_stats64: rx_packets, tx_packets, rx_bytes, tx_bytes, ...
                link.rx_bytes = u64_at(data, 16)?;
                link.tx_bytes = u64_at(data, 24)?;
            }
            IFLA_LINKINFO => {
                for (k, d) in attributes(data)? {
                    if k == IFLA_INFO_KIND {
                        link.kind = Some(
                            String::from_utf8_lossy(d.split(|b| *b == 0).next()?).into_owned(),
                        );
                    }
                }
            }
            _ => {}
        }
    }
    Some(link)
}

/// Splits netlink attributes; `None` if one overruns.
fn attributes(mut b: &[u8]) -> Option<Vec<(u16, &[u8])>> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let len = u16_at(b, 0)? as usize;
        let kind = u16_at(b, 2)? & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            return None;
        }
        out.push((kind, &b[4..len]));
        b = &b[align(len).min(b.len())..];
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(data);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    fn message(kind: u16, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&[0u8; 10]);
        m.extend_from_slice(body);
        m
    }

    fn link_body(
        index: u32,
        name: &str,
        master: Option<u32>,
        kind: Option<&str>,
        rx: u64,
        tx: u64,
    ) -> Vec<u8> {
        let mut b = vec![0u8; IFINFO];
        b[4..8].copy_from_slice(&index.to_ne_bytes());
        b.extend(attr(IFLA_IFNAME, format!("{name}\0").as_bytes()));
        if let Some(m) = master {
            b.extend(attr(IFLA_MASTER, &m.to_ne_bytes()));
        }
        if let Some(k) = kind {
            b.extend(attr(
                IFLA_LINKINFO | 0x8000,
                &attr(IFLA_INFO_KIND, k.as_bytes()),
            ));
        }
        let mut stats = vec![0u8; 8 * 24];
        stats[16..24].copy_from_slice(&rx.to_ne_bytes());
        stats[24..32].copy_from_slice(&tx.to_ne_bytes());
        b.extend(attr(IFLA_STATS64, &stats));
        b
    }

    #[test]
    fn parses_links_with_members_and_counters() {
        let mut d = message(
            RTM_NEWLINK,
            &link_body(3, "bond0", None, Some("bond"), 10, 5_000_000_000),
        );
        d.extend(message(
            RTM_NEWLINK,
            &link_body(4, "eth0", Some(3), None, 7, 2_500_000_000),
        ));
        let Some(Part::Links(links)) = parse(&d) else {
            panic!("not parsed")
        };
        assert_eq!(links.len(), 2);
        assert_eq!(links[0].name, "bond0");
        assert_eq!(links[0].kind.as_deref(), Some("bond"));
        assert_eq!(links[0].tx_bytes, 5_000_000_000);
        assert_eq!(links[1].master, Some(3));
        assert_eq!(links[1].rx_bytes, 7);
        assert_eq!(
            parse(&message(NLMSG_DONE, &[0; 4])),
            Some(Part::Done(vec![]))
        );
        assert_eq!(
            parse(&message(NLMSG_ERROR, &(-1i32).to_ne_bytes())),
            Some(Part::Error(-1))
        );
    }

    #[test]
    fn malformed_dumps_are_refused_not_panicked_on() {
        let good = message(
            RTM_NEWLINK,
            &link_body(3, "br0", None, Some("bridge"), 1, 2),
        );
        for cut in 0..good.len() {
            let _ = parse(&good[..cut]);
        }
        let mut bad = good.clone();
        bad[NLMSG_HDR + IFINFO] = 0xff; // an attribute longer than the message
        assert_eq!(parse(&bad), None);
        assert_eq!(dump_request(1).len(), 32);
    }
}

//! rtnetlink, just what bootpool needs: the link dump of egress sampling (the request for
//! RTM_GETLINK and a total parser of the answer into each link's index, name, master, kind
//! and 64-bit byte counters), and the two requests that give each server link a routing table
//! of its own chosen by a socket mark (RTM_NEWROUTE, RTM_NEWRULE; `steer::routes`).
//! Constants are the kernel's uapi values (linux/rtnetlink.h, linux/if_link.h,
//! linux/fib_rules.h).

const NLMSG_HDR: usize = 16;
const IFINFO: usize = 16;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWROUTE: u16 = 24;
const RTM_NEWRULE: u16 = 32;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const AF_INET: u8 = 2;
/// rtmsg and fib_rule_hdr: both 12 bytes (family, two prefix lengths, tos, table, three
/// bytes that differ, flags).
const RTMSG: usize = 12;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_PREFSRC: u16 = 7;
const RTA_TABLE: u16 = 15;
const RTPROT_STATIC: u8 = 4;
const RT_SCOPE_LINK: u8 = 253;
const RTN_UNICAST: u8 = 1;
const FRA_PRIORITY: u16 = 6;
const FRA_FWMARK: u16 = 10;
const FRA_TABLE: u16 = 15;
const FRA_FWMASK: u16 = 16;
const FR_ACT_TO_TBL: u8 = 1;
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

/// A request's header (length filled in by `finish`) and body.
fn request(kind: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(NLMSG_HDR + body.len() + 48);
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | flags).to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(body);
    b
}

fn push_attr(b: &mut Vec<u8>, kind: u16, data: &[u8]) {
    b.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(data);
    b.resize(align(b.len()), 0);
}

fn finish(mut b: Vec<u8>) -> Vec<u8> {
    let len = b.len() as u32;
    b[0..4].copy_from_slice(&len.to_ne_bytes());
    b
}

/// RTM_NEWROUTE, created or replaced: `network/prefix` reached directly by interface `oif`,
/// from source address `src`, in routing table `table` (`ip route replace NET/PREFIX dev OIF
/// src SRC table TABLE`).
pub fn route_request(
    seq: u32,
    network: [u8; 4],
    prefix: u8,
    oif: u32,
    src: [u8; 4],
    table: u32,
) -> Vec<u8> {
    // rtmsg: family, dst_len, src_len, tos, table (in RTA_TABLE), protocol, scope, type, flags.
    let body = [
        AF_INET,
        prefix,
        0,
        0,
        0,
        RTPROT_STATIC,
        RT_SCOPE_LINK,
        RTN_UNICAST,
        0,
        0,
        0,
        0,
    ];
    let mut b = request(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, seq, &body);
    push_attr(&mut b, RTA_TABLE, &table.to_ne_bytes());
    push_attr(&mut b, RTA_DST, &network);
    push_attr(&mut b, RTA_OIF, &oif.to_ne_bytes());
    push_attr(&mut b, RTA_PREFSRC, &src);
    finish(b)
}

/// RTM_NEWRULE, created unless the same rule exists (EEXIST then): packets whose mark is
/// `mark` look their route up in `table`, at `priority` (`ip rule add fwmark MARK lookup
/// TABLE priority PRIORITY`).
pub fn rule_request(seq: u32, priority: u32, mark: u32, table: u32) -> Vec<u8> {
    // fib_rule_hdr: family, dst_len, src_len, tos, table, res1, res2, action, flags.
    let body = [AF_INET, 0, 0, 0, 0, 0, 0, FR_ACT_TO_TBL, 0, 0, 0, 0];
    debug_assert_eq!(body.len(), RTMSG);
    let mut b = request(RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, seq, &body);
    push_attr(&mut b, FRA_PRIORITY, &priority.to_ne_bytes());
    push_attr(&mut b, FRA_FWMARK, &mark.to_ne_bytes());
    push_attr(&mut b, FRA_FWMASK, &u32::MAX.to_ne_bytes());
    push_attr(&mut b, FRA_TABLE, &table.to_ne_bytes());
    finish(b)
}

/// The kernel's answer to a request sent with an ACK asked for: `Some(0)` done, `Some(-errno)`
/// refused; `None` if the datagram holds no answer (or is malformed).
pub fn ack(datagram: &[u8]) -> Option<i32> {
    let len = u32_at(datagram, 0)? as usize;
    if u16_at(datagram, 4)? != NLMSG_ERROR || len < NLMSG_HDR + 4 || len > datagram.len() {
        return None;
    }
    Some(i32::from_ne_bytes(
        datagram[NLMSG_HDR..NLMSG_HDR + 4].try_into().ok()?,
    ))
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
    fn route_and_rule_requests_are_laid_out_as_the_kernel_reads_them() {
        let r = route_request(7, [10, 77, 0, 0], 24, 3, [10, 77, 0, 2], 0x626f_0002);
        assert_eq!(u32_at(&r, 0), Some(r.len() as u32));
        assert_eq!(u16_at(&r, 4), Some(RTM_NEWROUTE));
        assert_eq!(
            u16_at(&r, 6),
            Some(NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE)
        );
        assert_eq!(u32_at(&r, 8), Some(7));
        let body = &r[NLMSG_HDR..];
        assert_eq!(
            &body[..8],
            &[
                AF_INET,
                24,
                0,
                0,
                0,
                RTPROT_STATIC,
                RT_SCOPE_LINK,
                RTN_UNICAST
            ]
        );
        let attrs = attributes(&body[RTMSG..]).unwrap();
        let kinds: Vec<u16> = attrs.iter().map(|(k, _)| *k).collect();
        assert_eq!(kinds, [RTA_TABLE, RTA_DST, RTA_OIF, RTA_PREFSRC]);
        assert_eq!(attrs[0].1, 0x626f_0002u32.to_ne_bytes());
        assert_eq!(attrs[1].1, [10, 77, 0, 0]);
        assert_eq!(attrs[2].1, 3u32.to_ne_bytes());

        let r = rule_request(8, 30_001, 0x626f_0002, 0x626f_0002);
        assert_eq!(u32_at(&r, 0), Some(r.len() as u32));
        assert_eq!(u16_at(&r, 4), Some(RTM_NEWRULE));
        let body = &r[NLMSG_HDR..];
        assert_eq!(body[0], AF_INET);
        assert_eq!(body[7], FR_ACT_TO_TBL);
        let attrs = attributes(&body[RTMSG..]).unwrap();
        let kinds: Vec<u16> = attrs.iter().map(|(k, _)| *k).collect();
        assert_eq!(kinds, [FRA_PRIORITY, FRA_FWMARK, FRA_FWMASK, FRA_TABLE]);
        assert_eq!(attrs[0].1, 30_001u32.to_ne_bytes());
    }

    #[test]
    fn acks_are_read_and_anything_else_is_not_one() {
        let mut ok = message(NLMSG_ERROR, &[0u8; 20]);
        assert_eq!(ack(&ok), Some(0));
        ok[NLMSG_HDR..NLMSG_HDR + 4].copy_from_slice(&(-17i32).to_ne_bytes());
        assert_eq!(ack(&ok), Some(-17));
        assert_eq!(ack(&message(RTM_NEWLINK, &[0u8; 20])), None);
        assert_eq!(ack(&ok[..10]), None);
        assert_eq!(ack(&[]), None);
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

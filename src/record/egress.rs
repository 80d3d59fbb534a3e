//! Server egress: every second, the byte counters of each served interface and of its members
//! (bond, team or bridge ports), turned into rates, plus bootpool's own payload bytes per
//! protocol. Counters come from rtnetlink (64-bit, and per network namespace, which sysfs is
//! not); link speeds come from pools.yaml's `server.link_speeds` where it names the link, else
//! from sysfs when it describes the same namespace (a fallback for counters too). Samples are kept in memory for the API and handed to the record writer, which
//! stores them with the boot events.

use super::event::Proto;
use crate::proto::netlink;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, RwLock};

/// How much history the API can show from memory (one sample a second).
pub(super) const KEEP: usize = 6 * 3600;

/// What a link is to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkKind {
    Bond,
    Team,
    Bridge,
    /// A member (slave, port) of one of the above.
    Member,
    Plain,
}

/// A link's description and raw counters at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkCounters {
    pub name: String,
    pub kind: LinkKind,
    pub master: Option<String>,
    pub speed_mbps: Option<u32>,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    /// The `server.links` addresses this interface held when sampled: the clients told one
    /// of them booted over it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<std::net::Ipv4Addr>,
}

/// Rates over one second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Unix seconds at the end of the interval.
    pub t: f64,
    /// Length of the interval the rates cover (about one second).
    #[serde(default = "one")]
    pub seconds: f64,
    pub links: Vec<LinkRate>,
    /// bootpool's payload bytes per second by protocol.
    pub protocols: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkRate {
    pub name: String,
    pub tx_bytes_s: f64,
    pub rx_bytes_s: f64,
}

fn one() -> f64 {
    1.0
}

/// Links of interest from a netlink dump: the served interfaces and their members.
pub fn select(
    links: &[netlink::Link],
    interfaces: &[String],
    speed: impl Fn(&str) -> Option<u32>,
) -> Vec<LinkCounters> {
    let by_index: BTreeMap<u32, &netlink::Link> = links.iter().map(|l| (l.index, l)).collect();
    let mut out = Vec::new();
    for name in interfaces {
        let Some(top) = links.iter().find(|l| &l.name == name) else {
            continue;
        };
        let kind = match top.kind.as_deref() {
            Some("bond") => LinkKind::Bond,
            Some("team") => LinkKind::Team,
            Some("bridge") => LinkKind::Bridge,
            _ => LinkKind::Plain,
        };
        out.push(counters(top, kind, None, &speed));
        for member in links.iter().filter(|l| l.master == Some(top.index)) {
            let master = by_index.get(&top.index).map(|m| m.name.clone());
            out.push(counters(member, LinkKind::Member, master, &speed));
        }
    }
    out
}

fn counters(
    l: &netlink::Link,
    kind: LinkKind,
    master: Option<String>,
    speed: &impl Fn(&str) -> Option<u32>,
) -> LinkCounters {
    LinkCounters {
        name: l.name.clone(),
        kind,
        master,
        speed_mbps: speed(&l.name),
        tx_bytes: l.tx_bytes,
        rx_bytes: l.rx_bytes,
        addresses: Vec::new(),
    }
}

/// Reads links and counters over rtnetlink in this thread's network namespace.
pub fn dump_links() -> std::io::Result<Vec<netlink::Link>> {
    use std::io::{Error, ErrorKind};
    let socket = crate::sys::netlink::Netlink::open()?;
    let _ = socket.set_recv_timeout(std::time::Duration::from_secs(1));
    socket.send(&netlink::dump_request(1))?;
    let mut all = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..1000 {
        let n = socket.recv(&mut buf)?;
        match netlink::parse(&buf[..n]) {
            Some(netlink::Part::Links(l)) => all.extend(l),
            Some(netlink::Part::Done(l)) => {
                all.extend(l);
                return Ok(all);
            }
            Some(netlink::Part::Error(e)) => return Err(Error::from_raw_os_error(-e)),
            None => {
                return Err(Error::new(ErrorKind::InvalidData, "malformed netlink dump"));
            }
        }
    }
    Err(Error::new(
        ErrorKind::InvalidData,
        "netlink dump did not end",
    ))
}

/// Reads links from a sysfs tree (`ROOT/class/net/NAME/...`): the fallback when netlink is not
/// available, and how bonds are tested on hosts without the bonding driver.
pub fn read_sysfs(root: &Path, interfaces: &[String]) -> Vec<LinkCounters> {
    let net = root.join("class/net");
    let read = |name: &str, file: &str| {
        std::fs::read_to_string(net.join(name).join(file))
            .ok()
            .map(|s| s.trim().to_string())
    };
    let num = |name: &str, file: &str| read(name, file).and_then(|s| s.parse::<u64>().ok());
    let speed = |name: &str| {
        read(name, "speed")
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|s| *s > 0)
            .map(|s| s as u32)
    };
    let link = |name: &str, kind, master: Option<String>| LinkCounters {
        name: name.to_string(),
        kind,
        master,
        speed_mbps: speed(name),
        tx_bytes: num(name, "statistics/tx_bytes").unwrap_or(0),
        rx_bytes: num(name, "statistics/rx_bytes").unwrap_or(0),
        addresses: Vec::new(),
    };
    let mut out = Vec::new();
    for name in interfaces {
        if !net.join(name).exists() {
            continue;
        }
        let (kind, members): (LinkKind, Vec<String>) =
            if let Some(slaves) = read(name, "bonding/slaves") {
                (
                    LinkKind::Bond,
                    slaves.split_whitespace().map(String::from).collect(),
                )
            } else if let Ok(ports) = std::fs::read_dir(net.join(name).join("brif")) {
                let mut p: Vec<String> = ports
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                p.sort();
                (LinkKind::Bridge, p)
            } else {
                (LinkKind::Plain, Vec::new())
            };
        out.push(link(name, kind, None));
        for m in members {
            out.push(link(&m, LinkKind::Member, Some(name.clone())));
        }
    }
    out
}

/// Link speed from sysfs, only if sysfs shows this namespace's link of that name.
pub(super) fn sysfs_speed(name: &str, index: u32) -> Option<u32> {
    let dir = Path::new("/sys/class/net").join(name);
    let same = std::fs::read_to_string(dir.join("ifindex"))
        .ok()?
        .trim()
        .parse::<u32>()
        .ok()?
        == index;
    let speed: i64 = std::fs::read_to_string(dir.join("speed"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (same && speed > 0).then_some(speed as u32)
}

/// Gives each link pools.yaml's `server.link_speeds` names the capacity stated there: the
/// admin's figure wins over the kernel's, which is missing for taps and bridges, 10000 for
/// every veth whatever it carries, and the NIC's rate for a link shaped below it with `tc`.
pub fn fill_speeds(links: &mut [LinkCounters], configured: &BTreeMap<String, u32>) {
    for l in links {
        if let Some(&mbps) = configured.get(&l.name) {
            l.speed_mbps = Some(mbps);
        }
    }
}

/// One link's capacity in Mbit/s by the same rule: `server.link_speeds`' for the link
/// `name`, else the kernel's for the link with interface index `index`.
pub fn speed_mbps(name: &str, index: u32, configured: &BTreeMap<String, u32>) -> Option<u32> {
    configured
        .get(name)
        .copied()
        .or_else(|| sysfs_speed(name, index))
}

/// Turns two readings a known interval apart into rates.
pub fn rates(before: &[LinkCounters], after: &[LinkCounters], seconds: f64) -> Vec<LinkRate> {
    after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.name == a.name)?;
            Some(LinkRate {
                name: a.name.clone(),
                // A counter that went backwards (link recreated) counts as zero, not negative.
                tx_bytes_s: a.tx_bytes.saturating_sub(b.tx_bytes) as f64 / seconds,
                rx_bytes_s: a.rx_bytes.saturating_sub(b.rx_bytes) as f64 / seconds,
            })
        })
        .collect()
}

/// Egress history shared with the API.
#[derive(Default)]
pub struct Egress {
    inner: RwLock<History>,
}

#[derive(Default)]
struct History {
    links: BTreeMap<String, LinkCounters>,
    samples: VecDeque<Sample>,
}

impl Egress {
    /// The links seen most recently (with counters as last read).
    pub fn links(&self) -> Vec<LinkCounters> {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .links
            .values()
            .cloned()
            .collect()
    }

    /// Samples at or after `since` (Unix seconds).
    pub fn samples_since(&self, since: f64) -> Vec<Sample> {
        let h = self.inner.read().unwrap_or_else(|e| e.into_inner());
        h.samples.iter().filter(|s| s.t >= since).cloned().collect()
    }

    pub fn latest(&self) -> Option<Sample> {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .samples
            .back()
            .cloned()
    }

    pub(super) fn push(&self, links: &[LinkCounters], sample: Sample) {
        let mut h = self.inner.write().unwrap_or_else(|e| e.into_inner());
        for l in links {
            h.links.insert(l.name.clone(), l.clone());
        }
        h.samples.push_back(sample);
        while h.samples.len() > KEEP {
            h.samples.pop_front();
        }
    }
}

/// What the sampler reads protocol totals from.
pub type ProtoTotals = Arc<dyn Fn() -> BTreeMap<Proto, u64> + Send + Sync>;

/// Which `server.links` addresses each interface holds.
pub type Held = BTreeMap<String, Vec<std::net::Ipv4Addr>>;

/// A stored sample: the rates and the links' descriptions (with raw counters) at that time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Saved {
    #[serde(flatten)]
    pub sample: Sample,
    #[serde(rename = "link_info")]
    pub links: Vec<LinkCounters>,
}

#[cfg(test)]
impl Saved {
    /// An empty sample taken at `t`.
    pub fn at(t: f64) -> Saved {
        Saved {
            sample: Sample {
                t,
                seconds: 1.0,
                links: Vec::new(),
                protocols: BTreeMap::new(),
            },
            links: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nl(
        index: u32,
        name: &str,
        master: Option<u32>,
        kind: Option<&str>,
        tx: u64,
    ) -> netlink::Link {
        netlink::Link {
            index,
            name: name.into(),
            master,
            kind: kind.map(String::from),
            rx_bytes: 0,
            tx_bytes: tx,
        }
    }

    #[test]
    fn served_links_and_their_members_are_selected() {
        let dump = [
            nl(1, "lo", None, None, 5),
            nl(2, "br0", None, Some("bridge"), 100),
            nl(3, "tap0", Some(2), Some("tun"), 60),
            nl(4, "tap1", Some(2), Some("tun"), 40),
            nl(5, "eth9", None, None, 1),
        ];
        let got = select(&dump, &["br0".to_string()], |n| {
            (n == "tap0").then_some(1000)
        });
        let shape: Vec<(&str, LinkKind, Option<&str>, Option<u32>)> = got
            .iter()
            .map(|l| (l.name.as_str(), l.kind, l.master.as_deref(), l.speed_mbps))
            .collect();
        assert_eq!(
            shape,
            [
                ("br0", LinkKind::Bridge, None, None),
                ("tap0", LinkKind::Member, Some("br0"), Some(1000)),
                ("tap1", LinkKind::Member, Some("br0"), None)
            ]
        );
    }

    #[test]
    fn a_bond_in_a_sysfs_tree_shows_its_slaves_and_speeds() {
        let root = tempfile::tempdir().unwrap();
        let net = root.path().join("class/net");
        let put = |p: &str, v: &str| {
            let f = net.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, v).unwrap();
        };
        put("bond0/bonding/slaves", "eth0 eth1 eth2 eth3\n");
        put("bond0/speed", "4000\n");
        put("bond0/statistics/tx_bytes", "1000\n");
        for (i, tx) in [(0, "700"), (1, "100"), (2, "100"), (3, "100")] {
            put(&format!("eth{i}/speed"), "1000\n");
            put(&format!("eth{i}/statistics/tx_bytes"), tx);
            put(&format!("eth{i}/statistics/rx_bytes"), "5");
        }
        let links = read_sysfs(root.path(), &["bond0".to_string()]);
        assert_eq!(links.len(), 5);
        assert_eq!(
            (links[0].kind, links[0].speed_mbps, links[0].tx_bytes),
            (LinkKind::Bond, Some(4000), 1000)
        );
        assert_eq!(
            (
                links[1].name.as_str(),
                links[1].kind,
                links[1].master.as_deref()
            ),
            ("eth0", LinkKind::Member, Some("bond0"))
        );
        // An uneven bond shows as uneven rates per member.
        let mut later = links.clone();
        later[1].tx_bytes += 2000;
        later[2].tx_bytes += 500;
        let r = rates(&links, &later, 2.0);
        assert_eq!(
            (r[1].tx_bytes_s, r[2].tx_bytes_s, r[3].tx_bytes_s),
            (1000.0, 250.0, 0.0)
        );
    }

    /// A veth or tap has no kernel speed: pools.yaml's `server.link_speeds` gives its
    /// capacity; a link whose kernel reports one keeps the kernel's.
    #[test]
    fn configured_link_speeds_fill_in_where_the_kernel_says_nothing() {
        let root = tempfile::tempdir().unwrap();
        let net = root.path().join("class/net");
        let put = |p: &str, v: &str| {
            let f = net.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, v).unwrap();
        };
        put("br0/brif/s0/port_no", "1\n");
        put("br0/brif/eth0/port_no", "2\n");
        put("s0/statistics/tx_bytes", "7\n");
        // A veth's speed reads as an error or -1; a real NIC's as its rate.
        put("s0/speed", "-1\n");
        put("eth0/speed", "1000\n");
        let mut links = read_sysfs(root.path(), &["br0".to_string()]);
        let speeds = |l: &[LinkCounters]| -> Vec<(String, Option<u32>)> {
            l.iter().map(|l| (l.name.clone(), l.speed_mbps)).collect()
        };
        let none: Vec<(String, Option<u32>)> = ["br0", "eth0", "s0"]
            .iter()
            .map(|n| (n.to_string(), if *n == "eth0" { Some(1000) } else { None }))
            .collect();
        assert_eq!(speeds(&links), none);
        let configured: BTreeMap<String, u32> = [("s0", 250), ("eth0", 10), ("s9", 5)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        // The configured figure wins over the kernel's (eth0's 1000).
        fill_speeds(&mut links, &configured);
        assert_eq!(
            speeds(&links),
            [
                ("br0".to_string(), None),
                ("eth0".to_string(), Some(10)),
                ("s0".to_string(), Some(250))
            ]
        );
        assert_eq!(links[2].tx_bytes, 7);
        // And the same through the netlink path's selection.
        let dump = [nl(1, "s0", None, Some("veth"), 3)];
        let mut got = select(&dump, &["s0".to_string()], |_| None);
        fill_speeds(&mut got, &configured);
        assert_eq!(got[0].speed_mbps, Some(250));
    }

    #[test]
    fn netlink_reads_this_namespace() {
        // Every namespace has a loopback; its counters come back through our parser.
        let links = dump_links().expect("rtnetlink dump");
        assert!(links.iter().any(|l| l.name == "lo"), "{links:?}");
    }
}

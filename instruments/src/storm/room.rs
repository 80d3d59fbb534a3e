//! The storm's virtual room, wired inside the storm's own network namespace: a bridge as the
//! switch; the server's K links, each a veth with its own address on the clients' subnet and
//! its egress shaped by `tc tbf` to the link's rate (replies leave by the link of their source
//! address: source policy routing, with ARP answered only by the link that holds the address);
//! and per client a veth whose far end lives in the client's own namespace, its switch port
//! shaped to the client's link rate. Or, for a bond simulated (`wire_bond`), K shaped links
//! under one address, each client's frames leaving by the link its MAC hashes onto. Nothing
//! here can reach a link outside the namespace.

use anyhow::{Context, bail};
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The switch.
pub const BRIDGE: &str = "sw0";

/// A link rate in bits per second, parsed from `100mbit`, `1gbit`, `250M`, `2.5G`.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("bit")
        .or(t.strip_suffix("bps"))
        .unwrap_or(&t);
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1e3),
        Some('m') => (&t[..t.len() - 1], 1e6),
        Some('g') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a rate such as 100mbit or 1gbit"))?;
    if n.is_nan() || n * mult < 1e5 {
        return Err(format!("`{s}`: rates start at 100kbit"));
    }
    Ok((n * mult) as u64)
}

/// `K x RATE` (or `KxRATE`): the server's links.
pub fn parse_links(s: &str) -> Result<(usize, u64), String> {
    let (k, rate) = s
        .split_once(['x', 'X', '*'])
        .ok_or_else(|| format!("`{s}` is not K x RATE, e.g. 4x250mbit"))?;
    let k: usize = k
        .trim()
        .parse()
        .map_err(|_| format!("`{s}`: K must be a number of links"))?;
    if !(1..=16).contains(&k) {
        return Err(format!("`{s}`: between 1 and 16 links"));
    }
    Ok((k, parse_rate(rate)?))
}

/// One of the server's links.
#[derive(Debug, Clone)]
pub struct Link {
    pub dev: String,
    pub address: Ipv4Addr,
    pub rate: u64,
    /// On a bond simulated (`wire_bond`), the MACs of the clients whose frames this link
    /// carries (all links share one address); `None` when its clients are those told its
    /// address.
    pub macs: Option<Vec<String>>,
    /// When the link lives in a server namespace of its own (a site member's, `--servers`):
    /// its port on the switch, here, whose receive counter is the link's egress.
    pub switch_port: Option<String>,
}

impl Link {
    /// Whether this link carries what the server sends to the client with `mac`, told
    /// `address` as its server.
    pub fn carries(&self, mac: &str, address: Option<Ipv4Addr>) -> bool {
        match &self.macs {
            Some(macs) => macs.iter().any(|m| m.eq_ignore_ascii_case(mac)),
            None => address == Some(self.address),
        }
    }
}

/// The server's MAC on a bond simulated (every link of it has this one, as a bond's slaves
/// take the bond's).
pub const BOND_MAC: [u8; 6] = [0x02, 0x78, 0x00, 0x00, 0x00, 0x01];

/// The link of `k` that a bond whose transmit hash is the kernel's `layer2` policy sends a
/// frame from `server` to `client` by: the last bytes of the two MACs XOR the frame's
/// EtherType (IPv4), modulo the number of links (Linux's Documentation/networking/
/// bonding.rst, `xmit_hash_policy`). Every frame to one client takes the same link.
pub fn layer2_hash(server: [u8; 6], client: [u8; 6], k: usize) -> usize {
    let hash = u32::from(server[5] ^ client[5]) ^ 0x0800;
    hash as usize % k.max(1)
}

/// Runs `PROGRAM -batch -` with `lines` on its standard input, failing with its message.
fn batch(program: &str, lines: &[String]) -> anyhow::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut child = Command::new(program)
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running `{program}` (package iproute2)"))?;
    {
        let mut stdin = child.stdin.take().expect("piped");
        for l in lines {
            writeln!(stdin, "{l}")?;
        }
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{program} -batch: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

pub fn ip(lines: &[String]) -> anyhow::Result<()> {
    batch("ip", lines)
}

pub fn tc(lines: &[String]) -> anyhow::Result<()> {
    batch("tc", lines)
}

fn sysctl(path: &str, value: &str) -> anyhow::Result<()> {
    std::fs::write(format!("/proc/sys/{path}"), value).with_context(|| format!("setting {path}"))
}

/// The bytes a shaped link's bucket holds (`shape`): 10 ms of the rate, at least 64 KiB so
/// that one GSO packet always fits. After an idle moment that many go at once, faster than
/// the rate.
pub fn burst(rate: u64) -> u64 {
    (rate / 8 / 100).max(64 * 1024)
}

/// A tbf qdisc shaping `dev`'s egress to `rate` bits per second. The bucket holds `burst`,
/// the queue 20 ms.
pub fn shape(dev: &str, rate: u64) -> String {
    let burst = burst(rate);
    format!("qdisc add dev {dev} root tbf rate {rate}bit burst {burst} latency 20ms")
}

/// Makes the switch and the server's links, one per address: the first on a device named
/// `first_dev` (the config's interface, which bootpool's DHCP binds to), the others `s1`,
/// `s2`, ...
pub fn wire_server(
    addresses: &[Ipv4Addr],
    prefix: u8,
    rate: u64,
    first_dev: &str,
) -> anyhow::Result<Vec<Link>> {
    wire_switch()?;
    let mut cmds = Vec::new();
    for k in 0..addresses.len() {
        let dev = server_dev(first_dev, k);
        cmds.push(format!("link add {dev} type veth peer name sp{k}"));
        cmds.push(format!("link set sp{k} master {BRIDGE}"));
        cmds.push(format!("link set sp{k} up"));
    }
    ip(&cmds)?;
    let links = address_links(addresses, prefix, rate, first_dev)?;
    Ok(links
        .into_iter()
        .map(|(dev, address)| Link {
            dev,
            address,
            rate,
            macs: None,
            switch_port: None,
        })
        .collect())
}

/// The switch, in the storm's namespace: a bridge without STP or a firewall.
pub fn wire_switch() -> anyhow::Result<()> {
    crate::lab::net::ip(&["link", "set", "lo", "up"]).ok();
    quiet_switch()?;
    ip(&[
        format!("link add {BRIDGE} type bridge stp_state 0 forward_delay 0"),
        format!("link set {BRIDGE} up"),
    ])
}

/// The name of a server's link `k`: the config's interface for the first, `s1`, `s2`, ...
pub fn server_dev(first_dev: &str, k: usize) -> String {
    if k == 0 {
        first_dev.to_string()
    } else {
        format!("s{k}")
    }
}

/// Gives the calling thread's namespace's links (`server_dev`, made and plugged into the
/// switch already) one address each, routes each one's replies out by it, and shapes its
/// egress to `rate`: a multi-NIC server's wiring. Its devices and addresses, in order.
pub fn address_links(
    addresses: &[Ipv4Addr],
    prefix: u8,
    rate: u64,
    first_dev: &str,
) -> anyhow::Result<Vec<(String, Ipv4Addr)>> {
    let subnet = u32::from(addresses[0]) & (u32::MAX << (32 - prefix as u32));
    let net = format!("{}/{prefix}", Ipv4Addr::from(subnet));
    sysctl("net/ipv4/conf/all/arp_ignore", "1")?;
    sysctl("net/ipv4/conf/all/arp_announce", "2")?;
    sysctl("net/ipv4/conf/all/rp_filter", "0")?;
    let mut cmds = vec!["link set lo up".to_string()];
    let mut tc = Vec::new();
    let mut out = Vec::new();
    for (k, &address) in addresses.iter().enumerate() {
        let dev = server_dev(first_dev, k);
        cmds.push(format!("addr add {address}/{prefix} dev {dev}"));
        cmds.push(format!("link set {dev} up"));
        // Replies leave by the link that holds their source address.
        let table = 100 + k;
        cmds.push(format!("rule add from {address} table {table}"));
        cmds.push(format!(
            "route add {net} dev {dev} src {address} table {table}"
        ));
        tc.push(shape(&dev, rate));
        out.push((dev, address));
    }
    ip(&cmds)?;
    batch("tc", &tc)?;
    Ok(out)
}

/// A bond of `k` links of `rate` simulated, there being no bonding driver here: `first_dev`
/// holds `address` (the config's server address) and the others `s1`, `s2`, ... none; all
/// have the bond's MAC (`BOND_MAC`), so a frame for the server is taken by whichever the
/// switch sends it to. Each link's egress is shaped to `rate`, and a frame to a client leaves
/// by the link `layer2_hash` gives its MAC: `first_dev`'s own egress filter redirects it
/// there (`tc u32` on the destination MAC, `mirred` to that link's shaped queue). Frames to
/// other MACs (broadcasts) leave by `first_dev`.
pub fn wire_bond(
    address: Ipv4Addr,
    k: usize,
    prefix: u8,
    rate: u64,
    first_dev: &str,
    clients: &[String],
) -> anyhow::Result<Vec<Link>> {
    crate::lab::net::ip(&["link", "set", "lo", "up"]).ok();
    sysctl("net/ipv4/conf/all/arp_ignore", "1")?;
    sysctl("net/ipv4/conf/all/arp_announce", "2")?;
    sysctl("net/ipv4/conf/all/rp_filter", "0")?;
    sysctl("net/ipv4/conf/default/rp_filter", "0")?;
    quiet_switch()?;
    let mac = BOND_MAC.map(|b| format!("{b:02x}")).join(":");
    let mut cmds = vec![
        format!("link add {BRIDGE} type bridge stp_state 0 forward_delay 0"),
        format!("link set {BRIDGE} up"),
    ];
    let mut tc = Vec::new();
    let mut out = Vec::new();
    for n in 0..k {
        let dev = if n == 0 {
            first_dev.to_string()
        } else {
            format!("s{n}")
        };
        cmds.push(format!(
            "link add {dev} address {mac} type veth peer name sp{n}"
        ));
        cmds.push(format!("link set sp{n} master {BRIDGE}"));
        cmds.push(format!("link set sp{n} up"));
        cmds.push(format!("link set {dev} up"));
        tc.push(shape(&dev, rate));
        out.push(Link {
            dev,
            address,
            rate,
            macs: Some(Vec::new()),
            switch_port: None,
        });
    }
    cmds.push(format!("addr add {address}/{prefix} dev {first_dev}"));
    tc.push(format!("qdisc add dev {first_dev} clsact"));
    for client in clients {
        let parsed: bootpool::config::Mac = client
            .parse()
            .map_err(|e| anyhow::anyhow!("{client}: {e}"))?;
        let n = layer2_hash(BOND_MAC, parsed.0, k);
        if let Some(Some(macs)) = out.get_mut(n).map(|l| l.macs.as_mut()) {
            macs.push(client.clone());
        }
        if n > 0 {
            tc.push(redirect(first_dev, parsed.0, &out[n].dev));
        }
    }
    ip(&cmds)?;
    batch("tc", &tc)?;
    Ok(out)
}

/// A `tc` filter on `dev`'s egress that sends frames to `mac` to `to`'s egress instead (its
/// own shaped queue): the destination MAC's first two bytes and last four, at their offsets
/// before the network header.
fn redirect(dev: &str, mac: [u8; 6], to: &str) -> String {
    let head = u16::from_be_bytes([mac[0], mac[1]]);
    let tail = u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]);
    format!(
        "filter add dev {dev} egress protocol all u32 match u16 0x{head:04x} 0xffff at -14 match u32 0x{tail:08x} 0xffffffff at -12 action mirred egress redirect dev {to}"
    )
}

/// A switch runs no firewall. Where the kernel has br_netfilter, every frame a bridge forwards
/// would pass through iptables' hooks; its sysctls are the namespace's own, so the room turns
/// them off for its switch and the host's stay as they are.
fn quiet_switch() -> anyhow::Result<()> {
    for table in ["iptables", "ip6tables", "arptables"] {
        let path = format!("net/bridge/bridge-nf-call-{table}");
        if std::path::Path::new("/proc/sys").join(&path).exists() {
            sysctl(&path, "0")?;
        }
    }
    Ok(())
}

/// Makes client `i`'s link: a veth whose end `c{i}` (with `mac`) moves into the namespace of
/// thread `tid`, its switch port `p{i}` (on the switch `switch_of(i)`) shaped to `rate`.
pub fn wire_clients(
    clients: &[(usize, String, libc::pid_t)],
    rate: u64,
    switch_of: &dyn Fn(usize) -> &'static str,
) -> anyhow::Result<()> {
    let mut cmds = Vec::new();
    let mut tc = Vec::new();
    for (i, mac, tid) in clients {
        cmds.push(format!(
            "link add c{i} address {mac} type veth peer name p{i}"
        ));
        cmds.push(format!("link set c{i} netns {tid}"));
        cmds.push(format!("link set p{i} master {}", switch_of(*i)));
        cmds.push(format!("link set p{i} up"));
        tc.push(shape(&format!("p{i}"), rate));
    }
    ip(&cmds)?;
    batch("tc", &tc)
}

/// Waits until the switches forward on each of `ports` (a port whose peer was just set up
/// stays `disabled` until the kernel has handled its carrier, and drops what arrives
/// meanwhile: a client that sends its first DISCOVER then loses it, as no PC on a ready switch
/// port would). Fails naming the ports still not forwarding after `within`.
pub fn wait_forwarding(ports: &[String], within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let out = Command::new("ip")
            .args(["-d", "-j", "link", "show"])
            .output()
            .context("running `ip -d -j link show` (package iproute2)")?;
        let listed: serde_json::Value = serde_json::from_slice(&out.stdout)
            .with_context(|| "`ip -d -j link show` printed no JSON".to_string())?;
        let forwarding: std::collections::HashSet<&str> = listed
            .as_array()
            .into_iter()
            .flatten()
            .filter(|l| l["linkinfo"]["info_slave_data"]["state"] == "forwarding")
            .filter_map(|l| l["ifname"].as_str())
            .collect();
        let waiting: Vec<&str> = ports
            .iter()
            .map(String::as_str)
            .filter(|p| !forwarding.contains(p))
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "switch ports not forwarding after {:?}: {}",
                within,
                waiting.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Bytes each of `devs` has sent (its egress counter), from `/proc/net/dev`, which shows the
/// calling thread's namespace (`/sys/class/net` shows the one sysfs was mounted in).
pub fn tx_bytes(devs: &[&str]) -> Vec<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/net/dev").unwrap_or_default();
    devs.iter().map(|dev| dev_counter(&text, dev, 8)).collect()
}

/// Bytes each of `links` has sent: its device's egress counter, or, for a link in a server
/// namespace of its own, what its switch port here received.
pub fn links_sent(links: &[Link]) -> Vec<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/net/dev").unwrap_or_default();
    links
        .iter()
        .map(|l| match &l.switch_port {
            // Receive bytes is the first field.
            Some(port) => dev_counter(&text, port, 0),
            None => dev_counter(&text, &l.dev, 8),
        })
        .collect()
}

/// Field `field` of `dev`'s line of /proc/net/dev (`text`): receive has 8 fields (bytes
/// first), then transmit's (bytes the 9th); 0 when it is not there.
fn dev_counter(text: &str, dev: &str, field: usize) -> u64 {
    text.lines()
        .find_map(|l| {
            let (name, rest) = l.split_once(':')?;
            (name.trim() == dev).then_some(rest)
        })
        .and_then(|rest| rest.split_whitespace().nth(field)?.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_links_parse_as_tc_would_read_them() {
        assert_eq!(parse_rate("100mbit"), Ok(100_000_000));
        assert_eq!(parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("2.5G"), Ok(2_500_000_000));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("10").is_err());
        assert_eq!(parse_links("4x250mbit"), Ok((4, 250_000_000)));
        assert_eq!(parse_links("1 x 1gbit"), Ok((1, 1_000_000_000)));
        assert!(parse_links("0x1gbit").is_err());
        assert!(parse_links("4mbit").is_err());
    }

    #[test]
    fn a_bonds_layer2_hash_spreads_a_rooms_macs_as_the_kernels_would() {
        let client = |last: u8| [0x52, 0x54, 0x00, 0x78, 0x00, last];
        // (0x01 ^ 0x00) ^ 0x0800 = 0x801: 2049 % 4 = 1, % 3 = 0.
        assert_eq!(layer2_hash(BOND_MAC, client(0x00), 4), 1);
        assert_eq!(layer2_hash(BOND_MAC, client(0x00), 3), 0);
        // Consecutive MACs take the links in turn, 40 of them 10 a link on 4.
        let mut per_link = [0; 4];
        for i in 0..40 {
            per_link[layer2_hash(BOND_MAC, client(i), 4)] += 1;
        }
        assert_eq!(per_link, [10; 4]);
        // MACs alike in their last byte take one link, however the rest differ.
        let other = [0x00, 0x11, 0x22, 0x33, 0x44, 0x00];
        assert_eq!(
            layer2_hash(BOND_MAC, other, 4),
            layer2_hash(BOND_MAC, client(0x00), 4)
        );
        assert_eq!(layer2_hash(BOND_MAC, client(7), 1), 0);
    }

    #[test]
    fn a_links_bytes_are_its_egress_or_what_its_switch_port_received() {
        let text = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       1    0    0    0     0          0         0      200       2    0    0    0     0       0          0
  m1p0: 5000000    4000    0    0    0     0          0         0     7000      50    0    0    0     0       0          0
";
        assert_eq!(dev_counter(text, "m1p0", 0), 5_000_000);
        assert_eq!(dev_counter(text, "m1p0", 8), 7000);
        assert_eq!(dev_counter(text, "lo", 8), 200);
        assert_eq!(dev_counter(text, "m1p", 0), 0);
    }

    #[test]
    fn a_clients_frames_are_redirected_by_its_whole_mac() {
        let line = redirect("s0", [0x52, 0x54, 0x00, 0x78, 0x01, 0x0a], "s2");
        assert_eq!(
            line,
            "filter add dev s0 egress protocol all u32 match u16 0x5254 0xffff at -14 match u32 0x0078010a 0xffffffff at -12 action mirred egress redirect dev s2"
        );
        let l = Link {
            dev: "s1".into(),
            address: Ipv4Addr::new(10, 0, 0, 1),
            rate: 1,
            macs: Some(vec!["52:54:00:78:01:0a".into()]),
            switch_port: None,
        };
        assert!(l.carries("52:54:00:78:01:0A", None));
        assert!(!l.carries("52:54:00:78:01:0b", Some(l.address)));
        let by_address = Link { macs: None, ..l };
        assert!(by_address.carries("52:54:00:78:01:0b", Some(by_address.address)));
    }
}

//! The storm's virtual room, wired inside the storm's own network namespace: a bridge as the
//! switch; the server's K links, each a veth with its own address on the clients' subnet and
//! its egress shaped by `tc tbf` to the link's rate (replies leave by the link of their source
//! address: source policy routing, with ARP answered only by the link that holds the address);
//! and per client a veth whose far end lives in the client's own namespace, its switch port
//! shaped to the client's link rate. Nothing here can reach a link outside the namespace.

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

fn sysctl(path: &str, value: &str) -> anyhow::Result<()> {
    std::fs::write(format!("/proc/sys/{path}"), value).with_context(|| format!("setting {path}"))
}

/// A tbf qdisc shaping `dev`'s egress to `rate` bits per second. The bucket holds 10 ms of
/// the rate (at least 64 KiB, so one GSO packet always fits) and the queue 20 ms.
fn shape(dev: &str, rate: u64) -> String {
    let burst = (rate / 8 / 100).max(64 * 1024);
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
    let first = addresses[0];
    crate::lab::net::ip(&["link", "set", "lo", "up"]).ok();
    let mut cmds = vec![
        format!("link add {BRIDGE} type bridge stp_state 0 forward_delay 0"),
        format!("link set {BRIDGE} up"),
    ];
    let mut tc = Vec::new();
    let mut out = Vec::new();
    let subnet = u32::from(first) & (u32::MAX << (32 - prefix as u32));
    let net = format!("{}/{prefix}", Ipv4Addr::from(subnet));
    sysctl("net/ipv4/conf/all/arp_ignore", "1")?;
    sysctl("net/ipv4/conf/all/arp_announce", "2")?;
    sysctl("net/ipv4/conf/all/rp_filter", "0")?;
    quiet_switch()?;
    for (k, &address) in addresses.iter().enumerate() {
        let dev = if k == 0 {
            first_dev.to_string()
        } else {
            format!("s{k}")
        };
        cmds.push(format!("link add {dev} type veth peer name sp{k}"));
        cmds.push(format!("link set sp{k} master {BRIDGE}"));
        cmds.push(format!("link set sp{k} up"));
        cmds.push(format!("addr add {address}/{prefix} dev {dev}"));
        cmds.push(format!("link set {dev} up"));
        // Replies leave by the link that holds their source address.
        let table = 100 + k;
        cmds.push(format!("rule add from {address} table {table}"));
        cmds.push(format!(
            "route add {net} dev {dev} src {address} table {table}"
        ));
        tc.push(shape(&dev, rate));
        out.push(Link { dev, address, rate });
    }
    ip(&cmds)?;
    batch("tc", &tc)?;
    Ok(out)
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
/// thread `tid`, its switch port `p{i}` shaped to `rate`.
pub fn wire_clients(clients: &[(usize, String, libc::pid_t)], rate: u64) -> anyhow::Result<()> {
    let mut cmds = Vec::new();
    let mut tc = Vec::new();
    for (i, mac, tid) in clients {
        cmds.push(format!(
            "link add c{i} address {mac} type veth peer name p{i}"
        ));
        cmds.push(format!("link set c{i} netns {tid}"));
        cmds.push(format!("link set p{i} master {BRIDGE}"));
        cmds.push(format!("link set p{i} up"));
        tc.push(shape(&format!("p{i}"), rate));
    }
    ip(&cmds)?;
    batch("tc", &tc)
}

/// Waits until the switch forwards on each of `ports` (a port whose peer was just set up
/// stays `disabled` until the kernel has handled its carrier, and drops what arrives
/// meanwhile: a client that sends its first DISCOVER then loses it, as no PC on a ready switch
/// port would). Fails naming the ports still not forwarding after `within`.
pub fn wait_forwarding(ports: &[String], within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let out = Command::new("ip")
            .args(["-d", "-j", "link", "show", "master", BRIDGE])
            .output()
            .context("running `ip -d -j link show` (package iproute2)")?;
        let listed: serde_json::Value = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("`ip -j link show master {BRIDGE}` printed no JSON"))?;
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
    devs.iter()
        .map(|dev| {
            text.lines()
                .find_map(|l| {
                    let (name, rest) = l.split_once(':')?;
                    (name.trim() == *dev).then_some(rest)
                })
                // Receive has 8 fields; the 9th is bytes sent.
                .and_then(|rest| rest.split_whitespace().nth(8)?.parse().ok())
                .unwrap_or(0)
        })
        .collect()
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
}

//! The lab's second room (`--room2`): a bridge of its own for some of the clients, behind a
//! router namespace that forwards between it and the server's bridge and runs ISC `dhcrelay`
//! towards the server, so the daemon sees relayed requests (giaddr set) as a campus's rooms
//! send them. In proxy mode the site's DHCP server (dnsmasq) sits on a namespace of its own on
//! the server's segment and serves both rooms, the second through the same relay.
//!
//! Each namespace is held by a `sleep` made by `unshare --net`, killed with the lab, so the
//! namespaces go away with it; commands run in them through `nsenter`.

use super::net::{self, dies_with_lab};
use anyhow::{Context, bail};
use bootpool::config::{Config, DhcpMode, DhcpSubnet};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The bridge the second room's taps join, and the router's interface on it (dhcrelay's
/// circuit id in option 82), in the lab's namespace (no address of its own: the
/// daemon's DHCP socket, bound to its own interface, never hears the room directly).
pub const BRIDGE: &str = "room2";

/// A network namespace held open by a process of its own (the site's second server's too,
/// `member.rs`).
pub(super) struct Netns(Child);

impl Netns {
    /// A new namespace with its loopback up.
    pub(super) fn new() -> anyhow::Result<Netns> {
        let mut cmd = Command::new("unshare");
        cmd.args(["--net", "--", "sleep", "infinity"])
            .stdin(Stdio::null());
        dies_with_lab(&mut cmd, libc::SIGKILL);
        let ns = Netns(
            cmd.spawn()
                .context("running `unshare` (package util-linux)")?,
        );
        // `unshare` enters the namespace before it runs `sleep`: wait until it has.
        let ours = std::fs::read_link("/proc/self/ns/net")?;
        let theirs = format!("/proc/{}/ns/net", ns.0.id());
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_link(&theirs).ok().is_none_or(|l| l == ours) {
            if Instant::now() > deadline {
                bail!("unshare --net did not make a namespace within 5 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        ns.run("ip", &["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub(super) fn pid(&self) -> String {
        self.0.id().to_string()
    }

    /// `PROGRAM ARGS` run in the namespace.
    pub(super) fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args(["--target", &self.pid(), "--net", "--", program])
            .args(args);
        cmd
    }

    /// Runs `PROGRAM ARGS` in the namespace, failing with its message.
    pub(super) fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<()> {
        let out = self
            .command(program, args)
            .output()
            .with_context(|| format!("running {program} through nsenter"))?;
        if !out.status.success() {
            bail!(
                "{program} {} (in a lab namespace): {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// A veth pair: `outside` in the lab's namespace, a port of `bridge`; `inside` here with
    /// `address/prefix`.
    pub(super) fn cable(
        &self,
        outside: &str,
        bridge: &str,
        inside: &str,
        address: Ipv4Addr,
        prefix: u8,
    ) -> anyhow::Result<()> {
        let pid = self.pid();
        net::ip(&[
            "link", "add", outside, "type", "veth", "peer", "name", inside, "netns", &pid,
        ])?;
        net::ip(&["link", "set", outside, "master", bridge])?;
        net::ip(&["link", "set", outside, "up"])?;
        self.run(
            "ip",
            &["addr", "add", &format!("{address}/{prefix}"), "dev", inside],
        )?;
        self.run("ip", &["link", "set", inside, "up"])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The second room as wired: its namespaces and the programs in them, killed when dropped.
pub struct Room2 {
    /// Dropped after the programs in them (fields drop after `drop`).
    _router: Netns,
    _site: Option<Netns>,
    helpers: Vec<Child>,
    /// What the lab says about it.
    pub summary: String,
}

impl Drop for Room2 {
    fn drop(&mut self) {
        for helper in &mut self.helpers {
            let _ = helper.kill();
            let _ = helper.wait();
        }
    }
}

/// The room's subnet: the first of `dhcp.subnets` that is not the server's own.
pub fn subnet(config: &Config) -> anyhow::Result<&DhcpSubnet> {
    config
        .dhcp
        .subnets
        .iter()
        .enumerate()
        .find(|(i, _)| *i != config.dhcp.home)
        .map(|(_, s)| s)
        .context(
            "--room2 needs a second subnet in dhcp.subnets (docs/subnets.md): the room's clients \
             are given its addresses through the relay",
        )
}

/// `network + n`.
fn host(network: Ipv4Addr, n: u32) -> Ipv4Addr {
    (u32::from(network) + n).into()
}

/// The relay's address on the server's segment: `dhcp.relays`' first single address, else the
/// server's subnet's host .254.
fn relay_address(config: &Config) -> Ipv4Addr {
    config
        .dhcp
        .relays
        .iter()
        .flatten()
        .find(|r| r.prefix == 32)
        .map(|r| r.network)
        .unwrap_or_else(|| host(config.dhcp.home().subnet.network, 254))
}

/// Wires the second room beside `server_bridge` (already up with the server's address): its
/// bridge, the router and its relay, and in proxy mode the site's DHCP server for both rooms.
pub fn wire(config: &Config, server_bridge: &str, dir: &Path) -> anyhow::Result<Room2> {
    let room = subnet(config)?;
    let home = config.dhcp.home();
    let (room_net, room_prefix) = (room.subnet.network, room.subnet.prefix);
    let gateway = room.router.unwrap_or_else(|| host(room_net, 1));
    let up = relay_address(config);
    net::make_switch(BRIDGE)?;
    let router = Netns::new()?;
    router.cable("rt-up", server_bridge, "uplink", up, home.subnet.prefix)?;
    router.cable("rt-down", BRIDGE, "room2", gateway, room_prefix)?;
    router.run("sysctl", &["-qw", "net.ipv4.ip_forward=1"])?;
    let room_cidr = format!("{room_net}/{room_prefix}");
    net::ip(&["route", "add", &room_cidr, "via", &up.to_string()])?;

    // In proxy mode the site's DHCP server, on the server's segment, answers both rooms.
    let mut helpers = Vec::new();
    let mut servers = vec![config.server.address];
    let mut site = None;
    if config.dhcp.mode == DhcpMode::Proxy {
        let ns = Netns::new()?;
        let address = host(home.subnet.network, 253);
        ns.cable(
            "site-up",
            server_bridge,
            "eth0",
            address,
            home.subnet.prefix,
        )?;
        ns.run("ip", &["route", "add", &room_cidr, "via", &up.to_string()])?;
        let (lo, hi) = default_range(home);
        let (room_lo, room_hi) = default_range(room);
        let mut cmd = ns.command(
            "dnsmasq",
            &[
                "--interface=eth0",
                &format!("--dhcp-range={lo},{hi},1h"),
                &format!(
                    "--dhcp-range=set:room2,{room_lo},{room_hi},{},1h",
                    room.subnet.mask()
                ),
                &format!("--dhcp-option=tag:room2,option:router,{gateway}"),
            ],
        );
        net::dhcp_peer_args(&mut cmd, dir)?;
        dies_with_lab(&mut cmd, libc::SIGKILL);
        helpers.push(
            cmd.spawn()
                .context("starting dnsmasq in the site's namespace")?,
        );
        servers.push(address);
        site = Some(ns);
    }

    let log_path = dir.join("dhcrelay.log");
    let log = std::fs::File::create(&log_path)?;
    let mut args = vec![
        "-d", "--no-pid", "-4", "-a", "-id", "room2", "-iu", "uplink",
    ];
    let servers_text: Vec<String> = servers.iter().map(|s| s.to_string()).collect();
    args.extend(servers_text.iter().map(String::as_str));
    let mut cmd = router.command("dhcrelay", &args);
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    dies_with_lab(&mut cmd, libc::SIGKILL);
    helpers.push(
        cmd.spawn()
            .context("starting dhcrelay (package isc-dhcp-relay)")?,
    );
    // It relays once it says it listens on the room's side.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let said = std::fs::read_to_string(&log_path).unwrap_or_default();
        if said
            .lines()
            .any(|l| l.starts_with("Listening on ") && l.contains("/room2"))
        {
            break;
        }
        if Instant::now() > deadline {
            bail!("dhcrelay did not start within 10 s:\n{said}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let summary = format!(
        "room 2 is {room_cidr} behind router {gateway} (relay {up} -> {}){}",
        servers_text.join(", "),
        if site.is_some() {
            "; dnsmasq on the server's segment gives both rooms' addresses"
        } else {
            ""
        }
    );
    Ok(Room2 {
        _router: router,
        _site: site,
        helpers,
        summary,
    })
}

/// A subnet's range, or hosts .100 to .199 (proxy mode's subnets need none).
pub fn default_range(s: &DhcpSubnet) -> (Ipv4Addr, Ipv4Addr) {
    s.range
        .unwrap_or_else(|| (host(s.subnet.network, 100), host(s.subnet.network, 199)))
}

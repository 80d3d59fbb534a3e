//! The lab's network: the lab process moves itself into a fresh network namespace before its
//! runtime starts, so every child (the daemon, qemu) lives there too, and the namespace goes
//! away with the last of them. Nothing the lab does can reach the host's own links.

use anyhow::{Context, bail};
use std::net::Ipv4Addr;
use std::process::Command;

/// Makes the child get `signal` when the lab process dies, however it dies, so nothing the
/// lab started outlives it.
pub(crate) fn dies_with_lab(cmd: &mut Command, signal: libc::c_int) {
    bootpool::sys::process::set_parent_death_signal(cmd, signal);
}

/// Moves the calling thread (call it before any other thread exists) into a new network
/// namespace, and brings its loopback up.
pub fn enter_private_namespace() -> anyhow::Result<()> {
    // Only this thread moves; the caller guarantees no other thread exists yet, so every
    // later thread inherits the namespace.
    if let Err(e) = bootpool::sys::process::unshare_network() {
        bail!("cannot create a network namespace (the lab needs root): {e}");
    }
    ip(&["link", "set", "lo", "up"])
}

/// Runs `ip ARGS`, failing with its message.
pub fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running `ip` (package iproute2)")?;
    succeeded("ip", args, &out)
}

/// `PROGRAM ARGS` succeeded, or the error that quotes its message.
fn succeeded(program: &str, args: &[&str], out: &std::process::Output) -> anyhow::Result<()> {
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Creates the bridge the daemon serves, with the server's address on it.
pub fn make_bridge(name: &str, address: Ipv4Addr, prefix: u8) -> anyhow::Result<()> {
    make_switch(name)?;
    ip(&["addr", "add", &format!("{address}/{prefix}"), "dev", name])
}

/// Creates a bridge with no address, up: a switch the lab's namespace takes no part in.
pub fn make_switch(name: &str) -> anyhow::Result<()> {
    ip(&["link", "add", name, "type", "bridge"])?;
    // No STP and no forwarding delay: ports forward as soon as qemu opens them.
    ip(&[
        "link",
        "set",
        name,
        "type",
        "bridge",
        "stp_state",
        "0",
        "forward_delay",
        "0",
    ])?;
    ip(&["link", "set", name, "up"])
}

/// Creates a tap device on the bridge for one client.
pub fn make_tap(name: &str, bridge: &str) -> anyhow::Result<()> {
    ip(&["tuntap", "add", "dev", name, "mode", "tap"])?;
    ip(&["link", "set", name, "master", bridge])?;
    ip(&["link", "set", name, "up"])
}

/// The nftables table of `--cut-dhcp`: frames the host sends out of a tap in the set `cut`
/// (the bridge's local output hook, which sees each port a broadcast is flooded to) are
/// dropped when they are DHCP answers. Clients join and leave the set.
const CUT_TABLE: &str = "table bridge bootpool_lab {
    set cut { type ifname; }
    chain out {
        type filter hook output priority 0; policy accept;
        oifname @cut udp dport 68 drop
    }
}
";

/// Installs `CUT_TABLE` in the lab's namespace.
pub fn prepare_dhcp_cuts() -> anyhow::Result<()> {
    nft(&["-f", "-"], Some(CUT_TABLE))
}

/// Drops every DHCP answer to the client on `tap` from now on.
pub fn cut_dhcp(tap: &str) -> anyhow::Result<()> {
    nft(
        &[
            "add",
            "element",
            "bridge",
            "bootpool_lab",
            "cut",
            &format!("{{ {tap} }}"),
        ],
        None,
    )
}

/// Lets DHCP answers reach the client on `tap` again.
pub fn restore_dhcp(tap: &str) -> anyhow::Result<()> {
    nft(
        &[
            "delete",
            "element",
            "bridge",
            "bootpool_lab",
            "cut",
            &format!("{{ {tap} }}"),
        ],
        None,
    )
}

/// Runs `nft ARGS` (with `input` on its stdin), failing with its message.
fn nft(args: &[&str], input: Option<&str>) -> anyhow::Result<()> {
    use std::io::Write;
    let mut child = Command::new("nft")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("running `nft` (package nftables)")?;
    if let Some(text) = input {
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(text.as_bytes())?;
    }
    drop(child.stdin.take());
    let out = child.wait_with_output()?;
    succeeded("nft", args, &out)
}

/// Router advertisements on the bridge. iPXE configures IPv6 beside DHCPv4 and, with no router
/// on the link, waits about ten seconds for one before it goes on; an advertised prefix (that
/// is not a default route) lets it go on at once. `dhcp6`: the O flag, as bootpool's own
/// advertisements say it (`proto::ra`), for a config with `dhcp6` whose `router_advertisements`
/// are left to the network (here, radvd). Returns None when radvd is not installed.
pub fn start_router_adverts(
    bridge: &str,
    prefix: &str,
    dhcp6: bool,
    dir: &std::path::Path,
) -> anyhow::Result<Option<std::process::Child>> {
    let Some(radvd) = ["/usr/sbin/radvd", "/sbin/radvd"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
    else {
        return Ok(None);
    };
    // radvd wants forwarding on; this is the lab's own namespace, so it changes nothing else.
    std::fs::write("/proc/sys/net/ipv6/conf/all/forwarding", "1")
        .context("enabling IPv6 forwarding in the lab")?;
    let conf = dir.join("radvd.conf");
    let flags = if dhcp6 {
        "  AdvOtherConfigFlag on;\n"
    } else {
        ""
    };
    std::fs::write(
        &conf,
        format!(
            "interface {bridge} {{\n  AdvSendAdvert on;\n  MinRtrAdvInterval 3;\n  MaxRtrAdvInterval 10;\n  \
             AdvDefaultLifetime 0;\n{flags}  prefix {prefix} {{ AdvOnLink on; AdvAutonomous on; }};\n}};\n"
        ),
    )?;
    let log = std::fs::File::create(dir.join("radvd.log"))?;
    let mut cmd = Command::new(radvd);
    cmd.arg("--nodaemon")
        .arg("--config")
        .arg(&conf)
        .arg("--pidfile")
        .arg(dir.join("radvd.pid"));
    cmd.args(["--logmethod", "stderr"])
        .stdout(log.try_clone()?)
        .stderr(log);
    dies_with_lab(&mut cmd, libc::SIGKILL);
    Ok(Some(cmd.spawn().context("starting radvd")?))
}

/// The address-giving DHCP server beside a proxy-mode bootpool: dnsmasq in the foreground on
/// the bridge only, with DHCP and nothing else (no DNS, no PXE of its own, no ping before
/// offering, which blocked offers for seconds each). Returns None when dnsmasq is not installed.
pub fn start_dhcp_peer(
    bridge: &str,
    range: (std::net::Ipv4Addr, std::net::Ipv4Addr),
    dir: &std::path::Path,
) -> anyhow::Result<Option<std::process::Child>> {
    let Some(dnsmasq) = ["/usr/sbin/dnsmasq", "/sbin/dnsmasq"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
    else {
        return Ok(None);
    };
    let mut cmd = Command::new(dnsmasq);
    cmd.arg(format!("--interface={bridge}"))
        .arg(format!("--dhcp-range={},{},1h", range.0, range.1));
    dhcp_peer_args(&mut cmd, dir)?;
    dies_with_lab(&mut cmd, libc::SIGKILL);
    Ok(Some(cmd.spawn().context("starting dnsmasq")?))
}

/// What every lab dnsmasq is run with besides its interface and ranges: in the foreground,
/// DHCP only, its lease file, pid file and log in the run's folder `dir`.
pub fn dhcp_peer_args(cmd: &mut Command, dir: &std::path::Path) -> anyhow::Result<()> {
    let log = std::fs::File::create(dir.join("dnsmasq.log"))?;
    cmd.args([
        "--no-daemon",
        "--conf-file=/dev/null",
        "--port=0",
        "--user=root",
    ])
    .args(["--bind-interfaces", "--no-ping", "--log-dhcp"])
    .arg(format!(
        "--dhcp-leasefile={}",
        dir.join("dnsmasq.leases").display()
    ))
    .arg(format!("--pid-file={}", dir.join("dnsmasq.pid").display()))
    .stdout(log.try_clone()?)
    .stderr(log);
    Ok(())
}

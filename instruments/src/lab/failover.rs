//! `bootpool lab --member B --kill-member-after SECS`: a server of the site dies under running
//! clients (issue 47, docs/failover.md). Both members run in namespaces of their own
//! (`member`), each with a fixed address of the host's beside its `server.address`, which
//! keepalived moves: each member's keepalived.conf is the one `bootpool site keepalived`
//! writes for it from the site's rows. The death is a host's: member a's bootpool and
//! keepalived are killed with -9 and its link goes down, so its clients' connections go
//! silent (no reset from a dying kernel) until b takes the address and tickles them.

use super::member::{Keepalived, Member};
use super::net::dies_with_lab;
use anyhow::{Context, bail};
use bootpool::config::Config;
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The lab's own addresses when the members hold theirs in namespaces: the subnet's last host
/// address for the bridge (`below` 0), the next ones down for member a's and b's fixed
/// addresses (1, 2), where keepalived's advertisements come from. None may be a member's
/// address or in a DHCP range.
pub(super) fn own_address(
    config: &Config,
    second: &Config,
    below: u32,
) -> anyhow::Result<Ipv4Addr> {
    let subnet = &config.dhcp.home().subnet;
    let broadcast = u32::from(subnet.network) | (u32::MAX >> subnet.prefix);
    let ip = Ipv4Addr::from(broadcast - 1 - below);
    for c in [config, second] {
        let taken = c.server.address == ip
            || c.dhcp
                .home()
                .range
                .is_some_and(|(lo, hi)| (lo..=hi).contains(&ip));
        if taken {
            bail!(
                "--kill-member-after: the lab gives itself and the members {ip} and the two \
                 addresses below it; keep them out of server.address and dhcp.range"
            );
        }
    }
    Ok(ip)
}

/// Writes `member`'s keepalived.conf with `bootpool site keepalived` (the members' rows must
/// be in the database: both daemons heartbeat by now), lets go of the address held by hand
/// and starts keepalived on it, in the member's namespace; returns once it holds the address
/// again, as the owner's master.
pub(super) fn start_keepalived(member: &mut Member, run_dir: &Path) -> anyhow::Result<()> {
    let dir = run_dir.join(format!("keepalived-{}", member.name));
    std::fs::create_dir_all(&dir)?;
    let out = Command::new(super::daemon::daemon())
        .args(["site", "keepalived", "--config"])
        .arg(member.config())
        .args(["--member", member.name, "--interface", &member.interface])
        .output()
        .context("running bootpool site keepalived")?;
    if !out.status.success() {
        bail!(
            "bootpool site keepalived --member {}: {}",
            member.name,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let conf = dir.join("keepalived.conf");
    std::fs::write(&conf, &out.stdout)?;
    let cidr = format!("{}/{}", member.address, member.prefix);
    member
        .ns
        .run("ip", &["addr", "del", &cidr, "dev", &member.interface])?;
    let file = |name: &str| dir.join(name).display().to_string();
    let log = std::fs::File::create(run_dir.join(format!("keepalived-{}.log", member.name)))?;
    let mut cmd = member.ns.command(
        "keepalived",
        &[
            "--dont-fork",
            "--log-console",
            "--log-detail",
            "--vrrp",
            "--use-file",
            &file("keepalived.conf"),
            "--pid",
            &file("keepalived.pid"),
            "--vrrp_pid",
            &file("vrrp.pid"),
            "--checkers_pid",
            &file("checkers.pid"),
        ],
    );
    cmd.process_group(0)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    dies_with_lab(&mut cmd, libc::SIGKILL);
    let child = cmd
        .spawn()
        .context("running keepalived (package keepalived; scripts/setup installs it)")?;
    member.keepalived = Some(Keepalived(child));
    wait_until_held(member, member.address, Duration::from_secs(20))
}

/// Whether `member`'s namespace holds `address` on its interface.
pub(super) fn holds(member: &Member, address: Ipv4Addr) -> bool {
    let out = member
        .ns
        .command(
            "ip",
            &["-4", "-o", "addr", "show", "dev", &member.interface],
        )
        .output();
    out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(&format!(" {address}/")))
}

fn wait_until_held(member: &Member, address: Ipv4Addr, bound: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + bound;
    while !holds(member, address) {
        if Instant::now() > deadline {
            bail!(
                "member {}'s keepalived did not take {address} within {} s",
                member.name,
                bound.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// A host's death: the member's bootpool and keepalived killed with -9, then its link down.
pub(super) fn kill(member: &mut Member) -> anyhow::Result<()> {
    member.daemon.kill();
    if let Some(k) = member.keepalived.as_mut() {
        k.kill();
    }
    member
        .ns
        .run("ip", &["link", "set", &member.interface, "down"])
}

/// Member a dies (`kill`); returns, once b's keepalived holds a's address, what happened
/// and how long the takeover took.
pub(super) fn fail(a: &mut Member, b: &Member) -> anyhow::Result<String> {
    let died = Instant::now();
    kill(a)?;
    wait_until_held(b, a.address, Duration::from_secs(30))?;
    Ok(format!(
        "member a died (bootpool and keepalived killed with -9, its link down); b holds {} \
         {:.1} s later",
        a.address,
        died.elapsed().as_secs_f64()
    ))
}

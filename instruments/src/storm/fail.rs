//! A server dies mid-boot (`--fail kill|linkdown --fail-at SECONDS`, with `--servers K`):
//! each member's address becomes a VRRP address that keepalived holds, with the file
//! `bootpool site keepalived` writes for it (docs/failover.md), the member keeping a fixed
//! address of its own beside it; then, at the given second after power-on, member s1 dies:
//! `kill` kills its bootpool and keepalived with -9 (its host stays up, so its kernel closes
//! their connections), `linkdown` takes its links down first (no FIN, no reset leaves it: a
//! host that lost its network) and kills them after. The survivors' keepalived take its
//! address, their bootpool tickles its clients' connections, and the clients (`retry`)
//! carry on.
//!
//! The reference site (`--server-cmd`, `reference`) has its addresses moved the same way:
//! the same file, written by the same code (`bootpool::site::keepalived::conf`, its default
//! timers: VRRPv3, an advertisement every 0.2 s) from the members the storm made, without
//! the notify lines, which tell a bootpool that it took an address over (the reference has
//! nothing to tell, and no tickle). Its death kills every process of its host, keepalived
//! included, as bootpool's does.

use super::retry::{FailureRow, Kind};
use super::site::{Member, Site};
use anyhow::{Context, bail};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The admin token the members' configs get for keepalived's notify calls, when the storm's
/// config has none.
const TOKEN: &str = "storm-failover-notify-token";

/// Gives each member's config an `admin_token` (the notify scripts' `bootpool site takeover`
/// calls the member's API with it), if the storm's config has none. Before the members start.
pub fn prepare(site: &Site) -> anyhow::Result<()> {
    use serde_norway::Value;
    for m in &site.members {
        let text = std::fs::read_to_string(&m.config)
            .with_context(|| format!("reading {}", m.config.display()))?;
        let mut doc: Value = serde_norway::from_str(&text)?;
        let server = doc
            .get_mut("server")
            .and_then(Value::as_mapping_mut)
            .context("a member's config has no `server:`")?;
        let key = Value::String("admin_token".into());
        if !server.contains_key(&key) {
            server.insert(key, Value::String(TOKEN.into()));
        }
        std::fs::write(&m.config, serde_norway::to_string(&doc)?)
            .with_context(|| format!("writing {}", m.config.display()))?;
    }
    Ok(())
}

/// The fixed address of member `m` (0-based): counted down from the last host address of
/// the subnet of `address`/`prefix`.
pub fn fixed_address(address: Ipv4Addr, prefix: u8, m: usize) -> Ipv4Addr {
    let mask = u32::MAX << (32 - u32::from(prefix));
    let broadcast = (u32::from(address) & mask) | !mask;
    Ipv4Addr::from(broadcast - 1 - m as u32)
}

/// The members' keepalived, killed when dropped.
pub struct Keepalived {
    children: Vec<Option<Child>>,
}

impl Drop for Keepalived {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = bootpool::sys::process::kill(-(child.id() as i32), libc::SIGKILL);
            let _ = child.wait();
        }
    }
}

/// Output of `program args` run in member `m`'s namespace; fails on a non-zero exit.
fn run_in(m: &Member, program: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = m.spawn(cmd)?.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "member {}: {program} {}: {}",
            m.name,
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether member `m`'s namespace holds `address`.
fn holds(m: &Member, address: Ipv4Addr) -> bool {
    run_in(m, "ip", &["-4", "-o", "addr", "show"])
        .is_ok_and(|out| out.contains(&format!(" {address}/")))
}

/// Member `m`'s keepalived.conf for bootpool's rows: `bootpool site keepalived`'s, from the
/// site's rows (the members are live).
pub fn bootpool_conf(m: &Member) -> anyhow::Result<String> {
    let out = Command::new(crate::lab::daemon())
        .arg("site")
        .arg("keepalived")
        .arg("--config")
        .arg(&m.config)
        .arg("--member")
        .arg(&m.name)
        .arg("--interface")
        .arg(&m.links[0].dev)
        .output()
        .context("running bootpool site keepalived")?;
    if !out.status.success() {
        bail!(
            "bootpool site keepalived --member {}: {}",
            m.name,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Member `m`'s keepalived.conf for the reference site: the same file from the same code
/// and defaults, for the members the storm made, without the notify lines (bootpool's
/// takeover and release calls).
pub fn reference_conf(site: &Site, m: &Member) -> anyhow::Result<String> {
    use bootpool::site::keepalived;
    let members: Vec<bootpool::site::member::Member> = site
        .members
        .iter()
        .map(|o| bootpool::site::member::Member {
            name: o.name.clone(),
            addresses: vec![o.links[0].address.into()],
            links: o.links.iter().map(|l| l.address).collect(),
            rooms: Vec::new(),
            http: String::new(),
            started: 0,
        })
        .collect();
    let opts = keepalived::Options {
        interface: m.links[0].dev.clone(),
        advert_s: keepalived::ADVERT_S,
        first_vrid: keepalived::FIRST_VRID,
        peers: Vec::new(),
        source: None,
        program: "unused".into(),
        config: "unused".into(),
    };
    let text = keepalived::conf(&members, &m.name, &opts).map_err(|e| anyhow::anyhow!(e))?;
    Ok(without_notify(&text))
}

/// A keepalived.conf without its notify lines.
fn without_notify(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("notify_"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Hands each member's address to keepalived: writes its keepalived.conf (`conf`), gives the
/// member its fixed address, lets go of the address the storm gave it and starts keepalived,
/// which takes it back as the owner's; waits until every member holds its own address again.
/// bootpool's rows: after the members are live; the reference's: before its stacks start.
pub fn start_keepalived(
    site: &Site,
    prefix: u8,
    run_dir: &Path,
    conf: &dyn Fn(&Member) -> anyhow::Result<String>,
) -> anyhow::Result<Keepalived> {
    let mut ka = Keepalived {
        children: Vec::new(),
    };
    for (i, m) in site.members.iter().enumerate() {
        if m.links.len() != 1 {
            bail!(
                "--fail moves each member's address with keepalived on one interface: give --server-links 1xRATE"
            );
        }
        let dev = &m.links[0].dev;
        let address = m.links[0].address;
        let text = conf(m)?;
        let dir = run_dir.join(format!("keepalived-{}", m.name));
        std::fs::create_dir_all(&dir)?;
        let conf = dir.join("keepalived.conf");
        std::fs::write(&conf, text)?;
        let fixed = fixed_address(address, prefix, i);
        // The fixed address stays when the first one goes (promoted, not deleted with it).
        for key in ["all", "default", dev.as_str()] {
            run_in(
                m,
                "sysctl",
                &["-qw", &format!("net.ipv4.conf.{key}.promote_secondaries=1")],
            )?;
        }
        run_in(
            m,
            "ip",
            &["addr", "add", &format!("{fixed}/{prefix}"), "dev", dev],
        )?;
        run_in(
            m,
            "ip",
            &["addr", "del", &format!("{address}/{prefix}"), "dev", dev],
        )?;
        ka.children.push(Some(keepalived(m, &dir, &conf)?));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for m in &site.members {
        while !holds(m, m.links[0].address) {
            if Instant::now() >= deadline {
                bail!(
                    "member {}'s keepalived did not take its address {} within 30 s (its log: {})",
                    m.name,
                    m.links[0].address,
                    run_dir
                        .join(format!("keepalived-{}/keepalived.log", m.name))
                        .display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(ka)
}

/// keepalived for member `m`, VRRP only, in the foreground, its files in `dir`.
fn keepalived(m: &Member, dir: &Path, conf: &Path) -> anyhow::Result<Child> {
    use std::os::unix::process::CommandExt;
    let file = |name: &str| -> PathBuf { dir.join(name) };
    let log = std::fs::File::create(file("keepalived.log"))?;
    let mut cmd = Command::new("keepalived");
    cmd.args(["--dont-fork", "--log-console", "--log-detail", "--vrrp"])
        .arg("--use-file")
        .arg(conf)
        .arg("--pid")
        .arg(file("keepalived.pid"))
        .arg("--vrrp_pid")
        .arg(file("vrrp.pid"))
        .arg("--checkers_pid")
        .arg(file("checkers.pid"))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0);
    crate::lab::dies_with_lab(&mut cmd, libc::SIGKILL);
    m.spawn(cmd)
        .context("starting keepalived (apt-get install keepalived)")
}

/// What the failure did: what, to whom, when (seconds from power-on).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Failed {
    pub kind: Kind,
    pub member: String,
    pub address: Ipv4Addr,
    pub at_s: f64,
}

/// Kills member s1 as `kind` says, at `at` (an instant): its links down first for
/// `linkdown`, then its server's and its keepalived's process groups with -9, and whatever
/// else runs on its host (a reference stack's daemons that left the group: nbd-server).
pub fn fail(
    site: &Site,
    ka: &mut Keepalived,
    kind: Kind,
    at: Instant,
    power_on: Instant,
) -> anyhow::Result<Failed> {
    let m = &site.members[0];
    std::thread::sleep(at.saturating_duration_since(Instant::now()));
    let when = Instant::now();
    if kind == Kind::Linkdown {
        for l in &m.links {
            run_in(m, "ip", &["link", "set", &l.dev, "down"])?;
        }
    }
    if let Some(pid) = m.pid {
        let _ = bootpool::sys::process::kill(-(pid as i32), libc::SIGKILL);
    }
    if let Some(Some(child)) = ka.children.first_mut() {
        let _ = bootpool::sys::process::kill(-(child.id() as i32), libc::SIGKILL);
    }
    m.kill_all();
    Ok(Failed {
        kind,
        member: m.name.clone(),
        address: m.links[0].address,
        at_s: when.saturating_duration_since(power_on).as_secs_f64(),
    })
}

/// The report's row of the failure: how the room took it (`start`: power-on, in seconds
/// from the storm's start, as the clients' times are).
pub fn row(failed: &Failed, clients: &[super::client::Outcome], start: f64) -> FailureRow {
    let at = start + failed.at_s;
    let stall = clients
        .iter()
        .filter_map(|c| {
            let (from, to) = super::retry::longest_gap_after(&c.answers, at)?;
            Some((c.index, from, to))
        })
        .max_by(|a, b| (a.2 - a.1).total_cmp(&(b.2 - b.1)));
    FailureRow {
        kind: match failed.kind {
            Kind::Kill => "kill -9".into(),
            Kind::Linkdown => "link-down".into(),
        },
        member: failed.member.clone(),
        address: failed.address,
        at_s: failed.at_s,
        clients: clients.len(),
        booted: clients.iter().filter(|c| c.result == "booted").count(),
        restarted: clients.iter().filter(|c| c.restarts > 0).count(),
        reconnected: clients.iter().filter(|c| c.root_reconnects > 0).count(),
        longest_stall_s: stall.map(|(_, from, to)| to - from),
        longest_stall_client: stall.map(|(i, _, _)| i),
        longest_stall_from_s: stall.map(|(_, from, _)| (from - start).max(0.0)),
        goal_s: match failed.kind {
            Kind::Kill => 5.0,
            Kind::Linkdown => 15.0,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_references_keepalived_conf_is_bootpools_without_its_notify_lines() {
        let text = "vrrp_instance bootpool_50 {\n    priority 200\n    virtual_ipaddress {\n        10.78.0.1/32 dev s0\n    }\n    notify_master \"/b site takeover --config c 10.78.0.1\"\n    notify_backup \"/b site release --config c 10.78.0.1\"\n}\n";
        assert_eq!(
            without_notify(text),
            "vrrp_instance bootpool_50 {\n    priority 200\n    virtual_ipaddress {\n        10.78.0.1/32 dev s0\n    }\n}\n"
        );
    }

    #[test]
    fn fixed_addresses_count_down_from_the_subnets_last_host() {
        let a = Ipv4Addr::new(10, 78, 0, 1);
        assert_eq!(fixed_address(a, 22, 0), Ipv4Addr::new(10, 78, 3, 254));
        assert_eq!(fixed_address(a, 22, 1), Ipv4Addr::new(10, 78, 3, 253));
        assert_eq!(fixed_address(a, 24, 0), Ipv4Addr::new(10, 78, 0, 254));
    }
}

//! The reference stack as a site (`--servers 2 --server-cmd CMD`): CMD (bench/storm/
//! reference.sh) started on each member's host, in its namespace, in place of `bootpool
//! serve`, each serving the same image at its member's address, and for DHCP a Kea HA pair
//! (`kea`: load-balancing, the fastest sane timers) in place of dnsmasq's. With `--fail` the
//! members' addresses are keepalived's first (`fail::start_keepalived` with the reference's
//! file), so the pair's listeners have their fixed addresses and every daemon of the stack
//! listens on all of its host's addresses, the one it may take over included.
//!
//! What CMD is told, in its environment: `REFERENCE_MEMBER` (sN), `REFERENCE_ADDR` (the
//! address its clients are handed), `REFERENCE_IFACE` (the link it is on), `REFERENCE_KEA_CONF`
//! (the kea-dhcp4 config written here) and `REFERENCE_KEA_URL` (its HA listener, to wait on
//! until the pair balances). It is ready when its member's address takes a connection on
//! `--ready-port`.

use super::kea;
use super::site::{Member, Site};
use anyhow::{Context, bail};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What the reference site serves and how it is started.
pub struct Plan<'a> {
    /// The shell command each member runs (`--server-cmd`).
    pub cmd: &'a str,
    pub subnet: (Ipv4Addr, u8),
    pub range: (Ipv4Addr, Ipv4Addr),
    pub lease_s: u64,
    pub http_port: u16,
    /// The port that answers once a member's stack is ready.
    pub ready_port: u16,
    /// Whether keepalived holds the members' addresses (`--fail`): the pair then talks over
    /// the members' fixed addresses.
    pub moved: bool,
}

/// The folder holding Kea's hook libraries (`libdhcp_ha.so`): Debian's multiarch one.
fn kea_hooks() -> anyhow::Result<PathBuf> {
    let found = std::fs::read_dir("/usr/lib").ok().and_then(|dir| {
        dir.flatten()
            .map(|e| e.path().join("kea/hooks"))
            .find(|p| p.join("libdhcp_ha.so").exists())
    });
    found.context(
        "the reference site's DHCP is a Kea HA pair: no kea/hooks/libdhcp_ha.so under /usr/lib \
         (apt-get install kea-dhcp4-server)",
    )
}

/// The pair: each member's name and the address its HA listener is on.
fn peers(site: &Site, prefix: u8, moved: bool) -> Vec<kea::Peer> {
    site.members
        .iter()
        .enumerate()
        .map(|(i, m)| kea::Peer {
            name: m.name.clone(),
            address: if moved {
                super::fail::fixed_address(m.links[0].address, prefix, i)
            } else {
                m.links[0].address
            },
        })
        .collect()
}

/// Writes each member's Kea config and starts CMD on every member (all before waiting: each
/// half of the pair waits for the other), then waits up to 90 s for each to be ready.
pub fn start(site: &mut Site, plan: &Plan, run_dir: &Path) -> anyhow::Result<()> {
    if site.members.len() != 2 {
        bail!(
            "the reference site's DHCP is a Kea HA pair, two servers: give --servers 2 with --server-cmd"
        );
    }
    let hooks = kea_hooks()?;
    let pair = peers(site, plan.subnet.1, plan.moved);
    let (t, d) = (kea::FASTEST, kea::DEFAULTS);
    eprintln!(
        "storm: the reference's DHCP is a Kea HA pair, load-balancing: a heartbeat every {} ms, \
         the partner down after {} ms unanswered and {} of its clients unanswered for {} ms \
         (Kea's defaults: {} ms, {} ms, {} clients, {} ms)",
        t.heartbeat_delay_ms,
        t.max_response_delay_ms,
        t.max_unacked_clients,
        t.max_ack_delay_ms,
        d.heartbeat_delay_ms,
        d.max_response_delay_ms,
        d.max_unacked_clients,
        d.max_ack_delay_ms
    );
    for (i, m) in site.members.iter_mut().enumerate() {
        let dir = run_dir.join(format!("reference-{}", m.name));
        std::fs::create_dir_all(&dir)?;
        let log = dir.join("kea-dhcp4.log");
        let conf = kea::config(&kea::Plan {
            me: i,
            peers: &pair,
            service: m.links[0].address,
            interface: &m.links[0].dev,
            subnet: plan.subnet,
            range: plan.range,
            lease_s: plan.lease_s,
            http_port: plan.http_port,
            hooks: &hooks,
            timers: kea::FASTEST,
            log: &log,
        });
        let conf_file = dir.join("kea-dhcp4.json");
        std::fs::write(&conf_file, serde_json::to_string_pretty(&conf)?)?;
        start_one(m, plan.cmd, &conf_file, &kea::url(&pair[i]), run_dir)?;
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    for m in &site.members {
        while !m.answers(plan.ready_port) {
            if let Some(status) = m.exited() {
                bail!(
                    "member {}'s reference stack exited ({status}):\n{}",
                    m.name,
                    m.log_text()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "member {}'s reference stack did not answer on port {} within 90 s:\n{}",
                    m.name,
                    plan.ready_port,
                    m.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

/// CMD on member `m`'s host, its log `server-sN.log` in `run_dir`.
fn start_one(
    m: &mut Member,
    cmd: &str,
    kea_conf: &Path,
    kea_url: &str,
    run_dir: &Path,
) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    m.log = run_dir.join(format!("server-{}.log", m.name));
    let log = std::fs::File::create(&m.log)?;
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(cmd)
        .env("REFERENCE_MEMBER", &m.name)
        .env("REFERENCE_ADDR", m.links[0].address.to_string())
        .env("REFERENCE_IFACE", &m.links[0].dev)
        .env("REFERENCE_KEA_CONF", kea_conf)
        .env("REFERENCE_KEA_URL", kea_url)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0);
    crate::lab::dies_with_lab(&mut c, libc::SIGTERM);
    bootpool::sys::process::unblock_signals_in_child(&mut c);
    m.start(c)?;
    Ok(())
}

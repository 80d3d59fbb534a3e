//! `--stranger MAC`: a DHCP client that no pool lists and that holds no lease anywhere (busybox
//! `udhcpc`, in a namespace of its own cabled to the room's bridge) asks for an address while
//! the servers run; the lab fails if any server answers it (in a site, every member must
//! refuse it: its owner because no pool takes it, the others because they do not own it).

use super::net;
use super::room2::Netns;
use anyhow::{Context, bail};
use bootpool::config::Mac;
use std::process::Stdio;

/// Runs the stranger's DHCP exchange on `bridge`: `Ok` with what the lab says when no server
/// answered within its retries.
pub fn ask(mac: Mac, bridge: &str) -> anyhow::Result<String> {
    let ns = Netns::new()?;
    net::ip(&[
        "link",
        "add",
        "stranger",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        &ns.pid(),
    ])?;
    net::ip(&["link", "set", "stranger", "master", bridge])?;
    net::ip(&["link", "set", "stranger", "up"])?;
    let shown = mac.to_string();
    ns.run("ip", &["link", "set", "eth0", "address", &shown])?;
    ns.run("ip", &["link", "set", "eth0", "up"])?;
    // Three DISCOVERs 3 s apart; `-n`: exit failing when no lease came, `-q` when one did.
    // The script prints what it was told, so the lab can name the server that answered.
    let out = ns
        .command(
            "busybox",
            &[
                "udhcpc", "-i", "eth0", "-n", "-q", "-f", "-t", "3", "-T", "3", "-s", "/bin/env",
            ],
        )
        .stdin(Stdio::null())
        .output()
        .context("running busybox udhcpc (package busybox)")?;
    let _ = net::ip(&["link", "del", "stranger"]);
    let said = String::from_utf8_lossy(&out.stdout);
    if out.status.success() {
        let server = said
            .lines()
            .find_map(|l| l.strip_prefix("serverid="))
            .unwrap_or("?");
        bail!("the stranger {shown} (in no pool) was given a lease by server {server}");
    }
    Ok(format!(
        "the stranger {shown} (in no pool, no lease) asked three times; no server answered"
    ))
}

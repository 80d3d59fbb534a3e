//! The lab's network: the lab process moves itself into a fresh network namespace before its
//! runtime starts, so every child (the daemon, qemu) lives there too, and the namespace goes
//! away with the last of them. Nothing the lab does can reach the host's own links.

use anyhow::{Context, bail};
use std::net::Ipv4Addr;
use std::process::Command;

/// Moves the calling thread (call it before any other thread exists) into a new network
/// namespace, and brings its loopback up.
pub fn enter_private_namespace() -> anyhow::Result<()> {
    // SAFETY: unshare has no memory-safety preconditions; it affects only this thread, and the
    // caller guarantees no other thread exists yet, so every later thread inherits it.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        let e = std::io::Error::last_os_error();
        bail!("cannot create a network namespace (the lab needs root): {e}");
    }
    ip(&["link", "set", "lo", "up"])
}

/// Runs `ip ARGS`, failing with its message.
pub fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output().context("running `ip` (package iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Creates the bridge the daemon serves, with the server's address on it.
pub fn make_bridge(name: &str, address: Ipv4Addr, prefix: u8) -> anyhow::Result<()> {
    ip(&["link", "add", name, "type", "bridge"])?;
    // No STP and no forwarding delay: ports forward as soon as qemu opens them.
    ip(&["link", "set", name, "type", "bridge", "stp_state", "0", "forward_delay", "0"])?;
    ip(&["addr", "add", &format!("{address}/{prefix}"), "dev", name])?;
    ip(&["link", "set", name, "up"])
}

/// Creates a tap device on the bridge for one client.
pub fn make_tap(name: &str, bridge: &str) -> anyhow::Result<()> {
    ip(&["tuntap", "add", "dev", name, "mode", "tap"])?;
    ip(&["link", "set", name, "master", bridge])?;
    ip(&["link", "set", name, "up"])
}

//! The processes a storm starts besides its server (the clients' agents or the references'
//! clients, the references' tracker, seed and sender): each one's id kept, so `end_all` kills
//! what is left however the storm ends (the clients' ones live in the clients' namespaces,
//! which the room's end does not look in).

use anyhow::Context;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

static PIDS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn pids() -> std::sync::MutexGuard<'static, Vec<u32>> {
    PIDS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps `pid` among the processes `end_all` kills.
pub fn track(pid: u32) {
    pids().push(pid);
}

/// Forgets `gone`: they were ended and reaped (their ids may be reused).
pub fn forget(gone: &[u32]) {
    pids().retain(|p| !gone.contains(p));
}

/// Kills every process kept that is still running (the storm is ending).
pub fn end_all() {
    for pid in pids().drain(..) {
        let _ = bootpool::sys::process::kill(pid as libc::pid_t, libc::SIGKILL);
    }
}

/// Spawns `cmd` from the storm's main thread with its output to `log`, kept, and killed by
/// the kernel if the storm dies first.
pub fn spawn_logged(cmd: &mut Command, log: &Path) -> anyhow::Result<Child> {
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    crate::lab::dies_with_lab(cmd, libc::SIGKILL);
    let child = cmd.spawn()?;
    track(child.id());
    Ok(child)
}

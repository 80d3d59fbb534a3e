//! What a storm makes outside its run folder and its namespace (a site's database folder in
//! /tmp, its members' configs beside the storm's, the processes on its members' hosts): each
//! is removed by its owner as the storm ends, and by `remove_all` when a signal stops the
//! storm first.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

static LEFT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// The network namespaces of a site's members (their inodes).
static HOSTS: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Whatever runs in network namespace `ns` (a member's host) is to be killed if a signal
/// stops the storm: a reference stack's daemons that left their group would outlive it.
pub fn register_host(ns: u64) {
    HOSTS.lock().unwrap_or_else(|e| e.into_inner()).push(ns);
}

/// `path` is to go if a signal stops the storm.
pub fn register(path: &Path) {
    LEFT.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(path.to_path_buf());
}

/// Removes `path` (a file or a folder) now, and forgets it.
pub fn remove(path: &Path) {
    LEFT.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|p| p != path);
    remove_path(path);
}

/// Kills every process on the registered hosts and removes everything registered and not
/// removed yet.
pub fn remove_all() {
    let hosts = std::mem::take(&mut *HOSTS.lock().unwrap_or_else(|e| e.into_inner()));
    for ns in hosts {
        for pid in super::sample::pids_in(ns, std::process::id()) {
            let _ = bootpool::sys::process::kill(pid, libc::SIGKILL);
        }
    }
    let left = std::mem::take(&mut *LEFT.lock().unwrap_or_else(|e| e.into_inner()));
    for path in left {
        remove_path(&path);
    }
}

fn remove_path(path: &Path) {
    if path.is_dir() {
        let _ = std::fs::remove_dir_all(path);
    } else {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_registered_goes_once_and_what_was_removed_is_forgotten() {
        let dir = std::env::temp_dir().join(format!("storm-leftovers-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let file = dir.join("a.yaml");
        std::fs::write(&file, "x").unwrap();
        register(&file);
        register(&dir.join("sub"));
        remove(&file);
        assert!(!file.exists());
        assert!(!LEFT.lock().unwrap().contains(&file));
        remove_all();
        assert!(!dir.join("sub").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! End to end: real qemu VMs PXE-boot the demo image through bootpool alone (`bootpool lab`),
//! mount their root with the Linux kernel's NFS client or attach it with nbd-client, report
//! booted, and power off. Needs root and what scripts/setup installs and builds.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The shipped pools.yaml, pointed at the built demo image and a private state folder.
fn lab_config(dir: &Path) -> PathBuf {
    let shipped = std::fs::read_to_string(repo().join("pools.yaml")).unwrap();
    let image = repo().join("images/demo");
    assert!(
        image.join("rootfs.img").exists(),
        "build the demo image first: images/build-demo.sh"
    );
    let text = shipped
        .replace("dir: images/demo", &format!("dir: {}", image.display()))
        .replace(
            "state_dir: var/",
            &format!("state_dir: {}", dir.join("var").display()),
        );
    let path = dir.join("pools.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Boots two clients with the given root and checks the lab's table and the daemon's journal.
fn boot_two(root: &str) {
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path());
    let mut lab = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    lab.args([
        "lab",
        "--clients",
        "2",
        "--root",
        root,
        "--timeout",
        "400",
        "--config",
    ])
    .arg(&config);
    let (ok, table, log) = common::run(&mut lab, 480);
    assert!(ok, "lab failed\n{table}\n{log}");
    let rows: Vec<&str> = table
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(rows.len(), 2, "{table}");
    for row in rows {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[3], "booted", "{table}");
        // Recorded seconds and every phase up to root are present.
        assert!(cells[5].parse::<f64>().is_ok(), "{table}");
        for phase in [6, 8, 9, 10, 11] {
            assert!(
                cells[phase].parse::<f64>().is_ok(),
                "phase column {phase} missing:\n{table}"
            );
        }
    }
    // The daemon journalled both boots, with the root attach and the booted call.
    let journal = std::fs::read_to_string(dir.path().join("var/events.jsonl")).unwrap();
    for kind in ["\"dhcp_ack\"", "\"root_attach\"", "\"booted\""] {
        assert!(
            journal.matches(kind).count() >= 2,
            "{kind} missing from the journal:\n{journal}"
        );
    }
    assert!(
        journal.contains(&format!("\"proto\":\"{root}\"")),
        "{journal}"
    );
}

#[test]
fn two_clients_boot_over_nfs() {
    boot_two("nfs");
}

#[test]
fn two_clients_boot_over_nbd() {
    boot_two("nbd");
}

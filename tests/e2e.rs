//! End to end: real qemu VMs PXE-boot the demo image through bootpool alone (`bootpool lab`),
//! mount their root with the Linux kernel's NFS client or attach it with nbd-client, report
//! booted, and power off. Needs root and what scripts/setup installs and builds.

mod common;

use common::lab::{lab_config, repo, run_lab};

use std::process::Command;

/// Boots two clients with the given root and checks the lab's table and the daemon's journal.
fn boot_two(root: &str) {
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), |t| t);
    let args = ["--clients", "2", "--root", root, "--timeout", "400"];
    let (table, rows) = run_lab(&config, &args, 480);
    assert_eq!(rows.len(), 2, "{table}");
    for cells in rows {
        let num = |i: usize| {
            cells[i]
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("column {i} of {cells:?}:\n{table}"))
        };
        assert_eq!(cells[3], "booted", "{table}");
        // Every phase up to root was recorded (the qemu ROM is iPXE already: no loader).
        for phase in [7, 9, 10, 11, 12] {
            num(phase);
        }
        // Truth: bootpool's clock agrees with the lab's (power-on to the console's done line)
        // once the firmware's own time before its first DISCOVER is taken out. The table
        // rounds to 0.1 s.
        let (firmware, console, recorded) = (num(4), num(5), num(6));
        let gap = (console - firmware - recorded).abs();
        assert!(
            gap <= 0.5 + 0.1,
            "recorded {recorded} s vs console {console} s - firmware {firmware} s:\n{table}"
        );
    }
    // Truth: the bytes bootpool counted per client are what the client was sent.
    let mut report = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    report
        .args([
            "report",
            "--format",
            "json",
            "--pool",
            &format!("lab-{root}"),
            "--config",
        ])
        .arg(&config);
    let (ok, json, err) = common::run(&mut report, 30);
    assert!(ok, "{err}");
    let wave: serde_json::Value = serde_json::from_str(&json).unwrap();
    let image = repo().join("images/demo");
    let size = |f: &str| std::fs::metadata(image.join(f)).unwrap().len();
    let boot_files = size("vmlinuz") + size("initrd.img");
    for b in wave["boots"].as_array().unwrap() {
        let http = b["bytes"]["http"].as_u64().unwrap();
        // Kernel and initrd, plus the client's iPXE script (a few hundred bytes).
        assert!(
            http > boot_files && http < boot_files + 2000,
            "http {http} for {boot_files}: {b}"
        );
        let served = b["bytes"][root].as_u64().unwrap_or(0) as f64;
        let read = b["client_root_bytes"]
            .as_u64()
            .unwrap_or_else(|| panic!("no count: {b}")) as f64;
        assert!(read > 1e6, "{b}");
        // The client counts at its booted call; a few reads may follow before it powers off.
        assert!(
            served >= read && (served - read) / read < 0.01,
            "served {served} vs read {read}: {b}"
        );
    }
    // The daemon journalled both boots, with the root attach and the booted call.
    let journal = common::recorded_events(&dir.path().join("var"));
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

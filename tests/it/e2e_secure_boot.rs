//! End to end under Secure Boot: OVMF with Secure Boot enforced and Microsoft's keys enrolled
//! (Debian's `OVMF_CODE_4M.secboot.fd` + `OVMF_VARS_4M.ms.fd`, `bootpool lab --firmware
//! uefi-secure`). A `secure_boot` pool boots the demo image through Debian's signed chain:
//! the firmware's PXE loads `shimx64.efi` over TFTP (signed by Microsoft's UEFI CA), shim
//! loads `grubx64.efi` (Debian's signed network GRUB) beside it, GRUB reads the config
//! bootpool generates for the client (`grub/grub.cfg`) and loads Debian's signed kernel and
//! the initrd over TFTP; the root comes over NFS and NBD. And the same firmware refuses an
//! unsigned loader (iPXE's `snponly.efi`), so these tests would notice if Secure Boot were off.
//! Slow under TCG (everything after the firmware goes over lock-step TFTP): `#[ignore]`d,
//! run by `scripts/test --all`. Needs root, qemu, Debian's `ovmf`, `shim-signed`,
//! `grub-efi-amd64-signed` and the built demo image.

use crate::common::lab::{lab_config, run_lab};
use std::path::Path;

fn need_firmware() {
    for f in [
        "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd",
        "/usr/share/OVMF/OVMF_VARS_4M.ms.fd",
        "/usr/lib/shim/shimx64.efi.signed",
        "/usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed",
    ] {
        assert!(
            Path::new(f).exists(),
            "{f} missing: apt-get install ovmf shim-signed grub-efi-amd64-signed"
        );
    }
}

/// The console logs of the lab run under `state`, by client name.
fn consoles(state: &Path) -> Vec<(String, String)> {
    let run = std::fs::read_dir(state.join("lab"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let mut out: Vec<(String, String)> = std::fs::read_dir(run)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("pc") && n.ends_with(".log")
        })
        .map(|p| {
            let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
            (p.file_stem().unwrap().to_string_lossy().into_owned(), text)
        })
        .collect();
    out.sort();
    out
}

#[test]
#[ignore = "two Secure Boot VM boots under TCG, several minutes; scripts/test --all runs it"]
fn secure_boot_clients_boot_the_signed_chain_to_nfs_and_nbd_roots() {
    need_firmware();
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), |t| {
        t.replace(
            "    image: demo\n",
            "    image: demo\n    secure_boot: true\n",
        )
    });
    let args = [
        "--clients",
        "1",
        "--pool",
        "lab-nfs",
        "--pool",
        "lab-nbd",
        "--firmware",
        "uefi-secure",
        "--timeout",
        "900",
    ];
    let (table, rows) = run_lab(&config, &args, 1000);
    assert_eq!(rows.len(), 2, "{table}");
    let head: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    let col = |name: &str| {
        head.iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} column:\n{table}"))
    };
    for row in &rows {
        assert_eq!(row[3], "booted", "{table}");
        // The record names the loader steps: shim, then GRUB (with its config).
        for phase in ["shim", "grub", "kernel", "initrd", "root"] {
            assert_ne!(row[col(phase)], "-", "{phase}:\n{table}");
        }
        for phase in ["loader", "ipxe"] {
            assert_eq!(row[col(phase)], "-", "{phase}:\n{table}");
        }
    }
    let journal = crate::common::recorded_events(&dir.path().join("var"));
    let sent = |path: &str, kind: &str| {
        journal
            .lines()
            .filter(|l| {
                l.contains("\"proto\":\"tftp\"")
                    && l.contains(&format!("\"path\":\"{path}\""))
                    && l.contains(&format!("\"kind\":\"{kind}\""))
                    && l.contains("\"outcome\":\"complete\"")
            })
            .count()
    };
    assert_eq!(sent("shimx64.efi", "shim"), 2, "{journal}");
    assert_eq!(sent("grubx64.efi", "grub"), 2, "{journal}");
    assert_eq!(sent("grub/grub.cfg", "grub_cfg"), 2, "{journal}");
    assert_eq!(sent("demo/vmlinuz", "kernel"), 2, "{journal}");
    assert_eq!(sent("demo/initrd.img", "initrd"), 2, "{journal}");
    assert!(journal.contains("\"proto\":\"nfs\""), "{journal}");
    assert!(journal.contains("\"proto\":\"nbd\""), "{journal}");
    assert!(!journal.contains("snponly.efi"), "{journal}");
    for (name, console) in consoles(&dir.path().join("var")) {
        // The kernel itself says the firmware enforced Secure Boot and locked it down.
        assert!(
            console.contains("secureboot: Secure boot enabled"),
            "{name}: Secure Boot was not on:\n{console}"
        );
        assert!(
            console.contains("Kernel is locked down from EFI Secure Boot"),
            "{name}:\n{console}"
        );
        // GRUB ran the config bootpool wrote for this client.
        assert!(
            console.contains("bootpool: pool lab-n"),
            "{name}:\n{console}"
        );
    }
}

#[test]
#[ignore = "a Secure Boot VM under TCG; scripts/test --all runs it"]
fn secure_boot_firmware_refuses_an_unsigned_loader() {
    need_firmware();
    let dir = tempfile::tempdir().unwrap();
    // No secure_boot: the pool hands its UEFI firmware iPXE (snponly.efi), which no key signed.
    let config = lab_config(dir.path(), |t| t);
    let mut lab = std::process::Command::new(crate::common::bootpool_with_instruments());
    lab.args([
        "lab",
        "--clients",
        "1",
        "--root",
        "nbd",
        "--firmware",
        "uefi-secure",
        "--timeout",
        "300",
        "--config",
    ])
    .arg(&config);
    let (ok, table, log) = crate::common::run(&mut lab, 400);
    assert!(!ok, "the unsigned loader ran:\n{table}\n{log}");
    assert!(
        table.contains("failed: the firmware refused to run its loader"),
        "{table}\n{log}"
    );
    let journal = crate::common::recorded_events(&dir.path().join("var"));
    // The firmware had the whole file, and still would not start it.
    assert!(
        journal
            .lines()
            .any(|l| l.contains("\"path\":\"snponly.efi\"")
                && l.contains("\"outcome\":\"complete\"")),
        "{journal}"
    );
    assert!(!journal.contains("\"ipxe\":true"), "{journal}");
    let (_, console) = consoles(&dir.path().join("var")).remove(0);
    assert!(console.contains("Access Denied"), "{console}");
}

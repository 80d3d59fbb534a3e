//! End to end on ARM64: qemu-system-aarch64 `virt` boards with AAVMF (Debian's
//! `qemu-efi-aarch64`, `bootpool lab --firmware arm64`, under TCG) boot from the shipped pools,
//! whose x86 clients get the x86 demo image: the firmware's PXE says option 93 = 11, gets
//! Debian's network GRUB (`grubaa64.efi`, `server.grub_arm64`) over TFTP, GRUB reads the config
//! bootpool writes for the client, which names the pool's `arch.arm64` image (the ARM64 demo of
//! images/build-arm64.sh) and command line, and the root comes over NFS (one pool) and NBD (the
//! other; the initrd attaches it with Debian's arm64 nbd-client). `#[ignore]`d (TCG), run by
//! `scripts/test --all`. Needs root, `qemu-system-arm`, `qemu-efi-aarch64` and both demo
//! images built (`scripts/setup --arm64`).

use crate::common::lab::{client_consoles, lab_config, repo, run_lab};
use std::path::Path;

/// What each pool's ARM64 clients boot.
const ARCH: &str = "    arch:\n      arm64: { image: demo-arm64, cmdline: console=ttyAMA0 }\n";

#[test]
#[ignore = "two ARM64 VMs under TCG; scripts/test --all runs it"]
fn arm64_clients_boot_their_architectures_image_from_mixed_pools_over_nfs_and_nbd() {
    for f in [
        "/usr/share/AAVMF/AAVMF_CODE.fd",
        "/usr/bin/qemu-system-aarch64",
    ] {
        assert!(
            Path::new(f).exists(),
            "{f} missing: apt-get install qemu-system-arm qemu-efi-aarch64"
        );
    }
    let arm64 = repo().join("images/demo-arm64");
    assert!(
        arm64.join("rootfs.img").exists() && arm64.join("rootfs/sbin/init").exists(),
        "build the ARM64 demo image first: images/build-arm64.sh (scripts/setup --arm64)"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), |t| {
        // The shipped pools, x86 content as before, plus their ARM64 content.
        let grub = arm64.join("grubnetaa64.efi.signed");
        t.replacen(
            "  loaders: /usr/lib/ipxe",
            &format!("  grub_arm64: {}\n  loaders: /usr/lib/ipxe", grub.display()),
            1,
        )
        .replacen(
            "images:\n",
            &format!("images:\n  demo-arm64: {{ dir: {} }}\n", arm64.display()),
            1,
        )
        .replace("    root: nfs\n", &format!("    root: nfs\n{ARCH}"))
        .replace("    root: nbd\n", &format!("    root: nbd\n{ARCH}"))
    });
    let text = std::fs::read_to_string(&config).unwrap();
    assert_eq!(text.matches(ARCH).count(), 2, "{text}");
    let args = [
        "--clients",
        "1",
        "--pool",
        "lab-nfs",
        "--pool",
        "lab-nbd",
        "--firmware",
        "arm64",
        "--timeout",
        "900",
    ];
    let (table, rows) = run_lab(&config, &args, 1000);
    assert_eq!(rows.len(), 2, "{table}");
    for row in &rows {
        assert_eq!(row[3], "booted", "{table}");
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
    for (path, kind) in [
        ("grubaa64.efi", "grub"),
        ("grub/grub.cfg", "grub_cfg"),
        ("demo-arm64/vmlinuz", "kernel"),
        ("demo-arm64/initrd.img", "initrd"),
    ] {
        assert_eq!(sent(path, kind), 2, "{path} ({kind}):\n{journal}");
    }
    // The x86 files went to nobody; the roots were the ARM64 image's, over NFS and NBD; the
    // clients said they were up.
    assert!(!journal.contains("\"path\":\"demo/vmlinuz\""), "{journal}");
    assert!(journal.contains("\"export\":\"/demo-arm64\""), "{journal}");
    assert!(journal.contains("\"export\":\"demo-arm64\""), "{journal}");
    assert_eq!(
        journal.matches("\"event\":\"booted\"").count(),
        2,
        "{journal}"
    );
    // The record knows them as ARM64 firmware (option 93 = 11, from their DISCOVERs).
    let arm64_discovers = journal
        .lines()
        .filter(|l| l.contains("\"event\":\"dhcp_discover\"") && l.contains("\"arch\":11"))
        .count();
    assert!(arm64_discovers >= 2, "{journal}");
    let consoles = client_consoles(&dir.path().join("var"));
    assert_eq!(consoles.len(), 2);
    for console in &consoles {
        // The firmware asked as ARM64, GRUB ran bootpool's config, the kernel was ARM64's.
        assert!(
            console.contains("NBP filename is grubaa64.efi"),
            "{console}"
        );
        assert!(console.contains("bootpool: pool lab-n"), "{console}");
        assert!(
            console.contains("Linux version 6.1.0-") && console.contains("-arm64 "),
            "{console}"
        );
    }
    let all = consoles.join("\n");
    for (pool, root) in [("lab-nfs", "nfs"), ("lab-nbd", "nbd")] {
        assert!(all.contains(&format!("bootpool: pool {pool}")), "{all}");
        assert!(all.contains(&format!("root attached ({root})")), "{all}");
    }
}

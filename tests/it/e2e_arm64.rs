//! End to end on ARM64: a qemu-system-aarch64 `virt` board with AAVMF (Debian's
//! `qemu-efi-aarch64`, `bootpool lab --firmware arm64`, under TCG) boots from a pool whose x86
//! clients get the x86 demo image: the firmware's PXE says option 93 = 11, gets Debian's
//! network GRUB (`grubaa64.efi`, `server.grub_arm64`) over TFTP, GRUB reads the config bootpool
//! writes for the client, which names the pool's `arch.arm64` image (the ARM64 demo of
//! images/build-arm64.sh) and its command line, and the root comes over NFS. Slow under TCG:
//! `#[ignore]`d, run by `scripts/test --all`. Needs root, `qemu-system-arm`,
//! `qemu-efi-aarch64` and both demo images built (`scripts/setup --arm64`).

use crate::common::lab::{lab_config, repo, run_lab};
use std::path::Path;

#[test]
#[ignore = "an ARM64 VM under TCG, minutes; scripts/test --all runs it"]
fn an_arm64_client_boots_its_architectures_image_from_a_mixed_pool() {
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
        arm64.join("rootfs/sbin/init").exists(),
        "build the ARM64 demo image first: images/build-arm64.sh (scripts/setup --arm64)"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), |t| {
        // The shipped lab-nfs pool, x86 content as before, plus its ARM64 content.
        t.replacen(
            "  loaders: /usr/lib/ipxe",
            &format!(
                "  grub_arm64: {}\n  loaders: /usr/lib/ipxe",
                arm64.join("grubnetaa64.efi.signed").display()
            ),
            1,
        )
        .replacen(
            "images:\n",
            &format!("images:\n  demo-arm64: {{ dir: {} }}\n", arm64.display()),
            1,
        )
        .replacen(
            "    root: nfs\n",
            "    root: nfs\n    arch:\n      arm64: { image: demo-arm64, cmdline: console=ttyAMA0 }\n",
            1,
        )
    });
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("arm64: { image: demo-arm64"), "{text}");
    let args = [
        "--clients",
        "1",
        "--pool",
        "lab-nfs",
        "--firmware",
        "arm64",
        "--timeout",
        "900",
    ];
    let (table, rows) = run_lab(&config, &args, 1000);
    assert_eq!(rows.len(), 1, "{table}");
    assert_eq!(rows[0][3], "booted", "{table}");
    let journal = crate::common::recorded_events(&dir.path().join("var"));
    let sent = |path: &str, kind: &str| {
        journal.lines().any(|l| {
            l.contains("\"proto\":\"tftp\"")
                && l.contains(&format!("\"path\":\"{path}\""))
                && l.contains(&format!("\"kind\":\"{kind}\""))
                && l.contains("\"outcome\":\"complete\"")
        })
    };
    for (path, kind) in [
        ("grubaa64.efi", "grub"),
        ("grub/grub.cfg", "grub_cfg"),
        ("demo-arm64/vmlinuz", "kernel"),
        ("demo-arm64/initrd.img", "initrd"),
    ] {
        assert!(sent(path, kind), "{path} ({kind}) not sent:\n{journal}");
    }
    // The x86 files went to nobody; the root was the ARM64 tree, over NFS; the client said so.
    assert!(!journal.contains("\"path\":\"demo/vmlinuz\""), "{journal}");
    assert!(journal.contains("\"export\":\"/demo-arm64\""), "{journal}");
    assert!(journal.contains("\"event\":\"booted\""), "{journal}");
    let consoles = crate::common::lab::client_consoles(&dir.path().join("var"));
    let console = consoles.join("\n");
    // GRUB ran bootpool's config for this client, and the kernel was ARM64's.
    assert!(console.contains("bootpool: pool lab-nfs"), "{console}");
    assert!(
        console.contains("6.1.0-") && console.contains("-arm64"),
        "{console}"
    );
    assert!(
        console.contains("bootpool-initrd: root attached (nfs)"),
        "{console}"
    );
}

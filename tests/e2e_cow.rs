//! End to end: a writable copy-on-write NBD root, and its writes kept across a daemon restart.
//! One qemu VM PXE-boots the demo kernel and initrd with a small ext4 root (built here from
//! busybox, Debian's nbd-client and `tests/cow-root/`) exported with `cow: disk` and mounted
//! read-write by the initrd (`rw rootfstype=ext4`). Its init writes a token to its root; the
//! lab then stops bootpool for a few seconds and starts it again (`--restart-on`); the init
//! attaches the same export again with nbd-client, reads the token back from the overlay the
//! new daemon found on disk, and writes again.
//!
//! What it cannot show: nbd-client -persist carrying the root itself across the restart.
//! Debian's nbd-client 3.24 ignores -persist over netlink, and over ioctl kernel 6.1 ends the
//! connection as if asked to (docs/clients.md). The host kernel has no nbd module, so no
//! client runs outside a VM. Needs root and what scripts/setup installs and builds.

mod common;

use common::lab::{lab_config, repo, run_lab};
use std::path::Path;
use std::process::Command;

/// `dir/cowroot/`: the demo's kernel and initrd, and `rootfs.img`, a 32 MiB ext4 (4 KiB
/// blocks, as NBD roots need) holding busybox, nbd-client with its libraries in /lib, and the
/// test's init and check script.
fn cow_image(dir: &Path) -> std::path::PathBuf {
    let stage = dir.join("stage");
    for d in ["bin", "sbin", "lib", "proc", "sys", "dev", "tmp"] {
        std::fs::create_dir_all(stage.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", stage.join("bin/busybox")).expect("busybox-static");
    std::fs::copy(repo().join("tests/cow-root/init"), stage.join("sbin/init")).unwrap();
    std::fs::copy(repo().join("tests/cow-root/check"), stage.join("check")).unwrap();
    // The check runs nbd-client through the loader with --library-path /tmp/lib.
    std::fs::copy("/usr/sbin/nbd-client", stage.join("lib/nbd-client")).expect("nbd-client");
    let ldd = Command::new("ldd")
        .arg("/usr/sbin/nbd-client")
        .output()
        .unwrap();
    for lib in String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
    {
        let name = Path::new(lib).file_name().unwrap();
        std::fs::copy(lib, stage.join("lib").join(name)).unwrap();
    }
    let image = dir.join("cowroot");
    std::fs::create_dir_all(&image).unwrap();
    let demo = repo().join("images/demo");
    for f in ["vmlinuz", "initrd.img"] {
        // A copy, not a link: boot files are served only from inside their image's folder.
        std::fs::copy(demo.join(f), image.join(f)).unwrap();
    }
    let mut mkfs = Command::new("mkfs.ext4");
    // Inode tables and journal written now, not by a background thread after mount.
    mkfs.args(["-q", "-F", "-b", "4096", "-L", "cowroot"])
        .args(["-E", "lazy_itable_init=0,lazy_journal_init=0", "-d"])
        .arg(&stage)
        .arg(image.join("rootfs.img"))
        .arg("32M");
    let (ok, out, err) = common::run(&mut mkfs, 60);
    assert!(ok, "mkfs.ext4 -d: {out}{err}");
    image
}

#[test]
fn a_writable_nbd_root_keeps_its_writes_across_a_daemon_restart() {
    let dir = tempfile::tempdir().unwrap();
    let image = cow_image(dir.path());
    let config = lab_config(dir.path(), |text| {
        let text = text.replace(
            "images:\n",
            &format!(
                "images:\n  cowroot:\n    dir: {}\n    store: disk\n    cow: disk\n",
                image.display()
            ),
        );
        format!(
            "{text}
  lab-nbd-rw:
    image: cowroot
    root: nbd
    cmdline: console=ttyS0 rw rootfstype=ext4 rootflags=noatime
    clients:
      - {{ macs: \"52:54:00:77:04:01-52:54:00:77:04:3f\" }}
"
        )
    });
    let args = [
        "--clients",
        "1",
        "--pool",
        "lab-nbd-rw",
        "--restart-on",
        "cow-check: written",
        "--restart-down",
        "5",
        "--timeout",
        "300",
    ];
    let base = std::fs::read(image.join("rootfs.img")).unwrap();
    let (table, rows) = run_lab(&config, &args, 400);
    let runs: Vec<_> = std::fs::read_dir(dir.path().join("var/lab"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let console = std::fs::read_to_string(runs[0].join("pc01.log")).unwrap();
    let log = std::fs::read_to_string(runs[0].join("bootpool.log")).unwrap();
    assert_eq!(rows.len(), 1, "{table}");
    assert_eq!(rows[0][3], "booted", "{table}\n{console}");
    for step in [
        "cow-check: server down",
        "cow-check: server back",
        "cow-check: read back",
        "cow-check: wrote again after the restart",
    ] {
        assert!(
            console.contains(step),
            "no `{step}` on the console:\n{console}"
        );
    }
    assert!(!console.contains("cow-check: FAILED"), "{console}");
    // The token read back is the one written before the restart.
    let token = |prefix: &str| {
        console
            .lines()
            .find_map(|l| l.split(prefix).nth(1))
            .map(|t| t.split_whitespace().next().unwrap_or("").to_string())
            .unwrap_or_else(|| panic!("no `{prefix}` line:\n{console}"))
    };
    assert_eq!(
        token("cow-check: written "),
        token("cow-check: read back "),
        "{console}"
    );
    // Two daemons served it: the first took the writes, the second found the client's overlay
    // on disk and gave it back; the base image was never written.
    let writable: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("nbd connection closed") && l.contains("cow=true"))
        .collect();
    assert!(writable.len() >= 2, "{log}");
    assert!(
        log.contains("nbd overlay kept from before"),
        "the restarted daemon did not find the overlay:\n{log}"
    );
    assert!(
        std::fs::read(image.join("rootfs.img")).unwrap() == base,
        "the base image was written"
    );
    let overlays: Vec<_> = std::fs::read_dir(dir.path().join("var/cow/cowroot"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        overlays
            .iter()
            .any(|n| n.to_string_lossy().ends_with(".data")),
        "{overlays:?}"
    );
}

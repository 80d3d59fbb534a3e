//! End to end, the consoles and the failure causes: five qemu VMs whose boots are broken on
//! purpose boot at once through `bootpool lab`, each from a pool with `netconsole: true`, and
//! each boot's recorded cause is checked with `bootpool report --console`:
//! - a bad `init=` (`/bin/true`: the root's init exits at once and the kernel panics; a
//!   missing one the demo initrd catches itself, `initrd_failed`): `kernel_panic`;
//! - a wrong NFS export on the command line (MOUNT refuses it): `no_root`;
//! - a truncated squashfs root image over NBD (the kernel refuses it): `root_fs`;
//! - an initrd without the NIC's driver (nothing more heard after the initrd): `initrd_silent`;
//! - DHCP lost mid-boot (`lab --cut-dhcp`: the answers to the client are dropped once its
//!   kernel runs, so its initrd's DHCP fails): `dhcp_lost`, from the initrd's console line and
//!   from the server's own side (it offered, and no REQUEST came).
//!
//! Slow (TCG: several minutes), so `#[ignore]`d; `scripts/test --all` runs it.

use crate::common::lab::{lab_config, repo};
use crate::common::stdout_of;
use std::path::Path;
use std::process::Command;

const PANIC: &str = "52:54:00:77:0a:01";
const EXPORT: &str = "52:54:00:77:0b:01";
const TRUNCATED: &str = "52:54:00:77:0c:01";
const NO_NIC: &str = "52:54:00:77:0d:01";
const CUT_DHCP: &str = "52:54:00:77:10:01";

fn sh(script: &str) {
    stdout_of(Command::new("bash").args(["-euc", script]), &[]);
}

/// Image folders of copies (a symlink out of its folder is not served): `truncated` with the
/// first half of the squashfs root, `nonic` with an initrd whose NIC modules are taken out.
fn broken_images(dir: &Path) {
    let demo = repo().join("images/demo");
    let d = demo.display();
    let t = dir.join("truncated");
    let n = dir.join("nonic");
    sh(&format!(
        "mkdir -p {t} {n} {n}/x
         cp {d}/vmlinuz {d}/initrd.img {t}/
         size=$(stat -c %s {d}/rootfs.img)
         head -c $((size / 2)) {d}/rootfs.img > {t}/rootfs.img
         cp {d}/vmlinuz {n}/
         head -c 1048576 {d}/rootfs.img > {n}/rootfs.img
         cd {n}/x
         gzip -dc {d}/initrd.img | cpio -idm --quiet
         for m in virtio_net net_failover failover e1000 e1000e r8169; do
             rm -f lib/modules/$m.ko
             sed -i \"/^$m.ko$/d\" etc/bootpool/modules
         done
         find . | cpio -o -H newc --quiet | gzip > {n}/initrd.img
         cd {n} && rm -rf x",
        t = t.display(),
        n = n.display(),
    ));
}

fn report(config: &Path, mac: &str) -> serde_json::Value {
    let out = stdout_of(
        Command::new(env!("CARGO_BIN_EXE_bootpool"))
            .args(["report", "--console", mac, "--format", "json", "--config"])
            .arg(config),
        &[],
    );
    serde_json::from_slice(&out).unwrap()
}

#[test]
#[ignore = "boots five VMs (minutes under TCG); scripts/test --all"]
fn five_broken_boots_each_say_why() {
    let dir = tempfile::tempdir().unwrap();
    broken_images(dir.path());
    let images = format!(
        "images:\n  truncated:\n    dir: {}\n  nonic:\n    dir: {}\n",
        dir.path().join("truncated").display(),
        dir.path().join("nonic").display()
    );
    let config = lab_config(dir.path(), |text| {
        let text = text.replacen("images:\n", &images, 1);
        format!(
            "{text}
  bad-init:
    image: demo
    root: nfs
    netconsole: true
    cmdline: console=ttyS0 init=/bin/true panic=1
    clients:
      - {{ mac: \"{PANIC}\" }}
  wrong-export:
    image: demo
    root: nfs
    netconsole: true
    cmdline: console=ttyS0
    cmdline_template: \"root=nfs:{{server}}:/no-such-export:ro,port={{nfs_port}},mountport={{nfs_port}} bootpool.url={{http}} {{cmdline}} {{netconsole}} initrd={{initrd}}\"
    clients:
      - {{ mac: \"{EXPORT}\" }}
  truncated:
    image: truncated
    root: nbd
    netconsole: true
    cmdline: console=ttyS0
    clients:
      - {{ mac: \"{TRUNCATED}\" }}
  nonic:
    image: nonic
    root: nbd
    netconsole: true
    cmdline: console=ttyS0
    clients:
      - {{ mac: \"{NO_NIC}\" }}
  dhcp-cut:
    image: demo
    root: nbd
    netconsole: true
    cmdline: console=ttyS0
    clients:
      - {{ mac: \"{CUT_DHCP}\" }}
"
        )
    });
    let mut lab = Command::new(crate::common::bootpool_with_instruments());
    lab.args(["lab", "--clients", "1"]);
    for pool in ["bad-init", "wrong-export", "truncated", "nonic", "dhcp-cut"] {
        lab.args(["--pool", pool]);
    }
    lab.args(["--cut-dhcp", "dhcp-cut", "--timeout", "480", "--config"])
        .arg(&config);
    // Every client fails, so the lab itself fails; its table and log are for the messages.
    let (_, table, log) = crate::common::run(&mut lab, 600);
    let lab_out = format!("{table}\n{log}");

    // Every check is made before any fails, so one run tells all four.
    let mut wrong = Vec::new();
    let mut expect = |mac: &str, kind: &str, extra: &dyn Fn(&serde_json::Value) -> bool| {
        let mut r = report(&config, mac);
        // Silence is a cause only after `cause::INITRD_SILENCE_S` (60 s) without a word.
        for _ in 0..12 {
            if r["cause"]["kind"] == kind || kind != "initrd_silent" {
                break;
            }
            std::thread::sleep(std::time::Duration::from_secs(10));
            r = report(&config, mac);
        }
        if r["cause"]["kind"] != kind || !extra(&r) {
            wrong.push(format!(
                "{mac}: expected {kind}, got {:#}\n{:#}",
                r["cause"], r["lines"]
            ));
        }
    };
    expect(PANIC, "kernel_panic", &|r| {
        r["cause"]["line"]
            .as_str()
            .is_some_and(|l| l.contains("Kernel panic - not syncing"))
            && r["lines"].as_array().unwrap().len() > 10
    });
    expect(EXPORT, "no_root", &|r| {
        r["cause"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("/no-such-export"))
    });
    expect(TRUNCATED, "root_fs", &|_| true);
    expect(NO_NIC, "initrd_silent", &|r| {
        r["lines"].as_array().unwrap().is_empty()
    });
    expect(CUT_DHCP, "dhcp_lost", &|r| {
        r["cause"]["line"]
            .as_str()
            .is_some_and(|l| l.contains("no DHCP lease"))
            && r["cause"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("offered it an address"))
    });
    assert!(wrong.is_empty(), "{}\n{lab_out}", wrong.join("\n\n"));
}

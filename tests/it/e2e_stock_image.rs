//! End to end with a stock Debian image: `images/build-stock.sh` makes it with Debian's own
//! tools only (debootstrap, linux-image-amd64, initramfs-tools, systemd; no file of
//! bootpool's), and `bootpool lab` boots it over NFS and over NBD to systemd's multi-user
//! target with a getty on the serial line, from the kernel command line bootpool generates
//! for `initramfs: initramfs-tools` and nothing else. The image never calls bootpool: the
//! record must show each boot up by inference (docs/api.md, "How a boot ends").
//!
//! Slow (two systemd boots under TCG, several minutes): `#[ignore]`d, run by
//! `scripts/test --all`, which builds the image first (`scripts/setup --stock`). Needs root.

use crate::common::lab::{client_consoles, lab_config, repo, run_lab};

const ROOTS: [&str; 2] = ["nfs", "nbd"];

/// The shipped config plus the stock image and a pool per root, `stock-nfs` and `stock-nbd`.
fn with_stock_image(text: String) -> String {
    let dir = repo().join("images/stock");
    let mut pools = String::new();
    for (r, root) in ROOTS.iter().enumerate() {
        pools.push_str(&format!(
            "  stock-{root}:
    image: stock
    root: {root}
    initramfs: initramfs-tools
    cmdline: console=ttyS0
    clients:
      - {{ macs: \"52:54:00:77:4{r}:01-52:54:00:77:4{r}:0f\" }}
"
        ));
    }
    text.replace(
        "images:\n",
        &format!("images:\n  stock:\n    dir: {}\n", dir.display()),
    ) + &pools
}

#[test]
#[ignore = "two systemd boots under emulation; scripts/test --all runs it"]
fn a_stock_debian_image_boots_over_nfs_and_nbd_and_is_recorded_up_by_inference() {
    let image = repo().join("images/stock");
    for f in ["vmlinuz", "initrd.img", "rootfs.img", "rootfs/sbin/init"] {
        assert!(
            image.join(f).exists(),
            "no {f} in {}: run images/build-stock.sh (scripts/setup --stock)",
            image.display()
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), with_stock_image);
    let pools: Vec<String> = ROOTS.iter().map(|r| format!("stock-{r}")).collect();
    let mut args = vec!["--clients", "1", "--timeout", "900"];
    for p in &pools {
        args.extend(["--pool", p.as_str()]);
    }
    let (table, rows) = run_lab(&config, &args, 1100);
    assert_eq!(rows.len(), pools.len(), "{table}");
    for cells in &rows {
        // The console reached its login prompt and the record says booted, by inference.
        assert_eq!(cells[3], "booted", "{table}");
        let end = &cells[cells.len() - 3];
        assert_eq!(end, "inferred:root_settled", "{table}");
    }

    // systemd itself got to the multi-user target and started the serial getty, from the
    // kernel command line bootpool wrote (console=ttyS0 is the pool's own argument).
    let consoles = client_consoles(&dir.path().join("var"));
    assert_eq!(consoles.len(), pools.len());
    for c in consoles.iter().map(|c| plain(c)) {
        for line in [
            "Kernel command line: boot=",
            "Reached target multi-user.target",
            // systemd shortens the unit's name to fit the console's line.
            "Started serial-getty@ttyS0",
            " login: ",
        ] {
            assert!(c.contains(line), "no `{line}` on a console:\n{table}");
        }
    }

    // The record, as `bootpool report` reads it: up by inference, with the evidence, and no
    // booted call (nothing in the image makes one).
    for pool in &pools {
        let mut report = std::process::Command::new(env!("CARGO_BIN_EXE_bootpool"));
        report
            .args(["report", "--format", "json", "--pool", pool, "--config"])
            .arg(&config);
        let (ok, json, err) = crate::common::run(&mut report, 30);
        assert!(ok, "{err}");
        let wave: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(wave["summary"]["booted"], 1, "{wave}");
        assert_eq!(wave["summary"]["inferred"], 1, "{wave}");
        let b = &wave["boots"][0];
        assert_eq!(b["result"], "booted", "{b}");
        assert_eq!(b["end"], "inferred", "{b}");
        assert_eq!(b["evidence"], "root_settled", "{b}");
        assert!(b["uptime_s"].is_null(), "{b}");
        assert_eq!(b["duration_s"], b["inferred_s"], "{b}");
        assert_eq!(b["current_phase"], "booted", "{b}");
    }
}

/// The console without its colours (systemd's status lines are ANSI-coloured).
fn plain(console: &str) -> String {
    let mut out = String::with_capacity(console.len());
    let mut chars = console.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC [ parameters, up to a final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

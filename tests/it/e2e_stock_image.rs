//! End to end with stock Debian images: `images/build-stock.sh` makes them with Debian's own
//! tools only (debootstrap, linux-image-amd64, systemd, and initramfs-tools or, with
//! `--dracut`, Debian's dracut; no file of bootpool's), and `bootpool lab` boots them over
//! NFS and over NBD to systemd's multi-user target with a getty's login prompt on the serial
//! line, from the kernel command line bootpool generates for the pool's `initramfs:` and
//! nothing else. The image never calls bootpool: the record must show each boot up by
//! inference (docs/api.md, "How a boot ends").
//!
//! The pools hand bootpool's overlay addition by default (`overlay`, docs/pools.yaml.5): the
//! writable tests have systemd run a command from the kernel command line (`systemd.run=`,
//! the image's own systemd; the image has no password to log in with and is not changed)
//! that writes to /etc, /var, /tmp and /home and reads it back, and check that the image on
//! the server is unchanged afterwards; once with the overlay on tmpfs for each initrd
//! builder (initramfs-tools' script, dracut's pre-pivot hook under dracut's systemd initrd),
//! once with it on a local disk (`overlay: {disk: /dev/vda}`, `bootpool lab --disk`), booted
//! twice: each boot starts from the image as served.
//!
//! Slow (two systemd boots under TCG each, several minutes): `#[ignore]`d, run by
//! `scripts/test --all`, which builds the images first (`scripts/setup --stock`). Needs root.

use crate::common::lab::{client_consoles, lab_config, plain, repo, run_lab};

const ROOTS: [&str; 2] = ["nfs", "nbd"];

/// A stock image as images/build-stock.sh builds it, and its pools' MACs.
#[derive(Clone, Copy)]
struct Stock {
    /// Its folder under images/ (the script's default output).
    folder: &'static str,
    /// The builder of its initrd: the pools' `initramfs:`.
    initramfs: &'static str,
    /// The MACs' fifth byte's first digit (`52:54:00:77:{mac}{root}:..`).
    mac: u8,
    /// The lab's memory argument for its clients, if the board's 320 MiB are too few.
    memory: &'static [&'static str],
}

const TOOLS: Stock = Stock {
    folder: "stock",
    initramfs: "initramfs-tools",
    mac: 4,
    memory: &[],
};

const DRACUT: Stock = Stock {
    folder: "stock-dracut",
    initramfs: "dracut",
    mac: 5,
    // dracut's initrd for any PC (not host-only) is 54 MiB, about 150 unpacked.
    memory: &["--memory", "1024"],
};

/// The shipped config plus the stock image and a pool per root, `stock-nfs` and `stock-nbd`.
fn with_stock_image(text: String) -> String {
    with_stock_pools(text, TOOLS, "console=ttyS0", "")
}

/// The same for `stock`'s image, with `cmdline` for both pools (a YAML single-quoted string's
/// inside) and `more` (indented YAML) added to each.
fn with_stock_pools(text: String, stock: Stock, cmdline: &str, more: &str) -> String {
    let dir = repo().join("images").join(stock.folder);
    let mut pools = String::new();
    for (r, root) in ROOTS.iter().enumerate() {
        pools.push_str(&format!(
            "  stock-{root}:
    image: stock
    root: {root}
    initramfs: {initramfs}
    cmdline: '{cmdline}'
{more}    clients:
      - {{ macs: \"52:54:00:77:{m}{r}:01-52:54:00:77:{m}{r}:0f\" }}
",
            initramfs = stock.initramfs,
            m = stock.mac,
        ));
    }
    text.replace(
        "images:\n",
        &format!("images:\n  stock:\n    dir: {}\n", dir.display()),
    ) + &pools
}

/// The stock image, built.
fn stock_image(stock: Stock) -> std::path::PathBuf {
    let image = repo().join("images").join(stock.folder);
    let build = match stock.initramfs {
        "dracut" => "images/build-stock.sh --dracut",
        _ => "images/build-stock.sh",
    };
    for f in ["vmlinuz", "initrd.img", "rootfs.img", "rootfs/sbin/init"] {
        assert!(
            image.join(f).exists(),
            "no {f} in {}: run {build} (scripts/setup --stock)",
            image.display()
        );
    }
    image
}

#[test]
#[ignore = "two systemd boots under emulation; scripts/test --all runs it"]
fn a_stock_debian_image_boots_over_nfs_and_nbd_and_is_recorded_up_by_inference() {
    stock_image(TOOLS);
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

    // systemd itself started the serial getty, which shows its login prompt, from the
    // kernel command line bootpool wrote (console=ttyS0 is the pool's own argument). Not its
    // "Reached target multi-user.target": systemd may stop writing status lines to the
    // console once the getty holds it, and on a busy machine it did.
    let consoles = client_consoles(&dir.path().join("var"));
    assert_eq!(consoles.len(), pools.len());
    for c in consoles.iter().map(|c| plain(c)) {
        for line in [
            "Kernel command line: boot=",
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

/// What systemd runs once booted (`systemd.run=`, as its `ExecStart=`; the booted system's
/// default target stays multi-user, which is told to want it): writes a line into /etc, /var,
/// /tmp and a new /home folder, reads them back upper-cased (so the console shows `ETC-OK`
/// only if the file was written and read, never from the command line itself), then the mount
/// table (the root's line, `BOOTPOOL-OVERLAY / OVERLAY RW`). No word of it stands alone as
/// iPXE's `&&`, `||` or `;`, nor as a word Debian's /init reads (`ro`, `rw`, `debug`...).
const WRITES: &str = "console=ttyS0 systemd.unit=multi-user.target \
    systemd.wants=kernel-command-line.service systemd.run_success_action=none \
    systemd.run_failure_action=none systemd.run=\"/bin/sh -c ''echo etc-ok >/etc/bp-w;\
    echo var-ok >/var/bp-w;echo tmp-ok >/tmp/bp-w;mkdir -p /home/student;\
    echo home-ok >/home/student/bp-w;cat /etc/bp-w /var/bp-w /tmp/bp-w /home/student/bp-w \
    /proc/mounts|tr a-z A-Z''\"";

/// What the server holds of the image: every path of the tree, a hash of every file under
/// /etc, and a hash of the NBD root image.
fn image_state(image: &std::path::Path) -> (String, String, String) {
    let sh = |script: &str| {
        let mut c = crate::common::cmd("sh", &["-c", script]);
        c.current_dir(image);
        let (ok, out, err) = crate::common::run(&mut c, 300);
        assert!(ok, "{script}: {err}");
        out
    };
    (
        sh("cd rootfs && find . | LC_ALL=C sort"),
        sh(
            "cd rootfs && find etc -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum",
        ),
        sh("sha256sum rootfs.img"),
    )
}

#[test]
#[ignore = "two systemd boots under emulation; scripts/test --all runs it"]
fn a_stock_debian_image_is_writable_under_the_overlay_and_stays_unchanged() {
    writable_and_unchanged(TOOLS);
}

#[test]
#[ignore = "two systemd boots under emulation; scripts/test --all runs it"]
fn a_stock_dracut_image_is_writable_under_the_overlay_and_stays_unchanged() {
    writable_and_unchanged(DRACUT);
}

/// `stock` booted over NFS and NBD with the overlay on tmpfs: the command writes and reads
/// back in each place, a getty's login prompt shows, and the image is unchanged.
fn writable_and_unchanged(stock: Stock) {
    let image = stock_image(stock);
    let before = image_state(&image);
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), |text| with_stock_pools(text, stock, WRITES, ""));
    let pools: Vec<String> = ROOTS.iter().map(|r| format!("stock-{r}")).collect();
    // Up at its login prompt, then kept on while systemd runs the command.
    let mut args = vec!["--clients", "1", "--timeout", "900", "--stay-on", "120"];
    for p in &pools {
        args.extend(["--pool", p.as_str()]);
    }
    args.extend(stock.memory);
    let (table, rows) = run_lab(&config, &args, 1300);
    assert_eq!(rows.len(), pools.len(), "{table}");
    for cells in &rows {
        assert_eq!(cells[3], "booted", "{table}");
    }
    let consoles = client_consoles(&dir.path().join("var"));
    assert_eq!(consoles.len(), pools.len());
    for c in consoles.iter().map(|c| plain(c)) {
        // The addition's script for this builder was asked for...
        let asked = match stock.initramfs {
            "dracut" => " root=n",
            _ => " boot=bootpool ",
        };
        assert!(
            c.contains(asked),
            "no `{asked}` on a console:\n{table}\n{c}"
        );
        assert_written(&c, "tmpfs", &table);
        // The image's own filesystem is what the booted system sees under the overlay.
        let lower = if c.contains("root=nfs:") || c.contains("nfsroot=") {
            "/RUN/BOOTPOOL/RO NFS "
        } else {
            "/RUN/BOOTPOOL/RO EXT4 "
        };
        assert!(
            c.contains(lower),
            "no `{lower}` on a console:\n{table}\n{c}"
        );
    }
    // One over each root, in the builder's syntax.
    let roots = match stock.initramfs {
        "dracut" => ["root=nfs:", "root=nbd:"],
        _ => ["nfsroot=", "nbdroot="],
    };
    for root in roots {
        assert_eq!(
            consoles.iter().filter(|c| c.contains(root)).count(),
            1,
            "{root}"
        );
    }
    assert_unchanged(&image, &before);
}

/// What a console of a `WRITES` boot shows: the overlay laid over the root onto `upper`
/// (`tmpfs`, `/dev/vda (ext4)`), systemd bound for multi-user with its getty's login prompt,
/// and the writes read back.
fn assert_written(c: &str, upper: &str, table: &str) {
    let laid = format!("bootpool-overlay: root is an overlay, writes go to {upper}");
    for line in [
        " bootpool.overlay=",
        // The addition laid the overlay in the initrd...
        laid.as_str(),
        // The booted system's systemd started the serial getty (from console=ttyS0), which
        // shows its login prompt. (systemd's "Reached target multi-user.target" may never
        // show: it stops writing status lines to the console once a getty holds it, and the
        // command can hold the target back; nor its "Queued start job for default target"
        // after a systemd initrd's switch to the root, as dracut's is.)
        "Started serial-getty@ttyS0",
        " login: ",
        // ...and the booted system wrote and read back in each place.
        "ETC-OK",
        "VAR-OK",
        "TMP-OK",
        "HOME-OK",
        "BOOTPOOL-OVERLAY / OVERLAY RW",
    ] {
        assert!(c.contains(line), "no `{line}` on a console:\n{table}\n{c}");
    }
    assert!(!c.contains("bootpool-overlay: FAILED"), "{c}");
}

/// The image on the server is as it was: same files, same /etc, same root image.
fn assert_unchanged(image: &std::path::Path, before: &(String, String, String)) {
    let after = image_state(image);
    assert_eq!(before.0, after.0, "the image's file list changed");
    assert_eq!(before.1, after.1, "the image's /etc changed");
    assert_eq!(before.2, after.2, "the NBD root image changed");
}

/// `WRITES`, first saying whether the last boot's file is there (`STALE-ETC`): a disk's
/// upper is emptied at each boot (dist/overlay/bootpool/overlay.sh), so it never is.
const WRITES_AFTER_CHECK: &str = "console=ttyS0 systemd.unit=multi-user.target \
    systemd.wants=kernel-command-line.service systemd.run_success_action=none \
    systemd.run_failure_action=none systemd.run=\"/bin/sh -c ''cat /etc/bp-w>/dev/null \
    2>&1&&echo stale-etc|tr a-z A-Z;echo etc-ok >/etc/bp-w;\
    echo var-ok >/var/bp-w;echo tmp-ok >/tmp/bp-w;mkdir -p /home/student;\
    echo home-ok >/home/student/bp-w;cat /etc/bp-w /var/bp-w /tmp/bp-w /home/student/bp-w \
    /proc/mounts|tr a-z A-Z;sync''\"";

#[test]
#[ignore = "two systemd boots under emulation; scripts/test --all runs it"]
fn the_overlay_on_a_local_disk_takes_the_writes_and_starts_empty_each_boot() {
    let stock = DRACUT;
    let image = stock_image(stock);
    let before = image_state(&image);
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), |text| {
        with_stock_pools(
            text,
            stock,
            WRITES_AFTER_CHECK,
            "    overlay: { disk: /dev/vda }\n",
        )
    });
    // One NFS client with a 64 MiB ext4 disk, booted twice.
    let mut args = vec![
        "--clients",
        "1",
        "--pool",
        "stock-nfs",
        "--disk",
        "64",
        "--cycles",
        "2",
        "--timeout",
        "1500",
        "--stay-on",
        "120",
    ];
    args.extend(stock.memory);
    let (table, rows) = run_lab(&config, &args, 1900);
    assert_eq!(rows.len(), 1, "{table}");
    assert_eq!(rows[0][3], "booted", "{table}");
    let run = std::fs::read_dir(dir.path().join("var/lab"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let console = |name: &str| plain(&std::fs::read_to_string(run.join(name)).unwrap());
    let (first, second) = (console("pc01.1.log"), console("pc01.log"));
    for c in [&first, &second] {
        assert_written(c, "/dev/vda (ext4)", &table);
        // Neither boot found a file the image does not have.
        assert!(!c.contains("STALE-ETC"), "{c}");
    }
    // The writes went to the disk: its filesystem (read by e2fsprogs' debugfs from the
    // client's disk file) holds the last boot's /etc file in the overlay's upper folder.
    let mut debugfs =
        crate::common::cmd("debugfs", &["-R", "cat /bootpool-overlay/upper/etc/bp-w"]);
    debugfs.arg(run.join("pc01.disk"));
    let (ok, out, err) = crate::common::run(&mut debugfs, 60);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "etc-ok", "{err}");
    assert_unchanged(&image, &before);
}

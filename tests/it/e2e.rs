//! End to end: real qemu VMs PXE-boot the demo image through bootpool alone (`bootpool lab`),
//! mount their root with the Linux kernel's NFS client or attach it with nbd-client, report
//! booted, and power off. Each test boots one client from an image with `store: disk` and one
//! from the same image with `store: ram`; the NBD one from RAM attaches with qemu-nbd
//! (`bootpool.nbd_reconnect=`), so that the demo initrd's two NBD clients both boot the root;
//! the RAM one's initrd goes out recompressed with zstd (`initrd_wire`), which the kernel unpacks,
//! and its NBD root as the squashfs's zstd copy (`root_wire`, export `demo-ram~zstd`), which
//! the kernel mounts. The NFS client mounts its root `nocto`, as bootpool writes by default,
//! and opens files without asking the server first (its trace shows it).
//! Needs root and what scripts/setup installs and builds.

use crate::common::lab::{client_consoles, lab_config, repo, run_lab};

use std::path::Path;
use std::process::Command;

/// How far the inferred end (`root_settled`) may lie from the demo's booted call: 5 s, or on a
/// host so busy that the boot took over 33 s, 15% of the boot, since the client's own work
/// between its last root reads and its call slows with it (docs/api.md, "How a boot ends";
/// measured over lab boots under TCG).
fn inferred_bound_s(reported_s: f64) -> f64 {
    (0.15 * reported_s).max(5.0)
}

/// The shipped config plus the demo image again as `demo-ram` (`store: ram`, and its initrd
/// sent recompressed with zstd: `initrd_wire`) and a pool per root that boots it, `lab-nfs-ram`
/// and `lab-nbd-ram` (attached with qemu-nbd), with MACs of their own.
fn with_ram_pools(text: String) -> String {
    let image = text
        .lines()
        .find(|l| l.trim_start().starts_with("dir: ") && l.contains("images/demo"))
        .expect("the demo image's dir line")
        .trim()
        .to_string();
    let text = text.replace(
        "images:\n",
        &format!("images:\n  demo-ram:\n    {image}\n    store: ram\n    initrd_wire: zstd\n"),
    );
    format!(
        "{text}
  lab-nfs-ram:
    image: demo-ram
    root: nfs
    cmdline: console=ttyS0
    clients:
      - {{ macs: \"52:54:00:77:02:01-52:54:00:77:02:3f\" }}
  lab-nbd-ram:
    image: demo-ram
    root: nbd
    cmdline: console=ttyS0 bootpool.nbd_reconnect=60
    clients:
      - {{ macs: \"52:54:00:77:03:01-52:54:00:77:03:3f\" }}
"
    )
}

/// Boots one client of pool `lab-ROOT` (disk store) and one of `lab-ROOT-ram` (RAM store) at
/// once, and checks the lab's table and the daemon's journal.
fn boot_disk_and_ram(root: &str) {
    let dir = tempfile::tempdir().unwrap();
    // Over NBD the RAM image's root goes out as its zstd copy too (not over NFS: the copy
    // would only add its making to the run).
    let config = lab_config(dir.path(), |text| {
        let text = with_ram_pools(text);
        match root {
            "nbd" => text.replace(
                "    initrd_wire: zstd\n",
                "    initrd_wire: zstd\n    root_wire: zstd\n",
            ),
            _ => text,
        }
    });
    let (disk, ram) = (format!("lab-{root}"), format!("lab-{root}-ram"));
    let args = [
        "--clients",
        "1",
        "--pool",
        &disk,
        "--pool",
        &ram,
        "--timeout",
        "400",
    ];
    let (table, rows) = run_lab(&config, &args, 480);
    assert_eq!(rows.len(), 2, "{table}");
    // The last column names each client's pool: one of each store.
    let pools: Vec<&str> = rows.iter().map(|r| r.last().unwrap().as_str()).collect();
    assert_eq!(pools, [disk.as_str(), ram.as_str()], "{table}");
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
    let image = repo().join("images/demo");
    let size = |f: &str| std::fs::metadata(image.join(f)).unwrap().len();
    // The RAM pool's initrd went out as its zstd copy (the lab waits for it to be made).
    let copies: Vec<u64> = std::fs::read_dir(dir.path().join("var/wire"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".initrd"))
        .map(|e| e.metadata().unwrap().len())
        .collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert!(copies[0] < size("initrd.img"), "{copies:?}");
    // The inferred end needs the root quiet for QUIET_S after its last read: the report,
    // read once that has passed, infers it from the stored events.
    std::thread::sleep(std::time::Duration::from_secs(
        bootpool::record::end::QUIET_S as u64 + 2,
    ));
    for pool in [&disk, &ram] {
        let initrd = if pool == &ram {
            copies[0]
        } else {
            size("initrd.img")
        };
        let boot_files = size("vmlinuz") + initrd;
        let mut report = Command::new(env!("CARGO_BIN_EXE_bootpool"));
        report
            .args(["report", "--format", "json", "--pool", pool, "--config"])
            .arg(&config);
        let (ok, json, err) = crate::common::run(&mut report, 30);
        assert!(ok, "{err}");
        let wave: serde_json::Value = serde_json::from_str(&json).unwrap();
        let boots = wave["boots"].as_array().unwrap();
        assert_eq!(boots.len(), 1, "{pool}: {wave}");
        for b in boots {
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
            // Without the image's word, bootpool's own inference (its root's reads settled) ends
            // the boot within the stated bound of the booted call (docs/api.md).
            assert_eq!(b["end"], "reported", "{b}");
            assert_eq!(b["evidence"], "root_settled", "{b}");
            let (reported, inferred) = (
                b["duration_s"].as_f64().unwrap(),
                b["inferred_s"]
                    .as_f64()
                    .unwrap_or_else(|| panic!("none inferred: {b}")),
            );
            assert!(
                (inferred - reported).abs() <= inferred_bound_s(reported),
                "inferred {inferred} s vs reported {reported} s: {b}"
            );
            // The client counts at its booted call; a few reads may follow before it powers off.
            assert!(
                served >= read && (served - read) / read < 0.01,
                "served {served} vs read {read}: {b}"
            );
        }
    }

    // The RAM pool really was served from memory: the daemon loaded its image at start.
    let lab_runs: Vec<_> = std::fs::read_dir(dir.path().join("var/lab"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(lab_runs.len(), 1, "{lab_runs:?}");
    let log = std::fs::read_to_string(lab_runs[0].join("bootpool.log")).unwrap();
    let loaded = match root {
        "nfs" => "nfs image loaded into ram",
        _ => "nbd image loaded into memory",
    };
    assert!(
        log.lines()
            .any(|l| l.contains(loaded) && l.contains("demo-ram")),
        "no `{loaded}` line for demo-ram in the daemon log:\n{log}"
    );
    // The NBD roots were attached once with each of the demo initrd's clients.
    if root == "nbd" {
        let consoles = client_consoles(&dir.path().join("var"));
        for says in ["] nbd-client ", "] qemu-nbd -c /dev/nbd0 "] {
            let n = consoles.iter().filter(|c| c.contains(says)).count();
            assert_eq!(n, 1, "`{says}` on {n} consoles, not 1:\n{table}");
        }
        // The RAM pool's boot was handed its root's zstd copy, and mounted it.
        let wire: Vec<_> = consoles
            .iter()
            .filter(|c| c.contains("root=nbd:10.77.0.1:demo-ram~zstd "))
            .collect();
        assert_eq!(wire.len(), 1, "no console names demo-ram~zstd:\n{table}");
        assert!(wire[0].contains("] qemu-nbd -c /dev/nbd0 "), "{}", wire[0]);
        assert!(
            wire[0].contains("demo-ram~zstd") && wire[0].contains("mount -t squashfs"),
            "{}",
            wire[0]
        );
        let roots = std::fs::read_dir(dir.path().join("var/wire"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".root"))
            .count();
        assert_eq!(roots, 1, "one root copy in var/wire");
    }
    // The daemon journalled both boots, with the root attach and the booted call.
    let journal = crate::common::recorded_events(&dir.path().join("var"));
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
    if root == "nfs" {
        opened_without_asking(&dir.path().join("var/traces"));
    }
}

/// The NFS root bootpool writes is mounted `nocto` (pools.yaml(5), `nfs_options`): the kernel
/// opens a file whose attributes it holds without a GETATTR first. The disk pool's client
/// keeps a trace (pools.yaml's `trace: true`); mounted with close-to-open checks, the demo's
/// boot asks GETATTR more often than it READs (2,938 against 1,646, bench/traces/demo-nfs.trace),
/// `nocto` about one in sixteen (102 against 1,646, demo-nfs-nocto.trace). A slower host lets
/// more attributes expire during the boot (3 s at first), each a GETATTR when its file is used
/// again: the bound is one per READ, which only a close-to-open mount reaches.
fn opened_without_asking(traces: &Path) {
    use bootpool::trace::format::What;
    let kept = bootpool_instruments::trace::kept(traces);
    let bootpool_instruments::trace::Kept { file, trace } = kept
        .iter()
        .find(|k| k.trace.header.mac == "52:54:00:77:00:01")
        .expect("the lab-nfs client's trace");
    let count = |which: &str| {
        trace
            .ops
            .iter()
            .filter(|o| matches!(&o.what, What::Nfs { proc, .. } if proc == which))
            .count()
    };
    let (getattr, read) = (count("getattr"), count("read"));
    assert!(read > 100, "{} READs in {}", read, file.display());
    assert!(
        getattr < read,
        "{getattr} GETATTRs for {read} READs: was the root mounted nocto? ({})",
        file.display()
    );
}

#[test]
fn nfs_roots_from_disk_and_ram_boot() {
    boot_disk_and_ram("nfs");
}

#[test]
fn nbd_roots_from_disk_and_ram_boot() {
    boot_disk_and_ram("nbd");
}

/// The mount tools of the stock initramfs builders, as `bootpool.nfsmount=` names them in the
/// demo initrd, with what each prints in the console before it mounts.
const MOUNT_TOOLS: [(&str, &str); 3] = [
    ("busybox", "mount -t nfs "),
    ("klibc", "nfsmount -o "),
    ("nfs-utils", "mount.nfs "),
];

/// The shipped config plus a pool per mount tool whose kernel command line names the root
/// as `nfs:/demo`: no server (DHCP's) and no ports (the portmapper's, on 111).
fn with_portless_pools(mut text: String) -> String {
    for (i, (tool, _)) in MOUNT_TOOLS.iter().enumerate() {
        text.push_str(&format!(
            "  lab-nfs-{tool}:
    image: demo
    root: nfs
    cmdline: console=ttyS0 root=nfs:/demo bootpool.nfsmount={tool}
    clients:
      - {{ macs: \"52:54:00:77:1{i}:01-52:54:00:77:1{i}:3f\" }}
"
        ));
    }
    text
}

/// busybox `mount`, klibc's `nfsmount` (Debian's initramfs-tools) and nfs-utils' `mount.nfs`
/// (dracut's) each mount the root with no port options, asking bootpool's portmapper, and
/// the client boots.
#[test]
fn stock_initramfs_mount_tools_find_the_nfs_root_through_the_portmapper() {
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), with_portless_pools);
    let pools: Vec<String> = MOUNT_TOOLS
        .iter()
        .map(|(tool, _)| format!("lab-nfs-{tool}"))
        .collect();
    let mut args = vec!["--clients", "1", "--timeout", "400"];
    for p in &pools {
        args.extend(["--pool", p.as_str()]);
    }
    let (table, rows) = run_lab(&config, &args, 480);
    assert_eq!(rows.len(), MOUNT_TOOLS.len(), "{table}");
    for cells in &rows {
        assert_eq!(cells[3], "booted", "{table}");
    }
    // Each tool did the mounting: the consoles say so, one client each.
    let consoles = client_consoles(&dir.path().join("var"));
    for (tool, says) in MOUNT_TOOLS {
        let mounted = consoles
            .iter()
            .filter(|c| {
                c.lines()
                    .any(|l| l.contains("bootpool-initrd: ") && l.contains(says))
            })
            .count();
        assert_eq!(mounted, 1, "{tool}: no console shows `{says}`:\n{table}");
    }
}

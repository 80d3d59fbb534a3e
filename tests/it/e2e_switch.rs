//! End to end, an image switched under running clients: the demo root imported twice as
//! revisions r1 and r2 of one image (they differ in `/etc/bootpool-revision`), two VMs over
//! NFS and two over NBD boot r1 and keep reading their root (`bootpool.loop`: every pass drops
//! the caches and reads `/usr/bin` and `/usr/sbin` from the server again); `bootpool lab
//! --activate` then activates r2 under the running daemon and boots four more VMs, which get
//! r2. The first four see no read error and still read r1's bytes; `prune` keeps r1 while they
//! run and removes it once they are off (seen gone: `lab --stay-off`, `limits.root_lost_after`).
//!
//! Slow (TCG: eight VMs, two imports of the demo root), so `#[ignore]`d; `scripts/test --all`
//! runs it.

use crate::common::lab::{lab_config, repo};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NFS_MACS: [&str; 4] = [
    "52:54:00:77:11:01",
    "52:54:00:77:11:02",
    "52:54:00:77:11:03",
    "52:54:00:77:11:04",
];
const NBD_MACS: [&str; 4] = [
    "52:54:00:77:12:01",
    "52:54:00:77:12:02",
    "52:54:00:77:12:03",
    "52:54:00:77:12:04",
];

fn bootpool(config: &Path, args: &[&str]) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.args(args).arg("--config").arg(config);
    let (ok, out, err) = crate::common::run(&mut c, 900);
    assert!(ok, "{args:?}\n{out}\n{err}");
    out
}

/// Imports `src` as a new revision of image `rev` and returns its id (`imported rN (ID)`).
fn import(config: &Path, src: &Path, kernel: &Path, initrd: &Path) -> String {
    let out = bootpool(
        config,
        &[
            "image",
            "import",
            "rev",
            "--from",
            src.to_str().unwrap(),
            "--kernel",
            kernel.to_str().unwrap(),
            "--initrd",
            initrd.to_str().unwrap(),
        ],
    );
    let id = out
        .split_once(" (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(id, _)| id.to_string());
    id.unwrap_or_else(|| panic!("no revision id in: {out}"))
}

/// The `pass N: revision R, B bytes read` lines of a console, and its read error lines.
fn passes(console: &str) -> (Vec<(String, u64)>, Vec<String>) {
    let mut passes = Vec::new();
    let mut errors = Vec::new();
    for line in console.lines() {
        let Some((_, rest)) = line.split_once("bootpool-demo: pass ") else {
            continue;
        };
        if rest.contains("read error") {
            errors.push(line.to_string());
        } else if let Some((_, what)) = rest.split_once(": revision ") {
            let (revision, bytes) = what.split_once(", ").unwrap();
            let bytes = bytes.split_whitespace().next().unwrap().parse().unwrap();
            passes.push((revision.to_string(), bytes));
        }
    }
    (passes, errors)
}

/// What the kernel says when a root read fails under it.
const KERNEL_ERRORS: [&str; 5] = [
    "I/O error",
    "Stale file handle",
    "SQUASHFS error",
    "block nbd0:",
    "not responding",
];

fn console(run: &Path, client: usize) -> String {
    std::fs::read_to_string(run.join(format!("pc{client:02}.log"))).unwrap_or_default()
}

#[test]
#[ignore = "imports the demo root twice and boots eight VMs (minutes under TCG); scripts/test --all"]
fn running_clients_keep_their_revision_through_a_switch_and_prune_waits_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let demo = repo().join("images/demo");
    let clients = |macs: [&str; 4]| {
        macs.iter()
            .map(|m| format!("      - {{ mac: \"{m}\" }}\n"))
            .collect::<String>()
    };
    let config = lab_config(dir.path(), |text| {
        format!(
            "{}
  rev-nfs:
    image: rev
    root: nfs
    cmdline: console=ttyS0 bootpool.loop
    clients:
{}  rev-nbd:
    image: rev
    root: nbd
    cmdline: console=ttyS0 bootpool.loop
    clients:
{}limits:
  root_lost_after: 15s
",
            text.replacen(
                "images:\n",
                &format!(
                    "images:\n  rev:\n    dir: {}\n",
                    dir.path().join("rev").display()
                ),
                1
            ),
            clients(NFS_MACS),
            clients(NBD_MACS),
        )
    });

    // Two revisions of the demo root that say which they are.
    let src = dir.path().join("src");
    let (ok, o, e) = crate::common::run(
        Command::new("cp")
            .arg("-a")
            .arg(demo.join("rootfs"))
            .arg(&src),
        300,
    );
    assert!(ok, "{o}\n{e}");
    let (kernel, initrd) = (demo.join("vmlinuz"), demo.join("initrd.img"));
    std::fs::write(src.join("etc/bootpool-revision"), "one\n").unwrap();
    let r1 = import(&config, &src, &kernel, &initrd);
    std::fs::write(src.join("etc/bootpool-revision"), "two\n").unwrap();
    let r2 = import(&config, &src, &kernel, &initrd);
    assert_ne!(r1, r2);
    std::fs::remove_dir_all(&src).unwrap();

    let log = dir.path().join("lab.err");
    let mut lab = Command::new(crate::common::bootpool_with_instruments())
        .args([
            "lab",
            "--clients",
            "2",
            "--pool",
            "rev-nfs",
            "--pool",
            "rev-nbd",
        ])
        .args([
            "--activate",
            "rev=r2",
            "--stay-on",
            "60",
            "--stay-off",
            "90",
            "--timeout",
            "900",
        ])
        .arg("--config")
        .arg(&config)
        .stdout(std::fs::File::create(dir.path().join("lab.out")).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(1200);
    let lab_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let run_dir = || {
        let runs = dir.path().join("var/lab");
        std::fs::read_dir(runs).ok()?.next()?.ok().map(|e| e.path())
    };

    // Once r2 is active and the second four are powering on, r1 is still in use: prune keeps
    // it. The first four have read some passes by then.
    let mut at_switch = Vec::new();
    let mut kept = String::new();
    loop {
        if lab_log().contains("more clients") {
            let run = run_dir().expect("the lab's run folder");
            at_switch = (1..=4).map(|i| passes(&console(&run, i)).0.len()).collect();
            kept = bootpool(&config, &["image", "prune", "rev"]);
            break;
        }
        if lab.try_wait().unwrap().is_some() || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let status = loop {
        if let Some(status) = lab.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = lab.kill();
            break lab.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let table = std::fs::read_to_string(dir.path().join("lab.out")).unwrap();
    let lab_out = format!("{table}\n{}", lab_log());
    assert!(status.success(), "the lab failed:\n{lab_out}");
    assert!(
        kept.contains(&format!("keeping r1 ({r1}): 4 running client(s)")),
        "prune during the switch: {kept}\n{lab_out}"
    );

    let run = run_dir().unwrap();
    for i in 1..=8 {
        let text = console(&run, i);
        let (passes, errors) = passes(&text);
        assert!(errors.is_empty(), "pc{i:02}: {errors:?}\n{lab_out}");
        for e in KERNEL_ERRORS {
            assert!(!text.contains(e), "pc{i:02}'s kernel: {e}\n{text}");
        }
        let want = if i <= 4 { "one" } else { "two" };
        assert!(!passes.is_empty(), "pc{i:02} read nothing\n{text}");
        assert!(
            passes.iter().all(|(r, _)| r == want),
            "pc{i:02} should read revision {want}: {passes:?}"
        );
        // Every pass read the same bytes: the same files, whole.
        assert!(
            passes.iter().all(|(_, b)| *b == passes[0].1),
            "pc{i:02}: {passes:?}"
        );
        if i <= 4 {
            assert!(
                passes.len() > at_switch[i - 1],
                "pc{i:02} read no pass after the switch ({} before, {} in all)\n{lab_out}",
                at_switch[i - 1],
                passes.len()
            );
        }
    }

    // The record: the first four ran r1, the second four r2, and all are gone now.
    let json = bootpool(&config, &["report", "--format", "json"]);
    let waves: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    let boots: Vec<&serde_json::Value> = waves
        .iter()
        .flat_map(|w| w["boots"].as_array().unwrap())
        .collect();
    for (n, mac) in NFS_MACS.iter().chain(&NBD_MACS).enumerate() {
        let want = if n % 4 < 2 { &r1 } else { &r2 };
        let b = boots
            .iter()
            .find(|b| b["mac"] == *mac)
            .unwrap_or_else(|| panic!("no boot of {mac}: {json}"));
        assert_eq!(b["revision"], **want, "{mac}: {b}");
        assert_eq!(b["result"], "booted", "{mac}: {b}");
        assert!(
            b["gone"].is_string(),
            "{mac} is not seen gone: {b}\n{lab_out}"
        );
    }

    // Off and gone: r1 has no user left, and prune removes it.
    let pruned = bootpool(&config, &["image", "prune", "rev"]);
    assert!(
        pruned.contains(&format!("removed r1 ({r1})")),
        "{pruned}\n{lab_out}"
    );
    assert!(
        pruned.contains(&format!("keeping r2 ({r2}): active")),
        "{pruned}"
    );
}

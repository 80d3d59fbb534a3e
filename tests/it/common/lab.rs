//! The end-to-end tests' lab config: the shipped pools.yaml pointed at the built demo image
//! and a private state folder.

use std::path::{Path, PathBuf};

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Writes `dir/pools.yaml`: the shipped config with the image and state folder made absolute,
/// then `edit` applied (e.g. to switch DHCP to proxy mode).
pub fn lab_config(dir: &Path, edit: impl Fn(String) -> String) -> PathBuf {
    let shipped = std::fs::read_to_string(repo().join("pools.yaml")).unwrap();
    let image = repo().join("images/demo");
    assert!(
        image.join("rootfs.img").exists(),
        "build the demo image first: images/build-demo.sh"
    );
    let text = shipped
        .replace("dir: images/demo", &format!("dir: {}", image.display()))
        .replace(
            "state_dir: var/",
            &format!("state_dir: {}", dir.join("var").display()),
        );
    let path = dir.join("pools.yaml");
    std::fs::write(&path, edit(text)).unwrap();
    path
}

/// The folder of the one lab run under `state_dir` (`STATE_DIR/lab/START`), where its
/// consoles, logs and boots are kept.
pub fn run_dir(state_dir: &Path) -> PathBuf {
    std::fs::read_dir(state_dir.join("lab"))
        .unwrap()
        .flatten()
        .next()
        .expect("a lab run folder")
        .path()
}

/// Runs `bootpool lab ARGS --config CONFIG` within `secs`, asserts it succeeded, and returns
/// its table and the table's rows split into cells.
pub fn run_lab(config: &Path, args: &[&str], secs: u64) -> (String, Vec<Vec<String>>) {
    let mut lab = std::process::Command::new(super::bootpool_with_instruments());
    lab.arg("lab").args(args).arg("--config").arg(config);
    let (ok, table, log) = super::run(&mut lab, secs);
    assert!(ok, "lab failed\n{table}\n{log}");
    let rows = table
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    (table, rows)
}

/// Boots one NBD client of `config` under `firmware` (`bootpool lab --clients 1 --root nbd
/// --firmware F --timeout SECS`), within `secs` and a minute; the table and its rows.
pub fn run_one_nbd_client(config: &Path, firmware: &str, secs: u64) -> (String, Vec<Vec<String>>) {
    let timeout = secs.to_string();
    let args = [
        "--clients",
        "1",
        "--root",
        "nbd",
        "--firmware",
        firmware,
        "--timeout",
        &timeout,
    ];
    run_lab(config, &args, secs + 60)
}

/// The console of a one-client lab run (`pc01`) under the state folder `state_dir`, and the
/// daemon's log of that run.
pub fn one_client_logs(state_dir: &Path) -> (String, String) {
    let run = std::fs::read_dir(state_dir.join("lab"))
        .unwrap()
        .flatten()
        .map(|run| run.path())
        .find(|p| p.join("pc01.log").exists())
        .expect("console log");
    let console =
        String::from_utf8_lossy(&std::fs::read(run.join("pc01.log")).unwrap()).into_owned();
    let daemon = std::fs::read_to_string(run.join("bootpool.log")).unwrap_or_default();
    (console, daemon)
}

/// The clients' console logs of the one lab run under the state folder `state_dir` (the
/// daemon's and radvd's logs left out), as text.
pub fn client_consoles(state_dir: &Path) -> Vec<String> {
    let run = std::fs::read_dir(state_dir.join("lab"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.ends_with(".log") && name != "bootpool.log" && !name.starts_with("radvd")
        })
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

/// The console without its colours (systemd's status lines are ANSI-coloured).
pub fn plain(console: &str) -> String {
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

//! The dashboard in a real browser: runs `tests/browser/dashboard.test.mjs` (node, playwright-core,
//! Debian's chromium) against this build's daemon and a recorded lab run. It fails, never skips,
//! when node, npm or chromium is missing: CI installs `nodejs npm chromium` (Debian packages).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd` in its own process group with a time bound; on timeout the whole group is killed
/// (node and the daemon it started). Returns (success, stdout + stderr).
fn run(cmd: &mut Command, secs: u64) -> (bool, String) {
    let program = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e} (is it installed?)"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            // The group this test created for the child.
            let _ = bootpool::sys::process::kill(-(child.id() as i32), libc::SIGKILL);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = format!("{}{}", out.join().unwrap(), err.join().unwrap());
    match status {
        Some(s) => (s.success(), text),
        None => panic!("{program} did not finish in {secs}s\n{text}"),
    }
}

#[test]
fn dashboard_in_chromium_shows_what_the_api_says() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    if !dir.join("node_modules/playwright-core").is_dir() {
        let (ok, out) = run(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&dir),
            300,
        );
        assert!(ok, "npm ci in tests/browser failed:\n{out}");
    }
    let (ok, out) = run(
        Command::new("node")
            .arg("dashboard.test.mjs")
            .env("BOOTPOOL_BIN", env!("CARGO_BIN_EXE_bootpool"))
            .current_dir(&dir),
        400,
    );
    println!("{out}");
    assert!(ok, "browser test failed:\n{out}");
}

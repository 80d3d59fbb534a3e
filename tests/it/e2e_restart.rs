//! End to end: a restart in place (SIGUSR2) under a running VM whose root Debian's nbd-client
//! attached (the demo initrd's default NBD client, which cannot reconnect: docs/clients.md).
//! The VM boots the demo with `bootpool.loop`, so once booted it reads its root again and
//! again with its caches dropped, a line per pass; the test restarts the daemon during those
//! passes and checks that two whole passes after the restart read as many bytes as before,
//! with no read error, and that the daemon's log says the connection was handed over and
//! taken up. Needs root and what scripts/setup installs and builds.

use crate::common::lab::lab_config;
use crate::common::{cmd, poll_until, run};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The pass lines (`bootpool-demo: pass N: ...`) of the one client's console so far.
fn passes(state_dir: &std::path::Path) -> Vec<String> {
    let Some(Ok(run)) = std::fs::read_dir(state_dir.join("lab"))
        .ok()
        .and_then(|mut d| d.next())
    else {
        return Vec::new();
    };
    let console = std::fs::read_to_string(run.path().join("pc01.log")).unwrap_or_default();
    console
        .lines()
        .filter_map(|l| l.split("bootpool-demo: pass ").nth(1))
        .map(String::from)
        .collect()
}

#[test]
fn an_nbd_client_root_reads_on_through_a_restart_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), |text| {
        let old = "    cmdline: console=ttyS0\n    trace: true\n    netconsole: true\n    clients:\n      - { macs: \"52:54:00:77:01:01";
        assert_eq!(text.matches(old).count(), 1, "{text}");
        text.replace(
            old,
            &old.replace("console=ttyS0", "console=ttyS0 bootpool.loop"),
        )
    });
    let state = dir.path().join("var");
    let (out, err) = (dir.path().join("lab.out"), dir.path().join("lab.err"));
    let mut lab = Command::new(env!("CARGO_BIN_EXE_bootpool"))
        .args([
            "lab",
            "--clients",
            "1",
            "--pool",
            "lab-nbd",
            "--timeout",
            "400",
        ])
        .args(["--stay-on", "240", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let outcome = std::panic::catch_unwind(|| {
        // Booted and reading its root in passes.
        let mut seen = Vec::new();
        let looping = poll_until(Duration::from_secs(450), Duration::from_secs(1), || {
            seen = passes(&state);
            !seen.is_empty()
        });
        assert!(
            looping,
            "no pass line: {}",
            std::fs::read_to_string(&err).unwrap()
        );
        let pid = std::fs::read_to_string(state.join("bootpool.lock")).unwrap();
        let (ok, _, e) = run(&mut cmd("kill", &["-USR2", pid.trim()]), 10);
        assert!(ok, "{e}");
        // Two whole passes begun after the restart.
        let at_restart = seen.len();
        let read_on = poll_until(Duration::from_secs(200), Duration::from_secs(1), || {
            seen = passes(&state);
            seen.len() >= at_restart + 2
        });
        assert!(read_on, "{seen:?}");
        assert!(!seen.iter().any(|l| l.contains("read error")), "{seen:?}");
        let bytes = |l: &str| l.rsplit(", ").next().unwrap().to_string();
        assert_eq!(bytes(&seen[0]), bytes(&seen[at_restart + 1]), "{seen:?}");
    });
    // The lab stops its VM and daemon when it ends (their death signal).
    let _ = run(&mut cmd("kill", &["-TERM", &lab.id().to_string()]), 10);
    if !poll_until(Duration::from_secs(30), Duration::from_millis(200), || {
        lab.try_wait().unwrap().is_some()
    }) {
        let _ = lab.kill();
    }
    let _ = lab.wait();
    let log = std::fs::read_dir(state.join("lab"))
        .ok()
        .and_then(|mut d| d.next())
        .and_then(|r| std::fs::read_to_string(r.ok()?.path().join("bootpool.log")).ok())
        .unwrap_or_default();
    if let Err(panic) = outcome {
        eprintln!(
            "{log}\n{}",
            std::fs::read_to_string(&err).unwrap_or_default()
        );
        std::panic::resume_unwind(panic);
    }
    assert!(
        log.contains("nbd connection handed over to the restarted daemon"),
        "{log}"
    );
    assert!(
        log.contains("nbd connection taken over from the daemon before the restart"),
        "{log}"
    );
}

//! The state folder as a second daemon or a damaged file finds it: one daemon per folder (a
//! second fails at once, naming the first's PID), and damaged lease or record files either
//! skipped with a warning or refused with an error that says which file and what to do.

use crate::common::Fixture;
use std::process::Command;

#[tokio::test]
async fn a_second_daemon_on_one_state_dir_fails_at_once() {
    let fx = Fixture::new();
    let first = fx.start().await;
    let lock = fx.path().join("var/bootpool.lock");
    let pid = std::process::id();
    assert_eq!(std::fs::read_to_string(&lock).unwrap(), format!("{pid}\n"));

    // In-process: refused before any socket is bound or any file opened.
    let e = match bootpool::app::start(fx.config()).await {
        Ok(_) => panic!("a second daemon started on {}", lock.display()),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains(&format!("pid {pid}")), "{e}");
    assert!(e.contains(&lock.display().to_string()), "{e}");

    // As a process: `bootpool serve` exits with an error saying the same.
    let (ok, _, err) = crate::common::run_async(
        {
            let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
            c.args(["serve", "--config"]).arg(fx.config_path());
            c
        },
        20,
    )
    .await;
    assert!(!ok, "{err}");
    assert!(err.contains(&format!("pid {pid}")), "{err}");
    assert!(err.contains("bootpool.lock"), "{err}");
    assert!(!err.contains("bootpool serving"), "{err}");

    // Once the first has stopped, the folder is free again (`Fixture::start` asks again while
    // a child another test thread is starting still holds a copy of the lock's descriptor).
    first.stop().await;
    fx.start().await.stop().await;
}

/// `bootpool serve` on the fixture's config, its log in `serve.log`, until it says it serves
/// (then SIGTERM) or exits; returns whether it served, and its log.
fn serve_until_serving(fx: &Fixture) -> (bool, String) {
    let log_path = fx.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bootpool"))
        .args(["serve", "--config"])
        .arg(fx.config_path())
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let text = || std::fs::read_to_string(&log_path).unwrap_or_default();
    for _ in 0..400 {
        if text().contains("bootpool serving") {
            // Our own child's pid, not yet reaped.
            let _ = bootpool::sys::process::kill(child.id() as i32, libc::SIGTERM);
            assert!(child.wait().unwrap().success(), "{}", text());
            return (true, text());
        }
        if let Some(status) = child.try_wait().unwrap() {
            assert!(!status.success(), "{}", text());
            return (false, text());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("bootpool serve neither served nor exited:\n{}", text());
}

#[test]
fn damaged_lease_journal_lines_are_skipped_with_a_warning_and_the_rest_loaded() {
    let fx = Fixture::new();
    // A clean start and stop leaves a snapshot and a journal of its generation.
    assert!(serve_until_serving(&fx).0);
    let var = fx.path().join("var");
    let journal = var.join("leases.journal");
    let mut bytes = std::fs::read(&journal).unwrap();
    assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 1);
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 86_400;
    bytes.extend_from_slice(b"\xff\xfe\xfd not UTF-8\n");
    bytes.extend_from_slice(b"{\"op\":\"lease\",\"mac\":\"52:54\n");
    bytes.extend_from_slice(
        format!(
            "{{\"op\":\"lease\",\"mac\":\"52:54:00:77:00:03\",\"ip\":\"127.0.0.103\",\
             \"state\":\"bound\",\"expires\":{expires}}}\n"
        )
        .as_bytes(),
    );
    bytes.extend_from_slice(b"\x00garbage\x07\n");
    std::fs::write(&journal, &bytes).unwrap();

    let (served, log) = serve_until_serving(&fx);
    assert!(served, "{log}");
    for line in [2, 3, 5] {
        assert!(
            log.lines()
                .any(|l| l.contains("skipping damaged lease journal line")
                    && l.contains(&journal.display().to_string())
                    && l.contains(&format!("line={line}"))),
            "no warning for line {line}:\n{log}"
        );
    }
    assert!(!log.contains("line=4"), "{log}");
    // The good line was loaded (and saved again at the stop); the damaged journal is kept.
    let saved = bootpool::service::lease_file::read(&var).unwrap();
    let lease = saved
        .leases
        .iter()
        .find(|l| l.mac == "52:54:00:77:00:03")
        .expect("the lease after the damage");
    assert_eq!(lease.ip, std::net::Ipv4Addr::new(127, 0, 0, 103));
    assert_eq!(
        std::fs::read(var.join("leases.journal.damaged")).unwrap(),
        bytes
    );
}

#[test]
fn a_damaged_lease_snapshot_stops_the_start_naming_it() {
    let fx = Fixture::new();
    assert!(serve_until_serving(&fx).0);
    let snapshot = fx.path().join("var/leases.json");
    std::fs::write(&snapshot, b"{\"leases\": [{\"mac\": \"52:54:00:77:00:0").unwrap();
    let (served, log) = serve_until_serving(&fx);
    assert!(!served, "{log}");
    assert!(
        log.contains(&format!("{} is damaged", snapshot.display())),
        "{log}"
    );
    assert!(
        log.contains("move it aside to start with an empty lease table"),
        "{log}"
    );
    // Left as it was, for whoever looks; moved aside, the daemon starts with no leases.
    assert_eq!(
        std::fs::read(&snapshot).unwrap(),
        b"{\"leases\": [{\"mac\": \"52:54:00:77:00:0"
    );
    std::fs::rename(&snapshot, fx.path().join("var/leases.json.bad")).unwrap();
    assert!(serve_until_serving(&fx).0);
}

#[test]
fn a_damaged_records_db_stops_the_start_naming_it() {
    let fx = Fixture::new();
    let var = fx.path().join("var");
    std::fs::create_dir_all(&var).unwrap();
    let db = var.join("records.db");
    let garbage = crate::common::pattern(9, 16 << 10);
    std::fs::write(&db, &garbage).unwrap();
    let (served, log) = serve_until_serving(&fx);
    assert!(!served, "{log}");
    assert!(
        log.contains(&format!("{} is damaged", db.display())),
        "{log}"
    );
    assert!(
        log.contains("move it aside") && log.contains("to start with empty boot records"),
        "{log}"
    );
    assert_eq!(std::fs::read(&db).unwrap(), garbage);
    // The same for `bootpool report`, which never writes.
    let (ok, _, err) = crate::common::run(
        Command::new(env!("CARGO_BIN_EXE_bootpool"))
            .args(["report", "--config"])
            .arg(fx.config_path()),
        20,
    );
    assert!(!ok);
    assert!(
        err.contains(&format!("{} is damaged", db.display())),
        "{err}"
    );
}

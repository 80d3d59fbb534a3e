//! The state folder as a second daemon or a damaged file finds it: one daemon per folder (a
//! second fails at once, naming the first's PID), and damaged lease or record files either
//! skipped with a warning or refused with an error that says which file and what to do.

mod common;

use common::Fixture;
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
    let (ok, _, err) = common::run_async(
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

    // Once the first has stopped, the folder is free again.
    first.stop().await;
    let again = fx.start().await;
    again.stop().await;
}

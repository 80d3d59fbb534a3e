//! The boot record store on PostgreSQL: the test starts its own server (Debian's binaries from
//! /usr/lib/postgresql/*/bin, as the `postgres` user when run as root, on a free port of
//! 127.0.0.1, data in a temporary folder), runs the daemon against it, kills the daemon with -9,
//! restarts it, checks the records came back (through the API, `bootpool report` and psql),
//! the client's console lines with them, applies a retention, and stops the server it started.
//!
//! It fails, never skips, without PostgreSQL: CI installs Debian's `postgresql` (scripts/setup).

use crate::common::postgres::{Postgres, free_port, free_udp_port};
use crate::common::{Fixture, run};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::Duration;

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A lab-like journal: one client of `nbd-room` whose address is 127.0.0.1, from 1970.
fn journal() -> String {
    [
        r#"{"at":1000000000,"who":{"mac":"52:54:00:77:00:12"},"event":"dhcp_discover","pxe":true,"ipxe":true}"#,
        r#"{"at":1001000000,"who":{"mac":"52:54:00:77:00:12"},"event":"dhcp_ack","ip":"127.0.0.1","pxe":true,"ipxe":true,"pool":"nbd-room"}"#,
        r#"{"at":1002000000,"who":{"ip":"127.0.0.1"},"event":"file","proto":"http","kind":"script","path":"s","bytes":300,"outcome":"complete"}"#,
    ]
    .join("\n")
        + "\n"
}

fn curl(url: &str) -> (bool, String, String) {
    run(
        Command::new("curl").args([
            "-sS",
            "--fail",
            "--max-time",
            "20",
            "--retry",
            "30",
            "--retry-connrefused",
            "--retry-delay",
            "1",
            url,
        ]),
        60,
    )
}

fn boots_of(base: &str, mac: &str) -> serde_json::Value {
    let (ok, body, err) = curl(&format!("{base}/api/v1/boots?mac={mac}"));
    assert!(ok, "{err}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn records_in_postgres_survive_kill_9_and_follow_the_retention() {
    let pg = Postgres::start();
    let fx = Fixture::new();
    let state = fx.path().join("var");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("events.jsonl"), journal()).unwrap();
    // The journal's client holds 127.0.0.1 in the lease table too, so that its console lines
    // (netconsole's UDP, here util-linux logger's) are told apart from a stranger's.
    std::fs::write(
        state.join("leases.json"),
        format!(
            r#"{{"leases":[{{"mac":"52:54:00:77:00:12","ip":"127.0.0.1","state":"bound","expires":{}}}]}}"#,
            u32::MAX
        ),
    )
    .unwrap();
    let http = free_port();
    let console_port = free_udp_port();
    let config = |retention: &str| {
        fx.write_config(
            &fx.loopback()
                .port("console", console_port)
                // The client's address is leased from a range of its own, which the
                // server's may not be in.
                .address("127.0.0.2")
                .range("127.0.0.1-127.0.0.1")
                .pool("nbd-room", "netconsole: true")
                .server(&format!("database: {}\nretention: {retention}", pg.url()))
                .http(&format!("127.0.0.1:{http}")),
        );
    };
    let start = || {
        let log = std::fs::File::create(fx.path().join("serve.log")).unwrap();
        Serve(
            Command::new(env!("CARGO_BIN_EXE_bootpool"))
                .args(["serve", "--config", fx.config_path().to_str().unwrap()])
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .process_group(0)
                .spawn()
                .unwrap(),
        )
    };
    let serve_log = || std::fs::read_to_string(fx.path().join("serve.log")).unwrap_or_default();
    let base = format!("http://127.0.0.1:{http}");
    config("forever");

    let mut daemon = start();
    for _ in 0..4 {
        let (ok, _, err) = curl(&format!("{base}/boot/demo/initrd.img"));
        assert!(ok, "{err}\n{}", serve_log());
    }
    // Two console lines from the client; the second says its root filesystem was refused.
    for line in [
        "Linux version 6.1.0 (test)",
        "SQUASHFS error: unable to read id index table",
    ] {
        let (ok, _, err) = run(
            Command::new("logger").args([
                "--udp",
                "--server",
                "127.0.0.1",
                "--port",
                &console_port.to_string(),
                line,
            ]),
            10,
        );
        assert!(ok, "logger: {err}");
    }
    // Killed with -9 once the store has it all (a batch may wait half a second).
    let committed = || {
        pg.query("SELECT count(*) FROM events") == "7"
            && pg
                .query("SELECT body FROM console")
                .contains("SQUASHFS error")
    };
    crate::common::poll_until(
        Duration::from_secs(15),
        Duration::from_millis(100),
        committed,
    );
    daemon.0.kill().unwrap();
    daemon.0.wait().unwrap();
    drop(daemon);
    // The console is kept in PostgreSQL too, one row for the boot.
    assert_eq!(
        pg.query("SELECT count(*) FROM console WHERE mac = '52:54:00:77:00:12'"),
        "1",
        "{}",
        serve_log()
    );
    assert!(
        pg.query("SELECT body FROM console")
            .contains("SQUASHFS error"),
        "{}",
        serve_log()
    );
    // In PostgreSQL, not in an SQLite file: the journal's 3 events and the 4 downloads.
    assert!(!state.join("records.db").exists());
    assert_eq!(
        pg.query("SELECT count(*) FROM events"),
        "7",
        "{}",
        serve_log()
    );
    assert_eq!(
        pg.query("SELECT count(*) FROM events WHERE event = 'file' AND ip = '127.0.0.1'"),
        "5"
    );

    // Restarted: the boot comes back from the store with its bytes, and once only.
    let mut daemon = start();
    let boots = boots_of(&base, "52:54:00:77:00:12");
    assert_eq!(boots.as_array().unwrap().len(), 1, "{boots}");
    assert_eq!(boots[0]["bytes"]["http"], 300 + 4 * (2u64 << 20), "{boots}");
    daemon.0.kill().unwrap();
    daemon.0.wait().unwrap();
    drop(daemon);
    assert_eq!(pg.query("SELECT count(*) FROM events"), "7");

    // `bootpool report --console` reads the lines and their cause back from the same server.
    let (ok, json, err) = run(
        Command::new(env!("CARGO_BIN_EXE_bootpool"))
            .args(["report", "--config"])
            .arg(fx.config_path())
            .args(["--console", "52:54:00:77:00:12", "--format", "json"]),
        30,
    );
    assert!(ok, "{err}");
    let console: serde_json::Value = serde_json::from_str(&json).unwrap();
    let texts: Vec<&str> = console["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts.len(), 2, "{console}");
    assert!(texts[1].contains("SQUASHFS error"), "{console}");
    assert_eq!(console["cause"]["kind"], "root_fs", "{console}");

    // `bootpool report` reads the same server.
    let (ok, csv, err) = run(
        Command::new(env!("CARGO_BIN_EXE_bootpool"))
            .args(["report", "--config"])
            .arg(fx.config_path())
            .args(["--pool", "nbd-room", "--format", "csv"]),
        30,
    );
    assert!(ok, "{err}");
    assert!(
        csv.contains("52:54:00:77:00:12,127.0.0.1,running,-,-,-,1.0"),
        "{csv}"
    );

    // A retention of a day forgets the 1970 journal at start; today's downloads stay (but,
    // without the DHCP lease that tied them, they make no boot).
    config("1d");
    let _daemon = start();
    let (ok, _, err) = curl(&format!("{base}/api/v1/waves"));
    assert!(ok, "{err}");
    assert_eq!(
        pg.query("SELECT count(*) FROM events"),
        "4",
        "{}",
        serve_log()
    );
    assert_eq!(boots_of(&base, "52:54:00:77:00:12"), serde_json::json!([]));
    drop(_daemon);

    // The server this test started stops with it.
    let pid = pg.child.id() as i32;
    drop(pg);
    // Signal 0 only asks whether the process exists.
    assert!(
        bootpool::sys::process::kill(pid, 0).is_err(),
        "postgres {pid} still runs"
    );
}

/// The servers of a site may start at the same moment on a fresh database: each makes the
/// record tables it lacks, and none fails because another made them at once (PostgreSQL's
/// `IF NOT EXISTS` alone fails one of them on its catalogue's unique index).
#[test]
fn servers_starting_at_once_on_a_fresh_database_all_open_the_record_store() {
    let pg = Postgres::start();
    let db = bootpool::config::Database::Postgres(pg.url());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let opened = rt.block_on(async {
        let opens: Vec<_> = (0..8)
            .map(|_| {
                let db = db.clone();
                tokio::spawn(async move { bootpool::record::store::Store::open(&db).await })
            })
            .collect();
        let mut opened = Vec::new();
        for o in opens {
            opened.push(o.await.unwrap().map(drop).map_err(|e| format!("{e:#}")));
        }
        opened
    });
    for o in opened {
        assert_eq!(o, Ok(()));
    }
}

/// A site's members read each other's events by id (`record::follow`): a batch whose id was
/// taken before a later one committed (two transactions on a real PostgreSQL, the first held
/// open) is still read once it commits, never twice, and a member's own rows come back as ids
/// only.
#[test]
fn an_event_committed_after_a_later_one_is_still_read_by_the_others_once() {
    use bootpool::record::follow::Cursor;
    use bootpool::record::store::Store;
    use bootpool::record::{Event, Kind, Who};
    let pg = Postgres::start();
    let db = bootpool::config::Database::Postgres(pg.url());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::open(&db).await.unwrap();
        let Store::Postgres(pool) = &store else {
            panic!("a PostgreSQL store")
        };
        let ev = |n: u8| Event {
            at: i64::from(n),
            who: Who::Mac(format!("52:54:00:46:02:{n:02x}").parse().unwrap()),
            kind: Kind::DhcpDiscover {
                answered: true,
                pxe: true,
                ipxe: false,
                pool: None,
                arch: None,
            },
        };
        // b's batch takes its id and stays open while c's later one commits.
        let mut slow = pool.begin().await.unwrap();
        sqlx::query(
            "INSERT INTO events (at, mac, ip, event, body, member) \
             VALUES (1, '52:54:00:46:02:01', NULL, 'dhcp_discover', $1, 'b')",
        )
        .bind(serde_json::to_string(&ev(1)).unwrap())
        .execute(&mut *slow)
        .await
        .unwrap();
        store.append_as(Some("c"), &[ev(2)], &[]).await.unwrap();
        store.append_as(Some("a"), &[ev(3)], &[]).await.unwrap();

        let mut cursor = Cursor::default();
        let read = |cursor: &Cursor| {
            let (after, gaps) = (cursor.after(), cursor.gaps());
            let store = store.clone();
            async move { store.events_after(after, &gaps, "a").await.unwrap() }
        };
        let rows = read(&cursor).await;
        let seen: Vec<(Option<String>, bool)> = rows
            .iter()
            .map(|(_, m, e)| (m.clone(), e.is_some()))
            .collect();
        // c's event whole; a's own as its id alone; b's not yet.
        assert_eq!(
            seen,
            [
                (Some("c".to_string()), true),
                (Some("a".to_string()), false)
            ]
        );
        let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
        assert_eq!(cursor.took(&ids, std::time::Instant::now()), ids);
        assert_eq!(cursor.gaps(), [ids[0] - 1]);

        slow.commit().await.unwrap();
        let rows = read(&cursor).await;
        let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
        let new = cursor.took(&ids, std::time::Instant::now());
        let got: Vec<&Event> = rows
            .iter()
            .filter(|r| new.contains(&r.0))
            .filter_map(|r| r.2.as_ref())
            .collect();
        assert_eq!(got, [&ev(1)]);
        assert!(cursor.gaps().is_empty());
        // Read again: nothing new.
        let ids: Vec<i64> = read(&cursor).await.iter().map(|r| r.0).collect();
        assert!(cursor.took(&ids, std::time::Instant::now()).is_empty());
    });
}

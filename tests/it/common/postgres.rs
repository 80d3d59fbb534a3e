//! A PostgreSQL server a test starts itself: Debian's binaries from /usr/lib/postgresql/*/bin,
//! as the `postgres` user when run as root, on a free port of 127.0.0.1 and a socket in its
//! temporary data folder (reachable from any network namespace), stopped when dropped. It
//! fails, never skips, without PostgreSQL: CI installs Debian's `postgresql` (scripts/setup).

use super::run;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The newest PostgreSQL's binaries folder (the storm's finder).
fn pg_bin() -> PathBuf {
    bootpool_instruments::storm::postgres::newest_bin().unwrap_or_else(|| {
        panic!(
            "no /usr/lib/postgresql/*/bin/postgres: install Debian's postgresql (scripts/setup does)"
        )
    })
}

/// The uid and gid PostgreSQL runs as: the `postgres` user when we are root (it refuses root),
/// else ourselves.
fn pg_user() -> Option<(u32, u32)> {
    // SAFETY: getuid has no preconditions; getpwnam returns null or a valid static record.
    unsafe {
        if libc::getuid() != 0 {
            return None;
        }
        let pw = libc::getpwnam(c"postgres".as_ptr());
        assert!(
            !pw.is_null(),
            "running as root needs a `postgres` user (Debian's postgresql package creates it)"
        );
        Some(((*pw).pw_uid, (*pw).pw_gid))
    }
}

fn as_pg(program: PathBuf, user: Option<(u32, u32)>) -> Command {
    let mut c = Command::new(program);
    if let Some((uid, gid)) = user {
        c.gid(gid).uid(uid);
    }
    c
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A PostgreSQL server this test started; stopped (fast shutdown) when dropped.
pub struct Postgres {
    pub child: Child,
    data: PathBuf,
    port: u16,
    bin: PathBuf,
    user: Option<(u32, u32)>,
    _dir: tempfile::TempDir,
}

/// The server on `data`, its log appended to in `dir`.
fn spawn(
    bin: &std::path::Path,
    user: Option<(u32, u32)>,
    data: &std::path::Path,
    dir: &std::path::Path,
    port: u16,
) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("postgres.log"))
        .unwrap();
    as_pg(bin.join("postgres"), user)
        .arg("-D")
        .arg(data)
        .args(["-k"])
        .arg(dir)
        .args(["-p", &port.to_string()])
        .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("starting postgres")
}

impl Postgres {
    pub fn start() -> Postgres {
        let bin = pg_bin();
        let user = pg_user();
        let dir = tempfile::tempdir().unwrap();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let data = dir.path().join("data");
        let (ok, out, err) = run(
            as_pg(bin.join("initdb"), user)
                .args(["--auth=trust", "--username=postgres", "--no-sync", "-D"])
                .arg(&data),
            120,
        );
        assert!(ok, "initdb failed:\n{out}\n{err}");
        let port = free_port();
        let child = spawn(&bin, user, &data, dir.path(), port);
        let pg = Postgres {
            child,
            data,
            port,
            bin,
            user,
            _dir: dir,
        };
        pg.wait_ready();
        pg
    }

    /// Stops the server at once, as a crash would (`pg_ctl stop -m immediate`).
    pub fn stop_immediate(&mut self) {
        let (ok, _, err) = run(
            as_pg(self.bin.join("pg_ctl"), self.user)
                .args(["stop", "-m", "immediate", "-D"])
                .arg(&self.data),
            60,
        );
        assert!(ok, "pg_ctl stop: {err}");
        let _ = self.child.wait();
    }

    /// Starts the server again on its data, port and socket (after `stop_immediate`).
    pub fn start_again(&mut self) {
        self.child = spawn(
            &self.bin,
            self.user,
            &self.data,
            self._dir.path(),
            self.port,
        );
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let (pg, port) = (self, self.port);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (ok, _, _) = run(
                Command::new(pg.bin.join("pg_isready")).args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                ]),
                10,
            );
            if ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not come up:\n{}",
                pg.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The URL through the server's Unix socket: the same server from any network
    /// namespace.
    pub fn socket_url(&self) -> String {
        format!(
            "postgres:///postgres?host={}&port={}&user=postgres",
            self._dir.path().display(),
            self.port
        )
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("postgres.log")).unwrap_or_default()
    }

    /// One value from psql.
    pub fn query(&self, sql: &str) -> String {
        let (ok, out, err) = run(
            as_pg(self.bin.join("psql"), self.user).args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-At",
                "-c",
                sql,
            ]),
            30,
        );
        assert!(ok, "psql {sql}: {err}");
        out.trim().to_string()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT is PostgreSQL's fast shutdown; SIGKILL if it does not go in time.
        // The server process this test spawned.
        let _ = bootpool::sys::process::kill(self.child.id() as i32, libc::SIGINT);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! Shared test fixtures: a small fake image folder, a config around it with every port 0, and
//! the daemon started in-process. Interop tests point real client programs at `Running::bound`.

use bootpool::app::{self, Running};
use bootpool::config::Config;
pub use loopback::Loopback;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A temporary folder holding an image (`images/demo`), a state folder and a pools.yaml.
pub struct Fixture {
    pub dir: tempfile::TempDir,
}

pub mod lab;
pub mod loopback;
pub mod netns;
pub mod postgres;
pub mod pxe;
pub mod rpc;

/// The daemon's binary, with the instruments' (`bootpool-instruments`, which `bootpool lab`,
/// `storm` and `trace` run) built beside it first, once per test run: cargo builds only a
/// package's own binaries for its tests, and an old instruments binary would test old code.
/// The build is cargo's own, into the target folder and profile of this test's build.
pub fn bootpool_with_instruments() -> &'static str {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    let bootpool = env!("CARGO_BIN_EXE_bootpool");
    BUILT.get_or_init(|| {
        let profile_dir = Path::new(bootpool).parent().unwrap();
        let release = profile_dir.ends_with("release");
        cargo_build(&["--package", "bootpool-instruments"], release);
    });
    bootpool
}

/// The client agent as the addition carries it (`server.agent`): the static musl build of
/// `bootpool-agent`, release profile, built once per test run into this test's target
/// folder (`scripts/setup` adds the musl target to rustup).
pub fn static_agent() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            const TARGET: &str = "x86_64-unknown-linux-musl";
            let args = ["--package", "bootpool-agent", "--target", TARGET];
            cargo_build(&args, true);
            let target_dir = Path::new(env!("CARGO_BIN_EXE_bootpool")).parent().unwrap();
            target_dir
                .parent()
                .unwrap()
                .join(TARGET)
                .join("release/bootpool-agent")
        })
        .clone()
}

/// `cargo build --quiet ARGS` into this test's target folder.
fn cargo_build(args: &[&str], release: bool) {
    let profile_dir = Path::new(env!("CARGO_BIN_EXE_bootpool")).parent().unwrap();
    let mut cargo = std::process::Command::new(env!("CARGO"));
    cargo
        .args(["build", "--quiet"])
        .args(args)
        .arg("--target-dir")
        .arg(profile_dir.parent().unwrap())
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    // Without the variables cargo sets for this test (the package's, its manifest's): a
    // build script that reruns when one changes (ring's, on CARGO_MANIFEST_DIR) would
    // otherwise rebuild here and again at the next plain `cargo build`.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let set_by_cargo = [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_NAME",
            "CARGO_PRIMARY_PACKAGE",
        ];
        if name.starts_with("CARGO_PKG_") || set_by_cargo.contains(&&*name) {
            cargo.env_remove(&*name);
        }
    }
    if release {
        cargo.arg("--release");
    }
    let out = cargo.output().expect("running cargo");
    assert!(
        out.status.success(),
        "cargo build {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Deterministic bytes, so a test can check what it read without keeping a copy.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

impl Fixture {
    /// An image with a 3 MiB "kernel", a 2 MiB "initrd", a small root tree and a 16 MiB root
    /// image file; pools `nfs-room` (MACs 52:54:00:77:00:00-0f) and `nbd-room` (..:10-1f).
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let image = dir.path().join("images/demo");
        std::fs::create_dir_all(image.join("rootfs/etc")).unwrap();
        std::fs::create_dir_all(image.join("rootfs/usr/lib")).unwrap();
        std::fs::write(image.join("vmlinuz"), pattern(1, 3 << 20)).unwrap();
        std::fs::write(image.join("initrd.img"), pattern(2, 2 << 20)).unwrap();
        std::fs::write(image.join("rootfs.img"), pattern(3, 16 << 20)).unwrap();
        std::fs::write(image.join("rootfs/etc/hostname"), "demo\n").unwrap();
        for i in 0..50 {
            std::fs::write(
                image.join(format!("rootfs/usr/lib/lib{i}.so")),
                pattern(100 + i, 1000 + i as usize * 517),
            )
            .unwrap();
        }
        std::os::unix::fs::symlink("usr/lib", image.join("rootfs/lib")).unwrap();
        let loaders = dir.path().join("loaders");
        std::fs::create_dir_all(&loaders).unwrap();
        std::fs::write(loaders.join("undionly.kpxe"), pattern(4, 70_000)).unwrap();
        std::fs::write(loaders.join("ipxe.efi"), pattern(5, 1_000_000)).unwrap();
        let fixture = Fixture { dir };
        fixture.write_config(&fixture.loopback());
        fixture
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn image_dir(&self) -> PathBuf {
        self.path().join("images/demo")
    }

    /// A legacy journal (`var/events.jsonl`, replayed at start) holding one DHCP ACK that gave
    /// 127.0.0.1 to `mac` in `pool`: the recorder then ties what arrives from 127.0.0.1 (NFS
    /// and NBD, known by IP) to that client's boot.
    pub fn journal_loopback_lease(&self, mac: &str, pool: &str) {
        use bootpool::record::{Event, Kind, Who};
        let ack = Event::now(
            Who::Mac(mac.parse().unwrap()),
            Kind::DhcpAck {
                ip: std::net::Ipv4Addr::LOCALHOST,
                pxe: false,
                ipxe: false,
                pool: pool.into(),
                link: None,
                relayed: None,
            },
        );
        let state = self.path().join("var");
        std::fs::create_dir_all(&state).unwrap();
        let line = serde_json::to_string(&ack).unwrap() + "\n";
        std::fs::write(state.join("events.jsonl"), line).unwrap();
    }

    pub fn config_path(&self) -> PathBuf {
        self.path().join("pools.yaml")
    }

    /// The fixture's config, `tests/fixtures/loopback.yaml`, to edit (`Loopback`'s methods)
    /// and write with `write_config`.
    pub fn loopback(&self) -> Loopback {
        Loopback::default()
    }

    pub fn write_config(&self, text: &str) {
        let mut f = std::fs::File::create(self.config_path()).unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    pub fn config(&self) -> Config {
        Config::load(&self.config_path()).expect("fixture config")
    }

    /// Starts the whole daemon in-process on the fixture's config. A daemon started again on
    /// the same state folder may find its lock held a moment after the last one stopped: a
    /// child process that another test thread is starting holds a copy of this process's
    /// descriptors, the lock file's too, until its exec closes them. So a locked folder is
    /// asked again, for 10 s at most.
    pub async fn start(&self) -> Running {
        self.start_member(None).await
    }

    /// `start` as member `member` of its site (a PostgreSQL `database:` shared with others).
    pub async fn start_as(&self, member: &str) -> Running {
        self.start_member(Some(member)).await
    }

    async fn start_member(&self, member: Option<&str>) -> Running {
        for _ in 0..100 {
            let started = match member {
                Some(m) => app::start_as(self.config(), m).await,
                None => app::start(self.config()).await,
            };
            match started {
                Ok(running) => return running,
                Err(e) if e.downcast_ref::<app::StateDirLocked>().is_some() => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => panic!("the daemon did not start: {e:#}"),
            }
        }
        panic!("the state folder stayed locked for 10 s")
    }
}

/// The events recorded in a state folder's store (`records.db`), one JSON object a line, oldest
/// first: what `events.jsonl` held before the store. Empty if nothing was stored yet. Safe to
/// call from async tests (it runs on its own thread) and while the daemon writes.
pub fn recorded_events(state_dir: &Path) -> String {
    let db = bootpool::config::Database::Sqlite(state_dir.join("records.db"));
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut out = String::new();
            if let Some(store) = bootpool::record::store::Store::open_existing(&db)
                .await
                .expect("records store")
            {
                store
                    .replay(|ev| {
                        out.push_str(&serde_json::to_string(&ev).unwrap());
                        out.push('\n');
                    })
                    .await
                    .expect("replaying the store");
            }
            out
        })
    })
    .join()
    .unwrap()
}

/// Runs a program to completion with a time bound; returns (status ok, stdout, stderr).
/// Its output is read while it runs, so a chatty program cannot block on a full pipe.
pub fn run(cmd: &mut std::process::Command, secs: u64) -> (bool, String, String) {
    use std::io::Read;
    let program = format!("{cmd:?}");
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    match status {
        Some(s) => (s.success(), out, err),
        None => panic!("{program} did not finish in {secs}s\nstdout: {out}\nstderr: {err}"),
    }
}

/// Runs `cmd` to its end with `input` on its standard input (fed from a thread, so neither
/// side can block the other) and returns its standard output; the test fails, naming the
/// command, its exit status and its standard error, unless it exits 0.
pub fn stdout_of(cmd: &mut std::process::Command, input: &[u8]) -> Vec<u8> {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let out = std::thread::scope(|s| {
        // A program that exits without reading all of it fails below, by its status.
        s.spawn(move || std::io::Write::write_all(&mut stdin, input));
        child.wait_with_output().unwrap()
    });
    assert!(
        out.status.success(),
        "{cmd:?}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `program` with `args`, to run with `run`, `run_async` or `stdout_of`.
pub fn cmd(program: &str, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(program);
    c.args(args);
    c
}

/// Asks `ready` every `every` until it says yes or `within` has passed (the last time it is
/// asked is after that); whether it said yes. What it looked at last stays in the variables
/// it wrote, for the assertion after.
pub fn poll_until(
    within: std::time::Duration,
    every: std::time::Duration,
    mut ready: impl FnMut() -> bool,
) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        let last = std::time::Instant::now() >= deadline;
        if ready() {
            return true;
        }
        if last {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// `poll_until` for async test code: asks `ask` every `every` until `enough` is true of its
/// answer or `within` has passed (the last time it is asked is after that); its last answer,
/// for the assertion after.
pub async fn poll_async<T, F>(
    within: std::time::Duration,
    every: std::time::Duration,
    mut ask: impl FnMut() -> F,
    enough: impl Fn(&T) -> bool,
) -> T
where
    F: std::future::Future<Output = T>,
{
    let deadline = std::time::Instant::now() + within;
    loop {
        let last = std::time::Instant::now() >= deadline;
        let answer = ask().await;
        if enough(&answer) || last {
            return answer;
        }
        tokio::time::sleep(every).await;
    }
}

/// Runs a blocking client program from async test code.
pub async fn run_async(mut cmd: std::process::Command, secs: u64) -> (bool, String, String) {
    tokio::task::spawn_blocking(move || run(&mut cmd, secs))
        .await
        .unwrap()
}
pub mod nbd_raw;

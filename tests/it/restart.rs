//! A restart in place (SIGUSR2) of `bootpool serve` while clients hold their roots: qemu-io's
//! NBD connection is handed to the restarted program and goes on over the same TCP connection
//! (`ss` shows the client's port before and after; qemu-io is not told to reconnect), and a
//! raw client caught halfway through a request's header is answered by the new program. An
//! NFS mount (libnfs) is not handed over: it connects again by itself, and its file handles
//! from before the restart stay good.

use crate::common::nbd_raw::Raw;
use crate::common::{Fixture, cmd, poll_until, run};
use crate::reload::{Held, nfs_holder, nfs_url, port_of};
use std::io::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// An NBD READ request's header.
fn read_header(cookie: u64, offset: u64, len: u32) -> Vec<u8> {
    let mut b = 0x25609513u32.to_be_bytes().to_vec();
    b.extend_from_slice(&0u16.to_be_bytes());
    b.extend_from_slice(&0u16.to_be_bytes());
    b.extend_from_slice(&cookie.to_be_bytes());
    b.extend_from_slice(&offset.to_be_bytes());
    b.extend_from_slice(&len.to_be_bytes());
    b
}

/// A port free on 127.0.0.1 a moment ago.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The local ports of the established TCP connections to `port` on this host.
fn client_ports(port: u16) -> Vec<String> {
    let filter = format!("dport = :{port}");
    let (ok, out, err) = run(
        &mut cmd("ss", &["-tnH", "state", "established", &filter]),
        10,
    );
    assert!(ok, "{err}");
    out.lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(|local| local.rsplit(':').next().unwrap().to_string())
        .collect()
}

/// A client fed lines on its input, its output in a file, killed when dropped.
struct Client {
    child: Child,
    out: std::path::PathBuf,
}

impl Client {
    fn start(cmd: &mut Command, out: std::path::PathBuf) -> Client {
        let child = cmd
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        Client { child, out }
    }

    fn say(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Its output once `n` lines hold `what` (30 s at most).
    fn wait(&self, what: &str, n: usize) -> String {
        let mut out = String::new();
        poll_until(Duration::from_secs(30), Duration::from_millis(50), || {
            out = std::fs::read_to_string(&self.out).unwrap();
            out.matches(what).count() >= n
        });
        out
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_restart_in_place_hands_nbd_connections_over_and_nfs_mounts_reconnect() {
    let fx = Fixture::new();
    let (nbd, nfs_port) = (free_port(), free_port());
    fx.write_config(&fx.loopback().port("nbd", nbd).port("nfs", nfs_port));
    let log_path = fx.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut serve = Command::new(env!("CARGO_BIN_EXE_bootpool"))
        .args(["serve", "--config"])
        .arg(fx.config_path())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let logged = || std::fs::read_to_string(&log_path).unwrap();
    let serving = |n: usize| {
        poll_until(Duration::from_secs(30), Duration::from_millis(100), || {
            logged().matches("bootpool serving").count() >= n
        })
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert!(serving(1), "{}", logged());
        // qemu-io's output line by line (stdbuf), so each read's answer is seen as it comes.
        let uri = format!("nbd://127.0.0.1:{nbd}/demo");
        let mut qemu = Client::start(
            Command::new("stdbuf").args(["-oL", "qemu-io", "-f", "raw", "-r", &uri]),
            fx.path().join("qemu-io.out"),
        );
        qemu.say("read 0 64k");
        let out = qemu.wait("read 65536/65536 bytes", 1);
        assert!(out.contains("at offset 0"), "{out}");
        let before = client_ports(nbd);
        assert_eq!(before.len(), 1, "{before:?}");
        // A client caught mid-request: 10 bytes of a READ's header sent before the restart,
        // the other 18 after it; the restarted daemon answers it from the bytes handed over.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], nbd));
        let mut raw = rt.block_on(async {
            let mut raw = Raw::connect(addr).await;
            assert_eq!(raw.go("demo").await, Ok(16 << 20));
            raw
        });
        // And an NFS mount (libnfs) that has read a file.
        let exe = rt.block_on(nfs_holder(fx.path()));
        let mut nfs = Held::start(
            Command::new(&exe).arg(nfs_url(nfs_port, "/demo")),
            fx.path(),
            "nfs",
        );
        nfs.say("/etc/hostname");
        let out = rt.block_on(nfs.lines("/etc/hostname ", 1));
        assert!(out.contains("/etc/hostname 5 "), "{out}");
        let header = read_header(7, 4096, 512);
        rt.block_on(raw.send(&header[..10]));

        crate::common::run(&mut cmd("kill", &["-USR2", &serve.id().to_string()]), 10);
        assert!(serving(2), "{}", logged());
        let image = crate::common::pattern(3, 16 << 20);
        rt.block_on(async {
            raw.send(&header[10..]).await;
            raw.send(&read_header(8, 8192, 100)).await;
            assert_eq!(raw.reply().await, (0, 7));
            assert_eq!(raw.read(512).await, image[4096..4608]);
            assert_eq!(raw.reply().await, (0, 8));
            assert_eq!(raw.read(100).await, image[8192..8292]);
        });
        assert!(logged().contains("pending=10"), "{}", logged());
        // The NFS mount made before the restart reads on after it: libnfs connects again by
        // itself, and the root's file handle from before the restart still works.
        nfs.say("/usr/lib/lib3.so");
        let (ok, out, err) = nfs.finish();
        assert!(ok, "{out}{err}\n{}", logged());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(
            lines[2].starts_with(&format!("/usr/lib/lib3.so {} ", 1000 + 3 * 517)),
            "{out}"
        );
        assert_ne!(
            port_of(lines[2]),
            port_of(lines[1]),
            "not a new connection: {out}"
        );
        qemu.say("read 1M 64k");
        let out = qemu.wait("read 65536/65536 bytes", 2);
        assert!(out.contains("at offset 1048576"), "{out}\n{}", logged());
        assert!(!out.contains("failed"), "{out}");
        // The same connection: no reconnection (qemu-io was not asked for one) happened.
        let after = client_ports(nbd);
        assert!(
            after.contains(&before[0]),
            "{before:?} {after:?}\n{}",
            logged()
        );
        let text = logged();
        assert!(
            text.contains("nbd connection handed over to the restarted daemon"),
            "{text}"
        );
        assert!(
            text.contains("nbd connection taken over from the daemon before the restart"),
            "{text}"
        );
    }));
    let running = serve.try_wait().unwrap().is_none();
    crate::common::run(&mut cmd("kill", &["-TERM", &serve.id().to_string()]), 10);
    let stopped = serve.wait().unwrap();
    if let Err(panic) = outcome {
        eprintln!("{}", logged());
        std::panic::resume_unwind(panic);
    }
    assert!(running, "the daemon ended: {}", logged());
    assert!(stopped.success(), "{}", logged());
}

//! Reloading the config while clients hold their roots: qemu-io keeps an NBD connection and a
//! small libnfs program an NFS mount open across a reload that adds a pool (with an image of
//! its own), changes a cmdline and lowers a limit; curl fetches the next boot script. A bad reload (a syntax
//! error, a changed listening address) leaves the old config serving and says why, and
//! `bootpool reload` asks a `bootpool serve` process by SIGHUP and reports its answer.

use crate::common::{Fixture, cmd, poll_async, run, run_async};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

/// nbd-room's client, and the client of the pool the reload adds.
const NBD_MAC: &str = "52:54:00:77:00:11";
const LAB_MAC: &str = "52:54:00:77:01:00";

/// The fixture's config with nbd-room's cmdline changed and, with `lab`, a pool `lab` booting
/// a second image over NFS and one NBD connection per client.
fn changed(fx: &Fixture, lab: bool) -> String {
    let text = fx.loopback().to_string();
    let old = "    root: nbd\n    cmdline: console=ttyS0\n";
    assert_eq!(text.matches(old).count(), 1, "{text}");
    let mut text = text.replace(old, "    root: nbd\n    cmdline: console=ttyS0 quiet\n");
    if lab {
        let demo = "  demo: { dir: images/demo, store: disk }\n";
        text = text.replace(
            demo,
            &format!("{demo}  demo2: {{ dir: images/demo2, store: disk }}\n"),
        );
        text.push_str(&format!(
            "  lab:\n    image: demo2\n    root: nfs\n    clients:\n      - {{ mac: \"{LAB_MAC}\" }}\n"
        ));
        text.push_str("limits:\n  nbd_per_client: 1\n");
    }
    text
}

/// The boot script of `mac`: the HTTP status and the text.
async fn script(base: &str, mac: &str) -> (String, String) {
    let url = format!("{base}/boot/script/{mac}.ipxe");
    let (ok, out, err) = run_async(
        cmd(
            "curl",
            &["-sS", "--max-time", "20", "-w", "\n%{http_code}", &url],
        ),
        30,
    )
    .await;
    assert!(ok, "{err}");
    let (text, status) = out.rsplit_once('\n').unwrap();
    (status.to_string(), text.to_string())
}

async fn metrics(base: &str) -> String {
    let (ok, out, err) = run_async(
        cmd(
            "curl",
            &["-sS", "--max-time", "20", &format!("{base}/metrics")],
        ),
        30,
    )
    .await;
    assert!(ok, "{err}");
    out
}

/// A client program kept running: fed lines on its standard input, its output in files.
pub(crate) struct Held {
    child: Child,
    stdin: Option<ChildStdin>,
    out: PathBuf,
    err: PathBuf,
}

impl Held {
    pub(crate) fn start(cmd: &mut Command, dir: &Path, name: &str) -> Held {
        let (out, err) = (
            dir.join(format!("{name}.out")),
            dir.join(format!("{name}.err")),
        );
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        let stdin = child.stdin.take();
        Held {
            child,
            stdin,
            out,
            err,
        }
    }

    pub(crate) fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap()
    }

    /// Its output once it holds `n` lines that start with `what` (30 s at most).
    pub(crate) async fn lines(&self, what: &str, n: usize) -> String {
        poll_async(
            Duration::from_secs(30),
            Duration::from_millis(50),
            || async { self.output() },
            |out: &String| out.lines().filter(|l| l.starts_with(what)).count() >= n,
        )
        .await
    }

    /// Ends its input and waits (60 s at most) for it to exit: whether it exited 0, its
    /// output and its errors.
    pub(crate) fn finish(mut self) -> (bool, String, String) {
        drop(self.stdin.take());
        let mut ok = None;
        crate::common::poll_until(Duration::from_secs(60), Duration::from_millis(20), || {
            ok = self.child.try_wait().unwrap().map(|s| s.success());
            ok.is_some()
        });
        let err = std::fs::read_to_string(&self.err).unwrap();
        (ok.expect("the client did not exit"), self.output(), err)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A libnfs client that mounts the export of its URL once, then reads in full each file
/// named on a line of its input, printing `PATH BYTES PORT` (PORT: its socket's own port, the
/// same for as long as it holds one connection), until its input ends.
pub(crate) async fn nfs_holder(dir: &Path) -> PathBuf {
    const PROGRAM: &str = r#"
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/socket.h>
#include <netinet/in.h>
struct nfs_context;
struct nfsfh;
struct nfs_url { char *server; char *path; char *file; };
struct nfs_context *nfs_init_context(void);
struct nfs_url *nfs_parse_url_dir(struct nfs_context *nfs, const char *url);
int nfs_mount(struct nfs_context *nfs, const char *server, const char *exportname);
int nfs_open(struct nfs_context *nfs, const char *path, int flags, struct nfsfh **fh);
int nfs_read(struct nfs_context *nfs, struct nfsfh *fh, uint64_t count, void *buf);
int nfs_close(struct nfs_context *nfs, struct nfsfh *fh);
int nfs_get_fd(struct nfs_context *nfs);
char *nfs_get_error(struct nfs_context *nfs);
static int port(struct nfs_context *nfs) {
    struct sockaddr_in a;
    socklen_t n = sizeof a;
    if (getsockname(nfs_get_fd(nfs), (struct sockaddr *)&a, &n) != 0) return -1;
    return ntohs(a.sin_port);
}
int main(int argc, char **argv) {
    static char buf[1 << 20];
    char line[4096];
    struct nfs_context *nfs = nfs_init_context();
    struct nfs_url *url;
    if (argc != 2 || nfs == NULL) return 2;
    url = nfs_parse_url_dir(nfs, argv[1]);
    if (url == NULL || nfs_mount(nfs, url->server, url->path) != 0) {
        fprintf(stderr, "mount: %s\n", nfs_get_error(nfs));
        return 1;
    }
    printf("mounted %d\n", port(nfs));
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        struct nfsfh *fh;
        long total = 0;
        int n;
        line[strcspn(line, "\n")] = 0;
        if (nfs_open(nfs, line, O_RDONLY, &fh) != 0) {
            fprintf(stderr, "%s: %s\n", line, nfs_get_error(nfs));
            return 1;
        }
        while ((n = nfs_read(nfs, fh, sizeof buf, buf)) > 0) total += n;
        if (n < 0) {
            fprintf(stderr, "%s: %s\n", line, nfs_get_error(nfs));
            return 1;
        }
        nfs_close(nfs, fh);
        printf("%s %ld %d\n", line, total, port(nfs));
        fflush(stdout);
    }
    return 0;
}
"#;
    let (src, exe) = (dir.join("hold.c"), dir.join("hold"));
    std::fs::write(&src, PROGRAM).unwrap();
    let mut cc = Command::new("cc");
    cc.arg("-o").arg(&exe).arg(&src).arg("-l:libnfs.so.13");
    let (ok, out, err) = run_async(cc, 60).await;
    assert!(ok, "cc: {out}{err}");
    exe
}

pub(crate) fn nfs_url(port: u16, path: &str) -> String {
    format!("nfs://127.0.0.1{path}?nfsport={port}&mountport={port}&version=3")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_a_pool_and_changes_a_cmdline_while_nbd_and_nfs_clients_hold_their_roots() {
    let fx = Fixture::new();
    let (ok, _, err) = run(
        cmd("cp", &["-a", "images/demo", "images/demo2"]).current_dir(fx.path()),
        30,
    );
    assert!(ok, "{err}");
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);
    let (status, text) = script(&base, NBD_MAC).await;
    assert_eq!(status, "200", "{text}");
    assert!(!text.contains("quiet"), "{text}");
    assert_eq!(script(&base, LAB_MAC).await.0, "404");

    // An NBD client attached (qemu-io, one connection, no reconnection) that has read.
    let uri = format!("nbd://127.0.0.1:{}/demo", daemon.bound.nbd.port());
    let mut nbd = Held::start(
        &mut cmd("qemu-io", &["-f", "raw", "-r", &uri]),
        fx.path(),
        "nbd",
    );
    nbd.say("read 0 64k");
    let reads = poll_async(
        Duration::from_secs(30),
        Duration::from_millis(50),
        || async { daemon.metrics.nbd().reads.get() },
        |n| *n >= 1,
    )
    .await;
    assert!(reads >= 1, "qemu-io read nothing: {}", nbd.output());
    // An NFS mount (libnfs) that has read a file.
    let exe = nfs_holder(fx.path()).await;
    let url = nfs_url(daemon.bound.nfs.port(), "/demo");
    let mut nfs = Held::start(Command::new(&exe).arg(&url), fx.path(), "nfs");
    nfs.say("/etc/hostname");
    let out = nfs.lines("/etc/hostname ", 1).await;
    assert!(out.contains("/etc/hostname 5 "), "{out}");

    fx.write_config(&changed(&fx, true));
    let served = daemon.reload().expect("the reload applied");
    assert_eq!(served.generation, 2);
    // The new cap on NBD connections per client holds a second one off (qemu-io holds one).
    let (ok, _, err) = run_async(cmd("nbdinfo", &["--size", &uri]), 30).await;
    assert!(
        !ok,
        "a second connection was let in past limits.nbd_per_client: {err}"
    );

    // Both clients go on over the connections they held.
    nbd.say("read 1M 64k");
    nfs.say("/usr/lib/lib3.so");
    let (ok, out, err) = nbd.finish();
    assert!(ok, "qemu-io: {out}{err}");
    for offset in [0, 1 << 20] {
        let done = format!("read 65536/65536 bytes at offset {offset}");
        assert!(out.contains(&done), "{out}{err}");
    }
    assert_eq!(daemon.metrics.nbd().connections.get(), 1, "{out}");
    let (ok, out, err) = nfs.finish();
    assert!(ok, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(
        lines[2],
        format!("/usr/lib/lib3.so {} ", 1000 + 3 * 517) + port_of(lines[0])
    );
    assert!(
        lines.iter().all(|l| port_of(l) == port_of(lines[0])),
        "{out}"
    );

    // The next boot gets the new cmdline; the new pool's client its script and its root.
    let (status, text) = script(&base, NBD_MAC).await;
    assert_eq!(status, "200", "{text}");
    assert!(text.contains("console=ttyS0 quiet"), "{text}");
    let (status, text) = script(&base, LAB_MAC).await;
    assert_eq!(status, "200", "{text}");
    assert!(text.contains("/demo2"), "{text}");
    let hostname = nfs_url(daemon.bound.nfs.port(), "/demo2/etc/hostname");
    let (ok, out, err) = run_async(cmd("nfs-cat", &[&hostname]), 60).await;
    assert!(ok, "{err}");
    assert_eq!(out, "demo\n");

    let text = metrics(&base).await;
    assert!(
        text.contains("bootpool_config_reloads_total{result=\"applied\"} 1\n"),
        "{text}"
    );
    let generation = format!(
        "bootpool_config_generation{{digest=\"{}\"}} 2\n",
        served.digest
    );
    assert!(text.contains(&generation), "{text}");
    let (ok, out, err) = run_async(
        cmd(
            "curl",
            &["-sS", "--max-time", "20", &format!("{base}/api/v1/config")],
        ),
        30,
    )
    .await;
    assert!(ok, "{err}");
    let said: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(said["generation"], 2, "{out}");
    assert_eq!(said["digest"], served.digest.as_str(), "{out}");
    daemon.stop().await;
}

/// The last word of a line of the NFS client: its port.
pub(crate) fn port_of(line: &str) -> &str {
    line.rsplit(' ').next().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_reload_is_refused_whole_and_the_old_config_keeps_serving() {
    let fx = Fixture::new();
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);
    let file = fx.config_path().display().to_string();

    // A syntax error: refused, naming the file and line.
    let broken = changed(&fx, false).replace("cmdline: console=ttyS0 quiet", "cmdline: \"quiet");
    fx.write_config(&broken);
    let e = daemon.reload().expect_err("a syntax error").to_string();
    let at = e
        .strip_prefix(&format!("{file}:"))
        .unwrap_or_else(|| panic!("{e}"));
    assert!(at.starts_with(|c: char| c.is_ascii_digit()), "{e}");

    // A changed listening address beside a changed cmdline: refused whole, naming the key.
    let moved = changed(&fx, false).replace("http: 127.0.0.1:0", "http: 127.0.0.1:1");
    fx.write_config(&moved);
    let e = daemon
        .reload()
        .expect_err("a changed listening address")
        .to_string();
    assert!(
        e.starts_with(&format!("{file}:3:"))
            && e.contains("server.http: cannot change while bootpool runs"),
        "{e}"
    );

    // The old config serves on.
    let (status, text) = script(&base, NBD_MAC).await;
    assert_eq!(status, "200", "{text}");
    assert!(!text.contains("quiet"), "{text}");
    assert_eq!(daemon.config.served().generation, 1);
    let text = metrics(&base).await;
    assert!(
        text.contains("bootpool_config_reloads_total{result=\"refused\"} 2\n"),
        "{text}"
    );
    assert!(
        text.contains("bootpool_config_reloads_total{result=\"applied\"} 0\n"),
        "{text}"
    );
    daemon.stop().await;
}

/// `bootpool reload` against `bootpool serve`: SIGHUP to the PID in the state folder's lock,
/// the daemon's answer read back, and the daemon still serving whatever the answer.
#[test]
fn bootpool_reload_signals_the_serving_daemon_and_reports_its_answer() {
    let fx = Fixture::new();
    let log_path = fx.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let bin = env!("CARGO_BIN_EXE_bootpool");
    let mut serve = Command::new(bin)
        .args(["serve", "--config"])
        .arg(fx.config_path())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let status = fx.path().join("var").join(bootpool::app::RELOAD_STATUS);
    let started =
        crate::common::poll_until(Duration::from_secs(30), Duration::from_millis(100), || {
            status.exists()
        });
    let reload = || {
        let mut c = Command::new(bin);
        c.args(["reload", "--config"]).arg(fx.config_path());
        c
    };
    let outcome = std::panic::catch_unwind(|| {
        assert!(started, "{}", std::fs::read_to_string(&log_path).unwrap());
        fx.write_config(&changed(&fx, false));
        let (ok, out, err) = run(&mut reload(), 60);
        assert!(ok, "{out}{err}");
        assert!(out.contains("generation 2"), "{out}");

        // A syntax error never reaches the daemon (exit status 2).
        fx.write_config("server: [\n");
        let out = reload().output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");

        // A changed listening address: the daemon refuses it and says why (exit status 1).
        fx.write_config(&changed(&fx, false).replace("http: 127.0.0.1:0", "http: 127.0.0.1:1"));
        let (ok, out, err) = run(&mut reload(), 60);
        assert!(!ok, "{out}");
        assert!(err.contains("refused the config"), "{err}");
        assert!(
            err.contains("server.http: cannot change while bootpool runs"),
            "{err}"
        );
    });
    let running = serve.try_wait().unwrap().is_none();
    crate::common::run(&mut cmd("kill", &["-TERM", &serve.id().to_string()]), 10);
    let stopped = serve.wait().unwrap();
    let logged = std::fs::read_to_string(&log_path).unwrap();
    if let Err(panic) = outcome {
        eprintln!("{logged}");
        std::panic::resume_unwind(panic);
    }
    assert!(running, "the daemon ended: {logged}");
    assert!(stopped.success(), "{logged}");
    assert!(logged.contains("config reloaded"), "{logged}");
    assert!(
        logged.contains("config reload refused; the running config stays"),
        "{logged}"
    );
}

/// A reload that moves the DHCP range and gives a client a fixed address, against the binary
/// on a veth (DHCP needs a real broadcast link): ISC dhclient's client keeps the address it
/// holds, which the new range leaves out (its INIT-REBOOT is granted), while busybox udhcpc
/// gets a newcomer an address of the new range and the new fixed client its address.
#[test]
fn a_reloaded_dhcp_range_applies_to_new_leases_and_keeps_the_ones_held() {
    use crate::common::netns::{Daemon, Link};
    use std::net::Ipv4Addr;
    let link = Link::new("10.77.3.1/24");
    let fx = Fixture::new();
    let config = fx
        .loopback()
        .on_veth("10.77.3", &link.server_if)
        .http("10.77.3.1:0");
    fx.write_config(&config);
    let daemon = Daemon::start(&link, &fx, 1);
    let dhclient = |mac: &str| {
        link.set_client_mac(mac);
        let dir = fx.path().join(format!("dhclient-{}", mac.replace(':', "")));
        // Its lease file stays (a second run asks for that address again); the line of an
        // earlier run goes.
        let _ = std::fs::remove_file(dir.join("script.out"));
        let conf = "timeout 10;\nretry 1;\ninitial-interval 1;\n";
        // A fresh lease is BOUND, the lease file's address granted again REBOOT.
        let script = "case $reason in BOUND|REBOOT) echo \"done $new_ip_address\" >> $OUT;; esac";
        let line = link
            .dhclient(&dir, &[], conf, script, "done ")
            .unwrap_or_else(|log| panic!("dhclient got no lease:\n{log}"));
        line.split(' ').nth(1).unwrap().parse::<Ipv4Addr>().unwrap()
    };
    let udhcpc = |mac: &str| -> Ipv4Addr {
        let fields = link.udhcpc(fx.path(), mac, false).expect("a lease");
        fields[1].parse().unwrap()
    };
    let within = |ip: Ipv4Addr, first: u8, last: u8| (first..=last).contains(&ip.octets()[3]);

    let held = dhclient("52:54:00:77:00:03");
    assert!(within(held, 100, 150), "{held}");
    let moved = config.range("10.77.3.160-10.77.3.170").clients(
        "nbd-room",
        "- { mac: \"52:54:00:77:00:12\", ip: 10.77.3.20 }",
    );
    fx.write_config(&moved);
    let (ok, out, err) = run(
        Command::new(env!("CARGO_BIN_EXE_bootpool"))
            .args(["reload", "--config"])
            .arg(fx.config_path()),
        60,
    );
    assert!(ok, "{out}{err}\n{}", daemon.log_text());

    assert_eq!(dhclient("52:54:00:77:00:03"), held);
    let fresh = udhcpc("52:54:00:77:00:04");
    assert!(within(fresh, 160, 170), "{fresh}");
    assert_eq!(udhcpc("52:54:00:77:00:12"), Ipv4Addr::new(10, 77, 3, 20));
    let log = daemon.log_text();
    assert!(log.contains("config reloaded"), "{log}");
    drop(daemon);
}

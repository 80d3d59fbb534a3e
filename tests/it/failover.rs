//! Failover with real keepalived (issue 47 parts 1 and 3, docs/failover.md): two `bootpool
//! serve`, members `a` and `b`, each in a namespace of its own on one bridge with a real
//! PostgreSQL, each running keepalived with the file `bootpool site keepalived` wrote for it;
//! clients on the bridge hold an NFS and an NBD connection to a's address. Then a's host dies
//! (its link goes down, its bootpool and keepalived are killed with -9): b's keepalived takes
//! a's address, the clients' old connections are reset by b's tickle ACKs (a reset, not a
//! timeout: the clients are idle and would wait for ever), a new NFS connection to the address
//! is served by b with the file handle the client got from a, resolving to the same bytes
//! (handles by content), and DHCP for a's clients is answered by b. Outcomes only; the times
//! are printed.

use crate::common::nbd_raw::Raw;
use crate::common::postgres::Postgres;
use crate::common::rpc::Rpc;
use crate::common::{Fixture, Loopback, pattern, run};
use bootpool::site::hash::bucket;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NET: &str = "10.78.0";
/// The client's addresses on the bridge: an NFS client and an NBD client.
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 100);
const NBD_CLIENT: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 101);
const NFS: u16 = 2049;
const NBD: u16 = 10809;

fn ip(args: &[&str]) {
    let (ok, _, err) = run(Command::new("ip").args(args), 30);
    assert!(ok, "ip {}: {err}", args.join(" "));
}

fn exec(ns: &str, args: &[&str]) {
    ip(&[&["netns", "exec", ns][..], args].concat());
}

fn in_ns(ns: &str, program: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program]).args(args);
    c
}

/// Whether namespace `ns` holds `address`.
fn holds(ns: &str, address: &str) -> bool {
    let (_, out, _) = run(&mut in_ns(ns, "ip", &["-4", "-o", "addr", "show"]), 10);
    out.contains(&format!(" {address}/"))
}

fn poll(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("never came true: {what}");
}

/// The room: a bridge in the client's namespace and a namespace per member on it.
struct Room {
    ns: String,
    bridge: String,
    /// (namespace, interface) of each member.
    members: Vec<(String, String)>,
}

impl Room {
    fn new() -> Room {
        let tag = std::process::id() % 100_000;
        let mut room = Room {
            ns: format!("bp-fo{tag}"),
            bridge: format!("bfo{tag}"),
            members: Vec::new(),
        };
        ip(&["netns", "add", &room.ns]);
        exec(
            &room.ns,
            &["ip", "link", "add", &room.bridge, "type", "bridge"],
        );
        exec(&room.ns, &["ip", "link", "set", &room.bridge, "up"]);
        exec(&room.ns, &["ip", "link", "set", "lo", "up"]);
        for ip in [CLIENT, NBD_CLIENT] {
            let cidr = format!("{ip}/16");
            exec(&room.ns, &["ip", "addr", "add", &cidr, "dev", &room.bridge]);
        }
        for k in 1..=2 {
            let (ns, dev, port) = (
                format!("bp-fo{tag}m{k}"),
                format!("fm{tag}x{k}"),
                format!("fp{tag}x{k}"),
            );
            ip(&["netns", "add", &ns]);
            room.members.push((ns.clone(), dev.clone()));
            ip(&[
                "link", "add", &dev, "netns", &ns, "type", "veth", "peer", "name", &port, "netns",
                &room.ns,
            ]);
            exec(
                &room.ns,
                &["ip", "link", "set", &port, "master", &room.bridge],
            );
            exec(&room.ns, &["ip", "link", "set", &port, "up"]);
            // The host's own fixed address (.11, .12); the member's address (.1, .2) is the
            // one keepalived moves.
            let own = format!("{NET}.1{k}/16");
            exec(&ns, &["ip", "addr", "add", &own, "dev", &dev]);
            exec(&ns, &["ip", "link", "set", &dev, "up"]);
            exec(&ns, &["ip", "link", "set", "lo", "up"]);
        }
        room
    }

    /// busybox udhcpc on the bridge as `mac`: the server that bound it (its identifier).
    fn udhcpc(&self, dir: &std::path::Path, mac: &str) -> Option<String> {
        exec(
            &self.ns,
            &["ip", "link", "set", &self.bridge, "address", mac],
        );
        let out = dir.join("udhcpc.out");
        let script = dir.join("udhcpc.sh");
        std::fs::write(
            &script,
            format!("#!/bin/sh\necho \"$1 $serverid\" >> {}\n", out.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let args = [
            "udhcpc",
            "-i",
            &self.bridge,
            "-f",
            "-q",
            "-n",
            "-t",
            "10",
            "-T",
            "1",
        ];
        let script = script.to_str().unwrap().to_string();
        run(
            &mut in_ns(&self.ns, "busybox", &[&args[..], &["-s", &script]].concat()),
            60,
        );
        let said = std::fs::read_to_string(&out).unwrap_or_default();
        said.lines()
            .find_map(|l| Some(l.strip_prefix("bound ")?.trim().to_string()))
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        for ns in self.members.iter().map(|(ns, _)| ns).chain([&self.ns]) {
            let _ = run(Command::new("ip").args(["netns", "del", ns]), 10);
        }
    }
}

/// A process group the test started, killed with -9 when dropped.
struct Group(Option<Child>);

impl Group {
    fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = bootpool::sys::process::kill(-(c.id() as i32), libc::SIGKILL);
            let _ = c.wait();
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A member: its `bootpool serve` and its keepalived.
struct Member {
    name: &'static str,
    ns: String,
    dev: String,
    fx: Fixture,
    serve: Group,
    keepalived: Group,
}

impl Member {
    /// Member `k` (1: `a`, 2: `b`): its address `NET.k` (held by hand until its keepalived
    /// runs), its own range, the site's database, fixed NFS and NBD ports (a client comes
    /// back to the same port on the survivor).
    fn new(room: &Room, k: usize, database: &str) -> Member {
        let (ns, dev) = room.members[k - 1].clone();
        let fx = Fixture::new();
        let config = Loopback::default()
            .on_veth(NET, &dev)
            .network("10.78.0.0/16")
            .range(&format!("10.78.{k}.0-10.78.{k}.255"))
            .http(&format!("{NET}.1{k}:8080"))
            .port("nfs", NFS)
            .port("nbd", NBD)
            .server(&format!(
                "database: {database}\nadmin_token: failover-test-token"
            ))
            // The NFS and NBD clients at fixed addresses, which every member knows from the
            // config (a dynamic lease is the member's own until leases are shared).
            .clients(
                "nfs-room",
                &format!("- {{ mac: \"52:54:00:79:aa:01\", ip: {CLIENT} }}"),
            )
            .clients(
                "nbd-room",
                &format!(
                    "- {{ macs: \"52:54:00:78:00:00-52:54:00:78:ff:ff\" }}\n\
                     - {{ mac: \"52:54:00:79:aa:02\", ip: {NBD_CLIENT} }}"
                ),
            );
        let text = config.replace(
            &format!("  address: {NET}.1\n"),
            &format!("  address: {NET}.{k}\n"),
        );
        fx.write_config(&text);
        exec(
            &ns,
            &["ip", "addr", "add", &format!("{NET}.{k}/32"), "dev", &dev],
        );
        let mut m = Member {
            name: ["a", "b"][k - 1],
            ns,
            dev,
            fx,
            serve: Group(None),
            keepalived: Group(None),
        };
        m.serve();
        m
    }

    /// Starts this member's `bootpool serve` (its log appended to `serve.log`) and waits
    /// until it serves.
    fn serve(&mut self) {
        let path = self.fx.path().join("serve.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let before = self.log().matches("bootpool serving").count();
        let child = in_ns(
            &self.ns,
            env!("CARGO_BIN_EXE_bootpool"),
            &[
                "serve",
                "--config",
                self.fx.config_path().to_str().unwrap(),
                "--member",
                self.name,
            ],
        )
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("bootpool runs");
        self.serve = Group(Some(child));
        let started = (0..600).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            self.log().matches("bootpool serving").count() > before
        });
        assert!(started, "{}", self.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.fx.path().join("serve.log")).unwrap_or_default()
    }

    fn keepalived_log(&self) -> String {
        std::fs::read_to_string(self.fx.path().join("keepalived.log")).unwrap_or_default()
    }

    /// Writes this member's keepalived.conf with `bootpool site keepalived`, lets go of the
    /// address held by hand and starts keepalived on it.
    fn start_keepalived(&mut self) -> String {
        let (ok, conf, err) = run(
            Command::new(env!("CARGO_BIN_EXE_bootpool")).args([
                "site",
                "keepalived",
                "--config",
                self.fx.config_path().to_str().unwrap(),
                "--member",
                self.name,
                "--interface",
                &self.dev,
            ]),
            30,
        );
        assert!(ok, "bootpool site keepalived: {err}");
        let dir = self.fx.path();
        let path = dir.join("keepalived.conf");
        std::fs::write(&path, &conf).unwrap();
        let k = if self.name == "a" { 1 } else { 2 };
        exec(
            &self.ns,
            &[
                "ip",
                "addr",
                "del",
                &format!("{NET}.{k}/32"),
                "dev",
                &self.dev,
            ],
        );
        self.keepalived();
        conf
    }

    /// Starts keepalived on the keepalived.conf written (its log appended to
    /// `keepalived.log`).
    fn keepalived(&mut self) {
        let dir = self.fx.path();
        let file = |name: &str| dir.join(name).to_str().unwrap().to_string();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("keepalived.log"))
            .unwrap();
        let child = in_ns(
            &self.ns,
            "keepalived",
            &[
                "--dont-fork",
                "--log-console",
                "--log-detail",
                "--vrrp",
                "--use-file",
                &file("keepalived.conf"),
                "--pid",
                &file("keepalived.pid"),
                "--vrrp_pid",
                &file("vrrp.pid"),
                "--checkers_pid",
                &file("checkers.pid"),
            ],
        )
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("keepalived runs (scripts/setup installs it)");
        self.keepalived = Group(Some(child));
    }

    /// The member's host comes back after its death, rebooted: its link up, its keepalived (which takes its
    /// address back from the survivor: it is the address's MASTER at a higher priority), then,
    /// once the address is held, its `bootpool serve`, whose takeover keepalived's notify
    /// asked for meanwhile (retried while the daemon starts).
    /// Returns when it held its address again and when its daemon served.
    fn come_back(&mut self, address: &str) -> (Instant, Instant) {
        // A host that rebooted holds none of the addresses keepalived gave it (one killed
        // with -9 may leave its address on the link, if the link's going down did not have it
        // let go first: with the link up, two hosts would answer for one address).
        let vip = format!("{address}/32");
        let _ = run(
            &mut in_ns(&self.ns, "ip", &["addr", "del", &vip, "dev", &self.dev]),
            10,
        );
        exec(&self.ns, &["ip", "link", "set", &self.dev, "up"]);
        self.keepalived();
        // Held for a second on end: a keepalived just started may take its address and give
        // it up again a moment later (seen once, on a loaded machine: the daemon started
        // after it then found the address gone and refused to serve).
        let mut since: Option<Instant> = None;
        poll(
            "the member holds its address again, for 1 s on end",
            60,
            || {
                since = holds(&self.ns, address).then(|| since.unwrap_or_else(Instant::now));
                since.is_some_and(|t| t.elapsed() >= Duration::from_secs(1))
            },
        );
        let held = since.expect("held");
        self.serve();
        (held, Instant::now())
    }

    /// The boot of `mac` this member's API has last (curl in its namespace, to its own
    /// fixed address's HTTP).
    fn boot_of(&self, mac: &str) -> serde_json::Value {
        let k = if self.name == "a" { 1 } else { 2 };
        let url = format!("http://{NET}.1{k}:8080/api/v1/boots?mac={mac}");
        let (_, out, _) = run(
            &mut in_ns(&self.ns, "curl", &["-sS", "--max-time", "5", &url]),
            10,
        );
        serde_json::from_str::<serde_json::Value>(&out)
            .ok()
            .and_then(|v| v.as_array()?.last().cloned())
            .unwrap_or_default()
    }
}

/// The members that served `phase` of `boot` (the API's `served`), in turn.
fn served(boot: &serde_json::Value, phase: &str) -> Vec<String> {
    boot["served"]
        .as_array()
        .and_then(|s| s.iter().find(|p| p["phase"] == phase))
        .and_then(|p| p["by"].as_array())
        .map(|by| {
            by.iter()
                .filter_map(|t| Some(t["member"].as_str()?.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// A MAC of the room that RFC 3074's split gives `a` while both members live.
fn mac_of_a() -> String {
    (0..=255u8)
        .map(|i| format!("52:54:00:78:01:{i:02x}"))
        .find(|m| {
            let bytes: Vec<u8> = m
                .split(':')
                .map(|h| u8::from_str_radix(h, 16).unwrap())
                .collect();
            bucket(&bytes).is_multiple_of(2)
        })
        .unwrap()
}

/// How an idle connection ended: a reset (`ConnectionReset`), another error's kind,
/// `closed`, or no word within 120 s.
async fn ended(s: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut byte = [0u8; 1];
    match tokio::time::timeout(Duration::from_secs(120), s.read(&mut byte)).await {
        Err(_) => "no word in 120 s".to_string(),
        Ok(Ok(_)) => "closed".to_string(),
        Ok(Err(e)) => format!("{:?}", e.kind()),
    }
}

/// What the client thread reports back.
enum Said {
    /// Mounted and read through a's address: the file's bytes.
    Read(Vec<u8>),
    /// The old connections ended: how (the error's kind, or "closed"), NFS's then NBD's,
    /// and when the last did.
    Ended(String, String, Instant),
    /// A new connection read the file with the old handle: its bytes, and when.
    ReadAgain(Result<Vec<u8>, u32>, Instant),
    /// That connection (to the survivor) ended once the owner came back: how, and when.
    EndedAgain(String, Instant),
    /// A connection made after that read the file: its bytes.
    ReadBack(Result<Vec<u8>, u32>),
}

/// The NFS client's MAC (its fixed address `CLIENT` in the config).
const CLIENT_MAC: &str = "52:54:00:79:aa:01";

#[test]
fn a_dead_members_address_moves_to_the_survivor_which_resets_its_clients_and_serves_them() {
    let pg = Postgres::start();
    let room = Room::new();
    let mut a = Member::new(&room, 1, &pg.socket_url());
    let mut b = Member::new(&room, 2, &pg.socket_url());
    let conf = a.start_keepalived();
    assert_eq!(conf.matches("vrrp_instance").count(), 2, "{conf}");
    b.start_keepalived();
    let (va, vb) = (format!("{NET}.1"), format!("{NET}.2"));
    poll("each member holds its own address alone", 30, || {
        holds(&a.ns, &va) && holds(&b.ns, &vb) && !holds(&a.ns, &vb) && !holds(&b.ns, &va)
    });

    // The NFS client asks DHCP first (its fixed address), so the record ties its root's
    // events to it; a has its boot (b's rows are followed) before it mounts.
    let first = tempfile::tempdir().unwrap();
    assert!(
        room.udhcpc(first.path(), CLIENT_MAC).is_some(),
        "a lease for the NFS client"
    );
    poll("a has the NFS client's boot", 30, || {
        a.boot_of(CLIENT_MAC)["ip"] == CLIENT.to_string().as_str()
    });

    // The client mounts through a's address and reads a file, then holds the connection idle.
    let (to_test, said) = std::sync::mpsc::channel::<Said>();
    let (go, gone) = std::sync::mpsc::channel::<()>();
    let (come_back, came_back) = std::sync::mpsc::channel::<()>();
    let client_ns = room.ns.clone();
    let client = std::thread::spawn(move || {
        crate::common::netns::Link::within(&client_ns, move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let at = SocketAddr::from((Ipv4Addr::new(10, 78, 0, 1), NFS));
                let mut rpc = Rpc::connect_from(CLIENT, at).await;
                let root = rpc.mount("/demo").await;
                let usr = rpc.lookup(&root, "usr").await;
                let lib = rpc.lookup(&usr, "lib").await;
                let so = rpc.lookup(&lib, "lib3.so").await;
                let (data, _) = rpc.read(&so, 1 << 20).await.unwrap();
                // And an NBD client attached to the demo's block root through a's address.
                let nbd_at = SocketAddr::from((Ipv4Addr::new(10, 78, 0, 1), NBD));
                let mut nbd = Raw::connect_from(nbd_at, NBD_CLIENT).await;
                assert!(nbd.go("demo").await.is_ok(), "NBD attached through a");
                to_test.send(Said::Read(data)).unwrap();
                gone.recv().unwrap();
                // Idle: nothing is sent; only a reset (or a close) ends these waits.
                let (nfs, nbd) = tokio::join!(ended(&mut rpc.stream), ended(&mut nbd.s));
                to_test.send(Said::Ended(nfs, nbd, Instant::now())).unwrap();
                let mut again = Rpc::connect_from(CLIENT, at).await;
                let read = again.read(&so, 1 << 20).await.map(|(d, _)| d);
                to_test.send(Said::ReadAgain(read, Instant::now())).unwrap();
                // Idle on the survivor until the owner is back: its tickle resets this one.
                came_back.recv().unwrap();
                let how = ended(&mut again.stream).await;
                to_test.send(Said::EndedAgain(how, Instant::now())).unwrap();
                let mut back = Rpc::connect_from(CLIENT, at).await;
                let read = back.read(&so, 1 << 20).await.map(|(d, _)| d);
                // Closed: the owner's record of the reads is written at the connection's end.
                drop(back);
                to_test.send(Said::ReadBack(read)).unwrap();
            })
        })
    });
    let want = pattern(103, 1000 + 3 * 517);
    match said.recv_timeout(Duration::from_secs(60)) {
        Ok(Said::Read(data)) => assert!(data == want, "a served the file's bytes"),
        _ => panic!("the client read nothing through a\n{}", a.log()),
    }
    // a records the connection (written behind, within a flush).
    let rows = "SELECT count(*) FROM site_connections WHERE member = 'a' \
        AND server_ip = '10.78.0.1' AND (server_port, client_ip) IN \
        ((2049, '10.78.0.100'), (10809, '10.78.0.101'))";
    poll("a's connections in site_connections", 30, || {
        pg.query(rows) == "2"
    });
    // And its record of the NFS client's root reads, as b reads it from the database.
    poll("b's record: the NFS client's root served by a", 30, || {
        served(&b.boot_of(CLIENT_MAC), "root") == ["a"]
    });

    // a's host dies: its link goes (no FIN, no reset leaves it), its processes are killed.
    let died = Instant::now();
    exec(&a.ns, &["ip", "link", "set", &a.dev, "down"]);
    a.keepalived.kill();
    a.serve.kill();
    go.send(()).unwrap();
    poll("b holds a's address", 30, || holds(&b.ns, &va));
    let moved = died.elapsed();
    let (nfs, nbd, reset_at) = match said.recv_timeout(Duration::from_secs(150)) {
        Ok(Said::Ended(nfs, nbd, at)) => (nfs, nbd, at),
        _ => panic!("the client's connections never ended\n{}", b.log()),
    };
    assert_eq!(
        (nfs.as_str(), nbd.as_str()),
        ("ConnectionReset", "ConnectionReset"),
        "the client's old NFS and NBD connections were reset by b's tickles\nb:\n{}\n\
         keepalived:\n{}",
        b.log(),
        b.keepalived_log()
    );
    let (read, served_at) = match said.recv_timeout(Duration::from_secs(120)) {
        Ok(Said::ReadAgain(read, at)) => (read, at),
        _ => panic!("no new connection's answer\n{}", b.log()),
    };
    assert!(
        read.as_ref().is_ok_and(|d| *d == want),
        "b serves a's handle with the same bytes: {:?}",
        read.map(|d| d.len())
    );
    // The last takeover of a's address (b may have held it a moment while a's keepalived
    // started).
    poll("b logs the takeover", 30, || b.log().lines().any(said_of));
    let log = b.log();
    let line = log
        .lines()
        .rfind(|l| said_of(l))
        .unwrap_or_else(|| panic!("b says nothing of the takeover:\n{log}"));
    assert!(line.contains("connections=2 tickled=2"), "{line}");
    // The tickled connections are forgotten.
    poll("the dead connection's row gone", 30, || {
        pg.query(rows) == "0"
    });
    // The daemon takes no address that is no member's (the notify's command says why).
    let (ok, _, err) = run(
        &mut in_ns(
            &b.ns,
            env!("CARGO_BIN_EXE_bootpool"),
            &[
                "site",
                "takeover",
                "--config",
                b.fx.config_path().to_str().unwrap(),
                "10.78.9.9",
            ],
        ),
        30,
    );
    assert!(!ok && err.contains("no member's address"), "{err}");
    let dhcp_from = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let server = room.udhcpc(dir.path(), &mac_of_a());
    assert_eq!(server.as_deref(), Some("10.78.0.2"), "b answers a's client");
    let dhcp_s = dhcp_from.elapsed().as_secs_f64();
    // The bridge is the NFS client's again (udhcpc gave it a's client's MAC).
    exec(
        &room.ns,
        &["ip", "link", "set", &room.bridge, "address", CLIENT_MAC],
    );

    // The owner comes back (docs/failover.md, "The owner coming back"): its keepalived takes
    // its address back from b, its daemon tickles b's connection to it, and the client's
    // connection moves back to a, which reads it the file with the same handle.
    come_back.send(()).unwrap();
    let back_from = Instant::now();
    let (held_again, serving_again) = a.come_back(&va);
    let logs = |a: &Member, b: &Member| {
        format!(
            "a:\n{}\na's keepalived:\n{}\nb:\n{}\nb's keepalived:\n{}",
            a.log(),
            a.keepalived_log(),
            b.log(),
            b.keepalived_log()
        )
    };
    let (how, reset_again) = match said.recv_timeout(Duration::from_secs(150)) {
        Ok(Said::EndedAgain(how, at)) => (how, at),
        _ => panic!("the client's connection to b never ended\n{}", logs(&a, &b)),
    };
    assert_eq!(
        how,
        "ConnectionReset",
        "the client's connection to b was reset by a's tickle\n{}",
        logs(&a, &b)
    );
    assert!(
        holds(&a.ns, &va) && !holds(&b.ns, &va),
        "a alone holds its address"
    );
    match said.recv_timeout(Duration::from_secs(120)) {
        Ok(Said::ReadBack(read)) => assert!(
            read.as_ref().is_ok_and(|d| *d == want),
            "a serves the same handle again: {:?}",
            read.map(|d| d.len())
        ),
        _ => panic!("no answer from a once back\n{}", logs(&a, &b)),
    }
    client.join().unwrap();
    poll("a logs its address taken back", 30, || {
        a.log()
            .lines()
            .any(|l| said_of(l) && l.contains("connections=1 tickled=1"))
    });

    // The record says who served the NFS client's root: a, then b from the takeover, then a
    // again; on both members' APIs.
    for m in [&a, &b] {
        let mut boot = serde_json::Value::Null;
        let told = (0..150).any(|_| {
            boot = m.boot_of(CLIENT_MAC);
            let yes = served(&boot, "root") == ["a", "b", "a"];
            if !yes {
                std::thread::sleep(Duration::from_millis(200));
            }
            yes
        });
        assert!(told, "{}'s record of the root's servers: {boot}", m.name);
    }
    eprintln!(
        "failover: a's address on b {:.2} s after a's death; the clients' connections reset at \
         {:.2} s, NFS served again by b at {:.2} s; a's client bound by b {:.2} s after asking; \
         a back: its address held again {:.2} s after its link came up, its daemon serving at \
         {:.2} s, the client's connection to b reset at {:.2} s",
        moved.as_secs_f64(),
        (reset_at - died).as_secs_f64(),
        (served_at - died).as_secs_f64(),
        dhcp_s,
        (held_again - back_from).as_secs_f64(),
        (serving_again - back_from).as_secs_f64(),
        (reset_again - back_from).as_secs_f64()
    );
}

/// A line of a member's log that says it took an address over: a's own, `NET.1`.
fn said_of(line: &str) -> bool {
    line.contains("address=10.78.0.1 ") && line.contains("tickled=")
}

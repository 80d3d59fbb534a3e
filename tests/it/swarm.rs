//! The room's swarm (docs/swarm.md, "Peers and the tracker", issue 48): real `bootpool serve`
//! in a namespace of its own, and a room of client namespaces on one bridge, each holding a
//! pool's fixed address, each running the static `bootpool-agent` (what the addition carries)
//! with `--peers`, and libnbd's nbdcopy reading the root through it. Every copy is checked
//! against the image; the server's `bootpool_chunks_sent_total` is printed and bounded; a peer
//! that sends bad chunks (a small HTTP server of this test's, registered with the tracker as
//! holding every chunk) is caught by the manifest and named no more; a peer switched off in the
//! middle of serving (killed with -9, its link down) costs the others a retry, and they
//! complete; a pool without `nbd.peers` has the tracker answer 404 and the agent read from the
//! server alone.

use crate::common::netns::{Daemon, Link};
use crate::common::{Fixture, pattern, run, static_agent};
use bootpool::image::blocks;
use bootpool::image::blocks_file;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const NET: &str = "10.77.48";
/// The fixture's root image: `pattern(3, 16 MiB)`, 64 chunks of 256 KiB.
const IMAGE_LEN: usize = 16 << 20;

/// The address and MAC of the room's client `k` (the nbd-room pool's MACs ..:10 to ..:1f).
fn client(k: usize) -> (String, String) {
    (
        format!("{NET}.{}", 20 + k),
        format!("52:54:00:77:00:{:02x}", 0x10 + k),
    )
}

/// A server namespace and a room: a bridge in the link's client namespace, and a namespace per
/// client on it, with its pool's fixed address and MAC. Dropped: every namespace deleted.
struct Room {
    link: Link,
    tag: String,
    clients: Vec<String>,
}

impl Room {
    fn new(n: usize) -> Room {
        let link = Link::new(&format!("{NET}.1/24"));
        link.in_client(&["ip", "link", "add", "br0", "type", "bridge"]);
        link.in_client(&["ip", "link", "set", &link.client_if, "master", "br0"]);
        link.in_client(&["ip", "link", "set", "br0", "up"]);
        let tag = link.client_ns.trim_start_matches("bp-c").to_string();
        let mut room = Room {
            link,
            tag,
            clients: Vec::new(),
        };
        for k in 0..n {
            room.add(k);
        }
        room
    }

    /// Client `k`'s namespace, made.
    fn add(&mut self, k: usize) {
        let (ip, mac) = client(k);
        let ns = format!("bp-w{}x{k}", self.tag);
        let (port, inside) = (format!("bw{}x{k}", self.tag), format!("bv{}x{k}", self.tag));
        self.clients.push(ns.clone());
        let c = &self.link.client_ns;
        let top = |args: &[&str]| {
            let (ok, _, err) = run(Command::new("ip").args(args), 30);
            assert!(ok, "ip {}: {err}", args.join(" "));
        };
        top(&["netns", "add", &ns]);
        top(&[
            "link", "add", &port, "netns", c, "type", "veth", "peer", "name", &inside, "netns", &ns,
        ]);
        Link::exec(c, &["ip", "link", "set", &port, "master", "br0"]);
        Link::exec(c, &["ip", "link", "set", &port, "up"]);
        Link::exec(&ns, &["ip", "link", "set", "lo", "up"]);
        Link::exec(&ns, &["ip", "link", "set", &inside, "address", &mac]);
        Link::exec(
            &ns,
            &["ip", "addr", "add", &format!("{ip}/24"), "dev", &inside],
        );
        Link::exec(&ns, &["ip", "link", "set", &inside, "up"]);
    }

    /// Client `k`'s own end of its link.
    fn inside(&self, k: usize) -> String {
        format!("bv{}x{k}", self.tag)
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        for ns in &self.clients {
            let _ = Command::new("ip")
                .args(["netns", "delete", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The server's config: the link's network, HTTP on port 8080, and the nbd-room pool through
/// the agent (with `nbd_keys` after `via: agent`), its clients `n` fixed addresses.
fn serve(fx: &Fixture, room: &Room, n: usize, nbd_keys: &str) -> (Daemon, String) {
    let clients: String = (0..n)
        .map(|k| {
            let (ip, mac) = client(k);
            format!("- {{ mac: \"{mac}\", ip: {ip} }}\n")
        })
        .collect();
    fx.write_config(
        &fx.loopback()
            .on_veth(NET, &room.link.server_if)
            .http("0.0.0.0:8080")
            .server(&format!("agent: {}", static_agent().display()))
            .pool(
                "nbd-room",
                &format!("initramfs: initramfs-tools\nnbd: {{ via: agent{nbd_keys} }}"),
            )
            .clients("nbd-room", &clients),
    );
    let digest = blocks_file::make(&fx.image_dir().join("rootfs.img")).unwrap();
    let daemon = Daemon::start(&room.link, fx, 1);
    let url = format!(
        "http://{NET}.1:8080/boot/demo/blocks/{}",
        blocks::hex(&digest)
    );
    (daemon, url)
}

/// A `bootpool-agent` process in a client's namespace, sharing with its room.
struct Agent {
    child: Child,
    log: PathBuf,
}

impl Agent {
    fn start(ns: &str, url: &str, log: PathBuf) -> Agent {
        let agent = static_agent();
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(&agent)
            .args([
                "--listen",
                "127.0.0.1:10809",
                "--peers",
                "0.0.0.0:10810",
                url,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut a = Agent { child, log };
        let up =
            crate::common::poll_until(Duration::from_secs(30), Duration::from_millis(50), || {
                a.log_text().contains("serving the room's peers")
            });
        if !up {
            let _ = a.child.try_wait();
            panic!("the agent in {ns} did not start:\n{}", a.log_text());
        }
        a
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The line the agent writes once it has fetched ahead every chunk the tracker ordered
    /// (`prefetched N chunks; H chunks held, P from peers, ...`), waited for.
    fn summary(&self) -> String {
        let line = || {
            self.log_text()
                .lines()
                .find(|l| l.contains("prefetched"))
                .map(str::to_string)
        };
        crate::common::poll_until(Duration::from_secs(20), Duration::from_millis(50), || {
            line().is_some()
        });
        line().unwrap_or_else(|| panic!("no summary in:\n{}", self.log_text()))
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // `ip netns exec` execs the agent: this is the agent itself.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nbdcopy of the root through the agent of namespace `ns`, into `out`.
fn copy(ns: &str, out: &Path) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns, "nbdcopy", "nbd://127.0.0.1:10809/root"])
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for every copy and checks each is the image, byte for byte.
fn all_equal_the_image(copies: Vec<(Child, PathBuf)>) {
    let image = pattern(3, IMAGE_LEN);
    for (mut c, out) in copies {
        let mut err = String::new();
        c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(
            c.wait().unwrap().success(),
            "nbdcopy into {}: {err}",
            out.display()
        );
        assert!(
            std::fs::read(&out).unwrap() == image,
            "{} differs from the image",
            out.display()
        );
    }
}

fn chunks() -> u64 {
    (IMAGE_LEN as u64).div_ceil(u64::from(blocks::CHUNK))
}

/// Six agents start together and read the whole root at once: every copy is the image, and
/// the server sends each chunk into the room about once, far fewer than six copies.
#[test]
fn a_room_of_agents_reads_the_root_from_each_other_and_the_server_sends_it_about_once() {
    let sent = room_reads(6);
    // Super-seeding's mark: about one copy into the room; two is a miss merged badly.
    assert!(sent <= 2 * chunks(), "{sent} chunks: over two copies");
}

/// Rooms of 10 and of 40 agents, as the six above: the server's chunks against the one-copy
/// floor, beside unicast's N copies. Slow (40 namespaces, 40 copies): `--ignored`.
#[test]
#[ignore]
fn rooms_of_10_and_40_agents_take_about_one_copy_from_the_server() {
    for n in [10, 40] {
        let sent = room_reads(n);
        println!(
            "row: {n} clients, server sent {sent} chunks, one-copy floor {}, unicast {}",
            chunks(),
            n as u64 * chunks()
        );
    }
}

/// `n` agents start together and each reads the whole root through nbdcopy: every copy is the
/// image, no peer's chunk was refused, and the server sent fewer than `n` copies; the chunks
/// it sent, printed with the tracker's answers.
fn room_reads(n: usize) -> u64 {
    let fx = Fixture::new();
    let room = Room::new(n);
    let (_daemon, url) = serve(&fx, &room, n, ", peers: true");
    let agents: Vec<Agent> = (0..n)
        .map(|k| {
            Agent::start(
                &room.clients[k],
                &url,
                fx.path().join(format!("agent{k}.log")),
            )
        })
        .collect();
    let copies = (0..n)
        .map(|k| {
            let out = fx.path().join(format!("copy{k}"));
            (copy(&room.clients[k], &out), out)
        })
        .collect();
    all_equal_the_image(copies);
    let http = format!("{NET}.1:8080");
    let sent = room.link.metric(&http, "bootpool_chunks_sent_total");
    let to = |s: &str| {
        room.link.metric(
            &http,
            &format!("bootpool_tracker_answers_total{{to=\"{s}\"}}"),
        )
    };
    let (holders, receiver, server) = (to("holders"), to("receiver"), to("server"));
    println!(
        "{n} agents, {} chunks each: the server sent {sent} chunks ({:.2} copies; unicast: {n}); \
         the tracker named holders {holders} times, the receiver {receiver}, the server {server}",
        chunks(),
        sent as f64 / chunks() as f64
    );
    assert!(
        sent >= chunks(),
        "{sent}: every chunk comes from the server once at least"
    );
    assert!(
        sent < n as u64 * chunks(),
        "{sent} chunks: as many as unicast"
    );
    assert!(holders + receiver > 0, "no chunk was fetched from a peer");
    let logs: Vec<String> = agents.iter().map(Agent::log_text).collect();
    for (a, l) in agents.iter().zip(&logs) {
        let summary = a.summary();
        println!("{summary}");
        assert!(summary.contains("refused 0 from peers"), "{l}");
    }
    sent
}

/// A corrupting peer at a client's address (the storm's rogue's server,
/// `swarm_faults::serve_wrong_chunks`): it answers every chunk with the chunk's length of wrong
/// bytes; the requests it got.
fn corrupting_peer(ns: &str, ip: &str) -> Arc<AtomicU64> {
    let addr = format!("{ip}:10810");
    let listener = Link::within(ns, move || std::net::TcpListener::bind(addr).unwrap());
    let asked = Arc::new(AtomicU64::new(0));
    bootpool_instruments::storm::swarm_faults::serve_wrong_chunks(
        listener,
        blocks::CHUNK as usize,
        asked.clone(),
    );
    asked
}

/// The tracker's answer to a report `body` sent from namespace `ns`.
fn ask_tracker(ns: &str, url: &str, body: &str, dir: &Path) -> String {
    let file = dir.join("report.txt");
    std::fs::write(&file, body).unwrap();
    let data = format!("@{}", file.display());
    let (ok, out, err) = run(
        &mut Link::command(
            ns,
            "curl",
            &[
                "-sS",
                "--fail",
                "--max-time",
                "10",
                "--data-binary",
                &data,
                &format!("{url}/where"),
            ],
        ),
        30,
    );
    assert!(ok, "{err}");
    out
}

/// A peer that claims every chunk and sends wrong bytes: each agent that asks it refuses the
/// chunk by the manifest, asks that peer no more and tells the tracker, which names it to no
/// one after; every copy is still the image.
#[test]
fn a_peer_that_sends_bad_chunks_is_caught_and_never_used_again() {
    const N: usize = 4;
    let fx = Fixture::new();
    let room = Room::new(N + 1);
    let (_daemon, url) = serve(&fx, &room, N + 1, ", peers: true");
    let (bad_ip, _) = client(N);
    let bad_ns = room.clients[N].clone();
    let asked = corrupting_peer(&bad_ns, &bad_ip);
    let all = format!("bootpool-swarm 1\nport 10810\nhave 0-{}\n", chunks() - 1);
    let said = ask_tracker(&bad_ns, &url, &all, fx.path());
    assert!(said.starts_with("bootpool-swarm 1\npeers"), "{said}");
    let agents: Vec<Agent> = (0..N)
        .map(|k| {
            Agent::start(
                &room.clients[k],
                &url,
                fx.path().join(format!("agent{k}.log")),
            )
        })
        .collect();
    let copies = (0..N)
        .map(|k| {
            let out = fx.path().join(format!("copy{k}"));
            (copy(&room.clients[k], &out), out)
        })
        .collect();
    all_equal_the_image(copies);
    let logs: Vec<String> = agents.iter().map(Agent::log_text).collect();
    let caught = logs
        .iter()
        .filter(|l| l.contains(&format!("peer {bad_ip}:10810 sent")))
        .count();
    let asked = asked.load(Ordering::Relaxed);
    println!("the corrupting peer was asked {asked} times; {caught} of {N} agents caught it");
    assert!(asked >= 1, "the tracker never named the corrupting peer");
    assert!(caught >= 1, "{}", logs.join("\n"));
    // Each agent asks it at most for the chunks it fetches at once (the agent's
    // PREFETCH_AT_ONCE, 4) before its first refusal bans it; no byte of it is used.
    const AT_ONCE: usize = 4;
    assert!(asked <= (N * AT_ONCE) as u64, "asked {asked} times");
    for l in &logs {
        assert!(
            l.matches(&format!("peer {bad_ip}:10810 sent")).count() <= AT_ONCE,
            "{l}"
        );
    }
    // The tracker names it no more, though it claims every chunk.
    let want = format!("bootpool-swarm 1\nport 0\nwant 0-{}\n", chunks() - 1);
    let answer = ask_tracker(&room.clients[0], &url, &want, fx.path());
    assert!(!answer.contains(&bad_ip), "{answer}");
    let http = format!("{NET}.1:8080");
    println!(
        "the server sent {} chunks for {N} agents",
        room.link.metric(&http, "bootpool_chunks_sent_total")
    );
}

/// Agent a reads the root first and is then the room's only holder; agents b and c start,
/// a's link paced to 8 Mbit/s so that they are still fetching from it when a is killed with
/// -9 and its link taken down (a machine switched off: no reset, silence). b and c each lose
/// a try to the silence, then fetch from each other and the server: both copies are the image.
#[test]
fn a_peer_switched_off_mid_transfer_costs_a_retry_and_the_others_complete() {
    let fx = Fixture::new();
    let room = Room::new(3);
    let (_daemon, url) = serve(&fx, &room, 3, ", peers: true");
    let a = Agent::start(&room.clients[0], &url, fx.path().join("agent0.log"));
    let first = fx.path().join("copy0");
    all_equal_the_image(vec![(copy(&room.clients[0], &first), first)]);
    let slow = room.inside(0);
    Link::exec(
        &room.clients[0],
        &[
            "tc", "qdisc", "add", "dev", &slow, "root", "tbf", "rate", "40mbit", "burst", "64kb",
            "latency", "100ms",
        ],
    );
    let http = format!("{NET}.1:8080");
    let sent_by_a = || {
        let (ok, text, err) = run(
            &mut Link::command(&room.clients[0], "cat", &["/proc/net/dev"]),
            10,
        );
        assert!(ok, "{err}");
        text.lines()
            .find_map(|l| {
                let (name, rest) = l.split_once(':')?;
                (name.trim() == slow)
                    .then(|| rest.split_whitespace().nth(8)?.parse::<u64>().ok())?
            })
            .unwrap()
    };
    let before = sent_by_a();
    let others: Vec<Agent> = (1..3)
        .map(|k| {
            Agent::start(
                &room.clients[k],
                &url,
                fx.path().join(format!("agent{k}.log")),
            )
        })
        .collect();
    let copies: Vec<(Child, PathBuf)> = (1..3)
        .map(|k| {
            let out = fx.path().join(format!("copy{k}"));
            (copy(&room.clients[k], &out), out)
        })
        .collect();
    // Once a has sent them 1 MiB (four chunks' worth of the 32 MiB they read), a goes.
    let serving =
        crate::common::poll_until(Duration::from_secs(30), Duration::from_millis(50), || {
            sent_by_a() >= before + (1 << 20)
        });
    assert!(serving, "a never served its peers");
    let at_kill = sent_by_a() - before;
    drop(a);
    Link::exec(&room.clients[0], &["ip", "link", "set", &slow, "down"]);
    all_equal_the_image(copies);
    let (a_ip, _) = client(0);
    println!("a had sent {at_kill} bytes to its link when it was switched off");
    assert!(
        at_kill < 2 * IMAGE_LEN as u64,
        "a served them all before it went"
    );
    for o in &others {
        let log = o.log_text();
        println!("{log}");
        assert!(
            log.contains(&format!("peer {a_ip}:10810 did not answer")),
            "{log}"
        );
        let summary = o.summary();
        let from_peers = summary
            .split(" chunks held, ")
            .nth(1)
            .and_then(|s| s.split(' ').next()?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{summary}"));
        assert!(from_peers > 0, "{log}");
    }
    println!(
        "the server sent {} chunks in all (64 to a first)",
        room.link.metric(&http, "bootpool_chunks_sent_total")
    );
}

/// A pool without `nbd.peers`: the tracker answers its clients 404, and an agent started with
/// `--peers` all the same reads every chunk from the server, once, as without a tracker.
#[test]
fn without_peers_in_the_pool_the_tracker_says_so_and_the_agent_reads_from_the_server() {
    let fx = Fixture::new();
    let room = Room::new(2);
    let (_daemon, url) = serve(&fx, &room, 2, "");
    let agents: Vec<Agent> = (0..2)
        .map(|k| {
            Agent::start(
                &room.clients[k],
                &url,
                fx.path().join(format!("agent{k}.log")),
            )
        })
        .collect();
    let copies = (0..2)
        .map(|k| {
            let out = fx.path().join(format!("copy{k}"));
            (copy(&room.clients[k], &out), out)
        })
        .collect();
    all_equal_the_image(copies);
    let http = format!("{NET}.1:8080");
    let sent = room.link.metric(&http, "bootpool_chunks_sent_total");
    assert_eq!(sent, 2 * chunks());
    for a in &agents {
        let log = a.log_text();
        assert!(log.contains("does not share"), "{log}");
    }
    let (ok, out, _) = run(
        &mut Link::command(
            &room.clients[0],
            "curl",
            &[
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--data-binary",
                "x",
                &format!("{url}/where"),
            ],
        ),
        30,
    );
    assert!(ok);
    assert_eq!(out.trim(), "404");
}

/// An agent the addition's hook started, killed by its PID file when dropped.
struct Hooked(PathBuf);

impl Drop for Hooked {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0) {
            let _ = Command::new("kill").args(["-9", pid.trim()]).status();
        }
    }
}

/// The whole chain of a sharing pool's boot up to the root: each client fetches its iPXE
/// script from the server, whose kernel line carries `bootpool.blocks=` and
/// `bootpool.peers=10810`; the addition's hook (`agent.sh`, run by klibc's sh as
/// initramfs-tools' /init runs it) is given that line and starts the static agent serving its
/// peers on 0.0.0.0:10810; nbdcopy reads the root through each, equal to the image, and the
/// server sent fewer than two copies.
#[test]
fn a_sharing_pools_kernel_line_has_the_hook_start_the_agent_serving_its_peers() {
    const N: usize = 2;
    let fx = Fixture::new();
    let room = Room::new(N);
    let (_daemon, _) = serve(&fx, &room, N, ", peers: true");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/overlay/bootpool/agent.sh");
    let mut hooked = Vec::new();
    for k in 0..N {
        let (_, mac) = client(k);
        let url = format!("http://{NET}.1:8080/boot/script/{mac}.ipxe");
        let (ok, text, err) = run(
            &mut Link::command(&room.clients[k], "curl", &["-sS", "--fail", &url]),
            30,
        );
        assert!(ok, "{err}");
        let line = text
            .lines()
            .find(|l| l.starts_with("kernel ") && l.contains("bootpool.blocks="))
            .unwrap_or_else(|| panic!("no kernel line with bootpool.blocks= in:\n{text}"));
        assert!(line.contains(" bootpool.peers=10810"), "{line}");
        let dir = fx.path().join(format!("client{k}"));
        let (bin, run_dir) = (dir.join("addition"), dir.join("run"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(static_agent(), bin.join("@bootpool-agent")).unwrap();
        let cmdline = dir.join("cmdline");
        std::fs::write(&cmdline, line).unwrap();
        hooked.push(Hooked(run_dir.join("bootpool/agent.pid")));
        let mut c = Link::command(
            &room.clients[k],
            "/usr/lib/klibc/bin/sh",
            &["-c", ". \"$1\" && bootpool_agent", "sh"],
        );
        c.arg(&script)
            .env("BOOTPOOL_CMDLINE", &cmdline)
            .env("BOOTPOOL_ADDITION", &bin)
            .env("BOOTPOOL_RUN", &run_dir)
            .env(
                "PATH",
                format!("/usr/lib/klibc/bin:{}", std::env::var("PATH").unwrap()),
            );
        let (ok, out, err) = run(&mut c, 120);
        let log = std::fs::read_to_string(run_dir.join("bootpool/agent.log")).unwrap_or_default();
        assert!(ok, "{out}{err}\nthe agent's log:\n{log}");
        assert!(
            log.contains("serving the room's peers on 0.0.0.0:10810"),
            "{log}"
        );
    }
    let copies = (0..N)
        .map(|k| {
            let out = fx.path().join(format!("copy{k}"));
            (copy(&room.clients[k], &out), out)
        })
        .collect();
    all_equal_the_image(copies);
    let sent = room
        .link
        .metric(&format!("{NET}.1:8080"), "bootpool_chunks_sent_total");
    println!("{N} clients through the hook: the server sent {sent} chunks");
    assert!(sent < N as u64 * chunks(), "{sent}");
    drop(hooked);
}

/// A small HTTP server of this test's, at a client's address, that sends each chunk it is asked
/// for right, but 4 KiB every half second (a slow uploader: 64 s a chunk); the requests it got.
fn slow_peer(ns: &str, ip: &str) -> Arc<AtomicU64> {
    let addr = format!("{ip}:10810");
    let listener = Link::within(ns, move || std::net::TcpListener::bind(addr).unwrap());
    let asked = Arc::new(AtomicU64::new(0));
    let count = asked.clone();
    let image = Arc::new(pattern(3, IMAGE_LEN));
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let (count, image) = (count.clone(), image.clone());
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut w = s;
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                }
                count.fetch_add(1, Ordering::Relaxed);
                let index: usize = line
                    .split(' ')
                    .nth(1)
                    .and_then(|p| p.rsplit('/').next()?.parse().ok())
                    .unwrap_or(0);
                let c = blocks::CHUNK as usize;
                let body = &image[index * c..((index + 1) * c).min(image.len())];
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                if w.write_all(head.as_bytes()).is_err() {
                    return;
                }
                for piece in body.chunks(4096) {
                    if w.write_all(piece).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            });
        }
    });
    asked
}

/// A peer that claims every chunk and sends them right but slowly, never silent for a whole
/// second: the agent gives it 2 s for a chunk, then leaves it as a silent one and fetches
/// elsewhere; both copies are the image (a slow peer would have held them for a minute per
/// chunk, past this test's bounds).
#[test]
fn a_peer_that_uploads_too_slowly_is_left_after_its_time() {
    const N: usize = 2;
    let fx = Fixture::new();
    let room = Room::new(N + 1);
    let (_daemon, url) = serve(&fx, &room, N + 1, ", peers: true");
    let (slow_ip, _) = client(N);
    let asked = slow_peer(&room.clients[N], &slow_ip);
    let all = format!("bootpool-swarm 1\nport 10810\nhave 0-{}\n", chunks() - 1);
    ask_tracker(&room.clients[N], &url, &all, fx.path());
    let agents: Vec<Agent> = (0..N)
        .map(|k| {
            Agent::start(
                &room.clients[k],
                &url,
                fx.path().join(format!("agent{k}.log")),
            )
        })
        .collect();
    let copies = (0..N)
        .map(|k| {
            let out = fx.path().join(format!("copy{k}"));
            (copy(&room.clients[k], &out), out)
        })
        .collect();
    all_equal_the_image(copies);
    let logs: Vec<String> = agents.iter().map(Agent::log_text).collect();
    println!(
        "the slow peer was asked {} times",
        asked.load(Ordering::Relaxed)
    );
    assert!(asked.load(Ordering::Relaxed) >= 1);
    assert!(
        logs.iter()
            .any(|l| l.contains(&format!("peer {slow_ip}:10810 did not answer"))),
        "{}",
        logs.join("\n")
    );
}

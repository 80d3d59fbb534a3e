//! A site of two servers on one PostgreSQL (issue 46 parts 1 and 2): two `bootpool serve`,
//! members `a` and `b`, each in a network namespace of its own with a veth on one bridge (the
//! room's namespace), sharing a database the test starts (through its Unix socket, which every
//! namespace reaches). Both list each other (`GET /api/v1/site`, `bootpool site`); real
//! clients (Kea's perfdhcp relaying 200 exchanges of random MACs, busybox udhcpc, ISC dhclient)
//! are each answered by exactly one of them, the member RFC 3074's hash gives them (counted
//! from both servers' answers on /metrics and their lease files); `b` killed with -9 loses its
//! clients to `a` (a udhcpc started at once is answered by `a`); `b` restarted takes them back;
//! and with the database stopped both keep the view they had: each still answers its own
//! clients, and only those. A second pair leases from one shared range (`site_leases`):
//! no address twice, a dead member's clients keeping theirs, the spools written after an
//! outage of PostgreSQL. In that pair, a client `a` answers is placed on `b`'s link (issue 46
//! part 4): told `b` as its next-server, it fetches its kernel from `b` over HTTP and TFTP and
//! attaches its NBD root there, while an address no member leased is refused its root by `b`.
//! A third pair shares its enrolments (`site_enrolments`): a client
//! enrolled on `a` is bound by `b`, its owner; removed on `b` while PostgreSQL is down, it is
//! refused by `b` at once and by `a` once the database is back. A fourth pair shares one
//! DHCPv6 range (`site_leases6`): ISC dhclient -6 clients bound by their DUID's owner only, no
//! address twice, and `b`'s client, `b` killed with -9, bound by `a` to the address it had.
//! A fifth pair runs in proxy mode (issue 47 part 3): a PXE ROM's DISCOVER is offered boot
//! options by its owner alone, and `b`'s, `b` killed with -9, by `a` alone. Outcomes only,
//! never a time, but for the issue's bound on that last one: 3 s after the heartbeat window.

use crate::common::netns::Link;
use crate::common::postgres::Postgres;
use crate::common::pxe::{self, Offer};
use crate::common::{Fixture, Loopback, run};
use bootpool::site::hash::bucket;
use bootpool::site::owners::DEAD_AFTER;
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const NET: &str = "10.79.0";
/// The DHCPv6 range members with `dhcp6` share, of `fd79::/64`.
const RANGE6: &str = "fd79::100-fd79::1ff";

/// The room's namespace with a bridge, and a namespace per member with a veth on it.
struct Room {
    ns: String,
    bridge: String,
    members: Vec<(String, String)>,
}

fn ip(args: &[&str]) {
    let (ok, _, err) = run(std::process::Command::new("ip").args(args), 30);
    assert!(ok, "ip {}: {err}", args.join(" "));
}

impl Room {
    fn new(members: usize) -> Room {
        // Unique per room: the tests of one process run side by side.
        static ROOMS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = ROOMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 10;
        let tag = std::process::id() % 10_000 * 10 + n;
        let mut room = Room {
            ns: format!("bp-site{tag}"),
            bridge: format!("bsite{tag}"),
            members: Vec::new(),
        };
        ip(&["netns", "add", &room.ns]);
        room.exec(&["ip", "link", "add", &room.bridge, "type", "bridge"]);
        room.exec(&["ip", "link", "set", &room.bridge, "up"]);
        room.exec(&["ip", "link", "set", "lo", "up"]);
        for k in 1..=members {
            let (ns, dev, port) = (
                format!("bp-site{tag}m{k}"),
                format!("bm{tag}x{k}"),
                format!("bp{tag}x{k}"),
            );
            ip(&["netns", "add", &ns]);
            room.members.push((ns.clone(), dev.clone()));
            ip(&[
                "link", "add", &dev, "netns", &ns, "type", "veth", "peer", "name", &port, "netns",
                &room.ns,
            ]);
            room.exec(&["ip", "link", "set", &port, "master", &room.bridge]);
            room.exec(&["ip", "link", "set", &port, "up"]);
            let cidr = format!("{NET}.{k}/16");
            for args in [
                vec!["ip", "addr", "add", &cidr, "dev", &dev],
                vec!["ip", "link", "set", &dev, "up"],
                vec!["ip", "link", "set", "lo", "up"],
            ] {
                ip(&[&["netns", "exec", &ns][..], &args].concat());
            }
        }
        room
    }

    fn exec(&self, args: &[&str]) {
        ip(&[&["netns", "exec", &self.ns][..], args].concat());
    }

    /// IPv6 on the room, for DHCPv6, before the members start: each member's veth at
    /// `fd79::K/64`; no duplicate address detection on the veths or the bridge, so their
    /// link-local addresses are usable at once (dhclient -6 needs the bridge's); the bridge
    /// floods multicast (ff02::1:2) to every member.
    fn ipv6(&self) {
        let no_dad = |dev: &str| format!("net.ipv6.conf.{dev}.accept_dad=0");
        let bridge = self.bridge.as_str();
        self.exec(&["sysctl", "-qw", &no_dad(bridge)]);
        self.exec(&[
            "ip",
            "link",
            "set",
            bridge,
            "type",
            "bridge",
            "mcast_snooping",
            "0",
        ]);
        self.exec(&["ip", "link", "set", bridge, "down"]);
        self.exec(&["ip", "link", "set", bridge, "up"]);
        for (k, (ns, dev)) in self.members.iter().enumerate() {
            let (ns, dev) = (ns.as_str(), dev.as_str());
            let (dad, cidr) = (no_dad(dev), format!("fd79::{}/64", k + 1));
            for args in [
                vec!["sysctl", "-qw", dad.as_str()],
                vec!["ip", "link", "set", dev, "down"],
                vec!["ip", "link", "set", dev, "up"],
                vec![
                    "ip",
                    "-6",
                    "addr",
                    "add",
                    cidr.as_str(),
                    "dev",
                    dev,
                    "nodad",
                ],
            ] {
                ip(&[&["netns", "exec", ns][..], &args].concat());
            }
        }
    }

    /// ISC dhclient -6 on the bridge as `mac`, with a DUID-LL (`-D LL`: the DUID, and so its
    /// RFC 3074 bucket, follows from the MAC), its files in `dir` (a fresh one: a new DUID
    /// of the MAC's, a SOLICIT): the address it bound, or `None` (its log in `dir/log`).
    fn dhclient6(&self, dir: &std::path::Path, mac: &str) -> Option<Ipv6Addr> {
        // The machine's own link-local address (EUI-64 of its MAC), as a real client's: the
        // bridge keeps the one of the MAC it had, which the members' neighbour caches still
        // map to that MAC, so their answers to it would go to a machine no longer there.
        self.exec(&["ip", "link", "set", &self.bridge, "address", mac]);
        let bytes: [u8; 6] = mac_bytes(mac).try_into().unwrap();
        let link_local =
            bootpool::proto::dhcp6::eui64(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), bytes);
        self.exec(&[
            "ip",
            "-6",
            "addr",
            "flush",
            "dev",
            &self.bridge,
            "scope",
            "link",
        ]);
        self.exec(&[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("{link_local}/64"),
            "dev",
            &self.bridge,
            "nodad",
        ]);
        let (said, _) = dhclient_once(self, dir, Some("-6"), "$new_ip6_address", "timeout 20;\n");
        said.trim().parse().ok()
    }

    /// busybox udhcpc on the bridge as `mac`, trying `tries` times a second apart: the server
    /// that bound it (its server identifier), or `None`.
    fn udhcpc(&self, dir: &std::path::Path, mac: &str, tries: u32) -> Option<String> {
        Some(self.udhcpc_with(dir, mac, tries, &[])?.0)
    }

    /// busybox udhcpc as `udhcpc` runs it, with `extra` arguments (`-r IP`: the address it
    /// asks for): the server that bound it and the address, or `None`.
    fn udhcpc_with(
        &self,
        dir: &std::path::Path,
        mac: &str,
        tries: u32,
        extra: &[&str],
    ) -> Option<(String, String)> {
        self.exec(&["ip", "link", "set", &self.bridge, "address", mac]);
        let out = dir.join("udhcpc.out");
        let _ = std::fs::remove_file(&out);
        let script = dir.join("udhcpc.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho \"$1 $serverid $ip\" >> {}\n",
                out.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let tries = tries.to_string();
        run(
            &mut Link::command(
                &self.ns,
                "busybox",
                &[
                    &[
                        "udhcpc",
                        "-i",
                        &self.bridge,
                        "-f",
                        "-q",
                        "-n",
                        "-t",
                        &tries,
                        "-T",
                        "1",
                        "-s",
                        script.to_str().unwrap(),
                    ][..],
                    extra,
                ]
                .concat(),
            ),
            60,
        );
        let said = std::fs::read_to_string(&out).unwrap_or_default();
        said.lines().find_map(|l| {
            let mut words = l.strip_prefix("bound ")?.split(' ');
            Some((words.next()?.to_string(), words.next()?.to_string()))
        })
    }

    /// A PXE ROM's DISCOVER on the bridge as `mac` (`common::pxe`), from that MAC, and the
    /// OFFERs to it within `wait`.
    fn pxe_offers(&self, mac: &str, wait: Duration) -> Vec<Offer> {
        self.exec(&["ip", "link", "set", &self.bridge, "address", mac]);
        let bytes: [u8; 6] = mac_bytes(mac).try_into().unwrap();
        pxe::offers(&self.ns, &self.bridge, bytes, wait)
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        for (ns, _) in &self.members {
            let _ = run(
                std::process::Command::new("ip").args(["netns", "del", ns]),
                10,
            );
        }
        let _ = run(
            std::process::Command::new("ip").args(["netns", "del", &self.ns]),
            10,
        );
    }
}

/// How a member answers DHCPv4.
#[derive(Clone, Copy)]
enum Dhcp<'r> {
    /// Authoritative, leasing from this range.
    Leasing(&'r str),
    /// Proxy mode: beside the site's DHCP server, PXE boot options only.
    Proxy,
}

/// A member's server, killed with -9 when dropped.
struct Member {
    name: &'static str,
    ns: String,
    fx: Fixture,
    child: Option<Child>,
}

impl Member {
    /// Member `k` (1: `a`, 2: `b`) at `NET.k`, its own range of the /16, the room's pool of
    /// 65,536 MACs, the site's database.
    fn new(room: &Room, k: usize, database: &str) -> Member {
        Member::with_range(room, k, database, &format!("10.79.{k}.0-10.79.{k}.255"))
    }

    /// Member `k` as `new` makes it, leasing from `range`.
    fn with_range(room: &Room, k: usize, database: &str, range: &str) -> Member {
        Member::with_config(room, k, database, Dhcp::Leasing(range), false)
    }

    /// Member `k` as `new` makes it, in proxy mode: PXE boot options only, no address.
    fn proxy(room: &Room, k: usize, database: &str) -> Member {
        Member::with_config(room, k, database, Dhcp::Proxy, false)
    }

    /// Member `k` as `with_range` makes it, its DHCPv4 as `dhcp` says; with `dhcp6`, serving
    /// DHCPv6 too at `fd79::K` (`Room::ipv6` put it on its veth), from the range every such
    /// member shares, `RANGE6`.
    fn with_config(room: &Room, k: usize, database: &str, dhcp: Dhcp<'_>, dhcp6: bool) -> Member {
        let (ns, dev) = room.members[k - 1].clone();
        let fx = Fixture::new();
        let config = Loopback::default()
            .on_veth(NET, &dev)
            .network("10.79.0.0/16");
        let config = match dhcp {
            Dhcp::Leasing(range) => config.range(range),
            Dhcp::Proxy => config.proxy(),
        };
        let config = config
            .http(&format!("{NET}.{k}:8080"))
            // Boots spread over the site's links (not the default, `owner`).
            .server(&format!("database: {database}\nplacement: site"))
            .without_pool("nfs-room")
            .clients(
                "nbd-room",
                "- { macs: \"52:54:00:79:00:00-52:54:00:79:ff:ff\" }",
            );
        let six = match dhcp6 {
            true => format!("  address6: \"fd79::{k}\"\n"),
            false => String::new(),
        };
        let mut text = config.replace(
            &format!("  address: {NET}.1\n"),
            &format!("  address: {NET}.{k}\n{six}"),
        );
        if dhcp6 {
            text.push_str(&format!(
                "dhcp6:\n  subnet: \"fd79::/64\"\n  range: \"{RANGE6}\"\n"
            ));
        }
        fx.write_config(&text);
        let mut m = Member {
            name: ["a", "b"][k - 1],
            ns,
            fx,
            child: None,
        };
        m.start();
        m
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.fx.path().join("serve.log")).unwrap_or_default()
    }

    fn start(&mut self) {
        let log = std::fs::File::create(self.fx.path().join("serve.log")).unwrap();
        let child = Link::command(
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
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("bootpool runs");
        self.child = Some(child);
        let started = (0..400).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            self.log().contains("bootpool serving")
        });
        assert!(started, "{}", self.log());
    }

    /// SIGTERM, and the exit awaited: a clean stop.
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = bootpool::sys::process::kill(c.id() as i32, libc::SIGTERM);
            let status = c.wait().unwrap();
            assert!(status.success(), "{status}\n{}", self.log());
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn http(&self) -> String {
        let k = if self.name == "a" { 1 } else { 2 };
        format!("{NET}.{k}:8080")
    }

    fn get(&self, path: &str) -> String {
        let url = format!("http://{}{path}", self.http());
        let (ok, body, err) = run(
            &mut Link::command(&self.ns, "curl", &["-sS", "--fail", &url]),
            30,
        );
        assert!(ok, "{url}: {err}\n{}", self.log());
        body
    }

    /// The site as this member sees it: (name, live) of each member, and whether frozen.
    fn site(&self) -> (Vec<(String, bool)>, bool) {
        let v: serde_json::Value = serde_json::from_str(&self.get("/api/v1/site")).unwrap();
        let members = v["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["name"].as_str().unwrap().to_string(),
                    m["live"].as_bool().unwrap(),
                )
            })
            .collect();
        (members, v["frozen"].as_bool().unwrap())
    }

    /// DHCP answers of `kind` (offer, ack, nak) this member sent.
    fn answers(&self, kind: &str) -> u64 {
        let series = format!("bootpool_dhcp_answers_total{{kind=\"{kind}\"}} ");
        let text = self.get("/metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(&series)?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in /metrics"))
    }

    /// The bound leases in this member's lease file: (MAC, address).
    fn bound(&self) -> Vec<(String, String)> {
        let saved = bootpool::service::lease_file::read(&self.fx.path().join("var")).unwrap();
        let v = serde_json::to_value(&saved).unwrap();
        v["leases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["state"] == "bound")
            .map(|l| {
                let s = |k: &str| l[k].as_str().unwrap().to_string();
                (s("mac"), s("ip"))
            })
            .collect()
    }

    /// The server link this member's lease file names for `mac`.
    fn link(&self, mac: &str) -> Option<String> {
        let saved = bootpool::service::lease_file::read(&self.fx.path().join("var")).unwrap();
        let v = serde_json::to_value(&saved).unwrap();
        v["leases"].as_array()?.iter().find(|l| l["mac"] == mac)?["link"]
            .as_str()
            .map(str::to_string)
    }

    /// The lease changes this member has not yet written to the site's table.
    fn spooled(&self) -> usize {
        std::fs::read_to_string(self.fx.path().join("var").join("leases.spool"))
            .unwrap_or_default()
            .lines()
            .count()
    }

    /// The DHCPv6 bindings in this member's `leases6.json`: (MAC, address).
    fn bound6(&self) -> Vec<(String, Ipv6Addr)> {
        bootpool::service::leases6_file::read(&self.fx.path().join("var"))
            .unwrap()
            .into_iter()
            .map(|b| (b.mac.to_string(), b.addr))
            .collect()
    }

    /// The DHCPv6 binding changes this member has not yet written to the site's table.
    fn spooled6(&self) -> usize {
        std::fs::read_to_string(self.fx.path().join("var").join("leases6.spool"))
            .unwrap_or_default()
            .lines()
            .count()
    }

    /// The MACs in this member's lease file.
    fn leased(&self) -> BTreeSet<String> {
        let saved = bootpool::service::lease_file::read(&self.fx.path().join("var")).unwrap();
        let v = serde_json::to_value(&saved).unwrap();
        v["leases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["mac"].as_str().unwrap().to_string())
            .collect()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}

fn mac_bytes(mac: &str) -> Vec<u8> {
    mac.split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect()
}

/// Of two live members `a` and `b`, the one RFC 3074's split gives `mac`: even buckets to
/// the first name, odd to the second.
fn owner(mac: &str) -> &'static str {
    ["a", "b"][usize::from(bucket(&mac_bytes(mac)) % 2)]
}

/// MACs of the room's pool owned by `who` while both members live.
fn macs_of(who: &str, n: usize) -> Vec<String> {
    (0..=255u8)
        .map(|i| format!("52:54:00:79:01:{i:02x}"))
        .filter(|m| owner(m) == who)
        .take(n)
        .collect()
}

/// Of two live members, the one RFC 3074's split gives the DHCPv6 client `mac`, by its
/// DUID-LL (type 3, Ethernet, the MAC).
fn owner6(mac: &str) -> &'static str {
    let mut duid = vec![0u8, 3, 0, 1];
    duid.extend(mac_bytes(mac));
    ["a", "b"][usize::from(bucket(&duid) % 2)]
}

/// MACs of the room's pool whose DUID-LL `who` owns while both members live.
fn macs6_of(who: &str, n: usize) -> Vec<String> {
    (0..=255u8)
        .map(|i| format!("52:54:00:79:06:{i:02x}"))
        .filter(|m| owner6(m) == who)
        .take(n)
        .collect()
}

fn poll(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..300 {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("never came true: {what}");
}

/// Waits until members `a` and `b` each see both live; the view they then share.
fn both_live(a: &Member, b: &Member) -> Vec<(String, bool)> {
    let both = vec![("a".to_string(), true), ("b".to_string(), true)];
    poll("a and b see each other live", || {
        a.site() == (both.clone(), false) && b.site() == (both.clone(), false)
    });
    both
}

#[test]
fn each_client_is_answered_by_exactly_one_member_and_a_dead_members_by_a_survivor() {
    let pg = Postgres::start();
    let room = Room::new(3);
    let a = Member::new(&room, 1, &pg.socket_url());
    let mut b = Member::new(&room, 2, &pg.socket_url());
    let both = both_live(&a, &b);

    // `bootpool site` reads the same rows from the database.
    let (ok, table, err) = run(
        std::process::Command::new(env!("CARGO_BIN_EXE_bootpool"))
            .args(["site", "--config"])
            .arg(a.fx.config_path()),
        30,
    );
    assert!(ok, "{err}");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[1].starts_with("a ") && lines[1].contains(" live "),
        "{table}"
    );
    assert!(
        lines[2].starts_with("b ") && lines[2].contains(" live "),
        "{table}"
    );
    assert!(
        lines[1].contains("50.0%") && lines[2].contains("10.79.0.2:8080"),
        "{table}"
    );

    // perfdhcp, a relay at NET.200, broadcasts 200 exchanges of random MACs to both.
    room.exec(&["ip", "addr", "add", "10.79.0.200/16", "dev", &room.bridge]);
    let (ok, out, err) = run(
        &mut Link::command(
            &room.ns,
            "perfdhcp",
            &[
                "-4",
                "-l",
                &room.bridge,
                "-b",
                "mac=52:54:00:79:00:00",
                "-R",
                "200",
                "-n",
                "200",
                "-r",
                "50",
                "-d",
                "10",
                "-W",
                "2000000",
                "all",
            ],
        ),
        120,
    );
    let said = format!(
        "perfdhcp ok={ok}:\n{out}\n{err}\na:\n{}\nb:\n{}",
        a.log(),
        b.log()
    );
    // Each DISCOVER and REQUEST had one answer: none lost, none doubled.
    let lines_of = |start: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with(start))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(lines_of("drops:"), ["drops: 0", "drops: 0"], "{said}");
    assert_eq!(
        lines_of("received packets:"),
        ["received packets: 200", "received packets: 200"],
        "{said}"
    );
    let (offers_a, offers_b) = (a.answers("offer"), b.answers("offer"));
    assert_eq!(offers_a + offers_b, 200, "{said}");
    assert!(offers_a > 40 && offers_b > 40, "{offers_a} {offers_b}");
    // Each member holds only its own clients, by RFC 3074's split.
    let (leased_a, leased_b) = (a.leased(), b.leased());
    assert!(leased_a.is_disjoint(&leased_b));
    assert!(leased_a.iter().all(|m| owner(m) == "a"), "{leased_a:?}");
    assert!(leased_b.iter().all(|m| owner(m) == "b"), "{leased_b:?}");
    room.exec(&["ip", "addr", "flush", "dev", &room.bridge]);

    // busybox udhcpc, three clients of each: bound by their owner, one OFFER and one ACK each.
    let dir = tempfile::tempdir().unwrap();
    let before = [a.answers("offer"), b.answers("offer")];
    for (who, server) in [("a", "10.79.0.1"), ("b", "10.79.0.2")] {
        for mac in macs_of(who, 3) {
            let bound = room.udhcpc(dir.path(), &mac, 3);
            assert_eq!(bound.as_deref(), Some(server), "{mac}");
        }
    }
    assert_eq!(
        [
            a.answers("offer") - before[0],
            b.answers("offer") - before[1]
        ],
        [3, 3]
    );

    // ISC dhclient, one client of b's.
    let mac = &macs_of("b", 4)[3];
    room.exec(&["ip", "link", "set", &room.bridge, "address", mac]);
    let got = dhclient(&room, &dir.path().join("dhclient"));
    assert_eq!(got, "done 10.79.0.2", "dhclient");

    // b killed with -9: a udhcpc of b's started at once is answered by a.
    b.kill();
    let mac = &macs_of("b", 5)[4];
    let bound = room.udhcpc(dir.path(), mac, 10);
    assert_eq!(bound.as_deref(), Some("10.79.0.1"), "{mac}\n{}", a.log());
    let (seen, _) = a.site();
    assert_eq!(seen, [("a".into(), true), ("b".into(), false)]);

    // b again: it takes its half back.
    b.start();
    poll("a sees b live again", || a.site() == (both.clone(), false));
    let mac = &macs_of("b", 6)[5];
    assert_eq!(
        room.udhcpc(dir.path(), mac, 3).as_deref(),
        Some("10.79.0.2")
    );

    // A third server under b's name, while b runs, is refused (after one heartbeat window).
    let (ns3, dev3) = room.members[2].clone();
    let third = Fixture::new();
    third.write_config(
        &Loopback::default()
            .on_veth("10.79.0", &dev3)
            .network("10.79.0.0/16")
            .range("10.79.3.0-10.79.3.255")
            .http("10.79.0.3:8080")
            .server(&format!("database: {}", pg.socket_url()))
            .replace("  address: 10.79.0.1\n", "  address: 10.79.0.3\n"),
    );
    let (ok, _, err) = run(
        &mut Link::command(
            &ns3,
            env!("CARGO_BIN_EXE_bootpool"),
            &[
                "serve",
                "--config",
                third.config_path().to_str().unwrap(),
                "--member",
                "b",
            ],
        ),
        60,
    );
    assert!(!ok, "{err}");
    assert!(
        err.contains("another running server is member \"b\""),
        "{err}"
    );
    // A name that is not one word is refused before anything is bound.
    let (ok, _, err) = run(
        &mut Link::command(
            &ns3,
            env!("CARGO_BIN_EXE_bootpool"),
            &[
                "serve",
                "--config",
                third.config_path().to_str().unwrap(),
                "--member",
                "two words",
            ],
        ),
        60,
    );
    assert!(!ok && err.contains("--member NAME"), "{err}");

    // b stopped cleanly marks its row dead as it goes (its heartbeat the epoch), so a takes
    // its clients at its next read; then b comes back.
    b.stop();
    assert_eq!(
        pg.query("SELECT extract(epoch FROM heartbeat)::bigint FROM site_members WHERE name = 'b'"),
        "0"
    );
    poll("a sees b dead", || {
        a.site().0 == [("a".to_string(), true), ("b".to_string(), false)]
    });
    b.start();
    poll("a sees b live again", || a.site() == (both.clone(), false));

    // The database stopped: both keep the members they saw, and each its own clients.
    drop(pg);
    poll("both frozen", || a.site().1 && b.site().1);
    assert_eq!(a.site(), (both.clone(), true));
    let before = [a.answers("offer"), b.answers("offer")];
    for (who, server) in [("a", "10.79.0.1"), ("b", "10.79.0.2")] {
        let mac = &macs_of(who, 8)[7];
        assert_eq!(
            room.udhcpc(dir.path(), mac, 3).as_deref(),
            Some(server),
            "{mac}"
        );
    }
    assert_eq!(
        [
            a.answers("offer") - before[0],
            b.answers("offer") - before[1]
        ],
        [1, 1]
    );
}

/// Proxy mode in a site (issue 47 part 3, "proxy mode too"): two members in proxy mode on one
/// segment and no DHCP server of the site's (a proxy answers a PXE DISCOVER on its own; the
/// addresses are not its business). A PXE ROM's DISCOVER (`common::pxe`) as a MAC RFC 3074
/// gives `b` gets one offer, `b`'s; one as `a`'s MAC, `a`'s. `b` killed with -9, the same
/// DISCOVERs for `b`'s MACs, a new one as soon as the last has waited a quarter second, get
/// `a`'s offer naming `a` as next-server (a dead member is no longer placed on), no later than
/// 3 s after the heartbeat window (`DEAD_AFTER`, docs/site.md: 2 s) has passed since the kill;
/// no DISCOVER ever gets offers from two members. The time asserted and printed runs from the
/// kill to the sending of the first DISCOVER `a` answered.
#[test]
fn in_proxy_mode_a_pxe_client_is_offered_by_its_owner_alone_and_a_dead_members_by_a_survivor() {
    let pg = Postgres::start();
    let room = Room::new(2);
    let a = Member::proxy(&room, 1, &pg.socket_url());
    let mut b = Member::proxy(&room, 2, &pg.socket_url());
    both_live(&a, &b);
    let (at_a, at_b) = (Ipv4Addr::new(10, 79, 0, 1), Ipv4Addr::new(10, 79, 0, 2));

    // Both live: one offer each, from the owner, a boot file and no address.
    let before = [a.answers("offer"), b.answers("offer")];
    let mut macs = macs_of("b", 4);
    // b's fourth client is offered by b here and asks again only on port 4011, after b's death.
    let late = macs.pop().unwrap();
    let asked = macs.iter().map(|m| (m.clone(), at_b));
    let late_one = [(late.clone(), at_b)];
    for (mac, owner) in asked
        .chain(late_one)
        .chain(macs_of("a", 1).into_iter().map(|m| (m, at_a)))
    {
        let offers = room.pxe_offers(&mac, Duration::from_secs(1));
        assert_eq!(servers(&offers), [owner], "{mac}: {offers:?}");
        let o = &offers[0];
        assert_eq!(o.yiaddr, Ipv4Addr::UNSPECIFIED, "{mac}: {o:?}");
        assert_eq!(o.file, "undionly.kpxe", "{mac}: {o:?}");
        assert!([at_a, at_b].contains(&o.siaddr), "{mac}: {o:?}");
    }
    let offered = [
        a.answers("offer") - before[0],
        b.answers("offer") - before[1],
    ];
    assert_eq!(offered, [1, 4]);

    let killed = Instant::now();
    b.kill();
    let (answered, silent) = first_offer_from(&room, &macs, at_a, killed);
    let bound = DEAD_AFTER + Duration::from_secs(3);
    let silent = silent.map_or("none was".to_string(), |s| format!("sent at {s:.2?}"));
    let said = format!(
        "a first offered to b's clients for the DISCOVER sent {answered:.2?} after b's kill -9 \
         (the last one unanswered: {silent})"
    );
    eprintln!("{said}");
    assert!(
        answered <= bound,
        "{said}: later than {bound:?}\na:\n{}",
        a.log()
    );

    // From then on each of b's clients gets a's offer alone, on a's own link.
    for mac in &macs {
        let offers = room.pxe_offers(mac, Duration::from_secs(1));
        assert_eq!(servers(&offers), [at_a], "{mac}: {offers:?}");
        assert_eq!(offers[0].siaddr, at_a, "{mac}: {offers:?}");
    }
    let (seen, _) = a.site();
    assert_eq!(seen, [("a".into(), true), ("b".into(), false)]);

    // b's late client, offered by b before its death, sends its REQUEST to port 4011 at the
    // address b's address moved to (here a's own: this room has no keepalived): a saw its
    // DISCOVER on port 67, so it is no stranger there, and a ACKs it with the boot file.
    let at = Ipv4Addr::new(10, 79, 0, 150);
    room.exec(&[
        "ip",
        "addr",
        "add",
        &format!("{at}/16"),
        "dev",
        &room.bridge,
    ]);
    room.exec(&["ip", "link", "set", &room.bridge, "address", &late]);
    let bytes: [u8; 6] = mac_bytes(&late).try_into().unwrap();
    let ack = pxe::ack_on_4011(
        &room.ns,
        &room.bridge,
        bytes,
        at,
        at_a,
        Duration::from_secs(2),
    );
    assert_eq!(ack.as_deref(), Some("undionly.kpxe"), "a:\n{}", a.log());
}

/// The server identifiers of `offers`, in the order they came.
fn servers(offers: &[Offer]) -> Vec<Ipv4Addr> {
    offers.iter().map(|o| o.server).collect()
}

/// PXE DISCOVERs as `macs` in turn, each given a quarter second, from `since` until one is
/// offered by `survivor` alone, naming itself as next-server (at most 30 s): when that one
/// was sent, and when the last unanswered one was (`None`: none was), both after `since`. Any
/// other offer fails the test: another member's, or two to one DISCOVER.
fn first_offer_from(
    room: &Room,
    macs: &[String],
    survivor: Ipv4Addr,
    since: Instant,
) -> (Duration, Option<Duration>) {
    let mut silent = None;
    for mac in macs.iter().cycle() {
        let sent = since.elapsed();
        assert!(
            sent < Duration::from_secs(30),
            "no offer from {survivor} in 30 s"
        );
        let offers = room.pxe_offers(mac, Duration::from_millis(250));
        match servers(&offers)[..] {
            [] => silent = Some(sent),
            [s] if s == survivor && offers[0].siaddr == survivor => return (sent, silent),
            _ => panic!("{mac}, sent {sent:?} after the death: {offers:?}"),
        }
    }
    unreachable!("`cycle` over MACs never ends")
}

/// Two members leasing from ONE range (issue 46's shared leases, docs/site.md "Leases"):
/// perfdhcp's 200 random MACs and udhcpc clients of both members get addresses no two of
/// which are alike, in the members' lease files, in the clients' hands and in `site_leases`;
/// `b` killed with -9, its running client (busybox udhcpc, told to renew: unicast to `b`,
/// then a broadcast REBIND) and its clients asking again keep their addresses through `a`;
/// PostgreSQL stopped at once (`pg_ctl stop -m immediate`), new DISCOVERs are still answered
/// and their leases and records wait on disk, `a` is killed with -9, and once PostgreSQL and
/// `a` are started again the spools are written to the database and emptied.
#[test]
fn members_sharing_one_range_never_lease_an_address_twice() {
    let mut pg = Postgres::start();
    let room = Room::new(2);
    let range = "10.79.1.0-10.79.2.255";
    let mut a = Member::with_range(&room, 1, &pg.socket_url(), range);
    let mut b = Member::with_range(&room, 2, &pg.socket_url(), range);
    let both = both_live(&a, &b);

    // perfdhcp through a relay at NET.200: 200 exchanges of random MACs, every one answered.
    room.exec(&["ip", "addr", "add", "10.79.0.200/16", "dev", &room.bridge]);
    let (ok, out, err) = run(
        &mut Link::command(
            &room.ns,
            "perfdhcp",
            &[
                "-4",
                "-l",
                &room.bridge,
                "-b",
                "mac=52:54:00:79:00:00",
                "-R",
                "200",
                "-n",
                "200",
                "-r",
                "50",
                "-d",
                "10",
                "-W",
                "2000000",
                "all",
            ],
        ),
        120,
    );
    let said = format!(
        "perfdhcp ok={ok}:\n{out}\n{err}\na:\n{}\nb:\n{}",
        a.log(),
        b.log()
    );
    let drops: Vec<&str> = out.lines().filter(|l| l.starts_with("drops:")).collect();
    assert_eq!(drops, ["drops: 0", "drops: 0"], "{said}");
    assert_eq!(a.answers("ack") + b.answers("ack"), 200, "{said}");
    room.exec(&["ip", "addr", "flush", "dev", &room.bridge]);

    // udhcpc, four clients of each member: bound by their owner, each a different address.
    let dir = tempfile::tempdir().unwrap();
    let mut hands = Vec::new();
    for (who, server) in [("a", "10.79.0.1"), ("b", "10.79.0.2")] {
        for mac in macs_of(who, 4) {
            let (by, ip) = room.udhcpc_with(dir.path(), &mac, 3, &[]).expect(&mac);
            assert_eq!(by, server, "{mac}");
            hands.push((mac, ip));
        }
    }
    let distinct: BTreeSet<&String> = hands.iter().map(|(_, ip)| ip).collect();
    assert_eq!(distinct.len(), hands.len(), "{hands:?}");

    // The members' tables together (perfdhcp's MACs repeat: at most 208 clients): no address
    // twice; the site's table the same, once the spools are written.
    let mut held: Vec<(String, String)> = a.bound();
    held.extend(b.bound());
    assert!((100..=208).contains(&held.len()), "{held:?}");
    let ips: BTreeSet<&String> = held.iter().map(|(_, ip)| ip).collect();
    assert_eq!(
        ips.len(),
        held.len(),
        "an address leased twice: {held:?}\nA:{}\nB:{}",
        a.log(),
        b.log()
    );
    assert!(hands.iter().all(|h| held.contains(h)), "{hands:?}");
    let total = held.len().to_string();
    poll("the spools written to site_leases", || {
        pg.query("SELECT count(*) FROM site_leases") == total
    });
    assert_eq!(
        pg.query("SELECT count(DISTINCT ip) || ' ' || count(DISTINCT member) FROM site_leases"),
        format!("{total} 2")
    );
    assert_eq!(a.spooled() + b.spooled(), 0);

    // A running client of b's (busybox udhcpc, bound by b), to renew after b's death.
    let running = macs_of("b", 8)[7].clone();
    room.exec(&["ip", "link", "set", &room.bridge, "address", &running]);
    let said = dir.path().join("running.out");
    let script = dir.path().join("running.sh");
    std::fs::write(
        &script,
        // It takes its address as a client does: the survivor's ACK to a REBIND comes to it.
        format!(
            "#!/bin/sh\necho \"$1 $serverid $ip\" >> {}\ncase $1 in\n\
             bound|renew) ip addr replace $ip/16 dev $interface;;\n\
             deconfig) ip addr flush dev $interface;;\nesac\n",
            said.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let args = ["udhcpc", "-i", &room.bridge, "-f", "-T", "1", "-s"];
    let mut udhcpc = Link::command(&room.ns, "busybox", &args)
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("running.log")).unwrap())
        .spawn()
        .unwrap();
    let lines = || std::fs::read_to_string(&said).unwrap_or_default();
    poll("the running client bound by b", || {
        lines().contains("bound 10.79.0.2 ")
    });
    let held_ip = lines()
        .lines()
        .find_map(|l| Some(l.strip_prefix("bound 10.79.0.2 ")?.to_string()))
        .unwrap();

    // b killed with -9: a takes its clients. The running client renews (SIGUSR1: unicast to
    // b, unanswered, then a broadcast REBIND) and a ACKs the address it held.
    let (mac, ip) = hands[4].clone();
    let owner_row = format!("SELECT member || ' ' || ip FROM site_leases WHERE mac = '{mac}'");
    assert_eq!(pg.query(&owner_row), format!("b {ip}"));
    b.kill();
    poll("a sees b dead", || {
        a.site().0 == [("a".to_string(), true), ("b".to_string(), false)]
    });
    let _ = bootpool::sys::process::kill(udhcpc.id() as i32, libc::SIGUSR1);
    let renewed = (0..300).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        lines().lines().any(|l| l.starts_with("renew "))
    });
    let log = std::fs::read_to_string(dir.path().join("running.log")).unwrap_or_default();
    assert!(renewed, "{}\n{log}\n{}", lines(), a.log());
    let _ = udhcpc.kill();
    let _ = udhcpc.wait();
    room.exec(&["ip", "addr", "flush", "dev", &room.bridge]);
    let renewed: Vec<String> = lines()
        .lines()
        .filter(|l| l.starts_with("renew "))
        .map(str::to_string)
        .collect();
    assert_eq!(
        renewed[0],
        format!("renew 10.79.0.1 {held_ip}"),
        "{}",
        lines()
    );
    assert!(a.bound().contains(&(running.clone(), held_ip.clone())));

    // b's clients asking again for their addresses get them from a.
    let got = room.udhcpc_with(dir.path(), &mac, 10, &["-r", &ip]);
    assert_eq!(
        got,
        Some(("10.79.0.1".to_string(), ip.clone())),
        "{}",
        a.log()
    );
    assert!(a.bound().contains(&(mac.clone(), ip.clone())));
    // And one of b's clients that asks for nothing in particular keeps its address too.
    let (mac2, ip2) = hands[5].clone();
    let got = room.udhcpc_with(dir.path(), &mac2, 10, &[]);
    assert_eq!(
        got,
        Some(("10.79.0.1".to_string(), ip2.clone())),
        "{}",
        a.log()
    );
    poll("a's renewal in site_leases", || {
        pg.query(&owner_row) == format!("a {ip}")
    });

    // b back; then PostgreSQL stopped at once: both freeze, and new clients are answered.
    b.start();
    poll("a sees b live again", || a.site() == (both.clone(), false));
    pg.stop_immediate();
    poll("both frozen", || a.site().1 && b.site().1);
    let mut new = Vec::new();
    for (who, server) in [("a", "10.79.0.1"), ("b", "10.79.0.2")] {
        let mac = macs_of(who, 6)[5].clone();
        let (by, ip) = room.udhcpc_with(dir.path(), &mac, 3, &[]).expect(&mac);
        assert_eq!(by, server, "{mac}");
        new.push((mac, ip));
    }
    assert_ne!(new[0].1, new[1].1);
    assert!(
        held.iter()
            .all(|(_, ip)| *ip != new[0].1 && *ip != new[1].1)
    );
    assert!(
        a.spooled() >= 1 && b.spooled() >= 1,
        "{} {}",
        a.spooled(),
        b.spooled()
    );
    // The boot records wait too, parked on disk; a killed with -9 meanwhile.
    let parked = a.fx.path().join("var").join("records.spool");
    poll("a's records of its new client parked", || {
        std::fs::read_to_string(&parked).is_ok_and(|t| t.contains(&new[0].0))
    });
    a.kill();

    // PostgreSQL again, and a: the spools and the parked records are written and emptied.
    pg.start_again();
    a.start();
    let events = format!("SELECT count(*) > 0 FROM events WHERE mac = '{}'", new[0].0);
    poll("a's parked records in the events table", || {
        pg.query(&events) == "t"
    });
    poll("a's records spool emptied", || !parked.exists());
    for (mac, ip) in &new {
        let row = format!("SELECT ip FROM site_leases WHERE mac = '{mac}'");
        poll("a spooled lease in site_leases", || pg.query(&row) == *ip);
    }
    poll("the spools emptied", || a.spooled() + b.spooled() == 0);
    assert_eq!(
        pg.query("SELECT count(*) = count(DISTINCT ip) FROM site_leases"),
        "t"
    );
    assert!(
        !a.get("/metrics")
            .contains("bootpool_dhcp_lease_conflicts_total 1")
    );
}

/// A MAC outside the room's pool (no member serves it unless enrolled) owned by `who`.
fn stranger_of(who: &str) -> String {
    (0..=255u8)
        .map(|i| format!("52:54:00:7a:00:{i:02x}"))
        .find(|m| owner(m) == who)
        .unwrap()
}

impl Member {
    /// `bootpool client ARGS` with this member's config: its output, asserted to succeed.
    fn client(&self, args: &[&str]) -> String {
        let config = self.fx.config_path();
        let (ok, out, err) = run(
            std::process::Command::new(env!("CARGO_BIN_EXE_bootpool"))
                .arg("client")
                .args(args)
                .args(["--config", config.to_str().unwrap()]),
            60,
        );
        assert!(
            ok,
            "client {}: {out}\n{err}\n{}",
            args.join(" "),
            self.log()
        );
        out
    }

    /// The text of this member's enrolments file.
    fn enrolled(&self) -> String {
        std::fs::read_to_string(self.fx.path().join("var").join("enrolled.yaml"))
            .unwrap_or_default()
    }

    /// How many reloads this member applied, as its log says.
    fn reloads(&self) -> usize {
        self.log().matches("config reloaded").count()
    }
}

#[test]
fn an_enrolment_made_on_one_member_is_served_by_every_member_and_so_is_a_removal() {
    let mut pg = Postgres::start();
    let room = Room::new(2);
    let a = Member::new(&room, 1, &pg.socket_url());
    let b = Member::new(&room, 2, &pg.socket_url());
    both_live(&a, &b);
    let dir = tempfile::tempdir().unwrap();
    let (of_a, of_b) = (stranger_of("a"), stranger_of("b"));
    // Listed nowhere: b, its owner, answers it not.
    assert_eq!(room.udhcpc(dir.path(), &of_b, 2), None, "{}", b.log());

    // Enrolled on a, both of them: b's file gets them from the site, and b serves its own.
    let b_reloads = b.reloads();
    for mac in [&of_a, &of_b] {
        a.client(&["add", mac, "--pool", "nbd-room"]);
    }
    poll("b's file holds a's enrolments, reloaded", || {
        b.enrolled().contains(&of_a) && b.enrolled().contains(&of_b) && b.reloads() > b_reloads
    });
    assert_eq!(
        room.udhcpc(dir.path(), &of_b, 3).as_deref(),
        Some("10.79.0.2"),
        "a:\n{}\nb:\n{}",
        a.log(),
        b.log()
    );
    assert_eq!(
        pg.query("SELECT count(*) FROM site_enrolments WHERE member = 'a'"),
        "2"
    );

    // A removal made on b while the database is down: b refuses the client at once (its file
    // is what it serves), and a follows once the database is back.
    pg.stop_immediate();
    let a_reloads = a.reloads();
    for mac in [&of_a, &of_b] {
        let said = b.client(&["remove", mac]);
        assert!(said.contains("removed from"), "{said}");
    }
    assert_eq!(room.udhcpc(dir.path(), &of_b, 2), None, "{}", b.log());
    assert!(a.enrolled().contains(&of_a));
    pg.start_again();
    poll("a's file lost b's removals, reloaded", || {
        !a.enrolled().contains(&of_a) && !a.enrolled().contains(&of_b) && a.reloads() > a_reloads
    });
    // a, its owner, refuses the other one now.
    assert_eq!(room.udhcpc(dir.path(), &of_a, 2), None, "{}", a.log());
    poll("site_enrolments emptied", || {
        pg.query("SELECT count(*) FROM site_enrolments") == "0"
    });
    // A removal of what no file holds is refused, naming the file.
    let config = b.fx.config_path();
    let (ok, _, err) = run(
        std::process::Command::new(env!("CARGO_BIN_EXE_bootpool")).args([
            "client",
            "remove",
            &of_b,
            "--config",
            config.to_str().unwrap(),
        ]),
        60,
    );
    assert!(!ok && err.contains("is not enrolled in"), "{err}");
}

/// ISC dhclient on the bridge (its MAC set by the caller): `done SERVER` once bound, else its
/// log.
fn dhclient(room: &Room, dir: &std::path::Path) -> String {
    let (line, log) = dhclient_once(room, dir, None, "done $new_dhcp_server_identifier", "");
    // dhclient configured the bridge: take the address off for the next client.
    room.exec(&["ip", "addr", "flush", "dev", &room.bridge]);
    if line.is_empty() { log } else { line }
}

/// ISC dhclient once (`-1`) on `room`'s bridge, DHCPv6's `-6 -D LL` when `six`, its files
/// and its `conf` in `dir`: its script appends `echo`'s words (shell, when the reason is BOUND
/// or BOUND6) to `dir/out`. The first line written (empty when none within 25 s), and
/// dhclient's log. Then killed: `ip netns exec` execs dhclient, so no RELEASE is sent.
fn dhclient_once(
    room: &Room,
    dir: &std::path::Path,
    six: Option<&str>,
    echo: &str,
    conf: &str,
) -> (String, String) {
    std::fs::create_dir_all(dir).unwrap();
    let out = dir.join("out");
    let script = dir.join("script.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$reason\" in BOUND|BOUND6) echo \"{echo}\" >> {};; esac\nexit 0\n",
            out.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("dhclient.conf"), conf).unwrap();
    let file = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let mut args: Vec<String> = match six {
        Some(flag) => vec![flag.into(), "-D".into(), "LL".into()],
        None => Vec::new(),
    };
    args.extend(["-d", "-1", "-v"].map(String::from));
    for (flag, name) in [
        ("-cf", "dhclient.conf"),
        ("-sf", "script.sh"),
        ("-pf", "dhclient.pid"),
        ("-lf", "dhclient.leases"),
    ] {
        args.extend([flag.to_string(), file(name)]);
    }
    args.push(room.bridge.clone());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = Link::command(&room.ns, "dhclient", &args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("log")).unwrap())
        .spawn()
        .expect("dhclient runs");
    let mut said = String::new();
    for _ in 0..500 {
        said = std::fs::read_to_string(&out).unwrap_or_default();
        if !said.is_empty() || child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let line = said.lines().next().unwrap_or_default().to_string();
    (
        line,
        std::fs::read_to_string(dir.join("log")).unwrap_or_default(),
    )
}

/// Members `a` and `b` on one range with `placement: site`, once `a` sees `b`'s link in `b`'s
/// heartbeat (its published load), so that `a` places boots on it.
fn placing_pair(pg: &Postgres, room: &Room) -> (Member, Member) {
    let range = "10.79.1.0-10.79.2.255";
    let a = Member::with_range(room, 1, &pg.socket_url(), range);
    let b = Member::with_range(room, 2, &pg.socket_url(), range);
    poll("a sees b's link in b's heartbeat", || {
        let v: serde_json::Value = serde_json::from_str(&a.get("/api/v1/site")).unwrap();
        v["members"].as_array().unwrap().iter().any(|m| {
            m["name"] == "b"
                && m["live"] == true
                && m["load"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|p| p["own"] == true))
        })
    });
    (a, b)
}

/// A client `a` placed on `b` is `b`'s client from its very first request, made at once
/// after `a`'s ACK, before `b`'s once-a-second read of the site's leases: `b` holds a request
/// from an address it does not know until it has read them again (`Identity::standing_held`).
/// Without the hold the client was a stranger there, 16 connections at most, and its 17th
/// concurrent fetch was refused (a storm's firmware was refused TFTP's `server busy` that
/// way, once the strangers' pool was full).
#[test]
fn a_client_placed_on_another_member_is_a_client_there_from_its_first_request() {
    let pg = Postgres::start();
    let room = Room::new(2);
    let (a, b) = placing_pair(&pg, &room);
    let dir = tempfile::tempdir().unwrap();
    let kernel = "http://10.79.0.2:8080/boot/demo/vmlinuz";
    for mac in macs_of("a", 4) {
        let (by, ip) = room.udhcpc_with(dir.path(), &mac, 3, &[]).expect(&mac);
        assert_eq!(by, "10.79.0.1", "{mac}: answered by its owner\n{}", a.log());
        if a.link(&mac).as_deref() != Some("10.79.0.2") {
            continue;
        }
        // At once: the client, at its address, fetches the kernel from b on 20 connections at
        // the same time, more than a stranger's 16 (`service::http::STRANGERS`).
        room.exec(&["ip", "link", "set", &room.bridge, "address", &mac]);
        room.exec(&["ip", "addr", "flush", "dev", &room.bridge]);
        room.exec(&[
            "ip",
            "addr",
            "add",
            &format!("{ip}/16"),
            "dev",
            &room.bridge,
        ]);
        let mut args = vec!["-sS", "--fail", "--parallel", "--parallel-immediate"];
        args.extend(["--parallel-max", "20"]);
        for _ in 0..20 {
            args.extend(["-o", "/dev/null", kernel]);
        }
        let (ok, _, err) = run(&mut Link::command(&room.ns, "curl", &args), 60);
        assert!(
            ok,
            "20 fetches at once from b, at once after a's ACK: {err}\n{}",
            b.log()
        );
        return;
    }
    panic!("a placed none of its 4 boots on b\n{}", a.log());
}

/// Two members on one range: a client `a` owns, placed on `b`'s link by `a` (the second of
/// `a`'s clients: `a` counts the first on its own link), is told `b` as its next-server by
/// `a`, and `b` serves it: its boot script names `b`'s link, its kernel comes over HTTP and
/// TFTP, its NBD root attaches. An address no member leased gets no root from `b`.
#[test]
fn a_client_placed_on_another_member_is_served_there_and_a_stranger_is_not() {
    let pg = Postgres::start();
    let room = Room::new(2);
    let (a, b) = placing_pair(&pg, &room);
    let dir = tempfile::tempdir().unwrap();
    let mut bound = Vec::new();
    for mac in macs_of("a", 4) {
        let (by, ip) = room.udhcpc_with(dir.path(), &mac, 3, &[]).expect(&mac);
        assert_eq!(by, "10.79.0.1", "{mac}: answered by its owner\n{}", a.log());
        bound.push((mac, ip));
    }
    // The link each was given, as a's lease file keeps it (a plain DHCP answer names no
    // next-server: no boot file).
    let (mac, ip) = bound
        .into_iter()
        .find(|(mac, _)| a.link(mac).as_deref() == Some("10.79.0.2"))
        .unwrap_or_else(|| panic!("a placed none of its 4 boots on b\n{}", a.log()));

    // b has the client's boot from a's rows (its DHCP) before the client asks b for files: b
    // ties the client's address to it from a's ACK.
    let boot_on = |m: &Member| -> Option<serde_json::Value> {
        let v: serde_json::Value =
            serde_json::from_str(&m.get(&format!("/api/v1/boots?mac={mac}"))).ok()?;
        v.as_array()?.last().cloned()
    };
    poll("b has a's record of the client's DHCP", || {
        boot_on(&b).is_some_and(|v| v["ip"] == ip.as_str())
    });

    // The client, at its address on the room's side, fetches from b.
    room.exec(&["ip", "link", "set", &room.bridge, "address", &mac]);
    room.exec(&[
        "ip",
        "addr",
        "add",
        &format!("{ip}/16"),
        "dev",
        &room.bridge,
    ]);
    let fetch = |args: &[&str]| run(&mut Link::command(&room.ns, args[0], &args[1..]), 60);
    let script = format!("http://10.79.0.2:8080/boot/script/{mac}.ipxe");
    poll("b's script for the client names b's link", || {
        let (ok, body, _) = fetch(&["curl", "-sS", "--fail", &script]);
        ok && body.contains("http://10.79.0.2:8080/")
    });
    let (ok, _, err) = fetch(&[
        "curl",
        "-sS",
        "--fail",
        "-o",
        "/dev/null",
        "http://10.79.0.2:8080/boot/demo/vmlinuz",
    ]);
    assert!(ok, "the kernel over HTTP from b: {err}\n{}", b.log());
    let got = dir.path().join("undionly.kpxe");
    // The ports b's TFTP and NBD took (the fixture's ports are the kernel's choice).
    let log = b.log();
    let port_of = |what: &str| {
        log.split(what)
            .nth(1)
            .and_then(|r| r.split([')', ' ']).next())
            .unwrap_or_else(|| panic!("no {what} port in b's log\n{log}"))
    };
    let port = port_of("tftp=Some(0.0.0.0:");
    let root = format!("nbd://10.79.0.2:{}/demo", port_of(" nbd=0.0.0.0:"));
    let (ok, _, err) = fetch(&[
        "tftp",
        "10.79.0.2",
        port,
        "-c",
        "get",
        "undionly.kpxe",
        got.to_str().unwrap(),
    ]);
    assert!(
        ok && got.metadata().is_ok_and(|m| m.len() > 0),
        "TFTP from b: {err}\n{}",
        b.log()
    );
    let mut said = String::new();
    let attached = (0..50).any(|_| {
        let (ok, _, err) = fetch(&["nbdcopy", &root, "null:"]);
        said = err;
        ok || {
            std::thread::sleep(Duration::from_millis(200));
            false
        }
    });
    assert!(attached, "the client's NBD root at b: {said}\n{}", b.log());

    // The record says who served each phase (issue 47 part 5), on either member's API: its
    // DHCP by a, its files and root by b, which never moved.
    let members_of = |v: &serde_json::Value| -> Vec<(String, Vec<String>)> {
        v["served"]
            .as_array()
            .map(|s| {
                s.iter()
                    .map(|p| {
                        let by = p["by"].as_array().unwrap();
                        let names = by.iter().map(|t| t["member"].as_str().unwrap().to_string());
                        (p["phase"].as_str().unwrap().to_string(), names.collect())
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    for m in [&a, &b] {
        let mut seen = Vec::new();
        let told = (0..100).any(|_| {
            seen = boot_on(m).map(|v| members_of(&v)).unwrap_or_default();
            let rooted = seen.iter().any(|(p, by)| p == "root" && by == &["b"]);
            if !rooted {
                std::thread::sleep(Duration::from_millis(100));
            }
            rooted
        });
        assert!(told, "{}: no root served by b: {seen:?}", m.log());
        let (first, rest) = seen.split_first().unwrap();
        assert_eq!(
            first,
            &("dhcp".to_string(), vec!["a".to_string()]),
            "{seen:?}"
        );
        assert!(rest.iter().all(|(_, by)| by == &["b"]), "{seen:?}");
    }

    // A stranger: an address of the room no member leased. Its root is refused by b, asked
    // twice (the first ask has b read the site's leases again; nothing there either).
    room.exec(&["ip", "addr", "flush", "dev", &room.bridge]);
    room.exec(&["ip", "addr", "add", "10.79.3.3/16", "dev", &room.bridge]);
    for _ in 0..2 {
        let (ok, _, _) = fetch(&["nbdcopy", &root, "null:"]);
        assert!(!ok, "b gave a stranger its root\n{}", b.log());
        std::thread::sleep(Duration::from_millis(1500));
    }
    assert!(
        b.log().contains("nbd client holds no lease of a pool booting this image over nbd; refused peer=10.79.3.3"),
        "{}",
        b.log()
    );
    drop((a, b));
}

/// Busybox udhcpc leases `mac` from `server` (its address on the bridge), then curl fetches a
/// boot file over HTTP from that address as the client: the address leased.
fn boot_through(room: &Room, dir: &std::path::Path, mac: &str, server: &str) -> String {
    let (by, ip) = room.udhcpc_with(dir, mac, 5, &[]).expect(mac);
    assert_eq!(by, server, "{mac}");
    room.exec(&[
        "ip",
        "addr",
        "add",
        &format!("{ip}/16"),
        "dev",
        &room.bridge,
    ]);
    let url = format!("http://{server}:8080/boot/loaders/bootpool-overlay.cpio");
    let args = ["-sS", "--fail", "-o", "/dev/null", "--interface", &ip, &url];
    let (ok, _, err) = run(&mut Link::command(&room.ns, "curl", &args), 30);
    room.exec(&["ip", "addr", "flush", "dev", &room.bridge]);
    assert!(ok, "curl {url}: {err}");
    ip
}

/// Issue 46 parts 1-2: member `a` started while PostgreSQL is down serves alone (busybox
/// udhcpc leased, curl fetching a boot file), says its records' database is unreachable, and
/// parks the boot's records; once PostgreSQL is up its heartbeat row and the parked records
/// are in the database. Then `b` joins, boots a client of its own, and `a`'s API shows that
/// boot (its clients list, and b's count of clients in the site view).
#[test]
fn a_member_started_without_its_database_boots_and_any_member_shows_the_whole_site() {
    let mut pg = Postgres::start();
    pg.stop_immediate();
    let room = Room::new(2);
    let dir = tempfile::tempdir().unwrap();
    let a = Member::new(&room, 1, &pg.socket_url());
    let v: serde_json::Value = serde_json::from_str(&a.get("/api/v1/site")).unwrap();
    assert_eq!(v["records"]["reachable"], false, "{v}");
    assert_eq!(v["members"].as_array().unwrap().len(), 1, "{v}");

    // Alone, a answers every client: one of b's buckets too.
    let mac = macs_of("b", 1)[0].clone();
    let ip = boot_through(&room, dir.path(), &mac, "10.79.0.1");
    let parked = a.fx.path().join("var").join("records.spool");
    poll("a's records of the boot parked", || {
        std::fs::read_to_string(&parked).is_ok_and(|t| t.contains(&mac) && t.contains(&ip))
    });

    // PostgreSQL up: a joins, writes its records, and the API says the database answers.
    pg.start_again();
    let made = |table: &str| pg.query(&format!("SELECT to_regclass('{table}') IS NOT NULL")) == "t";
    poll("a's heartbeat row", || {
        made("site_members")
            && pg.query("SELECT count(*) FROM site_members WHERE name = 'a'") == "1"
    });
    let file = format!("SELECT count(*) > 0 FROM events WHERE ip = '{ip}' AND event = 'file'");
    poll("the boot's records in events", || {
        made("events")
            && pg.query(&file) == "t"
            && pg.query(&format!(
                "SELECT count(*) > 0 FROM events WHERE mac = '{mac}' AND member = 'a'"
            )) == "t"
    });
    poll("a's records spool emptied", || !parked.exists());
    poll("a says its records' database answers", || {
        let v: serde_json::Value = serde_json::from_str(&a.get("/api/v1/site")).unwrap();
        v["records"]["reachable"] == true && v["records"]["parked"] == 0
    });

    // b joins and boots a client of its own: a shows it, and b's count of clients.
    let b = Member::new(&room, 2, &pg.socket_url());
    both_live(&a, &b);
    let mac_b = macs_of("b", 2)[1].clone();
    boot_through(&room, dir.path(), &mac_b, "10.79.0.2");
    poll("b's client in a's clients", || {
        let v: serde_json::Value = serde_json::from_str(&a.get("/api/v1/clients")).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .any(|c| c["mac"] == mac_b.as_str())
    });
    let v: serde_json::Value = serde_json::from_str(&a.get("/api/v1/site")).unwrap();
    let c = &v["clients"]["b"];
    let count = |k: &str| c[k].as_u64().unwrap();
    assert!(
        count("booting") + count("booted") + count("failed") >= 1,
        "{v}"
    );
    // a never reads b's boot twice, nor its own back: one boot each.
    let v: serde_json::Value = serde_json::from_str(&a.get("/api/v1/clients")).unwrap();
    for m in [&mac, &mac_b] {
        let c = v
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["mac"] == m.as_str());
        assert_eq!(c.unwrap()["boots"], 1, "{m}: {v}");
    }
}

/// Two members on one DHCPv6 range (`site_leases6`, docs/site.md "Leases"): ISC dhclient -6
/// clients, each bound by the member RFC 3074's hash gives its DUID and by no other, never one
/// address to two clients in the members' bindings or in the site's table; `b` killed with
/// -9, its client asking again (a SOLICIT with its same DUID) is bound by `a` to the address
/// `b` gave it, and a new client by `a` to an address no binding of the site holds.
#[test]
fn members_sharing_one_dhcp6_range_never_bind_an_address_twice() {
    let pg = Postgres::start();
    let room = Room::new(2);
    room.ipv6();
    let (range_a, range_b) = ("10.79.1.0-10.79.1.255", "10.79.2.0-10.79.2.255");
    let a = Member::with_config(&room, 1, &pg.socket_url(), Dhcp::Leasing(range_a), true);
    let mut b = Member::with_config(&room, 2, &pg.socket_url(), Dhcp::Leasing(range_b), true);
    both_live(&a, &b);
    let dir = tempfile::tempdir().unwrap();
    let logs = |a: &Member, b: &Member| format!("a:\n{}\nb:\n{}", a.log(), b.log());
    let dhclient = |mac: &str, run: &str| {
        let at = dir.path().join(format!("{mac}-{run}"));
        let got = room.dhclient6(&at, mac);
        (
            got,
            std::fs::read_to_string(at.join("log")).unwrap_or_default(),
        )
    };

    // Three clients of each member: each bound by its owner alone.
    let mut given: Vec<(&str, String, Ipv6Addr)> = Vec::new();
    for who in ["a", "b"] {
        for mac in macs6_of(who, 3) {
            let (got, log) = dhclient(&mac, "1");
            let addr = got.unwrap_or_else(|| {
                panic!("{mac}: dhclient -6 bound nothing:\n{log}\n{}", logs(&a, &b))
            });
            given.push((who, mac, addr));
        }
    }
    let (on_a, on_b) = (a.bound6(), b.bound6());
    for (who, mac, addr) in &given {
        let (mine, other) = if *who == "a" {
            (&on_a, &on_b)
        } else {
            (&on_b, &on_a)
        };
        assert!(
            mine.contains(&(mac.clone(), *addr)),
            "{who} bound {mac} at {addr}: a {on_a:?} b {on_b:?}"
        );
        assert!(
            other.iter().all(|(m, _)| m != mac),
            "{mac} bound by both: a {on_a:?} b {on_b:?}"
        );
    }
    // Never one address twice, all of the one range.
    let range = "fd79::100".parse::<Ipv6Addr>().unwrap()..="fd79::1ff".parse().unwrap();
    let addrs: BTreeSet<Ipv6Addr> = given.iter().map(|g| g.2).collect();
    assert_eq!(addrs.len(), given.len(), "{given:?}");
    assert!(addrs.iter().all(|x| range.contains(x)), "{given:?}");
    // The site's table the same, both members writing, once the spools are written.
    let counts = "SELECT count(*) || ' ' || count(DISTINCT ip) || ' ' || count(DISTINCT member) \
                  FROM site_leases6";
    poll("the spools written to site_leases6", || {
        pg.query(counts) == "6 6 2"
    });
    assert_eq!(a.spooled6() + b.spooled6(), 0);

    // b killed with -9: a takes its clients, and b's client keeps its address.
    b.kill();
    poll("a sees b dead", || {
        a.site().0 == [("a".to_string(), true), ("b".to_string(), false)]
    });
    let (_, mac, held) = given.iter().find(|g| g.0 == "b").unwrap().clone();
    let (again, log) = dhclient(&mac, "2");
    assert_eq!(again, Some(held), "{mac}:\n{log}\n{}", logs(&a, &b));
    assert!(
        a.bound6().contains(&(mac.clone(), held)),
        "{:?}",
        a.bound6()
    );
    poll("a's binding of it written to site_leases6", || {
        pg.query(&format!(
            "SELECT member FROM site_leases6 WHERE mac = '{mac}'"
        )) == "a"
    });
    // A new client: an address of the range no binding of the site holds.
    let new = macs6_of("b", 4)[3].clone();
    let (fresh, log) = dhclient(&new, "1");
    let fresh = fresh.unwrap_or_else(|| panic!("{new}:\n{log}\n{}", logs(&a, &b)));
    assert!(
        range.contains(&fresh) && !addrs.contains(&fresh),
        "{fresh} {given:?}"
    );
}

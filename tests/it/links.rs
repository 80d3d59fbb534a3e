//! The server's links as clients meet them: the `bootpool` binary in a namespace with two
//! NICs on one subnet (no policy routing, so the routing table sends everything out of the
//! first), clients on the switch behind them, speaking through programs this project did not
//! write (curl over HTTP and TFTP, nbdcopy, busybox udhcpc). Replies leave by the link they
//! were asked on; several clients downloading over a full, shaped link are paced to equal
//! shares of it, as the daemon's /metrics shows, and moved to a link with room when there is
//! one. Needs root.

use crate::common::netns::{Daemon, Link};
use crate::common::{Fixture, Loopback, run};
use bootpool::steer::fair_share::{self, MAX_BOOST, WEIGHTS};
use bootpool::steer::firmware;
use std::process::Child;

const NBD_MAC: &str = "52:54:00:77:00:11";
const MIB: u64 = 1 << 20;

/// The fixture's `nbd-room` served by a server on `subnet` (`10.77.N`) whose links are `.1`
/// (on `first_if`) and `.2`, every service on its standard port.
fn config(subnet: &str, first_if: &str) -> Loopback {
    Loopback::default()
        .on_veth(subnet, first_if)
        .server(&format!("links: [{subnet}.1, {subnet}.2]"))
        .http("0.0.0.0:8080")
        .standard_ports()
        .without_pool("nfs-room")
}

/// What the admin sets on a server with several NICs on one subnet (docs/links.md): each NIC
/// answers ARP for its own addresses and asks with them.
fn without_arp_flux(link: &Link) {
    for (key, value) in [("arp_ignore", "1"), ("arp_announce", "2")] {
        let setting = format!("net.ipv4.conf.all.{key}={value}");
        link.in_server(&["sysctl", "-qw", &setting]);
    }
}

/// Runs `program args` in the client's namespace: (succeeded, stdout + stderr).
fn client(link: &Link, program: &str, args: &[&str]) -> (bool, String) {
    let (ok, out, err) = run(&mut Link::command(&link.client_ns, program, args), 60);
    (ok, out + &err)
}

/// The daemon's /metrics, read from the server itself through the first link's address.
fn metrics(link: &Link, address: &str) -> String {
    let url = format!("http://{address}:8080/metrics");
    let (ok, text, err) = run(
        &mut Link::command(&link.server_ns, "curl", &["-sS", &url]),
        30,
    );
    assert!(ok, "{err}");
    text
}

/// The value of the series `name{link="dev"}` in a /metrics text.
fn series(text: &str, name: &str, dev: &str) -> Option<u64> {
    let start = format!("{name}{{link=\"{dev}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&start)?.parse().ok())
}

/// Each link's bytes sent while `f` ran.
fn sent_during(link: &Link, f: impl FnOnce()) -> Vec<u64> {
    let before = link.server_tx_bytes();
    f();
    let after = link.server_tx_bytes();
    after.iter().zip(&before).map(|(a, b)| a - b).collect()
}

#[test]
fn replies_leave_by_the_link_they_were_asked_on() {
    let link = Link::switched(&["10.77.5.1/24", "10.77.5.2/24"]);
    without_arp_flux(&link);
    // The routing table alone would send a reply from the second address out of the first
    // link, as it would any reply to the subnet.
    let (ok, route, err) = run(
        &mut Link::command(
            &link.server_ns,
            "ip",
            &["route", "get", "10.77.5.120", "from", "10.77.5.2"],
        ),
        10,
    );
    assert!(ok, "{err}");
    assert!(
        route.contains(&format!("dev {} ", link.server_ifs[0])),
        "{route}"
    );
    let fx = Fixture::new();
    fx.write_config(&config("10.77.5", &link.server_if));
    let daemon = Daemon::start(&link, &fx, 1);
    assert!(
        daemon
            .log_text()
            .contains("replies leave by the link they were asked on"),
        "{}",
        daemon.log_text()
    );
    // The client holds a lease of the NBD pool, as its root attach requires.
    link.udhcpc(fx.path(), NBD_MAC, true)
        .expect("a lease for the NBD pool's MAC");

    let on_second = |what: &str, f: &dyn Fn() -> (bool, String), bytes: u64| {
        let sent = sent_during(&link, || {
            let (ok, said) = f();
            assert!(ok, "{what}: {said}");
        });
        assert!(sent[1] >= bytes, "{what}: the second link sent {sent:?}");
        assert!(sent[0] < bytes / 4, "{what}: the first link sent {sent:?}");
    };
    // HTTP (the kernel, 3 MiB), TFTP (the loader) and an NBD root read (16 MiB), each asked
    // at the second link's address.
    on_second(
        "http",
        &|| {
            client(
                &link,
                "curl",
                &[
                    "-sS",
                    "-o",
                    "/dev/null",
                    "http://10.77.5.2:8080/boot/demo/vmlinuz",
                ],
            )
        },
        3 * MIB,
    );
    on_second(
        "tftp",
        &|| {
            client(
                &link,
                "curl",
                &["-sS", "-o", "/dev/null", "tftp://10.77.5.2/undionly.kpxe"],
            )
        },
        70_000,
    );
    on_second(
        "nbd",
        &|| client(&link, "nbdcopy", &["nbd://10.77.5.2/demo", "null:"]),
        16 * MIB,
    );
    // The server's own requests to a link's address go through loopback and are answered.
    assert!(metrics(&link, "10.77.5.2").contains("bootpool_requests_total"));
    drop(daemon);
}

/// Four client addresses, `SUBNET.61` to `.64`, on the client namespace's switch.
fn four_clients(link: &Link, subnet: &str) -> Vec<String> {
    let clients: Vec<String> = (61..65).map(|i| format!("{subnet}.{i}")).collect();
    for c in &clients {
        let cidr = format!("{c}/24");
        link.in_client(&["ip", "addr", "add", &cidr, "dev", &link.client_if]);
    }
    clients
}

/// A download by `client` (one of the client namespace's addresses) of `path`.
fn download(link: &Link, from: &str, url: &str) -> Child {
    Link::command(
        &link.client_ns,
        "curl",
        &["-sS", "--interface", from, "-o", "/dev/null", url],
    )
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .spawn()
    .expect("curl runs")
}

#[test]
fn clients_on_a_full_link_are_paced_to_shares_of_it() {
    let link = Link::switched(&["10.77.6.1/24", "10.77.6.2/24"]);
    without_arp_flux(&link);
    // The first link is shaped to 50 Mbit/s, as pools.yaml says.
    let dev = link.server_if.clone();
    link.in_server(&[
        "tc", "qdisc", "add", "dev", &dev, "root", "tbf", "rate", "50mbit", "burst", "64k",
        "latency", "20ms",
    ]);
    let fx = Fixture::new();
    std::fs::write(
        fx.image_dir().join("vmlinuz"),
        crate::common::pattern(9, 6 * MIB as usize),
    )
    .unwrap();
    let speeds = format!("link_speeds: {{ {dev}: 50mbit }}");
    fx.write_config(&config("10.77.6", &dev).server(&speeds));
    let _daemon = Daemon::start_without_sysfs(&link, &fx, 1);
    let clients = four_clients(&link, "10.77.6");
    // No firmware has asked anything: from its first round, the pacer's budget is the
    // link's whole capacity (before it, the headroom kept for firmware).
    let quiet = fair_share::budget(50_000_000, fair_share::QUIET_HEADROOM) as u64;
    let mut budget = 0;
    for _ in 0..50 {
        budget = series(
            &metrics(&link, "127.0.0.1"),
            "bootpool_pacing_budget_bytes",
            &dev,
        )
        .expect("the shaped link is paced");
        if budget == quiet {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(budget, quiet);

    // Four clients download the 6 MiB kernel at once: 24 MiB over a 50 Mbit/s link.
    let url = "http://10.77.6.1:8080/boot/demo/vmlinuz";
    let mut downloads: Vec<Child> = clients.iter().map(|c| download(&link, c, url)).collect();
    // While they run, the pacer's last round is read until it shows several clients wanting
    // more than they got: then each has a share of the budget, and together no more.
    let mut seen = None;
    while downloads
        .iter_mut()
        .any(|d| d.try_wait().unwrap().is_none())
    {
        let text = metrics(&link, "127.0.0.1");
        let get = |name| series(&text, name, &dev).unwrap_or(0);
        let (wanting, share) = (
            get("bootpool_pacing_wanting"),
            get("bootpool_pacing_share_bytes"),
        );
        if wanting >= 2 && share > 0 {
            seen = Some((wanting, share, get("bootpool_pacing_clients")));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for mut d in downloads {
        assert!(d.wait().unwrap().success(), "a download failed");
    }
    let (wanting, share, active) = seen.expect("the pacer never saw two clients wanting more");
    assert!((2..=4).contains(&active), "{active} clients");
    // The share is the weighted level: a client weighs between 1 (a root) and the heaviest
    // boot-file weight (the first arrival's), and the level spends the budget. With at most
    // four active clients it is at least the budget over four of the heaviest; with two or
    // more wanting more than they got, each of weight 1 or more, they take no more than the
    // budget together (as far as the pacer raises the caps to make up what held-back clients
    // leave unused).
    let most = (budget as f64 * MAX_BOOST) as u64;
    let heaviest = WEIGHTS.boot * fair_share::arrival_weight(0, WEIGHTS.ahead);
    let least = budget as f64 / (active as f64 * heaviest);
    assert!(share as f64 >= least - 1.0, "share {share} of {budget}");
    assert!(
        share * wanting <= most + 4,
        "{wanting} x {share} > {budget}"
    );
    let text = metrics(&link, "127.0.0.1");
    assert!(series(&text, "bootpool_pacing_rounds_total", &dev).unwrap() > 0);
    assert!(series(&text, "bootpool_pacing_caps_set_total", &dev).unwrap() >= 2);

    // A firmware's request (here curl's TFTP read of the loader) brings the headroom back for
    // its transfer and `AFTER_TRANSFER` after it, then the budget is the whole link again.
    let asked = std::time::Instant::now();
    let got = Link::command(
        &link.client_ns,
        "curl",
        &["-sS", "-o", "/dev/null", "tftp://10.77.6.1/undionly.kpxe"],
    )
    .status()
    .expect("curl runs");
    assert!(got.success(), "the TFTP read failed");
    let kept = fair_share::budget(50_000_000, fair_share::HEADROOM) as u64;
    let budget_now = || {
        series(
            &metrics(&link, "127.0.0.1"),
            "bootpool_pacing_budget_bytes",
            &dev,
        )
        .unwrap()
    };
    let mut now = budget_now();
    while now != kept && asked.elapsed() < firmware::AFTER_TRANSFER / 2 {
        std::thread::sleep(std::time::Duration::from_millis(10));
        now = budget_now();
    }
    assert_eq!(now, kept, "after a TFTP request");
    while now != quiet && asked.elapsed() < firmware::AFTER_DISCOVER * 3 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        now = budget_now();
    }
    assert_eq!(now, quiet, "after {:?}", asked.elapsed());
    assert!(asked.elapsed() >= firmware::AFTER_TRANSFER);
}

/// Four clients download from the first of two full, shaped links while the second idles: the
/// pacer moves some of them to the second (their replies leave by it, their requests still go
/// to the first address), and every download arrives whole.
#[test]
fn clients_on_a_full_link_move_to_one_with_room() {
    let link = Link::switched(&["10.77.7.1/24", "10.77.7.2/24"]);
    without_arp_flux(&link);
    let devs = link.server_ifs.clone();
    for dev in &devs {
        link.in_server(&[
            "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", "50mbit", "burst", "64k",
            "latency", "20ms",
        ]);
    }
    let fx = Fixture::new();
    let kernel = crate::common::pattern(11, 6 * MIB as usize);
    std::fs::write(fx.image_dir().join("vmlinuz"), &kernel).unwrap();
    let speeds = format!(
        "link_speeds: {{ {}: 50mbit, {}: 50mbit }}",
        devs[0], devs[1]
    );
    fx.write_config(&config("10.77.7", &devs[0]).server(&speeds));
    let daemon = Daemon::start_without_sysfs(&link, &fx, 1);
    assert!(
        daemon.log_text().contains("moves=true"),
        "{}",
        daemon.log_text()
    );
    let clients = four_clients(&link, "10.77.7");
    let url = "http://10.77.7.1:8080/boot/demo/vmlinuz";
    let out = fx.path().join("got");
    std::fs::create_dir_all(&out).unwrap();
    let sent = sent_during(&link, || {
        let downloads: Vec<Child> = clients
            .iter()
            .map(|c| {
                let file = out.join(c);
                Link::command(
                    &link.client_ns,
                    "curl",
                    &["-sS", "--interface", c, "-o", file.to_str().unwrap(), url],
                )
                .stdin(std::process::Stdio::null())
                .spawn()
                .expect("curl runs")
            })
            .collect();
        for mut d in downloads {
            assert!(d.wait().unwrap().success(), "a download failed");
        }
    });
    for c in &clients {
        let got = std::fs::read(out.join(c)).unwrap();
        assert!(got == kernel, "{c} got {} bytes, not the kernel", got.len());
    }
    // 24 MiB asked of the first link; the second carried a good part of it.
    assert!(sent[1] >= 4 * MIB, "the second link sent {sent:?}");
    let text = metrics(&link, "127.0.0.1");
    let moved = series(&text, "bootpool_pacing_moved_away_total", &devs[0]).unwrap();
    assert!(moved >= 1, "{text}");
}

/// The value of the series `name{room="subnet"}` in a /metrics text.
fn room_series(text: &str, name: &str, room: &str) -> Option<u64> {
    let start = format!("{name}{{room=\"{room}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&start)?.parse().ok())
}

/// A room behind a router whose downlink (the room's uplink) is shaped to 20 Mbit/s, declared
/// in pools.yaml, while the server's link is 50 Mbit/s: four of its clients download at once.
/// The pacer bounds them together to the uplink's budget (its shares, not the link's), counts
/// what it sent them, and every download arrives whole.
#[test]
fn a_rooms_clients_are_paced_to_shares_of_its_uplink() {
    let link = Link::routed("10.77.9.1/24", "10.77.9.254/24", "10.78.9.1/24");
    let router = link.router.as_ref().unwrap();
    let shaped = Link::command(
        &router.ns,
        "tc",
        &[
            "qdisc",
            "add",
            "dev",
            &router.down,
            "root",
            "tbf",
            "rate",
            "20mbit",
            "burst",
            "64k",
            "latency",
            "20ms",
        ],
    )
    .status()
    .expect("tc runs");
    assert!(shaped.success());
    let clients: Vec<String> = (61..65).map(|i| format!("10.78.9.{i}")).collect();
    for c in &clients {
        let cidr = format!("{c}/24");
        link.in_client(&["ip", "addr", "add", &cidr, "dev", &link.client_if]);
    }
    link.in_client(&["ip", "route", "add", "default", "via", "10.78.9.1"]);
    let fx = Fixture::new();
    std::fs::write(
        fx.image_dir().join("vmlinuz"),
        crate::common::pattern(9, 6 * MIB as usize),
    )
    .unwrap();
    let dev = link.server_if.clone();
    let speeds = format!("link_speeds: {{ {dev}: 50mbit }}");
    fx.write_config(
        &Loopback::default()
            .on_veth("10.77.9", &dev)
            .http("0.0.0.0:8080")
            .standard_ports()
            .without_pool("nfs-room")
            .server(&speeds)
            .more_subnets(
                "- { subnet: 10.78.9.0/24, range: 10.78.9.100-10.78.9.199, router: 10.78.9.1, uplink: 20mbit }\n",
            ),
    );
    let _daemon = Daemon::start_without_sysfs(&link, &fx, 1);
    let room = "10.78.9.0/24";
    let capacity = room_series(
        &metrics(&link, "127.0.0.1"),
        "bootpool_room_uplink_capacity_bytes",
        room,
    );
    assert_eq!(capacity, Some(20_000_000 / 8));

    let url = "http://10.77.9.1:8080/boot/demo/vmlinuz";
    let mut downloads: Vec<Child> = clients.iter().map(|c| download(&link, c, url)).collect();
    // While they run, the room's last round is read until its uplink bound them: then one
    // unit of weight's share times the clients stays within the uplink's budget (as far as
    // the pacer raises it to make up what held-back clients leave unused).
    let mut seen = None;
    while downloads
        .iter_mut()
        .any(|d| d.try_wait().unwrap().is_none())
    {
        let text = metrics(&link, "127.0.0.1");
        let get = |name| room_series(&text, name, room).unwrap_or(0);
        let (share, clients, budget) = (
            get("bootpool_room_share_bytes"),
            get("bootpool_room_clients"),
            get("bootpool_room_uplink_budget_bytes"),
        );
        if share > 0 && clients >= 2 {
            seen = Some((share, clients, budget));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for mut d in downloads {
        assert!(d.wait().unwrap().success(), "a download failed");
    }
    let (share, active, budget) = seen.expect("the uplink never bound the room's clients");
    assert!((2..=4).contains(&active), "{active} clients");
    let uplink = fair_share::budget(20_000_000, fair_share::HEADROOM) as u64;
    let quiet = fair_share::budget(20_000_000, fair_share::QUIET_HEADROOM) as u64;
    assert!(budget == uplink || budget == quiet, "budget {budget}");
    // Each client weighs at least 1: `active` of them at the share take no more than the
    // boosted budget; and the share is the uplink's, far below the 50 Mbit/s link's.
    let most = (budget as f64 * MAX_BOOST) as u64;
    assert!(share * active <= most + 4, "{active} x {share} > {most}");
    let link_budget = fair_share::budget(50_000_000, fair_share::HEADROOM) as u64;
    assert!(share < link_budget / active, "share {share}");
    let text = metrics(&link, "127.0.0.1");
    assert!(room_series(&text, "bootpool_room_full_rounds_total", room).unwrap() > 0);
    let sent = room_series(&text, "bootpool_room_sent_bytes_total", room).unwrap();
    assert!(sent >= 4 * 6 * MIB, "{sent} bytes counted for the room");
}

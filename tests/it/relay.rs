//! A room on a subnet of its own, behind a router that runs ISC dhcrelay, three network
//! namespaces (`Link::routed`): busybox udhcpc in the room gets an address, mask, router and DNS
//! of the room's subnet through the real relay (by its giaddr, and by RFC 3527's link selection
//! with dhcrelay's `-U`) and reaches its NBD root across the router, the lease and the API keep
//! the switch port option 82 named, and a relay `dhcp.relays` does not list gets silence,
//! counted in /metrics. In proxy mode, with
//! dnsmasq as the site's DHCP server on a fourth namespace, the PXE answer comes back through
//! the relay and the room's client fetches its loader over TFTP across the router. DHCPv6
//! through `dhcrelay -6` (RELAY-FORW, RELAY-REPL) gives `dhclient -6` an address.

use crate::common::netns::{Link, Router};
use crate::common::pxe;
use crate::common::{Fixture, Loopback, netns::Daemon};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

const SERVER: &str = "10.77.1.1";
/// The router on the server's segment: where relayed requests come from.
const UP: &str = "10.77.1.254";
/// The router on the room's segment: the room's giaddr and default router.
const ROOM_ROUTER: &str = "10.20.0.1";

/// The server's own segment and the room's, 10.20.0.0/24; `relays` lists the allowed relays.
fn config(link: &Link, relays: &str) -> Loopback {
    Loopback::default()
        .on_veth("10.77.1", &link.server_if)
        .http(&format!("{SERVER}:8080"))
        .port("nbd", 10809)
        .more_subnets(&format!(
            "- {{ subnet: 10.20.0.0/24, range: 10.20.0.100-10.20.0.150, router: {ROOM_ROUTER}, dns: [10.20.0.53] }}\n"
        ))
        .dhcp(&format!("relays: [{relays}]"))
}

fn link() -> Link {
    Link::routed(
        &format!("{SERVER}/24"),
        &format!("{UP}/24"),
        &format!("{ROOM_ROUTER}/24"),
    )
}

/// dhcrelay in the router's namespace with `args`; killed when dropped.
struct Relay(Child);

impl Relay {
    /// Relaying the room's DHCPv4 to the server, with `flags` besides.
    fn v4(link: &Link, dir: &Path, flags: &[&str]) -> Relay {
        let r: &Router = link.router.as_ref().unwrap();
        let mut args = vec!["-4", "-id", r.down.as_str(), "-iu", r.up.as_str()];
        args.extend_from_slice(flags);
        args.push(SERVER);
        Relay::start(link, dir, &args)
    }

    fn start(link: &Link, dir: &Path, args: &[&str]) -> Relay {
        let r: &Router = link.router.as_ref().unwrap();
        let log_path = dir.join("dhcrelay.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let mut all = vec!["-d", "--no-pid"];
        all.extend_from_slice(args);
        let child = Link::command(&r.ns, "dhcrelay", &all)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("dhcrelay runs");
        // It relays once it says it listens on the room's side.
        let listening =
            crate::common::poll_until(Duration::from_secs(10), Duration::from_millis(50), || {
                std::fs::read_to_string(&log_path)
                    .unwrap_or_default()
                    .lines()
                    .any(|l| l.starts_with("Listening on ") && l.contains(&r.down))
            });
        assert!(
            listening,
            "dhcrelay did not start:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
        Relay(child)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// udhcpc in the room as `mac`: (address, mask, router, DNS), or `None` with no lease.
fn lease(link: &Link, fx: &Fixture, mac: &str) -> Option<(Ipv4Addr, String, String, String)> {
    let f = link.udhcpc(fx.path(), mac, false)?;
    Some((
        f[1].parse().unwrap(),
        f[2].clone(),
        f.get(3).cloned().unwrap_or_default(),
        f.get(4).cloned().unwrap_or_default(),
    ))
}

fn in_room_range(ip: Ipv4Addr) -> bool {
    (u32::from(Ipv4Addr::new(10, 20, 0, 100))..=u32::from(Ipv4Addr::new(10, 20, 0, 150)))
        .contains(&u32::from(ip))
}

#[test]
fn a_room_behind_a_relay_is_given_its_own_subnet_and_its_switch_port_is_kept() {
    let link = link();
    let fx = Fixture::new();
    fx.write_config(&config(&link, UP));
    let _daemon = Daemon::start(&link, &fx, 1);
    let down = link.router.as_ref().unwrap().down.clone();

    // dhcrelay with -a: giaddr is its room-side address, option 82 names the port (its
    // interface) as the circuit id.
    let relay = Relay::v4(&link, fx.path(), &["-a"]);
    let mac = "52:54:00:77:00:01";
    let (ip, mask, router, dns) = lease(&link, &fx, mac).expect("a lease through the relay");
    assert!(in_room_range(ip), "{ip}");
    assert_eq!(
        (mask.as_str(), router.as_str(), dns.as_str()),
        ("255.255.255.0", ROOM_ROUTER, "10.20.0.53")
    );
    let saved = bootpool::service::lease_file::read(&fx.path().join("var")).unwrap();
    let kept = saved
        .leases
        .iter()
        .find(|l| l.mac == mac)
        .and_then(|l| l.relayed.clone())
        .expect("the lease keeps its relay");
    assert_eq!(kept.giaddr, ROOM_ROUTER.parse::<Ipv4Addr>().unwrap());
    assert_eq!(kept.circuit_id.map(|c| c.to_string()), Some(down.clone()));
    // The API's client view shows the port of the client's newest boot.
    let (ok, body, err) = crate::common::run(
        &mut Link::command(
            &link.server_ns,
            "curl",
            &["-sf", &format!("http://{SERVER}:8080/api/v1/clients")],
        ),
        30,
    );
    assert!(ok, "{err}");
    let clients: serde_json::Value = serde_json::from_str(&body).unwrap();
    let client = clients
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["mac"] == mac)
        .unwrap_or_else(|| panic!("{mac} in {body}"));
    let relayed = &client["last"]["relayed"];
    assert_eq!(relayed["giaddr"], ROOM_ROUTER, "{body}");
    assert_eq!(relayed["circuit_id"], down.as_str(), "{body}");
    drop(relay);

    // With -U the giaddr is the router's address on the server's own segment, and RFC 3527's
    // link selection names the room: the room's subnet still answers.
    let _relay = Relay::v4(
        &link,
        fx.path(),
        &["-a", "-U", &link.router.as_ref().unwrap().up],
    );
    let (ip, _, router, _) =
        lease(&link, &fx, "52:54:00:77:00:02").expect("a lease by link selection");
    assert!(in_room_range(ip), "{ip}");
    assert_eq!(router, ROOM_ROUTER);
    let saved = bootpool::service::lease_file::read(&fx.path().join("var")).unwrap();
    let giaddr = saved
        .leases
        .iter()
        .find(|l| l.mac == "52:54:00:77:00:02")
        .and_then(|l| l.relayed.as_ref())
        .map(|r| r.giaddr);
    assert_eq!(
        giaddr,
        Some(UP.parse().unwrap()),
        "giaddr on the server's segment"
    );

    // A machine of the NBD pool, on its room's address, reaches its root across the router
    // (libnbd's nbdinfo): the lease it got through the relay is what NBD allows.
    let bound = link
        .udhcpc(fx.path(), "52:54:00:77:00:11", true)
        .expect("a lease for the NBD machine");
    assert!(in_room_range(bound[1].parse().unwrap()), "{bound:?}");
    link.in_client(&["ip", "route", "add", "default", "via", ROOM_ROUTER]);
    let (ok, size, err) = crate::common::run(
        &mut Link::command(
            &link.client_ns,
            "nbdinfo",
            &["--size", &format!("nbd://{SERVER}/demo")],
        ),
        30,
    );
    assert!(ok, "nbdinfo: {err}");
    assert_eq!(size.trim(), (16u64 << 20).to_string());
}

#[test]
fn a_relay_not_listed_in_dhcp_relays_gets_silence_and_is_counted() {
    let link = link();
    let fx = Fixture::new();
    fx.write_config(&config(&link, "10.77.1.253"));
    let daemon = Daemon::start(&link, &fx, 1);
    let _relay = Relay::v4(&link, fx.path(), &["-a"]);
    assert_eq!(lease(&link, &fx, "52:54:00:77:00:03"), None);
    let series = "bootpool_dhcp_unplaced_total{why=\"unlisted_relay\"}";
    assert!(link.metric(&format!("{SERVER}:8080"), series) > 0);
    let log = daemon.log_text();
    assert!(
        log.contains("relay 10.77.1.254 is not in dhcp.relays"),
        "{log}"
    );
}

/// dnsmasq as the site's DHCP server on a segment of its own (`Link::add_site`), giving the
/// room's addresses to requests its relay forwards; killed when dropped.
struct SiteDhcp(Child);

impl SiteDhcp {
    fn start(ns: &str, dev: &str, dir: &Path) -> SiteDhcp {
        let log = std::fs::File::create(dir.join("dnsmasq.log")).unwrap();
        let child = Link::command(
            ns,
            "dnsmasq",
            &[
                "--no-daemon",
                "--conf-file=/dev/null",
                "--port=0",
                "--user=root",
                "--no-ping",
                "--log-dhcp",
                &format!("--interface={dev}"),
                "--dhcp-range=10.20.0.100,10.20.0.150,255.255.255.0,1h",
                &format!("--dhcp-option=3,{ROOM_ROUTER}"),
                &format!("--dhcp-leasefile={}", dir.join("dnsmasq.leases").display()),
                &format!("--pid-file={}", dir.join("dnsmasq.pid").display()),
            ],
        )
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("dnsmasq runs");
        SiteDhcp(child)
    }
}

impl Drop for SiteDhcp {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Proxy mode across a relay, dnsmasq as the site's DHCP server on its own segment: the relay
/// forwards the room's PXE DISCOVER to both; dnsmasq offers the room's address, bootpool the boot
/// file, both back through the relay; the client, on the address dnsmasq gave it, fetches its
/// loader over TFTP from bootpool across the router (`limits.tftp_clients` holds every subnet).
#[test]
fn proxy_mode_answers_through_the_relay_beside_the_sites_dhcp_server() {
    let mut link = link();
    let site_up = link.add_site("10.88.0.1/24", "10.88.0.2/24");
    let fx = Fixture::new();
    fx.write_config(
        &Loopback::default()
            .on_veth("10.77.1", &link.server_if)
            .http(&format!("{SERVER}:8080"))
            .port("tftp", 69)
            .proxy()
            .more_subnets("- { subnet: 10.20.0.0/24 }\n")
            .dhcp(&format!("relays: [{UP}]")),
    );
    let _daemon = Daemon::start(&link, &fx, 1);
    let (site_ns, site_dev) = link.router.as_ref().unwrap().site.clone().unwrap();
    let _dnsmasq = SiteDhcp::start(&site_ns, &site_dev, fx.path());
    let _relay = Relay::v4(&link, fx.path(), &["-a", "-iu", &site_up, "10.88.0.2"]);

    let mac = [0x52, 0x54, 0, 0x77, 0, 5];
    let offers = pxe::offers(
        &link.client_ns,
        &link.client_if,
        mac,
        Duration::from_secs(4),
    );
    let server: Ipv4Addr = SERVER.parse().unwrap();
    let ours = offers
        .iter()
        .find(|o| o.server == server)
        .unwrap_or_else(|| panic!("no offer from bootpool through the relay: {offers:?}"));
    assert_eq!(
        ours.yiaddr,
        Ipv4Addr::UNSPECIFIED,
        "a proxy gives no address"
    );
    assert_eq!((ours.siaddr, ours.file.as_str()), (server, "undionly.kpxe"));
    let site = offers
        .iter()
        .find(|o| o.server == Ipv4Addr::new(10, 88, 0, 2))
        .unwrap_or_else(|| panic!("no offer from dnsmasq through the relay: {offers:?}"));
    assert!(in_room_range(site.yiaddr), "{offers:?}");

    // The address from the site's server, then TFTP from bootpool across the router.
    let bound = link
        .udhcpc(fx.path(), "52:54:00:77:00:05", true)
        .expect("an address from dnsmasq through the relay");
    assert!(in_room_range(bound[1].parse().unwrap()), "{bound:?}");
    assert_eq!(bound[3], ROOM_ROUTER, "{bound:?}");
    link.in_client(&["ip", "route", "add", "default", "via", ROOM_ROUTER]);
    let got = fx.path().join("fetched.kpxe");
    let (ok, _, err) = crate::common::run(
        &mut Link::command(
            &link.client_ns,
            "tftp",
            &[SERVER, "-c", "get", "undionly.kpxe", got.to_str().unwrap()],
        ),
        30,
    );
    assert!(ok, "{err}");
    assert_eq!(
        std::fs::read(&got).unwrap(),
        std::fs::read(fx.path().join("loaders/undionly.kpxe")).unwrap()
    );
}

/// DHCPv6 through `dhcrelay -6`: the room's `dhclient -6` gets an address of the range, the
/// SOLICIT and REQUEST carried in RELAY-FORW, the answers back in RELAY-REPL. The server's
/// address and the room's link are both inside `dhcp6.subnet` (a /16): its one range serves
/// the relayed room.
#[test]
fn dhcpv6_through_a_relay_gets_an_address_of_the_range() {
    let link = link();
    let r = link.router.as_ref().unwrap();
    let run = |ns: &str, args: &[&str]| {
        let (ok, _, err) = crate::common::run(&mut Link::command(ns, args[0], &args[1..]), 10);
        assert!(ok, "{args:?}: {err}");
    };
    for (ns, dev, cidr) in [
        (&link.server_ns, &link.server_if, Some("fd77:1::1/64")),
        (&r.ns, &r.up, Some("fd77:1::fe/64")),
        (&r.ns, &r.down, Some("fd77:20::1/64")),
        (&link.client_ns, &link.client_if, None),
    ] {
        // No duplicate address detection, the link bounced: addresses usable at once.
        run(
            ns,
            &[
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{dev}.accept_dad=0"),
            ],
        );
        run(ns, &["ip", "link", "set", dev, "down"]);
        run(ns, &["ip", "link", "set", dev, "up"]);
        if let Some(cidr) = cidr {
            run(ns, &["ip", "-6", "addr", "add", cidr, "dev", dev, "nodad"]);
        }
    }
    link.set_client_mac("52:54:00:77:00:06");
    crate::dhcp6::wait_for_link_local(&link);
    let fx = Fixture::new();
    let config = config(&link, UP).server("address6: \"fd77:1::1\"");
    fx.write_config(&format!(
        "{}dhcp6:\n  subnet: \"fd77::/16\"\n  range: \"fd77:20::100-fd77:20::1ff\"\n",
        &*config
    ));
    let _daemon = Daemon::start(&link, &fx, 1);
    let _relay = Relay::start(
        &link,
        fx.path(),
        &["-6", "-l", &r.down, "-u", &format!("fd77:1::1%{}", r.up)],
    );
    let line = link
        .dhclient(
            &fx.path().join("dhclient6"),
            &["-6"],
            "timeout 15;\n",
            "echo \"$reason $new_ip6_address\" >> $OUT",
            "BOUND6",
        )
        .unwrap_or_else(|log| panic!("no DHCPv6 lease through the relay:\n{log}"));
    let ip: std::net::Ipv6Addr = line.split(' ').nth(1).unwrap().parse().unwrap();
    let (first, last): (std::net::Ipv6Addr, std::net::Ipv6Addr) = (
        "fd77:20::100".parse().unwrap(),
        "fd77:20::1ff".parse().unwrap(),
    );
    assert!((first..=last).contains(&ip), "{line}");
}

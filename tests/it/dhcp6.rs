//! IPv6 interop: ISC `dhclient -6` against the `bootpool` binary over a veth pair between two
//! namespaces (an address from `dhcp6.range` and option 59, the boot-file URL, sent as iPXE's
//! user class asks it), the client's name in the Client FQDN option (39) when it asks as RFC
//! 4704 says, bootpool's router advertisements seen by the client's kernel, then
//! the iPXE script, a kernel over HTTP (`curl -g` to `[ADDR]`), a loader over TFTP
//! (tftp-hpa `-6`) and the root over NBD (libnbd's `nbdinfo`) from the client's DHCPv6
//! address, each recorded for its MAC. A forged RELEASE or DECLINE (another DUID with the
//! client's MAC, an address it does not hold) changes nothing, a storm of router
//! solicitations draws at most one advertisement per 3 s, and the bindings outlive a kill -9
//! (`state_dir/leases6.json`).

use crate::common::Fixture;
use crate::common::netns::{Daemon, Link};
use std::process::Stdio;
use std::time::Duration;

pub(crate) const SERVER: &str = "10.77.1.1";
pub(crate) const SERVER6: &str = "fd77:1::1";
pub(crate) const MAC: &str = "52:54:00:77:00:05";

pub(crate) fn config(iface: &str) -> String {
    format!(
        "\
server:
  interfaces: [{iface}]
  address: {SERVER}
  address6: \"{SERVER6}\"
  http: {SERVER}:0
  state_dir: var/
  loaders: loaders/
  ports: {{ dhcp: 67, tftp: 0, nfs: 0, nbd: 0, portmap: 0 }}
dhcp:
  subnet: 10.77.1.0/24
  range: 10.77.1.100-10.77.1.150
  lease: 1h
dhcp6:
  subnet: \"fd77:1::/64\"
  range: \"fd77:1::100-fd77:1::1ff\"
  router_advertisements: send
images:
  demo: {{ dir: images/demo }}
pools:
  nbd-room:
    image: demo
    root: nbd
    clients:
      - {{ macs: \"52:54:00:77:00:00-52:54:00:77:00:0f\" }}
"
    )
}

/// Both ends without duplicate address detection (bounced, so their link-local addresses are
/// usable at once), the server's IPv6 address on its end.
pub(crate) fn ipv6_link() -> Link {
    let link = Link::new(&format!("{SERVER}/24"));
    for (ns, dev) in [
        (&link.server_ns, &link.server_if),
        (&link.client_ns, &link.client_if),
    ] {
        let run = |args: &[&str]| {
            let (ok, _, err) = crate::common::run(&mut Link::command(ns, args[0], &args[1..]), 10);
            assert!(ok, "{args:?}: {err}");
        };
        run(&[
            "sysctl",
            "-qw",
            &format!("net.ipv6.conf.{dev}.accept_dad=0"),
        ]);
        run(&["ip", "link", "set", dev, "down"]);
        run(&["ip", "link", "set", dev, "up"]);
    }
    link.in_server(&[
        "ip",
        "-6",
        "addr",
        "add",
        &format!("{SERVER6}/64"),
        "dev",
        &link.server_if,
        "nodad",
    ]);
    link
}

/// Waits until the client end's link-local address is usable (dhclient needs it), or fails.
pub(crate) fn wait_for_link_local(link: &Link) {
    let show = [
        "-6",
        "addr",
        "show",
        "dev",
        &link.client_if,
        "scope",
        "link",
    ];
    let mut seen = String::new();
    let usable = || {
        let (_, text, _) = crate::common::run(&mut Link::command(&link.client_ns, "ip", &show), 10);
        seen = text;
        seen.contains("inet6 fe80") && !seen.contains("tentative")
    };
    let every = Duration::from_millis(100);
    assert!(
        crate::common::poll_until(Duration::from_secs(10), every, usable),
        "no usable link-local address:\n{seen}"
    );
}

/// `dhclient -6` as iPXE (user class `iPXE`, asking option 59): the address it bound and the
/// boot-file URL, with the address put on the client's end.
pub(crate) fn dhclient6(link: &Link, fx: &Fixture) -> Option<(String, String)> {
    // Option 15 as iPXE sends it: one class, 16-bit length then `iPXE`.
    let conf = "timeout 15;\n\
                option dhcp6.ipxe-class code 15 = string;\n\
                send dhcp6.ipxe-class 00:04:69:50:58:45;\n\
                also request dhcp6.bootfile-url;\n";
    let script = "echo \"$reason $new_ip6_address $new_dhcp6_bootfile_url\" >> $OUT\n\
                  [ \"$reason\" = BOUND6 ] && ip -6 addr add $new_ip6_address/128 dev $interface nodad";
    let line = link
        .dhclient(
            &fx.path().join("dhclient6"),
            &["-6"],
            conf,
            script,
            "BOUND6 ",
        )
        .unwrap_or_else(|log| panic!("dhclient -6 did not bind:\n{log}"));
    let mut f = line.split(' ').skip(1);
    Some((f.next()?.to_string(), f.next()?.to_string()))
}

/// `curl -g` in the client's namespace: the body, or None on an HTTP or transport error.
fn curl(link: &Link, url: &str) -> Option<Vec<u8>> {
    let out = Link::command(&link.client_ns, "curl", &["-gsf", "--max-time", "20", url])
        .stdin(Stdio::null())
        .output()
        .expect("curl runs");
    out.status.success().then_some(out.stdout)
}

/// Waits until bootpool's router advertisement put the prefix on-link in the client's kernel
/// (which meanwhile gives the client end its link-local address, which dhclient needs).
fn ready_for_dhcp6(link: &Link, daemon: &Daemon) {
    let mut routes = String::new();
    for _ in 0..100 {
        let (_, text, _) = crate::common::run(
            &mut Link::command(&link.client_ns, "ip", &["-6", "route", "show"]),
            10,
        );
        routes = text;
        // An on-link prefix learnt from an advertisement is a route that expires.
        if routes.contains("fd77:1::/64") && routes.contains("expires") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        routes.contains("fd77:1::/64") && routes.contains("expires"),
        "no advertised route:\n{routes}\n{}",
        daemon.log_text()
    );

    wait_for_link_local(link);
}

#[test]
fn dhclient6_gets_an_address_and_the_url_and_fetches_over_ipv6() {
    let link = ipv6_link();
    link.set_client_mac(MAC);
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if));
    let daemon = Daemon::start(&link, &fx, 1);
    ready_for_dhcp6(&link, &daemon);
    let (addr, url) = dhclient6(&link, &fx).expect("a DHCPv6 lease");
    assert!(addr.starts_with("fd77:1::1"), "{addr}");
    let port = bound_port(&daemon.log_text(), "http6");
    assert_eq!(
        url,
        format!("http://[{SERVER6}]:{port}/boot/script/{MAC}.ipxe"),
        "{}",
        daemon.log_text()
    );
    // The script, from the client's DHCPv6 address, sends the kernel over IPv6 too.
    let script = String::from_utf8(curl(&link, &url).expect("the script")).unwrap();
    let kernel = format!("http://[{SERVER6}]:{port}/boot/demo/vmlinuz");
    assert!(script.contains(&format!("kernel {kernel} ")), "{script}");
    let body = curl(&link, &kernel).expect("the kernel");
    assert_eq!(body.len(), 3 << 20);

    // TFTP over IPv6 (tftp-hpa), to the port the IPv4 TFTP has.
    let tport = bound_port(&daemon.log_text(), "tftp6");
    let got = fx.path().join("undionly.kpxe");
    let (ok, _, err) = crate::common::run(
        &mut Link::command(
            &link.client_ns,
            "tftp",
            &[
                "-6",
                SERVER6,
                &tport,
                "-m",
                "binary",
                "-c",
                "get",
                "undionly.kpxe",
                got.to_str().unwrap(),
            ],
        ),
        30,
    );
    assert!(ok, "tftp -6: {err}");
    assert_eq!(std::fs::metadata(&got).unwrap().len(), 70_000);

    // The root over NBD on IPv6 (libnbd's nbdinfo), allowed to the DHCPv6 address's MAC.
    let (ok, size, err) = nbd_size_over_ipv6(&link, &daemon);
    assert!(ok, "nbdinfo: {err}");
    assert_eq!(size.trim(), (16u64 << 20).to_string());

    // The record knows the client by its MAC: its DHCPv6 address, the script, the files and the
    // root's attach. Events reach the journal on their own schedule, so wait for all of them.
    let needles = [
        "\"dhcp6_reply\"".to_string(),
        format!("\"ip\":\"{addr}\""),
        "\"kind\":\"script\"".to_string(),
        "\"path\":\"/boot/demo/vmlinuz\"".to_string(),
        "\"path\":\"undionly.kpxe\"".to_string(),
        "\"root_attach\"".to_string(),
    ];
    let mine = |journal: &str, needle: &str| {
        journal
            .lines()
            .any(|l| l.contains(&format!("\"mac\":\"{MAC}\"")) && l.contains(needle))
    };
    let mut journal = String::new();
    crate::common::poll_until(Duration::from_secs(20), Duration::from_millis(250), || {
        journal = crate::common::recorded_events(&fx.path().join("var"));
        needles.iter().all(|n| mine(&journal, n))
    });
    for needle in &needles {
        assert!(mine(&journal, needle), "no {needle} for {MAC}:\n{journal}");
    }
    drop(daemon);
}

/// A host on the IPv6 network with an address of the subnet, no DHCPv6 binding and a MAC in
/// no pool is refused the root over NBD on IPv6, as on IPv4 (tests/it/trust.rs).
#[test]
fn a_stranger_on_ipv6_is_refused_the_nbd_root() {
    let link = ipv6_link();
    link.set_client_mac("52:54:00:77:00:ff");
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if));
    let daemon = Daemon::start(&link, &fx, 1);
    // Not the EUI-64 address of its MAC (which a pool's client may form itself): an address
    // nobody gave it.
    link.in_client(&[
        "ip",
        "-6",
        "addr",
        "add",
        "fd77:1::99/64",
        "dev",
        &link.client_if,
        "nodad",
    ]);
    let (ok, size, err) = nbd_size_over_ipv6(&link, &daemon);
    assert!(!ok, "a stranger attached over IPv6: {size}");
    // NBD_REP_ERR_POLICY: refused by the access rule, not lost on the way.
    assert!(err.contains("server policy prevents"), "{err}");
    assert!(daemon.log_text().contains("nbd client holds no lease"));
    drop(daemon);
}

/// The client's name goes out over DHCPv6 as RFC 4704 has it: `dhclient -6` sends a Client
/// FQDN option (asking the server to update DNS) and asks for it in its ORO, and its script
/// sees the name its entry gives (`pc05`) with the server's flags (N: no DNS update by the
/// server, S clear); asked for in the ORO without option 39 of its own, none comes back.
#[test]
fn dhclient6_hears_its_name_in_the_client_fqdn_option() {
    let link = ipv6_link();
    link.set_client_mac(MAC);
    let fx = Fixture::new();
    let named = config(&link.server_if).replace(
        "      - { macs: \"52:54:00:77:00:00-52:54:00:77:00:0f\" }\n",
        &format!("      - {{ mac: \"{MAC}\", name: pc05 }}\n"),
    );
    assert!(named.contains("name: pc05"));
    fx.write_config(&named);
    let daemon = Daemon::start(&link, &fx, 1);
    ready_for_dhcp6(&link, &daemon);
    let ask = |conf: &str, dir: &str| {
        let script = "echo \"$reason $new_fqdn_fqdn $new_fqdn_no_client_update $new_fqdn_server_update\" >> $OUT\n";
        link.dhclient(&fx.path().join(dir), &["-6"], conf, script, "BOUND6 ")
            .unwrap_or_else(|log| panic!("dhclient -6 did not bind:\n{log}"))
    };
    let line = ask(
        "timeout 15;\nsend fqdn.fqdn \"asked\";\nsend fqdn.server-update on;\nalso request dhcp6.fqdn;\n",
        "asked",
    );
    // dhclient's names for the flags: N is `no-client-update`, S `server-update`.
    assert_eq!(line.trim_end(), "BOUND6 pc05 true false");
    let line = ask("timeout 15;\nalso request dhcp6.fqdn;\n", "unasked");
    assert_eq!(
        line.trim_end(),
        "BOUND6",
        "sent without option 39 from the client"
    );
    drop(daemon);
}

/// libnbd's `nbdinfo --size` of the demo export at the server's IPv6 address, from the client
/// namespace: (succeeded, stdout, stderr).
fn nbd_size_over_ipv6(link: &Link, daemon: &Daemon) -> (bool, String, String) {
    let nbd = format!(
        "nbd://[{SERVER6}]:{}/demo",
        bound_port(&daemon.log_text(), "nbd6")
    );
    crate::common::run(
        &mut Link::command(&link.client_ns, "nbdinfo", &["--size", &nbd]),
        30,
    )
}

/// The port of listener `name` in the daemon's "bootpool serving" line (`http6=Some([::]:P)`).
fn bound_port(log: &str, name: &str) -> String {
    log.lines()
        .find_map(|l| l.split(&format!("{name}=Some(")).nth(1))
        .and_then(|r| r.split(')').next())
        .and_then(|at| at.rsplit(':').next())
        .unwrap_or_else(|| panic!("no {name} listener:\n{log}"))
        .to_string()
}

/// A host sends 2,000 router solicitations in about two seconds: bootpool answers them as
/// RFC 4861 6.2.6 says, at most one multicast advertisement per 3 s (and its unsolicited ones
/// 3 to 6 s apart), not one per solicitation.
#[test]
fn a_storm_of_router_solicitations_draws_an_advertisement_per_3_s_at_most() {
    let link = ipv6_link();
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if));
    let _daemon = Daemon::start(&link, &fx, 1);
    let dev = link.client_if.clone();
    let (solicited, advertisements, secs) = Link::within(&link.client_ns, move || {
        use socket2::{Domain, Protocol, Socket, Type};
        let s = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6)).unwrap();
        s.set_multicast_hops_v6(255).unwrap();
        s.set_unicast_hops_v6(255).unwrap();
        s.bind_device(Some(dev.as_bytes())).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        let name = std::ffi::CString::new(dev.clone()).unwrap();
        // SAFETY: a NUL-terminated name; the call reads it only.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        assert_ne!(index, 0, "no {dev}");
        let routers: std::net::SocketAddr =
            std::net::SocketAddrV6::new("ff02::2".parse().unwrap(), 0, 0, index).into();
        // Type 133, code 0; the kernel fills the checksum of a raw ICMPv6 socket.
        let rs = [133u8, 0, 0, 0, 0, 0, 0, 0];
        let start = std::time::Instant::now();
        let (mut sent, mut heard) = (0u32, 0u32);
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 1500];
        while start.elapsed() < Duration::from_secs(8) {
            for _ in 0..20 {
                if sent < 2000 && s.send_to(&rs, &routers.into()).is_ok() {
                    sent += 1;
                }
            }
            while let Ok(n) = s.recv(&mut buf) {
                // SAFETY: `recv` initialised the first n bytes.
                if n > 0 && unsafe { buf[0].assume_init() } == 134 {
                    heard += 1;
                }
            }
        }
        (sent, heard, start.elapsed().as_secs())
    });
    assert_eq!(solicited, 2000);
    assert!(advertisements >= 1, "no advertisement at all in {secs} s");
    let bound = secs as u32 / 3 + 2;
    assert!(
        advertisements <= bound,
        "{advertisements} advertisements for {solicited} solicitations in {secs} s (at most {bound})"
    );
}

/// After a client bound its DHCPv6 address, a host on the link sends RELEASE and DECLINE with
/// the client's MAC in the DUID: with a DUID of another form (another client's identifier,
/// the same MAC), and naming an address the client does not hold. Each gets NoBinding and
/// changes nothing: the client still attaches its root over IPv6.
#[test]
fn a_forged_dhcp6_release_or_decline_leaves_the_binding() {
    let link = ipv6_link();
    link.set_client_mac(MAC);
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if));
    let daemon = Daemon::start(&link, &fx, 1);
    ready_for_dhcp6(&link, &daemon);
    let (addr, _) = dhclient6(&link, &fx).expect("a DHCPv6 lease");
    let held: std::net::Ipv6Addr = addr.parse().unwrap();
    let (ok, _, err) = nbd_size_over_ipv6(&link, &daemon);
    assert!(ok, "nbdinfo before: {err}");

    let mac: bootpool::config::Mac = MAC.parse().unwrap();
    let server = bootpool::proto::dhcp6::server_duid(SERVER6.parse().unwrap());
    let option = |code: u16, value: &[u8]| {
        let mut o = code.to_be_bytes().to_vec();
        o.extend_from_slice(&(value.len() as u16).to_be_bytes());
        o.extend_from_slice(value);
        o
    };
    let message = |kind: u8, duid: &[u8], named: std::net::Ipv6Addr| {
        let mut m = vec![kind, 0x46, 0x6f, 0x72];
        m.extend(option(1, duid));
        m.extend(option(2, &server));
        let mut iaaddr = named.octets().to_vec();
        iaaddr.extend_from_slice(&[0; 8]);
        let mut ia = vec![0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        ia.extend(option(5, &iaaddr));
        m.extend(option(3, &ia));
        m
    };
    let mut llt = vec![0, 1, 0, 1, 0x12, 0x34, 0x56, 0x78];
    llt.extend_from_slice(&mac.0);
    let mut ll = vec![0, 3, 0, 1];
    ll.extend_from_slice(&mac.0);
    let elsewhere: std::net::Ipv6Addr = "fd77:1::1ff".parse().unwrap();
    let forged = [
        message(8, &llt, held),     // RELEASE, another DUID, its address
        message(9, &llt, held),     // DECLINE, likewise
        message(8, &ll, elsewhere), // RELEASE naming an address it does not hold
        message(9, &ll, elsewhere), // DECLINE, likewise
    ];
    let dev = link.client_if.clone();
    let answers = Link::within(&link.client_ns, move || {
        let name = std::ffi::CString::new(dev).unwrap();
        // SAFETY: a NUL-terminated name; the call reads it only.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        let s = std::net::UdpSocket::bind(std::net::SocketAddrV6::new(
            std::net::Ipv6Addr::UNSPECIFIED,
            546,
            0,
            index,
        ))
        .unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let servers = std::net::SocketAddrV6::new("ff02::1:2".parse().unwrap(), 547, 0, index);
        let mut answers = Vec::new();
        for m in forged {
            s.send_to(&m, servers).unwrap();
            let mut buf = [0u8; 1500];
            answers.push(
                s.recv(&mut buf)
                    .map(|n| buf[..n].to_vec())
                    .unwrap_or_default(),
            );
        }
        answers
    });
    for (k, a) in answers.iter().enumerate() {
        // A REPLY (7) whose status code option (13) says NoBinding (3).
        assert_eq!(a.first(), Some(&7), "message {k}: {a:?}");
        let status = a.windows(6).any(|w| w == [0, 13, w[2], w[3], 0, 3]);
        assert!(status, "message {k} not answered NoBinding: {a:?}");
    }
    let (ok, _, err) = nbd_size_over_ipv6(&link, &daemon);
    assert!(ok, "the client lost its root over IPv6: {err}");
    drop(daemon);
}

/// The bindings outlive a kill -9: a client bound before it keeps its address from the
/// restarted server, which gives the next client another one (with the bindings in memory
/// only, the next client got the first one's, the lowest of the range, again).
#[test]
fn dhcp6_bindings_survive_a_kill_9() {
    let link = ipv6_link();
    link.set_client_mac(MAC);
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if));
    let daemon = Daemon::start(&link, &fx, 1);
    ready_for_dhcp6(&link, &daemon);
    let (first, _) = dhclient6(&link, &fx).expect("a DHCPv6 lease");
    daemon.kill9();
    let daemon = Daemon::start(&link, &fx, 2);
    assert!(
        daemon.log_text().contains("DHCPv6 bindings read back"),
        "{}",
        daemon.log_text()
    );
    // Another client on the same link: its own MAC, DUID and lease file.
    link.in_client(&[
        "ip",
        "-6",
        "addr",
        "del",
        &format!("{first}/128"),
        "dev",
        &link.client_if,
    ]);
    let _ = std::fs::remove_dir_all(fx.path().join("dhclient6"));
    link.set_client_mac("52:54:00:77:00:06");
    wait_for_link_local(&link);
    let (second, _) = dhclient6(&link, &fx).expect("a DHCPv6 lease");
    assert_ne!(second, first, "{}", daemon.log_text());
    // The first client again (its MAC, a fresh DUID of it): the address it had.
    link.in_client(&[
        "ip",
        "-6",
        "addr",
        "del",
        &format!("{second}/128"),
        "dev",
        &link.client_if,
    ]);
    let _ = std::fs::remove_dir_all(fx.path().join("dhclient6"));
    link.set_client_mac(MAC);
    wait_for_link_local(&link);
    let (again, _) = dhclient6(&link, &fx).expect("a DHCPv6 lease");
    assert_eq!(again, first, "{}", daemon.log_text());
}

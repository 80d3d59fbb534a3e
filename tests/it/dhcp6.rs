//! IPv6 interop: ISC `dhclient -6` against the `bootpool` binary over a veth pair between two
//! namespaces (an address from `dhcp6.range` and option 59, the boot-file URL, sent as iPXE's
//! user class asks it), bootpool's router advertisements seen by the client's kernel, then
//! the iPXE script, a kernel over HTTP (`curl -g` to `[ADDR]`), a loader over TFTP
//! (tftp-hpa `-6`) and the root over NBD (libnbd's `nbdinfo`) from the client's DHCPv6
//! address, each recorded for its MAC.

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

#[test]
fn dhclient6_gets_an_address_and_the_url_and_fetches_over_ipv6() {
    let link = ipv6_link();
    link.set_client_mac(MAC);
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if));
    let daemon = Daemon::start(&link, &fx, 1);
    // bootpool's router advertisement puts the prefix on-link in the client's kernel (which
    // meanwhile gives the client end its link-local address, which dhclient needs).
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

    let mut lladdr = String::new();
    for _ in 0..100 {
        let (_, text, _) = crate::common::run(
            &mut Link::command(
                &link.client_ns,
                "ip",
                &[
                    "-6",
                    "addr",
                    "show",
                    "dev",
                    &link.client_if,
                    "scope",
                    "link",
                ],
            ),
            10,
        );
        lladdr = text;
        if lladdr.contains("inet6 fe80") && !lladdr.contains("tentative") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(lladdr.contains("inet6 fe80"), "{lladdr}");
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

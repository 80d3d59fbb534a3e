//! DHCP interop: busybox udhcpc and ISC dhclient against the `bootpool` binary over a veth
//! pair between two network namespaces (DHCP needs a real broadcast link), including a
//! kill -9 and restart; and malformed packets at the in-process daemon.

use crate::common::netns::{Daemon, Link};
use crate::common::{Fixture, Loopback};
use std::net::Ipv4Addr;
use std::process::Stdio;
use std::time::Duration;

const SERVER: &str = "10.77.1.1";
const RESERVED_MAC: &str = "52:54:00:77:00:10";
const RESERVED_IP: &str = "10.77.1.11";

fn in_range(ip: Ipv4Addr) -> bool {
    (u32::from(Ipv4Addr::new(10, 77, 1, 100))..=u32::from(Ipv4Addr::new(10, 77, 1, 150)))
        .contains(&u32::from(ip))
}

/// The fixture served on the server end of a veth, with a router and a DNS server to hand
/// out; `nbd-room` is one client, `RESERVED_MAC`, at a fixed address.
fn config(iface: &str) -> Loopback {
    Loopback::default()
        .on_veth("10.77.1", iface)
        .http(&format!("{SERVER}:0"))
        .dhcp(&format!("router: {SERVER}\ndns: [10.77.1.53]"))
        .clients(
            "nbd-room",
            &format!("- {{ mac: \"{RESERVED_MAC}\", name: pc10, ip: {RESERVED_IP} }}"),
        )
}

/// The address busybox udhcpc got on the client end, or `None` if it got none.
fn udhcpc(link: &Link, fx: &Fixture, mac: &str) -> Option<Ipv4Addr> {
    let fields = link.udhcpc(fx.path(), mac, false)?;
    assert_eq!(
        fields.get(2).map(String::as_str),
        Some("255.255.255.0"),
        "{fields:?}"
    );
    assert_eq!(
        fields.get(3).map(String::as_str),
        Some(SERVER),
        "router: {fields:?}"
    );
    assert_eq!(
        fields.get(4).map(String::as_str),
        Some("10.77.1.53"),
        "dns: {fields:?}"
    );
    Some(fields[1].parse().unwrap())
}

/// The address ISC dhclient got. It runs in the foreground (`-d`), so the test owns the one
/// process and stops it once the script has seen BOUND (or dhclient gave up).
fn dhclient(link: &Link, fx: &Fixture, mac: &str) -> Option<Ipv4Addr> {
    link.set_client_mac(mac);
    let dir = fx.path().join(format!("dhclient-{}", mac.replace(':', "")));
    let said = link.dhclient(
        &dir,
        &[],
        "timeout 10;\nretry 1;\ninitial-interval 1;\n",
        "echo \"$reason $new_ip_address $new_subnet_mask $new_routers\" >> $OUT",
        "BOUND ",
    );
    let line = match said {
        Ok(line) => line,
        Err(log) => {
            assert!(
                log.contains("No DHCPOFFERS") || log.contains("No working leases"),
                "dhclient neither bound nor gave up:\n{log}"
            );
            return None;
        }
    };
    let fields: Vec<&str> = line.split(' ').collect();
    assert_eq!(fields.get(2), Some(&"255.255.255.0"), "{line}");
    assert_eq!(fields.get(3), Some(&SERVER), "{line}");
    Some(fields[1].parse().unwrap())
}

/// The saved entry for `mac` (snapshot and journal as a restart reads them), as (ip, state).
fn saved_lease(fx: &Fixture, mac: &str) -> Option<(Ipv4Addr, String)> {
    let saved = bootpool::service::lease_file::read(&fx.path().join("var")).ok()?;
    saved.leases.into_iter().find_map(|l| {
        (l.mac == mac).then(|| {
            let state = serde_json::to_value(l.state).unwrap();
            (l.ip, state.as_str().unwrap().to_string())
        })
    })
}

/// Polls the journal for an event naming `needle` (the writer batches).
fn journal_has(fx: &Fixture, needles: &[&str]) -> bool {
    crate::common::poll_until(Duration::from_secs(5), Duration::from_millis(50), || {
        crate::common::recorded_events(&fx.path().join("var"))
            .lines()
            .any(|l| needles.iter().all(|n| l.contains(n)))
    })
}

#[test]
fn udhcpc_gets_addresses_and_keeps_them_across_kill_9() {
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if));
    let daemon = Daemon::start(&link, &fx, 1);

    let a = udhcpc(&link, &fx, "52:54:00:77:00:01").expect("a lease for A");
    assert!(in_range(a), "{a}");
    assert_eq!(
        saved_lease(&fx, "52:54:00:77:00:01"),
        Some((a, "bound".into()))
    );
    let reserved = udhcpc(&link, &fx, RESERVED_MAC).expect("a lease for the reserved MAC");
    assert_eq!(reserved, RESERVED_IP.parse::<Ipv4Addr>().unwrap());
    assert!(journal_has(
        &fx,
        &["\"dhcp_ack\"", "52:54:00:77:00:01", &a.to_string()]
    ));
    assert!(journal_has(
        &fx,
        &["\"dhcp_discover\"", "52:54:00:77:00:01"]
    ));

    // A stranger gets silence, logged once.
    assert_eq!(udhcpc(&link, &fx, "52:54:00:99:00:01"), None);
    let log = daemon.log_text();
    assert_eq!(log.matches("dhcp client in no pool").count(), 1, "{log}");

    daemon.kill9();
    let daemon = Daemon::start(&link, &fx, 2);
    // B asks first: without the saved table it would be given A's address.
    let b = udhcpc(&link, &fx, "52:54:00:77:00:02").expect("a lease for B");
    assert!(in_range(b) && b != a, "{b} vs {a}");
    assert_eq!(udhcpc(&link, &fx, "52:54:00:77:00:01"), Some(a));
    drop(daemon);
}

/// `POST /api/v1/leases/MAC/release` with `server.admin_token`: refused without the token (and
/// with the read token), and with it the binding ends through the DHCP service, in the lease
/// files too (a restart keeps it ended), so the address goes back to the range.
#[test]
fn an_admin_releases_a_lease_through_the_api_with_its_token() {
    const ADMIN: &str = "0123456789abcdef-admin";
    const READ: &str = "0123456789abcdef-read";
    const A: &str = "52:54:00:77:00:01";
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    let text = config(&link.server_if)
        .http(&format!("{SERVER}:18080"))
        .server(&format!("read_token: {READ}\nadmin_token: {ADMIN}"));
    fx.write_config(&text);
    let daemon = Daemon::start(&link, &fx, 1);
    let a = udhcpc(&link, &fx, A).expect("a lease for A");
    let release = |token: Option<&str>| {
        let url = format!("http://{SERVER}:18080/api/v1/leases/{A}/release");
        let auth = token.map(|t| format!("Authorization: Bearer {t}"));
        let mut args = vec![
            "-sS",
            "--max-time",
            "20",
            "-X",
            "POST",
            "-w",
            "\n%{http_code}",
        ];
        if let Some(h) = auth.as_deref() {
            args.extend(["-H", h]);
        }
        args.push(&url);
        let out = Link::command(&link.server_ns, "curl", &args)
            .output()
            .expect("curl runs");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", ""));
        (code.to_string(), body.to_string())
    };
    assert_eq!(release(None).0, "401");
    assert_eq!(release(Some(READ)).0, "401", "the read token does not act");
    assert_eq!(
        saved_lease(&fx, A),
        Some((a, "bound".into())),
        "nothing changed"
    );
    let (code, body) = release(Some(ADMIN));
    assert_eq!(code, "200", "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(answer["ip"], a.to_string(), "{body}");
    assert_eq!(saved_lease(&fx, A), Some((a, "free".into())));
    assert_eq!(release(Some(ADMIN)).0, "404", "nothing left to release");
    daemon.kill9();
    let _daemon = Daemon::start(&link, &fx, 2);
    assert_eq!(
        saved_lease(&fx, A),
        Some((a, "free".into())),
        "kept across a restart"
    );
}

/// busybox udhcpc as `mac` sending `extra` options: the `bound` line of its script, with
/// `$siaddr` (next-server, exported only when not 0.0.0.0) and `$boot_file`.
fn udhcpc_boot_fields(link: &Link, fx: &Fixture, mac: &str, extra: &[&str]) -> String {
    let dir = fx.path().join(format!("udhcpc-{}", mac.replace(':', "")));
    std::fs::create_dir_all(&dir).unwrap();
    let fields = "ip=$ip siaddr=$siaddr boot_file=$boot_file";
    link.udhcpc_line(&dir, mac, fields, false, extra)
        .unwrap_or_else(|| panic!("udhcpc as {mac} got no lease"))
}

/// Every offer and ACK that names a boot file names the boot server in next-server (siaddr),
/// which iPXE (`Next server:`) and udhcpc (`$siaddr`) read: firmware PXE's TFTP loader and
/// iPXE's script URL alike. The initrd's plain DHCP names no boot file and no server.
#[test]
fn answers_that_name_a_boot_file_carry_next_server() {
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if));
    let _daemon = Daemon::start(&link, &fx, 1);
    let pxe = ["-V", "PXEClient:Arch:00000:UNDI:002001"];
    let firmware = udhcpc_boot_fields(&link, &fx, "52:54:00:77:00:05", &pxe);
    assert!(
        firmware.contains(&format!("siaddr={SERVER} "))
            && firmware.ends_with("boot_file=undionly.kpxe"),
        "{firmware}"
    );
    // iPXE: user class `iPXE` (option 77).
    let ipxe_args = [pxe[0], pxe[1], "-x", "0x4d:69505845"];
    let ipxe = udhcpc_boot_fields(&link, &fx, "52:54:00:77:00:06", &ipxe_args);
    assert!(
        ipxe.contains(&format!("siaddr={SERVER} boot_file=http://{SERVER}:"))
            && ipxe.ends_with("/boot/script/52:54:00:77:00:06.ipxe"),
        "{ipxe}"
    );
    let plain = udhcpc_boot_fields(&link, &fx, "52:54:00:77:00:07", &[]);
    assert!(plain.ends_with("siaddr= boot_file="), "{plain}");
}

/// Counts, for as long as it runs, the IPv4 datagrams to UDP port 68 that arrive on `dev`
/// (an AF_PACKET socket: what a machine's NIC sees, addressed to it or not). Writes `ready`
/// once it listens and the count to `count` when `stop` appears.
const BYSTANDER: &str = r#"
import socket, sys, os
dev, ready, stop, count = sys.argv[1:5]
s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
s.bind((dev, 0x0800))
s.settimeout(0.1)
open(ready, "w").close()
n = 0
while not os.path.exists(stop):
    try:
        d = s.recv(2048)
    except socket.timeout:
        continue
    ihl = (d[0] & 15) * 4
    if len(d) >= ihl + 4 and d[9] == 17 and d[ihl + 2:ihl + 4] == bytes([0, 68]):
        n += 1
open(count, "w").write(str(n))
"#;

/// How many answers to port 68 a bystander on the same switch heard while udhcpc (with
/// `extra` arguments) got a lease as `mac`.
fn heard_by_a_bystander(link: &Link, fx: &Fixture, mac: &str, extra: &[&str]) -> u32 {
    let dir = fx
        .path()
        .join(format!("bystander-{}", mac.replace(':', "")));
    std::fs::create_dir_all(&dir).unwrap();
    let (ready, stop, count) = (dir.join("ready"), dir.join("stop"), dir.join("count"));
    let script = dir.join("bystander.py");
    std::fs::write(&script, BYSTANDER).unwrap();
    let args = [
        script.to_str().unwrap(),
        "bysb",
        ready.to_str().unwrap(),
        stop.to_str().unwrap(),
        count.to_str().unwrap(),
    ];
    let mut child = Link::command(&link.client_ns, "python3", &args)
        .stdin(Stdio::null())
        .spawn()
        .expect("python3");
    assert!(
        crate::common::poll_until(Duration::from_secs(5), Duration::from_millis(50), || {
            ready.exists()
        }),
        "the bystander did not start listening"
    );
    link.udhcpc_line(&dir, mac, "$ip", false, extra)
        .unwrap_or_else(|| panic!("udhcpc as {mac} got no lease"));
    std::fs::write(&stop, "").unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "bystander: {status}");
    std::fs::read_to_string(&count)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// RFC 2131 4.1: a client without an address that leaves the broadcast flag clear (iPXE,
/// udhcpc) is answered by unicast to the address it is given, at its MAC, so the other
/// machines of a room powering on at once do not each read every OFFER and ACK. A client
/// that sets the flag (udhcpc -B, as EDK2's PXE does) still gets broadcasts, which is also
/// what shows the bystander would hear an answer that reached it.
#[test]
fn answers_go_to_the_client_alone_unless_it_asks_for_broadcast() {
    let link = Link::switched(&[&format!("{SERVER}/24")]);
    // A bystander: another port of the switch, its far end in the client's namespace.
    link.in_client(&[
        "ip", "link", "add", "bysa", "type", "veth", "peer", "name", "bysb",
    ]);
    link.in_client(&["ip", "link", "set", "bysa", "master", &link.client_if]);
    link.in_client(&["ip", "link", "set", "bysa", "up"]);
    link.in_client(&["ip", "link", "set", "bysb", "up"]);
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if));
    let daemon = Daemon::start(&link, &fx, 1);

    let unicast = heard_by_a_bystander(&link, &fx, "52:54:00:77:00:08", &[]);
    assert_eq!(unicast, 0, "{}", daemon.log_text());
    let broadcast = heard_by_a_bystander(&link, &fx, "52:54:00:77:00:09", &["-B"]);
    assert!(
        broadcast >= 2,
        "heard {broadcast}: the OFFER and the ACK are broadcast"
    );
    drop(daemon);
}

#[test]
fn dhclient_gets_an_address_and_keeps_it_across_kill_9() {
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if));
    let daemon = Daemon::start(&link, &fx, 1);
    let c = dhclient(&link, &fx, "52:54:00:77:00:03").expect("a lease for C");
    assert!(in_range(c), "{c}");
    assert_eq!(
        saved_lease(&fx, "52:54:00:77:00:03"),
        Some((c, "bound".into()))
    );
    let r = dhclient(&link, &fx, RESERVED_MAC).expect("a lease for the reserved MAC");
    assert_eq!(r, RESERVED_IP.parse::<Ipv4Addr>().unwrap());

    daemon.kill9();
    let daemon = Daemon::start(&link, &fx, 2);
    let d = dhclient(&link, &fx, "52:54:00:77:00:04").expect("a lease for D");
    assert!(in_range(d) && d != c, "{d} vs {c}");
    assert_eq!(dhclient(&link, &fx, "52:54:00:77:00:03"), Some(c));
    drop(daemon);
}

/// A BOOTREQUEST sent as if through a relay at 127.0.0.1, so the reply comes back to
/// 127.0.0.1:67 on loopback instead of being broadcast.
fn relayed(mac: [u8; 6], options: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 236];
    b[0] = 1;
    b[1] = 1;
    b[2] = 6;
    b[4..8].copy_from_slice(&0xfeed_beefu32.to_be_bytes());
    b[24..28].copy_from_slice(&[127, 0, 0, 1]);
    b[28..34].copy_from_slice(&mac);
    b.extend_from_slice(&[99, 130, 83, 99]);
    b.extend_from_slice(options);
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_dhcp_is_dropped_and_a_good_request_is_answered() {
    use dhcproto::Decodable;
    use dhcproto::v4::{DhcpOption, Message, MessageType, OptionCode};
    let fx = Fixture::new();
    let daemon = fx.start().await;
    let relay = tokio::net::UdpSocket::bind("127.0.0.1:67")
        .await
        .expect("binding 127.0.0.1:67 (run as root)");
    let to = daemon.bound.dhcp;
    let mac = [0x52, 0x54, 0, 0x77, 0, 0x05];
    let mut long_option = vec![53, 1, 1, 60, 255];
    long_option.extend(std::iter::repeat_n(b'x', 255));
    let mut oversized = relayed(mac, &[53, 1, 1]);
    oversized.resize(4000, 1);
    let garbage: Vec<Vec<u8>> = vec![
        vec![],
        vec![1; 10],
        relayed(mac, &[53, 1, 1])[..200].to_vec(),
        relayed(mac, &[53, 1]),
        relayed(mac, &[53, 200, 1]),
        relayed(mac, &long_option),
        relayed(mac, &[93, 1, 0, 53, 1, 1, 55, 250]),
        oversized,
        {
            let mut b = relayed(mac, &[53, 1, 1, 255]);
            b[0] = 2;
            b
        },
        {
            let mut b = relayed(mac, &[53, 1, 1, 255]);
            b[236] = 0;
            b
        },
        relayed(mac, &[53, 1, 99, 255]),
    ];
    for g in &garbage {
        relay.send_to(g, to).await.unwrap();
    }
    // Some of those were readable enough to answer (damaged options after the type); read
    // until the good request's answer, whose xid we change to tell it apart.
    let mut good = relayed(mac, &[53, 1, 1, 93, 2, 0, 0, 60, 9]);
    good.extend_from_slice(b"PXEClient");
    good.push(255);
    good[4..8].copy_from_slice(&0x600d_600du32.to_be_bytes());
    relay.send_to(&good, to).await.unwrap();
    let mut buf = vec![0u8; 1500];
    let offer = loop {
        let (n, _) = tokio::time::timeout(Duration::from_secs(5), relay.recv_from(&mut buf))
            .await
            .expect("an offer for the good request")
            .unwrap();
        let m = Message::from_bytes(&buf[..n]).expect("a decodable reply");
        if m.xid() == 0x600d_600d {
            break m;
        }
    };
    assert_eq!(offer.opts().msg_type(), Some(MessageType::Offer));
    assert!(in_range_loopback(offer.yiaddr()), "{}", offer.yiaddr());
    assert_eq!(
        offer.opts().get(OptionCode::BootfileName),
        Some(&DhcpOption::BootfileName(b"undionly.kpxe".to_vec()))
    );
    assert_eq!(offer.siaddr(), Ipv4Addr::LOCALHOST);
    daemon.stop().await;
}

fn in_range_loopback(ip: Ipv4Addr) -> bool {
    (u32::from(Ipv4Addr::new(127, 0, 0, 100))..=u32::from(Ipv4Addr::new(127, 0, 0, 199)))
        .contains(&u32::from(ip))
}

/// A client's `name` goes out as option 12, as busybox udhcpc (`$hostname`) and ISC dhclient
/// (`$new_host_name`) read it: a pattern's name for each MAC of its range, a fixed entry's
/// own, and none for a client without a name.
#[test]
fn named_clients_get_their_host_name() {
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if).clients(
        "nfs-room",
        "- { macs: \"52:54:00:77:00:00-52:54:00:77:00:0f\", name: \"n[001-016]\" }\n\
         - { mac: \"52:54:00:77:00:20\" }",
    ));
    let _daemon = Daemon::start(&link, &fx, 1);
    let udhcpc_name = |mac: &str| {
        let dir = fx.path().join(format!("udhcpc-{}", mac.replace(':', "")));
        std::fs::create_dir_all(&dir).unwrap();
        link.udhcpc_line(&dir, mac, "ip=$ip hostname=$hostname", false, &[])
            .unwrap_or_else(|| panic!("udhcpc as {mac} got no lease"))
    };
    let third = udhcpc_name("52:54:00:77:00:02");
    assert!(third.ends_with(" hostname=n003"), "{third}");
    let fixed = udhcpc_name(RESERVED_MAC);
    assert!(
        fixed.ends_with(&format!(" ip={RESERVED_IP} hostname=pc10")),
        "{fixed}"
    );
    let unnamed = udhcpc_name("52:54:00:77:00:20");
    assert!(unnamed.ends_with(" hostname="), "{unnamed}");

    link.set_client_mac("52:54:00:77:00:0f");
    let said = link
        .dhclient(
            &fx.path().join("dhclient-named"),
            &[],
            "timeout 10;\nretry 1;\ninitial-interval 1;\n",
            "echo \"$reason $new_ip_address $new_host_name\" >> $OUT",
            "BOUND ",
        )
        .unwrap_or_else(|log| panic!("dhclient got no lease:\n{log}"));
    assert!(said.ends_with(" n016"), "{said}");
}

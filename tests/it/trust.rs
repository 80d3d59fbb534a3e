//! Who a client is, tried from the outside: the `bootpool` binary in one network namespace,
//! a hostile or honest host in another (a veth pair between them), speaking through client
//! programs this project did not write (busybox udhcpc, nbdinfo, libnfs's nfs-ls, curl) and
//! raw DHCP packets where a forger would send them. The lease table is the one answer to
//! "who is at this address": a stranger gets each protocol's refusal, counted; the holder of a
//! lease gets its pool's root and no other, also after a kill -9 with the records deleted; a
//! forged REQUEST cannot move a bound client, a forged RELEASE or DECLINE cannot cut it off;
//! a canary's pinned revision is mounted by the canary alone.
//! Needs root.

use crate::common::netns::{Daemon, Link};
use crate::common::{Fixture, Loopback, run};
use dhcproto::v4::{DhcpOption, Message, MessageType, Opcode, OptionCode};
use dhcproto::{Decodable, Decoder, Encodable, Encoder};
use std::net::{Ipv4Addr, UdpSocket};
use std::time::Duration;

const SERVER: &str = "10.77.2.1";
const NBD_MAC: &str = "52:54:00:77:00:11";

/// The fixture served on the server end of a veth, every service on its standard port.
fn config(iface: &str) -> Loopback {
    Loopback::default()
        .on_veth("10.77.2", iface)
        .http(&format!("{SERVER}:8080"))
        .standard_ports()
        .dhcp(&format!("router: {SERVER}"))
}

/// Runs `program args` in the client's namespace: (succeeded, stdout + stderr).
fn client(link: &Link, program: &str, args: &[&str]) -> (bool, String) {
    let (ok, out, err) = run(&mut Link::command(&link.client_ns, program, args), 30);
    (ok, out + &err)
}

fn nbd_attaches(link: &Link) -> (bool, String) {
    nbd_attaches_export(link, "demo")
}

fn nbd_attaches_export(link: &Link, export: &str) -> (bool, String) {
    client(link, "nbdinfo", &[&format!("nbd://{SERVER}/{export}")])
}

fn nfs_lists(link: &Link) -> (bool, String) {
    client(
        link,
        "nfs-ls",
        &[&format!("nfs://{SERVER}/demo/?version=3")],
    )
}

/// POST /api/v1/booted from the client with `body`: the HTTP status.
fn report_booted(link: &Link, body: &str) -> String {
    let (_, out) = client(
        link,
        "curl",
        &[
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "--data",
            body,
            &format!("http://{SERVER}:8080/api/v1/booted"),
        ],
    );
    out.trim().to_string()
}

/// The daemon's counter `name` for `service` from /metrics (read in the server namespace).
fn metric(link: &Link, name: &str, service: &str) -> u64 {
    link.metric(
        &format!("{SERVER}:8080"),
        &format!("{name}{{service=\"{service}\"}}"),
    )
}

/// A DHCP REQUEST from `mac` for `ip`, as a forger broadcasts it: with our server identifier
/// (SELECTING) or without (INIT-REBOOT). Returns the answer's message type, if any came.
fn forged_request(link: &Link, mac: &str, ip: Ipv4Addr, selecting: bool) -> Option<MessageType> {
    let mac: bootpool::config::Mac = mac.parse().unwrap();
    let any = Ipv4Addr::UNSPECIFIED;
    let mut m = Message::new(any, any, any, any, &mac.0);
    m.set_opcode(Opcode::BootRequest);
    m.set_flags(dhcproto::v4::Flags::default().set_broadcast());
    m.opts_mut()
        .insert(DhcpOption::MessageType(MessageType::Request));
    m.opts_mut().insert(DhcpOption::RequestedIpAddress(ip));
    if selecting {
        m.opts_mut()
            .insert(DhcpOption::ServerIdentifier(SERVER.parse().unwrap()));
    }
    send_dhcp(link, &m, None, false)
}

/// Sends `m` from the client's namespace, from `from`:68 (None: the socket bound to any
/// address, as a client with none is), broadcast or `unicast` to the server. Returns the type
/// of the answer with `m`'s xid, if one came within 2 s.
fn send_dhcp(
    link: &Link,
    m: &Message,
    from: Option<Ipv4Addr>,
    unicast: bool,
) -> Option<MessageType> {
    let mut packet = Vec::new();
    m.encode(&mut Encoder::new(&mut packet)).unwrap();
    let xid = m.xid();
    let dev = link.client_if.clone();
    Link::within(&link.client_ns, move || {
        let src = from.unwrap_or(Ipv4Addr::UNSPECIFIED);
        let sock = UdpSocket::bind((src, 68)).unwrap();
        sock.set_broadcast(true).unwrap();
        // As DHCP clients do: out of the interface, whatever the routes say.
        use std::os::fd::AsRawFd;
        // SAFETY: setsockopt on our socket with a buffer of the given length.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_BINDTODEVICE,
                dev.as_ptr().cast(),
                dev.len() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let to = if unicast { SERVER } else { "255.255.255.255" };
        sock.send_to(&packet, (to, 67)).unwrap();
        let mut buf = [0u8; 1500];
        while let Ok(n) = sock.recv(&mut buf) {
            let Ok(reply) = Message::decode(&mut Decoder::new(&buf[..n])) else {
                continue;
            };
            if reply.xid() != xid {
                continue;
            }
            return match reply.opts().get(OptionCode::MessageType) {
                Some(DhcpOption::MessageType(t)) => Some(*t),
                _ => None,
            };
        }
        None
    })
}

/// A message of `kind` from `mac` (what a forger copies off the segment), `ciaddr` set, the
/// address named in option 50 if `named`, our server identifier in option 54.
fn message(kind: MessageType, mac: &str, ciaddr: Ipv4Addr, named: Option<Ipv4Addr>) -> Message {
    let mac: bootpool::config::Mac = mac.parse().unwrap();
    let any = Ipv4Addr::UNSPECIFIED;
    let mut m = Message::new(ciaddr, any, any, any, &mac.0);
    m.set_opcode(Opcode::BootRequest);
    m.opts_mut().insert(DhcpOption::MessageType(kind));
    if let Some(ip) = named {
        m.opts_mut().insert(DhcpOption::RequestedIpAddress(ip));
    }
    if kind != MessageType::Request {
        m.opts_mut()
            .insert(DhcpOption::ServerIdentifier(SERVER.parse().unwrap()));
    }
    m
}

/// The saved lease of `mac`: its address and state (`bound`, `free`).
fn saved_lease(fx: &Fixture, mac: &str) -> Option<(Ipv4Addr, String)> {
    let saved = bootpool::service::lease_file::read(&fx.path().join("var")).ok()?;
    saved.leases.into_iter().find_map(|l| {
        (l.mac == mac).then(|| {
            let state = serde_json::to_value(l.state).unwrap();
            (l.ip, state.as_str().unwrap().to_string())
        })
    })
}

fn saved_ip(fx: &Fixture, mac: &str) -> Option<Ipv4Addr> {
    let saved = bootpool::service::lease_file::read(&fx.path().join("var")).ok()?;
    saved
        .leases
        .into_iter()
        .find_map(|l| (l.mac == mac).then_some(l.ip))
}

#[test]
fn a_stranger_is_refused_and_a_lease_holder_gets_its_pools_root_only() {
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if));
    let daemon = Daemon::start(&link, &fx, 1);

    // A host with an address of the subnet and no lease.
    link.in_client(&["ip", "addr", "add", "10.77.2.50/24", "dev", &link.client_if]);
    let (ok, said) = nbd_attaches(&link);
    assert!(!ok, "a stranger attached: {said}");
    // NBD_REP_ERR_POLICY, which libnbd reports as "not supported".
    assert!(said.contains("not supported"), "{said}");
    assert!(daemon.log_text().contains("nbd client holds no lease"));
    let (ok, said) = nfs_lists(&link);
    assert!(!ok, "a stranger mounted: {said}");
    assert_eq!(report_booted(&link, "{}"), "403");
    assert!(metric(&link, "bootpool_refused_total", "nbd") >= 1);
    assert!(metric(&link, "bootpool_refused_total", "nfs") >= 1);

    // A lease to a MAC of the NBD pool: its NBD root, not the NFS one.
    let lease = link
        .udhcpc(fx.path(), NBD_MAC, true)
        .expect("a lease for the NBD pool's MAC");
    let ip: Ipv4Addr = lease[1].parse().unwrap();
    let (ok, said) = nbd_attaches(&link);
    assert!(ok, "the lease holder was refused: {said}");
    let (ok, said) = nfs_lists(&link);
    assert!(
        !ok,
        "an NBD pool's client mounted the image over NFS: {said}"
    );
    // Its boot report must parse.
    assert_eq!(report_booted(&link, "uptime: soon"), "400");
    assert_eq!(report_booted(&link, "{\"uptime_s\": 3.5}"), "204");

    // A forged REQUEST with its MAC for another free address: NAK, and the lease stays.
    let other = Ipv4Addr::from(u32::from(ip) + 1);
    for selecting in [true, false] {
        assert_eq!(
            forged_request(&link, NBD_MAC, other, selecting),
            Some(MessageType::Nak),
            "selecting: {selecting}"
        );
    }
    assert_eq!(saved_ip(&fx, NBD_MAC), Some(ip));

    // kill -9 and the records deleted: the lease table still says who it is.
    daemon.kill9();
    for f in ["records.db", "records.db-wal", "records.db-shm"] {
        let _ = std::fs::remove_file(fx.path().join("var").join(f));
    }
    let daemon = Daemon::start(&link, &fx, 2);
    let (ok, said) = nbd_attaches(&link);
    assert!(ok, "after a restart the lease holder was refused: {said}");
    drop(daemon);
}

#[test]
fn a_stranger_is_refused_the_roots_zstd_copy_and_a_lease_holder_gets_it() {
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    crate::root_wire::make_root(fx.path());
    fx.write_config(&config(&link.server_if).demo("store: disk, root_wire: zstd"));
    let daemon = Daemon::start(&link, &fx, 1);
    // The copy is made in the background.
    let wire = fx.path().join("var/wire");
    let copied = || {
        std::fs::read_dir(&wire).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(".root"))
        })
    };
    assert!(
        crate::common::poll_until(Duration::from_secs(60), Duration::from_millis(200), copied),
        "no root copy in 60 s"
    );

    link.in_client(&["ip", "addr", "add", "10.77.2.50/24", "dev", &link.client_if]);
    let (ok, said) = nbd_attaches_export(&link, "demo~zstd");
    assert!(!ok, "a stranger attached the copy: {said}");
    assert!(said.contains("not supported"), "{said}");
    assert!(daemon.log_text().contains("nbd client holds no lease"));

    link.udhcpc(fx.path(), NBD_MAC, true)
        .expect("a lease for the NBD pool's MAC");
    let (ok, said) = nbd_attaches_export(&link, "demo~zstd");
    assert!(ok, "the lease holder was refused the copy: {said}");
    drop(daemon);
}

/// A hostile host on the segment sends what would cut a client off its root: RELEASEs with
/// its MAC and address (from its own address, and from 0.0.0.0), a DECLINE of its address
/// once its renewal made it no fresh one. None changes the lease: the client still attaches
/// its root, and its renewal is ACKed. A DECLINE right after the ACK that bound the address
/// cannot be told from the client's own and counts; the client, still on its address, takes
/// it back with its renewal (ACK, not NAK).
#[test]
fn a_forged_release_or_decline_does_not_cut_a_client_off() {
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if));
    let _daemon = Daemon::start(&link, &fx, 1);
    let lease = link
        .udhcpc(fx.path(), NBD_MAC, true)
        .expect("a lease for the NBD pool's MAC");
    let ip: Ipv4Addr = lease[1].parse().unwrap();
    let bound = Some((ip, "bound".to_string()));
    let refused = metric(&link, "bootpool_refused_total", "dhcp");
    // The forger: an address of its own on the segment, after the client's.
    link.in_client(&["ip", "addr", "add", "10.77.2.50/24", "dev", &link.client_if]);
    let release = message(MessageType::Release, NBD_MAC, ip, None);
    let forger: Ipv4Addr = "10.77.2.50".parse().unwrap();
    for unicast in [true, false] {
        send_dhcp(&link, &release, Some(forger), unicast);
        assert_eq!(saved_lease(&fx, NBD_MAC), bound, "unicast: {unicast}");
    }
    // DECLINE right after the ACK (SELECTING): it counts; the lease is gone...
    let decline = message(
        MessageType::Decline,
        NBD_MAC,
        Ipv4Addr::UNSPECIFIED,
        Some(ip),
    );
    send_dhcp(&link, &decline, None, false);
    assert_eq!(saved_lease(&fx, NBD_MAC), None);
    // ...until the client renews from its address: ACK, the lease back.
    let renew = message(MessageType::Request, NBD_MAC, ip, None);
    assert_eq!(
        send_dhcp(&link, &renew, Some(ip), true),
        Some(MessageType::Ack)
    );
    assert_eq!(saved_lease(&fx, NBD_MAC), bound);
    // A DECLINE now (no fresh ACK before it), for its address or another: nothing.
    send_dhcp(&link, &decline, None, false);
    let other = message(
        MessageType::Decline,
        NBD_MAC,
        Ipv4Addr::UNSPECIFIED,
        Some(Ipv4Addr::from(u32::from(ip) + 1)),
    );
    send_dhcp(&link, &other, None, false);
    assert_eq!(saved_lease(&fx, NBD_MAC), bound);
    assert_eq!(
        send_dhcp(&link, &renew, Some(ip), true),
        Some(MessageType::Ack)
    );
    let (ok, said) = nbd_attaches(&link);
    assert!(ok, "the client lost its root: {said}");
    assert!(metric(&link, "bootpool_refused_total", "dhcp") >= refused + 4);
    // Its own RELEASE, from its address, ends the lease.
    send_dhcp(&link, &release, Some(ip), true);
    assert_eq!(saved_lease(&fx, NBD_MAC), Some((ip, "free".to_string())));
}

/// A root tree for `image import`: an init, a kernel and an initrd, and its revision's name
/// in /etc/hostname.
fn revision_tree(at: &std::path::Path, n: u64) {
    use std::os::unix::fs::PermissionsExt as _;
    for d in ["etc", "sbin", "boot"] {
        std::fs::create_dir_all(at.join(d)).unwrap();
    }
    std::fs::write(at.join("etc/hostname"), format!("r{n}\n")).unwrap();
    std::fs::write(at.join("sbin/init"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(at.join("sbin/init"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        at.join("boot/vmlinuz-6.1.0-1"),
        crate::common::pattern(n, 4000),
    )
    .unwrap();
    std::fs::write(
        at.join("boot/initrd.img-6.1.0-1"),
        crate::common::pattern(n, 3000),
    )
    .unwrap();
}

/// A canary's revision (`clients[].revision`, not active) is mounted over NFS by the canary's
/// address, which holds its lease, and refused to another client of the same pool, which
/// still mounts the active revision; libnfs's nfs-cat reads each revision's own file.
#[test]
fn a_canarys_revision_is_its_own_until_activated() {
    const PLAIN: &str = "52:54:00:77:00:01";
    const CANARY: &str = "52:54:00:77:00:02";
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    std::fs::remove_dir_all(fx.image_dir()).unwrap();
    fx.write_config(&config(&link.server_if));
    let image = fx.config().images["demo"].clone();
    let import = |n: u64| {
        let src = fx.path().join(format!("src{n}"));
        revision_tree(&src, n);
        let req = bootpool::image::import::Request {
            from: src,
            kernel: None,
            initrd: None,
            // The config's NBD pool boots this image too: its root image is made.
            squashfs: true,
            source: None,
        };
        bootpool::image::import::import(&image, &req)
            .unwrap()
            .revision
            .id
    };
    let r1 = import(1);
    bootpool::image::store::activate(&fx.image_dir(), &r1).unwrap();
    let r2 = import(2);
    fx.write_config(&config(&link.server_if).clients(
        "nfs-room",
        &format!("- {{ mac: \"{PLAIN}\" }}\n- {{ mac: \"{CANARY}\", revision: {r2} }}"),
    ));
    let _daemon = Daemon::start(&link, &fx, 1);
    let cat = |rev: &str| {
        client(
            &link,
            "nfs-cat",
            &[&format!("nfs://{SERVER}/demo@{rev}/etc/hostname?version=3")],
        )
    };

    link.udhcpc(fx.path(), PLAIN, true)
        .expect("a lease for the pool's plain client");
    let (ok, said) = cat(&r1);
    assert!(ok && said.contains("r1"), "the active revision: {said}");
    let (ok, said) = cat(&r2);
    assert!(!ok, "another client mounted the canary's revision: {said}");

    link.udhcpc(fx.path(), CANARY, true)
        .expect("a lease for the canary");
    let (ok, said) = cat(&r2);
    assert!(
        ok && said.contains("r2"),
        "the canary was refused its revision: {said}"
    );
}

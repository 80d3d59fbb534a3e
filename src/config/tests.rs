//! Unit tests of `config`: parsing pools.yaml, its checks and the errors they name.

use super::*;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

const GOOD: &str = "\
server:
  interfaces: [br0]
  address: 10.77.0.1
  http: 0.0.0.0:8080
  state_dir: var/
dhcp:
  mode: authoritative
  subnet: 10.77.0.0/24
  range: 10.77.0.100-10.77.0.199
  router: 10.77.0.1
  lease: 12h
images:
  demo:
    dir: images/demo
    store: disk
pools:
  room-101:
    image: demo
    root: nfs
    cmdline: console=ttyS0
    clients:
      - { mac: \"52:54:00:77:00:01\", name: pc01, ip: 10.77.0.11 }
      - { macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\" }
";

/// What `bootpool check` finds missing on disk: the images' files, then the `server` keys'.
pub(super) fn missing_files(c: &Config) -> Vec<ConfigError> {
    let mut missing = crate::image::serve::missing_files(c);
    missing.extend(c.missing_files());
    missing
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(Path::new("/etc/bootpool/pools.yaml"), text)
}

#[test]
fn good_config_parses_into_checked_types() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.server.address, Ipv4Addr::new(10, 77, 0, 1));
    assert_eq!(c.server.state_dir, Path::new("/etc/bootpool/var/"));
    assert_eq!(c.dhcp.lease, Duration::from_secs(12 * 3600));
    let pool = &c.pools["room-101"];
    assert_eq!(pool.root, RootProto::Nfs);
    assert_eq!(pool.image.dir, Path::new("/etc/bootpool/images/demo"));
    let m = c.member("52:54:00:77:00:20".parse().unwrap()).unwrap();
    assert_eq!(m.pool.name, "room-101");
    assert!(c.member("52:54:00:77:00:40".parse().unwrap()).is_none());
    assert_eq!(
        c.member("52:54:00:77:00:01".parse().unwrap())
            .unwrap()
            .entry
            .ip,
        Some(Ipv4Addr::new(10, 77, 0, 11))
    );
}

/// `server.links`: the server's addresses clients are spread over, `address` first whether or
/// not the list names it.
#[test]
fn links_start_with_the_server_address() {
    assert_eq!(
        parse(GOOD).unwrap().server.links,
        [Ipv4Addr::new(10, 77, 0, 1)]
    );
    for list in [
        "[10.77.0.2, 10.77.0.3]",
        "[10.77.0.2, 10.77.0.1, 10.77.0.3]",
    ] {
        let text = GOOD.replace(
            "address: 10.77.0.1",
            &format!("address: 10.77.0.1\n  links: {list}"),
        );
        let c = parse(&text).unwrap();
        assert_eq!(
            c.server.links,
            [1, 2, 3].map(|n| Ipv4Addr::new(10, 77, 0, n)),
            "{list}"
        );
    }
}

#[test]
fn unknown_key_names_file_line_and_key() {
    let text = GOOD.replace("    root: nfs\n", "    root: nfs\n    rot: nbd\n");
    let e = parse(&text).unwrap_err();
    assert_eq!(e.line, Some(20), "{e}");
    assert!(e.reason.contains("unknown field `rot`"), "{e}");
    assert!(
        e.to_string().starts_with("/etc/bootpool/pools.yaml:20:"),
        "{e}"
    );
    assert!(e.path.contains("room-101"), "{e}");
}

#[test]
fn bad_values_name_their_line_and_path() {
    let cases = [
        (
            "address: 10.77.0.1",
            "address: 10.77.0.300",
            3,
            "server.address",
        ),
        (
            "range: 10.77.0.100-10.77.0.199",
            "range: 10.77.0.100-10.77.1.199",
            9,
            "dhcp.range",
        ),
        ("image: demo", "image: nope", 18, "pools.room-101.image"),
        ("root: nfs", "root: iscsi", 19, "pools.room-101.root"),
        (
            "name: pc01, ip: 10.77.0.11",
            "name: pc01, ip: 10.78.0.11",
            22,
            "pools.room-101.clients[0].ip",
        ),
        (
            "\"52:54:00:77:00:01\"",
            "\"52:54:00:77:00\"",
            22,
            "pools.room-101.clients[0].mac",
        ),
        ("lease: 12h", "lease: forever", 11, "dhcp.lease"),
    ];
    for (from, to, line, path) in cases {
        let e = parse(&GOOD.replace(from, to)).unwrap_err();
        assert_eq!((e.line, e.path.as_str()), (Some(line), path), "{e}");
    }
}

/// A word outside its key's choices is refused at its key and line, naming every choice.
#[test]
fn a_word_outside_its_choices_is_refused_naming_them() {
    let cases = [
        (
            "root: nfs",
            "root: iscsi",
            "pools.room-101.root",
            "`iscsi` is not `nfs` or `nbd`",
        ),
        (
            "mode: authoritative",
            "mode: relay",
            "dhcp.mode",
            "`relay` is not `authoritative` or `proxy`",
        ),
        (
            "store: disk",
            "store: tape",
            "images.demo.store",
            "`tape` is not `disk` or `ram`",
        ),
        (
            "    root: nfs\n",
            "    root: nfs\n    boot_over: ipx\n",
            "pools.room-101.boot_over",
            "`ipx` is not `both`, `ipv4` or `ipv6`",
        ),
    ];
    for (from, to, path, reason) in cases {
        let e = parse(&GOOD.replace(from, to)).unwrap_err();
        assert_eq!((e.path.as_str(), e.reason.as_str()), (path, reason), "{e}");
        assert!(e.line.is_some(), "{e}");
    }
}

#[test]
fn overlapping_macs_are_refused() {
    let text = GOOD.replace(
        "      - { macs:",
        "      - { mac: \"52:54:00:77:00:12\" }\n      - { macs:",
    );
    let e = parse(&text).unwrap_err();
    assert_eq!(e.path, "pools.room-101.clients[2].macs", "{e}");
    assert!(e.reason.contains("already listed"), "{e}");
}

#[test]
fn missing_image_files_are_reported() {
    let c = parse(GOOD).unwrap();
    let missing = missing_files(&c);
    assert_eq!(missing.len(), 3);
    assert!(missing[0].reason.contains("vmlinuz"));
}

/// A `secure_boot` pool needs the signed shim and GRUB; `bootpool check` names each key and
/// the package that has it. Without such a pool they are not asked for.
#[test]
fn a_secure_boot_pool_needs_its_signed_loaders() {
    let c = parse(&GOOD.replace(
        "  state_dir: var/\n",
        "  state_dir: var/\n  shim: /nonexistent/shim.efi\n  grub: /nonexistent/grub.efi\n",
    ))
    .unwrap();
    assert!(!c.pools["room-101"].secure_boot);
    assert_eq!(c.server.shim, Path::new("/nonexistent/shim.efi"));
    assert_eq!(missing_files(&c).len(), 3);
    let c = parse(
        &GOOD
            .replace(
                "  state_dir: var/\n",
                "  state_dir: var/\n  shim: /nonexistent/shim.efi\n",
            )
            .replace("    root: nfs\n", "    root: nfs\n    secure_boot: true\n"),
    )
    .unwrap();
    let missing = missing_files(&c);
    let shim = missing
        .iter()
        .find(|e| e.path == "server.shim")
        .expect("shim reported");
    assert!(
        shim.reason.contains("/nonexistent/shim.efi") && shim.reason.contains("shim-signed"),
        "{shim}"
    );
    // The default GRUB path is Debian's; whether this host has it decides the count.
    let debian_grub = Path::new("/usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed");
    assert_eq!(c.server.grub, debian_grub);
    assert_eq!(missing.len(), 4 + usize::from(!debian_grub.is_file()));
    assert!(c.server.tftp, "TFTP is on by default");
}

#[test]
fn copy_on_write_is_off_by_default_and_checked_when_on() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.images["demo"].cow, None);
    let on = |extra: &str| GOOD.replace("    store: disk\n", &format!("    store: disk\n{extra}"));
    let c = parse(&on("    cow: disk\n    cow_limit: 64MiB\n")).unwrap();
    assert_eq!(
        c.images["demo"].cow,
        Some(Cow {
            store: CowStore::Disk,
            limit: 64 << 20
        })
    );
    let c = parse(&on("    cow: ram\n")).unwrap();
    assert_eq!(c.images["demo"].cow.unwrap().limit, DEFAULT_COW_LIMIT);
    for (extra, path, why) in [
        ("    cow: tmpfs\n", "images.demo.cow", "not `ram` or `disk`"),
        (
            "    cow_limit: 1GiB\n",
            "images.demo.cow_limit",
            "needs `cow",
        ),
        (
            "    cow: ram\n    cow_limit: lots\n",
            "images.demo.cow_limit",
            "not a size",
        ),
        (
            "    cow: ram\n    cow_limit: 0\n",
            "images.demo.cow_limit",
            "more than zero",
        ),
    ] {
        let e = parse(&on(extra)).unwrap_err();
        assert_eq!(e.path, path, "{e}");
        assert!(e.reason.contains(why), "{e}");
    }
}

#[test]
fn the_initrd_goes_as_it_is_unless_zstd_is_asked_for() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.images["demo"].initrd_wire, Wire::AsIs);
    let on = |extra: &str| GOOD.replace("    store: disk\n", &format!("    store: disk\n{extra}"));
    let c = parse(&on("    initrd_wire: zstd\n")).unwrap();
    assert_eq!(c.images["demo"].initrd_wire, Wire::Zstd);
    let e = parse(&on("    initrd_wire: xz\n")).unwrap_err();
    assert_eq!(e.path, "images.demo.initrd_wire", "{e}");
    assert!(e.reason.contains("not `as_is` or `zstd`"), "{e}");
    assert!(e.line.is_some(), "{e}");
}

#[test]
fn the_root_goes_as_it_is_unless_zstd_is_asked_for_and_never_under_an_overlay() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.images["demo"].root_wire, Wire::AsIs);
    let on = |extra: &str| GOOD.replace("    store: disk\n", &format!("    store: disk\n{extra}"));
    let c = parse(&on("    root_wire: zstd\n")).unwrap();
    assert_eq!(c.images["demo"].root_wire, Wire::Zstd);
    let e = parse(&on("    root_wire: xz\n")).unwrap_err();
    assert_eq!(e.path, "images.demo.root_wire", "{e}");
    let e = parse(&on("    root_wire: zstd\n    cow: ram\n")).unwrap_err();
    assert_eq!(e.path, "images.demo.root_wire", "{e}");
    assert!(e.reason.contains("copy-on-write overlay"), "{e}");
    assert!(e.line.is_some(), "{e}");
}

#[test]
fn records_go_to_sqlite_in_state_dir_kept_180_days_by_default() {
    let c = parse(GOOD).unwrap();
    assert_eq!(
        c.server.database,
        Database::Sqlite(PathBuf::from("/etc/bootpool/var/records.db"))
    );
    assert_eq!(c.server.retention, Some(Duration::from_secs(180 * 86400)));
}

#[test]
fn database_and_retention_are_checked_with_their_line() {
    let with = |extra: &str| {
        GOOD.replace(
            "  state_dir: var/\n",
            &format!("  state_dir: var/\n{extra}"),
        )
    };
    let c = parse(&with(
        "  database: postgres://bootpool@db/records\n  retention: forever\n",
    ))
    .unwrap();
    assert_eq!(
        c.server.database,
        Database::Postgres("postgres://bootpool@db/records".into())
    );
    assert_eq!(c.server.retention, None);
    assert_eq!(
        parse(&with("  retention: 0\n")).unwrap().server.retention,
        None
    );
    assert_eq!(
        parse(&with("  retention: 90d\n")).unwrap().server.retention,
        Some(Duration::from_secs(90 * 86400))
    );
    let e = parse(&with("  retention: soon\n")).unwrap_err();
    assert_eq!(
        (e.line, e.path.as_str()),
        (Some(6), "server.retention"),
        "{e}"
    );
    assert!(e.reason.contains("forever"), "{e}");
    let e = parse(&with("  database: mysql://x/y\n")).unwrap_err();
    assert_eq!(
        (e.line, e.path.as_str()),
        (Some(6), "server.database"),
        "{e}"
    );
    assert!(
        e.to_string().starts_with("/etc/bootpool/pools.yaml:6:"),
        "{e}"
    );
    // Read as serve reads it (a port that is no number), never connected to.
    let e = parse(&with("  database: postgres://db:port/records\n")).unwrap_err();
    assert_eq!(
        (e.line, e.path.as_str()),
        (Some(6), "server.database"),
        "{e}"
    );
}

/// Debian's nfsmount finds MOUNT only through a portmapper on 111: a pool that needs it with
/// the portmapper elsewhere is refused at its `initramfs` key.
#[test]
fn initramfs_tools_nfs_roots_need_the_portmapper_on_111() {
    let tools = GOOD.replace("root: nfs", "root: nfs\n    initramfs: initramfs-tools");
    assert!(parse(&tools).is_ok());
    let moved = tools.replace(
        "state_dir: var/",
        "state_dir: var/\n  ports: { portmap: 1111 }",
    );
    let e = parse(&moved).unwrap_err();
    assert_eq!(e.path, "pools.room-101.initramfs", "{e}");
    assert!(e.reason.contains("port 111"), "{e}");
    assert!(e.line.is_some(), "{e}");
    // dracut's mount.nfs is given both ports on the command line.
    assert!(parse(&moved.replace("initramfs: initramfs-tools", "initramfs: dracut")).is_ok());
}

/// The defaults are spelled as literals (the man-page check reads them); they must stay the
/// protocols' well-known ports.
#[test]
fn default_ports_are_the_well_known_ones() {
    let ports = Ports::default();
    assert_eq!(ports.nbd, crate::proto::nbd::PORT);
    assert_eq!(ports.portmap, crate::proto::portmap::PORT);
}

/// Addresses no client may be given, and a server outside its clients' subnet, are refused at
/// the key that gives them, with its line.
#[test]
fn reserved_addresses_are_refused_in_ranges_and_fixed_ips() {
    let cases = [
        (
            "range: 10.77.0.100-10.77.0.199",
            "range: 10.77.0.0-10.77.0.199",
            9,
            "dhcp.range",
            "holds 10.77.0.0, the network address of 10.77.0.0/24",
        ),
        (
            "range: 10.77.0.100-10.77.0.199",
            "range: 10.77.0.100-10.77.0.255",
            9,
            "dhcp.range",
            "holds 10.77.0.255, the broadcast address",
        ),
        (
            "range: 10.77.0.100-10.77.0.199",
            "range: 10.77.0.1-10.77.0.199",
            9,
            "dhcp.range",
            "holds 10.77.0.1, the server's own address",
        ),
        (
            "ip: 10.77.0.11",
            "ip: 10.77.0.1",
            22,
            "pools.room-101.clients[0].ip",
            "10.77.0.1 is the server's own address",
        ),
        (
            "ip: 10.77.0.11",
            "ip: 10.77.0.255",
            22,
            "pools.room-101.clients[0].ip",
            "the broadcast address",
        ),
        (
            "address: 10.77.0.1",
            "address: 10.78.0.1",
            3,
            "server.address",
            "10.78.0.1 is outside dhcp.subnet 10.77.0.0/24",
        ),
        (
            "address: 10.77.0.1",
            "address: 10.77.0.1\n  links: [10.77.0.1, 10.78.0.2]",
            4,
            "server.links[1]",
            "10.78.0.2 is outside dhcp.subnet 10.77.0.0/24",
        ),
        (
            "address: 10.77.0.1",
            "address: 10.77.0.1\n  links: [10.77.0.2, 10.77.0.2]",
            4,
            "server.links[1]",
            "10.77.0.2 is listed twice",
        ),
        (
            "address: 10.77.0.1",
            "address: 10.77.0.1\n  links: [10.77.0.150]",
            10,
            "dhcp.range",
            "holds 10.77.0.150, one of the server's own addresses (server.links)",
        ),
    ];
    for (from, to, line, path, why) in cases {
        let e = parse(&GOOD.replace(from, to)).unwrap_err();
        assert_eq!((e.line, e.path.as_str()), (Some(line), path), "{e}");
        assert!(e.reason.contains(why), "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("/etc/bootpool/pools.yaml:{line}:")),
            "{e}"
        );
    }
    // On a /31 both addresses are hosts (RFC 3021).
    let p2p = GOOD
        .replace("address: 10.77.0.1", "address: 10.77.0.0")
        .replace("subnet: 10.77.0.0/24", "subnet: 10.77.0.0/31")
        .replace(
            "range: 10.77.0.100-10.77.0.199",
            "range: 10.77.0.1-10.77.0.1",
        )
        .replace(", ip: 10.77.0.11", "");
    parse(&p2p).unwrap();
}

#[test]
fn two_services_on_one_port_are_refused() {
    let with = |ports: &str| {
        GOOD.replace(
            "  state_dir: var/\n",
            &format!("  state_dir: var/\n  ports:\n{ports}"),
        )
    };
    let e = parse(&with("    nfs: 8080\n")).unwrap_err();
    assert_eq!(
        (e.line, e.path.as_str()),
        (Some(7), "server.ports.nfs"),
        "{e}"
    );
    assert!(e.reason.contains("port 8080 is also server.http's"), "{e}");
    let e = parse(&with("    tftp: 2049\n")).unwrap_err();
    assert_eq!(e.path, "server.ports.tftp", "{e}");
    assert!(e.reason.contains("server.ports.nfs"), "{e}");
    let e = parse(&with("    nbd: 2000\n    nfs: 2000\n")).unwrap_err();
    assert_eq!(
        (e.line, e.path.as_str()),
        (Some(8), "server.ports.nfs"),
        "{e}"
    );
    // The PXE port is bound in proxy mode only.
    let pxe = with("    pxe: 69\n");
    assert!(parse(&pxe).is_ok());
    let proxy = pxe
        .replace("mode: authoritative", "mode: proxy")
        .replace("  range: 10.77.0.100-10.77.0.199\n", "")
        .replace("  router: 10.77.0.1\n", "");
    let e = parse(&proxy).unwrap_err();
    assert_eq!(e.path, "server.ports.pxe", "{e}");
    // Port 0 is "any free port": never a clash.
    assert!(parse(&with("    nfs: 0\n    nbd: 0\n")).is_ok());
}

/// `server.tls`: absent by default; listen defaults to port 8443, a bad address or a port
/// another service has is refused at `server.tls.listen`, and unknown keys at theirs.
#[test]
fn tls_listens_on_its_own_port() {
    assert_eq!(parse(GOOD).unwrap().server.tls, None);
    let with = |tls: &str| {
        GOOD.replace(
            "  state_dir: var/\n",
            &format!("  state_dir: var/\n  tls:\n{tls}"),
        )
    };
    let c = parse(&with("    cert: /etc/bootpool/cert.pem\n    key: k.pem\n")).unwrap();
    let tls = c.server.tls.unwrap();
    assert_eq!(tls.listen, "0.0.0.0:8443".parse().unwrap());
    assert_eq!(tls.cert, std::path::Path::new("/etc/bootpool/cert.pem"));
    assert!(
        tls.key.is_absolute() && tls.key.ends_with("k.pem"),
        "{:?}",
        tls.key
    );
    let e = parse(&with("    listen: nowhere\n    cert: c\n    key: k\n")).unwrap_err();
    assert_eq!(
        (e.path.as_str(), e.line),
        ("server.tls.listen", Some(7)),
        "{e}"
    );
    let e = parse(&with("    listen: 0.0.0.0:8080\n    cert: c\n    key: k\n")).unwrap_err();
    assert_eq!(e.path, "server.tls.listen", "{e}");
    assert!(e.reason.contains("server.http"), "{e}");
    assert!(parse(&with("    cert: c\n")).is_err(), "a key is needed");
    assert!(parse(&with("    cert: c\n    key: k\n    port: 1\n")).is_err());
}

#[test]
fn pool_and_image_names_must_be_plain() {
    for bad in ["../up", ".hidden", "-dash", "a b", "a/b", "ü", "x:y"] {
        let text = GOOD.replace("room-101:", &format!("{bad:?}:"));
        let e = parse(&text).unwrap_err();
        assert_eq!(e.path, format!("pools.{bad}"), "{e}");
        assert_eq!(e.line, Some(17), "{e}");
        assert!(e.reason.contains("not a plain name"), "{e}");
        let text = GOOD
            .replace("  demo:\n", &format!("  {bad:?}:\n"))
            .replace("image: demo", &format!("image: {bad:?}"));
        let e = parse(&text).unwrap_err();
        assert_eq!(e.path, format!("images.{bad}"), "{e}");
        assert_eq!(e.line, Some(13), "{e}");
    }
    for good in ["Room_101", "lab.nfs", "a-b", "9"] {
        let text = GOOD.replace("room-101:", &format!("{good}:"));
        assert!(parse(&text).is_ok(), "{good}");
    }
}

/// `server.link_speeds`: capacities for links the kernel gives no speed (veths, taps, shaped
/// links), in either YAML style; a bad rate or name is refused at its own key.
#[test]
fn link_speeds_parse_into_mbits_and_bad_ones_name_their_key() {
    assert!(parse(GOOD).unwrap().server.link_speeds.is_empty());
    let with = |extra: &str| {
        GOOD.replace(
            "  state_dir: var/\n",
            &format!("  state_dir: var/\n{extra}"),
        )
    };
    let c = parse(&with(
        "  link_speeds: { s0: 250mbit, s1: 2.5gbit, \"tap-x\": 1000 }\n",
    ))
    .unwrap();
    let want: BTreeMap<String, u32> = [("s0", 250), ("s1", 2500), ("tap-x", 1000)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    assert_eq!(c.server.link_speeds, want);
    let c = parse(&with("  link_speeds:\n    br0: 1gbit\n")).unwrap();
    assert_eq!(c.server.link_speeds["br0"], 1000);
    for (extra, line, column, path, why) in [
        (
            "  link_speeds: { s0: 250mbit, s1: fast }\n",
            6,
            31,
            "server.link_speeds.s1",
            "not a link rate",
        ),
        (
            "  link_speeds:\n    br0: 1gbit\n    eth1: 1.5mbit\n",
            8,
            5,
            "server.link_speeds.eth1",
            "whole number of Mbit/s",
        ),
        (
            "  link_speeds: { s0: 0 }\n",
            6,
            18,
            "server.link_speeds.s0",
            "at least 1mbit",
        ),
        (
            "  link_speeds: { a-very-long-name0: 1gbit }\n",
            6,
            18,
            "server.link_speeds.a-very-long-name0",
            "not an interface name",
        ),
    ] {
        let e = parse(&with(extra)).unwrap_err();
        assert_eq!(
            (e.line, e.column, e.path.as_str()),
            (Some(line), Some(column), path),
            "{e}"
        );
        assert!(e.reason.contains(why), "{e}");
        assert!(
            e.to_string().starts_with(&format!(
                "/etc/bootpool/pools.yaml:{line}:{column}: {path}: "
            )),
            "{e}"
        );
    }
    // Unknown keys stay errors: the map is of names, not a place for anything else.
    let e = parse(&with("  link_speed: { s0: 1gbit }\n")).unwrap_err();
    assert!(e.reason.contains("unknown field `link_speed`"), "{e}");
}

#[test]
fn limits_default_sanely_and_bad_values_name_their_line() {
    let c = parse(GOOD).unwrap();
    assert_eq!(
        c.limits,
        Limits {
            tftp_clients: vec!["10.77.0.0/24".parse().unwrap()],
            ..Limits::default()
        }
    );
    let text = format!(
        "{GOOD}limits:\n  http_per_client: 8\n  http_header_timeout: 500ms\n  \
         tftp_clients: [10.78.0.0/16]\n  cow_ram_total: 2GiB\n  tftp_per_client: 200\n"
    );
    let c = parse(&text).unwrap();
    assert_eq!(c.limits.http_per_client, 8);
    assert_eq!(c.limits.tftp_per_client, 200);
    assert_eq!(c.limits.http_header_timeout, Duration::from_millis(500));
    assert_eq!(c.limits.tftp_clients, vec!["10.78.0.0/16".parse().unwrap()]);
    assert_eq!(c.limits.cow_ram_total, Some(2 << 30));
    let lines = GOOD.lines().count();
    for (extra, path, why) in [
        (
            "  nbd_per_client: 0\n",
            "limits.nbd_per_client",
            "more than zero",
        ),
        (
            "  tftp_per_client: 0\n",
            "limits.tftp_per_client",
            "more than zero",
        ),
        (
            "  http_idle_timeout: soon\n",
            "limits.http_idle_timeout",
            "not a duration",
        ),
        (
            "  tftp_clients: [10.1.2.3/8]\n",
            "limits.tftp_clients[0]",
            "host bits",
        ),
        (
            "  cow_disk_total: lots\n",
            "limits.cow_disk_total",
            "not a size",
        ),
        (
            "  tftp_lifetim: 1m\n",
            "limits",
            "unknown field `tftp_lifetim`",
        ),
    ] {
        let e = parse(&format!("{GOOD}limits:\n{extra}")).unwrap_err();
        assert_eq!(e.path, path, "{e}");
        assert!(e.reason.contains(why), "{e}");
        assert_eq!(e.line, Some(lines + 2), "{e}");
        assert!(e.column.is_some(), "{e}");
    }
}

/// `server.read_token`: absent by default; a short or spaced token is refused at its key.
#[test]
fn a_read_token_must_be_long_and_plain() {
    assert_eq!(parse(GOOD).unwrap().server.read_token, None);
    let with = |t: &str| {
        GOOD.replace(
            "  state_dir: var/\n",
            &format!("  state_dir: var/\n  read_token: \"{t}\"\n"),
        )
    };
    let c = parse(&with("4f3c2a1b0e9d8c7b6a5f")).unwrap();
    assert_eq!(c.server.read_token.as_deref(), Some("4f3c2a1b0e9d8c7b6a5f"));
    for bad in ["short", "sixteen chars here"] {
        let e = parse(&with(bad)).unwrap_err();
        assert_eq!(e.path, "server.read_token", "{e}");
        assert_eq!(e.line, Some(6), "{e}");
    }
}

/// `server.admin_token`: absent by default (actions off), held to the read token's rules, and
/// never the read token itself.
#[test]
fn an_admin_token_is_plain_and_not_the_read_token() {
    assert_eq!(parse(GOOD).unwrap().server.admin_token, None);
    let with = |lines: &str| {
        GOOD.replace(
            "  state_dir: var/\n",
            &format!("  state_dir: var/\n{lines}"),
        )
    };
    let c = parse(&with("  admin_token: 0123456789abcdef-act\n")).unwrap();
    assert_eq!(
        c.server.admin_token.as_deref(),
        Some("0123456789abcdef-act")
    );
    let e = parse(&with("  admin_token: short\n")).unwrap_err();
    assert_eq!(
        (e.path.as_str(), e.line),
        ("server.admin_token", Some(6)),
        "{e}"
    );
    let same = "  read_token: 0123456789abcdef-x\n  admin_token: 0123456789abcdef-x\n";
    let e = parse(&with(same)).unwrap_err();
    assert_eq!(
        (e.path.as_str(), e.line),
        ("server.admin_token", Some(7)),
        "{e}"
    );
    assert!(e.reason.contains("differ"), "{e}");
}

#[test]
fn an_image_names_its_files_and_exports_or_gets_the_defaults() {
    let c = parse(GOOD).unwrap();
    let img = &c.images["demo"];
    assert_eq!(img.kernel(), Path::new("/etc/bootpool/images/demo/vmlinuz"));
    assert_eq!(
        img.initrd(),
        Path::new("/etc/bootpool/images/demo/initrd.img")
    );
    assert_eq!(
        img.root_tree(),
        Path::new("/etc/bootpool/images/demo/rootfs")
    );
    assert_eq!(
        img.root_image(),
        Path::new("/etc/bootpool/images/demo/rootfs.img")
    );
    assert_eq!(
        (img.nfs_export.as_str(), img.nbd_export.as_str()),
        ("/demo", "demo")
    );
    assert_eq!(img.initrd_file_name(), "initrd.img");
    let named = GOOD.replace(
        "    store: disk\n",
        "    store: disk\n    kernel: boot/bzImage\n    initrd: boot/initramfs-6.1.img\n    root_tree: tree\n    root_image: root.squashfs\n    nfs_export: /srv/nfs/debian\n    nbd_export: debian-root\n",
    );
    let c = parse(&named).unwrap();
    let img = &c.images["demo"];
    assert_eq!(
        img.kernel(),
        Path::new("/etc/bootpool/images/demo/boot/bzImage")
    );
    assert_eq!(img.root_tree(), Path::new("/etc/bootpool/images/demo/tree"));
    assert_eq!(
        img.root_image(),
        Path::new("/etc/bootpool/images/demo/root.squashfs")
    );
    assert_eq!(img.nfs_export, "/srv/nfs/debian");
    assert_eq!(img.nbd_export, "debian-root");
    assert_eq!(img.initrd_file_name(), "initramfs-6.1.img");
}

#[test]
fn image_file_and_export_names_are_checked_with_their_line() {
    // GOOD's image is `demo:` on line 13, `store:` on 15; the added key is line 16.
    let with =
        |extra: &str| GOOD.replace("    store: disk\n", &format!("    store: disk\n{extra}\n"));
    for (extra, path, why) in [
        (
            "    kernel: ../vmlinuz",
            "images.demo.kernel",
            "plain names inside the image folder",
        ),
        (
            "    kernel: /boot/vmlinuz",
            "images.demo.kernel",
            "relative to `dir`",
        ),
        (
            "    initrd: boot//initrd",
            "images.demo.initrd",
            "plain names",
        ),
        (
            "    root_tree: .hidden",
            "images.demo.root_tree",
            "plain names",
        ),
        (
            "    root_image: vmlinuz",
            "images.demo.root_image",
            "already the image's kernel",
        ),
        (
            "    nfs_export: demo",
            "images.demo.nfs_export",
            "absolute path",
        ),
        (
            "    nfs_export: /",
            "images.demo.nfs_export",
            "absolute path",
        ),
        (
            "    nfs_export: /srv/../etc",
            "images.demo.nfs_export",
            "absolute path",
        ),
        (
            "    nbd_export: a/b",
            "images.demo.nbd_export",
            "not a plain name",
        ),
    ] {
        let e = parse(&with(extra)).unwrap_err();
        assert_eq!((e.path.as_str(), e.line), (path, Some(16)), "{extra}: {e}");
        assert!(e.reason.contains(why), "{extra}: {e}");
    }
    // Two images whose exports a client could not tell apart.
    let two = |a: &str, b: &str| {
        GOOD.replace(
            "    store: disk\n",
            &format!("    store: disk\n{a}\n  other:\n    dir: images/other\n{b}\n"),
        )
    };
    let e = parse(&two("    nfs_export: /srv/a", "    nfs_export: /srv/a/b")).unwrap_err();
    assert_eq!(
        (e.path.as_str(), e.line),
        ("images.other.nfs_export", Some(19)),
        "{e}"
    );
    assert!(e.reason.contains("overlaps image `demo`'s /srv/a"), "{e}");
    let e = parse(&two("    nbd_export: other", "    store: ram")).unwrap_err();
    assert_eq!((e.path.as_str(), e.line), ("images.other", Some(17)), "{e}");
    assert!(
        e.reason
            .contains("NBD export `other` is also image `demo`'s"),
        "{e}"
    );
    assert!(parse(&two("    nfs_export: /srv/a", "    nfs_export: /srv/ab")).is_ok());
}

#[test]
fn a_cmdline_template_is_checked_with_its_line() {
    let with = |extra: &str| {
        GOOD.replace(
            "    cmdline: console=ttyS0\n",
            &format!("    cmdline: console=ttyS0\n{extra}\n"),
        )
    };
    let c = parse(&with(
        "    cmdline_template: \"netroot={server}:{export} {cmdline}\"",
    ))
    .unwrap();
    assert!(c.pools["room-101"].cmdline_template.is_some());
    assert!(
        parse(GOOD).unwrap().pools["room-101"]
            .cmdline_template
            .is_none()
    );
    // `cmdline:` is on line 20 in GOOD, the template on 21.
    let e = parse(&with("    cmdline_template: \"root={rot} {cmdline}\"")).unwrap_err();
    assert_eq!(
        (e.path.as_str(), e.line),
        ("pools.room-101.cmdline_template", Some(21)),
        "{e}"
    );
    assert!(e.reason.contains("unknown placeholder `{rot}`"), "{e}");
    let e = parse(&with("    cmdline_template: \"root={root}\"")).unwrap_err();
    assert_eq!(
        (e.path.as_str(), e.line),
        ("pools.room-101.cmdline", Some(20)),
        "{e}"
    );
    assert!(e.reason.contains("does not say {cmdline}"), "{e}");
}

/// An NFS root's options: `nocto` unless the pool says otherwise; what is not a mount option,
/// what bootpool writes itself, and the key on an NBD pool are refused with their line.
#[test]
fn nfs_options_default_to_nocto_and_are_checked_with_their_line() {
    let with = |extra: &str| GOOD.replace("    root: nfs\n", &format!("    root: nfs\n{extra}\n"));
    assert_eq!(parse(GOOD).unwrap().pools["room-101"].nfs_options, "nocto");
    let c = parse(&with("    nfs_options: \"nocto,actimeo=600\"")).unwrap();
    assert_eq!(c.pools["room-101"].nfs_options, "nocto,actimeo=600");
    assert_eq!(
        parse(&with("    nfs_options: \"\"")).unwrap().pools["room-101"].nfs_options,
        ""
    );
    // `root: nfs` is on line 19 in GOOD, the options on 20.
    for (bad, why) in [
        ("\"nocto actimeo=600\"", "is not a mount option"),
        ("\"nocto,,ac\"", "is not a mount option"),
        ("\"a=b=c\"", "is not a mount option"),
        ("\"vers=3:x\"", "is not a mount option"),
        ("\"nocto,rw\"", "bootpool writes rw itself"),
        ("\"port=2050\"", "bootpool writes port itself"),
    ] {
        let e = parse(&with(&format!("    nfs_options: {bad}"))).unwrap_err();
        assert_eq!(
            (e.path.as_str(), e.line),
            ("pools.room-101.nfs_options", Some(20)),
            "{bad}: {e}"
        );
        assert!(e.reason.contains(why), "{bad}: {e}");
    }
    // Debian's klibc nfsmount refuses what it does not know: an initramfs-tools pool is told.
    let tools = |options: &str| {
        with(&format!(
            "    initramfs: initramfs-tools\n    nfs_options: \"{options}\""
        ))
    };
    assert!(parse(&tools("nocto,acregmax=600,nfsvers=3,hard")).is_ok());
    for bad in ["actimeo=600", "nocto,rdirplus", "acregmax=lots"] {
        let e = parse(&tools(bad)).unwrap_err();
        assert_eq!(e.path, "pools.room-101.nfs_options", "{bad}: {e}");
        assert!(e.reason.contains("klibc's nfsmount"), "{bad}: {e}");
    }
    assert!(parse(&with("    nfs_options: \"actimeo=600\"")).is_ok());
    let nbd = with("    nfs_options: nocto").replace("root: nfs", "root: nbd");
    let e = parse(&nbd).unwrap_err();
    assert_eq!(e.path, "pools.room-101.nfs_options", "{e}");
    assert!(e.reason.contains("root: nfs"), "{e}");
}

/// `server.address6` and `dhcp6`: checked into IPv6 types; each mistake names its line and
/// key.
#[test]
fn the_ipv6_keys_are_checked_and_their_errors_named() {
    let six = GOOD
        .replace(
            "  address: 10.77.0.1\n",
            "  address: 10.77.0.1\n  address6: \"fd77::1\"\n",
        )
        .replace(
            "images:\n",
            "dhcp6:\n  subnet: \"fd77::/64\"\n  range: \"fd77::100-fd77::1ff\"\nimages:\n",
        );
    let c = parse(&six).unwrap();
    let d = c.dhcp6.as_ref().unwrap();
    assert_eq!(c.server.address6, Some("fd77::1".parse().unwrap()));
    assert_eq!(d.router_advertisements, RouterAdverts::Send);
    assert_eq!(d.lease, c.dhcp.lease, "dhcp.lease by default");
    assert!(d.subnet.contains("fd77::abcd".parse().unwrap()));
    assert!(!d.subnet.contains("fd78::1".parse().unwrap()));
    assert_eq!(c.server.ports.dhcp6, 547);
    assert_eq!(c.pools["room-101"].boot_over, BootOver::Both);
    let err = |text: &str| parse(text).unwrap_err();
    let line_of =
        |text: &str, needle: &str| text.lines().position(|l| l.contains(needle)).map(|i| i + 1);
    let no_address = six.replace("  address6: \"fd77::1\"\n", "");
    let e = err(&no_address);
    assert_eq!(
        (e.path.as_str(), e.line),
        ("dhcp6", line_of(&no_address, "dhcp6:")),
        "{e}"
    );
    assert!(e.reason.contains("server.address6"), "{e}");
    let e = err(&six.replace("address6: \"fd77::1\"", "address6: \"fd78::1\""));
    assert_eq!(e.path, "server.address6", "{e}");
    assert!(e.reason.contains("outside dhcp6.subnet"), "{e}");
    let wide = six.replace("fd77::100-fd77::1ff", "fd77::1-fd77::1ff");
    let e = err(&wide);
    assert_eq!(
        (e.path.as_str(), e.line),
        ("dhcp6.range", line_of(&wide, "fd77::1-")),
        "{e}"
    );
    assert!(e.reason.contains("server.address6"), "{e}");
    let e = err(&six.replace("\"fd77::/64\"", "\"fd77::1/64\""));
    assert!(e.reason.contains("host bits"), "{e}");
    let e = err(&six.replace(
        "  range: \"fd77::100-fd77::1ff\"\n",
        "  range: \"fd77::100-fd77::1ff\"\n  router_advertisements: maybe\n",
    ));
    assert_eq!(e.path, "dhcp6.router_advertisements", "{e}");
    let e = err(&six.replace("  interfaces: [br0]\n", ""));
    assert!(e.reason.contains("server.interfaces"), "{e}");
    let leave = six.replace("  interfaces: [br0]\n", "").replace(
        "  range: \"fd77::100-fd77::1ff\"\n",
        "  range: \"fd77::100-fd77::1ff\"\n  router_advertisements: leave\n",
    );
    assert_eq!(
        parse(&leave).unwrap().dhcp6.unwrap().router_advertisements,
        RouterAdverts::Leave
    );
    // A pool that boots over IPv6 only needs DHCPv6.
    let only6 = "    root: nfs\n    boot_over: ipv6\n";
    let c = parse(&six.replace("    root: nfs\n", only6)).unwrap();
    assert_eq!(c.pools["room-101"].boot_over, BootOver::Ipv6);
    let text = GOOD.replace("    root: nfs\n", only6);
    let e = err(&text);
    assert_eq!(
        (e.path.as_str(), e.line),
        ("pools.room-101.boot_over", line_of(&text, "boot_over")),
        "{e}"
    );
    let e = err(&GOOD.replace("    root: nfs\n", "    root: nfs\n    boot_over: ipv5\n"));
    assert!(e.reason.contains("`ipv5`"), "{e}");
}

/// The 1-based line of the first line of `text` holding `needle`.
fn line_with(text: &str, needle: &str) -> Option<usize> {
    text.lines().position(|l| l.contains(needle)).map(|n| n + 1)
}

/// `netconsole: yes` is YAML 1.1's true but YAML 1.2's text: an interface named "yes" would
/// reach the kernel's command line. Refused, saying what to write.
#[test]
fn yaml_1_1_booleans_are_not_taken_for_an_interface_name() {
    for word in ["yes", "no", "On", "OFF", "y"] {
        let text = GOOD.replace(
            "    root: nfs\n",
            &format!("    root: nfs\n    netconsole: {word}\n"),
        );
        let e = parse(&text).unwrap_err();
        assert_eq!(e.path, "pools.room-101.netconsole", "{e}");
        assert_eq!(e.line, line_with(&text, "netconsole"), "{e}");
        assert!(e.reason.contains(&format!("`{word}`")), "{e}");
    }
    let text = GOOD.replace("    root: nfs\n", "    root: nfs\n    netconsole: yes\n");
    assert!(parse(&text).unwrap_err().reason.contains("write `true`"));
    let eth = GOOD.replace("    root: nfs\n", "    root: nfs\n    netconsole: enp1s0\n");
    assert_eq!(
        parse(&eth).unwrap().pools["room-101"].netconsole,
        Netconsole::On(Some("enp1s0".into()))
    );
}

/// Proxy mode gives no addresses: a range, router or DNS servers would be silently ignored,
/// so they are errors; a fixed `ip` still means something there (a warning says what).
#[test]
fn proxy_mode_refuses_what_only_an_address_giving_server_uses() {
    let proxy = GOOD.replace("mode: authoritative", "mode: proxy");
    let e = parse(&proxy).unwrap_err();
    assert_eq!(e.path, "dhcp.range", "{e}");
    assert_eq!(e.line, line_with(&proxy, "range:"), "{e}");
    assert!(e.reason.contains("proxy mode"), "{e}");
    let no_range = proxy.replace("  range: 10.77.0.100-10.77.0.199\n", "");
    let e = parse(&no_range).unwrap_err();
    assert_eq!(e.path, "dhcp.router", "{e}");
    let bare = no_range.replace("  router: 10.77.0.1\n", "");
    let c = parse(&bare).unwrap();
    assert_eq!(c.dhcp.mode, DhcpMode::Proxy);
    let ip: Vec<&ConfigError> = c
        .warnings
        .iter()
        .filter(|w| w.path.ends_with(".ip"))
        .collect();
    assert_eq!(ip.len(), 1, "{:?}", c.warnings);
    assert_eq!(ip[0].path, "pools.room-101.clients[0].ip");
    assert!(
        ip[0].reason.contains("gives no address in proxy mode"),
        "{}",
        ip[0]
    );
    let e =
        parse(&bare.replace("  lease: 12h\n", "  lease: 12h\n  dns: [10.77.0.53]\n")).unwrap_err();
    assert_eq!(e.path, "dhcp.dns", "{e}");
    // Authoritative, the fixed address is no warning.
    assert!(parse(GOOD).unwrap().warnings.is_empty());
}

/// A plain name is one machine's: not given to a MAC range; no two machines of the file share
/// a name, patterns expanded, and the refusal names both places.
#[test]
fn a_name_belongs_to_one_machine() {
    let ranged = GOOD.replace(
        "{ macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\" }",
        "{ macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\", name: lab }",
    );
    let e = parse(&ranged).unwrap_err();
    assert_eq!(e.path, "pools.room-101.clients[1].name", "{e}");
    assert_eq!(e.line, line_with(&ranged, "name: lab"), "{e}");
    assert!(e.reason.contains("lists 48"), "{e}");
    let twice = GOOD.replace(
        "      - { macs:",
        "      - { mac: \"52:54:00:77:00:02\", name: PC01 }\n      - { macs:",
    );
    let e = parse(&twice).unwrap_err();
    assert_eq!(e.path, "pools.room-101.clients[1].name", "{e}");
    let first = format!(
        "`PC01` (52:54:00:77:00:02) is already the name of 52:54:00:77:00:01 at \
         /etc/bootpool/pools.yaml:{}:",
        line_with(&twice, "name: pc01").unwrap()
    );
    assert!(
        e.reason.contains(&first) && e.reason.ends_with(": pools.room-101.clients[0].name"),
        "{e}"
    );
    // A pattern's names collide with a plain name of another pool.
    let pattern = GOOD
        .replace(
            "{ macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\" }",
            "{ macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\", name: \"pc{n:02}\" }",
        )
        .replace(
            "{ mac: \"52:54:00:77:00:01\", name: pc01, ip: 10.77.0.11 }",
            "{ mac: \"52:54:00:77:00:01\", name: pc48, ip: 10.77.0.11 }",
        );
    let e = parse(&pattern).unwrap_err();
    assert_eq!(e.line, line_with(&pattern, "name: \"pc{n:02}\""), "{e}");
    assert!(
        e.reason
            .contains("`pc48` (52:54:00:77:00:3f) is already the name of 52:54:00:77:00:01"),
        "{e}"
    );
    // Counted from `first`, the same pattern fits beside it.
    let c = parse(&pattern.replace("name: \"pc{n:02}\"", "name: \"pc{n:02}\", first: 49"));
    assert!(c.is_ok(), "{c:?}");
    // From 53 on, two digits make 47 names for its 48 machines.
    let e =
        parse(&pattern.replace("name: \"pc{n:02}\"", "name: \"pc{n:02}\", first: 53")).unwrap_err();
    assert!(
        e.reason.contains("makes 47 names, and the entry lists 48"),
        "{e}"
    );
}

/// A pattern gives each machine of its range a name, from `first` or its bracket's first
/// number; each member knows its own.
#[test]
fn name_patterns_name_each_machine_of_a_range() {
    let c = parse(&GOOD.replace(
        "{ macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\" }",
        "{ macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\", name: \"pc{n:02}\", first: 2 }",
    ))
    .unwrap();
    let name = |mac: &str| c.member(mac.parse().unwrap()).unwrap().name();
    assert_eq!(name("52:54:00:77:00:01").as_deref(), Some("pc01"));
    assert_eq!(name("52:54:00:77:00:10").as_deref(), Some("pc02"));
    assert_eq!(name("52:54:00:77:00:3f").as_deref(), Some("pc49"));
    let c = parse(&GOOD.replace(
        "{ macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\" }",
        "{ macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\", name: \"n[001-048]\" }",
    ))
    .unwrap();
    let name = |mac: &str| c.member(mac.parse().unwrap()).unwrap().name();
    assert_eq!(name("52:54:00:77:00:11").as_deref(), Some("n002"));
    let small = GOOD.replace(
        "{ macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\" }",
        "{ macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\", name: \"n[1-9]\" }",
    );
    let e = parse(&small).unwrap_err();
    assert_eq!(e.path, "pools.room-101.clients[1].name", "{e}");
    assert!(
        e.reason.contains("makes 9 names, and the entry lists 48"),
        "{e}"
    );
    let lone = GOOD.replace("name: pc01, ip", "first: 3, ip");
    let e = parse(&lone).unwrap_err();
    assert_eq!(e.path, "pools.room-101.clients[0].first", "{e}");
}

/// Valid but unlikely values are warnings, located like errors: a MAC range of millions (a
/// digit too many), more machines than the range has addresses.
#[test]
fn implausible_sizes_are_warnings() {
    let millions = GOOD.replace("52:54:00:77:00:3f", "52:54:00:ff:00:3f");
    let c = parse(&millions).unwrap();
    let w: Vec<String> = c.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(c.warnings.len(), 2, "{w:?}");
    assert_eq!(
        c.warnings[0].path, "pools.room-101.clients[1].macs",
        "{w:?}"
    );
    assert_eq!(c.warnings[0].line, line_with(&millions, "macs:"), "{w:?}");
    assert!(c.warnings[0].reason.contains("8912944 machines"), "{w:?}");
    assert_eq!(c.warnings[1].path, "dhcp.range", "{w:?}");
    assert!(
        c.warnings[1].reason.contains("holds 100 addresses"),
        "{w:?}"
    );
    // 48 machines in a range of 40: only the second warning.
    let small = GOOD.replace("10.77.0.100-10.77.0.199", "10.77.0.100-10.77.0.139");
    let c = parse(&small).unwrap();
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(
        c.warnings[0].reason.contains("list 48 machines"),
        "{}",
        c.warnings[0]
    );
}

/// A missing image file is the image's: reported once at `images.NAME.dir` with the pools
/// that boot from it.
#[test]
fn missing_image_files_are_the_images_dir_s() {
    let two = GOOD.replace(
        "pools:\n",
        "pools:\n  room-102:\n    image: demo\n    root: nfs\n",
    );
    let c = parse(&two).unwrap();
    let missing = crate::image::serve::missing_files(&c);
    assert_eq!(missing.len(), 3, "{missing:?}");
    assert!(
        missing.iter().all(|e| e.path == "images.demo.dir"),
        "{missing:?}"
    );
    assert!(
        missing[0].reason.contains("pools room-101, room-102"),
        "{}",
        missing[0]
    );
}

/// GOOD with two subnets, a relay list, and the second subnet's own DNS and lease.
fn two_subnets() -> String {
    GOOD.replace(
        "  subnet: 10.77.0.0/24\n  range: 10.77.0.100-10.77.0.199\n  router: 10.77.0.1\n",
        "  relays: [10.77.0.254, 10.30.0.0/16]
  subnets:
    - subnet: 10.77.0.0/24
      range: 10.77.0.100-10.77.0.199
      router: 10.77.0.1
    - subnet: 10.20.0.0/24
      range: 10.20.0.100-10.20.0.199
      router: 10.20.0.1
      dns: [10.20.0.53]
      lease: 1h
",
    )
    .replace(
        "      - { macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\" }\n",
        "      - { macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\" }\n      - { mac: \"52:54:00:77:00:40\", ip: 10.20.0.40 }\n",
    )
}

/// `dhcp.subnets`: each subnet with its own keys, the lease defaulting to `dhcp.lease`; the
/// server's own is the one holding its address; TFTP answers every subnet; the one-subnet form
/// is a list of one.
#[test]
fn several_subnets_each_keep_their_own_keys() {
    let c = parse(&two_subnets()).unwrap();
    let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
    assert_eq!(c.dhcp.subnets.len(), 2);
    assert_eq!(c.dhcp.home().router, Some(ip("10.77.0.1")));
    assert_eq!(c.dhcp.home().lease, Duration::from_secs(12 * 3600));
    let other = c.dhcp.subnet_of(ip("10.20.0.7")).unwrap();
    assert_eq!(
        (other.router, other.dns.clone(), other.lease),
        (
            Some(ip("10.20.0.1")),
            vec![ip("10.20.0.53")],
            Duration::from_secs(3600)
        )
    );
    assert_eq!(other.range, Some((ip("10.20.0.100"), ip("10.20.0.199"))));
    assert!(c.dhcp.subnet_of(ip("10.21.0.1")).is_none());
    let relays: Vec<String> = c
        .dhcp
        .relays
        .iter()
        .flatten()
        .map(ToString::to_string)
        .collect();
    assert_eq!(relays, ["10.77.0.254/32", "10.30.0.0/16"]);
    let tftp: Vec<String> = c
        .limits
        .tftp_clients
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(tftp, ["10.77.0.0/24", "10.20.0.0/24"]);
    let one = parse(GOOD).unwrap();
    assert_eq!(one.dhcp.subnets.len(), 1);
    assert_eq!(one.dhcp.relays, None);
    assert_eq!(one.limits.tftp_clients, [one.dhcp.home().subnet]);
}

/// What cannot work across subnets is refused at its key, with its line.
#[test]
fn subnet_mistakes_are_refused_at_their_key() {
    let list = two_subnets();
    let line_of =
        |text: &str, needle: &str| text.lines().position(|l| l.contains(needle)).map(|i| i + 1);
    let cases = [
        (
            "subnet: 10.20.0.0/24",
            "subnet: 10.77.0.128/25",
            "10.77.0.128/25",
            "dhcp.subnets[1].subnet",
            "overlaps dhcp.subnets[0] 10.77.0.0/24",
        ),
        (
            "range: 10.20.0.100-10.20.0.199",
            "range: 10.20.0.100-10.20.1.9",
            "10.20.1.9",
            "dhcp.subnets[1].range",
            "10.20.1.9 is outside 10.20.0.0/24",
        ),
        (
            "router: 10.20.0.1",
            "router: 10.21.0.1",
            "10.21.0.1",
            "dhcp.subnets[1].router",
            "10.21.0.1 is outside 10.20.0.0/24",
        ),
        (
            "      range: 10.20.0.100-10.20.0.199\n",
            "",
            "- subnet: 10.20.0.0/24",
            "dhcp.subnets[1]",
            "authoritative mode needs a `range`",
        ),
        (
            "address: 10.77.0.1",
            "address: 10.99.0.1",
            "10.99.0.1",
            "server.address",
            "10.99.0.1 is in none of dhcp.subnets (10.77.0.0/24, 10.20.0.0/24)",
        ),
        (
            "  lease: 12h\n",
            "  lease: 12h\n  router: 10.77.0.2\n",
            "  router: 10.77.0.2",
            "dhcp.router",
            "with `dhcp.subnets`, each subnet's `router` goes in its entry",
        ),
        (
            "10.30.0.0/16",
            "10.30.0.1/16",
            "10.30.0.1/16",
            "dhcp.relays[1]",
            "host bits",
        ),
        (
            "ip: 10.20.0.40",
            "ip: 10.50.0.40",
            "10.50.0.40",
            "pools.room-101.clients[2].ip",
            "10.50.0.40 is outside 10.77.0.0/24, 10.20.0.0/24",
        ),
        (
            "ip: 10.20.0.40",
            "ip: 10.20.0.255",
            "10.20.0.255",
            "pools.room-101.clients[2].ip",
            "the broadcast address of 10.20.0.0/24",
        ),
    ];
    for (from, to, at, path, why) in cases {
        assert!(list.contains(from), "{from}");
        let text = list.replacen(from, to, 1);
        let e = parse(&text).unwrap_err();
        assert_eq!((e.path.as_str(), e.line), (path, line_of(&text, at)), "{e}");
        assert!(e.reason.contains(why), "{e}");
    }
    // The one-subnet form: a router elsewhere, and no subnet at all.
    let e = parse(&GOOD.replace("router: 10.77.0.1", "router: 10.78.0.1")).unwrap_err();
    assert_eq!((e.path.as_str(), e.line), ("dhcp.router", Some(10)), "{e}");
    let e = parse(&GOOD.replace("  subnet: 10.77.0.0/24\n", "")).unwrap_err();
    assert_eq!(e.path, "dhcp", "{e}");
    assert!(e.reason.contains("needs `subnet`"), "{e}");
}

/// `dhcp.subnets[i].uplink`: a rate like `server.link_speeds`', optional; what is not a rate
/// is refused at its key and line; the one-subnet form has none.
#[test]
fn a_subnet_may_declare_its_rooms_uplink() {
    let with = |rate: &str| {
        two_subnets().replacen(
            "      lease: 1h\n",
            &format!("      lease: 1h\n      uplink: {rate}\n"),
            1,
        )
    };
    let c = parse(&with("1gbit")).unwrap();
    let uplinks: Vec<Option<u32>> = c.dhcp.subnets.iter().map(|s| s.uplink_mbps).collect();
    assert_eq!(uplinks, [None, Some(1000)]);
    assert_eq!(
        parse(&with("250")).unwrap().dhcp.subnets[1].uplink_mbps,
        Some(250)
    );
    assert!(
        parse(&two_subnets())
            .unwrap()
            .dhcp
            .subnets
            .iter()
            .all(|s| s.uplink_mbps.is_none())
    );
    for bad in ["fast", "0.5mbit", "1.5mbit"] {
        let text = with(bad);
        let e = parse(&text).unwrap_err();
        let line = text
            .lines()
            .position(|l| l.contains("uplink:"))
            .map(|i| i + 1);
        assert_eq!(
            (e.path.as_str(), e.line),
            ("dhcp.subnets[1].uplink", line),
            "{e}"
        );
    }
    let e = parse(&GOOD.replace(
        "  router: 10.77.0.1\n",
        "  router: 10.77.0.1\n  uplink: 1gbit\n",
    ))
    .unwrap_err();
    assert!(e.to_string().contains("uplink"), "{e}");
}

/// A reload may not change a room's uplink (the pacer shares them out as found at start):
/// refused at `dhcp.subnets`, the running config kept; one without uplinks passes.
#[test]
fn a_reload_cannot_change_an_uplink() {
    let old = parse(&two_subnets()).unwrap();
    let text = two_subnets().replacen(
        "      lease: 1h\n",
        "      lease: 1h\n      uplink: 1gbit\n",
        1,
    );
    let new = parse(&text).unwrap();
    let refused = super::reload::refused(&old, &new, false);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].path, "dhcp.subnets");
    assert!(refused[0].reason.contains("uplinks"), "{}", refused[0]);
    assert!(super::reload::refused(&old, &old, false).is_empty());
}

/// A client entry's own `cmdline` follows the pool's, its `image` replaces the pool's (and
/// joins the images the pool boots), its `revision` pins it to one revision of that image;
/// what they name is checked where they say it.
#[test]
fn an_entry_overrides_its_pools_cmdline_image_and_revision() {
    let two = GOOD.replace(
        "    store: disk\npools:",
        "    store: disk\n  desk: { dir: images/desk }\npools:",
    );
    let with = |extra: &str| {
        two.replace(
            "{ macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\" }",
            &format!("{{ macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\", {extra} }}"),
        )
    };
    let c = parse(&with("cmdline: quiet, image: desk, revision: 0123456789ab")).unwrap();
    let m = c.member("52:54:00:77:00:11".parse().unwrap()).unwrap();
    assert_eq!(m.image().name, "desk");
    assert_eq!(m.cmdline(), "console=ttyS0 quiet");
    assert_eq!(m.revision(), Some("0123456789ab"));
    let names: Vec<&str> = m.pool.images().iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["demo", "desk"]);
    // The fixed entry keeps the pool's.
    let pc01 = c.member("52:54:00:77:00:01".parse().unwrap()).unwrap();
    assert_eq!(
        (pc01.image().name.as_str(), pc01.cmdline()),
        ("demo", "console=ttyS0".to_string())
    );
    assert_eq!(pc01.revision(), None);
    for (extra, key, says) in [
        (
            "image: nope",
            "image",
            "no image `nope` (images: demo, desk)",
        ),
        ("revision: r2", "revision", "`r2` is not a revision id"),
    ] {
        let text = with(extra);
        let e = parse(&text).unwrap_err();
        assert_eq!(e.path, format!("pools.room-101.clients[1].{key}"), "{e}");
        assert_eq!(e.line, line_with(&text, extra), "{e}");
        assert!(e.reason.contains(says), "{e}");
    }
    // A template that places no {cmdline} cannot take an entry's.
    let t = with("cmdline: quiet").replace(
        "    cmdline: console=ttyS0\n",
        "    cmdline_template: \"{root}\"\n",
    );
    let e = parse(&t).unwrap_err();
    assert_eq!(e.path, "pools.room-101.clients[1].cmdline", "{e}");
    // A pinned revision that is not on disk is what `check` finds missing, at its key.
    let missing = missing_files(&parse(&with("revision: 0123456789ab")).unwrap());
    assert!(
        missing
            .iter()
            .any(|e| e.path == "pools.room-101.clients[1].revision"
                && e.reason.contains("no revision 0123456789ab on disk")),
        "{missing:?}"
    );
}

/// A pool's wake schedule: `at` local `HH:MM`, `days` by name (default every day), and
/// `per_second`; each wrong value named by file, line and key.
#[test]
fn a_pools_wake_schedule_is_checked_by_key() {
    let with = |keys: &str| {
        GOOD.replace(
            "    root: nfs\n",
            &format!("    root: nfs\n    wake: {keys}\n"),
        )
    };
    let c = parse(&with(
        "{ at: \"07:45\", days: [mon, tue, wed, thu, fri], per_second: 5 }",
    ))
    .unwrap();
    let w = c.pools["room-101"].wake.clone().unwrap();
    assert_eq!(w.minute, 465);
    assert_eq!(w.days, [true, true, true, true, true, false, false]);
    assert_eq!(w.per_second, Some(5));
    let every = parse(&with("{ at: \"23:59\" }")).unwrap();
    assert_eq!(
        every.pools["room-101"].wake.as_ref().unwrap().days,
        [true; 7]
    );
    assert!(parse(GOOD).unwrap().pools["room-101"].wake.is_none());
    for (keys, path, reason) in [
        (
            "{ at: \"7:45\" }",
            "pools.room-101.wake.at",
            "`7:45` is not a time of day like \"07:45\" (24-hour, local)",
        ),
        (
            "{ at: \"24:00\" }",
            "pools.room-101.wake.at",
            "`24:00` is not a time of day like \"07:45\" (24-hour, local)",
        ),
        (
            "{ at: \"07:45\", days: [mon, friday] }",
            "pools.room-101.wake.days[1]",
            "`friday` is not a day: one of mon, tue, wed, thu, fri, sat, sun",
        ),
        (
            "{ at: \"07:45\", days: [] }",
            "pools.room-101.wake.days",
            "names no day: leave `wake` out instead",
        ),
        (
            "{ at: \"07:45\", per_second: 0 }",
            "pools.room-101.wake.per_second",
            "must be at least 1",
        ),
    ] {
        let text = with(keys);
        let e = parse(&text).unwrap_err();
        assert_eq!((e.path.as_str(), e.reason.as_str()), (path, reason), "{e}");
        assert!(e.line.is_some(), "{e}");
    }
    let e = parse(&with("{ at: \"07:45\", when: daily }")).unwrap_err();
    assert!(e.to_string().contains("when"), "{e}");
}

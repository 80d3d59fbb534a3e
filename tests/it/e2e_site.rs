//! End to end: a site of two servers (docs/site.md). One PostgreSQL (started by the test,
//! reached through its Unix socket from the lab's namespaces), `bootpool lab` running member
//! `a` on the room's bridge and `--member`'s server `b` in a namespace of its own cabled to
//! it, each with its own address, state folder and DHCP range. Four qemu VMs boot the demo
//! image, two over NFS and two over NBD, their MACs picked so that RFC 3074's hash gives one
//! of each root to each member: every VM boots, leased by its owner alone, and `bootpool
//! report` (the database's one view) holds the boots of both members. Before the VMs, a stranger (a DHCP
//! client in no pool, which requires enrolment, with no lease on any member) asks three times
//! and no member answers. Slow (four VMs): ignored by default, run by `scripts/test --all`.
//! Needs root, qemu, busybox, PostgreSQL's server binaries and the demo image.

use crate::common::lab::{lab_config, run_lab};
use crate::common::postgres::Postgres;
use std::process::Command;

/// The shipped pools' clients, replaced by the MACs picked.
const NFS_CLIENTS: &str = "      - { mac: \"52:54:00:77:00:01\", name: pc01, ip: 10.77.0.11 }\n      - { macs: \"52:54:00:77:00:02-52:54:00:77:00:3f\" }\n";
const NBD_CLIENTS: &str = "      - { macs: \"52:54:00:77:01:01-52:54:00:77:01:3f\" }\n";
const RANGE: &str = "range: 10.77.0.100-10.77.0.250";
const STRANGER: &str = "52:54:00:99:00:01";

/// The first MAC `52:54:00:77:POOL:NN` that member `a` owns and the first that `b` owns,
/// of two live members (bucket even: the first name, odd: the second).
fn one_each(pool: u8) -> [String; 2] {
    let mut out: [Option<String>; 2] = [None, None];
    for n in 2..0x40u8 {
        let mac = [0x52, 0x54, 0, 0x77, pool, n];
        let owner = usize::from(bootpool::site::hash::bucket(&mac) % 2);
        out[owner].get_or_insert_with(|| format!("52:54:00:77:{pool:02x}:{n:02x}"));
    }
    out.map(|m| m.expect("a MAC for each member"))
}

/// The lab's config for member `a` (address .1) or `b` (.2): the shipped one with the
/// database, a range of its own, the picked clients and its own state folder.
fn member_config(dir: &std::path::Path, b: bool, url: &str) -> std::path::PathBuf {
    member_config_in(dir, b, url, "authoritative")
}

/// `member_config` in DHCP mode `mode` (`authoritative` or `proxy`).
fn member_config_in(dir: &std::path::Path, b: bool, url: &str, mode: &str) -> std::path::PathBuf {
    let (nfs, nbd) = (one_each(0), one_each(1));
    lab_config(dir, |t| {
        assert!(t.contains("mode: authoritative\n"));
        let t = t.replace("mode: authoritative\n", &format!("mode: {mode}\n"));
        assert!(t.contains(NFS_CLIENTS) && t.contains(NBD_CLIENTS) && t.contains(RANGE));
        let clients = |macs: &[String; 2]| {
            macs.iter()
                .map(|m| format!("      - {{ mac: \"{m}\" }}\n"))
                .collect::<String>()
        };
        let t = t
            .replace(NFS_CLIENTS, &clients(&nfs))
            .replace(NBD_CLIENTS, &clients(&nbd))
            .replace("server:\n", &format!("server:\n  database: \"{url}\"\n"));
        // In proxy mode dnsmasq gives the addresses: the members have no range or router.
        let t = match mode {
            "proxy" => t
                .replace(&format!("  {RANGE}\n"), "")
                .replace("  router: 10.77.0.1\n", ""),
            _ => t,
        };
        match b {
            false => t.replace(RANGE, "range: 10.77.0.100-10.77.0.169"),
            // The lab reads b's API from a's address, in the room's subnet: with a token.
            true => t
                .replace(RANGE, "range: 10.77.0.170-10.77.0.239")
                .replace("address: 10.77.0.1 ", "address: 10.77.0.2 ")
                .replace("server:\n", "server:\n  read_token: lab-reads-member-b\n"),
        }
    })
}

#[test]
#[ignore = "four VMs and two servers (minutes under TCG): scripts/test --all"]
fn two_servers_boot_the_room_over_nfs_and_nbd_record_in_one_view_and_refuse_a_stranger() {
    let pg = Postgres::start();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config = member_config(dir_a.path(), false, &pg.socket_url());
    let second = member_config(dir_b.path(), true, &pg.socket_url());
    assert!(
        std::fs::read_to_string(&second)
            .unwrap()
            .contains("address: 10.77.0.2 "),
        "the second server's address"
    );

    let (table, rows) = run_lab(
        &config,
        &[
            "--pool",
            "lab-nfs",
            "--pool",
            "lab-nbd",
            "--clients",
            "2",
            "--member",
            second.to_str().unwrap(),
            "--stranger",
            STRANGER,
            "--timeout",
            "900",
        ],
        1000,
    );
    assert_eq!(rows.len(), 4, "{table}");
    for row in &rows {
        assert_eq!(row[3], "booted", "{table}");
    }

    // The site's one view: `bootpool report` on member a's config reads the boots that both
    // members recorded (each VM was booted by its owner alone).
    let mut report = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    report.args(["report", "--events", "--config"]).arg(&config);
    let (ok, lines, err) = crate::common::run(&mut report, 60);
    assert!(ok, "{err}");
    let events: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let macs: Vec<String> = one_each(0).into_iter().chain(one_each(1)).collect();
    for mac in &macs {
        assert!(
            events
                .iter()
                .any(|e| e["who"]["mac"].as_str() == Some(mac.as_str())),
            "no event of {mac} in the site's records:\n{lines}"
        );
    }
    let booted = events.iter().filter(|e| e["event"] == "booted").count();
    assert!(booted >= 4, "{booted} booted events:\n{lines}");
    // Each VM was leased by its owner alone (each member's lease table is its own), and the
    // stranger by neither.
    let leases = |dir: &std::path::Path| {
        ["leases.json", "leases.journal"]
            .iter()
            .map(|f| std::fs::read_to_string(dir.join("var").join(f)).unwrap_or_default())
            .collect::<String>()
    };
    let (of_a, of_b) = (leases(dir_a.path()), leases(dir_b.path()));
    for pool in [0, 1] {
        let [a, b] = one_each(pool);
        assert!(
            of_a.contains(&a) && !of_b.contains(&a),
            "{a}: a's\n{of_a}\nb's\n{of_b}"
        );
        assert!(
            of_b.contains(&b) && !of_a.contains(&b),
            "{b}: a's\n{of_a}\nb's\n{of_b}"
        );
    }
    assert!(!of_a.contains(STRANGER) && !of_b.contains(STRANGER));
}

#[test]
#[ignore = "four VMs and two servers (minutes under TCG): scripts/test --all"]
fn two_servers_in_proxy_mode_answer_each_pxe_client_by_its_owner_alone() {
    // dnsmasq (the lab's, on the room's bridge) gives the addresses; the members give the
    // boot, each only to the clients RFC 3074's hash gives it.
    let pg = Postgres::start();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config = member_config_in(dir_a.path(), false, &pg.socket_url(), "proxy");
    let second = member_config_in(dir_b.path(), true, &pg.socket_url(), "proxy");
    let (table, rows) = run_lab(
        &config,
        &[
            "--pool",
            "lab-nfs",
            "--pool",
            "lab-nbd",
            "--clients",
            "2",
            "--member",
            second.to_str().unwrap(),
            "--timeout",
            "900",
        ],
        1000,
    );
    assert_eq!(rows.len(), 4, "{table}");
    for row in &rows {
        assert_eq!(row[3], "booted", "{table}");
    }
    // Each member's log names the PXE ACKs it sent: its own clients', never the other's.
    let run = crate::common::lab::run_dir(&dir_a.path().join("var"));
    let log = |name: &str| std::fs::read_to_string(run.join(name)).unwrap_or_default();
    let (of_a, of_b) = (log("bootpool.log"), log("bootpool-b.log"));
    let acked = |log: &str, mac: &str| {
        log.lines()
            .any(|l| l.contains("pxe ack") && l.contains(&format!("mac={mac}")))
    };
    for pool in [0, 1] {
        let [a, b] = one_each(pool);
        assert!(
            acked(&of_a, &a) && !acked(&of_b, &a),
            "{a}: a's\n{of_a}\nb's\n{of_b}"
        );
        assert!(
            acked(&of_b, &b) && !acked(&of_a, &b),
            "{b}: a's\n{of_a}\nb's\n{of_b}"
        );
    }
}

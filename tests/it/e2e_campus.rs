//! End to end on a campus of two subnets: `bootpool lab --room2` puts some qemu VMs on a
//! second bridge behind a router namespace whose ISC dhcrelay relays their DHCP to the server
//! (giaddr and option 82 set). Authoritative: the VMs of both rooms boot NFS and NBD roots,
//! each with an address and router of its own room, the relayed leases keeping the relay and
//! its circuit id. Proxy mode: dnsmasq, the site's DHCP server on the server's segment, gives
//! both rooms' addresses (the second through the same relay) while bootpool gives the boot
//! answer, and the VMs of both rooms boot. Slow (four VMs each): ignored by default, run by
//! `scripts/test --all`. Needs root, qemu, dhcrelay, dnsmasq and the demo image.

use crate::common::lab::{lab_config, run_lab};
use std::net::Ipv4Addr;
use std::path::Path;

/// The shipped config's one-subnet `dhcp` section.
const ONE_SUBNET: &str = "dhcp:
  mode: authoritative
  subnet: 10.77.0.0/24
  range: 10.77.0.100-10.77.0.250
  router: 10.77.0.1
  lease: 12h
";

/// The pools' command line, and the same without the kernel's IO-APIC timer check: four VMs
/// under TCG on a busy host fail it now and then ("IO-APIC + timer doesn't work"), a panic
/// before anything of bootpool's runs.
pub(crate) const CMDLINE: &str = "cmdline: console=ttyS0\n";
pub(crate) const TIMER_CMDLINE: &str = "cmdline: console=ttyS0 no_timer_check\n";

/// The relay's address on the server's segment, where the lab's router sits.
const RELAY: &str = "10.77.0.254";
const ROOM2_ROUTER: &str = "10.20.0.1";

/// The lab config with two subnets: the server's and room 2's, relayed by `RELAY`; `mode`
/// authoritative (each with its range and router) or proxy (dnsmasq's addresses).
fn campus(dir: &Path, mode: &str) -> std::path::PathBuf {
    let dhcp = match mode {
        "authoritative" => format!(
            "dhcp:
  mode: authoritative
  lease: 12h
  relays: [{RELAY}]
  subnets:
    - {{ subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.250, router: 10.77.0.1 }}
    - {{ subnet: 10.20.0.0/24, range: 10.20.0.100-10.20.0.150, router: {ROOM2_ROUTER}, dns: [10.20.0.53] }}
"
        ),
        _ => format!(
            "dhcp:
  mode: proxy
  relays: [{RELAY}]
  subnets:
    - {{ subnet: 10.77.0.0/24 }}
    - {{ subnet: 10.20.0.0/24 }}
"
        ),
    };
    lab_config(dir, |t| {
        assert!(t.contains(ONE_SUBNET), "{t}");
        t.replace(ONE_SUBNET, &dhcp).replace(CMDLINE, TIMER_CMDLINE)
    })
}

/// Boots NFS and NBD pools, two clients each, the second of each in room 2: pc01 (NFS, room
/// 1), pc02 (NFS, room 2), pc03 (NBD, room 1), pc04 (NBD, room 2). The table's rows by client.
fn boot_both_rooms(config: &Path) -> (String, Vec<Vec<String>>) {
    let (table, rows) = run_lab(
        config,
        &[
            "--pool",
            "lab-nfs",
            "--pool",
            "lab-nbd",
            "--clients",
            "2",
            "--room2",
            "1",
            "--timeout",
            "600",
        ],
        700,
    );
    assert_eq!(rows.len(), 4, "{table}");
    for row in &rows {
        assert_eq!(row[3], "booted", "{table}");
    }
    (table, rows)
}

fn in_room2(ip: &str) -> bool {
    let ip: Ipv4Addr = ip.parse().unwrap();
    ip.octets()[..3] == [10, 20, 0]
}

/// A client's console in the one lab run under `state_dir`.
fn console(state_dir: &Path, name: &str) -> String {
    let run = crate::common::lab::run_dir(state_dir);
    String::from_utf8_lossy(&std::fs::read(run.join(format!("{name}.log"))).unwrap()).into_owned()
}

/// The boots `/api/v1/boots` gave at the end of the one lab run under `state_dir`.
fn api_boots(state_dir: &Path) -> Vec<serde_json::Value> {
    let run = crate::common::lab::run_dir(state_dir);
    serde_json::from_str(&std::fs::read_to_string(run.join("boots.json")).unwrap()).unwrap()
}

/// The demo initrd's `network up: NIC IP/MASK router ROUTER server ...` line of a console.
fn network_line(console: &str) -> &str {
    console
        .lines()
        .find(|l| l.contains("network up: "))
        .unwrap_or_else(|| panic!("no network line in\n{console}"))
}

#[test]
#[ignore = "four VM boots (minutes under TCG): scripts/test --all"]
fn vms_in_two_subnets_boot_nfs_and_nbd_through_a_relay() {
    let dir = tempfile::tempdir().unwrap();
    let config = campus(dir.path(), "authoritative");
    let (table, rows) = boot_both_rooms(&config);
    let var = dir.path().join("var");
    let saved = bootpool::service::lease_file::read(&var).unwrap();
    for row in &rows {
        let (name, mac, ip) = (&row[0], &row[1], &row[2]);
        let room2 = name == "pc02" || name == "pc04";
        assert_eq!(in_room2(ip), room2, "{name} {ip}\n{table}");
        // The initrd's own DHCP (through the relay for room 2) gave the room's router.
        let said = console(&var, name);
        let want = if room2 { ROOM2_ROUTER } else { "10.77.0.1" };
        assert!(
            network_line(&said).contains(&format!(" router {want} ")),
            "{name}: {}",
            network_line(&said)
        );
        let lease = saved
            .leases
            .iter()
            .find(|l| l.mac == *mac)
            .unwrap_or_else(|| panic!("no lease for {mac}"));
        assert_eq!(lease.ip.to_string(), *ip, "{name}");
        match (&lease.relayed, room2) {
            (Some(r), true) => {
                assert_eq!(r.giaddr.to_string(), ROOM2_ROUTER, "{name}");
                // dhcrelay -a names the room's interface on the router as the circuit.
                assert_eq!(
                    r.circuit_id.as_ref().map(|c| c.to_string()),
                    Some("room2".into())
                );
            }
            (None, false) => {}
            (r, _) => panic!("{name}: relayed {r:?} in room 2: {room2}"),
        }
    }
    // The API's boots (the lab keeps what it read): each booted, on the address of its room,
    // the second room's through the relay with its switch port.
    let boots = api_boots(&var);
    for row in &rows {
        let (name, mac, ip) = (&row[0], &row[1], &row[2]);
        let boot = boots
            .iter()
            .rfind(|b| b["mac"] == mac.as_str())
            .unwrap_or_else(|| panic!("no boot of {mac} in the API's boots"));
        assert_eq!(boot["result"], "booted", "{name}: {boot}");
        assert_eq!(boot["ip"], ip.as_str(), "{name}: {boot}");
        if name == "pc02" || name == "pc04" {
            assert_eq!(boot["relayed"]["giaddr"], ROOM2_ROUTER, "{name}: {boot}");
            assert_eq!(boot["relayed"]["circuit_id"], "room2", "{name}: {boot}");
        } else {
            assert!(boot["relayed"].is_null(), "{name}: {boot}");
        }
    }
    // The record has each boot's ACK through the relay, with the switch port.
    let journal = crate::common::recorded_events(&var);
    assert!(journal.contains(ROOM2_ROUTER), "{journal}");
    assert!(journal.contains("\"proto\":\"nfs\""), "{journal}");
    assert!(journal.contains("\"proto\":\"nbd\""), "{journal}");
}

#[test]
#[ignore = "four VM boots (minutes under TCG): scripts/test --all"]
fn vms_in_two_subnets_boot_in_proxy_mode_beside_dnsmasq_through_one_relay() {
    let dir = tempfile::tempdir().unwrap();
    let config = campus(dir.path(), "proxy");
    let (table, rows) = boot_both_rooms(&config);
    let var = dir.path().join("var");
    let run = crate::common::lab::run_dir(&var);
    // Every address is dnsmasq's, each of its client's room; bootpool gave none.
    let leases = std::fs::read_to_string(run.join("dnsmasq.leases")).unwrap();
    for row in &rows {
        let (name, mac, ip) = (&row[0], &row[1], &row[2]);
        let room2 = name == "pc02" || name == "pc04";
        assert_eq!(in_room2(ip), room2, "{name} {ip}\n{table}");
        assert!(
            leases.lines().any(|l| l.contains(mac) && l.contains(ip)),
            "{name} {mac} {ip} not in dnsmasq's leases:\n{leases}"
        );
        // Room 2's router is what dnsmasq's tagged range gives.
        let said = console(&var, name);
        if room2 {
            assert!(
                network_line(&said).contains(&format!(" router {ROOM2_ROUTER} ")),
                "{name}: {}",
                network_line(&said)
            );
        }
    }
    // dnsmasq answered room 2 through the relay (its log names the relay's giaddr).
    let dnsmasq = std::fs::read_to_string(run.join("dnsmasq.log")).unwrap();
    assert!(dnsmasq.contains(ROOM2_ROUTER), "{dnsmasq}");
    let journal = crate::common::recorded_events(&var);
    assert!(journal.contains("\"proto\":\"nbd\""), "{journal}");
    assert!(journal.contains("\"proto\":\"nfs\""), "{journal}");
}

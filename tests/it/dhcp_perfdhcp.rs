//! DHCP interop at room scale: Kea's perfdhcp (Debian `kea-admin`) runs 1,000 DORA exchanges
//! from up to 1,000 simulated clients (perfdhcp draws each exchange's MAC at random), relayed
//! over a veth pair into the namespace where the `bootpool` binary serves. Every exchange must
//! end in an ACK, every client in the table must hold its address bound, and no address may
//! go to two clients. Bounded in time; no speed is asserted (bench/dhcp.sh measures it).

use crate::common::netns::Link;
use crate::common::{Fixture, Loopback, run};
use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::process::Stdio;
use std::time::Duration;

const CLIENTS: u32 = 1000;

/// The fixture served on the server end of a veth, on a /16 with 2,048 addresses to lease and
/// one pool (`nbd-room`) of 65,536 MACs, perfdhcp's.
fn config(iface: &str) -> Loopback {
    Loopback::default()
        .on_veth("10.78.0", iface)
        .http("10.78.0.1:0")
        .network("10.78.0.0/16")
        .range("10.78.1.0-10.78.8.255")
        .without_pool("nfs-room")
        .clients(
            "nbd-room",
            "- { macs: \"52:54:00:78:00:00-52:54:00:78:ff:ff\" }",
        )
}

#[test]
fn a_thousand_perfdhcp_clients_each_get_their_own_address() {
    let fx = Fixture::new();
    let link = Link::new("10.78.0.1/16");
    // perfdhcp acts as a relay: it needs an address for giaddr.
    link.in_client(&["ip", "addr", "add", "10.78.0.2/16", "dev", &link.client_if]);
    fx.write_config(&config(&link.server_if));
    let log = fx.path().join("daemon.log");
    let mut daemon = Link::command(
        &link.server_ns,
        env!("CARGO_BIN_EXE_bootpool"),
        &["serve", "--config", fx.config_path().to_str().unwrap()],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap())
    .spawn()
    .expect("bootpool runs");
    let started = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("bootpool serving"))
    });
    assert!(started, "{}", std::fs::read_to_string(&log).unwrap());

    // perfdhcp draws each exchange's MAC at random from base + 0..CLIENTS.
    let n = CLIENTS.to_string();
    let (ok, out, err) = run(
        &mut Link::command(
            &link.client_ns,
            "perfdhcp",
            &[
                "-4",
                "-l",
                &link.client_if,
                "-b",
                "mac=52:54:00:78:00:00",
                "-R",
                &n,
                "-n",
                &n,
                "-r",
                "100",
                // A late answer on a busy machine is not a lost one.
                "-d",
                "10",
                "-W",
                "2000000",
                "10.78.0.1",
            ],
        ),
        120,
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
    let daemon_log = std::fs::read_to_string(&log).unwrap_or_default();
    let said = format!("perfdhcp ok={ok}:\n{out}\n{err}\ndaemon log:\n{daemon_log:.3000}");
    // Every exchange completed: no DISCOVER and no REQUEST went unanswered.
    let drops: Vec<&str> = out.lines().filter(|l| l.starts_with("drops:")).collect();
    assert_eq!(drops, ["drops: 0", "drops: 0"], "{said}");
    let sent: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("sent packets:"))
        .collect();
    let want = format!("sent packets: {CLIENTS}");
    assert_eq!(sent, [want.as_str(), want.as_str()], "{said}");
    let saved = bootpool::service::lease_file::read(&fx.path().join("var"))
        .unwrap_or_else(|e| panic!("leases unreadable ({e}); {said}"));
    let text = serde_json::to_string(&saved).unwrap();
    let saved: serde_json::Value = serde_json::from_str(&text).unwrap();
    let leases = saved["leases"].as_array().unwrap();
    assert!(!leases.is_empty(), "{said}");
    // Every client that was offered an address went on to hold it.
    for l in leases {
        assert_eq!(l["state"], "bound", "{l}");
        let mac = l["mac"].as_str().unwrap();
        assert!(mac.starts_with("52:54:00:78:"), "{mac}");
    }
    let ips: HashSet<Ipv4Addr> = leases
        .iter()
        .map(|l| l["ip"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ips.len(), leases.len(), "an address given twice: {text}");
    let (lo, hi) = (
        u32::from(Ipv4Addr::new(10, 78, 1, 0)),
        u32::from(Ipv4Addr::new(10, 78, 8, 255)),
    );
    assert!(ips.iter().all(|ip| (lo..=hi).contains(&u32::from(*ip))));
}

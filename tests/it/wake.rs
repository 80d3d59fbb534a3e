//! Wake-on-LAN (`bootpool wake`, `POST /api/v1/wake`): tcpdump on the clients' side of a veth
//! receives each listed machine's magic packet once, as UDP broadcasts to port 9 of the
//! subnet, in the pool's order; each is recorded as the client's `woken` event; and what
//! names nothing is refused with the reason.

use crate::common::netns::{Daemon, Link};
use crate::common::{Fixture, Loopback, poll_until, recorded_events, run};
use std::process::Stdio;
use std::time::Duration;

const SERVER: &str = "10.77.11.1";
const ADMIN: &str = "admin-secret-0123456789";

/// `bootpool wake ARGS` in the server's namespace: (succeeded, stdout, stderr).
fn wake(link: &Link, fx: &Fixture, args: &[&str]) -> (bool, String, String) {
    let config = fx.config_path();
    let mut all = vec!["wake", "--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    run(
        &mut Link::command(&link.server_ns, env!("CARGO_BIN_EXE_bootpool"), &all),
        30,
    )
}

/// The woken MAC of each magic packet in tcpdump's `-n -x` text (the IP header first: the
/// UDP payload starts 28 bytes in, its MAC 6 bytes later), with where it went.
fn magic_packets(text: &str) -> Vec<(String, String)> {
    let mut packets = Vec::new();
    let mut current: Option<(String, Vec<u8>)> = None;
    let mut flush = |c: Option<(String, Vec<u8>)>| {
        if let Some((to, bytes)) = c {
            let payload = bytes.get(28..).unwrap_or_default();
            let mac = bootpool::proto::wol::woken(payload).map(|m| {
                m.iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(":")
            });
            packets.push((mac.unwrap_or_else(|| "not a magic packet".into()), to));
        }
    };
    for line in text.lines() {
        if let Some(hex) = line.trim_start().strip_prefix("0x") {
            let hex = hex.split_once(':').map_or("", |(_, h)| h);
            if let Some((_, bytes)) = current.as_mut() {
                for word in hex.split_whitespace() {
                    for i in (0..word.len()).step_by(2) {
                        bytes.push(u8::from_str_radix(&word[i..i + 2], 16).unwrap());
                    }
                }
            }
        } else if line.contains(" IP ") {
            flush(current.take());
            let to = line
                .split(" > ")
                .nth(1)
                .unwrap_or("")
                .split(':')
                .next()
                .unwrap_or("");
            current = Some((to.to_string(), Vec::new()));
        }
    }
    flush(current);
    packets
}

#[test]
fn a_pools_magic_packets_reach_its_link_once_each_in_order_and_are_recorded() {
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    fx.write_config(
        &Loopback::default()
            .on_veth("10.77.11", &link.server_if)
            .http("0.0.0.0:8080")
            .without_pool("nbd-room")
            .server(&format!("admin_token: {ADMIN}")),
    );
    let _daemon = Daemon::start(&link, &fx, 1);
    // tcpdump on the clients' end, until it has seen the pool's 16 packets.
    let out = fx.path().join("tcpdump.out");
    let err = fx.path().join("tcpdump.err");
    let mut tcpdump = Link::command(
        &link.client_ns,
        "tcpdump",
        &[
            "-i",
            &link.client_if,
            "-n",
            "-l",
            "-x",
            "-c",
            "16",
            "udp",
            "port",
            "9",
        ],
    )
    .stdout(std::fs::File::create(&out).unwrap())
    .stderr(std::fs::File::create(&err).unwrap())
    .stdin(Stdio::null())
    .spawn()
    .expect("tcpdump runs");
    let listening = poll_until(Duration::from_secs(10), Duration::from_millis(50), || {
        std::fs::read_to_string(&err).is_ok_and(|e| e.contains("listening on"))
    });
    assert!(
        listening,
        "{}",
        std::fs::read_to_string(&err).unwrap_or_default()
    );

    let (ok, said, e) = wake(&link, &fx, &["--pool", "nfs-room", "--per-second", "8"]);
    assert!(ok, "{e}");
    assert_eq!(
        said.trim(),
        "wake 1: 16 clients of pool nfs-room, 8 a second"
    );
    let done = poll_until(Duration::from_secs(30), Duration::from_millis(100), || {
        matches!(tcpdump.try_wait(), Ok(Some(_)))
    });
    if !done {
        let _ = tcpdump.kill();
    }
    let _ = tcpdump.wait();
    let text = std::fs::read_to_string(&out).unwrap();
    let packets = magic_packets(&text);
    let expected: Vec<(String, String)> = (0..16)
        .map(|i| {
            (
                format!("52:54:00:77:00:{i:02x}"),
                "10.77.11.255.9".to_string(),
            )
        })
        .collect();
    assert_eq!(packets, expected, "{text}");

    // Each recorded as the client's, with the wake's id.
    let mut events = String::new();
    poll_until(Duration::from_secs(10), Duration::from_millis(100), || {
        events = recorded_events(&fx.path().join("var"));
        events.matches("\"event\":\"woken\"").count() == 16
    });
    let woken: Vec<&str> = events
        .lines()
        .filter(|l| l.contains("\"event\":\"woken\""))
        .collect();
    assert_eq!(woken.len(), 16, "{events}");
    assert!(woken.iter().all(|l| l.contains("\"wake\":1")), "{events}");

    // Refused with the reason: a pool that is not, a client no pool lists, a room not served.
    for (args, says) in [
        (vec!["--pool", "nope"], "pool nope: no such pool"),
        (vec!["--client", "52:54:00:99:00:01"], "no pool lists it"),
        (vec!["--room", "10.1.0.0/16"], "not one of dhcp.subnets"),
    ] {
        let (ok, _, e) = wake(&link, &fx, &args);
        assert!(!ok && e.contains(says), "{args:?}: {e}");
    }
}

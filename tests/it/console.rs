//! The clients' consoles, interop: util-linux `logger` (RFC 5424 and 3164 over UDP, a program
//! nobody here wrote) sends lines from a network namespace that holds a lease from the
//! `bootpool` binary; they land in that client's boot, a panic line fails the boot with its
//! cause, and a datagram from an address no lease holds is dropped and counted. A client that
//! floods its console loses its own lines past its rate, and nobody's events.

use crate::common::netns::{Daemon, Link};
use crate::common::{Fixture, Loopback};
use std::time::Duration;

const SERVER: &str = "10.77.3.1";
const MAC: &str = "52:54:00:77:00:01";
const HTTP: u16 = 18081;

/// The fixture served on the server end of a veth, consoles on netconsole's port, one pool
/// (`nfs-room`) that sends them.
fn config(iface: &str) -> Loopback {
    Loopback::default()
        .on_veth("10.77.3", iface)
        .http(&format!("{SERVER}:{HTTP}"))
        .port("console", 6666)
        .dhcp(&format!("router: {SERVER}"))
        .pool("nfs-room", "netconsole: true")
        .without_pool("nbd-room")
}

fn get(link: &Link, path: &str) -> String {
    let url = format!("http://{SERVER}:{HTTP}{path}");
    let out = Link::command(&link.server_ns, "curl", &["-sS", "--max-time", "10", &url])
        .output()
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn logger(link: &Link, args: &[&str]) {
    let mut all = vec!["--udp", "--server", SERVER, "--port", "6666"];
    all.extend_from_slice(args);
    let out = Link::command(&link.client_ns, "logger", &all)
        .output()
        .expect("logger runs (util-linux, Debian's bsdutils)");
    assert!(
        out.status.success(),
        "logger: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn logger_lines_reach_the_leased_clients_boot_and_strangers_are_counted() {
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if));
    let _daemon = Daemon::start(&link, &fx, 1);
    let bound = link
        .udhcpc(fx.path(), MAC, true)
        .expect("a lease for the client");
    let ip = bound[1].clone();

    logger(
        &link,
        &["--rfc5424", "-t", "kernel", "hello from the client"],
    );
    logger(
        &link,
        &[
            "--rfc3164",
            "-t",
            "kernel",
            "Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100",
        ],
    );
    // A stranger: an address of the segment that no lease holds.
    link.in_client(&[
        "ip",
        "addr",
        "add",
        "10.77.3.200/24",
        "dev",
        &link.client_if,
    ]);
    Link::within(&link.client_ns, || {
        let s = std::net::UdpSocket::bind("10.77.3.200:0").unwrap();
        s.send_to(b"<13>stranger: not kept", (SERVER, 6666))
            .unwrap();
    });

    // The lines arrive within the recorder's commit; poll the API.
    let mut boots = serde_json::Value::Null;
    crate::common::poll_until(Duration::from_secs(10), Duration::from_millis(100), || {
        boots = serde_json::from_str(&get(&link, &format!("/api/v1/boots?mac={MAC}")))
            .unwrap_or_default();
        boots[0]["console_lines"].as_u64() == Some(2)
    });
    let boot = &boots[0];
    assert_eq!(boot["console_lines"], 2, "{boots}");
    assert_eq!(boot["ip"], ip.as_str());
    assert_eq!(boot["result"], "failed", "{boot}");
    assert_eq!(boot["cause"]["kind"], "kernel_panic", "{boot}");
    let id = boot["id"].as_u64().unwrap();
    let console: serde_json::Value =
        serde_json::from_str(&get(&link, &format!("/api/v1/boots/{id}/console"))).unwrap();
    let texts: Vec<&str> = console["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        [
            "hello from the client",
            "Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100"
        ],
        "{console}"
    );
    assert_eq!(console["dropped"], 0);
    assert!(
        console["cause"]["text"].as_str().unwrap().contains("init="),
        "{console}"
    );
    let metrics = get(&link, "/metrics");
    assert_eq!(
        metric(&metrics, "bootpool_refused_total{service=\"console\"}"),
        1,
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "bootpool_requests_total{service=\"console\"}"),
        2
    );
    assert_eq!(
        get(&link, "/api/v1/boots/999/console").trim(),
        "no such boot"
    );

    // `bootpool report --console` reads the same from the store once the daemon is gone.
    // The daemon is killed with -9, which loses what it has not committed yet (a console is
    // written every 5 s): wait until the store has it (a report reads it beside the daemon).
    let report = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_bootpool"))
            .arg("report")
            .args(args)
            .arg("--config")
            .arg(fx.config_path())
            .output()
            .unwrap()
    };
    crate::common::poll_until(Duration::from_secs(15), Duration::from_millis(100), || {
        String::from_utf8_lossy(&report(&["--console", MAC]).stdout)
            .contains("hello from the client")
    });
    drop(_daemon);
    let out = report(&["--console", MAC]);
    let text = String::from_utf8_lossy(&out.stdout);
    let events = report(&["--events"]);
    assert!(
        out.status.success(),
        "{text}{}\nevents:\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&events.stdout)
    );
    assert!(text.contains("cause (kernel_panic)"), "{text}");
    assert!(text.contains("hello from the client"), "{text}");
}

/// One leased client floods its console (100,000 datagrams as fast as a socket sends them)
/// while another leased client fetches its boot script: the flood's lines past the client's
/// rate are dropped and counted, the recorder drops no event, and the other client's fetch is
/// recorded.
#[test]
fn a_console_flood_from_one_client_costs_the_others_nothing() {
    const OTHER: &str = "52:54:00:77:00:02";
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if));
    let _daemon = Daemon::start(&link, &fx, 1);
    let other = link
        .udhcpc(fx.path(), OTHER, false)
        .expect("a lease for the other client")[1]
        .clone();
    let loud = link
        .udhcpc(fx.path(), MAC, true)
        .expect("a lease for the loud client")[1]
        .clone();
    link.in_client(&[
        "ip",
        "addr",
        "add",
        &format!("{other}/24"),
        "dev",
        &link.client_if,
    ]);
    let from = loud.clone();
    let started = std::time::Instant::now();
    let flood = std::thread::spawn({
        let ns = link.client_ns.clone();
        move || {
            Link::within(&ns, move || {
                let s = std::net::UdpSocket::bind((from.as_str(), 0)).unwrap();
                let mut sent = 0u32;
                for k in 0..100_000u32 {
                    let line = format!("<6>flood line {k}");
                    // A full socket buffer says so; a flood goes on.
                    if s.send_to(line.as_bytes(), (SERVER, 6666)).is_ok() {
                        sent += 1;
                    }
                }
                sent
            })
        }
    });
    // Meanwhile the other client's boot moves on: its script, from its own address.
    let script = format!("http://{SERVER}:{HTTP}/boot/script/{OTHER}.ipxe");
    let out = Link::command(
        &link.client_ns,
        "curl",
        &[
            "-sS",
            "--fail",
            "--max-time",
            "20",
            "--interface",
            &other,
            &script,
        ],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent = flood.join().unwrap();
    assert!(sent > 50_000, "only {sent} datagrams sent");

    let state = fx.path().join("var");
    let recorded =
        crate::common::poll_until(Duration::from_secs(10), Duration::from_millis(100), || {
            crate::common::recorded_events(&state)
                .lines()
                .any(|l| l.contains("\"kind\":\"script\"") && l.contains(OTHER))
        });
    assert!(recorded, "the other client's script fetch was not recorded");
    let metrics = get(&link, "/metrics");
    assert_eq!(
        metric(&metrics, "bootpool_events_dropped_total"),
        0,
        "{metrics}"
    );
    let limited = metric(
        &metrics,
        "bootpool_console_lines_dropped_total{why=\"rate\"}",
    );
    assert!(limited > 0, "{metrics}");
    // What passed is the client's burst and rate (4000, then 200 a second), not the flood.
    let boots: serde_json::Value =
        serde_json::from_str(&get(&link, &format!("/api/v1/boots?mac={MAC}"))).unwrap();
    let taken = boots[0]["console_lines"].as_u64().unwrap_or(0);
    let bound = 4000 + 200 * (started.elapsed().as_secs() + 1);
    assert!(
        taken <= bound,
        "{taken} lines taken of {sent} (bound {bound})"
    );
    assert!(taken > 0, "{boots}");
}

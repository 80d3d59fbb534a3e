//! The storm, end to end: `bootpool storm` builds its room (namespaces, a bridge, shaped
//! veths), runs `bootpool serve`, and its simulated clients replay a boot trace through
//! client libraries this project did not write. A small storm must boot every client with the
//! trace's bytes, the server's links must have carried at least those bytes, and bootpool's own
//! record must agree with the clients' counts. The fidelity tests boot one real VM with a trace,
//! replay that trace from one simulated client, and compare what bootpool recorded of the two.
//! Needs root and what scripts/setup installs and builds.

use crate::common::lab::{lab_config, repo, run_lab};
use bootpool::trace::format::{Bytes, Trace, What};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One room at a time: the fidelity tests compare durations, which a second room (or VM)
/// on the same two cores would stretch.
static ONE_ROOM: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_room() -> std::sync::MutexGuard<'static, ()> {
    ONE_ROOM.lock().unwrap_or_else(|e| e.into_inner())
}

/// bench/storm/pools.yaml with absolute paths, its state in `dir`, and the rates of the
/// room's `server_links` (K x RATE) in `server.link_speeds`, as bench/storm.sh writes it.
fn storm_config(dir: &Path, server_links: &str) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("bench/storm/pools.yaml")).unwrap();
    let image = repo().join("images/demo");
    assert!(
        image.join("rootfs.img").exists(),
        "build the demo image first"
    );
    let text = text
        .replace(
            "dir: ../../images/demo",
            &format!("dir: {}", image.display()),
        )
        .replace(
            "state_dir: ../../var/storm-state/",
            &format!("state_dir: {}", dir.join("var").display()),
        );
    let (k, rate) = server_links.split_once('x').unwrap();
    let speeds: Vec<String> = (0..k.parse().unwrap())
        .map(|i: usize| format!("s{i}: {rate}"))
        .collect();
    let text: String = text
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("link_speeds:") {
                format!("  link_speeds: {{ {} }}\n", speeds.join(", "))
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let path = dir.join("pools.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The shipped trace of `root` that every server's clients replay under
/// bench/storm/pools.yaml (the images as built, the NFS root mounted with close-to-open
/// checks), cut to its firmware part, its first `keep` root requests and its booted call: a
/// short boot with the real one's shape.
fn short_trace(root: &str, keep: usize, dir: &Path) -> (PathBuf, Trace) {
    let shipped = format!("bench/traces/demo-{root}.trace");
    let text = std::fs::read_to_string(repo().join(shipped)).unwrap();
    let mut trace = Trace::parse(&text).unwrap();
    let mut n = 0;
    trace.ops.retain(|o| match o.what {
        What::Nfs { .. } | What::Nbd { .. } => {
            n += 1;
            n <= keep
        }
        _ => true,
    });
    let path = dir.join(format!("short-{root}.trace"));
    std::fs::write(&path, trace.to_text()).unwrap();
    (path, trace)
}

/// What the trace's requests carry when served from the demo image built on this machine:
/// the recording's own counts would pin the test to the build it was recorded from (an
/// initrd packed again differs in a few bytes, a package update in a file's size).
fn image_bytes(trace: &Trace) -> Bytes {
    let image = repo().join("images/demo");
    let size = |p: &Path| {
        std::fs::metadata(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .len()
    };
    let mut b = Bytes::default();
    for op in &trace.ops {
        match &op.what {
            What::File { proto, name, .. } if !name.starts_with("/boot/script/") => {
                let n = size(&image.join(name.rsplit('/').next().unwrap()));
                if proto == "tftp" {
                    b.tftp += n;
                } else {
                    b.http += n;
                }
            }
            What::Nfs {
                proc,
                path,
                offset,
                count,
                status,
                ..
            } if proc == "read" && *status == 0 => {
                let n = size(&image.join("rootfs").join(path.trim_start_matches('/')));
                b.nfs += (*count).min(n.saturating_sub(*offset));
            }
            What::Nbd {
                cmd, offset, len, ..
            } if cmd == "read" => {
                let n = size(&image.join("rootfs.img"));
                b.nbd += (*len).min(n.saturating_sub(*offset));
            }
            _ => {}
        }
    }
    b
}

/// No run beats the room's lower bound: it took at least the bytes over the links, and at
/// least one client's boot alone.
fn bound_holds(r: &Value, table: &str) {
    let bound = &r["bound"];
    let f = |v: &Value| v.as_f64().unwrap_or_else(|| panic!("not seconds: {v}"));
    assert!(f(&bound["alone_s"]) > 0.0, "{bound}");
    assert!(
        f(&bound["bound_s"]) >= f(&bound["transfer_s"]).max(f(&bound["alone_s"])),
        "{bound}"
    );
    assert!(
        f(&r["summary"]["all_booted_s"]) >= f(&bound["bound_s"]),
        "{bound}\n{table}"
    );
    assert!(f(&bound["over_bound"]) >= 1.0, "{bound}");
}

fn storm(args: &[&str], secs: u64) -> (String, String) {
    let mut cmd = std::process::Command::new(crate::common::bootpool_with_instruments());
    cmd.arg("storm").args(args).current_dir(repo());
    let (ok, out, log) = crate::common::run(&mut cmd, secs);
    assert!(ok, "storm failed\n{out}\n{log}");
    (out, log)
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// `bootpool storm` on a small room in `dir` (the storm's config, clients and server links at
/// 1 Gbit/s, think times x0.1, and `extra` arguments): its table and its JSON report.
fn small_room(
    dir: &Path,
    root: &str,
    clients: usize,
    trace: &Path,
    server_links: &str,
    timeout_s: u64,
    extra: &[&str],
) -> (String, Value) {
    let (args, out) = room_args(dir, root, clients, trace, server_links, timeout_s, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (table, _) = storm(&args, timeout_s + 100);
    (table, json(&out))
}

/// `small_room`'s arguments of `bootpool storm`, and where its JSON report goes.
fn room_args(
    dir: &Path,
    root: &str,
    clients: usize,
    trace: &Path,
    server_links: &str,
    timeout_s: u64,
    extra: &[&str],
) -> (Vec<String>, PathBuf) {
    let config = storm_config(dir, server_links);
    let mut args = extra.to_vec();
    let out = dir.join("storm.json");
    let (n, timeout) = (clients.to_string(), timeout_s.to_string());
    args.extend([
        "--config",
        config.to_str().unwrap(),
        "--root",
        root,
        "--clients",
        &n,
        "--trace",
        trace.to_str().unwrap(),
        "--think-scale",
        "0.1",
        "--client-link",
        "1gbit",
        "--server-links",
        server_links,
        "--json",
        out.to_str().unwrap(),
        "--timeout",
        &timeout,
    ]);
    (args.into_iter().map(String::from).collect(), out)
}

/// Writes a lease table into `state_dir` that holds every address of bench/storm/pools.yaml's
/// `dhcp.range` (10.78.1.0-10.78.2.250) for MACs no storm client has, unexpired.
fn fill_the_range(state_dir: &Path) {
    let leases: Vec<String> = (0..507u32)
        .map(|i| {
            let ip = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 78, 1, 0)) + i);
            format!(
                r#"{{"mac":"02:00:00:00:{:02x}:{:02x}","ip":"{ip}","state":"bound","expires":{}}}"#,
                i >> 8,
                i & 0xff,
                u32::MAX
            )
        })
        .collect();
    std::fs::write(
        state_dir.join("leases.json"),
        format!(r#"{{"leases":[{}]}}"#, leases.join(",")),
    )
    .unwrap();
    let _ = std::fs::remove_file(state_dir.join("leases.journal"));
}

/// Runs a small storm of `clients` over `root` and checks that the numbers add up. With
/// `after_one_link`, the same room first boots once on one link, in the same state folder:
/// its clients' firmware is iPXE (the trace's), and each of their next boots must still get
/// a link chosen afresh, not the one their leases kept.
fn small_storm(root: &str, clients: usize, keep: usize, after_one_link: bool) {
    let _room = one_room();
    let dir = tempfile::tempdir().unwrap();
    let (trace_file, trace) = short_trace(root, keep, dir.path());
    if after_one_link {
        let (table, r) = small_room(dir.path(), root, clients, &trace_file, "1x1gbit", 600, &[]);
        assert_eq!(u(&r["summary"]["booted"]), clients as u64, "{table}");
        // Then a lease table full of another room's unexpired leases: each storm's clients
        // are new machines, so the storm starts its server without them (a full range would
        // offer nothing).
        fill_the_range(&dir.path().join("var"));
    }
    let (table, r) = small_room(dir.path(), root, clients, &trace_file, "2x1gbit", 600, &[]);
    let summary = &r["summary"];
    assert_eq!(u(&summary["clients"]), clients as u64, "{table}");
    assert_eq!(u(&summary["booted"]), clients as u64, "{table}");
    assert_eq!(u(&summary["failed"]), 0, "{table}");
    let want = image_bytes(&trace);
    let mut sum = 0;
    let mut scripts = 0;
    for c in r["clients"].as_array().unwrap() {
        assert_eq!(c["result"], "booted", "{c}");
        let b = &c["bytes"];
        // Every client moved exactly the trace's payload, protocol by protocol (its own
        // script, generated per client, aside).
        let own_script = u(&c["script_bytes"]);
        assert!(own_script > 0, "{c}");
        scripts += own_script;
        assert_eq!(u(&b["http"]) - own_script, want.http, "{c}");
        assert_eq!(u(&b["nfs"]), want.nfs, "{c}");
        assert_eq!(u(&b["nbd"]), want.nbd, "{c}");
        sum += u(&b["http"]) + u(&b["nfs"]) + u(&b["nbd"]) + u(&b["tftp"]);
        // bootpool recorded the same boot: booted, with the bytes the client counted.
        let rec = &c["recorded"];
        assert_eq!(rec["result"], "booted", "{c}");
        assert_eq!(rec["mac"], c["mac"]);
        assert_eq!(u(&rec["bytes"]["http"]), u(&b["http"]), "{c}");
        assert_eq!(u(&rec["bytes"][root]), want.nfs + want.nbd, "{c}");
        // The record's phases are the boot's, in order.
        let phases: Vec<&str> = rec["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(phases, ["dhcp", "ipxe", "kernel", "initrd", "root"], "{c}");
        // Its whole boot went to the one link it was given (server.links), as recorded.
        assert_eq!(c["http_server"], c["root_server"], "{c}");
        assert_eq!(rec["link"], c["root_server"], "{c}");
    }
    // bench/storm/pools.yaml lists four links; the room has two, and bootpool spreads the
    // clients over those two (the others' addresses are on no interface).
    let carried: Vec<u64> = r["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| u(&l["clients"]))
        .collect();
    assert_eq!(carried.len(), 2, "{table}");
    assert_eq!(carried.iter().sum::<u64>(), clients as u64, "{table}");
    assert!(
        carried.iter().all(|&n| n >= clients as u64 / 4),
        "clients per link {carried:?}\n{table}"
    );
    // Each link sent a good part of what its own clients counted: their replies leave by it,
    // unless the pacer moved them to a link with room (docs/links.md), so not all of it.
    for l in r["links"].as_array().unwrap() {
        let theirs: u64 = r["clients"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["root_server"] == l["address"])
            .map(|c| {
                let b = &c["bytes"];
                u(&b["http"]) + u(&b["nfs"]) + u(&b["nbd"]) + u(&b["tftp"])
            })
            .sum();
        assert!(
            u(&l["bytes"]) >= theirs / 4,
            "{l}: its clients counted {theirs}\n{table}"
        );
    }
    assert_eq!(sum, want.total() * clients as u64 + scripts);
    // The lower bound counts what the clients were sent.
    assert_eq!(u(&r["bound"]["bytes"]), sum, "{}", r["bound"]);
    bound_holds(&r, &table);
    // The server's links carried at least every byte the clients counted (plus headers).
    let egress: u64 = r["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| u(&l["bytes"]))
        .sum();
    assert!(
        egress >= sum,
        "egress {egress} < clients' bytes {sum}\n{table}"
    );
    // A lone server is one row of the servers' table: all the links, all the clients, all
    // its record gave an address, the whole of the mean.
    let one = &r["servers"]["rows"][0];
    assert_eq!(r["servers"]["rows"].as_array().unwrap().len(), 1, "{table}");
    assert_eq!(u(&one["bytes"]), egress, "{one}");
    assert_eq!(u(&one["clients"]), clients as u64, "{one}");
    assert_eq!(u(&one["answered"]), clients as u64, "{one}");
    assert_eq!(one["share_of_mean"].as_f64(), Some(1.0), "{one}");
    // The floor is the lower bound's transfer time: all bytes over all links' capacity.
    assert_eq!(r["servers"]["floor_s"], r["bound"]["transfer_s"], "{table}");
    // The machine's CPUs, second by second beside the links' egress: busy shares, and the
    // simulated clients' own CPU time (they made thousands of requests).
    let host = &r["host"];
    assert!(u(&host["cpus"]) >= 1, "{host}");
    let busy: Vec<f64> = host["per_second_busy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_f64().unwrap())
        .collect();
    assert_eq!(
        busy.len(),
        r["links"][0]["per_second_bps"].as_array().unwrap().len(),
        "{host}"
    );
    assert!(busy.iter().all(|b| (0.0..=1.0).contains(b)), "{host}");
    assert!(busy.iter().any(|b| *b > 0.0), "{host}");
    assert!(host["clients_cpu_s"].as_f64().unwrap() > 0.0, "{host}");
    let bound = host["cpu_bound_s"].as_f64().unwrap();
    assert!(bound >= 0.0 && bound <= busy.len() as f64, "{host}");
    // Retries add up to the per-client counts, beside the receive-buffer losses.
    let each = |k: &str| -> u64 {
        r["clients"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| u(&c[k]))
            .sum()
    };
    assert_eq!(
        u(&summary["dhcp_retransmits"]),
        each("dhcp_retransmits"),
        "{table}"
    );
    assert_eq!(u(&summary["tftp_retries"]), each("tftp_retries"), "{table}");
    assert_eq!(
        u(&summary["client_udp_drops"]),
        each("udp_drops"),
        "{table}"
    );
    // How busy each link was while its clients waited for data (here a client's link is as
    // fast as the server's, so one waiting client is enough): when there was such a time, a
    // share of what the link can carry.
    for l in r["links"].as_array().unwrap() {
        let secs = l["waited_s"].as_f64().expect("waited_s");
        match l["waited_util"].as_f64() {
            Some(util) => assert!(secs > 0.0 && (0.0..=1.2).contains(&util), "{l}\n{table}"),
            None => assert_eq!(secs, 0.0, "{l}"),
        }
    }
    assert!(table.contains("waited for"), "{table}");
    let agreement = &r["agreement"];
    assert_eq!(u(&agreement["clients_recorded"]), clients as u64);
    assert_eq!(u(&agreement["clients_booted_in_record"]), clients as u64);
    assert_eq!(agreement["max_bytes_diff"].as_f64(), Some(0.0), "{table}");
    // The table has a booted row per client, and the room's summary.
    let rows = table
        .lines()
        .filter(|l| l.starts_with('c') && l.split_whitespace().nth(3) == Some("booted"))
        .count();
    assert_eq!(rows, clients, "{table}");
    assert!(table.contains("lower bound"), "{table}");
    // Retries of every protocol, and the server's private memory, said whatever they are.
    assert!(table.contains("TCP segments sent again"), "{table}");
    assert_eq!(
        u(&summary["client_tcp_retransmits"]),
        each("tcp_retransmits"),
        "{table}"
    );
    assert_eq!(
        u(&summary["root_connections"]),
        each("root_connections"),
        "{table}"
    );
    assert!(each("root_connections") >= clients as u64, "{table}");
    let server = &r["server"];
    assert!(u(&server["private_peak_kib"]) > 0, "{server}");
    assert!(
        u(&server["private_by_name_kib"]["bootpool"]) > 0,
        "{server}"
    );
    // The command line that made the run is kept with it.
    assert!(
        r["command"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "storm"),
        "{}",
        r["command"]
    );
}

/// A small room of `clients` booting the NBD pool's root through `--swarm` (the static
/// agent) and `extra` on one 1 Gbit/s link (`small_room`): its table and JSON report, and the
/// trace it replayed.
fn swarm_room(clients: usize, extra: &[&str]) -> (String, Value, Trace) {
    let _room = one_room();
    let dir = tempfile::tempdir().unwrap();
    let (trace_file, trace) = short_trace("nbd", 100_000, dir.path());
    let agent = crate::common::static_agent();
    let mut args = vec!["--swarm", agent.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (table, r) = small_room(
        dir.path(),
        "nbd",
        clients,
        &trace_file,
        "1x1gbit",
        600,
        &args,
    );
    (table, r, trace)
}

/// Every client of report `r` booted, and every read was answered with the image's bytes
/// (the replay checks each).
fn every_client_read_the_image(r: &Value, trace: &Trace) {
    let want = image_bytes(trace);
    for c in r["clients"].as_array().unwrap() {
        assert_eq!(c["result"], "booted", "{c}");
        assert_eq!(u(&c["bytes"]["nbd"]), want.nbd, "{c}");
        assert_eq!(u(&c["root_errors"]), 0, "{c}");
    }
}

/// Six clients read the NBD root through the real static agent in their namespaces
/// (`--swarm`), sharing chunks through the server's tracker: every client boots with the
/// trace's bytes, each read checked against the image by the replay; the server sends fewer
/// chunks than six copies of what a boot reads, the rest came from peers.
#[test]
fn a_small_swarm_storm_boots_every_client_through_its_agent_and_the_server_sends_under_six_copies()
{
    let clients = 6;
    let (table, r, trace) = swarm_room(clients, &[]);
    assert_eq!(u(&r["summary"]["booted"]), clients as u64, "{table}");
    every_client_read_the_image(&r, &trace);
    let w = &r["swarm"];
    assert_eq!(w["mode"], "swarm", "{table}");
    assert_eq!(u(&w["agents"]), clients as u64, "{table}");
    let floor = u(&w["floor_chunks"]);
    assert!(floor > 0, "{w}");
    let sent = w["server_chunks"]
        .as_f64()
        .expect("the server's chunks sent") as u64;
    assert!(
        sent >= floor,
        "the room needs every chunk once: {w}\n{table}"
    );
    assert!(
        sent < clients as u64 * floor,
        "the server sent {sent} chunks, {clients} copies are {}: {w}\n{table}",
        clients as u64 * floor
    );
    // What the server did not send came from peers: every agent held the boot's chunks.
    let (peers, servers) = (u(&w["from_peers"]), u(&w["from_servers"]));
    assert!(peers > 0, "{w}");
    assert!(peers + servers >= clients as u64 * floor, "{w}");
    assert_eq!(u(&w["refused"]), 0, "{w}");
    assert!(w["agent_cpu_s"].as_f64().unwrap() > 0.0, "{w}");
    assert!(table.contains("chunks from peers"), "{table}");
}

/// The reference swarm (`--torrent`, issue 48 part 3's "nbdkit's torrent plugin"): four
/// clients read the NBD root through nbdkit's torrent plugin (libtorrent) in their
/// namespaces, from a seed and opentracker beside the server. Every read is the image's
/// (the replay checks each), the seed's counter saw it send the room the root's pieces, and
/// it sent at least the chunks the clients read and fewer than four copies of the whole image
/// (libtorrent fetches every piece): the rest went between the clients.
#[test]
fn a_torrent_room_boots_every_client_through_nbdkits_torrent_plugin() {
    let clients = 4;
    let (table, r, trace) = swarm_room(clients, &["--torrent"]);
    assert_eq!(u(&r["summary"]["booted"]), clients as u64, "{table}");
    every_client_read_the_image(&r, &trace);
    let w = &r["swarm"];
    assert_eq!(w["mode"], "torrent", "{table}");
    assert_eq!(u(&w["agents"]), clients as u64, "{table}");
    let sent = w["server_chunks"].as_f64().expect("the seed's payload");
    let image_chunks = u(&w["image_chunks"]) as f64;
    let floor = u(&w["floor_chunks"]) as f64;
    assert!(floor > 0.0 && image_chunks >= floor, "{w}");
    // Only the seed held the root at first: each chunk a client read left it at least once.
    assert!(
        sent >= 0.95 * floor,
        "the seed sent {sent} chunks, the clients read {floor}: {w}\n{table}"
    );
    assert!(
        sent < clients as f64 * image_chunks,
        "the seed sent {sent} chunks, {clients} copies of the image are {}: {w}\n{table}",
        clients as f64 * image_chunks
    );
    assert!(w["agent_cpu_s"].as_f64().unwrap() > 0.0, "{w}");
    assert!(table.contains("nbdkit torrent (libtorrent)"), "{table}");
}

/// The multicast reference (`--multicast`, issue 48 part 3's udpcast): four clients get
/// the root image from udp-sender beside the server by udp-receiver, then read it locally
/// (nbdkit file). Every read is the image's (the replay checks each), and the sender sent
/// about one copy of the image for the four (its counter; a resend or two allowed).
#[test]
fn a_multicast_room_boots_every_client_from_one_udpcast_copy() {
    let clients = 4;
    let (table, r, trace) = swarm_room(clients, &["--multicast"]);
    assert_eq!(u(&r["summary"]["booted"]), clients as u64, "{table}");
    every_client_read_the_image(&r, &trace);
    let w = &r["swarm"];
    assert_eq!(w["mode"], "multicast", "{table}");
    let sent = w["server_chunks"].as_f64().expect("the sender's payload");
    let image_chunks = u(&w["image_chunks"]) as f64;
    assert!(
        sent >= 0.99 * image_chunks && sent < 2.0 * image_chunks,
        "udp-sender sent {sent} chunks of an image of {image_chunks} to {clients} clients: {w}\n{table}"
    );
    assert!(table.contains("udpcast: udp-sender multicast"), "{table}");
}

/// The swarm's faults (issue 48 part 3): of six clients, one (the middle one, c003) is
/// switched off as soon as its agent listens, its agent killed with -9 and its switch port
/// taken down; one (c004) plays a corrupting peer, claiming every chunk and sending wrong
/// bytes; and two (c001, c004) send at 5 Mbit/s. The four others boot with the image's bytes
/// (every read checked); the switched-off one and the rogue are counted apart, neither booted
/// nor failed, and the report names each kind.
#[test]
fn a_swarm_storm_with_a_client_switched_off_a_rogue_and_two_slow_boots_the_others() {
    let clients = 6;
    let extra = [
        "--swarm-cut",
        "0.2",
        "--swarm-cut-after",
        "0",
        "--swarm-slow",
        "0.34",
        "--swarm-slow-rate",
        "5mbit",
        "--swarm-corrupt",
        "1",
    ];
    let (table, r, trace) = swarm_room(clients, &extra);
    let summary = &r["summary"];
    assert_eq!(u(&summary["booted"]), clients as u64 - 2, "{table}");
    assert_eq!(u(&summary["cut"]), 1, "{table}");
    assert_eq!(u(&summary["rogues"]), 1, "{table}");
    assert_eq!(u(&summary["failed"]), 0, "{table}");
    let want = image_bytes(&trace);
    for c in r["clients"].as_array().unwrap() {
        if c["index"] == 3 {
            assert_eq!(c["result"], "cut", "{c}");
            continue;
        }
        if c["index"] == 4 {
            assert_eq!(c["result"], "rogue", "{c}");
            continue;
        }
        assert_eq!(c["result"], "booted", "{c}");
        assert_eq!(u(&c["bytes"]["nbd"]), want.nbd, "{c}");
        assert_eq!(u(&c["root_errors"]), 0, "{c}");
    }
    let w = &r["swarm"];
    assert_eq!(w["cut"], serde_json::json!([3]), "{w}");
    assert_eq!(w["slow"], serde_json::json!([1, 4]), "{w}");
    assert_eq!(u(&w["slow_bps"]), 5_000_000, "{w}");
    assert_eq!(w["rogues"], serde_json::json!([4]), "{w}");
    // Each request the rogue answered was refused by the agent that asked (the manifest's
    // digest), and none of its bytes reached a reader (the replay's checks, above).
    println!(
        "the rogue answered {} requests; the agents refused {} chunks from peers",
        w["rogue_answers"], w["refused"]
    );
    assert!(u(&w["refused"]) <= u(&w["rogue_answers"]), "{w}");
    assert!(table.contains("corrupting peers"), "{table}");
    assert!(table.contains("switched off mid-boot"), "{table}");
    assert!(table.contains("1 switched off on purpose"), "{table}");
    assert!(
        table.contains("sending at 5 Mbit/s: 2 clients, c001 c004"),
        "{table}"
    );
}

#[test]
fn a_small_nfs_storm_boots_every_client_and_its_numbers_add_up() {
    small_storm("nfs", 20, 1500, false);
}

#[test]
fn a_small_nbd_storm_after_one_on_one_link_spreads_its_clients_and_its_numbers_add_up() {
    small_storm("nbd", 20, 300, true);
}

/// The processes that run `sleep SECONDS`.
fn sleeping(seconds: &str) -> Vec<u32> {
    let want = format!("sleep {seconds}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim_end() == want)
        })
        .collect()
}

/// Whether process `pid` blocks `signal` (its `SigBlk` mask).
fn blocks(pid: u32, signal: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
        .unwrap();
    mask & (1 << (signal - 1)) != 0
}

/// A storm stopped by SIGTERM while its clients boot ends every process of its room before it
/// exits, a daemon that forked away from the server's process group too (as nbd-server and
/// dnsmasq do in the reference stack), and exits as a process ended by that signal does. The
/// storm holds the stop signals for itself; what it starts does not, so a SIGTERM stops it.
#[test]
fn a_storm_stopped_by_a_signal_ends_the_processes_of_its_room() {
    use std::io::{BufRead as _, BufReader};
    let _room = one_room();
    let dir = tempfile::tempdir().unwrap();
    let config = storm_config(dir.path(), "4x250mbit");
    // A number nothing else on the machine sleeps for.
    let marker = format!(
        "{}.{}",
        4000 + std::process::id() % 1000,
        std::process::id()
    );
    let server = format!(
        "setsid sleep {marker} & exec {} serve --config {}",
        env!("CARGO_BIN_EXE_bootpool"),
        config.display()
    );
    // A failed assertion still stops the storm (and so its room) on the way out; one already
    // reaped is left alone, since its pid may be another process's by now.
    struct Stopped(std::process::Child);
    impl Drop for Stopped {
        fn drop(&mut self) {
            if matches!(self.0.try_wait(), Ok(None)) {
                let _ = bootpool::sys::process::kill(self.0.id() as i32, libc::SIGTERM);
                let _ = self.0.wait();
            }
        }
    }
    let mut storm = std::process::Command::new(crate::common::bootpool_with_instruments())
        .current_dir(repo())
        .args([
            "storm",
            "--config",
            config.to_str().unwrap(),
            "--root",
            "nfs",
        ])
        .args(["--clients", "4", "--think-scale", "1", "--timeout", "300"])
        .args(["--server-cmd", &server, "--ready-port", "8080"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map(Stopped)
        .unwrap();
    // The storm says so on stderr once its server answers and the clients power on.
    let mut said = String::new();
    let mut lines = BufReader::new(storm.0.stderr.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        said += &line;
        said.push('\n');
        if line.starts_with("storm: 4 clients") {
            break;
        }
    }
    // The rest is read, so that the storm never waits on a full pipe.
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let daemon = sleeping(&marker);
    assert_eq!(daemon.len(), 1, "{said}");
    assert!(
        !blocks(daemon[0], libc::SIGTERM),
        "the room's daemon blocks SIGTERM"
    );
    bootpool::sys::process::kill(storm.0.id() as i32, libc::SIGTERM).unwrap();
    let status = storm.0.wait().unwrap();
    said += &rest.join().unwrap().join("\n");
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{said}");
    assert_eq!(sleeping(&marker), Vec::<u32>::new(), "{said}");
}

/// Firmware that fetches its loader over TFTP first (`--tftp-loader`: the firmware's DHCP,
/// then the loader the ACK names with EDK2's timer and retry count, then the trace's iPXE
/// DHCP), as a room of PXE ROMs does: every client gets the loader's bytes, bootpool records
/// them, and on an idle room nobody had to retransmit (counted from each client's own UDP
/// datagrams).
#[test]
fn a_small_storm_with_a_tftp_loader_counts_its_bytes_and_retries() {
    let _room = one_room();
    let dir = tempfile::tempdir().unwrap();
    let (trace_file, _) = short_trace("nfs", 100, dir.path());
    let loader = Path::new("/usr/lib/ipxe/undionly.kpxe");
    let size = std::fs::metadata(loader)
        .expect("ipxe's loaders (scripts/setup)")
        .len();
    let (table, r) = small_room(
        dir.path(),
        "nfs",
        4,
        &trace_file,
        "1x1gbit",
        300,
        &["--tftp-loader"],
    );
    assert_eq!(u(&r["summary"]["booted"]), 4, "{table}");
    for c in r["clients"].as_array().unwrap() {
        assert_eq!(u(&c["bytes"]["tftp"]), size, "{c}");
        assert_eq!(u(&c["tftp_retries"]), 0, "{c}");
        assert_eq!(u(&c["recorded"]["bytes"]["tftp"]), size, "{c}");
        assert!(c["at"]["loader"].as_f64().is_some(), "{c}");
    }
    bound_holds(&r, &table);
}

/// A room behind an uplink (`--uplink 3@20mbit`): of six clients, the last three sit on a
/// switch of their own joined by a 20 Mbit/s shaped uplink. Every client boots, and the
/// report shows the room and its uplink: its clients, its capacity, at least the bytes its
/// clients counted, a rate within the shaper's, and the share of the time it was full.
#[test]
fn a_small_storm_with_a_room_behind_an_uplink_reports_the_uplink() {
    let _room = one_room();
    let dir = tempfile::tempdir().unwrap();
    let (trace_file, _) = short_trace("nfs", 100, dir.path());
    let (table, r) = small_room(
        dir.path(),
        "nfs",
        6,
        &trace_file,
        "1x1gbit",
        300,
        &["--uplink", "3@20mbit"],
    );
    assert_eq!(u(&r["summary"]["booted"]), 6, "{table}");
    let up = &r["uplink"];
    assert_eq!(u(&up["clients"]), 3, "{table}");
    assert_eq!(u(&up["capacity_bps"]), 20_000_000, "{table}");
    // The room's clients are the last three; what they counted crossed the uplink.
    let clients = r["clients"].as_array().unwrap();
    let behind: u64 = clients[3..]
        .iter()
        .map(|c| {
            ["http", "nfs", "nbd", "tftp"]
                .iter()
                .map(|p| u(&c["bytes"][*p]))
                .sum::<u64>()
        })
        .sum();
    assert!(
        u(&up["bytes"]) >= behind,
        "uplink sent {} < {behind}\n{table}",
        up["bytes"]
    );
    // The shaper held it: its busiest 100 ms no faster than the rate and a bucket's burst.
    let burst_bps = 8 * 64 * 1024 * 10;
    assert!(u(&up["peak_bps"]) <= 20_000_000 + burst_bps, "{table}");
    assert!(u(&up["mean_bps"]) > 0, "{table}");
    let full = up["full_share"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&full), "{table}");
    assert!(
        table.contains("room behind an uplink: 3 clients, uplink 20 Mbit/s"),
        "{table}"
    );
}

/// A bond simulated by its layer-2 hash (`--bond-hash`): one address on two shaped links,
/// each client's frames on the link its MAC hashes onto. Consecutive MACs take the links in
/// turn, and each link carried at least what its own clients counted (the shaped veth's
/// egress counter: the redirect by MAC took their frames there).
#[test]
fn a_small_storm_on_a_hashed_bond_sends_each_clients_bytes_by_its_own_link() {
    let _room = one_room();
    let dir = tempfile::tempdir().unwrap();
    let (trace_file, _) = short_trace("nbd", 100, dir.path());
    let (table, r) = small_room(
        dir.path(),
        "nbd",
        4,
        &trace_file,
        "2x1gbit",
        300,
        &["--bond-hash"],
    );
    assert_eq!(u(&r["summary"]["booted"]), 4, "{table}");
    let links = r["links"].as_array().unwrap();
    assert_eq!(links.len(), 2, "{table}");
    for (k, l) in links.iter().enumerate() {
        assert_eq!(l["address"], "10.78.0.1", "{l}");
        assert_eq!(u(&l["clients"]), 2, "{l}\n{table}");
        // The clients whose MAC's last byte hashes here: 0x01 ^ last ^ 0x0800, modulo 2.
        let theirs: u64 = r["clients"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| {
                let mac = c["mac"].as_str().unwrap();
                let last = u8::from_str_radix(&mac[15..], 16).unwrap();
                ((0x01 ^ last) as usize ^ 0x0800) % 2 == k
            })
            .map(|c| u(&c["bytes"]["http"]) + u(&c["bytes"]["nbd"]))
            .sum();
        assert!(theirs > 0, "{table}");
        assert!(
            u(&l["bytes"]) >= theirs,
            "{l}: its clients counted {theirs}\n{table}"
        );
    }
    assert!(
        r["bound"]["busiest_link_s"].as_f64().unwrap() > 0.0,
        "{}",
        r["bound"]
    );
    bound_holds(&r, &table);
}

/// Two bootpool servers in the room (`--servers 2`), members `s1` and `s2` of one site on the
/// PostgreSQL the storm starts, each with its own link, sharing one `dhcp.range`: the clients
/// broadcast, the site's split decides who answers each, and the one that answers places its
/// boot by `server.placement` (here the default, `owner`: on its own link). Every client
/// boots, with an address no other client was given; both members sent bytes; each member left the other's DHCP messages to
/// it; the boots placed on each member's link are the clients that booted from it; and no
/// client was given an address by both.
#[test]
fn a_small_storm_on_two_servers_boots_each_client_from_exactly_one_member() {
    let _room = one_room();
    let dir = tempfile::tempdir().unwrap();
    let (trace_file, _) = short_trace("nbd", 100, dir.path());
    let (table, r) = small_room(
        dir.path(),
        "nbd",
        8,
        &trace_file,
        "1x200mbit",
        300,
        &["--servers", "2"],
    );
    assert_eq!(u(&r["summary"]["booted"]), 8, "{table}");
    let clients = r["clients"].as_array().unwrap();
    let mut ips: Vec<&str> = clients.iter().filter_map(|c| c["ip"].as_str()).collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 8, "no address twice\n{table}");
    let rows = r["servers"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{table}");
    let links = r["links"].as_array().unwrap();
    assert_eq!(links.len(), 2, "{table}");
    for (row, (name, address)) in rows.iter().zip([("s1", "10.78.0.1"), ("s2", "10.78.0.2")]) {
        assert_eq!(row["name"], name, "{row}");
        let booted_here = clients
            .iter()
            .filter(|c| c["root_server"] == address)
            .count() as u64;
        assert_eq!(u(&row["clients"]), booted_here, "{row}\n{table}");
        // The boots placed on its link (by either member) are those that booted from it.
        assert_eq!(u(&row["placed"]), booted_here, "{row}\n{table}");
        assert!(u(&row["others"]) > 0, "{row}\n{table}");
        assert!(u(&row["bytes"]) > 0, "{row}\n{table}");
    }
    for key in ["clients", "placed", "answered"] {
        assert_eq!(
            rows.iter().map(|row| u(&row[key])).sum::<u64>(),
            8,
            "{key}\n{table}"
        );
    }
    assert_eq!(
        r["servers"]["answered_by_two"],
        serde_json::json!([]),
        "{table}"
    );
    assert_eq!(u(&r["agreement"]["clients_recorded"]), 8, "{table}");
    bound_holds(&r, &table);
}

/// `--fail KIND` on two members (keepalived moving their addresses): member s1 dies while
/// the clients read their roots, and every client still boots without restarting its boot.
/// The stalls are printed, not asserted.
fn a_member_dies(root: &str, kind: &str) {
    let _room = one_room();
    let dir = tempfile::tempdir().unwrap();
    let (trace_file, _) = short_trace(root, 1500, dir.path());
    let (table, r) = small_room(
        dir.path(),
        root,
        6,
        &trace_file,
        "1x200mbit",
        900,
        &["--servers", "2", "--fail", kind, "--fail-at", "6"],
    );
    let f = &r["failure"];
    println!("{kind}, {root} root: {f}");
    assert_eq!(f["member"], "s1", "{table}");
    assert_eq!(u(&f["booted"]), 6, "{table}");
    assert_eq!(u(&f["restarted"]), 0, "{table}");
    assert_eq!(u(&r["summary"]["booted"]), 6, "{table}");
}

// Both failed before a member served every client the site leased (docs/site.md, "The
// access rule"): the survivor took s1's address and tickled its clients' connections, they
// reconnected, and it refused the roots of the clients s1 leased dynamically ("nbd client
// holds no lease of a pool booting this image"). They pass since.
#[test]
fn a_small_storm_whose_member_is_killed_boots_every_client_without_a_restart() {
    a_member_dies("nbd", "kill");
}

#[test]
fn a_small_storm_whose_members_links_go_down_boots_every_client_without_a_restart() {
    a_member_dies("nfs", "linkdown");
}

/// The reference's side of those rows (`--servers 2 --server-cmd`): bench/storm/reference.sh
/// on each of two servers (nfs-ganesha or nbd-server, nginx, dnsmasq's TFTP), their DHCP a
/// Kea HA pair, their addresses moved by keepalived with bootpool's file less its notify
/// lines, and every process of s1's host killed while the roots are read. Asserted only
/// what must hold, not how the reference fares (the benchmark's to say): the storm ran to
/// its report (its exit says whether every client booted), every client is counted with its
/// longest stall, and the failure's row names s1, at its address, over all the clients.
fn the_reference_dies(root: &str, kind: &str) {
    let _room = one_room();
    let dir = tempfile::tempdir().unwrap();
    let (trace_file, _) = short_trace(root, 1500, dir.path());
    let script = repo().join("bench/storm/reference.sh");
    let cmd = format!(
        "{} {root} {}",
        script.display(),
        dir.path().join("ref").display()
    );
    let extra: [&str; 11] = [
        "--servers",
        "2",
        "--fail",
        kind,
        "--fail-at",
        "6",
        "--server-cmd",
        &cmd,
        "--ready-port",
        "8080",
        "--no-callback",
    ];
    let (args, out) = room_args(dir.path(), root, 6, &trace_file, "1x200mbit", 900, &extra);
    let mut storm = std::process::Command::new(crate::common::bootpool_with_instruments());
    storm.arg("storm").args(&args).current_dir(repo());
    let (_, table, log) = crate::common::run(&mut storm, 1000);
    assert!(out.exists(), "no report\n{table}\n{log}");
    let r = json(&out);
    let f = &r["failure"];
    println!("reference, {kind}, {root} root: {f}");
    assert_eq!(u(&r["summary"]["clients"]), 6, "{table}");
    let clients = r["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 6, "{table}");
    for c in clients {
        assert!(c["longest_stall"].is_array(), "{c}\n{table}");
    }
    assert_eq!(f["member"], "s1", "{table}");
    assert_eq!(f["address"], "10.78.0.1", "{table}");
    assert_eq!(u(&f["clients"]), 6, "{table}");
    assert_eq!(r["servers"]["rows"].as_array().unwrap().len(), 2, "{table}");
}

#[test]
fn a_small_reference_site_whose_server_is_killed_reports_every_clients_stall() {
    the_reference_dies("nbd", "kill");
}

#[test]
fn a_small_reference_site_whose_servers_links_go_down_reports_every_clients_stall() {
    the_reference_dies("nfs", "linkdown");
}

/// Boots one VM of `lab-ROOT` with its trace kept, replays the trace from one simulated
/// client, and compares bootpool's records of the two boots: the same bytes per protocol
/// (within 1%) and the same phases (within 15%, for phases of a second or more: the firmware
/// steps take tens of milliseconds, where 15% is below the clocks' resolution).
fn fidelity(root: &str) {
    let _room = one_room();
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), |t| t);
    let (table, rows) = run_lab(&config, &["--clients", "1", "--root", root], 400);
    assert_eq!(rows[0][3], "booted", "{table}");
    let mac = rows[0][1].clone();
    let trace = dir.path().join("vm.trace");
    let mut export = std::process::Command::new(crate::common::bootpool_with_instruments());
    export
        .args(["trace", "--config", config.to_str().unwrap(), "--mac", &mac])
        .arg("--out")
        .arg(&trace);
    let (ok, out, log) = crate::common::run(&mut export, 30);
    assert!(ok, "{out}{log}");
    // The VM's boot as bootpool recorded it, read before the replay (whose client may have
    // the same MAC, and whose boot may join the same wave).
    let mut report = std::process::Command::new(env!("CARGO_BIN_EXE_bootpool"));
    report.args([
        "report",
        "--config",
        config.to_str().unwrap(),
        "--pool",
        &format!("lab-{root}"),
        "--format",
        "json",
    ]);
    let (ok, text, log) = crate::common::run(&mut report, 30);
    assert!(ok, "{text}{log}");
    let wave: Value = serde_json::from_str(&text).unwrap();
    let vm = wave["boots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["mac"] == mac.as_str())
        .unwrap_or_else(|| panic!("the VM's boot in {text}"))
        .clone();
    let vm = &vm;
    let out = dir.path().join("storm.json");
    storm(
        &[
            "--config",
            config.to_str().unwrap(),
            "--root",
            root,
            "--clients",
            "1",
            "--trace",
            trace.to_str().unwrap(),
            "--client-link",
            "10gbit",
            "--server-links",
            "1x10gbit",
            "--json",
            out.to_str().unwrap(),
        ],
        400,
    );
    let r = json(&out);
    let replayed = &r["clients"][0]["recorded"];
    assert_eq!(replayed["result"], "booted", "{replayed}");
    assert_ne!(
        replayed["id"], vm["id"],
        "the replay's record is not the VM's"
    );
    for proto in ["http", root] {
        let (a, b) = (u(&vm["bytes"][proto]), u(&replayed["bytes"][proto]));
        let diff = (a as f64 - b as f64).abs() / a as f64;
        assert!(diff <= 0.01, "{proto}: VM {a} bytes, replay {b}");
    }
    let phases = |b: &Value| -> Vec<(String, f64)> {
        b["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_string(),
                    p["seconds"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let (vm_phases, replay_phases) = (phases(vm), phases(replayed));
    let names = |p: &[(String, f64)]| p.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&vm_phases), names(&replay_phases));
    for ((name, a), (_, b)) in vm_phases.iter().zip(&replay_phases) {
        if *a >= 1.0 {
            let ratio = b / a;
            eprintln!("fidelity {root}: phase {name}: VM {a:.2} s, replay {b:.2} s (x{ratio:.3})");
            assert!(
                (0.85..=1.15).contains(&ratio),
                "phase {name}: VM {a:.2} s, replay {b:.2} s (x{ratio:.2})\nVM {vm_phases:?}\nreplay {replay_phases:?}"
            );
        }
    }
}

// The fidelity tests compare durations within 15%: a debug build's client costs 0.4 ms a call,
// which over the NFS trace's 8,465 calls came to x1.14 here; `scripts/test --all` runs them in
// the release build (within 5% there).
#[test]
#[ignore = "timing fidelity, with a VM: scripts/test --all"]
fn one_replayed_nfs_client_moves_the_vm_boots_bytes_in_its_phases() {
    fidelity("nfs");
}

#[test]
#[ignore = "timing fidelity, with a VM: scripts/test --all"]
fn one_replayed_nbd_client_moves_the_vm_boots_bytes_in_its_phases() {
    fidelity("nbd");
}

//! Boot records as programs see them: the JSON API, the live stream, Prometheus metrics and
//! `bootpool report`, over a legacy journal of real events imported into the store; failed boots;
//! request counters after real traffic; records surviving kill -9 in the SQLite store; and
//! server egress checked against the kernel's own counters on a real veth link.

use crate::common::netns::Link;
use crate::common::{Fixture, Loopback, run, run_async};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A journal as a lab run writes it: two NFS clients (one slow) then one NBD client, and
/// 127.0.0.1 leased to a fourth client that is still booting.
fn journal() -> String {
    let mut lines = Vec::new();
    let mut ev = |at: f64, who: &str, body: &str| {
        lines.push(format!(
            "{{\"at\":{},\"who\":{who},{body}}}",
            (at * 1e6) as i64
        ));
    };
    let boot = |ev: &mut dyn FnMut(f64, &str, &str),
                t0: f64,
                mac: &str,
                ip: &str,
                pool: &str,
                root: &str,
                took: f64| {
        let m = format!("{{\"mac\":\"{mac}\"}}");
        let i = format!("{{\"ip\":\"{ip}\"}}");
        ev(
            t0,
            &m,
            "\"event\":\"dhcp_discover\",\"pxe\":true,\"ipxe\":true",
        );
        ev(
            t0 + 3.0,
            &m,
            &format!(
                "\"event\":\"dhcp_ack\",\"ip\":\"{ip}\",\"pxe\":true,\"ipxe\":true,\"pool\":\"{pool}\""
            ),
        );
        ev(
            t0 + 3.2,
            &i,
            "\"event\":\"file\",\"proto\":\"http\",\"kind\":\"script\",\"path\":\"s\",\"bytes\":300,\"outcome\":\"complete\"",
        );
        ev(
            t0 + 4.0,
            &i,
            "\"event\":\"file\",\"proto\":\"http\",\"kind\":\"kernel\",\"path\":\"k\",\"bytes\":8000000,\"outcome\":\"complete\"",
        );
        ev(
            t0 + 4.5,
            &i,
            "\"event\":\"file\",\"proto\":\"http\",\"kind\":\"initrd\",\"path\":\"i\",\"bytes\":6000000,\"outcome\":\"complete\"",
        );
        ev(
            t0 + 10.0,
            &i,
            &format!("\"event\":\"root_attach\",\"proto\":\"{root}\",\"export\":\"/demo\""),
        );
        ev(
            t0 + 12.0,
            &i,
            &format!("\"event\":\"root_read\",\"proto\":\"{root}\",\"bytes\":50000000"),
        );
        ev(t0 + took, &i, "\"event\":\"booted\",\"uptime_s\":20.0");
    };
    boot(
        &mut ev,
        1000.0,
        "52:54:00:77:00:01",
        "10.77.0.11",
        "nfs-room",
        "nfs",
        40.0,
    );
    boot(
        &mut ev,
        1001.0,
        "52:54:00:77:00:02",
        "10.77.0.12",
        "nfs-room",
        "nfs",
        60.0,
    );
    boot(
        &mut ev,
        2000.0,
        "52:54:00:77:00:11",
        "10.77.0.13",
        "nbd-room",
        "nbd",
        30.0,
    );
    ev(
        3000.0,
        "{\"mac\":\"52:54:00:77:00:12\"}",
        "\"event\":\"dhcp_discover\",\"pxe\":true,\"ipxe\":true",
    );
    ev(
        3001.0,
        "{\"mac\":\"52:54:00:77:00:12\"}",
        "\"event\":\"dhcp_ack\",\"ip\":\"127.0.0.1\",\"pxe\":true,\"ipxe\":true,\"pool\":\"nbd-room\"",
    );
    lines.join("\n") + "\n"
}

/// The fixture's config with records kept forever: the journal's events are from 1970.
fn keep_forever(fx: &Fixture) -> Loopback {
    fx.loopback().server("retention: forever")
}

fn curl(args: &[&str]) -> Command {
    let mut c = Command::new("curl");
    c.args(["-sS", "--fail", "--max-time", "20"]).args(args);
    c
}

async fn get_json(base: &str, path: &str) -> serde_json::Value {
    let (ok, body, err) = run_async(curl(&[&format!("{base}{path}")]), 30).await;
    assert!(ok, "GET {path}: {err}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// A fixture whose state folder holds `journal` as a legacy event journal, which the daemon
/// imports into its store at start.
fn with_journal(journal: String) -> Fixture {
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.path().join("var")).unwrap();
    std::fs::write(fx.path().join("var/events.jsonl"), journal).unwrap();
    fx
}

#[tokio::test]
async fn api_stream_metrics_and_report_show_the_recorded_waves() {
    let fx = with_journal(journal());
    fx.write_config(&keep_forever(&fx));
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);

    let waves = get_json(&base, "/api/v1/waves").await;
    let waves = waves.as_array().unwrap();
    assert_eq!(waves.len(), 3, "{waves:?}");
    let nfs = &waves[0];
    assert_eq!(nfs["pool"], "nfs-room");
    assert_eq!(nfs["summary"]["clients"], 2);
    assert_eq!(nfs["summary"]["median_s"], 40.0);
    assert_eq!(nfs["summary"]["max_s"], 60.0);
    assert_eq!(nfs["summary"]["phase_median_s"]["kernel"], 1.3);
    let (nfs_id, nbd_id) = (
        nfs["id"].as_u64().unwrap(),
        waves[1]["id"].as_u64().unwrap(),
    );

    let wave = get_json(&base, &format!("/api/v1/waves/{nfs_id}")).await;
    let boots = wave["boots"].as_array().unwrap();
    assert_eq!(boots.len(), 2);
    let phases: Vec<&str> = boots[0]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["dhcp", "ipxe", "kernel", "initrd", "root"]);
    assert_eq!(boots[0]["bytes"]["nfs"], 50_000_000);

    let cmp = get_json(&base, &format!("/api/v1/compare?a={nfs_id}&b={nbd_id}")).await;
    let sentence = cmp["sentence"].as_str().unwrap();
    assert!(
        sentence.contains("median 30.0 s") && sentence.contains("nbd root"),
        "{sentence}"
    );

    let pools = get_json(&base, "/api/v1/pools").await;
    assert_eq!(pools.as_array().unwrap().len(), 2);
    // Each pool lists its 16 machines, booted or not, so the room can draw a tile for each.
    for p in pools.as_array().unwrap() {
        assert_eq!(p["machines"].as_array().unwrap().len(), 16, "{p}");
        assert_eq!(p["machines_complete"], true);
    }
    assert_eq!(pools[0]["machines"][0]["listed"], true);
    let one = get_json(&base, "/api/v1/boots?mac=52:54:00:77:00:02").await;
    assert_eq!(one.as_array().unwrap().len(), 1);
    assert_eq!(one[0]["duration_s"], 60.0);
    let clients = get_json(&base, "/api/v1/clients").await;
    assert_eq!(clients.as_array().unwrap().len(), 4);

    // A boot silent for long is timed out, and says where it stopped.
    let stuck = get_json(&base, "/api/v1/boots?mac=52:54:00:77:00:12").await;
    assert_eq!(
        (stuck[0]["result"].as_str(), stuck[0]["stopped_in"].as_str()),
        (Some("timed_out"), Some("ipxe"))
    );
    // Its wave counts it as the boot shows it, and compares with a booted wave up to the
    // furthest milestone both reached.
    let stuck_wave = &waves[2];
    assert_eq!(
        (
            &stuck_wave["summary"]["timed_out"],
            &stuck_wave["summary"]["running"]
        ),
        (&serde_json::json!(1), &serde_json::json!(0)),
        "{stuck_wave}"
    );
    let stuck_id = stuck_wave["id"].as_u64().unwrap();
    let cmp = get_json(&base, &format!("/api/v1/compare?a={nbd_id}&b={stuck_id}")).await;
    let sentence = cmp["sentence"].as_str().unwrap();
    assert!(
        sentence.contains("cannot be compared on boot time")
            && sentence.contains("(1 timed out in ipxe)")
            && sentence.contains("Up to the DHCP ACK"),
        "{sentence}"
    );

    // The live stream: a client reporting booted shows up as a `boot` event. The stream has
    // subscribed to the changes once its response headers are out (`-i` prints them).
    let mut sse = Command::new("curl")
        .args([
            "-sS",
            "-N",
            "-i",
            "--max-time",
            "10",
            &format!("{base}/api/v1/stream"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut events = std::io::BufReader::new(sse.stdout.take().unwrap());
    let events = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut line = String::new();
        while events.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
            line.clear();
        }
        events
    })
    .await
    .unwrap();
    let (ok, _, err) = run_async(
        curl(&[
            "-X",
            "POST",
            "--data",
            "{\"uptime_s\": 9.5}",
            "-H",
            "Content-Type: application/json",
            &format!("{base}/api/v1/booted"),
        ]),
        30,
    )
    .await;
    assert!(ok, "{err}");
    let streamed = tokio::task::spawn_blocking(move || {
        let mut events = events;
        let mut out = String::new();
        std::io::Read::read_to_string(&mut events, &mut out).unwrap();
        sse.wait().unwrap();
        out
    })
    .await
    .unwrap();
    let boot_event = streamed
        .split("\n\n")
        .find(|e| e.contains("event: boot") && e.contains("52:54:00:77:00:12"))
        .unwrap_or_else(|| panic!("no boot event in the stream:\n{streamed}"));
    assert!(boot_event.contains("\"result\":\"booted\""), "{boot_event}");

    let (ok, metrics, _) = run_async(curl(&[&format!("{base}/metrics")]), 30).await;
    assert!(ok);
    assert!(
        metrics.contains("bootpool_payload_bytes_total{proto=\"http\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("bootpool_boots{pool=\"nfs-room\",result=\"booted\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("bootpool_phase_seconds_count{phase=\"root\"} 4"),
        "{metrics}"
    );
    daemon.stop().await;

    // The report reads the same records with the daemon stopped.
    let report = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
        c.args(["report", "--config"])
            .arg(fx.config_path())
            .args(args);
        run(&mut c, 20)
    };
    let (ok, text, err) = report(&["--compare", &nfs_id.to_string(), &nbd_id.to_string()]);
    assert!(ok, "{err}");
    assert!(
        text.contains("median_s") && text.contains("40.0") && text.contains("30.0"),
        "{text}"
    );
    let (ok, csv, _) = report(&["--pool", "nfs-room", "--format", "csv"]);
    assert!(ok);
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .starts_with("mac,ip,result,end,boot_s,inferred_s,dhcp_s"),
        "{csv}"
    );
    assert!(
        csv.contains("52:54:00:77:00:02,10.77.0.12,booted,reported,60.0,12.0,3.0"),
        "{csv}"
    );
    let (ok, json, _) = report(&["--wave", &nbd_id.to_string(), "--format", "json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["summary"]["median_s"], 30.0);
    let (ok, _, err) = report(&["--wave", "999"]);
    assert!(!ok && err.contains("no wave 999"), "{err}");
    // The raw events, as the legacy journal held them: the journal's and the booted call.
    let (ok, raw, err) = report(&["--events"]);
    assert!(ok, "{err}");
    assert_eq!(raw.lines().count(), journal().lines().count() + 1, "{raw}");
    let last: bootpool::record::Event = serde_json::from_str(raw.lines().last().unwrap()).unwrap();
    assert!(
        matches!(
            last.kind,
            bootpool::record::Kind::Booted {
                uptime_s: Some(9.5),
                ..
            }
        ),
        "{last:?}"
    );
    // The egress samples the daemon took each second it ran (no links, protocol rates only).
    let (ok, raw, err) = report(&["--egress"]);
    assert!(ok, "{err}");
    let samples: Vec<serde_json::Value> = raw
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!samples.is_empty(), "{raw}");
    assert!(
        samples
            .iter()
            .all(|s| s["t"].as_f64() > Some(1.7e9) && s["protocols"].is_object()),
        "{raw}"
    );
}

/// Reads the transmit counter of `iface` inside `ns` from the kernel.
fn kernel_tx(ns: &str, iface: &str) -> u64 {
    let (ok, out, err) = run(
        &mut Link::command(
            ns,
            "cat",
            &[&format!("/sys/class/net/{iface}/statistics/tx_bytes")],
        ),
        10,
    );
    assert!(ok, "{err}");
    out.trim().parse().unwrap()
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn egress_agrees_with_the_kernel_counters_of_a_real_link() {
    // The API is read from the client's side (its subnet is a client subnet): with the token.
    const READ: &str = "records-egress-read-0123";
    let auth = format!("Authorization: Bearer {READ}");
    let link = Link::new("10.79.0.1/24");
    let fx = Fixture::new();
    fx.write_config(
        &fx.loopback()
            .subnet("10.79.0")
            .interfaces(&link.server_if)
            .http("0.0.0.0:8080")
            .server(&format!("read_token: {READ}")),
    );
    let bin = env!("CARGO_BIN_EXE_bootpool");
    let log = std::fs::File::create(fx.path().join("serve.log")).unwrap();
    let serve = Link::command(
        &link.server_ns,
        bin,
        &["serve", "--config", fx.config_path().to_str().unwrap()],
    )
    .stdout(log.try_clone().unwrap())
    .stderr(log)
    .spawn()
    .unwrap();
    let _serve = Serve(serve);
    link.in_client(&["ip", "addr", "add", "10.79.0.2/24", "dev", &link.client_if]);
    let client = |args: &[&str]| {
        let mut a = vec![
            "-sS",
            "--fail",
            "--max-time",
            "20",
            "--retry",
            "20",
            "--retry-connrefused",
            "--retry-delay",
            "1",
            "-H",
            &auth,
        ];
        a.extend_from_slice(args);
        run(&mut Link::command(&link.client_ns, "curl", &a), 60)
    };
    // Traffic counts from the sampler's first reading on: wait until it has one.
    crate::common::poll_until(Duration::from_secs(20), Duration::from_millis(200), || {
        let (ok, body, _) = client(&["http://10.79.0.1:8080/api/v1/egress"]);
        ok && body.contains("\"points\":[{")
    });
    // Traffic: the 3 MiB kernel five times.
    for _ in 0..5 {
        let (ok, _, err) = client(&["-o", "/dev/null", "http://10.79.0.1:8080/boot/demo/vmlinuz"]);
        assert!(
            ok,
            "{err}\n{}",
            std::fs::read_to_string(fx.path().join("serve.log")).unwrap_or_default()
        );
    }
    // Quiet for more than a sampling interval, then compare with the kernel (again, for ten
    // seconds at most, while the sampler has not read the last of it).
    std::thread::sleep(Duration::from_millis(2500));
    let mut tries = 0;
    let (kernel, reported) = loop {
        let kernel = kernel_tx(&link.server_ns, &link.server_if);
        let (ok, metrics, err) = client(&["http://10.79.0.1:8080/metrics"]);
        assert!(ok, "{err}");
        let reported: u64 = metrics
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "bootpool_link_transmit_bytes_total{{link=\"{}\"",
                    link.server_if
                ))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no counter for {}:\n{metrics}", link.server_if));
        tries += 1;
        if (kernel.abs_diff(reported) as f64) < 0.01 * kernel as f64 || tries == 20 {
            break (kernel, reported);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(kernel > 5 * 3 * (1 << 20), "{kernel}");
    let diff = kernel.abs_diff(reported) as f64 / kernel as f64;
    assert!(diff < 0.01, "bootpool says {reported}, the kernel {kernel}");

    // The rates over the run add up to what was sent (the HTTP payload is 15 MiB).
    let (ok, body, _) = client(&["http://10.79.0.1:8080/api/v1/egress?step=1"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let series = v["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == link.server_if.as_str())
        .unwrap();
    let sent: f64 = series["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["tx_bytes"].as_f64().unwrap())
        .sum();
    let payload = 5.0 * f64::from(3u32 << 20);
    assert!(
        sent > payload && sent < payload * 1.1,
        "egress sums to {sent} bytes for {payload} bytes of payload"
    );
    let http: f64 = v["protocols"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["proto"] == "http")
        .flat_map(|p| p["points"].as_array().unwrap().iter())
        .map(|p| p["bytes_s"].as_f64().unwrap())
        .sum();
    // Untied transfers (no DHCP lease for 10.79.0.2) are not counted per protocol.
    assert_eq!(http, 0.0);
}

#[test]
fn a_daemon_killed_with_9_comes_back_with_its_records() {
    // 127.0.0.1 is leased to a client of nbd-room, so what it fetches is tied to its boot.
    let fx = with_journal(journal());
    // A port no other test (or another checkout's run) holds: the daemon is started again on it.
    let http = free_port();
    fx.write_config(&keep_forever(&fx).http(&format!("127.0.0.1:{http}")));
    let start = || {
        let log = std::fs::File::create(fx.path().join("serve.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_bootpool"))
            .args(["serve", "--config", fx.config_path().to_str().unwrap()])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Serve(child)
    };
    let get = |url: &str| {
        let mut c = curl(&[
            "--retry",
            "30",
            "--retry-connrefused",
            "--retry-delay",
            "1",
            url,
        ]);
        run(&mut c, 60)
    };
    let mut daemon = start();
    for _ in 0..4 {
        let (ok, _, err) = get(&format!("http://127.0.0.1:{http}/boot/demo/initrd.img"));
        assert!(ok, "{err}");
    }
    // Once the batch is committed (it may wait half a second; the store is SQLite in WAL mode,
    // readable beside its writer), the hardest stop there is.
    let var = fx.path().join("var");
    let initrds = |stored: &str| stored.matches("\"path\":\"/boot/demo/initrd.img\"").count();
    crate::common::poll_until(Duration::from_secs(15), Duration::from_millis(100), || {
        initrds(&crate::common::recorded_events(&var)) == 4
    });
    // The journal was imported into the store in the state folder.
    assert!(var.join("records.db").exists() && var.join("records.db-wal").exists());
    daemon.0.kill().unwrap();
    daemon.0.wait().unwrap();
    drop(daemon);
    // Read by another program (this test) straight from the store, with the daemon dead.
    let stored = crate::common::recorded_events(&var);
    assert_eq!(initrds(&stored), 4, "{stored}");
    let journal_lines = journal().lines().count();
    assert_eq!(stored.lines().count(), journal_lines + 4, "{stored}");

    let mut daemon = start();
    let (ok, body, err) = get(&format!(
        "http://127.0.0.1:{http}/api/v1/boots?mac=52:54:00:77:00:12"
    ));
    assert!(ok, "{err}");
    let boots: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(boots[0]["bytes"]["http"], 4 * (2u64 << 20), "{body}");
    let waves = get(&format!("http://127.0.0.1:{http}/api/v1/waves")).1;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&waves)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        3,
        "{waves}"
    );
    // Killed again: the journal is not imported a second time, nothing is doubled.
    daemon.0.kill().unwrap();
    daemon.0.wait().unwrap();
    drop(daemon);
    let _daemon = start();
    let (ok, body, err) = get(&format!(
        "http://127.0.0.1:{http}/api/v1/boots?mac=52:54:00:77:00:12"
    ));
    assert!(ok, "{err}");
    let boots: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(boots[0]["bytes"]["http"], 4 * (2u64 << 20), "{body}");
    assert_eq!(
        crate::common::recorded_events(&var).lines().count(),
        journal_lines + 4
    );
}

/// A MAC of `nfs-room` given 127.0.0.1 by reservation, so what the test fetches over loopback
/// is tied to a boot of it.
const LOOPBACK_MAC: &str = "52:54:00:77:00:20";

/// A DHCP message from `mac` as if relayed from 127.0.0.1 (the answer stays on loopback).
fn dhcp_message(mac: &str, kind: dhcproto::v4::MessageType) -> Vec<u8> {
    dhcp_message_from(mac, kind, false)
}

/// `dhcp_message`, as iPXE sends it when `ipxe` (option 60 `PXEClient`, user class `iPXE`).
fn dhcp_message_from(mac: &str, kind: dhcproto::v4::MessageType, ipxe: bool) -> Vec<u8> {
    use dhcproto::v4::{DhcpOption, Message, Opcode};
    use dhcproto::{Encodable, Encoder};
    let mac: bootpool::config::Mac = mac.parse().unwrap();
    let any = std::net::Ipv4Addr::UNSPECIFIED;
    let mut m = Message::new(any, any, any, any, &mac.0);
    m.set_opcode(Opcode::BootRequest);
    m.set_giaddr(std::net::Ipv4Addr::LOCALHOST);
    m.opts_mut().insert(DhcpOption::MessageType(kind));
    m.opts_mut()
        .insert(DhcpOption::RequestedIpAddress([127, 0, 0, 1].into()));
    if ipxe {
        m.opts_mut().insert(DhcpOption::ClassIdentifier(
            b"PXEClient:Arch:00000".to_vec(),
        ));
        m.opts_mut().insert(DhcpOption::UserClass(b"iPXE".to_vec()));
    }
    let mut buf = Vec::new();
    m.encode(&mut Encoder::new(&mut buf)).unwrap();
    buf
}

async fn send_udp(to: std::net::SocketAddr, bytes: &[u8]) {
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.send_to(bytes, to).await.unwrap();
}

/// Polls the API until the newest boot of `mac` satisfies `ok` (the writer batches).
async fn boot_until(
    base: &str,
    mac: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    for _ in 0..100 {
        last = get_json(base, &format!("/api/v1/boots?mac={mac}")).await;
        if let Some(b) = last.as_array().and_then(|a| a.last())
            && ok(b)
        {
            return b.clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("boot of {mac} never matched: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_boots_say_where_and_why_in_the_api_metrics_and_report() {
    let fx = with_journal(journal());
    // No lease holds 127.0.0.1 yet: on a loopback server the recorder's own view of the
    // address (the journal's last ACK) says who reports.
    fx.write_config(&keep_forever(&fx).address("127.0.0.2"));
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);

    // The client behind 127.0.0.1 (52:54:00:77:00:12 in the journal, stuck after its DHCP)
    // reports that its boot failed.
    let (ok, _, err) = run_async(
        curl(&[
            "-X",
            "POST",
            "--data",
            "{\"reason\": \"dracut: cannot find the root device\"}",
            "-H",
            "Content-Type: application/json",
            &format!("{base}/api/v1/failed"),
        ]),
        30,
    )
    .await;
    assert!(ok, "{err}");
    let b = boot_until(&base, "52:54:00:77:00:12", |b| b["result"] == "failed").await;
    assert_eq!(b["stopped_in"], "ipxe", "{b}");
    assert_eq!(
        b["failure"], "client: dracut: cannot find the root device",
        "{b}"
    );
    assert_eq!(b["duration_s"], serde_json::Value::Null, "{b}");
    daemon.stop().await;

    // Now 127.0.0.1 is leased to another client, which asks TFTP for files.
    fx.write_config(&keep_forever(&fx).reserving_127_0_0_1(LOOPBACK_MAC));
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);
    send_udp(
        daemon.bound.dhcp,
        &dhcp_message(LOOPBACK_MAC, dhcproto::v4::MessageType::Request),
    )
    .await;
    boot_until(&base, LOOPBACK_MAC, |b| b["result"] == "running").await;
    let tftp = |file: &str| {
        curl(&[
            "-o",
            "/dev/null",
            &format!(
                "tftp://127.0.0.1:{}/{file}",
                daemon.bound.tftp.unwrap().port()
            ),
        ])
    };
    // iPXE's probe for a script that is not there is no failure...
    let (ok, _, _) = run_async(tftp("autoexec.ipxe"), 30).await;
    assert!(!ok);
    // ...nor is a loader it got.
    let (ok, _, err) = run_async(tftp("undionly.kpxe"), 30).await;
    assert!(ok, "{err}");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let b = boot_until(&base, LOOPBACK_MAC, |_| true).await;
    assert_eq!(b["result"], "running", "{b}");
    // A loader bootpool hands out (to 32-bit EFI firmware) that the loaders folder lacks is.
    let (ok, _, _) = run_async(tftp("ipxe-i386.efi"), 30).await;
    assert!(!ok);
    let b = boot_until(&base, LOOPBACK_MAC, |b| b["result"] == "failed").await;
    assert_eq!(b["stopped_in"], "ipxe", "{b}");
    assert_eq!(b["failure"], "tftp: ipxe-i386.efi: file not found", "{b}");

    // The machine starts again (iPXE's DISCOVER after a failed boot is a new boot), and the
    // kernel the script names is gone from the image.
    for kind in [
        dhcproto::v4::MessageType::Discover,
        dhcproto::v4::MessageType::Request,
    ] {
        send_udp(
            daemon.bound.dhcp,
            &dhcp_message_from(LOOPBACK_MAC, kind, true),
        )
        .await;
    }
    let b = boot_until(&base, LOOPBACK_MAC, |b| b["result"] == "running").await;
    assert_eq!(b["current_phase"], "ipxe", "{b}");
    std::fs::remove_file(fx.image_dir().join("vmlinuz")).unwrap();
    let (ok, _, _) = run_async(curl(&[&format!("{base}/boot/demo/vmlinuz")]), 30).await;
    assert!(!ok);
    let b = boot_until(&base, LOOPBACK_MAC, |b| b["result"] == "failed").await;
    assert_eq!(b["failure"], "http: /boot/demo/vmlinuz: not found", "{b}");
    std::fs::write(
        fx.image_dir().join("vmlinuz"),
        crate::common::pattern(1, 3 << 20),
    )
    .unwrap();
    let all = get_json(&base, &format!("/api/v1/boots?mac={LOOPBACK_MAC}")).await;
    assert_eq!(all.as_array().unwrap().len(), 2, "{all}");

    let waves = get_json(&base, "/api/v1/waves").await;
    let failed: Vec<(String, u64)> = waves
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["summary"]["failed"].as_u64() > Some(0))
        .map(|w| {
            (
                w["pool"].as_str().unwrap().to_string(),
                w["summary"]["failed"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        failed,
        [
            ("nbd-room".to_string(), 1),
            ("nfs-room".to_string(), 1),
            ("nfs-room".to_string(), 1)
        ],
        "{waves}"
    );
    let (ok, metrics, _) = run_async(curl(&[&format!("{base}/metrics")]), 30).await;
    assert!(ok);
    for line in [
        "bootpool_boots{pool=\"nbd-room\",result=\"failed\"} 1",
        "bootpool_boots{pool=\"nfs-room\",result=\"failed\"} 2",
        "bootpool_boots{pool=\"nfs-room\",result=\"booted\"} 2",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line}\n{metrics}");
    }
    daemon.stop().await;

    // Failures are stored like any event: a restarted daemon and the report show them.
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);
    let b = boot_until(&base, LOOPBACK_MAC, |_| true).await;
    assert_eq!(
        (b["result"].as_str(), b["stopped_in"].as_str()),
        (Some("failed"), Some("ipxe")),
        "{b}"
    );
    daemon.stop().await;
    let report = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
        c.args(["report", "--config"])
            .arg(fx.config_path())
            .args(args);
        run(&mut c, 20)
    };
    let (ok, text, err) = report(&["--pool", "nbd-room"]);
    assert!(ok, "{err}");
    assert!(
        text.contains(
            "52:54:00:77:00:12 failed in ipxe: client: dracut: cannot find the root device"
        ) && text.contains(
            "wave 4 of pool nbd-room: 0 of 16 booted (0 by inference), 15 never asked, 1 failed, 0 timed out, 0 running;"
        ),
        "{text}"
    );
    let (ok, csv, _) = report(&["--pool", "nfs-room", "--format", "csv"]);
    assert!(ok);
    assert!(
        csv.lines().any(
            |l| l.starts_with(&format!("{LOOPBACK_MAC},127.0.0.1,failed,-,"))
                && l.ends_with(",ipxe,-")
        ),
        "{csv}"
    );
}

/// One ONC RPC call with AUTH_NONE, as bytes (no record mark).
fn rpc_call(xid: u32, prog: u32, vers: u32, proc_: u32, args: &[u32]) -> Vec<u8> {
    let mut words = vec![xid, 0, 2, prog, vers, proc_, 0, 0, 0, 0];
    words.extend_from_slice(args);
    words.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// The value of one sample line of a metrics page.
fn sample(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_malformed_and_refused_per_service_after_real_traffic() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fx = with_journal(journal());
    fx.write_config(&keep_forever(&fx));
    let daemon = fx.start().await;
    let bound = daemon.bound;
    let base = format!("http://{}", bound.http);
    let scrape = || async {
        let (ok, m, err) = run_async(curl(&[&format!("{base}/metrics")]), 30).await;
        assert!(ok, "{err}");
        m
    };
    let before = scrape().await;

    // DHCP: one DISCOVER from a MAC in no pool (answered with silence, still a request) and
    // two packets that are not DHCP.
    send_udp(
        bound.dhcp,
        &dhcp_message("02:00:00:00:00:99", dhcproto::v4::MessageType::Discover),
    )
    .await;
    send_udp(bound.dhcp, b"not dhcp").await;
    send_udp(bound.dhcp, &[0u8; 300]).await;
    // TFTP: two downloads, one name outside what is served, one garbage packet.
    let tftp = |file: &str| {
        curl(&[
            "-o",
            "/dev/null",
            &format!("tftp://127.0.0.1:{}/{file}", bound.tftp.unwrap().port()),
        ])
    };
    for _ in 0..2 {
        let (ok, _, err) = run_async(tftp("demo/vmlinuz"), 30).await;
        assert!(ok, "{err}");
    }
    let (ok, _, _) = run_async(tftp("demo/rootfs.img"), 30).await;
    assert!(!ok);
    send_udp(bound.tftp.unwrap(), b"\x00\x09junk").await;
    // HTTP: three boot files and one 404 (and the scrapes: the first one, and each after).
    for _ in 0..3 {
        let (ok, _, err) = run_async(
            curl(&["-o", "/dev/null", &format!("{base}/boot/demo/initrd.img")]),
            30,
        )
        .await;
        assert!(ok, "{err}");
    }
    let (ok, _, _) = run_async(curl(&[&format!("{base}/boot/nope/vmlinuz")]), 30).await;
    assert!(!ok);
    // NFS: a NULL call and a MOUNT EXPORT call on one connection, then a record that is not RPC.
    let mut nfs = tokio::net::TcpStream::connect(bound.nfs).await.unwrap();
    for call in [
        rpc_call(1, 100_003, 3, 0, &[]),
        rpc_call(2, 100_005, 3, 5, &[]),
    ] {
        nfs.write_all(&(0x8000_0000u32 | call.len() as u32).to_be_bytes())
            .await
            .unwrap();
        nfs.write_all(&call).await.unwrap();
        let mut mark = [0u8; 4];
        nfs.read_exact(&mut mark).await.unwrap();
        let mut reply = vec![0u8; (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize];
        nfs.read_exact(&mut reply).await.unwrap();
    }
    nfs.write_all(&[0x80, 0, 0, 4, 1, 2, 3, 4]).await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), nfs.read_to_end(&mut rest)).await;
    // Portmap over UDP: one GETPORT for NFS, one packet that is no call.
    send_udp(
        bound.portmap,
        &rpc_call(3, 100_000, 2, 3, &[100_003, 3, 6, 0]),
    )
    .await;
    send_udp(bound.portmap, b"??").await;
    // NBD: LIST then GO for an export that does not exist, from a client without a lease.
    let from = std::net::Ipv4Addr::new(127, 0, 0, 2);
    let mut nbd = crate::common::nbd_raw::Raw::connect_from(bound.nbd, from).await;
    nbd.option(crate::common::nbd_raw::OPT_LIST, &[]).await;
    while nbd.option_reply().await.1 != crate::common::nbd_raw::REP_ACK {}
    assert_eq!(
        nbd.go("nope").await,
        Err(crate::common::nbd_raw::REP_ERR_UNKNOWN)
    );
    drop(nbd);
    // UDP is fire-and-forget, and the daemon counts a datagram when it reads it: scrape until
    // the counts are in (each scrape is one more HTTP request), for ten seconds at most.
    let series = [
        "bootpool_requests_total{service=\"dhcp\"}",
        "bootpool_malformed_total{service=\"dhcp\"}",
        "bootpool_requests_total{service=\"tftp\"}",
        "bootpool_refused_total{service=\"tftp\"}",
        "bootpool_malformed_total{service=\"tftp\"}",
        "bootpool_requests_total{service=\"http\"}",
        "bootpool_refused_total{service=\"http\"}",
        "bootpool_requests_total{service=\"nfs\"}",
        "bootpool_malformed_total{service=\"nfs\"}",
        "bootpool_requests_total{service=\"portmap\"}",
        "bootpool_malformed_total{service=\"portmap\"}",
        "bootpool_requests_total{service=\"nbd\"}",
        "bootpool_refused_total{service=\"nbd\"}",
    ];
    let mut scrapes = 0;
    let (after, got, want) = loop {
        let after = scrape().await;
        scrapes += 1;
        let got: Vec<(&str, u64)> = series
            .iter()
            .map(|s| (*s, sample(&after, s) - sample(&before, s)))
            .collect();
        let want = [1, 2, 3, 1, 1, 3 + 1 + scrapes, 1, 2, 1, 1, 1, 2, 1];
        let want: Vec<(&str, u64)> = series.iter().copied().zip(want).collect();
        if got == want || scrapes == 100 {
            break (after, got, want);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(got, want, "\n{after}");
    let delta = |series: &str| sample(&after, series) - sample(&before, series);
    // Recorded payload, boots by result and the histograms, dropped events and link families.
    // The three initrds went to 127.0.0.1, leased in the journal: recorded payload.
    assert_eq!(
        delta("bootpool_payload_bytes_total{proto=\"http\"}"),
        3 * (2 << 20),
        "\n{after}"
    );
    for line in [
        "bootpool_boots{pool=\"nfs-room\",result=\"booted\"} 2",
        "bootpool_boots{pool=\"nbd-room\",result=\"booted\"} 1",
        // The client behind 127.0.0.1 is alive again: it just fetched files.
        "bootpool_boots{pool=\"nbd-room\",result=\"running\"} 1",
        "bootpool_phase_seconds_count{phase=\"root\"} 3",
        "bootpool_phase_seconds_bucket{phase=\"dhcp\",le=\"2.5\"} 1",
        "bootpool_phase_seconds_bucket{phase=\"dhcp\",le=\"5\"} 4",
        "bootpool_events_dropped_total 0",
        "# TYPE bootpool_link_transmit_bytes_total counter",
    ] {
        assert!(after.lines().any(|l| l == line), "{line}\n{after}");
    }
    daemon.stop().await;
}

/// A journal of rooms booting an image that never calls bootpool: two NFS clients whose root
/// reads settle, an NBD client that settles and later disconnects, and an NBD client that
/// drops its root before it read enough. Events from 1970: every quiet is long past.
fn stock_journal() -> String {
    let mut lines = Vec::new();
    let mut ev = |at: f64, who: &str, body: &str| {
        lines.push(format!(
            "{{\"at\":{},\"who\":{who},{body}}}",
            (at * 1e6) as i64
        ));
    };
    // (start, mac, ip, pool, root, the seconds of each 8 MB read after the attach at +10 s)
    type Client<'a> = (f64, &'a str, &'a str, &'a str, &'a str, &'a [f64]);
    let rooms: [Client; 4] = [
        (
            1000.0,
            "52:54:00:77:00:01",
            "10.77.0.11",
            "nfs-room",
            "nfs",
            &[12.0, 30.0, 45.0],
        ),
        (
            1001.0,
            "52:54:00:77:00:02",
            "10.77.0.12",
            "nfs-room",
            "nfs",
            &[12.0, 20.0, 55.0],
        ),
        (
            2000.0,
            "52:54:00:77:00:11",
            "10.77.0.13",
            "nbd-room",
            "nbd",
            &[12.0, 25.0],
        ),
        (
            2001.0,
            "52:54:00:77:00:12",
            "10.77.0.14",
            "nbd-room",
            "nbd",
            &[],
        ),
    ];
    for (t0, mac, ip, pool, root, reads) in rooms {
        let m = format!("{{\"mac\":\"{mac}\"}}");
        let i = format!("{{\"ip\":\"{ip}\"}}");
        ev(
            t0,
            &m,
            "\"event\":\"dhcp_discover\",\"pxe\":true,\"ipxe\":true",
        );
        ev(
            t0 + 1.0,
            &m,
            &format!(
                "\"event\":\"dhcp_ack\",\"ip\":\"{ip}\",\"pxe\":true,\"ipxe\":true,\"pool\":\"{pool}\""
            ),
        );
        for (at, kind) in [(2.0, "script"), (3.0, "kernel"), (4.0, "initrd")] {
            ev(
                t0 + at,
                &i,
                &format!(
                    "\"event\":\"file\",\"proto\":\"http\",\"kind\":\"{kind}\",\"path\":\"f\",\"bytes\":100,\"outcome\":\"complete\""
                ),
            );
        }
        ev(
            t0 + 10.0,
            &i,
            &format!("\"event\":\"root_attach\",\"proto\":\"{root}\",\"export\":\"stock\""),
        );
        for at in reads {
            ev(
                t0 + at,
                &i,
                &format!("\"event\":\"root_read\",\"proto\":\"{root}\",\"bytes\":8000000"),
            );
        }
        if root == "nbd" {
            // The first powers off long after it settled; the second leaves at once.
            let after = if reads.is_empty() { 11.0 } else { 200.0 };
            ev(
                t0 + after,
                &i,
                "\"event\":\"root_detach\",\"proto\":\"nbd\",\"how\":\"disconnect\"",
            );
        }
    }
    lines.join("\n") + "\n"
}

#[tokio::test]
async fn boots_of_an_image_that_never_reports_are_up_by_inference_in_the_api_and_report() {
    let fx = with_journal(stock_journal());
    fx.write_config(&keep_forever(&fx));
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);

    let waves = get_json(&base, "/api/v1/waves").await;
    let waves = waves.as_array().unwrap();
    assert_eq!(waves.len(), 2, "{waves:?}");
    let (nfs, nbd) = (&waves[0]["summary"], &waves[1]["summary"]);
    // Up by inference counts as booted, at the last read before the quiet.
    assert_eq!(
        (
            &nfs["booted"],
            &nfs["inferred"],
            &nfs["running"],
            &nfs["timed_out"]
        ),
        (&2.into(), &2.into(), &0.into(), &0.into()),
        "{nfs}"
    );
    // The second settled at 20 s (35 s of quiet before its read at 55 s): an inferred end
    // stays where it was made.
    assert_eq!(
        (&nfs["median_s"], &nfs["max_s"]),
        (&20.0.into(), &45.0.into())
    );
    assert_eq!(
        (&nbd["booted"], &nbd["inferred"], &nbd["timed_out"]),
        (&1.into(), &1.into(), &1.into()),
        "{nbd}"
    );
    let boots = get_json(&base, "/api/v1/boots?pool=nbd-room").await;
    let boots = boots.as_array().unwrap();
    let (up, left) = (&boots[0], &boots[1]);
    assert_eq!(
        (
            &up["result"],
            &up["end"],
            &up["evidence"],
            &up["inferred_s"]
        ),
        (
            &"booted".into(),
            &"inferred".into(),
            &"root_settled".into(),
            &25.0.into()
        ),
        "{up}"
    );
    assert_eq!(up["duration_s"], 25.0, "{up}");
    assert_eq!(
        (&up["gone"], &up["gone_at"]),
        (&"nbd_disconnect".into(), &2200.0.into())
    );
    assert_eq!(
        up["phases"].as_array().unwrap().last().unwrap()["seconds"],
        15.0
    );
    // Gone before it was up: timed out where it stopped, nothing inferred.
    assert_eq!(
        (
            &left["result"],
            &left["stopped_in"],
            &left["end"],
            &left["gone"]
        ),
        (
            &"timed_out".into(),
            &"root".into(),
            &serde_json::Value::Null,
            &"nbd_disconnect".into()
        ),
        "{left}"
    );
    // The two waves compare on boot time: inferred ends are ends.
    let cmp = get_json(
        &base,
        &format!("/api/v1/compare?a={}&b={}", waves[0]["id"], waves[1]["id"]),
    )
    .await;
    let sentence = cmp["sentence"].as_str().unwrap();
    assert!(
        sentence.contains("booted in a median 20.0 s, 5.0 s (20%) faster"),
        "{sentence}"
    );
    drop(daemon);

    let report = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
        c.arg("report")
            .args(args)
            .arg("--config")
            .arg(fx.config_path());
        run(&mut c, 20)
    };
    let (ok, csv, err) = report(&["--pool", "nbd-room", "--format", "csv"]);
    assert!(ok, "{err}");
    assert!(
        csv.contains("52:54:00:77:00:11,10.77.0.13,booted,inferred:root_settled,25.0,25.0,"),
        "{csv}"
    );
    assert!(
        csv.lines().nth(1).unwrap().ends_with(",-,nbd_disconnect"),
        "{csv}"
    );
    let (ok, text, err) = report(&["--pool", "nfs-room"]);
    assert!(ok, "{err}");
    assert!(
        text.contains("2 of 16 booted (2 by inference), 14 never asked"),
        "{text}"
    );
}

/// A daemon in a namespace of its own whose root connections are lost after `lost_after`
/// seconds of silence, with a lease (in its journal) tying 10.79.`net`.100 to `mac` of `pool`.
fn lost_after_daemon(
    link: &Link,
    net: u8,
    mac: &str,
    pool: &str,
) -> (Fixture, crate::common::netns::Daemon) {
    use bootpool::record::{Event, Kind, Who};
    let fx = Fixture::new();
    let client: std::net::Ipv4Addr = format!("10.79.{net}.100").parse().unwrap();
    let mut journal = String::new();
    for kind in [
        Kind::DhcpDiscover {
            answered: true,
            pxe: true,
            ipxe: false,
            pool: Some(pool.into()),
            arch: None,
        },
        Kind::DhcpAck {
            ip: client,
            pxe: true,
            ipxe: false,
            pool: pool.into(),
            link: None,
            relayed: None,
        },
    ] {
        journal += &(serde_json::to_string(&Event::now(Who::Mac(mac.parse().unwrap()), kind))
            .unwrap()
            + "\n");
    }
    let state = fx.path().join("var");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("events.jsonl"), journal).unwrap();
    // And in the lease table, which is who the root services ask.
    std::fs::write(
        state.join("leases.json"),
        format!(
            r#"{{"leases":[{{"mac":"{mac}","ip":"{client}","state":"bound","expires":{}}}]}}"#,
            u32::MAX
        ),
    )
    .unwrap();
    fx.write_config(
        &fx.loopback()
            .subnet(&format!("10.79.{net}"))
            .interfaces(&link.server_if)
            .http("0.0.0.0:8080")
            .port("nfs", 2049)
            .port("nbd", 10809)
            .port("portmap", 111)
            .section("limits:\n  root_lost_after: 6s\n"),
    );
    let daemon = crate::common::netns::Daemon::start(link, &fx, 0);
    link.in_client(&[
        "ip",
        "addr",
        "add",
        &format!("10.79.{net}.100/24"),
        "dev",
        &link.client_if,
    ]);
    (fx, daemon)
}

/// A client program, killed when the test ends.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The newest boot of `mac` once its `gone` is set (polled from the client's side).
fn gone_boot(
    link: &Link,
    net: u8,
    mac: &str,
    daemon: &crate::common::netns::Daemon,
) -> serde_json::Value {
    let api = format!("http://10.79.{net}.1:8080/api/v1/boots?mac={mac}");
    let mut last = String::new();
    for _ in 0..60 {
        let (_, body, _) = run(
            &mut Link::command(&link.server_ns, "curl", &["-sS", &api]),
            10,
        );
        let boots: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        if let Some(b) = boots.as_array().and_then(|a| a.last())
            && !b["gone"].is_null()
        {
            return b.clone();
        }
        last = body;
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("{mac} never seen gone: {last}\n{}", daemon.log_text());
}

/// A client cut off mid-boot, holding its root: libnfs's `nfs-cat` reads a large file of the
/// image into a pipe nobody drains, so it stalls with the connection open; then its link goes
/// down and stays down (a machine powered off sends nothing). bootpool's keepalives and sent
/// data go unanswered, and after `limits.root_lost_after` the boot is gone, `nfs_lost`.
#[test]
fn a_client_cut_off_holding_its_nfs_root_is_seen_lost() {
    let link = Link::new("10.79.2.1/24");
    let mac = "52:54:00:77:00:02";
    let (fx, daemon) = lost_after_daemon(&link, 2, mac, "nfs-room");
    let big = fx.path().join("images/demo/rootfs/usr/lib/big.so");
    std::fs::write(&big, vec![7u8; 64 << 20]).unwrap();
    let cat = Link::command(
        &link.client_ns,
        "nfs-cat",
        &["nfs://10.79.2.1/demo/usr/lib/big.so?version=3"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut cat = Kill(cat);
    // Some of the file arrives; the rest waits for a reader that never comes.
    use std::io::Read;
    let mut first = [0u8; 4096];
    cat.0
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    assert_eq!(first, [7u8; 4096]);
    std::thread::sleep(Duration::from_millis(500));
    link.in_client(&["ip", "link", "set", &link.client_if, "down"]);
    let boot = gone_boot(&link, 2, mac, &daemon);
    assert_eq!(boot["gone"], "nfs_lost", "{boot}");
    // Not up yet when it went: timed out at once, where it stopped.
    assert_eq!(boot["result"], "timed_out", "{boot}");
}

/// The same over NBD, with qemu's NBD client (`qemu-io`) holding the export open after a read.
#[test]
fn a_client_cut_off_holding_its_nbd_root_is_seen_lost() {
    let link = Link::new("10.79.3.1/24");
    let mac = "52:54:00:77:00:13";
    let (fx, daemon) = lost_after_daemon(&link, 3, mac, "nbd-room");
    let mut io = Link::command(
        &link.client_ns,
        "qemu-io",
        &["-f", "raw", "-r", "nbd://10.79.3.1:10809/demo"],
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(std::fs::File::create(fx.path().join("qemu-io.err")).unwrap())
    .spawn()
    .unwrap();
    use std::io::{BufRead, Write};
    let mut stdin = io.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(io.stdout.take().unwrap());
    let _io = Kill(io);
    stdin.write_all(b"read 0 64k\n").unwrap();
    stdin.flush().unwrap();
    let mut said = String::new();
    while !said.contains("read 65536/65536") {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "qemu-io: {said}{}\n{}",
            std::fs::read_to_string(fx.path().join("qemu-io.err")).unwrap_or_default(),
            daemon.log_text()
        );
        said += &line;
    }
    link.in_client(&["ip", "link", "set", &link.client_if, "down"]);
    let boot = gone_boot(&link, 3, mac, &daemon);
    assert_eq!(boot["gone"], "nbd_lost", "{boot}");
    assert_eq!(boot["result"], "timed_out", "{boot}");
}

/// `bootpool report` for people: wave starts as local time (TZ), each machine's name beside
/// its MAC, the listed machines that never asked counted and named, and `--since`/`--last`
/// keeping the waves that started since; CSV keeps its columns for programs.
#[tokio::test]
async fn report_for_people_names_machines_counts_no_shows_and_starts_where_asked() {
    let fx = with_journal(journal());
    let named = "- { mac: \"52:54:00:77:00:01\", name: pc01 }\n\
                 - { mac: \"52:54:00:77:00:02\", name: pc02 }\n\
                 - { mac: \"52:54:00:77:00:03\", name: pc03 }";
    fx.write_config(&keep_forever(&fx).clients("nfs-room", named));
    let daemon = fx.start().await;
    daemon.stop().await;
    let report = |tz: &str, args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
        c.env("TZ", tz)
            .args(["report", "--config"])
            .arg(fx.config_path())
            .args(args);
        run(&mut c, 20)
    };
    // Every wave: the nfs-room one started at 1000 s, 00:16:40 UTC, 01:16:40 in Paris then.
    let (ok, text, err) = report("UTC", &[]);
    assert!(ok, "{err}");
    assert!(text.contains("1970-01-01 00:16:40"), "{text}");
    assert!(
        text.contains("pool nfs-room: 2 of 3 machines booted in the waves recorded, 1 never asked"),
        "{text}"
    );
    let (_, paris, _) = report("Europe/Paris", &[]);
    assert!(paris.contains("1970-01-01 01:16:40"), "{paris}");
    // One wave: names beside MACs, the machine that never asked counted and named.
    let (ok, text, err) = report("UTC", &["--pool", "nfs-room"]);
    assert!(ok, "{err}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("52:54:00:77:00:01  pc01  10.77.0.11  booted")),
        "{text}"
    );
    assert!(
        text.contains("2 of 3 booted (0 by inference), 1 never asked, 0 failed")
            && text.contains("never asked: pc03 (52:54:00:77:00:03)")
            && text.contains("started 1970-01-01 00:16:40 (local time)"),
        "{text}"
    );
    let (_, csv, _) = report("UTC", &["--pool", "nfs-room", "--format", "csv"]);
    assert!(csv.starts_with("mac,ip,result,"), "{csv}");
    // Since 00:30 (UTC): the nbd-room waves alone; nfs-room has none since.
    let (ok, text, err) = report("UTC", &["--since", "1970-01-01T00:30"]);
    assert!(ok, "{err}");
    assert!(
        !text.contains("nfs-room") && text.contains("nbd-room"),
        "{text}"
    );
    assert!(text.contains("booted since 1970-01-01 00:30:00"), "{text}");
    let (ok, _, err) = report(
        "UTC",
        &["--pool", "nfs-room", "--since", "1970-01-01T00:30"],
    );
    assert!(!ok);
    assert!(
        err.contains("no waves of pool `nfs-room` since 1970-01-01 00:30:00"),
        "{err}"
    );
    // The last two hours hold none of 1970's waves; a bad date is named.
    let (ok, text, _) = report("UTC", &["--last", "2h"]);
    assert!(ok && text.starts_with("no waves since "), "{text}");
    let (ok, _, err) = report("UTC", &["--since", "yesterday"]);
    assert!(
        !ok && err.contains("--since: `yesterday` is not a local date"),
        "{err}"
    );
}

/// A TCP port on 127.0.0.1 that nothing holds now (the kernel's pick, let go at once).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

//! Boot records as programs see them: the JSON API, the live stream, Prometheus metrics and
//! `bootpool report`, over a journal of real events; and server egress checked against the
//! kernel's own counters on a real veth link.

mod common;

use common::netns::Link;
use common::{Fixture, run, run_async};
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

#[tokio::test]
async fn api_stream_metrics_and_report_show_the_recorded_waves() {
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.path().join("var")).unwrap();
    std::fs::write(fx.path().join("var/events.jsonl"), journal()).unwrap();
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

    // The live stream: a client reporting booted shows up as a `boot` event.
    let sse = Command::new("curl")
        .args([
            "-sS",
            "-N",
            "--max-time",
            "10",
            &format!("{base}/api/v1/stream"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
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
        let out = sse.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
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
            .starts_with("mac,ip,result,boot_s,dhcp_s"),
        "{csv}"
    );
    assert!(
        csv.contains("52:54:00:77:00:02,10.77.0.12,booted,60.0,3.0"),
        "{csv}"
    );
    let (ok, json, _) = report(&["--wave", &nbd_id.to_string(), "--format", "json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["summary"]["median_s"], 30.0);
    let (ok, _, err) = report(&["--wave", "999"]);
    assert!(!ok && err.contains("no wave 999"), "{err}");
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
    let link = Link::new("10.79.0.1/24");
    let fx = Fixture::new();
    let text = fx
        .config_text()
        .replace(
            "  address: 127.0.0.1\n",
            &format!("  address: 10.79.0.1\n  interfaces: [{}]\n", link.server_if),
        )
        .replace("http: 127.0.0.1:0", "http: 0.0.0.0:8080")
        .replace("subnet: 127.0.0.0/8", "subnet: 10.79.0.0/24")
        .replace(
            "range: 127.0.0.100-127.0.0.199",
            "range: 10.79.0.100-10.79.0.199",
        );
    fx.write_config(&text);
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
        ];
        a.extend_from_slice(args);
        run(&mut Link::command(&link.client_ns, "curl", &a), 60)
    };
    // Traffic counts from the sampler's first reading on: wait until it has one.
    for _ in 0..100 {
        let (ok, body, _) = client(&["http://10.79.0.1:8080/api/v1/egress"]);
        if ok && body.contains("\"points\":[{") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Traffic: the 3 MiB kernel five times.
    for _ in 0..5 {
        let (ok, _, err) = client(&["-o", "/dev/null", "http://10.79.0.1:8080/boot/demo/vmlinuz"]);
        assert!(
            ok,
            "{err}\n{}",
            std::fs::read_to_string(fx.path().join("serve.log")).unwrap_or_default()
        );
    }
    // Quiet for more than a sampling interval, then compare with the kernel.
    std::thread::sleep(Duration::from_millis(2500));
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
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.path().join("var")).unwrap();
    // 127.0.0.1 is leased to a client of nbd-room, so what it fetches is tied to its boot.
    std::fs::write(fx.path().join("var/events.jsonl"), journal()).unwrap();
    let text = fx
        .config_text()
        .replace("http: 127.0.0.1:0", "http: 127.0.0.1:18081");
    fx.write_config(&text);
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
        let (ok, _, err) = get("http://127.0.0.1:18081/boot/demo/initrd.img");
        assert!(ok, "{err}");
    }
    // Past the one second the journal may lag, then the hardest stop there is.
    std::thread::sleep(Duration::from_millis(1500));
    daemon.0.kill().unwrap();
    daemon.0.wait().unwrap();
    drop(daemon);
    let _daemon = start();
    let (ok, body, err) = get("http://127.0.0.1:18081/api/v1/boots?mac=52:54:00:77:00:12");
    assert!(ok, "{err}");
    let boots: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(boots[0]["bytes"]["http"], 4 * (2u64 << 20), "{body}");
    let waves = get("http://127.0.0.1:18081/api/v1/waves").1;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&waves)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        3,
        "{waves}"
    );
}

//! What `/metrics` serves, pinned: every family's HELP and TYPE line and every series' name and
//! labels (values left out) of a daemon with a boot on record, a link (lo) sampled and
//! paced and a room behind an uplink, against `tests/fixtures/metrics.txt`. Dashboards depend on these names; a change to
//! them is a change to that file, made on purpose.

use crate::common::{Fixture, run_async};
use std::process::Command;
use std::time::Duration;

/// One boot of `52:54:00:77:00:01` in `nfs-room` that got its ACK and its script a few
/// seconds ago: the boots gauge and the phase histogram then have series.
fn journal() -> String {
    let now = bootpool::record::event::now_micros();
    let mac = r#"{"mac":"52:54:00:77:00:01"}"#;
    let ip = r#"{"ip":"127.0.0.1"}"#;
    let events = [
        (9, mac, r#""event":"dhcp_discover","pxe":true,"ipxe":true"#),
        (
            8,
            mac,
            r#""event":"dhcp_ack","ip":"127.0.0.1","pxe":true,"ipxe":true,"pool":"nfs-room""#,
        ),
        (
            7,
            ip,
            r#""event":"file","proto":"http","kind":"script","path":"s","bytes":300,"outcome":"complete""#,
        ),
    ];
    events
        .iter()
        .map(|(ago_s, who, body)| {
            let at = now - ago_s * 1_000_000;
            format!("{{\"at\":{at},\"who\":{who},{body}}}\n")
        })
        .collect()
}

/// `text` with each series' value cut off: HELP and TYPE lines whole, series by name and labels.
fn shape(text: &str) -> String {
    text.lines()
        .map(|l| match l.starts_with('#') {
            true => l,
            false => l.rsplit_once(' ').map_or(l, |(series, _)| series),
        })
        .map(|l| format!("{}\n", without_digest(l)))
        .collect()
}

/// The config's digest differs with every config (the fixture's folder is in it): its label
/// is pinned without its value.
fn without_digest(series: &str) -> String {
    match series.split_once("{digest=\"") {
        Some((name, rest)) => {
            let after = rest.split_once('"').map_or("", |(_, after)| after);
            format!("{name}{{digest{after}")
        }
        None => series.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_names_help_types_and_labels_stay_as_pinned() {
    let fx = Fixture::new();
    fx.write_config(
        &fx.loopback()
            .interfaces("lo")
            .server("link_speeds: { lo: 1000 }")
            .more_subnets(
                "- { subnet: 10.99.0.0/24, range: 10.99.0.100-10.99.0.199, uplink: 1gbit }\n",
            ),
    );
    let var = fx.path().join("var");
    std::fs::create_dir_all(&var).unwrap();
    std::fs::write(var.join("events.jsonl"), journal()).unwrap();
    let daemon = fx.start().await;
    let url = format!("http://{}/metrics", daemon.bound.http);
    let mut text = String::new();
    // The egress sampler reads the links once a second.
    for _ in 0..100 {
        let mut c = Command::new("curl");
        c.args(["-sS", "--fail", "--max-time", "20", &url]);
        let (ok, out, err) = run_async(c, 30).await;
        assert!(ok, "{err}");
        text = out;
        if text.contains("bootpool_link_speed_bytes{") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    daemon.stop().await;
    let pinned = include_str!("../fixtures/metrics.txt");
    let served = shape(&text);
    if served != pinned {
        let path = std::env::temp_dir().join("bootpool-metrics.txt");
        std::fs::write(&path, &served).unwrap();
        panic!(
            "/metrics changed shape (served shape written to {}):\n{served}",
            path.display()
        );
    }
}

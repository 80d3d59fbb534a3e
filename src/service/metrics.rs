//! Prometheus `/metrics` in the text exposition format, written from the records and the
//! egress sampler. Labels per client would be fine for rooms but are left out; never per file.
//! Label values that come from outside the code (pool names, which the records may hold from
//! older configs, and link names) are escaped as the text format says: `\\`, `\"`, `\n`.

use super::http::Web;
use super::pacing::PacingStats;
use crate::record::Service;
use crate::record::egress::LinkCounters;
use crate::record::timeline::PHASES;
use crate::record::timeline::Timelines;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use std::borrow::Cow;
use std::fmt::Write;
use std::sync::atomic::Ordering;

/// Upper bounds (seconds) of the phase duration histogram buckets.
const BUCKETS: [f64; 12] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0,
];

pub async fn render(State(web): State<Web>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text(&web),
    )
}

/// A link counter series: its name, its help text, and how to read it from a link.
type LinkSeries = (&'static str, &'static str, fn(&LinkCounters) -> u64);

/// A label value as the text format wants it: backslash, double quote and line feed escaped.
fn label(value: &str) -> Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 2);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

pub fn text(web: &Web) -> String {
    let mut out = String::new();
    let c = &web.records.counters;
    head(
        &mut out,
        "bootpool_payload_bytes_total",
        "counter",
        "Payload bytes sent to clients, by protocol.",
    );
    for (proto, n) in c.proto_totals() {
        let _ = writeln!(
            out,
            "bootpool_payload_bytes_total{{proto=\"{}\"}} {n}",
            crate::record::view::proto_name(proto)
        );
    }
    head(
        &mut out,
        "bootpool_events_recorded_total",
        "counter",
        "Boot events recorded.",
    );
    let _ = writeln!(
        out,
        "bootpool_events_recorded_total {}",
        c.recorded.load(Ordering::Relaxed)
    );
    head(
        &mut out,
        "bootpool_events_dropped_total",
        "counter",
        "Boot events dropped because the recorder was full.",
    );
    let _ = writeln!(
        out,
        "bootpool_events_dropped_total {}",
        c.dropped.load(Ordering::Relaxed)
    );
    head(
        &mut out,
        "bootpool_events_untied_total",
        "counter",
        "Boot events from an IP no DHCP lease explains.",
    );
    let _ = writeln!(
        out,
        "bootpool_events_untied_total {}",
        c.untied.load(Ordering::Relaxed)
    );

    head(
        &mut out,
        "bootpool_events_unsaved_total",
        "counter",
        "Boot events the store refused for longer than they could be held for a retry.",
    );
    let _ = writeln!(
        out,
        "bootpool_events_unsaved_total {}",
        c.unsaved.load(Ordering::Relaxed)
    );
    type Pick = fn(&crate::record::ServiceCounters) -> &std::sync::atomic::AtomicU64;
    let families: [(&str, &str, Pick, &[Service]); 3] = [
        (
            "bootpool_requests_total",
            "Requests handled: DHCP messages, TFTP requests, HTTP requests, RPC calls (NFS and MOUNT, portmap), NBD options and commands.",
            |s| &s.requests,
            &Service::ALL,
        ),
        (
            "bootpool_malformed_total",
            "Packets, calls or messages that could not be decoded and were dropped (HTTP's are answered by the HTTP library and not counted).",
            |s| &s.malformed,
            &[
                Service::Dhcp,
                Service::Tftp,
                Service::Nfs,
                Service::Nbd,
                Service::Portmap,
            ],
        ),
        (
            "bootpool_refused_total",
            "Requests turned down with a protocol error: no such file or export, not in a pool, over a limit, DHCP NAK, HTTP 4xx.",
            |s| &s.refused,
            &Service::ALL,
        ),
    ];
    for (name, help, pick, services) in families {
        head(&mut out, name, "counter", help);
        for s in services {
            let _ = writeln!(
                out,
                "{name}{{service=\"{}\"}} {}",
                s.name(),
                pick(c.service(*s)).load(Ordering::Relaxed)
            );
        }
    }

    web.records.read(|t| boots(&mut out, t));

    let links = web.egress.links();
    let counters: [LinkSeries; 2] = [
        (
            "bootpool_link_transmit_bytes_total",
            "Bytes sent on each served link and member, as the kernel counts them.",
            |l| l.tx_bytes,
        ),
        (
            "bootpool_link_receive_bytes_total",
            "Bytes received on each served link and member.",
            |l| l.rx_bytes,
        ),
    ];
    for (name, help, value) in counters {
        head(&mut out, name, "counter", help);
        for l in &links {
            let master = l.master.as_deref().unwrap_or("");
            let _ = writeln!(
                out,
                "{name}{{link=\"{}\",master=\"{}\"}} {}",
                label(&l.name),
                label(master),
                value(l)
            );
        }
    }
    head(
        &mut out,
        "bootpool_link_speed_bytes",
        "gauge",
        "Link capacity in bytes per second: the kernel's, else server.link_speeds'.",
    );
    for l in &links {
        if let Some(mbps) = l.speed_mbps {
            let _ = writeln!(
                out,
                "bootpool_link_speed_bytes{{link=\"{}\"}} {}",
                label(&l.name),
                u64::from(mbps) * 125_000
            );
        }
    }
    pacing(&mut out, &web.links.pacing());
    out
}

/// The pacer's figures per paced link (`service::pacing`); nothing when no link is paced.
fn pacing(out: &mut String, links: &[PacingStats]) {
    if links.is_empty() {
        return;
    }
    type Series = (
        &'static str,
        &'static str,
        &'static str,
        fn(&PacingStats) -> u64,
    );
    let series: [Series; 9] = [
        (
            "bootpool_pacing_budget_bytes",
            "gauge",
            "What the paced connections on a link may send together, bytes per second.",
            |p| p.budget_bytes,
        ),
        (
            "bootpool_pacing_connections",
            "gauge",
            "TCP connections registered with the pacer.",
            |p| p.connections,
        ),
        (
            "bootpool_pacing_clients",
            "gauge",
            "Clients that sent or had bytes waiting in the last round.",
            |p| p.clients,
        ),
        (
            "bootpool_pacing_wanting",
            "gauge",
            "Clients that wanted more than they got in the last round.",
            |p| p.wanting,
        ),
        (
            "bootpool_pacing_share_bytes",
            "gauge",
            "One client's share in the last round, bytes per second (0: not paced).",
            |p| p.share_bytes,
        ),
        (
            "bootpool_pacing_carried_bytes",
            "gauge",
            "What the registered connections sent together in the last round, bytes per second.",
            |p| p.carried_bytes,
        ),
        (
            "bootpool_pacing_rounds_total",
            "counter",
            "Rounds in which the link was paced (two or more clients active).",
            |p| p.rounds,
        ),
        (
            "bootpool_pacing_caps_set_total",
            "counter",
            "Pacing rates set on connections.",
            |p| p.caps_set,
        ),
        (
            "bootpool_pacing_moved_away_total",
            "counter",
            "Clients whose replies the pacer moved from this link to one with room.",
            |p| p.moved_away,
        ),
    ];
    for (name, kind, help, value) in series {
        head(out, name, kind, help);
        for p in links {
            let _ = writeln!(out, "{name}{{link=\"{}\"}} {}", label(&p.device), value(p));
        }
    }
}

/// Boots by pool and result, and the phase histogram.
fn boots(out: &mut String, t: &Timelines) {
    head(
        out,
        "bootpool_boots",
        "gauge",
        "Boots recorded, by pool and result (running, booted, failed, timed_out as in the API).",
    );
    let mut by: std::collections::BTreeMap<(String, &str), u64> = Default::default();
    let mut phases: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    let now = crate::record::event::now_micros();
    for b in t.boots() {
        let result = crate::record::view::result_at(b, now);
        *by.entry((b.pool.clone().unwrap_or_default(), result))
            .or_default() += 1;
        for p in b.phases() {
            phases
                .entry(p.name)
                .or_default()
                .push((p.end - p.start) as f64 / 1e6);
        }
    }
    for ((pool, result), n) in by {
        let _ = writeln!(
            out,
            "bootpool_boots{{pool=\"{}\",result=\"{result}\"}} {n}",
            label(&pool)
        );
    }
    head(
        out,
        "bootpool_phase_seconds",
        "histogram",
        "Duration of each boot phase.",
    );
    for name in PHASES {
        let Some(v) = phases.get(name) else { continue };
        for le in BUCKETS {
            let n = v.iter().filter(|d| **d <= le).count();
            let _ = writeln!(
                out,
                "bootpool_phase_seconds_bucket{{phase=\"{name}\",le=\"{le}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "bootpool_phase_seconds_bucket{{phase=\"{name}\",le=\"+Inf\"}} {}",
            v.len()
        );
        let _ = writeln!(
            out,
            "bootpool_phase_seconds_sum{{phase=\"{name}\"}} {}",
            v.iter().sum::<f64>()
        );
        let _ = writeln!(
            out,
            "bootpool_phase_seconds_count{{phase=\"{name}\"}} {}",
            v.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::event::{Event, Kind, Who, now_micros};

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("room-101"), "room-101");
        assert_eq!(label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    }

    /// A pool name from the records (an older config allowed any) stays one label value.
    #[test]
    fn a_pool_name_with_quotes_and_newlines_stays_inside_its_label() {
        let mut t = Timelines::default();
        let mac = Who::Mac("52:54:00:77:00:01".parse().unwrap());
        let at = now_micros();
        t.apply(&Event {
            at,
            who: mac,
            kind: Kind::DhcpDiscover {
                answered: true,
                pool: None,
                pxe: true,
                ipxe: false,
                arch: None,
            },
        });
        t.apply(&Event {
            at: at + 1,
            who: mac,
            kind: Kind::DhcpAck {
                ip: [10, 77, 0, 11].into(),
                pxe: true,
                ipxe: false,
                pool: "r\"oom\\1\nbootpool_fake 1".into(),
                link: None,
            },
        });
        let mut out = String::new();
        boots(&mut out, &t);
        assert!(
            out.contains(
                "bootpool_boots{pool=\"r\\\"oom\\\\1\\nbootpool_fake 1\",result=\"running\"} 1\n"
            ),
            "{out}"
        );
        assert!(
            !out.lines().any(|l| l.starts_with("bootpool_fake")),
            "{out}"
        );
    }
}

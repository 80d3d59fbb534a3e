//! `/metrics` in Prometheus' text exposition format, from one table, `FAMILIES`: each family's
//! name, type, help text, label names and how its series are read (the daemon's counters, or
//! the figures the HTTP handler gathers: boots, phases, links). Labels per client would be
//! fine for rooms but are left out; never per file. Label values that come from outside the
//! code (pool names, which the records may hold from older configs, and link names) are
//! escaped as the text format says: `\\`, `\"`, `\n`. The names, labels and help texts are
//! what dashboards read: `tests/it/metrics.rs` pins them.

use super::{Count, Metrics, PacedLink, PacedRoom};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::{Display, Write};

/// The response's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upper bounds (seconds) of the phase duration histogram buckets.
const BUCKETS: [f64; 12] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0,
];

/// A served link as the egress sampler last read it.
pub struct Link<'a> {
    pub name: &'a str,
    /// The bond or bridge it is a member of ("" for none).
    pub master: &'a str,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    /// Its capacity, bytes per second, if known.
    pub speed_bytes: Option<u64>,
}

/// What the families are read from: the counters, and the figures of the records and the
/// egress sampler at the time of the request.
pub struct Sources<'a> {
    pub metrics: &'a Metrics,
    /// Boots recorded, by pool and result.
    pub boots: &'a BTreeMap<(String, &'static str), u64>,
    /// Each phase that some boot went through, in the phases' order, with its durations in
    /// seconds.
    pub phases: &'a [(&'static str, Vec<f64>)],
    pub links: &'a [Link<'a>],
    /// The served config's generation and digest (`config::Live`).
    pub config: (u64, &'a str),
}

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One series of a family of fixed series: its label values and its counter.
type Fixed = (&'static [&'static str], fn(&Metrics) -> &Count);

/// How a family's series are read.
enum Read {
    /// A series per row.
    Fixed(&'static [Fixed]),
    /// A series per link, paced link, boot count or phase: `Series::put` for each.
    Each(fn(&Sources, &mut Series)),
}

struct Family {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    labels: &'static [&'static str],
    read: Read,
    /// Left out, help and type lines too, when it has no series (the pacer's figures of a
    /// server that paces nothing).
    only_with_series: bool,
}

/// The series of `bootpool_requests_total` and `bootpool_refused_total`: every service.
macro_rules! every_service {
    ($field:ident) => {
        &[
            (&["dhcp"], |m| &m.dhcp().$field),
            (&["tftp"], |m| &m.tftp().$field),
            (&["http"], |m| &m.http().$field),
            (&["nfs"], |m| &m.nfs().$field),
            (&["nbd"], |m| &m.nbd().$field),
            (&["portmap"], |m| &m.portmap().$field),
            (&["console"], |m| &m.console().$field),
        ]
    };
}

/// The series of a slot family: each service with slots, for its clients and for strangers.
macro_rules! every_slot_pool {
    ($field:ident) => {
        &[
            (&["tftp", "client"], |m| &m.tftp().slots.clients.$field),
            (&["tftp", "stranger"], |m| &m.tftp().slots.strangers.$field),
            (&["http", "client"], |m| &m.http().slots.clients.$field),
            (&["http", "stranger"], |m| &m.http().slots.strangers.$field),
            (&["nfs", "client"], |m| &m.nfs().slots.clients.$field),
            (&["nfs", "stranger"], |m| &m.nfs().slots.strangers.$field),
            (&["nbd", "client"], |m| &m.nbd().slots.clients.$field),
            (&["nbd", "stranger"], |m| &m.nbd().slots.strangers.$field),
        ]
    };
}

/// A family of slot figures, by service and standing.
macro_rules! slots {
    ($name:literal, $kind:ident, $help:literal, $field:ident) => {
        Family {
            name: $name,
            kind: Kind::$kind,
            help: $help,
            labels: &["service", "standing"],
            read: Read::Fixed(every_slot_pool!($field)),
            only_with_series: false,
        }
    };
}

/// A family with no labels, its one series read from the recorder's counts.
macro_rules! recorded {
    ($name:literal, $help:literal, $field:ident) => {
        Family {
            name: $name,
            kind: Kind::Counter,
            help: $help,
            labels: &[],
            read: Read::Fixed(&[(&[], |m| &m.records().$field)]),
            only_with_series: false,
        }
    };
}

/// A gauge or counter of the pacer per paced link.
macro_rules! paced {
    ($name:literal, $kind:ident, $help:literal, $value:expr) => {
        Family {
            name: $name,
            kind: Kind::$kind,
            help: $help,
            labels: &["link"],
            read: Read::Each(|s, out| {
                let value: fn(&PacedLink) -> u64 = $value;
                for p in s.metrics.paced() {
                    out.put(&[p.device.as_str()], value(&p));
                }
            }),
            only_with_series: true,
        }
    };
}

/// A gauge or counter of the pacer per room behind an uplink.
macro_rules! room {
    ($name:literal, $kind:ident, $help:literal, $value:expr) => {
        Family {
            name: $name,
            kind: Kind::$kind,
            help: $help,
            labels: &["room"],
            read: Read::Each(|s, out| {
                let value: fn(&PacedRoom) -> u64 = $value;
                for r in s.metrics.rooms() {
                    out.put(&[r.room.as_str()], value(&r));
                }
            }),
            only_with_series: true,
        }
    };
}

/// Every family /metrics serves, in the order served.
const FAMILIES: &[Family] = &[
    Family {
        name: "bootpool_payload_bytes_total",
        kind: Kind::Counter,
        help: "Payload bytes sent to clients, by protocol.",
        labels: &["proto"],
        read: Read::Fixed(&[
            (&["dhcp"], |m| &m.records().payload.dhcp),
            (&["tftp"], |m| &m.records().payload.tftp),
            (&["http"], |m| &m.records().payload.http),
            (&["nfs"], |m| &m.records().payload.nfs),
            (&["nbd"], |m| &m.records().payload.nbd),
        ]),
        only_with_series: false,
    },
    recorded!(
        "bootpool_events_recorded_total",
        "Boot events recorded.",
        recorded
    ),
    recorded!(
        "bootpool_events_dropped_total",
        "Boot events dropped because the recorder was full.",
        dropped
    ),
    recorded!(
        "bootpool_events_untied_total",
        "Boot events from an IP no DHCP lease explains.",
        untied
    ),
    recorded!(
        "bootpool_events_unsaved_total",
        "Boot events the store refused for longer than they could be held for a retry.",
        unsaved
    ),
    Family {
        name: "bootpool_console_lines_dropped_total",
        kind: Kind::Counter,
        help: "Console lines of lease holders dropped: over their client's rate, or the recorder's console queue full.",
        labels: &["why"],
        read: Read::Fixed(&[
            (&["rate"], |m| &m.console().limited),
            (&["queue"], |m| &m.console().dropped),
        ]),
        only_with_series: false,
    },
    Family {
        name: "bootpool_requests_total",
        kind: Kind::Counter,
        help: "Requests handled: DHCP messages, TFTP requests, HTTP requests, RPC calls (NFS and MOUNT, portmap), NBD options and commands.",
        labels: &["service"],
        read: Read::Fixed(every_service!(requests)),
        only_with_series: false,
    },
    Family {
        name: "bootpool_malformed_total",
        kind: Kind::Counter,
        help: "Packets, calls or messages that could not be decoded and were dropped (HTTP's are answered by the HTTP library and not counted).",
        labels: &["service"],
        read: Read::Fixed(&[
            (&["dhcp"], |m| &m.dhcp().malformed),
            (&["tftp"], |m| &m.tftp().malformed),
            (&["nfs"], |m| &m.nfs().malformed),
            (&["nbd"], |m| &m.nbd().malformed),
            (&["portmap"], |m| &m.portmap().malformed),
        ]),
        only_with_series: false,
    },
    Family {
        name: "bootpool_refused_total",
        kind: Kind::Counter,
        help: "Requests turned down with a protocol error: no such file or export, not in a pool, over a limit, DHCP NAK, HTTP 4xx.",
        labels: &["service"],
        read: Read::Fixed(every_service!(refused)),
        only_with_series: false,
    },
    Family {
        name: "bootpool_dhcp_unplaced_total",
        kind: Kind::Counter,
        help: "DHCPv4 requests dropped unanswered for want of a subnet: carried by a relay dhcp.relays does not list, or from a segment in no configured subnet (also counted as refused).",
        labels: &["why"],
        read: Read::Fixed(&[
            (&["unlisted_relay"], |m| &m.dhcp().unlisted_relays),
            (&["no_subnet"], |m| &m.dhcp().no_subnet),
        ]),
        only_with_series: false,
    },
    Family {
        name: "bootpool_dhcp_answers_total",
        kind: Kind::Counter,
        help: "DHCPv4 answers sent, by kind: offers (proxy-mode boot offers too), acks (proxy-mode port 4011 acks too), naks.",
        labels: &["kind"],
        read: Read::Fixed(&[
            (&["offer"], |m| &m.dhcp().offers),
            (&["ack"], |m| &m.dhcp().acks),
            (&["nak"], |m| &m.dhcp().naks),
        ]),
        only_with_series: false,
    },
    Family {
        name: "bootpool_dhcp_others_total",
        kind: Kind::Counter,
        help: "DHCP messages left unanswered because another live member of the site answers their client (its RFC 3074 bucket is the other's).",
        labels: &[],
        read: Read::Fixed(&[(&[], |m| &m.dhcp().others)]),
        only_with_series: false,
    },
    Family {
        name: "bootpool_dhcp_lease_conflicts_total",
        kind: Kind::Counter,
        help: "Leases the site's table (site_leases in PostgreSQL) refused because another client's row holds the address; each is withdrawn at its client's next exchange.",
        labels: &[],
        read: Read::Fixed(&[(&[], |m| &m.dhcp().lease_conflicts)]),
        only_with_series: false,
    },
    Family {
        name: "bootpool_dhcp_strangers_total",
        kind: Kind::Counter,
        help: "DHCP and DHCPv6 messages from MACs no pool lists (not answered), and proxy-mode requests on port 4011 from MACs not seen on port 67.",
        labels: &[],
        read: Read::Fixed(&[(&[], |m| &m.dhcp().strangers)]),
        only_with_series: false,
    },
    Family {
        name: "bootpool_unknown_clients",
        kind: Kind::Gauge,
        help: "Clients no pool lists that asked for a boot, listed now (GET /api/v1/unknown).",
        labels: &[],
        read: Read::Fixed(&[(&[], |m| &m.dhcp().unknown)]),
        only_with_series: false,
    },
    Family {
        name: "bootpool_unknown_forgotten_total",
        kind: Kind::Counter,
        help: "Unknown clients left out of that list: the longest silent when it was full (4096), or new ones past 64 a second.",
        labels: &[],
        read: Read::Fixed(&[(&[], |m| &m.dhcp().unknown_forgotten)]),
        only_with_series: false,
    },
    Family {
        name: "bootpool_chunks_sent_total",
        kind: Kind::Counter,
        help: "Chunks of NBD roots sent to clients' agents over HTTP (docs/swarm.md), whole or a range of one.",
        labels: &[],
        read: Read::Fixed(&[(&[], |m| &m.http().chunks_sent)]),
        only_with_series: false,
    },
    Family {
        name: "bootpool_tracker_answers_total",
        kind: Kind::Counter,
        help: "The tracker's answers for chunks agents miss, by source named: peers that hold it, the peer receiving it, or the server (the asker then receives it into the room).",
        labels: &["to"],
        read: Read::Fixed(&[
            (&["holders"], |m| &m.http().tracked_to_holders),
            (&["receiver"], |m| &m.http().tracked_to_receiver),
            (&["server"], |m| &m.http().tracked_to_server),
        ]),
        only_with_series: false,
    },
    slots!(
        "bootpool_slots_held",
        Gauge,
        "Connections (TFTP: transfers) held now, by service, of its clients or of strangers (addresses that hold no lease of a pool the service is for).",
        held
    ),
    slots!(
        "bootpool_slots_limit",
        Gauge,
        "Connections (TFTP: transfers) a service holds at once for its clients, or for all strangers together.",
        cap
    ),
    slots!(
        "bootpool_slots_per_address_limit",
        Gauge,
        "Connections (TFTP: transfers) a service holds at once for one address.",
        cap_per_address
    ),
    slots!(
        "bootpool_slots_full_total",
        Counter,
        "Connections (TFTP: requests) refused because every slot of the pool was held.",
        full
    ),
    slots!(
        "bootpool_slots_per_address_full_total",
        Counter,
        "Connections (TFTP: requests) refused because the address held its share.",
        full_per_address
    ),
    Family {
        name: "bootpool_config_reloads_total",
        kind: Kind::Counter,
        help: "Reloads of the config (SIGHUP, bootpool reload): applied, or refused whole with the running config kept.",
        labels: &["result"],
        read: Read::Fixed(&[
            (&["applied"], |m| &m.reloads().applied),
            (&["refused"], |m| &m.reloads().refused),
        ]),
        only_with_series: false,
    },
    Family {
        name: "bootpool_config_generation",
        kind: Kind::Gauge,
        help: "The served config's generation (1 at start, one more per reload applied), by its digest.",
        labels: &["digest"],
        read: Read::Each(|s, out| out.put(&[s.config.1], s.config.0)),
        only_with_series: false,
    },
    Family {
        name: "bootpool_boots",
        kind: Kind::Gauge,
        help: "Boots recorded, by pool and result (running, booted, failed, timed_out as in the API).",
        labels: &["pool", "result"],
        read: Read::Each(|s, out| {
            for ((pool, result), n) in s.boots {
                out.put(&[pool.as_str(), *result], n);
            }
        }),
        only_with_series: false,
    },
    Family {
        name: "bootpool_phase_seconds",
        kind: Kind::Histogram,
        help: "Duration of each boot phase.",
        labels: &["phase", "le"],
        read: Read::Each(|s, out| {
            for (phase, v) in s.phases {
                for le in BUCKETS {
                    let n = v.iter().filter(|d| **d <= le).count();
                    out.put_as("_bucket", &[*phase, le.to_string().as_str()], n);
                }
                out.put_as("_bucket", &[*phase, "+Inf"], v.len());
                out.put_as("_sum", &[*phase], v.iter().sum::<f64>());
                out.put_as("_count", &[*phase], v.len());
            }
        }),
        only_with_series: false,
    },
    Family {
        name: "bootpool_link_transmit_bytes_total",
        kind: Kind::Counter,
        help: "Bytes sent on each served link and member, as the kernel counts them.",
        labels: &["link", "master"],
        read: Read::Each(|s, out| {
            for l in s.links {
                out.put(&[l.name, l.master], l.tx_bytes);
            }
        }),
        only_with_series: false,
    },
    Family {
        name: "bootpool_link_receive_bytes_total",
        kind: Kind::Counter,
        help: "Bytes received on each served link and member.",
        labels: &["link", "master"],
        read: Read::Each(|s, out| {
            for l in s.links {
                out.put(&[l.name, l.master], l.rx_bytes);
            }
        }),
        only_with_series: false,
    },
    Family {
        name: "bootpool_link_speed_bytes",
        kind: Kind::Gauge,
        help: "Link capacity in bytes per second: the kernel's, else server.link_speeds'.",
        labels: &["link"],
        read: Read::Each(|s, out| {
            for l in s.links {
                if let Some(speed) = l.speed_bytes {
                    out.put(&[l.name], speed);
                }
            }
        }),
        only_with_series: false,
    },
    paced!(
        "bootpool_pacing_budget_bytes",
        Gauge,
        "What the paced connections on a link may send together, bytes per second.",
        |p| p.budget.get()
    ),
    paced!(
        "bootpool_pacing_connections",
        Gauge,
        "TCP connections registered with the pacer.",
        |p| p.connections.get()
    ),
    paced!(
        "bootpool_pacing_clients",
        Gauge,
        "Clients that sent or had bytes waiting in the last round.",
        |p| p.clients.get()
    ),
    paced!(
        "bootpool_pacing_wanting",
        Gauge,
        "Clients that wanted more than they got in the last round.",
        |p| p.wanting.get()
    ),
    paced!(
        "bootpool_pacing_share_bytes",
        Gauge,
        "One client's share in the last round, bytes per second (0: not paced).",
        |p| p.share.get()
    ),
    paced!(
        "bootpool_pacing_carried_bytes",
        Gauge,
        "What the registered connections sent together in the last round, bytes per second.",
        |p| p.carried.get()
    ),
    paced!(
        "bootpool_pacing_rounds_total",
        Counter,
        "Rounds in which the link was paced (two or more clients active).",
        |p| p.rounds.get()
    ),
    paced!(
        "bootpool_pacing_caps_set_total",
        Counter,
        "Pacing rates set on connections.",
        |p| p.caps_set.get()
    ),
    paced!(
        "bootpool_pacing_moved_away_total",
        Counter,
        "Clients whose replies the pacer moved from this link to one with room.",
        |p| p.moved_away.get()
    ),
    room!(
        "bootpool_room_uplink_capacity_bytes",
        Gauge,
        "A room's uplink capacity (dhcp.subnets[].uplink), bytes per second.",
        |r| r.capacity.get()
    ),
    room!(
        "bootpool_room_uplink_budget_bytes",
        Gauge,
        "What the paced connections to a room's clients may send together, bytes per second.",
        |r| r.budget.get()
    ),
    room!(
        "bootpool_room_clients",
        Gauge,
        "A room's clients that sent or had bytes waiting in the last round.",
        |r| r.clients.get()
    ),
    room!(
        "bootpool_room_carried_bytes",
        Gauge,
        "What the paced connections to a room's clients sent together in the last round, bytes per second.",
        |r| r.carried.get()
    ),
    room!(
        "bootpool_room_share_bytes",
        Gauge,
        "One client's share of a room's uplink in the last round, bytes per second (0: the uplink did not bound them).",
        |r| r.share.get()
    ),
    room!(
        "bootpool_room_sent_bytes_total",
        Counter,
        "Bytes sent to a room's clients on paced connections.",
        |r| r.sent.get()
    ),
    room!(
        "bootpool_room_full_rounds_total",
        Counter,
        "Rounds in which a room's uplink bound its clients (they wanted more than it carries).",
        |r| r.full_rounds.get()
    ),
];

/// The series lines of one family.
struct Series<'o> {
    out: &'o mut String,
    name: &'static str,
    labels: &'static [&'static str],
}

impl Series<'_> {
    /// A series `name{label="value",...} value`, its label values in the family's order.
    fn put(&mut self, values: &[&str], value: impl Display) {
        self.put_as("", values, value);
    }

    /// A series of the family named with `suffix` (a histogram's `_bucket`, `_sum`, `_count`);
    /// `values` may name fewer labels than the family has.
    fn put_as(&mut self, suffix: &str, values: &[&str], value: impl Display) {
        let out = &mut *self.out;
        out.push_str(self.name);
        out.push_str(suffix);
        for (i, (label, v)) in self.labels.iter().zip(values).enumerate() {
            out.push(if i == 0 { '{' } else { ',' });
            let _ = write!(out, "{label}=\"{}\"", escape(v));
        }
        if !values.is_empty() {
            out.push('}');
        }
        let _ = writeln!(out, " {value}");
    }
}

/// A label value as the text format wants it: backslash, double quote and line feed escaped.
fn escape(value: &str) -> Cow<'_, str> {
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

/// The whole text of `/metrics`.
pub fn text(sources: &Sources) -> String {
    let mut out = String::new();
    let mut lines = String::new();
    for f in FAMILIES {
        lines.clear();
        let mut series = Series {
            out: &mut lines,
            name: f.name,
            labels: f.labels,
        };
        match f.read {
            Read::Fixed(rows) => {
                for (values, count) in rows {
                    series.put(values, count(sources.metrics).get());
                }
            }
            Read::Each(read) => read(sources, &mut series),
        }
        if f.only_with_series && lines.is_empty() {
            continue;
        }
        let (name, help, kind) = (f.name, f.help, f.kind.name());
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        out.push_str(&lines);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text with no boots, phases or links.
    fn counters_only(metrics: &Metrics) -> String {
        text(&Sources {
            metrics,
            boots: &BTreeMap::new(),
            phases: &[],
            links: &[],
            config: (1, "0123456789abcdef"),
        })
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("room-101"), "room-101");
        assert_eq!(escape("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    }

    /// A pool name from the records (an older config allowed any) stays one label value.
    #[test]
    fn a_pool_name_with_quotes_and_newlines_stays_inside_its_label() {
        let boots = BTreeMap::from([(("r\"oom\\1\nbootpool_fake 1".to_string(), "running"), 1)]);
        let out = text(&Sources {
            metrics: &Metrics::default(),
            boots: &boots,
            phases: &[],
            links: &[],
            config: (1, "0123456789abcdef"),
        });
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

    /// The pacer's families: nothing when no link is paced; else each one's help, type and a
    /// series per paced link, its name escaped, its figures as the pacer set them.
    #[test]
    fn the_pacing_families_show_each_paced_link() {
        let metrics = Metrics::default();
        assert!(!counters_only(&metrics).contains("pacing"));
        let link = metrics.paced_link("eth\"1");
        link.budget.set(11_250_000);
        link.connections.set(2);
        link.rounds.inc();
        let out = counters_only(&metrics);
        let pacing: Vec<&str> = out.lines().filter(|l| l.contains("_pacing_")).collect();
        assert_eq!(pacing, PACING.lines().collect::<Vec<_>>());
    }

    /// The rooms' families: nothing when no room declares an uplink; else a series per room,
    /// by its subnet.
    #[test]
    fn the_room_families_show_each_room_behind_an_uplink() {
        let metrics = Metrics::default();
        assert!(!counters_only(&metrics).contains("_room_"));
        let room = metrics.paced_room("10.30.0.0/24");
        room.capacity.set(125_000_000);
        room.sent.add(4096);
        let out = counters_only(&metrics);
        let rooms: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("bootpool_room_"))
            .collect();
        assert_eq!(rooms.len(), 7, "{out}");
        assert!(
            rooms.contains(&"bootpool_room_uplink_capacity_bytes{room=\"10.30.0.0/24\"} 125000000")
        );
        assert!(rooms.contains(&"bootpool_room_sent_bytes_total{room=\"10.30.0.0/24\"} 4096"));
        assert!(out.contains("# TYPE bootpool_room_sent_bytes_total counter\n"));
    }

    /// The pacer's families for one paced link `eth"1` with a budget of 11.25 MB/s, two
    /// connections and one round.
    const PACING: &str = "\
# HELP bootpool_pacing_budget_bytes What the paced connections on a link may send together, bytes per second.
# TYPE bootpool_pacing_budget_bytes gauge
bootpool_pacing_budget_bytes{link=\"eth\\\"1\"} 11250000
# HELP bootpool_pacing_connections TCP connections registered with the pacer.
# TYPE bootpool_pacing_connections gauge
bootpool_pacing_connections{link=\"eth\\\"1\"} 2
# HELP bootpool_pacing_clients Clients that sent or had bytes waiting in the last round.
# TYPE bootpool_pacing_clients gauge
bootpool_pacing_clients{link=\"eth\\\"1\"} 0
# HELP bootpool_pacing_wanting Clients that wanted more than they got in the last round.
# TYPE bootpool_pacing_wanting gauge
bootpool_pacing_wanting{link=\"eth\\\"1\"} 0
# HELP bootpool_pacing_share_bytes One client's share in the last round, bytes per second (0: not paced).
# TYPE bootpool_pacing_share_bytes gauge
bootpool_pacing_share_bytes{link=\"eth\\\"1\"} 0
# HELP bootpool_pacing_carried_bytes What the registered connections sent together in the last round, bytes per second.
# TYPE bootpool_pacing_carried_bytes gauge
bootpool_pacing_carried_bytes{link=\"eth\\\"1\"} 0
# HELP bootpool_pacing_rounds_total Rounds in which the link was paced (two or more clients active).
# TYPE bootpool_pacing_rounds_total counter
bootpool_pacing_rounds_total{link=\"eth\\\"1\"} 1
# HELP bootpool_pacing_caps_set_total Pacing rates set on connections.
# TYPE bootpool_pacing_caps_set_total counter
bootpool_pacing_caps_set_total{link=\"eth\\\"1\"} 0
# HELP bootpool_pacing_moved_away_total Clients whose replies the pacer moved from this link to one with room.
# TYPE bootpool_pacing_moved_away_total counter
bootpool_pacing_moved_away_total{link=\"eth\\\"1\"} 0
";
}

//! `bootpool report`: waves, a wave's per-client table and summary, and the comparison of two
//! waves, as a table, CSV or JSON. Reads the records in the state folder, so it works whether
//! or not the daemon runs.

use super::timeline::{PHASES, Timelines};
use super::view::{self, BootView, WaveView};
use super::wave;
use crate::config::{Config, Mac};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

/// What to report.
#[derive(Debug, Clone)]
pub enum Query {
    /// Every wave, one line each.
    Waves,
    Wave(u64),
    /// The newest wave of a pool.
    Pool(String),
    Compare(u64, u64),
    /// A client's console: its newest boot's, or the boot with this id.
    Console(crate::config::Mac, Option<u64>),
}

/// What the config says of the machines, for a report written for people: each listed
/// machine's name, each pool's listed machines (to count those that never asked), and the
/// time the report starts from (`--since`, `--last`).
#[derive(Debug, Clone, Default)]
pub struct People {
    names: BTreeMap<Mac, String>,
    /// Each pool's listed MACs, in the config's order (ranges of more than `ENUMERATED`
    /// machines left out: `complete` false).
    listed: BTreeMap<String, Vec<Mac>>,
    complete: BTreeMap<String, bool>,
    /// Unix seconds: waves that started before are left out.
    since: Option<i64>,
}

/// A range of more MACs than this is not enumerated to find who never asked.
const ENUMERATED: u64 = 4096;
/// The machines that never asked named under a wave, at most.
const NAMED_NO_SHOWS: usize = 20;

impl People {
    /// What `config` lists, the report starting at `since` (Unix seconds; `None`: every wave).
    pub fn of(config: &Config, since: Option<i64>) -> People {
        let mut people = People {
            since,
            ..People::default()
        };
        for pool in config.pools.values() {
            let (mut macs, mut complete) = (Vec::new(), true);
            for entry in &pool.clients {
                if entry.macs.len() > ENUMERATED {
                    complete = false;
                    continue;
                }
                for mac in (0..entry.macs.len()).filter_map(|n| entry.macs.nth(n)) {
                    if let Some(name) = entry.name_of(mac) {
                        people.names.insert(mac, name);
                    }
                    macs.push(mac);
                }
            }
            people.listed.insert(pool.name.clone(), macs);
            people.complete.insert(pool.name.clone(), complete);
        }
        people
    }

    /// `mac` and its name when it has one: `pc07 (52:54:00:77:00:07)`.
    fn who(&self, mac: Mac) -> String {
        match self.names.get(&mac) {
            Some(name) => format!("{name} ({mac})"),
            None => mac.to_string(),
        }
    }

    fn name_of(&self, mac: &str) -> String {
        mac.parse::<Mac>()
            .ok()
            .and_then(|m| self.names.get(&m).cloned())
            .unwrap_or_else(|| "-".into())
    }

    /// The machines `pool` lists that are not among `asked`, if the config lists the pool.
    fn no_shows(&self, pool: &str, asked: &BTreeSet<Mac>) -> Option<Vec<Mac>> {
        let listed = self.listed.get(pool)?;
        Some(
            listed
                .iter()
                .filter(|m| !asked.contains(m))
                .copied()
                .collect(),
        )
    }
}

/// Unix seconds as local time, for a table.
fn local(secs: f64) -> String {
    super::when::local(secs.floor() as i64)
}

pub fn render(
    t: &Timelines,
    query: &Query,
    format: Format,
    people: &People,
) -> anyhow::Result<String> {
    let now = super::event::now_micros();
    let mut all = wave::waves(t.boots(), now);
    if let Some(since) = people.since {
        all.retain(|w| w.start >= since as f64);
    }
    let find = |id: u64| {
        all.iter()
            .find(|w| w.id == id)
            .map(|w| WaveView::at(w, t.boots(), now))
            .ok_or_else(|| anyhow::anyhow!("no wave {id} (`bootpool report` lists them)"))
    };
    match query {
        Query::Waves => {
            let views: Vec<WaveView> = all
                .iter()
                .map(|w| WaveView::at(w, t.boots(), now))
                .collect();
            Ok(match format {
                Format::Json => serde_json::to_string_pretty(&views)?,
                Format::Csv => waves_table(&views, ","),
                Format::Table if views.is_empty() => match people.since {
                    Some(since) => format!("no waves since {}\n", super::when::local(since)),
                    None => "no waves recorded\n".into(),
                },
                Format::Table => waves_table(&views, "  ") + &pools_seen(&views, people),
            })
        }
        Query::Wave(id) => wave_report(&find(*id)?, format, people),
        Query::Pool(pool) => {
            let w =
                all.iter()
                    .rev()
                    .find(|w| &w.pool == pool)
                    .ok_or_else(|| match people.since {
                        Some(since) => anyhow::anyhow!(
                            "no waves of pool `{pool}` since {}",
                            super::when::local(since)
                        ),
                        None => anyhow::anyhow!("no waves recorded for pool `{pool}`"),
                    })?;
            wave_report(&WaveView::at(w, t.boots(), now), format, people)
        }
        Query::Console(mac, id) => {
            let boot = t
                .boots()
                .iter()
                .rev()
                .find(|b| b.mac == *mac && id.is_none_or(|id| b.id == id))
                .ok_or_else(|| match id {
                    Some(id) => anyhow::anyhow!("no boot {id} of {mac}"),
                    None => anyhow::anyhow!("no boot recorded for {mac}"),
                })?;
            console_report(
                &view::ConsoleView::of(boot, now),
                boot.start,
                format,
                &people.who(*mac),
            )
        }
        Query::Compare(a, b) => {
            let c = view::compare(find(*a)?, find(*b)?);
            Ok(match format {
                Format::Json => serde_json::to_string_pretty(&c)?,
                Format::Csv => compare_table(&c.a, &c.b, ","),
                Format::Table => format!("{}\n{}\n", compare_table(&c.a, &c.b, "  "), c.sentence),
            })
        }
    }
}

fn secs(v: Option<f64>) -> String {
    v.map(|s| format!("{s:.1}")).unwrap_or_else(|| "-".into())
}

fn mb(bytes: f64) -> String {
    format!("{:.1}", bytes / 1e6)
}

/// Aligns columns for a table, or joins with `sep` for CSV.
fn layout(rows: &[Vec<String>], sep: &str) -> String {
    let mut out = String::new();
    if sep != "  " {
        for r in rows {
            let _ = writeln!(out, "{}", r.join(sep));
        }
        return out;
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", cells.join(sep).trim_end());
    }
    out
}

/// Under the waves, per pool the config lists: how many of its machines booted in the waves
/// shown, and how many never asked.
fn pools_seen(views: &[WaveView], people: &People) -> String {
    let mut out = String::new();
    let mut pools: Vec<&str> = views.iter().map(|w| w.pool.as_str()).collect();
    pools.sort_unstable();
    pools.dedup();
    let when = match people.since {
        Some(since) => format!("since {}", super::when::local(since)),
        None => "in the waves recorded".into(),
    };
    for pool in pools {
        let of_pool = views.iter().filter(|w| w.pool == pool);
        let boots: Vec<&BootView> = of_pool.flat_map(|w| &w.boots).collect();
        let asked: BTreeSet<Mac> = boots.iter().filter_map(|b| b.mac.parse().ok()).collect();
        let booted: BTreeSet<&str> = boots
            .iter()
            .filter(|b| b.result == "booted")
            .map(|b| b.mac.as_str())
            .collect();
        let Some(no_shows) = people.no_shows(pool, &asked) else {
            continue;
        };
        let _ = writeln!(
            out,
            "pool {pool}: {} of {} machines booted {when}, {} never asked{}",
            booted.len(),
            asked.len() + no_shows.len(),
            no_shows.len(),
            if people.complete.get(pool) == Some(&false) {
                " (of the ranges short enough to list)"
            } else {
                ""
            }
        );
    }
    out
}

fn waves_table(views: &[WaveView], sep: &str) -> String {
    let mut rows = vec![
        [
            "wave",
            "pool",
            "start",
            "clients",
            "booted",
            "inferred",
            "failed",
            "timed_out",
            "running",
            "median_s",
            "p95_s",
            "max_s",
            "MB_per_client",
            "wake",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for w in views {
        let s = &w.summary;
        rows.push(vec![
            w.id.to_string(),
            w.pool.clone(),
            // People read a date; a program reads Unix seconds.
            if sep == "  " {
                local(w.start)
            } else {
                format!("{:.0}", w.start)
            },
            s.clients.to_string(),
            s.booted.to_string(),
            s.inferred.to_string(),
            s.failed.to_string(),
            s.timed_out.to_string(),
            s.running.to_string(),
            secs(s.median_s),
            secs(s.p95_s),
            secs(s.max_s),
            mb(s.bytes_per_client.values().sum()),
            w.wake.map_or_else(|| "-".into(), |k| k.id.to_string()),
        ]);
    }
    layout(&rows, sep)
}

fn boot_row(b: &BootView) -> Vec<String> {
    let mut row = vec![
        b.mac.clone(),
        b.ip.map(|i| i.to_string()).unwrap_or_default(),
        b.result.clone(),
        end_cell(b),
        secs(b.duration_s),
        secs(b.inferred_s),
    ];
    row.extend(PHASES.iter().map(|p| secs(b.phase_s(p))));
    row.push(mb(b.total_bytes() as f64));
    row.push(b.stopped_in.clone().unwrap_or_else(|| "-".into()));
    row.push(b.gone.clone().unwrap_or_else(|| "-".into()));
    row
}

/// In a site, who served each phase: `dhcp a, kernel b, root b -> a at HH:MM:SS` (local
/// time); `None` outside a site.
fn served_line(b: &BootView) -> Option<String> {
    if b.served.is_empty() {
        return None;
    }
    // The time of day alone: the wave's date is above the table.
    let clock = |secs: f64| local(secs).split_off(11);
    let mut parts: Vec<String> = b
        .served
        .iter()
        .map(|s| format!("{} {}", s.phase, s.text(clock)))
        .collect();
    if b.served_unkept > 0 {
        parts.push(format!("and {} turns more", b.served_unkept));
    }
    Some(parts.join(", "))
}

/// Who said the boot was up: `reported`, `inferred:EVIDENCE`, or `-`.
fn end_cell(b: &BootView) -> String {
    match (b.end.as_deref(), b.evidence.as_deref()) {
        (Some("inferred"), Some(e)) => format!("inferred:{e}"),
        (Some(end), _) => end.to_string(),
        (None, _) => "-".into(),
    }
}

/// One wave: a line per boot (the table names each machine beside its MAC and gives the
/// start in local time; CSV keeps the columns programs read), why each failed boot failed,
/// and the summary, with the machines the pool lists that never asked.
fn wave_report(w: &WaveView, format: Format, people: &People) -> anyhow::Result<String> {
    if format == Format::Json {
        return Ok(serde_json::to_string_pretty(w)?);
    }
    let table = format == Format::Table;
    let sep = if table { "  " } else { "," };
    let mut head: Vec<String> = ["mac", "ip", "result", "end", "boot_s", "inferred_s"]
        .map(String::from)
        .to_vec();
    head.extend(PHASES.iter().map(|p| format!("{p}_s")));
    head.push("MB".into());
    head.push("stopped_in".into());
    head.push("gone".into());
    if table {
        head.insert(1, "name".into());
    }
    let mut rows = vec![head];
    rows.extend(w.boots.iter().map(|b| {
        let mut row = boot_row(b);
        if table {
            row.insert(1, people.name_of(&b.mac));
        }
        row
    }));
    let mut out = String::new();
    if table {
        let _ = writeln!(
            out,
            "wave {} of pool {}, started {} (local time){}\n",
            w.id,
            w.pool,
            local(w.start),
            w.wake.map_or_else(String::new, |k| format!(
                ", by wake {} at {}",
                k.id,
                local(k.at)
            ))
        );
    }
    out.push_str(&layout(&rows, sep));
    if table {
        // Why each failed boot failed: free text, so below the table rather than in a column.
        let who = |mac: &str| {
            mac.parse()
                .map_or_else(|_| mac.to_string(), |m| people.who(m))
        };
        for b in &w.boots {
            if let Some(why) = &b.failure {
                let phase = b.stopped_in.as_deref().unwrap_or("?");
                let _ = writeln!(out, "{} failed in {phase}: {why}", who(&b.mac));
            }
            if let Some(c) = &b.cause {
                let _ = writeln!(out, "{} cause ({}): {}", who(&b.mac), c.kind, c.text);
            }
            if let Some(line) = served_line(b) {
                let _ = writeln!(out, "{} served by {line}", who(&b.mac));
            }
        }
        let asked: BTreeSet<Mac> = w.boots.iter().filter_map(|b| b.mac.parse().ok()).collect();
        let no_shows = people.no_shows(&w.pool, &asked).unwrap_or_default();
        let s = &w.summary;
        let _ = writeln!(
            out,
            "\nwave {} of pool {}: {} of {} booted ({} by inference), {} never asked, {} failed, {} timed out, {} running; boot time median {} s, p95 {} s, max {} s; {} MB per client",
            w.id,
            w.pool,
            s.booted,
            s.clients + no_shows.len(),
            s.inferred,
            no_shows.len(),
            s.failed,
            s.timed_out,
            s.running,
            secs(s.median_s),
            secs(s.p95_s),
            secs(s.max_s),
            mb(s.bytes_per_client.values().sum())
        );
        if !no_shows.is_empty() {
            let named: Vec<String> = no_shows
                .iter()
                .take(NAMED_NO_SHOWS)
                .map(|m| people.who(*m))
                .collect();
            let more = no_shows.len().saturating_sub(NAMED_NO_SHOWS);
            let _ = write!(out, "never asked: {}", named.join(", "));
            let _ = writeln!(
                out,
                "{}",
                if more > 0 {
                    format!(", and {more} more")
                } else {
                    String::new()
                }
            );
        }
    }
    Ok(out)
}

fn console_report(
    v: &view::ConsoleView,
    start: super::event::Micros,
    format: Format,
    who: &str,
) -> anyhow::Result<String> {
    let mut out = String::new();
    match format {
        Format::Json => return Ok(serde_json::to_string_pretty(v)?),
        Format::Csv => {
            out.push_str("at,text\n");
            for l in &v.lines {
                let _ = writeln!(out, "{:.6},\"{}\"", l.at, l.text.replace('"', "\"\""));
            }
        }
        Format::Table => {
            let _ = writeln!(
                out,
                "boot {} of {who}, started {} (local time): {} console lines kept, {} dropped",
                v.boot,
                local(start as f64 / 1e6),
                v.lines.len(),
                v.dropped
            );
            if let Some(c) = &v.cause {
                let _ = writeln!(out, "cause ({}): {}", c.kind, c.text);
            }
            for (i, l) in v.lines.iter().enumerate() {
                if i == v.head && v.dropped > 0 {
                    let _ = writeln!(out, "... {} lines dropped ...", v.dropped);
                }
                let _ = writeln!(out, "{:>8.3}  {}", l.at - start as f64 / 1e6, l.text);
            }
        }
    }
    Ok(out)
}

fn compare_table(a: &WaveView, b: &WaveView, sep: &str) -> String {
    let mut rows = vec![vec![
        "".to_string(),
        format!("wave {}", a.id),
        format!("wave {}", b.id),
    ]];
    let root = |w: &WaveView| {
        w.boots
            .iter()
            .find_map(|b| b.root)
            .map(super::event::proto_name)
            .unwrap_or("-")
            .to_string()
    };
    rows.push(vec!["pool".into(), a.pool.clone(), b.pool.clone()]);
    rows.push(vec!["root".into(), root(a), root(b)]);
    rows.push(vec![
        "clients".into(),
        a.summary.clients.to_string(),
        b.summary.clients.to_string(),
    ]);
    rows.push(vec![
        "booted".into(),
        a.summary.booted.to_string(),
        b.summary.booted.to_string(),
    ]);
    rows.push(vec![
        "inferred".into(),
        a.summary.inferred.to_string(),
        b.summary.inferred.to_string(),
    ]);
    rows.push(vec![
        "failed".into(),
        a.summary.failed.to_string(),
        b.summary.failed.to_string(),
    ]);
    rows.push(vec![
        "timed_out".into(),
        a.summary.timed_out.to_string(),
        b.summary.timed_out.to_string(),
    ]);
    rows.push(vec![
        "running".into(),
        a.summary.running.to_string(),
        b.summary.running.to_string(),
    ]);
    rows.push(vec![
        "median_s".into(),
        secs(a.summary.median_s),
        secs(b.summary.median_s),
    ]);
    rows.push(vec![
        "p95_s".into(),
        secs(a.summary.p95_s),
        secs(b.summary.p95_s),
    ]);
    rows.push(vec![
        "max_s".into(),
        secs(a.summary.max_s),
        secs(b.summary.max_s),
    ]);
    for p in PHASES {
        let (x, y) = (
            a.summary.phase_median_s.get(p).copied(),
            b.summary.phase_median_s.get(p).copied(),
        );
        if x.is_some() || y.is_some() {
            rows.push(vec![format!("{p}_median_s"), secs(x), secs(y)]);
        }
    }
    rows.push(vec![
        "MB_per_client".into(),
        mb(a.summary.bytes_per_client.values().sum()),
        mb(b.summary.bytes_per_client.values().sum()),
    ]);
    layout(&rows, sep)
}

/// One unknown machine as `bootpool client unknown` shows it (`service::unknown`'s list).
pub struct UnknownRow {
    pub mac: crate::config::Mac,
    pub vendor_class: Option<String>,
    pub arch: Option<u16>,
    pub relay: Option<String>,
    /// Option 82's circuit id: the switch port.
    pub port: Option<String>,
    pub first_seen: u64,
    pub last_seen: u64,
    /// How it asked: `dhcp`, `dhcp6`, `proxy`, comma-separated.
    pub asked: String,
}

/// The unknown machines as a table, times in local time, and how to enrol one.
pub fn unknown_table(rows: &[UnknownRow]) -> String {
    if rows.is_empty() {
        return "no unknown machines have asked\n".into();
    }
    let time = |s: u64| super::when::local(i64::try_from(s).unwrap_or(i64::MAX));
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let mut table = vec![
        [
            "mac",
            "first_seen",
            "last_seen",
            "asked",
            "arch",
            "vendor_class",
            "relay",
            "port",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for r in rows {
        table.push(vec![
            r.mac.to_string(),
            time(r.first_seen),
            time(r.last_seen),
            r.asked.clone(),
            r.arch.map_or_else(|| "-".into(), |a| a.to_string()),
            dash(&r.vendor_class),
            dash(&r.relay),
            dash(&r.port),
        ]);
    }
    let mut out = layout(&table, "  ");
    let _ = writeln!(
        out,
        "\n{} unknown; enrol one with: bootpool client add MAC --pool POOL [--name NAME]",
        rows.len()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mac;
    use crate::record::event::{Event, Kind, Who};

    /// In a site, a wave's table says under the boots who served each phase, and when a
    /// member took a phase over; outside a site it says nothing of it.
    #[test]
    fn a_waves_table_says_who_served_each_phase() {
        let s = 1_000_000;
        let mac = Mac([0x52, 0x54, 0, 0x77, 0, 0x41]);
        let ip = std::net::Ipv4Addr::new(10, 77, 0, 0x41);
        let events = [
            (
                0,
                "a",
                Kind::DhcpDiscover {
                    answered: true,
                    pool: Some("p".into()),
                    pxe: true,
                    ipxe: true,
                    arch: None,
                },
            ),
            (
                1,
                "a",
                Kind::DhcpAck {
                    ip,
                    pxe: true,
                    ipxe: true,
                    pool: "p".into(),
                    link: None,
                    relayed: None,
                },
            ),
            (
                3,
                "a",
                Kind::RootAttach {
                    proto: crate::record::Proto::Nbd,
                    export: "/x".into(),
                },
            ),
            (
                5,
                "a",
                Kind::RootRead {
                    proto: crate::record::Proto::Nbd,
                    bytes: 1 << 20,
                },
            ),
            (
                9,
                "b",
                Kind::RootRead {
                    proto: crate::record::Proto::Nbd,
                    bytes: 1 << 20,
                },
            ),
        ];
        let start = 1_800_000_000;
        let mut t = Timelines::default();
        let mut plain = Timelines::default();
        for (at, member, kind) in events {
            let e = Event {
                at: (start + at) * s,
                who: Who::Mac(mac),
                kind,
            };
            t.apply_from(&e, Some(member));
            plain.apply(&e);
        }
        let people = People::default();
        let table = render(&t, &Query::Wave(1), Format::Table, &people).unwrap();
        let clock = crate::record::when::local(start + 9).split_off(11);
        let want = format!("{mac} served by dhcp a, initrd a, root a -> b at {clock}");
        assert!(table.lines().any(|l| l == want), "{want}\n{table}");
        let table = render(&plain, &Query::Wave(1), Format::Table, &people).unwrap();
        assert!(!table.contains("served by"), "{table}");
    }

    /// A wake's wave says so: the waves' table and CSV give its id in the `wake` column (`-`
    /// for a wave no wake started), and the wave's own report names it and its time.
    #[test]
    fn a_wakes_wave_names_the_wake() {
        let mut t = Timelines::default();
        let s = 1_000_000;
        let discover = Kind::DhcpDiscover {
            answered: true,
            pool: Some("a".into()),
            pxe: true,
            ipxe: false,
            arch: None,
        };
        let mac = |n| Mac([0x52, 0x54, 0, 0x77, 0, n]);
        let ev = |at, n, kind| Event {
            at,
            who: Who::Mac(mac(n)),
            kind,
        };
        t.apply(&ev(1000 * s, 1, discover.clone()));
        t.apply(&ev(5000 * s, 2, Kind::Woken { wake: 9 }));
        t.apply(&ev(5003 * s, 2, discover));
        let people = People::default();
        let csv = render(&t, &Query::Waves, Format::Csv, &people).unwrap();
        let wakes: Vec<&str> = csv.lines().map(|l| l.rsplit(',').next().unwrap()).collect();
        assert_eq!(wakes, ["wake", "-", "9"]);
        let table = render(&t, &Query::Waves, Format::Table, &people).unwrap();
        assert!(table.lines().next().unwrap().ends_with("wake"), "{table}");
        let id = t.boots()[1].id;
        let wave = render(&t, &Query::Wave(id), Format::Table, &people).unwrap();
        let head = wave.lines().next().unwrap();
        assert!(
            head.ends_with(&format!(", by wake 9 at {}", local(5000.0))),
            "{head}"
        );
    }
}

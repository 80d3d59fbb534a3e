//! `bootpool report`: waves, a wave's per-client table and summary, and the comparison of two
//! waves, as a table, CSV or JSON. Reads the records in the state folder, so it works whether
//! or not the daemon runs.

use super::timeline::{PHASES, Timelines};
use super::view::{self, BootView, WaveView};
use super::wave;
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

pub fn render(t: &Timelines, query: &Query, format: Format) -> anyhow::Result<String> {
    let now = super::event::now_micros();
    let all = wave::waves(t.boots(), now);
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
                Format::Table => waves_table(&views, "  "),
            })
        }
        Query::Wave(id) => wave_report(&find(*id)?, format),
        Query::Pool(pool) => {
            let w = all
                .iter()
                .rev()
                .find(|w| &w.pool == pool)
                .ok_or_else(|| anyhow::anyhow!("no waves recorded for pool `{pool}`"))?;
            wave_report(&WaveView::at(w, t.boots(), now), format)
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
            console_report(&view::ConsoleView::of(boot, now), boot.start, format)
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
        ]
        .map(String::from)
        .to_vec(),
    ];
    for w in views {
        let s = &w.summary;
        rows.push(vec![
            w.id.to_string(),
            w.pool.clone(),
            format!("{:.0}", w.start),
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

/// Who said the boot was up: `reported`, `inferred:EVIDENCE`, or `-`.
fn end_cell(b: &BootView) -> String {
    match (b.end.as_deref(), b.evidence.as_deref()) {
        (Some("inferred"), Some(e)) => format!("inferred:{e}"),
        (Some(end), _) => end.to_string(),
        (None, _) => "-".into(),
    }
}

fn wave_report(w: &WaveView, format: Format) -> anyhow::Result<String> {
    if format == Format::Json {
        return Ok(serde_json::to_string_pretty(w)?);
    }
    let sep = if format == Format::Csv { "," } else { "  " };
    let mut head: Vec<String> = ["mac", "ip", "result", "end", "boot_s", "inferred_s"]
        .map(String::from)
        .to_vec();
    head.extend(PHASES.iter().map(|p| format!("{p}_s")));
    head.push("MB".into());
    head.push("stopped_in".into());
    head.push("gone".into());
    let mut rows = vec![head];
    rows.extend(w.boots.iter().map(boot_row));
    let mut out = layout(&rows, sep);
    if format == Format::Table {
        // Why each failed boot failed: free text, so below the table rather than in a column.
        for b in &w.boots {
            if let Some(why) = &b.failure {
                let phase = b.stopped_in.as_deref().unwrap_or("?");
                let _ = writeln!(out, "{} failed in {phase}: {why}", b.mac);
            }
            if let Some(c) = &b.cause {
                let _ = writeln!(out, "{} cause ({}): {}", b.mac, c.kind, c.text);
            }
        }
        let s = &w.summary;
        let _ = writeln!(
            out,
            "\nwave {} of pool {}: {} of {} clients booted ({} by inference), {} failed, {} timed out, {} running; boot time median {} s, p95 {} s, max {} s; {} MB per client",
            w.id,
            w.pool,
            s.booted,
            s.clients,
            s.inferred,
            s.failed,
            s.timed_out,
            s.running,
            secs(s.median_s),
            secs(s.p95_s),
            secs(s.max_s),
            mb(s.bytes_per_client.values().sum())
        );
    }
    Ok(out)
}

fn console_report(
    v: &view::ConsoleView,
    start: super::event::Micros,
    format: Format,
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
                "boot {} of {}: {} console lines kept, {} dropped",
                v.boot,
                v.mac,
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

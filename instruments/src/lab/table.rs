//! The lab's boot table: one line per client, phases in seconds as the daemon recorded them.

use super::vm::Console;
use bootpool::config::Mac;
use bootpool::record::view::BootView;
use std::fmt::Write;

/// One client's line in the lab's table.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub name: String,
    pub pool: String,
    pub mac: Mac,
    pub console: Console,
    /// Seconds from power-on until iPXE started DHCP (the firmware, unseen by bootpool).
    pub firmware_s: Option<f64>,
    pub boot: Option<BootView>,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        matches!(self.console, Console::Booted(_))
            && self.boot.as_ref().is_some_and(|b| b.result == "booted")
    }
}

/// The phases every table shows; the Secure Boot chain's `shim` and `grub` are shown too when
/// a boot in the table had them.
const PHASES: [&str; 6] = ["dhcp", "loader", "ipxe", "kernel", "initrd", "root"];

pub fn render(outcomes: &[Outcome]) -> String {
    let had = |phase: &str| {
        outcomes.iter().any(|o| {
            o.boot
                .as_ref()
                .is_some_and(|b| b.phases.iter().any(|p| p.name == phase))
        })
    };
    let phases: Vec<&str> = bootpool::record::timeline::PHASES
        .into_iter()
        .filter(|p| PHASES.contains(p) || had(p))
        .collect();
    let mut head = vec![
        "client",
        "mac",
        "ip",
        "result",
        "firmware_s",
        "console_s",
        "recorded_s",
    ];
    head.extend(&phases);
    head.push("inferred_s");
    head.push("end");
    head.push("MB");
    head.push("pool");
    let mut rows = vec![head.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for o in outcomes {
        let boot = o.boot.as_ref();
        let result = match (&o.console, boot.map(|b| b.result.as_str())) {
            (Console::Booted(_), Some("booted")) => "booted".to_string(),
            (Console::Booted(_), _) => "unrecorded".to_string(),
            (Console::Failed(why), _) => format!("failed: {why}"),
            (Console::Running, _) => "timed out".to_string(),
        };
        let console_s = match o.console {
            Console::Booted(t) => format!("{:.1}", t.as_secs_f64()),
            _ => "-".into(),
        };
        let mut row = vec![
            o.name.clone(),
            o.mac.to_string(),
            boot.and_then(|b| b.ip)
                .map(|ip| ip.to_string())
                .unwrap_or_else(|| "-".into()),
            result,
            o.firmware_s
                .map(|s| format!("{s:.1}"))
                .unwrap_or_else(|| "-".into()),
            console_s,
            boot.and_then(|b| b.duration_s)
                .map(|d| format!("{d:.1}"))
                .unwrap_or_else(|| "-".into()),
        ];
        for &phase in &phases {
            let s = boot
                .and_then(|b| b.phases.iter().find(|p| p.name == phase))
                .map(|p| format!("{:.1}", p.seconds));
            row.push(s.unwrap_or_else(|| "-".into()));
        }
        row.push(
            boot.and_then(|b| b.inferred_s)
                .map(|d| format!("{d:.1}"))
                .unwrap_or_else(|| "-".into()),
        );
        row.push(
            match boot.map(|b| (b.end.as_deref(), b.evidence.as_deref())) {
                Some((Some("inferred"), Some(e))) => format!("inferred:{e}"),
                Some((Some(end), _)) => end.to_string(),
                _ => "-".into(),
            },
        );
        let bytes = boot.map(BootView::total_bytes).unwrap_or(0);
        row.push(format!("{:.1}", bytes as f64 / 1e6));
        row.push(o.pool.clone());
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

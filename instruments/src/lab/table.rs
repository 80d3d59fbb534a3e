//! The lab's boot table: one line per client, phases in seconds as the daemon recorded them;
//! and how the lab judges a boot: by the serial console when the pool's kernel writes there,
//! else by the record (`by_record`).

use super::vm::Console;
use bootpool::config::cmdline::Field;
use bootpool::config::{Mac, Pool};
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
    /// Its pool's kernel writes nothing to the serial line the lab reads (`by_record`): the
    /// boot is judged by what the daemon recorded alone.
    pub by_record: bool,
    /// The lab switched it off mid-boot (`--kill-client-at-root`): nothing more was expected
    /// of it.
    pub switched_off: bool,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        if self.switched_off {
            return true;
        }
        let recorded = self.boot.as_ref().is_some_and(|b| b.result == "booted");
        recorded && (self.by_record || matches!(self.console, Console::Booted(_)))
    }

    /// The table's result: the console's word and the record's, or the record's alone.
    fn result(&self) -> String {
        let recorded = self.boot.as_ref().map(|b| b.result.as_str());
        if self.switched_off {
            return format!(
                "switched off mid-boot (recorded: {})",
                recorded.unwrap_or("no boot")
            );
        }
        if self.by_record {
            return match (recorded, &self.console) {
                (_, Console::Failed(why)) => format!("failed: {why}"),
                (Some("booted"), _) => "booted (by the record: no serial console)".into(),
                (Some("failed"), _) => {
                    let why = self.boot.as_ref().and_then(|b| b.failure.as_deref());
                    format!("failed: {}", why.unwrap_or("as recorded"))
                }
                _ => "timed out (by the record: no serial console)".into(),
            };
        }
        match (&self.console, recorded) {
            (Console::Booted(_), Some("booted")) => "booted".to_string(),
            (Console::Booted(_), _) => "unrecorded".to_string(),
            (Console::Failed(why), _) => format!("failed: {why}"),
            (Console::Running, _) => "timed out".to_string(),
        }
    }
}

/// Whether the lab judges `pool`'s boots by the record: its kernel command line (its
/// `cmdline`, its template filled in, each `arch` variant's) names no serial console
/// (`console=ttyS...`, `console=ttyAMA...`), so its serial line never says how a boot went.
pub fn by_record(pool: &Pool) -> bool {
    let serial = |line: &str| {
        line.split_whitespace()
            .any(|arg| arg.starts_with("console=ttyS") || arg.starts_with("console=ttyAMA"))
    };
    let line_of = |cmdline: &str| match &pool.cmdline_template {
        Some(t) => t.render(|f| match f {
            Field::Cmdline => cmdline.to_string(),
            _ => String::new(),
        }),
        None => cmdline.to_string(),
    };
    let lines = std::iter::once(pool.cmdline.as_str())
        .chain(pool.arch.values().filter_map(|v| v.cmdline.as_deref()));
    !lines.map(line_of).any(|l| serial(&l))
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
        let result = o.result();
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const CONFIG: &str = "server: { address: 10.77.0.1, state_dir: var }
dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.150 }
images:
  demo: { dir: images/demo }
pools:
  serial: { image: demo, cmdline: console=ttyS0 quiet }
  screen: { image: demo, cmdline: quiet splash }
  arm: { image: demo, cmdline: quiet, arch: { arm64: { image: demo, cmdline: console=ttyAMA0 } } }
  templated: { image: demo, cmdline: console=ttyS1, cmdline_template: \"root=/dev/nfs {cmdline}\" }
";

    /// A boot of `result` as the API shows it.
    fn boot(result: &str) -> BootView {
        serde_json::from_value(serde_json::json!({
            "id": 1, "mac": "52:54:00:77:00:01", "start": 1000.0, "result": result,
            "console_lines": 0, "phases": [], "current_phase": "root", "last_event": 1030.0,
            "bytes": {}
        }))
        .unwrap()
    }

    fn outcome(by_record: bool, console: Console, result: Option<&str>) -> Outcome {
        Outcome {
            name: "pc01".into(),
            pool: "screen".into(),
            mac: "52:54:00:77:00:01".parse().unwrap(),
            console,
            firmware_s: None,
            boot: result.map(boot),
            by_record,
            switched_off: false,
        }
    }

    #[test]
    fn a_pool_without_a_serial_console_is_judged_by_the_record() {
        let config = bootpool::config::Config::parse(Path::new("p.yaml"), CONFIG).unwrap();
        let judged = |p: &str| by_record(&config.pools[p]);
        assert!(!judged("serial") && !judged("arm") && !judged("templated"));
        assert!(judged("screen"));
        // Judged by the record: its word alone, said in the table.
        let up = outcome(true, Console::Running, Some("booted"));
        assert!(up.ok());
        assert_eq!(up.result(), "booted (by the record: no serial console)");
        let stuck = outcome(true, Console::Running, Some("running"));
        assert!(!stuck.ok());
        assert!(stuck.result().starts_with("timed out (by the record"));
        assert!(render(&[up, stuck]).contains("booted (by the record: no serial console)"));
        // By the console: a silent serial line is a timeout whatever the record says.
        let silent = outcome(false, Console::Running, Some("booted"));
        assert!(!silent.ok());
        assert_eq!(silent.result(), "timed out");
        let both = outcome(
            false,
            Console::Booted(std::time::Duration::from_secs(9)),
            Some("booted"),
        );
        assert!(both.ok() && both.result() == "booted");
        // A client the lab switched off mid-boot is as expected, whatever its console says.
        let off = Outcome {
            switched_off: true,
            ..outcome(false, Console::Running, Some("running"))
        };
        assert!(off.ok());
        assert_eq!(off.result(), "switched off mid-boot (recorded: running)");
    }
}

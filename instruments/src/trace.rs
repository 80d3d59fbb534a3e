//! `bootpool trace`: lists the boot traces the daemon kept (`state_dir/traces/`) and exports
//! one, checked, in the documented format (docs/trace.md).

use anyhow::{Context, bail};
use bootpool::trace::format::{Trace, What};
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct TraceArgs {
    #[arg(short, long, default_value_os_t = bootpool::config::default_file(), hide_default_value = true, help = bootpool::config::FILE_HELP)]
    pub config: PathBuf,
    /// Export the newest complete trace (one that reached its booted call) of this MAC.
    #[arg(long, conflicts_with = "file")]
    pub mac: Option<String>,
    /// Export this trace file instead.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Write the trace here instead of standard output.
    #[arg(short, long)]
    pub out: Option<PathBuf>,
    /// Put this text in the exported trace's `note` (how it was made).
    #[arg(long)]
    pub note: Option<String>,
}

/// One kept trace, summarised.
pub struct Kept {
    pub file: PathBuf,
    pub trace: Trace,
}

impl Kept {
    pub fn booted(&self) -> bool {
        self.trace
            .ops
            .last()
            .is_some_and(|o| matches!(o.what, What::Booted))
    }
}

/// Every readable trace in `dir`, oldest first; unreadable ones are named on standard error.
pub fn kept(dir: &Path) -> Vec<Kept> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "trace"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("trace: {}: {e}", file.display());
                continue;
            }
        };
        match Trace::parse(&text) {
            Ok(trace) => out.push(Kept { file, trace }),
            Err(e) => eprintln!("trace: {}: {e}", file.display()),
        }
    }
    out.sort_by(|a, b| a.trace.header.recorded.total_cmp(&b.trace.header.recorded));
    out
}

/// A table of the kept traces.
pub fn render_list(kept: &[Kept]) -> String {
    let mut s = String::from(
        "mac                pool          root  recorded                       ops    secs    booted  tftp_MB  http_MB  nfs_MB  nbd_MB  file\n",
    );
    for k in kept {
        let h = &k.trace.header;
        let b = k.trace.bytes();
        let secs = k.trace.ops.last().map_or(0.0, |o| o.end());
        let mb = |n: u64| n as f64 / 1e6;
        s.push_str(&format!(
            "{:<18} {:<13} {:<5} {:<30} {:<6} {:<7.1} {:<7} {:<8.2} {:<8.2} {:<7.2} {:<7.2} {}\n",
            h.mac,
            h.pool,
            h.root,
            recorded_at(h.recorded),
            k.trace.ops.len(),
            secs,
            if k.booted() { "yes" } else { "no" },
            mb(b.tftp),
            mb(b.http),
            mb(b.nfs),
            mb(b.nbd),
            k.file.display()
        ));
    }
    s
}

/// Unix seconds as an HTTP date (UTC).
fn recorded_at(secs: f64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(secs.max(0.0));
    httpdate::fmt_http_date(t)
}

pub fn run(args: TraceArgs) -> anyhow::Result<()> {
    let mut trace = if let Some(file) = &args.file {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        Trace::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?
    } else {
        let config = bootpool::config::Config::load(&args.config)?;
        let dir = config.server.state_dir.join("traces");
        let all = kept(&dir);
        let Some(mac) = &args.mac else {
            if all.is_empty() {
                eprintln!(
                    "no traces in {} (a pool keeps them with `trace: true`)",
                    dir.display()
                );
            }
            print!("{}", render_list(&all));
            return Ok(());
        };
        let mac: bootpool::config::Mac = mac
            .parse()
            .map_err(|e| anyhow::anyhow!("--mac {mac}: {e}"))?;
        let mine: Vec<Kept> = all
            .into_iter()
            .filter(|k| k.trace.header.mac == mac.to_string())
            .collect();
        let Some(k) = mine
            .iter()
            .rev()
            .find(|k| k.booted())
            .or_else(|| mine.last())
        else {
            bail!("no trace of {mac} in {}", dir.display());
        };
        if !k.booted() {
            eprintln!(
                "trace: {} never reached its booted call; exporting it as it is",
                k.file.display()
            );
        }
        k.trace.clone()
    };
    if let Some(note) = args.note {
        trace.header.note = note;
    }
    let text = trace.to_text();
    match &args.out {
        Some(out) => {
            std::fs::write(out, text).with_context(|| format!("writing {}", out.display()))?
        }
        None => print!("{text}"),
    }
    Ok(())
}

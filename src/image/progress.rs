//! A one-line progress bar on stderr for `bootpool image import`, drawn only when stderr is a
//! terminal (a log or a pipe gets the summary lines alone).

use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

pub struct Progress {
    step: String,
    tty: bool,
    total: Option<u64>,
    drawn: Option<Instant>,
}

impl Progress {
    /// A bar for `step`; `total` bytes if known (else a running count).
    pub fn new(step: &str, total: Option<u64>) -> Progress {
        Progress {
            step: step.to_string(),
            tty: std::io::stderr().is_terminal(),
            total: total.filter(|t| *t > 0),
            drawn: None,
        }
    }

    pub fn show(&mut self, done: u64) {
        if !self.tty
            || self
                .drawn
                .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
        {
            return;
        }
        self.drawn = Some(Instant::now());
        let mut e = std::io::stderr().lock();
        let _ = match self.total {
            Some(total) => {
                const WIDTH: u64 = 40;
                let pct = (done.min(total) * 100) / total;
                let full = (pct * WIDTH / 100) as usize;
                write!(
                    e,
                    "\r{} [{}{}] {pct:3}% {}/{} MiB",
                    self.step,
                    "#".repeat(full),
                    " ".repeat(WIDTH as usize - full),
                    done >> 20,
                    total >> 20
                )
            }
            None => write!(e, "\r{} {} MiB", self.step, done >> 20),
        };
        let _ = e.flush();
    }

    pub fn finish(&mut self) {
        if self.tty && self.drawn.is_some() {
            eprintln!();
        }
    }
}

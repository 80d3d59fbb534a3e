//! The records the store refused (a PostgreSQL that is down or slow), parked on disk
//! (`state_dir/records.spool`, one JSON line per event or egress sample, synced) until it
//! takes them: the writer parks each failed batch here instead of holding it in memory, so a
//! daemon killed with -9 during an outage still writes them when it comes back. A line cut
//! short by a crash is skipped with a warning naming the file and the line.

use super::egress::Saved;
use super::event::Event;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

pub const SPOOL: &str = "records.spool";

/// One parked line.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Line {
    Event(Event),
    Egress(Box<Saved>),
}

/// The parked records' file, and how many lines it holds.
pub struct Spool {
    path: PathBuf,
    lines: usize,
}

impl Spool {
    /// The spool in `dir` (made when first parked into).
    pub fn open(dir: &Path) -> Spool {
        let path = dir.join(SPOOL);
        let lines = std::fs::File::open(&path)
            .map(|f| BufReader::new(f).split(b'\n').count())
            .unwrap_or(0);
        Spool { path, lines }
    }

    pub fn is_empty(&self) -> bool {
        self.lines == 0
    }

    /// The lines parked (events and egress samples).
    pub fn len(&self) -> usize {
        self.lines
    }

    /// Appends `events` and `egress` and syncs them.
    pub fn park(&mut self, events: &[Event], egress: &[Saved]) -> std::io::Result<()> {
        let mut text = Vec::new();
        let mut n = 0;
        let mut line = |l: &Line| -> std::io::Result<()> {
            serde_json::to_writer(&mut text, l).map_err(std::io::Error::other)?;
            text.push(b'\n');
            n += 1;
            Ok(())
        };
        for e in events {
            line(&Line::Event(e.clone()))?;
        }
        for s in egress {
            line(&Line::Egress(Box::new(s.clone())))?;
        }
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        f.write_all(&text)?;
        f.sync_data()?;
        self.lines += n;
        Ok(())
    }

    /// What is parked, in the order it was.
    pub fn read(&self) -> std::io::Result<(Vec<Event>, Vec<Saved>)> {
        let (mut events, mut egress) = (Vec::new(), Vec::new());
        let f = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((events, egress)),
            Err(e) => return Err(e),
        };
        for (i, line) in BufReader::new(f).split(b'\n').enumerate() {
            match serde_json::from_slice::<Line>(&line?) {
                Ok(Line::Event(e)) => events.push(e),
                Ok(Line::Egress(s)) => egress.push(*s),
                Err(e) => tracing::warn!(file = %self.path.display(), line = i + 1,
                    reason = %e, "skipping damaged record spool line"),
            }
        }
        Ok((events, egress))
    }

    /// The store took what was parked: the spool is emptied.
    pub fn clear(&mut self) -> std::io::Result<()> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        self.lines = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mac;
    use crate::record::{Kind, Who};

    #[test]
    fn parked_records_read_back_in_order_after_a_crash_and_go_when_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spool::open(dir.path());
        assert!(s.is_empty());
        let ev = |n: u8| Event {
            at: i64::from(n),
            who: Who::Mac(Mac([0x52, 0x54, 0, 0x46, 3, n])),
            kind: Kind::DhcpDiscover {
                answered: true,
                pxe: true,
                ipxe: false,
                pool: Some("lab".into()),
                arch: None,
            },
        };
        s.park(&[ev(1), ev(2)], &[]).unwrap();
        s.park(&[ev(3)], &[]).unwrap();
        // A crash: opened again, a line cut short at the end skipped.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(SPOOL))
            .unwrap();
        f.write_all(b"{\"event\":{\"at\":").unwrap();
        let mut s = Spool::open(dir.path());
        assert!(!s.is_empty());
        let (events, egress) = s.read().unwrap();
        assert_eq!(events, [ev(1), ev(2), ev(3)]);
        assert!(egress.is_empty());
        s.clear().unwrap();
        assert!(s.is_empty() && Spool::open(dir.path()).is_empty());
        assert_eq!(s.read().unwrap().0, []);
    }
}

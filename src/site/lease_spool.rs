//! The lease changes a member has not yet written to the site's table, on disk
//! (`state_dir/leases.spool` for DHCPv4's `lease_rows::Change`, `state_dir/leases6.spool`
//! for DHCPv6's `lease6_rows::Change6`): one JSON line per change, appended and
//! synced with the lease journal before the answers that made them leave, so a member killed
//! with -9 sends them when it comes back. The writer takes what is pending, sends it, and
//! marks it done; the file is then rewritten with what is still pending (empty, most often).
//! Of several changes to one row only the last is sent. A damaged line (a crash mid-append)
//! is skipped with a warning naming the file and the line.

use super::lease_rows::Change;
use super::lease6_rows::Change6;
use crate::config::Mac;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

pub const SPOOL: &str = "leases.spool";
pub const SPOOL6: &str = "leases6.spool";

/// A change a spool keeps: the row it is about, and whether it writes one or deletes it.
pub trait Spooled: Serialize + DeserializeOwned + Clone {
    type Key: Ord + Clone;
    /// The spool's file in `state_dir`.
    const FILE: &'static str;
    fn key(&self) -> Self::Key;
    fn is_put(&self) -> bool;
}

impl Spooled for Change {
    type Key = (Mac, String);
    const FILE: &'static str = SPOOL;
    fn key(&self) -> (Mac, String) {
        Change::key(self)
    }
    fn is_put(&self) -> bool {
        matches!(self, Change::Put(_))
    }
}

impl Spooled for Change6 {
    type Key = Mac;
    const FILE: &'static str = SPOOL6;
    fn key(&self) -> Mac {
        Change6::key(self)
    }
    fn is_put(&self) -> bool {
        matches!(self, Change6::Put(_))
    }
}

/// The spool: its file and the changes it holds, the last per row.
pub struct Spool<C: Spooled = Change> {
    path: PathBuf,
    file: std::fs::File,
    /// By row (DHCPv4: client and subnet; DHCPv6: client): the change and its number, so
    /// that a change made while an earlier one to the same row was being sent is not marked
    /// done with it.
    pending: BTreeMap<C::Key, (u64, C)>,
    next: u64,
}

impl<C: Spooled> Spool<C> {
    /// Opens (or makes) the spool in `dir` with the changes it holds.
    pub fn open(dir: &Path) -> std::io::Result<Spool<C>> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(C::FILE);
        let mut spool = Spool {
            file: append(&path)?,
            path,
            pending: BTreeMap::new(),
            next: 0,
        };
        let lines = BufReader::new(std::fs::File::open(&spool.path)?).split(b'\n');
        for (i, line) in lines.enumerate() {
            let line = line?;
            match serde_json::from_slice::<C>(&line) {
                Ok(c) => spool.keep(c),
                Err(e) => tracing::warn!(file = %spool.path.display(), line = i + 1,
                    reason = %e, "skipping damaged lease spool line"),
            }
        }
        Ok(spool)
    }

    fn keep(&mut self, change: C) {
        self.next += 1;
        self.pending.insert(change.key(), (self.next, change));
    }

    /// Appends `changes` and syncs them.
    pub fn add(&mut self, changes: Vec<C>) -> std::io::Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut text = Vec::new();
        for c in &changes {
            serde_json::to_writer(&mut text, c).map_err(std::io::Error::other)?;
            text.push(b'\n');
        }
        self.file.write_all(&text)?;
        self.file.sync_data()?;
        for c in changes {
            self.keep(c);
        }
        Ok(())
    }

    /// What is pending, deletes first (a delete frees an address a put may take), each with
    /// the number `done` takes back.
    pub fn pending(&self) -> Vec<(u64, C)> {
        let mut all: Vec<(u64, C)> = self.pending.values().cloned().collect();
        all.sort_by_key(|(n, c)| (c.is_put(), *n));
        all
    }

    /// How many changes wait.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The changes numbered `sent` reached the table (or were refused for good): they leave
    /// the spool, unless a newer change to the same row came since; the file is rewritten
    /// with what is left.
    pub fn done(&mut self, sent: &[(u64, C)]) -> std::io::Result<()> {
        let before = self.pending.len();
        for (n, c) in sent {
            if self.pending.get(&c.key()).is_some_and(|(m, _)| m == n) {
                self.pending.remove(&c.key());
            }
        }
        if self.pending.len() == before {
            return Ok(());
        }
        let tmp = self.path.with_extension("spool.tmp");
        let mut text = Vec::new();
        for (_, c) in self.pending.values() {
            serde_json::to_writer(&mut text, c).map_err(std::io::Error::other)?;
            text.push(b'\n');
        }
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&text)?;
            f.sync_data()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        self.file = append(&self.path)?;
        Ok(())
    }
}

fn append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// Writes `pending` (a spool's changes, in its order) through `write` until one fails: the
/// changes written, and the error that stopped the rest (they stay spooled).
pub async fn write_in_order<C: Clone, Fut>(
    pending: Vec<(u64, C)>,
    mut write: impl FnMut(C) -> Fut,
) -> (Vec<(u64, C)>, Option<anyhow::Error>)
where
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut done = Vec::new();
    for (n, change) in pending {
        if let Err(e) = write(change.clone()).await {
            return (done, Some(e));
        }
        done.push((n, change));
    }
    (done, None)
}

/// Logs how one send to `table` went: `sent` changes written, `left` still spooled, and the
/// error that stopped it (warned at most as often as `down` lets).
pub fn say_sent(
    table: &str,
    sent: usize,
    left: usize,
    failed: Option<anyhow::Error>,
    down: &crate::log_limit::LogLimit,
) {
    if let Some(e) = failed {
        if let Some(suppressed) = down.allow() {
            tracing::warn!(error = %format!("{e:#}"), spooled = left, suppressed,
                "{table} not written; the changes stay spooled");
        }
    } else if sent > 0 {
        tracing::debug!(sent, "lease spool written to {table}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::lease_rows::Row;
    use std::net::Ipv4Addr;

    fn put(n: u8, expires: u64) -> Change {
        Change::Put(Row {
            mac: Mac([0x52, 0x54, 0, 0x46, 2, n]),
            subnet: "10.46.2.0/24".into(),
            ip: Ipv4Addr::new(10, 46, 2, n),
            expires,
            link: None,
            member: "a".into(),
        })
    }
    fn delete(n: u8) -> Change {
        Change::Delete {
            mac: Mac([0x52, 0x54, 0, 0x46, 2, n]),
            subnet: "10.46.2.0/24".into(),
        }
    }
    fn changes(s: &Spool) -> Vec<Change> {
        s.pending().into_iter().map(|(_, c)| c).collect()
    }

    #[test]
    fn what_was_added_survives_a_crash_and_only_the_last_change_to_a_row_is_sent() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spool::<Change>::open(dir.path()).unwrap();
        s.add(vec![put(1, 10), put(2, 10)]).unwrap();
        s.add(vec![put(1, 20), delete(3)]).unwrap();
        // Deletes first, then the puts, the last of each row.
        assert_eq!(changes(&s), [delete(3), put(2, 10), put(1, 20)]);
        // Dropped without a word (kill -9): all there, and a line cut short skipped.
        drop(s);
        let path = dir.path().join(SPOOL);
        let mut f = append(&path).unwrap();
        f.write_all(b"{\"op\":\"put\",\"mac\":").unwrap();
        let mut s = Spool::<Change>::open(dir.path()).unwrap();
        assert_eq!(changes(&s), [delete(3), put(2, 10), put(1, 20)]);
        // A send of what was pending, while row 2 changed again: row 2 stays.
        let sent = s.pending();
        s.add(vec![put(2, 30)]).unwrap();
        s.done(&sent).unwrap();
        assert_eq!(changes(&s), [put(2, 30)]);
        assert_eq!(s.len(), 1);
        // Rewritten: what is left, and appending goes on after it.
        s.add(vec![put(4, 1)]).unwrap();
        let back = Spool::<Change>::open(dir.path()).unwrap();
        assert_eq!(changes(&back), [put(2, 30), put(4, 1)]);
        let sent = s.pending();
        s.done(&sent).unwrap();
        assert!(s.is_empty());
        assert!(Spool::<Change>::open(dir.path()).unwrap().is_empty());
        assert_eq!(std::fs::read(&path).unwrap(), b"");
    }

    /// DHCPv6's changes keep a spool of their own beside DHCPv4's, one row per client.
    #[test]
    fn dhcp6_changes_have_their_own_file_and_rows_by_client() {
        use crate::site::lease6_rows::Row6;
        let dir = tempfile::tempdir().unwrap();
        let row = |n: u8, expires: u64| {
            Change6::Put(Row6 {
                mac: Mac([0x52, 0x54, 0, 0x46, 6, n]),
                addr: format!("fd46::{n}").parse().unwrap(),
                expires,
                duid: String::new(),
                member: "a".into(),
            })
        };
        let mut s = Spool::<Change6>::open(dir.path()).unwrap();
        s.add(vec![row(1, 10), row(2, 10), row(1, 20)]).unwrap();
        s.add(vec![Change6::Delete {
            mac: Mac([0x52, 0x54, 0, 0x46, 6, 2]),
        }])
        .unwrap();
        drop(s);
        assert!(dir.path().join(SPOOL6).exists() && !dir.path().join(SPOOL).exists());
        let back = Spool::<Change6>::open(dir.path()).unwrap();
        let left: Vec<Change6> = back.pending().into_iter().map(|(_, c)| c).collect();
        assert_eq!(
            left,
            [
                Change6::Delete {
                    mac: Mac([0x52, 0x54, 0, 0x46, 6, 2])
                },
                row(1, 20)
            ]
        );
    }
}

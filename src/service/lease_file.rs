//! The lease table on disk: a snapshot (`leases.json`) plus an append-only journal
//! (`leases.journal`) of what changed since. A batch of DHCP answers appends one line per lease
//! it changed and syncs once before its ACKs leave, so a burst costs a few hundred bytes, not a
//! rewrite of the whole table. When the journal outgrows the table it is folded into a new
//! snapshot.
//!
//! Crash safety: the snapshot names the journal generation that follows it, and a journal
//! starts with its generation. A journal from before the last snapshot (a crash between the
//! snapshot's rename and the journal's reset) is therefore ignored, never replayed over newer
//! state. A line cut short by a crash is the last one and is skipped.
//!
//! Damage: any journal line that is not a lease line (bytes that are not UTF-8, JSON cut short,
//! garbage) is skipped with a warning naming the file and the line, and the rest is loaded; a
//! damaged header makes the whole journal unusable (which snapshot it follows is unknown), so
//! it is skipped the same way. A journal with damaged lines is kept as `leases.journal.damaged`
//! before the fresh snapshot replaces it. A damaged snapshot is an error naming the file and saying to move
//! it aside: an empty table is not assumed without being asked for, because addresses the lost
//! leases held could then be handed to other clients.

use crate::boot::leases::{Lease, Leases, Saved, SavedLease};
use crate::config::Mac;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

pub const SNAPSHOT: &str = "leases.json";
pub const JOURNAL: &str = "leases.journal";
/// Where a journal with damaged lines is kept once what it held was loaded.
pub const DAMAGED_JOURNAL: &str = "leases.journal.damaged";
/// A journal this many lines longer than the table is folded into a snapshot.
const SLACK_LINES: usize = 4096;

/// One journal line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Line {
    /// Starts a journal: which snapshot it follows.
    Generation {
        generation: u64,
    },
    Lease(SavedLease),
    /// The MAC no longer has an entry.
    Forget {
        mac: String,
    },
    Declined {
        ip: Ipv4Addr,
        until: u64,
    },
}

/// The files, and the table as they hold it (to know what a commit must add).
pub struct LeaseFile {
    dir: PathBuf,
    journal: std::fs::File,
    generation: u64,
    lines: usize,
    on_disk: BTreeMap<Mac, Lease>,
    declined_on_disk: BTreeMap<Ipv4Addr, u64>,
}

/// What the snapshot and journal in `dir` say, merged (for loading and for tests).
pub fn read(dir: &Path) -> std::io::Result<Saved> {
    Ok(read_with_generation(dir)?.0)
}

/// The merged table, its generation, and how many journal lines were damaged.
fn read_with_generation(dir: &Path) -> std::io::Result<(Saved, u64, usize)> {
    let path = dir.join(SNAPSHOT);
    let snapshot: Saved = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{} is damaged ({e}); move it aside to start with an empty lease table \
                     (clients may then be offered addresses others still hold)",
                    path.display()
                ),
            )
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Saved::default(),
        Err(e) => {
            return Err(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", path.display()),
            ));
        }
    };
    let generation = snapshot.journal;
    let mut leases: BTreeMap<String, SavedLease> = snapshot
        .leases
        .into_iter()
        .map(|l| (l.mac.clone(), l))
        .collect();
    let mut declined: BTreeMap<Ipv4Addr, u64> = snapshot.declined.into_iter().collect();
    let path = dir.join(JOURNAL);
    let mut bad = 0;
    let mut damaged = |line: usize, reason: &str| {
        bad += 1;
        tracing::warn!(file = %path.display(), line, %reason, "skipping damaged lease journal line");
    };
    match std::fs::File::open(&path) {
        Ok(f) => {
            let mut lines = BufReader::new(f).split(b'\n').enumerate();
            let io = |e: std::io::Error| {
                std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
            };
            let follows = match lines.next() {
                None => false,
                Some((_, line)) => match parse(&line.map_err(io)?) {
                    Ok(Line::Generation { generation: g }) => g == generation,
                    Ok(_) => {
                        damaged(1, "not a generation line; the journal is skipped");
                        false
                    }
                    Err(e) => {
                        damaged(1, &format!("{e}; the journal is skipped"));
                        false
                    }
                },
            };
            if follows {
                for (i, line) in lines {
                    match parse(&line.map_err(io)?) {
                        Ok(Line::Lease(l)) => {
                            leases.insert(l.mac.clone(), l);
                        }
                        Ok(Line::Forget { mac }) => {
                            leases.remove(&mac);
                        }
                        Ok(Line::Declined { ip, until }) => {
                            declined.insert(ip, until);
                        }
                        Ok(Line::Generation { .. }) => {}
                        Err(e) => damaged(i + 1, &e),
                    }
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", path.display()),
            ));
        }
    }
    let saved = Saved {
        leases: leases.into_values().collect(),
        declined: declined.into_iter().collect(),
        journal: generation,
    };
    Ok((saved, generation, bad))
}

/// One journal line, or why it is not one.
fn parse(line: &[u8]) -> Result<Line, String> {
    let text = std::str::from_utf8(line).map_err(|e| format!("not UTF-8 ({e})"))?;
    serde_json::from_str(text).map_err(|e| e.to_string())
}

impl LeaseFile {
    /// Opens the files in `dir` and loads what they hold into `table` (see `Leases::restore`);
    /// returns the file and the number of saved entries and of entries skipped.
    pub fn open(dir: &Path, table: &mut Leases) -> std::io::Result<(LeaseFile, usize, usize)> {
        std::fs::create_dir_all(dir)?;
        let (saved, generation, damaged) = read_with_generation(dir)?;
        if damaged > 0 {
            // The snapshot below replaces the journal: keep the damaged one to look at.
            let (from, to) = (dir.join(JOURNAL), dir.join(DAMAGED_JOURNAL));
            std::fs::rename(&from, &to)?;
            tracing::warn!(lines = damaged, kept = %to.display(), "lease journal was damaged; loaded the rest");
        }
        let count = saved.leases.len();
        let skipped = table.restore(saved);
        // Start from a fresh snapshot of what was loaded: the journal begins empty.
        let mut file = LeaseFile {
            dir: dir.to_path_buf(),
            journal: std::fs::File::open("/dev/null")?,
            generation,
            lines: 0,
            on_disk: BTreeMap::new(),
            declined_on_disk: BTreeMap::new(),
        };
        file.snapshot(table)?;
        Ok((file, count, skipped))
    }

    /// Makes `table` durable: appends what changed since the last commit and syncs.
    pub fn commit(&mut self, table: &Leases) -> std::io::Result<()> {
        let mut text = Vec::new();
        let mut line = |l: &Line| {
            serde_json::to_writer(&mut text, l).expect("lease lines serialise");
            text.push(b'\n');
        };
        // The leases that changed, to bring `on_disk` up to date once their lines are durable
        // (not a copy of the whole table per batch).
        let mut changed: Vec<(Mac, Option<Lease>)> = Vec::new();
        for (mac, lease) in table.iter() {
            if self.on_disk.get(mac) != Some(lease) {
                line(&Line::Lease(saved_lease(*mac, lease)));
                changed.push((*mac, Some(lease.clone())));
            }
        }
        for mac in self.on_disk.keys() {
            if table.get(*mac).is_none() {
                line(&Line::Forget {
                    mac: mac.to_string(),
                });
                changed.push((*mac, None));
            }
        }
        let mut declined = 0;
        for (ip, until) in table.declined() {
            if self.declined_on_disk.get(&ip) != Some(&until) {
                line(&Line::Declined { ip, until });
                declined += 1;
            }
        }
        let n = changed.len() + declined;
        if n == 0 {
            return Ok(());
        }
        if self.lines + n > table.len() + SLACK_LINES {
            return self.snapshot(table);
        }
        self.journal.write_all(&text)?;
        self.journal.sync_data()?;
        self.lines += n;
        for (mac, lease) in changed {
            match lease {
                Some(l) => self.on_disk.insert(mac, l),
                None => self.on_disk.remove(&mac),
            };
        }
        // Declined addresses are a handful: copied whole (ended quarantines leave it this way).
        self.declined_on_disk = table.declined().collect();
        Ok(())
    }

    /// Writes the whole table as the next snapshot and starts an empty journal after it.
    pub fn snapshot(&mut self, table: &Leases) -> std::io::Result<()> {
        let next = self.generation + 1;
        let mut saved = table.to_saved();
        saved.journal = next;
        let json = serde_json::to_vec_pretty(&saved).map_err(std::io::Error::other)?;
        let path = self.dir.join(SNAPSHOT);
        write_atomically(&path, &json)?;
        // Once the snapshot says `next`, the old journal is ignored: replace it.
        let header = serde_json::to_vec(&Line::Generation { generation: next })
            .map_err(std::io::Error::other)?;
        let journal_path = self.dir.join(JOURNAL);
        write_atomically(&journal_path, &[header.as_slice(), b"\n"].concat())?;
        self.journal = std::fs::OpenOptions::new()
            .append(true)
            .open(&journal_path)?;
        self.generation = next;
        self.lines = 0;
        self.remember(table);
        Ok(())
    }

    fn remember(&mut self, table: &Leases) {
        self.on_disk = table.iter().map(|(m, l)| (*m, l.clone())).collect();
        self.declined_on_disk = table.declined().collect();
    }
}

fn saved_lease(mac: Mac, l: &Lease) -> SavedLease {
    SavedLease {
        mac: mac.to_string(),
        ip: l.ip,
        state: l.state,
        expires: l.expires,
        link: l.link,
        arch: l.arch,
        relayed: l.relayed.clone(),
    }
}

/// Writes next to the final name, syncs and renames over it: a reader or a restart after a
/// crash sees the old file or the new one, never half of one.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boot::leases::State;

    fn mac(n: u8) -> Mac {
        Mac([0x52, 0x54, 0, 0x11, 0, n])
    }

    const RANGE: (Ipv4Addr, Ipv4Addr) = (Ipv4Addr::new(10, 0, 0, 10), Ipv4Addr::new(10, 0, 0, 250));

    fn table() -> Leases {
        Leases::new(vec![RANGE], [])
    }

    /// The one subnet the table gives from.
    fn net() -> crate::config::DhcpSubnet {
        crate::config::DhcpSubnet {
            subnet: "10.0.0.0/24".parse().unwrap(),
            range: Some(RANGE),
            router: None,
            dns: Vec::new(),
            lease: std::time::Duration::from_secs(3600),
            uplink_mbps: None,
        }
    }

    #[test]
    fn commits_are_appended_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = table();
        let (mut file, count, _) = LeaseFile::open(dir.path(), &mut t).unwrap();
        assert_eq!(count, 0);
        for n in 1..=20 {
            let ip = t.offer(mac(n), None, &net(), 100, 60).unwrap();
            t.ack(mac(n), ip, &net(), 100, 3600).unwrap();
            file.commit(&t).unwrap();
        }
        t.release(mac(3), t.get(mac(3)).unwrap().ip, 200);
        file.commit(&t).unwrap();
        // The snapshot is the empty table; the journal holds the rest.
        let snapshot: Saved =
            serde_json::from_slice(&std::fs::read(dir.path().join(SNAPSHOT)).unwrap()).unwrap();
        assert!(snapshot.leases.is_empty());
        let journal = std::fs::read_to_string(dir.path().join(JOURNAL)).unwrap();
        assert_eq!(journal.lines().count(), 1 + 20 + 1);
        let mut again = table();
        LeaseFile::open(dir.path(), &mut again).unwrap();
        assert_eq!(again.to_saved().leases, t.to_saved().leases);
        assert_eq!(again.get(mac(3)).unwrap().state, State::Free);
    }

    /// A table and its files in `dir`, with one lease bound and committed.
    fn one_bound(dir: &Path) -> (Leases, LeaseFile, Ipv4Addr) {
        let mut t = table();
        let (mut file, _, _) = LeaseFile::open(dir, &mut t).unwrap();
        let ip = t.offer(mac(1), None, &net(), 100, 60).unwrap();
        t.ack(mac(1), ip, &net(), 100, 3600).unwrap();
        file.commit(&t).unwrap();
        (t, file, ip)
    }

    #[test]
    fn a_torn_last_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let (_, file, ip) = one_bound(dir.path());
        drop(file);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(JOURNAL))
            .unwrap();
        f.write_all(b"{\"op\":\"lease\",\"mac\":\"52:5").unwrap();
        let saved = read(dir.path()).unwrap();
        assert_eq!(saved.leases.len(), 1);
        assert_eq!(saved.leases[0].ip, ip);
    }

    #[test]
    fn damaged_journal_lines_are_skipped_and_the_rest_is_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let (mut t, mut file, _) = one_bound(dir.path());
        let path = dir.path().join(JOURNAL);
        let append = |bytes: &[u8]| {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(bytes).unwrap();
        };
        append(b"\xff\xfe{\"op\":\"lease\"}\n");
        append(b"{\"op\":\"lease\",\"mac\":\"52:5\n");
        append(b"\x00\x01garbage\n\n");
        // A lease committed after the damage is still read.
        let ip = t.offer(mac(2), None, &net(), 100, 60).unwrap();
        t.ack(mac(2), ip, &net(), 100, 3600).unwrap();
        file.commit(&t).unwrap();
        drop(file);
        let mut again = table();
        let (_, count, _) = LeaseFile::open(dir.path(), &mut again).unwrap();
        assert_eq!(count, 2);
        assert_eq!(again.to_saved().leases, t.to_saved().leases);
        let kept = std::fs::read(dir.path().join(DAMAGED_JOURNAL)).unwrap();
        assert!(kept.windows(7).any(|w| w == b"garbage"));
    }

    #[test]
    fn a_damaged_journal_header_skips_the_journal_but_keeps_the_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let (t, mut file, _) = one_bound(dir.path());
        file.snapshot(&t).unwrap();
        drop(file);
        let path = dir.path().join(JOURNAL);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] = 0xff;
        std::fs::write(&path, bytes).unwrap();
        let saved = read(dir.path()).unwrap();
        assert_eq!(saved.leases, t.to_saved().leases);
    }

    #[test]
    fn a_damaged_snapshot_is_an_error_naming_the_file_and_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let (_, file, _) = one_bound(dir.path());
        drop(file);
        let path = dir.path().join(SNAPSHOT);
        for bytes in [&b"{\"leases\": [{\"mac\""[..], b"\xff\xfe\x00", b""] {
            std::fs::write(&path, bytes).unwrap();
            let e = LeaseFile::open(dir.path(), &mut table()).err().unwrap();
            let e = e.to_string();
            assert!(e.contains(&path.display().to_string()), "{e}");
            assert!(e.contains("move it aside"), "{e}");
            // Nothing was overwritten: the damaged file is there to look at.
            assert_eq!(std::fs::read(&path).unwrap(), bytes);
        }
    }

    #[test]
    fn a_journal_older_than_the_snapshot_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let (mut t, mut file, ip) = one_bound(dir.path());
        let old_journal = std::fs::read(dir.path().join(JOURNAL)).unwrap();
        // The client releases; a snapshot is taken; then a crash leaves the old journal.
        t.release(mac(1), ip, 200);
        file.snapshot(&t).unwrap();
        std::fs::write(dir.path().join(JOURNAL), old_journal).unwrap();
        let saved = read(dir.path()).unwrap();
        assert_eq!(saved.leases[0].state, State::Free);
    }

    #[test]
    fn a_long_journal_is_folded_into_a_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = table();
        let (mut file, _, _) = LeaseFile::open(dir.path(), &mut t).unwrap();
        let ips: Vec<Ipv4Addr> = (1..=50)
            .map(|n| t.offer(mac(n), None, &net(), 0, 60).unwrap())
            .collect();
        // 50 changed leases a commit: the journal passes the table's size plus the slack.
        let rounds = (SLACK_LINES / 50 + 2) as u64;
        for now in 0..rounds {
            for (n, ip) in (1..=50).zip(&ips) {
                t.ack(mac(n), *ip, &net(), now, 3600).unwrap();
            }
            file.commit(&t).unwrap();
        }
        let journal = std::fs::read_to_string(dir.path().join(JOURNAL)).unwrap();
        assert!(
            journal.lines().count() < SLACK_LINES / 2,
            "{}",
            journal.lines().count()
        );
        let saved = read(dir.path()).unwrap();
        assert_eq!(saved.leases.len(), 50);
        assert!(saved.leases.iter().all(|l| l.expires == rounds - 1 + 3600));
    }
}

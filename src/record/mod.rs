//! Boot records: services send typed events through a `Recorder`; one writer task ties them to
//! clients and boots (`timeline`), appends them to `events.jsonl` in the state folder and keeps
//! the boots in memory for the API. Recording never blocks a boot: the channel is bounded and
//! what does not fit is counted as dropped.
//!
//! The journal is replayed at start, so a daemon killed with -9 comes back with its records,
//! losing at most the batch it was writing.

pub mod egress;
pub mod event;
pub mod report;
pub mod timeline;
pub mod view;
pub mod wave;

pub use event::{Event, FileKind, Kind, Outcome, Proto, Who};
pub use timeline::{Boot, BootResult, Phase, Timelines};

use crate::shutdown::Shutdown;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use tokio::sync::mpsc;

const CHANNEL: usize = 65_536;
const BATCH: usize = 4096;
const JOURNAL: &str = "events.jsonl";

/// The sending side, cloned into every service.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Event>,
    counters: Arc<Counters>,
}

#[derive(Default, Debug)]
pub struct Counters {
    /// Events that did not fit in the channel.
    pub dropped: AtomicU64,
    /// Events that named an IP no DHCP ACK had given out.
    pub untied: AtomicU64,
    /// Events recorded.
    pub recorded: AtomicU64,
    /// Payload bytes recorded, per protocol (indexed by `proto_index`).
    proto_bytes: [AtomicU64; 5],
}

const PROTOS: [Proto; 5] = [
    Proto::Dhcp,
    Proto::Tftp,
    Proto::Http,
    Proto::Nfs,
    Proto::Nbd,
];

impl Counters {
    fn add_bytes(&self, proto: Proto, n: u64) {
        let i = PROTOS.iter().position(|p| *p == proto).unwrap_or(0);
        self.proto_bytes[i].fetch_add(n, Ordering::Relaxed);
    }

    /// Payload bytes recorded so far, per protocol.
    pub fn proto_totals(&self) -> std::collections::BTreeMap<Proto, u64> {
        PROTOS
            .iter()
            .zip(&self.proto_bytes)
            .map(|(p, n)| (*p, n.load(Ordering::Relaxed)))
            .collect()
    }
}

impl Recorder {
    /// Records an event now; never waits.
    pub fn record(&self, who: Who, kind: Kind) {
        self.send(Event::now(who, kind));
    }

    pub fn send(&self, ev: Event) {
        if self.tx.try_send(ev).is_err() {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A recorder whose events go nowhere, for code under test that needs one.
    pub fn discard() -> Recorder {
        let (tx, _) = mpsc::channel(1);
        Recorder {
            tx,
            counters: Arc::default(),
        }
    }
}

/// What has been recorded, shared with the API.
pub struct Records {
    timelines: RwLock<Timelines>,
    pub counters: Arc<Counters>,
    /// Every boot that changed, as it is after the change (for the live stream).
    pub changes: tokio::sync::broadcast::Sender<view::BootView>,
}

impl Records {
    /// Calls `f` with the current timelines.
    pub fn read<T>(&self, f: impl FnOnce(&Timelines) -> T) -> T {
        f(&self.timelines.read().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Opens (and replays) the journal in `state_dir` and starts the writer task.
pub fn start(state_dir: &Path, shutdown: &Shutdown) -> std::io::Result<(Recorder, Arc<Records>)> {
    std::fs::create_dir_all(state_dir)?;
    let path = state_dir.join(JOURNAL);
    let mut timelines = Timelines::default();
    let replayed = replay(&path, &mut timelines)?;
    if replayed > 0 {
        tracing::info!(
            events = replayed,
            boots = timelines.boots().len(),
            "records replayed"
        );
    }
    let counters = Arc::new(Counters::default());
    let (changes, _) = tokio::sync::broadcast::channel(1024);
    let records = Arc::new(Records {
        timelines: RwLock::new(timelines),
        counters: counters.clone(),
        changes,
    });
    let (tx, rx) = mpsc::channel(CHANNEL);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    let writer = Writer {
        rx,
        file,
        path,
        records: records.clone(),
    };
    shutdown.spawn(writer.run(shutdown.clone()));
    Ok((Recorder { tx, counters }, records))
}

/// Reads the records in `state_dir` without starting a writer (for `bootpool report`).
pub fn load(state_dir: &Path) -> std::io::Result<Timelines> {
    let mut timelines = Timelines::default();
    replay(&state_dir.join(JOURNAL), &mut timelines)?;
    Ok(timelines)
}

fn replay(path: &Path, timelines: &mut Timelines) -> std::io::Result<usize> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut n = 0;
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line?;
        // A line cut short by a crash is the only damage a kill can do: skip it.
        match serde_json::from_str::<Event>(&line) {
            Ok(ev) => {
                timelines.apply(&ev);
                n += 1;
            }
            Err(e) => tracing::warn!(line = i + 1, error = %e, "skipping damaged journal line"),
        }
    }
    Ok(n)
}

struct Writer {
    rx: mpsc::Receiver<Event>,
    file: std::fs::File,
    path: PathBuf,
    records: Arc<Records>,
}

impl Writer {
    async fn run(mut self, shutdown: Shutdown) {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let n = tokio::select! {
                n = self.rx.recv_many(&mut batch, BATCH) => n,
                _ = shutdown.wait() => {
                    // Take what is already queued, then stop.
                    while let Ok(ev) = self.rx.try_recv() { batch.push(ev); }
                    self.write(&mut batch);
                    return;
                }
            };
            if n == 0 {
                return;
            }
            self.write(&mut batch);
        }
    }

    fn write(&mut self, batch: &mut Vec<Event>) {
        if batch.is_empty() {
            return;
        }
        let mut text = Vec::with_capacity(batch.len() * 128);
        let counters = &self.records.counters;
        let mut touched = std::collections::BTreeSet::new();
        {
            let mut t = self
                .records
                .timelines
                .write()
                .unwrap_or_else(|e| e.into_inner());
            for ev in batch.iter() {
                if !t.apply(ev) {
                    counters.untied.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                counters.recorded.fetch_add(1, Ordering::Relaxed);
                match &ev.kind {
                    Kind::File { proto, bytes, .. } | Kind::RootRead { proto, bytes } => {
                        counters.add_bytes(*proto, *bytes)
                    }
                    _ => {}
                }
                touched.extend(t.mac_for(ev.who));
                if serde_json::to_writer(&mut text, ev).is_ok() {
                    text.push(b'\n');
                }
            }
            // Nobody listening is fine: the stream is for dashboards that are open.
            for mac in touched {
                if let Some(b) = t.current(mac) {
                    let _ = self.records.changes.send(view::BootView::of(b));
                }
            }
        }
        if let Err(e) = self.file.write_all(&text).and_then(|_| self.file.flush()) {
            tracing::error!(path = %self.path.display(), error = %e, "cannot write boot journal");
        }
        batch.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mac;

    #[tokio::test]
    async fn records_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mac: Mac = "52:54:00:77:00:01".parse().unwrap();
        let ip = "10.77.0.100".parse().unwrap();
        {
            let shutdown = Shutdown::new();
            let (rec, _) = start(dir.path(), &shutdown).unwrap();
            rec.record(
                Who::Mac(mac),
                Kind::DhcpDiscover {
                    pxe: true,
                    ipxe: true,
                },
            );
            rec.record(
                Who::Mac(mac),
                Kind::DhcpAck {
                    ip,
                    pxe: true,
                    ipxe: true,
                    pool: "p".into(),
                },
            );
            rec.record(
                Who::Ip(ip),
                Kind::Booted {
                    uptime_s: Some(3.5),
                    root_bytes: None,
                },
            );
            shutdown.stop_and_wait().await;
        }
        // Simulate a crash mid-write: a torn last line.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(JOURNAL))
            .unwrap();
        f.write_all(b"{\"at\":12,\"who\":{\"mac\":\"52:5").unwrap();
        let shutdown = Shutdown::new();
        let (_, records) = start(dir.path(), &shutdown).unwrap();
        let boots = records.read(|t| t.boots().to_vec());
        assert_eq!(boots.len(), 1);
        assert_eq!(boots[0].result, BootResult::Booted);
        assert_eq!(boots[0].uptime_s, Some(3.5));
        shutdown.stop_and_wait().await;
    }
}

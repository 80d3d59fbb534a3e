//! The swarm's faults in the storm (issue 48 part 3): a share of the room switched off
//! mid-boot (`--swarm-cut`), a share sending slowly (`--swarm-slow`), and peers that send
//! wrong bytes (`--swarm-corrupt`). Which clients: spread evenly over the room (`chosen`), so
//! each link and each stretch of the arrival order loses its part. A cut client's agent is
//! killed with -9 a set time after it started and its switch port taken down at once
//! (`Cutter`): its peers see silence, not a closed connection, as from a PC whose power went.
//! A slow client's own side of its port is shaped lower (mod.rs, as its link comes up). A
//! corrupting client, once its lease and boot script are in, runs `Rogue` instead of the
//! agent: it tells the tracker it holds every chunk and answers every peer's request with the
//! chunk's length of wrong bytes; it does not boot, and is counted apart.

use anyhow::Context as _;
use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader, Write as _};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

/// How often a rogue tells the tracker again that it holds everything (agents report at
/// least every 10 s; the tracker forgets a peer silent for 60 s).
const ROGUE_REPORT_EVERY: Duration = Duration::from_secs(2);

/// What a rogue's boot ends with (its outcome's error).
pub const ROGUE: &str = "a corrupting peer: it served wrong bytes to its room and did not boot";

/// Requests the storm's rogues answered with wrong bytes, all of them together.
pub static ROGUE_ANSWERS: LazyLock<Arc<AtomicU64>> = LazyLock::new(Arc::default);

/// Plays a corrupting peer in the calling thread's namespace (a client's, with its lease):
/// serves `GET /chunks/...` on 0.0.0.0:`port` with `chunk` wrong bytes each, and tells the
/// tracker of the manifest at `blocks` (the boot script's first `bootpool.blocks=` URL) that
/// it holds all `chunks`, every `ROGUE_REPORT_EVERY`. Both run on threads of their own until
/// the storm's process ends; returns once it listens and the tracker took its first report.
pub fn rogue(blocks: &str, port: u16, chunks: u64, chunk: usize) -> anyhow::Result<()> {
    let listener = std::net::TcpListener::bind(("0.0.0.0", port))
        .with_context(|| format!("the rogue peer: binding port {port}"))?;
    serve_wrong_chunks(listener, chunk, ROGUE_ANSWERS.clone());
    let first = blocks.split(',').next().unwrap_or(blocks);
    let url = format!("{first}/where");
    let report = format!(
        "bootpool-swarm 1\nport {port}\nhave 0-{}\n",
        chunks.saturating_sub(1)
    );
    tell(&url, &report).context("the rogue peer's first report")?;
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(ROGUE_REPORT_EVERY);
            let _ = tell(&url, &report);
        }
    });
    Ok(())
}

/// A corrupting peer's server on `listener`, on threads of its own for as long as the process
/// runs: every request on every connection is answered with `chunk` bytes of 0x5a, counted in
/// `answered`. The storm's rogues run it; so do the tests of the agents' ban.
pub fn serve_wrong_chunks(listener: std::net::TcpListener, chunk: usize, answered: Arc<AtomicU64>) {
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let answered = answered.clone();
            std::thread::spawn(move || serve_wrong(s, chunk, &answered));
        }
    });
}

/// One peer's connection to a rogue: each request's head read, then `chunk` bytes of 0x5a.
fn serve_wrong(s: std::net::TcpStream, chunk: usize, answered: &AtomicU64) {
    let Ok(read) = s.try_clone() else {
        return;
    };
    let mut r = BufReader::new(read);
    let mut w = s;
    let body = vec![0x5a; chunk];
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
        }
        answered.fetch_add(1, Ordering::Relaxed);
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {chunk}\r\n\r\n");
        if w.write_all(head.as_bytes())
            .and_then(|()| w.write_all(&body))
            .is_err()
        {
            return;
        }
    }
}

/// POSTs a report to the tracker.
fn tell(url: &str, report: &str) -> anyhow::Result<()> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    agent
        .post(url)
        .send(report)
        .with_context(|| format!("POST {url}"))?;
    Ok(())
}

/// `share` of a room of `n` clients (rounded to the nearest whole client, at least one when
/// the share is above 0), spread evenly: the middle client of each of that many equal slices
/// of the room's indices.
pub fn chosen(n: usize, share: f64) -> BTreeSet<usize> {
    if n == 0 || share <= 0.0 {
        return BTreeSet::new();
    }
    spread(n, ((n as f64 * share).round() as usize).clamp(1, n), 0)
}

/// `m` of a room of `n` clients, the middle one of each of `m` equal slices of it, each moved
/// `shift` on (round the room): the rogues (`--swarm-corrupt`) sit one past the clients
/// `chosen` would switch off.
pub fn spread(n: usize, m: usize, shift: usize) -> BTreeSet<usize> {
    let m = m.min(n);
    (0..m)
        .map(|j| ((2 * j + 1) * n / (2 * m) + shift) % n)
        .collect()
}

/// The thread that switches the cut clients off, each once its agent has run `after`; stops
/// when dropped.
pub struct Cutter {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<usize>>>,
}

impl Cutter {
    /// Starts watching `agents` for the clients in `cut`. Must be called from the storm's own
    /// namespace, where the switch ports (`p{i}`) are.
    pub fn start(
        agents: Arc<super::swarm::Agents>,
        cut: BTreeSet<usize>,
        after: Duration,
    ) -> Cutter {
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut left = cut;
            let mut done = Vec::new();
            while !left.is_empty() && !halt.load(Ordering::Relaxed) {
                let now: Vec<usize> = left
                    .iter()
                    .copied()
                    .filter(|&i| agents.cut(i, after))
                    .collect();
                for i in now {
                    left.remove(&i);
                    if let Err(e) = super::room::ip(&[format!("link set p{i} down")]) {
                        eprintln!("storm: client {i}'s port not taken down: {e:#}");
                    }
                    done.push(i);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            done
        });
        Cutter {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops watching; the clients switched off, in the order they were.
    pub fn finish(mut self) -> Vec<usize> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Cutter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chosen_clients_are_spread_evenly_over_the_room() {
        assert_eq!(chosen(40, 0.1), [5, 15, 25, 35].into());
        assert_eq!(chosen(10, 0.1), [5].into());
        // A share of a small room is at least one client, and never more than the room.
        assert_eq!(chosen(6, 0.05), [3].into());
        assert_eq!(chosen(2, 0.5), [1].into());
        assert_eq!(chosen(120, 0.1).len(), 12);
        assert!(chosen(40, 0.0).is_empty());
        assert!(chosen(0, 0.5).is_empty());
        // The rogues sit one past them, round the room.
        assert_eq!(spread(40, 1, 1), [21].into());
        assert_eq!(spread(2, 1, 1), [0].into());
        assert!(spread(5, 0, 1).is_empty());
        assert_eq!(spread(3, 9, 0).len(), 3);
        // Every index is in the room, and each one once.
        for n in 1..200 {
            let c = chosen(n, 0.1);
            assert_eq!(c.len(), ((n as f64 * 0.1).round() as usize).clamp(1, n));
            assert!(c.iter().all(|&i| i < n));
        }
    }
}

//! The swarm's faults in the storm (issue 48 part 3): a share of the room switched off
//! mid-boot (`--swarm-cut`) and a share sending slowly (`--swarm-slow`). Which clients: spread
//! evenly over the room (`chosen`), so each link and each stretch of the arrival order loses
//! its part. A cut client's agent is killed with -9 a set time after it started and its switch
//! port taken down at once (`Cutter`): its peers see silence, not a closed connection, as from
//! a PC whose power went. A slow client's own side of its port is shaped lower (mod.rs, as
//! its link comes up).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// `share` of a room of `n` clients (rounded to the nearest whole client, at least one when
/// the share is above 0), spread evenly: the middle client of each of that many equal slices
/// of the room's indices.
pub fn chosen(n: usize, share: f64) -> BTreeSet<usize> {
    if n == 0 || share <= 0.0 {
        return BTreeSet::new();
    }
    let m = ((n as f64 * share).round() as usize).clamp(1, n);
    (0..m).map(|j| (2 * j + 1) * n / (2 * m)).collect()
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
        // Every index is in the room, and each one once.
        for n in 1..200 {
            let c = chosen(n, 0.1);
            assert_eq!(c.len(), ((n as f64 * 0.1).round() as usize).clamp(1, n));
            assert!(c.iter().all(|&i| i < n));
        }
    }
}

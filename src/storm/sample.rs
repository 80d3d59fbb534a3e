//! What the storm watches while it runs, ten times a second: each server link's egress
//! counter, and the CPU time and memory of every process in the room's namespace but the storm
//! itself (that is the server, whatever it is: bootpool, or dnsmasq with nfs-ganesha and
//! rpcbind).

use super::room::{self, Link};
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub const EVERY: Duration = Duration::from_millis(100);

/// One look at the room.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds from the storm's start.
    pub t: f64,
    /// Each link's egress counter, in bytes.
    pub tx: Vec<u64>,
    /// The server processes' CPU seconds (user + system) so far.
    pub cpu_s: f64,
    /// Their resident memory now, KiB.
    pub rss_kib: u64,
}

pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Sample>>,
}

impl Sampler {
    /// Starts sampling `links` and the namespace's processes other than `storm_pid`; times are
    /// seconds from `t0`.
    pub fn start(links: Vec<Link>, storm_pid: u32, t0: Instant) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut out = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let devs: Vec<&str> = links.iter().map(|l| l.dev.as_str()).collect();
                let tx = room::tx_bytes(&devs);
                let (cpu_s, rss_kib) = server_usage(storm_pid);
                out.push(Sample {
                    t: t0.elapsed().as_secs_f64(),
                    tx,
                    cpu_s,
                    rss_kib,
                });
                std::thread::sleep(EVERY);
            }
            out
        });
        Sampler { stop, thread }
    }

    pub fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// The inode of a process's network namespace.
fn netns_of(pid: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/net"))
        .ok()
        .map(|m| m.ino())
}

/// The processes in the storm's network namespace, the storm itself excepted.
pub fn room_pids(storm_pid: u32) -> Vec<libc::pid_t> {
    let Some(ns) = netns_of("self") else {
        return Vec::new();
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|&pid| pid as u32 != storm_pid && netns_of(&pid.to_string()) == Some(ns))
        .collect()
}

/// CPU seconds and RSS (KiB) of the processes in the namespace, the storm excepted.
fn server_usage(storm_pid: u32) -> (f64, u64) {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let (mut cpu, mut rss) = (0.0, 0);
    for pid in room_pids(storm_pid) {
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            && let Some((_, rest)) = stat.rsplit_once(')')
        {
            // Fields after the name: state is the first; utime and stime are 12th and 13th.
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            cpu += (ticks(11) + ticks(12)) / hz;
        }
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            rss += status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    (cpu, rss)
}

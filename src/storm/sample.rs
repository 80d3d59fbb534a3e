//! What the storm watches while it runs, ten times a second: each server link's egress
//! counter, the CPU time and memory of every process in the room's namespace but the storm
//! itself (that is the server, whatever it is: bootpool, or dnsmasq with nfs-ganesha and
//! rpcbind), and the UDP datagrams that namespace dropped on a full receive buffer (a client
//! reads its own namespace's at the end of its boot).

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
    /// The namespace's UDP receive-buffer drops so far (`udp_rcvbuf_errors`).
    pub udp_drops: u64,
    /// The machine's input-backlog drops so far (`backlog_drops`).
    pub backlog_drops: u64,
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
                    udp_drops: udp_rcvbuf_errors(),
                    backlog_drops: backlog_drops(),
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

/// UDP datagrams the calling thread's network namespace dropped because a socket's receive
/// buffer was full (`RcvbufErrors` of /proc/net/snmp): a DHCP or TFTP answer that arrived
/// but was never read.
pub fn udp_rcvbuf_errors() -> u64 {
    std::fs::read_to_string("/proc/thread-self/net/snmp")
        .ok()
        .and_then(|s| snmp_field(&s, "Udp:", "RcvbufErrors"))
        .unwrap_or(0)
}

/// Frames the kernel dropped because a CPU's input backlog was full (`net.core.
/// netdev_max_backlog`; the second column of /proc/net/softnet_stat, summed over CPUs). Every
/// frame the storm's bridge floods to a veth passes that backlog, so this is where the room's
/// switch loses frames, a broadcast DISCOVER flooded to every port among them. The count is
/// the whole machine's, not only the storm's namespaces.
pub fn backlog_drops() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat").map_or(0, |s| softnet_drops(&s))
}

fn softnet_drops(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|c| u64::from_str_radix(c, 16).ok())
        .sum()
}

/// A counter of /proc/net/snmp: its `proto` lines are a line of names, then one of values.
fn snmp_field(snmp: &str, proto: &str, name: &str) -> Option<u64> {
    let mut lines = snmp.lines().filter(|l| l.starts_with(proto));
    let (names, values) = (lines.next()?, lines.next()?);
    let i = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(i)?.parse().ok()
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
    let hz = crate::sys::process::clock_ticks().max(1) as f64;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softnet_drops_are_the_second_column_summed_over_cpus() {
        let text = "0001b4f2 00000041 0000003e 00000000\n11b67d86 0000019e 0000003d 00000000\n";
        assert_eq!(softnet_drops(text), 0x41 + 0x19e);
        assert_eq!(softnet_drops(""), 0);
    }

    #[test]
    fn snmp_counters_are_found_by_name() {
        let snmp = "\
Ip: Forwarding DefaultTTL
Ip: 1 64
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors
Udp: 120 3 17 118 15 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors
UdpLite: 0 0 0 0 0 0
";
        assert_eq!(snmp_field(snmp, "Udp:", "RcvbufErrors"), Some(15));
        assert_eq!(snmp_field(snmp, "Udp:", "InDatagrams"), Some(120));
        assert_eq!(snmp_field(snmp, "Udp:", "Nope"), None);
        assert_eq!(snmp_field("", "Udp:", "RcvbufErrors"), None);
        // This thread's namespace has the counter.
        assert!(
            std::fs::read_to_string("/proc/thread-self/net/snmp").is_ok_and(|s| snmp_field(
                &s,
                "Udp:",
                "RcvbufErrors"
            )
            .is_some())
        );
    }
}

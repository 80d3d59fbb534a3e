//! What the storm watches while it runs, ten times a second: each server link's egress
//! counter, the CPU time and memory of every process in the room's namespace but the storm
//! itself (that is the server, whatever it is: bootpool, or dnsmasq with nfs-ganesha and
//! rpcbind), the CPU time of the storm itself (the simulated clients) and of the whole
//! machine, and the UDP datagrams that namespace dropped on a full receive buffer (a client
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
    /// The storm's own CPU seconds so far: the simulated clients (and this sampler).
    pub clients_cpu_s: f64,
    /// The machine's busy CPU seconds so far, all its CPUs together (`proc_stat_busy`).
    pub host_busy_s: f64,
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
                    clients_cpu_s: cpu_of("self"),
                    host_busy_s: host_cpu().map_or(0.0, |(busy, _)| busy),
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
    let (mut cpu, mut rss) = (0.0, 0);
    for pid in room_pids(storm_pid) {
        cpu += cpu_of(&pid.to_string());
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

/// A process's CPU seconds (user + system, all its threads) so far; `pid` may be "self".
fn cpu_of(pid: &str) -> f64 {
    let hz = bootpool::sys::process::clock_ticks().max(1) as f64;
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat_ticks(&stat))
        .map_or(0.0, |t| t as f64 / hz)
}

/// utime + stime of a /proc/PID/stat line, in clock ticks.
fn stat_ticks(stat: &str) -> Option<u64> {
    // Fields after the name: state is the first; utime and stime are the 12th and 13th.
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// The machine's busy CPU seconds so far, all CPUs together, and how many CPUs it has.
pub fn host_cpu() -> Option<(f64, usize)> {
    let hz = bootpool::sys::process::clock_ticks().max(1) as f64;
    let (ticks, cpus) = proc_stat_busy(&std::fs::read_to_string("/proc/stat").ok()?)?;
    Some((ticks as f64 / hz, cpus))
}

/// From /proc/stat: the ticks all CPUs spent busy (user, nice, system, irq, softirq and steal;
/// a guest's time is inside user's), and the number of CPUs (its `cpuN` lines).
fn proc_stat_busy(text: &str) -> Option<(u64, usize)> {
    let all = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = all
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let field = |i: usize| f.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    let busy = field(0) + field(1) + field(2) + field(5) + field(6) + field(7);
    let cpus = text
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    Some((busy, cpus.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machines_busy_ticks_leave_out_idle_and_iowait() {
        let stat = "\
cpu  100 5 40 1000 7 3 2 1 0 0
cpu0 60 5 20 500 3 2 1 1 0 0
cpu1 40 0 20 500 4 1 1 0 0 0
intr 12345
ctxt 999
";
        assert_eq!(proc_stat_busy(stat), Some((100 + 5 + 40 + 3 + 2 + 1, 2)));
        assert_eq!(proc_stat_busy("intr 1\n"), None);
        // This machine's.
        let (busy, cpus) = host_cpu().unwrap();
        assert!(busy > 0.0 && cpus >= 1);
    }

    #[test]
    fn a_processs_ticks_are_utime_and_stime_after_its_name() {
        // The name may hold spaces and parentheses; the fields count from the last ')'.
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 17 5 0 0 20 0 1 0 99";
        assert_eq!(stat_ticks(stat), Some(22));
        assert_eq!(stat_ticks("4242 (x) S 1"), None);
        assert!(cpu_of("self") >= 0.0);
    }

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

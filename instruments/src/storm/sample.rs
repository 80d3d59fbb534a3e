//! What the storm watches while it runs, ten times a second: each server link's egress
//! counter, the CPU time and memory (resident, and private: `smaps_rollup`) of every process
//! in the room's namespace but the storm itself (that is the server, whatever it is:
//! bootpool, or dnsmasq with nfs-ganesha and rpcbind; with `--servers`, the site's
//! PostgreSQL) and of a site's members, the CPU time of the storm itself (the
//! simulated clients) and of the whole machine, and the UDP datagrams that namespace dropped
//! on a full receive buffer and the TCP segments it sent again (a client reads its own
//! namespace's at the end of its boot).

use super::room::{self, Link};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub const EVERY: Duration = Duration::from_millis(100);

/// One look at the room.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Sample {
    /// Seconds from the storm's start, when the links' counters were read (right after:
    /// the rest of a look takes a /proc scan, and a stamp taken after it would put the
    /// bytes of one interval into a shorter one).
    pub t: f64,
    /// Each link's egress counter, in bytes.
    pub tx: Vec<u64>,
    /// The egress counter of the room's uplink (`--uplink`), toward its room, in bytes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub uplink_tx: Vec<u64>,
    /// The server processes' CPU seconds (user + system) so far.
    pub cpu_s: f64,
    /// Their resident memory now, KiB.
    pub rss_kib: u64,
    /// Their private memory now, KiB (`private_kib`), all together and by process name.
    pub private_kib: u64,
    pub private_by_name: BTreeMap<String, u64>,
    /// The storm's own CPU seconds so far: the simulated clients (and this sampler).
    pub clients_cpu_s: f64,
    /// The machine's busy CPU seconds so far, all its CPUs together (`proc_stat_busy`).
    pub host_busy_s: f64,
    /// The namespace's UDP receive-buffer drops so far (`udp_rcvbuf_errors`).
    pub udp_drops: u64,
    /// The machine's input-backlog drops so far (`backlog_drops`).
    pub backlog_drops: u64,
    /// The times the machine's ARP table was full so far (`neigh::table_fulls`).
    pub neigh_fulls: u64,
    /// The namespace's TCP segments sent again so far (`tcp_retransmits`): the server's.
    pub tcp_retransmits: u64,
}

pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Sample>>,
}

impl Sampler {
    /// Starts sampling `links`, the `uplinks`' devices and the namespace's processes other
    /// than `storm_pid`; times are seconds from `t0`.
    /// `members`: the servers of a site (`--servers`), each in a namespace of its own.
    pub fn start(
        links: Vec<Link>,
        uplinks: Vec<String>,
        storm_pid: u32,
        members: Vec<libc::pid_t>,
        t0: Instant,
    ) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut out = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let tx = room::links_sent(&links);
                let ups: Vec<&str> = uplinks.iter().map(String::as_str).collect();
                let uplink_tx = room::tx_bytes(&ups);
                let t = t0.elapsed().as_secs_f64();
                let usage = server_usage(storm_pid, &members);
                out.push(Sample {
                    t,
                    tx,
                    uplink_tx,
                    cpu_s: usage.cpu_s,
                    rss_kib: usage.rss_kib,
                    private_kib: usage.private_by_name.values().sum(),
                    private_by_name: usage.private_by_name,
                    clients_cpu_s: cpu_of("self"),
                    host_busy_s: host_cpu().map_or(0.0, |(busy, _)| busy),
                    udp_drops: udp_rcvbuf_errors()
                        + members
                            .iter()
                            .map(|p| snmp_of(*p, "Udp:", "RcvbufErrors"))
                            .sum::<u64>(),
                    backlog_drops: backlog_drops(),
                    neigh_fulls: super::neigh::table_fulls(),
                    tcp_retransmits: tcp_retransmits()
                        + members
                            .iter()
                            .map(|p| snmp_of(*p, "Tcp:", "RetransSegs"))
                            .sum::<u64>(),
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

/// A counter of /proc/net/snmp in the network namespace of process `pid`.
fn snmp_of(pid: libc::pid_t, proto: &str, name: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/net/snmp"))
        .ok()
        .and_then(|s| snmp_field(&s, proto, name))
        .unwrap_or(0)
}

/// TCP segments the calling thread's network namespace sent again (`RetransSegs` of
/// /proc/net/snmp): a segment lost, or acknowledged too late, on the way.
pub fn tcp_retransmits() -> u64 {
    std::fs::read_to_string("/proc/thread-self/net/snmp")
        .ok()
        .and_then(|s| snmp_field(&s, "Tcp:", "RetransSegs"))
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
    netns_of("self").map_or(Vec::new(), |ns| pids_in(ns, storm_pid))
}

/// The network namespace of the calling thread (a site member's thread is in its member's).
pub fn own_netns() -> Option<u64> {
    netns_of("thread-self")
}

/// The processes in network namespace `ns` (its inode), the storm itself excepted.
pub fn pids_in(ns: u64, storm_pid: u32) -> Vec<libc::pid_t> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|&pid| pid as u32 != storm_pid && netns_of(&pid.to_string()) == Some(ns))
        .collect()
}

/// What the server's processes use.
#[derive(Debug, Default)]
struct Usage {
    cpu_s: f64,
    rss_kib: u64,
    /// Private memory (`private_kib`), KiB, summed by process name (`comm`).
    private_by_name: BTreeMap<String, u64>,
}

/// CPU seconds, RSS and private memory (KiB) of the processes in the namespace, the storm
/// excepted, and of `members` (a site's servers, in namespaces of their own).
fn server_usage(storm_pid: u32, members: &[libc::pid_t]) -> Usage {
    let mut u = Usage::default();
    for pid in room_pids(storm_pid)
        .into_iter()
        .chain(members.iter().copied())
    {
        u.cpu_s += cpu_of(&pid.to_string());
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            u.rss_kib += kib_field(&status, "VmRSS:").unwrap_or(0);
        }
        let private = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
            .map_or(0, |s| private_kib(&s));
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map_or_else(|_| "?".to_string(), |n| n.trim().to_string());
        *u.private_by_name.entry(name).or_default() += private;
    }
    u
}

/// A `NAME:   1234 kB` line's value.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// A process's private memory from its /proc/PID/smaps_rollup, KiB: the pages only it has
/// written (`Private_Dirty`: heap, stacks, buffers) or holds anonymously (`Anonymous`), the
/// larger of the two, since an anonymous page written is both. An image's files mapped or
/// cached (bootpool's RAM store's mmap, a root file in the page cache) are not in it: they
/// are the image's pages, shared by every client and kept by the kernel, not the client's.
fn private_kib(rollup: &str) -> u64 {
    let dirty = kib_field(rollup, "Private_Dirty:").unwrap_or(0);
    let anon = kib_field(rollup, "Anonymous:").unwrap_or(0);
    dirty.max(anon)
}

/// A process's CPU seconds (user + system, all its threads) so far; `pid` may be "self".
pub(super) fn cpu_of(pid: &str) -> f64 {
    cpu_seconds(pid, false)
}

/// A process's CPU seconds with those of the children it has reaped.
pub(super) fn cpu_with_reaped_of(pid: &str) -> f64 {
    cpu_seconds(pid, true)
}

fn cpu_seconds(pid: &str, reaped: bool) -> f64 {
    let hz = bootpool::sys::process::clock_ticks().max(1) as f64;
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat_ticks(&stat, reaped))
        .map_or(0.0, |t| t as f64 / hz)
}

/// utime + stime of a /proc/PID/stat line, in clock ticks, and with `reaped` cutime + cstime
/// (the children it has waited for).
fn stat_ticks(stat: &str, reaped: bool) -> Option<u64> {
    // Fields after the name: state is the first; utime, stime, cutime and cstime are the
    // 12th to the 15th.
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let last = if reaped { 15 } else { 13 };
    (11..last).map(|i| f.get(i)?.parse::<u64>().ok()).sum()
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
        assert_eq!(stat_ticks(stat, false), Some(22));
        assert_eq!(stat_ticks("4242 (x) S 1", false), None);
        // With the reaped children's cutime and cstime, the two fields after stime.
        let waited = "4242 (sh) S 1 4242 4242 0 -1 4194560 100 0 0 0 17 5 3 4 20 0 1 0 99";
        assert_eq!(stat_ticks(waited, false), Some(22));
        assert_eq!(stat_ticks(waited, true), Some(29));
        assert!(cpu_of("self") >= 0.0);
    }

    #[test]
    fn private_memory_is_the_written_and_anonymous_pages_not_the_mapped_files() {
        let rollup = "\
55d4c8a5e000-7ffd9a5f4000 ---p 00000000 00:00 0                          [rollup]
Rss:               90000 kB
Pss:               80000 kB
Shared_Clean:       1000 kB
Shared_Dirty:          0 kB
Private_Clean:     60000 kB
Private_Dirty:      2900 kB
Referenced:        90000 kB
Anonymous:          3000 kB
Swap:                  0 kB
";
        // 60 MB of a file mapped and read (Private_Clean) count for nothing.
        assert_eq!(private_kib(rollup), 3000);
        assert_eq!(private_kib("Private_Dirty:  12 kB\nAnonymous:  4 kB\n"), 12);
        assert_eq!(private_kib(""), 0);
        // This process has some.
        let mine = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
        assert!(private_kib(&mine) > 0);
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
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts
Tcp: 1 200 120000 -1 10 2 0 0 1 500 480 7 0 1
";
        assert_eq!(snmp_field(snmp, "Udp:", "RcvbufErrors"), Some(15));
        assert_eq!(snmp_field(snmp, "Udp:", "InDatagrams"), Some(120));
        assert_eq!(snmp_field(snmp, "Udp:", "Nope"), None);
        assert_eq!(snmp_field(snmp, "Tcp:", "RetransSegs"), Some(7));
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

//! The storm's numbers, as a room admin wants them: per client its boot time, phases, bytes
//! per protocol, retries and result; for the room the time until all booted, the spread, each
//! server link's egress against its capacity while clients still wanted data, the server's CPU
//! and memory (private memory per client), the retries of every protocol, and a lower bound
//! no run of the room can beat. Printed as a table, kept as JSON. When the
//! server is bootpool, its own record of each boot is read back and set beside the clients'
//! counts.

use super::args::StormArgs;
use super::client::Outcome;
use super::plan::Plan;
use super::room::Link;
use super::sample::Sample;
use bootpool::record::view::BootView;
use bootpool::trace::format::{Bytes, Op, Trace, What};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Instant;

/// A one-line progress display on a terminal.
pub struct Progress {
    total: usize,
    booted: usize,
    failed: usize,
    tty: bool,
    shown: Instant,
}

impl Progress {
    pub fn new(total: usize) -> Progress {
        Progress {
            total,
            booted: 0,
            failed: 0,
            tty: std::io::stderr().is_terminal(),
            shown: Instant::now(),
        }
    }

    pub fn tick(&mut self, plan: &Plan) {
        if self.tty && self.shown.elapsed().as_millis() >= 500 {
            self.shown = Instant::now();
            let width = 30;
            let filled = (self.booted + self.failed) * width / self.total.max(1);
            eprint!(
                "\rstorm: [{}{}] {}/{} done, {} failed, {:.0} s ",
                "#".repeat(filled),
                "-".repeat(width - filled),
                self.booted + self.failed,
                self.total,
                self.failed,
                plan.t0.elapsed().as_secs_f64()
            );
            let _ = std::io::stderr().flush();
        }
    }

    pub fn done(&mut self, o: &Outcome) {
        if o.result == "booted" {
            self.booted += 1;
        } else {
            self.failed += 1;
        }
    }

    pub fn finish(&self) {
        if self.tty {
            eprintln!();
        }
    }
}

/// A client of bootpool's API, 20 s for a whole answer.
fn api_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(std::time::Duration::from_secs(20)))
        .build()
        .into()
}

/// Waits while bootpool makes an `initrd_wire: zstd` image's copy (a first start takes
/// seconds), so that every client of the storm gets the same initrd.
pub fn wait_for_wire_copies(server: Ipv4Addr, port: u16) -> anyhow::Result<()> {
    let url = format!("http://{server}:{port}/api/v1/images");
    let agent = api_agent();
    crate::lab::wire_wait::wait_while_wire_pending("storm", &mut || {
        agent
            .get(&url)
            .call()
            .and_then(|mut r| r.body_mut().read_to_string())
            .map_err(|e| anyhow::anyhow!("GET {url}: {e}"))
    })
}

/// bootpool's own record of the storm's boots: those that started after `since` (Unix secs).
pub fn recorded(server: Ipv4Addr, port: u16, since: f64) -> Option<Vec<BootView>> {
    let url = format!("http://{server}:{port}/api/v1/boots");
    match get(&url).and_then(|t| boots_since(&t, since)) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("storm: bootpool's record not read from {url}: {e}");
            None
        }
    }
}

/// The body of a GET of `url` from the server's API, as text.
pub fn get(url: &str) -> Result<String, String> {
    api_agent()
        .get(url)
        .call()
        .map_err(|e| e.to_string())
        .and_then(|mut r| {
            r.body_mut()
                .with_config()
                .limit(1 << 30)
                .read_to_string()
                .map_err(|e| e.to_string())
        })
}

/// The boots of `GET /api/v1/boots` (`text`) that started after `since` (Unix seconds).
pub fn boots_since(text: &str, since: f64) -> Result<Vec<BootView>, String> {
    let boots: Vec<BootView> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(boots.into_iter().filter(|b| b.start >= since).collect())
}

#[derive(Debug, Serialize)]
pub struct ClientRow {
    #[serde(flatten)]
    pub client: Outcome,
    /// Seconds in each phase, as the client saw them (bootpool's phase names).
    pub phases: Vec<(String, f64)>,
    /// bootpool's record of this boot, when the server is bootpool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded: Option<BootView>,
}

#[derive(Debug, Serialize)]
pub struct LinkRow {
    pub dev: String,
    pub address: Ipv4Addr,
    pub capacity_bps: u64,
    pub bytes: u64,
    /// Clients whose root was served from this link's address.
    pub clients: usize,
    /// Mean and peak (over 1 s) share of capacity used while clients still wanted data.
    pub mean_util: f64,
    pub peak_util: f64,
    /// Bits per second, one value per second of the storm.
    pub per_second_bps: Vec<u64>,
    /// The seconds in which enough of its clients waited for data to fill it (`waited`), and
    /// the share of its capacity it carried in them (`None`: there were none).
    pub waited_s: f64,
    pub waited_util: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub clients: usize,
    pub booted: usize,
    pub failed: usize,
    /// Clients switched off mid-boot on purpose (`--swarm-cut`).
    pub cut: usize,
    /// Clients that played a corrupting peer instead of booting (`--swarm-corrupt`).
    pub rogues: usize,
    /// Clients that needed a retransmit or retry of any kind.
    pub retried: usize,
    /// All clients' DHCP retransmits, TFTP and HTTP retries.
    pub dhcp_retransmits: u64,
    pub tftp_retries: u64,
    pub http_retries: u64,
    /// All clients' TCP segments sent again, and their root connections, of which
    /// `root_reconnects` were made again after one broke (`retry`) at
    /// `clients_reconnected` clients.
    pub client_tcp_retransmits: u64,
    pub root_connections: u64,
    pub root_reconnects: u64,
    pub clients_reconnected: usize,
    /// The longest stall of any client (the longest gap between two answers it got), its
    /// start (seconds from power-on) and the client's index.
    pub longest_stall_s: Option<f64>,
    pub longest_stall_from_s: Option<f64>,
    pub longest_stall_client: Option<usize>,
    /// UDP datagrams dropped on a full receive buffer in the clients' namespaces, and how
    /// many clients dropped any: answers the server sent that a client lost.
    pub client_udp_drops: u64,
    pub clients_with_udp_drops: usize,
    /// From power-on to the last client's booted call.
    pub all_booted_s: Option<f64>,
    pub median_s: Option<f64>,
    pub p95_s: Option<f64>,
    pub max_s: Option<f64>,
    pub min_s: Option<f64>,
    pub slowest_over_fastest: Option<f64>,
    pub slowest_over_median: Option<f64>,
    /// The window in which clients still wanted data (seconds from power-on).
    pub wanted_from_s: f64,
    pub wanted_to_s: f64,
    /// All links together, while clients wanted data.
    pub mean_util: f64,
    pub peak_util: f64,
    /// All links together, over the seconds in which each was waited for (`waited`): the
    /// link-seconds, and the share of capacity carried in them.
    pub waited_s: f64,
    pub waited_util: Option<f64>,
    /// What the clients counted (payload), and what the server's links sent (payload plus
    /// every header and retransmit), per client.
    pub payload_bytes_per_client: u64,
    pub wire_bytes_per_client: u64,
}

#[derive(Debug, Serialize)]
pub struct Server {
    pub cpu_s: f64,
    pub peak_rss_kib: u64,
    /// (peak RSS - RSS before power-on) / clients.
    pub rss_per_client_kib: f64,
    /// UDP datagrams dropped on a full receive buffer in the server's namespace during the
    /// storm: requests that reached the server and were never read.
    pub udp_drops: u64,
    /// Frames the machine's input backlog dropped during the storm (`sample::backlog_drops`):
    /// lost in the simulated switch, before any server or client saw them.
    pub backlog_drops: u64,
    /// Times the machine's ARP table was full during the storm (`neigh`): a datagram that
    /// needed a new entry was dropped, a DISCOVER among them.
    pub neigh_fulls: u64,
    /// TCP segments the server's namespace sent again during the storm.
    pub tcp_retransmits: u64,
    /// Private memory (`sample::private_kib`: written and anonymous pages, not the image's
    /// mapped or cached files): before power-on, at its peak, (peak - before) / clients, and
    /// each process name's peak.
    pub private_before_kib: u64,
    pub private_peak_kib: u64,
    pub private_per_client_kib: f64,
    pub private_by_name_kib: BTreeMap<String, u64>,
}

/// The machine the storm ran on. Its CPUs carry the simulated clients, the server and the
/// simulated network alike; in a second in which they were all busy while the links were
/// not full, this machine, not the links, set the room's pace (docs/storm.md, "The machine's
/// share").
#[derive(Debug, Serialize)]
pub struct Host {
    pub cpus: usize,
    /// The share of all its CPUs that was busy, one value per second of the storm.
    pub per_second_busy: Vec<f64>,
    /// The mean of that share while clients wanted data.
    pub mean_busy: f64,
    /// Seconds, while clients wanted data, in which at least `SATURATED` of the CPUs were busy
    /// and the links together carried less than `UNDER` of their capacity: how many, and which
    /// (indices into `per_second_busy`).
    pub cpu_bound_s: f64,
    pub cpu_bound_seconds: Vec<usize>,
    /// CPU seconds the storm's own process (the simulated clients) used during the storm.
    pub clients_cpu_s: f64,
}

/// A second counts as CPU-bound (`Host::cpu_bound_s`) when this share of the machine's CPUs
/// was busy in it...
pub const SATURATED: f64 = 0.9;
/// ...while the server's links together carried less than this share of their capacity.
pub const UNDER: f64 = 0.8;

/// A lower bound on the time until all booted that no run of this room can beat, whatever
/// the server: the larger of the time the links need for the bytes and the time one client
/// needs alone on an idle server.
#[derive(Debug, Serialize)]
pub struct Bound {
    /// What the clients were sent, all of them (their payload: no header, no resend).
    pub bytes: u64,
    pub capacity_bps: u64,
    /// `bytes` over the links' capacity (less what their buckets hold: `room::burst`).
    pub transfer_s: f64,
    /// On a bond simulated by hashing (`--bond-hash`), a client's bytes can take only its
    /// link: the busiest link's clients' bytes over its rate (else `None`).
    pub busiest_link_s: Option<f64>,
    /// One client's boot alone (`alone_s`): the trace's critical path with each answer's
    /// bytes through the client's shaped port and one shaped server link, and the think times
    /// (the bound adds `--stagger`: the last client powers on that much later).
    pub alone_s: f64,
    pub bound_s: f64,
    /// all_booted_s / bound_s: 1 or more.
    pub over_bound: Option<f64>,
}

/// How far bootpool's record is from the clients' own counts.
#[derive(Debug, Serialize)]
pub struct Agreement {
    pub clients_recorded: usize,
    pub clients_booted_in_record: usize,
    /// Largest |recorded - counted| / counted over the payload bytes of the clients that
    /// booted (this and the two below compare only those).
    pub max_bytes_diff: f64,
    /// Largest |recorded - counted| of the boot's duration (first DISCOVER to booted), s.
    pub max_duration_diff_s: f64,
    /// Largest |recorded - counted| of one phase's seconds, over the phases both have.
    pub max_phase_diff_s: f64,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub label: String,
    /// A member's death mid-boot (`--fail`), when the run had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<super::retry::FailureRow>,
    /// The command line that made this run.
    pub command: Vec<String>,
    pub pool: String,
    pub root: String,
    pub trace: String,
    pub trace_bytes: Bytes,
    pub client_link_bps: u64,
    pub server_links: usize,
    pub think_scale: f64,
    pub stagger_s: f64,
    pub summary: Summary,
    pub links: Vec<LinkRow>,
    /// The room behind an uplink (`--uplink`), when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uplink: Option<super::uplink::UplinkRow>,
    pub server: Server,
    pub host: Host,
    pub bound: Bound,
    /// Each server's egress and clients (one row for a lone server), beside the floor.
    pub servers: super::servers::Servers,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agreement: Option<Agreement>,
    /// An NBD room's copies of the root against the one-copy floor, and with `--swarm` what
    /// the agents did (`swarm::Row`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swarm: Option<super::swarm::Row>,
    pub clients: Vec<ClientRow>,
}

/// A client's retries of any kind: DHCP retransmits, TFTP and HTTP retries.
fn retries(c: &Outcome) -> u32 {
    c.dhcp_retransmits + c.tftp_retries + c.http_retries
}

/// The room's lower bound (`Bound`): its clients' bytes over its links, on a hashed bond
/// each link's own clients' over it, and one client alone.
fn bound(
    links: &[Link],
    clients: &[Outcome],
    trace: &Trace,
    args: &StormArgs,
    all_booted: Option<f64>,
) -> Bound {
    let bytes: u64 = clients.iter().map(|c| c.bytes.total()).sum();
    let capacity: u64 = links.iter().map(|l| l.rate).sum();
    // What the links' buckets hold goes at once; the rest at their rate.
    let buckets: u64 = links.iter().map(|l| super::room::burst(l.rate)).sum();
    let transfer_s = bytes.saturating_sub(buckets) as f64 * 8.0 / capacity.max(1) as f64;
    let busiest_link_s = links.iter().any(|l| l.macs.is_some()).then(|| {
        links
            .iter()
            .map(|l| {
                let theirs: u64 = clients
                    .iter()
                    .filter(|c| l.carries(&c.mac, None))
                    .map(|c| c.bytes.total())
                    .sum();
                theirs.saturating_sub(super::room::burst(l.rate)) as f64 * 8.0
                    / l.rate.max(1) as f64
            })
            .fold(0.0, f64::max)
    });
    let one_link = links
        .iter()
        .map(|l| l.rate)
        .max()
        .unwrap_or(args.client_link);
    // A client's bytes pass its own shaped port and one shaped server link.
    let shapers = [args.client_link, one_link].map(|r| (r, super::room::burst(r)));
    let alone_s = alone_s(&trace.ops, args.think_scale, &shapers);
    // The last client powers on `--stagger` seconds after the first.
    let bound_s = transfer_s
        .max(busiest_link_s.unwrap_or(0.0))
        .max(alone_s + args.stagger);
    Bound {
        bytes,
        capacity_bps: capacity,
        transfer_s,
        busiest_link_s,
        alone_s,
        bound_s,
        over_bound: all_booted.filter(|_| bound_s > 0.0).map(|t| t / bound_s),
    }
}

fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    Some(sorted[i])
}

/// The phases as bootpool names them, from the client's milestones.
fn phases(o: &Outcome) -> Vec<(String, f64)> {
    let a = &o.at;
    let marks = [
        ("dhcp", a.ack),
        ("loader", a.loader),
        ("ipxe", a.script),
        ("kernel", a.kernel),
        ("initrd", a.attached),
        ("root", a.booted),
    ];
    let mut out = Vec::new();
    let Some(mut last) = a.first_discover else {
        return out;
    };
    for (name, at) in marks {
        if let Some(t) = at
            && t >= last
        {
            out.push((name.to_string(), t - last));
            last = t;
        }
    }
    out
}

/// The payload an op's answer carries.
fn op_bytes(op: &Op) -> u64 {
    match &op.what {
        What::File { bytes, .. } | What::Nfs { bytes, .. } => *bytes,
        What::Nbd { cmd, len, .. } if cmd == "read" => *len,
        _ => 0,
    }
}

/// Seconds one client needs alone on an idle server that answers at once: the replay's
/// closed loop (`Gates`: an op starts its think time after the latest answer it waits for)
/// with every answer's bytes through each of `shapers` (rate in bit/s, bucket in bytes: a
/// shaped link sends at most its bucket at once, the rest at its rate). Read-ahead overlaps
/// as recorded, so only the critical path adds up.
fn alone_s(ops: &[Op], think_scale: f64, shapers: &[(u64, u64)]) -> f64 {
    let gates = bootpool::trace::format::Gates::new(ops);
    // Answers in the order the gates count them (by recorded end, ties by index).
    let mut by_end: Vec<usize> = (0..ops.len()).collect();
    by_end.sort_by(|&a, &b| ops[a].end().total_cmp(&ops[b].end()).then(a.cmp(&b)));
    // By start: an op waits only for answers recorded before it arrived, so those are done.
    let mut by_start: Vec<usize> = (0..ops.len()).collect();
    by_start.sort_by(|&a, &b| ops[a].t.total_cmp(&ops[b].t).then(a.cmp(&b)));
    let mut end = vec![0.0f64; ops.len()];
    let (mut counted, mut latest) = (0, 0.0f64);
    for j in by_start {
        // `need` grows with the start time: the latest answer waited for so far, extended.
        while counted < gates.need(j) {
            latest = latest.max(end[by_end[counted]]);
            counted += 1;
        }
        let bytes = op_bytes(&ops[j]);
        let transfer = shapers
            .iter()
            .map(|&(rate, bucket)| bytes.saturating_sub(bucket) as f64 * 8.0 / rate.max(1) as f64)
            .fold(0.0, f64::max);
        end[j] = latest + gates.think(j) * think_scale + transfer;
    }
    end.into_iter().fold(0.0, f64::max)
}

impl Report {
    /// The report of one run. Longer than the house's ~150 lines on purpose: each figure is a
    /// few lines over the same clients and samples, computed in the order the report shows.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        label: &str,
        args: &StormArgs,
        pool: &str,
        trace_file: &Path,
        trace: &Trace,
        links: &[Link],
        start: f64,
        clients: Vec<Outcome>,
        samples: Vec<Sample>,
        recorded: Option<Vec<BootView>>,
        servers: &[super::servers::ServerInput],
        failure: Option<super::retry::FailureRow>,
    ) -> Report {
        let n = clients.len();
        let booted = clients.iter().filter(|c| c.result == "booted").count();
        // Switched off on purpose (`--swarm-cut`) or playing a corrupting peer
        // (`--swarm-corrupt`): neither booted nor failed.
        let cut = clients.iter().filter(|c| c.result == "cut").count();
        let rogues = clients.iter().filter(|c| c.result == "rogue").count();
        let mut times: Vec<f64> = clients
            .iter()
            .filter(|c| c.result == "booted")
            .filter_map(|c| c.boot_s())
            .collect();
        times.sort_by(f64::total_cmp);
        let all_booted = clients
            .iter()
            .filter_map(|c| c.at.booted)
            .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))))
            .map(|t| t - start);
        let median = quantile(&times, 0.5);
        let (min, max) = (times.first().copied(), times.last().copied());
        // Clients want data from the first one's first file to the last one's last answer.
        let wanted_from = clients
            .iter()
            .filter_map(|c| c.at.ack)
            .fold(f64::INFINITY, f64::min);
        let wanted_to = clients
            .iter()
            .filter_map(|c| c.at.booted)
            .fold(0.0, f64::max);
        let (mut link_rows, mean, peak) = link_rows(links, &samples, wanted_from, wanted_to);
        for (row, l) in link_rows.iter_mut().zip(links) {
            row.clients = clients
                .iter()
                .filter(|c| l.carries(&c.mac, c.root_server.or(c.server)))
                .count();
        }
        let waited_rows = waited(links, &samples, &clients, args.client_link);
        let (mut waited_s, mut waited_bytes, mut waited_cap) = (0.0, 0.0, 0.0);
        for (row, (secs, bytes)) in link_rows.iter_mut().zip(waited_rows) {
            let cap = row.capacity_bps as f64 / 8.0 * secs;
            row.waited_s = secs;
            row.waited_util = (secs > 0.0).then(|| bytes / cap);
            waited_s += secs;
            waited_bytes += bytes;
            waited_cap += cap;
        }
        let bound = bound(links, &clients, trace, args, all_booted);
        let sent: Vec<super::servers::LinkSent> = link_rows
            .iter()
            .map(|l| super::servers::LinkSent {
                capacity_bps: l.capacity_bps,
                bytes: l.bytes,
                clients: l.clients,
            })
            .collect();
        let servers = super::servers::servers(servers, &sent, bound.transfer_s, all_booted);
        let before_sample = samples.iter().take_while(|s| s.t < start).last();
        let before = before_sample.map_or(0, |s| s.rss_kib);
        let private_before = before_sample.map_or(0, |s| s.private_kib);
        let peak_rss = samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
        let private_peak = samples.iter().map(|s| s.private_kib).max().unwrap_or(0);
        let mut private_by_name = BTreeMap::<String, u64>::new();
        for (name, kib) in samples.iter().flat_map(|s| &s.private_by_name) {
            let peak = private_by_name.entry(name.clone()).or_default();
            *peak = (*peak).max(*kib);
        }
        let cpu_s = match (samples.first(), samples.last()) {
            (Some(a), Some(b)) => b.cpu_s - a.cpu_s,
            _ => 0.0,
        };
        let host = host(
            &samples,
            &link_rows,
            wanted_from,
            wanted_to,
            super::sample::host_cpu().map_or(1, |(_, n)| n),
        );
        let agreement = recorded.as_ref().map(|r| agreement(&clients, r));
        let payload: u64 = clients.iter().map(|c| c.bytes.total()).sum();
        let rows = clients
            .into_iter()
            .map(|c| {
                let rec = recorded
                    .as_ref()
                    .and_then(|r| r.iter().rfind(|b| b.mac == c.mac).cloned());
                ClientRow {
                    phases: phases(&c),
                    client: c,
                    recorded: rec,
                }
            })
            .collect::<Vec<_>>();
        let retried = rows.iter().filter(|r| retries(&r.client) > 0).count();
        let stall = rows
            .iter()
            .filter_map(|r| {
                r.client
                    .longest_stall
                    .map(|(from, to)| (r.client.index, from, to))
            })
            .max_by(|a, b| (a.2 - a.1).total_cmp(&(b.2 - b.1)));
        let total = |f: fn(&Outcome) -> u64| rows.iter().map(|r| f(&r.client)).sum();
        let grew = |f: fn(&Sample) -> u64| match (samples.first(), samples.last()) {
            (Some(a), Some(b)) => f(b).saturating_sub(f(a)),
            _ => 0,
        };
        Report {
            failure,
            label: label.into(),
            command: std::env::args().collect(),
            pool: pool.into(),
            root: trace.header.root.clone(),
            trace: trace_file.display().to_string(),
            trace_bytes: trace.bytes(),
            client_link_bps: args.client_link,
            server_links: links.len(),
            think_scale: args.think_scale,
            stagger_s: args.stagger,
            summary: Summary {
                clients: n,
                booted,
                failed: n - booted - cut - rogues,
                cut,
                rogues,
                retried,
                dhcp_retransmits: total(|c| c.dhcp_retransmits.into()),
                tftp_retries: total(|c| c.tftp_retries.into()),
                http_retries: total(|c| c.http_retries.into()),
                client_tcp_retransmits: total(|c| c.tcp_retransmits),
                root_connections: total(|c| c.root_connections),
                root_reconnects: total(|c| c.root_reconnects),
                clients_reconnected: rows.iter().filter(|r| r.client.root_reconnects > 0).count(),
                longest_stall_s: stall.map(|(_, from, to)| to - from),
                longest_stall_from_s: stall.map(|(_, from, _)| (from - start).max(0.0)),
                longest_stall_client: stall.map(|(i, _, _)| i),
                client_udp_drops: total(|c| c.udp_drops),
                clients_with_udp_drops: rows.iter().filter(|r| r.client.udp_drops > 0).count(),
                all_booted_s: all_booted,
                median_s: median,
                p95_s: quantile(&times, 0.95),
                max_s: max,
                min_s: min,
                slowest_over_fastest: max.zip(min).map(|(a, b)| a / b),
                slowest_over_median: max.zip(median).map(|(a, b)| a / b),
                wanted_from_s: (wanted_from - start).max(0.0),
                wanted_to_s: (wanted_to - start).max(0.0),
                mean_util: mean,
                peak_util: peak,
                waited_s,
                waited_util: (waited_cap > 0.0).then(|| waited_bytes / waited_cap),
                payload_bytes_per_client: payload / n.max(1) as u64,
                wire_bytes_per_client: link_rows.iter().map(|l| l.bytes).sum::<u64>()
                    / n.max(1) as u64,
            },
            links: link_rows,
            uplink: args
                .uplink
                .map(|(n, rate)| super::uplink::row(n, rate, &samples, wanted_from, wanted_to)),
            server: Server {
                cpu_s,
                peak_rss_kib: peak_rss,
                rss_per_client_kib: peak_rss.saturating_sub(before) as f64 / n.max(1) as f64,
                udp_drops: grew(|s| s.udp_drops),
                backlog_drops: grew(|s| s.backlog_drops),
                neigh_fulls: grew(|s| s.neigh_fulls),
                tcp_retransmits: grew(|s| s.tcp_retransmits),
                private_before_kib: private_before,
                private_peak_kib: private_peak,
                private_per_client_kib: private_peak.saturating_sub(private_before) as f64
                    / n.max(1) as f64,
                private_by_name_kib: private_by_name,
            },
            host,
            bound,
            servers,
            agreement,
            swarm: None,
            clients: rows,
        }
    }

    /// The report as the terminal shows it, section by section (longer than the house's ~150
    /// lines for that: each section is a few `writeln!`s in the order they are read).
    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str("client  mac                ip            result  boot_s  dhcp   ipxe   kernel  initrd  root    MB      retries\n");
        for r in &self.clients {
            let c = &r.client;
            let ph = |name: &str| {
                r.phases
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or("-".to_string(), |(_, v)| format!("{v:.1}"))
            };
            s.push_str(&format!(
                "{:<7} {:<18} {:<13} {:<7} {:<7} {:<6} {:<6} {:<7} {:<7} {:<7} {:<7.1} {}\n",
                format!("c{:03}", c.index),
                c.mac,
                c.ip.map_or("-".into(), |ip| ip.to_string()),
                c.result,
                c.boot_s().map_or("-".into(), |t| format!("{t:.1}")),
                ph("dhcp"),
                ph("ipxe"),
                ph("kernel"),
                ph("initrd"),
                ph("root"),
                c.bytes.total() as f64 / 1e6,
                retries(c),
            ));
        }
        for r in self.clients.iter().filter(|r| r.client.error.is_some()) {
            s.push_str(&format!(
                "c{:03} {}: {}\n",
                r.client.index,
                match r.client.result.as_str() {
                    "cut" => "switched off",
                    "rogue" => "rogue",
                    _ => "failed",
                },
                r.client.error.as_deref().unwrap_or("")
            ));
        }
        let mut differs = std::collections::BTreeMap::<&str, usize>::new();
        for d in self.clients.iter().flat_map(|r| &r.client.differs) {
            *differs.entry(d).or_default() += 1;
        }
        for (d, n) in differs {
            s.push_str(&format!(
                "note: {d}, for {n} clients (the image is not the recorded build, or the server sends the file recompressed: images.NAME.initrd_wire)\n"
            ));
        }
        // Each server's own links (a site's members split the clients by their hash, not
        // evenly: that is the servers' line).
        for server in &self.servers.rows {
            let per_link: Vec<usize> = server
                .link_indices
                .iter()
                .filter_map(|&k| self.links.get(k))
                .map(|l| l.clients)
                .collect();
            if uneven(&per_link) {
                let counts: Vec<String> = per_link.iter().map(usize::to_string).collect();
                s.push_str(&format!(
                    "note: the server{} told the clients its links unevenly: {} clients per link (a server that names one address for all, or bootpool keeping links from an earlier run: docs/links.md)\n",
                    if self.servers.rows.len() > 1 {
                        format!(" {}", server.name)
                    } else {
                        String::new()
                    },
                    counts.join(" / ")
                ));
            }
        }
        let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
        let m = &self.summary;
        s.push_str(&format!(
            "\n{}: {} clients, {} booted, {} failed, {} retried{}\n",
            self.label,
            m.clients,
            m.booted,
            m.failed,
            m.retried,
            match (m.cut, m.rogues) {
                (0, 0) => String::new(),
                (c, 0) => format!(", {c} switched off on purpose"),
                (0, r) => format!(", {r} playing a corrupting peer"),
                (c, r) => format!(", {c} switched off on purpose, {r} playing a corrupting peer"),
            }
        ));
        let sv = &self.server;
        // Said every run, zeros too: a count that is not printed cannot be compared.
        s.push_str(&format!(
            "retries: {} DHCP retransmits, {} TFTP, {} HTTP; TCP segments sent again: {} by the clients, {} by the server; {} root connections ({} made again after one broke, at {} clients); UDP datagrams lost on a full receive buffer: {} at {} clients, {} at the server; frames lost in the simulated switch (the kernel's input backlog): {}; the machine's ARP table full: {} times\n",
            m.dhcp_retransmits,
            m.tftp_retries,
            m.http_retries,
            m.client_tcp_retransmits,
            sv.tcp_retransmits,
            m.root_connections,
            m.root_reconnects,
            m.clients_reconnected,
            m.client_udp_drops,
            m.clients_with_udp_drops,
            sv.udp_drops,
            sv.backlog_drops,
            sv.neigh_fulls,
        ));
        s.push_str(&format!(
            "all booted after {} s; boot time median {} s, p95 {} s, max {} s, min {} s; slowest/fastest {}, slowest/median {}\n",
            f(m.all_booted_s),
            f(m.median_s),
            f(m.p95_s),
            f(m.max_s),
            f(m.min_s),
            m.slowest_over_fastest.map_or("-".into(), |v| format!("{v:.2}")),
            m.slowest_over_median.map_or("-".into(), |v| format!("{v:.2}")),
        ));
        if let Some(f) = &self.failure {
            s.push_str(&f.render());
        }
        s.push_str(&format!(
            "longest stall (the longest gap between two answers a client got, think times included): {} s, client {} from {} s\n",
            f(m.longest_stall_s),
            m.longest_stall_client.map_or("-".into(), |i| i.to_string()),
            f(m.longest_stall_from_s),
        ));
        s.push_str(&format!(
            "server links while clients wanted data ({:.1}-{:.1} s): {:.0}% of capacity on average, {:.0}% at peak\n",
            m.wanted_from_s,
            m.wanted_to_s,
            m.mean_util * 100.0,
            m.peak_util * 100.0
        ));
        let pct = |u: Option<f64>| u.map_or("-".to_string(), |u| format!("{:.0}%", u * 100.0));
        for l in &self.links {
            s.push_str(&format!(
                "  {:<6} {:<13} {:>6} Mbit/s  {:>3} clients  sent {:>8.1} MB  mean {:>3.0}%  peak {:>3.0}%  waited for {:>5.1} s: {:>4}\n",
                l.dev,
                l.address,
                l.capacity_bps / 1_000_000,
                l.clients,
                l.bytes as f64 / 1e6,
                l.mean_util * 100.0,
                l.peak_util * 100.0,
                l.waited_s,
                pct(l.waited_util),
            ));
        }
        s.push_str(&super::servers::render(&self.servers));
        if let Some(u) = &self.uplink {
            s.push_str(&super::uplink::render(u));
        }
        s.push_str(&format!(
            "server links while enough of their clients waited for data to fill them: {} of capacity over {:.1} link-seconds\n",
            pct(m.waited_util),
            m.waited_s
        ));
        s.push_str(&format!(
            "bytes per client: {:.1} MB counted by the client, {:.1} MB on the server's links\n",
            m.payload_bytes_per_client as f64 / 1e6,
            m.wire_bytes_per_client as f64 / 1e6
        ));
        s.push_str(&format!(
            "server: {:.1} CPU s, peak RSS {:.1} MiB, {:.0} KiB per client; private memory {:.1} MiB before power-on, {:.1} MiB at peak, {:.0} KiB per client ({})\n",
            sv.cpu_s,
            sv.peak_rss_kib as f64 / 1024.0,
            sv.rss_per_client_kib,
            sv.private_before_kib as f64 / 1024.0,
            sv.private_peak_kib as f64 / 1024.0,
            sv.private_per_client_kib,
            sv.private_by_name_kib
                .iter()
                .map(|(n, k)| format!("{n} {:.1} MiB", *k as f64 / 1024.0))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let h = &self.host;
        s.push_str(&format!(
            "this machine: {} CPUs, {:.0}% busy on average while clients wanted data; the simulated clients used {:.1} CPU s\n",
            h.cpus,
            h.mean_busy * 100.0,
            h.clients_cpu_s
        ));
        if h.cpu_bound_s > 0.0 {
            s.push_str(&format!(
                "note: for {:.0} s its CPUs were {:.0}% busy or more while the links carried under {:.0}% of their capacity: there this machine (clients, server and the simulated network on {} cores), not the links, set the pace\n",
                h.cpu_bound_s,
                SATURATED * 100.0,
                UNDER * 100.0,
                h.cpus
            ));
        }
        let b = &self.bound;
        s.push_str(&format!(
            "lower bound: the larger of {:.1} MB over {} Mbit/s = {:.1} s{} and one client alone on an idle server = {:.1} s: {:.1} s; this run {}x the bound\n",
            b.bytes as f64 / 1e6,
            b.capacity_bps / 1_000_000,
            b.transfer_s,
            b.busiest_link_s.map_or(String::new(), |t| format!(
                ", the busiest hashed link's own clients' bytes over it = {t:.1} s"
            )),
            b.alone_s,
            b.bound_s,
            b.over_bound.map_or("-".into(), |v| format!("{v:.2}"))
        ));
        if let Some(a) = &self.agreement {
            s.push_str(&format!(
                "bootpool's record: {} of the clients' boots recorded, {} booted; bytes within {:.2}% of the clients' counts, durations within {:.2} s, phases within {:.2} s\n",
                a.clients_recorded,
                a.clients_booted_in_record,
                a.max_bytes_diff * 100.0,
                a.max_duration_diff_s,
                a.max_phase_diff_s
            ));
        }
        if let Some(w) = &self.swarm {
            s.push_str(&w.render());
            s.push('\n');
        }
        s
    }
}

/// Per link, the time in which its clients waited for more data than it could carry, and
/// the bytes it carried then. A link is waited for between two samples when, at their
/// midpoint, so many of its clients (those whose root it serves) were waiting for an HTTP
/// boot file or a root read that their own links together are at least its capacity: each
/// could take data at its link's rate, and none was thinking. Answers the server held back
/// (paced, queued, slow to read) count as waited for, so a server that keeps its link short
/// of full while clients wait shows here, where the mean over the whole boot (thinking
/// included) cannot tell.
fn waited(
    links: &[Link],
    samples: &[Sample],
    clients: &[Outcome],
    client_bps: u64,
) -> Vec<(f64, f64)> {
    let mids: Vec<f64> = samples
        .windows(2)
        .map(|w| (w[0].t + w[1].t) / 2.0)
        .collect();
    links
        .iter()
        .enumerate()
        .map(|(k, l)| {
            let mut waiting = vec![0u64; mids.len()];
            for c in clients
                .iter()
                .filter(|c| l.carries(&c.mac, c.root_server.or(c.server)))
            {
                // A client counts once per midpoint, however many of its requests are open.
                let mut mine = vec![false; mids.len()];
                for w in &c.waits {
                    let first = mids.partition_point(|&m| m < w.from);
                    for (i, m) in mids.iter().enumerate().skip(first) {
                        if *m >= w.to {
                            break;
                        }
                        mine[i] = true;
                    }
                }
                for (n, open) in waiting.iter_mut().zip(mine) {
                    *n += u64::from(open);
                }
            }
            let (mut secs, mut bytes) = (0.0, 0.0);
            for (i, w) in samples.windows(2).enumerate() {
                if waiting[i].saturating_mul(client_bps) >= l.rate {
                    secs += w[1].t - w[0].t;
                    bytes += w[1].tx[k].saturating_sub(w[0].tx[k]) as f64;
                }
            }
            (secs, bytes)
        })
        .collect()
}

/// A counter of the samples at time `t`, linearly between the samples around it. The
/// samples' clock starts with the sampler; the report's times are on the same clock (both
/// begin at the storm's start, within a few ms).
fn counter_at(samples: &[Sample], t: f64, counter: impl Fn(&Sample) -> f64) -> f64 {
    let i = samples.partition_point(|s| s.t < t);
    match (
        i.checked_sub(1).and_then(|j| samples.get(j)),
        samples.get(i),
    ) {
        (Some(a), Some(b)) if b.t > a.t => {
            let f = (t - a.t) / (b.t - a.t);
            counter(a) + f * (counter(b) - counter(a))
        }
        (_, Some(b)) => counter(b),
        (Some(a), None) => counter(a),
        _ => 0.0,
    }
}

/// What the links (`rows`) together carried in second `s`, as a share of their capacity.
fn links_share(rows: &[LinkRow], s: usize) -> f64 {
    let (carried, capacity) = rows.iter().fold((0.0, 0.0), |(b, c), r| {
        let bps = r.per_second_bps.get(s).copied().unwrap_or(0);
        (b + bps as f64, c + r.capacity_bps as f64)
    });
    carried / f64::max(capacity, 1.0)
}

/// The machine's CPUs over the storm: their busy share per second, its mean over the window
/// in which clients wanted data (`from`-`to`, on the samples' clock), and the seconds of that
/// window in which they were saturated while the links (`rows`) were not full; the machine
/// has `cpus` CPUs.
fn host(samples: &[Sample], rows: &[LinkRow], from: f64, to: f64, cpus: usize) -> Host {
    let cpus = cpus.max(1);
    let busy_at = |t: f64| counter_at(samples, t, |s| s.host_busy_s);
    let seconds = samples.last().map_or(0, |s| s.t.ceil() as usize);
    let per_second_busy: Vec<f64> = (0..seconds)
        .map(|s| ((busy_at(s as f64 + 1.0) - busy_at(s as f64)) / cpus as f64).clamp(0.0, 1.0))
        .collect();
    let mean_busy = if to > from {
        ((busy_at(to) - busy_at(from)) / (cpus as f64 * (to - from))).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let cpu_bound_seconds: Vec<usize> = (from.floor() as usize..to.ceil() as usize)
        .filter(|&s| {
            per_second_busy.get(s).is_some_and(|b| *b >= SATURATED) && links_share(rows, s) < UNDER
        })
        .collect();
    let clients_cpu_s = match (samples.first(), samples.last()) {
        (Some(a), Some(b)) => b.clients_cpu_s - a.clients_cpu_s,
        _ => 0.0,
    };
    Host {
        cpus,
        per_second_busy,
        mean_busy,
        cpu_bound_s: cpu_bound_seconds.len() as f64,
        cpu_bound_seconds,
        clients_cpu_s,
    }
}

fn link_rows(links: &[Link], samples: &[Sample], from: f64, to: f64) -> (Vec<LinkRow>, f64, f64) {
    let mut rows = Vec::new();
    let (mut all_bytes, mut all_cap) = (0.0, 0.0);
    let mut peak_all: f64 = 0.0;
    let at = |t: f64, k: usize| counter_at(samples, t, |s| s.tx[k] as f64);
    let seconds = samples.last().map_or(0, |s| s.t.ceil() as usize);
    for (k, l) in links.iter().enumerate() {
        let total = samples
            .last()
            .zip(samples.first())
            .map_or(0, |(b, a)| b.tx[k].saturating_sub(a.tx[k]));
        let per_second: Vec<u64> = (0..seconds)
            .map(|s| ((at(s as f64 + 1.0, k) - at(s as f64, k)) * 8.0) as u64)
            .collect();
        let window = (to - from).max(1e-3);
        let sent = if to > from {
            at(to, k) - at(from, k)
        } else {
            0.0
        };
        let cap = l.rate as f64 / 8.0;
        let peak = (from.floor() as usize..to.ceil() as usize)
            .filter_map(|s| per_second.get(s))
            .map(|b| *b as f64 / l.rate as f64)
            .fold(0.0, f64::max);
        all_bytes += sent;
        all_cap += cap * window;
        rows.push(LinkRow {
            dev: l.dev.clone(),
            address: l.address,
            capacity_bps: l.rate,
            bytes: total,
            clients: 0,
            mean_util: sent / (cap * window),
            peak_util: peak,
            per_second_bps: per_second,
            waited_s: 0.0,
            waited_util: None,
        });
    }
    for s in from.floor() as usize..to.ceil() as usize {
        peak_all = peak_all.max(links_share(&rows, s));
    }
    let mean = if all_cap > 0.0 {
        all_bytes / all_cap
    } else {
        0.0
    };
    (rows, mean, peak_all)
}

fn agreement(clients: &[Outcome], recorded: &[BootView]) -> Agreement {
    let mut found = 0;
    let mut booted = 0;
    let mut max_bytes: f64 = 0.0;
    let mut max_dur: f64 = 0.0;
    let mut max_phase: f64 = 0.0;
    for c in clients {
        let Some(b) = recorded.iter().rfind(|b| b.mac == c.mac) else {
            continue;
        };
        found += 1;
        if b.result == "booted" {
            booted += 1;
        }
        // A client that gave up (in DHCP, say) counted a part of a boot that the server may
        // have seen differently or not at all: only whole boots are compared.
        if c.result != "booted" {
            continue;
        }
        let rec: u64 = b.bytes.values().sum();
        let counted = c.bytes.total();
        if counted > 0 {
            max_bytes = max_bytes.max((rec as f64 - counted as f64).abs() / counted as f64);
        }
        if let (Some(d), Some(first), Some(end)) = (b.duration_s, c.at.first_discover, c.at.booted)
        {
            max_dur = max_dur.max((d - (end - first)).abs());
        }
        for (name, secs) in phases(c) {
            if let Some(p) = b.phases.iter().find(|p| p.name == name) {
                max_phase = max_phase.max((p.seconds - secs).abs());
            }
        }
    }
    Agreement {
        clients_recorded: found,
        clients_booted_in_record: booted,
        max_bytes_diff: max_bytes,
        max_duration_diff_s: max_dur,
        max_phase_diff_s: max_phase,
    }
}

/// Whether clients of one pool, all alike, were spread over the server's links unevenly: the
/// busiest link has a fifth more than an even share (rounded up), and one more.
fn uneven(per_link: &[usize]) -> bool {
    let total: usize = per_link.iter().sum();
    let Some(&most) = per_link.iter().max() else {
        return false;
    };
    if per_link.len() < 2 || total == 0 {
        return false;
    }
    let even = total.div_ceil(per_link.len()) as f64;
    most as f64 > even * 1.2 + 1.0
}

#[cfg(test)]
mod tests {
    use super::{LinkRow, Op, Sample, Trace, What, alone_s, host, uneven};

    /// A sample at `t` with the machine's busy CPU seconds so far.
    fn at(t: f64, host_busy_s: f64) -> Sample {
        Sample {
            t,
            tx: vec![],
            uplink_tx: vec![],
            cpu_s: 0.0,
            rss_kib: 0,
            clients_cpu_s: t / 2.0,
            host_busy_s,
            udp_drops: 0,
            backlog_drops: 0,
            neigh_fulls: 0,
            tcp_retransmits: 0,
            private_kib: 0,
            private_by_name: Default::default(),
        }
    }

    fn op(t: f64, d: f64, what: What) -> Op {
        Op { t, d, what }
    }

    fn file(bytes: u64) -> What {
        What::File {
            proto: "http".into(),
            name: "/boot/demo/vmlinuz".into(),
            bytes,
            blksize: None,
            windowsize: None,
        }
    }

    fn read(len: u64) -> What {
        What::Nbd {
            cmd: "read".into(),
            offset: 0,
            len,
            export: None,
        }
    }

    #[test]
    fn one_client_alone_adds_up_its_critical_path_not_its_overlapped_reads() {
        // A file of 1 MB (0.08 s at 100 Mbit/s) after 1 s, then 2 s of thinking, then two
        // reads of 1 MB in flight together (the second sent before the first's answer): each
        // takes 0.08 s alone on the link, and the second does not wait for the first.
        let ops = vec![
            op(1.0, 0.5, file(1_000_000)),
            op(3.5, 0.2, read(1_000_000)),
            op(3.6, 0.2, read(1_000_000)),
            // Thinks 1 s after the latest answer (3.8) it waited for.
            op(4.8, 0.0, What::Booted),
        ];
        let link = |rate| [(rate, 0)];
        let t = alone_s(&ops, 1.0, &link(100_000_000));
        let want = 1.0 + 0.08 + 2.0 + 0.1 + 0.08 + 1.0;
        assert!((t - want).abs() < 1e-9, "{t} vs {want}");
        // Think times scale; bytes at a slower link take longer.
        let scaled = alone_s(&ops, 0.5, &link(100_000_000));
        assert!((scaled - (want - 2.05)).abs() < 1e-9, "{scaled}");
        let slow = alone_s(&ops, 1.0, &link(10_000_000));
        assert!((slow - (want + 0.72 * 2.0)).abs() < 1e-9, "{slow}");
        // The slower of two shapers counts; a bucket of 0.5 MB sends half of each at once.
        let both = alone_s(&ops, 1.0, &[(100_000_000, 0), (10_000_000, 0)]);
        assert!((both - slow).abs() < 1e-9, "{both}");
        let bucket = alone_s(&ops, 1.0, &[(100_000_000, 500_000)]);
        assert!((bucket - (want - 0.04 * 2.0)).abs() < 1e-9, "{bucket}");
        assert_eq!(alone_s(&[], 1.0, &link(1)), 0.0);
    }

    #[test]
    fn the_shipped_traces_alone_are_shorter_than_their_recorded_boot() {
        // At a client link of 10 Gbit/s and think x1 the bound is the recording less its
        // server's answering time: never more than the recorded boot.
        for name in ["demo-nfs", "demo-nbd"] {
            let path = format!(
                "{}/../bench/traces/{name}.trace",
                env!("CARGO_MANIFEST_DIR")
            );
            let trace = Trace::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
            let recorded = trace.ops.iter().map(Op::end).fold(0.0, f64::max);
            let alone = alone_s(&trace.ops, 1.0, &[(10_000_000_000, 0)]);
            assert!(
                alone > 0.5 * recorded && alone <= recorded,
                "{name}: {alone} of {recorded}"
            );
        }
    }

    #[test]
    fn a_second_is_cpu_bound_when_every_cpu_was_busy_and_the_links_were_not_full() {
        // Two CPUs: half busy in second 0, all busy in seconds 1 to 3, idle in second 4.
        let busy = [0.0, 1.0, 3.0, 5.0, 7.0, 7.0];
        let samples: Vec<Sample> = (0..=10)
            .map(|i| {
                let t = i as f64 / 2.0;
                let (lo, hi) = (busy[i / 2], busy[(i / 2 + 1).min(5)]);
                at(t, lo + (hi - lo) * (t - (i / 2) as f64))
            })
            .collect();
        // One link of 1000 bit/s: full in seconds 0 and 3, half full in 1 and 2.
        let row = LinkRow {
            dev: "s0".into(),
            address: "10.0.0.1".parse().unwrap(),
            capacity_bps: 1000,
            bytes: 0,
            clients: 0,
            mean_util: 0.0,
            peak_util: 0.0,
            per_second_bps: vec![1000, 500, 500, 990, 0],
            waited_s: 0.0,
            waited_util: None,
        };
        let h = host(&samples, &[row], 0.0, 4.0, 2);
        assert_eq!(h.per_second_busy, vec![0.5, 1.0, 1.0, 1.0, 0.0]);
        assert_eq!(
            h.cpu_bound_s, 2.0,
            "seconds 1 and 2; second 3's links were full"
        );
        assert_eq!(h.cpu_bound_seconds, [1, 2]);
        assert!((h.mean_busy - 3.5 / 4.0).abs() < 1e-9, "{}", h.mean_busy);
        assert!((h.clients_cpu_s - 2.5).abs() < 1e-9);
        // Clients that wanted data only in second 0 saw no CPU-bound second.
        assert_eq!(host(&samples, &[], 0.0, 1.0, 2).cpu_bound_s, 0.0);
    }

    #[test]
    fn a_room_on_one_of_its_links_is_uneven_and_a_spread_one_is_not() {
        assert!(uneven(&[40, 0, 0, 0]));
        assert!(uneven(&[80, 41, 39, 40]));
        assert!(!uneven(&[10, 10, 10, 10]));
        assert!(!uneven(&[51, 49, 50, 50]));
        assert!(!uneven(&[2, 1]));
        assert!(!uneven(&[40]));
        assert!(!uneven(&[0, 0]));
        assert!(!uneven(&[]));
    }
}

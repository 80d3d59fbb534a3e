//! One simulated client: on a thread of its own, in a network namespace of its own with its
//! own MAC, it replays a recorded boot. The firmware's part (DHCP, loader, iPXE script, kernel
//! and initrd) runs step by step with the recording's think times and real firmware timers;
//! the root's reads run closed-loop (`trace::format::Gates`) through NFS and NBD clients this
//! project did not write (`nfs`, `nbd`); the end is the booted call the image makes.
//! DHCP goes through `dhcp4r`, TFTP through `tftp_client`, HTTP through `ureq`: none shares a
//! codec with the server.

use super::dhcp::{self, Identity, Lease, Tries};
use super::plan::Plan;
use anyhow::{Context, bail};
use bootpool::trace::format::{Bytes, Op, What};
use serde::Serialize;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

/// TFTP as firmware does it: EDK2's PXE base code waits 4 s for a block and tries 6 times
/// (`PXEBC_MTFTP_TIMEOUT`, `PXEBC_MTFTP_RETRIES`); its DHCP follows the PXE schedule
/// (`dhcp::PXE_TIMEOUTS`).
pub const TFTP_TIMEOUT: Duration = Duration::from_secs(4);
pub const TFTP_TRIES: usize = 6;
/// How long iPXE (and the initrd's wget) waits on an HTTP transfer that has stopped moving.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(60);
/// How many times a boot file is asked for before the client fails: iPXE itself asks once,
/// and a room's boot script retries a failed `kernel` or `initrd` (`|| goto retry`); each
/// try past the first counts in `http_retries`.
pub const HTTP_TRIES: u32 = 3;

/// How many NAKs a client takes before its boot fails: each sends it back to a DISCOVER.
pub const MAX_NAKS: u32 = 4;

/// When each boot milestone was reached, in seconds from the room's power-on.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Milestones {
    pub power_on: f64,
    pub first_discover: Option<f64>,
    pub ack: Option<f64>,
    pub loader: Option<f64>,
    pub script: Option<f64>,
    pub kernel: Option<f64>,
    pub attached: Option<f64>,
    pub booted: Option<f64>,
}

/// A client's own count of its boot.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Outcome {
    pub index: usize,
    pub mac: String,
    pub ip: Option<Ipv4Addr>,
    /// The server address it booted from (DHCP's server identifier).
    pub server: Option<Ipv4Addr>,
    /// Where its boot went, as the server told it: the loader's TFTP server (siaddr), the
    /// kernel's HTTP server (the script's `kernel` URL) and the root's server (the root
    /// argument). On a server with several links these name the link chosen for it.
    pub tftp_server: Option<Ipv4Addr>,
    pub http_server: Option<Ipv4Addr>,
    pub root_server: Option<Ipv4Addr>,
    /// `booted`, or `failed` with `error` saying where and why.
    pub result: String,
    pub error: Option<String>,
    pub at: Milestones,
    pub bytes: Bytes,
    /// Of `bytes.http`, the iPXE script's: it is generated per client, so its size is the
    /// client's own, not the recorded one's.
    pub script_bytes: u64,
    pub dhcp_retransmits: u32,
    pub tftp_retries: u32,
    pub http_retries: u32,
    /// TCP segments its namespace sent again (`RetransSegs` of its /proc/net/snmp): its
    /// requests and acknowledgements (the server's own resends count in its namespace).
    pub tcp_retransmits: u64,
    /// Root connections it opened: NFS connections (the trace's read-ahead needs up to 8),
    /// NBD attaches (as recorded), and those made again after one broke (also counted in
    /// `root_reconnects`).
    pub root_connections: u64,
    /// Datagrams its namespace dropped on a full receive buffer (`sample::udp_rcvbuf_errors`)
    /// and DHCP frames its link socket had no room for: answers that came and were lost in
    /// the client, behind other clients' broadcasts.
    pub udp_drops: u64,
    /// Root requests made that the trace did not have (path walks for handles the replay had
    /// to look up).
    pub extra_requests: u64,
    pub root_errors: u64,
    /// Boot files whose size was not the recorded one's (an image built again differs in a
    /// few bytes): the whole file was fetched, so the boot goes on, and the report says so.
    pub differs: Vec<String>,
    /// Times its boot failed and it booted again from the start (`Plan::restart`); the
    /// first failure is kept in `error`.
    pub restarts: u32,
    /// Its booted call, refused or unanswered: the boot goes on, as the image's init logs it
    /// and goes on (images/demo-recipe/rootfs-init).
    pub callback_error: Option<String>,
    /// Root connections made again after one broke or went unanswered (`retry`: the hard
    /// NFS mount's reconnects, the NBD client's reconfigures).
    pub root_reconnects: u64,
    /// Its longest stall: the longest gap between two answers it got (DHCP, boot files, root
    /// requests, the booted call), from and to in seconds from the storm's start.
    pub longest_stall: Option<(f64, f64)>,
    /// When each answer came, in seconds from the storm's start (the stalls are its gaps).
    #[serde(skip)]
    pub answers: Vec<f64>,
    /// Each HTTP boot file and root read it waited for: what it asked of its server link
    /// (the report's "work waiting for the link").
    #[serde(skip)]
    pub waits: Vec<Wait>,
}

/// One request a client waited for: sent at `from`, answered in full at `to` (seconds from
/// the storm's start), `bytes` long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Wait {
    pub from: f64,
    pub to: f64,
    pub bytes: u64,
}

impl Outcome {
    /// A client that could not even start its boot.
    pub fn failed(index: usize, mac: String, error: String) -> Outcome {
        Outcome {
            index,
            mac,
            result: "failed".into(),
            error: Some(error),
            ..Outcome::default()
        }
    }

    pub fn boot_s(&self) -> Option<f64> {
        Some(self.at.booted? - self.at.power_on)
    }
}

/// Where the client is in its replay.
struct Run<'a> {
    plan: &'a Plan,
    dev: String,
    out: Outcome,
    sock: Option<UdpSocket>,
    lease: Option<Lease>,
    offer: Option<dhcp::Offer>,
    /// The NBD export the script's root argument names, which the root's replay attaches.
    nbd_export: Option<String>,
    /// The NFS root's ports, when the script's root argument names them: (nfs, mount).
    nfs_ports: Option<(u16, u16)>,
    /// The NBD root's port, when the script's root argument names one.
    nbd_port: Option<u16>,
    /// The root's manifest and the peers' port, when the script roots the client through the
    /// agent (`bootpool.blocks=`, `bootpool.peers=`).
    agent: Option<(String, Option<u16>)>,
    /// When the previous op's answer came, on the client's clock (seconds from `t0`), and on
    /// the recording's.
    last_end: f64,
    last_end_recorded: f64,
}

impl Run<'_> {
    fn now(&self) -> f64 {
        self.plan.t0.elapsed().as_secs_f64()
    }

    /// Waits the think time before `op`, measured from the previous answer.
    fn think(&self, op: &Op) {
        let gap = (op.t - self.last_end_recorded).max(0.0) * self.plan.think_scale;
        let wait = self.last_end + gap - self.now();
        if wait > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(wait));
        }
    }

    fn done(&mut self, op: &Op) {
        self.last_end = self.now();
        self.out.answers.push(self.last_end);
        self.last_end_recorded = op.end();
    }

    fn server(&self) -> anyhow::Result<Ipv4Addr> {
        self.lease
            .as_ref()
            .map(|l| l.server)
            .context("a request before any DHCP lease")
    }

    /// Where the loader comes from: next-server, else the DHCP server.
    fn tftp_server(&self) -> anyhow::Result<Ipv4Addr> {
        let server = self.server()?;
        Ok(self
            .lease
            .as_ref()
            .map(|l| l.next_server)
            .filter(|a| !a.is_unspecified())
            .unwrap_or(server))
    }

    /// Where HTTP goes: the script's host until the script names the kernel's, else the DHCP
    /// server.
    fn http_server(&self) -> anyhow::Result<Ipv4Addr> {
        let server = self.server()?;
        Ok(self
            .out
            .http_server
            .or_else(|| self.lease.as_ref()?.boot_file.as_deref().and_then(url_host))
            .unwrap_or(server))
    }

    /// One DHCP message of the recording: a DISCOVER until its OFFER, or a REQUEST of the
    /// offered address until its ACK (the address then goes on the link).
    fn dhcp(&mut self, msg: &str, id: Identity) -> anyhow::Result<()> {
        if self.sock.is_none() {
            self.sock = Some(dhcp::socket(&self.dev)?);
        }
        let sock = self.sock.as_ref().expect("just made");
        let mut tries = Tries::default();
        if msg == "discover" {
            self.out.at.first_discover.get_or_insert(self.now());
            self.offer = Some(dhcp::discover(
                sock,
                &id,
                rand_xid(self.out.index),
                &mut tries,
            )?);
        } else {
            // A NAK (the offered address went to another client meanwhile, as dnsmasq's
            // hashed offers can) sends the client back to DISCOVER, counted as a retry.
            let mut naks = 0;
            let lease = loop {
                let offer = match self.offer.take() {
                    Some(o) => o,
                    None => dhcp::discover(sock, &id, rand_xid(self.out.index), &mut tries)?,
                };
                match dhcp::request(sock, &id, &offer, &mut tries) {
                    Ok(lease) => break lease,
                    Err(e) if e.is::<dhcp::Nak>() && naks < MAX_NAKS => {
                        naks += 1;
                        tries.retransmits += 1;
                    }
                    Err(e) => return Err(e),
                }
            };
            if self.lease.as_ref().map(|l| l.ip) != Some(lease.ip) {
                configure(&self.dev, &lease)?;
            }
            self.out.ip = Some(lease.ip);
            self.out.server = Some(lease.server);
            self.out.at.ack.get_or_insert(self.now());
            self.lease = Some(lease);
        }
        self.out.dhcp_retransmits += tries.retransmits;
        self.out.udp_drops += tries.dropped;
        Ok(())
    }

    /// Fetches a boot file of the recording (`expect`: its recorded size, if known).
    fn file(&mut self, proto: &str, name: &str, expect: Option<u64>) -> anyhow::Result<()> {
        let mac = self.out.mac.clone();
        let got = match proto {
            "tftp" => {
                let server = self.tftp_server()?;
                self.out.tftp_server = Some(server);
                let sock = UdpSocket::bind("0.0.0.0:0")?;
                let (data, retries) = tftp(&sock, server, name)?;
                self.out.tftp_retries += retries;
                self.out.bytes.tftp += data;
                self.out.at.loader = Some(self.now());
                data
            }
            _ => {
                // A script is fetched by its own MAC, not the recorded client's.
                let path = if name.starts_with("/boot/script/") {
                    format!("/boot/script/{mac}.ipxe")
                } else {
                    name.to_string()
                };
                let server = self.http_server()?;
                let url = format!("http://{server}:{}{path}", self.plan.http_port);
                let script = path.starts_with("/boot/script/");
                let mut body = Vec::new();
                let from = self.now();
                let (n, retries) = http_get_tries(&url, script.then_some(&mut body))?;
                self.out.http_retries += retries;
                self.out.waits.push(Wait {
                    from,
                    to: self.now(),
                    bytes: n,
                });
                self.out.bytes.http += n;
                if script {
                    // The rest of the boot goes where the script says.
                    let named = script_names(&String::from_utf8_lossy(&body));
                    self.out.http_server = Some(named.kernel.unwrap_or(server));
                    self.out.root_server = named.root.or(self.out.http_server);
                    self.nbd_export = named.nbd_export;
                    self.nfs_ports = named.nfs_ports;
                    self.nbd_port = named.nbd_port;
                    self.agent = named.blocks.map(|b| (b, named.peers));
                    self.out.script_bytes += n;
                    self.out.at.script = Some(self.now());
                } else {
                    self.out.at.kernel = Some(self.now());
                }
                n
            }
        };
        if let Some(expect) = expect.filter(|&e| !name.starts_with("/boot/script/") && got != e) {
            self.out.differs.push(format!(
                "{name}: {got} bytes where the recording had {expect}"
            ));
        }
        Ok(())
    }
}

fn rand_xid(i: usize) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    t ^ (i as u32).wrapping_mul(0x9e37_79b9)
}

/// Puts the leased address on the client's link.
fn configure(dev: &str, lease: &Lease) -> anyhow::Result<()> {
    super::room::ip(&[
        format!("addr flush dev {dev}"),
        format!("addr add {}/{} dev {dev}", lease.ip, lease.prefix),
    ])
}

/// A whole file over TFTP (512-byte blocks: `tftp_client` asks no options) with firmware
/// timers: it waits `TFTP_TIMEOUT` for each block and gives up after `TFTP_TRIES` sends.
/// Returns its size and the retransmits it took. tftp_client does
/// not report its retries, so they are counted from the kernel's side: the UDP datagrams this
/// client's namespace sent during the transfer, beyond the RRQ and one ACK per 512-byte block
/// (a retry of either, and the ACK of a block the server sent twice, is one more).
fn tftp(sock: &UdpSocket, server: Ipv4Addr, name: &str) -> anyhow::Result<(u64, u32)> {
    let to = std::net::SocketAddr::V4(SocketAddrV4::new(server, 69));
    let before = udp_datagrams_sent();
    match tftp_client::download(name, sock, to, TFTP_TIMEOUT, TFTP_TIMEOUT, TFTP_TRIES) {
        Ok(data) => {
            let sent = udp_datagrams_sent()
                .zip(before)
                .map_or(0, |(after, before)| after.saturating_sub(before));
            let needed = 1 + data.len() as u64 / 512 + 1;
            let retries = u32::try_from(sent.saturating_sub(needed)).unwrap_or(u32::MAX);
            Ok((data.len() as u64, retries))
        }
        Err(e) => bail!("tftp {name}: {e}"),
    }
}

/// `OutDatagrams` of this thread's network namespace (`/proc/thread-self/net/snmp`): each
/// client has a namespace of its own, so these are its own.
fn udp_datagrams_sent() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/net/snmp").ok()?;
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next()?, udp.next()?);
    let at = names.split_whitespace().position(|n| n == "OutDatagrams")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// The host of an `http://HOST[:PORT]/...` URL.
fn url_host(url: &str) -> Option<Ipv4Addr> {
    let rest = url.strip_prefix("http://")?;
    let authority = rest.split('/').next()?;
    authority.split(':').next()?.parse().ok()
}

/// What an iPXE script names for the rest of the boot.
#[derive(Debug, Default, PartialEq)]
struct ScriptNames {
    /// The `kernel` URL's host.
    kernel: Option<Ipv4Addr>,
    /// The server the root argument names (`root=nfs:HOST:`, `root=nbd:HOST:`,
    /// `nfsroot=HOST:`, `nbdroot=HOST:`).
    root: Option<Ipv4Addr>,
    /// The NBD export it names (`root=nbd:HOST:[PORT/]NAME`, `nbdroot=HOST:PORT/NAME`,
    /// `nbdroot=HOST,NAME[,DEV]`).
    nbd_export: Option<String>,
    /// The NFS root's `port=` and `mountport=`, when it names both: the kernel then asks no
    /// portmapper (nor does the replay).
    nfs_ports: Option<(u16, u16)>,
    /// The NBD root's port, when the root argument names one (`HOST:PORT/NAME`).
    nbd_port: Option<u16>,
    /// `bootpool.blocks=`: the root's manifest on each server, for the agent.
    blocks: Option<String>,
    /// `bootpool.peers=`: the port the agent serves its room's peers on.
    peers: Option<u16>,
}

fn script_names(script: &str) -> ScriptNames {
    let Some(line) = script
        .lines()
        .find_map(|l| l.trim().strip_prefix("kernel "))
    else {
        return ScriptNames::default();
    };
    let mut words = line.split_whitespace();
    let mut named = ScriptNames {
        kernel: words.next().and_then(url_host),
        ..ScriptNames::default()
    };
    let words: Vec<&str> = words.collect();
    for w in &words {
        if let Some(b) = w.strip_prefix("bootpool.blocks=") {
            named.blocks = Some(b.to_string());
        } else if let Some(p) = w.strip_prefix("bootpool.peers=") {
            named.peers = p.parse().ok();
        }
    }
    for w in words {
        let (nbd, rest) = if let Some(r) = w.strip_prefix("root=nfs:") {
            (false, r)
        } else if let Some(r) = w.strip_prefix("nfsroot=") {
            (false, r)
        } else if let Some(r) = w.strip_prefix("root=nbd:") {
            (true, r)
        } else if let Some(r) = w.strip_prefix("nbdroot=") {
            (true, r)
        } else {
            continue;
        };
        let (host, after) = rest.split_at(rest.find([':', ',', '/']).unwrap_or(rest.len()));
        named.root = host.parse().ok();
        if !nbd {
            let option = |key: &str| {
                after
                    .split([',', ':'])
                    .find_map(|o| o.strip_prefix(key)?.parse::<u16>().ok())
            };
            named.nfs_ports = option("port=").zip(option("mountport="));
        }
        if nbd {
            // After the host: `:PORT/NAME`, `:NAME` (dracut's default port), `,NAME,DEV`.
            let after = after.get(1..).unwrap_or("");
            let name = match after.split_once('/') {
                Some((port, name)) => {
                    named.nbd_port = port.parse().ok();
                    name
                }
                None => after.split(',').next().unwrap_or(""),
            };
            named.nbd_export = (!name.is_empty()).then(|| name.to_string());
        }
        break;
    }
    named
}

/// GET up to `HTTP_TRIES` times until the whole body came (into `keep`, if given): its
/// bytes, and the tries past the first. The last failure is the error.
fn http_get_tries(url: &str, mut keep: Option<&mut Vec<u8>>) -> anyhow::Result<(u64, u32)> {
    let mut tries = 0;
    loop {
        tries += 1;
        let got = match keep.as_deref_mut() {
            Some(body) => {
                body.clear();
                http_get(url, body)
            }
            None => http_get(url, &mut std::io::sink()),
        };
        match got {
            Ok(n) => return Ok((n, tries - 1)),
            Err(e) if tries >= HTTP_TRIES => {
                return Err(e.context(format!("after {tries} tries")));
            }
            Err(_) => {}
        }
    }
}

/// GET, counting the body's bytes as it goes to `sink`.
fn http_get(url: &str, sink: &mut dyn std::io::Write) -> anyhow::Result<u64> {
    // Ends a transfer that stops moving, not a long one: each connect and each read of the
    // response gets HTTP_TIMEOUT (the storm's own --timeout bounds the whole run).
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(HTTP_TIMEOUT))
        .timeout_per_read(Some(HTTP_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent
        .get(url)
        .call()
        .with_context(|| format!("GET {url}"))?;
    if !resp.status().is_success() {
        bail!("GET {url}: {}", resp.status());
    }
    let length = resp
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let mut reader = resp.body_mut().as_reader();
    let n = std::io::copy(&mut reader, sink).with_context(|| format!("GET {url}: body"))?;
    if let Some(want) = length.filter(|&want| want != n) {
        bail!("GET {url}: {n} bytes of a {want}-byte body");
    }
    Ok(n)
}

fn http_post(url: &str, body: String) -> anyhow::Result<()> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .into();
    let resp = agent
        .post(url)
        .header("content-type", "application/json")
        .send(body)
        .with_context(|| format!("POST {url}"))?;
    if !resp.status().is_success() {
        bail!("POST {url}: {}", resp.status());
    }
    Ok(())
}

/// Boots one client on the calling thread (already in the client's namespace, its link `dev`
/// up), powering on at `power_on` seconds after `plan.t0`.
pub fn boot(index: usize, mac: String, dev: String, plan: &Plan, power_on: f64) -> Outcome {
    let wait = power_on - plan.t0.elapsed().as_secs_f64();
    if wait > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(wait));
    }
    let mut run = Run {
        plan,
        dev,
        out: Outcome {
            index,
            mac,
            at: Milestones {
                power_on,
                ..Milestones::default()
            },
            ..Outcome::default()
        },
        sock: None,
        lease: None,
        nbd_export: None,
        nfs_ports: None,
        nbd_port: None,
        agent: None,
        offer: None,
        last_end: power_on,
        last_end_recorded: 0.0,
    };
    let mut result = replay(&mut run);
    if let Err(e) = &result
        && plan.restart
    {
        // Reset, as a machine whose boot failed is: from the firmware's DHCP again, its
        // counts and answers kept (the stall runs across the restart).
        run.out.restarts += 1;
        run.out.error = Some(format!("{e:#}"));
        run.sock = None;
        run.lease = None;
        run.offer = None;
        run.nbd_export = None;
        run.nfs_ports = None;
        run.nbd_port = None;
        run.agent = None;
        run.out.http_server = None;
        run.out.root_server = None;
        run.last_end = run.now();
        run.last_end_recorded = 0.0;
        result = replay(&mut run);
    }
    match result {
        Ok(()) => run.out.result = "booted".into(),
        Err(e) => {
            run.out.result = "failed".into();
            run.out.error = Some(match run.out.error.take() {
                Some(first) => format!("{e:#} (after a restart; before it: {first})"),
                None => format!("{e:#}"),
            });
        }
    }
    run.out.longest_stall = super::retry::longest_gap(&run.out.answers);
    run.out.udp_drops += super::sample::udp_rcvbuf_errors();
    // The client's namespace is its own: what it counts is this boot's.
    run.out.tcp_retransmits = super::sample::tcp_retransmits();
    run.out
}

fn replay(run: &mut Run<'_>) -> anyhow::Result<()> {
    let trace = run.plan.trace.clone();
    let ops = &trace.ops;
    let mac = parse_mac(&run.out.mac)?;
    if run.plan.tftp_loader {
        loader(run, mac)?;
    }
    let mut i = 0;
    while i < ops.len() {
        let op = &ops[i];
        match &op.what {
            What::Dhcp {
                msg,
                pxe,
                ipxe,
                arch,
            } => {
                run.think(op);
                let id = Identity {
                    mac,
                    pxe: *pxe,
                    ipxe: *ipxe,
                    arch: arch.unwrap_or(0),
                };
                run.dhcp(msg, id)?;
                run.done(op);
                i += 1;
            }
            What::File {
                proto, name, bytes, ..
            } => {
                run.think(op);
                run.file(proto, name, Some(*bytes))?;
                run.done(op);
                i += 1;
            }
            What::Nfs { .. } | What::Nbd { .. } => {
                // The root's requests up to the next op of another kind, closed-loop.
                let end = ops[i..]
                    .iter()
                    .position(|o| !matches!(o.what, What::Nfs { .. } | What::Nbd { .. }))
                    .map_or(ops.len(), |n| i + n);
                root(run, &ops[i..end])?;
                i = end;
            }
            What::Booted => {
                run.think(op);
                if run.plan.callback {
                    let server = run.http_server()?;
                    let body = serde_json::json!({
                        "uptime_s": run.now() - run.out.at.power_on,
                        "root_bytes": run.out.bytes.nfs + run.out.bytes.nbd,
                    });
                    let url = format!("http://{server}:{}/api/v1/booted", run.plan.http_port);
                    // The image's init logs a failed call and goes on: so does its replay.
                    if let Err(e) = http_post(&url, body.to_string()) {
                        run.out.callback_error = Some(format!("{e:#}"));
                    }
                }
                run.out.at.booted = Some(run.now());
                run.done(op);
                i += 1;
            }
        }
    }
    if run.out.at.booted.is_none() {
        // A trace that ends without the booted call ends when its last answer came.
        run.out.at.booted = Some(run.now());
    }
    Ok(())
}

/// What a NIC's PXE ROM does before the trace's (iPXE's) first step: DHCP as the firmware
/// (the PXE options, no iPXE user class, the architecture the trace's first DHCP gives), then
/// the loader the ACK names over TFTP. The trace's first step thinks from its end.
fn loader(run: &mut Run<'_>, mac: [u8; 6]) -> anyhow::Result<()> {
    let arch = run.plan.trace.ops.iter().find_map(|o| match &o.what {
        What::Dhcp { arch, .. } => Some(arch.unwrap_or(0)),
        _ => None,
    });
    let id = Identity {
        mac,
        pxe: true,
        ipxe: false,
        arch: arch.unwrap_or(0),
    };
    run.dhcp("discover", id)?;
    run.out.answers.push(run.now());
    run.dhcp("request", id)?;
    run.out.answers.push(run.now());
    let name = run
        .lease
        .as_ref()
        .and_then(|l| l.boot_file.clone())
        .context("the firmware's DHCP ACK names no loader (option 67)")?;
    run.file("tftp", &name, None)?;
    run.last_end = run.now();
    run.out.answers.push(run.last_end);
    Ok(())
}

/// The root's requests: rebased so the first waits its think time from the previous answer.
fn root(run: &mut Run<'_>, ops: &[Op]) -> anyhow::Result<()> {
    let server = match run.out.root_server {
        Some(s) => s,
        None => run.server()?,
    };
    let base = run.last_end_recorded;
    let rebased: Vec<Op> = ops
        .iter()
        .map(|o| Op {
            t: (o.t - base).max(0.0),
            ..o.clone()
        })
        .collect();
    let through_agent = run.agent.is_some();
    let nbd = super::root::Nbd {
        port: run.nbd_port.unwrap_or(run.plan.nbd_port),
        export: run.nbd_export.as_deref(),
        through_agent,
    };
    if let Some((blocks, peers)) = run.agent.take() {
        // As the initrd's hook: the agent starts on the command line's values before the
        // kernel's NBD client attaches to it (its manifest's fetch is the root's first wait).
        let agents = run.plan.agents.as_ref().context(
            "the boot script roots this client through the agent (bootpool.blocks=): run the storm with --swarm AGENT",
        )?;
        if agents.rogues.contains(&run.out.index) {
            // `--swarm-corrupt`: it plays a corrupting peer to its room and does not boot.
            let chunk = bootpool::image::blocks::CHUNK as usize;
            let size = run.plan.image.as_ref().map_or(0, |i| i.len());
            super::swarm_faults::rogue(
                &blocks,
                peers.unwrap_or(10810),
                size.div_ceil(chunk) as u64,
                chunk,
            )?;
            bail!("{}", super::swarm_faults::ROGUE);
        }
        agents
            .start(
                run.out.index,
                &blocks,
                peers,
                nbd.port,
                nbd.export.unwrap_or("root"),
            )
            .context("root: the agent")?;
    }
    let stats = super::root::replay(server, run.plan, &rebased, &nbd, run.nfs_ports)?;
    let t0 = run.plan.t0;
    let at = |t: Instant| t.saturating_duration_since(t0).as_secs_f64();
    run.out
        .waits
        .extend(stats.waits.iter().map(|&(from, to, bytes)| Wait {
            from: at(from),
            to: at(to),
            bytes,
        }));
    run.out.bytes.nfs += stats.nfs_bytes;
    run.out.bytes.nbd += stats.nbd_bytes;
    run.out.extra_requests += stats.extra_requests;
    run.out.root_connections += stats.connections;
    run.out.root_reconnects += stats.reconnects;
    run.out.answers.extend(stats.answers.iter().map(|&t| at(t)));
    run.out.root_errors += stats.errors;
    run.out.at.attached = stats.attached.map(|t| run.last_end + t);
    if stats.errors > 0 {
        bail!(
            "root: {} requests failed (first: {})",
            stats.errors,
            stats.first_error.unwrap_or_default()
        );
    }
    run.last_end = run.now();
    run.last_end_recorded = ops.iter().map(Op::end).fold(base, f64::max);
    Ok(())
}

fn parse_mac(s: &str) -> anyhow::Result<[u8; 6]> {
    let mac: bootpool::config::Mac = s.parse().map_err(|e| anyhow::anyhow!("{s}: {e}"))?;
    Ok(mac.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_of_the_boot_goes_where_the_script_says() {
        let ours = "#!ipxe\nkernel http://10.78.0.3:8080/boot/demo/vmlinuz root=nfs:10.78.0.3:/demo:ro,port=2049 bootpool.url=http://10.78.0.3:8080\ninitrd http://10.78.0.3:8080/boot/demo/initrd.img\nboot\n";
        let three = Some(Ipv4Addr::new(10, 78, 0, 3));
        let named = script_names(ours);
        assert_eq!((named.kernel, named.root), (three, three));
        assert_eq!(named.nbd_export, None);
        assert_eq!(
            named.nfs_ports, None,
            "no mountport=: the portmapper is asked"
        );
        let both = script_names(
            "kernel http://h/k root=nfs:10.78.0.3:/demo:ro,nocto,port=2049,mountport=2050 x",
        );
        assert_eq!(both.nfs_ports, Some((2049, 2050)));
        let nbd = script_names("kernel http://10.0.0.1/k root=nbd:10.0.0.2:demo~zstd x");
        assert_eq!(
            nbd,
            ScriptNames {
                kernel: Some(Ipv4Addr::new(10, 0, 0, 1)),
                root: Some(Ipv4Addr::new(10, 0, 0, 2)),
                nbd_export: Some("demo~zstd".into()),
                ..ScriptNames::default()
            }
        );
        let ported = script_names("kernel http://h/k root=nbd:10.0.0.2:10810/demo@0123456789ab ro");
        assert_eq!(ported.nbd_export.as_deref(), Some("demo@0123456789ab"));
        let tools =
            script_names("kernel http://10.0.0.1:80/k boot=local nbdroot=10.0.0.4:10809/demo");
        assert_eq!(tools.root, Some(Ipv4Addr::new(10, 0, 0, 4)));
        assert_eq!(tools.nbd_export.as_deref(), Some("demo"));
        assert_eq!(tools.nbd_port, Some(10809));
        assert_eq!(tools.blocks, None);
        // Through the agent: its manifest on each server, and the peers' port.
        let agent = script_names(
            "kernel http://10.0.0.1/k nbdroot=127.0.0.1:10809/root bootpool.blocks=http://10.0.0.1:8080/boot/demo/blocks/ab,http://10.0.0.2:8080/boot/demo/blocks/ab bootpool.peers=10810",
        );
        assert_eq!(agent.root, Some(Ipv4Addr::LOCALHOST));
        assert_eq!(agent.nbd_export.as_deref(), Some("root"));
        assert_eq!(
            agent.blocks.as_deref(),
            Some(
                "http://10.0.0.1:8080/boot/demo/blocks/ab,http://10.0.0.2:8080/boot/demo/blocks/ab"
            )
        );
        assert_eq!(agent.peers, Some(10810));
        let commas = script_names("kernel http://h/k nbdroot=10.0.0.4,deb-root,nbd0");
        assert_eq!(commas.nbd_export.as_deref(), Some("deb-root"));
        assert_eq!(script_names("#!ipxe\nchain x\n"), ScriptNames::default());
        assert_eq!(
            url_host("http://10.1.2.3:8080/boot/script/a.ipxe"),
            Some(Ipv4Addr::new(10, 1, 2, 3))
        );
        assert_eq!(url_host("undionly.kpxe"), None);
    }
}

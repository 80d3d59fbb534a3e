//! Turns a client's events into boots and phases. Pure data: no I/O, no clock.
//!
//! A boot is marked by milestones; each phase runs from the previous milestone to its own:
//! `dhcp` (first DISCOVER to ACK), `loader` (TFTP of the NBP), `ipxe` (to the script fetch),
//! `shim` and `grub` in their place for the Secure Boot chain (to the signed shim's TFTP, then
//! to the GRUB config's, which ends GRUB's own loading too),
//! `kernel` (to the last of kernel and initrd), `initrd` (to the root attach), `root` (to the
//! boot's end: the client's booted call, else the end bootpool inferred, `end.rs`). Phases a
//! boot skipped (the qemu ROM is iPXE already: no loader) are simply absent.

use super::console::Console;
use super::end::{Evidence, Gone, GoneEvidence, Inferred, RootReads, RootUse};
use super::event::{Event, FileKind, Kind, Micros, Outcome, Proto, WAKE_STARTS_WITHIN};
use super::served::{self, Served, Turn};
use crate::config::Mac;
use crate::config::names::Rev;
use crate::proto::dhcp::Relayed;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

/// A DISCOVER after this long without events from a client starts a new boot.
const RESTART_SILENCE_US: Micros = 300 * 1_000_000;

pub const PHASES: [&str; 8] = [
    "dhcp", "loader", "ipxe", "shim", "grub", "kernel", "initrd", "root",
];

/// Who said a boot was up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// The client's own `POST /api/v1/booted`.
    Reported,
    /// bootpool, from what it saw (`Boot::inferred` says how).
    Inferred,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BootResult {
    Running,
    Booted,
    /// The server refused or lacked what the client needed, or the client said it failed.
    Failed,
}

/// Where and why a boot failed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// The phase it was in: dhcp, loader, ipxe, kernel, initrd or root.
    pub phase: &'static str,
    pub reason: String,
    /// The service that saw it (`None`: the client reported it).
    pub proto: Option<Proto>,
    pub at: Micros,
}

#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub name: &'static str,
    pub start: Micros,
    pub end: Micros,
}

#[derive(Debug, Clone, Default, Serialize)]
struct Marks {
    /// The ACK named a TFTP loader (the firmware was not iPXE yet).
    loader_pending: bool,
    discover: Option<Micros>,
    ack: Option<Micros>,
    loader: Option<Micros>,
    script: Option<Micros>,
    /// The Secure Boot chain's shim, then the GRUB config, sent.
    shim: Option<Micros>,
    grub: Option<Micros>,
    kernel: Option<Micros>,
    initrd: Option<Micros>,
    attach: Option<Micros>,
    booted: Option<Micros>,
    /// The initrd's own DHCP (no PXEClient) between the initrd and the root attach: how often
    /// it asked (DISCOVERs heard), was offered an address and was given one (ACKs sent).
    initrd_dhcp: InitrdDhcp,
}

/// What bootpool heard and answered of an initrd's DHCP before its root was attached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct InitrdDhcp {
    pub discovers: u32,
    /// DISCOVERs this server answered with an offer.
    pub offers: u32,
    pub acks: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Boot {
    pub id: u64,
    pub mac: Mac,
    pub ip: Option<Ipv4Addr>,
    /// The address DHCPv6 gave it, when it asked over IPv6.
    pub ip6: Option<std::net::Ipv6Addr>,
    pub pool: Option<String>,
    /// The server link (address) the client was told to boot from.
    pub link: Option<Ipv4Addr>,
    /// The relay its DHCP came through and what its option 82 said (its switch port), from
    /// the boot's ACKs.
    pub relayed: Option<Relayed>,
    /// The architecture its firmware said (option 93) in the boot's first DISCOVER that
    /// said one.
    pub arch: Option<u16>,
    pub start: Micros,
    pub last_event: Micros,
    pub result: BootResult,
    pub root: Option<Proto>,
    /// Payload bytes sent to the client, per protocol.
    pub bytes: BTreeMap<Proto, u64>,
    /// What the client said of its own uptime when it reported up.
    pub uptime_s: Option<f64>,
    /// What the client said its root read over the network, by its own kernel's count.
    pub client_root_bytes: Option<u64>,
    /// Set when the result is `Failed`.
    pub failure: Option<Failure>,
    /// The lines its client's console sent (netconsole, iPXE's syslog), bounded; shared so
    /// that a copy of the boot for the API costs no copy of the lines.
    #[serde(skip)]
    pub console: Arc<Console>,
    /// The end bootpool inferred on its own side, kept beside a reported one.
    pub inferred: Option<Inferred>,
    /// When and why its client was seen to go (powered off, restarted).
    pub gone: Option<Gone>,
    /// The image revision its root export named (`EXPORT@ID`, `config::names`), if any.
    pub revision: Option<Rev>,
    /// The next boot an admin set that its script applied (`bootpool next-boot`).
    pub next_boot: Option<super::event::NextBootNote>,
    /// The wake (`bootpool wake`, a pool's schedule) whose magic packet started it.
    pub wake: Option<u64>,
    /// That wake's time: its first magic packet to any client (`Timelines::wakes`).
    pub wake_at: Option<Micros>,
    /// Which site member served it when (`served.rs`; empty outside a site).
    #[serde(skip)]
    pub served: Served,
    marks: Marks,
    reads: RootReads,
}

impl Boot {
    fn new(id: u64, mac: Mac, at: Micros) -> Boot {
        Boot {
            id,
            mac,
            ip: None,
            ip6: None,
            pool: None,
            link: None,
            relayed: None,
            arch: None,
            start: at,
            last_event: at,
            result: BootResult::Running,
            root: None,
            bytes: BTreeMap::new(),
            uptime_s: None,
            client_root_bytes: None,
            failure: None,
            console: Arc::default(),
            inferred: None,
            gone: None,
            revision: None,
            next_boot: None,
            wake: None,
            wake_at: None,
            served: Served::default(),
            marks: Marks::default(),
            reads: RootReads::default(),
        }
    }

    /// When the boot was up and who said so: the client's booted call wins over an inferred
    /// end, even a later one. A failed boot has no end.
    pub fn end(&self) -> Option<(Micros, End)> {
        if self.result == BootResult::Failed {
            return None;
        }
        match (self.marks.booted, self.inferred) {
            (Some(at), _) => Some((at, End::Reported)),
            (None, Some(i)) => Some((i.at, End::Inferred)),
            (None, None) => None,
        }
    }

    /// Up, by the client's word or by inference (and not failed since).
    pub fn is_up(&self) -> bool {
        self.end().is_some()
    }

    /// Seconds from the first DISCOVER to the end (`end`).
    pub fn duration_s(&self) -> Option<f64> {
        self.end().map(|(at, _)| (at - self.start) as f64 / 1e6)
    }

    /// Seconds from the first DISCOVER to the inferred end, reported end or not.
    pub fn inferred_s(&self) -> Option<f64> {
        (self.result != BootResult::Failed)
            .then_some(self.inferred?)
            .map(|i| (i.at - self.start) as f64 / 1e6)
    }

    /// Infers the end from the root's reads if they have settled by `now`. Returns whether
    /// it did. Nothing is inferred for a boot that failed or whose client went first.
    fn settle(&mut self, now: Micros) -> bool {
        if self.inferred.is_some() || self.gone.is_some() || self.result == BootResult::Failed {
            return false;
        }
        let Some(at) = self.reads.settled(now) else {
            return false;
        };
        self.inferred = Some(Inferred {
            at,
            evidence: Evidence::RootSettled,
        });
        true
    }

    fn infer(&mut self, at: Micros, evidence: Evidence) {
        if self.inferred.is_none() && self.gone.is_none() && self.result != BootResult::Failed {
            self.inferred = Some(Inferred { at, evidence });
        }
    }

    /// The phases this boot has completed, contiguous and in order.
    pub fn phases(&self) -> Vec<Phase> {
        let m = &self.marks;
        // The kernel phase ends when both files arrived.
        let kernel_end = match (m.kernel, m.initrd) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        let ends = [
            ("dhcp", m.ack),
            ("loader", m.loader),
            ("ipxe", m.script),
            ("shim", m.shim),
            ("grub", m.grub),
            ("kernel", kernel_end),
            ("initrd", m.attach),
            ("root", self.end().map(|(at, _)| at)),
        ];
        let mut start = self.start;
        let mut out = Vec::new();
        for (name, end) in ends {
            if let Some(end) = end
                && end >= start
            {
                out.push(Phase { name, start, end });
                start = end;
            }
        }
        out
    }

    /// Who served each phase (`served.rs`): the completed phases in order, the last one
    /// open once the boot is up (its root's reads after the end count), then, for a boot
    /// not up, the phase it is in (or failed in), open. Empty turns outside a site.
    pub fn served_phases(&self) -> Vec<(&'static str, Vec<Turn>)> {
        let phases = self.phases();
        let up = self.is_up();
        let last = phases.len();
        let mut out: Vec<(&'static str, Vec<Turn>)> = phases
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let open = up && k + 1 == last;
                let end = (!open).then_some(p.end);
                (p.name, self.served.turns(p.start, end, k == 0))
            })
            .collect();
        if !up {
            let start = phases.last().map_or(self.start, |p| p.end);
            let turns = self.served.turns(start, None, phases.is_empty());
            out.push((self.current_phase(), turns));
        }
        out
    }

    /// Firmware had a whole loader (iPXE) over TFTP or HTTP and nothing after it came yet:
    /// no script fetch, no Secure Boot chain, no kernel.
    pub fn waits_after_its_loader(&self) -> bool {
        let m = &self.marks;
        m.loader.is_some()
            && m.script.is_none()
            && m.shim.is_none()
            && m.grub.is_none()
            && m.kernel.is_none()
    }

    /// The phase a running boot is in now: the one after the last milestone it reached
    /// (`booted` once up).
    pub fn current_phase(&self) -> &'static str {
        if self.is_up() {
            "booted"
        } else if let Some(f) = &self.failure {
            f.phase
        } else {
            self.phase_reached()
        }
    }

    /// The phase after the last milestone before the end.
    fn phase_reached(&self) -> &'static str {
        let m = &self.marks;
        if m.attach.is_some() {
            "root"
        } else if m.kernel.is_some() && m.initrd.is_some() {
            "initrd"
        } else if m.script.is_some() || m.grub.is_some() {
            "kernel"
        } else if m.shim.is_some() {
            "grub"
        } else if m.ack.is_some() && m.loader_pending && m.loader.is_none() {
            "loader"
        } else if m.ack.is_some() {
            "ipxe"
        } else {
            "dhcp"
        }
    }

    /// The initrd's DHCP as bootpool saw it, for a boot that lost its address mid-way.
    pub fn initrd_dhcp(&self) -> InitrdDhcp {
        self.marks.initrd_dhcp
    }

    /// Has this boot gone past the firmware's part (so a new PXE DISCOVER means a new boot)?
    fn past_firmware(&self) -> bool {
        self.marks.script.is_some()
            || self.marks.grub.is_some()
            || self.marks.kernel.is_some()
            || self.result != BootResult::Running
    }
}

/// All boots, grouped by client.
#[derive(Debug, Default)]
pub struct Timelines {
    boots: Vec<Boot>,
    /// Index into `boots` of each client's newest boot.
    current: BTreeMap<Mac, usize>,
    /// Which client holds which address, learnt from DHCP ACKs.
    ip_to_mac: BTreeMap<Ipv4Addr, Mac>,
    /// Each client's use of the root it attached last (`image::usage`).
    roots: BTreeMap<Mac, RootUse>,
    /// The wake that sent each client its last magic packet, and when: its next boot is
    /// that wake's.
    woken: BTreeMap<Mac, (u64, Micros)>,
    /// Each wake's time: its first magic packet, to whichever client.
    wakes: BTreeMap<u64, Micros>,
}

impl Timelines {
    pub fn boots(&self) -> &[Boot] {
        &self.boots
    }

    /// Each client's use of the root it attached last, by the server's own sockets.
    pub fn roots(&self) -> &BTreeMap<Mac, RootUse> {
        &self.roots
    }

    /// The boot numbered `id` (`Boot::id`).
    pub fn boot(&self, id: u64) -> Option<&Boot> {
        self.boots.get(usize::try_from(id).ok()?.checked_sub(1)?)
    }

    /// The newest boot of a client.
    pub fn current(&self, mac: Mac) -> Option<&Boot> {
        self.current.get(&mac).map(|&i| &self.boots[i])
    }

    /// Whether a DISCOVER from `mac` at `at` starts a new boot (`pxe`: it carries the PXE
    /// class, as a firmware's and iPXE's do). Boot firmware asking again after the script
    /// means the machine restarted, as does any DISCOVER after a long silence (a boot that
    /// died early, then a power-on); iPXE chainloaded by a PXE firmware, and the initrd's own
    /// DHCP (no PXE class), belong to the boot under way. The records and the choice of a
    /// client's server link (`steer::placement`) both ask this.
    pub fn discover_starts_boot(&self, mac: Mac, pxe: bool, at: Micros) -> bool {
        match self.current.get(&mac) {
            None => true,
            Some(&i) => {
                let b = &self.boots[i];
                let silent = at - b.last_event > RESTART_SILENCE_US;
                (pxe && b.past_firmware()) || silent
            }
        }
    }

    /// The client an event is about, if it can be told.
    pub fn mac_for(&self, who: super::event::Who) -> Option<Mac> {
        match who {
            super::event::Who::Mac(m) => Some(m),
            super::event::Who::Ip(ip) => self.mac_of(ip),
        }
    }

    pub fn mac_of(&self, ip: Ipv4Addr) -> Option<Mac> {
        self.ip_to_mac.get(&ip).copied()
    }

    /// Console lines from `mac`'s client, for its newest boot. A line that ends a boot (a
    /// panic, an initrd giving up: `signs::fatal`) fails a boot still running. Only the new
    /// lines are looked at: the work per line does not grow with the kept console. Returns
    /// false when the client has no boot to attach them to.
    pub fn console(&mut self, mac: Mac, at: Micros, lines: Vec<String>) -> bool {
        let Some(&i) = self.current.get(&mac) else {
            return false;
        };
        let boot = &mut self.boots[i];
        boot.last_event = boot.last_event.max(at);
        let fatal = lines.iter().find(|l| super::signs::fatal(l)).cloned();
        let console = Arc::make_mut(&mut boot.console);
        for line in lines {
            console.push(at, line);
        }
        if let Some(text) = fatal {
            fail_from_line(boot, at, &text);
        }
        true
    }

    /// A boot's console as the store kept it, given back to the boot of `mac` that started at
    /// `start` (replay).
    pub fn restore_console(&mut self, mac: Mac, start: Micros, console: Console) -> bool {
        let Some(boot) = self
            .boots
            .iter_mut()
            .rev()
            .find(|b| b.mac == mac && b.start == start)
        else {
            return false;
        };
        boot.console = Arc::new(console);
        fail_from_console(boot);
        true
    }

    /// Infers the end of every client's newest boot whose root has settled by `now`; returns
    /// the clients whose boot changed. Called as time passes (the records' writer) and after
    /// a replay: an event applied later settles its boot first, at the event's time, so a
    /// replay infers what the live daemon did.
    pub fn settle(&mut self, now: Micros) -> Vec<Mac> {
        let mut changed = Vec::new();
        for (mac, &i) in &self.current {
            if self.boots[i].settle(now) {
                changed.push(*mac);
            }
        }
        changed
    }

    /// Applies one event (a server's alone, or this member's without its name). Returns false
    /// if it could not be tied to a client.
    pub fn apply(&mut self, ev: &Event) -> bool {
        self.apply_from(ev, None)
    }

    /// Applies one event written by site member `member` (`None`: outside a site), whose
    /// service events (`served::serves`) say who served the boot. Returns false if it could
    /// not be tied to a client. Longer than the house's ~150 lines on purpose: one arm per
    /// event kind, each a few lines on the one boot the event was tied to.
    pub fn apply_from(&mut self, ev: &Event, member: Option<&str>) -> bool {
        use super::event::Who;
        let mac = match ev.who {
            Who::Mac(m) => m,
            Who::Ip(ip) => match self.ip_to_mac.get(&ip) {
                Some(m) => *m,
                None => return false,
            },
        };
        // A magic packet is no part of a boot: it names the wake the next one belongs to.
        if let Kind::Woken { wake } = ev.kind {
            self.woken.insert(mac, (wake, ev.at));
            let first = self.wakes.entry(wake).or_insert(ev.at);
            *first = (*first).min(ev.at);
            return true;
        }
        // Time passed since this client's last event: its root may have settled meanwhile.
        if let Some(&i) = self.current.get(&mac) {
            self.boots[i].settle(ev.at);
        }
        if let Kind::DhcpDiscover { pxe, .. } = ev.kind
            && self.discover_starts_boot(mac, pxe, ev.at)
        {
            if let Some(&i) = self.current.get(&mac) {
                self.boots[i].gone.get_or_insert(Gone {
                    at: ev.at,
                    evidence: GoneEvidence::NewBoot,
                });
            }
            let id = self.boots.len() as u64 + 1;
            let mut boot = Boot::new(id, mac, ev.at);
            boot.wake = self
                .woken
                .remove(&mac)
                .filter(|&(_, at)| at <= ev.at && ev.at - at <= WAKE_STARTS_WITHIN)
                .map(|(wake, _)| wake);
            boot.wake_at = boot.wake.and_then(|w| self.wakes.get(&w).copied());
            self.boots.push(boot);
            self.current.insert(mac, self.boots.len() - 1);
        }
        let Some(&i) = self.current.get(&mac) else {
            // An event for a client we never saw DHCP from (e.g. a daemon restart): start here.
            let id = self.boots.len() as u64 + 1;
            self.boots.push(Boot::new(id, mac, ev.at));
            self.current.insert(mac, self.boots.len() - 1);
            return self.apply_from(ev, member);
        };
        let boot = &mut self.boots[i];
        boot.last_event = boot.last_event.max(ev.at);
        if let Some(m) = member
            && served::serves(&ev.kind)
        {
            boot.served.saw(m, ev.at);
        }
        // The booted system's own DHCP, after its root was attached.
        if let Kind::DhcpDiscover { pxe: false, .. }
        | Kind::DhcpAck { pxe: false, .. }
        | Kind::Dhcp6Reply { pxe: false, .. } = ev.kind
            && boot.marks.attach.is_some()
        {
            boot.infer(ev.at, Evidence::DhcpAfterRoot);
        }
        let m = &mut boot.marks;
        if m.initrd.is_some() && m.attach.is_none() {
            match ev.kind {
                Kind::DhcpDiscover {
                    pxe: false,
                    answered,
                    ..
                } => {
                    m.initrd_dhcp.discovers += 1;
                    m.initrd_dhcp.offers += u32::from(answered);
                }
                Kind::DhcpAck { pxe: false, .. } | Kind::Dhcp6Reply { pxe: false, .. } => {
                    m.initrd_dhcp.acks += 1
                }
                _ => {}
            }
        }
        match &ev.kind {
            Kind::DhcpDiscover { pool, arch, .. } => {
                m.discover.get_or_insert(ev.at);
                if boot.pool.is_none() {
                    boot.pool.clone_from(pool);
                }
                boot.arch = boot.arch.or(*arch);
            }
            Kind::DhcpAck {
                ip,
                pool,
                pxe,
                ipxe,
                link,
                relayed,
            } => {
                if m.ack.is_none() {
                    m.loader_pending = *pxe && !*ipxe;
                }
                m.ack.get_or_insert(ev.at);
                boot.ip = Some(*ip);
                boot.pool = Some(pool.clone());
                if link.is_some() {
                    boot.link = *link;
                }
                if relayed.is_some() {
                    boot.relayed.clone_from(relayed);
                }
                self.ip_to_mac.insert(*ip, mac);
            }
            Kind::Dhcp6Reply {
                ip,
                pool,
                pxe,
                ipxe,
                ..
            } => {
                if m.ack.is_none() {
                    m.loader_pending = *pxe && !*ipxe;
                }
                m.ack.get_or_insert(ev.at);
                boot.ip6 = Some(*ip);
                boot.pool = Some(pool.clone());
            }
            Kind::File {
                proto,
                kind,
                bytes,
                outcome,
                ..
            } => {
                *boot.bytes.entry(*proto).or_default() += bytes;
                if *outcome == Outcome::Complete {
                    let mark = match kind {
                        FileKind::Loader => &mut m.loader,
                        FileKind::Script => &mut m.script,
                        FileKind::Shim => &mut m.shim,
                        FileKind::GrubConfig => &mut m.grub,
                        FileKind::Grub => return true,
                        FileKind::Kernel => &mut m.kernel,
                        FileKind::Initrd => &mut m.initrd,
                        FileKind::Other => return true,
                    };
                    *mark = Some(ev.at);
                }
            }
            Kind::RootAttach { proto, export } => {
                m.attach.get_or_insert(ev.at);
                boot.root = Some(*proto);
                let revision = export.rev().cloned();
                if revision.is_some() {
                    boot.revision = revision.clone();
                }
                boot.reads.attach();
                let floor = match self.roots.get(&mac) {
                    Some(u) if u.boot == boot.id => u.attached,
                    _ => boot.start,
                };
                self.roots
                    .insert(mac, RootUse::attach(boot.id, revision, ev.at, floor));
                // Back again (an NBD client that reconnected): it had not gone after all.
                if boot
                    .gone
                    .is_some_and(|g| g.evidence != GoneEvidence::NewBoot)
                {
                    boot.gone = None;
                }
            }
            Kind::RootRead { proto, bytes } => {
                *boot.bytes.entry(*proto).or_default() += bytes;
                boot.reads.read(ev.at, *bytes);
                if let Some(u) = self.roots.get_mut(&mac) {
                    u.read(ev.at);
                }
            }
            Kind::RootDetach { proto, how, since } => {
                if let Some(u) = self.roots.get_mut(&mac) {
                    u.detach(*proto, *how, *since, ev.at);
                }
                // A connection older than this boot was an earlier boot's (its client's new
                // kernel, at the same address, reset it): it says nothing of this one.
                let earlier = since.is_some_and(|s| s < boot.start);
                if let Some(evidence) = GoneEvidence::of_detach(*proto, *how).filter(|_| !earlier) {
                    boot.gone.get_or_insert(Gone {
                        at: ev.at,
                        evidence,
                    });
                }
            }
            Kind::Booted {
                uptime_s,
                root_bytes,
            } => {
                boot.client_root_bytes = *root_bytes;
                m.booted.get_or_insert(ev.at);
                boot.uptime_s = *uptime_s;
                // A client that reports up after a failure got past it (a retry worked).
                boot.result = BootResult::Booted;
                boot.failure = None;
            }
            Kind::NextBoot(note) => boot.next_boot = Some(note.clone()),
            // Taken before a boot is looked for (above).
            Kind::Woken { .. } => {}
            Kind::Failed { proto, reason } => {
                // The first failure is the cause; a booted boot stays booted.
                if boot.result == BootResult::Running {
                    boot.failure = Some(Failure {
                        phase: boot.phase_reached(),
                        reason: reason.clone(),
                        proto: *proto,
                        at: ev.at,
                    });
                    boot.result = BootResult::Failed;
                }
            }
        }
        true
    }
}

/// A running boot whose console shows a fatal line is failed, the line its reason (a whole
/// console, once: a replay's).
fn fail_from_console(boot: &mut Boot) {
    let Some(line) = boot.console.lines().find(|l| super::signs::fatal(&l.text)) else {
        return;
    };
    let (at, text) = (line.at, line.text.clone());
    fail_from_line(boot, at, &text);
}

/// A running boot is failed by its console's fatal line `text`, heard at `at`.
fn fail_from_line(boot: &mut Boot, at: Micros, text: &str) {
    if boot.result != BootResult::Running {
        return;
    }
    boot.failure = Some(Failure {
        phase: boot.current_phase(),
        reason: format!("console: {text}"),
        proto: None,
        at,
    });
    boot.result = BootResult::Failed;
}

/// Test support: a boot of `mac` in `pool` from `start_s`: DHCP (0-1 s), script, kernel and
/// initrd over HTTP (2-4 s), then its root attach `attach_s` after the start; returns the
/// address its ACK gave (10.77.0.X, X the MAC's last byte).
#[cfg(test)]
pub(crate) fn boot_to_attach(
    t: &mut Timelines,
    mac: Mac,
    pool: &str,
    root: Proto,
    start_s: i64,
    attach_s: i64,
) -> Ipv4Addr {
    use super::event::Who;
    let ip = Ipv4Addr::new(10, 77, 0, mac.0[5]);
    let file = |kind| Kind::File {
        proto: Proto::Http,
        kind,
        path: "f".into(),
        bytes: 10,
        outcome: Outcome::Complete,
    };
    let (pxe, ipxe) = (true, true);
    let events = [
        (
            0,
            Kind::DhcpDiscover {
                answered: true,
                pool: None,
                pxe,
                ipxe,
                arch: None,
            },
        ),
        (
            1,
            Kind::DhcpAck {
                ip,
                pxe,
                ipxe,
                pool: pool.into(),
                link: None,
                relayed: None,
            },
        ),
        (2, file(FileKind::Script)),
        (3, file(FileKind::Kernel)),
        (4, file(FileKind::Initrd)),
        (
            attach_s,
            Kind::RootAttach {
                proto: root,
                export: "/x".into(),
            },
        ),
    ];
    for (s, kind) in events {
        t.apply(&Event {
            at: (start_s + s) * 1_000_000,
            who: Who::Mac(mac),
            kind,
        });
    }
    ip
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::end::QUIET_S;
    use crate::record::event::{Detach, Who};

    fn ev(at: Micros, who: Who, kind: Kind) -> Event {
        Event { at, who, kind }
    }

    /// A magic packet starts no boot; the client's next boot within the window is the wake's,
    /// a later one, or one whose packet came after its start, is not; a next boot its script
    /// applied stays with the boot.
    #[test]
    fn a_wake_names_the_boot_it_starts_and_starts_none_itself() {
        let mac: Mac = "52:54:00:77:00:01".parse().unwrap();
        let other: Mac = "52:54:00:77:00:02".parse().unwrap();
        let mut t = Timelines::default();
        let s = 1_000_000;
        let woken = |wake| Kind::Woken { wake };
        assert!(t.apply(&ev(100 * s, Who::Mac(mac), woken(7))));
        assert!(t.apply(&ev(100 * s, Who::Mac(other), woken(7))));
        assert!(t.boots().is_empty());
        boot_to_attach(&mut t, mac, "room", Proto::Nbd, 130, 10);
        // Its packet came more than 10 minutes before: not the wake's.
        boot_to_attach(&mut t, other, "room", Proto::Nbd, 100 + 601, 10);
        assert_eq!(t.current(mac).unwrap().wake, Some(7));
        assert_eq!(t.current(mac).unwrap().wake_at, Some(100 * s));
        assert_eq!(t.current(other).unwrap().wake, None);
        assert_eq!(t.current(other).unwrap().wake_at, None);
        // Taken once: the client's boot after that is nobody's wake.
        boot_to_attach(&mut t, mac, "room", Proto::Nbd, 2000, 10);
        assert_eq!(t.current(mac).unwrap().wake, None);
        let note = crate::record::event::NextBootNote {
            target: "local".into(),
            once: true,
            scope: format!("client {mac}"),
            set_at: 1_800_000_000,
            by: "admin".into(),
        };
        t.apply(&ev(2003 * s, Who::Mac(mac), Kind::NextBoot(note.clone())));
        assert_eq!(t.current(mac).unwrap().next_boot, Some(note));
        assert_eq!(t.boots().len(), 3);
    }

    /// The Secure Boot chain over TFTP: the shim, then GRUB and its config, name their own
    /// phases; GRUB's binary is bytes of the grub phase, not a milestone.
    #[test]
    fn the_signed_chain_gives_shim_and_grub_phases() {
        let mac: Mac = "52:54:00:77:00:01".parse().unwrap();
        let ip: Ipv4Addr = "10.77.0.100".parse().unwrap();
        let file = |kind, bytes| Kind::File {
            proto: Proto::Tftp,
            kind,
            path: "x".into(),
            bytes,
            outcome: Outcome::Complete,
        };
        let mut t = Timelines::default();
        let (pxe, ipxe) = (true, false);
        t.apply(&ev(
            1_000_000,
            Who::Mac(mac),
            Kind::DhcpDiscover {
                answered: true,
                pool: None,
                pxe,
                ipxe,
                arch: None,
            },
        ));
        t.apply(&ev(
            2_000_000,
            Who::Mac(mac),
            Kind::DhcpAck {
                ip,
                pxe,
                ipxe,
                pool: "room".into(),
                link: None,
                relayed: None,
            },
        ));
        assert_eq!(t.boots()[0].current_phase(), "loader");
        t.apply(&ev(3_000_000, Who::Ip(ip), file(FileKind::Shim, 1000)));
        assert_eq!(t.boots()[0].current_phase(), "grub");
        t.apply(&ev(4_000_000, Who::Ip(ip), file(FileKind::Grub, 2000)));
        assert_eq!(t.boots()[0].current_phase(), "grub");
        t.apply(&ev(5_000_000, Who::Ip(ip), file(FileKind::GrubConfig, 300)));
        assert_eq!(t.boots()[0].current_phase(), "kernel");
        t.apply(&ev(6_000_000, Who::Ip(ip), file(FileKind::Kernel, 8000)));
        t.apply(&ev(7_000_000, Who::Ip(ip), file(FileKind::Initrd, 4000)));
        let b = &t.boots()[0];
        let names: Vec<_> = b
            .phases()
            .iter()
            .map(|p| (p.name, p.start, p.end))
            .collect();
        assert_eq!(
            names,
            [
                ("dhcp", 1_000_000, 2_000_000),
                ("shim", 2_000_000, 3_000_000),
                ("grub", 3_000_000, 5_000_000),
                ("kernel", 5_000_000, 7_000_000),
            ]
        );
        assert_eq!(b.bytes[&Proto::Tftp], 15_300);
        // Firmware asking again once GRUB had its config is a new boot.
        t.apply(&ev(
            8_000_000,
            Who::Mac(mac),
            Kind::DhcpDiscover {
                answered: true,
                pool: None,
                pxe,
                ipxe,
                arch: None,
            },
        ));
        assert_eq!(t.boots().len(), 2);
    }

    #[test]
    fn a_whole_boot_gives_contiguous_phases() {
        let mac: Mac = "52:54:00:77:00:01".parse().unwrap();
        let ip: Ipv4Addr = "10.77.0.100".parse().unwrap();
        let file = |kind, bytes| Kind::File {
            proto: Proto::Http,
            kind,
            path: "x".into(),
            bytes,
            outcome: Outcome::Complete,
        };
        let mut t = Timelines::default();
        t.apply(&ev(
            1_000_000,
            Who::Mac(mac),
            Kind::DhcpDiscover {
                answered: true,
                pool: None,
                pxe: true,
                ipxe: true,
                arch: None,
            },
        ));
        t.apply(&ev(
            2_000_000,
            Who::Mac(mac),
            Kind::DhcpAck {
                ip,
                pxe: true,
                ipxe: true,
                pool: "room".into(),
                link: None,
                relayed: None,
            },
        ));
        assert!(t.apply(&ev(2_500_000, Who::Ip(ip), file(FileKind::Script, 300))));
        t.apply(&ev(
            4_000_000,
            Who::Ip(ip),
            file(FileKind::Kernel, 8_000_000),
        ));
        t.apply(&ev(
            5_000_000,
            Who::Ip(ip),
            file(FileKind::Initrd, 4_000_000),
        ));
        // The initrd's own DHCP does not start a new boot.
        t.apply(&ev(
            6_000_000,
            Who::Mac(mac),
            Kind::DhcpDiscover {
                answered: true,
                pool: None,
                pxe: false,
                ipxe: false,
                arch: None,
            },
        ));
        t.apply(&ev(
            7_000_000,
            Who::Ip(ip),
            Kind::RootAttach {
                proto: Proto::Nfs,
                export: "/demo".into(),
            },
        ));
        t.apply(&ev(
            8_000_000,
            Who::Ip(ip),
            Kind::RootRead {
                proto: Proto::Nfs,
                bytes: 1000,
            },
        ));
        t.apply(&ev(
            9_000_000,
            Who::Ip(ip),
            Kind::Booted {
                root_bytes: Some(1000),
                uptime_s: Some(5.0),
            },
        ));
        assert_eq!(t.boots().len(), 1);
        let b = &t.boots()[0];
        assert_eq!(b.result, BootResult::Booted);
        assert_eq!(b.duration_s(), Some(8.0));
        let names: Vec<_> = b
            .phases()
            .iter()
            .map(|p| (p.name, p.start, p.end))
            .collect();
        assert_eq!(
            names,
            [
                ("dhcp", 1_000_000, 2_000_000),
                ("ipxe", 2_000_000, 2_500_000),
                ("kernel", 2_500_000, 5_000_000),
                ("initrd", 5_000_000, 7_000_000),
                ("root", 7_000_000, 9_000_000)
            ]
        );
        assert_eq!(b.bytes[&Proto::Http], 12_000_300);
        assert_eq!(b.bytes[&Proto::Nfs], 1000);
        // Firmware asking again after the boot starts a new one.
        t.apply(&ev(
            20_000_000,
            Who::Mac(mac),
            Kind::DhcpDiscover {
                answered: true,
                pool: None,
                pxe: true,
                ipxe: false,
                arch: None,
            },
        ));
        assert_eq!(t.boots().len(), 2);
        // So does a DISCOVER long after a boot that died before its script.
        let pxe = |pool: &str| Kind::DhcpAck {
            ip,
            pxe: true,
            ipxe: false,
            pool: pool.into(),
            link: None,
            relayed: None,
        };
        t.apply(&ev(21_000_000, Who::Mac(mac), pxe("room")));
        let discover = Kind::DhcpDiscover {
            answered: true,
            pool: None,
            pxe: true,
            ipxe: false,
            arch: None,
        };
        t.apply(&ev(900_000_000, Who::Mac(mac), discover.clone()));
        assert_eq!(t.boots().len(), 3);
        // But not one soon after (firmware retrying within its boot).
        t.apply(&ev(901_000_000, Who::Mac(mac), discover));
        assert_eq!(t.boots().len(), 3);
    }

    #[test]
    fn a_failure_ends_the_boot_in_its_phase_until_firmware_tries_again() {
        let mac: Mac = "52:54:00:77:00:03".parse().unwrap();
        let ip: Ipv4Addr = "10.77.0.103".parse().unwrap();
        let mut t = Timelines::default();
        let pxe = Kind::DhcpDiscover {
            answered: true,
            pool: None,
            pxe: true,
            ipxe: false,
            arch: None,
        };
        t.apply(&ev(1_000_000, Who::Mac(mac), pxe.clone()));
        t.apply(&ev(
            2_000_000,
            Who::Mac(mac),
            Kind::DhcpAck {
                ip,
                pxe: true,
                ipxe: false,
                pool: "room".into(),
                link: None,
                relayed: None,
            },
        ));
        let failed = |reason: &str| Kind::Failed {
            proto: Some(Proto::Tftp),
            reason: reason.into(),
        };
        t.apply(&ev(
            2_100_000,
            Who::Ip(ip),
            failed("undionly.kpxe: not found"),
        ));
        // A second failure does not hide the first.
        t.apply(&ev(2_200_000, Who::Ip(ip), failed("other")));
        let b = &t.boots()[0];
        assert_eq!(b.result, BootResult::Failed);
        assert_eq!(b.current_phase(), "loader");
        let f = b.failure.as_ref().unwrap();
        assert_eq!(
            (f.phase, f.reason.as_str()),
            ("loader", "undionly.kpxe: not found")
        );
        assert_eq!(b.duration_s(), None);
        // The firmware trying again is a new boot.
        t.apply(&ev(3_000_000, Who::Mac(mac), pxe));
        assert_eq!(t.boots().len(), 2);
        assert_eq!(t.boots()[1].result, BootResult::Running);
    }

    const S: Micros = 1_000_000;
    const MIB: u64 = 1 << 20;

    /// A boot of `mac` up to its root attach at 10 s (from 0 s), over `root`.
    fn to_attach(t: &mut Timelines, mac: Mac, root: Proto) -> Ipv4Addr {
        boot_to_attach(t, mac, "room", root, 0, 10)
    }

    fn read(t: &mut Timelines, ip: Ipv4Addr, at: Micros, proto: Proto, bytes: u64) {
        t.apply(&ev(at, Who::Ip(ip), Kind::RootRead { proto, bytes }));
    }

    fn result(t: &Timelines, now: Micros) -> &'static str {
        crate::record::standing::result_at(&t.boots()[t.boots().len() - 1], now)
    }

    #[test]
    fn a_root_that_goes_quiet_ends_the_boot_at_its_last_read() {
        let mac = Mac([0x52, 0x54, 0, 0x77, 0, 0x21]);
        let mut t = Timelines::default();
        let ip = to_attach(&mut t, mac, Proto::Nfs);
        for s in 11..=40 {
            read(&mut t, ip, s * S, Proto::Nfs, MIB);
        }
        // Still reading, then quiet but not for long enough.
        assert_eq!(result(&t, 41 * S), "running");
        assert!(t.settle(40 * S + QUIET_S * S).is_empty());
        assert_eq!(t.settle(41 * S + QUIET_S * S), [mac]);
        let b = &t.boots()[0];
        assert_eq!(result(&t, 41 * S + QUIET_S * S), "booted");
        assert_eq!(b.end(), Some((40 * S, End::Inferred)));
        assert_eq!(b.inferred.unwrap().evidence, Evidence::RootSettled);
        assert_eq!((b.duration_s(), b.inferred_s()), (Some(40.0), Some(40.0)));
        assert_eq!(b.current_phase(), "booted");
        let root = b.phases().pop().unwrap();
        assert_eq!((root.name, root.start, root.end), ("root", 10 * S, 40 * S));
        // Settled once: reading again later moves nothing.
        read(&mut t, ip, 200 * S, Proto::Nfs, 10 * MIB);
        assert!(t.settle(400 * S).is_empty());
        assert_eq!(t.boots()[0].end(), Some((40 * S, End::Inferred)));
        // The client's booted call, later, wins; the inferred end is kept beside it.
        t.apply(&ev(
            201 * S,
            Who::Ip(ip),
            Kind::Booted {
                uptime_s: None,
                root_bytes: None,
            },
        ));
        let b = &t.boots()[0];
        assert_eq!(b.end(), Some((201 * S, End::Reported)));
        assert_eq!((b.duration_s(), b.inferred_s()), (Some(201.0), Some(40.0)));
    }

    /// An event after the quiet settles the boot first, at the event's time: a replay, which
    /// has no clock ticking between events, infers the same end as the live daemon.
    #[test]
    fn a_replay_infers_what_the_live_record_did() {
        let mac = Mac([0x52, 0x54, 0, 0x77, 0, 0x22]);
        let run = |ticking: bool| {
            let mut t = Timelines::default();
            let ip = to_attach(&mut t, mac, Proto::Nbd);
            read(&mut t, ip, 12 * S, Proto::Nbd, 8 * MIB);
            if ticking {
                t.settle(60 * S);
            }
            read(&mut t, ip, 100 * S, Proto::Nbd, 8 * MIB);
            t
        };
        let (live, replay) = (run(true), run(false));
        assert_eq!(live.boots()[0].end(), Some((12 * S, End::Inferred)));
        assert_eq!(replay.boots()[0].end(), live.boots()[0].end());
    }

    #[test]
    fn too_little_read_a_failure_or_a_client_gone_first_infers_nothing() {
        let quiet_after = |s: i64| s * S + QUIET_S * S + 1;
        // A mount and a superblock, then nothing: not a booted system.
        let mut t = Timelines::default();
        let ip = to_attach(&mut t, Mac([0x52, 0x54, 0, 0x77, 0, 0x23]), Proto::Nbd);
        read(&mut t, ip, 11 * S, Proto::Nbd, MIB);
        assert!(t.settle(quiet_after(11)).is_empty());
        assert_eq!(result(&t, quiet_after(11)), "running");
        // Failed: the failure stands.
        let mut t = Timelines::default();
        let ip = to_attach(&mut t, Mac([0x52, 0x54, 0, 0x77, 0, 0x24]), Proto::Nfs);
        read(&mut t, ip, 11 * S, Proto::Nfs, 8 * MIB);
        let failed = Kind::Failed {
            proto: None,
            reason: "kernel panic".into(),
        };
        t.apply(&ev(12 * S, Who::Ip(ip), failed.clone()));
        assert!(t.settle(quiet_after(11)).is_empty());
        assert_eq!(result(&t, quiet_after(11)), "failed");
        // A failure after the inferred end makes the boot failed, in its root phase.
        let mut t = Timelines::default();
        let ip = to_attach(&mut t, Mac([0x52, 0x54, 0, 0x77, 0, 0x25]), Proto::Nfs);
        read(&mut t, ip, 11 * S, Proto::Nfs, 8 * MIB);
        t.settle(quiet_after(11));
        t.apply(&ev(quiet_after(12), Who::Ip(ip), failed));
        let b = &t.boots()[0];
        assert_eq!(
            (result(&t, quiet_after(12)), b.duration_s()),
            ("failed", None)
        );
        assert_eq!(b.failure.as_ref().unwrap().phase, "root");
        // Its NBD client disconnected before the quiet: gone, not up, and no longer running.
        let mut t = Timelines::default();
        let ip = to_attach(&mut t, Mac([0x52, 0x54, 0, 0x77, 0, 0x26]), Proto::Nbd);
        read(&mut t, ip, 11 * S, Proto::Nbd, 8 * MIB);
        let detach = |how| Kind::RootDetach {
            proto: Proto::Nbd,
            how,
            since: None,
        };
        t.apply(&ev(12 * S, Who::Ip(ip), detach(Detach::Disconnect)));
        assert!(t.settle(quiet_after(11)).is_empty());
        let b = &t.boots()[0];
        assert_eq!(
            b.gone,
            Some(Gone {
                at: 12 * S,
                evidence: GoneEvidence::NbdDisconnect
            })
        );
        assert_eq!(result(&t, 13 * S), "timed_out");
        assert_eq!(b.current_phase(), "root");
        // Attached again under the same boot (a reconnect): not gone after all.
        t.apply(&ev(
            14 * S,
            Who::Ip(ip),
            Kind::RootAttach {
                proto: Proto::Nbd,
                export: "stock".into(),
            },
        ));
        assert_eq!(t.boots()[0].gone, None);
        assert_eq!(result(&t, 15 * S), "running");
    }

    #[test]
    fn a_client_up_then_restarted_is_gone_and_its_boot_stays_up() {
        let mac = Mac([0x52, 0x54, 0, 0x77, 0, 0x27]);
        let mut t = Timelines::default();
        let ip = to_attach(&mut t, mac, Proto::Nfs);
        read(&mut t, ip, 20 * S, Proto::Nfs, 8 * MIB);
        // An NFS close is no evidence; a reset is.
        let detach = |how| Kind::RootDetach {
            proto: Proto::Nfs,
            how,
            since: None,
        };
        t.apply(&ev(21 * S, Who::Ip(ip), detach(Detach::Closed)));
        assert_eq!(t.boots()[0].gone, None);
        // The firmware asks again 100 s later: the first boot settled (at 20 s), then went.
        t.apply(&ev(
            120 * S,
            Who::Mac(mac),
            Kind::DhcpDiscover {
                answered: true,
                pool: None,
                pxe: true,
                ipxe: false,
                arch: None,
            },
        ));
        assert_eq!(t.boots().len(), 2);
        let first = &t.boots()[0];
        assert_eq!(first.end(), Some((20 * S, End::Inferred)));
        assert_eq!(
            first.gone,
            Some(Gone {
                at: 120 * S,
                evidence: GoneEvidence::NewBoot
            })
        );
        assert_eq!(crate::record::standing::result_at(first, 121 * S), "booted");
        // Up once, not now: the room shows it as was up, its new boot as booting.
        assert_eq!(crate::record::standing::now_at(first, 121 * S), "was_up");
        assert_eq!(
            crate::record::standing::now_at(&t.boots()[1], 121 * S),
            "booting"
        );
        // The first boot's connection, reset by the new kernel at the same address: nothing
        // of the new boot, which is not gone (seen with VMs, `lab --cycles 2`).
        let reset = |since| Kind::RootDetach {
            proto: Proto::Nfs,
            how: Detach::Reset,
            since: Some(since),
        };
        t.apply(&ev(125 * S, Who::Ip(ip), reset(10 * S)));
        assert_eq!(t.boots()[1].gone, None);
        // One of its own, accepted after it began, is.
        t.apply(&ev(126 * S, Who::Ip(ip), reset(121 * S)));
        assert_eq!(
            t.boots()[1].gone.map(|g| g.evidence),
            Some(GoneEvidence::NfsReset)
        );
        // A reset of the new boot's root, before it is up: gone with that evidence.
        let ip = to_attach(&mut t, Mac([0x52, 0x54, 0, 0x77, 0, 0x28]), Proto::Nfs);
        t.apply(&ev(30 * S, Who::Ip(ip), detach(Detach::Reset)));
        let b = &t.boots()[t.boots().len() - 1];
        assert_eq!(b.gone.map(|g| g.evidence), Some(GoneEvidence::NfsReset));
    }

    #[test]
    fn the_booted_systems_own_dhcp_after_the_root_ends_the_boot() {
        let mac = Mac([0x52, 0x54, 0, 0x77, 0, 0x29]);
        let mut t = Timelines::default();
        let ip = to_attach(&mut t, mac, Proto::Nfs);
        read(&mut t, ip, 20 * S, Proto::Nfs, MIB);
        t.apply(&ev(
            25 * S,
            Who::Mac(mac),
            Kind::DhcpDiscover {
                answered: true,
                pool: None,
                pxe: false,
                ipxe: false,
                arch: None,
            },
        ));
        assert_eq!(t.boots().len(), 1);
        let b = &t.boots()[0];
        assert_eq!(b.end(), Some((25 * S, End::Inferred)));
        assert_eq!(b.inferred.unwrap().evidence, Evidence::DhcpAfterRoot);
        assert_eq!(result(&t, 26 * S), "booted");
    }

    /// In a site each event names its member: a boot placed by its owner `a` on member `b`'s
    /// link has its DHCP from a and the rest from b; a failover after the boot is up (b
    /// killed, a takes its address and its client's root reads) moves the root to a, at a's
    /// first read. Events without a member (outside a site) name nobody.
    #[test]
    fn each_phase_names_the_members_that_served_it_and_a_takeover_moves_it() {
        let mac = Mac([0x52, 0x54, 0, 0x77, 0, 0x30]);
        let ip = Ipv4Addr::new(10, 77, 0, 0x30);
        let mut t = Timelines::default();
        let file = |kind| Kind::File {
            proto: Proto::Http,
            kind,
            path: "f".into(),
            bytes: 10,
            outcome: Outcome::Complete,
        };
        let events = [
            (
                0,
                "a",
                Kind::DhcpDiscover {
                    answered: true,
                    pool: None,
                    pxe: true,
                    ipxe: true,
                    arch: None,
                },
            ),
            (
                1,
                "a",
                Kind::DhcpAck {
                    ip,
                    pxe: true,
                    ipxe: true,
                    pool: "room".into(),
                    link: None,
                    relayed: None,
                },
            ),
            (2, "b", file(FileKind::Script)),
            (3, "b", file(FileKind::Kernel)),
            (4, "b", file(FileKind::Initrd)),
            (
                6,
                "b",
                Kind::RootAttach {
                    proto: Proto::Nfs,
                    export: "/x".into(),
                },
            ),
            (
                7,
                "b",
                Kind::RootRead {
                    proto: Proto::Nfs,
                    bytes: 8 * MIB,
                },
            ),
            // The client's own word is not a member serving it.
            (
                8,
                "a",
                Kind::Booted {
                    uptime_s: None,
                    root_bytes: None,
                },
            ),
            // b is killed; a holds its address from 20 s and answers the root's reads.
            (
                21,
                "a",
                Kind::RootRead {
                    proto: Proto::Nfs,
                    bytes: MIB,
                },
            ),
            (
                25,
                "a",
                Kind::RootRead {
                    proto: Proto::Nfs,
                    bytes: MIB,
                },
            ),
        ];
        for (s, member, kind) in events {
            assert!(t.apply_from(&ev(s * S, Who::Mac(mac), kind), Some(member)));
        }
        let b = t.current(mac).unwrap();
        let served: Vec<(&str, Vec<(String, Micros)>)> = b
            .served_phases()
            .into_iter()
            .map(|(p, turns)| (p, turns.into_iter().map(|x| (x.member, x.at / S)).collect()))
            .collect();
        let one = |m: &str, at| vec![(m.to_string(), at)];
        assert_eq!(
            served,
            [
                ("dhcp", one("a", 0)),
                ("ipxe", one("b", 2)),
                ("kernel", one("b", 2)),
                ("initrd", one("b", 4)),
                ("root", vec![("b".into(), 6), ("a".into(), 21)]),
            ]
        );
        // A boot still running names the phase it is in, too: here the root, by b, then a.
        let mut t = Timelines::default();
        let ip = to_attach(&mut t, mac, Proto::Nbd);
        t.apply_from(
            &ev(
                12 * S,
                Who::Ip(ip),
                Kind::RootRead {
                    proto: Proto::Nbd,
                    bytes: MIB,
                },
            ),
            Some("b"),
        );
        t.apply_from(
            &ev(
                14 * S,
                Who::Ip(ip),
                Kind::RootRead {
                    proto: Proto::Nbd,
                    bytes: MIB,
                },
            ),
            Some("a"),
        );
        let b = t.current(mac).unwrap();
        let (phase, turns) = b.served_phases().pop().unwrap();
        assert_eq!(phase, "root");
        let turns: Vec<_> = turns
            .iter()
            .map(|x| (x.member.as_str(), x.at / S))
            .collect();
        assert_eq!(turns, [("b", 12), ("a", 14)]);
        // The phases before it were applied without a member: nobody named.
        assert!(
            b.served_phases()
                .iter()
                .rev()
                .skip(1)
                .all(|(_, turns)| turns.is_empty())
        );
    }

    #[test]
    fn events_from_unknown_ips_are_not_tied() {
        let mut t = Timelines::default();
        let ip = "10.77.0.5".parse().unwrap();
        assert!(!t.apply(&ev(
            1,
            Who::Ip(ip),
            Kind::Booted {
                uptime_s: None,
                root_bytes: None
            }
        )));
        assert!(t.boots().is_empty());
    }
}

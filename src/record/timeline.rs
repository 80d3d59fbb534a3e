//! Turns a client's events into boots and phases. Pure data: no I/O, no clock.
//!
//! A boot is marked by milestones; each phase runs from the previous milestone to its own:
//! `dhcp` (first DISCOVER to ACK), `loader` (TFTP of the NBP), `ipxe` (to the script fetch),
//! `kernel` (to the last of kernel and initrd), `initrd` (to the root attach), `root` (to the
//! client's booted call). Phases a boot skipped (the qemu ROM is iPXE already: no loader) are
//! simply absent.

use super::console::Console;
use super::event::{Event, FileKind, Kind, Micros, Outcome, Proto};
use crate::config::Mac;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

/// A DISCOVER after this long without events from a client starts a new boot.
const RESTART_SILENCE_US: Micros = 300 * 1_000_000;

pub const PHASES: [&str; 6] = ["dhcp", "loader", "ipxe", "kernel", "initrd", "root"];

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
    kernel: Option<Micros>,
    initrd: Option<Micros>,
    attach: Option<Micros>,
    booted: Option<Micros>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Boot {
    pub id: u64,
    pub mac: Mac,
    pub ip: Option<Ipv4Addr>,
    pub pool: Option<String>,
    /// The server link (address) the client was told to boot from.
    pub link: Option<Ipv4Addr>,
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
    marks: Marks,
}

impl Boot {
    fn new(id: u64, mac: Mac, at: Micros) -> Boot {
        Boot {
            id,
            mac,
            ip: None,
            pool: None,
            link: None,
            start: at,
            last_event: at,
            result: BootResult::Running,
            root: None,
            bytes: BTreeMap::new(),
            uptime_s: None,
            client_root_bytes: None,
            failure: None,
            console: Arc::default(),
            marks: Marks::default(),
        }
    }

    /// Seconds from the first DISCOVER to the booted call.
    pub fn duration_s(&self) -> Option<f64> {
        self.marks.booted.map(|b| (b - self.start) as f64 / 1e6)
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
            ("kernel", kernel_end),
            ("initrd", m.attach),
            ("root", m.booted),
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

    /// The phase a running boot is in now: the one after the last milestone it reached.
    pub fn current_phase(&self) -> &'static str {
        let m = &self.marks;
        if self.result == BootResult::Booted {
            "booted"
        } else if let Some(f) = &self.failure {
            f.phase
        } else if m.attach.is_some() {
            "root"
        } else if m.kernel.is_some() && m.initrd.is_some() {
            "initrd"
        } else if m.script.is_some() {
            "kernel"
        } else if m.ack.is_some() && m.loader_pending && m.loader.is_none() {
            "loader"
        } else if m.ack.is_some() {
            "ipxe"
        } else {
            "dhcp"
        }
    }

    /// Has this boot gone past the firmware's part (so a new PXE DISCOVER means a new boot)?
    fn past_firmware(&self) -> bool {
        self.marks.script.is_some()
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
}

impl Timelines {
    pub fn boots(&self) -> &[Boot] {
        &self.boots
    }

    /// The newest boot of a client.
    pub fn current(&self, mac: Mac) -> Option<&Boot> {
        self.current.get(&mac).map(|&i| &self.boots[i])
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
    /// panic, an initrd giving up: `cause::fatal`) fails a boot still running. Returns false
    /// when the client has no boot to attach them to.
    pub fn console(&mut self, mac: Mac, at: Micros, lines: Vec<String>) -> bool {
        let Some(&i) = self.current.get(&mac) else {
            return false;
        };
        let boot = &mut self.boots[i];
        boot.last_event = boot.last_event.max(at);
        let console = Arc::make_mut(&mut boot.console);
        for line in lines {
            console.push(at, line);
        }
        fail_from_console(boot);
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

    /// Applies one event. Returns false if it could not be tied to a client.
    pub fn apply(&mut self, ev: &Event) -> bool {
        use super::event::Who;
        let mac = match ev.who {
            Who::Mac(m) => m,
            Who::Ip(ip) => match self.ip_to_mac.get(&ip) {
                Some(m) => *m,
                None => return false,
            },
        };
        if let Kind::DhcpDiscover { pxe, .. } = ev.kind {
            let new_boot = match self.current.get(&mac) {
                None => true,
                // Boot firmware asking again after the script means the machine restarted, as
                // does any DISCOVER after a long silence (a boot that died early, then a
                // power-on); the initrd's own DHCP (no PXEClient) belongs to the boot under way.
                Some(&i) => {
                    let b = &self.boots[i];
                    let silent = ev.at - b.last_event > RESTART_SILENCE_US;
                    (pxe && b.past_firmware()) || silent
                }
            };
            if new_boot {
                let id = self.boots.len() as u64 + 1;
                self.boots.push(Boot::new(id, mac, ev.at));
                self.current.insert(mac, self.boots.len() - 1);
            }
        }
        let Some(&i) = self.current.get(&mac) else {
            // An event for a client we never saw DHCP from (e.g. a daemon restart): start here.
            let id = self.boots.len() as u64 + 1;
            self.boots.push(Boot::new(id, mac, ev.at));
            self.current.insert(mac, self.boots.len() - 1);
            return self.apply(ev);
        };
        let boot = &mut self.boots[i];
        boot.last_event = boot.last_event.max(ev.at);
        let m = &mut boot.marks;
        match &ev.kind {
            Kind::DhcpDiscover { pool, .. } => {
                m.discover.get_or_insert(ev.at);
                if boot.pool.is_none() {
                    boot.pool.clone_from(pool);
                }
            }
            Kind::DhcpAck {
                ip,
                pool,
                pxe,
                ipxe,
                link,
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
                self.ip_to_mac.insert(*ip, mac);
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
                        FileKind::Kernel => &mut m.kernel,
                        FileKind::Initrd => &mut m.initrd,
                        FileKind::Other => return true,
                    };
                    *mark = Some(ev.at);
                }
            }
            Kind::RootAttach { proto, .. } => {
                m.attach.get_or_insert(ev.at);
                boot.root = Some(*proto);
            }
            Kind::RootRead { proto, bytes } => {
                *boot.bytes.entry(*proto).or_default() += bytes;
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
            Kind::Failed { proto, reason } => {
                // The first failure is the cause; a booted boot stays booted.
                if boot.result == BootResult::Running {
                    boot.failure = Some(Failure {
                        phase: boot.current_phase(),
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

/// A running boot whose console shows a fatal line is failed, the line its reason.
fn fail_from_console(boot: &mut Boot) {
    if boot.result != BootResult::Running {
        return;
    }
    let Some(line) = boot.console.lines().find(|l| super::cause::fatal(&l.text)) else {
        return;
    };
    boot.failure = Some(Failure {
        phase: boot.current_phase(),
        reason: format!("console: {}", line.text),
        proto: None,
        at: line.at,
    });
    boot.result = BootResult::Failed;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::event::Who;

    fn ev(at: Micros, who: Who, kind: Kind) -> Event {
        Event { at, who, kind }
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
                pool: None,
                pxe: true,
                ipxe: true,
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
                pool: None,
                pxe: false,
                ipxe: false,
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
                pool: None,
                pxe: true,
                ipxe: false,
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
        };
        t.apply(&ev(21_000_000, Who::Mac(mac), pxe("room")));
        let discover = Kind::DhcpDiscover {
            pool: None,
            pxe: true,
            ipxe: false,
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
            pool: None,
            pxe: true,
            ipxe: false,
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

//! The shapes the API and `bootpool report` show: boots with their phases in seconds, waves
//! with their boots, and the comparison of two waves. Serialized as JSON; documented in
//! docs/api.md.

use super::cause::{self, Cause};
use super::event::{Micros, Proto, proto_name};
use super::standing::result_at;
use super::timeline::{Boot, BootResult, End, PHASES};
use super::wave::{Summary, Wave};
use crate::proto::dhcp::Relayed;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BootView {
    pub id: u64,
    pub mac: String,
    pub ip: Option<Ipv4Addr>,
    /// The address DHCPv6 gave it, when it asked over IPv6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip6: Option<std::net::Ipv6Addr>,
    pub pool: Option<String>,
    /// The server link (address) it was told to boot from.
    #[serde(default)]
    pub link: Option<Ipv4Addr>,
    /// The relay its DHCP came through (`giaddr`) and what that relay's option 82 said of
    /// it (`circuit_id`, `remote_id`: its switch port and switch); absent when unrelayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relayed: Option<Relayed>,
    /// The architecture its firmware said in DHCP (option 93: 0 BIOS, 7 and 9 x64 UEFI, 11
    /// ARM64 UEFI, ...), and its family's name (`bios`, `x64`, `ia32`, `arm64`, the names of
    /// `pools.NAME.arch`; absent for codes outside them).
    #[serde(default)]
    pub arch: Option<u16>,
    #[serde(default)]
    pub firmware: Option<String>,
    pub root: Option<Proto>,
    /// `running`, `booted` (reported or inferred up: `end` says which), `failed`, or
    /// `timed_out` (running, but silent for `SILENCE_S`, or gone before it was up).
    pub result: String,
    /// Where its machine stands now (`standing::now_at`): `up`, `was_up` (booted, then gone:
    /// shut down, powered off, restarted), `booting`, `failed` or `timed_out`. What a room's
    /// tile shows.
    #[serde(default)]
    pub now: String,
    /// For a booted boot, who said so: `reported` (the client's booted call) or `inferred`.
    #[serde(default)]
    pub end: Option<String>,
    /// The evidence of the inferred end, kept when a reported end came too: `root_settled`
    /// or `dhcp_after_root`.
    #[serde(default)]
    pub evidence: Option<String>,
    /// First DISCOVER to the inferred end (beside `duration_s`, which is to the reported end
    /// when there is one).
    #[serde(default)]
    pub inferred_s: Option<f64>,
    /// Why bootpool believes the client went away (powered off, restarted): `new_boot`,
    /// `nbd_disconnect`, `nbd_closed`, `nbd_reset`, `nfs_reset`, `nbd_lost` or `nfs_lost`.
    #[serde(default)]
    pub gone: Option<String>,
    /// Unix seconds of that.
    #[serde(default)]
    pub gone_at: Option<f64>,
    /// The image revision it booted (`bootpool image list`), for an image with revisions.
    #[serde(default)]
    pub revision: Option<String>,
    /// The next boot an admin set that its script applied instead of the pool's image
    /// (`POST /api/v1/next-boot`): target, once, scope, set_at (Unix seconds), by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_boot: Option<crate::record::event::NextBootNote>,
    /// The wake whose magic packet started it (`POST /api/v1/wake`, a pool's schedule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<u64>,
    /// For a timed-out or failed boot, the phase it stopped in.
    pub stopped_in: Option<String>,
    /// For a failed boot, why: what the server refused or lacked, or what the client said.
    #[serde(default)]
    pub failure: Option<String>,
    /// Why it failed or is stuck, for an admin to act on (`record::cause`): from the console
    /// and what the server saw.
    #[serde(default)]
    pub cause: Option<Cause>,
    /// Lines its console sent (kept and dropped), `GET /api/v1/boots/{id}/console`.
    #[serde(default)]
    pub console_lines: u64,
    /// Unix seconds of the first DHCP DISCOVER.
    pub start: f64,
    /// First DISCOVER to the end: the booted call, else the inferred end.
    pub duration_s: Option<f64>,
    /// The client's own uptime when it reported up (includes firmware time before DHCP).
    pub uptime_s: Option<f64>,
    /// The root bytes the client itself counted (reported with its booted call).
    pub client_root_bytes: Option<u64>,
    pub phases: Vec<PhaseView>,
    /// The phase it is in now (`booted` once done): dhcp, loader, ipxe, kernel, initrd, root.
    pub current_phase: String,
    /// Unix seconds of the newest event of this boot.
    pub last_event: f64,
    /// Payload bytes sent to the client, per protocol.
    pub bytes: BTreeMap<String, u64>,
    /// The id of its wave (`record::wave`), None for a boot in no pool or a view made without
    /// its wave.
    #[serde(default)]
    pub wave: Option<u64>,
    /// For a running boot, the silence (seconds after `last_event`) past which it is stalled
    /// (`record::stall`), judged against the other boots of its wave; None when none of them
    /// went through its phase.
    #[serde(default)]
    pub stall_after_s: Option<f64>,
    /// How long it has been silent, when it is stalled at the time of the view.
    #[serde(default)]
    pub stalled_s: Option<f64>,
    /// In a site, which member served each phase (`record::served`): the phases of `phases`,
    /// then the one it is in when not up, each with the members in turn; absent outside a site.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub served: Vec<ServedView>,
    /// Turns of a member past the 32 a boot keeps (members taking turns), not in `served`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub served_unkept: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One phase's servers: `by[0]` from the phase's start (or its first event), each next one
/// from `at`, when it took over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServedView {
    pub phase: String,
    pub by: Vec<TurnView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnView {
    pub member: String,
    /// Unix seconds.
    pub at: f64,
}

impl ServedView {
    /// `a`, or `a -> b at HH:MM:SS` when the phase moved, `local` writing a time.
    pub fn text(&self, local: impl Fn(f64) -> String) -> String {
        let mut out = String::new();
        for (k, t) in self.by.iter().enumerate() {
            if k == 0 {
                out.push_str(&t.member);
            } else {
                out.push_str(&format!(" -> {} at {}", t.member, local(t.at)));
            }
        }
        out
    }
}

/// The served phases of a boot, those no member is known for left out.
fn served_of(b: &Boot) -> Vec<ServedView> {
    b.served_phases()
        .into_iter()
        .filter(|(_, turns)| !turns.is_empty())
        .map(|(phase, turns)| ServedView {
            phase: phase.into(),
            by: turns
                .into_iter()
                .map(|t| TurnView {
                    member: t.member,
                    at: t.at as f64 / 1e6,
                })
                .collect(),
        })
        .collect()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseView {
    pub name: String,
    pub start: f64,
    pub seconds: f64,
}

/// What `/metrics` counts of the boots (`tally`).
pub struct Tally {
    /// Boots by pool and result (`result_at`).
    pub boots: BTreeMap<(String, &'static str), u64>,
    /// Each phase some boot went through, in the phases' order, with its durations in seconds.
    pub phases: Vec<(&'static str, Vec<f64>)>,
}

/// Counts `boots` at `now` for `/metrics`.
pub fn tally(boots: &[Boot], now: Micros) -> Tally {
    let mut by: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
    let mut phases: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for b in boots {
        *by.entry((b.pool.clone().unwrap_or_default(), result_at(b, now)))
            .or_default() += 1;
        for p in b.phases() {
            phases
                .entry(p.name)
                .or_default()
                .push((p.end - p.start) as f64 / 1e6);
        }
    }
    let phases = PHASES
        .iter()
        .filter_map(|name| Some((*name, phases.remove(*name)?)))
        .collect();
    Tally { boots: by, phases }
}

impl BootView {
    pub fn of(b: &Boot) -> BootView {
        BootView::at(b, super::event::now_micros())
    }

    /// The boot as it stands at `now`, without its wave.
    pub fn at(b: &Boot, now: Micros) -> BootView {
        BootView::in_wave(b, None, now)
    }

    /// The boot as it stands at `now`, in its wave (`wave::Membership::wave`: the wave's id and
    /// boots), which says whether it is stalled.
    pub fn in_wave(b: &Boot, wave: Option<(u64, &[&Boot])>, now: Micros) -> BootView {
        let others = wave.map_or(&[][..], |(_, boots)| boots);
        let result = result_at(b, now);
        let timed_out = result == "timed_out";
        BootView {
            id: b.id,
            mac: b.mac.to_string(),
            ip: b.ip,
            ip6: b.ip6,
            pool: b.pool.clone(),
            link: b.link,
            relayed: b.relayed.clone(),
            arch: b.arch,
            firmware: b
                .arch
                .and_then(crate::config::Arch::of_code)
                .map(|a| a.name().to_string()),
            root: b.root,
            result: result.into(),
            now: super::standing::now_at(b, now).into(),
            end: b.end().map(|(_, end)| {
                match end {
                    End::Reported => "reported",
                    End::Inferred => "inferred",
                }
                .to_string()
            }),
            evidence: b
                .inferred
                .filter(|_| b.inferred_s().is_some())
                .map(|i| i.evidence.name().to_string()),
            inferred_s: b.inferred_s(),
            gone: b.gone.map(|g| g.evidence.name().to_string()),
            gone_at: b.gone.map(|g| g.at as f64 / 1e6),
            revision: b.revision.clone().map(String::from),
            next_boot: b.next_boot.clone(),
            wake: b.wake,
            stopped_in: (timed_out || b.result == BootResult::Failed)
                .then(|| b.current_phase().to_string()),
            failure: b.failure.as_ref().map(|f| match f.proto {
                Some(p) => format!("{}: {}", proto_name(p), f.reason),
                None => format!("client: {}", f.reason),
            }),
            cause: cause::of(b, now),
            console_lines: b.console.lines().count() as u64 + b.console.dropped(),
            start: b.start as f64 / 1e6,
            duration_s: b.duration_s(),
            uptime_s: b.uptime_s,
            client_root_bytes: b.client_root_bytes,
            phases: b
                .phases()
                .into_iter()
                .map(|p| PhaseView {
                    name: p.name.into(),
                    start: p.start as f64 / 1e6,
                    seconds: (p.end - p.start) as f64 / 1e6,
                })
                .collect(),
            current_phase: b.current_phase().into(),
            last_event: b.last_event as f64 / 1e6,
            bytes: b
                .bytes
                .iter()
                .map(|(p, n)| (proto_name(*p).into(), *n))
                .collect(),
            wave: wave.map(|(id, _)| id),
            stall_after_s: super::stall::stall_after_s(b, others, now),
            stalled_s: super::stall::stalled_s(b, others, now),
            served: served_of(b),
            served_unkept: b.served.unkept(),
        }
    }

    pub fn phase_s(&self, name: &str) -> Option<f64> {
        self.phases
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.seconds)
    }

    pub fn total_bytes(&self) -> u64 {
        self.bytes.values().sum()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaveView {
    pub id: u64,
    pub pool: String,
    pub start: f64,
    /// The wake whose boots it is (`wave::WaveWake`), else none.
    pub wake: Option<super::wave::WaveWake>,
    pub summary: SummaryView,
    pub boots: Vec<BootView>,
}

/// `wave::Summary` with owned keys, so it reads back from JSON too.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SummaryView {
    pub clients: usize,
    pub booted: usize,
    /// Of the booted, those up by inference only.
    #[serde(default)]
    pub inferred: usize,
    pub running: usize,
    #[serde(default)]
    pub failed: usize,
    #[serde(default)]
    pub timed_out: usize,
    pub median_s: Option<f64>,
    pub p95_s: Option<f64>,
    pub max_s: Option<f64>,
    pub phase_median_s: BTreeMap<String, f64>,
    pub bytes_per_client: BTreeMap<String, f64>,
}

impl From<&Summary> for SummaryView {
    fn from(s: &Summary) -> SummaryView {
        SummaryView {
            clients: s.clients,
            booted: s.booted,
            inferred: s.inferred,
            running: s.running,
            failed: s.failed,
            timed_out: s.timed_out,
            median_s: s.median_s,
            p95_s: s.p95_s,
            max_s: s.max_s,
            phase_median_s: s
                .phase_median_s
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            bytes_per_client: s.bytes_per_client.clone(),
        }
    }
}

impl WaveView {
    pub fn of(w: &Wave, boots: &[Boot]) -> WaveView {
        WaveView::at(w, boots, super::event::now_micros())
    }

    /// The wave with its boots as they stand at `now` (its summary was made by `waves`).
    pub fn at(w: &Wave, boots: &[Boot], now: Micros) -> WaveView {
        let members: Vec<&Boot> = w
            .boot_ids
            .iter()
            .filter_map(|id| boots.iter().find(|b| b.id == *id))
            .collect();
        WaveView {
            id: w.id,
            pool: w.pool.clone(),
            start: w.start,
            wake: w.wake,
            summary: (&w.summary).into(),
            boots: members
                .iter()
                .map(|b| BootView::in_wave(b, Some((w.id, &members)), now))
                .collect(),
        }
    }
}

/// Two waves side by side, with a sentence that states the difference.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub a: WaveView,
    pub b: WaveView,
    pub sentence: String,
}

pub fn compare(a: WaveView, b: WaveView) -> Comparison {
    let label = |w: &WaveView| {
        let root = w
            .boots
            .iter()
            .find_map(|b| b.root)
            .map(proto_name)
            .unwrap_or("?");
        format!(
            "wave {} ({}, {} root, {} clients)",
            w.id, w.pool, root, w.summary.clients
        )
    };
    let sentence = match (a.summary.median_s, b.summary.median_s) {
        (Some(ma), Some(mb)) => {
            let (fast, slow, fm, sm) = if ma <= mb {
                (&a, &b, ma, mb)
            } else {
                (&b, &a, mb, ma)
            };
            // The phase that differs most explains where the time went.
            let mut widest = None;
            for (name, fs) in &fast.summary.phase_median_s {
                if let Some(ss) = slow.summary.phase_median_s.get(name) {
                    let d = ss - fs;
                    if widest.as_ref().is_none_or(|(_, w)| d > *w) {
                        widest = Some((name.clone(), d));
                    }
                }
            }
            let mut s = format!(
                "{} booted in a median {}",
                label(fast),
                faster(fm, sm, &label(slow))
            );
            if let Some((name, d)) = widest.filter(|(_, d)| *d > 0.0) {
                s.push_str(&format!(
                    "; most of the difference is in the {name} phase ({d:.1} s)"
                ));
            }
            s.push('.');
            s
        }
        _ => unbooted(&a, &b, &label),
    };
    Comparison { a, b, sentence }
}

/// `X s, D s (P%) faster than OTHER at Y s`, for medians `fast` <= `slow`.
fn faster(fast: f64, slow: f64, other: &str) -> String {
    let pct = if slow > 0.0 {
        (slow - fast) / slow * 100.0
    } else {
        0.0
    };
    format!(
        "{fast:.1} s, {:.1} s ({pct:.0}%) faster than {other} at {slow:.1} s",
        slow - fast
    )
}

/// What the end of each phase is, as a milestone of the boot.
fn milestone(phase: &str) -> &'static str {
    match phase {
        "dhcp" => "the DHCP ACK",
        "loader" => "the loader download",
        "ipxe" => "the script fetch",
        "shim" => "the shim download",
        "grub" => "the GRUB config fetch",
        "kernel" => "the kernel and initrd downloads",
        "initrd" => "the root attach",
        _ => "the booted call",
    }
}

/// Median seconds from a boot's start to the end of `phase`, over the boots that got there.
fn median_to(w: &WaveView, phase: &str) -> Option<f64> {
    let mut v: Vec<f64> = w
        .boots
        .iter()
        .filter_map(|b| {
            let p = b.phases.iter().find(|p| p.name == phase)?;
            Some(p.start + p.seconds - b.start)
        })
        .collect();
    v.sort_by(f64::total_cmp);
    super::wave::percentile(&v, 50.0)
}

/// How a wave's boots ended, for one without a booted client: "8 timed out in root".
fn outcomes(w: &WaveView) -> String {
    let mut counts: BTreeMap<(usize, &str, &str), usize> = BTreeMap::new();
    for b in &w.boots {
        let order = ["timed_out", "failed", "running", "booted"]
            .iter()
            .position(|r| *r == b.result)
            .unwrap_or(4);
        let phase = b.stopped_in.as_deref().unwrap_or(b.current_phase.as_str());
        *counts.entry((order, b.result.as_str(), phase)).or_default() += 1;
    }
    let parts: Vec<String> = counts
        .into_iter()
        .map(|((_, result, phase), n)| match result {
            "timed_out" => format!("{n} timed out in {phase}"),
            "failed" => format!("{n} failed in {phase}"),
            "running" => format!("{n} still running in {phase}"),
            other => format!("{n} {other}"),
        })
        .collect();
    if parts.is_empty() {
        "it has no boots".into()
    } else {
        parts.join(", ")
    }
}

/// The sentence for two waves of which one or both have no booted client: why their boot
/// times cannot be compared, then how they compare up to the furthest milestone both reached.
fn unbooted(a: &WaveView, b: &WaveView, label: &dyn Fn(&WaveView) -> String) -> String {
    let why: Vec<String> = [a, b]
        .into_iter()
        .filter(|w| w.summary.median_s.is_none())
        .map(|w| format!("no client of {} reported up ({})", label(w), outcomes(w)))
        .collect();
    let mut s = format!(
        "{} and {} cannot be compared on boot time: {}.",
        label(a),
        label(b),
        why.join("; ")
    );
    let common = PHASES
        .iter()
        .rev()
        .find_map(|p| Some((*p, median_to(a, p)?, median_to(b, p)?)));
    match common {
        Some((phase, ma, mb)) => {
            let (fast, slow, fm, sm) = if ma <= mb {
                (a, b, ma, mb)
            } else {
                (b, a, mb, ma)
            };
            s.push_str(&format!(
                " Up to {}, the furthest milestone both reached, {} took a median {}.",
                milestone(phase),
                label(fast),
                faster(fm, sm, &label(slow))
            ));
        }
        None => s.push_str(" They reached no milestone in common to compare by."),
    }
    s
}

/// One boot's console as the API (`GET /api/v1/boots/{id}/console`) and the report show it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConsoleView {
    pub boot: u64,
    pub mac: String,
    /// The kept lines in order: `at` in Unix seconds.
    pub lines: Vec<ConsoleLine>,
    /// Lines dropped between the first `head` lines and the rest (the bound per boot).
    pub dropped: u64,
    pub head: usize,
    /// Why the boot failed or is stuck, when that can be told (`record::cause`).
    pub cause: Option<Cause>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConsoleLine {
    pub at: f64,
    pub text: String,
}

impl ConsoleView {
    pub fn of(boot: &Boot, now: Micros) -> ConsoleView {
        ConsoleView {
            boot: boot.id,
            mac: boot.mac.to_string(),
            lines: boot
                .console
                .lines()
                .map(|l| ConsoleLine {
                    at: l.at as f64 / 1e6,
                    text: l.text.clone(),
                })
                .collect(),
            dropped: boot.console.dropped(),
            head: boot.console.head_len(),
            cause: cause::of(boot, now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mac;
    use crate::record::event::{Event, Kind, Who};
    use crate::record::timeline::Timelines;
    use crate::record::wave::waves;

    /// A boot of `mac` in `pool` from `start_s` that reaches its root attach after
    /// `attach_s` and then says nothing more.
    fn stuck_in_root(
        t: &mut Timelines,
        mac: u8,
        pool: &str,
        root: Proto,
        start_s: i64,
        attach_s: i64,
    ) {
        let mac = Mac([0x52, 0x54, 0, 0x77, 0, mac]);
        crate::record::timeline::boot_to_attach(t, mac, pool, root, start_s, attach_s);
    }

    #[test]
    fn waves_whose_boots_timed_out_compare_up_to_the_furthest_milestone_both_reached() {
        let mut t = Timelines::default();
        for mac in 1..=3 {
            stuck_in_root(&mut t, mac, "a", Proto::Nfs, 1000, 20);
        }
        for mac in 11..=12 {
            stuck_in_root(&mut t, mac, "b", Proto::Nbd, 2000, 10);
        }
        let now = 9000 * 1_000_000;
        let all = waves(t.boots(), now);
        let view = |i: usize| WaveView::at(&all[i], t.boots(), now);
        assert_eq!((view(0).summary.timed_out, view(0).summary.running), (3, 0));
        let c = compare(view(0), view(1));
        let s = &c.sentence;
        assert!(s.contains("cannot be compared on boot time"), "{s}");
        assert!(s.contains("(3 timed out in root)"), "{s}");
        assert!(s.contains("(2 timed out in root)"), "{s}");
        assert!(
            s.contains(&format!(
                "Up to the root attach, the furthest milestone both reached, wave {} (b, nbd root, 2 clients) took a median 10.0 s, 10.0 s (50%) faster than wave {} (a, nfs root, 3 clients) at 20.0 s.",
                all[1].id, all[0].id
            )),
            "{s}"
        );
    }

    /// The firmware's architecture comes from the boot's first DISCOVER that said one; the
    /// initrd's DHCP, saying none, changes nothing.
    #[test]
    fn a_boot_shows_the_architecture_its_firmware_said() {
        let mut t = Timelines::default();
        let mac = Mac([0x52, 0x54, 0, 0x77, 0, 9]);
        for (at, pxe, arch) in [(1, true, Some(11)), (5, false, None)] {
            t.apply(&Event {
                at: at * 1_000_000,
                who: Who::Mac(mac),
                kind: Kind::DhcpDiscover {
                    pxe,
                    ipxe: false,
                    pool: Some("a".into()),
                    answered: true,
                    arch,
                },
            });
        }
        let b = &t.boots()[0];
        let v = BootView::in_wave(b, None, 10 * 1_000_000);
        assert_eq!((v.arch, v.firmware.as_deref()), (Some(11), Some("arm64")));
        let json = serde_json::to_string(&v).unwrap();
        assert!(
            json.contains("\"arch\":11,\"firmware\":\"arm64\""),
            "{json}"
        );
    }

    #[test]
    fn a_booted_wave_and_a_timed_out_one_say_which_lacks_booted_clients() {
        let mut t = Timelines::default();
        stuck_in_root(&mut t, 1, "a", Proto::Nfs, 1000, 20);
        stuck_in_root(&mut t, 11, "b", Proto::Nbd, 2000, 10);
        t.apply(&Event {
            at: 2030 * 1_000_000,
            who: Who::Mac(Mac([0x52, 0x54, 0, 0x77, 0, 11])),
            kind: Kind::Booted {
                uptime_s: None,
                root_bytes: None,
            },
        });
        let now = 9000 * 1_000_000;
        let all = waves(t.boots(), now);
        let c = compare(
            WaveView::at(&all[0], t.boots(), now),
            WaveView::at(&all[1], t.boots(), now),
        );
        let s = &c.sentence;
        assert!(
            s.contains(&format!(
                "no client of wave {} (a, nfs root, 1 clients) reported up (1 timed out in root)",
                all[0].id
            )),
            "{s}"
        );
        assert!(!s.contains("no client of wave 2"), "{s}");
        assert!(s.contains("Up to the root attach"), "{s}");
    }
}

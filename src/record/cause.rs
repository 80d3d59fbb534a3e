//! Why a boot failed, in words an admin can act on: from the client's console (`console.rs`)
//! and from what the server saw (a refused MOUNT or NBD attach, silence after the kernel).
//!
//! Pure: a boot (with its console) and the time in, a cause out. The console patterns are the
//! kernel's own messages and those of the common initrds (initramfs-tools, dracut, busybox's
//! udhcpc, the demo initrd); each cause quotes the line it was read from.

use super::event::{Micros, Proto};
use super::signs::{Sign, sign};
use super::timeline::{Boot, BootResult};
use serde::{Deserialize, Serialize};

/// A boot whose firmware had its loader, and that has shown nothing of the loader since for
/// this long, is said not to have run it (iPXE asks DHCP within a second or two of starting).
pub const LOADER_SILENCE_S: f64 = 60.0;

/// A boot in its initrd that has been silent this long after the kernel and initrd were sent
/// is said to have lost its way to the network (a healthy initrd asks DHCP within seconds).
pub const INITRD_SILENCE_S: f64 = 60.0;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cause {
    /// `no_root`, `root_fs`, `no_nic`, `dhcp_lost`, `kernel_panic`, `initrd_failed`,
    /// `initrd_silent`, `loader_not_run` or `server`.
    pub kind: String,
    /// The cause and what to check, in a sentence or two.
    pub text: String,
    /// The console line it was read from, if it came from the console.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
}

/// An initrd's DHCP this many DISCOVERs long with no address given, and no root yet, is lost
/// even when its console says nothing (udhcpc, klibc's ipconfig and dhclient ask every 2-4 s).
pub const INITRD_DHCP_UNANSWERED: u32 = 4;

/// Why `boot` failed or is stuck at `now`, if that can be told; `None` for a boot that came up
/// or is going well. Longer than the house's ~150 lines on purpose: the causes are tried in
/// the order of how sure their evidence is and the first that holds wins, so the order is the
/// rule, read top to bottom in one place.
pub fn of(boot: &Boot, now: Micros) -> Option<Cause> {
    if boot.result == BootResult::Booted {
        return None;
    }
    // What the server refused is the surest evidence.
    if let Some(f) = &boot.failure
        && matches!(f.proto, Some(Proto::Nfs | Proto::Nbd))
    {
        let what = if f.proto == Some(Proto::Nfs) {
            "MOUNT refused"
        } else {
            "NBD export refused"
        };
        return Some(Cause {
            kind: "no_root".into(),
            text: format!(
                "no root ({what}): {}. The initrd asked for a root this client may not have: \
                 check the root argument on its command line against the pool's image \
                 (images.NAME.nfs_export / nbd_export, the pool's cmdline_template)",
                f.reason
            ),
            line: None,
        });
    }
    let mut first: [Option<&str>; 5] = [None; 5];
    for l in boot.console.lines() {
        if let Some(s) = sign(&l.text) {
            let slot = &mut first[s as usize];
            if slot.is_none() {
                *slot = Some(&l.text);
            }
        }
    }
    let panic = first[Sign::Panic as usize];
    let then = |text: String| match panic {
        Some(p) => format!("{text}; then the kernel panicked: `{p}`"),
        None => text,
    };
    if let Some(line) = first[Sign::NoNic as usize] {
        return Some(Cause {
            kind: "no_nic".into(),
            text: then(format!(
                "the initrd found no network card or could not load its driver: `{line}`. \
                 Add the NIC's module to the initrd (initramfs-tools: /etc/initramfs-tools/modules; \
                 dracut: --add-drivers; the demo: images/demo-recipe/modules.list)"
            )),
            line: Some(line.to_string()),
        });
    }
    let dhcp = boot.initrd_dhcp();
    let dhcp_line = first[Sign::DhcpLost as usize];
    let unanswered = boot.current_phase() == "initrd"
        && dhcp.acks == 0
        && dhcp.discovers >= INITRD_DHCP_UNANSWERED;
    if dhcp_line.is_some() || unanswered {
        let heard = match (dhcp.discovers, dhcp.offers, dhcp.acks) {
            (0, _, _) => {
                "bootpool heard none of its DHCP requests: they did not reach this server \
                       (in proxy mode the network's own DHCP server gives the address: check it, \
                       and the switch between them)"
                    .to_string()
            }
            (n, o, 0) if o > 0 => format!(
                "bootpool heard {n} DHCP DISCOVERs from its initrd and offered it an address {o} \
                 time{}, and no REQUEST followed: the offers did not reach the client (its \
                 switch, a firewall, a second DHCP server)",
                if o == 1 { "" } else { "s" }
            ),
            (n, _, 0) => format!(
                "bootpool heard {n} DHCP DISCOVERs from its initrd and gave it no address: check \
                 the daemon's log (a full `dhcp.range`?); in proxy mode the network's own DHCP \
                 server gives the address"
            ),
            (n, _, a) => format!(
                "bootpool heard {n} DHCP DISCOVERs from its initrd and gave it an address {a} \
                 time{}: the answers did not reach the client (its switch, a firewall, a second \
                 DHCP server)",
                if a == 1 { "" } else { "s" }
            ),
        };
        let text = match dhcp_line {
            Some(line) => format!("the initrd got no DHCP lease: `{line}`. {heard}"),
            None => format!("the initrd has no DHCP lease yet: {heard}"),
        };
        return Some(Cause {
            kind: "dhcp_lost".into(),
            text: then(text),
            line: dhcp_line.map(str::to_string),
        });
    }
    if let Some(line) = first[Sign::RootFs as usize] {
        return Some(Cause {
            kind: "root_fs".into(),
            text: then(format!(
                "the root filesystem was refused: `{line}`. The image file may be truncated or \
                 damaged, or not the filesystem the command line names (rootfstype=): rebuild \
                 or copy it again and compare its size"
            )),
            line: Some(line.to_string()),
        });
    }
    if let Some(line) = panic {
        let hint = if line.contains("Attempted to kill init")
            || line.contains("No working init found")
            || line.contains("Requested init")
        {
            "the root's init could not run or exited: check init= on the pool's cmdline and \
             that the root has that program"
        } else if line.contains("VFS") {
            "the kernel found no root to mount: check root= and that the initrd has the \
             root's drivers"
        } else {
            "read the console lines before it for what led there"
        };
        return Some(Cause {
            kind: "kernel_panic".into(),
            text: format!("the kernel panicked: `{line}`; {hint}"),
            line: Some(line.to_string()),
        });
    }
    if let Some(line) = first[Sign::InitrdFailed as usize] {
        return Some(Cause {
            kind: "initrd_failed".into(),
            text: format!("the initrd gave up: `{line}`"),
            line: Some(line.to_string()),
        });
    }
    if let Some(f) = &boot.failure {
        return Some(Cause {
            kind: "server".into(),
            text: match f.proto {
                Some(p) => format!("{}: {}", super::event::proto_name(p), f.reason),
                None => format!("the client reported: {}", f.reason),
            },
            line: None,
        });
    }
    // The loader's end is the last milestone; firmware asking DHCP again (it tries its next
    // boot option) does not count as the loader running.
    let since_loader_s = boot
        .phases()
        .last()
        .map_or(0.0, |p| (now - p.end) as f64 / 1e6);
    if boot.waits_after_its_loader() && since_loader_s >= LOADER_SILENCE_S {
        return Some(Cause {
            kind: "loader_not_run".into(),
            text: format!(
                "the firmware had the whole loader {since_loader_s:.0} s ago and never ran it (no \
                 iPXE DHCP, no script fetch): firmware that enforces Secure Boot refuses unsigned \
                 iPXE (EDK2 prints `Access Denied`). Give the pool `secure_boot: true` for \
                 Debian's signed shim and GRUB, or check that the loader fits the firmware's \
                 architecture"
            ),
            line: None,
        });
    }
    let silent_s = (now - boot.last_event) as f64 / 1e6;
    if boot.current_phase() == "initrd" && boot.console.is_empty() && silent_s >= INITRD_SILENCE_S {
        return Some(Cause {
            kind: "initrd_silent".into(),
            text: format!(
                "the kernel and initrd were sent, then nothing came from the client for {:.0} s \
                 (no DHCP from its initrd, no root attach, no console line): the initrd most \
                 likely has no driver for the NIC, or brought up another one",
                silent_s
            ),
            line: None,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::signs::fatal;

    fn boot_with(kinds: Vec<super::super::event::Kind>, console: &[&str]) -> Boot {
        use super::super::event::{Event, Kind, Who};
        let mac: crate::config::Mac = "52:54:00:77:00:01".parse().unwrap();
        let mut t = super::super::Timelines::default();
        let first = Kind::DhcpDiscover {
            answered: true,
            pxe: true,
            ipxe: true,
            pool: None,
            arch: None,
        };
        for (i, kind) in std::iter::once(first).chain(kinds).enumerate() {
            t.apply(&Event {
                at: i as i64 * 1_000_000,
                who: Who::Mac(mac),
                kind,
            });
        }
        t.console(
            mac,
            10_000_000,
            console.iter().map(|s| s.to_string()).collect(),
        );
        t.current(mac).unwrap().clone()
    }

    /// Firmware that had its loader and never ran it (Secure Boot refusing iPXE): told once
    /// the loader has been quiet a minute, even while the firmware asks DHCP again; not for a
    /// loader that ran.
    #[test]
    fn a_loader_the_firmware_never_ran_is_told() {
        use super::super::event::{Kind, Outcome};
        let ack = Kind::DhcpAck {
            ip: "10.77.0.100".parse().unwrap(),
            pxe: true,
            ipxe: false,
            pool: "room".into(),
            link: None,
            relayed: None,
        };
        let file = |kind| Kind::File {
            proto: Proto::Tftp,
            kind,
            path: "snponly.efi".into(),
            bytes: 170_000,
            outcome: Outcome::Complete,
        };
        let again = Kind::DhcpDiscover {
            answered: true,
            pxe: true,
            ipxe: false,
            pool: None,
            arch: None,
        };
        let b = boot_with(
            vec![
                ack.clone(),
                file(super::super::event::FileKind::Loader),
                again,
            ],
            &[],
        );
        // The loader came at 2 s.
        assert_eq!(of(&b, 30_000_000), None);
        let c = of(&b, 62_000_000).expect("a cause");
        assert_eq!(c.kind, "loader_not_run");
        assert!(c.text.contains("secure_boot: true"), "{}", c.text);
        let ran = boot_with(
            vec![
                ack,
                file(super::super::event::FileKind::Loader),
                file(super::super::event::FileKind::Script),
            ],
            &[],
        );
        assert_eq!(of(&ran, 600_000_000).map(|c| c.kind), None);
    }

    #[test]
    fn the_servers_refusal_comes_first_then_the_console() {
        use super::super::event::Kind;
        let refused = Kind::Failed {
            proto: Some(Proto::Nfs),
            reason: "mount of `/nope` refused (status 2)".into(),
        };
        let b = boot_with(vec![refused], &["Kernel panic - not syncing: x"]);
        let c = of(&b, 20_000_000).unwrap();
        assert_eq!(c.kind, "no_root");
        assert!(
            c.text.contains("/nope") && c.text.contains("MOUNT refused"),
            "{}",
            c.text
        );

        let b = boot_with(
            vec![],
            &[
                "SQUASHFS error: unable to read id index table",
                "Kernel panic - not syncing: VFS: Unable to mount root fs",
            ],
        );
        let c = of(&b, 20_000_000).unwrap();
        assert_eq!(c.kind, "root_fs");
        assert!(c.text.contains("then the kernel panicked"), "{}", c.text);
        assert_eq!(b.result, BootResult::Failed, "the panic failed it");

        let b = boot_with(
            vec![],
            &["Kernel panic - not syncing: Attempted to kill init! exitcode=0x0"],
        );
        let c = of(&b, 20_000_000).unwrap();
        assert_eq!(c.kind, "kernel_panic");
        assert!(c.text.contains("init="), "{}", c.text);

        // A healthy console says nothing.
        assert_eq!(
            of(&boot_with(vec![], &["Linux version 6.1"]), 20_000_000),
            None
        );
    }

    #[test]
    fn an_initrd_without_a_lease_says_what_the_server_heard() {
        use super::super::event::{FileKind, Kind, Outcome};
        let file = |kind, path: &str| Kind::File {
            proto: Proto::Http,
            kind,
            path: path.into(),
            bytes: 1000,
            outcome: Outcome::Complete,
        };
        let ack = |pxe| Kind::DhcpAck {
            ip: "10.77.0.11".parse().unwrap(),
            pxe,
            ipxe: pxe,
            pool: "lab".into(),
            link: None,
            relayed: None,
        };
        let discover = Kind::DhcpDiscover {
            answered: false,
            pxe: false,
            ipxe: false,
            pool: Some("lab".into()),
            arch: None,
        };
        let offered = Kind::DhcpDiscover {
            answered: true,
            pxe: false,
            ipxe: false,
            pool: Some("lab".into()),
            arch: None,
        };
        let sent = || {
            vec![
                ack(true),
                file(FileKind::Kernel, "/demo/vmlinuz"),
                file(FileKind::Initrd, "/demo/initrd.img"),
            ]
        };
        let gave_up = "bootpool-initrd: FAILED: no DHCP lease on eth0";

        // The console says so, and bootpool heard nothing: the requests never reached it.
        let b = boot_with(sent(), &[gave_up]);
        let c = of(&b, 40_000_000).unwrap();
        assert_eq!(c.kind, "dhcp_lost");
        assert_eq!(c.line.as_deref(), Some(gave_up));
        assert!(c.text.contains("heard none"), "{}", c.text);
        assert_eq!(
            b.result,
            BootResult::Failed,
            "the initrd's FAILED line ended it"
        );

        // Heard and not answered, console or not: the server's own side.
        let mut kinds = sent();
        kinds.extend(std::iter::repeat_n(
            discover.clone(),
            INITRD_DHCP_UNANSWERED as usize,
        ));
        let b = boot_with(kinds.clone(), &[]);
        let c = of(&b, 40_000_000).unwrap();
        assert_eq!(c.kind, "dhcp_lost");
        assert!(c.text.contains("heard 4 DHCP DISCOVERs") && c.text.contains("no address"));
        assert_eq!(c.line, None);
        // One DISCOVER fewer is a client still asking, not yet lost.
        kinds.pop();
        assert_eq!(of(&boot_with(kinds.clone(), &[]), 40_000_000), None);

        // Offered every time and never asked for: the offers were lost on the way.
        let mut lost_offers = sent();
        lost_offers.extend(std::iter::repeat_n(
            offered,
            INITRD_DHCP_UNANSWERED as usize,
        ));
        let c = of(&boot_with(lost_offers, &[]), 40_000_000).unwrap();
        assert_eq!(c.kind, "dhcp_lost");
        assert!(
            c.text.contains("offered it an address 4 times") && c.text.contains("did not reach"),
            "{}",
            c.text
        );

        // Answered, and the console still says no lease: the answers were lost on the way.
        kinds.push(ack(false));
        let c = of(
            &boot_with(kinds, &["udhcpc: No lease, failing"]),
            40_000_000,
        )
        .unwrap();
        assert_eq!(c.kind, "dhcp_lost");
        assert!(c.text.contains("an address 1 time:"), "{}", c.text);

        // The firmware's DISCOVERs before the kernel count for nothing.
        let early = vec![
            discover.clone(),
            discover.clone(),
            discover.clone(),
            discover,
            ack(true),
        ];
        assert_eq!(of(&boot_with(early, &[]), 40_000_000), None);
    }

    #[test]
    fn console_lines_are_read_for_their_signs() {
        assert_eq!(
            sign(
                "[    3.1] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100"
            ),
            Some(Sign::Panic)
        );
        assert_eq!(
            sign("SQUASHFS error: Failed to read block 0x2e6a000: -5"),
            Some(Sign::RootFs)
        );
        assert_eq!(
            sign("bootpool-initrd: FAILED: no ethernet NIC found"),
            Some(Sign::NoNic)
        );
        assert_eq!(
            sign("netconsole: eth0 doesn't exist, aborting"),
            Some(Sign::NoNic)
        );
        assert_eq!(sign("netconsole: network logging started"), None);
        assert_eq!(
            sign("udhcpc: SIOCGIFINDEX: No such device"),
            Some(Sign::NoNic)
        );
        assert_eq!(
            sign("bootpool-initrd: FAILED: cannot mount the root"),
            Some(Sign::InitrdFailed)
        );
        assert_eq!(sign("EXT4-fs (nbd0): mounted filesystem"), None);
        assert!(fatal(
            "Kernel panic - not syncing: VFS: Unable to mount root fs"
        ));
        assert!(!fatal("SQUASHFS error: xz decompression failed"));
        let mount = "[ 11.5] bootpool-initrd: FAILED: cannot mount /dev/nbd0 as squashfs";
        assert_eq!(sign(mount), Some(Sign::RootFs));
        assert!(fatal(mount));
        assert!(fatal("bootpool-initrd: FAILED: no ethernet NIC found"));
        assert_eq!(
            sign("eth0: no response after 60 secs - giving up"),
            Some(Sign::DhcpLost)
        );
        assert_eq!(sign("udhcpc: No lease, failing"), Some(Sign::DhcpLost));
    }
}

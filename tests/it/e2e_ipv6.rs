//! End to end over IPv6: an OVMF VM with its IPv4 stack and IPv4 PXE switched off
//! (`--firmware uefi-pxe6`) can only boot over IPv6. bootpool sends the router advertisements
//! (the prefix on-link and for SLAAC, the O flag) and answers the firmware's DHCPv6 SOLICIT
//! and REQUEST with an address and option 59, `tftp://[fd77::1]/snponly.efi`, which it loads
//! over TFTP on IPv6. That iPXE asks DHCPv6 for its options (INFORMATION-REQUEST, its user
//! class), forms its own address from the prefix, and fetches its script, kernel and initrd
//! from `http://[fd77::1]:8080`. The pool says `boot_over: ipv6`, so DHCPv4 gives the firmware
//! and iPXE no boot file (iPXE still takes an IPv4 address beside). The demo initrd then asks
//! DHCPv4 (busybox udhcpc) and attaches its root over NBD on IPv4: what still needs IPv4
//! (docs/clients.md). The record knows every step by the MAC. Slow under TCG: ignored by
//! default, run by `scripts/test --all`. Needs root, qemu, Debian's `ovmf` and `ipxe`, and the
//! built demo image.

use crate::common::lab::{lab_config, run_lab};
use std::path::Path;

/// The shipped config with the lab's IPv6 network and the NBD pool booting over IPv6 only.
fn ipv6_config(text: String) -> String {
    text.replace(
        "  address: 10.77.0.1 ",
        "  address6: \"fd77::1\"\n  address: 10.77.0.1 ",
    )
    .replacen(
        "images:\n",
        "dhcp6:\n  subnet: \"fd77::/64\"\n  range: \"fd77::100-fd77::1ff\"\n  router_advertisements: send\nimages:\n",
        1,
    )
    .replace(
        "  lab-nbd:\n    image: demo\n",
        "  lab-nbd:\n    image: demo\n    boot_over: ipv6\n",
    )
}

#[test]
#[ignore = "a UEFI VM boot over IPv6; scripts/test --all runs it"]
fn one_uefi_client_pxe_boots_over_ipv6_only() {
    assert!(
        Path::new("/usr/share/ovmf/OVMF.fd").exists(),
        "apt-get install ovmf"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), ipv6_config);
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(
        text.contains("boot_over: ipv6") && text.contains("dhcp6:") && text.contains("address6"),
        "{text}"
    );
    let args = [
        "--clients",
        "1",
        "--root",
        "nbd",
        "--firmware",
        "uefi-pxe6",
        "--timeout",
        "400",
    ];
    let (table, rows) = run_lab(&config, &args, 460);
    assert_eq!(rows.len(), 1, "{table}");
    let run = std::fs::read_dir(dir.path().join("var/lab"))
        .unwrap()
        .flatten()
        .map(|run| run.path())
        .find(|p| p.join("pc01.log").exists())
        .expect("console log");
    let console =
        String::from_utf8_lossy(&std::fs::read(run.join("pc01.log")).unwrap()).into_owned();
    let daemon = std::fs::read_to_string(run.join("bootpool.log")).unwrap_or_default();
    assert_eq!(rows[0][3], "booted", "{table}\n{console}\n{daemon}");
    let journal = crate::common::recorded_events(&dir.path().join("var"));
    assert!(
        console.contains(">>Start PXE over IPv6"),
        "the firmware did not PXE boot over IPv6:\n{console}"
    );
    assert!(
        !console.contains("over IPv4"),
        "the firmware tried IPv4:\n{console}"
    );
    // The firmware's DHCPv6 (an address from the range) and iPXE's (options only; known at
    // the address it formed from the prefix), both recorded for the MAC.
    let mac = "\"mac\":\"52:54:00:77:01:01\"";
    let firmware = journal.lines().any(|l| {
        l.contains(mac)
            && l.contains("\"dhcp6_reply\"")
            && l.contains("\"ip\":\"fd77::100\"")
            && l.contains("\"ipxe\":false")
    });
    let ipxe = journal.lines().any(|l| {
        l.contains(mac)
            && l.contains("\"dhcp6_reply\"")
            && l.contains("\"ip\":\"fd77::5054:ff:fe77:101\"")
            && l.contains("\"ipxe\":true")
    });
    assert!(firmware && ipxe, "{journal}");
    // The loader came whole over TFTP on IPv6 (the firmware asked no other server).
    assert!(
        journal.lines().any(|l| l.contains(mac)
            && l.contains("\"proto\":\"tftp\"")
            && l.contains("\"path\":\"snponly.efi\"")
            && l.contains("\"outcome\":\"complete\"")),
        "{journal}"
    );
    assert!(
        daemon.contains("file=snponly.efi") && daemon.contains("peer=[fd77::100]"),
        "snponly.efi not sent over IPv6:\n{daemon}"
    );
    // The script, kernel and initrd from [fd77::1] (iPXE prints each URL it fetches), each
    // recorded for the MAC.
    assert!(
        console.contains("Filename: http://[fd77::1]:8080/boot/script/52:54:00:77:01:01.ipxe"),
        "{console}"
    );
    for file in ["vmlinuz", "initrd.img"] {
        assert!(
            console.contains(&format!("http://[fd77::1]:8080/boot/demo/{file}")),
            "{file} not fetched over IPv6:\n{console}"
        );
        assert!(
            journal.lines().any(|l| l.contains(mac)
                && l.contains(&format!("\"path\":\"/boot/demo/{file}\""))
                && l.contains("\"outcome\":\"complete\"")),
            "{journal}"
        );
    }
    assert!(
        journal
            .lines()
            .any(|l| l.contains(mac) && l.contains("\"kind\":\"script\"")),
        "{journal}"
    );
    // No DHCPv4 answer named a boot file: the pool boots over IPv6 only.
    let v4_boot_file = daemon
        .lines()
        .filter(|l| l.contains("service::dhcp:") && l.contains("boot_file="))
        .find(|l| !l.contains("boot_file=\"-\""));
    assert!(
        v4_boot_file.is_none(),
        "DHCPv4 handed out a boot file: {v4_boot_file:?}"
    );
    // The root: over NBD, on IPv4 (the demo initrd's DHCPv4).
    assert!(journal.contains("\"root_attach\""), "{journal}");
    assert!(journal.contains("\"proto\":\"nbd\""), "{journal}");
}

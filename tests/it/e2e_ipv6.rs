//! End to end over IPv6: an OVMF VM with its IPv4 stack and IPv4 PXE switched off can only
//! boot over IPv6, by PXE (`--firmware uefi-pxe6`) or by HTTP boot (`uefi-http6`, IPv6 PXE off
//! too). bootpool sends the router advertisements (the prefix on-link and for SLAAC, the O
//! flag) and answers the firmware's DHCPv6 SOLICIT and REQUEST with an address and option 59,
//! `tftp://[fd77::1]/snponly.efi` (PXE, loaded over TFTP on IPv6) or
//! `http://[fd77::1]:8080/boot/loaders/snponly.efi` (HTTP boot). That iPXE asks DHCPv6 for its options (INFORMATION-REQUEST, its user
//! class), forms its own address from the prefix, and fetches its script, kernel and initrd
//! from `http://[fd77::1]:8080`. The pool says `boot_over: ipv6`, so DHCPv4 gives the firmware
//! and iPXE no boot file (iPXE still takes an IPv4 address beside). The demo initrd then asks
//! DHCPv4 (busybox udhcpc) and attaches its root over NBD on IPv4: what still needs IPv4
//! (docs/clients.md). The record knows every step by the MAC. Slow under TCG: ignored by
//! default, run by `scripts/test --all`. Needs root, qemu, Debian's `ovmf` and `ipxe`, and the
//! built demo image.

use crate::common::lab::{lab_config, one_client_logs, run_one_nbd_client};
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

/// Boots one NBD client with `firmware` against the IPv6 config; checks what both ways share
/// (DHCPv6 for the firmware and for iPXE, script, kernel and initrd over HTTP on IPv6, no
/// DHCPv4 boot file, the root over NBD) and returns the recorded events, the console and the
/// daemon's log.
fn boot_over_ipv6(firmware: &str) -> (String, String, String) {
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
    let (table, rows) = run_one_nbd_client(&config, firmware, 400);
    assert_eq!(rows.len(), 1, "{table}");
    let (console, daemon) = one_client_logs(&dir.path().join("var"));
    assert_eq!(rows[0][3], "booted", "{table}\n{console}\n{daemon}");
    let journal = crate::common::recorded_events(&dir.path().join("var"));
    assert!(
        !console.contains("over IPv4"),
        "the firmware tried IPv4:\n{console}"
    );
    // The firmware's DHCPv6 (an address from the range) and iPXE's (options only; known at
    // the address it formed from the prefix), both recorded for the MAC.
    let firmware_reply = journal.lines().any(|l| {
        l.contains(MAC)
            && l.contains("\"dhcp6_reply\"")
            && l.contains("\"ip\":\"fd77::100\"")
            && l.contains("\"ipxe\":false")
    });
    let ipxe_reply = journal.lines().any(|l| {
        l.contains(MAC)
            && l.contains("\"dhcp6_reply\"")
            && l.contains("\"ip\":\"fd77::5054:ff:fe77:101\"")
            && l.contains("\"ipxe\":true")
    });
    assert!(firmware_reply && ipxe_reply, "{journal}");
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
            journal.lines().any(|l| l.contains(MAC)
                && l.contains(&format!("\"path\":\"/boot/demo/{file}\""))
                && l.contains("\"outcome\":\"complete\"")),
            "{journal}"
        );
    }
    assert!(
        journal
            .lines()
            .any(|l| l.contains(MAC) && l.contains("\"kind\":\"script\"")),
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
    (journal, console, daemon)
}

const MAC: &str = "\"mac\":\"52:54:00:77:01:01\"";

#[test]
#[ignore = "a UEFI VM boot over IPv6; scripts/test --all runs it"]
fn one_uefi_client_pxe_boots_over_ipv6_only() {
    let (journal, console, daemon) = boot_over_ipv6("uefi-pxe6");
    assert!(
        console.contains(">>Start PXE over IPv6"),
        "the firmware did not PXE boot over IPv6:\n{console}"
    );
    // The loader came whole over TFTP on IPv6.
    assert!(
        journal.lines().any(|l| l.contains(MAC)
            && l.contains("\"proto\":\"tftp\"")
            && l.contains("\"path\":\"snponly.efi\"")
            && l.contains("\"outcome\":\"complete\"")),
        "{journal}"
    );
    assert!(
        daemon.contains("file=snponly.efi") && daemon.contains("peer=[fd77::100]"),
        "snponly.efi not sent over IPv6:\n{daemon}"
    );
}

#[test]
#[ignore = "a UEFI VM boot over IPv6; scripts/test --all runs it"]
fn one_uefi_client_http_boots_over_ipv6_only() {
    let (journal, console, _) = boot_over_ipv6("uefi-http6");
    assert!(
        console.contains(">>Start HTTP Boot over IPv6")
            && console.contains("URI: http://[fd77::1]:8080/boot/loaders/snponly.efi"),
        "the firmware did not HTTP boot over IPv6:\n{console}"
    );
    // The loader came whole over HTTP from the URL in option 59; nothing went over TFTP.
    assert!(
        journal.lines().any(|l| l.contains(MAC)
            && l.contains("\"proto\":\"http\"")
            && l.contains("\"path\":\"/boot/loaders/snponly.efi\"")
            && l.contains("\"outcome\":\"complete\"")),
        "{journal}"
    );
    assert!(!journal.contains("\"proto\":\"tftp\""), "{journal}");
}

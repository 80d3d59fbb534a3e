//! End to end under UEFI, the two ways a real PC boots from the network without a NIC ROM:
//! an OVMF VM with no NIC ROM uses the firmware's own PXE client (arch 7, not iPXE), which loads
//! `snponly.efi` over TFTP (with EDK2's tsize probe first); or, with its PXE switched off, the
//! firmware's UEFI HTTP boot (option 60 `HTTPClient`), which loads it from the URL it is given.
//! Either way that iPXE asks DHCP again, gets its script over HTTP, the kernel's EFI stub finds
//! the initrd by `initrd=` and the root is attached over NBD. The HTTP boot runs with
//! `server.tftp: false`: nothing listens on TFTP's port at all. Needs root, qemu, Debian's
//! `ovmf` and `ipxe`, and the built demo image.

use crate::common::lab::{lab_config, one_client_logs, run_one_nbd_client};
use std::path::Path;

/// Boots one NBD client with `firmware` against the lab config changed by `edit`; returns the
/// recorded events, its console and the daemon's log.
fn boot_one_uefi_client(firmware: &str, edit: fn(String) -> String) -> (String, String, String) {
    assert!(
        Path::new("/usr/share/ovmf/OVMF.fd").exists(),
        "apt-get install ovmf"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), edit);
    let (table, rows) = run_one_nbd_client(&config, firmware, 300);
    assert_eq!(rows.len(), 1, "{table}");
    assert_eq!(rows[0][3], "booted", "{table}");
    let journal = crate::common::recorded_events(&dir.path().join("var"));
    let (console, daemon) = one_client_logs(&dir.path().join("var"));
    // After the loader: iPXE asked, got the script with the EFI stub's initrd= argument and
    // attached the root.
    assert!(journal.contains("\"ipxe\":true"), "{journal}");
    assert!(journal.contains("\"root_attach\""), "{journal}");
    assert!(journal.contains("\"proto\":\"nbd\""), "{journal}");
    assert!(
        console.contains("initrd=initrd.img"),
        "the EFI stub needs initrd= on its command line:\n{console}"
    );
    (journal, console, daemon)
}

/// The first thing the client said: the firmware's DHCP, not iPXE's.
fn first_event(journal: &str) -> &str {
    let first = journal.lines().next().unwrap_or_default();
    assert!(
        first.contains("\"dhcp_discover\"") && first.contains("\"ipxe\":false"),
        "{journal}"
    );
    first
}

#[test]
fn one_uefi_client_boots_through_firmware_pxe_over_nbd() {
    let (journal, _, _) = boot_one_uefi_client("uefi-pxe", |t| t);
    first_event(&journal);
    assert!(
        journal.lines().any(|l| l.contains("\"proto\":\"tftp\"")
            && l.contains("\"path\":\"snponly.efi\"")
            && l.contains("\"outcome\":\"complete\"")),
        "{journal}"
    );
}

#[test]
fn one_uefi_client_boots_through_firmware_http_boot_over_nbd() {
    // No TFTP at all: the port is not even bound.
    let (journal, console, daemon) = boot_one_uefi_client("uefi-http", |t| {
        t.replace(
            "  http: 0.0.0.0:8080",
            "  tftp: false\n  http: 0.0.0.0:8080",
        )
    });
    assert!(daemon.contains("tftp=None"), "TFTP was served:\n{daemon}");
    first_event(&journal);
    assert!(
        console.contains(">>Start HTTP Boot over IPv4"),
        "the firmware did not HTTP boot:\n{console}"
    );
    // The loader came whole over HTTP from the URL in the OFFER; nothing went over TFTP.
    assert!(
        journal.lines().any(|l| l.contains("\"proto\":\"http\"")
            && l.contains("\"path\":\"/boot/loaders/snponly.efi\"")
            && l.contains("\"outcome\":\"complete\"")),
        "{journal}"
    );
    assert!(!journal.contains("\"proto\":\"tftp\""), "{journal}");
}

//! End to end under UEFI, the way a real PC boots: an OVMF VM with no NIC ROM uses the
//! firmware's own PXE client (arch 7, not iPXE), which loads `snponly.efi` over TFTP (with
//! EDK2's tsize probe first); that iPXE asks DHCP again, gets its script over HTTP, the kernel's
//! EFI stub finds the initrd by `initrd=` and the root is attached over NBD. Needs root, qemu,
//! Debian's `ovmf` and `ipxe`, and the built demo image.

mod common;

use common::lab::{lab_config, run_lab};
use std::path::Path;

#[test]
fn one_uefi_client_boots_through_firmware_pxe_over_nbd() {
    assert!(
        Path::new("/usr/share/ovmf/OVMF.fd").exists(),
        "apt-get install ovmf"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), |t| t);
    let args = [
        "--clients",
        "1",
        "--root",
        "nbd",
        "--firmware",
        "uefi-pxe",
        "--timeout",
        "300",
    ];
    let (table, rows) = run_lab(&config, &args, 360);
    assert_eq!(rows.len(), 1, "{table}");
    assert_eq!(rows[0][3], "booted", "{table}");
    let journal = common::recorded_events(&dir.path().join("var"));
    // The firmware's PXE (not iPXE) asked first and got the loader over TFTP, whole.
    let first = journal.lines().next().unwrap_or_default();
    assert!(
        first.contains("\"dhcp_discover\"") && first.contains("\"ipxe\":false"),
        "{journal}"
    );
    assert!(
        journal.lines().any(|l| l.contains("\"proto\":\"tftp\"")
            && l.contains("\"path\":\"snponly.efi\"")
            && l.contains("\"outcome\":\"complete\"")),
        "{journal}"
    );
    // Then iPXE asked, and got the script with the EFI stub's initrd= argument.
    assert!(journal.contains("\"ipxe\":true"), "{journal}");
    assert!(journal.contains("\"root_attach\""), "{journal}");
    assert!(journal.contains("\"proto\":\"nbd\""), "{journal}");
    let serial = std::fs::read_dir(dir.path().join("var/lab"))
        .unwrap()
        .flatten()
        .map(|run| run.path().join("pc01.log"))
        .find(|p| p.exists())
        .expect("console log");
    let console = String::from_utf8_lossy(&std::fs::read(serial).unwrap()).into_owned();
    assert!(
        console.contains("initrd=initrd.img"),
        "the EFI stub needs initrd= on its command line:\n{console}"
    );
}

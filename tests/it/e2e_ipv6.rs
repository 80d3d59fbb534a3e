//! End to end over IPv6: an OVMF VM with its IPv4 stack and both PXE clients switched off
//! (`--firmware uefi-http6`) can only HTTP boot over IPv6. bootpool sends the router
//! advertisements (M flag, the prefix on-link) and answers its DHCPv6 SOLICIT with an address
//! and option 59, the URL of `snponly.efi` on `[fd77::1]`; that iPXE asks DHCPv6 again (its
//! user class), gets its script's URL on `[fd77::1]`, and fetches the script, kernel and
//! initrd over IPv6. The pool says `boot_over: ipv6`, so DHCPv4 gives its firmware and iPXE
//! no boot file at all. The demo initrd then asks DHCPv4 (busybox udhcpc) and attaches its
//! root over NBD on IPv4: what still needs IPv4 (docs/clients.md). Slow under TCG: ignored by
//! default, run by `scripts/test --all`. Needs root, qemu, Debian's `ovmf`, `ipxe` and
//! `radvd`-free lab networking, and the built demo image.

use crate::common::lab::{lab_config, run_lab};
use std::path::Path;

/// The shipped config with the lab's IPv6 network and the NBD pool booting over IPv6 only.
fn ipv6_config(text: String) -> String {
    text.replace(
        "  address: 10.77.0.1 ",
        "  address6: \"fd77::1\"      # the lab bridge's IPv6 address\n  address: 10.77.0.1 ",
    )
    .replace(
        "images:\n",
        "dhcp6:\n  subnet: \"fd77::/64\"\n  range: \"fd77::100-fd77::1ff\"\n  router_advertisements: send\nimages:\n",
    )
    .replace(
        "  lab-nbd:\n    image: demo\n",
        "  lab-nbd:\n    image: demo\n    boot_over: ipv6\n",
    )
}

#[test]
#[ignore = "a UEFI VM boot over IPv6; scripts/test --all runs it"]
fn one_uefi_client_http_boots_over_ipv6_only() {
    assert!(
        Path::new("/usr/share/ovmf/OVMF.fd").exists(),
        "apt-get install ovmf"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), ipv6_config);
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("boot_over: ipv6") && text.contains("dhcp6:"), "{text}");
    let args = [
        "--clients",
        "1",
        "--root",
        "nbd",
        "--firmware",
        "uefi-http6",
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
        console.contains(">>Start HTTP Boot over IPv6"),
        "the firmware did not HTTP boot over IPv6:\n{console}"
    );
    assert!(
        !console.contains("over IPv4"),
        "the firmware tried IPv4:\n{console}"
    );
    // The firmware's DHCPv6 (HTTPClient) and iPXE's both got an address.
    let firmware = journal
        .lines()
        .any(|l| l.contains("\"dhcp6_reply\"") && l.contains("\"ipxe\":false"));
    let ipxe = journal
        .lines()
        .any(|l| l.contains("\"dhcp6_reply\"") && l.contains("\"ipxe\":true"));
    assert!(firmware && ipxe, "{journal}");
    // The loader came whole over HTTP, the script, kernel and initrd from [fd77::1] (iPXE
    // prints each URL it fetches).
    assert!(
        journal.lines().any(|l| l.contains("\"proto\":\"http\"")
            && l.contains("\"path\":\"/boot/loaders/snponly.efi\"")
            && l.contains("\"outcome\":\"complete\"")),
        "{journal}"
    );
    assert!(journal.contains("\"kind\":\"script\""), "{journal}");
    for file in ["vmlinuz", "initrd.img"] {
        assert!(
            console.contains(&format!("http://[fd77::1]:8080/boot/demo/{file}")),
            "{file} not fetched over IPv6:\n{console}"
        );
    }
    assert!(!journal.contains("\"proto\":\"tftp\""), "{journal}");
    // No DHCPv4 answer named a boot file: the pool boots over IPv6 only.
    assert!(
        !daemon.contains("boot_file=snponly.efi") && !daemon.contains(".ipxe\"") ,
        "DHCPv4 handed out a boot file:\n{daemon}"
    );
    // The root: over NBD, on IPv4 (the demo initrd's DHCPv4).
    assert!(journal.contains("\"root_attach\""), "{journal}");
    assert!(journal.contains("\"proto\":\"nbd\""), "{journal}");
}

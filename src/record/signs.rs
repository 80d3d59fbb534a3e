//! What a console line says about a failure: the kernel's own messages and those of the common
//! initrds (initramfs-tools, dracut, busybox's udhcpc, the demo initrd). Pure; the timelines
//! end a boot on a fatal line, and `cause` names a failure by the line it was read from.

/// What a console line says, for the lines that say something about a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Sign {
    RootFs,
    NoNic,
    DhcpLost,
    InitrdFailed,
    Panic,
}

/// Lines of initrds giving up.
const FAILED: [&str; 5] = [
    "bootpool-initrd: FAILED:",
    "Warning: Could not boot.",
    "Gave up waiting for root file system device",
    "ALERT! ",
    "dracut: FATAL:",
];

/// What `line` says of a failure, if anything.
pub fn sign(line: &str) -> Option<Sign> {
    const PANIC: [&str; 1] = ["Kernel panic - not syncing"];
    const ROOT_FS: [&str; 9] = [
        // the demo initrd, when the kernel refused the filesystem (a truncated squashfs is
        // refused with EINVAL and no kernel message: its size is past the device's end)
        "FAILED: cannot mount /dev/",
        "SQUASHFS error",
        "squashfs: SQUASHFS error",
        "Can't find a squashfs filesystem",
        "VFS: Can't find ext4 filesystem",
        "EXT4-fs error",
        "VFS: Can't find ext",
        "VFS: Cannot open root device",
        "VFS: Unable to mount root fs",
    ];
    const NO_NIC: [&str; 8] = [
        // the demo initrd
        "FAILED: no ethernet NIC found",
        // busybox udhcpc (demo, many small initrds), klibc ipconfig (initramfs-tools)
        "udhcpc: SIOCGIFINDEX: No such device",
        "ipconfig: no devices to configure",
        "SIOCGIFINDEX: No such device",
        // dracut network-legacy / network-manager
        "No network device found",
        "dracut: FATAL: No or empty root=",
        // netconsole itself, when its interface never appeared
        "netconsole: eth",
        "Unknown symbol in module",
    ];
    if PANIC.iter().any(|p| line.contains(p)) {
        return Some(Sign::Panic);
    }
    if NO_NIC.iter().any(|p| line.contains(p))
        && (!line.contains("netconsole: eth") || line.contains("doesn't exist"))
    {
        return Some(Sign::NoNic);
    }
    // An initrd's DHCP client giving up: the demo initrd, busybox udhcpc (`-n`), klibc's
    // ipconfig (initramfs-tools).
    const DHCP_LOST: [&str; 3] = [
        "FAILED: no DHCP lease",
        "No lease, failing",
        "no response after",
    ];
    if DHCP_LOST.iter().any(|p| line.contains(p)) {
        return Some(Sign::DhcpLost);
    }
    if ROOT_FS.iter().any(|p| line.contains(p)) {
        return Some(Sign::RootFs);
    }
    if FAILED.iter().any(|p| line.contains(p)) {
        return Some(Sign::InitrdFailed);
    }
    None
}

/// Does this line end a boot that was still running (a panic or an initrd giving up)?
pub fn fatal(line: &str) -> bool {
    sign(line) == Some(Sign::Panic) || FAILED.iter().any(|p| line.contains(p))
}

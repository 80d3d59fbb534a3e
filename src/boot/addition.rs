//! What a boot script says of bootpool's addition, the small initrd `export::addition` makes
//! from `dist/overlay/`: the boot-file name it is served by (TFTP `NAME`, HTTP
//! `/boot/loaders/NAME`), whether a client gets it, and the kernel arguments that tell its
//! scripts which writable layer to lay over the root (`pools.NAME.overlay`).

use crate::config::{Initramfs, Overlay, Pool};

/// The boot-file name of the addition, the same over TFTP and HTTP (`export::boot_files`).
pub const NAME: &str = "bootpool-overlay.cpio";

/// Whether a client of `pool` is handed the addition after its image's initrd.
pub fn handed(pool: &Pool) -> bool {
    pool.overlay != Overlay::Off
}

/// The kernel argument for the addition's scripts (`bootpool.overlay=tmpfs`,
/// `bootpool.overlay=tmpfs:SIZE`, `bootpool.overlay=disk:DEVICE`), empty when it is off.
pub fn argument(overlay: &Overlay) -> String {
    match overlay {
        Overlay::Off => String::new(),
        Overlay::Tmpfs(None) => "bootpool.overlay=tmpfs".into(),
        Overlay::Tmpfs(Some(size)) => format!("bootpool.overlay=tmpfs:{size}"),
        Overlay::Disk(dev) => format!("bootpool.overlay=disk:{dev}"),
    }
}

/// The `boot=` value for Debian's initramfs-tools: `bootpool` (the addition's
/// `/scripts/bootpool`, which mounts the root as `/scripts/nfs` or `/scripts/local` would and
/// lays the overlay over it) when the addition is handed, else Debian's own.
pub fn debian_boot(pool: &Pool, own: &'static str) -> &'static str {
    if pool.initramfs == Initramfs::InitramfsTools && handed(pool) {
        "bootpool"
    } else {
        own
    }
}

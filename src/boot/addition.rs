//! What a boot script says of bootpool's addition, the small initrd `export::addition` makes
//! from `dist/overlay/`: the boot-file name it is served by (TFTP `NAME`, HTTP
//! `/boot/loaders/NAME`), whether a client gets it, and the kernel arguments that tell its
//! scripts which writable layer to lay over the root (`pools.NAME.overlay`) and which NFS
//! export to mount at /home (`pools.NAME.homes`, docs/homes.md).

use crate::config::{Homes, Initramfs, Overlay, Pool};

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

/// The kernel argument that has the addition start the agent serving its room's peers
/// (`bootpool.peers=PORT`, docs/swarm.md) for a pool with `nbd.peers` whose root goes through
/// the agent (`blocks`: the boot's root image has its block manifest); empty otherwise, and the
/// agent then fetches from the servers alone.
pub fn peers_argument(pool: &Pool, blocks: bool) -> String {
    if pool.nbd_peers && pool.nbd_via == crate::config::NbdVia::Agent && blocks {
        format!("bootpool.peers={}", crate::proto::swarm::PEER_PORT)
    } else {
        String::new()
    }
}

/// The kernel arguments for the addition's homes (`bootpool.homes=SERVER:EXPORT
/// bootpool.homes.options=OPTIONS`), empty without them. The addition writes them, as they
/// are, into an fstab line of the root (`dist/overlay/bootpool/homes.sh`).
pub fn homes_arguments(homes: Option<&Homes>) -> String {
    match homes {
        None => String::new(),
        Some(h) => format!(
            "bootpool.homes={}:{} bootpool.homes.options={}",
            h.server, h.export, h.options
        ),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn homes_go_on_the_command_line_as_the_fstab_line_takes_them() {
        assert_eq!(homes_arguments(None), "");
        let homes = Homes {
            server: "[fd00::5]".into(),
            export: "/srv/homes".into(),
            options: "rw,hard,nofail,_netdev".into(),
        };
        assert_eq!(
            homes_arguments(Some(&homes)),
            "bootpool.homes=[fd00::5]:/srv/homes bootpool.homes.options=rw,hard,nofail,_netdev"
        );
    }
}

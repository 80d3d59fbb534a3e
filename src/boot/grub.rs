//! The GRUB chains' names and the generated GRUB config for one client: what Debian's network
//! GRUB reads, the counterpart of `script.rs`'s iPXE script. Plain data in and out. Two
//! chains use it: Secure Boot (`grubnetx64.efi.signed`, loaded by shim as `grubx64.efi`) and
//! ARM64 UEFI (`grubnetaa64.efi.signed`, which the firmware loads itself as `grubaa64.efi`:
//! Debian ships no arm64 iPXE).
//!
//! That GRUB's prefix is `/grub` on the device it was loaded from, `(tftp,NEXT-SERVER)`; its
//! embedded config sources `$prefix/x86_64-efi/grub.cfg` (arm64: `$prefix/arm64-efi/grub.cfg`)
//! if that exists, else `$prefix/grub.cfg`. It has no HTTP module (Debian 12, 2.06-13), so the
//! config, the kernel and the initrd all come over TFTP. The config is the same name for every
//! client: bootpool answers it for whoever holds the address the request came from, with the
//! image its firmware's architecture boots (`Member::on_arch`).

use super::script;
use crate::config::{Config, Image, Mac, Member};
use std::net::Ipv4Addr;

/// What firmware of a `secure_boot` pool is handed: Debian's shim, signed by Microsoft's UEFI
/// CA (which firmware trusts), served under this name.
pub const SHIM: &str = "shimx64.efi";
/// The second stage shim fetches from beside itself (its `DEFAULT_LOADER`); bootpool serves
/// the signed network GRUB by this name.
pub const GRUB: &str = "grubx64.efi";
/// What ARM64 UEFI firmware (option 93: 11) is handed over TFTP: `server.grub_arm64`.
pub const GRUB_ARM64: &str = "grubaa64.efi";
/// TFTP's well-known port, which GRUB's `(tftp,SERVER)` device means.
const TFTP_PORT: u16 = 69;
/// The config GRUB reads, as asked over TFTP (its leading `/` taken off).
pub const CONFIG: &str = "grub/grub.cfg";

/// Whether a client of `pool` whose firmware said option 93 `arch` boots through GRUB (and
/// so may have its config): a `secure_boot` pool's clients, and ARM64 UEFI firmware.
pub fn boots_grub(pool: &crate::config::Pool, arch: Option<u16>) -> bool {
    pool.secure_boot || arch == Some(crate::proto::dhcp::arch::EFI_ARM64)
}

/// The GRUB config for one client: the kernel and initrd of `served` over TFTP from `link`,
/// with the kernel command line the iPXE script would give it (less the EFI stub's `initrd=`:
/// GRUB hands the initrd over itself). `served` is the image this boot is served (the
/// caller's `image::serve::for_boot`: the active revision, or the one the client is pinned
/// to), whose files and root the config names, as the iPXE script's do.
pub fn config(
    config: &Config,
    member: &Member,
    served: &Image,
    mac: Mac,
    link: Ipv4Addr,
    client: Option<Ipv4Addr>,
) -> String {
    let pool = member.pool;
    let image = served;
    let name = member.name().unwrap_or_default();
    let port = config.server.ports.tftp;
    let device = if port == TFTP_PORT {
        format!("(tftp,{link})")
    } else {
        format!("(tftp,{link}:{port})")
    };
    let mut line = script::cmdline(config, member, served, link, client);
    if pool.cmdline_template.is_none()
        && let Some(cut) = line.strip_suffix(&script::efi_initrds(member, image))
    {
        line = cut.to_string();
    }
    // The addition after the image's own initrd, as in the iPXE script (`initrd A B`).
    let addition = if super::addition::handed(pool) {
        format!(" {device}/{}", super::addition::NAME)
    } else {
        String::new()
    };
    let args: Vec<String> = line.split_whitespace().map(quote).collect();
    format!(
        "# bootpool: pool {pool} client {mac} {name}\n\
         set timeout=0\n\
         echo {banner}\n\
         linux {device}/{image}/{kernel} {args}\n\
         initrd {device}/{image}/{initrd}{addition}\n\
         boot\n",
        pool = pool.name,
        banner = quote(&format!("bootpool: pool {} client {mac} {name}", pool.name)),
        image = image.name,
        kernel = image.kernel_name,
        initrd = image.initrd_name,
        args = args.join(" "),
    )
}

/// One word for GRUB's shell: single-quoted, so `$`, `;`, `{` and the like stay literal
/// (a `'` inside is closed, escaped and reopened).
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn sb_config(extra: &str) -> Config {
        let text = super::super::tests::CONFIG.replace(
            "    cmdline: console=ttyS0\n",
            &format!("    cmdline: console=ttyS0\n    secure_boot: true\n{extra}"),
        );
        Config::parse(Path::new("p.yaml"), &text).unwrap()
    }

    #[test]
    fn grub_loads_the_pools_kernel_and_initrd_over_tftp_with_the_clients_command_line() {
        let c = sb_config("");
        let mac: Mac = "52:54:00:77:00:02".parse().unwrap();
        let m = c.member(mac).unwrap();
        let link = Ipv4Addr::new(10, 77, 0, 3);
        let text = config(&c, &m, m.image(), mac, link, None);
        assert!(
            text.contains(
                "\nlinux (tftp,10.77.0.3)/demo/vmlinuz 'root=nbd:10.77.0.3:demo' 'bootpool.url=http://10.77.0.3:8080' 'console=ttyS0'\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("\ninitrd (tftp,10.77.0.3)/demo/initrd.img\nboot\n"),
            "{text}"
        );
        assert!(!text.contains("initrd=initrd.img"), "{text}");
        assert!(!text.contains("10.77.0.1"), "{text}");
    }

    /// A revision served (the active one, or a client pinned to another) is the kernel and
    /// initrd GRUB loads, not the image's top-level files.
    #[test]
    fn grub_loads_the_served_revisions_kernel_and_initrd() {
        let c = sb_config("");
        let mac: Mac = "52:54:00:77:00:02".parse().unwrap();
        let m = c.member(mac).unwrap();
        let served = crate::config::names::revision(m.image(), "3");
        let text = config(&c, &m, &served, mac, c.server.address, None);
        assert!(
            text.contains(
                "\nlinux (tftp,10.77.0.1)/demo/revs/3/vmlinuz 'root=nbd:10.77.0.1:demo@3' "
            ),
            "{text}"
        );
        assert!(
            text.contains("\ninitrd (tftp,10.77.0.1)/demo/revs/3/initrd.img\nboot\n"),
            "{text}"
        );
        assert!(!text.contains("initrd=initrd.img"), "{text}");
    }

    /// An ARM64 client of a pool with `arch.arm64` (no `secure_boot`) gets GRUB's config
    /// for that image and command line; its pool's x86 clients boot no GRUB.
    #[test]
    fn arm64_firmware_reads_its_architectures_image() {
        let text = super::super::tests::mixed();
        let c = Config::parse(Path::new("p.yaml"), &text).unwrap();
        let mac: Mac = "52:54:00:77:00:02".parse().unwrap();
        let m = c.member(mac).unwrap();
        assert!(boots_grub(
            m.pool,
            Some(crate::proto::dhcp::arch::EFI_ARM64)
        ));
        assert!(!boots_grub(m.pool, Some(crate::proto::dhcp::arch::EFI_BC)));
        assert!(!boots_grub(m.pool, None));
        let m = m.on_arch(Some(crate::proto::dhcp::arch::EFI_ARM64));
        let text = config(&c, &m, m.image(), mac, c.server.address, None);
        assert!(
            text.contains(
                "\nlinux (tftp,10.77.0.1)/demo-arm64/vmlinuz 'root=nbd:10.77.0.1:demo-arm64' 'bootpool.url=http://10.77.0.1:8080' 'console=ttyAMA0'\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("\ninitrd (tftp,10.77.0.1)/demo-arm64/initrd.img\n"),
            "{text}"
        );
    }

    /// A stock initrd's pool loads the addition after the image's own initrd (`initrd A B`),
    /// and its command line keeps no EFI stub `initrd=`.
    #[test]
    fn grub_loads_the_overlay_addition_after_the_images_initrd() {
        let c = sb_config("    initramfs: dracut\n");
        let mac: Mac = "52:54:00:77:00:02".parse().unwrap();
        let m = c.member(mac).unwrap();
        let text = config(&c, &m, m.image(), mac, c.server.address, None);
        assert!(
            text.contains(
                "\nlinux (tftp,10.77.0.1)/demo/vmlinuz 'root=nbd:10.77.0.1:demo' 'ip=dhcp' 'bootpool.overlay=tmpfs' 'bootpool.url=http://10.77.0.1:8080' 'console=ttyS0'\n\
                 initrd (tftp,10.77.0.1)/demo/initrd.img (tftp,10.77.0.1)/bootpool-overlay.cpio\nboot\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn another_tftp_port_and_words_grub_would_expand_are_kept_literal() {
        let text = super::super::tests::CONFIG
            .replace(
                "http: 0.0.0.0:8080",
                "http: 0.0.0.0:8080, ports: { tftp: 6969 }",
            )
            .replace(
                "    cmdline: console=ttyS0\n",
                "    cmdline: \"console=ttyS0 x=$y it's\"\n    secure_boot: true\n",
            );
        let c = Config::parse(Path::new("p.yaml"), &text).unwrap();
        let mac: Mac = "52:54:00:77:00:02".parse().unwrap();
        let m = c.member(mac).unwrap();
        let text = config(&c, &m, m.image(), mac, c.server.address, None);
        assert!(
            text.contains("linux (tftp,10.77.0.1:6969)/demo/vmlinuz "),
            "{text}"
        );
        assert!(text.contains(" 'x=$y' 'it'\\''s'\n"), "{text}");
    }

    #[test]
    fn secure_boot_needs_tftp() {
        let text = super::super::tests::CONFIG
            .replace("http: 0.0.0.0:8080", "http: 0.0.0.0:8080, tftp: false")
            .replace(
                "    cmdline: console=ttyS0\n",
                "    cmdline: console=ttyS0\n    secure_boot: true\n",
            );
        let e = Config::parse(Path::new("p.yaml"), &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("pools.room.secure_boot") && e.contains("TFTP") && e.contains(":10:"),
            "{e}"
        );
    }
}

//! `pools.NAME.overlay`, checked: the writable layer bootpool's addition lays over a stock
//! initrd's read-only root (`tmpfs`, `{ tmpfs: SIZE }`, `{ disk: DEVICE }` or `off`), and its
//! default: on (tmpfs) for dracut and initramfs-tools pools, off for the demo's own initrd and
//! for an NBD root whose image keeps each client's writes itself (`cow`).

use super::check::Checker;
use super::error::ConfigError;
use super::locate::Step::Key;
use super::model::{Image, Initramfs, Overlay, RootProto};
use super::raw;

impl Checker<'_> {
    /// The pool's `overlay`, or its default for `initramfs` and the image.
    pub(super) fn check_overlay(
        &self,
        pool: &str,
        raw: Option<&raw::Overlay>,
        initramfs: Initramfs,
        root: RootProto,
        image: &Image,
    ) -> Result<Overlay, ConfigError> {
        let at = [Key("pools"), Key(pool), Key("overlay")];
        let under = |key| [Key("pools"), Key(pool), Key("overlay"), Key(key)];
        let Some(raw) = raw else {
            let own = initramfs == Initramfs::Bootpool;
            let cow = root == RootProto::Nbd && image.cow.is_some();
            return Ok(if own || cow {
                Overlay::Off
            } else {
                Overlay::Tmpfs(None)
            });
        };
        let overlay = match raw {
            raw::Overlay::Word(w) if w == "off" => Overlay::Off,
            raw::Overlay::Word(w) if w == "tmpfs" => Overlay::Tmpfs(None),
            raw::Overlay::Word(w) => {
                return Err(self.err(
                    &at,
                    format!("`{w}` is not an overlay: give tmpfs, off, {{ tmpfs: SIZE }} or {{ disk: DEVICE }}"),
                ));
            }
            raw::Overlay::Map(m) => {
                let mut keys = m.iter();
                match (keys.next(), keys.next()) {
                    (Some((key, size)), None) if key == "tmpfs" => {
                        let size = size.text();
                        tmpfs_size(&size).map_err(|why| self.err(&under("tmpfs"), why))?;
                        Overlay::Tmpfs(Some(size))
                    }
                    (Some((key, dev)), None) if key == "disk" => {
                        let dev = dev.text();
                        device(&dev).map_err(|why| self.err(&under("disk"), why))?;
                        Overlay::Disk(dev)
                    }
                    (Some((key, _)), None) => {
                        return Err(self.err(
                            &at,
                            format!("`{key}` is not an overlay key: give {{ tmpfs: SIZE }} or {{ disk: DEVICE }}"),
                        ));
                    }
                    _ => {
                        return Err(
                            self.err(&at, "takes exactly one of `tmpfs: SIZE` and `disk: DEVICE`")
                        );
                    }
                }
            }
        };
        if overlay != Overlay::Off && initramfs == Initramfs::Bootpool {
            return Err(self.err(
                &at,
                "is for stock initrds (`initramfs: initramfs-tools` or `dracut`): the demo's \
                 own initrd (`initramfs: bootpool`, the default) lays a tmpfs overlay of its own; \
                 set `initramfs` to the image's initrd builder, or `overlay: off`",
            ));
        }
        Ok(overlay)
    }
}

/// A tmpfs `size=`: bytes with an optional `k`, `m` or `g`, or a share of the memory, 1 to
/// 100 `%`.
fn tmpfs_size(size: &str) -> Result<(), String> {
    let bad = || {
        format!(
            "`{size}` is not a tmpfs size: a number with k, m or g (e.g. 2g, 512m), or a share \
             of the client's memory (e.g. 50%)"
        )
    };
    if let Some(share) = size.strip_suffix('%') {
        return match share.parse::<u8>() {
            Ok(1..=100) if share.bytes().all(|b| b.is_ascii_digit()) => Ok(()),
            _ => Err(bad()),
        };
    }
    let digits = size.trim_end_matches(['k', 'm', 'g', 'K', 'M', 'G']);
    let ok = !digits.is_empty()
        && size.len() - digits.len() <= 1
        && digits.bytes().all(|b| b.is_ascii_digit())
        && digits.parse::<u64>().is_ok_and(|n| n > 0);
    if ok { Ok(()) } else { Err(bad()) }
}

/// A device path as the client names it: under `/dev/`, with nothing the kernel command line
/// or a shell word would split (`/dev/sda3`, `/dev/disk/by-label/scratch`).
fn device(dev: &str) -> Result<(), String> {
    let ok = dev.len() > 5
        && dev.starts_with("/dev/")
        && !dev.split('/').any(|c| c == "..")
        && dev
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-:+=".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{dev}` is not a device path: give the client's partition under /dev/ (e.g. \
             /dev/sda3 or /dev/disk/by-label/scratch), letters, digits and / . _ - : + = only"
        ))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Overlay};
    use std::path::Path;

    const STOCK: &str = "\
server: { address: 10.77.0.1 }
dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.199 }
images:
  stock: { dir: images/stock }
pools:
  room:
    image: stock
    root: nbd
    initramfs: initramfs-tools
    cmdline: console=ttyS0
    clients:
      - { macs: \"52:54:00:77:00:00-52:54:00:77:00:ff\" }
";

    fn overlay(text: &str) -> Result<Overlay, String> {
        Config::parse(Path::new("/etc/bootpool/pools.yaml"), text)
            .map(|c| c.pools["room"].overlay.clone())
            .map_err(|e| e.to_string())
    }

    fn with(key: &str) -> String {
        STOCK.replace(
            "    cmdline: console=ttyS0\n",
            &format!("    cmdline: console=ttyS0\n    overlay: {key}\n"),
        )
    }

    /// Stock initrds get a tmpfs by default; the demo's own initrd, and an NBD root whose
    /// image keeps each client's writes (`cow`), none.
    #[test]
    fn on_for_stock_initrds_off_for_the_demos_and_for_cow() {
        assert_eq!(overlay(STOCK), Ok(Overlay::Tmpfs(None)));
        let dracut = STOCK.replace("initramfs-tools", "dracut");
        assert_eq!(overlay(&dracut), Ok(Overlay::Tmpfs(None)));
        let demo = STOCK.replace("    initramfs: initramfs-tools\n", "");
        assert_eq!(overlay(&demo), Ok(Overlay::Off));
        let cow = STOCK.replace("{ dir: images/stock }", "{ dir: images/stock, cow: ram }");
        assert_eq!(overlay(&cow), Ok(Overlay::Off));
        let nfs = cow.replace("root: nbd", "root: nfs");
        assert_eq!(overlay(&nfs), Ok(Overlay::Tmpfs(None)));
    }

    #[test]
    fn each_form_is_read() {
        assert_eq!(overlay(&with("off")), Ok(Overlay::Off));
        assert_eq!(overlay(&with("tmpfs")), Ok(Overlay::Tmpfs(None)));
        assert_eq!(
            overlay(&with("{ tmpfs: 1048576 }")),
            Ok(Overlay::Tmpfs(Some("1048576".into())))
        );
        for size in ["2g", "512M", "100%", "7"] {
            assert_eq!(
                overlay(&with(&format!("{{ tmpfs: \"{size}\" }}"))),
                Ok(Overlay::Tmpfs(Some(size.into())))
            );
        }
        assert_eq!(
            overlay(&with("{ disk: /dev/disk/by-label/scratch }")),
            Ok(Overlay::Disk("/dev/disk/by-label/scratch".into()))
        );
    }

    /// Each bad value is refused at its key's line, with what would do.
    #[test]
    fn bad_values_name_the_key_and_line() {
        for (value, path, words) in [
            ("ram", "pools.room.overlay", "not an overlay"),
            (
                "{ tmpfs: 2t }",
                "pools.room.overlay.tmpfs",
                "not a tmpfs size",
            ),
            (
                "{ tmpfs: \"0%\" }",
                "pools.room.overlay.tmpfs",
                "not a tmpfs size",
            ),
            (
                "{ tmpfs: \"101%\" }",
                "pools.room.overlay.tmpfs",
                "not a tmpfs size",
            ),
            (
                "{ tmpfs: 2gg }",
                "pools.room.overlay.tmpfs",
                "not a tmpfs size",
            ),
            (
                "{ disk: sda3 }",
                "pools.room.overlay.disk",
                "not a device path",
            ),
            (
                "{ disk: \"/dev/sda 3\" }",
                "pools.room.overlay.disk",
                "not a device path",
            ),
            (
                "{ disk: /dev/../etc }",
                "pools.room.overlay.disk",
                "not a device path",
            ),
            (
                "{ disk: /dev/sda3, tmpfs: 1g }",
                "pools.room.overlay",
                "exactly one",
            ),
            ("{ size: 1g }", "pools.room.overlay", "not an overlay key"),
            ("{}", "pools.room.overlay", "exactly one"),
        ] {
            let e = overlay(&with(value)).unwrap_err();
            assert!(e.contains(path) && e.contains(words), "{value}: {e}");
            assert!(e.contains(":11:"), "{value}: {e}");
        }
        let demo = with("tmpfs").replace("    initramfs: initramfs-tools\n", "");
        let e = overlay(&demo).unwrap_err();
        assert!(
            e.contains("pools.room.overlay") && e.contains("initramfs: bootpool"),
            "{e}"
        );
        assert_eq!(
            overlay(&demo.replace("overlay: tmpfs", "overlay: off")),
            Ok(Overlay::Off)
        );
    }
}

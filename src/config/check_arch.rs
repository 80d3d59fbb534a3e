//! `pools.NAME.arch`, checked: each key a firmware family, each image one of `images`.

use super::arch::Arch;
use super::check::Checker;
use super::error::ConfigError;
use super::locate::Step::Key;
use super::model::{Image, Variant};
use super::raw;
use std::collections::BTreeMap;
use std::sync::Arc;

impl Checker<'_> {
    /// `pools.POOL.arch`: each key a family, each image one of `images`. ARM64 firmware boots
    /// through GRUB, which reads its config, kernel and initrd over TFTP only.
    pub(super) fn check_arch(
        &self,
        pool: &str,
        raw: &BTreeMap<String, raw::ArchEntry>,
        images: &BTreeMap<String, Arc<Image>>,
        tftp: bool,
    ) -> Result<BTreeMap<Arch, Variant>, ConfigError> {
        let mut out = BTreeMap::new();
        for (key, entry) in raw {
            let at = [Key("pools"), Key(pool), Key("arch"), Key(key)];
            let names: Vec<&str> = Arch::ALL.iter().map(|a| a.name()).collect();
            let arch = Arch::parse(key).ok_or_else(|| {
                self.err(
                    &at,
                    format!(
                        "`{key}` is not a firmware architecture ({})",
                        names.join(", ")
                    ),
                )
            })?;
            let image = images.get(&entry.image).cloned().ok_or_else(|| {
                let known: Vec<&str> = images.keys().map(String::as_str).collect();
                self.err(
                    &[Key("pools"), Key(pool), Key("arch"), Key(key), Key("image")],
                    format!("no image `{}` (images: {})", entry.image, known.join(", ")),
                )
            })?;
            if arch == Arch::Arm64 && !tftp {
                return Err(self.err(
                    &at,
                    "needs TFTP (`server.tftp: false`): ARM64 firmware gets Debian's network \
                     GRUB, which loads its config, kernel and initrd over TFTP only",
                ));
            }
            let cmdline = entry.cmdline.clone();
            out.insert(arch, Variant { image, cmdline });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::config::tests::missing_files;
    use std::path::Path;

    const MIXED: &str = "\
server: { address: 10.77.0.1 }
dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.199 }
images:
  demo: { dir: images/demo }
  demo-arm64: { dir: images/demo-arm64 }
pools:
  room:
    image: demo
    cmdline: console=ttyS0
    arch:
      arm64: { image: demo-arm64, cmdline: console=ttyAMA0 }
    clients:
      - { macs: \"52:54:00:77:00:00-52:54:00:77:00:ff\" }
";

    fn parse(text: &str) -> Result<Config, crate::config::ConfigError> {
        Config::parse(Path::new("/etc/bootpool/pools.yaml"), text)
    }

    /// Option 93 picks the image and command line; families the pool does not name, and
    /// clients that said nothing, get the pool's own.
    #[test]
    fn a_pool_boots_each_family_its_own_image() {
        let c = parse(MIXED).unwrap();
        let pool = &c.pools["room"];
        assert_eq!(pool.arch.len(), 1);
        let names: Vec<&str> = pool.images().iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["demo", "demo-arm64"]);
        let m = || c.member("52:54:00:77:00:07".parse().unwrap()).unwrap();
        for (code, image, cmdline) in [
            (Some(11), "demo-arm64", "console=ttyAMA0"),
            (Some(19), "demo-arm64", "console=ttyAMA0"),
            (Some(7), "demo", "console=ttyS0"),
            (Some(0), "demo", "console=ttyS0"),
            (Some(25), "demo", "console=ttyS0"),
            (None, "demo", "console=ttyS0"),
        ] {
            let on = m().on_arch(code);
            assert_eq!(on.image().name, image, "{code:?}");
            assert_eq!(on.cmdline(), cmdline, "{code:?}");
        }
        // Without a cmdline of its own a family keeps the pool's.
        let c = parse(&MIXED.replace(", cmdline: console=ttyAMA0", "")).unwrap();
        let m = c.member("52:54:00:77:00:07".parse().unwrap()).unwrap();
        assert_eq!(m.on_arch(Some(11)).cmdline(), "console=ttyS0");
    }

    /// `bootpool check` names the ARM64 GRUB a pool with `arch.arm64` needs, and the ARM64
    /// image's files, beside the pool's own.
    #[test]
    fn an_arm64_pool_needs_its_grub_and_its_images_files() {
        let c = parse(&MIXED.replace(
            "server: { address: 10.77.0.1 }",
            "server: { address: 10.77.0.1, grub_arm64: /nonexistent/grubnetaa64.efi.signed }",
        ))
        .unwrap();
        let missing: Vec<String> = missing_files(&c).iter().map(|e| e.to_string()).collect();
        assert!(
            missing
                .iter()
                .any(|e| e.contains("server.grub_arm64") && e.contains("/nonexistent/")),
            "{missing:?}"
        );
        assert!(
            missing
                .iter()
                .any(|e| e.contains("image `demo-arm64` lacks")),
            "{missing:?}"
        );
        let plain = parse(&MIXED.replace(
            "    arch:\n      arm64: { image: demo-arm64, cmdline: console=ttyAMA0 }\n",
            "",
        ))
        .unwrap();
        assert!(plain.pools["room"].arch.is_empty());
        let missing: Vec<String> = missing_files(&plain)
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert!(
            !missing.iter().any(|e| e.contains("grub_arm64")),
            "{missing:?}"
        );
    }

    #[test]
    fn a_bad_arch_entry_is_named_by_file_line_and_key() {
        let e = parse(&MIXED.replace("      arm64:", "      aarch64:"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("/etc/bootpool/pools.yaml:11:7: pools.room.arch.aarch64: ")
                && e.contains("not a firmware architecture (bios, x64, ia32, arm64)"),
            "{e}"
        );
        let e = parse(&MIXED.replace("image: demo-arm64", "image: nothing"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("/etc/bootpool/pools.yaml:11:")
                && e.contains("pools.room.arch.arm64.image: no image `nothing`"),
            "{e}"
        );
        let e = parse(&MIXED.replace("cmdline: console=ttyAMA0", "kernel: x"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(":11:") && e.contains("unknown field `kernel`"),
            "{e}"
        );
        let e = parse(&MIXED.replace(
            "server: { address: 10.77.0.1 }",
            "server: { address: 10.77.0.1, tftp: false }",
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(":11:7: pools.room.arch.arm64: needs TFTP"),
            "{e}"
        );
    }

    #[test]
    fn every_family_is_named_and_found_by_its_codes() {
        for a in Arch::ALL {
            assert_eq!(Arch::parse(a.name()), Some(a));
        }
        assert_eq!(Arch::parse("aarch64"), None);
        let family: Vec<_> = [0, 6, 7, 9, 11, 15, 16, 19, 10, 18, 25]
            .into_iter()
            .map(Arch::of_code)
            .collect();
        use Arch::*;
        assert_eq!(
            family,
            [
                Some(Bios),
                Some(Ia32),
                Some(X64),
                Some(X64),
                Some(Arm64),
                Some(Ia32),
                Some(X64),
                Some(Arm64),
                None,
                None,
                None
            ]
        );
    }
}

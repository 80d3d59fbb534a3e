//! Which file a boot-file name means, for TFTP and HTTP alike: the loaders folder's plain
//! names and each image's kernel and initrd (`IMAGE/KERNEL`, by the names pools.yaml gives
//! them: `vmlinuz` and `initrd.img` unless `images.NAME.kernel`/`initrd` say otherwise),
//! the Secure Boot chain's `shimx64.efi` and `grubx64.efi` (`server.shim`, `server.grub`),
//! ARM64's `grubaa64.efi` (`server.grub_arm64`), memtest86+ (`server.memtest`), bootpool's
//! overlay addition `bootpool-overlay.cpio` (`export::addition`, from `state_dir/addition/`),
//! nothing else; for an image with revisions, each revision's as `IMAGE/revs/ID/KERNEL`
//! (`image::serve`). A symlink is followed only while it stays inside its folder, so no name
//! reaches outside what is served. An `initrd_wire: zstd` image's initrd is answered with its
//! copy recompressed for the wire once that is made (`image::wire`).

use crate::boot::{grub, next};
use crate::config::{Config, ConfigError, Image, Wire};
use crate::image::copies;
use crate::record::FileKind;
use std::path::{Path, PathBuf};

/// Why a name is not served. Each service maps it to its own answer once: TFTP to an error
/// code (`service::tftp`), HTTP to a status (`service::http::boot`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotServed {
    /// Not a name bootpool serves anything by: empty, absolute, with a backslash, an empty or
    /// dot-led component, or an image's file other than its kernel and initrd.
    Denied,
    /// No such image, or no such file in its folder.
    Missing,
    /// A symlink out of its folder: the file asked for, where it leads, and the folder.
    Outside {
        file: PathBuf,
        target: PathBuf,
        folder: PathBuf,
    },
}

impl NotServed {
    /// What the client is told.
    pub fn reason(&self) -> &'static str {
        match self {
            NotServed::Denied => "access violation",
            NotServed::Missing => "file not found",
            NotServed::Outside { .. } => OUTSIDE,
        }
    }
}

/// Maps a requested name (`LOADER` or `IMAGE/FILE`) to a file and what it is, refusing anything but the loaders and the
/// images' boot files. Symlinks are followed only while they stay inside their folder.
pub fn resolve(config: &Config, name: &str) -> Result<(PathBuf, FileKind), NotServed> {
    if name.is_empty()
        || name.starts_with('/')
        || name.contains('\\')
        || name.split('/').any(|c| c.is_empty() || c.starts_with('.'))
    {
        return Err(NotServed::Denied);
    }
    let signed = |path: &Path, kind| {
        let folder = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        (folder, path.to_path_buf(), kind, false)
    };
    // `wire`: an initrd its image sends recompressed (`initrd_wire: zstd`).
    let (root, path, kind, wire) = match name.split_once('/') {
        None if name == grub::SHIM => signed(&config.server.shim, FileKind::Shim),
        None if name == grub::GRUB => signed(&config.server.grub, FileKind::Grub),
        None if name == grub::GRUB_ARM64 => signed(&config.server.grub_arm64, FileKind::Grub),
        // memtest86+, the next boot `memtest` (`boot::next`), from `server.memtest`.
        None if name == next::MEMTEST_BIOS || name == next::MEMTEST_UEFI => {
            signed(&config.server.memtest.join(name), FileKind::Kernel)
        }
        // The initrd handed after a stock image's own (`boot::addition`).
        None if name == crate::boot::addition::NAME => {
            let folder = super::addition::folder(&config.server.state_dir);
            let path = folder.join(name);
            (folder, path, FileKind::Initrd, false)
        }
        None => (
            config.server.loaders.clone(),
            config.server.loaders.join(name),
            FileKind::Loader,
            false,
        ),
        Some((image, file)) => {
            let image = config.images.get(image).ok_or(NotServed::Missing)?;
            if let Some((path, kind)) = fetched_ahead(image, file) {
                return match place(&image.dir, &path) {
                    Place::Inside(real) => Ok((real, kind)),
                    _ => Err(NotServed::Missing),
                };
            }
            // `revs/ID/FILE`: the boot files of one revision (`image::serve`).
            let image = &crate::image::serve::for_file(image, file);
            match image_file(image, file) {
                Some(FileKind::Kernel) => {
                    (image.dir.clone(), image.kernel(), FileKind::Kernel, false)
                }
                Some(FileKind::Initrd) => (
                    image.dir.clone(),
                    image.initrd(),
                    FileKind::Initrd,
                    image.initrd_wire == Wire::Zstd,
                ),
                _ => return Err(NotServed::Denied),
            }
        }
    };
    match place(&root, &path) {
        Place::Inside(real) if wire => {
            // The copy made for the wire, while it is of the file as it is now.
            let copy = copies::copy_of(&config.server.state_dir, &real, copies::Kind::Initrd);
            Ok((copy.unwrap_or(real), kind))
        }
        Place::Inside(real) => Ok((real, kind)),
        Place::Missing => Err(NotServed::Missing),
        Place::Outside(real) => Err(NotServed::Outside {
            file: path,
            target: real,
            folder: root,
        }),
    }
}

/// `revs/ID/FILE`, the kernel or initrd of a revision this server does not hold: fetched from
/// a member of the site that holds it and checked before it is served (`image::demand`;
/// blocks while it is fetched). `None` for any other name, or when no member gives it.
fn fetched_ahead(image: &Image, file: &str) -> Option<(PathBuf, FileKind)> {
    let id = crate::config::names::revision_of(file)?;
    if !crate::image::store::managed(&image.dir)
        || crate::image::store::rev_dir(&image.dir, id).is_dir()
    {
        return None;
    }
    let kind = image_file(&crate::config::names::revision(image, id), file)?;
    let name = match kind {
        FileKind::Kernel => &image.kernel_name,
        _ => &image.initrd_name,
    };
    crate::image::demand::boot_file(image, id, name).map(|p| (p, kind))
}

/// What a client is told of a boot file that is a symlink leaving its folder.
pub const OUTSIDE: &str = "not served: a symlink out of its folder";

/// Where a boot file's path leads.
enum Place {
    /// To this file inside the folder.
    Inside(PathBuf),
    /// Nowhere (or the folder itself is missing).
    Missing,
    /// Out of the folder, to this path.
    Outside(PathBuf),
}

fn place(root: &Path, path: &Path) -> Place {
    let (Ok(real), Ok(root)) = (path.canonicalize(), root.canonicalize()) else {
        return Place::Missing;
    };
    if real.starts_with(&root) {
        Place::Inside(real)
    } else {
        Place::Outside(real)
    }
}

/// The boot files bootpool hands out that would not be served because they are symlinks out of
/// their folder: each pool image's kernel and initrd, and the loaders. `bootpool check` and
/// `bootpool serve` refuse such a config (missing files are `image::serve::missing_files`' and `Config::missing_files`' to tell).
pub fn unservable(config: &Config) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    let mut seen = Vec::new();
    for image in config.pools.values().flat_map(|p| p.images()) {
        if seen.contains(&&image.name) {
            continue;
        }
        seen.push(&image.name);
        for (key, name, path) in [
            ("kernel", &image.kernel_name, image.kernel()),
            ("initrd", &image.initrd_name, image.initrd()),
        ] {
            if let Place::Outside(real) = place(&image.dir, &path) {
                errors.push(config.error_at(
                    &["images", image.name.as_str(), key],
                    format!(
                        "{} (`{name}`) is a symlink to {}, outside the image folder {}: TFTP and HTTP serve nothing outside it and would answer `not found` (copy or hard-link the file into the folder)",
                        path.display(),
                        real.display(),
                        image.dir.display()
                    ),
                ));
            }
        }
    }
    let loaders = &config.server.loaders;
    for loader in crate::boot::LOADERS {
        let path = loaders.join(loader);
        if let Place::Outside(real) = place(loaders, &path) {
            errors.push(config.error_at(
                &["server", "loaders"],
                format!(
                    "{} is a symlink to {}, outside the loaders folder: TFTP and HTTP serve nothing outside it and would answer `not found` (copy the file into the folder)",
                    path.display(),
                    real.display()
                ),
            ));
        }
    }
    errors
}

/// What a `secure_boot` pool hands out that Secure Boot would refuse to run: a kernel, or
/// `server.shim`/`server.grub`, with no Authenticode signature (`proto::pe`). Which key
/// signed it is the firmware's and shim's to judge; missing files are `app::unservable`'s to tell.
pub fn unsigned(config: &Config) -> Vec<ConfigError> {
    let head = |path: &Path| -> Option<Vec<u8>> {
        use std::io::Read;
        let mut buf = Vec::new();
        std::fs::File::open(path)
            .ok()?
            .take(crate::proto::pe::HEADER_BYTES as u64)
            .read_to_end(&mut buf)
            .ok()?;
        Some(buf)
    };
    let mut errors = Vec::new();
    let mut check = |keys: &[&str], path: &Path, what: &str| {
        if let Some(bytes) = head(path) {
            let why = match crate::proto::pe::signed(&bytes) {
                Ok(true) => return,
                Ok(false) => "has no Authenticode signature".to_string(),
                Err(e) => format!("is no EFI image ({e})"),
            };
            errors.push(config.error_at(
                keys,
                format!(
                    "{} {why}: firmware with Secure Boot on (a pool has secure_boot) will not run it; {what}",
                    path.display()
                ),
            ));
        }
    };
    let pools: Vec<_> = config.pools.values().filter(|p| p.secure_boot).collect();
    if pools.is_empty() {
        return errors;
    }
    check(
        &["server", "shim"],
        &config.server.shim,
        "use a shim signed by Microsoft's UEFI CA (Debian: shim-signed)",
    );
    check(
        &["server", "grub"],
        &config.server.grub,
        "use a GRUB your shim trusts (Debian: grub-efi-amd64-signed)",
    );
    let mut seen = Vec::new();
    // The kernels shim's GRUB starts: the pool's, and its x64 clients' if `arch` gives them
    // their own (its ARM64 clients get no shim).
    let shimmed = pools.iter().flat_map(|p| {
        std::iter::once(&p.image).chain(p.arch.get(&crate::config::Arch::X64).map(|v| &v.image))
    });
    for image in shimmed {
        if !seen.contains(&&image.name) {
            seen.push(&image.name);
            check(
                &["images", image.name.as_str(), "kernel"],
                &image.kernel(),
                "use a kernel your distribution signs (Debian's linux-image-*-amd64 is)",
            );
        }
    }
    errors
}

/// Which of an image's boot files `file` (the part of a name after `IMAGE/`) names.
fn image_file(image: &Image, file: &str) -> Option<FileKind> {
    if file == image.kernel_name {
        Some(FileKind::Kernel)
    } else if file == image.initrd_name {
        Some(FileKind::Initrd)
    } else {
        None
    }
}

/// Is `name` a file bootpool tells clients to fetch?
pub fn handed_out(config: &Config, name: &str) -> bool {
    match name.split_once('/') {
        None => {
            crate::boot::LOADERS.contains(&name)
                || [grub::SHIM, grub::GRUB, grub::GRUB_ARM64].contains(&name)
                || [next::MEMTEST_BIOS, next::MEMTEST_UEFI].contains(&name)
        }
        Some((image, file)) => config.images.get(image).is_some_and(|image| {
            image_file(&crate::image::serve::for_file(image, file), file).is_some()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian's signed loaders read as signed from disk, and its iPXE build as not (the file
    /// reading lives here: `proto` touches no files).
    #[test]
    fn debians_signed_loaders_are_and_ipxe_is_not() {
        for (path, want) in [
            ("/usr/lib/shim/shimx64.efi.signed", true),
            (
                "/usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed",
                true,
            ),
            ("/usr/lib/ipxe/snponly.efi", false),
        ] {
            if let Ok(bytes) = std::fs::read(path) {
                assert_eq!(
                    crate::proto::pe::signed(
                        &bytes[..crate::proto::pe::HEADER_BYTES.min(bytes.len())]
                    ),
                    Ok(want),
                    "{path}"
                );
            }
        }
    }

    /// A PE32+ header whose certificate table is `size` bytes (0: unsigned).
    pub(crate) fn efi_image(size: u32) -> Vec<u8> {
        let mut b = vec![0u8; 1024];
        b[..2].copy_from_slice(b"MZ");
        b[0x3c..0x40].copy_from_slice(&0x80u32.to_le_bytes());
        b[0x80..0x84].copy_from_slice(b"PE\0\0");
        let opt = 0x80 + 24;
        b[opt..opt + 2].copy_from_slice(&0x20bu16.to_le_bytes());
        b[opt + 108..opt + 112].copy_from_slice(&16u32.to_le_bytes());
        let sec = opt + 112 + 4 * 8;
        b[sec + 4..sec + 8].copy_from_slice(&size.to_le_bytes());
        b
    }

    /// A `secure_boot` pool's unsigned kernel, shim or GRUB is named by its key; nothing is
    /// asked of pools without the key.
    #[test]
    fn a_secure_boot_pools_unsigned_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::create_dir_all(p.join("demo")).unwrap();
        std::fs::write(p.join("demo/vmlinuz"), b"not a PE image").unwrap();
        std::fs::write(p.join("shim.efi"), efi_image(2048)).unwrap();
        std::fs::write(p.join("grub.efi"), efi_image(0)).unwrap();
        let text = format!(
            "server: {{ address: 10.77.0.1, shim: {d}/shim.efi, grub: {d}/grub.efi }}\n\
             dhcp: {{ subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.199 }}\n\
             images:\n  demo: {{ dir: {d}/demo }}\n\
             pools:\n  room:\n    image: demo\n    secure_boot: true\n",
            d = p.display()
        );
        let config = p.join("pools.yaml");
        std::fs::write(&config, &text).unwrap();
        let c = Config::load(&config).unwrap();
        let errors: Vec<String> = unsigned(&c).iter().map(|e| e.to_string()).collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].contains("server.grub") && errors[0].contains("no Authenticode signature"),
            "{errors:?}"
        );
        assert!(
            errors[1].contains("images.demo.kernel") && errors[1].contains("is no EFI image"),
            "{errors:?}"
        );
        std::fs::write(&config, text.replace("    secure_boot: true\n", "")).unwrap();
        assert!(unsigned(&Config::load(&config).unwrap()).is_empty());
    }

    /// A `secure_boot` pool's x64 clients boot its `arch.x64` kernel through shim: that one
    /// must be signed too; its ARM64 clients' kernel is not asked (they get no shim).
    #[test]
    fn a_secure_boot_pools_x64_kernel_is_checked_and_its_arm64_one_not() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        for image in ["demo", "x64", "arm"] {
            std::fs::create_dir_all(p.join(image)).unwrap();
        }
        std::fs::write(p.join("demo/vmlinuz"), efi_image(2048)).unwrap();
        std::fs::write(p.join("x64/vmlinuz"), efi_image(0)).unwrap();
        std::fs::write(p.join("arm/vmlinuz"), efi_image(0)).unwrap();
        std::fs::write(p.join("shim.efi"), efi_image(2048)).unwrap();
        std::fs::write(p.join("grub.efi"), efi_image(2048)).unwrap();
        let text = format!(
            "server: {{ address: 10.77.0.1, shim: {d}/shim.efi, grub: {d}/grub.efi }}\n\
             dhcp: {{ subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.199 }}\n\
             images:\n  demo: {{ dir: {d}/demo }}\n  x64: {{ dir: {d}/x64 }}\n  arm: {{ dir: {d}/arm }}\n\
             pools:\n  room:\n    image: demo\n    secure_boot: true\n\
             \x20   arch: {{ x64: {{ image: x64 }}, arm64: {{ image: arm }} }}\n",
            d = p.display()
        );
        let config = p.join("pools.yaml");
        std::fs::write(&config, &text).unwrap();
        let errors: Vec<String> = unsigned(&Config::load(&config).unwrap())
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("images.x64.kernel"), "{errors:?}");
    }
}

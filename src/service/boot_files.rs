//! Which file a boot-file name means, for TFTP and HTTP alike: the loaders folder's plain
//! names and each image's kernel and initrd (`IMAGE/KERNEL`, by the names pools.yaml gives
//! them: `vmlinuz` and `initrd.img` unless `images.NAME.kernel`/`initrd` say otherwise),
//! and the Secure Boot chain's `shimx64.efi` and `grubx64.efi` (`server.shim`, `server.grub`),
//! nothing else. A symlink is followed only while it stays inside its folder, so no name
//! reaches outside what is served.

use crate::boot::grub;
use crate::config::{Config, ConfigError, Image};
use crate::proto::tftp::err;
use crate::record::FileKind;
use std::path::{Path, PathBuf};

/// Why a name is not served: the code and text the client gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused(pub u16, pub &'static str);

/// Maps a requested name (`LOADER` or `IMAGE/FILE`) to a file and what it is, refusing anything but the loaders and the
/// images' boot files. Symlinks are followed only while they stay inside their folder.
pub fn resolve(config: &Config, name: &str) -> Result<(PathBuf, FileKind), Refused> {
    let bad = Refused(err::ACCESS, "access violation");
    if name.is_empty()
        || name.starts_with('/')
        || name.contains('\\')
        || name.split('/').any(|c| c.is_empty() || c.starts_with('.'))
    {
        return Err(bad);
    }
    let signed = |path: &Path, kind| {
        let folder = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        (folder, path.to_path_buf(), kind)
    };
    let (root, path, kind) = match name.split_once('/') {
        None if name == grub::SHIM => signed(&config.server.shim, FileKind::Shim),
        None if name == grub::GRUB => signed(&config.server.grub, FileKind::Grub),
        None => (
            config.server.loaders.clone(),
            config.server.loaders.join(name),
            FileKind::Loader,
        ),
        Some((image, file)) => {
            let image = config
                .images
                .get(image)
                .ok_or(Refused(err::NOT_FOUND, "file not found"))?;
            match image_file(image, file) {
                Some(FileKind::Kernel) => (image.dir.clone(), image.kernel(), FileKind::Kernel),
                Some(FileKind::Initrd) => (image.dir.clone(), image.initrd(), FileKind::Initrd),
                _ => return Err(bad),
            }
        }
    };
    match place(&root, &path) {
        Place::Inside(real) => Ok((real, kind)),
        Place::Missing => Err(Refused(err::NOT_FOUND, "file not found")),
        Place::Outside(real) => {
            static OUTSIDE_LOG: crate::service::bounds::LogLimit =
                crate::service::bounds::LogLimit::new();
            if let Some(suppressed) = OUTSIDE_LOG.allow() {
                tracing::warn!(file = %path.display(), target = %real.display(),
                    folder = %root.display(), suppressed,
                    "boot file not served: a symlink out of its folder (copy or hard-link the file into the folder)");
            }
            Err(Refused(err::NOT_FOUND, OUTSIDE))
        }
    }
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
/// `bootpool serve` refuse such a config (missing files are `Config::missing_files`' to tell).
pub fn unservable(config: &Config) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    let mut seen = Vec::new();
    for pool in config.pools.values() {
        let image = &pool.image;
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
        None => crate::boot::LOADERS.contains(&name) || [grub::SHIM, grub::GRUB].contains(&name),
        Some((image, file)) => config
            .images
            .get(image)
            .is_some_and(|image| image_file(image, file).is_some()),
    }
}

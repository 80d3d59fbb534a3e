//! Which file a boot-file name means, for TFTP and HTTP alike: the loaders folder's plain
//! names and each image's kernel and initrd (`IMAGE/KERNEL`, by the names pools.yaml gives
//! them: `vmlinuz` and `initrd.img` unless `images.NAME.kernel`/`initrd` say otherwise),
//! nothing else. A symlink is followed only while it stays inside its folder, so no name
//! reaches outside what is served.

use crate::config::{Config, ConfigError, Image};
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
    let (root, path, kind) = match name.split_once('/') {
        None => (
            config.server.loaders.clone(),
            config.server.loaders.join(name),
            FileKind::Loader,
        ),
        Some((image, file)) => {
            let image = config.images.get(image).ok_or(NotServed::Missing)?;
            match image_file(image, file) {
                Some(FileKind::Kernel) => (image.dir.clone(), image.kernel(), FileKind::Kernel),
                Some(FileKind::Initrd) => (image.dir.clone(), image.initrd(), FileKind::Initrd),
                _ => return Err(NotServed::Denied),
            }
        }
    };
    match place(&root, &path) {
        Place::Inside(real) => Ok((real, kind)),
        Place::Missing => Err(NotServed::Missing),
        Place::Outside(real) => Err(NotServed::Outside {
            file: path,
            target: real,
            folder: root,
        }),
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
        None => crate::boot::LOADERS.contains(&name),
        Some((image, file)) => config
            .images
            .get(image)
            .is_some_and(|image| image_file(image, file).is_some()),
    }
}

//! Which file a boot-file name means, for TFTP and HTTP alike: the loaders folder's plain
//! names and each image's kernel and initrd (`IMAGE/KERNEL`, by the names pools.yaml gives
//! them: `vmlinuz` and `initrd.img` unless `images.NAME.kernel`/`initrd` say otherwise),
//! nothing else. A symlink is followed only while it stays inside its folder, so no name
//! reaches outside what is served.

use crate::config::{Config, Image};
use crate::proto::tftp::err;
use crate::record::FileKind;
use std::path::PathBuf;

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
    let (root, path, kind) = match name.split_once('/') {
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
    let found = Refused(err::NOT_FOUND, "file not found");
    let real = path.canonicalize().map_err(|_| found)?;
    let root = root.canonicalize().map_err(|_| found)?;
    if !real.starts_with(&root) {
        return Err(bad);
    }
    Ok((real, kind))
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

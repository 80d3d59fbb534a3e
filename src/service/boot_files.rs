//! Which file a boot-file name means, for TFTP and HTTP alike: the loaders folder's plain
//! names and each image's `vmlinuz` and `initrd.img`, nothing else. A symlink is followed only
//! while it stays inside its folder, so no name reaches outside what is served.

use crate::config::Config;
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
    let parts: Vec<&str> = name.split('/').collect();
    let (root, path, kind) = match parts.as_slice() {
        [loader] => (
            config.server.loaders.clone(),
            config.server.loaders.join(loader),
            FileKind::Loader,
        ),
        [image, file] => {
            let image = config
                .images
                .get(*image)
                .ok_or(Refused(err::NOT_FOUND, "file not found"))?;
            match *file {
                "vmlinuz" => (image.dir.clone(), image.kernel(), FileKind::Kernel),
                "initrd.img" => (image.dir.clone(), image.initrd(), FileKind::Initrd),
                _ => return Err(bad),
            }
        }
        _ => return Err(bad),
    };
    let found = Refused(err::NOT_FOUND, "file not found");
    let real = path.canonicalize().map_err(|_| found)?;
    let root = root.canonicalize().map_err(|_| found)?;
    if !real.starts_with(&root) {
        return Err(bad);
    }
    Ok((real, kind))
}

/// Is `name` a file bootpool tells clients to fetch?
pub fn handed_out(config: &Config, name: &str) -> bool {
    match name.split('/').collect::<Vec<_>>().as_slice() {
        [loader] => crate::boot::LOADERS.contains(loader),
        [image, file] => {
            config.images.contains_key(*image) && ["vmlinuz", "initrd.img"].contains(file)
        }
        _ => false,
    }
}

//! Read-only block images for NBD: which images are exported, opening an image's `rootfs.img`,
//! its size and positional reads. The only code that opens image files for NBD.
//!
//! Exports are named after images. Every configured image whose `rootfs.img` exists is
//! exported (so an admin can try an image over NBD before a pool uses it); the images of pools
//! with `root: nbd` are always among them because `Config::missing_files` refuses to start
//! without their `rootfs.img`. The empty name (NBD's "default export") means the only export
//! when there is exactly one, and nothing otherwise.

use crate::config::{Config, Image};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// An open image file. Opened per attach, so an image replaced by rename reaches new clients
/// while attached clients keep the file they started with.
#[derive(Debug)]
pub struct BlockImage {
    name: String,
    file: File,
    size: u64,
}

impl BlockImage {
    /// Opens `image`'s `rootfs.img` read-only; refuses anything but a regular file.
    pub fn open(image: &Image) -> io::Result<BlockImage> {
        let path = image.root_image();
        let file = File::open(&path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", path.display()),
            ));
        }
        Ok(BlockImage {
            name: image.name.clone(),
            file,
            size: meta.len(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Size in bytes, as of opening.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Fills `buf` from `offset`. A file that shrank under us gives `UnexpectedEof`, never
    /// short data.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|end| end > self.size) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "read past the end of the image",
            ));
        }
        self.file.read_exact_at(buf, offset)
    }
}

/// The names exported, sorted.
pub fn export_names(config: &Config) -> Vec<String> {
    config
        .images
        .values()
        .filter(|i| i.root_image().is_file())
        .map(|i| i.name.clone())
        .collect()
}

/// The image a client's export name selects, if it is exported.
pub fn lookup(config: &Config, name: &str) -> Option<Arc<Image>> {
    let image = if name.is_empty() {
        let names = export_names(config);
        match names.as_slice() {
            [only] => config.images.get(only)?,
            _ => return None,
        }
    } else {
        config.images.get(name)?
    };
    image.root_image().is_file().then(|| image.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Store;

    fn image(dir: &std::path::Path, name: &str) -> Image {
        Image {
            name: name.into(),
            dir: dir.to_path_buf(),
            store: Store::Disk,
            cow: None,
        }
    }

    #[test]
    fn reads_are_positional_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        std::fs::write(dir.path().join("rootfs.img"), &bytes).unwrap();
        let img = BlockImage::open(&image(dir.path(), "x")).unwrap();
        assert_eq!(img.size(), bytes.len() as u64);
        let mut buf = vec![0; 1000];
        img.read_at(&mut buf, 4321).unwrap();
        assert_eq!(buf, bytes[4321..5321]);
        assert!(img.read_at(&mut buf, 9500).is_err());
        assert!(img.read_at(&mut buf, u64::MAX - 10).is_err());
        let mut empty = [];
        img.read_at(&mut empty, bytes.len() as u64).unwrap();
    }

    #[test]
    fn a_missing_or_non_regular_image_does_not_open() {
        let dir = tempfile::tempdir().unwrap();
        assert!(BlockImage::open(&image(dir.path(), "x")).is_err());
        std::fs::create_dir(dir.path().join("rootfs.img")).unwrap();
        assert!(BlockImage::open(&image(dir.path(), "x")).is_err());
    }
}

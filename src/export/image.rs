//! Read-only block images for NBD: which images are exported, opening an image's root image
//! (`rootfs.img` unless `images.NAME.root_image` names another file), loading it into memory
//! for `store: ram` (with a progress bar when stderr is a terminal), its size and positional
//! reads. The only code that opens image files for NBD.
//!
//! Exports are named by `images.NAME.nbd_export`, the image's name by default. Every configured
//! image whose root image exists is exported (so an admin can try an image over NBD before a
//! pool uses it); the images of pools with `root: nbd` are always among them because
//! `image::serve::missing_files` refuses to start without their root image. The empty name (NBD's
//! "default export") means the only export when there is exactly one, and nothing otherwise.

use crate::config::{Config, Image, Store};
use crate::export::lock;
use crate::export::mapping::{MappedRange, Mapping};
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd as _;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Positional reads of a fixed-size byte range: what a copy-on-write overlay reads through to.
pub trait ReadAt {
    fn size(&self) -> u64;
    /// Fills `buf` from `offset`; a range past the end is an error, never short data.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

/// An open image: a file (`store: disk`), opened per attach, so an image replaced by rename
/// reaches new clients while attached clients keep the file they started with; or the bytes
/// loaded at start (`store: ram`), shared by every client.
#[derive(Debug)]
pub struct BlockImage {
    name: String,
    data: Data,
    size: u64,
}

#[derive(Debug)]
enum Data {
    /// The file, and its mapping to send cached ranges from (None if it could not be mapped).
    File(Option<Arc<Mapping>>, File),
    Ram(Arc<Vec<u8>>),
}

impl BlockImage {
    /// Opens `image`'s `rootfs.img` read-only, mapped to send from (see `cached_range`);
    /// refuses anything but a regular file.
    pub fn open(image: &Image) -> io::Result<BlockImage> {
        let (file, meta) = open_regular(image)?;
        Ok(BlockImage {
            name: image.nbd_export.clone(),
            data: Data::File(Mapping::of(&image.root_image(), &file, &meta), file),
            size: meta.len(),
        })
    }

    /// An image served from bytes already in memory (see `load`).
    pub fn in_memory(name: &str, bytes: Arc<Vec<u8>>) -> BlockImage {
        BlockImage {
            name: name.to_string(),
            size: bytes.len() as u64,
            data: Data::Ram(bytes),
        }
    }

    /// Fills `buf` from `offset` only if that cannot block: from memory, or from a file when
    /// every byte is in the page cache (`preadv2` with `RWF_NOWAIT`). `None` means "would
    /// block": read with `read_at` on a thread that may wait.
    pub fn read_now(&self, buf: &mut [u8], offset: u64) -> Option<io::Result<()>> {
        let file = match &self.data {
            Data::Ram(_) => return Some(self.read_at(buf, offset)),
            Data::File(_, f) => f,
        };
        if offset
            .checked_add(buf.len() as u64)
            .is_none_or(|e| e > self.size)
        {
            return Some(self.read_at(buf, offset));
        }
        let n = crate::sys::fs::pread_nowait(file.as_fd(), buf, offset);
        // Short (partly cached), EAGAIN, or a kernel without RWF_NOWAIT: take the slow path.
        matches!(n, Ok(n) if n == buf.len()).then_some(Ok(()))
    }

    /// `len` bytes at `offset` in the file's mapping, when all of them are in the page cache:
    /// a socket write from there copies them once (see `mapping`). None for `store: ram`.
    pub fn cached_range(&self, offset: u64, len: usize) -> Option<MappedRange<'_>> {
        match &self.data {
            Data::File(Some(m), _) => m.cached(offset, len),
            _ => None,
        }
    }

    /// The bytes of a `store: ram` image, to send ranges of without copying them.
    pub fn ram(&self) -> Option<&Arc<Vec<u8>>> {
        match &self.data {
            Data::Ram(b) => Some(b),
            Data::File(..) => None,
        }
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
        match &self.data {
            Data::File(_, f) => f.read_exact_at(buf, offset),
            Data::Ram(b) => {
                buf.copy_from_slice(&b[offset as usize..][..buf.len()]);
                Ok(())
            }
        }
    }
}

impl ReadAt for BlockImage {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        BlockImage::read_at(self, buf, offset)
    }
}

/// Plain bytes as a base, for tests and small images.
impl ReadAt for Vec<u8> {
    fn size(&self) -> u64 {
        self.len() as u64
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|end| end > self.len() as u64) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "read past the end",
            ));
        }
        buf.copy_from_slice(&self[offset as usize..][..buf.len()]);
        Ok(())
    }
}

/// Chunk of a `load`: large enough for sequential speed, small enough for a live progress bar.
const LOAD_CHUNK: usize = 8 << 20;

/// `image`'s `rootfs.img` opened read-only, with its metadata; anything but a regular file is
/// refused.
fn open_regular(image: &Image) -> io::Result<(File, std::fs::Metadata)> {
    let path = image.root_image();
    let file = File::open(&path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok((file, meta))
}

/// Reads `image`'s `rootfs.img` whole into memory (`store: ram`), calling `progress(done,
/// total)` after each chunk.
pub fn load(image: &Image, progress: &mut dyn FnMut(u64, u64)) -> io::Result<Arc<Vec<u8>>> {
    let (file, meta) = open_regular(image)?;
    let total = meta.len();
    let len = usize::try_from(total).map_err(|_| io::Error::other("image too large for memory"))?;
    // Zeroed pages come lazily from the kernel, so this costs nothing until filled.
    let mut bytes = vec![0u8; len];
    let mut done = 0usize;
    while done < len {
        let n = LOAD_CHUNK.min(len - done);
        file.read_exact_at(&mut bytes[done..done + n], done as u64)?;
        done += n;
        progress(done as u64, total);
    }
    Ok(Arc::new(bytes))
}

/// The `store: ram` images held in memory, by export name (each image revision is an export
/// of its own): the exported ones loaded at start (`load`), a revision learned since at its
/// first attach (`get`, which waits for the load, as does any attach of it meanwhile), and
/// dropped once its file is gone (`drop_removed`: a revision pruned).
#[derive(Default)]
pub struct RamImages {
    held: Mutex<HashMap<String, Arc<RamSlot>>>,
}

/// One export's bytes once loaded; its lock is held while they load.
type RamSlot = Mutex<Option<Arc<Vec<u8>>>>;

impl RamImages {
    /// Loads each exported `store: ram` image, with a progress bar when stderr is a terminal.
    pub fn load(config: &Config) -> io::Result<RamImages> {
        let ram = RamImages::default();
        for img in exported(config) {
            if img.store == Store::Ram {
                ram.get(&img)?;
            }
        }
        Ok(ram)
    }

    /// `image`'s bytes if they are in memory already; never waits for a load.
    pub fn loaded(&self, image: &Image) -> Option<Arc<Vec<u8>>> {
        let slot = lock(&self.held).get(&image.nbd_export)?.clone();
        slot.try_lock().ok()?.clone()
    }

    /// `image`'s bytes, loaded now if they are not in memory yet (blocking).
    pub fn get(&self, image: &Image) -> io::Result<Arc<Vec<u8>>> {
        let slot = lock(&self.held)
            .entry(image.nbd_export.clone())
            .or_default()
            .clone();
        let mut slot = lock(&slot);
        if let Some(bytes) = &*slot {
            return Ok(bytes.clone());
        }
        let started = Instant::now();
        let mut bar = Progress::new(&image.nbd_export);
        let bytes = load(image, &mut |done, total| bar.show(done, total))?;
        bar.finish();
        let secs = started.elapsed().as_secs_f64();
        tracing::info!(
            image = %image.nbd_export, mib = bytes.len() >> 20, secs,
            mib_per_s = (bytes.len() >> 20) as f64 / secs.max(1e-6),
            "nbd image loaded into memory"
        );
        *slot = Some(bytes.clone());
        Ok(bytes)
    }

    /// Export names held in memory, sorted.
    pub fn held(&self) -> Vec<String> {
        let mut names: Vec<String> = lock(&self.held).keys().cloned().collect();
        names.sort();
        names
    }

    /// Drops the images whose export is no longer on disk (blocking: looks at the files).
    /// Connections attached to one keep their copy until they end.
    pub fn drop_removed(&self, config: &Config) {
        let names = self.held();
        for name in names {
            if lookup(config, &name).is_none() {
                lock(&self.held).remove(&name);
                tracing::info!(image = %name, "nbd image removed from disk: dropped from memory");
            }
        }
    }
}

/// A one-line progress bar on stderr, drawn only when stderr is a terminal.
struct Progress {
    name: String,
    tty: bool,
    drawn: u64,
}

impl Progress {
    fn new(name: &str) -> Progress {
        Progress {
            name: name.to_string(),
            tty: io::stderr().is_terminal(),
            drawn: u64::MAX,
        }
    }

    fn show(&mut self, done: u64, total: u64) {
        const WIDTH: u64 = 40;
        let pct = (done * 100).checked_div(total).unwrap_or(100);
        if !self.tty || pct == self.drawn {
            return;
        }
        self.drawn = pct;
        let full = (pct * WIDTH / 100) as usize;
        let bar = format!("{}{}", "#".repeat(full), " ".repeat(WIDTH as usize - full));
        let mut e = io::stderr().lock();
        let _ = write!(
            e,
            "\rloading {} [{bar}] {pct:3}% {}/{} MiB",
            self.name,
            done >> 20,
            total >> 20
        );
        let _ = e.flush();
    }

    fn finish(&self) {
        if self.tty {
            eprintln!();
        }
    }
}

/// The images exported over NBD (those whose root image exists), by image name.
pub fn exported(config: &Config) -> Vec<Arc<Image>> {
    config
        .images
        .values()
        // An image with revisions is exported as its active revision (`NAME@ID`).
        .map(crate::image::serve::serving)
        .filter(|i| i.root_image().is_file())
        .collect()
}

/// The export names, in the order of their images' names.
pub fn export_names(config: &Config) -> Vec<String> {
    exported(config)
        .iter()
        .map(|i| i.nbd_export.clone())
        .collect()
}

/// The image a client's export name selects, if it is exported.
pub fn lookup(config: &Config, name: &str) -> Option<Arc<Image>> {
    // A root's wire copy, handed to a boot by `serve::for_boot`.
    if let Some(base) = name.strip_suffix(crate::config::names::ROOT_SUFFIX) {
        return crate::image::serve::wire_root(config, &*lookup(config, base)?);
    }
    let exported = exported(config);
    if name.is_empty() {
        return match exported.as_slice() {
            [only] => Some(only.clone()),
            _ => None,
        };
    }
    exported
        .into_iter()
        .find(|i| i.nbd_export == name)
        // Any revision on disk, active or not: a client keeps the one it was handed.
        .or_else(|| crate::image::serve::nbd_revision(config, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Store;

    fn image(dir: &std::path::Path, name: &str) -> Image {
        Image {
            name: name.into(),
            dir: dir.to_path_buf(),
            kernel_name: "vmlinuz".into(),
            initrd_name: "initrd.img".into(),
            root_tree_name: "rootfs".into(),
            root_image_name: "rootfs.img".into(),
            nfs_export: format!("/{name}"),
            nbd_export: name.into(),
            store: Store::Disk,
            cow: None,
            root_squash: false,
            secure_ports: true,
            initrd_wire: Default::default(),
            root_wire: Default::default(),
            blocks: None,
            blocks_elsewhere: Vec::new(),
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
        // Just written, so cached: the non-blocking read succeeds with the same bytes.
        let mut now = vec![0; 1000];
        if let Some(r) = img.read_now(&mut now, 4321) {
            r.unwrap();
            assert_eq!(now, buf);
        }
        assert!(matches!(img.read_now(&mut now, 9500), Some(Err(_))));
        assert!(img.read_at(&mut buf, 9500).is_err());
        assert!(img.read_at(&mut buf, u64::MAX - 10).is_err());
        let mut empty = [];
        img.read_at(&mut empty, bytes.len() as u64).unwrap();
    }

    #[test]
    fn a_loaded_image_reads_like_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = (0..(LOAD_CHUNK + 5000) as u32)
            .map(|i| (i * 13) as u8)
            .collect();
        std::fs::write(dir.path().join("rootfs.img"), &bytes).unwrap();
        let mut calls = Vec::new();
        let loaded = load(&image(dir.path(), "x"), &mut |d, t| calls.push((d, t))).unwrap();
        let n = bytes.len() as u64;
        assert_eq!(calls, [(LOAD_CHUNK as u64, n), (n, n)]);
        let img = BlockImage::in_memory("x", loaded);
        let mut now = vec![0; 100];
        img.read_now(&mut now, 7).unwrap().unwrap();
        assert_eq!(now, bytes[7..107]);
        assert_eq!(img.size(), n);
        let mut buf = vec![0; 1000];
        img.read_at(&mut buf, LOAD_CHUNK as u64 - 10).unwrap();
        assert_eq!(buf, bytes[LOAD_CHUNK - 10..][..1000]);
        assert!(img.read_at(&mut buf, n - 999).is_err());
        assert!(img.read_at(&mut buf, u64::MAX - 10).is_err());
    }

    #[test]
    fn a_missing_or_non_regular_image_does_not_open() {
        let dir = tempfile::tempdir().unwrap();
        assert!(BlockImage::open(&image(dir.path(), "x")).is_err());
        std::fs::create_dir(dir.path().join("rootfs.img")).unwrap();
        assert!(BlockImage::open(&image(dir.path(), "x")).is_err());
    }

    /// A `store: ram` image is held once loaded (at start or at its first attach), and let go
    /// once its file is gone.
    #[test]
    fn ram_images_are_loaded_once_and_dropped_when_their_file_goes() {
        let dir = tempfile::tempdir().unwrap();
        let demo = dir.path().join("images/demo");
        std::fs::create_dir_all(&demo).unwrap();
        let bytes: Vec<u8> = (0..70_000u32).map(|i| (i * 13) as u8).collect();
        std::fs::write(demo.join("rootfs.img"), &bytes).unwrap();
        let text = "server:\n  interfaces: [br0]\n  address: 10.77.0.1\n  http: 0.0.0.0:8080\n  \
            state_dir: var/\ndhcp:\n  mode: authoritative\n  subnet: 10.77.0.0/24\n  \
            range: 10.77.0.100-10.77.0.199\n  lease: 1h\nimages:\n  \
            demo: { dir: images/demo, store: ram }\npools:\n  room:\n    image: demo\n    \
            root: nbd\n    cmdline: console=ttyS0\n    clients:\n      \
            - { mac: \"52:54:00:77:00:01\" }\n";
        let config = Config::parse(&dir.path().join("pools.yaml"), text).unwrap();
        let ram = RamImages::load(&config).unwrap();
        assert_eq!(ram.held(), ["demo"]);
        let image = &config.images["demo"];
        assert_eq!(*ram.loaded(image).unwrap(), bytes);
        // In memory: the file may change, the bytes served do not.
        std::fs::write(demo.join("rootfs.img"), b"other").unwrap();
        assert_eq!(*ram.get(image).unwrap(), bytes);
        ram.drop_removed(&config);
        assert_eq!(ram.held(), ["demo"]);
        std::fs::remove_file(demo.join("rootfs.img")).unwrap();
        ram.drop_removed(&config);
        assert!(ram.held().is_empty());
        assert!(ram.loaded(image).is_none());
    }
}

//! The read-only trees served over NFS: one per image with `root: nfs`, under a composite root
//! that only names them (`/demo` is the `rootfs/` folder of image `demo`). This is the only code
//! that turns client-supplied names into paths: a name is one component, `..` never climbs above
//! an image's root, and symlinks are handed to the client, never followed here, but in a MOUNT
//! path (`lookup.rs`, as rpc.mountd resolves one), and there only while they stay inside the
//! image.
//!
//! File handles are `image id + st_dev + st_ino`, nothing from a start-up counter, so a handle
//! given out before a restart still resolves afterwards: a handle we have not met yet triggers
//! one walk of its image to find the inode again.
//!
//! Speed: NFS is round-trip bound, so every answer should come from memory. Attributes are
//! cached per inode and re-checked with one lstat when older than `FRESH` (an admin may update
//! an image in place); directory listings are cached with every child's attributes and dropped
//! when the directory's mtime changes, and so are names looked up outside a listing (found or
//! not); files under `SMALL_FILE` are kept mapped by inode (their descriptor closed, as many
//! as a share of the mapping limit) and larger ones open (a share of the descriptor limit),
//! both evicted by second chance; and files are stat'ed and opened relative to the image's
//! opened root, so the kernel walks only the path inside it.
//! `store: ram` loads all metadata and the files up to `RAM_FILE_MAX` at start and then never
//! touches the disk for them: a snapshot, as the config promises.
//!
//! Everything here is synchronous and quick when cached; the NFS service calls it from its
//! connection tasks (through `block_in_place` on a multi-threaded runtime).
//!
//! The rooms: `handle.rs` (the handle and its wire form), `lookup.rs` (handles and names to
//! inodes, MOUNT), `read.rs` (READ, READLINK), `listing.rs` (READDIR(PLUS) listings and their
//! refresh), `ram.rs` (`store: ram` loading), `attr.rs` (attributes from lstat, FSSTAT),
//! `cache.rs` (the bounded caches), `at.rs` (stats and opens relative to an image's opened
//! root). This file holds the tuning constants, the status codes and the tree itself.

mod at;
mod attr;
mod cache;
mod handle;
mod listing;
mod lookup;
mod ram;
mod read;

pub use attr::{NF3BLK, NF3CHR, NF3DIR, NF3FIFO, NF3LNK, NF3REG, NF3SOCK, attr_from};
pub use handle::{TreeHandle, WIRE_LEN};
pub use listing::{Entries, Listing};
pub use lookup::Node;
pub use read::MappedRead;

use crate::export::lock;
use crate::export::mapping::Mapping;
use crate::proto::nfs3::Error;
use cache::{Clock, Named, OpenFile, file_cache_size, small_map_cache_size};
use handle::{ROOT, stable_hash};
use lookup::Known;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// Largest READ answered; matches the `rtmax` we advertise.
pub const MAX_READ: u32 = 1 << 20;
/// A handle we cannot place makes us re-walk its image at most this often.
const REWALK_EVERY: Duration = Duration::from_secs(30);
/// Cached attributes older than this are checked against the disk again (like a client's
/// attribute cache, but ours is one lstat, not a round trip).
const FRESH: Duration = Duration::from_secs(1);
/// A listing is rebuilt (its children stat'ed again) after this long even if its mtime did
/// not change, which bounds how stale READDIRPLUS attributes can be: they come from the
/// listing, not from one lstat per entry per page (that was most of a listing's CPU).
const LISTING_FRESH: Duration = Duration::from_secs(30);
/// A listing read within `KEEP_FRESH` is rebuilt in the background at this age
/// (`keep_listings_fresh`), so that the rebuild, about 7 µs per entry, is not paid by a client
/// waiting for its page.
const LISTING_REFRESH: Duration = Duration::from_secs(20);
/// How long after its last READDIR a listing is kept fresh: a room boots over minutes, and
/// clients that start late (or boot again) find the listings the first ones asked for ready.
/// Past it a listing is rebuilt only when read again.
const KEEP_FRESH: Duration = Duration::from_secs(300);
/// How often the background thread looks for listings due a rebuild.
const REFRESH_SWEEP: Duration = Duration::from_secs(1);
/// Directory listings kept; a boot touches a few hundred directories.
const DIR_CACHE: usize = 4096;
/// Names looked up outside cached listings, kept (found or not: a booting client probes
/// many names that do not exist, e.g. the library paths the dynamic loader tries).
const NAME_CACHE: usize = 65_536;
/// Open files kept: this share of the descriptor limit, within these bounds.
const FILE_CACHE_SHARE: usize = 2;
/// Small files kept mapped: this share of the mapping limit (same bounds).
const SMALL_MAP_SHARE: usize = 2;
/// Files smaller than this are read from a mapping kept without its descriptor (see
/// `Tree::small`); larger ones through a descriptor kept open.
pub const SMALL_FILE: u64 = 64 << 10;
/// A READ of a larger file goes out from its mapping only from this size up, and only when
/// the page cache holds its bytes.
const MAPPED_READ_MIN: usize = 64 << 10;
const FILE_CACHE_MIN: usize = 64;
const FILE_CACHE_MAX: usize = 65_536;
/// A walk stops after this many entries (an image is not a whole disk).
const WALK_LIMIT: usize = 5_000_000;
const NAME_MAX: usize = 255;
/// `store: ram` keeps the contents of files up to this size.
pub const RAM_FILE_MAX: u64 = 1 << 20;

/// Why a tree call failed: `proto::nfs3::Error`, which maps it to the wire.
pub type Status = Error;

struct ImageTree {
    name: String,
    /// The path clients mount it by (`/NAME` unless `images.NAME.nfs_export` says otherwise).
    export: String,
    /// Stable id of the image name; never 0 (0 marks the composite root).
    id: u64,
    root: PathBuf,
    /// `store: ram`: loaded into memory once (`load_ram` at start, `load_if_ram` at the first
    /// MOUNT of a revision learned since) and never re-checked after.
    store_ram: bool,
    /// Set once its load is done; until then it is served from disk.
    loaded: OnceLock<()>,
    /// `store: ram`: what its load took in, FSSTAT's answer for it (`Tree::fsstat`).
    held: OnceLock<crate::proto::nfs3::FsStat>,
    /// Its folder was removed (a pruned revision) and its contents dropped from memory.
    dropped: AtomicBool,
    last_walk: Mutex<Option<Instant>>,
    /// The root folder, opened: stats and opens go relative to it, so the kernel walks only
    /// the path inside the image. Checked against `root` when older than `FRESH` (an admin
    /// may put a new tree in its place).
    dir: Mutex<Option<OpenRoot>>,
}

impl ImageTree {
    fn new(export: String, name: String, root: PathBuf, store_ram: bool) -> ImageTree {
        ImageTree {
            id: stable_hash(&[name.as_bytes()]).max(1),
            name,
            export,
            root,
            store_ram,
            loaded: OnceLock::new(),
            held: OnceLock::new(),
            dropped: AtomicBool::new(false),
            last_walk: Mutex::new(None),
            dir: Mutex::new(None),
        }
    }

    /// Served from memory: attributes and listings are never checked against the disk.
    fn in_ram(&self) -> bool {
        self.loaded.get().is_some()
    }
}

/// An image root opened: descriptor, its (dev, ino), when it was last checked.
type OpenRoot = (Arc<OwnedFd>, (u64, u64), Instant);

/// The NFS filesystem: every image tree under one composite root.
pub struct Tree {
    /// Only ever added to (`add_export`: a revision learned at runtime), so indices stay.
    images: crate::export::slots::Slots<ImageTree>,
    known: RwLock<HashMap<TreeHandle, Known>>,
    listings: Mutex<HashMap<TreeHandle, Arc<Listing>>>,
    /// LOOKUP answers in folders with no listing cached, by (folder, name): a room of
    /// clients looking up the same names costs one lstat, not one each.
    names: Mutex<Clock<(TreeHandle, OsString), Named>>,
    /// Files read through a descriptor, open (for `pread`, and their mapping for big READs):
    /// those of `SMALL_FILE` and up, and small ones that cannot be mapped (empty ones).
    files: Mutex<Clock<TreeHandle, OpenFile>>,
    /// Files under `SMALL_FILE`, mapped, their descriptor closed: the descriptor limit
    /// (often only thousands) does not bound how many stay ready, a READ of one is a single
    /// `writev` of its reply from the page cache, and it needs no `pread`.
    small: Mutex<Clock<TreeHandle, Arc<Mapping>>>,
    /// `store: ram`: file contents.
    contents: RwLock<HashMap<TreeHandle, Arc<[u8]>>>,
}

fn read_lock<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|e| e.into_inner())
}
fn write_lock<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|e| e.into_inner())
}

impl Tree {
    /// `images`: (export name, tree folder) for every image exported over NFS, read from disk.
    pub fn new<I: IntoIterator<Item = (String, PathBuf)>>(images: I) -> Tree {
        Tree::with_store(images.into_iter().map(|(n, p)| (n, p, false)))
    }

    /// Like `new`, with `true` for images kept in RAM (call `load_ram` before serving).
    pub fn with_store<I: IntoIterator<Item = (String, PathBuf, bool)>>(images: I) -> Tree {
        Tree::with_exports(
            images
                .into_iter()
                .map(|(name, root, ram)| (format!("/{name}"), name, root, ram)),
        )
    }

    /// Like `with_store`, each image with the path clients mount it by: (export path, image
    /// name, tree folder, kept in RAM). Handles are stamped with the image's name, so they stay
    /// valid when its export path changes.
    pub fn with_exports<I: IntoIterator<Item = (String, String, PathBuf, bool)>>(
        images: I,
    ) -> Tree {
        let images = images
            .into_iter()
            .map(|(export, name, root, ram)| ImageTree::new(export, name, root, ram))
            .collect();
        Tree {
            images,
            known: RwLock::new(HashMap::new()),
            listings: Mutex::new(HashMap::new()),
            names: Mutex::new(Clock::new(NAME_CACHE)),
            files: Mutex::new(Clock::new(file_cache_size())),
            small: Mutex::new(Clock::new(small_map_cache_size())),
            contents: RwLock::new(HashMap::new()),
        }
    }

    /// Adds an image tree while the tree is served (an image revision imported after start,
    /// `image::serve`); with `ram`, it is loaded into memory at its first MOUNT (`load_if_ram`).
    /// Its index, or None when no more fit.
    pub fn add_export(
        &self,
        export: String,
        name: String,
        root: PathBuf,
        ram: bool,
    ) -> Option<usize> {
        self.images.push(ImageTree::new(export, name, root, ram))
    }

    /// Export paths, e.g. `["/demo"]`, in the order of the images.
    pub fn exports(&self) -> impl Iterator<Item = &str> {
        self.images.iter().map(|i| i.export.as_str())
    }

    pub fn image_name(&self, img: usize) -> &str {
        &self.images[img].name
    }

    pub fn root(&self) -> TreeHandle {
        ROOT
    }

    /// Which image a handle belongs to, without touching the disk (None: the composite root;
    /// Err: no image of ours).
    pub fn image_of(&self, h: &TreeHandle) -> Result<Option<usize>, Status> {
        if *h == ROOT {
            return Ok(None);
        }
        self.images
            .iter()
            .position(|i| i.id == h.image())
            .map(Some)
            .ok_or(Error::Stale)
    }
}

fn io_status(e: std::io::Error) -> Status {
    use std::io::ErrorKind::*;
    match e.kind() {
        NotFound => Error::NoEnt,
        PermissionDenied => Error::Acces,
        NotADirectory => Error::NotDir,
        IsADirectory => Error::IsDir,
        _ if e.raw_os_error() == Some(libc::ELOOP) => Error::Inval,
        _ => Error::Io,
    }
}

/// A client-supplied name must be one path component.
fn check_name(name: &[u8]) -> Result<&OsStr, Status> {
    if name.is_empty() {
        return Err(Error::NoEnt);
    }
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong);
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(Error::Acces);
    }
    Ok(OsStr::from_bytes(name))
}

#[cfg(test)]
mod tests;

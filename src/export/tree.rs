//! The read-only trees served over NFS: one per image with `root: nfs`, under a composite root
//! that only names them (`/demo` is the `rootfs/` folder of image `demo`). This is the only code
//! that turns client-supplied names into paths: a name is one component, `..` never climbs above
//! an image's root, and symlinks are handed to the client, never followed here.
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

use crate::export::mapping::{MappedRange, Mapping};
use crate::proto::nfs3::{Attr, PlusEntries};
use std::collections::{HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::IsTerminal as _;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant, SystemTime};

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

/// nfsstat3 values used here.
pub mod status {
    pub const NOENT: u32 = 2;
    pub const IO: u32 = 5;
    pub const ACCES: u32 = 13;
    pub const NOTDIR: u32 = 20;
    pub const ISDIR: u32 = 21;
    pub const INVAL: u32 = 22;
    pub const ROFS: u32 = 30;
    pub const NAMETOOLONG: u32 = 63;
    pub const STALE: u32 = 70;
    pub const BADHANDLE: u32 = 10001;
    pub const BAD_COOKIE: u32 = 10003;
}
pub type Status = u32;

/// Our part of an NFS handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TreeHandle([u8; HANDLE_LEN]);

/// Layout version byte, then image id, st_dev, st_ino (big-endian u64s).
const HANDLE_LEN: usize = 25;
const HANDLE_V1: u8 = 1;
/// On the wire a handle starts with generation 1 as 8 little-endian bytes: the layout that
/// nfs3_server gave our handles before we answered NFS ourselves, kept so that clients
/// mounted across the upgrade keep working.
const WIRE_PREFIX: [u8; 8] = 1u64.to_le_bytes();
pub const WIRE_LEN: usize = 8 + HANDLE_LEN;
/// The composite root: all zeros but the version byte.
const ROOT: TreeHandle = TreeHandle([
    HANDLE_V1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
]);

impl TreeHandle {
    fn new(image: u64, dev: u64, ino: u64) -> TreeHandle {
        let mut b = [0u8; HANDLE_LEN];
        b[0] = HANDLE_V1;
        b[1..9].copy_from_slice(&image.to_be_bytes());
        b[9..17].copy_from_slice(&dev.to_be_bytes());
        b[17..25].copy_from_slice(&ino.to_be_bytes());
        TreeHandle(b)
    }
    fn image(&self) -> u64 {
        u64::from_be_bytes(self.0[1..9].try_into().unwrap_or_default())
    }
    fn key(&self) -> (u64, u64) {
        (
            u64::from_be_bytes(self.0[9..17].try_into().unwrap_or_default()),
            u64::from_be_bytes(self.0[17..25].try_into().unwrap_or_default()),
        )
    }
    /// The bytes a client holds.
    pub fn wire(&self) -> [u8; WIRE_LEN] {
        let mut w = [0u8; WIRE_LEN];
        w[..8].copy_from_slice(&WIRE_PREFIX);
        w[8..].copy_from_slice(&self.0);
        w
    }
    /// A handle a client sent; BADHANDLE if it is not one of ours.
    pub fn from_wire(b: &[u8]) -> Result<TreeHandle, Status> {
        let b: &[u8; WIRE_LEN] = b.try_into().map_err(|_| status::BADHANDLE)?;
        if b[..8] != WIRE_PREFIX || b[8] != HANDLE_V1 {
            return Err(status::BADHANDLE);
        }
        let mut h = [0u8; HANDLE_LEN];
        h.copy_from_slice(&b[8..]);
        Ok(TreeHandle(h))
    }
}

/// FNV-1a: a hash that stays the same across builds and Rust versions (handles outlive us).
fn stable_hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

struct ImageTree {
    name: String,
    /// The path clients mount it by (`/NAME` unless `images.NAME.nfs_export` says otherwise).
    export: String,
    /// Stable id of the image name; never 0 (0 marks the composite root).
    id: u64,
    root: PathBuf,
    /// Loaded at start and never re-checked.
    ram: bool,
    last_walk: Mutex<Option<Instant>>,
    /// The root folder, opened: stats and opens go relative to it, so the kernel walks only
    /// the path inside the image. Checked against `root` when older than `FRESH` (an admin
    /// may put a new tree in its place).
    dir: Mutex<Option<OpenRoot>>,
}

/// An image root opened: descriptor, its (dev, ino), when it was last checked.
type OpenRoot = (Arc<OwnedFd>, (u64, u64), Instant);

/// Values by key, up to `cap`. A full cache evicts by second chance (CLOCK): an entry
/// used since the hand last passed it stays, so a boot's hot files are not dropped with the
/// rest as they were when the cache was emptied whole.
struct Clock<K, V> {
    map: HashMap<K, Slot<V>>,
    /// The hand's order; may hold keys removed since (skipped).
    ring: VecDeque<K>,
    cap: usize,
}

struct Slot<V> {
    value: V,
    /// Used since the hand last passed.
    used: bool,
}

impl<K: std::hash::Hash + Eq + Clone, V> Clock<K, V> {
    fn new(cap: usize) -> Clock<K, V> {
        Clock {
            map: HashMap::new(),
            ring: VecDeque::new(),
            cap: cap.max(1),
        }
    }
    fn get(&mut self, h: &K) -> Option<&mut V> {
        let slot = self.map.get_mut(h)?;
        slot.used = true;
        Some(&mut slot.value)
    }
    /// Adds or replaces `h`'s value; returns what left the cache, to be dropped after the
    /// lock is let go (closing a file or unmapping one is a system call).
    fn insert(&mut self, h: K, value: V) -> Vec<V> {
        let slot = Slot { value, used: false };
        if let Some(old) = self.map.insert(h.clone(), slot) {
            return vec![old.value];
        }
        let mut gone = Vec::new();
        while self.map.len() > self.cap {
            let Some(old) = self.ring.pop_front() else {
                break;
            };
            match self.map.get_mut(&old) {
                Some(slot) if slot.used => {
                    slot.used = false;
                    self.ring.push_back(old);
                }
                Some(_) => gone.extend(self.map.remove(&old).map(|s| s.value)),
                None => {}
            }
        }
        self.ring.push_back(h);
        if self.ring.len() > 2 * self.cap {
            self.ring.retain(|h| self.map.contains_key(h));
        }
        gone
    }
    fn remove(&mut self, h: &K) -> Option<V> {
        self.map.remove(h).map(|s| s.value)
    }
}

/// A name looked up in a folder with no listing cached (see `Tree::names`).
#[derive(Clone, Copy)]
struct Named {
    /// The child's handle; None: no such name.
    child: Option<TreeHandle>,
    /// The folder's mtime then: names are added, removed and renamed only with a new one.
    dir_mtime: (u32, u32),
    at: Instant,
}

/// Whether a folder whose mtime is `mtime` may be cached: one changed within the last
/// second may change again within the same clock tick, which leaves its mtime as it is.
fn settled(mtime: (u32, u32)) -> bool {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    now > u64::from(mtime.0) + 1
}

/// A file kept open (see `Tree::files`).
struct OpenFile {
    file: Arc<File>,
    /// Made on the file's first big cached READ (see `Tree::read_mapped`), dropped with it.
    mapping: Option<Arc<Mapping>>,
}

/// How many files to keep open: a share of the process's descriptor limit.
fn file_cache_size() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: one valid rlimit to fill.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    };
    (soft / FILE_CACHE_SHARE).clamp(FILE_CACHE_MIN, FILE_CACHE_MAX)
}

/// How many small files to keep mapped: a share of the kernel's limit on a process's
/// mappings (`vm.max_map_count`, 65,530 unless raised), within these bounds.
fn small_map_cache_size() -> usize {
    let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(65_530);
    (limit / SMALL_MAP_SHARE).clamp(FILE_CACHE_MIN, FILE_CACHE_MAX)
}

fn c_path(rel: &Path) -> std::io::Result<std::ffi::CString> {
    std::ffi::CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

/// lstat of `rel` below the folder `dir` ("" is the folder itself).
fn stat_at(dir: &OwnedFd, rel: &Path) -> std::io::Result<libc::stat> {
    let c = c_path(rel)?;
    let mut flags = libc::AT_SYMLINK_NOFOLLOW;
    if c.is_empty() {
        flags |= libc::AT_EMPTY_PATH;
    }
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor, a NUL-terminated path and room for one stat.
    if unsafe { libc::fstatat(dir.as_raw_fd(), c.as_ptr(), st.as_mut_ptr(), flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fstatat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// Opens the regular file `rel` below the folder `dir` for reading, not following a symlink
/// in its last component.
fn open_at(dir: &OwnedFd, rel: &Path) -> std::io::Result<File> {
    let c = c_path(rel)?;
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: a valid descriptor and a NUL-terminated path.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: openat just returned this descriptor, owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

fn fstat(f: &File) -> std::io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor and room for one stat.
    if unsafe { libc::fstat(f.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// What we know of one inode.
#[derive(Clone)]
struct Known {
    /// Relative to the image root; "" for the root itself.
    rel: Arc<Path>,
    attr: Attr,
    checked: Instant,
}

/// A directory's children, sorted by name, so that a cookie (an index) means the same entry on
/// every page and a LOOKUP is a binary search.
pub struct Listing {
    mtime: (u32, u32),
    built: Instant,
    /// Last read by a READDIR(PLUS); carried over to its rebuilds (see `KEEP_FRESH`).
    used: Mutex<Instant>,
    /// The directory's `..` (the image root's is itself).
    parent: TreeHandle,
    pub children: Vec<(OsString, TreeHandle)>,
    /// Each child's attributes as the listing found them (in `children` order, in one array:
    /// a page reads them in sequence).
    attrs: Vec<Attr>,
    /// The children as READDIRPLUS entries, encoded by the NFS service on first use.
    pub plus: OnceLock<PlusEntries>,
}

impl Listing {
    fn new(
        mtime: (u32, u32),
        parent: TreeHandle,
        mut found: Vec<(OsString, TreeHandle, Attr)>,
    ) -> Listing {
        found.sort_by(|a, b| a.0.cmp(&b.0));
        let attrs = found.iter().map(|c| c.2).collect();
        Listing {
            mtime,
            built: Instant::now(),
            used: Mutex::new(Instant::now()),
            parent,
            children: found.into_iter().map(|(n, h, _)| (n, h)).collect(),
            attrs,
            plus: OnceLock::new(),
        }
    }
    /// Child `i`: name, handle and attributes, for encoding the listing.
    pub fn child(&self, i: usize) -> Option<(&[u8], TreeHandle, &Attr)> {
        let (name, h) = self.children.get(i)?;
        Some((name.as_bytes(), *h, &self.attrs[i]))
    }
}

/// A resolved handle.
#[derive(Clone)]
pub enum Node {
    Root,
    In {
        img: usize,
        rel: Arc<Path>,
        attr: Attr,
    },
}

impl Node {
    pub fn image(&self) -> Option<usize> {
        match self {
            Node::Root => None,
            Node::In { img, .. } => Some(*img),
        }
    }
}

/// The NFS filesystem: every image tree under one composite root.
pub struct Tree {
    /// Only ever added to (`add_export`: a revision learned at runtime), so indices stay.
    images: super::slots::Slots<ImageTree>,
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere must not take the export down with it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|e| e.into_inner())
}
fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
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
            .map(|(export, name, root, ram)| ImageTree {
                id: stable_hash(&[name.as_bytes()]).max(1),
                name,
                export,
                root,
                ram,
                last_walk: Mutex::new(None),
                dir: Mutex::new(None),
            })
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

    /// Adds an image tree read from disk while the tree is served (an image revision imported
    /// after start, `image::serve`); its index, or None when no more fit.
    pub fn add_export(&self, export: String, name: String, root: PathBuf) -> Option<usize> {
        self.images.push(ImageTree {
            id: stable_hash(&[name.as_bytes()]).max(1),
            name,
            export,
            root,
            ram: false,
            last_walk: Mutex::new(None),
            dir: Mutex::new(None),
        })
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
            .ok_or(status::STALE)
    }

    /// The image's root folder, opened (see `ImageTree::dir`); None if it cannot be.
    fn root_dir(&self, img: usize) -> Option<Arc<OwnedFd>> {
        let image = &self.images[img];
        let mut dir = lock(&image.dir);
        if let Some((fd, _, checked)) = dir.as_ref()
            && checked.elapsed() < FRESH
        {
            return Some(fd.clone());
        }
        let now = std::fs::metadata(&image.root)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        match (dir.as_mut(), now) {
            (Some((fd, key, checked)), Some(k)) if *key == k => {
                *checked = Instant::now();
                return Some(fd.clone());
            }
            _ => {}
        }
        let fd: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(&image.root)
            .ok()?
            .into();
        let st = stat_at(&fd, Path::new("")).ok()?;
        let fd = Arc::new(fd);
        *dir = Some((fd.clone(), (st.st_dev, st.st_ino), Instant::now()));
        Some(fd)
    }

    /// lstat of a path inside an image, relative to its opened root.
    fn lstat(&self, img: usize, rel: &Path) -> std::io::Result<libc::stat> {
        match self.root_dir(img) {
            Some(dir) => stat_at(&dir, rel),
            None => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
        }
    }

    fn full(&self, img: usize, rel: &Path) -> PathBuf {
        if rel.as_os_str().is_empty() {
            self.images[img].root.clone()
        } else {
            self.images[img].root.join(rel)
        }
    }

    fn remember(&self, img: usize, rel: Arc<Path>, m: &std::fs::Metadata) -> (TreeHandle, Attr) {
        let image = &self.images[img];
        let h = TreeHandle::new(image.id, m.dev(), m.ino());
        self.remember_attr(h, rel, attr_from(image.id, m))
    }

    fn remember_stat(&self, img: usize, rel: Arc<Path>, st: &libc::stat) -> (TreeHandle, Attr) {
        let image = &self.images[img];
        let h = TreeHandle::new(image.id, st.st_dev, st.st_ino);
        self.remember_attr(h, rel, attr_from_stat(image.id, st))
    }

    fn remember_attr(&self, h: TreeHandle, rel: Arc<Path>, attr: Attr) -> (TreeHandle, Attr) {
        write(&self.known).insert(
            h,
            Known {
                rel,
                attr,
                checked: Instant::now(),
            },
        );
        (h, attr)
    }

    /// Resolves a handle, from memory when its attributes are fresh; re-walks its image once
    /// if the inode is not known (after a restart). A path found is checked against the
    /// handle's dev/ino.
    pub fn resolve(&self, h: &TreeHandle) -> Result<Node, Status> {
        let Some(img) = self.image_of(h)? else {
            return Ok(Node::Root);
        };
        let ram = self.images[img].ram;
        for attempt in 0..2 {
            let known = read(&self.known).get(h).cloned();
            if let Some(k) = known {
                if ram || k.checked.elapsed() < FRESH {
                    return Ok(Node::In {
                        img,
                        rel: k.rel,
                        attr: k.attr,
                    });
                }
                match self.lstat(img, &k.rel) {
                    Ok(st) if (st.st_dev, st.st_ino) == h.key() => {
                        let (_, attr) = self.remember_stat(img, k.rel.clone(), &st);
                        return Ok(Node::In {
                            img,
                            rel: k.rel,
                            attr,
                        });
                    }
                    // Replaced or gone: forget it and look again.
                    _ => {
                        write(&self.known).remove(h);
                        let closed = lock(&self.files).remove(h);
                        let unmapped = lock(&self.small).remove(h);
                        drop((closed, unmapped));
                    }
                }
            }
            if attempt == 0 && !self.walk(img) {
                break;
            }
        }
        Err(status::STALE)
    }

    /// Attributes of an entry of a listing just handed out by `entries`: from memory as the
    /// listing left them (see `LISTING_FRESH`), from the disk only if unknown.
    pub fn entry_attr(&self, h: &TreeHandle) -> Result<Attr, Status> {
        if *h != ROOT
            && let Some(k) = read(&self.known).get(h)
        {
            return Ok(k.attr);
        }
        self.getattr(h)
    }

    pub fn getattr(&self, h: &TreeHandle) -> Result<Attr, Status> {
        Ok(match self.resolve(h)? {
            Node::Root => self.root_attr(),
            Node::In { attr, .. } => attr,
        })
    }

    /// Walks an image to learn every inode; false if one ran too recently.
    fn walk(&self, img: usize) -> bool {
        let image = &self.images[img];
        {
            let mut last = lock(&image.last_walk);
            if last.is_some_and(|t| t.elapsed() < REWALK_EVERY) {
                return false;
            }
            *last = Some(Instant::now());
        }
        let found = walk_tree(&image.root, |_| {});
        tracing::debug!(image = %image.name, inodes = found.len(), "walked image for handles");
        for (rel, m) in found {
            self.remember(img, rel.into(), &m);
        }
        true
    }

    pub fn lookup(&self, dir: &TreeHandle, name: &[u8]) -> Result<(TreeHandle, Attr), Status> {
        let name = check_name(name)?;
        match self.resolve(dir)? {
            Node::Root => {
                if name == "." || name == ".." {
                    return Ok((ROOT, self.root_attr()));
                }
                let img = self
                    .images
                    .iter()
                    .position(|i| OsStr::new(&i.name) == name)
                    .ok_or(status::NOENT)?;
                self.image_root(img)
            }
            Node::In { img, rel, attr } => {
                if attr.ftype != NF3DIR {
                    return Err(status::NOTDIR);
                }
                if name == "." {
                    return Ok((*dir, attr));
                }
                if name == ".." {
                    // `..` of an image root is the image root: a client never leaves it.
                    let parent: Arc<Path> = rel.parent().unwrap_or(Path::new("")).into();
                    return self.stat(img, parent);
                }
                // A cached listing answers without a syscall, "no such name" included.
                let listing = lock(&self.listings).get(dir).cloned();
                if let Some(l) = listing
                    && l.mtime == attr.mtime
                {
                    let i = l
                        .children
                        .binary_search_by(|(n, _)| n.as_os_str().cmp(name))
                        .map_err(|_| status::NOENT)?;
                    let h = l.children[i].1;
                    if let Ok(a) = self.getattr(&h) {
                        return Ok((h, a));
                    }
                }
                self.lookup_named(dir, img, &rel, attr.mtime, name)
            }
        }
    }

    /// LOOKUP of `name` in the folder `dir` (at `rel`, its mtime `dir_mtime`) with no listing
    /// cached: the answer kept in `names` while the folder has not changed, else an lstat,
    /// whose answer (found or not) is kept.
    fn lookup_named(
        &self,
        dir: &TreeHandle,
        img: usize,
        rel: &Path,
        dir_mtime: (u32, u32),
        name: &OsStr,
    ) -> Result<(TreeHandle, Attr), Status> {
        let key = (*dir, name.to_os_string());
        let named = lock(&self.names).get(&key).copied();
        if let Some(n) = named
            && n.dir_mtime == dir_mtime
            && n.at.elapsed() < LISTING_FRESH
        {
            match n.child {
                None => return Err(status::NOENT),
                Some(h) => {
                    if let Ok(a) = self.getattr(&h) {
                        return Ok((h, a));
                    }
                }
            }
        }
        let found = self.stat(img, rel.join(name).into());
        let child = match &found {
            Ok((h, _)) => Some(Some(*h)),
            Err(st) if *st == status::NOENT => Some(None),
            Err(_) => None,
        };
        if let Some(child) = child
            && settled(dir_mtime)
        {
            let named = Named {
                child,
                dir_mtime,
                at: Instant::now(),
            };
            lock(&self.names).insert(key, named);
        }
        found
    }

    fn image_root(&self, img: usize) -> Result<(TreeHandle, Attr), Status> {
        self.stat(img, Path::new("").into())
    }

    fn stat(&self, img: usize, rel: Arc<Path>) -> Result<(TreeHandle, Attr), Status> {
        let st = self.lstat(img, &rel).map_err(io_status)?;
        Ok(self.remember_stat(img, rel, &st))
    }

    /// MNT: the path starts with an image's export path (component by component), and may go
    /// on into its tree; the bare root is not mountable.
    pub fn mount(&self, path: &[u8]) -> Result<TreeHandle, Status> {
        let parts: Vec<&[u8]> = path
            .split(|b| *b == b'/')
            .filter(|c| !c.is_empty())
            .collect();
        let (img, depth) = self
            .images
            .iter()
            .enumerate()
            .find_map(|(i, im)| {
                let export: Vec<&[u8]> = im
                    .export
                    .as_bytes()
                    .split(|b| *b == b'/')
                    .filter(|c| !c.is_empty())
                    .collect();
                parts.starts_with(&export).then_some((i, export.len()))
            })
            .ok_or(status::NOENT)?;
        let (mut h, mut attr) = self.image_root(img)?;
        // `..` inside goes no higher than the image's root (`lookup`).
        for part in &parts[depth..] {
            (h, attr) = self.lookup(&h, part)?;
        }
        if attr.ftype == NF3DIR {
            Ok(h)
        } else {
            Err(status::NOTDIR)
        }
    }

    /// Appends up to `count` bytes at `offset` to `out`; returns the file's attributes and
    /// whether the read reached the end.
    pub fn read(
        &self,
        h: &TreeHandle,
        offset: u64,
        count: u32,
        out: &mut Vec<u8>,
    ) -> Result<(Attr, bool), Status> {
        let (attr, from) = self.readable(h)?;
        // Sized by the file, not by the request: clients ask for rsize even for tiny files,
        // and zeroing a 1 MiB buffer per small file costs more than the read.
        let count = read_len(&attr, offset, count as usize);
        let start = out.len();
        out.resize(start + count, 0);
        match from.fill(&mut out[start..], offset) {
            Ok(n) => {
                out.truncate(start + n);
                Ok((attr, offset.saturating_add(n as u64) >= attr.size))
            }
            Err(st) => {
                out.truncate(start);
                Err(st)
            }
        }
    }

    /// Like `read`, into the front of `buf` (up to its length): returns the attributes, the
    /// bytes read and whether the read reached the end.
    pub fn read_into(
        &self,
        h: &TreeHandle,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(Attr, usize, bool), Status> {
        let (attr, from) = self.readable(h)?;
        let count = read_len(&attr, offset, buf.len());
        let n = from.fill(&mut buf[..count], offset)?;
        Ok((attr, n, offset.saturating_add(n as u64) >= attr.size))
    }

    /// A READ answered from a mapping of the file (see `export::mapping`): the reply's data
    /// goes from the page cache to the socket in one copy, where reading into a buffer and
    /// sending that makes two. Files under `SMALL_FILE` are always read this way; a page
    /// of theirs not cached is read in by the write, on the connection's own thread. Larger
    /// files only for READs of `MAPPED_READ_MIN` and up whose bytes the page cache holds.
    /// None: read with `read`/`read_into` (a RAM image's file, bytes not cached, or a file
    /// that cannot be mapped).
    pub fn read_mapped(
        &self,
        h: &TreeHandle,
        offset: u64,
        count: usize,
    ) -> Result<Option<MappedRead>, Status> {
        let (img, rel, attr) = self.regular(h)?;
        if read(&self.contents).contains_key(h) {
            return Ok(None);
        }
        let len = read_len(&attr, offset, count);
        let end = offset + len as u64;
        // A READ at or past the end sends no data: any mapping of the file will do.
        let (from, needed) = if len == 0 { (0, 0) } else { (offset, end) };
        let mapping = if attr.size < SMALL_FILE {
            self.small_mapping(h, img, &rel, needed)?
        } else if len >= MAPPED_READ_MIN {
            self.open(h, img, &rel)?;
            self.big_mapping(h, end)
                .filter(|m| m.cached(offset, len).is_some())
        } else {
            None
        };
        Ok(mapping.map(|mapping| MappedRead {
            attr,
            eof: end >= attr.size,
            mapping,
            offset: from,
            len,
        }))
    }

    /// The kept mapping of a small file, made (the file opened, mapped and closed again) if
    /// there is none or it is shorter than `end` (the file grew). None if the file cannot be
    /// mapped, or is now shorter than `end`.
    fn small_mapping(
        &self,
        h: &TreeHandle,
        img: usize,
        rel: &Path,
        end: u64,
    ) -> Result<Option<Arc<Mapping>>, Status> {
        if let Some(m) = lock(&self.small).get(h)
            && m.len() as u64 >= end
        {
            return Ok(Some(m.clone()));
        }
        let (file, st) = self.open_checked(h, img, rel)?;
        let Some(m) = Mapping::whole(&file, &st) else {
            return Ok(None);
        };
        // The mapping keeps the bytes reachable; the descriptor is not needed any more.
        drop(file);
        let m = Arc::new(m);
        let unmapped = lock(&self.small).insert(*h, m.clone());
        drop(unmapped);
        Ok((m.len() as u64 >= end).then_some(m))
    }

    /// The mapping of an open big file, made if it has none or one shorter than `end` (the
    /// file grew); None if the file is not open here or cannot be mapped.
    fn big_mapping(&self, h: &TreeHandle, end: u64) -> Option<Arc<Mapping>> {
        let mut files = lock(&self.files);
        let open = files.get(h)?;
        match &open.mapping {
            Some(m) if m.len() as u64 >= end => {}
            _ => {
                let st = fstat(&open.file).ok()?;
                open.mapping = Mapping::whole(&open.file, &st).map(Arc::new);
            }
        }
        open.mapping.clone()
    }

    /// A regular file's image, path and attributes.
    fn regular(&self, h: &TreeHandle) -> Result<(usize, Arc<Path>, Attr), Status> {
        let Node::In { img, rel, attr } = self.resolve(h)? else {
            return Err(status::ISDIR);
        };
        match attr.ftype {
            NF3REG => Ok((img, rel, attr)),
            NF3DIR => Err(status::ISDIR),
            _ => Err(status::INVAL),
        }
    }

    /// A regular file's attributes and where its bytes are.
    fn readable(&self, h: &TreeHandle) -> Result<(Attr, Readable), Status> {
        let (img, rel, attr) = self.regular(h)?;
        if let Some(data) = read(&self.contents).get(h) {
            return Ok((attr, Readable::Ram(data.clone())));
        }
        Ok((attr, Readable::File(self.open(h, img, &rel)?)))
    }

    /// The file open in `files`, opened if it is not.
    fn open(&self, h: &TreeHandle, img: usize, rel: &Path) -> Result<Arc<File>, Status> {
        if let Some(open) = lock(&self.files).get(h) {
            return Ok(open.file.clone());
        }
        let (f, _) = self.open_checked(h, img, rel)?;
        let f = Arc::new(f);
        let open = OpenFile {
            file: f.clone(),
            mapping: None,
        };
        let evicted = lock(&self.files).insert(*h, open);
        // Closed here, not while others wait for the lock.
        drop(evicted);
        Ok(f)
    }

    /// Opens the file at `rel` and checks that it is still the one `h` names; returns it and
    /// its fstat, whose attributes are remembered (as fresh as they get: the next calls need
    /// no lstat).
    fn open_checked(
        &self,
        h: &TreeHandle,
        img: usize,
        rel: &Path,
    ) -> Result<(File, libc::stat), Status> {
        // O_NOFOLLOW: the last component must still be the file the handle names.
        let dir = self.root_dir(img).ok_or(status::STALE)?;
        let f = open_at(&dir, rel).map_err(io_status)?;
        let st = fstat(&f).map_err(io_status)?;
        if (st.st_dev, st.st_ino) != h.key() {
            return Err(status::STALE);
        }
        self.remember_stat(img, rel.into(), &st);
        Ok((f, st))
    }

    pub fn readlink(&self, h: &TreeHandle) -> Result<(Attr, Vec<u8>), Status> {
        match self.resolve(h)? {
            Node::In { img, rel, attr } if attr.ftype == NF3LNK => {
                let target = std::fs::read_link(self.full(img, &rel)).map_err(io_status)?;
                Ok((attr, target.into_os_string().into_vec()))
            }
            _ => Err(status::INVAL),
        }
    }

    /// The entries of a directory for READDIR(PLUS), `.` and `..` first: the directory's
    /// attributes, and (name, handle) pairs from `cookie` on (a cookie counts entries seen).
    pub fn entries(&self, dir: &TreeHandle, cookie: u64) -> Result<(Attr, Entries), Status> {
        let node = self.resolve(dir)?;
        let (attr, listing) = match &node {
            Node::Root => {
                let children = (0..self.images.len())
                    .filter_map(|i| {
                        let (h, a) = self.image_root(i).ok()?;
                        Some((OsString::from(&self.images[i].name), h, a))
                    })
                    .collect();
                (
                    self.root_attr(),
                    Arc::new(Listing::new((0, 0), ROOT, children)),
                )
            }
            Node::In { img, rel, attr } => {
                if attr.ftype != NF3DIR {
                    return Err(status::NOTDIR);
                }
                (*attr, self.listing(dir, *img, rel, attr)?)
            }
        };
        let parent = listing.parent;
        let start = usize::try_from(cookie).map_err(|_| status::BAD_COOKIE)?;
        if start > listing.children.len() + 2 {
            return Err(status::BAD_COOKIE);
        }
        Ok((
            attr,
            Entries {
                dir: *dir,
                parent,
                listing,
                next: start,
            },
        ))
    }

    fn listing(
        &self,
        dir: &TreeHandle,
        img: usize,
        rel: &Path,
        attr: &Attr,
    ) -> Result<Arc<Listing>, Status> {
        let ram = self.images[img].ram;
        if let Some(l) = lock(&self.listings).get(dir)
            && l.mtime == attr.mtime
        {
            if ram {
                return Ok(l.clone());
            }
            if l.built.elapsed() < LISTING_FRESH {
                *lock(&l.used) = Instant::now();
                return Ok(l.clone());
            }
        }
        self.build_listing(dir, img, rel, attr)
    }

    /// Reads folder `dir` (at `rel`, with attributes `attr`) and stats its children; keeps the
    /// listing unless the folder may still change within its mtime's clock tick.
    fn build_listing(
        &self,
        dir: &TreeHandle,
        img: usize,
        rel: &Path,
        attr: &Attr,
    ) -> Result<Arc<Listing>, Status> {
        let ram = self.images[img].ram;
        let up: Arc<Path> = rel.parent().unwrap_or(Path::new("")).into();
        let (parent, _) = self.stat(img, up)?;
        let mut children = Vec::new();
        for e in std::fs::read_dir(self.full(img, rel)).map_err(io_status)? {
            let e = e.map_err(io_status)?;
            // Gone since the listing was read: left out.
            let Ok(m) = e.metadata() else { continue };
            let name = e.file_name();
            let (h, a) = self.remember(img, rel.join(&name).into(), &m);
            children.push((name, h, a));
        }
        let l = Arc::new(Listing::new(attr.mtime, parent, children));
        if !ram && !settled(attr.mtime) {
            return Ok(l);
        }
        let mut cache = lock(&self.listings);
        if cache.len() >= DIR_CACHE {
            cache.clear();
        }
        cache.insert(*dir, l.clone());
        Ok(l)
    }

    /// Rebuilds listings due (see `KEEP_FRESH`) every `REFRESH_SWEEP`, until the tree is
    /// dropped: run on a thread of its own beside the service.
    pub fn keep_listings_fresh(tree: Weak<Tree>) {
        loop {
            std::thread::sleep(REFRESH_SWEEP);
            let Some(tree) = tree.upgrade() else { break };
            tree.refresh_listings();
        }
    }

    /// Rebuilds the cached listings of disk images that are `LISTING_REFRESH` old and were read
    /// within `KEEP_FRESH`; each rebuild keeps its predecessor's last use. A folder that
    /// changed meanwhile gets its new listing from the next request, as ever.
    fn refresh_listings(&self) {
        // A RAM image's listings never go stale: left out before anything is resolved.
        let on_disk =
            |h: &TreeHandle| matches!(self.image_of(h), Ok(Some(i)) if !self.images[i].ram);
        let due: Vec<(TreeHandle, Instant)> = lock(&self.listings)
            .iter()
            .filter(|(h, l)| l.built.elapsed() >= LISTING_REFRESH && on_disk(h))
            .map(|(h, l)| (*h, *lock(&l.used)))
            .filter(|(_, used)| used.elapsed() < KEEP_FRESH)
            .collect();
        for (dir, used) in due {
            if let Ok(Node::In { img, rel, attr }) = self.resolve(&dir)
                && attr.ftype == NF3DIR
                // Failures (the folder gone) are the next request's to report.
                && let Ok(l) = self.build_listing(&dir, img, &rel, &attr)
            {
                *lock(&l.used) = used;
            }
        }
    }

    /// Loads every `store: ram` image: all attributes and listings, and the contents of files
    /// up to `RAM_FILE_MAX`. Shows progress on a terminal; logs one line per image.
    pub fn load_ram(&self) {
        let tty = std::io::stderr().is_terminal();
        for (img, image) in self.images.iter().enumerate().filter(|(_, i)| i.ram) {
            let started = Instant::now();
            let (mut files, mut bytes) = (0u64, 0u64);
            let found = walk_tree(&image.root, |n| {
                if tty && n % 1000 == 0 {
                    eprint!("\rloading image {}: {n} entries", image.name);
                }
            });
            let entries = found.len();
            let mut dirs = Vec::new();
            for (i, (rel, m)) in found.into_iter().enumerate() {
                let rel: Arc<Path> = rel.into();
                let (h, attr) = self.remember(img, rel.clone(), &m);
                if attr.ftype == NF3DIR {
                    dirs.push((h, rel, attr));
                } else if attr.ftype == NF3REG
                    && m.len() <= RAM_FILE_MAX
                    && let Ok(data) = std::fs::read(self.full(img, &rel))
                {
                    files += 1;
                    bytes += data.len() as u64;
                    write(&self.contents).insert(h, data.into());
                }
                if tty && i % 1000 == 0 {
                    eprint!(
                        "\rloading image {}: {i}/{entries} entries, {} MiB",
                        image.name,
                        bytes >> 20
                    );
                }
            }
            for (h, rel, attr) in &dirs {
                let _ = self.listing(h, img, rel, attr);
            }
            if tty {
                eprintln!();
            }
            tracing::info!(
                image = %image.name, entries, dirs = dirs.len(), files, bytes,
                ms = started.elapsed().as_millis() as u64, "nfs image loaded into ram"
            );
        }
    }

    fn root_attr(&self) -> Attr {
        Attr {
            ftype: NF3DIR,
            mode: 0o555,
            nlink: 2 + self.images.len() as u32,
            size: 4096,
            used: 4096,
            fileid: 1,
            ..Attr::default()
        }
    }
}

/// A READDIR(PLUS) cursor: `.`, `..`, then the listing.
pub struct Entries {
    dir: TreeHandle,
    parent: TreeHandle,
    listing: Arc<Listing>,
    next: usize,
}

impl Entries {
    /// The entry the cursor is on: (cookie after it, name, handle, and the attributes the
    /// listing has for it: none for `.` and `..`); `next` moves on.
    pub fn peek(&self) -> Option<(u64, &[u8], TreeHandle, Option<&Attr>)> {
        let cookie = self.next as u64 + 1;
        match self.next {
            0 => Some((cookie, b".", self.dir, None)),
            1 => Some((cookie, b"..", self.parent, None)),
            i => self
                .listing
                .child(i - 2)
                .map(|(n, h, a)| (cookie, n, h, Some(a))),
        }
    }
    pub fn advance(&mut self) {
        self.next += 1;
    }
    /// The listing's child the cursor is on (None while on `.` or `..`).
    pub fn child_index(&self) -> Option<usize> {
        self.next.checked_sub(2)
    }
    /// Moves past `n` more children.
    pub fn skip(&mut self, n: usize) {
        self.next += n;
    }
    pub fn listing(&self) -> &Listing {
        &self.listing
    }
    /// The cookie of child `i` (what a client sends to resume after it).
    pub fn child_cookie(i: usize) -> u64 {
        i as u64 + 3
    }
    /// A verifier that changes when the directory does.
    pub fn verifier(&self) -> [u8; 8] {
        let (s, ns) = self.listing.mtime;
        ((u64::from(s) << 32) | u64::from(ns)).to_be_bytes()
    }
}

/// A READ's answer whose data is in a file's mapping (`Tree::read_mapped`).
pub struct MappedRead {
    pub attr: Attr,
    pub eof: bool,
    mapping: Arc<Mapping>,
    offset: u64,
    len: usize,
}

impl MappedRead {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The data, for `MappedRange::writev`.
    pub fn data(&self) -> MappedRange<'_> {
        self.mapping
            .range(self.offset, self.len)
            .expect("checked inside the mapping by read_mapped")
    }
}

/// Where a READ's bytes come from.
enum Readable {
    Ram(Arc<[u8]>),
    File(Arc<File>),
}

impl Readable {
    /// Fills `buf` from `offset` until it is full or the file ends; returns the bytes read.
    fn fill(&self, buf: &mut [u8], offset: u64) -> Result<usize, Status> {
        match self {
            Readable::Ram(data) => {
                let from = offset.min(data.len() as u64) as usize;
                let n = buf.len().min(data.len() - from);
                buf[..n].copy_from_slice(&data[from..from + n]);
                Ok(n)
            }
            Readable::File(file) => {
                let mut got = 0;
                while got < buf.len() {
                    match file.read_at(&mut buf[got..], offset + got as u64) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(io_status(e)),
                    }
                }
                Ok(got)
            }
        }
    }
}

/// How many bytes a READ of `count` at `offset` returns: at most `MAX_READ`, and never past
/// the end the attributes give.
fn read_len(attr: &Attr, offset: u64, count: usize) -> usize {
    (count.min(MAX_READ as usize) as u64).min(attr.size.saturating_sub(offset)) as usize
}

fn io_status(e: std::io::Error) -> Status {
    use std::io::ErrorKind::*;
    match e.kind() {
        NotFound => status::NOENT,
        PermissionDenied => status::ACCES,
        NotADirectory => status::NOTDIR,
        IsADirectory => status::ISDIR,
        _ if e.raw_os_error() == Some(libc::ELOOP) => status::INVAL,
        _ => status::IO,
    }
}

/// Every entry below `root` (the root itself last) with its lstat metadata; `progress` gets
/// the count so far.
fn walk_tree(root: &Path, mut progress: impl FnMut(usize)) -> Vec<(PathBuf, std::fs::Metadata)> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&rel)) else {
            continue;
        };
        for e in entries.flatten() {
            if out.len() >= WALK_LIMIT {
                return out;
            }
            let Ok(m) = e.metadata() else { continue };
            let child = rel.join(e.file_name());
            if m.is_dir() {
                stack.push(child.clone());
            }
            out.push((child, m));
            progress(out.len());
        }
    }
    if let Ok(m) = std::fs::symlink_metadata(root) {
        out.push((PathBuf::new(), m));
    }
    out
}

fn time(secs: i64, nsec: i64) -> (u32, u32) {
    (
        secs.clamp(0, u32::MAX as i64) as u32,
        nsec.clamp(0, 999_999_999) as u32,
    )
}

pub const NF3REG: u32 = 1;
pub const NF3DIR: u32 = 2;
pub const NF3BLK: u32 = 3;
pub const NF3CHR: u32 = 4;
pub const NF3LNK: u32 = 5;
pub const NF3SOCK: u32 = 6;
pub const NF3FIFO: u32 = 7;

/// Every field of fattr3 from lstat; the mode keeps setuid/setgid/sticky and write bits (an
/// overlay copy-up keeps them, so they must be the image's own).
pub fn attr_from(image_id: u64, m: &std::fs::Metadata) -> Attr {
    let rdev = m.rdev() as libc::dev_t;
    Attr {
        ftype: ftype_of(m.mode()),
        mode: m.mode() & 0o7777,
        nlink: m.nlink().min(u32::MAX as u64) as u32,
        uid: m.uid(),
        gid: m.gid(),
        size: m.size(),
        used: m.blocks().saturating_mul(512),
        rdev: (libc::major(rdev), libc::minor(rdev)),
        fsid: fsid_of(image_id, m.dev()),
        fileid: m.ino(),
        atime: time(m.atime(), m.atime_nsec()),
        mtime: time(m.mtime(), m.mtime_nsec()),
        ctime: time(m.ctime(), m.ctime_nsec()),
    }
}

/// `attr_from` for a stat the kernel filled in directly (`fstatat`, `fstat`).
fn attr_from_stat(image_id: u64, st: &libc::stat) -> Attr {
    Attr {
        ftype: ftype_of(st.st_mode),
        mode: st.st_mode & 0o7777,
        nlink: st.st_nlink.min(u32::MAX as _) as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size.max(0) as u64,
        used: (st.st_blocks.max(0) as u64).saturating_mul(512),
        rdev: (libc::major(st.st_rdev), libc::minor(st.st_rdev)),
        fsid: fsid_of(image_id, st.st_dev),
        fileid: st.st_ino,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
    }
}

/// The NFS file type of a `st_mode`.
fn ftype_of(mode: u32) -> u32 {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => NF3DIR,
        libc::S_IFLNK => NF3LNK,
        libc::S_IFBLK => NF3BLK,
        libc::S_IFCHR => NF3CHR,
        libc::S_IFIFO => NF3FIFO,
        libc::S_IFSOCK => NF3SOCK,
        _ => NF3REG,
    }
}

/// One fsid per image and device: two images never look like one filesystem.
fn fsid_of(image_id: u64, dev: u64) -> u64 {
    stable_hash(&[&image_id.to_be_bytes(), &dev.to_be_bytes()])
}

/// A client-supplied name must be one path component.
fn check_name(name: &[u8]) -> Result<&OsStr, Status> {
    if name.is_empty() {
        return Err(status::NOENT);
    }
    if name.len() > NAME_MAX {
        return Err(status::NAMETOOLONG);
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(status::ACCES);
    }
    Ok(OsStr::from_bytes(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn fixture_with(ram: bool) -> (tempfile::TempDir, Tree) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("rootfs");
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::create_dir_all(root.join("big")).unwrap();
        std::fs::write(root.join("bin/su"), b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(root.join("bin/su"), std::fs::Permissions::from_mode(0o4755))
            .unwrap();
        std::fs::create_dir_all(root.join("tmp")).unwrap();
        std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777))
            .unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("escape")).unwrap();
        let fifo = std::ffi::CString::new(root.join("fifo").as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
        for i in 0..1234 {
            std::fs::write(root.join(format!("big/f{i}")), format!("{i}")).unwrap();
        }
        let tree = Tree::with_store([("demo".to_string(), root, ram)]);
        tree.load_ram();
        (dir, tree)
    }

    fn fixture() -> (tempfile::TempDir, Tree) {
        fixture_with(false)
    }

    fn walk(tree: &Tree, path: &[&str]) -> Result<TreeHandle, Status> {
        let mut h = tree.root();
        for p in path {
            h = tree.lookup(&h, p.as_bytes())?.0;
        }
        Ok(h)
    }

    #[test]
    fn attributes_come_from_lstat() {
        let (dir, tree) = fixture();
        let root = dir.path().join("rootfs");
        let su = tree
            .getattr(&walk(&tree, &["demo", "bin", "su"]).unwrap())
            .unwrap();
        let m = std::fs::symlink_metadata(root.join("bin/su")).unwrap();
        assert_eq!(su.mode, 0o4755);
        assert_eq!(su.ftype, NF3REG);
        assert_eq!((su.fileid, su.size, su.uid), (m.ino(), 10, m.uid()));
        assert_eq!(su.mtime.0 as i64, m.mtime());
        let tmp = tree
            .getattr(&walk(&tree, &["demo", "tmp"]).unwrap())
            .unwrap();
        assert_eq!((tmp.ftype, tmp.mode), (NF3DIR, 0o1777));
        let fifo = tree
            .getattr(&walk(&tree, &["demo", "fifo"]).unwrap())
            .unwrap();
        assert_eq!((fifo.ftype, fifo.mode), (NF3FIFO, 0o640));
        let null = attr_from(1, &std::fs::symlink_metadata("/dev/null").unwrap());
        assert_eq!(null.ftype, NF3CHR);
        assert_eq!(null.rdev, (1, 3));
    }

    #[test]
    fn symlinks_are_returned_not_followed() {
        let (_dir, tree) = fixture();
        let link = walk(&tree, &["demo", "escape"]).unwrap();
        assert_eq!(tree.getattr(&link).unwrap().ftype, NF3LNK);
        assert_eq!(tree.readlink(&link).unwrap().1, b"/etc/passwd");
        assert_eq!(
            tree.read(&link, 0, 100, &mut Vec::new()).map(|_| ()),
            Err(status::INVAL)
        );
        assert_eq!(tree.lookup(&link, b"x").map(|_| ()), Err(status::NOTDIR));
    }

    #[test]
    fn names_are_single_components_inside_the_image() {
        let (_dir, tree) = fixture();
        let img = walk(&tree, &["demo"]).unwrap();
        assert_eq!(tree.lookup(&img, b"..").unwrap().0, img);
        let bin = walk(&tree, &["demo", "bin"]).unwrap();
        assert_eq!(tree.lookup(&bin, b"..").unwrap().0, img);
        assert_eq!(tree.lookup(&img, b"bin/su").map(|_| ()), Err(status::ACCES));
        assert_eq!(tree.lookup(&img, b"").map(|_| ()), Err(status::NOENT));
        assert_eq!(
            tree.lookup(&img, "a".repeat(300).as_bytes()).map(|_| ()),
            Err(status::NAMETOOLONG)
        );
        assert!(tree.mount(b"/").is_err());
        assert!(tree.mount(b"/../demo").is_err());
        assert_eq!(tree.mount(b"/demo/bin/.."), Ok(img));
        assert_eq!(tree.mount(b"/demo/bin/su"), Err(status::NOTDIR));
    }

    /// An image exported under a path of its own is mounted by that path (and folders inside
    /// it), not by its name; its handles are those it has under its name.
    #[test]
    fn an_export_path_names_its_image() {
        let (dir, by_name) = fixture();
        let tree = Tree::with_exports([(
            "/srv/nfs/deb".to_string(),
            "demo".to_string(),
            dir.path().join("rootfs"),
            false,
        )]);
        let img = tree.mount(b"/srv/nfs/deb").unwrap();
        assert_eq!(Ok(img), by_name.mount(b"/demo"));
        assert_eq!(tree.mount(b"//srv/nfs/deb/"), Ok(img));
        assert!(tree.mount(b"/srv/nfs/deb/bin").is_ok());
        assert_eq!(tree.mount(b"/srv/nfs/deb/bin/.."), Ok(img));
        for other in [&b"/demo"[..], b"/srv/nfs", b"/srv", b"/srv/nfs/debian"] {
            assert_eq!(tree.mount(other), Err(status::NOENT), "{other:?}");
        }
        assert_eq!(tree.exports().collect::<Vec<_>>(), ["/srv/nfs/deb"]);
    }

    fn list(tree: &Tree, dir: &TreeHandle, page: usize) -> Vec<String> {
        let mut seen = Vec::new();
        let mut cookie = 0;
        loop {
            let (_, mut it) = tree.entries(dir, cookie).unwrap();
            let mut n = 0;
            while let Some((c, name, _, _)) = it.peek() {
                seen.push(String::from_utf8(name.to_vec()).unwrap());
                cookie = c;
                it.advance();
                n += 1;
                if n == page {
                    break;
                }
            }
            if it.peek().is_none() {
                return seen;
            }
        }
    }

    #[test]
    fn readdir_cookies_resume_where_a_page_ended() {
        let (_dir, tree) = fixture();
        let big = walk(&tree, &["demo", "big"]).unwrap();
        let mut seen = list(&tree, &big, 100);
        assert_eq!(seen.len(), 1234 + 2);
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 1234 + 2, "no entry twice");
        assert!(matches!(
            tree.entries(&big, 10_000).map(|_| ()),
            Err(status::BAD_COOKIE)
        ));
    }

    /// A cached listing answers LOOKUPs, and goes when the directory changes.
    #[test]
    fn listings_follow_the_directory() {
        let (dir, tree) = fixture();
        let bin = walk(&tree, &["demo", "bin"]).unwrap();
        assert_eq!(list(&tree, &bin, 100).len(), 3);
        assert_eq!(tree.lookup(&bin, b"sh").map(|_| ()), Err(status::NOENT));
        // A new name with a different mtime (filesystems with coarse timestamps need a step).
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(dir.path().join("rootfs/bin/sh"), b"x").unwrap();
        let later = std::time::SystemTime::now() + Duration::from_secs(5);
        std::fs::File::open(dir.path().join("rootfs/bin"))
            .unwrap()
            .set_modified(later)
            .unwrap();
        std::thread::sleep(FRESH + Duration::from_millis(50));
        assert!(tree.lookup(&bin, b"sh").is_ok());
        assert_eq!(list(&tree, &bin, 100).len(), 4);
    }

    #[test]
    fn reads_from_disk_and_ram_agree() {
        for ram in [false, true] {
            let (_dir, tree) = fixture_with(ram);
            let f = walk(&tree, &["demo", "big", "f1000"]).unwrap();
            let mut out = Vec::new();
            let (attr, eof) = tree.read(&f, 1, 100, &mut out).unwrap();
            assert_eq!((out.as_slice(), eof, attr.size), (&b"000"[..], true, 4));
            out.clear();
            let (_, eof) = tree.read(&f, 0, 2, &mut out).unwrap();
            assert_eq!((out.as_slice(), eof), (&b"10"[..], false), "ram {ram}");
        }
    }

    /// Sets `path`'s mtime (and atime) to `secs`.`nsecs`.
    fn set_mtime(path: &Path, secs: i64, nsecs: i64) {
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        let t = libc::timespec {
            tv_sec: secs,
            tv_nsec: nsecs,
        };
        let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), 0) };
        assert_eq!(r, 0);
    }

    /// A LOOKUP in a folder with no listing cached is remembered, "no such name" too, for as
    /// long as the folder's mtime stays; a folder changed within the last second is not.
    #[test]
    fn names_looked_up_outside_listings_are_kept_while_the_folder_is_unchanged() {
        let (dir, tree) = fixture();
        let bin = dir.path().join("rootfs/bin");
        let old = std::fs::metadata(&bin).unwrap().mtime() - 100;
        set_mtime(&bin, old, 7);
        let binh = walk(&tree, &["demo", "bin"]).unwrap();
        assert_eq!(tree.lookup(&binh, b"late").map(|_| ()), Err(status::NOENT));
        let su = tree.lookup(&binh, b"su").unwrap().0;

        // Made behind its back with the folder's mtime put back: the kept answers stand.
        std::fs::write(bin.join("late"), b"x").unwrap();
        std::fs::remove_file(bin.join("su")).unwrap();
        set_mtime(&bin, old, 7);
        std::thread::sleep(FRESH + Duration::from_millis(50));
        assert_eq!(tree.lookup(&binh, b"late").map(|_| ()), Err(status::NOENT));
        // The child's own attributes are still checked: a deleted file is not handed out.
        assert!(tree.lookup(&binh, b"su").is_err());
        assert!(tree.getattr(&su).is_err());

        // A new mtime, and the folder is looked at again.
        set_mtime(&bin, old + 50, 0);
        std::thread::sleep(FRESH + Duration::from_millis(50));
        assert!(tree.lookup(&binh, b"late").is_ok());

        // Changed just now: not kept. The folder's attributes are looked at again after
        // FRESH; its mtime is then set to now, so that a slow machine cannot make the change
        // older than a second by the time of the lookup.
        std::fs::write(bin.join("later"), b"x").unwrap();
        std::thread::sleep(FRESH + Duration::from_millis(50));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        set_mtime(&bin, now.as_secs() as i64, now.subsec_nanos() as i64);
        assert!(tree.lookup(&binh, b"later").is_ok());
        let key = (binh, OsString::from("later"));
        assert!(lock(&tree.names).get(&key).is_none());
    }

    /// `l` as if built `by` ago and last read `used` ago.
    fn aged(l: &Listing, by: Duration, used: Duration) -> Arc<Listing> {
        let ago = |d| Instant::now().checked_sub(d).unwrap();
        Arc::new(Listing {
            mtime: l.mtime,
            built: ago(by),
            used: Mutex::new(ago(used)),
            parent: l.parent,
            children: l.children.clone(),
            attrs: l.attrs.clone(),
            plus: OnceLock::new(),
        })
    }

    /// A listing read lately is served as it is past `LISTING_REFRESH` while a background
    /// thread rebuilds it; one unread for `KEEP_FRESH` is left alone; past `LISTING_FRESH` a
    /// listing is rebuilt before it is served.
    #[test]
    fn old_listings_in_use_are_rebuilt_off_the_request_path() {
        let (dir, tree) = fixture();
        let tree = Arc::new(tree);
        let bin = dir.path().join("rootfs/bin");
        let old = std::fs::metadata(&bin).unwrap().mtime() - 100;
        set_mtime(&bin, old, 7);
        let binh = walk(&tree, &["demo", "bin"]).unwrap();
        let listing = |t: &Tree| t.entries(&binh, 0).unwrap().1.listing;
        let su_mode = |l: &Listing| {
            let i = l.children.iter().position(|(n, _)| n == "su").unwrap();
            l.attrs[i].mode
        };
        let first = listing(&tree);
        assert!(Arc::ptr_eq(&first, &listing(&tree)), "a listing is kept");
        assert_eq!(su_mode(&first), 0o4755);
        // A change the folder's mtime does not show: only a rebuild sees it.
        std::fs::set_permissions(bin.join("su"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let put = |l: Arc<Listing>| lock(&tree.listings).insert(binh, l);

        let second = Duration::from_secs(1);
        // Too old to serve: rebuilt first.
        put(aged(&first, LISTING_FRESH + second, LISTING_FRESH + second));
        assert_eq!(su_mode(&listing(&tree)), 0o755);
        std::fs::set_permissions(bin.join("su"), std::fs::Permissions::from_mode(0o4755)).unwrap();

        // Due, but nobody read it for longer than `KEEP_FRESH`: left for a request to rebuild.
        let unread = aged(&first, LISTING_REFRESH + second, KEEP_FRESH + second);
        put(unread.clone());
        tree.refresh_listings();
        assert!(Arc::ptr_eq(&lock(&tree.listings)[&binh], &unread));

        // Due and read lately: served as it is, rebuilt by the background thread with the
        // same last use; the thread ends once the tree is dropped.
        let due = aged(&first, LISTING_REFRESH + second, 10 * second);
        put(due.clone());
        let served = listing(&tree);
        assert!(Arc::ptr_eq(&served, &due));
        assert_eq!(su_mode(&served), 0o4755);
        let read_at = *lock(&due.used);
        std::fs::set_permissions(bin.join("su"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let refresher = {
            let tree = Arc::downgrade(&tree);
            std::thread::spawn(move || Tree::keep_listings_fresh(tree))
        };
        let cached = || lock(&tree.listings)[&binh].clone();
        let start = Instant::now();
        while su_mode(&cached()) != 0o755 {
            assert!(start.elapsed() < Duration::from_secs(10), "not rebuilt");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(*lock(&cached().used), read_at);
        drop(tree);
        let start = Instant::now();
        while !refresher.is_finished() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "refresher still running"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What a `writev` of `m`'s data between `<` and `>` sends.
    fn sent(m: &MappedRead) -> Vec<u8> {
        let mut out = tempfile::tempfile().unwrap();
        let n = m.data().writev(out.as_raw_fd(), b"<", b">", 0).unwrap();
        let mut got = Vec::new();
        std::io::Seek::rewind(&mut out).unwrap();
        std::io::Read::read_to_end(&mut out, &mut got).unwrap();
        assert_eq!(n, got.len());
        got
    }

    /// Small files are read from mappings kept in their own cache, with no descriptor held:
    /// every read has its file's bytes, a file read all along stays (second chance), a file
    /// that grew is mapped again, and a read at the end has no data.
    #[test]
    fn small_files_are_read_from_mappings_kept_without_a_descriptor() {
        let (dir, tree) = fixture();
        *lock(&tree.small) = Clock::new(8);
        let hot = walk(&tree, &["demo", "big", "f1"]).unwrap();
        for i in (0..1234).step_by(7) {
            let f = walk(&tree, &["demo", "big", &format!("f{i}")]).unwrap();
            let m = tree.read_mapped(&f, 0, 1 << 20).unwrap().expect("mapped");
            assert_eq!(sent(&m), format!("<{i}>").as_bytes());
            assert!(m.eof);
            let m = tree.read_mapped(&hot, 0, 1 << 20).unwrap().expect("mapped");
            assert_eq!(sent(&m), b"<1>");
            assert!(lock(&tree.small).map.len() <= 8);
        }
        assert!(lock(&tree.small).map.contains_key(&hot), "hot file evicted");
        assert!(lock(&tree.files).map.is_empty(), "a descriptor was kept");

        let at_end = tree.read_mapped(&hot, 1, 100).unwrap().expect("mapped");
        assert_eq!((at_end.len(), at_end.eof), (0, true));
        // Past the end too, from the mapping there is: nothing is mapped again.
        let past = tree.read_mapped(&hot, 1000, 100).unwrap().expect("mapped");
        assert_eq!((sent(&past), past.eof), (b"<>".to_vec(), true));
        assert!(Arc::ptr_eq(&past.mapping, &at_end.mapping));
        std::fs::write(dir.path().join("rootfs/big/f1"), b"1 and more").unwrap();
        std::thread::sleep(FRESH + Duration::from_millis(50));
        let m = tree.read_mapped(&hot, 2, 100).unwrap().expect("mapped");
        assert_eq!((sent(&m), m.eof), (b"<and more>".to_vec(), true));
    }

    #[test]
    fn big_cached_reads_on_disk_are_sent_from_a_mapping_of_the_file() {
        let (dir, tree) = fixture();
        let bytes: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("rootfs/big/data"), &bytes).unwrap();
        let f = walk(&tree, &["demo", "big", "data"]).unwrap();
        // Written just now, so in the page cache; the last READ is cut at the end.
        for (offset, count, want_eof) in [(1000, 200_000, false), (200_000, 150_000, true)] {
            let m = tree
                .read_mapped(&f, offset, count)
                .unwrap()
                .expect("mapped");
            let end = (offset as usize + count).min(bytes.len());
            assert_eq!(
                (m.len(), m.eof, m.attr.size),
                (end - offset as usize, want_eof, 300_000)
            );
            assert!(sent(&m) == [&b"<"[..], &bytes[offset as usize..end], b">"].concat());
        }
        // A short READ of a big file is copied: a mapping would save little.
        assert!(tree.read_mapped(&f, 0, 4096).unwrap().is_none());
        // Not for a folder; and a RAM image's bytes are sent from memory already.
        let big = walk(&tree, &["demo", "big"]).unwrap();
        assert!(matches!(tree.read_mapped(&big, 0, 100_000), Err(st) if st == status::ISDIR));
        let (_dir, ram) = fixture_with(true);
        let f = walk(&ram, &["demo", "big", "f1000"]).unwrap();
        assert!(ram.read_mapped(&f, 0, 100_000).unwrap().is_none());
    }

    #[test]
    fn handles_survive_a_new_tree_and_reject_strangers() {
        let (dir, tree) = fixture();
        let su = walk(&tree, &["demo", "bin", "su"]).unwrap();
        let wire = su.wire();
        let again = Tree::new([("demo".to_string(), dir.path().join("rootfs"))]);
        let h = TreeHandle::from_wire(&wire).unwrap();
        assert_eq!(again.getattr(&h).unwrap().mode, 0o4755);
        assert_eq!(TreeHandle::from_wire(&wire[1..]), Err(status::BADHANDLE));
        let mut other = wire;
        other[0] = 2;
        assert_eq!(TreeHandle::from_wire(&other), Err(status::BADHANDLE));
        // A handle to a file that no longer exists is stale. (Made by deleting a real file:
        // a handle with a flipped inode byte can land on another fixture file.)
        let path = dir.path().join("rootfs/bin/gone");
        std::fs::write(&path, b"x").unwrap();
        let fresh = Tree::new([("demo".to_string(), dir.path().join("rootfs"))]);
        let gone = walk(&fresh, &["demo", "bin", "gone"]).unwrap().wire();
        std::fs::remove_file(&path).unwrap();
        let later = Tree::new([("demo".to_string(), dir.path().join("rootfs"))]);
        let gone = TreeHandle::from_wire(&gone).unwrap();
        assert_eq!(later.getattr(&gone), Err(status::STALE));
    }

    /// Attributes from a raw `fstatat` are the ones `std`'s metadata gives.
    #[test]
    fn raw_stat_attributes_match_metadata() {
        let (dir, _tree) = fixture();
        let root = dir.path().join("rootfs");
        let fd: OwnedFd = std::fs::File::open(&root).unwrap().into();
        for rel in ["", "bin", "bin/su", "escape", "fifo", "tmp"] {
            let st = stat_at(&fd, Path::new(rel)).unwrap();
            let m = std::fs::symlink_metadata(root.join(rel)).unwrap();
            assert_eq!(attr_from_stat(3, &st), attr_from(3, &m), "{rel}");
        }
        let null: OwnedFd = std::fs::File::open("/dev").unwrap().into();
        let st = stat_at(&null, Path::new("null")).unwrap();
        assert_eq!(attr_from_stat(1, &st).ftype, NF3CHR);
        assert_eq!(attr_from_stat(1, &st).rdev, (1, 3));
        assert!(stat_at(&fd, Path::new("nope")).is_err());
    }

    /// A file cache far smaller than the files read evicts, and every read still returns
    /// that file's bytes; a file read again while cached stays (second chance).
    #[test]
    fn open_file_cache_evicts_and_serves_the_right_bytes() {
        let (_dir, tree) = fixture();
        *lock(&tree.files) = Clock::new(8);
        let hot = walk(&tree, &["demo", "big", "f1"]).unwrap();
        for round in 0..2 {
            for i in (0..1234).step_by(7) {
                let f = walk(&tree, &["demo", "big", &format!("f{i}")]).unwrap();
                let mut out = Vec::new();
                tree.read(&f, 0, 100, &mut out).unwrap();
                assert_eq!(out, format!("{i}").as_bytes(), "round {round} f{i}");
                let mut out = Vec::new();
                tree.read(&hot, 0, 100, &mut out).unwrap();
                assert_eq!(out, b"1");
                assert!(lock(&tree.files).map.len() <= 8);
            }
        }
        let files = lock(&tree.files);
        assert!(
            files.map.contains_key(&hot),
            "the file read all along was evicted"
        );
        assert!(files.ring.len() <= 16);
    }

    /// The opened image root follows the folder: a new tree put in its place is served
    /// once the old one's check has expired.
    #[test]
    fn a_new_tree_in_the_roots_place_is_served() {
        let (dir, tree) = fixture();
        assert!(walk(&tree, &["demo", "bin", "su"]).is_ok());
        let root = dir.path().join("rootfs");
        std::fs::rename(&root, dir.path().join("old")).unwrap();
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::write(root.join("bin/sh"), b"new").unwrap();
        std::thread::sleep(FRESH + Duration::from_millis(50));
        let sh = walk(&tree, &["demo", "bin", "sh"]).unwrap();
        let mut out = Vec::new();
        tree.read(&sh, 0, 10, &mut out).unwrap();
        assert_eq!(out, b"new");
        assert_eq!(
            walk(&tree, &["demo", "bin", "su"]).map(|_| ()),
            Err(status::NOENT)
        );
    }
}

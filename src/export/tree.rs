//! The read-only trees served over NFS: one per image with `root: nfs`, under a composite root
//! that only names them (`/demo` is the `rootfs/` folder of image `demo`). This is the only code
//! that turns client-supplied names into paths: a name is one component, `..` never climbs above
//! an image's root, and symlinks are handed to the client, never followed here.
//!
//! File handles are `image id + st_dev + st_ino`, nothing from a start-up counter, so a handle
//! given out before a restart still resolves afterwards: a handle we have not met yet triggers
//! one walk of its image to find the inode again.

use nfs3_server::nfs3_types::nfs3::{
    FSF3_HOMOGENEOUS, FSF3_SYMLINK, FSINFO3resok, createverf3, fattr3, filename3, ftype3, nfspath3,
    nfsstat3, nfstime3, sattr3, specdata3, stable_how,
};
use nfs3_server::vfs::{
    DirEntryPlus, FileHandle, NextResult, NfsFileSystem, NfsReadFileSystem, ReadDirPlusIterator,
    VFSCapabilities,
};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Largest READ answered; matches the `rtmax` we advertise.
pub const MAX_READ: u32 = 1 << 20;
/// A handle we cannot place makes us re-walk its image at most this often.
const REWALK_EVERY: Duration = Duration::from_secs(30);
/// Directory listings kept for READDIR paging.
const DIR_CACHE: usize = 256;
/// A walk stops after this many entries (an image is not a whole disk).
const WALK_LIMIT: usize = 5_000_000;
const NAME_MAX: usize = 255;

/// Our part of an NFS handle (nfs3_server prefixes its 8-byte generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TreeHandle([u8; HANDLE_LEN]);

/// Layout version byte, then image id, st_dev, st_ino (big-endian u64s).
const HANDLE_LEN: usize = 25;
const HANDLE_V1: u8 = 1;
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
}

impl FileHandle for TreeHandle {
    fn len(&self) -> usize {
        HANDLE_LEN
    }
    fn as_bytes(&self) -> &[u8] {
        &self.0
    }
    fn from_bytes(bytes: &[u8]) -> Option<TreeHandle> {
        let b: [u8; HANDLE_LEN] = bytes.try_into().ok()?;
        (b[0] == HANDLE_V1).then_some(TreeHandle(b))
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
    /// Stable id of the image name; never 0 (0 marks the composite root).
    id: u64,
    root: PathBuf,
    /// (st_dev, st_ino) -> path relative to `root`. Filled by lookups, listings and walks.
    known: Mutex<HashMap<(u64, u64), PathBuf>>,
    last_walk: Mutex<Option<Instant>>,
}

/// Where a handle points.
#[derive(Debug, Clone)]
enum Node {
    Root,
    /// Index into `images`, path relative to that image's root ("" for the root itself).
    In(usize, PathBuf),
}

type Listing = Arc<Vec<OsString>>;
/// (image, dev, ino) of a directory -> (its mtime, its sorted names).
type Listings = HashMap<(usize, u64, u64), ((i64, i64), Listing)>;

/// The NFS filesystem: every image tree under one composite root.
pub struct Tree {
    images: Vec<ImageTree>,
    /// For READDIR paging without re-listing and re-sorting on every page.
    listings: Mutex<Listings>,
}

impl Tree {
    /// `images`: (export name, tree folder) for every image exported over NFS.
    pub fn new<I: IntoIterator<Item = (String, PathBuf)>>(images: I) -> Tree {
        let images = images
            .into_iter()
            .map(|(name, root)| ImageTree {
                id: stable_hash(&[name.as_bytes()]).max(1),
                name,
                root,
                known: Mutex::new(HashMap::new()),
                last_walk: Mutex::new(None),
            })
            .collect();
        Tree {
            images,
            listings: Mutex::new(HashMap::new()),
        }
    }

    /// Export names, e.g. `["demo"]`.
    pub fn exports(&self) -> impl Iterator<Item = &str> {
        self.images.iter().map(|i| i.name.as_str())
    }

    fn full(&self, img: usize, rel: &Path) -> PathBuf {
        self.images[img].root.join(rel)
    }

    fn handle_of(&self, img: usize, rel: &Path, meta: &std::fs::Metadata) -> TreeHandle {
        let image = &self.images[img];
        lock(&image.known).insert((meta.dev(), meta.ino()), rel.to_path_buf());
        TreeHandle::new(image.id, meta.dev(), meta.ino())
    }

    /// Resolves a handle to a node, re-walking its image once if the inode is not known yet
    /// (after a restart). The path found is checked against the handle's dev/ino.
    async fn node(&self, h: &TreeHandle) -> Result<(Node, Option<std::fs::Metadata>), nfsstat3> {
        if *h == ROOT {
            return Ok((Node::Root, None));
        }
        let img = self
            .images
            .iter()
            .position(|i| i.id == h.image())
            .ok_or(nfsstat3::NFS3ERR_STALE)?;
        let key = h.key();
        for attempt in 0..2 {
            let rel = lock(&self.images[img].known).get(&key).cloned();
            if let Some(rel) = rel {
                match lstat(&self.full(img, &rel)).await {
                    Ok(m) if (m.dev(), m.ino()) == key => {
                        return Ok((Node::In(img, rel), Some(m)));
                    }
                    // Replaced or gone: forget it and look again.
                    _ => {
                        lock(&self.images[img].known).remove(&key);
                    }
                }
            }
            if attempt == 0 && !self.walk(img).await {
                break;
            }
        }
        Err(nfsstat3::NFS3ERR_STALE)
    }

    /// Walks an image to learn every inode; false if one ran too recently.
    async fn walk(&self, img: usize) -> bool {
        let image = &self.images[img];
        {
            let mut last = lock(&image.last_walk);
            if last.is_some_and(|t| t.elapsed() < REWALK_EVERY) {
                return false;
            }
            *last = Some(Instant::now());
        }
        let root = image.root.clone();
        let found = tokio::task::spawn_blocking(move || walk_tree(&root))
            .await
            .unwrap_or_default();
        tracing::debug!(image = %image.name, inodes = found.len(), "walked image for handles");
        lock(&image.known).extend(found);
        true
    }

    async fn listing(
        &self,
        img: usize,
        rel: &Path,
        meta: &std::fs::Metadata,
    ) -> Result<Listing, nfsstat3> {
        let key = (img, meta.dev(), meta.ino());
        let mtime = (meta.mtime(), meta.mtime_nsec());
        if let Some((m, names)) = lock(&self.listings).get(&key)
            && *m == mtime
        {
            return Ok(names.clone());
        }
        let dir = self.full(img, rel);
        let names = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<OsString>> {
            let mut names = std::fs::read_dir(dir)?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<std::io::Result<Vec<_>>>()?;
            // Sorted, so that a cookie (an index) means the same entry on every page.
            names.sort();
            Ok(names)
        })
        .await
        .map_err(|_| nfsstat3::NFS3ERR_IO)?
        .map_err(io_status)?;
        let names = Arc::new(names);
        let mut cache = lock(&self.listings);
        if cache.len() >= DIR_CACHE {
            cache.clear();
        }
        cache.insert(key, (mtime, names.clone()));
        Ok(names)
    }

    fn root_attr(&self) -> fattr3 {
        fattr3 {
            type_: ftype3::NF3DIR,
            mode: 0o555,
            nlink: 2 + self.images.len() as u32,
            uid: 0,
            gid: 0,
            size: 4096,
            used: 4096,
            rdev: specdata3 {
                specdata1: 0,
                specdata2: 0,
            },
            fsid: 0,
            fileid: 1,
            atime: time(0, 0),
            mtime: time(0, 0),
            ctime: time(0, 0),
        }
    }

    fn attr(&self, img: usize, meta: &std::fs::Metadata) -> fattr3 {
        attr_from(self.images[img].id, meta)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere must not take the export down with it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn lstat(p: &Path) -> std::io::Result<std::fs::Metadata> {
    tokio::fs::symlink_metadata(p).await
}

fn io_status(e: std::io::Error) -> nfsstat3 {
    use std::io::ErrorKind::*;
    match e.kind() {
        NotFound => nfsstat3::NFS3ERR_NOENT,
        PermissionDenied => nfsstat3::NFS3ERR_ACCES,
        NotADirectory => nfsstat3::NFS3ERR_NOTDIR,
        IsADirectory => nfsstat3::NFS3ERR_ISDIR,
        _ if e.raw_os_error() == Some(libc::ELOOP) => nfsstat3::NFS3ERR_INVAL,
        _ => nfsstat3::NFS3ERR_IO,
    }
}

fn walk_tree(root: &Path) -> Vec<((u64, u64), PathBuf)> {
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
            out.push(((m.dev(), m.ino()), child));
        }
    }
    if let Ok(m) = std::fs::symlink_metadata(root) {
        out.push(((m.dev(), m.ino()), PathBuf::new()));
    }
    out
}

fn time(secs: i64, nsec: i64) -> nfstime3 {
    nfstime3 {
        seconds: secs.clamp(0, u32::MAX as i64) as u32,
        nseconds: nsec.clamp(0, 999_999_999) as u32,
    }
}

/// Every field of fattr3 from lstat; the mode keeps setuid/setgid/sticky and write bits (an
/// overlay copy-up keeps them, so they must be the image's own).
pub fn attr_from(image_id: u64, m: &std::fs::Metadata) -> fattr3 {
    let ft = m.file_type();
    let type_ = if ft.is_dir() {
        ftype3::NF3DIR
    } else if ft.is_symlink() {
        ftype3::NF3LNK
    } else if ft.is_block_device() {
        ftype3::NF3BLK
    } else if ft.is_char_device() {
        ftype3::NF3CHR
    } else if ft.is_fifo() {
        ftype3::NF3FIFO
    } else if ft.is_socket() {
        ftype3::NF3SOCK
    } else {
        ftype3::NF3REG
    };
    let rdev = m.rdev() as libc::dev_t;
    fattr3 {
        type_,
        mode: m.mode() & 0o7777,
        nlink: m.nlink().min(u32::MAX as u64) as u32,
        uid: m.uid(),
        gid: m.gid(),
        size: m.size(),
        used: m.blocks().saturating_mul(512),
        rdev: specdata3 {
            specdata1: libc::major(rdev),
            specdata2: libc::minor(rdev),
        },
        // One fsid per image and device: two images never look like one filesystem.
        fsid: stable_hash(&[&image_id.to_be_bytes(), &m.dev().to_be_bytes()]),
        fileid: m.ino(),
        atime: time(m.atime(), m.atime_nsec()),
        mtime: time(m.mtime(), m.mtime_nsec()),
        ctime: time(m.ctime(), m.ctime_nsec()),
    }
}

/// A client-supplied name must be one path component.
fn check_name(name: &[u8]) -> Result<&OsStr, nfsstat3> {
    if name.is_empty() {
        return Err(nfsstat3::NFS3ERR_NOENT);
    }
    if name.len() > NAME_MAX {
        return Err(nfsstat3::NFS3ERR_NAMETOOLONG);
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(nfsstat3::NFS3ERR_ACCES);
    }
    Ok(OsStr::from_bytes(name))
}

impl NfsReadFileSystem for Tree {
    type Handle = TreeHandle;

    fn root_dir(&self) -> TreeHandle {
        ROOT
    }

    async fn lookup(
        &self,
        dirid: &TreeHandle,
        filename: &filename3<'_>,
    ) -> Result<TreeHandle, nfsstat3> {
        let name = check_name(&filename.0)?;
        let (node, meta) = self.node(dirid).await?;
        match node {
            Node::Root => {
                if name == "." || name == ".." {
                    return Ok(ROOT);
                }
                let img = self
                    .images
                    .iter()
                    .position(|i| OsStr::new(&i.name) == name)
                    .ok_or(nfsstat3::NFS3ERR_NOENT)?;
                let m = lstat(&self.images[img].root).await.map_err(io_status)?;
                Ok(self.handle_of(img, Path::new(""), &m))
            }
            Node::In(img, rel) => {
                if !meta.as_ref().is_some_and(|m| m.is_dir()) {
                    return Err(nfsstat3::NFS3ERR_NOTDIR);
                }
                let target = if name == "." {
                    rel
                } else if name == ".." {
                    // `..` of an image root is the image root: a client never leaves it.
                    rel.parent().map(Path::to_path_buf).unwrap_or_default()
                } else {
                    rel.join(name)
                };
                let m = lstat(&self.full(img, &target)).await.map_err(io_status)?;
                Ok(self.handle_of(img, &target, &m))
            }
        }
    }

    /// MNT: the first component names an image; the bare root is not mountable.
    async fn lookup_by_path(&self, path: &str) -> Result<TreeHandle, nfsstat3> {
        let mut parts = path.split('/').filter(|c| !c.is_empty());
        let first = parts.next().ok_or(nfsstat3::NFS3ERR_NOENT)?;
        if first == "." || first == ".." {
            return Err(nfsstat3::NFS3ERR_NOENT);
        }
        let mut h = self.lookup(&ROOT, &first.as_bytes().into()).await?;
        for part in parts {
            h = self.lookup(&h, &part.as_bytes().into()).await?;
        }
        match self.node(&h).await? {
            (_, Some(m)) if m.is_dir() => Ok(h),
            _ => Err(nfsstat3::NFS3ERR_NOTDIR),
        }
    }

    async fn getattr(&self, id: &TreeHandle) -> Result<fattr3, nfsstat3> {
        match self.node(id).await? {
            (Node::In(img, _), Some(m)) => Ok(self.attr(img, &m)),
            _ => Ok(self.root_attr()),
        }
    }

    async fn read(
        &self,
        id: &TreeHandle,
        offset: u64,
        count: u32,
    ) -> Result<(Vec<u8>, bool), nfsstat3> {
        let (node, meta) = self.node(id).await?;
        let (Node::In(img, rel), Some(meta)) = (node, meta) else {
            return Err(nfsstat3::NFS3ERR_ISDIR);
        };
        if meta.is_dir() {
            return Err(nfsstat3::NFS3ERR_ISDIR);
        }
        if !meta.is_file() {
            return Err(nfsstat3::NFS3ERR_INVAL);
        }
        let path = self.full(img, &rel);
        let count = count.min(MAX_READ) as usize;
        let key = (meta.dev(), meta.ino());
        tokio::task::spawn_blocking(move || -> std::io::Result<(Vec<u8>, bool)> {
            // O_NOFOLLOW: the last component must still be the file the handle names.
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&path)?;
            let m = f.metadata()?;
            if (m.dev(), m.ino()) != key {
                return Err(std::io::Error::from(std::io::ErrorKind::NotFound));
            }
            let mut buf = vec![0u8; count];
            let mut got = 0;
            while got < count {
                match f.read_at(&mut buf[got..], offset + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            buf.truncate(got);
            let eof = offset.saturating_add(got as u64) >= m.len();
            Ok((buf, eof))
        })
        .await
        .map_err(|_| nfsstat3::NFS3ERR_IO)?
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => nfsstat3::NFS3ERR_STALE,
            _ => io_status(e),
        })
    }

    async fn readdirplus(
        &self,
        dirid: &TreeHandle,
        cookie: u64,
    ) -> Result<impl ReadDirPlusIterator<TreeHandle>, nfsstat3> {
        let (node, meta) = self.node(dirid).await?;
        let entries: Vec<Pending> = match &node {
            Node::Root => [".", ".."]
                .into_iter()
                .map(|n| Pending::Root(n.into()))
                .chain(
                    self.images
                        .iter()
                        .enumerate()
                        .map(|(i, _)| Pending::Image(i)),
                )
                .collect(),
            Node::In(img, rel) => {
                let meta = meta.as_ref().ok_or(nfsstat3::NFS3ERR_IO)?;
                if !meta.is_dir() {
                    return Err(nfsstat3::NFS3ERR_NOTDIR);
                }
                let names = self.listing(*img, rel, meta).await?;
                let parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
                let mut v = vec![
                    Pending::Entry(*img, ".".into(), rel.clone()),
                    Pending::Entry(*img, "..".into(), parent),
                ];
                v.extend(
                    names
                        .iter()
                        .map(|n| Pending::Entry(*img, n.clone(), rel.join(n))),
                );
                v
            }
        };
        // Cookie n means "the n first entries were seen"; anything beyond the end is stale.
        let start = usize::try_from(cookie).map_err(|_| nfsstat3::NFS3ERR_BAD_COOKIE)?;
        if start > entries.len() {
            return Err(nfsstat3::NFS3ERR_BAD_COOKIE);
        }
        Ok(Entries {
            tree: self,
            entries,
            next: start,
        })
    }

    async fn readlink(&self, id: &TreeHandle) -> Result<nfspath3<'_>, nfsstat3> {
        let (node, meta) = self.node(id).await?;
        match (node, meta) {
            (Node::In(img, rel), Some(m)) if m.file_type().is_symlink() => {
                let target = tokio::fs::read_link(self.full(img, &rel))
                    .await
                    .map_err(io_status)?;
                Ok(target.into_os_string().into_vec().into())
            }
            _ => Err(nfsstat3::NFS3ERR_INVAL),
        }
    }

    async fn fsinfo(&self, root: &TreeHandle) -> Result<FSINFO3resok, nfsstat3> {
        let attr = self.getattr(root).await?;
        Ok(FSINFO3resok {
            obj_attributes: nfs3_server::nfs3_types::nfs3::post_op_attr::Some(attr),
            rtmax: MAX_READ,
            rtpref: MAX_READ,
            rtmult: 4096,
            wtmax: MAX_READ,
            wtpref: MAX_READ,
            wtmult: 4096,
            dtpref: 64 * 1024,
            maxfilesize: u64::MAX >> 1,
            time_delta: nfstime3 {
                seconds: 0,
                nseconds: 1,
            },
            // No FSF3_CANSETTIME: nothing can be set here.
            properties: FSF3_SYMLINK | FSF3_HOMOGENEOUS,
        })
    }
}

enum Pending {
    Root(OsString),
    Image(usize),
    /// image, name, path relative to the image root
    Entry(usize, OsString, PathBuf),
}

/// READDIRPLUS iterator: stats entries lazily, one page at a time.
struct Entries<'a> {
    tree: &'a Tree,
    entries: Vec<Pending>,
    next: usize,
}

impl ReadDirPlusIterator<TreeHandle> for Entries<'_> {
    async fn next(&mut self) -> NextResult<DirEntryPlus<TreeHandle>> {
        while self.next < self.entries.len() {
            let i = self.next;
            self.next += 1;
            let cookie = self.next as u64;
            let t = self.tree;
            let (name, handle, attr) = match &self.entries[i] {
                Pending::Root(n) => (n.clone(), ROOT, t.root_attr()),
                Pending::Image(img) => {
                    let Ok(m) = lstat(&t.images[*img].root).await else {
                        continue;
                    };
                    let h = t.handle_of(*img, Path::new(""), &m);
                    (t.images[*img].name.clone().into(), h, t.attr(*img, &m))
                }
                Pending::Entry(img, name, rel) => {
                    // Gone since the listing was taken: skip it, the cookie still counts.
                    let Ok(m) = lstat(&t.full(*img, rel)).await else {
                        continue;
                    };
                    (name.clone(), t.handle_of(*img, rel, &m), t.attr(*img, &m))
                }
            };
            return NextResult::Ok(DirEntryPlus {
                fileid: attr.fileid,
                name: name.into_vec().into(),
                cookie,
                name_attributes: Some(attr),
                name_handle: Some(handle),
            });
        }
        NextResult::Eof
    }
}

/// Every change is refused: the trees are read-only.
impl NfsFileSystem for Tree {
    fn capabilities(&self) -> VFSCapabilities {
        VFSCapabilities::ReadOnly
    }
    async fn setattr(&self, _: &TreeHandle, _: sattr3) -> Result<fattr3, nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }
    async fn write(
        &self,
        _: &TreeHandle,
        _: u64,
        _: &[u8],
        _: stable_how,
    ) -> Result<(fattr3, stable_how), nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }
    async fn create(
        &self,
        _: &TreeHandle,
        _: &filename3<'_>,
        _: sattr3,
    ) -> Result<(TreeHandle, fattr3), nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }
    async fn create_exclusive(
        &self,
        _: &TreeHandle,
        _: &filename3<'_>,
        _: createverf3,
    ) -> Result<TreeHandle, nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }
    async fn mkdir(
        &self,
        _: &TreeHandle,
        _: &filename3<'_>,
    ) -> Result<(TreeHandle, fattr3), nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }
    async fn remove(&self, _: &TreeHandle, _: &filename3<'_>) -> Result<(), nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }
    async fn rename<'a>(
        &self,
        _: &TreeHandle,
        _: &filename3<'a>,
        _: &TreeHandle,
        _: &filename3<'a>,
    ) -> Result<(), nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }
    async fn symlink<'a>(
        &self,
        _: &TreeHandle,
        _: &filename3<'a>,
        _: &nfspath3<'a>,
        _: &sattr3,
    ) -> Result<(TreeHandle, fattr3), nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }
    async fn commit(&self, _: &TreeHandle, _: u64, _: u32) -> Result<(), nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn name(s: &str) -> filename3<'static> {
        s.as_bytes().to_vec().into()
    }

    fn fixture() -> (tempfile::TempDir, Tree) {
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
            std::fs::write(root.join(format!("big/f{i}")), b"").unwrap();
        }
        let tree = Tree::new([("demo".to_string(), root)]);
        (dir, tree)
    }

    async fn walk(tree: &Tree, path: &[&str]) -> Result<TreeHandle, nfsstat3> {
        let mut h = tree.root_dir();
        for p in path {
            h = tree.lookup(&h, &name(p)).await?;
        }
        Ok(h)
    }

    #[tokio::test]
    async fn attributes_come_from_lstat() {
        let (dir, tree) = fixture();
        let root = dir.path().join("rootfs");
        let su = tree
            .getattr(&walk(&tree, &["demo", "bin", "su"]).await.unwrap())
            .await
            .unwrap();
        let m = std::fs::symlink_metadata(root.join("bin/su")).unwrap();
        assert_eq!(su.mode, 0o4755);
        assert_eq!(su.type_, ftype3::NF3REG);
        assert_eq!((su.fileid, su.size, su.uid), (m.ino(), 10, m.uid()));
        assert_eq!(su.mtime.seconds as i64, m.mtime());
        let tmp = tree
            .getattr(&walk(&tree, &["demo", "tmp"]).await.unwrap())
            .await
            .unwrap();
        assert_eq!((tmp.type_, tmp.mode), (ftype3::NF3DIR, 0o1777));
        let fifo = tree
            .getattr(&walk(&tree, &["demo", "fifo"]).await.unwrap())
            .await
            .unwrap();
        assert_eq!((fifo.type_, fifo.mode), (ftype3::NF3FIFO, 0o640));
        let null = attr_from(1, &std::fs::symlink_metadata("/dev/null").unwrap());
        assert_eq!(null.type_, ftype3::NF3CHR);
        assert_eq!((null.rdev.specdata1, null.rdev.specdata2), (1, 3));
    }

    #[tokio::test]
    async fn symlinks_are_returned_not_followed() {
        let (_dir, tree) = fixture();
        let link = walk(&tree, &["demo", "escape"]).await.unwrap();
        assert_eq!(tree.getattr(&link).await.unwrap().type_, ftype3::NF3LNK);
        assert_eq!(&tree.readlink(&link).await.unwrap().0[..], b"/etc/passwd");
        assert_eq!(tree.read(&link, 0, 100).await, Err(nfsstat3::NFS3ERR_INVAL));
        assert_eq!(
            tree.lookup(&link, &name("x")).await,
            Err(nfsstat3::NFS3ERR_NOTDIR)
        );
    }

    #[tokio::test]
    async fn names_are_single_components_inside_the_image() {
        let (_dir, tree) = fixture();
        let img = walk(&tree, &["demo"]).await.unwrap();
        assert_eq!(tree.lookup(&img, &name("..")).await, Ok(img));
        let bin = walk(&tree, &["demo", "bin"]).await.unwrap();
        assert_eq!(tree.lookup(&bin, &name("..")).await, Ok(img));
        assert_eq!(
            tree.lookup(&img, &name("bin/su")).await,
            Err(nfsstat3::NFS3ERR_ACCES)
        );
        assert_eq!(
            tree.lookup(&img, &name("")).await,
            Err(nfsstat3::NFS3ERR_NOENT)
        );
        assert_eq!(
            tree.lookup(&img, &name(&"a".repeat(300))).await,
            Err(nfsstat3::NFS3ERR_NAMETOOLONG)
        );
        assert!(tree.lookup_by_path("/").await.is_err());
        assert!(tree.lookup_by_path("/../demo").await.is_err());
        assert_eq!(tree.lookup_by_path("/demo/bin/..").await, Ok(img));
        assert_eq!(
            tree.lookup_by_path("/demo/bin/su").await,
            Err(nfsstat3::NFS3ERR_NOTDIR)
        );
    }

    #[tokio::test]
    async fn readdir_cookies_resume_where_a_page_ended() {
        let (_dir, tree) = fixture();
        let big = walk(&tree, &["demo", "big"]).await.unwrap();
        let mut seen = Vec::new();
        let mut cookie = 0;
        loop {
            let mut it = tree.readdirplus(&big, cookie).await.unwrap();
            // Pages of 100, like a client with a small buffer.
            let mut n = 0;
            let mut end = true;
            while let NextResult::Ok(e) = it.next().await {
                seen.push(String::from_utf8(e.name.0.to_vec()).unwrap());
                cookie = e.cookie;
                n += 1;
                if n == 100 {
                    end = false;
                    break;
                }
            }
            if end {
                break;
            }
        }
        assert_eq!(seen.len(), 1234 + 2);
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 1234 + 2, "no entry twice");
        assert!(matches!(
            tree.readdirplus(&big, 10_000).await.map(|_| ()),
            Err(nfsstat3::NFS3ERR_BAD_COOKIE)
        ));
    }

    #[tokio::test]
    async fn writes_are_refused() {
        let (_dir, tree) = fixture();
        let img = walk(&tree, &["demo"]).await.unwrap();
        assert_eq!(
            tree.mkdir(&img, &name("x")).await.map(|_| ()),
            Err(nfsstat3::NFS3ERR_ROFS)
        );
        assert_eq!(
            tree.remove(&img, &name("bin")).await,
            Err(nfsstat3::NFS3ERR_ROFS)
        );
    }
}

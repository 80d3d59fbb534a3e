//! The read-only trees served over NFS: one per image with `root: nfs`, under a composite root
//! that only names them (`/demo` is the `rootfs/` folder of image `demo`). This is the only code
//! that turns client-supplied names into paths: a name is one component, `..` never climbs above
//! an image's root, and symlinks are handed to the client, never followed here, but in a MOUNT
//! path (`Tree::mount`, as rpc.mountd resolves one), and there only while they stay inside the
//! image.
//!
//! File handles are `image id + a hash of the path inside it + type` (`handle.rs`), nothing
//! from a start-up counter or this host's inodes, so a handle given out before a restart, or
//! by another server holding the same revision, resolves here: a handle we have not met yet
//! triggers one walk of its image to find its path.
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
//! Split by type, each owning its state: `images.rs` (`Images`: the image trees, their opened
//! roots, FSSTAT, the walk of an image's folder), `handles.rs` (`Handles`: what each handle
//! names, the inodes met so far; `Node`), `listing.rs` (`Listings`: READDIR(PLUS) listings and
//! the LOOKUP answers kept outside them), `read.rs` (`Reads`: the files kept open and the small
//! ones kept mapped, READ's sources), `ram.rs` (`Ram`: `store: ram` contents, their loading and
//! dropping). Below them: `handle.rs` (the handle and its wire form), `attr.rs` (attributes
//! from lstat), `cache.rs` (the bounded caches), `at.rs` (stats and opens relative to an
//! image's opened root), and at the bottom `shared.rs` (the status codes, name checks, lock
//! helpers and tuning constants). This file holds the tree itself: it composes them and
//! answers each NFS call, taking the locks each part owns in the order the call needs them.
//! Its files import one way: this file, then the parts, then what is below them; no part
//! names `Tree`.

mod at;
mod attr;
mod cache;
mod handle;
mod handles;
mod images;
mod listing;
mod ram;
mod read;
mod shared;

pub use attr::{NF3BLK, NF3CHR, NF3DIR, NF3FIFO, NF3LNK, NF3REG, NF3SOCK, attr_from};
pub use handle::{TreeHandle, WIRE_LEN};
pub use handles::Node;
pub use listing::{Entries, Listing};
pub use read::MappedRead;
pub use shared::{MAX_READ, RAM_FILE_MAX, SMALL_FILE, Status};

use crate::proto::nfs3::{Attr, FsStat};
use attr::ftype_of;
use cache::{Named, settled};
use handle::ROOT;
use handles::Handles;
use images::{ImageTree, Images};
use listing::Listings;
use ram::Ram;
use read::{Readable, Reads, regular};
use shared::{Error, FRESH, LISTING_FRESH, REFRESH_SWEEP, check_name, lock};
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Instant;

/// The NFS filesystem: every image tree under one composite root.
pub struct Tree {
    images: Images,
    handles: Handles,
    listings: Listings,
    reads: Reads,
    ram: Ram,
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
            handles: Handles::new(),
            listings: Listings::new(),
            reads: Reads::new(),
            ram: Ram::new(),
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
        self.images.image_of(h)
    }

    /// Resolves a handle, from memory when its attributes are fresh; re-walks its image once
    /// if the handle is not known (after a restart, or given out by another server). A path
    /// found is checked against the handle (`TreeHandle::names`: its type; a version-1
    /// handle's inode).
    pub fn resolve(&self, h: &TreeHandle) -> Result<Node, Status> {
        let Some(img) = self.image_of(h)? else {
            return Ok(Node::Root);
        };
        let ram = self.images[img].in_ram();
        for attempt in 0..2 {
            let known = self.handles.known(h);
            if let Some(k) = known {
                if ram || k.checked.elapsed() < FRESH {
                    return Ok(Node::In {
                        img,
                        rel: k.rel,
                        attr: k.attr,
                    });
                }
                match self.images.lstat(img, &k.rel) {
                    Ok(st) if h.names(st.st_dev, st.st_ino, ftype_of(st.st_mode)) => {
                        let attr = self
                            .handles
                            .refresh(&self.images, img, *h, k.rel.clone(), &st);
                        return Ok(Node::In {
                            img,
                            rel: k.rel,
                            attr,
                        });
                    }
                    // Replaced or gone: forget it and look again.
                    _ => {
                        self.handles.forget(h);
                        self.reads.forget(h);
                    }
                }
            }
            if attempt == 0 && !self.handles.walk(&self.images, img, h.is_v1()) {
                break;
            }
        }
        Err(Error::Stale)
    }

    /// Attributes of an entry of a listing just handed out by `entries`: from memory as the
    /// listing left them (see `LISTING_FRESH`), from the disk only if unknown.
    pub fn entry_attr(&self, h: &TreeHandle) -> Result<Attr, Status> {
        if *h != ROOT
            && let Some(attr) = self.handles.attr(h)
        {
            return Ok(attr);
        }
        self.getattr(h)
    }

    pub fn getattr(&self, h: &TreeHandle) -> Result<Attr, Status> {
        Ok(match self.resolve(h)? {
            Node::Root => self.images.root_attr(),
            Node::In { attr, .. } => attr,
        })
    }

    /// FSSTAT of what `h` is in (see `Images::fsstat`).
    pub fn fsstat(&self, h: &TreeHandle) -> Result<FsStat, Status> {
        self.images.fsstat(h)
    }

    pub fn lookup(&self, dir: &TreeHandle, name: &[u8]) -> Result<(TreeHandle, Attr), Status> {
        let name = check_name(name)?;
        match self.resolve(dir)? {
            Node::Root => {
                if name == "." || name == ".." {
                    return Ok((ROOT, self.images.root_attr()));
                }
                let img = self
                    .images
                    .iter()
                    .position(|i| OsStr::new(&i.name) == name)
                    .ok_or(Error::NoEnt)?;
                self.handles.image_root(&self.images, img)
            }
            Node::In { img, rel, attr } => {
                if attr.ftype != NF3DIR {
                    return Err(Error::NotDir);
                }
                if name == "." {
                    return Ok((*dir, attr));
                }
                if name == ".." {
                    // `..` of an image root is the image root: a client never leaves it.
                    let parent: Arc<Path> = rel.parent().unwrap_or(Path::new("")).into();
                    return self.handles.stat(&self.images, img, parent);
                }
                // A cached listing answers without a syscall, "no such name" included.
                if let Some(found) = self.listings.child(dir, attr.mtime, name) {
                    let h = found?;
                    if let Ok(a) = self.getattr(&h) {
                        return Ok((h, a));
                    }
                }
                self.lookup_named(dir, img, &rel, attr.mtime, name)
            }
        }
    }

    /// LOOKUP of `name` in the folder `dir` (at `rel`, its mtime `dir_mtime`) with no listing
    /// cached: the answer kept in `Listings::names` while the folder has not changed, else an
    /// lstat, whose answer (found or not) is kept.
    fn lookup_named(
        &self,
        dir: &TreeHandle,
        img: usize,
        rel: &Path,
        dir_mtime: (u32, u32),
        name: &OsStr,
    ) -> Result<(TreeHandle, Attr), Status> {
        let key = (*dir, name.to_os_string());
        let named = self.listings.named(&key);
        if let Some(n) = named
            && n.dir_mtime == dir_mtime
            && n.at.elapsed() < LISTING_FRESH
        {
            match n.child {
                None => return Err(Error::NoEnt),
                Some(h) => {
                    if let Ok(a) = self.getattr(&h) {
                        return Ok((h, a));
                    }
                }
            }
        }
        let found = self.handles.stat(&self.images, img, rel.join(name).into());
        let child = match &found {
            Ok((h, _)) => Some(Some(*h)),
            Err(st) if *st == Error::NoEnt => Some(None),
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
            self.listings.keep_named(key, named);
        }
        found
    }

    /// MNT: the path starts with an image's export path (component by component), and may go
    /// on into its tree; the bare root is not mountable. The rest is resolved as rpc.mountd
    /// resolves a MOUNT path (`realpath`, then the export that covers the result): `..` goes
    /// up one folder, and a symlink on the way is followed, its relative target taken from
    /// the link's folder (libnfs's tests mount through one). The result must stay inside the
    /// image: a `..` above its root, an absolute target (it names the server's own file
    /// system, which no export of an image covers) and more than `MAX_LINKS` links are
    /// refused with MNT3ERR_ACCES, rpc.mountd's answer for a path no export covers
    /// (`mount_inside`). A name that is not there is NOENT, a file on the way NOTDIR.
    pub fn mount(&self, path: &[u8]) -> Result<TreeHandle, Status> {
        let parts: Vec<&[u8]> = path
            .split(|b| *b == b'/')
            .filter(|c| !c.is_empty())
            .collect();
        let (img, depth) = self.images.by_export(&parts).ok_or(Error::NoEnt)?;
        self.mount_inside(img, &parts[depth..])
    }

    /// `parts` resolved from image `img`'s root, symlinks followed (see `mount`).
    fn mount_inside(&self, img: usize, parts: &[&[u8]]) -> Result<TreeHandle, Status> {
        // The folders from the image's root down to where the walk is; `..` pops one.
        let mut dirs = vec![self.handles.image_root(&self.images, img)?];
        let mut todo: VecDeque<Vec<u8>> = parts.iter().map(|p| p.to_vec()).collect();
        let mut links = 0;
        while let Some(part) = todo.pop_front() {
            let (dir, attr) = *dirs.last().expect("the image's root stays");
            if attr.ftype != NF3DIR {
                return Err(Error::NotDir);
            }
            match &part[..] {
                b"." => {}
                b".." if dirs.len() == 1 => return Err(Error::Acces),
                b".." => {
                    dirs.pop();
                }
                name => {
                    let (h, a) = self.lookup(&dir, name)?;
                    if a.ftype != NF3LNK {
                        dirs.push((h, a));
                        continue;
                    }
                    links += 1;
                    let (_, target) = self.readlink(&h)?;
                    if links > MAX_LINKS || target.first() == Some(&b'/') {
                        return Err(Error::Acces);
                    }
                    for c in target.split(|b| *b == b'/').rev() {
                        if !c.is_empty() {
                            todo.push_front(c.to_vec());
                        }
                    }
                }
            }
        }
        match dirs.pop() {
            Some((h, attr)) if attr.ftype == NF3DIR => Ok(h),
            _ => Err(Error::NotDir),
        }
    }

    /// The entries of a directory for READDIR(PLUS), `.` and `..` first: the directory's
    /// attributes, and (name, handle) pairs from `cookie` on (a cookie counts entries seen).
    pub fn entries(&self, dir: &TreeHandle, cookie: u64) -> Result<(Attr, Entries), Status> {
        let node = self.resolve(dir)?;
        self.listings
            .entries(&self.images, &self.handles, dir, &node, cookie)
    }

    /// Rebuilds listings due (see `KEEP_FRESH`) every `REFRESH_SWEEP`, and every 30 sweeps
    /// drops the RAM contents of revisions removed from disk, until the tree is dropped: run
    /// on a thread of its own beside the service.
    pub fn keep_listings_fresh(tree: Weak<Tree>) {
        for sweep in 1u64.. {
            std::thread::sleep(REFRESH_SWEEP);
            let Some(tree) = tree.upgrade() else { break };
            tree.refresh_listings();
            if sweep % 30 == 0 {
                tree.drop_removed_ram();
            }
        }
    }

    /// Rebuilds the cached listings of disk images that are `LISTING_REFRESH` old and were read
    /// within `KEEP_FRESH`; each rebuild keeps its predecessor's last use. A folder that
    /// changed meanwhile gets its new listing from the next request, as ever.
    fn refresh_listings(&self) {
        let due = self.listings.due(&self.images);
        for (dir, used) in due {
            if let Ok(Node::In { img, rel, attr }) = self.resolve(&dir)
                && attr.ftype == NF3DIR
                // Failures (the folder gone) are the next request's to report.
                && let Ok(l) = self
                    .listings
                    .build(&self.images, &self.handles, &dir, img, &rel, &attr)
            {
                *lock(&l.used) = used;
            }
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
        read::append(attr, &from, offset, count, out)
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
        read::fill_front(attr, &from, offset, buf)
    }

    /// A READ answered from a mapping of the file (see `Reads::mapped`). None: read with
    /// `read`/`read_into` (a RAM image's file, bytes not cached, or a file that cannot be
    /// mapped).
    pub fn read_mapped(
        &self,
        h: &TreeHandle,
        offset: u64,
        count: usize,
    ) -> Result<Option<MappedRead>, Status> {
        let file = regular(self.resolve(h)?)?;
        if self.ram.holds(h) {
            return Ok(None);
        }
        self.reads
            .mapped(&self.images, &self.handles, h, file, offset, count)
    }

    /// A regular file's attributes and where its bytes are.
    fn readable(&self, h: &TreeHandle) -> Result<(Attr, Readable), Status> {
        let (img, rel, attr) = regular(self.resolve(h)?)?;
        if let Some(data) = self.ram.get(h) {
            return Ok((attr, Readable::Ram(data)));
        }
        let file = self.reads.open(&self.images, &self.handles, h, img, &rel)?;
        Ok((attr, Readable::File(file)))
    }

    pub fn readlink(&self, h: &TreeHandle) -> Result<(Attr, Vec<u8>), Status> {
        match self.resolve(h)? {
            Node::In { img, rel, attr } if attr.ftype == NF3LNK => {
                let target =
                    std::fs::read_link(self.images.full(img, &rel)).map_err(shared::io_status)?;
                Ok((attr, target.into_os_string().into_vec()))
            }
            _ => Err(Error::Inval),
        }
    }

    /// Loads every `store: ram` image not loaded yet: all attributes and listings, and the
    /// contents of files up to `RAM_FILE_MAX`. Shows progress on a terminal; logs one line
    /// per image.
    pub fn load_ram(&self) {
        for img in 0..self.images.iter().count() {
            self.load_if_ram(img);
        }
    }

    /// Loads image `img` into memory if it is `store: ram` and not loaded yet: a revision
    /// learned since start is loaded at its first MOUNT, which waits for it (and so does any
    /// other caller meanwhile); until then nothing of it is served from memory.
    pub fn load_if_ram(&self, img: usize) {
        let image = &self.images[img];
        if image.store_ram {
            image.loaded.get_or_init(|| {
                self.ram
                    .load(&self.images, &self.handles, &self.listings, img)
            });
        }
    }

    /// Drops from memory the file contents of `store: ram` images whose folder is gone (see
    /// `Ram::drop_removed`).
    fn drop_removed_ram(&self) {
        self.ram.drop_removed(&self.images);
    }
}

/// Symlinks a MOUNT path may go through, as Linux's path walk allows (MAXSYMLINKS).
const MAX_LINKS: usize = 40;

#[cfg(test)]
mod tests;

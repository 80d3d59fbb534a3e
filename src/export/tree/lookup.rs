//! Handles and names to inodes: resolving a handle (re-walking its image for one we have not
//! met), attributes kept fresh, LOOKUP inside one folder, and MOUNT by export path.

use super::at::stat_at;
use super::attr::{NF3DIR, NF3LNK, attr_from, attr_from_stat};
use super::cache::{Named, settled};
use super::handle::{ROOT, TreeHandle};
use super::ram::walk_tree;
use super::{
    Error, FRESH, LISTING_FRESH, REWALK_EVERY, Status, Tree, check_name, io_status, lock,
    read_lock, write_lock,
};
use crate::proto::nfs3::Attr;
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// What we know of one inode.
#[derive(Clone)]
pub(super) struct Known {
    /// Relative to the image root; "" for the root itself.
    pub(super) rel: Arc<Path>,
    pub(super) attr: Attr,
    pub(super) checked: Instant,
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

impl Tree {
    /// The image's root folder, opened (see `ImageTree::dir`); None if it cannot be.
    pub(super) fn root_dir(&self, img: usize) -> Option<Arc<OwnedFd>> {
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
    pub(super) fn lstat(&self, img: usize, rel: &Path) -> std::io::Result<libc::stat> {
        match self.root_dir(img) {
            Some(dir) => stat_at(&dir, rel),
            None => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
        }
    }

    pub(super) fn full(&self, img: usize, rel: &Path) -> PathBuf {
        if rel.as_os_str().is_empty() {
            self.images[img].root.clone()
        } else {
            self.images[img].root.join(rel)
        }
    }

    pub(super) fn remember(
        &self,
        img: usize,
        rel: Arc<Path>,
        m: &std::fs::Metadata,
    ) -> (TreeHandle, Attr) {
        let image = &self.images[img];
        let h = TreeHandle::new(image.id, m.dev(), m.ino());
        self.remember_attr(h, rel, attr_from(image.id, m))
    }

    pub(super) fn remember_stat(
        &self,
        img: usize,
        rel: Arc<Path>,
        st: &libc::stat,
    ) -> (TreeHandle, Attr) {
        let image = &self.images[img];
        let h = TreeHandle::new(image.id, st.st_dev, st.st_ino);
        self.remember_attr(h, rel, attr_from_stat(image.id, st))
    }

    pub(super) fn remember_attr(
        &self,
        h: TreeHandle,
        rel: Arc<Path>,
        attr: Attr,
    ) -> (TreeHandle, Attr) {
        write_lock(&self.known).insert(
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
        let ram = self.images[img].in_ram();
        for attempt in 0..2 {
            let known = read_lock(&self.known).get(h).cloned();
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
                        write_lock(&self.known).remove(h);
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
        Err(Error::Stale)
    }

    /// Attributes of an entry of a listing just handed out by `entries`: from memory as the
    /// listing left them (see `LISTING_FRESH`), from the disk only if unknown.
    pub fn entry_attr(&self, h: &TreeHandle) -> Result<Attr, Status> {
        if *h != ROOT
            && let Some(k) = read_lock(&self.known).get(h)
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
    pub(super) fn walk(&self, img: usize) -> bool {
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
                    .ok_or(Error::NoEnt)?;
                self.image_root(img)
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
                        .map_err(|_| Error::NoEnt)?;
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
    pub(super) fn lookup_named(
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
                None => return Err(Error::NoEnt),
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
            lock(&self.names).insert(key, named);
        }
        found
    }

    pub(super) fn image_root(&self, img: usize) -> Result<(TreeHandle, Attr), Status> {
        self.stat(img, Path::new("").into())
    }

    pub(super) fn stat(&self, img: usize, rel: Arc<Path>) -> Result<(TreeHandle, Attr), Status> {
        let st = self.lstat(img, &rel).map_err(io_status)?;
        Ok(self.remember_stat(img, rel, &st))
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
            .ok_or(Error::NoEnt)?;
        self.mount_inside(img, &parts[depth..])
    }

    /// `parts` resolved from image `img`'s root, symlinks followed (see `mount`).
    fn mount_inside(&self, img: usize, parts: &[&[u8]]) -> Result<TreeHandle, Status> {
        // The folders from the image's root down to where the walk is; `..` pops one.
        let mut dirs = vec![self.image_root(img)?];
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
}

/// Symlinks a MOUNT path may go through, as Linux's path walk allows (MAXSYMLINKS).
const MAX_LINKS: usize = 40;

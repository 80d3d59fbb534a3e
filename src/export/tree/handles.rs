//! What each handle names: the files met so far (`Handles`, handle -> path inside its image
//! and attributes, with when they were last checked), learned from stats, listings, opens and
//! walks of an image (for a handle not met yet: after a restart, or one another server gave
//! out); and a resolved handle (`Node`). The handles given out are named by path
//! (`TreeHandle::of_path`), and so are their fileids.

use super::attr::{attr_from, attr_from_stat};
use super::handle::TreeHandle;
use super::images::{Images, walk_tree};
use super::shared::{REWALK_EVERY, Status, io_status, lock, read_lock, write_lock};
use crate::proto::nfs3::Attr;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, RwLock};
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

/// The inodes met so far, by handle.
pub(super) struct Handles {
    known: RwLock<HashMap<TreeHandle, Known>>,
}

impl Handles {
    pub(super) fn new() -> Handles {
        Handles {
            known: RwLock::new(HashMap::new()),
        }
    }

    /// What `h` was last known as.
    pub(super) fn known(&self, h: &TreeHandle) -> Option<Known> {
        read_lock(&self.known).get(h).cloned()
    }

    /// The attributes `h` was last known with.
    pub(super) fn attr(&self, h: &TreeHandle) -> Option<Attr> {
        read_lock(&self.known).get(h).map(|k| k.attr)
    }

    /// Forgets `h` (its inode replaced or gone).
    pub(super) fn forget(&self, h: &TreeHandle) {
        write_lock(&self.known).remove(h);
    }

    /// The file at `rel` as `m` found it: its handle, remembered with its attributes.
    pub(super) fn remember(
        &self,
        images: &Images,
        img: usize,
        rel: Arc<Path>,
        m: &std::fs::Metadata,
    ) -> (TreeHandle, Attr) {
        let image = &images[img];
        let attr = attr_from(image.id, m);
        let h = TreeHandle::of_path(image.id, &rel, attr.ftype);
        self.remember_attr(h, rel, attr)
    }

    /// `remember` for a stat the kernel filled in directly.
    pub(super) fn remember_stat(
        &self,
        images: &Images,
        img: usize,
        rel: Arc<Path>,
        st: &libc::stat,
    ) -> (TreeHandle, Attr) {
        let image = &images[img];
        let attr = attr_from_stat(image.id, st);
        let h = TreeHandle::of_path(image.id, &rel, attr.ftype);
        self.remember_attr(h, rel, attr)
    }

    /// A handle met before, found again at `rel` by `st`: remembered afresh as it is (a
    /// version-1 handle keeps its inode's fileid).
    pub(super) fn refresh(
        &self,
        images: &Images,
        img: usize,
        h: TreeHandle,
        rel: Arc<Path>,
        st: &libc::stat,
    ) -> Attr {
        let attr = attr_from_stat(images[img].id, st);
        self.remember_attr(h, rel, attr).1
    }

    /// Remembers `h` as the file at `rel` with `attr`, its fileid the handle's.
    pub(super) fn remember_attr(
        &self,
        h: TreeHandle,
        rel: Arc<Path>,
        mut attr: Attr,
    ) -> (TreeHandle, Attr) {
        attr.fileid = h.fileid(attr.fileid);
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

    /// lstat of `rel` in image `img`, remembered.
    pub(super) fn stat(
        &self,
        images: &Images,
        img: usize,
        rel: Arc<Path>,
    ) -> Result<(TreeHandle, Attr), Status> {
        let st = images.lstat(img, &rel).map_err(io_status)?;
        Ok(self.remember_stat(images, img, rel, &st))
    }

    pub(super) fn image_root(
        &self,
        images: &Images,
        img: usize,
    ) -> Result<(TreeHandle, Attr), Status> {
        self.stat(images, img, Path::new("").into())
    }

    /// Walks an image to learn every file's handle (and with `inodes`, each one's version-1
    /// handle too, for a client mounted before handles were named by path); false if one ran
    /// too recently.
    pub(super) fn walk(&self, images: &Images, img: usize, inodes: bool) -> bool {
        let image = &images[img];
        {
            let mut last = lock(&image.last_walk);
            if last.is_some_and(|t| t.elapsed() < REWALK_EVERY) {
                return false;
            }
            *last = Some(Instant::now());
        }
        let found = walk_tree(&image.root, |_| {});
        tracing::debug!(image = %image.name, inodes = found.len(), "walked image for handles");
        let mut seen = std::collections::HashSet::with_capacity(found.len());
        for (rel, m) in found {
            let rel: Arc<Path> = rel.into();
            let (h, _) = self.remember(images, img, rel.clone(), &m);
            if !seen.insert(h) {
                tracing::error!(image = %image.name, path = %rel.display(),
                    "two paths of the image share one NFS handle (a 64-bit hash collision): \
                     clients may be given the other file for this one");
            }
            if inodes {
                let v1 = TreeHandle::new(image.id, m.dev(), m.ino());
                self.remember_attr(v1, rel, attr_from(image.id, &m));
            }
        }
        true
    }
}

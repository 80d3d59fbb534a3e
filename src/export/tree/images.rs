//! The image trees under the composite root: each image's name, export path, stable id and
//! folder, its root folder kept open (stats and opens go relative to it), its `store: ram`
//! state, its re-walk clock; the composite root's attributes, FSSTAT, and the walk of an
//! image's folder.

use super::at::stat_at;
use super::attr::NF3DIR;
use super::handle::{ROOT, TreeHandle, stable_hash};
use super::shared::{Error, FRESH, Status, WALK_LIMIT, io_status, lock};
use crate::export::slots::Slots;
use crate::proto::nfs3::{Attr, FsStat};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

pub(super) struct ImageTree {
    pub(super) name: String,
    /// The path clients mount it by (`/NAME` unless `images.NAME.nfs_export` says otherwise).
    pub(super) export: String,
    /// Stable id of the image name; never 0 (0 marks the composite root).
    pub(super) id: u64,
    pub(super) root: PathBuf,
    /// `store: ram`: loaded into memory once (`load_ram` at start, `load_if_ram` at the first
    /// MOUNT of a revision learned since) and never re-checked after.
    pub(super) store_ram: bool,
    /// Set once its load is done; until then it is served from disk.
    pub(super) loaded: OnceLock<()>,
    /// `store: ram`: what its load took in, FSSTAT's answer for it (`Images::fsstat`).
    pub(super) held: OnceLock<FsStat>,
    /// Its folder was removed (a pruned revision) and its contents dropped from memory.
    pub(super) dropped: AtomicBool,
    pub(super) last_walk: Mutex<Option<Instant>>,
    /// The root folder, opened: stats and opens go relative to it, so the kernel walks only
    /// the path inside the image. Checked against `root` when older than `FRESH` (an admin
    /// may put a new tree in its place).
    dir: Mutex<Option<OpenRoot>>,
}

impl ImageTree {
    pub(super) fn new(export: String, name: String, root: PathBuf, store_ram: bool) -> ImageTree {
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
    pub(super) fn in_ram(&self) -> bool {
        self.loaded.get().is_some()
    }
}

/// An image root opened: descriptor, its (dev, ino), when it was last checked.
type OpenRoot = (Arc<OwnedFd>, (u64, u64), Instant);

/// Every image tree, by index. Only ever added to (`push`: a revision learned at runtime), so
/// indices stay.
pub(super) struct Images {
    slots: Slots<ImageTree>,
}

impl std::ops::Index<usize> for Images {
    type Output = ImageTree;
    fn index(&self, img: usize) -> &ImageTree {
        &self.slots[img]
    }
}

impl FromIterator<ImageTree> for Images {
    fn from_iter<I: IntoIterator<Item = ImageTree>>(images: I) -> Images {
        Images {
            slots: images.into_iter().collect(),
        }
    }
}

impl Images {
    /// Adds an image; its index, or None when no more fit.
    pub(super) fn push(&self, image: ImageTree) -> Option<usize> {
        self.slots.push(image)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &ImageTree> {
        self.slots.iter()
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Which image a handle belongs to, without touching the disk (None: the composite root;
    /// Err: no image of ours).
    pub(super) fn image_of(&self, h: &TreeHandle) -> Result<Option<usize>, Status> {
        if *h == ROOT {
            return Ok(None);
        }
        self.slots
            .iter()
            .position(|i| i.id == h.image())
            .map(Some)
            .ok_or(Error::Stale)
    }

    /// The image whose export path starts `parts` (component by component), and how many of
    /// `parts` that path takes.
    pub(super) fn by_export(&self, parts: &[&[u8]]) -> Option<(usize, usize)> {
        self.slots.iter().enumerate().find_map(|(i, im)| {
            let export: Vec<&[u8]> = im
                .export
                .as_bytes()
                .split(|b| *b == b'/')
                .filter(|c| !c.is_empty())
                .collect();
            parts.starts_with(&export).then_some((i, export.len()))
        })
    }

    /// The image's root folder, opened (see `ImageTree::dir`); None if it cannot be.
    pub(super) fn root_dir(&self, img: usize) -> Option<Arc<OwnedFd>> {
        let image = &self[img];
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
            self[img].root.clone()
        } else {
            self[img].root.join(rel)
        }
    }

    /// FSSTAT of what `h` is in. An image served from disk: the file system holding its
    /// folder (statvfs), as knfsd reports an export's, free space included though the export
    /// is read-only (a local read-only mount shows it too, and a client's `df /` reading
    /// full would set off every disk-full alarm of the room). A `store: ram` image: the
    /// snapshot held, its files' bytes and its entries, nothing free (`ram.rs`). The
    /// composite root: nothing.
    pub(super) fn fsstat(&self, h: &TreeHandle) -> Result<FsStat, Status> {
        let Some(img) = self.image_of(h)? else {
            return Ok(FsStat::default());
        };
        let image = &self[img];
        if image.in_ram()
            && let Some(held) = image.held.get()
        {
            return Ok(*held);
        }
        let path =
            std::ffi::CString::new(image.root.as_os_str().as_bytes()).map_err(|_| Error::Io)?;
        let st = crate::sys::fs::statvfs(&path).map_err(io_status)?;
        Ok(FsStat::from_statvfs(
            st.f_frsize,
            st.f_blocks,
            st.f_bfree,
            st.f_bavail,
            st.f_files,
            st.f_ffree,
        ))
    }

    /// The composite root's attributes.
    pub(super) fn root_attr(&self) -> Attr {
        Attr {
            ftype: NF3DIR,
            mode: 0o555,
            nlink: 2 + self.len() as u32,
            size: 4096,
            used: 4096,
            fileid: 1,
            ..Attr::default()
        }
    }
}

/// Every entry below `root` (the root itself last) with its lstat metadata; `progress` gets
/// the count so far.
pub(super) fn walk_tree(
    root: &Path,
    mut progress: impl FnMut(usize),
) -> Vec<(PathBuf, std::fs::Metadata)> {
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

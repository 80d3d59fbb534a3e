//! Directory listings and names (`Listings`): listings built sorted with every child's
//! attributes, cached until the folder changes, found due a rebuild in the background while in
//! use, and paged out by READDIR(PLUS) cursors; and the LOOKUP answers kept for folders with
//! no listing cached.

use super::attr::NF3DIR;
use super::cache::{Clock, Named, settled};
use super::handle::{ROOT, TreeHandle};
use super::handles::{Handles, Node};
use super::images::Images;
use super::shared::{
    DIR_CACHE, Error, KEEP_FRESH, LISTING_FRESH, LISTING_REFRESH, NAME_CACHE, Status, io_status,
    lock,
};
use crate::proto::nfs3::{Attr, PlusEntries};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// A directory's children, sorted by name, so that a cookie (an index) means the same entry on
/// every page and a LOOKUP is a binary search.
pub struct Listing {
    pub(super) mtime: (u32, u32),
    pub(super) built: Instant,
    /// Last read by a READDIR(PLUS); carried over to its rebuilds (see `KEEP_FRESH`).
    pub(super) used: Mutex<Instant>,
    /// The directory's `..` (the image root's is itself).
    pub(super) parent: TreeHandle,
    pub children: Vec<(OsString, TreeHandle)>,
    /// Each child's attributes as the listing found them (in `children` order, in one array:
    /// a page reads them in sequence).
    pub(super) attrs: Vec<Attr>,
    /// The children as READDIRPLUS entries, encoded by the NFS service on first use.
    pub plus: OnceLock<PlusEntries>,
}

impl Listing {
    pub(super) fn new(
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

/// A READDIR(PLUS) cursor: `.`, `..`, then the listing.
pub struct Entries {
    pub(super) dir: TreeHandle,
    pub(super) parent: TreeHandle,
    pub(super) listing: Arc<Listing>,
    pub(super) next: usize,
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

/// The listings kept by folder, and the names looked up outside them.
pub(super) struct Listings {
    pub(super) cached: Mutex<HashMap<TreeHandle, Arc<Listing>>>,
    /// LOOKUP answers in folders with no listing cached, by (folder, name): a room of
    /// clients looking up the same names costs one lstat, not one each.
    pub(super) names: Mutex<Clock<(TreeHandle, OsString), Named>>,
}

impl Listings {
    pub(super) fn new() -> Listings {
        Listings {
            cached: Mutex::new(HashMap::new()),
            names: Mutex::new(Clock::new(NAME_CACHE)),
        }
    }

    /// The entries of the directory `dir`, resolved to `node`, for READDIR(PLUS), `.` and
    /// `..` first: the directory's attributes, and (name, handle) pairs from `cookie` on (a
    /// cookie counts entries seen).
    pub(super) fn entries(
        &self,
        images: &Images,
        handles: &Handles,
        dir: &TreeHandle,
        node: &Node,
        cookie: u64,
    ) -> Result<(Attr, Entries), Status> {
        let (attr, listing) = match node {
            Node::Root => {
                let children = (0..images.len())
                    .filter_map(|i| {
                        let (h, a) = handles.image_root(images, i).ok()?;
                        Some((OsString::from(&images[i].name), h, a))
                    })
                    .collect();
                (
                    images.root_attr(),
                    Arc::new(Listing::new((0, 0), ROOT, children)),
                )
            }
            Node::In { img, rel, attr } => {
                if attr.ftype != NF3DIR {
                    return Err(Error::NotDir);
                }
                (*attr, self.listing(images, handles, dir, *img, rel, attr)?)
            }
        };
        let parent = listing.parent;
        let start = usize::try_from(cookie).map_err(|_| Error::BadCookie)?;
        if start > listing.children.len() + 2 {
            return Err(Error::BadCookie);
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

    pub(super) fn listing(
        &self,
        images: &Images,
        handles: &Handles,
        dir: &TreeHandle,
        img: usize,
        rel: &Path,
        attr: &Attr,
    ) -> Result<Arc<Listing>, Status> {
        let ram = images[img].in_ram();
        if let Some(l) = lock(&self.cached).get(dir)
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
        self.build(images, handles, dir, img, rel, attr)
    }

    /// Reads folder `dir` (at `rel`, with attributes `attr`) and stats its children; keeps the
    /// listing unless the folder may still change within its mtime's clock tick.
    pub(super) fn build(
        &self,
        images: &Images,
        handles: &Handles,
        dir: &TreeHandle,
        img: usize,
        rel: &Path,
        attr: &Attr,
    ) -> Result<Arc<Listing>, Status> {
        let ram = images[img].in_ram();
        let up: Arc<Path> = rel.parent().unwrap_or(Path::new("")).into();
        let (parent, _) = handles.stat(images, img, up)?;
        let mut children = Vec::new();
        for e in std::fs::read_dir(images.full(img, rel)).map_err(io_status)? {
            let e = e.map_err(io_status)?;
            // Gone since the listing was read: left out.
            let Ok(m) = e.metadata() else { continue };
            let name = e.file_name();
            let (h, a) = handles.remember(images, img, rel.join(&name).into(), &m);
            children.push((name, h, a));
        }
        let l = Arc::new(Listing::new(attr.mtime, parent, children));
        if !ram && !settled(attr.mtime) {
            return Ok(l);
        }
        let mut cache = lock(&self.cached);
        if cache.len() >= DIR_CACHE {
            cache.clear();
        }
        cache.insert(*dir, l.clone());
        Ok(l)
    }

    /// The cached listings of disk images that are `LISTING_REFRESH` old and were read within
    /// `KEEP_FRESH`, with their last use.
    pub(super) fn due(&self, images: &Images) -> Vec<(TreeHandle, Instant)> {
        // A RAM image's listings never go stale: left out before anything is resolved.
        let on_disk =
            |h: &TreeHandle| matches!(images.image_of(h), Ok(Some(i)) if !images[i].in_ram());
        lock(&self.cached)
            .iter()
            .filter(|(h, l)| l.built.elapsed() >= LISTING_REFRESH && on_disk(h))
            .map(|(h, l)| (*h, *lock(&l.used)))
            .filter(|(_, used)| used.elapsed() < KEEP_FRESH)
            .collect()
    }

    /// `name` in the folder `dir` as its listing has it, if one is cached for the folder's
    /// mtime `dir_mtime`: its handle, or NOENT ("no such name" needs no syscall either).
    pub(super) fn child(
        &self,
        dir: &TreeHandle,
        dir_mtime: (u32, u32),
        name: &OsStr,
    ) -> Option<Result<TreeHandle, Status>> {
        let listing = lock(&self.cached).get(dir).cloned();
        let l = listing.filter(|l| l.mtime == dir_mtime)?;
        Some(
            l.children
                .binary_search_by(|(n, _)| n.as_os_str().cmp(name))
                .map(|i| l.children[i].1)
                .map_err(|_| Error::NoEnt),
        )
    }

    /// The LOOKUP answer kept for (folder, name), if any.
    pub(super) fn named(&self, key: &(TreeHandle, OsString)) -> Option<Named> {
        lock(&self.names).get(key).copied()
    }

    /// Keeps a LOOKUP answer for (folder, name).
    pub(super) fn keep_named(&self, key: (TreeHandle, OsString), named: Named) {
        lock(&self.names).insert(key, named);
    }
}

//! `store: ram` (`Ram`): the small files' contents held in memory, loaded with every inode's
//! attributes and every folder's listing, with a progress line when stderr is a terminal; the
//! disk is not touched for them afterwards. An image is loaded at start, a revision learned
//! since at its first MOUNT; a revision's contents are dropped once its folder is removed.

use super::attr::{NF3DIR, NF3REG};
use super::handle::TreeHandle;
use super::handles::Handles;
use super::images::{Images, walk_tree};
use super::listing::Listings;
use super::shared::{RAM_FILE_MAX, read_lock, write_lock};
use std::collections::HashMap;
use std::io::IsTerminal as _;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, RwLock};
use std::time::Instant;

/// `store: ram` images' file contents, by handle.
pub(super) struct Ram {
    pub(super) contents: RwLock<HashMap<TreeHandle, Arc<[u8]>>>,
}

impl Ram {
    pub(super) fn new() -> Ram {
        Ram {
            contents: RwLock::new(HashMap::new()),
        }
    }

    /// The contents of `h`, if held.
    pub(super) fn get(&self, h: &TreeHandle) -> Option<Arc<[u8]>> {
        read_lock(&self.contents).get(h).cloned()
    }

    /// Whether the contents of `h` are held.
    pub(super) fn holds(&self, h: &TreeHandle) -> bool {
        read_lock(&self.contents).contains_key(h)
    }

    /// Loads image `img`: every inode's attributes (into `handles`) and every folder's
    /// listing (into `listings`), and the contents of files up to `RAM_FILE_MAX`. Shows
    /// progress on a terminal; logs one line.
    pub(super) fn load(&self, images: &Images, handles: &Handles, listings: &Listings, img: usize) {
        let image = &images[img];
        let tty = std::io::stderr().is_terminal();
        let started = Instant::now();
        let (mut files, mut bytes) = (0u64, 0u64);
        // Every regular file's bytes, held in memory or not, for FSSTAT.
        let mut file_bytes = 0u64;
        let found = walk_tree(&image.root, |n| {
            if tty && n % 1000 == 0 {
                eprint!("\rloading image {}: {n} entries", image.name);
            }
        });
        let entries = found.len();
        let mut dirs = Vec::new();
        for (i, (rel, m)) in found.into_iter().enumerate() {
            let rel: Arc<Path> = rel.into();
            let (h, attr) = handles.remember(images, img, rel.clone(), &m);
            if attr.ftype == NF3REG {
                file_bytes += m.len();
            }
            if attr.ftype == NF3DIR {
                dirs.push((h, rel, attr));
            } else if attr.ftype == NF3REG
                && m.len() <= RAM_FILE_MAX
                && let Ok(data) = std::fs::read(images.full(img, &rel))
            {
                files += 1;
                bytes += data.len() as u64;
                write_lock(&self.contents).insert(h, data.into());
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
            let _ = listings.listing(images, handles, h, img, rel, attr);
        }
        // A snapshot in memory: its entries and bytes, none of it free.
        let _ = image.held.set(crate::proto::nfs3::FsStat {
            tbytes: file_bytes,
            tfiles: entries as u64,
            ..Default::default()
        });
        if tty {
            eprintln!();
        }
        tracing::info!(
            image = %image.name, entries, dirs = dirs.len(), files, bytes,
            ms = started.elapsed().as_millis() as u64, "nfs image loaded into ram"
        );
    }

    /// Drops from memory the file contents of `store: ram` images whose folder is gone (a
    /// revision pruned once no client used it), so a daemon that runs through many revisions
    /// holds only those on disk.
    pub(super) fn drop_removed(&self, images: &Images) {
        for image in images.iter() {
            if !image.in_ram()
                || image.dropped.load(Relaxed)
                || std::fs::symlink_metadata(&image.root).is_ok()
            {
                continue;
            }
            image.dropped.store(true, Relaxed);
            let id = image.id;
            let mut contents = write_lock(&self.contents);
            let before = contents.len();
            contents.retain(|h, _| h.image() != id);
            let files = before - contents.len();
            drop(contents);
            tracing::info!(image = %image.name, files, "nfs image folder removed: its contents dropped from ram");
        }
    }
}

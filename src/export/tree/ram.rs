//! `store: ram`: every inode's attributes and the small files' contents loaded into memory,
//! with a progress line when stderr is a terminal; the disk is not touched for them afterwards.
//! An image is loaded at start, a revision learned since at its first MOUNT; a revision's
//! contents are dropped once its folder is removed.

use super::attr::{NF3DIR, NF3REG};
use super::{RAM_FILE_MAX, Tree, WALK_LIMIT, write_lock};
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

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

impl Tree {
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
            image.loaded.get_or_init(|| self.load(img));
        }
    }

    fn load(&self, img: usize) {
        let image = &self.images[img];
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
            let (h, attr) = self.remember(img, rel.clone(), &m);
            if attr.ftype == NF3REG {
                file_bytes += m.len();
            }
            if attr.ftype == NF3DIR {
                dirs.push((h, rel, attr));
            } else if attr.ftype == NF3REG
                && m.len() <= RAM_FILE_MAX
                && let Ok(data) = std::fs::read(self.full(img, &rel))
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
            let _ = self.listing(h, img, rel, attr);
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
    pub(super) fn drop_removed_ram(&self) {
        for image in self.images.iter() {
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

//! `store: ram`: every inode's attributes and the small files' contents loaded at start, with
//! a progress line when stderr is a terminal; the disk is not touched for them afterwards.

use super::attr::{NF3DIR, NF3REG};
use super::{RAM_FILE_MAX, Tree, WALK_LIMIT, write};
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
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
}

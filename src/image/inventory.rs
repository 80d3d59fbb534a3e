//! A revision's manifest on disk (`revs/ID/manifest`, the codec is `manifest.rs`): the walk
//! of a revision's folder that makes it (the kernel, the initrd, the root tree), written beside
//! the revision at import, and made and written on first use for a revision imported before
//! manifests existed.

use super::manifest::{Entry, Kind, Manifest};
use crate::config::Image;
use anyhow::{Context as _, bail};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

/// The manifest's file in a revision's folder.
pub const FILE: &str = "manifest";

/// The manifest of the revision built in folder `rev` (`revs/ID/`, or an import's build
/// folder) for `image`'s names, naming revision `hash`; `digest` gives each regular file's
/// SHA-256 (from what an import hashed already, or read again).
pub fn walk(
    image: &Image,
    rev: &Path,
    hash: &str,
    digest: &mut dyn FnMut(&Path) -> anyhow::Result<[u8; 32]>,
) -> anyhow::Result<Manifest> {
    let mut entries = Vec::new();
    for name in [&image.kernel_name, &image.initrd_name] {
        entries.push(entry(rev, Path::new(name), digest)?);
    }
    let tree = PathBuf::from(&image.root_tree_name);
    let mut stack = vec![tree];
    while let Some(rel) = stack.pop() {
        let e = entry(rev, &rel, digest)?;
        if e.kind == Kind::Dir {
            let here = rev.join(&rel);
            for c in
                std::fs::read_dir(&here).with_context(|| format!("reading {}", here.display()))?
            {
                stack.push(rel.join(c?.file_name()));
            }
        }
        entries.push(e);
    }
    let mut m = Manifest {
        revision: hash.to_string(),
        kernel: image.kernel_name.clone(),
        initrd: image.initrd_name.clone(),
        tree: image.root_tree_name.clone(),
        entries,
    };
    m.sort();
    Ok(m)
}

fn entry(
    rev: &Path,
    rel: &Path,
    digest: &mut dyn FnMut(&Path) -> anyhow::Result<[u8; 32]>,
) -> anyhow::Result<Entry> {
    let full = rev.join(rel);
    let m =
        std::fs::symlink_metadata(&full).with_context(|| format!("reading {}", full.display()))?;
    let ft = m.file_type();
    let kind = if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        Kind::File(digest(&full)?)
    } else if ft.is_symlink() {
        Kind::Symlink(
            std::fs::read_link(&full)?
                .into_os_string()
                .into_encoded_bytes(),
        )
    } else if ft.is_char_device() {
        Kind::Char(m.rdev())
    } else if ft.is_block_device() {
        Kind::Block(m.rdev())
    } else if ft.is_fifo() {
        Kind::Fifo
    } else {
        Kind::Socket
    };
    Ok(Entry {
        path: rel.as_os_str().as_encoded_bytes().to_vec(),
        size: if ft.is_file() { m.len() } else { 0 },
        kind,
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        mtime: m.mtime(),
        mtime_nsec: m.mtime_nsec(),
    })
}

/// Writes `m` as folder `rev`'s manifest (aside, then renamed in).
pub fn write(rev: &Path, m: &Manifest) -> anyhow::Result<()> {
    let path = rev.join(FILE);
    let tmp = rev.join(format!(".{FILE}.{}", std::process::id()));
    std::fs::write(&tmp, m.encode()).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
}

/// Revision `id`'s manifest, as encoded: its file, or, for a revision imported before
/// manifests were written, made from its folder (every file read) and written for next time.
pub fn of_revision(image: &Image, id: &str) -> anyhow::Result<Vec<u8>> {
    let Some(rev) = super::store::read(&image.dir, id)? else {
        bail!("image {}: no revision {id}", image.name);
    };
    let folder = super::store::rev_dir(&image.dir, id);
    match std::fs::read(folder.join(FILE)) {
        Ok(text) => return Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", folder.display())),
    }
    let m = walk(image, &folder, &rev.meta.hash, &mut |p| {
        super::objects::file_digest(p)
    })?;
    let got = m.content_hash()?;
    if got != rev.meta.hash {
        bail!(
            "image {}: revision {id}'s files make content hash {got}, not its {}: it was \
             changed after its import (docs/chunks.md)",
            image.name,
            rev.meta.hash
        );
    }
    // Another request may write it at the same time: the same bytes, renamed in whole.
    let _ = write(&folder, &m);
    Ok(m.encode())
}

/// A file of image `image` holding the bytes of digest `digest` (hex): its object in the
/// store, else (a file with extended attributes is no object, `objects::put`) a file of a
/// revision whose manifest names the digest. The caller checks nothing: the fetching side
/// hashes what it gets.
pub fn file_with(image: &Image, digest: &str) -> Option<PathBuf> {
    let d = super::manifest::digest_of(digest).ok()?;
    if let Some(object) = super::objects::find(&image.dir, &d) {
        return Some(object);
    }
    for rev in super::store::list(&image.dir).ok()? {
        let folder = super::store::rev_dir(&image.dir, &rev.id);
        let Ok(text) = std::fs::read(folder.join(FILE)) else {
            continue;
        };
        let Ok(m) = Manifest::decode(&text) else {
            continue;
        };
        if let Some(e) = m.entries.iter().find(|e| e.kind == Kind::File(d)) {
            let path = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&e.path);
            return Some(folder.join(path));
        }
    }
    None
}

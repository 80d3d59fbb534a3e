//! The block manifest beside an NBD root image (`rootfs.img.chunks`, docs/swarm.md): made
//! whenever bootpool builds the image (`import::squashfs`), and found by its digest among an
//! image's root images for the clients' agents (`service/http/blocks.rs`). The format is
//! `blocks.rs`'s.

use super::blocks::{self, Blocks, Sha};
use super::store;
use crate::config::Image;
use crate::config::names::revision;
use anyhow::Context;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The manifest of the root image at `image`: its path with `.chunks` added.
pub fn path_of(image: &Path) -> PathBuf {
    let mut p = image.as_os_str().to_owned();
    p.push(".chunks");
    PathBuf::from(p)
}

/// Reads the root image at `image` once and writes its manifest beside it (aside, then
/// renamed in, so a reader never finds half of one); its digest.
pub fn make(image: &Path) -> anyhow::Result<Sha> {
    let file =
        std::fs::File::open(image).with_context(|| format!("opening {}", image.display()))?;
    let b = Blocks::of_reader(
        std::io::BufReader::with_capacity(1 << 20, file),
        blocks::CHUNK,
    )
    .with_context(|| format!("reading {}", image.display()))?;
    let out = path_of(image);
    let tmp = out.with_file_name(format!(
        ".{}.{}",
        out.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, b.encode()).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &out).with_context(|| format!("moving {} in", out.display()))?;
    Ok(b.digest())
}

/// `make` for a root image that has no manifest beside it yet (one built before manifests
/// were made); nothing for one that has.
pub fn make_missing(image: &Path) -> anyhow::Result<()> {
    if image.is_file() && !path_of(image).is_file() {
        make(image)?;
    }
    Ok(())
}

/// The digest of the manifest beside the root image at `image`, made first when there is
/// none or it is older than the image or of another size (an image rebuilt by hand).
pub fn current(image: &Path) -> anyhow::Result<Sha> {
    let meta = std::fs::metadata(image).with_context(|| format!("reading {}", image.display()))?;
    let beside = path_of(image);
    let fresh = std::fs::metadata(&beside)
        .and_then(|m| m.modified())
        .is_ok_and(|at| meta.modified().is_ok_and(|img| at >= img));
    if fresh
        && let Ok(text) = std::fs::read(&beside)
        && Blocks::decode(&text).is_ok_and(|b| b.size == meta.len())
    {
        return Ok(blocks::sha(&text));
    }
    make(image)
}

/// The digest of the manifest beside the root image at `image`, when there is one of the
/// image's size and no older than it; never made here (a boot's script asks, and must not
/// read a whole image). Kept by the manifest's stamp: a boot costs two stats.
pub fn beside(image: &Path) -> Option<Sha> {
    static SEEN: std::sync::LazyLock<Mutex<HashMap<PathBuf, (Stamp, Sha)>>> =
        std::sync::LazyLock::new(Default::default);
    let manifest = path_of(image);
    let (of_image, now) = (stamp(image)?, stamp(&manifest)?);
    if now.3 < of_image.3 {
        return None;
    }
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((was, digest)) = seen.get(&manifest)
        && *was == now
    {
        return Some(*digest);
    }
    let text = std::fs::read(&manifest).ok()?;
    if !Blocks::decode(&text).is_ok_and(|b| b.size == of_image.2) {
        return None;
    }
    let digest = blocks::sha(&text);
    if seen.len() >= Found::KEPT {
        seen.clear();
    }
    seen.insert(manifest, (now, digest));
    Some(digest)
}

/// A root image whose manifest has the digest asked for.
#[derive(Debug)]
pub struct Found {
    /// The root image's file.
    pub image: PathBuf,
    /// The manifest's text, as it lies beside the image, and what it says.
    pub text: Arc<Vec<u8>>,
    pub blocks: Arc<Blocks>,
}

/// The manifests found so far, by image folder and digest, each with the stamp of its file
/// (device, inode, length, mtime) when it was read: a chunk's request then costs two stats,
/// where reading and hashing the manifest again would cost a pass over it (1 MB for a 4 GB
/// root) for every 256 KiB sent. At most `Found::KEPT` entries (one per root image served);
/// past that it starts again.
#[derive(Default)]
pub struct Known(Mutex<HashMap<Key, (Stamp, Arc<Found>)>>);

/// An image folder and a manifest's digest.
type Key = (PathBuf, Sha);

/// A file's identity and version as a stat gives them.
type Stamp = (u64, u64, u64, std::time::SystemTime);

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.len(), m.modified().ok()?))
}

impl Found {
    const KEPT: usize = 256;
}

/// The root image of `image` (of its active revision first, then of every revision on disk,
/// or the image itself for a folder without revisions) whose manifest has `digest`, from
/// `known` while its manifest's file is unchanged. A manifest whose size is not its image's
/// (an image replaced by hand since) names nothing.
pub fn find(image: &Image, digest: &Sha, known: &Known) -> Option<Arc<Found>> {
    let key = (image.dir.clone(), *digest);
    let held = known
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned();
    if let Some((was, found)) = held
        && stamp(&path_of(&found.image)) == Some(was)
        && std::fs::metadata(&found.image).is_ok_and(|m| m.len() == found.blocks.size)
    {
        return Some(found);
    }
    let mut candidates = Vec::new();
    if store::managed(&image.dir) {
        if let Ok(Some(id)) = store::active(&image.dir) {
            candidates.push(revision(image, &id).root_image());
        }
        for r in store::list(&image.dir).unwrap_or_default() {
            candidates.push(revision(image, &r.id).root_image());
        }
    } else {
        candidates.push(image.root_image());
    }
    let (was, found) = candidates.into_iter().find_map(|path| {
        let beside = path_of(&path);
        let was = stamp(&beside)?;
        let text = std::fs::read(&beside).ok()?;
        if blocks::sha(&text) != *digest {
            return None;
        }
        let blocks = Blocks::decode(&text).ok()?;
        let len = std::fs::metadata(&path).ok()?.len();
        (len == blocks.size).then(|| {
            let found = Found {
                image: path,
                text: Arc::new(text),
                blocks: Arc::new(blocks),
            };
            (was, Arc::new(found))
        })
    })?;
    let mut held = known.0.lock().unwrap_or_else(|e| e.into_inner());
    if held.len() >= Found::KEPT {
        held.clear();
    }
    held.insert(key, (was, found.clone()));
    Some(found)
}

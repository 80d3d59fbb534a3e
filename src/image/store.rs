//! An image's revisions on disk: `DIR/revs/ID/` (the kernel, the initrd, the NFS tree, the NBD
//! image if an NBD pool boots the image, and `revision.json`; regular files are links to
//! `DIR/objects/`), the `active` pointer (one line, replaced by rename, so a
//! reader sees the old revision or the new one, never half of either), the `history` of
//! activations (what `rollback` goes back along), and `.lock` (one importer or activator at a
//! time). `DIR` is `images.NAME.dir`. A folder without `revs/` is an image assembled by
//! hand, served as it is.

use crate::config::names::{REVS, is_id};
use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};

pub const ACTIVE: &str = "active";
pub const HISTORY: &str = "history";
pub const META: &str = "revision.json";
const LOCK: &str = ".lock";

/// What `revision.json` says of a revision.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Meta {
    /// `rN`: the Nth revision imported into this image.
    pub seq: u64,
    /// The content hash (sha256, hex) of the tree, kernel and initrd.
    pub hash: String,
    /// What it was imported from, and as what (`tree`, `tarball`, `oci`).
    pub source: String,
    pub format: String,
    /// Unix seconds.
    pub imported_at: u64,
    /// Bytes of regular files in the tree.
    pub tree_bytes: u64,
    pub entries: u64,
}

/// One revision found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    /// The folder name under `revs/`: the hash's first 12 hex digits.
    pub id: String,
    pub meta: Meta,
}

impl Revision {
    /// `r3`.
    pub fn label(&self) -> String {
        format!("r{}", self.meta.seq)
    }
}

/// The revision folder name of a content hash.
pub fn id_of(hash: &str) -> String {
    hash.chars().take(12).collect()
}

/// Does `dir` hold revisions (rather than one image assembled by hand)?
pub fn managed(dir: &Path) -> bool {
    dir.join(REVS).is_dir()
}

pub fn rev_dir(dir: &Path, id: &str) -> PathBuf {
    dir.join(REVS).join(id)
}

/// Every complete revision, oldest first.
pub fn list(dir: &Path) -> anyhow::Result<Vec<Revision>> {
    let revs = dir.join(REVS);
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(&revs) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("reading {}", revs.display())),
    };
    for e in entries {
        let e = e.with_context(|| format!("reading {}", revs.display()))?;
        let id = e.file_name().to_string_lossy().into_owned();
        if !is_id(&id) {
            continue;
        }
        if let Some(r) = read(dir, &id)? {
            out.push(r);
        }
    }
    out.sort_by_key(|r| r.meta.seq);
    Ok(out)
}

/// The revision `id`, if it is on disk.
pub fn read(dir: &Path, id: &str) -> anyhow::Result<Option<Revision>> {
    if !is_id(id) {
        return Ok(None);
    }
    let path = rev_dir(dir, id).join(META);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let meta: Meta = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a revision record", path.display()))?;
    Ok(Some(Revision {
        id: id.to_string(),
        meta,
    }))
}

/// The active revision's id, if one was activated.
pub fn active(dir: &Path) -> anyhow::Result<Option<String>> {
    let path = dir.join(ACTIVE);
    match std::fs::read_to_string(&path) {
        Ok(t) => {
            let id = t.trim().to_string();
            if !is_id(&id) {
                bail!("{}: `{id}` is not a revision id", path.display());
            }
            Ok(Some(id))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The revision a name given on the command line means: `r3`, an id, or an id's prefix.
pub fn find(dir: &Path, name: &str) -> anyhow::Result<Revision> {
    let all = list(dir)?;
    let hits: Vec<&Revision> = match name.strip_prefix('r').and_then(|n| n.parse::<u64>().ok()) {
        Some(seq) => all.iter().filter(|r| r.meta.seq == seq).collect(),
        None if name.len() >= 4 => all.iter().filter(|r| r.id.starts_with(name)).collect(),
        None => vec![],
    };
    match hits.as_slice() {
        [one] => Ok((*one).clone()),
        [] => bail!(
            "{}: no revision `{name}` (bootpool image list shows them)",
            dir.display()
        ),
        _ => bail!(
            "{}: `{name}` names several revisions; give more of the id",
            dir.display()
        ),
    }
}

/// Makes `id` the active revision: the pointer is replaced by rename, and the history gets a
/// line.
pub fn activate(dir: &Path, id: &str) -> anyhow::Result<()> {
    if read(dir, id)?.is_none() {
        bail!("{}: no revision {id}", dir.display());
    }
    let tmp = dir.join(format!(".{ACTIVE}.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        writeln!(f, "{id}")?;
        f.sync_all()?;
        std::fs::rename(&tmp, dir.join(ACTIVE))?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().with_context(|| format!("writing {}", dir.join(ACTIVE).display()))?;
    let mut h = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(HISTORY))
        .with_context(|| format!("opening {}", dir.join(HISTORY).display()))?;
    writeln!(h, "{} {id}", now()).context("appending to the history")?;
    Ok(())
}

/// The revision activated before the active one that is still on disk.
pub fn previous(dir: &Path) -> anyhow::Result<Option<String>> {
    let Some(current) = active(dir)? else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(dir.join(HISTORY)).unwrap_or_default();
    let ids: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    // Back along the history from the current activation.
    let last = ids.iter().rposition(|i| *i == current).unwrap_or(ids.len());
    for id in ids[..last].iter().rev() {
        if *id != current && read(dir, id)?.is_some() {
            return Ok(Some(id.to_string()));
        }
    }
    Ok(None)
}

/// Unix seconds now.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The image folder's lock: one import, activation or prune at a time.
pub struct Lock {
    _file: std::fs::File,
}

pub fn lock(dir: &Path) -> anyhow::Result<Lock> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(LOCK);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    if crate::sys::fs::try_lock_exclusive(std::os::fd::AsFd::as_fd(&file)).is_err() {
        bail!(
            "{} is locked: another `bootpool image` command is working on this image",
            path.display()
        );
    }
    Ok(Lock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(dir: &Path, seq: u64, hash: &str) -> String {
        let id = id_of(hash);
        let d = rev_dir(dir, &id);
        std::fs::create_dir_all(&d).unwrap();
        let meta = Meta {
            seq,
            hash: hash.into(),
            source: "x".into(),
            format: "tree".into(),
            imported_at: 0,
            tree_bytes: 0,
            entries: 0,
        };
        std::fs::write(d.join(META), serde_json::to_string(&meta).unwrap()).unwrap();
        id
    }

    #[test]
    fn activation_history_and_rollback() {
        let t = tempfile::tempdir().unwrap();
        let a = put(t.path(), 1, "aaaaaaaaaaaa11");
        let b = put(t.path(), 2, "bbbbbbbbbbbb22");
        assert!(managed(t.path()));
        assert_eq!(active(t.path()).unwrap(), None);
        activate(t.path(), &a).unwrap();
        activate(t.path(), &b).unwrap();
        assert_eq!(active(t.path()).unwrap().as_deref(), Some(b.as_str()));
        assert_eq!(previous(t.path()).unwrap().as_deref(), Some(a.as_str()));
        assert_eq!(find(t.path(), "r2").unwrap().id, b);
        assert_eq!(find(t.path(), "aaaa").unwrap().id, a);
        assert!(find(t.path(), "r9").is_err());
        assert!(activate(t.path(), "cccccccccccc").is_err());
        let ids: Vec<_> = list(t.path()).unwrap().into_iter().map(|r| r.id).collect();
        assert_eq!(ids, [a, b]);
    }
}

//! A revision this server lacks, asked for by a client (docs/site.md, "A server that lacks a
//! revision"): a service that is asked for a name carrying a revision not on disk asks here,
//! and the site's follower (`service/site_revisions.rs`), which alone reads who holds what,
//! is woken at once and pulls the whole revision ahead of anything else. A boot file (kernel,
//! initrd) is fetched alone and checked before it is served (`pull_file.rs`), and kept in
//! `DIR/.demand/ID/` until the whole revision is here; a root (an NFS mount, an NBD export) is
//! answered once the revision's pull completes, the client waiting on its request meanwhile.
//! Without a site (no follower running) nothing is asked: a revision not on disk is missing,
//! as on one server.

use super::pull::Request;
use crate::config::Image;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How long a request waits for the follower to read the table after asking.
const ASK_WAIT: Duration = Duration::from_secs(10);
/// Where a boot file fetched ahead of its revision is kept, in the image's folder.
const FOLDER: &str = ".demand";

/// What the follower last read of one image, and what the services asked of it.
struct Site {
    /// The members holding each revision, the one with it active first, as last read.
    holders: BTreeMap<String, Vec<String>>,
    /// The read token the members ask.
    token: Option<String>,
    /// Revisions asked for and not yet pulled (nor found held by nobody, nor failed).
    wanted: BTreeSet<String>,
    /// Wakes the follower.
    wake: Arc<Notify>,
}

/// By image folder: a follower runs for each image listed (several daemons in one process,
/// as the tests run them, have folders of their own).
static SITES: Mutex<BTreeMap<PathBuf, Site>> = Mutex::new(BTreeMap::new());
/// Signalled whenever `SITES` changes.
static CHANGED: Condvar = Condvar::new();

fn sites() -> MutexGuard<'static, BTreeMap<PathBuf, Site>> {
    SITES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The follower's read of the site's table for the image at `dir`: who holds which revision,
/// the read token, and how the follower is woken when a revision is asked for.
pub fn known(
    dir: &Path,
    holders: BTreeMap<String, Vec<String>>,
    token: Option<String>,
    wake: &Arc<Notify>,
) {
    let mut s = sites();
    let site = s.entry(dir.to_path_buf()).or_insert_with(|| Site {
        holders: BTreeMap::new(),
        token: None,
        wanted: BTreeSet::new(),
        wake: wake.clone(),
    });
    site.holders = holders;
    site.token = token;
    site.wake = wake.clone();
    CHANGED.notify_all();
}

/// The follower stopped: nothing is asked of these images any more, and whoever waits gives
/// up.
pub fn stopped<'a>(dirs: impl Iterator<Item = &'a Path>) {
    let mut s = sites();
    for d in dirs {
        s.remove(d);
    }
    CHANGED.notify_all();
}

/// The revisions of the image at `dir` asked for and not yet pulled.
pub fn wanted(dir: &Path) -> Vec<String> {
    sites()
        .get(dir)
        .map(|s| s.wanted.iter().cloned().collect())
        .unwrap_or_default()
}

/// The follower is done with asked revision `rev` of the image at `dir`: pulled (`ok`), or
/// not (no member holds it, or its pull failed). A revision pulled no longer needs the boot
/// files fetched ahead of it.
pub fn done(dir: &Path, rev: &str, ok: bool) {
    if ok {
        let _ = std::fs::remove_dir_all(dir.join(FOLDER).join(rev));
    }
    if let Some(s) = sites().get_mut(dir) {
        s.wanted.remove(rev);
    }
    CHANGED.notify_all();
}

/// The `http` URLs of the other members holding revision `rev` of the image at `dir`, as the
/// follower last read the site's table, without asking for it or waiting: `None` when no
/// follower runs for the image (no site) or none holds it.
pub fn held_by(dir: &Path, rev: &str) -> Option<Vec<String>> {
    sites().get(dir)?.holders.get(rev).cloned()
}

/// Asks for revision `rev` of the image at `dir` and waits until the follower has read who
/// holds it: their URLs and the read token, or `None` (no site, nobody holds it, or no read
/// in time).
fn holders(dir: &Path, rev: &str) -> Option<(Vec<String>, Option<String>)> {
    let deadline = Instant::now() + ASK_WAIT;
    let mut s = sites();
    let site = s.get_mut(dir)?;
    if site.wanted.insert(rev.to_string()) {
        site.wake.notify_one();
    }
    loop {
        let site = s.get(dir)?;
        if let Some(h) = site.holders.get(rev) {
            return Some((h.clone(), site.token.clone()));
        }
        if !site.wanted.contains(rev) {
            return None;
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        s = CHANGED
            .wait_timeout(s, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// The boot file `name` (the image's kernel or initrd name) of revision `id`, which is not
/// on disk: fetched from a member holding it and checked (once; later asks find it kept),
/// while the whole revision is asked for. `None` when no member gives it (logged).
pub fn boot_file(image: &Image, id: &str, name: &str) -> Option<PathBuf> {
    let dest = image.dir.join(FOLDER).join(id).join(name);
    if dest.is_file() {
        return Some(dest);
    }
    let (from, token) = holders(&image.dir, id)?;
    let req = Request {
        rev: Some(id.to_string()),
        from,
        token,
        squashfs: false,
    };
    match super::pull_file::fetch(image, &req, name, &dest) {
        Ok(moved) => {
            tracing::info!(image = %image.name, rev = id, file = name, bytes = moved.total(),
                "a boot file of a revision not held here, fetched and checked ahead of it");
            Some(dest)
        }
        Err(e) => {
            tracing::warn!(image = %image.name, rev = id, file = name, error = %format!("{e:#}"),
                "a boot file of a revision not held here: no member gave it");
            None
        }
    }
}

/// Waits until revision `id` of `image` is here (`here`), asking for it if the site holds
/// it: true once it is, false if it is not held by any member, its pull failed, or `wait`
/// passed (the pull goes on: a client asking again later finds it). Blocks: call it from a
/// thread that may wait.
pub fn root(image: &Image, id: &str, wait: Duration, here: impl Fn() -> bool) -> bool {
    if here() {
        return true;
    }
    if holders(&image.dir, id).is_none() {
        return here();
    }
    tracing::info!(image = %image.name, rev = id,
        "a root of a revision not held here: answered once its pull completes");
    let deadline = Instant::now() + wait;
    let mut s = sites();
    loop {
        if !s
            .get(&image.dir)
            .is_some_and(|site| site.wanted.contains(id))
        {
            drop(s);
            return here();
        }
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            return false;
        };
        s = CHANGED
            .wait_timeout(s, left.min(Duration::from_secs(1)))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

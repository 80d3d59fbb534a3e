//! A revision on disk checked against its manifest (docs/site.md, "A corrupt or truncated
//! local copy"): every entry's metadata compared and every regular file's bytes hashed again;
//! a revision found bad is taken out of `revs/` with the objects whose bytes changed, so that
//! nothing serves it and a pull fetches those bytes again rather than linking them.

use super::manifest::{Entry, Kind, Manifest};
use super::{inventory, objects, store};
use crate::config::Image;
use anyhow::Context as _;
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;

/// The entries of revision `id` that are not as its manifest says (changed bytes, size or
/// metadata; missing; added), as paths inside the revision's folder. Empty: the revision is
/// whole.
pub fn check(image: &Image, id: &str) -> anyhow::Result<Vec<String>> {
    let folder = store::rev_dir(&image.dir, id);
    let text = inventory::of_revision(image, id)?;
    let want = Manifest::decode(&text)?;
    let made = match inventory::walk(image, &folder, &want.revision, &mut |p| {
        objects::file_digest(p)
    }) {
        Ok(m) => m,
        // A file gone or unreadable: the walk stops there.
        Err(e) => return Ok(vec![format!("{e:#}")]),
    };
    Ok(differing(&want.entries, &made.entries))
}

/// The paths whose entries differ between `want` and `got`, or are in one only.
fn differing(want: &[Entry], got: &[Entry]) -> Vec<String> {
    let by_path = |e: &[Entry]| -> BTreeMap<Vec<u8>, Entry> {
        e.iter().map(|e| (e.path.clone(), e.clone())).collect()
    };
    let (want, got) = (by_path(want), by_path(got));
    let mut out: Vec<String> = want
        .iter()
        .filter(|(p, e)| got.get(*p) != Some(e))
        .chain(got.iter().filter(|(p, _)| !want.contains_key(*p)))
        .map(|(p, _)| String::from_utf8_lossy(p).into_owned())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Takes revision `id` out of `revs/` (renamed aside, then deleted) with the store's objects
/// that are the inodes of its files listed in `bad`, under the image's lock: nothing serves it
/// any more, and a pull of it fetches those files' bytes again. Returns how many objects went.
pub fn remove(image: &Image, id: &str, bad: &[String]) -> anyhow::Result<usize> {
    let _lock = store::lock(&image.dir)?;
    let folder = store::rev_dir(&image.dir, id);
    let text = inventory::of_revision(image, id)?;
    let want = Manifest::decode(&text)?;
    let mut gone = 0;
    for e in &want.entries {
        let Kind::File(d) = e.kind else { continue };
        if !bad.iter().any(|b| b.as_bytes() == e.path.as_slice()) {
            continue;
        }
        let path = folder.join(std::ffi::OsStr::from_bytes(&e.path));
        let Ok(m) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let hex = objects::hex(&d);
        let fan = image.dir.join("objects/sha256").join(&hex[..2]);
        for o in std::fs::read_dir(&fan).into_iter().flatten().flatten() {
            let same = o
                .metadata()
                .is_ok_and(|om| om.ino() == m.ino() && om.dev() == m.dev());
            if same && std::fs::remove_file(o.path()).is_ok() {
                gone += 1;
            }
        }
    }
    let aside = image.dir.join(format!(".corrupt-{id}"));
    let _ = std::fs::remove_dir_all(&aside);
    std::fs::rename(&folder, &aside)
        .with_context(|| format!("moving {} aside", folder.display()))?;
    std::fs::remove_dir_all(&aside).with_context(|| format!("removing {}", aside.display()))?;
    Ok(gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, d: u8, size: u64) -> Entry {
        Entry {
            path: path.as_bytes().to_vec(),
            kind: Kind::File([d; 32]),
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime: 1,
            mtime_nsec: 0,
            size,
        }
    }

    #[test]
    fn changed_missing_and_added_entries_are_named_once() {
        let want = [file("a", 1, 10), file("b", 2, 10), file("c", 3, 10)];
        assert!(differing(&want, &want).is_empty());
        let mut mtime = file("c", 3, 10);
        mtime.mtime = 2;
        let got = [file("a", 9, 10), file("b", 2, 4), mtime, file("d", 4, 1)];
        assert_eq!(differing(&want, &got), ["a", "b", "c", "d"]);
        assert_eq!(differing(&want, &want[..2]), ["c"]);
    }
}

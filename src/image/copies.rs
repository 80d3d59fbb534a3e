//! Where a file's wire copy (`image::wire`) is kept and whether it is of the file as it is
//! now: `state_dir/wire/STAMP.KIND`, named by the original's stamp (device, inode, size,
//! mtime), or `STAMP.as_is` saying why the file goes as it is. Looking a copy up needs no
//! table, and a file changed in place (which moves its mtime) is never answered with an old
//! copy. Not the ctime: a hard link to the file (the image store links every file of a
//! revision to its object, and a new revision links them again) moves the ctime, not the
//! bytes, and would have the copy made again each time.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The folder under `server.state_dir`.
pub const DIR: &str = "wire";
/// Which kind of file a copy is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Initrd,
    Root,
}

impl Kind {
    pub(super) const ALL: [Kind; 2] = [Kind::Initrd, Kind::Root];

    /// The copy's file name ending, and how the log names the file.
    pub(super) fn suffix(self) -> &'static str {
        match self {
            Kind::Initrd => "initrd",
            Kind::Root => "root",
        }
    }
    pub(super) fn what(self) -> &'static str {
        match self {
            Kind::Initrd => "initrd",
            Kind::Root => "root image",
        }
    }
}

/// The copy of `original` to send instead of it, if one is made for the file as it is now.
pub fn copy_of(state_dir: &Path, original: &Path, kind: Kind) -> Option<PathBuf> {
    let copy = copy_name(state_dir, original, kind)?;
    copy.is_file().then_some(copy)
}

/// Where the copy of `original` as it is now is kept, made or not.
pub fn copy_name(state_dir: &Path, original: &Path, kind: Kind) -> Option<PathBuf> {
    Some(Kept::of(state_dir, &stamp(original).ok()?, kind).copy)
}

/// What the folder keeps for one version of a file, named by its `stamp`: the copy, or the
/// reason the file goes as it is.
pub(super) struct Kept {
    pub(super) copy: PathBuf,
    pub(super) as_is: PathBuf,
}

impl Kept {
    pub(super) fn of(state_dir: &Path, stamp: &str, kind: Kind) -> Kept {
        let dir = state_dir.join(DIR);
        Kept {
            copy: dir.join(format!("{stamp}.{}", kind.suffix())),
            as_is: dir.join(format!("{stamp}.as_is")),
        }
    }
}

/// What a client asking for a wire image's initrd or root gets now (the images API shows it;
/// `bootpool lab` and `bootpool storm` wait while it is `Pending`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum Status {
    /// The copy, this long.
    Copy { bytes: u64 },
    /// The file as it is, for this reason.
    AsIs { why: String },
    /// The file as it is, until its copy is made.
    Pending,
}

/// What `copy_of` and `make` have made of `original` so far.
pub fn status(state_dir: &Path, original: &Path, kind: Kind) -> Status {
    let Ok(stamp) = stamp(original) else {
        return Status::AsIs {
            why: "the file cannot be read".into(),
        };
    };
    let kept = Kept::of(state_dir, &stamp, kind);
    if let Ok(m) = std::fs::metadata(&kept.copy) {
        return Status::Copy { bytes: m.len() };
    }
    match std::fs::read_to_string(&kept.as_is) {
        Ok(why) => Status::AsIs {
            why: why.trim().to_string(),
        },
        Err(_) => Status::Pending,
    }
}

/// A file's identity and version: a copy named by it is of this file as it is.
pub(super) fn stamp(path: &Path) -> std::io::Result<String> {
    let m = std::fs::metadata(path)?;
    Ok(format!(
        "{:x}-{:x}-{:x}-{:x}.{:x}",
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hard link (an import linking the file to its object) leaves the stamp, and so the
    /// copy, as it was; a rewrite in place moves it.
    #[test]
    fn a_link_keeps_the_stamp_and_a_rewrite_moves_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("initrd.img");
        std::fs::write(&file, b"one").unwrap();
        let before = stamp(&file).unwrap();
        std::fs::hard_link(&file, dir.path().join("object")).unwrap();
        assert_eq!(stamp(&file).unwrap(), before);
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&file, b"two").unwrap();
        assert_ne!(stamp(&file).unwrap(), before);
    }
}

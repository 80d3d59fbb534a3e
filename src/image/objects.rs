//! The content-addressed store of an image folder (docs/chunks.md): `DIR/objects/sha256/AB/`
//! holds one object per regular file's content and metadata, named
//! `DIGEST.MODE.UID.GID.SECS.NANOS` (SHA-256 of the bytes, then what a hard link shares), and
//! every revision's tree holds its files as hard links to them, so revisions share the inodes
//! of the files they have in common. An object is never opened for writing: `put` either
//! links the existing object in place of a new file or makes the new file the object; `sweep`
//! removes the objects no revision links (link count 1). Callers hold the image's lock.

use anyhow::Context as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// The folder under the image's folder.
pub const DIR: &str = "objects";
const ALG: &str = "sha256";

/// What `put` did with a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// An object with its content and metadata was there: the file is now a link to it.
    Shared,
    /// The file became a new object.
    Added,
    /// The file stays a copy of its own: it has extended attributes (which the name does not
    /// say), or the object has as many links as the filesystem allows.
    Own,
}

/// Where the object of a file with this digest and metadata is, made or not.
pub fn object_path(dir: &Path, digest: &[u8; 32], m: &std::fs::Metadata) -> PathBuf {
    object_path_of(
        dir,
        digest,
        &Stamp {
            mode: m.mode(),
            uid: m.uid(),
            gid: m.gid(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
        },
    )
}

/// What an object's name says besides its digest: what a hard link shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// `st_mode`: the type bits and the permission bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: i64,
    pub mtime_nsec: i64,
}

/// Where the object of a file with this digest and `stamp` is, made or not.
pub fn object_path_of(dir: &Path, digest: &[u8; 32], s: &Stamp) -> PathBuf {
    let hex = hex(digest);
    dir.join(DIR).join(ALG).join(&hex[..2]).join(format!(
        "{hex}.{:o}.{}.{}.{}.{}",
        s.mode, s.uid, s.gid, s.mtime, s.mtime_nsec
    ))
}

/// An object with the bytes of `digest`, whatever its metadata.
pub fn find(dir: &Path, digest: &[u8; 32]) -> Option<PathBuf> {
    let hex = hex(digest);
    let fan = dir.join(DIR).join(ALG).join(&hex[..2]);
    let prefix = format!("{hex}.");
    std::fs::read_dir(fan)
        .ok()?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
}

/// Stores the regular file at `path` (its metadata `m`, its content's SHA-256 `digest`) in
/// the store of image folder `dir`, which must be on the file's filesystem.
pub fn put(
    dir: &Path,
    path: &Path,
    m: &std::fs::Metadata,
    digest: &[u8; 32],
) -> anyhow::Result<Put> {
    if has_xattrs(path) {
        return Ok(Put::Own);
    }
    let object = object_path(dir, digest, m);
    match std::fs::symlink_metadata(&object) {
        Ok(o) if o.dev() == m.dev() && o.ino() == m.ino() => Ok(Put::Shared),
        Ok(_) => {
            // A link beside the file, then renamed over it: the name is never missing.
            let aside = path.with_file_name(format!(".bootpool-link-{}", std::process::id()));
            let _ = std::fs::remove_file(&aside);
            match std::fs::hard_link(&object, &aside) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EMLINK) => return Ok(Put::Own),
                Err(e) => {
                    return Err(e).with_context(|| format!("linking {}", object.display()));
                }
            }
            std::fs::rename(&aside, path)
                .with_context(|| format!("replacing {} by its object", path.display()))?;
            Ok(Put::Shared)
        }
        Err(_) => {
            if let Some(p) = object.parent() {
                std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?;
            }
            std::fs::hard_link(path, &object)
                .with_context(|| format!("storing {} as {}", path.display(), object.display()))?;
            Ok(Put::Added)
        }
    }
}

/// Does the file have extended attributes (capabilities, ACLs, labels)?
fn has_xattrs(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return true;
    };
    !matches!(crate::sys::fs::xattr_names_len(&c), Ok(0))
}

/// What `sweep` removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub objects: u64,
    pub bytes: u64,
}

/// Removes every object of image folder `dir` that no revision links (its link count is 1:
/// only the store names it), and the fan-out folders left empty.
pub fn sweep(dir: &Path) -> anyhow::Result<Swept> {
    let mut swept = Swept::default();
    let root = dir.join(DIR).join(ALG);
    let fans = match std::fs::read_dir(&root) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(swept),
        Err(e) => return Err(e).with_context(|| format!("reading {}", root.display())),
    };
    for fan in fans {
        let fan = fan?.path();
        for e in std::fs::read_dir(&fan).with_context(|| format!("reading {}", fan.display()))? {
            let p = e?.path();
            let m = std::fs::symlink_metadata(&p)?;
            if m.is_file() && m.nlink() == 1 {
                std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
                swept.objects += 1;
                swept.bytes += m.len();
            }
        }
        // Fails while it holds objects, as it should.
        let _ = std::fs::remove_dir(&fan);
    }
    Ok(swept)
}

/// The SHA-256 of a file's bytes: what names its object.
pub fn file_digest(path: &Path) -> anyhow::Result<[u8; 32]> {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    let mut f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    std::io::copy(&mut f, &mut h).with_context(|| format!("reading {}", path.display()))?;
    Ok(h.finalize().into())
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest_of(p: &Path) -> [u8; 32] {
        use sha2::Digest as _;
        sha2::Sha256::digest(std::fs::read(p).unwrap()).into()
    }

    #[test]
    fn equal_files_share_an_inode_other_metadata_does_not_and_sweep_frees_the_unlinked() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        let (a, b, c) = (dir.join("a"), dir.join("b"), dir.join("c"));
        for p in [&a, &b, &c] {
            std::fs::write(p, b"same bytes").unwrap();
        }
        // One mtime for all three; c gets another mode.
        let when =
            std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        for p in [&a, &b, &c] {
            std::fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(when)
                .unwrap();
        }
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&c, std::fs::Permissions::from_mode(0o600)).unwrap();
        let put_one = |p: &Path| {
            put(
                dir,
                p,
                &std::fs::symlink_metadata(p).unwrap(),
                &digest_of(p),
            )
            .unwrap()
        };
        assert_eq!(put_one(&a), Put::Added);
        assert_eq!(
            put_one(&a),
            Put::Shared,
            "a second put of one file changes nothing"
        );
        assert_eq!(put_one(&b), Put::Shared);
        assert_eq!(put_one(&c), Put::Added);
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        assert_eq!(ino(&a), ino(&b));
        assert_ne!(ino(&a), ino(&c));
        assert_eq!(std::fs::read(&b).unwrap(), b"same bytes");
        assert_eq!(std::fs::metadata(&a).unwrap().nlink(), 3);
        // Nothing to sweep while every object is linked; then b's and a's go.
        assert_eq!(sweep(dir).unwrap(), Swept::default());
        std::fs::remove_file(&a).unwrap();
        std::fs::remove_file(&b).unwrap();
        assert_eq!(
            sweep(dir).unwrap(),
            Swept {
                objects: 1,
                bytes: 10
            }
        );
        assert!(c.exists());
        assert_eq!(std::fs::metadata(&c).unwrap().nlink(), 2);
    }
}

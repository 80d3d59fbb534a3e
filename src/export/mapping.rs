//! Read-only shared mappings of image files, as the source of socket writes.
//!
//! A READ sent with `pread` then `send` copies its bytes twice on the server: page cache to
//! our buffer, buffer to the socket. Written from a mapping of the file, the kernel copies the
//! page-cache pages into the socket once; on loopback fio's single stream went about 40%
//! faster and nbdcopy about 17% (BENCHMARKS.md, NBD).
//!
//! Nothing in user space reads through a mapping: only the kernel does, inside `writev`. A
//! file truncated under us then fails that write with EFAULT instead of raising SIGBUS in the
//! daemon.
//!
//! Each image path keeps its mapping while its file stays the same, also between
//! connections: a page is then faulted into our page tables once per daemon, not once per
//! connection (nbdcopy, which opens four connections per copy, was a fifth slower with a
//! mapping per connection). A file replaced at that path gets a new mapping; `forget_stale`
//! lets go of mappings whose file was replaced or deleted, so that its disk space is freed
//! once its last connection ends.

use crate::sys::mmap::Map;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

pub use crate::sys::mmap::MappedRange;

/// One mapping of a whole file, read-only and shared, unmapped when the last user goes.
#[derive(Debug)]
pub struct Mapping {
    map: Map,
    /// The file mapped: (device, inode, size when mapped).
    file: FileKey,
}

type FileKey = (u64, u64, u64);

fn key_of(meta: &std::fs::Metadata) -> FileKey {
    (meta.dev(), meta.ino(), meta.len())
}

/// The mapping kept for each image path.
fn kept() -> &'static Mutex<HashMap<PathBuf, Arc<Mapping>>> {
    static KEPT: OnceLock<Mutex<HashMap<PathBuf, Arc<Mapping>>>> = OnceLock::new();
    KEPT.get_or_init(Default::default)
}

impl Mapping {
    /// The mapping of `file`, just opened at `path` (`meta` is its metadata): the one kept
    /// for `path` if it maps this same file, else a new one, kept from now on. None for an
    /// empty file, or when the kernel refuses (the caller reads with `pread`).
    pub fn of(path: &Path, file: &File, meta: &std::fs::Metadata) -> Option<Arc<Mapping>> {
        let key = key_of(meta);
        let mut kept = kept().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = kept.get(path)
            && m.file == key
        {
            return Some(m.clone());
        }
        let m = Arc::new(Mapping::new(file, key)?);
        kept.insert(path.to_path_buf(), m.clone());
        Some(m)
    }

    /// A mapping of all of `file` (`st` is its fstat), not kept: its owner decides how long
    /// it lives. None for an empty file, or when the kernel refuses.
    pub fn whole(file: &File, st: &libc::stat) -> Option<Mapping> {
        Mapping::new(file, (st.st_dev, st.st_ino, st.st_size as u64))
    }

    /// Bytes mapped: the file's size when it was mapped.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// `len` bytes at `offset`, if inside the mapping; whether the page cache holds them is
    /// not asked (see `cached`): a write from them may wait for the disk.
    pub fn range(&self, offset: u64, len: usize) -> Option<MappedRange<'_>> {
        self.map.range(offset, len)
    }

    /// Lets go of the kept mappings whose path no longer names the file they map (deleted or
    /// replaced); connections still using one keep it until they end.
    pub fn forget_stale() {
        let mut kept = kept().lock().unwrap_or_else(|e| e.into_inner());
        let mut gone = Vec::new();
        kept.retain(|path, m| {
            let same = std::fs::metadata(path).is_ok_and(|n| key_of(&n) == m.file);
            if !same {
                gone.push(m.clone());
            }
            same
        });
        drop(kept);
        // Unmapped here (if last), not while others wait for the lock.
        drop(gone);
    }

    fn new(file: &File, key: FileKey) -> Option<Mapping> {
        let len = usize::try_from(key.2).ok().filter(|l| *l > 0)?;
        Some(Mapping {
            map: Map::new(file, len)?,
            file: key,
        })
    }

    /// `len` bytes at `offset`, if they are inside the file and every page of them is in the
    /// page cache: a write from them then does not wait for the disk (a page evicted between
    /// this check and the write is read in by the write, on the writer's thread: rare, and
    /// still correct).
    pub fn cached(&self, offset: u64, len: usize) -> Option<MappedRange<'_>> {
        let range = self.map.range(offset, len)?;
        self.map.resident(offset, len).then_some(range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::os::fd::AsFd as _;

    fn file_of(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let mut t = tempfile::NamedTempFile::new().unwrap();
        t.write_all(bytes).unwrap();
        t.flush().unwrap();
        let f = File::open(t.path()).unwrap();
        (t, f)
    }

    const PAGE: usize = 4096;

    #[test]
    fn one_mapping_per_file_and_ranges_stay_inside_it() {
        let data: Vec<u8> = (0..3 * PAGE + 100).map(|i| i as u8).collect();
        let (t, f) = file_of(&data);
        let meta = f.metadata().unwrap();
        let a = Mapping::of(t.path(), &f, &meta).unwrap();
        let again = File::open(t.path()).unwrap();
        let b = Mapping::of(t.path(), &again, &again.metadata().unwrap()).unwrap();
        assert!(
            Arc::ptr_eq(&a, &b),
            "two opens of one file share the mapping"
        );
        // Just written, so in the page cache.
        let r = a.cached(PAGE as u64 - 10, 2 * PAGE).unwrap();
        assert_eq!(r.len(), 2 * PAGE);
        // Head, range and tail in one write; then again resumed 10 bytes into the range.
        let (head, tail) = (&b"head"[..], &b"tail"[..]);
        let want = |from: usize| -> Vec<u8> {
            let mut v = [head, &data[PAGE - 10..3 * PAGE - 10], tail].concat();
            v.drain(..from);
            v
        };
        for done in [0, head.len() + 10] {
            let (tx, mut rx) = std::os::unix::net::UnixStream::pair().unwrap();
            let n = r.writev(tx.as_fd(), head, tail, done).unwrap();
            drop(tx);
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut rx, &mut got).unwrap();
            assert_eq!(n, got.len());
            assert!(got == want(done), "bytes differ, {done} in");
        }
        assert!(a.cached(0, data.len()).is_some());
        assert!(a.cached(1, data.len()).is_none(), "one byte past the end");
        assert!(a.cached(u64::MAX, 1).is_none());
    }

    #[test]
    fn a_file_replaced_at_the_path_gets_a_mapping_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rootfs.img");
        std::fs::write(&path, [1u8; 8192]).unwrap();
        let old = File::open(&path).unwrap();
        let a = Mapping::of(&path, &old, &old.metadata().unwrap()).unwrap();
        // Replaced by rename, as an admin updates an image.
        std::fs::write(dir.path().join("new"), [2u8; 8192]).unwrap();
        std::fs::rename(dir.path().join("new"), &path).unwrap();
        let new = File::open(&path).unwrap();
        let b = Mapping::of(&path, &new, &new.metadata().unwrap()).unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        assert_ne!(a.file, b.file);
        // The old mapping lives on for whoever holds it.
        assert!(a.cached(0, 8192).is_some());
    }

    #[test]
    fn a_write_from_a_mapping_of_a_truncated_file_fails_with_efault() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let file = File::open(&path).unwrap();
        let map = Mapping::of(&path, &file, &file.metadata().unwrap()).unwrap();
        let data = map.cached(0, 1 << 20).expect("just written, so cached");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(0)
            .unwrap();
        // Read in user space, those pages would raise SIGBUS; the kernel's copy fails softly.
        let (tx, _rx) = std::os::unix::net::UnixStream::pair().unwrap();
        let head = [1u8; 16];
        let mut done = 0;
        let err = loop {
            match data.writev(tx.as_fd(), &head, &[], done) {
                Ok(n) => {
                    assert!(n > 0);
                    done += n;
                    assert!(done <= head.len(), "sent bytes of a file cut to nothing");
                }
                Err(e) => break e,
            }
        };
        assert_eq!(err.raw_os_error(), Some(libc::EFAULT));
    }

    fn is_kept(path: &Path) -> bool {
        kept().lock().unwrap().contains_key(path)
    }

    #[test]
    fn a_deleted_image_is_let_go_of_and_one_in_use_lives_on() {
        let dir = tempfile::tempdir().unwrap();
        let (gone, used) = (dir.path().join("gone.img"), dir.path().join("used.img"));
        for p in [&gone, &used] {
            std::fs::write(p, [3u8; 4096]).unwrap();
            let f = File::open(p).unwrap();
            Mapping::of(p, &f, &f.metadata().unwrap()).unwrap();
        }
        let f = File::open(&used).unwrap();
        let in_use = Mapping::of(&used, &f, &f.metadata().unwrap()).unwrap();
        Mapping::forget_stale();
        assert!(
            is_kept(&gone) && is_kept(&used),
            "unchanged files stay mapped"
        );
        std::fs::remove_file(&gone).unwrap();
        std::fs::remove_file(&used).unwrap();
        Mapping::forget_stale();
        assert!(!is_kept(&gone) && !is_kept(&used));
        // A connection that holds the mapping still sends from it.
        assert!(in_use.cached(0, 4096).is_some());
    }

    #[test]
    fn an_empty_file_is_not_mapped() {
        let (t, f) = file_of(b"");
        assert!(Mapping::of(t.path(), &f, &f.metadata().unwrap()).is_none());
    }
}

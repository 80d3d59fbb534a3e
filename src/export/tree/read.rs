//! READ's open files (`Reads`): files kept open and small files kept mapped, their bytes
//! read from a mapping kept for small files or from the page cache, or through a descriptor
//! kept open; where a READ's bytes come from (`Readable`, RAM's among them) and how many.

use super::at::{fstat, open_at};
use super::attr::{NF3DIR, NF3REG, ftype_of};
use super::cache::{Clock, OpenFile, file_cache_size, small_map_cache_size};
use super::handle::TreeHandle;
use super::handles::{Handles, Node};
use super::images::Images;
use super::shared::{Error, MAPPED_READ_MIN, MAX_READ, SMALL_FILE, Status, io_status, lock};
use crate::export::mapping::{MappedRange, Mapping};
use crate::proto::nfs3::Attr;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A READ's answer whose data is in a file's mapping (`Reads::mapped`).
pub struct MappedRead {
    pub attr: Attr,
    pub eof: bool,
    pub(super) mapping: Arc<Mapping>,
    pub(super) offset: u64,
    pub(super) len: usize,
}

impl MappedRead {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The data, for `MappedRange::writev`.
    pub fn data(&self) -> MappedRange<'_> {
        self.mapping
            .range(self.offset, self.len)
            .expect("checked inside the mapping by read_mapped")
    }
}

/// Where a READ's bytes come from.
pub(super) enum Readable {
    Ram(Arc<[u8]>),
    File(Arc<File>),
}

impl Readable {
    /// Fills `buf` from `offset` until it is full or the file ends; returns the bytes read.
    pub(super) fn fill(&self, buf: &mut [u8], offset: u64) -> Result<usize, Status> {
        match self {
            Readable::Ram(data) => {
                let from = offset.min(data.len() as u64) as usize;
                let n = buf.len().min(data.len() - from);
                buf[..n].copy_from_slice(&data[from..from + n]);
                Ok(n)
            }
            Readable::File(file) => {
                let mut got = 0;
                while got < buf.len() {
                    match file.read_at(&mut buf[got..], offset + got as u64) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(io_status(e)),
                    }
                }
                Ok(got)
            }
        }
    }
}

/// How many bytes a READ of `count` at `offset` returns: at most `MAX_READ`, and never past
/// the end the attributes give.
pub(super) fn read_len(attr: &Attr, offset: u64, count: usize) -> usize {
    (count.min(MAX_READ as usize) as u64).min(attr.size.saturating_sub(offset)) as usize
}

/// Appends up to `count` bytes at `offset` of a file with attributes `attr` to `out`, from
/// `from`; returns the attributes and whether the read reached the end.
pub(super) fn append(
    attr: Attr,
    from: &Readable,
    offset: u64,
    count: u32,
    out: &mut Vec<u8>,
) -> Result<(Attr, bool), Status> {
    // Sized by the file, not by the request: clients ask for rsize even for tiny files,
    // and zeroing a 1 MiB buffer per small file costs more than the read.
    let count = read_len(&attr, offset, count as usize);
    let start = out.len();
    out.resize(start + count, 0);
    match from.fill(&mut out[start..], offset) {
        Ok(n) => {
            out.truncate(start + n);
            Ok((attr, offset.saturating_add(n as u64) >= attr.size))
        }
        Err(st) => {
            out.truncate(start);
            Err(st)
        }
    }
}

/// Like `append`, into the front of `buf` (up to its length): returns the attributes, the
/// bytes read and whether the read reached the end.
pub(super) fn fill_front(
    attr: Attr,
    from: &Readable,
    offset: u64,
    buf: &mut [u8],
) -> Result<(Attr, usize, bool), Status> {
    let count = read_len(&attr, offset, buf.len());
    let n = from.fill(&mut buf[..count], offset)?;
    Ok((attr, n, offset.saturating_add(n as u64) >= attr.size))
}

/// A regular file's image, path and attributes, from its resolved handle.
pub(super) fn regular(node: Node) -> Result<(usize, Arc<Path>, Attr), Status> {
    let Node::In { img, rel, attr } = node else {
        return Err(Error::IsDir);
    };
    match attr.ftype {
        NF3REG => Ok((img, rel, attr)),
        NF3DIR => Err(Error::IsDir),
        _ => Err(Error::Inval),
    }
}

/// The files kept ready for READ, each cache evicted by second chance.
pub(super) struct Reads {
    /// Files read through a descriptor, open (for `pread`, and their mapping for big READs):
    /// those of `SMALL_FILE` and up, and small ones that cannot be mapped (empty ones).
    pub(super) files: Mutex<Clock<TreeHandle, OpenFile>>,
    /// Files under `SMALL_FILE`, mapped, their descriptor closed: the descriptor limit
    /// (often only thousands) does not bound how many stay ready, a READ of one is a single
    /// `writev` of its reply from the page cache, and it needs no `pread`.
    pub(super) small: Mutex<Clock<TreeHandle, Arc<Mapping>>>,
}

impl Reads {
    pub(super) fn new() -> Reads {
        Reads {
            files: Mutex::new(Clock::new(file_cache_size())),
            small: Mutex::new(Clock::new(small_map_cache_size())),
        }
    }

    /// Closes and unmaps what is kept of `h` (its inode replaced or gone).
    pub(super) fn forget(&self, h: &TreeHandle) {
        let closed = lock(&self.files).remove(h);
        let unmapped = lock(&self.small).remove(h);
        drop((closed, unmapped));
    }

    /// A READ of the regular file `h` (its image, path and attributes from `regular`) answered
    /// from a mapping of the file (see `export::mapping`): the reply's data goes from the
    /// page cache to the socket in one copy, where reading into a buffer and sending that
    /// makes two. Files under `SMALL_FILE` are always read this way; a page of theirs not
    /// cached is read in by the write, on the connection's own thread. Larger files only for
    /// READs of `MAPPED_READ_MIN` and up whose bytes the page cache holds. None: read with
    /// `append`/`fill_front` (bytes not cached, or a file that cannot be mapped).
    pub(super) fn mapped(
        &self,
        images: &Images,
        handles: &Handles,
        h: &TreeHandle,
        (img, rel, attr): (usize, Arc<Path>, Attr),
        offset: u64,
        count: usize,
    ) -> Result<Option<MappedRead>, Status> {
        let len = read_len(&attr, offset, count);
        let end = offset + len as u64;
        // A READ at or past the end sends no data: any mapping of the file will do.
        let (from, needed) = if len == 0 { (0, 0) } else { (offset, end) };
        let mapping = if attr.size < SMALL_FILE {
            self.small_mapping(images, handles, h, img, &rel, needed)?
        } else if len >= MAPPED_READ_MIN {
            self.open(images, handles, h, img, &rel)?;
            self.big_mapping(h, end)
                .filter(|m| m.cached(offset, len).is_some())
        } else {
            None
        };
        Ok(mapping.map(|mapping| MappedRead {
            attr,
            eof: end >= attr.size,
            mapping,
            offset: from,
            len,
        }))
    }

    /// The kept mapping of a small file, made (the file opened, mapped and closed again) if
    /// there is none or it is shorter than `end` (the file grew). None if the file cannot be
    /// mapped, or is now shorter than `end`.
    pub(super) fn small_mapping(
        &self,
        images: &Images,
        handles: &Handles,
        h: &TreeHandle,
        img: usize,
        rel: &Path,
        end: u64,
    ) -> Result<Option<Arc<Mapping>>, Status> {
        if let Some(m) = lock(&self.small).get(h)
            && m.len() as u64 >= end
        {
            return Ok(Some(m.clone()));
        }
        let (file, st) = open_checked(images, handles, h, img, rel)?;
        let Some(m) = Mapping::whole(&file, &st) else {
            return Ok(None);
        };
        // The mapping keeps the bytes reachable; the descriptor is not needed any more.
        drop(file);
        let m = Arc::new(m);
        let unmapped = lock(&self.small).insert(*h, m.clone());
        drop(unmapped);
        Ok((m.len() as u64 >= end).then_some(m))
    }

    /// The mapping of an open big file, made if it has none or one shorter than `end` (the
    /// file grew); None if the file is not open here or cannot be mapped.
    pub(super) fn big_mapping(&self, h: &TreeHandle, end: u64) -> Option<Arc<Mapping>> {
        let mut files = lock(&self.files);
        let open = files.get(h)?;
        match &open.mapping {
            Some(m) if m.len() as u64 >= end => {}
            _ => {
                let st = fstat(&open.file).ok()?;
                open.mapping = Mapping::whole(&open.file, &st).map(Arc::new);
            }
        }
        open.mapping.clone()
    }

    /// The file open in `files`, opened if it is not.
    pub(super) fn open(
        &self,
        images: &Images,
        handles: &Handles,
        h: &TreeHandle,
        img: usize,
        rel: &Path,
    ) -> Result<Arc<File>, Status> {
        if let Some(open) = lock(&self.files).get(h) {
            return Ok(open.file.clone());
        }
        let (f, _) = open_checked(images, handles, h, img, rel)?;
        let f = Arc::new(f);
        let open = OpenFile {
            file: f.clone(),
            mapping: None,
        };
        let evicted = lock(&self.files).insert(*h, open);
        // Closed here, not while others wait for the lock.
        drop(evicted);
        Ok(f)
    }
}

/// Opens the file at `rel` and checks that it is still the one `h` names; returns it and
/// its fstat, whose attributes are remembered (as fresh as they get: the next calls need
/// no lstat).
fn open_checked(
    images: &Images,
    handles: &Handles,
    h: &TreeHandle,
    img: usize,
    rel: &Path,
) -> Result<(File, libc::stat), Status> {
    // O_NOFOLLOW: the last component must still be the file the handle names.
    let dir = images.root_dir(img).ok_or(Error::Stale)?;
    let f = open_at(&dir, rel).map_err(io_status)?;
    let st = fstat(&f).map_err(io_status)?;
    if !h.names(st.st_dev, st.st_ino, ftype_of(st.st_mode)) {
        return Err(Error::Stale);
    }
    handles.refresh(images, img, *h, rel.into(), &st);
    Ok((f, st))
}

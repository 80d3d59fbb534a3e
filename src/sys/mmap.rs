//! Read-only shared mappings of whole files, which only the kernel reads through: `mincore`
//! asks whether the page cache holds a range, and `writev` copies a range into a socket.
//! Nothing in user space dereferences a mapping, so a file truncated under it fails that
//! `writev` with EFAULT instead of raising SIGBUS (`export/mapping.rs` keeps them per path).

use std::fs::File;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd as _, BorrowedFd};
use std::sync::OnceLock;

use super::check_len;

/// Pages checked per `mincore` call (its answer lives on the stack).
const MINCORE_PAGES: usize = 256;

/// The page size, asked once.
fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(super::process::page_size)
}

/// One read-only shared mapping of a file's first `len` bytes, unmapped on drop.
#[derive(Debug)]
pub struct Map {
    /// The mapping's address; kept as a number so that nothing here can read through it.
    addr: usize,
    len: usize,
}

impl Map {
    /// Maps the first `len` bytes of `file` (`len` > 0), read-only and shared; None when the
    /// kernel refuses.
    pub fn new(file: &File, len: usize) -> Option<Map> {
        if len == 0 {
            return None;
        }
        // SAFETY: a new read-only mapping of an open descriptor; the kernel picks the place,
        // so no existing memory is replaced.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        (ptr != libc::MAP_FAILED).then_some(Map {
            addr: ptr as usize,
            len,
        })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `len` bytes at `offset`, if inside the mapping.
    pub fn range(&self, offset: u64, len: usize) -> Option<MappedRange<'_>> {
        let start = usize::try_from(offset).ok()?;
        start.checked_add(len).filter(|e| *e <= self.len)?;
        Some(MappedRange {
            addr: self.addr + start,
            len,
            _map: PhantomData,
        })
    }

    /// Whether every page of `len` bytes at `offset` (inside the mapping) is in the page
    /// cache, by `mincore`. False when the range is outside, or the kernel cannot say.
    pub fn resident(&self, offset: u64, len: usize) -> bool {
        if self.range(offset, len).is_none() {
            return false;
        }
        let (start, end) = (offset as usize, offset as usize + len);
        let page_len = page_size();
        let mut page = start & !(page_len - 1);
        let mut resident = [0u8; MINCORE_PAGES];
        while page < end {
            let span = (end - page).min(MINCORE_PAGES * page_len);
            let pages = span.div_ceil(page_len);
            // SAFETY: a page-aligned range inside our mapping (`end` is within it), and one
            // byte of `resident` per page of it (at most MINCORE_PAGES).
            let r = unsafe {
                libc::mincore(
                    (self.addr + page) as *mut libc::c_void,
                    span,
                    resident.as_mut_ptr(),
                )
            };
            if r != 0 || resident[..pages].iter().any(|b| b & 1 == 0) {
                return false;
            }
            page += span;
        }
        true
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once; every MappedRange borrowing it is gone.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// A range of a mapping, for the kernel to copy from. Borrows the mapping, so it cannot
/// outlive it.
#[derive(Debug, Clone, Copy)]
pub struct MappedRange<'a> {
    addr: usize,
    len: usize,
    _map: PhantomData<&'a Map>,
}

impl MappedRange<'_> {
    /// One `writev` to `fd` of `head`, these bytes and `tail`, less the first `done` bytes of
    /// the three; returns how many it wrote. The kernel reads the mapped bytes, nobody else.
    pub fn writev(
        &self,
        fd: BorrowedFd<'_>,
        head: &[u8],
        tail: &[u8],
        done: usize,
    ) -> std::io::Result<usize> {
        let parts = [
            (head.as_ptr() as usize, head.len()),
            (self.addr, self.len),
            (tail.as_ptr() as usize, tail.len()),
        ];
        let mut skip = done;
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 3];
        let mut n = 0;
        for (addr, len) in parts {
            if skip >= len {
                skip -= len;
                continue;
            }
            iov[n] = libc::iovec {
                iov_base: (addr + skip) as *mut libc::c_void,
                iov_len: len - skip,
            };
            skip = 0;
            n += 1;
        }
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: each iovec lies in `head`, `tail` or the mapping this range borrows, all
        // alive for the call; the kernel only reads them.
        check_len(unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr(), n as libc::c_int) })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

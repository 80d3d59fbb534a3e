//! The memory the chunks `bootpool-agent` holds are received into (the agent compiles this
//! file in by `#[path]`, as it does the daemon's codecs; it uses std only): carved, in the
//! order fetches begin, from anonymous mappings of 2 MiB (`SLAB`, or the chunk's size if
//! larger), each buffer page-aligned and its pages faulted in at once by
//! `madvise(MADV_POPULATE_WRITE)` before the socket's bytes are read into it. A fresh
//! buffer for each chunk (a `Vec`, 16 bytes past a page boundary) took the kernel's page
//! faults one 4 KiB page at a time, 64 for a 256 KiB chunk, inside the copy from the socket:
//! a quarter of the agent's CPU in a perf profile; populated in one call, the agent's CPU per
//! GB fell by about a quarter (bench/agent-cpu.sh; docs/swarm.md, "What it costs a client").
//! Tried and not kept: asking for transparent huge pages on the slabs: clearing the 2 MiB
//! pages then doubled the agent's CPU on this VM. Held chunks are never freed, so a slab lives
//! as long as the agent; the memory held is the chunks fetched and at most the last slab's
//! rest. A chunk refused (a wrong body) leaves its place in the slab unused.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// A slab's size and alignment: one huge page of x86-64 and arm64 (4 KiB pages), so a kernel
/// whose transparent huge pages are `always` may back a slab with one.
pub const SLAB: usize = 2 << 20;

const PROT_READ: i32 = 1;
const PROT_WRITE: i32 = 2;
const MAP_PRIVATE: i32 = 2;
const MAP_ANONYMOUS: i32 = 0x20;
const MADV_POPULATE_WRITE: i32 = 23;

// The C library std links (musl in the static agent, glibc elsewhere), declared as the libc
// crate declares it: the agent has no dependency but sha2.
unsafe extern "C" {
    fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: i32,
        flags: i32,
        fd: i32,
        offset: i64,
    ) -> *mut c_void;
    fn munmap(addr: *mut c_void, len: usize) -> i32;
    fn madvise(addr: *mut c_void, len: usize, advice: i32) -> i32;
}

/// One anonymous mapping of `len` bytes (a multiple of `SLAB`) at an address aligned to
/// `SLAB`, zero until written.
struct Slab {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a slab is plain memory; who writes where is `Bytes`'s to keep apart.
unsafe impl Send for Slab {}
// SAFETY: as for `Send`: `&Slab` reads nothing through its pointer.
unsafe impl Sync for Slab {}

impl Slab {
    fn map(len: usize) -> Slab {
        // SAFETY: a fresh private anonymous mapping (`SLAB` more than asked, so an aligned
        // start is in it), then the parts before and after the aligned `len` unmapped; only
        // memory of this mapping is named.
        unsafe {
            let all = len + SLAB;
            let p = mmap(
                std::ptr::null_mut(),
                all,
                PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS,
                -1,
                0,
            )
            .cast::<u8>();
            if p as isize == -1 || p.is_null() {
                let e = std::io::Error::last_os_error();
                panic!("bootpool-agent: mapping {len} bytes for chunks: {e}");
            }
            let head = (SLAB - (p as usize) % SLAB) % SLAB;
            if head > 0 {
                munmap(p.cast(), head);
            }
            let start = p.add(head);
            let tail = all - head - len;
            if tail > 0 {
                munmap(start.add(len).cast(), tail);
            }
            // Refused where the kernel has no transparent huge pages: 4 KiB pages then.
            Slab {
                ptr: NonNull::new_unchecked(start),
                len,
            }
        }
    }
}

impl Drop for Slab {
    fn drop(&mut self) {
        // SAFETY: the mapping `map` made; no `Bytes` of it is left (each holds the slab).
        unsafe {
            munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Where the next chunk's buffer is carved from.
#[derive(Default)]
pub struct Slabs {
    open: Mutex<Option<(Arc<Slab>, usize)>>,
}

impl Slabs {
    /// `len` bytes of fresh memory, zero until written: the buffer one chunk is received into.
    pub fn take(&self, len: usize) -> Bytes {
        if len == 0 {
            return Bytes {
                slab: None,
                at: 0,
                len: 0,
            };
        }
        // Each buffer starts on a 4 KiB page of its own.
        let room = len.next_multiple_of(4096);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let fits = open
            .as_ref()
            .is_some_and(|(slab, used)| slab.len - used >= room);
        if !fits {
            *open = Some((Arc::new(Slab::map(room.next_multiple_of(SLAB))), 0));
        }
        let (slab, used) = open.as_mut().expect("a slab open");
        let bytes = Bytes {
            slab: Some(slab.clone()),
            at: *used,
            len,
        };
        *used += room;
        drop(open);
        // SAFETY: the buffer's pages, inside the slab; the advice only faults them in now.
        // Refused before Linux 5.14: the pages are then faulted as they are written.
        unsafe {
            madvise(
                slab_start(&bytes).add(bytes.at).cast(),
                room,
                MADV_POPULATE_WRITE,
            );
        }
        bytes
    }
}

fn slab_start(b: &Bytes) -> *mut u8 {
    b.slab
        .as_ref()
        .map_or(std::ptr::null_mut(), |s| s.ptr.as_ptr())
}

/// A chunk's bytes in a slab: a range no other `Bytes` overlaps, written through `&mut`
/// while it is received, read by everyone once held.
pub struct Bytes {
    slab: Option<Arc<Slab>>,
    at: usize,
    len: usize,
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.slab {
            // SAFETY: `at..at + len` is inside the slab (`take`), kept mapped by the `Arc`,
            // initialized (a fresh mapping is zero), and written only through `&mut self`.
            Some(s) => unsafe { std::slice::from_raw_parts(s.ptr.as_ptr().add(self.at), self.len) },
            None => &[],
        }
    }
}

impl std::ops::DerefMut for Bytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &self.slab {
            // SAFETY: as `deref`; `take` hands each range out once, and this `Bytes` is
            // borrowed exclusively.
            Some(s) => unsafe {
                std::slice::from_raw_parts_mut(s.ptr.as_ptr().add(self.at), self.len)
            },
            None => &mut [],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_carved_apart_from_aligned_slabs_and_start_zero() {
        let slabs = Slabs::default();
        let mut a = slabs.take(256 << 10);
        let mut b = slabs.take(1000);
        let c = slabs.take(3 << 20);
        assert_eq!((a.len(), b.len(), c.len()), (256 << 10, 1000, 3 << 20));
        assert!(a.iter().chain(b.iter()).chain(c.iter()).all(|&x| x == 0));
        assert_eq!(a.as_ptr() as usize % SLAB, 0, "the first of a slab");
        assert_eq!(b.as_ptr() as usize, a.as_ptr() as usize + (256 << 10));
        assert_eq!(
            c.as_ptr() as usize % SLAB,
            0,
            "a larger one has a slab of its own"
        );
        a.fill(1);
        b.fill(2);
        assert!(a.iter().all(|&x| x == 1) && b.iter().all(|&x| x == 2));
        // The next one is carved from the slab opened last.
        let d = slabs.take(4096);
        assert_eq!(d.as_ptr() as usize, c.as_ptr() as usize + (3 << 20));
        let held = std::sync::Arc::new(a);
        drop(b);
        assert_eq!(held[0], 1, "a slab stays while one of its buffers is held");
        assert!(slabs.take(0).is_empty());
    }
}

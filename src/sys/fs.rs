//! File calls std does not offer: `flock`, stats and opens relative to a folder's descriptor,
//! `mknod`, `mkfifo`, `utimensat`, `statvfs`, `fallocate`, `preadv2` and `llistxattr`. Paths come in as C
//! strings; which flags to pass is the caller's choice.

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _};

use super::{check, check_len};

/// `flock(LOCK_EX | LOCK_NB)`: an exclusive lock on the open file `fd`, held until every
/// descriptor of that open file is closed. Fails with `WouldBlock` when another holds it.
pub fn try_lock_exclusive(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: flock takes a descriptor, here a borrowed open one, and no memory.
    check(unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) })?;
    Ok(())
}

/// `fstatat(dir, path, flags)`.
pub fn stat_at(dir: BorrowedFd<'_>, path: &CStr, flags: libc::c_int) -> io::Result<libc::stat> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor, a NUL-terminated path and room for one stat.
    check(unsafe { libc::fstatat(dir.as_raw_fd(), path.as_ptr(), st.as_mut_ptr(), flags) })?;
    // SAFETY: fstatat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// `openat(dir, path, flags)`, the new descriptor owned by the returned file.
pub fn open_at(dir: BorrowedFd<'_>, path: &CStr, flags: libc::c_int) -> io::Result<File> {
    // SAFETY: a valid descriptor and a NUL-terminated path; no mode is read without O_CREAT.
    let fd = check(unsafe { libc::openat(dir.as_raw_fd(), path.as_ptr(), flags) })?;
    // SAFETY: openat just returned this descriptor, owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// `fstat(fd)`.
pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor and room for one stat.
    check(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// `mknod(path, mode, dev)`.
pub fn mknod(path: &CStr, mode: libc::mode_t, dev: libc::dev_t) -> io::Result<()> {
    // SAFETY: a NUL-terminated path that lives for the call.
    check(unsafe { libc::mknod(path.as_ptr(), mode, dev) })?;
    Ok(())
}

/// `llistxattr(path, NULL, 0)`: the length of the names of `path`'s extended attributes
/// (0: it has none), not following a symlink.
pub fn xattr_names_len(path: &CStr) -> io::Result<usize> {
    // SAFETY: a NUL-terminated path that lives for the call, and a null buffer of length 0
    // (asks for the length only).
    check_len(unsafe { libc::llistxattr(path.as_ptr(), std::ptr::null_mut(), 0) })
}

/// `mkfifo(path, mode)`.
pub fn mkfifo(path: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: a NUL-terminated path that lives for the call.
    check(unsafe { libc::mkfifo(path.as_ptr(), mode) })?;
    Ok(())
}

/// `utimensat(AT_FDCWD, path, [atime, mtime], 0)`: sets both times of `path`, following a
/// symlink.
pub fn set_times(path: &CStr, atime: libc::timespec, mtime: libc::timespec) -> io::Result<()> {
    let times = [atime, mtime];
    // SAFETY: a NUL-terminated path and an array of the two timespecs utimensat reads.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0) })?;
    Ok(())
}

/// `utimensat(AT_FDCWD, path, [atime, mtime], AT_SYMLINK_NOFOLLOW)`: sets both times of
/// `path` itself, a symlink's own included.
pub fn set_times_nofollow(
    path: &CStr,
    atime: libc::timespec,
    mtime: libc::timespec,
) -> io::Result<()> {
    let times = [atime, mtime];
    // SAFETY: a NUL-terminated path and an array of the two timespecs utimensat reads.
    check(unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            path.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(())
}

/// `statvfs(path)`: the file system holding `path`.
pub fn statvfs(path: &CStr) -> io::Result<libc::statvfs> {
    let mut st = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: a NUL-terminated path and room for one statvfs.
    check(unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) })?;
    // SAFETY: statvfs succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// `fallocate(fd, mode, offset, len)`.
pub fn fallocate(fd: BorrowedFd<'_>, mode: libc::c_int, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: fallocate takes an open descriptor and numbers; no memory is passed.
    check(unsafe {
        libc::fallocate(
            fd.as_raw_fd(),
            mode,
            offset as libc::off_t,
            len as libc::off_t,
        )
    })?;
    Ok(())
}

/// `preadv2(fd, [buf], offset, RWF_NOWAIT)`: reads what the page cache holds of `buf.len()`
/// bytes at `offset` without waiting for the disk; how many bytes it read (short when only
/// part is cached; `WouldBlock` when none is, or an error on kernels without RWF_NOWAIT).
pub fn pread_nowait(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: one iovec over `buf`, which is valid for writes of its length and outlives the
    // call; the descriptor is open.
    check_len(unsafe {
        libc::preadv2(
            fd.as_raw_fd(),
            &iov,
            1,
            offset as libc::off_t,
            libc::RWF_NOWAIT,
        )
    })
}

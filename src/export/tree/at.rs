//! Stats and opens relative to an image's opened root (`fstatat`, `openat` with
//! `O_NOFOLLOW`), so the kernel walks only the path inside the image.

use std::fs::File;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub(super) fn c_path(rel: &Path) -> std::io::Result<std::ffi::CString> {
    std::ffi::CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

/// lstat of `rel` below the folder `dir` ("" is the folder itself).
pub(super) fn stat_at(dir: &OwnedFd, rel: &Path) -> std::io::Result<libc::stat> {
    let c = c_path(rel)?;
    let mut flags = libc::AT_SYMLINK_NOFOLLOW;
    if c.is_empty() {
        flags |= libc::AT_EMPTY_PATH;
    }
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor, a NUL-terminated path and room for one stat.
    if unsafe { libc::fstatat(dir.as_raw_fd(), c.as_ptr(), st.as_mut_ptr(), flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fstatat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// Opens the regular file `rel` below the folder `dir` for reading, not following a symlink
/// in its last component.
pub(super) fn open_at(dir: &OwnedFd, rel: &Path) -> std::io::Result<File> {
    let c = c_path(rel)?;
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: a valid descriptor and a NUL-terminated path.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: openat just returned this descriptor, owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

pub(super) fn fstat(f: &File) -> std::io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor and room for one stat.
    if unsafe { libc::fstat(f.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

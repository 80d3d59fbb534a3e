//! Stats and opens relative to an image's opened root (`fstatat`, `openat` with
//! `O_NOFOLLOW`), so the kernel walks only the path inside the image.

use crate::sys;
use std::fs::File;
use std::os::fd::{AsFd as _, OwnedFd};
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
    sys::fs::stat_at(dir.as_fd(), &c, flags)
}

/// Opens the regular file `rel` below the folder `dir` for reading, not following a symlink
/// in its last component.
pub(super) fn open_at(dir: &OwnedFd, rel: &Path) -> std::io::Result<File> {
    let c = c_path(rel)?;
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    sys::fs::open_at(dir.as_fd(), &c, flags)
}

pub(super) fn fstat(f: &File) -> std::io::Result<libc::stat> {
    sys::fs::fstat(f.as_fd())
}

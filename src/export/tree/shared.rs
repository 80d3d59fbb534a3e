//! What the tree's files share, and the bottom of its imports: the status a call fails
//! with and how an io error maps to it, the check of a client-supplied name, the lock helpers
//! and the tuning constants.

pub(super) use crate::export::lock;
pub(super) use crate::proto::nfs3::Error;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::RwLock;
use std::time::Duration;

/// Largest READ answered; matches the `rtmax` we advertise.
pub const MAX_READ: u32 = 1 << 20;
/// A handle we cannot place makes us re-walk its image at most this often.
pub(super) const REWALK_EVERY: Duration = Duration::from_secs(30);
/// Cached attributes older than this are checked against the disk again (like a client's
/// attribute cache, but ours is one lstat, not a round trip).
pub(super) const FRESH: Duration = Duration::from_secs(1);
/// A listing is rebuilt (its children stat'ed again) after this long even if its mtime did
/// not change, which bounds how stale READDIRPLUS attributes can be: they come from the
/// listing, not from one lstat per entry per page (that was most of a listing's CPU).
pub(super) const LISTING_FRESH: Duration = Duration::from_secs(30);
/// A listing read within `KEEP_FRESH` is rebuilt in the background at this age
/// (`keep_listings_fresh`), so that the rebuild, about 7 µs per entry, is not paid by a client
/// waiting for its page.
pub(super) const LISTING_REFRESH: Duration = Duration::from_secs(20);
/// How long after its last READDIR a listing is kept fresh: a room boots over minutes, and
/// clients that start late (or boot again) find the listings the first ones asked for ready.
/// Past it a listing is rebuilt only when read again.
pub(super) const KEEP_FRESH: Duration = Duration::from_secs(300);
/// How often the background thread looks for listings due a rebuild.
pub(super) const REFRESH_SWEEP: Duration = Duration::from_secs(1);
/// Directory listings kept; a boot touches a few hundred directories.
pub(super) const DIR_CACHE: usize = 4096;
/// Names looked up outside cached listings, kept (found or not: a booting client probes
/// many names that do not exist, e.g. the library paths the dynamic loader tries).
pub(super) const NAME_CACHE: usize = 65_536;
/// Open files kept: this share of the descriptor limit, within these bounds.
pub(super) const FILE_CACHE_SHARE: usize = 2;
/// Small files kept mapped: this share of the mapping limit (same bounds).
pub(super) const SMALL_MAP_SHARE: usize = 2;
/// Files smaller than this are read from a mapping kept without its descriptor (see
/// `Reads::small`); larger ones through a descriptor kept open.
pub const SMALL_FILE: u64 = 64 << 10;
/// A READ of a larger file goes out from its mapping only from this size up, and only when
/// the page cache holds its bytes.
pub(super) const MAPPED_READ_MIN: usize = 64 << 10;
pub(super) const FILE_CACHE_MIN: usize = 64;
pub(super) const FILE_CACHE_MAX: usize = 65_536;
/// A walk stops after this many entries (an image is not a whole disk).
pub(super) const WALK_LIMIT: usize = 5_000_000;
const NAME_MAX: usize = 255;
/// `store: ram` keeps the contents of files up to this size.
pub const RAM_FILE_MAX: u64 = 1 << 20;

/// Why a tree call failed: `proto::nfs3::Error`, which maps it to the wire.
pub type Status = Error;

pub(super) fn read_lock<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|e| e.into_inner())
}
pub(super) fn write_lock<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn io_status(e: std::io::Error) -> Status {
    use std::io::ErrorKind::*;
    match e.kind() {
        NotFound => Error::NoEnt,
        PermissionDenied => Error::Acces,
        NotADirectory => Error::NotDir,
        IsADirectory => Error::IsDir,
        _ if e.raw_os_error() == Some(libc::ELOOP) => Error::Inval,
        _ => Error::Io,
    }
}

/// A client-supplied name must be one path component.
pub(super) fn check_name(name: &[u8]) -> Result<&OsStr, Status> {
    if name.is_empty() {
        return Err(Error::NoEnt);
    }
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong);
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(Error::Acces);
    }
    Ok(OsStr::from_bytes(name))
}

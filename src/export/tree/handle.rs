//! NFS file handles, stamped with a version, stable across restarts; their wire form and the
//! composite root's handle. Version 2, the one handed out: image id + a hash of the file's
//! path inside the image + its type, named by content, so every server holding a revision
//! gives its files the same handles and a client's handles resolve on whichever server its
//! address moves to (docs/failover.md). Version 1 (image id + st_dev + st_ino, one host's
//! inode) was handed out before; it still resolves, so clients mounted across the upgrade keep
//! working.

use super::shared::{Error, Status};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// Our part of an NFS handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TreeHandle([u8; HANDLE_LEN]);

/// Layout version byte, then image id and (V1) st_dev, st_ino or (V2) the path's hash, the
/// type and zeros (big-endian u64s).
pub(super) const HANDLE_LEN: usize = 25;

pub(super) const HANDLE_V1: u8 = 1;

pub(super) const HANDLE_V2: u8 = 2;

/// On the wire a handle starts with generation 1 as 8 little-endian bytes: the layout that
/// nfs3_server gave our handles before we answered NFS ourselves, kept so that clients
/// mounted across the upgrade keep working.
pub(super) const WIRE_PREFIX: [u8; 8] = 1u64.to_le_bytes();

pub const WIRE_LEN: usize = 8 + HANDLE_LEN;

/// The composite root: all zeros but the version byte.
pub(super) const ROOT: TreeHandle = TreeHandle([
    HANDLE_V1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
]);

impl TreeHandle {
    /// The handle of the file at `rel` ("" for the image's root) in image `image`, of NFS type
    /// `ftype`: what every server holding the image's revision gives it.
    pub(super) fn of_path(image: u64, rel: &Path, ftype: u32) -> TreeHandle {
        let mut b = [0u8; HANDLE_LEN];
        b[0] = HANDLE_V2;
        b[1..9].copy_from_slice(&image.to_be_bytes());
        b[9..17].copy_from_slice(&path_id(rel).to_be_bytes());
        b[17] = ftype as u8;
        TreeHandle(b)
    }
    /// A version-1 handle, of one host's inode (what older releases handed out).
    pub(super) fn new(image: u64, dev: u64, ino: u64) -> TreeHandle {
        let mut b = [0u8; HANDLE_LEN];
        b[0] = HANDLE_V1;
        b[1..9].copy_from_slice(&image.to_be_bytes());
        b[9..17].copy_from_slice(&dev.to_be_bytes());
        b[17..25].copy_from_slice(&ino.to_be_bytes());
        TreeHandle(b)
    }
    pub(super) fn image(&self) -> u64 {
        u64::from_be_bytes(self.0[1..9].try_into().unwrap_or_default())
    }
    fn word(&self, at: usize) -> u64 {
        u64::from_be_bytes(self.0[at..at + 8].try_into().unwrap_or_default())
    }
    /// A version-1 handle: it names one host's inode, whose numbers are its NFS fileid.
    pub(super) fn is_v1(&self) -> bool {
        self.0[0] == HANDLE_V1
    }
    /// Whether `h` names the file a stat found at its path: the same inode (V1), or a file of
    /// the same type (V2: the path is the file's identity).
    pub(super) fn names(&self, dev: u64, ino: u64, ftype: u32) -> bool {
        match self.is_v1() {
            true => (self.word(9), self.word(17)) == (dev, ino),
            false => u32::from(self.0[17]) == ftype,
        }
    }
    /// The NFS fileid of the file: the path's hash (V2), the same on every server; V1 keeps
    /// the inode number it was given with.
    pub(super) fn fileid(&self, ino: u64) -> u64 {
        match self.is_v1() {
            true => ino,
            false => self.word(9),
        }
    }
    /// The bytes a client holds.
    pub fn wire(&self) -> [u8; WIRE_LEN] {
        let mut w = [0u8; WIRE_LEN];
        w[..8].copy_from_slice(&WIRE_PREFIX);
        w[8..].copy_from_slice(&self.0);
        w
    }
    /// A handle a client sent; BADHANDLE if it is not one of ours.
    pub fn from_wire(b: &[u8]) -> Result<TreeHandle, Status> {
        let b: &[u8; WIRE_LEN] = b.try_into().map_err(|_| Error::BadHandle)?;
        if b[..8] != WIRE_PREFIX || !matches!(b[8], HANDLE_V1 | HANDLE_V2) {
            return Err(Error::BadHandle);
        }
        let mut h = [0u8; HANDLE_LEN];
        h.copy_from_slice(&b[8..]);
        Ok(TreeHandle(h))
    }
}

/// FNV-1a: a hash that stays the same across builds and Rust versions (handles outlive us).
pub(super) fn stable_hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A file's identity inside its image, by its path: the same on every server and across
/// restarts. 64 bits: two paths of one image (a root of 10^5 files) share one with odds
/// about 3 in 10^10 (the walk that resolves an unknown handle logs it if they do).
fn path_id(rel: &Path) -> u64 {
    stable_hash(&[rel.as_os_str().as_bytes()])
}

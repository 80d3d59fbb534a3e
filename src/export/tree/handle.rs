//! NFS file handles: image id + st_dev + st_ino, stamped with a version, stable across
//! restarts; their wire form and the composite root's handle.

use super::shared::{Error, Status};

/// Our part of an NFS handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TreeHandle([u8; HANDLE_LEN]);

/// Layout version byte, then image id, st_dev, st_ino (big-endian u64s).
pub(super) const HANDLE_LEN: usize = 25;

pub(super) const HANDLE_V1: u8 = 1;

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
    pub(super) fn key(&self) -> (u64, u64) {
        (
            u64::from_be_bytes(self.0[9..17].try_into().unwrap_or_default()),
            u64::from_be_bytes(self.0[17..25].try_into().unwrap_or_default()),
        )
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
        if b[..8] != WIRE_PREFIX || b[8] != HANDLE_V1 {
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

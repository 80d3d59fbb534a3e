//! NFSv3 attributes from lstat results: file types (ftype3, from `proto::nfs3`), times, one
//! fsid per image (its fileids are `handles`' to give: by path, the same on every server).

use super::handle::stable_hash;
use crate::proto::nfs3::Attr;
use std::os::unix::fs::MetadataExt;

pub(super) fn time(secs: i64, nsec: i64) -> (u32, u32) {
    (
        secs.clamp(0, u32::MAX as i64) as u32,
        nsec.clamp(0, 999_999_999) as u32,
    )
}

/// The file types, as proto::nfs3 has them (ftype3 is a wire code).
pub use crate::proto::nfs3::{NF3BLK, NF3CHR, NF3DIR, NF3FIFO, NF3LNK, NF3REG, NF3SOCK};

/// Every field of fattr3 from lstat; the mode keeps setuid/setgid/sticky and write bits (an
/// overlay copy-up keeps them, so they must be the image's own).
pub fn attr_from(image_id: u64, m: &std::fs::Metadata) -> Attr {
    let rdev = m.rdev() as libc::dev_t;
    Attr {
        ftype: ftype_of(m.mode()),
        mode: m.mode() & 0o7777,
        nlink: m.nlink().min(u32::MAX as u64) as u32,
        uid: m.uid(),
        gid: m.gid(),
        size: m.size(),
        used: m.blocks().saturating_mul(512),
        rdev: (libc::major(rdev), libc::minor(rdev)),
        fsid: fsid_of(image_id),
        fileid: m.ino(),
        atime: time(m.atime(), m.atime_nsec()),
        mtime: time(m.mtime(), m.mtime_nsec()),
        ctime: time(m.ctime(), m.ctime_nsec()),
    }
}

/// `attr_from` for a stat the kernel filled in directly (`fstatat`, `fstat`).
pub(super) fn attr_from_stat(image_id: u64, st: &libc::stat) -> Attr {
    Attr {
        ftype: ftype_of(st.st_mode),
        mode: st.st_mode & 0o7777,
        nlink: st.st_nlink.min(u32::MAX as _) as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size.max(0) as u64,
        used: (st.st_blocks.max(0) as u64).saturating_mul(512),
        rdev: (libc::major(st.st_rdev), libc::minor(st.st_rdev)),
        fsid: fsid_of(image_id),
        fileid: st.st_ino,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
    }
}

/// The NFS file type of a `st_mode`.
pub(super) fn ftype_of(mode: u32) -> u32 {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => NF3DIR,
        libc::S_IFLNK => NF3LNK,
        libc::S_IFBLK => NF3BLK,
        libc::S_IFCHR => NF3CHR,
        libc::S_IFIFO => NF3FIFO,
        libc::S_IFSOCK => NF3SOCK,
        _ => NF3REG,
    }
}

/// One fsid per image (its name, a revision's included), from nothing of this host's: two
/// images never look like one filesystem, and every server holding one gives the same.
pub(super) fn fsid_of(image_id: u64) -> u64 {
    stable_hash(&[&image_id.to_be_bytes()])
}

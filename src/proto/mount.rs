//! MOUNTv3 (RFC 1813 5) as a pure function: the arguments of each procedure.

use super::rpc::{Reader, Refusal};

/// MNTPATHLEN.
pub const MAX_PATH: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mount<'a> {
    Null,
    Mnt(&'a [u8]),
    Dump,
    Umnt(&'a [u8]),
    UmntAll,
    Export,
}

pub fn mount_args(proc_: u32, args: &[u8]) -> Result<Mount<'_>, Refusal> {
    let mut r = Reader(args);
    let g = Refusal::GarbageArgs;
    let req = match proc_ {
        0 => Mount::Null,
        1 => Mount::Mnt(r.opaque(MAX_PATH).ok_or(g)?),
        2 => Mount::Dump,
        3 => Mount::Umnt(r.opaque(MAX_PATH).ok_or(g)?),
        4 => Mount::UmntAll,
        5 => Mount::Export,
        _ => return Err(Refusal::ProcUnavail),
    };
    if r.done() {
        Ok(req)
    } else {
        Err(Refusal::GarbageArgs)
    }
}

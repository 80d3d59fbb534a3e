//! NFSACL v3 (ONC RPC program 100227, the side protocol beside NFSv3 that Linux and Solaris
//! speak for POSIX ACLs) as pure functions: its calls decoded, and GETACL's answer for a file
//! with no ACL beyond its mode, as knfsd writes it. A server without the program makes the
//! Linux client answer every ACL lookup with EOPNOTSUPP, and overlayfs, which asks for the
//! lower layer's ACL at each permission check of a user who does not own the file, then
//! refuses that user every file of an NFS root (`Cannot execute /bin/bash: Operation not
//! supported` at login).

use super::nfs3::{Attr, MAX_FH};
use super::rpc::{Reader, Refusal, Writer};

/// GETACL's mask bits: the access ACL's entries, its count, the default ACL's entries, its
/// count (Linux's `NFS_ACL`, `NFS_ACLCNT`, `NFS_DFACL`, `NFS_DFACLCNT`).
pub const ACL: u32 = 0x1;
pub const ACL_COUNT: u32 = 0x2;
pub const DEFAULT_ACL: u32 = 0x4;
pub const DEFAULT_ACL_COUNT: u32 = 0x8;
/// Every bit a mask may hold; another is NFS3ERR_INVAL, as knfsd answers.
pub const MASK: u32 = ACL | ACL_COUNT | DEFAULT_ACL | DEFAULT_ACL_COUNT;

/// POSIX ACL entry tags (`ACL_USER_OBJ`, `ACL_GROUP_OBJ`, `ACL_MASK`, `ACL_OTHER`).
const USER_OBJ: u32 = 0x01;
const GROUP_OBJ: u32 = 0x04;
const ACL_MASK: u32 = 0x10;
const OTHER: u32 = 0x20;

/// The NFSACL v3 calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acl<'a> {
    Null,
    /// GETACL: a file's handle, and which parts of its ACLs the client wants.
    GetAcl {
        fh: &'a [u8],
        mask: u32,
    },
    /// SETACL, whatever its arguments: nothing here can change.
    SetAcl,
}

pub fn acl_args(proc_: u32, args: &[u8]) -> Result<Acl<'_>, Refusal> {
    let mut r = Reader(args);
    let g = Refusal::GarbageArgs;
    let call = match proc_ {
        0 => Acl::Null,
        1 => Acl::GetAcl {
            fh: r.opaque(MAX_FH).ok_or(g)?,
            mask: r.u32().ok_or(g)?,
        },
        2 => return Ok(Acl::SetAcl),
        _ => return Err(Refusal::ProcUnavail),
    };
    if r.done() { Ok(call) } else { Err(g) }
}

impl Writer {
    /// GETACL3resok after its status and attributes, for a file whose only ACL is its mode:
    /// the mask as asked, then the access ACL the mode is (owner, group, mask, other: the
    /// mask entry added as knfsd adds it to a three-entry ACL), its entries only when `ACL`
    /// was asked, then an empty default ACL (no file here has one).
    pub fn mode_acls(&mut self, mask: u32, a: &Attr) -> &mut Self {
        let bits = |shift: u32| (a.mode >> shift) & 0o7;
        let entries = [
            [USER_OBJ, a.uid, bits(6)],
            [GROUP_OBJ, a.gid, bits(3)],
            [ACL_MASK, 0, bits(3)],
            [OTHER, 0, bits(0)],
        ];
        self.u32(mask).u32(entries.len() as u32);
        if mask & ACL != 0 {
            self.u32(entries.len() as u32);
            for e in &entries {
                self.words(e);
            }
        } else {
            self.u32(0);
        }
        // The default ACL: no count, no entries.
        self.words(&[0, 0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(bytes: &[u8]) -> Vec<u32> {
        bytes
            .chunks(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    #[test]
    fn calls_decode_and_garbage_is_refused() {
        let mut args = vec![0, 0, 0, 2, 0xab, 0xcd, 0, 0];
        args.extend(15u32.to_be_bytes());
        assert_eq!(
            acl_args(1, &args),
            Ok(Acl::GetAcl {
                fh: &[0xab, 0xcd],
                mask: 15
            })
        );
        assert_eq!(acl_args(1, &args[..6]), Err(Refusal::GarbageArgs));
        let mut longer = args.clone();
        longer.extend([0, 0, 0, 0]);
        assert_eq!(acl_args(1, &longer), Err(Refusal::GarbageArgs));
        assert_eq!(acl_args(0, &[]), Ok(Acl::Null));
        assert_eq!(acl_args(2, &[1, 2, 3]), Ok(Acl::SetAcl));
        assert_eq!(acl_args(3, &[]), Err(Refusal::ProcUnavail));
    }

    #[test]
    fn a_mode_is_answered_as_its_acl_with_a_mask_entry_and_no_default() {
        let a = Attr {
            mode: 0o100754,
            uid: 1000,
            gid: 100,
            ..Attr::default()
        };
        let mut w = Writer::over(Vec::new());
        w.mode_acls(MASK, &a);
        assert_eq!(
            words(&w.buf),
            [
                MASK, 4, 4, // mask, count, entries
                USER_OBJ, 1000, 7, GROUP_OBJ, 100, 5, ACL_MASK, 0, 5, OTHER, 0, 4, //
                0, 0, // default: count, entries
            ]
        );
        // Counts only: no entries.
        let mut w = Writer::over(Vec::new());
        w.mode_acls(ACL_COUNT | DEFAULT_ACL_COUNT, &a);
        assert_eq!(words(&w.buf), [ACL_COUNT | DEFAULT_ACL_COUNT, 4, 0, 0, 0]);
    }
}

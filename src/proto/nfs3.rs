//! NFSv3 (RFC 1813) as pure functions: the arguments of every read-side procedure, the
//! attributes and READDIRPLUS entries replies carry (written with `rpc::Writer`), the typed
//! error a call fails with and its nfsstat3, and the permission rules knfsd applies. Every
//! length is capped before anything is allocated; nothing here panics on input
//! (`tests::random_input_never_panics`). RPC framing is `rpc.rs`'s, MOUNT's arguments
//! `mount.rs`'s.

use super::rpc::{Cred, Reader, Refusal, Writer};

/// NFS3_FHSIZE.
pub const MAX_FH: usize = 64;
/// NFS names; Linux's NAME_MAX.
pub const MAX_NAME: usize = 255;

/// Why a call on an export failed, as the tree (`export::tree`) and the service say it; its
/// wire codes are `nfsstat3` (RFC 1813 2.6) for NFS and `mountstat3` (RFC 1813 5.1.2) for MNT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// No such file or folder.
    NoEnt,
    /// The disk failed us.
    Io,
    /// Not allowed: the caller's credentials, the root access rule, or a name that is not one
    /// path component.
    Acces,
    /// A folder was needed.
    NotDir,
    /// Not a folder was needed.
    IsDir,
    /// Not the right kind of file (READ of a device, READLINK of a file, a symlink loop).
    Inval,
    /// The export is read-only.
    Rofs,
    /// A name longer than `MAX_NAME`.
    NameTooLong,
    /// A handle of ours whose file is gone, or of an image we no longer serve.
    Stale,
    /// Not a handle of ours.
    BadHandle,
    /// A READDIR cookie past the listing.
    BadCookie,
}

impl Error {
    /// Its `nfsstat3`.
    pub const fn nfsstat3(self) -> u32 {
        match self {
            Error::NoEnt => 2,
            Error::Io => 5,
            Error::Acces => 13,
            Error::NotDir => 20,
            Error::IsDir => 21,
            Error::Inval => 22,
            Error::Rofs => 30,
            Error::NameTooLong => 63,
            Error::Stale => 70,
            Error::BadHandle => 10001,
            Error::BadCookie => 10003,
        }
    }

    /// Its `mountstat3`: the codes MOUNT shares with NFS, else MNT3ERR_IO.
    pub const fn mountstat3(self) -> u32 {
        match self {
            Error::NoEnt | Error::Acces | Error::NotDir | Error::Inval | Error::NameTooLong => {
                self.nfsstat3()
            }
            _ => Error::Io.nfsstat3(),
        }
    }
}

impl std::fmt::Display for Error {
    /// The code, as logs and failure reasons have always shown it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.nfsstat3())
    }
}

/// The arguments of the NFSv3 procedures we answer with more than ROFS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nfs<'a> {
    Null,
    GetAttr(&'a [u8]),
    Lookup(&'a [u8], &'a [u8]),
    Access(&'a [u8], u32),
    ReadLink(&'a [u8]),
    Read {
        fh: &'a [u8],
        offset: u64,
        count: u32,
    },
    ReadDir {
        fh: &'a [u8],
        cookie: u64,
        count: u32,
    },
    ReadDirPlus {
        fh: &'a [u8],
        cookie: u64,
        dircount: u32,
        maxcount: u32,
    },
    FsStat(&'a [u8]),
    FsInfo(&'a [u8]),
    PathConf(&'a [u8]),
    /// A procedure that would change something (SETATTR, WRITE, ... COMMIT): its number.
    Modify(u32),
}

pub fn nfs_args(proc_: u32, args: &[u8]) -> Result<Nfs<'_>, Refusal> {
    let mut r = Reader(args);
    let g = Refusal::GarbageArgs;
    let req = match proc_ {
        0 => Nfs::Null,
        1 => Nfs::GetAttr(r.opaque(MAX_FH).ok_or(g)?),
        3 => Nfs::Lookup(r.opaque(MAX_FH).ok_or(g)?, r.opaque(MAX_NAME).ok_or(g)?),
        4 => Nfs::Access(r.opaque(MAX_FH).ok_or(g)?, r.u32().ok_or(g)?),
        5 => Nfs::ReadLink(r.opaque(MAX_FH).ok_or(g)?),
        6 => Nfs::Read {
            fh: r.opaque(MAX_FH).ok_or(g)?,
            offset: r.u64().ok_or(g)?,
            count: r.u32().ok_or(g)?,
        },
        16 => {
            let fh = r.opaque(MAX_FH).ok_or(g)?;
            let cookie = r.u64().ok_or(g)?;
            r.fixed::<8>().ok_or(g)?; // cookie verifier: see `service::nfs`
            Nfs::ReadDir {
                fh,
                cookie,
                count: r.u32().ok_or(g)?,
            }
        }
        17 => {
            let fh = r.opaque(MAX_FH).ok_or(g)?;
            let cookie = r.u64().ok_or(g)?;
            r.fixed::<8>().ok_or(g)?;
            Nfs::ReadDirPlus {
                fh,
                cookie,
                dircount: r.u32().ok_or(g)?,
                maxcount: r.u32().ok_or(g)?,
            }
        }
        18 => Nfs::FsStat(r.opaque(MAX_FH).ok_or(g)?),
        19 => Nfs::FsInfo(r.opaque(MAX_FH).ok_or(g)?),
        20 => Nfs::PathConf(r.opaque(MAX_FH).ok_or(g)?),
        // Refused whatever their arguments say: nothing here can change.
        2 | 7..=15 | 21 => return Ok(Nfs::Modify(proc_)),
        _ => return Err(Refusal::ProcUnavail),
    };
    if r.done() {
        Ok(req)
    } else {
        Err(Refusal::GarbageArgs)
    }
}

/// The failure body (after the status) of a refused changing procedure: empty wcc_data and
/// post_op_attr, as many as that procedure's resfail has.
pub fn modify_fail_words(proc_: u32) -> &'static [u32] {
    match proc_ {
        14 => &[0, 0, 0, 0], // RENAME: fromdir_wcc, todir_wcc
        15 => &[0, 0, 0],    // LINK: file_attributes, linkdir_wcc
        _ => &[0, 0],        // one wcc_data
    }
}

/// fattr3, in wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attr {
    pub ftype: u32,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub used: u64,
    pub rdev: (u32, u32),
    pub fsid: u64,
    pub fileid: u64,
    pub atime: (u32, u32),
    pub mtime: (u32, u32),
    pub ctime: (u32, u32),
}

pub const ATTR_LEN: usize = 84;

/// FSSTAT3resok's figures after its attributes (RFC 1813 3.3.18): bytes in all, free, and
/// free to the caller; file slots likewise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsStat {
    pub tbytes: u64,
    pub fbytes: u64,
    pub abytes: u64,
    pub tfiles: u64,
    pub ffiles: u64,
    pub afiles: u64,
}

impl FsStat {
    /// A file system's statvfs figures (`blocks`, `bfree`, `bavail` in units of `frsize`) as
    /// knfsd's FSSTAT reports them, for a read-only export too: free and available as the
    /// file system has them, and its free file slots as both free and available.
    pub fn from_statvfs(
        frsize: u64,
        blocks: u64,
        bfree: u64,
        bavail: u64,
        files: u64,
        ffree: u64,
    ) -> FsStat {
        FsStat {
            tbytes: blocks.saturating_mul(frsize),
            fbytes: bfree.saturating_mul(frsize),
            abytes: bavail.saturating_mul(frsize),
            tfiles: files,
            ffiles: ffree,
            afiles: ffree,
        }
    }
}

impl Writer {
    /// FSSTAT's figures, then invarsec 0 (they may change at any moment), as knfsd writes it.
    pub fn fsstat(&mut self, s: &FsStat) -> &mut Self {
        self.u64(s.tbytes)
            .u64(s.fbytes)
            .u64(s.abytes)
            .u64(s.tfiles)
            .u64(s.ffiles)
            .u64(s.afiles)
            .u32(0)
    }

    pub fn attr(&mut self, a: &Attr) -> &mut Self {
        self.words(&[a.ftype, a.mode, a.nlink, a.uid, a.gid])
            .u64(a.size)
            .u64(a.used)
            .words(&[a.rdev.0, a.rdev.1])
            .u64(a.fsid)
            .u64(a.fileid)
            .words(&[a.atime.0, a.atime.1, a.mtime.0, a.mtime.1])
            .words(&[a.ctime.0, a.ctime.1])
    }
    pub fn post_op_attr(&mut self, a: Option<&Attr>) -> &mut Self {
        match a {
            Some(a) => self.u32(1).attr(a),
            None => self.u32(0),
        }
    }
}

/// A directory's READDIRPLUS entries, encoded once per listing: a page is then one copy of
/// consecutive entries (encoding each entry per page, reading its attributes from a map,
/// was most of a listing's time).
#[derive(Debug, Default)]
pub struct PlusEntries {
    bytes: Vec<u8>,
    /// Per entry: where it ends in `bytes`, and what it counts against READDIRPLUS `dircount`.
    ends: Vec<(u32, u32)>,
}

/// What an entry counts against `dircount`: fileid, name and cookie (RFC 1813).
pub fn dir_entry_bytes(name: &[u8]) -> usize {
    8 + 4 + name.len().div_ceil(4) * 4 + 8
}

impl Writer {
    /// One entryplus3 (or entry3 without `plus`), from `value_follows` on.
    pub fn dir_entry(
        &mut self,
        fileid: u64,
        name: &[u8],
        cookie: u64,
        plus: Option<(Option<&Attr>, &[u8])>,
    ) -> &mut Self {
        self.u32(1).u64(fileid).opaque(name).u64(cookie);
        if let Some((attr, fh)) = plus {
            self.post_op_attr(attr);
            // A handle only with attributes: without them the entry may be gone.
            if attr.is_some() {
                self.u32(1).opaque(fh);
            } else {
                self.u32(0);
            }
        }
        self
    }
}

impl PlusEntries {
    pub fn push(&mut self, fileid: u64, name: &[u8], cookie: u64, attr: Option<&Attr>, fh: &[u8]) {
        let mut w = Writer::over(std::mem::take(&mut self.bytes));
        w.dir_entry(fileid, name, cookie, Some((attr, fh)));
        self.bytes = w.buf;
        self.ends
            .push((self.bytes.len() as u32, dir_entry_bytes(name) as u32));
    }
    pub fn len(&self) -> usize {
        self.ends.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
    fn start(&self, i: usize) -> usize {
        if i == 0 {
            0
        } else {
            self.ends[i - 1].0 as usize
        }
    }
    /// How many entries from `from` fit in `room` bytes and `dir_room` bytes of `dircount`.
    pub fn fit(&self, from: usize, room: usize, mut dir_room: Option<usize>) -> usize {
        let start = self.start(from.min(self.len()));
        let mut n = 0;
        for &(end, dir) in self.ends.iter().skip(from) {
            if end as usize - start > room {
                break;
            }
            if let Some(d) = dir_room.as_mut() {
                match d.checked_sub(dir as usize) {
                    Some(left) => *d = left,
                    None => break,
                }
            }
            n += 1;
        }
        n
    }
    /// The bytes of entries `from..from + n`.
    pub fn slice(&self, from: usize, n: usize) -> &[u8] {
        if n == 0 {
            return &[];
        }
        &self.bytes[self.start(from)..self.ends[from + n - 1].0 as usize]
    }
}

/// ACCESS3 bits.
pub const ACCESS3_READ: u32 = 0x01;
pub const ACCESS3_LOOKUP: u32 = 0x02;
pub const ACCESS3_EXECUTE: u32 = 0x20;

/// The uid and gid a caller without credentials (AUTH_NONE, or an AUTH_UNIX body we could
/// not read), or a squashed root, is taken as: knfsd's default anonuid/anongid.
pub const NOBODY: u32 = 65534;

/// Mode bits.
pub const MAY_READ: u32 = 4;
pub const MAY_EXEC: u32 = 1;

/// ftype3 (RFC 1813 2.5): the file types fattr3 names.
pub const NF3REG: u32 = 1;
pub const NF3DIR: u32 = 2;
pub const NF3BLK: u32 = 3;
pub const NF3CHR: u32 = 4;
pub const NF3LNK: u32 = 5;
pub const NF3SOCK: u32 = 6;
pub const NF3FIFO: u32 = 7;

impl Cred {
    /// The caller as permission checks see it, as knfsd's `nfsd_setuser` makes it: no
    /// credentials is nobody (65534, no groups); with `root_squash`, uid 0 becomes nobody and
    /// gid 0, primary or auxiliary, becomes 65534.
    pub fn effective(&self, root_squash: bool) -> std::borrow::Cow<'_, Cred> {
        use std::borrow::Cow;
        let Some(uid) = self.uid else {
            return Cow::Owned(Cred {
                uid: Some(NOBODY),
                gid: NOBODY,
                gids: Vec::new(),
            });
        };
        // The common case borrows: no copy of the groups on every call.
        if !root_squash {
            return Cow::Borrowed(self);
        }
        let squash = |id: u32| if id == 0 { NOBODY } else { id };
        Cow::Owned(Cred {
            uid: Some(squash(uid)),
            gid: squash(self.gid),
            gids: self.gids.iter().copied().map(squash).collect(),
        })
    }
}

/// Whether `cred` (already `effective`) may do `want` (`MAY_READ`, `MAY_EXEC`) to a file with
/// attributes `a`, by the rules of the Linux VFS (`generic_permission`) that knfsd applies:
/// the owner's bits if the caller owns it, else the group's if the file's group is the
/// caller's primary or an auxiliary group, else the other bits. Root (uid 0 left unsquashed)
/// reads anything and searches any folder (CAP_DAC_READ_SEARCH) and executes a file any of
/// whose x bits is set (CAP_DAC_OVERRIDE). `owner_override` is knfsd's
/// NFSD_MAY_OWNER_OVERRIDE, set for READ and READDIR (`nfsd_open`): the owner may read what
/// it owns whatever the mode says, since NFS has no open file to hold the right it had when
/// it opened it.
pub fn may(a: &Attr, cred: &Cred, want: u32, owner_override: bool) -> bool {
    let uid = cred.uid.unwrap_or(NOBODY);
    if uid == 0 {
        return match want {
            MAY_EXEC => a.ftype == NF3DIR || a.mode & 0o111 != 0,
            _ => true,
        };
    }
    if owner_override && uid == a.uid {
        return true;
    }
    let bits = if uid == a.uid {
        (a.mode >> 6) & 7
    } else if cred.gid == a.gid || cred.gids.contains(&a.gid) {
        (a.mode >> 3) & 7
    } else {
        a.mode & 7
    };
    bits & want == want
}

/// ACCESS on a read-only export, by the mode bits as knfsd's `nfsd_access` answers it (`may`
/// without the owner override): READ by the r bits, LOOKUP on a folder and EXECUTE on anything
/// else by the x bits; never MODIFY, EXTEND or DELETE. `cred` is the caller's `effective`
/// credential. So the owner of a mode-0300 file is told it may not read it, as a local
/// `access(2)` would tell it and as libnfs's tests expect (a client opening the file for
/// reading asks ACCESS first and gets EACCES), while a READ of it is still answered (the
/// override is for READ only: a process may read back a file it opened before a chmod).
pub fn access(asked: u32, a: &Attr, cred: &Cred) -> u32 {
    let mut ok = 0;
    if may(a, cred, MAY_READ, false) {
        ok |= ACCESS3_READ;
    }
    if may(a, cred, MAY_EXEC, false) {
        ok |= if a.ftype == NF3DIR {
            ACCESS3_LOOKUP
        } else {
            ACCESS3_EXECUTE
        };
    }
    asked & ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::mount::*;
    use crate::proto::rpc::*;
    use std::borrow::Cow;

    #[test]
    fn errors_carry_rfc_1813s_codes_and_mount_keeps_only_its_own() {
        let all = [
            (Error::NoEnt, 2, 2),
            (Error::Io, 5, 5),
            (Error::Acces, 13, 13),
            (Error::NotDir, 20, 20),
            (Error::IsDir, 21, 5),
            (Error::Inval, 22, 22),
            (Error::Rofs, 30, 5),
            (Error::NameTooLong, 63, 63),
            (Error::Stale, 70, 5),
            (Error::BadHandle, 10001, 5),
            (Error::BadCookie, 10003, 5),
        ];
        for (e, nfs, mount) in all {
            assert_eq!((e.nfsstat3(), e.mountstat3()), (nfs, mount), "{e:?}");
            assert_eq!(e.to_string(), nfs.to_string());
        }
    }

    fn rec(words: &[u32], last: bool) -> Vec<u8> {
        let body: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        let mark = body.len() as u32 | if last { 0x8000_0000 } else { 0 };
        let mut out = mark.to_be_bytes().to_vec();
        out.extend(body);
        out
    }

    #[test]
    fn records_split_join_and_cap() {
        let mut s = rec(&[1, 2], false);
        s.extend(rec(&[3], true));
        s.extend(rec(&[4], true));
        let (used, body) = next_record(&s, 1024).unwrap().unwrap();
        assert_eq!(used, 20);
        assert_eq!(body.len(), 12);
        assert!(matches!(body, Cow::Owned(_)));
        let (used2, body) = next_record(&s[used..], 1024).unwrap().unwrap();
        assert_eq!((used2, &body[..]), (8, &[0, 0, 0, 4][..]));
        assert!(matches!(body, Cow::Borrowed(_)));
        // Any prefix is "need more".
        for cut in 0..20 {
            assert_eq!(next_record(&s[..cut], 1024), Ok(None), "{cut}");
        }
        // A huge length is refused before its bytes arrive.
        assert_eq!(
            next_record(&0xffff_ffffu32.to_be_bytes(), 1 << 20),
            Err(Framing::TooLong)
        );
        // So are endless empty fragments.
        let empties: Vec<u8> = (0..300).flat_map(|_| 0u32.to_be_bytes()).collect();
        assert_eq!(next_record(&empties, 1024), Err(Framing::TooLong));
    }

    fn unix_call(proc_: u32, args: &[u32]) -> Vec<u8> {
        let mut w = vec![7, 0, 2, PROG_NFS, 3, proc_, AUTH_UNIX, 32];
        // stamp, machine "ab", uid 1000, gid 100, 2 gids (10, 20)
        w.extend([0, 2, 0x6162_0000, 1000, 100, 2, 10, 20]);
        w.extend([0, 0]);
        w.extend(args);
        w.iter().flat_map(|x| x.to_be_bytes()).collect()
    }

    #[test]
    fn calls_and_arguments() {
        let b = unix_call(6, &[4, 0xdead_beef, 0, 4096, 65536]);
        let c = call(&b).unwrap();
        assert_eq!((c.xid, c.prog, c.vers, c.proc_), (7, PROG_NFS, 3, 6));
        assert_eq!(
            c.cred,
            Cred {
                uid: Some(1000),
                gid: 100,
                gids: vec![10, 20]
            }
        );
        assert_eq!(
            nfs_args(c.proc_, c.args),
            Ok(Nfs::Read {
                fh: &0xdead_beefu32.to_be_bytes(),
                offset: 4096,
                count: 65536
            })
        );
        // Trailing bytes, short arguments, an oversized handle, an unknown procedure.
        assert_eq!(nfs_args(1, &[0, 0, 0, 0, 1]), Err(Refusal::GarbageArgs));
        assert_eq!(nfs_args(6, &[0, 0, 0, 0]), Err(Refusal::GarbageArgs));
        let mut big = 65u32.to_be_bytes().to_vec();
        big.resize(4 + 68, 0);
        assert_eq!(nfs_args(1, &big), Err(Refusal::GarbageArgs));
        assert_eq!(nfs_args(22, &[]), Err(Refusal::ProcUnavail));
        assert_eq!(nfs_args(7, &[1, 2, 3]), Ok(Nfs::Modify(7)));
        assert_eq!(
            mount_args(1, &[0, 0, 0, 2, b'/', b'x', 0, 0]),
            Ok(Mount::Mnt(b"/x"))
        );
        assert_eq!(mount_args(9, &[]), Err(Refusal::ProcUnavail));
    }

    #[test]
    fn fsstat_reports_the_file_system_as_knfsd_does() {
        // 4 KiB blocks: 1000 in all, 300 free, 250 free to users; 64 inodes, 40 free.
        let s = FsStat::from_statvfs(4096, 1000, 300, 250, 64, 40);
        assert_eq!(
            s,
            FsStat {
                tbytes: 4_096_000,
                fbytes: 1_228_800,
                abytes: 1_024_000,
                tfiles: 64,
                ffiles: 40,
                afiles: 40,
            }
        );
        assert_eq!(
            FsStat::from_statvfs(1 << 20, u64::MAX, 0, 0, 0, 0).tbytes,
            u64::MAX
        );
        let mut w = Writer::new();
        w.fsstat(&s);
        let words: Vec<u32> = w
            .buf
            .chunks(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(
            words,
            [
                0, 4_096_000, 0, 1_228_800, 0, 1_024_000, 0, 64, 0, 40, 0, 40, 0
            ]
        );
    }

    #[test]
    fn access_follows_the_mode() {
        let file = |mode, uid, gid| Attr {
            ftype: 1,
            mode,
            uid,
            gid,
            ..Attr::default()
        };
        let all = 0x3f;
        let user = |uid, gid| Cred {
            uid: Some(uid),
            gid,
            gids: vec![],
        };
        // A script nobody may execute: root reads it but does not execute it.
        assert_eq!(access(all, &file(0o644, 0, 0), &user(0, 0)), ACCESS3_READ);
        assert_eq!(
            access(all, &file(0o755, 0, 0), &user(1000, 1000)),
            ACCESS3_READ | ACCESS3_EXECUTE
        );
        assert_eq!(access(all, &file(0o750, 0, 5), &user(1000, 1000)), 0);
        assert_eq!(
            access(all, &file(0o750, 0, 5), &user(1000, 5)),
            ACCESS3_READ | ACCESS3_EXECUTE
        );
        assert_eq!(access(all, &file(0o700, 1000, 5), &user(1000, 5)), 0x21);
        // The owner's bits, and no owner override (knfsd's ACCESS; libnfs test_0430): a
        // 0300 file's owner is not granted READ, nor a 0044 file's, whom "other" is.
        assert_eq!(
            access(all, &file(0o300, 1000, 5), &user(1000, 5)),
            ACCESS3_EXECUTE
        );
        assert_eq!(access(all, &file(0o044, 1000, 1000), &user(1000, 1000)), 0);
        assert_eq!(
            access(all, &file(0o044, 1000, 1000), &user(2000, 2000)),
            ACCESS3_READ
        );
        // READ keeps the override: the owner's READ of either is answered.
        for mode in [0o300, 0o044, 0o000] {
            assert!(may(&file(mode, 1000, 5), &user(1000, 5), MAY_READ, true));
            assert!(!may(&file(mode, 1000, 5), &user(1000, 5), MAY_READ, false));
        }
        let dir = Attr {
            ftype: 2,
            mode: 0o711,
            ..Attr::default()
        };
        assert_eq!(access(all, &dir, &user(1000, 1000)), ACCESS3_LOOKUP);
        // Only what was asked; never modify/extend/delete.
        assert_eq!(
            access(ACCESS3_READ, &file(0o777, 0, 0), &user(0, 0)),
            ACCESS3_READ
        );
        assert_eq!(access(0x1c, &file(0o777, 0, 0), &user(0, 0)), 0);
        // No AUTH_UNIX: nobody, so only what "other" may.
        let none = Cred::default().effective(false).into_owned();
        assert_eq!(access(all, &file(0o754, 0, 0), &none), ACCESS3_READ);
    }

    #[test]
    fn permissions_follow_knfsd() {
        let file = |mode, uid, gid| Attr {
            ftype: NF3REG,
            mode,
            uid,
            gid,
            ..Attr::default()
        };
        let dir = |mode, uid, gid| Attr {
            ftype: NF3DIR,
            ..file(mode, uid, gid)
        };
        let user = |uid, gid, gids: &[u32]| Cred {
            uid: Some(uid),
            gid,
            gids: gids.to_vec(),
        };
        // /etc/shadow: 0640 root:shadow(42).
        let shadow = file(0o640, 0, 42);
        assert!(!may(&shadow, &user(1000, 1000, &[]), MAY_READ, true));
        assert!(!may(&shadow, &user(65534, 65534, &[]), MAY_READ, true));
        assert!(
            may(&shadow, &user(1000, 1000, &[42]), MAY_READ, true),
            "auxiliary group"
        );
        assert!(
            may(&shadow, &user(1000, 42, &[]), MAY_READ, true),
            "primary group"
        );
        assert!(may(&shadow, &user(0, 0, &[]), MAY_READ, true), "root");
        // Squashed, root is nobody, and its gid 0 is no way into a root-group file.
        let squashed = user(0, 0, &[0]).effective(true).into_owned();
        assert_eq!(squashed, user(NOBODY, NOBODY, &[NOBODY]));
        assert!(!may(&shadow, &squashed, MAY_READ, true));
        assert!(!may(&file(0o640, 7, 0), &squashed, MAY_READ, true));
        // The owner's bits win over group and other (no fallback), except the owner override
        // on READ.
        let odd = file(0o044, 1000, 1000);
        assert!(!may(&odd, &user(1000, 1000, &[]), MAY_READ, false));
        assert!(may(&odd, &user(1000, 1000, &[]), MAY_READ, true));
        assert!(may(&odd, &user(1001, 1000, &[]), MAY_READ, false));
        // Folders: LOOKUP needs x, READDIR r; root searches any folder and executes only
        // what some x bit allows.
        let root_only = dir(0o700, 0, 0);
        assert!(!may(&root_only, &user(1000, 1000, &[]), MAY_EXEC, false));
        assert!(!may(&root_only, &user(1000, 1000, &[]), MAY_READ, true));
        assert!(may(&root_only, &user(0, 0, &[]), MAY_EXEC, false));
        let search_only = dir(0o711, 0, 0);
        assert!(may(&search_only, &user(1000, 1000, &[]), MAY_EXEC, false));
        assert!(!may(&search_only, &user(1000, 1000, &[]), MAY_READ, true));
        assert!(!may(&file(0o644, 0, 0), &user(0, 0, &[]), MAY_EXEC, false));
        assert!(may(&file(0o744, 5, 5), &user(0, 0, &[]), MAY_EXEC, false));
        // No credentials: nobody, with no groups.
        assert_eq!(*Cred::default().effective(false), user(NOBODY, NOBODY, &[]));
        // ACCESS goes by the mode alone, as knfsd's: no READ of the odd file for its owner,
        // though READ answers it.
        assert_eq!(access(0x3f, &odd, &user(1000, 1000, &[])), 0);
        assert_eq!(access(0x3f, &shadow, &user(1000, 1000, &[])), 0);
    }

    /// Random and mutated input through every decoder: no panic, and what comes back stays
    /// inside its caps.
    #[test]
    fn random_input_never_panics() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let seeds = [
            unix_call(6, &[4, 1, 0, 0, 100]),
            unix_call(17, &[4, 1, 0, 0, 0, 0, 4096, 65536]),
            unix_call(3, &[4, 1, 3, 0x6162_6300]),
        ];
        let mut decoded = 0;
        for i in 0..30_000 {
            let mut b = if i % 3 == 0 {
                (0..next() % 512).map(|_| next() as u8).collect()
            } else {
                seeds[i % seeds.len()].clone()
            };
            for _ in 0..next() % 4 {
                if !b.is_empty() {
                    let at = next() as usize % b.len();
                    b[at] = next() as u8;
                }
            }
            if next() % 4 == 0 {
                let keep = next() as usize % (b.len() + 1);
                b.truncate(keep);
            }
            if let Some(c) = call(&b) {
                assert!(c.cred.gids.len() <= MAX_GIDS);
                if let Ok(a) = nfs_args(c.proc_, c.args) {
                    decoded += 1;
                    if let Nfs::Lookup(fh, name) = a {
                        assert!(fh.len() <= MAX_FH && name.len() <= MAX_NAME);
                    }
                }
                let _ = mount_args(c.proc_, c.args);
            }
            if let Ok(Some((used, body))) = next_record(&b, 4096) {
                assert!(used <= b.len() && body.len() <= used);
            }
        }
        assert!(decoded > 0);
    }

    /// Encoded entries are what `dir_entry` writes, and a page takes whole entries while
    /// both the byte and the dircount budgets hold.
    #[test]
    fn plus_entries_page_whole_entries() {
        let attr = Attr {
            ftype: 1,
            fileid: 7,
            ..Attr::default()
        };
        let fh = [9u8; 33];
        let names: [&[u8]; 3] = [b"a", b"bbbbb", b"cc"];
        let mut enc = PlusEntries::default();
        let mut one = Vec::new();
        for (i, n) in names.iter().enumerate() {
            enc.push(7, n, i as u64 + 3, Some(&attr), &fh);
            let mut w = Writer::new();
            w.dir_entry(7, n, i as u64 + 3, Some((Some(&attr), &fh[..])));
            one.push(w.buf);
        }
        assert_eq!(enc.len(), 3);
        assert_eq!(enc.slice(0, 3), one.concat().as_slice());
        assert_eq!(enc.slice(1, 1), one[1].as_slice());
        assert_eq!(enc.slice(2, 0), b"");
        let all = one.concat().len();
        assert_eq!(enc.fit(0, all, None), 3);
        assert_eq!(enc.fit(0, all - 1, None), 2);
        assert_eq!(enc.fit(1, one[1].len(), None), 1);
        assert_eq!(enc.fit(3, all, None), 0);
        // dircount: fileid + name + cookie, per entry.
        let dir: Vec<usize> = names.iter().map(|n| dir_entry_bytes(n)).collect();
        assert_eq!(dir, [24, 28, 24]);
        assert_eq!(enc.fit(0, all, Some(24 + 28)), 2);
        assert_eq!(enc.fit(0, all, Some(23)), 0);
        // Without attributes an entry carries no handle.
        let mut w = Writer::new();
        w.dir_entry(7, b"a", 3, Some((None, &fh[..])));
        assert_eq!(w.buf.len(), 4 + 8 + 8 + 8 + 4 + 4);
    }
}

//! The answers to MOUNT and NFS calls, written into the connection's reply buffer: each
//! handle checked against the client's pools and the image's `secure_ports`, each READ,
//! READLINK and READDIR against the caller's credentials (`nfs3::may`).

use super::conn::{Conn, ReplyData};
use super::limits::{BIG_READ, MAX_DIR_REPLY, NFS3ERR_TOOSMALL, ROOT_PULL, WTMAX};
use crate::config::{RootProto, Store};
use crate::export::tree::{self, Status, Tree, TreeHandle};
use crate::proto::mount::Mount;
use crate::proto::nfs3::{self, Error, Nfs};
use crate::proto::nfsacl::{self, Acl};
use crate::proto::rpc::{self, Cred, Writer};
use crate::record::{Kind, Proto, Who};
use crate::sys::page_buf::PageBuf;

impl Conn {
    /// A MOUNT v3 call's reply: EXPORT lists the tree's exports; MNT answers an export's root
    /// handle to a client its pools allow (from a port below 1024 where the image asks it),
    /// records the attach or, refused, the boot's failure.
    pub(super) fn mount(&mut self, xid: u32, args: Mount<'_>, out: &mut Writer) {
        out.accepted(xid, rpc::SUCCESS);
        match args {
            Mount::Null | Mount::Umnt(_) | Mount::UmntAll => {}
            Mount::Dump => {
                out.u32(0);
            }
            Mount::Export => {
                for export in self.tree.exports() {
                    out.u32(1).opaque(export.as_bytes()).u32(0);
                }
                out.u32(0);
            }
            Mount::Mnt(path) => {
                let export = String::from_utf8_lossy(path).into_owned();
                // A revision this server lacks and another member holds: pulled at once,
                // this answer waiting for it (`image::demand`), up to `ROOT_PULL`; only for
                // a client the image's pools allow (a stranger starts no pull; its MNT is
                // refused below).
                if let Some((image, id)) =
                    crate::image::serve::lacking(&self.config, &export, RootProto::Nfs)
                    && self.may_pull(&image.name)
                {
                    let tree = crate::config::names::revision(&image, &id).root_tree();
                    crate::image::demand::root(&image, &id, ROOT_PULL, || tree.is_dir());
                }
                // A revision imported since start, or an image a reload added, joins the
                // tree when first mounted.
                if let Some((e, name, root)) =
                    crate::image::serve::nfs_to_learn(&self.config, path, self.tree.exports())
                {
                    tracing::info!(export = %e, "nfs export of a new image or revision");
                    let image = self.config.images.get(crate::config::names::base(&name));
                    let ram = image.is_some_and(|i| i.store == Store::Ram);
                    self.tree.add_export(e, name, root, ram);
                }
                let found = self
                    .tree
                    .mount(path)
                    .and_then(|h| match self.tree.image_of(&h)? {
                        Some(img) if !self.allowed(img) => Err(Error::Acces),
                        Some(img) if !self.port_ok(img) => Err(Error::Acces),
                        Some(img) => {
                            // A `store: ram` revision first mounted now: loaded before the
                            // answer (once; the kernel's MOUNT retries while it waits).
                            self.tree.load_if_ram(img);
                            Ok(h)
                        }
                        None => Ok(h),
                    });
                match found {
                    Ok(h) => {
                        self.mounts += 1;
                        self.recorder.record(
                            Who::Ip(self.ip),
                            Kind::RootAttach {
                                proto: Proto::Nfs,
                                export: export.clone().into(),
                            },
                        );
                        tracing::info!(client = %self.peer, export, "nfs mount");
                        // AUTH_UNIX is the one flavour offered.
                        out.u32(0).opaque(&h.wire()).words(&[1, rpc::AUTH_UNIX]);
                    }
                    Err(st) => {
                        tracing::info!(client = %self.peer, export, status = %st, "nfs mount refused");
                        // The initrd cannot attach its root: that boot has failed.
                        self.metrics.nfs().refused.inc();
                        self.recorder.record(
                            Who::Ip(self.ip),
                            Kind::Failed {
                                proto: Some(Proto::Nfs),
                                reason: format!("mount of `{export}` refused (status {st})"),
                            },
                        );
                        out.u32(st.mountstat3());
                    }
                }
            }
        }
        out.finish();
    }

    /// The handle of a call, checked against the client's pools.
    fn handle(&mut self, fh: &[u8]) -> Result<TreeHandle, Status> {
        let h = TreeHandle::from_wire(fh)?;
        match self.tree.image_of(&h)? {
            Some(img) if !self.allowed(img) => Err(Error::Acces),
            _ => Ok(h),
        }
    }

    /// The handle `fh` of a call (the tree's root for a call without one), checked against
    /// the client's pools (`handle`) and the image's `secure_ports` (`port_ok`). None once its
    /// refusal is written into `out`: an authentication error for a handle the client may not
    /// use, as for a knfsd export that does not list the host, else the status and, unless
    /// `bare`, one empty post_op_attr (every failure body but GETATTR's has one).
    fn checked(
        &mut self,
        xid: u32,
        fh: Option<&[u8]>,
        bare: bool,
        out: &mut Writer,
    ) -> Option<TreeHandle> {
        let Some(fh) = fh else {
            return Some(self.tree.root());
        };
        let status = match self.handle(fh) {
            Err(Error::Acces) => {
                out.auth_error(xid, rpc::AUTH_TOOWEAK);
                return None;
            }
            Err(st) => st,
            Ok(h) => match self.tree.image_of(&h).ok().flatten() {
                Some(img) if !self.port_ok(img) => {
                    self.metrics.nfs().refused.inc();
                    Error::Acces
                }
                _ => return Some(h),
            },
        };
        out.accepted(xid, rpc::SUCCESS).u32(status.nfsstat3());
        if !bare {
            out.u32(0);
        }
        out.finish();
        None
    }

    /// An NFSACL v3 call's reply: GETACL answers a file's mode as its ACL (no file here has
    /// another), after the same checks as an NFS call's; SETACL is ROFS.
    pub(super) fn acl(&mut self, xid: u32, args: Acl<'_>, out: &mut Writer) {
        let (fh, mask) = match args {
            Acl::GetAcl { fh, mask } => (fh, mask),
            Acl::Null => {
                out.accepted(xid, rpc::SUCCESS);
                out.finish();
                return;
            }
            Acl::SetAcl => {
                out.accepted(xid, rpc::SUCCESS)
                    .u32(Error::Rofs.nfsstat3())
                    .u32(0);
                out.finish();
                return;
            }
        };
        let Some(h) = self.checked(xid, Some(fh), false, out) else {
            return;
        };
        out.accepted(xid, rpc::SUCCESS);
        match self.tree.getattr(&h) {
            Ok(_) if mask & !nfsacl::MASK != 0 => {
                out.u32(Error::Inval.nfsstat3()).u32(0);
            }
            Ok(a) => {
                out.u32(0).post_op_attr(Some(&a)).mode_acls(mask, &a);
            }
            Err(st) => {
                out.u32(st.nfsstat3()).u32(0);
            }
        }
        out.finish();
    }

    /// An NFS v3 call's reply: its handle checked first (`handle`, `port_ok`), then the
    /// procedure answered from the tree; every procedure that would write answers ROFS.
    ///
    /// Longer than the house's ~150 lines as a dispatch table is: one arm per NFSv3 procedure, each a few
    /// lines from the decoded arguments to the tree's answer, read side by side.
    pub(super) fn nfs(&mut self, xid: u32, cred: &Cred, args: Nfs<'_>, out: &mut Writer) {
        let fh = match &args {
            Nfs::Null | Nfs::Modify(_) => None,
            Nfs::GetAttr(fh)
            | Nfs::Lookup(fh, _)
            | Nfs::Access(fh, _)
            | Nfs::ReadLink(fh)
            | Nfs::Read { fh, .. }
            | Nfs::ReadDir { fh, .. }
            | Nfs::ReadDirPlus { fh, .. }
            | Nfs::FsStat(fh)
            | Nfs::FsInfo(fh)
            | Nfs::PathConf(fh) => Some(*fh),
        };
        let Some(h) = self.checked(xid, fh, matches!(args, Nfs::GetAttr(_)), out) else {
            return;
        };
        let img = self.tree.image_of(&h).ok().flatten();
        let squash = img.is_some_and(|i| self.trust(i).0);
        let cred = &cred.effective(squash);
        let tree = self.tree.clone();
        out.accepted(xid, rpc::SUCCESS);
        match args {
            Nfs::Null => {}
            Nfs::Modify(proc_) => {
                out.u32(Error::Rofs.nfsstat3())
                    .words(nfs3::modify_fail_words(proc_));
            }
            Nfs::GetAttr(_) => match tree.getattr(&h) {
                Ok(a) => {
                    out.u32(0).attr(&a);
                }
                Err(st) => {
                    out.u32(st.nfsstat3());
                }
            },
            Nfs::Lookup(_, name) => {
                let dir = tree.getattr(&h).ok();
                let searchable = dir
                    .as_ref()
                    .is_none_or(|d| self.permitted(d, cred, nfs3::MAY_EXEC, false));
                match tree
                    .lookup(&h, name)
                    .and_then(|x| if searchable { Ok(x) } else { Err(Error::Acces) })
                {
                    Ok((child, a)) => {
                        out.u32(0)
                            .opaque(&child.wire())
                            .post_op_attr(Some(&a))
                            .post_op_attr(dir.as_ref());
                    }
                    Err(st) => {
                        out.u32(st.nfsstat3()).post_op_attr(dir.as_ref());
                    }
                }
            }
            Nfs::Access(_, asked) => match tree.getattr(&h) {
                Ok(a) => {
                    out.u32(0)
                        .post_op_attr(Some(&a))
                        .u32(nfs3::access(asked, &a, cred));
                }
                Err(st) => {
                    out.u32(st.nfsstat3()).u32(0);
                }
            },
            Nfs::ReadLink(_) => match tree.readlink(&h) {
                Ok((a, _)) if !self.permitted(&a, cred, nfs3::MAY_READ, false) => {
                    out.u32(Error::Acces.nfsstat3()).post_op_attr(Some(&a));
                }
                Ok((a, target)) => {
                    out.u32(0).post_op_attr(Some(&a)).opaque(&target);
                }
                Err(st) => {
                    out.u32(st.nfsstat3())
                        .post_op_attr(tree.getattr(&h).ok().as_ref());
                }
            },
            Nfs::Read { offset, count, .. } => self.read(&h, cred, offset, count, out),
            Nfs::ReadDir { .. } | Nfs::ReadDirPlus { .. }
                if tree
                    .getattr(&h)
                    .is_ok_and(|d| !self.permitted(&d, cred, nfs3::MAY_READ, true)) =>
            {
                out.u32(Error::Acces.nfsstat3())
                    .post_op_attr(tree.getattr(&h).ok().as_ref());
            }
            Nfs::ReadDir { cookie, count, .. } => readdir(&tree, &h, cookie, count, None, out),
            Nfs::ReadDirPlus {
                cookie,
                dircount,
                maxcount,
                ..
            } => readdir(&tree, &h, cookie, maxcount, Some(dircount), out),
            Nfs::FsStat(_) => match tree.getattr(&h).and_then(|a| Ok((a, tree.fsstat(&h)?))) {
                Ok((a, fs)) => {
                    out.u32(0).post_op_attr(Some(&a)).fsstat(&fs);
                }
                Err(st) => {
                    out.u32(st.nfsstat3()).u32(0);
                }
            },
            Nfs::FsInfo(_) => match tree.getattr(&h) {
                Ok(a) => {
                    out.u32(0).post_op_attr(Some(&a));
                    out.words(&[tree::MAX_READ, tree::MAX_READ, 4096]);
                    out.words(&[WTMAX, WTMAX, 4096, MAX_DIR_REPLY]);
                    out.u64(u64::MAX >> 1);
                    // time_delta 1 ns; FSF3_SYMLINK | FSF3_HOMOGENEOUS (no CANSETTIME).
                    out.words(&[0, 1, 0x02 | 0x08]);
                }
                Err(st) => {
                    out.u32(st.nfsstat3()).u32(0);
                }
            },
            Nfs::PathConf(_) => match tree.getattr(&h) {
                Ok(a) => {
                    out.u32(0).post_op_attr(Some(&a));
                    // linkmax, name_max, no_trunc, chown_restricted, case_insensitive,
                    // case_preserving.
                    out.words(&[u32::MAX, 255, 1, 1, 0, 1]);
                }
                Err(st) => {
                    out.u32(st.nfsstat3()).u32(0);
                }
            },
        }
        out.finish();
    }

    /// READ: from the file's mapping when the tree offers one (`Tree::read_mapped`: small
    /// files, and big cached reads), the data then leaving after the reply's header, not
    /// copied into `out`; else read into the connection's page-aligned buffer (big reads) or
    /// straight after a reserved header in `out`, which is filled in afterwards.
    fn read(&mut self, h: &TreeHandle, cred: &Cred, offset: u64, count: u32, out: &mut Writer) {
        // The mode is checked on the attributes the read itself returns (no extra lstat on
        // the hot path); data read for a caller refused is dropped unsent.
        let denied = |this: &Self, a: &nfs3::Attr| !this.permitted(a, cred, nfs3::MAY_READ, true);
        match self.tree.read_mapped(h, offset, count as usize) {
            Ok(Some(m)) if denied(self, &m.attr) => {
                out.u32(Error::Acces.nfsstat3()).post_op_attr(Some(&m.attr));
                return;
            }
            Ok(Some(m)) => {
                read_ok_header(out, &m.attr, m.len(), m.eof);
                self.count_read(m.len());
                self.data_pending = Some(ReplyData::Mapped(m));
                return;
            }
            // Not from a mapping: read below.
            Ok(None) => {}
            Err(st) => {
                out.u32(st.nfsstat3())
                    .post_op_attr(self.tree.getattr(h).ok().as_ref());
                return;
            }
        }
        // Clients ask for rsize whatever the file's size: what counts is what is left of it.
        let big = count >= BIG_READ
            && self
                .tree
                .getattr(h)
                .is_ok_and(|a| a.size.saturating_sub(offset) >= u64::from(BIG_READ));
        if big {
            return self.big_read(h, cred, offset, count, out);
        }
        let at = out.buf.len();
        // status, post_op_attr (1 + fattr3), count, eof, data length.
        let header = 4 + 4 + nfs3::ATTR_LEN + 4 + 4 + 4;
        out.buf.resize(at + header, 0);
        // The connection has its own thread, so a read that waits for the disk holds up
        // nobody else.
        match self.tree.read(h, offset, count, &mut out.buf) {
            Ok((attr, _)) if denied(self, &attr) => {
                out.buf.truncate(at);
                out.u32(Error::Acces.nfsstat3()).post_op_attr(Some(&attr));
            }
            Ok((attr, eof)) => {
                let n = out.buf.len() - at - header;
                out.pad(n);
                let mut head = Writer::new();
                read_ok_header(&mut head, &attr, n, eof);
                out.buf[at..at + header].copy_from_slice(&head.buf);
                self.count_read(n);
            }
            Err(st) => {
                out.buf.truncate(at);
                out.u32(st.nfsstat3())
                    .post_op_attr(self.tree.getattr(h).ok().as_ref());
            }
        }
    }

    /// A READ of `BIG_READ` or more not answered from a mapping: read into the connection's
    /// page-aligned buffer and sent after the reply's header (`send_with_data`).
    fn big_read(&mut self, h: &TreeHandle, cred: &Cred, offset: u64, count: u32, out: &mut Writer) {
        let buf = self
            .big
            .get_or_insert_with(|| PageBuf::zeroed(tree::MAX_READ as usize));
        buf.set_len(count.min(tree::MAX_READ) as usize);
        match self.tree.read_into(h, offset, buf) {
            Ok((attr, _, _)) if !self.permitted(&attr, cred, nfs3::MAY_READ, true) => {
                out.u32(Error::Acces.nfsstat3()).post_op_attr(Some(&attr));
            }
            Ok((attr, n, eof)) => {
                read_ok_header(out, &attr, n, eof);
                self.data_pending = Some(ReplyData::Read(n));
                self.count_read(n);
            }
            Err(st) => {
                out.u32(st.nfsstat3())
                    .post_op_attr(self.tree.getattr(h).ok().as_ref());
            }
        }
    }
}

/// A successful READ's reply up to its data: status, attributes, count, eof, data length.
fn read_ok_header(out: &mut Writer, attr: &nfs3::Attr, n: usize, eof: bool) {
    out.u32(0)
        .post_op_attr(Some(attr))
        .words(&[n as u32, eof as u32, n as u32]);
}

/// READDIR (`plus` = None) or READDIRPLUS (`plus` = Some(dircount)): as many entries as
/// `maxcount` bytes of reply hold (and, for PLUS, `dircount` bytes of names and cookies).
fn readdir(
    tree: &Tree,
    dir: &TreeHandle,
    cookie: u64,
    maxcount: u32,
    plus: Option<u32>,
    out: &mut Writer,
) {
    let (attr, mut it) = match tree.entries(dir, cookie) {
        Ok(x) => x,
        Err(st) => {
            out.u32(st.nfsstat3())
                .post_op_attr(tree.getattr(dir).ok().as_ref());
            return;
        }
    };
    let start = out.len();
    out.u32(0).post_op_attr(Some(&attr));
    out.buf.extend_from_slice(&it.verifier());
    // Room for the list end and eof.
    let limit = (start + maxcount.min(MAX_DIR_REPLY) as usize).saturating_sub(8);
    let mut dir_room = plus.filter(|d| *d > 0).map(|d| d as usize);
    let mut n = 0;
    // `.` and `..` (attributes looked up now), and for READDIR every entry, one by one.
    while let Some((next, name, h, listed)) = it.peek() {
        if plus.is_some() && it.child_index().is_some() {
            break;
        }
        let mark = out.len();
        let a = listed.copied().or_else(|| tree.entry_attr(&h).ok());
        let fileid = a.map_or(0, |a| a.fileid);
        let fh = h.wire();
        out.dir_entry(fileid, name, next, plus.map(|_| (a.as_ref(), &fh[..])));
        let entry_dir_bytes = nfs3::dir_entry_bytes(name);
        if out.len() > limit || dir_room.is_some_and(|d| entry_dir_bytes > d) {
            out.buf.truncate(mark);
            break;
        }
        if let Some(d) = dir_room.as_mut() {
            *d -= entry_dir_bytes;
        }
        n += 1;
        it.advance();
    }
    // READDIRPLUS children: consecutive entries encoded once per listing, copied as they are.
    if plus.is_some()
        && let Some(from) = it.child_index()
        && out.len() <= limit
    {
        let enc = it.listing().plus.get_or_init(|| plus_entries(it.listing()));
        let fit = enc.fit(from, limit - out.len(), dir_room);
        out.buf.extend_from_slice(enc.slice(from, fit));
        it.skip(fit);
        n += fit;
    }
    if n == 0 && it.peek().is_some() {
        out.buf.truncate(start);
        out.u32(NFS3ERR_TOOSMALL).post_op_attr(Some(&attr));
        return;
    }
    out.u32(0).u32(it.peek().is_none() as u32);
}

/// A listing's children as READDIRPLUS entries.
fn plus_entries(l: &tree::Listing) -> nfs3::PlusEntries {
    let mut enc = nfs3::PlusEntries::default();
    let mut i = 0;
    while let Some((name, h, a)) = l.child(i) {
        enc.push(
            a.fileid,
            name,
            tree::Entries::child_cookie(i),
            Some(a),
            &h.wire(),
        );
        i += 1;
    }
    enc
}

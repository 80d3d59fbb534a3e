//! One NFS client connection on a thread of its own: calls read off the socket in order,
//! each answered into one buffer (`Conn::call`: RPC, then MOUNT, NFS or GETPORT), the replies
//! written together; who may use which export, and READ bytes for the boot record.

use super::ended::Ended;
use super::limits::{
    FIRST_CALL, IDLE, MAX_OUT, MAX_RECORD, POLL, STRANGER_TIME, TICK, WRITE_TIMEOUT,
};
use super::send::{send, send_mapped, send_with_data};
use crate::boot::exports::root_allowed;
use crate::config::{Config, RootProto};
use crate::export::tree::{self, MappedRead, Tree, TreeHandle};
use crate::metrics::Metrics;
use crate::proto::mount::{self, Mount};
use crate::proto::nfs3::{self, Error, Nfs};
use crate::proto::nfsacl;
use crate::proto::portmap;
use crate::proto::rpc::{self, Cred, Refusal, Writer};
use crate::record::event::{Detach, Micros, now_micros};
use crate::record::{Kind, Proto, Recorder, Who};
use crate::service::identity::Identity;
use crate::service::quick_read::QuickRead;
use crate::shutdown::Shutdown;
use crate::sys::page_buf::PageBuf;
use crate::trace::format::What;
use bytes::{Buf as _, BytesMut};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

/// One client connection.
pub(super) struct Conn {
    pub(super) tree: Arc<Tree>,
    pub(super) config: Arc<Config>,
    pub(super) identity: Identity,
    pub(super) recorder: Recorder,
    pub(super) metrics: Metrics,
    pub(super) table: Arc<[portmap::Mapping]>,
    pub(super) peer: SocketAddr,
    pub(super) ip: Ipv4Addr,
    /// Per image: may this client use it (asked once per connection, again after a refusal
    /// in case its lease just arrived).
    pub(super) allowed: Vec<Option<(bool, Instant)>>,
    /// Per image: (root_squash, secure_ports).
    pub(super) trust: Arc<[(bool, bool)]>,
    pub(super) mounts: u32,
    pub(super) total: u64,
    pub(super) unreported: u64,
    pub(super) last_flush: Instant,
    /// A big READ's data, read page-aligned (see `BIG_READ`). Dropped when the client goes
    /// quiet.
    pub(super) big: Option<PageBuf>,
    /// READ data the reply just built still has to send, when it is not in `out`.
    pub(super) data_pending: Option<ReplyData>,
    /// The call just answered, for the client's boot trace (when it keeps one): when it was
    /// received, and what it was.
    pub(super) traced: Option<(Micros, What)>,
    /// Its address holds no lease of an NFS pool: it ends `STRANGER_TIME` after it began.
    pub(super) stranger: bool,
}

/// Where a READ's data is when it is not in `out`.
pub(super) enum ReplyData {
    /// The first bytes of `Conn::big`.
    Read(usize),
    /// In the file's mapping.
    Mapped(MappedRead),
}

/// Why a connection ends early.
pub(super) enum Close {
    Malformed(&'static str),
}

impl Conn {
    /// Serves the connection on a thread of its own with a blocking socket: a booting client
    /// waits for each small call in turn, and a thread parked in `read` answers sooner than a
    /// task woken through the reactor.
    pub(super) fn run(mut self, mut s: std::net::TcpStream, shutdown: Shutdown) {
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(POLL));
        let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
        if let Err(e) =
            crate::service::bounds::lose_silent_peers(&s, self.config.limits.root_lost_after)
        {
            tracing::warn!(client = %self.peer, error = %e, "nfs cannot set keepalive");
        }
        let started = Instant::now();
        let accepted = crate::record::event::now_micros();
        let mut heard = Instant::now();
        let mut inbuf = BytesMut::with_capacity(64 * 1024);
        let mut chunk = vec![0u8; 64 * 1024];
        let mut out = Writer::new();
        let mut next_call = QuickRead::default();
        let mut called = false;
        let why = 'conn: loop {
            // Answer every complete call buffered, writing whenever enough has piled up.
            loop {
                let used = match rpc::next_record(&inbuf, MAX_RECORD) {
                    Ok(Some((used, rec))) => {
                        if let Err(Close::Malformed(why)) = self.call(&rec, &mut out) {
                            self.metrics.nfs().malformed.inc();
                            break 'conn Ended::Malformed(why);
                        }
                        called = true;
                        let sent = match self.data_pending.take() {
                            None => Ok(()),
                            Some(ReplyData::Read(n)) => {
                                let data = &self.big.as_ref().expect("read into it")[..n];
                                send_with_data(&mut s, &mut out, data)
                            }
                            Some(ReplyData::Mapped(m)) => send_mapped(&mut s, &mut out, &m),
                        };
                        if let Some((received, what)) = self.traced.take() {
                            self.recorder.tracer().op(self.ip, received, what);
                        }
                        if let Err(why) = sent {
                            break 'conn why;
                        }
                        used
                    }
                    Ok(None) => break,
                    Err(rpc::Framing::TooLong) => {
                        self.metrics.nfs().malformed.inc();
                        break 'conn Ended::Malformed("record too long");
                    }
                };
                inbuf.advance(used);
                if out.len() >= MAX_OUT
                    && let Err(why) = send(&mut s, &mut out)
                {
                    break 'conn why;
                }
            }
            if !out.is_empty()
                && let Err(why) = send(&mut s, &mut out)
            {
                break 'conn why;
            }
            // READ bytes are reported within a TICK even if the client then goes quiet.
            self.flush_reads(false);
            if shutdown.is_triggered() {
                break 'conn Ended::Shutdown;
            }
            if self.stranger && started.elapsed() >= STRANGER_TIME {
                break 'conn Ended::StrangerTimeUp;
            }
            if !called && started.elapsed() >= FIRST_CALL {
                break 'conn Ended::NoCall;
            }
            match next_call.read(&mut s, &mut chunk) {
                Ok(0) => break 'conn Ended::Closed,
                Ok(n) => {
                    inbuf.extend_from_slice(&chunk[..n]);
                    heard = Instant::now();
                }
                Err(e) if crate::service::bounds::is_lost(&e) => break 'conn Ended::Lost,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if heard.elapsed() >= IDLE {
                        break 'conn Ended::Idle;
                    }
                    // Quiet for a POLL: a booted client's connection keeps no 1 MiB buffer.
                    self.big = None;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    break 'conn Ended::Reset;
                }
                Err(_) => break 'conn Ended::Closed,
            }
        };
        self.flush_reads(true);
        // A reset of a connection that read the root says the client is gone (it restarted,
        // or its kernel dropped the root), and so does silence on any connection of the root
        // (powered off, or cut off); a close does not: the kernel closes idle connections,
        // nfsmount its MOUNT connection. libnfs resets its MOUNT connection once mounted.
        let how = match why {
            Ended::Reset if self.total > 0 => Some(Detach::Reset),
            Ended::Lost if self.mounts > 0 || self.total > 0 => Some(Detach::Lost),
            _ => None,
        };
        if let Some(how) = how {
            self.recorder.record(
                Who::Ip(self.ip),
                Kind::RootDetach {
                    proto: Proto::Nfs,
                    how,
                    since: Some(accepted),
                },
            );
        }
        tracing::info!(
            client = %self.peer, %why, mounts = self.mounts, read_bytes = self.total,
            secs = started.elapsed().as_secs(), "nfs connection ended"
        );
    }

    fn flush_reads(&mut self, now: bool) {
        if self.unreported > 0 && (now || self.last_flush.elapsed() >= TICK) {
            self.last_flush = Instant::now();
            let bytes = std::mem::take(&mut self.unreported);
            self.recorder.record(
                Who::Ip(self.ip),
                Kind::RootRead {
                    proto: Proto::Nfs,
                    bytes,
                },
            );
        }
    }

    /// Whether this client may use the revision the tree's image `name` (`IMAGE@ID`) is, if
    /// it is one (`boot::exports::revision_allowed`: a canary's revision is its machines'
    /// alone until activated).
    fn revision_allowed(&self, image: &str, name: &str, mac: Option<crate::config::Mac>) -> bool {
        let Some(rev) = crate::config::names::revision_of(name) else {
            return true;
        };
        let active = self
            .config
            .images
            .get(image)
            .and_then(|i| crate::image::store::active(&i.dir).ok().flatten());
        crate::boot::exports::revision_allowed(
            &self.config,
            image,
            rev,
            active.as_deref(),
            self.ip,
            mac,
        )
    }

    /// Whether this client may have a revision of `image` pulled for it: the root access
    /// rule for the image (whether it may use that revision is asked at its MNT, `allowed`).
    pub(super) fn may_pull(&self, image: &str) -> bool {
        let mac = self.identity.holder(self.ip.into());
        root_allowed(&self.config, RootProto::Nfs, image, self.ip, mac)
    }

    /// Whether this client may use image `img`; each refused call is counted.
    pub(super) fn allowed(&mut self, img: usize) -> bool {
        if img >= self.allowed.len() {
            self.allowed.resize(img + 1, None); // a revision learned since
        }
        let ok = match self.allowed[img] {
            Some((ok, at)) if ok || at.elapsed() < TICK => ok,
            _ => {
                let mac = self.identity.holder(self.ip.into());
                let name = self.tree.image_name(img);
                let image = crate::config::names::base(name);
                let ok = root_allowed(&self.config, RootProto::Nfs, image, self.ip, mac)
                    && self.revision_allowed(image, name, mac);
                static REFUSED: crate::service::bounds::LogLimit =
                    crate::service::bounds::LogLimit::new();
                if !ok && let Some(suppressed) = REFUSED.allow() {
                    tracing::warn!(client = %self.peer, image, ?mac, suppressed, "nfs client holds no lease of a pool booting this image over nfs; refused");
                }
                self.allowed[img] = Some((ok, Instant::now()));
                ok
            }
        };
        if !ok {
            self.metrics.nfs().refused.inc();
        }
        ok
    }

    /// Answers one call into `out`.
    fn call(&mut self, rec: &[u8], out: &mut Writer) -> Result<(), Close> {
        let Some(c) = rpc::call(rec) else {
            return Err(Close::Malformed("not an rpc call"));
        };
        self.metrics.nfs().requests.inc();
        if c.rpcvers != 2 {
            self.metrics.nfs().refused.inc();
            out.rpc_mismatch(c.xid);
            return Ok(());
        }
        match (c.prog, c.vers) {
            (rpc::PROG_NFS, 3) => match nfs3::nfs_args(c.proc_, c.args) {
                Ok(args) if self.recorder.tracer().wants(self.ip) => {
                    let received = now_micros();
                    let before = self.total;
                    let what = self.trace_of(&args);
                    self.nfs(c.xid, &c.cred, args, out);
                    let answered = out.last_status();
                    self.traced = what.map(|mut w| {
                        if let What::Nfs {
                            bytes,
                            status,
                            proc,
                            ..
                        } = &mut w
                        {
                            *bytes = self.total - before;
                            // NULL's answer has no status; a denied call is ACCES.
                            if proc != "null" {
                                *status = answered.unwrap_or(Error::Acces.nfsstat3());
                            }
                        }
                        (received, w)
                    });
                }
                Ok(args) => self.nfs(c.xid, &c.cred, args, out),
                Err(r) => {
                    self.metrics.nfs().refused.inc();
                    refuse(out, c.xid, r)
                }
            },
            (rpc::PROG_MOUNT, 3) => match mount::mount_args(c.proc_, c.args) {
                Ok(Mount::Mnt(path)) if self.recorder.tracer().wants(self.ip) => {
                    let received = now_micros();
                    let mut what = What::Nfs {
                        proc: "mnt".into(),
                        path: String::from_utf8_lossy(path).into_owned(),
                        name: None,
                        offset: 0,
                        count: 0,
                        bytes: 0,
                        status: 0,
                    };
                    self.mount(c.xid, Mount::Mnt(path), out);
                    if let What::Nfs { status, .. } = &mut what {
                        *status = out.last_status().unwrap_or(Error::Acces.nfsstat3());
                    }
                    self.traced = Some((received, what));
                }
                Ok(args) => self.mount(c.xid, args, out),
                Err(r) => {
                    self.metrics.nfs().refused.inc();
                    refuse(out, c.xid, r)
                }
            },
            (rpc::PROG_NFSACL, 3) => match nfsacl::acl_args(c.proc_, c.args) {
                Ok(args) => self.acl(c.xid, args, out),
                Err(r) => {
                    self.metrics.nfs().refused.inc();
                    refuse(out, c.xid, r)
                }
            },
            (rpc::PROG_PORTMAP, _) => {
                // Our public port, not whatever a library would guess.
                if let Some(a) = portmap::answer(rec, &self.table) {
                    out.record(&a.reply);
                }
            }
            (rpc::PROG_NFS, _) | (rpc::PROG_MOUNT, _) | (rpc::PROG_NFSACL, _) => {
                self.metrics.nfs().refused.inc();
                out.accepted(c.xid, rpc::PROG_MISMATCH).words(&[3, 3]);
                out.finish();
            }
            _ => {
                self.metrics.nfs().refused.inc();
                out.accepted(c.xid, rpc::PROG_UNAVAIL);
                out.finish();
            }
        }
        Ok(())
    }

    /// A call as its trace line has it: the procedure, and the path its handle names in its
    /// image (`/` is the image's root). None for calls a replay need not make.
    fn trace_of(&self, args: &Nfs<'_>) -> Option<What> {
        let (proc_, fh, name, offset, count) = match args {
            Nfs::Null => ("null", None, None, 0, 0),
            Nfs::GetAttr(fh) => ("getattr", Some(fh), None, 0, 0),
            Nfs::Lookup(fh, n) => ("lookup", Some(fh), Some(n), 0, 0),
            Nfs::Access(fh, _) => ("access", Some(fh), None, 0, 0),
            Nfs::ReadLink(fh) => ("readlink", Some(fh), None, 0, 0),
            Nfs::Read { fh, offset, count } => ("read", Some(fh), None, *offset, *count as u64),
            Nfs::ReadDir { fh, cookie, count } => {
                ("readdir", Some(fh), None, *cookie, *count as u64)
            }
            Nfs::ReadDirPlus {
                fh,
                cookie,
                maxcount,
                ..
            } => ("readdirplus", Some(fh), None, *cookie, *maxcount as u64),
            Nfs::FsStat(fh) => ("fsstat", Some(fh), None, 0, 0),
            Nfs::FsInfo(fh) => ("fsinfo", Some(fh), None, 0, 0),
            Nfs::PathConf(fh) => ("pathconf", Some(fh), None, 0, 0),
            Nfs::Modify(_) => return None,
        };
        let path = match fh.map(|fh| TreeHandle::from_wire(fh).and_then(|h| self.tree.resolve(&h)))
        {
            None => String::new(),
            Some(Ok(tree::Node::In { rel, .. })) => format!("/{}", rel.display())
                .trim_end_matches("/.")
                .replace("//", "/"),
            Some(Ok(tree::Node::Root)) => "..".into(),
            Some(Err(_)) => "?".into(),
        };
        Some(What::Nfs {
            proc: proc_.into(),
            path,
            name: name.map(|n| String::from_utf8_lossy(n).into_owned()),
            offset,
            count,
            bytes: 0,
            status: 0,
        })
    }

    /// (root_squash, secure_ports) of image `img`'s config: for a revision learned since
    /// start, its image's.
    pub(super) fn trust(&self, img: usize) -> (bool, bool) {
        self.trust.get(img).copied().unwrap_or_else(|| {
            self.config
                .images
                .get(crate::config::names::base(self.tree.image_name(img)))
                .map_or((false, true), |im| (im.root_squash, im.secure_ports))
        })
    }

    /// Whether the caller's source port satisfies the image's `secure_ports`.
    pub(super) fn port_ok(&self, img: usize) -> bool {
        if !self.trust(img).1 || self.peer.port() < 1024 {
            return true;
        }
        static INSECURE: crate::service::bounds::LogLimit = crate::service::bounds::LogLimit::new();
        if let Some(suppressed) = INSECURE.allow() {
            tracing::warn!(client = %self.peer, image = self.tree.image_name(img), suppressed,
                "nfs call from a port above 1023 refused (images.NAME.secure_ports)");
        }
        false
    }

    /// `nfs3::may`, counting a refusal.
    pub(super) fn permitted(
        &self,
        a: &nfs3::Attr,
        cred: &Cred,
        want: u32,
        owner_override: bool,
    ) -> bool {
        let ok = nfs3::may(a, cred, want, owner_override);
        if !ok {
            self.metrics.nfs().refused.inc();
            tracing::debug!(client = %self.peer, uid = ?cred.uid, mode = a.mode, owner = a.uid,
                group = a.gid, want, "nfs permission denied");
        }
        ok
    }

    /// Bytes of READ data answered, for the boot record.
    pub(super) fn count_read(&mut self, n: usize) {
        self.total += n as u64;
        self.unreported += n as u64;
    }
}

fn refuse(out: &mut Writer, xid: u32, r: Refusal) {
    let stat = match r {
        Refusal::ProcUnavail => rpc::PROC_UNAVAIL,
        Refusal::GarbageArgs => rpc::GARBAGE_ARGS,
    };
    out.accepted(xid, stat);
    out.finish();
}

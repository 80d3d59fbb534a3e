//! NFS service: MOUNT v3 and NFS v3 (and GETPORT, for clients that ask the NFS port) for every
//! image whose pool says `root: nfs`, on the port `app` bound, over TCP. Calls are decoded by
//! `proto::nfs3` and answered from `export::tree::Tree`.
//!
//! Why not nfs3_server any more: it served only connections it accepted itself, so we relayed
//! every byte through a second loopback connection (two extra copies and wake-ups per call),
//! and inside it every call crossed a duplex pipe, a spawned task and a channel, with a
//! blocking-pool trip per lstat and an open() per READ. A booting client waits for each of
//! thousands of small calls in turn, so that overhead was most of its time (BENCHMARKS.md,
//! `## NFS`). Its argument decoder also allocates whatever length a client claims.
//!
//! One thread per connection handles calls in order: everything buffered is answered, then the
//! replies go out in one write. Limits: `MAX_CONNECTIONS`, `MAX_RECORD` per call, `MAX_OUT`
//! of replies buffered, `IDLE` without a call, `WRITE_TIMEOUT` for a client that stops reading.
//!
//! Credentials are checked on every call, as knfsd checks them (`proto::nfs3::may`): the
//! caller's AUTH_UNIX uid, gid and auxiliary gids (AUTH_NONE is nobody, 65534; uid/gid 0 too
//! when the image says `root_squash`) against the mode bits of what it names: READ needs r
//! (the owner always may), READDIR(PLUS) r on the folder (the owner always may), LOOKUP x on
//! the folder, READLINK r on the link (always there on Linux, whose links are 0777, so as
//! knfsd's no check); ACCESS answers by the same rules. An image with `secure_ports` (the
//! default) answers MNT and NFS calls only from source ports below 1024. A refusal is
//! NFS3ERR_ACCES (MNT3ERR_ACCES), counted as refused.

use super::Carries;
use super::identity::Identity;
use crate::boot::exports::root_allowed;
use crate::config::{Config, RootProto, Store};
use crate::export::tree::{self, MappedRead, Status, Tree, TreeHandle};
use crate::metrics::Metrics;
use crate::proto::mount::{self, Mount};
use crate::proto::nfs3::{self, Error, Nfs};
use crate::proto::portmap;
use crate::proto::rpc::{self, Cred, Refusal, Writer};
use crate::record::event::{Detach, Micros, now_micros};
use crate::record::{Kind, Proto, Recorder, Who};
use crate::service::quick_read::QuickRead;
use crate::shutdown::Shutdown;
use crate::sys::page_buf::PageBuf;
use crate::trace::format::What;
use bytes::{Buf as _, BytesMut};
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

const MAX_CONNECTIONS: usize = 1024;
/// Like knfsd: a client that said nothing for this long is dropped; NFS clients reconnect.
const IDLE: Duration = Duration::from_secs(360);
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often READ bytes are reported.
const TICK: Duration = Duration::from_secs(1);
/// How often a connection waiting for a call looks at the shutdown flag and its READ bytes.
const POLL: Duration = Duration::from_millis(250);
/// Largest call accepted (fragment marks included); WRITE is refused and we advertise
/// `WTMAX`, so calls are small. A larger one closes the connection.
pub const MAX_RECORD: usize = 256 * 1024;
const WTMAX: u32 = 64 * 1024;
/// Replies buffered before they are written (a client may pipeline many 1 MiB READs).
const MAX_OUT: usize = 2 << 20;
/// READs at least this long are read into a page-aligned buffer and sent from there: the
/// kernel's copy from the page cache into a destination aligned unlike its source runs at a
/// fraction of its speed on some CPUs (see `page_buf`), and a reply buffer's offset is
/// anything.
const BIG_READ: u32 = 64 * 1024;
/// Largest READDIR(PLUS) reply we build, whatever the client allows.
const MAX_DIR_REPLY: u32 = 1 << 20;
const NFS3ERR_TOOSMALL: u32 = 10005;

pub async fn serve(listener: super::Listener, shared: super::Shared) -> anyhow::Result<()> {
    let super::Shared {
        config,
        recorder,
        metrics,
        identity,
        shutdown,
        ..
    } = shared;
    let mut images = Vec::new();
    // Each NFS pool's image and its per-architecture ones (`pools.NAME.arch`).
    let nfs_images = || {
        config
            .pools
            .values()
            .filter(|p| p.root == RootProto::Nfs)
            .flat_map(|p| p.images())
    };
    for image in nfs_images() {
        if !images.iter().any(|(_, n, _, _)| *n == image.name) {
            let ram = image.store == Store::Ram;
            let export = image.nfs_export.clone();
            images.push((export, image.name.clone(), image.root_tree(), ram));
        }
    }
    // An image with revisions: each revision is an export of its own (`image::serve`). In
    // RAM for `store: ram`: the one active at start is loaded now, the others at their first
    // MOUNT (`Tree::load_if_ram`).
    images.retain(|(_, name, _, _)| {
        config
            .images
            .get(name)
            .is_none_or(|i| !crate::image::store::managed(&i.dir))
    });
    let mut later = Vec::new();
    for image in nfs_images() {
        let active = crate::image::serve::serving(image).nfs_export.clone();
        let ram = image.store == Store::Ram;
        for (export, name, root) in crate::image::serve::nfs_exports(image) {
            let known = |e: &String| {
                images.iter().any(|(k, _, _, _)| k == e) || later.iter().any(|(k, _, _, _)| k == e)
            };
            if !known(&export) {
                if export == active {
                    images.push((export, name, root, ram));
                } else {
                    later.push((export, name, root, ram));
                }
            }
        }
    }
    let tree = Arc::new(Tree::with_exports(images));
    {
        let tree = tree.clone();
        tokio::task::spawn_blocking(move || tree.load_ram()).await?;
    }
    for (export, name, root, ram) in later {
        tree.add_export(export, name, root, ram);
    }
    {
        // Ends within a second of the service, when the last connection lets go of the tree.
        let tree = Arc::downgrade(&tree);
        std::thread::Builder::new()
            .name("nfs-listings".into())
            .spawn(move || Tree::keep_listings_fresh(tree))?;
    }
    let exports: Vec<&str> = tree.exports().collect();
    tracing::info!(exports = ?exports, "nfs exports");
    let table: Arc<[portmap::Mapping]> =
        portmap::table(config.server.ports.nfs, config.server.ports.portmap).into();

    // Per export of the tree: (root_squash, secure_ports) of its image.
    let trust: Arc<[(bool, bool)]> = (0..tree.exports().count())
        .map(|i| {
            config
                .images
                .get(crate::image::serve::base(tree.image_name(i)))
                .map_or((false, true), |im| (im.root_squash, im.secure_ports))
        })
        .collect();
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Some((stream, peer, paced)) =
            super::accept(&listener, &shutdown, "nfs", Carries::Root).await
        else {
            break;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            static FULL: super::bounds::LogLimit = super::bounds::LogLimit::new();
            metrics.nfs().refused.inc();
            if let Some(suppressed) = FULL.allow() {
                tracing::warn!(client = %peer, limit = MAX_CONNECTIONS, suppressed,
                    "nfs connection refused: too many");
            }
            continue;
        };
        let ip = super::ipv4_of(peer.ip()).unwrap_or(Ipv4Addr::UNSPECIFIED);
        let conn = Conn {
            tree: tree.clone(),
            config: config.clone(),
            identity: identity.clone(),
            recorder: recorder.clone(),
            metrics: metrics.clone(),
            table: table.clone(),
            peer,
            ip,
            allowed: vec![None; tree.exports().count()],
            trust: trust.clone(),
            mounts: 0,
            total: 0,
            unreported: 0,
            last_flush: Instant::now(),
            big: None,
            data_pending: None,
            traced: None,
        };
        let stream = match stream.into_std().and_then(|s| {
            s.set_nonblocking(false)?;
            Ok(s)
        }) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(client = %peer, error = %e, "nfs connection dropped");
                continue;
            }
        };
        let stop = shutdown.clone();
        shutdown.spawn(async move {
            let (done, ended) = tokio::sync::oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name("nfs-conn".into())
                .spawn(move || {
                    conn.run(stream, stop);
                    drop(paced);
                    let _ = done.send(());
                });
            match thread {
                Ok(_) => {
                    let _ = ended.await;
                }
                Err(e) => {
                    tracing::error!(client = %peer, error = %e, "nfs connection thread not started")
                }
            }
            drop(slot);
        });
    }
    Ok(())
}

/// One client connection.
struct Conn {
    tree: Arc<Tree>,
    config: Arc<Config>,
    identity: Identity,
    recorder: Recorder,
    metrics: Metrics,
    table: Arc<[portmap::Mapping]>,
    peer: SocketAddr,
    ip: Ipv4Addr,
    /// Per image: may this client use it (asked once per connection, again after a refusal
    /// in case its lease just arrived).
    allowed: Vec<Option<(bool, Instant)>>,
    /// Per image: (root_squash, secure_ports).
    trust: Arc<[(bool, bool)]>,
    mounts: u32,
    total: u64,
    unreported: u64,
    last_flush: Instant,
    /// A big READ's data, read page-aligned (see `BIG_READ`). Dropped when the client goes
    /// quiet.
    big: Option<PageBuf>,
    /// READ data the reply just built still has to send, when it is not in `out`.
    data_pending: Option<ReplyData>,
    /// The call just answered, for the client's boot trace (when it keeps one): when it was
    /// received, and what it was.
    traced: Option<(Micros, What)>,
}

/// Where a READ's data is when it is not in `out`.
enum ReplyData {
    /// The first bytes of `Conn::big`.
    Read(usize),
    /// In the file's mapping.
    Mapped(MappedRead),
}

/// Why a connection ends early.
enum Close {
    Malformed(&'static str),
}

impl Conn {
    /// Serves the connection on a thread of its own with a blocking socket: a booting client
    /// waits for each small call in turn, and a thread parked in `read` answers sooner than a
    /// task woken through the reactor.
    fn run(mut self, mut s: std::net::TcpStream, shutdown: Shutdown) {
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(POLL));
        let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
        if let Err(e) = super::bounds::lose_silent_peers(&s, self.config.limits.root_lost_after) {
            tracing::warn!(client = %self.peer, error = %e, "nfs cannot set keepalive");
        }
        let started = Instant::now();
        let accepted = crate::record::event::now_micros();
        let mut heard = Instant::now();
        let mut inbuf = BytesMut::with_capacity(64 * 1024);
        let mut chunk = vec![0u8; 64 * 1024];
        let mut out = Writer::new();
        let mut next_call = QuickRead::default();
        let why = 'conn: loop {
            // Answer every complete call buffered, writing whenever enough has piled up.
            loop {
                let used = match rpc::next_record(&inbuf, MAX_RECORD) {
                    Ok(Some((used, rec))) => {
                        if let Err(Close::Malformed(why)) = self.call(&rec, &mut out) {
                            self.metrics.nfs().malformed.inc();
                            break 'conn why;
                        }
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
                        break 'conn "record too long";
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
                break 'conn "shutdown";
            }
            match next_call.read(&mut s, &mut chunk) {
                Ok(0) => break 'conn "client closed",
                Ok(n) => {
                    inbuf.extend_from_slice(&chunk[..n]);
                    heard = Instant::now();
                }
                Err(e) if super::bounds::is_lost(&e) => break 'conn "client lost",
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if heard.elapsed() >= IDLE {
                        break 'conn "idle";
                    }
                    // Quiet for a POLL: a booted client's connection keeps no 1 MiB buffer.
                    self.big = None;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    break 'conn "client reset";
                }
                Err(_) => break 'conn "client closed",
            }
        };
        self.flush_reads(true);
        // A reset of a connection that read the root says the client is gone (it restarted,
        // or its kernel dropped the root), and so does silence on any connection of the root
        // (powered off, or cut off); a close does not: the kernel closes idle connections,
        // nfsmount its MOUNT connection. libnfs resets its MOUNT connection once mounted.
        let how = match why {
            "client reset" if self.total > 0 => Some(Detach::Reset),
            "client lost" if self.mounts > 0 || self.total > 0 => Some(Detach::Lost),
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
            client = %self.peer, why, mounts = self.mounts, read_bytes = self.total,
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

    /// Whether this client may use image `img`; each refused call is counted.
    fn allowed(&mut self, img: usize) -> bool {
        if img >= self.allowed.len() {
            self.allowed.resize(img + 1, None); // a revision learned since
        }
        let ok = match self.allowed[img] {
            Some((ok, at)) if ok || at.elapsed() < TICK => ok,
            _ => {
                let mac = self.identity.holder(self.ip.into());
                let image = crate::image::serve::base(self.tree.image_name(img));
                let ok = root_allowed(&self.config, RootProto::Nfs, image, self.ip, mac);
                static REFUSED: super::bounds::LogLimit = super::bounds::LogLimit::new();
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
            (rpc::PROG_PORTMAP, _) => {
                // Our public port, not whatever a library would guess.
                if let Some(a) = portmap::answer(rec, &self.table) {
                    out.record(&a.reply);
                }
            }
            (rpc::PROG_NFS, _) | (rpc::PROG_MOUNT, _) => {
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

    fn mount(&mut self, xid: u32, args: Mount<'_>, out: &mut Writer) {
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
                // A revision imported since start joins the tree when first mounted.
                if let Some((e, name, root)) =
                    crate::image::serve::nfs_to_learn(&self.config, path, self.tree.exports())
                {
                    tracing::info!(export = %e, "nfs export of a new image revision");
                    let image = self.config.images.get(crate::image::serve::base(&name));
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
                                export: export.clone(),
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

    /// The handle of a call, checked against the client's pools.
    fn handle(&mut self, fh: &[u8]) -> Result<TreeHandle, Status> {
        let h = TreeHandle::from_wire(fh)?;
        match self.tree.image_of(&h)? {
            Some(img) if !self.allowed(img) => Err(Error::Acces),
            _ => Ok(h),
        }
    }

    fn nfs(&mut self, xid: u32, cred: &Cred, args: Nfs<'_>, out: &mut Writer) {
        // A handle the client may not use is an authentication error, as for a knfsd export
        // that does not list the host.
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
            | Nfs::PathConf(fh) => Some(self.handle(fh)),
        };
        let h = match fh {
            Some(Err(Error::Acces)) => {
                out.auth_error(xid, rpc::AUTH_TOOWEAK);
                return;
            }
            Some(Err(st)) => {
                out.accepted(xid, rpc::SUCCESS).u32(st.nfsstat3());
                // Every failure body but GETATTR's is one empty post_op_attr (LOOKUP's too).
                if !matches!(args, Nfs::GetAttr(_)) {
                    out.u32(0);
                }
                out.finish();
                return;
            }
            Some(Ok(h)) => Some(h),
            None => None,
        };
        let h = h.unwrap_or_else(|| self.tree.root());
        let img = self.tree.image_of(&h).ok().flatten();
        if let Some(img) = img
            && !matches!(args, Nfs::Null)
            && !self.port_ok(img)
        {
            self.metrics.nfs().refused.inc();
            out.accepted(xid, rpc::SUCCESS).u32(Error::Acces.nfsstat3());
            if !matches!(args, Nfs::GetAttr(_)) {
                out.u32(0);
            }
            out.finish();
            return;
        }
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
            Nfs::FsStat(_) => match tree.getattr(&h) {
                Ok(a) => {
                    // Read-only: nothing is free to anyone.
                    out.u32(0).post_op_attr(Some(&a));
                    out.u64(a.used.max(a.size)).u64(0).u64(0);
                    out.u64(0).u64(0).u64(0).u32(0);
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

    /// Whether the caller's source port satisfies the image's `secure_ports`.
    /// (root_squash, secure_ports) of image `img`'s config: for a revision learned since
    /// start, its image's.
    fn trust(&self, img: usize) -> (bool, bool) {
        self.trust.get(img).copied().unwrap_or_else(|| {
            self.config
                .images
                .get(crate::image::serve::base(self.tree.image_name(img)))
                .map_or((false, true), |im| (im.root_squash, im.secure_ports))
        })
    }

    fn port_ok(&self, img: usize) -> bool {
        if !self.trust(img).1 || self.peer.port() < 1024 {
            return true;
        }
        static INSECURE: super::bounds::LogLimit = super::bounds::LogLimit::new();
        if let Some(suppressed) = INSECURE.allow() {
            tracing::warn!(client = %self.peer, image = self.tree.image_name(img), suppressed,
                "nfs call from a port above 1023 refused (images.NAME.secure_ports)");
        }
        false
    }

    /// `nfs3::may`, counting a refusal.
    fn permitted(&self, a: &nfs3::Attr, cred: &Cred, want: u32, owner_override: bool) -> bool {
        let ok = nfs3::may(a, cred, want, owner_override);
        if !ok {
            self.metrics.nfs().refused.inc();
            tracing::debug!(client = %self.peer, uid = ?cred.uid, mode = a.mode, owner = a.uid,
                group = a.gid, want, "nfs permission denied");
        }
        ok
    }

    /// Bytes of READ data answered, for the boot record.
    fn count_read(&mut self, n: usize) {
        self.total += n as u64;
        self.unreported += n as u64;
    }
}

/// A successful READ's reply up to its data: status, attributes, count, eof, data length.
fn read_ok_header(out: &mut Writer, attr: &nfs3::Attr, n: usize, eof: bool) {
    out.u32(0)
        .post_op_attr(Some(attr))
        .words(&[n as u32, eof as u32, n as u32]);
}

fn refuse(out: &mut Writer, xid: u32, r: Refusal) {
    let stat = match r {
        Refusal::ProcUnavail => rpc::PROC_UNAVAIL,
        Refusal::GarbageArgs => rpc::GARBAGE_ARGS,
    };
    out.accepted(xid, stat);
    out.finish();
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

/// Makes the record last written to `out` cover `len` bytes of data sent after it, and their
/// XDR padding, which it returns.
fn close_record(out: &mut Writer, len: usize) -> &'static [u8] {
    let pad = len.div_ceil(4) * 4 - len;
    out.extend_record((len + pad) as u32);
    &[0u8; 3][..pad]
}

/// Finishes the record last written to `out` with `data` (and its XDR padding) and sends all
/// of `out`, then the data, in one `writev`; false when the client stopped reading.
fn send_with_data(s: &mut std::net::TcpStream, out: &mut Writer, data: &[u8]) -> Sent {
    let pad = close_record(out, data.len());
    let mut slices = [
        std::io::IoSlice::new(&out.buf),
        std::io::IoSlice::new(data),
        std::io::IoSlice::new(pad),
    ];
    let mut rest = &mut slices[..];
    let ok = loop {
        if rest.iter().all(|b| b.is_empty()) {
            break Ok(());
        }
        match s.write_vectored(rest) {
            Ok(0) => break Err(NOT_READING),
            Ok(n) => std::io::IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(unsent(&e)),
        }
    };
    out.buf.clear();
    ok
}

/// Like `send_with_data`, with the data written straight from a file's mapping. A file cut
/// short since `read_mapped` fails the write (EFAULT): the connection ends, and the client's
/// retry on a new one sees the new size.
fn send_mapped(s: &mut std::net::TcpStream, out: &mut Writer, read: &MappedRead) -> Sent {
    let data = read.data();
    let pad = close_record(out, data.len());
    let total = out.buf.len() + data.len() + pad.len();
    let mut done = 0;
    let ok = loop {
        if done == total {
            break Ok(());
        }
        match data.writev(std::os::fd::AsFd::as_fd(s), &out.buf, pad, done) {
            Ok(0) => break Err(NOT_READING),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(unsent(&e)),
        }
    };
    out.buf.clear();
    ok
}

/// Writes the buffered replies.
fn send(s: &mut std::net::TcpStream, out: &mut Writer) -> Sent {
    let sent = s.write_all(&out.buf).map_err(|e| unsent(&e));
    out.buf.clear();
    sent
}

/// A send that failed says why the connection ends.
type Sent = Result<(), &'static str>;
const NOT_READING: &str = "client not reading";

/// Why a write failed: the client acknowledged nothing for `limits.root_lost_after` (lost),
/// or it stopped taking replies (our `WRITE_TIMEOUT`), or went away.
fn unsent(e: &std::io::Error) -> &'static str {
    if super::bounds::is_lost(e) {
        "client lost"
    } else {
        NOT_READING
    }
}

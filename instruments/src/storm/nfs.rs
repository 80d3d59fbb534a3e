//! The NFS root of a simulated client: replays a trace's `What::Nfs` ops against an NFSv3
//! server with the `nfs3_client` crate (a client this project did not write, so our server is
//! checked against a codec it does not share), closed-loop by `trace::format::Gates`.
//!
//! The export is mounted when the first `mnt` op comes due, with AUTH_UNIX uid 0 gid 0 from a
//! privileged source port where binding one works. Handles are kept per path (the export's
//! root is `""`); an op on a path with no handle yet first LOOKUPs its way there (counted in
//! `NfsStats::extra_lookups`, not in `calls`). Ops that overlapped in the recording run
//! concurrently, spread over up to `MAX_CONNECTIONS` connections (the crate's client takes
//! `&mut self` per call).
//!
//! The mount is hard, as the kernel's root mount is (`retry`): a call whose connection breaks
//! or that goes unanswered is sent again on a new connection to the same address, after the
//! kernel's wait (`retry::Backoff`, `retry::NFS_TIMEO`), until it is answered.

use super::nfs_io::{Connector, Stream};
use super::retry::{self, Backoff, Lost};
use bootpool::trace::format::{Gates, Op, What};
use nfs3_client::net::Connector as _;
use nfs3_client::nfs3_types::nfs3::{
    ACCESS3args, FSINFO3args, FSSTAT3args, GETATTR3args, LOOKUP3args, Nfs3Option, Nfs3Result,
    PATHCONF3args, READ3args, READDIR3args, READDIRPLUS3args, READLINK3args, cookieverf3,
    diropargs3, filename3, nfs_fh3, nfsstat3,
};
use nfs3_client::nfs3_types::rpc::{auth_unix, opaque_auth};
use nfs3_client::nfs3_types::xdr_codec::Opaque;
use nfs3_client::{Nfs3Client, Nfs3ConnectionBuilder};
use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Instant;
use tokio::task::JoinSet;

/// At most this many NFS connections per client, however much the trace overlapped.
pub const MAX_CONNECTIONS: usize = 8;

/// Where the server's MOUNT and NFS programs listen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NfsPorts {
    /// Ask the portmapper on this port (111 normally).
    Portmap(u16),
    /// Known ports (tests run the daemon on port 0; bootpool serves both on one port).
    Direct { mount: u16, nfs: u16 },
}

impl Default for NfsPorts {
    fn default() -> NfsPorts {
        NfsPorts::Portmap(111)
    }
}

/// What a replay did. `calls` and `errors` are per proc, as the trace names them; `errors`
/// counts answers whose status was not NFS3_OK (an op whose path could not be looked up counts
/// as an error of its own proc).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NfsStats {
    pub calls: BTreeMap<String, u64>,
    pub errors: BTreeMap<String, u64>,
    /// Data bytes READ answers carried.
    pub read_bytes: u64,
    /// LOOKUPs made to reach a path the replay had no handle for (not in the trace).
    pub extra_lookups: u64,
    /// Ops not sent: unknown or write-type procs, ops before the first `mnt`, READDIR
    /// continuations of a listing the replay had already read to its end.
    pub skipped: BTreeMap<String, u64>,
    /// Connections opened to the NFS program.
    pub connections: usize,
    /// When the first call was sent and when the last answer arrived.
    pub first: Option<Instant>,
    pub last: Option<Instant>,
    /// Each READ answered: sent, answered, data bytes.
    pub waits: Vec<(Instant, Instant, u64)>,
    /// When each call was answered (the client's stalls are the gaps between them).
    pub answers: Vec<Instant>,
    /// Connections made again after one broke or a call went unanswered (the hard mount's
    /// retries), and mounts made again.
    pub reconnects: u64,
}

impl NfsStats {
    pub fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }

    pub fn total_errors(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum NfsError {
    #[error("nfs mount of {export} failed: {why}")]
    Mount { export: String, why: String },
    #[error("nfs connection to {0} failed: {1}")]
    Connect(SocketAddr, std::io::Error),
    #[error("nfs {proc} call failed: {why}")]
    Rpc { proc: String, why: String },
    #[error("nfs trace has no mnt op")]
    NoMount,
    #[error("nfs replay task failed: {0}")]
    Task(String),
}

type Client = Nfs3Client<Stream>;

/// Replays the `What::Nfs` ops among `ops` (other kinds are ignored) against `server`, waiting
/// `think_scale` times each op's recorded think time. The replay's clock starts at the call:
/// the first NFS op waits its own `t` (scaled), as nothing before it was answered. Returns when every op was answered or
/// skipped; an answer with an error status is counted, a broken connection ends the replay.
/// Longer than the house's ~150 lines on purpose: one closed loop whose state (the gates'
/// schedule, the free connections, the calls in flight, the mount) its starting and its
/// answering halves share.
pub async fn replay_nfs(
    server: Ipv4Addr,
    ports: NfsPorts,
    ops: &[Op],
    think_scale: f64,
) -> Result<NfsStats, NfsError> {
    let mut ops: Vec<Op> = ops
        .iter()
        .filter(|o| matches!(o.what, What::Nfs { .. }))
        .cloned()
        .collect();
    ops.sort_by(|a, b| a.t.total_cmp(&b.t));
    let is_mnt =
        |o: &Op| matches!(&o.what, What::Nfs { proc, .. } if proc.eq_ignore_ascii_case("mnt"));
    if !ops.iter().any(is_mnt) {
        return Err(NfsError::NoMount);
    }
    let gates = Gates::new(&ops);
    let want_conns = gates.max_in_flight(&ops).clamp(1, MAX_CONNECTIONS);
    let mut schedule = gates.schedule(think_scale);
    let mut st = State::default();
    let mut mounted: Option<Mounted> = None;
    let mut free: Vec<Client> = Vec::new();
    let mut running: JoinSet<(Client, Outcome, Instant, u64)> = JoinSet::new();

    while !schedule.all_done() {
        let now = Instant::now();
        schedule.release(now);
        // Start what is due: skips and MOUNT calls finish here, the rest run as tasks.
        let mut progressed = false;
        while let Some(i) = schedule.due(now) {
            let What::Nfs {
                proc,
                path,
                name,
                offset,
                count,
                bytes,
                status: expected,
            } = &ops[i].what
            else {
                unreachable!("only nfs ops are kept")
            };
            let proc_l = proc.to_ascii_lowercase();
            if proc_l == "mnt" || proc_l == "umnt" {
                schedule.start();
                st.first.get_or_insert_with(Instant::now);
                if mounted.is_none() && proc_l == "mnt" {
                    let m = mount_hard(server, ports, path, &mut st.reconnects).await?;
                    st.handles.insert(String::new(), m.root.clone());
                    free.push(m.first);
                    let redial = Redial {
                        addr: m.nfs_addr,
                        privileged: m.privileged,
                    };
                    for _ in 1..want_conns {
                        free.push(redial.connect(Lost::Reset, Instant::now()).await?);
                    }
                    st.connections = free.len();
                    mounted = Some(Mounted {
                        mount: m.mount,
                        export: path.clone(),
                        redial,
                    });
                } else if let Some(m) = mounted.as_mut() {
                    let dir = nfs3_client::nfs3_types::mount::dirpath(Opaque::owned(
                        m.export.as_bytes().to_vec(),
                    ));
                    let r = if proc_l == "mnt" {
                        m.mount.mnt(dir).await.map(|_| ())
                    } else {
                        m.mount.umnt(dir).await.map_err(Into::into)
                    };
                    if let Err(e) = r {
                        // The MOUNT connection broke (its server died): mount again, as
                        // mount.nfs would, through whoever holds the address now.
                        tracing::debug!(export = %m.export, error = %e, "nfs replay {proc_l} mounts again");
                        let again =
                            mount_hard(server, ports, &m.export, &mut st.reconnects).await?;
                        m.mount = again.mount;
                        st.connections += 1;
                        free.push(again.first);
                    }
                } else {
                    *st.skipped.entry(proc_l.clone()).or_default() += 1;
                    schedule.finish(i);
                    progressed = true;
                    continue;
                }
                *st.calls.entry(proc_l).or_default() += 1;
                st.last = Some(Instant::now());
                st.answers.push(Instant::now());
                schedule.finish(i);
                progressed = true;
                continue;
            }
            if mounted.is_none() {
                schedule.start();
                *st.skipped.entry("before mnt".into()).or_default() += 1;
                schedule.finish(i);
                progressed = true;
                continue;
            }
            let job = match st.job(i, &proc_l, path, name.as_deref(), *offset, *count, *bytes) {
                Ok(job) => Job {
                    expected: *expected,
                    ..job
                },
                Err(why) => {
                    schedule.start();
                    if why == "unknown proc" {
                        tracing::warn!(proc = %proc, "nfs replay skips an unknown proc");
                    }
                    *st.skipped.entry(why.into()).or_default() += 1;
                    schedule.finish(i);
                    progressed = true;
                    continue;
                }
            };
            let Some(client) = free.pop() else {
                break;
            };
            let redial = mounted.as_ref().expect("checked above").redial;
            schedule.start();
            st.first.get_or_insert_with(Instant::now);
            running.spawn(async move {
                let sent = Instant::now();
                let (client, out, reconnects) = hard(client, job, redial).await;
                (client, out, sent, reconnects)
            });
        }
        if progressed {
            continue;
        }
        // With every connection busy, only an answer can let the next op start.
        let next_due = if free.is_empty() && !running.is_empty() {
            None
        } else {
            schedule.next_due()
        };
        // The runtime's timer rounds up to whole milliseconds, which over a boot's thousands
        // of thinks adds seconds: with nothing in flight, a think is slept on the thread.
        if running.is_empty()
            && let Some(due) = next_due
        {
            std::thread::sleep(due.saturating_duration_since(now));
            continue;
        }
        tokio::select! {
            done = running.join_next(), if !running.is_empty() => {
                let (client, out, sent, reconnects) = done
                    .expect("a task was running")
                    .map_err(|e| NfsError::Task(e.to_string()))?;
                free.push(client);
                st.reconnects += reconnects;
                st.connections += reconnects as usize;
                let i = out.op;
                let now = Instant::now();
                st.answers.push(now);
                if let Ok(Reply::Read(n)) = out.result {
                    st.waits.push((sent, now, n));
                }
                st.absorb(out)?;
                st.last = Some(now);
                schedule.finish(i);
            }
            _ = tokio::time::sleep_until(next_due.unwrap_or(now).into()), if next_due.is_some() => {}
            else => {
                // Nothing runs and nothing can start: the gates never leave an op behind.
                unreachable!("nfs replay stalled with {} ops waiting", schedule.waiting());
            }
        }
    }
    Ok(st.into_stats())
}

struct Mounted {
    mount: nfs3_client::MountClient<Stream>,
    export: String,
    redial: Redial,
}

/// Where a broken NFS connection is made again: the same address, from a privileged port
/// when the mount got one.
#[derive(Debug, Clone, Copy)]
struct Redial {
    addr: SocketAddr,
    privileged: bool,
}

impl Redial {
    /// A new connection, waiting as the kernel's transport does after a connection `lost`,
    /// and again after each failed connect, until `retry::GIVE_UP` from `since`.
    async fn connect(self, lost: Lost, since: Instant) -> Result<Client, NfsError> {
        let mut backoff = Backoff::default();
        let mut wait = backoff.wait(lost);
        loop {
            tokio::time::sleep(wait).await;
            match connect(self.addr, self.privileged).await {
                Ok(c) => return Ok(c),
                Err(e) if since.elapsed() >= retry::GIVE_UP => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %e, "nfs replay connect failed, tries again");
                    wait = backoff.wait(Lost::Closed);
                }
            }
        }
    }
}

/// One call as a hard mount makes it: sent again on a new connection after its connection
/// broke or it went `retry::NFS_TIMEO` unanswered, until answered (or `retry::GIVE_UP`).
/// Returns the connection it ended on and the reconnects it took.
async fn hard(mut client: Client, job: Job, redial: Redial) -> (Client, Outcome, u64) {
    let start = Instant::now();
    let mut reconnects = 0;
    let mut timeouts = 0;
    loop {
        let lost = match tokio::time::timeout(retry::NFS_TIMEO, job.clone().run(&mut client)).await
        {
            Ok(out) => match out.result {
                Err(Failed::Lost(lost, _)) if start.elapsed() < retry::GIVE_UP => lost,
                _ => return (client, out, reconnects),
            },
            Err(_) => {
                timeouts += 1;
                if timeouts == retry::NFS_RETRANS {
                    tracing::debug!(proc = %job.proc, "nfs replay: server not responding, still trying");
                }
                Lost::Closed
            }
        };
        if start.elapsed() >= retry::GIVE_UP {
            return (client, job.gave_up(), reconnects);
        }
        match redial.connect(lost, start).await {
            Ok(c) => {
                client = c;
                reconnects += 1;
            }
            Err(_) => return (client, job.gave_up(), reconnects),
        }
    }
}

/// A mount, tried again as the kernel's client reconnects while its connections break or
/// are refused (an export refused is final), until `retry::GIVE_UP`; each try past the
/// first counts in `reconnects`.
async fn mount_hard(
    server: Ipv4Addr,
    ports: NfsPorts,
    export: &str,
    reconnects: &mut u64,
) -> Result<Mount, NfsError> {
    let start = Instant::now();
    let mut backoff = Backoff::default();
    loop {
        match mount(server, ports, export).await {
            Ok(m) => return Ok(m),
            Err((e, false)) => return Err(e),
            Err((e, true)) if start.elapsed() >= retry::GIVE_UP => return Err(e),
            Err((e, true)) => {
                tracing::debug!(error = %e, "nfs replay mount failed, tries again");
                *reconnects += 1;
                tokio::time::sleep(backoff.wait(Lost::Closed)).await;
            }
        }
    }
}

/// A fresh mount: the root handle and the first NFS connection.
struct Mount {
    mount: nfs3_client::MountClient<Stream>,
    root: nfs_fh3,
    first: Client,
    nfs_addr: SocketAddr,
    privileged: bool,
}

fn credential() -> opaque_auth<'static> {
    // Root, as the Linux kernel's client is for a diskless root.
    opaque_auth::auth_unix(&auth_unix {
        stamp: 0,
        machinename: Opaque::owned(b"bootpool-storm".to_vec()),
        uid: 0,
        gid: 0,
        gids: vec![0],
    })
}

/// Whether a failed mount is worth trying again: its connection broke or was refused.
fn connection_lost(e: &nfs3_client::ConnectError) -> bool {
    use nfs3_client::{ConnectError, MountError, PortmapError, RpcError};
    matches!(
        e,
        ConnectError::Io(_)
            | ConnectError::Portmap(PortmapError::Rpc(RpcError::Io(_)))
            | ConnectError::Mount(MountError::Rpc(RpcError::Io(_)))
    )
}

/// A mount; Err says too whether it is worth trying again (`connection_lost`).
async fn mount(server: Ipv4Addr, ports: NfsPorts, export: &str) -> Result<Mount, (NfsError, bool)> {
    let build = |privileged: bool| {
        let b = Nfs3ConnectionBuilder::new(Connector, server.to_string(), export)
            .credential(credential())
            .connect_from_privileged_port(privileged);
        match ports {
            NfsPorts::Portmap(p) => b.portmapper_port(p),
            NfsPorts::Direct { mount, nfs } => b.mount_port(mount).nfs3_port(nfs),
        }
    };
    let err = |e: nfs3_client::ConnectError| {
        let again = connection_lost(&e);
        let e = NfsError::Mount {
            export: export.to_string(),
            why: e.to_string(),
        };
        (e, again)
    };
    let (conn, privileged) = match build(true).mount().await {
        Ok(c) => (c, true),
        // Binding a port below 1024 needs privilege (or they are all taken): go on from an
        // ordinary port, as a server without `secure` lets us.
        Err(nfs3_client::ConnectError::Io(e)) => {
            tracing::debug!(error = %e, "nfs replay mounts from an unprivileged port");
            (build(false).mount().await.map_err(err)?, false)
        }
        Err(e) => return Err(err(e)),
    };
    let root = conn.root_nfs_fh3();
    let nfs_addr = SocketAddr::new(server.into(), conn.nfs3_port);
    Ok(Mount {
        mount: conn.mount_client,
        root,
        first: conn.nfs3_client,
        nfs_addr,
        privileged,
    })
}

/// One more NFS connection, from a privileged port when the mount got one.
async fn connect(addr: SocketAddr, privileged: bool) -> Result<Client, NfsError> {
    let io = if privileged {
        let mut got = None;
        let start = fastrand_port();
        for k in 0..(1024 - 300) {
            let port = 300 + (start + k) % (1024 - 300);
            match Connector.connect_with_port(addr, port).await {
                Ok(io) => {
                    got = Some(io);
                    break;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::AddrInUse | std::io::ErrorKind::AddrNotAvailable
                    ) => {}
                Err(e) => return Err(NfsError::Connect(addr, e)),
            }
        }
        match got {
            Some(io) => io,
            None => Connector
                .connect(addr)
                .await
                .map_err(|e| NfsError::Connect(addr, e))?,
        }
    } else {
        Connector
            .connect(addr)
            .await
            .map_err(|e| NfsError::Connect(addr, e))?
    };
    Ok(Nfs3Client::new_with_auth(
        io,
        credential(),
        opaque_auth::default(),
    ))
}

/// A starting point in the privileged range that differs between connections.
fn fastrand_port() -> u16 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (nanos % (1024 - 300)) as u16
}

/// A path from the image's root as a handle-map key: components joined by `/`, without
/// empty ones and `.`; `..` goes up (never above the root).
fn key(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    parts.join("/")
}

fn join(dir: &str, name: &str) -> String {
    key(&format!("{dir}/{name}"))
}

/// A listing in progress: where the last replayed answer left it.
#[derive(Debug, Clone)]
struct Listing {
    cookie: u64,
    verf: cookieverf3,
    eof: bool,
}

#[derive(Default)]
struct State {
    handles: HashMap<String, nfs_fh3>,
    listings: HashMap<String, Listing>,
    calls: BTreeMap<String, u64>,
    errors: BTreeMap<String, u64>,
    skipped: BTreeMap<String, u64>,
    read_bytes: u64,
    extra_lookups: u64,
    connections: usize,
    first: Option<Instant>,
    last: Option<Instant>,
    waits: Vec<(Instant, Instant, u64)>,
    answers: Vec<Instant>,
    reconnects: u64,
}

impl State {
    /// The call for op `i`, from the nearest handle known on its way. Err: why it is skipped.
    #[allow(clippy::too_many_arguments)]
    fn job(
        &self,
        i: usize,
        proc: &str,
        path: &str,
        name: Option<&str>,
        offset: u64,
        count: u64,
        bytes: u64,
    ) -> Result<Job, &'static str> {
        let target = key(path);
        let count32 =
            |dflt: u64| (if count == 0 { dflt } else { count }).min(u32::MAX.into()) as u32;
        let call = match proc {
            "null" => Call::Null,
            "getattr" => Call::Getattr,
            "access" => Call::Access,
            "readlink" => Call::Readlink,
            "fsstat" => Call::Fsstat,
            "fsinfo" => Call::Fsinfo,
            "pathconf" => Call::Pathconf,
            "lookup" => match name {
                Some(n) if !n.is_empty() && !n.contains('/') => Call::Lookup(n.to_string()),
                _ => return Err("lookup without a name"),
            },
            "read" => Call::Read {
                offset,
                count: count32(bytes.max(1)),
            },
            "readdir" | "readdirplus" => {
                let (cookie, verf) = if offset == 0 {
                    (0, cookieverf3::default())
                } else {
                    match self.listings.get(&target) {
                        Some(l) if l.eof => return Err("listing already read to its end"),
                        Some(l) => (l.cookie, l.verf),
                        None => (0, cookieverf3::default()),
                    }
                };
                if proc == "readdir" {
                    Call::Readdir {
                        cookie,
                        verf,
                        count: count32(4096),
                    }
                } else {
                    Call::Readdirplus {
                        cookie,
                        verf,
                        count: count32(32768),
                    }
                }
            }
            "write" | "setattr" | "create" | "mkdir" | "symlink" | "mknod" | "remove" | "rmdir"
            | "rename" | "link" | "commit" => return Err("write-type proc"),
            _ => return Err("unknown proc"),
        };
        // Walk from the longest known prefix of the target (the root is always known).
        let parts: Vec<&str> = if target.is_empty() {
            Vec::new()
        } else {
            target.split('/').collect()
        };
        let mut known = parts.len();
        while known > 0 && !self.handles.contains_key(&parts[..known].join("/")) {
            known -= 1;
        }
        let start = self.handles[&parts[..known].join("/")].clone();
        let walk = (known..parts.len())
            .map(|k| (parts[..=k].join("/"), parts[k].to_string()))
            .collect();
        Ok(Job {
            op: i,
            expected: 0,
            proc: proc.to_string(),
            target,
            start,
            walk,
            call,
        })
    }

    fn absorb(&mut self, out: Outcome) -> Result<(), NfsError> {
        self.extra_lookups += out.extra_lookups;
        for (k, fh) in out.learned {
            self.handles.insert(k, fh);
        }
        *self.calls.entry(out.proc.clone()).or_default() += 1;
        // An answer is an error when its status is not the recording's: a LOOKUP of a name
        // that is not there answered NOENT then and now is a normal boot's.
        let status = match &out.result {
            Err(Failed::Status(s)) => *s as u32,
            _ => 0,
        };
        if status == out.expected && status != 0 {
            return Ok(());
        }
        if status == 0 && out.expected != 0 {
            tracing::debug!(proc = %out.proc, path = %out.target, expected = out.expected, "nfs replay call answered ok where the recording had an error");
            *self.errors.entry(out.proc).or_default() += 1;
            return Ok(());
        }
        match out.result {
            Ok(Reply::Read(n)) => self.read_bytes += n,
            Ok(Reply::Listing(l)) => {
                self.listings.insert(out.target, l);
            }
            Ok(Reply::Done) => {}
            Err(Failed::Status(s)) => {
                tracing::debug!(proc = %out.proc, path = %out.target, status = ?s, "nfs replay call answered with an error");
                *self.errors.entry(out.proc).or_default() += 1;
            }
            Err(Failed::Rpc(why) | Failed::Lost(_, why)) => {
                return Err(NfsError::Rpc {
                    proc: out.proc,
                    why,
                });
            }
        }
        Ok(())
    }

    fn into_stats(self) -> NfsStats {
        NfsStats {
            calls: self.calls,
            errors: self.errors,
            read_bytes: self.read_bytes,
            extra_lookups: self.extra_lookups,
            skipped: self.skipped,
            connections: self.connections,
            first: self.first,
            last: self.last,
            waits: self.waits,
            answers: self.answers,
            reconnects: self.reconnects,
        }
    }
}

#[derive(Clone)]
enum Call {
    Null,
    Getattr,
    Access,
    Readlink,
    Fsstat,
    Fsinfo,
    Pathconf,
    Lookup(String),
    Read {
        offset: u64,
        count: u32,
    },
    Readdir {
        cookie: u64,
        verf: cookieverf3,
        count: u32,
    },
    Readdirplus {
        cookie: u64,
        verf: cookieverf3,
        count: u32,
    },
}

/// One op ready to send: owned, so it runs as a task on any connection.
#[derive(Clone)]
struct Job {
    op: usize,
    /// The status the recorded answer had (0: NFS3_OK).
    expected: u32,
    proc: String,
    /// The key of the op's path.
    target: String,
    /// The handle of the longest known prefix of `target`, and the LOOKUPs from there.
    start: nfs_fh3,
    walk: Vec<(String, String)>,
    call: Call,
}

enum Reply {
    Read(u64),
    Listing(Listing),
    Done,
}

enum Failed {
    Status(nfsstat3),
    /// The connection broke under the call: a hard mount sends it again.
    Lost(Lost, String),
    Rpc(String),
}

/// An RPC error as the hard mount sees it: a broken connection is retried, the rest is not.
fn failed(e: nfs3_client::RpcError) -> Failed {
    match e {
        nfs3_client::RpcError::Io(io) => {
            let lost = if io.kind() == std::io::ErrorKind::ConnectionReset {
                Lost::Reset
            } else {
                Lost::Closed
            };
            Failed::Lost(lost, io.to_string())
        }
        e => Failed::Rpc(e.to_string()),
    }
}

struct Outcome {
    op: usize,
    expected: u32,
    proc: String,
    target: String,
    learned: Vec<(String, nfs_fh3)>,
    extra_lookups: u64,
    result: Result<Reply, Failed>,
}

/// All access bits of RFC 1813 (READ, LOOKUP, MODIFY, EXTEND, DELETE, EXECUTE).
const ACCESS_ALL: u32 = 0x3f;

fn status<T, E>(r: Nfs3Result<T, E>) -> Result<T, Failed> {
    match r {
        Nfs3Result::Ok(v) => Ok(v),
        Nfs3Result::Err((s, _)) => Err(Failed::Status(s)),
    }
}

fn lookup_args(dir: nfs_fh3, name: &str) -> LOOKUP3args<'static> {
    LOOKUP3args {
        what: diropargs3 {
            dir,
            name: filename3(Opaque::owned(name.as_bytes().to_vec())),
        },
    }
}

impl Job {
    /// The outcome of a call its server never answered within `retry::GIVE_UP`.
    fn gave_up(&self) -> Outcome {
        Outcome {
            op: self.op,
            expected: self.expected,
            proc: self.proc.clone(),
            target: self.target.clone(),
            learned: Vec::new(),
            extra_lookups: 0,
            result: Err(Failed::Rpc(format!(
                "no answer for {} s, the connection made again",
                retry::GIVE_UP.as_secs()
            ))),
        }
    }

    async fn run(self, c: &mut Client) -> Outcome {
        let mut out = Outcome {
            op: self.op,
            expected: self.expected,
            proc: self.proc,
            target: self.target,
            learned: Vec::new(),
            extra_lookups: 0,
            result: Ok(Reply::Done),
        };
        let mut fh = self.start;
        for (k, name) in self.walk {
            out.extra_lookups += 1;
            match c.lookup(&lookup_args(fh.clone(), &name)).await {
                Ok(r) => match status(r) {
                    Ok(ok) => {
                        fh = ok.object;
                        out.learned.push((k, fh.clone()));
                    }
                    Err(e) => {
                        out.result = Err(e);
                        return out;
                    }
                },
                Err(e) => {
                    out.result = Err(match failed(e) {
                        Failed::Rpc(why) => Failed::Rpc(format!("lookup on the way: {why}")),
                        lost => lost,
                    });
                    return out;
                }
            }
        }
        out.result = call(c, fh, self.call, &out.target, &mut out.learned).await;
        out
    }
}

async fn call(
    c: &mut Client,
    fh: nfs_fh3,
    what: Call,
    target: &str,
    learned: &mut Vec<(String, nfs_fh3)>,
) -> Result<Reply, Failed> {
    let rpc = failed;
    match what {
        Call::Null => c.null().await.map_err(rpc).map(|_| Reply::Done),
        Call::Getattr => {
            status(c.getattr(&GETATTR3args { object: fh }).await.map_err(rpc)?).map(|_| Reply::Done)
        }
        Call::Access => status(
            c.access(&ACCESS3args {
                object: fh,
                access: ACCESS_ALL,
            })
            .await
            .map_err(rpc)?,
        )
        .map(|_| Reply::Done),
        Call::Readlink => status(
            c.readlink(&READLINK3args { symlink: fh })
                .await
                .map_err(rpc)?,
        )
        .map(|_| Reply::Done),
        Call::Fsstat => {
            status(c.fsstat(&FSSTAT3args { fsroot: fh }).await.map_err(rpc)?).map(|_| Reply::Done)
        }
        Call::Fsinfo => {
            status(c.fsinfo(&FSINFO3args { fsroot: fh }).await.map_err(rpc)?).map(|_| Reply::Done)
        }
        Call::Pathconf => status(
            c.pathconf(&PATHCONF3args { object: fh })
                .await
                .map_err(rpc)?,
        )
        .map(|_| Reply::Done),
        Call::Lookup(name) => {
            let ok = status(c.lookup(&lookup_args(fh, &name)).await.map_err(rpc)?)?;
            learned.push((join(target, &name), ok.object));
            Ok(Reply::Done)
        }
        Call::Read { offset, count } => {
            let ok = status(
                c.read(&READ3args {
                    file: fh,
                    offset,
                    count,
                })
                .await
                .map_err(rpc)?,
            )?;
            Ok(Reply::Read(ok.data.as_ref().len() as u64))
        }
        Call::Readdir {
            cookie,
            verf,
            count,
        } => {
            let ok = status(
                c.readdir(&READDIR3args {
                    dir: fh,
                    cookie,
                    cookieverf: verf,
                    count,
                })
                .await
                .map_err(rpc)?,
            )?;
            let last = ok.reply.entries.0.last().map_or(cookie, |e| e.cookie);
            Ok(Reply::Listing(Listing {
                cookie: last,
                verf: ok.cookieverf,
                eof: ok.reply.eof,
            }))
        }
        Call::Readdirplus {
            cookie,
            verf,
            count,
        } => {
            // As Linux asks: dircount an eighth of maxcount.
            let ok = status(
                c.readdirplus(&READDIRPLUS3args {
                    dir: fh,
                    cookie,
                    cookieverf: verf,
                    dircount: count >> 3,
                    maxcount: count,
                })
                .await
                .map_err(rpc)?,
            )?;
            let entries = ok.reply.entries.0;
            let last = entries.last().map_or(cookie, |e| e.cookie);
            for e in entries {
                let name = String::from_utf8_lossy(e.name.0.as_ref()).into_owned();
                if name == "." || name == ".." {
                    continue;
                }
                if let Nfs3Option::Some(h) = e.name_handle {
                    learned.push((join(target, &name), h));
                }
            }
            Ok(Reply::Listing(Listing {
                cookie: last,
                verf: ok.cookieverf,
                eof: ok.reply.eof,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_become_keys() {
        assert_eq!(key("/"), "");
        assert_eq!(key(""), "");
        assert_eq!(key("/usr//lib/./x.so"), "usr/lib/x.so");
        assert_eq!(key("usr/lib/.."), "usr");
        assert_eq!(key("/../etc"), "etc");
        assert_eq!(join("/usr", "lib"), "usr/lib");
        assert_eq!(join("", "etc"), "etc");
    }

    #[test]
    fn an_unknown_path_is_walked_from_its_longest_known_prefix() {
        let mut st = State::default();
        let fh = |b: &[u8]| nfs_fh3 {
            data: Opaque::owned(b.to_vec()),
        };
        st.handles.insert(String::new(), fh(b"root"));
        st.handles.insert("usr".into(), fh(b"usr"));
        let j = st
            .job(3, "read", "/usr/lib/x.so", None, 0, 4096, 4096)
            .ok()
            .unwrap();
        assert_eq!(j.start, fh(b"usr"));
        assert_eq!(
            j.walk,
            [
                ("usr/lib".to_string(), "lib".to_string()),
                ("usr/lib/x.so".into(), "x.so".into())
            ]
        );
        let j = st.job(4, "getattr", "/", None, 0, 0, 0).ok().unwrap();
        assert_eq!((j.start, j.walk.len()), (fh(b"root"), 0));
        assert_eq!(
            st.job(5, "write", "/etc", None, 0, 0, 0).err(),
            Some("write-type proc")
        );
        assert_eq!(
            st.job(5, "frobnicate", "/etc", None, 0, 0, 0).err(),
            Some("unknown proc")
        );
        // A continued listing that already ended is skipped.
        st.listings.insert(
            "usr".into(),
            Listing {
                cookie: 9,
                verf: cookieverf3::default(),
                eof: true,
            },
        );
        assert!(st.job(6, "readdir", "/usr", None, 77, 4096, 0).is_err());
        assert!(st.job(6, "readdir", "/usr", None, 0, 4096, 0).is_ok());
    }
}

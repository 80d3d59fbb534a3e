//! The composition root: load config, lock the state folder, open the records, bind every
//! socket, start the services, and wait. Services never bind; tests start the whole daemon
//! in-process on port 0.
//!
//! The services are one table (`start`): each entry is a service's name and the sockets bound
//! for it, started by one loop from one `service::Shared` (config, recorder, records, metrics,
//! identity, links, placement, egress, shutdown). The egress sampler is one of them. The
//! daemon's counters (`metrics::Metrics`) are made here, once, and counted into by the
//! recorder, the pacer and every service.
//!
//! The config is served live (`config::Live`): SIGHUP (`bootpool reload`, the unit's
//! ExecReload) re-reads it, checks it whole as `start` does, refuses it whole when it is bad or
//! changes what cannot change while the daemon runs (`config::reload::refused`), and else serves
//! it to every request from then on (`Running::reload`); each attempt is one log line, a count,
//! and `state_dir/reload.json`, which `bootpool reload` waits for.
//!
//! One daemon per state folder: `state_dir/bootpool.lock` (holding the PID) is locked with
//! `flock` before anything else there is opened, and stays locked until the daemon has stopped.
//! UDP ports are bound without `SO_REUSEADDR`, so a second daemon on port 67 or 69 fails to
//! bind instead of sharing the port silently; only proxy mode's port 67 is shared, with the
//! DHCP server that gives the addresses (which may run on the same host).

use crate::config::{Config, Live};
use crate::metrics::Metrics;
use crate::record::{self, Records};
use crate::service;
use crate::shutdown::Shutdown;
use crate::sys::procnet::Proto;
use anyhow::Context as _;
use std::io::{Read as _, Seek as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::{TcpListener, UdpSocket};

/// Where each service ended up listening.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub http: SocketAddr,
    /// The HTTPS listener of `server.tls`, when configured.
    pub https: Option<SocketAddr>,
    pub dhcp: SocketAddr,
    /// proxyDHCP's port 4011, bound in proxy mode only.
    pub pxe: Option<SocketAddr>,
    /// TFTP, unless `server.tftp` is off.
    pub tftp: Option<SocketAddr>,
    pub nfs: SocketAddr,
    pub nbd: SocketAddr,
    pub portmap: SocketAddr,
    /// The clients' consoles (UDP), bound only when a pool sends its console (`netconsole`).
    pub console: Option<SocketAddr>,
    /// With a `dhcp6` section: DHCPv6, and TFTP (unless off), HTTP and NBD on IPv6, on the
    /// same port numbers as their IPv4 sockets.
    pub dhcp6: Option<SocketAddr>,
    pub tftp6: Option<SocketAddr>,
    pub http6: Option<SocketAddr>,
    /// NBD on IPv6 too (a root over IPv6 for a client that can attach one).
    pub nbd6: Option<SocketAddr>,
}

/// A started daemon.
pub struct Running {
    pub bound: Bound,
    /// The config as served, live: ports given as 0 are replaced by the ports bound.
    pub config: Live,
    pub records: Arc<Records>,
    /// The daemon's counters, as its `/metrics` serves them.
    pub metrics: Metrics,
    /// What a reload needs, shared with the task that reloads when an enrolment asks.
    reloader: Arc<Reloader>,
    /// The NBD connections a restart hands to the next program (`restart`).
    handover: Arc<service::handover::Handover>,
    shutdown: Shutdown,
    /// Released when the daemon is dropped, after `stop` has waited for every service.
    _lock: StateLock,
}

impl Running {
    /// Stops every service and waits for them.
    pub async fn stop(self) {
        self.shutdown.stop_and_wait().await;
    }

    /// Re-reads the config file it serves and serves it from now on, if it is whole (the
    /// checks of `start`: `Config::load` and `unservable`) and changes nothing that cannot
    /// change while the daemon runs (`config::reload::refused`); else refuses it whole and the
    /// running config stays; so it does when a new fixed address is leased to another client
    /// now. Requests and connections under way keep the config they loaded; the lease table
    /// takes the new range and fixed addresses, keeping every lease held.
    /// Logged in one line, counted, and told in `state_dir/reload.json`.
    pub fn reload(&self) -> Result<Arc<crate::config::live::Served>, Refused> {
        self.reloader.reload()
    }
}

/// What a reload reads and changes: the sockets bound, the served config, the counters, the
/// lease table (which follows a reloaded config's range and fixed addresses).
struct Reloader {
    bound: Bound,
    config: Live,
    metrics: Metrics,
    identity: service::identity::Identity,
    /// Its tracer follows the tracing pools and their clients (`Tracer::follow`).
    recorder: record::Recorder,
    /// One reload at a time.
    reloading: std::sync::Mutex<()>,
}

impl Reloader {
    /// `Running::reload`.
    fn reload(&self) -> Result<Arc<crate::config::live::Served>, Refused> {
        let _one = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        let served = self.config.served();
        let file = served.loaded.file.clone();
        let outcome = self.reload_from(&served);
        match &outcome {
            Ok((next, changed)) if changed.is_empty() => {
                self.metrics.reloads().applied.inc();
                tracing::info!(file = %file.display(), generation = next.generation,
                    digest = %next.digest, "config reloaded: nothing changed");
            }
            Ok((next, changed)) => {
                self.metrics.reloads().applied.inc();
                tracing::info!(file = %file.display(), generation = next.generation,
                    digest = %next.digest, changed = %changed.join("; "), "config reloaded");
            }
            Err(refused) => {
                self.metrics.reloads().refused.inc();
                tracing::error!(file = %file.display(), generation = served.generation,
                    error = %refused, "config reload refused; the running config stays");
            }
        }
        match &outcome {
            Ok(_) => self.tell_status("applied", String::new()),
            Err(refused) => self.tell_status("refused", refused.to_string()),
        }
        outcome.map(|(next, _)| next)
    }

    /// The reload's steps: the new generation and what changed (nothing changed: the same).
    fn reload_from(
        &self,
        served: &Arc<crate::config::live::Served>,
    ) -> Result<(Arc<crate::config::live::Served>, Vec<String>), Refused> {
        let said = |errors: Vec<crate::config::ConfigError>| {
            Refused(errors.iter().map(ToString::to_string).collect())
        };
        let new = Config::load(&served.loaded.file).map_err(|e| said(vec![e]))?;
        let mut errors = unservable(&new, Host::This);
        let console = self.bound.console.is_some();
        errors.extend(crate::config::reload::refused(
            &served.loaded,
            &new,
            console,
        ));
        // A fixed address another running client holds now would be taken from it.
        errors.extend(service::dhcp::taken_fixed(&self.identity, &new));
        if !errors.is_empty() {
            return Err(said(errors));
        }
        let changed = crate::config::reload::changes(&served.loaded, &new);
        if changed.is_empty() {
            return Ok((served.clone(), changed));
        }
        let mut told = new.clone();
        self.bound.tell(&mut told);
        let next = self.config.replace(new, told);
        service::dhcp::follow(&self.identity, &next.config);
        self.recorder.tracer().follow(&next.config);
        Ok((next, changed))
    }

    /// Writes `state_dir/reload.json` (by rename, whole): this daemon's last reload, or its
    /// start, as `ReloadStatus`.
    fn tell_status(&self, result: &str, message: String) {
        let current = self.config.served();
        let reloads = self.metrics.reloads();
        let status = ReloadStatus {
            pid: std::process::id(),
            attempt: reloads.applied.get() + reloads.refused.get(),
            result: result.to_string(),
            generation: current.generation,
            digest: current.digest.clone(),
            message,
        };
        let dir = &current.config.server.state_dir;
        let (path, part) = (dir.join(RELOAD_STATUS), dir.join(".reload.json.part"));
        let written = serde_json::to_vec(&status)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&part, bytes))
            .and_then(|()| std::fs::rename(&part, &path));
        if let Err(e) = written {
            tracing::warn!(file = %path.display(), error = %e, "reload status not written");
        }
    }
}

/// A reload refused whole: every reason, each naming file, line and key.
#[derive(Debug, Clone)]
pub struct Refused(pub Vec<String>);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("; "))
    }
}

impl std::error::Error for Refused {}

/// The file in the state folder that tells the daemon's last reload (or its start).
pub const RELOAD_STATUS: &str = "reload.json";

/// What `state_dir/reload.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReloadStatus {
    /// The daemon's process.
    pub pid: u32,
    /// Its reloads so far (0: it has just started).
    pub attempt: u64,
    /// `serving` (started), `applied` or `refused`.
    pub result: String,
    /// The generation and digest served now.
    pub generation: u64,
    pub digest: String,
    /// Why it was refused.
    pub message: String,
}

/// `bootpool reload`: signals the daemon serving `config`'s state folder (the PID its lock
/// file holds, while the lock is held) with SIGHUP, and waits up to 30 s for its answer in
/// `state_dir/reload.json`: Ok when it applied the config, else the daemon's reasons.
pub fn ask_reload(config: &Config) -> anyhow::Result<ReloadStatus> {
    let dir = &config.server.state_dir;
    let pid = daemon_pid(dir)?;
    let read = || {
        std::fs::read(dir.join(RELOAD_STATUS))
            .ok()
            .and_then(|b| serde_json::from_slice::<ReloadStatus>(&b).ok())
    };
    let before = read();
    crate::sys::process::kill(pid, libc::SIGHUP)
        .with_context(|| format!("signalling bootpool (pid {pid}) to reload"))?;
    for _ in 0..300 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        match read() {
            Some(now) if Some(&now) != before.as_ref() && now.pid == pid as u32 => {
                if now.result == "refused" {
                    anyhow::bail!("bootpool (pid {pid}) refused the config: {}", now.message);
                }
                return Ok(now);
            }
            _ => {}
        }
    }
    anyhow::bail!(
        "bootpool (pid {pid}) did not answer the reload within 30 s (see its log); {} unchanged",
        dir.join(RELOAD_STATUS).display()
    )
}

/// The PID of the daemon that holds `dir`'s lock; an error when none does.
fn daemon_pid(dir: &Path) -> anyhow::Result<libc::pid_t> {
    let path = dir.join(LOCK_FILE);
    let mut file = std::fs::File::open(&path)
        .with_context(|| format!("no bootpool serves state_dir {}", dir.display()))?;
    if crate::sys::fs::try_lock_exclusive(file.as_fd()).is_ok() {
        anyhow::bail!(
            "no bootpool serves state_dir {} ({} is not locked)",
            dir.display(),
            path.display()
        );
    }
    let mut text = String::new();
    file.read_to_string(&mut text)
        .with_context(|| format!("reading {}", path.display()))?;
    text.trim()
        .parse()
        .with_context(|| format!("{} holds no PID", path.display()))
}

/// The lock file in the state folder.
pub const LOCK_FILE: &str = "bootpool.lock";

/// The state folder's lock, held while the file stays open (`flock`, released by the kernel
/// however the process ends, so a daemon killed with -9 leaves no stale lock).
pub struct StateLock {
    _file: std::fs::File,
}

/// Another daemon holds the state folder's lock: the error `lock_state_dir` fails with, which
/// callers can tell from others (a test harness that restarts a daemon asks again).
#[derive(Debug, thiserror::Error)]
#[error(
    "{} is locked by another bootpool ({holder}) serving state_dir {}: stop that daemon first, or give this one a server.state_dir of its own",
    lock.display(),
    dir.display()
)]
pub struct StateDirLocked {
    pub lock: PathBuf,
    pub dir: PathBuf,
    /// `pid N`, or `pid unknown`.
    pub holder: String,
}

/// Locks `dir` for this daemon (creating the folder if needed) and writes our PID into the
/// lock file; fails at once when another daemon holds it, naming its PID and the file.
pub fn lock_state_dir(dir: &Path) -> anyhow::Result<StateLock> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path: PathBuf = dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    if let Err(e) = crate::sys::fs::try_lock_exclusive(file.as_fd()) {
        if e.kind() != std::io::ErrorKind::WouldBlock {
            return Err(e).with_context(|| format!("locking {}", path.display()));
        }
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        let holder = match text.trim() {
            "" => "pid unknown".to_string(),
            pid => format!("pid {pid}"),
        };
        return Err(StateDirLocked {
            lock: path,
            dir: dir.to_path_buf(),
            holder,
        }
        .into());
    }
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .and_then(|()| file.sync_data())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(StateLock { _file: file })
}

/// A service's future: it serves until shutdown (then Ok) or fails.
type Serving = std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// One entry of the service table: the service's name (in the log when it fails) and how it
/// starts from the sockets bound for it (moved into `start`) and the shared dependencies.
/// Every entry is started the same way: spawned on the shutdown's tracker, and a failure
/// stops the whole daemon.
struct Service {
    name: &'static str,
    start: Box<dyn FnOnce(&service::Shared) -> Serving>,
}

impl Service {
    fn new(
        name: &'static str,
        start: impl FnOnce(&service::Shared) -> Serving + 'static,
    ) -> Service {
        Service {
            name,
            start: Box::new(start),
        }
    }
}

/// Which host a config is checked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// This one, which serves it: its interfaces, addresses and ports are checked too.
    This,
    /// Another (`bootpool check --for-another-host`): only the config and its files.
    Another,
}

/// What the config names that cannot be served as it stands on disk: images' and loaders'
/// missing files, boot files that would not be served, unsigned Secure Boot loaders, wire
/// copies that cannot be made, a root argument the image's initrd cannot read; on this host,
/// also what binding would refuse (`host_refusals`). `bootpool check` lists them all; `start`
/// refuses the first, so serve refuses what check does.
pub fn unservable(config: &Config, host: Host) -> Vec<crate::config::ConfigError> {
    let mut missing = crate::image::serve::missing_files(config);
    missing.extend(config.missing_files());
    missing.extend(crate::export::boot_files::unservable(config));
    missing.extend(crate::export::boot_files::unsigned(config));
    missing.extend(crate::image::wire::unfit(config));
    missing.extend(crate::image::initrd::mismatched(config));
    if host == Host::This {
        missing.extend(host_refusals(config));
    }
    missing
}

/// Binds and starts everything; returns once all sockets are bound.
pub async fn start(config: Config) -> anyhow::Result<Running> {
    start_taking(config, Arc::default(), None).await
}

/// `start` as member `member` of its site (`bootpool serve --member`): several daemons of one
/// site in one process (tests).
pub async fn start_as(config: Config, member: &str) -> anyhow::Result<Running> {
    start_taking(config, Arc::default(), Some(member.to_string())).await
}

/// `start`, the NBD service taking up the connections `handover` holds (those a restart
/// handed over, `service::handover`).
async fn start_taking(
    mut config: Config,
    handover: Arc<service::handover::Handover>,
    member: Option<String>,
) -> anyhow::Result<Running> {
    if let Some(e) = unservable(&config, Host::This).first() {
        anyhow::bail!("{e}");
    }
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    // Before the records, the leases or the overlays are opened.
    let lock = lock_state_dir(&config.server.state_dir)?;
    // The initrd stock images' pools are handed after their own (`boot::addition`).
    let agent = config.server.agent.as_deref();
    crate::export::addition::publish(&config.server.state_dir, agent).with_context(|| {
        format!(
            "writing the overlay addition into {}",
            config.server.state_dir.display()
        )
    })?;
    let shutdown = Shutdown::new();
    let metrics = Metrics::default();
    // Its name in its site, which also marks its records in a shared database.
    let name = member_name(&config, member);
    let (recorder, records) = record::start(&config.server, &name, &shutdown, &metrics)
        .await
        .context("opening the boot records")?;
    let recorder = recorder.with_tracer(crate::record::trace::Tracer::new(&config));
    // With a PostgreSQL database, a member of the site: which clients it answers is known
    // before the first request is (`site::live`).
    let site = join_site(&config, name, &shutdown).await?;
    let leases = service::dhcp::open_table(&config)?;
    // With a PostgreSQL database, shared with the site (`site::shared_leases`).
    let leases = share_leases(leases, &config, &site, &metrics, &shutdown)?;
    // Who is at which address, for every service: the lease table, loaded before any bind.
    let identity = leases.identity();

    let v4 = bind_ipv4(&config).await?;
    let six = bind_ipv6(&config, v4.tftp.as_ref(), &v4.http, &v4.nbd).await?;
    let bound = Bound::of(&v4, &six)?;
    // What clients are told must match what was bound; a reload is compared with the file.
    let loaded = config.clone();
    bound.tell(&mut config);
    let live = Live::new(loaded, config);
    let config = live.load();
    // Which interface holds each of server.links, and each link's pacer.
    let links = Arc::new(crate::steer::links::Links::start(
        &config, &metrics, &shutdown,
    )?);
    // Which server link each client boots from.
    let placement = Arc::new(crate::steer::placement::Placement::new(
        &config,
        Some(records.clone()),
        links.specs(),
    ));
    let egress = record::sampler::open(&records, &config.server.link_speeds)
        .await
        .context("starting egress sampling")?;
    placement.set_egress(egress.clone());
    // Each heartbeat publishes the links' load (`site::balance`).
    site.set_placement(placement.clone());
    // The clients no pool lists that asked, as listed before the stop; saved while it changes.
    let unknown = Arc::new(service::unknown::Unknown::open(
        &config.server.state_dir,
        metrics.clone(),
    ));
    shutdown.spawn(unknown.clone().keep(live.clone(), shutdown.clone()));
    let reloader = Arc::new(Reloader {
        bound,
        config: live.clone(),
        metrics: metrics.clone(),
        identity: identity.clone(),
        recorder: recorder.clone(),
        reloading: std::sync::Mutex::new(()),
    });
    // An enrolment (the API's, a `discover` pool's) asks for the reload SIGHUP makes.
    let reloads = answer_reloads(&reloader, &shutdown);
    // With a PostgreSQL database, the enrolments file kept in step with the site's.
    share_enrolments(&config, &site, &live, reloads.clone(), &shutdown)?;
    let enrol = Arc::new(service::enrol::Enroller::new(Some(reloads)));
    let shared = service::Shared {
        config: live.clone(),
        recorder,
        records: records.clone(),
        metrics: metrics.clone(),
        identity: identity.clone(),
        links,
        placement,
        egress,
        handover: handover.clone(),
        unknown,
        enrol,
        site,
        shutdown: shutdown.clone(),
    };
    // The API's actions on the lease table go through its one writer.
    let (dhcp_commands, commands) = tokio::sync::mpsc::channel(16);
    // Wake-on-LAN's sender, and the pools' wake schedules.
    let waker = Arc::new(service::wake::Waker::new(bind_wake(&config)?, &shared)?);
    shutdown.spawn(waker.clone().run_schedules());
    // With a PostgreSQL `database:`, the site's revisions pulled and followed.
    shutdown.spawn(service::site_revisions::run(live.clone(), shutdown.clone()));
    let web = service::http::Web::new(&shared, dhcp_commands, waker)?;
    let table = service_table(v4, six, leases, commands, web);
    for entry in table {
        let serving = (entry.start)(&shared);
        let name = entry.name;
        let stop = shutdown.clone();
        shutdown.spawn(async move {
            if let Err(e) = serving.await {
                tracing::error!(service = name, error = %format!("{e:#}"), "service failed; stopping");
                stop.trigger();
            }
        });
    }
    tracing::info!(
        http = %bound.http, https = ?bound.https, dhcp = %bound.dhcp, tftp = ?bound.tftp, nfs = %bound.nfs, nbd = %bound.nbd,
        portmap = %bound.portmap, console = ?bound.console, dhcp6 = ?bound.dhcp6,
        tftp6 = ?bound.tftp6, http6 = ?bound.http6, nbd6 = ?bound.nbd6,
        pools = config.pools.len(), "bootpool serving"
    );
    tracing::info!("{}", service::http::access_sentence(&config));
    let running = Running {
        bound,
        config: live,
        records,
        metrics,
        reloader,
        handover,
        shutdown,
        _lock: lock,
    };
    running.reloader.tell_status("serving", String::new());
    Ok(running)
}

// ---- what this host would refuse ---------------------------------------------------------

const TCP: Proto = Proto::Tcp;
const UDP: Proto = Proto::Udp;

/// A socket `bind_ipv4` or `bind_ipv6` binds, for `host_refusals` to try first: the config key
/// it comes from, and how it is bound (`None`: a TCP listener).
struct Wanted<'a> {
    key: &'static str,
    at: SocketAddr,
    udp: Option<Udp<'a>>,
}

/// The sockets serve binds for `config`, as `bind_ipv4` and `bind_ipv6` bind them (a port
/// given as 0, any free one, is left out: nothing can be in its way).
fn wanted(config: &Config) -> Vec<Wanted<'_>> {
    let (s, p) = (&config.server, config.server.ports);
    let v4 = |port| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port));
    let v6 = |port| SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0));
    let proxy = config.dhcp.mode == crate::config::DhcpMode::Proxy;
    let dhcp = Udp {
        iface: s.interfaces.first().map(String::as_str),
        broadcast: true,
        shared: proxy,
        firmware: true,
    };
    let udp = |key, at, how| Wanted {
        key,
        at,
        udp: Some(how),
    };
    let tcp = |key, at| Wanted { key, at, udp: None };
    let console = config
        .pools
        .values()
        .any(|p| p.netconsole != crate::config::Netconsole::Off);
    let mut all = vec![udp("server.ports.dhcp", v4(p.dhcp), dhcp)];
    if proxy {
        all.push(udp(
            "server.ports.pxe",
            v4(p.pxe),
            Udp {
                shared: false,
                ..dhcp
            },
        ));
    }
    if s.tftp {
        all.push(udp(
            "server.ports.tftp",
            v4(p.tftp),
            Udp {
                firmware: true,
                ..Udp::PLAIN
            },
        ));
    }
    all.push(tcp("server.http", s.http));
    if let Some(tls) = &s.tls {
        all.push(tcp("server.tls.listen", tls.listen));
    }
    for ip in own_addresses(config) {
        let at = |port| SocketAddr::V4(SocketAddrV4::new(ip, port));
        all.push(tcp("server.ports.nfs", at(p.nfs)));
        all.push(tcp("server.ports.portmap", at(p.portmap)));
        all.push(udp("server.ports.portmap", at(p.portmap), Udp::PLAIN));
    }
    all.push(tcp("server.ports.nbd", v4(p.nbd)));
    if console {
        all.push(udp("server.ports.console", v4(p.console), Udp::PLAIN));
    }
    if config.dhcp6.is_some() {
        all.push(udp("server.ports.dhcp6", v6(p.dhcp6), Udp::PLAIN));
        if s.tftp {
            all.push(udp("server.ports.tftp", v6(p.tftp), Udp::PLAIN));
        }
        if s.http.is_ipv4() {
            all.push(tcp("server.http", v6(s.http.port())));
        }
        all.push(tcp("server.ports.nbd", v6(p.nbd)));
    }
    all.retain(|w| w.at.port() != 0);
    all
}

/// Binds `w` as serve would and lets go at once.
fn try_bind(w: &Wanted<'_>) -> std::io::Result<()> {
    use socket2::{Domain, Protocol, Socket, Type};
    match (w.at, w.udp) {
        (SocketAddr::V4(at), Some(how)) => udp_socket(at, how).map(drop),
        (at, udp) => {
            let (ty, proto) = match udp {
                Some(_) => (Type::DGRAM, Protocol::UDP),
                None => (Type::STREAM, Protocol::TCP),
            };
            let socket = Socket::new(Domain::for_address(at), ty, Some(proto))?;
            if at.is_ipv6() {
                socket.set_only_v6(true)?;
            }
            // As tokio's and listen6's listeners: a port left in TIME_WAIT is no clash.
            socket.set_reuse_address(udp.is_none())?;
            socket.bind(&at.into())
        }
    }
}

/// What binding on this host would refuse: a `server.interfaces` entry no interface has, an
/// address of the server's the host does not hold, a port another program has (named, from
/// /proc) or one below 1024 without the right to it. Ports are not tried while a bootpool
/// serves this config's state_dir (they are its own: `state_dir_holder`).
fn host_refusals(config: &Config) -> Vec<crate::config::ConfigError> {
    let s = &config.server;
    let mut out = Vec::new();
    for name in &s.interfaces {
        let known = std::ffi::CString::new(name.as_str())
            .is_ok_and(|c| crate::sys::sock::if_index(&c) != 0);
        if !known {
            out.push(config.error_at(
                &["server", "interfaces"],
                format!(
                    "this host has no interface `{name}` (it has {})",
                    interfaces()
                ),
            ));
        }
    }
    // Not the other `server.links`: one no interface holds is left unused with a warning
    // (`steer::links`), as the storm's rooms with fewer links than the config lists rely on.
    let mut addresses: Vec<(&str, std::net::IpAddr)> = vec![("address", s.address.into())];
    addresses.extend(s.address6.map(|a| ("address6", a.into())));
    for (key, ip) in addresses {
        let probe = std::net::UdpSocket::bind(SocketAddr::new(ip, 0));
        if let Err(e) = probe {
            out.push(config.error_at(
                &["server", key],
                format!(
                    "this host does not hold {ip} ({e}); its IPv4 addresses: {}",
                    held()
                ),
            ));
        }
    }
    if state_dir_holder(&s.state_dir).is_some() {
        return out;
    }
    for w in wanted(config) {
        if let Err(e) = try_bind(&w) {
            let proto = if w.udp.is_some() { UDP } else { TCP };
            let keys: Vec<&str> = w.key.split('.').collect();
            out.push(config.error_at(&keys, refusal(&e, proto, w.at)));
        }
    }
    out
}

/// The PID of the bootpool that holds `dir`'s lock (`lock_state_dir`), if one does: nothing
/// is created or kept.
pub fn state_dir_holder(dir: &Path) -> Option<String> {
    let file = std::fs::File::open(dir.join(LOCK_FILE)).ok()?;
    match crate::sys::fs::try_lock_exclusive(file.as_fd()) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            let pid = std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap_or_default();
            Some(pid.trim().to_string())
        }
        _ => None,
    }
}

/// This host's interfaces, for an error naming one it lacks.
fn interfaces() -> String {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.join(", ")
}

/// This host's IPv4 addresses, for an error naming one it does not hold.
fn held() -> String {
    let listed = crate::sys::sock::ipv4_addresses().unwrap_or_default();
    let shown: Vec<String> = listed.iter().map(|(i, a)| format!("{a} ({i})")).collect();
    shown.join(", ")
}

/// A bind of `key`'s socket refused, as an error naming the key, the address and what to do.
fn bind_error(
    e: &std::io::Error,
    key: &str,
    proto: Proto,
    at: impl Into<SocketAddr>,
) -> anyhow::Error {
    anyhow::anyhow!("{key}: {}", refusal(e, proto, at.into()))
}

/// Why a bind of `at` failed, with what to do about it: for EACCES the right to the port, for
/// EADDRINUSE the programs holding it (from /proc) and how to stop them.
fn refusal(e: &std::io::Error, proto: Proto, at: SocketAddr) -> String {
    let kind = match proto {
        Proto::Tcp => "TCP",
        Proto::Udp => "UDP",
    };
    let why = format!("cannot bind {kind} {at}: {e}");
    match e.raw_os_error() {
        Some(libc::EACCES) => format!(
            "{why}: a port below 1024 needs root or CAP_NET_BIND_SERVICE (the installed unit \
             runs as root)"
        ),
        Some(libc::EADDRINUSE) => format!("{why}: {}", in_the_way(proto, at.port())),
        Some(libc::EADDRNOTAVAIL) => format!("{why}: this host does not hold {}", at.ip()),
        _ => why,
    }
}

/// Who holds `port`, and how to free it.
fn in_the_way(proto: Proto, port: u16) -> String {
    // Debian's packages whose services take bootpool's ports, by their program's name.
    const UNITS: [(&str, &str); 9] = [
        ("systemd", "a socket unit (systemctl list-sockets)"),
        ("rpcbind", "rpcbind.socket and rpcbind"),
        ("dnsmasq", "dnsmasq"),
        ("in.tftpd", "tftpd-hpa"),
        ("nginx", "nginx"),
        ("nbd-server", "nbd-server"),
        ("dhcrelay", "isc-dhcp-relay"),
        ("dhcpd", "isc-dhcp-server"),
        ("keepalived", "keepalived"),
    ];
    let held = crate::sys::procnet::holders(proto, port);
    let mut who: Vec<String> = held
        .programs
        .iter()
        .map(
            |(pid, name)| match UNITS.iter().find(|(n, _)| *n == name.as_str()) {
                Some((_, unit)) => format!("{name} (pid {pid}; its service: {unit})"),
                None => format!("{name} (pid {pid})"),
            },
        )
        .collect();
    if held.by_kernel {
        who.push("the kernel (its NFS server: nfs-kernel-server)".into());
    }
    if held.unseen {
        who.push("a process this user cannot see (run as root to name it)".into());
    }
    if who.is_empty() {
        return "another program has the port".into();
    }
    format!(
        "held by {}: stop it (systemctl disable --now SERVICE) or give bootpool another port",
        who.join(", ")
    )
}

/// The IPv4 sockets of the services, bound before any service starts.
struct Ipv4Sockets {
    dhcp: UdpSocket,
    /// proxyDHCP's port 4011, in proxy mode.
    pxe: Option<UdpSocket>,
    tftp: Option<UdpSocket>,
    http: TcpListener,
    https: Option<(TcpListener, tokio_rustls::TlsAcceptor)>,
    /// NFS and the portmapper: one socket on each of `own_addresses`, the first on
    /// `server.address`.
    nfs: Vec<TcpListener>,
    nbd: TcpListener,
    portmap_tcp: Vec<TcpListener>,
    portmap_udp: Vec<UdpSocket>,
    console: Option<UdpSocket>,
}

/// The socket Wake-on-LAN's magic packets go from: UDP on the server's address, any port,
/// allowed to send broadcasts.
fn bind_wake(config: &Config) -> anyhow::Result<std::net::UdpSocket> {
    let socket = std::net::UdpSocket::bind((config.server.address, 0))
        .with_context(|| format!("binding the wake socket on {}", config.server.address))?;
    socket.set_broadcast(true)?;
    Ok(socket)
}

/// The addresses NFS and the portmapper listen on: `server.address`, the other
/// `server.links` the host holds (one it does not is left unused, `steer::links`), and
/// 127.0.0.1 for tools on the server itself (`boot::exports::on_a_link`).
fn own_addresses(config: &Config) -> Vec<Ipv4Addr> {
    let s = &config.server;
    let mut own = vec![s.address];
    for ip in s.links.iter().copied().chain([Ipv4Addr::LOCALHOST]) {
        let held = std::net::UdpSocket::bind((ip, 0)).is_ok();
        if held && !own.contains(&ip) {
            own.push(ip);
        }
    }
    own
}

/// The first of a service's listeners (`own_addresses` has `server.address` first).
fn first<T>(sockets: &[T]) -> std::io::Result<&T> {
    sockets
        .first()
        .ok_or_else(|| std::io::Error::other("no address to listen on"))
}

/// Binds every IPv4 socket the config asks for; no port is opened that no client would use.
async fn bind_ipv4(config: &Config) -> anyhow::Result<Ipv4Sockets> {
    let any = Ipv4Addr::UNSPECIFIED;
    let ports = config.server.ports;
    let iface = config.server.interfaces.first().cloned();
    let proxy = config.dhcp.mode == crate::config::DhcpMode::Proxy;
    // In proxy mode port 67 is shared with the DHCP server that gives the addresses.
    let dhcp_udp = Udp {
        iface: iface.as_deref(),
        broadcast: true,
        shared: proxy,
        firmware: true,
    };
    let at = SocketAddrV4::new(any, ports.dhcp);
    let dhcp = bind_udp(at, dhcp_udp).map_err(|e| bind_error(&e, "server.ports.dhcp", UDP, at))?;
    let pxe = if proxy {
        let pxe_udp = Udp {
            shared: false,
            ..dhcp_udp
        };
        let at = SocketAddrV4::new(any, ports.pxe);
        Some(bind_udp(at, pxe_udp).map_err(|e| bind_error(&e, "server.ports.pxe", UDP, at))?)
    } else {
        None
    };
    let tftp_udp = Udp {
        firmware: true,
        ..Udp::PLAIN
    };
    // A room that boots by UEFI HTTP boot alone needs no TFTP: off, the port stays closed.
    let tftp = config
        .server
        .tftp
        .then(|| {
            let at = SocketAddrV4::new(any, ports.tftp);
            bind_udp(at, tftp_udp).map_err(|e| bind_error(&e, "server.ports.tftp", UDP, at))
        })
        .transpose()?;
    let http = bind_tcp(config.server.http)
        .await
        .map_err(|e| bind_error(&e, "server.http", TCP, config.server.http))?;
    // The certificate is read before the port is taken, so a bad one names its file first.
    let https = match &config.server.tls {
        None => None,
        Some(tls) => {
            let acceptor = service::tls::acceptor(tls)?;
            let listener = bind_tcp(tls.listen)
                .await
                .map_err(|e| bind_error(&e, "server.tls.listen", TCP, tls.listen))?;
            Some((listener, acceptor))
        }
    };
    // NFS (with MOUNT) and the portmapper listen on the server's own addresses, never on
    // 0.0.0.0, so that another address of the host can serve NFS itself (docs/homes.md).
    let own = own_addresses(config);
    let (nfs, _) = bind_on_each(&own, ports.nfs, "server.ports.nfs", false).await?;
    let at = SocketAddrV4::new(any, ports.nbd).into();
    let nbd = bind_tcp(at)
        .await
        .map_err(|e| bind_error(&e, "server.ports.nbd", TCP, at))?;
    // The portmapper answers on the same port over TCP and UDP.
    let (portmap_tcp, portmap_udp) =
        bind_on_each(&own, ports.portmap, "server.ports.portmap", true).await?;
    let wants_console = config
        .pools
        .values()
        .any(|p| p.netconsole != crate::config::Netconsole::Off);
    let console = wants_console
        .then(|| {
            let at = SocketAddrV4::new(any, ports.console);
            bind_udp(at, Udp::PLAIN).map_err(|e| bind_error(&e, "server.ports.console", UDP, at))
        })
        .transpose()?;
    Ok(Ipv4Sockets {
        dhcp,
        pxe,
        tftp,
        http,
        https,
        nfs,
        nbd,
        portmap_tcp,
        portmap_udp,
        console,
    })
}

impl Bound {
    /// Where each of the sockets ended up.
    fn of(v4: &Ipv4Sockets, six: &Ipv6Sockets) -> std::io::Result<Bound> {
        Ok(Bound {
            dhcp6: six.dhcp.as_ref().map(UdpSocket::local_addr).transpose()?,
            tftp6: six.tftp.as_ref().map(UdpSocket::local_addr).transpose()?,
            http6: six.http.as_ref().map(TcpListener::local_addr).transpose()?,
            nbd6: six.nbd.as_ref().map(TcpListener::local_addr).transpose()?,
            console: v4.console.as_ref().map(UdpSocket::local_addr).transpose()?,
            http: v4.http.local_addr()?,
            https: v4.https.as_ref().map(|(l, _)| l.local_addr()).transpose()?,
            dhcp: v4.dhcp.local_addr()?,
            pxe: v4.pxe.as_ref().map(UdpSocket::local_addr).transpose()?,
            tftp: v4.tftp.as_ref().map(UdpSocket::local_addr).transpose()?,
            nfs: first(&v4.nfs)?.local_addr()?,
            nbd: v4.nbd.local_addr()?,
            portmap: first(&v4.portmap_tcp)?.local_addr()?,
        })
    }

    /// Writes the bound ports (some given as 0) back into `config`, which tells clients
    /// where to go.
    fn tell(&self, config: &mut Config) {
        config.server.http.set_port(self.http.port());
        if let (Some(tls), Some(at)) = (config.server.tls.as_mut(), self.https) {
            tls.listen.set_port(at.port());
        }
        config.server.ports.dhcp = self.dhcp.port();
        if let Some(at) = self.dhcp6 {
            config.server.ports.dhcp6 = at.port();
        }
        if let Some(p) = self.pxe {
            config.server.ports.pxe = p.port();
        }
        if let Some(at) = self.tftp {
            config.server.ports.tftp = at.port();
        }
        config.server.ports.nfs = self.nfs.port();
        config.server.ports.nbd = self.nbd.port();
        config.server.ports.portmap = self.portmap.port();
        if let Some(at) = self.console {
            config.server.ports.console = at.port();
        }
    }
}

/// The service table: every service, its sockets moved in, each started the same way by
/// `start` from one `service::Shared`.
fn service_table(
    v4: Ipv4Sockets,
    six: Ipv6Sockets,
    leases: service::dhcp::Table,
    commands: tokio::sync::mpsc::Receiver<service::dhcp::Command>,
    web: service::http::Web,
) -> Vec<Service> {
    let on_links = |tcp: TcpListener, s: &service::Shared| service::Listener {
        tcp,
        links: s.links.clone(),
    };
    // The addresses taken over for the site get an NFS listener of their own at takeover.
    let (to_nfs, nfs_more) = tokio::sync::mpsc::unbounded_channel();
    let nfs_own = v4
        .nfs
        .iter()
        .filter_map(|l| match l.local_addr() {
            Ok(SocketAddr::V4(at)) => Some(*at.ip()),
            _ => None,
        })
        .collect();

    [
        Some(Service::new("dhcp", move |s| {
            Box::pin(service::dhcp::serve(
                v4.dhcp,
                v4.pxe,
                leases,
                commands,
                s.clone(),
            ))
        })),
        v4.tftp.map(|tftp| {
            Service::new("tftp", move |s| {
                Box::pin(service::tftp::serve(tftp, s.clone()))
            })
        }),
        Some(Service::new("nfs", move |s| {
            let listeners = v4.nfs.into_iter().map(|l| on_links(l, s)).collect();
            Box::pin(service::nfs::serve(listeners, nfs_more, s.clone()))
        })),
        Some(takeover(nfs_own, to_nfs)),
        Some(Service::new("nbd", move |s| {
            Box::pin(service::nbd::serve(on_links(v4.nbd, s), s.clone()))
        })),
        Some(Service::new("egress", |s| {
            let metrics = s.metrics.clone();
            let totals =
                Arc::new(move || record::payload_totals(&metrics)) as record::egress::ProtoTotals;
            // The interfaces and link speeds cannot change while the daemon runs.
            let config = s.config.load();
            Box::pin(record::sampler::sample(
                s.egress.clone(),
                config.server.interfaces.clone(),
                s.placement.held(),
                config.server.link_speeds.clone(),
                totals,
                s.recorder.clone(),
                s.shutdown.clone(),
            ))
        })),
        Some(Service::new("initrd-wire", |s| {
            Box::pin(crate::image::wire::serve(
                s.config.clone(),
                s.shutdown.clone(),
            ))
        })),
        Some(Service::new("portmap", move |s| {
            Box::pin(service::portmap::serve(
                v4.portmap_tcp,
                v4.portmap_udp,
                s.clone(),
            ))
        })),
        v4.console.map(|console| {
            Service::new("console", move |s| {
                Box::pin(service::console::serve(console, s.clone()))
            })
        }),
        v4.https.map(|(listener, acceptor)| {
            let web = web.clone();
            Service::new("https", move |s| {
                Box::pin(service::http::serve(
                    on_links(listener, s),
                    web,
                    Some(acceptor),
                    s.shutdown.clone(),
                ))
            })
        }),
        six.dhcp.map(|socket| {
            Service::new("dhcp6", move |s| {
                Box::pin(service::dhcp6::serve(socket, s.clone()))
            })
        }),
        (!six.advertisers.is_empty()).then(|| {
            let advertisers = six.advertisers;
            Service::new("ra", move |s| {
                Box::pin(service::ra::serve(advertisers, s.clone()))
            })
        }),
        six.tftp.map(|tftp| {
            Service::new("tftp6", move |s| {
                Box::pin(service::tftp::serve(tftp, s.clone()))
            })
        }),
        six.nbd.map(|listener| {
            Service::new("nbd6", move |s| {
                Box::pin(service::nbd::serve(on_links(listener, s), s.clone()))
            })
        }),
        six.http.map(|listener| {
            let web = web.clone();
            Service::new("http6", move |s| {
                Box::pin(service::http::serve(
                    on_links(listener, s),
                    web,
                    None,
                    s.shutdown.clone(),
                ))
            })
        }),
        Some(Service::new("http", move |s| {
            Box::pin(service::http::serve(
                on_links(v4.http, s),
                web,
                None,
                s.shutdown.clone(),
            ))
        })),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Runs the daemon until SIGINT or SIGTERM (then Ok), or until a service fails (then an
/// error, so that a supervisor sees a failure and restarts it); SIGHUP reloads the config;
/// SIGUSR2 restarts it in place (`restart`), keeping its attached NBD roots.
pub async fn serve(config: Config, member: Option<String>) -> anyhow::Result<()> {
    raise_fd_limit();
    // Before start: a SIGTERM as soon as the daemon says it serves must stop it cleanly, and
    // a SIGHUP or SIGUSR2 must not end it.
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut usr2 = signal(SignalKind::user_defined2())?;
    // The NBD connections the program before this one handed over, if it was a restart.
    let handover = Arc::new(service::handover::Handover::inherited());
    let running = start_taking(config, handover, member).await?;
    let stopped = running.shutdown.clone();
    let failed = loop {
        tokio::select! {
            _ = hup.recv() => {
                // Logged and counted by `reload`, whatever its outcome.
                let _ = running.reload();
            }
            _ = usr2.recv() => return restart(running).await,
            _ = int.recv() => { tracing::info!("interrupted; stopping"); break false }
            _ = term.recv() => { tracing::info!("terminated; stopping"); break false }
            _ = stopped.wait() => { tracing::warn!("a service stopped the daemon"); break true }
        }
    };
    running.stop().await;
    if failed {
        anyhow::bail!("a service failed and stopped the daemon (see the log above)");
    }
    Ok(())
}

/// A restart in place (SIGUSR2), to apply what a reload cannot or to run a new binary
/// installed over this one: every service stops as for SIGTERM, except that each attached
/// read-only NBD connection is handed over between two requests (`service::handover`); then
/// the process `exec`s its program again (the file at its path now), with the same
/// arguments, the same PID (systemd follows it) and those connections, which the new program
/// takes up before it accepts new ones. Returns only if the exec failed.
async fn restart(running: Running) -> anyhow::Result<()> {
    running.handover.arm();
    let handover = running.handover.clone();
    tracing::info!("restarting in place; attached nbd roots are handed over");
    running.stop().await;
    let env = handover
        .to_env()
        .context("handing the nbd connections over")?;
    // After an upgrade the running file is gone and /proc names it "PATH (deleted)": the
    // program at PATH is the new one.
    let exe = std::env::current_exe().context("finding bootpool's program")?;
    let exe = PathBuf::from(
        exe.to_string_lossy()
            .trim_end_matches(" (deleted)")
            .to_string(),
    );
    tracing::info!(program = %exe.display(), nbd = handover.count(), "restarting");
    use std::os::unix::process::CommandExt as _;
    let e = std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .env(service::handover::ENV, env)
        .exec();
    Err(e).with_context(|| format!("restarting {}", exe.display()))
}

/// The channel an enrolment (the API's, a `discover` pool's, the site's) asks for a reload
/// by, as SIGHUP makes it, and the task that answers each ask with the reload's generation
/// or why it was refused, until the shutdown.
fn answer_reloads(
    reloader: &Arc<Reloader>,
    shutdown: &Shutdown,
) -> tokio::sync::mpsc::Sender<service::enrol::ReloadReply> {
    let (reloads, mut asked) = tokio::sync::mpsc::channel::<service::enrol::ReloadReply>(16);
    let (reloader, stop) = (reloader.clone(), shutdown.clone());
    shutdown.spawn(async move {
        loop {
            let reply = tokio::select! {
                _ = stop.wait() => break,
                Some(reply) = asked.recv() => reply,
            };
            let again = reloader.clone();
            let done = tokio::task::spawn_blocking(move || again.reload()).await;
            let answer = match done {
                Ok(Ok(served)) => Ok(served.generation),
                Ok(Err(refused)) => Err(refused.to_string()),
                Err(e) => Err(format!("the reload failed: {e}")),
            };
            let _ = reply.send(answer);
        }
    });
    reloads
}

/// This server's site, joined (its name checked, a name another member holds refused) and
/// kept (its heartbeat, everyone's rows) until the shutdown.
async fn join_site(
    config: &Config,
    member: String,
    shutdown: &Shutdown,
) -> anyhow::Result<Arc<crate::site::live::Site>> {
    let site = site_of(config, member);
    if site.shared() {
        crate::site::member::check_name(&site.me().name).map_err(|e| {
            anyhow::anyhow!("{e}: name this server with `bootpool serve --member NAME`")
        })?;
    }
    site.join().await?;
    shutdown.spawn(site.clone().keep(shutdown.clone()));
    shutdown.spawn(site.clone().record_conns(shutdown.clone()));
    Ok(site)
}

/// The host's name, a member's name when `serve --member` is not given.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// `table`, an authoritative member's, shared in the site's `site_leases` table (written
/// behind through a spool in `state_dir`, never on the packet path) until the shutdown;
/// as it is alone or in proxy mode (no addresses given).
fn share_leases(
    table: service::dhcp::Table,
    config: &Config,
    site: &Arc<crate::site::live::Site>,
    metrics: &Metrics,
    shutdown: &Shutdown,
) -> anyhow::Result<service::dhcp::Table> {
    use crate::site::{db::Db, leases_db::LeasesDb, shared_leases::SharedLeases};
    let crate::config::Database::Postgres(url) = &config.server.database else {
        return Ok(table);
    };
    if !site.shared() || config.dhcp.mode == crate::config::DhcpMode::Proxy {
        return Ok(table);
    }
    let db = LeasesDb::new(Db::connect(url)?);
    let shared = SharedLeases::open(site.clone(), db, &config.server.state_dir, metrics.clone())?;
    shutdown.spawn(shared.clone().keep(shutdown.clone()));
    Ok(table.sharing(shared))
}

/// The enrolments file, a member's in a site, kept in step with the site's `site_enrolments`
/// (this member's changes written, the others' read into the file and reloaded) until the
/// shutdown; alone, the file is the whole truth and nothing runs.
fn share_enrolments(
    config: &Config,
    site: &Arc<crate::site::live::Site>,
    live: &Live,
    reloads: tokio::sync::mpsc::Sender<service::enrol::ReloadReply>,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    use crate::site::{db::Db, enrolments::SharedEnrolments, enrolments_db::EnrolmentsDb};
    let crate::config::Database::Postgres(url) = &config.server.database else {
        return Ok(());
    };
    if !site.shared() {
        return Ok(());
    }
    // The reload's answer is not awaited: the file is served from the reload on.
    let reload = Box::new(move || {
        let (reply, _) = tokio::sync::oneshot::channel();
        let _ = reloads.try_send(reply);
    });
    let db = EnrolmentsDb::new(Db::connect(url)?);
    let shared = SharedEnrolments::open(&site.me().name, db, live.clone(), reload)?;
    shutdown.spawn(shared.keep(shutdown.clone()));
    Ok(())
}

/// This server's name in its site: `member` (`serve --member`), else the host's name.
fn member_name(config: &Config, member: Option<String>) -> String {
    member
        .or_else(|| Some(host_name()).filter(|h| !h.is_empty()))
        .unwrap_or_else(|| config.server.address.to_string())
}

/// This server as member `name` of its site: a site only with a PostgreSQL database, else
/// alone.
fn site_of(config: &Config, name: String) -> Arc<crate::site::live::Site> {
    use crate::site::{db::Db, live::Site, member::Member};
    let s = &config.server;
    let me = Member {
        name,
        addresses: std::iter::once(IpAddr::V4(s.address))
            .chain(s.address6.map(IpAddr::V6))
            .collect(),
        links: s.links.clone(),
        rooms: config.pools.keys().cloned().collect(),
        http: format!("http://{}", service::api_client::api_address(config)),
        started: crate::record::event::now_micros(),
    };
    match &s.database {
        crate::config::Database::Postgres(url) => match Db::connect(url) {
            Ok(db) => Site::member(me, db),
            // The records' store connected to the same URL already.
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "site database unusable; serving alone");
                Site::alone(me)
            }
        },
        crate::config::Database::Sqlite(_) => Site::alone(me),
    }
}

/// Raises the soft limit on open files to the hard one, as Go's runtime does: systemd's
/// default soft limit (1024) would cap the NFS open-file cache (half the limit) at 512 files,
/// fewer than one boot reads, and a room of connections could run out of descriptors.
fn raise_fd_limit() {
    use crate::sys::process::{open_file_limit, set_open_file_limit};
    let Ok((from, max)) = open_file_limit() else {
        return;
    };
    if from >= max {
        return;
    }
    if set_open_file_limit(max, max).is_ok() {
        tracing::info!(from, to = max, "raised the open-file limit");
    }
}

/// The IPv6 sockets of a config with a `dhcp6` section.
#[derive(Default)]
struct Ipv6Sockets {
    dhcp: Option<UdpSocket>,
    tftp: Option<UdpSocket>,
    http: Option<TcpListener>,
    nbd: Option<TcpListener>,
    advertisers: Vec<service::ra::Advertiser>,
}

/// All-DHCP-relay-agents-and-servers (RFC 8415 7.1), which DHCPv6 clients send to.
const ALL_DHCP_SERVERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 1, 2);
/// All routers, which router solicitations go to.
const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);

/// With a `dhcp6` section: DHCPv6 on [::]:ports.dhcp6, joined to ff02::1:2 on each of
/// `server.interfaces` (else on the kernel's choice); TFTP, HTTP and NBD on [::] at the ports
/// their IPv4 sockets got (IPV6_V6ONLY, beside those); the raw ICMPv6 sockets of router
/// advertisements when bootpool sends them.
async fn bind_ipv6(
    config: &Config,
    tftp4: Option<&UdpSocket>,
    http4: &TcpListener,
    nbd4: &TcpListener,
) -> anyhow::Result<Ipv6Sockets> {
    use socket2::{Domain, Protocol, Socket, Type};
    let Some(d) = &config.dhcp6 else {
        return Ok(Ipv6Sockets::default());
    };
    let any = Ipv6Addr::UNSPECIFIED;
    let indexes: Vec<(String, u32)> = config
        .server
        .interfaces
        .iter()
        .map(|name| {
            let c = std::ffi::CString::new(name.as_str()).unwrap_or_default();
            (name.clone(), crate::sys::sock::if_index(&c))
        })
        .collect();
    if let Some((name, _)) = indexes.iter().find(|(_, i)| *i == 0) {
        anyhow::bail!("server.interfaces: no interface `{name}` for DHCPv6");
    }
    let port = config.server.ports.dhcp6;
    let at = SocketAddrV6::new(any, port, 0, 0);
    let dhcp = bind_udp6(at, true).map_err(|e| bind_error(&e, "server.ports.dhcp6", UDP, at))?;
    let joins: Vec<u32> = if indexes.is_empty() {
        vec![0]
    } else {
        indexes.iter().map(|(_, i)| *i).collect()
    };
    for index in joins {
        socket2::SockRef::from(&dhcp)
            .join_multicast_v6(&ALL_DHCP_SERVERS, index)
            .with_context(|| format!("joining ff02::1:2 on interface index {index}"))?;
    }
    let tftp = match tftp4 {
        None => None,
        Some(t) => {
            let at = SocketAddrV6::new(any, t.local_addr()?.port(), 0, 0);
            Some(bind_udp6(at, true).map_err(|e| bind_error(&e, "server.ports.tftp", UDP, at))?)
        }
    };
    // A server.http on an IPv6 address already listens there.
    let http = if http4.local_addr()?.is_ipv6() {
        None
    } else {
        Some(listen6(http4.local_addr()?.port(), "server.http")?)
    };
    let nbd = Some(listen6(nbd4.local_addr()?.port(), "server.ports.nbd")?);
    let mut advertisers = Vec::new();
    if d.router_advertisements == crate::config::RouterAdverts::Send {
        for (iface, index) in indexes {
            let socket = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6))
                .context("opening an ICMPv6 socket for router advertisements (needs root)")?;
            socket.bind_device(Some(iface.as_bytes()))?;
            socket.set_multicast_if_v6(index)?;
            socket.set_multicast_hops_v6(255)?;
            socket.set_unicast_hops_v6(255)?;
            socket.set_multicast_loop_v6(false)?;
            socket.join_multicast_v6(&ALL_ROUTERS, index)?;
            socket.set_nonblocking(true)?;
            let socket = UdpSocket::from_std(std::net::UdpSocket::from(socket))?;
            advertisers.push(service::ra::Advertiser {
                iface,
                index,
                socket,
            });
        }
    }
    Ok(Ipv6Sockets {
        dhcp: Some(dhcp),
        tftp,
        http,
        nbd,
        advertisers,
    })
}

/// A TCP listener on [::]:`port`, IPv6 only (beside the IPv4 one of the same port), for the
/// config key `key`.
fn listen6(port: u16, key: &str) -> anyhow::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_only_v6(true)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    let at = SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0);
    socket
        .bind(&SocketAddr::V6(at).into())
        .map_err(|e| bind_error(&e, key, TCP, at))?;
    socket.listen(1024)?;
    Ok(TcpListener::from_std(socket.into())?)
}

/// A UDP socket on an IPv6 address, IPv6 only (the IPv4 socket of the same port is separate).
fn bind_udp6(addr: SocketAddrV6, firmware: bool) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_only_v6(true)?;
    if firmware {
        socket.set_priority(service::FIRMWARE_PRIORITY)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&SocketAddr::V6(addr).into())?;
    UdpSocket::from_std(socket.into())
}

/// TCP listeners (and, `with_udp`, UDP sockets) of one port on each of `own`'s addresses. A
/// port left to the kernel (0) is the one it gives the first address; when that port is taken
/// already elsewhere (on another address, a connection's local end, say), all are let go and
/// a new port is asked for, up to 20 times.
async fn bind_on_each(
    own: &[Ipv4Addr],
    port: u16,
    key: &str,
    with_udp: bool,
) -> anyhow::Result<(Vec<TcpListener>, Vec<UdpSocket>)> {
    let mut tries = if port == 0 { 20 } else { 1 };
    loop {
        tries -= 1;
        match bind_each_once(own, port, with_udp).await {
            Ok(bound) => return Ok(bound),
            Err((e, ..)) if port == 0 && e.kind() == std::io::ErrorKind::AddrInUse && tries > 0 => {
            }
            Err((e, proto, at)) => return Err(bind_error(&e, key, proto, at)),
        }
    }
}

/// One try of `bind_on_each`; the failed bind's error, protocol and address.
async fn bind_each_once(
    own: &[Ipv4Addr],
    port: u16,
    with_udp: bool,
) -> Result<(Vec<TcpListener>, Vec<UdpSocket>), (std::io::Error, Proto, SocketAddrV4)> {
    let (mut tcp, mut udp) = (Vec::new(), Vec::new());
    let mut chosen = port;
    for ip in own {
        let at = SocketAddrV4::new(*ip, chosen);
        let listener = bind_tcp(at.into()).await.map_err(|e| (e, TCP, at))?;
        chosen = listener.local_addr().map_err(|e| (e, TCP, at))?.port();
        tcp.push(listener);
        if with_udp {
            let at = SocketAddrV4::new(*ip, chosen);
            udp.push(bind_udp(at, Udp::PLAIN).map_err(|e| (e, UDP, at))?);
        }
    }
    Ok((tcp, udp))
}

async fn bind_tcp(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// The service acting on the site's takeovers (`service::takeover`): NFS listeners for the
/// addresses taken over, bound here and sent to NFS through `to_nfs`, and the tickles.
fn takeover(
    nfs_own: std::collections::BTreeSet<Ipv4Addr>,
    to_nfs: tokio::sync::mpsc::UnboundedSender<service::Listener>,
) -> Service {
    Service::new("takeover", move |s| {
        let (links, config) = (s.links.clone(), s.config.clone());
        let bind: service::takeover::BindNfs = Box::new(move |ip| {
            let at = SocketAddrV4::new(ip, config.load().server.ports.nfs);
            Ok(service::Listener {
                tcp: bind_taken_over(at)?,
                links: links.clone(),
            })
        });
        Box::pin(service::takeover::serve(
            s.site.clone(),
            nfs_own,
            bind,
            to_nfs,
            s.shutdown.clone(),
        ))
    })
}

/// A listener on an address this host holds for the site only while keepalived gives it
/// (`service::takeover`): bound with IP_FREEBIND, so that the address leaving and coming
/// back never makes it fail, as `TcpListener::bind` would do otherwise.
fn bind_taken_over(addr: SocketAddrV4) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_freebind_v4(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&SocketAddr::V4(addr).into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

/// How a UDP socket is bound.
#[derive(Clone, Copy)]
struct Udp<'a> {
    /// Bound to this interface only, so that several daemons (or a host DHCP server) can each
    /// own their own link.
    iface: Option<&'a str>,
    /// May send to 255.255.255.255 (DHCP).
    broadcast: bool,
    /// `SO_REUSEADDR`: another socket that also asks for it may bind the same port. Only for
    /// proxy mode's port 67; everywhere else a second daemon must fail to bind, not share.
    shared: bool,
    /// Sends at `service::FIRMWARE_PRIORITY` (DHCP, TFTP).
    firmware: bool,
}

impl Udp<'_> {
    const PLAIN: Udp<'static> = Udp {
        iface: None,
        broadcast: false,
        shared: false,
        firmware: false,
    };
}

/// A UDP socket on `addr`. A socket bound to 0.0.0.0 receives broadcasts without
/// `SO_REUSEADDR`; that option would only let a second daemon bind the same port unnoticed.
fn bind_udp(addr: SocketAddrV4, how: Udp<'_>) -> std::io::Result<UdpSocket> {
    UdpSocket::from_std(udp_socket(addr, how)?.into())
}

/// `bind_udp`'s socket, bound, outside any runtime (`host_refusals` binds it and lets go).
fn udp_socket(addr: SocketAddrV4, how: Udp<'_>) -> std::io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    if how.shared {
        socket.set_reuse_address(true)?;
    }
    if how.broadcast {
        socket.set_broadcast(true)?;
    }
    if how.firmware {
        socket.set_priority(service::FIRMWARE_PRIORITY)?;
    }
    if let Some(iface) = how.iface {
        socket.bind_device(Some(iface.as_bytes())).map_err(|e| {
            std::io::Error::new(e.kind(), format!("binding to interface {iface}: {e}"))
        })?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&SocketAddr::V4(addr).into())?;
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_bind_of_a_udp_port_fails() {
        let local = Ipv4Addr::LOCALHOST;
        for how in [
            Udp::PLAIN,
            Udp {
                broadcast: true,
                ..Udp::PLAIN
            },
        ] {
            let first = bind_udp(SocketAddrV4::new(local, 0), how).unwrap();
            let port = first.local_addr().unwrap().port();
            let at = SocketAddrV4::new(local, port);
            let e = bind_udp(at, how).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
            // The error names the address and the program holding it: this test's process.
            let why = refusal(&e, UDP, at.into());
            assert!(why.contains(&format!("UDP 127.0.0.1:{port}")), "{why}");
            assert!(
                why.contains(&format!("pid {})", std::process::id())),
                "{why}"
            );
            // The wildcard address overlaps the bound one: refused too.
            let e = bind_udp(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port), how).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
        }
    }

    /// A port below 1024 without the right to it: the error says what right is wanting.
    #[test]
    fn a_refused_low_port_names_the_capability() {
        let at = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 69));
        let why = refusal(&std::io::Error::from_raw_os_error(libc::EACCES), UDP, at);
        assert!(why.starts_with("cannot bind UDP 0.0.0.0:69: "), "{why}");
        assert!(why.contains("root or CAP_NET_BIND_SERVICE"), "{why}");
        let e = bind_error(
            &std::io::Error::from_raw_os_error(libc::EACCES),
            "server.ports.tftp",
            UDP,
            at,
        );
        assert!(
            e.to_string()
                .starts_with("server.ports.tftp: cannot bind UDP"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn proxy_mode_shares_port_67_with_a_dhcp_server() {
        let shared = Udp {
            broadcast: true,
            shared: true,
            ..Udp::PLAIN
        };
        let first = bind_udp(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), shared).unwrap();
        let port = first.local_addr().unwrap().port();
        bind_udp(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port), shared).unwrap();
    }

    #[test]
    fn a_second_lock_on_a_state_dir_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("var");
        let held = lock_state_dir(&state).unwrap();
        let text = std::fs::read_to_string(state.join(LOCK_FILE)).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
        let e = format!("{:#}", lock_state_dir(&state).err().unwrap());
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        assert!(
            e.contains(&state.join(LOCK_FILE).display().to_string()),
            "{e}"
        );
        drop(held);
        lock_state_dir(&state).unwrap();
    }
}

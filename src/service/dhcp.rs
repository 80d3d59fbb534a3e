//! DHCP service. Authoritative mode: DISCOVER -> OFFER, REQUEST -> ACK/NAK, RELEASE, DECLINE,
//! with the lease table and its files (`state_dir/leases.json` and `leases.journal`, see
//! `lease_file`; every batch is synced before its replies leave, so a daemon killed with -9
//! loses nothing). Proxy mode (beside another DHCP server):
//! never an address; PXE clients get a boot answer to DISCOVER on port 67 and an ACK to their
//! REQUEST on port 4011. Owns reply addressing and the DHCP events. What to boot comes from
//! `boot::plan`; clients in no pool get silence.

use super::enrol::Enroller;
use super::identity::{Identity, unix_now};
use super::lease_file::LeaseFile;
use super::unknown::{Asked, Asking, Unknown};
use crate::boot::lease_share::Share;
use crate::boot::leases::Leases;
use crate::boot::subnet::{self, Arrival, Unplaced};
use crate::boot::{self, Client};
use crate::config::{Config, DhcpMode, DhcpSubnet, Live, Mac, SitePlacement};
use crate::metrics::Metrics;
use crate::proto::dhcp::msg::{DECLINE, DISCOVER, INFORM, RELEASE, REQUEST};
use crate::proto::dhcp::{
    self as wire, MAX_PACKET, PXE_BOOT_FILE_ONLY, Relayed, Reply, ReplyKind, Request, ServerClass,
};
use crate::record::{Kind, Recorder, Who};
use crate::site::live::Site;
use crate::site::shared_leases::SharedLeases;
use crate::steer::firmware::{self, FirmwareWatch};
use crate::steer::local_addr;
use crate::steer::placement::Placement;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use tokio::net::UdpSocket;

/// How long an offered address is held for the client's REQUEST.
const OFFER_HOLD_S: u64 = 60;
const CLIENT_PORT: u16 = 68;
/// Relays listen on the server port (RFC 1542), whatever port this daemon was given.
const RELAY_PORT: u16 = 67;
/// Socket receive buffer: some thousands of requests.
const RECV_BUFFER: usize = 4 << 20;
/// Packets answered together before one save of the lease table.
const BATCH: usize = 256;
/// Strangers logged once each; beyond this many we stop remembering (and logging) them.
const STRANGERS_REMEMBERED: usize = 4096;
/// Proxy mode: how long a DISCOVER seen on port 67 lets its MAC ask on port 4011, and how
/// many such MACs are remembered (the oldest are forgotten first).
const SEEN_FOR_S: u64 = 120;
const SEEN_REMEMBERED: usize = 16384;

/// What another service asks of the DHCP service, the lease table's one writer (so a change
/// goes to the lease files as its own answers' changes do).
#[derive(Debug)]
pub enum Command {
    /// An admin's release (`POST /api/v1/leases/MAC/release`): `mac`'s binding ends as a
    /// DHCPRELEASE would end it (the address is free, still remembered for the MAC; a fixed
    /// address stays reserved for it). Answers the address it held, `None` if it held none.
    Release {
        mac: Mac,
        reply: tokio::sync::oneshot::Sender<Option<std::net::Ipv4Addr>>,
    },
}

/// The sending side of `serve`'s commands.
pub type Commands = tokio::sync::mpsc::Sender<Command>;

/// Serves DHCP on `socket` (port 67); in proxy mode also PXE boot server requests on `pxe`
/// (port 4011), which app.rs binds only in that mode; and `commands` from other services.
pub async fn serve(
    socket: UdpSocket,
    pxe: Option<UdpSocket>,
    table: Table,
    mut commands: tokio::sync::mpsc::Receiver<Command>,
    shared: super::Shared,
) -> anyhow::Result<()> {
    let super::Shared {
        config,
        recorder,
        metrics,
        placement,
        unknown,
        enrol,
        links,
        site,
        shutdown,
        ..
    } = shared;
    // `dhcp.mode` cannot change while the daemon runs (`config::reload`).
    let proxy = config.load().dhcp.mode == DhcpMode::Proxy;
    // A room powering on is a burst; while a lease save runs, the kernel queue holds it.
    for s in std::iter::once(&socket).chain(pxe.as_ref()) {
        if let Err(e) = socket2::SockRef::from(s).set_recv_buffer_size(RECV_BUFFER) {
            tracing::debug!(error = %e, "dhcp receive buffer not enlarged");
        }
    }
    // Which of the server's addresses a request reached says its segment when no relay does.
    local_addr::enable(&socket)?;
    let mut server = Server::open(config, recorder, metrics, table, placement);
    server.unknown = unknown;
    server.enrol = enrol;
    server.firmware = links.firmware();
    server.site = site;
    let mut buf = vec![0u8; MAX_PACKET + 1];
    // Answers to clients without an address go unicast while the kernel lets us enter their
    // MACs (`arp::teach`); broadcast after the first refusal.
    let mut may_teach = true;
    static ARP_FAILED: super::bounds::LogLimit = super::bounds::LogLimit::new();
    let mut pxe_buf = vec![0u8; MAX_PACKET + 1];
    loop {
        let (n, from, local, on_pxe) = tokio::select! {
            _ = shutdown.wait() => break,
            Some(command) = commands.recv() => {
                server.command(command, unix_now());
                server.flush();
                continue;
            }
            r = local_addr::recv_from(&socket, &mut buf) => match r {
                Ok((n, from, local)) => (n, from, local, false),
                Err(e) => {
                    // ICMP errors from earlier sends surface here; they are not fatal.
                    tracing::debug!(error = %e, "dhcp receive error");
                    continue;
                }
            },
            r = recv_opt(pxe.as_ref(), &mut pxe_buf) => match r {
                Ok((n, from)) => (n, from, None, true),
                Err(e) => {
                    tracing::debug!(error = %e, "pxe receive error");
                    continue;
                }
            },
        };
        let mut replies = Vec::new();
        let first = if on_pxe { &pxe_buf[..n] } else { &buf[..n] };
        if let Some((reply, to)) = server.answer(first, from, local, on_pxe, proxy) {
            replies.push((reply, to, on_pxe));
        }
        // Group commit: answer what else is queued already, save the table once, then send.
        // An ACK still leaves only after its lease is on disk, and a burst costs one write.
        for _ in 0..BATCH {
            let Ok((n, from, local)) = local_addr::try_recv_from(&socket, &mut buf) else {
                break;
            };
            if let Some((reply, to)) = server.answer(&buf[..n], from, local, false, proxy) {
                replies.push((reply, to, false));
            }
        }
        server.flush();
        for (reply, to, on_pxe) in replies {
            // Port 4011 answers come from 4011: iPXE and PXE ROMs check the source port.
            let out = match (&pxe, on_pxe) {
                (Some(p), true) => p,
                _ => &socket,
            };
            let to = match to {
                To::Addr(to) => to,
                To::Hardware(ip, mac) if may_teach => match super::arp::teach(out, ip, mac) {
                    Ok(()) => SocketAddrV4::new(ip, CLIENT_PORT).into(),
                    Err(e) => {
                        // Without CAP_NET_ADMIN no answer can be unicast: say so once.
                        if e.raw_os_error() == Some(libc::EPERM) {
                            may_teach = false;
                            tracing::warn!(error = %e, "dhcp answers are broadcast: unicasting \
                                them to clients without an address needs CAP_NET_ADMIN");
                        } else if let Some(suppressed) = ARP_FAILED.allow() {
                            tracing::warn!(%ip, error = %e, suppressed,
                                "dhcp answer broadcast: the client's MAC could not be entered");
                        }
                        SocketAddrV4::new(Ipv4Addr::BROADCAST, CLIENT_PORT).into()
                    }
                },
                To::Hardware(..) => SocketAddrV4::new(Ipv4Addr::BROADCAST, CLIENT_PORT).into(),
            };
            match wire::encode_reply(&reply) {
                Ok(bytes) => {
                    if let Err(e) = out.send_to(&bytes, to).await {
                        tracing::warn!(%to, error = %e, "dhcp reply not sent");
                    }
                }
                Err(e) => tracing::error!(error = %e, "dhcp reply not encodable"),
            }
        }
    }
    server.flush();
    // A clean stop leaves the whole table in the snapshot.
    server.file.snapshot(&server.leases.read())?;
    Ok(())
}

/// Receives on the socket if there is one; pends forever if not.
async fn recv_opt(
    socket: Option<&UdpSocket>,
    buf: &mut [u8],
) -> std::io::Result<(usize, SocketAddr)> {
    match socket {
        Some(s) => s.recv_from(buf).await,
        None => std::future::pending().await,
    }
}

/// Where an answer goes (RFC 2131 4.1, `Server::destination`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    /// A relay, a client at the address it has, or everyone (broadcast).
    Addr(SocketAddr),
    /// A client with no address yet that takes unicast: to the address it is given, at its
    /// MAC, once the kernel has that MAC for it (`arp::teach`); broadcast if it cannot learn it.
    Hardware(Ipv4Addr, [u8; 6]),
}

/// What a request says of the relay it came through, for its lease (`Lease::relayed`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Path {
    /// A relayed request (`Some`: the relay and its option 82), or a broadcast one on the
    /// server's own segment (`None`).
    Said(Option<Relayed>),
    /// A renewal unicast from the client's address: it tells nothing of the way.
    Unsaid,
}

impl Path {
    fn of(req: &Request) -> Path {
        match req.relayed() {
            Some(r) => Path::Said(Some(r)),
            None if req.ciaddr.is_unspecified() => Path::Said(None),
            None => Path::Unsaid,
        }
    }
}

/// The lease table and its files, opened by app.rs before it binds: damaged lease files stop
/// the start with an error naming them, not a service already serving.
pub struct Table {
    leases: Identity,
    /// Where the table is kept.
    file: LeaseFile,
    /// In a site: the leases shared with the other members.
    shared: Option<Arc<SharedLeases>>,
}

impl Table {
    /// The table of a member of a site, its leases shared (`site::shared_leases`).
    pub fn sharing(self, shared: Arc<SharedLeases>) -> Table {
        Table {
            shared: Some(shared),
            ..self
        }
    }

    /// The table as every other service sees it; in a site, an address it does not know
    /// has the site's leases read again soon (`Identity::holder`).
    pub fn identity(&self) -> Identity {
        if let Some(shared) = &self.shared {
            self.leases.in_site(shared.clone());
        }
        self.leases.clone()
    }
}

/// The lease table for this config, with what its files hold (a proxy's table holds the
/// bindings it learned on port 4011).
pub fn open_table(config: &Config) -> anyhow::Result<Table> {
    let (leases, file) = load(config)?;
    Ok(Table {
        leases: Identity::new(leases),
        file,
        shared: None,
    })
}

/// The fixed addresses the pools give (`clients[].ip`), by MAC.
fn reservations(config: &Config) -> impl Iterator<Item = (Mac, Ipv4Addr)> + '_ {
    config
        .pools
        .values()
        .flat_map(|p| p.clients.iter())
        .filter_map(|c| Some((c.macs.first, c.ip?)))
}

/// The lease table follows a reloaded config: its range and fixed addresses from now on,
/// every lease held kept (`Leases::reconfigure`).
pub fn follow(table: &Identity, config: &Config) {
    table
        .write()
        .reconfigure(ranges(config), reservations(config));
}

/// The fixed addresses (`clients[].ip`) of `config` that another MAC's lease holds now, each
/// an error on its pool's `clients`: a reload giving them would take a running client's
/// address, so it is refused until that lease ends or is released.
pub fn taken_fixed(table: &Identity, config: &Config) -> Vec<crate::config::ConfigError> {
    let (leases, now) = (table.read(), unix_now());
    let mut errors = Vec::new();
    for pool in config.pools.values() {
        for (mac, ip) in pool
            .clients
            .iter()
            .filter_map(|c| Some((c.macs.first, c.ip?)))
        {
            if let Some(other) = leases.bound_to(ip, now).filter(|m| *m != mac) {
                errors.push(config.error_at(
                    &["pools", &pool.name, "clients"],
                    format!(
                        "{ip}, fixed for {mac}, is leased to {other} now: give it once that \
                         lease has ended or been released (POST /api/v1/leases/{other}/release)"
                    ),
                ));
            }
        }
    }
    errors
}

/// The dynamic ranges of `config`, one per subnet that has one.
fn ranges(config: &Config) -> Vec<(Ipv4Addr, Ipv4Addr)> {
    config.dhcp.subnets.iter().filter_map(|s| s.range).collect()
}

/// The lease table for this config, with what its files hold.
fn load(config: &Config) -> anyhow::Result<(Leases, LeaseFile)> {
    let reservations = reservations(config);
    let mut leases = if config.dhcp.mode == DhcpMode::Proxy {
        Leases::learning(reservations)
    } else {
        Leases::new(ranges(config), reservations)
    };
    let dir = &config.server.state_dir;
    let (file, count, skipped) = LeaseFile::open(dir, &mut leases)
        .map_err(|e| anyhow::anyhow!("loading the leases in {}: {e}", dir.display()))?;
    if count > 0 {
        tracing::info!(dir = %dir.display(), count, skipped, "leases loaded");
    }
    Ok((leases, file))
}

struct Server {
    /// Loaded once per request.
    config: Live,
    recorder: Recorder,
    /// Which server link each client boots from.
    placement: Arc<Placement>,
    leases: Identity,
    file: LeaseFile,
    /// In a site: the leases shared with the other members, and the share the table has.
    shared: Option<Arc<SharedLeases>>,
    share: Option<Arc<Share>>,
    strangers: HashSet<Mac>,
    /// Where strangers are listed for the admin (`GET /api/v1/unknown`).
    unknown: Arc<Unknown>,
    /// Enrols the clients a `discover` pool takes.
    enrol: Arc<Enroller>,
    /// Where a firmware's request keeps its link's headroom (`steer::firmware`).
    firmware: FirmwareWatch,
    /// Which clients are this server's to answer, among the members of its site.
    site: Arc<Site>,
    /// Proxy mode: MACs whose PXE DISCOVER came on port 67, when, and through which relay.
    seen: HashMap<Mac, (u64, Option<Relayed>)>,
    /// The daemon's counters; this service counts into `dhcp()`.
    metrics: Metrics,
    /// The table changed since it was last saved.
    dirty: bool,
    /// A boot was placed on another member's link since the last flush.
    placed_elsewhere: bool,
    /// When `expire` last ran (seconds).
    expired_at: u64,
}

impl Server {
    /// The server for this config and its lease table (`open_table`).
    fn open(
        config: Live,
        recorder: Recorder,
        metrics: Metrics,
        table: Table,
        placement: Arc<Placement>,
    ) -> Server {
        Server {
            config,
            recorder,
            placement,
            leases: table.leases,
            file: table.file,
            shared: table.shared,
            share: None,
            strangers: HashSet::new(),
            unknown: Arc::new(Unknown::in_memory(metrics.clone())),
            enrol: Arc::new(Enroller::new(None)),
            firmware: FirmwareWatch::default(),
            site: Site::none(),
            seen: HashMap::new(),
            metrics,
            dirty: false,
            placed_elsewhere: false,
            expired_at: 0,
        }
    }

    /// Reads one packet, which reached the server's address `local` (if the kernel said), and
    /// answers it (nothing is sent or saved here).
    fn answer(
        &mut self,
        bytes: &[u8],
        from: SocketAddr,
        local: Option<Ipv4Addr>,
        on_pxe: bool,
        proxy: bool,
    ) -> Option<(Reply, To)> {
        let req = self
            .metrics
            .dhcp()
            .decoded(wire::parse_request(bytes), "dhcp", from)?;
        // In a site, another member answers the clients whose RFC 3074 bucket is not ours,
        // every message of theirs, in either mode (`site::owners`).
        if !self.site.mine(&req.mac) {
            self.metrics.dhcp().others.inc();
            // Proxy mode: another member's PXE client, seen here on port 67, asks this member
            // on port 4011 when its owner died between the OFFER and the REQUEST and its
            // address moved here (keepalived); its REQUEST is then no stranger's.
            if proxy && !on_pxe && req.is_pxe() && req.message_type() == Some(DISCOVER) {
                self.saw(Mac(req.mac), unix_now(), req.relayed());
            }
            return None;
        }
        self.follow_site(Mac(req.mac));
        if req.is_pxe() {
            self.metrics.dhcp().firmware.inc();
            let kind = match req.message_type() {
                Some(DISCOVER) => firmware::Dhcp::Discover,
                _ => firmware::Dhcp::Request,
            };
            self.firmware.dhcp(req.mac, local, kind);
        }
        if proxy {
            self.handle_proxy(&req, from, local, on_pxe, unix_now())
        } else {
            self.handle(&req, from, local, unix_now())
        }
    }

    /// The subnet `req` is answered from (`boot::subnet`); `None` (counted as refused, logged
    /// at most as often as `LogLimit` lets) when it is none of the configured ones.
    fn subnet<'c>(
        &self,
        config: &'c Config,
        req: &Request,
        from: SocketAddr,
        local: Option<Ipv4Addr>,
    ) -> Option<&'c DhcpSubnet> {
        let source = match from.ip() {
            IpAddr::V4(v4) => v4,
            IpAddr::V6(v6) => v6.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
        };
        let arrival = Arrival {
            giaddr: req.giaddr,
            ciaddr: req.ciaddr,
            source,
            link_selection: req.relay_agent().and_then(|a| a.link_selection),
            subnet_selection: req.subnet_selection(),
            local,
        };
        match subnet::choose(config, &arrival) {
            Ok(on) => Some(on),
            Err(why) => {
                static UNPLACED: super::bounds::LogLimit = super::bounds::LogLimit::new();
                let dhcp = self.metrics.dhcp();
                dhcp.refused.inc();
                match why {
                    Unplaced::UnlistedRelay(_) => dhcp.unlisted_relays.inc(),
                    Unplaced::NoSubnet(_) => dhcp.no_subnet.inc(),
                }
                if let Some(suppressed) = UNPLACED.allow() {
                    tracing::warn!(mac = %Mac(req.mac), %from, giaddr = %req.giaddr, reason = %why,
                        suppressed, "dhcp request dropped: no configured subnet is its");
                }
                None
            }
        }
    }

    /// Saves the table if it changed, and in a site spools the changes for the site's table.
    fn flush(&mut self) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        let config = self.config.load();
        if let Err(e) = self.file.commit(&self.leases.read()) {
            let n = self.metrics.dhcp().save_errors.add(1);
            tracing::error!(dir = %config.server.state_dir.display(), error = %e, errors = n,
                "leases not saved");
        }
        if let Some(shared) = &self.shared {
            let subnet_of = |ip| config.dhcp.subnet_of(ip).map(|s| s.subnet.to_string());
            if let Err(e) = shared.note(&self.leases.read(), subnet_of) {
                let n = self.metrics.dhcp().save_errors.add(1);
                tracing::error!(dir = %config.server.state_dir.display(), error = %e, errors = n,
                    "lease changes not spooled for the site");
            } else if std::mem::take(&mut self.placed_elsewhere) {
                // The member it was placed on serves it once its copy of the site's leases
                // has the lease: written now, not at the next tick.
                shared.send_soon();
            }
        }
    }

    /// In a site: the table gives from the site's share as last read, and a lease the site's
    /// table refused is withdrawn at its client's exchange (`site::shared_leases`).
    fn follow_site(&mut self, mac: Mac) {
        let Some(shared) = &self.shared else {
            return;
        };
        let share = shared.share();
        if !self.share.as_ref().is_some_and(|s| Arc::ptr_eq(s, &share)) {
            self.leases.write().set_share(share.clone());
            self.share = Some(share);
        }
        if let Some(ip) = shared.take_conflict(mac)
            && self.leases.write().withdraw(mac, ip)
        {
            tracing::warn!(%mac, %ip, "dhcp lease withdrawn: the site's table holds the \
                address for another client");
            self.changed();
        }
    }

    /// The client as policy sees it, and its plan from the link it boots from; `None`
    /// (counted, logged once, listed as unknown as it `asked`) for strangers. `on`: the subnet
    /// the request came from (`None`: the one holding the address it was sent from, a client
    /// asking port 4011 itself), whose uplink, if it declares one, placement weighs.
    fn plan<'c>(
        &mut self,
        config: &'c Config,
        req: &Request,
        from: SocketAddr,
        on: Option<&DhcpSubnet>,
        asked: Asked,
    ) -> Option<(Client, boot::Plan<'c>)> {
        let on = on.or_else(|| match from.ip() {
            IpAddr::V4(v4) => config.dhcp.subnet_of(v4),
            IpAddr::V6(v6) => config.dhcp.subnet_of(v6.to_ipv4_mapped()?),
        });
        let room = on.and_then(|s| Some((s.subnet, u64::from(s.uplink_mbps?) * 1_000_000)));
        let mac = Mac(req.mac);
        let client = Client {
            mac,
            arch: req.arch(),
            ipxe: req.is_ipxe(),
            pxe: req.is_pxe(),
            http: req.is_http_client(),
        };
        let Some(member) = config.member(mac) else {
            self.metrics.dhcp().strangers.inc();
            if self.strangers.len() < STRANGERS_REMEMBERED && self.strangers.insert(mac) {
                tracing::info!(%mac, %from, "dhcp client in no pool; not answering it (listed: bootpool client unknown, GET /api/v1/unknown)");
            }
            let relayed = req.relayed();
            let asking = Asking {
                mac,
                asked,
                vendor_class: req.vendor_class().map(<[u8]>::to_vec),
                arch: client.arch,
                relay: relayed.as_ref().map(|r| r.giaddr),
                circuit_id: relayed.as_ref().and_then(|r| r.circuit_id.clone()),
                remote_id: relayed.and_then(|r| r.remote_id),
            };
            self.unknown.note(&asking, unix_now());
            return None;
        };
        if member.discovered() {
            self.enrol
                .discovered(self.config.load(), mac, &member.pool.name);
        }
        let pxe_discover = client.pxe && req.message_type() == Some(DISCOVER);
        let kept = self.leases.read().link(mac);
        // In a site, on any live member's link unless `server.placement: owner`.
        let site = match config.server.placement {
            SitePlacement::Site => self.site.elsewhere(),
            SitePlacement::Owner => Vec::new(),
        };
        let link = self
            .placement
            .link_for(mac, member.pool, kept, pxe_discover, room, &site);
        let plan = boot::plan(config, &client, link)?;
        Some((client, plan))
    }

    /// Keeps the link `plan` names in `client`'s lease (which exists: call after an offer, ACK
    /// or observation), so the client keeps it across a restart, the architecture its
    /// firmware or iPXE said (option 93), which picks what its later requests get, and the
    /// relay it came through when its request said (`path`).
    fn keep_boot(&mut self, client: &Client, plan: &boot::Plan, path: Path) {
        let config = self.config.load();
        self.placed_elsewhere |= !config.server.links.contains(&plan.next_server);
        let mut leases = self.leases.write();
        let mut changed = leases.set_link(client.mac, plan.next_server);
        if let Some(arch) = client.arch {
            changed |= leases.set_arch(client.mac, arch);
        }
        if let Path::Said(relayed) = path {
            changed |= leases.set_relayed(client.mac, relayed);
        }
        drop(leases);
        if changed {
            self.changed();
        }
    }

    /// proxyDHCP: PXE clients only, never an address. DISCOVER on port 67 gets an OFFER with
    /// the PXE options; REQUEST (or INFORM) on port 4011 gets the ACK with the boot file.
    fn handle_proxy(
        &mut self,
        req: &Request,
        from: SocketAddr,
        local: Option<Ipv4Addr>,
        on_pxe_port: bool,
        now: u64,
    ) -> Option<(Reply, To)> {
        if !req.is_pxe() {
            return None;
        }
        let config = self.config.load();
        // Port 4011 is asked by a client at its own address; port 67 may be relayed, and
        // only a listed relay speaks for another segment.
        let on = match on_pxe_port {
            false => Some(self.subnet(&config, req, from, local)?),
            true => None,
        };
        let (client, plan) = self.plan(&config, req, from, on, Asked::Proxy)?;
        plan.boot_file.as_ref()?;
        let mac = client.mac;
        let msg = req.message_type()?;
        match (msg, on_pxe_port) {
            (DISCOVER, false) => {
                self.saw(mac, now, req.relayed());
                self.recorder.record(
                    Who::Mac(mac),
                    Kind::DhcpDiscover {
                        answered: true,
                        pxe: true,
                        ipxe: client.ipxe,
                        pool: Some(plan.member.pool.name.clone()),
                        arch: client.arch,
                    },
                );
                self.metrics.dhcp().offers.inc();
                let mut reply = self.proxy_reply(&config, req, ReplyKind::Offer, &plan);
                if client.ipxe {
                    // Without a boot file here iPXE asks on port 4011, which tells us its
                    // address: HTTP and root requests can then be tied to this boot.
                    reply.boot_file = None;
                    reply.tftp_server = None;
                    reply.siaddr = Ipv4Addr::UNSPECIFIED;
                }
                Some((reply, self.destination(req, Ipv4Addr::UNSPECIFIED)))
            }
            (REQUEST | INFORM, true) => {
                // Only a client that came through port 67 (or that a pool lists by fixed
                // address): one packet to port 4011 must not make a stranger anyone.
                let fixed = self.leases.read().reserved(mac).is_some();
                let seen = self
                    .seen
                    .get(&mac)
                    .filter(|(at, _)| now.saturating_sub(*at) <= SEEN_FOR_S);
                let path = match seen {
                    Some((_, relayed)) => Path::Said(relayed.clone()),
                    None => Path::Unsaid,
                };
                if seen.is_none() && !fixed {
                    self.metrics.dhcp().refused.inc();
                    self.metrics.dhcp().strangers.inc();
                    tracing::debug!(%mac, %from, "pxe request on 4011 from a client not seen on 67; not answering it");
                    return None;
                }
                let ip = req.ciaddr;
                if !ip.is_unspecified() {
                    let dhcp = &config.dhcp;
                    let lease = dhcp.subnet_of(ip).map_or(dhcp.lease, |s| s.lease);
                    self.leases.write().observe(mac, ip, now, lease.as_secs());
                    self.changed();
                    self.keep_boot(&client, &plan, path);
                    self.recorder.record(
                        Who::Mac(mac),
                        Kind::DhcpAck {
                            ip,
                            pxe: true,
                            ipxe: client.ipxe,
                            pool: plan.member.pool.name.clone(),
                            link: Some(plan.next_server),
                            relayed: self.leases.read().relayed(mac).cloned(),
                        },
                    );
                }
                self.metrics.dhcp().acks.inc();
                tracing::info!(%mac, %ip, pool = %plan.member.pool.name, ipxe = client.ipxe,
                    boot_file = plan.boot_file.as_ref().map(|b| b.as_str()).unwrap_or("-"),
                    "pxe ack");
                // The client has an address (ciaddr) and listens where it sent from.
                Some((
                    self.proxy_reply(&config, req, ReplyKind::Ack, &plan),
                    To::Addr(from),
                ))
            }
            _ => None,
        }
    }

    /// A proxy answer: the boot part of a reply with no address, mask, router or lease.
    fn proxy_reply(
        &self,
        config: &Config,
        req: &Request,
        kind: ReplyKind,
        plan: &boot::Plan,
    ) -> Reply {
        Reply {
            // iPXE takes a proxy answer only with siaddr and a file ("PXE options"), even
            // when the file is a URL.
            siaddr: plan.next_server,
            subnet_mask: None,
            router: None,
            dns: Vec::new(),
            lease_secs: None,
            log_server: None,
            // The site's DHCP server names the machine, if anyone does.
            host_name: None,
            ipxe_no_proxy: false,
            ..self.reply(
                config,
                req,
                kind,
                Ipv4Addr::UNSPECIFIED,
                plan,
                config.dhcp.home(),
            )
        }
    }

    /// Answers one request, which reached the server's address `local` (if the kernel said):
    /// the reply and where it goes, or `None` for silence.
    fn handle(
        &mut self,
        req: &Request,
        from: SocketAddr,
        local: Option<Ipv4Addr>,
        now: u64,
    ) -> Option<(Reply, To)> {
        let config = self.config.load();
        let on = self.subnet(&config, req, from, local)?;
        let (client, plan) = self.plan(&config, req, from, Some(on), Asked::Dhcp)?;
        let mac = client.mac;
        // Expiry walks the table: once per second is as fine-grained as lease times are.
        if self.expired_at != now {
            self.leases.write().expire(now);
            self.expired_at = now;
        }
        match req.message_type()? {
            DISCOVER => {
                let ip = self.offer(req, &client, &plan, on, now)?;
                Some(self.answered(&config, req, ReplyKind::Offer, ip, &plan, on))
            }
            REQUEST => self.request(&config, req, from, &client, &plan, on, now),
            RELEASE => {
                // A client releases by unicast from the address it gives back (RFC 2131
                // 4.4.6): anything else (the victim's MAC and address are easy to copy) is
                // not the holder's and changes nothing.
                let released = from.ip() == IpAddr::V4(req.ciaddr)
                    && self.leases.write().release(mac, req.ciaddr, now);
                if released {
                    self.changed();
                    tracing::info!(%mac, ip = %req.ciaddr, "dhcp release");
                } else {
                    self.ignored(mac, "release", from);
                }
                None
            }
            DECLINE => {
                // From 0.0.0.0 by design: only the held address, in the window after the
                // ACK that bound it (`leases::DECLINE_WINDOW_S` says why).
                if let Some(ip) = req.requested_ip()
                    && self.leases.write().decline(mac, ip, now)
                {
                    self.changed();
                    tracing::warn!(%mac, %ip, "dhcp decline: address in use by someone else");
                } else {
                    self.ignored(mac, "decline", from);
                }
                None
            }
            INFORM => {
                let unspecified = Ipv4Addr::UNSPECIFIED;
                let (mut reply, to) =
                    self.answered(&config, req, ReplyKind::Ack, unspecified, &plan, on);
                reply.lease_secs = None;
                Some((reply, to))
            }
            other => {
                tracing::debug!(%mac, msg = other, "dhcp message type ignored");
                None
            }
        }
    }

    /// A DISCOVER from subnet `on`: the address offered, held for the REQUEST; `None` (counted,
    /// logged) when the range is full or the client's fixed address is on another subnet.
    fn offer(
        &mut self,
        req: &Request,
        client: &Client,
        plan: &boot::Plan,
        on: &DhcpSubnet,
        now: u64,
    ) -> Option<Ipv4Addr> {
        let mac = client.mac;
        let offered = self
            .leases
            .write()
            .offer(mac, req.requested_ip(), on, now, OFFER_HOLD_S);
        self.recorder.record(
            Who::Mac(mac),
            Kind::DhcpDiscover {
                answered: offered.is_some(),
                pxe: client.pxe,
                ipxe: client.ipxe,
                pool: Some(plan.member.pool.name.clone()),
                arch: client.arch,
            },
        );
        let Some(ip) = offered else {
            static EXHAUSTED: super::bounds::LogLimit = super::bounds::LogLimit::new();
            self.metrics.dhcp().refused.inc();
            let fixed = self.leases.read().reserved(mac);
            if let Some(suppressed) = EXHAUSTED.allow() {
                match fixed {
                    Some(ip) => tracing::warn!(%mac, %ip, subnet = %on.subnet, suppressed,
                        "dhcp: no offer, the client's fixed address is not on the subnet it asks from"),
                    None => tracing::warn!(%mac, subnet = %on.subnet, suppressed,
                        "dhcp range exhausted; no offer"),
                }
            }
            return None;
        };
        self.changed();
        self.keep_boot(client, plan, Path::of(req));
        self.metrics.dhcp().offers.inc();
        Some(ip)
    }

    /// A REQUEST from subnet `on`: the ACK of the address it may have, a NAK, or silence when
    /// it chose another server's offer.
    // The request's config, subnet and plan as `handle` resolved them once for it.
    #[allow(clippy::too_many_arguments)]
    fn request(
        &mut self,
        config: &Config,
        req: &Request,
        from: SocketAddr,
        client: &Client,
        plan: &boot::Plan,
        on: &DhcpSubnet,
        now: u64,
    ) -> Option<(Reply, To)> {
        let mac = client.mac;
        let selecting = req.server_id();
        if selecting.is_some_and(|sid| sid != config.server.address) {
            // It chose another server's offer.
            let withdrawn = self.leases.write().withdraw_offer(mac, now);
            if withdrawn {
                self.changed();
            }
            return None;
        }
        // SELECTING/INIT-REBOOT name the address in option 50; RENEWING/REBINDING
        // use ciaddr. SELECTING takes only what we offered (RFC 2131 4.3.2); no
        // state moves a MAC's valid binding to another address.
        let ip = req.requested_ip().unwrap_or(req.ciaddr);
        let lease_s = on.lease.as_secs();
        // RENEWING (unicast from the address it names): a client that declined that
        // address takes it back, for it evidently uses it (a DECLINE in its name was
        // forged). REBINDING through a relay comes from the relay: not this.
        let renewing = selecting.is_none()
            && req.requested_ip().is_none()
            && from.ip() == IpAddr::V4(req.ciaddr);
        if renewing && self.leases.write().reclaim(mac, ip) {
            tracing::info!(%mac, %ip, "dhcp renewal of a declined address: taken back");
        }
        let granted = {
            let mut leases = self.leases.write();
            let granted = if selecting.is_some() {
                leases.ack_offer(mac, ip, on, now, lease_s)
            } else {
                leases.ack(mac, ip, on, now, lease_s)
            };
            // SELECTING and INIT-REBOOT bind afresh: the client checks the address
            // now and may DECLINE it (`leases::DECLINE_WINDOW_S`). Under the same lock.
            if granted.is_ok() && req.ciaddr.is_unspecified() {
                leases.acked_fresh(mac, ip, now);
            }
            granted
        };
        match granted {
            Ok(()) => {
                self.changed();
                self.keep_boot(client, plan, Path::of(req));
                self.metrics.dhcp().acks.inc();
                let relayed = self.leases.read().relayed(mac).cloned();
                self.recorder.record(
                    Who::Mac(mac),
                    Kind::DhcpAck {
                        ip,
                        pxe: client.pxe,
                        ipxe: client.ipxe,
                        pool: plan.member.pool.name.clone(),
                        link: Some(plan.next_server),
                        relayed,
                    },
                );
                tracing::info!(%mac, %ip, pool = %plan.member.pool.name, giaddr = %req.giaddr,
                    link = %plan.next_server, pxe = client.pxe, ipxe = client.ipxe,
                    boot_file = plan.boot_file.as_ref().map(|b| b.as_str()).unwrap_or("-"),
                    "dhcp ack");
                Some(self.answered(config, req, ReplyKind::Ack, ip, plan, on))
            }
            Err(why) => {
                self.metrics.dhcp().naks.inc();
                self.metrics.dhcp().refused.inc();
                tracing::info!(%mac, %ip, reason = %why, "dhcp nak");
                let reply = Reply {
                    message: Some(why.to_string()),
                    ..self.reply(config, req, ReplyKind::Nak, Ipv4Addr::UNSPECIFIED, plan, on)
                };
                // A NAK goes to everyone: the client may have no usable address.
                let to = if req.giaddr.is_unspecified() {
                    SocketAddrV4::new(Ipv4Addr::BROADCAST, CLIENT_PORT)
                } else {
                    SocketAddrV4::new(req.giaddr, RELAY_PORT)
                };
                Some((reply, To::Addr(to.into())))
            }
        }
    }

    /// The reply of `kind` giving `yiaddr` from subnet `on`, and where it goes.
    fn answered(
        &self,
        config: &Config,
        req: &Request,
        kind: ReplyKind,
        yiaddr: Ipv4Addr,
        plan: &boot::Plan,
        on: &DhcpSubnet,
    ) -> (Reply, To) {
        let reply = self.reply(config, req, kind, yiaddr, plan, on);
        let to = self.destination(req, reply.yiaddr);
        (reply, to)
    }

    /// A RELEASE or DECLINE that changed nothing: not the holder's (forged, most likely), or
    /// not in time. Counted as refused; logged at most as often as `LogLimit` lets.
    fn ignored(&self, mac: Mac, what: &str, from: SocketAddr) {
        static IGNORED: super::bounds::LogLimit = super::bounds::LogLimit::new();
        self.metrics.dhcp().refused.inc();
        if let Some(suppressed) = IGNORED.allow() {
            tracing::info!(%mac, %from, suppressed,
                "dhcp {what} ignored: not for the address this client holds, not from it, or too late");
        }
    }

    /// The reply to `req` from subnet `on`: its mask, router, DNS and lease time; option 82
    /// and 118 echoed as sent.
    fn reply(
        &self,
        config: &Config,
        req: &Request,
        kind: ReplyKind,
        yiaddr: Ipv4Addr,
        plan: &boot::Plan,
        on: &DhcpSubnet,
    ) -> Reply {
        let boot_file = plan.boot_file.as_ref().map(|b| b.as_str().to_string());
        let tftp = matches!(plan.boot_file, Some(boot::BootFile::Tftp(_)));
        let ipxe = req.is_ipxe();
        // Only a client that is network booting, and only with a boot file, gets the
        // boot-server answer; the initrd's own DHCP is plain.
        let class = plan.boot_file.as_ref().and_then(|_| {
            if req.is_http_client() {
                Some(ServerClass::Http)
            } else {
                req.is_pxe().then_some(ServerClass::Pxe)
            }
        });
        Reply {
            kind,
            xid: req.xid,
            flags: req.flags,
            mac: req.mac,
            ciaddr: req.ciaddr,
            yiaddr,
            // next-server names the boot server whenever a boot file is named, a URL too:
            // iPXE (`${next-server}`) and udhcpc (`$siaddr`) read the server from it.
            siaddr: if plan.boot_file.is_some() {
                plan.next_server
            } else {
                Ipv4Addr::UNSPECIFIED
            },
            giaddr: req.giaddr,
            server_id: config.server.address,
            subnet_mask: Some(on.subnet.mask()),
            router: on.router,
            dns: on.dns.clone(),
            // iPXE's syslog console sends to option 7's server on port 514 only.
            log_server: (plan.member.pool.netconsole != crate::config::Netconsole::Off
                && config.server.ports.console == 514)
                .then_some(plan.next_server),
            host_name: plan.member.name(),
            lease_secs: Some(u32::try_from(on.lease.as_secs()).unwrap_or(u32::MAX)),
            tftp_server: tftp.then(|| plan.next_server.to_string()),
            boot_file,
            class,
            // iPXE reads no discovery control; firmware PXE does.
            pxe_discovery: (class == Some(ServerClass::Pxe) && !ipxe).then_some(PXE_BOOT_FILE_ONLY),
            uuid: class.and(req.uuid().map(<[u8]>::to_vec)),
            ipxe_no_proxy: ipxe,
            message: None,
            relay_agent: req.options.get(&wire::opt::RELAY_AGENT).cloned(),
            subnet_selection: req.subnet_selection(),
        }
    }

    /// RFC 2131 4.1: via the relay if there is one; else a client that asked for broadcast
    /// gets one; else unicast: to the address it has, or to the address given (`yiaddr`) at
    /// its MAC; broadcast when it has neither.
    fn destination(&self, req: &Request, yiaddr: Ipv4Addr) -> To {
        let to = if !req.giaddr.is_unspecified() {
            SocketAddrV4::new(req.giaddr, RELAY_PORT)
        } else if req.broadcast_flag() {
            SocketAddrV4::new(Ipv4Addr::BROADCAST, CLIENT_PORT)
        } else if !req.ciaddr.is_unspecified() {
            SocketAddrV4::new(req.ciaddr, CLIENT_PORT)
        } else if !yiaddr.is_unspecified() {
            return To::Hardware(yiaddr, req.mac);
        } else {
            SocketAddrV4::new(Ipv4Addr::BROADCAST, CLIENT_PORT)
        };
        To::Addr(to.into())
    }

    /// Proxy mode: `mac` came through port 67 at `now`.
    fn saw(&mut self, mac: Mac, now: u64, relayed: Option<Relayed>) {
        if self.seen.len() >= SEEN_REMEMBERED && !self.seen.contains_key(&mac) {
            self.seen
                .retain(|_, (at, _)| now.saturating_sub(*at) <= SEEN_FOR_S);
            if self.seen.len() >= SEEN_REMEMBERED {
                let oldest = self
                    .seen
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(m, _)| *m);
                if let Some(m) = oldest {
                    self.seen.remove(&m);
                }
            }
        }
        self.seen.insert(mac, (now, relayed));
    }

    /// Carries out another service's `command`.
    fn command(&mut self, command: Command, now: u64) {
        match command {
            Command::Release { mac, reply } => {
                let released = {
                    let mut leases = self.leases.write();
                    let held = leases.get(mac).map(|l| l.ip);
                    held.filter(|&ip| leases.release(mac, ip, now))
                };
                if let Some(ip) = released {
                    tracing::info!(%mac, %ip, "lease released by the API");
                    self.changed();
                }
                let _ = reply.send(released);
            }
        }
    }

    /// Marks the table for the next save (`flush`, once per batch of packets).
    fn changed(&mut self) {
        self.dirty = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const CONFIG: &str = "\
server: { address: 10.77.0.1, http: 0.0.0.0:8080, state_dir: var/ }
dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.101, router: 10.77.0.1, lease: 1h }
images:
  demo: { dir: images/demo }
pools:
  room:
    image: demo
    clients:
      - { macs: \"52:54:00:77:00:00-52:54:00:77:00:0f\" }
      - { mac: \"52:54:00:77:00:20\", ip: 10.77.0.20 }
";

    /// The server for `config`, its lease table opened (no server link resolved on this host).
    fn open_server(config: Arc<Config>) -> Server {
        let table = open_table(&config).unwrap();
        let placement = Arc::new(Placement::new(&config, None, &[]));
        Server::open(
            Live::fixed(Config::clone(&config)),
            Recorder::discard(),
            Metrics::default(),
            table,
            placement,
        )
    }

    fn server(dir: &Path) -> Server {
        let text = CONFIG.replace("state_dir: var/", &format!("state_dir: {}", dir.display()));
        let config = Arc::new(Config::parse(&dir.join("pools.yaml"), &text).unwrap());
        open_server(config)
    }

    /// A BOOTREQUEST from MAC 52:54:00:77:00:`mac` with `options`, as it comes off the wire.
    fn raw(mac: u8, options: &[u8]) -> Vec<u8> {
        let mut raw = vec![0u8; 236];
        raw[..3].copy_from_slice(&[1, 1, 6]);
        raw[28..34].copy_from_slice(&[0x52, 0x54, 0, 0x77, 0, mac]);
        raw.extend_from_slice(&[99, 130, 83, 99]);
        raw.extend_from_slice(options);
        raw.push(255);
        raw
    }

    fn req(mac: u8, options: &[u8]) -> Request {
        wire::parse_request(&raw(mac, options)).unwrap()
    }

    #[test]
    fn in_a_site_only_the_owner_answers_in_either_mode() {
        let bucket = |mac: u8| crate::site::hash::bucket(&[0x52, 0x54, 0, 0x77, 0, mac]);
        // Two clients of the pool, one in an even bucket (a's), one in an odd one (b's).
        let of_a = (0..16).find(|&m| bucket(m) % 2 == 0).unwrap();
        let of_b = (0..16).find(|&m| bucket(m) % 2 == 1).unwrap();
        let mut pxe = vec![53, 1, DISCOVER, 60, 9];
        pxe.extend_from_slice(b"PXEClient");
        for proxy in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let mut s = match proxy {
                true => proxy_server(dir.path()),
                false => server(dir.path()),
            };
            let answered = |s: &mut Server, mac| {
                s.answer(&raw(mac, &pxe), from(), None, false, proxy)
                    .is_some()
            };
            s.site = Site::seeing("a", &["a", "b"], &[]);
            assert!(answered(&mut s, of_a), "proxy {proxy}");
            assert!(!answered(&mut s, of_b), "proxy {proxy}");
            assert_eq!(s.metrics.dhcp().others.get(), 1);
            // b's side of the same site answers b's client only.
            s.site = Site::seeing("b", &["a", "b"], &[]);
            assert!(!answered(&mut s, of_a) && answered(&mut s, of_b));
            // b silent: a answers both.
            s.site = Site::seeing("a", &["a"], &["b"]);
            assert!(answered(&mut s, of_a) && answered(&mut s, of_b));
        }
    }

    /// Proxy mode: b's PXE client, offered by b on port 67 (a saw the DISCOVER and kept
    /// silent), sends its REQUEST to b's address on port 4011 after b died and keepalived
    /// moved the address to a: a ACKs it. A MAC a never saw on port 67 still gets silence.
    #[test]
    fn in_proxy_mode_a_dead_owners_client_seen_on_67_is_answered_on_4011_by_the_survivor() {
        let bucket = |mac: u8| crate::site::hash::bucket(&[0x52, 0x54, 0, 0x77, 0, mac]);
        let mut of_b = (0..32).filter(|&m| bucket(m) % 2 == 1);
        let (seen, unseen) = (of_b.next().unwrap(), of_b.next().unwrap());
        let dir = tempfile::tempdir().unwrap();
        let mut s = proxy_server(dir.path());
        s.site = Site::seeing("a", &["a", "b"], &[]);
        let mut discover = vec![53, 1, DISCOVER, 60, 9];
        discover.extend_from_slice(b"PXEClient");
        assert!(
            s.answer(&raw(seen, &discover), from(), None, false, true)
                .is_none()
        );
        s.site = Site::seeing("a", &["a"], &["b"]);
        let mut o = vec![53, 1, REQUEST, 93, 2, 0, 7, 60, 9];
        o.extend_from_slice(b"PXEClient");
        let request = |mac: u8, ip: [u8; 4]| {
            let mut r = wire::parse_request(&raw(mac, &o)).unwrap();
            r.ciaddr = Ipv4Addr::from(ip);
            let mut bytes = raw(mac, &o);
            bytes[12..16].copy_from_slice(&ip);
            assert_eq!(wire::parse_request(&bytes).unwrap().ciaddr, r.ciaddr);
            bytes
        };
        let src: SocketAddr = "10.77.0.150:68".parse().unwrap();
        let (ack, dest) = s
            .answer(&request(seen, [10, 77, 0, 150]), src, None, true, true)
            .expect("the survivor ACKs the client it saw on 67");
        assert_eq!((ack.kind, dest), (ReplyKind::Ack, To::Addr(src)));
        assert_eq!(ack.boot_file.as_deref(), Some("snponly.efi"));
        let src: SocketAddr = "10.77.0.151:68".parse().unwrap();
        assert!(
            s.answer(&request(unseen, [10, 77, 0, 151]), src, None, true, true)
                .is_none()
        );
    }

    #[test]
    fn only_a_firmwares_requests_count_as_firmware() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = server(dir.path());
        let mut pxe = vec![53, 1, DISCOVER, 60, 9];
        pxe.extend_from_slice(b"PXEClient");
        assert!(
            s.answer(&raw(1, &pxe), from(), None, false, false)
                .is_some()
        );
        // An initrd's DHCP client says no PXE class.
        assert!(
            s.answer(&raw(2, &[53, 1, DISCOVER]), from(), None, false, false)
                .is_some()
        );
        let dhcp = s.metrics.dhcp();
        assert_eq!((dhcp.requests.get(), dhcp.firmware.get()), (2, 1));
    }

    fn from() -> SocketAddr {
        "0.0.0.0:68".parse().unwrap()
    }

    const BCAST: &str = "255.255.255.255:68";

    fn to(addr: &str) -> To {
        To::Addr(addr.parse().unwrap())
    }

    /// A reload may not fix an address another running client holds (`taken_fixed`).
    #[test]
    fn a_fixed_address_another_client_holds_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = server(dir.path());
        let now = unix_now();
        s.handle(&req(1, &[53, 1, DISCOVER]), from(), None, now)
            .unwrap();
        let o = [53, 1, REQUEST, 50, 4, 10, 77, 0, 100, 54, 4, 10, 77, 0, 1];
        let (ack, _) = s.handle(&req(1, &o), from(), None, now).unwrap();
        assert_eq!(ack.kind, ReplyKind::Ack);
        let config = |entry: &str| {
            let text = CONFIG.replace(
                "state_dir: var/",
                &format!("state_dir: {}", dir.path().display()),
            ) + &format!("      - {entry}\n");
            let file = dir.path().join("pools.yaml");
            std::fs::write(&file, &text).unwrap();
            Config::parse(&file, &text).unwrap()
        };
        let taken = config("{ mac: \"52:54:00:77:00:21\", ip: 10.77.0.100 }");
        let errors = taken_fixed(&s.leases, &taken);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "pools.room.clients");
        assert_eq!(errors[0].line, Some(8));
        assert!(
            errors[0].reason.starts_with(
                "10.77.0.100, fixed for 52:54:00:77:00:21, is leased to 52:54:00:77:00:01 now"
            ),
            "{}",
            errors[0]
        );
        // A free address: nothing taken.
        let free = config("{ mac: \"52:54:00:77:00:21\", ip: 10.77.0.30 }");
        assert_eq!(taken_fixed(&s.leases, &free), vec![]);
    }

    #[test]
    fn discover_request_ack_with_pxe_boot_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = server(dir.path());
        let mut o = vec![53, 1, DISCOVER, 93, 2, 0, 0, 60, 9];
        o.extend_from_slice(b"PXEClient");
        let (offer, dest) = s.handle(&req(1, &o), from(), None, 1000).unwrap();
        assert_eq!(offer.kind, ReplyKind::Offer);
        // No address and no broadcast flag: unicast to the address offered, at the MAC.
        let mac = [0x52, 0x54, 0, 0x77, 0, 1];
        assert_eq!(dest, To::Hardware(Ipv4Addr::new(10, 77, 0, 100), mac));
        assert_eq!(offer.yiaddr, Ipv4Addr::new(10, 77, 0, 100));
        // With the broadcast flag (EDK2's PXE): broadcast.
        let mut flagged = req(1, &o);
        flagged.flags = 0x8000;
        assert_eq!(s.handle(&flagged, from(), None, 1000).unwrap().1, to(BCAST));
        assert_eq!(offer.boot_file.as_deref(), Some("undionly.kpxe"));
        assert_eq!(offer.siaddr, Ipv4Addr::new(10, 77, 0, 1));
        // Firmware PXE: its class back and "boot the file named here", no proxy wait.
        assert_eq!(offer.class, Some(ServerClass::Pxe));
        assert_eq!(offer.pxe_discovery, Some(PXE_BOOT_FILE_ONLY));
        assert!(!offer.ipxe_no_proxy);
        let mut o = vec![53, 1, REQUEST, 50, 4, 10, 77, 0, 100, 54, 4, 10, 77, 0, 1];
        o.extend_from_slice(&[60, 9]);
        o.extend_from_slice(b"PXEClient");
        let (ack, _) = s.handle(&req(1, &o), from(), None, 1001).unwrap();
        assert_eq!(ack.kind, ReplyKind::Ack);
        assert_eq!(ack.lease_secs, Some(3600));
        // Saved once per batch, before any reply of the batch is sent.
        assert!(s.dirty);
        s.flush();
        // The file on disk says the same as the table.
        let saved = crate::service::lease_file::read(dir.path()).unwrap();
        assert_eq!(saved.leases[0].ip, Ipv4Addr::new(10, 77, 0, 100));
        assert_eq!(saved.leases[0].expires, 1001 + 3600);
        // A fresh server reads it back: a renewal from ciaddr is unicast and acked.
        let mut s = server(dir.path());
        let mut renew = req(1, &[53, 1, REQUEST]);
        renew.ciaddr = Ipv4Addr::new(10, 77, 0, 100);
        let (ack, dest) = s.handle(&renew, from(), None, 2000).unwrap();
        assert_eq!(ack.kind, ReplyKind::Ack);
        assert_eq!(ack.boot_file, None, "plain DHCP gets no boot file");
        assert_eq!((ack.class, ack.pxe_discovery, ack.uuid), (None, None, None));
        assert_eq!(dest, to("10.77.0.100:68"));
    }

    /// A server on three links: clients are spread over them, each told its link as
    /// next-server and in its script URL; a client keeps its link for the rest of its boot,
    /// across a restart too, and its next boot is chosen afresh, whether its firmware is a
    /// PXE ROM or iPXE itself (qemu's, a flashed NIC's), as the records tell a new boot.
    #[tokio::test]
    async fn clients_are_spread_over_the_links_and_keep_theirs_for_a_boot() {
        use crate::record::event::{FileKind, Outcome, Proto, Who};
        let dir = tempfile::tempdir().unwrap();
        let text = CONFIG
            .replace(
                "state_dir: var/",
                &format!("state_dir: {}", dir.path().display()),
            )
            .replace(
                "address: 10.77.0.1,",
                "address: 10.77.0.1, links: [10.77.0.2, 10.77.0.3],",
            );
        let config = Arc::new(Config::parse(&dir.path().join("pools.yaml"), &text).unwrap());
        let shutdown = crate::shutdown::Shutdown::new();
        let (recorder, records) =
            crate::record::start(&config.server, "", &shutdown, &Metrics::default())
                .await
                .unwrap();
        // A daemon (again, after a restart): the records are the store's, read back.
        let open = || {
            let placement = Arc::new(Placement::new(&config, Some(records.clone()), &[]));
            let table = open_table(&config).unwrap();
            Server::open(
                Live::fixed(Config::clone(&config)),
                recorder.clone(),
                Metrics::default(),
                table,
                placement,
            )
        };
        let mac = |m: u8| Mac([0x52, 0x54, 0, 0x77, 0, m]);
        // Until the records hold what was sent (they are written by their own task).
        let settled = |m: u8, starts: bool| {
            let records = records.clone();
            async move {
                for _ in 0..500 {
                    let now = crate::record::event::now_micros();
                    if records.read(|t| {
                        t.current(mac(m)).is_some()
                            && t.discover_starts_boot(mac(m), true, now) == starts
                    }) {
                        return;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                panic!("the records never said whether a DISCOVER of ..:{m:02x} starts a boot");
            }
        };
        let pxe_discover = |m: u8| {
            let mut o = vec![53, 1, DISCOVER, 93, 2, 0, 0, 60, 9];
            o.extend_from_slice(b"PXEClient");
            req(m, &o)
        };
        let script_url =
            |link: Ipv4Addr| format!("http://{link}:8080/boot/script/52:54:00:77:00:20.ipxe");

        let mut s = open();
        let mut told = Vec::new();
        // The range holds two addresses; the third client has a fixed one.
        for m in [1, 2, 0x20] {
            let (offer, _) = s.handle(&pxe_discover(m), from(), None, 1000).unwrap();
            told.push(offer.siaddr);
        }
        told.sort();
        assert_eq!(
            told,
            [1, 2, 3].map(|n| Ipv4Addr::new(10, 77, 0, n)),
            "one client per link"
        );
        let link3 = s.leases.read().link(mac(0x20)).unwrap();
        assert_ne!(
            link3,
            Ipv4Addr::new(10, 77, 0, 1),
            "the test needs the third client off the first link"
        );
        // iPXE's DISCOVER in the same boot: the script URL names the same link.
        let (offer, _) = s
            .handle(&ipxe_discover(0x20, DISCOVER), from(), None, 1001)
            .unwrap();
        assert_eq!(offer.boot_file.as_deref(), Some(script_url(link3).as_str()));
        assert_eq!(offer.siaddr, link3);
        s.flush();
        settled(0x20, false).await;

        // After a restart the boot goes on from its link: iPXE's next DISCOVER, and the
        // firmware's DISCOVER sent again, still name it.
        let mut s = open();
        let (offer, _) = s
            .handle(&ipxe_discover(0x20, DISCOVER), from(), None, 2000)
            .unwrap();
        assert_eq!(offer.boot_file.as_deref(), Some(script_url(link3).as_str()));
        let mut s = open();
        let (offer, _) = s.handle(&pxe_discover(0x20), from(), None, 2001).unwrap();
        assert_eq!(offer.siaddr, link3);
        s.flush();

        // The boot gets past its firmware (its script is sent); after a restart, with nobody
        // booting, its next boot is chosen afresh: the first of the empty links, not the kept
        // one. iPXE as the firmware...
        let script = |m: u8| {
            let sent = Kind::File {
                proto: Proto::Http,
                kind: FileKind::Script,
                path: "/boot/script".into(),
                bytes: 100,
                outcome: Outcome::Complete,
            };
            recorder.record(Who::Mac(mac(m)), sent)
        };
        script(0x20);
        settled(0x20, true).await;
        let mut s = open();
        let (offer, _) = s
            .handle(&ipxe_discover(0x20, DISCOVER), from(), None, 3000)
            .unwrap();
        let first = Ipv4Addr::new(10, 77, 0, 1);
        assert_eq!(offer.boot_file.as_deref(), Some(script_url(first).as_str()));
        assert_eq!(s.leases.read().link(mac(0x20)), Some(first));
        s.flush();
        // ... and a PXE ROM, for client 2 (booting since before the restart on its own link).
        let link2 = s.leases.read().link(mac(2)).unwrap();
        assert_ne!(link2, first);
        script(2);
        settled(2, true).await;
        let mut s = open();
        let (offer, _) = s.handle(&pxe_discover(2), from(), None, 3001).unwrap();
        assert_eq!(offer.siaddr, first);
        shutdown.trigger();
    }

    /// In a site, the owner of a client spreads its boots over every live member's link (the
    /// others' as their heartbeats publish them), by the boots it placed itself on each. Told
    /// the other member's link, the client gets it as next-server; a frozen view and
    /// `placement: owner` keep every boot on the owner's links.
    #[test]
    fn in_a_site_the_owner_spreads_its_boots_over_every_members_link() {
        use crate::site::live::Site;
        use crate::site::member::{Member, Seen};
        use crate::steer::placement::Published;
        let b_link = Ipv4Addr::new(10, 77, 0, 9);
        let member = Member::named;
        let b_row = |pending_bytes: u64, clients: usize| Seen {
            member: member("b"),
            heartbeat: 0,
            age_s: 0.1,
            load: vec![Published {
                address: b_link,
                own: true,
                capacity_bps: None,
                egress_bps: 0,
                pending_bytes,
                clients,
            }],
        };
        let a_row = Seen {
            member: member("a"),
            heartbeat: 0,
            age_s: 0.1,
            load: Vec::new(),
        };
        let dir = tempfile::tempdir().unwrap();
        let pxe_discover = |m: u8| {
            let mut o = vec![53, 1, DISCOVER, 93, 2, 0, 0, 60, 9];
            o.extend_from_slice(b"PXEClient");
            req(m, &o)
        };
        // Member a, seeing b's row; `more`: keys added to a's `server`.
        let serve = |more: &str, b: Seen| {
            let text = CONFIG
                .replace(
                    "state_dir: var/",
                    &format!("state_dir: {}{more}", dir.path().display()),
                )
                .replace("10.77.0.100-10.77.0.101", "10.77.0.100-10.77.0.115");
            let config = Config::parse(&dir.path().join("pools.yaml"), &text).unwrap();
            let mut s = open_server(Arc::new(config));
            let site = Site::alone(member("a"));
            site.observe(vec![a_row.clone(), b]);
            s.site = site;
            s
        };
        let on = |s: &mut Server, macs: std::ops::Range<u8>| {
            macs.map(|m| {
                let (offer, _) = s.handle(&pxe_discover(m), from(), None, 1000).unwrap();
                offer.siaddr
            })
            .collect::<Vec<_>>()
        };
        let a_link = Ipv4Addr::new(10, 77, 0, 1);

        // Both idle: the boots alternate, a's link first (a tie goes to the first).
        let mut s = serve(", placement: site", b_row(0, 0));
        let told = on(&mut s, 0..8);
        assert_eq!(told.iter().filter(|&&l| l == b_link).count(), 4, "{told:?}");
        assert_eq!(told[0], a_link);
        assert_eq!(told[1], b_link);
        // The client keeps the member's link for its boot, in its lease too, with the
        // script's URL on it.
        let one = Mac([0x52, 0x54, 0, 0x77, 0, 1]);
        assert_eq!(s.leases.read().link(one), Some(b_link));
        let (again, _) = s.handle(&pxe_discover(1), from(), None, 1001).unwrap();
        assert_eq!(again.siaddr, b_link);
        let (ipxe, _) = s
            .handle(&ipxe_discover(1, DISCOVER), from(), None, 1002)
            .unwrap();
        assert!(
            ipxe.boot_file
                .as_deref()
                .is_some_and(|f| f.starts_with("http://10.77.0.9:8080/")),
            "{:?}",
            ipxe.boot_file
        );

        // What b published of its boots is not read: whatever b placed, a spreads its own
        // evenly (every owner does, so the sum is even without the heartbeats' lag).
        let mut s = serve(", placement: site", b_row(u64::MAX / 4, 40));
        let told = on(&mut s, 0..6);
        assert_eq!(told.iter().filter(|&&l| l == b_link).count(), 3, "{told:?}");

        // The database is down: the frozen view places on a's own links only.
        let mut s = serve(", placement: site", b_row(0, 0));
        s.site.observe_unreachable();
        assert!(on(&mut s, 0..6).iter().all(|&l| l == a_link));

        // `server.placement: owner` (the default): never on b.
        let mut s = serve("", b_row(0, 0));
        assert!(on(&mut s, 0..6).iter().all(|&l| l == a_link));
        let mut s = serve(", placement: owner", b_row(0, 0));
        assert!(on(&mut s, 0..6).iter().all(|&l| l == a_link));
    }

    /// UEFI HTTP boot (option 60 `HTTPClient:Arch:00016`, arch 16) gets a URL and its class
    /// back, whether its MAC is in the range or has a fixed address: a reservation never turns
    /// the answer back into a TFTP name. A Secure Boot pool's HTTP boot client too: only its
    /// PXE firmware gets the signed chain, which needs TFTP.
    #[test]
    fn http_boot_gets_a_url_with_or_without_a_reservation() {
        for (mac, ip) in [(1, [10, 77, 0, 100]), (0x20, [10, 77, 0, 20])] {
            let dir = tempfile::tempdir().unwrap();
            let mut s = server(dir.path());
            let class = b"HTTPClient:Arch:00016:UNDI:003001";
            let mut o = vec![53, 1, DISCOVER, 93, 2, 0, 16, 60, class.len() as u8];
            o.extend_from_slice(class);
            let (offer, _) = s.handle(&req(mac, &o), from(), None, 1000).unwrap();
            assert_eq!(offer.yiaddr, Ipv4Addr::from(ip));
            assert_eq!(
                offer.boot_file.as_deref(),
                Some("http://10.77.0.1:8080/boot/loaders/snponly.efi"),
                "MAC ..:{mac:02x}"
            );
            assert_eq!(offer.class, Some(ServerClass::Http));
            assert_eq!(offer.siaddr, Ipv4Addr::new(10, 77, 0, 1));
            o[2] = REQUEST;
            o.extend_from_slice(&[50, 4]);
            o.extend_from_slice(&ip);
            o.extend_from_slice(&[54, 4, 10, 77, 0, 1]);
            let (ack, _) = s.handle(&req(mac, &o), from(), None, 1001).unwrap();
            assert_eq!(ack.kind, ReplyKind::Ack);
            assert_eq!(ack.boot_file, offer.boot_file);
            assert_eq!(ack.class, Some(ServerClass::Http));
        }
    }

    /// ARM64 UEFI PXE (option 93 = 11) is handed Debian's network GRUB, and its lease keeps
    /// the architecture through the initrd's DHCP (no option 93) and a restart: GRUB's config,
    /// asked for by address, is chosen by it.
    #[test]
    fn arm64_firmware_gets_grub_and_its_lease_keeps_the_architecture() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = server(dir.path());
        let class = b"PXEClient:Arch:00011:UNDI:003000";
        let mut o = vec![53, 1, DISCOVER, 93, 2, 0, 11, 60, class.len() as u8];
        o.extend_from_slice(class);
        let (offer, _) = s.handle(&req(3, &o), from(), None, 1000).unwrap();
        assert_eq!(offer.boot_file.as_deref(), Some("grubaa64.efi"));
        assert_eq!(offer.class, Some(ServerClass::Pxe));
        o[2] = REQUEST;
        o.extend_from_slice(&[50, 4, 10, 77, 0, 100, 54, 4, 10, 77, 0, 1]);
        let (ack, _) = s.handle(&req(3, &o), from(), None, 1001).unwrap();
        assert_eq!(ack.boot_file.as_deref(), Some("grubaa64.efi"));
        let mac = Mac([0x52, 0x54, 0, 0x77, 0, 3]);
        assert_eq!(s.leases.read().arch(mac), Some(11));
        // The initrd's DHCP says no architecture and changes none.
        let initrd = [53, 1, REQUEST, 50, 4, 10, 77, 0, 100, 54, 4, 10, 77, 0, 1];
        let (ack, _) = s.handle(&req(3, &initrd), from(), None, 1010).unwrap();
        assert_eq!(ack.kind, ReplyKind::Ack);
        assert_eq!(ack.boot_file, None);
        assert_eq!(s.leases.read().arch(mac), Some(11));
        s.flush();
        let s = server(dir.path());
        assert_eq!(s.leases.read().arch(mac), Some(11));
    }

    /// iPXE's DISCOVER: option 60 PXEClient:..., 77 iPXE, 97 a UUID.
    fn ipxe_discover(mac: u8, msg: u8) -> Request {
        let mut o = vec![53, 1, msg, 93, 2, 0, 0, 60, 32];
        o.extend_from_slice(b"PXEClient:Arch:00000:UNDI:002001");
        o.extend_from_slice(&[77, 4]);
        o.extend_from_slice(b"iPXE");
        o.extend_from_slice(&[97, 17, 0]);
        o.extend_from_slice(&[mac; 16]);
        req(mac, &o)
    }

    #[test]
    fn ipxe_is_told_not_to_wait_for_proxy_offers() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = server(dir.path());
        let (offer, _) = s
            .handle(&ipxe_discover(1, DISCOVER), from(), None, 5)
            .unwrap();
        assert_eq!(offer.class, Some(ServerClass::Pxe));
        assert!(offer.ipxe_no_proxy);
        assert_eq!(offer.pxe_discovery, None);
        let uuid = offer.uuid.expect("option 97 echoed");
        assert_eq!(&uuid[1..], &[1u8; 16]);
        assert!(offer.boot_file.unwrap().ends_with(".ipxe"));
        // A URL names the boot server too: next-server says which.
        assert_eq!(offer.siaddr, Ipv4Addr::new(10, 77, 0, 1));
    }

    fn proxy_server(dir: &Path) -> Server {
        let text = CONFIG
            // Proxy mode gives no addresses: no range or router of its own.
            .replace(
                "range: 10.77.0.100-10.77.0.101, router: 10.77.0.1,",
                "mode: proxy,",
            )
            .replace("state_dir: var/", &format!("state_dir: {}", dir.display()));
        let config = Arc::new(Config::parse(&dir.join("pools.yaml"), &text).unwrap());
        assert_eq!(config.dhcp.mode, DhcpMode::Proxy);
        open_server(config)
    }

    #[test]
    fn proxy_answers_pxe_only_and_never_gives_an_address() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = proxy_server(dir.path());
        let mut o = vec![53, 1, DISCOVER, 93, 2, 0, 7, 60, 9];
        o.extend_from_slice(b"PXEClient");
        o.extend_from_slice(&[97, 17, 0]);
        o.extend_from_slice(&[7; 16]);
        let fw = req(1, &o);
        let (offer, dest) = s.handle_proxy(&fw, from(), None, false, 1000).unwrap();
        assert_eq!(offer.kind, ReplyKind::Offer);
        // No address to unicast to (yiaddr is the other server's to give): broadcast.
        assert_eq!(dest, to(BCAST));
        assert_eq!(offer.yiaddr, Ipv4Addr::UNSPECIFIED);
        assert_eq!(
            (offer.subnet_mask, offer.router, offer.lease_secs),
            (None, None, None)
        );
        assert_eq!(offer.boot_file.as_deref(), Some("snponly.efi"));
        assert_eq!(offer.siaddr, Ipv4Addr::new(10, 77, 0, 1));
        assert_eq!(offer.class, Some(ServerClass::Pxe));
        assert_eq!(offer.pxe_discovery, Some(PXE_BOOT_FILE_ONLY));
        assert!(offer.uuid.is_some() && !offer.ipxe_no_proxy);
        // Plain DHCP, strangers, a DISCOVER on 4011 and a REQUEST on 67: silence.
        assert!(
            s.handle_proxy(&req(1, &[53, 1, DISCOVER]), from(), None, false, 1000)
                .is_none()
        );
        let mut stranger = fw.clone();
        stranger.mac[5] = 0x99;
        assert!(
            s.handle_proxy(&stranger, from(), None, false, 1000)
                .is_none()
        );
        // The stranger is listed as unknown, asking by proxy, with its firmware's word.
        let unknown = s.unknown.list();
        assert_eq!(unknown.len(), 1);
        assert_eq!(unknown[0].mac, Mac(stranger.mac));
        assert_eq!(unknown[0].asked, vec![Asked::Proxy]);
        assert_eq!(
            (unknown[0].arch, unknown[0].vendor_class.as_deref()),
            (Some(7), Some("PXEClient"))
        );
        assert!(s.handle_proxy(&fw, from(), None, true, 1000).is_none());
        let mut o = vec![53, 1, REQUEST, 93, 2, 0, 7, 60, 9];
        o.extend_from_slice(b"PXEClient");
        let mut request = req(1, &o);
        assert!(
            s.handle_proxy(&request, from(), None, false, 1000)
                .is_none()
        );
        // The REQUEST to 4011 from the address the other server gave: ACK to where it came from.
        request.ciaddr = Ipv4Addr::new(10, 77, 0, 150);
        let src: SocketAddr = "10.77.0.150:68".parse().unwrap();
        let (ack, dest) = s.handle_proxy(&request, src, None, true, 1000).unwrap();
        assert_eq!(ack.kind, ReplyKind::Ack);
        assert_eq!(dest, To::Addr(src));
        assert_eq!(ack.yiaddr, Ipv4Addr::UNSPECIFIED);
        assert_eq!(ack.ciaddr, request.ciaddr);
        assert_eq!(ack.boot_file.as_deref(), Some("snponly.efi"));
        assert_eq!(ack.lease_secs, None);
        // iPXE gets no boot file on 67, so it asks on 4011 and we learn its address.
        let (offer, _) = s
            .handle_proxy(&ipxe_discover(2, DISCOVER), from(), None, false, 1000)
            .unwrap();
        assert_eq!(
            (offer.boot_file, offer.siaddr),
            (None, Ipv4Addr::UNSPECIFIED)
        );
        assert!(
            !offer.ipxe_no_proxy,
            "a proxy must not tell iPXE to ignore it"
        );
        let mut r = ipxe_discover(2, REQUEST);
        r.ciaddr = Ipv4Addr::new(10, 77, 0, 151);
        let (ack, _) = s.handle_proxy(&r, from(), None, true, 1000).unwrap();
        assert!(ack.boot_file.unwrap().ends_with("52:54:00:77:00:02.ipxe"));
        assert_eq!(ack.siaddr, Ipv4Addr::new(10, 77, 0, 1));
        // No address was given, but the bindings reported on 4011 are what NFS, NBD and the
        // API now know these clients by, and they are saved for a restart.
        let identity = s.leases.clone();
        assert_eq!(
            identity.read().holder(Ipv4Addr::new(10, 77, 0, 151), 1001),
            Some(Mac(r.mac))
        );
        assert_eq!(
            identity.read().holder(Ipv4Addr::new(10, 77, 0, 150), 1001),
            Some(Mac(request.mac))
        );
        s.flush();
        let saved = crate::service::lease_file::read(dir.path()).unwrap();
        assert_eq!(saved.leases.len(), 2);
        // A REQUEST on 4011 from a MAC never seen on 67 (a forger naming any address), or
        // seen too long ago, gets silence and binds nothing.
        let mut forged = ipxe_discover(3, REQUEST);
        forged.ciaddr = Ipv4Addr::new(10, 77, 0, 151);
        assert!(s.handle_proxy(&forged, from(), None, true, 1000).is_none());
        assert!(
            s.handle_proxy(&r, from(), None, true, 1000 + SEEN_FOR_S + 1)
                .is_none()
        );
        assert_eq!(
            identity.read().holder(Ipv4Addr::new(10, 77, 0, 151), 1001),
            Some(Mac(r.mac))
        );
    }

    /// Proxy mode through a relay: the PXE answer goes to the relay's port 67 with option 82
    /// echoed, and the binding the client then reports on port 4011 keeps the relay and port.
    #[test]
    fn a_proxy_answers_through_the_relay_and_keeps_its_port_with_the_binding() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = proxy_server(dir.path());
        let agent = [1, 4, b'p', b'o', b'r', b't'];
        let mut o = vec![53, 1, DISCOVER, 93, 2, 0, 0, 60, 9];
        o.extend_from_slice(b"PXEClient");
        o.extend_from_slice(&[82, agent.len() as u8]);
        o.extend_from_slice(&agent);
        let mut fw = req(3, &o);
        fw.giaddr = Ipv4Addr::new(10, 77, 0, 254);
        let relay: SocketAddr = "10.77.0.254:67".parse().unwrap();
        let (offer, dest) = s.handle_proxy(&fw, relay, None, false, 1000).unwrap();
        assert_eq!(dest, to("10.77.0.254:67"));
        assert_eq!(offer.relay_agent.as_deref(), Some(&agent[..]));
        let mut request = req(3, &[53, 1, REQUEST, 60, 9]);
        request.options.insert(60, b"PXEClient".to_vec());
        request.ciaddr = Ipv4Addr::new(10, 77, 0, 160);
        let src: SocketAddr = "10.77.0.160:68".parse().unwrap();
        let (ack, _) = s.handle_proxy(&request, src, None, true, 1001).unwrap();
        assert_eq!(ack.kind, ReplyKind::Ack);
        let kept = s.leases.read().relayed(Mac(fw.mac)).cloned().unwrap();
        assert_eq!(kept.giaddr, fw.giaddr);
        assert_eq!(kept.circuit_id.unwrap().to_string(), "port");
    }

    #[test]
    fn naks_silences_and_releases() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = server(dir.path());
        // Asking for another client's reservation: NAK, broadcast.
        let (nak, dest) = s
            .handle(
                &req(2, &[53, 1, REQUEST, 50, 4, 10, 77, 0, 20]),
                from(),
                None,
                10,
            )
            .unwrap();
        assert_eq!(nak.kind, ReplyKind::Nak);
        assert_eq!(dest, to(BCAST));
        // The reservation holder gets it.
        let (offer, _) = s
            .handle(&req(0x20, &[53, 1, DISCOVER]), from(), None, 10)
            .unwrap();
        assert_eq!(offer.yiaddr, Ipv4Addr::new(10, 77, 0, 20));
        // A REQUEST naming another server withdraws our offer, silently.
        let (offer, _) = s
            .handle(&req(3, &[53, 1, DISCOVER]), from(), None, 10)
            .unwrap();
        let other = [53, 1, REQUEST, 54, 4, 10, 77, 0, 2, 50, 4];
        let mut o = other.to_vec();
        o.extend_from_slice(&offer.yiaddr.octets());
        assert!(s.handle(&req(3, &o), from(), None, 11).is_none());
        // Never-used addresses go first; with the range otherwise taken, the withdrawn one
        // is free again.
        let (other, _) = s
            .handle(&req(4, &[53, 1, DISCOVER]), from(), None, 12)
            .unwrap();
        assert_ne!(other.yiaddr, offer.yiaddr);
        let (again, _) = s
            .handle(&req(6, &[53, 1, DISCOVER]), from(), None, 12)
            .unwrap();
        assert_eq!(
            again.yiaddr, offer.yiaddr,
            "the withdrawn offer is free again"
        );
        assert!(
            s.handle(&req(7, &[53, 1, DISCOVER]), from(), None, 12)
                .is_none(),
            "range full"
        );
        // Strangers and unknown message types get nothing.
        assert!(
            s.handle(&req(0x99, &[53, 1, DISCOVER]), from(), None, 12)
                .is_none()
        );
        assert!(s.handle(&req(1, &[53, 1, 42]), from(), None, 12).is_none());
        assert_eq!(s.metrics.dhcp().strangers.get(), 1);
        // A relay on a segment of no configured subnet: silence, counted.
        let mut relayed = req(4, &[53, 1, DISCOVER]);
        relayed.giaddr = Ipv4Addr::new(10, 77, 9, 1);
        assert!(s.handle(&relayed, from(), None, 13).is_none());
        assert_eq!(s.metrics.dhcp().no_subnet.get(), 1);
    }

    /// Two subnets: a DISCOVER relayed from the second gets an address, mask, router and
    /// lease time of that subnet, answered to the relay's server port with option 82 echoed,
    /// and its lease keeps the relay and the switch port; a request on the server's own
    /// segment gets its own; a REQUEST for an address of the other subnet is refused (NAK),
    /// and with `dhcp.relays` an unlisted relay gets silence, counted.
    #[test]
    fn a_relayed_request_is_answered_from_its_relays_subnet() {
        let dir = tempfile::tempdir().unwrap();
        let text = CONFIG
            .replace("state_dir: var/", &format!("state_dir: {}", dir.path().display()))
            .replace(
                "dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.101, router: 10.77.0.1, lease: 1h }",
                "dhcp:\n  lease: 1h\n  subnets:\n    \
                 - { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.101, router: 10.77.0.1 }\n    \
                 - { subnet: 10.20.0.0/24, range: 10.20.0.50-10.20.0.60, router: 10.20.0.1, dns: [10.20.0.53], lease: 2h }",
            );
        let config = Arc::new(Config::parse(&dir.path().join("pools.yaml"), &text).unwrap());
        let mut s = open_server(config);
        let agent = [
            1, 7, b'G', b'i', b'1', b'/', b'0', b'/', b'7', 2, 3, b's', b'w', b'1',
        ];
        let mut o = vec![53, 1, DISCOVER, 82, agent.len() as u8];
        o.extend_from_slice(&agent);
        let mut relayed = req(1, &o);
        relayed.giaddr = Ipv4Addr::new(10, 20, 0, 1);
        let relay: SocketAddr = "10.77.0.254:67".parse().unwrap();
        let (offer, dest) = s.handle(&relayed, relay, None, 100).unwrap();
        assert_eq!(dest, to("10.20.0.1:67"));
        assert_eq!(offer.yiaddr, Ipv4Addr::new(10, 20, 0, 50));
        assert_eq!(offer.router, Some(Ipv4Addr::new(10, 20, 0, 1)));
        assert_eq!(offer.dns, [Ipv4Addr::new(10, 20, 0, 53)]);
        assert_eq!(offer.lease_secs, Some(7200));
        assert_eq!(offer.giaddr, relayed.giaddr);
        assert_eq!(offer.relay_agent.as_deref(), Some(&agent[..]));
        let kept = s.leases.read().relayed(Mac(relayed.mac)).cloned().unwrap();
        assert_eq!(kept.giaddr, relayed.giaddr);
        assert_eq!(kept.circuit_id.unwrap().to_string(), "Gi1/0/7");
        assert_eq!(kept.remote_id.unwrap().to_string(), "sw1");
        // The server's own segment, as IP_PKTINFO says it arrived there.
        let local = Some(Ipv4Addr::new(10, 77, 0, 1));
        let (offer, _) = s
            .handle(&req(2, &[53, 1, DISCOVER]), from(), local, 100)
            .unwrap();
        assert_eq!(offer.yiaddr, Ipv4Addr::new(10, 77, 0, 100));
        assert_eq!(offer.router, Some(Ipv4Addr::new(10, 77, 0, 1)));
        assert_eq!(offer.relay_agent, None);
        // A fixed address is given only on its own subnet: none for its holder relayed here.
        let mut fixed = req(0x20, &[53, 1, DISCOVER]);
        fixed.giaddr = Ipv4Addr::new(10, 20, 0, 1);
        assert!(s.handle(&fixed, relay, None, 100).is_none());
        // Client 2 now relayed from the other segment, asking for its old address: NAK.
        let mut moved = req(2, &[53, 1, REQUEST, 50, 4, 10, 77, 0, 100]);
        moved.giaddr = Ipv4Addr::new(10, 20, 0, 1);
        let (nak, dest) = s.handle(&moved, relay, None, 101).unwrap();
        assert_eq!(nak.kind, ReplyKind::Nak);
        assert_eq!(dest, to("10.20.0.1:67"));
        // Listed relays only.
        let listed = text.replace("  lease: 1h\n", "  lease: 1h\n  relays: [10.77.0.253]\n");
        let config = Arc::new(Config::parse(&dir.path().join("pools.yaml"), &listed).unwrap());
        let mut s = open_server(config);
        assert!(s.handle(&relayed, relay, None, 200).is_none());
        assert_eq!(s.metrics.dhcp().unlisted_relays.get(), 1);
        assert_eq!(s.metrics.dhcp().refused.get(), 1);
        let (offer, _) = s
            .handle(&relayed, "10.77.0.253:67".parse().unwrap(), None, 200)
            .unwrap();
        assert_eq!(offer.router, Some(Ipv4Addr::new(10, 20, 0, 1)));
    }

    /// A RELEASE changes the lease only from the address it gives back; a DECLINE only in
    /// the window after the ACK that bound the address, never after a renewal; a client
    /// renewing the address a forged DECLINE quarantined gets its ACK.
    #[test]
    fn forged_releases_and_declines_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = server(dir.path());
        let (offer, _) = s
            .handle(&req(1, &[53, 1, DISCOVER]), from(), None, 1000)
            .unwrap();
        let ip = offer.yiaddr;
        let mut o = vec![53, 1, REQUEST, 54, 4, 10, 77, 0, 1, 50, 4];
        o.extend_from_slice(&ip.octets());
        let (ack, _) = s.handle(&req(1, &o), from(), None, 1000).unwrap();
        assert_eq!(ack.kind, ReplyKind::Ack);
        let holder = |s: &Server, now| s.leases.read().holder(ip, now);
        let mac = Some(Mac([0x52, 0x54, 0, 0x77, 0, 1]));
        let at = |a: Ipv4Addr| SocketAddr::from((a, 68));
        // RELEASE naming the address, from elsewhere (another host, 0.0.0.0): nothing.
        let mut release = req(1, &[53, 1, RELEASE]);
        release.ciaddr = ip;
        for src in [from(), at(Ipv4Addr::new(10, 77, 0, 150))] {
            assert!(s.handle(&release, src, None, 1001).is_none());
            assert_eq!(holder(&s, 1002), mac, "release from {src}");
        }
        // A DECLINE of another address, or past the window: nothing.
        let mut decline = vec![53, 1, DECLINE, 50, 4];
        decline.extend_from_slice(&ip.octets());
        let late = 1000 + crate::boot::leases::DECLINE_WINDOW_S + 1;
        assert!(s.handle(&req(1, &decline), from(), None, late).is_none());
        assert!(
            s.handle(
                &req(1, &[53, 1, DECLINE, 50, 4, 10, 77, 0, 150]),
                from(),
                None,
                1001
            )
            .is_none()
        );
        assert_eq!(holder(&s, late), mac);
        // A renewal's ACK opens no window.
        let mut renew = req(1, &[53, 1, REQUEST]);
        renew.ciaddr = ip;
        let (ack, _) = s.handle(&renew, at(ip), None, 2000).unwrap();
        assert_eq!(ack.kind, ReplyKind::Ack);
        assert!(s.handle(&req(1, &decline), from(), None, 2001).is_none());
        assert_eq!(holder(&s, 2002), mac);
        assert_eq!(s.metrics.dhcp().refused.get(), 5);
        // INIT-REBOOT (option 50, no server identifier) binds afresh: a DECLINE right after
        // counts (a forger's, say)...
        let mut init_reboot = vec![53, 1, REQUEST, 50, 4];
        init_reboot.extend_from_slice(&ip.octets());
        let (ack, _) = s.handle(&req(1, &init_reboot), from(), None, 3000).unwrap();
        assert_eq!(ack.kind, ReplyKind::Ack);
        assert!(s.handle(&req(1, &decline), from(), None, 3001).is_none());
        assert_eq!(holder(&s, 3002), None);
        // ...and the client, still on its address, renews it from there: ACK, not NAK.
        let (ack, _) = s.handle(&renew, at(ip), None, 3100).unwrap();
        assert_eq!((ack.kind, ack.yiaddr), (ReplyKind::Ack, ip));
        assert_eq!(holder(&s, 3101), mac);
        // The holder's own RELEASE, from its address, frees it.
        assert!(s.handle(&release, at(ip), None, 3200).is_none());
        assert_eq!(holder(&s, 3201), None);
    }
}

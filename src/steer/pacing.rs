//! Fair shares on the server's links, and clients moved between them: the I/O side of
//! `fair_share` and `rebalance` (docs/links.md). Every TCP connection accepted on a link whose
//! capacity is known is registered here (`Links::adopt`); one thread reads each connection's
//! TCP_INFO every `ROUND` (bytes sent, bytes waiting), asks `fair_share::plan` for each link's
//! caps and sets those that changed with SO_MAX_PACING_RATE. Linux TCP paces a socket with
//! that option set by itself (since 4.13; no fq qdisc needed). When every link has a routing
//! table of its own (`routes`), it then asks `rebalance::moves` which clients a full link
//! hands to one with room, and marks their connections for the new link (SO_MARK). A room
//! behind an uplink (`dhcp.subnets[].uplink`) bounds its clients' shares on every link
//! (`rooms::plan`); a client's room is the subnet holding its address, the one it was
//! answered from.
//!
//! The pacer holds its own descriptor of each socket (a dup), so a descriptor number that a
//! closed connection gave up and another socket took is never paced by mistake. The
//! registration (`Paced`) lives beside the connection's stream and lets go when it is dropped.
//! Each paced link's figures (`metrics::PacedLink`) are listed in the daemon's `Metrics` when
//! the pacer starts, and `/metrics` serves them.

use super::choice::LinkSpec;
use super::fair_share::{self, Carries, History, Seen};
use super::firmware::{Firmware, FirmwareWatch};
use super::rebalance::{self, ClientLoad, LinkLoad};
use super::rooms::{self, Uplink};
use crate::config::Subnet;
use crate::log_limit::LogLimit;
use crate::metrics::{Metrics, PacedLink, PacedRoom};
use crate::proto::tcp_info::{self, TcpInfo};
use crate::shutdown::Shutdown;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often caps are recomputed: what a change in demand costs before the caps follow.
const ROUND: Duration = Duration::from_millis(50);

/// A cap is set again only when it moves by more than 1/`STEADY` (3%): fewer syscalls, and
/// TCP is not disturbed for nothing.
const STEADY: u64 = 32;

/// A client with no connection for this long is forgotten by the weights: it next arrives
/// as the room's latest (a new boot) with nothing received, not as the first it once was.
const FORGET_ARRIVAL: Duration = Duration::from_secs(60);

/// The pacer of every link whose capacity is known.
pub struct Pacer {
    links: Vec<Link>,
    rooms: Vec<Room>,
    conns: Mutex<Conns>,
    /// Every link has its mark: clients may move between them.
    movable: bool,
    /// Where firmware waits: each link's headroom.
    firmware: Arc<Firmware>,
}

struct Link {
    address: Ipv4Addr,
    device: String,
    capacity_bps: u64,
    /// The mark that sends a socket by this link (`routes`).
    mark: Option<u32>,
    /// Its figures, as `/metrics` shows them.
    stats: Arc<PacedLink>,
}

/// A room behind an uplink.
struct Room {
    subnet: Subnet,
    capacity_bps: u64,
    /// Its figures, as `/metrics` shows them.
    stats: Arc<PacedRoom>,
}

struct Conns {
    next: u64,
    all: BTreeMap<u64, Conn>,
    /// Per link: how far the caps are raised above the budget's shares (`fair_share::trim`).
    boosts: Vec<f64>,
    /// Per room, the same for its uplink.
    room_boosts: Vec<f64>,
    /// Per client, what the pacer remembers of it (`Known`); a client gone `FORGET_ARRIVAL`
    /// arrives anew (its next boot).
    clients: HashMap<Ipv4Addr, Known>,
    arrived: u64,
}

/// What the pacer remembers of a client.
struct Known {
    /// Its order of arrival and the bytes it received (the weights' `History`).
    history: History,
    /// When it last had a connection.
    seen: Instant,
    /// The cap the latest round planned for it (for its last connection that moved bytes,
    /// when it has several): where its next connection starts (`Pacer::register`).
    cap: Option<u64>,
}

struct Conn {
    fd: OwnedFd,
    client: Ipv4Addr,
    carries: Carries,
    /// The link its replies leave by (an index into `Pacer::links`).
    link: usize,
    /// `tcpi_bytes_sent` at the last round, or at registration (none when it could not be
    /// read): what the connection sent before its first round counts in that round. Until
    /// session 38 it started at none, and a connection started at a large cap sent bytes before
    /// its first round that no link, room or client counted.
    sent: Option<u64>,
    /// The cap set on the socket, bytes/s.
    cap: Option<u64>,
    /// When it was last moved to another link.
    moved: Option<Instant>,
}

/// A connection's registration with the pacer; dropping it ends the pacing.
pub struct Paced(Option<(Arc<Pacer>, u64)>);

impl Paced {
    pub fn none() -> Paced {
        Paced(None)
    }
}

impl Drop for Paced {
    fn drop(&mut self) {
        if let Some((pacer, id)) = self.0.take() {
            // Closes the pacer's descriptor; the connection's own may already be closed.
            if let Some(c) = pacer.lock().all.remove(&id) {
                pacer.links[c.link].stats.connections.sub(1);
            }
        }
    }
}

impl Pacer {
    /// A pacer for the links of `specs` whose capacity is known, its thread running until
    /// `shutdown`; `None` when there is none. `rooms` are the subnets behind an uplink, each
    /// with the uplink's capacity in bits/s.
    /// With `movable`, the links' sockets are sent by their marks (`routes::mark` of their
    /// place in `specs`), and clients move between the links.
    pub fn start(
        specs: &[LinkSpec],
        rooms: &[(Subnet, u64)],
        movable: bool,
        metrics: &Metrics,
        shutdown: &Shutdown,
    ) -> anyhow::Result<Option<Arc<Pacer>>> {
        let mut pacer = Pacer::new(specs, movable, metrics);
        if pacer.links.is_empty() {
            return Ok(None);
        }
        pacer.add_rooms(rooms, metrics);
        let paced: Vec<(&str, u64)> = pacer
            .links
            .iter()
            .map(|l| (l.device.as_str(), l.capacity_bps))
            .collect();
        let uplinks: Vec<String> = rooms.iter().map(|(s, bps)| format!("{s}: {bps}")).collect();
        tracing::info!(links = ?paced, uplinks = ?uplinks, headroom = fair_share::HEADROOM,
            quiet_headroom = fair_share::QUIET_HEADROOM, moves = pacer.movable,
            "fair shares: clients on a full link or uplink are paced to weighted shares, boot files first");
        let pacer = Arc::new(pacer);
        let (done, ended) = tokio::sync::oneshot::channel::<()>();
        let (p, stop) = (pacer.clone(), shutdown.clone());
        std::thread::Builder::new()
            .name("pacer".into())
            .spawn(move || {
                p.run(&stop);
                let _ = done.send(());
            })?;
        // The daemon's stop waits for the thread, as for every task.
        shutdown.spawn(async move {
            let _ = ended.await;
        });
        Ok(Some(pacer))
    }

    /// The links of `specs` whose capacity is known, with no thread; their figures are listed
    /// in `metrics`.
    fn new(specs: &[LinkSpec], movable: bool, metrics: &Metrics) -> Pacer {
        let links: Vec<Link> = specs
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let capacity_bps = s.capacity_bps.filter(|c| *c > 0)?;
                let stats = metrics.paced_link(&s.device);
                // Until the first round has looked, firmware may be waiting.
                let budget = fair_share::budget(capacity_bps, fair_share::HEADROOM);
                stats.budget.set(budget as u64);
                Some(Link {
                    address: s.address,
                    device: s.device.clone(),
                    capacity_bps,
                    mark: movable.then(|| super::routes::mark(i)),
                    stats,
                })
            })
            .collect();
        let addresses: Vec<Ipv4Addr> = links.iter().map(|l| l.address).collect();
        Pacer {
            movable: movable && links.len() > 1,
            conns: Mutex::new(Conns {
                next: 0,
                all: BTreeMap::new(),
                boosts: vec![1.0; links.len()],
                room_boosts: Vec::new(),
                clients: HashMap::new(),
                arrived: 0,
            }),
            firmware: Arc::new(Firmware::new(&addresses, Instant::now())),
            links,
            rooms: Vec::new(),
        }
    }

    /// The rooms behind uplinks, each with its capacity in bits/s; their figures are listed
    /// in `metrics`.
    fn add_rooms(&mut self, rooms: &[(Subnet, u64)], metrics: &Metrics) {
        for &(subnet, capacity_bps) in rooms {
            let stats = metrics.paced_room(&subnet.to_string());
            stats.capacity.set(capacity_bps / 8);
            let budget = fair_share::budget(capacity_bps, fair_share::HEADROOM);
            stats.budget.set(budget as u64);
            self.rooms.push(Room {
                subnet,
                capacity_bps,
                stats,
            });
        }
        let n = self.rooms.len();
        self.lock().room_boosts = vec![1.0; n];
    }

    /// The services' handle on where firmware waits (`firmware`).
    pub fn firmware(&self) -> FirmwareWatch {
        FirmwareWatch::of(self.firmware.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Conns> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the connection on `fd` from `client`, carrying `carries`, if `local` is a
    /// paced link's address.
    pub fn register(
        self: &Arc<Self>,
        fd: BorrowedFd<'_>,
        local: Ipv4Addr,
        client: Ipv4Addr,
        carries: Carries,
    ) -> Paced {
        let Some(at) = self.links.iter().position(|l| l.address == local) else {
            return Paced::none();
        };
        let link = &self.links[at];
        let fd = match fd.try_clone_to_owned() {
            Ok(fd) => fd,
            Err(e) => {
                static FAILED: LogLimit = LogLimit::new();
                if let Some(suppressed) = FAILED.allow() {
                    tracing::warn!(error = %e, suppressed, "a connection is not paced");
                }
                return Paced::none();
            }
        };
        let mut conns = self.lock();
        let id = conns.next;
        conns.next += 1;
        let Conns {
            clients, arrived, ..
        } = &mut *conns;
        let last = match clients.entry(client) {
            Entry::Occupied(known) => known.get().cap,
            Entry::Vacant(first) => {
                let history = History {
                    arrival: *arrived,
                    received: 0,
                };
                first.insert(Known {
                    history,
                    seen: Instant::now(),
                    cap: None,
                });
                *arrived += 1;
                None
            }
        };
        // On a link being paced, a new connection starts at once at its client's last cap,
        // else at a client's share as it weighs arriving behind the link's active clients
        // (`fair_share::first_cap`): unpaced, it could fill the link's queue for a round before
        // the pacer sees it, and far below its share it would stall (TCP spaces each burst at
        // the rate in force when it left).
        let share = link.stats.share.get();
        let active = link.stats.clients.get();
        let start = (share > 0).then(|| fair_share::first_cap(share, last, carries, active));
        let cap = start.filter(|c| set_cap(fd.as_fd(), Some(*c)).is_ok());
        let sent = read_info(fd.as_fd()).map(|info| info.sent);
        conns.all.insert(
            id,
            Conn {
                fd,
                client,
                carries,
                link: at,
                sent,
                cap,
                moved: None,
            },
        );
        link.stats.connections.inc();
        Paced(Some((self.clone(), id)))
    }

    fn run(&self, shutdown: &Shutdown) {
        let mut last = Instant::now();
        while !shutdown.is_triggered() {
            std::thread::sleep(ROUND);
            let now = Instant::now();
            let seconds = now.duration_since(last).as_secs_f64();
            last = now;
            self.round(seconds, now);
        }
    }

    /// Reads every connection, plans each link, and sets the caps that changed on connections
    /// that moved bytes (an idle one keeps its cap until it sends: a booted room's idle NFS
    /// connections cost no syscall when pacing starts or stops); then moves clients between
    /// links. The lock is held throughout, so no registration ends (closing its descriptor)
    /// meanwhile.
    fn round(&self, seconds: f64, now: Instant) {
        let mut conns = self.lock();
        // Each link's own: only where firmware waits is part of it kept free.
        let headrooms = self.firmware.headrooms(now);
        // An uplink carries every link's firmware packets to its room.
        let uplink_headroom = headrooms
            .iter()
            .copied()
            .fold(fair_share::QUIET_HEADROOM, f64::min);
        let mut seen: Vec<Vec<Seen>> = vec![Vec::new(); self.links.len()];
        let mut ids: Vec<Vec<u64>> = vec![Vec::new(); self.links.len()];
        let Conns { all, clients, .. } = &mut *conns;
        for (id, c) in all.iter_mut() {
            // A socket that cannot say (not connected any more) sits this round out.
            let info = read_info(c.fd.as_fd());
            let sent = match (&info, c.sent) {
                (Some(info), Some(before)) => info.sent.saturating_sub(before),
                _ => 0,
            };
            if let Some(known) = clients.get_mut(&c.client) {
                known.history.received += sent;
                known.seen = now;
            }
            let Some(info) = info else {
                continue;
            };
            c.sent = Some(info.sent);
            seen[c.link].push(Seen {
                client: c.client,
                carries: c.carries,
                sent,
                unsent: info.unsent.into(),
                cap: c.cap,
            });
            ids[c.link].push(*id);
        }
        clients.retain(|_, known| now.duration_since(known.seen) < FORGET_ARRIVAL);
        let (plans, rooms) = {
            // A client forgotten meanwhile weighs as the latest, with nothing received.
            let unknown = History {
                arrival: u64::MAX,
                ..History::default()
            };
            let history =
                |c: Ipv4Addr| conns.clients.get(&c).map_or(unknown, |known| known.history);
            let on: Vec<fair_share::Link> = self
                .links
                .iter()
                .zip(&conns.boosts)
                .zip(&headrooms)
                .map(|((link, boost), headroom)| fair_share::Link {
                    capacity_bps: Some(link.capacity_bps),
                    headroom: *headroom,
                    boost: *boost,
                    history: &history,
                })
                .collect();
            let uplinks: Vec<Uplink> = self
                .rooms
                .iter()
                .zip(&conns.room_boosts)
                .map(|(room, boost)| Uplink {
                    capacity_bps: room.capacity_bps,
                    boost: *boost,
                })
                .collect();
            let room_of = |c: Ipv4Addr| self.rooms.iter().position(|r| r.subnet.contains(c));
            let weights = fair_share::WEIGHTS;
            rooms::plan(
                &on,
                seconds,
                &seen,
                &uplinks,
                &room_of,
                uplink_headroom,
                weights,
            )
        };
        for (r, (room, plan)) in self.rooms.iter().zip(&rooms).enumerate() {
            let budget = fair_share::budget(room.capacity_bps, uplink_headroom);
            let boost = conns.room_boosts[r];
            conns.room_boosts[r] = match plan.share {
                Some(_) => fair_share::trim(boost, plan.carried as f64, budget, plan.wanting),
                None => 1.0,
            };
            let stats = &room.stats;
            stats.budget.set(budget as u64);
            stats.clients.set(plan.clients as u64);
            stats.carried.set(plan.carried);
            stats.share.set(plan.share.unwrap_or(0));
            stats.sent.add((plan.carried as f64 * seconds) as u64);
            if plan.share.is_some() {
                stats.full_rounds.inc();
            }
        }
        for (i, (link, plan)) in self.links.iter().zip(&plans).enumerate() {
            let budget = fair_share::budget(link.capacity_bps, headrooms[i]);
            conns.boosts[i] = match plan.share {
                Some(_) => {
                    fair_share::trim(conns.boosts[i], plan.carried as f64, budget, plan.wanting)
                }
                None => 1.0,
            };
            let set = link.apply(&mut conns, &ids[i], &plan.caps, &seen[i]);
            link.stats.budget.set(budget as u64);
            record(&link.stats, plan, set);
        }
        if self.movable {
            self.rebalance(&mut conns, &plans, &headrooms, now);
        }
    }

    /// Moves the clients `rebalance::moves` names: every connection of the client on the link
    /// it leaves is marked for the other, and starts there at a client's share.
    fn rebalance(
        &self,
        conns: &mut Conns,
        plans: &[fair_share::Plan],
        headrooms: &[f64],
        now: Instant,
    ) {
        let recently: std::collections::BTreeSet<Ipv4Addr> = conns
            .all
            .values()
            .filter(|c| {
                c.moved
                    .is_some_and(|t| now.duration_since(t) < rebalance::COOLDOWN)
            })
            .map(|c| c.client)
            .collect();
        let loads: Vec<LinkLoad> = self
            .links
            .iter()
            .zip(plans)
            .zip(headrooms)
            .map(|((link, plan), headroom)| LinkLoad {
                budget: fair_share::budget(link.capacity_bps, *headroom),
                carried: plan.carried as f64,
                clients: plan
                    .active
                    .iter()
                    .map(|&(client, demand)| ClientLoad {
                        client,
                        demand,
                        movable: !recently.contains(&client),
                    })
                    .collect(),
            })
            .collect();
        for m in rebalance::moves(&loads) {
            let (to, from) = (&self.links[m.to], &self.links[m.from]);
            let Some(mark) = to.mark else {
                continue;
            };
            for c in conns.all.values_mut() {
                if c.client != m.client || c.link != m.from {
                    continue;
                }
                // It keeps its cap, its share where it was, until the other link's next round:
                // a cap far below that would stall it (`fair_share::first_cap`). Until session 38
                // it took the other link's unit share, a few Mbit/s on a link of weighted
                // clients.
                let cap = c.cap.or(Some(m.share.max(fair_share::MIN_CAP)));
                if let Err(e) = socket2::SockRef::from(&c.fd).set_mark(mark) {
                    static FAILED: LogLimit = LogLimit::new();
                    if let Some(suppressed) = FAILED.allow() {
                        tracing::warn!(device = %to.device, error = %e, suppressed,
                            "cannot move a connection to another link");
                    }
                    continue;
                }
                if set_cap(c.fd.as_fd(), cap).is_ok() {
                    c.cap = cap;
                }
                c.link = m.to;
                c.moved = Some(now);
                from.stats.connections.sub(1);
                to.stats.connections.inc();
            }
            from.stats.moved_away.inc();
            tracing::debug!(client = %m.client, from = %from.device, to = %to.device,
                share = m.share, "client moved to a link with room");
        }
    }
}

impl Link {
    /// Sets the caps of a link's connections `ids` (as seen in the round, `was`) that changed,
    /// and returns how many were set.
    fn apply(&self, conns: &mut Conns, ids: &[u64], caps: &[Option<u64>], was: &[Seen]) -> u64 {
        let mut set = 0;
        let Conns { all, clients, .. } = conns;
        for ((id, cap), was) in ids.iter().zip(caps).zip(was) {
            let Some(c) = all.get_mut(id) else {
                continue;
            };
            let idle = was.sent == 0 && was.unsent == 0;
            if idle {
                continue;
            }
            trace_round(&self.device, c, was, *cap);
            // What a next connection of the client starts at.
            if let Some(known) = clients.get_mut(&c.client) {
                known.cap = *cap;
            }
            if !moved(c.cap, *cap) {
                continue;
            }
            match set_cap(c.fd.as_fd(), *cap) {
                Ok(()) => {
                    c.cap = *cap;
                    set += 1;
                }
                Err(e) => {
                    static FAILED: LogLimit = LogLimit::new();
                    if let Some(suppressed) = FAILED.allow() {
                        tracing::warn!(device = %self.device, error = %e, suppressed,
                            "cannot set a connection's pacing rate");
                    }
                }
            }
        }
        set
    }
}

/// The pacer's trace, one line per connection that moved or had bytes waiting, each round:
/// `BOOTPOOL_LOG=info,bootpool::pacer=trace` (docs/links.md). A connection that sent nothing while
/// bytes waited adds what its TCP_INFO says of why (`tcp_info::Stall`).
fn trace_round(device: &str, c: &Conn, was: &Seen, cap: Option<u64>) {
    if !tracing::enabled!(target: "bootpool::pacer", tracing::Level::TRACE) {
        return;
    }
    let stall = (was.sent == 0 && was.unsent > 0)
        .then(|| {
            let mut buf = [0u8; tcp_info::STALL_SIZE];
            let len = crate::sys::sock::tcp_info(c.fd.as_fd(), &mut buf).ok()?;
            tcp_info::decode_stall(&buf[..len])
        })
        .flatten();
    tracing::trace!(target: "bootpool::pacer", link = device, client = %c.client,
        carries = ?c.carries, sent = was.sent, unsent = was.unsent, cap_was = ?was.cap,
        cap = ?cap, stall = ?stall, "pacer round");
}

/// A round's figures for one link.
fn record(stats: &PacedLink, plan: &fair_share::Plan, caps_set: u64) {
    stats.clients.set(plan.active.len() as u64);
    stats.wanting.set(plan.wanting as u64);
    stats.share.set(plan.share.unwrap_or(0));
    stats.carried.set(plan.carried);
    if plan.share.is_some() {
        stats.rounds.inc();
    }
    stats.caps_set.add(caps_set);
}

/// Whether a cap differs enough from the one in force to be set.
fn moved(now: Option<u64>, next: Option<u64>) -> bool {
    match (now, next) {
        (Some(a), Some(b)) => a.abs_diff(b) * STEADY > a.max(b),
        (a, b) => a != b,
    }
}

/// getsockopt(TCP_INFO), decoded.
pub fn read_info(fd: BorrowedFd<'_>) -> Option<TcpInfo> {
    let mut buf = [0u8; tcp_info::SIZE];
    let len = crate::sys::sock::tcp_info(fd, &mut buf).ok()?;
    tcp_info::decode(&buf[..len])
}

/// SO_MAX_PACING_RATE: `cap` bytes/s, or no cap.
pub fn set_cap(fd: BorrowedFd<'_>, cap: Option<u64>) -> std::io::Result<()> {
    // An unsigned long (32 bits on 32-bit targets); all ones is "no cap".
    #[allow(clippy::unnecessary_fallible_conversions)]
    let rate = cap
        .and_then(|c| libc::c_ulong::try_from(c).ok())
        .unwrap_or(libc::c_ulong::MAX);
    crate::sys::sock::set_max_pacing_rate(fd, rate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A connected pair over loopback: (the server's end, the client's end).
    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        (server, client)
    }

    /// What TCP_INFO reads is what the kernel did: the cap set, the bytes sent.
    #[test]
    fn a_cap_set_is_the_cap_the_kernel_reports() {
        let (mut server, mut client) = pair();
        let before = read_info(server.as_fd()).expect("TCP_INFO");
        assert_eq!(before.max_pacing_rate, u64::MAX);
        set_cap(server.as_fd(), Some(1_250_000)).unwrap();
        assert_eq!(
            read_info(server.as_fd()).unwrap().max_pacing_rate,
            1_250_000
        );
        let data = vec![7u8; 100_000];
        server.write_all(&data).unwrap();
        let mut got = vec![0u8; data.len()];
        client.read_exact(&mut got).unwrap();
        let after = read_info(server.as_fd()).unwrap();
        assert!(after.sent >= before.sent + data.len() as u64, "{after:?}");
        set_cap(server.as_fd(), None).unwrap();
        assert_eq!(read_info(server.as_fd()).unwrap().max_pacing_rate, u64::MAX);
    }

    #[test]
    fn caps_move_only_past_the_steady_band() {
        assert!(!moved(None, None));
        assert!(moved(None, Some(1000)));
        assert!(moved(Some(1000), None));
        assert!(!moved(Some(1000), Some(1020)));
        assert!(moved(Some(1000), Some(1100)));
        assert!(moved(Some(1100), Some(1000)));
    }

    /// Registered connections are counted and forgotten as their registrations drop; a
    /// connection to an address that is no paced link's is not registered. (No pacer
    /// thread: the test plays its part.)
    #[test]
    fn registrations_end_with_their_connections() {
        let spec = LinkSpec {
            address: Ipv4Addr::LOCALHOST,
            device: "lo".into(),
            capacity_bps: Some(100_000_000),
        };
        let metrics = Metrics::default();
        let pacer = Arc::new(Pacer::new(&[spec], false, &metrics));
        let (a, _a) = pair();
        let (b, _b) = pair();
        let client = Ipv4Addr::new(127, 0, 0, 1);
        let pa = pacer.register(a.as_fd(), Ipv4Addr::LOCALHOST, client, Carries::BlockRoot);
        let pb = pacer.register(b.as_fd(), Ipv4Addr::LOCALHOST, client, Carries::BlockRoot);
        let other = pacer.register(
            b.as_fd(),
            Ipv4Addr::new(10, 0, 0, 1),
            client,
            Carries::BlockRoot,
        );
        assert!(other.0.is_none());
        assert_eq!(pacer.links[0].stats.connections.get(), 2);
        // Until its first round, the budget keeps the headroom for firmware.
        assert_eq!(metrics.paced()[0].budget.get(), 11_250_000);
        drop(pa);
        assert_eq!(pacer.links[0].stats.connections.get(), 1);
        drop(pb);
        assert_eq!(pacer.links[0].stats.connections.get(), 0);
        // On a link being paced by thirty active clients, a connection starts at a client's
        // share (its client has had no cap yet: a root's weight)...
        assert_eq!(read_info(a.as_fd()).unwrap().max_pacing_rate, u64::MAX);
        pacer.links[0].stats.share.set(500_000);
        pacer.links[0].stats.clients.set(30);
        let pa = pacer.register(a.as_fd(), Ipv4Addr::LOCALHOST, client, Carries::BlockRoot);
        assert_eq!(read_info(a.as_fd()).unwrap().max_pacing_rate, 500_000);
        drop(pa);
        // ...a new client's boot files at a boot file's behind the front of the queue, or
        // inside it on a link of five, as the fifth's (2 x 1.5^4)...
        let other = Ipv4Addr::new(127, 0, 0, 2);
        let pa = pacer.register(a.as_fd(), Ipv4Addr::LOCALHOST, other, Carries::BootFiles);
        assert_eq!(read_info(a.as_fd()).unwrap().max_pacing_rate, 1_000_000);
        drop(pa);
        pacer.links[0].stats.clients.set(5);
        let third = Ipv4Addr::new(127, 0, 0, 3);
        let pa = pacer.register(a.as_fd(), Ipv4Addr::LOCALHOST, third, Carries::BootFiles);
        assert_eq!(read_info(a.as_fd()).unwrap().max_pacing_rate, 5_062_500);
        drop(pa);
        // ...and once a round has capped a client, its next connection starts at that cap.
        pacer.lock().clients.get_mut(&client).unwrap().cap = Some(3_000_000);
        let _pa = pacer.register(a.as_fd(), Ipv4Addr::LOCALHOST, client, Carries::BootFiles);
        assert_eq!(read_info(a.as_fd()).unwrap().max_pacing_rate, 3_000_000);
    }

    /// A link with no capacity is not paced: no pacer at all, no thread.
    #[tokio::test]
    async fn no_pacer_without_a_known_capacity() {
        let spec = LinkSpec {
            address: Ipv4Addr::LOCALHOST,
            device: "lo".into(),
            capacity_bps: None,
        };
        let shutdown = Shutdown::new();
        assert!(
            Pacer::start(&[spec], &[], false, &Metrics::default(), &shutdown)
                .unwrap()
                .is_none()
        );
        shutdown.stop_and_wait().await;
    }
}

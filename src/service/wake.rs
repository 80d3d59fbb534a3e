//! Wake-on-LAN's I/O: a wake's magic packets (`proto::wol`) sent as UDP datagrams to port 9
//! of each client's subnet broadcast address (the subnet its lease is in, else the server's
//! own; a relayed subnet's directed broadcast goes through its router), paced by
//! `boot::wake::pace` and each recorded (`Kind::Woken`), so the boots they start carry the
//! wake's id; the wakes kept in `state_dir/wakes.json`; and the pools' schedules
//! (`pools.NAME.wake`), looked at every 20 s. The socket is `app`'s, bound for it.

use crate::boot::wake::{self, Pace};
use crate::config::{Config, Live, Mac, Subnet};
use crate::record::{Kind, Recorder, Records, Who};
use crate::service::identity::Identity;
use crate::shutdown::Shutdown;
use crate::steer::links::Links;
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The file the wakes are kept in, in `state_dir`.
pub const FILE: &str = "wakes.json";
/// The most machines one wake sends to (a pool's MAC ranges may be wide).
pub const MAX_CLIENTS: usize = 4096;

/// Whom a wake wakes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Whom {
    Client(Mac),
    /// The clients whose lease is in this subnet (one of `dhcp.subnets`).
    Room(Subnet),
    /// Every MAC the pool lists.
    Pool(String),
}

impl std::fmt::Display for Whom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Whom::Client(mac) => write!(f, "client {mac}"),
            Whom::Room(s) => write!(f, "room {s}"),
            Whom::Pool(p) => write!(f, "pool {p}"),
        }
    }
}

/// One wake, as kept and answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WakeRecord {
    /// Its id, which the boots it starts carry (`BootView::wake`).
    pub wake: u64,
    /// Unix seconds it started.
    pub at: i64,
    /// `client MAC`, `room SUBNET`, `pool NAME`.
    pub scope: String,
    /// `admin` (the API) or `schedule`.
    pub by: String,
    pub clients: usize,
    pub per_second: u32,
    /// The bound the links set (`boot::wake::pace`), when known.
    pub links_allow: Option<u32>,
}

/// What sends wakes: the socket `app` bound, and what a wake reads.
pub struct Waker {
    socket: Arc<tokio::net::UdpSocket>,
    config: Live,
    identity: Identity,
    recorder: Recorder,
    records: Arc<Records>,
    links: Arc<Links>,
    path: PathBuf,
    wakes: Mutex<Vec<WakeRecord>>,
    shutdown: Shutdown,
}

impl Waker {
    /// A waker sending from `socket` (bound by `app`, broadcast allowed); reads
    /// `state_dir/wakes.json` for the ids already given.
    pub fn new(
        socket: std::net::UdpSocket,
        shared: &crate::service::Shared,
    ) -> anyhow::Result<Waker> {
        use anyhow::Context;
        socket.set_nonblocking(true)?;
        let path = shared.config.load().server.state_dir.join(FILE);
        let wakes = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .with_context(|| format!("{}: not a wakes file", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        Ok(Waker {
            socket: Arc::new(tokio::net::UdpSocket::from_std(socket)?),
            config: shared.config.clone(),
            identity: shared.identity.clone(),
            recorder: shared.recorder.clone(),
            records: shared.records.clone(),
            links: shared.links.clone(),
            path,
            wakes: Mutex::new(wakes),
            shutdown: shared.shutdown.clone(),
        })
    }

    /// The wakes so far, oldest first.
    pub fn wakes(&self) -> Vec<WakeRecord> {
        self.wakes.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Starts a wake of `whom` at `asked` a second (under the links' bound): its packets go out
    /// paced, in the background; the answer is its record. `Err`: whom names nothing.
    pub fn wake(&self, whom: &Whom, asked: Option<u32>, by: &str) -> Result<WakeRecord, String> {
        let config = self.config.load();
        let targets = self.targets(&config, whom)?;
        let pool = match whom {
            Whom::Client(mac) => config.member(*mac).map(|m| m.pool.name.clone()),
            Whom::Pool(p) => Some(p.clone()),
            Whom::Room(_) => None,
        };
        let pace = self.pace(asked, pool.as_deref());
        let record = {
            let mut wakes = self.wakes.lock().unwrap_or_else(|e| e.into_inner());
            let record = WakeRecord {
                wake: wakes.last().map_or(1, |w| w.wake + 1),
                at: crate::record::event::now_micros() / 1_000_000,
                scope: whom.to_string(),
                by: by.to_string(),
                clients: targets.len(),
                per_second: pace.per_second,
                links_allow: pace.links_allow,
            };
            wakes.push(record.clone());
            let text = serde_json::to_vec_pretty(&*wakes).unwrap_or_default();
            if let Err(e) = super::lease_file::write_atomically(&self.path, &text) {
                tracing::error!(error = %e, file = %self.path.display(), "wakes: not written");
            }
            record
        };
        tracing::info!(wake = record.wake, scope = %record.scope, clients = record.clients,
            per_second = pace.per_second, links_allow = ?pace.links_allow, by, "wake started");
        let (socket, recorder, id) = (self.socket.clone(), self.recorder.clone(), record.wake);
        let stop = self.shutdown.clone();
        self.shutdown.spawn(async move {
            let start = tokio::time::Instant::now();
            for ((mac, to), after) in targets
                .iter()
                .zip(wake::offsets(targets.len(), pace.per_second))
            {
                tokio::select! {
                    _ = tokio::time::sleep_until(start + after) => {}
                    _ = stop.wait() => return,
                }
                let packet = crate::proto::wol::magic_packet(mac.0);
                match socket.send_to(&packet, to).await {
                    Ok(_) => recorder.record(Who::Mac(*mac), Kind::Woken { wake: id }),
                    Err(e) => tracing::warn!(%mac, %to, error = %e, "magic packet not sent"),
                }
            }
            tracing::info!(wake = id, "wake sent");
        });
        Ok(record)
    }

    /// Each client a wake wakes and where its packet goes: the broadcast address of the
    /// subnet its lease is in, else of the server's own subnet.
    fn targets(&self, config: &Config, whom: &Whom) -> Result<Vec<(Mac, SocketAddrV4)>, String> {
        let leases = self.identity.read();
        let home = config.dhcp.home().subnet;
        let to = |mac: Mac| {
            let subnet = leases
                .get(mac)
                .and_then(|l| config.dhcp.subnet_of(l.ip))
                .map_or(home, |s| s.subnet);
            SocketAddrV4::new(broadcast(subnet), crate::proto::wol::PORT)
        };
        let macs: Vec<Mac> = match whom {
            Whom::Client(mac) => {
                if config.member(*mac).is_none() {
                    return Err(format!("client {mac}: no pool lists it"));
                }
                vec![*mac]
            }
            Whom::Room(subnet) => {
                if !config.dhcp.subnets.iter().any(|s| s.subnet == *subnet) {
                    return Err(format!("room {subnet}: not one of dhcp.subnets"));
                }
                leases
                    .iter()
                    .filter(|(mac, l)| subnet.contains(l.ip) && config.member(**mac).is_some())
                    .map(|(mac, _)| *mac)
                    .collect()
            }
            Whom::Pool(name) => {
                let pool = config
                    .pools
                    .get(name)
                    .ok_or_else(|| format!("pool {name}: no such pool"))?;
                pool.clients
                    .iter()
                    .flat_map(|e| (0..e.macs.len()).filter_map(|n| e.macs.nth(n)))
                    .take(MAX_CLIENTS + 1)
                    .collect()
            }
        };
        if macs.len() > MAX_CLIENTS {
            return Err(format!(
                "{whom}: more than {MAX_CLIENTS} machines; wake it by room or client"
            ));
        }
        Ok(macs.into_iter().map(|m| (m, to(m))).collect())
    }

    /// The pace of a wake: `asked` (else `boot::wake::DEFAULT_PER_SECOND`) under the links'
    /// bound: `server.links`' capacity over the median bytes of `pool`'s booted boots.
    fn pace(&self, asked: Option<u32>, pool: Option<&str>) -> Pace {
        let specs = self.links.specs();
        let capacity = specs
            .iter()
            .map(|l| l.capacity_bps.map(|b| b / 8))
            .sum::<Option<u64>>();
        let boot_bytes = pool.and_then(|pool| {
            wake::median(self.records.read(|t| {
                t.boots()
                    .iter()
                    .filter(|b| b.pool.as_deref() == Some(pool))
                    .filter(|b| b.result == crate::record::BootResult::Booted)
                    .map(|b| b.bytes.values().sum())
                    .collect()
            }))
        });
        wake::pace(
            asked.unwrap_or(wake::DEFAULT_PER_SECOND),
            capacity.filter(|_| !specs.is_empty()),
            boot_bytes,
        )
    }

    /// Wakes each pool whose schedule falls due, looking every 20 s, until the daemon stops.
    pub async fn run_schedules(self: Arc<Self>) {
        let mut last = local_now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_secs(20)) => {}
                _ = self.shutdown.wait() => return,
            }
            let now = local_now();
            let config = self.config.load();
            for (name, pool) in &config.pools {
                if let Some(s) = &pool.wake
                    && wake::due(s, last, now)
                    && let Err(e) = self.wake(&Whom::Pool(name.clone()), s.per_second, "schedule")
                {
                    tracing::warn!(pool = %name, error = %e, "scheduled wake not started");
                }
            }
            last = now;
        }
    }
}

/// A subnet's broadcast address; a /31 or /32 has none, so the limited broadcast.
fn broadcast(subnet: Subnet) -> Ipv4Addr {
    match subnet.prefix {
        31 | 32 => Ipv4Addr::BROADCAST,
        _ => subnet.broadcast(),
    }
}

/// The local time as Unix seconds shifted by the local offset (`sys::clock`).
fn local_now() -> i64 {
    let now = crate::record::event::now_micros() / 1_000_000;
    now + crate::sys::time::utc_offset(now)
}

//! Which server link each client boots from (`server.links`: several NICs on the clients'
//! network, each with its own address, no bond). The DHCP service asks `link_for` when it
//! answers; the answer goes into the client's lease (`boot::leases`, so the rest of the boot
//! keeps it across a restart), into next-server, the script URL and the root argument (`boot::plan`,
//! `boot::script`), and into the record (the ACK event's `link`).
//!
//! The choice is `choice::choose`; this module keeps what it is made from: the clients
//! booting on each link with the bytes each is still expected to fetch (its pool's recent
//! boots, from the records, less what it fetched so far), each link's interface and capacity
//! (`links::resolve`, at start) and its measured egress (the egress sampler), and each
//! booting client's room when it is behind an uplink (`dhcp.subnets[].uplink`), so that a
//! room's clients are spread as its uplink allows (`choice::choose_in_room`).

use super::choice::{self, LinkSpec, Load};
use crate::config::{Config, Mac, Pool, Subnet};
use crate::record::Records;
use crate::record::egress::Egress;
use crate::record::timeline::BootResult;
use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A client counts on its link this long after its boot started, unless its record says it
/// booted or failed sooner.
pub const BOOTING_FOR: Duration = Duration::from_secs(600);
/// How many of a pool's latest boots its expected bytes are the mean of.
const LEARN_FROM: usize = 8;
/// How long a pool's expected bytes are reused before the records are read again.
const EXPECTED_FOR: Duration = Duration::from_secs(30);
/// Before a pool has booted once, its clients are expected to fetch this many times its boot
/// files (kernel and initrd): the demo image's root reads 2 to 4 times them.
const FIRST_GUESS_FACTOR: u64 = 4;

/// One of the server's links as the kernel had it at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct LinkState {
    /// The interface holding the address (`None`: no interface does).
    device: Option<String>,
    capacity_bps: Option<u64>,
}

pub struct Placement {
    /// `server.links`, the primary address first.
    addresses: Vec<Ipv4Addr>,
    state: Vec<LinkState>,
    /// What clients fetched so far and what a pool's boots fetch (`None` in unit tests:
    /// nothing learned, nothing fetched).
    records: Option<Arc<Records>>,
    egress: OnceLock<Arc<Egress>>,
    booting: Mutex<HashMap<Mac, Booting>>,
    expected: Mutex<HashMap<String, (u64, Instant)>>,
}

struct Booting {
    link: usize,
    pool: Arc<Pool>,
    since: Instant,
    /// Its room, when that is behind an uplink.
    room: Option<Subnet>,
}

impl Placement {
    /// `resolved`: the links an interface holds (`links::resolve`); the others are
    /// not given out while one of those is.
    pub fn new(config: &Config, records: Option<Arc<Records>>, resolved: &[LinkSpec]) -> Placement {
        let state = config
            .server
            .links
            .iter()
            .map(|a| {
                resolved
                    .iter()
                    .find(|r| r.address == *a)
                    .map_or_else(LinkState::default, |r| LinkState {
                        device: Some(r.device.clone()),
                        capacity_bps: r.capacity_bps,
                    })
            })
            .collect();
        Placement {
            addresses: config.server.links.clone(),
            state,
            records,
            egress: OnceLock::new(),
            booting: Mutex::default(),
            expected: Mutex::default(),
        }
    }

    /// Where measured egress is read from.
    pub fn set_egress(&self, egress: Arc<Egress>) {
        let _ = self.egress.set(egress);
    }

    pub fn addresses(&self) -> &[Ipv4Addr] {
        &self.addresses
    }

    /// Which of the server's link addresses each interface holds (for the egress sampler,
    /// which samples those interfaces and keeps the addresses with each sample). Empty for a
    /// server with one link: it samples `server.interfaces` as ever.
    pub fn held(&self) -> BTreeMap<String, Vec<Ipv4Addr>> {
        let mut out: BTreeMap<String, Vec<Ipv4Addr>> = BTreeMap::new();
        if self.addresses.len() < 2 {
            return out;
        }
        for (a, s) in self.addresses.iter().zip(&self.state) {
            if let Some(dev) = &s.device {
                out.entry(dev.clone()).or_default().push(*a);
            }
        }
        out
    }

    /// The link `mac` (of `pool`) boots from. A boot's link is chosen at the DISCOVER that
    /// starts it and kept for the whole boot: while the client counts as booting here, else
    /// (after a restart) as `kept`, the link its lease names, as long as that is still one of
    /// the server's usable links. Each new boot is chosen afresh, so a room rebalances when
    /// links are added or lost, or one of them is busy. `pxe_discover`: the request is a
    /// DISCOVER with the PXE class, a firmware's or iPXE's; whether it starts a boot is the
    /// records' answer (`Timelines::discover_starts_boot`), since iPXE is a PXE firmware's
    /// second stage in one room and the firmware itself in another (qemu's, a flashed NIC's).
    /// `room`: the subnet the request came from and its uplink's capacity in bits/s, when it
    /// declares one.
    pub fn link_for(
        &self,
        mac: Mac,
        pool: &Arc<Pool>,
        kept: Option<Ipv4Addr>,
        pxe_discover: bool,
        room: Option<(Subnet, u64)>,
    ) -> Ipv4Addr {
        if self.addresses.len() == 1 {
            return self.addresses[0];
        }
        let mut booting = self.booting.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let current = |booting: &HashMap<Mac, Booting>| {
            booting
                .get(&mac)
                .map(|b| b.link)
                .filter(|&i| self.usable(i))
        };
        let i = if pxe_discover && self.starts_boot(mac) {
            // `loads` forgets boots that have ended, so a client still counted here is in the
            // same boot (its firmware sent DISCOVER again) and keeps its link.
            let loads = self.loads(&mut booting, now, room);
            match current(&booting) {
                Some(i) => i,
                None => {
                    let i = self.choose(&loads, pool, room);
                    tracing::debug!(%mac, link = %self.addresses[i], "link chosen");
                    i
                }
            }
        } else {
            let kept = kept
                .and_then(|a| self.addresses.iter().position(|x| *x == a))
                .filter(|&i| self.usable(i));
            match (current(&booting), kept) {
                (Some(i), _) => return self.addresses[i],
                // Booting since before a restart: counted on its link from now.
                (None, Some(i)) => i,
                (None, None) => {
                    let loads = self.loads(&mut booting, now, room);
                    self.choose(&loads, pool, room)
                }
            }
        };
        booting.insert(
            mac,
            Booting {
                link: i,
                pool: pool.clone(),
                since: now,
                room: room.map(|(subnet, _)| subnet),
            },
        );
        self.addresses[i]
    }

    /// `choice`'s answer for a client of `pool` from `room`.
    fn choose(&self, loads: &[Load], pool: &Pool, room: Option<(Subnet, u64)>) -> usize {
        let expected = self.expected_bytes(pool);
        choice::choose_in_room(loads, expected, room.map(|(_, uplink)| uplink))
    }

    /// Whether a PXE DISCOVER from `mac` now starts a new boot, by the records (`true`
    /// without records: every such DISCOVER is a new boot).
    fn starts_boot(&self, mac: Mac) -> bool {
        self.records.as_ref().is_none_or(|r| {
            r.read(|t| t.discover_starts_boot(mac, true, crate::record::event::now_micros()))
        })
    }

    /// Whether link `i` can be given out: its address is on an interface, or no link's
    /// interface is known (nothing resolved: all count).
    fn usable(&self, i: usize) -> bool {
        self.state[i].device.is_some() || self.state.iter().all(|s| s.device.is_none())
    }

    /// Each link's load now, with what `room`'s clients owe on it; forgets clients that are
    /// done.
    fn loads(
        &self,
        booting: &mut HashMap<Mac, Booting>,
        now: Instant,
        room: Option<(Subnet, u64)>,
    ) -> Vec<Load> {
        let state = &self.state;
        let mut loads: Vec<Load> = state
            .iter()
            .enumerate()
            .map(|(i, s)| Load {
                capacity_bps: s.capacity_bps,
                unusable: !self.usable(i),
                ..Load::default()
            })
            .collect();
        // Fetched so far, per client still booting.
        let fetched: HashMap<Mac, Option<u64>> = match &self.records {
            None => booting.keys().map(|mac| (*mac, Some(0))).collect(),
            Some(records) => records.read(|t| {
                booting
                    .keys()
                    .map(|mac| {
                        let boot = t.current(*mac);
                        let done = boot.is_some_and(|b| b.result != BootResult::Running);
                        let bytes = boot.map_or(0, |b| b.bytes.values().sum());
                        (*mac, (!done).then_some(bytes))
                    })
                    .collect()
            }),
        };
        booting.retain(|mac, b| {
            now.duration_since(b.since) < BOOTING_FOR && fetched.get(mac).copied().flatten().is_some()
                // A boot that ended before this client counted on its link is an earlier one.
                || now.duration_since(b.since) < Duration::from_secs(5)
        });
        for (mac, b) in booting.iter() {
            let so_far = fetched.get(mac).copied().flatten().unwrap_or(0);
            let l = &mut loads[b.link];
            l.clients += 1;
            let owed = self.expected_bytes(&b.pool).saturating_sub(so_far);
            l.pending_bytes += owed;
            if b.room.is_some() && b.room == room.map(|(subnet, _)| subnet) {
                l.room_pending_bytes += owed;
            }
        }
        if let Some(sample) = self.egress.get().and_then(|e| e.latest()) {
            for (l, s) in loads.iter_mut().zip(state) {
                if let Some(dev) = &s.device
                    && let Some(r) = sample.links.iter().find(|r| &r.name == dev)
                {
                    l.egress_bps = (r.tx_bytes_s * 8.0) as u64;
                }
            }
        }
        loads
    }

    /// What a client of `pool` is expected to fetch in one boot: the mean of the pool's last
    /// booted boots, or a first guess from its boot files.
    fn expected_bytes(&self, pool: &Pool) -> u64 {
        let mut cache = self.expected.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((bytes, at)) = cache.get(&pool.name)
            && at.elapsed() < EXPECTED_FOR
        {
            return *bytes;
        }
        let learned = self.records.as_ref().and_then(|r| {
            r.read(|t| {
                let sizes: Vec<u64> = t
                    .boots()
                    .iter()
                    .rev()
                    .filter(|b| {
                        b.result == BootResult::Booted && b.pool.as_deref() == Some(&pool.name)
                    })
                    .take(LEARN_FROM)
                    .map(|b| b.bytes.values().sum())
                    .collect();
                (!sizes.is_empty()).then(|| sizes.iter().sum::<u64>() / sizes.len() as u64)
            })
        });
        let bytes = learned.unwrap_or_else(|| {
            let size = |p: std::path::PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
            (size(pool.image.kernel()) + size(pool.image.initrd())) * FIRST_GUESS_FACTOR
        });
        cache.insert(pool.name.clone(), (bytes, Instant::now()));
        bytes
    }
}

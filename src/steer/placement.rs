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
//!
//! In a site (docs/site.md), with `server.placement: site`, the DHCP owner of a client places
//! its boot on any live member's link: the others' links come in as `Elsewhere` (their
//! addresses and capacities, from their heartbeats), and a boot placed on another member's
//! link counts here, on that link, for the whole boot, as this server's own do. Each owner
//! spreads its own boots only (`loads`): the sum of the owners' even spreads is even, and
//! needs nothing from the others' heartbeats, which lag a second behind a storm's DISCOVERs.
//! The boots this server placed anywhere go into its heartbeat (`published`), for the site's
//! view.

use super::choice::{self, LinkSpec, Load};
use crate::config::{Config, Mac, Pool, Subnet};
use crate::record::Records;
use crate::record::egress::Egress;
use crate::record::timeline::BootResult;
use serde::{Deserialize, Serialize};
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
    /// The link's address: one of this server's, or another member's (`Elsewhere`).
    link: Ipv4Addr,
    pool: Arc<Pool>,
    since: Instant,
    /// Its room, when that is behind an uplink.
    room: Option<Subnet>,
}

/// What one server says of one link in its heartbeat (`site::live`): for a link of its own,
/// its capacity and measured egress; for any link, the boots it placed there that are still
/// booting and the bytes they still owe.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Published {
    pub address: Ipv4Addr,
    /// The link is the publishing server's own.
    #[serde(default)]
    pub own: bool,
    #[serde(default)]
    pub capacity_bps: Option<u64>,
    #[serde(default)]
    pub egress_bps: u64,
    #[serde(default)]
    pub pending_bytes: u64,
    #[serde(default)]
    pub clients: usize,
}

impl Default for Published {
    fn default() -> Published {
        Published {
            address: Ipv4Addr::UNSPECIFIED,
            own: false,
            capacity_bps: None,
            egress_bps: 0,
            pending_bytes: 0,
            clients: 0,
        }
    }
}

impl std::fmt::Debug for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placement")
            .field("addresses", &self.addresses)
            .finish_non_exhaustive()
    }
}

/// Another live member's link, for a site-wide choice: its address and its capacity as its
/// member published it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Elsewhere {
    pub address: Ipv4Addr,
    pub capacity_bps: Option<u64>,
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
    /// declares one. `site`: the rest of the site's links (empty: this server's links only,
    /// as without a site); a link of another member is chosen as one of this server's is.
    pub fn link_for(
        &self,
        mac: Mac,
        pool: &Arc<Pool>,
        kept: Option<Ipv4Addr>,
        pxe_discover: bool,
        room: Option<(Subnet, u64)>,
        site: &[Elsewhere],
    ) -> Ipv4Addr {
        let remote = |a: &Ipv4Addr| site.iter().any(|e| e.address == *a);
        if self.addresses.len() == 1 && site.is_empty() {
            return self.addresses[0];
        }
        let mut booting = self.booting.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let usable = |a: &Ipv4Addr| {
            self.addresses
                .iter()
                .position(|x| x == a)
                .is_some_and(|i| self.usable(i))
                || remote(a)
        };
        let current = |booting: &HashMap<Mac, Booting>| {
            booting.get(&mac).map(|b| b.link).filter(|a| usable(a))
        };
        let link = if pxe_discover && self.starts_boot(mac) {
            // `loads` forgets boots that have ended, so a client still counted here is in the
            // same boot (its firmware sent DISCOVER again) and keeps its link.
            let (links, loads) = self.loads(&mut booting, now, room, site);
            match current(&booting) {
                Some(a) => a,
                None => {
                    let a = links[self.choose(&loads, pool, room)];
                    tracing::debug!(%mac, link = %a, "link chosen");
                    a
                }
            }
        } else {
            match (current(&booting), kept.filter(|a| usable(a))) {
                (Some(a), _) => return a,
                // Booting since before a restart: counted on its link from now.
                (None, Some(a)) => a,
                (None, None) => {
                    let (links, loads) = self.loads(&mut booting, now, room, site);
                    links[self.choose(&loads, pool, room)]
                }
            }
        };
        booting.insert(
            mac,
            Booting {
                link,
                pool: pool.clone(),
                since: now,
                room: room.map(|(subnet, _)| subnet),
            },
        );
        link
    }

    /// What this server says of the links in its heartbeat: each of its own links (capacity,
    /// measured egress, the boots it placed there), then each other link it placed boots on.
    /// Forgets clients that are done.
    pub fn published(&self) -> Vec<Published> {
        let mut booting = self.booting.lock().unwrap_or_else(|e| e.into_inner());
        let (links, loads) = self.loads(&mut booting, Instant::now(), None, &[]);
        let mut out: Vec<Published> = links
            .iter()
            .zip(&loads)
            .map(|(a, l)| Published {
                address: *a,
                own: true,
                capacity_bps: l.capacity_bps,
                egress_bps: l.egress_bps,
                pending_bytes: l.pending_bytes,
                clients: l.clients,
            })
            .collect();
        for (a, owed) in self.owed(&booting) {
            if self.addresses.contains(&a) {
                continue;
            }
            let p = match out.iter().position(|p| p.address == a) {
                Some(i) => &mut out[i],
                None => {
                    out.push(Published {
                        address: a,
                        ..Published::default()
                    });
                    out.last_mut().expect("just pushed")
                }
            };
            p.pending_bytes += owed;
            p.clients += 1;
        }
        out
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

    /// Forgets the clients that are done: a boot counts on its link until its record says it
    /// ended, or for `BOOTING_FOR`.
    fn forget_done(&self, booting: &mut HashMap<Mac, Booting>, now: Instant) {
        let fetched = self.fetched(booting);
        booting.retain(|mac, b| {
            now.duration_since(b.since) < BOOTING_FOR && fetched.get(mac).copied().flatten().is_some()
                // A boot that ended before this client counted on its link is an earlier one.
                || now.duration_since(b.since) < Duration::from_secs(5)
        });
    }

    /// What each booting client fetched so far (`None`: its boot ended).
    fn fetched(&self, booting: &HashMap<Mac, Booting>) -> HashMap<Mac, Option<u64>> {
        match &self.records {
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
        }
    }

    /// Each booting client's link and the bytes it still owes.
    fn owed(&self, booting: &HashMap<Mac, Booting>) -> Vec<(Ipv4Addr, u64)> {
        let fetched = self.fetched(booting);
        booting
            .iter()
            .map(|(mac, b)| {
                let so_far = fetched.get(mac).copied().flatten().unwrap_or(0);
                (b.link, self.expected_bytes(&b.pool).saturating_sub(so_far))
            })
            .collect()
    }

    /// The links a boot may be placed on (this server's, then the others' of `site`) and
    /// each one's load now, with what `room`'s clients owe on it; forgets clients that are
    /// done.
    fn loads(
        &self,
        booting: &mut HashMap<Mac, Booting>,
        now: Instant,
        room: Option<(Subnet, u64)>,
        site: &[Elsewhere],
    ) -> (Vec<Ipv4Addr>, Vec<Load>) {
        let state = &self.state;
        let mut links = self.addresses.clone();
        let mut loads: Vec<Load> = state
            .iter()
            .enumerate()
            .map(|(i, s)| Load {
                capacity_bps: s.capacity_bps,
                unusable: !self.usable(i),
                ..Load::default()
            })
            .collect();
        // In a site, the others' links by their capacity only: each owner spreads its own
        // boots over the site's links, and so the sum of all owners' is even, without
        // waiting for anyone's heartbeat (a second old, when a room's DISCOVERs come within
        // one). Placing by what the others published, and by a link's measured egress (which
        // the others' boots there make), herded a storm's boots onto one member: 61 of 80.
        if site.is_empty()
            && let Some(sample) = self.egress.get().and_then(|e| e.latest())
        {
            for (l, s) in loads.iter_mut().zip(state) {
                if let Some(dev) = &s.device
                    && let Some(r) = sample.links.iter().find(|r| &r.name == dev)
                {
                    l.egress_bps = (r.tx_bytes_s * 8.0) as u64;
                }
            }
        }
        for e in site {
            if !links.contains(&e.address) {
                links.push(e.address);
                loads.push(Load {
                    capacity_bps: e.capacity_bps,
                    ..Load::default()
                });
            }
        }
        self.forget_done(booting, now);
        // In a site, a boot weighs its whole expected bytes until it ends, wherever it runs:
        // the bytes another member sent reach this server's records a second or more late,
        // and a boot here would weigh less than the same boot there. So what each fetched is
        // read only without a site.
        let fetched = if site.is_empty() {
            self.fetched(booting)
        } else {
            HashMap::new()
        };
        for (mac, b) in booting.iter() {
            let Some(i) = links.iter().position(|a| *a == b.link) else {
                continue;
            };
            let so_far = fetched.get(mac).copied().flatten().unwrap_or(0);
            let l = &mut loads[i];
            l.clients += 1;
            let owed = self.expected_bytes(&b.pool).saturating_sub(so_far);
            l.pending_bytes += owed;
            if b.room.is_some() && b.room == room.map(|(subnet, _)| subnet) {
                l.room_pending_bytes += owed;
            }
        }
        (links, loads)
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

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "\
server:
  interfaces: [br0]
  address: 10.77.0.1
  http: 0.0.0.0:8080
  state_dir: var/
dhcp:
  mode: authoritative
  subnet: 10.77.0.0/24
  range: 10.77.0.100-10.77.0.199
  router: 10.77.0.1
images:
  demo:
    dir: images/demo
pools:
  room:
    image: demo
    root: nbd
    clients:
      - { macs: \"52:54:00:77:00:00-52:54:00:77:00:ff\" }
";

    /// Members `a`, `b` and `c` (one link each) own a room's clients by a hash, unevenly
    /// (20, 15 and 5 here); each owner places its own over the three links as their DISCOVERs
    /// come, knowing nothing of the others' placements: every link gets 13 or 14 of the 40.
    #[test]
    fn owners_spreading_their_own_boots_fill_every_link_evenly() {
        let links = [
            Ipv4Addr::new(10, 77, 0, 1),
            Ipv4Addr::new(10, 77, 0, 2),
            Ipv4Addr::new(10, 77, 0, 3),
        ];
        let owners: Vec<(Placement, Vec<Elsewhere>, Arc<Pool>)> = links
            .iter()
            .map(|mine| {
                let text = CONFIG.replace("address: 10.77.0.1", &format!("address: {mine}"));
                let config = Config::parse(std::path::Path::new("pools.yaml"), &text).unwrap();
                let pool = config.pools["room"].clone();
                let others = links
                    .iter()
                    .filter(|a| *a != mine)
                    .map(|a| Elsewhere {
                        address: *a,
                        capacity_bps: Some(1_000_000_000),
                    })
                    .collect();
                (Placement::new(&config, None, &[]), others, pool)
            })
            .collect();
        let mut on: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
        for m in 0..40u8 {
            let owner = match m % 8 {
                0..=3 => 0,
                4..=6 => 1,
                _ => 2,
            };
            let (placement, others, pool) = &owners[owner];
            let mac = Mac([0x52, 0x54, 0, 0x77, 0, m]);
            let link = placement.link_for(mac, pool, None, true, None, others);
            *on.entry(link).or_default() += 1;
        }
        assert_eq!(on.len(), 3, "{on:?}");
        assert!(on.values().all(|n| (13..=14).contains(n)), "{on:?}");
        // Alone (no other member live), an owner keeps its boots on its own link.
        let (placement, _, pool) = &owners[1];
        let mac = Mac([0x52, 0x54, 0, 0x77, 1, 0]);
        assert_eq!(
            placement.link_for(mac, pool, None, true, None, &[]),
            links[1]
        );
    }
}

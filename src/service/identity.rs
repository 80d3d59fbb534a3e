//! Who a client is. One answer for every service: the lease table the DHCP service keeps
//! (`boot::leases`), shared behind one lock, and beside it the DHCPv6 bindings the DHCPv6
//! service keeps (`boot::leases6`, saved in `state_dir/leases6.json`), for clients that ask over IPv6. DHCP writes it once per packet; NFS and NBD ask
//! it when a client mounts or attaches, the overlays when they choose a client's key, the API
//! when a client reports its boot. It is loaded from the lease files before anything binds,
//! so it survives a restart (and a kill -9) with the leases, unlike the event stream, which
//! loses its last half second by design. In a site, the other members' leases (the site's
//! copy, `site::shared_leases`) are clients here too: their owner may place them on this
//! member's links.
//!
//! What this identity proves: that the address was leased (or, in proxy mode, reported on
//! port 4011) by the MAC that now holds it. On a shared segment a host can still claim another
//! MAC and, while that machine is off, its address; docs/security.md says what an admin can add
//! (fixed addresses, `dhcp.relays`, a switch's DHCP snooping and source guard).

use super::bounds::Standing;
use crate::boot::exports::{ServesFor, is_client};
use crate::boot::leases::Leases;
use crate::boot::leases6::Leases6;
use crate::config::{Config, Mac};
use crate::site::shared_leases::SharedLeases;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The shared lease table, and the DHCPv6 bindings.
#[derive(Clone, Debug, Default)]
pub struct Identity {
    v4: Arc<RwLock<Leases>>,
    v6: Arc<RwLock<Leases6>>,
    /// In a site: the other members' leases as last read (`site::shared_leases`), whose
    /// clients are clients here too (their owner may place them on this member's links); an
    /// IPv4 address nobody holds has them read again soon, at most once per `ASK_AGAIN`.
    site: Arc<OnceLock<Arc<SharedLeases>>>,
    asked: Arc<Mutex<HashMap<Ipv4Addr, Instant>>>,
    /// The requests held for the site's leases (`standing_held`).
    held: Arc<Mutex<Held>>,
}

#[derive(Debug, Default)]
struct Held {
    /// Addresses a request is held for now.
    now: HashSet<Ipv4Addr>,
    /// When each address was last held.
    last: HashMap<Ipv4Addr, Instant>,
    /// Requests held or waiting for a hold now.
    tasks: usize,
}

/// How long an address nobody held stays unknown before the site's leases are read again for
/// it: the negative answer's life.
const ASK_AGAIN: Duration = Duration::from_secs(2);

/// Longest a first request from an address nobody here knows is held (`standing_held`).
const HOLD: Duration = Duration::from_secs(1);
/// A second read, this long after the first, when the first did not know the address yet:
/// the owner writes its lease as it answers, a few milliseconds after the client has it.
const READ_AGAIN: Duration = Duration::from_millis(200);
/// Requests held or waiting at once; beyond, an unknown address's request goes on as a
/// stranger's.
const MAX_HELD: usize = 64;

impl Identity {
    pub fn new(leases: Leases) -> Identity {
        Identity {
            v4: Arc::new(RwLock::new(leases)),
            ..Identity::default()
        }
    }

    /// In a site: the other members' leases count too (`holder`, `link`).
    pub fn in_site(&self, shared: Arc<SharedLeases>) {
        let _ = self.site.set(shared);
    }

    /// The client another member's lease holds `ip` for, by the site's leases as last read.
    fn elsewhere(&self, ip: Ipv4Addr, now: u64) -> Option<Mac> {
        Some(self.site.get()?.share().at(ip, now)?.mac)
    }

    /// The server link `mac` boots from: its lease's here, else (in a site) the one another
    /// member's lease names (the member that answered it placed it).
    pub fn link(&self, mac: Mac) -> Option<std::net::Ipv4Addr> {
        self.read().link(mac).or_else(|| {
            let share = self.site.get()?.share();
            share.bound(mac, unix_now())?.link
        })
    }

    /// `holder` found nobody at `ip`: the site's leases read again soon (never waited for;
    /// the request goes on with what is known).
    fn unknown(&self, ip: Ipv4Addr) {
        let Some(shared) = self.site.get() else {
            return;
        };
        let now = Instant::now();
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        if asked
            .get(&ip)
            .is_some_and(|at| now.duration_since(*at) < ASK_AGAIN)
        {
            return;
        }
        if asked.len() >= 4096 {
            asked.retain(|_, at| now.duration_since(*at) < ASK_AGAIN);
        }
        asked.insert(ip, now);
        drop(asked);
        shared.read_soon();
    }

    /// The MAC that holds `ip` now, if any: an IPv4 address (also IPv4-mapped) by the lease
    /// table, an IPv6 one by the DHCPv6 bindings.
    pub fn holder(&self, ip: IpAddr) -> Option<Mac> {
        match (super::ipv4_of(ip), ip) {
            (Some(v4), _) => {
                let now = unix_now();
                let mac = self.read().holder(v4, now);
                let mac = mac.or_else(|| self.elsewhere(v4, now));
                if mac.is_none() {
                    self.unknown(v4);
                }
                mac
            }
            (None, IpAddr::V6(v6)) => self.read6().holder(v6, unix_now()),
            (None, IpAddr::V4(_)) => None,
        }
    }

    /// `standing`, except that in a site a request from an IPv4 address nobody here knows is
    /// held until the site's leases were read again after it came (`SharedLeases::read_fresh`;
    /// once more `READ_AGAIN` later if that read did not know it either; `HOLD` at most). The
    /// owner of a client that it placed on this member writes the lease as it answers, and the
    /// client's first request (a firmware's TFTP read, UEFI's HTTP boot) can come before this
    /// member's next read: without the hold it would be a stranger here, refused once the
    /// strangers' few slots are taken. An address is held once per `ASK_AGAIN`; a request
    /// from an address held now waits for that hold's answer; `MAX_HELD` requests at most are
    /// held or waiting, beyond which an unknown address's request goes on as a stranger's.
    pub async fn standing_held(&self, config: &Config, serves: ServesFor, ip: IpAddr) -> Standing {
        let first = self.standing(config, serves, ip);
        let (Standing::Stranger, Some(shared), Some(v4)) =
            (first, self.site.get(), super::ipv4_of(ip))
        else {
            return first;
        };
        let now = Instant::now();
        let deadline = tokio::time::Instant::from_std(now + HOLD);
        let leads = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            let recent = held
                .last
                .get(&v4)
                .is_some_and(|at| now.duration_since(*at) < ASK_AGAIN);
            let leads = !held.now.contains(&v4);
            if held.tasks >= MAX_HELD || (leads && recent) {
                return first;
            }
            if leads {
                if held.last.len() >= 4096 {
                    held.last
                        .retain(|_, at| now.duration_since(*at) < ASK_AGAIN);
                }
                held.now.insert(v4);
                held.last.insert(v4, now);
            }
            held.tasks += 1;
            leads
        };
        if leads {
            for again in [false, true] {
                if again
                    && tokio::time::timeout_at(deadline, tokio::time::sleep(READ_AGAIN))
                        .await
                        .is_err()
                {
                    break;
                }
                if tokio::time::timeout_at(deadline, shared.read_fresh())
                    .await
                    .is_err()
                    || self.elsewhere(v4, unix_now()).is_some()
                {
                    break;
                }
            }
        } else {
            // Another request from this address leads the hold: its answer is this one's.
            while self.is_held(v4) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            if leads {
                held.now.remove(&v4);
            }
            held.tasks -= 1;
        }
        self.standing(config, serves, ip)
    }

    fn is_held(&self, v4: Ipv4Addr) -> bool {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.now.contains(&v4)
    }

    /// Whether `standing_held` may hold a request: this server is a member of a site.
    pub fn in_a_site(&self) -> bool {
        self.site.get().is_some()
    }

    /// Who `ip` is to a service that serves `serves`: a client when it holds a lease of a
    /// pool the service is for (`boot::exports::is_client`), else a stranger.
    pub fn standing(&self, config: &Config, serves: ServesFor, ip: IpAddr) -> Standing {
        if is_client(config, serves, ip, self.holder(ip)) {
            Standing::Client
        } else {
            Standing::Stranger
        }
    }

    pub fn read(&self) -> RwLockReadGuard<'_, Leases> {
        self.v4.read().unwrap_or_else(|e| e.into_inner())
    }

    /// For the DHCP service, the table's one writer.
    pub fn write(&self) -> RwLockWriteGuard<'_, Leases> {
        self.v4.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn read6(&self) -> RwLockReadGuard<'_, Leases6> {
        self.v6.read().unwrap_or_else(|e| e.into_inner())
    }

    /// For the DHCPv6 service, the bindings' one writer.
    pub fn write6(&self) -> RwLockWriteGuard<'_, Leases6> {
        self.v6.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// Seconds since the epoch, the lease table's clock.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

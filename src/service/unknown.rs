//! Unknown clients: the MACs no pool lists that asked anyway (DHCPv4, proxyDHCP, DHCPv6), each
//! with what its request said of it (vendor class, option 93, the relay and option 82), when
//! it was first and last seen and which protocols it asked by; the list an admin enrols from
//! (`GET /api/v1/unknown`, `bootpool client add`). Bounded (`CAPACITY` clients, the longest
//! silent forgotten first and counted) and cheap under a flood: a known MAC is touched at most
//! once a second, and at most `NEW_PER_SECOND` new ones are taken a second. Kept in
//! `state_dir/unknown.json`, written whole by rename at most once a second (`flush`), so a
//! daemon killed with -9 keeps what it had listed a second before.

use crate::config::Mac;
use crate::metrics::Metrics;
use crate::proto::dhcp::AgentId;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Clients listed at most; past it, the one silent longest is forgotten.
pub const CAPACITY: usize = 4096;
/// New clients taken into the list in one second; more are counted and left out.
pub const NEW_PER_SECOND: u32 = 64;
/// The file in the state folder that keeps the list.
pub const FILE: &str = "unknown.json";
/// The longest vendor class kept (option 60 is at most 255 bytes; real ones are short).
const VENDOR_CLASS_MAX: usize = 64;

/// How a client asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Asked {
    /// DHCPv4 on port 67, authoritative mode.
    Dhcp,
    /// DHCPv6.
    Dhcp6,
    /// proxyDHCP (port 67 beside another server, or 4011).
    Proxy,
}

/// What one request said of its client.
#[derive(Debug, Clone)]
pub struct Asking {
    pub mac: Mac,
    pub asked: Asked,
    /// Option 60 (DHCPv4) or option 16's first class (DHCPv6).
    pub vendor_class: Option<Vec<u8>>,
    /// Option 93 (DHCPv4) or 61 (DHCPv6): the firmware's architecture code.
    pub arch: Option<u16>,
    /// The relay that carried it (giaddr), if one did.
    pub relay: Option<Ipv4Addr>,
    /// Option 82's circuit and remote id: the switch port, the switch.
    pub circuit_id: Option<AgentId>,
    pub remote_id: Option<AgentId>,
}

/// One unknown client, as the API shows it (times in Unix seconds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stranger {
    pub mac: Mac,
    pub vendor_class: Option<String>,
    pub arch: Option<u16>,
    pub relay: Option<Ipv4Addr>,
    pub circuit_id: Option<String>,
    pub remote_id: Option<String>,
    pub first_seen: u64,
    pub last_seen: u64,
    /// Each way it asked, once, in the order `dhcp`, `dhcp6`, `proxy`.
    pub asked: Vec<Asked>,
}

/// The list, its file, and the daemon's counters it keeps up to date
/// (`metrics.dhcp().unknown`, `.unknown_forgotten`).
pub struct Unknown {
    table: Mutex<Table>,
    /// `None`: kept in memory only (a service started alone).
    file: Option<PathBuf>,
    metrics: Metrics,
}

#[derive(Default)]
struct Table {
    clients: HashMap<Mac, Stranger>,
    /// Changed since the last save.
    dirty: bool,
    /// The second new clients were last taken in, and how many then.
    admitted: (u64, u32),
}

impl Unknown {
    /// The list kept in `state_dir/unknown.json`, with what that file holds (a damaged file is
    /// said in the log and set aside as `unknown.json.damaged`: the list is an aid, never a
    /// reason not to serve).
    pub fn open(state_dir: &Path, metrics: Metrics) -> Unknown {
        let path = state_dir.join(FILE);
        let mut table = Table::default();
        match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<Vec<Stranger>>(&bytes) {
                Ok(listed) => {
                    for s in listed.into_iter().take(CAPACITY) {
                        table.clients.insert(s.mac, s);
                    }
                }
                Err(e) => {
                    let aside = state_dir.join(format!("{FILE}.damaged"));
                    tracing::warn!(file = %path.display(), error = %e, aside = %aside.display(),
                        "the unknown clients' list is damaged; starting an empty one");
                    let _ = std::fs::rename(&path, aside);
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e,
                    "the unknown clients' list is unreadable; starting an empty one")
            }
        }
        metrics.dhcp().unknown.set(table.clients.len() as u64);
        Unknown {
            table: Mutex::new(table),
            file: Some(path),
            metrics,
        }
    }

    /// A list kept in memory only.
    pub fn in_memory(metrics: Metrics) -> Unknown {
        Unknown {
            table: Mutex::new(Table::default()),
            file: None,
            metrics,
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a request from a client no pool lists, at `now` (Unix seconds).
    pub fn note(&self, asking: &Asking, now: u64) {
        let mut t = self.table();
        if let Some(known) = t.clients.get_mut(&asking.mac) {
            // A MAC asking again in the same second tells nothing new.
            if known.last_seen == now && known.asked.contains(&asking.asked) {
                return;
            }
            known.take(asking, now);
            t.dirty = true;
            return;
        }
        if t.admitted.0 != now {
            t.admitted = (now, 0);
        }
        if t.admitted.1 >= NEW_PER_SECOND {
            self.metrics.dhcp().unknown_forgotten.inc();
            return;
        }
        t.admitted.1 += 1;
        if t.clients.len() >= CAPACITY {
            let oldest = t
                .clients
                .values()
                .min_by_key(|s| (s.last_seen, s.mac))
                .map(|s| s.mac);
            if let Some(mac) = oldest {
                t.clients.remove(&mac);
                self.metrics.dhcp().unknown_forgotten.inc();
            }
        }
        let mut stranger = Stranger {
            mac: asking.mac,
            vendor_class: None,
            arch: None,
            relay: None,
            circuit_id: None,
            remote_id: None,
            first_seen: now,
            last_seen: now,
            asked: Vec::new(),
        };
        stranger.take(asking, now);
        // The services say a stranger once at info; this says where it is listed.
        tracing::debug!(mac = %asking.mac, asked = ?asking.asked,
            vendor_class = stranger.vendor_class.as_deref().unwrap_or("-"),
            "client in no pool listed as unknown (GET /api/v1/unknown; enrol it with bootpool client add)");
        t.clients.insert(asking.mac, stranger);
        t.dirty = true;
        self.metrics.dhcp().unknown.set(t.clients.len() as u64);
    }

    /// Drops `mac` from the list (it was enrolled).
    pub fn forget(&self, mac: Mac) {
        self.forget_listed(|m| m == mac);
    }

    /// Drops every client `listed` says a pool lists now (enrolled by the API, the CLI, a
    /// `discover` pool, or added to pools.yaml and reloaded).
    pub fn forget_listed(&self, listed: impl Fn(Mac) -> bool) {
        let mut t = self.table();
        let before = t.clients.len();
        t.clients.retain(|mac, _| !listed(*mac));
        if t.clients.len() != before {
            t.dirty = true;
            self.metrics.dhcp().unknown.set(t.clients.len() as u64);
        }
    }

    /// The clients listed, the one seen last first.
    pub fn list(&self) -> Vec<Stranger> {
        let mut all: Vec<Stranger> = self.table().clients.values().cloned().collect();
        all.sort_by(|a, b| b.last_seen.cmp(&a.last_seen).then(a.mac.cmp(&b.mac)));
        all
    }

    /// Writes the list to its file if it changed since the last write (whole, by rename).
    pub fn flush(&self) {
        let Some(path) = &self.file else { return };
        let listed = {
            let mut t = self.table();
            if !t.dirty {
                return;
            }
            t.dirty = false;
            let mut listed: Vec<Stranger> = t.clients.values().cloned().collect();
            listed.sort_by_key(|s| (s.first_seen, s.mac));
            listed
        };
        let part = path.with_extension("json.part");
        let written = serde_json::to_vec_pretty(&listed)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&part, bytes))
            .and_then(|()| std::fs::rename(&part, path));
        if let Err(e) = written {
            self.table().dirty = true;
            tracing::warn!(file = %path.display(), error = %e, "unknown clients' list not saved");
        }
    }

    /// Saves the list once a second while it changes, and at the stop; drops the clients the
    /// served `config` lists since (a reload that enrolled them).
    pub async fn keep(
        self: std::sync::Arc<Self>,
        config: crate::config::Live,
        shutdown: crate::shutdown::Shutdown,
    ) {
        let mut generation = 0;
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.wait() => break,
                _ = tick.tick() => {}
            }
            let served = config.served();
            if served.generation != generation {
                generation = served.generation;
                self.forget_listed(|mac| served.config.listed(mac).is_some());
            }
            let me = self.clone();
            let _ = tokio::task::spawn_blocking(move || me.flush()).await;
        }
        self.flush();
    }
}

impl Stranger {
    /// Takes what `asking` says: the latest word on each field it carries, its way of asking.
    fn take(&mut self, asking: &Asking, now: u64) {
        self.last_seen = now;
        if let Some(class) = &asking.vendor_class {
            let class = &class[..class.len().min(VENDOR_CLASS_MAX)];
            self.vendor_class = Some(String::from_utf8_lossy(class).into_owned());
        }
        if asking.arch.is_some() {
            self.arch = asking.arch;
        }
        if asking.relay.is_some() {
            self.relay = asking.relay;
            self.circuit_id = asking.circuit_id.as_ref().map(ToString::to_string);
            self.remote_id = asking.remote_id.as_ref().map(ToString::to_string);
        }
        if !self.asked.contains(&asking.asked) {
            self.asked.push(asking.asked);
            self.asked.sort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asking(last: u8, asked: Asked) -> Asking {
        Asking {
            mac: Mac([0x52, 0x54, 0, 0x99, 0, last]),
            asked,
            vendor_class: Some(b"PXEClient:Arch:00007:UNDI:003016".to_vec()),
            arch: Some(7),
            relay: None,
            circuit_id: None,
            remote_id: None,
        }
    }

    #[test]
    fn a_client_is_listed_once_with_every_way_it_asked_and_kept_across_an_open() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::default();
        let list = Unknown::open(dir.path(), metrics.clone());
        list.note(&asking(1, Asked::Dhcp), 100);
        let relayed = Asking {
            relay: Some(Ipv4Addr::new(10, 1, 0, 1)),
            circuit_id: Some("sw3/port12".parse().unwrap()),
            ..asking(1, Asked::Proxy)
        };
        list.note(&relayed, 160);
        let listed = list.list();
        assert_eq!(listed.len(), 1);
        let s = &listed[0];
        assert_eq!((s.first_seen, s.last_seen), (100, 160));
        assert_eq!(s.asked, vec![Asked::Dhcp, Asked::Proxy]);
        assert_eq!(s.circuit_id.as_deref(), Some("sw3/port12"));
        assert_eq!(s.arch, Some(7));
        assert_eq!(metrics.dhcp().unknown.get(), 1);
        list.flush();
        let again = Unknown::open(dir.path(), Metrics::default());
        assert_eq!(again.list(), listed);
        again.forget(Mac([0x52, 0x54, 0, 0x99, 0, 1]));
        assert!(again.list().is_empty());
    }

    #[test]
    fn a_flood_of_new_macs_is_taken_at_the_rate_and_the_list_stays_bounded() {
        let metrics = Metrics::default();
        let list = Unknown::in_memory(metrics.clone());
        let mut now = 1000;
        let mut n = 0u32;
        while list.list().len() < CAPACITY {
            for _ in 0..(NEW_PER_SECOND * 2) {
                let mut a = asking(0, Asked::Dhcp);
                a.mac.0[3..].copy_from_slice(&n.to_be_bytes()[1..]);
                list.note(&a, now);
                n += 1;
            }
            now += 1;
        }
        // Half of each second's new MACs were left out.
        assert_eq!(
            metrics.dhcp().unknown_forgotten.get(),
            u64::from(n) - CAPACITY as u64
        );
        let first = list.list().into_iter().map(|s| s.first_seen).min();
        let mut a = asking(0xff, Asked::Dhcp6);
        a.mac.0[2] = 0xee;
        list.note(&a, now);
        assert_eq!(list.list().len(), CAPACITY);
        assert!(list.list().into_iter().map(|s| s.first_seen).min() >= first);
        assert_eq!(metrics.dhcp().unknown.get(), CAPACITY as u64);
    }
}

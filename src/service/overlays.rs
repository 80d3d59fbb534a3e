//! Which client holds which copy-on-write overlay, and when an overlay is dropped. The NBD
//! service asks here for a client's overlay at attach and holds a `Lease` per connection.
//!
//! The rule: a client is its MAC when the records tie its IP to one, else its IP. All of a
//! client's connections share one overlay (so CAN_MULTI_CONN holds). The overlay is dropped
//! (a) `grace` after the client's last connection closed, unless it attached again meanwhile,
//! and (b) when the client attaches under a newer boot than the overlay was made for (a new
//! PXE boot of that MAC starts a new boot in the records). `cow: disk` overlays live under
//! `state_dir/cow/IMAGE/` and outlive the daemon: at start each one found gets the same grace
//! to be claimed, so an `nbd-client -persist` that reconnects after a restart finds its writes.
//!
//! All overlays in memory draw on one `cow::Budget` (`limits.cow_ram_total`, default a
//! quarter of the host's memory), all overlays on disk on another (`limits.cow_disk_total`,
//! default half the space free under `state_dir` at start): past it a write fails with ENOSPC
//! whoever's it is, so a room of clients cannot together exhaust the server.

use super::identity::Identity;
use crate::config::{Config, CowStore, Image};
use crate::export::cow::{self, Budget, Overlay};
use crate::record::Records;
use crate::shutdown::Shutdown;
use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// What identifies one client's overlay: (image, client key).
type Key = (String, String);

struct Entry {
    overlay: Arc<RwLock<Overlay>>,
    conns: usize,
    /// Bumped on every attach and detach, so a grace timer knows it is stale.
    epoch: u64,
}

pub struct Overlays {
    root: PathBuf,
    grace: Duration,
    shutdown: Shutdown,
    entries: Mutex<HashMap<Key, Entry>>,
    /// Shared by every client's overlay in memory, and on disk.
    pub ram_budget: Arc<Budget>,
    pub disk_budget: Arc<Budget>,
}

/// `limits.cow_ram_total` when unset: a quarter of the host's memory.
fn default_ram_total() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kib = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(4 << 20);
    kib * 1024 / 4
}

/// `limits.cow_disk_total` when unset: half the space free under `dir` (or its nearest
/// existing parent) now.
fn default_disk_total(dir: &std::path::Path) -> u64 {
    use std::os::unix::ffi::OsStrExt as _;
    let mut at = Some(dir);
    while let Some(d) = at {
        if let Ok(c) = std::ffi::CString::new(d.as_os_str().as_bytes())
            && let Ok(st) = crate::sys::fs::statvfs(&c)
        {
            return st.f_bavail * st.f_frsize / 2;
        }
        at = d.parent();
    }
    1 << 30
}

/// One connection's hold on an overlay; dropping it may start the grace timer.
pub struct Lease {
    pub overlay: Arc<RwLock<Overlay>>,
    key: Key,
    owner: Arc<Overlays>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.owner.detach(&self.key, &self.overlay);
    }
}

impl Overlays {
    /// The registry; schedules the disk overlays left by a previous run for expiry.
    pub fn new(config: &Config, grace: Duration, shutdown: Shutdown) -> Arc<Overlays> {
        let l = &config.limits;
        let uses = |store| {
            config
                .images
                .values()
                .any(|i| i.cow.is_some_and(|c| c.store == store))
        };
        let ram_total = match l.cow_ram_total {
            Some(n) => n,
            None if uses(CowStore::Ram) => default_ram_total(),
            None => 0,
        };
        let disk_total = match l.cow_disk_total {
            Some(n) => n,
            None if uses(CowStore::Disk) => default_disk_total(&config.server.state_dir),
            None => 0,
        };
        if uses(CowStore::Ram) || uses(CowStore::Disk) {
            tracing::info!(
                ram_total,
                disk_total,
                "nbd copy-on-write bounds across all clients"
            );
        }
        let o = Arc::new(Overlays {
            root: config.server.state_dir.join("cow"),
            grace,
            shutdown,
            entries: Mutex::default(),
            ram_budget: Budget::new(ram_total),
            disk_budget: Budget::new(disk_total),
        });
        for image in config.images.values() {
            if image.cow.is_some_and(|c| c.store == CowStore::Disk) {
                for key in cow::keys_in(&o.root.join(&image.name)) {
                    tracing::info!(image = %image.name, client = %key, "nbd overlay kept from before; claimable until grace ends");
                    o.expire_later((image.name.clone(), key), 0);
                }
            }
        }
        o
    }

    /// The key of the client at `ip`: the MAC that holds its lease (`service::identity`),
    /// else the address; and the start of that MAC's latest boot in the records.
    pub fn client_key(identity: &Identity, records: &Records, ip: IpAddr) -> (String, Option<i64>) {
        match identity.holder(ip) {
            Some(mac) => {
                let boot =
                    records.read(|t| Some(t.boots().iter().rev().find(|b| b.mac == mac)?.start));
                // File-name safe: no colons.
                (mac.to_string().replace(':', "-"), boot)
            }
            None => (format!("ip-{ip}"), None),
        }
    }

    /// The overlay of `client` on `image` (of `size` bytes), made or reopened as the rule says.
    /// Blocking: may read a map file.
    pub fn attach(
        self: &Arc<Self>,
        image: &Image,
        size: u64,
        client: &str,
        boot: Option<i64>,
    ) -> io::Result<Lease> {
        let Some(c) = image.cow else {
            return Err(io::Error::other("image has no copy-on-write"));
        };
        let key = (image.name.clone(), client.to_string());
        let dir = self.root.join(&image.name);
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let stale = entries.get(&key).is_some_and(|e| {
            let o = e.overlay.read().unwrap_or_else(|e| e.into_inner());
            (boot.is_some() && o.boot() != boot) || o.size() != size
        });
        if stale {
            tracing::info!(image = %image.name, %client, "nbd overlay dropped: new boot");
            entries.remove(&key);
            if c.store == CowStore::Disk {
                cow::remove(&dir, client)?;
            }
        }
        if !entries.contains_key(&key) {
            let overlay = match c.store {
                CowStore::Ram => {
                    Overlay::ram(size, c.limit, boot).with_budget(self.ram_budget.clone())
                }
                CowStore::Disk => {
                    let (mut o, reopened) = Overlay::disk(&dir, client, size, c.limit, boot)?;
                    if reopened && boot.is_some() && o.boot() != boot {
                        drop(o);
                        cow::remove(&dir, client)?;
                        o = Overlay::disk(&dir, client, size, c.limit, boot)?.0;
                    } else if reopened {
                        tracing::info!(image = %image.name, %client, used = o.used(), "nbd overlay reopened");
                    }
                    o.with_budget(self.disk_budget.clone())
                }
            };
            entries.insert(
                key.clone(),
                Entry {
                    overlay: Arc::new(RwLock::new(overlay)),
                    conns: 0,
                    epoch: 0,
                },
            );
        }
        let e = entries.get_mut(&key).expect("just ensured");
        e.conns += 1;
        e.epoch += 1;
        Ok(Lease {
            overlay: e.overlay.clone(),
            key,
            owner: self.clone(),
        })
    }

    fn detach(self: &Arc<Self>, key: &Key, overlay: &Arc<RwLock<Overlay>>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        // A lease on an overlay already replaced by a newer boot's counts for nothing.
        let Some(e) = entries
            .get_mut(key)
            .filter(|e| Arc::ptr_eq(&e.overlay, overlay))
        else {
            return;
        };
        e.conns -= 1;
        e.epoch += 1;
        if e.conns == 0 {
            let epoch = e.epoch;
            drop(entries);
            self.expire_later(key.clone(), epoch);
        }
    }

    /// After the grace period, drops `key` if nobody attached since `epoch` (0: a kept file
    /// nobody has claimed). Shutdown cancels the timer and keeps disk overlays.
    fn expire_later(self: &Arc<Self>, key: Key, epoch: u64) {
        let me = self.clone();
        let shutdown = self.shutdown.clone();
        self.shutdown.spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(me.grace) => {}
                _ = shutdown.wait() => return,
            }
            let dir = me.root.join(&key.0);
            let mut entries = me.entries.lock().unwrap_or_else(|e| e.into_inner());
            let idle = match entries.get(&key) {
                Some(e) => e.conns == 0 && e.epoch == epoch,
                None => epoch == 0,
            };
            if idle {
                entries.remove(&key);
                drop(entries);
                tracing::info!(image = %key.0, client = %key.1, "nbd overlay dropped: client gone");
                // Harmless for RAM overlays: there are no files.
                if let Err(e) = cow::remove(&dir, &key.1) {
                    tracing::warn!(image = %key.0, client = %key.1, error = %e, "nbd cannot remove overlay");
                }
            }
        });
    }

    /// Overlays held now (for tests and logs).
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "\
server:
  address: 127.0.0.1
  state_dir: var/
dhcp:
  subnet: 127.0.0.0/8
  range: 127.0.0.100-127.0.0.199
images:
  demo: { dir: demo, cow: disk, cow_limit: 1MiB }
";

    async fn until_empty(o: &Overlays) {
        for _ in 0..500 {
            if o.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("overlay never dropped");
    }

    #[tokio::test]
    async fn shared_by_a_clients_connections_reset_by_a_new_boot_dropped_after_grace() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::parse(&dir.path().join("pools.yaml"), CONFIG).unwrap();
        let image = config.images["demo"].clone();
        let base = vec![7u8; 1 << 20];
        let shutdown = Shutdown::new();
        let o = Overlays::new(&config, Duration::from_millis(50), shutdown.clone());
        let files = dir.path().join("var/cow/demo");

        let a = o.attach(&image, 1 << 20, "mac", Some(1)).unwrap();
        a.overlay
            .write()
            .unwrap()
            .write(&base, &[1; 4096], 0)
            .unwrap();
        let b = o.attach(&image, 1 << 20, "mac", Some(1)).unwrap();
        assert!(
            Arc::ptr_eq(&a.overlay, &b.overlay),
            "one overlay per client"
        );
        let other = o.attach(&image, 1 << 20, "ip-127.0.0.2", None).unwrap();
        assert!(!Arc::ptr_eq(&a.overlay, &other.overlay));
        assert_eq!(o.len(), 2);

        // The same client under a newer boot starts clean.
        let c = o.attach(&image, 1 << 20, "mac", Some(2)).unwrap();
        assert_eq!(c.overlay.read().unwrap().used(), 0);
        assert_eq!(c.overlay.read().unwrap().boot(), Some(2));
        drop((a, b, other));
        // `c` still holds "mac": only the other client's overlay goes.
        for _ in 0..500 {
            if o.len() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(o.len(), 1);
        assert_eq!(cow::keys_in(&files), ["mac"]);
        drop(c);
        until_empty(&o).await;
        assert!(
            cow::keys_in(&files).is_empty(),
            "files outlived the overlay"
        );
        shutdown.stop_and_wait().await;
    }

    #[tokio::test]
    async fn disk_overlays_outlive_a_restart_and_unclaimed_ones_expire() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::parse(&dir.path().join("pools.yaml"), CONFIG).unwrap();
        let image = config.images["demo"].clone();
        let base = vec![7u8; 1 << 20];
        let files = dir.path().join("var/cow/demo");
        let shutdown = Shutdown::new();
        let o = Overlays::new(&config, Duration::from_secs(3600), shutdown.clone());
        for key in ["kept", "gone"] {
            let l = o.attach(&image, 1 << 20, key, Some(5)).unwrap();
            l.overlay
                .write()
                .unwrap()
                .write(&base, &[3; 10], 0)
                .unwrap();
        }
        // A restart: shutdown keeps disk overlays.
        shutdown.stop_and_wait().await;
        assert_eq!(cow::keys_in(&files), ["gone", "kept"]);

        let shutdown = Shutdown::new();
        let o = Overlays::new(&config, Duration::from_millis(100), shutdown.clone());
        let kept = o.attach(&image, 1 << 20, "kept", Some(5)).unwrap();
        let mut buf = [0; 10];
        kept.overlay
            .read()
            .unwrap()
            .read(&base, &mut buf, 0)
            .unwrap();
        assert_eq!(buf, [3; 10], "the reconnecting client finds its writes");
        for _ in 0..500 {
            if cow::keys_in(&files) == ["kept"] {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            cow::keys_in(&files),
            ["kept"],
            "the unclaimed overlay expires"
        );
        drop(kept);
        shutdown.stop_and_wait().await;
    }
}

//! One member's leases in the site, running: the DHCP service hands each batch's lease table
//! to `note` (the changes go to the spool on disk, never to the database on the packet path);
//! `keep`, every `EVERY`, writes the spool to `site_leases` and reads the other members' rows
//! back into the share the lease table gives from (`boot::lease_share`); sooner when asked
//! (`send_soon`: a boot placed on another member; `read_soon`: an address nobody here knows). A database that does
//! not answer leaves the spool growing and the share as last read, with the live members of
//! the site's view (frozen too, `owners`), so the boot path never waits on it.

use super::lease_rows::{self, Change, Row};
use super::lease_spool::{Spool, say_sent, write_in_order};
use super::leases_db::{LeasesDb, Put};
use super::live::Site;
use crate::boot::lease_share::Share;
use crate::boot::leases::Leases;
use crate::config::Mac;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// How often the spool is written and the others' rows read.
pub const EVERY: Duration = Duration::from_secs(1);

/// The spool and the rows it was last given, under one lock.
struct Outbox {
    spool: Spool,
    /// The rows as the last `note` saw them, by client.
    sent: BTreeMap<Mac, Row>,
}

/// A member's part in the site's leases. Shared by the DHCP service and its task (`Arc`).
pub struct SharedLeases {
    site: Arc<Site>,
    db: LeasesDb,
    outbox: Mutex<Outbox>,
    /// What the lease table may give, as last read.
    share: RwLock<Arc<Share>>,
    /// Leases the table refused (another client's row holds the address), by client.
    conflicts: Mutex<BTreeMap<Mac, Ipv4Addr>>,
    metrics: Metrics,
    /// Wakes `keep` to write the spool before the next tick (`send_soon`).
    send_now: Notify,
    /// Wakes `keep` to read the others' rows before the next tick (`read_soon`).
    read_now: Notify,
    /// Reads asked for by `read_fresh` so far (its tickets).
    asked: AtomicU64,
    /// The last ticket a finished read had been asked for before it started.
    covered: watch::Sender<u64>,
}

impl std::fmt::Debug for SharedLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLeases")
            .field("member", &self.site.me().name)
            .finish_non_exhaustive()
    }
}

impl SharedLeases {
    /// The shared leases of member `site.me()`, its spool in `state_dir`.
    pub fn open(
        site: Arc<Site>,
        db: LeasesDb,
        state_dir: &std::path::Path,
        metrics: Metrics,
    ) -> anyhow::Result<Arc<SharedLeases>> {
        let spool = Spool::open(state_dir).map_err(|e| {
            anyhow::anyhow!(
                "opening {}: {e}",
                state_dir.join(super::lease_spool::SPOOL).display()
            )
        })?;
        if !spool.is_empty() {
            tracing::info!(
                changes = spool.len(),
                "lease changes spooled for the site's table"
            );
        }
        let shared = SharedLeases {
            site,
            db,
            outbox: Mutex::new(Outbox {
                spool,
                sent: BTreeMap::new(),
            }),
            share: RwLock::new(Arc::new(Share::default())),
            conflicts: Mutex::new(BTreeMap::new()),
            metrics,
            send_now: Notify::new(),
            read_now: Notify::new(),
            asked: AtomicU64::new(0),
            covered: watch::Sender::new(0),
        };
        shared.set_share(|_, place, n| Share::new(place, n, []));
        Ok(Arc::new(shared))
    }

    /// What the lease table may give now: the others' leases as last read, this member's
    /// part by the live members as the site's view has them now (not a second late).
    pub fn share(&self) -> Arc<Share> {
        let (place, members) = self.site.place();
        let share = self.share.read().unwrap_or_else(|e| e.into_inner()).clone();
        if share.is_for(place, members) {
            return share;
        }
        self.set_share(|old, place, n| old.with_members(place, n));
        self.share.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Spools what `table` changed since the last call (synced before it returns).
    pub fn note(
        &self,
        table: &Leases,
        subnet_of: impl Fn(Ipv4Addr) -> Option<String>,
    ) -> std::io::Result<()> {
        let mut out = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        let Outbox { spool, sent } = &mut *out;
        let changes = lease_rows::diff(sent, table, subnet_of, &self.site.me().name);
        spool.add(changes)
    }

    /// Has the spool written now rather than at the next tick: a boot placed on another
    /// member, which serves it once its copy of the site's leases holds the lease.
    pub fn send_soon(&self) {
        self.send_now.notify_one();
    }

    /// Has the others' rows read now rather than at the next tick: a service was asked by an
    /// address the table does not know, perhaps a client another member just leased and
    /// placed on this member. Never waited for: the request goes on with what is known.
    pub fn read_soon(&self) {
        self.read_now.notify_one();
    }

    /// Returns once the others' rows were read by a read that started after this call (at
    /// once, or after the one running now): a service holding a first request from an address
    /// nobody here knows waits for it (`service::identity`, `standing_held`). Bound it with a
    /// timeout: a database that does not answer leaves the share as last read.
    pub async fn read_fresh(&self) {
        let ticket = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let mut covered = self.covered.subscribe();
        self.read_now.notify_one();
        let _ = covered.wait_for(|c| *c >= ticket).await;
    }

    /// The address the site's table refused `mac` since it was last asked, if any.
    pub fn take_conflict(&self, mac: Mac) -> Option<Ipv4Addr> {
        let mut c = self.conflicts.lock().unwrap_or_else(|e| e.into_inner());
        if c.is_empty() {
            return None;
        }
        c.remove(&mac)
    }

    /// Until `shutdown`: the spool written and the others' rows read every `EVERY`.
    pub async fn keep(self: Arc<SharedLeases>, shutdown: Shutdown) {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The table is made once the database answers (it may be down at start).
        let mut made = false;
        loop {
            tokio::select! {
                _ = shutdown.wait() => break,
                _ = tick.tick() => {}
                _ = self.send_now.notified() => {
                    self.send().await;
                    continue;
                }
                _ = self.read_now.notified() => {
                    self.read().await;
                    continue;
                }
            }
            if !made {
                made = self.db.schema().await.is_ok();
            }
            self.send().await;
            self.read().await;
        }
        // A clean stop: one last try, what is left stays spooled.
        self.send().await;
    }

    /// Writes what is spooled, in order, until the database fails; marks done what it took.
    async fn send(&self) {
        let pending = self
            .outbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .spool
            .pending();
        if pending.is_empty() {
            return;
        }
        let (me, now) = (&self.site.me().name, unix_now());
        let (done, failed) = write_in_order(pending, |c| self.write(c, me, now)).await;
        let mut out = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = out.spool.done(&done) {
            tracing::error!(error = %e, "lease spool not rewritten");
        }
        let left = out.spool.len();
        drop(out);
        static DOWN: crate::log_limit::LogLimit = crate::log_limit::LogLimit::new();
        say_sent("site_leases", done.len(), left, failed, &DOWN);
    }

    /// Writes one spooled change as member `me` at `now`. A row the table refused (another
    /// client holds its address there) is written as far as the spool goes: counted, kept
    /// in `conflicts` for the DHCP service, not sent again.
    async fn write(&self, change: Change, me: &str, now: u64) -> anyhow::Result<()> {
        let row = match change {
            Change::Delete { mac, subnet } => return self.db.delete(mac, &subnet, me).await,
            Change::Put(row) => row,
        };
        if let Put::Conflict { holder } = self.db.put(&row, now).await? {
            self.metrics.dhcp().lease_conflicts.inc();
            tracing::warn!(mac = %row.mac, ip = %row.ip, %holder,
                "lease refused by the site's table: another client holds the \
                 address there; withdrawn at this client's next exchange");
            self.conflicts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(row.mac, row.ip);
        }
        Ok(())
    }

    /// Reads the others' rows into the share, with this member's place among the live.
    async fn read(&self) {
        let tickets = self.asked.load(Ordering::SeqCst);
        let now = unix_now();
        match self.db.others(&self.site.me().name, now).await {
            Ok(rows) => {
                self.set_share(|_, place, n| Share::new(place, n, rows.iter().map(Row::held)))
            }
            // As last read, with the members the site's view has (frozen as well).
            Err(_) => self.set_share(|old, place, n| old.with_members(place, n)),
        }
        self.covered.send_if_modified(|c| {
            let newer = tickets > *c;
            *c = (*c).max(tickets);
            newer
        });
    }

    /// Replaces the share by `make(old, place, live)`.
    fn set_share(&self, make: impl FnOnce(&Share, usize, usize) -> Share) {
        let (place, members) = self.site.place();
        let mut share = self.share.write().unwrap_or_else(|e| e.into_inner());
        let new = make(&share, place, members);
        if new != **share {
            if !share.is_for(place, members) {
                tracing::info!(
                    place,
                    members,
                    "this member's part of the lease ranges changed"
                );
            }
            *share = Arc::new(new);
        }
    }
}

/// Seconds since the Unix epoch, as lease times are kept.
pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

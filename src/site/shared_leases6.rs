//! One member's DHCPv6 bindings in the site, running, as `shared_leases` runs DHCPv4's: the
//! DHCPv6 service hands its bindings to `note` after each answer that changed one (the changes
//! go to `state_dir/leases6.spool`, synced, never to the database on the packet path); `keep`,
//! every `EVERY`, writes the spool to `site_leases6` and reads the other members' rows back
//! into the share the bindings give from (`boot::lease_share`, `Share6`). A database that does
//! not answer leaves the spool growing and the share as last read, with the live members of
//! the site's view (frozen too), so no answer ever waits on it.

use super::db::Db;
use super::lease_spool::{Spool, say_sent, write_in_order};
use super::lease6_rows::{self, Change6, Row6};
use super::leases_db::Put;
use super::leases6_db::Leases6Db;
use super::live::Site;
use crate::boot::lease_share::Share6;
use crate::boot::leases6::Leases6;
use crate::config::{Config, Database, Mac};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use std::collections::BTreeMap;
use std::net::Ipv6Addr;
use std::sync::{Arc, Mutex, RwLock};

pub use super::shared_leases::EVERY;

/// The spool and the rows it was last given, under one lock.
struct Outbox {
    spool: Spool<Change6>,
    /// The rows as the last `note` saw them, by client.
    sent: BTreeMap<Mac, Row6>,
}

/// A member's part in the site's DHCPv6 bindings. Shared by the DHCPv6 service and its task.
pub struct SharedLeases6 {
    site: Arc<Site>,
    db: Leases6Db,
    outbox: Mutex<Outbox>,
    /// What the bindings may give, as last read.
    share: RwLock<Arc<Share6>>,
    /// Bindings the table refused (another client's row holds the address), by client.
    conflicts: Mutex<BTreeMap<Mac, Ipv6Addr>>,
    metrics: Metrics,
}

impl std::fmt::Debug for SharedLeases6 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLeases6")
            .field("member", &self.site.me().name)
            .finish_non_exhaustive()
    }
}

impl SharedLeases6 {
    /// A member's shared bindings, kept until `shutdown`, when `config` names a PostgreSQL
    /// database; `None` alone (the bindings are the member's, as on one server).
    pub fn start(
        config: &Config,
        site: &Arc<Site>,
        metrics: &Metrics,
        shutdown: &Shutdown,
    ) -> anyhow::Result<Option<Arc<SharedLeases6>>> {
        let Database::Postgres(url) = &config.server.database else {
            return Ok(None);
        };
        if !site.shared() {
            return Ok(None);
        }
        let db = Leases6Db::new(Db::connect(url)?);
        let shared = SharedLeases6::open(site.clone(), db, &config.server.state_dir, metrics)?;
        shutdown.spawn(shared.clone().keep(shutdown.clone()));
        Ok(Some(shared))
    }

    /// The shared bindings of member `site.me()`, its spool in `state_dir`.
    fn open(
        site: Arc<Site>,
        db: Leases6Db,
        state_dir: &std::path::Path,
        metrics: &Metrics,
    ) -> anyhow::Result<Arc<SharedLeases6>> {
        let spool = Spool::<Change6>::open(state_dir).map_err(|e| {
            anyhow::anyhow!(
                "opening {}: {e}",
                state_dir.join(super::lease_spool::SPOOL6).display()
            )
        })?;
        if !spool.is_empty() {
            tracing::info!(
                changes = spool.len(),
                "DHCPv6 binding changes spooled for the site's table"
            );
        }
        let shared = SharedLeases6 {
            site,
            db,
            outbox: Mutex::new(Outbox {
                spool,
                sent: BTreeMap::new(),
            }),
            share: RwLock::new(Arc::new(Share6::default())),
            conflicts: Mutex::new(BTreeMap::new()),
            metrics: metrics.clone(),
        };
        shared.set_share(|_, place, n| Share6::new(place, n, []));
        Ok(Arc::new(shared))
    }

    /// What the bindings may give now: the others' bindings as last read, this member's part
    /// by the live members as the site's view has them now.
    pub fn share(&self) -> Arc<Share6> {
        let (place, members) = self.site.place();
        let share = self.share.read().unwrap_or_else(|e| e.into_inner()).clone();
        if share.is_for(place, members) {
            return share;
        }
        self.set_share(|old, place, n| old.with_members(place, n));
        self.share.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Spools what `table` changed since the last call, at `now` (synced before it returns).
    pub fn note(&self, table: &Leases6, now: u64) -> std::io::Result<()> {
        let mut out = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        let Outbox { spool, sent } = &mut *out;
        let changes = lease6_rows::diff(sent, table, &self.site.me().name, now);
        spool.add(changes)
    }

    /// The address the site's table refused `mac` since it was last asked, if any.
    pub fn take_conflict(&self, mac: Mac) -> Option<Ipv6Addr> {
        let mut c = self.conflicts.lock().unwrap_or_else(|e| e.into_inner());
        if c.is_empty() {
            return None;
        }
        c.remove(&mac)
    }

    /// Until `shutdown`: the spool written and the others' rows read every `EVERY`.
    pub async fn keep(self: Arc<SharedLeases6>, shutdown: Shutdown) {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The table is made once the database answers (it may be down at start).
        let mut made = false;
        loop {
            tokio::select! {
                _ = shutdown.wait() => break,
                _ = tick.tick() => {}
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
        let (me, now) = (&self.site.me().name, super::shared_leases::unix_now());
        let (done, failed) = write_in_order(pending, |c| self.write(c, me, now)).await;
        let mut out = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = out.spool.done(&done) {
            tracing::error!(error = %e, "DHCPv6 lease spool not rewritten");
        }
        let left = out.spool.len();
        drop(out);
        static DOWN: crate::log_limit::LogLimit = crate::log_limit::LogLimit::new();
        say_sent("site_leases6", done.len(), left, failed, &DOWN);
    }

    /// Writes one spooled change as member `me` at `now`. A binding the table refused
    /// (another client holds its address there) is written as far as the spool goes:
    /// counted, kept in `conflicts` for the DHCPv6 service, not sent again.
    async fn write(&self, change: Change6, me: &str, now: u64) -> anyhow::Result<()> {
        let row = match change {
            Change6::Delete { mac } => return self.db.delete(mac, me).await,
            Change6::Put(row) => row,
        };
        if let Put::Conflict { holder } = self.db.put(&row, now).await? {
            self.metrics.dhcp().lease_conflicts.inc();
            tracing::warn!(mac = %row.mac, addr = %row.addr, %holder,
                "DHCPv6 binding refused by the site's table: another client holds \
                 the address there; withdrawn at this client's next exchange");
            self.conflicts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(row.mac, row.addr);
        }
        Ok(())
    }

    /// Reads the others' rows into the share, with this member's place among the live.
    async fn read(&self) {
        let now = super::shared_leases::unix_now();
        match self.db.others(&self.site.me().name, now).await {
            Ok(rows) => {
                self.set_share(|_, place, n| Share6::new(place, n, rows.iter().map(Row6::held)))
            }
            // As last read, with the members the site's view has (frozen as well).
            Err(_) => self.set_share(|old, place, n| old.with_members(place, n)),
        }
    }

    /// Replaces the share by `make(old, place, live)`.
    fn set_share(&self, make: impl FnOnce(&Share6, usize, usize) -> Share6) {
        let (place, members) = self.site.place();
        let mut share = self.share.write().unwrap_or_else(|e| e.into_inner());
        let new = make(&share, place, members);
        if new != **share {
            if !share.is_for(place, members) {
                tracing::info!(
                    place,
                    members,
                    "this member's part of the DHCPv6 range changed"
                );
            }
            *share = Arc::new(new);
        }
    }
}

//! The site's DHCPv6 bindings in PostgreSQL, the table `site_leases6`: one row per client
//! (`lease6_rows::Row6`), the address unique across every row, so that the database itself
//! refuses one address to two clients whatever the members believe. A table of its own beside
//! `site_leases` (docs/site.md, "Leases"). Only I/O, every call bounded (`db::TIMEOUT`); what
//! is sent when is `shared_leases6`'.

use super::db::{Db, bounded};
use super::lease6_rows::Row6;
use super::leases_db::{Put, secs, unique_violation};
use crate::config::Mac;
use anyhow::Context as _;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS site_leases6 (mac TEXT PRIMARY KEY, \
    ip TEXT NOT NULL UNIQUE, expires BIGINT NOT NULL, duid TEXT NOT NULL, \
    member TEXT NOT NULL)";

/// The table's connections (a pool of their own).
#[derive(Clone, Debug)]
pub struct Leases6Db {
    db: Db,
}

impl Leases6Db {
    pub fn new(db: Db) -> Leases6Db {
        Leases6Db { db }
    }

    /// Makes the table if it is not there yet.
    pub async fn schema(&self) -> anyhow::Result<()> {
        bounded(sqlx::query(SCHEMA).execute(self.db.pool()))
            .await
            .context("creating the site_leases6 table")?;
        Ok(())
    }

    /// Writes `row` at `now` (seconds since the epoch): an ended row of another client on its
    /// address is deleted first; the client's own row is replaced unless that row ends later
    /// and another member wrote it (a member back from a stop never undoes a survivor's
    /// renewal).
    pub async fn put(&self, row: &Row6, now: u64) -> anyhow::Result<Put> {
        let (mac, ip) = (row.mac.to_string(), row.addr.to_string());
        let q =
            sqlx::query("DELETE FROM site_leases6 WHERE ip = $1 AND mac <> $2 AND expires <= $3")
                .bind(&ip)
                .bind(&mac)
                .bind(secs(now))
                .execute(self.db.pool());
        bounded(q)
            .await
            .context("freeing an ended binding's address")?;
        let q = sqlx::query(
            "INSERT INTO site_leases6 (mac, ip, expires, duid, member) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (mac) DO UPDATE SET ip = excluded.ip, \
             expires = excluded.expires, duid = excluded.duid, member = excluded.member \
             WHERE site_leases6.member = excluded.member \
             OR site_leases6.expires <= excluded.expires",
        )
        .bind(&mac)
        .bind(&ip)
        .bind(secs(row.expires))
        .bind(&row.duid)
        .bind(&row.member)
        .execute(self.db.pool());
        match bounded(q).await {
            Ok(_) => Ok(Put::Written),
            Err(e) if unique_violation(&e) => {
                let q =
                    sqlx::query_as::<_, (String,)>("SELECT mac FROM site_leases6 WHERE ip = $1")
                        .bind(&ip)
                        .fetch_optional(self.db.pool());
                let holder = bounded(q).await.ok().flatten().map(|(m,)| m);
                Ok(Put::Conflict {
                    holder: holder.unwrap_or_default(),
                })
            }
            Err(e) => Err(e.context("writing a DHCPv6 binding")),
        }
    }

    /// Deletes `mac`'s row if `member` wrote it last.
    pub async fn delete(&self, mac: Mac, member: &str) -> anyhow::Result<()> {
        let q = sqlx::query("DELETE FROM site_leases6 WHERE mac = $1 AND member = $2")
            .bind(mac.to_string())
            .bind(member)
            .execute(self.db.pool());
        bounded(q).await.context("deleting a DHCPv6 binding")?;
        Ok(())
    }

    /// The rows other members wrote that end after `now`.
    pub async fn others(&self, member: &str, now: u64) -> anyhow::Result<Vec<Row6>> {
        type R = (String, String, i64, String, String);
        let q = sqlx::query_as::<_, R>(
            "SELECT mac, ip, expires, duid, member FROM site_leases6 \
             WHERE member <> $1 AND expires > $2",
        )
        .bind(member)
        .bind(secs(now))
        .fetch_all(self.db.pool());
        let rows = bounded(q)
            .await
            .context("reading the site's DHCPv6 bindings")?;
        rows.into_iter()
            .map(|(mac, ip, expires, duid, member)| {
                let what = |key: &str| format!("site_leases6 row {mac}: {key}");
                Ok(Row6 {
                    mac: mac
                        .parse()
                        .map_err(|e| anyhow::anyhow!("{e}"))
                        .with_context(|| what("mac"))?,
                    addr: ip.parse().with_context(|| what("ip"))?,
                    expires: u64::try_from(expires).unwrap_or(0),
                    duid,
                    member,
                })
            })
            .collect()
    }
}

//! The site's leases in PostgreSQL, the table `site_leases`: one row per client per subnet
//! (`lease_rows::Row`), the address unique across every row, so that the database itself
//! refuses one address to two clients whatever the members believe. Only I/O, every call
//! bounded (`db::TIMEOUT`); what is sent when is `shared_leases`'.

use super::db::{Db, bounded};
use super::lease_rows::Row;
use crate::config::Mac;
use anyhow::Context as _;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS site_leases (mac TEXT NOT NULL, \
    subnet TEXT NOT NULL, ip TEXT NOT NULL UNIQUE, expires BIGINT NOT NULL, link TEXT, \
    member TEXT NOT NULL, PRIMARY KEY (mac, subnet))";

/// What became of a row sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    /// Written (or an older row of the client's kept: a later end wins).
    Written,
    /// Another client's unexpired row holds the address: this one is refused.
    Conflict { holder: String },
}

/// The table's connections (a pool of their own, apart from the heartbeats').
#[derive(Clone, Debug)]
pub struct LeasesDb {
    db: Db,
}

impl LeasesDb {
    pub fn new(db: Db) -> LeasesDb {
        LeasesDb { db }
    }

    /// Makes the table if it is not there yet.
    pub async fn schema(&self) -> anyhow::Result<()> {
        bounded(sqlx::query(SCHEMA).execute(self.db.pool()))
            .await
            .context("creating the site_leases table")?;
        Ok(())
    }

    /// Writes `row` at `now` (seconds since the epoch): an ended row of another client on its
    /// address is deleted first; the client's own row is replaced unless that row ends later
    /// and another member wrote it (a member back from a stop never undoes a survivor's
    /// renewal).
    pub async fn put(&self, row: &Row, now: u64) -> anyhow::Result<Put> {
        let (mac, ip) = (row.mac.to_string(), row.ip.to_string());
        let q = sqlx::query(
            "DELETE FROM site_leases WHERE ip = $1 AND NOT (mac = $2 AND subnet = $3) \
             AND expires <= $4",
        )
        .bind(&ip)
        .bind(&mac)
        .bind(&row.subnet)
        .bind(secs(now))
        .execute(self.db.pool());
        bounded(q)
            .await
            .context("freeing an ended lease's address")?;
        let q = sqlx::query(
            "INSERT INTO site_leases (mac, subnet, ip, expires, link, member) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (mac, subnet) DO UPDATE SET ip = excluded.ip, \
             expires = excluded.expires, link = excluded.link, member = excluded.member \
             WHERE site_leases.member = excluded.member \
             OR site_leases.expires <= excluded.expires",
        )
        .bind(&mac)
        .bind(&row.subnet)
        .bind(&ip)
        .bind(secs(row.expires))
        .bind(row.link.map(|l| l.to_string()))
        .bind(&row.member)
        .execute(self.db.pool());
        match bounded(q).await {
            Ok(_) => Ok(Put::Written),
            Err(e) if unique_violation(&e) => {
                let q = sqlx::query_as::<_, (String,)>("SELECT mac FROM site_leases WHERE ip = $1")
                    .bind(&ip)
                    .fetch_optional(self.db.pool());
                let holder = bounded(q).await.ok().flatten().map(|(m,)| m);
                Ok(Put::Conflict {
                    holder: holder.unwrap_or_default(),
                })
            }
            Err(e) => Err(e.context("writing a lease")),
        }
    }

    /// Deletes `mac`'s row on `subnet` if `member` wrote it last.
    pub async fn delete(&self, mac: Mac, subnet: &str, member: &str) -> anyhow::Result<()> {
        let q =
            sqlx::query("DELETE FROM site_leases WHERE mac = $1 AND subnet = $2 AND member = $3")
                .bind(mac.to_string())
                .bind(subnet)
                .bind(member)
                .execute(self.db.pool());
        bounded(q).await.context("deleting a lease")?;
        Ok(())
    }

    /// The rows other members wrote that end after `now`.
    pub async fn others(&self, member: &str, now: u64) -> anyhow::Result<Vec<Row>> {
        type R = (String, String, String, i64, Option<String>, String);
        let q = sqlx::query_as::<_, R>(
            "SELECT mac, subnet, ip, expires, link, member FROM site_leases \
             WHERE member <> $1 AND expires > $2",
        )
        .bind(member)
        .bind(secs(now))
        .fetch_all(self.db.pool());
        let rows = bounded(q).await.context("reading the site's leases")?;
        rows.into_iter()
            .map(|(mac, subnet, ip, expires, link, member)| {
                let what = |key: &str| format!("site_leases row {mac} {subnet}: {key}");
                Ok(Row {
                    mac: mac
                        .parse()
                        .map_err(|e| anyhow::anyhow!("{e}"))
                        .with_context(|| what("mac"))?,
                    ip: ip.parse().with_context(|| what("ip"))?,
                    expires: u64::try_from(expires).unwrap_or(0),
                    link: link
                        .map(|l| l.parse())
                        .transpose()
                        .with_context(|| what("link"))?,
                    subnet,
                    member,
                })
            })
            .collect()
    }
}

pub(super) fn secs(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

/// PostgreSQL's unique_violation (23505): the address is another row's.
pub(super) fn unique_violation(e: &anyhow::Error) -> bool {
    e.downcast_ref::<sqlx::Error>()
        .and_then(|e| e.as_database_error())
        .and_then(|d| d.code())
        .is_some_and(|c| c == "23505")
}

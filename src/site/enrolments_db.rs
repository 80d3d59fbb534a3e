//! The site's enrolments in PostgreSQL, the table `site_enrolments`: one row per entry of the
//! enrolments file, by its key (the MAC), with the member that wrote it last. Only I/O, every
//! call bounded (`db::TIMEOUT`); what is sent when is `enrolments`'.

use super::db::{Db, bounded};
use super::enrol_rows::{Change, Rows};
use crate::config::enrolments::Entry;
use anyhow::Context as _;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS site_enrolments (key TEXT PRIMARY KEY, \
    pool TEXT NOT NULL, entry TEXT NOT NULL, member TEXT NOT NULL, \
    written TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())";

/// The table's connections.
#[derive(Clone, Debug)]
pub struct EnrolmentsDb {
    db: Db,
}

impl EnrolmentsDb {
    pub fn new(db: Db) -> EnrolmentsDb {
        EnrolmentsDb { db }
    }

    /// Makes the table if it is not there yet, under the site's advisory lock (members
    /// starting at once on a fresh database).
    pub async fn schema(&self) -> anyhow::Result<()> {
        let stmts = [SCHEMA.to_string()];
        bounded_any(crate::record::store::create_shared_tables(
            self.db.pool(),
            &stmts,
        ))
        .await
        .context("creating the site_enrolments table")
    }

    /// Sends `changes` in one transaction, as `member`'s: all written, or none.
    pub async fn send(&self, changes: &[Change], member: &str) -> anyhow::Result<()> {
        let work = async {
            let mut tx = self.db.pool().begin().await?;
            for c in changes {
                match c {
                    Change::Delete(key) => {
                        sqlx::query("DELETE FROM site_enrolments WHERE key = $1")
                            .bind(key)
                            .execute(&mut *tx)
                            .await?;
                    }
                    Change::Put(entry) => {
                        sqlx::query(
                            "INSERT INTO site_enrolments (key, pool, entry, member) \
                             VALUES ($1, $2, $3, $4) ON CONFLICT (key) DO UPDATE SET \
                             pool = excluded.pool, entry = excluded.entry, \
                             member = excluded.member, written = clock_timestamp()",
                        )
                        .bind(entry.key())
                        .bind(&entry.pool)
                        .bind(serde_json::to_string(entry).unwrap_or_default())
                        .bind(member)
                        .execute(&mut *tx)
                        .await?;
                    }
                }
            }
            tx.commit().await
        };
        bounded(work).await.context("writing the site's enrolments")
    }

    /// Every row, by key.
    pub async fn all(&self) -> anyhow::Result<Rows> {
        let q = sqlx::query_as::<_, (String, String)>("SELECT key, entry FROM site_enrolments")
            .fetch_all(self.db.pool());
        let rows = bounded(q).await.context("reading the site's enrolments")?;
        rows.into_iter()
            .map(|(key, entry)| {
                let e: Entry = serde_json::from_str(&entry)
                    .with_context(|| format!("site_enrolments row {key}: entry"))?;
                Ok((key, e))
            })
            .collect()
    }
}

/// `f`, or an error once `db::TIMEOUT` has passed.
async fn bounded_any<T>(
    f: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(super::db::TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => anyhow::bail!(
            "the database did not answer within {:?}",
            super::db::TIMEOUT
        ),
    }
}

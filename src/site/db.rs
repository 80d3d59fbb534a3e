//! The site's rows in PostgreSQL: the `site_members` table, one row per member, each member
//! writing its own (its heartbeat, by the database's clock) and reading everyone's. Only I/O:
//! who is live and who answers whom is `owners`'. Every call is bounded by `TIMEOUT`, so a
//! slow or absent database is an error soon, never a wait.

use super::member::{Member, Seen};
use crate::steer::placement::Published;
use anyhow::Context as _;
use sqlx::postgres::{PgPool, PgPoolOptions};
use std::time::Duration;

/// The longest a heartbeat or a read may take before it counts as failed.
pub const TIMEOUT: Duration = Duration::from_millis(1500);

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS site_members (name TEXT PRIMARY KEY, \
    instance TEXT NOT NULL, addresses TEXT NOT NULL, links TEXT NOT NULL, rooms TEXT NOT NULL, \
    http TEXT NOT NULL, started BIGINT NOT NULL, heartbeat TIMESTAMPTZ NOT NULL)";

/// The members' load, written with each heartbeat (JSON, `steer::placement::Published`): a
/// column added to a table made before it.
const LOAD_COLUMN: &str =
    "ALTER TABLE site_members ADD COLUMN IF NOT EXISTS load TEXT NOT NULL DEFAULT '[]'";

/// A connection pool to the site's database.
#[derive(Clone, Debug)]
pub struct Db {
    pool: PgPool,
}

/// The outcome of a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// The row is this process's.
    Written,
    /// Another process holds the name and beat within `owners::DEAD_AFTER`.
    NameTaken,
}

impl Db {
    /// Connects to `url` (lazily: a database down at start is a failed heartbeat, not a
    /// failed start) and makes the table once it answers.
    pub fn connect(url: &str) -> anyhow::Result<Db> {
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(TIMEOUT)
            .connect_lazy(url)
            .context("reading server.database's URL")?;
        Ok(Db { pool })
    }

    /// Connects and makes the table now (`bootpool site`).
    pub async fn open(url: &str) -> anyhow::Result<Db> {
        let db = Db::connect(url)?;
        db.schema().await?;
        Ok(db)
    }

    /// The connections, for the other tables of the site (`conns`, `leases_db`).
    pub(super) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Makes the table if it is not there yet.
    pub async fn schema(&self) -> anyhow::Result<()> {
        bounded(sqlx::query(SCHEMA).execute(&self.pool))
            .await
            .context("creating the site_members table")?;
        bounded(sqlx::query(LOAD_COLUMN).execute(&self.pool))
            .await
            .context("adding site_members' load column")?;
        Ok(())
    }

    /// Writes `me`'s row with the database's time as its heartbeat and `load` as its load,
    /// unless another process (`instance` differs) holds the name and beat within
    /// `dead_after`.
    pub async fn beat(
        &self,
        me: &Member,
        load: &[Published],
        instance: &str,
        dead_after: Duration,
    ) -> anyhow::Result<Beat> {
        let q = sqlx::query(
            "INSERT INTO site_members (name, instance, addresses, links, rooms, http, started, heartbeat, load) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, clock_timestamp(), $9) \
             ON CONFLICT (name) DO UPDATE SET instance = excluded.instance, \
             addresses = excluded.addresses, links = excluded.links, rooms = excluded.rooms, \
             http = excluded.http, started = excluded.started, heartbeat = excluded.heartbeat, \
             load = excluded.load \
             WHERE site_members.instance = excluded.instance \
             OR site_members.heartbeat < clock_timestamp() - make_interval(secs => $8)",
        )
        .bind(&me.name)
        .bind(instance)
        .bind(json(&me.addresses))
        .bind(json(&me.links))
        .bind(json(&me.rooms))
        .bind(&me.http)
        .bind(me.started)
        .bind(dead_after.as_secs_f64())
        .bind(json(&load))
        .execute(&self.pool);
        let done = bounded(q)
            .await
            .context("writing this member's heartbeat")?;
        Ok(match done.rows_affected() {
            0 => Beat::NameTaken,
            _ => Beat::Written,
        })
    }

    /// A clean stop: the row is marked as long dead, so the others take its clients at their
    /// next read instead of after `DEAD_AFTER`.
    pub async fn leave(&self, name: &str, instance: &str) -> anyhow::Result<()> {
        let q = sqlx::query(
            "UPDATE site_members SET heartbeat = to_timestamp(0) WHERE name = $1 AND instance = $2",
        )
        .bind(name)
        .bind(instance)
        .execute(&self.pool);
        bounded(q).await.context("leaving the site")?;
        Ok(())
    }

    /// Every member's row, with its heartbeat's age by the database's clock.
    pub async fn members(&self) -> anyhow::Result<Vec<Seen>> {
        type Row = (
            String,
            String,
            String,
            String,
            String,
            i64,
            i64,
            f64,
            String,
        );
        let q = sqlx::query_as::<_, Row>(
            "SELECT name, addresses, links, rooms, http, started, \
             (EXTRACT(EPOCH FROM heartbeat) * 1000000)::BIGINT, \
             EXTRACT(EPOCH FROM (clock_timestamp() - heartbeat))::FLOAT8, load \
             FROM site_members ORDER BY name",
        )
        .fetch_all(&self.pool);
        let rows = bounded(q).await.context("reading the site's members")?;
        rows.into_iter()
            .map(
                |(name, addresses, links, rooms, http, started, heartbeat, age_s, load)| {
                    let what = |key: &str| format!("site_members row {name}: {key}");
                    let load = serde_json::from_str(&load).with_context(|| what("load"))?;
                    Ok(Seen {
                        member: Member {
                            addresses: serde_json::from_str(&addresses)
                                .with_context(|| what("addresses"))?,
                            links: serde_json::from_str(&links).with_context(|| what("links"))?,
                            rooms: serde_json::from_str(&rooms).with_context(|| what("rooms"))?,
                            name,
                            http,
                            started,
                        },
                        heartbeat,
                        age_s,
                        load,
                    })
                },
            )
            .collect()
    }
}

/// `f`, or an error once `TIMEOUT` has passed.
pub(super) async fn bounded<T>(
    f: impl std::future::Future<Output = Result<T, sqlx::Error>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(TIMEOUT, f).await {
        Ok(r) => Ok(r?),
        Err(_) => anyhow::bail!("the database did not answer within {TIMEOUT:?}"),
    }
}

/// A row's list, stored as JSON text.
fn json(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

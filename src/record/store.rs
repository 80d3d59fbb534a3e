//! The boot record store: the raw typed events and the egress samples, in SQLite (embedded,
//! `state_dir/records.db`, the default) or PostgreSQL (`server.database: postgres://...`), through
//! sqlx. Both hold the same two tables; each row keeps the event's time and client as columns and
//! the whole typed event as JSON, so the timelines are rebuilt from it exactly (replay).
//!
//! Only the record writer task writes here (`mod.rs`); the API never reads the store, it reads
//! the timelines in memory. Also here: the one-time import of a legacy JSON-lines journal.
//!
//! A damaged SQLite file (SQLite says it is not a database, or malformed) is an error naming
//! the file and saying to move it aside; a new empty store is never made over it.

use super::egress::Saved;
use super::event::{Event, Micros, Who};
use crate::config::Database;
use anyhow::Context as _;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

/// Rows per INSERT statement: well under both engines' bound-parameter limits.
const ROWS_PER_INSERT: usize = 1000;
/// Rows per page when replaying, so a long history is not held twice in memory.
const PAGE: i64 = 20_000;
const LEGACY_EVENTS: &str = "events.jsonl";
const LEGACY_EGRESS: &str = "egress.jsonl";

/// A connection pool to one of the two engines. Cheap to clone.
#[derive(Clone, Debug)]
pub enum Store {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs the same body against whichever pool this is: the queries are the same text, with
/// `$N` placeholders, which both engines read.
macro_rules! on_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match $store {
            Store::Sqlite($pool) => $body,
            Store::Postgres($pool) => $body,
        }
    };
}

/// The schema; only the key column is spelt differently.
fn schema(id: &str) -> [String; 6] {
    [
        format!(
            "CREATE TABLE IF NOT EXISTS events (id {id}, at BIGINT NOT NULL, mac TEXT, ip TEXT, \
             event TEXT NOT NULL, body TEXT NOT NULL)"
        ),
        "CREATE INDEX IF NOT EXISTS events_at ON events (at)".into(),
        format!(
            "CREATE TABLE IF NOT EXISTS egress (id {id}, t DOUBLE PRECISION NOT NULL, body TEXT NOT NULL)"
        ),
        "CREATE INDEX IF NOT EXISTS egress_t ON egress (t)".into(),
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)".into(),
        // Added with the consoles (issue 19); an older store gains it at its next open. One row
        // per boot (its client and first DISCOVER), the bounded console as JSON, rewritten
        // while the boot's client talks.
        "CREATE TABLE IF NOT EXISTS console (mac TEXT NOT NULL, boot_start BIGINT NOT NULL, \
         at BIGINT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (mac, boot_start))"
            .into(),
    ]
}

/// One event as a row.
struct Row {
    at: i64,
    mac: Option<String>,
    ip: Option<String>,
    event: &'static str,
    body: String,
}

impl Row {
    fn of(ev: &Event) -> Option<Row> {
        let (mac, ip) = match ev.who {
            Who::Mac(m) => (Some(m.to_string()), None),
            Who::Ip(i) => (None, Some(i.to_string())),
        };
        Some(Row {
            at: ev.at,
            mac,
            ip,
            event: ev.kind.name(),
            body: serde_json::to_string(ev).ok()?,
        })
    }
}

impl Store {
    /// Opens (creating if needed) the store and its tables. SQLite runs in WAL mode with
    /// `synchronous=NORMAL`: a committed batch survives the process being killed.
    pub async fn open(db: &Database) -> anyhow::Result<Store> {
        let store = Store::lazy(db).await?;
        store.prepare(db).await?;
        Ok(store)
    }

    /// The store's pool without waiting for PostgreSQL: its connections are made when first
    /// used, so a database that is down or unreachable is an error of the first query, not of
    /// the daemon's start (`prepare` then makes the tables). SQLite is opened at once (a file
    /// here). An error only for a URL of a wrong form, or an SQLite file that cannot be opened.
    pub async fn lazy(db: &Database) -> anyhow::Result<Store> {
        Ok(match db {
            Database::Sqlite(path) => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                }
                let opts = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(Duration::from_secs(10));
                let pool = SqlitePoolOptions::new()
                    .max_connections(2)
                    .connect_with(opts)
                    .await
                    .map_err(|e| {
                        let what =
                            anyhow::Error::new(e).context(format!("opening {}", path.display()));
                        damaged(db, what)
                    })?;
                Store::Sqlite(pool)
            }
            Database::Postgres(url) => {
                let pool = PgPoolOptions::new()
                    .max_connections(2)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect_lazy(url)
                    .with_context(|| format!("reading {}", redact(url)))?;
                Store::Postgres(pool)
            }
        })
    }

    /// Makes the tables that are missing (and, in PostgreSQL, the events' `member` column):
    /// the first use of a `lazy` store, which fails while PostgreSQL does not answer.
    pub async fn prepare(&self, db: &Database) -> anyhow::Result<()> {
        let store = self;
        let id = match store {
            Store::Sqlite(_) => "INTEGER PRIMARY KEY",
            Store::Postgres(_) => "BIGSERIAL PRIMARY KEY",
        };
        match &store {
            Store::Sqlite(p) => {
                for stmt in schema(id) {
                    sqlx::query(&stmt)
                        .execute(p)
                        .await
                        .map_err(|e| damaged(db, e.into()))
                        .with_context(|| format!("creating the record tables ({stmt})"))?;
                }
            }
            Store::Postgres(p) => {
                let mut stmts = schema(id).to_vec();
                // Which member wrote each event (issue 46): the others' rows are what a
                // member follows (`follow`). Added to a store made before it.
                stmts.push("ALTER TABLE events ADD COLUMN IF NOT EXISTS member TEXT".into());
                let Database::Postgres(url) = db else {
                    anyhow::bail!("a PostgreSQL pool for an SQLite store");
                };
                create_shared_tables(p, &stmts)
                    .await
                    .with_context(|| format!("creating the record tables in {}", redact(url)))?
            }
        }
        Ok(())
    }

    /// Opens an existing store for reading only (`bootpool report`): `None` when an SQLite file
    /// does not exist yet, so a report never creates one.
    pub async fn open_existing(db: &Database) -> anyhow::Result<Option<Store>> {
        if let Database::Sqlite(path) = db
            && !path.exists()
        {
            return Ok(None);
        }
        Store::open(db).await.map(Some)
    }

    /// Appends events and egress samples in one transaction.
    pub async fn append(&self, events: &[Event], egress: &[Saved]) -> anyhow::Result<()> {
        self.append_as(None, events, egress).await
    }

    /// `append`, the events marked in PostgreSQL as written by site member `member` (SQLite
    /// has no site and no such column).
    pub async fn append_as(
        &self,
        member: Option<&str>,
        events: &[Event],
        egress: &[Saved],
    ) -> anyhow::Result<()> {
        let insert = match self {
            Store::Sqlite(_) => "INSERT INTO events (at, mac, ip, event, body) ",
            Store::Postgres(_) => "INSERT INTO events (at, mac, ip, event, body, member) ",
        };
        let tagged = matches!(self, Store::Postgres(_));
        let rows: Vec<Row> = events.iter().filter_map(Row::of).collect();
        let samples: Vec<(f64, String)> = egress
            .iter()
            .filter_map(|s| Some((s.sample.t, serde_json::to_string(s).ok()?)))
            .collect();
        on_pool!(self, p => {
            let mut tx = p.begin().await?;
            for chunk in rows.chunks(ROWS_PER_INSERT) {
                let mut q = sqlx::QueryBuilder::new(insert);
                q.push_values(chunk, |mut b, r| {
                    b.push_bind(r.at)
                        .push_bind(r.mac.clone())
                        .push_bind(r.ip.clone())
                        .push_bind(r.event)
                        .push_bind(r.body.clone());
                    if tagged {
                        b.push_bind(member);
                    }
                });
                q.build().execute(&mut *tx).await?;
            }
            for (t, body) in &samples {
                sqlx::query("INSERT INTO egress (t, body) VALUES ($1, $2)")
                    .bind(*t)
                    .bind(body)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Every stored event in the order it was recorded, handed to `f` one at a time.
    pub async fn replay(&self, f: impl FnMut(Event)) -> anyhow::Result<usize> {
        self.replay_rows(f).await
    }

    async fn replay_rows(&self, mut f: impl FnMut(Event)) -> anyhow::Result<usize> {
        let mut n = 0;
        self.replay_marked(|_, _, ev| {
            f(ev);
            n += 1;
        })
        .await?;
        Ok(n)
    }

    /// Every stored event in the order recorded, with its row's id and (PostgreSQL) the member
    /// that wrote it; returns the last id (0: none).
    pub async fn replay_marked(
        &self,
        mut f: impl FnMut(i64, Option<String>, Event),
    ) -> anyhow::Result<i64> {
        let mut after = 0i64;
        loop {
            let page: Vec<(i64, Option<String>, String)> =
                match self {
                    Store::Sqlite(p) => sqlx::query_as(
                        "SELECT id, NULL, body FROM events WHERE id > $1 ORDER BY id LIMIT $2",
                    )
                    .bind(after)
                    .bind(PAGE)
                    .fetch_all(p)
                    .await
                    .map_err(|e| damaged_of(p, e.into()))?,
                    Store::Postgres(p) => sqlx::query_as(
                        "SELECT id, member, body FROM events WHERE id > $1 ORDER BY id LIMIT $2",
                    )
                    .bind(after)
                    .bind(PAGE)
                    .fetch_all(p)
                    .await?,
                };
            let Some((last, _, _)) = page.last() else {
                return Ok(after);
            };
            after = *last;
            for (id, member, body) in page {
                if let Some(ev) = event_of(id, &body) {
                    f(id, member, ev);
                }
            }
        }
    }

    /// The events rows of PostgreSQL with an id above `after` or among `gaps` (ids passed
    /// over while their transactions were still open), at most `PAGE`, in id order: each
    /// row's id, its member, and its event unless `me` wrote it (`None`: this member's own,
    /// or unreadable). Nothing from SQLite, which has no site.
    pub async fn events_after(
        &self,
        after: i64,
        gaps: &[i64],
        me: &str,
    ) -> anyhow::Result<Vec<(i64, Option<String>, Option<Event>)>> {
        let Store::Postgres(p) = self else {
            return Ok(Vec::new());
        };
        let rows: Vec<(i64, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT id, member, CASE WHEN member = $3 THEN NULL ELSE body END FROM events \
             WHERE id > $1 OR id = ANY($2) ORDER BY id LIMIT $4",
        )
        .bind(after)
        .bind(gaps)
        .bind(me)
        .bind(PAGE)
        .fetch_all(p)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, member, body)| (id, member, body.and_then(|b| event_of(id, &b))))
            .collect())
    }

    /// Egress samples taken at or after `since` (Unix seconds), oldest first.
    pub async fn egress_since(&self, since: f64) -> anyhow::Result<Vec<Saved>> {
        let rows: Vec<(String,)> = on_pool!(self, p => {
            sqlx::query_as("SELECT body FROM egress WHERE t >= $1 ORDER BY id")
                .bind(since)
                .fetch_all(p)
                .await?
        });
        Ok(rows
            .into_iter()
            .filter_map(|(b,)| serde_json::from_str(&b).ok())
            .collect())
    }

    /// Deletes events and egress samples older than `cutoff`; returns how many of each.
    /// Writes the consoles of these boots (client, first DISCOVER, console as JSON), replacing
    /// what each boot had.
    pub async fn save_consoles(
        &self,
        consoles: &[(String, Micros, Micros, String)],
    ) -> anyhow::Result<()> {
        if consoles.is_empty() {
            return Ok(());
        }
        on_pool!(self, p => {
            let mut tx = p.begin().await?;
            for (mac, start, at, body) in consoles {
                sqlx::query(
                    "INSERT INTO console (mac, boot_start, at, body) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (mac, boot_start) DO UPDATE SET at = excluded.at, body = excluded.body",
                )
                .bind(mac)
                .bind(*start)
                .bind(*at)
                .bind(body)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Every boot's console: (client, first DISCOVER, console as JSON).
    pub async fn consoles(&self) -> anyhow::Result<Vec<(String, Micros, String)>> {
        on_pool!(self, p => {
            let rows: Vec<(String, i64, String)> =
                sqlx::query_as("SELECT mac, boot_start, body FROM console ORDER BY boot_start")
                    .fetch_all(p)
                    .await?;
            Ok(rows)
        })
    }

    pub async fn forget_before(&self, cutoff: Micros) -> anyhow::Result<(u64, u64)> {
        on_pool!(self, p => {
            sqlx::query("DELETE FROM console WHERE at < $1")
                .bind(cutoff)
                .execute(p)
                .await?;
            let events = sqlx::query("DELETE FROM events WHERE at < $1")
                .bind(cutoff)
                .execute(p)
                .await?
                .rows_affected();
            let egress = sqlx::query("DELETE FROM egress WHERE t < $1")
                .bind(cutoff as f64 / 1e6)
                .execute(p)
                .await?
                .rows_affected();
            Ok((events, egress))
        })
    }

    /// Imports `events.jsonl` and `egress.jsonl` from `state_dir` once, into a store that has
    /// never imported and holds no events. Returns the events imported.
    pub async fn import_legacy(&self, state_dir: &Path) -> anyhow::Result<usize> {
        let done: Option<(String,)> = on_pool!(self, p => {
            sqlx::query_as("SELECT value FROM meta WHERE key = 'legacy_import'")
                .fetch_optional(p)
                .await?
        });
        let (count,): (i64,) = on_pool!(self, p => {
            sqlx::query_as("SELECT COUNT(*) FROM events").fetch_one(p).await?
        });
        if done.is_some() || count > 0 {
            return Ok(0);
        }
        let events: Vec<Event> = read_lines(&state_dir.join(LEGACY_EVENTS))?;
        let egress: Vec<Saved> = read_lines(&state_dir.join(LEGACY_EGRESS))?;
        for chunk in events.chunks(ROWS_PER_INSERT * 4) {
            self.append(chunk, &[]).await?;
        }
        for chunk in egress.chunks(ROWS_PER_INSERT) {
            self.append(&[], chunk).await?;
        }
        let note = format!("{} events, {} egress samples", events.len(), egress.len());
        on_pool!(self, p => {
            sqlx::query("INSERT INTO meta (key, value) VALUES ('legacy_import', $1)")
                .bind(&note)
                .execute(p)
                .await
                .map(drop)?
        });
        if !events.is_empty() || !egress.is_empty() {
            tracing::info!(events = events.len(), egress = egress.len(), dir = %state_dir.display(), "imported legacy journal");
        }
        Ok(events.len())
    }
}

/// Runs `stmts` (`CREATE ... IF NOT EXISTS`) in one transaction under an advisory lock of
/// the database: the servers of a site may start at the same moment, and PostgreSQL's `IF NOT
/// EXISTS` is not safe against another session making the same table at once (one of them
/// fails on the catalogue's unique index).
pub async fn create_shared_tables(pool: &sqlx::PgPool, stmts: &[String]) -> anyhow::Result<()> {
    /// The lock's key: "bootpool" in ASCII, the same for every server.
    const KEY: i64 = 0x626f_6f74_706f_6f6c;
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(KEY)
        .execute(&mut *tx)
        .await?;
    for stmt in stmts {
        sqlx::query(stmt)
            .execute(&mut *tx)
            .await
            .with_context(|| format!("({stmt})"))?;
    }
    tx.commit().await?;
    Ok(())
}

/// Reads a JSON-lines file, skipping lines a crash cut short; a missing file is empty.
pub fn read_lines<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<Vec<T>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        match serde_json::from_str(&line) {
            Ok(v) => out.push(v),
            Err(e) => {
                tracing::warn!(path = %path.display(), line = i + 1, error = %e, "skipping damaged journal line")
            }
        }
    }
    Ok(out)
}

/// `e`, or, when SQLite says the file is damaged (SQLITE_CORRUPT, SQLITE_NOTADB), an error
/// that names the file and what to do.
fn damaged(db: &Database, e: anyhow::Error) -> anyhow::Error {
    let Database::Sqlite(path) = db else {
        return e;
    };
    let code = e
        .chain()
        .filter_map(|c| c.downcast_ref::<sqlx::Error>())
        .find_map(|c| match c {
            sqlx::Error::Database(d) => d.code()?.parse::<i32>().ok(),
            _ => None,
        });
    // Primary result codes: 11 SQLITE_CORRUPT, 26 SQLITE_NOTADB (extended codes add high bits).
    if !code.is_some_and(|c| matches!(c & 0xff, 11 | 26)) {
        return e;
    }
    anyhow::anyhow!(
        "{} is damaged ({}); move it aside, with any {name}-wal and {name}-shm beside it, \
         to start with empty boot records",
        path.display(),
        e.root_cause(),
        name = path.file_name().unwrap_or_default().to_string_lossy()
    )
}

/// `damaged`, for the file of SQLite pool `p`.
fn damaged_of(p: &SqlitePool, e: anyhow::Error) -> anyhow::Error {
    damaged(
        &Database::Sqlite(p.connect_options().get_filename().to_owned()),
        e,
    )
}

/// A row's event, or `None` (logged) for a row from a newer bootpool with an event this one
/// does not know.
fn event_of(id: i64, body: &str) -> Option<Event> {
    serde_json::from_str::<Event>(body)
        .map_err(|e| tracing::warn!(id, error = %e, "skipping unreadable event row"))
        .ok()
}

/// A URL without its password, for logs and errors.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].find(':') {
            Some(c) => format!("{}:***{}", &url[..s + 3 + c], &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::event::Kind;

    #[test]
    fn passwords_stay_out_of_logs() {
        assert_eq!(
            redact("postgres://boot:s3cret@db:5432/records"),
            "postgres://boot:***@db:5432/records"
        );
        assert_eq!(redact("postgres://db/records"), "postgres://db/records");
    }

    #[tokio::test]
    async fn the_recorded_lab_run_imports_whole_and_once() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab-state");
        let lines = |f: &str| {
            std::fs::read_to_string(fixture.join(f))
                .map(|t| t.lines().filter(|l| !l.trim().is_empty()).count())
                .unwrap_or(0)
        };
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&Database::Sqlite(dir.path().join("r.db")))
            .await
            .unwrap();
        let events = lines(LEGACY_EVENTS);
        assert!(events > 100, "{events}");
        assert_eq!(store.import_legacy(&fixture).await.unwrap(), events);
        let mut n = 0;
        store.replay(|_| n += 1).await.unwrap();
        assert_eq!(n, events);
        let egress = store.egress_since(0.0).await.unwrap();
        assert!(!egress.is_empty());
        assert_eq!(egress.len(), lines(LEGACY_EGRESS));
        // Once: a second start imports nothing, even after everything was forgotten.
        store.forget_before(i64::MAX).await.unwrap();
        assert_eq!(store.import_legacy(&fixture).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_damaged_sqlite_file_is_an_error_naming_it_and_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.db");
        let db = Database::Sqlite(path.clone());
        let check = |e: anyhow::Error| {
            let e = format!("{e:#}");
            assert!(e.contains(&format!("{} is damaged", path.display())), "{e}");
            assert!(e.contains("move it aside"), "{e}");
        };
        // Not a database at all: refused, and left as it was.
        let garbage = pattern_bytes(8192);
        std::fs::write(&path, &garbage).unwrap();
        check(Store::open(&db).await.expect_err("garbage refused"));
        check(
            Store::open_existing(&db)
                .await
                .expect_err("garbage refused"),
        );
        assert_eq!(std::fs::read(&path).unwrap(), garbage);

        // A real store whose pages were overwritten past its header: found out by the replay.
        std::fs::remove_file(&path).unwrap();
        let store = Store::open(&db).await.unwrap();
        let events: Vec<Event> = (0..5000)
            .map(|i| Event {
                at: i,
                who: Who::Ip([10, 0, 0, 1].into()),
                kind: Kind::RootRead {
                    proto: crate::record::Proto::Nfs,
                    bytes: i as u64,
                },
            })
            .collect();
        store.append(&events, &[]).await.unwrap();
        on_pool!(&store, p => sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(p).await.map(drop))
            .unwrap();
        on_pool!(&store, p => p.close().await);
        let mut bytes = std::fs::read(&path).unwrap();
        assert!(bytes.len() > 64 << 10, "{}", bytes.len());
        let tail = bytes.len() - 4096;
        bytes[4096..tail].copy_from_slice(&pattern_bytes(tail - 4096));
        std::fs::write(&path, &bytes).unwrap();
        let e = match Store::open(&db).await {
            Err(e) => e,
            Ok(store) => store.replay(|_| {}).await.expect_err("damage found"),
        };
        check(e);
    }

    fn pattern_bytes(len: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[tokio::test]
    async fn sqlite_keeps_events_in_order_and_forgets_old_ones() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::Sqlite(dir.path().join("r.db"));
        let store = Store::open(&db).await.unwrap();
        let ev = |at, ip: [u8; 4]| Event {
            at,
            who: Who::Ip(ip.into()),
            kind: Kind::RootRead {
                proto: crate::record::Proto::Nfs,
                bytes: at as u64,
            },
        };
        // Out of time order on purpose: replay keeps the order they were recorded in.
        let events: Vec<Event> = (0..2500).map(|i| ev(5000 - i, [10, 0, 0, 1])).collect();
        store.append(&events, &[]).await.unwrap();
        let mut back = Vec::new();
        assert_eq!(store.replay(|e| back.push(e)).await.unwrap(), 2500);
        assert_eq!(back, events);
        assert_eq!(store.forget_before(4000).await.unwrap(), (1499, 0));
        let mut left = 0;
        store.replay(|_| left += 1).await.unwrap();
        assert_eq!(left, 1001);
        // A report of a folder never served opens nothing.
        let none = Database::Sqlite(dir.path().join("absent.db"));
        assert!(Store::open_existing(&none).await.unwrap().is_none());
        assert!(!dir.path().join("absent.db").exists());
    }
}

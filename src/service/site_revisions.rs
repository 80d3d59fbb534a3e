//! Revisions on every server of a site (docs/site.md): with a PostgreSQL `database:`, every
//! few seconds this server records in the `site_revisions` table the revisions it holds of
//! each image and the one it has active (and since when), reads what the others recorded,
//! pulls what it lacks from the servers that hold it (`image::pull`, each object checked), and
//! activates the revision the site has active once it holds it (`image::follow` decides).
//! Running clients keep the revision they booted: an activation changes what boots starting
//! later get, as `bootpool image activate` does. A revision a client asks for and this
//! server lacks (`image::demand`) wakes it at once and is pulled before anything else. A
//! database that does not answer leaves everything as it is until it answers again.

use crate::config::{Config, Database, Image, live::Live};
use crate::image::follow::{self, Action, Local, Row};
use crate::image::{demand, inventory, pull, serve, store, verify};
use crate::shutdown::Shutdown;
use sha2::Digest as _;
use sqlx::Row as _;
use sqlx::postgres::{PgPool, PgPoolOptions};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the table is read and written.
const EVERY: Duration = Duration::from_secs(2);
/// How often every revision held is checked against its manifest (`image::verify`), the
/// first time at the daemon's start.
const VERIFY_EVERY: Duration = Duration::from_secs(3600);
/// How long a pull that failed is not tried again.
const RETRY_AFTER: Duration = Duration::from_secs(30);

const CREATE: &str = "CREATE TABLE IF NOT EXISTS site_revisions (
    image TEXT NOT NULL,
    rev TEXT NOT NULL,
    manifest TEXT NOT NULL,
    server TEXT NOT NULL,
    active BOOLEAN NOT NULL,
    activated_at BIGINT NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (image, rev, server))";

/// Runs while the daemon does, if `database:` is PostgreSQL.
pub async fn run(live: Live, shutdown: Shutdown) {
    let Database::Postgres(url) = live.load().server.database.clone() else {
        return;
    };
    let mut follower = Follower {
        live,
        pool: None,
        url,
        since: now_micros(),
        published: HashMap::new(),
        digests: HashMap::new(),
        failed: HashMap::new(),
        wake: Arc::new(tokio::sync::Notify::new()),
        verified: None,
    };
    let mut said_down = false;
    loop {
        match follower.tick().await {
            Ok(()) => said_down = false,
            Err(e) if !said_down => {
                tracing::warn!(error = %format!("{e:#}"), "site revisions: the database did not answer; revisions stay as they are");
                said_down = true;
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = tokio::time::sleep(EVERY) => {}
            _ = follower.wake.notified() => {}
        }
    }
    let config = follower.live.load();
    demand::stopped(config.images.values().map(|i| i.dir.as_path()));
}

/// Who holds each revision, by `rows`: the members' URLs, those with it active first, this
/// server (`me`) left out.
fn holders(rows: &[Row], me: &str) -> BTreeMap<(String, String), Vec<String>> {
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut sorted: Vec<&Row> = rows.iter().filter(|r| r.server != me).collect();
    sorted.sort_by_key(|r| !r.active);
    for r in sorted {
        out.entry((r.image.clone(), r.rev.clone()))
            .or_default()
            .push(r.server.clone());
    }
    out
}

struct Follower {
    live: Live,
    pool: Option<PgPool>,
    url: String,
    /// When this server started following (`follow::plan`'s `since`).
    since: i64,
    /// The revision recorded active per image, and since when.
    published: HashMap<String, (String, i64)>,
    /// Manifest digests by (image, revision).
    digests: HashMap<(String, String), String>,
    /// Pulls that failed, by (image, revision), and when.
    failed: HashMap<(String, String), Instant>,
    /// Woken when a client asks for a revision this server lacks (`image::demand`).
    wake: Arc<tokio::sync::Notify>,
    /// When every revision held was last checked.
    verified: Option<Instant>,
}

impl Follower {
    async fn pool(&mut self) -> anyhow::Result<PgPool> {
        if let Some(p) = &self.pool {
            return Ok(p.clone());
        }
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(5))
            .connect(&self.url)
            .await?;
        sqlx::query(CREATE).execute(&pool).await?;
        // What this server recorded active before a restart stays active since then.
        let me = me(&self.live.load());
        let rows = sqlx::query(
            "SELECT image, rev, activated_at FROM site_revisions WHERE server = $1 AND active",
        )
        .bind(&me)
        .fetch_all(&pool)
        .await?;
        for r in rows {
            self.published
                .insert(r.get("image"), (r.get("rev"), r.get("activated_at")));
        }
        self.pool = Some(pool.clone());
        Ok(pool)
    }

    async fn tick(&mut self) -> anyhow::Result<()> {
        let pool = self.pool().await?;
        let config = self.live.load();
        // What clients asked for before this read of the table: judged by it.
        let asked: Vec<(String, String)> = config
            .images
            .values()
            .flat_map(|i| {
                demand::wanted(&i.dir)
                    .into_iter()
                    .map(|r| (i.name.clone(), r))
            })
            .collect();
        let me = me(&config);
        let local = {
            let config = config.clone();
            tokio::task::spawn_blocking(move || held(&config)).await??
        };
        let now = now_micros();
        let before = rows(&pool).await?;
        for (image, held) in &local {
            for rev in &held.revs {
                let key = (image.clone(), rev.clone());
                if !self.digests.contains_key(&key) {
                    let img = config.images[image].clone();
                    let id = rev.clone();
                    let text =
                        tokio::task::spawn_blocking(move || inventory::of_revision(&img, &id))
                            .await??;
                    self.digests.insert(
                        key.clone(),
                        crate::image::objects::hex(&sha2::Sha256::digest(text)),
                    );
                }
            }
            let others_active = before
                .iter()
                .any(|r| &r.image == image && r.active && r.server != me);
            let published = self.published.get(image).map(|(r, at)| (r.as_str(), *at));
            let since = follow::activated_at(held.active.as_deref(), published, others_active, now);
            if let Some(a) = &held.active {
                self.published.insert(image.clone(), (a.clone(), since));
            }
            for rev in &held.revs {
                let active = held.active.as_ref() == Some(rev);
                sqlx::query(
                    "INSERT INTO site_revisions \
                     (image, rev, manifest, server, active, activated_at, recorded_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (image, rev, server) DO UPDATE SET manifest = EXCLUDED.manifest, \
                     active = EXCLUDED.active, activated_at = EXCLUDED.activated_at",
                )
                .bind(image)
                .bind(rev)
                .bind(&self.digests[&(image.clone(), rev.clone())])
                .bind(&me)
                .bind(active)
                .bind(if active { since } else { 0 })
                .bind(now)
                .execute(&pool)
                .await?;
            }
            let revs: Vec<String> = held.revs.iter().cloned().collect();
            sqlx::query(
                "DELETE FROM site_revisions WHERE server = $1 AND image = $2 AND NOT (rev = ANY($3))",
            )
            .bind(&me)
            .bind(image)
            .bind(&revs)
            .execute(&pool)
            .await?;
        }
        // Read again: the plan sees this server's rows as just written.
        let rows = rows(&pool).await?;
        let holders = holders(&rows, &me);
        for image in config.images.values() {
            let of_image = holders
                .iter()
                .filter(|((i, _), _)| *i == image.name)
                .map(|((_, r), from)| (r.clone(), from.clone()))
                .collect();
            demand::known(
                &image.dir,
                of_image,
                config.server.read_token.clone(),
                &self.wake,
            );
        }
        // Asked for by a client: pulled first, at once, even if a pull failed lately.
        let mut pulled = Vec::new();
        for key in asked {
            let img = &config.images[&key.0];
            let ok = if local.get(&key.0).is_some_and(|l| l.revs.contains(&key.1)) {
                true
            } else if let Some(from) = holders.get(&key) {
                tracing::info!(
                    image = key.0,
                    rev = key.1,
                    "site revisions: a client asked for a revision this server lacks; pulled now"
                );
                self.failed.remove(&key);
                let (image, rev, from) = (key.0.clone(), key.1.clone(), from.clone());
                self.act(&config, Action::Pull { image, rev, from }).await
            } else {
                tracing::info!(
                    image = key.0,
                    rev = key.1,
                    "site revisions: a client asked for a revision no member holds"
                );
                false
            };
            demand::done(&img.dir, &key.1, ok);
            pulled.push(key);
        }
        for action in follow::plan(&me, &local, &rows, self.since) {
            if let Action::Pull { image, rev, .. } = &action
                && pulled.contains(&(image.clone(), rev.clone()))
            {
                continue;
            }
            self.act(&config, action).await;
        }
        // Last: hashing every revision takes a while, and what boots need comes first.
        if self.verified.is_none_or(|t| t.elapsed() >= VERIFY_EVERY) {
            self.verified = Some(Instant::now());
            self.verify(&config, &local, &holders).await;
        }
        Ok(())
    }

    /// Checks every revision held against its manifest; one found bad (a file changed,
    /// truncated or gone on this server's disk) is taken out, never served, and pulled again
    /// from the members holding it.
    async fn verify(
        &mut self,
        config: &Arc<Config>,
        local: &BTreeMap<String, Local>,
        holders: &BTreeMap<(String, String), Vec<String>>,
    ) {
        for (image, held) in local {
            let img = config.images[image].clone();
            for rev in &held.revs {
                let (i, r) = (img.clone(), rev.clone());
                let bad = match tokio::task::spawn_blocking(move || verify::check(&i, &r)).await {
                    Ok(Ok(bad)) if bad.is_empty() => continue,
                    Ok(Ok(bad)) => bad,
                    Ok(Err(e)) => {
                        tracing::warn!(image, rev, error = %format!("{e:#}"), "site revisions: the revision could not be checked");
                        continue;
                    }
                    Err(_) => continue,
                };
                tracing::error!(image, rev, files = bad.len(), first = %bad.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
                    "site revisions: the revision on disk is not as its manifest says; taken out and pulled again");
                let (i, r) = (img.clone(), rev.clone());
                match tokio::task::spawn_blocking(move || verify::remove(&i, &r, &bad)).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::error!(image, rev, error = %format!("{e:#}"), "site revisions: the bad revision could not be taken out");
                        continue;
                    }
                    Err(_) => continue,
                }
                let key = (image.clone(), rev.clone());
                match holders.get(&key) {
                    Some(from) => {
                        self.failed.remove(&key);
                        let (image, rev, from) = (image.clone(), rev.clone(), from.clone());
                        self.act(config, Action::Pull { image, rev, from }).await;
                    }
                    None => tracing::error!(
                        image,
                        rev,
                        "site revisions: no other member holds the revision taken out; import it again"
                    ),
                }
            }
        }
    }

    /// Pulls or activates; false when a pull did not (or was not tried: it failed lately).
    async fn act(&mut self, config: &Arc<Config>, action: Action) -> bool {
        match action {
            Action::Pull { image, rev, from } => {
                let key = (image.clone(), rev.clone());
                if self
                    .failed
                    .get(&key)
                    .is_some_and(|t| t.elapsed() < RETRY_AFTER)
                {
                    return false;
                }
                let img: Arc<Image> = config.images[&image].clone();
                let req = pull::Request {
                    rev: Some(rev.clone()),
                    from,
                    token: config.server.read_token.clone(),
                    squashfs: serve::nbd_served(config, &image),
                };
                match tokio::task::spawn_blocking(move || pull::pull(&img, &req)).await {
                    Ok(Ok(done)) => {
                        self.failed.remove(&key);
                        tracing::info!(
                            image,
                            rev,
                            from = done.from,
                            moved = done.moved.total(),
                            "site revisions: pulled; {}",
                            done.moved.sentence()
                        );
                        true
                    }
                    Ok(Err(e)) => {
                        self.failed.insert(key, Instant::now());
                        tracing::warn!(image, rev, error = %format!("{e:#}"), "site revisions: the pull failed; tried again in 30 s");
                        false
                    }
                    Err(_) => false,
                }
            }
            Action::Activate { image, rev, since } => {
                let img = &config.images[&image];
                if !matches!(store::read(&img.dir, &rev), Ok(Some(_))) {
                    return false; // not pulled (yet)
                }
                let (c, i, r) = (config.clone(), image.clone(), rev.clone());
                match tokio::task::spawn_blocking(move || crate::image::cli::activate(&c, &i, &r))
                    .await
                {
                    Ok(Ok(said)) => {
                        self.published.insert(image.clone(), (rev.clone(), since));
                        tracing::info!(
                            image,
                            rev,
                            "site revisions: activated as the site has it; {said}"
                        );
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(image, rev, error = %format!("{e:#}"), "site revisions: the activation failed; tried again")
                    }
                    Err(_) => {}
                }
                true
            }
        }
    }
}

/// Every row of the table, each with when its revision was first recorded.
async fn rows(pool: &PgPool) -> anyhow::Result<Vec<Row>> {
    Ok(sqlx::query(
        "SELECT image, rev, manifest, server, active, activated_at, \
         (SELECT min(recorded_at) FROM site_revisions f WHERE f.image = s.image AND f.rev = s.rev) AS first \
         FROM site_revisions s",
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| Row {
        image: r.get("image"),
        rev: r.get("rev"),
        manifest: r.get("manifest"),
        server: r.get("server"),
        active: r.get("active"),
        activated_at: r.get("activated_at"),
        recorded_at: r.get("first"),
    })
    .collect())
}

/// This server's name in the table: its HTTP base URL, as the others reach it.
fn me(config: &Config) -> String {
    format!("http://{}", super::api_client::api_address(config))
}

/// The revisions this server holds of each image with revisions (or with none yet; an
/// image folder assembled by hand is left alone).
fn held(config: &Config) -> anyhow::Result<BTreeMap<String, Local>> {
    let mut out = BTreeMap::new();
    for image in config.images.values() {
        if !store::managed(&image.dir) && image.dir.join(&image.kernel_name).exists() {
            continue;
        }
        out.insert(
            image.name.clone(),
            Local {
                revs: store::list(&image.dir)?.into_iter().map(|r| r.id).collect(),
                active: store::active(&image.dir)?,
            },
        );
    }
    Ok(out)
}

fn now_micros() -> i64 {
    crate::record::event::now_micros()
}

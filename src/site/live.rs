//! The site as one running `bootpool serve` takes part in it: its own row written every
//! `BEAT` (`db`), everyone's read back into its view (`owners`), and the answer the DHCP
//! services ask before each request: is this client mine? Without a PostgreSQL database there
//! is no site: the server is alone and answers everyone, as before sites existed.

use super::conns::{Conn, Conns};
use super::db::{Beat, Db};
use super::held::Held;
use super::member::Member;
use super::owners::{DEAD_AFTER, View};
use crate::shutdown::Shutdown;
use crate::steer::placement::{Elsewhere, Placement, Published};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

/// How often a member writes its heartbeat and reads the others': a dead member is noticed
/// within `DEAD_AFTER` plus one beat plus one read.
pub const BEAT: Duration = Duration::from_millis(500);

/// One server's part in the site. Shared by the services (`Arc`).
#[derive(Debug)]
pub struct Site {
    me: Member,
    /// `None`: no site (the records are in SQLite).
    db: Option<Db>,
    /// This process among others that might use the same name: its PID and start.
    instance: String,
    view: RwLock<View>,
    /// The members' addresses this host holds for the site (keepalived's takeovers).
    held: Held,
    /// Where the NFS and NBD services record their connections (`conns`).
    conns: Conns,
    /// The other end, for the writer (`record_conns`), taken once.
    conns_rx: std::sync::Mutex<Option<ConnsRx>>,
    /// Where each heartbeat's load is read from (`steer::placement`): none, none published.
    placement: OnceLock<Arc<Placement>>,
}

type ConnsRx = tokio::sync::mpsc::UnboundedReceiver<(Conn, bool)>;

impl Site {
    /// A server with no site: it answers every client.
    pub fn alone(me: Member) -> Arc<Site> {
        Arc::new(Site::new(me, None))
    }

    /// No site and no name (a service started on its own, in tests): answers every client.
    pub fn none() -> Arc<Site> {
        Site::alone(Member {
            name: String::new(),
            addresses: Vec::new(),
            links: Vec::new(),
            rooms: Vec::new(),
            http: String::new(),
            started: 0,
        })
    }

    /// A member of the site whose database `db` is.
    pub fn member(me: Member, db: Db) -> Arc<Site> {
        Arc::new(Site::new(me, Some(db)))
    }

    fn new(me: Member, db: Option<Db>) -> Site {
        let (conns, rx) = match db {
            Some(_) => {
                let (conns, rx) = Conns::channel();
                (conns, Some(rx))
            }
            None => (Conns::default(), None),
        };
        Site {
            instance: format!("{}-{}", std::process::id(), me.started),
            view: RwLock::new(View::alone(&me.name)),
            me,
            db,
            held: Held::default(),
            conns,
            conns_rx: std::sync::Mutex::new(rx),
            placement: OnceLock::new(),
        }
    }

    /// Where the load each heartbeat publishes is read from.
    pub fn set_placement(&self, placement: Arc<Placement>) {
        let _ = self.placement.set(placement);
    }

    /// What this member publishes with its heartbeat (`Placement::published`).
    fn load(&self) -> Vec<Published> {
        self.placement
            .get()
            .map(|p| p.published())
            .unwrap_or_default()
    }

    /// The other live members' links and what they placed on every link, for a boot placed
    /// anywhere in the site (`balance::elsewhere`); empty without a site or while the view is
    /// frozen (the database is down: only this server's links are sure to be there).
    pub fn elsewhere(&self) -> Vec<Elsewhere> {
        let view = self.view.read().unwrap_or_else(|e| e.into_inner());
        super::balance::elsewhere(&view)
    }

    /// `image` (the image a boot of `pool` on `link` is served) with the other members its
    /// client's agent may read its root from (`Image::blocks_elsewhere`, `root_sources`):
    /// for a pool whose NBD root goes through the agent and a root with its block manifest,
    /// in a site; else `image` as it is.
    pub fn with_root_sources(
        &self,
        config: &crate::config::Config,
        pool: &crate::config::Pool,
        image: Arc<crate::config::Image>,
        link: std::net::Ipv4Addr,
    ) -> Arc<crate::config::Image> {
        let through_agent = pool.root == crate::config::RootProto::Nbd
            && pool.nbd_via == crate::config::NbdVia::Agent;
        if !self.shared() || !through_agent || image.blocks.is_none() {
            return image;
        }
        let rev = crate::config::names::revision_of(&image.nbd_export);
        let holders = rev.and_then(|r| crate::image::demand::held_by(&image.dir, r));
        let view = self.view();
        let boot = super::root_sources::Boot {
            pool: &pool.name,
            rev,
            link,
            subnet: config.dhcp.subnet_of(link).map(|s| s.subnet),
        };
        let elsewhere = super::root_sources::elsewhere(
            view.seen(),
            view.me(),
            view.live(),
            holders.as_deref(),
            boot,
        );
        if elsewhere.is_empty() {
            return image;
        }
        let mut image = (*image).clone();
        image.blocks_elsewhere = elsewhere;
        Arc::new(image)
    }

    /// The addresses held for the site, and the takeovers to act on.
    pub fn held(&self) -> &Held {
        &self.held
    }

    /// Where a service records a connection it accepted.
    pub fn conns(&self) -> &Conns {
        &self.conns
    }

    /// Writes the connections the services record to the database until the shutdown
    /// (`conns::write_behind`); nothing without a site.
    pub async fn record_conns(self: Arc<Self>, shutdown: Shutdown) {
        let rx = self
            .conns_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let (Some(db), Some(rx)) = (self.db.clone(), rx) {
            super::conns::write_behind(db, self.me.name.clone(), rx, shutdown).await;
        }
    }

    /// The connections other members recorded to `ip`, which this host has just taken over.
    pub async fn conns_to(&self, ip: std::net::Ipv4Addr) -> anyhow::Result<Vec<Conn>> {
        match &self.db {
            Some(db) => db.conns_to(ip, &self.me.name).await,
            None => Ok(Vec::new()),
        }
    }

    /// Forgets `conns` (tickled: their clients reconnect, to this host).
    pub async fn forget_conns(&self, conns: &[Conn]) -> anyhow::Result<()> {
        match &self.db {
            Some(db) => db.forget_conns(conns, &self.me.name).await,
            None => Ok(()),
        }
    }

    /// Whether several servers may share the clients (a PostgreSQL database).
    pub fn shared(&self) -> bool {
        self.db.is_some()
    }

    pub fn me(&self) -> &Member {
        &self.me
    }

    /// The view as it stands.
    pub fn view(&self) -> View {
        self.view.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether this server answers the client whose key (MAC, DUID) is `key`.
    pub fn mine(&self, key: &[u8]) -> bool {
        self.view
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .mine(key)
    }

    /// This member's place among the live members (in name order), and their count.
    pub fn place(&self) -> (usize, usize) {
        let view = self.view.read().unwrap_or_else(|e| e.into_inner());
        let live = view.live();
        let place = live.iter().position(|m| m == view.me()).unwrap_or(0);
        (place, live.len())
    }

    /// Takes `seen` into the view as a read of the database would: a site without a database
    /// (the services' unit tests).
    pub fn observe(&self, seen: Vec<super::member::Seen>) {
        self.set(|v| v.read(seen));
    }

    /// Takes a failed read of the database into the view, as `keep` would (the services'
    /// unit tests).
    pub fn observe_unreachable(&self) {
        self.set(|v| v.unreachable());
    }

    /// Member `me` of a site whose members `live` beat and `dead` stopped (the services' unit
    /// tests).
    #[cfg(test)]
    pub fn seeing(me: &str, live: &[&str], dead: &[&str]) -> Arc<Site> {
        let member = |name: &str| Member {
            name: name.into(),
            ..Site::none().me.clone()
        };
        let site = Site::alone(member(me));
        let seen = live
            .iter()
            .map(|n| (n, 0.1))
            .chain(dead.iter().map(|n| (n, 30.0)))
            .map(|(n, age_s)| super::member::Seen {
                member: member(n),
                heartbeat: 0,
                age_s,
                load: Vec::new(),
            })
            .collect();
        site.observe(seen);
        site
    }

    /// The first heartbeat and read, before any request is answered: an error when another
    /// running server holds this member's name. A database that does not answer is logged
    /// and the server starts on the view it has (itself alone), never waiting for it.
    pub async fn join(&self) -> anyhow::Result<()> {
        let Some(db) = &self.db else {
            return Ok(());
        };
        if let Err(e) = db.schema().await {
            tracing::warn!(error = %format!("{e:#}"), "site database unreachable at start; \
                answering every client until it answers");
            self.set(|v| v.unreachable());
            return Ok(());
        }
        // A name still beating may be this server's own previous process, killed a moment
        // ago (kill -9, a crash and a supervisor's restart): its heartbeat ages out within
        // `DEAD_AFTER`. One that keeps beating past that is another running server.
        let deadline = tokio::time::Instant::now() + DEAD_AFTER + BEAT * 2;
        while let Ok(Beat::NameTaken) = db
            .beat(&self.me, &self.load(), &self.instance, DEAD_AFTER)
            .await
        {
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!(
                    "another running server is member {:?} of this site (it kept its \
                     heartbeat for {:?}): give each server its own name with \
                     `bootpool serve --member NAME`",
                    self.me.name,
                    DEAD_AFTER + BEAT * 2
                );
            }
            tokio::time::sleep(BEAT).await;
        }
        self.read(db).await;
        let view = self.view();
        tracing::info!(member = %self.me.name, live = ?view.live(), buckets = view.buckets_of(&self.me.name),
            "joined the site");
        Ok(())
    }

    /// Beats and reads every `BEAT` until the shutdown, then leaves the site, so that the
    /// others take this server's clients at once.
    pub async fn keep(self: Arc<Self>, shutdown: Shutdown) {
        let Some(db) = &self.db else {
            return;
        };
        let mut tick = tokio::time::interval(BEAT);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut taken_said = false;
        // Started while the database was down (`join`): the table is made once it answers.
        let mut made = !self.view().frozen();
        loop {
            tokio::select! {
                _ = shutdown.wait() => break,
                _ = tick.tick() => {}
            }
            if !made {
                made = db.schema().await.is_ok();
            }
            match db
                .beat(&self.me, &self.load(), &self.instance, DEAD_AFTER)
                .await
            {
                Ok(Beat::NameTaken) if !taken_said => {
                    taken_said = true;
                    tracing::error!(member = %self.me.name, "another server took this member's \
                        name while this one's heartbeat was late; give each its own --member");
                }
                Ok(Beat::Written) => taken_said = false,
                _ => {}
            }
            self.read(db).await;
        }
        if let Err(e) = db.leave(&self.me.name, &self.instance).await {
            tracing::debug!(error = %format!("{e:#}"), "site row not marked as left");
        }
    }

    /// Reads every member into the view; on failure, freezes it.
    async fn read(&self, db: &Db) {
        match db.members().await {
            Ok(seen) => {
                let was_frozen = self.view().frozen();
                let changed = self.set(|v| v.read(seen));
                let view = self.view();
                if was_frozen {
                    tracing::info!(live = ?view.live(), "site database answers again");
                }
                if changed {
                    tracing::info!(live = ?view.live(), buckets = view.buckets_of(&self.me.name),
                        "site members changed");
                }
            }
            Err(e) => {
                if !self.view().frozen() {
                    tracing::warn!(error = %format!("{e:#}"), live = ?self.view().live(),
                        "site database unreachable: the members stay as last seen");
                }
                self.set(|v| v.unreachable());
            }
        }
    }

    fn set<T>(&self, f: impl FnOnce(&mut View) -> T) -> T {
        f(&mut self.view.write().unwrap_or_else(|e| e.into_inner()))
    }
}

//! Boot records: services send typed events through a `Recorder`; one writer task ties them to
//! clients and boots (`timeline`), keeps the boots in memory for the API and writes the raw
//! events, with the egress samples, to the store (`store`: SQLite in the state folder, or
//! PostgreSQL) in batches. Recording never blocks a boot: the channel is bounded and what does
//! not fit is counted as dropped. Console lines have a bounded channel of their own
//! (`CONSOLE_CHANNEL`), so a client flooding its console (each is rate-limited before, by
//! `service::console`) cannot crowd out the events of the others; the writer takes from both
//! and applies what they hold in time order.
//!
//! At start the store is replayed into the timelines, so a daemon killed with -9 comes back with
//! its records, losing at most the events of its last `FLUSH` (half a second) and the console
//! lines of its last `CONSOLE_FLUSH`: a talking client's console (its bounded whole, one row)
//! is rewritten at most that often, not at every flush. Records older than `server.retention`
//! are deleted at start and every `SWEEP`.
//!
//! A batch the store refuses (a PostgreSQL that is down) is parked on disk (`spool`) and
//! written, before anything newer, once the store takes writes again; a daemon killed with -9
//! meanwhile writes it when it comes back. Boots never wait for any of it.
//!
//! With PostgreSQL (a site), the daemon starts whether or not the database answers: it waits
//! `ATTACH_WAIT` for it, then starts from its spool alone and tries again every
//! `ATTACH_EVERY`, parking every batch meanwhile; once it answers, the spool is written and
//! the timelines are read anew from the store, every member's history with them. From then on
//! the writer reads the other members' new events every `FOLLOW` (`follow`) into the same
//! timelines, so any member's API and dashboard show the whole site's boots.

pub mod cause;
pub mod console;
pub mod egress;
pub mod end;
pub mod event;
pub mod follow;
pub mod report;
pub mod sampler;
pub mod served;
pub mod signs;
pub mod spool;
pub mod stall;
pub mod standing;
pub mod store;
pub mod timeline;
pub mod trace;
pub mod view;
pub mod wave;
pub mod when;

pub use event::{Event, FileKind, Kind, Outcome, Proto, Who};
pub use timeline::{Boot, BootResult, Phase, Timelines};

use crate::config::{Database, Server};
use crate::metrics::{Count, Metrics};
use crate::shutdown::Shutdown;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use store::Store;
use tokio::sync::mpsc;

const CHANNEL: usize = 65_536;
/// Console messages (one a datagram) waiting for the writer.
const CONSOLE_CHANNEL: usize = 16_384;
const BATCH: usize = 4096;
/// Longest an event waits in memory before its batch is committed.
const FLUSH: Duration = Duration::from_millis(500);
/// Longest a console line waits in memory before its console is written to the store.
const CONSOLE_FLUSH: Duration = Duration::from_secs(5);
/// How often records past the retention are deleted while running.
const SWEEP: Duration = Duration::from_secs(3600);
/// Events kept for a retry while the store refuses writes (a PostgreSQL restart); past it the
/// oldest are given up and counted as unsaved.
const PENDING_MAX: usize = 262_144;
/// Longest the start waits for PostgreSQL to answer, and each later try to reach it.
const ATTACH_WAIT: Duration = Duration::from_secs(2);
/// How often a daemon that started without its PostgreSQL tries it again.
const ATTACH_EVERY: Duration = Duration::from_secs(2);
/// How often the other members' new events are read, and the longest a read may take.
const FOLLOW: Duration = Duration::from_secs(1);
const FOLLOW_WAIT: Duration = Duration::from_millis(1500);

/// What the writer receives.
enum Msg {
    Event(Event),
    Egress(Box<egress::Saved>),
}

/// Lines from a client's console, for its newest boot (on their own channel).
struct ConsoleLines {
    mac: crate::config::Mac,
    at: event::Micros,
    lines: Vec<String>,
}

/// The sending side, cloned into every service.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Msg>,
    console_tx: mpsc::Sender<ConsoleLines>,
    metrics: Metrics,
    /// Boot traces of the pools that keep them; it follows the events sent here.
    tracer: Arc<trace::Tracer>,
}

/// The recorder's count of payload bytes for `proto`.
fn payload(metrics: &Metrics, proto: Proto) -> &Count {
    let p = &metrics.records().payload;
    match proto {
        Proto::Dhcp => &p.dhcp,
        Proto::Tftp => &p.tftp,
        Proto::Http => &p.http,
        Proto::Nfs => &p.nfs,
        Proto::Nbd => &p.nbd,
    }
}

/// Payload bytes recorded so far, per protocol (the egress sampler's split of what was sent).
pub fn payload_totals(metrics: &Metrics) -> std::collections::BTreeMap<Proto, u64> {
    [
        Proto::Dhcp,
        Proto::Tftp,
        Proto::Http,
        Proto::Nfs,
        Proto::Nbd,
    ]
    .into_iter()
    .map(|p| (p, payload(metrics, p).get()))
    .collect()
}

impl Recorder {
    /// Records an event now; never waits.
    pub fn record(&self, who: Who, kind: Kind) {
        self.send(Event::now(who, kind));
    }

    pub fn send(&self, ev: Event) {
        self.tracer.event(ev.who, &ev.kind);
        if self.tx.try_send(Msg::Event(ev)).is_err() {
            self.metrics.records().dropped.inc();
        }
    }

    /// Hands an egress sample to the writer, to be stored with the events.
    /// Console lines from a client (its MAC from the lease table); dropped and counted
    /// (`console().dropped`, per line) when the console channel is full.
    pub fn console(&self, mac: crate::config::Mac, lines: Vec<String>) {
        let n = lines.len() as u64;
        let msg = ConsoleLines {
            mac,
            at: event::now_micros(),
            lines,
        };
        if self.console_tx.try_send(msg).is_err() {
            self.metrics.console().dropped.add(n);
        }
    }

    pub fn egress(&self, saved: egress::Saved) {
        if self.tx.try_send(Msg::Egress(Box::new(saved))).is_err() {
            self.metrics.records().dropped.inc();
        }
    }

    /// A recorder whose events go nowhere, for code under test that needs one.
    pub fn discard() -> Recorder {
        let (tx, _) = mpsc::channel(1);
        let (console_tx, _) = mpsc::channel(1);
        Recorder {
            tx,
            console_tx,
            metrics: Metrics::default(),
            tracer: Arc::new(trace::Tracer::off()),
        }
    }

    /// The same recorder, keeping boot traces with `tracer`.
    pub fn with_tracer(self, tracer: trace::Tracer) -> Recorder {
        Recorder {
            tracer: Arc::new(tracer),
            ..self
        }
    }

    /// Where services write the requests of traced boots.
    pub fn tracer(&self) -> &trace::Tracer {
        &self.tracer
    }
}

/// What has been recorded, shared with the API.
pub struct Records {
    timelines: RwLock<Timelines>,
    /// Every boot that changed, as it is after the change (for the live stream).
    pub changes: tokio::sync::broadcast::Sender<view::BootView>,
    /// The store, for reading what is not kept in memory (egress history at start).
    pub store: Store,
    /// Whether the store answers, and which member recorded which client (a site's).
    pub site: follow::Site,
}

impl Records {
    /// Calls `f` with the current timelines.
    pub fn read<T>(&self, f: impl FnOnce(&Timelines) -> T) -> T {
        f(&self.timelines.read().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Opens the store (importing a legacy journal into a new one), applies the retention, replays
/// the events into timelines and starts the writer task, which counts into `metrics`. `member`
/// is this server's name in its site: its events are marked with it in PostgreSQL. A
/// PostgreSQL that does not answer within `ATTACH_WAIT` is no error: the writer keeps trying.
pub async fn start(
    server: &Server,
    member: &str,
    shutdown: &Shutdown,
    metrics: &Metrics,
) -> anyhow::Result<(Recorder, Arc<Records>)> {
    start_with(server, member, shutdown, metrics, SWEEP).await
}

async fn start_with(
    server: &Server,
    member: &str,
    shutdown: &Shutdown,
    metrics: &Metrics,
    sweep: Duration,
) -> anyhow::Result<(Recorder, Arc<Records>)> {
    let db = &server.database;
    let store = Store::lazy(db).await?;
    let shared = matches!(db, Database::Postgres(_));
    let site = follow::Site::default();
    let mut timelines = Timelines::default();
    let (mut cursor, mut replayed, mut error) = (None, 0, None);
    match tokio::time::timeout(ATTACH_WAIT, store.prepare(db)).await {
        Ok(Ok(())) => {
            store.import_legacy(&server.state_dir).await?;
            forget(&store, server.retention).await;
            let (c, n) = read_history(&store, member, &mut timelines, &site).await?;
            (cursor, replayed) = (Some(c), n);
        }
        Ok(Err(e)) if !shared => return Err(e),
        refused => {
            let e = refused.map_or_else(|_| unanswered(), |r| format!("{:#}", r.unwrap_err()));
            tracing::warn!(error = %e, "boot records database unreachable at start; serving, \
                with records parked in the spool until it answers");
            error = Some(e);
        }
    }
    // Records the store refused before a stop, not in it yet: written at the first commit.
    let spool = spool::Spool::open(&server.state_dir);
    match spool.read() {
        Ok((parked, _)) => parked.iter().for_each(|ev| {
            // This member's own, marked with its name once written to a site's store.
            timelines.apply_from(ev, shared.then_some(member));
        }),
        Err(e) => tracing::warn!(error = %e, "parked records unreadable"),
    }
    timelines.settle(event::now_micros());
    if replayed > 0 {
        tracing::info!(
            events = replayed,
            boots = timelines.boots().len(),
            "records replayed"
        );
    }
    if cursor.is_some() {
        restore_consoles(&store, &mut timelines).await?;
    }
    site.set_reach(shared, error, spool.len(), event::now_micros());
    let (changes, _) = tokio::sync::broadcast::channel(1024);
    let records = Arc::new(Records {
        timelines: RwLock::new(timelines),
        changes,
        store: store.clone(),
        site,
    });
    let (tx, rx) = mpsc::channel(CHANNEL);
    let (console_tx, console_rx) = mpsc::channel(CONSOLE_CHANNEL);
    let writer = Writer {
        rx,
        console_rx,
        store,
        records: records.clone(),
        metrics: metrics.clone(),
        retention: server.retention,
        sweep,
        events: Vec::new(),
        egress: Vec::new(),
        spool,
        consoles: std::collections::BTreeSet::new(),
        consoles_written: tokio::time::Instant::now(),
        database: db.clone(),
        state_dir: server.state_dir.clone(),
        member: member.to_string(),
        shared,
        cursor,
        attach_at: tokio::time::Instant::now() + ATTACH_EVERY,
    };
    shutdown.spawn(writer.run(shutdown.clone()));
    let tracer = Arc::new(trace::Tracer::off());
    Ok((
        Recorder {
            tx,
            console_tx,
            metrics: metrics.clone(),
            tracer,
        },
        records,
    ))
}

/// The error of a PostgreSQL that did not answer in time.
fn unanswered() -> String {
    format!("the database did not answer within {ATTACH_WAIT:?}")
}

/// Replays every stored event into `timelines`, marking in `site` the clients other members
/// recorded; returns the cursor past them (the ids the replay passed over are gaps, asked for
/// again: transactions still open) and how many events there were.
async fn read_history(
    store: &Store,
    me: &str,
    timelines: &mut Timelines,
    site: &follow::Site,
) -> anyhow::Result<(follow::Cursor, usize)> {
    let mut cursor = follow::Cursor::default();
    let mut marks = Vec::new();
    let mut n = 0;
    let now = std::time::Instant::now();
    store
        .replay_marked(|id, member, ev| {
            cursor.see(id, now);
            n += 1;
            if timelines.apply_from(&ev, member.as_deref())
                && let Some(mac) = timelines.mac_for(ev.who)
            {
                marks.push((mac, member.filter(|m| m != me)));
            }
        })
        .await?;
    cursor.expire(now);
    site.recorded(marks);
    Ok((cursor, n))
}

/// Gives each replayed boot its stored console.
async fn restore_consoles(store: &Store, timelines: &mut Timelines) -> anyhow::Result<()> {
    for (mac, start, body) in store.consoles().await? {
        if let (Ok(mac), Some(c)) = (mac.parse(), console::Console::from_json(&body)) {
            timelines.restore_console(mac, start, c);
        }
    }
    Ok(())
}

/// Deletes what is older than the retention; failures are logged, never fatal.
async fn forget(store: &Store, retention: Option<Duration>) {
    let Some(keep) = retention else { return };
    let cutoff = event::now_micros() - keep.as_micros() as i64;
    match store.forget_before(cutoff).await {
        Ok((0, 0)) => {}
        Ok((events, egress)) => {
            tracing::info!(
                events,
                egress,
                retention_s = keep.as_secs(),
                "forgot old records"
            )
        }
        Err(e) => tracing::warn!(error = %format!("{e:#}"), "cannot delete old records"),
    }
}

/// Reads the records without starting a writer (for `bootpool report`). A state folder whose
/// SQLite store does not exist yet is read from its legacy journal, without creating a store.
pub async fn load(server: &Server) -> anyhow::Result<Timelines> {
    let mut timelines = Timelines::default();
    match Store::open_existing(&server.database).await? {
        Some(store) => {
            // With each site member's name (PostgreSQL), so the report says who served what.
            store
                .replay_marked(|_, member, ev| {
                    timelines.apply_from(&ev, member.as_deref());
                })
                .await?;
            restore_consoles(&store, &mut timelines).await?;
        }
        None => {
            let legacy: Vec<Event> = store::read_lines(&server.state_dir.join("events.jsonl"))?;
            for ev in &legacy {
                timelines.apply(ev);
            }
        }
    }
    timelines.settle(event::now_micros());
    Ok(timelines)
}

/// Every stored event, in the order recorded (`bootpool report --events`); like `load`, from
/// the legacy journal when no SQLite store exists yet.
pub async fn load_events(server: &Server) -> anyhow::Result<Vec<Event>> {
    match Store::open_existing(&server.database).await? {
        Some(store) => {
            let mut out = Vec::new();
            store.replay(|ev| out.push(ev)).await?;
            Ok(out)
        }
        None => store::read_lines(&server.state_dir.join("events.jsonl")),
    }
}

/// Every stored egress sample, oldest first (`bootpool report --egress`); from the legacy
/// file when no SQLite store exists yet.
pub async fn load_egress(server: &Server) -> anyhow::Result<Vec<egress::Saved>> {
    match Store::open_existing(&server.database).await? {
        Some(store) => store.egress_since(f64::MIN).await,
        None => store::read_lines(&server.state_dir.join("egress.jsonl")),
    }
}

struct Writer {
    rx: mpsc::Receiver<Msg>,
    console_rx: mpsc::Receiver<ConsoleLines>,
    store: Store,
    records: Arc<Records>,
    /// The recorder's counts (`Metrics::records`).
    metrics: Metrics,
    retention: Option<Duration>,
    sweep: Duration,
    /// Applied to the timelines, not yet committed to the store.
    events: Vec<Event>,
    egress: Vec<egress::Saved>,
    /// What the store refused, parked on disk until it takes it.
    spool: spool::Spool,
    /// The boots (`Boot::id`) whose console changed since the consoles were last written: a
    /// boot's last lines are written even when its client started another boot since.
    consoles: std::collections::BTreeSet<u64>,
    consoles_written: tokio::time::Instant,
    database: Database,
    state_dir: std::path::PathBuf,
    /// This server's name in its site, which marks its events in PostgreSQL.
    member: String,
    /// The store is PostgreSQL, shared by a site.
    shared: bool,
    /// Where the reads of the other members' events stand; `None` until the store answered
    /// once (every batch is parked meanwhile).
    cursor: Option<follow::Cursor>,
    /// When to try a store that has not answered yet again.
    attach_at: tokio::time::Instant,
}

impl Writer {
    async fn run(mut self, shutdown: Shutdown) {
        let mut inbox = Vec::with_capacity(BATCH);
        let mut console_inbox = Vec::with_capacity(BATCH);
        let mut flush = tokio::time::interval(FLUSH);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sweep =
            tokio::time::interval_at(tokio::time::Instant::now() + self.sweep, self.sweep);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut follow = tokio::time::interval(FOLLOW);
        follow.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                n = self.rx.recv_many(&mut inbox, BATCH) => {
                    if n == 0 {
                        self.commit_consoles().await;
                        self.commit().await;
                        return;
                    }
                    while console_inbox.len() < BATCH && let Ok(m) = self.console_rx.try_recv() {
                        console_inbox.push(m);
                    }
                    self.apply(&mut inbox, &mut console_inbox);
                    if self.events.len() >= BATCH {
                        self.commit().await;
                    }
                }
                // Closed only with `rx` (the recorders hold both): then the branch above ends.
                n = self.console_rx.recv_many(&mut console_inbox, BATCH), if !self.console_rx.is_closed() => {
                    // With the events already queued, merged by time (`apply`).
                    while inbox.len() < BATCH && let Ok(m) = self.rx.try_recv() {
                        inbox.push(m);
                    }
                    if n > 0 || !inbox.is_empty() {
                        self.apply(&mut inbox, &mut console_inbox);
                    }
                    if self.events.len() >= BATCH {
                        self.commit().await;
                    }
                }
                _ = flush.tick() => {
                    self.settle();
                    if self.cursor.is_none() && tokio::time::Instant::now() >= self.attach_at {
                        self.attach().await;
                    }
                    if self.consoles_written.elapsed() >= CONSOLE_FLUSH {
                        self.commit_consoles().await;
                    }
                    self.commit().await
                }
                _ = follow.tick(), if self.shared && self.cursor.is_some() => self.follow().await,
                _ = sweep.tick(), if self.cursor.is_some() => forget(&self.store, self.retention).await,
                _ = shutdown.wait() => {
                    // Take what is already queued, then stop.
                    while let Ok(m) = self.rx.try_recv() { inbox.push(m); }
                    while let Ok(m) = self.console_rx.try_recv() { console_inbox.push(m); }
                    self.apply(&mut inbox, &mut console_inbox);
                    self.commit_consoles().await;
                    self.commit().await;
                    return;
                }
            }
        }
    }

    /// Ties events and console lines to boots at once (the API sees them before they are
    /// committed), in the order they happened: the two channels are merged by time, so a
    /// client's panic line and the DISCOVER after it land as they came.
    fn apply(&mut self, inbox: &mut Vec<Msg>, console: &mut Vec<ConsoleLines>) {
        let counts = self.metrics.records();
        let mut touched = std::collections::BTreeSet::new();
        let mut t = self
            .records
            .timelines
            .write()
            .unwrap_or_else(|e| e.into_inner());
        let mut msgs = inbox.drain(..).peekable();
        let mut lines = console.drain(..).peekable();
        loop {
            let line_first = match (msgs.peek(), lines.peek()) {
                (None, None) => break,
                (None, Some(_)) => true,
                (Some(_), None) | (Some(Msg::Egress(_)), Some(_)) => false,
                (Some(Msg::Event(ev)), Some(c)) => c.at < ev.at,
            };
            if line_first {
                let Some(ConsoleLines { mac, at, lines }) = lines.next() else {
                    break;
                };
                // A few appends, whatever the boot's console holds already.
                if t.console(mac, at, lines) {
                    self.consoles.extend(t.current(mac).map(|b| b.id));
                    touched.insert(mac);
                } else {
                    counts.untied.inc();
                }
                continue;
            }
            let ev = match msgs.next() {
                Some(Msg::Egress(s)) => {
                    self.egress.push(*s);
                    continue;
                }
                Some(Msg::Event(ev)) => ev,
                None => break,
            };
            // In a site, this member's name marks its events, as the store will.
            if !t.apply_from(&ev, self.shared.then_some(self.member.as_str())) {
                counts.untied.inc();
                continue;
            }
            counts.recorded.inc();
            match &ev.kind {
                Kind::File { proto, bytes, .. } | Kind::RootRead { proto, bytes } => {
                    payload(&self.metrics, *proto).add(*bytes);
                }
                _ => {}
            }
            touched.extend(t.mac_for(ev.who));
            self.events.push(ev);
        }
        self.tell(&t, touched);
    }

    /// Sends the boots of `touched` clients to the live stream. Nobody listening is fine: the
    /// stream is for dashboards that are open.
    fn tell(&self, t: &Timelines, touched: std::collections::BTreeSet<crate::config::Mac>) {
        if touched.is_empty() || self.records.changes.receiver_count() == 0 {
            return;
        }
        let now = event::now_micros();
        let waves = wave::Membership::of(t.boots());
        for mac in touched {
            if let Some(b) = t.current(mac) {
                let _ =
                    self.records
                        .changes
                        .send(view::BootView::in_wave(b, waves.wave(b.id), now));
            }
        }
    }

    /// Infers the ends that time has brought (roots gone quiet), telling the live stream.
    fn settle(&mut self) {
        let mut t = self
            .records
            .timelines
            .write()
            .unwrap_or_else(|e| e.into_inner());
        let settled = t.settle(event::now_micros());
        self.tell(&t, settled.into_iter().collect());
    }

    /// Commits what is parked and what is pending, in that order, in one transaction; on
    /// failure parks what was pending (kept in memory for the next try if it cannot be).
    async fn commit(&mut self) {
        let parked = !self.spool.is_empty();
        if self.events.is_empty() && self.egress.is_empty() && !parked {
            return;
        }
        if self.cursor.is_none() {
            // The store never answered yet (`attach` tries it): parked without asking it.
            self.park();
            return;
        }
        let written = if parked {
            let (mut events, mut egress) = self.spool.read().unwrap_or_else(|e| {
                tracing::warn!(error = %e, "parked records unreadable");
                Default::default()
            });
            events.extend(self.events.iter().cloned());
            egress.extend(self.egress.iter().cloned());
            self.store
                .append_as(Some(&self.member), &events, &egress)
                .await
        } else {
            let member = Some(self.member.as_str());
            self.store
                .append_as(member, &self.events, &self.egress)
                .await
        };
        match written {
            Ok(()) => {
                self.events.clear();
                self.egress.clear();
                if parked && let Err(e) = self.spool.clear() {
                    tracing::error!(error = %e, "record spool not emptied");
                }
                self.reach(None);
            }
            Err(e) => {
                static REFUSED: crate::log_limit::LogLimit = crate::log_limit::LogLimit::new();
                if let Some(suppressed) = REFUSED.allow() {
                    tracing::error!(events = self.events.len(), error = %format!("{e:#}"),
                        suppressed, "cannot write boot records; parked until the store takes them");
                }
                self.reach(Some(format!("{e:#}")));
                self.park();
            }
        }
    }

    /// Tells the API whether the store answers (`error`) and how much is parked.
    fn reach(&self, error: Option<String>) {
        let now = event::now_micros();
        self.records
            .site
            .set_reach(self.shared, error, self.spool.len(), now);
    }

    /// Parks what is pending in the spool; kept in memory for the next try if it cannot be,
    /// up to `PENDING_MAX`.
    fn park(&mut self) {
        if self.events.is_empty() && self.egress.is_empty() {
            return;
        }
        if self.spool.park(&self.events, &self.egress).is_ok() {
            self.events.clear();
            self.egress.clear();
            self.reach(self.records.site.reach().error);
            return;
        }
        for pending in [self.events.len(), self.egress.len()] {
            let over = pending.saturating_sub(PENDING_MAX);
            self.metrics.records().unsaved.add(over as u64);
        }
        let over = self.events.len().saturating_sub(PENDING_MAX);
        self.events.drain(..over);
        let over = self.egress.len().saturating_sub(PENDING_MAX);
        self.egress.drain(..over);
    }

    /// Tries a store that has not answered since the start: once it does, the record tables
    /// are made, what was parked is written, and the timelines are read anew from the store
    /// (every member's history, this one's parked and new events among them).
    async fn attach(&mut self) {
        self.attach_at = tokio::time::Instant::now() + ATTACH_EVERY;
        let prepared = tokio::time::timeout(ATTACH_WAIT, self.store.prepare(&self.database)).await;
        match prepared {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return self.reach(Some(format!("{e:#}"))),
            Err(_) => return self.reach(Some(unanswered())),
        }
        if let Err(e) = self.store.import_legacy(&self.state_dir).await {
            tracing::warn!(error = %format!("{e:#}"), "legacy journal not imported");
        }
        forget(&self.store, self.retention).await;
        let parked = self.spool.len();
        // Written as any batch is, this member's mark on them; read back below with the rest.
        self.cursor = Some(follow::Cursor::default());
        self.commit_consoles().await;
        self.commit().await;
        if !self.spool.is_empty() || !self.events.is_empty() || !self.consoles.is_empty() {
            self.cursor = None;
            return;
        }
        let mut timelines = Timelines::default();
        let site = &self.records.site;
        let read = read_history(&self.store, &self.member, &mut timelines, site).await;
        let (cursor, events) = match read {
            Ok(read) => read,
            Err(e) => {
                self.cursor = None;
                return self.reach(Some(format!("{e:#}")));
            }
        };
        if let Err(e) = restore_consoles(&self.store, &mut timelines).await {
            tracing::warn!(error = %format!("{e:#}"), "consoles not read back");
        }
        timelines.settle(event::now_micros());
        let boots = timelines.boots().len();
        *self
            .records
            .timelines
            .write()
            .unwrap_or_else(|e| e.into_inner()) = timelines;
        self.cursor = Some(cursor);
        self.reach(None);
        tracing::info!(
            parked,
            events,
            boots,
            "boot records database answers: parked records \
            written, the site's records read"
        );
    }

    /// Reads the events the other members wrote since the last read into the timelines.
    async fn follow(&mut self) {
        let Some(cursor) = &mut self.cursor else {
            return;
        };
        let gaps = cursor.gaps();
        let read = self.store.events_after(cursor.after(), &gaps, &self.member);
        let rows = match tokio::time::timeout(FOLLOW_WAIT, read).await {
            Ok(Ok(rows)) => rows,
            Ok(Err(e)) => {
                return tracing::debug!(error = %format!("{e:#}"), "site records not read");
            }
            Err(_) => return,
        };
        let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
        let new: std::collections::BTreeSet<i64> = cursor
            .took(&ids, std::time::Instant::now())
            .into_iter()
            .collect();
        let mut touched = std::collections::BTreeSet::new();
        let mut marks = Vec::new();
        let mut t = self
            .records
            .timelines
            .write()
            .unwrap_or_else(|e| e.into_inner());
        for (id, member, ev) in rows {
            let Some(ev) = ev.filter(|_| new.contains(&id)) else {
                continue;
            };
            if t.apply_from(&ev, member.as_deref())
                && let Some(mac) = t.mac_for(ev.who)
            {
                touched.insert(mac);
                marks.push((mac, member));
            }
        }
        self.records.site.recorded(marks);
        self.tell(&t, touched);
    }
}

impl Writer {
    /// Writes the consoles that changed (each boot's whole bounded console, one row), all in
    /// one batch; kept for the next try when the store refuses. Called every `CONSOLE_FLUSH`
    /// and when the writer stops.
    async fn commit_consoles(&mut self) {
        self.consoles_written = tokio::time::Instant::now();
        // Kept until the store first answers (`attach` writes them then).
        if self.consoles.is_empty() || self.cursor.is_none() {
            return;
        }
        let rows: Vec<(String, event::Micros, event::Micros, String)> = self.records.read(|t| {
            self.consoles
                .iter()
                .filter_map(|&id| t.boot(id))
                .map(|b| {
                    let at = b.console.lines().last().map_or(b.start, |l| l.at);
                    (b.mac.to_string(), b.start, at, b.console.to_json())
                })
                .collect()
        });
        match self.store.save_consoles(&rows).await {
            Ok(()) => self.consoles.clear(),
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "cannot write consoles; will retry")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mac;
    use std::path::Path;

    fn server(dir: &Path, retention: &str) -> Server {
        let text = format!(
            "server: {{ address: 127.0.0.1, state_dir: {}, retention: {retention} }}\n\
             dhcp: {{ subnet: 127.0.0.0/8, range: 127.0.0.100-127.0.0.199 }}\n",
            dir.display()
        );
        crate::config::Config::parse(&dir.join("pools.yaml"), &text)
            .unwrap()
            .server
    }

    fn boot(rec: &Recorder, mac: Mac, ip: std::net::Ipv4Addr, at: event::Micros) {
        let ev = |kind| Event {
            at,
            who: Who::Mac(mac),
            kind,
        };
        rec.send(ev(Kind::DhcpDiscover {
            answered: true,
            pool: None,
            pxe: true,
            ipxe: true,
            arch: None,
        }));
        rec.send(ev(Kind::DhcpAck {
            ip,
            pxe: true,
            ipxe: true,
            pool: "p".into(),
            link: None,
            relayed: None,
        }));
        rec.send(Event {
            at: at + 1,
            who: Who::Ip(ip),
            kind: Kind::Booted {
                uptime_s: Some(3.5),
                root_bytes: None,
            },
        });
    }

    #[tokio::test]
    async fn records_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mac: Mac = "52:54:00:77:00:01".parse().unwrap();
        let s = server(dir.path(), "forever");
        {
            let shutdown = Shutdown::new();
            let (rec, _) = start(&s, "", &shutdown, &Metrics::default()).await.unwrap();
            boot(
                &rec,
                mac,
                "10.77.0.100".parse().unwrap(),
                event::now_micros(),
            );
            shutdown.stop_and_wait().await;
        }
        assert!(dir.path().join("records.db").exists());
        let shutdown = Shutdown::new();
        let (_, records) = start(&s, "", &shutdown, &Metrics::default()).await.unwrap();
        let boots = records.read(|t| t.boots().to_vec());
        assert_eq!(boots.len(), 1);
        assert_eq!(boots[0].result, BootResult::Booted);
        assert_eq!(boots[0].uptime_s, Some(3.5));
        shutdown.stop_and_wait().await;
        // The report path reads the same.
        assert_eq!(load(&s).await.unwrap().boots().len(), 1);
    }

    /// A boot's console is stored with the record and given back to the boot at start; its
    /// panic line failed the boot, and the cause says so after the restart too.
    #[tokio::test]
    async fn a_boots_console_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mac: Mac = "52:54:00:77:00:01".parse().unwrap();
        let s = server(dir.path(), "forever");
        {
            let shutdown = Shutdown::new();
            let (rec, _) = start(&s, "", &shutdown, &Metrics::default()).await.unwrap();
            let at = event::now_micros();
            rec.send(Event {
                at,
                who: Who::Mac(mac),
                kind: Kind::DhcpDiscover {
                    answered: true,
                    pool: None,
                    pxe: true,
                    ipxe: true,
                    arch: None,
                },
            });
            rec.console(mac, vec!["Linux version 6.1".into()]);
            rec.console(
                mac,
                vec!["Kernel panic - not syncing: Attempted to kill init!".into()],
            );
            // A client no boot knows: counted, not kept.
            rec.console("52:54:00:77:00:09".parse().unwrap(), vec!["x".into()]);
            shutdown.stop_and_wait().await;
        }
        let t = load(&s).await.unwrap();
        let b = &t.boots()[0];
        let lines: Vec<&str> = b.console.lines().map(|l| l.text.as_str()).collect();
        assert_eq!(
            lines,
            [
                "Linux version 6.1",
                "Kernel panic - not syncing: Attempted to kill init!"
            ]
        );
        assert_eq!(b.result, BootResult::Failed);
        let cause = cause::of(b, event::now_micros()).unwrap();
        assert_eq!(cause.kind, "kernel_panic");
        assert_eq!(t.boots().len(), 1);
    }

    /// One client flooding its console fills only the console queue: the other clients'
    /// events are all recorded, and the lines that did not fit are counted as the console's.
    #[tokio::test]
    async fn a_console_flood_drops_no_events_of_others() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path(), "forever");
        let shutdown = Shutdown::new();
        let metrics = Metrics::default();
        let (rec, records) = start(&s, "", &shutdown, &metrics).await.unwrap();
        let loud: Mac = "52:54:00:77:00:01".parse().unwrap();
        let now = event::now_micros();
        boot(&rec, loud, "10.77.0.1".parse().unwrap(), now);
        let quiet: Vec<Mac> = (2..=201)
            .map(|n| format!("52:54:00:77:00:{n:02x}").parse().unwrap())
            .collect();
        for (k, mac) in quiet.iter().enumerate() {
            for _ in 0..500 {
                rec.console(loud, vec!["flood".into()]);
            }
            boot(&rec, *mac, std::net::Ipv4Addr::new(10, 77, 1, k as u8), now);
        }
        shutdown.stop_and_wait().await;
        assert_eq!(metrics.records().dropped.get(), 0);
        assert!(
            metrics.console().dropped.get() > 0,
            "the flood overflowed nothing"
        );
        let booted = records.read(|t| {
            quiet
                .iter()
                .filter(|m| {
                    t.current(**m)
                        .is_some_and(|b| b.result == BootResult::Booted)
                })
                .count()
        });
        assert_eq!(booted, quiet.len());
    }

    /// Console lines and events come on two channels and are applied in the order they
    /// happened: a panic line, then the firmware's DISCOVER of the next boot, give a failed
    /// boot and a new one, whichever channel the writer read first.
    #[tokio::test]
    async fn console_lines_and_events_are_applied_in_time_order() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path(), "forever");
        let shutdown = Shutdown::new();
        let (rec, records) = start(&s, "", &shutdown, &Metrics::default()).await.unwrap();
        let mac: Mac = "52:54:00:77:00:01".parse().unwrap();
        let discover = |at| Event {
            at,
            who: Who::Mac(mac),
            kind: Kind::DhcpDiscover {
                answered: true,
                pool: None,
                pxe: true,
                ipxe: false,
                arch: None,
            },
        };
        let now = event::now_micros();
        rec.send(discover(now - 1_000_000));
        // Sent first, happened after the panic line below.
        rec.send(discover(now + 10_000_000));
        rec.console(mac, vec!["Kernel panic - not syncing: no init".into()]);
        shutdown.stop_and_wait().await;
        let results = records.read(|t| t.boots().iter().map(|b| b.result).collect::<Vec<_>>());
        assert_eq!(results, [BootResult::Failed, BootResult::Running]);
    }

    #[tokio::test]
    async fn a_legacy_journal_is_imported_once_torn_line_and_all() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path(), "forever");
        let mac: Mac = "52:54:00:77:00:02".parse().unwrap();
        let ev = Event::now(
            Who::Mac(mac),
            Kind::DhcpDiscover {
                answered: true,
                pool: None,
                pxe: true,
                ipxe: false,
                arch: None,
            },
        );
        let journal = serde_json::to_string(&ev).unwrap() + "\n{\"at\":12,\"who\":{\"mac\":\"52:5";
        std::fs::write(dir.path().join("events.jsonl"), journal).unwrap();
        // Before the daemon ever ran, the report reads the journal and creates nothing.
        assert_eq!(load(&s).await.unwrap().boots().len(), 1);
        assert!(!dir.path().join("records.db").exists());
        for _ in 0..2 {
            let shutdown = Shutdown::new();
            let (_, records) = start(&s, "", &shutdown, &Metrics::default()).await.unwrap();
            assert_eq!(records.read(|t| t.boots().len()), 1);
            shutdown.stop_and_wait().await;
        }
        assert_eq!(load_events(&s).await.unwrap(), [ev]);
    }

    #[tokio::test]
    async fn retention_forgets_old_records_at_start_and_while_running() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path(), "1h");
        let day = 86_400 * 1_000_000;
        let now = event::now_micros();
        let (old, new): (Mac, Mac) = (
            "52:54:00:77:00:01".parse().unwrap(),
            "52:54:00:77:00:02".parse().unwrap(),
        );
        {
            // Written with retention off, as a daemon from long ago would have.
            let keep_all = server(dir.path(), "forever");
            let shutdown = Shutdown::new();
            let (rec, _) = start(&keep_all, "", &shutdown, &Metrics::default())
                .await
                .unwrap();
            boot(&rec, old, "10.77.0.1".parse().unwrap(), now - 2 * day);
            boot(&rec, new, "10.77.0.2".parse().unwrap(), now);
            let saved = egress::Saved::at((now - 2 * day) as f64 / 1e6);
            rec.egress(saved);
            rec.egress(egress::Saved::at(now as f64 / 1e6));
            shutdown.stop_and_wait().await;
        }
        let store = Store::open(&s.database).await.unwrap();
        assert_eq!(store.egress_since(0.0).await.unwrap().len(), 2);
        // At start: the two-day-old boot and sample go, today's stay.
        let shutdown = Shutdown::new();
        let (_rec, records) = start_with(
            &s,
            "",
            &shutdown,
            &Metrics::default(),
            Duration::from_millis(300),
        )
        .await
        .unwrap();
        let macs: Vec<Mac> = records.read(|t| t.boots().iter().map(|b| b.mac).collect());
        assert_eq!(macs, [new]);
        assert_eq!(store.egress_since(0.0).await.unwrap().len(), 1);
        // While running: rows past the retention (here put in behind the writer's back, as a
        // clock step would) are swept within a sweep interval.
        let count = || async {
            let mut n = 0;
            store.replay(|_| n += 1).await.unwrap();
            n
        };
        let stale: Vec<Event> = (0..3)
            .map(|i| Event {
                at: now - 3 * day + i,
                who: Who::Mac(old),
                kind: Kind::DhcpDiscover {
                    answered: true,
                    pool: None,
                    pxe: true,
                    ipxe: false,
                    arch: None,
                },
            })
            .collect();
        store.append(&stale, &[]).await.unwrap();
        assert_eq!(count().await, 6);
        let mut swept = false;
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if count().await == 3 {
                swept = true;
                break;
            }
        }
        assert!(swept, "{} events left", count().await);
        shutdown.stop_and_wait().await;
    }
}

//! A site in the storm's room (`--servers K`): K `bootpool serve`, members `s1` to `sK` of
//! one site on the storm's PostgreSQL (`postgres`), each in a network namespace of its own
//! with its own shaped links on the room's switch, as K machines on one network. Each runs a
//! config derived from the storm's (`member_config`: its addresses, its state folder, the
//! database; the members share the storm's `dhcp.range`, as a site's shared leases allow). A thread of the storm lives in each member's namespace:
//! it wires the member's links, starts its server (as its parent, so that the server dies
//! with it), reads the server's API from the server's own host, and stops the server.

use super::room::{self, Link};
use anyhow::{Context, bail};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The storm's site: its database and its members.
pub struct Site {
    pub members: Vec<Member>,
    // Dropped after the members (fields drop in order): their servers stop first.
    _db: super::postgres::Postgres,
}

/// One member: its server's namespace, links and files.
pub struct Member {
    pub name: String,
    pub links: Vec<Link>,
    pub state_dir: PathBuf,
    pub log: PathBuf,
    /// Its derived config, beside the storm's (removed when the member is dropped).
    pub config: PathBuf,
    /// Its server's process id, once started.
    pub pid: Option<u32>,
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What the storm asks of a member's thread.
enum Job {
    Wire(
        Vec<Ipv4Addr>,
        u8,
        u64,
        String,
        mpsc::Sender<Result<(), String>>,
    ),
    Start(Command, mpsc::Sender<Result<u32, String>>),
    Get(String, mpsc::Sender<Result<String, String>>),
    /// Another program in the member's namespace (`fail`: keepalived, `ip`).
    Spawn(Command, mpsc::Sender<std::io::Result<Child>>),
    /// How the server exited, if it has.
    Exited(mpsc::Sender<Option<String>>),
    /// Whether a TCP connection to this address is taken, from the member's host.
    Connects(std::net::SocketAddr, mpsc::Sender<bool>),
    /// The processes in the member's namespace (its host's), the storm excepted.
    Pids(mpsc::Sender<Vec<libc::pid_t>>),
    /// Every process in the member's namespace killed with -9: a host's services dying.
    KillAll(mpsc::Sender<()>),
}

/// The life of a member's thread: a namespace of its own (its id sent on `tid`), then the
/// jobs, then its server stopped once the storm drops the member.
fn member_thread(tid: mpsc::Sender<Result<libc::pid_t, String>>, jobs: mpsc::Receiver<Job>) {
    if let Err(e) = bootpool::sys::process::unshare_network() {
        let _ = tid.send(Err(format!("no namespace: {e}")));
        return;
    }
    let _ = tid.send(Ok(bootpool::sys::process::gettid()));
    let netns = super::sample::own_netns();
    if let Some(ns) = netns {
        super::leftovers::register_host(ns);
    }
    let storm = std::process::id();
    let pids = move || netns.map_or(Vec::new(), |ns| super::sample::pids_in(ns, storm));
    let kill_all = || {
        for pid in pids() {
            let _ = bootpool::sys::process::kill(pid, libc::SIGKILL);
        }
    };
    let mut server: Option<Child> = None;
    for job in jobs {
        match job {
            Job::Wire(addresses, prefix, rate, first_dev, done) => {
                let wired = room::address_links(&addresses, prefix, rate, &first_dev)
                    .map(|_| ())
                    .map_err(|e| format!("{e:#}"));
                let _ = done.send(wired);
            }
            Job::Start(mut cmd, done) => {
                let started = cmd.spawn().map_err(|e| e.to_string());
                let _ = done.send(started.map(|c| {
                    let pid = c.id();
                    server = Some(c);
                    pid
                }));
            }
            Job::Get(url, done) => {
                let _ = done.send(super::report::get(&url));
            }
            Job::Spawn(mut cmd, done) => {
                let _ = done.send(cmd.spawn());
            }
            Job::Exited(done) => {
                let status = server.as_mut().and_then(|c| c.try_wait().ok().flatten());
                let _ = done.send(status.map(|s| s.to_string()));
            }
            Job::Connects(addr, done) => {
                let ok =
                    std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok();
                let _ = done.send(ok);
            }
            Job::Pids(done) => {
                let _ = done.send(pids());
            }
            Job::KillAll(done) => {
                kill_all();
                let _ = done.send(());
            }
        }
    }
    if let Some(child) = server {
        stop(child);
    }
    // What left the server's process group (nbd-server forks away) goes with the member.
    kill_all();
}

/// SIGTERM to the server's process group, SIGKILL after 5 s, and reaped.
fn stop(mut child: Child) {
    // Our own child's group.
    let group = -(child.id() as i32);
    let _ = bootpool::sys::process::kill(group, libc::SIGTERM);
    for _ in 0..50 {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = bootpool::sys::process::kill(group, libc::SIGKILL);
    let _ = child.wait();
}

impl Member {
    fn ask<T>(&self, job: impl FnOnce(mpsc::Sender<T>) -> Job) -> anyhow::Result<T> {
        let (tx, rx) = mpsc::channel();
        let jobs = self.jobs.as_ref().context("the member is stopped")?;
        jobs.send(job(tx))
            .ok()
            .context("the member's thread has ended")?;
        rx.recv().ok().context("the member's thread has ended")
    }

    /// GET `path` of the member's API, from its own host (its namespace, its first address).
    pub fn get(&self, path: &str, port: u16) -> Result<String, String> {
        let url = format!("http://{}:{port}{path}", self.links[0].address);
        self.ask(|tx| Job::Get(url, tx))
            .map_err(|e| e.to_string())
            .and_then(|r| r)
    }

    /// Starts the member's server, `cmd`, in its namespace, its parent the member's thread
    /// (stopped when the member is dropped): its process id, kept in `pid`.
    pub fn start(&mut self, cmd: Command) -> anyhow::Result<u32> {
        let pid = self
            .ask(|tx| Job::Start(cmd, tx))?
            .map_err(|e| anyhow::anyhow!("starting member {}: {e}", self.name))?;
        self.pid = Some(pid);
        Ok(pid)
    }

    /// Whether the member's first address takes a TCP connection on `port`, from its host.
    pub fn answers(&self, port: u16) -> bool {
        let addr = std::net::SocketAddr::from((self.links[0].address, port));
        self.ask(|tx| Job::Connects(addr, tx)).unwrap_or(false)
    }

    /// The processes on the member's host (its namespace).
    pub fn pids(&self) -> Vec<libc::pid_t> {
        self.ask(Job::Pids).unwrap_or_default()
    }

    /// Kills every process on the member's host with -9.
    pub fn kill_all(&self) {
        let _ = self.ask(Job::KillAll);
    }

    /// Starts `cmd` in the member's namespace (its parent is the storm).
    pub fn spawn(&self, cmd: Command) -> anyhow::Result<Child> {
        self.ask(|tx| Job::Spawn(cmd, tx))?
            .with_context(|| format!("starting a program in member {}'s namespace", self.name))
    }

    /// A counter of the member's /metrics (`series`: the name and labels as it prints them).
    pub fn metric(&self, series: &str, port: u16) -> Option<u64> {
        let text = self.get("/metrics", port).ok()?;
        text.lines().find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
    }

    /// Waits up to 60 s until the member's API answers and its view of the site holds
    /// `want` live members (or more); fails if its server exits.
    fn wait_live(&self, want: usize, http_port: u16) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let live = self
                .get("/api/v1/site", http_port)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .map_or(0, |v| live_members(&v));
            if live >= want {
                return Ok(());
            }
            if let Some(status) = self.exited() {
                bail!(
                    "member {} exited ({status}):\n{}",
                    self.name,
                    self.log_text()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "member {} saw {live} of the {want} members live within 60 s:\n{}",
                    self.name,
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn exited(&self) -> Option<String> {
        self.ask(Job::Exited).ok().flatten()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // Its thread stops the server once its jobs end.
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        super::leftovers::remove(&self.config);
    }
}

/// What a member's config changes in the storm's (`text`): its `server.address`, `links`
/// (its addresses), `state_dir`, `database` and `http` (every address, at the storm's port).
/// All else is the storm's, as on every member of a site: `dhcp.range` too, which the members
/// share (`site_leases`), and `server.placement` (the default `owner`: each boot on its
/// owner's links; `site`: on the least-loaded member's link).
pub fn member_config(
    text: &str,
    addresses: &[Ipv4Addr],
    state_dir: &Path,
    database: &str,
    http_port: u16,
) -> anyhow::Result<String> {
    use serde_norway::Value;
    let mut doc: Value = serde_norway::from_str(text).context("reading the config's YAML")?;
    let server = doc
        .get_mut("server")
        .and_then(Value::as_mapping_mut)
        .context("the config has no `server:` section")?;
    let s = |v: String| Value::String(v);
    server.insert(s("address".into()), s(addresses[0].to_string()));
    server.insert(
        s("links".into()),
        Value::Sequence(addresses.iter().map(|a| s(a.to_string())).collect()),
    );
    server.insert(s("state_dir".into()), s(state_dir.display().to_string()));
    server.insert(s("database".into()), s(database.to_string()));
    server.insert(s("http".into()), s(format!("0.0.0.0:{http_port}")));
    serde_norway::to_string(&doc).context("writing a member's YAML")
}

/// Where the room's site starts from: the storm's config and what it gives each member.
pub struct Plan<'a> {
    pub config_path: &'a Path,
    pub config: &'a bootpool::config::Config,
    /// Every member's addresses, `links` of them each, member after member.
    pub addresses: &'a [Ipv4Addr],
    pub links: usize,
    pub prefix: u8,
    pub rate: u64,
    pub first_dev: &'a str,
    pub http_port: u16,
}

impl Site {
    /// Starts the database, a namespace per member, and wires the members' links into the
    /// room's switch (which it makes): each link shaped to `rate`, as one server's are.
    pub fn wire(k: usize, plan: &Plan) -> anyhow::Result<Site> {
        let db = super::postgres::Postgres::start()?;
        room::wire_switch()?;
        let text = std::fs::read_to_string(plan.config_path)
            .with_context(|| format!("reading {}", plan.config_path.display()))?;
        let state_root = std::path::absolute(&plan.config.server.state_dir)?
            .join("storm-site")
            .join(format!("{k}-servers"));
        let mut members = Vec::new();
        for m in 0..k {
            let name = format!("s{}", m + 1);
            let (tid_tx, tid_rx) = mpsc::channel();
            let (jobs, jobs_rx) = mpsc::channel();
            let thread = std::thread::Builder::new()
                .name(format!("member-{name}"))
                .spawn(move || member_thread(tid_tx, jobs_rx))
                .context("starting a member's thread")?;
            let tid = tid_rx
                .recv()
                .ok()
                .context("a member's thread ended")?
                .map_err(|e| anyhow::anyhow!("member {name}: {e}"))?;
            let addresses = &plan.addresses[m * plan.links..(m + 1) * plan.links];
            let mut cmds = Vec::new();
            let mut links = Vec::new();
            for (j, &address) in addresses.iter().enumerate() {
                let dev = room::server_dev(plan.first_dev, j);
                let port = format!("m{m}p{j}");
                cmds.push(format!(
                    "link add {dev} netns {tid} type veth peer name {port}"
                ));
                cmds.push(format!("link set {port} master {}", room::BRIDGE));
                cmds.push(format!("link set {port} up"));
                links.push(Link {
                    dev,
                    address,
                    rate: plan.rate,
                    macs: None,
                    switch_port: Some(port),
                });
            }
            room::ip(&cmds)?;
            let state_dir = state_root.join(&name);
            let stem = plan
                .config_path
                .file_stem()
                .map_or("pools".into(), |s| s.to_string_lossy().into_owned());
            let config = plan
                .config_path
                .with_file_name(format!(".{stem}.storm-{name}.yaml"));
            let member = Member {
                name,
                links,
                log: PathBuf::new(),
                state_dir: state_dir.clone(),
                config: config.clone(),
                pid: None,
                jobs: Some(jobs),
                thread: Some(thread),
            };
            member
                .ask(|tx| {
                    Job::Wire(
                        addresses.to_vec(),
                        plan.prefix,
                        plan.rate,
                        plan.first_dev.to_string(),
                        tx,
                    )
                })?
                .map_err(|e| anyhow::anyhow!("wiring member {}: {e}", member.name))?;
            let yaml = member_config(&text, addresses, &state_dir, &db.url(), plan.http_port)?;
            super::leftovers::register(&config);
            std::fs::write(&config, yaml)
                .with_context(|| format!("writing {}", config.display()))?;
            members.push(member);
        }
        Ok(Site { members, _db: db })
    }

    /// Every member's links, member after member.
    pub fn links(&self) -> Vec<Link> {
        self.members.iter().flat_map(|m| m.links.clone()).collect()
    }

    /// Starts every member's server (`serve --member NAME`, its log in `run_dir`), one after
    /// the other, each once the one before answers (two daemons making the record tables of
    /// a new database at once collide in PostgreSQL's catalogue), and waits until each sees
    /// all K members live with their links published (so that the split and the placement are
    /// the whole site's before any client asks) and has made its wire copies.
    pub fn start(&mut self, run_dir: &Path, http_port: u16) -> anyhow::Result<()> {
        use std::os::unix::process::CommandExt;
        let k = self.members.len();
        for m in &mut self.members {
            m.log = run_dir.join(format!("server-{}.log", m.name));
            forget_leases(&m.state_dir)?;
            let log = std::fs::File::create(&m.log)?;
            let mut cmd = Command::new(crate::lab::daemon());
            cmd.arg("serve")
                .arg("--config")
                .arg(&m.config)
                .arg("--member")
                .arg(&m.name)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .process_group(0);
            // Its parent is the member's thread: it goes when that thread does.
            crate::lab::dies_with_lab(&mut cmd, libc::SIGTERM);
            bootpool::sys::process::unblock_signals_in_child(&mut cmd);
            m.start(cmd)?;
            m.wait_live(1, http_port)?;
        }
        for m in &self.members {
            m.wait_live(k, http_port)?;
            crate::lab::wire_wait::wait_while_wire_pending("storm", &mut || {
                m.get("/api/v1/images", http_port)
                    .map_err(|e| anyhow::anyhow!("member {}: {e}", m.name))
            })?;
        }
        Ok(())
    }
}

/// How many members `GET /api/v1/site` (`v`) says are live with their own links published
/// (a member's first heartbeats, while it starts, carry no load yet, and an owner offers no
/// boot a link it has not seen: a room started then is split by the hash alone).
fn live_members(v: &serde_json::Value) -> usize {
    let ready = |m: &&serde_json::Value| {
        m["live"] == true
            && m["load"]
                .as_array()
                .is_some_and(|l| l.iter().any(|p| p["own"] == true))
    };
    v["members"]
        .as_array()
        .map_or(0, |ms| ms.iter().filter(ready).count())
}

/// Empties the lease table (snapshot, journal, site spool) that a bootpool server of the
/// storm, alone or a member of a site, keeps in `state_dir`: each run's clients are new
/// machines, and leases left by an earlier run's other MACs, unexpired, would hold the range (a
/// full range offers nothing). The rest of the state folder (wire copies, records) is kept.
pub(crate) fn forget_leases(state_dir: &std::path::Path) -> anyhow::Result<()> {
    use bootpool::service::lease_file::{JOURNAL, SNAPSHOT};
    for name in [SNAPSHOT, JOURNAL, bootpool::site::lease_spool::SPOOL] {
        match std::fs::remove_file(state_dir.join(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e)
                    .with_context(|| format!("removing {}", state_dir.join(name).display()));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_members_config_is_the_storms_with_its_own_addresses_state_and_database() {
        let text = "\
server:
  interfaces: [s0]
  address: 10.78.0.1
  links: [10.78.0.1, 10.78.0.2]
  http: 10.78.0.1:8080
  state_dir: ../../var/storm-state/
  link_speeds: { s0: 250mbit, s1: 250mbit }
dhcp:
  mode: authoritative
  subnet: 10.78.0.0/22
  range: 10.78.1.0-10.78.2.250
images:
  demo: { dir: ../../images/demo }
";
        let addresses = [Ipv4Addr::new(10, 78, 0, 3), Ipv4Addr::new(10, 78, 0, 4)];
        let out = member_config(
            text,
            &addresses,
            Path::new("/var/s2"),
            "postgres:///postgres?host=/tmp/pg",
            8080,
        )
        .unwrap();
        let v: serde_norway::Value = serde_norway::from_str(&out).unwrap();
        assert_eq!(v["server"]["address"].as_str(), Some("10.78.0.3"));
        assert_eq!(v["server"]["links"][1].as_str(), Some("10.78.0.4"));
        assert_eq!(v["server"]["state_dir"].as_str(), Some("/var/s2"));
        assert_eq!(v["server"]["http"].as_str(), Some("0.0.0.0:8080"));
        assert_eq!(
            v["server"]["database"].as_str(),
            Some("postgres:///postgres?host=/tmp/pg")
        );
        // The rest is the storm's: the range is the site's, shared.
        assert_eq!(v["dhcp"]["range"].as_str(), Some("10.78.1.0-10.78.2.250"));
        assert_eq!(v["server"]["interfaces"][0].as_str(), Some("s0"));
        assert_eq!(
            v["images"]["demo"]["dir"].as_str(),
            Some("../../images/demo")
        );
    }

    #[test]
    fn the_live_members_are_counted_from_the_sites_view() {
        let own = serde_json::json!([{"address": "10.78.0.1", "own": true}]);
        let v = serde_json::json!({"members": [
            {"name": "s1", "live": true, "load": own}, {"name": "s2", "live": false, "load": own},
            {"name": "s3", "live": true, "load": own}, {"name": "s4", "live": true, "load": []}
        ]});
        assert_eq!(live_members(&v), 2, "s4 has published no link yet");
        assert_eq!(live_members(&serde_json::json!({})), 0);
    }
}

//! The storm's swarm (`bootpool storm --swarm AGENT`, docs/swarm.md "Measured in the storm"):
//! the NBD pool's root read through the real `bootpool-agent` in every client's namespace,
//! sharing with the room's other agents through the server's tracker, and the report's row of
//! what that cost the server and the agents.
//!
//! - `config`: the storm's config with the pool's root through the agent (`nbd: { via: agent,
//!   peers: true }`, `server.agent`), so the boot script names the manifest and the peers' port
//!   (`bootpool.blocks=`, `bootpool.peers=`) as it would for a room of PCs.
//! - `Agents`: each client starts its agent when its root phase begins (as the initrd's hook
//!   does, before the kernel's NBD client attaches), on the command line the script gave; the
//!   agents serve their peers until the whole room has booted, then each one's CPU time is read
//!   from /proc and it is killed, and its log's last summary line says what it fetched.
//! - `Row`: the server's chunks sent (its /metrics, `bootpool_chunks_sent_total`) against the
//!   one-copy floor (the chunks the trace's reads touch), the chunks from peers, the agents'
//!   CPU time per GB moved and that as a share of one core at 1 Gbit/s. A unicast NBD row gets
//!   the same floor, and the root bytes its clients read in chunk units beside it.

use anyhow::{Context, bail};
use bootpool::trace::format::{Trace, What};
use serde::Serialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an agent has to fetch its manifest and listen.
const LISTEN_WITHIN: Duration = Duration::from_secs(60);

/// The storm's config (YAML `text`) with pool `pool`'s root read through the agent at
/// `agent`, sharing with its room: `server.agent`, and the pool's `nbd: { via: agent, peers:
/// true }` and `initramfs: initramfs-tools` (the agent rides in the addition of a stock
/// initrd; the storm's clients replay the demo's boot, and start the agent themselves).
pub fn config(text: &str, pool: &str, agent: &Path) -> anyhow::Result<String> {
    use serde_norway::Value;
    let mut doc: Value = serde_norway::from_str(text).context("reading the config's YAML")?;
    let s = |v: &str| Value::String(v.to_string());
    let server = doc
        .get_mut("server")
        .and_then(Value::as_mapping_mut)
        .context("the config has no `server` section")?;
    server.insert(s("agent"), s(&agent.display().to_string()));
    let p = doc
        .get_mut("pools")
        .and_then(|p| p.get_mut(pool))
        .and_then(Value::as_mapping_mut)
        .with_context(|| format!("the config has no pool `{pool}`"))?;
    let mut nbd = serde_norway::Mapping::new();
    nbd.insert(s("via"), s("agent"));
    nbd.insert(s("peers"), Value::Bool(true));
    p.insert(s("nbd"), Value::Mapping(nbd));
    p.insert(s("initramfs"), s("initramfs-tools"));
    Ok(serde_norway::to_string(&doc)?)
}

/// `--swarm AGENT`: the storm's config written again beside it (`.NAME.storm-swarm.yaml`,
/// so its relative paths hold) with the pool to boot (`--pool`, else the first NBD pool) read
/// through the agent, and `args` pointed at it and that pool; the file, to remove at the end.
pub fn prepare(args: &mut super::args::StormArgs, agent: &Path) -> anyhow::Result<PathBuf> {
    let agent = std::fs::canonicalize(agent)
        .with_context(|| format!("--swarm {}: the static bootpool-agent", agent.display()))?;
    let loaded = bootpool::config::Config::load(&args.config)?;
    let pool = match &args.pool {
        Some(name) => name.clone(),
        None => loaded
            .pools
            .values()
            .find(|p| p.root == bootpool::config::RootProto::Nbd)
            .map(|p| p.name.clone())
            .with_context(|| format!("--swarm: no NBD pool in {}", args.config.display()))?,
    };
    let text = std::fs::read_to_string(&args.config)?;
    let name = args
        .config
        .file_name()
        .map_or("pools.yaml".into(), |n| n.to_string_lossy().to_string());
    let out = args
        .config
        .with_file_name(format!(".{name}.storm-swarm.yaml"));
    std::fs::write(&out, config(&text, &pool, &agent)?)
        .with_context(|| format!("writing {}", out.display()))?;
    super::leftovers::register(&out);
    args.config = out.clone();
    args.pool = Some(pool);
    Ok(out)
}

/// What the server needs before a swarm's room powers on: the block manifest beside the root
/// image (made if missing: the boot script names it only when it is there), and the replayed
/// trace among the traces it kept (`state_dir/traces`), as a boot of this image recorded by a
/// pool with `trace: true` would be, so the tracker hands out its order.
pub fn ready_server(root_image: &Path, state_dir: &Path, trace: &Trace) -> anyhow::Result<()> {
    bootpool::image::blocks_file::make_missing(root_image)
        .with_context(|| format!("making the block manifest of {}", root_image.display()))?;
    let dir = state_dir.join("traces");
    std::fs::create_dir_all(&dir)?;
    let stem = trace.header.mac.replace(':', "");
    let file = dir.join(format!("{stem}-{}.trace", trace.header.recorded as u64));
    std::fs::write(&file, trace.to_text()).with_context(|| format!("writing {}", file.display()))
}

/// What the server counted of a swarm: its chunks sent and its tracker's answers by the
/// source named.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ServerCounts {
    /// `bootpool_chunks_sent_total`.
    pub chunks_sent: u64,
    /// `bootpool_tracker_answers_total` by `to`: holders, the receiver, the server.
    pub to_holders: u64,
    pub to_receiver: u64,
    pub to_server: u64,
}

impl ServerCounts {
    /// The counts in the text of the server's /metrics; none without the chunks sent.
    pub fn parse(metrics: &str) -> Option<ServerCounts> {
        let value = |name: &str| -> Option<u64> {
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        };
        Some(ServerCounts {
            chunks_sent: value("bootpool_chunks_sent_total ")?,
            to_holders: value("bootpool_tracker_answers_total{to=\"holders\"} ").unwrap_or(0),
            to_receiver: value("bootpool_tracker_answers_total{to=\"receiver\"} ").unwrap_or(0),
            to_server: value("bootpool_tracker_answers_total{to=\"server\"} ").unwrap_or(0),
        })
    }

    /// What was counted from `before` to `self`.
    pub fn since(self, before: ServerCounts) -> ServerCounts {
        ServerCounts {
            chunks_sent: self.chunks_sent.saturating_sub(before.chunks_sent),
            to_holders: self.to_holders.saturating_sub(before.to_holders),
            to_receiver: self.to_receiver.saturating_sub(before.to_receiver),
            to_server: self.to_server.saturating_sub(before.to_server),
        }
    }
}

/// One agent started by a client.
struct Running {
    index: usize,
    child: Child,
    log: PathBuf,
    started: Instant,
    /// Killed with -9 mid-boot (`--swarm-cut`): its log is read, its CPU time is not.
    cut: bool,
}

/// What serves a client its root from the room: bootpool's agent, the reference swarm's
/// `nbdkit torrent` (`--torrent`, `torrent.rs`), or udpcast's receiver and then `nbdkit file`
/// (`--multicast`, `multicast.rs`).
pub enum Engine {
    Agent,
    /// The `.torrent` to fetch, and the folder under which each client keeps its pieces.
    Torrent {
        torrent: PathBuf,
        cache: PathBuf,
    },
    /// The folder under which each client writes its copy, named `name`.
    Multicast {
        dir: PathBuf,
        name: String,
    },
}

/// The room's agents (or, with `--torrent`, its nbdkit torrent clients).
pub struct Agents {
    pub binary: PathBuf,
    pub engine: Engine,
    dir: PathBuf,
    running: Mutex<Vec<Running>>,
    /// The clients that play a corrupting peer instead (`--swarm-corrupt`).
    pub rogues: std::collections::BTreeSet<usize>,
}

/// What one agent did, from its log's last summary line and /proc.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AgentCount {
    pub index: usize,
    pub held: u64,
    pub from_peers: u64,
    pub from_servers: u64,
    pub served_to_peers: u64,
    pub refused: u64,
    pub silent: u64,
    /// Chunks it took from the servers, by why (agents since session 40 say; 0 before):
    /// no tracker answer, no peer named, every peer named failed; and tries a peer answered
    /// that it lacked the chunk.
    pub unanswered: u64,
    pub none_named: u64,
    pub peers_failed: u64,
    pub lacked: u64,
    pub cpu_s: f64,
}

impl Agents {
    pub fn new(binary: PathBuf, dir: &Path) -> Agents {
        Agents {
            binary,
            engine: Engine::Agent,
            dir: dir.to_path_buf(),
            running: Mutex::new(Vec::new()),
            rogues: Default::default(),
        }
    }

    /// Starts client `index`'s agent in the calling thread's network namespace, as the
    /// initrd's hook does with the command line's values: the manifest's URLs (`blocks`, a
    /// comma list), the export on 127.0.0.1:`port` named `export`, and its peers served on
    /// `peers`; returns once it listens.
    pub fn start(
        &self,
        index: usize,
        blocks: &str,
        peers: Option<u16>,
        port: u16,
        export: &str,
    ) -> anyhow::Result<()> {
        let log = self.dir.join(format!("agent{index}.log"));
        let out = std::fs::File::create(&log)?;
        let mut cmd = match &self.engine {
            Engine::Agent => {
                let mut cmd = Command::new(&self.binary);
                cmd.args(["--listen", &format!("127.0.0.1:{port}"), "--name", export]);
                if let Some(p) = peers {
                    cmd.args(["--peers", &format!("0.0.0.0:{p}")]);
                }
                cmd.arg(blocks);
                cmd
            }
            Engine::Multicast { dir, name } => {
                let mine = dir.join(format!("c{index}"));
                std::fs::create_dir_all(&mine)?;
                super::multicast::client_command(&format!("c{index}"), &mine.join(name), port)
            }
            Engine::Torrent { torrent, cache } => {
                // Any export name is its one export; its pieces in a folder of its own.
                let cache = cache.join(format!("c{index}"));
                std::fs::create_dir_all(&cache)?;
                let mut cmd = Command::new("nbdkit");
                cmd.args(["-f", "-i", "127.0.0.1", "-p", &port.to_string(), "torrent"])
                    .arg(torrent)
                    .arg(format!("cache={}", cache.display()));
                cmd
            }
        };
        // No parent-death signal: it would come when this client's thread ends, not the
        // storm; `procs::end_all` ends them.
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", self.name()))?;
        super::procs::track(child.id());
        let pid = child.id();
        lock(&self.running).push(Running {
            index,
            child,
            log,
            started: Instant::now(),
            cut: false,
        });
        let at = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        // udpcast's client listens once the whole room has its copy.
        let within = match self.engine {
            Engine::Multicast { .. } => {
                LISTEN_WITHIN + Duration::from_secs(super::multicast::ROOM_WITHIN_S)
            }
            _ => LISTEN_WITHIN,
        };
        let until = Instant::now() + within;
        loop {
            if std::net::TcpStream::connect_timeout(&at, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            let exited = lock(&self.running)
                .iter_mut()
                .find(|r| r.child.id() == pid)
                .and_then(|r| r.child.try_wait().ok().flatten());
            if let Some(status) = exited {
                bail!(
                    "its agent exited ({status}): {}",
                    last_line(&self.dir.join(format!("agent{index}.log")))
                );
            }
            if Instant::now() >= until {
                bail!("its agent did not listen within {} s", within.as_secs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills client `index`'s agent with -9 if it has run for `after` or more and was not
    /// killed yet (`--swarm-cut`); true if it was killed now.
    pub fn cut(&self, index: usize, after: Duration) -> bool {
        let mut running = lock(&self.running);
        let Some(r) = running
            .iter_mut()
            .find(|r| r.index == index && !r.cut && r.started.elapsed() >= after)
        else {
            return false;
        };
        r.cut = true;
        let _ = r.child.kill();
        let _ = r.child.wait();
        true
    }

    /// Whether client `index`'s agent was killed by `cut`.
    pub fn was_cut(&self, index: usize) -> bool {
        lock(&self.running)
            .iter()
            .any(|r| r.index == index && r.cut)
    }

    /// Ends every agent (the room has booted): its CPU time read first, then killed and
    /// reaped, then its log read. In the order of the clients.
    pub fn finish(&self) -> Vec<AgentCount> {
        // Past its last change an agent's summary is at most a second old: let it be said.
        std::thread::sleep(Duration::from_millis(1200));
        let mut running = std::mem::take(&mut *lock(&self.running));
        let mut counts: Vec<AgentCount> = running
            .iter_mut()
            .map(|r| {
                let cpu_s = if r.cut {
                    0.0
                } else {
                    // With what it ran and reaped (udpcast's receiver).
                    super::sample::cpu_with_reaped_of(&r.child.id().to_string())
                };
                let _ = r.child.kill();
                let _ = r.child.wait();
                let text = std::fs::read_to_string(&r.log).unwrap_or_default();
                let mut c = summary(&text).unwrap_or_default();
                c.index = r.index;
                c.cpu_s = cpu_s;
                c
            })
            .collect();
        super::procs::forget(&running.iter().map(|r| r.child.id()).collect::<Vec<_>>());
        counts.sort_by_key(|c| c.index);
        counts
    }

    /// What a client runs for its root from the room, for messages.
    fn name(&self) -> String {
        match self.engine {
            Engine::Agent => self.binary.display().to_string(),
            Engine::Torrent { .. } => "nbdkit torrent".into(),
            Engine::Multicast { .. } => "udp-receiver, then nbdkit file".into(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn last_line(log: &Path) -> String {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .last()
        .unwrap_or("")
        .to_string()
}

/// The agent's last summary line in its log (`H chunks held, P from peers, S from the
/// servers; served V to peers; refused R from peers, T silent; to the servers: U unanswered, E
/// none named, F peers failed (L lacked)`), as counts.
fn summary(log: &str) -> Option<AgentCount> {
    let line = log.lines().rev().find(|l| l.contains(" chunks held, "))?;
    let after = |key: &str| -> Option<u64> {
        let (before, _) = line.split_once(key)?;
        before.split_whitespace().last()?.parse().ok()
    };
    let served = line
        .split_once("served ")?
        .1
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let refused = line
        .split_once("refused ")?
        .1
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(AgentCount {
        index: 0,
        held: after(" chunks held")?,
        from_peers: after(" from peers,")?,
        from_servers: after(" from the servers")?,
        served_to_peers: served,
        refused,
        silent: after(" silent")?,
        unanswered: after(" unanswered").unwrap_or(0),
        none_named: after(" none named").unwrap_or(0),
        peers_failed: after(" peers failed").unwrap_or(0),
        lacked: line
            .split_once("failed (")
            .and_then(|(_, r)| r.split_whitespace().next()?.parse().ok())
            .unwrap_or(0),
        cpu_s: 0.0,
    })
}

/// The clients' CPU seconds together, and per GB of `bytes` they moved, and that at 1 Gbit/s
/// (0.125 GB a second) as a share of one core, in percent.
fn cpu_figures(counts: &[AgentCount], bytes: u64) -> (f64, Option<f64>, Option<f64>) {
    let cpu_s: f64 = counts.iter().map(|c| c.cpu_s).sum();
    let per_gb = (bytes > 0).then(|| cpu_s / (bytes as f64 / 1e9));
    (cpu_s, per_gb, per_gb.map(|s| s * 0.125 * 100.0))
}

/// Clients by their names in the report (`c007`), in order.
fn clients(indices: &[usize]) -> String {
    let mut v = indices.to_vec();
    v.sort_unstable();
    v.iter()
        .map(|i| format!("c{i:03}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The one-copy floor: the chunks of `chunk` bytes that the trace's NBD reads touch, each once.
pub fn floor(trace: &Trace, chunk: u64) -> u64 {
    let mut seen = HashSet::new();
    for op in &trace.ops {
        if let What::Nbd {
            cmd, offset, len, ..
        } = &op.what
            && cmd == "read"
            && *len > 0
        {
            for i in offset / chunk..=(offset + len - 1) / chunk {
                seen.insert(i);
            }
        }
    }
    seen.len() as u64
}

/// The report's swarm line (and, for a unicast NBD row, its copies of the root).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    /// `swarm` (the agents) or `unicast` (the kernel's NBD client to the server).
    pub mode: String,
    pub chunk: u64,
    /// Chunks one boot reads: what the server must send the room at least.
    pub floor_chunks: u64,
    /// Chunks the server sent the agents (its /metrics); for unicast, the root bytes the
    /// clients read, in chunks.
    pub server_chunks: Option<f64>,
    /// `server_chunks` over `floor_chunks`: copies of the boot's root the server sent.
    pub copies: Option<f64>,
    /// The whole root image, in chunks (a torrent's clients fetch every one).
    pub image_chunks: u64,
    pub agents: usize,
    pub from_peers: u64,
    pub from_servers: u64,
    pub served_to_peers: u64,
    pub refused: u64,
    pub silent: u64,
    /// The agents' chunks from the servers by why (`AgentCount`), summed.
    pub unanswered: u64,
    pub none_named: u64,
    pub peers_failed: u64,
    pub lacked: u64,
    /// The agents' CPU seconds together, and the bytes they moved: fetched (from peers and
    /// servers), served to peers and served to their NBD readers.
    pub agent_cpu_s: f64,
    pub agent_bytes: u64,
    pub cpu_s_per_gb: Option<f64>,
    /// `cpu_s_per_gb` at 1 Gbit/s (0.125 GB a second), as a share of one core, in percent.
    pub core_pct_at_1gbit: Option<f64>,
    /// The machine's CPUs set the pace for 10% of the room's time or more: not of record.
    pub invalid: bool,
    pub agent_counts: Vec<AgentCount>,
    /// The tracker's answers during the storm, by the source named (a swarm row).
    pub tracker: Option<ServerCounts>,
    /// `--swarm-cut`: the clients switched off, and how long after their agents started.
    pub cut: Vec<usize>,
    pub cut_after_s: f64,
    /// `--swarm-slow`: the clients that sent at `slow_bps` (their own side of their port).
    pub slow: Vec<usize>,
    pub slow_bps: u64,
    /// `--swarm-corrupt`: the clients that played a corrupting peer, and the requests they
    /// answered with wrong bytes.
    pub rogues: Vec<usize>,
    pub rogue_answers: u64,
}

impl Row {
    /// A swarm row from the agents' counts, the server's chunks sent, and the bytes the
    /// clients read through their agents.
    pub fn swarm(
        counts: Vec<AgentCount>,
        server: Option<ServerCounts>,
        floor_chunks: u64,
        chunk: u64,
        read_bytes: u64,
    ) -> Row {
        let sum = |f: fn(&AgentCount) -> u64| counts.iter().map(f).sum::<u64>();
        let held = sum(|c| c.held);
        let served = sum(|c| c.served_to_peers);
        let agent_bytes = (held + served) * chunk + read_bytes;
        let (agent_cpu_s, cpu_s_per_gb, core_pct_at_1gbit) = cpu_figures(&counts, agent_bytes);
        let server_chunks = server.map(|s| s.chunks_sent);
        Row {
            mode: "swarm".into(),
            tracker: server,
            chunk,
            floor_chunks,
            server_chunks: server_chunks.map(|n| n as f64),
            copies: server_chunks
                .filter(|_| floor_chunks > 0)
                .map(|n| n as f64 / floor_chunks as f64),
            agents: counts.len(),
            from_peers: sum(|c| c.from_peers),
            from_servers: sum(|c| c.from_servers),
            served_to_peers: served,
            refused: sum(|c| c.refused),
            silent: sum(|c| c.silent),
            unanswered: sum(|c| c.unanswered),
            none_named: sum(|c| c.none_named),
            peers_failed: sum(|c| c.peers_failed),
            lacked: sum(|c| c.lacked),
            agent_cpu_s,
            agent_bytes,
            cpu_s_per_gb,
            core_pct_at_1gbit,
            invalid: false,
            agent_counts: counts,
            ..Row::default()
        }
    }

    /// A reference's row (`torrent`, `multicast`): what its sender sent (payload, in chunks)
    /// against the floor, and its clients' CPU time for what they fetched (each the whole
    /// image: libtorrent fetches every piece, udpcast sends the file) and read.
    pub fn reference(
        mode: &str,
        counts: Vec<AgentCount>,
        seed_payload: Option<u64>,
        floor_chunks: u64,
        chunk: u64,
        image_len: u64,
        read_bytes: u64,
    ) -> Row {
        let agent_bytes = counts.len() as u64 * image_len + read_bytes;
        let (agent_cpu_s, cpu_s_per_gb, core_pct_at_1gbit) = cpu_figures(&counts, agent_bytes);
        let server_chunks = seed_payload.map(|b| b as f64 / chunk as f64);
        Row {
            mode: mode.into(),
            chunk,
            image_chunks: image_len.div_ceil(chunk),
            floor_chunks,
            server_chunks,
            copies: server_chunks
                .filter(|_| floor_chunks > 0)
                .map(|n| n / floor_chunks as f64),
            agents: counts.len(),
            agent_cpu_s,
            agent_bytes,
            cpu_s_per_gb,
            core_pct_at_1gbit,
            agent_counts: counts,
            ..Row::default()
        }
    }

    /// A unicast NBD row: the root bytes its clients read, in chunks, against the floor.
    pub fn unicast(read_bytes: u64, floor_chunks: u64, chunk: u64) -> Row {
        let n = read_bytes as f64 / chunk as f64;
        Row {
            mode: "unicast".into(),
            chunk,
            floor_chunks,
            server_chunks: Some(n),
            copies: (floor_chunks > 0).then(|| n / floor_chunks as f64),
            ..Row::default()
        }
    }

    /// Marks the row invalid when the machine's CPUs were the pace for 10% of the room's
    /// time or more (`cpu_bound_s` of `all_booted_s`).
    pub fn judge(&mut self, cpu_bound_s: f64, all_booted_s: Option<f64>) {
        self.invalid = all_booted_s.is_none_or(|t| cpu_bound_s >= 0.1 * t);
    }

    /// The clients' CPU line: `WHO S s for M MB WHAT: G s per GB, P% of one core at 1 Gbit/s`.
    fn cpu_said(&self, who: &str, what: &str) -> String {
        format!(
            "{who} {:.2} s for {:.1} MB {what}: {} s per GB, {} of one core at 1 Gbit/s",
            self.agent_cpu_s,
            self.agent_bytes as f64 / 1e6,
            self.cpu_s_per_gb.map_or("-".into(), |v| format!("{v:.2}")),
            self.core_pct_at_1gbit
                .map_or("-".into(), |v| format!("{v:.1}%")),
        )
    }

    /// The report's lines.
    pub fn render(&self) -> String {
        let mut s = format!(
            "{}: one copy {} chunks of {} KiB (the trace's reads); the server sent {} chunks, {} copies",
            self.mode,
            self.floor_chunks,
            self.chunk / 1024,
            self.server_chunks.map_or("-".into(), |n| format!("{n:.0}")),
            self.copies.map_or("-".into(), |c| format!("{c:.2}")),
        );
        if self.mode == "multicast" {
            s.push_str(&format!(
                "\n  udpcast: udp-sender multicast the whole image ({} chunks) to {} clients, its UDP payload counted; {}",
                self.image_chunks,
                self.agents,
                self.cpu_said("their udp-receiver and nbdkit CPU", "fetched and read"),
            ));
        }
        if self.mode == "torrent" {
            s.push_str(&format!(
                "\n  nbdkit torrent (libtorrent) in {} clients, each fetching the whole image ({} chunks); the seed's payload counted (TCP and uTP); {}",
                self.agents,
                self.image_chunks,
                self.cpu_said("their CPU", "fetched and read"),
            ));
        }
        if self.mode == "swarm" {
            s.push_str(&format!(
                "\n  agents {}: {} chunks from peers, {} from the server; served {} to peers; refused {}, silent {}{}\n  {}",
                self.agents,
                self.from_peers,
                self.from_servers,
                self.served_to_peers,
                self.refused,
                self.silent,
                self.tracker.map_or(String::new(), |t| format!(
                    "\n  the tracker named holders {} times, the agent receiving the chunk {}, the server {}; the agents took chunks from the server {} times with no tracker answer, {} with no peer named, {} after every peer named failed ({} tries lacked the chunk)",
                    t.to_holders, t.to_receiver, t.to_server, self.unanswered, self.none_named, self.peers_failed, self.lacked
                )),
                self.cpu_said("agents' CPU", "moved"),
            ));
        }
        if !self.cut.is_empty() {
            s.push_str(&format!(
                "\n  switched off mid-boot ({:.1} s after their agents started, ports down): {} clients, {}",
                self.cut_after_s,
                self.cut.len(),
                clients(&self.cut),
            ));
        }
        if !self.slow.is_empty() {
            s.push_str(&format!(
                "\n  sending at {} Mbit/s: {} clients, {}",
                self.slow_bps / 1_000_000,
                self.slow.len(),
                clients(&self.slow),
            ));
        }
        if !self.rogues.is_empty() {
            s.push_str(&format!(
                "\n  corrupting peers (claiming every chunk, sending wrong bytes): {} clients, {}; they answered {} requests, the agents refused {} chunks from peers",
                self.rogues.len(),
                clients(&self.rogues),
                self.rogue_answers,
                self.refused,
            ));
        }
        if self.invalid {
            s.push_str("\n  INVALID: the machine's CPUs, not the links, set the pace (10% of the room's time or more)");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agents_last_summary_line_is_its_counts() {
        let log = "bootpool-agent: serving `root` (100 bytes, 1 chunks of 262144) on 127.0.0.1:10809\n\
            bootpool-agent: prefetched 114 chunks; 114 chunks held, 100 from peers, 14 from the servers; served 3 to peers; refused 0 from peers, 0 silent\n\
            bootpool-agent: 116 chunks held, 101 from peers, 15 from the servers; served 97 to peers; refused 2 from peers, 1 silent; to the servers: 3 unanswered, 9 none named, 3 peers failed (2 lacked)\n";
        let c = summary(log).unwrap();
        assert_eq!(
            (
                c.held,
                c.from_peers,
                c.from_servers,
                c.served_to_peers,
                c.refused,
                c.silent
            ),
            (116, 101, 15, 97, 2, 1)
        );
        assert_eq!(
            (c.unanswered, c.none_named, c.peers_failed, c.lacked),
            (3, 9, 3, 2)
        );
        assert_eq!(summary("no summary"), None);
    }

    #[test]
    fn the_servers_metrics_give_its_chunks_and_its_trackers_answers() {
        let text = "# HELP x\nbootpool_chunks_sent_total 120\nbootpool_tracker_answers_total{to=\"holders\"} 900\nbootpool_tracker_answers_total{to=\"receiver\"} 7\nbootpool_tracker_answers_total{to=\"server\"} 118\n";
        let now = ServerCounts::parse(text).unwrap();
        assert_eq!(
            now,
            ServerCounts {
                chunks_sent: 120,
                to_holders: 900,
                to_receiver: 7,
                to_server: 118
            }
        );
        let before = ServerCounts {
            chunks_sent: 20,
            to_holders: 100,
            to_receiver: 2,
            to_server: 18,
        };
        assert_eq!(now.since(before).to_server, 100);
        assert_eq!(now.since(before).chunks_sent, 100);
        assert_eq!(ServerCounts::parse("nothing 1\n"), None);
    }

    #[test]
    fn the_config_roots_the_pool_through_the_agent_sharing() {
        let text = "server:\n  address: 10.0.0.1\npools:\n  p:\n    root: nbd\n    image: demo\n  q:\n    root: nfs\n";
        let out = config(text, "p", Path::new("/x/bootpool-agent")).unwrap();
        let v: serde_norway::Value = serde_norway::from_str(&out).unwrap();
        assert_eq!(v["server"]["agent"].as_str(), Some("/x/bootpool-agent"));
        assert_eq!(v["pools"]["p"]["nbd"]["via"].as_str(), Some("agent"));
        assert_eq!(v["pools"]["p"]["nbd"]["peers"].as_bool(), Some(true));
        assert_eq!(
            v["pools"]["p"]["initramfs"].as_str(),
            Some("initramfs-tools")
        );
        assert!(v["pools"]["q"].get("nbd").is_none());
        assert!(config(text, "r", Path::new("/a")).is_err());
    }

    #[test]
    fn the_floor_is_the_chunks_the_reads_touch_once_and_copies_are_over_it() {
        let text = "{\"bootpool_trace\":1,\"mac\":\"52:54:00:00:00:01\",\"pool\":\"p\",\"image\":\"demo\",\"root\":\"nbd\",\"recorded\":1.0}\n\
            {\"t\":0.0,\"d\":0.0,\"op\":\"nbd\",\"cmd\":\"attach\",\"export\":\"demo\"}\n\
            {\"t\":0.1,\"d\":0.0,\"op\":\"nbd\",\"cmd\":\"read\",\"offset\":0,\"len\":4096}\n\
            {\"t\":0.2,\"d\":0.0,\"op\":\"nbd\",\"cmd\":\"read\",\"offset\":258048,\"len\":8192}\n\
            {\"t\":0.3,\"d\":0.0,\"op\":\"nbd\",\"cmd\":\"read\",\"offset\":1048576,\"len\":4096}\n";
        let t = Trace::parse(text).unwrap();
        assert_eq!(floor(&t, 262144), 3);
        let u = Row::unicast(6 * 262144, 3, 262144);
        assert_eq!(u.copies, Some(2.0));
        let a = AgentCount {
            held: 3,
            from_peers: 2,
            from_servers: 1,
            served_to_peers: 1,
            cpu_s: 0.5,
            ..AgentCount::default()
        };
        let sent = ServerCounts {
            chunks_sent: 3,
            ..ServerCounts::default()
        };
        let mut r = Row::swarm(vec![a.clone(), a], Some(sent), 3, 262144, 1_000_000);
        assert_eq!(r.copies, Some(1.0));
        assert_eq!(r.agent_bytes, 8 * 262144 + 1_000_000);
        r.judge(1.0, Some(20.0));
        assert!(!r.invalid);
        r.judge(2.0, Some(20.0));
        assert!(r.invalid);
    }
}

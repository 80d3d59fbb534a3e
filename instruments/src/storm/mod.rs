//! `bootpool storm`: the 08:00 storm, simulated. A virtual room of N clients (`room`), each
//! on a thread of its own in a network namespace of its own, replays a boot trace recorded
//! from a real VM boot (`client`), against bootpool or any server the storm is told to start
//! in its namespace; then it prints what a room admin wants to know (`report`).
//!
//! - `args`: what `bootpool storm` is told; `plan`: what every client shares.
//! - `room`: the switch, the server's shaped links, the clients' shaped ports.
//! - `site`: K servers instead (`--servers`), members of one site on the database
//!   `postgres` starts; `servers`: the report's rows for each.
//! - `fail`: a member of that site dies mid-boot (`--fail`), its address moved by keepalived.
//! - `reference`: the reference stack as such a site (`--servers 2 --server-cmd`), its DHCP
//!   the Kea HA pair `kea` configures.
//! - `uplink`: a room behind a shaped uplink (`--uplink`), and what it carried.
//! - `swarm`: the NBD root through the client agent in every client's namespace (`--swarm`),
//!   sharing chunks through the server's tracker, and the report's row of copies and CPU;
//!   `swarm_faults`: a share of that room switched off mid-boot or sending slowly, and
//!   clients playing a corrupting peer; `torrent`: the same room through nbdkit's torrent
//!   plugin instead (`--torrent`), with its tracker and seed beside the server; `multicast`:
//!   the room given its root by udpcast (`--multicast`); `sent_by`: those senders' bytes.
//! - `client`: one client's boot (firmware steps, then the root closed-loop, then booted).
//! - `dhcp`: the firmware's DHCP through `dhcp4r`, with the PXE retransmit schedule.
//! - `root`: the root's requests, through `nfs` (the nfs3_client crate) or `nbd` (libnbd).
//! - `retry`: how those clients ride out their server's death (the kernel's timers).
//! - `procs`: the processes started besides the server, killed however the storm ends.
//! - `sample`: the server's egress per link, CPU and memory while the storm runs.
//! - `report`: the table and the JSON.
//!
//! Everything lives in the storm's private network namespace, entered before any thread
//! exists; it goes away with the storm.

pub mod args;
pub mod client;
pub mod dhcp;
pub mod fail;
pub mod kea;
pub mod leftovers;
pub mod multicast;
pub mod nbd;
pub mod neigh;
pub mod nfs;
pub mod nfs_io;
pub mod plan;
pub mod postgres;
pub mod procs;
pub mod reference;
pub mod report;
pub mod retry;
pub mod room;
pub mod root;
pub mod sample;
pub mod sent_by;
pub mod servers;
pub mod site;
pub mod swarm;
pub mod swarm_faults;
pub mod torrent;
pub mod uplink;

use anyhow::{Context, bail};
use args::StormArgs;
use bootpool::config::{Config, Mac, RootProto};
use bootpool::sys;
use bootpool::trace::format::Trace;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The server the storm runs in its room, killed when the storm ends.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        // Our own child's process group.
        let _ = sys::process::kill(-(self.0.id() as i32), libc::SIGTERM);
        let mut reaped = false;
        for _ in 0..50 {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                reaped = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !reaped {
            // The server is still ours to name, and so is its group: whatever is left goes.
            let _ = sys::process::kill(-(self.0.id() as i32), libc::SIGKILL);
            let _ = self.0.wait();
        }
        // What is left of a reaped server's group, and daemons that left the group
        // (nbd-server forks away), are still in the room.
        end_room(Duration::ZERO);
    }
}

/// Ends every process in the storm's network namespace but the storm: SIGTERM, up to `grace`
/// for them to go, then SIGKILL. Each of them is in the storm's own namespace, so the storm
/// started it (the server, or a daemon of the reference stack that forked away from it).
fn end_room(grace: Duration) {
    procs::end_all();
    let me = std::process::id();
    let until = Instant::now() + grace;
    if !grace.is_zero() {
        for pid in sample::room_pids(me) {
            let _ = sys::process::kill(pid, libc::SIGTERM);
        }
        while Instant::now() < until && !sample::room_pids(me).is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    for pid in sample::room_pids(me) {
        let _ = sys::process::kill(pid, libc::SIGKILL);
    }
}

/// Takes SIGINT, SIGTERM and SIGHUP on a thread of their own (call before any other thread
/// exists): a storm stopped by one ends the processes of its room before it exits, as it
/// does when it ends by itself. Killed outright, the server's parent-death signal still ends
/// the server, but the daemons a reference stack forked away would keep the room's namespace
/// (and their ports) alive.
fn end_room_on_signal() -> anyhow::Result<()> {
    let held = sys::process::hold_signals(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP])
        .context("holding the stop signals")?;
    std::thread::Builder::new()
        .name("stop".into())
        .spawn(move || {
            use std::io::Write as _;
            let signal = held.wait();
            // Not eprintln!: a closed stderr must not keep the room alive.
            let _ = writeln!(
                std::io::stderr(),
                "storm: stopped by signal {signal}; ending the room's processes"
            );
            end_room(Duration::from_secs(3));
            leftovers::remove_all();
            neigh::restore();
            std::process::exit(128 + signal);
        })
        .context("starting the signal thread")?;
    Ok(())
}

fn start_server(args: &StormArgs, run_dir: &std::path::Path) -> anyhow::Result<Server> {
    use std::os::unix::process::CommandExt;
    let log = std::fs::File::create(run_dir.join("server.log"))?;
    let mut cmd = match &args.server_cmd {
        Some(c) => {
            let mut cmd = std::process::Command::new("sh");
            cmd.arg("-c").arg(c);
            cmd
        }
        None => {
            let config = Config::load(&args.config)?;
            site::forget_leases(&config.server.state_dir)?;
            let mut cmd = std::process::Command::new(crate::lab::daemon());
            cmd.arg("serve").arg("--config").arg(&args.config);
            cmd
        }
    };
    cmd.stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0);
    crate::lab::dies_with_lab(&mut cmd, libc::SIGTERM);
    // The storm holds the stop signals for itself (`end_room_on_signal`); the server must not.
    sys::process::unblock_signals_in_child(&mut cmd);
    Ok(Server(cmd.spawn().context("starting the server")?))
}

/// What the room tells a client's thread: its link is wired into its namespace (bring it
/// up), then when to power on (seconds since the storm's start).
enum Step {
    Wired,
    PowerOn(f64),
}

/// Waits until `addr` takes a TCP connection.
fn wait_ready(
    addr: std::net::SocketAddr,
    server: &mut Server,
    log: &std::path::Path,
) -> anyhow::Result<()> {
    for _ in 0..300 {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Ok(Some(status)) = server.0.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            bail!("the server exited ({status}):\n{text}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("the server did not answer on {addr} within 30 s")
}

/// The shipped trace of `pool`'s root: the boot recorded as the pool has it made (a client
/// reads other blocks of a root image recompressed for the wire, and opens files without
/// asking an NFS server first when its root is mounted `nocto`). The pool decides, not the
/// server: a reference stack run on the same config is given the same options
/// (bench/storm/reference.sh) and its clients replay the same boot.
fn default_trace(pool: &bootpool::config::Pool) -> PathBuf {
    let suffix = match pool.root {
        RootProto::Nbd if pool.image.root_wire == bootpool::config::Wire::Zstd => "-zstd",
        RootProto::Nfs if pool.nfs_options.split(',').any(|o| o == "nocto") => "-nocto",
        _ => "",
    };
    PathBuf::from(format!("bench/traces/demo-{}{suffix}.trace", pool.root))
}

/// The room's links whose rate `server.link_speeds` (`speeds`, Mbit/s) does not give, each
/// said: bootpool's pacer and dashboard take a link's capacity from there (a veth has no
/// speed of its own), so bootpool on such a room would pace it at another rate than its own.
fn speeds_differ(speeds: &BTreeMap<String, u32>, links: &[room::Link]) -> Vec<String> {
    links
        .iter()
        .filter(|l| speeds.get(&l.dev).map(|&m| u64::from(m) * 1_000_000) != Some(l.rate))
        .map(|l| {
            let said = speeds
                .get(&l.dev)
                .map_or("nothing".into(), |m| format!("{m} Mbit/s"));
            format!("{} is {} Mbit/s, it says {said}", l.dev, l.rate / 1_000_000)
        })
        .collect()
}

/// What the room replays: the pool its clients are in, the trace each replays (and its file)
/// and the clients' MACs, or the first thing that stops the storm.
fn what_to_replay(
    args: &StormArgs,
    config: &Config,
) -> anyhow::Result<(Arc<bootpool::config::Pool>, PathBuf, Trace, Vec<Mac>)> {
    let pool = match &args.pool {
        Some(name) => config
            .pools
            .get(name)
            .with_context(|| format!("no pool `{name}` in {}", args.config.display()))?,
        None => {
            let want = match args.root {
                crate::lab::RootChoice::Nfs => RootProto::Nfs,
                crate::lab::RootChoice::Nbd => RootProto::Nbd,
            };
            config
                .pools
                .values()
                .find(|p| p.root == want)
                .with_context(|| {
                    format!("no pool with `root: {want}` in {}", args.config.display())
                })?
        }
    }
    .clone();
    let trace_file = args.trace.clone().unwrap_or_else(|| default_trace(&pool));
    let text = std::fs::read_to_string(&trace_file)
        .with_context(|| format!("reading the trace {}", trace_file.display()))?;
    let trace =
        Trace::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", trace_file.display()))?;
    if trace.header.root != pool.root.to_string() {
        bail!(
            "{} is a trace of an {} root; pool `{}` serves {}",
            trace_file.display(),
            trace.header.root,
            pool.name,
            pool.root
        );
    }
    let macs: Vec<Mac> = pool
        .clients
        .iter()
        .filter(|e| e.ip.is_none())
        .flat_map(|e| (0..e.macs.len()).filter_map(|i| e.macs.nth(i)))
        .take(args.clients)
        .collect();
    if macs.len() < args.clients {
        bail!(
            "pool `{}` lists {} client MACs without a fixed address; the storm needs {}",
            pool.name,
            macs.len(),
            args.clients
        );
    }
    Ok((pool, trace_file, trace, macs))
}

/// `bootpool storm`: builds the room (the server's links, a namespace and a port per client),
/// starts the server in it, powers the clients on (at once or over --stagger), collects each
/// client's outcome beside the sampler's figures and writes the report. Longer than the
/// house's ~150 lines on purpose: the client threads, their three channels (thread ids, ready,
/// go) and the sampler are made, started and joined here, so each thread's life reads as one
/// sequence.
pub fn run(mut args: StormArgs) -> anyhow::Result<()> {
    end_room_on_signal()?;
    let swarm_config = match args.swarm.clone() {
        Some(agent) => Some(swarm::prepare(&mut args, &agent)?),
        None => None,
    };
    let config = Config::load(&args.config)?;
    let (pool, trace_file, trace, macs) = what_to_replay(&args, &config)?;
    let run_dir = config.server.state_dir.join("storm").join(format!(
        "{}",
        bootpool::record::event::now_micros() / 1_000_000
    ));
    std::fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;

    // The room: the server's links first, then a namespace and a port per client.
    let (k, rate) = args.server_links;
    if args.servers > 1 && args.bond_hash {
        bail!("--servers runs K members, each on its own --server-links; it takes no --bond-hash");
    }
    if args.swarm.is_none()
        && (args.swarm_cut > 0.0 || args.swarm_slow > 0.0 || args.swarm_corrupt > 0)
    {
        bail!(
            "--swarm-cut, --swarm-slow and --swarm-corrupt act on the agents of a swarm: they take --swarm AGENT"
        );
    }
    if args.fail.is_some() && (args.servers < 2 || k != 1) {
        bail!(
            "--fail kills one member of a site: it takes --servers 2 or more and --server-links 1xRATE (keepalived moves each member's one address)"
        );
    }
    let prefix = config.dhcp.home().subnet.prefix;
    let first_dev = config
        .server
        .interfaces
        .first()
        .cloned()
        .unwrap_or_else(|| "s0".into());
    // The config's `server.links` first, then the addresses after the last of them.
    let mut addresses: Vec<Ipv4Addr> = config.server.links.iter().copied().take(k).collect();
    while addresses.len() < k * args.servers {
        let last = *addresses.last().expect("server.links holds server.address");
        addresses.push(Ipv4Addr::from(u32::from(last) + 1));
    }
    let http_port = args.http_port.unwrap_or(config.server.http.port());
    let mut site = None;
    let links = if args.servers > 1 {
        let s = site::Site::wire(
            args.servers,
            &site::Plan {
                config_path: &args.config,
                config: &config,
                addresses: &addresses,
                links: k,
                prefix,
                rate,
                first_dev: &first_dev,
                http_port,
            },
        )?;
        let links = s.links();
        site = Some(s);
        links
    } else if args.bond_hash {
        let macs: Vec<String> = macs.iter().map(Mac::to_string).collect();
        room::wire_bond(addresses[0], k, prefix, rate, &first_dev, &macs)?
    } else {
        room::wire_server(&addresses, prefix, rate, &first_dev)?
    };
    let wrong = speeds_differ(&config.server.link_speeds, &links);
    if args.server_cmd.is_none() && !wrong.is_empty() {
        bail!(
            "{}: server.link_speeds must give each of the room's links its rate (bootpool paces by it): {}",
            args.config.display(),
            wrong.join("; ")
        );
    }
    // An NBD root's reads are checked against the image bootpool serves (not a wire copy,
    // made once the server runs, nor a reference stack's own file).
    let root_image = (pool.root == RootProto::Nbd
        && args.server_cmd.is_none()
        && pool.image.root_wire != bootpool::config::Wire::Zstd)
        .then(|| bootpool::image::serve::for_boot(&config, &pool.image).root_image());
    if let Some(img) = root_image.as_ref().filter(|_| args.swarm.is_some()) {
        swarm::ready_server(img, &config.server.state_dir, &trace)?;
    }
    let image = match &root_image {
        Some(p) => Some(Arc::new(
            std::fs::read(p).with_context(|| format!("reading {}", p.display()))?,
        )),
        None => None,
    };
    if (args.torrent || args.multicast)
        && (args.swarm.is_none() || args.swarm_corrupt > 0 || image.is_none())
    {
        bail!(
            "--torrent and --multicast give an NBD pool's root (its plain image, bootpool serving it) to the room by nbdkit's torrent plugin or udpcast in place of --swarm's agents: they take --swarm AGENT, and no --swarm-corrupt (a rogue speaks bootpool's tracker)"
        );
    }
    if args.torrent && args.multicast {
        bail!("--torrent and --multicast are two references: one a storm");
    }
    let image_name = root_image.as_ref().map(|p| {
        p.file_name()
            .map_or("root.img".into(), |n| n.to_string_lossy().to_string())
    });
    // The reference swarm's tracker and seed, beside the server (`--torrent`).
    let seed = match (args.torrent, &image, &image_name) {
        (true, Some(bytes), Some(name)) => Some(torrent::Seed::start(
            name,
            bytes,
            config.server.address,
            &run_dir,
        )?),
        _ => None,
    };
    // udpcast's sender, on the server's first link, at 95% of a client's link (`--multicast`).
    let sender = match (args.multicast, &image, &image_name) {
        (true, Some(bytes), Some(name)) => Some(multicast::Sender::start(
            name,
            bytes,
            &links[0].dev,
            macs.len(),
            args.client_link / 100 * 95,
            &run_dir,
        )?),
        _ => None,
    };
    let rogues = swarm_faults::spread(macs.len(), args.swarm_corrupt, 1);
    let agents = args.swarm.as_ref().map(|a| {
        let mut agents = swarm::Agents::new(a.clone(), &run_dir);
        agents.rogues = rogues.clone();
        if let Some(seed) = &seed {
            agents.engine = swarm::Engine::Torrent {
                torrent: seed.torrent.clone(),
                cache: seed.cache.clone(),
            };
        }
        if let (Some(sender), Some(name)) = (&sender, &image_name) {
            agents.engine = swarm::Engine::Multicast {
                dir: sender.dir.clone(),
                name: name.clone(),
            };
        }
        Arc::new(agents)
    });
    let t0 = Instant::now();
    let plan = Arc::new(plan::Plan {
        trace: Arc::new(trace),
        think_scale: args.think_scale,
        http_port,
        callback: !args.no_callback,
        portmap_port: config.server.ports.portmap,
        nbd_port: config.server.ports.nbd,
        tftp_loader: args.tftp_loader,
        restart: args.fail.is_some(),
        t0,
        image,
        agents,
    });
    let client_link = args.client_link;
    let cut = swarm_faults::chosen(macs.len(), args.swarm_cut);
    let slow = swarm_faults::chosen(macs.len(), args.swarm_slow);
    let slow_rate = args.swarm_slow_rate;

    let (tid_tx, tid_rx) = mpsc::channel::<(usize, libc::pid_t)>();
    let (up_tx, up_rx) = mpsc::channel::<(usize, Result<(), String>)>();
    let (go_tx, go_rx): (Vec<_>, Vec<_>) = (0..macs.len()).map(|_| mpsc::channel::<Step>()).unzip();
    let mut threads = Vec::new();
    for ((i, mac), go) in macs.iter().enumerate().zip(go_rx) {
        let (plan, tid_tx, up_tx, mac) =
            (plan.clone(), tid_tx.clone(), up_tx.clone(), mac.to_string());
        // What it sends: its link's rate, or a slow client's (`--swarm-slow`).
        let sends_at = if slow.contains(&i) {
            slow_rate
        } else {
            client_link
        };
        let t = std::thread::Builder::new()
            .name(format!("client{i}"))
            .stack_size(512 * 1024)
            .spawn(move || -> client::Outcome {
                // Only this thread moves; it owns no file descriptors of the room's
                // namespace yet.
                if let Err(e) = sys::process::unshare_network() {
                    return client::Outcome::failed(i, mac, format!("no namespace: {e}"));
                }
                // Sleeps as short as a client's thinks: no 50 us timer slack on each.
                sys::process::set_timer_slack(1);
                let _ = tid_tx.send((i, sys::process::gettid()));
                // Its link is plugged in once the room is wired, before power-on, as a PC's
                // is before its firmware asks anything.
                let dev = format!("c{i}");
                let Ok(Step::Wired) = go.recv() else {
                    return client::Outcome::failed(i, mac, "the room was not wired".into());
                };
                // Both directions of its port are shaped: the switch's side (what it is sent)
                // and its own (what it sends, its peers' chunks among it).
                let up = room::ip(&["link set lo up".into(), format!("link set {dev} up")])
                    .and_then(|()| room::tc(&[room::shape(&dev, sends_at)]))
                    .map_err(|e| format!("{e:#}"));
                let _ = up_tx.send((i, up.clone()));
                if let Err(e) = up {
                    return client::Outcome::failed(i, mac, e);
                }
                let Ok(Step::PowerOn(power_on)) = go.recv() else {
                    return client::Outcome::failed(i, mac, "the room never powered on".into());
                };
                let booted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    client::boot(i, mac.clone(), dev, &plan, power_on)
                }));
                booted.unwrap_or_else(|_| {
                    client::Outcome::failed(i, mac, "the client panicked".into())
                })
            })
            .context("starting a client thread")?;
        threads.push(t);
    }
    drop((tid_tx, up_tx));
    let mut tids: Vec<(usize, String, libc::pid_t)> = Vec::new();
    for (i, tid) in tid_rx.iter().take(macs.len()) {
        tids.push((i, macs[i].to_string(), tid));
    }
    // The last `--uplink` N clients sit behind the room's switch.
    let behind = args
        .uplink
        .map_or(macs.len(), |(n, _)| macs.len().saturating_sub(n));
    if let Some((_, rate)) = args.uplink {
        uplink::wire(rate)?;
    }
    let switch_of = |i: usize| {
        if i >= behind {
            uplink::SWITCH
        } else {
            room::BRIDGE
        }
    };
    room::wire_clients(&tids, args.client_link, &switch_of)?;
    for go in &go_tx {
        let _ = go.send(Step::Wired);
    }
    for (i, up) in up_rx.iter().take(macs.len()) {
        if let Err(e) = up {
            bail!("client {i}'s link did not come up: {e}");
        }
    }
    let ports: Vec<String> = (0..macs.len()).map(|i| format!("p{i}")).collect();
    room::wait_forwarding(&ports, Duration::from_secs(30))?;

    let mut server = None;
    let mut keepalived = None;
    if let Some(site) = site.as_mut() {
        match &args.server_cmd {
            Some(cmd) => {
                if args.fail.is_some() {
                    let s: &site::Site = site;
                    let conf = |m: &site::Member| fail::reference_conf(s, m);
                    keepalived = Some(fail::start_keepalived(s, prefix, &run_dir, &conf)?);
                }
                let home = config.dhcp.home();
                let subnet = home.subnet;
                reference::start(
                    site,
                    &reference::Plan {
                        cmd,
                        subnet: (subnet.network, subnet.prefix),
                        range: home
                            .range
                            .context("the reference site's Kea needs the config's dhcp.range")?,
                        lease_s: home.lease.as_secs(),
                        http_port: plan.http_port,
                        ready_port: args.ready_port,
                        moved: args.fail.is_some(),
                    },
                    &run_dir,
                )?;
            }
            None => {
                if args.fail.is_some() {
                    fail::prepare(site)?;
                }
                site.start(&run_dir, plan.http_port)?;
                if args.fail.is_some() {
                    let conf = fail::bootpool_conf;
                    keepalived = Some(fail::start_keepalived(site, prefix, &run_dir, &conf)?);
                }
            }
        }
    } else {
        let mut one = start_server(&args, &run_dir)?;
        let ready = match &args.server_cmd {
            None => std::net::SocketAddr::from((config.server.address, plan.http_port)),
            Some(_) => std::net::SocketAddr::from((config.server.address, args.ready_port)),
        };
        wait_ready(ready, &mut one, &run_dir.join("server.log"))?;
        if args.server_cmd.is_none() {
            report::wait_for_wire_copies(config.server.address, plan.http_port)?;
        }
        server = Some(one);
    }
    let label = args
        .label
        .clone()
        .unwrap_or_else(|| match &args.server_cmd {
            Some(c) => c.clone(),
            None => "bootpool".into(),
        });
    eprintln!(
        "storm: {} clients of pool {} ({} root) on {}{} links x {} Mbit/s, clients at {} Mbit/s, \
         think x{}, against {label}; logs in {}",
        macs.len(),
        pool.name,
        pool.root,
        match args.servers {
            1 => String::new(),
            n => format!("{n} servers of "),
        },
        k,
        rate / 1_000_000,
        args.client_link / 1_000_000,
        args.think_scale,
        run_dir.display()
    );

    // Power on: now, or spread over --stagger seconds.
    let uplinks = match args.uplink {
        Some(_) => vec![uplink::DOWN.to_string()],
        None => Vec::new(),
    };
    // A reference site's daemons are more than its script's process: all on its hosts.
    let member_pids = site.as_ref().map_or(Vec::new(), |s| {
        s.members
            .iter()
            .flat_map(|m| match args.server_cmd {
                Some(_) => m.pids(),
                None => m.pid.map(|p| p as libc::pid_t).into_iter().collect(),
            })
            .collect()
    });
    let site_before = site
        .as_ref()
        .filter(|_| args.server_cmd.is_none())
        .map(|s| site_counters(s, plan.http_port));
    let metrics = format!(
        "http://{}:{}/metrics",
        config.server.address, plan.http_port
    );
    let server_counts = || swarm::ServerCounts::parse(&report::get(&metrics).ok()?);
    let counts_before = server_counts().filter(|_| args.swarm.is_some() && site.is_none());
    let sampler =
        sample::Sampler::start(links.clone(), uplinks, std::process::id(), member_pids, t0);
    let start = t0.elapsed().as_secs_f64() + 0.2;
    let wall_start = bootpool::record::event::now_micros() as f64 / 1e6 + 0.2;
    let n = go_tx.len();
    for (i, go) in go_tx.iter().enumerate() {
        let at = start
            + if n > 1 {
                args.stagger * i as f64 / (n - 1) as f64
            } else {
                0.0
            };
        let _ = go.send(Step::PowerOn(at));
    }
    let failed = match (args.fail, site.as_ref(), keepalived.as_mut()) {
        (Some(kind), Some(site), Some(ka)) => {
            let power_on = t0 + Duration::from_secs_f64(start);
            let at = power_on + Duration::from_secs_f64(args.fail_at);
            Some(fail::fail(site, ka, kind, at, power_on)?)
        }
        _ => None,
    };
    let cutter = plan.agents.as_ref().filter(|_| !cut.is_empty()).map(|a| {
        swarm_faults::Cutter::start(
            a.clone(),
            cut.clone(),
            Duration::from_secs_f64(args.swarm_cut_after),
        )
    });
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let mut outcomes = Vec::new();
    let mut progress = report::Progress::new(threads.len());
    // A client switched off (`--swarm-cut`) is not waited for: its replay would try its dead
    // agent until the kernel's client gives up. Its thread is left to the storm's exit.
    let switched =
        |i: usize| cut.contains(&i) && plan.agents.as_ref().is_some_and(|a| a.was_cut(i));
    for (i, t) in threads.into_iter().enumerate() {
        while !t.is_finished() && !switched(i) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            progress.tick(&plan);
        }
        let mut o = if t.is_finished() {
            t.join().unwrap_or_else(|_| {
                client::Outcome::failed(i, macs[i].to_string(), "the client thread panicked".into())
            })
        } else if switched(i) {
            client::Outcome::failed(i, macs[i].to_string(), "switched off mid-boot".into())
        } else {
            bail!("clients still booting after --timeout {} s", args.timeout);
        };
        if switched(o.index) && o.result != "booted" {
            // Switched off on purpose: neither booted nor failed.
            o.result = "cut".into();
        } else if rogues.contains(&o.index) && o.result != "booted" {
            o.result = "rogue".into();
        }
        progress.done(&o);
        outcomes.push(o);
    }
    progress.finish();
    let switched_off = cutter.map(swarm_faults::Cutter::finish).unwrap_or_default();
    let agent_counts = plan.agents.as_ref().map(|a| a.finish());
    let counts_after = counts_before.and_then(|_| server_counts());
    let reference_sent = match (&seed, &sender) {
        (Some(seed), _) => Some(("torrent", seed.payload_sent())),
        (_, Some(sender)) => Some(("multicast", sender.payload_sent())),
        _ => None,
    };
    let samples = sampler.stop();
    outcomes.sort_by_key(|o| o.index);

    // What the server recorded, when it is bootpool.
    if args.server_cmd.is_none() {
        std::thread::sleep(Duration::from_millis(1200));
    }
    let (recorded, servers) = match (&site, &site_before) {
        (Some(site), Some(before)) => {
            site_record(site, before, plan.http_port, wall_start - 1.0, &links)
        }
        // A reference site keeps no record: its rows are its links.
        (Some(site), None) => (None, site_links(site, &links)),
        _ => {
            let recorded = if args.server_cmd.is_none() {
                report::recorded(config.server.address, plan.http_port, wall_start - 1.0)
            } else {
                None
            };
            let one = servers::ServerInput {
                name: "s1".into(),
                links: (0..links.len()).collect(),
                answered: recorded.as_ref().map(|r| answered(r)),
                ..Default::default()
            };
            (recorded, vec![one])
        }
    };
    let failure = failed.as_ref().map(|f| fail::row(f, &outcomes, start));
    drop(server);
    drop(keepalived);
    drop(site);
    let report = report::Report::new(
        &label,
        &args,
        &pool.name,
        &trace_file,
        &plan.trace,
        &links,
        start,
        outcomes,
        samples,
        recorded,
        &servers,
        failure,
    );
    let mut report = report;
    if pool.root == RootProto::Nbd {
        let chunk = u64::from(bootpool::image::blocks::CHUNK);
        let floor = swarm::floor(&plan.trace, chunk);
        let read: u64 = report.clients.iter().map(|c| c.client.bytes.nbd).sum();
        let mut row = match (agent_counts, reference_sent) {
            (Some(counts), Some((mode, sent))) => swarm::Row::reference(
                mode,
                counts,
                sent,
                floor,
                chunk,
                plan.image.as_ref().map_or(0, |i| i.len() as u64),
                read,
            ),
            (Some(counts), None) => {
                let server = counts_before.zip(counts_after).map(|(b, a)| a.since(b));
                swarm::Row::swarm(counts, server, floor, chunk, read)
            }
            (None, _) => swarm::Row::unicast(read, floor, chunk),
        };
        row.judge(report.host.cpu_bound_s, report.summary.all_booted_s);
        if plan.agents.is_some() {
            row.cut = switched_off;
            row.cut_after_s = args.swarm_cut_after;
            row.slow = slow.iter().copied().collect();
            row.slow_bps = slow_rate;
            row.rogues = rogues.iter().copied().collect();
            row.rogue_answers =
                swarm_faults::ROGUE_ANSWERS.load(std::sync::atomic::Ordering::Relaxed);
        }
        report.swarm = Some(row);
    }
    if let Some(f) = &swarm_config {
        leftovers::remove(f);
    }
    let json = args
        .json
        .clone()
        .unwrap_or_else(|| run_dir.join("storm.json"));
    std::fs::write(&json, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing {}", json.display()))?;
    println!("{}", report.render());
    eprintln!("storm: report in {}", json.display());
    if report.summary.failed > 0 {
        bail!(
            "{} of {} clients did not boot",
            report.summary.failed,
            report.summary.clients
        );
    }
    Ok(())
}

/// The MACs that `boots` gave an address.
fn answered(boots: &[bootpool::record::view::BootView]) -> Vec<String> {
    let mut macs: Vec<String> = boots
        .iter()
        .filter(|b| b.ip.is_some())
        .map(|b| b.mac.clone())
        .collect();
    macs.sort();
    macs.dedup();
    macs
}

/// The MACs a member's own lease table (`state_dir`, as it saved it) holds bound: the
/// clients it gave an address. Not its API's boots: any member's API shows the whole site's.
fn bound_in(state_dir: &std::path::Path) -> Option<Vec<String>> {
    let saved = bootpool::service::lease_file::read(state_dir);
    if let Err(e) = &saved {
        eprintln!("storm: {}'s lease table not read: {e}", state_dir.display());
    }
    let mut macs: Vec<String> = saved
        .ok()?
        .leases
        .into_iter()
        .filter(|l| l.state == bootpool::boot::leases::State::Bound)
        .map(|l| l.mac)
        .collect();
    macs.sort();
    macs.dedup();
    Some(macs)
}

const OFFERS: &str = "bootpool_dhcp_answers_total{kind=\"offer\"}";
const OTHERS: &str = "bootpool_dhcp_others_total";

/// Each member's OFFERs and messages left to others so far.
fn site_counters(site: &site::Site, port: u16) -> Vec<(Option<u64>, Option<u64>)> {
    site.members
        .iter()
        .map(|m| (m.metric(OFFERS, port), m.metric(OTHERS, port)))
        .collect()
}

/// Member `m`'s links: their places among `links`.
fn links_of(m: &site::Member, links: &[room::Link]) -> Vec<usize> {
    links
        .iter()
        .enumerate()
        .filter(|(_, l)| m.links.iter().any(|own| own.address == l.address))
        .map(|(k, _)| k)
        .collect()
}

/// Each member's row with only its links among `links` (a server that keeps no record).
fn site_links(site: &site::Site, links: &[room::Link]) -> Vec<servers::ServerInput> {
    site.members
        .iter()
        .map(|m| servers::ServerInput {
            name: m.name.clone(),
            links: links_of(m, links),
            ..Default::default()
        })
        .collect()
}

/// What a site's members recorded of the boots that started after `since` (all of them
/// together, for the report's agreement), and each member's row: its links among `links`,
/// the clients it gave an address, and its counters since `before`.
fn site_record(
    site: &site::Site,
    before: &[(Option<u64>, Option<u64>)],
    port: u16,
    since: f64,
    links: &[room::Link],
) -> (
    Option<Vec<bootpool::record::view::BootView>>,
    Vec<servers::ServerInput>,
) {
    let after = site_counters(site, port);
    let mut all = Some(Vec::new());
    let mut rows = Vec::new();
    for ((m, (o0, x0)), (o1, x1)) in site.members.iter().zip(before).zip(after) {
        let boots = m
            .get("/api/v1/boots", port)
            .and_then(|t| report::boots_since(&t, since));
        if let Err(e) = &boots {
            eprintln!("storm: member {}'s record not read: {e}", m.name);
        }
        let boots = boots.ok();
        rows.push(servers::ServerInput {
            name: m.name.clone(),
            links: links_of(m, links),
            answered: bound_in(&m.state_dir),
            offers: o1.zip(*o0).map(|(a, b)| a.saturating_sub(b)),
            others: x1.zip(*x0).map(|(a, b)| a.saturating_sub(b)),
            placed: None,
        });
        match (all.as_mut(), boots) {
            (Some(all), Some(b)) => all.extend(b),
            _ => all = None,
        }
    }
    // The boots placed on each member's links, by whichever member answered them.
    if let Some(all) = &all {
        for (row, m) in rows.iter_mut().zip(&site.members) {
            let mut macs: Vec<&str> = all
                .iter()
                .filter(|b| {
                    b.link
                        .is_some_and(|l| m.links.iter().any(|own| own.address == l))
                })
                .map(|b| b.mac.as_str())
                .collect();
            macs.sort();
            macs.dedup();
            row.placed = Some(macs.len());
        }
    }
    (all, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootpool_runs_only_on_links_whose_speeds_the_config_gives() {
        let link = |dev: &str, rate: u64| room::Link {
            dev: dev.into(),
            address: Ipv4Addr::new(10, 78, 0, 1),
            rate,
            macs: None,
            switch_port: None,
        };
        let speeds: BTreeMap<String, u32> = [("s0".to_string(), 250), ("s1".to_string(), 250)]
            .into_iter()
            .collect();
        let room = [link("s0", 250_000_000), link("s1", 250_000_000)];
        assert!(speeds_differ(&speeds, &room).is_empty());
        // The ideal bond of the same four: one link of 1 Gbit/s the config calls 250.
        assert_eq!(
            speeds_differ(&speeds, &[link("s0", 1_000_000_000)]),
            ["s0 is 1000 Mbit/s, it says 250 Mbit/s"]
        );
        assert_eq!(
            speeds_differ(&speeds, &[link("s2", 250_000_000)]),
            ["s2 is 250 Mbit/s, it says nothing"]
        );
    }
}

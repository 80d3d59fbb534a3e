//! The virtual room: `bootpool lab` boots N qemu clients against a config in a private network
//! namespace and prints their boot table from what the daemon recorded.
//!
//! The lab process enters its own network namespace before anything else (see `net`), makes a
//! bridge with the server's address and a tap per client, runs `bootpool serve` on the config,
//! powers every client on at once (with `--wake`, each when its magic packet arrives: `wol`),
//! waits (bounded) for each console to say it booted (the demo's done line, a stock image's
//! login prompt) or failed, waits (bounded) for the record to say how each boot ended (an
//! inferred end needs its root quiet for `end::QUIET_S`), then reads the boots from the
//! daemon's API (kept as `boots.json` in the run's folder) and tears everything down.

mod daemon;
mod failover;
pub mod homes;
pub mod login;
mod member;
mod midboot;
pub mod net;
pub mod poweroff;
pub mod room2;
pub mod stranger;
pub mod table;
pub mod vm;
pub mod wire_wait;
pub mod wol;

use daemon::{Apis, Daemon, start_daemon};
pub use daemon::{daemon, http_get};
use member::Member;
pub(crate) use net::dies_with_lab;
pub use table::Outcome;

use anyhow::{Context, bail};
use bootpool::config::{Config, Mac, RootProto};
use bootpool::record::view::BootView;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use vm::{Accel, Console, Vm};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RootChoice {
    Nfs,
    Nbd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AccelChoice {
    /// KVM if it can run the iPXE ROM here, else TCG.
    Auto,
    Kvm,
    Tcg,
}

#[derive(Debug, Args)]
pub struct LabArgs {
    /// How many virtual clients to power on at once (of each pool given with --pool).
    #[arg(long, default_value_t = 2)]
    pub clients: usize,
    /// Boot the first pool whose root is served this way.
    #[arg(long, value_enum, default_value_t = RootChoice::Nfs)]
    pub root: RootChoice,
    /// Boot this pool instead (its own root setting applies). Repeat it to power on
    /// `--clients` of each pool at once, e.g. the same root from a disk and a RAM store.
    #[arg(long)]
    pub pool: Vec<String>,
    /// The config whose pools, images and addresses the lab uses.
    #[arg(short, long, default_value = "pools.yaml")]
    pub config: PathBuf,
    /// How qemu runs the clients.
    #[arg(long, value_enum, default_value_t = AccelChoice::Auto)]
    pub accel: AccelChoice,
    /// What the clients' boards run: bios (SeaBIOS, iPXE NIC ROM), uefi (OVMF, iPXE NIC ROM),
    /// uefi-pxe (OVMF's own PXE client, which loads iPXE over TFTP), uefi-http (OVMF's UEFI
    /// HTTP boot, which loads iPXE from a URL), uefi-secure (OVMF with Secure Boot enforced
    /// and Microsoft's keys: its PXE runs only signed loaders, a `secure_boot` pool's shim)
    /// or arm64 (an ARM64 `virt` board with AAVMF, always under TCG: its PXE loads Debian's
    /// network GRUB, and the pool's `arch.arm64` image boots).
    #[arg(long, value_enum, default_value_t = vm::Firmware::Bios)]
    pub firmware: vm::Firmware,
    /// Give up on clients not booted after this many seconds (default: 120 + 40 per client).
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Restart the daemon once, when a client's console first shows this text: stop it,
    /// keep it down `--restart-down` seconds, start it again. For trying what clients do
    /// when their server restarts under them (NBD reconnects, copy-on-write overlays on disk).
    #[arg(long)]
    pub restart_on: Option<String>,
    /// Seconds the daemon stays down for `--restart-on`.
    #[arg(long, default_value_t = 5)]
    pub restart_down: u64,
    /// Stop the daemon for `--restart-on` with SIGKILL, as a crash would, instead of SIGTERM.
    #[arg(long)]
    pub restart_kill: bool,
    /// Power each client on this many times. Once a boot has ended (its console said booted
    /// or failed, or qemu stopped), the lab pulls the client's plug and powers it on again:
    /// the record shows each earlier boot `gone` (new_boot) and the table shows the last one.
    /// Earlier consoles are kept as NAME.N.log.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub cycles: u32,
    /// Once a client of this pool runs its kernel (its console's `Linux version` line), drop
    /// every DHCP answer sent to it, as a failed switch port or relay would mid-boot: its
    /// initrd's DHCP then fails, and the record says why (`dhcp_lost`). Repeatable. Needs
    /// `nft` (package nftables).
    #[arg(long, value_name = "POOL")]
    pub cut_dhcp: Vec<String>,
    /// Once every client powered on so far has booted (or failed), activate revision REV of
    /// IMAGE under the running daemon, as `bootpool image activate IMAGE REV` does, and power
    /// on as many clients again, each pool's next MACs: the room then runs two revisions.
    /// Give the pools `bootpool.loop` on their command line to keep the first clients reading
    /// their root meanwhile (the demo image's init reads it in a loop then).
    #[arg(long, value_name = "IMAGE=REV")]
    pub activate: Option<String>,
    /// Put the last N clients of each pool (see --clients) in a second room: a bridge of its
    /// own behind a router (a network namespace forwarding between the rooms) whose ISC
    /// dhcrelay (package isc-dhcp-relay) relays the room's DHCP to the server, adding option
    /// 82. The room's subnet is the first of `dhcp.subnets` other than the server's; the
    /// router's address there is that subnet's `router` (else host .1); its address on the
    /// server's segment is the first single address of `dhcp.relays` (else host .254 of the
    /// server's subnet). In proxy mode dnsmasq, the site's DHCP server, runs on the server's
    /// segment (host .253) and gives both rooms' addresses, the second's through the relay.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub room2: usize,
    /// Once a client's console first shows this text, replace the config with
    /// `--reload-with`'s file and run `bootpool reload`, as an admin changing the room
    /// mid-boot would; the lab fails if the daemon refuses it.
    #[arg(long, value_name = "TEXT", requires = "reload_with")]
    pub reload_on: Option<String>,
    /// The config that `--reload-on` puts in place of `--config`.
    #[arg(long, value_name = "FILE", requires = "reload_on")]
    pub reload_with: Option<PathBuf>,
    /// After the clients are powered off for the last time, keep the daemon up for at most
    /// this many seconds, until the record shows each client's last boot gone (a silent root
    /// connection is lost after `limits.root_lost_after`), and say how each went.
    #[arg(long, value_name = "SECS")]
    pub stay_off: Option<u64>,
    /// Once every client has booted (or failed), keep them all running this many seconds
    /// more before powering them off: time for a `bootpool.loop` client to read its root
    /// again (with `--activate`, the second clients' passes).
    #[arg(long, value_name = "SECS")]
    pub stay_on: Option<u64>,
    /// Give each client a disk as its first virtio disk (`/dev/vda`): a number is a local
    /// disk of that many MiB with an empty ext4 filesystem (as a PC's spare partition: a
    /// pool's `overlay: {disk: /dev/vda}` writes there), made at the client's first power-on
    /// in the run's folder (`pcNN.disk`) and kept across `--cycles` (needs `mke2fs`, package
    /// e2fsprogs); a file is a raw disk image every client boots from copy-on-write in qemu
    /// (the file never changes), e.g. for a next boot of `local`.
    #[arg(long, value_name = "MIB|FILE", value_parser = vm::Disk::parse)]
    pub disk: Option<vm::Disk>,
    /// Each client's memory in MiB, instead of the board's own (320 for an x86 PC, 512 for
    /// Secure Boot's and ARM64's): a stock distribution's initrd made for any PC (dracut's
    /// takes about 150 MiB unpacked) does not fit in 320.
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u32).range(64..))]
    pub memory: Option<u32>,
    /// Start the clients powered off (qemu stopped, its NIC on the room's switch) and power
    /// each on when a Wake-on-LAN magic packet for its MAC arrives (UDP port 9 in the lab's
    /// network namespace): `bootpool wake` run in that namespace wakes them, as the lab says
    /// once the daemon is up. Only the first power-on waits for a packet (not --cycles'
    /// later ones, nor --activate's second clients). Console times count from the wake;
    /// --timeout from the lab's start. Not with --room2 (its packets stay in its router).
    #[arg(long, conflicts_with = "room2")]
    pub wake: bool,
    /// Log in on each client's serial console once its getty asks (a stock image with
    /// `console=ttyS0`), as USER with PASSWORD, then type `--login-run`'s command and `exit`:
    /// the console log shows the session. A refused password is left at that (the console
    /// says `Login incorrect`).
    #[arg(long, value_name = "USER:PASSWORD")]
    pub login: Option<login::Login>,
    /// The shell command `--login` types after logging in (one line).
    #[arg(long, value_name = "COMMAND", requires = "login")]
    pub login_run: Option<String>,
    /// Serve the pools' homes (`pools.NAME.homes`) from this folder: nfs-ganesha (packages
    /// nfs-ganesha, nfs-ganesha-vfs) on the homes' `server` address, which the lab adds to
    /// its bridge, exports the folder read-write over NFSv4 as the homes' `export`, as a
    /// home server of the site's would (docs/homes.md). The server must be an IPv4 address
    /// of the server's subnet other than its own; every booted pool with homes names the same.
    #[arg(long, value_name = "DIR")]
    pub homes: Option<PathBuf>,
    /// A second server of the site: `bootpool serve --member b` on this config (the same
    /// PostgreSQL `database:` as `--config`'s, its own `server.address` in the room's subnet,
    /// `state_dir` and `dhcp.range`; the lab reads its API from the first's address, in the
    /// clients' subnet, so with its `server.read_token`), in a network namespace of its own cabled to the room's
    /// bridge, while the first runs as member `a`. The clients boot from whichever owns them;
    /// the table reads the boots of both. Its log is the run's `bootpool-b.log`
    #[arg(long, value_name = "CONFIG", conflicts_with_all = ["restart_on", "reload_on"])]
    pub member: Option<PathBuf>,
    /// Before the clients power on, a DHCP client with this MAC, which no pool may list,
    /// asks for an address (busybox udhcpc, three tries); the lab fails if any server answers
    #[arg(long, value_name = "MAC")]
    pub stranger: Option<Mac>,
    /// A server of the site dies under running clients: both members run in namespaces of
    /// their own, each with keepalived (package keepalived) moving its address as `bootpool
    /// site keepalived` writes it, and SECS into `--stay-on` member a's bootpool and
    /// keepalived are killed with -9 and its link goes down; the lab says when b took a's
    /// address. The members' configs need an `admin_token` (keepalived's notify tells the
    /// daemon through its API) and a `read_token` (the lab reads both from its own address),
    /// and the lab takes the subnet's three highest host addresses
    /// for itself and the members' fixed ones (docs/failover.md).
    #[arg(long, value_name = "SECS", requires_all = ["member", "stay_on"])]
    pub kill_member_after: Option<u64>,
    /// Member a dies as with `--kill-member-after`, but while the clients boot: once the
    /// site's record, as member b reads it, shows every client's root served by a (its NFS
    /// mount, NBD attach or agent's manifest) and no client's console has said it booted. The
    /// lab fails if a client's boot ended before that moment.
    #[arg(long, requires = "member", conflicts_with = "kill_member_after")]
    pub kill_member_at_root: bool,
    /// Power on the first client alone, and the others once its console says it booted: the
    /// room's first machine, whose agent (a pool with `nbd.peers`) then holds the root for the
    /// others (docs/swarm.md).
    #[arg(long, conflicts_with_all = ["activate", "wake", "cycles"])]
    pub seed_first: bool,
    /// Switch the client NAME (pc01, pc02, ...) off, its qemu killed with -9, once the record
    /// shows its root attached and its console has not said it booted: a machine unplugged
    /// mid-boot. The table then says so, and nothing more is expected of it.
    #[arg(long, value_name = "NAME", conflicts_with = "cycles")]
    pub kill_client_at_root: Option<String>,
}

/// The pools the lab boots, once the config can serve them and the firmware asked for can
/// boot them (or the first thing that stops the lab, said as `bootpool lab` says it).
fn pools_to_boot<'c>(
    args: &LabArgs,
    config: &'c Config,
) -> anyhow::Result<Vec<&'c std::sync::Arc<bootpool::config::Pool>>> {
    let mut missing = bootpool::image::serve::missing_files(config);
    missing.extend(config.missing_files());
    if let Some(e) = missing.first() {
        bail!("{e}");
    }
    if let Some(missing) = args
        .firmware
        .files()
        .iter()
        .find(|f| !std::path::Path::new(f).exists())
    {
        bail!(
            "--firmware {:?} needs {missing} (Debian: apt-get install {})",
            args.firmware,
            args.firmware.packages()
        );
    }
    if !args.firmware.native() && args.accel == AccelChoice::Kvm {
        bail!(
            "--firmware {:?} runs under TCG only: KVM runs the host's own architecture",
            args.firmware
        );
    }
    if matches!(
        args.firmware,
        vm::Firmware::UefiHttp6 | vm::Firmware::UefiPxe6
    ) && config.dhcp6.is_none()
    {
        bail!(
            "--firmware {:?} boots over IPv6 only: the config needs server.address6 and a dhcp6 section",
            args.firmware
        );
    }
    let pools: Vec<&std::sync::Arc<bootpool::config::Pool>> = if args.pool.is_empty() {
        let want = match args.root {
            RootChoice::Nfs => RootProto::Nfs,
            RootChoice::Nbd => RootProto::Nbd,
        };
        let first = config
            .pools
            .values()
            .find(|p| p.root == want)
            .with_context(|| format!("no pool with `root: {want}` in {}", args.config.display()))?;
        vec![first]
    } else {
        args.pool
            .iter()
            .map(|name| {
                config
                    .pools
                    .get(name)
                    .with_context(|| format!("no pool `{name}` in {}", args.config.display()))
            })
            .collect::<anyhow::Result<_>>()?
    };
    // An ARM64 board given the pool's x86 kernel would only stop in GRUB.
    if args.firmware == vm::Firmware::Arm64
        && let Some(p) = pools
            .iter()
            .find(|p| !p.arch.contains_key(&bootpool::config::Arch::Arm64))
    {
        bail!(
            "--firmware arm64: pool {} has no `arch: {{ arm64: {{ image: ... }} }}`, so its \
             ARM64 clients would get its x86 image (images/build-arm64.sh builds an ARM64 one)",
            p.name
        );
    }
    if args.room2 > args.clients {
        bail!(
            "--room2 {}: only {} clients of each pool are powered on (--clients)",
            args.room2,
            args.clients
        );
    }
    if args.room2 > 0 {
        room2::subnet(config)?;
    }
    for name in &args.cut_dhcp {
        if !pools.iter().any(|p| &p.name == name) {
            bail!("--cut-dhcp {name}: the lab boots no pool of that name (see --pool)");
        }
    }
    Ok(pools)
}

/// `bootpool lab`: wires the room (bridge, taps, the DHCP peer and radvd it needs, --room2's
/// router and relay), starts the daemon, powers the clients on, watches them until each has
/// booted, failed or timed out (acting on --cut-dhcp, --restart-on, --reload-on, --activate and
/// --stay-off as it goes), then prints the boot table. Longer than the house's ~150 lines on purpose: the watch loop and the report
/// share the run's state (the VMs, how often each was powered on, whose DHCP is cut, the
/// second wave), which split by phase would travel between functions as a bag of `&mut`s.
pub async fn run(args: LabArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let pools = pools_to_boot(&args, &config)?;
    if let Some(vm::Disk::Image(disk)) = args.disk.as_ref().filter(|d| !d.exists()) {
        bail!("--disk {}: no such file", disk.display());
    }
    if args
        .login_run
        .as_deref()
        .is_some_and(|run| run.contains(['\n', '\r']))
    {
        bail!("--login-run: the command must be one line");
    }
    let switch = args
        .activate
        .as_deref()
        .map(|spec| Switch::parse(spec, &config))
        .transpose()?;
    // (MAC, pool name) of every client to power on, pool by pool: the first wave, then (for
    // --activate) the second.
    let waves = if switch.is_some() { 2 } else { 1 };
    let mut by_pool: Vec<Vec<(Mac, String)>> = Vec::new();
    for pool in &pools {
        let want = args.clients * waves;
        let of_pool: Vec<Mac> = pool
            .clients
            .iter()
            .flat_map(|e| (0..e.macs.len()).filter_map(|i| e.macs.nth(i)))
            .take(want)
            .collect();
        if of_pool.len() < want {
            bail!(
                "pool `{}` lists only {} client MACs; the lab needs {want}",
                pool.name,
                of_pool.len(),
            );
        }
        by_pool.push(
            of_pool
                .into_iter()
                .map(|m| (m, pool.name.clone()))
                .collect(),
        );
    }
    let macs: Vec<(Mac, String)> = (0..waves)
        .flat_map(|w| {
            by_pool
                .iter()
                .flat_map(move |p| p[w * args.clients..(w + 1) * args.clients].to_vec())
        })
        .collect();
    let first_wave = macs.len() / waves;
    if let Some(name) = &args.kill_client_at_root
        && !(1..=macs.len()).any(|i| format!("pc{i:02}") == *name)
    {
        bail!(
            "--kill-client-at-root {name}: the lab powers on pc01 to pc{:02}",
            macs.len()
        );
    }

    let run_dir = config.server.state_dir.join("lab").join(format!(
        "{}",
        bootpool::record::event::now_micros() / 1_000_000
    ));
    std::fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
    let bridge = config
        .server
        .interfaces
        .first()
        .cloned()
        .unwrap_or_else(|| "br0".into());
    // --kill-member-after: the members hold their addresses in namespaces; the bridge has one
    // of the lab's own.
    let second_config = args.member.as_deref().map(Config::load).transpose()?;
    let dies = args.kill_member_after.is_some() || args.kill_member_at_root;
    let failing = second_config.as_ref().filter(|_| dies);
    let bridge_address = match failing {
        Some(second) => failover::own_address(&config, second, 0)?,
        None => config.server.address,
    };
    net::make_bridge(&bridge, bridge_address, config.dhcp.home().subnet.prefix)?;
    if let (Some(six), Some(d)) = (config.server.address6, &config.dhcp6) {
        net::ip(&[
            "-6",
            "addr",
            "add",
            &format!("{six}/{}", d.subnet.prefix),
            "dev",
            &bridge,
            "nodad",
        ])?;
    }
    // --room2: the room is wired before the taps, which join its bridge.
    let room2 = match args.room2 {
        0 => None,
        _ => Some(room2::wire(&config, &bridge, &run_dir)?),
    };
    if let Some(room) = &room2 {
        eprintln!("lab: {}", room.summary);
    }
    for i in 0..macs.len() {
        let in_room2 = i % args.clients >= args.clients - args.room2;
        let switch = if in_room2 { room2::BRIDGE } else { &bridge };
        net::make_tap(&format!("tap{i}"), switch)?;
    }
    if !args.cut_dhcp.is_empty() {
        net::prepare_dhcp_cuts()?;
    }

    // In proxy mode another server gives the addresses; in the lab that is dnsmasq.
    let mut dhcp_peer = match config.dhcp.mode {
        // The second room's site DHCP server serves both rooms.
        bootpool::config::DhcpMode::Proxy if room2.is_some() => None,
        bootpool::config::DhcpMode::Proxy => {
            let range = config.dhcp.home().range.unwrap_or_else(|| {
                let base = u32::from(config.dhcp.home().subnet.network);
                ((base + 100).into(), (base + 199).into())
            });
            let peer = net::start_dhcp_peer(&bridge, range, &run_dir)?;
            if peer.is_none() {
                bail!("proxy mode needs dnsmasq in the lab to give addresses; install dnsmasq");
            }
            peer
        }
        bootpool::config::DhcpMode::Authoritative => None,
    };
    // With DHCPv6, the advertisements say O (and bootpool may send them itself).
    let adverts = match &config.dhcp6 {
        None => Some(("fd77::/64".to_string(), false)),
        Some(d) if d.router_advertisements == bootpool::config::RouterAdverts::Send => None,
        Some(d) => Some((d.subnet.to_string(), true)),
    };
    let mut radvd = match &adverts {
        Some((prefix, dhcp6)) => net::start_router_adverts(&bridge, prefix, *dhcp6, &run_dir)?,
        None => None,
    };
    if radvd.is_none() && adverts.is_some() {
        eprintln!("lab: radvd is not installed; iPXE will wait about 10 s for IPv6 on each client");
    }

    // --homes: the site's home server, up before any client can mount it.
    let _homes = match &args.homes {
        Some(folder) => {
            let server = homes::start(folder, &config, &pools, &bridge, &run_dir)?;
            eprintln!("lab: {}", server.summary);
            Some(server)
        }
        None => None,
    };

    let accel = match args.accel {
        AccelChoice::Kvm => Accel::Kvm,
        AccelChoice::Tcg => Accel::Tcg,
        AccelChoice::Auto if !args.firmware.native() => Accel::Tcg,
        AccelChoice::Auto => {
            net::make_tap("tapprobe", &bridge)?;
            let works = tokio::task::spawn_blocking({
                let dir = run_dir.clone();
                move || vm::probe_kvm("tapprobe", &dir)
            })
            .await?;
            net::ip(&["link", "del", "tapprobe"])?;
            if works { Accel::Kvm } else { Accel::Tcg }
        }
    };

    let api = std::net::SocketAddr::from((config.server.address, config.server.http.port()));
    // What the daemon serves: the config with `bootpool.lab=poweroff` on every command line,
    // so the demo powers off once done and its VM ends.
    let served = poweroff::write(&args.config)?;
    // --wake: listening before the daemon can send anything.
    let listener = args.wake.then(wol::Listener::bind).transpose()?;
    let member = args.member.is_some().then_some("a");
    // The first server: in the lab's namespace, or (--kill-member-after) in one of its own.
    let (mut daemon, mut first) = match failing {
        Some(second) => {
            let own = failover::own_address(&config, second, 1)?;
            let a = Member::start("a", &args.config, &bridge, &run_dir, Some(own)).await?;
            (None, Some(a))
        }
        None => {
            let d = start_daemon(&served.path, &run_dir, (api, String::new()), member, None);
            (Some(d.await?), None)
        }
    };
    // --member: the site's second server, in its namespace on the room's bridge.
    let mut second = match (&args.member, &second_config) {
        (Some(path), Some(c)) => {
            let own = failing
                .map(|_| failover::own_address(&config, c, 2))
                .transpose()?;
            Some(Member::start("b", path, &bridge, &run_dir, own).await?)
        }
        _ => None,
    };
    if let (Some(a), Some(b)) = (first.as_mut(), second.as_mut()) {
        failover::start_keepalived(a, &run_dir)?;
        failover::start_keepalived(b, &run_dir)?;
        eprintln!("lab: keepalived holds each member's address on its member");
    }
    let first_api = first.as_ref().map_or((api, String::new()), Member::api);
    let mut apis = Apis::new(
        std::iter::once(first_api)
            .chain(second.as_ref().map(Member::api))
            .collect(),
    );
    if let Some(mac) = args.stranger {
        if config.member(mac).is_some() {
            bail!("--stranger {mac}: a pool lists that MAC or takes it in (`discover`)");
        }
        let bridge = bridge.clone();
        let said = tokio::task::spawn_blocking(move || stranger::ask(mac, &bridge)).await??;
        eprintln!("lab: {said}");
    }

    let timeout = Duration::from_secs(
        args.timeout
            .unwrap_or((120 + 40 * first_wave as u64) * u64::from(args.cycles) * waves as u64),
    );
    eprintln!(
        "lab: {} clients of {} powering on, {} acceleration, up to {}s; consoles in {}",
        first_wave,
        pools
            .iter()
            .map(|p| format!("pool {} ({} root)", p.name, p.root))
            .collect::<Vec<_>>()
            .join(" and "),
        if accel == Accel::Kvm {
            "KVM"
        } else {
            "TCG (software)"
        },
        timeout.as_secs(),
        run_dir.display()
    );
    let wave_start = bootpool::record::event::now_micros() as f64 / 1e6;
    if let Some(vm::Disk::Empty(mib)) = args.disk {
        for i in 0..macs.len() {
            vm::make_disk(&run_dir, &format!("pc{:02}", i + 1), mib)?;
        }
    }
    let board = vm::Board {
        accel,
        firmware: args.firmware,
        memory_mib: args.memory,
        disk: args.disk.clone(),
        login: args.login.clone().map(|mut l| {
            l.run = args.login_run.clone();
            l
        }),
    };
    let power_on = |i: usize| {
        Vm::power_on(
            &format!("pc{:02}", i + 1),
            macs[i].0,
            &format!("tap{i}"),
            &board,
            &run_dir,
        )
    };
    // --seed-first: the first client alone; the others once it is up.
    let mut seeding = args.seed_first && first_wave > 1;
    let mut vms = (0..if seeding { 1 } else { first_wave })
        .map(|i| match args.wake {
            false => power_on(i),
            true => Vm::powered_off(
                &format!("pc{:02}", i + 1),
                macs[i].0,
                &format!("tap{i}"),
                &board,
                &run_dir,
            ),
        })
        .collect::<anyhow::Result<Vec<Vm>>>()?;
    if args.wake {
        eprintln!(
            "lab: the clients are off until their magic packets come; wake them in the lab's namespace: nsenter --net=/proc/{}/ns/net bootpool wake --pool {} --config {}",
            std::process::id(),
            pools[0].name,
            args.config.display()
        );
    }
    // Whose DHCP answers are dropped now (--cut-dhcp), by client.
    let mut cut = vec![false; macs.len()];
    let mut switch = switch;
    let started = Instant::now();
    // The pools whose kernel writes no serial console: their clients' boots are judged by the
    // record (`table::by_record`), polled every 2 s, not by a line on the serial port.
    let by_record: Vec<String> = pools
        .iter()
        .filter(|p| table::by_record(p))
        .map(|p| p.name.clone())
        .collect();
    for pool in &by_record {
        eprintln!(
            "lab: pool {pool} has no serial console (no console=ttyS in its cmdline): its boots are judged by the record"
        );
    }
    let mut recorded: Vec<Option<String>> = Vec::new();
    let mut asked_record = Instant::now();
    let mut reported = vec![false; vms.len()];
    // How many times each client has been powered on.
    let mut power_ons = vec![1u32; vms.len()];
    let mut restart_on = args.restart_on.clone();
    let mut reload_on = args.reload_on.clone();
    // --kill-member-at-root and --kill-client-at-root: what is still to happen, and when the
    // record was last read for them.
    let mut member_dies = args.kill_member_at_root && first.is_some();
    let mut client_off = args.kill_client_at_root.clone();
    let mut switched_off: Option<usize> = None;
    let mut asked_midboot = Instant::now();
    loop {
        if (member_dies || client_off.is_some())
            && asked_midboot.elapsed() >= Duration::from_secs(1)
        {
            asked_midboot = Instant::now();
            if let (true, Some(a), Some(b)) = (member_dies, first.as_mut(), second.as_ref()) {
                // b's own view: a's rows of the root are then in the site's database.
                let boots = b.boots().await?;
                let last = last_boots(&boots, &vms, wave_start);
                let consoles: Vec<(String, bool)> = vms
                    .iter()
                    .map(|vm| (vm.name.clone(), vm.console != Console::Running))
                    .collect();
                let all = vms.len() == first_wave;
                if all
                    && midboot::all_rooted_on(&last, &consoles, "a").map_err(anyhow::Error::msg)?
                {
                    member_dies = false;
                    eprintln!(
                        "lab: the record shows every client's root served by a, and none has \
                         booted: killing member a"
                    );
                    apis.bury(a.api).await?;
                    let sizes = console_sizes(&vms);
                    eprintln!("lab: {}", failover::fail(a, b)?);
                    eprintln!("lab: consoles' bytes at the death: {}", sizes.join(", "));
                }
            }
            if let Some(name) = client_off.clone()
                && let Some(i) = vms.iter().position(|vm| vm.name == name)
            {
                let boots = apis.boots().await?;
                let rooted = last_boots(&boots, &vms[i..=i], wave_start)[0]
                    .is_some_and(|b| midboot::rooted(b, None));
                if vms[i].console != Console::Running {
                    bail!(
                        "--kill-client-at-root {name}: its boot ended before its root was seen attached"
                    );
                }
                if rooted {
                    client_off = None;
                    let sizes = console_sizes(&vms);
                    vms[i].kill();
                    switched_off = Some(i);
                    eprintln!(
                        "lab: {name}'s root is attached (the record) and it has not booted: \
                         switched off (qemu killed with -9)"
                    );
                    eprintln!(
                        "lab: consoles' bytes at the switch-off: {}",
                        sizes.join(", ")
                    );
                }
            }
        }
        for mac in listener
            .as_ref()
            .map(wol::Listener::woken)
            .transpose()?
            .unwrap_or_default()
        {
            if let Some(vm) = vms.iter_mut().find(|vm| vm.mac == mac && vm.is_off()) {
                vm.resume(&run_dir)?;
                eprintln!("lab: {}'s magic packet came: powered on", vm.name);
            }
        }
        if let (Some(text), Some(with)) = (&reload_on, &args.reload_with)
            && let Some(vm) = vms.iter().find(|vm| vm.console_contains(text))
        {
            eprintln!(
                "lab: {} printed {text:?}: reloading the config from {}",
                vm.name,
                with.display()
            );
            reload_on = None;
            eprintln!("lab: {}", reload(&args.config, with, &served)?);
        }
        if let Some(text) = &restart_on
            && let Some(vm) = vms.iter().find(|vm| vm.console_contains(text))
        {
            eprintln!(
                "lab: {} printed {text:?}: {} bootpool for {}s",
                vm.name,
                if args.restart_kill {
                    "killing (-9)"
                } else {
                    "stopping"
                },
                args.restart_down
            );
            restart_on = None;
            if args.restart_kill {
                daemon.iter_mut().for_each(Daemon::kill);
            }
            drop(daemon.take());
            tokio::time::sleep(Duration::from_secs(args.restart_down)).await;
            let started = start_daemon(&served.path, &run_dir, (api, String::new()), None, None);
            daemon = Some(started.await?);
            eprintln!("lab: bootpool started again");
        }
        let waits_on_record = vms
            .iter()
            .enumerate()
            .any(|(i, vm)| by_record.contains(&macs[i].1) && vm.console == Console::Running);
        if waits_on_record && asked_record.elapsed() >= Duration::from_secs(2) {
            asked_record = Instant::now();
            if let Ok(boots) = recorded_results(&apis, &vms, wave_start).await {
                recorded = boots;
            }
        }
        let mut running = 0;
        for (i, vm) in vms.iter_mut().enumerate() {
            if !cut[i] && args.cut_dhcp.contains(&macs[i].1) && vm.console_contains(KERNEL_STARTED)
            {
                net::cut_dhcp(&format!("tap{i}"))?;
                cut[i] = true;
                eprintln!(
                    "lab: {}'s kernel runs: its DHCP answers are dropped from now on",
                    vm.name
                );
            }
            // A client whose console said how its boot went is done, powered off or not (a
            // stock image sits at its login prompt).
            let alive = vm.poll();
            let judged = by_record.contains(&macs[i].1)
                && recorded
                    .get(i)
                    .and_then(Option::as_deref)
                    .is_some_and(|r| r == "booted" || r == "failed");
            if alive && vm.console == Console::Running && !judged {
                running += 1;
            }
            if judged && !reported[i] && vm.console == Console::Running {
                reported[i] = true;
                let said = recorded[i].as_deref().unwrap_or("-");
                eprintln!("lab: {} {said}, as the record says", vm.name);
            }
            if !reported[i] && vm.console != Console::Running {
                reported[i] = true;
                match &vm.console {
                    Console::Booted(t) => {
                        eprintln!("lab: {} booted after {:.1}s", vm.name, t.as_secs_f64())
                    }
                    Console::Failed(why) => eprintln!("lab: {} failed: {why}", vm.name),
                    Console::Running => {}
                }
            }
            let ended = !alive || vm.console != Console::Running;
            if ended && power_ons[i] < args.cycles {
                vm.kill();
                let earlier = run_dir.join(format!("{}.{}.log", vm.name, power_ons[i]));
                std::fs::rename(&vm.serial, &earlier)
                    .with_context(|| format!("keeping {}", vm.serial.display()))?;
                power_ons[i] += 1;
                eprintln!(
                    "lab: {} powered off and on again (power-on {} of {})",
                    vm.name, power_ons[i], args.cycles
                );
                if cut[i] {
                    net::restore_dhcp(&format!("tap{i}"))?;
                    cut[i] = false;
                }
                let (name, mac) = (vm.name.clone(), vm.mac);
                *vm = Vm::power_on(&name, mac, &format!("tap{i}"), &board, &run_dir)?;
                reported[i] = false;
                running += 1;
            }
        }
        if seeding && vms[0].console != Console::Running {
            seeding = false;
            eprintln!(
                "lab: {} is up: powering on the other {} clients (--seed-first)",
                vms[0].name,
                first_wave - 1
            );
            for i in 1..first_wave {
                vms.push(power_on(i)?);
                reported.push(false);
                power_ons.push(1);
                running += 1;
            }
        }
        if running == 0
            && let Some(to) = switch.take()
        {
            let said = to.activate(&config)?;
            eprintln!("lab: {said}");
            eprintln!(
                "lab: powering on {} more clients (pc{:02} to pc{:02})",
                macs.len() - vms.len(),
                vms.len() + 1,
                macs.len()
            );
            for i in vms.len()..macs.len() {
                vms.push(power_on(i)?);
                reported.push(false);
                power_ons.push(1);
                running += 1;
            }
        }
        if running == 0 || started.elapsed() > timeout {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if let Some(secs) = args.stay_on {
        eprintln!("lab: every client is up; keeping them on {secs}s more (--stay-on)");
        let mut left = Duration::from_secs(secs);
        if let (Some(after), Some(a), Some(b)) = (args.kill_member_after, first.as_mut(), &second) {
            let after = Duration::from_secs(after).min(left);
            tokio::time::sleep(after).await;
            left -= after;
            apis.bury(a.api).await?;
            let sizes = console_sizes(&vms);
            eprintln!("lab: {}", failover::fail(a, b)?);
            // Where each console stood when a died, for whoever reads them after.
            eprintln!("lab: consoles' bytes at the death: {}", sizes.join(", "));
        }
        tokio::time::sleep(left).await;
    }
    for vm in &mut vms {
        vm.kill();
    }
    let mut boots = settled_boots(&apis, &vms, wave_start).await?;
    if let Some(secs) = args.stay_off {
        boots = gone_boots(&apis, &vms, wave_start, Duration::from_secs(secs)).await?;
    }
    if member_dies {
        bail!("--kill-member-at-root: the clients' roots were never all seen served by a");
    }
    if let Some(name) = &client_off {
        bail!("--kill-client-at-root {name}: no such client's root was seen attached");
    }
    // The live daemons' counters as the run left them (the swarm's chunks sent, ...), for
    // whoever reads the run later.
    for (name, text) in apis.metrics().await {
        std::fs::write(run_dir.join(&name), text)
            .with_context(|| format!("writing {}", run_dir.join(&name).display()))?;
    }
    // The boots the table is made of, as the API gave them, for whoever reads the run later.
    std::fs::write(
        run_dir.join("boots.json"),
        serde_json::to_string_pretty(&boots)?,
    )
    .with_context(|| format!("writing {}", run_dir.join("boots.json").display()))?;
    drop(daemon);
    drop(first);
    drop(second);
    drop(room2);
    for helper in [radvd.as_mut(), dhcp_peer.as_mut()].into_iter().flatten() {
        let _ = helper.kill();
        let _ = helper.wait();
    }

    let outcomes: Vec<Outcome> = vms
        .iter()
        .zip(&macs)
        .enumerate()
        .map(|(i, (vm, (_, pool)))| {
            let mac = vm.mac.to_string();
            let boot = boots
                .iter()
                .rfind(|b| b.mac == mac && b.start >= wave_start - 1.0)
                .cloned();
            Outcome {
                name: vm.name.clone(),
                pool: pool.clone(),
                mac: vm.mac,
                console: vm.console.clone(),
                firmware_s: vm.firmware_s(),
                boot,
                by_record: by_record.contains(pool),
                switched_off: switched_off == Some(i),
            }
        })
        .collect();
    println!("{}", table::render(&outcomes));
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.ok()).collect();
    for (o, vm) in outcomes.iter().zip(&vms) {
        if !o.ok() {
            eprintln!(
                "--- {} console (last lines of {}):\n{}",
                o.name,
                vm.serial.display(),
                vm.console_tail(15)
            );
        }
    }
    if !failed.is_empty() {
        bail!(
            "{} of {} clients did not boot (daemon log: {})",
            failed.len(),
            outcomes.len(),
            run_dir.join("bootpool.log").display()
        );
    }
    Ok(())
}

/// Where each client's console stands, in bytes (`NAME BYTES`), for whoever reads the
/// consoles after a death or a switch-off.
fn console_sizes(vms: &[Vm]) -> Vec<String> {
    vms.iter()
        .map(|vm| {
            let len = std::fs::metadata(&vm.serial).map_or(0, |m| m.len());
            format!("{} {len}", vm.name)
        })
        .collect()
}

/// The result the record gives each client's boot of this run (`None`: no boot yet).
async fn recorded_results(
    apis: &Apis,
    vms: &[Vm],
    wave_start: f64,
) -> anyhow::Result<Vec<Option<String>>> {
    let boots = apis.boots().await?;
    Ok(last_boots(&boots, vms, wave_start)
        .into_iter()
        .map(|b| b.map(|b| b.result.clone()))
        .collect())
}

/// The daemon's boots, once every client that booted by its console has a boot the record
/// no longer shows `running` (an inferred end comes `QUIET_S` after the root's last read),
/// or `QUIET_S` plus 15 s have passed.
async fn settled_boots(apis: &Apis, vms: &[Vm], wave_start: f64) -> anyhow::Result<Vec<BootView>> {
    // The booted call precedes the done line; give the journal writer a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let deadline = Instant::now() + Duration::from_secs(bootpool::record::end::QUIET_S as u64 + 15);
    loop {
        let boots = apis.boots().await?;
        let waiting = vms
            .iter()
            .filter(|vm| matches!(vm.console, Console::Booted(_)))
            .any(|vm| {
                let mac = vm.mac.to_string();
                boots
                    .iter()
                    .rfind(|b| b.mac == mac && b.start >= wave_start - 1.0)
                    .is_none_or(|b| b.result == "running")
            });
        if !waiting || Instant::now() > deadline {
            return Ok(boots);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The last boot of each client, as the API shows them.
fn last_boots<'a>(boots: &'a [BootView], vms: &[Vm], wave_start: f64) -> Vec<Option<&'a BootView>> {
    vms.iter()
        .map(|vm| {
            let mac = vm.mac.to_string();
            boots
                .iter()
                .rfind(|b| b.mac == mac && b.start >= wave_start - 1.0)
        })
        .collect()
}

/// `--stay-off`: the daemon's boots once the last boot of every client (all powered off by
/// now) is recorded gone, or `bound` has passed; says how each went.
async fn gone_boots(
    apis: &Apis,
    vms: &[Vm],
    wave_start: f64,
    bound: Duration,
) -> anyhow::Result<Vec<BootView>> {
    eprintln!(
        "lab: all clients off; waiting up to {}s for the record to see them gone",
        bound.as_secs()
    );
    let deadline = Instant::now() + bound;
    loop {
        let boots = apis.boots().await?;
        let last = last_boots(&boots, vms, wave_start);
        let all_gone = last.iter().flatten().all(|b| b.gone.is_some());
        if all_gone || Instant::now() > deadline {
            for (vm, b) in vms.iter().zip(&last) {
                match b.and_then(|b| b.gone.as_deref().map(|g| (g, b))) {
                    Some((gone, b)) => eprintln!(
                        "lab: {}'s boot {} is gone ({gone}) {:.1}s after it started",
                        vm.name,
                        b.id,
                        b.gone_at.unwrap_or(b.start) - b.start
                    ),
                    None => eprintln!("lab: {}'s last boot is not seen gone", vm.name),
                }
            }
            return Ok(boots);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `--reload-on`: puts `with` in place of `config` (renamed over it, so the daemon never reads
/// half a file), writes the served copy again from it (with the lab's power-off argument) and
/// runs `bootpool reload`; what it said, or why it failed.
fn reload(
    config: &std::path::Path,
    with: &std::path::Path,
    served: &poweroff::LabConfig,
) -> anyhow::Result<String> {
    let next = config.with_extension("reload.tmp");
    std::fs::copy(with, &next).with_context(|| format!("copying {}", with.display()))?;
    std::fs::rename(&next, config).with_context(|| format!("replacing {}", config.display()))?;
    // The daemon serves the lab's copy (`poweroff`): it is written again from the new file.
    served.refresh(config)?;
    let out = Command::new(daemon())
        .arg("reload")
        .arg("--config")
        .arg(&served.path)
        .output()
        .context("running bootpool reload")?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    if !out.status.success() {
        bail!("bootpool reload failed ({}): {said}", out.status);
    }
    Ok(said)
}

/// The kernel's first console line: by then the firmware and iPXE are done with DHCP.
const KERNEL_STARTED: &str = "Linux version";

/// `--activate IMAGE=REV`: the switch the lab makes once the first clients are up.
struct Switch {
    image: String,
    rev: String,
}

impl Switch {
    /// Checks IMAGE=REV against the config and the image's revisions before anything starts.
    fn parse(spec: &str, config: &Config) -> anyhow::Result<Switch> {
        let (image, rev) = spec
            .split_once('=')
            .with_context(|| format!("--activate {spec}: expected IMAGE=REV, e.g. demo=r2"))?;
        let dir = &config
            .images
            .get(image)
            .with_context(|| format!("--activate {spec}: no image `{image}` in the config"))?
            .dir;
        bootpool::image::store::find(dir, rev).with_context(|| format!("--activate {spec}"))?;
        Ok(Switch {
            image: image.into(),
            rev: rev.into(),
        })
    }

    fn activate(&self, config: &Config) -> anyhow::Result<String> {
        bootpool::image::cli::activate(config, &self.image, &self.rev)
    }
}

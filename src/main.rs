//! The `bootpool` command: parses arguments, sets up logging and the runtime, and maps errors
//! to exit codes. Everything else lives in the library; the instruments (`lab`, `storm`,
//! `trace`) are another binary's, `bootpool-instruments`, which this one runs in its place.

use bootpool::app::Host;
use bootpool::config::{self, Config};
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "bootpool",
    version,
    about = "Boot rooms of diskless machines over the network, and see how each boot went"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// `bootpool site`'s subcommands (docs/failover.md).
#[derive(Subcommand)]
enum SiteCommand {
    /// Print this member's keepalived.conf: one VRRP instance per address of the site's
    /// members (read from the database), this member the master of its own and a backup of
    /// the others', telling this daemon when it takes an address over or gives it back.
    Keepalived {
        #[arg(short, long, default_value_os_t = config::default_file(), hide_default_value = true, help = config::FILE_HELP)]
        config: PathBuf,
        /// The member whose file this is; default: the host's name, as `serve` takes it.
        #[arg(long, value_name = "NAME")]
        member: Option<String>,
        /// The interface the addresses go on; default: the first of server.interfaces.
        #[arg(long, value_name = "IFACE")]
        interface: Option<String>,
        /// Seconds between VRRP advertisements: a dead master is replaced after about three.
        #[arg(long, value_name = "SECONDS", default_value_t = bootpool::site::keepalived::ADVERT_S)]
        advert: f64,
        /// The first virtual router id; the site's addresses take the next ones.
        #[arg(long, value_name = "ID", default_value_t = bootpool::site::keepalived::FIRST_VRID)]
        first_vrid: u8,
        /// Advertise by unicast to this peer (another member's own fixed address), not by
        /// multicast; give it once per other member.
        #[arg(long = "peer", value_name = "IP")]
        peers: Vec<std::net::Ipv4Addr>,
        /// With --peer: this host's own fixed address the advertisements come from.
        #[arg(long, value_name = "IP", requires = "peers")]
        source: Option<std::net::Ipv4Addr>,
    },
    /// Tell the daemon this host now holds a member's address (keepalived's notify_master):
    /// it serves it, and tickles the connections other members recorded to it.
    Takeover {
        #[arg(short, long, default_value_os_t = config::default_file(), hide_default_value = true, help = config::FILE_HELP)]
        config: PathBuf,
        /// The address (a member's server.address or one of its server.links).
        address: std::net::Ipv4Addr,
    },
    /// Tell the daemon this host no longer holds a member's address (keepalived's
    /// notify_backup and notify_fault).
    Release {
        #[arg(short, long, default_value_os_t = config::default_file(), hide_default_value = true, help = config::FILE_HELP)]
        config: PathBuf,
        /// The address.
        address: std::net::Ipv4Addr,
    },
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon: DHCP, TFTP, HTTP, NFS and NBD for the pools in the config.
    Serve {
        #[arg(short, long, default_value_os_t = config::default_file(), hide_default_value = true, help = config::FILE_HELP)]
        config: PathBuf,
        /// This server's name in its site (servers sharing a PostgreSQL `database:`); default:
        /// the host's name. Each server of a site needs its own.
        #[arg(long, value_name = "NAME")]
        member: Option<String>,
    },
    /// Check a config (syntax, values, image files) and, on this host, what binding would
    /// refuse (interfaces, addresses, ports), then exit; errors name file:line:column.
    Check {
        #[arg(short, long, default_value_os_t = config::default_file(), hide_default_value = true, help = config::FILE_HELP)]
        config: PathBuf,
        /// The config is for another host: leave this host's interfaces, addresses and ports
        /// unchecked.
        #[arg(long)]
        for_another_host: bool,
    },
    /// Make the daemon serving this config's state_dir re-read it (SIGHUP) and wait for its
    /// answer: applied, or refused whole with the reasons (the running config then stays).
    Reload {
        #[arg(short, long, default_value_os_t = config::default_file(), hide_default_value = true, help = config::FILE_HELP)]
        config: PathBuf,
    },
    /// Clients: enrol one into a pool, list the unknown ones that asked.
    #[command(subcommand)]
    Client(ClientCommand),
    /// Show recorded waves and boots: every wave, one wave, a pool's newest wave, or two waves
    /// compared (e.g. the same room over NFS and over NBD).
    Report {
        #[arg(short, long, default_value_os_t = config::default_file(), hide_default_value = true, help = config::FILE_HELP)]
        config: PathBuf,
        /// One wave's per-client table and summary.
        #[arg(long, conflicts_with_all = ["pool", "compare"])]
        wave: Option<u64>,
        /// The newest wave of this pool.
        #[arg(long, conflicts_with = "compare")]
        pool: Option<String>,
        /// Two waves side by side.
        #[arg(long, num_args = 2, value_names = ["WAVE_A", "WAVE_B"])]
        compare: Option<Vec<u64>>,
        /// A client's console lines (netconsole, iPXE's syslog) and the cause of a failed
        /// boot: its newest boot's, or `--boot ID`'s.
        #[arg(long, value_name = "MAC", conflicts_with_all = ["wave", "pool", "compare"])]
        console: Option<String>,
        /// With --console: this boot (its id in `bootpool report --wave`), not the newest.
        #[arg(long, value_name = "ID", requires = "console")]
        boot: Option<u64>,
        /// Only waves that started at or after this local date and time (2026-12-06T07:00,
        /// 2026-12-06).
        #[arg(long, value_name = "WHEN", conflicts_with_all = ["last", "wave", "compare", "console"])]
        since: Option<String>,
        /// Only waves that started in this last stretch of time (90m, 2h, 7d).
        #[arg(long, value_name = "DURATION", conflicts_with_all = ["wave", "compare", "console"])]
        last: Option<String>,
        /// Every stored event, raw, one JSON object a line (the legacy journal's format).
        #[arg(long, conflicts_with_all = ["wave", "pool", "compare", "format"])]
        events: bool,
        /// Every stored egress sample, raw, one JSON object a line (the legacy file's format).
        #[arg(long, conflicts_with_all = ["wave", "pool", "compare", "format", "events"])]
        egress: bool,
        #[arg(long, value_enum, default_value_t = bootpool::record::report::Format::Table)]
        format: bootpool::record::report::Format,
    },
    /// Boot N virtual clients (qemu, PXE) against a config in an isolated network namespace.
    #[command(disable_help_flag = true)]
    Lab(Instrument),
    /// Boot a whole room at once: N simulated clients replaying a real boot's trace, each on
    /// its own shaped link, against bootpool or another server, in a private network namespace.
    #[command(disable_help_flag = true)]
    Storm(Instrument),
    /// Images with revisions: import a tree, tarball or OCI image, list, activate, roll back,
    /// prune (README "Images").
    Image(bootpool::image::cli::ImageArgs),
    /// Say what a client, a room (subnet) or a pool boots next, once or until changed: its
    /// local disk, another image or revision, memtest86+, a menu, or its pool's image again
    /// (`default`). Asks the running daemon's API with the admin token.
    NextBoot {
        #[arg(short, long, default_value_os_t = config::default_file(), hide_default_value = true, help = config::FILE_HELP)]
        config: PathBuf,
        #[command(flatten)]
        whom: Whom,
        /// local, image:NAME, revision:NAME@REV, memtest, menu or default.
        target: String,
        /// At the next boot only (each client once); without it, until changed.
        #[arg(long)]
        once: bool,
    },
    /// The servers of this config's site (those sharing its PostgreSQL `database:`), read
    /// from the database: each one's links, rooms, heartbeat and share of the clients.
    Site {
        #[arg(short, long, default_value_os_t = config::default_file(), hide_default_value = true, help = config::FILE_HELP)]
        config: PathBuf,
        /// JSON, as `GET /api/v1/site` answers, instead of a table.
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        what: Option<SiteCommand>,
    },
    /// Wake a client, a room (subnet) or a pool with Wake-on-LAN magic packets, paced: at most
    /// --per-second a second, and no faster than the server's links can carry the boots they
    /// start. Asks the running daemon's API with the admin token; prints the wake's id.
    Wake {
        #[arg(short, long, default_value_os_t = config::default_file(), hide_default_value = true, help = config::FILE_HELP)]
        config: PathBuf,
        #[command(flatten)]
        whom: Whom,
        /// Magic packets a second (default 10), under the links' bound.
        #[arg(long, value_name = "N")]
        per_second: Option<u32>,
    },
    /// List the boot traces kept for pools with `trace: true`, or export one (docs/trace.md).
    #[command(disable_help_flag = true)]
    Trace(Instrument),
}

/// Whom `next-boot` and `wake` act on: exactly one client, room or pool, as the API's
/// `client`, `room` and `pool` keys take them.
#[derive(clap::Args)]
#[group(required = true, multiple = false)]
struct Whom {
    /// One client, by MAC (one some pool lists).
    #[arg(long, value_name = "MAC")]
    client: Option<String>,
    /// The clients whose leased address is in this subnet (one of `dhcp.subnets`, as
    /// written there).
    #[arg(long, value_name = "SUBNET")]
    room: Option<String>,
    /// Every client this pool lists.
    #[arg(long, value_name = "POOL")]
    pool: Option<String>,
}

impl Whom {
    /// The API request's `client`, `room` and `pool` keys, the one given set.
    fn json(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut body = serde_json::Map::new();
        for (key, value) in [
            ("client", &self.client),
            ("room", &self.room),
            ("pool", &self.pool),
        ] {
            body.insert(key.into(), value.clone().into());
        }
        body
    }
}

#[derive(Subcommand)]
enum ClientCommand {
    /// Enrol a machine into a pool: the enrolments file (server.enrolments, default
    /// STATE_DIR/enrolled.yaml) gets it, checked with pools.yaml, and the daemon serving this
    /// config reloads, so the machine boots at its next try. Refused, changing nothing, when
    /// the MAC is listed already, the pool does not exist or the name is another machine's.
    Add {
        #[arg(short, long, default_value_os_t = config::default_file(), hide_default_value = true, help = config::FILE_HELP)]
        config: PathBuf,
        /// The machine's MAC address (as GET /api/v1/unknown lists it).
        mac: String,
        /// The pool it boots in.
        #[arg(long)]
        pool: String,
        /// Its name (option 12, the reports), one machine's alone.
        #[arg(long)]
        name: Option<String>,
    },
    /// Take an enrolled machine out of the enrolments file, and have the daemon serving this
    /// config reload, so it is refused at its next try (a machine listed in pools.yaml is
    /// removed there). In a site the removal reaches every member within a few seconds.
    Remove {
        #[arg(short, long, default_value_os_t = config::default_file(), hide_default_value = true, help = config::FILE_HELP)]
        config: PathBuf,
        /// The machine's MAC address.
        mac: String,
    },
    /// The machines no pool lists that asked for a boot (as GET /api/v1/unknown), as the
    /// daemon last saved them (STATE_DIR/unknown.json), the one seen last first.
    Unknown {
        #[arg(short, long, default_value_os_t = config::default_file(), hide_default_value = true, help = config::FILE_HELP)]
        config: PathBuf,
    },
}

/// An instrument's arguments, `--help` among them, handed to `bootpool-instruments` as they
/// are: its parser is the one that knows them.
#[derive(clap::Args)]
struct Instrument {
    #[arg(num_args = 0.., allow_hyphen_values = true, trailing_var_arg = true)]
    args: Vec<OsString>,
}

fn main() -> ExitCode {
    // `bootpool help storm` is the instruments' own help, as `bootpool storm --help` is.
    let argv: Vec<OsString> = std::env::args_os().collect();
    if let [_, help, command] = &argv[..]
        && help == "help"
        && let Some(c) = ["lab", "storm", "trace"]
            .into_iter()
            .find(|c| command.as_os_str() == *c)
    {
        let help = Instrument {
            args: vec!["--help".into()],
        };
        return instrument(c, help);
    }
    let cli = Cli::parse();
    bootpool::log_limit::to_stderr();
    match cli.command {
        Command::Check {
            config,
            for_another_host,
        } => {
            let host = match for_another_host {
                true => Host::Another,
                false => Host::This,
            };
            check(&config, host)
        }
        Command::Reload { config } => reload(&config),
        Command::Client(ClientCommand::Add {
            config,
            mac,
            pool,
            name,
        }) => client_add(&config, &mac, pool, name),
        Command::Client(ClientCommand::Remove { config, mac }) => client_remove(&config, &mac),
        Command::Client(ClientCommand::Unknown { config }) => client_unknown(&config),
        Command::Serve { config, member } => {
            let config = match Config::load(&config) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            run(bootpool::app::serve(config, member))
        }
        Command::Report {
            config,
            wave,
            pool,
            compare,
            console,
            boot,
            since,
            last,
            events,
            egress,
            format,
        } => {
            if events || egress {
                return dump(&config, egress);
            }
            let since = match since_of(since.as_deref(), last.as_deref()) {
                Ok(since) => since,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            use bootpool::record::report::Query;
            if let Some(mac) = console {
                return match mac.parse() {
                    Ok(m) => report(&config, &Query::Console(m, boot), format, since),
                    Err(e) => {
                        eprintln!("error: --console {mac}: {e}");
                        ExitCode::FAILURE
                    }
                };
            }
            let query = match (wave, pool, compare) {
                (Some(w), _, _) => Query::Wave(w),
                (_, Some(p), _) => Query::Pool(p),
                (_, _, Some(ab)) => Query::Compare(ab[0], ab[1]),
                _ => Query::Waves,
            };
            report(&config, &query, format, since)
        }
        Command::NextBoot {
            config,
            whom,
            target,
            once,
        } => next_boot(&config, &whom, target, once),
        Command::Site {
            what: Some(what), ..
        } => site_command(what),
        Command::Site { config, json, .. } => site(&config, json),
        Command::Wake {
            config,
            whom,
            per_second,
        } => wake(&config, &whom, per_second),
        Command::Lab(i) => instrument("lab", i),
        Command::Storm(i) => instrument("storm", i),
        Command::Trace(i) => instrument("trace", i),
        Command::Image(args) => {
            match load_config(&args.config).map(|c| bootpool::image::cli::run(args, c)) {
                Err(code) => code,
                Ok(Ok(())) => ExitCode::SUCCESS,
                Ok(Err(e)) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `bootpool next-boot`: what a client, a room or a pool boots next, set through the API.
fn next_boot(config: &std::path::Path, whom: &Whom, target: String, once: bool) -> ExitCode {
    let mut body = whom.json();
    body.insert("boot".into(), target.into());
    body.insert("once".into(), once.into());
    let body = serde_json::Value::Object(body);
    api_action(config, "/api/v1/next-boot", &body, |answer| {
        let scope = answer["scope"].as_object().and_then(|o| o.iter().next());
        format!(
            "next boot of {}: {}, {}",
            scope.map_or(String::new(), |(k, v)| format!(
                "{k} {}",
                v.as_str().unwrap_or("")
            )),
            answer["target"].as_str().unwrap_or(""),
            match answer["once"].as_bool() {
                Some(true) => "once",
                _ => "until changed",
            }
        )
    })
}

/// `bootpool wake`: Wake-on-LAN to a client, a room or a pool, through the API.
fn wake(config: &std::path::Path, whom: &Whom, per_second: Option<u32>) -> ExitCode {
    let mut body = whom.json();
    body.insert("per_second".into(), per_second.into());
    let body = serde_json::Value::Object(body);
    api_action(config, "/api/v1/wake", &body, |a| {
        format!(
            "wake {}: {} clients of {}, {} a second{}",
            a["wake"],
            a["clients"],
            a["scope"].as_str().unwrap_or(""),
            a["per_second"],
            match a["links_allow"].as_u64() {
                Some(l) => format!(" (the links allow {l})"),
                None => String::new(),
            }
        )
    })
}

/// The instruments' binary (`instruments/`), which `bootpool lab`, `storm` and `trace` run.
const INSTRUMENTS: &str = "bootpool-instruments";

/// Runs `bootpool-instruments COMMAND ARGS` in this process's place (its exit status is
/// this command's): the one beside this binary (a build's `target/release`, an install's bin
/// folder), else the first in PATH.
fn instrument(command: &str, i: Instrument) -> ExitCode {
    use std::os::unix::process::CommandExt as _;
    let here = std::env::current_exe().ok();
    let beside = here.as_ref().map(|me| me.with_file_name(INSTRUMENTS));
    let in_path = || {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|dir| dir.join(INSTRUMENTS))
            .find(|p| p.is_file())
    };
    let Some(program) = beside.filter(|p| p.is_file()).or_else(in_path) else {
        let here = here.map_or("this binary".into(), |p| p.display().to_string());
        eprintln!(
            "error: `bootpool {command}` is run by {INSTRUMENTS}, which is neither beside \
             {here} nor in PATH: build it with `cargo build --release` at the repository's \
             root (it builds both binaries into target/release) and install it beside bootpool"
        );
        return ExitCode::FAILURE;
    };
    let err = std::process::Command::new(&program)
        .arg(command)
        .args(i.args)
        .exec();
    eprintln!("error: running {}: {err}", program.display());
    ExitCode::FAILURE
}

fn run(fut: impl Future<Output = anyhow::Result<()>>) -> ExitCode {
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(fut) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn check(path: &std::path::Path, host: Host) -> ExitCode {
    let c = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    for w in &c.warnings {
        eprintln!("warning: {w}");
    }
    let refused = bootpool::app::unservable(&c, host);
    for e in &refused {
        eprintln!("error: {e}");
    }
    if !refused.is_empty() {
        return ExitCode::from(2);
    }
    let clients: u64 = c
        .pools
        .values()
        .flat_map(|p| p.clients.iter().map(|e| e.macs.len()))
        .sum();
    let ports = match host {
        Host::Another => "; this host's interfaces, addresses and ports not checked",
        Host::This => match bootpool::app::state_dir_holder(&c.server.state_dir) {
            Some(_) => "; ports not checked: a bootpool serving this state_dir has them",
            None => "",
        },
    };
    println!(
        "{}: ok ({} pools, {} images, {} client addresses{ports})",
        path.display(),
        c.pools.len(),
        c.images.len(),
        clients
    );
    ExitCode::SUCCESS
}

/// `bootpool reload`: exit 0 when the daemon applied the config, 2 when the config is bad as
/// read here, 1 when the daemon refused it or could not be asked.
fn reload(path: &std::path::Path) -> ExitCode {
    let config = match load_config(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // Checked here first, as `check --for-another-host` does: a bad config never disturbs the
    // daemon. What this host would refuse at bind the daemon checks itself, in its own network
    // namespace (the one `reload` runs in may be another).
    let missing = bootpool::app::unservable(&config, Host::Another);
    for e in &missing {
        eprintln!("error: {e}");
    }
    if !missing.is_empty() {
        return ExitCode::from(2);
    }
    match bootpool::app::ask_reload(&config) {
        Ok(status) => {
            println!(
                "{}: reloaded by bootpool (pid {}): generation {}, digest {}",
                path.display(),
                status.pid,
                status.generation,
                status.digest
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `bootpool client add`: exit 0 when the machine is enrolled (and the daemon, if one serves
/// this state_dir, reloaded), 2 when the config is bad or the MAC unreadable, 1 when the
/// enrolment is refused or the reload failed.
fn client_add(path: &std::path::Path, mac: &str, pool: String, name: Option<String>) -> ExitCode {
    let mac = match mac.parse() {
        Ok(mac) => mac,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(code) = load_config(path) {
        return code;
    }
    let enrolment = config::enrolments::Enrolment { mac, pool, name };
    let file = match config::enrolments::add(path, &enrolment) {
        Ok(file) => file,
        Err(e) => {
            eprintln!("error: {mac} not enrolled: {e}");
            return ExitCode::FAILURE;
        }
    };
    let named = enrolment
        .name
        .as_deref()
        .map(|n| format!(" as {n}"))
        .unwrap_or_default();
    println!(
        "{mac} enrolled in pool {}{named} ({})",
        enrolment.pool,
        file.display()
    );
    reload_after(path, &file, "it boots at its next try")
}

/// `bootpool client remove`: exit 0 when the machine is out of the enrolments file (and the
/// daemon, if one serves this state_dir, reloaded), 2 when the config is bad or the MAC
/// unreadable, 1 when it was not enrolled there or the reload failed.
fn client_remove(path: &std::path::Path, mac: &str) -> ExitCode {
    let mac = match mac.parse() {
        Ok(mac) => mac,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(code) = load_config(path) {
        return code;
    }
    let file = match config::enrolments::remove(path, mac) {
        Ok(file) => file,
        Err(e) => {
            eprintln!("error: {mac} not removed: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{mac} removed from {}", file.display());
    reload_after(path, &file, "it is refused at its next try")
}

/// After the enrolments `file` changed: the daemon serving the config at `path` reloaded, if
/// one runs (exit 0), and what that means for the machine (`then`).
fn reload_after(path: &std::path::Path, file: &std::path::Path, then: &str) -> ExitCode {
    let config = match load_config(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if bootpool::app::state_dir_holder(&config.server.state_dir).is_none() {
        println!(
            "no bootpool serves {} now: served so once one starts",
            config.server.state_dir.display()
        );
        return ExitCode::SUCCESS;
    }
    match bootpool::app::ask_reload(&config) {
        Ok(status) => {
            println!(
                "reloaded by bootpool (pid {}): generation {}; {then}",
                status.pid, status.generation
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "error: enrolled in {}, but not served yet: {e:#}",
                file.display()
            );
            ExitCode::FAILURE
        }
    }
}

/// An action asked of the running daemon's API (`bootpool next-boot`, `bootpool wake`): exit
/// 0 with `say`'s line for its answer, 2 when the config is bad, 1 when the daemon refused or
/// could not be asked.
fn api_action(
    path: &std::path::Path,
    route: &str,
    body: &serde_json::Value,
    say: impl Fn(&serde_json::Value) -> String,
) -> ExitCode {
    let config = match load_config(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match bootpool::service::api_client::post(&config, route, body) {
        Ok(answer) => {
            let answer = serde_json::from_str(&answer).unwrap_or(serde_json::Value::Null);
            println!("{}", say(&answer));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `bootpool client unknown`: the unknown machines as a table.
fn client_unknown(path: &std::path::Path) -> ExitCode {
    let config = match load_config(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let file = config
        .server
        .state_dir
        .join(bootpool::service::unknown::FILE);
    let listed: Vec<bootpool::service::unknown::Stranger> = match std::fs::read(&file) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(listed) => listed,
            Err(e) => {
                eprintln!("error: {}: {e}", file.display());
                return ExitCode::FAILURE;
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            eprintln!("error: {}: {e}", file.display());
            return ExitCode::FAILURE;
        }
    };
    print!(
        "{}",
        bootpool::record::report::unknown_table(&listed_rows(&config, listed))
    );
    ExitCode::SUCCESS
}

/// The unknown machines still unlisted, the one seen last first, as the report's rows.
fn listed_rows(
    config: &Config,
    mut listed: Vec<bootpool::service::unknown::Stranger>,
) -> Vec<bootpool::record::report::UnknownRow> {
    listed.retain(|s| config.listed(s.mac).is_none());
    listed.sort_by_key(|s| std::cmp::Reverse(s.last_seen));
    listed
        .into_iter()
        .map(|s| bootpool::record::report::UnknownRow {
            mac: s.mac,
            vendor_class: s.vendor_class,
            arch: s.arch,
            relay: s.relay.map(|r| r.to_string()),
            port: s.circuit_id,
            first_seen: s.first_seen,
            last_seen: s.last_seen,
            asked: s
                .asked
                .iter()
                .map(|a| format!("{a:?}").to_lowercase())
                .collect::<Vec<_>>()
                .join(","),
        })
        .collect()
}

/// `bootpool site`: the members of the site as its database has them.
fn site(path: &std::path::Path, json: bool) -> ExitCode {
    use bootpool::site::{db::Db, report::Report};
    let config = match load_config(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let config::Database::Postgres(url) = &config.server.database else {
        println!(
            "this server is alone: its records are in SQLite; servers form a site by sharing a              postgres:// server.database (docs/site.md)"
        );
        return ExitCode::SUCCESS;
    };
    match block_on(async { Db::open(url).await?.members().await }) {
        Ok(seen) => {
            let report = Report::of_rows(seen);
            match json {
                true => println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                ),
                false => print!("{}", report.text()),
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `bootpool site keepalived` and the others.
fn site_command(what: SiteCommand) -> ExitCode {
    use bootpool::site::{db::Db, keepalived};
    match what {
        SiteCommand::Takeover { config, address } => move_address(&config, address, "takeover"),
        SiteCommand::Release { config, address } => move_address(&config, address, "release"),
        SiteCommand::Keepalived {
            config: path,
            member,
            interface,
            advert,
            first_vrid,
            peers,
            source,
        } => {
            let config = match load_config(&path) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let config::Database::Postgres(url) = &config.server.database else {
                eprintln!(
                    "error: {}: a site needs a postgres:// server.database; a lone server has \
                     no addresses to move (docs/site.md)",
                    path.display()
                );
                return ExitCode::from(2);
            };
            let Some(interface) = interface.or_else(|| config.server.interfaces.first().cloned())
            else {
                eprintln!(
                    "error: say which interface the addresses go on: --interface, or \
                     server.interfaces in {}",
                    path.display()
                );
                return ExitCode::from(2);
            };
            let absolute = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
            let opts = keepalived::Options {
                interface,
                advert_s: advert,
                first_vrid,
                peers,
                source,
                program: std::env::current_exe()
                    .map(absolute)
                    .unwrap_or_else(|_| "bootpool".into())
                    .display()
                    .to_string(),
                config: absolute(path).display().to_string(),
            };
            let me = member.unwrap_or_else(bootpool::app::host_name);
            match block_on(async { Db::open(url).await?.members().await }) {
                Ok(seen) => {
                    let members: Vec<_> = seen.into_iter().map(|s| s.member).collect();
                    match keepalived::conf(&members, &me, &opts) {
                        Ok(text) => {
                            print!("{text}");
                            ExitCode::SUCCESS
                        }
                        Err(e) => {
                            eprintln!("error: {e}");
                            ExitCode::FAILURE
                        }
                    }
                }
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `bootpool site takeover` and `release`: the daemon told through its API. keepalived runs
/// them as the addresses move, the daemon perhaps still starting: a takeover's refused
/// connection is tried again for 10 s. A release is not (a daemon not running holds nothing),
/// so that keepalived's first word at its start, a backup's release, never arrives after the
/// takeover that follows it.
fn move_address(path: &std::path::Path, address: std::net::Ipv4Addr, what: &str) -> ExitCode {
    let config = match load_config(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let body = serde_json::json!({ "address": address });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match bootpool::service::api_client::post(&config, &format!("/api/v1/site/{what}"), &body) {
            Ok(answer) => {
                println!("{}", answer.trim_end());
                return ExitCode::SUCCESS;
            }
            Err(e)
                if what == "takeover"
                    && format!("{e:#}").contains("connecting to")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::FAILURE;
            }
        }
    }
}

fn load_config(path: &std::path::Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })
}

fn block_on<T>(fut: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(fut)
}

/// Prints the stored events (or egress samples) as JSON lines.
fn dump(path: &std::path::Path, egress: bool) -> ExitCode {
    let config = match load_config(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let server = &config.server;
    let lines = block_on(async {
        Ok::<_, anyhow::Error>(if egress {
            bootpool::record::load_egress(server)
                .await?
                .iter()
                .filter_map(|s| serde_json::to_string(s).ok())
                .collect::<Vec<_>>()
        } else {
            bootpool::record::load_events(server)
                .await?
                .iter()
                .filter_map(|e| serde_json::to_string(e).ok())
                .collect()
        })
    });
    match lines {
        Ok(lines) => {
            let mut out = std::io::stdout().lock();
            for line in lines {
                let _ = writeln!(out, "{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Where `--since WHEN` or `--last DURATION` starts the report, in Unix seconds.
fn since_of(since: Option<&str>, last: Option<&str>) -> Result<Option<i64>, String> {
    if let Some(when) = since {
        return bootpool::record::when::parse_local(when)
            .map(Some)
            .map_err(|e| format!("--since: {e}"));
    }
    let Some(last) = last else { return Ok(None) };
    let stretch = config::parse_duration(last).map_err(|e| format!("--last: {e}"))?;
    let now = bootpool::service::identity::unix_now();
    Ok(Some(
        i64::try_from(now.saturating_sub(stretch.as_secs())).unwrap_or(0),
    ))
}

fn report(
    path: &std::path::Path,
    query: &bootpool::record::report::Query,
    format: bootpool::record::report::Format,
    since: Option<i64>,
) -> ExitCode {
    let config = match load_config(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let people = bootpool::record::report::People::of(&config, since);
    let result = block_on(bootpool::record::load(&config.server)).and_then(|t| {
        let mut text = bootpool::record::report::render(&t, query, format, &people)?;
        // Under the waves: who runs an older image revision than the active one.
        if matches!(query, bootpool::record::report::Query::Waves)
            && matches!(format, bootpool::record::report::Format::Table)
        {
            use bootpool::image::usage;
            let now = bootpool::record::event::now_micros();
            let running = usage::running(&config, &t, now, None);
            for b in usage::behind(&running, &usage::active_revisions(&config)) {
                text.push_str(&b.sentence());
                text.push('\n');
            }
        }
        Ok(text)
    });
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

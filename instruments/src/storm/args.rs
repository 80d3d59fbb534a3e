//! `bootpool storm`'s arguments: the room's size and links, the trace, the server it runs.

use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct StormArgs {
    /// How many clients power on.
    #[arg(long, default_value_t = 40)]
    pub clients: usize,
    /// Boot the first pool whose root is served this way (and its trace by default).
    #[arg(long, value_enum, default_value_t = crate::lab::RootChoice::Nfs)]
    pub root: crate::lab::RootChoice,
    /// Boot this pool instead.
    #[arg(long)]
    pub pool: Option<String>,
    /// The config whose pools, MACs and addresses the room uses (and that `bootpool serve`
    /// runs, unless --server-cmd starts another server).
    #[arg(short, long, default_value = "pools.yaml")]
    pub config: PathBuf,
    /// The boot trace every client replays (default: bench/traces/demo-ROOT.trace; for an
    /// NBD pool whose image has `root_wire: zstd`, the boot recorded against that copy,
    /// bench/traces/demo-nbd-zstd.trace; for an NFS pool mounted `nocto`, as bootpool's are
    /// by default, bench/traces/demo-nfs-nocto.trace). The pool decides, whatever the server:
    /// a reference stack given the same options replays the same boot.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Each client's link rate (its switch port is shaped to it).
    #[arg(long, default_value = "100mbit", value_parser = super::room::parse_rate)]
    pub client_link: u64,
    /// The server's links, K x RATE: K veths, each with its own address (the config's
    /// server address, then the next ones) and its egress shaped to RATE. An ideal bond of
    /// the same capacity is `1 x (K*RATE)`.
    #[arg(long, default_value = "4x250mbit", value_parser = super::room::parse_links)]
    pub server_links: (usize, u64),
    /// Run K bootpool servers in the room, each a member of one site (`serve --member s1`,
    /// `s2`, ...) in a network namespace of its own with its own --server-links, all on one
    /// PostgreSQL the storm starts for the run (initdb in a temporary folder: needs Debian's
    /// `postgresql` installed). The clients broadcast as before and the site's own split
    /// (RFC 3074's hash over the live members) decides which member answers each; the report
    /// adds a row per server. The members lease from the one `dhcp.range`. With
    /// --server-cmd (K = 2): that command on each of the two servers instead, its DHCP a Kea
    /// HA pair the storm configures (needs Debian's `kea-dhcp4-server`; docs/failover.md).
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = parse_servers)]
    pub servers: usize,
    /// With --servers K (2 or more) and --server-links 1xRATE: each member's address is
    /// moved by keepalived (the file `bootpool site keepalived` writes; needs Debian's
    /// `keepalived`), and member s1 dies mid-boot: `kill` kills its bootpool and keepalived
    /// with -9, `linkdown` takes its links down first. A client whose boot fails boots again
    /// once (counted as restarted). The report adds the failure's row (docs/failover.md).
    /// With --server-cmd, the reference site's addresses are moved by keepalived with the
    /// same file without its notify lines, and every process of s1's host dies.
    #[arg(long, value_enum)]
    pub fail: Option<super::retry::Kind>,
    /// When --fail strikes, in seconds after power-on.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 10.0,
        requires = "fail"
    )]
    pub fail_at: f64,
    /// The K server links are one bond's, simulated: one address (the config's), and each
    /// client's frames leave by the link its MAC hashes onto (the kernel's `layer2` transmit
    /// hash), so a link's clients cannot use another's spare capacity.
    #[arg(long)]
    pub bond_hash: bool,
    /// Start each boot as a NIC's PXE ROM does, before the trace's first step: DHCP as the
    /// firmware (no iPXE user class), then the loader the answer names over TFTP; the trace's
    /// own (iPXE) DHCP follows. The shipped traces start in iPXE.
    #[arg(long)]
    pub tftp_loader: bool,
    /// A room behind an uplink, N@RATE (e.g. 14@1gbit): the last N clients sit on a switch of
    /// their own, joined to the server's by an uplink shaped to RATE each way (on the server's
    /// subnet, as every client is). The report shows what the uplink carried against RATE.
    #[arg(long, value_parser = super::uplink::parse)]
    pub uplink: Option<(usize, u64)>,
    /// Power the clients on over this many seconds (evenly) instead of all at once.
    #[arg(long, default_value_t = 0.0)]
    pub stagger: f64,
    /// Multiply the trace's think times (the client's own computing between answers) by this.
    #[arg(long, default_value_t = 1.0)]
    pub think_scale: f64,
    /// Start this shell command in the room instead of `bootpool serve` (e.g. the reference
    /// stack); it must serve the same image at the config's server address. With --servers 2,
    /// on each server's host, told its address, link and Kea config in its environment
    /// (bench/storm/reference.sh, `REFERENCE_*`).
    #[arg(long)]
    pub server_cmd: Option<String>,
    /// With --server-cmd: the TCP port that answers once the server is ready.
    #[arg(long, default_value_t = 111)]
    pub ready_port: u16,
    /// The server's HTTP port for boot files and the booted call (default: the config's).
    #[arg(long)]
    pub http_port: Option<u16>,
    /// Skip the booted call (servers without bootpool's API).
    #[arg(long)]
    pub no_callback: bool,
    /// A name for this run in the report (default: bootpool, or the server command).
    #[arg(long)]
    pub label: Option<String>,
    /// Write the report as JSON here (default: STATE_DIR/storm/UNIXSECONDS.json).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Read the NBD pool's root through the client agent AGENT (the static bootpool-agent)
    /// in every client's namespace, the agents sharing chunks with each other through the
    /// server's tracker: the storm runs bootpool on its config with that pool's `nbd: { via:
    /// agent, peers: true }` and `server.agent: AGENT` (written beside it as
    /// `.NAME.storm-swarm.yaml`), makes the root's block manifest if it is missing, and hands
    /// the tracker the trace as a kept one (the prefetch order). Each client starts its agent
    /// as the initrd would, on the boot script's `bootpool.blocks=` and `bootpool.peers=`, and
    /// replays its root's reads through it. The report adds the server's chunks sent against
    /// the one-copy floor, the chunks from peers and the agents' CPU time (docs/swarm.md).
    #[arg(long, value_name = "AGENT")]
    pub swarm: Option<PathBuf>,
    /// With --swarm: switch off this share of the room (0 to 0.5, clients spread evenly
    /// over it) mid-boot, each --swarm-cut-after seconds after its agent started: its agent
    /// killed with -9 and its switch port taken down (no FIN or reset leaves it: a PC whose
    /// power went). The other clients must boot from the rest of the room; the report counts
    /// the cut clients apart, neither booted nor failed (issue 48 part 3).
    #[arg(long, value_name = "SHARE", default_value_t = 0.0, value_parser = parse_share)]
    pub swarm_cut: f64,
    /// See --swarm-cut.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0)]
    pub swarm_cut_after: f64,
    /// With --swarm: this share of the room (0 to 0.5, spread evenly) sends at
    /// --swarm-slow-rate instead of --client-link (its own side of its port shaped lower: a
    /// PC on a slow or busy port), so its peers' fetches from it are slow.
    #[arg(long, value_name = "SHARE", default_value_t = 0.0, value_parser = parse_share)]
    pub swarm_slow: f64,
    /// See --swarm-slow.
    #[arg(long, value_name = "RATE", default_value = "10mbit", value_parser = super::room::parse_rate)]
    pub swarm_slow_rate: u64,
    /// With --swarm: this many clients (spread over the room, each one past a client
    /// --swarm-cut would pick) play a corrupting peer instead of booting: each tells the
    /// tracker it holds every chunk and answers every peer's request with wrong bytes. The
    /// others must refuse every such chunk by the manifest and boot with the image's bytes;
    /// the report counts the rogues apart and the requests they answered.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub swarm_corrupt: usize,
    /// With --swarm: the reference swarm instead of bootpool's agents. Each client reads the
    /// root through nbdkit's torrent plugin (libtorrent) on its 127.0.0.1 port, started where
    /// its agent would be; the storm makes a .torrent of the root image (256 KiB pieces, the
    /// agent's chunks), runs opentracker on the server's address and a seed (nbdkit torrent
    /// of the image, as user nobody) beside the server, and counts what the seed sent
    /// (nftables). DHCP, boot files and the boot script are bootpool's, as in --swarm.
    #[arg(long)]
    pub torrent: bool,
    /// With --swarm: udpcast instead of bootpool's agents, as FOG and Clonezilla send an
    /// image to a room. udp-sender (as user nobody, counted by nftables) waits beside the
    /// server for the whole room to join, then multicasts the root image once at 95% of
    /// --client-link; each client, when its root phase begins, runs udp-receiver into a file
    /// of its own and then nbdkit on it at its 127.0.0.1 port, so its first read waits for
    /// the whole image.
    #[arg(long)]
    pub multicast: bool,
    /// Give up on clients not booted after this many seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
}

/// `--swarm-cut`, `--swarm-slow`: a share of the room from 0 to 0.5.
fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=0.5).contains(&f) => Ok(f),
        _ => Err(format!(
            "`{s}`: a share of the room from 0 to 0.5 (0.1 for a tenth)"
        )),
    }
}

/// `--servers K`: 1 to 16.
fn parse_servers(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(k) if (1..=16).contains(&k) => Ok(k),
        _ => Err(format!("`{s}`: --servers takes 1 to 16")),
    }
}

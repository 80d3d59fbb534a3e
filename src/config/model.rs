//! The checked configuration: the domain types `Config::parse` builds from pools.yaml and
//! the rest of the daemon reads (servers, subnets, images, pools, clients, limits).

use super::arch::Arch;
use super::client_names::ClientName;
use super::cmdline;
use super::dhcp6::{BootOver, Dhcp6};
use super::error::ConfigError;
use super::locate::{self, Step};
use super::values::{Mac, MacRange, Subnet};
use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The whole checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from; relative paths in it are relative to its folder.
    pub file: PathBuf,
    pub server: Server,
    pub dhcp: Dhcp,
    /// DHCPv6, router advertisements and IPv6 listeners (`None`: IPv4 only).
    pub dhcp6: Option<Dhcp6>,
    pub images: BTreeMap<String, Arc<Image>>,
    pub pools: BTreeMap<String, Arc<Pool>>,
    pub limits: Limits,
    /// What the file says that is valid but unlikely to be meant (a range of millions of
    /// MACs, more machines than addresses): `bootpool check` prints them and exits 0, `serve`
    /// logs them.
    pub warnings: Vec<ConfigError>,
}

/// Bounds on what clients, and strangers, may hold of the server (the `limits` section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// HTTP connections open at once; more are closed at once (counted as refused).
    pub http_connections: usize,
    /// HTTP connections open at once from one address.
    pub http_per_client: usize,
    /// A request's headers must have arrived within this (slowloris).
    pub http_header_timeout: Duration,
    /// An HTTP connection that moves no byte either way for this long is closed.
    pub http_idle_timeout: Duration,
    /// NBD connections open at once.
    pub nbd_connections: usize,
    /// NBD connections open at once from one address.
    pub nbd_per_client: usize,
    /// An attached NBD connection idle this long gives its slot up when a new connection
    /// finds every slot taken (never otherwise: a booted client may leave its root alone).
    pub nbd_idle_timeout: Duration,
    /// A root connection (NFS or NBD) whose client answers nothing for this long (TCP keepalive
    /// probes, sent data) is ended and its boot seen gone (`nfs_lost`, `nbd_lost`).
    pub root_lost_after: Duration,
    /// A TFTP transfer ends this long after it started, whatever its options asked.
    pub tftp_lifetime: Duration,
    /// TFTP transfers at once from one client's address (a room behind a NAT arrives from
    /// one).
    pub tftp_per_client: usize,
    /// Source networks TFTP answers (default: every DHCP subnet); requests from elsewhere are
    /// dropped unanswered and counted as refused.
    pub tftp_clients: Vec<Subnet>,
    /// Bytes all copy-on-write overlays in memory may hold together; `None`: a quarter of
    /// the host's memory, read at start.
    pub cow_ram_total: Option<u64>,
    /// Bytes all copy-on-write overlays on disk may hold together; `None`: half the space
    /// free under `state_dir` at start.
    pub cow_disk_total: Option<u64>,
}

// Literals, not other constants: tests/it/dist.rs reads these defaults from this source to check
// the man page.
impl Default for Limits {
    fn default() -> Self {
        Limits {
            http_connections: 1024,
            http_per_client: 64,
            http_header_timeout: Duration::from_secs(10),
            http_idle_timeout: Duration::from_secs(60),
            nbd_connections: 1024,
            nbd_per_client: 16,
            nbd_idle_timeout: Duration::from_secs(600),
            root_lost_after: Duration::from_secs(120),
            tftp_lifetime: Duration::from_secs(600),
            tftp_per_client: 32,
            tftp_clients: Vec::new(),
            cow_ram_total: None,
            cow_disk_total: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Server {
    pub interfaces: Vec<String>,
    /// The server's address: its DHCP server identifier, and the one link when `links`
    /// names no others.
    pub address: Ipv4Addr,
    /// The addresses of the server's links on the clients' network, `address` first: each
    /// client is given one of them for its whole boot (`steer::choice`).
    pub links: Vec<Ipv4Addr>,
    /// The server's IPv6 address on the clients' network (`server.address6`): what DHCPv6
    /// clients are told to fetch from, over TFTP and HTTP. One link only.
    pub address6: Option<Ipv6Addr>,
    pub http: SocketAddr,
    pub state_dir: PathBuf,
    pub ports: Ports,
    /// Folder of network boot programs (undionly.kpxe, ipxe.efi, snponly.efi).
    pub loaders: PathBuf,
    /// The signed shim and network GRUB of the Secure Boot chain, served as `shimx64.efi`
    /// and `grubx64.efi` (the name shim asks for) to pools with `secure_boot`.
    pub shim: PathBuf,
    pub grub: PathBuf,
    /// The network GRUB ARM64 UEFI firmware gets as `grubaa64.efi` (Debian ships no arm64
    /// iPXE): Debian's `grubnetaa64.efi.signed`, which reads `boot::grub`'s config.
    pub grub_arm64: PathBuf,
    /// The folder memtest86+ is served from (`server.memtest`, Debian's `/boot`): the next
    /// boot `memtest` and the menu's entry, as `memtest86+x64.bin` (BIOS) and `.efi` (UEFI).
    pub memtest: PathBuf,
    /// The static `bootpool-agent` (`server.agent`) the addition carries, for the pools whose
    /// NBD root goes through it (`nbd: { via: agent }`); `None`: the addition carries none.
    pub agent: Option<PathBuf>,
    /// Whether TFTP is served at all (`server.tftp`, default true).
    pub tftp: bool,
    /// Where boot records are stored.
    pub database: Database,
    /// Boot events and egress samples older than this are deleted; `None` keeps everything.
    pub retention: Option<Duration>,
    /// Capacity in Mbit/s of links whose kernel speed is unknown (veths, taps, shaped links),
    /// by interface name; the kernel's speed wins where it has one.
    pub link_speeds: BTreeMap<String, u32>,
    /// The token the dashboard, the read API, the stream and /metrics take from anyone
    /// (`None`: only the server host and `admin_networks` read them). Boot files and the
    /// clients' own reports never need it.
    pub read_token: Option<String>,
    /// The token the API's actions need (`Authorization: Bearer`); `None`: they are off.
    pub admin_token: Option<String>,
    /// Who reads the dashboard, the read API, consoles and /metrics without the read token,
    /// besides the server host itself (`server.admin_networks`); an address of a client
    /// subnet never does (`service::http::readers`).
    pub admin_networks: Vec<Subnet>,
    /// /metrics answers anyone who reaches the HTTP port (`server.metrics_open`).
    pub metrics_open: bool,
    /// While a link of known capacity is full, its clients are paced to equal shares of it
    /// (`steer::pacing`).
    pub fair_share: bool,
    /// In a site, which members' links a boot may be placed on (`server.placement`).
    pub placement: SitePlacement,
    /// The HTTPS listener (`None`: plain HTTP only).
    pub tls: Option<Tls>,
    /// The enrolments file (`server.enrolments`, default `state_dir/enrolled.yaml`): clients
    /// added by `bootpool client add` and the API, by pool, read with the pools
    /// (`config::enrolments`).
    pub enrolments: PathBuf,
}

/// `server.placement`: where the member that answers a client's DHCP (its owner, by the
/// RFC 3074 hash) places its boot (docs/site.md, "Which server answers whom").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SitePlacement {
    /// Spread by the owner over every live member's links (`site`).
    #[default]
    Site,
    /// On the owner's own links only (`owner`).
    Owner,
}

/// `server.tls`: the same HTTP service over TLS on a port of its own, for the dashboard and
/// the API (firmware and iPXE keep plain HTTP on `server.http`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub listen: SocketAddr,
    /// PEM: the server's certificate, then the chain up to (not including) the root.
    pub cert: PathBuf,
    /// PEM: its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// The boot record store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// An SQLite file (`state_dir/records.db` unless a test says otherwise).
    Sqlite(PathBuf),
    /// A PostgreSQL server, by its `postgres://` URL (several servers can share one).
    Postgres(String),
}

/// Well-known ports, overridable for tests and unprivileged runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    pub dhcp: u16,
    /// DHCPv6 (547), bound only with a `dhcp6` section.
    pub dhcp6: u16,
    /// proxyDHCP's PXE boot server port (4011); bound in proxy mode only.
    pub pxe: u16,
    pub tftp: u16,
    pub nfs: u16,
    pub nbd: u16,
    pub portmap: u16,
    /// The clients' consoles over UDP: netconsole (and iPXE's syslog console when 514).
    pub console: u16,
}

// Literals, not the proto constants: tests/it/dist.rs reads these defaults from this source to
// check the man page (a config test holds them to `proto::nbd::PORT` and `proto::portmap::PORT`).
impl Default for Ports {
    fn default() -> Self {
        Ports {
            dhcp: 67,
            dhcp6: 547,
            pxe: 4011,
            tftp: 69,
            nfs: 2049,
            nbd: 10809,
            portmap: 111,
            console: 6666,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DhcpMode {
    /// Hands out addresses from `range` and reservations.
    Authoritative,
    /// Beside another DHCP server: PXE answers only.
    Proxy,
}

#[derive(Debug, Clone)]
pub struct Dhcp {
    pub mode: DhcpMode,
    /// The IPv4 subnets served (`dhcp.subnets`, or the one-subnet form's keys): none overlaps
    /// another. A request is answered from the one it came from (`boot::subnet`).
    pub subnets: Vec<DhcpSubnet>,
    /// The index in `subnets` of the server's own subnet, the one holding `server.address`.
    pub home: usize,
    /// `dhcp.relays`: the relays that may speak for other segments, by the address they send
    /// from (`None`: any relay may).
    pub relays: Option<Vec<Subnet>>,
    /// `dhcp.lease`, what a subnet without a `lease` of its own gives.
    pub lease: Duration,
}

impl Dhcp {
    /// The server's own subnet.
    pub fn home(&self) -> &DhcpSubnet {
        &self.subnets[self.home]
    }

    /// The configured subnet holding `ip`.
    pub fn subnet_of(&self, ip: Ipv4Addr) -> Option<&DhcpSubnet> {
        self.subnets.iter().find(|s| s.subnet.contains(ip))
    }
}

/// One IPv4 subnet of `dhcp`: what a client there is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DhcpSubnet {
    pub subnet: Subnet,
    /// Dynamic range, inclusive, inside `subnet`. Required in authoritative mode.
    pub range: Option<(Ipv4Addr, Ipv4Addr)>,
    /// The default router handed out, inside `subnet`.
    pub router: Option<Ipv4Addr>,
    pub dns: Vec<Ipv4Addr>,
    pub lease: Duration,
    /// `uplink`: the capacity in Mbit/s of the link between the subnet's room and the server
    /// (a switch's uplink), which the room's clients share whichever server link they use
    /// (docs/subnets.md); `None`: only the server's links bound them.
    pub uplink_mbps: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// Read through the page cache.
    Disk,
    /// Loaded into memory at start.
    Ram,
}

/// Where a copy-on-write export keeps each client's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CowStore {
    /// In memory: gone with the daemon.
    Ram,
    /// A sparse file per client under `state_dir/cow/`: survives a daemon restart.
    Disk,
}

/// Per-client copy-on-write over a read-only base image (NBD only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cow {
    pub store: CowStore,
    /// Bytes of writes one client may hold; past it, writes fail with ENOSPC.
    pub limit: u64,
}

/// `cow_limit` when `cow` is set without one.
pub const DEFAULT_COW_LIMIT: u64 = 512 << 20;

#[derive(Debug, Clone)]
pub struct Image {
    pub name: String,
    /// Absolute: holds the kernel, the initrd, the root tree and/or the root image.
    pub dir: PathBuf,
    /// The kernel and initrd as paths inside `dir` (`vmlinuz`, `initrd.img` by default): also
    /// the names they are served by, `/boot/NAME/KERNEL` over HTTP and `NAME/KERNEL` over TFTP.
    pub kernel_name: String,
    pub initrd_name: String,
    /// The NFS root tree and the NBD root image as paths inside `dir` (`rootfs`, `rootfs.img`).
    pub root_tree_name: String,
    pub root_image_name: String,
    /// The NFS export path clients mount (`/NAME` by default).
    pub nfs_export: String,
    /// The NBD export name clients attach (`NAME` by default).
    pub nbd_export: String,
    pub store: Store,
    /// `None`: the NBD export is read-only (the default).
    pub cow: Option<Cow>,
    /// NFS: AUTH_UNIX uid 0 and gid 0 are taken as nobody (65534), as knfsd's `root_squash`.
    /// Default false: a diskless root is read by the client's root, which must read the
    /// image's root-only files (docs/pools.yaml.5).
    pub root_squash: bool,
    /// NFS: only calls from source ports below 1024 (which only root may bind on a Unix
    /// client) are answered, as knfsd's `secure`. Default true.
    pub secure_ports: bool,
    /// How the initrd is sent: as the file is (the default), or with its gzip part
    /// recompressed with zstd (`image::wire`).
    pub initrd_wire: Wire,
    /// How the NBD root image is sent: as the file is (the default), or, for a squashfs
    /// image, as a copy recompressed with zstd that boots get under the export name
    /// `NAME~zstd` (`image::wire`).
    pub root_wire: Wire,
    /// The digest (hex) of the block manifest beside the root image, which a client's agent
    /// reads the root by (`nbd: { via: agent }`): filled in for a boot by
    /// `image::serve::for_boot` when the manifest is there, `None` in the config.
    pub blocks: Option<String>,
    /// `http://ADDR:PORT` of the site's other members that hold this root too, which the
    /// agent may read it from after the boot's own link (`site::root_sources`): filled in
    /// for a boot through the agent by the script's caller from the site's live view, empty
    /// in the config and without a site.
    pub blocks_elsewhere: Vec<String>,
}

/// `pools.NAME.nbd.via`: how the kernel's NBD client reaches the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NbdVia {
    /// It connects to the server's NBD port (the default).
    #[default]
    Server,
    /// It connects to the client agent that bootpool's addition starts on 127.0.0.1, which
    /// fetches checked chunks over HTTP from each server in turn (docs/swarm.md).
    Agent,
}

/// `images.NAME.initrd_wire` and `images.NAME.root_wire`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wire {
    #[default]
    AsIs,
    Zstd,
}

impl Image {
    pub fn kernel(&self) -> PathBuf {
        self.dir.join(&self.kernel_name)
    }
    pub fn initrd(&self) -> PathBuf {
        self.dir.join(&self.initrd_name)
    }
    /// The tree exported over NFS.
    pub fn root_tree(&self) -> PathBuf {
        self.dir.join(&self.root_tree_name)
    }
    /// The image file exported over NBD.
    pub fn root_image(&self) -> PathBuf {
        self.dir.join(&self.root_image_name)
    }
    /// The file name of the initrd as iPXE and the kernel's EFI stub know it (`initrd=`): the
    /// last part of its URL.
    pub fn initrd_file_name(&self) -> &str {
        self.initrd_name
            .rsplit('/')
            .next()
            .unwrap_or(&self.initrd_name)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootProto {
    Nfs,
    Nbd,
}

impl fmt::Display for RootProto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RootProto::Nfs => "nfs",
            RootProto::Nbd => "nbd",
        })
    }
}

/// Which initrd the pool's image has, so which syntax the kernel command line's root argument
/// follows and whether bootpool's overlay addition applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Initramfs {
    /// The demo's own initrd (images/build-demo.sh): dracut's syntax, and an overlay of its own.
    Bootpool,
    /// `root=nfs:SERVER:/PATH:OPTS`, `root=nbd:SERVER:PORT/EXPORT`
    Dracut,
    /// Debian's `nfsroot=`/`nbdroot=`
    InitramfsTools,
}

/// `pools.NAME.overlay`: the writable layer bootpool's addition (`export::addition`) lays over
/// a stock initrd's read-only root, handed to the client as a second initrd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlay {
    /// No addition: the root stays as the initrd mounts it.
    Off,
    /// Writes go to a tmpfs of this size (tmpfs's `size=`: `2g`, `512m`, `25%`; `None`: the
    /// kernel's default, half the memory).
    Tmpfs(Option<String>),
    /// Writes go to this local partition (a `/dev/` path), emptied of the last boot's at each.
    Disk(String),
}

/// `pools.NAME.homes`: the users' homes, an NFS export of the site's that bootpool's
/// addition has the client mount at /home (docs/homes.md); bootpool serves none itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Homes {
    /// The home server as mount.nfs takes it: a host name, an IPv4 address, or an IPv6 one
    /// in brackets.
    pub server: String,
    /// The exported folder, an absolute path.
    pub export: String,
    /// The mount options (`options`, default `rw,hard,nofail,_netdev`).
    pub options: String,
}

#[derive(Debug, Clone)]
pub struct Pool {
    pub name: String,
    pub image: Arc<Image>,
    pub root: RootProto,
    pub cmdline: String,
    /// The whole kernel command line with placeholders, written instead of bootpool's root
    /// argument, `bootpool.url=`, `cmdline` and `initrd=` (`None`: those).
    pub cmdline_template: Option<cmdline::Template>,
    pub initramfs: Initramfs,
    /// The writable layer over the root (`Overlay::Off` for the demo's initrd by default).
    pub overlay: Overlay,
    /// The users' homes the addition mounts at /home (`None`: the image's own /home).
    pub homes: Option<Homes>,
    /// How an NBD root reaches the client's kernel (`nbd.via`): straight from this server,
    /// or through the client agent in the initrd, from every member (`NbdVia::Agent`).
    pub nbd_via: NbdVia,
    /// The agents of the pool's clients fetch the root's chunks from each other, the server
    /// their tracker (`nbd.peers`, docs/swarm.md); off by default.
    pub nbd_peers: bool,
    /// Mount options of an NFS root after `ro` (`nfs_options`, default `nocto`): the root is
    /// an image nobody writes while it is mounted, so opening a file need not ask the server.
    pub nfs_options: String,
    pub clients: Vec<ClientEntry>,
    /// Keep a boot trace of each client's boots (`state_dir/traces/`, docs/trace.md).
    pub trace: bool,
    /// Whether the kernel sends its log to `server.ports.console` (`netconsole=`).
    pub netconsole: Netconsole,
    /// Its firmware enforces Secure Boot: x64 UEFI firmware gets the signed chain (shim,
    /// GRUB, `boot::grub`'s config) instead of iPXE.
    pub secure_boot: bool,
    /// What clients of a firmware family boot instead of `image` and `cmdline` (`arch`).
    pub arch: BTreeMap<Arch, Variant>,
    /// Which DHCP answers its firmware and iPXE with a boot file (`boot::plan`).
    pub boot_over: BootOver,
    /// `discover: true`: any client no pool lists is this pool's (`Config::member`), and is
    /// enrolled into it at its first request. One pool at most.
    pub discover: bool,
    /// `wake`: when its machines are woken (`boot::wake`, `service::wake`).
    pub wake: Option<super::wake::WakeSchedule>,
}

impl Pool {
    /// What firmware of option 93 code `code` boots instead of the pool's own, if anything.
    pub fn variant(&self, code: Option<u16>) -> Option<&Variant> {
        code.and_then(Arch::of_code).and_then(|a| self.arch.get(&a))
    }

    /// The image firmware of option 93 code `code` boots.
    pub fn image_for(&self, code: Option<u16>) -> &Arc<Image> {
        self.variant(code).map_or(&self.image, |v| &v.image)
    }

    /// Every image a machine of the pool boots, each once: the pool's, every
    /// per-architecture one, and its clients' own (`clients[].image`).
    pub fn images(&self) -> Vec<&Arc<Image>> {
        let mut all = vec![&self.image];
        let others = self.arch.values().map(|v| &v.image);
        for image in others.chain(self.clients.iter().filter_map(|e| e.image.as_ref())) {
            if !all.iter().any(|i| i.name == image.name) {
                all.push(image);
            }
        }
        all
    }
}

/// `pools.NAME.netconsole`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Netconsole {
    #[default]
    Off,
    /// On, from this interface of the client (`None`: the kernel's default, eth0).
    On(Option<String>),
}

#[derive(Debug, Clone)]
pub struct ClientEntry {
    pub macs: MacRange,
    /// Its machines' names: one machine's, or a pattern naming each MAC of `macs`.
    pub name: Option<ClientName>,
    pub ip: Option<Ipv4Addr>,
    /// Kernel arguments its machines get after the pool's (`cmdline`).
    pub cmdline: Option<String>,
    /// What its machines boot instead of the pool's image, and its `arch` ones (`image`).
    pub image: Option<Arc<Image>>,
    /// The revision of that image (its own, else the pool's) they boot instead of the active
    /// one: a canary, before the revision is activated for all (`revision`; a revision id,
    /// `names::is_id`).
    pub revision: Option<String>,
}

impl ClientEntry {
    /// The name of its machine `mac` (`None`: no name, or not one of its MACs).
    pub fn name_of(&self, mac: Mac) -> Option<String> {
        let name = self.name.as_ref()?;
        self.macs.index_of(mac).map(|i| name.nth(i))
    }
}

/// What pools.yaml says about one MAC.
#[derive(Debug, Clone)]
pub struct Member<'a> {
    /// The machine it is.
    pub mac: Mac,
    pub pool: &'a Arc<Pool>,
    pub entry: &'a ClientEntry,
    /// What its firmware family boots instead of the pool's own (`Member::on_arch`).
    pub variant: Option<&'a Variant>,
}

/// The enrolments file's name in `state_dir` when `server.enrolments` names none.
pub const ENROLMENTS_FILE: &str = "enrolled.yaml";

/// The entry a `discover` pool's unlisted clients are members by: every MAC, no name.
static DISCOVERED: ClientEntry = ClientEntry {
    macs: MacRange {
        first: Mac([0; 6]),
        last: Mac([0xff; 6]),
    },
    name: None,
    ip: None,
    cmdline: None,
    image: None,
    revision: None,
};

impl<'a> Member<'a> {
    /// A member of a `discover` pool that no pool lists (yet).
    pub fn discovered(&self) -> bool {
        std::ptr::eq(self.entry, &DISCOVERED)
    }

    /// The member as firmware of option 93 code `code` boots it: its pool's `arch` entry for
    /// that family, if it has one.
    pub fn on_arch(self, code: Option<u16>) -> Member<'a> {
        Member {
            variant: self.pool.variant(code),
            ..self
        }
    }

    /// Its name (`pools.NAME.clients[].name`, a pattern expanded for its MAC), if it has one.
    pub fn name(&self) -> Option<String> {
        self.entry.name_of(self.mac)
    }

    /// The image it boots: its entry's own, else its firmware family's, else its pool's.
    pub fn image(&self) -> &'a Arc<Image> {
        if let Some(own) = &self.entry.image {
            return own;
        }
        self.variant.map_or(&self.pool.image, |v| &v.image)
    }

    /// The revision of `image()` its entry pins it to (a canary), if any: `None` also when
    /// its firmware family boots another image than the one the revision is of.
    pub fn revision(&self) -> Option<&'a str> {
        let rev = self.entry.revision.as_deref()?;
        let of = self.entry.image.as_ref().unwrap_or(&self.pool.image);
        (self.image().name == of.name).then_some(rev)
    }

    /// Whether it may boot image `name`: its pool's, its family's, its entry's own.
    pub fn boots(&self, name: &str) -> bool {
        self.pool.image.name == name
            || self.pool.arch.values().any(|v| v.image.name == name)
            || self.entry.image.as_ref().is_some_and(|i| i.name == name)
    }

    /// Its kernel arguments of the pool's own (`cmdline`, or its family's), then its entry's.
    pub fn cmdline(&self) -> String {
        let pool = match self.variant.and_then(|v| v.cmdline.as_deref()) {
            Some(line) => line,
            None => &self.pool.cmdline,
        };
        match self.entry.cmdline.as_deref() {
            Some(own) if pool.is_empty() => own.to_string(),
            Some(own) => format!("{pool} {own}"),
            None => pool.to_string(),
        }
    }
}

impl Config {
    /// The pool and entry that list this MAC, if any; else the `discover` pool's, if one says
    /// it (`Member::discovered`).
    pub fn member(&self, mac: Mac) -> Option<Member<'_>> {
        self.listed(mac).or_else(|| {
            let pool = self.pools.values().find(|p| p.discover)?;
            Some(Member {
                mac,
                pool,
                entry: &DISCOVERED,
                variant: None,
            })
        })
    }

    /// The pool and entry that list this MAC (pools.yaml or the enrolments file), if any.
    pub fn listed(&self, mac: Mac) -> Option<Member<'_>> {
        self.pools.values().find_map(|pool| {
            pool.clients
                .iter()
                .find(|e| e.macs.contains(mac))
                .map(|entry| Member {
                    mac,
                    pool,
                    entry,
                    variant: None,
                })
        })
    }

    /// An error about the value at the YAML path `keys` (e.g. `["images", "demo", "kernel"]`),
    /// found after the config was read: its line and column are looked up in the file again
    /// (the deepest key the file has, when it leaves the rest to their defaults).
    pub fn error_at(&self, keys: &[&str], reason: String) -> ConfigError {
        let steps: Vec<Step> = keys.iter().map(|k| Step::Key(k)).collect();
        let loc = std::fs::read_to_string(&self.file)
            .ok()
            .and_then(|text| locate::locate(&text, &steps));
        ConfigError {
            file: self.file.clone(),
            line: loc.map(|l| l.0),
            column: loc.map(|l| l.1),
            path: keys.join("."),
            reason,
        }
    }

    /// An error about key `key` of entry `index` of pool `pool`'s `clients`, located as
    /// `error_at` locates one.
    pub fn error_at_entry(
        &self,
        pool: &str,
        index: usize,
        key: &str,
        reason: String,
    ) -> ConfigError {
        let steps = [
            Step::Key("pools"),
            Step::Key(pool),
            Step::Key("clients"),
            Step::Index(index),
            Step::Key(key),
        ];
        let loc = std::fs::read_to_string(&self.file)
            .ok()
            .and_then(|text| locate::locate(&text, &steps));
        ConfigError {
            file: self.file.clone(),
            line: loc.map(|l| l.0),
            column: loc.map(|l| l.1),
            path: format!("pools.{pool}.clients[{index}].{key}"),
            reason,
        }
    }

    /// The loaders and certificates the config's `server` keys name that are not files;
    /// `image::serve::missing_files` tells the images' own (`bootpool check` reports both).
    pub fn missing_files(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        if self
            .pools
            .values()
            .any(|p| p.arch.contains_key(&Arch::Arm64))
            && !self.server.grub_arm64.is_file()
        {
            errors.push(self.error_at(
                &["server", "grub_arm64"],
                format!(
                    "{} is not a file; a pool with arch.arm64 needs it (images/build-arm64.sh \
                     unpacks Debian's grub-efi-arm64-signed beside the ARM64 demo image)",
                    self.server.grub_arm64.display()
                ),
            ));
        }
        if self.pools.values().any(|p| p.secure_boot) {
            for (key, path, package) in [
                ("shim", &self.server.shim, "shim-signed"),
                ("grub", &self.server.grub, "grub-efi-amd64-signed"),
            ] {
                if !path.is_file() {
                    errors.push(self.error_at(
                        &["server", key],
                        format!(
                            "{} is not a file; a pool with secure_boot needs it (Debian: apt-get install {package})",
                            path.display()
                        ),
                    ));
                }
            }
        }
        if let Some(tls) = &self.server.tls {
            for (key, path) in [("cert", &tls.cert), ("key", &tls.key)] {
                if !path.is_file() {
                    errors.push(self.error_at(
                        &["server", "tls", key],
                        format!("{} is not a file", path.display()),
                    ));
                }
            }
        }
        errors
    }
}

/// `pools.NAME.arch.ARCH`: what clients of that family boot instead of the pool's own.
#[derive(Debug, Clone)]
pub struct Variant {
    /// Their kernel, initrd and root (an image of `images`).
    pub image: Arc<Image>,
    /// Their `cmdline` (`None`: the pool's), e.g. another serial console.
    pub cmdline: Option<String>,
}

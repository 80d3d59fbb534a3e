//! pools.yaml -> checked domain types. Nobody else sees raw YAML. Every error names the file,
//! the line and column, the YAML path and the reason.
//!
//! Beyond each value's own syntax, what would misbehave at serve time is refused here: a
//! server address outside `dhcp.subnet`, a range or fixed `ip` holding the network, broadcast
//! or server address, two services on one port, and pool or image names that are not plain
//! (`[A-Za-z0-9._-]`, not starting with `.` or `-`: they become paths and URLs).

pub mod arch;
pub mod cmdline;
mod dhcp6;
mod locate;
mod raw;
mod values;

pub use arch::Arch;
pub use dhcp6::{BootOver, Dhcp6, RouterAdverts, Subnet6};
pub use values::{Mac, MacRange, Subnet, parse_duration, parse_rate_mbps, parse_size};

use locate::Step;
use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A configuration error, located in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// The YAML path of the offending key, e.g. `pools.room-101.image`.
    pub path: String,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        if self.path.is_empty() {
            write!(f, ": {}", self.reason)
        } else {
            write!(f, ": {}: {}", self.path, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}

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
    /// Source networks TFTP answers (default: `dhcp.subnet`); requests from elsewhere are
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
    /// client is given one of them for its whole boot (`boot::links`).
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
    /// Whether TFTP is served at all (`server.tftp`, default true).
    pub tftp: bool,
    /// Where boot records are stored.
    pub database: Database,
    /// Boot events and egress samples older than this are deleted; `None` keeps everything.
    pub retention: Option<Duration>,
    /// Capacity in Mbit/s of links whose kernel speed is unknown (veths, taps, shaped links),
    /// by interface name; the kernel's speed wins where it has one.
    pub link_speeds: BTreeMap<String, u32>,
    /// The token the dashboard, the read API, the stream and /metrics need (`None`: open to
    /// anyone who reaches the HTTP port). Boot files and the clients' own reports never do.
    pub read_token: Option<String>,
    /// The token the API's actions need (`Authorization: Bearer`); `None`: they are off.
    pub admin_token: Option<String>,
    /// While a link of known capacity is full, its clients are paced to equal shares of it
    /// (`service::pacing`).
    pub fair_share: bool,
    /// The HTTPS listener (`None`: plain HTTP only).
    pub tls: Option<Tls>,
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
    pub subnet: Subnet,
    /// Dynamic range, inclusive. Required in authoritative mode.
    pub range: Option<(Ipv4Addr, Ipv4Addr)>,
    pub router: Option<Ipv4Addr>,
    pub dns: Vec<Ipv4Addr>,
    pub lease: Duration,
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

/// Which initramfs syntax the kernel command line's root argument follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Initramfs {
    /// `root=nfs:SERVER:/PATH:OPTS`, `root=nbd:SERVER:PORT/EXPORT`
    Dracut,
    /// Debian's `nfsroot=`/`nbdroot=`
    InitramfsTools,
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
    pub clients: Vec<ClientEntry>,
    /// Keep a boot trace of each client's boots (`state_dir/traces/`, docs/trace.md).
    pub trace: bool,
    /// Whether the kernel sends its log to `server.ports.console` (`netconsole=`).
    pub netconsole: Netconsole,
    /// Its firmware enforces Secure Boot: x64 UEFI firmware gets the signed chain (shim,
    /// GRUB, `boot::grub`'s config) instead of iPXE.
    pub secure_boot: bool,
    /// What clients of a firmware family boot instead of `image` and `cmdline` (`arch`).
    pub arch: BTreeMap<Arch, arch::Variant>,
    /// Which DHCP answers its firmware and iPXE with a boot file (`boot::plan`).
    pub boot_over: BootOver,
}

impl Pool {
    /// What firmware of option 93 code `code` boots instead of the pool's own, if anything.
    pub fn variant(&self, code: Option<u16>) -> Option<&arch::Variant> {
        code.and_then(Arch::of_code).and_then(|a| self.arch.get(&a))
    }

    /// The image firmware of option 93 code `code` boots.
    pub fn image_for(&self, code: Option<u16>) -> &Arc<Image> {
        self.variant(code).map_or(&self.image, |v| &v.image)
    }

    /// The pool's image and every per-architecture one, each once.
    pub fn images(&self) -> Vec<&Arc<Image>> {
        let mut all = vec![&self.image];
        for v in self.arch.values() {
            if !all.iter().any(|i| i.name == v.image.name) {
                all.push(&v.image);
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientEntry {
    pub macs: MacRange,
    pub name: Option<String>,
    pub ip: Option<Ipv4Addr>,
}

/// What pools.yaml says about one MAC.
#[derive(Debug, Clone)]
pub struct Member<'a> {
    pub pool: &'a Arc<Pool>,
    pub entry: &'a ClientEntry,
    /// What its firmware family boots instead of the pool's own (`Member::on_arch`).
    pub variant: Option<&'a arch::Variant>,
}

impl<'a> Member<'a> {
    /// The member as firmware of option 93 code `code` boots it: its pool's `arch` entry for
    /// that family, if it has one.
    pub fn on_arch(self, code: Option<u16>) -> Member<'a> {
        Member {
            variant: self.pool.variant(code),
            ..self
        }
    }

    /// The image it boots.
    pub fn image(&self) -> &'a Arc<Image> {
        self.variant.map_or(&self.pool.image, |v| &v.image)
    }

    /// Its kernel arguments of the pool's own (`cmdline`).
    pub fn cmdline(&self) -> &'a str {
        match self.variant.and_then(|v| v.cmdline.as_deref()) {
            Some(line) => line,
            None => &self.pool.cmdline,
        }
    }
}

impl Config {
    /// Reads and checks a config file. Paths inside are resolved against the file's folder.
    pub fn load(file: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|e| ConfigError {
            file: file.to_path_buf(),
            line: None,
            column: None,
            path: String::new(),
            reason: format!("cannot read: {e}"),
        })?;
        Config::parse(file, &text)
    }

    /// Checks config text as if it were read from `file`.
    pub fn parse(file: &Path, text: &str) -> Result<Config, ConfigError> {
        let raw: raw::File = serde_norway::from_str(text).map_err(|e| {
            let loc = e.location();
            // serde_norway puts the YAML path first: "pools.room-101: unknown field ...".
            let msg = e.to_string();
            let msg = match msg.rfind(" at line ") {
                Some(i) => msg[..i].to_string(),
                None => msg,
            };
            let (path, reason) = match msg.split_once(": ") {
                Some((p, r)) if !p.contains(' ') => (p.to_string(), r.to_string()),
                _ => (String::new(), msg.clone()),
            };
            ConfigError {
                file: file.to_path_buf(),
                line: loc.as_ref().map(|l| l.line()),
                column: loc.as_ref().map(|l| l.column()),
                path,
                reason,
            }
        })?;
        let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
        Checker {
            file,
            text,
            base: &base,
        }
        .check(raw)
    }

    /// The pool and entry that list this MAC, if any.
    pub fn member(&self, mac: Mac) -> Option<Member<'_>> {
        self.pools.values().find_map(|pool| {
            pool.clients
                .iter()
                .find(|e| e.macs.contains(mac))
                .map(|entry| Member {
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

    /// Files the shipped config needs at serve time; `bootpool check` reports them all.
    pub fn missing_files(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        for (name, pool) in &self.pools {
            for image in pool.images() {
                // An image with revisions: the active one's files.
                let image = &crate::image::serve::serving(image);
                let mut need = vec![image.kernel(), image.initrd()];
                need.push(match pool.root {
                    RootProto::Nfs => image.root_tree(),
                    RootProto::Nbd => image.root_image(),
                });
                for path in need {
                    if !path.exists() {
                        errors.push(ConfigError {
                        file: self.file.clone(),
                        line: None,
                        column: None,
                        path: format!("pools.{name}.image"),
                        reason: format!(
                            "image `{}` lacks {} (build it: images/build-demo.sh; or import one: bootpool image import {})",
                            image.name,
                            path.display(),
                            image.name
                        ),
                    });
                    }
                }
            }
        }
        if self
            .pools
            .values()
            .any(|p| p.arch.contains_key(&Arch::Arm64))
            && !self.server.grub_arm64.is_file()
        {
            errors.push(ConfigError {
                file: self.file.clone(),
                line: None,
                column: None,
                path: "server.grub_arm64".into(),
                reason: format!(
                    "{} is not a file; a pool with arch.arm64 needs it (images/build-arm64.sh \
                     unpacks Debian's grub-efi-arm64-signed beside the ARM64 demo image)",
                    self.server.grub_arm64.display()
                ),
            });
        }
        if self.pools.values().any(|p| p.secure_boot) {
            for (key, path, package) in [
                ("shim", &self.server.shim, "shim-signed"),
                ("grub", &self.server.grub, "grub-efi-amd64-signed"),
            ] {
                if !path.is_file() {
                    errors.push(ConfigError {
                        file: self.file.clone(),
                        line: None,
                        column: None,
                        path: format!("server.{key}"),
                        reason: format!(
                            "{} is not a file; a pool with secure_boot needs it (Debian: apt-get install {package})",
                            path.display()
                        ),
                    });
                }
            }
        }
        if let Some(tls) = &self.server.tls {
            for (key, path) in [("cert", &tls.cert), ("key", &tls.key)] {
                if !path.is_file() {
                    errors.push(ConfigError {
                        file: self.file.clone(),
                        line: None,
                        column: None,
                        path: format!("server.tls.{key}"),
                        reason: format!("{} is not a file", path.display()),
                    });
                }
            }
        }
        errors
    }
}

/// Turns raw YAML values into checked types, remembering where each came from.
struct Checker<'a> {
    file: &'a Path,
    text: &'a str,
    base: &'a Path,
}

impl Checker<'_> {
    fn err(&self, path: &[Step], reason: impl Into<String>) -> ConfigError {
        let loc = locate::locate(self.text, path);
        let mut shown = String::new();
        for step in path {
            match step {
                Step::Key(k) if shown.is_empty() => shown.push_str(k),
                Step::Key(k) => {
                    shown.push('.');
                    shown.push_str(k)
                }
                Step::Index(i) => shown.push_str(&format!("[{i}]")),
            }
        }
        ConfigError {
            file: self.file.to_path_buf(),
            line: loc.map(|l| l.0),
            column: loc.map(|l| l.1),
            path: shown,
            reason: reason.into(),
        }
    }

    fn ip(&self, path: &[Step], s: &str) -> Result<Ipv4Addr, ConfigError> {
        s.trim()
            .parse()
            .map_err(|_| self.err(path, format!("`{s}` is not an IPv4 address")))
    }

    fn path(&self, s: &str) -> PathBuf {
        let p = Path::new(s);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base.join(p)
        }
    }

    fn check(&self, raw: raw::File) -> Result<Config, ConfigError> {
        use Step::Key;
        let s = &raw.server;
        let address = self.ip(&[Key("server"), Key("address")], &s.address)?;
        let mut links = vec![address];
        for (i, text) in s.links.iter().flatten().enumerate() {
            let ip = self.ip(&[Key("server"), Key("links"), Step::Index(i)], text)?;
            if !links.contains(&ip) {
                links.push(ip);
            } else if ip != address {
                return Err(self.err(
                    &[Key("server"), Key("links"), Step::Index(i)],
                    format!("{ip} is listed twice"),
                ));
            }
        }
        let http: SocketAddr = s.http.parse().map_err(|_| {
            self.err(
                &[Key("server"), Key("http")],
                format!("`{}` is not an address:port", s.http),
            )
        })?;
        let d = Ports::default();
        let ports = Ports {
            dhcp: s.ports.dhcp.unwrap_or(d.dhcp),
            dhcp6: s.ports.dhcp6.unwrap_or(d.dhcp6),
            pxe: s.ports.pxe.unwrap_or(d.pxe),
            tftp: s.ports.tftp.unwrap_or(d.tftp),
            nfs: s.ports.nfs.unwrap_or(d.nfs),
            nbd: s.ports.nbd.unwrap_or(d.nbd),
            portmap: s.ports.portmap.unwrap_or(d.portmap),
            console: s.ports.console.unwrap_or(d.console),
        };
        let state_dir = self.path(&s.state_dir);
        let database = match s.database.as_deref().map(str::trim) {
            None => Database::Sqlite(state_dir.join("records.db")),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Database::Postgres(url.to_string())
            }
            Some(other) => {
                return Err(self.err(
                    &[Key("server"), Key("database")],
                    format!(
                        "`{other}` is not a postgres:// URL (leave the key out for SQLite in state_dir)"
                    ),
                ));
            }
        };
        let retention = match s.retention.trim() {
            "forever" | "0" => None,
            text => Some(parse_duration(text).map_err(|e| {
                self.err(
                    &[Key("server"), Key("retention")],
                    format!("{e}, or `forever`"),
                )
            })?),
        };
        let mut link_speeds = BTreeMap::new();
        for (name, rate) in &s.link_speeds {
            let at = [Key("server"), Key("link_speeds"), Key(name.as_str())];
            if !is_ifname(name) {
                return Err(self.err(
                    &at,
                    format!("`{name}` is not an interface name (1 to 15 characters, no `/`, `:` or spaces)"),
                ));
            }
            let mbps = match rate {
                raw::Rate::Text(text) => parse_rate_mbps(text),
                raw::Rate::Mbps(n) => parse_rate_mbps(&n.to_string()),
            }
            .map_err(|e| self.err(&at, e))?;
            link_speeds.insert(name.clone(), mbps);
        }
        let token = |key: &'static str, given: &Option<String>| {
            match given.as_deref() {
            None => Ok(None),
            Some(t) if t.len() >= 16 && t.bytes().all(|b| b.is_ascii_graphic()) => {
                Ok(Some(t.to_string()))
            }
            Some(_) => Err(self.err(
                &[Key("server"), Key(key)],
                "a token must be at least 16 printable characters without spaces (e.g. `openssl rand -hex 16`)",
            )),
        }
        };
        let read_token = token("read_token", &s.read_token)?;
        let admin_token = token("admin_token", &s.admin_token)?;
        if admin_token.is_some() && admin_token == read_token {
            return Err(self.err(
                &[Key("server"), Key("admin_token")],
                "must differ from server.read_token (whoever may read must not thereby act)",
            ));
        }
        let tls = match &s.tls {
            None => None,
            Some(t) => Some(Tls {
                listen: t.listen.parse().map_err(|_| {
                    self.err(
                        &[Key("server"), Key("tls"), Key("listen")],
                        format!("`{}` is not an address:port", t.listen),
                    )
                })?,
                cert: self.path(&t.cert),
                key: self.path(&t.key),
            }),
        };
        let dhcp_lease = parse_duration(&raw.dhcp.lease)
            .map_err(|e| self.err(&[Key("dhcp"), Key("lease")], e))?;
        let (address6, dhcp6) =
            self.check_dhcp6(s.address6.as_deref(), raw.dhcp6.as_ref(), dhcp_lease)?;
        if let Some(d) = &dhcp6
            && d.router_advertisements == RouterAdverts::Send
            && s.interfaces.is_empty()
        {
            return Err(self.err(
                &[Key("dhcp6"), Key("router_advertisements")],
                "`send` needs server.interfaces: router advertisements go out of a named interface",
            ));
        }
        let server = Server {
            interfaces: s.interfaces.clone(),
            address,
            links,
            address6,
            http,
            state_dir,
            ports,
            loaders: self.path(&s.loaders),
            shim: self.path(&s.shim),
            grub: self.path(&s.grub),
            grub_arm64: self.path(&s.grub_arm64),
            tftp: s.tftp.unwrap_or(true),
            database,
            retention,
            link_speeds,
            read_token,
            admin_token,
            fair_share: s.fair_share.unwrap_or(true),
            tls,
        };

        let dhcp = self.check_dhcp(&raw.dhcp, &server.links)?;
        for (i, ip) in server.links.iter().enumerate() {
            if !dhcp.subnet.contains(*ip) {
                let at = match s
                    .links
                    .iter()
                    .flatten()
                    .position(|t| t.trim() == ip.to_string())
                {
                    Some(j) if i > 0 => vec![Key("server"), Key("links"), Step::Index(j)],
                    _ => vec![Key("server"), Key("address")],
                };
                return Err(self.err(&at, format!("{ip} is outside dhcp.subnet {}", dhcp.subnet)));
            }
        }
        self.check_ports(s, &server, dhcp.mode)?;

        let mut images = BTreeMap::new();
        for (name, img) in &raw.images {
            let at = |k| [Key("images"), Key(name.as_str()), Key(k)];
            let store = match img.store.as_str() {
                "disk" => Store::Disk,
                "ram" => Store::Ram,
                other => {
                    return Err(self.err(&at("store"), format!("`{other}` is not `disk` or `ram`")));
                }
            };
            if !is_name(name) {
                return Err(self.err(
                    &[Key("images"), Key(name)],
                    format!("`{name}` is not a plain name ({NAME_RULE})"),
                ));
            }
            let cow_store = match img.cow.as_deref() {
                None => None,
                Some("ram") => Some(CowStore::Ram),
                Some("disk") => Some(CowStore::Disk),
                Some(other) => {
                    return Err(self.err(&at("cow"), format!("`{other}` is not `ram` or `disk`")));
                }
            };
            let limit = match &img.cow_limit {
                None => DEFAULT_COW_LIMIT,
                Some(_) if cow_store.is_none() => {
                    return Err(self.err(&at("cow_limit"), "needs `cow: ram` or `cow: disk`"));
                }
                Some(s) => match parse_size(s) {
                    Ok(0) => return Err(self.err(&at("cow_limit"), "must be more than zero")),
                    Ok(n) => n,
                    Err(e) => return Err(self.err(&at("cow_limit"), e)),
                },
            };
            let dir = self.path(&img.dir);
            let mut files = Vec::new();
            for (key, value) in [
                ("kernel", &img.kernel),
                ("initrd", &img.initrd),
                ("root_tree", &img.root_tree),
                ("root_image", &img.root_image),
            ] {
                if let Err(why) = inside_path(value) {
                    return Err(self.err(&at(key), format!("`{value}` {why}")));
                }
                if let Some((other, _)) = files.iter().find(|(_, v)| *v == value) {
                    return Err(self.err(
                        &at(key),
                        format!("`{value}` is already the image's {other}"),
                    ));
                }
                files.push((key, value));
            }
            let nfs_export = match &img.nfs_export {
                None => format!("/{name}"),
                Some(path) => {
                    nfs_export_path(path)
                        .map_err(|why| self.err(&at("nfs_export"), format!("`{path}` {why}")))?;
                    path.clone()
                }
            };
            let nbd_export = match &img.nbd_export {
                None => name.clone(),
                Some(export) if is_name(export) => export.clone(),
                Some(export) => {
                    return Err(self.err(
                        &at("nbd_export"),
                        format!("`{export}` is not a plain name ({NAME_RULE})"),
                    ));
                }
            };
            // Where an export clash is shown: the key when the file sets it, else the image.
            let written = |key: &'static str, set: bool| {
                if set {
                    at(key).to_vec()
                } else {
                    vec![Key("images"), Key(name.as_str())]
                }
            };
            for other in images.values() {
                let other: &Arc<Image> = other;
                if nested(&other.nfs_export, &nfs_export) {
                    return Err(self.err(
                        &written("nfs_export", img.nfs_export.is_some()),
                        format!(
                            "NFS export {nfs_export} overlaps image `{}`'s {}: a mount path must name one image",
                            other.name, other.nfs_export
                        ),
                    ));
                }
                if other.nbd_export == nbd_export {
                    return Err(self.err(
                        &written("nbd_export", img.nbd_export.is_some()),
                        format!("NBD export `{nbd_export}` is also image `{}`'s", other.name),
                    ));
                }
            }
            images.insert(
                name.clone(),
                Arc::new(Image {
                    name: name.clone(),
                    dir,
                    kernel_name: img.kernel.clone(),
                    initrd_name: img.initrd.clone(),
                    root_tree_name: img.root_tree.clone(),
                    root_image_name: img.root_image.clone(),
                    nfs_export,
                    nbd_export,
                    store,
                    cow: cow_store.map(|store| Cow { store, limit }),
                    root_squash: img.root_squash.unwrap_or(false),
                    secure_ports: img.secure_ports.unwrap_or(true),
                }),
            );
        }

        let mut pools = BTreeMap::new();
        let mut seen_macs: Vec<(MacRange, String)> = Vec::new();
        let mut seen_ips: Vec<(Ipv4Addr, String)> = Vec::new();
        for (name, p) in &raw.pools {
            let at = |k| [Key("pools"), Key(name.as_str()), Key(k)];
            if !is_name(name) {
                return Err(self.err(
                    &[Key("pools"), Key(name)],
                    format!("`{name}` is not a plain name ({NAME_RULE})"),
                ));
            }
            let image = images.get(&p.image).cloned().ok_or_else(|| {
                let known: Vec<&str> = images.keys().map(String::as_str).collect();
                self.err(
                    &at("image"),
                    format!("no image `{}` (images: {})", p.image, known.join(", ")),
                )
            })?;
            let root = match p.root.as_str() {
                "nfs" => RootProto::Nfs,
                "nbd" => RootProto::Nbd,
                other => {
                    return Err(self.err(&at("root"), format!("`{other}` is not `nfs` or `nbd`")));
                }
            };
            let initramfs = match p.initramfs.as_str() {
                "dracut" => Initramfs::Dracut,
                "initramfs-tools" => Initramfs::InitramfsTools,
                other => {
                    return Err(self.err(
                        &at("initramfs"),
                        format!("`{other}` is not `dracut` or `initramfs-tools`"),
                    ));
                }
            };
            // klibc's nfsmount cannot be given the MOUNT port: it asks port 111, always.
            if root == RootProto::Nfs
                && initramfs == Initramfs::InitramfsTools
                && server.ports.portmap != crate::proto::portmap::PORT
            {
                return Err(self.err(
                    &at("initramfs"),
                    format!(
                        "initramfs-tools mounts an NFS root through the portmapper on port 111, \
                         but server.ports.portmap is {}",
                        server.ports.portmap
                    ),
                ));
            }
            let cmdline_template = match &p.cmdline_template {
                None => None,
                Some(text) => {
                    let t = cmdline::Template::parse(text)
                        .map_err(|why| self.err(&at("cmdline_template"), why))?;
                    if !p.cmdline.trim().is_empty() && !t.uses(cmdline::Field::Cmdline) {
                        return Err(self.err(
                            &at("cmdline"),
                            "is not used: the pool's cmdline_template does not say {cmdline}",
                        ));
                    }
                    Some(t)
                }
            };
            let netconsole = match &p.netconsole {
                None | Some(raw::Netconsole::On(false)) => Netconsole::Off,
                Some(raw::Netconsole::On(true)) => Netconsole::On(None),
                Some(raw::Netconsole::Device(dev)) => {
                    let ok = !dev.is_empty()
                        && dev.len() <= 15
                        && dev
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
                    if !ok {
                        return Err(self.err(
                            &at("netconsole"),
                            format!(
                                "`{dev}` is not an interface name: give true, false or the \
                                 client's interface (up to 15 letters, digits, `.`, `_`, `-`)"
                            ),
                        ));
                    }
                    Netconsole::On(Some(dev.clone()))
                }
            };
            let mut clients = Vec::new();
            for (i, c) in p.clients.iter().enumerate() {
                let at_c = |k| {
                    [
                        Key("pools"),
                        Key(name.as_str()),
                        Key("clients"),
                        Step::Index(i),
                        Key(k),
                    ]
                };
                let macs = match (&c.mac, &c.macs) {
                    (Some(m), None) => {
                        let mac: Mac = m.parse().map_err(|e| self.err(&at_c("mac"), e))?;
                        MacRange::single(mac)
                    }
                    (None, Some(r)) => r.parse().map_err(|e| self.err(&at_c("macs"), e))?,
                    _ => {
                        let item = [
                            Key("pools"),
                            Key(name.as_str()),
                            Key("clients"),
                            Step::Index(i),
                        ];
                        return Err(self.err(&item, "give exactly one of `mac` or `macs`"));
                    }
                };
                let key = if c.mac.is_some() { "mac" } else { "macs" };
                if let Some((_, other)) = seen_macs.iter().find(|(r, _)| r.overlaps(&macs)) {
                    return Err(
                        self.err(&at_c(key), format!("{macs} is already listed in {other}"))
                    );
                }
                seen_macs.push((macs, format!("pools.{name}.clients[{i}]")));
                let ip = match &c.ip {
                    None => None,
                    Some(s) => {
                        if macs.len() != 1 {
                            return Err(self.err(&at_c("ip"), "a fixed ip needs a single `mac`"));
                        }
                        let ip = self.ip(&at_c("ip"), s)?;
                        if !dhcp.subnet.contains(ip) {
                            return Err(
                                self.err(&at_c("ip"), format!("{ip} is outside {}", dhcp.subnet))
                            );
                        }
                        if let Some(what) = reserved(dhcp.subnet, &server.links, ip) {
                            return Err(self.err(&at_c("ip"), format!("{ip} is {what}")));
                        }
                        if let Some((_, other)) = seen_ips.iter().find(|(x, _)| *x == ip) {
                            return Err(
                                self.err(&at_c("ip"), format!("{ip} is already given to {other}"))
                            );
                        }
                        seen_ips.push((ip, format!("pools.{name}.clients[{i}]")));
                        Some(ip)
                    }
                };
                clients.push(ClientEntry {
                    macs,
                    name: c.name.clone(),
                    ip,
                });
            }
            let pool = Pool {
                name: name.clone(),
                image,
                root,
                cmdline: p.cmdline.clone(),
                cmdline_template,
                initramfs,
                trace: p.trace,
                netconsole,
                clients,
                secure_boot: p.secure_boot.unwrap_or(false),
                arch: self.check_arch(name, &p.arch, &images, server.tftp)?,
                boot_over: self.check_boot_over(name, p.boot_over.as_deref(), dhcp6.is_some())?,
            };
            // Debian's signed network GRUB has no HTTP: its config, kernel and initrd come
            // over TFTP (docs/clients.md).
            if pool.secure_boot && !server.tftp {
                return Err(self.err(
                    &[Key("pools"), Key(name.as_str()), Key("secure_boot")],
                    "needs TFTP (`server.tftp: false`): the signed GRUB loads its config, kernel and initrd over TFTP only",
                ));
            }
            pools.insert(name.clone(), Arc::new(pool));
        }

        let limits = self.check_limits(&raw.limits, &dhcp)?;
        Ok(Config {
            file: self.file.to_path_buf(),
            server,
            dhcp,
            dhcp6,
            images,
            pools,
            limits,
        })
    }

    fn check_limits(&self, l: &raw::Limits, dhcp: &Dhcp) -> Result<Limits, ConfigError> {
        use Step::Key;
        let d = Limits::default();
        let count = |key: &'static str, v: Option<usize>, default: usize| match v {
            None => Ok(default),
            Some(0) => Err(self.err(&[Key("limits"), Key(key)], "must be more than zero")),
            Some(n) => Ok(n),
        };
        let time = |key: &'static str, v: &Option<String>, default: Duration| match v {
            None => Ok(default),
            Some(s) => match parse_duration(s) {
                Ok(t) if t.is_zero() => {
                    Err(self.err(&[Key("limits"), Key(key)], "must be more than zero"))
                }
                Ok(t) => Ok(t),
                Err(e) => Err(self.err(&[Key("limits"), Key(key)], e)),
            },
        };
        let size = |key: &'static str, v: &Option<String>| match v {
            None => Ok(None),
            Some(s) => match parse_size(s) {
                Ok(0) => Err(self.err(&[Key("limits"), Key(key)], "must be more than zero")),
                Ok(n) => Ok(Some(n)),
                Err(e) => Err(self.err(&[Key("limits"), Key(key)], e)),
            },
        };
        let tftp_clients = match &l.tftp_clients {
            None => vec![dhcp.subnet],
            Some(list) => list
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    s.parse::<Subnet>().map_err(|e| {
                        self.err(&[Key("limits"), Key("tftp_clients"), Step::Index(i)], e)
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(Limits {
            http_connections: count("http_connections", l.http_connections, d.http_connections)?,
            http_per_client: count("http_per_client", l.http_per_client, d.http_per_client)?,
            http_header_timeout: time(
                "http_header_timeout",
                &l.http_header_timeout,
                d.http_header_timeout,
            )?,
            http_idle_timeout: time(
                "http_idle_timeout",
                &l.http_idle_timeout,
                d.http_idle_timeout,
            )?,
            nbd_connections: count("nbd_connections", l.nbd_connections, d.nbd_connections)?,
            nbd_per_client: count("nbd_per_client", l.nbd_per_client, d.nbd_per_client)?,
            nbd_idle_timeout: time("nbd_idle_timeout", &l.nbd_idle_timeout, d.nbd_idle_timeout)?,
            root_lost_after: time("root_lost_after", &l.root_lost_after, d.root_lost_after)?,
            tftp_lifetime: time("tftp_lifetime", &l.tftp_lifetime, d.tftp_lifetime)?,
            tftp_clients,
            cow_ram_total: size("cow_ram_total", &l.cow_ram_total)?,
            cow_disk_total: size("cow_disk_total", &l.cow_disk_total)?,
        })
    }

    /// Two services given one port (0, "any free port", never clashes): refused at the one of
    /// the two keys the file has, the later one when it has both.
    fn check_ports(
        &self,
        s: &raw::Server,
        server: &Server,
        mode: DhcpMode,
    ) -> Result<(), ConfigError> {
        use Step::Key;
        let p = &server.ports;
        let set = &s.ports;
        // (key, port, written in the file); portmap's TCP and UDP sockets are one service.
        let mut listeners = vec![
            ("http", server.http.port(), true),
            ("dhcp", p.dhcp, set.dhcp.is_some()),
            ("dhcp6", p.dhcp6, set.dhcp6.is_some()),
            ("tftp", p.tftp, set.tftp.is_some()),
            ("nfs", p.nfs, set.nfs.is_some()),
            ("nbd", p.nbd, set.nbd.is_some()),
            ("portmap", p.portmap, set.portmap.is_some()),
            ("console", p.console, set.console.is_some()),
        ];
        if mode == DhcpMode::Proxy {
            listeners.insert(2, ("pxe", p.pxe, set.pxe.is_some()));
        }
        if let Some(tls) = &server.tls {
            listeners.insert(1, ("tls", tls.listen.port(), true));
        }
        let path = |key: &'static str| -> Vec<Step<'static>> {
            match key {
                "http" => vec![Key("server"), Key("http")],
                "tls" => vec![Key("server"), Key("tls"), Key("listen")],
                k => vec![Key("server"), Key("ports"), Key(k)],
            }
        };
        let shown = |key: &str| match key {
            "http" => "server.http".to_string(),
            "tls" => "server.tls.listen".to_string(),
            k => format!("server.ports.{k}"),
        };
        for (i, &(a, port, a_set)) in listeners.iter().enumerate() {
            for &(b, other, b_set) in &listeners[i + 1..] {
                if port == 0 || port != other {
                    continue;
                }
                // Point at a key the file has, the later one when both are there.
                let later = |x, y| {
                    locate::locate(self.text, &path(x)) >= locate::locate(self.text, &path(y))
                };
                let (here, there) = match (a_set, b_set) {
                    (true, true) if later(a, b) => (a, b),
                    (true, false) => (a, b),
                    _ => (b, a),
                };
                return Err(self.err(
                    &path(here),
                    format!(
                        "port {port} is also {}'s: two services cannot share a port",
                        shown(there)
                    ),
                ));
            }
        }
        Ok(())
    }

    fn check_dhcp(&self, d: &raw::Dhcp, server: &[Ipv4Addr]) -> Result<Dhcp, ConfigError> {
        use Step::Key;
        let at = |k| [Key("dhcp"), Key(k)];
        let mode = match d.mode.as_str() {
            "authoritative" => DhcpMode::Authoritative,
            "proxy" => DhcpMode::Proxy,
            other => {
                return Err(self.err(
                    &at("mode"),
                    format!("`{other}` is not `authoritative` or `proxy`"),
                ));
            }
        };
        let subnet: Subnet = d.subnet.parse().map_err(|e| self.err(&at("subnet"), e))?;
        let range = match &d.range {
            None if mode == DhcpMode::Authoritative => {
                return Err(self.err(&[Key("dhcp")], "authoritative mode needs a `range`"));
            }
            None => None,
            Some(r) => {
                let (a, b) = r
                    .split_once('-')
                    .ok_or_else(|| self.err(&at("range"), format!("`{r}` is not FIRST-LAST")))?;
                let (a, b) = (self.ip(&at("range"), a)?, self.ip(&at("range"), b)?);
                if u32::from(a) > u32::from(b) {
                    return Err(self.err(&at("range"), format!("{a} comes after {b}")));
                }
                for ip in [a, b] {
                    if !subnet.contains(ip) {
                        return Err(self.err(&at("range"), format!("{ip} is outside {subnet}")));
                    }
                }
                let (net, bcast) = (subnet.network, subnet.broadcast());
                let inside = |ip: Ipv4Addr| (u32::from(a)..=u32::from(b)).contains(&u32::from(ip));
                for ip in [net, bcast].into_iter().chain(server.iter().copied()) {
                    if inside(ip)
                        && let Some(what) = reserved(subnet, server, ip)
                    {
                        return Err(self.err(
                            &at("range"),
                            format!("{a}-{b} holds {ip}, {what}; clients must not be given it"),
                        ));
                    }
                }
                Some((a, b))
            }
        };
        let router = d
            .router
            .as_deref()
            .map(|r| self.ip(&at("router"), r))
            .transpose()?;
        let dns = d
            .dns
            .iter()
            .map(|s| self.ip(&at("dns"), s))
            .collect::<Result<_, _>>()?;
        let lease = parse_duration(&d.lease).map_err(|e| self.err(&at("lease"), e))?;
        Ok(Dhcp {
            mode,
            subnet,
            range,
            router,
            dns,
            lease,
        })
    }
}

const NAME_RULE: &str = "use A-Z, a-z, 0-9, `.`, `_` and `-`, not starting with `.` or `-`";

/// A file of an image: a relative path inside its folder whose parts are plain names, since it
/// is also the name clients ask TFTP and HTTP for (`Err`: why not, after the value).
fn inside_path(s: &str) -> Result<(), &'static str> {
    if s.starts_with('/') {
        return Err("is not a path inside the image folder (give it relative to `dir`)");
    }
    if s.split('/').all(is_name) {
        Ok(())
    } else {
        Err(
            "is not a path of plain names inside the image folder (each part: use A-Z, a-z, 0-9, `.`, `_` and `-`, not starting with `.` or `-`)",
        )
    }
}

/// An NFS export path: `/` then plain names separated by `/`.
fn nfs_export_path(s: &str) -> Result<(), &'static str> {
    match s.strip_prefix('/') {
        Some(rest) if rest.split('/').all(is_name) => Ok(()),
        _ => Err(
            "is not an absolute path of plain names such as `/srv/debian` (each part: use A-Z, a-z, 0-9, `.`, `_` and `-`, not starting with `.` or `-`)",
        ),
    }
}

/// Whether one NFS export path is the other or a folder above it (`/a` and `/a/b`).
fn nested(a: &str, b: &str) -> bool {
    let parts = |p: &str| {
        p.split('/')
            .filter(|c| !c.is_empty())
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let (a, b) = (parts(a), parts(b));
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// A pool or image name: it becomes part of paths, URLs and metric labels.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(['.', '-'])
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// A Linux interface name (`dev_valid_name`): under 16 bytes, not `.` or `..`, no `/`, `:` or
/// white space.
fn is_ifname(s: &str) -> bool {
    !s.is_empty()
        && s.len() < 16
        && s != "."
        && s != ".."
        && !s.chars().any(|c| c == '/' || c == ':' || c.is_whitespace())
}

/// What `ip` is that no client may be given: the subnet's network or broadcast address (on a
/// /31 or /32 both are hosts, RFC 3021), or one of the server's own addresses.
fn reserved(subnet: Subnet, server: &[Ipv4Addr], ip: Ipv4Addr) -> Option<String> {
    if ip == server[0] {
        Some("the server's own address (server.address)".into())
    } else if server.contains(&ip) {
        Some("one of the server's own addresses (server.links)".into())
    } else if subnet.prefix <= 30 && ip == subnet.network {
        Some(format!("the network address of {subnet}"))
    } else if subnet.prefix <= 30 && ip == subnet.broadcast() {
        Some(format!("the broadcast address of {subnet}"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests;

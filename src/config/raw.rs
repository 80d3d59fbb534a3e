//! The literal shape of pools.yaml, as serde reads it. Nothing outside `config` sees these types:
//! `check.rs` turns them into the checked types of `model.rs`. Unknown keys are errors everywhere.

use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    pub server: Server,
    pub dhcp: Dhcp,
    /// DHCPv6 (`config::dhcp6`).
    pub dhcp6: Option<Dhcp6>,
    #[serde(default)]
    pub images: BTreeMap<String, Image>,
    #[serde(default)]
    pub pools: BTreeMap<String, Pool>,
    #[serde(default)]
    pub limits: Limits,
}

/// Bounds on what clients (and strangers) may hold; every key has a default in `mod.rs`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub http_connections: Option<usize>,
    pub http_per_client: Option<usize>,
    pub http_header_timeout: Option<String>,
    pub http_idle_timeout: Option<String>,
    pub nbd_connections: Option<usize>,
    pub nbd_per_client: Option<usize>,
    pub nbd_idle_timeout: Option<String>,
    pub root_lost_after: Option<String>,
    pub tftp_lifetime: Option<String>,
    pub tftp_per_client: Option<usize>,
    pub tftp_clients: Option<Vec<String>>,
    pub cow_ram_total: Option<String>,
    pub cow_disk_total: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    #[serde(default)]
    pub interfaces: Vec<String>,
    pub address: String,
    /// The server's IPv6 address on the clients' network (with `dhcp6`).
    pub address6: Option<String>,
    /// The server's addresses on the clients' network, one per link; clients are spread
    /// over them.
    pub links: Option<Vec<String>>,
    #[serde(default = "default_http")]
    pub http: String,
    #[serde(default = "default_state_dir")]
    pub state_dir: String,
    #[serde(default)]
    pub ports: Ports,
    /// Folder of network boot programs (iPXE builds) served to firmware.
    #[serde(default = "default_loaders")]
    pub loaders: String,
    /// The signed shim handed to firmware of `secure_boot` pools (`shimx64.efi`).
    #[serde(default = "default_shim")]
    pub shim: String,
    /// The signed network GRUB that shim loads (`grubx64.efi`).
    #[serde(default = "default_grub")]
    pub grub: String,
    /// The network GRUB handed to ARM64 UEFI firmware (`grubaa64.efi`).
    #[serde(default = "default_grub_arm64")]
    pub grub_arm64: String,
    /// The folder holding memtest86+'s `memtest86+x64.bin` and `.efi` (next boot `memtest`).
    #[serde(default = "default_memtest")]
    pub memtest: String,
    /// The static `bootpool-agent` the addition carries for `nbd: { via: agent }` pools.
    pub agent: Option<String>,
    /// Serve TFTP at all (default true); off, port 69 stays closed.
    pub tftp: Option<bool>,
    /// Where boot records go: absent for SQLite in `state_dir`, or a `postgres://` URL.
    pub database: Option<String>,
    /// How long boot records are kept: a duration, or `forever`.
    #[serde(default = "default_retention")]
    pub retention: String,
    /// Link capacity per interface name, for links whose kernel speed is unknown.
    #[serde(default)]
    pub link_speeds: BTreeMap<String, Rate>,
    /// When set, the dashboard, the read API and /metrics need this token.
    pub read_token: Option<String>,
    /// When set, the API's actions (releasing a lease) take this token; without it they
    /// are off.
    pub admin_token: Option<String>,
    /// Subnets from which the dashboard, the read API, consoles and /metrics are read
    /// without the read token (the server host always is; client subnets never are).
    pub admin_networks: Option<Vec<String>>,
    /// /metrics open to anyone who reaches the HTTP port (default false).
    pub metrics_open: Option<bool>,
    /// Clients on a full link are paced to equal shares (default true).
    pub fair_share: Option<bool>,
    /// In a site, where a member places the boots it answers: `site`, spread over every live
    /// member's links; `owner` (the default), on its own links.
    pub placement: Option<String>,
    /// The enrolments file (`config::enrolments`): default `state_dir/enrolled.yaml`.
    pub enrolments: Option<String>,
    /// A second HTTP listener, over TLS, for the dashboard and the API.
    pub tls: Option<Tls>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    #[serde(default = "default_tls_listen")]
    pub listen: String,
    pub cert: String,
    pub key: String,
}

fn default_tls_listen() -> String {
    "0.0.0.0:8443".into()
}

/// A link rate as written: `250mbit`, or a bare number of Mbit/s.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Rate {
    Mbps(f64),
    Text(String),
}

fn default_retention() -> String {
    "180d".into()
}

fn default_loaders() -> String {
    "/usr/lib/ipxe".into()
}

fn default_shim() -> String {
    "/usr/lib/shim/shimx64.efi.signed".into()
}

fn default_grub() -> String {
    "/usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed".into()
}

fn default_grub_arm64() -> String {
    "/usr/lib/grub/arm64-efi-signed/grubnetaa64.efi.signed".into()
}

fn default_memtest() -> String {
    "/boot".into()
}

fn default_http() -> String {
    "0.0.0.0:8080".into()
}

fn default_state_dir() -> String {
    "var/".into()
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ports {
    pub dhcp: Option<u16>,
    pub dhcp6: Option<u16>,
    pub pxe: Option<u16>,
    pub tftp: Option<u16>,
    pub nfs: Option<u16>,
    pub nbd: Option<u16>,
    pub portmap: Option<u16>,
    pub console: Option<u16>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dhcp {
    #[serde(default = "default_mode")]
    pub mode: String,
    /// The one-subnet form: the subnet's keys right in `dhcp` (`subnets` absent).
    pub subnet: Option<String>,
    pub range: Option<String>,
    pub router: Option<String>,
    pub dns: Option<Vec<String>>,
    #[serde(default = "default_lease")]
    pub lease: String,
    /// Several subnets, each with its own keys (the one-subnet keys absent).
    pub subnets: Option<Vec<DhcpSubnet>>,
    /// The relays allowed to speak for other segments: addresses or subnets.
    pub relays: Option<Vec<String>>,
}

/// One entry of `dhcp.subnets`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DhcpSubnet {
    pub subnet: String,
    pub range: Option<String>,
    pub router: Option<String>,
    #[serde(default)]
    pub dns: Vec<String>,
    /// Its lease time (absent: `dhcp.lease`).
    pub lease: Option<String>,
    /// The capacity of the link between its room and the server (absent: no bound but the
    /// server's links).
    pub uplink: Option<Rate>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dhcp6 {
    pub subnet: String,
    pub range: String,
    pub lease: Option<String>,
    #[serde(default)]
    pub dns: Vec<String>,
    pub router_advertisements: Option<String>,
}

fn default_mode() -> String {
    "authoritative".into()
}

fn default_lease() -> String {
    "12h".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Image {
    pub dir: String,
    #[serde(default = "default_store")]
    pub store: String,
    /// Per-client copy-on-write for NBD: absent (read-only), `ram` or `disk`.
    pub cow: Option<String>,
    /// Bound on one client's overlay, e.g. `512MiB`.
    pub cow_limit: Option<String>,
    /// NFS: AUTH_UNIX uid 0 and gid 0 are taken as nobody (65534).
    pub root_squash: Option<bool>,
    /// NFS: only calls from source ports below 1024 are answered.
    pub secure_ports: Option<bool>,
    /// How the initrd goes on the wire: `as_is` (absent) or `zstd` (its gzip part
    /// recompressed).
    pub initrd_wire: Option<String>,
    /// How the NBD root image goes on the wire: `as_is` (absent) or `zstd` (a squashfs
    /// image recompressed).
    pub root_wire: Option<String>,
    /// The image's files, as paths inside `dir`.
    #[serde(default = "default_kernel")]
    pub kernel: String,
    #[serde(default = "default_initrd")]
    pub initrd: String,
    #[serde(default = "default_root_tree")]
    pub root_tree: String,
    #[serde(default = "default_root_image")]
    pub root_image: String,
    /// The NFS export path (absent: `/NAME`) and the NBD export name (absent: `NAME`).
    pub nfs_export: Option<String>,
    pub nbd_export: Option<String>,
}

fn default_store() -> String {
    "disk".into()
}

fn default_kernel() -> String {
    "vmlinuz".into()
}

fn default_initrd() -> String {
    "initrd.img".into()
}

fn default_root_tree() -> String {
    "rootfs".into()
}

fn default_root_image() -> String {
    "rootfs.img".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    pub image: String,
    #[serde(default = "default_root")]
    pub root: String,
    #[serde(default)]
    pub cmdline: String,
    /// The whole kernel command line, with placeholders (`config::cmdline`).
    pub cmdline_template: Option<String>,
    #[serde(default = "default_initramfs")]
    pub initramfs: String,
    /// Mount options an NFS root gets after `ro` (`None`: `nocto`).
    pub nfs_options: Option<String>,
    /// `tmpfs`, `off`, `{ tmpfs: SIZE }` or `{ disk: DEVICE }` (`config::check_overlay`).
    pub overlay: Option<Overlay>,
    /// `{ server: ADDR, export: /home, options: "..." }` (`config::check_homes`).
    pub homes: Option<Homes>,
    /// `{ via: server | agent }`: how an NBD root reaches the kernel (`config::check_nbd`).
    pub nbd: Option<PoolNbd>,
    #[serde(default)]
    pub clients: Vec<Client>,
    #[serde(default)]
    pub trace: bool,
    /// `true`, `false` or the client's interface name: the kernel's `netconsole=`.
    pub netconsole: Option<Netconsole>,
    /// Firmware with Secure Boot on: hand out the signed shim and GRUB chain, not iPXE.
    pub secure_boot: Option<bool>,
    /// Per firmware architecture (`bios`, `x64`, `ia32`, `arm64`): another image and
    /// command line for the clients whose option 93 says so.
    #[serde(default)]
    pub arch: BTreeMap<String, ArchEntry>,
    /// `both`, `ipv4` or `ipv6`: which DHCP gives its firmware and iPXE their boot file.
    pub boot_over: Option<String>,
    /// Any client no pool lists boots this pool, and is enrolled into it.
    #[serde(default)]
    pub discover: bool,
    /// When its machines are woken (Wake-on-LAN).
    pub wake: Option<Wake>,
}

/// `pools.NAME.wake`: `at: "07:45"`, `days: [mon, ...]`, `per_second: N`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wake {
    pub at: String,
    pub days: Option<Vec<String>>,
    pub per_second: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchEntry {
    pub image: String,
    pub cmdline: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Netconsole {
    On(bool),
    Device(String),
}

fn default_root() -> String {
    "nfs".into()
}

fn default_initramfs() -> String {
    "bootpool".into()
}

/// `pools.NAME.nbd`: how the client's kernel reads its NBD root.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolNbd {
    pub via: Option<String>,
    /// Clients' agents fetch chunks from each other (`check_peers.rs`).
    pub peers: Option<bool>,
}

/// `pools.NAME.homes`: the NFS export of the users' homes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Homes {
    pub server: String,
    pub export: String,
    pub options: Option<String>,
}

/// `pools.NAME.overlay`: a word, or a map (`config::check_overlay` checks its keys).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Overlay {
    Word(String),
    Map(BTreeMap<String, Scalar>),
}

/// A YAML scalar taken as text (`2g`, or a bare number of bytes).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Scalar {
    Number(u64),
    Text(String),
}

impl Scalar {
    pub fn text(&self) -> String {
        match self {
            Scalar::Number(n) => n.to_string(),
            Scalar::Text(t) => t.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Client {
    pub mac: Option<String>,
    pub macs: Option<String>,
    pub name: Option<String>,
    /// The number a `{n}` name pattern gives the entry's first MAC (default 1).
    pub first: Option<u64>,
    pub ip: Option<String>,
    /// Kernel arguments after the pool's.
    pub cmdline: Option<String>,
    /// An image of `images` instead of the pool's.
    pub image: Option<String>,
    /// A revision id of that image instead of its active one.
    pub revision: Option<String>,
}

//! The checks of `Config::parse`: raw YAML values turned into checked types, each error
//! located at the file, line and column of the value it is about (`Checker::err`).

use super::cmdline;
use super::dhcp6::{Dhcp6, RouterAdverts};
use super::error::ConfigError;
use super::locate::{self, Step};
use super::model::*;
use super::raw;
use super::values::{Mac, MacRange, Subnet, parse_duration, parse_rate_mbps, parse_size, reserved};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Turns raw YAML values into checked types, remembering where each came from.
pub(super) struct Checker<'a> {
    pub(super) file: &'a Path,
    pub(super) text: &'a str,
    pub(super) base: &'a Path,
    /// What `warn` found, handed to `Config::warnings`.
    pub(super) warnings: std::cell::RefCell<Vec<ConfigError>>,
}

impl Checker<'_> {
    /// The value of the word `given` among `choices`, or an error at `path` naming them all
    /// ("`x` is not `a`, `b` or `c`").
    pub(super) fn one_of<T: Clone>(
        &self,
        path: &[Step],
        given: &str,
        choices: &[(&str, T)],
    ) -> Result<T, ConfigError> {
        if let Some((_, v)) = choices.iter().find(|(word, _)| *word == given) {
            return Ok(v.clone());
        }
        let words: Vec<String> = choices.iter().map(|(w, _)| format!("`{w}`")).collect();
        let listed = match words.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        Err(self.err(path, format!("`{given}` is not {listed}")))
    }

    pub(super) fn err(&self, path: &[Step], reason: impl Into<String>) -> ConfigError {
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

    /// A warning about the value at `path`, located as an error is.
    fn warn(&self, path: &[Step], reason: impl Into<String>) {
        let w = self.err(path, reason);
        self.warnings.borrow_mut().push(w);
    }

    pub(super) fn ip(&self, path: &[Step], s: &str) -> Result<Ipv4Addr, ConfigError> {
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

    /// pools.yaml's sections checked in the order they depend on each other, each by its own
    /// function: the first error found is the one reported.
    pub(super) fn check(&self, raw: raw::File) -> Result<Config, ConfigError> {
        let (server, dhcp6) = self.check_server(&raw)?;
        let dhcp = self.check_dhcp(&raw.dhcp, &server.links)?;
        self.check_proxy(&raw.dhcp, dhcp.mode)?;
        self.check_links_in_subnet(&raw.dhcp, &raw.server, &server, &dhcp)?;
        self.check_ports(&raw.server, &server, dhcp.mode)?;
        let images = self.check_images(&raw.images)?;
        let pools = self.check_pools(&raw.pools, &images, &server, &dhcp, dhcp6.is_some())?;
        let limits = self.check_limits(&raw.limits, &dhcp)?;
        self.check_room_size(&pools, &dhcp);
        Ok(Config {
            file: self.file.to_path_buf(),
            server,
            dhcp,
            dhcp6,
            images,
            pools,
            limits,
            warnings: self.warnings.take(),
        })
    }

    /// Proxy mode gives no addresses: the keys that only say what an address-giving server
    /// hands out would be ignored, so they are refused.
    fn check_proxy(&self, d: &raw::Dhcp, mode: DhcpMode) -> Result<(), ConfigError> {
        use Step::Key;
        if mode != DhcpMode::Proxy {
            return Ok(());
        }
        let refuse = |path: &[Step]| {
            self.err(
                path,
                "is not used in proxy mode: the site's DHCP server gives the addresses, \
                 router and DNS servers (remove it, or use `mode: authoritative`)",
            )
        };
        for (key, given) in [
            ("range", d.range.is_some()),
            ("router", d.router.is_some()),
            ("dns", d.dns.as_ref().is_some_and(|v| !v.is_empty())),
        ] {
            if given {
                return Err(refuse(&[Key("dhcp"), Key(key)]));
            }
        }
        for (i, sub) in d.subnets.iter().flatten().enumerate() {
            for (key, given) in [
                ("range", sub.range.is_some()),
                ("router", sub.router.is_some()),
                ("dns", !sub.dns.is_empty()),
            ] {
                if given {
                    return Err(refuse(&[
                        Key("dhcp"),
                        Key("subnets"),
                        Step::Index(i),
                        Key(key),
                    ]));
                }
            }
        }
        Ok(())
    }

    /// More machines listed than the ranges and fixed addresses can hold at once: a warning
    /// (machines that never boot together are fine), said at `dhcp.range` or `dhcp.subnets`.
    fn check_room_size(&self, pools: &BTreeMap<String, Arc<Pool>>, dhcp: &Dhcp) {
        use Step::Key;
        let ranges: Vec<(Ipv4Addr, Ipv4Addr)> =
            dhcp.subnets.iter().filter_map(|s| s.range).collect();
        if ranges.is_empty() {
            return;
        }
        let entries = pools.values().flat_map(|p| p.clients.iter());
        let (fixed, dynamic) = entries.fold((0u64, 0u64), |(f, d), e| match e.ip {
            Some(_) => (f + 1, d),
            None => (f, d + e.macs.len()),
        });
        let addresses: u64 = ranges
            .iter()
            .map(|&(a, b)| u64::from(u32::from(b) - u32::from(a)) + 1)
            .sum();
        // Said where the ranges are: the one-subnet form's `dhcp.range`, or `dhcp.subnets`.
        let at: &[Step] = if locate::locate(self.text, &[Key("dhcp"), Key("range")]).is_some() {
            &[Key("dhcp"), Key("range")]
        } else {
            &[Key("dhcp"), Key("subnets")]
        };
        if dynamic > addresses {
            self.warn(
                at,
                format!(
                    "holds {addresses} addresses, but the pools list {dynamic} machines without a \
                     fixed ip (and {fixed} with one): at most {addresses} of them get an address at once"
                ),
            );
        }
    }

    /// `server.database`: SQLite in `state_dir` when absent, else a PostgreSQL URL, read as
    /// serve reads it (its form only: `check` never connects, and a database that is down is
    /// no error of the config).
    fn database(
        &self,
        url: Option<&str>,
        state_dir: &std::path::Path,
    ) -> Result<Database, ConfigError> {
        use Step::Key;
        Ok(match url.map(str::trim) {
            None => Database::Sqlite(state_dir.join("records.db")),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                if let Err(e) = url.parse::<sqlx::postgres::PgConnectOptions>() {
                    return Err(self.err(
                        &[Key("server"), Key("database")],
                        format!("not a PostgreSQL URL serve can use: {e}"),
                    ));
                }
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
        })
    }

    /// The `server` section, with what DHCPv6 adds to it (`server.address6`, `dhcp6`).
    fn check_server(&self, raw: &raw::File) -> Result<(Server, Option<Dhcp6>), ConfigError> {
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
        let database = self.database(s.database.as_deref(), &state_dir)?;
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
            state_dir: state_dir.clone(),
            ports,
            loaders: self.path(&s.loaders),
            shim: self.path(&s.shim),
            grub: self.path(&s.grub),
            grub_arm64: self.path(&s.grub_arm64),
            memtest: self.path(&s.memtest),
            agent: s.agent.as_deref().map(|a| self.path(a)),
            tftp: s.tftp.unwrap_or(true),
            database,
            retention,
            link_speeds,
            read_token,
            admin_token,
            admin_networks: self.check_admin_networks(s)?,
            metrics_open: s.metrics_open.unwrap_or(false),
            fair_share: s.fair_share.unwrap_or(true),
            placement: self.check_placement(s)?,
            tls,
            enrolments: match &s.enrolments {
                Some(file) => self.path(file),
                None => state_dir.join(ENROLMENTS_FILE),
            },
        };
        Ok((server, dhcp6))
    }

    /// The `images` section, in name order.
    fn check_images(
        &self,
        raw: &BTreeMap<String, raw::Image>,
    ) -> Result<BTreeMap<String, Arc<Image>>, ConfigError> {
        let mut images = BTreeMap::new();
        for (name, img) in raw {
            let image = self.check_image(name, img, &images)?;
            images.insert(name.clone(), image);
        }
        Ok(images)
    }

    /// One image of the `images` section; `images` are the ones checked before it, which its
    /// exports must not clash with.
    fn check_image(
        &self,
        name: &String,
        img: &raw::Image,
        images: &BTreeMap<String, Arc<Image>>,
    ) -> Result<Arc<Image>, ConfigError> {
        use Step::Key;
        let at = |k| [Key("images"), Key(name.as_str()), Key(k)];
        let store = self.one_of(
            &at("store"),
            &img.store,
            &[("disk", Store::Disk), ("ram", Store::Ram)],
        )?;
        if !is_name(name) {
            return Err(self.err(
                &[Key("images"), Key(name)],
                format!("`{name}` is not a plain name ({NAME_RULE})"),
            ));
        }
        let cow_store = img
            .cow
            .as_deref()
            .map(|c| {
                self.one_of(
                    &at("cow"),
                    c,
                    &[("ram", CowStore::Ram), ("disk", CowStore::Disk)],
                )
            })
            .transpose()?;
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
        let initrd_wire = self.one_of(
            &at("initrd_wire"),
            img.initrd_wire.as_deref().unwrap_or("as_is"),
            &[("as_is", Wire::AsIs), ("zstd", Wire::Zstd)],
        )?;
        let root_wire = self.one_of(
            &at("root_wire"),
            img.root_wire.as_deref().unwrap_or("as_is"),
            &[("as_is", Wire::AsIs), ("zstd", Wire::Zstd)],
        )?;
        if root_wire == Wire::Zstd && cow_store.is_some() {
            return Err(self.err(
                &at("root_wire"),
                "a recompressed root image has other blocks than the file, so a client's copy-on-write overlay would not fit it: leave root_wire out of an image with `cow`",
            ));
        }
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
        Ok(Arc::new(Image {
            blocks: None,
            blocks_elsewhere: Vec::new(),
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
            initrd_wire,
            root_wire,
        }))
    }

    /// The `pools` section, in name order.
    fn check_pools(
        &self,
        raw: &BTreeMap<String, raw::Pool>,
        images: &BTreeMap<String, Arc<Image>>,
        server: &Server,
        dhcp: &Dhcp,
        dhcp6: bool,
    ) -> Result<BTreeMap<String, Arc<Pool>>, ConfigError> {
        let mut pools = BTreeMap::new();
        let mut seen = Seen::default();
        let mut discover: Option<&str> = None;
        for (name, p) in raw {
            let pool = self.check_pool(name, p, images, server, dhcp, dhcp6, &mut seen)?;
            if pool.discover {
                if let Some(first) = discover {
                    return Err(self.err(
                        &[Step::Key("pools"), Step::Key(name), Step::Key("discover")],
                        format!("pool `{first}` already says `discover: true`: one pool at most takes the clients no pool lists"),
                    ));
                }
                discover = Some(name);
            }
            pools.insert(name.clone(), Arc::new(pool));
        }
        self.check_enrolled(&mut pools, images, server, dhcp, &mut seen)?;
        Ok(pools)
    }

    /// The enrolments file (`server.enrolments`), when there is one: each pool it names must
    /// be in `pools`, and its clients are checked as a pool's `clients` are, after those of
    /// pools.yaml (a MAC, name or fixed address given in both is an error naming both), then
    /// added to their pools. Its errors name its own file, line and key.
    fn check_enrolled(
        &self,
        pools: &mut BTreeMap<String, Arc<Pool>>,
        images: &BTreeMap<String, Arc<Image>>,
        server: &Server,
        dhcp: &Dhcp,
        seen: &mut Seen,
    ) -> Result<(), ConfigError> {
        let file = server.enrolments.as_path();
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(ConfigError {
                    file: file.to_path_buf(),
                    line: None,
                    column: None,
                    path: String::new(),
                    reason: format!("cannot read (server.enrolments): {e}"),
                });
            }
        };
        let raw: Option<BTreeMap<String, Vec<raw::Client>>> = super::yaml::read_as(file, &text)?;
        let enrolled = Checker {
            file,
            text: &text,
            base: self.base,
            warnings: Default::default(),
        };
        for (name, clients) in raw.unwrap_or_default() {
            let Some(pool) = pools.get_mut(&name) else {
                let known: Vec<&str> = pools.keys().map(String::as_str).collect();
                return Err(enrolled.err(
                    &[Step::Key(&name)],
                    format!(
                        "no pool `{name}` in {} (pools: {})",
                        self.file.display(),
                        known.join(", ")
                    ),
                ));
            };
            let label = format!("{}: {name}", file.display());
            let template = pool.cmdline_template.clone();
            let entries = enrolled.check_clients(
                &[Step::Key(&name)],
                &label,
                &clients,
                dhcp,
                &server.links,
                seen,
                (images, template.as_ref()),
            )?;
            Arc::make_mut(pool).clients.extend(entries);
        }
        self.warnings.borrow_mut().extend(enrolled.warnings.take());
        Ok(())
    }

    /// A pool's `cmdline_template`, parsed, and its `cmdline` used by it if given.
    fn check_template(
        &self,
        name: &str,
        p: &raw::Pool,
    ) -> Result<Option<cmdline::Template>, ConfigError> {
        let at = |k| [Step::Key("pools"), Step::Key(name), Step::Key(k)];
        let Some(text) = &p.cmdline_template else {
            return Ok(None);
        };
        let t =
            cmdline::Template::parse(text).map_err(|why| self.err(&at("cmdline_template"), why))?;
        if !p.cmdline.trim().is_empty() && !t.uses(cmdline::Field::Cmdline) {
            return Err(self.err(
                &at("cmdline"),
                "is not used: the pool's cmdline_template does not say {cmdline}",
            ));
        }
        Ok(Some(t))
    }

    /// One pool of the `pools` section; `seen` holds the MACs and fixed addresses of the pools
    /// before it, which its clients must not repeat.
    #[allow(clippy::too_many_arguments)]
    fn check_pool(
        &self,
        name: &String,
        p: &raw::Pool,
        images: &BTreeMap<String, Arc<Image>>,
        server: &Server,
        dhcp: &Dhcp,
        dhcp6: bool,
        seen: &mut Seen,
    ) -> Result<Pool, ConfigError> {
        use Step::Key;
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
        let root = self.one_of(
            &at("root"),
            &p.root,
            &[("nfs", RootProto::Nfs), ("nbd", RootProto::Nbd)],
        )?;
        let initramfs = self.one_of(
            &at("initramfs"),
            &p.initramfs,
            &[
                ("bootpool", Initramfs::Bootpool),
                ("dracut", Initramfs::Dracut),
                ("initramfs-tools", Initramfs::InitramfsTools),
            ],
        )?;
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
        let nfs_options = match &p.nfs_options {
            None => DEFAULT_NFS_OPTIONS.to_string(),
            Some(_) if root != RootProto::Nfs => {
                return Err(self.err(&at("nfs_options"), "is for a pool with `root: nfs`"));
            }
            Some(text) => {
                nfs_options(text, initramfs).map_err(|why| self.err(&at("nfs_options"), why))?
            }
        };
        let cmdline_template = self.check_template(name, p)?;
        let netconsole = match &p.netconsole {
            None | Some(raw::Netconsole::On(false)) => Netconsole::Off,
            Some(raw::Netconsole::On(true)) => Netconsole::On(None),
            Some(raw::Netconsole::Device(dev)) => {
                if let Some(on) = yaml11_bool(dev) {
                    return Err(self.err(
                        &at("netconsole"),
                        format!(
                            "`{dev}` is read as the interface name \"{dev}\" (YAML 1.2 has only \
                             true and false): write `{on}`, or the client's interface"
                        ),
                    ));
                }
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
        let overlay = self.check_overlay(name, p.overlay.as_ref(), initramfs, root, &image)?;
        let homes = self.check_homes(name, p.homes.as_ref(), initramfs, &overlay)?;
        let list = [Key("pools"), Key(name.as_str()), Key("clients")];
        let label = format!("pools.{name}.clients");
        let clients = self.check_clients(
            &list,
            &label,
            &p.clients,
            dhcp,
            &server.links,
            seen,
            (images, cmdline_template.as_ref()),
        )?;
        let mut pool = Pool {
            name: name.clone(),
            image,
            root,
            cmdline: p.cmdline.clone(),
            cmdline_template,
            initramfs,
            overlay,
            homes,
            nbd_via: NbdVia::Server,
            nbd_peers: false,
            nfs_options,
            trace: p.trace,
            netconsole,
            clients,
            secure_boot: p.secure_boot.unwrap_or(false),
            arch: self.check_arch(name, &p.arch, images, server.tftp)?,
            boot_over: self.check_boot_over(name, p.boot_over.as_deref(), dhcp6)?,
            discover: p.discover,
            wake: self.check_wake(name, p.wake.as_ref())?,
        };
        pool.nbd_via = self.check_nbd(&pool, p.nbd.as_ref(), server)?;
        pool.nbd_peers = self.check_peers(&pool, p.nbd.as_ref())?;
        // Debian's signed network GRUB has no HTTP: its config, kernel and initrd come
        // over TFTP (docs/clients.md).
        if pool.secure_boot && !server.tftp {
            return Err(self.err(
                &[Key("pools"), Key(name.as_str()), Key("secure_boot")],
                "needs TFTP (`server.tftp: false`): the signed GRUB loads its config, kernel and initrd over TFTP only",
            ));
        }
        Ok(pool)
    }

    /// A list of clients (a pool's `clients`, at `list`; a pool's list in the enrolments
    /// file): each a MAC or a range, some with a fixed address. `label` names the list in
    /// `seen`, for a later entry that repeats one of these.
    #[allow(clippy::too_many_arguments)]
    fn check_clients(
        &self,
        list: &[Step],
        label: &str,
        raw: &[raw::Client],
        dhcp: &Dhcp,
        links: &[Ipv4Addr],
        seen: &mut Seen,
        // What the entries' overrides may name and must fit: the images, the pool's template.
        (images, template): (&BTreeMap<String, Arc<Image>>, Option<&cmdline::Template>),
    ) -> Result<Vec<ClientEntry>, ConfigError> {
        use Step::Key;
        let mut clients = Vec::new();
        for (i, c) in raw.iter().enumerate() {
            let item = || {
                let mut at = list.to_vec();
                at.push(Step::Index(i));
                at
            };
            let at_c = |k| {
                let mut at = item();
                at.push(Key(k));
                at
            };
            let macs = match (&c.mac, &c.macs) {
                (Some(m), None) => {
                    let mac: Mac = m.parse().map_err(|e| self.err(&at_c("mac"), e))?;
                    MacRange::single(mac)
                }
                (None, Some(r)) => r.parse().map_err(|e| self.err(&at_c("macs"), e))?,
                _ => {
                    return Err(self.err(&item(), "give exactly one of `mac` or `macs`"));
                }
            };
            let key = if c.mac.is_some() { "mac" } else { "macs" };
            let entry = format!("{label}[{i}]");
            let client_name = match &c.name {
                Some(n) => Some(self.check_client_name(
                    &at_c("name"),
                    n,
                    c.first,
                    &macs,
                    &mut seen.names,
                )?),
                None if c.first.is_some() => {
                    return Err(self.err(&at_c("first"), "counts for a `name` pattern: give one"));
                }
                None => None,
            };
            if macs.len() > PLAUSIBLE_MACS {
                self.warn(
                    &at_c(key),
                    format!(
                        "{macs} is {} machines: a typo? (a room is rarely more than {PLAUSIBLE_MACS})",
                        macs.len()
                    ),
                );
            }
            if let Some((_, other)) = seen.macs.iter().find(|(r, _)| r.overlaps(&macs)) {
                return Err(self.err(&at_c(key), format!("{macs} is already listed in {other}")));
            }
            seen.macs.push((macs, entry.clone()));
            if c.ip.is_some() && dhcp.mode == DhcpMode::Proxy {
                self.warn(
                    &at_c("ip"),
                    "gives no address in proxy mode (the site's DHCP server does): it only lets \
                     this MAC's port-4011 request be answered without its DISCOVER seen first",
                );
            }
            let ip = match &c.ip {
                None => None,
                Some(s) => {
                    if macs.len() != 1 {
                        return Err(self.err(&at_c("ip"), "a fixed ip needs a single `mac`"));
                    }
                    let ip = self.ip(&at_c("ip"), s)?;
                    let Some(on) = dhcp.subnet_of(ip) else {
                        let all: Vec<String> =
                            dhcp.subnets.iter().map(|s| s.subnet.to_string()).collect();
                        return Err(
                            self.err(&at_c("ip"), format!("{ip} is outside {}", all.join(", ")))
                        );
                    };
                    if let Some(what) = reserved(on.subnet, links, ip) {
                        return Err(self.err(&at_c("ip"), format!("{ip} is {what}")));
                    }
                    if let Some((_, other)) = seen.ips.iter().find(|(x, _)| *x == ip) {
                        return Err(
                            self.err(&at_c("ip"), format!("{ip} is already given to {other}"))
                        );
                    }
                    seen.ips.push((ip, entry.clone()));
                    Some(ip)
                }
            };
            let (cmdline, image, revision) = self.check_overrides(&item(), c, images, template)?;
            clients.push(ClientEntry {
                macs,
                name: client_name,
                ip,
                cmdline,
                image,
                revision,
            });
        }
        Ok(clients)
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
            None => dhcp.subnets.iter().map(|s| s.subnet).collect(),
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
            tftp_per_client: count("tftp_per_client", l.tftp_per_client, d.tftp_per_client)?,
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
}

const NAME_RULE: &str = "use A-Z, a-z, 0-9, `.`, `_` and `-`, not starting with `.` or `-`";

/// The MACs and fixed addresses the pools checked so far gave out, with where.
#[derive(Default)]
struct Seen {
    macs: Vec<(MacRange, String)>,
    ips: Vec<(Ipv4Addr, String)>,
    /// Client names: one machine each, across the pools.
    names: super::client_names::Taken,
}

/// A MAC range of more machines than this is warned about (a digit too many turns a room's
/// range into millions).
const PLAUSIBLE_MACS: u64 = 4096;

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

/// A word YAML 1.1 read as a boolean and YAML 1.2 (serde_norway) reads as text: `yes`, `no`,
/// `on`, `off`, `y`, `n`, in any case, and `true`/`false` cased otherwise than YAML 1.2 knows.
fn yaml11_bool(word: &str) -> Option<bool> {
    match word.to_ascii_lowercase().as_str() {
        "yes" | "on" | "y" | "true" => Some(true),
        "no" | "off" | "n" | "false" => Some(false),
        _ => None,
    }
}

/// What an NFS root gets after `ro` when its pool says nothing: no close-to-open checks. The
/// root is a revision nobody writes while it is mounted (or a tree its admin edits, whose
/// changes a client then sees within the attribute cache's 60 s), so opening a file need not
/// ask the server first: the demo's boot makes a third fewer NFS calls (docs/clients.md).
const DEFAULT_NFS_OPTIONS: &str = "nocto";

/// The options Debian's klibc `nfsmount` knows (klibc 2.0, nfsmount/main.c): it refuses the
/// mount on any other, so an initramfs-tools pool may give only these (`NAME=` takes a number).
const KLIBC_NFSMOUNT_OPTIONS: [&str; 29] = [
    "nfsvers=",
    "vers=",
    "rsize=",
    "wsize=",
    "timeo=",
    "retrans=",
    "acregmin=",
    "acregmax=",
    "acdirmin=",
    "acdirmax=",
    "soft",
    "hard",
    "intr",
    "nointr",
    "posix",
    "noposix",
    "cto",
    "nocto",
    "ac",
    "noac",
    "lock",
    "nolock",
    "acl",
    "noacl",
    "v2",
    "v3",
    "udp",
    "tcp",
    "broken_suid",
];

/// `pools.NAME.nfs_options`: comma-separated mount options, each letters, digits, `_`, `.`,
/// `-` and at most one `=`; bootpool's own (`ro`, `port=`, `mountport=`) are its to write,
/// and an initramfs-tools root takes only what klibc's `nfsmount` knows.
fn nfs_options(text: &str, initramfs: Initramfs) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(String::new());
    }
    for opt in text.split(',') {
        let name = opt.split('=').next().unwrap_or("");
        let plain = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        };
        if !opt.split('=').all(plain) || opt.matches('=').count() > 1 {
            return Err(format!(
                "`{opt}` is not a mount option (letters, digits, `_`, `.`, `-`, one `=`; \
                 options are separated by commas, without spaces)"
            ));
        }
        if matches!(name, "ro" | "rw" | "port" | "mountport") {
            return Err(format!(
                "`{opt}`: bootpool writes {name} itself (an NFS root is read-only, its ports \
                 are server.ports.nfs)"
            ));
        }
        let known = |o: &str| match o.strip_suffix('=') {
            Some(int) => opt
                .strip_prefix(int)
                .and_then(|v| v.strip_prefix('='))
                .is_some_and(|v| v.bytes().all(|b| b.is_ascii_digit())),
            None => o == opt,
        };
        if initramfs == Initramfs::InitramfsTools
            && !KLIBC_NFSMOUNT_OPTIONS.iter().any(|o| known(o))
        {
            return Err(format!(
                "`{opt}`: initramfs-tools mounts the root with klibc's nfsmount, which refuses \
                 an option it does not know (it knows {}; those with `=` take a number)",
                KLIBC_NFSMOUNT_OPTIONS.join(" ")
            ));
        }
    }
    Ok(text.to_string())
}

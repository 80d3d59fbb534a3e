//! The server's side of boot traces: for clients of pools with `trace: true`, every request
//! the services answer is written as one line of the trace format (`format`) to
//! `state_dir/traces/MAC-UNIXSECONDS.trace`, from the boot's first PXE DISCOVER to its booted
//! call. Clients of other pools cost one relaxed atomic load per request.
//!
//! A trace starts at a DISCOVER with `PXEClient` when the MAC has no open trace, when it comes
//! from firmware rather than iPXE, or when the open one has ended; DHCP ops come from the
//! recorder's own events (one path for who a client is: the ACK ties its address to its MAC).

use super::event::{Kind, Micros, Who, now_micros};
use crate::config::{Config, Mac, Pool};
use crate::trace::format::{self, Header, Op, What};
use std::collections::HashMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Traces kept per client; older ones are deleted when a new one starts.
const KEEP_PER_CLIENT: usize = 8;

pub struct Tracer {
    /// Whether any pool traces at all: the only thing a request of an untraced client reads.
    on: AtomicBool,
    /// Whether some trace is open now.
    open: AtomicBool,
    dir: PathBuf,
    /// MAC -> pool name, for the MACs of tracing pools.
    /// Each traced MAC's pool (whose image a boot's trace names by the architecture its
    /// firmware said, `pools.NAME.arch`).
    /// A reload replaces it whole (`follow`).
    pools: RwLock<HashMap<Mac, Arc<Pool>>>,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    by_mac: HashMap<Mac, Open>,
    by_ip: HashMap<Ipv4Addr, Mac>,
}

struct Open {
    start: Micros,
    out: std::io::BufWriter<std::fs::File>,
    /// When `out` was last flushed: at least once a second, so a killed daemon loses little.
    flushed: Micros,
    ended: bool,
}

/// Each MAC of the config's tracing pools (`trace: true`), with its pool.
fn traced(config: &Config) -> HashMap<Mac, Arc<Pool>> {
    let mut pools = HashMap::new();
    for pool in config.pools.values().filter(|p| p.trace) {
        for entry in &pool.clients {
            for i in 0..entry.macs.len() {
                if let Some(mac) = entry.macs.nth(i) {
                    pools.insert(mac, pool.clone());
                }
            }
        }
    }
    pools
}

impl Tracer {
    /// A tracer for the config's tracing pools (none: it never traces).
    pub fn new(config: &Config) -> Tracer {
        let pools = traced(config);
        Tracer {
            on: AtomicBool::new(!pools.is_empty()),
            open: AtomicBool::new(false),
            dir: config.server.state_dir.join("traces"),
            pools: RwLock::new(pools),
            inner: Mutex::default(),
        }
    }

    /// Follows a reloaded config: its tracing pools and their clients from now on (a trace
    /// already open goes on to its end; `state_dir`, where traces go, cannot change).
    pub fn follow(&self, config: &Config) {
        let pools = traced(config);
        self.on.store(!pools.is_empty(), Ordering::Relaxed);
        *self.pools.write().unwrap_or_else(|e| e.into_inner()) = pools;
    }

    pub fn off() -> Tracer {
        Tracer {
            on: AtomicBool::new(false),
            open: AtomicBool::new(false),
            dir: PathBuf::new(),
            pools: RwLock::default(),
            inner: Mutex::default(),
        }
    }

    /// Whether a request from `ip` may need tracing: cheap, and false for every client when no
    /// trace is open.
    pub fn wants(&self, _ip: Ipv4Addr) -> bool {
        self.on.load(Ordering::Relaxed) && self.open.load(Ordering::Relaxed)
    }

    /// Follows the recorder's events: DHCP exchanges start traces and tie addresses to them,
    /// the booted call ends them.
    pub fn event(&self, who: Who, kind: &Kind) {
        let relevant = matches!(
            kind,
            Kind::DhcpDiscover { .. } | Kind::DhcpAck { .. } | Kind::Booted { .. }
        );
        if !self.on.load(Ordering::Relaxed) || !relevant {
            return;
        }
        let at = now_micros();
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match (who, kind) {
            (
                Who::Mac(mac),
                Kind::DhcpDiscover {
                    pxe, ipxe, arch, ..
                },
            ) => {
                let pools = self.pools.read().unwrap_or_else(|e| e.into_inner());
                let Some(pool) = pools.get(&mac).cloned() else {
                    return;
                };
                drop(pools);
                let image = &pool.image_for(*arch).name;
                let (pool, root) = (&pool.name, &pool.root.to_string());
                let restart = match inner.by_mac.get(&mac) {
                    None => *pxe,
                    Some(o) => *pxe && (!*ipxe || o.ended),
                };
                if restart && let Some(open) = self.create(mac, pool, image, root, at) {
                    inner.by_mac.insert(mac, open);
                    self.open.store(true, Ordering::Relaxed);
                }
                let what = What::Dhcp {
                    msg: "discover".into(),
                    pxe: *pxe,
                    ipxe: *ipxe,
                    arch: None,
                };
                write_op(&mut inner, mac, at, at, what);
            }
            (Who::Mac(mac), Kind::DhcpAck { ip, pxe, ipxe, .. }) => {
                if !inner.by_mac.contains_key(&mac) {
                    return;
                }
                inner.by_ip.insert(*ip, mac);
                let what = What::Dhcp {
                    msg: "request".into(),
                    pxe: *pxe,
                    ipxe: *ipxe,
                    arch: None,
                };
                write_op(&mut inner, mac, at, at, what);
            }
            (who, Kind::Booted { .. }) => {
                let mac = match who {
                    Who::Mac(m) => Some(m),
                    Who::Ip(ip) => inner.by_ip.get(&ip).copied(),
                };
                if let Some(mac) = mac {
                    write_op(&mut inner, mac, at, at, What::Booted);
                    if let Some(o) = inner.by_mac.get_mut(&mac) {
                        o.ended = true;
                        let _ = o.out.flush();
                    }
                }
                let any = inner.by_mac.values().any(|o| !o.ended);
                self.open.store(any, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    /// A request from `ip`, received at `received`, answered now.
    pub fn op(&self, ip: Ipv4Addr, received: Micros, what: What) {
        if !self.wants(ip) {
            return;
        }
        let now = now_micros();
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&mac) = inner.by_ip.get(&ip) {
            write_op(&mut inner, mac, received, now, what);
        }
    }

    fn create(&self, mac: Mac, pool: &str, image: &str, root: &str, at: Micros) -> Option<Open> {
        let stem = mac.to_string().replace(':', "");
        let file = self.dir.join(format!("{stem}-{}.trace", at / 1_000_000));
        let made = std::fs::create_dir_all(&self.dir)
            .and_then(|_| std::fs::File::create(&file))
            .map(std::io::BufWriter::new);
        let mut out = match made {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "trace not started");
                return None;
            }
        };
        let header = Header {
            bootpool_trace: format::VERSION,
            mac: mac.to_string(),
            pool: pool.into(),
            image: image.into(),
            root: root.into(),
            recorded: at as f64 / 1e6,
            note: String::new(),
        };
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string(&header).expect("header serialises")
        );
        self.prune(&stem);
        tracing::info!(%mac, file = %file.display(), "boot trace started");
        Some(Open {
            start: at,
            out,
            flushed: at,
            ended: false,
        })
    }

    /// Deletes all but the newest `KEEP_PER_CLIENT` traces of a client.
    fn prune(&self, stem: &str) {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut mine: Vec<PathBuf> = dir
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(stem) && n.ends_with(".trace"))
            })
            .collect();
        mine.sort();
        let extra = mine.len().saturating_sub(KEEP_PER_CLIENT);
        for p in &mine[..extra] {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The traces kept in `dir` (`state_dir/traces`) of boots of `image` whose root was `root`
/// (`nbd`, `nfs`), newest first (by the header's `recorded`): each file's header alone is
/// read here, so a folder of many clients' traces costs a line a file; `load` reads one whole.
/// Files that are no trace, or of another image or root, are passed over.
pub fn kept(dir: &std::path::Path, image: &str, root: &str) -> Vec<(PathBuf, Header)> {
    use std::io::BufRead as _;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(PathBuf, Header)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "trace"))
        .filter_map(|p| {
            let mut first = String::new();
            let file = std::fs::File::open(&p).ok()?;
            std::io::BufReader::new(file).read_line(&mut first).ok()?;
            let h: Header = serde_json::from_str(first.trim()).ok()?;
            (h.bootpool_trace == format::VERSION && h.image == image && h.root == root)
                .then_some((p, h))
        })
        .collect();
    found.sort_by(|a, b| b.1.recorded.total_cmp(&a.1.recorded));
    found
}

/// One kept trace, whole; `None` when it cannot be read as one (a daemon killed mid-write
/// leaves its last line cut: such a trace is passed over).
pub fn load(path: &std::path::Path) -> Option<format::Trace> {
    let text = std::fs::read_to_string(path).ok()?;
    format::Trace::parse(&text).ok()
}

/// The kept traces of `image`'s NBD boots in `dir`, newest first, each read whole only when
/// the iterator reaches it (`boot::prefetch::recorded_order` takes what it needs).
pub fn kept_nbd(dir: &std::path::Path, image: &str) -> impl Iterator<Item = format::Trace> {
    kept(dir, image, "nbd")
        .into_iter()
        .filter_map(|(path, _)| load(&path))
}

fn write_op(inner: &mut Inner, mac: Mac, received: Micros, answered: Micros, what: What) {
    let Some(o) = inner.by_mac.get_mut(&mac) else {
        return;
    };
    if o.ended {
        return;
    }
    let op = Op {
        t: (received - o.start).max(0) as f64 / 1e6,
        d: (answered - received).max(0) as f64 / 1e6,
        what,
    };
    let _ = o.out.write_all(op.to_line().as_bytes());
    if answered - o.flushed >= 1_000_000 {
        o.flushed = answered;
        let _ = o.out.flush();
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        for o in inner.by_mac.values_mut() {
            let _ = o.out.flush();
        }
    }
}

#[cfg(test)]
mod kept_tests {
    use super::*;

    fn header(image: &str, root: &str, recorded: f64) -> String {
        format!(
            "{{\"bootpool_trace\":1,\"mac\":\"52:54:00:00:00:01\",\"pool\":\"p\",\"image\":\"{image}\",\"root\":\"{root}\",\"recorded\":{recorded}}}\n"
        )
    }

    #[test]
    fn the_kept_traces_of_an_images_nbd_boots_come_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("a-1.trace"), header("demo", "nbd", 1.0)).unwrap();
        std::fs::write(d.join("a-3.trace"), header("demo", "nbd", 3.0)).unwrap();
        std::fs::write(d.join("b-4.trace"), header("other", "nbd", 4.0)).unwrap();
        std::fs::write(d.join("c-5.trace"), header("demo", "nfs", 5.0)).unwrap();
        std::fs::write(d.join("d-6.trace"), "{\"cut\n").unwrap();
        std::fs::write(d.join("e-7.txt"), header("demo", "nbd", 7.0)).unwrap();
        let got: Vec<f64> = kept_nbd(d, "demo").map(|t| t.header.recorded).collect();
        assert_eq!(got, [3.0, 1.0]);
        assert_eq!(kept_nbd(&d.join("none"), "demo").count(), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::format::Trace;

    fn config(state: &std::path::Path, trace: bool) -> Config {
        let text = format!(
            "server:\n  interfaces: [br0]\n  address: 10.77.0.1\n  http: 0.0.0.0:8080\n  \
             state_dir: {}\ndhcp:\n  mode: authoritative\n  subnet: 10.77.0.0/24\n  \
             range: 10.77.0.100-10.77.0.199\n  router: 10.77.0.1\n  lease: 12h\nimages:\n  \
             demo:\n    dir: images/demo\n    store: disk\npools:\n  room:\n    image: demo\n    \
             root: nfs\n    trace: {trace}\n    clients:\n      - {{ macs: \"52:54:00:77:00:10-52:54:00:77:00:3f\" }}\n",
            state.display()
        );
        Config::parse(std::path::Path::new("/etc/bootpool/pools.yaml"), &text).unwrap()
    }

    fn nfs_read(path: &str) -> What {
        What::Nfs {
            proc: "read".into(),
            path: path.into(),
            name: None,
            offset: 0,
            count: 4096,
            bytes: 4096,
            status: 0,
        }
    }

    #[test]
    fn a_reload_that_traces_a_pool_is_followed_from_its_next_discover() {
        let dir = tempfile::tempdir().unwrap();
        let t = Tracer::new(&config(dir.path(), false));
        let mac: Mac = "52:54:00:77:00:10".parse().unwrap();
        let discover = Kind::DhcpDiscover {
            answered: true,
            pool: None,
            pxe: true,
            ipxe: true,
            arch: None,
        };
        t.event(Who::Mac(mac), &discover);
        assert!(!t.open.load(Ordering::Relaxed), "no pool traces yet");
        t.follow(&config(dir.path(), true));
        t.event(Who::Mac(mac), &discover);
        assert!(
            t.open.load(Ordering::Relaxed),
            "the reloaded config traces it"
        );
        t.follow(&config(dir.path(), false));
        assert!(!t.on.load(Ordering::Relaxed));
    }

    #[test]
    fn a_traced_boot_runs_from_its_pxe_discover_to_its_booted_call() {
        let dir = tempfile::tempdir().unwrap();
        let t = Tracer::new(&config(dir.path(), true));
        let mac: Mac = "52:54:00:77:00:10".parse().unwrap();
        let ip = Ipv4Addr::new(10, 77, 0, 100);
        // Nothing is open yet: requests are not even looked at.
        assert!(!t.wants(ip));
        let discover = Kind::DhcpDiscover {
            answered: true,
            pool: None,
            pxe: true,
            ipxe: true,
            arch: None,
        };
        t.event(Who::Mac(mac), &discover);
        let ack = Kind::DhcpAck {
            ip,
            pxe: true,
            ipxe: true,
            pool: "room".into(),
            link: None,
            relayed: None,
        };
        t.event(Who::Mac(mac), &ack);
        assert!(t.wants(ip));
        t.op(ip, now_micros(), nfs_read("/bin/sh"));
        // Another address's request is not this boot's.
        t.op(
            Ipv4Addr::new(10, 77, 0, 101),
            now_micros(),
            nfs_read("/etc/x"),
        );
        let booted = Kind::Booted {
            uptime_s: None,
            root_bytes: None,
        };
        t.event(Who::Ip(ip), &booted);
        // Ended: later requests are not written.
        t.op(ip, now_micros(), nfs_read("/after"));
        assert!(!t.wants(ip));
        drop(t);
        let files: Vec<_> = std::fs::read_dir(dir.path().join("traces"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1);
        let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("525400770010-"), "{name}");
        let trace = Trace::parse(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
        assert_eq!(trace.header.mac, "52:54:00:77:00:10");
        assert_eq!(
            (trace.header.pool.as_str(), trace.header.root.as_str()),
            ("room", "nfs")
        );
        let kinds: Vec<String> = trace
            .ops
            .iter()
            .map(|o| match &o.what {
                What::Dhcp { msg, .. } => msg.clone(),
                What::Nfs { path, .. } => path.clone(),
                What::Booted => "booted".into(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(kinds, ["discover", "request", "/bin/sh", "booted"]);
    }

    #[test]
    fn a_pool_without_trace_keeps_none() {
        let dir = tempfile::tempdir().unwrap();
        let t = Tracer::new(&config(dir.path(), false));
        let mac: Mac = "52:54:00:77:00:10".parse().unwrap();
        let discover = Kind::DhcpDiscover {
            answered: true,
            pool: None,
            pxe: true,
            ipxe: false,
            arch: None,
        };
        t.event(Who::Mac(mac), &discover);
        assert!(!t.wants(Ipv4Addr::new(10, 77, 0, 100)));
        assert!(!dir.path().join("traces").exists());
    }
}

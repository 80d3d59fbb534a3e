//! What a reload may change: the running config and the one re-read compared, the keys that
//! cannot change while the daemon runs refused by name (its sockets, its state folder, what is
//! set up once at start), and what did change, for the reload's log line. Pure: the daemon's
//! reload is `app::Running::reload`, and docs/pools.yaml.5 lists the same keys.

use super::{Config, ConfigError, Netconsole, RootProto, Server};
use std::fmt::Debug;

/// Why a key cannot change while the daemon runs, by YAML path.
const SOCKETS: &str = "a listening socket is bound with it at start";
const AT_START: &str = "it is set up once at start";

/// The keys whose values differ between the running config (`old`, as its file gave it) and
/// `new` but cannot change while the daemon runs, each located in `new`'s file; `console`:
/// whether the console port was bound at start. Empty: `new` may be served as it is.
pub fn refused(old: &Config, new: &Config, console: bool) -> Vec<ConfigError> {
    let mut found = Refusals::default();
    found.server(&old.server, &new.server);
    found.dhcp_and_limits(old, new);
    found.images(old, new);
    found.pools(new, console);
    found
        .keys
        .into_iter()
        .map(|(path, why)| {
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            new.error_at(
                &path,
                format!(
                    "cannot change while bootpool runs ({why}); the running config stays: \
                     restart bootpool to change it"
                ),
            )
        })
        .collect()
}

/// The keys found so far that cannot change while the daemon runs, each with why.
#[derive(Default)]
struct Refusals {
    keys: Vec<(Vec<String>, &'static str)>,
}

impl Refusals {
    /// Notes the key at `path` when its values `a` and `b` differ.
    fn differ(&mut self, path: &[&str], a: &dyn Debug, b: &dyn Debug, why: &'static str) {
        if format!("{a:?}") != format!("{b:?}") {
            self.keys.push((key(path), why));
        }
    }

    /// `server`: what the listeners were bound with and what was set up at start.
    fn server(&mut self, s: &Server, t: &Server) {
        self.differ(
            &["server", "interfaces"],
            &s.interfaces,
            &t.interfaces,
            SOCKETS,
        );
        self.differ(&["server", "address"], &s.address, &t.address, AT_START);
        self.differ(&["server", "links"], &s.links, &t.links, AT_START);
        self.differ(&["server", "address6"], &s.address6, &t.address6, SOCKETS);
        self.differ(&["server", "http"], &s.http, &t.http, SOCKETS);
        self.differ(&["server", "tls"], &s.tls, &t.tls, SOCKETS);
        self.differ(&["server", "tftp"], &s.tftp, &t.tftp, SOCKETS);
        self.differ(
            &["server", "state_dir"],
            &s.state_dir,
            &t.state_dir,
            AT_START,
        );
        // The default database is a file in state_dir: refused once, under state_dir.
        if s.state_dir == t.state_dir {
            self.differ(&["server", "database"], &s.database, &t.database, AT_START);
        }
        self.differ(
            &["server", "retention"],
            &s.retention,
            &t.retention,
            AT_START,
        );
        self.differ(
            &["server", "link_speeds"],
            &s.link_speeds,
            &t.link_speeds,
            AT_START,
        );
        self.differ(
            &["server", "fair_share"],
            &s.fair_share,
            &t.fair_share,
            AT_START,
        );
        let (p, q) = (&s.ports, &t.ports);
        for (name, a, b) in [
            ("dhcp", p.dhcp, q.dhcp),
            ("dhcp6", p.dhcp6, q.dhcp6),
            ("pxe", p.pxe, q.pxe),
            ("tftp", p.tftp, q.tftp),
            ("nfs", p.nfs, q.nfs),
            ("nbd", p.nbd, q.nbd),
            ("portmap", p.portmap, q.portmap),
            ("console", p.console, q.console),
        ] {
            self.differ(&["server", "ports", name], &a, &b, SOCKETS);
        }
    }

    /// `dhcp.mode`, the subnets' uplinks, `dhcp6` and the overlays' budgets in `limits`.
    fn dhcp_and_limits(&mut self, old: &Config, new: &Config) {
        self.differ(&["dhcp", "mode"], &old.dhcp.mode, &new.dhcp.mode, SOCKETS);
        // The pacer shares the rooms' uplinks as it found them at start (docs/subnets.md).
        let uplinks = |c: &Config| -> Vec<(String, u32)> {
            c.dhcp
                .subnets
                .iter()
                .filter_map(|s| Some((s.subnet.to_string(), s.uplink_mbps?)))
                .collect()
        };
        self.differ(
            &["dhcp", "subnets"],
            &uplinks(old),
            &uplinks(new),
            "the rooms' uplinks are shared out by the pacer as it found them at start",
        );
        self.differ(&["dhcp6"], &old.dhcp6, &new.dhcp6, SOCKETS);
        let (l, m) = (&old.limits, &new.limits);
        // The overlays' budgets are sized once (the listeners' caps follow a reload).
        self.differ(
            &["limits", "cow_ram_total"],
            &l.cow_ram_total,
            &m.cow_ram_total,
            AT_START,
        );
        self.differ(
            &["limits", "cow_disk_total"],
            &l.cow_disk_total,
            &m.cow_disk_total,
            AT_START,
        );
    }

    /// The NFS tree of an image an NFS pool served at start is made then (an image added, or
    /// a revision, joins it at its first MOUNT).
    fn images(&mut self, old: &Config, new: &Config) {
        for (name, a) in &old.images {
            let name = name.as_str();
            let Some(b) = new.images.get(name) else {
                continue;
            };
            if !nfs_served(old, name) {
                continue;
            }
            let at = |k: &'static str| ["images", name, k];
            self.differ(&at("dir"), &a.dir, &b.dir, AT_START);
            self.differ(
                &at("root_tree"),
                &a.root_tree_name,
                &b.root_tree_name,
                AT_START,
            );
            self.differ(&at("nfs_export"), &a.nfs_export, &b.nfs_export, AT_START);
            self.differ(&at("store"), &a.store, &b.store, AT_START);
            self.differ(&at("root_squash"), &a.root_squash, &b.root_squash, AT_START);
            self.differ(
                &at("secure_ports"),
                &a.secure_ports,
                &b.secure_ports,
                AT_START,
            );
        }
    }

    /// The console port, bound at start only when a pool sends its console there. (Traced
    /// pools and their clients the recorder's tracer follows: `Tracer::follow`.)
    fn pools(&mut self, new: &Config, console: bool) {
        if !console {
            for (name, pool) in &new.pools {
                if pool.netconsole != Netconsole::Off {
                    self.keys
                        .push((key(&["pools", name, "netconsole"]), SOCKETS));
                }
            }
        }
    }
}

fn key(path: &[&str]) -> Vec<String> {
    path.iter().map(|s| s.to_string()).collect()
}

/// Whether an NFS pool boots `image` (as its image or one of its `arch` ones).
fn nfs_served(config: &Config, image: &str) -> bool {
    config
        .pools
        .values()
        .filter(|p| p.root == RootProto::Nfs)
        .any(|p| p.images().iter().any(|i| i.name == image))
}

/// Whether a pool sends its console (the console port is then bound).
pub fn sends_console(config: &Config) -> bool {
    config
        .pools
        .values()
        .any(|p| p.netconsole != Netconsole::Off)
}

/// What differs between `old` and `new`, section by section, e.g. `pools added: lab-2`,
/// `pools changed: room-101`, `dhcp`, `limits`: the reload's log line. Empty: nothing.
pub fn changes(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    named(&mut out, "pools", &old.pools, &new.pools);
    named(&mut out, "images", &old.images, &new.images);
    for (section, a, b) in [
        (
            "server",
            format!("{:?}", old.server),
            format!("{:?}", new.server),
        ),
        ("dhcp", format!("{:?}", old.dhcp), format!("{:?}", new.dhcp)),
        (
            "limits",
            format!("{:?}", old.limits),
            format!("{:?}", new.limits),
        ),
    ] {
        if a != b {
            out.push(section.to_string());
        }
    }
    out
}

/// A map's entries added, removed and changed, one phrase each that has any.
fn named<T: Debug>(
    out: &mut Vec<String>,
    section: &str,
    old: &std::collections::BTreeMap<String, T>,
    new: &std::collections::BTreeMap<String, T>,
) {
    let list = |names: Vec<&String>| {
        names
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let added: Vec<&String> = new.keys().filter(|k| !old.contains_key(*k)).collect();
    let removed: Vec<&String> = old.keys().filter(|k| !new.contains_key(*k)).collect();
    let changed: Vec<&String> = new
        .iter()
        .filter(|(k, v)| {
            old.get(*k)
                .is_some_and(|o| format!("{o:?}") != format!("{v:?}"))
        })
        .map(|(k, _)| k)
        .collect();
    for (what, names) in [("added", added), ("removed", removed), ("changed", changed)] {
        if !names.is_empty() {
            out.push(format!("{section} {what}: {}", list(names)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const TEXT: &str = "server: { address: 10.77.0.1, http: 0.0.0.0:8080, state_dir: var }
dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.120, lease: 1h }
images:
  demo: { dir: img }
pools:
  room:
    image: demo
    root: nfs
    cmdline: quiet
    clients: [ { macs: \"52:54:00:77:00:00-52:54:00:77:00:0f\" } ]
";

    fn parse(dir: &Path, text: &str) -> Config {
        let file = dir.join("pools.yaml");
        std::fs::write(&file, text).unwrap();
        Config::parse(&file, text).unwrap()
    }

    fn image_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("img")).unwrap();
        dir
    }

    #[test]
    fn pools_clients_cmdlines_and_ranges_may_change_and_are_named() {
        let dir = image_dir();
        let old = parse(dir.path(), TEXT);
        let text = TEXT
            .replace("cmdline: quiet", "cmdline: quiet splash")
            .replace("0.120", "0.150")
            + "  lab:
    image: demo
    root: nbd
    clients: [ { macs: \"52:54:00:77:01:00\" } ]
";
        let new = parse(dir.path(), &text);
        assert_eq!(refused(&old, &new, sends_console(&old)), vec![]);
        assert_eq!(
            changes(&old, &new),
            ["pools added: lab", "pools changed: room", "dhcp"]
        );
        assert!(changes(&old, &old).is_empty());
    }

    #[test]
    fn a_changed_listening_address_state_dir_or_nfs_tree_is_refused_naming_key_and_line() {
        let dir = image_dir();
        std::fs::create_dir_all(dir.path().join("img2")).unwrap();
        let old = parse(dir.path(), TEXT);
        let text = TEXT
            .replace("0.0.0.0:8080", "0.0.0.0:8081")
            .replace("state_dir: var", "state_dir: var2")
            .replace("dir: img }", "dir: img2 }");
        let new = parse(dir.path(), &text);
        let errors: Vec<String> = refused(&old, &new, sends_console(&old))
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].contains("pools.yaml:1:"), "{errors:?}");
        assert!(errors[0].contains("server.http: cannot change while bootpool runs"));
        assert!(errors[1].contains("server.state_dir"), "{errors:?}");
        assert!(errors[2].contains("pools.yaml:4:"), "{errors:?}");
        assert!(errors[2].contains("images.demo.dir"), "{errors:?}");
    }

    #[test]
    fn a_console_wanted_when_none_was_bound_is_refused() {
        let dir = image_dir();
        let old = parse(dir.path(), TEXT);
        let new = parse(
            dir.path(),
            &TEXT.replace("cmdline: quiet", "cmdline: quiet\n    netconsole: true"),
        );
        let errors = refused(&old, &new, sends_console(&old));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "pools.room.netconsole");
        // Bound at start: it may be turned off and on again.
        assert_eq!(refused(&new, &old, true), vec![]);
        assert_eq!(refused(&old, &new, true), vec![]);
    }
}

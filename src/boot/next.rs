//! What a client boots next when an admin said so (`bootpool next-boot`, `POST
//! /api/v1/next-boot`): the target (`local`, `image:NAME`, `revision:NAME@REV`, `memtest`,
//! `menu`, `default`) for a client, a room (a subnet) or a pool, once or until changed; which
//! entry applies to a client (the narrowest: client, then room, then pool), and which once
//! entries it used up. Plain data: the state file is `service/next_boot.rs`'s, the script
//! `script.rs`'s.

use crate::config::names::Rev;
use crate::config::{Mac, Subnet};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// memtest86+ for BIOS, as Debian's package names it (a Linux-protocol kernel iPXE loads).
pub const MEMTEST_BIOS: &str = "memtest86+x64.bin";
/// memtest86+ for x64 UEFI, an EFI application.
pub const MEMTEST_UEFI: &str = "memtest86+x64.efi";

/// What a client boots next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The firmware's next boot device: iPXE's `sanboot` of the first disk on BIOS, `exit`
    /// back to the firmware on UEFI.
    Local,
    /// Another image of the config (its active revision).
    Image(String),
    /// One revision of an image, whatever is active.
    Revision(String, Rev),
    /// memtest86+ (`server.memtest`).
    Memtest,
    /// An iPXE menu with a timeout: the pool's image, the local disk, memtest.
    Menu,
    /// What the pool boots: an entry saying so overrides a wider one.
    Default,
}

impl FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> Result<Target, String> {
        let bad = || {
            format!(
                "`{s}` is not a boot target: local, image:NAME, revision:NAME@REV, memtest, menu \
                 or default"
            )
        };
        Ok(match s {
            "local" => Target::Local,
            "memtest" => Target::Memtest,
            "menu" => Target::Menu,
            "default" => Target::Default,
            _ => {
                if let Some(name) = s.strip_prefix("image:") {
                    if name.is_empty() || name.contains(['@', '/']) {
                        return Err(bad());
                    }
                    Target::Image(name.to_string())
                } else if let Some(rest) = s.strip_prefix("revision:") {
                    let (name, rev) = rest.split_once('@').ok_or_else(bad)?;
                    let rev = Rev::new(rev).ok_or_else(|| {
                        format!("`{s}`: `{rev}` is not a revision id (hex, as `bootpool image list` shows)")
                    })?;
                    if name.is_empty() || name.contains('/') {
                        return Err(bad());
                    }
                    Target::Revision(name.to_string(), rev)
                } else {
                    return Err(bad());
                }
            }
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Local => f.write_str("local"),
            Target::Image(name) => write!(f, "image:{name}"),
            Target::Revision(name, rev) => write!(f, "revision:{name}@{rev}"),
            Target::Memtest => f.write_str("memtest"),
            Target::Menu => f.write_str("menu"),
            Target::Default => f.write_str("default"),
        }
    }
}

impl Serialize for Target {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Target {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Target, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// Whom an entry is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Client(Mac),
    /// The clients whose address is in this subnet (one of `dhcp.subnets`).
    Room(Subnet),
    Pool(String),
}

impl Scope {
    /// How wide it is: a narrower entry wins over a wider one.
    fn width(&self) -> u8 {
        match self {
            Scope::Client(_) => 0,
            Scope::Room(_) => 1,
            Scope::Pool(_) => 2,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Client(mac) => write!(f, "client {mac}"),
            Scope::Room(subnet) => write!(f, "room {subnet}"),
            Scope::Pool(pool) => write!(f, "pool {pool}"),
        }
    }
}

/// How a scope is kept and shown: `{"client": MAC}`, `{"room": SUBNET}` or `{"pool": NAME}`.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
enum ScopeText {
    Client(String),
    Room(String),
    Pool(String),
}

impl Serialize for Scope {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Scope::Client(mac) => ScopeText::Client(mac.to_string()),
            Scope::Room(subnet) => ScopeText::Room(subnet.to_string()),
            Scope::Pool(pool) => ScopeText::Pool(pool.clone()),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Scope, D::Error> {
        use serde::de::Error;
        Ok(match ScopeText::deserialize(d)? {
            ScopeText::Client(mac) => Scope::Client(mac.parse().map_err(D::Error::custom)?),
            ScopeText::Room(subnet) => Scope::Room(subnet.parse().map_err(D::Error::custom)?),
            ScopeText::Pool(pool) => Scope::Pool(pool),
        })
    }
}

/// One thing an admin said: `scope` boots `target` next, at its next boot only (`once`) or
/// until changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub scope: Scope,
    pub target: Target,
    pub once: bool,
    /// When it was said, Unix seconds.
    pub set_at: i64,
    /// Who said it (`admin`: the admin token).
    pub by: String,
    /// The clients whose boot already took a `once` entry of a room or a pool: each client
    /// takes it once.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "macs")]
    pub used: Vec<Mac>,
}

impl Entry {
    /// How the record and the log say it: `local, once, set by admin at T (room 10.0.0.0/24)`.
    pub fn sentence(&self) -> String {
        format!(
            "{}, {}, set by {} at {} ({})",
            self.target,
            if self.once { "once" } else { "until changed" },
            self.by,
            self.set_at,
            self.scope
        )
    }
}

/// A list of MACs as their text.
mod macs {
    use crate::config::Mac;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(macs: &[Mac], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(macs.iter().map(|m| m.to_string()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Mac>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|m| m.parse().map_err(serde::de::Error::custom))
            .collect()
    }
}

/// Everything said and still standing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextBoots {
    pub entries: Vec<Entry>,
}

impl NextBoots {
    /// Says `entry`, in place of what its scope said before. `default` until changed is no
    /// entry at all: the scope boots what it would without one.
    pub fn set(&mut self, entry: Entry) {
        self.entries.retain(|e| e.scope != entry.scope);
        if entry.target != Target::Default || entry.once {
            self.entries.push(entry);
        }
    }

    /// The entry that applies to the client `mac` of `pool`, at `ip` (its leased address, if
    /// it has one): the narrowest whose scope holds it, skipping once entries it used up.
    pub fn for_client(&self, mac: Mac, ip: Option<Ipv4Addr>, pool: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .filter(|e| match &e.scope {
                Scope::Client(m) => *m == mac,
                Scope::Room(subnet) => ip.is_some_and(|ip| subnet.contains(ip)),
                Scope::Pool(p) => p == pool,
            })
            .filter(|e| !(e.once && e.used.contains(&mac)))
            .min_by_key(|e| e.scope.width())
    }

    /// The client `mac`'s boot took the entry of `scope`: a once entry is used up (a
    /// client's removed; a room's or a pool's noted for this client). True if anything
    /// changed.
    pub fn consume(&mut self, mac: Mac, scope: &Scope) -> bool {
        let Some(i) = self
            .entries
            .iter()
            .position(|e| e.scope == *scope && e.once)
        else {
            return false;
        };
        if matches!(scope, Scope::Client(_)) {
            self.entries.remove(i);
        } else if !self.entries[i].used.contains(&mac) {
            self.entries[i].used.push(mac);
        } else {
            return false;
        }
        true
    }
}

/// A client's firmware, as far as the script needs it: what `local` and `memtest` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Firmware {
    Bios,
    Uefi,
    /// It never said (option 93): the script asks iPXE (`${platform}`).
    Unknown,
}

impl Firmware {
    /// From option 93 as kept in the client's lease.
    pub fn of(arch: Option<u16>) -> Firmware {
        match arch {
            Some(crate::proto::dhcp::arch::BIOS) => Firmware::Bios,
            Some(_) => Firmware::Uefi,
            None => Firmware::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(last: u8) -> Mac {
        format!("52:54:00:77:00:{last:02x}").parse().unwrap()
    }

    fn entry(scope: Scope, target: &str, once: bool) -> Entry {
        Entry {
            scope,
            target: target.parse().unwrap(),
            once,
            set_at: 1_800_000_000,
            by: "admin".into(),
            used: Vec::new(),
        }
    }

    #[test]
    fn targets_read_back_as_written_and_bad_ones_are_named() {
        for t in [
            "local",
            "image:demo",
            "revision:demo@0123456789ab",
            "memtest",
            "menu",
            "default",
        ] {
            assert_eq!(t.parse::<Target>().unwrap().to_string(), t);
        }
        for bad in ["", "disk", "image:", "revision:demo", "image:a/b"] {
            let e = bad.parse::<Target>().unwrap_err();
            assert!(e.contains("not a boot target"), "{bad}: {e}");
        }
        let e = "revision:demo@XYZ".parse::<Target>().unwrap_err();
        assert!(e.contains("not a revision id"), "{e}");
    }

    /// Client over room over pool; a once entry is taken once per client, a client's is gone
    /// once taken, and then the wider one shows through.
    #[test]
    fn the_narrowest_entry_applies_and_once_is_taken_once() {
        let room: Subnet = "10.77.0.0/24".parse().unwrap();
        let ip = Some(Ipv4Addr::new(10, 77, 0, 150));
        let mut n = NextBoots::default();
        n.set(entry(Scope::Pool("room".into()), "memtest", false));
        n.set(entry(Scope::Room(room), "local", true));
        n.set(entry(Scope::Client(mac(1)), "menu", true));
        let target = |n: &NextBoots, m, ip| n.for_client(m, ip, "room").map(|e| e.target.clone());
        assert_eq!(target(&n, mac(1), ip), Some(Target::Menu));
        assert_eq!(target(&n, mac(2), ip), Some(Target::Local));
        assert_eq!(target(&n, mac(2), None), Some(Target::Memtest));
        assert_eq!(n.for_client(mac(2), None, "other"), None);
        assert!(n.consume(mac(1), &Scope::Client(mac(1))));
        assert_eq!(target(&n, mac(1), ip), Some(Target::Local));
        assert!(n.consume(mac(1), &Scope::Room(room)));
        assert!(!n.consume(mac(1), &Scope::Room(room)));
        assert_eq!(target(&n, mac(1), ip), Some(Target::Memtest));
        assert_eq!(target(&n, mac(2), ip), Some(Target::Local));
        // Until changed is never used up.
        assert!(!n.consume(mac(1), &Scope::Pool("room".into())));
        assert_eq!(target(&n, mac(1), ip), Some(Target::Memtest));
        // `default` until changed clears the scope; once, it overrides a wider entry once.
        n.set(entry(Scope::Pool("room".into()), "default", false));
        assert_eq!(target(&n, mac(1), ip), None);
        n.set(entry(Scope::Client(mac(3)), "default", true));
        assert_eq!(target(&n, mac(3), ip), Some(Target::Default));
    }

    #[test]
    fn the_state_reads_back_as_written() {
        let mut n = NextBoots::default();
        n.set(entry(
            Scope::Client(mac(1)),
            "revision:demo@00000000ff00",
            true,
        ));
        n.set(entry(
            Scope::Room("10.77.0.0/24".parse().unwrap()),
            "image:other",
            false,
        ));
        n.entries[1].used.push(mac(4));
        let text = serde_json::to_string(&n).unwrap();
        assert!(
            text.contains("{\"client\":\"52:54:00:77:00:01\"}"),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<NextBoots>(&text).unwrap(), n);
        assert_eq!(
            n.entries[0].sentence(),
            "revision:demo@00000000ff00, once, set by admin at 1800000000 (client 52:54:00:77:00:01)"
        );
    }
}

//! Who may use a root export, NFS and NBD alike: the clients of the pools that boot that image
//! over that protocol, and no one else. A client is the MAC that holds its address in the lease
//! table (`service::identity`), never what the event stream last said. Plain data in, a yes or
//! no out.

use crate::config::{Config, Mac, RootProto};
use std::net::{IpAddr, Ipv4Addr};

/// A server on a loopback address is a test or a probe on its own host, and `ip` one of its
/// loopback clients: trusted without a lease (by the root rule and the API alike).
pub fn loopback_test(config: &Config, ip: Ipv4Addr) -> bool {
    ip.is_loopback() && config.server.address.is_loopback()
}

/// Whether the client at `ip`, held by `holder` (if anyone holds it), may attach or mount image
/// `image` over `root`. A server on a loopback address is a test or a probe on its own host:
/// every loopback client is its client. A production server's own address is not loopback, so
/// a local user there is a stranger too.
pub fn root_allowed(
    config: &Config,
    root: RootProto,
    image: &str,
    ip: Ipv4Addr,
    holder: Option<Mac>,
) -> bool {
    if loopback_test(config, ip) {
        return true;
    }
    holder
        .and_then(|mac| config.member(mac))
        .is_some_and(|m| m.pool.root == root && m.boots(image))
}

/// Whether revision `rev` of image `image` may go to the client at `ip`, held by `holder`,
/// that `root_allowed` lets use the image: a revision some client entry pins
/// (`clients[].revision`, a canary) is its machines' alone until it is `active` (the image's
/// active revision, which the caller read); every other revision is anyone's the image is.
pub fn revision_allowed(
    config: &Config,
    image: &str,
    rev: &str,
    active: Option<&str>,
    ip: Ipv4Addr,
    holder: Option<Mac>,
) -> bool {
    if loopback_test(config, ip) || active == Some(rev) {
        return true;
    }
    let pins = |pool: &crate::config::Pool, e: &crate::config::ClientEntry| {
        e.revision.as_deref() == Some(rev) && e.image.as_ref().unwrap_or(&pool.image).name == image
    };
    let pinned = config
        .pools
        .values()
        .any(|p| p.clients.iter().any(|e| pins(p, e)));
    !pinned
        || holder
            .and_then(|mac| config.member(mac))
            .is_some_and(|m| pins(m.pool, m.entry))
}

/// Whom a service is for: the pools that boot over one root protocol (NFS, NBD), or every
/// pool (TFTP, HTTP: loaders, boot files and scripts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServesFor {
    Root(RootProto),
    AnyPool,
}

/// Whether the address `ip`, held by `holder` (if anyone holds it), is a client of a service
/// that serves `serves`: a loopback client of a loopback test server, or the holder of a lease
/// (or proxy binding, or fixed address) of a pool the service is for. Everyone else is a
/// stranger, who gets no lasting slot of the service (`service::bounds::Slots`).
pub fn is_client(config: &Config, serves: ServesFor, ip: IpAddr, holder: Option<Mac>) -> bool {
    let loopback = match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    };
    if loopback && config.server.address.is_loopback() {
        return true;
    }
    let Some(member) = holder.and_then(|mac| config.member(mac)) else {
        return false;
    };
    match serves {
        ServesFor::AnyPool => true,
        ServesFor::Root(root) => member.pool.root == root,
    }
}

/// Whether a root connection (NFS, NBD) reached the server on one of its links: `local`, the
/// address it was made to, is `server.address`, another of `server.links` or
/// `server.address6`. Roots are served to the rooms on those links, never through an address
/// of the campus side. A loopback address is reached only from the server's own host; who
/// may use a root through it is `is_client`'s answer, as for everyone (a local user of a
/// production server is a stranger).
pub fn on_a_link(config: &Config, local: IpAddr) -> bool {
    let s = &config.server;
    let v4 = match local {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(v6) => v6.to_ipv4_mapped(),
    };
    match (v4, local) {
        (Some(v4), _) => v4 == s.address || s.links.contains(&v4) || v4.is_loopback(),
        (None, IpAddr::V6(v6)) => s.address6 == Some(v6) || v6.is_loopback(),
        (None, IpAddr::V4(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(address: &str) -> Config {
        config_in(address, "10.0.0")
    }

    /// The config with the server at `address` and the clients in `net`.0/8.
    fn config_in(address: &str, net: &str) -> Config {
        let text = format!(
            "\
server:
  address: {address}
  http: 127.0.0.1:0
  state_dir: var/
  loaders: loaders/
dhcp:
  mode: authoritative
  subnet: {net}.0/8
  range: {net}.100-{net}.199
  lease: 1h
images:
  a: {{ dir: images/a, store: disk }}
  b: {{ dir: images/b, store: disk }}
pools:
  room-a:
    image: a
    root: nfs
    clients:
      - {{ macs: \"52:54:00:00:00:00-52:54:00:00:00:0f\" }}
      - {{ mac: \"52:54:00:00:01:00\", ip: {net}.50 }}
  room-b-nbd:
    image: b
    root: nbd
    arch: {{ arm64: {{ image: a }} }}
    clients:
      - {{ macs: \"52:54:00:00:02:00-52:54:00:00:02:0f\" }}
"
        );
        Config::parse(Path::new("/tmp/pools.yaml"), &text).unwrap()
    }

    #[test]
    fn only_the_pools_of_the_image_over_that_protocol() {
        let c = config("10.0.0.1");
        let ip = Ipv4Addr::new(10, 0, 0, 120);
        let mac = |s: &str| Some(s.parse::<Mac>().unwrap());
        let nfs = |image, holder| root_allowed(&c, RootProto::Nfs, image, ip, holder);
        let nbd = |image, holder| root_allowed(&c, RootProto::Nbd, image, ip, holder);
        assert!(nfs("a", mac("52:54:00:00:00:05")));
        // Another image, the other protocol, a stranger, no holder at all.
        assert!(!nfs("b", mac("52:54:00:00:00:05")));
        assert!(!nbd("a", mac("52:54:00:00:00:05")));
        assert!(!nfs("b", mac("52:54:00:00:02:05")));
        assert!(nbd("b", mac("52:54:00:00:02:05")));
        // A pool's per-architecture image is its image too, over its protocol only.
        assert!(nbd("a", mac("52:54:00:00:02:05")));
        assert!(!nfs("a", mac("52:54:00:00:02:05")));
        assert!(!nfs("a", mac("52:54:00:99:00:05")));
        assert!(!nfs("a", None));
        // Loopback only when the server is on loopback.
        assert!(!root_allowed(
            &c,
            RootProto::Nfs,
            "a",
            Ipv4Addr::LOCALHOST,
            None
        ));
        assert!(root_allowed(
            &config_in("127.0.0.1", "127.0.0"),
            RootProto::Nfs,
            "a",
            Ipv4Addr::LOCALHOST,
            None
        ));
    }

    /// A client entry's own image is its machines' alone; a revision an entry pins (a canary)
    /// is its machines' alone until it is the active one; other revisions are the pool's.
    #[test]
    fn an_entrys_own_image_and_pinned_revision_are_its_machines_alone() {
        let yaml = "\
server: { address: 10.0.0.1, http: 127.0.0.1:0 }
dhcp: { subnet: 10.0.0.0/8, range: 10.0.0.100-10.0.0.199 }
images: { a: { dir: images/a }, b: { dir: images/b } }
pools:
  room-a:
    image: a
    clients:
      - { mac: \"52:54:00:00:01:00\" }
      - { mac: \"52:54:00:00:01:01\", revision: 0123456789ab }
      - { mac: \"52:54:00:00:01:02\", image: b, cmdline: quiet }
";
        let c = Config::parse(Path::new("/tmp/pools.yaml"), yaml).unwrap();
        let ip = Ipv4Addr::new(10, 0, 0, 120);
        let mac = |s: &str| Some(s.parse::<Mac>().unwrap());
        let (plain, pinned, own) = (
            mac("52:54:00:00:01:00"),
            mac("52:54:00:00:01:01"),
            mac("52:54:00:00:01:02"),
        );
        assert!(root_allowed(&c, RootProto::Nfs, "b", ip, own));
        assert!(!root_allowed(&c, RootProto::Nfs, "b", ip, plain));
        assert!(root_allowed(&c, RootProto::Nfs, "a", ip, own));
        let rev = |r, active, holder| revision_allowed(&c, "a", r, active, ip, holder);
        assert!(rev("0123456789ab", None, pinned));
        assert!(!rev("0123456789ab", None, plain));
        assert!(!rev("0123456789ab", Some("ba9876543210"), plain));
        assert!(rev("0123456789ab", Some("0123456789ab"), plain));
        assert!(rev("ba9876543210", Some("0123456789ab"), plain));
        assert!(rev("ba9876543210", None, pinned));
    }

    #[test]
    fn clients_of_a_service_hold_a_lease_of_a_pool_it_is_for() {
        let c = config("10.0.0.1");
        let ip: IpAddr = "10.0.0.120".parse().unwrap();
        let mac = |s: &str| Some(s.parse::<Mac>().unwrap());
        let nfs = ServesFor::Root(RootProto::Nfs);
        let nbd = ServesFor::Root(RootProto::Nbd);
        assert!(is_client(&c, nfs, ip, mac("52:54:00:00:00:05")));
        assert!(!is_client(&c, nbd, ip, mac("52:54:00:00:00:05")));
        assert!(is_client(&c, nbd, ip, mac("52:54:00:00:02:05")));
        assert!(is_client(
            &c,
            ServesFor::AnyPool,
            ip,
            mac("52:54:00:00:02:05")
        ));
        // No lease, or a MAC no pool lists: a stranger to every service.
        assert!(!is_client(&c, ServesFor::AnyPool, ip, None));
        assert!(!is_client(
            &c,
            ServesFor::AnyPool,
            ip,
            mac("52:54:00:99:00:05")
        ));
        // Loopback only when the server is on loopback, IPv4-mapped too.
        let lo: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert!(!is_client(&c, nfs, lo, None));
        assert!(is_client(&config_in("127.0.0.1", "127.0.0"), nfs, lo, None));
    }

    #[test]
    fn roots_are_reached_only_on_the_servers_own_addresses() {
        let c = config("10.0.0.1");
        assert!(on_a_link(&c, "10.0.0.1".parse().unwrap()));
        assert!(on_a_link(&c, "::ffff:10.0.0.1".parse().unwrap()));
        // The campus side.
        assert!(!on_a_link(&c, "192.0.2.7".parse().unwrap()));
        assert!(!on_a_link(&c, "10.0.0.2".parse().unwrap()));
        // Loopback: only the server's own host reaches it.
        assert!(on_a_link(&c, "127.0.0.1".parse().unwrap()));
        assert!(on_a_link(&c, "::1".parse().unwrap()));
    }
}

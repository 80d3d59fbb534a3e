//! Who may use an NFS export: the clients of the pools that boot that image over NFS. A client
//! is known by its address; its MAC comes from the lease it was given (or from a fixed `ip:` in
//! a pool's client entry). Plain data in, a yes or no out.

use crate::config::{Config, Mac, RootProto};
use std::net::Ipv4Addr;

/// Whether `ip` (whose lease names `mac`, if any) may mount and read image `image`.
/// Loopback is allowed when the server itself is on loopback (tests, `bootpool lab` probes).
pub fn nfs_allowed(config: &Config, image: &str, ip: Ipv4Addr, mac: Option<Mac>) -> bool {
    if ip.is_loopback() && config.server.address.is_loopback() {
        return true;
    }
    config
        .pools
        .values()
        .filter(|p| p.root == RootProto::Nfs && p.image.name == image)
        .flat_map(|p| &p.clients)
        .any(|e| mac.is_some_and(|m| e.macs.contains(m)) || e.ip == Some(ip))
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
    clients:
      - {{ macs: \"52:54:00:00:02:00-52:54:00:00:02:0f\" }}
"
        );
        Config::parse(Path::new("/tmp/pools.yaml"), &text).unwrap()
    }

    #[test]
    fn only_the_pool_of_the_image_over_nfs() {
        let c = config("10.0.0.1");
        let ip = Ipv4Addr::new(10, 0, 0, 120);
        let mac = |s: &str| Some(s.parse::<Mac>().unwrap());
        assert!(nfs_allowed(&c, "a", ip, mac("52:54:00:00:00:05")));
        // Another image, an NBD pool, a stranger, no lease at all.
        assert!(!nfs_allowed(&c, "b", ip, mac("52:54:00:00:00:05")));
        assert!(!nfs_allowed(&c, "b", ip, mac("52:54:00:00:02:05")));
        assert!(!nfs_allowed(&c, "a", ip, mac("52:54:00:99:00:05")));
        assert!(!nfs_allowed(&c, "a", ip, None));
        // A fixed address in the pool, even before its lease is seen.
        assert!(nfs_allowed(&c, "a", Ipv4Addr::new(10, 0, 0, 50), None));
        // Loopback only when the server is on loopback.
        assert!(!nfs_allowed(&c, "a", Ipv4Addr::LOCALHOST, None));
        assert!(nfs_allowed(
            &config_in("127.0.0.1", "127.0.0"),
            "a",
            Ipv4Addr::LOCALHOST,
            None
        ));
    }
}

//! Who may use a root export, NFS and NBD alike: the clients of the pools that boot that image
//! over that protocol, and no one else. A client is the MAC that holds its address in the lease
//! table (`service::identity`), never what the event stream last said. Plain data in, a yes or
//! no out.

use crate::config::{Config, Mac, RootProto};
use std::net::Ipv4Addr;

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
        .is_some_and(|m| m.pool.root == root && m.pool.images().iter().any(|i| i.name == image))
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
}

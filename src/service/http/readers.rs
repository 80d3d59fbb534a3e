//! Who may read the dashboard, the read API, the consoles and /metrics (docs/security.md, "The
//! API"): the rule, apart from the tokens' parsing (`guard.rs`) and from the routes.
//!
//! Without the read token, a request is read from the server host itself (loopback, or an
//! address of this network namespace: the lab, the storm, curl on the server) or from
//! `server.admin_networks`, never from a client subnet (`dhcp`'s subnets, which the admin
//! networks do not open even when they contain one), and /metrics from anywhere with
//! `server.metrics_open`. A server with a read token and no admin network asks the token of
//! everyone, its own host too (as before there were admin networks).

use crate::config::Config;
use std::net::IpAddr;

/// Why a request that carries no read token may, or may not, be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// The server host itself.
    Host,
    /// The server host, when a read token is set and no admin network: the token or nothing.
    HostWithToken,
    /// An address of `server.admin_networks`.
    AdminNetwork,
    /// /metrics with `server.metrics_open`.
    OpenMetrics,
    /// An address of a client subnet (`dhcp`'s subnets): the read token or nothing.
    Client,
    /// Anyone else.
    Elsewhere,
}

impl Reader {
    pub fn may_read(self) -> bool {
        matches!(
            self,
            Reader::Host | Reader::AdminNetwork | Reader::OpenMetrics
        )
    }
}

/// Who `peer` is to the read side, for a request of `path`; `own` says whether an address is
/// one of this host's (`host_holds`).
pub fn reader(config: &Config, peer: IpAddr, path: &str, own: impl Fn(IpAddr) -> bool) -> Reader {
    let peer = match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    };
    if path == "/metrics" && config.server.metrics_open {
        return Reader::OpenMetrics;
    }
    if peer.is_loopback() || Some(peer) == config.server.address6.map(IpAddr::V6) || own(peer) {
        let s = &config.server;
        return if s.read_token.is_none() || !s.admin_networks.is_empty() {
            Reader::Host
        } else {
            Reader::HostWithToken
        };
    }
    let IpAddr::V4(v4) = peer else {
        return Reader::Elsewhere;
    };
    if config.dhcp.subnet_of(v4).is_some() {
        return Reader::Client;
    }
    if config.server.admin_networks.iter().any(|n| n.contains(v4)) {
        return Reader::AdminNetwork;
    }
    Reader::Elsewhere
}

/// Who reads the dashboard and API under `config`, and how to open them further: the
/// daemon's startup log line.
pub fn access_sentence(config: &Config) -> String {
    let s = &config.server;
    let nets: Vec<String> = s.admin_networks.iter().map(ToString::to_string).collect();
    let mut line = if nets.is_empty() {
        "dashboard, API and consoles read from this host only (loopback and its own addresses)"
            .to_string()
    } else {
        format!(
            "dashboard, API and consoles read from this host and server.admin_networks [{}], never from a client subnet",
            nets.join(", ")
        )
    };
    match (&s.read_token, nets.is_empty()) {
        (Some(_), true) => {
            line = "dashboard, API and consoles read with server.read_token only, from this host too (server.admin_networks opens it and the networks it lists)".to_string();
        }
        (Some(_), false) => line.push_str(", and with server.read_token from anywhere"),
        (None, true) => line.push_str(
            "; to read them from elsewhere, set server.admin_networks: [YOUR_SUBNET] or server.read_token (docs/security.md)",
        ),
        (None, false) => line.push_str("; clients read them only with server.read_token"),
    }
    line.push_str(if s.metrics_open {
        "; /metrics open to anyone (server.metrics_open)"
    } else {
        "; /metrics likewise (server.metrics_open: true opens it to anyone)"
    });
    line
}

/// Whether this network namespace holds `ip` (`getifaddrs`): a connection from it came from
/// the server host.
pub fn host_holds(ip: IpAddr) -> bool {
    let IpAddr::V4(v4) = ip else {
        return false;
    };
    crate::sys::sock::ipv4_addresses().is_ok_and(|all| all.iter().any(|(_, a)| *a == v4))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(server: &str) -> Config {
        let text = format!(
            "server:\n  address: 10.77.0.1\n  http: 0.0.0.0:8080\n  state_dir: var/\n{server}\
             dhcp:\n  mode: authoritative\n  subnet: 10.77.0.0/24\n  range: 10.77.0.100-10.77.0.199\n\
             images:\n  demo: {{ dir: images/demo }}\n\
             pools:\n  room:\n    image: demo\n    clients: [{{ mac: \"52:54:00:77:00:01\" }}]\n"
        );
        Config::parse(std::path::Path::new("/etc/bootpool/pools.yaml"), &text).unwrap()
    }

    fn who(c: &Config, ip: &str, path: &str) -> Reader {
        reader(c, ip.parse().unwrap(), path, |a| {
            a == "10.77.0.1".parse::<IpAddr>().unwrap()
        })
    }

    /// The safe default: the host reads; the clients' subnets and everyone else do not.
    #[test]
    fn by_default_only_the_host_reads() {
        let c = config("");
        assert_eq!(who(&c, "127.0.0.1", "/api/v1/boots"), Reader::Host);
        assert_eq!(who(&c, "::1", "/api/v1/boots"), Reader::Host);
        assert_eq!(who(&c, "::ffff:127.0.0.1", "/"), Reader::Host);
        assert_eq!(who(&c, "10.77.0.1", "/api/v1/boots"), Reader::Host);
        assert_eq!(who(&c, "10.77.0.50", "/api/v1/boots"), Reader::Client);
        assert_eq!(who(&c, "10.77.0.9", "/metrics"), Reader::Client);
        assert_eq!(who(&c, "192.168.1.9", "/api/v1/boots"), Reader::Elsewhere);
        assert_eq!(who(&c, "fd00::9", "/api/v1/boots"), Reader::Elsewhere);
        assert!(!Reader::Client.may_read() && !Reader::Elsewhere.may_read());
        // A read token and no admin network: the host needs the token too; with an admin
        // network it reads without.
        let c = config("  read_token: 0123456789abcdef-read\n");
        assert_eq!(who(&c, "127.0.0.1", "/api/v1/boots"), Reader::HostWithToken);
        assert!(!Reader::HostWithToken.may_read());
        let c = config("  read_token: 0123456789abcdef-read\n  admin_networks: [192.168.1.0/24]\n");
        assert_eq!(who(&c, "127.0.0.1", "/api/v1/boots"), Reader::Host);
    }

    /// Admin networks open to their addresses, never to a client subnet inside them;
    /// `metrics_open` opens /metrics alone.
    #[test]
    fn admin_networks_and_open_metrics() {
        let c = config("  admin_networks: [192.168.1.0/24, 10.0.0.0/8]\n  metrics_open: true\n");
        assert_eq!(
            who(&c, "192.168.1.9", "/api/v1/boots"),
            Reader::AdminNetwork
        );
        assert_eq!(who(&c, "10.1.2.3", "/"), Reader::AdminNetwork);
        assert_eq!(who(&c, "10.77.0.50", "/api/v1/boots"), Reader::Client);
        assert_eq!(who(&c, "172.16.0.1", "/api/v1/boots"), Reader::Elsewhere);
        assert_eq!(who(&c, "10.77.0.50", "/metrics"), Reader::OpenMetrics);
        assert_eq!(who(&c, "172.16.0.1", "/metrics"), Reader::OpenMetrics);
        assert!(
            access_sentence(&c)
                .contains("[192.168.1.0/24, 10.0.0.0/8], never from a client subnet")
        );
        assert!(access_sentence(&config("")).contains("set server.admin_networks"));
    }
}

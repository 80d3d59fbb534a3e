//! `server.admin_networks` and `server.metrics_open`, checked: who may read the dashboard, the
//! API, consoles and /metrics without the read token (`service::http::readers` applies it).

use super::check::Checker;
use super::error::ConfigError;
use super::locate::Step::{Index, Key};
use super::raw;
use super::values::Subnet;

impl Checker<'_> {
    /// `server.admin_networks`: IPv4 subnets (`10.1.0.0/16`); an IPv6 reader uses the read
    /// token. Absent: none (the server host alone reads without the token).
    pub(super) fn check_admin_networks(&self, s: &raw::Server) -> Result<Vec<Subnet>, ConfigError> {
        s.admin_networks
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, n)| {
                n.parse::<Subnet>().map_err(|e| {
                    let hint = if n.contains(':') {
                        " (IPv4 subnets only: read over IPv6 with server.read_token)".to_string()
                    } else {
                        String::new()
                    };
                    self.err(
                        &[Key("server"), Key("admin_networks"), Index(i)],
                        format!("{e}{hint}"),
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    fn parse(server: &str) -> Result<Config, crate::config::ConfigError> {
        let text = format!(
            "server:\n  address: 10.77.0.1\n  http: 0.0.0.0:8080\n  state_dir: var/\n{server}\
             dhcp:\n  mode: authoritative\n  subnet: 10.77.0.0/24\n  range: 10.77.0.100-10.77.0.199\n\
             images:\n  demo: {{ dir: images/demo }}\n\
             pools:\n  room:\n    image: demo\n    clients: [{{ mac: \"52:54:00:77:00:01\" }}]\n"
        );
        Config::parse(Path::new("/etc/bootpool/pools.yaml"), &text)
    }

    /// Absent: no admin network, /metrics closed; a bad subnet is refused at its place.
    #[test]
    fn admin_networks_are_ipv4_subnets() {
        let c = parse("").unwrap();
        assert!(c.server.admin_networks.is_empty());
        assert!(!c.server.metrics_open);
        let c = parse("  admin_networks: [192.168.1.0/24]\n  metrics_open: true\n").unwrap();
        assert_eq!(
            c.server.admin_networks,
            vec!["192.168.1.0/24".parse().unwrap()]
        );
        assert!(c.server.metrics_open);
        let e = parse("  admin_networks: [192.168.1.0/24, 192.168.2.1/33]\n").unwrap_err();
        assert_eq!(e.path, "server.admin_networks[1]", "{e}");
        assert_eq!(e.line, Some(5), "{e}");
        let e = parse("  admin_networks: [\"fd00::/64\"]\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("read over IPv6 with server.read_token"),
            "{e}"
        );
    }
}

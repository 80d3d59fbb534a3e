//! `server.placement`, checked: in a site, whether the member that answers a client's DHCP
//! places its boot on its own links (`owner`, the default) or spreads its boots over every
//! live member's (`site`: docs/site.md, "Ownership and placement").

use super::check::Checker;
use super::error::ConfigError;
use super::locate::Step::Key;
use super::model::SitePlacement;
use super::raw;

impl Checker<'_> {
    /// `server.placement`: `site` or `owner`; absent, `owner` (a server alone has its own
    /// links only either way).
    pub(super) fn check_placement(&self, s: &raw::Server) -> Result<SitePlacement, ConfigError> {
        match s.placement.as_deref() {
            Some("site") => Ok(SitePlacement::Site),
            None | Some("owner") => Ok(SitePlacement::Owner),
            Some(other) => Err(self.err(
                &[Key("server"), Key("placement")],
                format!(
                    "unknown placement {other:?}: `site` (the boots spread over every live \
                     member's links) or `owner` (on the links of the member that answers it)"
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, SitePlacement};
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

    #[test]
    fn owner_by_default_site_when_asked_anything_else_refused_at_its_line() {
        assert_eq!(parse("").unwrap().server.placement, SitePlacement::Owner);
        let c = parse("  placement: site\n").unwrap();
        assert_eq!(c.server.placement, SitePlacement::Site);
        let c = parse("  placement: owner\n").unwrap();
        assert_eq!(c.server.placement, SitePlacement::Owner);
        let e = parse("  placement: anywhere\n").unwrap_err().to_string();
        assert!(e.contains("pools.yaml:5"), "{e}");
        assert!(e.contains("server.placement"), "{e}");
        assert!(e.contains("\"anywhere\""), "{e}");
    }
}

//! The `dhcp` section of pools.yaml, checked: its mode, its IPv4 subnets (the one-subnet form's
//! keys right in `dhcp`, or the list `dhcp.subnets`), each with its range, router, DNS, lease
//! and (in the list) its room's uplink, and `dhcp.relays`. No two subnets overlap, a range and
//! a router lie inside their subnet, and the server's addresses in one of them. `check.rs` calls these in its order.

use super::check::Checker;
use super::error::ConfigError;
use super::locate::Step;
use super::model::{Dhcp, DhcpMode, DhcpSubnet, Server};
use super::raw;
use super::values::{Subnet, parse_duration, parse_rate_mbps, reserved};
use std::net::Ipv4Addr;
use std::time::Duration;

/// One subnet's keys as written, wherever they are written.
struct Keys<'r> {
    subnet: &'r str,
    range: Option<&'r str>,
    router: Option<&'r str>,
    dns: &'r [String],
    lease: Option<&'r str>,
    uplink: Option<&'r raw::Rate>,
}

impl Checker<'_> {
    /// The `dhcp` section; `server` are the server's addresses (`server.links`, its address
    /// first), which no range may hold.
    pub(super) fn check_dhcp(
        &self,
        d: &raw::Dhcp,
        server: &[Ipv4Addr],
    ) -> Result<Dhcp, ConfigError> {
        use Step::Key;
        let at = |k| [Key("dhcp"), Key(k)];
        let mode = self.one_of(
            &at("mode"),
            &d.mode,
            &[
                ("authoritative", DhcpMode::Authoritative),
                ("proxy", DhcpMode::Proxy),
            ],
        )?;
        let lease = parse_duration(&d.lease).map_err(|e| self.err(&at("lease"), e))?;
        // Each subnet's keys and the path they sit at.
        let mut written: Vec<(Vec<Step>, Keys)> = Vec::new();
        match &d.subnets {
            None => {
                let subnet = d.subnet.as_deref().ok_or_else(|| {
                    self.err(
                        &[Key("dhcp")],
                        "needs `subnet` (one subnet) or `subnets` (a list of them)",
                    )
                })?;
                written.push((
                    vec![Key("dhcp")],
                    Keys {
                        subnet,
                        range: d.range.as_deref(),
                        router: d.router.as_deref(),
                        dns: d.dns.as_deref().unwrap_or_default(),
                        lease: None,
                        uplink: None,
                    },
                ));
            }
            Some(list) => {
                for (key, set) in [
                    ("subnet", d.subnet.is_some()),
                    ("range", d.range.is_some()),
                    ("router", d.router.is_some()),
                    ("dns", d.dns.is_some()),
                ] {
                    if set {
                        return Err(self.err(
                            &at(key),
                            format!("with `dhcp.subnets`, each subnet's `{key}` goes in its entry of the list"),
                        ));
                    }
                }
                if list.is_empty() {
                    return Err(self.err(&at("subnets"), "lists no subnet"));
                }
                for (i, s) in list.iter().enumerate() {
                    written.push((
                        vec![Key("dhcp"), Key("subnets"), Step::Index(i)],
                        Keys {
                            subnet: &s.subnet,
                            range: s.range.as_deref(),
                            router: s.router.as_deref(),
                            dns: &s.dns,
                            lease: s.lease.as_deref(),
                            uplink: s.uplink.as_ref(),
                        },
                    ));
                }
            }
        }
        let mut subnets: Vec<DhcpSubnet> = Vec::new();
        for (path, keys) in &written {
            let mut at_subnet = path.clone();
            at_subnet.push(Key("subnet"));
            let subnet: Subnet = keys.subnet.parse().map_err(|e| self.err(&at_subnet, e))?;
            if let Some(j) = subnets.iter().position(|o| overlap(o.subnet, subnet)) {
                return Err(self.err(
                    &at_subnet,
                    format!(
                        "{subnet} overlaps dhcp.subnets[{j}] {}: an address must name one subnet",
                        subnets[j].subnet
                    ),
                ));
            }
            subnets.push(self.check_subnet(path, subnet, keys, mode, lease, server)?);
        }
        let relays = match &d.relays {
            None => None,
            Some(list) => Some(
                list.iter()
                    .enumerate()
                    .map(|(i, text)| {
                        relay(text)
                            .map_err(|e| self.err(&[Key("dhcp"), Key("relays"), Step::Index(i)], e))
                    })
                    .collect::<Result<_, _>>()?,
            ),
        };
        // Checked against the server's address by `check_links_in_subnet`.
        let home = subnets
            .iter()
            .position(|s| s.subnet.contains(server[0]))
            .unwrap_or(0);
        Ok(Dhcp {
            mode,
            subnets,
            home,
            relays,
            lease,
        })
    }

    /// The rest of `subnet`'s keys at `path`; `lease` is `dhcp.lease`, its default.
    fn check_subnet(
        &self,
        path: &[Step],
        subnet: Subnet,
        keys: &Keys,
        mode: DhcpMode,
        lease: Duration,
        server: &[Ipv4Addr],
    ) -> Result<DhcpSubnet, ConfigError> {
        let at = |k: &'static str| {
            let mut p = path.to_vec();
            p.push(Step::Key(k));
            p
        };
        let range = match keys.range {
            None if mode == DhcpMode::Authoritative => {
                return Err(self.err(path, "authoritative mode needs a `range`"));
            }
            None => None,
            Some(r) => {
                let (a, b) = r
                    .split_once('-')
                    .ok_or_else(|| self.err(&at("range"), format!("`{r}` is not FIRST-LAST")))?;
                let (a, b) = (self.ip(&at("range"), a)?, self.ip(&at("range"), b)?);
                if u32::from(a) > u32::from(b) {
                    return Err(self.err(&at("range"), format!("{a} comes after {b}")));
                }
                for ip in [a, b] {
                    if !subnet.contains(ip) {
                        return Err(self.err(&at("range"), format!("{ip} is outside {subnet}")));
                    }
                }
                let (net, bcast) = (subnet.network, subnet.broadcast());
                let inside = |ip: Ipv4Addr| (u32::from(a)..=u32::from(b)).contains(&u32::from(ip));
                for ip in [net, bcast].into_iter().chain(server.iter().copied()) {
                    if inside(ip)
                        && let Some(what) = reserved(subnet, server, ip)
                    {
                        return Err(self.err(
                            &at("range"),
                            format!("{a}-{b} holds {ip}, {what}; clients must not be given it"),
                        ));
                    }
                }
                Some((a, b))
            }
        };
        let router = keys.router.map(|r| self.ip(&at("router"), r)).transpose()?;
        if let Some(r) = router.filter(|r| !subnet.contains(*r)) {
            return Err(self.err(
                &at("router"),
                format!(
                    "{r} is outside {subnet}: a client reaches only a router on its own subnet"
                ),
            ));
        }
        let dns = keys
            .dns
            .iter()
            .map(|s| self.ip(&at("dns"), s))
            .collect::<Result<_, _>>()?;
        let lease = match keys.lease {
            None => lease,
            Some(text) => parse_duration(text).map_err(|e| self.err(&at("lease"), e))?,
        };
        let uplink_mbps = match keys.uplink {
            None => None,
            Some(rate) => {
                let mbps = match rate {
                    raw::Rate::Text(text) => parse_rate_mbps(text),
                    raw::Rate::Mbps(n) => parse_rate_mbps(&n.to_string()),
                };
                Some(mbps.map_err(|e| self.err(&at("uplink"), e))?)
            }
        };
        Ok(DhcpSubnet {
            subnet,
            range,
            router,
            dns,
            lease,
            uplink_mbps,
        })
    }

    /// The server's address is in one of the DHCP subnets (its own), and every other server
    /// link in that one too.
    pub(super) fn check_links_in_subnet(
        &self,
        d: &raw::Dhcp,
        s: &raw::Server,
        server: &Server,
        dhcp: &Dhcp,
    ) -> Result<(), ConfigError> {
        use Step::Key;
        let home = dhcp.home().subnet;
        let listed: Vec<String> = dhcp.subnets.iter().map(|s| s.subnet.to_string()).collect();
        for (i, ip) in server.links.iter().enumerate() {
            if home.contains(*ip) {
                continue;
            }
            let at = match s
                .links
                .iter()
                .flatten()
                .position(|t| t.trim() == ip.to_string())
            {
                Some(j) if i > 0 => vec![Key("server"), Key("links"), Step::Index(j)],
                _ => vec![Key("server"), Key("address")],
            };
            let why = match (d.subnets.is_some(), i) {
                (false, _) => format!("{ip} is outside dhcp.subnet {home}"),
                (true, 0) => format!(
                    "{ip} is in none of dhcp.subnets ({}): the server's own subnet is listed too",
                    listed.join(", ")
                ),
                (true, _) => format!("{ip} is outside {home}, the subnet of server.address"),
            };
            return Err(self.err(&at, why));
        }
        Ok(())
    }
}

/// Whether two subnets share an address (one holds the other's network).
fn overlap(a: Subnet, b: Subnet) -> bool {
    a.contains(b.network) || b.contains(a.network)
}

/// An entry of `dhcp.relays`: a subnet, or one address (a /32).
fn relay(text: &str) -> Result<Subnet, String> {
    if text.contains('/') {
        return text.parse();
    }
    text.trim()
        .parse::<Ipv4Addr>()
        .map(|network| Subnet {
            network,
            prefix: 32,
        })
        .map_err(|_| format!("`{text}` is not an IPv4 address or a subnet like 10.20.0.0/24"))
}

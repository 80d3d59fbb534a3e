//! Which of `dhcp.subnets` a DHCPv4 request is answered from: the subnet it says or its relay
//! says (RFC 3011's option 118, RFC 3527's link selection), else its relay's giaddr (RFC 2131
//! 4.3.1), else the address it renews (ciaddr), else the one the request reached the server
//! at. A relay that `dhcp.relays` does not list speaks for no segment. Plain data in, a subnet
//! or a refusal out; the DHCP service counts and logs refusals.

use crate::config::{Config, DhcpSubnet};
use std::net::Ipv4Addr;

/// What a request says about where it came from, and where it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// The relay's address on the client's segment (unspecified: not relayed).
    pub giaddr: Ipv4Addr,
    /// The address the client says it has (unspecified: none).
    pub ciaddr: Ipv4Addr,
    /// The address the datagram came from: the relay itself, when relayed.
    pub source: Ipv4Addr,
    /// Option 82 sub-option 5, the relay's word for the client's subnet (RFC 3527).
    pub link_selection: Option<Ipv4Addr>,
    /// Option 118, the subnet asked for (RFC 3011).
    pub subnet_selection: Option<Ipv4Addr>,
    /// The server's address the datagram reached (IP_PKTINFO), if the kernel said.
    pub local: Option<Ipv4Addr>,
}

/// Why a request is answered from no subnet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unplaced {
    /// It came through a relay `dhcp.relays` does not list (by the address it sent from), or
    /// asked, unrelayed, for another segment than its own while `dhcp.relays` is set.
    #[error("relay {0} is not in dhcp.relays")]
    UnlistedRelay(Ipv4Addr),
    /// The address that names its segment is in none of the configured subnets.
    #[error("{0} is in no subnet of dhcp.subnets")]
    NoSubnet(Ipv4Addr),
}

/// The subnet a request that `arrival` describes is answered from.
pub fn choose<'c>(config: &'c Config, arrival: &Arrival) -> Result<&'c DhcpSubnet, Unplaced> {
    let dhcp = &config.dhcp;
    let relayed = !arrival.giaddr.is_unspecified();
    let listed = |ip: Ipv4Addr| {
        dhcp.relays
            .as_ref()
            .is_none_or(|list| list.iter().any(|n| n.contains(ip)))
    };
    if relayed && !listed(arrival.source) {
        return Err(Unplaced::UnlistedRelay(arrival.source));
    }
    // The segment the datagram reached the server on: the one a client without a relay is on.
    let here = arrival
        .local
        .and_then(|l| dhcp.subnet_of(l))
        .unwrap_or_else(|| dhcp.home());
    let named = arrival
        .subnet_selection
        .or(arrival.link_selection.filter(|_| relayed))
        .or(relayed.then_some(arrival.giaddr))
        .or((!arrival.ciaddr.is_unspecified()).then_some(arrival.ciaddr));
    let Some(named) = named else {
        return Ok(here);
    };
    let subnet = dhcp.subnet_of(named).ok_or(Unplaced::NoSubnet(named))?;
    // Unrelayed, only a renewing client (ciaddr, its own address) may be elsewhere; a client
    // naming another segment by option 118 is a relay of its own, which a list may refuse.
    if !relayed && arrival.subnet_selection.is_some() && subnet != here && !listed(arrival.source) {
        return Err(Unplaced::UnlistedRelay(arrival.source));
    }
    Ok(subnet)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(relays: &str) -> Config {
        let text = format!(
            "\
server: {{ address: 192.0.2.10, http: 0.0.0.0:8080, state_dir: var/ }}
dhcp:
  lease: 1h
{relays}  subnets:
    - {{ subnet: 192.0.2.0/24, range: 192.0.2.100-192.0.2.199, router: 192.0.2.1 }}
    - {{ subnet: 10.20.0.0/24, range: 10.20.0.100-10.20.0.199, router: 10.20.0.1, lease: 2h }}
    - {{ subnet: 10.30.0.0/24, range: 10.30.0.100-10.30.0.199, router: 10.30.0.1 }}
"
        );
        Config::parse(Path::new("/etc/bootpool/pools.yaml"), &text).unwrap()
    }

    /// A request that says nothing of where it came from.
    const NOTHING: Arrival = Arrival {
        giaddr: Ipv4Addr::UNSPECIFIED,
        ciaddr: Ipv4Addr::UNSPECIFIED,
        source: Ipv4Addr::UNSPECIFIED,
        link_selection: None,
        subnet_selection: None,
        local: None,
    };

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn router(c: &Config, a: &Arrival) -> Result<Ipv4Addr, Unplaced> {
        choose(c, a).map(|s| s.router.unwrap())
    }

    /// Each way a request names its segment, in the order that wins.
    #[test]
    fn a_request_is_answered_from_the_subnet_it_names_first() {
        let c = config("");
        let direct = Arrival {
            source: Ipv4Addr::UNSPECIFIED,
            local: Some(ip("192.0.2.10")),
            ..NOTHING
        };
        assert_eq!(router(&c, &direct), Ok(ip("192.0.2.1")));
        // The kernel did not say where it arrived: the server's own subnet.
        let unsaid = Arrival {
            local: None,
            ..direct
        };
        assert_eq!(router(&c, &unsaid), Ok(ip("192.0.2.1")));
        let relayed = Arrival {
            giaddr: ip("10.20.0.1"),
            source: ip("192.0.2.254"),
            ..direct
        };
        assert_eq!(router(&c, &relayed), Ok(ip("10.20.0.1")));
        // RFC 3527: giaddr is only where replies go; the link selection names the subnet.
        let linked = Arrival {
            link_selection: Some(ip("10.30.0.0")),
            ..relayed
        };
        assert_eq!(router(&c, &linked), Ok(ip("10.30.0.1")));
        // A link selection without a relay is nobody's word.
        let unrelayed_link = Arrival {
            link_selection: Some(ip("10.30.0.0")),
            ..direct
        };
        assert_eq!(router(&c, &unrelayed_link), Ok(ip("192.0.2.1")));
        // RFC 3011 wins over both.
        let selected = Arrival {
            subnet_selection: Some(ip("192.0.2.0")),
            ..linked
        };
        assert_eq!(router(&c, &selected), Ok(ip("192.0.2.1")));
        // A renewal unicast from a relayed client's own address.
        let renewing = Arrival {
            ciaddr: ip("10.20.0.150"),
            source: ip("10.20.0.150"),
            ..direct
        };
        assert_eq!(router(&c, &renewing), Ok(ip("10.20.0.1")));
        assert_eq!(choose(&c, &relayed).unwrap().lease.as_secs(), 7200);
        // A relay on a segment nobody configured.
        let elsewhere = Arrival {
            giaddr: ip("10.99.0.1"),
            ..relayed
        };
        assert_eq!(
            router(&c, &elsewhere),
            Err(Unplaced::NoSubnet(ip("10.99.0.1")))
        );
    }

    /// With `dhcp.relays`, a relay is known by the address it sends from; an unlisted one,
    /// or a client naming another segment itself, speaks for none.
    #[test]
    fn only_listed_relays_speak_for_other_segments() {
        let c = config("  relays: [192.0.2.254, 198.51.100.0/24]\n");
        let relayed = |source: &str| Arrival {
            giaddr: ip("10.20.0.1"),
            source: ip(source),
            local: Some(ip("192.0.2.10")),
            ..NOTHING
        };
        assert_eq!(router(&c, &relayed("192.0.2.254")), Ok(ip("10.20.0.1")));
        assert_eq!(router(&c, &relayed("198.51.100.7")), Ok(ip("10.20.0.1")));
        assert_eq!(
            router(&c, &relayed("192.0.2.253")),
            Err(Unplaced::UnlistedRelay(ip("192.0.2.253")))
        );
        let asking = Arrival {
            subnet_selection: Some(ip("10.30.0.0")),
            source: ip("192.0.2.77"),
            local: Some(ip("192.0.2.10")),
            ..NOTHING
        };
        assert_eq!(
            router(&c, &asking),
            Err(Unplaced::UnlistedRelay(ip("192.0.2.77")))
        );
        // Its own segment it may name; directly attached clients need no listing.
        let own = Arrival {
            subnet_selection: Some(ip("192.0.2.0")),
            ..asking
        };
        assert_eq!(router(&c, &own), Ok(ip("192.0.2.1")));
        let direct = Arrival {
            subnet_selection: None,
            ..asking
        };
        assert_eq!(router(&c, &direct), Ok(ip("192.0.2.1")));
    }
}

//! `server.address6`, the `dhcp6` section and `pools.NAME.boot_over`, checked.

use super::check::Checker;
use super::dhcp6::{BootOver, Dhcp6, RouterAdverts, Subnet6};
use super::error::ConfigError;
use super::locate::Step;
use super::raw;
use super::values::parse_duration;
use std::net::Ipv6Addr;
use std::time::Duration;

impl Checker<'_> {
    fn ip6(&self, path: &[Step], s: &str) -> Result<Ipv6Addr, ConfigError> {
        s.trim()
            .parse()
            .map_err(|_| self.err(path, format!("`{s}` is not an IPv6 address")))
    }

    /// `server.address6` and the `dhcp6` section: both or neither, the address inside the
    /// subnet and outside the range. `v4_lease` is `dhcp.lease`, the default lifetime.
    pub(super) fn check_dhcp6(
        &self,
        address6: Option<&str>,
        d: Option<&raw::Dhcp6>,
        v4_lease: Duration,
    ) -> Result<(Option<Ipv6Addr>, Option<Dhcp6>), ConfigError> {
        use Step::Key;
        let at = |k| [Key("dhcp6"), Key(k)];
        let address = address6
            .map(|a| self.ip6(&[Key("server"), Key("address6")], a))
            .transpose()?;
        let (address, d) = match (address, d) {
            (None, None) => return Ok((None, None)),
            (Some(a), None) => return Ok((Some(a), None)),
            (None, Some(_)) => {
                return Err(self.err(
                    &[Key("dhcp6")],
                    "needs server.address6: the address clients reach the server at over IPv6",
                ));
            }
            (Some(a), Some(d)) => (a, d),
        };
        let subnet: Subnet6 = d.subnet.parse().map_err(|e| self.err(&at("subnet"), e))?;
        if !subnet.contains(address) {
            return Err(self.err(
                &[Key("server"), Key("address6")],
                format!("{address} is outside dhcp6.subnet {subnet}"),
            ));
        }
        let (a, b) = d
            .range
            .split_once('-')
            .ok_or_else(|| self.err(&at("range"), format!("`{}` is not FIRST-LAST", d.range)))?;
        let (a, b) = (self.ip6(&at("range"), a)?, self.ip6(&at("range"), b)?);
        if u128::from(a) > u128::from(b) {
            return Err(self.err(&at("range"), format!("{a} comes after {b}")));
        }
        for ip in [a, b] {
            if !subnet.contains(ip) {
                return Err(self.err(&at("range"), format!("{ip} is outside {subnet}")));
            }
        }
        if (u128::from(a)..=u128::from(b)).contains(&u128::from(address)) {
            return Err(self.err(
                &at("range"),
                format!("{a}-{b} holds {address}, server.address6; clients must not be given it"),
            ));
        }
        let lease = match &d.lease {
            None => v4_lease,
            Some(text) => parse_duration(text).map_err(|e| self.err(&at("lease"), e))?,
        };
        let dns = d
            .dns
            .iter()
            .map(|s| self.ip6(&at("dns"), s))
            .collect::<Result<_, _>>()?;
        let router_advertisements = self.one_of(
            &at("router_advertisements"),
            d.router_advertisements.as_deref().unwrap_or("send"),
            &[
                ("send", RouterAdverts::Send),
                ("leave", RouterAdverts::Leave),
            ],
        )?;
        let dhcp6 = Dhcp6 {
            subnet,
            range: (a, b),
            lease,
            dns,
            router_advertisements,
        };
        Ok((Some(address), Some(dhcp6)))
    }

    /// `pools.NAME.boot_over`; `ipv6` needs a `dhcp6` section.
    pub(super) fn check_boot_over(
        &self,
        pool: &str,
        given: Option<&str>,
        dhcp6: bool,
    ) -> Result<BootOver, ConfigError> {
        let at = [Step::Key("pools"), Step::Key(pool), Step::Key("boot_over")];
        let over = self.one_of(
            &at,
            given.unwrap_or("both"),
            &[
                ("both", BootOver::Both),
                ("ipv4", BootOver::Ipv4),
                ("ipv6", BootOver::Ipv6),
            ],
        )?;
        if over == BootOver::Ipv6 && !dhcp6 {
            return Err(self.err(&at, "`ipv6` needs a `dhcp6` section"));
        }
        Ok(over)
    }
}

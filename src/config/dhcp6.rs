//! The IPv6 side of pools.yaml, checked: `server.address6`, the `dhcp6` section (subnet, range,
//! lease, DNS, who sends router advertisements) and a pool's `boot_over` (which IP version its
//! firmware and iPXE are answered on): the types; `check_dhcp6.rs` checks them.

use std::fmt;
use std::net::Ipv6Addr;
use std::str::FromStr;
use std::time::Duration;

/// `dhcp6`: DHCPv6 on the clients' network (`service::dhcp6`).
#[derive(Debug, Clone)]
pub struct Dhcp6 {
    pub subnet: Subnet6,
    /// Addresses handed out, inclusive.
    pub range: (Ipv6Addr, Ipv6Addr),
    /// Valid lifetime of an address (default `dhcp.lease`); preferred is half.
    pub lease: Duration,
    pub dns: Vec<Ipv6Addr>,
    pub router_advertisements: RouterAdverts,
}

/// Who tells clients to use DHCPv6 (the M flag of a router advertisement): EDK2 and iPXE
/// start DHCPv6 for an address only when a router advertisement says so, or (EDK2's boot
/// clients) whatever the network says, but they reach the server only through a prefix a
/// router advertisement puts on-link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouterAdverts {
    /// bootpool advertises `subnet` (M and O flags, on-link, not a default router) on
    /// `server.interfaces` (`service::ra`).
    Send,
    /// The network's router does (set its M flag); bootpool sends none.
    Leave,
}

/// Which DHCP answers a pool's firmware and iPXE with a boot file (`pools.NAME.boot_over`).
/// The address for the booted system's own DHCP is given either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BootOver {
    /// DHCPv4 and, when `dhcp6` is configured, DHCPv6.
    #[default]
    Both,
    Ipv4,
    /// DHCPv6 only: DHCPv4 gives this pool's firmware and iPXE an address and no boot file.
    Ipv6,
}

impl BootOver {
    pub fn v4(self) -> bool {
        self != BootOver::Ipv6
    }
    pub fn v6(self) -> bool {
        self != BootOver::Ipv4
    }
}

/// An IPv6 prefix such as `fd77::/64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet6 {
    pub network: Ipv6Addr,
    pub prefix: u8,
}

impl Subnet6 {
    fn mask(&self) -> u128 {
        if self.prefix == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(self.prefix))
        }
    }
    pub fn contains(&self, ip: Ipv6Addr) -> bool {
        u128::from(ip) & self.mask() == u128::from(self.network)
    }
}

impl fmt::Display for Subnet6 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl FromStr for Subnet6 {
    type Err = String;
    fn from_str(s: &str) -> Result<Subnet6, String> {
        let bad = || format!("`{s}` is not an IPv6 subnet like fd77::/64");
        let (ip, prefix) = s.trim().split_once('/').ok_or_else(bad)?;
        let network: Ipv6Addr = ip.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        if prefix > 128 {
            return Err(bad());
        }
        let subnet = Subnet6 { network, prefix };
        if u128::from(network) & !subnet.mask() != 0 {
            return Err(format!(
                "`{s}` has host bits set (the network is {}/{prefix})",
                Ipv6Addr::from(u128::from(network) & subnet.mask())
            ));
        }
        Ok(subnet)
    }
}

//! IPv6 router advertisements (RFC 4861 4.2) as bootpool sends them for `dhcp6.router_advertisements:
//! send`: not a default router (lifetime 0), the O flag (boot options from DHCPv6) and not M,
//! and the clients' prefix as on-link (L) and, with `autonomous`, for SLAAC (A), so that
//! firmware routes to the server's address directly. The kernel fills in the ICMPv6 checksum.
//!
//! Why O and not M: OVMF (EDK2 2022.11) starts a stateful DHCPv6 of its own network stack on
//! M, beside its PXE client's; with O its stack asks an INFORMATION-REQUEST and its PXE client
//! still solicits an address (EDK2's boot clients do, whatever the flags). iPXE on O asks for
//! options only and forms its address from the prefix (EUI-64), where `boot::leases6` knows it.

use core::net::Ipv6Addr;

/// ICMPv6 type of a router advertisement, and of a router solicitation.
pub const ADVERTISEMENT: u8 = 134;
pub const SOLICITATION: u8 = 133;
/// Flags byte: other configuration (managed, 0x80, is not set).
const OTHER: u8 = 0x40;
/// Prefix information option (type 3, 32 bytes) flags: on-link, autonomous.
const ON_LINK: u8 = 0x80;
const AUTONOMOUS: u8 = 0x40;

/// The advertisement for `prefix`/`len`: valid for `valid_s`, preferred half that.
/// `autonomous`: clients may also form their own address in it (SLAAC) beside DHCPv6's.
pub fn advertisement(prefix: Ipv6Addr, len: u8, valid_s: u32, autonomous: bool) -> Vec<u8> {
    let mut m = vec![
        ADVERTISEMENT,
        0,
        0,
        0, // checksum: the kernel's
        64,
        OTHER,
        0,
        0, // router lifetime 0: not a default router
    ];
    m.extend_from_slice(&0u32.to_be_bytes()); // reachable time: unspecified
    m.extend_from_slice(&0u32.to_be_bytes()); // retransmission timer: unspecified
    let flags = ON_LINK | if autonomous { AUTONOMOUS } else { 0 };
    m.extend_from_slice(&[3, 4, len, flags]);
    m.extend_from_slice(&valid_s.to_be_bytes());
    m.extend_from_slice(&(valid_s / 2).to_be_bytes());
    m.extend_from_slice(&[0; 4]);
    m.extend_from_slice(&prefix.octets());
    m
}

/// Whether an ICMPv6 message is a router solicitation (answered with an advertisement).
pub fn is_solicitation(m: &[u8]) -> bool {
    m.first() == Some(&SOLICITATION) && m.get(1) == Some(&0) && m.len() >= 8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advertisement_says_other_config_not_a_router_and_the_prefix_on_link() {
        let m = advertisement("fd77::".parse().unwrap(), 64, 1800, false);
        assert_eq!(m.len(), 16 + 32);
        assert_eq!(m[0], 134);
        assert_eq!(m[5] & 0xc0, 0x40, "O, not M");
        assert_eq!(&m[6..8], &[0, 0], "router lifetime 0");
        assert_eq!(&m[16..20], &[3, 4, 64, 0x80]);
        assert_eq!(&m[20..24], &1800u32.to_be_bytes());
        assert_eq!(&m[32..34], &[0xfd, 0x77]);
        assert!(is_solicitation(&[133, 0, 0, 0, 0, 0, 0, 0]));
        assert!(!is_solicitation(&m));
    }
}

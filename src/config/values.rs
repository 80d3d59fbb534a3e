//! Small value types of pools.yaml: MAC addresses and ranges, subnets, durations, sizes and
//! link rates.

use serde::{Serialize, Serializer};
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::time::Duration;

/// An Ethernet MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    fn as_u64(self) -> u64 {
        self.0.iter().fold(0, |acc, b| (acc << 8) | u64::from(*b))
    }
    fn from_u64(v: u64) -> Mac {
        let b = v.to_be_bytes();
        Mac([b[2], b[3], b[4], b[5], b[6], b[7]])
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Mac {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Mac {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Mac, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl FromStr for Mac {
    type Err = String;
    fn from_str(s: &str) -> Result<Mac, String> {
        let bad = || format!("`{s}` is not a MAC address like 52:54:00:77:00:01");
        let s = s.trim();
        let parts: Vec<&str> = s.split([':', '-']).collect();
        if parts.len() != 6 {
            return Err(bad());
        }
        let mut mac = [0u8; 6];
        for (b, p) in mac.iter_mut().zip(parts) {
            if p.len() != 2 {
                return Err(bad());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        Ok(Mac(mac))
    }
}

/// An inclusive range of MACs (`52:54:00:77:00:10-52:54:00:77:00:3f`), or one MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MacRange {
    pub first: Mac,
    pub last: Mac,
}

impl MacRange {
    pub fn single(mac: Mac) -> MacRange {
        MacRange {
            first: mac,
            last: mac,
        }
    }
    pub fn contains(&self, mac: Mac) -> bool {
        self.first <= mac && mac <= self.last
    }
    pub fn overlaps(&self, other: &MacRange) -> bool {
        self.first <= other.last && other.first <= self.last
    }
    pub fn len(&self) -> u64 {
        self.last.as_u64() - self.first.as_u64() + 1
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The place of `mac` in the range (0 for its first), if it is one of it.
    pub fn index_of(&self, mac: Mac) -> Option<u64> {
        self.contains(mac)
            .then(|| mac.as_u64() - self.first.as_u64())
    }

    /// The n-th MAC of the range, if it has one.
    pub fn nth(&self, n: u64) -> Option<Mac> {
        (n < self.len()).then(|| Mac::from_u64(self.first.as_u64() + n))
    }
}

impl fmt::Display for MacRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

impl FromStr for MacRange {
    type Err = String;
    fn from_str(s: &str) -> Result<MacRange, String> {
        // A MAC may itself use '-', so split on the '-' that leaves two valid MACs.
        if let Ok(mac) = s.parse::<Mac>() {
            return Ok(MacRange::single(mac));
        }
        let s = s.trim();
        for (i, _) in s.match_indices('-') {
            if let (Ok(first), Ok(last)) = (s[..i].parse::<Mac>(), s[i + 1..].parse::<Mac>()) {
                if first > last {
                    return Err(format!("{first} comes after {last}"));
                }
                return Ok(MacRange { first, last });
            }
        }
        Err(format!("`{s}` is not a MAC or FIRST-LAST range of MACs"))
    }
}

/// An IPv4 subnet, `10.77.0.0/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet {
    pub network: Ipv4Addr,
    pub prefix: u8,
}

impl Subnet {
    pub fn mask(&self) -> Ipv4Addr {
        Ipv4Addr::from(if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - self.prefix)
        })
    }
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let m = u32::from(self.mask());
        u32::from(ip) & m == u32::from(self.network) & m
    }
    pub fn broadcast(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) | !u32::from(self.mask()))
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl FromStr for Subnet {
    type Err = String;
    fn from_str(s: &str) -> Result<Subnet, String> {
        let bad = || format!("`{s}` is not a subnet like 10.77.0.0/24");
        let (ip, prefix) = s.trim().split_once('/').ok_or_else(bad)?;
        let network: Ipv4Addr = ip.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        if prefix > 32 {
            return Err(bad());
        }
        let subnet = Subnet { network, prefix };
        if u32::from(network) & !u32::from(subnet.mask()) != 0 {
            return Err(format!(
                "`{s}` has host bits set; the network is {}/{prefix}",
                Ipv4Addr::from(u32::from(network) & u32::from(subnet.mask()))
            ));
        }
        Ok(subnet)
    }
}

/// `250ms`, `90s`, `30m`, `12h`, `7d`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bad = || format!("`{s}` is not a duration like 90s, 30m, 12h or 7d");
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| bad())?;
    if unit == "ms" {
        if n == 0 {
            return Err(format!("`{s}` must be longer than zero"));
        }
        return Ok(Duration::from_millis(n));
    }
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        _ => return Err(bad()),
    };
    if secs == 0 {
        return Err(format!("`{s}` must be longer than zero"));
    }
    Ok(Duration::from_secs(secs))
}

/// `4096`, `64KiB`, `512MiB`, `2GiB`, `1TiB`: a size in bytes (units are powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let bad = || format!("`{s}` is not a size like 64KiB, 512MiB or 2GiB");
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        "TiB" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1 << shift).ok_or_else(bad)
}

/// A link's rate in whole Mbit/s: `250mbit`, `1gbit`, `2.5gbit`, or a plain number of Mbit/s.
/// Units are powers of 1000 (as `ethtool` and the kernel's `speed` count), in any case.
pub fn parse_rate_mbps(s: &str) -> Result<u32, String> {
    let t = s.trim().to_ascii_lowercase();
    let bad = || format!("`{s}` is not a link rate like 250mbit, 1gbit or 2.5gbit (or Mbit/s)");
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let per_mbit = match unit.trim() {
        "" | "mbit" => 1.0,
        "gbit" => 1000.0,
        _ => return Err(bad()),
    };
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') {
        return Err(bad());
    }
    let n: f64 = num.parse().map_err(|_| bad())?;
    let mbps = n * per_mbit;
    if mbps < 1.0 {
        return Err(format!("`{s}`: a link rate is at least 1mbit"));
    }
    if mbps.fract() != 0.0 || mbps > f64::from(u32::MAX) {
        return Err(format!("`{s}` is not a whole number of Mbit/s"));
    }
    Ok(mbps as u32)
}

/// What `ip` is that no client may be given: the subnet's network or broadcast address (on a
/// /31 or /32 both are hosts, RFC 3021), or one of the server's own addresses.
pub(super) fn reserved(subnet: Subnet, server: &[Ipv4Addr], ip: Ipv4Addr) -> Option<String> {
    if ip == server[0] {
        Some("the server's own address (server.address)".into())
    } else if server.contains(&ip) {
        Some("one of the server's own addresses (server.links)".into())
    } else if subnet.prefix <= 30 && ip == subnet.network {
        Some(format!("the network address of {subnet}"))
    } else if subnet.prefix <= 30 && ip == subnet.broadcast() {
        Some(format!("the broadcast address of {subnet}"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_and_print() {
        let m: Mac = "52:54:00:77:00:0A".parse().unwrap();
        assert_eq!(m.to_string(), "52:54:00:77:00:0a");
        assert_eq!("52-54-00-77-00-0a".parse::<Mac>().unwrap(), m);
        assert!("52:54:00:77:00".parse::<Mac>().is_err());
        assert!("52:54:00:77:00:zz".parse::<Mac>().is_err());
    }

    #[test]
    fn mac_ranges() {
        let r: MacRange = "52:54:00:77:00:10-52:54:00:77:00:3f".parse().unwrap();
        assert_eq!(r.len(), 0x30);
        assert!(r.contains("52:54:00:77:00:20".parse().unwrap()));
        assert!(!r.contains("52:54:00:77:00:40".parse().unwrap()));
        assert_eq!(r.nth(1).unwrap().to_string(), "52:54:00:77:00:11");
        let dashed: MacRange = "52-54-00-77-00-10-52-54-00-77-00-3f".parse().unwrap();
        assert_eq!(dashed, r);
        assert!(
            "52:54:00:77:00:3f-52:54:00:77:00:10"
                .parse::<MacRange>()
                .is_err()
        );
    }

    #[test]
    fn subnets() {
        let s: Subnet = "10.77.0.0/24".parse().unwrap();
        assert!(s.contains("10.77.0.200".parse().unwrap()));
        assert!(!s.contains("10.77.1.1".parse().unwrap()));
        assert_eq!(s.mask().to_string(), "255.255.255.0");
        assert_eq!(s.broadcast().to_string(), "10.77.0.255");
        assert!("10.77.0.1/24".parse::<Subnet>().is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("12h").unwrap(), Duration::from_secs(43200));
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert!(parse_duration("12 hours").is_err());
        assert!(parse_duration("0s").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2 GiB").unwrap(), 2 << 30);
        assert!(parse_size("2GB").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("99999999999TiB").is_err());
    }

    #[test]
    fn link_rates() {
        assert_eq!(parse_rate_mbps("250mbit"), Ok(250));
        assert_eq!(parse_rate_mbps("1gbit"), Ok(1000));
        assert_eq!(parse_rate_mbps("2.5gbit"), Ok(2500));
        assert_eq!(parse_rate_mbps("10 Gbit"), Ok(10_000));
        assert_eq!(parse_rate_mbps("100"), Ok(100));
        for bad in [
            "fast", "", "mbit", "250mb", "1.5mbit", "0", "0.5", "2.gbit", "-1gbit",
        ] {
            assert!(parse_rate_mbps(bad).is_err(), "{bad:?}");
        }
    }
}

//! The keepalived.conf of one member of a site (`bootpool site keepalived`, docs/failover.md):
//! one VRRP instance per IPv4 address any member serves clients on, its owner at the highest
//! priority and every other member a backup, with scripts that tell this member's daemon when
//! it takes an address over or gives it back. Pure: members and options in, text out.

use super::member::Member;
use std::fmt::Write as _;
use std::net::Ipv4Addr;

/// The owner's priority: above every backup's, below 255 (VRRP's "address owner", which
/// keepalived would want to hold the address outside VRRP).
pub const OWNER_PRIORITY: u8 = 200;
/// The first backup's priority; each next one in name order one lower.
pub const BACKUP_PRIORITY: u8 = 100;
/// Seconds between advertisements unless told (`--advert`): a dead master is replaced after
/// about three, 0.6 s and keepalived's skew.
pub const ADVERT_S: f64 = 0.2;
/// The first virtual router id unless told (`--first-vrid`).
pub const FIRST_VRID: u8 = 50;

/// What the members' rows do not say: how this host runs keepalived and bootpool.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The interface the addresses go on (the clients' network).
    pub interface: String,
    /// Seconds between advertisements (VRRPv3 takes hundredths): a master silent for about
    /// three of them loses its addresses.
    pub advert_s: f64,
    /// The first virtual router id; the site's addresses take the next ones in address
    /// order, so every member numbers them alike.
    pub first_vrid: u8,
    /// Unicast peers (the other members' own, fixed addresses) instead of VRRP's multicast.
    pub peers: Vec<Ipv4Addr>,
    /// This host's own address the unicast advertisements come from.
    pub source: Option<Ipv4Addr>,
    /// The `bootpool` program keepalived runs to tell the daemon (`bootpool site takeover`,
    /// `bootpool site release`).
    pub program: String,
    /// The config that program reads (the daemon's).
    pub config: String,
}

/// One address of the site: who serves clients on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Address {
    pub ip: Ipv4Addr,
    pub owner: String,
}

/// Every IPv4 address members serve clients on (`server.address` and `server.links`), in
/// address order, each with its owner; an error when two members claim one address.
pub fn addresses(members: &[Member]) -> Result<Vec<Address>, String> {
    let mut all: Vec<Address> = Vec::new();
    for m in members {
        let own = m.addresses.iter().filter_map(|a| match a {
            std::net::IpAddr::V4(v4) => Some(*v4),
            std::net::IpAddr::V6(_) => None,
        });
        for ip in own.chain(m.links.iter().copied()) {
            match all.iter().find(|a| a.ip == ip) {
                Some(a) if a.owner != m.name => {
                    return Err(format!(
                        "members {} and {} both serve on {ip}: each member's addresses must be \
                         its own",
                        a.owner, m.name
                    ));
                }
                Some(_) => {}
                None => all.push(Address {
                    ip,
                    owner: m.name.clone(),
                }),
            }
        }
    }
    all.sort_by_key(|a| a.ip);
    Ok(all)
}

/// `me`'s priority for `address`: the owner's, or a backup's by `me`'s place among the
/// other members in name order (the first backup the highest).
pub fn priority(members: &[Member], address: &Address, me: &str) -> u8 {
    if address.owner == me {
        return OWNER_PRIORITY;
    }
    let mut others: Vec<&str> = members
        .iter()
        .map(|m| m.name.as_str())
        .filter(|n| *n != address.owner)
        .collect();
    others.sort_unstable();
    let place = others.iter().position(|n| *n == me).unwrap_or(others.len());
    BACKUP_PRIORITY.saturating_sub(place.min(99) as u8)
}

/// The keepalived.conf of member `me` of a site whose members are `members`.
pub fn conf(members: &[Member], me: &str, opts: &Options) -> Result<String, String> {
    if !members.iter().any(|m| m.name == me) {
        let mut names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        names.sort_unstable();
        return Err(format!(
            "no member {me:?} in the site (members: {}): start its `bootpool serve` first, or \
             name it with --member",
            names.join(", ")
        ));
    }
    if !(0.01..=40.95).contains(&opts.advert_s) {
        return Err(format!(
            "the advertisement interval is 0.01 to 40.95 s (VRRPv3), not {}",
            opts.advert_s
        ));
    }
    for (what, path) in [("program", &opts.program), ("config", &opts.config)] {
        if path.is_empty() || path.contains(|c: char| c.is_whitespace() || c == '"') {
            return Err(format!(
                "the {what}'s path goes into keepalived's notify lines: it must be non-empty \
                 and hold no space or quote: {path:?}"
            ));
        }
    }
    let addresses = addresses(members)?;
    let last = usize::from(opts.first_vrid) + addresses.len();
    if opts.first_vrid == 0 || last > 256 {
        return Err(format!(
            "virtual router ids {}..{} do not fit VRRP's 1..255: the site has {} addresses",
            opts.first_vrid,
            last.saturating_sub(1),
            addresses.len()
        ));
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# keepalived.conf of bootpool member {me}, written by `bootpool site keepalived` from \
         the site's members.\n# Every member runs its own; write them again when a member or \
         an address is added.\n\nglobal_defs {{\n    router_id bootpool-{me}\n    vrrp_version \
         3\n    script_user root\n    enable_script_security\n    vrrp_garp_master_repeat 2\n}}"
    );
    for (k, a) in addresses.iter().enumerate() {
        let vrid = usize::from(opts.first_vrid) + k;
        let owner = a.owner == me;
        let _ = writeln!(
            out,
            "\n# {ip}: {owner}'s\nvrrp_instance bootpool_{vrid} {{\n    state {state}\n    \
             interface {iface}\n    virtual_router_id {vrid}\n    priority {prio}\n    \
             advert_int {advert}",
            ip = a.ip,
            owner = a.owner,
            state = if owner { "MASTER" } else { "BACKUP" },
            iface = opts.interface,
            prio = priority(members, a, me),
            advert = opts.advert_s,
        );
        if !opts.peers.is_empty() {
            if let Some(src) = opts.source {
                let _ = writeln!(out, "    unicast_src_ip {src}");
            }
            let _ = writeln!(out, "    unicast_peer {{");
            for p in &opts.peers {
                let _ = writeln!(out, "        {p}");
            }
            let _ = writeln!(out, "    }}");
        }
        let _ = writeln!(
            out,
            "    virtual_ipaddress {{\n        {ip}/32 dev {iface}\n    }}\n    \
             notify_master \"{cmd} takeover {tail}\"\n    notify_backup \"{cmd} release {tail}\"\n    \
             notify_fault \"{cmd} release {tail}\"\n}}",
            ip = a.ip,
            iface = opts.interface,
            cmd = format_args!("{} site", opts.program),
            tail = format_args!("--config {} {}", opts.config, a.ip),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, address: [u8; 4], links: &[[u8; 4]]) -> Member {
        Member {
            name: name.into(),
            addresses: vec![Ipv4Addr::from(address).into()],
            links: links.iter().map(|l| Ipv4Addr::from(*l)).collect(),
            rooms: vec![],
            http: String::new(),
            started: 0,
        }
    }

    fn opts() -> Options {
        Options {
            interface: "eth0".into(),
            advert_s: 0.2,
            first_vrid: 50,
            peers: vec![],
            source: None,
            program: "/usr/bin/bootpool".into(),
            config: "/etc/bootpool/pools.yaml".into(),
        }
    }

    fn site() -> Vec<Member> {
        vec![
            member("c", [10, 0, 0, 3], &[]),
            member("a", [10, 0, 0, 1], &[[10, 0, 0, 1], [10, 0, 1, 1]]),
            member("b", [10, 0, 0, 2], &[]),
        ]
    }

    /// The instance of `ip` in `text`.
    fn instance<'t>(text: &'t str, ip: &str) -> &'t str {
        let start = text.find(&format!("# {ip}:")).expect(ip);
        let rest = &text[start..];
        &rest[..rest.find("\n}").unwrap()]
    }

    #[test]
    fn every_address_is_an_instance_its_owner_holds_and_the_others_back_up() {
        let members = site();
        let addrs = addresses(&members).unwrap();
        let ips: Vec<String> = addrs.iter().map(|a| a.ip.to_string()).collect();
        assert_eq!(ips, ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.1.1"]);
        let of = |me| conf(&members, me, &opts()).unwrap();
        let (a, b, c) = (of("a"), of("b"), of("c"));
        for text in [&a, &b, &c] {
            assert!(text.contains("vrrp_version 3"));
            assert_eq!(text.matches("vrrp_instance").count(), 4);
        }
        // The same address has the same router id on every member.
        for (vrid, ip) in [(50, "10.0.0.1"), (51, "10.0.0.2"), (53, "10.0.1.1")] {
            for text in [&a, &b, &c] {
                let i = instance(text, ip);
                assert!(i.contains(&format!("virtual_router_id {vrid}\n")), "{i}");
                assert!(i.contains(&format!("{ip}/32 dev eth0")), "{i}");
                assert!(i.contains("advert_int 0.2\n"), "{i}");
                assert!(i.contains(&format!(
                    "notify_master \"/usr/bin/bootpool site takeover --config \
                     /etc/bootpool/pools.yaml {ip}\""
                )));
                assert!(i.contains(&format!(
                    "notify_backup \"/usr/bin/bootpool site release --config \
                     /etc/bootpool/pools.yaml {ip}\""
                )));
            }
        }
        // 10.0.0.2 is b's: b the master at the top, then a and c by name.
        let prio = |text: &str| {
            let i = instance(text, "10.0.0.2");
            let p = i.split("priority ").nth(1).unwrap();
            p[..p.find('\n').unwrap()].parse::<u8>().unwrap()
        };
        assert_eq!((prio(&b), prio(&a), prio(&c)), (200, 100, 99));
        assert!(instance(&b, "10.0.0.2").contains("state MASTER"));
        assert!(instance(&a, "10.0.0.2").contains("state BACKUP"));
        assert!(!a.contains("unicast"));
    }

    #[test]
    fn unicast_peers_are_listed_in_every_instance() {
        let o = Options {
            peers: vec![Ipv4Addr::new(192, 168, 0, 2), Ipv4Addr::new(192, 168, 0, 3)],
            source: Some(Ipv4Addr::new(192, 168, 0, 1)),
            ..opts()
        };
        let text = conf(&site(), "a", &o).unwrap();
        assert_eq!(text.matches("unicast_src_ip 192.168.0.1\n").count(), 4);
        assert_eq!(
            text.matches("unicast_peer {\n        192.168.0.2\n        192.168.0.3\n    }")
                .count(),
            4
        );
    }

    #[test]
    fn a_bad_site_or_option_is_refused_with_its_reason() {
        let mut members = site();
        let e = conf(&members, "z", &opts()).unwrap_err();
        assert!(
            e.contains("no member \"z\"") && e.contains("a, b, c"),
            "{e}"
        );
        let e = conf(
            &members,
            "a",
            &Options {
                first_vrid: 254,
                ..opts()
            },
        )
        .unwrap_err();
        assert!(e.contains("254..257"), "{e}");
        let e = conf(
            &members,
            "a",
            &Options {
                advert_s: 0.0,
                ..opts()
            },
        )
        .unwrap_err();
        assert!(e.contains("0.01 to 40.95"), "{e}");
        let e = conf(
            &members,
            "a",
            &Options {
                config: "/etc/my pools.yaml".into(),
                ..opts()
            },
        )
        .unwrap_err();
        assert!(e.contains("the config's path"), "{e}");
        members[2].links.push(Ipv4Addr::new(10, 0, 1, 1));
        let e = conf(&members, "a", &opts()).unwrap_err();
        assert!(e.contains("a and b both serve on 10.0.1.1"), "{e}");
    }
}

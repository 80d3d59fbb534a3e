//! The server's links as the kernel has them, and the link each connection's replies leave by.
//!
//! `server.links` names the server's addresses on the clients' network, one per NIC, all on
//! one subnet and no bond. `resolve` finds the interface that holds each (getifaddrs) and its
//! capacity (`server.link_speeds`, else the kernel's speed, as egress sampling reads them).
//! The main routing table sends everything for that subnet out of one of those NICs whatever
//! the source address, so with several links every accepted TCP connection and every TFTP
//! transfer socket whose local address is a link's is bound to that link's interface
//! (SO_BINDTODEVICE): its replies leave by the link they were asked on. Connections on a link
//! of known capacity are also handed to the pacer (`pacing`) for their fair share.
//! docs/links.md says why binding and not policy routing, and what the host must set for it.

use super::choice::LinkSpec;
use super::fair_share::Carries;
use super::firmware::FirmwareWatch;
use super::pacing::{Paced, Pacer};
use crate::config::Config;
use crate::log_limit::LogLimit;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use socket2::SockRef;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use tokio::net::TcpStream;

/// A peer's IPv4 address, also when a dual-stack socket shows it IPv4-mapped; clients are
/// known by their DHCP lease, which is IPv4.
pub fn ipv4_of(ip: IpAddr) -> Option<Ipv4Addr> {
    match ip {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(a) => a.to_ipv4_mapped(),
    }
}

/// The links of `server.links` that an interface of this network namespace holds, in the
/// config's order. An address no interface holds is logged and left out: nothing is bound to
/// it or paced (and no client can reach it). `app::start` calls this once; `Links::specs`
/// hands out the answer.
pub fn resolve(config: &Config) -> Vec<LinkSpec> {
    resolve_from(config, &held())
}

/// This host's addresses and the interfaces holding them, or none (said once) if the kernel
/// does not list them.
fn held() -> Vec<(String, Ipv4Addr)> {
    addresses().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot list this host's addresses; server.links are neither bound nor paced");
        Vec::new()
    })
}

fn resolve_from(config: &Config, held: &[(String, Ipv4Addr)]) -> Vec<LinkSpec> {
    let mut out = Vec::new();
    for &address in &config.server.links {
        let Some((device, _)) = held.iter().find(|(_, a)| *a == address) else {
            tracing::warn!(%address, "server.links: no interface holds this address; it is neither bound to nor paced");
            continue;
        };
        let index = index_of(device);
        let mbps = crate::record::egress::speed_mbps(device, index, &config.server.link_speeds);
        out.push(LinkSpec {
            address,
            device: device.clone(),
            capacity_bps: mbps.map(|m| u64::from(m) * 1_000_000),
        });
    }
    out
}

/// Every IPv4 address of this network namespace and the interface holding it.
fn addresses() -> std::io::Result<Vec<(String, Ipv4Addr)>> {
    let listed = crate::sys::sock::ipv4_addresses()?;
    Ok(listed
        .into_iter()
        .map(|(name, address)| {
            // An address with a label (`ip addr add ... label eth0:1`) is listed under the
            // label; the interface is the part before the colon.
            let device = name.split(':').next().unwrap_or(&name).to_string();
            (device, address)
        })
        .collect())
}

fn index_of(device: &str) -> u32 {
    let Ok(name) = std::ffi::CString::new(device) else {
        return 0;
    };
    crate::sys::sock::if_index(&name)
}

/// The host settings a link's interface is bound by, each the larger of `conf/all` and
/// `conf/DEVICE` (as the kernel applies them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostConf {
    pub arp_ignore: u8,
    pub arp_announce: u8,
    pub rp_filter: u8,
}

impl HostConf {
    fn read(device: &str) -> HostConf {
        let get = |key: &str| {
            ["all", device]
                .iter()
                .filter_map(|scope| {
                    std::fs::read_to_string(format!("/proc/sys/net/ipv4/conf/{scope}/{key}"))
                        .ok()?
                        .trim()
                        .parse::<u8>()
                        .ok()
                })
                .max()
                .unwrap_or(0)
        };
        HostConf {
            arp_ignore: get("arp_ignore"),
            arp_announce: get("arp_announce"),
            rp_filter: get("rp_filter"),
        }
    }
}

/// What is wrong with the hosts' settings for several links on one subnet: (reasons not to
/// bind replies to interfaces, other warnings). A connection bound to an interface sees only
/// what arrives on that interface (the kernel answers the rest with a reset), so binding is
/// safe only when clients reach each address by its own NIC: each NIC answers ARP for its own
/// addresses only (`arp_ignore` 1 or 2; 8 answers none), and asks with its own address
/// (`arp_announce` 2), else a client may learn another NIC's MAC for an address ("ARP flux").
/// Strict reverse-path filtering drops what arrives on every NIC but the routing table's
/// first, bound or not.
pub fn check(conf: &[(String, HostConf)]) -> (Vec<String>, Vec<String>) {
    let (mut blocking, mut other) = (Vec::new(), Vec::new());
    for (dev, c) in conf {
        if !matches!(c.arp_ignore, 1 | 2 | 8) {
            blocking.push(format!(
                "{dev}: arp_ignore is {}, so every NIC answers ARP for every address",
                c.arp_ignore
            ));
        }
        if c.arp_announce != 2 {
            blocking.push(format!(
                "{dev}: arp_announce is {}, so a NIC may ask ARP with another NIC's address",
                c.arp_announce
            ));
        }
        if c.rp_filter == 1 {
            other.push(format!(
                "{dev}: rp_filter is 1 (strict), which drops what clients send to this link unless policy routing says it leaves by it; set 2 (loose)"
            ));
        }
    }
    (blocking, other)
}

/// How each link address's sockets are sent by their link: marked for that link's routing
/// table (`routes`, when bootpool could install the tables), else bound to its interface;
/// neither with one link, nor bound when the host's settings would make binding break
/// connections.
struct Steering {
    devices: Vec<(Ipv4Addr, String)>,
    /// Each link's routing table is installed: sockets are marked (`routes::mark` of the
    /// link's place in `devices`), not bound.
    marked: bool,
    /// The kernel refused (EPERM: before Linux 5.7 binding needs CAP_NET_RAW); said once.
    refused: AtomicBool,
}

impl Steering {
    fn none() -> Steering {
        Steering {
            devices: Vec::new(),
            marked: false,
            refused: AtomicBool::new(false),
        }
    }

    fn new(config: &Config, specs: &[LinkSpec]) -> Steering {
        let none = Steering::none();
        if config.server.links.len() <= 1 || specs.is_empty() {
            return none;
        }
        let conf: Vec<(String, HostConf)> = specs
            .iter()
            .map(|s| (s.device.clone(), HostConf::read(&s.device)))
            .collect();
        let (blocking, other) = check(&conf);
        for w in &other {
            tracing::warn!("server.links: {w}");
        }
        let devices: Vec<(Ipv4Addr, String)> = specs
            .iter()
            .map(|s| (s.address, s.device.clone()))
            .collect();
        let routes: Vec<super::routes::Route> = specs
            .iter()
            .map(|s| super::routes::Route {
                ifindex: index_of(&s.device),
                address: s.address,
            })
            .collect();
        let subnet = &config.dhcp.home().subnet;
        match super::routes::install(&routes, subnet.network, subnet.prefix) {
            Ok(()) => {
                for w in &blocking {
                    tracing::warn!(
                        "server.links: {w}: clients may reach a link's address by another NIC (docs/links.md)"
                    );
                }
                tracing::info!(links = ?devices, "replies leave by the link they were asked on, \
                    or by another the pacer moves them to (a routing table per link, by socket mark)");
                return Steering {
                    devices,
                    marked: true,
                    ..none
                };
            }
            Err(e) => tracing::warn!(error = %e,
                "server.links: cannot install a routing table per link (CAP_NET_ADMIN?); \
                 replies are bound to their links' interfaces and stay there"),
        }
        if !blocking.is_empty() {
            tracing::warn!(problems = ?blocking,
                "server.links: replies are not bound to their links' interfaces (the routing \
                 table picks one for all): set net.ipv4.conf.all.arp_ignore=1 and \
                 net.ipv4.conf.all.arp_announce=2 (docs/links.md)");
            return none;
        }
        tracing::info!(links = ?devices, "replies leave by the link they were asked on");
        Steering { devices, ..none }
    }

    /// The position and interface of the link holding `local`.
    fn link_of(&self, local: IpAddr) -> Option<(usize, &str)> {
        let local = ipv4_of(local)?;
        self.devices
            .iter()
            .position(|(a, _)| *a == local)
            .map(|i| (i, self.devices[i].1.as_str()))
    }

    /// Sends `socket` by the link holding `local`, if any: marks it for that link's table, or
    /// binds it to the link's interface.
    fn steer(&self, socket: SockRef<'_>, local: IpAddr) {
        let Some((i, device)) = self.link_of(local) else {
            return;
        };
        if self.marked {
            if let Err(e) = socket.set_mark(super::routes::mark(i)) {
                static FAILED: LogLimit = LogLimit::new();
                if let Some(suppressed) = FAILED.allow() {
                    tracing::warn!(%device, error = %e, suppressed, "cannot mark a socket for its link");
                }
            }
            return;
        }
        if self.refused.load(Relaxed) {
            return;
        }
        let Err(e) = socket.bind_device(Some(device.as_bytes())) else {
            return;
        };
        if e.raw_os_error() == Some(libc::EPERM) {
            if !self.refused.swap(true, Relaxed) {
                tracing::warn!(error = %e, "cannot bind replies to their link's interface \
                    (kernels before 5.7 need CAP_NET_RAW); the routing table picks one for all");
            }
        } else {
            static FAILED: LogLimit = LogLimit::new();
            if let Some(suppressed) = FAILED.allow() {
                tracing::warn!(%device, error = %e, suppressed, "cannot bind a socket to its link's interface");
            }
        }
    }
}

/// The server's links and what a socket on one of them gets: its reply path, and (TCP, on a
/// link of known capacity) its fair share. A peer that is this host itself reaches a link's
/// address through loopback, not the link: its sockets are neither bound (a bound socket
/// would not see what loopback delivers) nor paced.
pub struct Links {
    specs: Vec<LinkSpec>,
    /// This host's own addresses at start.
    own: Vec<Ipv4Addr>,
    steering: Steering,
    pacer: Option<Arc<Pacer>>,
}

impl Links {
    /// Resolves `server.links`, decides whether replies are bound to them, and starts the
    /// pacer when `server.fair_share` is on and a link's capacity is known (its figures
    /// counted in `metrics`).
    pub fn start(config: &Config, metrics: &Metrics, shutdown: &Shutdown) -> anyhow::Result<Links> {
        let held = held();
        let specs = resolve_from(config, &held);
        let steering = Steering::new(config, &specs);
        let rooms: Vec<(crate::config::Subnet, u64)> = config
            .dhcp
            .subnets
            .iter()
            .filter_map(|s| Some((s.subnet, u64::from(s.uplink_mbps?) * 1_000_000)))
            .collect();
        let pacer = if config.server.fair_share {
            // Moving clients between links needs every link's mark (`specs`' order).
            Pacer::start(&specs, &rooms, steering.marked, metrics, shutdown)?
        } else {
            None
        };
        if pacer.is_none() && !rooms.is_empty() {
            tracing::warn!(
                fair_share = config.server.fair_share,
                "the rooms' uplinks (dhcp.subnets[].uplink) bound nothing: no server link is \
                 paced (server.fair_share off, or no link's capacity known: server.link_speeds)"
            );
        }
        Ok(Links {
            specs,
            own: held.into_iter().map(|(_, a)| a).collect(),
            steering,
            pacer,
        })
    }

    /// No links: nothing bound, nothing paced (tests that run one service alone).
    pub fn none() -> Links {
        Links {
            specs: Vec::new(),
            own: Vec::new(),
            steering: Steering::none(),
            pacer: None,
        }
    }

    fn is_this_host(&self, peer: IpAddr) -> bool {
        ipv4_of(peer).is_some_and(|p| p.is_loopback() || self.own.contains(&p))
    }

    /// The links an interface holds (`resolve`'s answer at start).
    pub fn specs(&self) -> &[LinkSpec] {
        &self.specs
    }

    /// Places a connection just accepted from `peer`, carrying `carries`, on its link: bound
    /// to the link's interface, and registered with the pacer for as long as the returned
    /// `Paced` lives (keep it beside the stream; the socket closes only when both are gone).
    pub fn adopt(&self, stream: &TcpStream, peer: SocketAddr, carries: Carries) -> Paced {
        let Ok(local) = stream.local_addr() else {
            return Paced::none();
        };
        if self.is_this_host(peer.ip()) {
            return Paced::none();
        }
        self.steering.steer(SockRef::from(stream), local.ip());
        match (&self.pacer, ipv4_of(local.ip()), ipv4_of(peer.ip())) {
            (Some(pacer), Some(local), Some(client)) => {
                pacer.register(stream.as_fd(), local, client, carries)
            }
            _ => Paced::none(),
        }
    }

    /// Where the services say firmware waits, so its link keeps a headroom (`firmware`);
    /// nothing when no link is paced.
    pub fn firmware(&self) -> FirmwareWatch {
        self.pacer
            .as_ref()
            .map(|p| p.firmware())
            .unwrap_or_default()
    }

    /// Binds a UDP socket whose local address is `local`, for `peer`, to its link's interface.
    pub fn steer(&self, socket: &std::net::UdpSocket, local: Ipv4Addr, peer: IpAddr) {
        if !self.is_this_host(peer) {
            self.steering.steer(SockRef::from(socket), local.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(arp_ignore: u8, arp_announce: u8, rp_filter: u8) -> HostConf {
        HostConf {
            arp_ignore,
            arp_announce,
            rp_filter,
        }
    }

    #[test]
    fn binding_replies_waits_for_settings_without_arp_flux() {
        let two = |a: HostConf, b: HostConf| check(&[("s0".into(), a), ("s1".into(), b)]);
        let good = conf(1, 2, 0);
        assert_eq!(two(good, good), (vec![], vec![]));
        assert_eq!(two(conf(2, 2, 2), conf(8, 2, 0)), (vec![], vec![]));
        // The kernel's defaults: every NIC answers for every address and asks with any.
        let (blocking, _) = two(good, conf(0, 0, 0));
        assert_eq!(blocking.len(), 2, "{blocking:?}");
        assert!(
            blocking[0].starts_with("s1: arp_ignore is 0"),
            "{blocking:?}"
        );
        assert!(
            blocking[1].starts_with("s1: arp_announce is 0"),
            "{blocking:?}"
        );
        // arp_ignore 3 still answers for global addresses on any NIC.
        assert_eq!(two(conf(3, 2, 0), good).0.len(), 1);
        // Strict reverse-path filtering is a warning of its own: binding changes nothing there.
        let (blocking, other) = two(conf(1, 2, 1), good);
        assert!(blocking.is_empty());
        assert!(other[0].starts_with("s0: rp_filter is 1"), "{other:?}");
    }

    #[test]
    fn loopback_is_a_link_of_unknown_capacity() {
        let config = crate::config::Config::parse(
            std::path::Path::new("/nonexistent/pools.yaml"),
            "server: { address: 127.0.0.1 }\n\
             dhcp: { subnet: 127.0.0.0/8, range: 127.0.0.100-127.0.0.199 }\n",
        )
        .unwrap();
        let specs = resolve(&config);
        assert_eq!(
            specs,
            [LinkSpec {
                address: Ipv4Addr::LOCALHOST,
                device: "lo".into(),
                capacity_bps: None,
            }]
        );
    }
}

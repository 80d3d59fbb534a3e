//! DHCPv6 service (RFC 8415) on UDP 547, joined to ff02::1:2 on the server's interfaces by
//! app.rs: SOLICIT -> ADVERTISE (REPLY with rapid commit), REQUEST, RENEW and REBIND -> REPLY
//! with the client's address from `dhcp6.range` (`boot::leases6`, shared through `identity`),
//! CONFIRM, RELEASE, DECLINE and INFORMATION-REQUEST -> REPLY. A client is its MAC (from its
//! DUID, the EUI-64 link-local address it sent from, or option 79; `proto::dhcp6`); what it
//! boots is `boot::plan6`, the same policy as DHCPv4's, given as option 59's URL with the
//! class its firmware looks for in option 16, and its name in the Client FQDN option (39) when
//! it sent one and asks for it (RFC 4704). Clients in no pool, and clients known only by a
//! DUID (no pool can list one), get silence: counted, logged once. Malformed packets are
//! dropped and counted (under `dhcp` in the counters). A message relayed to us (RELAY-FORW,
//! RFC 8415 19) is answered inside RELAY-REPLs back through the same relays, when the relay
//! nearest the client names a link inside `dhcp6.subnet`; one from another link is dropped and
//! counted.

use super::identity::{Identity, unix_now};
use crate::boot::leases6::Leases6;
use crate::boot::{self, Client};
use crate::config::{Config, Live, Mac};
use crate::metrics::Metrics;
use crate::proto::dhcp6::{self as wire, IaAnswer, MAX_PACKET, Reply, Request, msg};
use crate::record::{Kind, Recorder, Who};
use crate::steer::firmware::FirmwareWatch;
use dhcproto::v6::Status;
use std::collections::HashSet;
use std::net::{Ipv6Addr, SocketAddr};
use tokio::net::UdpSocket;

/// Strangers logged once each; beyond this many we stop remembering (and logging) them.
const STRANGERS_REMEMBERED: usize = 4096;

/// Serves DHCPv6 on `socket` (bound by app.rs to [::]:547 and joined to ff02::1:2).
pub async fn serve(socket: UdpSocket, shared: super::Shared) -> anyhow::Result<()> {
    let super::Shared {
        config,
        recorder,
        metrics,
        identity,
        unknown,
        enrol,
        links,
        site,
        shutdown,
        ..
    } = shared;
    // `dhcp6` and `server.address6` cannot change while the daemon runs; the pools can, and
    // each request loads them.
    let live = config;
    let config = live.load();
    let (Some(dhcp6), Some(address6)) = (config.dhcp6.as_ref(), config.server.address6) else {
        anyhow::bail!("the DHCPv6 service needs dhcp6 and server.address6");
    };
    // The bindings a kill -9 left, taken back before the first answer.
    let state_dir = config.server.state_dir.clone();
    let mut table = Leases6::new(dhcp6.range);
    let kept = table.restore(super::leases6_file::read(&state_dir)?);
    if kept > 0 {
        tracing::info!(bindings = kept, file = %state_dir.join(super::leases6_file::FILE).display(),
            "DHCPv6 bindings read back");
    }
    *identity.write6() = table;
    let mut server = Server {
        changed: false,
        duid: wire::server_duid(address6),
        address6,
        config: live,
        recorder,
        metrics,
        identity,
        strangers: HashSet::new(),
        unknown,
        enrol,
        firmware: links.firmware(),
        site,
    };
    let mut buf = vec![0u8; MAX_PACKET + 1];
    loop {
        let (n, from) = tokio::select! {
            _ = shutdown.wait() => break,
            r = socket.recv_from(&mut buf) => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!(error = %e, "dhcp6 receive error");
                    continue;
                }
            },
        };
        let SocketAddr::V6(from) = from else {
            continue;
        };
        let Some(bytes) = server.answer_relayed(&buf[..n], *from.ip(), unix_now()) else {
            continue;
        };
        // A binding changed: saved, synced, before the REPLY that promises it leaves.
        if std::mem::take(&mut server.changed) {
            let (saved, dir) = (server.identity.read6().saved(), state_dir.clone());
            let written =
                tokio::task::spawn_blocking(move || super::leases6_file::write(&dir, &saved)).await;
            if let Err(e) = written.map_err(std::io::Error::other).and_then(|r| r) {
                tracing::error!(error = %e, file = %state_dir.join(super::leases6_file::FILE).display(),
                    "DHCPv6 bindings not saved; the reply is not sent");
                continue;
            }
        }
        // To where it came from: the client's link-local address (with its scope) and port
        // 546, or the relay's address and port 547.
        if let Err(e) = socket.send_to(&bytes, from).await {
            tracing::warn!(%from, error = %e, "dhcp6 reply not sent");
        }
    }
    Ok(())
}

struct Server {
    /// Whether the last answer changed a binding (it is saved before the answer leaves).
    changed: bool,
    /// Loaded once per request.
    config: Live,
    recorder: Recorder,
    metrics: Metrics,
    identity: Identity,
    address6: Ipv6Addr,
    duid: Vec<u8>,
    /// MACs (or DUIDs, hex) already logged as strangers.
    strangers: HashSet<String>,
    /// Where strangers with a MAC are listed for the admin (`GET /api/v1/unknown`).
    unknown: std::sync::Arc<super::unknown::Unknown>,
    /// Enrols the clients a `discover` pool takes.
    enrol: std::sync::Arc<super::enrol::Enroller>,
    /// Where a firmware's request keeps the links' headroom (`steer::firmware`): every
    /// link, since no paced link is an IPv6 address.
    firmware: FirmwareWatch,
    /// Which clients are this server's to answer, among the members of its site (by DUID).
    site: std::sync::Arc<crate::site::live::Site>,
}

impl Server {
    /// Reads one message from `from`, through whatever relays carried it, and answers it: the
    /// reply encoded, inside a RELAY-REPL for each relay (nothing is sent here).
    fn answer_relayed(&mut self, bytes: &[u8], from: Ipv6Addr, now: u64) -> Option<Vec<u8>> {
        let (hops, message) = match wire::unwrap_relays(bytes) {
            Ok(unwrapped) => unwrapped,
            Err(why) => return self.metrics.dhcp().decoded(Err(why), "dhcp6", from),
        };
        // The relay nearest the client says which link it is on, and heard it at its address.
        let client = match hops.last() {
            None => from,
            Some(near) => {
                let config = self.config.load();
                let ours = config.dhcp6.as_ref();
                if !ours.is_some_and(|d| d.subnet.contains(near.link_address)) {
                    static ELSEWHERE: super::bounds::LogLimit = super::bounds::LogLimit::new();
                    let dhcp = self.metrics.dhcp();
                    dhcp.refused.inc();
                    dhcp.no_subnet.inc();
                    if let Some(suppressed) = ELSEWHERE.allow() {
                        tracing::warn!(relay = %from, link = %near.link_address, suppressed,
                            "dhcp6 relayed message dropped: its link is outside dhcp6.subnet");
                    }
                    return None;
                }
                near.peer_address
            }
        };
        let reply = self.answer(message, client, now)?;
        let bytes = wire::encode_reply(&reply)
            .map_err(|e| tracing::error!(error = %e, "dhcp6 reply not encodable"))
            .ok()?;
        wire::wrap_relays(&hops, bytes)
    }

    /// Reads one client message from `from` and answers it.
    fn answer(&mut self, bytes: &[u8], from: Ipv6Addr, now: u64) -> Option<Reply> {
        let req = self
            .metrics
            .dhcp()
            .decoded(wire::parse_request(bytes), "dhcp6", from)?;
        // Over IPv6 only firmware asks bootpool (the demo initrd's DHCP is IPv4's).
        self.metrics.dhcp().firmware.inc();
        self.firmware.asked(None);
        // Messages meant for another server are not ours to answer.
        let ours = req.server_id().is_none_or(|id| id == self.duid);
        let needs_ours = matches!(
            req.msg_type,
            msg::REQUEST | msg::RENEW | msg::RELEASE | msg::DECLINE
        );
        if !ours || (needs_ours && req.server_id().is_none()) {
            return None;
        }
        if req.msg_type == msg::SOLICIT && req.server_id().is_some() {
            return None;
        }
        // In a site, what every server hears (no server named) is answered by the member
        // RFC 3074's hash gives the client's DUID; what names this server, by this server.
        if req.server_id().is_none() && !self.site.mine(&req.client_id) {
            self.metrics.dhcp().others.inc();
            return None;
        }
        let duid = hex(&req.client_id);
        let Some(mac) = req.mac(from).map(Mac) else {
            return self.stranger(duid, from, "known only by its DUID, which no pool can list");
        };
        // Firmware says what it is in option 16 (`PXEClient`, `HTTPClient`) and 61, iPXE in
        // option 15 (`iPXE`): the same reading as DHCPv4's options 60, 93 and 77.
        let client = Client {
            mac,
            arch: req.arch(),
            ipxe: req.is_ipxe(),
            pxe: req.is_pxe(),
            http: req.is_http_client(),
        };
        let config = self.config.load();
        let Some((member, url)) = boot::plan6(&config, &client, self.address6) else {
            if config.member(mac).is_none() {
                let asking = super::unknown::Asking {
                    mac,
                    asked: super::unknown::Asked::Dhcp6,
                    vendor_class: req.vendor_classes().first().map(|c| c.to_vec()),
                    arch: client.arch,
                    relay: None,
                    circuit_id: None,
                    remote_id: None,
                };
                self.unknown.note(&asking, now);
            }
            return self.stranger(mac.to_string(), from, "in no pool");
        };
        let pool = member.pool.name.clone();
        if member.discovered() {
            self.enrol.discovered(config.clone(), mac, &pool);
        }
        let booting = client.pxe || client.ipxe;
        let valid = config
            .dhcp6
            .as_ref()
            .map_or(0, |d| d.lease.as_secs().min(u64::from(u32::MAX)) as u32);
        let mut reply = Reply {
            advertise: false,
            xid: req.xid,
            client_id: req.client_id.clone(),
            server_id: self.duid.clone(),
            ia_na: Vec::new(),
            status: None,
            rapid_commit: false,
            // HTTP boot takes an offer as a boot offer only with `HTTPClient` in option 16;
            // EDK2's PXE takes one with `PXEClient` for a BINL offer and asks port 4011 for
            // its boot file, so PXE gets no class and finds the URL in the answer itself.
            class: client.http.then_some(&b"HTTPClient"[..]),
            dns: config
                .dhcp6
                .as_ref()
                .map(|d| d.dns.clone())
                .unwrap_or_default(),
            boot_url: url.clone(),
            // The client's name, as option 12 over DHCPv4, where it asks as RFC 4704 wants.
            fqdn: req
                .asks_fqdn()
                .and_then(|flags| Some((member.name()?, flags))),
        };
        match req.msg_type {
            msg::SOLICIT => {
                self.recorder.record(
                    Who::Mac(mac),
                    Kind::DhcpDiscover {
                        pxe: booting,
                        ipxe: client.ipxe,
                        pool: Some(pool.clone()),
                        answered: true,
                        arch: client.arch,
                    },
                );
                if req.rapid_commit() {
                    reply.rapid_commit = true;
                    self.bind(&req, &mut reply, mac, now, valid);
                } else {
                    reply.advertise = true;
                    let addr = self.identity.read6().peek(mac, now);
                    reply.ia_na = req
                        .ia_na
                        .iter()
                        .map(|ia| (ia.iaid, address_or_none(addr, valid)))
                        .collect();
                }
            }
            msg::REQUEST | msg::RENEW | msg::REBIND => self.bind(&req, &mut reply, mac, now, valid),
            msg::CONFIRM => {
                let inside = req
                    .ia_na
                    .iter()
                    .flat_map(|ia| &ia.addrs)
                    .all(|a| config.dhcp6.as_ref().is_some_and(|d| d.subnet.contains(*a)));
                reply.status = Some(if inside {
                    (Status::Success, "on link")
                } else {
                    (Status::NotOnLink, "not on this link")
                });
                reply.boot_url = None;
            }
            msg::RELEASE | msg::DECLINE => self.release(&req, &mut reply, mac, from, now),
            // INFORMATION-REQUEST: no address, the boot URL and DNS only.
            _ => self.inform(&config, &client, &pool, &duid, now, valid),
        }
        let given = reply.ia_na.iter().find_map(|(_, a)| match a {
            IaAnswer::Address { addr, .. } => Some(*addr),
            IaAnswer::Status(..) => None,
        });
        tracing::info!(%mac, %from, msg = req.msg_type, ?given, %pool, ipxe = client.ipxe,
            arch = ?client.arch, options = ?req.options.keys().collect::<Vec<_>>(),
            vendor_class = %hex(req.options.get(&wire::opt::VENDOR_CLASS).map_or(&[][..], Vec::as_slice)),
            boot_url = url.as_deref().unwrap_or("-"), "dhcp6 answer");
        Some(reply)
    }

    /// RELEASE or DECLINE: only the binding's own DUID naming the address it holds ends it
    /// (the MAC in a DUID, and the DUID itself, anyone on the link can copy).
    fn release(&mut self, req: &Request, reply: &mut Reply, mac: Mac, from: Ipv6Addr, now: u64) {
        let named: Vec<Ipv6Addr> = req
            .ia_na
            .iter()
            .flat_map(|ia| ia.addrs.iter().copied())
            .collect();
        let ended = self.identity.write6().end(mac, &req.client_id, &named, now);
        self.changed |= ended;
        reply.status = Some(if ended {
            (Status::Success, "done")
        } else {
            self.metrics.dhcp().refused.inc();
            tracing::info!(%mac, %from, msg = req.msg_type, ?named,
                "dhcp6 release or decline ignored: not the DUID and address of this client's binding");
            (Status::NoBinding, "no such binding")
        });
        reply.boot_url = None;
        reply.class = None;
    }

    /// INFORMATION-REQUEST: no address, the boot URL and DNS only. A client that asks only
    /// this forms its own address from the advertised /64 (iPXE: EUI-64); it is known there,
    /// so its HTTP and TFTP requests are recorded for its MAC.
    fn inform(
        &mut self,
        config: &Config,
        client: &Client,
        pool: &str,
        duid: &str,
        now: u64,
        valid: u32,
    ) {
        let mac = client.mac;
        let Some(d) = config.dhcp6.as_ref().filter(|d| d.subnet.prefix == 64) else {
            return;
        };
        let formed = wire::eui64(d.subnet.network, mac.0);
        self.identity
            .write6()
            .observe(mac, formed, now + u64::from(valid));
        if client.pxe || client.ipxe {
            self.recorder.record(
                Who::Mac(mac),
                Kind::Dhcp6Reply {
                    ip: formed,
                    pxe: true,
                    ipxe: client.ipxe,
                    pool: pool.to_string(),
                    duid: Some(duid.to_string()),
                },
            );
        }
    }

    /// Binds `mac`'s address for each IA_NA the client sent (one address per client) and
    /// records the REPLY.
    fn bind(&mut self, req: &Request, reply: &mut Reply, mac: Mac, now: u64, valid: u32) {
        if req.ia_na.is_empty() {
            return;
        }
        let addr = self
            .identity
            .write6()
            .bind(mac, &req.client_id, now, now + u64::from(valid));
        self.changed |= addr.is_some();
        reply.ia_na = req
            .ia_na
            .iter()
            .map(|ia| (ia.iaid, address_or_none(addr, valid)))
            .collect();
        match addr {
            Some(ip) => {
                let booting = req.is_pxe() || req.is_ipxe();
                let pool = self
                    .config
                    .load()
                    .member(mac)
                    .map(|m| m.pool.name.clone())
                    .unwrap_or_default();
                self.recorder.record(
                    Who::Mac(mac),
                    Kind::Dhcp6Reply {
                        ip,
                        pxe: booting,
                        ipxe: req.is_ipxe(),
                        pool,
                        duid: Some(hex(&req.client_id)),
                    },
                );
            }
            None => {
                self.metrics.dhcp().refused.inc();
                tracing::warn!(%mac, "dhcp6 range full; no address given");
            }
        }
    }

    /// Counts a client we do not answer and logs it the first time.
    fn stranger(&mut self, key: String, from: Ipv6Addr, why: &str) -> Option<Reply> {
        self.metrics.dhcp().strangers.inc();
        if self.strangers.len() < STRANGERS_REMEMBERED && self.strangers.insert(key.clone()) {
            tracing::info!(client = %key, %from, why, "dhcp6 client not answered");
        }
        None
    }
}

fn address_or_none(addr: Option<Ipv6Addr>, valid: u32) -> IaAnswer {
    match addr {
        Some(addr) => IaAnswer::Address {
            addr,
            preferred: valid / 2,
            valid,
        },
        None => IaAnswer::Status(Status::NoAddrsAvail, "no address free"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::unknown::Unknown;
    use std::path::Path;
    use std::sync::Arc;

    const CONFIG: &str = "\
server: { address: 10.77.0.1, address6: \"fd77::1\", http: 0.0.0.0:8080, interfaces: [br0] }
dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.199 }
dhcp6: { subnet: \"fd77::/64\", range: \"fd77::100-fd77::101\" }
images:
  demo: { dir: images/demo }
pools:
  room:
    image: demo
    root: nbd
    clients:
      - { macs: \"52:54:00:77:00:00-52:54:00:77:00:ff\" }
";

    fn option(code: u16, value: &[u8]) -> Vec<u8> {
        let mut o = code.to_be_bytes().to_vec();
        o.extend_from_slice(&(value.len() as u16).to_be_bytes());
        o.extend_from_slice(value);
        o
    }

    /// A message from OVMF's HTTP boot (DUID-LL of `mac`, one IA_NA, `HTTPClient`).
    fn firmware(kind: u8, mac: [u8; 6], server: Option<&[u8]>) -> Vec<u8> {
        let mut m = vec![kind, 0, 0, 7];
        let mut duid = vec![0, 3, 0, 1];
        duid.extend_from_slice(&mac);
        m.extend(option(wire::opt::CLIENT_ID, &duid));
        if let Some(s) = server {
            m.extend(option(wire::opt::SERVER_ID, s));
        }
        m.extend(option(
            wire::opt::IA_NA,
            &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
        ));
        m.extend(option(wire::opt::CLIENT_ARCH, &[0, 16]));
        let mut class = wire::EDK2_ENTERPRISE.to_be_bytes().to_vec();
        class.extend_from_slice(&[0, 10]);
        class.extend_from_slice(b"HTTPClient");
        m.extend(option(wire::opt::VENDOR_CLASS, &class));
        m
    }

    /// `firmware`'s message of `kind` whose IA_NA names `addr`.
    fn naming(kind: u8, mac: [u8; 6], server: &[u8], addr: Ipv6Addr) -> Vec<u8> {
        naming_duid(firmware(kind, mac, Some(server)), addr)
    }

    /// `message` (as `firmware` makes it) with its IA_NA naming `addr` (an IAADDR option).
    fn naming_duid(message: Vec<u8>, addr: Ipv6Addr) -> Vec<u8> {
        let empty_ia = option(wire::opt::IA_NA, &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
        let at = message
            .windows(empty_ia.len())
            .position(|w| w == empty_ia)
            .unwrap();
        let mut iaaddr = addr.octets().to_vec();
        iaaddr.extend_from_slice(&[0; 8]);
        let mut ia = vec![0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        ia.extend(option(5, &iaaddr));
        let mut out = message[..at].to_vec();
        out.extend(option(wire::opt::IA_NA, &ia));
        out.extend_from_slice(&message[at + empty_ia.len()..]);
        out
    }

    /// The server of `CONFIG` at fd77::1, alone (no site), its bindings in a fresh table.
    fn test_server() -> Server {
        let config = crate::config::Config::parse(Path::new("p.yaml"), CONFIG).unwrap();
        let identity = Identity::default();
        *identity.write6() = Leases6::new(config.dhcp6.as_ref().unwrap().range);
        Server {
            changed: false,
            duid: wire::server_duid("fd77::1".parse().unwrap()),
            address6: "fd77::1".parse().unwrap(),
            config: Live::fixed(config),
            recorder: Recorder::discard(),
            metrics: Metrics::default(),
            identity,
            strangers: HashSet::new(),
            unknown: Arc::new(Unknown::in_memory(Metrics::default())),
            enrol: Arc::new(crate::service::enrol::Enroller::new(None)),
            firmware: FirmwareWatch::default(),
            site: crate::site::live::Site::none(),
        }
    }

    /// A SOLICIT relayed from a link inside `dhcp6.subnet` is answered inside a RELAY-REPL
    /// naming the same link, peer and interface id, with an address of the range; one relayed
    /// from another link gets silence, counted.
    #[tokio::test]
    async fn a_relayed_solicit_is_answered_through_its_relay() {
        let mut s = test_server();
        let relayed = |link: &str| {
            let mut m = vec![wire::msg::RELAY_FORW, 0];
            m.extend_from_slice(&link.parse::<Ipv6Addr>().unwrap().octets());
            m.extend_from_slice(&"fe80::5054:ff:fe77:5".parse::<Ipv6Addr>().unwrap().octets());
            m.extend(option(wire::opt::INTERFACE_ID, b"eth1"));
            m.extend(option(
                wire::opt::RELAY_MSG,
                &firmware(msg::SOLICIT, [0x52, 0x54, 0, 0x77, 0, 5], None),
            ));
            m
        };
        let relay: Ipv6Addr = "fd77::fe".parse().unwrap();
        let bytes = s.answer_relayed(&relayed("fd77::fe"), relay, 100).unwrap();
        assert_eq!(bytes[0], wire::msg::RELAY_REPL);
        let mut forw = relayed("fd77::fe");
        forw[0] = wire::msg::RELAY_REPL;
        let iid = option(wire::opt::INTERFACE_ID, b"eth1");
        let head = 34 + iid.len();
        assert_eq!(
            bytes[..head],
            forw[..head],
            "the relay's addresses and interface id"
        );
        let inner = &bytes[head + 4..];
        let adv = <dhcproto::v6::Message as dhcproto::Decodable>::from_bytes(inner).unwrap();
        assert_eq!(adv.msg_type(), dhcproto::v6::MessageType::Advertise);
        let given = format!("{:?}", adv.opts());
        assert!(given.contains("fd77::100"), "{given}");
        assert!(s.answer_relayed(&relayed("fd78::1"), relay, 101).is_none());
        assert_eq!(s.metrics.dhcp().no_subnet.get(), 1);
    }

    /// In a site, a SOLICIT (to every server) is answered by the member its DUID's RFC 3074
    /// bucket is; a REQUEST naming this server, by this server whatever the bucket.
    #[tokio::test]
    async fn in_a_site_the_duids_owner_answers_what_every_server_hears() {
        use crate::site::live::Site;
        let mut s = test_server();
        let duid_bucket = |mac: [u8; 6]| {
            let mut duid = vec![0, 3, 0, 1];
            duid.extend_from_slice(&mac);
            crate::site::hash::bucket(&duid)
        };
        let mac = (0..16u8)
            .map(|m| [0x52, 0x54, 0, 0x77, 0, m])
            .find(|&m| duid_bucket(m) % 2 == 1)
            .unwrap();
        let ll = Ipv6Addr::UNSPECIFIED;
        let solicit = firmware(msg::SOLICIT, mac, None);
        s.site = Site::seeing("a", &["a", "b"], &[]);
        assert!(s.answer(&solicit, ll, 100).is_none());
        assert_eq!(s.metrics.dhcp().others.get(), 1);
        let duid = s.duid.clone();
        let request = firmware(msg::REQUEST, mac, Some(&duid));
        assert!(s.answer(&request, ll, 100).is_some());
        s.site = Site::seeing("b", &["a", "b"], &[]);
        assert!(s.answer(&solicit, ll, 100).is_some());
        s.site = Site::seeing("a", &["a"], &["b"]);
        assert!(s.answer(&solicit, ll, 100).is_some());
    }

    #[tokio::test]
    async fn firmware_gets_an_address_and_the_loader_url_strangers_get_nothing() {
        let mut s = test_server();
        let identity = s.identity.clone();
        let mac = [0x52, 0x54, 0, 0x77, 0, 5];
        let ll = Ipv6Addr::UNSPECIFIED;
        let adv = s
            .answer(&firmware(msg::SOLICIT, mac, None), ll, 100)
            .unwrap();
        assert!(adv.advertise);
        let url = "http://[fd77::1]:8080/boot/loaders/snponly.efi";
        assert_eq!(adv.boot_url.as_deref(), Some(url));
        assert_eq!(adv.class, Some(&b"HTTPClient"[..]));
        let first: Ipv6Addr = "fd77::100".parse().unwrap();
        assert!(matches!(adv.ia_na[0], (1, IaAnswer::Address { addr, .. }) if addr == first));
        // An ADVERTISE holds nothing; the REQUEST to this server binds.
        assert_eq!(identity.holder(first.into()), None);
        let duid = s.duid.clone();
        let rep = s
            .answer(&firmware(msg::REQUEST, mac, Some(&duid)), ll, 101)
            .unwrap();
        assert!(!rep.advertise);
        assert_eq!(rep.boot_url.as_deref(), Some(url));
        assert_eq!(identity.read6().holder(first, 102), Some(Mac(mac)));
        // A REQUEST to another server is not ours.
        assert!(
            s.answer(&firmware(msg::REQUEST, mac, Some(&[0, 2, 1])), ll, 101)
                .is_none()
        );
        // A MAC in no pool (listed as unknown, asking by DHCPv6), and a message that is not
        // DHCPv6.
        assert!(
            s.answer(&firmware(msg::SOLICIT, [2, 0, 0, 0, 0, 1], None), ll, 101)
                .is_none()
        );
        let unknown = s.unknown.list();
        assert_eq!(unknown.len(), 1);
        assert_eq!(unknown[0].mac, Mac([2, 0, 0, 0, 0, 1]));
        assert_eq!(unknown[0].asked, vec![super::super::unknown::Asked::Dhcp6]);
        assert!(s.answer(&[1, 2, 3], ll, 101).is_none());
        // Another client gets the next address, a third finds the range full.
        let other = [0x52, 0x54, 0, 0x77, 0, 6];
        s.answer(&firmware(msg::REQUEST, other, Some(&duid)), ll, 101)
            .unwrap();
        let full = s
            .answer(
                &firmware(msg::REQUEST, [0x52, 0x54, 0, 0x77, 0, 7], Some(&duid)),
                ll,
                101,
            )
            .unwrap();
        assert!(matches!(
            full.ia_na[0].1,
            IaAnswer::Status(Status::NoAddrsAvail, _)
        ));
        // A RELEASE or DECLINE naming no address, another client's address, or carrying
        // another DUID with this MAC ends nothing.
        let second: Ipv6Addr = "fd77::101".parse().unwrap();
        // A DUID-LLT with the same MAC: another client's identifier (another OS on it).
        let ll_msg = firmware(msg::RELEASE, mac, Some(&duid));
        let mut llt = vec![0, 1, 0, 1, 0, 0, 0, 9];
        llt.extend_from_slice(&mac);
        let mut other_duid = ll_msg[..4].to_vec();
        other_duid.extend(option(wire::opt::CLIENT_ID, &llt));
        other_duid.extend_from_slice(&ll_msg[4 + 4 + 10..]);
        for (m, forged) in [
            (msg::RELEASE, firmware(msg::RELEASE, mac, Some(&duid))),
            (msg::DECLINE, naming(msg::DECLINE, mac, &duid, second)),
            (msg::RELEASE, naming_duid(other_duid, first)),
        ] {
            let no = s.answer(&forged, ll, 150).unwrap();
            assert_eq!(no.status.map(|s| s.0), Some(Status::NoBinding), "{m}");
            assert_eq!(identity.read6().holder(first, 151), Some(Mac(mac)));
        }
        // Its own DUID naming its address: the binding ends.
        let done = s
            .answer(&naming(msg::RELEASE, mac, &duid, first), ll, 200)
            .unwrap();
        assert_eq!(done.status.map(|s| s.0), Some(Status::Success));
        assert_eq!(identity.read6().holder(first, 201), None);
    }
}

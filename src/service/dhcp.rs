//! DHCP service, authoritative mode: DISCOVER -> OFFER, REQUEST -> ACK/NAK, RELEASE, DECLINE.
//! Owns the lease table and its file (`state_dir/leases.json`, rewritten atomically on every
//! change, so a daemon killed with -9 loses nothing), reply addressing, and the DHCP events.
//! What to boot comes from `boot::plan`; clients in no pool get silence.

use crate::boot::leases::{Leases, Saved};
use crate::boot::{self, Client};
use crate::config::{Config, DhcpMode, Mac};
use crate::proto::dhcp::{self as wire, MAX_PACKET, Reply, ReplyKind, Request};
use crate::record::{Kind, Recorder, Who};
use crate::shutdown::Shutdown;
use anyhow::Context as _;
use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::net::UdpSocket;

const DISCOVER: u8 = 1;
const REQUEST: u8 = 3;
const DECLINE: u8 = 4;
const RELEASE: u8 = 7;
const INFORM: u8 = 8;
/// How long an offered address is held for the client's REQUEST.
const OFFER_HOLD_S: u64 = 60;
const CLIENT_PORT: u16 = 68;
/// Relays listen on the server port (RFC 1542), whatever port this daemon was given.
const RELAY_PORT: u16 = 67;
/// Strangers logged once each; beyond this many we stop remembering (and logging) them.
const STRANGERS_REMEMBERED: usize = 4096;
pub const LEASES_FILE: &str = "leases.json";

/// What the service has seen, for logs and later for metrics.
#[derive(Debug, Default)]
pub struct Counters {
    pub malformed: AtomicU64,
    pub strangers: AtomicU64,
    pub offers: AtomicU64,
    pub acks: AtomicU64,
    pub naks: AtomicU64,
    pub save_errors: AtomicU64,
}

pub async fn serve(
    socket: UdpSocket,
    config: Arc<Config>,
    recorder: Recorder,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    if config.dhcp.mode == DhcpMode::Proxy {
        // proxyDHCP is its own issue; staying silent is safe beside another server.
        tracing::warn!("dhcp proxy mode is not implemented yet; not answering DHCP");
        shutdown.wait().await;
        return Ok(());
    }
    let path = config.server.state_dir.join(LEASES_FILE);
    let leases = load(&config, &path)?;
    let mut server = Server {
        config,
        recorder,
        leases,
        path,
        strangers: HashSet::new(),
        counters: Arc::default(),
    };
    let mut buf = vec![0u8; MAX_PACKET + 1];
    loop {
        let (n, from) = tokio::select! {
            _ = shutdown.wait() => break,
            r = socket.recv_from(&mut buf) => match r {
                Ok(x) => x,
                Err(e) => {
                    // ICMP errors from earlier sends surface here; they are not fatal.
                    tracing::debug!(error = %e, "dhcp receive error");
                    continue;
                }
            },
        };
        let req = match wire::parse_request(&buf[..n]) {
            Ok(r) => r,
            Err(reason) => {
                let c = server.counters.malformed.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::debug!(%from, %reason, malformed = c, "dhcp packet dropped");
                continue;
            }
        };
        let Some((reply, to)) = server.handle(&req, from, unix_now()) else {
            continue;
        };
        match wire::encode_reply(&reply) {
            Ok(bytes) => {
                if let Err(e) = socket.send_to(&bytes, to).await {
                    tracing::warn!(%to, error = %e, "dhcp reply not sent");
                }
            }
            Err(e) => tracing::error!(error = %e, "dhcp reply not encodable"),
        }
    }
    Ok(())
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The lease table for this config, with what the file holds.
fn load(config: &Config, path: &Path) -> anyhow::Result<Leases> {
    let reservations = config
        .pools
        .values()
        .flat_map(|p| p.clients.iter())
        .filter_map(|c| Some((c.macs.first, c.ip?)));
    let mut leases = Leases::new(config.dhcp.range, reservations);
    match std::fs::read(path) {
        Ok(bytes) => {
            let saved: Saved = serde_json::from_slice(&bytes)
                .with_context(|| format!("reading leases from {}", path.display()))?;
            let count = saved.leases.len();
            let skipped = leases.restore(saved);
            tracing::info!(path = %path.display(), count, skipped, "leases loaded");
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    Ok(leases)
}

/// Writes the file next to its final name and renames it over: readers and a restart after
/// kill -9 see the old table or the new one, never half of one.
fn save(leases: &Leases, path: &Path) -> std::io::Result<()> {
    let tmp: PathBuf = path.with_extension("json.tmp");
    let json = serde_json::to_vec_pretty(&leases.to_saved()).map_err(std::io::Error::other)?;
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&json)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

struct Server {
    config: Arc<Config>,
    recorder: Recorder,
    leases: Leases,
    path: PathBuf,
    strangers: HashSet<Mac>,
    counters: Arc<Counters>,
}

impl Server {
    /// Answers one request: the reply and where it goes, or `None` for silence.
    fn handle(&mut self, req: &Request, from: SocketAddr, now: u64) -> Option<(Reply, SocketAddr)> {
        let mac = Mac(req.mac);
        let client = Client {
            mac,
            arch: req.arch(),
            ipxe: req.is_ipxe(),
            pxe: req.is_pxe(),
        };
        let config = self.config.clone();
        let Some(plan) = boot::plan(&config, &client) else {
            self.counters.strangers.fetch_add(1, Ordering::Relaxed);
            if self.strangers.len() < STRANGERS_REMEMBERED && self.strangers.insert(mac) {
                tracing::info!(%mac, %from, "dhcp client in no pool; not answering it");
            }
            return None;
        };
        let server_id = config.server.address;
        self.leases.expire(now);
        let msg = req.message_type()?;
        let (kind, yiaddr) = match msg {
            DISCOVER => {
                self.recorder.record(
                    Who::Mac(mac),
                    Kind::DhcpDiscover {
                        pxe: client.pxe,
                        ipxe: client.ipxe,
                    },
                );
                let Some(ip) = self
                    .leases
                    .offer(mac, req.requested_ip(), now, OFFER_HOLD_S)
                else {
                    tracing::warn!(%mac, "dhcp range exhausted; no offer");
                    return None;
                };
                self.changed();
                self.counters.offers.fetch_add(1, Ordering::Relaxed);
                (ReplyKind::Offer, ip)
            }
            REQUEST => {
                if let Some(sid) = req.server_id()
                    && sid != server_id
                {
                    // It chose another server's offer.
                    if self.leases.withdraw_offer(mac, now) {
                        self.changed();
                    }
                    return None;
                }
                // SELECTING/INIT-REBOOT name the address in option 50; RENEWING/REBINDING
                // use ciaddr.
                let ip = req.requested_ip().unwrap_or(req.ciaddr);
                let lease_s = config.dhcp.lease.as_secs();
                match self.leases.ack(mac, ip, now, lease_s) {
                    Ok(()) => {
                        self.changed();
                        self.counters.acks.fetch_add(1, Ordering::Relaxed);
                        self.recorder.record(
                            Who::Mac(mac),
                            Kind::DhcpAck {
                                ip,
                                pxe: client.pxe,
                                ipxe: client.ipxe,
                                pool: plan.member.pool.name.clone(),
                            },
                        );
                        tracing::info!(%mac, %ip, pool = %plan.member.pool.name,
                            pxe = client.pxe, ipxe = client.ipxe,
                            boot_file = plan.boot_file.as_ref().map(|b| b.as_str()).unwrap_or("-"),
                            "dhcp ack");
                        (ReplyKind::Ack, ip)
                    }
                    Err(why) => {
                        self.counters.naks.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(%mac, %ip, reason = %why, "dhcp nak");
                        let reply = Reply {
                            message: Some(why.to_string()),
                            ..self.reply(req, ReplyKind::Nak, Ipv4Addr::UNSPECIFIED, &plan)
                        };
                        // A NAK goes to everyone: the client may have no usable address.
                        let to = if req.giaddr.is_unspecified() {
                            SocketAddrV4::new(Ipv4Addr::BROADCAST, CLIENT_PORT)
                        } else {
                            SocketAddrV4::new(req.giaddr, RELAY_PORT)
                        };
                        return Some((reply, to.into()));
                    }
                }
            }
            RELEASE => {
                if self.leases.release(mac, req.ciaddr, now) {
                    self.changed();
                    tracing::info!(%mac, ip = %req.ciaddr, "dhcp release");
                }
                return None;
            }
            DECLINE => {
                if let Some(ip) = req.requested_ip()
                    && self.leases.decline(mac, ip, now)
                {
                    self.changed();
                    tracing::warn!(%mac, %ip, "dhcp decline: address in use by someone else");
                }
                return None;
            }
            INFORM => (ReplyKind::Ack, Ipv4Addr::UNSPECIFIED),
            other => {
                tracing::debug!(%mac, msg = other, "dhcp message type ignored");
                return None;
            }
        };
        let mut reply = self.reply(req, kind, yiaddr, &plan);
        if msg == INFORM {
            reply.lease_secs = None;
        }
        let to = self.destination(req);
        Some((reply, to))
    }

    fn reply(&self, req: &Request, kind: ReplyKind, yiaddr: Ipv4Addr, plan: &boot::Plan) -> Reply {
        let d = &self.config.dhcp;
        let boot_file = plan.boot_file.as_ref().map(|b| b.as_str().to_string());
        let tftp = matches!(plan.boot_file, Some(boot::BootFile::Tftp(_)));
        Reply {
            kind,
            xid: req.xid,
            flags: req.flags,
            mac: req.mac,
            ciaddr: req.ciaddr,
            yiaddr,
            siaddr: if tftp {
                plan.next_server
            } else {
                Ipv4Addr::UNSPECIFIED
            },
            giaddr: req.giaddr,
            server_id: self.config.server.address,
            subnet_mask: Some(d.subnet.mask()),
            router: d.router,
            dns: d.dns.clone(),
            lease_secs: Some(u32::try_from(d.lease.as_secs()).unwrap_or(u32::MAX)),
            tftp_server: tftp.then(|| plan.next_server.to_string()),
            boot_file,
            pxe: req.is_pxe() && !req.is_ipxe(),
            message: None,
        }
    }

    /// RFC 2131 4.1: via the relay if there is one; unicast to a client that has an address
    /// and did not ask for broadcast; else broadcast (we cannot unicast to a MAC without ARP).
    fn destination(&self, req: &Request) -> SocketAddr {
        let to = if !req.giaddr.is_unspecified() {
            SocketAddrV4::new(req.giaddr, RELAY_PORT)
        } else if !req.ciaddr.is_unspecified() && !req.broadcast_flag() {
            SocketAddrV4::new(req.ciaddr, CLIENT_PORT)
        } else {
            SocketAddrV4::new(Ipv4Addr::BROADCAST, CLIENT_PORT)
        };
        to.into()
    }

    fn changed(&mut self) {
        if let Err(e) = save(&self.leases, &self.path) {
            let n = self.counters.save_errors.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::error!(path = %self.path.display(), error = %e, errors = n,
                "leases not saved");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const CONFIG: &str = "\
server: { address: 10.77.0.1, http: 0.0.0.0:8080, state_dir: var/ }
dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.101, router: 10.77.0.1, lease: 1h }
images:
  demo: { dir: images/demo }
pools:
  room:
    image: demo
    clients:
      - { macs: \"52:54:00:77:00:00-52:54:00:77:00:0f\" }
      - { mac: \"52:54:00:77:00:20\", ip: 10.77.0.20 }
";

    fn server(dir: &Path) -> Server {
        let config = Arc::new(Config::parse(&dir.join("pools.yaml"), CONFIG).unwrap());
        Server {
            leases: load(&config, &dir.join(LEASES_FILE)).unwrap(),
            config,
            recorder: Recorder::discard(),
            path: dir.join(LEASES_FILE),
            strangers: HashSet::new(),
            counters: Arc::default(),
        }
    }

    fn req(mac: u8, options: &[u8]) -> Request {
        let mut raw = vec![0u8; 236];
        raw[..3].copy_from_slice(&[1, 1, 6]);
        raw[28..34].copy_from_slice(&[0x52, 0x54, 0, 0x77, 0, mac]);
        raw.extend_from_slice(&[99, 130, 83, 99]);
        raw.extend_from_slice(options);
        raw.push(255);
        wire::parse_request(&raw).unwrap()
    }

    fn from() -> SocketAddr {
        "0.0.0.0:68".parse().unwrap()
    }

    const BCAST: &str = "255.255.255.255:68";

    #[test]
    fn discover_request_ack_with_pxe_boot_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = server(dir.path());
        let mut o = vec![53, 1, DISCOVER, 93, 2, 0, 0, 60, 9];
        o.extend_from_slice(b"PXEClient");
        let (offer, to) = s.handle(&req(1, &o), from(), 1000).unwrap();
        assert_eq!(offer.kind, ReplyKind::Offer);
        assert_eq!(to, BCAST.parse().unwrap());
        assert_eq!(offer.yiaddr, Ipv4Addr::new(10, 77, 0, 100));
        assert_eq!(offer.boot_file.as_deref(), Some("undionly.kpxe"));
        assert_eq!(offer.siaddr, Ipv4Addr::new(10, 77, 0, 1));
        assert!(offer.pxe);
        let mut o = vec![53, 1, REQUEST, 50, 4, 10, 77, 0, 100, 54, 4, 10, 77, 0, 1];
        o.extend_from_slice(&[60, 9]);
        o.extend_from_slice(b"PXEClient");
        let (ack, _) = s.handle(&req(1, &o), from(), 1001).unwrap();
        assert_eq!(ack.kind, ReplyKind::Ack);
        assert_eq!(ack.lease_secs, Some(3600));
        // The file on disk says the same as the table.
        let saved: Saved =
            serde_json::from_slice(&std::fs::read(dir.path().join(LEASES_FILE)).unwrap()).unwrap();
        assert_eq!(saved.leases[0].ip, Ipv4Addr::new(10, 77, 0, 100));
        assert_eq!(saved.leases[0].expires, 1001 + 3600);
        // A fresh server reads it back: a renewal from ciaddr is unicast and acked.
        let mut s = server(dir.path());
        let mut renew = req(1, &[53, 1, REQUEST]);
        renew.ciaddr = Ipv4Addr::new(10, 77, 0, 100);
        let (ack, to) = s.handle(&renew, from(), 2000).unwrap();
        assert_eq!(ack.kind, ReplyKind::Ack);
        assert_eq!(ack.boot_file, None, "plain DHCP gets no boot file");
        assert_eq!(to, "10.77.0.100:68".parse().unwrap());
    }

    #[test]
    fn naks_silences_and_releases() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = server(dir.path());
        // Asking for another client's reservation: NAK, broadcast.
        let (nak, to) = s
            .handle(&req(2, &[53, 1, REQUEST, 50, 4, 10, 77, 0, 20]), from(), 10)
            .unwrap();
        assert_eq!(nak.kind, ReplyKind::Nak);
        assert_eq!(to, BCAST.parse().unwrap());
        // The reservation holder gets it.
        let (offer, _) = s
            .handle(&req(0x20, &[53, 1, DISCOVER]), from(), 10)
            .unwrap();
        assert_eq!(offer.yiaddr, Ipv4Addr::new(10, 77, 0, 20));
        // A REQUEST naming another server withdraws our offer, silently.
        let (offer, _) = s.handle(&req(3, &[53, 1, DISCOVER]), from(), 10).unwrap();
        let other = [53, 1, REQUEST, 54, 4, 10, 77, 0, 2, 50, 4];
        let mut o = other.to_vec();
        o.extend_from_slice(&offer.yiaddr.octets());
        assert!(s.handle(&req(3, &o), from(), 11).is_none());
        // Never-used addresses go first; with the range otherwise taken, the withdrawn one
        // is free again.
        let (other, _) = s.handle(&req(4, &[53, 1, DISCOVER]), from(), 12).unwrap();
        assert_ne!(other.yiaddr, offer.yiaddr);
        let (again, _) = s.handle(&req(6, &[53, 1, DISCOVER]), from(), 12).unwrap();
        assert_eq!(
            again.yiaddr, offer.yiaddr,
            "the withdrawn offer is free again"
        );
        assert!(
            s.handle(&req(7, &[53, 1, DISCOVER]), from(), 12).is_none(),
            "range full"
        );
        // Strangers and unknown message types get nothing.
        assert!(
            s.handle(&req(0x99, &[53, 1, DISCOVER]), from(), 12)
                .is_none()
        );
        assert!(s.handle(&req(1, &[53, 1, 42]), from(), 12).is_none());
        assert_eq!(s.counters.strangers.load(Ordering::Relaxed), 1);
        // A relayed request is answered to the relay's server port.
        let mut relayed = req(4, &[53, 1, DISCOVER]);
        relayed.giaddr = Ipv4Addr::new(10, 77, 9, 1);
        let (_, to) = s.handle(&relayed, from(), 13).unwrap();
        assert_eq!(to, "10.77.9.1:67".parse().unwrap());
    }
}

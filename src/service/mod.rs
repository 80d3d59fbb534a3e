//! I/O shells, one per listener. Each serves the socket `app` bound for it, owns its limits,
//! timeouts and retransmission, and records boot events.

pub mod api_client;
pub mod arp;
pub mod bounds;
pub mod console;
pub mod dhcp;
pub mod dhcp6;
pub mod enrol;
pub mod grub_config;
pub mod handover;
pub mod http;
pub mod identity;
pub mod lease_file;
pub mod leases6_file;
pub mod nbd;
pub mod next_boot;
pub mod nfs;
pub mod overlays;
pub mod portmap;
pub mod quick_read;
pub mod ra;
pub mod site_revisions;
pub mod takeover;
pub mod tftp;
pub mod tftp_transfers;
pub mod tickle;
pub mod tls;
pub mod unknown;
pub mod wake;
pub mod web;

use crate::config::{Config, Live};
use crate::export::boot_files::NotServed;
use crate::metrics::Metrics;
use crate::record::egress::Egress;
use crate::record::{Recorder, Records};
use crate::shutdown::Shutdown;
use crate::steer::fair_share::Carries;
use crate::steer::links::Links;
pub use crate::steer::links::ipv4_of;
use crate::steer::pacing::Paced;
use crate::steer::placement::Placement;
use identity::Identity;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};

/// SO_PRIORITY of what firmware waits on (DHCP answers, TFTP): TC_PRIO_INTERACTIVE, the band
/// a host's `pfifo_fast` or `prio` qdisc sends first and `fq` (Linux 6.9 and later) favours.
/// Classless qdiscs (`tbf`, `fq_codel`) and switches ignore it; what keeps those queues short
/// is the pacing of everything else (docs/links.md).
pub const FIRMWARE_PRIORITY: u32 = 6;

/// What every service is handed besides its sockets, one value for all (`app`'s service
/// table): the config as served (live: loaded once per request or connection, replaced whole
/// by a reload), the recorder and the records, the daemon's counters, who is
/// at which address, the server's links and which one each client boots from, the egress
/// samples, and the shutdown.
/// A service takes the fields it uses.
#[derive(Clone)]
pub struct Shared {
    pub config: Live,
    pub recorder: Recorder,
    pub records: Arc<Records>,
    /// The daemon's counters: each service counts into its own handle (`metrics.nfs()`).
    pub metrics: Metrics,
    /// Who is at which address (`service::identity`, the lease table's answer).
    pub identity: Identity,
    /// The server's links (`server.links`) and their pacers.
    pub links: Arc<Links>,
    /// Which server link each client boots from.
    pub placement: Arc<Placement>,
    /// The egress samples, kept by the egress sampler and read by the API.
    pub egress: Arc<Egress>,
    /// A restart's NBD connections: those to take up at start, those handed at the stop.
    pub handover: Arc<handover::Handover>,
    /// The clients no pool lists that asked (`service::unknown`): DHCP notes, the API lists.
    pub unknown: Arc<unknown::Unknown>,
    /// Enrols a MAC into a pool (the API, a `discover` pool), then has the config reloaded.
    pub enrol: Arc<enrol::Enroller>,
    /// The site this server is a member of (`site::live`): which clients it answers.
    pub site: Arc<crate::site::live::Site>,
    pub shutdown: Shutdown,
}

impl Shared {
    /// The dependencies of a service started on its own (tests): no server links, nobody
    /// known at any address, no egress samples yet.
    pub fn alone(
        config: Arc<Config>,
        recorder: Recorder,
        records: Arc<Records>,
        metrics: Metrics,
        shutdown: Shutdown,
    ) -> Shared {
        let placement = Arc::new(Placement::new(&config, Some(records.clone()), &[]));
        Shared {
            config: Live::fixed(Config::clone(&config)),
            recorder,
            records,
            metrics: metrics.clone(),
            identity: Identity::default(),
            links: Arc::new(Links::none()),
            placement,
            egress: Arc::default(),
            handover: Arc::default(),
            unknown: Arc::new(unknown::Unknown::in_memory(metrics.clone())),
            enrol: Arc::new(enrol::Enroller::new(None)),
            site: crate::site::live::Site::none(),
            shutdown,
        }
    }
}

/// A TCP listener, and the server's links that the connections it accepts are placed on.
pub struct Listener {
    pub tcp: TcpListener,
    pub links: Arc<Links>,
}

impl From<TcpListener> for Listener {
    /// A listener whose connections are neither bound to a link nor paced.
    fn from(tcp: TcpListener) -> Listener {
        Listener {
            tcp,
            links: Arc::new(Links::none()),
        }
    }
}

/// Whether `stream` was made to an address this server serves roots on: its own
/// (`boot::exports::on_a_link`), or a site member's it holds now (`site::held`).
pub fn made_to_us(config: &Config, site: &crate::site::live::Site, stream: &TcpStream) -> bool {
    stream
        .local_addr()
        .is_ok_and(|l| crate::boot::exports::on_a_link(config, l.ip()) || site.held().holds(l.ip()))
}

/// `stream`, from `peer`, recorded in the site's connections while the handle lives, so that
/// a member taking its address over can tickle it (`service::takeover`).
pub fn record_conn(
    site: &crate::site::live::Site,
    stream: &TcpStream,
    peer: SocketAddr,
) -> Option<crate::site::conns::Open> {
    site.conns().open(stream.local_addr().ok()?, peer)
}

/// Who a request from `ip` is about, for the record: an IPv4 client by its address (the
/// recorder knows it from the ACKs), an IPv6 one by the MAC its DHCPv6 binding names.
pub fn who_at(identity: &Identity, ip: IpAddr) -> Option<crate::record::Who> {
    match ipv4_of(ip) {
        Some(v4) => Some(crate::record::Who::Ip(v4)),
        None => identity.holder(ip).map(crate::record::Who::Mac),
    }
}

/// The next connection on `listener`, or `None` once `shutdown` fires, placed on its link
/// as one that carries `carries` (`Links::adopt`: keep the `Paced` as long as the stream). An accept error (out of
/// descriptors and the like) is logged and waited out for 100 ms instead of spinning.
pub async fn accept(
    listener: &Listener,
    shutdown: &Shutdown,
    service: &'static str,
    carries: Carries,
) -> Option<(TcpStream, SocketAddr, Paced)> {
    accept_any(std::slice::from_ref(listener), shutdown, service, carries).await
}

/// `accept` on whichever of `listeners` has a connection first (a service that listens on
/// each of the server's addresses), each asked first in turn so that none starves the others.
pub async fn accept_any(
    listeners: &[Listener],
    shutdown: &Shutdown,
    service: &'static str,
    carries: Carries,
) -> Option<(TcpStream, SocketAddr, Paced)> {
    static TURN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let start = TURN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    loop {
        let next = std::future::poll_fn(|cx| {
            for k in 0..listeners.len() {
                let i = (start + k) % listeners.len();
                if let std::task::Poll::Ready(r) = listeners[i].tcp.poll_accept(cx) {
                    return std::task::Poll::Ready((i, r));
                }
            }
            std::task::Poll::Pending
        });
        tokio::select! {
            _ = shutdown.wait() => return None,
            (i, r) = next => match r {
                Ok((stream, peer)) => {
                    let paced = listeners[i].links.adopt(&stream, peer, carries);
                    return Some((stream, peer, paced));
                }
                Err(e) => {
                    tracing::warn!(error = %e, service, "accept failed");
                    tokio::select! {
                        _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
                        _ = shutdown.wait() => return None,
                    }
                }
            },
        }
    }
}

/// Logs a boot file TFTP or HTTP did not serve because it is a symlink out of its folder, with
/// where it leads (a few lines at a time); other refusals are each service's to log.
pub(crate) fn warn_not_served(e: &NotServed) {
    static OUTSIDE_LOG: bounds::LogLimit = bounds::LogLimit::new();
    if let NotServed::Outside {
        file,
        target,
        folder,
    } = e
        && let Some(suppressed) = OUTSIDE_LOG.allow()
    {
        tracing::warn!(file = %file.display(), target = %target.display(),
            folder = %folder.display(), suppressed,
            "boot file not served: a symlink out of its folder (copy or hard-link the file into the folder)");
    }
}

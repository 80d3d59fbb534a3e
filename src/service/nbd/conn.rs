//! A connection's state, shared by the files of `service/nbd/`: the service's limits, what every
//! connection shares (`Exports`), a connection (`Conn`) and what it is attached to (`Attached`).
//! Below the handshake, the request loop and the writer, which all read it.

use super::idle::Activity;
use super::reply::BufPool;
use crate::config::Config;
use crate::export::image::{BlockImage, RamImages};
use crate::metrics::Metrics;
use crate::record::{Recorder, Records, Who};
use crate::service::identity::Identity;
use crate::service::overlays::{Lease, Overlays};
use crate::shutdown::Shutdown;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// The service's bounds. `Default` is what the daemon uses; tests shrink them.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; more are accepted and closed at once (counted), unless
    /// an idle one gives its slot up (`idle_timeout`).
    pub max_connections: usize,
    /// Connections served at once from one address; more are closed at once (counted).
    pub per_client: usize,
    /// An attached connection that sent no request for this long gives its slot to a new
    /// connection that finds every slot taken.
    pub idle_timeout: Duration,
    /// Requests one connection may have in flight; the next is not read until one is
    /// answered, so a pipelining client is pushed back through TCP.
    pub max_in_flight: usize,
    /// A client must finish option haggling within this.
    pub handshake_timeout: Duration,
    /// A reply the client does not take within this ends the connection.
    pub write_timeout: Duration,
    /// A client that answers nothing (keepalive probes, replies) this long is lost.
    pub lost_after: Duration,
    /// How long a copy-on-write overlay outlives its client's last connection (and how long
    /// overlays kept on disk from before a restart wait to be claimed).
    pub cow_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits::of(&crate::config::Limits::default())
    }
}

impl Limits {
    /// The bounds `pools.yaml`'s `limits` section sets; the rest are fixed.
    pub fn of(l: &crate::config::Limits) -> Limits {
        Limits {
            max_connections: l.nbd_connections,
            per_client: l.nbd_per_client,
            idle_timeout: l.nbd_idle_timeout,
            max_in_flight: 64,
            handshake_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(60),
            lost_after: l.root_lost_after,
            cow_grace: Duration::from_secs(300),
        }
    }
}

/// After DISC or shutdown, how long in-flight replies may take.
pub(super) const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// What every connection shares: images held in memory, the overlays, the records, and the
/// handover of a restart.
pub(super) struct Exports {
    pub(super) ram: Arc<RamImages>,
    pub(super) pool: BufPool,
    pub(super) overlays: Arc<Overlays>,
    pub(super) records: Arc<Records>,
    pub(super) identity: Identity,
    pub(super) handover: Arc<crate::service::handover::Handover>,
}

pub(super) struct Conn {
    pub(super) peer: SocketAddr,
    pub(super) config: Arc<Config>,
    pub(super) recorder: Recorder,
    pub(super) shutdown: Shutdown,
    pub(super) metrics: Metrics,
    pub(super) buffers: Arc<Semaphore>,
    pub(super) exports: Arc<Exports>,
    pub(super) limits: Limits,
    pub(super) activity: Activity,
    /// Its address holds no lease of an NBD pool: its handshake has `STRANGER_HANDSHAKE`.
    pub(super) stranger: bool,
}
/// What a connection is attached to: the image, and the client's overlay if it is writable.
pub(super) struct Attached {
    pub(super) image: Arc<BlockImage>,
    pub(super) cow: Option<Lease>,
}
impl Conn {
    /// Who the record says this is: an IPv4 peer by its address, an IPv6 one by the MAC its
    /// DHCPv6 binding names (`service::who_at`).
    pub(super) fn who(&self) -> Option<Who> {
        crate::service::who_at(&self.exports.identity, self.peer.ip())
    }
}

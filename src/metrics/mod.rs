//! The daemon's counters, all of them: one `Metrics` per daemon (made in `app.rs`, handed to
//! every service in `service::Shared` and to the recorder), a typed handle per service
//! (`metrics.nfs()`, `metrics.nbd()`, ...) whose fields are relaxed atomics, the recorder's
//! own counts, and the pacer's figures per paced link. `/metrics` is written from here by
//! `prometheus.rs`. A leaf: it imports nothing of the crate, so every room may count into it.
//!
//! A count is one `fetch_add(Relaxed)` on a field of a shared struct: no lock, no allocation,
//! nothing per request but the add, which is what the NFS, NBD and TFTP hot paths afford.
//! Counts are per daemon, never per process: tests that run several daemons in one process
//! read each one's own.

pub mod prometheus;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// One relaxed 64-bit figure: a counter (`inc`, `add`) or a gauge (`set`, `sub`).
#[derive(Debug, Default)]
pub struct Count(AtomicU64);

impl Count {
    pub fn inc(&self) {
        self.0.fetch_add(1, Relaxed);
    }

    /// Adds `n` and answers the new value (for a log line that says how many so far).
    pub fn add(&self, n: u64) -> u64 {
        self.0.fetch_add(n, Relaxed) + n
    }

    pub fn sub(&self, n: u64) {
        self.0.fetch_sub(n, Relaxed);
    }

    pub fn set(&self, n: u64) {
        self.0.store(n, Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// DHCP (port 67, and 4011 in proxy mode). A request is a decoded message.
#[derive(Debug, Default)]
pub struct Dhcp {
    pub requests: Count,
    /// Of them, those a firmware's timer waits on the answer to: PXE and UEFI HTTP boot
    /// requests (option 60 `PXEClient` or `HTTPClient`, iPXE's included) and every DHCPv6
    /// message. The pacer keeps its headroom while a firmware waits (`steer::firmware`).
    pub firmware: Count,
    pub malformed: Count,
    /// NAKs, DISCOVERs a full range has no address for, and (proxy mode) requests on port
    /// 4011 from MACs not seen on port 67 lately.
    pub refused: Count,
    /// Messages from MACs no pool lists, and those unseen MACs on port 4011.
    pub strangers: Count,
    /// Gauge: the unknown clients listed now (`service::unknown`).
    pub unknown: Count,
    /// Unknown clients left out of that list: forgotten when it was full, or beyond the new
    /// ones it takes in a second.
    pub unknown_forgotten: Count,
    pub offers: Count,
    pub acks: Count,
    pub naks: Count,
    /// Lease table saves that failed.
    pub save_errors: Count,
    /// DHCPv4 requests dropped because a relay `dhcp.relays` does not list carried them (or
    /// a client named another segment itself); also counted as refused.
    pub unlisted_relays: Count,
    /// DHCPv4 requests dropped because the segment they name (giaddr, link or subnet
    /// selection, ciaddr) is in no configured subnet; also counted as refused.
    pub no_subnet: Count,
    /// DHCP messages left to another member of the site, whose client they are
    /// (`site::owners`).
    pub others: Count,
    /// Leases the site's table refused (another client's row holds the address), each
    /// withdrawn at its client's next exchange (`site::shared_leases`).
    pub lease_conflicts: Count,
}

impl Dhcp {
    /// Counts a message as it decoded: a request, or a malformed packet (dropped, and said at
    /// debug level with `from` and why). `service` names the family (`dhcp`, `dhcp6`).
    pub fn decoded<T, E: std::fmt::Display>(
        &self,
        decoded: Result<T, E>,
        service: &'static str,
        from: impl std::fmt::Display,
    ) -> Option<T> {
        match decoded {
            Ok(req) => {
                self.requests.inc();
                Some(req)
            }
            Err(reason) => {
                let malformed = self.malformed.add(1);
                tracing::debug!(service, %from, %reason, malformed, "packet dropped");
                None
            }
        }
    }
}

/// One pool of a service's slots (connections, or TFTP transfers): held now, its caps (in all,
/// and per address), and what was refused at each cap (also counted in the service's
/// `refused`).
#[derive(Debug, Default)]
pub struct SlotPool {
    pub held: Count,
    pub cap: Count,
    pub cap_per_address: Count,
    pub full: Count,
    pub full_per_address: Count,
}

/// A service's slots: its clients' pool and the small one strangers share
/// (`service::bounds::Slots`).
#[derive(Debug, Default)]
pub struct Slots {
    pub clients: SlotPool,
    pub strangers: SlotPool,
}

/// TFTP's request port and its transfers. A request is a read or write request.
#[derive(Debug, Default)]
pub struct Tftp {
    pub requests: Count,
    /// Undecodable packets, and packets that belong to no transfer.
    pub malformed: Count,
    pub refused: Count,
    /// Read requests refused because the transfer limits were reached (also in `refused`).
    pub busy: Count,
    pub slots: Slots,
}

/// HTTP (and HTTPS). A request is an HTTP request; refused ones were answered 4xx or closed
/// at once over a connection limit. Undecodable requests are hyper's and not counted.
#[derive(Debug, Default)]
pub struct Http {
    pub requests: Count,
    pub refused: Count,
    pub slots: Slots,
    /// Chunks of NBD roots sent to clients' agents (`GET /boot/IMAGE/blocks/DIGEST/INDEX`),
    /// whole or a range of one.
    pub chunks_sent: Count,
    /// The tracker's answers for each chunk wanted (docs/swarm.md): peers that hold it, the
    /// peer receiving it, or the server.
    pub tracked_to_holders: Count,
    pub tracked_to_receiver: Count,
    pub tracked_to_server: Count,
}

/// NFS and MOUNT on the NFS port. A request is an RPC call.
#[derive(Debug, Default)]
pub struct Nfs {
    pub requests: Count,
    /// Connections closed because their RPC stream was broken (oversized or undecodable).
    pub malformed: Count,
    /// Calls answered with an error (access, RPC errors) and connections over the limit.
    pub refused: Count,
    pub slots: Slots,
}

/// NBD. A request is a handshake option or a transmission command.
#[derive(Debug, Default)]
pub struct Nbd {
    pub requests: Count,
    /// Bad magic, unknown flags, oversized or unparsable options, absurd requests.
    pub malformed: Count,
    /// Options refused, attaches refused, connections over the limits.
    pub refused: Count,
    pub connections: Count,
    /// Connections closed at once because every slot (or the address's share) was taken.
    pub full: Count,
    pub attached: Count,
    /// Transmission requests answered with an error.
    pub errors: Count,
    pub reads: Count,
    pub bytes: Count,
    /// WRITE requests done on copy-on-write exports, and their payload bytes.
    pub writes: Count,
    pub written: Count,
    /// Writes refused because the client's overlay bound was reached.
    pub no_space: Count,
    pub slots: Slots,
}

/// Portmap (port 111, UDP and TCP). A request is an RPC call.
#[derive(Debug, Default)]
pub struct Portmap {
    pub requests: Count,
    pub malformed: Count,
    pub refused: Count,
}

/// The clients' consoles (UDP): a request is a datagram taken, a refused one came from an
/// address no lease holds.
#[derive(Debug, Default)]
pub struct Console {
    pub requests: Count,
    pub refused: Count,
    /// Lines dropped because their client sent more than its rate (`service::console`).
    pub limited: Count,
    /// Lines dropped because the recorder's console queue was full.
    pub dropped: Count,
}

/// The recorder's counts (`record`).
#[derive(Debug, Default)]
pub struct Records {
    /// Events recorded.
    pub recorded: Count,
    /// Events (console lines, egress samples) that did not fit in the channel.
    pub dropped: Count,
    /// Events that named an IP no DHCP ACK had given out.
    pub untied: Count,
    /// Events (and egress samples) the store refused for longer than they could be kept.
    pub unsaved: Count,
    /// Payload bytes recorded, per protocol.
    pub payload: Payload,
}

/// Reloads of the config (SIGHUP, `bootpool reload`): applied, or refused whole.
#[derive(Debug, Default)]
pub struct Reloads {
    pub applied: Count,
    pub refused: Count,
}

/// Payload bytes sent to clients, per protocol.
#[derive(Debug, Default)]
pub struct Payload {
    pub dhcp: Count,
    pub tftp: Count,
    pub http: Count,
    pub nfs: Count,
    pub nbd: Count,
}

/// One paced link's figures (`steer::pacing` writes them each round).
#[derive(Debug, Default)]
pub struct PacedLink {
    /// The link's interface.
    pub device: String,
    /// What the paced connections on the link may send together in the last round, bytes/s
    /// (its capacity at the round's headroom: `steer::firmware`).
    pub budget: Count,
    /// TCP connections registered with the pacer.
    pub connections: Count,
    /// Of the last round: clients that sent or had bytes waiting, those that wanted more,
    /// one client's share in bytes/s (0: not paced), and what the registered connections
    /// carried together in bytes/s.
    pub clients: Count,
    pub wanting: Count,
    pub share: Count,
    pub carried: Count,
    /// Rounds in which the link was paced, and caps set on connections.
    pub rounds: Count,
    pub caps_set: Count,
    /// Clients whose replies were moved from this link to another (`rebalance`).
    pub moved_away: Count,
}

/// A room behind an uplink (`dhcp.subnets[].uplink`), as the pacer saw its last round.
#[derive(Debug, Default)]
pub struct PacedRoom {
    /// The room's subnet.
    pub room: String,
    /// The uplink's capacity, bytes/s.
    pub capacity: Count,
    /// What the paced connections to its clients may send together, bytes/s (the capacity
    /// at the round's headroom).
    pub budget: Count,
    /// Of the last round: its clients that sent or had bytes waiting, what their connections
    /// carried together in bytes/s, and one unit of weight's share of the uplink (0: the
    /// uplink did not bound them).
    pub clients: Count,
    pub carried: Count,
    pub share: Count,
    /// Bytes sent to its clients on paced connections, and rounds in which the uplink bound
    /// them (its clients wanted more than it carries).
    pub sent: Count,
    pub full_rounds: Count,
}

#[derive(Debug, Default)]
struct All {
    dhcp: Dhcp,
    tftp: Tftp,
    http: Http,
    nfs: Nfs,
    nbd: Nbd,
    portmap: Portmap,
    console: Console,
    records: Records,
    reloads: Reloads,
    /// The paced links, in the order the pacer was given them; set when it starts.
    paced: Mutex<Vec<Arc<PacedLink>>>,
    /// The rooms behind uplinks, in the config's order; set when the pacer starts.
    rooms: Mutex<Vec<Arc<PacedRoom>>>,
}

/// One daemon's counters; clones share them.
#[derive(Clone, Debug, Default)]
pub struct Metrics(Arc<All>);

impl Metrics {
    pub fn dhcp(&self) -> &Dhcp {
        &self.0.dhcp
    }

    pub fn tftp(&self) -> &Tftp {
        &self.0.tftp
    }

    pub fn http(&self) -> &Http {
        &self.0.http
    }

    pub fn nfs(&self) -> &Nfs {
        &self.0.nfs
    }

    pub fn nbd(&self) -> &Nbd {
        &self.0.nbd
    }

    pub fn portmap(&self) -> &Portmap {
        &self.0.portmap
    }

    pub fn console(&self) -> &Console {
        &self.0.console
    }

    pub fn records(&self) -> &Records {
        &self.0.records
    }

    pub fn reloads(&self) -> &Reloads {
        &self.0.reloads
    }

    /// A paced link's figures, listed from now on (the pacer calls this once per link when
    /// it starts).
    pub fn paced_link(&self, device: &str) -> Arc<PacedLink> {
        let link = Arc::new(PacedLink {
            device: device.to_string(),
            ..PacedLink::default()
        });
        self.0
            .paced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(link.clone());
        link
    }

    /// A room's figures, listed from now on (the pacer calls this once per room behind an
    /// uplink when it starts).
    pub fn paced_room(&self, room: &str) -> Arc<PacedRoom> {
        let r = Arc::new(PacedRoom {
            room: room.to_string(),
            ..PacedRoom::default()
        });
        self.0
            .rooms
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(r.clone());
        r
    }

    /// The rooms' figures, in the order they were listed.
    pub fn rooms(&self) -> Vec<Arc<PacedRoom>> {
        self.0
            .rooms
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The paced links' figures, in the order they were listed.
    pub fn paced(&self) -> Vec<Arc<PacedLink>> {
        self.0
            .paced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

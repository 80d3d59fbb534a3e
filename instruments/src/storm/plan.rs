//! What every simulated client of a storm shares: the trace, the server's ports, the moment
//! the room powers on.

use bootpool::trace::format::Trace;
use std::sync::Arc;
use std::time::Instant;

/// What every client of a storm shares.
pub struct Plan {
    pub trace: Arc<Trace>,
    /// Multiplies the recorded think times (gaps where the client computed, not waited).
    pub think_scale: f64,
    /// The HTTP port of the server's boot files and API.
    pub http_port: u16,
    /// Make the booted call (`POST /api/v1/booted`), as the demo image does.
    pub callback: bool,
    /// Where the root services are found: the portmapper (for MOUNT and NFS) and NBD.
    pub portmap_port: u16,
    pub nbd_port: u16,
    /// Fetch the loader over TFTP first, as a NIC's PXE ROM does (`--tftp-loader`).
    pub tftp_loader: bool,
    /// Boot a client again, once, when its boot fails (`--fail`: as a machine whose boot
    /// failed is reset).
    pub restart: bool,
    /// The moment the room powers on.
    pub t0: Instant,
    /// The NBD root image's bytes, which every read is checked against (NBD storms).
    pub image: Option<Arc<Vec<u8>>>,
    /// The room's agents, with `--swarm`: each client whose script roots it through the
    /// agent starts one (`swarm::Agents`).
    pub agents: Option<Arc<super::swarm::Agents>>,
}

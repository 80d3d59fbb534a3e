//! The root's half of a simulated client's boot: its NFS calls or NBD requests, replayed
//! closed-loop through client code this project did not write (`nfs`: the nfs3_client crate;
//! `nbd`: libnbd), on the client's own thread.

use super::nbd;
use super::nfs::{self, NfsPorts};
use super::plan::Plan;
use bootpool::trace::format::{Op, What};
use std::net::Ipv4Addr;
use std::time::Instant;

/// What the root's replay did.
#[derive(Debug, Default)]
pub struct RootStats {
    pub nfs_bytes: u64,
    pub nbd_bytes: u64,
    /// Requests made that the trace did not have.
    pub extra_requests: u64,
    pub errors: u64,
    /// NFS connections opened, or NBD attaches.
    pub connections: u64,
    pub first_error: Option<String>,
    /// Seconds from the replay's start until the first request after the attach was sent.
    pub attached: Option<f64>,
    /// Each read answered: sent, answered, bytes.
    pub waits: Vec<(Instant, Instant, u64)>,
    /// When each request was answered.
    pub answers: Vec<Instant>,
    /// Connections made again after one broke (`retry`).
    pub reconnects: u64,
}

/// Where an NBD root is read: the port and the export the boot script named, and whether
/// that is the client's own agent (the script's `bootpool.blocks=`) rather than a server.
pub struct Nbd<'a> {
    pub port: u16,
    pub export: Option<&'a str>,
    pub through_agent: bool,
}

/// Replays `ops` (NFS or NBD requests, times rebased so the first one's think time counts
/// from the previous answer) against `server`.
/// `nbd` is where the NBD root is read (the export the boot script named, if it named one);
/// `nfs_ports` the NFS and MOUNT ports its root argument named (else the portmapper is asked,
/// on the port of the storm's config).
pub fn replay(
    server: Ipv4Addr,
    plan: &Plan,
    ops: &[Op],
    nbd: &Nbd<'_>,
    nfs_ports: Option<(u16, u16)>,
) -> anyhow::Result<RootStats> {
    let started = Instant::now();
    let since = |t: Option<Instant>| t.map(|t| t.saturating_duration_since(started).as_secs_f64());
    let nfs = ops.iter().any(|o| matches!(o.what, What::Nfs { .. }));
    let mut out = RootStats::default();
    if nfs {
        let ports = match nfs_ports {
            Some((nfs, mount)) => NfsPorts::Direct { mount, nfs },
            None => NfsPorts::Portmap(plan.portmap_port),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let s = rt.block_on(nfs::replay_nfs(server, ports, ops, plan.think_scale))?;
        out.nfs_bytes = s.read_bytes;
        out.extra_requests = s.extra_lookups;
        out.connections = s.connections as u64;
        out.errors = s.total_errors();
        out.first_error = s
            .errors
            .iter()
            .next()
            .map(|(p, n)| format!("{n} {p} answers were errors"));
        out.attached = since(s.first);
        out.waits = s.waits;
        out.answers = s.answers;
        out.reconnects = s.reconnects;
    } else {
        let target = nbd::Target {
            server,
            port: nbd.port,
            named: nbd.export,
            through_agent: nbd.through_agent,
            image: plan.image.as_deref().map(Vec::as_slice),
        };
        let s = nbd::replay_nbd_to(&target, ops, plan.think_scale)?;
        out.nbd_bytes = s.bytes;
        out.connections = s.attaches;
        out.errors = s.errors;
        out.first_error = (s.errors > 0).then(|| {
            format!(
                "{} reads failed ({} of them answered with other bytes than the image's)",
                s.errors, s.wrong
            )
        });
        out.attached = since(s.first);
        out.waits = s.waits;
        out.answers = s.answers;
        out.reconnects = s.reconnects;
    }
    Ok(out)
}

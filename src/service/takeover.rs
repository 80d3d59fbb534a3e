//! What this host does when keepalived makes it the master of a site member's address
//! (`bootpool site takeover`, queued by `site::held`): NFS listens on the address when it did
//! not (the listener bound by `app`, with IP_FREEBIND), then each connection other members
//! recorded to the address (`site::conns`) gets one tickle ACK (`service::tickle`), so that
//! its client's TCP is reset and reconnects at once, to this host (docs/failover.md).

use super::Listener;
use crate::shutdown::Shutdown;
use crate::site::live::Site;
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// Binds the NFS listener for an address taken over.
pub type BindNfs = Box<dyn Fn(Ipv4Addr) -> std::io::Result<Listener> + Send>;

/// Acts on each takeover until the shutdown. `listening`: the addresses NFS listens on
/// already (the server's own); `nfs`: where a new listener goes to the NFS service.
pub async fn serve(
    site: Arc<Site>,
    mut listening: BTreeSet<Ipv4Addr>,
    bind_nfs: BindNfs,
    nfs: UnboundedSender<Listener>,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let Some(mut takeovers) = site.held().takeovers() else {
        return Ok(());
    };
    loop {
        let ip = tokio::select! {
            _ = shutdown.wait() => break,
            ip = takeovers.recv() => match ip {
                Some(ip) => ip,
                None => break,
            },
        };
        let started = Instant::now();
        if !listening.contains(&ip) {
            match bind_nfs(ip) {
                Ok(listener) => {
                    let _ = nfs.send(listener);
                    listening.insert(ip);
                }
                Err(e) => tracing::error!(address = %ip, error = %e,
                    "nfs cannot listen on an address taken over"),
            }
        }
        let conns = match site.conns_to(ip).await {
            Ok(conns) => conns,
            Err(e) => {
                tracing::warn!(address = %ip, error = %format!("{e:#}"),
                    "address taken over; its connections unknown (the site's database did not \
                     answer): its clients reconnect when their TCP gives up");
                continue;
            }
        };
        let pairs: Vec<(SocketAddrV4, SocketAddrV4)> =
            conns.iter().map(|c| (c.server, c.client)).collect();
        let sent = tokio::task::spawn_blocking(move || super::tickle::send(&pairs)).await;
        let sent = match sent {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => {
                tracing::error!(address = %ip, error = %e,
                    "no tickle ACKs sent: no raw socket (CAP_NET_RAW)");
                0
            }
            Err(_) => 0,
        };
        if let Err(e) = site.forget_conns(&conns).await {
            tracing::debug!(error = %format!("{e:#}"), "tickled connections not forgotten");
        }
        tracing::info!(address = %ip, connections = conns.len(), tickled = sent,
            ms = started.elapsed().as_millis() as u64, "address taken over");
    }
    Ok(())
}

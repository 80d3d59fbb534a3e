//! The composition root: load config, open the records, bind every socket, start the services,
//! and wait. Services never bind; tests start the whole daemon in-process on port 0.

use crate::config::Config;
use crate::record::{self, Records};
use crate::service;
use crate::shutdown::Shutdown;
use anyhow::Context as _;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use tokio::net::{TcpListener, UdpSocket};

/// Where each service ended up listening.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub http: SocketAddr,
    pub dhcp: SocketAddr,
    /// proxyDHCP's port 4011, bound in proxy mode only.
    pub pxe: Option<SocketAddr>,
    pub tftp: SocketAddr,
    pub nfs: SocketAddr,
    pub nbd: SocketAddr,
    pub portmap: SocketAddr,
}

/// A started daemon.
pub struct Running {
    pub bound: Bound,
    /// The config as served: ports given as 0 are replaced by the ports bound.
    pub config: Arc<Config>,
    pub records: Arc<Records>,
    shutdown: Shutdown,
}

impl Running {
    /// Stops every service and waits for them.
    pub async fn stop(self) {
        self.shutdown.stop_and_wait().await;
    }
}

/// Binds and starts everything; returns once all sockets are bound.
pub async fn start(mut config: Config) -> anyhow::Result<Running> {
    let missing = config.missing_files();
    if let Some(e) = missing.first() {
        anyhow::bail!("{e}");
    }
    let shutdown = Shutdown::new();
    let (recorder, records) = record::start(&config.server, &shutdown)
        .await
        .context("opening the boot records")?;
    let recorder = recorder.with_tracer(crate::trace::Tracer::new(&config));

    let any = Ipv4Addr::UNSPECIFIED;
    let ports = config.server.ports;
    let iface = config.server.interfaces.first().cloned();
    let dhcp = bind_udp(SocketAddrV4::new(any, ports.dhcp), iface.as_deref(), true)
        .with_context(|| format!("binding DHCP port {}", ports.dhcp))?;
    let pxe = match config.dhcp.mode {
        crate::config::DhcpMode::Proxy => Some(
            bind_udp(SocketAddrV4::new(any, ports.pxe), iface.as_deref(), true)
                .with_context(|| format!("binding PXE port {}", ports.pxe))?,
        ),
        crate::config::DhcpMode::Authoritative => None,
    };
    let tftp = bind_udp(SocketAddrV4::new(any, ports.tftp), None, false)
        .with_context(|| format!("binding TFTP port {}", ports.tftp))?;
    let http = bind_tcp(config.server.http).await.context("binding HTTP")?;
    let nfs = bind_tcp(SocketAddrV4::new(any, ports.nfs).into())
        .await
        .context("binding NFS")?;
    let nbd = bind_tcp(SocketAddrV4::new(any, ports.nbd).into())
        .await
        .context("binding NBD")?;
    // The portmapper answers on the same port over TCP and UDP.
    let portmap_tcp = bind_tcp(SocketAddrV4::new(any, ports.portmap).into())
        .await
        .with_context(|| format!("binding portmap port {} (ports.portmap)", ports.portmap))?;
    let portmap_port = portmap_tcp.local_addr()?.port();
    let portmap_udp = bind_udp(SocketAddrV4::new(any, portmap_port), None, false)
        .with_context(|| format!("binding portmap UDP port {portmap_port}"))?;
    let bound = Bound {
        http: http.local_addr()?,
        dhcp: dhcp.local_addr()?,
        pxe: pxe.as_ref().map(UdpSocket::local_addr).transpose()?,
        tftp: tftp.local_addr()?,
        nfs: nfs.local_addr()?,
        nbd: nbd.local_addr()?,
        portmap: portmap_tcp.local_addr()?,
    };
    // What clients are told must match what was bound.
    config.server.http.set_port(bound.http.port());
    config.server.ports.dhcp = bound.dhcp.port();
    if let Some(p) = bound.pxe {
        config.server.ports.pxe = p.port();
    }
    config.server.ports.tftp = bound.tftp.port();
    config.server.ports.nfs = bound.nfs.port();
    config.server.ports.nbd = bound.nbd.port();
    config.server.ports.portmap = bound.portmap.port();
    let config = Arc::new(config);

    let run =
        |name: &'static str,
         fut: std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>| {
            let shutdown = shutdown.clone();
            shutdown.clone().spawn(async move {
            if let Err(e) = fut.await {
                tracing::error!(service = name, error = %format!("{e:#}"), "service failed; stopping");
                shutdown.trigger();
            }
        });
        };
    let (c, r, s) = (&config, &recorder, &shutdown);
    run(
        "dhcp",
        Box::pin(service::dhcp::serve(
            dhcp,
            pxe,
            c.clone(),
            r.clone(),
            s.clone(),
        )),
    );
    run(
        "tftp",
        Box::pin(service::tftp::serve(tftp, c.clone(), r.clone(), s.clone())),
    );
    run(
        "nfs",
        Box::pin(service::nfs::serve(
            nfs,
            c.clone(),
            r.clone(),
            records.clone(),
            s.clone(),
        )),
    );
    run(
        "nbd",
        Box::pin(service::nbd::serve(
            nbd,
            c.clone(),
            r.clone(),
            records.clone(),
            s.clone(),
        )),
    );
    let totals = {
        let counters = records.counters.clone();
        Arc::new(move || counters.proto_totals()) as record::egress::ProtoTotals
    };
    let egress = record::egress::start(
        &records,
        recorder.clone(),
        config.server.interfaces.clone(),
        totals,
        &shutdown,
    )
    .await
    .context("starting egress sampling")?;
    run(
        "portmap",
        Box::pin(service::portmap::serve(
            portmap_tcp,
            portmap_udp,
            c.clone(),
            r.clone(),
            s.clone(),
        )),
    );
    let web = service::http::Web {
        config: c.clone(),
        recorder: r.clone(),
        records: records.clone(),
        egress,
    };
    run("http", Box::pin(service::http::serve(http, web, s.clone())));
    tracing::info!(
        http = %bound.http, dhcp = %bound.dhcp, tftp = %bound.tftp, nfs = %bound.nfs, nbd = %bound.nbd,
        portmap = %bound.portmap,
        pools = config.pools.len(), "bootpool serving"
    );
    Ok(Running {
        bound,
        config,
        records,
        shutdown,
    })
}

/// Runs the daemon until SIGINT or SIGTERM (then Ok), or until a service fails (then an
/// error, so that a supervisor sees a failure and restarts it).
pub async fn serve(config: Config) -> anyhow::Result<()> {
    raise_fd_limit();
    // Before start: a SIGTERM as soon as the daemon says it serves must stop it cleanly.
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let running = start(config).await?;
    let stopped = running.shutdown.clone();
    let failed = tokio::select! {
        _ = int.recv() => { tracing::info!("interrupted; stopping"); false }
        _ = term.recv() => { tracing::info!("terminated; stopping"); false }
        _ = stopped.wait() => { tracing::warn!("a service stopped the daemon"); true }
    };
    running.stop().await;
    if failed {
        anyhow::bail!("a service failed and stopped the daemon (see the log above)");
    }
    Ok(())
}

/// Raises the soft limit on open files to the hard one, as Go's runtime does: systemd's
/// default soft limit (1024) would cap the NFS open-file cache (half the limit) at 512 files,
/// fewer than one boot reads, and a room of connections could run out of descriptors.
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: one valid rlimit to fill, then to set.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 || lim.rlim_cur >= lim.rlim_max {
            return;
        }
        let from = lim.rlim_cur;
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
            tracing::info!(from, to = lim.rlim_max, "raised the open-file limit");
        }
    }
}

async fn bind_tcp(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// A UDP socket; `broadcast` for DHCP, bound to one interface when given so that several
/// daemons (or a host DHCP server) can each own their own link.
fn bind_udp(
    addr: SocketAddrV4,
    iface: Option<&str>,
    broadcast: bool,
) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_address(true)?;
    if broadcast {
        socket.set_broadcast(true)?;
    }
    if let Some(iface) = iface {
        socket.bind_device(Some(iface.as_bytes())).map_err(|e| {
            std::io::Error::new(e.kind(), format!("binding to interface {iface}: {e}"))
        })?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&SocketAddr::V4(addr).into())?;
    UdpSocket::from_std(socket.into())
}

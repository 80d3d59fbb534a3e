//! TFTP service, read-only: the loaders folder (`undionly.kpxe`), the Secure Boot chain's
//! shim and GRUB, each image's boot files (`IMAGE/vmlinuz`, `IMAGE/initrd.img`) and GRUB's
//! generated config (`grub/grub.cfg`, `service::grub_config`), nothing else. A name may start
//! with one `/` (GRUB asks `/grub/grub.cfg`): the TFTP root is what bootpool serves. This module is the request port and
//! its policy: which files, how many transfers at once, what is recorded. Every transfer runs
//! on its own ephemeral socket; `tftp_transfers` runs the exchange (retransmission, a bounded
//! number of retries, an end at once on a client ERROR).
//!
//! Bounds against strangers: requests are answered only from `limits.tftp_clients` (default
//! every DHCP subnet: a pool client gets its address there, directly or through a relay, and a
//! spoofed or foreign source gets no reply to amplify); others are dropped unanswered and
//! counted as refused. A transfer ends `limits.tftp_lifetime` after it started, and the
//! retransmission interval a client's `timeout` option asks for is capped at `MAX_RTO`, so a
//! transfer nobody acknowledges ends within `MAX_RTO` x 6 whatever the option said (RFC 2349
//! lets either side give up; the option is still acknowledged as asked).
//!
//! A transfer's socket is bound to the local address its request was sent to (IP_PKTINFO on
//! the request port), and to that link's interface when the server has several links
//! (`steer::links`): firmware takes DATA only from the address it asked, and the reply
//! leaves by the link it asked on. It is sent at `FIRMWARE_PRIORITY`.
//!
//! Our own server rather than async-tftp: we need to know when and how a transfer ended (the
//! loader phase ends there), to stop on a client ERROR (EDK2's tsize probe), windowsize, and
//! no extra dependency; the protocol part is small and lives in `proto::tftp`.

use super::bounds::{Caps, Full, Slot, Slots, Standing};
use super::identity::Identity;
use crate::boot::exports::ServesFor;
use crate::config::Config;
use crate::export::boot_files::{NotServed, handed_out, resolve};
use crate::metrics::Metrics;
use crate::proto::tftp::{self as wire, Mode, Packet, Sender, err};
use crate::record::{Kind, Outcome, Proto, Recorder, Who};
use crate::service::tftp_transfers::{self, Source, Transfer, Transfers};
use crate::steer::firmware::FirmwareTransfer;
use crate::steer::links::Links;
use std::net::UdpSocket;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

/// Transfers at once for the room's clients (addresses that hold a lease of a pool): a room of
/// a few hundred PCs fits, a flood does not.
pub const CLIENTS_TOTAL: usize = 256;

/// The room's clients' caps: `CLIENTS_TOTAL` in all, `limits.tftp_per_client` (default 32)
/// per address. Firmware fetches one file at a time (two with EDK2's size probe); a room
/// behind a NAT, which arrives from one address, or a test rig on loopback, needs more. The
/// bound keeps one confused or hostile address from taking the whole room's share.
pub fn client_caps(limits: &crate::config::Limits) -> Caps {
    Caps {
        total: CLIENTS_TOTAL,
        per_address: limits.tftp_per_client,
    }
}
/// Transfers at once for addresses inside `limits.tftp_clients` that hold no lease: a source
/// forged to unused addresses of the subnet, or (proxy mode) firmware that asked no lease of
/// ours on port 4011. They share this pool, and their retransmission interval is
/// `DEFAULT_RTO` whatever they ask, so a transfer nobody acknowledges ends within seconds.
pub const STRANGERS: Caps = Caps {
    total: 16,
    per_address: 2,
};
/// Retransmission interval when the client names none.
const DEFAULT_RTO: Duration = Duration::from_secs(1);
/// Longest retransmission interval, whatever the client's `timeout` option asks.
pub const MAX_RTO: Duration = Duration::from_secs(5);

pub async fn serve(socket: tokio::net::UdpSocket, shared: super::Shared) -> anyhow::Result<()> {
    let super::Shared {
        config,
        recorder,
        metrics,
        links,
        identity,
        shutdown,
        ..
    } = shared;
    // An IPv6 socket (`server.address6`) answers from the kernel's choice of address.
    let v6 = socket.local_addr()?.is_ipv6();
    if !v6 {
        crate::steer::local_addr::enable(&socket)?;
    }
    let clients = client_caps(&config.load().limits);
    let slots = Slots::new(metrics.clone(), |m| &m.tftp().slots, clients, STRANGERS);
    let counts = metrics.tftp();
    let transfers = Arc::new(Transfers::start(&shutdown)?);
    let mut buf = vec![0u8; wire::MAX_REQUEST + 1];
    static STRANGER: super::bounds::LogLimit = super::bounds::LogLimit::new();
    let socket = Arc::new(socket);
    loop {
        let (n, peer, local) = tokio::select! {
            _ = shutdown.wait() => break,
            r = recv(&socket, &mut buf, v6) => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!(error = %e, "tftp receive error");
                    continue;
                }
            },
        };
        // The config this packet is answered with.
        let config = config.load();
        if !from_a_client(&config, peer.ip()) {
            counts.requests.inc();
            counts.refused.inc();
            if let Some(suppressed) = STRANGER.allow() {
                tracing::warn!(%peer, suppressed, "tftp packet from outside limits.tftp_clients dropped");
            }
            continue;
        }
        match wire::decode(&buf[..n]) {
            Ok(Packet::Read(req)) => {
                counts.requests.inc();
                slots.set_client_caps(client_caps(&config.limits));
                let standing = identity.standing(&config, ServesFor::AnyPool, peer.ip());
                let asked = Asked {
                    socket: socket.clone(),
                    slots: slots.clone(),
                    transfers: transfers.clone(),
                    ask: Ask {
                        peer,
                        local,
                        req,
                        config: config.clone(),
                        recorder: recorder.clone(),
                        metrics: metrics.clone(),
                        links: links.clone(),
                        identity: identity.clone(),
                    },
                };
                if standing == Standing::Stranger && identity.in_a_site() {
                    // Perhaps a client another member just placed here: held until the
                    // site's leases were read again (`Identity::standing_held`).
                    let stop = shutdown.clone();
                    shutdown.spawn(async move {
                        let ask = &asked.ask;
                        let standing = ask
                            .identity
                            .standing_held(&ask.config, ServesFor::AnyPool, ask.peer.ip())
                            .await;
                        asked.start(standing, &stop).await;
                    });
                } else {
                    asked.start(standing, &shutdown).await;
                }
            }
            Ok(Packet::Write(req)) => {
                counts.requests.inc();
                counts.refused.inc();
                tracing::info!(%peer, file = %req.file, "tftp write refused");
                let _ = socket
                    .send_to(&wire::encode_error(err::ACCESS, "read-only server"), peer)
                    .await;
            }
            Ok(other) => {
                // A late packet of a finished transfer, or a confused client.
                counts.malformed.inc();
                tracing::debug!(%peer, packet = ?short(&other), "tftp packet on the request port dropped");
            }
            Err(e) => {
                let c = counts.malformed.add(1);
                tracing::debug!(%peer, error = %e, malformed = c, "tftp packet dropped");
            }
        }
    }
    // The loops abort what is still running; wait for them, so no transfer outlives the stop.
    let _ = tokio::task::spawn_blocking(move || transfers.join()).await;
    Ok(())
}

/// The next request, with the local address it was sent to on IPv4 (IP_PKTINFO).
async fn recv(
    socket: &tokio::net::UdpSocket,
    buf: &mut [u8],
    v6: bool,
) -> std::io::Result<(usize, SocketAddr, Option<Ipv4Addr>)> {
    if v6 {
        let (n, peer) = socket.recv_from(buf).await?;
        Ok((n, peer, None))
    } else {
        crate::steer::local_addr::recv_from(socket, buf).await
    }
}

/// Whether a request from `ip` may be a pool client's: inside `limits.tftp_clients`, or over
/// IPv6 inside `dhcp6.subnet` or from a link-local address.
fn from_a_client(config: &Config, ip: IpAddr) -> bool {
    match (super::ipv4_of(ip), ip) {
        (Some(v4), _) => config.limits.tftp_clients.iter().any(|n| n.contains(v4)),
        (None, IpAddr::V6(v6)) => {
            v6.is_unicast_link_local()
                || config.dhcp6.as_ref().is_some_and(|d| d.subnet.contains(v6))
        }
        (None, IpAddr::V4(_)) => false,
    }
}

fn short(p: &Packet) -> &'static str {
    match p {
        Packet::Read(_) => "rrq",
        Packet::Write(_) => "wrq",
        Packet::Data { .. } => "data",
        Packet::Ack(_) => "ack",
        Packet::Error { .. } => "error",
        Packet::Oack(_) => "oack",
    }
}

/// A read request and what answering it takes.
struct Ask {
    peer: SocketAddr,
    /// The address the request was sent to, when the kernel said.
    local: Option<Ipv4Addr>,
    req: wire::Request,
    config: Arc<Config>,
    recorder: Recorder,
    metrics: Metrics,
    links: Arc<Links>,
    /// Who holds the asking address: GRUB's config is its client's.
    identity: Identity,
}

/// A read request at the request port, before its slot is taken (`start`).
struct Asked {
    socket: Arc<tokio::net::UdpSocket>,
    slots: Slots,
    transfers: Arc<Transfers>,
    ask: Ask,
}

impl Asked {
    /// Takes a slot of `standing`'s pool and starts the transfer, or refuses the request
    /// (`server busy`, `too many transfers`: an ERROR, counted).
    async fn start(self, standing: Standing, shutdown: &crate::shutdown::Shutdown) {
        static BUSY: super::bounds::LogLimit = super::bounds::LogLimit::new();
        let Asked {
            socket,
            slots,
            transfers,
            ask,
        } = self;
        let (peer, req) = (ask.peer, &ask.req);
        let counts = ask.metrics.tftp();
        let slot = match slots.take(peer.ip(), standing) {
            Ok(slot) => slot,
            Err(full) => {
                counts.refused.inc();
                let c = counts.busy.add(1);
                if let Some(suppressed) = BUSY.allow() {
                    tracing::warn!(%peer, file = %req.file, ?standing,
                        caps = ?slots.caps(standing), refused = c, suppressed,
                        "tftp transfer refused: {}", full.reason());
                }
                let text = match full {
                    Full::Pool => "server busy",
                    Full::Address => "too many transfers",
                };
                let _ = socket
                    .send_to(&wire::encode_error(err::NOT_DEFINED, text), peer)
                    .await;
                return;
            }
        };
        let r = Request { ask, slot };
        shutdown.spawn(async move {
            if let Ok(Some(t)) = tokio::task::spawn_blocking(move || r.prepare()).await {
                transfers.add(t);
            }
        });
    }
}

/// A read request accepted at the request port; `prepare` turns it into a running transfer.
struct Request {
    ask: Ask,
    /// Held until the transfer ends.
    slot: Slot,
}

/// What the transfer loop reports back to: logs and records the end.
struct Owner {
    peer: SocketAddr,
    file: String,
    kind: crate::record::FileKind,
    mode: Mode,
    settings: wire::Settings,
    size: u64,
    started: Instant,
    recorder: Recorder,
    metrics: Metrics,
    /// Who the record says the transfer was for (`service::who_at`).
    who: Option<Who>,
    _slot: Slot,
    /// Keeps its link's headroom for the waiting firmware until the transfer ends.
    _firmware: FirmwareTransfer,
}

impl Request {
    /// Opens the transfer's own socket and file and negotiates options; answers the client
    /// with an ERROR and returns None when the file cannot be served. Runs on the blocking
    /// pool: path checks and opening a file touch the disk.
    fn prepare(self) -> Option<Transfer> {
        let sock = match self.socket() {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "tftp cannot open a transfer socket");
                return None;
            }
        };
        let asked = &self.ask.req.file;
        let file = asked.strip_prefix('/').unwrap_or(asked).to_string();
        let generated = if file == crate::boot::grub::CONFIG {
            match super::grub_config::for_peer(
                &self.ask.config,
                &self.ask.identity,
                self.ask.peer.ip(),
            ) {
                Ok(text) => Some(text),
                Err(why) => {
                    self.ask.metrics.tftp().refused.inc();
                    tracing::info!(peer = %self.ask.peer, %file, reason = why, "tftp grub config refused");
                    let _ = sock.send_to(
                        &wire::encode_error(err::NOT_FOUND, "file not found"),
                        self.ask.peer,
                    );
                    return None;
                }
            }
        } else {
            None
        };
        let opened = match generated {
            Some(text) => Ok((
                in_memory(text.into_bytes(), self.ask.req.mode),
                crate::record::FileKind::GrubConfig,
            )),
            None => self.open_file(&file),
        };
        let ((source, size), kind) = match opened {
            Ok(x) => x,
            Err(refusal) => {
                let _ = sock.send_to(&refusal, self.ask.peer);
                return None;
            }
        };
        let (settings, oack) = wire::negotiate(&self.ask.req.options, Some(size));
        let rto = match self.slot.standing() {
            Standing::Client => settings
                .timeout_s
                .map_or(DEFAULT_RTO, |s| Duration::from_secs(u64::from(s)))
                .min(MAX_RTO),
            Standing::Stranger => DEFAULT_RTO,
        };
        let owner = Owner {
            peer: self.ask.peer,
            file,
            kind,
            mode: self.ask.req.mode,
            settings,
            size,
            started: Instant::now(),
            who: super::who_at(&self.ask.identity, self.ask.peer.ip()),
            recorder: self.ask.recorder,
            metrics: self.ask.metrics,
            _slot: self.slot,
            _firmware: self.ask.links.firmware().transfer(self.ask.local),
        };
        Some(Transfer::new(
            sock,
            self.ask.peer,
            source,
            Sender::new(size, settings),
            &oack,
            rto,
            self.ask.config.limits.tftp_lifetime,
            Box::new(owner),
        ))
    }

    /// Opens a served file by its name, or logs, counts and records why not and returns the
    /// ERROR packet to answer.
    #[allow(clippy::type_complexity)]
    fn open_file(&self, file: &str) -> Result<((Source, u64), crate::record::FileKind), Vec<u8>> {
        let (path, kind) = match resolve(&self.ask.config, file) {
            Ok(x) => x,
            Err(e) => {
                super::warn_not_served(&e);
                let text = e.reason();
                self.ask.metrics.tftp().refused.inc();
                tracing::info!(peer = %self.ask.peer, %file, reason = text, "tftp read refused");
                let code = tftp_code(&e);
                if code == err::NOT_FOUND {
                    self.missing(file, text);
                }
                return Err(wire::encode_error(code, text));
            }
        };
        match open(&path, self.ask.req.mode) {
            Ok(x) => Ok((x, kind)),
            Err(e) => {
                tracing::warn!(peer = %self.ask.peer, %file, error = %e, "tftp cannot read file");
                self.ask.metrics.tftp().refused.inc();
                self.missing(file, "cannot read file");
                Err(wire::encode_error(err::NOT_FOUND, "cannot read file"))
            }
        }
    }

    /// The transfer's socket: on the address the request was sent to (any, if unknown or no
    /// longer ours), bound to its link's interface, sending at firmware priority.
    fn socket(&self) -> std::io::Result<UdpSocket> {
        let any = match self.ask.peer.ip() {
            IpAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            IpAddr::V6(_) => SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0)),
        };
        let asked = self.ask.local.filter(|_| self.ask.peer.is_ipv4());
        let sock = match asked.map(|l| UdpSocket::bind((l, 0))) {
            Some(Ok(s)) => s,
            _ => UdpSocket::bind(any)?,
        };
        if let Some(local) = asked {
            self.ask.links.steer(&sock, local, self.ask.peer.ip());
        }
        let _ = socket2::SockRef::from(&sock).set_priority(super::FIRMWARE_PRIORITY);
        sock.set_nonblocking(true)?;
        Ok(sock)
    }

    /// Records a failed boot when the missing file is one bootpool hands out (a loader it
    /// names in DHCP, an image's kernel or initrd): without it the client cannot go on. Other
    /// names are probes (iPXE looks for `autoexec.ipxe`) and fail nothing.
    fn missing(&self, file: &str, why: &str) {
        if !handed_out(&self.ask.config, file) {
            return;
        }
        if let Some(who) = super::who_at(&self.ask.identity, self.ask.peer.ip()) {
            self.ask.recorder.record(
                who,
                Kind::Failed {
                    proto: Some(Proto::Tftp),
                    reason: format!("{file}: {why}"),
                },
            );
        }
    }
}

/// The TFTP error code for a boot file not served (RFC 1350): a name bootpool serves nothing
/// by is an access violation, the rest is not found.
fn tftp_code(e: &NotServed) -> u16 {
    match e {
        NotServed::Denied => err::ACCESS,
        NotServed::Missing | NotServed::Outside { .. } => err::NOT_FOUND,
    }
}

impl tftp_transfers::Owner for Owner {
    fn malformed(&self) {
        self.metrics.tftp().malformed.inc();
    }

    fn ended(self: Box<Self>, outcome: Outcome, bytes: u64) {
        let o = *self;
        tracing::info!(peer = %o.peer, file = %o.file, bytes, size = o.size, ?outcome,
            mode = %o.mode, blksize = o.settings.blksize, windowsize = o.settings.windowsize,
            ms = o.started.elapsed().as_millis() as u64, "tftp transfer");
        let Some(who) = o.who else {
            return;
        };
        if let Some(ip) = super::ipv4_of(o.peer.ip())
            && o.recorder.tracer().wants(ip)
        {
            let received =
                crate::record::event::now_micros() - o.started.elapsed().as_micros() as i64;
            let what = crate::trace::format::What::File {
                proto: "tftp".into(),
                name: o.file.clone(),
                bytes,
                blksize: Some(o.settings.blksize),
                windowsize: Some(o.settings.windowsize),
            };
            o.recorder.tracer().op(ip, received, what);
        }
        o.recorder.record(
            who,
            Kind::File {
                proto: Proto::Tftp,
                kind: o.kind,
                path: o.file,
                bytes,
                outcome,
            },
        );
    }
}

/// A generated file (GRUB's config) as a transfer's source and size.
fn in_memory(bytes: Vec<u8>, mode: Mode) -> (Source, u64) {
    let bytes = match mode {
        Mode::Octet => bytes,
        Mode::Netascii => wire::to_netascii(&bytes),
    };
    let len = bytes.len() as u64;
    (Source::Memory(bytes), len)
}

fn open(path: &Path, mode: Mode) -> std::io::Result<(Source, u64)> {
    let f = std::fs::File::open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    match mode {
        Mode::Octet => Ok((Source::file(f), meta.len())),
        Mode::Netascii => Source::netascii(f),
    }
}

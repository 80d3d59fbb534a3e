//! NBD option haggling: the fixed-newstyle handshake up to the export a client settles on,
//! with the one root access rule deciding what it may see and attach.

use super::conn::{Attached, Conn};
use crate::boot::exports::root_allowed;
use crate::config::{Image, RootProto, Store};
use crate::export::image::{self, BlockImage};
use crate::proto::nbd::{self as p, ClientFlags, Malformed, OptRequest, OptionHeader};
use crate::record::{Kind, Proto};
use crate::service::bounds::LogLimit;
use crate::service::overlays::Overlays;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Options one handshake may send before we call it abuse.
const MAX_OPTIONS: usize = 64;

/// Without `cow`: read-only; FLUSH is a no-op; every connection sees the same bytes.
const READ_ONLY_FLAGS: u16 =
    p::TFLAG_HAS_FLAGS | p::TFLAG_READ_ONLY | p::TFLAG_SEND_FLUSH | p::TFLAG_CAN_MULTI_CONN;
/// With `cow`: writable. Multi-conn stays true because every connection of one client shares
/// its overlay, and FLUSH syncs that whole overlay.
const COW_FLAGS: u16 = p::TFLAG_HAS_FLAGS
    | p::TFLAG_SEND_FLUSH
    | p::TFLAG_SEND_FUA
    | p::TFLAG_SEND_TRIM
    | p::TFLAG_SEND_WRITE_ZEROES
    | p::TFLAG_CAN_MULTI_CONN;

pub(super) fn flags_of(image: &Image) -> u16 {
    if image.cow.is_some() {
        COW_FLAGS
    } else {
        READ_ONLY_FLAGS
    }
}
/// Why a handshake ended without an export.
#[derive(Debug)]
pub(super) enum HandshakeEnd {
    Io(io::Error),
    Malformed(Malformed),
    /// NBD_OPT_EXPORT_NAME for an export we lack: the document says hard disconnect.
    UnknownExport(String),
    TooManyOptions,
    Aborted,
}

impl std::fmt::Display for HandshakeEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeEnd::Io(e) => write!(f, "{e}"),
            HandshakeEnd::Malformed(e) => write!(f, "{e}"),
            HandshakeEnd::UnknownExport(name) => write!(f, "unknown export `{name}`"),
            HandshakeEnd::TooManyOptions => write!(f, "more than {MAX_OPTIONS} options"),
            HandshakeEnd::Aborted => write!(f, "aborted by client"),
        }
    }
}

impl From<io::Error> for HandshakeEnd {
    fn from(e: io::Error) -> Self {
        HandshakeEnd::Io(e)
    }
}

impl From<Malformed> for HandshakeEnd {
    fn from(e: Malformed) -> Self {
        HandshakeEnd::Malformed(e)
    }
}

/// Why an export cannot be opened for a client.
enum Unavailable {
    /// No such export.
    Unknown,
    /// Not this client's (`boot::exports::root_allowed`); counted as refused.
    Refused,
    /// Its file cannot be opened (logged).
    Failed,
}
impl Conn {
    /// Whether this client may attach image `name`: the one root access rule.
    fn may_use(&self, name: &str) -> bool {
        let ip = crate::service::ipv4_of(self.peer.ip()).unwrap_or(std::net::Ipv4Addr::UNSPECIFIED);
        let holder = self.exports.identity.holder(self.peer.ip());
        root_allowed(&self.config, RootProto::Nbd, name, ip, holder)
    }

    /// Whether this client may attach the revision export `name` carries, if it carries one
    /// (`boot::exports::revision_allowed`: a canary's revision is its machines' alone).
    fn may_use_revision(&self, image: &Image, name: &str) -> bool {
        let Some(rev) = crate::config::names::revision_of(name) else {
            return true;
        };
        let ip = crate::service::ipv4_of(self.peer.ip()).unwrap_or(std::net::Ipv4Addr::UNSPECIFIED);
        let holder = self.exports.identity.holder(self.peer.ip());
        let active = crate::image::store::active(&image.dir).ok().flatten();
        crate::boot::exports::revision_allowed(
            &self.config,
            &image.name,
            rev,
            active.as_deref(),
            ip,
            holder,
        )
    }

    /// The export a connection handed over by a restart was attached to, opened and
    /// attached again as its handshake did (`Conn::resume`); `None` when it no longer may.
    pub(super) async fn reopen(&self, name: &str) -> Option<Attached> {
        let (opened, image) = self.open(name).await.ok()?;
        self.attach(opened, image).await.ok()
    }

    async fn open(&self, name: &str) -> Result<(BlockImage, Arc<Image>), Unavailable> {
        // A revision this server lacks and another member holds: pulled at once, the
        // handshake waiting for it (`image::demand`) while its deadline allows, for a client
        // that may use the image; a client whose handshake ends first finds it when it
        // connects again.
        if let Some((img, id)) = crate::image::serve::lacking(&self.config, name, RootProto::Nbd)
            && self.may_use(&img.name)
        {
            let root = crate::config::names::revision(&img, &id).root_image();
            let wait = self
                .limits
                .handshake_timeout
                .saturating_sub(Duration::from_secs(2));
            let _ = tokio::task::spawn_blocking(move || {
                crate::image::demand::root(&img, &id, wait, || root.is_file())
            })
            .await;
        }
        let image = image::lookup(&self.config, name).ok_or(Unavailable::Unknown)?;
        if !self.may_use(&image.name) || !self.may_use_revision(&image, name) {
            self.metrics.nbd().refused.inc();
            static REFUSED: LogLimit = LogLimit::new();
            if let Some(suppressed) = REFUSED.allow() {
                tracing::warn!(peer = %self.peer, export = %image.name, suppressed, "nbd client holds no lease of a pool booting this image over nbd; refused");
            }
            return Err(Unavailable::Refused);
        }
        if image.store == Store::Ram {
            return self.open_in_memory(image).await;
        }
        // Opening touches the disk: keep it off the async workers.
        let img = image.clone();
        let opened = tokio::task::spawn_blocking(move || BlockImage::open(&img))
            .await
            .unwrap_or_else(|e| Err(io::Error::other(e)));
        match opened {
            Ok(o) => Ok((o, image)),
            Err(e) => {
                tracing::error!(export = name, error = %e, "nbd cannot open image");
                Err(Unavailable::Failed)
            }
        }
    }

    /// A `store: ram` image from memory: loaded now if it is a revision first attached since
    /// start (this attach, and any other of it meanwhile, waits for the load).
    async fn open_in_memory(
        &self,
        image: Arc<Image>,
    ) -> Result<(BlockImage, Arc<Image>), Unavailable> {
        let bytes = match self.exports.ram.loaded(&image) {
            Some(bytes) => Ok(bytes),
            None => {
                let (ram, img) = (self.exports.ram.clone(), image.clone());
                tokio::task::spawn_blocking(move || ram.get(&img))
                    .await
                    .unwrap_or_else(|e| Err(io::Error::other(e)))
            }
        };
        match bytes {
            Ok(bytes) => Ok((BlockImage::in_memory(&image.nbd_export, bytes), image)),
            Err(e) => {
                tracing::error!(export = %image.nbd_export, error = %e, "nbd cannot load image into memory");
                Err(Unavailable::Failed)
            }
        }
    }

    /// The attachment for an opened image: with the client's overlay if it has `cow`.
    async fn attach(&self, opened: BlockImage, image: Arc<Image>) -> io::Result<Attached> {
        if image.cow.is_none() {
            return Ok(Attached {
                image: Arc::new(opened),
                cow: None,
            });
        }
        let (exports, ip, size) = (self.exports.clone(), self.peer.ip(), opened.size());
        // May read or create overlay files.
        let lease = tokio::task::spawn_blocking(move || {
            let (client, boot) = Overlays::client_key(&exports.identity, &exports.records, ip);
            exports.overlays.attach(&image, size, &client, boot)
        })
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)));
        if let Err(e) = &lease {
            tracing::error!(peer = %self.peer, export = opened.name(), error = %e, "nbd cannot attach overlay");
        }
        Ok(Attached {
            image: Arc::new(opened),
            cow: Some(lease?),
        })
    }

    /// A client asked to attach an export it cannot have: its root will not come up.
    fn root_refused(&self, name: &str) {
        self.metrics.nbd().refused.inc();
        if let Some(who) = self.who() {
            self.recorder.record(
                who,
                Kind::Failed {
                    proto: Some(Proto::Nbd),
                    reason: format!("no export `{name}` for this client"),
                },
            );
        }
    }

    /// Option haggling, up to the export the client settles on.
    pub(super) async fn handshake(&self, stream: &mut TcpStream) -> Result<Attached, HandshakeEnd> {
        stream.write_all(&p::greeting()).await?;
        let mut f = [0; 4];
        stream.read_exact(&mut f).await?;
        // A client without FIXED_NEWSTYLE only knows EXPORT_NAME, which works the same.
        let flags = ClientFlags::decode(f)?;
        for _ in 0..MAX_OPTIONS {
            let mut h = [0; p::OPTION_HEADER_LEN];
            stream.read_exact(&mut h).await?;
            let h = OptionHeader::decode(&h)?;
            let mut data = vec![0; h.len as usize];
            stream.read_exact(&mut data).await?;
            let mut out = Vec::new();
            self.metrics.nbd().requests.inc();
            match OptRequest::decode(h.option, &data) {
                Err(e) if h.option == p::OPT_EXPORT_NAME => return Err(e.into()),
                Err(e) => {
                    self.metrics.nbd().malformed.inc();
                    tracing::debug!(peer = %self.peer, option = h.option, error = %e, "nbd bad option");
                    p::opt_error(&mut out, h.option, p::REP_ERR_INVALID, &e.to_string());
                }
                Ok(OptRequest::ExportName(name)) => match self.open(&name).await {
                    Ok((opened, image)) => {
                        let flags_out = flags_of(&image);
                        // EXPORT_NAME cannot carry an error: a failed overlay is a hang-up.
                        let attached = self.attach(opened, image).await?;
                        p::export_name_reply(
                            &mut out,
                            attached.image.size(),
                            flags_out,
                            flags.no_zeroes,
                        );
                        stream.write_all(&out).await?;
                        return Ok(attached);
                    }
                    Err(_) => {
                        self.root_refused(&name);
                        return Err(HandshakeEnd::UnknownExport(name));
                    }
                },
                Ok(OptRequest::Abort) => {
                    p::opt_reply(&mut out, p::OPT_ABORT, p::REP_ACK, &[]);
                    // The client may already be gone; that is fine.
                    let _ = stream.write_all(&out).await;
                    return Err(HandshakeEnd::Aborted);
                }
                Ok(OptRequest::List) => {
                    // A client is shown only what it may attach.
                    for img in image::exported(&self.config) {
                        if self.may_use(&img.name) {
                            p::opt_server(&mut out, &img.nbd_export);
                        }
                    }
                    p::opt_reply(&mut out, p::OPT_LIST, p::REP_ACK, &[]);
                }
                Ok(OptRequest::Info { go, name, requests }) => {
                    let option = if go { p::OPT_GO } else { p::OPT_INFO };
                    match self.open(&name).await {
                        Err(Unavailable::Unknown) => {
                            // Asking to attach (GO) is the initrd wanting its root; INFO is
                            // only a question.
                            if go {
                                self.root_refused(&name);
                            }
                            let msg = format!("no export named `{name}`");
                            p::opt_error(&mut out, option, p::REP_ERR_UNKNOWN, &msg);
                        }
                        Err(Unavailable::Refused) => {
                            if go {
                                self.root_refused(&name);
                            }
                            let msg = format!("`{name}` is not exported to this client");
                            p::opt_error(&mut out, option, p::REP_ERR_POLICY, &msg);
                        }
                        Err(Unavailable::Failed) => {
                            p::opt_error(
                                &mut out,
                                option,
                                p::REP_ERR_UNKNOWN,
                                "export unavailable",
                            );
                        }
                        Ok((opened, image)) => {
                            p::info_export(&mut out, option, opened.size(), flags_of(&image));
                            if name.is_empty() || requests.contains(&p::INFO_NAME) {
                                p::info_name(&mut out, option, opened.name());
                            }
                            // Sent unasked too: these are the defaults, so it binds nobody.
                            p::info_block_size(
                                &mut out,
                                option,
                                p::MIN_BLOCK,
                                p::PREFERRED_BLOCK,
                                p::ADVERTISED_MAX_BLOCK,
                            );
                            if go {
                                match self.attach(opened, image).await {
                                    Ok(attached) => {
                                        p::opt_reply(&mut out, option, p::REP_ACK, &[]);
                                        stream.write_all(&out).await?;
                                        return Ok(attached);
                                    }
                                    Err(_) => {
                                        out.clear();
                                        p::opt_error(
                                            &mut out,
                                            option,
                                            p::REP_ERR_UNKNOWN,
                                            "export unavailable",
                                        );
                                    }
                                }
                            } else {
                                p::opt_reply(&mut out, option, p::REP_ACK, &[]);
                            }
                        }
                    }
                }
                Ok(OptRequest::Unsupported(option)) => {
                    // Structured replies, TLS, metadata contexts: the client falls back.
                    p::opt_error(&mut out, option, p::REP_ERR_UNSUP, "unsupported option");
                }
            }
            stream.write_all(&out).await?;
        }
        Err(HandshakeEnd::TooManyOptions)
    }
}

//! NFS service: MOUNT v3 and NFS v3 (and GETPORT, for clients that ask the NFS port) for every
//! image whose pool says `root: nfs`, on the port `app` bound, over TCP. Calls are decoded by
//! `proto::nfs3` and answered from `export::tree::Tree`.
//!
//! Why not nfs3_server any more: it served only connections it accepted itself, so we relayed
//! every byte through a second loopback connection (two extra copies and wake-ups per call),
//! and inside it every call crossed a duplex pipe, a spawned task and a channel, with a
//! blocking-pool trip per lstat and an open() per READ. A booting client waits for each of
//! thousands of small calls in turn, so that overhead was most of its time (BENCHMARKS.md,
//! `## NFS`). Its argument decoder also allocates whatever length a client claims.
//!
//! One thread per connection handles calls in order: everything buffered is answered, then the
//! replies go out in one write. Limits: `CLIENTS` and `STRANGERS` (the slots of the room's
//! clients, and the small pool of addresses that hold no lease of an NFS pool, which get only
//! refusals anyway and have `STRANGER_TIME` to hear them), `FIRST_CALL` for a connection's
//! first call, `MAX_RECORD` per call, `MAX_OUT` of replies buffered, `IDLE` without a call,
//! `WRITE_TIMEOUT` for a client that stops reading. Connections made to an address that is
//! not one of the server's links (the campus side) are closed at once.
//!
//! Credentials are checked on every call, as knfsd checks them (`proto::nfs3::may`): the
//! caller's AUTH_UNIX uid, gid and auxiliary gids (AUTH_NONE is nobody, 65534; uid/gid 0 too
//! when the image says `root_squash`) against the mode bits of what it names: READ needs r
//! (the owner always may), READDIR(PLUS) r on the folder (the owner always may), LOOKUP x on
//! the folder, READLINK r on the link (always there on Linux, whose links are 0777, so as
//! knfsd's no check); ACCESS answers by the mode bits alone, as knfsd's does (no owner
//! override: the owner of a 0300 file is told it may not read it, though its READ is
//! answered). An image with `secure_ports` (the default) answers MNT and NFS calls only from
//! source ports below 1024. A refusal is NFS3ERR_ACCES (MNT3ERR_ACCES), counted as refused.
//!
//! Here the exports and the accept loop; `conn` one connection's thread and its calls'
//! dispatch, `procs` the answers to MOUNT and NFS calls, `send` writing the replies, `ended`
//! how a connection ended, `limits` the sizes and times a connection keeps to. The files
//! import one way: this one names them, they never name it back.

mod conn;
mod ended;
mod limits;
mod procs;
mod send;

use super::Carries;
use super::bounds::{Caps, Slots, Standing};
use crate::boot::exports::ServesFor;
use crate::config::{Config, RootProto, Store};
use crate::export::tree::Tree;
use crate::proto::portmap;
use conn::Conn;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Instant;

/// The room's connections: a kernel client holds one (its MOUNT call may open a second for a
/// moment), so an address's share leaves room for a test rig on loopback.
const CLIENTS: Caps = Caps {
    total: 1024,
    per_address: 16,
};
/// Addresses with no lease of an NFS pool: enough for a probe to hear its refusal.
const STRANGERS: Caps = Caps {
    total: 16,
    per_address: 2,
};

/// The NFS tree of the exports served from start: each NFS pool's image and its
/// per-architecture ones, an image with revisions as an export per revision (the active one
/// loaded now when `store: ram`, the others at their first MOUNT), and the thread that keeps
/// its listings fresh. An image a reload adds joins the tree at its first MOUNT, as a
/// revision imported since does (`image::serve::nfs_to_learn`).
async fn tree_of(config: &Config) -> anyhow::Result<Arc<Tree>> {
    let mut images = Vec::new();
    // Each NFS pool's image and its per-architecture ones (`pools.NAME.arch`).
    let nfs_images = || {
        config
            .pools
            .values()
            .filter(|p| p.root == RootProto::Nfs)
            .flat_map(|p| p.images())
    };
    for image in nfs_images() {
        if !images.iter().any(|(_, n, _, _)| *n == image.name) {
            let ram = image.store == Store::Ram;
            let export = image.nfs_export.clone();
            images.push((export, image.name.clone(), image.root_tree(), ram));
        }
    }
    // An image with revisions: each revision is an export of its own (`image::serve`). In
    // RAM for `store: ram`: the one active at start is loaded now, the others at their first
    // MOUNT (`Tree::load_if_ram`).
    images.retain(|(_, name, _, _)| {
        config
            .images
            .get(name)
            .is_none_or(|i| !crate::image::store::managed(&i.dir))
    });
    let mut later = Vec::new();
    for image in nfs_images() {
        let active = crate::image::serve::serving(image).nfs_export.clone();
        let ram = image.store == Store::Ram;
        for (export, name, root) in crate::image::serve::nfs_exports(image) {
            let known = |e: &String| {
                images.iter().any(|(k, _, _, _)| k == e) || later.iter().any(|(k, _, _, _)| k == e)
            };
            if !known(&export) {
                if export == active {
                    images.push((export, name, root, ram));
                } else {
                    later.push((export, name, root, ram));
                }
            }
        }
    }
    let tree = Arc::new(Tree::with_exports(images));
    {
        let tree = tree.clone();
        tokio::task::spawn_blocking(move || tree.load_ram()).await?;
    }
    for (export, name, root, ram) in later {
        tree.add_export(export, name, root, ram);
    }
    {
        // Ends within a second of the service, when the last connection lets go of the tree.
        let tree = Arc::downgrade(&tree);
        std::thread::Builder::new()
            .name("nfs-listings".into())
            .spawn(move || Tree::keep_listings_fresh(tree))?;
    }
    Ok(tree)
}

/// Per export of the tree: (root_squash, secure_ports) of its image.
fn trust_of(config: &Config, tree: &Tree) -> Arc<[(bool, bool)]> {
    (0..tree.exports().count())
        .map(|i| {
            config
                .images
                .get(crate::config::names::base(tree.image_name(i)))
                .map_or((false, true), |im| (im.root_squash, im.secure_ports))
        })
        .collect()
}

/// The NFS service (MOUNT and NFSv3 on one port, a listener on each of the server's own
/// addresses, `app::own_addresses`): the tree, then each connection accepted
/// from a client of an NFS pool, or a stranger within its small share, on a thread of its own.
pub async fn serve(
    mut listeners: Vec<super::Listener>,
    mut more: tokio::sync::mpsc::UnboundedReceiver<super::Listener>,
    shared: super::Shared,
) -> anyhow::Result<()> {
    let super::Shared {
        config: live,
        recorder,
        metrics,
        identity,
        site,
        shutdown,
        ..
    } = shared;
    let config = live.load();
    let tree = tree_of(&config).await?;
    let exports: Vec<&str> = tree.exports().collect();
    tracing::info!(exports = ?exports, "nfs exports");
    let table: Arc<[portmap::Mapping]> =
        portmap::table(config.server.ports.nfs, config.server.ports.portmap).into();

    let trust = trust_of(&config, &tree);
    let slots = Slots::new(metrics.clone(), |m| &m.nfs().slots, CLIENTS, STRANGERS);
    loop {
        // An address taken over for the site brings its listener (`service::takeover`).
        let accepted = tokio::select! {
            r = super::accept_any(&listeners, &shutdown, "nfs", Carries::FileRoot) => Ok(r),
            Some(listener) = more.recv() => Err(listener),
        };
        let (stream, peer, paced) = match accepted {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(listener) => {
                listeners.push(listener);
                continue;
            }
        };
        // A connection keeps the config it was accepted under.
        let config = live.load();
        static REFUSED: super::bounds::LogLimit = super::bounds::LogLimit::new();
        if !super::made_to_us(&config, &site, &stream) {
            metrics.nfs().refused.inc();
            if let Some(suppressed) = REFUSED.allow() {
                tracing::warn!(client = %peer, local = ?stream.local_addr().ok(), suppressed,
                    "nfs connection refused: not made to an address of the server's links");
            }
            continue;
        }
        let standing = identity.standing(&config, ServesFor::Root(RootProto::Nfs), peer.ip());
        let slot = match slots.take(peer.ip(), standing) {
            Ok(slot) => slot,
            Err(full) => {
                metrics.nfs().refused.inc();
                if let Some(suppressed) = REFUSED.allow() {
                    tracing::warn!(client = %peer, ?standing, caps = ?slots.caps(standing),
                        suppressed, "nfs connection refused: {}", full.reason());
                }
                continue;
            }
        };
        let recorded = super::record_conn(&site, &stream, peer);
        let ip = super::ipv4_of(peer.ip()).unwrap_or(Ipv4Addr::UNSPECIFIED);
        let conn = Conn {
            tree: tree.clone(),
            config: config.clone(),
            identity: identity.clone(),
            recorder: recorder.clone(),
            metrics: metrics.clone(),
            table: table.clone(),
            peer,
            ip,
            allowed: vec![None; tree.exports().count()],
            trust: trust.clone(),
            mounts: 0,
            total: 0,
            unreported: 0,
            last_flush: Instant::now(),
            big: None,
            data_pending: None,
            traced: None,
            stranger: standing == Standing::Stranger,
        };
        let stream = match stream.into_std().and_then(|s| {
            s.set_nonblocking(false)?;
            Ok(s)
        }) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(client = %peer, error = %e, "nfs connection dropped");
                continue;
            }
        };
        let stop = shutdown.clone();
        shutdown.spawn(async move {
            let _recorded = recorded;
            let (done, ended) = tokio::sync::oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name("nfs-conn".into())
                .spawn(move || {
                    conn.run(stream, stop);
                    drop(paced);
                    let _ = done.send(());
                });
            match thread {
                Ok(_) => {
                    let _ = ended.await;
                }
                Err(e) => {
                    tracing::error!(client = %peer, error = %e, "nfs connection thread not started")
                }
            }
            drop(slot);
        });
    }
    Ok(())
}

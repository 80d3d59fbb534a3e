//! HTTP: boot files and per-client iPXE scripts under `/boot/`, the JSON API under `/api/v1/`,
//! the dashboard at `/`. Every boot file sent is recorded when its last byte has been handed
//! to the connection, so the kernel phase ends when the download does.
//!
//! Connections are accepted here (HTTP/1.1 through hyper), not by `axum::serve`, to bound
//! them: the room's clients `limits.http_connections` in all and `limits.http_per_client` per
//! address, addresses that hold no lease `STRANGERS` (past them a connection is closed at
//! once and counted as refused), a file is sent from a bounded buffer (`boot::CHUNK`), a request's headers must
//! arrive within `limits.http_header_timeout` (hyper's header timer, which also runs while a
//! kept-alive connection waits for its next request), and a connection that moves no byte
//! either way for `limits.http_idle_timeout` is closed (a stalled download too; the event
//! stream sends something every second).
//!
//! The rooms: `boot.rs` (scripts and boot files), `callbacks.rs` (the booted system's own
//! calls), `api.rs` (the JSON API), `enrol.rs` (the unknown clients and their enrolment),
//! `next_boot.rs` (the next-boot action), `wake.rs` (Wake-on-LAN), `guard.rs` (tokens),
//! `readers.rs` (who reads without the read token), `conn.rs` (one connection under
//! hyper, and its idle watch). This file accepts connections and holds the routes.

mod api;
mod blocks;
mod boot;
mod callbacks;
mod conn;
mod enrol;
mod guard;
mod images;
mod next_boot;
mod readers;
mod revs;
mod site;
mod tracker;
mod wake;
mod web;

pub use readers::access_sentence;
pub use web::Web;

use super::Carries;
use super::bounds::{Caps, Slot, Slots, Standing};
use crate::boot::exports::ServesFor;
use crate::metrics::prometheus;
use crate::shutdown::Shutdown;
use api::{
    boot_console, boots, clients, compare, egress, pools, release_lease, stream, wave_by_id, waves,
};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use boot::{boot_script, image_file, loader};
use callbacks::{booted, failed};
use conn::serve_connection;
use guard::read_guard;

/// What the HTTP handlers share.
/// Addresses that hold no lease (the admin's browser, a Prometheus server, a probe) share
/// these connections, so that however many addresses a host sends from, it cannot take the
/// slots of the room's clients (`limits.http_connections`, `limits.http_per_client`).
pub const STRANGERS: Caps = Caps {
    total: 64,
    per_address: 16,
};

/// Serves `listener`: plain HTTP, or HTTPS with `tls` (`server.tls`, the same routes; its
/// connection limits are its own).
pub async fn serve(
    listener: super::Listener,
    web: Web,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let metrics = web.metrics.clone();
    let (live, identity) = (web.config.clone(), web.identity.clone());
    let app = router(web);
    let slots = Slots::new(
        metrics.clone(),
        |m| &m.http().slots,
        client_caps(&live.load().limits),
        STRANGERS,
    );
    loop {
        let Some((stream, peer, paced)) =
            super::accept(&listener, &shutdown, "http", Carries::BootFiles).await
        else {
            break;
        };
        // Each connection is served under the limits of the config as it stands.
        let config = live.load();
        slots.set_client_caps(client_caps(&config.limits));
        let standing = identity.standing(&config, ServesFor::AnyPool, peer.ip());
        let accepted = Accepted {
            stream,
            peer,
            paced,
            slots: slots.clone(),
            service: app.clone(),
            limits: config.limits.clone(),
            tls: tls.clone(),
            metrics: metrics.clone(),
            stop: shutdown.clone(),
        };
        if standing == Standing::Stranger && identity.in_a_site() {
            // Perhaps a client another member just placed here (UEFI's HTTP boot asks here
            // first): held until the site's leases were read again (`standing_held`).
            let identity = identity.clone();
            shutdown.spawn(async move {
                let ip = accepted.peer.ip();
                let standing = identity
                    .standing_held(&config, ServesFor::AnyPool, ip)
                    .await;
                if let Some(taken) = accepted.take(standing) {
                    taken.serve().await;
                }
            });
        } else if let Some(taken) = accepted.take(standing) {
            // The slot is taken here, in the order connections were accepted: the one past
            // a cap is the one refused.
            shutdown.spawn(taken.serve());
        }
    }
    Ok(())
}

/// An accepted connection, before its slot is taken (`serve`).
struct Accepted {
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    paced: crate::steer::pacing::Paced,
    slots: Slots,
    service: axum::Router,
    limits: crate::config::Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    metrics: crate::metrics::Metrics,
    stop: Shutdown,
}

impl Accepted {
    /// Takes a slot of `standing`'s pool for the connection, or closes it at once (a refused
    /// connection costs no buffer; counted).
    fn take(self, standing: Standing) -> Option<Taken> {
        static REFUSED: super::bounds::LogLimit = super::bounds::LogLimit::new();
        let held = match self.slots.take(self.peer.ip(), standing) {
            Ok(held) => held,
            Err(full) => {
                self.metrics.http().refused.inc();
                if let Some(suppressed) = REFUSED.allow() {
                    tracing::warn!(peer = %self.peer, ?standing, caps = ?self.slots.caps(standing),
                        suppressed, "http connection refused: {}", full.reason());
                }
                return None;
            }
        };
        Some(Taken {
            accepted: self,
            held,
        })
    }
}

/// A connection holding its slot, to be served.
struct Taken {
    accepted: Accepted,
    held: Slot,
}

impl Taken {
    async fn serve(self) {
        let Taken { accepted, held } = self;
        let Accepted {
            stream,
            peer,
            paced,
            service,
            limits,
            tls,
            stop,
            ..
        } = accepted;
        let _ = stream.set_nodelay(true);
        let _held = (held, paced);
        serve_connection(stream, peer, service, &limits, tls, stop).await;
    }
}

/// The caps of the clients' connections (`limits.http_connections`, `http_per_client`).
fn client_caps(limits: &crate::config::Limits) -> Caps {
    Caps {
        total: limits.http_connections,
        per_address: limits.http_per_client,
    }
}

pub fn router(web: Web) -> axum::Router {
    axum::Router::new()
        .route("/boot/script/{mac}", get(boot_script))
        .route("/boot/loaders/{file}", get(loader))
        .route("/boot/{image}/{*file}", get(image_file))
        .route("/boot/{image}/blocks/{digest}", get(blocks::manifest))
        .route("/boot/{image}/blocks/{digest}/{index}", get(blocks::chunk))
        .route("/boot/{image}/blocks/{digest}/where", post(tracker::ask))
        .route("/api/v1/booted", post(booted))
        .route("/api/v1/failed", post(failed))
        .route("/api/v1/boots", get(boots))
        .route("/api/v1/boots/{id}/console", get(boot_console))
        .route("/api/v1/waves", get(waves))
        .route("/api/v1/waves/{id}", get(wave_by_id))
        .route("/api/v1/compare", get(compare))
        .route("/api/v1/egress", get(egress))
        .route("/api/v1/stream", get(stream))
        .route("/metrics", get(metrics_text))
        .route("/api/v1/pools", get(pools))
        .route("/api/v1/config", get(api::config))
        .route("/api/v1/images", get(images::images))
        .route("/api/v1/images/{name}/activate", post(images::activate))
        .route(
            "/api/v1/images/{name}/revs/{rev}/manifest",
            get(revs::manifest),
        )
        .route(
            "/api/v1/images/{name}/objects/sha256/{digest}",
            get(revs::object),
        )
        .route("/api/v1/clients", get(clients).post(enrol::enrol))
        .route("/api/v1/clients/{mac}/remove", post(enrol::unenrol))
        .route("/api/v1/unknown", get(enrol::unknown))
        .route("/api/v1/leases/{mac}/release", post(release_lease))
        .route(
            "/api/v1/next-boot",
            post(next_boot::set_next_boot).get(next_boot::next_boots),
        )
        .route("/api/v1/wake", post(wake::wake))
        .route("/api/v1/wakes", get(wake::wakes))
        .route("/api/v1/site", get(site::site))
        .route("/api/v1/site/takeover", post(site::takeover))
        .route("/api/v1/site/release", post(site::release))
        .merge(super::web::routes())
        .layer(axum::middleware::from_fn_with_state(
            web.clone(),
            read_guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            web.clone(),
            count_request,
        ))
        .with_state(web)
}

/// Counts every request, and those answered with a 4xx as refused, for `/metrics`.
async fn count_request(
    State(web): State<Web>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    web.metrics.http().requests.inc();
    let res = next.run(req).await;
    if res.status().is_client_error() {
        web.metrics.http().refused.inc();
    }
    res
}

/// `/metrics`: what `metrics::prometheus` writes of the daemon's counters, its boots and the
/// links the egress sampler last read.
async fn metrics_text(State(web): State<Web>) -> impl IntoResponse {
    let tally = web
        .records
        .read(|t| crate::record::view::tally(t.boots(), crate::record::event::now_micros()));
    let links = web.egress.links();
    let links: Vec<prometheus::Link> = links
        .iter()
        .map(|l| prometheus::Link {
            name: &l.name,
            master: l.master.as_deref().unwrap_or(""),
            tx_bytes: l.tx_bytes,
            rx_bytes: l.rx_bytes,
            speed_bytes: l.speed_mbps.map(|mbps| u64::from(mbps) * 125_000),
        })
        .collect();
    let served = web.config.served();
    let text = prometheus::text(&prometheus::Sources {
        metrics: &web.metrics,
        boots: &tally.boots,
        phases: &tally.phases,
        links: &links,
        config: (served.generation, &served.digest),
    });
    ([(header::CONTENT_TYPE, prometheus::CONTENT_TYPE)], text)
}

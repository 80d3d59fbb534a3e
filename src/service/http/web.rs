//! The HTTP service's shared state (`Web`: what every route reads) and its small answers,
//! below the routes' files (`api`, `boot`, `callbacks`, `enrol`, `guard`, `images`), which all use them:
//! the folder's files import one way.

use crate::config::Live;
use crate::metrics::Metrics;
use crate::record::egress::Egress;
use crate::record::{Recorder, Records};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

#[derive(Clone)]
pub struct Web {
    /// Loaded once per request.
    pub config: Live,
    pub recorder: Recorder,
    pub records: Arc<Records>,
    pub egress: Arc<Egress>,
    /// Who is at which address (`service::identity`).
    pub identity: crate::service::identity::Identity,
    /// The daemon's counters, which `/metrics` serves.
    pub metrics: Metrics,
    /// The DHCP service, for the actions on the lease table.
    pub dhcp: crate::service::dhcp::Commands,
    /// The clients no pool lists that asked.
    pub unknown: Arc<crate::service::unknown::Unknown>,
    /// Enrolments (`POST /api/v1/clients`).
    pub enrol: Arc<crate::service::enrol::Enroller>,
    /// The next boots an admin set (`service::next_boot`).
    pub next: Arc<crate::service::next_boot::NextBootState>,
    /// Wake-on-LAN's sender (`service::wake`).
    pub wake: Arc<crate::service::wake::Waker>,
    /// The site this server is a member of (`GET /api/v1/site`).
    pub site: Arc<crate::site::live::Site>,
    /// The tracker's swarms (`tracker.rs`).
    pub tracker: Arc<Tracker>,
}

/// Every room's swarms (`boot::tracker`), and the clock their times are counted on.
pub struct Tracker {
    pub swarms: std::sync::Mutex<crate::boot::tracker::Swarms>,
    pub began: std::time::Instant,
}

impl Default for Tracker {
    fn default() -> Tracker {
        Tracker {
            swarms: std::sync::Mutex::default(),
            began: std::time::Instant::now(),
        }
    }
}

impl Web {
    /// The API's dependencies: the shared ones, the DHCP service's command channel, and the
    /// next boots kept in the state folder (an unreadable file is an error).
    pub fn new(
        shared: &crate::service::Shared,
        dhcp: crate::service::dhcp::Commands,
        wake: Arc<crate::service::wake::Waker>,
    ) -> anyhow::Result<Web> {
        let state_dir = shared.config.load().server.state_dir.clone();
        let next = crate::service::next_boot::NextBootState::open(&state_dir)?;
        Ok(Web {
            config: shared.config.clone(),
            recorder: shared.recorder.clone(),
            records: shared.records.clone(),
            egress: shared.egress.clone(),
            identity: shared.identity.clone(),
            metrics: shared.metrics.clone(),
            dhcp,
            unknown: shared.unknown.clone(),
            enrol: shared.enrol.clone(),
            next: Arc::new(next),
            wake,
            site: shared.site.clone(),
            tracker: Arc::default(),
        })
    }
}

pub(super) fn not_found(what: &str) -> Response {
    (StatusCode::NOT_FOUND, format!("{what}\n")).into_response()
}

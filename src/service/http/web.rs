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
}

impl Web {
    /// The API's dependencies: the shared ones, and the DHCP service's command channel.
    pub fn new(shared: &crate::service::Shared, dhcp: crate::service::dhcp::Commands) -> Web {
        Web {
            config: shared.config.clone(),
            recorder: shared.recorder.clone(),
            records: shared.records.clone(),
            egress: shared.egress.clone(),
            identity: shared.identity.clone(),
            metrics: shared.metrics.clone(),
            dhcp,
            unknown: shared.unknown.clone(),
            enrol: shared.enrol.clone(),
        }
    }
}

pub(super) fn not_found(what: &str) -> Response {
    (StatusCode::NOT_FOUND, format!("{what}\n")).into_response()
}

//! `GET /api/v1/site` (read side): the members of this server's site, live or not, their
//! links, rooms and share of the clients, as this server sees them (`site::report`).

use super::web::Web;
use crate::site::report::Report;
use axum::Json;
use axum::extract::State;

pub(super) async fn site(State(web): State<Web>) -> Json<Report> {
    let site = &web.site;
    Json(Report::of_member(&site.view(), site.me(), site.shared()))
}

//! The dashboard's files, embedded in the binary so that the daemon is all a room needs and
//! no page request leaves the server. The files themselves live in `web/`.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

/// Path, content type, body: every file the page loads.
const FILES: &[(&str, &str, &str)] = &[
    (
        "/",
        "text/html; charset=utf-8",
        include_str!("../../web/index.html"),
    ),
    (
        "/app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/app.js"),
    ),
    (
        "/dom.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/dom.js"),
    ),
    (
        "/actions.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/actions.js"),
    ),
    (
        "/charts.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/charts.js"),
    ),
    (
        "/site.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/site.js"),
    ),
    (
        "/app.css",
        "text/css; charset=utf-8",
        include_str!("../../web/app.css"),
    ),
];

/// Routes for the dashboard, to merge into the HTTP router whatever its state.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    FILES.iter().fold(Router::new(), |r, &(path, mime, body)| {
        r.route(
            path,
            get(move || async move {
                // Revalidate on each load so a new daemon's page is never mixed with old files.
                (
                    [
                        (header::CONTENT_TYPE, mime),
                        (header::CACHE_CONTROL, "no-cache"),
                    ],
                    body,
                )
                    .into_response()
            }),
        )
    })
}

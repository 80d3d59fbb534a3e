//! What a member of the site pulls a revision by (docs/chunks.md, `image::pull`):
//! `GET /api/v1/images/NAME/revs/REV/manifest` (REV an id, or `active`; `?base=ID` for its
//! difference from a revision the puller holds) and
//! `GET /api/v1/images/NAME/objects/sha256/DIGEST`, a file's bytes by their digest, with
//! Range. Both are read routes: the read token, the server host or `server.admin_networks`
//! (`guard::read_guard`), never a client subnet without the token.

use super::boot::send_file;
use super::web::{Web, not_found};
use crate::config::names::is_id;
use crate::image::{inventory, manifest_delta, store};
use crate::record::event::FileKind;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;

/// What a manifest request may add: `?base=ID`, a revision the puller holds.
#[derive(serde::Deserialize)]
pub struct ManifestQuery {
    base: Option<String>,
}

/// The manifest of revision REV of image NAME, as `revs/ID/manifest` holds it (made on first
/// use for a revision imported before manifests were written). With `?base=ID` of a revision
/// this server holds too, the manifest as its difference from that one's
/// (`image::manifest_delta`); without, or when this server lacks it, whole.
pub async fn manifest(
    State(web): State<Web>,
    Path((name, rev)): Path<(String, String)>,
    Query(q): Query<ManifestQuery>,
) -> Response {
    let config = web.config.load();
    let Some(image) = config.images.get(&name).cloned() else {
        return not_found(&format!("no image `{name}` in the config"));
    };
    let done = tokio::task::spawn_blocking(move || {
        let id = match rev.as_str() {
            "active" => store::active(&image.dir)?
                .ok_or_else(|| anyhow::anyhow!("image {name} has no active revision"))?,
            id if is_id(id) => id.to_string(),
            _ => anyhow::bail!("`{rev}` is not a revision id (12 hex digits) nor `active`"),
        };
        let text = inventory::of_revision(&image, &id)?;
        let base = q.base.filter(|b| is_id(b) && *b != id);
        match base.and_then(|b| inventory::of_revision(&image, &b).ok()) {
            Some(held) => Ok((id, manifest_delta::make(&held, &text))),
            None => Ok((id, text)),
        }
    })
    .await;
    match done {
        Ok(Ok((id, text))) => (
            [
                (
                    header::CONTENT_TYPE,
                    "text/plain; charset=us-ascii".to_string(),
                ),
                (header::HeaderName::from_static("x-bootpool-revision"), id),
            ],
            text,
        )
            .into_response(),
        Ok(Err(e)) => not_found(&format!("{e:#}")),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// The bytes of a regular file of image NAME by their SHA-256 (64 lowercase hex digits).
pub async fn object(
    State(web): State<Web>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((name, digest)): Path<(String, String)>,
) -> Response {
    let config = web.config.load();
    let Some(image) = config.images.get(&name).cloned() else {
        return not_found(&format!("no image `{name}` in the config"));
    };
    if digest.len() != 64
        || !digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return (
            StatusCode::BAD_REQUEST,
            "a digest is a sha256 in 64 lowercase hex digits\n",
        )
            .into_response();
    }
    let want = digest.clone();
    let Ok(Some(path)) =
        tokio::task::spawn_blocking(move || inventory::file_with(&image, &want)).await
    else {
        return not_found(&format!("image {name} holds no object {digest}"));
    };
    let shown = format!("/api/v1/images/{name}/objects/sha256/{digest}");
    send_file(
        &web,
        peer,
        &headers,
        path,
        FileKind::Other,
        &shown.clone(),
        shown,
    )
    .await
}

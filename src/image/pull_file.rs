//! One boot file (the kernel or the initrd) of a revision this server lacks, ahead of the
//! whole revision (`demand.rs`): the revision's manifest from the members holding it (the
//! one asked for, its entries making the content hash it names), then that one file's bytes,
//! fetched by digest and checked as a pull checks every file (`pull.rs`), and renamed into
//! place only then. A copy that does not hash to the manifest's digest is never kept.

use super::fetch::Base;
use super::manifest::Kind;
use super::progress::Progress;
use super::pull::{self, Moved, Puller, Request};
use super::store;
use crate::config::Image;
use anyhow::{Context as _, bail};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Fetches the file `name` (a name inside the revision's folder: the image's kernel or initrd
/// name) of revision `req.rev` from `req.from` into `dest`, checked against its manifest.
pub fn fetch(image: &Image, req: &Request, name: &str, dest: &Path) -> anyhow::Result<Moved> {
    let Some(id) = req.rev.as_deref() else {
        bail!("one file is fetched from a named revision, not the active one");
    };
    let bases = req
        .from
        .iter()
        .map(|u| Base::parse(u))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if bases.is_empty() {
        bail!("no member holds revision {id} of image {}", image.name);
    }
    let mut moved = Moved::default();
    let (m, first) = pull::manifest(image, req, &bases, &mut moved)?;
    if store::id_of(&m.revision) != id {
        bail!(
            "{} answered revision {}'s manifest when asked for {id}",
            bases[first].shown,
            store::id_of(&m.revision)
        );
    }
    let Some(entry) = m.entries.iter().find(|e| e.path == name.as_bytes()) else {
        bail!("revision {id}'s manifest has no {name}");
    };
    let Kind::File(digest) = entry.kind else {
        bail!("revision {id}'s {name} is not a regular file");
    };
    let parent = dest.parent().context("a destination without a folder")?;
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    // Two boots asking at once each fetch into a name of their own; the last rename wins.
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tmp = parent.join(format!(
        ".{}.{}.{}",
        dest.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let mut puller = Puller {
        image,
        bases: &bases,
        first,
        token: req.token.as_deref(),
        moved,
    };
    let mut bar = Progress::new("fetching", Some(entry.size));
    let out = puller
        .fetch(entry, &digest, &tmp, name, &mut bar)
        .and_then(|()| pull::stamp(&tmp, entry))
        .and_then(|()| {
            std::fs::rename(&tmp, dest).with_context(|| format!("renaming into {}", dest.display()))
        });
    bar.finish();
    if out.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    out.map(|()| puller.moved)
}

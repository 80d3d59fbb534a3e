//! What the daemon serves of an image with revisions: the revision a boot gets (the active
//! one, read from `DIR/active` when the boot's script is made) and the revision-specific names
//! it is handed: kernel and initrd `revs/ID/vmlinuz` under the image's folder, the NFS export
//! `EXPORT@ID`, the NBD export `NAME@ID`. A client holds only its revision's names, so an
//! activation changes what later boots get and nothing of a running client's; each name is
//! resolved to its revision's folder when asked (new revisions are learned without a restart).

use super::copies::{self, Kind};
use super::store;
use crate::config::names::{self, revision};
use crate::config::{Config, ConfigError, Image, Member, RootProto, Wire};
use std::sync::Arc;

/// The image a boot starting now gets: the active revision of a folder with revisions, else
/// the image itself (a folder assembled by hand, or one with no revision activated yet).
pub fn serving(image: &Arc<Image>) -> Arc<Image> {
    if !store::managed(&image.dir) {
        return image.clone();
    }
    match store::active(&image.dir) {
        Ok(Some(id)) => Arc::new(revision(image, &id)),
        _ => image.clone(),
    }
}

/// Does an NBD pool boot image `name` (as its image or an architecture's)? Only then does a
/// revision need its squashfs root image.
pub fn nbd_served(config: &Config, name: &str) -> bool {
    config
        .pools
        .values()
        .filter(|p| p.root == RootProto::Nbd)
        .flat_map(|p| p.images())
        .any(|i| i.name == name)
}

/// The files the config's pools boot from that are not on disk (of an image with revisions,
/// the active one's), each once, at its image's `images.NAME.dir` with the pools that need it;
/// `Config::missing_files` tells the `server` keys' own.
pub fn missing_files(config: &Config) -> Vec<ConfigError> {
    // Each missing file, in the order first needed, with the pools needing it.
    let mut missing: Vec<(String, std::path::PathBuf, Vec<String>)> = Vec::new();
    for (name, pool) in &config.pools {
        for image in pool.images() {
            let served = &serving(image);
            let mut need = vec![served.kernel(), served.initrd()];
            need.push(match pool.root {
                RootProto::Nfs => served.root_tree(),
                RootProto::Nbd => served.root_image(),
            });
            for path in need.into_iter().filter(|p| !p.exists()) {
                match missing.iter_mut().find(|(_, p, _)| *p == path) {
                    Some((_, _, pools)) => pools.push(name.clone()),
                    None => missing.push((image.name.clone(), path, vec![name.clone()])),
                }
            }
        }
    }
    let mut errors: Vec<ConfigError> = missing
        .into_iter()
        .map(|(image, path, pools)| {
            let img = &config.images[&image];
            let active = store::active(&img.dir).ok().flatten();
            let how = match active {
                // A revision imported while no NBD pool served the image has no squashfs.
                Some(id) if path.ends_with(&img.root_image_name) => {
                    format!("make it: bootpool image activate {image} {id}")
                }
                _ => format!(
                    "build it: images/build-demo.sh; or import one: bootpool image import {image}"
                ),
            };
            config.error_at(
                &["images", image.as_str(), "dir"],
                format!(
                    "image `{image}` lacks {}, which {} ({how})",
                    path.display(),
                    match pools.as_slice() {
                        [one] => format!("pool {one} boots from"),
                        all => format!("pools {} boot from", all.join(", ")),
                    }
                ),
            )
        })
        .collect();
    errors.extend(pinned_missing(config));
    errors
}

/// The clients' `revision`s that are not on disk: a canary is named once its revision is
/// imported (`bootpool image import`), and never boots the active one by mistake.
fn pinned_missing(config: &Config) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    for (name, pool) in &config.pools {
        for (i, entry) in pool.clients.iter().enumerate() {
            let Some(rev) = &entry.revision else { continue };
            let image = entry.image.as_ref().unwrap_or(&pool.image);
            if store::managed(&image.dir) && store::rev_dir(&image.dir, rev).is_dir() {
                continue;
            }
            errors.push(config.error_at_entry(
                name,
                i,
                "revision",
                format!(
                    "image `{}` has no revision {rev} on disk (bootpool image list {} shows                      its revisions; import it first)",
                    image.name, image.name
                ),
            ));
        }
    }
    errors
}

/// What a boot of `member` starting now is handed: the revision its entry pins it to (a
/// canary) while that is on disk, else `for_boot` of the image it boots.
pub fn for_member(config: &Config, member: &Member) -> Arc<Image> {
    let image = member.image();
    let pinned = member
        .revision()
        .filter(|r| store::managed(&image.dir) && store::rev_dir(&image.dir, r).is_dir());
    let Some(rev) = pinned else {
        if let Some(r) = member.revision() {
            tracing::warn!(mac = %member.mac, image = %image.name, rev = %r,
                "the client's revision is not on disk; it boots the active one");
        }
        return for_boot(config, image);
    };
    let image = with_blocks(Arc::new(revision(image, rev)));
    wire_root(config, &image).unwrap_or(image)
}

/// What a boot starting now is handed: `serving`'s image, with the digest of its root image's
/// block manifest (`with_blocks`), and its NBD root's wire copy (`root_wire: zstd`) in place of
/// the root image once that is made. The names go into the boot's script, so the client reads
/// the one file or the other for its whole boot.
pub fn for_boot(config: &Config, image: &Arc<Image>) -> Arc<Image> {
    let image = with_blocks(serving(image));
    wire_root(config, &image).unwrap_or(image)
}

/// `image` with `blocks`, the digest of the block manifest beside its root image, when there
/// is a current one (`blocks_file::beside`): a client's agent reads the root by it. The wire
/// copy that may take the root image's place keeps it: the agent's chunks are the image's own.
pub fn with_blocks(image: Arc<Image>) -> Arc<Image> {
    match super::blocks_file::beside(&image.root_image()) {
        Some(digest) => {
            let mut i = (*image).clone();
            i.blocks = Some(super::blocks::hex(&digest));
            Arc::new(i)
        }
        None => image,
    }
}

/// `image` (an image or one of its revisions) with its root image's wire copy as the root
/// image, exported as `EXPORT~zstd`: while the copy is of the file as it is now.
pub fn wire_root(config: &Config, image: &Image) -> Option<Arc<Image>> {
    if image.root_wire != Wire::Zstd {
        return None;
    }
    let copy = copies::copy_of(&config.server.state_dir, &image.root_image(), Kind::Root)?;
    // The root image's name is taken inside the image's folder: a state_dir given relative
    // (a config named by a relative path) must not be.
    let copy = std::path::absolute(copy).ok()?;
    let mut w = image.clone();
    w.root_image_name = copy.to_string_lossy().into_owned();
    w.nbd_export = names::wire_copy(&image.nbd_export);
    Some(Arc::new(w))
}

/// A boot file name (`revs/ID/FILE`, the part after `IMAGE/`) as its revision of `image`,
/// if that revision is on disk; the image itself for any other name.
pub fn for_file(image: &Arc<Image>, file: &str) -> Arc<Image> {
    match names::revision_of(file) {
        Some(id) if store::managed(&image.dir) && store::rev_dir(&image.dir, id).is_dir() => {
            Arc::new(revision(image, id))
        }
        _ => image.clone(),
    }
}

/// The image an NBD export name `NAME@ID` selects: revision ID of the image exported as
/// NAME, if it is on disk.
pub fn nbd_revision(config: &Config, name: &str) -> Option<Arc<Image>> {
    let (export, id) = names::split_nbd(name)?;
    let image = config.images.values().find(|i| i.nbd_export == export)?;
    let r = revision(image, id);
    r.root_image().is_file().then(|| Arc::new(r))
}

/// A root name that carries a revision (an NFS MOUNT path `/EXPORT@ID[/...]`, or an NBD
/// export `NAME@ID`, its wire copy's `NAME@ID~zstd` too) of an image with revisions, where
/// that revision is not on disk: the image and the id, which a site's member asks the others
/// for (`image::demand`).
pub fn lacking(config: &Config, name: &str, root: RootProto) -> Option<(Arc<Image>, String)> {
    let absolute = |export: &str| format!("/{}", export.trim_start_matches('/'));
    let (image, id) = match root {
        RootProto::Nfs => {
            let (export, id) = names::split_nfs(name)?;
            let export = absolute(export);
            let image = config
                .images
                .values()
                .find(|i| absolute(&i.nfs_export) == export)?;
            (image, id)
        }
        RootProto::Nbd => {
            let name = name.strip_suffix(names::ROOT_SUFFIX).unwrap_or(name);
            let (export, id) = names::split_nbd(name)?;
            let image = config.images.values().find(|i| i.nbd_export == export)?;
            (image, id)
        }
    };
    (store::managed(&image.dir) && !store::rev_dir(&image.dir, id).is_dir())
        .then(|| (image.clone(), id.to_string()))
}

/// One NFS export of a revision: (export path, tree name `IMAGE@ID`, tree folder).
pub type NfsExport = (String, String, std::path::PathBuf);

/// Every revision of `image` on disk, as NFS exports.
pub fn nfs_exports(image: &Image) -> Vec<NfsExport> {
    store::list(&image.dir)
        .unwrap_or_default()
        .into_iter()
        .map(|r| nfs_export(image, &r.id))
        .collect()
}

fn nfs_export(image: &Image, id: &str) -> NfsExport {
    let r = revision(image, id);
    (
        r.nfs_export.clone(),
        names::at_revision(&image.name, id),
        r.root_tree(),
    )
}

/// The export a MOUNT path names if it is on disk but not yet in `known` (the tree's export
/// paths): a revision imported after the daemon started (`/EXPORT@ID[/...]`), or the image
/// (without revisions) of an NFS pool that a reload has added since (`/EXPORT[/...]`).
pub fn nfs_to_learn<'a>(
    config: &Config,
    path: &[u8],
    mut known: impl Iterator<Item = &'a str>,
) -> Option<NfsExport> {
    let path = std::str::from_utf8(path).ok()?;
    let absolute = |export: &str| format!("/{}", export.trim_start_matches('/'));
    let found = match names::split_nfs(path) {
        Some((export, id)) => {
            let export = absolute(export);
            let image = config
                .images
                .values()
                .find(|i| absolute(&i.nfs_export) == export && store::managed(&i.dir))?;
            nfs_export(image, id)
        }
        None => {
            let path = absolute(path);
            let image = config
                .pools
                .values()
                .filter(|p| p.root == RootProto::Nfs)
                .flat_map(|p| p.images())
                .find(|i| {
                    let export = absolute(&i.nfs_export);
                    !store::managed(&i.dir)
                        && (path == export || path.starts_with(&format!("{export}/")))
                })?;
            (
                image.nfs_export.clone(),
                image.name.clone(),
                image.root_tree(),
            )
        }
    };
    if known.any(|k| k == found.0) || !found.2.is_dir() {
        return None;
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_copy_is_named_absolutely_and_by_its_own_export_even_under_a_relative_state_dir() {
        // A config named by a relative path gives a relative state_dir; unit tests run in
        // the crate's folder, so a folder made there is named relatively.
        let tmp = tempfile::tempdir_in(".").unwrap();
        let cwd = std::env::current_dir().unwrap();
        let dir = tmp.path().strip_prefix(&cwd).unwrap();
        assert!(dir.is_relative(), "{}", dir.display());
        std::fs::create_dir_all(dir.join("img")).unwrap();
        for f in ["vmlinuz", "initrd.img", "rootfs.img"] {
            std::fs::write(dir.join("img").join(f), b"x").unwrap();
        }
        let text = "server: { address: 10.77.0.1, http: 0.0.0.0:8080, state_dir: var }
dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.101, lease: 1h }
images:
  demo: { dir: img, root_wire: zstd }
pools:
  room: { image: demo, root: nbd, clients: [ { macs: \"52:54:00:77:00:00-52:54:00:77:00:0f\" } ] }
";
        let config = Config::parse(&dir.join("pools.yaml"), text).unwrap();
        let image = &config.images["demo"];
        assert!(config.server.state_dir.is_relative());
        // No copy yet: the boot gets the image as it is.
        assert!(wire_root(&config, image).is_none());
        assert_eq!(for_boot(&config, image).nbd_export, "demo");
        let copy =
            copies::copy_name(&config.server.state_dir, &image.root_image(), Kind::Root).unwrap();
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        std::fs::write(&copy, b"zstd copy").unwrap();
        let boot = for_boot(&config, image);
        assert_eq!(boot.nbd_export, "demo~zstd");
        assert!(
            boot.root_image().is_absolute(),
            "{}",
            boot.root_image().display()
        );
        assert_eq!(std::fs::read(boot.root_image()).unwrap(), b"zstd copy");
        // The name resolves to it per attach, as the NBD service looks names up.
        let attached = crate::export::image::lookup(&config, "demo~zstd").unwrap();
        assert_eq!(attached.root_image(), boot.root_image());
        assert!(crate::export::image::lookup(&config, "other~zstd").is_none());
    }
}

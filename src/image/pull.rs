//! `bootpool image pull`: a revision another server holds becomes a revision here, by its
//! manifest (`manifest.rs`) and only the objects this image's store lacks, fetched by digest
//! over HTTP from the members given (`fetch.rs`, the routes of `service/http/revs.rs`). Each
//! object is hashed as it arrives and refused if it does not match (then fetched again, from
//! the next member if there is one); the tree is built in `DIR/.pull-PID/`, checked whole
//! against the manifest (every entry's metadata, every file's bytes read again), and renamed
//! into `revs/` only then, as an import is: a corrupt or truncated copy is never linked into
//! the store nor served.

use super::fetch::{self, Base, Got};
use super::manifest::{Entry, Kind, Manifest};
use super::manifest_delta;
use super::objects::{self, Stamp};
use super::progress::Progress;
use super::store::{self, Meta, Revision};
use crate::config::Image;
use anyhow::{Context as _, bail};
use sha2::{Digest as _, Sha256};
use std::collections::HashSet;
use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// A manifest larger than this is refused (a root of millions of files is some 100 MiB).
const MANIFEST_LIMIT: u64 = 1 << 30;

/// What to pull.
#[derive(Debug, Clone)]
pub struct Request {
    /// The revision's id (12 hex digits); `None`: the one the first member answering has
    /// active.
    pub rev: Option<String>,
    /// The members' base URLs (`http://HOST:PORT`), tried in order.
    pub from: Vec<String>,
    /// The read token the members ask (`server.read_token`), if any.
    pub token: Option<String>,
    /// Build the NBD root image: an NBD pool here serves the image.
    pub squashfs: bool,
}

/// What a pull moved and made.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Moved {
    /// The manifest's bytes.
    pub manifest_bytes: u64,
    /// Objects fetched and checked, and their bytes.
    pub fetched_files: u64,
    pub fetched_bytes: u64,
    /// Copies refused (a wrong digest, a short body, a failed request) and the bytes they
    /// moved.
    pub refused: u64,
    pub refused_bytes: u64,
    /// Files linked to an object the store held, and files whose bytes the store held under
    /// other metadata (copied here, not fetched).
    pub linked_files: u64,
    pub copied_files: u64,
}

impl Moved {
    /// Every body byte that arrived.
    pub fn total(&self) -> u64 {
        self.manifest_bytes + self.fetched_bytes + self.refused_bytes
    }

    pub fn sentence(&self) -> String {
        format!(
            "{} byte(s) moved: {} file(s) fetched ({} bytes), the manifest ({} bytes), {} \
             copy(ies) refused ({} bytes); {} file(s) linked to objects held here, {} copied \
             from bytes held here",
            self.total(),
            self.fetched_files,
            self.fetched_bytes,
            self.manifest_bytes,
            self.refused,
            self.refused_bytes,
            self.linked_files,
            self.copied_files
        )
    }
}

/// What a pull made.
#[derive(Debug)]
pub struct Pulled {
    pub revision: Revision,
    /// False when the revision was here already (only its manifest moved).
    pub new: bool,
    pub moved: Moved,
    /// The member whose manifest was taken.
    pub from: String,
}

/// Pulls `req` into `image`'s folder as a revision (not activated).
pub fn pull(image: &Image, req: &Request) -> anyhow::Result<Pulled> {
    let bases = req
        .from
        .iter()
        .map(|u| Base::parse(u))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if bases.is_empty() {
        bail!("a pull needs a member to pull from (--from URL)");
    }
    let mut moved = Moved::default();
    let (m, first) = manifest(image, req, &bases, &mut moved)?;
    let id = store::id_of(&m.revision);
    let dir = &image.dir;
    let _lock = store::lock(dir)?;
    if let Some(have) = store::read(dir, &id)? {
        return Ok(Pulled {
            revision: have,
            new: false,
            moved,
            from: bases[first].shown.clone(),
        });
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(".pull-") {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let tmp = dir.join(format!(".pull-{}", std::process::id()));
    std::fs::create_dir(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut puller = Puller {
        image,
        bases: &bases,
        first,
        token: req.token.as_deref(),
        moved,
    };
    let out = puller.build(&m, &tmp).and_then(|()| {
        if req.squashfs {
            super::import::squashfs(
                &tmp.join(&image.root_tree_name),
                &tmp.join(&image.root_image_name),
            )?;
        }
        super::inventory::write(&tmp, &m)?;
        let tree = m.tree.as_bytes();
        let in_tree = |e: &&Entry| {
            e.path
                .strip_prefix(tree)
                .is_some_and(|r| r.first() == Some(&b'/'))
        };
        let meta = Meta {
            seq: 0,
            hash: m.revision.clone(),
            source: format!("pulled from {}", bases[first].shown),
            format: "pulled".into(),
            imported_at: store::now(),
            tree_bytes: m.entries.iter().filter(in_tree).map(|e| e.size).sum(),
            entries: m.entries.iter().filter(in_tree).count() as u64,
        };
        super::import::publish(image, &tmp, meta, &m.revision)
    });
    if tmp.exists() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    if !out.as_ref().is_ok_and(|d| d.new) {
        // What this pull stored for a revision that is not kept: no tree links it.
        let _ = objects::sweep(dir);
    }
    let done = out?;
    Ok(Pulled {
        revision: done.revision,
        new: done.new,
        moved: puller.moved,
        from: bases[first].shown.clone(),
    })
}

/// The manifest from the first member that answers with a good one, and which member.
pub(super) fn manifest(
    image: &Image,
    req: &Request,
    bases: &[Base],
    moved: &mut Moved,
) -> anyhow::Result<(Manifest, usize)> {
    let rev = req.rev.as_deref().unwrap_or("active");
    if rev != "active" && !crate::config::names::is_id(rev) {
        bail!(
            "--rev `{rev}` is not a revision id (12 hex digits; `bootpool image list` on the member shows them)"
        );
    }
    // A revision held here: members that hold it too send the manifest as its difference
    // from that one's, a line per changed file (`manifest_delta`).
    let held = held_manifest(image);
    let path = match &held {
        Some((id, _)) => format!(
            "/api/v1/images/{}/revs/{rev}/manifest?base={id}",
            image.name
        ),
        None => format!("/api/v1/images/{}/revs/{rev}/manifest", image.name),
    };
    let mut said = Vec::new();
    for (i, base) in bases.iter().enumerate() {
        let mut text = Vec::new();
        match fetch::get(base, &path, req.token.as_deref(), MANIFEST_LIMIT, &mut text) {
            Ok(Got::Body(n)) => {
                moved.manifest_bytes += n;
                let text = match (&held, manifest_delta::is_delta(&text)) {
                    (Some((_, of_held)), true) => match manifest_delta::apply(of_held, &text) {
                        Ok(whole) => whole,
                        Err(e) => {
                            said.push(format!("{}: a bad manifest delta: {e:#}", base.shown));
                            continue;
                        }
                    },
                    _ => text,
                };
                match Manifest::decode(&text) {
                    Ok(m) if (m.kernel.as_str(), m.initrd.as_str(), m.tree.as_str())
                        == (image.kernel_name.as_str(), image.initrd_name.as_str(), image.root_tree_name.as_str()) =>
                    {
                        return Ok((m, i));
                    }
                    Ok(m) => said.push(format!(
                        "{}: its image names its files {}, {}, {} where this config says {}, {}, {}",
                        base.shown, m.kernel, m.initrd, m.tree, image.kernel_name, image.initrd_name, image.root_tree_name
                    )),
                    Err(e) => said.push(format!("{}: a bad manifest: {e:#}", base.shown)),
                }
            }
            Ok(Got::Status(s, text)) => said.push(format!("{}: {s} {text}", base.shown)),
            Err(e) => said.push(format!("{e:#}")),
        }
    }
    bail!(
        "image {}: no member gave revision {rev}'s manifest:\n  {}",
        image.name,
        said.join("\n  ")
    )
}

/// The manifest of a revision held here, to be sent differences from: the active one, else
/// the newest; none when the image holds none (or its manifest cannot be read).
fn held_manifest(image: &Image) -> Option<(String, Vec<u8>)> {
    let id = match store::active(&image.dir).ok().flatten() {
        Some(id) => id,
        None => store::list(&image.dir).ok()?.last()?.id.clone(),
    };
    let text = super::inventory::of_revision(image, &id).ok()?;
    Some((id, text))
}

pub(super) struct Puller<'a> {
    pub(super) image: &'a Image,
    pub(super) bases: &'a [Base],
    /// The member to ask first.
    pub(super) first: usize,
    pub(super) token: Option<&'a str>,
    pub(super) moved: Moved,
}

impl Puller<'_> {
    /// Makes every entry of `m` in `tmp`, then checks the whole against `m`.
    fn build(&mut self, m: &Manifest, tmp: &Path) -> anyhow::Result<()> {
        let dir = &self.image.dir;
        // The folders an entry may be made in: the revision's folder, those of the config's
        // names, and the manifest's own folders as they are made (never through a symlink).
        let mut folders: HashSet<Vec<u8>> = HashSet::from([Vec::new()]);
        for name in [&m.kernel, &m.initrd, &m.tree] {
            let mut at = Vec::new();
            for c in name
                .split('/')
                .collect::<Vec<_>>()
                .split_last()
                .map_or(&[][..], |s| s.1)
            {
                at = match at.is_empty() {
                    true => c.as_bytes().to_vec(),
                    false => [&at[..], b"/", c.as_bytes()].concat(),
                };
                std::fs::create_dir_all(tmp.join(std::ffi::OsStr::from_bytes(&at)))?;
                folders.insert(at.clone());
            }
        }
        let tree = m.tree.as_bytes();
        let to_fetch: HashSet<[u8; 32]> = m
            .entries
            .iter()
            .filter_map(|e| match e.kind {
                Kind::File(d) if objects::find(dir, &d).is_none() => Some(d),
                _ => None,
            })
            .collect();
        let total: u64 = to_fetch
            .iter()
            .filter_map(|d| m.entries.iter().find(|e| e.kind == Kind::File(*d)))
            .map(|e| e.size)
            .sum();
        eprintln!(
            "pull: revision {} from {}: {} entries, {} file(s) to fetch ({total} bytes)",
            store::id_of(&m.revision),
            self.bases[self.first].shown,
            m.entries.len(),
            to_fetch.len()
        );
        let mut bar = Progress::new("pulling", Some(total));
        let mut dirs = Vec::new();
        for e in &m.entries {
            let shown = String::from_utf8_lossy(&e.path).into_owned();
            let ours = e.path == m.kernel.as_bytes()
                || e.path == m.initrd.as_bytes()
                || e.path == tree
                || e.path
                    .strip_prefix(tree)
                    .is_some_and(|r| r.first() == Some(&b'/'));
            let parent = e.path[..e.path.iter().rposition(|c| *c == b'/').unwrap_or(0)].to_vec();
            if !ours || !folders.contains(&parent) {
                bail!("the manifest's entry {shown} is not inside a folder it names");
            }
            // As an import refuses them (`unpack::stray_device`): a device node outside the
            // tree's /dev.
            let in_dev = [tree, b"/dev/"].concat();
            if matches!(e.kind, Kind::Char(_) | Kind::Block(_)) && !e.path.starts_with(&in_dev) {
                bail!(
                    "the manifest's entry {shown} is a device node outside /dev (an image holds none there)"
                );
            }
            let path = tmp.join(std::ffi::OsStr::from_bytes(&e.path));
            match &e.kind {
                Kind::Dir => {
                    std::fs::create_dir(&path).with_context(|| format!("creating {shown}"))?;
                    folders.insert(e.path.clone());
                    dirs.push((path, e));
                    continue;
                }
                Kind::File(d) => self.file(e, d, &path, &shown, &mut bar)?,
                Kind::Symlink(t) => {
                    std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(t), &path)
                        .with_context(|| format!("making the symlink {shown}"))?
                }
                Kind::Char(r) | Kind::Block(r) => {
                    let t = if matches!(e.kind, Kind::Char(_)) {
                        libc::S_IFCHR
                    } else {
                        libc::S_IFBLK
                    };
                    crate::sys::fs::mknod(&c_path(&path)?, t | e.mode, *r)
                        .with_context(|| format!("making the device {shown}"))?
                }
                Kind::Fifo => crate::sys::fs::mkfifo(&c_path(&path)?, e.mode)
                    .with_context(|| format!("making the fifo {shown}"))?,
                Kind::Socket => crate::sys::fs::mknod(&c_path(&path)?, libc::S_IFSOCK | e.mode, 0)
                    .with_context(|| format!("making the socket {shown}"))?,
            }
            if !matches!(e.kind, Kind::File(_)) {
                stamp(&path, e)
                    .with_context(|| format!("setting {shown}'s owner, mode and time"))?;
            }
        }
        bar.finish();
        // Folders last, the deepest first: making their entries changed their mtimes.
        for (path, e) in dirs.iter().rev() {
            stamp(path, e)
                .with_context(|| format!("setting {}'s owner, mode and time", path.display()))?;
        }
        eprintln!("pull: checking the revision against its manifest");
        let made = super::inventory::walk(self.image, tmp, &m.revision, &mut |p| {
            objects::file_digest(p)
        })?;
        if let Some((got, want)) = made.entries.iter().zip(&m.entries).find(|(a, b)| a != b) {
            bail!(
                "the pulled {} is not as the manifest says (made {got:?}, the manifest has {want:?}); nothing pulled",
                String::from_utf8_lossy(&want.path)
            );
        }
        if made.entries.len() != m.entries.len() {
            bail!(
                "the pulled revision has {} entries, its manifest {}; nothing pulled",
                made.entries.len(),
                m.entries.len()
            );
        }
        Ok(())
    }

    /// Makes the regular file `e` at `path`: a link to its object, a copy of bytes the store
    /// holds under other metadata, or its bytes fetched and checked; then puts it in the
    /// store.
    fn file(
        &mut self,
        e: &Entry,
        d: &[u8; 32],
        path: &Path,
        shown: &str,
        bar: &mut Progress,
    ) -> anyhow::Result<()> {
        let dir = &self.image.dir;
        let s = Stamp {
            mode: libc::S_IFREG | e.mode,
            uid: e.uid,
            gid: e.gid,
            mtime: e.mtime,
            mtime_nsec: e.mtime_nsec,
        };
        let object = objects::object_path_of(dir, d, &s);
        if object.is_file() {
            match std::fs::hard_link(&object, path) {
                Ok(()) => {
                    self.moved.linked_files += 1;
                    return Ok(());
                }
                Err(err) if err.raw_os_error() == Some(libc::EMLINK) => {}
                Err(err) => return Err(err).with_context(|| format!("linking {shown}")),
            }
        }
        match objects::find(dir, d) {
            Some(held) => {
                let mut out = Hashing::create(path)?;
                let mut input = std::fs::File::open(&held)
                    .with_context(|| format!("reading {}", held.display()))?;
                std::io::copy(&mut input, &mut out)?;
                if out.finish()? != *d {
                    bail!(
                        "{}: the store's object does not hold its digest's bytes (changed in place?)",
                        held.display()
                    );
                }
                self.moved.copied_files += 1;
            }
            None => self.fetch(e, d, path, shown, bar)?,
        }
        stamp(path, e).with_context(|| format!("setting {shown}'s owner, mode and time"))?;
        let m = std::fs::symlink_metadata(path)?;
        objects::put(dir, path, &m, d)?;
        Ok(())
    }

    /// Fetches `e`'s bytes into `path`, checked against `d`: the first member first, then
    /// the others, twice round; refused copies are counted and never kept.
    pub(super) fn fetch(
        &mut self,
        e: &Entry,
        d: &[u8; 32],
        path: &Path,
        shown: &str,
        bar: &mut Progress,
    ) -> anyhow::Result<()> {
        let hex = objects::hex(d);
        let url = format!("/api/v1/images/{}/objects/sha256/{hex}", self.image.name);
        let n = self.bases.len();
        let mut said = Vec::new();
        for attempt in 0..2 * n {
            let base = &self.bases[(self.first + attempt) % n];
            let mut out = Hashing::create(path)?;
            let got = fetch::get(base, &url, self.token, e.size, &mut out);
            let arrived = out.len;
            let digest = out.finish()?;
            let why = match got {
                Ok(Got::Body(b)) if b == e.size && digest == *d => {
                    self.moved.fetched_files += 1;
                    self.moved.fetched_bytes += b;
                    bar.show(self.moved.fetched_bytes);
                    return Ok(());
                }
                Ok(Got::Body(b)) if b != e.size => format!("{b} bytes, not {}", e.size),
                Ok(Got::Body(_)) => format!(
                    "its bytes hash to {}, not its digest",
                    objects::hex(&digest)
                ),
                Ok(Got::Status(s, text)) => format!("{s} {text}"),
                Err(err) => format!("{err:#}"),
            };
            self.moved.refused += 1;
            self.moved.refused_bytes += arrived;
            eprintln!(
                "pull: {}: {shown} (object {hex}) refused: {why}",
                base.shown
            );
            said.push(format!("{}: {why}", base.shown));
        }
        let _ = std::fs::remove_file(path);
        bail!(
            "{shown} (object {hex}): no member gave its bytes:\n  {}",
            said.join("\n  ")
        )
    }
}

/// Sets `e`'s owner (first: chown clears set-id bits), mode (not a symlink's) and times on
/// `path`.
pub(super) fn stamp(path: &Path, e: &Entry) -> anyhow::Result<()> {
    std::os::unix::fs::lchown(path, Some(e.uid), Some(e.gid))?;
    if !matches!(e.kind, Kind::Symlink(_)) {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(e.mode))?;
    }
    let t = libc::timespec {
        tv_sec: e.mtime,
        tv_nsec: e.mtime_nsec,
    };
    crate::sys::fs::set_times_nofollow(&c_path(path)?, t, t)?;
    Ok(())
}

fn c_path(path: &Path) -> anyhow::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).context("a path with a NUL byte")
}

/// A new file that hashes what is written to it.
struct Hashing {
    file: std::fs::File,
    h: Sha256,
    len: u64,
}

impl Hashing {
    fn create(path: &Path) -> anyhow::Result<Hashing> {
        let file =
            std::fs::File::create(path).with_context(|| format!("writing {}", path.display()))?;
        Ok(Hashing {
            file,
            h: Sha256::new(),
            len: 0,
        })
    }

    /// The digest of what was written (the build folder is synced whole before it is
    /// published).
    fn finish(mut self) -> anyhow::Result<[u8; 32]> {
        self.file.flush()?;
        Ok(self.h.finalize().into())
    }
}

impl Write for Hashing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.h.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

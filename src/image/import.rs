//! `bootpool image import`: a root tree (a folder), a root tarball (plain, gzip, xz, zstd,
//! bzip2) or an OCI image (an archive from `docker save`/`podman save`, or an OCI layout
//! folder or archive) becomes a new revision: the tree for NFS, its squashfs image for NBD,
//! the kernel and initrd, named by the content hash. Everything is built in `DIR/.import-PID/`
//! (the same filesystem) and renamed into `DIR/revs/ID/` only when whole, so nothing
//! half-written is ever served and a failed import leaves the revisions as they were.

use super::blocks_file;
use super::objects::{self, Put};
use super::progress::Progress;
use super::store::{self, Meta, Revision};
use super::unpack::{self, Mode};
use crate::config::Image;
use anyhow::{Context as _, bail};
use sha2::{Digest as _, Sha256};
use std::io::{BufReader, Read};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What to import.
#[derive(Debug, Clone)]
pub struct Request {
    pub from: PathBuf,
    /// A kernel and initrd on the host, instead of the tree's `/boot`.
    pub kernel: Option<PathBuf>,
    pub initrd: Option<PathBuf>,
    /// Build the NBD root image (the tree as squashfs): an NBD pool serves the image
    /// (`serve::nbd_served`). Without it the revision has none until one is asked for
    /// (`root_image`).
    pub squashfs: bool,
    /// What `image list` shows as the source (default: the source's path).
    pub source: Option<String>,
}

/// What an import made.
#[derive(Debug)]
pub struct Imported {
    pub revision: Revision,
    /// False when a revision with the same content was already there (nothing was added).
    pub new: bool,
    /// What the image's store got of it.
    pub stored: Stored,
}

/// The regular files of an import, by what the store made of them (`objects::Put`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub shared_files: u64,
    pub shared_bytes: u64,
    pub added_files: u64,
    pub added_bytes: u64,
    /// Files kept as copies of their own (extended attributes).
    pub own_files: u64,
}

impl Stored {
    fn count(&mut self, put: Put, bytes: u64) {
        let (files, b) = match put {
            Put::Shared => (&mut self.shared_files, &mut self.shared_bytes),
            Put::Added => (&mut self.added_files, &mut self.added_bytes),
            Put::Own => (&mut self.own_files, &mut self.added_bytes),
        };
        *files += 1;
        *b += bytes;
    }

    /// `3 file(s) stored anew (12 MiB), 4012 linked to files already stored (1.1 GiB)`.
    pub fn sentence(&self) -> String {
        format!(
            "{} file(s) stored anew ({}), {} linked to files already stored ({})",
            self.added_files + self.own_files,
            size(self.added_bytes),
            self.shared_files,
            size(self.shared_bytes)
        )
    }
}

/// `12 KiB`, `3 MiB`, `1.2 GiB`.
fn size(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b => format!("{} KiB", b.div_ceil(1024)),
    }
}

/// Imports `req` into `image`'s folder as a new revision (not activated), if it has an init
/// (`bootable::check`).
pub fn import(image: &Image, req: &Request) -> anyhow::Result<Imported> {
    import_for(image, req, &[])
}

/// `import`, refusing a revision whose initrd cannot boot the pools `needs` describes
/// (`bootable::needs`: the pools booting the image).
pub fn import_for(
    image: &Image,
    req: &Request,
    needs: &[super::bootable::Need],
) -> anyhow::Result<Imported> {
    let dir = &image.dir;
    let _lock = store::lock(dir)?;
    // Leftovers of an import that was killed: ours to clear while we hold the lock.
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(".import-") {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let tmp = dir.join(format!(".import-{}", std::process::id()));
    std::fs::create_dir(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let result = build(image, req, &tmp, needs);
    let out = result.and_then(|(meta, hash, stored)| {
        let mut done = publish(image, &tmp, meta, &hash)?;
        done.stored = stored;
        Ok(done)
    });
    if tmp.exists() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    if !out.as_ref().is_ok_and(|d| d.new) {
        // What this import stored for a revision that is not kept (it failed, or its content
        // was there already): the objects no tree links.
        let _ = objects::sweep(dir);
    }
    out
}

/// Builds the revision in `tmp`, its files linked to the image's store once it is known to
/// boot; returns its record (seq still 0), hash, and what the store got.
fn build(
    image: &Image,
    req: &Request,
    tmp: &Path,
    needs: &[super::bootable::Need],
) -> anyhow::Result<(Meta, String, Stored)> {
    let tree = tmp.join(&image.root_tree_name);
    if let Some(p) = tree.parent() {
        std::fs::create_dir_all(p)?;
    }
    let mut stored = Stored::default();
    // The digests of the files already put in the store (a folder source's).
    let mut known = Known::new();
    let from = &req.from;
    let shown = from.display().to_string();
    let meta = std::fs::metadata(from).with_context(|| format!("--from {shown}"))?;
    let format = if meta.is_dir() {
        if from.join("oci-layout").is_file() {
            std::fs::create_dir(&tree)?;
            oci(from, &tree, &shown)?;
            "oci"
        } else {
            copy_tree(from, &tree)?;
            known = fill_tree(from, &tree, &image.dir, &mut stored)?;
            "tree"
        }
    } else {
        // An OCI archive is a tar holding an OCI layout or docker's manifest.json.
        let names = reading(from, &shown, |i| unpack::names(i, &shown))?;
        let has = |n: &str| names.iter().any(|(p, _)| p == Path::new(n));
        if has("manifest.json") || (has("oci-layout") && has("index.json")) {
            let outer = tmp.join(".oci");
            std::fs::create_dir(&outer)?;
            let mut bar = Progress::new("unpacking the archive", Some(meta.len()));
            reading(from, &shown, |i| {
                unpack::unpack(i, &outer, Mode::Plain, &shown, &mut |n| bar.show(n))
            })?;
            bar.finish();
            std::fs::create_dir(&tree)?;
            oci(&outer, &tree, &shown)?;
            std::fs::remove_dir_all(&outer)?;
            "oci"
        } else {
            std::fs::create_dir(&tree)?;
            let total: u64 = names.iter().map(|(_, s)| s).sum();
            let mut bar = Progress::new("unpacking the root tarball", Some(total));
            reading(from, &shown, |i| {
                unpack::unpack(i, &tree, Mode::Plain, &shown, &mut |n| bar.show(n))
            })?;
            bar.finish();
            "tarball"
        }
    };
    // The kernel and initrd: given, or the tree's /boot.
    let (kernel, initrd) = match (&req.kernel, &req.initrd) {
        (Some(k), Some(i)) => (k.clone(), i.clone()),
        (k, i) => {
            let (fk, fi) = find_boot(&tree).with_context(|| {
                format!(
                    "{shown}: {}",
                    "no kernel and initrd found in the tree's /boot"
                )
            })?;
            (k.clone().unwrap_or(fk), i.clone().unwrap_or(fi))
        }
    };
    for (what, src, name) in [
        ("kernel", &kernel, &image.kernel_name),
        ("initrd", &initrd, &image.initrd_name),
    ] {
        let dest = tmp.join(name);
        if let Some(p) = dest.parent() {
            std::fs::create_dir_all(p)?;
        }
        std::fs::copy(src, &dest)
            .with_context(|| format!("copying the {what} {}", src.display()))?;
        // Its mtime too, so it is the same object as the tree's /boot file it came from.
        if let Ok(t) = std::fs::metadata(src).and_then(|m| m.modified()) {
            std::fs::File::options()
                .write(true)
                .open(&dest)?
                .set_modified(t)?;
        }
    }
    super::bootable::check(&tree, &tmp.join(&image.initrd_name), needs)
        .with_context(|| format!("{shown} cannot boot; nothing imported"))?;
    eprintln!("import: hashing the tree and linking its files to the image's store");
    let summary = hash_tree(&tree, Some((&image.dir, &mut stored, &known)))?;
    let mut h = Sha256::new();
    h.update(summary.hash);
    for name in [&image.kernel_name, &image.initrd_name] {
        h.update(name.as_bytes());
        h.update([0]);
        let path = tmp.join(name);
        let digest = file_digest(&path)?;
        h.update(digest);
        let m = std::fs::symlink_metadata(&path)?;
        stored.count(objects::put(&image.dir, &path, &m, &digest)?, m.len());
    }
    let hash = hex(&h.finalize());
    // The manifest beside the revision (what a server pulling it reads), from the digests
    // just taken.
    let in_tree = tmp.join(&image.root_tree_name);
    let manifest = super::inventory::walk(image, tmp, &hash, &mut |p| match p
        .strip_prefix(&in_tree)
        .ok()
        .and_then(|r| summary.digests.get(r))
    {
        Some(d) => Ok(*d),
        None => file_digest(p),
    })?;
    if manifest.content_hash()? != hash {
        bail!("{shown}: the tree changed while it was imported; nothing imported");
    }
    super::inventory::write(tmp, &manifest)?;
    let id = store::id_of(&hash);
    if req.squashfs && store::read(&image.dir, &id)?.is_none() {
        squashfs(&tree, &tmp.join(&image.root_image_name))?;
    }
    let meta = Meta {
        seq: 0,
        hash: hash.clone(),
        source: req.source.clone().unwrap_or_else(|| {
            std::fs::canonicalize(from)
                .unwrap_or_else(|_| from.clone())
                .display()
                .to_string()
        }),
        format: format.to_string(),
        imported_at: store::now(),
        tree_bytes: summary.bytes,
        entries: summary.entries,
    };
    Ok((meta, hash, stored))
}

/// Moves the finished revision into `revs/`, unless the same content is there already.
pub(super) fn publish(
    image: &Image,
    tmp: &Path,
    mut meta: Meta,
    hash: &str,
) -> anyhow::Result<Imported> {
    let dir = &image.dir;
    let id = store::id_of(hash);
    if let Some(existing) = store::read(dir, &id)? {
        return Ok(Imported {
            revision: existing,
            new: false,
            stored: Stored::default(),
        });
    }
    meta.seq = store::list(dir)?
        .iter()
        .map(|r| r.meta.seq)
        .max()
        .unwrap_or(0)
        + 1;
    std::fs::write(tmp.join(store::META), serde_json::to_vec_pretty(&meta)?)?;
    let _ = std::fs::remove_dir_all(tmp.join(".oci"));
    let revs = dir.join(crate::config::names::REVS);
    std::fs::create_dir_all(&revs)?;
    // Everything on disk before the rename makes it visible.
    Command::new("sync").arg("-f").arg(tmp).status().ok();
    std::fs::rename(tmp, revs.join(&id))
        .with_context(|| format!("moving the revision into {}", revs.display()))?;
    Ok(Imported {
        revision: Revision { id, meta },
        new: true,
        stored: Stored::default(),
    })
}

/// A folder source's entries, copied with everything they hold but the bytes of regular
/// files (owners, modes, times, links, hard links, xattrs) by `cp -a --attributes-only`;
/// `fill_tree` gives each file its bytes.
fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    eprintln!("import: copying {}", from.display());
    let out = Command::new("cp")
        .args(["-a", "--attributes-only", "--no-target-directory"])
        .arg(from)
        .arg(to)
        .stderr(Stdio::piped())
        .output()
        .context("running cp")?;
    if !out.status.success() {
        bail!(
            "copying {}: cp failed: {}",
            from.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The content digests of a tree's regular files already put in the store, by path in the
/// tree.
type Known = std::collections::HashMap<PathBuf, [u8; 32]>;

/// Gives each (empty) regular file of `to`, copied by `copy_tree`, its bytes from `from`:
/// a link to the store's object when the store holds the file already (its bytes are only
/// read, to hash them), else the bytes, and the file becomes an object. So an import of a
/// tree that differs from an earlier revision by a few files writes about those files.
fn fill_tree(from: &Path, to: &Path, dir: &Path, stored: &mut Stored) -> anyhow::Result<Known> {
    let mut known = Known::new();
    let mut stack = vec![PathBuf::new()];
    let mut bar = Progress::new("reading", None);
    let mut read = 0u64;
    while let Some(rel) = stack.pop() {
        let here = to.join(&rel);
        for e in std::fs::read_dir(&here).with_context(|| format!("reading {}", here.display()))? {
            let r = rel.join(e?.file_name());
            let dest = to.join(&r);
            let m = std::fs::symlink_metadata(&dest)?;
            if m.is_dir() {
                stack.push(r);
                continue;
            }
            if !m.is_file() {
                continue;
            }
            let src = from.join(&r);
            let digest = file_digest(&src)?;
            read += std::fs::metadata(&src).map_or(0, |m| m.len());
            bar.show(read);
            let object = objects::object_path(dir, &digest, &m);
            let put = if std::fs::symlink_metadata(&object).is_ok() {
                objects::put(dir, &dest, &m, &digest)?
            } else {
                Put::Own
            };
            let put = match put {
                Put::Shared => Put::Shared,
                // Not stored yet, or not to be (xattrs, too many links): its bytes.
                _ => {
                    fill(&src, &dest, &m)?;
                    let m = std::fs::symlink_metadata(&dest)?;
                    objects::put(dir, &dest, &m, &digest)?
                }
            };
            stored.count(put, m.len().max(std::fs::metadata(&dest)?.len()));
            known.insert(r, digest);
        }
    }
    bar.finish();
    Ok(known)
}

/// Writes `src`'s bytes into `dest` (a file of the tree that `cp --attributes-only` made, or
/// one a hard link of it filled already) and puts its mode and mtime back as `m` has them.
fn fill(src: &Path, dest: &Path, m: &std::fs::Metadata) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let len = std::fs::metadata(src)?.len();
    if m.len() == len && len > 0 {
        return Ok(()); // a hard link of a file filled already
    }
    let mut input =
        std::fs::File::open(src).with_context(|| format!("reading {}", src.display()))?;
    let mut out = std::fs::File::options()
        .write(true)
        .truncate(true)
        .open(dest)
        .with_context(|| format!("writing {}", dest.display()))?;
    std::io::copy(&mut input, &mut out).with_context(|| format!("copying {}", src.display()))?;
    out.set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o7777))?;
    out.set_modified(m.modified()?)?;
    Ok(())
}

/// An input file, decompressed by the system's own tool when its magic says it is
/// compressed.
struct Input {
    reader: Box<dyn Read>,
    child: Option<std::process::Child>,
}

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.reader.read(buf)
    }
}

impl Input {
    /// The decompressor's verdict: a damaged stream is a broken archive.
    fn finish(&mut self, what: &str) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let _ = std::io::copy(&mut self.reader, &mut std::io::sink());
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let status = child.wait()?;
        if !status.success() {
            bail!("{what}: broken archive: {}", err.trim());
        }
        Ok(())
    }
}

impl Drop for Input {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Reads the archive at `path` with `f`, decompressed if need be. A decompressor that fails
/// makes the error a broken archive, whatever `f` made of the bytes it got.
fn reading<T>(
    path: &Path,
    what: &str,
    f: impl FnOnce(&mut dyn Read) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut input = open(path)?;
    let got = f(&mut input);
    let finished = input.finish(what);
    match (got, finished) {
        (_, Err(e)) => Err(e),
        (got, Ok(())) => got,
    }
}

fn open(path: &Path) -> anyhow::Result<Input> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut magic = [0u8; 6];
    let n = f.read(&mut magic)?;
    let tool = match &magic[..n] {
        [0x1f, 0x8b, ..] => Some("gzip"),
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Some("zstd"),
        [0xfd, b'7', b'z', b'X', b'Z', 0] => Some("xz"),
        [b'B', b'Z', b'h', ..] => Some("bzip2"),
        _ => None,
    };
    let Some(tool) = tool else {
        let f = std::fs::File::open(path)?;
        return Ok(Input {
            reader: Box::new(BufReader::with_capacity(1 << 20, f)),
            child: None,
        });
    };
    let mut child = Command::new(tool)
        .arg("-dc")
        .arg(path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| {
            format!(
                "{}: is compressed with {tool}, which cannot run",
                path.display()
            )
        })?;
    let out = child.stdout.take().context("decompressor output")?;
    Ok(Input {
        reader: Box::new(BufReader::with_capacity(1 << 20, out)),
        child: Some(child),
    })
}

/// Applies an OCI image's layers, in order, from an unpacked layout or docker archive.
fn oci(root: &Path, tree: &Path, shown: &str) -> anyhow::Result<()> {
    let layers = layers(root, shown)?;
    let n = layers.len();
    for (i, (path, digest)) in layers.into_iter().enumerate() {
        let what = format!("{shown}: layer {} of {n}", i + 1);
        if let Some(d) = &digest {
            check_digest(&path, d).with_context(|| what.clone())?;
        }
        let size = std::fs::metadata(&path).map(|m| m.len()).ok();
        let mut bar = Progress::new(&format!("applying layer {} of {n}", i + 1), size);
        reading(&path, &what, |i| {
            unpack::unpack(i, tree, Mode::Layer, &what, &mut |b| bar.show(b))
        })?;
        bar.finish();
    }
    Ok(())
}

/// The layer files of an image, bottom first, with the digest each must have.
fn layers(root: &Path, shown: &str) -> anyhow::Result<Vec<(PathBuf, Option<String>)>> {
    let json = |p: &Path| -> anyhow::Result<serde_json::Value> {
        let text =
            std::fs::read(p).with_context(|| format!("{shown}: reading {}", rel(root, p)))?;
        serde_json::from_slice(&text)
            .with_context(|| format!("{shown}: {} is not JSON", rel(root, p)))
    };
    let docker = root.join("manifest.json");
    if docker.is_file() {
        let m = json(&docker)?;
        let first = m
            .as_array()
            .and_then(|a| a.first())
            .context(format!("{shown}: manifest.json lists no image"))?;
        let list = first["Layers"]
            .as_array()
            .context(format!("{shown}: manifest.json: the image has no `Layers`"))?;
        return list
            .iter()
            .map(|l| {
                let name = l
                    .as_str()
                    .context(format!("{shown}: manifest.json: a layer is not a path"))?;
                Ok((within(root, name, shown)?, None))
            })
            .collect();
    }
    let index = json(&root.join("index.json"))?;
    let mut desc = index["manifests"]
        .as_array()
        .and_then(|a| a.first())
        .cloned()
        .context(format!("{shown}: index.json lists no manifest"))?;
    // An index may name an index (several platforms): take linux/amd64, else the first.
    for _ in 0..4 {
        let digest = desc["digest"].as_str().unwrap_or_default().to_string();
        let path = blob(root, &digest, shown)?;
        check_digest(&path, &digest)?;
        let m = json(&path)?;
        if let Some(ms) = m["manifests"].as_array() {
            desc = ms
                .iter()
                .find(|d| {
                    d["platform"]["architecture"] == "amd64" && d["platform"]["os"] == "linux"
                })
                .or(ms.first())
                .cloned()
                .context(format!("{shown}: an image index lists no manifest"))?;
            continue;
        }
        let list = m["layers"]
            .as_array()
            .context(format!("{shown}: manifest {digest} has no `layers`"))?;
        return list
            .iter()
            .map(|l| {
                let d = l["digest"].as_str().unwrap_or_default().to_string();
                Ok((blob(root, &d, shown)?, Some(d)))
            })
            .collect();
    }
    bail!("{shown}: image indexes nested too deep")
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// `blobs/ALG/HEX` of a digest, inside the layout.
fn blob(root: &Path, digest: &str, shown: &str) -> anyhow::Result<PathBuf> {
    let Some((alg, hex)) = digest.split_once(':') else {
        bail!("{shown}: `{digest}` is not a digest");
    };
    if alg != "sha256" || hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("{shown}: digest `{digest}` is not sha256 (the one algorithm taken)");
    }
    within(root, &format!("blobs/{alg}/{hex}"), shown)
}

/// A path named by a manifest, which must be a file inside the layout.
fn within(root: &Path, name: &str, shown: &str) -> anyhow::Result<PathBuf> {
    let p = root.join(unpack::inside(name.as_bytes()).with_context(|| {
        format!("{shown}: manifest names `{name}`: a path escaping the archive")
    })?);
    let real = std::fs::canonicalize(&p)
        .with_context(|| format!("{shown}: the archive has no `{name}` (a broken archive)"))?;
    let top = std::fs::canonicalize(root)?;
    if !real.starts_with(&top) || !real.is_file() {
        bail!("{shown}: `{name}` is not a file inside the archive");
    }
    Ok(real)
}

fn check_digest(path: &Path, digest: &str) -> anyhow::Result<()> {
    let want = digest.strip_prefix("sha256:").unwrap_or(digest);
    let mut h = Sha256::new();
    let mut f = std::fs::File::open(path)?;
    std::io::copy(&mut f, &mut HashWriter(&mut h))?;
    let got = hex(&h.finalize());
    if got != want {
        bail!("blob {digest} has sha256 {got}: a broken archive");
    }
    Ok(())
}

/// The tree's newest kernel in `/boot` (`vmlinuz-VERSION`) and its initrd
/// (`initrd.img-VERSION`, `initramfs-VERSION.img` or `initrd-VERSION`).
pub fn find_boot(tree: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let boot = tree.join("boot");
    let mut kernels: Vec<(Vec<u64>, String)> = std::fs::read_dir(&boot)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .filter_map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    let v = n.strip_prefix("vmlinuz-")?.to_string();
                    Some((version_key(&v), v))
                })
                .collect()
        })
        .unwrap_or_default();
    kernels.sort();
    let Some((_, version)) = kernels.pop() else {
        bail!("no kernel: /boot holds no vmlinuz-VERSION (give --kernel and --initrd)");
    };
    let kernel = boot.join(format!("vmlinuz-{version}"));
    for name in [
        format!("initrd.img-{version}"),
        format!("initramfs-{version}.img"),
        format!("initrd-{version}"),
    ] {
        let p = boot.join(&name);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
            return Ok((kernel, p));
        }
    }
    bail!("kernel /boot/vmlinuz-{version} has no initrd (initrd.img-{version}); give --initrd")
}

/// `6.1.0-28-amd64` -> [6, 1, 0, 28]: numbers compared as numbers.
fn version_key(v: &str) -> Vec<u64> {
    v.split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// What the content hash walk found.
pub struct TreeSummary {
    pub hash: [u8; 32],
    pub entries: u64,
    pub bytes: u64,
    /// Each regular file's SHA-256, by its path in the tree.
    pub digests: std::collections::HashMap<PathBuf, [u8; 32]>,
}

/// The content hash of a tree: every entry's path, type, mode, owner and content (a regular
/// file's size and SHA-256, a link's target, a device's number), in name order; no times, so
/// the same content imported twice is the same revision. Refuses a device node outside /dev.
/// With `store` (an image folder on the tree's filesystem, what it got, and the digests of
/// the files `fill_tree` put there already), each other regular file is put in that folder's
/// store as it is hashed (`objects::put`).
pub fn hash_tree(
    tree: &Path,
    mut store: Option<(&Path, &mut Stored, &Known)>,
) -> anyhow::Result<TreeSummary> {
    let mut h = Sha256::new();
    let (mut entries, mut bytes) = (0u64, 0u64);
    let mut digests = std::collections::HashMap::new();
    let mut stack = vec![PathBuf::new()];
    let mut bar = Progress::new("hashing", None);
    while let Some(rel) = stack.pop() {
        let full = tree.join(&rel);
        let mut names: Vec<_> = std::fs::read_dir(&full)
            .with_context(|| format!("reading {}", full.display()))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        names.sort();
        let mut dirs = Vec::new();
        for name in names {
            let r = rel.join(&name);
            let p = tree.join(&r);
            let m = std::fs::symlink_metadata(&p)?;
            let ft = m.file_type();
            if unpack::stray_device(&r, &m) {
                bail!(
                    "{}: /{} is a device node outside /dev (an image holds none there)",
                    tree.display(),
                    r.display()
                );
            }
            entries += 1;
            let kind = if ft.is_dir() {
                b'd'
            } else if ft.is_symlink() {
                b'l'
            } else if ft.is_file() {
                b'f'
            } else if ft.is_char_device() {
                b'c'
            } else if ft.is_block_device() {
                b'b'
            } else if ft.is_fifo() {
                b'p'
            } else {
                b's'
            };
            h.update(r.as_os_str().as_encoded_bytes());
            h.update([0, kind]);
            h.update(format!("{:o} {} {} ", m.mode() & 0o7777, m.uid(), m.gid()));
            match kind {
                b'f' => {
                    h.update(m.len().to_le_bytes());
                    let digest = match store.as_mut() {
                        Some((_, _, known)) if known.contains_key(&r) => known[&r],
                        Some((dir, stored, _)) => {
                            let digest = file_digest(&p)?;
                            stored.count(objects::put(dir, &p, &m, &digest)?, m.len());
                            digest
                        }
                        None => file_digest(&p)?,
                    };
                    h.update(digest);
                    digests.insert(r.clone(), digest);
                    bytes += m.len();
                    bar.show(bytes);
                }
                b'l' => h.update(std::fs::read_link(&p)?.as_os_str().as_encoded_bytes()),
                b'c' | b'b' => h.update(m.rdev().to_le_bytes()),
                b'd' => dirs.push(r),
                _ => {}
            }
            h.update([0]);
        }
        // Depth first, in name order.
        stack.extend(dirs.into_iter().rev());
    }
    bar.finish();
    Ok(TreeSummary {
        hash: h.finalize().into(),
        entries,
        bytes,
        digests,
    })
}

/// The SHA-256 of a file's bytes.
pub fn file_digest(path: &Path) -> anyhow::Result<[u8; 32]> {
    objects::file_digest(path)
}

struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Makes revision `id`'s NBD root image from its tree if it has none (a revision imported
/// while no NBD pool served the image); true if it made one. Built aside and renamed in, so
/// the NBD service never finds half of it. The caller holds the image's lock.
pub fn root_image(image: &Image, id: &str) -> anyhow::Result<bool> {
    let r = crate::config::names::revision(image, id);
    let out = r.root_image();
    if out.is_file() {
        // A revision made before block manifests were: its manifest now.
        blocks_file::make_missing(&out)?;
        return Ok(false);
    }
    let tmp = out.with_file_name(format!(".squashfs-{}", std::process::id()));
    let (tmp_blocks, out_blocks) = (blocks_file::path_of(&tmp), blocks_file::path_of(&out));
    let made = squashfs(&r.root_tree(), &tmp).and_then(|()| {
        // The manifest first: an image in place always has its manifest beside it.
        std::fs::rename(&tmp_blocks, &out_blocks)
            .and_then(|()| std::fs::rename(&tmp, &out))
            .with_context(|| format!("moving {} in", out.display()))
    });
    if made.is_err() {
        let _ = std::fs::remove_file(&tmp);
        let _ = std::fs::remove_file(&tmp_blocks);
    }
    made.map(|()| true)
}

/// The NBD image: the tree as squashfs (gzip, 128 KiB blocks, as the demo image's), with
/// mksquashfs's own progress bar on a terminal, and its block manifest beside it
/// (`blocks_file`, for the clients' agents: docs/swarm.md).
pub(super) fn squashfs(tree: &Path, out: &Path) -> anyhow::Result<()> {
    if let Some(p) = out.parent() {
        std::fs::create_dir_all(p)?;
    }
    eprintln!("import: making the squashfs image");
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut cmd = Command::new("mksquashfs");
    cmd.arg(tree)
        .arg(out)
        .args(["-noappend", "-comp", "gzip", "-b", "131072"]);
    if !tty {
        cmd.args(["-no-progress", "-quiet"]).stdout(Stdio::null());
    }
    let status = cmd
        .status()
        .context("running mksquashfs (Debian: apt-get install squashfs-tools)")?;
    if !status.success() {
        bail!("mksquashfs {} failed ({status})", tree.display());
    }
    blocks_file::make(out)?;
    Ok(())
}

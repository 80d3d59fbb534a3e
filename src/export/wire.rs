//! Initrds recompressed for the wire (`images.NAME.initrd_wire: zstd`). A room's boot is
//! bound by its bytes over the server's links, and most initrds are gzip: the same archive
//! compressed with zstd at level 19 is a fifth smaller (the demo's: 10.4 to 8.5 MiB) and
//! unpacks faster in the kernel (Linux 5.9 and later, `CONFIG_RD_ZSTD`).
//!
//! A copy is made once per version of the file, by `serve`'s loop (at start, then every
//! `SCAN`), in `state_dir/wire/`, named by the original's stamp (device, inode, size, mtime,
//! ctime): `copy_of` hands it out only while the original is unchanged, so an initrd
//! rebuilt in place is served as it is until its new copy is made. Only the initrd's
//! compressed tail is recompressed (`image::cpio`); an uncompressed front, early microcode,
//! is kept byte for byte. An initrd that would not shrink (already zstd, xz, uncompressed,
//! or not a layout the kernel reads) is marked and served as it is, and the log says why.
//! The work is done by `gzip -dc` and `zstd -19` at the lowest CPU priority (`nice`), as
//! `bootpool image import` uses the system's compressors.

use crate::config::{Config, ConfigError, Image, InitrdWire};
use crate::image::cpio::{self, Compressor, Tail};
use crate::image::{serve, store};
use crate::shutdown::Shutdown;
use anyhow::{Context, bail};
use std::collections::HashSet;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The folder under `server.state_dir`.
pub const DIR: &str = "wire";
/// How often the initrds are looked at again (a rebuilt file, a new revision).
const SCAN: Duration = Duration::from_secs(30);
/// The compression level: zstd's strongest without `--ultra`'s memory cost.
const LEVEL: &str = "-19";

/// The copy of `original` to send instead of it, if one is made for the file as it is now.
pub fn copy_of(state_dir: &Path, original: &Path) -> Option<PathBuf> {
    let copy = Kept::of(state_dir, &stamp(original).ok()?).copy;
    copy.is_file().then_some(copy)
}

/// What the folder keeps for one version of a file, named by its `stamp`: the copy, or the
/// reason the file goes as it is.
struct Kept {
    copy: PathBuf,
    as_is: PathBuf,
}

impl Kept {
    fn of(state_dir: &Path, stamp: &str) -> Kept {
        let dir = state_dir.join(DIR);
        Kept {
            copy: dir.join(format!("{stamp}.initrd")),
            as_is: dir.join(format!("{stamp}.as_is")),
        }
    }
}

/// The `initrd_wire: zstd` images.
fn zstd_images(config: &Config) -> impl Iterator<Item = &Arc<Image>> {
    config
        .images
        .values()
        .filter(|i| i.initrd_wire == InitrdWire::Zstd)
}

/// What a client asking for an `initrd_wire: zstd` initrd gets now (the images API shows it;
/// `bootpool lab` and `bootpool storm` wait while it is `Pending`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum Status {
    /// The copy, this long.
    Copy { bytes: u64 },
    /// The file as it is, for this reason.
    AsIs { why: String },
    /// The file as it is, until its copy is made.
    Pending,
}

/// What `copy_of` and `make` have made of `original` so far.
pub fn status(state_dir: &Path, original: &Path) -> Status {
    let Ok(stamp) = stamp(original) else {
        return Status::AsIs {
            why: "the file cannot be read".into(),
        };
    };
    let kept = Kept::of(state_dir, &stamp);
    if let Ok(m) = std::fs::metadata(&kept.copy) {
        return Status::Copy { bytes: m.len() };
    }
    match std::fs::read_to_string(&kept.as_is) {
        Ok(why) => Status::AsIs {
            why: why.trim().to_string(),
        },
        Err(_) => Status::Pending,
    }
}

/// A file's identity and version: a copy named by it is of this file as it is.
fn stamp(path: &Path) -> std::io::Result<String> {
    let m = std::fs::metadata(path)?;
    Ok(format!(
        "{:x}-{:x}-{:x}-{:x}.{:x}-{:x}.{:x}",
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    ))
}

/// What `make` did with one initrd.
#[derive(Debug, PartialEq, Eq)]
pub enum Made {
    /// A copy was made: the original's bytes and the copy's.
    Copy { from: u64, to: u64 },
    /// The file is served as it is, for this reason (kept beside the copies, so it is not
    /// tried again until the file changes).
    AsIs(String),
    /// Already done, either way, for this version of the file.
    Before,
}

/// Makes the wire copy of `original` in `state_dir/wire/` unless it is made (or marked to
/// be served as it is) already. `stop` ends the compressors early (an error).
pub fn make(state_dir: &Path, original: &Path, stop: &AtomicBool) -> anyhow::Result<Made> {
    let dir = state_dir.join(DIR);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let stamp = stamp(original).with_context(|| format!("reading {}", original.display()))?;
    let Kept { copy, as_is } = Kept::of(state_dir, &stamp);
    if copy.is_file() || as_is.is_file() {
        return Ok(Made::Before);
    }
    let bytes =
        std::fs::read(original).with_context(|| format!("reading {}", original.display()))?;
    if self::stamp(original)? != stamp {
        bail!("{} changed while it was read", original.display());
    }
    let why = match cpio::tail(&bytes) {
        Tail::Compressed {
            at,
            by: Compressor::Gzip,
        } => {
            let tmp = dir.join(format!(".{stamp}.tmp"));
            let made = recompress(&bytes, at, &tmp, stop);
            let to = match made {
                Ok(()) => std::fs::metadata(&tmp)?.len(),
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(e);
                }
            };
            if to < bytes.len() as u64 {
                std::fs::rename(&tmp, &copy)
                    .with_context(|| format!("renaming {} into place", tmp.display()))?;
                return Ok(Made::Copy {
                    from: bytes.len() as u64,
                    to,
                });
            }
            let _ = std::fs::remove_file(&tmp);
            format!("its zstd copy ({to} bytes) is no smaller")
        }
        Tail::Compressed { by, .. } => format!("it is compressed with {by:?}, not gzip"),
        Tail::None => "it is not compressed".into(),
        Tail::Unknown { at } => {
            format!("byte {at} is neither a cpio archive nor a compressor's magic")
        }
    };
    std::fs::write(&as_is, format!("{why}\n"))
        .with_context(|| format!("writing {}", as_is.display()))?;
    Ok(Made::AsIs(why))
}

/// Writes `bytes[..at]` and then the gzip part `bytes[at..]` recompressed to `tmp`,
/// synced: `gzip -dc | zstd -19`, both niced.
fn recompress(bytes: &[u8], at: usize, tmp: &Path, stop: &AtomicBool) -> anyhow::Result<()> {
    let mut out =
        std::fs::File::create(tmp).with_context(|| format!("creating {}", tmp.display()))?;
    out.write_all(&bytes[..at])?;
    let niced = |tool: &str| {
        let mut c = Command::new("nice");
        c.args(["-n", "19", tool]);
        c
    };
    let mut gunzip = niced("gzip")
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting gzip")?;
    let unpacked = gunzip.stdout.take().context("gzip's output")?;
    let zstd = niced("zstd")
        .args([LEVEL, "-q", "-c", "-T1"])
        .stdin(unpacked)
        .stdout(out.try_clone()?)
        .stderr(Stdio::piped())
        .spawn();
    let mut zstd = match zstd {
        Ok(z) => z,
        Err(e) => {
            let _ = gunzip.kill();
            let _ = gunzip.wait();
            return Err(e).context("starting zstd");
        }
    };
    let mut input = gunzip.stdin.take().context("gzip's input")?;
    let (fed, unzipped, zstded) = std::thread::scope(|s| {
        let feeder = s.spawn(move || input.write_all(&bytes[at..]));
        let unzipped = finish(&mut gunzip, "gzip -dc", stop);
        let zstded = finish(&mut zstd, "zstd", stop);
        (feeder.join(), unzipped, zstded)
    });
    unzipped?;
    zstded?;
    match fed {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e).context("writing to gzip"),
        Err(_) => bail!("the thread feeding gzip panicked"),
    }
    out.sync_data()
        .with_context(|| format!("syncing {}", tmp.display()))?;
    Ok(())
}

/// Waits for a compressor, killing it if `stop` is set; an error unless it exited 0 (gzip's
/// 2, trailing garbage, is an error too: the kernel would stop there).
fn finish(child: &mut Child, what: &str, stop: &AtomicBool) -> anyhow::Result<()> {
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if stop.load(Ordering::Relaxed) {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what}: stopped");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if status.success() {
        return Ok(());
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    bail!("{what}: {status}: {}", err.trim())
}

/// The `initrd_wire: zstd` images whose kernel cannot unpack a zstd initrd, as far as their
/// root tree tells: a `boot/config-*` there (the kernel's build config, as distributions
/// ship it) without `CONFIG_RD_ZSTD=y`. `bootpool check` and `bootpool serve` refuse such a
/// config; an image whose tree says nothing (an NBD image, a tree without /boot) is trusted.
pub fn unfit(config: &Config) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    for image in zstd_images(config) {
        let boot = serve::serving(image).root_tree().join("boot");
        let Ok(entries) = std::fs::read_dir(&boot) else {
            continue;
        };
        let unfit = entries.flatten().map(|e| e.path()).find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("config-"))
                && std::fs::read_to_string(p).is_ok_and(|t| !unpacks_zstd(&t))
        });
        if let Some(path) = unfit {
            errors.push(config.error_at(
                &["images", image.name.as_str(), "initrd_wire"],
                format!(
                    "{} has no CONFIG_RD_ZSTD=y: this image's kernel cannot unpack a zstd initrd (leave initrd_wire out, or boot a kernel built with it: Linux 5.9 or later)",
                    path.display()
                ),
            ));
        }
    }
    errors
}

/// Whether a kernel's build config has it unpack zstd initrds.
fn unpacks_zstd(kernel_config: &str) -> bool {
    kernel_config
        .lines()
        .any(|l| l.trim() == "CONFIG_RD_ZSTD=y")
}

/// The initrds to keep copies of: each `initrd_wire: zstd` image's, and for a folder with
/// revisions every revision's on disk.
fn wanted(config: &Config) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for image in zstd_images(config) {
        out.push((image.name.clone(), image.initrd()));
        if store::managed(&image.dir) {
            for rev in store::list(&image.dir).unwrap_or_default() {
                let initrd = serve::revision(image, &rev.id).initrd();
                out.push((format!("{}@{}", image.name, rev.id), initrd));
            }
        }
    }
    out.retain(|(_, path)| path.is_file());
    out
}

/// Makes the copies `wanted` names and removes those of files gone or changed; once at
/// start, then every `SCAN`, until shutdown.
pub async fn serve(config: Arc<Config>, shutdown: Shutdown) -> anyhow::Result<()> {
    if zstd_images(&config).next().is_none() {
        return Ok(());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (scan_stop, state_dir) = (stop.clone(), config.server.state_dir.clone());
    // A plain thread, not tokio's blocking pool: a runtime waits for those when it drops.
    let worker = std::thread::Builder::new()
        .name("initrd-wire".into())
        .spawn(move || {
            let mut warned = HashSet::new();
            while !scan_stop.load(Ordering::Relaxed) {
                scan(&config, &state_dir, &scan_stop, &mut warned);
                let until = Instant::now() + SCAN;
                while Instant::now() < until && !scan_stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        })
        .context("starting the initrd-wire thread")?;
    shutdown.wait().await;
    stop.store(true, Ordering::Relaxed);
    drop(worker);
    Ok(())
}

/// One pass: each wanted initrd made (or found made), the rest of the folder pruned.
fn scan(config: &Config, state_dir: &Path, stop: &AtomicBool, warned: &mut HashSet<String>) {
    let mut keep = HashSet::new();
    for (name, path) in wanted(config) {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(stamp) = stamp(&path) else { continue };
        keep.insert(stamp.clone());
        let started = Instant::now();
        match make(state_dir, &path, stop) {
            Ok(Made::Copy { from, to }) => tracing::info!(
                image = %name,
                from_bytes = from,
                to_bytes = to,
                secs = format!("{:.1}", started.elapsed().as_secs_f64()),
                "initrd recompressed for the wire (zstd {LEVEL})"
            ),
            Ok(Made::AsIs(why)) => {
                tracing::info!(image = %name, "initrd served as it is: {why}")
            }
            Ok(Made::Before) => {}
            Err(e) if stop.load(Ordering::Relaxed) => {
                tracing::debug!(image = %name, "initrd recompression stopped: {e:#}")
            }
            Err(e) => {
                if warned.insert(stamp) {
                    tracing::warn!(
                        image = %name,
                        "initrd not recompressed, served as it is: {e:#}"
                    );
                }
            }
        }
    }
    prune(&state_dir.join(DIR), &keep);
}

/// Removes the copies and marks of stamps not in `keep` (a client still reading one keeps
/// its open file).
fn prune(dir: &Path, keep: &HashSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // `STAMP.initrd`, `STAMP.as_is`, or a copy being written, `.STAMP.tmp`.
        let stamp = [".initrd", ".as_is", ".tmp"]
            .iter()
            .find_map(|suffix| name.trim_start_matches('.').strip_suffix(suffix));
        if !stamp.is_some_and(|s| keep.contains(s)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_config_says_whether_it_unpacks_zstd() {
        assert!(unpacks_zstd("CONFIG_RD_GZIP=y\nCONFIG_RD_ZSTD=y\n"));
        assert!(!unpacks_zstd(
            "CONFIG_RD_GZIP=y\n# CONFIG_RD_ZSTD is not set\n"
        ));
        assert!(!unpacks_zstd("CONFIG_RD_GZIP=y\n"));
    }

    #[test]
    fn an_image_whose_kernel_cannot_unpack_zstd_is_refused_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("img");
        std::fs::create_dir_all(image.join("rootfs/boot")).unwrap();
        std::fs::write(image.join("vmlinuz"), b"k").unwrap();
        std::fs::write(image.join("initrd.img"), b"i").unwrap();
        let text = format!(
            "server: {{ address: 10.77.0.1, http: 0.0.0.0:8080, state_dir: {} }}
dhcp: {{ subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.101, lease: 1h }}
images:
  demo:
    dir: {}
    initrd_wire: zstd
pools:
  room: {{ image: demo, root: nfs, clients: [ {{ macs: \"52:54:00:77:00:00-52:54:00:77:00:0f\" }} ] }}
",
            dir.path().join("var").display(),
            image.display()
        );
        let file = dir.path().join("pools.yaml");
        std::fs::write(&file, &text).unwrap();
        let config = Config::parse(&file, &text).unwrap();
        // A tree without /boot says nothing: trusted.
        assert!(unfit(&config).is_empty());
        std::fs::write(image.join("rootfs/boot/config-6.1.0"), "CONFIG_RD_ZSTD=y\n").unwrap();
        assert!(unfit(&config).is_empty());
        std::fs::write(
            image.join("rootfs/boot/config-4.19.0"),
            "# CONFIG_RD_ZSTD is not set\n",
        )
        .unwrap();
        let errors = unfit(&config);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "images.demo.initrd_wire");
        assert_eq!(errors[0].line, Some(6), "{}", errors[0]);
        assert!(
            errors[0]
                .reason
                .contains("config-4.19.0 has no CONFIG_RD_ZSTD=y"),
            "{}",
            errors[0]
        );
    }
}

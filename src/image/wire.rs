//! Initrds and NBD root images recompressed for the wire (`images.NAME.initrd_wire: zstd`,
//! `images.NAME.root_wire: zstd`). A room's boot is bound by its bytes over the server's
//! links, and most images are made with gzip: the same data compressed with zstd at level
//! 19 is smaller (the demo's initrd: 10.4 to 8.5 MiB; its squashfs root: the same files in
//! the same 128 KiB blocks, a fifth fewer bytes read at boot) and unpacks faster.
//!
//! A copy is made once per version of the file, by `serve`'s loop (at start, then every
//! `SCAN`), in `state_dir/wire/`, named by the original's stamp (device, inode, size, mtime;
//! `copies`): `copy_of` hands it out only while the original is unchanged, so a file rebuilt in
//! place is served as it is until its new copy is made. A file that would not shrink, or is
//! not a layout this module recompresses, is marked and served as it is, and the log says why.
//!
//! - An initrd: only its compressed tail is recompressed (`image::cpio`), by `gzip -dc` and
//!   `zstd -19`; an uncompressed front, early microcode, is kept byte for byte. The same URL
//!   answers with the copy.
//! - A squashfs root image: unpacked by `unsquashfs` (as root: owners, modes, devices and
//!   xattrs are kept) and packed again by `mksquashfs -comp zstd` with the original's block
//!   size. Its blocks lie elsewhere than the original's, so a client must read one or the
//!   other for a whole boot: a boot is handed the copy's export name, `NAME~zstd`, when it
//!   starts (`image::serve::for_boot`), and keeps it across reconnects and daemon restarts
//!   (`~` is in no configured export name).
//!
//! The tools run at the lowest CPU priority (`nice`), as `bootpool image import` uses the
//! system's compressors.

use super::copies::{DIR, Kept, Kind, stamp};
use super::cpio::{self, Compressor, Tail};
use super::squashfs::{self, SUPERBLOCK_LEN};
use super::{serve, store};
use crate::config::names;
use crate::config::{Config, ConfigError, Image, Live, Wire};
use crate::shutdown::Shutdown;
use anyhow::{Context, bail};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the files are looked at again (a rebuilt file, a new revision).
const SCAN: Duration = Duration::from_secs(30);
/// The compression level: zstd's strongest without `--ultra`'s memory cost.
const LEVEL: &str = "19";

/// The images with `initrd_wire: zstd` or `root_wire: zstd`.
fn wire_images(config: &Config) -> impl Iterator<Item = &Arc<Image>> {
    config
        .images
        .values()
        .filter(|i| i.initrd_wire == Wire::Zstd || i.root_wire == Wire::Zstd)
}

/// What `make` did with one file.
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
/// be served as it is) already. `stop` ends the tools early (an error).
pub fn make(
    state_dir: &Path,
    original: &Path,
    kind: Kind,
    stop: &AtomicBool,
) -> anyhow::Result<Made> {
    let dir = state_dir.join(DIR);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let stamp = stamp(original).with_context(|| format!("reading {}", original.display()))?;
    let Kept { copy, as_is } = Kept::of(state_dir, &stamp, kind);
    if copy.is_file() || as_is.is_file() {
        return Ok(Made::Before);
    }
    let tmp = dir.join(format!(".{stamp}.tmp"));
    let attempt = match kind {
        Kind::Initrd => initrd_copy(original, &tmp, stop),
        Kind::Root => root_copy(original, &dir.join(format!(".{stamp}.tree")), &tmp, stop),
    };
    let why = match attempt.and_then(|a| {
        if self::stamp(original)? != stamp {
            bail!("{} changed while it was copied", original.display());
        }
        Ok(a)
    }) {
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(Attempt::AsIs(why)) => why,
        Ok(Attempt::Made { from }) => {
            let to = std::fs::metadata(&tmp)?.len();
            if to < from {
                std::fs::rename(&tmp, &copy)
                    .with_context(|| format!("renaming {} into place", tmp.display()))?;
                return Ok(Made::Copy { from, to });
            }
            let _ = std::fs::remove_file(&tmp);
            format!("its zstd copy ({to} bytes) is no smaller")
        }
    };
    std::fs::write(&as_is, format!("{why}\n"))
        .with_context(|| format!("writing {}", as_is.display()))?;
    Ok(Made::AsIs(why))
}

/// What one try at a copy gave: a copy in the temporary file (of a file this long), or the
/// reason there is none.
enum Attempt {
    Made { from: u64 },
    AsIs(String),
}

/// An initrd's copy in `tmp`, if its tail is gzip.
fn initrd_copy(original: &Path, tmp: &Path, stop: &AtomicBool) -> anyhow::Result<Attempt> {
    let bytes =
        std::fs::read(original).with_context(|| format!("reading {}", original.display()))?;
    Ok(match cpio::tail(&bytes) {
        Tail::Compressed {
            at,
            by: Compressor::Gzip,
        } => {
            recompress(&bytes, at, tmp, stop)?;
            Attempt::Made {
                from: bytes.len() as u64,
            }
        }
        Tail::Compressed { by, .. } => {
            Attempt::AsIs(format!("it is compressed with {by:?}, not gzip"))
        }
        Tail::None => Attempt::AsIs("it is not compressed".into()),
        Tail::Unknown { at } => Attempt::AsIs(format!(
            "byte {at} is neither a cpio archive nor a compressor's magic"
        )),
    })
}

/// A squashfs root image's copy in `tmp`, by way of the unpacked tree `tree` (removed
/// after), if the image is squashfs and not zstd already.
fn root_copy(
    original: &Path,
    tree: &Path,
    tmp: &Path,
    stop: &AtomicBool,
) -> anyhow::Result<Attempt> {
    let mut head = [0; SUPERBLOCK_LEN];
    let mut file =
        std::fs::File::open(original).with_context(|| format!("opening {}", original.display()))?;
    let read = file.read_exact(&mut head);
    let from = file.metadata()?.len();
    let Some(sb) = read.ok().and_then(|()| squashfs::superblock(&head)) else {
        return Ok(Attempt::AsIs(
            "it is not a squashfs image (only those are recompressed)".into(),
        ));
    };
    if sb.compressor == squashfs::Compressor::Zstd {
        return Ok(Attempt::AsIs("it is compressed with zstd already".into()));
    }
    if !crate::sys::process::is_root() {
        return Ok(Attempt::AsIs(
            "unpacking it keeps its files' owners only when bootpool runs as root".into(),
        ));
    }
    let _ = std::fs::remove_dir_all(tree);
    let made = resquash(original, tree, tmp, sb.block_size, stop);
    let _ = std::fs::remove_dir_all(tree);
    made?;
    Ok(Attempt::Made { from })
}

/// `nice` in front of a tool.
fn niced(tool: &str) -> Command {
    let mut c = Command::new("nice");
    c.args(["-n", "19", tool]);
    c
}

/// `unsquashfs` of `original` into `tree`, then `mksquashfs` of `tree` into `tmp` with zstd
/// and `block_size`, one thread, synced.
fn resquash(
    original: &Path,
    tree: &Path,
    tmp: &Path,
    block_size: u32,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let mut unpack = niced("unsquashfs")
        .args(["-no-progress", "-d"])
        .arg(tree)
        .arg(original)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting unsquashfs")?;
    finish(&mut unpack, "unsquashfs", stop)?;
    let mut pack = niced("mksquashfs")
        .arg(tree)
        .arg(tmp)
        .args(["-noappend", "-no-progress", "-quiet", "-processors", "1"])
        .args(["-comp", "zstd", "-Xcompression-level", LEVEL])
        .args(["-b", &block_size.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting mksquashfs")?;
    finish(&mut pack, "mksquashfs", stop)?;
    std::fs::File::open(tmp)
        .and_then(|f| f.sync_data())
        .with_context(|| format!("syncing {}", tmp.display()))?;
    Ok(())
}

/// Writes `bytes[..at]` and then the gzip part `bytes[at..]` recompressed to `tmp`,
/// synced: `gzip -dc | zstd -19`, both niced.
fn recompress(bytes: &[u8], at: usize, tmp: &Path, stop: &AtomicBool) -> anyhow::Result<()> {
    let mut out =
        std::fs::File::create(tmp).with_context(|| format!("creating {}", tmp.display()))?;
    out.write_all(&bytes[..at])?;
    let mut gunzip = niced("gzip")
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting gzip")?;
    let unpacked = gunzip.stdout.take().context("gzip's output")?;
    let zstd = niced("zstd")
        .args([&format!("-{LEVEL}"), "-q", "-c", "-T1"])
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

/// The wire images whose kernel cannot read what they would send, as far as their root tree
/// tells: a `boot/config-*` there (the kernel's build config, as distributions ship it)
/// without `CONFIG_RD_ZSTD=y` (for `initrd_wire: zstd`) or `CONFIG_SQUASHFS_ZSTD=y` (for
/// `root_wire: zstd`). `bootpool check` and `bootpool serve` refuse such a config; an image
/// whose tree says nothing (an NBD-only image, a tree without /boot) is trusted.
pub fn unfit(config: &Config) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    for image in wire_images(config) {
        let boot = serve::serving(image).root_tree().join("boot");
        let Ok(entries) = std::fs::read_dir(&boot) else {
            continue;
        };
        let configs: Vec<(PathBuf, String)> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("config-"))
            })
            .filter_map(|p| Some((p.clone(), std::fs::read_to_string(&p).ok()?)))
            .collect();
        let needs = [
            (
                image.initrd_wire,
                "initrd_wire",
                "CONFIG_RD_ZSTD",
                "unpack a zstd initrd (leave initrd_wire out, or boot a kernel built with it: Linux 5.9 or later)",
            ),
            (
                image.root_wire,
                "root_wire",
                "CONFIG_SQUASHFS_ZSTD",
                "mount a zstd squashfs (leave root_wire out, or boot a kernel built with it: Linux 4.14 or later)",
            ),
        ];
        for (wire, key, option, cannot) in needs {
            if wire != Wire::Zstd {
                continue;
            }
            if let Some((path, _)) = configs.iter().find(|(_, text)| !has(text, option)) {
                errors.push(config.error_at(
                    &["images", image.name.as_str(), key],
                    format!(
                        "{} has no {option}=y: this image's kernel cannot {cannot}",
                        path.display()
                    ),
                ));
            }
        }
    }
    errors
}

/// Whether a kernel's build config has `option` built in.
fn has(kernel_config: &str, option: &str) -> bool {
    kernel_config
        .lines()
        .any(|l| l.trim().strip_suffix("=y") == Some(option))
}

/// The files to keep copies of: each wire image's initrd or root image (or both), and for a
/// folder with revisions every revision's on disk.
fn wanted(config: &Config) -> Vec<(String, PathBuf, Kind)> {
    let mut out = Vec::new();
    for image in wire_images(config) {
        let mut versions = vec![(image.name.clone(), (**image).clone())];
        if store::managed(&image.dir) {
            for rev in store::list(&image.dir).unwrap_or_default() {
                let name = names::at_revision(&image.name, &rev.id);
                versions.push((name, names::revision(image, &rev.id)));
            }
        }
        for (name, version) in versions {
            if image.initrd_wire == Wire::Zstd {
                out.push((name.clone(), version.initrd(), Kind::Initrd));
            }
            if image.root_wire == Wire::Zstd {
                out.push((name, version.root_image(), Kind::Root));
            }
        }
    }
    out.retain(|(_, path, _)| path.is_file());
    out
}

/// Makes the copies `wanted` names and removes those of files gone or changed; once at
/// start, then every `SCAN`, until shutdown.
pub async fn serve(live: Live, shutdown: Shutdown) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let (scan_stop, state_dir) = (stop.clone(), live.load().server.state_dir.clone());
    // A plain thread, not tokio's blocking pool: a runtime waits for those when it drops.
    let worker = std::thread::Builder::new()
        .name("wire".into())
        .spawn(move || {
            let mut warned = HashSet::new();
            while !scan_stop.load(Ordering::Relaxed) {
                // Each pass reads the config as served now: a reload may add a wire copy.
                let config = live.load();
                if wire_images(&config).next().is_some() {
                    scan(&config, &state_dir, &scan_stop, &mut warned);
                }
                let until = Instant::now() + SCAN;
                while Instant::now() < until && !scan_stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        })
        .context("starting the wire thread")?;
    shutdown.wait().await;
    stop.store(true, Ordering::Relaxed);
    drop(worker);
    Ok(())
}

/// One pass: each wanted file's copy made (or found made), the rest of the folder pruned.
fn scan(config: &Config, state_dir: &Path, stop: &AtomicBool, warned: &mut HashSet<String>) {
    let mut keep = HashSet::new();
    for (name, path, kind) in wanted(config) {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(stamp) = stamp(&path) else { continue };
        keep.insert(stamp.clone());
        let started = Instant::now();
        let what = kind.what();
        match make(state_dir, &path, kind, stop) {
            Ok(Made::Copy { from, to }) => tracing::info!(
                image = %name,
                from_bytes = from,
                to_bytes = to,
                secs = format!("{:.1}", started.elapsed().as_secs_f64()),
                "{what} recompressed for the wire (zstd -{LEVEL})"
            ),
            Ok(Made::AsIs(why)) => {
                tracing::info!(image = %name, "{what} served as it is: {why}")
            }
            Ok(Made::Before) => {}
            Err(e) if stop.load(Ordering::Relaxed) => {
                tracing::debug!(image = %name, "{what} recompression stopped: {e:#}")
            }
            Err(e) => {
                if warned.insert(stamp) {
                    tracing::warn!(
                        image = %name,
                        "{what} not recompressed, served as it is: {e:#}"
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
        // A copy `STAMP.SUFFIX` of each kind, `STAMP.as_is`, or one being made: `.STAMP.tmp`,
        // and a root's unpacked tree `.STAMP.tree/`.
        let name = name.trim_start_matches('.');
        let stamp = Kind::ALL
            .iter()
            .map(|k| k.suffix())
            .chain(["as_is", "tmp", "tree"])
            .find_map(|suffix| name.strip_suffix(suffix)?.strip_suffix('.'));
        if !stamp.is_some_and(|s| keep.contains(s)) {
            let path = entry.path();
            if path.is_dir() {
                let _ = std::fs::remove_dir_all(path);
            } else {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_keeps_every_kind_of_a_kept_stamp_and_removes_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let names = [
            "a.initrd", "a.as_is", "b.root", ".b.tmp", "c.root", "c.as_is", ".c.tmp",
        ];
        for n in names {
            std::fs::write(d.join(n), b"x").unwrap();
        }
        std::fs::create_dir_all(d.join(".b.tree/etc")).unwrap();
        std::fs::create_dir_all(d.join(".c.tree/etc")).unwrap();
        let keep: HashSet<String> = ["a", "b"].map(String::from).into();
        prune(d, &keep);
        let mut left: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".b.tmp", ".b.tree", "a.as_is", "a.initrd", "b.root"]);
    }

    #[test]
    fn a_kernel_config_says_whether_it_unpacks_zstd() {
        let unpacks = |text| has(text, "CONFIG_RD_ZSTD");
        assert!(unpacks("CONFIG_RD_GZIP=y\nCONFIG_RD_ZSTD=y\n"));
        assert!(!unpacks("CONFIG_RD_GZIP=y\n# CONFIG_RD_ZSTD is not set\n"));
        assert!(!unpacks("CONFIG_RD_GZIP=y\n"));
        assert!(!unpacks("CONFIG_RD_ZSTD=m\n"));
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

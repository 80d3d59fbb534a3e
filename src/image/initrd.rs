//! Which builder made an image's initrd, told by the files of its archive (initramfs-tools
//! writes `conf/initramfs.conf`, dracut `usr/lib/dracut/` or `lib/dracut/`), and every file
//! it holds (`contents`, for `bootable.rs`), so that a pool whose root argument
//! is in the other builder's syntax is refused before a room boots it (`app::unservable`):
//! Debian's initramfs-tools initrd cannot read dracut's `root=nfs:`, nor dracut's `nfsroot=`.

use super::cpio::{self, Compressor, Tail};
use super::serve;
use crate::config::{Config, ConfigError, Initramfs};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// How much of an initrd's main archive is read for its builder's files: both builders write
/// theirs among the first hundred entries.
const READ_AT_MOST: u64 = 32 << 20;

/// Pools whose root argument (`initramfs`) is in another syntax than the one their image's
/// initrd reads, each at `pools.NAME.initramfs`. A pool with a `cmdline_template` writes its
/// own, and an initrd made by neither builder (the demo's) says nothing.
pub fn mismatched(config: &Config) -> Vec<ConfigError> {
    let mut known: BTreeMap<PathBuf, Option<Initramfs>> = BTreeMap::new();
    let mut errors = Vec::new();
    for (name, pool) in &config.pools {
        if pool.cmdline_template.is_some() {
            continue;
        }
        for image in pool.images() {
            let initrd = serve::serving(image).initrd();
            let made_by = *known
                .entry(initrd.clone())
                .or_insert_with(|| builder(&initrd));
            // `bootpool` (the default) means the demo's own initrd, made by neither.
            let by = match (made_by, pool.initramfs) {
                (Some(Initramfs::InitramfsTools), Initramfs::Dracut | Initramfs::Bootpool) => {
                    "initramfs-tools"
                }
                (Some(Initramfs::Dracut), Initramfs::InitramfsTools | Initramfs::Bootpool) => {
                    "dracut"
                }
                _ => continue,
            };
            errors.push(config.error_at(
                &["pools", name.as_str(), "initramfs"],
                format!(
                    "image `{}`'s initrd {} was made by {by}, which cannot read another \
                     syntax's root argument (and gets bootpool's overlay only when the pool \
                     says so): set `initramfs: {by}`",
                    image.name,
                    initrd.display()
                ),
            ));
        }
    }
    errors
}

/// The builder of the initrd at `path`, if its files tell one.
fn builder(path: &Path) -> Option<Initramfs> {
    let bytes = std::fs::read(path).ok()?;
    let (front, tail) = match cpio::tail(&bytes) {
        Tail::None => (bytes.len(), None),
        Tail::Compressed { at, by } => (at, Some((at, by))),
        Tail::Unknown { at } => (at, None),
    };
    if let Some(b) = of_names(&cpio::names(&bytes[..front])) {
        return Some(b);
    }
    let (at, by) = tail?;
    unpacked_builder(&bytes[at..], by)
}

/// The builder a compressed part's files tell, unpacked a MiB at a time until they tell one,
/// up to `READ_AT_MOST`.
fn unpacked_builder(part: &[u8], by: Compressor) -> Option<Initramfs> {
    let out = unpacked(part, by, READ_AT_MOST, |out| {
        of_names(&cpio::names(out)).is_some()
    })?;
    of_names(&cpio::names(&out))
}

/// A compressed part unpacked by the program that makes such parts (gzip, zstd, xz...), a
/// MiB at a time until `enough` says so or `most` bytes are out; `None`: no such program.
fn unpacked(
    part: &[u8],
    by: Compressor,
    most: u64,
    enough: impl Fn(&[u8]) -> bool,
) -> Option<Vec<u8>> {
    let program = match by {
        Compressor::Gzip => "gzip",
        Compressor::Zstd => "zstd",
        Compressor::Xz | Compressor::Lzma => "xz",
        Compressor::Bzip2 => "bzip2",
        Compressor::Lz4 => "lz4",
        Compressor::Lzo => "lzop",
    };
    let mut child = Command::new(program)
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let mut stdout = child.stdout.take()?;
    let mut out = Vec::new();
    std::thread::scope(|s| {
        // Ended by a broken pipe when the reading stops first.
        s.spawn(move || stdin.write_all(part));
        loop {
            let got = (&mut stdout)
                .take(1 << 20)
                .read_to_end(&mut out)
                .unwrap_or(0);
            if got == 0 || out.len() as u64 >= most || enough(&out) {
                break;
            }
        }
        drop(stdout);
        let _ = child.kill();
    });
    let _ = child.wait();
    Some(out)
}

/// How much of an initrd's compressed part `contents` unpacks: a desktop's initrd with every
/// module is a few hundred MiB unpacked.
const READ_ALL_AT_MOST: u64 = 1 << 30;

/// Every entry name of the initrd at `path` (leading `./` dropped): its uncompressed front's
/// (early microcode) and its compressed main part's. `None`: unreadable, or its compressor's
/// program is missing.
pub fn contents(path: &Path) -> Option<Vec<String>> {
    let bytes = std::fs::read(path).ok()?;
    let (front, tail) = match cpio::tail(&bytes) {
        Tail::None => (bytes.len(), None),
        Tail::Compressed { at, by } => (at, Some((at, by))),
        Tail::Unknown { at } => (at, None),
    };
    let mut names: Vec<String> = cpio::names(&bytes[..front])
        .iter()
        .map(|n| plain(n))
        .collect();
    if let Some((at, by)) = tail {
        let out = unpacked(&bytes[at..], by, READ_ALL_AT_MOST, |_| false)?;
        names.extend(cpio::names(&out).iter().map(|n| plain(n)));
    }
    Some(names)
}

fn plain(name: &[u8]) -> String {
    let name = name.strip_prefix(b"./").unwrap_or(name);
    String::from_utf8_lossy(name).into_owned()
}

/// The builder whose own files are among `names` (as `contents` gives them).
pub fn builder_of(names: &[String]) -> Option<Initramfs> {
    let bytes: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
    of_names(&bytes)
}

/// The builder whose own file is among `names`.
fn of_names(names: &[&[u8]]) -> Option<Initramfs> {
    names.iter().find_map(|n| {
        let n = n.strip_prefix(b"./").unwrap_or(n);
        if n == b"conf/initramfs.conf" {
            Some(Initramfs::InitramfsTools)
        } else if n.starts_with(b"usr/lib/dracut") || n.starts_with(b"lib/dracut") {
            Some(Initramfs::Dracut)
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_builder_is_told_by_its_own_file() {
        let tools: [&[u8]; 3] = [b"init", b"conf/initramfs.conf", b"scripts/nfs"];
        assert_eq!(of_names(&tools), Some(Initramfs::InitramfsTools));
        let dracut: [&[u8]; 2] = [b"./init", b"./usr/lib/dracut/modules.txt"];
        assert_eq!(of_names(&dracut), Some(Initramfs::Dracut));
        let demo: [&[u8]; 2] = [b"init", b"bin/busybox"];
        assert_eq!(of_names(&demo), None);
    }
}

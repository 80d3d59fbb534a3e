//! bootpool's addition to stock initrds: the small newc archive made from `dist/overlay/`
//! (built into the binary, so it is the same bytes as the daemon's own version), which the
//! boot script hands after an initramfs-tools or dracut image's own initrd
//! (`boot::addition`). Its scripts lay a writable overlay (tmpfs, or a local partition) over
//! the read-only NFS or NBD root before the initrd switches to it. `publish` writes it into
//! `state_dir/addition/` at start, where `export::boot_files` serves it.

use crate::boot::addition::NAME;
use crate::image::cpio::{self, Entry};
use std::path::{Path, PathBuf};

/// The archive's entries: each folder before what it holds (the kernel makes no missing
/// parent; a folder the initrd has already is kept as it is, a symlink included).
const ENTRIES: &[Entry] = &[
    dir("bootpool"),
    file(
        "bootpool/overlay.sh",
        include_bytes!("../../dist/overlay/bootpool/overlay.sh"),
    ),
    // initramfs-tools: `boot=bootpool` makes its /init source this instead of /scripts/nfs
    // or /scripts/local.
    dir("scripts"),
    file(
        "scripts/bootpool",
        include_bytes!("../../dist/overlay/scripts/bootpool"),
    ),
    // dracut: every `*.sh` of a hook folder is sourced at that stage, found at run time.
    dir("lib"),
    dir("lib/dracut"),
    dir("lib/dracut/hooks"),
    dir("lib/dracut/hooks/pre-pivot"),
    file(
        "lib/dracut/hooks/pre-pivot/90-bootpool-overlay.sh",
        include_bytes!("../../dist/overlay/lib/dracut/hooks/pre-pivot/90-bootpool-overlay.sh"),
    ),
];

const fn dir(name: &'static str) -> Entry<'static> {
    Entry {
        name,
        mode: 0o755,
        data: None,
    }
}

const fn file(name: &'static str, data: &'static [u8]) -> Entry<'static> {
    Entry {
        name,
        mode: 0o755,
        data: Some(data),
    }
}

/// The addition's bytes.
pub fn archive() -> Vec<u8> {
    cpio::write(ENTRIES)
}

/// The folder under `state_dir` the addition is served from.
pub fn folder(state_dir: &Path) -> PathBuf {
    state_dir.join("addition")
}

/// Writes the addition to `state_dir/addition/NAME` unless it holds these bytes already
/// (whole, by rename: a client fetching it meanwhile reads the old or the new).
pub fn publish(state_dir: &Path) -> std::io::Result<PathBuf> {
    let dir = folder(state_dir);
    let path = dir.join(NAME);
    let bytes = archive();
    if std::fs::read(&path).is_ok_and(|old| old == bytes) {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir)?;
    let part = dir.join(format!(".{NAME}.part"));
    std::fs::write(&part, &bytes)?;
    std::fs::rename(&part, &path)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every folder comes before what it holds, and every script is a shell script.
    #[test]
    fn folders_come_first_and_files_are_scripts() {
        for (i, e) in ENTRIES.iter().enumerate() {
            if let Some((parent, _)) = e.name.rsplit_once('/') {
                assert!(
                    ENTRIES[..i]
                        .iter()
                        .any(|p| p.name == parent && p.data.is_none()),
                    "{} before its folder",
                    e.name
                );
            }
            if let Some(data) = e.data {
                assert!(data.starts_with(b"#!/bin/sh\n"), "{}", e.name);
            }
        }
    }

    #[test]
    fn publish_writes_once_and_keeps_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = publish(dir.path()).unwrap();
        assert_eq!(path, dir.path().join("addition").join(NAME));
        assert_eq!(std::fs::read(&path).unwrap(), archive());
        let before = std::fs::metadata(&path).unwrap().modified().unwrap();
        publish(dir.path()).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().modified().unwrap(),
            before
        );
        std::fs::write(&path, b"old").unwrap();
        publish(dir.path()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), archive());
    }
}

//! bootpool's addition to stock initrds: the small newc archive made from `dist/overlay/`
//! (built into the binary, so it is the same bytes as the daemon's own version), which the
//! boot script hands after an initramfs-tools or dracut image's own initrd
//! (`boot::addition`). Its scripts lay a writable overlay (tmpfs, or a local partition) over
//! the read-only NFS or NBD root before the initrd switches to it, and write the pool's homes
//! into its /etc/fstab (`homes.sh`), and start the client agent for an NBD root that goes
//! through it (`agent.sh`, with the static binary `server.agent` names, when it does).
//! `publish` writes it into `state_dir/addition/` at start, where `export::boot_files` serves
//! it.

use crate::boot::addition::NAME;
use crate::image::cpio::{self, Entry};
use std::path::{Path, PathBuf};

/// The archive's entries. A folder entry replaces whatever else stands at its path (the
/// kernel's `clean_path`): an entry `lib` would delete a merged-/usr initrd's `lib -> usr/lib`
/// link and with it every library. So the only folder is bootpool's own; each script goes
/// into a folder its initrd already has (through its symlinks), and into one it lacks not at
/// all: the kernel skips a file it cannot create (dracut has no `/scripts`, initramfs-tools no
/// `/lib/dracut/hooks`).
const ENTRIES: &[Entry] = &[
    dir("bootpool"),
    file(
        "bootpool/overlay.sh",
        include_bytes!("../../dist/overlay/bootpool/overlay.sh"),
    ),
    file(
        "bootpool/homes.sh",
        include_bytes!("../../dist/overlay/bootpool/homes.sh"),
    ),
    file(
        "bootpool/agent.sh",
        include_bytes!("../../dist/overlay/bootpool/agent.sh"),
    ),
    // initramfs-tools: `boot=bootpool` makes its /init source this instead of /scripts/nfs
    // or /scripts/local.
    file(
        "scripts/bootpool",
        include_bytes!("../../dist/overlay/scripts/bootpool"),
    ),
    // dracut: every `*.sh` of a hook folder is sourced at that stage, found at run time.
    file(
        "lib/dracut/hooks/pre-pivot/90-bootpool-overlay.sh",
        include_bytes!("../../dist/overlay/lib/dracut/hooks/pre-pivot/90-bootpool-overlay.sh"),
    ),
    // dracut: once the interface is up, before the root's handler (nbdroot) runs.
    file(
        "lib/dracut/hooks/netroot/50-bootpool-agent.sh",
        include_bytes!("../../dist/overlay/lib/dracut/hooks/netroot/50-bootpool-agent.sh"),
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

/// Where the addition carries the agent: named with a leading `@`, so that the hook, which
/// runs it by that name through `PATH`, hands it an argv[0] systemd leaves running through
/// the switch to the real root and at shutdown (`agent.sh`).
pub const AGENT: &str = "bootpool/@bootpool-agent";

/// The addition's bytes: its scripts, and the agent's binary when it is given.
pub fn archive(agent: Option<&[u8]>) -> Vec<u8> {
    let mut entries = ENTRIES.to_vec();
    if let Some(data) = agent {
        entries.push(Entry {
            name: AGENT,
            mode: 0o755,
            data: Some(data),
        });
    }
    cpio::write(&entries)
}

/// The folder under `state_dir` the addition is served from.
pub fn folder(state_dir: &Path) -> PathBuf {
    state_dir.join("addition")
}

/// Writes the addition, with the agent binary at `agent` if given, to
/// `state_dir/addition/NAME` unless it holds these bytes already (whole, by rename: a client
/// fetching it meanwhile reads the old or the new).
pub fn publish(state_dir: &Path, agent: Option<&Path>) -> std::io::Result<PathBuf> {
    let dir = folder(state_dir);
    let path = dir.join(NAME);
    let agent = match agent {
        Some(p) => Some(std::fs::read(p).map_err(|e| {
            std::io::Error::new(e.kind(), format!("reading the agent {}: {e}", p.display()))
        })?),
        None => None,
    };
    let bytes = archive(agent.as_deref());
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

    /// The one folder is bootpool's own and comes before its file; every file is a shell
    /// script.
    #[test]
    fn only_bootpools_own_folder_and_shell_scripts() {
        let folders: Vec<&str> = ENTRIES
            .iter()
            .filter(|e| e.data.is_none())
            .map(|e| e.name)
            .collect();
        assert_eq!(folders, ["bootpool"]);
        assert_eq!(ENTRIES[0].name, "bootpool");
        for e in ENTRIES.iter().filter_map(|e| e.data.map(|d| (e.name, d))) {
            assert!(e.1.starts_with(b"#!/bin/sh\n"), "{}", e.0);
        }
    }

    #[test]
    fn publish_writes_once_and_keeps_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = publish(dir.path(), None).unwrap();
        assert_eq!(path, dir.path().join("addition").join(NAME));
        assert_eq!(std::fs::read(&path).unwrap(), archive(None));
        let before = std::fs::metadata(&path).unwrap().modified().unwrap();
        publish(dir.path(), None).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().modified().unwrap(),
            before
        );
        std::fs::write(&path, b"old").unwrap();
        publish(dir.path(), None).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), archive(None));
        // With the agent's binary, the archive carries it as `@bootpool-agent`.
        let agent = dir.path().join("bootpool-agent");
        std::fs::write(&agent, b"\x7fELF agent").unwrap();
        publish(dir.path(), Some(&agent)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes, archive(Some(b"\x7fELF agent")));
        let names = crate::image::cpio::names(&bytes);
        assert!(names.contains(&AGENT.as_bytes()), "{names:?}");
        assert!(publish(dir.path(), Some(&dir.path().join("none"))).is_err());
    }
}

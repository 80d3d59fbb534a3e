//! The end-to-end tests' lab config: the shipped pools.yaml pointed at the built demo image
//! and a private state folder.

use std::path::{Path, PathBuf};

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Writes `dir/pools.yaml`: the shipped config with the image and state folder made absolute,
/// then `edit` applied (e.g. to switch DHCP to proxy mode).
pub fn lab_config(dir: &Path, edit: impl Fn(String) -> String) -> PathBuf {
    let shipped = std::fs::read_to_string(repo().join("pools.yaml")).unwrap();
    let image = repo().join("images/demo");
    assert!(
        image.join("rootfs.img").exists(),
        "build the demo image first: images/build-demo.sh"
    );
    let text = shipped
        .replace("dir: images/demo", &format!("dir: {}", image.display()))
        .replace(
            "state_dir: var/",
            &format!("state_dir: {}", dir.join("var").display()),
        );
    let path = dir.join("pools.yaml");
    std::fs::write(&path, edit(text)).unwrap();
    path
}

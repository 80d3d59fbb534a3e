//! `images.NAME.root_wire: zstd`: a squashfs root image made by mksquashfs(1) with gzip is
//! copied with zstd in the background; a boot script handed out after that names the copy's
//! export, `demo~zstd`, whose bytes libnbd's nbdcopy reads, and whose tree unsquashfs(1)
//! lists as the original's (owners, modes, sizes, times) with the same contents and block
//! size; the original's export still serves the original (a client handed it before keeps
//! it). A root image that is not squashfs is served as it is, marked so, and its scripts name
//! the plain export; `demo~zstd` then attaches nothing.

use crate::common::{Fixture, cmd, pattern, run_async, stdout_of};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A squashfs image of a small tree (text that compresses, random bytes that do not, a file
/// of another owner, a symlink) as mksquashfs makes it with gzip and 64 KiB blocks.
pub(crate) fn make_root(dir: &Path) -> std::path::PathBuf {
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("etc")).unwrap();
    std::fs::create_dir_all(tree.join("usr/bin")).unwrap();
    let text: String = (0..60_000)
        .map(|i| format!("line {i} of a root\n"))
        .collect();
    std::fs::write(tree.join("usr/bin/tool"), text).unwrap();
    std::fs::write(tree.join("usr/bin/blob"), pattern(5, 300_000)).unwrap();
    std::fs::write(tree.join("etc/shadow"), "root:*:1:0:99999:7:::\n").unwrap();
    std::os::unix::fs::symlink("../usr/bin/tool", tree.join("etc/link")).unwrap();
    let status = Command::new("chown")
        .args(["1234:42"])
        .arg(tree.join("etc/shadow"))
        .status()
        .unwrap();
    assert!(status.success());
    let image = dir.join("images/demo/rootfs.img");
    let _ = std::fs::remove_file(&image);
    let out = Command::new("mksquashfs")
        .arg(&tree)
        .arg(&image)
        .args([
            "-noappend",
            "-no-progress",
            "-quiet",
            "-comp",
            "gzip",
            "-b",
            "65536",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    image
}

/// `unsquashfs -lln` of an image: every entry with its numeric owner, mode, size and time.
fn listing(image: &Path) -> String {
    let out = stdout_of(cmd("unsquashfs", &["-lln", "-d", "/"]).arg(image), &[]);
    String::from_utf8(out).unwrap()
}

async fn get(url: &str) -> String {
    let (ok, out, err) =
        run_async(cmd("curl", &["-sS", "--fail", "--max-time", "20", url]), 30).await;
    assert!(ok, "{url}: {err}");
    out
}

/// The images API's `root_wire` line of the image once it is no longer pending (60 s at most).
async fn settled(api: &str) -> serde_json::Value {
    crate::common::poll_async(
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async {
            let images: serde_json::Value = serde_json::from_str(&get(api).await).unwrap();
            images[0]["root_wire"].clone()
        },
        |line| line["state"] != "pending",
    )
    .await
}

#[tokio::test]
async fn a_gzip_squashfs_root_goes_out_as_its_zstd_copy_under_its_own_export_name() {
    let fx = Fixture::new();
    let original_path = make_root(fx.path());
    fx.write_config(&fx.loopback().demo("store: disk, root_wire: zstd"));
    let original = std::fs::read(&original_path).unwrap();
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);

    let line = settled(&format!("{base}/api/v1/images")).await;
    assert_eq!(line["state"], "copy", "{line}");
    assert_eq!(line["file_bytes"], original.len() as u64, "{line}");
    let copy_bytes = line["bytes"].as_u64().unwrap();
    assert!(copy_bytes < original.len() as u64, "{line}");

    // A boot starting now is handed the copy's export (52:54:00:77:00:1x: the NBD pool).
    let script = get(&format!("{base}/boot/script/52:54:00:77:00:11.ipxe")).await;
    assert!(script.contains("demo~zstd "), "{script}");

    // libnbd reads the copy by that name: a zstd squashfs of the same tree.
    let got = fx.path().join("got.img");
    let uri = format!("nbd://{}/demo~zstd", daemon.bound.nbd);
    let (ok, _, err) = run_async(cmd("nbdcopy", &[&uri, got.to_str().unwrap()]), 60).await;
    assert!(ok, "{err}");
    let sent = std::fs::read(&got).unwrap();
    assert_eq!(sent.len() as u64, copy_bytes);
    let sb = bootpool::image::squashfs::superblock(&sent).expect("a squashfs image");
    assert_eq!(sb.compressor, bootpool::image::squashfs::Compressor::Zstd);
    assert_eq!(sb.block_size, 65536, "the original's block size");
    assert_eq!(listing(&got), listing(&original_path), "the same tree");
    let cat = |image: &Path, file: &str| {
        stdout_of(cmd("unsquashfs", &["-cat"]).arg(image).arg(file), &[])
    };
    for file in ["usr/bin/tool", "usr/bin/blob", "etc/shadow"] {
        assert_eq!(cat(&got, file), cat(&original_path, file), "{file}");
    }

    // The original's name still serves the original.
    let uri = format!("nbd://{}/demo", daemon.bound.nbd);
    let (ok, _, err) = run_async(cmd("nbdcopy", &[&uri, got.to_str().unwrap()]), 60).await;
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(&got).unwrap(), original);
    daemon.stop().await;
}

#[tokio::test]
async fn a_root_image_that_is_not_squashfs_goes_out_as_it_is_under_its_own_name() {
    // The fixture's root image is random bytes.
    let fx = Fixture::new();
    fx.write_config(&fx.loopback().demo("store: disk, root_wire: zstd"));
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);
    let line = settled(&format!("{base}/api/v1/images")).await;
    assert_eq!(line["state"], "as_is", "{line}");
    assert!(
        line["why"]
            .as_str()
            .unwrap()
            .contains("not a squashfs image"),
        "{line}"
    );
    let script = get(&format!("{base}/boot/script/52:54:00:77:00:11.ipxe")).await;
    assert!(script.contains("demo "), "{script}");
    assert!(!script.contains("~zstd"), "{script}");
    let uri = format!("nbd://{}/demo~zstd", daemon.bound.nbd);
    let (ok, _, _) = run_async(cmd("nbdinfo", &[&uri]), 30).await;
    assert!(!ok, "no copy, no export");
    let uri = format!("nbd://{}/demo", daemon.bound.nbd);
    let (ok, _, err) = run_async(cmd("nbdinfo", &["--size", &uri]), 30).await;
    assert!(ok, "{err}");
    daemon.stop().await;
}

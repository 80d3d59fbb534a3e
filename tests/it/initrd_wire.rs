//! `images.NAME.initrd_wire: zstd`: an initrd made the way initramfs-tools makes one (an
//! uncompressed cpio in front, by cpio(1), then a gzip'd cpio, by gzip(1)) is sent by curl's
//! HTTP and tftp-hpa's TFTP with its front byte for byte and its tail as zstd, which zstd(1)
//! unpacks to the same archive gzip(1) does; rewritten in place, the file is sent as it now
//! is until its new copy is made; an initrd that cannot shrink is sent as it is.

use crate::common::{Fixture, pattern, run_async, stdout_of};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// An initrd as initramfs-tools writes one: `cpio -o -H newc` of a fake microcode file,
/// then the same of a small tree, gzip'd. Returns the front's length.
fn make_initrd(dir: &Path, seed: u64) -> usize {
    let tree = dir.join(format!("tree{seed}"));
    std::fs::create_dir_all(tree.join("early/kernel/x86/microcode")).unwrap();
    std::fs::create_dir_all(tree.join("main/bin")).unwrap();
    std::fs::write(
        tree.join("early/kernel/x86/microcode/GenuineIntel.bin"),
        pattern(seed, 5000),
    )
    .unwrap();
    // Text compresses (as an initrd's programs and modules do); the pattern does not.
    let text: String = (0..40_000)
        .map(|i| format!("line {i} of {seed}\n"))
        .collect();
    std::fs::write(tree.join("main/init"), text).unwrap();
    std::fs::write(tree.join("main/bin/blob"), pattern(seed + 1, 20_000)).unwrap();
    let cpio = |sub: &str| {
        let sh = format!("cd {} && find . | sort | cpio -o -H newc --quiet", sub);
        stdout_of(Command::new("sh").arg("-c").arg(sh).current_dir(&tree), &[])
    };
    let front = cpio("early");
    let zipped = stdout_of(Command::new("gzip").arg("-9c"), &cpio("main"));
    let mut initrd = front.clone();
    initrd.extend(zipped);
    std::fs::write(dir.join("images/demo/initrd.img"), initrd).unwrap();
    front.len()
}

/// `tool -dc` of `bytes`.
fn unpack(tool: &str, bytes: &[u8]) -> Vec<u8> {
    stdout_of(Command::new(tool).arg("-dc"), bytes)
}

async fn http_get(url: &str, out: &Path) -> Vec<u8> {
    let mut curl = Command::new("curl");
    curl.args(["-sS", "--fail", "--max-time", "20", "-o"])
        .arg(out)
        .arg(url);
    let (ok, _, err) = run_async(curl, 30).await;
    assert!(ok, "{err}");
    std::fs::read(out).unwrap()
}

#[tokio::test]
async fn a_gzip_initrd_goes_out_as_zstd_by_http_and_tftp_and_a_rewrite_goes_out_as_it_is() {
    let fx = Fixture::new();
    let front = make_initrd(fx.path(), 7);
    fx.write_config(&fx.loopback().demo("store: disk, initrd_wire: zstd"));
    let original = std::fs::read(fx.image_dir().join("initrd.img")).unwrap();
    let daemon = fx.start().await;
    let url = format!("http://{}/boot/demo/initrd.img", daemon.bound.http);
    let got = fx.path().join("got");

    // The copy is made in the background: the original until then, then the copy.
    let sent = crate::common::poll_async(
        Duration::from_secs(60),
        Duration::from_millis(200),
        || http_get(&url, &got),
        |sent| *sent != original,
    )
    .await;
    assert!(
        sent.len() < original.len(),
        "still the original's {} bytes after 60 s",
        original.len()
    );
    assert_eq!(&sent[..front], &original[..front], "the front is kept");
    assert_eq!(
        &sent[front..front + 4],
        &[0x28, 0xb5, 0x2f, 0xfd],
        "a zstd tail"
    );
    assert_eq!(
        unpack("zstd", &sent[front..]),
        unpack("gzip", &original[front..]),
        "zstd unpacks the archive gzip did"
    );
    // The images API says what goes out.
    let api = format!("http://{}/api/v1/images", daemon.bound.http);
    let body = String::from_utf8(http_get(&api, &fx.path().join("images.json")).await).unwrap();
    let images: serde_json::Value = serde_json::from_str(&body).unwrap();
    let line = &images[0]["initrd_wire"];
    assert_eq!(line["state"], "copy", "{body}");
    assert_eq!(line["bytes"], sent.len() as u64, "{body}");
    assert_eq!(line["file_bytes"], original.len() as u64, "{body}");
    assert!(
        bootpool_instruments::lab::wire_wait::wire_pending(&body)
            .unwrap()
            .is_empty()
    );
    // One file behind both protocols.
    let tftp_out = fx.path().join("got.tftp");
    let addr = daemon.bound.tftp.unwrap();
    let mut tftp = Command::new("tftp");
    tftp.args([
        "-m",
        "octet",
        &addr.ip().to_string(),
        &addr.port().to_string(),
    ])
    .args(["-c", "get", "demo/initrd.img", tftp_out.to_str().unwrap()]);
    let (ok, out, err) = run_async(tftp, 30).await;
    assert!(ok, "{out}{err}");
    assert_eq!(std::fs::read(&tftp_out).unwrap(), sent);

    // Rewritten in place (a new build): sent as it now is, never the old copy.
    make_initrd(fx.path(), 8);
    let rewritten = std::fs::read(fx.image_dir().join("initrd.img")).unwrap();
    assert_ne!(rewritten, original);
    let now = http_get(&url, &got).await;
    assert_ne!(now, sent, "the old copy went out for the new file");
    if now != rewritten {
        // The next scan came first: then it is the new file's copy.
        assert_eq!(
            unpack("zstd", &now[front..]),
            unpack("gzip", &rewritten[front..])
        );
    }
    daemon.stop().await;
}

#[tokio::test]
async fn an_initrd_that_is_not_gzip_is_sent_as_it_is_and_marked_so() {
    // The fixture's initrd is random bytes: no cpio archive, no compressor's magic.
    let fx = Fixture::new();
    fx.write_config(&fx.loopback().demo("store: disk, initrd_wire: zstd"));
    let daemon = fx.start().await;
    let wire = fx.path().join("var/wire");
    let marks = crate::common::poll_async(
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async {
            std::fs::read_dir(&wire)
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| n.ends_with(".as_is"))
                        .collect::<Vec<String>>()
                })
                .unwrap_or_default()
        },
        |marks| !marks.is_empty(),
    )
    .await;
    assert_eq!(marks.len(), 1, "{marks:?}");
    let why = std::fs::read_to_string(wire.join(&marks[0])).unwrap();
    assert!(why.contains("neither a cpio archive"), "{why}");
    let url = format!("http://{}/boot/demo/initrd.img", daemon.bound.http);
    let sent = http_get(&url, &fx.path().join("got")).await;
    assert_eq!(sent, pattern(2, 2 << 20));
    let api = format!("http://{}/api/v1/images", daemon.bound.http);
    let body = String::from_utf8(http_get(&api, &fx.path().join("images.json")).await).unwrap();
    let images: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(images[0]["initrd_wire"]["state"], "as_is", "{body}");
    let why = images[0]["initrd_wire"]["why"].as_str().unwrap();
    assert!(
        why.starts_with("byte 0 is neither a cpio archive"),
        "{body}"
    );
    daemon.stop().await;
}

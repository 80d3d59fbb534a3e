//! Revisions pulled between servers (docs/chunks.md, `bootpool image pull`): a running
//! daemon serves a revision's manifest and objects to a second server's `image pull`, which
//! builds the same revision (its manifest byte for byte, every file's bytes; an older
//! revision's manifest made on first ask as its import wrote it); a revision
//! differing by one file moves about that file's bytes; an object corrupted or truncated on
//! the source is refused (never linked into the puller's store), and fetched again from a
//! second member, which asks its read token.

use crate::common::{Fixture, pattern, run};
use std::path::Path;
use std::process::Command;

/// A fixture whose `demo` is an image with revisions booted by NFS only (no squashfs),
/// with `server` keys added.
fn fixture(server: &str) -> Fixture {
    let fx = Fixture::new();
    std::fs::remove_dir_all(fx.image_dir()).unwrap();
    let mut l = fx.loopback().without_pool("nbd-room");
    if !server.is_empty() {
        l = l.server(server);
    }
    fx.write_config(&l);
    fx
}

/// A tree of 30 files of 20 to 50 KB, a 1 MiB file, a symlink, an init, a kernel and an
/// initrd.
fn tree(at: &Path) {
    for i in 0..30u64 {
        let dir = at.join(format!("usr/lib/d{}", i % 3));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("lib{i}.so")),
            pattern(500 + i, 20_000 + i as usize * 1000),
        )
        .unwrap();
    }
    for d in ["etc", "boot", "sbin"] {
        std::fs::create_dir_all(at.join(d)).unwrap();
    }
    // A manifest has a line per entry: 5,000 links (no objects to fetch) make it about
    // 500 KB, so a pull that sent it whole would move half again a 1 MiB change.
    let links = at.join("usr/share/links");
    std::fs::create_dir_all(&links).unwrap();
    for i in 0..5000 {
        std::os::unix::fs::symlink(
            format!("../../lib/d{}/lib{i}.so", i % 3),
            links.join(format!("l{i}")),
        )
        .unwrap();
    }
    std::fs::write(at.join("etc/big"), pattern(1, 1 << 20)).unwrap();
    std::fs::write(at.join("etc/other"), pattern(2, 256 << 10)).unwrap();
    std::os::unix::fs::symlink("usr/lib", at.join("lib")).unwrap();
    std::fs::write(at.join("boot/vmlinuz-6.1.0-1"), pattern(3, 300_000)).unwrap();
    std::fs::write(at.join("boot/initrd.img-6.1.0-1"), pattern(4, 200_000)).unwrap();
    std::fs::write(at.join("sbin/init"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        at.join("sbin/init"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
}

/// `bootpool image ARGS` on `fx`'s config, with `env`.
fn image(fx: &Fixture, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.arg("image")
        .args(args)
        .arg("--config")
        .arg(fx.config_path())
        .current_dir(fx.path())
        .env_remove("BOOTPOOL_READ_TOKEN");
    for (k, v) in env {
        c.env(k, v);
    }
    tokio::task::block_in_place(|| run(&mut c, 300))
}

fn ok(fx: &Fixture, args: &[&str], env: &[(&str, &str)]) -> String {
    let (ok, out, err) = image(fx, args, env);
    assert!(ok, "bootpool image {args:?}\n{out}\n{err}");
    out
}

/// The id of the revision `out` (an import's or a pull's output) names: `rN (ID)`.
fn id_in(out: &str) -> String {
    let at = out.find(") from ").expect(out);
    out[at - 12..at].to_string()
}

/// The bytes a pull's output says it moved.
fn moved(out: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.contains("byte(s) moved"))
        .expect(out);
    line.split(": ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Every file of revision `id` in `a` and `b` has the same bytes, and the manifests match.
fn same_revision(a: &Fixture, b: &Fixture, id: &str) {
    let (ra, rb) = (
        a.image_dir().join("revs").join(id),
        b.image_dir().join("revs").join(id),
    );
    let ma = std::fs::read(ra.join("manifest")).unwrap();
    assert_eq!(ma, std::fs::read(rb.join("manifest")).unwrap());
    let m = bootpool::image::manifest::Manifest::decode(&ma).unwrap();
    let mut files = 0;
    for e in &m.entries {
        let rel = std::str::from_utf8(&e.path).unwrap();
        if matches!(e.kind, bootpool::image::manifest::Kind::File(_)) {
            assert_eq!(
                std::fs::read(ra.join(rel)).unwrap(),
                std::fs::read(rb.join(rel)).unwrap(),
                "{rel}"
            );
            files += 1;
        }
    }
    assert_eq!(
        files,
        30 + 2 + 3 + 2,
        "the tree's files, the kernel and initrd"
    );
}

fn object_of(fx: &Fixture, bytes: &[u8]) -> Option<std::path::PathBuf> {
    use sha2::Digest as _;
    let d: [u8; 32] = sha2::Sha256::digest(bytes).into();
    bootpool::image::objects::find(&fx.image_dir(), &d)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pull_moves_what_changed_and_refuses_a_corrupt_or_truncated_object() {
    let (a, b) = (fixture(""), fixture(""));
    let c = fixture("read_token: pull-secret-0123456789");
    let src = a.path().join("src");
    tree(&src);
    let from = src.to_str().unwrap();
    let r1 = id_in(&ok(&a, &["import", "demo", "--from", from], &[]));
    let server_a = a.start().await;
    let url_a = format!("http://{}", server_a.bound.http);

    // r1 as a revision imported before manifests were written: the member makes its
    // manifest when first asked, and keeps it.
    let kept = a.image_dir().join("revs").join(&r1).join("manifest");
    let written = std::fs::read(&kept).unwrap();
    std::fs::remove_file(&kept).unwrap();
    // The first pull moves everything once: the manifest and each object.
    let out = ok(&b, &["pull", "demo", "--from", &url_a], &[]);
    assert!(
        out.contains(&format!("pulled r1 ({r1})")) && out.contains("r1 is active"),
        "{out}"
    );
    assert_eq!(std::fs::read(&kept).unwrap(), written);
    same_revision(&a, &b, &r1);
    // Each content once: the kernel and initrd are the tree's /boot files, linked.
    let m = bootpool::image::manifest::Manifest::decode(
        &std::fs::read(b.image_dir().join("revs").join(&r1).join("manifest")).unwrap(),
    )
    .unwrap();
    let mut contents = std::collections::HashMap::new();
    for e in &m.entries {
        if let bootpool::image::manifest::Kind::File(d) = e.kind {
            contents.insert(d, e.size);
        }
    }
    let once: u64 = contents.values().sum();
    assert!(once < m.file_bytes() && moved(&out) > once, "{out}");
    assert!(out.contains("2 file(s) linked"), "{out}");

    // One file changed: about its bytes move.
    let changed = pattern(11, 1 << 20);
    std::fs::write(src.join("etc/big"), &changed).unwrap();
    let r2 = id_in(&ok(&a, &["import", "demo", "--from", from], &[]));
    let out = ok(&b, &["pull", "demo", "--rev", &r2, "--from", &url_a], &[]);
    assert!(
        out.contains(&format!("({r2}) from")) && out.contains("1 file(s) fetched"),
        "{out}"
    );
    let n = moved(&out);
    eprintln!(
        "a one-file update moved {n} bytes for a {} byte change",
        changed.len()
    );
    assert!(
        n >= changed.len() as u64 && n * 100 <= changed.len() as u64 * 105,
        "{n} bytes moved for a {} byte change\n{out}",
        changed.len()
    );
    same_revision(&a, &b, &r2);
    let again = ok(&b, &["pull", "demo", "--rev", &r2, "--from", &url_a], &[]);
    assert!(again.contains("is here already"), "{again}");

    // r3 on a and on c; a's copy of its new object corrupted (same length), then truncated.
    let other = pattern(12, 256 << 10);
    std::fs::write(src.join("etc/other"), &other).unwrap();
    let r3 = id_in(&ok(&a, &["import", "demo", "--from", from], &[]));
    let copy_c = c.path().join("src");
    let (okc, _, err) = run(Command::new("cp").arg("-a").arg(&src).arg(&copy_c), 60);
    assert!(okc, "{err}");
    ok(
        &c,
        &["import", "demo", "--from", copy_c.to_str().unwrap()],
        &[],
    );
    assert_eq!(
        bootpool::image::store::list(&c.image_dir()).unwrap()[0].id,
        r3,
        "the same tree is the same revision on another server"
    );
    let on_a = object_of(&a, &other).expect("r3's new object on a");
    let mut bad = other.clone();
    bad[1000] ^= 0xff;
    std::fs::write(&on_a, &bad).unwrap();
    let (pulled, out, err) = image(&b, &["pull", "demo", "--rev", &r3, "--from", &url_a], &[]);
    assert!(!pulled, "{out}\n{err}");
    assert!(
        err.contains("refused") && err.contains("not its digest"),
        "{err}"
    );
    let nothing = |why: &str| {
        assert!(
            bootpool::image::store::read(&b.image_dir(), &r3)
                .unwrap()
                .is_none(),
            "{why}: no r3 on b"
        );
        assert!(
            object_of(&b, &bad).is_none() && object_of(&b, &other).is_none(),
            "{why}"
        );
        let left: Vec<_> = std::fs::read_dir(b.image_dir())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".pull-"))
            .collect();
        assert!(left.is_empty(), "{why}: the build folder is gone");
    };
    nothing("corrupt");
    std::fs::write(&on_a, &other[..100_000]).unwrap();
    let (pulled, out, err) = image(&b, &["pull", "demo", "--rev", &r3, "--from", &url_a], &[]);
    assert!(!pulled, "{out}\n{err}");
    assert!(err.contains("100000 bytes, not 262144"), "{err}");
    nothing("truncated");

    // c asks its read token: without it the pull is refused, with it c gives the good copy.
    let server_c = c.start().await;
    let url_c = format!("http://{}", server_c.bound.http);
    let (pulled, _, err) = image(&b, &["pull", "demo", "--rev", &r3, "--from", &url_c], &[]);
    assert!(!pulled && err.contains("401"), "{err}");
    let token = [("BOOTPOOL_READ_TOKEN", "pull-secret-0123456789")];
    let out = ok(
        &b,
        &[
            "pull", "demo", "--rev", &r3, "--from", &url_a, "--from", &url_c,
        ],
        &token,
    );
    assert!(
        out.contains("1 file(s) fetched") && out.contains("1 copy(ies) refused"),
        "{out}"
    );
    let rb = b
        .image_dir()
        .join("revs")
        .join(&r3)
        .join("rootfs/etc/other");
    assert_eq!(std::fs::read(rb).unwrap(), other);
    drop(server_a);
    drop(server_c);
}

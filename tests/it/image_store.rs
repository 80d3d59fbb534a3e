//! Revisions through the image's content-addressed store (docs/chunks.md), run as the
//! commands: two revisions that differ by one file share the inode of every other file, and
//! the image folder grows (by `du`) by about the changed file; libnfs's nfs-cat reads each
//! revision's own bytes from the running daemon; prune, once the old revision is not active,
//! frees the objects only it held and nothing the new one links. `bootpool image exec` runs a
//! real command (busybox's sh, chrooted in an overlay over the active revision) and makes a
//! new revision with its change that shares the rest, not active, and clears what a killed
//! exec left (its overlay unmounted); a failing command makes none and says its exit status
//! and last line.

use crate::common::{Fixture, run, run_async};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The fixture with `demo` an image with revisions, booted by NFS only (no squashfs).
fn fixture() -> Fixture {
    let fx = Fixture::new();
    std::fs::remove_dir_all(fx.image_dir()).unwrap();
    fx.write_config(&fx.loopback().without_pool("nbd-room"));
    fx
}

fn bootpool(fx: &Fixture, args: &[&str]) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.arg("image")
        .args(args)
        .arg("--config")
        .arg(fx.config_path())
        .current_dir(fx.path());
    run(&mut c, 300)
}

/// `bootpool image ARGS` that must succeed; its stdout.
fn ok(fx: &Fixture, args: &[&str]) -> String {
    let (ok, out, err) = bootpool(fx, args);
    assert!(ok, "bootpool image {args:?}\n{out}\n{err}");
    out
}

/// A tree of 40 text files of 50 KB in a few folders, a hostname, a kernel and an initrd.
fn tree(at: &Path, hostname: &str) {
    for d in 0..4 {
        let dir = at.join(format!("usr/share/d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..10 {
            let line = format!("folder {d} file {f}: the same in every revision\n");
            std::fs::write(dir.join(format!("f{f}")), line.repeat(50_000 / line.len())).unwrap();
        }
    }
    std::fs::create_dir_all(at.join("etc")).unwrap();
    std::fs::create_dir_all(at.join("boot")).unwrap();
    std::fs::write(
        at.join("etc/hostname"),
        format!("{hostname}\n").repeat(4000),
    )
    .unwrap();
    std::fs::write(at.join("boot/vmlinuz-6.1.0-1"), b"kernel".repeat(1000)).unwrap();
    std::fs::write(at.join("boot/initrd.img-6.1.0-1"), b"initrd".repeat(1000)).unwrap();
    // An init, as an import asks of a tree (`image::bootable`).
    std::fs::create_dir_all(at.join("sbin")).unwrap();
    std::fs::write(at.join("sbin/init"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        at.join("sbin/init"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
}

/// The revision ids, oldest first.
fn revs(fx: &Fixture) -> Vec<String> {
    bootpool::image::store::list(&fx.image_dir())
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect()
}

fn rootfs(fx: &Fixture, id: &str) -> PathBuf {
    fx.image_dir().join("revs").join(id).join("rootfs")
}

/// Every regular file under `root`, relative, with its inode.
fn files(root: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                out.push((e.path().strip_prefix(root).unwrap().to_path_buf(), m.ino()));
            }
        }
    }
    out.sort();
    out
}

/// Kilobytes on disk under `path`, as du(1) counts them (a hard-linked inode once).
fn du_kb(path: &Path) -> u64 {
    let mut c = Command::new("du");
    c.arg("-sk").arg(path);
    let (ok, out, err) = run(&mut c, 60);
    assert!(ok, "{err}");
    out.split_whitespace().next().unwrap().parse().unwrap()
}

fn objects(fx: &Fixture) -> usize {
    let mut n = 0;
    let root = fx.image_dir().join("objects/sha256");
    for fan in std::fs::read_dir(root).unwrap().flatten() {
        n += std::fs::read_dir(fan.path()).unwrap().count();
    }
    n
}

async fn nfs_cat(addr: std::net::SocketAddr, path: &str) -> String {
    let p = addr.port();
    let mut c = Command::new("nfs-cat");
    c.arg(format!(
        "nfs://127.0.0.1{path}?nfsport={p}&mountport={p}&version=3"
    ));
    let (ok, out, err) = run_async(c, 60).await;
    assert!(ok, "nfs-cat {path}: {err}");
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_one_file_change_costs_that_file_shares_every_other_inode_and_prune_frees_only_the_old() {
    let fx = fixture();
    let src = fx.path().join("src");
    tree(&src, "one");
    let out = tokio::task::block_in_place(|| {
        ok(&fx, &["import", "demo", "--from", src.to_str().unwrap()])
    });
    assert!(out.contains("imported r1"), "{out}");
    let r1 = revs(&fx)[0].clone();
    assert!(
        !fx.image_dir()
            .join("revs")
            .join(&r1)
            .join("rootfs.img")
            .exists(),
        "no NBD pool boots demo: no squashfs"
    );
    let before = du_kb(&fx.image_dir());

    // One file changed (about 16 KB): r2 adds about that.
    std::fs::write(src.join("etc/hostname"), "two\n".repeat(4000)).unwrap();
    let out = tokio::task::block_in_place(|| {
        ok(&fx, &["import", "demo", "--from", src.to_str().unwrap()])
    });
    assert!(
        out.contains("imported r2") && out.contains("1 file(s) stored anew"),
        "{out}"
    );
    let r2 = revs(&fx).into_iter().find(|i| *i != r1).unwrap();
    let grown = du_kb(&fx.image_dir()) - before;
    let tree_kb = du_kb(&rootfs(&fx, &r1));
    // The changed file (16 KB) plus the new revision's folders and record; never the tree.
    assert!(
        (16..16 + 64).contains(&grown),
        "r2 grew the image folder by {grown} KB (the tree is {tree_kb} KB)"
    );
    let (a, b) = (files(&rootfs(&fx, &r1)), files(&rootfs(&fx, &r2)));
    assert_eq!(
        a.len(),
        44,
        "40 files, a hostname, an init, a kernel and an initrd"
    );
    assert_eq!(a.len(), b.len());
    for ((pa, ia), (pb, ib)) in a.iter().zip(&b) {
        assert_eq!(pa, pb);
        if pa == Path::new("etc/hostname") {
            assert_ne!(ia, ib, "the changed file is its own");
        } else {
            assert_eq!(ia, ib, "{} shares its inode", pa.display());
        }
    }

    // A real NFS client reads each revision's own bytes from the running daemon.
    let daemon = fx.start().await;
    let nfs = daemon.bound.nfs;
    for (id, host) in [(&r1, "one"), (&r2, "two")] {
        assert_eq!(
            nfs_cat(nfs, &format!("/demo@{id}/etc/hostname")).await,
            format!("{host}\n").repeat(4000)
        );
        let line = "folder 3 file 7: the same in every revision\n";
        assert_eq!(
            nfs_cat(nfs, &format!("/demo@{id}/usr/share/d3/f7")).await,
            line.repeat(50_000 / line.len())
        );
    }
    drop(daemon);

    // r2 active: prune removes r1 and frees the one object only r1 linked.
    let n = objects(&fx);
    tokio::task::block_in_place(|| ok(&fx, &["activate", "demo", "r2"]));
    let before = du_kb(&fx.image_dir());
    let out = tokio::task::block_in_place(|| ok(&fx, &["prune", "demo"]));
    assert!(
        out.contains("removed r1") && out.contains("freed 1 stored file(s)"),
        "{out}"
    );
    assert_eq!(revs(&fx), std::slice::from_ref(&r2));
    assert_eq!(objects(&fx), n - 1);
    let freed = before - du_kb(&fx.image_dir());
    assert!((16..16 + 64).contains(&freed), "prune freed {freed} KB");
    // Every file of r2 is still whole, linked by the store and its tree only (the kernel
    // and initrd are /boot's files too: one more link).
    for (p, _) in files(&rootfs(&fx, &r2)) {
        let m = std::fs::metadata(rootfs(&fx, &r2).join(&p)).unwrap();
        let want = if p.starts_with("boot") { 3 } else { 2 };
        assert_eq!(m.nlink(), want, "{}", p.display());
    }
    assert_eq!(
        std::fs::read_to_string(rootfs(&fx, &r2).join("etc/hostname")).unwrap(),
        "two\n".repeat(4000)
    );
}

/// A root tree of busybox (static) and its applets, with /etc/motd.
fn busybox_tree(at: &Path) {
    for d in ["bin", "etc", "boot", "tmp"] {
        std::fs::create_dir_all(at.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", at.join("bin/busybox")).unwrap();
    let mut c = Command::new("chroot");
    c.arg(at).args(["/bin/busybox", "--install", "-s", "/bin"]);
    let (ok, out, err) = run(&mut c, 60);
    assert!(ok, "{out}\n{err}");
    std::fs::write(at.join("etc/motd"), "before\n").unwrap();
    std::fs::write(at.join("boot/vmlinuz-6.1.0-1"), b"kernel".repeat(1000)).unwrap();
    std::fs::write(at.join("boot/initrd.img-6.1.0-1"), b"initrd".repeat(1000)).unwrap();
    // An init, as an import asks of a tree (`image::bootable`).
    std::fs::create_dir_all(at.join("sbin")).unwrap();
    std::os::unix::fs::symlink("/bin/busybox", at.join("sbin/init")).unwrap();
}

#[test]
fn exec_makes_a_revision_with_the_commands_change_sharing_the_rest_and_a_failure_makes_none() {
    let fx = fixture();
    let src = fx.path().join("src");
    busybox_tree(&src);
    ok(&fx, &["import", "demo", "--from", src.to_str().unwrap()]);
    let r1 = revs(&fx)[0].clone();

    // What a killed exec left: its overlay, still mounted (no process has pid 2^22).
    let left = fx.image_dir().join(".exec-4194304");
    for d in ["upper", "work", "merged", "lower"] {
        std::fs::create_dir_all(left.join(d)).unwrap();
    }
    let opts = format!(
        "lowerdir={0}/lower,upperdir={0}/upper,workdir={0}/work",
        left.display()
    );
    let mut c = Command::new("mount");
    c.args(["-t", "overlay", "overlay", "-o", &opts])
        .arg(left.join("merged"));
    let (mounted, _, err) = run(&mut c, 30);
    assert!(mounted, "{err}");

    let out = ok(
        &fx,
        &[
            "exec",
            "demo",
            "--",
            "sh",
            "-c",
            "echo x > /etc/motd; echo changed",
        ],
    );
    assert!(
        out.contains("imported r2") && out.contains("exec on r1"),
        "{out}"
    );
    assert!(out.contains("bootpool image activate demo r2"), "{out}");
    assert!(
        !left.exists(),
        "a killed exec's overlay is unmounted and removed"
    );
    let ids = revs(&fx);
    assert_eq!(ids.len(), 2);
    let r2 = ids[1].clone();
    let active = std::fs::read_to_string(fx.image_dir().join("active")).unwrap();
    assert_eq!(active.trim(), r1, "not active until activated");
    let (t1, t2) = (rootfs(&fx, &r1), rootfs(&fx, &r2));
    assert_eq!(std::fs::read_to_string(t2.join("etc/motd")).unwrap(), "x\n");
    assert_eq!(
        std::fs::read_to_string(t1.join("etc/motd")).unwrap(),
        "before\n"
    );
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    assert_eq!(ino(&t1.join("bin/busybox")), ino(&t2.join("bin/busybox")));
    assert_eq!(
        std::fs::read_link(t2.join("bin/sh")).unwrap(),
        Path::new("/bin/busybox")
    );
    // The mount points the command got are not in the new revision.
    assert!(!t2.join("proc").exists() && !t2.join("dev").exists());
    // No overlay or work folder is left.
    let left: Vec<_> = std::fs::read_dir(fx.image_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".exec") || n.starts_with(".import"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    let (ok_, out, err) = bootpool(
        &fx,
        &[
            "exec",
            "demo",
            "--",
            "sh",
            "-c",
            "echo touched > /etc/motd; echo no space left >&2; exit 3",
        ],
    );
    assert!(!ok_, "{out}");
    assert!(
        err.contains("exit status 3")
            && err.contains("no revision made")
            && err.contains("no space left"),
        "{err}"
    );
    assert_eq!(revs(&fx), ids, "a failed command leaves no revision");
    assert_eq!(
        std::fs::read_to_string(t1.join("etc/motd")).unwrap(),
        "before\n"
    );
}

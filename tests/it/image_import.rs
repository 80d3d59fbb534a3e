//! `bootpool image import|list|activate|rollback|prune`, run as the command, on sources made
//! by real tools: a folder tree, tarballs from GNU tar (plain and gzip), OCI and docker
//! archives built by a small Python script (tarfile, gzip, hashlib), checked with unsquashfs;
//! and bad sources (no kernel, `..`, a write through a symlink, a device node, a truncated or
//! corrupt archive), each of which must fail naming the problem and change nothing.

use crate::common::{Fixture, pattern, run, stdout_of};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The fixture plus an image `sys` whose folder holds revisions.
fn fixture() -> Fixture {
    let fx = Fixture::new();
    fx.write_config(
        &fx.loopback()
            .images("sys: { dir: images/sys, store: disk }"),
    );
    fx
}

/// `fixture`, with an NBD pool booting `sys` (so its revisions get a squashfs image).
fn fixture_nbd() -> Fixture {
    let fx = fixture();
    let text = fx
        .loopback()
        .images("sys: { dir: images/sys, store: disk }")
        .to_string()
        + "  sys-nbd:\n    image: sys\n    root: nbd\n    clients:\n      - { macs: \"52:54:00:77:00:20-52:54:00:77:00:2f\" }\n";
    fx.write_config(&text);
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

fn sh(script: &str) {
    let (ok, out, err) = run(Command::new("sh").arg("-ec").arg(script), 120);
    assert!(ok, "{script}\n{out}\n{err}");
}

/// A root tree with two kernels in /boot (the newer, by version, is taken), a symlink, a
/// hard link, a setuid file and /dev/null.
fn tree(at: &Path, hostname: &str) {
    for d in ["etc", "usr/bin", "boot", "dev", "var/empty", "sbin"] {
        std::fs::create_dir_all(at.join(d)).unwrap();
    }
    init(at);
    std::fs::write(at.join("etc/hostname"), format!("{hostname}\n")).unwrap();
    std::fs::write(at.join("usr/bin/tool"), pattern(7, 300_000)).unwrap();
    std::fs::write(at.join("boot/vmlinuz-6.1.0-2-amd64"), pattern(20, 5000)).unwrap();
    std::fs::write(at.join("boot/initrd.img-6.1.0-2-amd64"), pattern(21, 5000)).unwrap();
    std::fs::write(at.join("boot/vmlinuz-6.1.0-10-amd64"), pattern(22, 7000)).unwrap();
    std::fs::write(at.join("boot/initrd.img-6.1.0-10-amd64"), pattern(23, 7000)).unwrap();
    std::os::unix::fs::symlink("usr/bin", at.join("bin")).unwrap();
    std::fs::hard_link(at.join("usr/bin/tool"), at.join("usr/bin/tool2")).unwrap();
    sh(&format!(
        "chmod 4755 {0}/usr/bin/tool; mknod -m 666 {0}/dev/null c 1 3",
        at.display()
    ));
}

/// An executable /sbin/init, so the tree can boot (`image import` refuses one without).
fn init(at: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(at.join("sbin")).unwrap();
    std::fs::write(at.join("sbin/init"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(at.join("sbin/init"), std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn revs(fx: &Fixture) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(fx.path().join("images/sys/revs"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn active(fx: &Fixture) -> String {
    std::fs::read_to_string(fx.path().join("images/sys/active"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn rev_dir(fx: &Fixture, id: &str) -> PathBuf {
    fx.path().join("images/sys/revs").join(id)
}

/// A file of the squashfs image, read back by unsquashfs.
fn squashfs_cat(img: &Path, file: &str) -> Vec<u8> {
    stdout_of(
        Command::new("unsquashfs").arg("-cat").arg(img).arg(file),
        &[],
    )
}

#[test]
fn a_tree_and_its_tarballs_are_one_revision_then_activate_and_rollback() {
    let fx = fixture_nbd();
    let src = fx.path().join("src");
    tree(&src, "one");
    let (ok, out, err) = bootpool(&fx, &["import", "sys", "--from", src.to_str().unwrap()]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("imported r1"), "{out}");
    let ids = revs(&fx);
    assert_eq!(ids.len(), 1);
    let r1 = ids[0].clone();
    assert_eq!(active(&fx), r1, "the first revision is activated");
    let d = rev_dir(&fx, &r1);
    // The newest kernel by version (10 > 2), with its initrd.
    assert_eq!(std::fs::read(d.join("vmlinuz")).unwrap(), pattern(22, 7000));
    assert_eq!(
        std::fs::read(d.join("initrd.img")).unwrap(),
        pattern(23, 7000)
    );
    // The NFS tree, as it was: content, set-id mode, the link, the hard link, the device.
    assert_eq!(
        std::fs::read_to_string(d.join("rootfs/etc/hostname")).unwrap(),
        "one\n"
    );
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let tool = std::fs::metadata(d.join("rootfs/usr/bin/tool")).unwrap();
    assert_eq!(tool.permissions().mode() & 0o7777, 0o4755);
    let tool2 = std::fs::metadata(d.join("rootfs/usr/bin/tool2")).unwrap();
    assert_eq!(tool.ino(), tool2.ino(), "the hard link kept");
    assert_eq!(
        std::fs::read_link(d.join("rootfs/bin")).unwrap(),
        Path::new("usr/bin")
    );
    assert_eq!(
        std::fs::metadata(d.join("rootfs/dev/null")).unwrap().rdev(),
        libc::makedev(1, 3)
    );
    // The NBD image holds the same tree.
    assert_eq!(
        squashfs_cat(&d.join("rootfs.img"), "etc/hostname"),
        b"one\n"
    );
    assert_eq!(
        squashfs_cat(&d.join("rootfs.img"), "usr/bin/tool"),
        pattern(7, 300_000)
    );

    // The same content from GNU tar, plain and gzip'd: the same revision, nothing added.
    for (name, flags) in [("src.tar", "-cf"), ("src.tar.gz", "-czf")] {
        let tarball = fx.path().join(name);
        sh(&format!(
            "tar --numeric-owner -C {} {flags} {} .",
            src.display(),
            tarball.display()
        ));
        let (ok, out, err) = bootpool(&fx, &["import", "sys", "--from", tarball.to_str().unwrap()]);
        assert!(ok, "{out}\n{err}");
        assert!(out.contains("same content as r1"), "{name}: {out}");
        assert_eq!(revs(&fx), std::slice::from_ref(&r1));
    }

    // Changed content: r2, not active until asked.
    std::fs::write(src.join("etc/hostname"), "two\n").unwrap();
    let tarball = fx.path().join("two.tar.gz");
    sh(&format!(
        "tar -C {} -czf {} .",
        src.display(),
        tarball.display()
    ));
    let (ok, out, err) = bootpool(&fx, &["import", "sys", "--from", tarball.to_str().unwrap()]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("imported r2"), "{out}");
    let r2 = revs(&fx).into_iter().find(|i| *i != r1).unwrap();
    assert_eq!(active(&fx), r1);
    assert_eq!(
        std::fs::read_to_string(rev_dir(&fx, &r2).join("rootfs/etc/hostname")).unwrap(),
        "two\n"
    );
    let (ok, out, _) = bootpool(&fx, &["list", "sys"]);
    assert!(
        ok && out.contains("r1") && out.contains("r2") && out.contains(&r2),
        "{out}"
    );

    let (ok, out, err) = bootpool(&fx, &["activate", "sys", "r2"]);
    assert!(ok, "{out}\n{err}");
    assert_eq!(active(&fx), r2);
    let (ok, out, err) = bootpool(&fx, &["rollback", "sys"]);
    assert!(ok && out.contains("rolled back to r1"), "{out}\n{err}");
    assert_eq!(active(&fx), r1);
    let (ok, _, err) = bootpool(&fx, &["activate", "sys", "r9"]);
    assert!(!ok && err.contains("no revision `r9`"), "{err}");

    // No boot has used r2 and it is not active: prune removes it, and only it.
    let (ok, out, err) = bootpool(&fx, &["prune", "sys"]);
    assert!(ok, "{out}\n{err}");
    assert!(
        out.contains("removed r2") && out.contains("keeping r1"),
        "{out}"
    );
    assert_eq!(revs(&fx), [r1]);
}

/// Builds an OCI image archive (`oci`) or a docker-save archive (`docker`) with Python: a
/// base layer, then a gzip'd layer that whites out `etc/gone`, makes `opt/dir` opaque (its
/// lower `a` and `b` go, its own `c` stays) and rewrites `etc/hostname`.
fn image_archive(fx: &Fixture, kind: &str, corrupt: bool) -> PathBuf {
    let out = fx.path().join(format!("{kind}.tar"));
    let script = r#"
import gzip, hashlib, io, json, sys, tarfile
kind, out, corrupt = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
def layer(entries):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data in entries:
            i = tarfile.TarInfo(name)
            if data is None:
                i.type = tarfile.DIRTYPE; i.mode = 0o755
                t.addfile(i)
            else:
                i.size = len(data); i.mode = 0o755 if name == "sbin/init" else 0o644
                t.addfile(i, io.BytesIO(data))
    return b.getvalue()
base = layer([("sbin", None), ("sbin/init", b"exec sh\n"),
              ("etc", None), ("etc/hostname", b"base\n"), ("etc/gone", b"x"),
              ("opt", None), ("opt/dir", None), ("opt/dir/a", b"a"), ("opt/dir/b", b"b"),
              ("boot", None), ("boot/vmlinuz-5.10.0-1", b"K" * 4000),
              ("boot/initrd.img-5.10.0-1", b"I" * 3000)])
top = gzip.compress(layer([("etc/.wh.gone", b""), ("opt/dir/.wh..wh..opq", b""),
                           ("opt/dir/c", b"c"), ("etc/hostname", b"top\n")]), mtime=0)
blobs = {}
def blob(data):
    d = hashlib.sha256(data).hexdigest(); blobs[d] = data; return d
with tarfile.open(out, "w") as t:
    def put(name, data):
        i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))
    if kind == "oci":
        lb, lt = blob(base), blob(top)
        if corrupt:
            blobs[lt] = top[:-8] + b"\0" * 8
        cfg = blob(json.dumps({"architecture": "amd64", "os": "linux"}).encode())
        man = blob(json.dumps({"schemaVersion": 2, "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + cfg, "size": 1},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": "sha256:" + lb, "size": len(base)},
                       {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "sha256:" + lt, "size": len(top)}]}).encode())
        put("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        put("index.json", json.dumps({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + man, "size": 1}]}).encode())
        for d, data in blobs.items():
            put("blobs/sha256/" + d, data)
    else:
        put("l1/layer.tar", base); put("l2/layer.tar", top)
        put("manifest.json", json.dumps([{"Config": "c.json", "RepoTags": ["x:1"], "Layers": ["l1/layer.tar", "l2/layer.tar"]}]).encode())
        put("c.json", b"{}")
"#;
    let (ok, o, e) = run(
        Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(kind)
            .arg(&out)
            .arg(if corrupt { "1" } else { "0" }),
        60,
    );
    assert!(ok, "{o}\n{e}");
    out
}

#[test]
fn oci_and_docker_archives_apply_their_layers_with_whiteouts() {
    let fx = fixture();
    let mut ids = Vec::new();
    for kind in ["oci", "docker"] {
        let archive = image_archive(&fx, kind, false);
        let (ok, out, err) = bootpool(&fx, &["import", "sys", "--from", archive.to_str().unwrap()]);
        assert!(ok, "{kind}: {out}\n{err}");
        ids = revs(&fx);
        let root = rev_dir(&fx, &ids[0]).join("rootfs");
        assert_eq!(
            std::fs::read_to_string(root.join("etc/hostname")).unwrap(),
            "top\n"
        );
        assert!(!root.join("etc/gone").exists(), "{kind}: whiteout applied");
        assert!(!root.join("etc/.wh.gone").exists());
        let mut dir: Vec<String> = std::fs::read_dir(root.join("opt/dir"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        dir.sort();
        assert_eq!(
            dir,
            ["c"],
            "{kind}: opaque folder keeps only its own layer's entries"
        );
        assert_eq!(
            std::fs::read(rev_dir(&fx, &ids[0]).join("vmlinuz")).unwrap(),
            vec![b'K'; 4000]
        );
        // No NBD pool boots `sys`: no squashfs image was made.
        assert!(!rev_dir(&fx, &ids[0]).join("rootfs.img").exists());
    }
    // Both archives hold the same image: one revision.
    assert_eq!(ids.len(), 1, "{ids:?}");
}

#[test]
fn bad_sources_fail_naming_the_problem_and_change_nothing() {
    let fx = fixture();
    let src = fx.path().join("src");
    tree(&src, "good");
    let (ok, out, err) = bootpool(&fx, &["import", "sys", "--from", src.to_str().unwrap()]);
    assert!(ok, "{out}\n{err}");
    let before = (revs(&fx), active(&fx));
    let outside = fx.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();

    let nokernel = fx.path().join("nokernel");
    std::fs::create_dir_all(nokernel.join("etc")).unwrap();
    std::fs::write(nokernel.join("etc/hostname"), "x\n").unwrap();
    let evil = |name: &str, script: &str| -> PathBuf {
        let out = fx.path().join(name);
        let py = format!(
            "import io, sys, tarfile\nt = tarfile.open(sys.argv[1], 'w')\n\
             def f(n, d=b'x'):\n    i = tarfile.TarInfo(n); i.size = len(d); t.addfile(i, io.BytesIO(d))\n\
             def l(n, target):\n    i = tarfile.TarInfo(n); i.type = tarfile.SYMTYPE; i.linkname = target; t.addfile(i)\n\
             def c(n):\n    i = tarfile.TarInfo(n); i.type = tarfile.CHRTYPE; i.devmajor = 1; i.devminor = 1; t.addfile(i)\n\
             f('boot/vmlinuz-1'); f('boot/initrd.img-1')\n{script}\nt.close()\n"
        );
        let (ok, o, e) = run(Command::new("python3").arg("-c").arg(py).arg(&out), 60);
        assert!(ok, "{o}\n{e}");
        out
    };
    let dotdot = evil("dotdot.tar", "f('etc/../../outside/escaped')");
    let through = evil(
        "through.tar",
        &format!("l('lib', '{}')\nf('lib/escaped')", outside.display()),
    );
    let device = evil("device.tar", "c('etc/mem')");
    let good_tar = fx.path().join("good.tar");
    sh(&format!(
        "tar -C {} -cf {} .",
        src.display(),
        good_tar.display()
    ));
    let bytes = std::fs::read(&good_tar).unwrap();
    let truncated = fx.path().join("truncated.tar");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2 + 100]).unwrap();
    let gz = fx.path().join("broken.tar.gz");
    sh(&format!(
        "gzip -c {} > {}",
        good_tar.display(),
        gz.display()
    ));
    let mut z = std::fs::read(&gz).unwrap();
    let mid = z.len() / 2;
    for b in &mut z[mid..mid + 64] {
        *b ^= 0x5a;
    }
    std::fs::write(&gz, z).unwrap();
    let not_tar = fx.path().join("notes.txt");
    std::fs::write(&not_tar, "this is not an archive\n".repeat(100)).unwrap();
    let corrupt_oci = image_archive(&fx, "oci", true);

    for (source, expect) in [
        (&nokernel, "no kernel"),
        (&dotdot, "escaping the tree"),
        (&through, "goes through the symlink `lib`"),
        (&device, "device node outside /dev"),
        (&truncated, "truncated"),
        (&gz, "broken archive"),
        (&not_tar, "not a tar header"),
        (&corrupt_oci, "broken archive"),
    ] {
        let (ok, out, err) = bootpool(&fx, &["import", "sys", "--from", source.to_str().unwrap()]);
        assert!(!ok, "{}: import succeeded: {out}", source.display());
        assert!(
            err.contains(expect) && err.contains(source.file_name().unwrap().to_str().unwrap()),
            "{}: the error names the source and says `{expect}`: {err}",
            source.display()
        );
        assert_eq!((revs(&fx), active(&fx)), before, "{}", source.display());
        assert!(
            std::fs::read_dir(fx.path().join("images/sys"))
                .unwrap()
                .flatten()
                .all(|e| !e.file_name().to_string_lossy().starts_with(".import-")),
            "nothing half-built is left"
        );
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "nothing written outside"
        );
    }
}

/// An initrd made by GNU cpio at test time: an uncompressed early-microcode archive, then the
/// main archive of `files` compressed by `compress` (`gzip`, `zstd`, `xz`).
fn initrd(fx: &Fixture, name: &str, files: &[&str], compress: &str) -> PathBuf {
    let dir = fx.path().join(format!("{name}.d"));
    let early = fx.path().join(format!("{name}.early"));
    std::fs::create_dir_all(early.join("kernel/x86/microcode")).unwrap();
    std::fs::write(early.join("kernel/x86/microcode/GenuineIntel.bin"), "ucode").unwrap();
    for f in files {
        let path = dir.join(f);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "x").unwrap();
    }
    let out = fx.path().join(name);
    sh(&format!(
        "cd {early}; find . | cpio -o -H newc --quiet > {out}; \
         cd {dir}; find . | cpio -o -H newc --quiet | {compress} -c >> {out}",
        early = early.display(),
        dir = dir.display(),
        out = out.display(),
    ));
    out
}

/// `image import` refuses a revision that cannot boot, saying why and adding nothing: a tree
/// without an init (or whose /sbin/init leads out of the tree), an initrd of the other
/// builder than the pool's `initramfs`, one without the root support the pool's `root` needs;
/// and `check` finds the builder mismatch of a configured image too.
#[test]
fn import_refuses_what_cannot_boot() {
    let fx = Fixture::new();
    let with_pool = |root: &str, kind: &str| {
        // initramfs-tools' nfsmount asks the portmapper on 111 (a config error otherwise).
        let base = fx
            .loopback()
            .port("portmap", 111)
            .images("sys: { dir: images/sys, store: disk }")
            .to_string();
        assert!(base.ends_with("\n"));
        format!(
            "{base}  sys-room:\n    image: sys\n    root: {root}\n    initramfs: {kind}\n    \
             clients:\n      - {{ mac: \"52:54:00:77:01:01\" }}\n"
        )
    };
    let kernel = fx.path().join("vmlinuz");
    std::fs::write(&kernel, pattern(30, 4000)).unwrap();
    let import = |src: &Path, initrd: Option<&Path>| {
        let mut args = vec!["import", "sys", "--from", src.to_str().unwrap()];
        if let Some(i) = initrd {
            args.extend(["--initrd", i.to_str().unwrap()]);
            args.extend(["--kernel", kernel.to_str().unwrap()]);
        }
        bootpool(&fx, &args)
    };
    let refused = |src: &Path, initrd: Option<&Path>, says: &[&str]| {
        let (ok, out, err) = import(src, initrd);
        assert!(!ok, "imported: {out}");
        assert!(
            says.iter().all(|s| err.contains(s)) && err.contains("nothing imported"),
            "{says:?}: {err}"
        );
        assert!(revs(&fx).is_empty(), "{:?}", revs(&fx));
    };
    fx.write_config(&with_pool("nfs", "initramfs-tools"));
    let tools_nfs = [
        "init",
        "conf/initramfs.conf",
        "scripts/nfs",
        "usr/lib/klibc/bin/nfsmount",
        "usr/lib/modules/6.1.0-1-amd64/kernel/fs/nfs/nfs.ko",
    ];
    let tools = initrd(&fx, "tools.img", &tools_nfs, "zstd");

    // No init; then an init that is a link out of the tree.
    let src = fx.path().join("src");
    for d in ["etc", "sbin", "boot"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
    }
    refused(&src, Some(&tools), &["has no init", "/sbin/init"]);
    let outside = fx.path().join("host-init");
    std::fs::write(&outside, "#!/bin/sh\n").unwrap();
    sh(&format!("chmod 755 {}", outside.display()));
    std::os::unix::fs::symlink(&outside, src.join("sbin/init")).unwrap();
    refused(&src, Some(&tools), &["has no init"]);
    std::fs::remove_file(src.join("sbin/init")).unwrap();
    init(&src);

    // Debian's initrd for a dracut pool; dracut's for an initramfs-tools one.
    fx.write_config(&with_pool("nfs", "dracut"));
    refused(
        &src,
        Some(&tools),
        &[
            "made by initramfs-tools",
            "pool sys-room",
            "`initramfs: dracut`",
        ],
    );
    let dracut_nbd = [
        "init",
        "usr/lib/dracut/modules.txt",
        "usr/lib/dracut/hooks/cmdline/90-parse-nbdroot.sh",
        "usr/sbin/nbdroot",
    ];
    let dracut = initrd(&fx, "dracut.img", &dracut_nbd, "xz");
    fx.write_config(&with_pool("nfs", "initramfs-tools"));
    refused(&src, Some(&dracut), &["made by dracut", "pool sys-room"]);
    // The builder's own, without the support the root needs.
    fx.write_config(&with_pool("nfs", "dracut"));
    refused(&src, Some(&dracut), &["no nfs root support", "nfsroot"]);
    fx.write_config(&with_pool("nbd", "initramfs-tools"));
    refused(&src, Some(&tools), &["no nbd root support", "nbd-client"]);

    // What fits is imported: Debian's initrd over NFS (gzip this time), dracut's over NBD.
    fx.write_config(&with_pool("nfs", "initramfs-tools"));
    let gz = initrd(&fx, "tools-gz.img", &tools_nfs, "gzip");
    let (ok, out, err) = import(&src, Some(&gz));
    assert!(ok, "{out}\n{err}");
    fx.write_config(&with_pool("nbd", "dracut"));
    let (ok, out, err) = import(&src, Some(&dracut));
    assert!(ok, "{out}\n{err}");
    assert_eq!(revs(&fx).len(), 2);

    // `check` finds a configured image's builder mismatch as well, at the pool's key. The
    // active revision has dracut's initrd.
    let (ok, _, err) = bootpool(&fx, &["activate", "sys", &revs(&fx)[0]]);
    assert!(ok, "{err}");
    let id = std::fs::read_to_string(fx.path().join("images/sys/active")).unwrap();
    let has_dracut = std::fs::read(rev_dir(&fx, id.trim()).join("initrd.img")).unwrap()
        == std::fs::read(&dracut).unwrap();
    let other = if has_dracut {
        "initramfs-tools"
    } else {
        "dracut"
    };
    fx.write_config(&with_pool("nbd", other));
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.args(["check", "--config"]).arg(fx.config_path());
    let (ok, out, err) = run(&mut c, 60);
    assert!(!ok, "{out}\n{err}");
    assert!(err.contains("pools.sys-room.initramfs"), "{err}");
}

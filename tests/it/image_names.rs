//! An image that names its own files and exports (`images.NAME.kernel`, `initrd`, `root_tree`,
//! `root_image`, `nfs_export`, `nbd_export`), as a foreign image's harness lays them out: the
//! script, HTTP (curl), TFTP (curl), NFS (libnfs's nfs-ls and nfs-cat) and NBD (nbdinfo,
//! nbdcopy) all serve it by those names, and by no other, against the in-process daemon.

use crate::common::{Fixture, cmd, pattern, run_async};

/// The fixture's image moved to the names a foreign harness gave its files.
fn foreign() -> Fixture {
    let fx = Fixture::new();
    let dir = fx.image_dir();
    std::fs::create_dir_all(dir.join("boot")).unwrap();
    for (from, to) in [
        ("vmlinuz", "boot/bzImage"),
        ("initrd.img", "boot/initramfs.cpio.gz"),
        ("rootfs", "tree"),
        ("rootfs.img", "root.squashfs"),
    ] {
        std::fs::rename(dir.join(from), dir.join(to)).unwrap();
    }
    let text = fx.loopback().demo_entry(
        "  demo:
    dir: images/demo
    kernel: boot/bzImage
    initrd: boot/initramfs.cpio.gz
    root_tree: tree
    root_image: root.squashfs
    nfs_export: /srv/nfs/foreign
    nbd_export: foreign-root
",
    );
    fx.write_config(&text);
    fx
}

async fn status(url: &str) -> String {
    let (ok, code, err) = run_async(
        cmd(
            "curl",
            &[
                "-sS",
                "--max-time",
                "20",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                url,
            ],
        ),
        30,
    )
    .await;
    assert!(ok, "{url}: {err}");
    code
}

#[tokio::test]
async fn an_image_that_names_its_files_and_exports_is_served_by_those_names() {
    let fx = foreign();
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);

    // The script names the files and the root by the image's names.
    let (ok, script, err) = run_async(
        cmd(
            "curl",
            &[
                "-sS",
                "--fail",
                "--max-time",
                "20",
                &format!("{base}/boot/script/52:54:00:77:00:11.ipxe"),
            ],
        ),
        30,
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        script.contains(&format!("kernel {base}/boot/demo/boot/bzImage ")),
        "{script}"
    );
    assert!(
        script.contains(&format!("initrd {base}/boot/demo/boot/initramfs.cpio.gz\n")),
        "{script}"
    );
    assert!(script.contains("/foreign-root "), "{script}");
    assert!(script.contains(" initrd=initramfs.cpio.gz\n"), "{script}");
    let (ok, script, _) = run_async(
        cmd(
            "curl",
            &[
                "-sS",
                "--fail",
                "--max-time",
                "20",
                &format!("{base}/boot/script/52:54:00:77:00:01.ipxe"),
            ],
        ),
        30,
    )
    .await;
    assert!(ok);
    assert!(script.contains(":/srv/nfs/foreign:ro,"), "{script}");

    // HTTP and TFTP: the kernel by its name, and no longer by the fixed one.
    let kernel = fx.path().join("kernel.out");
    let (ok, _, err) = run_async(
        cmd(
            "curl",
            &[
                "-sS",
                "--fail",
                "--max-time",
                "20",
                "-o",
                kernel.to_str().unwrap(),
                &format!("{base}/boot/demo/boot/bzImage"),
            ],
        ),
        30,
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(&kernel).unwrap(), pattern(1, 3 << 20));
    assert_eq!(
        status(&format!("{base}/boot/demo/boot/initramfs.cpio.gz")).await,
        "200"
    );
    for gone in [
        "/boot/demo/vmlinuz",
        "/boot/demo/initrd.img",
        "/boot/demo/boot",
        "/boot/demo/root.squashfs",
    ] {
        assert_eq!(status(&format!("{base}{gone}")).await, "404", "{gone}");
    }
    let initrd = fx.path().join("initrd.out");
    let tftp = format!(
        "tftp://{}/demo/boot/initramfs.cpio.gz",
        daemon.bound.tftp.unwrap()
    );
    let (ok, _, err) = run_async(
        cmd(
            "curl",
            &[
                "-sS",
                "--max-time",
                "20",
                "-o",
                initrd.to_str().unwrap(),
                &tftp,
            ],
        ),
        30,
    )
    .await;
    assert!(ok, "{tftp}: {err}");
    assert_eq!(std::fs::read(&initrd).unwrap(), pattern(2, 2 << 20));

    // NFS: the tree at its export path, and not at /demo.
    let p = daemon.bound.nfs.port();
    let nfs = |path: &str| format!("nfs://127.0.0.1{path}?nfsport={p}&mountport={p}&version=3");
    let (ok, out, err) =
        run_async(cmd("nfs-cat", &[&nfs("/srv/nfs/foreign/etc/hostname")]), 60).await;
    assert!(ok, "{err}");
    assert_eq!(out, "demo\n");
    let (ok, out, err) = run_async(cmd("nfs-ls", &[&nfs("/srv/nfs/foreign")]), 60).await;
    assert!(ok, "{err}");
    assert!(out.contains("etc") && out.contains("usr"), "{out}");
    let (ok, _, _) = run_async(cmd("nfs-ls", &[&nfs("/demo")]), 60).await;
    assert!(!ok, "/demo is no export any more");

    // NBD: the image by its export name, listed so, and not by the image's name.
    let list = format!("nbd://{}", daemon.bound.nbd);
    let (ok, out, err) = run_async(cmd("nbdinfo", &["--list", "--json", &list]), 30).await;
    assert!(ok, "{err}");
    let info: serde_json::Value = serde_json::from_str(&out).expect(&out);
    let names: Vec<&str> = info["exports"]
        .as_array()
        .expect(&out)
        .iter()
        .map(|e| e["export-name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["foreign-root"], "{out}");
    let copy = fx.path().join("root.out");
    let uri = format!("nbd://{}/foreign-root", daemon.bound.nbd);
    let (ok, _, err) = run_async(cmd("nbdcopy", &[&uri, copy.to_str().unwrap()]), 60).await;
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(&copy).unwrap(), pattern(3, 16 << 20));
    let (ok, _, _) = run_async(
        cmd("nbdinfo", &[&format!("nbd://{}/demo", daemon.bound.nbd)]),
        30,
    )
    .await;
    assert!(!ok, "demo is no NBD export any more");
    daemon.stop().await;
}

//! End to end, imported images boot: the demo's debootstrap tree imported as a folder (booted
//! over NFS) and the same tree as an OCI image archive (one layer made by GNU tar, wrapped in
//! an OCI layout by a small Python script, booted over NBD), each as a revision of its own
//! image, booted by qemu VMs through `bootpool lab`; each boot records the revision it got.
//!
//! Slow (TCG: minutes, and two imports of the demo root), so `#[ignore]`d; `scripts/test
//! --all` runs it.

use crate::common::lab::{lab_config, repo, run_lab};
use std::process::Command;

const TREE_MAC: &str = "52:54:00:77:0e:01";
const OCI_MAC: &str = "52:54:00:77:0f:01";

fn bootpool(config: &std::path::Path, args: &[&str]) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.args(args).arg("--config").arg(config);
    let (ok, out, err) = crate::common::run(&mut c, 900);
    assert!(ok, "{args:?}\n{out}\n{err}");
    out
}

#[test]
#[ignore = "imports the demo root twice and boots two VMs (minutes under TCG); scripts/test --all"]
fn a_debootstrap_tree_and_an_oci_archive_imported_boot_in_vms() {
    let dir = tempfile::tempdir().unwrap();
    let demo = repo().join("images/demo");
    let images = format!(
        "images:\n  tree:\n    dir: {}\n  oci:\n    dir: {}\n",
        dir.path().join("tree").display(),
        dir.path().join("oci").display()
    );
    let config = lab_config(dir.path(), |text| {
        format!(
            "{}
  tree-nfs:
    image: tree
    root: nfs
    cmdline: console=ttyS0
    clients:
      - {{ mac: \"{TREE_MAC}\" }}
  oci-nbd:
    image: oci
    root: nbd
    cmdline: console=ttyS0
    clients:
      - {{ mac: \"{OCI_MAC}\" }}
",
            text.replacen("images:\n", &images, 1)
        )
    });
    let (k, i) = (demo.join("vmlinuz"), demo.join("initrd.img"));
    let (k, i) = (k.to_str().unwrap(), i.to_str().unwrap());
    let rootfs = demo.join("rootfs");
    let out = bootpool(
        &config,
        &[
            "image",
            "import",
            "tree",
            "--from",
            rootfs.to_str().unwrap(),
            "--kernel",
            k,
            "--initrd",
            i,
        ],
    );
    assert!(out.contains("imported r1"), "{out}");

    // The OCI archive: the root as one layer (GNU tar), in an OCI layout, in a tar.
    let layer = dir.path().join("layer.tar");
    let archive = dir.path().join("demo-oci.tar");
    let (ok, o, e) = crate::common::run(
        Command::new("tar")
            .arg("--numeric-owner")
            .arg("-C")
            .arg(&rootfs)
            .arg("-cf")
            .arg(&layer)
            .arg("."),
        600,
    );
    assert!(ok, "{o}\n{e}");
    let script = r#"
import hashlib, io, json, sys, tarfile
layer, out = sys.argv[1], sys.argv[2]
h = hashlib.sha256()
with open(layer, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
ld = h.hexdigest()
cfg = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": ["sha256:" + ld]}}).encode()
cd = hashlib.sha256(cfg).hexdigest()
import os
man = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + cd, "size": len(cfg)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": "sha256:" + ld, "size": os.path.getsize(layer)}]}).encode()
md = hashlib.sha256(man).hexdigest()
index = json.dumps({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + md, "size": len(man)}]}).encode()
with tarfile.open(out, "w") as t:
    def put(name, data):
        i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))
    put("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
    put("index.json", index)
    put("blobs/sha256/" + cd, cfg)
    put("blobs/sha256/" + md, man)
    t.add(layer, "blobs/sha256/" + ld)
"#;
    let (ok, o, e) = crate::common::run(
        Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(&layer)
            .arg(&archive),
        600,
    );
    assert!(ok, "{o}\n{e}");
    let _ = std::fs::remove_file(&layer);
    let out = bootpool(
        &config,
        &[
            "image",
            "import",
            "oci",
            "--from",
            archive.to_str().unwrap(),
            "--kernel",
            k,
            "--initrd",
            i,
        ],
    );
    assert!(out.contains("imported r1"), "{out}");

    let (table, rows) = run_lab(
        &config,
        &[
            "--clients",
            "1",
            "--pool",
            "tree-nfs",
            "--pool",
            "oci-nbd",
            "--timeout",
            "480",
        ],
        900,
    );
    assert_eq!(rows.len(), 2, "{table}");
    for row in &rows {
        assert_eq!(row[3], "booted", "{table}");
    }
    // Each boot recorded the revision it got.
    let boots: serde_json::Value = serde_json::from_str(&bootpool(
        &config,
        &["report", "--pool", "tree-nfs", "--format", "json"],
    ))
    .unwrap();
    let id = std::fs::read_to_string(dir.path().join("tree/active")).unwrap();
    assert!(boots.to_string().contains(id.trim()), "{boots:#}");
}

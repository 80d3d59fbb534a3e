//! The command line: `bootpool check` on the shipped config and on broken ones.

mod common;

use std::process::Command;

fn check(config: &std::path::Path) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.args(["check", "--config"]).arg(config);
    common::run(&mut c, 20)
}

#[test]
fn shipped_config_checks_clean() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("pools.yaml");
    let (ok, out, err) = check(&path);
    assert!(ok, "{out}{err}");
    assert!(out.contains("ok (2 pools"), "{out}");
}

#[test]
fn broken_config_names_file_line_and_key() {
    let fx = common::Fixture::new();
    let text = fx
        .config_text()
        .replace("    root: nbd\n", "    root: nbd\n    roots: nbd\n");
    fx.write_config(&text);
    let (ok, out, err) = check(&fx.config_path());
    assert!(!ok, "{out}");
    let want = format!(
        "{}:24:5: pools.nbd-room: unknown field `roots`",
        fx.config_path().display()
    );
    assert!(err.contains(&want), "{err}");
}

#[test]
fn missing_image_files_fail_the_check() {
    let fx = common::Fixture::new();
    std::fs::remove_file(fx.image_dir().join("rootfs.img")).unwrap();
    let (ok, _, err) = check(&fx.config_path());
    assert!(!ok);
    assert!(
        err.contains("pools.nbd-room.image: image `demo` lacks") && err.contains("rootfs.img"),
        "{err}"
    );
}

//! HTTP boot files, scripts and the booted callback, driven by curl.

mod common;

use common::{Fixture, pattern, run_async};
use std::process::Command;

fn curl(args: &[&str]) -> Command {
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "20"]).args(args);
    c
}

#[tokio::test]
async fn kernel_script_and_booted_are_served_and_recorded() {
    let fx = Fixture::new();
    // A link out of the loaders folder is refused here as TFTP refuses it.
    std::os::unix::fs::symlink("../pools.yaml", fx.path().join("loaders/escape.efi")).unwrap();
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);

    let (ok, script, err) = run_async(
        curl(&[&format!("{base}/boot/script/52:54:00:77:00:11.ipxe")]),
        30,
    )
    .await;
    assert!(ok, "{err}");
    assert!(script.starts_with("#!ipxe"), "{script}");
    assert!(script.contains("root=nbd:127.0.0.1:"), "{script}");

    let out = fx.path().join("kernel.out");
    let (ok, _, err) = run_async(
        curl(&[
            "-o",
            out.to_str().unwrap(),
            &format!("{base}/boot/demo/vmlinuz"),
        ]),
        30,
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), pattern(1, 3 << 20));

    // Paths outside what an image serves are refused.
    for bad in [
        "/boot/demo/rootfs.img",
        "/boot/demo/..%2F..%2Fpools.yaml",
        "/boot/nope/vmlinuz",
        "/boot/loaders/..%2Fpools.yaml",
        "/boot/loaders/escape.efi",
        "/boot/loaders/.hidden",
    ] {
        let (ok, code, _) = run_async(
            curl(&[
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("{base}{bad}"),
            ]),
            30,
        )
        .await;
        assert!(ok);
        assert_eq!(code, "404", "{bad}");
    }

    let (ok, _, err) = run_async(
        curl(&[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "--data",
            "{\"uptime_s\": 12.5}",
            &format!("{base}/api/v1/booted"),
        ]),
        30,
    )
    .await;
    assert!(ok, "{err}");
    daemon.stop().await;
}

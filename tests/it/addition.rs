//! bootpool's overlay addition (`export::addition`, from `dist/overlay/`) as clients get it: a
//! pool of a stock initrd (`initramfs: dracut`) has its script hand it after the image's own
//! initrd; curl over HTTP and tftp-hpa over TFTP fetch the same bytes; GNU cpio lists and
//! unpacks it (the kernel's newc format); dash and busybox sh parse each of its scripts; and
//! the demo's pool, whose initrd lays its own overlay, is handed none.

use crate::common::{Fixture, cmd, run, run_async};

/// What the archive holds, in order: bootpool's own folder, then each script into a folder
/// the initrd it is for already has (a folder entry would replace a symlink standing there).
const LISTED: [&str; 4] = [
    "bootpool",
    "bootpool/overlay.sh",
    "scripts/bootpool",
    "lib/dracut/hooks/pre-pivot/90-bootpool-overlay.sh",
];

async fn curl(url: &str, out: &std::path::Path) -> (bool, String) {
    let (ok, _, err) = run_async(
        cmd(
            "curl",
            &[
                "-sS",
                "--fail",
                "--max-time",
                "20",
                "-o",
                out.to_str().unwrap(),
                url,
            ],
        ),
        30,
    )
    .await;
    (ok, err)
}

#[tokio::test]
async fn a_stock_initrds_pool_gets_the_addition_a_valid_cpio_of_shell_scripts() {
    let fx = Fixture::new();
    fx.write_config(&fx.loopback().pool("nbd-room", "initramfs: dracut"));
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);

    // The stock pool's script: the image's initrd, then the addition; the demo's: no addition.
    let script = fx.path().join("script");
    assert!(
        curl(
            &format!("{base}/boot/script/52:54:00:77:00:11.ipxe"),
            &script
        )
        .await
        .0
    );
    let text = std::fs::read_to_string(&script).unwrap();
    let addition = format!("initrd {base}/boot/loaders/bootpool-overlay.cpio\n");
    assert!(
        text.contains(&format!(
            "initrd {base}/boot/demo/initrd.img\n{addition}boot\n"
        )),
        "{text}"
    );
    assert!(text.contains(" bootpool.overlay=tmpfs "), "{text}");
    assert!(
        text.contains(" initrd=initrd.img initrd=bootpool-overlay.cpio\n"),
        "{text}"
    );
    assert!(
        curl(
            &format!("{base}/boot/script/52:54:00:77:00:01.ipxe"),
            &script
        )
        .await
        .0
    );
    let demo = std::fs::read_to_string(&script).unwrap();
    assert!(!demo.contains("bootpool-overlay"), "{demo}");
    assert!(!demo.contains("bootpool.overlay"), "{demo}");

    // The same bytes over HTTP and TFTP.
    let http = fx.path().join("http.cpio");
    let (ok, err) = curl(&format!("{base}/boot/loaders/bootpool-overlay.cpio"), &http).await;
    assert!(ok, "{err}");
    let tftp = fx.path().join("tftp.cpio");
    let addr = daemon.bound.tftp.unwrap();
    let (ok, so, se) = run_async(
        cmd(
            "tftp",
            &[
                "-m",
                "octet",
                &addr.ip().to_string(),
                &addr.port().to_string(),
                "-c",
                "get",
                "bootpool-overlay.cpio",
                tftp.to_str().unwrap(),
            ],
        ),
        30,
    )
    .await;
    assert!(ok && se.is_empty(), "{so}{se}");
    let bytes = std::fs::read(&http).unwrap();
    assert_eq!(bytes, std::fs::read(&tftp).unwrap());

    // GNU cpio reads it as newc, entry for entry, and unpacks it.
    let (ok, listing, err) = run(
        &mut cmd(
            "sh",
            &[
                "-c",
                &format!("cpio -t --quiet -H newc < {}", http.display()),
            ],
        ),
        30,
    );
    assert!(ok, "{err}");
    assert_eq!(listing.lines().collect::<Vec<_>>(), LISTED);
    let tree = fx.path().join("unpacked");
    std::fs::create_dir_all(&tree).unwrap();
    let (ok, _, err) = run(
        &mut cmd(
            "sh",
            &[
                "-c",
                &format!(
                    "cd {} && cpio -i -d --quiet --no-absolute-filenames -H newc < {}",
                    tree.display(),
                    http.display()
                ),
            ],
        ),
        30,
    );
    assert!(ok, "{err}");
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/overlay");
    for name in LISTED {
        let (got, want) = (tree.join(name), repo.join(name));
        if want.is_dir() {
            assert!(got.is_dir(), "{name}");
            continue;
        }
        // The repository's file, byte for byte, executable, and a script both shells parse.
        assert_eq!(
            std::fs::read(&got).unwrap(),
            std::fs::read(&want).unwrap(),
            "{name}"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&got).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755, "{name}");
        for shell in [vec!["dash", "-n"], vec!["busybox", "sh", "-n"]] {
            let mut c = cmd(shell[0], &shell[1..]);
            c.arg(&got);
            let (ok, so, se) = run(&mut c, 30);
            assert!(ok && se.is_empty(), "{shell:?} {name}: {so}{se}");
        }
    }
}

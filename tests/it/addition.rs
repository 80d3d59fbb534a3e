//! bootpool's overlay addition (`export::addition`, from `dist/overlay/`) as clients get it: a
//! pool of a stock initrd (`initramfs: dracut`) has its script hand it after the image's own
//! initrd; curl over HTTP and tftp-hpa over TFTP fetch the same bytes; GNU cpio lists and
//! unpacks it (the kernel's newc format); dash and busybox sh parse each of its scripts; the
//! demo's pool, whose initrd lays its own overlay, is handed none; and its agent hook starts
//! the static agent in a client namespace, through which nbdcopy reads the root.

use crate::common::{Fixture, cmd, run, run_async};

/// What the archive holds, in order: bootpool's own folder, then each script into a folder
/// the initrd it is for already has (a folder entry would replace a symlink standing there).
const LISTED: [&str; 7] = [
    "bootpool",
    "bootpool/overlay.sh",
    "bootpool/homes.sh",
    "bootpool/agent.sh",
    "scripts/bootpool",
    "lib/dracut/hooks/pre-pivot/90-bootpool-overlay.sh",
    "lib/dracut/hooks/netroot/50-bootpool-agent.sh",
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

/// The homes script, run by dash, busybox sh and klibc's sh over a root of the shape an
/// image has: `bootpool.homes=` on the command line puts one NFS line for /home into its
/// /etc/fstab in place of the image's own /home line, keeps every other line (comments, a
/// glob character) as it was, makes /home, and does the same again on a second run; without
/// the argument the file is left alone.
#[test]
fn the_homes_script_writes_the_homes_into_the_roots_fstab() {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/overlay/bootpool/homes.sh");
    let image_fstab = "# <file system> <mount point> <type> <options> <dump> <pass>\n\
                       # /dev/sda5 /home ext4 defaults 0 2\n\
                       proc /proc proc defaults 0 0\n\
                       /dev/sda5\t/home  ext4 defaults 0 2\n\
                       tmpfs /tmp tmpfs mode=1777,size=* 0 0";
    let homes_line = "10.77.0.5:/srv/homes /home nfs rw,vers=4.2 0 0\n";
    let kept = "# <file system> <mount point> <type> <options> <dump> <pass>\n\
                # /dev/sda5 /home ext4 defaults 0 2\n\
                proc /proc proc defaults 0 0\n\
                tmpfs /tmp tmpfs mode=1777,size=* 0 0\n";
    // klibc's sh is /init's shell in an initramfs-tools initrd without busybox (klibc-utils
    // comes with initramfs-tools-core).
    for shell in [
        vec!["dash"],
        vec!["busybox", "sh"],
        vec!["/usr/lib/klibc/bin/sh"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/fstab"), image_fstab).unwrap();
        let cmdline = dir.path().join("cmdline");
        let run_with = |line: &str| {
            std::fs::write(&cmdline, line).unwrap();
            let mut c = cmd(shell[0], &shell[1..]);
            c.args(["-c", ". \"$1\" && bootpool_homes \"$2\"", "sh"])
                .arg(&script)
                .arg(&root)
                .env("BOOTPOOL_CMDLINE", &cmdline);
            let (ok, out, err) = run(&mut c, 30);
            assert!(ok, "{shell:?}: {out}{err}");
        };
        run_with("quiet root=/dev/nfs\n");
        assert_eq!(
            std::fs::read_to_string(root.join("etc/fstab")).unwrap(),
            image_fstab
        );
        assert!(!root.join("home").exists());
        let argument =
            "quiet bootpool.homes=10.77.0.5:/srv/homes bootpool.homes.options=rw,vers=4.2 x=*\n";
        for _ in 0..2 {
            run_with(argument);
            assert_eq!(
                std::fs::read_to_string(root.join("etc/fstab")).unwrap(),
                format!("{kept}{homes_line}"),
                "{shell:?}"
            );
            assert!(root.join("home").is_dir());
        }
    }
}

/// Kills the agent the hook started (its PID in `agent.pid`) when dropped.
struct Started(std::path::PathBuf);

impl Drop for Started {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0) {
            let _ = cmd("kill", &["-9", pid.trim()]).status();
        }
    }
}

/// The addition's agent hook (`agent.sh`) as initramfs-tools' /init runs it, by klibc's sh
/// with klibc's tools first on PATH, in a client namespace whose loopback is down, with the
/// static agent the addition carries: given `bootpool.blocks=` naming two servers, the first
/// an address nobody holds, it brings the loopback up (klibc's ipconfig), starts the agent by
/// the name `@bootpool-agent` (its argv[0] as systemd reads it), and returns once the agent
/// listens on 127.0.0.1:10809, having fetched the manifest from the second server; nbdcopy
/// reads the root through it, byte for byte the image. Without the argument the hook does
/// nothing.
#[test]
fn the_agent_hook_starts_the_static_agent_on_loopback_and_the_root_reads_through_it() {
    hook_serves_the_root(Hook::InitramfsTools, 6);
}

/// The same through dracut's netroot hook (`lib/dracut/hooks/netroot/50-bootpool-agent.sh`),
/// sourced as dracut's /sbin/netroot sources it, by dash with the host's tools (iproute2's
/// `ip`, no klibc): it brings the loopback up with `ip` and starts the agent the same way.
#[test]
fn the_dracut_netroot_hook_starts_the_agent_with_iproute2_and_the_root_reads_through_it() {
    hook_serves_the_root(Hook::DracutNetroot, 7);
}

/// Which initrd's way of running the agent hook.
#[derive(Clone, Copy)]
enum Hook {
    /// `agent.sh`'s function, by klibc's sh with klibc's tools first on PATH.
    InitramfsTools,
    /// dracut's netroot hook file, sourced by dash, with no klibc on PATH.
    DracutNetroot,
}

/// The hook `how` runs, in a client namespace on `10.77.NET.0/24` whose loopback is down: see
/// the two tests above.
fn hook_serves_the_root(how: Hook, net: u8) {
    use crate::common::netns::{Daemon, Link};
    use bootpool::image::{blocks, blocks_file};
    let fx = Fixture::new();
    let digest = blocks::hex(&blocks_file::make(&fx.image_dir().join("rootfs.img")).unwrap());
    let link = Link::new(&format!("10.77.{net}.1/24"));
    let (admin, client) = (format!("10.88.{net}.1"), format!("10.88.{net}.2"));
    link.in_server(&[
        "ip",
        "addr",
        "add",
        &format!("{admin}/24"),
        "dev",
        &link.server_if,
    ]);
    link.in_client(&[
        "ip",
        "addr",
        "add",
        &format!("{client}/24"),
        "dev",
        &link.client_if,
    ]);
    link.in_client(&["ip", "link", "set", "lo", "down"]);
    fx.write_config(
        &fx.loopback()
            .on_veth(&format!("10.77.{net}"), &link.server_if)
            .http("0.0.0.0:8080")
            .server(&format!("admin_networks: [10.88.{net}.0/24]")),
    );
    let _daemon = Daemon::start(&link, &fx, 1);

    let dir = tempfile::tempdir().unwrap();
    let (bin, run_dir) = (dir.path().join("addition"), dir.path().join("run"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(crate::common::static_agent(), bin.join("@bootpool-agent")).unwrap();
    let overlay = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/overlay");
    // The netroot hook sources the addition's agent.sh from the addition's folder.
    std::fs::copy(overlay.join("bootpool/agent.sh"), bin.join("agent.sh")).unwrap();
    let cmdline = dir.path().join("cmdline");
    let hook = |line: &str| {
        std::fs::write(&cmdline, line).unwrap();
        let mut c = match how {
            Hook::InitramfsTools => {
                let mut c = Link::command(
                    &link.client_ns,
                    "/usr/lib/klibc/bin/sh",
                    &["-c", ". \"$1\" && bootpool_agent", "sh"],
                );
                c.arg(overlay.join("bootpool/agent.sh")).env(
                    "PATH",
                    format!("/usr/lib/klibc/bin:{}", std::env::var("PATH").unwrap()),
                );
                c
            }
            Hook::DracutNetroot => {
                let mut c = Link::command(&link.client_ns, "dash", &["-c", ". \"$1\"", "sh"]);
                c.arg(overlay.join("lib/dracut/hooks/netroot/50-bootpool-agent.sh"));
                c
            }
        };
        c.env("BOOTPOOL_CMDLINE", &cmdline)
            .env("BOOTPOOL_ADDITION", &bin)
            .env("BOOTPOOL_RUN", &run_dir);
        run(&mut c, 120)
    };
    // Without bootpool.blocks= nothing is started.
    let (ok, out, err) = hook("console=ttyS0 boot=bootpool root=/dev/nbd0");
    assert!(ok, "{out}{err}");
    assert!(!run_dir.join("bootpool").exists());

    let url = |host: &str| format!("http://{host}:8080/boot/demo/blocks/{digest}");
    let blocks = format!("{},{}", url(&format!("10.88.{net}.9")), url(&admin));
    let pid_file = run_dir.join("bootpool/agent.pid");
    let _started = Started(pid_file.clone());
    let (ok, out, err) = hook(&format!("boot=bootpool bootpool.blocks={blocks} quiet"));
    let log = std::fs::read_to_string(run_dir.join("bootpool/agent.log")).unwrap_or_default();
    assert!(ok, "{out}{err}\nthe agent's log:\n{log}");
    // The first server answered nothing (2 s), the second gave the manifest.
    assert!(log.contains(&format!("trying {admin}:8080")), "{log}");
    assert!(
        log.contains(&format!(
            "on 127.0.0.1:10809 from 10.88.{net}.9:8080, {admin}:8080"
        )),
        "{log}"
    );
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let argv = std::fs::read(format!("/proc/{}/cmdline", pid.trim())).unwrap();
    assert!(
        argv.starts_with(b"@bootpool-agent\0"),
        "{}",
        String::from_utf8_lossy(&argv)
    );
    let copy = dir.path().join("copy");
    let (ok, _, err) = run(
        &mut Link::command(
            &link.client_ns,
            "nbdcopy",
            &["nbd://127.0.0.1:10809/root", copy.to_str().unwrap()],
        ),
        60,
    );
    assert!(ok, "{err}");
    assert!(
        std::fs::read(&copy).unwrap() == crate::common::pattern(3, 16 << 20),
        "the copy differs from the image"
    );
}

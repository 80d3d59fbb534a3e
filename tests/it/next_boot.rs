//! The next boot an admin sets (`bootpool next-boot`, `POST /api/v1/next-boot`): the client's
//! own script (curl from its leased address, busybox udhcpc's lease with option 93) applies it,
//! a once entry is used up by that boot, an entry until changed stays, survives a kill -9 of
//! the daemon and is recorded with the boot; refusals name what is wrong.

use crate::common::netns::{Daemon, Link};
use crate::common::{Fixture, Loopback, poll_until, recorded_events, run};
use std::time::Duration;

const SERVER: &str = "10.77.9.1";
const CLIENT: &str = "52:54:00:77:00:06";
const ADMIN: &str = "admin-secret-0123456789";

/// The fixture's NFS pool on the server end of `link`, with an admin token.
fn config(link: &Link) -> String {
    Loopback::default()
        .on_veth("10.77.9", &link.server_if)
        .http("0.0.0.0:8080")
        .without_pool("nbd-room")
        .server(&format!("admin_token: {ADMIN}"))
        .to_string()
}

/// `bootpool next-boot ARGS` in the server's namespace: (succeeded, stdout, stderr).
fn next_boot(link: &Link, fx: &Fixture, args: &[&str]) -> (bool, String, String) {
    let config = fx.config_path();
    let mut all = vec!["next-boot", "--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    run(
        &mut Link::command(&link.server_ns, env!("CARGO_BIN_EXE_bootpool"), &all),
        30,
    )
}

/// The client's script, fetched by the client from its leased address.
fn script(link: &Link) -> String {
    let url = format!("http://{SERVER}:8080/boot/script/{CLIENT}.ipxe");
    let (ok, text, err) = run(
        &mut Link::command(
            &link.client_ns,
            "curl",
            &["-sS", "--fail", "--max-time", "20", &url],
        ),
        30,
    );
    assert!(ok, "{url}: {err}");
    text
}

#[test]
fn a_next_boot_is_applied_by_the_clients_script_once_or_until_changed() {
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    fx.write_config(&config(&link));
    let daemon = Daemon::start(&link, &fx, 1);
    // A BIOS client (option 93 = 0), which iPXE's sanboot boots from its disk.
    link.udhcpc_line(fx.path(), CLIENT, "$ip", true, &["-x", "0x5d:0000"])
        .expect("a lease for the client");
    assert!(
        script(&link).contains("kernel http://"),
        "the pool's image first"
    );

    let (ok, out, err) = next_boot(&link, &fx, &["--client", CLIENT, "local", "--once"]);
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        format!("next boot of client {CLIENT}: local, once")
    );
    let local = script(&link);
    assert!(
        local.ends_with("\nsanboot --no-describe --drive 0x80\n"),
        "{local}"
    );
    assert!(
        local.contains("echo bootpool: next boot local, once, set by admin at "),
        "{local}"
    );
    // Used up by the boot it applied to.
    let after = script(&link);
    assert!(
        after.contains("kernel http://") && !after.contains("sanboot"),
        "{after}"
    );
    let mut events = String::new();
    poll_until(Duration::from_secs(10), Duration::from_millis(100), || {
        events = recorded_events(&fx.path().join("var"));
        events.contains("\"event\":\"next_boot\"")
    });
    let line = events
        .lines()
        .find(|l| l.contains("\"event\":\"next_boot\""))
        .unwrap_or_else(|| panic!("no next_boot event in\n{events}"));
    for part in [
        "\"target\":\"local\"",
        "\"once\":true",
        &format!("\"scope\":\"client {CLIENT}\""),
        "\"by\":\"admin\"",
    ] {
        assert!(line.contains(part), "{part} not in {line}");
    }

    // memtest86+ (Debian's package, server.memtest's default /boot): the script names the
    // BIOS build, and the server hands out that file as it is.
    let (ok, _, err) = next_boot(&link, &fx, &["--client", CLIENT, "memtest", "--once"]);
    assert!(ok, "{err}");
    let memtest = script(&link);
    let url = format!("http://{SERVER}:8080/boot/loaders/memtest86+x64.bin");
    assert!(
        memtest.ends_with(&format!("\nkernel {url} console=ttyS0\nboot\n")),
        "{memtest}"
    );
    let got = fx.path().join("memtest.bin");
    let (ok, _, err) = run(
        &mut Link::command(
            &link.client_ns,
            "curl",
            &[
                "-sS",
                "--fail",
                "--max-time",
                "20",
                "-o",
                got.to_str().unwrap(),
                &url,
            ],
        ),
        30,
    );
    assert!(ok, "{url}: {err}");
    assert_eq!(
        std::fs::read(&got).unwrap(),
        std::fs::read("/boot/memtest86+x64.bin").unwrap()
    );

    // The pool's menu until changed: it stays, through a kill -9 of the daemon.
    let (ok, _, err) = next_boot(&link, &fx, &["--pool", "nfs-room", "menu"]);
    assert!(ok, "{err}");
    assert!(script(&link).contains("\nchoose --default image --timeout 10000 target"));
    daemon.kill9();
    let daemon = Daemon::start(&link, &fx, 2);
    let menu = script(&link);
    assert!(
        menu.contains("\n:local\nsanboot --no-describe --drive 0x80\n"),
        "{menu}"
    );
    assert!(script(&link).contains("menu bootpool: pool nfs-room"));
    // The room's `default` once overrides the pool's menu for one boot; `default` for the
    // pool clears it.
    let (ok, _, err) = next_boot(&link, &fx, &["--room", "10.77.9.0/24", "default", "--once"]);
    assert!(ok, "{err}");
    let once = script(&link);
    assert!(
        once.contains("next boot default, once") && !once.contains("menu"),
        "{once}"
    );
    assert!(script(&link).contains("menu bootpool"));
    let (ok, _, err) = next_boot(&link, &fx, &["--pool", "nfs-room", "default"]);
    assert!(ok, "{err}");
    assert!(!script(&link).contains("next boot"));

    // Refused, with the reason: an image the pool may not mount, a room that is no subnet of
    // the config, a target that is none; and without the admin token.
    for (args, says) in [
        (
            vec!["--client", CLIENT, "image:nope"],
            "image:nope: no image nope in the config",
        ),
        (
            vec!["--room", "10.1.0.0/16", "local"],
            "room 10.1.0.0/16: not one of dhcp.subnets (10.77.9.0/24)",
        ),
        (
            vec!["--pool", "nfs-room", "disk"],
            "`disk` is not a boot target",
        ),
    ] {
        let (ok, _, err) = next_boot(&link, &fx, &args);
        assert!(!ok && err.contains(says), "{args:?}: {err}");
    }
    fx.write_config(&config(&link).replace(&format!("  admin_token: {ADMIN}\n"), ""));
    let (ok, _, err) = next_boot(&link, &fx, &["--client", CLIENT, "local"]);
    assert!(!ok && err.contains("need the admin token"), "{err}");
    let mut wrong = Link::command(
        &link.server_ns,
        env!("CARGO_BIN_EXE_bootpool"),
        &[
            "next-boot",
            "--config",
            fx.config_path().to_str().unwrap(),
            "--client",
            CLIENT,
            "local",
        ],
    );
    let (ok, _, err) = run(wrong.env("BOOTPOOL_ADMIN_TOKEN", "wrong"), 30);
    assert!(!ok && err.contains("401"), "{err}");
    drop(daemon);
}

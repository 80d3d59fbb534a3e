//! A stock Debian image booted by a VM whose NBD root goes through the client agent (`nbd: {
//! via: agent }`, docs/swarm.md "In the initrd"): bootpool's addition carries the static
//! agent, its hook starts it in the initrd (initramfs-tools' mount_top, or dracut's netroot
//! hook) before the initrd's own nbd-client attaches /dev/nbd0 to it on 127.0.0.1, and the
//! agent fetches the root's checked chunks over HTTP; systemd's getty reaches its login prompt
//! on that root. Both of Debian's initrd builders: initramfs-tools (`images/stock`) and
//! dracut 059 (`images/stock-dracut`). What is checked is the console (the record of an
//! agent's root, its chunk fetches, is tests/it/blocks.rs's). The serving member killed under
//! such a client is tests/it/e2e_failover.rs's.
//!
//! Slow (a systemd boot under TCG): `#[ignore]`d, run by `scripts/test --all`, which builds
//! the images first (`scripts/setup --stock`). Needs root.

use crate::common::lab::{client_consoles, lab_config, plain, repo};

/// Boots `images/FOLDER` (its initrd made by `initramfs`) through the agent and checks its
/// console for the command line's `root` argument, the agent serving the root and the getty's
/// prompt.
fn boots_through_the_agent(folder: &str, initramfs: &str, root: &str) {
    let image = repo().join("images").join(folder);
    assert!(
        image.join("rootfs.img").exists(),
        "no images/{folder}: run images/build-stock.sh (scripts/setup --stock)"
    );
    // The manifest beside the root image, as an import makes it (the stock build does not).
    bootpool::image::blocks_file::make_missing(&image.join("rootfs.img")).unwrap();
    let agent = crate::common::static_agent();
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), |text| {
        text.replace(
            "server:\n",
            &format!("server:\n  agent: {}\n", agent.display()),
        )
        .replace(
            "images:\n",
            &format!("images:\n  stock:\n    dir: {}\n", image.display()),
        ) + &format!(
            "  stock-agent:
    image: stock
    root: nbd
    initramfs: {initramfs}
    nbd: {{ via: agent }}
    cmdline: 'console=ttyS0'
    clients:
      - {{ macs: \"52:54:00:77:61:01-52:54:00:77:61:0f\" }}
"
        )
    });
    let args = [
        "--clients",
        "1",
        "--pool",
        "stock-agent",
        "--memory",
        "1024",
        "--timeout",
        "900",
    ];
    // The lab's own verdict is the record's, which this boot does not reach (above).
    let mut lab = std::process::Command::new(crate::common::bootpool_with_instruments());
    lab.arg("lab").args(args).arg("--config").arg(&config);
    let (_, table, log) = crate::common::run(&mut lab, 1100);
    let consoles = client_consoles(&dir.path().join("var"));
    let console = consoles.iter().map(|c| plain(c)).collect::<String>();
    assert!(table.contains("stock-agent"), "{table}\n{log}");
    for line in [
        root,
        "bootpool.blocks=http://",
        "bootpool-agent: serving the root on 127.0.0.1:10809",
        " login: ",
    ] {
        assert!(
            console.contains(line),
            "no `{line}` on the console:\n{console}"
        );
    }
}

#[test]
#[ignore = "a systemd boot under emulation; scripts/test --all runs it"]
fn a_stock_image_boots_its_nbd_root_through_the_agent_in_the_initrd() {
    boots_through_the_agent("stock", "initramfs-tools", "nbdroot=127.0.0.1:10809/root");
}

/// dracut 059's nbdroot, after the addition's netroot hook started the agent.
#[test]
#[ignore = "a systemd boot under emulation; scripts/test --all runs it"]
fn a_stock_dracut_image_boots_its_nbd_root_through_the_agent_in_the_initrd() {
    boots_through_the_agent("stock-dracut", "dracut", "root=nbd:127.0.0.1:root");
}

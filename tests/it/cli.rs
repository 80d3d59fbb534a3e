//! The command line: `bootpool check` on the shipped config and on broken ones, and what
//! `bootpool serve` sets up for itself (the open-file limit).

use std::process::Command;

fn check(config: &std::path::Path) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.args(["check", "--config"]).arg(config);
    crate::common::run(&mut c, 20)
}

#[test]
fn shipped_config_checks_clean() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("pools.yaml");
    // Its address and bridge are the lab's, made inside `bootpool lab`'s own namespace.
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.args(["check", "--for-another-host", "--config"])
        .arg(&path);
    let (ok, out, err) = crate::common::run(&mut c, 20);
    assert!(ok, "{out}{err}");
    assert!(out.contains("ok (2 pools"), "{out}");
    assert!(!err.contains("warning"), "the shipped config warns: {err}");
}

#[test]
fn broken_config_names_file_line_and_key() {
    let fx = crate::common::Fixture::new();
    fx.write_config(&fx.loopback().pool("nbd-room", "roots: nbd"));
    let (ok, out, err) = check(&fx.config_path());
    assert!(!ok, "{out}");
    let want = format!(
        "{}:24:5: pools.nbd-room: unknown field `roots`",
        fx.config_path().display()
    );
    assert!(err.contains(&want), "{err}");
}

/// A pool's own command line is checked like any other value: an unknown placeholder is an
/// error naming the file, the line and the key.
#[test]
fn an_unknown_cmdline_placeholder_names_file_line_and_key() {
    let fx = crate::common::Fixture::new();
    let text = fx.loopback().pool(
        "nbd-room",
        "cmdline_template: \"{root} bootpool.url={http} {sever} {cmdline}\"",
    );
    fx.write_config(&text);
    let (ok, out, err) = check(&fx.config_path());
    assert!(!ok, "{out}");
    let want = format!(
        "{}:24:5: pools.nbd-room.cmdline_template: has an unknown placeholder `{{sever}}`",
        fx.config_path().display()
    );
    assert!(err.contains(&want), "{err}");
    // Spelt right, it checks clean.
    fx.write_config(&text.replace("{sever}", "{server}"));
    let (ok, out, err) = check(&fx.config_path());
    assert!(ok, "{out}{err}");
}

#[test]
fn missing_image_files_fail_the_check() {
    let fx = crate::common::Fixture::new();
    std::fs::remove_file(fx.image_dir().join("rootfs.img")).unwrap();
    let (ok, _, err) = check(&fx.config_path());
    assert!(!ok);
    // At the image's folder, with the pool that needs the file.
    let want = format!(
        "{}:13:11: images.demo.dir: image `demo` lacks {}, which pool nbd-room boots from",
        fx.config_path().display(),
        fx.image_dir().join("rootfs.img").display()
    );
    assert!(err.contains(&want), "{err}");
}

/// A kernel that is a symlink out of its image folder would answer "not found" over TFTP and
/// HTTP: `check` says so, naming the file, where it points and why, and `serve` refuses to
/// start with the same words. A symlink that stays inside the folder is fine.
#[test]
fn boot_files_linked_out_of_the_image_folder_fail_check_and_serve() {
    let fx = crate::common::Fixture::new();
    let elsewhere = fx.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let kernel = fx.image_dir().join("vmlinuz");
    std::fs::rename(&kernel, elsewhere.join("vmlinuz-6.1")).unwrap();
    std::os::unix::fs::symlink(elsewhere.join("vmlinuz-6.1"), &kernel).unwrap();
    let target = elsewhere.join("vmlinuz-6.1").canonicalize().unwrap();
    let want = format!(
        "{}:13:3: images.demo.kernel: {} (`vmlinuz`) is a symlink to {}, outside the image folder {}: TFTP and HTTP serve nothing outside it",
        fx.config_path().display(),
        kernel.display(),
        target.display(),
        fx.image_dir().display()
    );
    let (ok, out, err) = check(&fx.config_path());
    assert!(!ok, "{out}");
    assert!(err.contains(&want), "{err}");
    let mut serve = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    serve.args(["serve", "--config"]).arg(fx.config_path());
    let (ok, _, err) = crate::common::run(&mut serve, 20);
    assert!(!ok, "serve started");
    assert!(err.contains(&want), "{err}");
    // Inside the folder, a symlink is followed.
    std::fs::remove_file(&kernel).unwrap();
    std::fs::create_dir_all(fx.image_dir().join("boot")).unwrap();
    std::fs::rename(&target, fx.image_dir().join("boot/vmlinuz-6.1")).unwrap();
    std::os::unix::fs::symlink("boot/vmlinuz-6.1", &kernel).unwrap();
    let (ok, out, err) = check(&fx.config_path());
    assert!(ok, "{out}{err}");
}

/// On the serving host `check` refuses what a bind would: a port another program listens on
/// (named with its PID: here this test's process), an interface the host lacks, an address it
/// does not hold; each at its key's line. `--for-another-host` leaves them unchecked, and
/// `serve` refuses the same with the same words.
#[test]
fn check_refuses_what_this_host_would_refuse_at_bind() {
    let fx = crate::common::Fixture::new();
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    fx.write_config(&fx.loopback().port("nfs", port));
    let (ok, out, err) = check(&fx.config_path());
    assert!(!ok, "{out}");
    let want = format!(
        "{}:6:30: server.ports.nfs: cannot bind TCP 127.0.0.1:{port}",
        fx.config_path().display()
    );
    assert!(err.contains(&want), "{err}");
    assert!(
        err.contains(&format!("(pid {})", std::process::id())),
        "the holder is named: {err}"
    );
    drop(taken);
    let (ok, out, err) = check(&fx.config_path());
    assert!(ok, "{out}{err}");

    let elsewhere = fx
        .loopback()
        .interfaces("nosuchnic0")
        .address("192.0.2.1")
        .network("192.0.2.0/24")
        .range("192.0.2.100-192.0.2.199");
    fx.write_config(&elsewhere);
    let (ok, out, err) = check(&fx.config_path());
    assert!(!ok, "{out}");
    let nic = format!(
        "{}:3:3: server.interfaces: this host has no interface `nosuchnic0`",
        fx.config_path().display()
    );
    assert!(err.contains(&nic), "{err}");
    assert!(
        err.contains("server.address: this host does not hold 192.0.2.1"),
        "{err}"
    );
    let mut other = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    other
        .args(["check", "--for-another-host", "--config"])
        .arg(fx.config_path());
    let (ok, out, err) = crate::common::run(&mut other, 20);
    assert!(ok, "{out}{err}");
    assert!(out.contains("ports not checked"), "{out}");
    let mut serve = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    serve.args(["serve", "--config"]).arg(fx.config_path());
    let (ok, _, err) = crate::common::run(&mut serve, 20);
    assert!(!ok, "serve started");
    assert!(err.contains(&nic), "{err}");
}

/// While the daemon of a config's state_dir runs, its ports are its own: `check` of that
/// config (before a restart, say) leaves them untried and says so, and still refuses a port
/// another program holds once that daemon is gone.
#[tokio::test]
async fn check_leaves_the_ports_of_the_running_daemon_alone() {
    let fx = crate::common::Fixture::new();
    let daemon = fx.start().await;
    let nfs = daemon.bound.nfs.port();
    fx.write_config(&fx.loopback().port("nfs", nfs));
    let path = fx.config_path();
    let (ok, out, err) = tokio::task::spawn_blocking(move || check(&path))
        .await
        .unwrap();
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("ports not checked: a bootpool serving this state_dir has them"),
        "{out}"
    );
    daemon.stop().await;
    let taken = std::net::TcpListener::bind(("0.0.0.0", nfs)).unwrap();
    let (ok, _, err) = check(&fx.config_path());
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "server.ports.nfs: cannot bind TCP 127.0.0.1:{nfs}"
        )),
        "{err}"
    );
    drop(taken);
}

/// A pool named twice is an error at its second name (serde's map would keep one room and
/// drop the other unsaid).
#[test]
fn a_pool_named_twice_fails_the_check_at_its_second_name() {
    let fx = crate::common::Fixture::new();
    let text = fx.loopback().to_string();
    let second = text.replace("  nbd-room:\n", "  nfs-room:\n");
    assert_ne!(text, second);
    fx.write_config(&second);
    let (ok, out, err) = check(&fx.config_path());
    assert!(!ok, "{out}");
    let want = format!(
        "{}:21:3: pools: `nfs-room` is given twice in this map",
        fx.config_path().display()
    );
    assert!(err.contains(&want), "{err}");
}

/// An initrd made by initramfs-tools (a newc archive with its `conf/initramfs.conf`, packed by
/// cpio and gzip) in a pool left at dracut's root syntax cannot find its root: the check says
/// so at the pool's `initramfs`, and passes once the pool says initramfs-tools.
#[test]
fn an_initramfs_tools_initrd_in_a_dracut_pool_fails_the_check() {
    let fx = crate::common::Fixture::new();
    let tree = fx.path().join("initrd-tree");
    std::fs::create_dir_all(tree.join("conf")).unwrap();
    std::fs::write(tree.join("conf/initramfs.conf"), "MODULES=most\n").unwrap();
    std::fs::write(tree.join("init"), "#!/bin/sh\n").unwrap();
    let initrd = fx.image_dir().join("initrd.img");
    let mut pack = Command::new("sh");
    pack.current_dir(&tree).arg("-c").arg(format!(
        "find . | cpio -o -H newc --quiet | gzip > {}",
        initrd.display()
    ));
    let (ok, out, err) = crate::common::run(&mut pack, 20);
    assert!(ok, "{out}{err}");
    // An NFS root with initramfs-tools needs the portmapper on 111: the NBD pool alone.
    let text = fx.loopback().without_pool("nfs-room");
    fx.write_config(&text);
    let (ok, out, err) = check(&fx.config_path());
    assert!(!ok, "{out}");
    assert!(
        err.contains("pools.nbd-room.initramfs: image `demo`'s initrd")
            && err.contains("was made by initramfs-tools")
            && err.contains("set `initramfs: initramfs-tools`"),
        "{err}"
    );
    fx.write_config(&text.pool("nbd-room", "initramfs: initramfs-tools"));
    let (ok, out, err) = check(&fx.config_path());
    assert!(ok, "{out}{err}");
}

/// The soft limit on open files in /proc/PID/limits.
fn soft_nofile(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

#[test]
fn serve_raises_the_open_file_limit_to_the_hard_limit() {
    // systemd starts services with a soft limit of 1024 under a far higher hard one.
    let fx = crate::common::Fixture::new();
    fx.write_config(&fx.loopback());
    let log_path = fx.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new("prlimit")
        .args(["--nofile=256:4096", "--"])
        .arg(env!("CARGO_BIN_EXE_bootpool"))
        .args(["serve", "--config"])
        .arg(fx.config_path())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    // prlimit execs the daemon: the same process.
    let mut logged = String::new();
    crate::common::poll_until(
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(100),
        || {
            logged = std::fs::read_to_string(&log_path).unwrap();
            logged.contains("bootpool serving")
        },
    );
    let soft = soft_nofile(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert!(logged.contains("bootpool serving"), "{logged}");
    assert!(logged.contains("raised the open-file limit"), "{logged}");
    assert_eq!(soft, 4096, "{logged}");
}

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
    let (ok, out, err) = check(&path);
    assert!(ok, "{out}{err}");
    assert!(out.contains("ok (2 pools"), "{out}");
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

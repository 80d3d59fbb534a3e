//! End to end, homes and accounts as docs/homes.md sets them up: the stock dracut image
//! (images/build-stock.sh --dracut: Debian's own packages, nfs-common among them) imported as
//! an image, a user added with `bootpool image exec` (`useradd -M`, `chpasswd`) into a new
//! revision, activated; the pool's `homes` names an NFSv4 export that nfs-ganesha serves on an
//! address of its own beside bootpool (`bootpool lab --homes`). A VM boots the image over NFS
//! with the overlay addition, which writes the homes into the root's /etc/fstab; the lab logs
//! in on its serial console as the user, through the image's getty, login and PAM
//! (`--login`), on the client's own name, and the user writes a file in the home. The file lands on the home server's
//! disk, owned by the user's uid, and the image is unchanged.
//!
//! Slow (an import of the stock tree and a systemd boot under TCG): `#[ignore]`d, run by
//! `scripts/test --all`, which builds the image first (`scripts/setup --stock`). Needs root,
//! nfs-ganesha and nfs-ganesha-vfs.

use crate::common::lab::{lab_config, plain, repo, run_lab};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::process::Command;

const MAC: &str = "52:54:00:77:61:01";
/// The client's own name, which its getty's prompt and the note's file name show.
const NAME: &str = "desk01";
/// The homes' server: an address of the lab's subnet beside bootpool's 10.77.0.1.
const HOMES: &str = "10.77.0.2";
const UID: u32 = 2001;
const PASSWORD: &str = "lab-Pass-7";
/// What the user types once logged in: a file in the home, read back upper-cased (so the
/// console's echo of the typing never matches), and /home's mount as the system sees it.
const SESSION: &str = "echo home-ok-$(id -un) >~/note-$(hostname); \
    tr a-z A-Z <~/note-$(hostname); findmnt -no SOURCE,FSTYPE /home | tr a-z A-Z";

/// `bootpool image ARGS --config CONFIG`, the config before ARGS (an exec's command follows
/// its `--`).
fn image(config: &std::path::Path, args: &[&str]) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.args(["image", "--config"]).arg(config).args(args);
    let (ok, out, err) = crate::common::run(&mut c, 1200);
    assert!(ok, "{args:?}\n{out}\n{err}");
    out + &err
}

/// The revision `out` (an import's or an exec's output) says it made: `imported rN`.
fn imported(out: &str) -> String {
    let at = out.find("imported r").unwrap_or_else(|| panic!("{out}"));
    out[at + "imported ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .trim_end_matches([',', '.', ':'])
        .to_string()
}

#[test]
#[ignore = "imports the stock tree and boots it under emulation; scripts/test --all runs it"]
fn a_user_logs_in_on_a_stock_image_and_writes_to_a_home_on_the_sites_nfs_server() {
    let stock = repo().join("images/stock-dracut");
    for f in [
        "vmlinuz",
        "initrd.img",
        "rootfs/sbin/init",
        "rootfs/sbin/mount.nfs",
    ] {
        assert!(
            stock.join(f).exists(),
            "no {f} in {}: run images/build-stock.sh --dracut (scripts/setup --stock)",
            stock.display()
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let desk = dir.path().join("desk");
    let config = lab_config(dir.path(), |text| {
        text.replace(
            "images:\n",
            &format!("images:\n  desk:\n    dir: {}\n", desk.display()),
        ) + &format!(
            "  desk-nfs:
    image: desk
    root: nfs
    initramfs: dracut
    cmdline: console=ttyS0
    homes: {{ server: {HOMES}, export: /home }}
    clients:
      - {{ mac: \"{MAC}\", name: {NAME} }}
"
        )
    });

    // The image, then its user, as docs/homes.md says.
    let (k, i) = (stock.join("vmlinuz"), stock.join("initrd.img"));
    let out = image(
        &config,
        &[
            "import",
            "desk",
            "--from",
            stock.join("rootfs").to_str().unwrap(),
            "--kernel",
            k.to_str().unwrap(),
            "--initrd",
            i.to_str().unwrap(),
            "--activate",
        ],
    );
    let first = imported(&out);
    let add_user =
        format!("useradd -M -u {UID} -s /bin/bash student && echo student:{PASSWORD} | chpasswd");
    let out = image(&config, &["exec", "desk", "--", "sh", "-c", &add_user]);
    let second = imported(&out);
    assert_ne!(first, second, "{out}");
    image(&config, &["activate", "desk", &second]);
    // The revision's folder is named by its id, which `active` holds.
    let active = std::fs::read_to_string(desk.join("active")).unwrap();
    let revision = desk.join("revs").join(active.trim()).join("rootfs");
    let passwd = std::fs::read_to_string(revision.join("etc/passwd")).unwrap();
    assert!(passwd.contains(&format!("student:x:{UID}:")), "{passwd}");

    // The home, on the home server's disk, the user's own.
    let homes = dir.path().join("homes");
    let home = homes.join("student");
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(UID), Some(UID)).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();

    let login = format!("student:{PASSWORD}");
    let (table, rows) = run_lab(
        &config,
        &[
            "--clients",
            "1",
            "--pool",
            "desk-nfs",
            "--memory",
            "1024",
            "--homes",
            homes.to_str().unwrap(),
            "--login",
            &login,
            "--login-run",
            SESSION,
            "--timeout",
            "1200",
            "--stay-on",
            "90",
        ],
        1500,
    );
    assert_eq!(rows.len(), 1, "{table}");
    assert_eq!(rows[0][3], "booted", "{table}");
    let run = crate::common::lab::run_dir(&dir.path().join("var"));
    let console = plain(&std::fs::read_to_string(run.join("pc01.log")).unwrap());
    for line in [
        // The addition wrote the homes into the root's fstab...
        format!("bootpool-homes: /home is {HOMES}:/home"),
        // ...the booted system mounted them over NFSv4...
        format!("{HOMES}:/HOME NFS4"),
        // ...and the user, logged in through the getty, wrote and read back in the home.
        "HOME-OK-STUDENT".to_string(),
        // The client has its own name (option 12 and `systemd.hostname=`), not the image's.
        format!("{NAME} login: "),
    ] {
        assert!(
            console.contains(&line),
            "no `{line}` on the console:\n{table}\n{console}"
        );
    }
    assert!(!console.contains("Login incorrect"), "{console}");

    // The file is on the home server's disk, the user's.
    let notes: Vec<_> = std::fs::read_dir(&home)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("note-"))
        .map(|e| e.path())
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}\n{console}");
    assert!(notes[0].ends_with(format!("note-{NAME}")), "{notes:?}");
    assert_eq!(
        std::fs::read_to_string(&notes[0]).unwrap(),
        "home-ok-student\n"
    );
    assert_eq!(std::fs::metadata(&notes[0]).unwrap().uid(), UID);
    // And nothing of the session is in the image.
    assert!(!revision.join("home/student").exists());
}

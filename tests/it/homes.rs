//! Homes from another NFS server on the bootpool host (docs/homes.md): the `bootpool` binary
//! serves its NFS root on 10.77.44.1 with the standard ports (portmap 111, NFS 2049) while
//! nfs-ganesha, in the same network namespace, serves /home over NFSv4 on 10.77.44.2 port
//! 2049. Both are up at once; a client with a lease mounts the root from bootpool (libnfs's
//! nfs-ls, through the portmapper) and writes a file into a user's home on ganesha as that
//! user (libnfs's nfs-cp with `uid=`), which lands on the home server's disk owned by the
//! user's uid, while another uid is refused the user's 0700 home. Needs root, nfs-ganesha
//! and nfs-ganesha-vfs (scripts/setup).

use crate::common::netns::{Daemon, Link};
use crate::common::{Fixture, Loopback, poll_until, run};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const NET: &str = "10.77.44";
const SERVER: &str = "10.77.44.1";
const HOMES: &str = "10.77.44.2";
const NFS_MAC: &str = "52:54:00:77:00:01";
const UID: u32 = 1000;

/// nfs-ganesha in `ns`, with a private /run (its pid and dbus files), stopped on drop.
struct Ganesha(Child);

impl Drop for Ganesha {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_ganesha(link: &Link, dir: &std::path::Path, homes: &std::path::Path) -> Ganesha {
    std::fs::create_dir_all(dir.join("recovery")).unwrap();
    let conf = dir.join("ganesha.conf");
    // The config `bootpool lab --homes` writes: NFSv4 only (no portmapper: bootpool has port
    // 111), bound to `HOMES`, `homes` exported read-write as /home, root squashed.
    let text = bootpool_instruments::lab::homes::ganesha_conf(
        HOMES.parse().unwrap(),
        homes,
        "/home",
        &dir.join("recovery"),
    );
    std::fs::write(&conf, text).unwrap();
    let log = std::fs::File::create(dir.join("ganesha.out")).unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", &link.server_ns, "unshare", "-m"])
        .args(["--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs tmpfs /run && exec ganesha.nfsd -F -f \"$1\" -L \"$2\" -p \"$3\"")
        .arg("sh")
        .arg(&conf)
        .arg(dir.join("ganesha.log"))
        .arg(dir.join("ganesha.pid"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("running ganesha.nfsd (nfs-ganesha, scripts/setup)");
    Ganesha(child)
}

/// The TCP listeners on `port` in the server's namespace, as `ss` prints their local address.
fn listeners(link: &Link, port: u16) -> Vec<String> {
    let filter = format!("sport = :{port}");
    let (ok, out, err) = run(
        &mut Link::command(&link.server_ns, "ss", &["-Hltn", &filter]),
        10,
    );
    assert!(ok, "ss: {err}");
    out.lines()
        .filter_map(|l| l.split_whitespace().nth(3).map(str::to_string))
        .collect()
}

/// Runs `program args` in the client's namespace: (succeeded, stdout + stderr).
fn client(link: &Link, program: &str, args: &[&str]) -> (bool, String) {
    let (ok, out, err) = run(&mut Link::command(&link.client_ns, program, args), 60);
    (ok, out + &err)
}

#[test]
fn another_nfs_server_serves_homes_beside_bootpool_on_the_same_host() {
    let link = Link::new(&format!("{SERVER}/24"));
    link.in_server(&[
        "ip",
        "addr",
        "add",
        &format!("{HOMES}/24"),
        "dev",
        &link.server_if,
    ]);
    let fx = Fixture::new();
    let config = Loopback::default()
        .on_veth(NET, &link.server_if)
        .http(&format!("{SERVER}:8080"))
        .standard_ports()
        .dhcp(&format!("router: {SERVER}"));
    fx.write_config(&config);
    let daemon = Daemon::start(&link, &fx, 1);

    // bootpool's NFS and portmapper are on its own addresses only, so the port is free on
    // the other one.
    for port in [111, 2049] {
        let held = listeners(&link, port);
        assert!(
            held.iter()
                .all(|at| at.starts_with(SERVER) || at.starts_with("127.0.0.1")),
            "port {port}: {held:?}"
        );
        assert!(held.iter().any(|at| at.starts_with(SERVER)), "{held:?}");
    }

    let dir = tempfile::tempdir().unwrap();
    let homes = dir.path().join("homes");
    let home = homes.join("student");
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(UID), Some(UID)).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let _ganesha = start_ganesha(&link, dir.path(), &homes);
    let up = poll_until(Duration::from_secs(30), Duration::from_millis(100), || {
        listeners(&link, 2049).iter().any(|at| at.contains(HOMES))
    });
    let said = std::fs::read_to_string(dir.path().join("ganesha.log")).unwrap_or_default();
    assert!(up, "ganesha did not listen on {HOMES}:2049: {said}");

    let bound = link.udhcpc(fx.path(), NFS_MAC, true).expect("a lease");
    assert!(bound[1].starts_with(NET), "{bound:?}");

    // The root, from bootpool, through its portmapper on 111.
    let (ok, said) = client(
        &link,
        "nfs-ls",
        &[&format!("nfs://{SERVER}/demo/etc/?version=3")],
    );
    assert!(ok && said.contains("hostname"), "{said}");

    // The home, from ganesha, as its user; then as another user, refused.
    let local = dir.path().join("note.txt");
    std::fs::write(&local, "written by student\n").unwrap();
    let local = local.to_str().unwrap();
    let url = |uid: u32, name: &str| {
        format!("nfs://{HOMES}/home/student/{name}?version=4&uid={uid}&gid={uid}")
    };
    let (ok, said) = client(&link, "nfs-cp", &[local, &url(UID, "note.txt")]);
    assert!(ok, "nfs-cp as {UID}: {said}");
    let written = home.join("note.txt");
    assert_eq!(
        std::fs::read_to_string(&written).unwrap(),
        "written by student\n"
    );
    assert_eq!(std::fs::metadata(&written).unwrap().uid(), UID);
    let (ok, said) = client(&link, "nfs-cp", &[local, &url(UID + 1, "other.txt")]);
    assert!(!ok, "another uid wrote into a 0700 home: {said}");
    assert!(!home.join("other.txt").exists());

    // bootpool still serves its root with the home server up.
    let (ok, said) = client(
        &link,
        "nfs-ls",
        &[&format!("nfs://{SERVER}/demo/etc/?version=3")],
    );
    assert!(ok && said.contains("hostname"), "{said}");
    drop(daemon);
}

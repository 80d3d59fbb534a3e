//! The NFS root export, driven by libnfs's utilities (nfs-ls, nfs-cat, nfs-cp) against the
//! daemon started in-process: listings, paging, contents, symlinks, refused writes, `..`, and
//! what the recorder saw.

mod common;

use bootpool::record::{Event, Kind, Proto, Who};
use common::{Fixture, pattern};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SECS: u64 = 60;

fn url(addr: SocketAddr, path: &str) -> String {
    let p = addr.port();
    format!("nfs://127.0.0.1{path}?nfsport={p}&mountport={p}&version=3",)
}

/// Runs a libnfs tool with a time bound. Output goes through files: a listing can be larger
/// than a pipe holds, and `common::run` only reads its pipes once the program has exited.
async fn nfs(tool: &str, args: &[&str]) -> (bool, String, String) {
    let mut c = Command::new(tool);
    c.args(args);
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        let (out, err) = (dir.path().join("out"), dir.path().join("err"));
        let program = format!("{c:?}");
        let mut child = c
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
        let deadline = Instant::now() + Duration::from_secs(SECS);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{program} did not finish in {SECS}s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let read = |p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
        (status.success(), read(&out), read(&err))
    })
    .await
    .unwrap()
}

/// File names of an `nfs-ls` listing (the last column), without `.` and `..`.
fn names(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|n| *n != "." && *n != "..")
        .map(str::to_string)
        .collect()
}

fn events(state_dir: &std::path::Path) -> Vec<Event> {
    let text = std::fs::read_to_string(state_dir.join("events.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[tokio::test]
async fn lists_reads_and_refuses_writes() {
    let fx = Fixture::new();
    // A big directory, to make READDIR page.
    let big = fx.image_dir().join("rootfs/usr/share");
    std::fs::create_dir_all(&big).unwrap();
    for i in 0..3000 {
        std::fs::write(big.join(format!("entry-with-a-longish-name-{i:05}")), b"x").unwrap();
    }
    // The recorder ties NFS events (known by IP) to a client through its DHCP lease: give
    // 127.0.0.1 one, as a journal replayed at start.
    let state = fx.path().join("var");
    std::fs::create_dir_all(&state).unwrap();
    let ack = Event::now(
        Who::Mac("52:54:00:77:00:01".parse().unwrap()),
        Kind::DhcpAck {
            ip: Ipv4Addr::LOCALHOST,
            pxe: false,
            ipxe: false,
            pool: "nfs-room".into(),
        },
    );
    std::fs::write(
        state.join("events.jsonl"),
        serde_json::to_string(&ack).unwrap() + "\n",
    )
    .unwrap();
    let daemon = fx.start().await;
    let nfs_addr = daemon.bound.nfs;

    let (ok, out, err) = nfs("nfs-ls", &[&url(nfs_addr, "/demo")]).await;
    assert!(ok, "{err}");
    let mut root = names(&out);
    root.sort();
    assert_eq!(root, ["etc", "lib", "usr"], "{out}");
    // The symlink is shown as a symlink, with its target, not followed.
    let lib = out.lines().find(|l| l.contains(" lib")).unwrap();
    assert!(lib.starts_with('l'), "{lib}");

    let (ok, out, err) = nfs("nfs-ls", &[&url(nfs_addr, "/demo/usr/lib")]).await;
    assert!(ok, "{err}");
    assert_eq!(names(&out).len(), 50, "{out}");

    let (ok, out, err) = nfs("nfs-ls", &["-R", &url(nfs_addr, "/demo/usr")]).await;
    assert!(ok, "{err}");
    let so = out.lines().filter(|l| l.contains(".so")).count();
    assert_eq!(so, 50, "{out}");

    let (ok, out, err) = nfs("nfs-ls", &[&url(nfs_addr, "/demo/usr/share")]).await;
    assert!(ok, "{err}");
    let mut listed = names(&out);
    listed.sort();
    listed.dedup();
    assert_eq!(listed.len(), 3000);
    assert_eq!(listed[0], "entry-with-a-longish-name-00000");
    assert_eq!(listed[2999], "entry-with-a-longish-name-02999");

    // Contents, byte for byte.
    let copy = fx.path().join("lib7.copy");
    let (ok, _, err) = nfs(
        "nfs-cp",
        &[
            &url(nfs_addr, "/demo/usr/lib/lib7.so"),
            copy.to_str().unwrap(),
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(&copy).unwrap(), pattern(107, 1000 + 7 * 517));
    let (ok, out, err) = nfs("nfs-cat", &[&url(nfs_addr, "/demo/etc/hostname")]).await;
    assert!(ok, "{err}");
    assert_eq!(out, "demo\n");

    // Writes are refused and leave the image as it was.
    let local = fx.path().join("local.txt");
    std::fs::write(&local, b"intruder").unwrap();
    let (ok, _, _) = nfs(
        "nfs-cp",
        &[local.to_str().unwrap(), &url(nfs_addr, "/demo/etc/new.txt")],
    )
    .await;
    assert!(!ok, "a write must fail");
    assert!(!fx.image_dir().join("rootfs/etc/new.txt").exists());
    let (ok, _, _) = nfs(
        "nfs-cp",
        &[
            local.to_str().unwrap(),
            &url(nfs_addr, "/demo/etc/hostname"),
        ],
    )
    .await;
    assert!(!ok, "an overwrite must fail");
    assert_eq!(
        std::fs::read(fx.image_dir().join("rootfs/etc/hostname")).unwrap(),
        b"demo\n"
    );

    // `..` stays inside the image: from its root it is the root again.
    let (ok, out, err) = nfs("nfs-ls", &[&url(nfs_addr, "/demo/../..")]).await;
    if ok {
        let mut up = names(&out);
        up.sort();
        assert_eq!(up, ["etc", "lib", "usr"], "{out}");
    } else {
        assert!(!err.is_empty());
    }
    let (ok, _, _) = nfs("nfs-cat", &[&url(nfs_addr, "/demo/../../pools.yaml")]).await;
    assert!(!ok, "pools.yaml is outside every export");
    // The bare root and unknown images are not mountable.
    let (ok, _, _) = nfs("nfs-ls", &[&url(nfs_addr, "/")]).await;
    assert!(!ok, "the composite root is not an export");
    let (ok, _, _) = nfs("nfs-ls", &[&url(nfs_addr, "/nope")]).await;
    assert!(!ok);

    daemon.stop().await;
    let evs = events(&state);
    let attach = evs
        .iter()
        .filter(|e| matches!(&e.kind, Kind::RootAttach { proto: Proto::Nfs, export } if export.starts_with("/demo")))
        .count();
    assert!(attach >= 5, "mounts recorded: {attach}");
    let read: u64 = evs
        .iter()
        .filter_map(|e| match e.kind {
            Kind::RootRead {
                proto: Proto::Nfs,
                bytes,
            } => Some(bytes),
            _ => None,
        })
        .sum();
    // lib7.so and hostname were read in full (libnfs may read a file more than once).
    assert!(
        read >= (1000 + 7 * 517 + 5) as u64,
        "read bytes recorded: {read}"
    );
}

//! The NFS root export, driven by libnfs's utilities (nfs-ls, nfs-cat, nfs-cp) against the
//! daemon started in-process: listings, paging, contents, symlinks, refused writes, `..`, and
//! what the recorder saw.

use crate::common::rpc::{Reader, Rpc, put_opaque, put_u32};
use crate::common::{Fixture, pattern};
use bootpool::record::{Event, Kind, Proto};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SECS: u64 = 60;

fn url(addr: SocketAddr, path: &str) -> String {
    let p = addr.port();
    format!("nfs://127.0.0.1{path}?nfsport={p}&mountport={p}&version=3",)
}

/// Runs a libnfs tool with a time bound. Output goes through files: a listing can be larger
/// than a pipe holds, and `crate::common::run` only reads its pipes once the program has exited.
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
/// Copies `remote` to `local` with nfs-cp and returns what arrived.
async fn copy_out(remote: &str, local: &std::path::Path) -> Vec<u8> {
    let (ok, _, err) = nfs("nfs-cp", &[remote, local.to_str().unwrap()]).await;
    assert!(ok, "{err}");
    std::fs::read(local).unwrap()
}

fn names(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|n| *n != "." && *n != "..")
        .map(str::to_string)
        .collect()
}

fn events(state_dir: &std::path::Path) -> Vec<Event> {
    let text = crate::common::recorded_events(state_dir);
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
    // A file of several 1 MiB READs whose length is not a multiple of 4 (XDR padding).
    let large = pattern(108, (2 << 20) + (1 << 19) + 3);
    std::fs::write(fx.image_dir().join("rootfs/etc/large.bin"), &large).unwrap();
    // The recorder ties NFS events (known by IP) to a client through its DHCP lease: give
    // 127.0.0.1 one, as a journal replayed at start.
    fx.journal_loopback_lease("52:54:00:77:00:01", "nfs-room");
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
    let lib7 = copy_out(
        &url(nfs_addr, "/demo/usr/lib/lib7.so"),
        &fx.path().join("lib7.copy"),
    )
    .await;
    assert_eq!(lib7, pattern(107, 1000 + 7 * 517));
    let copied = copy_out(
        &url(nfs_addr, "/demo/etc/large.bin"),
        &fx.path().join("large.copy"),
    )
    .await;
    assert!(copied == large, "large.bin differs");
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

    // A MOUNT path's `..` goes up a folder, as rpc.mountd's realpath; above the image's root it
    // is refused (MNT3ERR_ACCES), not taken back to the root.
    let (ok, out, err) = nfs("nfs-ls", &[&url(nfs_addr, "/demo/usr/lib/..")]).await;
    assert!(ok, "{err}");
    let mut seen = names(&out);
    seen.sort();
    assert_eq!(seen, ["lib", "share"], "{out}");
    for up in ["/demo/../..", "/demo/usr/../../.."] {
        let (ok, out, err) = nfs("nfs-ls", &[&url(nfs_addr, up)]).await;
        assert!(!ok, "{up}: {out}");
        assert!(err.contains("ACCES"), "{up}: {err}");
    }
    let (ok, _, _) = nfs("nfs-cat", &[&url(nfs_addr, "/demo/../../pools.yaml")]).await;
    assert!(!ok, "pools.yaml is outside every export");
    // The bare root and unknown images are not mountable.
    let (ok, _, _) = nfs("nfs-ls", &[&url(nfs_addr, "/")]).await;
    assert!(!ok, "the composite root is not an export");
    let (ok, _, _) = nfs("nfs-ls", &[&url(nfs_addr, "/nope")]).await;
    assert!(!ok);

    daemon.stop().await;
    let evs = events(&fx.path().join("var"));
    // Every libnfs tool run above mounts the folder of its URL, once; the paths above the
    // image's root, the bare root and `/nope` were refused, so they are not attached.
    let mounted: Vec<&str> = evs
        .iter()
        .filter_map(|e| match &e.kind {
            Kind::RootAttach {
                proto: Proto::Nfs,
                export,
            } => Some(export.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        mounted,
        [
            "/demo",
            "/demo/usr/lib",
            "/demo/usr",
            "/demo/usr/share",
            "/demo/usr/lib",
            "/demo/etc",
            "/demo/etc",
            "/demo/etc",
            "/demo/etc",
            "/demo/usr/lib/..",
        ]
    );
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
    // lib7.so, large.bin and hostname, each read once and in full; the refused writes read
    // nothing, listings are not reads.
    assert_eq!(read, (1000 + 7 * 517) + large.len() as u64 + 5);
}

#[tokio::test]
async fn handles_survive_a_restart() {
    let fx = Fixture::new();
    let daemon = fx.start().await;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, daemon.bound.nfs.port()));
    let mut c = Rpc::connect(addr).await;
    let root = c.mount("/demo").await;
    let usr = c.lookup(&root, "usr").await;
    let lib = c.lookup(&usr, "lib").await;
    let so = c.lookup(&lib, "lib3.so").await;
    let want = pattern(103, 1000 + 3 * 517);
    assert_eq!(c.read(&so, 1 << 20).await, Ok((want.clone(), true)));
    // A short read is not EOF.
    assert_eq!(c.read(&so, 100).await, Ok((want[..100].to_vec(), false)));
    // A big READ's data leaves from its own buffer after the header: its record (odd length,
    // so XDR pads it) must end where the next reply starts.
    let odd = pattern(109, (64 << 10) + 1);
    std::fs::write(fx.image_dir().join("rootfs/usr/lib/odd.bin"), &odd).unwrap();
    let odd_h = c.lookup(&lib, "odd.bin").await;
    assert!(c.read(&odd_h, 1 << 20).await == Ok((odd.clone(), true)));
    assert_eq!(c.read(&so, 100).await, Ok((want[..100].to_vec(), false)));
    // Stopping ends open connections too (stop waits for every connection task).
    tokio::time::timeout(Duration::from_secs(SECS), daemon.stop())
        .await
        .expect("daemon stops with a client connected");
    {
        use tokio::io::AsyncReadExt;
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(SECS), c.stream.read_to_end(&mut rest))
            .await
            .expect("server closed the connection");
        assert_eq!(n.unwrap_or(0), 0, "nothing more from a stopped server");
    }

    // Same port, fresh daemon: nothing learnt before is in memory any more.
    fx.write_config(&fx.loopback().port("nfs", addr.port()));
    let daemon = fx.start().await;
    assert_eq!(daemon.bound.nfs.port(), addr.port());
    let mut c = Rpc::connect(addr).await;
    assert_eq!(c.read(&so, 1 << 20).await, Ok((want, true)));
    // A directory handle from before works too, and `..` from the image root stays there.
    let again = c.lookup(&root, "..").await;
    assert_eq!(again, root);
    let etc = c.lookup(&root, "etc").await;
    let hostname = c.lookup(&etc, "hostname").await;
    assert_eq!(c.read(&hostname, 64).await, Ok((b"demo\n".to_vec(), true)));
    // A handle for an inode the image does not hold (its last 8 bytes), or for no image at
    // all, is stale, not a crash.
    let mut no_inode = so.clone();
    let n = no_inode.len();
    no_inode[n - 8..].fill(0xfe);
    assert_eq!(c.read(&no_inode, 64).await, Err(70));
    let mut no_image = so.clone();
    no_image[10] ^= 0xff;
    assert_eq!(c.read(&no_image, 64).await, Err(70));
    daemon.stop().await;
}

/// Reads until the server closes; panics if it does not within the bound.
async fn closed_by_server(s: &mut tokio::net::TcpStream) {
    use tokio::io::AsyncReadExt;
    let mut sink = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(SECS), s.read_to_end(&mut sink)).await;
    assert!(r.is_ok(), "the server should close a broken stream");
}

/// Broken RPC streams get a closed connection and bounded memory; bad arguments get an RPC
/// error on a connection that goes on working.
#[tokio::test]
async fn malformed_records_close_the_connection() {
    use tokio::io::AsyncWriteExt;
    let fx = Fixture::new();
    let daemon = fx.start().await;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, daemon.bound.nfs.port()));

    // A fragment that claims 2 GiB: refused from its mark, before any of it arrives.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(&0xffff_fff0u32.to_be_bytes()).await.unwrap();
    s.write_all(&[0u8; 64]).await.unwrap();
    closed_by_server(&mut s).await;

    // Endless empty fragments that never end a record.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let empties = vec![0u8; 512 * 1024];
    let _ = s.write_all(&empties).await;
    closed_by_server(&mut s).await;

    // A record that is not a call (a REPLY).
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut rec = 0x8000_0008u32.to_be_bytes().to_vec();
    rec.extend([0, 0, 0, 9, 0, 0, 0, 1]);
    s.write_all(&rec).await.unwrap();
    closed_by_server(&mut s).await;

    // A truncated fragment, then the client goes: nothing to answer, nothing left behind.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(&0x8000_0100u32.to_be_bytes()).await.unwrap();
    s.write_all(&[1, 2, 3]).await.unwrap();
    s.shutdown().await.unwrap();
    closed_by_server(&mut s).await;

    // The first three were malformed; the truncated one was only cut short. The daemon's own
    // counter (its /metrics): other tests of this binary may be running NFS servers beside
    // this one, each counting into its own.
    assert_eq!(daemon.metrics.nfs().malformed.get(), 3);

    // Garbage arguments, an unknown procedure, program and version: RPC errors, same
    // connection, which then mounts and reads as usual.
    let mut c = Rpc::connect(addr).await;
    let accept_stat = |rec: &[u8]| {
        let mut r = Reader(rec);
        let _ = (r.u32(), r.u32(), r.u32(), r.u32());
        r.opaque();
        r.u32()
    };
    let rec = c.call_any(100_003, 3, 1, &[0, 0, 0, 200]).await;
    assert_eq!(accept_stat(&rec), 4, "GARBAGE_ARGS");
    let rec = c.call_any(100_003, 3, 99, &[]).await;
    assert_eq!(accept_stat(&rec), 3, "PROC_UNAVAIL");
    let rec = c.call_any(100_021, 4, 0, &[]).await;
    assert_eq!(accept_stat(&rec), 1, "PROG_UNAVAIL");
    let rec = c.call_any(100_003, 4, 0, &[]).await;
    assert_eq!(accept_stat(&rec), 2, "PROG_MISMATCH");
    // Each an RPC call (the mount below is one more), each refused.
    let nfs = daemon.metrics.nfs();
    assert_eq!((nfs.requests.get(), nfs.refused.get()), (4, 4));
    let root = c.mount("/demo").await;
    let etc = c.lookup(&root, "etc").await;
    let hostname = c.lookup(&etc, "hostname").await;
    assert_eq!(c.read(&hostname, 64).await, Ok((b"demo\n".to_vec(), true)));
    // A write is ROFS.
    let mut a = Vec::new();
    put_opaque(&mut a, &hostname);
    for w in [0, 0, 5, 0] {
        put_u32(&mut a, w);
    }
    put_opaque(&mut a, b"evil!");
    let res = c.call(100_003, 3, 7, &a).await;
    assert_eq!(Reader(&res).u32(), 30, "NFS3ERR_ROFS");
    daemon.stop().await;
}

/// GETPORT, DUMP and NULL over TCP and UDP at the portmapper's port, and GETPORT through the
/// NFS port; then stock tools that only know port 111, when it is free here.
#[tokio::test]
async fn portmapper_names_the_nfs_port() {
    let fx = Fixture::new();
    let daemon = fx.start().await;
    let nfs_port = u32::from(daemon.bound.nfs.port());
    let pm = SocketAddr::from((Ipv4Addr::LOCALHOST, daemon.bound.portmap.port()));
    let getport = |prog: u32| {
        let mut a = Vec::new();
        for w in [prog, 3, 6, 0] {
            put_u32(&mut a, w);
        }
        a
    };
    for at in [pm, SocketAddr::from((Ipv4Addr::LOCALHOST, nfs_port as u16))] {
        let mut c = Rpc::connect(at).await;
        for prog in [100_003, 100_005] {
            let res = c.call(100_000, 2, 3, &getport(prog)).await;
            assert_eq!(Reader(&res).u32(), nfs_port, "GETPORT {prog} at {at}");
        }
        let res = c.call(100_000, 2, 3, &getport(100_021)).await;
        assert_eq!(Reader(&res).u32(), 0, "no lock manager");
    }
    let mut c = Rpc::connect(pm).await;
    assert!(c.call(100_000, 2, 0, &[]).await.is_empty());
    let res = c.call(100_000, 2, 4, &[]).await;
    let mut r = Reader(&res);
    let mut dump = Vec::new();
    while r.u32() == 1 {
        dump.push((r.u32(), r.u32(), r.u32(), r.u32()));
    }
    assert!(dump.contains(&(100_003, 3, 6, nfs_port)), "{dump:?}");
    assert!(dump.contains(&(100_005, 3, 6, nfs_port)), "{dump:?}");

    // UDP: one datagram, one answer.
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut call = Vec::new();
    for w in [77, 0, 2, 100_000, 2, 3, 0, 0, 0, 0] {
        put_u32(&mut call, w);
    }
    call.extend(getport(100_005));
    udp.send_to(&call, pm).await.unwrap();
    let mut buf = [0u8; 512];
    let (n, _) = tokio::time::timeout(Duration::from_secs(SECS), udp.recv_from(&mut buf))
        .await
        .expect("udp answer")
        .unwrap();
    let mut r = Reader(&buf[..n]);
    assert_eq!([r.u32(), r.u32(), r.u32()], [77, 1, 0]);
    r.u32();
    r.opaque();
    assert_eq!([r.u32(), r.u32()], [0, nfs_port]);
    daemon.stop().await;

    // rpcinfo and libnfs without ports ask 127.0.0.1:111.
    if std::net::TcpListener::bind("0.0.0.0:111").is_err()
        || std::net::UdpSocket::bind("0.0.0.0:111").is_err()
    {
        eprintln!("port 111 is taken here: rpcinfo and port-less libnfs not tried");
        return;
    }
    fx.write_config(&fx.loopback().port("portmap", 111));
    let daemon = fx.start().await;
    let nfs_port = daemon.bound.nfs.port();
    let (ok, out, err) = nfs("rpcinfo", &["-p", "127.0.0.1"]).await;
    assert!(ok, "{err}");
    for (prog, name) in [
        ("100003", "nfs"),
        ("100005", "mountd"),
        ("100227", "nfs_acl"),
    ] {
        assert!(
            out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [prog, "3", "tcp", &nfs_port.to_string(), name]),
            "{out}"
        );
    }
    // NFSACL answers on the NFS port (its NULL call, through the portmapper's mapping): the
    // kernel's client asks it at each ACL lookup (tests/it/e2e_homes.rs logs a user in over
    // an overlay, which needs it).
    let (ok, out, err) = nfs("rpcinfo", &["-t", "127.0.0.1", "100227", "3"]).await;
    assert!(ok && out.contains("ready and waiting"), "{out}{err}");
    let (ok, out, err) = nfs("nfs-cat", &["nfs://127.0.0.1/demo/etc/hostname?version=3"]).await;
    assert!(ok, "{err}");
    assert_eq!(out, "demo\n");
    daemon.stop().await;
}

/// A client that no pool of the image lists gets MNT3ERR_ACCES and, with a handle it kept,
/// an authentication error. In a network namespace whose veth holds 10.77.0.1, the server's
/// address once it is no longer on loopback (serve refuses an address its host lacks).
#[test]
fn exports_only_to_the_pools_clients() {
    let link = crate::common::netns::Link::new("10.77.0.1/24");
    crate::common::netns::Link::within(&link.server_ns, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(only_the_pools_clients_mount())
    });
}

async fn only_the_pools_clients_mount() {
    let fx = Fixture::new();
    let daemon = fx.start().await;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, daemon.bound.nfs.port()));
    let mut c = Rpc::connect(addr).await;
    let root = c.mount("/demo").await;
    daemon.stop().await;

    // The server is no longer on loopback: 127.0.0.1 is a stranger.
    fx.write_config(&fx.loopback().subnet("10.77.0").port("nfs", addr.port()));
    let daemon = fx.start().await;
    let mut c = Rpc::connect(addr).await;
    let mut a = Vec::new();
    put_opaque(&mut a, b"/demo");
    let res = c.call(100_005, 3, 1, &a).await;
    assert_eq!(Reader(&res).u32(), 13, "MNT3ERR_ACCES");
    let mut a = Vec::new();
    put_opaque(&mut a, &root);
    let rec = c.call_any(100_003, 3, 1, &a).await;
    let mut r = Reader(&rec);
    r.u32();
    assert_eq!(
        [r.u32(), r.u32(), r.u32(), r.u32()],
        [1, 1, 1, 5],
        "AUTH_ERROR AUTH_TOOWEAK"
    );
    daemon.stop().await;

    // That a lease of the image's NFS pool (and only that) lets it mount is shown from a
    // network namespace with a real DHCP client: tests/it/trust.rs.
}

/// MOUNT of a path through a symlink inside the image, as rpc.mountd resolves it (libnfs's
/// own tests mount `symlink1/subdir2`): the fixture's `lib -> usr/lib`, and links to the
/// image's root. A link leading out of the image, by `..` or by an absolute target, is refused
/// with MNT3ERR_ACCES, rpc.mountd's answer for a path no export covers.
#[tokio::test]
async fn mount_follows_symlinks_inside_the_image() {
    let fx = Fixture::new();
    let root = fx.image_dir().join("rootfs");
    std::os::unix::fs::symlink("../lib/..", root.join("usr/back")).unwrap();
    std::os::unix::fs::symlink("../..", root.join("usr/out")).unwrap();
    std::os::unix::fs::symlink("/usr/lib", root.join("abs")).unwrap();
    let daemon = fx.start().await;
    let nfs_addr = daemon.bound.nfs;

    let (ok, out, err) = nfs("nfs-ls", &[&url(nfs_addr, "/demo/lib")]).await;
    assert!(ok, "{err}");
    assert_eq!(names(&out).len(), 50, "{out}");
    let lib7 = copy_out(
        &url(nfs_addr, "/demo/lib/lib7.so"),
        &fx.path().join("lib7.copy"),
    )
    .await;
    assert!(lib7 == pattern(107, 1000 + 7 * 517), "lib7.so differs");
    // `usr/back` is `../lib/..`: `..` after a link goes up from where the link led, as
    // realpath's does (`usr/lib/..`, so `usr`), not from where it was written.
    let (ok, out, err) = nfs("nfs-ls", &[&url(nfs_addr, "/demo/usr/back")]).await;
    assert!(ok, "{err}");
    let mut seen = names(&out);
    seen.sort();
    assert_eq!(seen, ["back", "lib", "out"], "{out}");
    for out_of_image in ["/demo/usr/out", "/demo/abs", "/demo/abs/lib7.so"] {
        let (ok, out, err) = nfs("nfs-ls", &[&url(nfs_addr, out_of_image)]).await;
        assert!(!ok, "{out_of_image}: {out}");
        assert!(err.contains("ACCES"), "{out_of_image}: {err}");
    }
    daemon.stop().await;
}

/// libnfs's `nfs_statvfs` (FSSTAT, as a client's `df` asks it) from a small C program against
/// libnfs: `frsize blocks bfree bavail files ffree favail` of the export mounted at `url`.
async fn df(dir: &std::path::Path, url: &str) -> Vec<u64> {
    const PROGRAM: &str = r#"
#include <stdio.h>
#include <sys/statvfs.h>
struct nfs_context;
struct nfs_url { char *server; char *path; char *file; };
struct nfs_context *nfs_init_context(void);
struct nfs_url *nfs_parse_url_dir(struct nfs_context *nfs, const char *url);
int nfs_mount(struct nfs_context *nfs, const char *server, const char *exportname);
int nfs_statvfs(struct nfs_context *nfs, const char *path, struct statvfs *svfs);
char *nfs_get_error(struct nfs_context *nfs);
int main(int argc, char **argv) {
    struct statvfs s;
    struct nfs_context *nfs = nfs_init_context();
    struct nfs_url *url;
    if (argc != 2 || nfs == NULL) return 2;
    url = nfs_parse_url_dir(nfs, argv[1]);
    if (url == NULL || nfs_mount(nfs, url->server, url->path) != 0
        || nfs_statvfs(nfs, "/", &s) != 0) {
        fprintf(stderr, "%s\n", nfs_get_error(nfs));
        return 1;
    }
    printf("%lu %lu %lu %lu %lu %lu %lu\n", s.f_frsize, s.f_blocks, s.f_bfree, s.f_bavail,
           s.f_files, s.f_ffree, s.f_favail);
    return 0;
}
"#;
    let (src, exe) = (dir.join("df.c"), dir.join("df"));
    std::fs::write(&src, PROGRAM).unwrap();
    let mut cc = Command::new("cc");
    cc.arg("-o").arg(&exe).arg(&src).arg("-l:libnfs.so.13");
    let (ok, out, err) = crate::common::run_async(cc, 60).await;
    assert!(ok, "cc: {out}{err}");
    let (ok, out, err) = nfs(exe.to_str().unwrap(), &[url]).await;
    assert!(ok, "{err}");
    out.split_whitespace().map(|n| n.parse().unwrap()).collect()
}

/// A client's `df` of its root shows the file system the image's folder is on (FSSTAT from
/// its statvfs, free space included, as knfsd answers for a read-only export), and for a
/// `store: ram` image the snapshot held: its files' bytes and entries, nothing free.
#[tokio::test]
async fn df_on_a_client_shows_the_image_s_file_system() {
    let fx = Fixture::new();
    let daemon = fx.start().await;
    let got = df(fx.path(), &url(daemon.bound.nfs, "/demo")).await;
    daemon.stop().await;
    // The server's own view: fundamental block size, blocks, inodes.
    let mut stat = Command::new("stat");
    stat.args(["-f", "-c", "%S %b %c"])
        .arg(fx.image_dir().join("rootfs"));
    let (ok, out, err) = crate::common::run_async(stat, 30).await;
    assert!(ok, "{err}");
    let local: Vec<u64> = out.split_whitespace().map(|n| n.parse().unwrap()).collect();
    // libnfs counts in 4 KiB blocks.
    assert_eq!(got[0], 4096);
    assert_eq!(
        got[1],
        local[0] * local[1] / 4096,
        "blocks: {got:?} {local:?}"
    );
    assert_eq!(got[4], local[2], "files: {got:?} {local:?}");
    assert!(
        got[2] > 0 && got[3] > 0 && got[3] <= got[2],
        "free: {got:?}"
    );
    assert_eq!(got[6], got[5], "free files: {got:?}");

    let fx = Fixture::new();
    fx.write_config(&fx.loopback().demo("store: ram"));
    let daemon = fx.start().await;
    let got = df(fx.path(), &url(daemon.bound.nfs, "/demo")).await;
    daemon.stop().await;
    let (mut bytes, mut entries) = (0u64, 1u64);
    let mut dirs = vec![fx.image_dir().join("rootfs")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            // Not following symlinks, as the tree's walk.
            let m = e.metadata().unwrap();
            entries += 1;
            if m.is_file() {
                bytes += m.len();
            }
            if m.is_dir() {
                dirs.push(e.path());
            }
        }
    }
    assert_eq!(got[1..], [bytes / 4096, 0, 0, entries, 0, 0], "{got:?}");
}

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
    for up in ["/demo/../..", "/demo/usr/../../.."] {
        let (ok, out, err) = nfs("nfs-ls", &[&url(nfs_addr, up)]).await;
        assert!(ok, "{up}: {err}");
        let mut seen = names(&out);
        seen.sort();
        assert_eq!(seen, ["etc", "lib", "usr"], "{up}: {out}");
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

/// A tiny hand-rolled ONC RPC client: enough MOUNT and NFSv3 to hold on to raw file handles,
/// which no command-line client lets a test keep across a server restart.
struct Rpc {
    stream: tokio::net::TcpStream,
    xid: u32,
}

fn put_u32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_be_bytes());
}

fn put_opaque(v: &mut Vec<u8>, b: &[u8]) {
    put_u32(v, b.len() as u32);
    v.extend_from_slice(b);
    v.resize(v.len().div_ceil(4) * 4, 0);
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u32(&mut self) -> u32 {
        let (w, rest) = self.0.split_first_chunk::<4>().expect("short reply");
        self.0 = rest;
        u32::from_be_bytes(*w)
    }
    fn opaque(&mut self) -> Vec<u8> {
        let n = self.u32() as usize;
        let b = self.0[..n].to_vec();
        self.0 = &self.0[n.div_ceil(4) * 4..];
        b
    }
    fn skip_post_op_attr(&mut self) {
        if self.u32() == 1 {
            self.0 = &self.0[84..];
        }
    }
}

impl Rpc {
    async fn connect(addr: SocketAddr) -> Rpc {
        Rpc {
            stream: tokio::net::TcpStream::connect(addr).await.unwrap(),
            xid: 1,
        }
    }

    /// One call; returns the procedure's results (after accept_stat SUCCESS).
    async fn call(&mut self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        self.xid += 1;
        let mut m = Vec::new();
        for w in [self.xid, 0, 2, prog, vers, proc_, 0, 0, 0, 0] {
            put_u32(&mut m, w);
        }
        m.extend_from_slice(args);
        let mut framed = (0x8000_0000u32 | m.len() as u32).to_be_bytes().to_vec();
        framed.extend(m);
        let io = async {
            self.stream.write_all(&framed).await.unwrap();
            let mut rec = Vec::new();
            loop {
                let mark = self.stream.read_u32().await.unwrap();
                let mut frag = vec![0u8; (mark & 0x7fff_ffff) as usize];
                self.stream.read_exact(&mut frag).await.unwrap();
                rec.extend(frag);
                if mark & 0x8000_0000 != 0 {
                    return rec;
                }
            }
        };
        let rec = tokio::time::timeout(Duration::from_secs(SECS), io)
            .await
            .expect("rpc reply in time");
        let mut r = Reader(&rec);
        assert_eq!(r.u32(), self.xid);
        assert_eq!(r.u32(), 1, "a reply");
        assert_eq!(r.u32(), 0, "accepted");
        r.u32();
        r.opaque();
        assert_eq!(r.u32(), 0, "success");
        r.0.to_vec()
    }

    async fn mount(&mut self, path: &str) -> Vec<u8> {
        let mut a = Vec::new();
        put_opaque(&mut a, path.as_bytes());
        let res = self.call(100_005, 3, 1, &a).await;
        let mut r = Reader(&res);
        assert_eq!(r.u32(), 0, "MNT3_OK for {path}");
        r.opaque()
    }

    async fn lookup(&mut self, dir: &[u8], name: &str) -> Vec<u8> {
        let mut a = Vec::new();
        put_opaque(&mut a, dir);
        put_opaque(&mut a, name.as_bytes());
        let res = self.call(100_003, 3, 3, &a).await;
        let mut r = Reader(&res);
        assert_eq!(r.u32(), 0, "LOOKUP {name}");
        r.opaque()
    }

    /// READ from offset 0: Ok(data, eof) or Err(nfsstat3).
    async fn read(&mut self, fh: &[u8], count: u32) -> Result<(Vec<u8>, bool), u32> {
        let mut a = Vec::new();
        put_opaque(&mut a, fh);
        put_u32(&mut a, 0);
        put_u32(&mut a, 0);
        put_u32(&mut a, count);
        let res = self.call(100_003, 3, 6, &a).await;
        let mut r = Reader(&res);
        let status = r.u32();
        if status != 0 {
            return Err(status);
        }
        r.skip_post_op_attr();
        let n = r.u32();
        let eof = r.u32() == 1;
        let data = r.opaque();
        assert_eq!(data.len(), n as usize);
        Ok((data, eof))
    }
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
    fx.write_config(
        &fx.config_text()
            .replace("nfs: 0", &format!("nfs: {}", addr.port())),
    );
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

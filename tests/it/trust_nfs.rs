//! Credentials on every NFS call, driven by client code this project did not write (the
//! nfs3_client crate, and libnfs's nfs-cat with `uid=`): an unprivileged user of a client
//! cannot read the image's /etc/shadow (0640 root:shadow) or list root's 0700 folder; root can
//! unless the image squashes it; ACCESS answers by the mode bits (nfs-cat as the owner of a
//! 0300 file is refused) while READ keeps knfsd's owner override; and an image with
//! `secure_ports` answers no call from a port above 1023.

use crate::common::{Fixture, run_async};
use nfs3_client::nfs3_types::nfs3::{
    ACCESS3args, LOOKUP3args, Nfs3Result, READ3args, READDIR3args, cookieverf3, diropargs3,
    filename3, nfs_fh3, nfsstat3,
};
use nfs3_client::nfs3_types::rpc::{auth_unix, opaque_auth};
use nfs3_client::nfs3_types::xdr_codec::Opaque;
use nfs3_client::tokio::{TokioConnector, TokioIo};
use nfs3_client::{Nfs3Client, Nfs3ConnectionBuilder};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;
use tokio::net::TcpStream;

const SHADOW: &str = "root:$6$not-a-real-hash:19000:0:99999:7:::\n";
const SHADOW_GID: u32 = 42;

/// The fixture image with /etc/shadow (0640 root:42), /root (0700) holding a 0600 file, and
/// a 0044 and a 0300 file owned by uid 1000 (readable by their owner only through READ's
/// owner override); `image_keys` added to the image's line of pools.yaml.
fn fixture(image_keys: &str) -> Fixture {
    let fx = Fixture::new();
    let root = fx.image_dir().join("rootfs");
    let put = |rel: &str, text: &str, mode: u32, uid: u32, gid: u32| {
        let p = root.join(rel);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
    };
    put("etc/shadow", SHADOW, 0o640, 0, SHADOW_GID);
    std::fs::create_dir(root.join("root")).unwrap();
    put("root/.history", "secret\n", 0o600, 0, 0);
    std::fs::set_permissions(root.join("root"), std::fs::Permissions::from_mode(0o700)).unwrap();
    put("etc/odd", "mine\n", 0o044, 1000, 1000);
    put("etc/wx", "write only\n", 0o300, 1000, 1000);
    fx.write_config(&fx.loopback().demo(&format!("store: disk{image_keys}")));
    fx
}

type Client = Nfs3Client<TokioIo<TcpStream>>;

fn unix(uid: u32, gid: u32, gids: &[u32]) -> opaque_auth<'static> {
    opaque_auth::auth_unix(&auth_unix {
        stamp: 0,
        machinename: Opaque::owned(b"trust-test".to_vec()),
        uid,
        gid,
        gids: gids.to_vec(),
    })
}

/// Mounts /demo with `cred`, from a port below 1024 if `privileged`.
async fn mount(
    port: u16,
    cred: opaque_auth<'static>,
    privileged: bool,
) -> Result<(Client, nfs_fh3), String> {
    let conn = Nfs3ConnectionBuilder::new(TokioConnector, "127.0.0.1", "/demo")
        .credential(cred)
        .connect_from_privileged_port(privileged)
        .mount_port(port)
        .nfs3_port(port);
    let conn = tokio::time::timeout(Duration::from_secs(30), conn.mount())
        .await
        .expect("mount in time")
        .map_err(|e| e.to_string())?;
    let root = conn.root_nfs_fh3();
    Ok((conn.nfs3_client, root))
}

async fn lookup(c: &mut Client, dir: nfs_fh3, name: &str) -> Result<nfs_fh3, nfsstat3> {
    let args = LOOKUP3args {
        what: diropargs3 {
            dir,
            name: filename3(Opaque::owned(name.as_bytes().to_vec())),
        },
    };
    match c.lookup(&args).await.expect("lookup answered") {
        Nfs3Result::Ok(ok) => Ok(ok.object),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

async fn read(c: &mut Client, file: nfs_fh3) -> Result<Vec<u8>, nfsstat3> {
    let args = READ3args {
        file,
        offset: 0,
        count: 4096,
    };
    match c.read(&args).await.expect("read answered") {
        Nfs3Result::Ok(ok) => Ok(ok.data.as_ref().to_vec()),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

async fn readdir(c: &mut Client, dir: nfs_fh3) -> Result<usize, nfsstat3> {
    let args = READDIR3args {
        dir,
        cookie: 0,
        cookieverf: cookieverf3::default(),
        count: 4096,
    };
    match c.readdir(&args).await.expect("readdir answered") {
        Nfs3Result::Ok(ok) => Ok(ok.reply.entries.0.len()),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

async fn access(c: &mut Client, object: nfs_fh3) -> u32 {
    match c
        .access(&ACCESS3args {
            object,
            access: 0x3f,
        })
        .await
        .expect("access answered")
    {
        Nfs3Result::Ok(ok) => ok.access,
        Nfs3Result::Err((s, _)) => panic!("ACCESS failed: {s:?}"),
    }
}

/// Reads `path` (from the image's root) as `cred`.
async fn read_as(port: u16, cred: opaque_auth<'static>, path: &str) -> Result<Vec<u8>, nfsstat3> {
    let (mut c, mut fh) = mount(port, cred, true).await.expect("mounted");
    for name in path.split('/') {
        fh = lookup(&mut c, fh, name).await?;
    }
    read(&mut c, fh).await
}

async fn refused_count(http: std::net::SocketAddr) -> u64 {
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "20", &format!("http://{http}/metrics")]);
    let (ok, text, err) = run_async(c, 30).await;
    assert!(ok, "{err}");
    text.lines()
        .find_map(|l| l.strip_prefix("bootpool_refused_total{service=\"nfs\"} "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprivileged_user_cannot_read_shadow_and_root_can() {
    let fx = fixture("");
    let daemon = fx.start().await;
    let port = daemon.bound.nfs.port();
    let before = refused_count(daemon.bound.http).await;
    let acces = Err(nfsstat3::NFS3ERR_ACCES);
    for who in [unix(1000, 1000, &[1000, 100]), unix(65534, 65534, &[])] {
        assert_eq!(read_as(port, who, "etc/shadow").await, acces);
    }
    // AUTH_NONE is nobody.
    assert_eq!(
        read_as(port, opaque_auth::default(), "etc/shadow").await,
        acces
    );
    // In the file's group (auxiliary or primary), or root: readable.
    let text = Ok(SHADOW.as_bytes().to_vec());
    assert_eq!(
        read_as(port, unix(1000, 1000, &[SHADOW_GID]), "etc/shadow").await,
        text
    );
    assert_eq!(
        read_as(port, unix(1000, SHADOW_GID, &[]), "etc/shadow").await,
        text
    );
    assert_eq!(read_as(port, unix(0, 0, &[0]), "etc/shadow").await, text);
    // Everyone reads a 0644 file.
    assert_eq!(
        read_as(port, unix(1000, 1000, &[]), "etc/hostname").await,
        Ok(b"demo\n".to_vec())
    );
    // The owner reads its 0044 file (knfsd's owner override); so does anyone else.
    assert_eq!(
        read_as(port, unix(1000, 1000, &[]), "etc/odd").await,
        Ok(b"mine\n".to_vec())
    );
    // Root's 0700 folder: no LOOKUP (x) or READDIR (r) for a user; both for root.
    let (mut c, root) = mount(port, unix(1000, 1000, &[]), true).await.unwrap();
    let home = lookup(&mut c, root.clone(), "root").await.unwrap();
    assert_eq!(
        lookup(&mut c, home.clone(), ".history").await.err(),
        Some(nfsstat3::NFS3ERR_ACCES)
    );
    assert_eq!(
        readdir(&mut c, home.clone()).await.err(),
        Some(nfsstat3::NFS3ERR_ACCES)
    );
    // ACCESS agrees with what READ and LOOKUP did.
    let shadow = {
        let etc = lookup(&mut c, root.clone(), "etc").await.unwrap();
        lookup(&mut c, etc, "shadow").await.unwrap()
    };
    assert_eq!(access(&mut c, shadow.clone()).await, 0);
    assert_eq!(access(&mut c, home.clone()).await, 0);
    let (mut r, root) = mount(port, unix(0, 0, &[]), true).await.unwrap();
    let home = lookup(&mut r, root, "root").await.unwrap();
    assert!(readdir(&mut r, home.clone()).await.unwrap() >= 3);
    let history = lookup(&mut r, home, ".history").await.unwrap();
    assert_eq!(read(&mut r, history).await, Ok(b"secret\n".to_vec()));
    assert_eq!(access(&mut r, shadow).await & 0x01, 0x01, "root may READ");
    // Each refusal was counted.
    assert!(refused_count(daemon.bound.http).await >= before + 5);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libnfs_as_uid_1000_is_refused_shadow_and_as_root_reads_it() {
    let fx = fixture("");
    let daemon = fx.start().await;
    let p = daemon.bound.nfs.port();
    let url = |uid: u32| {
        format!(
            "nfs://127.0.0.1/demo/etc/shadow?nfsport={p}&mountport={p}&version=3&uid={uid}&gid={uid}"
        )
    };
    let cat = |uid| {
        let mut c = Command::new("nfs-cat");
        c.arg(url(uid));
        c
    };
    let (ok, out, err) = run_async(cat(1000), 60).await;
    assert!(!ok, "uid 1000 read shadow: {out}");
    assert!(!out.contains("not-a-real-hash"), "{out}");
    assert!(err.contains("ACCES") || err.contains("ermission"), "{err}");
    let (ok, out, err) = run_async(cat(0), 60).await;
    assert!(ok, "{err}");
    assert_eq!(out, SHADOW);
    daemon.stop().await;
}

/// libnfs's tests test_0430 and test_0440: the owner of a mode-0300 file may not open it for
/// reading (libnfs opens with ACCESS and refuses what it is not granted), as knfsd answers;
/// READ itself keeps knfsd's owner override.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_answers_by_the_mode_and_read_keeps_the_owner_override() {
    let fx = fixture("");
    let daemon = fx.start().await;
    let p = daemon.bound.nfs.port();
    let cat = |file: &str, uid: u32| {
        let mut c = Command::new("nfs-cat");
        c.arg(format!(
            "nfs://127.0.0.1/demo/etc/{file}?nfsport={p}&mountport={p}&version=3&uid={uid}&gid={uid}"
        ));
        c
    };
    for file in ["wx", "odd"] {
        let (ok, out, err) = run_async(cat(file, 1000), 60).await;
        assert!(!ok, "the owner opened its {file} for reading: {out}");
        assert!(err.contains("ACCES") || err.contains("ermission"), "{err}");
    }
    // "Other" may read the 0044 file, and root the 0300 one.
    let (ok, out, err) = run_async(cat("odd", 2000), 60).await;
    assert!(ok, "{err}");
    assert_eq!(out, "mine\n");
    let (ok, out, err) = run_async(cat("wx", 0), 60).await;
    assert!(ok, "{err}");
    assert_eq!(out, "write only\n");
    // The owner's ACCESS says no read (x on the 0300 file); its READ is answered.
    let (mut c, root) = mount(p, unix(1000, 1000, &[]), true).await.unwrap();
    let etc = lookup(&mut c, root, "etc").await.unwrap();
    let wx = lookup(&mut c, etc.clone(), "wx").await.unwrap();
    let odd = lookup(&mut c, etc, "odd").await.unwrap();
    assert_eq!(access(&mut c, wx.clone()).await, 0x20);
    assert_eq!(access(&mut c, odd.clone()).await, 0);
    assert_eq!(read(&mut c, wx).await, Ok(b"write only\n".to_vec()));
    assert_eq!(read(&mut c, odd).await, Ok(b"mine\n".to_vec()));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_squash_makes_root_nobody() {
    let fx = fixture(", root_squash: true");
    let daemon = fx.start().await;
    let port = daemon.bound.nfs.port();
    let acces = Err(nfsstat3::NFS3ERR_ACCES);
    assert_eq!(read_as(port, unix(0, 0, &[0]), "etc/shadow").await, acces);
    assert_eq!(
        read_as(port, unix(0, 0, &[0]), "root/.history").await,
        acces
    );
    // What nobody may read, a squashed root still reads.
    assert_eq!(
        read_as(port, unix(0, 0, &[0]), "etc/hostname").await,
        Ok(b"demo\n".to_vec())
    );
    // The squash maps 0 only: a user in the file's group still reads.
    assert_eq!(
        read_as(port, unix(1000, 1000, &[SHADOW_GID]), "etc/shadow").await,
        Ok(SHADOW.as_bytes().to_vec())
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_ports_refuse_a_port_above_1023() {
    let fx = fixture("");
    let daemon = fx.start().await;
    let port = daemon.bound.nfs.port();
    let before = refused_count(daemon.bound.http).await;
    // The default: MNT from an ordinary port is refused, even for root.
    let e = mount(port, unix(0, 0, &[]), false).await.err();
    assert!(e.is_some(), "mounted from an unprivileged port");
    // A handle got from a privileged mount is no use from an ordinary port either.
    let (_, root) = mount(port, unix(0, 0, &[]), true).await.unwrap();
    let io = TokioConnector
        .connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .unwrap();
    let mut c: Client = Nfs3Client::new_with_auth(io, unix(0, 0, &[]), opaque_auth::default());
    assert_eq!(
        lookup(&mut c, root, "etc").await,
        Err(nfsstat3::NFS3ERR_ACCES)
    );
    assert!(refused_count(daemon.bound.http).await >= before + 2);
    daemon.stop().await;

    // With `secure_ports: false`, an ordinary port is served.
    let fx = fixture(", secure_ports: false");
    let daemon = fx.start().await;
    let port = daemon.bound.nfs.port();
    let (mut c, root) = mount(port, unix(0, 0, &[]), false).await.unwrap();
    let etc = lookup(&mut c, root, "etc").await.unwrap();
    let hostname = lookup(&mut c, etc, "hostname").await.unwrap();
    assert_eq!(read(&mut c, hostname).await, Ok(b"demo\n".to_vec()));
    daemon.stop().await;
}

use nfs3_client::net::Connector as _;

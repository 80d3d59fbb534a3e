//! Image revisions under a running daemon, with real clients (curl, libnfs's nfs-cat, libnbd's
//! nbdcopy): a boot's script names its revision everywhere (kernel, initrd, root); after a
//! new revision is imported and activated with the daemon running, new scripts name it,
//! while the old revision's kernel, NFS export and NBD export still serve the old bytes; the
//! new revision's exports are learned without a restart; the API and `prune` know which
//! revision the recorded client runs, and a client that stays mounted on the old revision
//! keeps reading it through the handles it holds. On both stores; with `store: ram` a revision
//! learned after start is loaded into memory at its first use. A forged console panic and a
//! forged DISCOVER do not get a mounted revision pruned; `--idle` does once the client is
//! silent.

use crate::common::rpc::Rpc;
use crate::common::{Fixture, pattern, run, run_async, stdout_of};
use bootpool::image::{import, store};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

macro_rules! on_both_stores {
    ($f:ident) => {
        mod $f {
            #[tokio::test(flavor = "multi_thread")]
            async fn disk() {
                super::$f("disk").await
            }
            #[tokio::test(flavor = "multi_thread")]
            async fn ram() {
                super::$f("ram").await
            }
        }
    };
}

/// A root tree whose hostname, kernel and initrd say which revision it is.
fn tree(at: &Path, n: u64) {
    std::fs::create_dir_all(at.join("etc")).unwrap();
    std::fs::create_dir_all(at.join("boot")).unwrap();
    std::fs::write(at.join("etc/hostname"), format!("r{n}\n")).unwrap();
    std::fs::create_dir_all(at.join("sbin")).unwrap();
    std::fs::write(at.join("sbin/init"), "#!/bin/sh\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(at.join("sbin/init"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(at.join("etc/big"), pattern(40 + n, 200_000)).unwrap();
    std::fs::write(at.join("boot/vmlinuz-6.1.0-1"), pattern(10 + n, 100_000)).unwrap();
    std::fs::write(at.join("boot/initrd.img-6.1.0-1"), pattern(20 + n, 50_000)).unwrap();
}

fn import(fx: &Fixture, n: u64) -> String {
    let src = fx.path().join(format!("src{n}"));
    tree(&src, n);
    let config = fx.config();
    let image = config.images.get("demo").unwrap();
    let req = import::Request {
        from: src,
        kernel: None,
        initrd: None,
        squashfs: true,
        source: None,
    };
    let done = tokio::task::block_in_place(|| import::import(image, &req)).unwrap();
    assert!(done.new);
    done.revision.id
}

fn curl(url: &str) -> Vec<u8> {
    stdout_of(
        Command::new("curl").args(["-sS", "--fail", "--max-time", "20", url]),
        &[],
    )
}

fn nfs_url(addr: SocketAddr, path: &str) -> String {
    let p = addr.port();
    format!("nfs://127.0.0.1{path}?nfsport={p}&mountport={p}&version=3")
}

async fn nfs_cat(addr: SocketAddr, path: &str) -> String {
    let mut c = Command::new("nfs-cat");
    c.arg(nfs_url(addr, path));
    let (ok, out, err) = run_async(c, 60).await;
    assert!(ok, "nfs-cat {path}: {err}");
    out
}

async fn nbd_bytes(fx: &Fixture, addr: SocketAddr, export: &str) -> Vec<u8> {
    let out = fx.path().join("nbd.out");
    let mut c = Command::new("nbdcopy");
    c.arg(format!("nbd://127.0.0.1:{}/{export}", addr.port()))
        .arg(&out);
    let (ok, _, err) = run_async(c, 60).await;
    assert!(ok, "nbdcopy {export}: {err}");
    std::fs::read(&out).unwrap()
}

/// An NFS client that stays mounted: MOUNT once from a port below 1024 (AUTH_NONE), then
/// LOOKUPs and READs with the handles it got, on one connection that it keeps open (what a
/// booted client does; libnfs's tools end theirs with a reset, which bootpool takes for a
/// client gone).
struct Held {
    rpc: Rpc,
    root: Vec<u8>,
}

impl Held {
    async fn mount(addr: SocketAddr, path: &str) -> Held {
        let mut rpc = Rpc::connect(addr).await;
        let root = rpc.mount(path).await;
        Held { rpc, root }
    }

    /// The file at `path` under the mounted root, by LOOKUPs from the handle MOUNT gave.
    async fn read(&mut self, path: &[&str]) -> Vec<u8> {
        let mut fh = self.root.clone();
        for name in path {
            fh = self.rpc.lookup(&fh, name).await;
        }
        match self.rpc.read(&fh, 1 << 20).await {
            Ok((data, _)) => data,
            Err(status) => panic!("READ {path:?}: status {status}"),
        }
    }
}

fn prune(fx: &Fixture, args: &[&str]) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.args(["image", "prune", "demo"])
        .args(args)
        .arg("--config")
        .arg(fx.config_path());
    let (ok, out, err) = run(&mut c, 120);
    assert!(ok, "{out}\n{err}");
    out
}

on_both_stores!(running_clients_keep_their_revision_and_new_boots_get_the_active_one);
async fn running_clients_keep_their_revision_and_new_boots_get_the_active_one(store_kind: &str) {
    let fx = Fixture::new();
    // `demo` becomes an image with revisions (its hand-made files go).
    std::fs::remove_dir_all(fx.image_dir()).unwrap();
    fx.write_config(&fx.loopback().demo(&format!("store: {store_kind}")));
    let r1 = import(&fx, 1);
    store::activate(&fx.image_dir(), &r1).unwrap();
    // 127.0.0.1 holds a lease in pool nfs-room: its root attaches are its boot's.
    fx.journal_loopback_lease("52:54:00:77:00:01", "nfs-room");
    let daemon = fx.start().await;
    let b = daemon.bound;
    let base = format!("http://127.0.0.1:{}", b.http.port());
    let script =
        |mac: &str| String::from_utf8(curl(&format!("{base}/boot/script/{mac}.ipxe"))).unwrap();

    // r1 everywhere in a script made now.
    let s = script("52:54:00:77:00:02");
    assert!(s.contains(&format!("/boot/demo/revs/{r1}/vmlinuz")), "{s}");
    assert!(
        s.contains(&format!("/boot/demo/revs/{r1}/initrd.img")),
        "{s}"
    );
    assert!(s.contains(&format!(":/demo@{r1}:")), "{s}");
    let s = script("52:54:00:77:00:12");
    assert!(
        s.contains(&format!("/demo@{r1}")) && s.contains("root=nbd:"),
        "{s}"
    );
    assert_eq!(
        curl(&format!("{base}/boot/demo/revs/{r1}/vmlinuz")),
        pattern(11, 100_000)
    );
    assert_eq!(
        nfs_cat(b.nfs, &format!("/demo@{r1}/etc/hostname")).await,
        "r1\n"
    );
    // A client that stays mounted on r1, as a booted one does.
    let mut held = Held::mount(b.nfs, &format!("/demo@{r1}")).await;
    assert_eq!(held.read(&["etc", "hostname"]).await, b"r1\n");

    // r2 imported and activated under the running daemon.
    let r2 = import(&fx, 2);
    assert_ne!(r1, r2);
    store::activate(&fx.image_dir(), &r2).unwrap();
    let s = script("52:54:00:77:00:02");
    assert!(
        s.contains(&format!("/boot/demo/revs/{r2}/vmlinuz"))
            && s.contains(&format!(":/demo@{r2}:")),
        "{s}"
    );
    assert!(!s.contains(&r1), "{s}");
    // What r1's clients were handed still gives r1's bytes.
    assert_eq!(
        curl(&format!("{base}/boot/demo/revs/{r1}/vmlinuz")),
        pattern(11, 100_000)
    );
    assert_eq!(
        curl(&format!("{base}/boot/demo/revs/{r2}/vmlinuz")),
        pattern(12, 100_000)
    );
    // Its handles still resolve to r1's tree.
    assert_eq!(held.read(&["etc", "hostname"]).await, b"r1\n");
    assert_eq!(held.read(&["etc", "big"]).await, pattern(41, 200_000));
    // A name that is no revision is not served.
    let out = Command::new("curl")
        .args([
            "-sS",
            "--fail",
            &format!("{base}/boot/demo/revs/000000000000/vmlinuz"),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());

    // The record: the client runs r1, one of one needs a reboot to get r2.
    let mut api = serde_json::Value::Null;
    for _ in 0..200 {
        api = serde_json::from_slice(&curl(&format!("{base}/api/v1/images"))).unwrap();
        if api[0]["need_reboot"] == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let boots = String::from_utf8_lossy(&curl(&format!("{base}/api/v1/boots"))).into_owned();
    assert_eq!(api[0]["active"], r2.as_str(), "{api}\n{boots}");
    assert_eq!(
        (api[0]["clients"].as_u64(), api[0]["need_reboot"].as_u64()),
        (Some(1), Some(1)),
        "{api}\n{boots}"
    );
    assert!(
        api[0]["summary"]
            .as_str()
            .unwrap()
            .contains("1 of 1 running clients need a reboot to get r2"),
        "{api}"
    );
    // prune keeps r1 while that client runs it (the store commits within a second: wait for
    // the record to be there, then the answer must be "keep").
    let mut out = String::new();
    for _ in 0..100 {
        out = tokio::task::block_in_place(|| prune(&fx, &["--dry-run"]));
        if out.contains("running client") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        out.contains(&format!(
            "keeping r1 ({r1}): 1 running client(s): 52:54:00:77:00:01"
        )),
        "{out}"
    );
    assert!(store::rev_dir(&fx.image_dir(), &r1).is_dir());
    // `bootpool report` says it under the waves.
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.arg("report").arg("--config").arg(fx.config_path());
    let (ok, report, err) = tokio::task::block_in_place(|| run(&mut c, 120));
    assert!(ok, "{err}");
    assert!(
        report.contains("image demo: 1 of 1 running clients need a reboot to get r2"),
        "{report}"
    );

    assert_eq!(held.read(&["etc", "hostname"]).await, b"r1\n");
    drop(held);

    // r2's NFS export, imported after start, is learned at its first mount.
    assert_eq!(
        nfs_cat(b.nfs, &format!("/demo@{r2}/etc/hostname")).await,
        "r2\n"
    );
    assert_eq!(
        nfs_cat(b.nfs, &format!("/demo@{r1}/etc/hostname")).await,
        "r1\n"
    );
    // NBD: each revision's export gives its own squashfs image.
    let img =
        |id: &str| std::fs::read(store::rev_dir(&fx.image_dir(), id).join("rootfs.img")).unwrap();
    assert_eq!(nbd_bytes(&fx, b.nbd, &format!("demo@{r1}")).await, img(&r1));
    assert_eq!(nbd_bytes(&fx, b.nbd, &format!("demo@{r2}")).await, img(&r2));

    // r2 was learned after start. With `store: ram` its first MOUNT and attach loaded it into
    // memory: a change on disk is not seen (the snapshot the store promises); from disk it is.
    let r2_dir = store::rev_dir(&fx.image_dir(), &r2);
    let original = img(&r2);
    let mut changed = original.clone();
    changed[..4096].iter_mut().for_each(|b| *b ^= 0xff);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(r2_dir.join("rootfs.img"))
            .unwrap();
        f.write_all_at(&changed[..4096], 0).unwrap();
    }
    std::fs::write(r2_dir.join("rootfs/etc/hostname"), "XX\n").unwrap();
    // Past the attribute cache's freshness (1 s), so a disk tree looks again.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let (want_host, want_img) = match store_kind {
        "ram" => ("r2\n", &original),
        _ => ("XX\n", &changed),
    };
    assert_eq!(
        nfs_cat(b.nfs, &format!("/demo@{r2}/etc/hostname")).await,
        want_host,
        "store {store_kind}"
    );
    assert!(
        nbd_bytes(&fx, b.nbd, &format!("demo@{r2}")).await == *want_img,
        "store {store_kind}: nbd export of r2"
    );
    daemon.stop().await;

    // Its newest root is r2's now: r1 is used by nobody and goes.
    let out = tokio::task::block_in_place(|| prune(&fx, &[]));
    assert!(out.contains(&format!("removed r1 ({r1})")), "{out}");
    assert!(!store::rev_dir(&fx.image_dir(), &r1).exists());
    assert!(store::rev_dir(&fx.image_dir(), &r2).is_dir());
}

/// What a hostile host on the segment sends to make a running client look gone: a console
/// "panic" line from the client's address, then a firmware DISCOVER with its MAC. The record
/// shows a failed boot and a new one, and `prune` still keeps the revision the client has
/// mounted (it reads on through its handles); only the admin's `--idle` lets it go once the
/// client is silent.
#[tokio::test(flavor = "multi_thread")]
async fn a_forged_panic_line_or_discover_does_not_get_a_mounted_revision_pruned() {
    const MAC: &str = "52:54:00:77:00:20";
    let fx = Fixture::new();
    std::fs::remove_dir_all(fx.image_dir()).unwrap();
    fx.write_config(
        &fx.loopback()
            .demo("store: disk")
            .reserving_127_0_0_1(MAC)
            .pool("nfs-room", "netconsole: true")
            .port("console", 0),
    );
    let r1 = import(&fx, 1);
    store::activate(&fx.image_dir(), &r1).unwrap();
    fx.journal_loopback_lease(MAC, "nfs-room");
    let daemon = fx.start().await;
    let b = daemon.bound;
    let base = format!("http://127.0.0.1:{}", b.http.port());
    let mut held = Held::mount(b.nfs, &format!("/demo@{r1}")).await;
    assert_eq!(held.read(&["etc", "hostname"]).await, b"r1\n");
    let r2 = import(&fx, 2);
    store::activate(&fx.image_dir(), &r2).unwrap();

    let boots = || {
        let v: serde_json::Value =
            serde_json::from_slice(&curl(&format!("{base}/api/v1/boots?mac={MAC}")))
                .unwrap_or_default();
        v
    };
    // Polls the client's boots until `want` holds of them; the last seen, and whether it did.
    let until = |want: &dyn Fn(&[serde_json::Value]) -> bool| {
        let mut seen = serde_json::Value::Null;
        for _ in 0..100 {
            seen = boots();
            if seen.as_array().is_some_and(|a| want(a)) {
                return (seen, true);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        (seen, false)
    };
    // The forger: a panic line with the client's source address (recorded: its boot fails)...
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let console = b.console.expect("the console port");
    udp.send_to(
        b"<0>Kernel panic - not syncing: VFS: Unable to mount root fs",
        ("127.0.0.1", console.port()),
    )
    .unwrap();
    let failed = |a: &[serde_json::Value]| a.iter().any(|b| b["result"] == "failed");
    let (seen, ok) = tokio::task::block_in_place(|| until(&failed));
    assert!(ok, "the forged panic was not recorded: {seen}");
    // ...then a PXE firmware's DISCOVER with its MAC (recorded: a new boot starts). One after
    // the other: a DISCOVER heard before the panic belongs to the boot under way, which has
    // fetched no boot file yet, and starts none.
    let mac: bootpool::config::Mac = MAC.parse().unwrap();
    let mut discover = vec![0u8; 236];
    discover[..3].copy_from_slice(&[1, 1, 6]);
    discover[4..8].copy_from_slice(&[0x46, 0x6f, 0x72, 0x67]);
    discover[28..34].copy_from_slice(&mac.0);
    discover.extend_from_slice(&[99, 130, 83, 99, 53, 1, 1, 60, 9]);
    discover.extend_from_slice(b"PXEClient");
    discover.push(255);
    udp.send_to(&discover, ("127.0.0.1", b.dhcp.port()))
        .unwrap();
    let two = |a: &[serde_json::Value]| a.len() == 2 && failed(a);
    let (seen, forged) = tokio::task::block_in_place(|| until(&two));
    assert!(forged, "the forged DISCOVER was not recorded: {seen}");

    // prune keeps r1 once the store has the attach (poll: it commits within a second; before,
    // prune cannot know of it), then prunes for real and still keeps it.
    let keep = format!("keeping r1 ({r1}): 1 running client(s): {MAC}");
    let mut out = String::new();
    for _ in 0..50 {
        out = tokio::task::block_in_place(|| prune(&fx, &["--dry-run"]));
        if out.contains(&keep) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(out.contains(&keep), "{out}\n{seen}");
    let out = tokio::task::block_in_place(|| prune(&fx, &[]));
    assert!(out.contains(&keep), "{out}");
    assert!(store::rev_dir(&fx.image_dir(), &r1).is_dir());
    assert_eq!(held.read(&["etc", "big"]).await, pattern(41, 200_000));
    // The API's "need a reboot" counts it on r1 too.
    let api: serde_json::Value =
        serde_json::from_slice(&curl(&format!("{base}/api/v1/images"))).unwrap();
    assert_eq!(api[0]["need_reboot"], 1, "{api}");

    // The admin's timeout: silent for longer than --idle, its revision goes.
    drop(held);
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let out = tokio::task::block_in_place(|| prune(&fx, &["--idle", "2s"]));
    assert!(out.contains(&format!("removed r1 ({r1})")), "{out}");
    daemon.stop().await;
}

/// `POST /api/v1/images/demo/activate` (curl), as the dashboard's Activate button sends it:
/// refused without the admin token, with another token, for an image or revision that does not
/// exist; with the token, the revision is active (`store::active`) and new scripts name it.
#[tokio::test(flavor = "multi_thread")]
async fn the_api_activates_a_revision_behind_the_admin_token() {
    const ADMIN: &str = "activate-test-admin-0123";
    let fx = Fixture::new();
    std::fs::remove_dir_all(fx.image_dir()).unwrap();
    fx.write_config(
        &fx.loopback()
            .demo("store: disk")
            .server(&format!("admin_token: {ADMIN}")),
    );
    let r1 = import(&fx, 1);
    store::activate(&fx.image_dir(), &r1).unwrap();
    let r2 = import(&fx, 2);
    let daemon = fx.start().await;
    let base = format!("http://127.0.0.1:{}", daemon.bound.http.port());
    // (status, body) of a POST with `token` (None: no header) and `body`.
    let post = |image: &str, token: Option<&str>, body: &str| {
        let url = format!("{base}/api/v1/images/{image}/activate");
        let auth = token.map(|t| format!("Authorization: Bearer {t}"));
        let mut args = vec!["-sS", "-w", "\n%{http_code}", "-X", "POST", "--data", body];
        if let Some(a) = &auth {
            args.extend(["-H", a.as_str()]);
        }
        args.push(&url);
        let out = stdout_of(Command::new("curl").args(&args), b"");
        let out = String::from_utf8(out).unwrap();
        let (text, code) = out.trim_end().rsplit_once('\n').unwrap();
        (code.to_string(), text.to_string())
    };
    let r2_body = r#"{"rev": "r2"}"#;
    assert_eq!(post("demo", None, r2_body).0, "401");
    assert_eq!(
        post("demo", Some("not-the-admin-token-0123"), r2_body).0,
        "401"
    );
    assert_eq!(store::active(&fx.image_dir()).unwrap(), Some(r1.clone()));
    assert_eq!(post("nope", Some(ADMIN), r2_body).0, "404");
    let (code, said) = post("demo", Some(ADMIN), r#"{"rev": "r9"}"#);
    assert_eq!(code, "400", "{said}");
    assert!(said.contains("no revision `r9`"), "{said}");
    assert_eq!(post("demo", Some(ADMIN), "rev=r2").0, "400");
    let (code, said) = post("demo", Some(ADMIN), r2_body);
    assert_eq!(code, "200", "{said}");
    let said: serde_json::Value = serde_json::from_str(&said).unwrap();
    assert_eq!(said["activated"], true);
    assert_eq!(
        said["message"],
        format!(
            "image demo: r2 ({r2}) is active; boots starting from now get it, running clients keep theirs until they reboot"
        )
    );
    assert_eq!(store::active(&fx.image_dir()).unwrap(), Some(r2.clone()));
    let s = String::from_utf8(curl(&format!("{base}/boot/script/52:54:00:77:00:02.ipxe"))).unwrap();
    assert!(s.contains(&format!("/boot/demo/revs/{r2}/vmlinuz")), "{s}");
    drop(daemon);
}

/// A canary: one client entry pinned to a revision that is not active gets that revision's
/// kernel, initrd and root in its script, with its own arguments after the pool's, while the
/// rest of its pool gets the active one; the pinned revision's tree is served to it over NFS.
#[tokio::test(flavor = "multi_thread")]
async fn a_canary_boots_its_revision_and_the_room_the_active_one() {
    let fx = Fixture::new();
    std::fs::remove_dir_all(fx.image_dir()).unwrap();
    fx.write_config(&fx.loopback());
    let r1 = import(&fx, 1);
    store::activate(&fx.image_dir(), &r1).unwrap();
    let r2 = import(&fx, 2);
    fx.write_config(&fx.loopback().clients(
        "nfs-room",
        &format!(
            "- {{ macs: \"52:54:00:77:00:00-52:54:00:77:00:01\" }}\n\
             - {{ mac: \"52:54:00:77:00:02\", revision: {r2}, cmdline: canary=1 }}\n\
             - {{ macs: \"52:54:00:77:00:03-52:54:00:77:00:0f\" }}"
        ),
    ));
    let daemon = fx.start().await;
    let b = daemon.bound;
    let base = format!("http://127.0.0.1:{}", b.http.port());
    let script =
        |mac: &str| String::from_utf8(curl(&format!("{base}/boot/script/{mac}.ipxe"))).unwrap();
    let canary = script("52:54:00:77:00:02");
    assert!(
        canary.contains(&format!("/boot/demo/revs/{r2}/vmlinuz"))
            && canary.contains(&format!("/boot/demo/revs/{r2}/initrd.img"))
            && canary.contains(&format!(":/demo@{r2}:"))
            && canary.contains(" console=ttyS0 canary=1 "),
        "{canary}"
    );
    for mac in ["52:54:00:77:00:01", "52:54:00:77:00:03"] {
        let room = script(mac);
        assert!(
            room.contains(&format!("/boot/demo/revs/{r1}/vmlinuz"))
                && room.contains(&format!(":/demo@{r1}:"))
                && !room.contains(&r2)
                && !room.contains("canary=1"),
            "{room}"
        );
    }
    assert_eq!(
        curl(&format!("{base}/boot/demo/revs/{r2}/vmlinuz")),
        pattern(12, 100_000)
    );
    assert_eq!(
        nfs_cat(b.nfs, &format!("/demo@{r2}/etc/hostname")).await,
        "r2\n"
    );
    // Prune keeps the canary's revision, which no client may have booted yet.
    let out = prune(&fx, &[]);
    assert!(out.contains("a client's `revision`"), "{out}");
    assert!(store::rev_dir(&fx.image_dir(), &r2).is_dir());
    daemon.stop().await;
    // `check` refuses a canary whose revision is not on disk, at its key.
    let missing = "0123456789ab";
    let text = fx.loopback().clients(
        "nfs-room",
        &format!("- {{ mac: \"52:54:00:77:00:02\", revision: {missing} }}"),
    );
    fx.write_config(&text);
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.args(["check", "--config"]).arg(fx.config_path());
    let (ok, out, err) = run(&mut c, 60);
    assert!(!ok, "{out}\n{err}");
    assert!(
        err.contains("pools.nfs-room.clients[0].revision")
            && err.contains(&format!("no revision {missing} on disk")),
        "{out}\n{err}"
    );
}

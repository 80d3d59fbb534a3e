//! The block manifest of an NBD root and the client agent (docs/swarm.md): an import makes the
//! manifest beside the revision's squashfs image, the daemon serves it and its chunks by
//! digest, and the agent (`bootpool-agent`'s library, in this process) serves the root over
//! NBD to libnbd's nbdinfo and nbdcopy, byte for byte the image; a chunk changed on the
//! server's disk is refused by its digest and its read fails, never handed over; a stranger on
//! the client subnet reads no chunk, the API's readers do.

use crate::common::{Fixture, cmd, pattern, run_async, stdout_of};
use bootpool::image::blocks::{self, Blocks};
use bootpool::image::{blocks_file, import};
use std::process::Command;
use std::sync::atomic::Ordering;

fn curl(url: &str, extra: &[&str]) -> Vec<u8> {
    let mut c = Command::new("curl");
    c.args(["-sS", "--fail", "--max-time", "20"])
        .args(extra)
        .arg(url);
    stdout_of(&mut c, &[])
}

/// What `bootpool image blocks demo [MORE]` prints for the fixture: the manifest's URL.
fn blocks_url(fx: &Fixture, more: &[&str]) -> String {
    let out = stdout_of(
        Command::new(env!("CARGO_BIN_EXE_bootpool"))
            .args(["image", "blocks", "demo", "--config"])
            .arg(fx.config_path())
            .args(more),
        &[],
    );
    String::from_utf8(out).unwrap().trim().to_string()
}

/// An agent on a port of its own for the manifest at `url`.
fn agent(url: &str) -> bootpool_agent::Agent {
    let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    bootpool_agent::start(&[url], &bootpool_agent::Listen::Tcp(any), "root").unwrap()
}

/// A root tree of a few files, one of them large enough to span several chunks.
fn tree(at: &std::path::Path) {
    for d in ["etc", "sbin", "boot", "usr/lib"] {
        std::fs::create_dir_all(at.join(d)).unwrap();
    }
    std::fs::write(at.join("etc/hostname"), "swarm\n").unwrap();
    std::fs::write(at.join("sbin/init"), "#!/bin/sh\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(at.join("sbin/init"), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Incompressible, so the squashfs image is some chunks long.
    std::fs::write(at.join("usr/lib/big"), pattern(61, 3 << 20)).unwrap();
    std::fs::write(at.join("boot/vmlinuz-6.1.0-1"), pattern(62, 100_000)).unwrap();
    std::fs::write(at.join("boot/initrd.img-6.1.0-1"), pattern(63, 50_000)).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_imported_root_is_served_by_the_agent_from_checked_chunks() {
    let fx = Fixture::new();
    fx.write_config(&fx.loopback().demo("store: disk"));
    let src = fx.path().join("src");
    tree(&src);
    let config = fx.config();
    let req = import::Request {
        from: src,
        kernel: None,
        initrd: None,
        squashfs: true,
        source: None,
    };
    let image = config.images["demo"].clone();
    let done = tokio::task::block_in_place(|| import::import(&image, &req)).unwrap();
    let rev = bootpool::image::store::rev_dir(&image.dir, &done.revision.id);
    let img = std::fs::read(rev.join("rootfs.img")).unwrap();
    // The import made the manifest beside the squashfs image, of its bytes.
    let text = std::fs::read(rev.join("rootfs.img.chunks")).unwrap();
    let b = Blocks::decode(&text).unwrap();
    assert_eq!(b, Blocks::of_reader(&img[..], blocks::CHUNK).unwrap());
    assert!(b.digests.len() > 4, "{} chunks", b.digests.len());
    let digest = blocks::hex(&blocks::sha(&text));

    let daemon = fx.start().await;
    let base = format!(
        "http://127.0.0.1:{}/boot/demo/blocks",
        daemon.bound.http.port()
    );
    let url = format!("{base}/{digest}");
    assert_eq!(curl(&url, &[]), text);
    // The command an admin asks for the URL names the same manifest (the fixture's config
    // says port 0, which the daemon bound as it pleased: the path is what is compared). The
    // library's import activates nothing, so the revision is named.
    let id = done.revision.id.clone();
    let printed = tokio::task::block_in_place(|| blocks_url(&fx, &["--rev", &id]));
    assert!(
        printed.ends_with(&format!("/boot/demo/blocks/{digest}")),
        "{printed}"
    );
    // A chunk by its index, whole and by a Range inside it, as the image has it.
    let c = blocks::CHUNK as usize;
    assert_eq!(curl(&format!("{url}/2"), &[]), img[2 * c..3 * c]);
    assert_eq!(
        curl(&format!("{url}/1"), &["-r", "100-199"]),
        img[c + 100..c + 200]
    );
    let last = b.digests.len() - 1;
    assert_eq!(curl(&format!("{url}/{last}"), &[]), img[last * c..]);
    // No such chunk, no such manifest: 404; a digest that is none: 400.
    for (path, status) in [
        (format!("{url}/{}", last + 1), "404"),
        (format!("{base}/{}", "0".repeat(64)), "404"),
        (format!("{base}/xyz"), "400"),
    ] {
        let out = stdout_of(
            Command::new("curl").args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &path]),
            &[],
        );
        assert_eq!(String::from_utf8_lossy(&out), status, "{path}");
    }

    let a = tokio::task::spawn_blocking(move || agent(&url))
        .await
        .unwrap();
    let uri = format!("nbd://{}/root", a.tcp.unwrap());
    let (ok, out, err) = run_async(cmd("nbdinfo", &["--json", &uri]), 30).await;
    assert!(ok, "{err}");
    let info: serde_json::Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(info["exports"][0]["export-size"], img.len() as u64, "{out}");
    assert_eq!(info["exports"][0]["is_read_only"], true, "{out}");
    let copy = fx.path().join("copy");
    let (ok, _, err) = run_async(
        cmd("nbdcopy", &["--requests=16", &uri, copy.to_str().unwrap()]),
        60,
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        std::fs::read(&copy).unwrap() == img,
        "nbdcopy's copy differs"
    );
    // Each chunk came from the server once, and none was refused.
    let counts = &a.store.counts;
    assert_eq!(
        counts.fetched.load(Ordering::Relaxed),
        b.digests.len() as u64
    );
    assert_eq!(counts.bytes.load(Ordering::Relaxed), img.len() as u64);
    assert_eq!(counts.refused.load(Ordering::Relaxed), 0);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chunk_changed_on_the_servers_disk_is_refused_and_its_read_fails() {
    let fx = Fixture::new();
    fx.write_config(&fx.loopback().demo("store: disk"));
    // An image without revisions: its manifest made as an import would.
    let path = fx.image_dir().join("rootfs.img");
    let digest = blocks::hex(&blocks_file::make(&path).unwrap());
    let daemon = fx.start().await;
    let url = format!(
        "http://127.0.0.1:{}/boot/demo/blocks/{digest}",
        daemon.bound.http.port()
    );
    let a = tokio::task::spawn_blocking(move || agent(&url))
        .await
        .unwrap();
    let uri = format!("nbd://{}/root", a.tcp.unwrap());
    // One byte of chunk 7 changed in place (same size, so the manifest still names the file).
    let c = u64::from(blocks::CHUNK);
    {
        use std::os::unix::fs::FileExt as _;
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let was = pattern(3, 16 << 20)[(7 * c + 1000) as usize];
        f.write_all_at(&[!was], 7 * c + 1000).unwrap();
    }
    let image = pattern(3, 16 << 20);
    // Chunk 6 reads as it was; chunk 7 fails with EIO after its tries, every one refused.
    // nbdsh runs libnbd's Python module, which Debian installs for its own python3.
    let read = |offset: u64| {
        let mut c = cmd(
            "nbdsh",
            &[
                "-u",
                &uri,
                "-c",
                &format!("print(h.pread(4096, {offset}).hex())"),
            ],
        );
        c.env(
            "PATH",
            format!("/usr/bin:{}", std::env::var("PATH").unwrap_or_default()),
        );
        run_async(c, 30)
    };
    let (ok, out, err) = read(6 * c).await;
    assert!(ok, "{err}");
    let hex: String = image[(6 * c) as usize..(6 * c + 4096) as usize]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(out.trim(), hex);
    let (ok, _, err) = read(7 * c).await;
    assert!(!ok, "a read of the changed chunk succeeded");
    assert!(err.contains("Input/output error"), "{err}");
    assert_eq!(a.store.counts.refused.load(Ordering::Relaxed), 5);
    assert_eq!(a.store.counts.fetched.load(Ordering::Relaxed), 1);

    // `bootpool image blocks` makes the changed image a new manifest (it is newer than the
    // old one): the old digest is then no manifest of the server's, and an agent on the new
    // one reads the changed chunk as the disk has it.
    let printed = tokio::task::block_in_place(|| blocks_url(&fx, &[]));
    let new = printed.rsplit('/').next().unwrap().to_string();
    assert_ne!(new, digest);
    let http = daemon.bound.http.port();
    let status = |d: &str| {
        let path = format!("http://127.0.0.1:{http}/boot/demo/blocks/{d}");
        let out = stdout_of(
            Command::new("curl").args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &path]),
            &[],
        );
        String::from_utf8(out).unwrap()
    };
    assert_eq!(status(&digest), "404");
    assert_eq!(status(&new), "200");
    let url = format!("http://127.0.0.1:{http}/boot/demo/blocks/{new}");
    let b = tokio::task::spawn_blocking(move || agent(&url))
        .await
        .unwrap();
    let uri = format!("nbd://{}/root", b.tcp.unwrap());
    let copy = fx.path().join("copy");
    let (ok, _, err) = run_async(cmd("nbdcopy", &[&uri, copy.to_str().unwrap()]), 60).await;
    assert!(ok, "{err}");
    assert!(std::fs::read(&copy).unwrap() == std::fs::read(&path).unwrap());
    daemon.stop().await;
}

/// Who reads a root's chunks, tried with curl from another network namespace: an address of
/// the client subnet that holds no lease (a laptop on the room's network) gets 403, and 401
/// once a read token is set, unless it carries the token; an address of
/// `server.admin_networks` and the server host read them, as they read the API.
#[test]
fn a_stranger_reads_no_chunk_and_the_apis_readers_do() {
    use crate::common::netns::{Daemon, Link};
    const SERVER: &str = "10.77.5.1";
    const STRANGER: &str = "10.77.5.60";
    const ADMIN: &str = "10.88.5.2";
    const READ: &str = "blocks-read-token-0123";
    let link = Link::new(&format!("{SERVER}/24"));
    link.in_server(&["ip", "addr", "add", "10.88.5.1/24", "dev", &link.server_if]);
    for a in [STRANGER, ADMIN] {
        let a = format!("{a}/24");
        link.in_client(&["ip", "addr", "add", &a, "dev", &link.client_if]);
    }
    let fx = Fixture::new();
    let digest = blocks::hex(&blocks_file::make(&fx.image_dir().join("rootfs.img")).unwrap());
    let status = |ns: &str, from: Option<&str>, path: &str, token: Option<&str>| {
        let url = format!("http://{SERVER}:8080/boot/demo/blocks/{digest}{path}");
        let mut args = vec![
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ];
        if let Some(f) = from {
            args.extend(["--interface", f]);
        }
        let auth = token.map(|t| format!("Authorization: Bearer {t}"));
        if let Some(a) = &auth {
            args.extend(["-H", a.as_str()]);
        }
        args.push(&url);
        let (_, out, _) = crate::common::run(&mut Link::command(ns, "curl", &args), 30);
        out.trim().to_string()
    };
    let config = |keys: &str| {
        fx.loopback()
            .on_veth("10.77.5", &link.server_if)
            .http("0.0.0.0:8080")
            .server(keys)
    };

    fx.write_config(&config("admin_networks: [10.88.5.0/24]"));
    let daemon = Daemon::start(&link, &fx, 1);
    for path in ["", "/0"] {
        assert_eq!(
            status(&link.client_ns, Some(STRANGER), path, None),
            "403",
            "{path}"
        );
        assert_eq!(
            status(&link.client_ns, Some(ADMIN), path, None),
            "200",
            "{path}"
        );
        assert_eq!(status(&link.server_ns, None, path, None), "200", "{path}");
    }
    drop(daemon);

    fx.write_config(&config(&format!("read_token: {READ}")));
    let daemon = Daemon::start(&link, &fx, 2);
    for path in ["", "/0"] {
        let from = Some(STRANGER);
        assert_eq!(status(&link.client_ns, from, path, None), "401", "{path}");
        let wrong = Some("not-the-read-token-01");
        assert_eq!(status(&link.client_ns, from, path, wrong), "401", "{path}");
        assert_eq!(
            status(&link.client_ns, from, path, Some(READ)),
            "200",
            "{path}"
        );
    }
    drop(daemon);
}

/// Two servers on loopback hold the same root, and the agent has both as sources, as one
/// comma list (the kernel's `bootpool.blocks=`). libnbd's nbdcopy reads the root through the
/// agent into a pipe this test leaves unread, so the copy stops after its first chunks, all
/// from the first server; that server is killed with -9; the copy then completes from the
/// second, byte for byte the image, each chunk fetched once.
#[test]
fn a_server_killed_mid_copy_costs_the_agent_a_retry_on_the_next_not_the_read() {
    use crate::common::netns::Daemon;
    use crate::common::postgres::free_port;
    use std::io::Read as _;
    let (fa, fb) = (Fixture::new(), Fixture::new());
    let (mut urls, mut daemons) = (Vec::new(), Vec::new());
    for (n, fx) in [&fa, &fb].into_iter().enumerate() {
        let http = format!("127.0.0.1:{}", free_port());
        fx.write_config(&fx.loopback().http(&http).demo("store: disk"));
        let digest = blocks_file::make(&fx.image_dir().join("rootfs.img")).unwrap();
        urls.push(format!(
            "http://{http}/boot/demo/blocks/{}",
            blocks::hex(&digest)
        ));
        daemons.push(Daemon::on_host(fx, n as u32));
    }
    let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let list = urls.join(",");
    let a = bootpool_agent::start(&[&list], &bootpool_agent::Listen::Tcp(any), "root").unwrap();
    let uri = format!("nbd://{}/root", a.tcp.unwrap());
    let mut copy = Command::new("nbdcopy")
        .args(["--requests=2", &uri, "-"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (first, second) = (&a.store.sources.list[0], &a.store.sources.list[1]);
    let counts = &a.store.counts;
    let every = std::time::Duration::from_millis(20);
    let fetched = || counts.fetched.load(Ordering::Relaxed) > 0;
    let within = std::time::Duration::from_secs(30);
    assert!(
        crate::common::poll_until(within, every, fetched),
        "no chunk fetched"
    );
    // The pipe is full and nbdcopy waits on it: the agent fetches nothing more.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let before = counts.fetched.load(Ordering::Relaxed);
    let total = (16u64 << 20) / u64::from(blocks::CHUNK);
    assert!(
        before < total / 2,
        "{before} chunks of {total} before the kill"
    );
    assert_eq!(second.served.load(Ordering::Relaxed), 0);
    daemons.remove(0).kill9();
    let mut out = Vec::new();
    copy.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    let mut err = String::new();
    copy.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(copy.wait().unwrap().success(), "{err}");
    assert!(
        out == pattern(3, 16 << 20),
        "the copy differs from the image"
    );
    // The first server gave the manifest and the chunks before the kill, the second every
    // chunk after it; a fetch failed on the first and went on to the second.
    assert_eq!(counts.fetched.load(Ordering::Relaxed), total);
    let (one, two) = (
        first.served.load(Ordering::Relaxed),
        second.served.load(Ordering::Relaxed),
    );
    assert_eq!((one, two), (1 + before, total - before));
    assert!(first.failed.load(Ordering::Relaxed) >= 1);
    assert_eq!(counts.refused.load(Ordering::Relaxed), 0);
}

/// A root read through the agent is its client's root in the record (issue 47 part 5): a
/// client of the NBD pool, leased by busybox udhcpc in a namespace of its own, runs the agent
/// there (this process's library, on a thread in that namespace); the agent's manifest fetch
/// is the root's attach and its chunk fetches the root's reads, by the client's address.
/// nbdcopy reads the whole root through it; the boot's record (the API's) then has its root
/// over HTTP, every chunk's bytes once, the root phase after the initrd's, and once the
/// reads are quiet an end inferred from them (`root_settled`): `bootpool lab` calls such a
/// boot booted where it called it `unrecorded`. A reader of the API fetching chunks is no
/// client: nothing is recorded of it.
#[test]
fn an_agents_chunk_fetches_are_its_clients_root_in_the_record() {
    use crate::common::netns::{Daemon, Link};
    const SERVER: &str = "10.77.6.1";
    // Of `nbd-room` (52:54:00:77:00:10-1f).
    const MAC: &str = "52:54:00:77:00:12";
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    let image = fx.image_dir().join("rootfs.img");
    let digest = blocks::hex(&blocks_file::make(&image).unwrap());
    fx.write_config(
        &fx.loopback()
            .on_veth("10.77.6", &link.server_if)
            .http(&format!("{SERVER}:8080")),
    );
    let daemon = Daemon::start(&link, &fx, 1);
    let get = |path: &str| -> serde_json::Value {
        let url = format!("http://{SERVER}:8080{path}");
        let args = ["-sS", "--fail", "--max-time", "10", &url];
        let (ok, out, err) =
            crate::common::run(&mut Link::command(&link.server_ns, "curl", &args), 30);
        assert!(ok, "{url}: {err}");
        serde_json::from_str(&out).unwrap()
    };
    // The server itself (a reader of the API) reads a chunk: no boot comes of it.
    let chunk = format!("http://{SERVER}:8080/boot/demo/blocks/{digest}/0");
    let (ok, _, err) = crate::common::run(
        &mut Link::command(
            &link.server_ns,
            "curl",
            &["-sS", "--fail", "-o", "/dev/null", &chunk],
        ),
        30,
    );
    assert!(ok, "{err}");
    let bound = link
        .udhcpc(fx.path(), MAC, true)
        .expect("a lease for the client");
    let ip = bound[1].clone();

    let url = format!("http://{SERVER}:8080/boot/demo/blocks/{digest}");
    let copy = fx.path().join("copy");
    let (ns, to) = (link.client_ns.clone(), copy.clone());
    let (ok, err) = Link::within(&link.client_ns.clone(), move || {
        let a = agent(&url);
        let uri = format!("nbd://{}/root", a.tcp.unwrap());
        let (ok, _, err) = crate::common::run(
            &mut Link::command(&ns, "nbdcopy", &[&uri, to.to_str().unwrap()]),
            120,
        );
        (ok, err)
    });
    assert!(
        ok,
        "nbdcopy through the agent: {err}
{}",
        daemon.log_text()
    );
    let len = std::fs::metadata(&image).unwrap().len();
    assert!(std::fs::read(&copy).unwrap() == std::fs::read(&image).unwrap());

    // The boot as the API has it: reads counted, then quiet for `QUIET_S` (30 s): up.
    let boot = || {
        let v = get(&format!("/api/v1/boots?mac={MAC}"));
        v.as_array().unwrap().last().cloned().unwrap_or_default()
    };
    let mut seen = serde_json::Value::Null;
    let settled = (0..120).any(|_| {
        seen = boot();
        let up = seen["result"] == "booted";
        if !up {
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        up
    });
    assert!(
        settled,
        "the boot never ended: {seen}
{}",
        daemon.log_text()
    );
    assert_eq!(seen["ip"], ip.as_str(), "{seen}");
    assert_eq!(seen["root"], "http", "{seen}");
    assert_eq!(
        seen["bytes"]["http"], len,
        "every chunk's bytes once: {seen}"
    );
    assert_eq!(
        (seen["end"].as_str(), seen["evidence"].as_str()),
        (Some("inferred"), Some("root_settled")),
        "{seen}"
    );
    let phases: Vec<&str> = seen["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["dhcp", "initrd", "root"], "{seen}");
    // One client, one boot: the API reader's chunk made none.
    let boots = get("/api/v1/boots");
    assert_eq!(boots.as_array().unwrap().len(), 1, "{boots}");
}

/// A pool whose NBD root goes through the agent (`nbd: { via: agent }`): its boot script's
/// command line points the kernel's NBD client at the agent on 127.0.0.1 and hands the agent
/// the URL of the root's manifest on this server; the addition the script loads carries the
/// static agent (GNU cpio lists it); the agent given the command line's value, as the
/// addition's hook gives it, serves the root, byte for byte the image.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_through_the_agent_hands_it_the_manifests_url_and_the_addition_carries_it() {
    let fx = Fixture::new();
    let agent_bin = tokio::task::block_in_place(crate::common::static_agent);
    fx.write_config(
        &fx.loopback()
            .server(&format!("agent: {}", agent_bin.display()))
            .pool(
                "nbd-room",
                "initramfs: initramfs-tools\nnbd: { via: agent }",
            ),
    );
    let path = fx.image_dir().join("rootfs.img");
    let digest = blocks::hex(&blocks_file::make(&path).unwrap());
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);
    let script = String::from_utf8(curl(
        &format!("{base}/boot/script/52:54:00:77:00:11.ipxe"),
        &[],
    ))
    .unwrap();
    let url = format!(
        "http://127.0.0.1:{}/boot/demo/blocks/{digest}",
        daemon.bound.http.port()
    );
    assert!(
        script.contains(&format!(
            " root=/dev/nbd0 nbdroot=127.0.0.1:10809/root ip=dhcp bootpool.blocks={url} "
        )),
        "{script}"
    );
    let cpio = fx.path().join("addition.cpio");
    std::fs::write(
        &cpio,
        curl(&format!("{base}/boot/loaders/bootpool-overlay.cpio"), &[]),
    )
    .unwrap();
    let listed = stdout_of(
        Command::new("sh")
            .args(["-c", "cpio -it --quiet < \"$1\"", "sh"])
            .arg(&cpio),
        &[],
    );
    let listed = String::from_utf8(listed).unwrap();
    assert!(
        listed.lines().any(|l| l == "bootpool/@bootpool-agent"),
        "{listed}"
    );

    let given = script
        .split_whitespace()
        .find_map(|w| w.strip_prefix("bootpool.blocks="))
        .unwrap()
        .to_string();
    let a = tokio::task::spawn_blocking(move || agent(&given))
        .await
        .unwrap();
    let uri = format!("nbd://{}/root", a.tcp.unwrap());
    let copy = fx.path().join("copy");
    let (ok, _, err) = run_async(cmd("nbdcopy", &[&uri, copy.to_str().unwrap()]), 60).await;
    assert!(ok, "{err}");
    assert!(std::fs::read(&copy).unwrap() == std::fs::read(&path).unwrap());
    daemon.stop().await;
}

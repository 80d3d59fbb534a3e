//! Revisions on every server of a site (docs/site.md): two daemons on one PostgreSQL (started
//! by the test, `common::postgres::Postgres`); a revision imported on one becomes a revision of
//! the other, pulled over HTTP and checked, with the same bytes, and active there as the site
//! has it; a revision activated on the second is followed by the first, and one activated on
//! the first while the second was stopped is followed by the second when it is back; a
//! one-file update
//! moves about that file's bytes (the puller's store grows by what it fetched and nothing
//! else). A new server's first revision is pulled by hand (`bootpool image pull`): a server
//! does not start without its images. A server lacking a revision a client asks for (its own
//! pull held up by its image's lock) serves its kernel over HTTP and its initrd over TFTP,
//! fetched alone from the holder and checked, and answers an NFS mount of its root once it
//! pulled it at the client's ask; a revision no member holds stays missing; an NBD attach
//! of it (nbdcopy), refused while the server's pulls fail, waits for the pull made at its
//! ask once they can succeed. A copy changed
//! in place or truncated on a server's disk is found by its first check at start, taken out
//! and pulled again (an NFS client reads the right bytes).

use crate::common::postgres::Postgres;
use crate::common::{Fixture, pattern, poll_async, run};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn fixture(pg: &Postgres) -> Fixture {
    let fx = Fixture::new();
    std::fs::remove_dir_all(fx.image_dir()).unwrap();
    let l = fx
        .loopback()
        .without_pool("nbd-room")
        .server(&format!("database: {}", pg.url()));
    fx.write_config(&l);
    fx
}

fn tree(at: &Path) {
    for d in ["etc", "boot", "sbin", "usr/lib"] {
        std::fs::create_dir_all(at.join(d)).unwrap();
    }
    for i in 0..20u64 {
        std::fs::write(
            at.join(format!("usr/lib/lib{i}.so")),
            pattern(700 + i, 30_000),
        )
        .unwrap();
    }
    std::fs::write(at.join("etc/big"), pattern(1, 1 << 20)).unwrap();
    std::fs::write(at.join("etc/hostname"), "one\n").unwrap();
    std::fs::write(at.join("boot/vmlinuz-6.1.0-1"), pattern(3, 300_000)).unwrap();
    std::fs::write(at.join("boot/initrd.img-6.1.0-1"), pattern(4, 200_000)).unwrap();
    std::fs::write(at.join("sbin/init"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        at.join("sbin/init"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
}

fn image(fx: &Fixture, args: &[&str]) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.arg("image")
        .args(args)
        .arg("--config")
        .arg(fx.config_path())
        .current_dir(fx.path());
    let (ok, out, err) = tokio::task::block_in_place(|| run(&mut c, 300));
    assert!(ok, "bootpool image {args:?}\n{out}\n{err}");
    out
}

fn id_in(out: &str) -> String {
    let at = out.find(") from ").expect(out);
    out[at - 12..at].to_string()
}

/// Waits until `fx`'s image has `id` active.
async fn active_on(fx: &Fixture, id: &str, what: &str) {
    let dir = fx.image_dir();
    let got = poll_async(
        Duration::from_secs(120),
        Duration::from_millis(200),
        || {
            let dir = dir.clone();
            async move { bootpool::image::store::active(&dir).ok().flatten() }
        },
        |a| a.as_deref() == Some(id),
    )
    .await;
    assert_eq!(got.as_deref(), Some(id), "{what}");
}

/// Waits until psql answers `want` to `sql`.
async fn table_says(pg: &Postgres, sql: &str, want: &str) {
    let got = poll_async(
        Duration::from_secs(30),
        Duration::from_millis(300),
        || async { tokio::task::block_in_place(|| pg.query(sql)) },
        |a| a == want,
    )
    .await;
    assert_eq!(got, want, "{sql}");
}

fn same_files(a: &Fixture, b: &Fixture, id: &str) {
    let (ra, rb) = (
        a.image_dir().join("revs").join(id),
        b.image_dir().join("revs").join(id),
    );
    let ma = std::fs::read(ra.join("manifest")).unwrap();
    assert_eq!(ma, std::fs::read(rb.join("manifest")).unwrap());
    let m = bootpool::image::manifest::Manifest::decode(&ma).unwrap();
    for e in &m.entries {
        if matches!(e.kind, bootpool::image::manifest::Kind::File(_)) {
            let rel = std::str::from_utf8(&e.path).unwrap();
            assert_eq!(
                std::fs::read(ra.join(rel)).unwrap(),
                std::fs::read(rb.join(rel)).unwrap(),
                "{rel}"
            );
        }
    }
}

async fn nfs_cat(addr: std::net::SocketAddr, path: &str) -> String {
    let p = addr.port();
    let mut c = Command::new("nfs-cat");
    c.arg(format!(
        "nfs://127.0.0.1{path}?nfsport={p}&mountport={p}&version=3"
    ));
    let (ok, out, err) = crate::common::run_async(c, 60).await;
    assert!(ok, "nfs-cat {path}: {err}");
    out
}

/// The bytes of the objects of `fx`'s store: what its pulls wrote (each object fetched is
/// stored, and nothing else is).
fn stored(fx: &Fixture) -> u64 {
    let mut n = 0;
    let root = fx.image_dir().join("objects/sha256");
    for fan in std::fs::read_dir(root).unwrap().flatten() {
        for o in std::fs::read_dir(fan.path()).unwrap().flatten() {
            n += o.metadata().unwrap().len();
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revision_imported_on_one_server_is_pulled_and_activated_on_the_other() {
    let pg = tokio::task::block_in_place(Postgres::start);
    let (a, b) = (fixture(&pg), fixture(&pg));
    let src = a.path().join("src");
    tree(&src);
    let r1 = id_in(&image(
        &a,
        &["import", "demo", "--from", src.to_str().unwrap()],
    ));
    let server_a = a.start_as("a").await;
    // A new server's first revision, pulled by hand: a server does not start without its
    // images.
    let url_a = format!("http://{}", server_a.bound.http);
    image(&b, &["pull", "demo", "--from", &url_a]);
    same_files(&a, &b, &r1);
    let server_b = b.start_as("b").await;
    let active = "SELECT string_agg(rev, ',') FROM site_revisions WHERE active";
    table_says(&pg, active, &format!("{r1},{r1}")).await;

    // A one-file update, activated on a: b pulls it, moving about that file.
    let before = stored(&b);
    std::fs::write(src.join("etc/big"), pattern(2, 1 << 20)).unwrap();
    std::fs::write(src.join("etc/hostname"), "two\n").unwrap();
    let r2 = id_in(&image(
        &a,
        &[
            "import",
            "demo",
            "--from",
            src.to_str().unwrap(),
            "--activate",
        ],
    ));
    active_on(&b, &r2, "r2 pulled and active on b").await;
    same_files(&a, &b, &r2);
    // Served by b: a real NFS client reads r2's own file from b's daemon.
    assert_eq!(
        nfs_cat(server_b.bound.nfs, &format!("/demo@{r2}/etc/hostname")).await,
        "two\n"
    );
    let grown = stored(&b) - before;
    assert!(
        ((1 << 20)..=(1 << 20) * 105 / 100).contains(&grown),
        "b's store grew by {grown} bytes for a 1 MiB change (and 4 bytes of host name)"
    );

    // An activation on b (back to r1) is the site's newest: a follows it.
    image(&b, &["activate", "demo", &r1]);
    active_on(&a, &r1, "a follows b's activation of r1").await;
    table_says(&pg, active, &format!("{r1},{r1}")).await;

    // b stopped, r2 activated on a meanwhile: b back follows a, never takes the site back.
    server_b.stop().await;
    image(&a, &["activate", "demo", &r2]);
    table_says(
        &pg,
        &format!("SELECT rev FROM site_revisions WHERE active AND server = '{url_a}'"),
        &r2,
    )
    .await;
    let server_b = b.start_as("b").await;
    active_on(&b, &r2, "b, back, follows a's activation of r2").await;
    assert_eq!(
        bootpool::image::store::active(&a.image_dir()).unwrap(),
        Some(r2.clone())
    );
    drop(server_a);
    drop(server_b);
}

/// `curl`'s status for `url`, the body written to `out`.
async fn curl_to(url: &str, out: &Path) -> String {
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "30", "-o"])
        .arg(out)
        .args(["-w", "%{http_code}", url]);
    let (ok, code, err) = crate::common::run_async(c, 60).await;
    assert!(ok, "curl {url}: {err}");
    code
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_lacking_a_revision_serves_a_client_asking_for_it() {
    let pg = tokio::task::block_in_place(Postgres::start);
    let (a, b) = (fixture(&pg), fixture(&pg));
    let src = a.path().join("src");
    tree(&src);
    let r1 = id_in(&image(
        &a,
        &["import", "demo", "--from", src.to_str().unwrap()],
    ));
    let server_a = a.start_as("a").await;
    image(
        &b,
        &[
            "pull",
            "demo",
            "--from",
            &format!("http://{}", server_a.bound.http),
        ],
    );
    let server_b = b.start_as("b").await;
    let active = "SELECT string_agg(rev, ',') FROM site_revisions WHERE active";
    table_says(&pg, active, &format!("{r1},{r1}")).await;

    // b's own pulls held up: its image's lock taken, as a `bootpool image` command on b
    // would hold it. r2 (a new kernel, initrd and host name) imported on a, not activated.
    let lock = bootpool::image::store::lock(&b.image_dir()).unwrap();
    std::fs::write(src.join("boot/vmlinuz-6.1.0-1"), pattern(5, 300_000)).unwrap();
    std::fs::write(src.join("boot/initrd.img-6.1.0-1"), pattern(6, 200_000)).unwrap();
    std::fs::write(src.join("etc/hostname"), "three\n").unwrap();
    let r2 = id_in(&image(
        &a,
        &["import", "demo", "--from", src.to_str().unwrap()],
    ));
    table_says(
        &pg,
        &format!("SELECT string_agg(server, ',') FROM site_revisions WHERE rev = '{r2}'"),
        &format!("http://{}", server_a.bound.http),
    )
    .await;
    let lacks = || !b.image_dir().join("revs").join(&r2).exists();
    assert!(lacks(), "b pulled r2 under its lock");

    // Its kernel over HTTP and its initrd over TFTP, from b: fetched from a and checked,
    // while b still lacks the revision.
    let at_a = a.image_dir().join("revs").join(&r2);
    let out = b.path().join("got");
    let base = format!("http://{}", server_b.bound.http);
    let code = curl_to(&format!("{base}/boot/demo/revs/{r2}/vmlinuz"), &out).await;
    assert_eq!(code, "200");
    assert_eq!(std::fs::read(&out).unwrap(), pattern(5, 300_000));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(at_a.join("vmlinuz")).unwrap()
    );
    let tftp_at = server_b.bound.tftp.expect("tftp");
    let mut tftp = Command::new("tftp");
    tftp.args([
        "-m",
        "octet",
        &tftp_at.ip().to_string(),
        &tftp_at.port().to_string(),
    ])
    .args(["-c", "get", &format!("demo/revs/{r2}/initrd.img")])
    .arg(&out);
    let (ok, said, err) = crate::common::run_async(tftp, 60).await;
    assert!(ok, "{said}{err}");
    assert_eq!(std::fs::read(&out).unwrap(), pattern(6, 200_000));
    assert!(lacks(), "b pulled r2 under its lock");
    // A revision no member holds stays missing.
    let code = curl_to(&format!("{base}/boot/demo/revs/0123456789ab/vmlinuz"), &out).await;
    assert_eq!(code, "404");

    // The lock given back: an NFS mount of r2 asked of b waits while b pulls it at the
    // client's ask (its own pull, refused under the lock, would be tried again in 30 s),
    // then reads r2's own file.
    drop(lock);
    assert_eq!(
        nfs_cat(server_b.bound.nfs, &format!("/demo@{r2}/etc/hostname")).await,
        "three\n"
    );
    same_files(&a, &b, &r2);
    assert!(
        !b.image_dir().join(".demand").join(&r2).exists(),
        "the files fetched ahead of r2 are gone once r2 is here"
    );
    drop(server_a);
    drop(server_b);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_local_copy_changed_or_truncated_on_disk_is_found_at_start_and_pulled_again() {
    let pg = tokio::task::block_in_place(Postgres::start);
    let (a, b) = (fixture(&pg), fixture(&pg));
    let src = a.path().join("src");
    tree(&src);
    let r1 = id_in(&image(
        &a,
        &["import", "demo", "--from", src.to_str().unwrap()],
    ));
    let server_a = a.start_as("a").await;
    image(
        &b,
        &[
            "pull",
            "demo",
            "--from",
            &format!("http://{}", server_a.bound.http),
        ],
    );
    // On b's disk while it is down: a byte of the host name changed in place (same length),
    // a library truncated.
    let rev = b.image_dir().join("revs").join(&r1).join("rootfs");
    std::fs::write(rev.join("etc/hostname"), "ONE\n").unwrap();
    let lib = std::fs::OpenOptions::new()
        .write(true)
        .open(rev.join("usr/lib/lib3.so"))
        .unwrap();
    lib.set_len(1000).unwrap();
    drop(lib);
    let server_b = b.start_as("b").await;
    // Its first check finds both, takes the revision out and pulls it again from a.
    let whole = poll_async(
        Duration::from_secs(60),
        Duration::from_millis(300),
        || {
            let rev = rev.clone();
            async move {
                (
                    std::fs::read(rev.join("etc/hostname")).ok(),
                    std::fs::read(rev.join("usr/lib/lib3.so")).ok(),
                )
            }
        },
        |(h, l)| h.as_deref() == Some(b"one\n") && l.as_ref().is_some_and(|l| l.len() == 30_000),
    )
    .await;
    assert_eq!(whole.1, Some(pattern(703, 30_000)));
    same_files(&a, &b, &r1);
    assert_eq!(
        nfs_cat(server_b.bound.nfs, &format!("/demo@{r1}/etc/hostname")).await,
        "one\n"
    );
    drop(server_a);
    drop(server_b);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_nbd_export_of_a_revision_a_server_lacks_is_pulled_when_a_client_attaches() {
    let pg = tokio::task::block_in_place(Postgres::start);
    // Both servers boot the image over NBD too: a revision holds its squashfs.
    let fixture = || {
        let fx = Fixture::new();
        std::fs::remove_dir_all(fx.image_dir()).unwrap();
        let l = fx.loopback().server(&format!("database: {}", pg.url()));
        fx.write_config(&l);
        fx
    };
    let (a, b) = (fixture(), fixture());
    let src = a.path().join("src");
    tree(&src);
    let r1 = id_in(&image(
        &a,
        &["import", "demo", "--from", src.to_str().unwrap()],
    ));
    let server_a = a.start_as("a").await;
    image(
        &b,
        &[
            "pull",
            "demo",
            "--from",
            &format!("http://{}", server_a.bound.http),
        ],
    );
    let server_b = b.start_as("b").await;
    let active = "SELECT string_agg(rev, ',') FROM site_revisions WHERE active";
    table_says(&pg, active, &format!("{r1},{r1}")).await;

    // r2 imported on a while b's image is locked: b's pulls of it fail, and an NBD client
    // asking b for it is refused (b tried at its ask, under the lock).
    let lock = bootpool::image::store::lock(&b.image_dir()).unwrap();
    std::fs::write(src.join("etc/hostname"), "four\n").unwrap();
    let r2 = id_in(&image(
        &a,
        &["import", "demo", "--from", src.to_str().unwrap()],
    ));
    table_says(
        &pg,
        &format!("SELECT count(*) FROM site_revisions WHERE rev = '{r2}'"),
        "1",
    )
    .await;
    let uri = format!("nbd://{}/demo@{r2}", server_b.bound.nbd);
    let copy = b.path().join("root.out");
    let nbdcopy = || {
        let mut c = Command::new("nbdcopy");
        c.arg(&uri).arg(&copy);
        crate::common::run_async(c, 60)
    };
    let (ok, _, _) = nbdcopy().await;
    assert!(!ok, "b served r2 under its lock");

    // The lock given back: the next attach waits while b pulls r2 at once (its own retry of
    // the failed pull is 30 s away) and reads r2's root image, as b built it from the tree it
    // pulled and checked.
    drop(lock);
    let (ok, _, err) = nbdcopy().await;
    assert!(ok, "{err}");
    let at_b = b.image_dir().join("revs").join(&r2).join("rootfs.img");
    assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(at_b).unwrap());
    same_files(&a, &b, &r2);
    drop(server_a);
    drop(server_b);
}

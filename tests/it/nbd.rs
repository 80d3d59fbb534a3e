//! The NBD root export, driven by real clients (libnbd's nbdinfo and nbdcopy, qemu-img,
//! qemu-io) and by a raw client for the input they never send. Every read-only test runs on
//! both stores (`disk`, `ram`); the copy-on-write tests on both overlay kinds.

use crate::common::nbd_raw::{self as nbd, Raw};
use crate::common::{Fixture, cmd, pattern, run_async};

const SIZE: usize = 16 << 20;

/// Runs an `async fn(store: &str)` test once per image store.
macro_rules! on_both_stores {
    ($f:ident) => {
        mod $f {
            #[tokio::test]
            async fn disk() {
                super::$f("disk").await
            }
            #[tokio::test]
            async fn ram() {
                super::$f("ram").await
            }
        }
    };
}

/// The default fixture with its image on `store`, plus `extra` keys for the `demo` image.
fn fixture(store: &str, extra: &str) -> Fixture {
    let fx = Fixture::new();
    fx.write_config(&fx.loopback().demo(&format!("store: {store}{extra}")));
    fx
}

/// The fixture plus an image `other` that has a rootfs.img and `bare` that has none.
fn fixture_with_more_images(store: &str) -> Fixture {
    let fx = Fixture::new();
    let other = fx.path().join("images/other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("rootfs.img"), pattern(9, 1 << 20)).unwrap();
    std::fs::create_dir_all(fx.path().join("images/bare")).unwrap();
    fx.write_config(&fx.loopback().demo(&format!("store: {store}")).images(&format!(
        "other: {{ dir: images/other, store: {store} }}\nbare: {{ dir: images/bare, store: disk }}"
    )));
    fx
}

on_both_stores!(nbdinfo_sees_a_read_only_export_with_block_sizes_and_the_list);
async fn nbdinfo_sees_a_read_only_export_with_block_sizes_and_the_list(store: &str) {
    let fx = fixture_with_more_images(store);
    let daemon = fx.start().await;
    let uri = format!("nbd://{}/demo", daemon.bound.nbd);
    let (ok, out, err) = run_async(cmd("nbdinfo", &["--json", &uri]), 30).await;
    assert!(ok, "{err}");
    let info: serde_json::Value = serde_json::from_str(&out).expect(&out);
    let e = &info["exports"][0];
    assert_eq!(e["export-name"], "demo", "{out}");
    assert_eq!(e["export-size"], SIZE as u64, "{out}");
    assert_eq!(e["is_read_only"], true, "{out}");
    assert_eq!(e["can_flush"], true, "{out}");
    assert_eq!(e["can_multi_conn"], true, "{out}");
    assert_eq!(e["can_trim"], false, "{out}");
    assert_eq!(e["block_size_minimum"], 1, "{out}");
    assert_eq!(e["block_size_preferred"], 4096, "{out}");
    assert_eq!(e["block_size_maximum"], 1 << 25, "{out}");

    let list = format!("nbd://{}", daemon.bound.nbd);
    let (ok, out, err) = run_async(cmd("nbdinfo", &["--list", "--json", &list]), 30).await;
    assert!(ok, "{err}");
    let info: serde_json::Value = serde_json::from_str(&out).expect(&out);
    let mut names: Vec<&str> = info["exports"]
        .as_array()
        .expect(&out)
        .iter()
        .map(|e| e["export-name"].as_str().unwrap())
        .collect();
    names.sort();
    // `bare` has no rootfs.img, so it is no export.
    assert_eq!(names, ["demo", "other"], "{out}");
    daemon.stop().await;
}

on_both_stores!(nbdcopy_and_qemu_img_read_the_whole_image);
async fn nbdcopy_and_qemu_img_read_the_whole_image(store: &str) {
    let fx = fixture(store, "");
    let daemon = fx.start().await;
    let uri = format!("nbd://{}/demo", daemon.bound.nbd);
    let expected = pattern(3, SIZE);

    // nbdcopy opens several connections (multi-conn) with many requests in flight on each.
    let out = fx.path().join("nbdcopy.out");
    let (ok, _, err) = run_async(
        cmd("nbdcopy", &["--requests=32", &uri, out.to_str().unwrap()]),
        60,
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        std::fs::read(&out).unwrap() == expected,
        "nbdcopy copy differs"
    );

    let out = fx.path().join("qemu.out");
    let (ok, _, err) = run_async(
        cmd(
            "qemu-img",
            &[
                "convert",
                "-f",
                "raw",
                "-O",
                "raw",
                &uri,
                out.to_str().unwrap(),
            ],
        ),
        60,
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        std::fs::read(&out).unwrap() == expected,
        "qemu-img copy differs"
    );

    let (ok, info, err) = run_async(cmd("qemu-img", &["info", "--output=json", &uri]), 30).await;
    assert!(ok, "{err}");
    let info: serde_json::Value = serde_json::from_str(&info).expect(&info);
    assert_eq!(info["virtual-size"], SIZE as u64, "{info}");
    daemon.stop().await;
}

/// With `store: disk`, a read goes one of three ways: a cached range of 64 KiB or more read
/// and sent by the connection's reader, a smaller cached one copied and handed to the
/// writer, an uncached one read on a blocking thread. Every
/// other MiB of the image is dropped from the page cache first, so one nbdcopy run mixes them.
#[tokio::test]
async fn reads_of_an_image_partly_out_of_the_page_cache_are_right() {
    use std::os::unix::io::AsRawFd;
    let fx = fixture("disk", "");
    let image = std::fs::File::open(fx.path().join("images/demo/rootfs.img")).unwrap();
    image.sync_all().unwrap();
    for mib in (0..SIZE >> 20).step_by(2) {
        // SAFETY: an advisory call on our own open descriptor.
        let r = unsafe {
            libc::posix_fadvise(
                image.as_raw_fd(),
                (mib << 20) as libc::off_t,
                1 << 20,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        assert_eq!(r, 0);
    }
    let daemon = fx.start().await;
    let uri = format!("nbd://{}/demo", daemon.bound.nbd);
    let out = fx.path().join("nbdcopy.out");
    let (ok, _, err) = run_async(
        cmd("nbdcopy", &["--requests=32", &uri, out.to_str().unwrap()]),
        60,
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        std::fs::read(&out).unwrap() == pattern(3, SIZE),
        "nbdcopy copy differs"
    );
    // 4 KiB reads, many in flight: the copied, batched path.
    let (ok, _, err) = run_async(
        cmd(
            "nbdcopy",
            &[
                "--request-size=4096",
                "--requests=64",
                &uri,
                out.to_str().unwrap(),
            ],
        ),
        120,
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        std::fs::read(&out).unwrap() == pattern(3, SIZE),
        "nbdcopy 4 KiB copy differs"
    );
    daemon.stop().await;
}

on_both_stores!(an_unknown_export_is_refused_and_a_known_one_still_served);
async fn an_unknown_export_is_refused_and_a_known_one_still_served(store: &str) {
    let fx = fixture_with_more_images(store);
    let daemon = fx.start().await;
    for name in ["nope", "bare", "../demo"] {
        let uri = format!("nbd://{}/{name}", daemon.bound.nbd);
        let (ok, _, err) = run_async(cmd("nbdinfo", &[&uri]), 30).await;
        assert!(!ok, "{name} was served");
        assert!(err.contains("export"), "{name}: {err}");
    }
    let mut raw = Raw::connect(daemon.bound.nbd).await;
    assert_eq!(raw.go("nope").await, Err(nbd::REP_ERR_UNKNOWN));
    // With two exports the default export "" is ambiguous.
    assert_eq!(raw.go("").await, Err(nbd::REP_ERR_UNKNOWN));
    // Options the server does not know are refused, and haggling goes on.
    raw.option(nbd::OPT_STRUCTURED_REPLY, &[]).await;
    let (_, kind, _) = raw.option_reply().await;
    assert_eq!(kind, nbd::REP_ERR_UNSUP);
    raw.option(nbd::OPT_LIST, &[1]).await;
    let (_, kind, _) = raw.option_reply().await;
    assert_eq!(kind, nbd::REP_ERR_INVALID);
    assert_eq!(raw.go("other").await, Ok(1 << 20));
    daemon.stop().await;
}

on_both_stores!(malformed_input_gets_an_error_or_a_close_and_others_are_still_served);
async fn malformed_input_gets_an_error_or_a_close_and_others_are_still_served(store: &str) {
    let fx = fixture(store, "");
    let daemon = fx.start().await;
    let addr = daemon.bound.nbd;
    let image = pattern(3, SIZE);

    // A bad option magic: the server hangs up.
    let mut raw = Raw::connect(addr).await;
    raw.send(b"IHAVEOPX\0\0\0\x07\0\0\0\0").await;
    raw.expect_closed().await;

    // An option claiming 4 GiB of data: hung up on, not buffered.
    let mut raw = Raw::connect(addr).await;
    raw.send(b"IHAVEOPT\0\0\0\x07\xff\xff\xff\xff").await;
    raw.expect_closed().await;

    // Client flags the server never offered.
    let mut raw = Raw::greeted(addr).await;
    raw.send(b"\0\0\0\x80").await;
    raw.expect_closed().await;

    // In transmission: errors keep the connection usable.
    let mut raw = Raw::connect(addr).await;
    assert_eq!(raw.go("demo").await, Ok(SIZE as u64));
    raw.request(nbd::CMD_READ, 1, SIZE as u64 - 512, 1024).await;
    assert_eq!(raw.reply().await, (nbd::EINVAL, 1));
    raw.request(nbd::CMD_READ, 2, u64::MAX - 10, 512).await;
    assert_eq!(raw.reply().await, (nbd::EINVAL, 2));
    raw.request(77, 3, 0, 0).await;
    assert_eq!(raw.reply().await, (nbd::EINVAL, 3));
    raw.request(nbd::CMD_WRITE, 4, 0, 4096).await;
    raw.send(&[0xaa; 4096]).await;
    assert_eq!(raw.reply().await, (nbd::EPERM, 4));
    raw.request(nbd::CMD_TRIM, 5, 0, 4096).await;
    assert_eq!(raw.reply().await, (nbd::EPERM, 5));
    raw.request(nbd::CMD_FLUSH, 6, 0, 0).await;
    assert_eq!(raw.reply().await, (0, 6));
    // The write did not land: the bytes are still the image's.
    raw.request(nbd::CMD_READ, 7, 0, 4096).await;
    assert_eq!(raw.reply().await, (0, 7));
    assert!(raw.read(4096).await == image[..4096]);
    // A request with a bad magic: out of step, so the server hangs up.
    raw.send(&[0x55; 28]).await;
    raw.expect_closed().await;

    // After all that, a real client is served.
    let uri = format!("nbd://{addr}/demo");
    let (ok, out, err) = run_async(cmd("nbdinfo", &["--size", &uri]), 30).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), SIZE.to_string());
    daemon.stop().await;
}

on_both_stores!(pipelined_reads_are_all_answered_with_the_right_data);
async fn pipelined_reads_are_all_answered_with_the_right_data(store: &str) {
    let fx = fixture(store, "");
    let daemon = fx.start().await;
    let image = pattern(3, SIZE);
    let mut raw = Raw::connect(daemon.bound.nbd).await;
    assert_eq!(raw.go("demo").await, Ok(SIZE as u64));
    // More requests at once than the server keeps in flight: it must push back, not drop.
    let reads: Vec<(u64, u64, u32)> = (0..64u64)
        .map(|i| {
            (
                1000 + i,
                (i * 250_007) % (SIZE as u64 - 300_000),
                4096 + (i as u32 * 4099),
            )
        })
        .collect();
    read_burst(&mut raw, &image, &reads).await;
    raw.request(nbd::CMD_DISC, 9, 0, 0).await;
    raw.expect_closed().await;
    daemon.stop().await;
}

/// Sends `reads` (cookie, offset, length) as one burst of READ requests, then takes every
/// reply in the order it comes: each cookie answered once, without error, with its bytes.
async fn read_burst(raw: &mut Raw, image: &[u8], reads: &[(u64, u64, u32)]) {
    let mut burst = Vec::new();
    for &(cookie, offset, len) in reads {
        burst.extend_from_slice(&0x25609513u32.to_be_bytes());
        burst.extend_from_slice(&[0, 0, 0, 0]);
        burst.extend_from_slice(&cookie.to_be_bytes());
        burst.extend_from_slice(&offset.to_be_bytes());
        burst.extend_from_slice(&len.to_be_bytes());
    }
    raw.send(&burst).await;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..reads.len() {
        let (err, cookie) = raw.reply().await;
        assert_eq!(err, 0);
        let &(_, offset, len) = reads
            .iter()
            .find(|r| r.0 == cookie)
            .unwrap_or_else(|| panic!("unknown cookie {cookie}"));
        assert!(seen.insert(cookie), "cookie {cookie} answered twice");
        let data = raw.read(len as usize).await;
        assert!(
            data == image[offset as usize..][..len as usize],
            "cookie {cookie}"
        );
    }
}

// Big cached reads are sent by the connection's reader when its writer is idle, small ones
// by the writer: both kinds in one burst on one connection must arrive whole, each reply's
// header and data together, never interleaved with another's.
on_both_stores!(big_and_small_pipelined_reads_on_one_connection_do_not_interleave);
async fn big_and_small_pipelined_reads_on_one_connection_do_not_interleave(store: &str) {
    let fx = fixture(store, "");
    let daemon = fx.start().await;
    let image = pattern(3, SIZE);
    let mut raw = Raw::connect(daemon.bound.nbd).await;
    assert_eq!(raw.go("demo").await, Ok(SIZE as u64));
    let reads: Vec<(u64, u64, u32)> = (0..96u64)
        .map(|i| {
            let len = match i % 3 {
                0 => 1 << 20,
                1 => 4096,
                _ => 64 << 10,
            };
            let offset = (i * 1_000_003) % (SIZE as u64 - (1 << 20));
            (500 + i, offset, len)
        })
        .collect();
    read_burst(&mut raw, &image, &reads).await;
    raw.request(nbd::CMD_DISC, 9, 0, 0).await;
    raw.expect_closed().await;

    // The same through a real client: one connection, 1 MiB requests, 32 in flight.
    let uri = format!("nbd://{}/demo", daemon.bound.nbd);
    let out = fx.path().join("nbdcopy.out");
    let (ok, _, err) = run_async(
        cmd(
            "nbdcopy",
            &[
                "--connections=1",
                "--request-size=1048576",
                "--requests=32",
                &uri,
                out.to_str().unwrap(),
            ],
        ),
        60,
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        std::fs::read(&out).unwrap() == image,
        "nbdcopy copy differs"
    );
    daemon.stop().await;
}

on_both_stores!(export_name_abort_and_list_work_for_older_clients);
async fn export_name_abort_and_list_work_for_older_clients(store: &str) {
    let fx = fixture_with_more_images(store);
    let daemon = fx.start().await;
    let addr = daemon.bound.nbd;

    // NBD_OPT_EXPORT_NAME with NO_ZEROES: size and flags, then transmission at once.
    let mut raw = Raw::connect(addr).await;
    raw.option(1, b"demo").await;
    let r = raw.read(10).await;
    assert_eq!(u64::from_be_bytes(r[..8].try_into().unwrap()), SIZE as u64);
    let flags = u16::from_be_bytes([r[8], r[9]]);
    assert_eq!(flags & 0b11, 0b11, "has flags, read-only: {flags:#x}");
    raw.request(nbd::CMD_READ, 5, 4096, 512).await;
    assert_eq!(raw.reply().await, (0, 5));
    assert!(raw.read(512).await == pattern(3, 4096 + 512)[4096..]);

    // Without NO_ZEROES the reply carries 124 zero bytes, then transmission.
    let mut raw = Raw::greeted(addr).await;
    raw.send(&1u32.to_be_bytes()).await;
    raw.option(1, b"other").await;
    let r = raw.read(10 + 124).await;
    assert_eq!(u64::from_be_bytes(r[..8].try_into().unwrap()), 1 << 20);
    assert!(r[10..].iter().all(|&b| b == 0));
    raw.request(nbd::CMD_DISC, 1, 0, 0).await;
    raw.expect_closed().await;

    // EXPORT_NAME cannot carry an error: an unknown name is a hang-up.
    let mut raw = Raw::connect(addr).await;
    raw.option(1, b"nope").await;
    raw.expect_closed().await;

    // LIST, then ABORT: acknowledged, then closed.
    let mut raw = Raw::connect(addr).await;
    raw.option(nbd::OPT_LIST, &[]).await;
    let mut names = Vec::new();
    loop {
        let (opt, kind, data) = raw.option_reply().await;
        assert_eq!(opt, nbd::OPT_LIST);
        match kind {
            nbd::REP_SERVER => {
                let n = u32::from_be_bytes(data[..4].try_into().unwrap()) as usize;
                names.push(String::from_utf8(data[4..4 + n].to_vec()).unwrap());
            }
            nbd::REP_ACK => break,
            other => panic!("LIST reply {other:#x}"),
        }
    }
    names.sort();
    assert_eq!(names, ["demo", "other"]);
    raw.option(nbd::OPT_ABORT, &[]).await;
    let (opt, kind, _) = raw.option_reply().await;
    assert_eq!((opt, kind), (nbd::OPT_ABORT, nbd::REP_ACK));
    raw.expect_closed().await;
    daemon.stop().await;
}

fn write_file(fx: &Fixture, name: &str, bytes: &[u8]) -> String {
    let p = fx.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    p.to_str().unwrap().to_string()
}

/// Runs qemu-io commands against `uri`; returns whether all succeeded, and its output.
async fn try_qemu_io(uri: &str, commands: &[&str]) -> (bool, String) {
    let mut args = vec!["-f", "raw"];
    for c in commands {
        args.extend_from_slice(&["-c", c]);
    }
    args.push(uri);
    let (ok, out, err) = run_async(cmd("qemu-io", &args), 60).await;
    (ok, format!("{out}{err}"))
}

/// `try_qemu_io` that must succeed.
async fn qemu_io(uri: &str, commands: &[&str]) -> String {
    let (ok, out) = try_qemu_io(uri, commands).await;
    assert!(ok, "qemu-io {commands:?}: {out}");
    out
}

on_both_stores!(a_cow_export_takes_writes_and_others_still_see_the_base);
/// `store` here is the overlay kind (`cow: ram|disk`); the base image stays on disk.
async fn a_cow_export_takes_writes_and_others_still_see_the_base(cow: &str) {
    let fx = fixture("disk", &format!(", cow: {cow}"));
    let daemon = fx.start().await;
    let addr = daemon.bound.nbd;
    let uri = format!("nbd://{addr}/demo");
    let base = pattern(3, SIZE);

    let (ok, out, err) = run_async(cmd("nbdinfo", &["--json", &uri]), 30).await;
    assert!(ok, "{err}");
    let info: serde_json::Value = serde_json::from_str(&out).expect(&out);
    let e = &info["exports"][0];
    for (key, want) in [
        ("is_read_only", false),
        ("can_flush", true),
        ("can_fua", true),
        ("can_trim", true),
        ("can_zero", true),
        ("can_multi_conn", true),
    ] {
        assert_eq!(e[key], want, "{key}: {out}");
    }
    let (ok, out, err) = run_async(cmd("qemu-img", &["info", "--output=json", &uri]), 30).await;
    assert!(ok, "{err}");
    let qinfo: serde_json::Value = serde_json::from_str(&out).expect(&out);
    assert_ne!(qinfo["format-specific"]["data"]["read-only"], true, "{out}");

    // nbdcopy writes a whole new image over several connections, then reads it back.
    let new = pattern(77, SIZE);
    let src = write_file(&fx, "new.img", &new);
    let (ok, _, err) = run_async(cmd("nbdcopy", &["--flush", &src, &uri]), 60).await;
    assert!(ok, "{err}");
    let back = fx.path().join("back.img");
    let (ok, _, err) = run_async(cmd("nbdcopy", &[&uri, back.to_str().unwrap()]), 60).await;
    assert!(ok, "{err}");
    assert!(
        std::fs::read(&back).unwrap() == new,
        "nbdcopy read back other bytes"
    );

    // qemu-io: an unaligned write, zeroes and a trim, each read back with a pattern check.
    let out = qemu_io(
        &uri,
        &[
            "write -P 0x5a 1000 5000",
            "read -P 0x5a 1000 5000",
            "write -z 65536 1048576",
            "read -P 0 65536 1048576",
            "aio_flush",
        ],
    )
    .await;
    assert!(!out.contains("failed"), "{out}");
    let mut expect = new.clone();
    expect[1000..6000].fill(0x5a);
    expect[65536..65536 + 1048576].fill(0);

    // Another client (another address) attaches to the pristine base.
    let mut other = Raw::connect_from(addr, "127.0.0.2".parse().unwrap()).await;
    assert_eq!(other.go("demo").await, Ok(SIZE as u64));
    other.request(nbd::CMD_READ, 1, 0, 1 << 20).await;
    assert_eq!(other.reply().await, (0, 1));
    assert!(
        other.read(1 << 20).await == base[..1 << 20],
        "the base leaked writes"
    );

    // The writer's own raw connection: its writes, and errors that keep the stream in step.
    let mut raw = Raw::connect(addr).await;
    assert_eq!(raw.go("demo").await, Ok(SIZE as u64));
    raw.request(nbd::CMD_READ, 2, 0, 8192).await;
    assert_eq!(raw.reply().await, (0, 2));
    assert!(raw.read(8192).await == expect[..8192]);
    raw.request(nbd::CMD_WRITE, 3, SIZE as u64 - 100, 200).await;
    raw.send(&[1; 200]).await;
    assert_eq!(raw.reply().await, (nbd::ENOSPC, 3), "write past the end");
    raw.request(nbd::CMD_TRIM, 4, 8192, 4096).await;
    assert_eq!(raw.reply().await, (0, 4));
    raw.request(nbd::CMD_READ, 5, 8192, 4096).await;
    assert_eq!(raw.reply().await, (0, 5));
    assert!(
        raw.read(4096).await.iter().all(|&b| b == 0),
        "trimmed block"
    );
    raw.request(nbd::CMD_FLUSH, 6, 0, 0).await;
    assert_eq!(raw.reply().await, (0, 6));
    // A write longer than any payload we take: out of step, so a hang-up.
    raw.request(nbd::CMD_WRITE, 7, 0, u32::MAX).await;
    raw.expect_closed().await;

    assert!(
        std::fs::read(fx.image_dir().join("rootfs.img")).unwrap() == base,
        "the base image file was written"
    );
    daemon.stop().await;
}

on_both_stores!(writes_past_the_bound_fail_with_enospc);
async fn writes_past_the_bound_fail_with_enospc(cow: &str) {
    let fx = fixture("disk", &format!(", cow: {cow}, cow_limit: 1MiB"));
    let daemon = fx.start().await;
    let uri = format!("nbd://{}/demo", daemon.bound.nbd);
    let src = write_file(&fx, "new.img", &pattern(77, SIZE));
    let (ok, _, err) = run_async(cmd("nbdcopy", &[&src, &uri]), 60).await;
    assert!(!ok, "16 MiB went into a 1 MiB overlay");
    assert!(err.contains("No space left on device"), "{err}");

    // nbdcopy filled the overlay with blocks from wherever its parallel writes landed first:
    // free them all, then within the bound all is well and the first byte past it is refused.
    let out = qemu_io(
        &uri,
        &[
            "discard 0 16M",
            "write -P 0x11 0 512k",
            "read -P 0x11 0 512k",
        ],
    )
    .await;
    assert!(!out.contains("failed"), "{out}");
    let (ok, out) = try_qemu_io(&uri, &["write -P 0x22 8M 2M"]).await;
    assert!(!ok && out.contains("No space left on device"), "{out}");
    // Freeing blocks makes room again.
    let out = qemu_io(
        &uri,
        &["discard 0 16M", "write -P 0x33 8M 1M", "read -P 0x33 8M 1M"],
    )
    .await;
    assert!(!out.contains("failed"), "{out}");
    daemon.stop().await;
}

on_both_stores!(after_a_restart_a_disk_overlay_is_found_again);
async fn after_a_restart_a_disk_overlay_is_found_again(cow: &str) {
    let fx = fixture("disk", &format!(", cow: {cow}"));
    let daemon = fx.start().await;
    let uri = format!("nbd://{}/demo", daemon.bound.nbd);
    let out = qemu_io(&uri, &["write -P 0x42 4096 8192", "aio_flush"]).await;
    assert!(!out.contains("failed"), "{out}");
    daemon.stop().await;

    let daemon = fx.start().await;
    let uri = format!("nbd://{}/demo", daemon.bound.nbd);
    let back = fx.path().join("back.img");
    let (ok, _, err) = run_async(cmd("nbdcopy", &[&uri, back.to_str().unwrap()]), 60).await;
    assert!(ok, "{err}");
    let mut expect = pattern(3, SIZE);
    if cow == "disk" {
        expect[4096..12288].fill(0x42);
    }
    assert!(
        std::fs::read(&back).unwrap() == expect,
        "cow: {cow} after a restart"
    );
    daemon.stop().await;
}

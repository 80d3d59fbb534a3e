//! The storm's root replays (`storm::nfs` with the nfs3_client crate, `storm::nbd` with
//! libnbd) against the daemon started in-process on loopback: small synthetic traces move the
//! bytes their `Trace::bytes()` says, overlapping ops run concurrently, and errors are counted
//! rather than fatal. Each replay runs on its own thread, as a storm client does.

use crate::common::Fixture;
use bootpool::trace::format::{Header, Op, Trace, VERSION, What};
use bootpool_instruments::storm::nbd::{Target, replay_nbd, replay_nbd_to};
use bootpool_instruments::storm::nfs::{NfsPorts, replay_nfs};
use std::net::Ipv4Addr;

fn trace(root: &str, ops: Vec<Op>) -> Trace {
    let text = Trace {
        header: Header {
            bootpool_trace: VERSION,
            mac: "52:54:00:77:00:01".into(),
            pool: "nfs-room".into(),
            image: "demo".into(),
            root: root.into(),
            recorded: 1.7e9,
            note: "synthetic".into(),
        },
        ops,
    }
    .to_text();
    Trace::parse(&text).expect("a synthetic trace parses")
}

fn nfs(t: f64, d: f64, proc: &str, path: &str) -> Op {
    Op {
        t,
        d,
        what: What::Nfs {
            proc: proc.into(),
            path: path.into(),
            name: None,
            offset: 0,
            count: 0,
            bytes: 0,
            status: 0,
        },
    }
}

fn lookup(t: f64, dir: &str, name: &str) -> Op {
    let mut op = nfs(t, 0.001, "lookup", dir);
    if let What::Nfs { name: n, .. } = &mut op.what {
        *n = Some(name.into());
    }
    op
}

/// READ or READDIR(PLUS): `offset` is the offset or cookie.
fn ranged(t: f64, d: f64, proc: &str, path: &str, offset: u64, count: u64, bytes: u64) -> Op {
    let mut op = nfs(t, d, proc, path);
    if let What::Nfs {
        offset: o,
        count: c,
        bytes: b,
        ..
    } = &mut op.what
    {
        (*o, *c, *b) = (offset, count, bytes);
    }
    op
}

fn nbd(t: f64, d: f64, cmd: &str, offset: u64, len: u64) -> Op {
    Op {
        t,
        d,
        what: What::Nbd {
            cmd: cmd.into(),
            offset,
            len,
            export: (cmd == "attach").then(|| "demo".to_string()),
        },
    }
}

/// Runs `f` on a thread of its own with a current-thread runtime, as the storm does.
async fn on_thread<T: Send + 'static>(
    f: impl FnOnce(&tokio::runtime::Runtime) -> T + Send + 'static,
) -> T {
    tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        f(&rt)
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn an_nfs_trace_replays_its_bytes_with_overlapping_reads_on_several_connections() {
    let fx = Fixture::new();
    let daemon = fx.start().await;
    let lib49 = 1000 + 49 * 517;
    let ops = vec![
        nfs(0.0, 0.001, "mnt", "/demo"),
        nfs(0.002, 0.001, "fsinfo", "/"),
        nfs(0.004, 0.001, "getattr", "/"),
        lookup(0.006, "/", "etc"),
        lookup(0.008, "/etc", "hostname"),
        nfs(0.010, 0.001, "access", "/etc/hostname"),
        ranged(0.012, 0.001, "read", "/etc/hostname", 0, 4096, 5),
        lookup(0.014, "/", "lib"),
        nfs(0.016, 0.001, "readlink", "/lib"),
        // No LOOKUP of usr or usr/lib: the replay finds them itself. A small count pages the
        // listing; the continuation's recorded cookie stands for the one the first answer gave.
        ranged(0.018, 0.002, "readdirplus", "/usr/lib", 0, 1024, 0),
        ranged(0.021, 0.001, "readdirplus", "/usr/lib", 999, 1024, 0),
        ranged(0.023, 0.001, "readdir", "/usr/lib", 0, 8192, 0),
        // The whole listing fitted: its continuation is skipped.
        ranged(0.025, 0.001, "readdir", "/usr/lib", 777, 8192, 0),
        // Three reads in flight at once (read-ahead).
        ranged(0.030, 0.010, "read", "/usr/lib/lib49.so", 0, 16384, 16384),
        ranged(
            0.031,
            0.010,
            "read",
            "/usr/lib/lib49.so",
            16384,
            16384,
            lib49 - 16384,
        ),
        ranged(
            0.032,
            0.005,
            "read",
            "/usr/lib/lib7.so",
            0,
            65536,
            1000 + 7 * 517,
        ),
        nfs(0.045, 0.001, "fsstat", "/"),
        nfs(0.047, 0.001, "pathconf", "/"),
        nfs(0.049, 0.001, "null", "/"),
        nfs(0.050, 0.001, "frobnicate", "/"),
    ];
    let t = trace("nfs", ops);
    let want = t.bytes().nfs;
    assert_eq!(want, 5 + lib49 + 1000 + 7 * 517);
    let portmap = daemon.bound.portmap.port();
    let ops = t.ops.clone();
    let stats = on_thread(move |rt| {
        rt.block_on(replay_nfs(
            Ipv4Addr::LOCALHOST,
            NfsPorts::Portmap(portmap),
            &ops,
            1.0,
        ))
    })
    .await
    .expect("the nfs replay runs");
    assert!(stats.errors.is_empty(), "{stats:?}");
    assert_eq!(stats.read_bytes, want, "{stats:?}");
    assert_eq!(stats.calls["read"], 4);
    assert_eq!(stats.calls["lookup"], 3);
    assert_eq!(stats.calls["readdirplus"], 2);
    assert_eq!(stats.calls["readdir"], 1);
    assert_eq!(stats.total_calls(), 18, "{stats:?}");
    assert_eq!(stats.skipped.values().sum::<u64>(), 2, "{stats:?}");
    // usr and usr/lib at least; lib49.so (once for each of its two concurrent reads) and
    // lib7.so unless READDIRPLUS gave their handles.
    assert!((2..=5).contains(&stats.extra_lookups), "{stats:?}");
    assert_eq!(stats.connections, 3, "{stats:?}");
    assert!(stats.first.unwrap() <= stats.last.unwrap());

    // An op on a path that is not there is an error of its proc, and the replay goes on. The
    // trace starts before its first NFS op (a DHCP exchange), which waits for its time.
    let nfs_port = daemon.bound.nfs.port();
    let dhcp = Op {
        t: 0.0,
        d: 0.001,
        what: What::Dhcp {
            msg: "discover".into(),
            pxe: true,
            ipxe: false,
            arch: None,
        },
    };
    let ops = trace(
        "nfs",
        vec![
            dhcp,
            nfs(0.02, 0.001, "mnt", "/demo"),
            nfs(0.022, 0.001, "getattr", "/etc/nope"),
            ranged(0.024, 0.001, "read", "/etc/hostname", 0, 4096, 5),
        ],
    )
    .ops;
    let stats = on_thread(move |rt| {
        rt.block_on(replay_nfs(
            Ipv4Addr::LOCALHOST,
            NfsPorts::Direct {
                mount: nfs_port,
                nfs: nfs_port,
            },
            &ops,
            1.0,
        ))
    })
    .await
    .expect("the nfs replay runs");
    assert_eq!(stats.errors.get("getattr"), Some(&1), "{stats:?}");
    assert_eq!(stats.read_bytes, 5);
    assert_eq!(stats.extra_lookups, 3, "{stats:?}");

    // A refused export ends the replay with an error naming it.
    let ops = trace("nfs", vec![nfs(0.0, 0.001, "mnt", "/nope")]).ops;
    let err = on_thread(move |rt| {
        rt.block_on(replay_nfs(
            Ipv4Addr::LOCALHOST,
            NfsPorts::Direct {
                mount: nfs_port,
                nfs: nfs_port,
            },
            &ops,
            0.0,
        ))
    })
    .await
    .unwrap_err();
    assert!(err.to_string().contains("/nope"), "{err}");
    daemon.stop().await;
}

#[tokio::test]
async fn an_nbd_trace_replays_its_bytes_with_reads_in_flight_together() {
    let fx = Fixture::new();
    let daemon = fx.start().await;
    let mut ops = vec![
        nbd(0.01, 0.001, "attach", 0, 0),
        nbd(0.012, 0.002, "read", 0, 4096),
    ];
    // Eight reads overlapping, then a batch after them.
    for k in 0..8 {
        ops.push(nbd(
            0.015 + k as f64 * 0.0005,
            0.01,
            "read",
            (1 + k) << 20,
            131072,
        ));
    }
    for k in 0..4 {
        ops.push(nbd(0.03, 0.001, "read", (12 << 20) + k * 4096, 4096));
    }
    ops.push(nbd(0.04, 0.001, "flush", 0, 0));
    ops.push(nbd(0.05, 0.0, "disc", 0, 0));
    let t = trace("nbd", ops);
    let want = t.bytes().nbd;
    assert_eq!(want, 4096 + 8 * 131072 + 4 * 4096);
    let port = daemon.bound.nbd.port();
    let ops = t.ops.clone();
    let stats = on_thread(move |_| replay_nbd(Ipv4Addr::LOCALHOST, port, &ops, 1.0, None))
        .await
        .expect("the nbd replay runs");
    assert_eq!(stats.errors, 0, "{stats:?}");
    assert_eq!(stats.bytes, want, "{stats:?}");
    assert_eq!((stats.attaches, stats.reads), (1, 13), "{stats:?}");
    assert_eq!(stats.size, 16 << 20);
    assert_eq!(stats.skipped.get("flush"), Some(&1), "{stats:?}");
    // Each answer checked against the image: the export's own bytes pass, other bytes are
    // every read an error.
    for (seed, wrong) in [(3, 0), (4, 13)] {
        let ops = t.ops.clone();
        let stats = on_thread(move |_| {
            let image = crate::common::pattern(seed, 16 << 20);
            let target = Target {
                server: Ipv4Addr::LOCALHOST,
                port,
                named: None,
                through_agent: false,
                image: Some(&image),
            };
            replay_nbd_to(&target, &ops, 0.0)
        })
        .await
        .expect("the nbd replay runs");
        assert_eq!((stats.wrong, stats.errors), (wrong, wrong), "{stats:?}");
    }

    // A read past the export's end is an error; an unknown export fails the attach.
    let ops = trace(
        "nbd",
        vec![
            nbd(0.0, 0.001, "attach", 0, 0),
            nbd(0.002, 0.001, "read", (16 << 20) - 512, 1024),
            nbd(0.004, 0.001, "read", 0, 512),
        ],
    )
    .ops;
    let stats = on_thread(move |_| replay_nbd(Ipv4Addr::LOCALHOST, port, &ops, 0.0, None))
        .await
        .expect("the nbd replay runs");
    assert_eq!((stats.errors, stats.reads, stats.bytes), (1, 1, 512));
    let mut ops = trace("nbd", vec![nbd(0.0, 0.001, "attach", 0, 0)]).ops;
    if let What::Nbd { export, .. } = &mut ops[0].what {
        *export = Some("nope".into());
    }
    let (named, recorded) = (ops.clone(), ops.clone());
    let err = on_thread(move |_| replay_nbd(Ipv4Addr::LOCALHOST, port, &ops, 0.0, None))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
    // A script that names another export than the recording's: refused before any request
    // (the trace's offsets are of another image).
    let err =
        on_thread(move |_| replay_nbd(Ipv4Addr::LOCALHOST, port, &named, 0.0, Some("demo~zstd")))
            .await
            .unwrap_err();
    assert!(
        matches!(&err, bootpool_instruments::storm::nbd::NbdError::OtherExport { named, recorded }
            if named == "demo~zstd" && recorded == "nope"),
        "{err}"
    );
    let err =
        on_thread(move |_| replay_nbd(Ipv4Addr::LOCALHOST, port, &recorded, 0.0, Some("nope")))
            .await
            .unwrap_err();
    assert!(
        matches!(
            err,
            bootpool_instruments::storm::nbd::NbdError::Attach { .. }
        ),
        "{err}"
    );
    daemon.stop().await;
}

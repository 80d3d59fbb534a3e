//! The service's own duties (recording, limits, shutdown), with a minimal client; the
//! protocol itself is driven by real clients in tests/it/nbd.rs.
use super::*;
use crate::metrics::Metrics;
use crate::proto::nbd::{self as p, Request};
use crate::record::{self, Recorder, Records};
use crate::shutdown::Shutdown;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const IMAGE: usize = 3 << 20;
const CONFIG: &str = "\
server:
  address: 127.0.0.1
  http: 127.0.0.1:0
  state_dir: var/
  loaders: loaders/
dhcp:
  mode: authoritative
  subnet: 127.0.0.0/8
  range: 127.0.0.100-127.0.0.199
  lease: 1h
images:
  demo: { dir: demo, store: disk }
pools:
  room:
    image: demo
    root: nbd
    cmdline: console=ttyS0
    clients:
      - { macs: \"52:54:00:77:00:10-52:54:00:77:00:1f\" }
";

struct Setup {
    _dir: tempfile::TempDir,
    addr: SocketAddr,
    shutdown: Shutdown,
    metrics: Metrics,
    recorder: Recorder,
    records: Arc<Records>,
    served: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn start(limits: Limits) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("demo")).unwrap();
    let bytes: Vec<u8> = (0..IMAGE).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("demo/rootfs.img"), bytes).unwrap();
    let config = Config::parse(&dir.path().join("pools.yaml"), CONFIG).unwrap();
    let shutdown = Shutdown::new();
    let metrics = Metrics::default();
    let (recorder, records) = record::start(&config.server, "", &shutdown, &metrics)
        .await
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shared = crate::service::Shared::alone(
        Arc::new(config),
        recorder.clone(),
        records.clone(),
        metrics.clone(),
        shutdown.clone(),
    );
    let served = tokio::spawn(serve_with(listener.into(), shared, move |_: &Config| {
        limits
    }));
    Setup {
        _dir: dir,
        addr,
        shutdown,
        metrics,
        recorder,
        records,
        served,
    }
}

async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("nbd service stalled")
}

/// Greets and sends NBD_OPT_GO for `demo`; returns the attached stream.
async fn attach(addr: SocketAddr) -> TcpStream {
    let mut s = bounded(TcpStream::connect(addr)).await.unwrap();
    let mut g = [0; 18];
    bounded(s.read_exact(&mut g)).await.unwrap();
    let mut msg = 3u32.to_be_bytes().to_vec();
    msg.extend_from_slice(&p::IHAVEOPT.to_be_bytes());
    msg.extend_from_slice(&p::OPT_GO.to_be_bytes());
    msg.extend_from_slice(&10u32.to_be_bytes());
    msg.extend_from_slice(&4u32.to_be_bytes());
    msg.extend_from_slice(b"demo");
    msg.extend_from_slice(&0u16.to_be_bytes());
    s.write_all(&msg).await.unwrap();
    loop {
        let mut h = [0; 20];
        bounded(s.read_exact(&mut h)).await.unwrap();
        let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        let mut data = vec![0; len as usize];
        bounded(s.read_exact(&mut data)).await.unwrap();
        match kind {
            p::REP_ACK => return s,
            p::REP_INFO => continue,
            other => panic!("GO refused: {other:#x}"),
        }
    }
}

async fn expect_closed(s: &mut TcpStream) {
    let mut buf = [0; 1024];
    loop {
        match bounded(s.read(&mut buf)).await {
            Ok(0) | Err(_) => return,
            Ok(_) => continue,
        }
    }
}

#[tokio::test]
async fn attach_and_reads_are_recorded_for_the_leased_client() {
    let t = start(Limits::default()).await;
    let mac = "52:54:00:77:00:11".parse().unwrap();
    t.recorder.record(
        Who::Mac(mac),
        Kind::DhcpDiscover {
            answered: true,
            pool: None,
            pxe: true,
            ipxe: false,
            arch: None,
        },
    );
    t.recorder.record(
        Who::Mac(mac),
        Kind::DhcpAck {
            ip: "127.0.0.1".parse().unwrap(),
            pxe: true,
            ipxe: false,
            pool: "room".into(),
            link: None,
            relayed: None,
        },
    );
    let mut s = attach(t.addr).await;
    let (chunk, chunks) = (256 << 10, 5u64);
    for i in 0..chunks {
        let req = Request {
            flags: 0,
            kind: p::CMD_READ,
            cookie: i,
            offset: i * chunk as u64,
            len: chunk,
        };
        s.write_all(&req.encode()).await.unwrap();
    }
    let mut reply = vec![0; p::SIMPLE_REPLY_LEN + chunk as usize];
    for _ in 0..chunks {
        bounded(s.read_exact(&mut reply)).await.unwrap();
    }
    let disc = Request {
        flags: 0,
        kind: p::CMD_DISC,
        cookie: 99,
        offset: 0,
        len: 0,
    };
    s.write_all(&disc.encode()).await.unwrap();
    expect_closed(&mut s).await;
    t.shutdown.stop_and_wait().await;
    let boots = t.records.read(|tl| tl.boots().to_vec());
    assert_eq!(boots.len(), 1);
    assert_eq!(boots[0].root, Some(Proto::Nbd));
    assert_eq!(
        boots[0].bytes.get(&Proto::Nbd),
        Some(&(chunks * chunk as u64))
    );
    assert_eq!(t.metrics.nbd().reads.get(), chunks);
}

#[tokio::test]
async fn cached_reads_carry_the_images_bytes_and_a_cut_image_fails_only_its_reads() {
    let t = start(Limits::default()).await;
    // Not leased: read-only, no overlay, so cached READs go out from the mapping.
    let mut s = attach(t.addr).await;
    let len = 1u32 << 20;
    let read = |cookie: u64| Request {
        flags: 0,
        kind: p::CMD_READ,
        cookie,
        offset: len as u64,
        len,
    };
    s.write_all(&read(1).encode()).await.unwrap();
    let mut reply = vec![0; p::SIMPLE_REPLY_LEN + len as usize];
    bounded(s.read_exact(&mut reply)).await.unwrap();
    assert_eq!(reply[..p::SIMPLE_REPLY_LEN], p::simple_reply(0, 1));
    let want: Vec<u8> = (len as usize..2 * len as usize)
        .map(|i| (i % 251) as u8)
        .collect();
    assert!(reply[p::SIMPLE_REPLY_LEN..] == want[..], "bytes differ");
    // The image is cut short under the attached client: its READ is an error, not a
    // signal that takes the daemon down.
    let image = t._dir.path().join("demo/rootfs.img");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&image)
        .unwrap()
        .set_len(0)
        .unwrap();
    s.write_all(&read(2).encode()).await.unwrap();
    let mut head = [0; p::SIMPLE_REPLY_LEN];
    bounded(s.read_exact(&mut head)).await.unwrap();
    assert_eq!(head, p::simple_reply(p::EIO, 2));
    assert_eq!(t.metrics.nbd().errors.get(), 1);
    // The daemon serves on.
    std::fs::write(&image, vec![1u8; 4096]).unwrap();
    let _again = attach(t.addr).await;
    t.shutdown.stop_and_wait().await;
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_and_counted() {
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let t = start(limits).await;
    let _a = attach(t.addr).await;
    let _b = attach(t.addr).await;
    let mut c = bounded(TcpStream::connect(t.addr)).await.unwrap();
    expect_closed(&mut c).await;
    assert_eq!(t.metrics.nbd().full.get(), 1);
    drop(_a);
    // A freed slot is usable again; the close is noticed asynchronously, so retry.
    let mut d = None;
    for _ in 0..100 {
        let mut s = bounded(TcpStream::connect(t.addr)).await.unwrap();
        let mut g = [0; 18];
        if bounded(s.read_exact(&mut g)).await.is_ok() {
            d = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(d.is_some(), "a slot never came free");
    t.shutdown.stop_and_wait().await;
}

#[tokio::test]
async fn shutdown_ends_attached_and_haggling_connections() {
    let t = start(Limits::default()).await;
    let mut attached = attach(t.addr).await;
    let mut haggling = bounded(TcpStream::connect(t.addr)).await.unwrap();
    let mut g = [0; 18];
    bounded(haggling.read_exact(&mut g)).await.unwrap();
    bounded(t.shutdown.stop_and_wait()).await;
    expect_closed(&mut attached).await;
    expect_closed(&mut haggling).await;
    bounded(t.served).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_silent_client_is_dropped_after_the_handshake_deadline() {
    let limits = Limits {
        handshake_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let t = start(limits).await;
    let mut s = bounded(TcpStream::connect(t.addr)).await.unwrap();
    // Say nothing: the server must hang up on its own.
    expect_closed(&mut s).await;
    t.shutdown.stop_and_wait().await;
}

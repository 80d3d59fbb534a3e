//! The bounds against strangers, each driven from the outside as the hostile host did it:
//! idle and slow HTTP connections, idle NBD connections from one address, copy-on-write
//! writes of several clients past the shared total. Limits are shrunk through `limits:` in
//! pools.yaml so the tests stay short; no test asserts how long anything took.

use crate::common::nbd_raw::{self, Raw};
use crate::common::{Fixture, run_async};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The fixture with `limits` added.
fn fixture(limits: &str) -> Fixture {
    let fx = Fixture::new();
    fx.write_config(&fx.loopback().section(&format!("limits:\n{limits}")));
    fx
}

async fn connect_from(addr: SocketAddr, from: Ipv4Addr) -> TcpStream {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind((from, 0).into()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), sock.connect(addr))
        .await
        .expect("connect stalled")
        .unwrap()
}

/// Whether the server closes `s` (EOF or reset) within `within`, reading and discarding
/// whatever comes first.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut sink = [0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match s.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

fn curl(url: &str) -> Command {
    let mut c = Command::new("curl");
    c.args(["-sS", "--fail", "--max-time", "20", url]);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http_connections_past_the_caps_are_closed_and_a_real_client_is_served() {
    let fx = fixture("  http_connections: 8\n  http_per_client: 4\n  http_idle_timeout: 1h\n");
    let daemon = fx.start().await;
    let http = daemon.bound.http;
    let hostile = Ipv4Addr::new(127, 0, 0, 9);
    // Four idle connections from one address are held; the fifth is closed at once.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(connect_from(http, hostile).await);
    }
    let mut fifth = connect_from(http, hostile).await;
    assert!(
        closed_within(&mut fifth, Duration::from_secs(10)).await,
        "a connection past http_per_client stayed open"
    );
    // Other addresses fill the rest of the total, and then nobody gets another.
    for i in 0..4 {
        held.push(connect_from(http, Ipv4Addr::new(127, 0, 0, 10 + i)).await);
    }
    let mut ninth = connect_from(http, Ipv4Addr::new(127, 0, 0, 20)).await;
    assert!(
        closed_within(&mut ninth, Duration::from_secs(10)).await,
        "a connection past http_connections stayed open"
    );
    // The held ones are still open.
    for s in &mut held {
        assert!(!closed_within(s, Duration::from_millis(50)).await);
    }
    // The fifth and the ninth, each counted before it was closed.
    assert_eq!(daemon.metrics.http().refused.get(), 2);
    // Free one slot: a real client is served (the close is noticed asynchronously, so it
    // may take tries, each refused one counted).
    held.pop();
    let mut served = false;
    for _ in 0..100 {
        let (ok, _, _) = run_async(curl(&format!("http://{http}/metrics")), 30).await;
        if ok {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served, "a real client was never served");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_stalled_http_connections_are_closed() {
    let fx = fixture(
        "  http_connections: 4\n  http_per_client: 1\n  http_header_timeout: 1s\n  \
         http_idle_timeout: 1s\n",
    );
    // A kernel bigger than the socket buffers on both sides can hold (4 MiB each at most).
    std::fs::write(fx.image_dir().join("vmlinuz"), vec![7u8; 32 << 20]).unwrap();
    let daemon = fx.start().await;
    let http = daemon.bound.http;
    // The whole total held by silent connections, as the descriptor-exhausting host did:
    // no request ever starts, so the header timeout ends each.
    let mut held = Vec::new();
    for i in 0..4 {
        held.push(connect_from(http, Ipv4Addr::new(127, 0, 0, 30 + i)).await);
    }
    for s in &mut held {
        assert!(
            closed_within(s, Duration::from_secs(30)).await,
            "a silent connection was never closed"
        );
    }
    // A download the client stops taking: once the socket buffers are full no byte moves,
    // and the idle timeout ends it (the header timeout does not run during an answer). Seen
    // from outside: the address's one place (http_per_client: 1) comes free. (The client
    // cannot see the close itself: the FIN waits behind the bytes it does not read.)
    let from = Ipv4Addr::new(127, 0, 0, 40);
    let mut stalled = connect_from(http, from).await;
    stalled
        .write_all(b"GET /boot/demo/vmlinuz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut freed = false;
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut next = connect_from(http, from).await;
        next.write_all(b"GET /api/v1/pools HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut first = [0u8; 12];
        if let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_secs(10), next.read_exact(&mut first)).await
        {
            assert_eq!(&first, b"HTTP/1.1 200");
            freed = true;
            break;
        }
    }
    assert!(freed, "a stalled download was never closed");
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), stalled.read_to_end(&mut got)).await;
    assert!(
        got.len() < 32 << 20,
        "the whole kernel arrived: {}",
        got.len()
    );
    let (ok, _, err) = run_async(curl(&format!("http://{http}/api/v1/pools")), 30).await;
    assert!(ok, "{err}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_headers_are_closed_after_the_header_timeout() {
    // The idle timeout is long: only the header timeout can end this connection.
    let fx = fixture("  http_header_timeout: 1s\n  http_idle_timeout: 1h\n");
    let daemon = fx.start().await;
    let mut s = connect_from(daemon.bound.http, Ipv4Addr::new(127, 0, 0, 50)).await;
    s.write_all(b"GET /api/v1/pools HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // One more header byte every 200 ms, never the blank line; bounded at 30 s.
    let mut closed = false;
    for i in 0..150 {
        if s.write_all(if i % 10 == 9 { b"\r\n" } else { b"X" })
            .await
            .is_err()
            || closed_within(&mut s, Duration::from_millis(200)).await
        {
            closed = true;
            break;
        }
    }
    assert!(closed, "a request whose headers never end was kept open");
    let (ok, _, err) = run_async(
        curl(&format!("http://{}/api/v1/pools", daemon.bound.http)),
        30,
    )
    .await;
    assert!(ok, "{err}");
    daemon.stop().await;
}

/// An NFS connection of a client (loopback, on a loopback server) that makes no call is closed
/// within seconds (`FIRST_CALL`, 10 s), while one that makes a call is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nfs_connection_that_makes_no_call_is_closed_within_seconds() {
    let fx = fixture("  root_lost_after: 10m\n");
    let daemon = fx.start().await;
    let nfs = daemon.bound.nfs;
    let mut silent = connect_from(nfs, Ipv4Addr::new(127, 0, 0, 60)).await;
    let mut mounted = crate::common::rpc::Rpc::connect(nfs).await;
    mounted.mount("/demo").await;
    assert!(
        closed_within(&mut silent, Duration::from_secs(30)).await,
        "a connection that made no call was kept"
    );
    // The one that called is still served.
    mounted.mount("/demo").await;
    daemon.stop().await;
}

/// Attaches to `demo` over NBD from `from`.
async fn attach_from(addr: SocketAddr, from: Ipv4Addr) -> Raw {
    let mut r = Raw::connect_from(addr, from).await;
    r.go("demo").await.expect("attached");
    r
}

/// Whether the server closes a fresh connection from `from` at once (instead of greeting).
async fn nbd_refused(addr: SocketAddr, from: Ipv4Addr) -> bool {
    let mut s = connect_from(addr, from).await;
    let mut g = [0u8; 18];
    match tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut g)).await {
        Ok(Ok(_)) => false,
        Ok(Err(_)) => true,
        Err(_) => panic!("neither greeted nor closed"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_nbd_connections_past_the_per_address_cap_are_refused_and_others_attach() {
    let fx = fixture("  nbd_per_client: 3\n");
    let daemon = fx.start().await;
    let nbd = daemon.bound.nbd;
    let hostile = Ipv4Addr::new(127, 0, 0, 60);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(attach_from(nbd, hostile).await);
    }
    for _ in 0..5 {
        assert!(
            nbd_refused(nbd, hostile).await,
            "past nbd_per_client, still served"
        );
    }
    // The daemon's own count: each refusal is counted before its connection is closed.
    assert_eq!(daemon.metrics.nbd().refused.get(), 5);
    // Another address attaches and reads.
    let mut other = attach_from(nbd, Ipv4Addr::new(127, 0, 0, 61)).await;
    other.request(nbd_raw::CMD_READ, 1, 0, 4096).await;
    assert_eq!(other.reply().await, (0, 1));
    other.read(4096).await;
    // A held one going frees its address's place.
    drop(held.pop());
    let mut again = None;
    for _ in 0..100 {
        if !nbd_refused(nbd, hostile).await {
            again = Some(());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(again.is_some(), "the address's place never came free");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_nbd_server_gives_the_longest_idle_slot_to_a_new_client() {
    let fx = fixture("  nbd_connections: 2\n  nbd_idle_timeout: 1s\n");
    let daemon = fx.start().await;
    let nbd = daemon.bound.nbd;
    let mut quiet = attach_from(nbd, Ipv4Addr::new(127, 0, 0, 70)).await;
    let mut busy = attach_from(nbd, Ipv4Addr::new(127, 0, 0, 71)).await;
    // Before anyone was idle long enough, a third is refused.
    assert!(nbd_refused(nbd, Ipv4Addr::new(127, 0, 0, 72)).await);
    // `busy` keeps reading; `quiet` says nothing. Once `quiet` is past the idle timeout, a
    // newcomer takes its slot.
    let mut newcomer = None;
    for cookie in 0..300u64 {
        busy.request(nbd_raw::CMD_READ, cookie, 0, 512).await;
        assert_eq!(busy.reply().await, (0, cookie));
        busy.read(512).await;
        let mut r = connect_from(nbd, Ipv4Addr::new(127, 0, 0, 72)).await;
        let mut g = [0u8; 18];
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(10), r.read_exact(&mut g)).await
        {
            newcomer = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(newcomer.is_some(), "no slot was ever given up");
    quiet.expect_closed().await;
    busy.request(nbd_raw::CMD_READ, 9999, 0, 512).await;
    assert_eq!(busy.reply().await, (0, 9999));
    daemon.stop().await;
}

/// An NBD WRITE of 256 KiB at `offset`.
async fn nbd_write(raw: &mut Raw, cookie: u64, offset: u64) {
    let mut b = 0x25609513u32.to_be_bytes().to_vec();
    b.extend_from_slice(&0u16.to_be_bytes());
    b.extend_from_slice(&nbd_raw::CMD_WRITE.to_be_bytes());
    b.extend_from_slice(&cookie.to_be_bytes());
    b.extend_from_slice(&offset.to_be_bytes());
    b.extend_from_slice(&(256u32 << 10).to_be_bytes());
    b.extend(vec![0xa5u8; 256 << 10]);
    raw.send(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_on_write_writes_of_all_clients_stop_at_the_total() {
    let fx = Fixture::new();
    fx.write_config(
        &fx.loopback()
            .demo("store: disk, cow: ram, cow_limit: 4MiB")
            .section("limits:\n  cow_ram_total: 1MiB\n"),
    );
    let daemon = fx.start().await;
    let nbd = daemon.bound.nbd;
    let mut a = attach_from(nbd, Ipv4Addr::new(127, 0, 0, 80)).await;
    let mut b = attach_from(nbd, Ipv4Addr::new(127, 0, 0, 81)).await;
    // Client a takes 768 KiB, well within its own 4 MiB.
    for i in 0..3 {
        nbd_write(&mut a, i, i * (256 << 10)).await;
        assert_eq!(a.reply().await, (0, i));
    }
    // Client b gets the last 256 KiB of the total, then ENOSPC.
    nbd_write(&mut b, 10, 0).await;
    assert_eq!(b.reply().await, (0, 10));
    nbd_write(&mut b, 11, 1 << 20).await;
    assert_eq!(b.reply().await, (nbd_raw::ENOSPC, 11));
    nbd_write(&mut a, 12, 2 << 20).await;
    assert_eq!(a.reply().await, (nbd_raw::ENOSPC, 12));
    // Rewriting what a client holds still works.
    nbd_write(&mut a, 13, 0).await;
    assert_eq!(a.reply().await, (0, 13));
    daemon.stop().await;
}

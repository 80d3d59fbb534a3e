//! TFTP against the in-process daemon on loopback, driven by tftp-hpa, atftp and curl, plus
//! raw packets for what no stock client does (EDK2's size probe, garbage).

use crate::common::{Fixture, pattern, run_async};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use tokio::net::UdpSocket;

fn tftp_hpa(addr: SocketAddr, remote: &str, local: &Path, mode: &str) -> Command {
    let mut c = Command::new("tftp");
    c.args([
        "-m",
        mode,
        &addr.ip().to_string(),
        &addr.port().to_string(),
        "-c",
        "get",
        remote,
        local.to_str().unwrap(),
    ]);
    c
}

/// atftp fetching `remote` into `local`, asking for each TFTP option in `options`
/// (e.g. "blksize 1468").
fn atftp(addr: SocketAddr, remote: &str, local: &Path, options: &[&str]) -> Command {
    let mut c = Command::new("atftp");
    for o in options {
        c.args(["--option", o]);
    }
    c.args([
        "-g",
        "-r",
        remote,
        "-l",
        local.to_str().unwrap(),
        &addr.ip().to_string(),
        &addr.port().to_string(),
    ]);
    c
}

/// A fixture whose config reserves 127.0.0.1 for a MAC of `nfs-room` (and names 127.0.0.2 as
/// the server's address).
fn fixture() -> Fixture {
    let fx = Fixture::new();
    fx.write_config(&fx.loopback().reserving_127_0_0_1(LOOPBACK_MAC));
    fx
}

const LOOPBACK_MAC: &str = "52:54:00:77:00:20";

/// The recorder keeps only events it can tie to a client, and TFTP knows only an IP: give
/// 127.0.0.1 to the reserved MAC with a DHCP REQUEST so the transfers are tied to it.
async fn tie_loopback(dhcp: SocketAddr, state: &Path) {
    use dhcproto::v4::{DhcpOption, Message, MessageType, Opcode};
    use dhcproto::{Encodable, Encoder};
    let mac: bootpool::config::Mac = LOOPBACK_MAC.parse().unwrap();
    let any = std::net::Ipv4Addr::UNSPECIFIED;
    let mut m = Message::new(any, any, any, any, &mac.0);
    m.set_opcode(Opcode::BootRequest);
    // As if relayed from 127.0.0.1: the ACK goes back over loopback, not out as a broadcast.
    m.set_giaddr(std::net::Ipv4Addr::LOCALHOST);
    m.opts_mut()
        .insert(DhcpOption::MessageType(MessageType::Request));
    m.opts_mut()
        .insert(DhcpOption::RequestedIpAddress([127, 0, 0, 1].into()));
    let mut buf = Vec::new();
    m.encode(&mut Encoder::new(&mut buf)).unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.send_to(&buf, dhcp).await.unwrap();
    // Nobody listens for the ACK; wait for its record.
    for _ in 0..100 {
        let text = crate::common::recorded_events(state);
        if text.contains("\"dhcp_ack\"") && text.contains("127.0.0.1") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the daemon did not ack 127.0.0.1");
}

/// The file events in the journal, once `want` of them are there (the writer batches; a
/// timed-out transfer takes its retries first).
async fn file_events(state: &Path, want: usize) -> Vec<serde_json::Value> {
    for _ in 0..400 {
        let text = crate::common::recorded_events(state);
        let events: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|e: &serde_json::Value| e["event"] == "file" && e["proto"] == "tftp")
            .collect();
        if events.len() >= want {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("fewer than {want} tftp file events in {}", state.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_clients_get_the_fixture_bytes() {
    let fx = fixture();
    let daemon = fx.start().await;
    tie_loopback(daemon.bound.dhcp, &fx.path().join("var")).await;
    let addr = daemon.bound.tftp.unwrap();
    let out = fx.path().join("out");
    std::fs::create_dir_all(&out).unwrap();

    // tftp-hpa sends no options: 512-byte blocks, one at a time; in both modes.
    for mode in ["octet", "netascii"] {
        let local = out.join(format!("hpa-{mode}"));
        let (ok, so, se) = run_async(tftp_hpa(addr, "undionly.kpxe", &local, mode), 30).await;
        assert!(ok, "{so}{se}");
        assert!(!so.contains("Error") && !se.contains("Error"), "{so}{se}");
        assert_eq!(std::fs::read(&local).unwrap(), pattern(4, 70_000), "{mode}");
    }
    let local = out.join("hpa-kernel");
    let (ok, so, se) = run_async(tftp_hpa(addr, "demo/vmlinuz", &local, "octet"), 30).await;
    assert!(ok, "{so}{se}");
    assert_eq!(std::fs::read(&local).unwrap(), pattern(1, 3 << 20));

    // atftp negotiates blksize and windowsize.
    for (remote, want) in [
        ("ipxe.efi", pattern(5, 1_000_000)),
        ("demo/initrd.img", pattern(2, 2 << 20)),
    ] {
        let local = out.join(remote.replace('/', "-"));
        let c = atftp(
            addr,
            remote,
            &local,
            &["blksize 1468", "windowsize 16", "tsize 0"],
        );
        let (ok, so, se) = run_async(c, 30).await;
        assert!(ok, "{so}{se}");
        assert_eq!(std::fs::read(&local).unwrap(), want, "{remote}");
    }

    // curl asks for blksize (and tsize).
    let local = out.join("curl-kpxe");
    let mut c = Command::new("curl");
    c.args([
        "-sS",
        "--max-time",
        "20",
        "--tftp-blksize",
        "1024",
        "-o",
        local.to_str().unwrap(),
        &format!("tftp://{addr}/undionly.kpxe"),
    ]);
    let (ok, so, se) = run_async(c, 30).await;
    assert!(ok, "{so}{se}");
    assert_eq!(std::fs::read(&local).unwrap(), pattern(4, 70_000));

    // Every transfer was recorded complete with its size and kind.
    let events = file_events(&fx.path().join("var"), 6).await;
    for e in &events {
        assert_eq!(e["outcome"], "complete", "{e}");
    }
    let find = |path: &str| {
        events
            .iter()
            .find(|e| e["path"] == path)
            .unwrap_or_else(|| panic!("no event for {path}: {events:?}"))
    };
    assert_eq!(find("ipxe.efi")["bytes"], 1_000_000);
    assert_eq!(find("ipxe.efi")["kind"], "loader");
    assert_eq!(find("demo/vmlinuz")["kind"], "kernel");
    assert_eq!(find("demo/initrd.img")["kind"], "initrd");
    assert_eq!(find("demo/initrd.img")["bytes"], 2 << 20);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_outside_what_is_served_are_refused() {
    let fx = fixture();
    std::os::unix::fs::symlink("../pools.yaml", fx.path().join("loaders/escape.kpxe")).unwrap();
    let daemon = fx.start().await;
    let addr = daemon.bound.tftp.unwrap();
    // A name bootpool serves nothing by is an access violation (2); a name it would serve
    // that leads nowhere, or out of its folder, is not found (1). One leading `/` is taken
    // off (GRUB asks so), so `/etc/passwd` asks for image `etc`, which there is none of.
    for (bad, code) in [
        ("../pools.yaml", 2),
        ("demo/../../pools.yaml", 2),
        ("/etc/passwd", 1),
        ("demo/rootfs.img", 2),
        ("escape.kpxe", 1),
        (".hidden", 2),
        ("nope.efi", 1),
        ("nope/vmlinuz", 1),
    ] {
        let local = fx.path().join("refused");
        let (_, so, se) = run_async(tftp_hpa(addr, bad, &local, "octet"), 30).await;
        let said = format!("{so}{se}");
        assert!(
            said.contains(&format!("Error code {code}")),
            "{bad}: {said}"
        );
        // Nothing of the file leaked into what the client wrote.
        let got = std::fs::read(&local).unwrap_or_default();
        assert!(got.is_empty(), "{bad}: got {} bytes", got.len());
    }
    daemon.stop().await;
}

/// A `secure_boot` pool's chain over TFTP as GRUB asks for it: `shimx64.efi` and
/// `grubx64.efi` from `server.shim`/`server.grub`, absolute names (`/demo/vmlinuz`), and
/// `/grub/grub.cfg` written for the client whose lease holds the asking address, and for
/// nobody else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signed_chain_and_a_generated_grub_config_are_served_to_their_client() {
    let fx = fixture();
    let signed = fx.path().join("signed");
    std::fs::create_dir_all(&signed).unwrap();
    // The daemon serves a secure_boot pool only signed files (as PE images with a
    // certificate table): these look so.
    let (shim, grub) = (
        looks_signed(pattern(6, 90_000)),
        looks_signed(pattern(7, 150_000)),
    );
    let kernel = looks_signed(pattern(1, 3 << 20));
    std::fs::write(signed.join("shimx64.efi.signed"), &shim).unwrap();
    std::fs::write(signed.join("grubnetx64.efi.signed"), &grub).unwrap();
    std::fs::write(fx.image_dir().join("vmlinuz"), &kernel).unwrap();
    let text = std::fs::read_to_string(fx.config_path()).unwrap();
    fx.write_config(
        &text
            .replace(
                "  loaders: loaders/\n",
                "  loaders: loaders/\n  shim: signed/shimx64.efi.signed\n  grub: signed/grubnetx64.efi.signed\n",
            )
            .replace(
                "    root: nfs\n",
                "    root: nfs\n    secure_boot: true\n",
            ),
    );
    let daemon = fx.start().await;
    let addr = daemon.bound.tftp.unwrap();
    let out = fx.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let get = |remote: &str| {
        let local = out.join(remote.trim_start_matches('/').replace('/', "-"));
        let c = tftp_hpa(addr, remote, &local, "octet");
        async move {
            let (ok, so, se) = run_async(c, 30).await;
            (
                ok && !so.contains("Error") && !se.contains("Error"),
                std::fs::read(&local).unwrap_or_default(),
                format!("{so}{se}"),
            )
        }
    };
    // An address no lease holds gets nobody's config: TFTP error 1, file not found.
    let stranger = UdpSocket::bind("127.0.0.5:0").await.unwrap();
    stranger
        .send_to(&rrq(&["/grub/grub.cfg", "octet"]), addr)
        .await
        .unwrap();
    let (pkt, _) = recv(&stranger).await;
    assert_eq!(&pkt[..4], &[0, 5, 0, 1], "{pkt:?}");
    tie_loopback(daemon.bound.dhcp, &fx.path().join("var")).await;
    assert_eq!(get("shimx64.efi").await.1, shim);
    assert_eq!(get("grubx64.efi").await.1, grub);
    assert_eq!(get("/demo/vmlinuz").await.1, kernel);
    let (ok, cfg, said) = get("/grub/grub.cfg").await;
    assert!(ok, "{said}");
    let cfg = String::from_utf8(cfg).unwrap();
    let port = fx_tftp_port(&cfg);
    assert!(
        cfg.contains(&format!(
            "\nlinux (tftp,127.0.0.2:{port})/demo/vmlinuz 'root=nfs:127.0.0.2:/demo:ro,"
        )),
        "{cfg}"
    );
    assert!(
        cfg.contains(&format!(
            "\ninitrd (tftp,127.0.0.2:{port})/demo/initrd.img\nboot\n"
        )),
        "{cfg}"
    );
    assert_eq!(port, addr.port().to_string());
    // GRUB's first probe is not a failure, just not there.
    let (ok, _, said) = get("/grub/x86_64-efi/grub.cfg").await;
    assert!(!ok && said.contains("Error code 1"), "{said}");
    let events = file_events(&fx.path().join("var"), 4).await;
    let kind = |path: &str| {
        events
            .iter()
            .find(|e| e["path"] == path)
            .unwrap_or_else(|| panic!("no event for {path}: {events:?}"))["kind"]
            .clone()
    };
    assert_eq!(kind("shimx64.efi"), "shim");
    assert_eq!(kind("grubx64.efi"), "grub");
    assert_eq!(kind("demo/vmlinuz"), "kernel");
    assert_eq!(kind("grub/grub.cfg"), "grub_cfg");
    daemon.stop().await;
}

/// `body` behind a PE32+ header whose certificate table is not empty.
fn looks_signed(body: Vec<u8>) -> Vec<u8> {
    let mut b = vec![0u8; 1024];
    b[..2].copy_from_slice(b"MZ");
    b[0x3c..0x40].copy_from_slice(&0x80u32.to_le_bytes());
    b[0x80..0x84].copy_from_slice(b"PE\0\0");
    let opt = 0x80 + 24;
    b[opt..opt + 2].copy_from_slice(&0x20bu16.to_le_bytes());
    b[opt + 108..opt + 112].copy_from_slice(&16u32.to_le_bytes());
    let sec = opt + 112 + 4 * 8;
    b[sec + 4..sec + 8].copy_from_slice(&2048u32.to_le_bytes());
    b.extend(body);
    b
}

/// The TFTP port a GRUB config's `(tftp,SERVER:PORT)` device names.
fn fx_tftp_port(cfg: &str) -> String {
    let at = cfg.find("(tftp,").expect("a tftp device") + "(tftp,".len();
    let dev = &cfg[at..at + cfg[at..].find(')').unwrap()];
    dev.rsplit(':').next().unwrap().to_string()
}

/// Reads one packet from `sock`, bounded.
async fn recv(sock: &UdpSocket) -> (Vec<u8>, SocketAddr) {
    let mut buf = vec![0u8; 2048];
    let (n, from) = tokio::time::timeout(Duration::from_secs(5), sock.recv_from(&mut buf))
        .await
        .expect("an answer")
        .unwrap();
    buf.truncate(n);
    (buf, from)
}

/// From a fresh client socket, sends a read request (`parts` as for `rrq`) to `tftp`; returns
/// the socket, the first answer and where it came from.
async fn request(tftp: SocketAddr, parts: &[&str]) -> (UdpSocket, Vec<u8>, SocketAddr) {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.send_to(&rrq(parts), tftp).await.unwrap();
    let (pkt, from) = recv(&sock).await;
    (sock, pkt, from)
}

fn rrq(parts: &[&str]) -> Vec<u8> {
    let mut b = vec![0, 1];
    for p in parts {
        b.extend_from_slice(p.as_bytes());
        b.push(0);
    }
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_error_ends_the_transfer_at_once() {
    // What EDK2 does: ask for the size, read it from the OACK, then ERROR 8.
    let fx = fixture();
    let daemon = fx.start().await;
    tie_loopback(daemon.bound.dhcp, &fx.path().join("var")).await;
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let req = rrq(&[
        "ipxe.efi",
        "octet",
        "tsize",
        "0",
        "blksize",
        "1468",
        "windowsize",
        "4",
    ]);
    sock.send_to(&req, daemon.bound.tftp.unwrap())
        .await
        .unwrap();
    let (oack, tid) = recv(&sock).await;
    assert_eq!(&oack[..2], &[0, 6], "an OACK");
    let text = String::from_utf8_lossy(&oack[2..]).replace('\0', " ");
    assert!(text.contains("tsize 1000000"), "{text}");
    assert!(text.contains("blksize 1468"), "{text}");
    assert!(text.contains("windowsize 4"), "{text}");
    let mut error = vec![0, 5, 0, 8];
    error.extend_from_slice(b"tsize probe\0");
    sock.send_to(&error, tid).await.unwrap();
    // Recorded as aborted, not as a timeout after retransmitting.
    let events = file_events(&fx.path().join("var"), 1).await;
    assert_eq!(events[0]["outcome"], "aborted", "{events:?}");
    assert_eq!(events[0]["bytes"], 0);

    // The second request goes through, acking each window's last block.
    let req = rrq(&["ipxe.efi", "octet", "blksize", "1468", "windowsize", "4"]);
    sock.send_to(&req, daemon.bound.tftp.unwrap())
        .await
        .unwrap();
    let (oack, tid) = recv(&sock).await;
    assert_eq!(&oack[..2], &[0, 6]);
    sock.send_to(&[0, 4, 0, 0], tid).await.unwrap();
    let mut got = Vec::new();
    let mut expect: u16 = 1;
    loop {
        let (pkt, from) = recv(&sock).await;
        assert_eq!(from, tid);
        assert_eq!(&pkt[..2], &[0, 3], "data");
        let block = u16::from_be_bytes([pkt[2], pkt[3]]);
        assert_eq!(block, expect);
        got.extend_from_slice(&pkt[4..]);
        let last = pkt.len() - 4 < 1468;
        if last || block % 4 == 0 {
            sock.send_to(&[0, 4, pkt[2], pkt[3]], tid).await.unwrap();
        }
        if last {
            break;
        }
        expect += 1;
    }
    assert_eq!(got, pattern(5, 1_000_000));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_packets_are_dropped_and_service_goes_on() {
    let fx = fixture();
    let daemon = fx.start().await;
    tie_loopback(daemon.bound.dhcp, &fx.path().join("var")).await;
    let addr = daemon.bound.tftp.unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut oversized = rrq(&["undionly.kpxe", "octet"]);
    oversized.extend(std::iter::repeat_n(b'x', 3000));
    let garbage: Vec<Vec<u8>> = vec![
        vec![],
        vec![0],
        vec![0, 1],
        vec![0, 1, b'a'],
        vec![0, 99, 1, 2, 3],
        vec![0, 4, 0, 1],
        vec![0, 3, 0, 1, 1, 2, 3],
        vec![0, 5],
        rrq(&["undionly.kpxe", "mail"]),
        rrq(&["undionly.kpxe", "octet", "blksize"]),
        vec![0, 1, 0xff, 0xfe, 0, b'o', 0],
        oversized,
        vec![0xff; 1500],
    ];
    for g in &garbage {
        sock.send_to(g, addr).await.unwrap();
    }
    // A write request is answered with an access violation.
    sock.send_to(
        &{
            let mut w = rrq(&["x", "octet"]);
            w[1] = 2;
            w
        },
        addr,
    )
    .await
    .unwrap();
    let (pkt, _) = recv(&sock).await;
    assert_eq!(&pkt[..4], &[0, 5, 0, 2], "{pkt:?}");
    let local = fx.path().join("after");
    let (ok, so, se) = run_async(tftp_hpa(addr, "undionly.kpxe", &local, "octet"), 30).await;
    assert!(ok, "{so}{se}");
    assert_eq!(std::fs::read(&local).unwrap(), pattern(4, 70_000));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_block_is_sent_again() {
    let fx = fixture();
    let daemon = fx.start().await;
    tie_loopback(daemon.bound.dhcp, &fx.path().join("var")).await;
    let (sock, first, tid) = request(daemon.bound.tftp.unwrap(), &["undionly.kpxe", "octet"]).await;
    assert_eq!(&first[..4], &[0, 3, 0, 1]);
    // No ACK: the same block comes again, from the same transfer socket.
    let (again, from) = recv(&sock).await;
    assert_eq!(from, tid);
    assert_eq!(again, first);
    // A packet from a stranger to the transfer socket gets "unknown transfer id".
    let stranger = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    stranger.send_to(&[0, 4, 0, 1], tid).await.unwrap();
    let (pkt, _) = recv(&stranger).await;
    assert_eq!(&pkt[..4], &[0, 5, 0, 5]);
    sock.send_to(&[0, 5, 0, 0, b'b', b'y', b'e', 0], tid)
        .await
        .unwrap();
    let events = file_events(&fx.path().join("var"), 1).await;
    assert_eq!(events[0]["outcome"], "aborted");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_gets_a_bounded_number_of_transfers_at_once() {
    let fx = fixture();
    let limit = bounded_transfers(&fx).await;
    assert_eq!(limit, 32, "the default limits.tftp_per_client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_address_transfer_cap_is_the_configured_one() {
    let fx = Fixture::new();
    fx.write_config(
        &fx.loopback()
            .reserving_127_0_0_1(LOOPBACK_MAC)
            .section("limits:\n  tftp_per_client: 3\n"),
    );
    let limit = bounded_transfers(&fx).await;
    assert_eq!(limit, 3);
}

/// Opens as many transfers from one address as the served `limits.tftp_per_client` allows,
/// none acknowledged, sees one more refused and a slot given back when one ends; returns the
/// cap it used.
async fn bounded_transfers(fx: &Fixture) -> usize {
    let daemon = fx.start().await;
    let addr = daemon.bound.tftp.unwrap();
    let limit = daemon.config.load().limits.tftp_per_client;
    // `limit` transfers from one address, none acknowledged: each gets its first block.
    let mut open = Vec::new();
    for _ in 0..limit {
        let (sock, pkt, tid) = request(addr, &["undionly.kpxe", "octet"]).await;
        assert_eq!(&pkt[..4], &[0, 3, 0, 1], "first block");
        open.push((sock, tid));
    }
    // One more from the same address is refused at once, with a reason.
    let (extra, pkt, _) = request(addr, &["undionly.kpxe", "octet"]).await;
    assert_eq!(&pkt[..2], &[0, 5], "an ERROR");
    assert!(String::from_utf8_lossy(&pkt[4..]).contains("too many transfers"));
    // Ending one transfer gives its slot back.
    let (sock, tid) = open.pop().unwrap();
    sock.send_to(&[0, 5, 0, 0, b'x', 0], tid).await.unwrap();
    let mut served = false;
    for _ in 0..50 {
        extra
            .send_to(&rrq(&["undionly.kpxe", "octet"]), addr)
            .await
            .unwrap();
        let (pkt, _) = recv(&extra).await;
        if pkt[..2] == [0, 3] {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "the slot was not given back");
    daemon.stop().await;
    limit
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_transfers_at_once_each_get_their_bytes() {
    // Transfers share a few loop threads: interleaved, each must still get its own file,
    // whole, at its own block size and window.
    let fx = fixture();
    let daemon = fx.start().await;
    tie_loopback(daemon.bound.dhcp, &fx.path().join("var")).await;
    let addr = daemon.bound.tftp.unwrap();
    let out = fx.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let cases = [
        ("demo/initrd.img", "512", "1"),
        ("demo/initrd.img", "1468", "16"),
        ("ipxe.efi", "1468", "1"),
        ("ipxe.efi", "8192", "4"),
    ];
    let mut runs = Vec::new();
    for i in 0..16 {
        let (remote, blksize, window) = cases[i % cases.len()];
        let local = out.join(format!("{i}"));
        let options = [format!("blksize {blksize}"), format!("windowsize {window}")];
        let c = atftp(
            addr,
            remote,
            &local,
            &options.each_ref().map(String::as_str),
        );
        runs.push(tokio::spawn(async move {
            (run_async(c, 60).await, local, remote)
        }));
    }
    for r in runs {
        let ((ok, so, se), local, remote) = r.await.unwrap();
        assert!(ok, "{remote}: {so}{se}");
        let want = if remote == "ipxe.efi" {
            pattern(5, 1_000_000)
        } else {
            pattern(2, 2 << 20)
        };
        assert!(std::fs::read(&local).unwrap() == want, "{remote} differs");
    }
    let events = file_events(&fx.path().join("var"), 16).await;
    assert_eq!(events.len(), 16);
    assert!(
        events.iter().all(|e| e["outcome"] == "complete"),
        "{events:?}"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_times_out_and_a_running_transfer_does_not_hold_up_stop() {
    let fx = fixture();
    let daemon = fx.start().await;
    tie_loopback(daemon.bound.dhcp, &fx.path().join("var")).await;
    // Asks for a 1 s timeout, takes the OACK, and never answers: after the retries the
    // transfer is given up as timed out. The socket stays open: a closed port would answer
    // the retransmissions with ICMP and end the transfer as aborted instead.
    let (_silent, oack, _) = request(
        daemon.bound.tftp.unwrap(),
        &["undionly.kpxe", "octet", "timeout", "1"],
    )
    .await;
    assert_eq!(&oack[..2], &[0, 6], "an OACK");
    let events = file_events(&fx.path().join("var"), 1).await;
    assert_eq!(events[0]["outcome"], "timedout", "{events:?}");
    assert_eq!(events[0]["bytes"], 0);

    // A transfer still running does not hold up the daemon's stop.
    let (_late, first, _) = request(daemon.bound.tftp.unwrap(), &["undionly.kpxe", "octet"]).await;
    assert_eq!(&first[..4], &[0, 3, 0, 1]);
    tokio::time::timeout(Duration::from_secs(10), daemon.stop())
        .await
        .expect("the daemon stops with a transfer running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_asking_timeout_255_still_ends_within_the_servers_bounds() {
    // The hostile RRQ: timeout 255 (RFC 2349's most), the OACK taken, never an ACK. Under
    // the client's own terms it would hold its slot for 6 x 255 s; the server's lifetime
    // (shrunk here) and its cap on the retransmission interval end it much sooner.
    let fx = fixture();
    let text = std::fs::read_to_string(fx.config_path()).unwrap();
    fx.write_config(&format!("{text}limits:\n  tftp_lifetime: 2s\n"));
    let daemon = fx.start().await;
    tie_loopback(daemon.bound.dhcp, &fx.path().join("var")).await;
    let (_silent, oack, _) = request(
        daemon.bound.tftp.unwrap(),
        &["undionly.kpxe", "octet", "timeout", "255"],
    )
    .await;
    assert_eq!(&oack[..2], &[0, 6], "an OACK");
    let events = file_events(&fx.path().join("var"), 1).await;
    assert_eq!(events[0]["outcome"], "timedout", "{events:?}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_from_outside_the_client_networks_are_dropped_and_counted() {
    let fx = fixture();
    let text = std::fs::read_to_string(fx.config_path()).unwrap();
    fx.write_config(&format!(
        "{text}limits:\n  tftp_clients: [10.0.0.0/8, 127.0.0.64/26]\n"
    ));
    let daemon = fx.start().await;
    let tftp = daemon.metrics.tftp();
    // 127.0.0.1 is outside both networks: no answer at all (nothing to reflect at a
    // spoofed source), and the request counted as refused.
    let stranger = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for _ in 0..3 {
        stranger
            .send_to(
                &rrq(&["undionly.kpxe", "octet"]),
                daemon.bound.tftp.unwrap(),
            )
            .await
            .unwrap();
    }
    // The daemon's own counts: requests, each refused.
    for _ in 0..100 {
        if tftp.refused.get() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!((tftp.requests.get(), tftp.refused.get()), (3, 3));
    let mut buf = [0u8; 600];
    assert!(
        tokio::time::timeout(Duration::from_millis(300), stranger.recv_from(&mut buf))
            .await
            .is_err(),
        "a stranger was answered"
    );
    // 127.0.0.70 is inside 127.0.0.64/26: served.
    let client = UdpSocket::bind("127.0.0.70:0").await.unwrap();
    client
        .send_to(
            &rrq(&["undionly.kpxe", "octet"]),
            daemon.bound.tftp.unwrap(),
        )
        .await
        .unwrap();
    let (pkt, _) = recv(&client).await;
    assert_eq!(&pkt[..4], &[0, 3, 0, 1], "the first block");
    assert_eq!((tftp.requests.get(), tftp.refused.get()), (4, 3));
    daemon.stop().await;
}

//! The `bootpool-agent` binary against a small HTTP server of this test's that hands out one
//! chunk corrupted the first time it is asked for: libnbd's nbdcopy reads the whole root through
//! the agent's Unix socket, byte for byte the image (the bad chunk refused and fetched again);
//! a manifest that is not the one the URL names is refused before anything is served.

use bootpool_agent::blocks::{self, Blocks};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Deterministic bytes that do not repeat at any chunk's distance.
fn image(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Serves the manifest and the chunks of `img` under `/boot/demo/blocks/DIGEST`, HTTP/1.1
/// kept alive; the first answer for chunk `bad` has one byte flipped. The paths asked, in order.
fn server(img: Arc<Vec<u8>>, b: Arc<Blocks>, bad: u64) -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    let prefix = format!("/boot/demo/blocks/{}", blocks::hex(&b.digest()));
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let (img, b, log, prefix) = (img.clone(), b.clone(), log.clone(), prefix.clone());
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut w = s;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    // The rest of the head.
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                    }
                    let path = line.split(' ').nth(1).unwrap_or("").to_string();
                    let first = {
                        let mut log = log.lock().unwrap();
                        log.push(path.clone());
                        log.iter().filter(|p| **p == path).count() == 1
                    };
                    // The manifest under any digest, so that a wrong one is the agent's to see.
                    let manifest = path
                        .strip_prefix("/boot/demo/blocks/")
                        .is_some_and(|d| d.len() == 64);
                    let body = if manifest {
                        Some(b.encode())
                    } else {
                        path.strip_prefix(&format!("{prefix}/"))
                            .and_then(|i| i.parse::<u64>().ok())
                            .and_then(|i| b.span(i).map(|s| (i, s)))
                            .map(|(i, (off, len))| {
                                let mut c = img[off as usize..off as usize + len as usize].to_vec();
                                if i == bad && first {
                                    c[100] ^= 0x40;
                                }
                                c
                            })
                    };
                    let head = match &body {
                        Some(body) => {
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len())
                        }
                        None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".into(),
                    };
                    let mut out = head.into_bytes();
                    out.extend(body.unwrap_or_default());
                    if w.write_all(&out).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, asked)
}

/// The agent binary, killed when dropped.
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn agent(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool-agent"));
    c.args(args);
    c
}

#[test]
fn nbdcopy_reads_the_image_through_the_agent_and_a_bad_chunk_is_fetched_again() {
    let img = Arc::new(image(3 * blocks::CHUNK as usize + 1000));
    let b = Arc::new(Blocks::of_reader(&img[..], blocks::CHUNK).unwrap());
    let (port, asked) = server(img.clone(), b.clone(), 2);
    let dir = std::env::temp_dir().join(format!("bootpool-agent-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("root.sock");
    let url = format!(
        "http://127.0.0.1:{port}/boot/demo/blocks/{}",
        blocks::hex(&b.digest())
    );
    let log = dir.join("agent.log");
    let _agent = Agent(
        agent(&["--unix", socket.to_str().unwrap(), &url])
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let since = Instant::now();
    while !socket.exists() {
        assert!(
            since.elapsed() < Duration::from_secs(10),
            "the agent never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = dir.join("copy");
    let uri = format!("nbd+unix:///root?socket={}", socket.display());
    let done = Command::new("nbdcopy")
        .args([&uri, out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(
        std::fs::read(&out).unwrap() == *img,
        "the copy differs from the image"
    );
    // Chunk 2 was asked twice (the first answer refused), every other chunk once.
    let asked = asked.lock().unwrap().clone();
    let count = |i: u64| {
        asked
            .iter()
            .filter(|p| p.ends_with(&format!("/{i}")))
            .count()
    };
    assert_eq!(
        (count(0), count(1), count(2), count(3)),
        (1, 1, 2, 1),
        "{asked:?}"
    );
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("chunk 2:") && said.contains("refused"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_manifest_that_is_not_the_one_named_is_refused_and_the_agent_exits() {
    let img = Arc::new(image(10_000));
    let b = Arc::new(Blocks::of_reader(&img[..], blocks::CHUNK).unwrap());
    let (port, _) = server(img, b.clone(), u64::MAX);
    // The server answers another digest's URL with its manifest: refused by its SHA-256.
    let other = blocks::hex(&blocks::sha(b"another image"));
    let url = format!("http://127.0.0.1:{port}/boot/demo/blocks/{other}");
    let done = agent(&["--listen", "127.0.0.1:0", &url])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(done.status.code(), Some(1));
    let said = String::from_utf8_lossy(&done.stderr);
    let theirs = blocks::hex(&b.digest());
    assert!(
        said.contains(&format!(
            "its SHA-256 is {theirs}, not the {other} asked for"
        )),
        "{said}"
    );
    // Usage errors exit 2, --help 0.
    let done = agent(&["--listen", "nowhere", &url]).output().unwrap();
    assert_eq!(done.status.code(), Some(2));
    let done = agent(&["http://127.0.0.1:1/boot/demo/blocks/xyz"])
        .output()
        .unwrap();
    assert_eq!(done.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&done.stderr).contains("sha256"));
    let done = agent(&["--help"]).output().unwrap();
    assert!(done.status.success());
    assert!(String::from_utf8_lossy(&done.stdout).starts_with("usage: bootpool-agent"));
}

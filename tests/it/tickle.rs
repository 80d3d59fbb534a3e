//! Tickle ACKs against the kernel's own TCP (docs/failover.md): a client's idle connection to
//! an address whose host died silently stays up after another host takes the address over,
//! until that host sends a tickle; then the client's TCP is reset at once.

use super::common::netns::Link;
use super::common::poll_until;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Command, Stdio};
use std::time::Duration;

const ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 79, 7, 1);
const PORT: u16 = 7049;

/// The client's established connections to the address, as `ss` lists them.
fn established(ns: &str) -> String {
    let dst = ADDRESS.to_string();
    let args = ["-tnH", "state", "established", "dst", &dst];
    let out = Link::command(ns, "ss", &args).output().expect("ss");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_tickle_resets_a_clients_connection_to_an_address_taken_over() {
    // Host A holds the address; the client's namespace is the switch (its bridge), host B
    // another port on it: Link::switched's server namespace plays A, its second link B's NIC,
    // moved into a namespace of its own below.
    let link = Link::switched(&[&format!("{ADDRESS}/24"), "10.79.7.2/24"]);
    let (a, client) = (link.server_ns.clone(), link.client_ns.clone());
    let b = format!("{a}b");
    let add = Command::new("ip")
        .args(["netns", "add", &b])
        .status()
        .unwrap();
    assert!(add.success());
    let _b = Namespace(b.clone());
    let b_if = link.server_ifs[1].clone();
    let moved = Command::new("ip")
        .args(["-n", &a, "link", "set", &b_if, "netns", &b])
        .status()
        .unwrap();
    assert!(moved.success());
    Link::exec(&b, &["ip", "addr", "add", "10.79.7.2/24", "dev", &b_if]);
    Link::exec(&b, &["ip", "link", "set", &b_if, "up"]);
    Link::exec(&b, &["ip", "link", "set", "lo", "up"]);
    Link::exec(
        &client,
        &[
            "ip",
            "addr",
            "add",
            "10.79.7.100/24",
            "dev",
            &link.client_if,
        ],
    );
    // A's server: accepts one connection and holds it without a word.
    let listener = Link::within(&a, move || {
        std::net::TcpListener::bind(SocketAddrV4::new(ADDRESS, PORT)).unwrap()
    });
    let held = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        std::thread::sleep(Duration::from_secs(120));
        drop(stream);
    });
    // The client: connects, says its port, and waits for a byte that never comes.
    let script = format!(
        "import socket,sys\n\
         s=socket.create_connection(('{ADDRESS}',{PORT}))\n\
         print(s.getsockname()[1],flush=True)\n\
         try:\n  s.recv(1); print('closed',flush=True)\n\
         except ConnectionResetError: print('reset',flush=True)\n"
    );
    let mut child = Link::command(&client, "python3", &["-c", &script])
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut child = Killed(child);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let port: u16 = line.trim().parse().expect("the client's port");
    assert!(established(&client).contains(&format!(":{port}")));
    // A dies silently (its link goes down: not a FIN, not a reset), and B takes the address
    // with a gratuitous ARP, as keepalived does.
    Link::exec(&a, &["ip", "link", "set", &link.server_ifs[0], "down"]);
    Link::exec(
        &b,
        &["ip", "addr", "add", &format!("{ADDRESS}/24"), "dev", &b_if],
    );
    Link::exec(
        &b,
        &["arping", "-U", "-c", "2", "-I", &b_if, &ADDRESS.to_string()],
    );
    // The idle client knows nothing of it: its connection stays up.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "the client's connection ended by itself"
    );
    assert!(established(&client).contains(&format!(":{port}")));
    // B's tickle resets it.
    let conn = (
        SocketAddrV4::new(ADDRESS, PORT),
        SocketAddrV4::new(Ipv4Addr::new(10, 79, 7, 100), port),
    );
    let sent = Link::within(&b, move || {
        bootpool::service::tickle::send(&[conn]).unwrap()
    });
    assert_eq!(sent, 1);
    let ended = poll_until(Duration::from_secs(30), Duration::from_millis(50), || {
        child.0.try_wait().unwrap().is_some()
    });
    assert!(ended, "the client's connection outlived the tickle");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(rest.trim(), "reset");
    assert!(!established(&client).contains(&format!(":{port}")));
    drop(held);
}

/// A child process killed when the test ends, also when it fails (a client left waiting
/// would hold the test's output open).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Deletes a namespace the test made, also when it fails.
struct Namespace(String);

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

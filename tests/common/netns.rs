//! Two network namespaces joined by a veth pair, for tests that need a real broadcast link
//! (DHCP clients). Names are unique per process and call; dropping the `Link` deletes both
//! namespaces (and with them the veth pair), also when the test fails.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct Link {
    pub server_ns: String,
    pub client_ns: String,
    /// The server's end of the veth pair (inside `server_ns`).
    pub server_if: String,
    /// The client's end (inside `client_ns`).
    pub client_if: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Link {
    /// Creates the namespaces and the pair; the server end gets `server_cidr` (e.g.
    /// `10.77.1.1/24`), the client end no address.
    pub fn new(server_cidr: &str) -> Link {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}{}", std::process::id(), n);
        let link = Link {
            server_ns: format!("bp-s{tag}"),
            client_ns: format!("bp-c{tag}"),
            // Interface names are at most 15 bytes.
            server_if: format!("bs{tag}"),
            client_if: format!("bc{tag}"),
        };
        // The guard exists before the first command, so a failure half way still cleans up.
        ip(&["netns", "add", &link.server_ns]);
        ip(&["netns", "add", &link.client_ns]);
        ip(&[
            "link",
            "add",
            &link.server_if,
            "netns",
            &link.server_ns,
            "type",
            "veth",
            "peer",
            "name",
            &link.client_if,
            "netns",
            &link.client_ns,
        ]);
        link.in_server(&["ip", "addr", "add", server_cidr, "dev", &link.server_if]);
        link.in_server(&["ip", "link", "set", "lo", "up"]);
        link.in_server(&["ip", "link", "set", &link.server_if, "up"]);
        link.in_client(&["ip", "link", "set", "lo", "up"]);
        link.in_client(&["ip", "link", "set", &link.client_if, "up"]);
        link
    }

    fn exec(ns: &str, args: &[&str]) {
        let mut full = vec!["netns", "exec", ns];
        full.extend_from_slice(args);
        ip(&full);
    }

    pub fn in_server(&self, args: &[&str]) {
        Self::exec(&self.server_ns, args);
    }

    pub fn in_client(&self, args: &[&str]) {
        Self::exec(&self.client_ns, args);
    }

    /// Gives the client end another MAC (the link goes down and up around it).
    pub fn set_client_mac(&self, mac: &str) {
        self.in_client(&["ip", "link", "set", &self.client_if, "down"]);
        self.in_client(&["ip", "link", "set", &self.client_if, "address", mac]);
        self.in_client(&["ip", "link", "set", &self.client_if, "up"]);
    }

    /// A command that runs `program args` inside the server or client namespace.
    pub fn command(ns: &str, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, program]).args(args);
        c
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        for ns in [&self.server_ns, &self.client_ns] {
            let _ = Command::new("ip")
                .args(["netns", "delete", ns])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

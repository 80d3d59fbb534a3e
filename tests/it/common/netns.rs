//! Two network namespaces joined by a veth pair, for tests that need a real broadcast link
//! (DHCP clients), or by several veths and a switch (a server with several NICs on one
//! subnet), or a server and a room on two segments with a router namespace between them (a
//! room behind a DHCP relay). Names are unique per process and call; dropping the `Link`
//! deletes its namespaces (and with them the veths), also when the test fails.

use super::Fixture;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct Link {
    pub server_ns: String,
    pub client_ns: String,
    /// The server's end of the veth pair (inside `server_ns`).
    pub server_if: String,
    /// The client's end (inside `client_ns`).
    pub client_if: String,
    /// Every server link: `server_if`, then those of `Link::switched`.
    pub server_ifs: Vec<String>,
    /// The router between the two, for `Link::routed`.
    pub router: Option<Router>,
}

/// A namespace on the server's segment (`up`) and on the room's (`down`), forwarding between
/// them: where a room's DHCP relay runs.
pub struct Router {
    pub ns: String,
    /// Its interface on the server's segment.
    pub up: String,
    /// Its interface on the room's segment.
    pub down: String,
    /// A third segment's namespace and its interface there (`Link::add_site`): where the
    /// site's own DHCP server runs.
    pub site: Option<(String, String)>,
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
        let tag = tag();
        let link = Link::named(&tag, format!("bc{tag}"), vec![format!("bs{tag}")]);
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

    /// A server with one link (veth) per address of `server_cidrs`, all on one subnet, whose
    /// other ends are ports of a bridge in the client's namespace: a server's NICs on one
    /// switch. The bridge is `client_if`. No policy routing: the server's routing table sends
    /// everything for the subnet out of its first link.
    pub fn switched(server_cidrs: &[&str]) -> Link {
        let tag = tag();
        let ifs = (0..server_cidrs.len())
            .map(|k| match k {
                0 => format!("bs{tag}"),
                k => format!("bs{tag}x{k}"),
            })
            .collect();
        let link = Link::named(&tag, format!("bb{tag}"), ifs);
        ip(&["netns", "add", &link.server_ns]);
        ip(&["netns", "add", &link.client_ns]);
        let bridge = &link.client_if;
        link.in_client(&["ip", "link", "add", bridge, "type", "bridge"]);
        for (k, (dev, cidr)) in link.server_ifs.iter().zip(server_cidrs).enumerate() {
            let port = format!("bc{tag}x{k}");
            let (s, c) = (&link.server_ns, &link.client_ns);
            ip(&[
                "link", "add", dev, "netns", s, "type", "veth", "peer", "name", &port, "netns", c,
            ]);
            link.in_client(&["ip", "link", "set", &port, "master", bridge]);
            link.in_client(&["ip", "link", "set", &port, "up"]);
            link.in_server(&["ip", "addr", "add", cidr, "dev", dev]);
            link.in_server(&["ip", "link", "set", dev, "up"]);
        }
        link.in_server(&["ip", "link", "set", "lo", "up"]);
        link.in_client(&["ip", "link", "set", "lo", "up"]);
        link.in_client(&["ip", "link", "set", bridge, "up"]);
        link
    }

    /// A server at `server_cidr` on one segment, a room (the client's end, no address) on
    /// another, and a router between them at `up_cidr` on the server's segment (the server's
    /// default route) and `down_cidr` on the room's, forwarding IPv4.
    pub fn routed(server_cidr: &str, up_cidr: &str, down_cidr: &str) -> Link {
        let tag = tag();
        let mut link = Link::named(&tag, format!("bc{tag}"), vec![format!("bs{tag}")]);
        let router = Router {
            ns: format!("bp-r{tag}"),
            up: format!("br{tag}u"),
            down: format!("br{tag}d"),
            site: None,
        };
        let r = router.ns.clone();
        link.router = Some(router);
        let router = link.router.as_ref().unwrap();
        for ns in [&link.server_ns, &r, &link.client_ns] {
            ip(&["netns", "add", ns]);
            Self::exec(ns, &["ip", "link", "set", "lo", "up"]);
        }
        let (s, c) = (&link.server_ns, &link.client_ns);
        ip(&[
            "link",
            "add",
            &link.server_if,
            "netns",
            s,
            "type",
            "veth",
            "peer",
            "name",
            &router.up,
            "netns",
            &r,
        ]);
        ip(&[
            "link",
            "add",
            &router.down,
            "netns",
            &r,
            "type",
            "veth",
            "peer",
            "name",
            &link.client_if,
            "netns",
            c,
        ]);
        link.in_server(&["ip", "addr", "add", server_cidr, "dev", &link.server_if]);
        link.in_server(&["ip", "link", "set", &link.server_if, "up"]);
        let gateway = up_cidr.split('/').next().unwrap();
        link.in_server(&["ip", "route", "add", "default", "via", gateway]);
        for (cidr, dev) in [(up_cidr, &router.up), (down_cidr, &router.down)] {
            Self::exec(&r, &["ip", "addr", "add", cidr, "dev", dev]);
            Self::exec(&r, &["ip", "link", "set", dev, "up"]);
        }
        Self::exec(&r, &["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]);
        link.in_client(&["ip", "link", "set", &link.client_if, "up"]);
        link
    }

    /// A third segment behind the router of `Link::routed`: a namespace (`Router::site`) whose
    /// interface has `site_cidr` and routes through the router's end, at `router_cidr`.
    /// Returns the router's interface on it.
    pub fn add_site(&mut self, router_cidr: &str, site_cidr: &str) -> String {
        let tag = tag();
        let router = self.router.as_mut().expect("a routed link");
        let (ns, dev, peer) = (
            format!("bp-d{tag}"),
            format!("bd{tag}"),
            format!("br{tag}s"),
        );
        router.site = Some((ns.clone(), dev.clone()));
        ip(&["netns", "add", &ns]);
        ip(&[
            "link", "add", &peer, "netns", &router.ns, "type", "veth", "peer", "name", &dev,
            "netns", &ns,
        ]);
        Self::exec(
            &router.ns,
            &["ip", "addr", "add", router_cidr, "dev", &peer],
        );
        Self::exec(&router.ns, &["ip", "link", "set", &peer, "up"]);
        let gateway = router_cidr.split('/').next().unwrap();
        Self::exec(&ns, &["ip", "link", "set", "lo", "up"]);
        Self::exec(&ns, &["ip", "addr", "add", site_cidr, "dev", &dev]);
        Self::exec(&ns, &["ip", "link", "set", &dev, "up"]);
        Self::exec(&ns, &["ip", "route", "add", "default", "via", gateway]);
        peer
    }

    /// Interface names are at most 15 bytes: `tag` is the process and a counter.
    fn named(tag: &str, client_if: String, server_ifs: Vec<String>) -> Link {
        Link {
            server_ns: format!("bp-s{tag}"),
            client_ns: format!("bp-c{tag}"),
            server_if: server_ifs[0].clone(),
            client_if,
            server_ifs,
            router: None,
        }
    }

    /// Bytes each of the server's links has sent (its egress counter).
    pub fn server_tx_bytes(&self) -> Vec<u64> {
        let (ok, text, err) = super::run(
            &mut Link::command(&self.server_ns, "cat", &["/proc/net/dev"]),
            10,
        );
        assert!(ok, "{err}");
        self.server_ifs
            .iter()
            .map(|dev| {
                text.lines()
                    .find_map(|l| {
                        let (name, rest) = l.split_once(':')?;
                        (name.trim() == dev).then_some(rest)
                    })
                    // Receive has 8 fields; the 9th is bytes sent.
                    .and_then(|rest| rest.split_whitespace().nth(8)?.parse().ok())
                    .unwrap_or_else(|| panic!("no {dev} in /proc/net/dev:\n{text}"))
            })
            .collect()
    }

    pub fn exec(ns: &str, args: &[&str]) {
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

    /// Runs busybox udhcpc on the client end as `mac` (files in `dir`); returns the fields of
    /// its `bound` line (`bound IP MASK ROUTER DNS`), or `None` if it got no lease. With
    /// `configure`, the address is also put on the client end (and any old one removed).
    pub fn udhcpc(&self, dir: &std::path::Path, mac: &str, configure: bool) -> Option<Vec<String>> {
        let bound = self.udhcpc_line(dir, mac, "$ip $subnet $router $dns", configure, &[])?;
        Some(bound.split(' ').map(str::to_string).collect())
    }

    /// As `udhcpc`, sending the `extra` arguments too: the `bound` line its script echoed,
    /// `bound ` followed by `fields` (shell text over udhcpc's variables).
    pub fn udhcpc_line(
        &self,
        dir: &std::path::Path,
        mac: &str,
        fields: &str,
        configure: bool,
        extra: &[&str],
    ) -> Option<String> {
        self.set_client_mac(mac);
        let out = dir.join("udhcpc.out");
        let _ = std::fs::remove_file(&out);
        let script = dir.join("udhcpc.sh");
        let set = if configure {
            "[ \"$1\" = bound ] && ip addr flush dev $interface && ip addr add $ip/24 dev $interface\n"
        } else {
            ""
        };
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho \"$1 {fields}\" >> {}\n{set}",
                out.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let script = script.to_str().unwrap();
        let mut args = vec![
            "udhcpc",
            "-i",
            &self.client_if,
            "-f",
            "-q",
            "-n",
            "-t",
            "3",
            "-T",
            "1",
            "-s",
            script,
        ];
        args.extend_from_slice(extra);
        super::run(&mut Link::command(&self.client_ns, "busybox", &args), 20);
        let said = std::fs::read_to_string(&out).unwrap_or_default();
        said.lines()
            .find(|l| l.starts_with("bound "))
            .map(str::to_string)
    }

    /// Runs ISC dhclient on the client end with `flags` before its own (`-6` for DHCPv6), the
    /// config `conf` and a script whose body is `script` (shell; `$OUT` is the file it may
    /// append to), all in `dir`. dhclient runs in the foreground (`-d`), so the caller owns the
    /// one process, stopped once the script wrote a line starting with `done` (or dhclient
    /// gave up). Returns that line, or dhclient's log as the error.
    pub fn dhclient(
        &self,
        dir: &std::path::Path,
        flags: &[&str],
        conf: &str,
        script: &str,
        done: &str,
    ) -> Result<String, String> {
        std::fs::create_dir_all(dir).unwrap();
        let out = dir.join("script.out");
        let path = dir.join("script.sh");
        std::fs::write(
            &path,
            format!("#!/bin/sh\nOUT={}\n{script}\nexit 0\n", out.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.join("dhclient.conf"), conf).unwrap();
        let file = |name: &str| dir.join(name).to_str().unwrap().to_string();
        let log = dir.join("dhclient.log");
        let mut args: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        for (flag, name) in [
            ("-cf", "dhclient.conf"),
            ("-sf", "script.sh"),
            ("-pf", "dhclient.pid"),
            ("-lf", "dhclient.leases"),
        ] {
            args.push(flag.into());
            args.push(file(name));
        }
        args.push(self.client_if.clone());
        let args: Vec<&str> = ["-d", "-1", "-v"]
            .into_iter()
            .chain(args.iter().map(String::as_str))
            .collect();
        let mut child = Link::command(&self.client_ns, "dhclient", &args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("dhclient runs");
        let mut line = None;
        for _ in 0..400 {
            let said = std::fs::read_to_string(&out).unwrap_or_default();
            line = said
                .lines()
                .find(|l| l.starts_with(done))
                .map(str::to_string);
            if line.is_some() || child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // `ip netns exec` execs dhclient, so this is dhclient itself.
        let _ = child.kill();
        let _ = child.wait();
        line.ok_or_else(|| std::fs::read_to_string(&log).unwrap_or_default())
    }

    /// Runs `f` on a thread inside namespace `ns` (sockets it opens live there).
    pub fn within<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{ns}");
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            let file = std::fs::File::open(&path).unwrap();
            // SAFETY: setns on a descriptor we own; it moves only this new thread.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap()
    }

    /// The figure of the series `series` (`name{labels}`, labels as served) on the /metrics
    /// page at `http` (`ADDR:PORT`), read from the server's namespace.
    pub fn metric(&self, http: &str, series: &str) -> u64 {
        let url = format!("http://{http}/metrics");
        let (ok, text, err) = super::run(
            &mut Link::command(&self.server_ns, "curl", &["-s", &url]),
            30,
        );
        assert!(ok, "{err}");
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
    }

    /// A command that runs `program args` inside the server or client namespace.
    pub fn command(ns: &str, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, program]).args(args);
        c
    }
}

fn tag() -> String {
    format!(
        "{}{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

impl Drop for Link {
    fn drop(&mut self) {
        let router = self.router.as_ref().map(|r| &r.ns);
        let site = self
            .router
            .as_ref()
            .and_then(|r| r.site.as_ref())
            .map(|s| &s.0);
        for ns in [&self.server_ns, &self.client_ns]
            .into_iter()
            .chain(router)
            .chain(site)
        {
            let _ = Command::new("ip")
                .args(["netns", "delete", ns])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The daemon binary running in the server namespace; killed with SIGKILL when dropped.
pub struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    pub fn start(link: &Link, fx: &Fixture, n: u32) -> Daemon {
        let program = env!("CARGO_BIN_EXE_bootpool");
        Daemon::spawn(Link::command(&link.server_ns, program, &[]), fx, n)
    }

    /// The daemon binary in the test's own namespace (a loopback fixture's server).
    pub fn on_host(fx: &Fixture, n: u32) -> Daemon {
        Daemon::spawn(Command::new(env!("CARGO_BIN_EXE_bootpool")), fx, n)
    }

    /// As `start`, but entering the namespace without remounting /sys for it (`nsenter`, as
    /// the storm runs its server): sysfs then describes none of the namespace's links, so
    /// a veth's nominal kernel speed (10 Gbit/s) is not read and `server.link_speeds` gives
    /// each link's capacity.
    pub fn start_without_sysfs(link: &Link, fx: &Fixture, n: u32) -> Daemon {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", link.server_ns))
            .arg(env!("CARGO_BIN_EXE_bootpool"));
        Daemon::spawn(c, fx, n)
    }

    fn spawn(mut command: Command, fx: &Fixture, n: u32) -> Daemon {
        let log = fx.path().join(format!("daemon-{n}.log"));
        let config = fx.config_path();
        let child = command
            .args(["serve", "--config", config.to_str().unwrap()])
            .env("BOOTPOOL_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("bootpool runs");
        let mut d = Daemon { child, log };
        for _ in 0..200 {
            if d.log_text().contains("bootpool serving") {
                return d;
            }
            if let Ok(Some(status)) = d.child.try_wait() {
                panic!("bootpool exited ({status}):\n{}", d.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("bootpool did not start:\n{}", d.log_text());
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A figure of the daemon's `/proc/PID/status` (`VmRSS` in KiB, `Threads`).
    pub fn status(&self, field: &str) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in:\n{text}"))
    }

    /// kill -9: no chance to save anything on the way out.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

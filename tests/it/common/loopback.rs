//! The config the in-process tests serve, `tests/fixtures/loopback.yaml`, and the small edits
//! tests make to it. Each edit names what it changes and fails if the text it changes is not
//! there, so a change to the fixture cannot turn an edit into a silent no-op.

use std::ops::Deref;

/// Server on 127.0.0.1 with every port 0 (the daemon picks), image `demo` served from disk,
/// pools `nfs-room` (MACs 52:54:00:77:00:00-0f) and `nbd-room` (..:10-1f).
pub const TEXT: &str = include_str!("../../fixtures/loopback.yaml");

/// The loopback config, edited. It reads as the YAML text (`&*config` is a `&str`).
#[derive(Clone, Debug)]
pub struct Loopback(String);

impl Default for Loopback {
    fn default() -> Loopback {
        Loopback(TEXT.to_string())
    }
}

impl Deref for Loopback {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Loopback {
    /// Replaces the one occurrence of `from`.
    fn replace(mut self, from: &str, to: &str) -> Loopback {
        assert_eq!(
            self.0.matches(from).count(),
            1,
            "the config should hold {from:?} once:\n{}",
            self.0
        );
        self.0 = self.0.replacen(from, to, 1);
        self
    }

    /// Inserts `lines` after the line `anchor` (whole lines, newline included).
    fn after(self, anchor: &str, lines: &str) -> Loopback {
        self.replace(anchor, &format!("{anchor}{lines}"))
    }

    /// Indents each line of `keys` by `by` spaces.
    fn indent(keys: &str, by: usize) -> String {
        keys.lines().map(|l| format!("{:by$}{l}\n", "")).collect()
    }

    /// Adds `keys` (YAML lines, unindented) to the `server` section.
    pub fn server(self, keys: &str) -> Loopback {
        self.after("  loaders: loaders/\n", &Loopback::indent(keys, 2))
    }

    /// The server's own address.
    pub fn address(self, ip: &str) -> Loopback {
        self.replace("  address: 127.0.0.1\n", &format!("  address: {ip}\n"))
    }

    /// Replaces the one line that starts with `start` by `line` (newline included).
    fn line(self, start: &str, line: &str) -> Loopback {
        let old = self
            .lines()
            .filter(|l| l.starts_with(start))
            .map(|l| format!("{l}\n"))
            .collect::<Vec<_>>();
        assert_eq!(
            old.len(),
            1,
            "one line should start with {start:?}:\n{}",
            self.0
        );
        self.replace(&old[0], line)
    }

    /// The HTTP listener.
    pub fn http(self, listen: &str) -> Loopback {
        self.line("  http: ", &format!("  http: {listen}\n"))
    }

    /// A fixed port for `service` (`dhcp`, `tftp`, `nfs`, `nbd`, `portmap`: 0 in the
    /// fixture), or a port for one the fixture does not listen on (`console`).
    pub fn port(self, service: &str, port: u16) -> Loopback {
        let zero = format!(" {service}: 0");
        if self.contains(&zero) {
            self.replace(&zero, &format!(" {service}: {port}"))
        } else {
            self.replace(
                " portmap: 0 }",
                &format!(" portmap: 0, {service}: {port} }}"),
            )
        }
    }

    /// A server on `NET.1` of the /24 `NET` (e.g. `10.77.0`) and not on loopback, leasing
    /// `NET.100` to `NET.199`.
    pub fn subnet(self, net: &str) -> Loopback {
        self.address(&format!("{net}.1"))
            .replace(
                "  subnet: 127.0.0.0/8\n",
                &format!("  subnet: {net}.0/24\n"),
            )
            .range(&format!("{net}.100-{net}.199"))
    }

    /// The clients' network (`dhcp.subnet`), when it is not a /24 (`subnet`).
    pub fn network(self, cidr: &str) -> Loopback {
        self.line("  subnet: ", &format!("  subnet: {cidr}\n"))
    }

    /// The `dhcp` section's one subnet (its `subnet` and `range` lines) as the first entry of
    /// the list `dhcp.subnets`, followed by `more` (list entries, unindented).
    pub fn more_subnets(self, more: &str) -> Loopback {
        let value = |key: &str| {
            let start = format!("  {key}: ");
            let line = self.lines().find(|l| l.starts_with(&start)).expect(key);
            line[start.len()..].to_string()
        };
        // In proxy mode the subnet has no range (`proxy`).
        let has_range = self.lines().any(|l| l.starts_with("  range: "));
        let range = if has_range {
            format!(", range: {}", value("range"))
        } else {
            String::new()
        };
        let first = format!("- {{ subnet: {}{range} }}\n{more}", value("subnet"));
        let without = self.line("  subnet: ", "");
        let without = if has_range {
            without.line("  range: ", "")
        } else {
            without
        };
        without.dhcp(&format!("subnets:\n{}", Loopback::indent(&first, 2)))
    }

    /// DHCP in proxy mode: beside another server that gives the addresses (so no range, which
    /// proxy mode refuses).
    pub fn proxy(self) -> Loopback {
        self.replace("  mode: authoritative\n", "  mode: proxy\n")
            .line("  range: ", "")
    }

    /// The DHCP range.
    pub fn range(self, range: &str) -> Loopback {
        self.line("  range: ", &format!("  range: {range}\n"))
    }

    /// A server in a network namespace on the veth `iface` (`netns::Link`), at `NET.1` of
    /// the /24 `NET`, leasing `NET.100` to `NET.150`, DHCP on port 67.
    pub fn on_veth(self, net: &str, iface: &str) -> Loopback {
        self.subnet(net)
            .range(&format!("{net}.100-{net}.150"))
            .interfaces(iface)
            .port("dhcp", 67)
    }

    /// TFTP, NFS, NBD and portmap on their own ports (69, 2049, 10809, 111).
    pub fn standard_ports(self) -> Loopback {
        self.port("tftp", 69)
            .port("nfs", 2049)
            .port("nbd", 10809)
            .port("portmap", 111)
    }

    /// Adds `keys` (YAML lines, unindented) to the `dhcp` section.
    pub fn dhcp(self, keys: &str) -> Loopback {
        self.after("  lease: 1h\n", &Loopback::indent(keys, 2))
    }

    /// The server's interfaces (`server.interfaces`).
    pub fn interfaces(self, ifs: &str) -> Loopback {
        let address = self
            .lines()
            .find(|l| l.starts_with("  address: "))
            .expect("server.address")
            .to_string()
            + "\n";
        self.after(&address, &format!("  interfaces: [{ifs}]\n"))
    }

    /// The `demo` image's keys besides its folder (`store: disk` in the fixture).
    pub fn demo(self, keys: &str) -> Loopback {
        self.demo_entry(&format!("  demo: {{ dir: images/demo, {keys} }}\n"))
    }

    /// The `demo` image's whole entry in `images`, as YAML lines indented as they stand.
    pub fn demo_entry(self, entry: &str) -> Loopback {
        self.replace("  demo: { dir: images/demo, store: disk }\n", entry)
    }

    /// More images (`NAME: { ... }` lines, unindented) after `demo`.
    pub fn images(self, entries: &str) -> Loopback {
        let demo = self
            .lines()
            .skip_while(|l| *l != "images:")
            .nth(1)
            .expect("an image after images:")
            .to_string()
            + "\n";
        assert!(demo.starts_with("  demo:"), "{demo}");
        self.after(&demo, &Loopback::indent(entries, 2))
    }

    /// Adds `keys` (unindented) to pool `pool`, right after its `root` line, so the lines of
    /// the rest of the pool move down by as many lines.
    pub fn pool(self, pool: &str, keys: &str) -> Loopback {
        let header = format!("  {pool}:\n    image: demo\n");
        let root = self.0[self.0.find(&header).expect("the pool") + header.len()..]
            .lines()
            .next()
            .filter(|l| l.starts_with("    root: "))
            .expect("the pool's root line")
            .to_string();
        self.after(&format!("{header}{root}\n"), &Loopback::indent(keys, 4))
    }

    /// Pool `pool`'s lines (from its name to the next pool's), and where they start.
    fn pool_lines(&self, pool: &str) -> (usize, String) {
        let header = format!("  {pool}:\n");
        let at = self.0.find(&header).expect("the pool");
        let lines: String = self.0[at..]
            .split_inclusive('\n')
            .enumerate()
            .take_while(|(i, l)| *i == 0 || l.starts_with("    "))
            .map(|(_, l)| l)
            .collect();
        (at, lines)
    }

    /// The config without pool `pool`.
    pub fn without_pool(mut self, pool: &str) -> Loopback {
        let (at, lines) = self.pool_lines(pool);
        self.0.replace_range(at..at + lines.len(), "");
        self
    }

    /// Pool `pool`'s clients instead of the fixture's (`- { ... }` lines, unindented).
    pub fn clients(mut self, pool: &str, entries: &str) -> Loopback {
        let (at, lines) = self.pool_lines(pool);
        let kept: String = lines
            .split_inclusive('\n')
            .filter(|l| !l.starts_with("      "))
            .collect();
        assert!(kept.ends_with("    clients:\n"), "{lines}");
        let new = kept + &Loopback::indent(entries, 6);
        self.0.replace_range(at..at + lines.len(), &new);
        self
    }

    /// Gives 127.0.0.1 to `mac` in `nfs-room` (a fixed-address client), the server taking
    /// 127.0.0.2: a client's ip may not be the server's own (the server's sockets listen on
    /// every address, the test's client is 127.0.0.1).
    pub fn reserving_127_0_0_1(self, mac: &str) -> Loopback {
        let clients = "      - { macs: \"52:54:00:77:00:00-52:54:00:77:00:0f\" }\n";
        self.address("127.0.0.2").after(
            clients,
            &format!("      - {{ mac: \"{mac}\", ip: 127.0.0.1 }}\n"),
        )
    }

    /// Appends a top-level section (`limits:` and its keys).
    pub fn section(mut self, text: &str) -> Loopback {
        assert!(text.ends_with('\n'), "{text:?}");
        self.0.push_str(text);
        self
    }
}

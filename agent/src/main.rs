//! `bootpool-agent`: the command line (usage, exit codes) around the library's `start`; it
//! then serves until killed, logging to stderr.

use bootpool_agent::{Listen, start_sharing};
use std::process::ExitCode;

const USAGE: &str = "\
usage: bootpool-agent [--listen ADDRESS:PORT | --unix PATH] [--name NAME]
                      [--peers ADDRESS:PORT] [--source URL]... [URL[,URL]...]...

Serves a bootpool NBD root as a read-only NBD export on a local socket. Each URL is
the root's block manifest on one server, http://SERVER[:PORT]/boot/IMAGE/blocks/DIGEST,
DIGEST its SHA-256 (the same on every server). URLs come as arguments, as --source
options, or as comma lists (the kernel's bootpool.blocks=URL1,URL2 passed as it is).

Every chunk of the root is fetched when a read first needs it, checked against the
manifest, and kept in memory. Fetches go to the server that answered last; one that
fails there (connection refused or reset, 2 s without a byte, an HTTP error, a chunk
that does not match the manifest) goes to the next server at once, logged. A read
waits while the servers fail; it fails with EIO only when every server refused the
chunk 5 times (they answer, wrongly), or when none gave it anything for 60 s.

options:
  --source URL           a server's manifest URL (repeat for more, in order)
  --listen ADDRESS:PORT  TCP address to serve on (default 127.0.0.1:10809)
  --unix PATH            serve on a Unix socket at PATH instead
  --name NAME            the export's name (default `root`; \"\" is accepted too)
  --peers ADDRESS:PORT   share with the room: ask the server's tracker where a chunk
                         is, fetch it from the peers it names first (the servers last),
                         and serve the chunks held to those peers on ADDRESS:PORT
  -h, --help             this text
  -V, --version          the version

exit status: 0 never (it serves until killed), 1 when the manifest cannot be had or
the socket cannot be bound, 2 on a usage error.
";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut listen, mut name, mut urls) = (None, "root".to_string(), Vec::<String>::new());
    let mut peers = None;
    let usage = |msg: String| {
        eprintln!("bootpool-agent: {msg}\n\n{USAGE}");
        ExitCode::from(2)
    };
    while let Some(a) = args.next() {
        let mut value = |key: &str| args.next().ok_or(format!("{key} needs a value"));
        match a.as_str() {
            "-h" | "--help" => {
                print!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            "-V" | "--version" => {
                println!("bootpool-agent {}", env!("CARGO_PKG_VERSION"));
                return ExitCode::SUCCESS;
            }
            "--listen" => match value(&a).map(|v| (v.parse(), v)) {
                Ok((Ok(addr), _)) => listen = Some(Listen::Tcp(addr)),
                Ok((Err(_), v)) => return usage(format!("--listen `{v}` is not ADDRESS:PORT")),
                Err(e) => return usage(e),
            },
            "--peers" => match value(&a).map(|v| (v.parse(), v)) {
                Ok((Ok(addr), _)) => peers = Some(addr),
                Ok((Err(_), v)) => return usage(format!("--peers `{v}` is not ADDRESS:PORT")),
                Err(e) => return usage(e),
            },
            "--unix" => match value(&a) {
                Ok(v) => listen = Some(Listen::Unix(v.into())),
                Err(e) => return usage(e),
            },
            "--source" => match value(&a) {
                Ok(v) => urls.push(v),
                Err(e) => return usage(e),
            },
            "--name" => match value(&a) {
                Ok(v) => name = v,
                Err(e) => return usage(e),
            },
            flag if flag.starts_with('-') => return usage(format!("unknown option {flag}")),
            _ => urls.push(a),
        }
    }
    if urls.iter().all(|u| u.split(',').all(str::is_empty)) {
        return usage("no URL given".into());
    }
    let listen =
        listen.unwrap_or_else(|| Listen::Tcp(std::net::SocketAddr::from(([127, 0, 0, 1], 10809))));
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    match start_sharing(&urls, &listen, &name, peers) {
        Ok(agent) => {
            let b = &agent.store.blocks;
            let at = match (&listen, agent.tcp) {
                (_, Some(addr)) => addr.to_string(),
                (Listen::Unix(p), None) => p.display().to_string(),
                (Listen::Tcp(a), None) => a.to_string(),
            };
            let from: Vec<&str> = agent
                .store
                .sources
                .list
                .iter()
                .map(|s| s.url.authority.as_str())
                .collect();
            eprintln!(
                "bootpool-agent: serving `{name}` ({} bytes, {} chunks of {}) on {at} from {}",
                b.size,
                b.digests.len(),
                b.chunk,
                from.join(", ")
            );
            if let Some(p) = agent.peers {
                eprintln!("bootpool-agent: serving the room's peers on {p}");
            }
            loop {
                std::thread::park();
            }
        }
        Err(e) => {
            eprintln!("bootpool-agent: {e}");
            ExitCode::from(1)
        }
    }
}

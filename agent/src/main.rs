//! `bootpool-agent`: the command line (usage, exit codes) around the library's `start`; it
//! then serves until killed, logging to stderr.

use bootpool_agent::{Listen, start};
use std::process::ExitCode;

const USAGE: &str = "\
usage: bootpool-agent [--listen ADDRESS:PORT | --unix PATH] [--name NAME] URL

Serves a bootpool NBD root as a read-only NBD export on a local socket. URL is the
root's block manifest, http://SERVER[:PORT]/boot/IMAGE/blocks/DIGEST, DIGEST its
SHA-256. Every chunk of the root is fetched from SERVER when a read first needs it,
checked against the manifest (a chunk that does not match is refused and fetched
again, up to 5 times, then the read fails with EIO), and kept in memory.

options:
  --listen ADDRESS:PORT  TCP address to serve on (default 127.0.0.1:10809)
  --unix PATH            serve on a Unix socket at PATH instead
  --name NAME            the export's name (default `root`; \"\" is accepted too)
  -h, --help             this text
  -V, --version          the version

exit status: 0 never (it serves until killed), 1 when the manifest cannot be had or
the socket cannot be bound, 2 on a usage error.
";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut listen, mut name, mut url) = (None, "root".to_string(), None);
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
            "--unix" => match value(&a) {
                Ok(v) => listen = Some(Listen::Unix(v.into())),
                Err(e) => return usage(e),
            },
            "--name" => match value(&a) {
                Ok(v) => name = v,
                Err(e) => return usage(e),
            },
            flag if flag.starts_with('-') => return usage(format!("unknown option {flag}")),
            _ if url.is_some() => return usage(format!("one URL only, and `{a}` is a second")),
            _ => url = Some(a),
        }
    }
    let Some(url) = url else {
        return usage("no URL given".into());
    };
    let listen =
        listen.unwrap_or_else(|| Listen::Tcp(std::net::SocketAddr::from(([127, 0, 0, 1], 10809))));
    match start(&url, &listen, &name) {
        Ok(agent) => {
            let b = &agent.store.blocks;
            let at = match (&listen, agent.tcp) {
                (_, Some(addr)) => addr.to_string(),
                (Listen::Unix(p), None) => p.display().to_string(),
                (Listen::Tcp(a), None) => a.to_string(),
            };
            eprintln!(
                "bootpool-agent: serving `{name}` ({} bytes, {} chunks of {}) on {at}",
                b.size,
                b.digests.len(),
                b.chunk
            );
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

//! The daemons a lab run starts: which `bootpool` binary, `bootpool serve` started (in the
//! lab's namespace or a member's) and waited for until its API answers, killed when the lab
//! ends; and the boots the lab reads from their APIs.

use super::net::dies_with_lab;
use super::room2;
use super::wire_wait;
use anyhow::{Context, bail};
use bootpool::record::view::BootView;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A daemon's API: its address and the query its reads carry (`?token=` its read token, for
/// a server whose clients' subnet the lab reads from).
pub(super) type Api = (SocketAddr, String);

/// The daemons whose boots the lab reads: the live ones' APIs, and the boots read last from
/// a member that has died since (`--kill-member-after`), whose API no longer answers.
pub(super) struct Apis {
    live: Vec<Api>,
    kept: Vec<BootView>,
}

impl Apis {
    pub(super) fn new(live: Vec<Api>) -> Apis {
        Apis {
            live,
            kept: Vec::new(),
        }
    }

    /// Every boot the daemons give (a site's members each give the boots they recorded),
    /// oldest first; a boot both a live member and the kept ones hold counts once.
    pub(super) async fn boots(&self) -> anyhow::Result<Vec<BootView>> {
        let mut boots = self.kept.clone();
        for (api, query) in &self.live {
            let path = format!("/api/v1/boots{query}");
            let of: Vec<BootView> = serde_json::from_str(&http_get(*api, &path).await?)
                .with_context(|| format!("reading {api}'s /api/v1/boots"))?;
            for b in of {
                boots.retain(|k| (k.id, &k.mac, k.start) != (b.id, &b.mac, b.start));
                boots.push(b);
            }
        }
        boots.sort_by(|a, b| a.start.total_cmp(&b.start));
        Ok(boots)
    }

    /// Each live daemon's /metrics text, with the name of the run's file it is kept in
    /// (`metrics.txt`, then `metrics-2.txt`, ... in the order the daemons were given); a
    /// daemon that does not answer is left out.
    pub(super) async fn metrics(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (i, (api, query)) in self.live.iter().enumerate() {
            let name = match i {
                0 => "metrics.txt".to_string(),
                _ => format!("metrics-{}.txt", i + 1),
            };
            if let Ok(text) = http_get(*api, &format!("/metrics{query}")).await {
                out.push((name, text));
            }
        }
        out
    }

    /// Reads `api`'s boots a last time, keeps them, and asks it no more: its daemon is about
    /// to die.
    pub(super) async fn bury(&mut self, api: SocketAddr) -> anyhow::Result<()> {
        let Some(at) = self.live.iter().position(|(a, _)| *a == api) else {
            return Ok(());
        };
        let (_, query) = self.live.remove(at);
        let path = format!("/api/v1/boots{query}");
        let mut of: Vec<BootView> = serde_json::from_str(&http_get(api, &path).await?)
            .with_context(|| format!("reading {api}'s /api/v1/boots"))?;
        self.kept.append(&mut of);
        Ok(())
    }
}

/// The daemon the lab and the storm start: `bootpool` beside this binary (a build's
/// `target/release`, an install's bin folder), else the first in PATH.
pub fn daemon() -> PathBuf {
    let beside = std::env::current_exe().map(|me| me.with_file_name("bootpool"));
    match beside {
        Ok(path) if path.is_file() => path,
        _ => PathBuf::from("bootpool"),
    }
}

/// Kills the daemon when the lab ends, however it ends.
pub(super) struct Daemon(Child);

impl Daemon {
    /// SIGKILL, and waits for it: nothing of the daemon's shutdown runs.
    pub(super) fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // Already reaped (`kill`): its pid may belong to another process by now.
        if matches!(self.0.try_wait(), Ok(Some(_))) {
            return;
        }
        // SIGTERM first so the journal is flushed; then make sure.
        let _ = bootpool::sys::process::kill(self.0.id() as i32, libc::SIGTERM);
        for _ in 0..50 {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `bootpool serve` on `config` (as site member `member`, in namespace `ns`), its
/// output appended to the run's log (`bootpool.log`, member b's `bootpool-b.log`), and waits
/// until its API answers.
pub(super) async fn start_daemon(
    config: &std::path::Path,
    run_dir: &std::path::Path,
    (api, query): Api,
    member: Option<&str>,
    ns: Option<&room2::Netns>,
) -> anyhow::Result<Daemon> {
    let name = match member {
        Some("b") => "bootpool-b.log",
        _ => "bootpool.log",
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(run_dir.join(name))?;
    let program = daemon();
    let mut serve = match ns {
        Some(ns) => ns.command(&program.to_string_lossy(), &[]),
        None => Command::new(&program),
    };
    serve.arg("serve").arg("--config").arg(config);
    if let Some(m) = member {
        serve.args(["--member", m]);
    }
    serve
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    dies_with_lab(&mut serve, libc::SIGTERM);
    let mut daemon = Daemon(serve.spawn().context("starting bootpool serve")?);
    wait_for_api(api, &query, &mut daemon, &run_dir.join(name)).await?;
    wait_for_wire_copies(api, &query).await?;
    Ok(daemon)
}

/// Waits while an `initrd_wire: zstd` image's copy is being made (a first start takes
/// seconds), so that every client of the run gets the same initrd.
async fn wait_for_wire_copies(api: std::net::SocketAddr, query: &str) -> anyhow::Result<()> {
    let path = format!("/api/v1/images{query}");
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        wire_wait::wait_while_wire_pending("lab", &mut || handle.block_on(http_get(api, &path)))
    })
    .await?
}

async fn wait_for_api(
    api: std::net::SocketAddr,
    query: &str,
    daemon: &mut Daemon,
    log: &std::path::Path,
) -> anyhow::Result<()> {
    for _ in 0..150 {
        if http_get(api, &format!("/api/v1/boots{query}"))
            .await
            .is_ok()
        {
            return Ok(());
        }
        if let Ok(Some(status)) = daemon.0.try_wait() {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            bail!("bootpool serve exited ({status}):\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(20).collect();
    bail!(
        "bootpool serve did not answer on {api} within 15s; its log ends:\n{}",
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    )
}

/// A minimal HTTP/1.0 GET, enough for our own API inside the namespace.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        anyhow::Ok(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .context("HTTP GET timed out")??;
    let text = String::from_utf8(buf).context("HTTP reply is not UTF-8")?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("malformed HTTP reply")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!("GET {path}: {}", head.lines().next().unwrap_or(""));
    }
    Ok(body.to_string())
}

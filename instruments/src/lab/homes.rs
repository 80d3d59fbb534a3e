//! `bootpool lab --homes DIR`: the site's home server for the lab's room. nfs-ganesha runs in
//! the lab's namespace on the pools' `homes.server` address (added to the lab's bridge) and
//! exports DIR read-write over NFSv4 as their `homes.export`: the setup docs/homes.md gives
//! for a home server on the bootpool host, on an address of its own.

use anyhow::{Context as _, bail};
use bootpool::config::{Config, Pool};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long ganesha may take to listen.
const START_WITHIN: Duration = Duration::from_secs(30);

/// The running home server, stopped when dropped (and killed with the lab, however it ends).
pub struct HomeServer {
    child: Child,
    /// Where it serves, for the lab's log.
    pub summary: String,
}

impl Drop for HomeServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The one home export the booted pools name: (server address, export).
fn the_export(config: &Config, pools: &[&Arc<Pool>]) -> anyhow::Result<(Ipv4Addr, String)> {
    let mut named = pools
        .iter()
        .filter_map(|p| p.homes.as_ref().map(|h| (p, h)));
    let Some((first_pool, first)) = named.next() else {
        bail!("--homes: none of the pools the lab boots has `homes` (docs/homes.md)");
    };
    if let Some((pool, other)) =
        named.find(|(_, h)| (&h.server, &h.export) != (&first.server, &first.export))
    {
        bail!(
            "--homes serves one export; pool `{}` names {}:{} and pool `{}` {}:{}",
            first_pool.name,
            first.server,
            first.export,
            pool.name,
            other.server,
            other.export
        );
    }
    let subnet = config.dhcp.home().subnet;
    let server: Ipv4Addr = first.server.parse().map_err(|_| {
        anyhow::anyhow!(
            "--homes: pool `{}`'s homes server {} is not an IPv4 address; the lab serves homes on an address of its bridge",
            first_pool.name,
            first.server
        )
    })?;
    if !subnet.contains(server) || server == config.server.address {
        bail!(
            "--homes: the homes server {server} must be an address of {subnet} other than the server's own {}",
            config.server.address
        );
    }
    Ok((server, first.export.clone()))
}

/// ganesha's config: NFSv4 over TCP only (no portmapper: the daemon holds port 111), bound to
/// `address`, `folder` exported read-write as `export`, root squashed, no grace period (a lab
/// has no clients to recover).
pub fn ganesha_conf(address: Ipv4Addr, folder: &Path, export: &str, recovery: &Path) -> String {
    format!(
        "NFS_CORE_PARAM {{
    Protocols = 4;
    NFS_Port = 2049;
    Bind_addr = {address};
    Enable_NLM = false;
    Enable_RQUOTA = false;
}}
NFSv4 {{ Graceless = true; RecoveryBackend = fs; RecoveryRoot = \"{recovery}\"; }}
EXPORT {{
    Export_Id = 1;
    Path = \"{folder}\";
    Pseudo = \"{export}\";
    Protocols = 4;
    Transports = TCP;
    Access_Type = RW;
    Squash = Root_Squash;
    SecType = sys;
    FSAL {{ Name = VFS; }}
}}
LOG {{ Default_Log_Level = EVENT; }}
",
        recovery = recovery.display(),
        folder = folder.display(),
    )
}

/// Starts the home server for `pools` on `bridge`, its files in `run_dir`, and waits until it
/// listens.
pub fn start(
    folder: &Path,
    config: &Config,
    pools: &[&Arc<Pool>],
    bridge: &str,
    run_dir: &Path,
) -> anyhow::Result<HomeServer> {
    let (address, export) = the_export(config, pools)?;
    let folder: PathBuf =
        std::fs::canonicalize(folder).with_context(|| format!("--homes {}", folder.display()))?;
    if !folder.is_dir() {
        bail!("--homes {}: not a folder", folder.display());
    }
    let prefix = config.dhcp.home().subnet.prefix;
    super::net::ip(&["addr", "add", &format!("{address}/{prefix}"), "dev", bridge])?;
    let recovery = run_dir.join("homes-recovery");
    std::fs::create_dir_all(&recovery)?;
    let conf = run_dir.join("ganesha.conf");
    std::fs::write(&conf, ganesha_conf(address, &folder, &export, &recovery))?;
    let log = run_dir.join("ganesha.log");
    let out = std::fs::File::create(run_dir.join("ganesha.out"))?;
    // A private /run: ganesha writes its pid and socket files there.
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs tmpfs /run && exec ganesha.nfsd -F -f \"$1\" -L \"$2\" -p /run/ganesha.pid")
        .arg("sh")
        .arg(&conf)
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    super::net::dies_with_lab(&mut cmd, libc::SIGKILL);
    let mut child = cmd
        .spawn()
        .context("starting ganesha.nfsd (packages nfs-ganesha, nfs-ganesha-vfs)")?;
    let at = SocketAddr::from((address, 2049));
    let started = Instant::now();
    while TcpStream::connect_timeout(&at, Duration::from_millis(200)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            bail!(
                "ganesha.nfsd ended ({status}) before listening on {at}; see {}",
                log.display()
            );
        }
        if started.elapsed() > START_WITHIN {
            let _ = child.kill();
            bail!(
                "ganesha.nfsd did not listen on {at} within {START_WITHIN:?}; see {}",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(HomeServer {
        child,
        summary: format!(
            "homes: nfs-ganesha serves {} as {address}:{export} (NFSv4)",
            folder.display()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conf_binds_the_homes_address_and_exports_the_folder_as_the_pools_export() {
        let c = ganesha_conf(
            "10.77.0.2".parse().unwrap(),
            Path::new("/srv/h"),
            "/home",
            Path::new("/r"),
        );
        for line in [
            "Protocols = 4;",
            "Bind_addr = 10.77.0.2;",
            "Path = \"/srv/h\";",
            "Pseudo = \"/home\";",
            "Access_Type = RW;",
            "Squash = Root_Squash;",
            "RecoveryRoot = \"/r\";",
        ] {
            assert!(c.contains(line), "{line}\n{c}");
        }
    }
}

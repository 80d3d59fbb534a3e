//! The site's members in the lab (`--member`): a `bootpool serve --member NAME` in a network
//! namespace of its own, cabled to the room's bridge by an interface named as its config's
//! first `server.interfaces` (else `br0`), holding its `server.address`. With
//! `--kill-member-after`, both members run so, each with keepalived moving its address
//! (`failover`).

use super::daemon::{Api, Daemon, http_get, start_daemon};
use super::poweroff;
use super::room2::Netns;
use anyhow::Context as _;
use bootpool::config::Config;
use bootpool::record::view::BootView;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Child;

/// A member: its daemon, its keepalived, its namespace.
pub(super) struct Member {
    pub name: &'static str,
    /// Its API, where the lab reads its boots.
    pub api: SocketAddr,
    pub query: String,
    /// Its interface on the room's bridge, inside its namespace.
    pub interface: String,
    /// Its `server.address`, the one its clients are handed (and keepalived moves).
    pub address: Ipv4Addr,
    pub prefix: u8,
    /// Stopped before its namespace goes (fields drop in order).
    pub daemon: Daemon,
    pub keepalived: Option<Keepalived>,
    pub ns: Netns,
    served: poweroff::LabConfig,
}

impl Member {
    /// Member `name` serving `path` (with the lab's power-off argument added), cabled to
    /// `bridge` as `member-NAME`, holding its address and, if given, `own`, a fixed address
    /// of the host's (where keepalived's advertisements come from).
    pub(super) async fn start(
        name: &'static str,
        path: &Path,
        bridge: &str,
        run_dir: &Path,
        own: Option<Ipv4Addr>,
    ) -> anyhow::Result<Member> {
        let config = Config::load(path)?;
        let ns = Netns::new()?;
        let interface = config
            .server
            .interfaces
            .first()
            .cloned()
            .unwrap_or_else(|| "br0".into());
        let prefix = config.dhcp.home().subnet.prefix;
        let address = config.server.address;
        ns.cable(
            &format!("member-{name}"),
            bridge,
            &interface,
            address,
            prefix,
        )?;
        if let Some(own) = own {
            // keepalived later takes `address` away and back: the fixed one must stay (the
            // kernel drops a subnet's other addresses with its first unless told to promote).
            let promote = format!("net.ipv4.conf.{interface}.promote_secondaries=1");
            ns.run("sysctl", &["-qw", &promote])?;
            let cidr = format!("{own}/{prefix}");
            ns.run("ip", &["addr", "add", &cidr, "dev", &interface])?;
        }
        let served = poweroff::write(path)?;
        let api = SocketAddr::from((address, config.server.http.port()));
        // The lab reads its API from an address in the room's subnet: with the read token, if
        // it has one.
        let query = config
            .server
            .read_token
            .as_ref()
            .map(|t| format!("?token={t}"))
            .unwrap_or_default();
        let daemon = start_daemon(
            &served.path,
            run_dir,
            (api, query.clone()),
            Some(name),
            Some(&ns),
        )
        .await?;
        eprintln!("lab: the site's member {name} runs at {address}");
        Ok(Member {
            name,
            api,
            query,
            interface,
            address,
            prefix,
            daemon,
            keepalived: None,
            ns,
            served,
        })
    }

    pub(super) fn api(&self) -> Api {
        (self.api, self.query.clone())
    }

    /// The boots its API gives now: its own and those it follows from the site's database.
    pub(super) async fn boots(&self) -> anyhow::Result<Vec<BootView>> {
        let path = format!("/api/v1/boots{}", self.query);
        let text = http_get(self.api, &path).await?;
        serde_json::from_str(&text)
            .with_context(|| format!("reading member {}'s /api/v1/boots", self.name))
    }

    /// The config it serves.
    pub(super) fn config(&self) -> PathBuf {
        self.served.path.clone()
    }
}

/// A keepalived of the lab's, killed with -9 (its whole process group: keepalived forks its
/// VRRP process) when dropped.
pub(super) struct Keepalived(pub(super) Child);

impl Keepalived {
    pub(super) fn kill(&mut self) {
        let _ = bootpool::sys::process::kill(-(self.0.id() as i32), libc::SIGKILL);
        let _ = self.0.wait();
    }
}

impl Drop for Keepalived {
    fn drop(&mut self) {
        self.kill();
    }
}

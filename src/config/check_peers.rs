//! `pools.NAME.nbd.peers`, checked: `true` has the agents of the pool's clients fetch the
//! root's chunks from each other, this server their tracker (docs/swarm.md); only where the
//! root goes through the agent (`nbd.via: agent`, `check_nbd.rs`). Off by default: the boot is
//! then exactly the agent's unicast boot from the servers.

use super::check::Checker;
use super::error::ConfigError;
use super::locate::Step::Key;
use super::model::{NbdVia, Pool};
use super::raw;

impl Checker<'_> {
    /// The pool's `nbd.peers`, after its `nbd.via` was checked.
    pub(super) fn check_peers(
        &self,
        pool: &Pool,
        raw: Option<&raw::PoolNbd>,
    ) -> Result<bool, ConfigError> {
        let Some(true) = raw.and_then(|r| r.peers) else {
            return Ok(false);
        };
        if pool.nbd_via != NbdVia::Agent {
            let at = [
                Key("pools"),
                Key(pool.name.as_str()),
                Key("nbd"),
                Key("peers"),
            ];
            return Err(self.err(
                &at,
                "needs `nbd.via: agent`: the peers are the clients' agents, which serve each \
                 other the chunks they hold",
            ));
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    const POOLS: &str = "\
server: { address: 10.77.0.1, http: 0.0.0.0:8080, agent: AGENT }
dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.199 }
images:
  demo: { dir: images/demo }
pools:
  room:
    image: demo
    root: nbd
    initramfs: initramfs-tools
";

    #[test]
    fn peers_are_off_by_default_and_only_through_the_agent() {
        let agent = tempfile::NamedTempFile::new().unwrap();
        let parse = |more: &str| {
            let text =
                format!("{POOLS}{more}").replace("AGENT", &agent.path().display().to_string());
            Config::parse(Path::new("/etc/bootpool/pools.yaml"), &text)
        };
        let peers = |more: &str| parse(more).unwrap().pools["room"].nbd_peers;
        assert!(!peers(""));
        assert!(!peers("    nbd: { via: agent }\n"));
        assert!(!peers("    nbd: { via: agent, peers: false }\n"));
        assert!(peers("    nbd: { via: agent, peers: true }\n"));
        let e = parse("    nbd: { peers: true }\n").unwrap_err();
        assert_eq!(e.path, "pools.room.nbd.peers", "{e}");
        assert!(e.reason.contains("nbd.via: agent"), "{e}");
        let e = parse("    nbd: { via: agent, peers: yes please }\n").unwrap_err();
        assert!(e.to_string().contains("peers"), "{e}");
    }
}

//! `pools.NAME.nbd`, checked: `via: server` (the default: the kernel's NBD client connects to
//! the server) or `via: agent` (it connects to the client agent bootpool's addition starts in
//! the initrd, which reads the root's checked chunks from every member over HTTP, so a
//! server's death costs a retry, docs/swarm.md), refused where the agent cannot work, with
//! the reason.

use super::check::Checker;
use super::error::ConfigError;
use super::locate::Step::Key;
use super::model::{Initramfs, NbdVia, Overlay, Pool, RootProto, Server};
use super::raw;

impl Checker<'_> {
    /// The pool's `nbd.via`, checked against the rest of the pool and `server.agent`.
    pub(super) fn check_nbd(
        &self,
        pool: &Pool,
        raw: Option<&raw::PoolNbd>,
        server: &Server,
    ) -> Result<NbdVia, ConfigError> {
        let name = pool.name.as_str();
        let at = [Key("pools"), Key(name), Key("nbd"), Key("via")];
        let Some(word) = raw.and_then(|r| r.via.as_deref()) else {
            return Ok(NbdVia::Server);
        };
        let refuse = |why: String| Err(self.err(&at, why));
        match word {
            "server" => return Ok(NbdVia::Server),
            "agent" => {}
            w => {
                return refuse(format!(
                    "`{w}` is not a way to the root: give server or agent"
                ));
            }
        }
        if pool.root != RootProto::Nbd {
            return refuse("is for a pool with `root: nbd`".into());
        }
        if pool.initramfs == Initramfs::Bootpool {
            return refuse(
                "needs a stock initrd (`initramfs: initramfs-tools` or `dracut`): the demo's \
                 own initrd does not carry the addition that starts the agent"
                    .into(),
            );
        }
        if let Some(image) = pool.images().into_iter().find(|i| i.cow.is_some()) {
            return refuse(format!(
                "cannot serve image `{}`, which keeps each client's writes on the server \
                 (`cow:`): those live on one server and would not follow the client to another; \
                 the agent reads the root read-only from any member (the addition's overlay \
                 keeps the writes on the client)",
                image.name
            ));
        }
        if pool.overlay == Overlay::Off {
            return refuse(
                "needs bootpool's addition, which starts the agent, and `overlay: off` hands \
                 none (this holds for a Secure Boot chain too): give the pool an overlay"
                    .into(),
            );
        }
        let Some(agent) = &server.agent else {
            return refuse(
                "needs `server.agent`, the static bootpool-agent the addition carries \
                 (cargo build --release -p bootpool-agent --target x86_64-unknown-linux-musl)"
                    .into(),
            );
        };
        if !agent.is_file() {
            return Err(self.err(
                &[Key("server"), Key("agent")],
                format!(
                    "{} is not a file: the static bootpool-agent the addition carries for pool `{name}` (nbd.via: agent)",
                    agent.display()
                ),
            ));
        }
        Ok(NbdVia::Agent)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError, NbdVia};
    use std::path::Path;

    const POOLS: &str = "\
server: { address: 10.77.0.1, http: 0.0.0.0:8080, agent: AGENT }
dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.199 }
images:
  demo: { dir: images/demo }
  cow: { dir: images/cow, cow: ram }
pools:
  room:
    image: demo
    root: nbd
    initramfs: initramfs-tools
";

    /// The config with `more` under the pool and `server.agent` at `agent`.
    fn parse(agent: &Path, more: &str) -> Result<Config, ConfigError> {
        let text = format!("{POOLS}{more}").replace("AGENT", &agent.display().to_string());
        Config::parse(Path::new("/etc/bootpool/pools.yaml"), &text)
    }

    #[test]
    fn the_agent_is_asked_for_and_the_server_is_the_default() {
        let agent = tempfile::NamedTempFile::new().unwrap();
        let via = |more: &str| parse(agent.path(), more).unwrap().pools["room"].nbd_via;
        assert_eq!(via(""), NbdVia::Server);
        assert_eq!(via("    nbd: { via: server }\n"), NbdVia::Server);
        assert_eq!(via("    nbd: { via: agent }\n"), NbdVia::Agent);
        // dracut's initrd too: the addition's netroot hook starts the agent there.
        let dracut = format!(
            "{}    nbd: {{ via: agent }}\n",
            POOLS.replace("initramfs-tools", "dracut")
        )
        .replace("AGENT", &agent.path().display().to_string());
        let c = Config::parse(Path::new("/etc/bootpool/pools.yaml"), &dracut).unwrap();
        assert_eq!(c.pools["room"].nbd_via, NbdVia::Agent);
    }

    /// Each place the agent cannot work is refused at `nbd.via`, with its reason.
    #[test]
    fn the_agent_is_refused_where_it_cannot_work_and_says_why() {
        let agent = tempfile::NamedTempFile::new().unwrap();
        let refused = |more: &str| {
            let e = parse(agent.path(), &format!("{more}    nbd: {{ via: agent }}\n")).unwrap_err();
            assert_eq!(e.path, "pools.room.nbd.via", "{e}");
            e.reason
        };
        assert!(refused("    overlay: off\n").contains("overlay: off"));
        let cow = POOLS.replace("    image: demo\n", "    image: cow\n");
        let text = format!("{cow}    nbd: {{ via: agent }}\n")
            .replace("AGENT", &agent.path().display().to_string());
        let e = Config::parse(Path::new("/etc/bootpool/pools.yaml"), &text).unwrap_err();
        assert_eq!(e.path, "pools.room.nbd.via", "{e}");
        assert!(
            e.reason.contains("image `cow`") && e.reason.contains("cow:"),
            "{e}"
        );
        let demo = POOLS.replace("initramfs-tools", "bootpool");
        let text = format!("{demo}    nbd: {{ via: agent }}\n")
            .replace("AGENT", &agent.path().display().to_string());
        let e = Config::parse(Path::new("/etc/bootpool/pools.yaml"), &text).unwrap_err();
        assert!(e.reason.contains("the demo's own initrd"), "{e}");
        let nfs = POOLS.replace("root: nbd", "root: nfs");
        let text = format!("{nfs}    nbd: {{ via: agent }}\n")
            .replace("AGENT", &agent.path().display().to_string());
        let e = Config::parse(Path::new("/etc/bootpool/pools.yaml"), &text).unwrap_err();
        assert!(e.reason.contains("root: nbd"), "{e}");
        let e = parse(agent.path(), "    nbd: { via: peers }\n").unwrap_err();
        assert!(e.reason.contains("`peers`"), "{e}");
        // No agent to carry: refused at server.agent when it names no file, at the pool's
        // key when it is not given.
        let e = parse(Path::new("/nonexistent/agent"), "    nbd: { via: agent }\n").unwrap_err();
        assert_eq!(e.path, "server.agent", "{e}");
        let text = format!("{POOLS}    nbd: {{ via: agent }}\n").replace(", agent: AGENT", "");
        let e = Config::parse(Path::new("/etc/bootpool/pools.yaml"), &text).unwrap_err();
        assert_eq!(e.path, "pools.room.nbd.via", "{e}");
        assert!(e.reason.contains("server.agent"), "{e}");
    }
}

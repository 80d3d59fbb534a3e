//! The config as served, live: one handle (`Live`) that every service loads once per request
//! or connection, replaced whole by a reload, with its generation (1 at start, one more per
//! reload applied) and its digest. A request holds the `Arc<Config>` it loaded, so a
//! connection keeps the config it started with while a reload swaps the handle.

use super::model::Config;
use std::sync::{Arc, RwLock};

/// The served config, shared by every service.
#[derive(Clone, Debug)]
pub struct Live(Arc<RwLock<Arc<Served>>>);

/// One generation of the served config.
#[derive(Debug)]
pub struct Served {
    /// The config as served: ports given as 0 are the ports bound (`app`).
    pub config: Arc<Config>,
    /// The config as the file gave it, which the next reload is compared with.
    pub loaded: Arc<Config>,
    /// 1 for the config the daemon started with, one more per reload applied.
    pub generation: u64,
    /// The first 16 hex digits of the sha256 of the checked config (`digest`).
    pub digest: String,
}

impl Live {
    /// Generation 1: `served` is `loaded` with the bound ports written in.
    pub fn new(loaded: Config, served: Config) -> Live {
        Live(Arc::new(RwLock::new(Arc::new(Served {
            digest: digest(&loaded),
            config: Arc::new(served),
            loaded: Arc::new(loaded),
            generation: 1,
        }))))
    }

    /// A handle on a config served as it was given (tests, services started alone).
    pub fn fixed(config: Config) -> Live {
        Live::new(config.clone(), config)
    }

    /// The config to answer one request (or serve one connection) with.
    pub fn load(&self) -> Arc<Config> {
        self.served().config.clone()
    }

    /// The whole current generation.
    pub fn served(&self) -> Arc<Served> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Serves `served` (`loaded` with the bound ports written in) from now on, as the next
    /// generation; requests under way keep the config they loaded.
    pub fn replace(&self, loaded: Config, served: Config) -> Arc<Served> {
        let mut current = self.0.write().unwrap_or_else(|e| e.into_inner());
        let next = Arc::new(Served {
            digest: digest(&loaded),
            config: Arc::new(served),
            loaded: Arc::new(loaded),
            generation: current.generation + 1,
        });
        *current = next.clone();
        next
    }
}

/// The first 16 hex digits of the sha256 of the checked config (every value, defaults
/// included; comments and layout do not count): equal digests, equal configs.
pub fn digest(config: &Config) -> String {
    use sha2::{Digest as _, Sha256};
    let hash = Sha256::digest(format!("{config:?}").as_bytes());
    hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const TEXT: &str = "server: { address: 10.77.0.1, http: 0.0.0.0:8080, state_dir: var }
dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.101, lease: 1h }
images: {}
pools: {}
";

    #[test]
    fn a_replaced_config_is_the_next_generation_and_a_loaded_one_stays_as_it_was() {
        let first = Config::parse(Path::new("p.yaml"), TEXT).unwrap();
        let live = Live::fixed(first.clone());
        let before = live.load();
        assert_eq!(live.served().generation, 1);
        let same = live.served().digest.clone();
        assert_eq!(same.len(), 16);
        let text = TEXT.replace("lease: 1h", "lease: 2h");
        let second = Config::parse(Path::new("p.yaml"), &text).unwrap();
        let served = live.replace(second.clone(), second);
        assert_eq!(served.generation, 2);
        assert_ne!(served.digest, same);
        assert_eq!(live.load().dhcp.lease.as_secs(), 7200);
        // A request that loaded before keeps its config.
        assert_eq!(before.dhcp.lease.as_secs(), 3600);
        // Comments do not change the digest.
        let commented = Config::parse(Path::new("p.yaml"), &format!("# a note\n{TEXT}")).unwrap();
        assert_eq!(digest(&commented), same);
    }
}

//! pools.yaml -> checked domain types. Nobody else sees raw YAML. Every error names the file,
//! the line and column, the YAML path and the reason.
//!
//! Beyond each value's own syntax, what would misbehave at serve time is refused here: a
//! server address outside the DHCP subnets, overlapping subnets, a range or router outside its
//! subnet, a range or fixed `ip` holding the network, broadcast or server address, two
//! services on one port, and pool or image names that are not plain
//! (`[A-Za-z0-9._-]`, not starting with `.` or `-`: they become paths and URLs); a map key given
//! twice (`yaml.rs`), keys proxy mode would ignore, a client name on a MAC range or on two
//! entries, YAML 1.1's `yes`/`no` where a name is wanted. Valid but implausible values (a MAC
//! range of millions) are `Config::warnings`.

pub mod arch;
mod check;
mod check_access;
mod check_arch;
mod check_dhcp6;
mod check_homes;
mod check_names;
mod check_nbd;
mod check_overlay;
mod check_overrides;
mod check_peers;
mod check_placement;
mod check_wake;
pub mod client_names;
pub mod cmdline;
mod dhcp6;
pub mod enrolments;
mod error;
pub mod live;
mod locate;
mod model;
pub mod names;
mod raw;
pub mod reload;
mod subnets;
mod values;
pub mod wake;
mod yaml;

pub use arch::Arch;
pub use dhcp6::{BootOver, Dhcp6, RouterAdverts, Subnet6};
pub use error::ConfigError;
pub use live::Live;
pub use model::{
    ClientEntry, Config, Cow, CowStore, DEFAULT_COW_LIMIT, Database, Dhcp, DhcpMode, DhcpSubnet,
    ENROLMENTS_FILE, Homes, Image, Initramfs, Limits, Member, NbdVia, Netconsole, Overlay, Pool,
    Ports, RootProto, Server, SitePlacement, Store, Tls, Variant, Wire,
};
pub use values::{Mac, MacRange, Subnet, parse_duration, parse_rate_mbps, parse_size};
pub use wake::WakeSchedule;

use check::Checker;
use std::path::{Path, PathBuf};

/// The environment variable naming the config file when a command is given no `--config`.
pub const FILE_ENV: &str = "BOOTPOOL_CONFIG";

/// The installed service's config file (dist/bootpool.service).
pub const INSTALLED_FILE: &str = "/etc/bootpool/pools.yaml";

/// Which config file a command reads when given no `--config`, in this order (`--help` says
/// it): the file `$BOOTPOOL_CONFIG` names; else the installed service's,
/// /etc/bootpool/pools.yaml, when there is one (so an admin's commands on the server read
/// what it serves, wherever they are run); else `pools.yaml` in the current folder (a
/// checkout, the lab).
pub fn default_file() -> PathBuf {
    if let Some(file) = std::env::var_os(FILE_ENV).filter(|f| !f.is_empty()) {
        return PathBuf::from(file);
    }
    let installed = Path::new(INSTALLED_FILE);
    if installed.is_file() {
        return installed.to_path_buf();
    }
    PathBuf::from("pools.yaml")
}

/// What `--config` says of itself in every command's `--help`.
pub const FILE_HELP: &str = "The config file [default: $BOOTPOOL_CONFIG, else /etc/bootpool/pools.yaml if there is one, else ./pools.yaml]";

impl Config {
    /// Reads and checks a config file. Paths inside are resolved against the file's folder.
    pub fn load(file: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|e| ConfigError {
            file: file.to_path_buf(),
            line: None,
            column: None,
            path: String::new(),
            reason: format!("cannot read: {e}"),
        })?;
        Config::parse(file, &text)
    }

    /// Checks config text as if it were read from `file`.
    pub fn parse(file: &Path, text: &str) -> Result<Config, ConfigError> {
        let raw = yaml::read(file, text)?;
        let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
        Checker {
            file,
            text,
            base: &base,
            warnings: Default::default(),
        }
        .check(raw)
    }
}

#[cfg(test)]
mod tests;

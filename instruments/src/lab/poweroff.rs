//! The config `bootpool lab` serves: the one it was given, with `bootpool.lab=poweroff` added
//! to every pool's command line (its `cmdline_template` when it has one, and each `arch`
//! entry's own `cmdline`), so that the demo image powers off once it has booted (or failed)
//! and qemu exits; on a real PC, served without it, the demo stays up. Written beside the
//! given file (its relative paths keep their meaning) as `.NAME.lab`, removed when dropped.

use anyhow::Context;
use serde_norway::Value;
use std::path::{Path, PathBuf};

/// The kernel argument the demo image powers off on (images/README.md).
pub const ARGUMENT: &str = "bootpool.lab=poweroff";

/// The written copy; removed when dropped.
pub struct LabConfig {
    pub path: PathBuf,
}

impl Drop for LabConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes the copy of `config` with `ARGUMENT` on every pool's command line.
pub fn write(config: &Path) -> anyhow::Result<LabConfig> {
    let name = config
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "pools.yaml".into());
    let served = LabConfig {
        path: config.with_file_name(format!(".{name}.lab")),
    };
    served.refresh(config)?;
    Ok(served)
}

impl LabConfig {
    /// Writes the copy again from `config` as it is now (a reload's `--reload-with`), by
    /// rename: the daemon reads it whole.
    pub fn refresh(&self, config: &Path) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(config)
            .with_context(|| format!("reading {}", config.display()))?;
        let mut doc: Value = serde_norway::from_str(&text)
            .with_context(|| format!("reading {}", config.display()))?;
        add_argument(&mut doc);
        let part = self.path.with_extension("lab.part");
        std::fs::write(&part, serde_norway::to_string(&doc)?)
            .with_context(|| format!("writing {}", part.display()))?;
        std::fs::rename(&part, &self.path)
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

/// `ARGUMENT` after each pool's own arguments (an absent `cmdline` becomes just it).
fn add_argument(doc: &mut Value) {
    let Some(pools) = doc.get_mut("pools").and_then(Value::as_mapping_mut) else {
        return;
    };
    for (_, pool) in pools.iter_mut() {
        let Some(pool) = pool.as_mapping_mut() else {
            continue;
        };
        let key = if pool.contains_key("cmdline_template") {
            "cmdline_template"
        } else {
            "cmdline"
        };
        append(pool, key);
        if let Some(arch) = pool.get_mut("arch").and_then(Value::as_mapping_mut) {
            for (_, entry) in arch.iter_mut() {
                if let Some(entry) = entry.as_mapping_mut()
                    && entry.contains_key("cmdline")
                {
                    append(entry, "cmdline");
                }
            }
        }
    }
}

fn append(map: &mut serde_norway::Mapping, key: &str) {
    let old = map.get(key).and_then(Value::as_str).unwrap_or("").trim();
    let new = if old.is_empty() {
        ARGUMENT.to_string()
    } else {
        format!("{old} {ARGUMENT}")
    };
    map.insert(Value::from(key), Value::from(new));
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootpool::config::Config;

    const TEXT: &str = "\
server: { address: 10.77.0.1 }
dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.199 }
images:
  demo: { dir: images/demo }
  demo-arm64: { dir: images/demo-arm64 }
pools:
  plain:
    image: demo
    clients: [ { mac: \"52:54:00:77:00:01\" } ]
  own:
    image: demo
    cmdline: console=ttyS0
    arch:
      arm64: { image: demo-arm64, cmdline: console=ttyAMA0 }
    clients: [ { mac: \"52:54:00:77:00:02\" } ]
  templated:
    image: demo
    cmdline_template: \"{root} quiet\"
    clients: [ { mac: \"52:54:00:77:00:03\" } ]
";

    /// Every pool's command line, however it is given, gets the argument once, and the copy
    /// is a config bootpool reads; the copy is gone once dropped.
    #[test]
    fn every_pool_gets_the_argument_and_the_copy_goes() {
        let dir = tempfile::tempdir().unwrap();
        let given = dir.path().join("pools.yaml");
        std::fs::write(&given, TEXT).unwrap();
        let copy = write(&given).unwrap();
        assert_eq!(copy.path, dir.path().join(".pools.yaml.lab"));
        let c = Config::load(&copy.path).unwrap();
        assert_eq!(c.pools["plain"].cmdline, ARGUMENT);
        assert_eq!(c.pools["own"].cmdline, format!("console=ttyS0 {ARGUMENT}"));
        let arm = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        let arm = arm.on_arch(Some(11));
        assert_eq!(arm.cmdline(), format!("console=ttyAMA0 {ARGUMENT}"));
        assert_eq!(c.pools["templated"].cmdline, "");
        let m = c.member("52:54:00:77:00:03".parse().unwrap()).unwrap();
        let line = bootpool::boot::script::cmdline(&c, &m, m.image(), c.server.address, None);
        assert!(line.ends_with(&format!(" quiet {ARGUMENT}")), "{line}");
        let path = copy.path.clone();
        drop(copy);
        assert!(!path.exists());
        assert_eq!(std::fs::read_to_string(&given).unwrap(), TEXT);
    }
}

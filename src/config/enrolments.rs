//! The enrolments file (`server.enrolments`, default `state_dir/enrolled.yaml`): clients added
//! by `bootpool client add`, `POST /api/v1/clients` and `discover` pools, by pool, each list in
//! the shape of a pool's `clients:` in pools.yaml, so pools.yaml can stay as a site keeps it
//! (in git). `check.rs` reads it with the pools; this file adds one client to it: under a lock,
//! checked whole with pools.yaml before it is kept, written whole by rename.

use super::model::Config;
use super::raw;
use super::values::Mac;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long an enrolment waits for another one's lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// What the file says of itself, on top of every version of it bootpool writes.
const HEADER: &str = "\
# bootpool's enrolments: clients added by `bootpool client add`, POST /api/v1/clients or a
# pool with `discover: true`, by pool, each list in the shape of a pool's `clients:` in
# pools.yaml. Read with pools.yaml by `bootpool check`, `serve` and every reload; a MAC may be
# listed once, here or there. bootpool rewrites this file whole at each enrolment (comments
# other than this one are not kept); to change it by hand, edit it, then `bootpool reload`.
";

/// A client to enrol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enrolment {
    pub mac: Mac,
    pub pool: String,
    pub name: Option<String>,
}

/// Why an enrolment was not made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The pools or the enrolments say no: the MAC is listed, the pool or the name is wrong.
    Conflict(String),
    /// The file could not be read, locked or written.
    Io(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Conflict(why) | Refused::Io(why) => f.write_str(why),
        }
    }
}

/// Adds `enrolment` to the enrolments file of the config in `config_file`, as that file and
/// pools.yaml are now: refused when the pool is not one of the config's, the MAC is listed
/// already (here or in pools.yaml), or the name is another client's; and when the config read
/// back with the new file would not load (the reason as `Config::load` gives it). Answers the
/// file written. The served config is unchanged until a reload reads it.
pub fn add(config_file: &Path, enrolment: &Enrolment) -> Result<PathBuf, Refused> {
    let conflict = |why: String| Refused::Conflict(why);
    let config = Config::load(config_file).map_err(|e| conflict(e.to_string()))?;
    let file = config.server.enrolments.clone();
    let _lock = lock(&file)?;
    // Read again under the lock: another enrolment may have been written since.
    let config = Config::load(config_file).map_err(|e| conflict(e.to_string()))?;
    let Enrolment { mac, pool, name } = enrolment;
    if !config.pools.contains_key(pool) {
        let known: Vec<&str> = config.pools.keys().map(String::as_str).collect();
        return Err(conflict(format!(
            "no pool `{pool}` (pools: {})",
            known.join(", ")
        )));
    }
    if let Some(m) = config.listed(*mac) {
        let named = m.name().map(|n| format!(" as `{n}`")).unwrap_or_default();
        return Err(conflict(format!(
            "{mac} is already listed in pool `{}`{named}",
            m.pool.name
        )));
    }
    let before = read_text(&file)?;
    let mut entries = match &before {
        Some(text) => parse(&file, text)?,
        None => Vec::new(),
    };
    entries.push(Entry {
        pool: pool.clone(),
        mac: Some(mac.to_string()),
        macs: None,
        name: name.clone(),
        ip: None,
    });
    keep(config_file, &file, before.as_deref(), &entries)?;
    Ok(file)
}

/// Takes `mac` out of the enrolments file of the config in `config_file`: refused when no
/// entry of the file is that MAC alone (one listed in pools.yaml is named, to be removed
/// there). Answers the file written. The served config is unchanged until a reload reads it.
pub fn remove(config_file: &Path, mac: Mac) -> Result<PathBuf, Refused> {
    let conflict = |why: String| Refused::Conflict(why);
    let config = Config::load(config_file).map_err(|e| conflict(e.to_string()))?;
    let file = config.server.enrolments.clone();
    let _lock = lock(&file)?;
    let before = read_text(&file)?;
    let mut entries = match &before {
        Some(text) => parse(&file, text)?,
        None => Vec::new(),
    };
    let n = entries.len();
    entries.retain(|e| e.key() != mac.to_string());
    if entries.len() == n {
        let config = Config::load(config_file).map_err(|e| conflict(e.to_string()))?;
        return Err(conflict(match config.listed(mac) {
            Some(m) => format!(
                "{mac} is not enrolled in {} but listed in pool `{}` of {}: remove it there",
                file.display(),
                m.pool.name,
                config_file.display()
            ),
            None => format!("{mac} is not enrolled in {}", file.display()),
        }));
    }
    keep(config_file, &file, before.as_deref(), &entries)?;
    Ok(file)
}

/// One entry of the enrolments file, as bootpool writes it: a client of `pool`, by `mac` (or
/// a hand-written `macs` range), with its `name` and `ip` if it has them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    pub pool: String,
    pub mac: Option<String>,
    pub macs: Option<String>,
    pub name: Option<String>,
    pub ip: Option<String>,
}

impl Entry {
    /// What the entry is known by: its MAC as bootpool writes MACs, else its `macs` as given.
    pub fn key(&self) -> String {
        match (&self.mac, &self.macs) {
            (Some(m), _) => m
                .parse::<Mac>()
                .map_or_else(|_| m.clone(), |m| m.to_string()),
            (None, Some(r)) => r.clone(),
            (None, None) => String::new(),
        }
    }
}

/// The entries of the enrolments `file` (none when it does not exist), in the file's order.
pub fn entries(file: &Path) -> Result<Vec<Entry>, Refused> {
    match read_text(file)? {
        Some(text) => parse(file, &text),
        None => Ok(Vec::new()),
    }
}

/// Writes the enrolments file of the config in `config_file` as `entries`, under the lock,
/// if `unchanged` says yes to the entries it holds now (another enrolment may have been
/// written since they were read): checked whole with pools.yaml, undone when the config
/// would not load. Answers whether it was written.
pub fn replace(
    config_file: &Path,
    unchanged: impl FnOnce(&[Entry]) -> bool,
    entries: &[Entry],
) -> Result<bool, Refused> {
    let config = Config::load(config_file).map_err(|e| Refused::Conflict(e.to_string()))?;
    let file = config.server.enrolments.clone();
    let _lock = lock(&file)?;
    let before = read_text(&file)?;
    let now = match &before {
        Some(text) => parse(&file, text)?,
        None => Vec::new(),
    };
    if !unchanged(&now) {
        return Ok(false);
    }
    keep(config_file, &file, before.as_deref(), entries)?;
    Ok(true)
}

/// The file's text, `None` when it does not exist.
fn read_text(file: &Path) -> Result<Option<String>, Refused> {
    match std::fs::read_to_string(file) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Refused::Io(format!("reading {}: {e}", file.display()))),
    }
}

/// The entries of `text`, read from `file`, by pool in the file's order.
fn parse(file: &Path, text: &str) -> Result<Vec<Entry>, Refused> {
    let lists: BTreeMap<String, Vec<raw::Client>> = super::yaml::read_as::<Option<_>>(file, text)
        .map_err(|e| Refused::Conflict(e.to_string()))?
        .unwrap_or_default();
    Ok(lists
        .into_iter()
        .flat_map(|(pool, clients)| {
            clients.into_iter().map(move |c| Entry {
                pool: pool.clone(),
                mac: c.mac,
                macs: c.macs,
                name: c.name,
                ip: c.ip,
            })
        })
        .collect())
}

/// Writes `entries` as `file`, then checks the config in `config_file` loads with it: whole,
/// or not at all (the file put back as `before`) with the reason a reload would give.
fn keep(
    config_file: &Path,
    file: &Path,
    before: Option<&str>,
    entries: &[Entry],
) -> Result<(), Refused> {
    write(file, &render(entries)).map_err(Refused::Io)?;
    if let Err(e) = Config::load(config_file) {
        let undone = match before {
            Some(text) => write(file, text),
            None => std::fs::remove_file(file).map_err(|e| e.to_string()),
        };
        if let Err(u) = undone {
            tracing::error!(file = %file.display(), error = %u, "an enrolment refused could not be undone");
        }
        return Err(Refused::Conflict(e.to_string()));
    }
    Ok(())
}

/// The file's text for `entries`: the header, then each pool's clients in their order, one
/// flow map a line.
fn render(entries: &[Entry]) -> String {
    // JSON strings are YAML double-quoted scalars: anything a value holds is quoted safely.
    let quoted = |s: &str| serde_json::Value::from(s).to_string();
    let mut lists: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for e in entries {
        lists.entry(&e.pool).or_default().push(e);
    }
    let mut out = String::from(HEADER);
    for (pool, clients) in lists {
        out.push_str(&format!("{}:\n", quoted(pool)));
        for c in clients {
            let fields: Vec<String> = [
                ("mac", &c.mac),
                ("macs", &c.macs),
                ("name", &c.name),
                ("ip", &c.ip),
            ]
            .into_iter()
            .filter_map(|(k, v)| v.as_deref().map(|v| format!("{k}: {}", quoted(v))))
            .collect();
            out.push_str(&format!("  - {{ {} }}\n", fields.join(", ")));
        }
    }
    out
}

/// Writes `text` as `file`, whole: beside it first, synced, then renamed over it.
fn write(file: &Path, text: &str) -> Result<(), String> {
    let part = part_name(file, "part");
    let said = |e: std::io::Error| format!("writing {}: {e}", file.display());
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(said)?;
    }
    let mut f = std::fs::File::create(&part).map_err(said)?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(said)?;
    std::fs::rename(&part, file).map_err(said)
}

/// `.NAME.SUFFIX` beside `file`.
fn part_name(file: &Path, suffix: &str) -> PathBuf {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    file.with_file_name(format!(".{name}.{suffix}"))
}

/// The lock every enrolment of `file` holds (`.NAME.lock` beside it), waited for up to
/// `LOCK_WAIT`: the daemon and `bootpool client add` may enrol at once.
fn lock(file: &Path) -> Result<std::fs::File, Refused> {
    let path = part_name(file, "lock");
    let io = |e: std::io::Error| Refused::Io(format!("locking {}: {e}", path.display()));
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io)?;
    let since = Instant::now();
    loop {
        match crate::sys::fs::try_lock_exclusive(f.as_fd()) {
            Ok(()) => return Ok(f),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && since.elapsed() < LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(io(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "server: { address: 10.77.0.1, http: 0.0.0.0:8080, state_dir: var }
dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.150, lease: 1h }
images:
  demo: { dir: images/demo }
pools:
  room:
    image: demo
    clients:
      - { mac: \"52:54:00:77:00:01\", name: pc01 }
  lab: { image: demo }
";

    fn enrolment(mac: &str, pool: &str, name: Option<&str>) -> Enrolment {
        Enrolment {
            mac: mac.parse().unwrap(),
            pool: pool.into(),
            name: name.map(String::from),
        }
    }

    #[test]
    fn an_enrolment_is_kept_in_the_file_and_read_with_the_pools_and_conflicts_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pools.yaml");
        std::fs::write(&file, TEXT).unwrap();
        let written = add(&file, &enrolment("52:54:00:77:00:02", "room", Some("pc02"))).unwrap();
        assert_eq!(written, dir.path().join("var/enrolled.yaml"));
        add(&file, &enrolment("52:54:00:77:00:03", "lab", None)).unwrap();
        let config = Config::load(&file).unwrap();
        let m = config.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        assert_eq!(
            (m.pool.name.as_str(), m.name()),
            ("room", Some("pc02".to_string()))
        );
        assert_eq!(config.pools["lab"].clients.len(), 1);
        // Listed in pools.yaml, or already enrolled; no such pool; a name taken: refused,
        // the file as it was.
        let kept = std::fs::read_to_string(&written).unwrap();
        for (e, says) in [
            (
                enrolment("52:54:00:77:00:01", "lab", None),
                "already listed in pool `room` as `pc01`",
            ),
            (
                enrolment("52:54:00:77:00:03", "room", None),
                "already listed in pool `lab`",
            ),
            (
                enrolment("52:54:00:77:00:04", "attic", None),
                "no pool `attic` (pools: lab, room)",
            ),
            (
                enrolment("52:54:00:77:00:04", "lab", Some("pc01")),
                "pools.room.clients[0].name",
            ),
        ] {
            let why = add(&file, &e).unwrap_err().to_string();
            assert!(why.contains(says), "{why}");
        }
        assert_eq!(std::fs::read_to_string(&written).unwrap(), kept);
    }

    #[test]
    fn a_removal_takes_an_enrolled_client_out_and_refuses_one_the_file_does_not_hold() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pools.yaml");
        std::fs::write(&file, TEXT).unwrap();
        let written = add(&file, &enrolment("52:54:00:77:00:02", "room", Some("pc02"))).unwrap();
        add(&file, &enrolment("52:54:00:77:00:03", "lab", None)).unwrap();
        // Any case of the MAC names it.
        assert_eq!(
            remove(&file, "52:54:00:77:00:02".parse().unwrap()),
            Ok(written.clone())
        );
        let config = Config::load(&file).unwrap();
        assert!(
            config
                .listed("52:54:00:77:00:02".parse().unwrap())
                .is_none()
        );
        assert!(
            config
                .listed("52:54:00:77:00:03".parse().unwrap())
                .is_some()
        );
        let kept = std::fs::read_to_string(&written).unwrap();
        for (mac, says) in [
            ("52:54:00:77:00:01", "listed in pool `room` of"),
            ("52:54:00:77:00:02", "52:54:00:77:00:02 is not enrolled in"),
        ] {
            let why = remove(&file, mac.parse().unwrap()).unwrap_err().to_string();
            assert!(why.contains(says), "{why}");
        }
        assert_eq!(std::fs::read_to_string(&written).unwrap(), kept);
        // Replaced whole, only while the file holds what the caller read; never a config
        // that would not load (a pool this config lacks).
        let now = entries(&written).unwrap();
        assert_eq!(now.len(), 1);
        let other = Entry {
            pool: "room".into(),
            mac: Some("52:54:00:77:00:09".into()),
            macs: None,
            name: None,
            ip: None,
        };
        assert_eq!(
            replace(&file, |_| false, std::slice::from_ref(&other)),
            Ok(false)
        );
        assert_eq!(entries(&written).unwrap(), now);
        assert_eq!(
            replace(&file, |e| e == now, std::slice::from_ref(&other)),
            Ok(true)
        );
        assert_eq!(entries(&written).unwrap(), std::slice::from_ref(&other));
        let attic = Entry {
            pool: "attic".into(),
            ..other.clone()
        };
        assert!(replace(&file, |_| true, &[attic]).is_err());
        assert_eq!(entries(&written).unwrap(), [other]);
    }
}

//! The next boots an admin set (`boot::next`), kept in `state_dir/next-boot.json`: written
//! whole, synced and renamed over the old file before the API answers, so a daemon killed
//! (even `kill -9`) keeps what it was told. The API sets them; the HTTP script handler reads
//! the one that applies to a client and uses up a once entry when it hands the client the
//! script of the boot it applies to.

use crate::boot::next::{Entry, NextBoots, Scope};
use crate::config::Mac;
use anyhow::Context;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The file's name in `state_dir`.
pub const FILE: &str = "next-boot.json";

/// The next boots as said, and their file.
pub struct NextBootState {
    path: PathBuf,
    boots: Mutex<NextBoots>,
}

impl NextBootState {
    /// Reads `state_dir/next-boot.json` (none yet: nothing said); a file that is not one is
    /// an error naming it, never silently dropped.
    pub fn open(state_dir: &Path) -> anyhow::Result<NextBootState> {
        let path = state_dir.join(FILE);
        let boots = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("{}: not a next-boot state file", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => NextBoots::default(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        Ok(NextBootState {
            path,
            boots: Mutex::new(boots),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, NextBoots> {
        self.boots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Everything said and still standing.
    pub fn all(&self) -> NextBoots {
        self.lock().clone()
    }

    /// Says `entry` (in place of what its scope said), on disk before in memory.
    pub fn set(&self, entry: Entry) -> std::io::Result<()> {
        let mut boots = self.lock();
        let mut next = boots.clone();
        next.set(entry);
        self.write(&next)?;
        *boots = next;
        Ok(())
    }

    /// The entry that applies to client `mac` of `pool` at `ip` (`NextBoots::for_client`).
    pub fn applying(&self, mac: Mac, ip: Option<Ipv4Addr>, pool: &str) -> Option<Entry> {
        self.lock().for_client(mac, ip, pool).cloned()
    }

    /// Client `mac`'s boot took the entry of `scope`: a once entry is used up, on disk.
    pub fn consume(&self, mac: Mac, scope: &Scope) -> std::io::Result<()> {
        let mut boots = self.lock();
        let mut next = boots.clone();
        if next.consume(mac, scope) {
            self.write(&next)?;
            *boots = next;
        }
        Ok(())
    }

    fn write(&self, boots: &NextBoots) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(boots).map_err(std::io::Error::other)?;
        super::lease_file::write_atomically(&self.path, &text)
    }
}

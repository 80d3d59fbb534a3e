//! The DHCPv6 bindings on disk, `state_dir/leases6.json`: every binding (`boot::leases6`,
//! `Saved6`), written whole by rename and synced after each answer that changed one, before
//! the REPLY leaves, so a server killed with -9 loses none. Read at the start; a damaged file
//! is an error naming it and saying to move it aside (an empty table is not assumed: the lost
//! bindings' addresses could then go to other clients).

use crate::boot::leases6::Saved6;
use std::io::Write as _;
use std::path::{Path, PathBuf};

pub const FILE: &str = "leases6.json";

/// The bindings saved in `dir`, none when the file does not exist.
pub fn read(dir: &Path) -> anyhow::Result<Vec<Saved6>> {
    let path = dir.join(FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            anyhow::anyhow!(
                "{}: {e}: move it aside to start with no DHCPv6 bindings",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => anyhow::bail!("reading {}: {e}", path.display()),
    }
}

/// Writes `bindings` as the file in `dir`, whole: beside it, synced, then renamed over it.
pub fn write(dir: &Path, bindings: &[Saved6]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(FILE);
    let part: PathBuf = dir.join(format!(".{FILE}.part"));
    let text = serde_json::to_vec(bindings).map_err(std::io::Error::other)?;
    let mut f = std::fs::File::create(&part)?;
    f.write_all(&text)?;
    f.sync_data()?;
    std::fs::rename(&part, &path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_written_read_back_and_a_damaged_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_empty());
        let b = vec![Saved6 {
            mac: "52:54:00:77:00:01".parse().unwrap(),
            addr: "fd77::100".parse().unwrap(),
            expires: 99,
            duid: "0003".into(),
        }];
        write(dir.path(), &b).unwrap();
        assert_eq!(read(dir.path()).unwrap(), b);
        std::fs::write(dir.path().join(FILE), b"[{\"mac\":").unwrap();
        let why = read(dir.path()).unwrap_err().to_string();
        assert!(
            why.contains("leases6.json") && why.contains("move it aside"),
            "{why}"
        );
    }
}

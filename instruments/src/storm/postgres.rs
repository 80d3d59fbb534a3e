//! The PostgreSQL a storm of several servers (`--servers`) starts for its site: Debian's
//! binaries from /usr/lib/postgresql/*/bin, a cluster made by `initdb` in a temporary folder,
//! reached only through its Unix socket there (any network namespace reaches a socket file),
//! run as the `postgres` user when the storm is root, stopped and removed when dropped.

use anyhow::{Context, bail};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The socket's port number (only its file name: the server listens on no TCP port).
const PORT: u16 = 5432;

/// The site's database, for the storm's run.
pub struct Postgres {
    child: Child,
    dir: PathBuf,
}

/// The newest PostgreSQL's binaries folder (`/usr/lib/postgresql/VERSION/bin`), if any; the
/// tests' own PostgreSQL finds its binaries here too.
pub fn newest_bin() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// `newest_bin`, or why the storm cannot run without it.
fn bin() -> anyhow::Result<PathBuf> {
    match newest_bin() {
        Some(bin) => Ok(bin),
        None => bail!(
            "--servers needs PostgreSQL for its site: no /usr/lib/postgresql/*/bin/postgres (Debian: apt install postgresql)"
        ),
    }
}

/// The uid and gid PostgreSQL runs as: the `postgres` user when we are root (it refuses
/// root), from /etc/passwd (where Debian's postgresql package puts it), else ourselves.
fn user() -> anyhow::Result<Option<(u32, u32)>> {
    if !bootpool::sys::process::is_root() {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    match passwd_ids(&passwd, "postgres") {
        Some(ids) => Ok(Some(ids)),
        None => bail!(
            "PostgreSQL refuses to run as root, and /etc/passwd has no `postgres` user (Debian's postgresql package makes it)"
        ),
    }
}

/// The uid and gid of `name` in an /etc/passwd text.
fn passwd_ids(passwd: &str, name: &str) -> Option<(u32, u32)> {
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&name)).then_some(())?;
        Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?))
    })
}

fn as_user(program: PathBuf, user: Option<(u32, u32)>) -> Command {
    let mut c = Command::new(program);
    if let Some((uid, gid)) = user {
        c.gid(gid).uid(uid);
    }
    c
}

impl Postgres {
    /// Makes a cluster in a new temporary folder and starts it; returns once it answers.
    pub fn start() -> anyhow::Result<Postgres> {
        let bin = bin()?;
        let user = user()?;
        let dir = std::env::temp_dir().join(format!("bootpool-storm-pg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        super::leftovers::register(&dir);
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .with_context(|| format!("handing {} to postgres", dir.display()))?;
        }
        let log = dir.join("postgres.log");
        let data = dir.join("data");
        let out = as_user(bin.join("initdb"), user)
            .args(["--auth=trust", "--username=postgres", "--no-sync", "-D"])
            .arg(&data)
            .output()
            .context("running initdb")?;
        if !out.status.success() {
            super::leftovers::remove(&dir);
            bail!(
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let file = std::fs::File::create(&log)?;
        let mut cmd = as_user(bin.join("postgres"), user);
        cmd.arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(&dir)
            .args(["-p", &PORT.to_string()])
            // The socket only; no durability wanted for a storm's records.
            .args(["-c", "listen_addresses=", "-c", "fsync=off"])
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .process_group(0);
        // Set after the switch to the postgres user (which would clear it): it goes with
        // the storm, however the storm ends.
        crate::lab::dies_with_lab(&mut cmd, libc::SIGINT);
        bootpool::sys::process::unblock_signals_in_child(&mut cmd);
        let child = cmd.spawn().context("starting postgres")?;
        let mut pg = Postgres { child, dir };
        pg.wait_ready(&bin, user)?;
        Ok(pg)
    }

    fn wait_ready(&mut self, bin: &Path, user: Option<(u32, u32)>) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = as_user(bin.join("pg_isready"), user)
                .args(["-q", "-h"])
                .arg(&self.dir)
                .args(["-p", &PORT.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!("postgres exited ({status}):\n{}", self.log());
            }
            if Instant::now() >= deadline {
                bail!("postgres did not answer within 60 s:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default()
    }

    /// `server.database` for every member: the socket in the cluster's folder.
    pub fn url(&self) -> String {
        format!(
            "postgres:///postgres?host={}&port={PORT}&user=postgres",
            self.dir.display()
        )
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT is PostgreSQL's fast shutdown; SIGKILL if it has not gone in 20 s. Our own
        // child.
        let _ = bootpool::sys::process::kill(self.child.id() as i32, libc::SIGINT);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                super::leftovers::remove(&self.dir);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = bootpool::sys::process::kill(-(self.child.id() as i32), libc::SIGKILL);
        let _ = self.child.wait();
        super::leftovers::remove(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_postgres_user_is_read_from_passwd() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\npostgres:x:104:111:PostgreSQL administrator,,,:/var/lib/postgresql:/bin/bash\n";
        assert_eq!(super::passwd_ids(passwd, "postgres"), Some((104, 111)));
        assert_eq!(super::passwd_ids(passwd, "postgre"), None);
        assert_eq!(super::passwd_ids("postgres:x:oops:1:\n", "postgres"), None);
    }
}

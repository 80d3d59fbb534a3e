//! One member's enrolments in the site, running: every `EVERY` what its enrolments file
//! changed since it last agreed with the site (`enrol_rows::diff`) is written to
//! `site_enrolments`, and the site's rows are read back; when they differ from the file, the
//! file is rewritten as the site's (under the enrolments lock, checked whole with pools.yaml)
//! and the config reloaded. The file stays what the boot path reads, so a member started
//! while the database is down serves every enrolment it had seen. What it last agreed is kept
//! in `state_dir/enrolments.site.json`: a change made while the database is down is the
//! difference between that and the file, so it is sent once the database is back, never lost
//! and never mistaken for another member's removal.

use super::enrol_rows::{self, Rows};
use super::enrolments_db::EnrolmentsDb;
use crate::config::enrolments::{self, Entry};
use crate::config::live::Live;
use crate::shutdown::Shutdown;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the file is compared, the changes sent and the site's rows read.
pub const EVERY: Duration = Duration::from_secs(1);
/// The rows this member last had alike with the site, in `state_dir`.
pub const AGREED: &str = "enrolments.site.json";

/// A member's part in the site's enrolments.
pub struct SharedEnrolments {
    me: String,
    db: EnrolmentsDb,
    config: Live,
    /// `state_dir/AGREED`.
    agreed_file: PathBuf,
    agreed: Mutex<Rows>,
    /// Asks the daemon for the reload SIGHUP makes (not awaited).
    reload: Box<dyn Fn() + Send + Sync>,
}

impl SharedEnrolments {
    /// Member `me`'s enrolments, the config's file kept in step with the site's table.
    pub fn open(
        me: &str,
        db: EnrolmentsDb,
        config: Live,
        reload: Box<dyn Fn() + Send + Sync>,
    ) -> anyhow::Result<Arc<SharedEnrolments>> {
        let agreed_file = config.load().server.state_dir.join(AGREED);
        let agreed = read_agreed(&agreed_file)?;
        Ok(Arc::new(SharedEnrolments {
            me: me.to_string(),
            db,
            config,
            agreed_file,
            agreed: Mutex::new(agreed),
            reload,
        }))
    }

    /// Until `shutdown`: the file and the site's table kept in step every `EVERY`.
    pub async fn keep(self: Arc<SharedEnrolments>, shutdown: Shutdown) {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The table is made once the database answers (it may be down at start).
        let mut made = false;
        loop {
            tokio::select! {
                _ = shutdown.wait() => break,
                _ = tick.tick() => {}
            }
            if !made {
                made = self.db.schema().await.is_ok();
            }
            if made && let Err(e) = self.step().await {
                static FAILED: crate::log_limit::LogLimit = crate::log_limit::LogLimit::new();
                if let Some(suppressed) = FAILED.allow() {
                    tracing::warn!(error = %format!("{e:#}"), suppressed,
                        "enrolments not kept in step with the site; this member serves its file");
                }
            }
        }
    }

    /// One round: this member's changes sent, the site's rows read and, when they differ,
    /// written to the file and reloaded.
    async fn step(&self) -> anyhow::Result<()> {
        let config = self.config.load();
        let (config_file, file) = (config.file.clone(), config.server.enrolments.clone());
        let read = file.clone();
        let ours = blocking(move || enrolments::entries(&read)).await?;
        let ours = enrol_rows::rows(&ours);
        let agreed = self
            .agreed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let changes = enrol_rows::diff(&agreed, &ours);
        if !changes.is_empty() {
            self.db.send(&changes, &self.me).await?;
            tracing::info!(
                changes = changes.len(),
                "this member's enrolments written to site_enrolments"
            );
        }
        let site = self.db.all().await?;
        if site != ours {
            let (seen, written) = (ours.clone(), enrol_rows::entries(&site));
            let done = blocking(move || {
                enrolments::replace(&config_file, |now| enrol_rows::rows(now) == seen, &written)
            })
            .await?;
            // The file changed since it was read: the next round sends that first.
            if !done {
                return Ok(());
            }
            let added = site.keys().filter(|k| !ours.contains_key(*k)).count();
            let removed = ours.keys().filter(|k| !site.contains_key(*k)).count();
            tracing::info!(file = %file.display(), added, removed, entries = site.len(),
                "enrolments file rewritten as the site's; reloading");
            (self.reload)();
        }
        if site != agreed {
            write_agreed(&self.agreed_file, &site)?;
            *self.agreed.lock().unwrap_or_else(|e| e.into_inner()) = site;
        }
        Ok(())
    }
}

/// `f` on a blocking thread, its refusal as an error.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, enrolments::Refused> + Send + 'static,
) -> anyhow::Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(|e| anyhow::anyhow!("{e}")),
        Err(e) => anyhow::bail!("{e}"),
    }
}

/// The rows last agreed, none when the file does not exist (a member new to the site, which
/// then sends its whole enrolments file).
fn read_agreed(path: &Path) -> anyhow::Result<Rows> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let entries: Vec<Entry> = serde_json::from_slice(&bytes)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
            Ok(enrol_rows::rows(&entries))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Rows::new()),
        Err(e) => anyhow::bail!("reading {}: {e}", path.display()),
    }
}

/// Writes the rows agreed, whole: beside it, synced, then renamed over it. After the
/// enrolments file (a crash between the two sends the site's rows back to it, which changes
/// nothing; the other order would undo the site's changes).
fn write_agreed(path: &Path, rows: &Rows) -> anyhow::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("json.part");
    let text = serde_json::to_vec_pretty(&enrol_rows::entries(rows))?;
    let said = |e: std::io::Error| anyhow::anyhow!("writing {}: {e}", path.display());
    let mut f = std::fs::File::create(&tmp).map_err(said)?;
    f.write_all(&text)
        .and_then(|()| f.sync_data())
        .map_err(said)?;
    std::fs::rename(&tmp, path).map_err(said)
}

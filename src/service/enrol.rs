//! Enrolment at run time: a MAC added to a pool in the enrolments file
//! (`config::enrolments::add`), then the config reloaded as SIGHUP reloads it (`app` answers
//! the asks this sends), so the client boots at its next request with no restart. For
//! `POST /api/v1/clients`, `POST /api/v1/clients/MAC/remove` and for the clients a `discover` pool takes (`Enroller::discovered`,
//! from the DHCP services: queued, one at a time, never holding up an answer).

use crate::config::enrolments::{self, Enrolment, Refused};
use crate::config::{Config, Mac};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where a reload's answer goes: the generation served after it, or why it was refused.
pub type ReloadReply = tokio::sync::oneshot::Sender<Result<u64, String>>;

/// How long an enrolment waits for its reload.
const RELOAD_WAIT: Duration = Duration::from_secs(30);
/// `discover` enrolments queued at most; a client beyond them is enrolled at a later request.
const DISCOVERED_QUEUED: usize = 256;

/// Enrols, one at a time, and has the config reloaded after each.
pub struct Enroller {
    /// `app`'s reloads (`None`: a service started alone, which cannot reload).
    reload: Option<tokio::sync::mpsc::Sender<ReloadReply>>,
    /// One enrolment at a time in this daemon (the file's lock orders it with the CLI).
    one: tokio::sync::Mutex<()>,
    /// The MACs a `discover` pool took whose enrolment is queued or under way.
    queued: Mutex<HashSet<Mac>>,
}

/// An enrolment made and served.
#[derive(Debug, Clone)]
pub struct Enrolled {
    /// The enrolments file it was written to.
    pub file: PathBuf,
    /// The config generation that serves it.
    pub generation: u64,
}

/// Why an enrolment failed.
#[derive(Debug)]
pub enum Failed {
    /// Refused: nothing changed (`enrolments::Refused`).
    Refused(Refused),
    /// Written to the file, but the reload that serves it did not happen (its reason).
    NotReloaded(PathBuf, String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Refused(why) => write!(f, "{why}"),
            Failed::NotReloaded(file, why) => write!(
                f,
                "written to {}, but the config was not reloaded: {why}",
                file.display()
            ),
        }
    }
}

impl Enroller {
    pub fn new(reload: Option<tokio::sync::mpsc::Sender<ReloadReply>>) -> Enroller {
        Enroller {
            reload,
            one: tokio::sync::Mutex::new(()),
            queued: Mutex::new(HashSet::new()),
        }
    }

    /// Adds `enrolment` to the enrolments file of `config`'s file, then reloads the config.
    pub async fn enrol(&self, config: &Config, enrolment: Enrolment) -> Result<Enrolled, Failed> {
        let file = config.file.clone();
        self.change(move || enrolments::add(&file, &enrolment))
            .await
    }

    /// Takes `mac` out of the enrolments file of `config`'s file, then reloads the config.
    pub async fn unenrol(&self, config: &Config, mac: Mac) -> Result<Enrolled, Failed> {
        let file = config.file.clone();
        self.change(move || enrolments::remove(&file, mac)).await
    }

    /// `edit` of the enrolments file, one at a time, then the config reloaded.
    async fn change(
        &self,
        edit: impl FnOnce() -> Result<PathBuf, Refused> + Send + 'static,
    ) -> Result<Enrolled, Failed> {
        let _one = self.one.lock().await;
        let done = tokio::task::spawn_blocking(edit)
            .await
            .map_err(|e| Failed::Refused(Refused::Io(e.to_string())))?;
        let file = done.map_err(Failed::Refused)?;
        let not = |why: String| Failed::NotReloaded(file.clone(), why);
        let Some(reload) = &self.reload else {
            return Err(not(
                "this server cannot reload (a service started alone)".into()
            ));
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        reload
            .send(reply)
            .await
            .map_err(|_| not("the daemon is stopping".into()))?;
        match tokio::time::timeout(RELOAD_WAIT, answer).await {
            Ok(Ok(Ok(generation))) => Ok(Enrolled {
                file: file.clone(),
                generation,
            }),
            Ok(Ok(Err(refused))) => Err(not(refused)),
            _ => Err(not("the reload did not answer".into())),
        }
    }

    /// A client no pool lists asked and a `discover` pool, `pool`, took it: it is enrolled
    /// there, named by its MAC, in the background (once at a time per MAC; when too many are
    /// queued, at a later request).
    pub fn discovered(self: &Arc<Self>, config: Arc<Config>, mac: Mac, pool: &str) {
        {
            let mut queued = self.queued.lock().unwrap_or_else(|e| e.into_inner());
            if queued.len() >= DISCOVERED_QUEUED || !queued.insert(mac) {
                return;
            }
        }
        let enrolment = Enrolment {
            mac,
            pool: pool.to_string(),
            name: Some(name_by_mac(mac)),
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let me = self.clone();
        runtime.spawn(async move {
            match me.enrol(&config, enrolment.clone()).await {
                Ok(done) => tracing::info!(%mac, pool = %enrolment.pool,
                    name = enrolment.name.as_deref().unwrap_or("-"), file = %done.file.display(),
                    "client enrolled by its discover pool"),
                Err(e) => tracing::warn!(%mac, pool = %enrolment.pool, error = %e,
                    "client of a discover pool not enrolled"),
            }
            me.queued
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&mac);
        });
    }
}

/// The name a `discover` pool gives a client: its MAC, written as a host name may be
/// (`52-54-00-77-00-01`).
pub fn name_by_mac(mac: Mac) -> String {
    mac.to_string().replace(':', "-")
}

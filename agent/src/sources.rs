//! The servers the agent fetches from, and the failover between them: every fetch goes to the
//! source that answered last; one that fails (refused or reset connection, no progress for
//! `http::IO_TIMEOUT`, an HTTP error, a body its check refuses) hands the fetch to the next
//! source at once, logged. A fetch gives up only when every source refused it `ATTEMPTS`
//! times (they answer, wrongly), or when no source gave it anything for `GIVE_UP`: until
//! then a reader waits, it does not fail. A fetch that took `SLOW` or more is logged with its
//! time: the stall its reader saw.

use crate::http::{self, Conn, Url};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Refusals of one fetch by each source before it fails (a chunk every server holds wrong).
pub const ATTEMPTS: u32 = 5;
/// How long a fetch goes on while no source gives it anything (every one down or silent)
/// before the read fails with EIO. The kernel's NBD client waits for a reply that long
/// (Debian's initrd gives nbd-client no `-t`, so the kernel sets no request timeout).
pub const GIVE_UP: Duration = Duration::from_secs(60);
/// A fetch that took this long or longer (its failures and retries included) is logged with
/// its time: the stall a reader waiting on it saw, e.g. across a server's death.
pub const SLOW: Duration = Duration::from_secs(1);
/// The pause after a round in which every source failed: 0.1 s, doubled to 1 s at most.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// One server: its manifest's URL (`.../blocks/DIGEST`), its idle kept-alive connections,
/// and what it gave.
pub struct Source {
    pub url: Url,
    conns: Mutex<Vec<Conn>>,
    /// Fetches it answered and that were taken.
    pub served: AtomicU64,
    /// Fetches that failed on it and went to the next source.
    pub failed: AtomicU64,
}

/// Why one try failed.
enum Failure {
    /// No answer: the connection, or no progress in time.
    Gone(String),
    /// An answer not taken: an HTTP error, or a body the check refused.
    Refused(String),
}

/// The agent's sources, in the order given, and the one fetches go to first.
pub struct Sources {
    pub list: Vec<Source>,
    current: AtomicUsize,
}

impl Sources {
    /// At least one URL.
    pub fn new(urls: Vec<Url>) -> Result<Sources, String> {
        if urls.is_empty() {
            return Err("no source given".into());
        }
        let list = urls
            .into_iter()
            .map(|url| Source {
                url,
                conns: Mutex::new(Vec::new()),
                served: AtomicU64::new(0),
                failed: AtomicU64::new(0),
            })
            .collect();
        Ok(Sources {
            list,
            current: AtomicUsize::new(0),
        })
    }

    /// The source fetches go to first: the one that answered last.
    pub fn current(&self) -> &Source {
        &self.list[self.current.load(Ordering::Relaxed) % self.list.len()]
    }

    /// GETs `suffix` below each source's manifest URL ("" for the manifest itself, `/I` for
    /// chunk I) until `check` takes a body, moving to the next source after each failure;
    /// each body is read into `buffer(its length)`.
    pub fn fetch<T, B: std::ops::DerefMut<Target = [u8]>>(
        &self,
        suffix: &str,
        max: u64,
        what: &str,
        buffer: impl Fn(usize) -> B,
        mut check: impl FnMut(&[u8]) -> Result<T, String>,
    ) -> Result<(B, T), String> {
        let n = self.list.len();
        let began = Instant::now();
        let (mut refused, mut failed_in_round, mut tries) = (0, 0, 0);
        let mut pause = FIRST_PAUSE;
        let mut i = self.current.load(Ordering::Relaxed) % n;
        loop {
            let source = &self.list[i];
            let url = source.url.with_path(format!("{}{suffix}", source.url.path));
            let tried = get(&source.conns, &url, max, &buffer)
                .map_err(Failure::Gone)
                .and_then(|b| match check(&b) {
                    Ok(v) => Ok((b, v)),
                    Err(e) => Err(Failure::Refused(e)),
                });
            let why = match tried {
                Ok(got) => {
                    source.served.fetch_add(1, Ordering::Relaxed);
                    let was = self.current.swap(i, Ordering::Relaxed) % n;
                    if was != i {
                        eprintln!(
                            "bootpool-agent: fetching from {} now (was {})",
                            source.url.authority, self.list[was].url.authority
                        );
                    }
                    let took = began.elapsed();
                    if took >= SLOW {
                        eprintln!(
                            "bootpool-agent: {what}: stalled {:.1} s, fetched from {} after {} failed tries",
                            took.as_secs_f64(),
                            source.url.authority,
                            tries
                        );
                    }
                    return Ok(got);
                }
                Err(Failure::Gone(e)) => e,
                Err(Failure::Refused(e)) => {
                    refused += 1;
                    e
                }
            };
            source.failed.fetch_add(1, Ordering::Relaxed);
            tries += 1;
            let last = format!("http://{}{}: {why}", url.authority, url.path);
            if refused >= ATTEMPTS as usize * n {
                eprintln!("bootpool-agent: {what}: {last}; refused {refused} times, giving up");
                return Err(last);
            }
            if began.elapsed() >= GIVE_UP {
                eprintln!(
                    "bootpool-agent: {what}: {last}; no source gave it in {} s, giving up",
                    GIVE_UP.as_secs()
                );
                return Err(format!(
                    "no source gave it in {} s, the last: {last}",
                    GIVE_UP.as_secs()
                ));
            }
            i = (i + 1) % n;
            eprintln!(
                "bootpool-agent: {what}: {last}; trying {}",
                self.list[i].url.authority
            );
            failed_in_round += 1;
            if failed_in_round >= n {
                failed_in_round = 0;
                std::thread::sleep(pause);
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
    }
}

/// One GET on an idle kept-alive connection, or a new one: a kept connection the server has
/// closed since (its idle timeout) is dropped and the GET made again on a new one at once.
fn get<B: std::ops::DerefMut<Target = [u8]>>(
    conns: &Mutex<Vec<Conn>>,
    url: &Url,
    max: u64,
    buffer: &impl Fn(usize) -> B,
) -> Result<B, String> {
    let idle = conns.lock().unwrap_or_else(|e| e.into_inner()).pop();
    if let Some(mut conn) = idle {
        match conn.get_into(url, max, buffer) {
            Err(http::Error::Io(_)) => {}
            got => {
                if conn.reusable() {
                    conns.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
                }
                return got.map_err(|e| e.to_string());
            }
        }
    }
    let mut conn =
        Conn::connect(url).map_err(|e| format!("connecting to {}: {e}", url.authority))?;
    let got = conn.get_into(url, max, buffer);
    if conn.reusable() && !matches!(got, Err(http::Error::Io(_))) {
        conns.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
    }
    got.map_err(|e| e.to_string())
}

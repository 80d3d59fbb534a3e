//! Which connection gives its slot up: each open connection's last request, and the longest
//! idle one evicted when a newcomer finds every slot taken.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Open connections that may be asked to give their slot up: each one's last request and the
/// token that ends it.
#[derive(Default)]
pub(super) struct IdleConns {
    conns: std::sync::Mutex<HashMap<u64, (Arc<AtomicU64>, CancellationToken)>>,
    next: AtomicU64,
    epoch: std::sync::OnceLock<Instant>,
}

impl IdleConns {
    fn now_ms(&self) -> u64 {
        self.epoch.get_or_init(Instant::now).elapsed().as_millis() as u64
    }

    pub(super) fn register(self: &Arc<Self>) -> Activity {
        let id = self.next.fetch_add(1, Relaxed);
        let last = Arc::new(AtomicU64::new(self.now_ms()));
        let evict = CancellationToken::new();
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        conns.insert(id, (last.clone(), evict.clone()));
        Activity {
            id,
            last,
            evict,
            owner: self.clone(),
        }
    }

    /// Ends the connection idle longest, if it has been idle `at_least`; true if one was.
    pub(super) fn evict_one(&self, at_least: Duration) -> bool {
        let now = self.now_ms();
        let conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let oldest = conns
            .values()
            .filter(|(_, evict)| !evict.is_cancelled())
            .min_by_key(|(last, _)| last.load(Relaxed));
        match oldest {
            Some((last, evict))
                if now.saturating_sub(last.load(Relaxed)) >= at_least.as_millis() as u64 =>
            {
                evict.cancel();
                true
            }
            _ => false,
        }
    }
}

/// One connection's entry in `IdleConns`, removed when dropped.
pub(super) struct Activity {
    id: u64,
    last: Arc<AtomicU64>,
    pub(super) evict: CancellationToken,
    owner: Arc<IdleConns>,
}

impl Activity {
    pub(super) fn touch(&self) {
        self.last.store(self.owner.now_ms(), Relaxed);
    }
}

impl Drop for Activity {
    fn drop(&mut self) {
        let mut conns = self.owner.conns.lock().unwrap_or_else(|e| e.into_inner());
        conns.remove(&self.id);
    }
}

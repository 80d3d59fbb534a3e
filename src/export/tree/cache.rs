//! The tree's bounded caches: second-chance (CLOCK) eviction, the LOOKUP answers kept
//! outside listings, open files, and how many of each the process limits allow.

use super::handle::TreeHandle;
use super::shared::{FILE_CACHE_MAX, FILE_CACHE_MIN, FILE_CACHE_SHARE, SMALL_MAP_SHARE};
use crate::export::mapping::Mapping;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// Values by key, up to `cap`. A full cache evicts by second chance (CLOCK): an entry
/// used since the hand last passed it stays, so a boot's hot files are not dropped with the
/// rest as they were when the cache was emptied whole.
pub(super) struct Clock<K, V> {
    pub(super) map: HashMap<K, Slot<V>>,
    /// The hand's order; may hold keys removed since (skipped).
    pub(super) ring: VecDeque<K>,
    pub(super) cap: usize,
}

pub(super) struct Slot<V> {
    pub(super) value: V,
    /// Used since the hand last passed.
    pub(super) used: bool,
}

impl<K: std::hash::Hash + Eq + Clone, V> Clock<K, V> {
    pub(super) fn new(cap: usize) -> Clock<K, V> {
        Clock {
            map: HashMap::new(),
            ring: VecDeque::new(),
            cap: cap.max(1),
        }
    }
    pub(super) fn get(&mut self, h: &K) -> Option<&mut V> {
        let slot = self.map.get_mut(h)?;
        slot.used = true;
        Some(&mut slot.value)
    }
    /// Adds or replaces `h`'s value; returns what left the cache, to be dropped after the
    /// lock is let go (closing a file or unmapping one is a system call).
    pub(super) fn insert(&mut self, h: K, value: V) -> Vec<V> {
        let slot = Slot { value, used: false };
        if let Some(old) = self.map.insert(h.clone(), slot) {
            return vec![old.value];
        }
        let mut gone = Vec::new();
        while self.map.len() > self.cap {
            let Some(old) = self.ring.pop_front() else {
                break;
            };
            match self.map.get_mut(&old) {
                Some(slot) if slot.used => {
                    slot.used = false;
                    self.ring.push_back(old);
                }
                Some(_) => gone.extend(self.map.remove(&old).map(|s| s.value)),
                None => {}
            }
        }
        self.ring.push_back(h);
        if self.ring.len() > 2 * self.cap {
            self.ring.retain(|h| self.map.contains_key(h));
        }
        gone
    }
    pub(super) fn remove(&mut self, h: &K) -> Option<V> {
        self.map.remove(h).map(|s| s.value)
    }
}

/// A name looked up in a folder with no listing cached (see `Listings::names`).
#[derive(Clone, Copy)]
pub(super) struct Named {
    /// The child's handle; None: no such name.
    pub(super) child: Option<TreeHandle>,
    /// The folder's mtime then: names are added, removed and renamed only with a new one.
    pub(super) dir_mtime: (u32, u32),
    pub(super) at: Instant,
}

/// Whether a folder whose mtime is `mtime` may be cached: one changed within the last
/// second may change again within the same clock tick, which leaves its mtime as it is.
pub(super) fn settled(mtime: (u32, u32)) -> bool {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    now > u64::from(mtime.0) + 1
}

/// A file kept open (see `Reads::files`).
pub(super) struct OpenFile {
    pub(super) file: Arc<File>,
    /// Made on the file's first big cached READ (see `Reads::mapped`), dropped with it.
    pub(super) mapping: Option<Arc<Mapping>>,
}

/// How many files to keep open: a share of the process's descriptor limit.
pub(super) fn file_cache_size() -> usize {
    let soft = match crate::sys::process::open_file_limit() {
        Ok((soft, _)) => usize::try_from(soft).unwrap_or(usize::MAX),
        Err(_) => 1024,
    };
    (soft / FILE_CACHE_SHARE).clamp(FILE_CACHE_MIN, FILE_CACHE_MAX)
}

/// How many small files to keep mapped: a share of the kernel's limit on a process's
/// mappings (`vm.max_map_count`, 65,530 unless raised), within these bounds.
pub(super) fn small_map_cache_size() -> usize {
    let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(65_530);
    (limit / SMALL_MAP_SHARE).clamp(FILE_CACHE_MIN, FILE_CACHE_MAX)
}

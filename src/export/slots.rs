//! An append-only list with stable places: entries are only ever added, never moved, so a
//! reference to one stays good while more are added from another thread. What lets the NFS
//! tree learn an image revision at runtime while its connections index it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

const CHUNK: usize = 64;
const CHUNKS: usize = 256;

pub struct Slots<T> {
    chunks: [OnceLock<Box<[OnceLock<T>]>>; CHUNKS],
    len: AtomicUsize,
    adding: Mutex<()>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            chunks: std::array::from_fn(|_| OnceLock::new()),
            len: AtomicUsize::new(0),
            adding: Mutex::new(()),
        }
    }
}

impl<T> Slots<T> {
    /// The most entries a list holds.
    pub const CAPACITY: usize = CHUNK * CHUNKS;

    /// Adds `v` at the end; its index, or None when full.
    pub fn push(&self, v: T) -> Option<usize> {
        let _one = self.adding.lock().unwrap_or_else(|e| e.into_inner());
        let i = self.len.load(Ordering::Acquire);
        if i >= Self::CAPACITY {
            return None;
        }
        let chunk =
            self.chunks[i / CHUNK].get_or_init(|| (0..CHUNK).map(|_| OnceLock::new()).collect());
        let _ = chunk[i % CHUNK].set(v);
        self.len.store(i + 1, Ordering::Release);
        Some(i)
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len() {
            return None;
        }
        self.chunks[i / CHUNK].get()?[i % CHUNK].get()
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

impl<T> std::ops::Index<usize> for Slots<T> {
    type Output = T;
    fn index(&self, i: usize) -> &T {
        self.get(i).expect("an index this list gave out")
    }
}

impl<T> FromIterator<T> for Slots<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let s = Slots::default();
        for v in iter {
            let _ = s.push(v);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_stay_while_entries_are_added() {
        let s: Slots<String> = (0..3).map(|i| i.to_string()).collect();
        let first: &String = &s[0];
        for i in 3..200 {
            assert_eq!(s.push(i.to_string()), Some(i));
        }
        assert_eq!(first, "0");
        assert_eq!(s.len(), 200);
        assert_eq!(s.iter().nth(150).map(String::as_str), Some("150"));
        assert!(s.get(200).is_none());
    }
}

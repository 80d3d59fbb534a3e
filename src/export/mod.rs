//! What the root exports serve: read-only trees with stable handles (NFS), block images
//! (NBD), and per-client copy-on-write overlays over those images. The only code that turns
//! client-supplied names into paths.

pub mod addition;
pub mod boot_files;
pub mod cow;
pub mod image;
pub mod mapping;
pub mod slots;
pub mod tree;

/// A mutex's guard even if a holder panicked: a panic elsewhere must not take an export down
/// with it (the tree's caches and the images held in memory stay usable).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

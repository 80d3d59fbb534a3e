//! What one connection reads from: its image, and the client's copy-on-write overlay on top
//! when the export is writable; whether the image alone answers a READ.

use crate::export::cow::Overlay;
use crate::export::image::BlockImage;
use std::sync::{Arc, RwLock};

/// What one connection reads from: the image, and the client's overlay on top if writable.
pub(super) struct Source {
    pub(super) image: Arc<BlockImage>,
    pub(super) overlay: Option<Arc<RwLock<Overlay>>>,
}

impl Source {
    /// Whether the base image alone answers a READ of `len` at `offset`: no overlay, or
    /// one without a block of that range. A READ that overlaps a WRITE not yet answered
    /// may see either (the NBD document leaves their order to the server); a WRITE already
    /// answered is in the overlay, so a later READ is not sent from the base. False when a
    /// write holds the overlay's lock (it may be waiting for the disk): the READ then
    /// goes to a blocking thread.
    pub(super) fn base_only(&self, offset: u64, len: u32) -> bool {
        match &self.overlay {
            None => true,
            Some(o) => o
                .try_read()
                .is_ok_and(|o| o.untouched(offset, u64::from(len))),
        }
    }
}

//! Images with revisions: `bootpool image import|list|activate|rollback|prune` and what the
//! daemon serves of them. An image folder (`images.NAME.dir`) holding `revs/` keeps each
//! imported revision whole in `revs/ID/` (ID: the content hash's first 12 hex digits) and
//! names the one boots get in `active`; a boot is handed names that carry its revision, so
//! clients already running keep theirs (`serve.rs`).

pub mod bootable;
pub mod cli;
pub mod copies;
pub mod cpio;
pub mod import;
pub mod initrd;
pub mod progress;
pub mod serve;
pub mod squashfs;
pub mod store;
pub mod tar;
pub mod unpack;
pub mod usage;
pub mod wire;

//! Images with revisions: `bootpool image import|exec|shell|list|activate|rollback|prune`
//! and what the daemon serves of them. An image folder (`images.NAME.dir`) holding `revs/`
//! keeps each imported revision in `revs/ID/` (ID: the content hash's first 12 hex digits),
//! its files hard links to the folder's content-addressed store (`objects.rs`), and names
//! the one boots get in `active`; a boot is handed names that carry its revision, so clients
//! already running keep theirs (`serve.rs`).

pub mod blocks;
pub mod blocks_file;
pub mod bootable;
pub mod cli;
pub mod copies;
pub mod cpio;
pub mod demand;
pub mod exec;
pub mod fetch;
pub mod follow;
pub mod import;
pub mod initrd;
pub mod inventory;
pub mod manifest;
pub mod manifest_delta;
pub mod objects;
pub mod progress;
pub mod pull;
pub mod pull_file;
pub mod serve;
pub mod squashfs;
pub mod store;
pub mod tar;
pub mod unpack;
pub mod usage;
pub mod verify;
pub mod wire;

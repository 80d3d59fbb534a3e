//! What the root exports serve: read-only trees with stable handles (NFS), block images
//! (NBD), and per-client copy-on-write overlays over those images. The only code that turns
//! client-supplied names into paths.

pub mod boot_files;
pub mod cow;
pub mod image;
pub mod mapping;
pub mod slots;
pub mod tree;

//! What the root exports serve: read-only trees with stable handles (NFS) and block images
//! (NBD). The only code that turns client-supplied names into paths.

pub mod image;
pub mod tree;

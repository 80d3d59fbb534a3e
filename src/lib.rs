//! bootpool: boots rooms of diskless machines over the network and records how each boot went.
//!
//! The code map (ARCHITECTURE.md has the long form):
//! - `config`: pools.yaml -> checked types. The only code that sees raw YAML.
//! - `boot`: policy. Which pool, which loader, which script, which kernel command line.
//! - `proto`: wire codecs, pure and total. No sockets, no files, no clock.
//! - `export`: what NFS and NBD serve. The only code that builds paths into images.
//! - `service`: I/O shells, one per listener. They serve the sockets `app` gives them.
//! - `steer`: link steering: which server link a client boots from, fair shares, pacing.
//! - `log_limit`: log lines rate-limited per call site.
//! - `record`: typed boot events -> boots and phases, stored by one writer (SQLite in the state
//!   folder, or PostgreSQL) and replayed at start.
//! - `image`: images with revisions: import (tree, tarball, OCI), activate, roll back,
//!   prune, and the revision-specific names a boot is handed.
//! - `sys`: the OS-level code (`unsafe`, epoll, mappings, rlimits, netlink and packet sockets,
//!   namespaces), in small safe wrappers with a SAFETY comment on every `unsafe` block.
//! - `trace`: boot traces (what a client asked for, in order, with times) and their format.
//! - `app`: the composition root: binds sockets, starts services, waits.
//!
//! The rooms' order, which imports run down, is `tidy.rs`'s `ROOMS` (ARCHITECTURE.md). The
//! instruments (the lab, the storm, the trace export) are a crate of their own above this one,
//! `instruments/` (`bootpool-instruments`); nothing here names them.

#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod app;
pub mod boot;
pub mod config;
pub mod export;
pub mod image;
pub mod log_limit;
pub mod metrics;
pub mod proto;
pub mod record;
pub mod service;
pub mod shutdown;
pub mod site;
pub mod steer;
pub mod sys;
pub mod trace;

#[cfg(test)]
mod tidy;

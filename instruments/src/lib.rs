//! bootpool's instruments, apart from the daemon: they start a daemon, drive rooms of clients
//! against it and read what it recorded, through the daemon's library (`bootpool::`) and its
//! API. The daemon's crate never names this one, so it links none of the storm's clients.
//!
//! The rooms, from the ground up (`src/tidy.rs`'s `INSTRUMENT_ROOMS`; every `bootpool::` room
//! is below them all):
//! - `trace`: `bootpool trace`, listing and exporting the traces the daemon kept.
//! - `lab`: the virtual room: namespace, bridge, taps, qemu clients.
//! - `storm`: the 08:00 storm, simulated: many clients replaying real boots in a private room.

#![forbid(unsafe_code)]

pub mod lab;
pub mod storm;
pub mod trace;

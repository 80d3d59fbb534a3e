//! Boot traces: what one client asked for during its boot, in order, with times, so that a
//! storm can replay real boots from many simulated clients (docs/trace.md).
//! - `format`: the trace file format and the closed-loop gates of a replay (pure).
//!
//! The server's side, writing the traces of clients of pools with `trace: true`, is the
//! recorder's (`record::trace`); `bootpool trace`, listing and exporting the kept traces, is
//! the instruments' (`instruments/src/trace.rs`).

pub mod format;

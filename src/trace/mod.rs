//! Boot traces: what one client asked for during its boot, in order, with times, so that a
//! storm can replay real boots from many simulated clients (docs/trace.md).
//! - `format`: the trace file format and the closed-loop gates of a replay (pure).
//! - `export`: `bootpool trace`, listing and exporting the kept traces.
//!
//! The server's side, writing the traces of clients of pools with `trace: true`, is the
//! recorder's (`record::trace`).

pub mod export;
pub mod format;

//! Boot traces: what one client asked for during its boot, in order, with times, so that a
//! storm can replay real boots from many simulated clients (docs/trace.md).
//! - `format`: the trace file format and the closed-loop gates of a replay (pure).
//! - `export`: `bootpool trace`, listing and exporting the kept traces.
//! - `recorder`: the server side, writing the traces of clients of pools with `trace: true`.

pub mod export;
pub mod format;
pub mod recorder;

pub use recorder::Tracer;

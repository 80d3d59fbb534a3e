//! How a boot stands at a moment, as the API, the wave summaries, the stall rule and
//! /metrics all name it: one answer for all of them (pure).

use super::event::Micros;
use super::timeline::{Boot, BootResult};

/// A boot that has not reported up and sent nothing for this long has timed out. Five minutes
/// is far beyond any phase of a healthy boot, even 40 clients at once under emulation.
pub const SILENCE_S: f64 = 300.0;

/// How a boot stands at `now`, as the API names it: `booted` (reported or inferred),
/// `failed`, `running`, or `timed_out` (running, but silent for `SILENCE_S`, or its client
/// gone before it was up). The one answer for the boots, the wave summaries and /metrics.
pub fn result_at(b: &Boot, now: Micros) -> &'static str {
    match b.result {
        BootResult::Booted => "booted",
        BootResult::Failed => "failed",
        BootResult::Running if b.is_up() => "booted",
        BootResult::Running if b.gone.is_some() => "timed_out",
        BootResult::Running if (now - b.last_event) as f64 / 1e6 > SILENCE_S => "timed_out",
        BootResult::Running => "running",
    }
}

/// Where the machine of a boot stands at `now`, as the room's tiles show it: `up` (booted and
/// not gone), `was_up` (booted, then its client went away: it shut down, powered off or
/// restarted), `booting` (running), `failed`, or `timed_out`. Unlike `result_at`, which says
/// how the boot ended, this says whether the machine is up now.
pub fn now_at(b: &Boot, now: Micros) -> &'static str {
    match result_at(b, now) {
        "booted" if b.gone.is_some() => "was_up",
        "booted" => "up",
        "running" => "booting",
        other => other,
    }
}

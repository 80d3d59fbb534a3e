//! `pools.NAME.wake`, a pool's Wake-on-LAN schedule as checked (`check_wake.rs`): the local
//! minute of the day and the weekdays its machines are woken on, and how many a second.

/// When a pool's machines are woken, in the server's local time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeSchedule {
    /// Minutes after local midnight (`at: "07:45"` is 465).
    pub minute: u16,
    /// Monday first: the days it wakes on (`days`, default every day).
    pub days: [bool; 7],
    /// Wakes a second (`per_second`), under the links' bound (`boot::wake::pace`).
    pub per_second: Option<u32>,
}

/// The day names `days` takes, Monday first.
pub const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

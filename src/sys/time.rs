//! The local time zone: the offset from UTC of local time at a moment (`localtime_r`'s
//! `tm_gmtoff`, from `TZ` or /etc/localtime as the C library reads them), for dates written
//! for people.

/// Seconds east of UTC of local time at `unix_secs`; 0 when the C library cannot say.
pub fn utc_offset(unix_secs: i64) -> i64 {
    let t: libc::time_t = unix_secs as libc::time_t;
    // SAFETY: an all-zero `tm` is a valid value of the plain C struct (its pointer field
    // `tm_zone` null), which localtime_r overwrites.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live locals of the right types for the call's duration;
    // localtime_r is the reentrant form and keeps neither.
    let done = unsafe { libc::localtime_r(&t, &mut tm) };
    if done.is_null() { 0 } else { tm.tm_gmtoff }
}

//! The local time zone's offset from UTC at an instant (`localtime_r`'s `tm_gmtoff`, after
//! `tzset` reads `TZ` or /etc/localtime), for schedules written in local time.

/// Seconds east of UTC at Unix time `unix`; 0 when the C library cannot say.
pub fn local_offset(unix: i64) -> i64 {
    let t: libc::time_t = unix as libc::time_t;
    // SAFETY: `tm` is a plain C struct for which all-zero bytes are a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: `t` and `tm` are valid for the call; localtime_r is the reentrant form, writing
    // only into `tm`, and returns null on failure, which is checked.
    let done = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if done { tm.tm_gmtoff } else { 0 }
}

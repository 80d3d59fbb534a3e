//! Dates for people: Unix times written as local time, ISO-like (`2026-12-06 07:58:12`), and
//! read back from what an admin types (`--since 2026-12-06T07:00`, `--last 2h`). The time
//! zone is the C library's (`TZ`, else /etc/localtime: `sys::time`); the calendar arithmetic
//! is pure.

use crate::sys::time::utc_offset;

/// `unix_secs` as local time, `YYYY-MM-DD HH:MM:SS`.
pub fn local(unix_secs: i64) -> String {
    at_offset(unix_secs, utc_offset(unix_secs))
}

/// `unix_secs` as the time `offset` seconds east of UTC, `YYYY-MM-DD HH:MM:SS`.
pub fn at_offset(unix_secs: i64, offset: i64) -> String {
    let t = unix_secs + offset;
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    let (y, m, d) = civil(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// A local date and time as an admin writes it (`2026-12-06`, `2026-12-06T07:00`,
/// `2026-12-06 07:00:30`), as Unix seconds.
pub fn parse_local(text: &str) -> Result<i64, String> {
    let civil = parse_civil(text)?;
    // The offset at the moment meant: guessed from the civil time read as UTC, then taken
    // again at the guess (right but for the hour a clock change repeats or skips).
    let guess = civil - utc_offset(civil);
    Ok(civil - utc_offset(guess))
}

/// `text` as seconds since the epoch of a clock reading UTC.
fn parse_civil(text: &str) -> Result<i64, String> {
    let bad = || format!("`{text}` is not a local date and time like 2026-12-06T07:00");
    let text = text.trim();
    let (date, time) = match text.split_once(['T', ' ']) {
        Some((d, t)) => (d, Some(t)),
        None => (text, None),
    };
    let num = |s: &str, lo: i64, hi: i64| -> Result<i64, String> {
        let n: i64 = s.parse().map_err(|_| bad())?;
        (lo..=hi).contains(&n).then_some(n).ok_or_else(bad)
    };
    let d: Vec<&str> = date.split('-').collect();
    let [y, m, day] = d[..] else {
        return Err(bad());
    };
    let (y, m, day) = (num(y, 1970, 9999)?, num(m, 1, 12)?, num(day, 1, 31)?);
    let mut secs = 0;
    if let Some(time) = time {
        let t: Vec<&str> = time.split(':').collect();
        let (h, min, s) = match t[..] {
            [h, min] => (h, min, "0"),
            [h, min, s] => (h, min, s),
            _ => return Err(bad()),
        };
        secs = num(h, 0, 23)? * 3600 + num(min, 0, 59)? * 60 + num(s, 0, 60)?;
    }
    Ok(days_from_civil(y, m, day) * 86_400 + secs)
}

/// The day (year, month, day) `days` after 1970-01-01 (H. Hinnant's civil calendar).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The days from 1970-01-01 to year `y`, month `m`, day `d`.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_written_and_read_back() {
        // 2026-12-06 07:00:00 UTC.
        let t = 1_796_540_400;
        assert_eq!(at_offset(t, 0), "2026-12-06 07:00:00");
        assert_eq!(at_offset(t, 3600), "2026-12-06 08:00:00");
        assert_eq!(at_offset(t, -8 * 3600), "2026-12-05 23:00:00");
        assert_eq!(at_offset(951_825_600, 0), "2000-02-29 12:00:00");
        assert_eq!(parse_civil("2026-12-06T07:00"), Ok(t));
        assert_eq!(parse_civil("2026-12-06 07:00:30"), Ok(t + 30));
        assert_eq!(parse_civil("2026-12-06"), Ok(t - 7 * 3600));
        assert_eq!(parse_civil("2000-02-29T12:00"), Ok(951_825_600));
        for bad in [
            "yesterday",
            "2026-13-01",
            "2026-12-06T25:00",
            "2026-12-06T07",
        ] {
            assert!(parse_civil(bad).unwrap_err().contains(bad), "{bad}");
        }
        // Local time, whatever the zone here: written and read back the same.
        assert_eq!(parse_local(&local(t)), Ok(t));
    }
}

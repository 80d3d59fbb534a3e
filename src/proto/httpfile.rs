//! HTTP rules for a static boot file, without I/O (RFC 9110): its validators (strong ETag from
//! size and mtime, Last-Modified), conditional requests (If-None-Match, If-Modified-Since,
//! If-Range) and a single byte range. Several ranges are answered with the whole file, which
//! the RFC allows and no boot client needs otherwise.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What a file is, as far as caches are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validators {
    pub etag: String,
    /// Whole seconds: HTTP dates have no finer resolution.
    pub modified: SystemTime,
}

impl Validators {
    pub fn new(len: u64, modified: SystemTime) -> Validators {
        let since = modified.duration_since(UNIX_EPOCH).unwrap_or_default();
        Validators {
            etag: format!(
                "\"{len:x}-{:x}.{:x}\"",
                since.as_secs(),
                since.subsec_nanos()
            ),
            modified: UNIX_EPOCH + Duration::from_secs(since.as_secs()),
        }
    }

    pub fn last_modified(&self) -> String {
        httpdate::fmt_http_date(self.modified)
    }
}

/// The request headers that matter here, as sent (None when absent).
#[derive(Debug, Clone, Copy, Default)]
pub struct Conditions<'a> {
    pub if_none_match: Option<&'a str>,
    pub if_modified_since: Option<&'a str>,
    pub range: Option<&'a str>,
    pub if_range: Option<&'a str>,
}

/// What to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// 200 with the whole file.
    Full,
    /// 304: the client's copy is current.
    NotModified,
    /// 206 with bytes `start..=end`.
    Partial { start: u64, end: u64 },
    /// 416: the range lies outside the file.
    Unsatisfiable,
}

/// Decides the answer for a GET of a file of `len` bytes.
pub fn answer(len: u64, v: &Validators, c: &Conditions) -> Answer {
    // If-None-Match wins over If-Modified-Since when both are sent (RFC 9110 13.2.2).
    if let Some(inm) = c.if_none_match {
        if etag_listed(inm, &v.etag) {
            return Answer::NotModified;
        }
    } else if let Some(since) = c
        .if_modified_since
        .and_then(|s| httpdate::parse_http_date(s).ok())
        && v.modified <= since
    {
        return Answer::NotModified;
    }
    let Some(range) = c.range else {
        return Answer::Full;
    };
    // A range on a changed file would splice two versions: If-Range says when it is safe.
    if let Some(ir) = c.if_range {
        let current = if ir.starts_with('"') {
            ir == v.etag
        } else {
            httpdate::parse_http_date(ir).is_ok_and(|d| d == v.modified)
        };
        if !current {
            return Answer::Full;
        }
    }
    parse_range(range, len)
}

/// Weak comparison over a list of entity tags, or `*` (RFC 9110 13.1.2).
fn etag_listed(list: &str, etag: &str) -> bool {
    list.split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag)
}

/// One `bytes=` range: `a-b`, `a-` or `-n`. Anything else is ignored (the whole file).
fn parse_range(header: &str, len: u64) -> Answer {
    let Some(spec) = header.trim().strip_prefix("bytes=") else {
        return Answer::Full;
    };
    if spec.contains(',') {
        return Answer::Full;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return Answer::Full;
    };
    let num = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.len() <= 19 && s.bytes().all(|c| c.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (a, b) = (a.trim(), b.trim());
    match (a.is_empty(), b.is_empty()) {
        // The last n bytes.
        (true, false) => match num(b) {
            Some(0) => Answer::Unsatisfiable,
            Some(n) if len > 0 => Answer::Partial {
                start: len.saturating_sub(n),
                end: len - 1,
            },
            Some(_) => Answer::Unsatisfiable,
            None => Answer::Full,
        },
        (false, _) => {
            let Some(start) = num(a) else {
                return Answer::Full;
            };
            let end = if b.is_empty() { Some(u64::MAX) } else { num(b) };
            match end {
                None => Answer::Full,
                Some(end) if end < start => Answer::Full,
                Some(_) if start >= len => Answer::Unsatisfiable,
                Some(end) => Answer::Partial {
                    start,
                    end: end.min(len - 1),
                },
            }
        }
        (true, true) => Answer::Full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v() -> Validators {
        Validators::new(1000, UNIX_EPOCH + Duration::new(1_700_000_000, 123))
    }

    fn range(r: &str) -> Answer {
        answer(
            1000,
            &v(),
            &Conditions {
                range: Some(r),
                ..Default::default()
            },
        )
    }

    #[test]
    fn single_ranges() {
        let p = |start, end| Answer::Partial { start, end };
        assert_eq!(range("bytes=0-99"), p(0, 99));
        assert_eq!(range("bytes=900-"), p(900, 999));
        assert_eq!(range("bytes=900-5000"), p(900, 999));
        assert_eq!(range("bytes=-100"), p(900, 999));
        assert_eq!(range("bytes=-5000"), p(0, 999));
        assert_eq!(range("bytes=999-999"), p(999, 999));
        assert_eq!(range("bytes=1000-"), Answer::Unsatisfiable);
        assert_eq!(range("bytes=-0"), Answer::Unsatisfiable);
        // Malformed, reversed or several ranges: the whole file.
        for r in [
            "bytes=5-1",
            "bytes=a-b",
            "items=0-1",
            "bytes=0-1,5-6",
            "bytes=-",
            "bytes=99999999999999999999-",
            "bytes=+1-2",
        ] {
            assert_eq!(range(r), Answer::Full, "{r}");
        }
        let empty = Validators::new(0, UNIX_EPOCH);
        let c = Conditions {
            range: Some("bytes=-5"),
            ..Default::default()
        };
        assert_eq!(answer(0, &empty, &c), Answer::Unsatisfiable);
    }

    #[test]
    fn conditionals() {
        let v = v();
        let ask = |c: Conditions| answer(1000, &v, &c);
        let etag = v.etag.clone();
        let lm = v.last_modified();
        assert_eq!(
            ask(Conditions {
                if_none_match: Some(&etag),
                ..Default::default()
            }),
            Answer::NotModified
        );
        let listed = format!("\"x\", W/{etag}");
        assert_eq!(
            ask(Conditions {
                if_none_match: Some(&listed),
                ..Default::default()
            }),
            Answer::NotModified
        );
        // A different tag wins over a date that would match.
        assert_eq!(
            ask(Conditions {
                if_none_match: Some("\"other\""),
                if_modified_since: Some(&lm),
                ..Default::default()
            }),
            Answer::Full
        );
        assert_eq!(
            ask(Conditions {
                if_modified_since: Some(&lm),
                ..Default::default()
            }),
            Answer::NotModified
        );
        let before = httpdate::fmt_http_date(v.modified - Duration::from_secs(1));
        assert_eq!(
            ask(Conditions {
                if_modified_since: Some(&before),
                ..Default::default()
            }),
            Answer::Full
        );
        // If-Range: the range only while the file is the one the client has.
        let r = Some("bytes=10-19");
        assert_eq!(
            ask(Conditions {
                range: r,
                if_range: Some(&etag),
                ..Default::default()
            }),
            Answer::Partial { start: 10, end: 19 }
        );
        assert_eq!(
            ask(Conditions {
                range: r,
                if_range: Some(&lm),
                ..Default::default()
            }),
            Answer::Partial { start: 10, end: 19 }
        );
        for stale in ["\"old\"", before.as_str(), "garbage"] {
            assert_eq!(
                ask(Conditions {
                    range: r,
                    if_range: Some(stale),
                    ..Default::default()
                }),
                Answer::Full,
                "{stale}"
            );
        }
        // A changed size or mtime changes the tag.
        assert_ne!(Validators::new(1001, v.modified).etag, etag);
        assert_ne!(
            Validators::new(1000, UNIX_EPOCH + Duration::new(1_700_000_000, 124)).etag,
            etag
        );
    }
}

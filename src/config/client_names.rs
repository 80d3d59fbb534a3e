//! A client's `name` (`pools.NAME.clients[].name`): one machine's host name, or a pattern that
//! names each MAC of a range by its place in it (`pc{n:02}`, `n[001-512]`). Read, checked and
//! expanded here, pure; `check.rs` refuses what does not fit the entry's MACs.

use std::collections::HashMap;
use std::fmt;

/// Machines one pattern may name: its names are all held at once while the file is checked
/// (for duplicates), and no room is this large.
pub const MOST_NAMED: u64 = 65_536;

/// A checked `name`: text, then perhaps a counter, then text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientName {
    prefix: String,
    counter: Option<Counter>,
    suffix: String,
}

/// The number a pattern writes for each machine: `first` for the entry's first MAC, one more
/// for each MAC after it, written with at least `width` digits (zeros in front).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counter {
    first: u64,
    width: usize,
    /// The last number it may write: `[A-B]`'s B, or the largest of `width` digits when
    /// `{n:0W}` fixed the width; `None`: any.
    last: Option<u64>,
    /// Written as `[A-B]` (else `{n...}`), for `Display`.
    bracket: bool,
}

impl ClientName {
    /// Reads `text`; `first` is the entry's `first` key (the number of its first MAC for a
    /// `{n}` pattern; default 1). `Err` says what is wrong, after the value.
    pub fn parse(text: &str, first: Option<u64>) -> Result<ClientName, String> {
        let open = text.find(['{', '[']);
        let (prefix, counter, suffix) = match open {
            None => {
                if first.is_some() {
                    return Err(
                        "is one machine's name, so `first` has nothing to count: write a \
                         pattern such as `pc{n:02}`"
                            .into(),
                    );
                }
                (text, None, "")
            }
            Some(i) => {
                let (prefix, rest) = text.split_at(i);
                let close = if rest.starts_with('{') { '}' } else { ']' };
                let end = rest
                    .find(close)
                    .ok_or_else(|| format!("has a `{}` that is never closed", &rest[..1]))?;
                let counter = Counter::parse(&rest[..=end], first)?;
                let suffix = &rest[end + 1..];
                if suffix.contains(['{', '[', '}', ']']) || prefix.contains(['}', ']']) {
                    return Err("may hold one counter only (`{n}`, `{n:0W}` or `[A-B]`)".into());
                }
                (prefix, Some(counter), suffix)
            }
        };
        let name = ClientName {
            prefix: prefix.to_string(),
            counter,
            suffix: suffix.to_string(),
        };
        host_name(&name.nth(0))?;
        if let Some(c) = counter.and_then(|c| c.last) {
            host_name(&name.render(c))?;
        }
        Ok(name)
    }

    /// Whether it names machines by their place (a counter), rather than one machine.
    pub fn is_pattern(&self) -> bool {
        self.counter.is_some()
    }

    /// How many machines it can name (`None`: any number).
    pub fn capacity(&self) -> Option<u64> {
        match self.counter {
            None => Some(1),
            Some(c) => c.last.map(|last| last - c.first + 1),
        }
    }

    /// The name of the entry's `index`-th machine (0 for its first MAC).
    pub fn nth(&self, index: u64) -> String {
        match self.counter {
            None => self.prefix.clone(),
            Some(c) => self.render(c.first + index),
        }
    }

    fn render(&self, n: u64) -> String {
        let width = self.counter.map_or(0, |c| c.width);
        format!("{}{n:0width$}{}", self.prefix, self.suffix)
    }

    /// `Err` unless a name made for `count` machines is a host name throughout (the longest
    /// is the last).
    pub fn fits(&self, count: u64) -> Result<(), String> {
        if let Some(most) = self.capacity()
            && count > most
        {
            return Err(format!(
                "`{self}` makes {most} name{}, and the entry lists {count} machines",
                if most == 1 { "" } else { "s" }
            ));
        }
        if count > 1 && self.is_pattern() && count > MOST_NAMED {
            return Err(format!(
                "names {count} machines: a pattern names at most {MOST_NAMED}"
            ));
        }
        host_name(&self.nth(count.saturating_sub(1)))
    }
}

impl Counter {
    /// `{n}`, `{n:0W}` or `[A-B]`, braces and brackets included.
    fn parse(text: &str, first: Option<u64>) -> Result<Counter, String> {
        if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            let bad = || {
                format!(
                    "has `{text}`: a bracket range is `[FIRST-LAST]` in digits, FIRST at most \
                     LAST, e.g. `[001-512]` (zeros in front fix the width)"
                )
            };
            let (a, b) = inner.split_once('-').ok_or_else(bad)?;
            let digits =
                |s: &str| !s.is_empty() && s.len() <= 9 && s.bytes().all(|c| c.is_ascii_digit());
            if !digits(a) || !digits(b) {
                return Err(bad());
            }
            let (lo, hi): (u64, u64) =
                (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
            if lo > hi {
                return Err(bad());
            }
            if first.is_some() {
                return Err(format!(
                    "has `{text}`, which says its first number itself: leave `first` out"
                ));
            }
            return Ok(Counter {
                first: lo,
                width: a.len(),
                last: Some(hi),
                bracket: true,
            });
        }
        let bad = || {
            format!(
                "has `{text}`: a counter is `{{n}}`, or `{{n:0W}}` for W digits with zeros in \
                 front (1 to 9), e.g. `pc{{n:02}}`"
            )
        };
        let inner = text
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .ok_or_else(bad)?;
        let first = first.unwrap_or(1);
        match inner {
            "n" => Ok(Counter {
                first,
                width: 0,
                last: None,
                bracket: false,
            }),
            _ => {
                let w = inner.strip_prefix("n:0").ok_or_else(bad)?;
                let width = match w.as_bytes() {
                    [d @ b'1'..=b'9'] => usize::from(d - b'0'),
                    _ => return Err(bad()),
                };
                let most = 10u64.pow(width as u32) - 1;
                if first > most {
                    return Err(format!(
                        "starts at {first}, which has more than the {width} digits of `{text}`"
                    ));
                }
                Ok(Counter {
                    first,
                    width,
                    last: Some(most),
                    bracket: false,
                })
            }
        }
    }
}

impl fmt::Display for ClientName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.prefix)?;
        match self.counter {
            None => {}
            Some(c) if c.bracket => {
                let last = c.last.unwrap_or(c.first);
                write!(f, "[{:0w$}-{last}]", c.first, w = c.width)?
            }
            Some(c) if c.width == 0 => f.write_str("{n}")?,
            Some(c) => write!(f, "{{n:0{}}}", c.width)?,
        }
        f.write_str(&self.suffix)
    }
}

/// The names given so far, each with where (host names ignore case).
#[derive(Debug, Default)]
pub struct Taken(HashMap<String, String>);

impl Taken {
    /// Where `name` was given, if it was.
    pub fn holder(&self, name: &str) -> Option<&str> {
        self.0.get(&name.to_ascii_lowercase()).map(String::as_str)
    }

    /// Notes `name` as given at `place`.
    pub fn take(&mut self, name: &str, place: String) {
        self.0.insert(name.to_ascii_lowercase(), place);
    }
}

/// `Err` unless `name` is a host name as DHCP option 12 and `systemd.hostname=` carry it:
/// labels of ASCII letters, digits and `-` (not first or last), 1 to 63 each, joined by `.`,
/// 253 in all.
pub fn host_name(name: &str) -> Result<(), String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!(
            "makes `{name}`, which is no host name: letters, digits and `-` (not first or \
             last), in labels of 1 to 63 joined by `.`"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str, first: Option<u64>, count: u64) -> Vec<String> {
        let n = ClientName::parse(text, first).unwrap();
        n.fits(count).unwrap();
        (0..count).map(|i| n.nth(i)).collect()
    }

    #[test]
    fn patterns_count_from_the_first_mac() {
        assert_eq!(names("pc{n:02}", None, 3), ["pc01", "pc02", "pc03"]);
        assert_eq!(names("pc{n}", Some(9), 2), ["pc9", "pc10"]);
        assert_eq!(names("n[001-512]", None, 2), ["n001", "n002"]);
        assert_eq!(
            names("r1-[7-9].lab", None, 3),
            ["r1-7.lab", "r1-8.lab", "r1-9.lab"]
        );
        assert_eq!(names("pc01", None, 1), ["pc01"]);
        for text in ["pc{n:02}", "n[001-512]", "pc{n}", "pc01", "a[7-9]b"] {
            assert_eq!(ClientName::parse(text, None).unwrap().to_string(), text);
        }
    }

    #[test]
    fn a_range_larger_than_its_names_is_refused() {
        let two = ClientName::parse("pc{n:02}", None).unwrap();
        assert!(two.fits(99).is_ok());
        let e = two.fits(100).unwrap_err();
        assert!(
            e.contains("makes 99 names") && e.contains("lists 100"),
            "{e}"
        );
        let e = ClientName::parse("pc{n:02}", Some(50))
            .unwrap()
            .fits(51)
            .unwrap_err();
        assert!(e.contains("makes 50 names"), "{e}");
        let e = ClientName::parse("n[001-512]", None)
            .unwrap()
            .fits(513)
            .unwrap_err();
        assert!(e.contains("makes 512 names"), "{e}");
        let e = ClientName::parse("pc01", None)
            .unwrap()
            .fits(2)
            .unwrap_err();
        assert!(e.contains("makes 1 name,"), "{e}");
        let e = ClientName::parse("pc{n}", None)
            .unwrap()
            .fits(MOST_NAMED + 1)
            .unwrap_err();
        assert!(e.contains("at most"), "{e}");
    }

    #[test]
    fn bad_patterns_and_names_say_why() {
        for (text, first, says) in [
            ("pc{n:2}", None, "a counter is"),
            ("pc{m}", None, "a counter is"),
            ("pc{n", None, "never closed"),
            ("pc[9-1]", None, "FIRST at most"),
            ("pc[a-b]", None, "in digits"),
            ("pc[1-9]", Some(3), "leave `first` out"),
            ("pc{n}{n}", None, "one counter"),
            ("pc01", Some(3), "one machine's name"),
            ("pc_01", None, "no host name"),
            ("-pc{n}", None, "no host name"),
            ("pc{n:01}", Some(10), "more than the 1 digits"),
            ("pc 1", None, "no host name"),
        ] {
            let e = ClientName::parse(text, first).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}

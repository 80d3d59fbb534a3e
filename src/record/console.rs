//! One boot's console: the lines its client sent (netconsole, iPXE's syslog), bounded.
//!
//! A boot keeps its first `HEAD_LINES` lines (at most `HEAD_BYTES`) and its last `TAIL_LINES`
//! (at most `TAIL_BYTES`); the lines between are dropped and counted. The start of a boot says
//! what the client is and what it found, the end says what became of it (a panic, a failed
//! mount); a client that keeps talking for days costs no more than 256 KiB.

use super::event::Micros;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

pub const HEAD_LINES: usize = 1000;
pub const TAIL_LINES: usize = 1000;
pub const HEAD_BYTES: usize = 128 * 1024;
pub const TAIL_BYTES: usize = 128 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// Unix microseconds of the datagram that carried it.
    pub at: Micros,
    pub text: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Console {
    head: Vec<Line>,
    tail: VecDeque<Line>,
    /// Lines dropped between the head and the tail.
    dropped: u64,
    #[serde(skip)]
    head_bytes: usize,
    #[serde(skip)]
    tail_bytes: usize,
}

impl Console {
    pub fn push(&mut self, at: Micros, text: String) {
        let len = text.len();
        if self.tail.is_empty()
            && self.head.len() < HEAD_LINES
            && self.head_bytes + len <= HEAD_BYTES
        {
            self.head_bytes += len;
            self.head.push(Line { at, text });
            return;
        }
        self.tail_bytes += len;
        self.tail.push_back(Line { at, text });
        while self.tail.len() > TAIL_LINES || self.tail_bytes > TAIL_BYTES {
            let Some(old) = self.tail.pop_front() else {
                break;
            };
            self.tail_bytes -= old.text.len();
            self.dropped += 1;
        }
    }

    /// The kept lines in order; `dropped` lines are missing between the head and the tail.
    pub fn lines(&self) -> impl Iterator<Item = &Line> {
        self.head.iter().chain(self.tail.iter())
    }

    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// How many of `lines()` come before the gap (the head).
    pub fn head_len(&self) -> usize {
        self.head.len()
    }

    pub fn is_empty(&self) -> bool {
        self.head.is_empty()
    }

    /// The stored form (JSON), one row per boot.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Back from `to_json`; the byte counts are recomputed.
    pub fn from_json(text: &str) -> Option<Console> {
        let mut c: Console = serde_json::from_str(text).ok()?;
        c.head_bytes = c.head.iter().map(|l| l.text.len()).sum();
        c.tail_bytes = c.tail.iter().map(|l| l.text.len()).sum();
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_and_the_last_lines() {
        let mut c = Console::default();
        for i in 0..(HEAD_LINES + TAIL_LINES + 500) {
            c.push(i as i64, format!("line {i}"));
        }
        assert_eq!(c.dropped(), 500);
        let lines: Vec<&str> = c.lines().map(|l| l.text.as_str()).collect();
        assert_eq!(lines.len(), HEAD_LINES + TAIL_LINES);
        assert_eq!(lines[0], "line 0");
        assert_eq!(lines[HEAD_LINES - 1], format!("line {}", HEAD_LINES - 1));
        assert_eq!(lines[HEAD_LINES], format!("line {}", HEAD_LINES + 500));
        assert_eq!(
            *lines.last().unwrap(),
            format!("line {}", HEAD_LINES + TAIL_LINES + 499)
        );
        assert_eq!(c.head_len(), HEAD_LINES);
    }

    #[test]
    fn is_bounded_in_bytes_too() {
        let mut c = Console::default();
        let big = "x".repeat(1000);
        for i in 0..2000 {
            c.push(i, big.clone());
        }
        let bytes: usize = c.lines().map(|l| l.text.len()).sum();
        assert!(bytes <= HEAD_BYTES + TAIL_BYTES, "{bytes}");
        assert_eq!(c.lines().count() as u64 + c.dropped(), 2000);
    }

    #[test]
    fn survives_its_stored_form() {
        let mut c = Console::default();
        for i in 0..(HEAD_LINES + 3) {
            c.push(i as i64, format!("l{i}"));
        }
        let back = Console::from_json(&c.to_json()).unwrap();
        assert_eq!(back, c);
        assert!(Console::from_json("{nope").is_none());
    }
}

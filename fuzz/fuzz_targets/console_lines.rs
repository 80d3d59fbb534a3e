//! Fuzzes the console datagram decoder (netconsole, extended netconsole, syslog): never a
//! panic, and what it gives stays within its documented bounds: at most `MAX_LINES` lines,
//! none empty, none longer than `MAX_LINE` bytes plus the `…` that marks a cut, and no control
//! characters but tabs.
#![no_main]

use bootpool::proto::console::{self, MAX_LINE, MAX_LINES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let lines = console::lines(data);
    assert!(lines.len() <= MAX_LINES);
    for line in &lines {
        assert!(!line.is_empty());
        assert!(line.len() <= MAX_LINE + '…'.len_utf8(), "{} bytes", line.len());
        assert!(!line.chars().any(|c| c.is_control() && c != '\t'), "{line:?}");
    }
});

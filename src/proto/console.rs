//! A client's console as it arrives over UDP: one datagram in, text lines out.
//!
//! Three senders, told apart by the first bytes:
//! - Linux netconsole, plain: the kernel's message text, one or more lines (`\n`-ended; a line
//!   may also be cut across datagrams, each piece then comes out as a line of its own).
//! - Linux netconsole, extended (`+` in `netconsole=`): `LEVEL,SEQ,TS,FLAGS[,ncfrag=OFF/LEN];MSG`
//!   followed by dictionary lines that start with a space (dropped). Fragments of one long
//!   message come out as separate lines.
//! - syslog as iPXE's syslog console (and `logger`) sends it: `<PRI>` then an RFC 3164 header
//!   (`Mmm dd hh:mm:ss HOST TAG: MSG`, every part optional as senders vary) or an RFC 5424 one
//!   (`1 TIMESTAMP HOST APP PROCID MSGID SD MSG`); the header is dropped, the message kept.
//!
//! Bytes that are not UTF-8 are replaced (lossily), control characters other than tab become
//! spaces, empty lines are dropped, a line is cut at `MAX_LINE` bytes and a datagram gives at
//! most `MAX_LINES` lines. Total: every input gives some (possibly empty) list, never a panic.

/// Longest line kept, in bytes (longer ones are cut, with `…` appended).
pub const MAX_LINE: usize = 1024;
/// Most lines one datagram gives.
pub const MAX_LINES: usize = 256;

/// The text lines of one datagram.
pub fn lines(datagram: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(datagram);
    let mut out = Vec::new();
    if let Some(rest) = syslog_pri(&text) {
        // A syslog message is one line, whatever it holds.
        push(&mut out, syslog_message(rest));
        return out;
    }
    if let Some(msg) = extended(&text) {
        for line in msg.split('\n') {
            push(&mut out, line);
        }
        return out;
    }
    for line in text.split('\n') {
        push(&mut out, line);
    }
    out
}

fn push(out: &mut Vec<String>, line: &str) {
    if out.len() >= MAX_LINES {
        return;
    }
    let clean: String = line
        .trim_end_matches('\r')
        .chars()
        .map(|c| if c.is_control() && c != '\t' { ' ' } else { c })
        .collect();
    let clean = clean.trim_end();
    if clean.trim().is_empty() {
        return;
    }
    out.push(cut(clean));
}

fn cut(s: &str) -> String {
    if s.len() <= MAX_LINE {
        return s.to_string();
    }
    let mut end = MAX_LINE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// After `<PRI>` (1 to 3 digits, at most 191), if the datagram starts with one.
fn syslog_pri(text: &str) -> Option<&str> {
    let rest = text.strip_prefix('<')?;
    let close = rest.find('>')?;
    let digits = &rest[..close];
    if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if digits.parse::<u16>().ok()? > 191 {
        return None;
    }
    Some(&rest[close + 1..])
}

/// The message of a syslog line, its header (RFC 5424 or 3164) dropped.
fn syslog_message(rest: &str) -> &str {
    let rest = rest.trim_end_matches(['\n', '\r', '\0']);
    if let Some(after) = rest.strip_prefix("1 ") {
        // TIMESTAMP HOST APP PROCID MSGID, then structured data: `-` or `[...]...`.
        let mut s = after;
        for _ in 0..5 {
            match s.split_once(' ') {
                Some((_, tail)) => s = tail,
                None => return "",
            }
        }
        let s = if let Some(t) = s.strip_prefix('-') {
            t
        } else if s.starts_with('[') {
            skip_structured(s)
        } else {
            s
        };
        let s = s.strip_prefix(' ').unwrap_or(s);
        return s.strip_prefix('\u{feff}').unwrap_or(s);
    }
    let mut s = rest;
    // `Mmm dd hh:mm:ss ` (day space-padded).
    if s.len() >= 16 && s.is_char_boundary(16) && is_3164_time(&s[..16]) {
        s = &s[16..];
    }
    // `HOST TAG: MSG` or `TAG: MSG` (iPXE: `ipxe: MSG`): drop through the first `: ` if
    // what precedes it is one or two words without spaces in them.
    if let Some((head, msg)) = s.split_once(": ")
        && head.split(' ').count() <= 2
        && !head.is_empty()
        && head.len() <= 64
    {
        return msg;
    }
    s
}

fn skip_structured(s: &str) -> &str {
    let mut rest = s;
    while rest.starts_with('[') {
        let mut escaped = false;
        let mut end = None;
        for (i, c) in rest.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                ']' if !escaped => {
                    end = Some(i);
                    break;
                }
                _ => escaped = false,
            }
        }
        match end {
            Some(i) => rest = &rest[i + 1..],
            None => return "",
        }
    }
    rest
}

fn is_3164_time(s: &str) -> bool {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let b = s.as_bytes();
    MONTHS.iter().any(|m| m.as_bytes() == &b[..3])
        && b[3] == b' '
        && (b[4] == b' ' || b[4].is_ascii_digit())
        && b[5].is_ascii_digit()
        && b[6] == b' '
        && b[7].is_ascii_digit()
        && b[8].is_ascii_digit()
        && b[9] == b':'
        && b[12] == b':'
        && b[15] == b' '
}

/// The message of an extended netconsole record, if this is one: `L,S,T,F[,…];MSG`, where
/// L, S and T are numbers; dictionary lines (` KEY=VALUE`) are dropped.
fn extended(text: &str) -> Option<String> {
    let (head, body) = text.split_once(';')?;
    let mut fields = head.split(',');
    let numeric = |f: Option<&str>| {
        f.is_some_and(|f| !f.is_empty() && f.len() <= 20 && f.bytes().all(|b| b.is_ascii_digit()))
    };
    if !(numeric(fields.next()) && numeric(fields.next()) && numeric(fields.next())) {
        return None;
    }
    let flags = fields.next()?;
    if flags.len() > 4 || flags.contains(' ') {
        return None;
    }
    for f in fields {
        if !f.starts_with("ncfrag=") {
            return None;
        }
    }
    let msg: Vec<&str> = body.split('\n').filter(|l| !l.starts_with(' ')).collect();
    Some(msg.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_netconsole_gives_each_line() {
        assert_eq!(
            lines(b"[    1.234] virtio_net virtio0 eth0: renamed\n[    1.300] next line\n"),
            [
                "[    1.234] virtio_net virtio0 eth0: renamed",
                "[    1.300] next line"
            ]
        );
        // A piece of a line (no newline) still comes out.
        assert_eq!(
            lines(b"Kernel panic - not syncing: VFS"),
            ["Kernel panic - not syncing: VFS"]
        );
        assert_eq!(lines(b"a\r\n\n\nb"), ["a", "b"]);
    }

    #[test]
    fn extended_netconsole_gives_the_message() {
        assert_eq!(
            lines(
                b"6,1234,5678901,-;EXT4-fs (nbd0): bad geometry\n SUBSYSTEM=block\n DEVICE=b43:0\n"
            ),
            ["EXT4-fs (nbd0): bad geometry"]
        );
        assert_eq!(
            lines(b"0,99,1,c,ncfrag=0/2000;Kernel panic - not syncing: first part"),
            ["Kernel panic - not syncing: first part"]
        );
        // Text with a semicolon is not mistaken for a record.
        assert_eq!(lines(b"a;b\n"), ["a;b"]);
        assert_eq!(lines(b"1,2;x"), ["1,2;x"]);
    }

    #[test]
    fn syslog_headers_are_dropped() {
        assert_eq!(
            lines(b"<6>ipxe: Configuring (net0 52:54:00:77:00:01)... ok"),
            ["Configuring (net0 52:54:00:77:00:01)... ok"]
        );
        assert_eq!(
            lines(b"<13>Dec  2 12:00:01 pc01 root: hello there\n"),
            ["hello there"]
        );
        assert_eq!(
            lines(b"<13>1 2026-12-02T12:00:01.000000+00:00 pc01 root - - [timeQuality tzKnown=\"1\" isSynced=\"0\"] hello 5424"),
            ["hello 5424"]
        );
        assert_eq!(
            lines(b"<13>1 2026-12-02T12:00:01Z pc01 app 12 id - msg"),
            ["msg"]
        );
        // A message with colons later on is kept whole after the tag.
        assert_eq!(lines(b"<3>kernel: a: b: c"), ["a: b: c"]);
        // Not a PRI: kept as text.
        assert_eq!(lines(b"<999>x"), ["<999>x"]);
        assert_eq!(lines(b"<abc>x"), ["<abc>x"]);
    }

    #[test]
    fn malformed_bytes_never_panic() {
        assert!(lines(b"").is_empty());
        assert!(lines(b"\n\n \r\n").is_empty());
        assert_eq!(lines(b"caf\xc3\xa9 \xff\xfe ok\x07"), ["café �� ok"]);
        let huge = vec![b'x'; 70_000];
        let out = lines(&huge);
        assert_eq!(out.len(), 1);
        assert!(out[0].len() <= MAX_LINE + '…'.len_utf8());
        let many = "l\n".repeat(10_000);
        assert_eq!(lines(many.as_bytes()).len(), MAX_LINES);
        // A multi-byte character at the cut is not split.
        let wide = "é".repeat(2000);
        assert!(lines(wide.as_bytes())[0].ends_with('…'));
        for junk in [
            &b"<"[..],
            b"<1",
            b"<1>",
            b"<1>1 ",
            b"<1>1 a b c d e [x",
            b"0,0,0,",
            b";",
            b"\0\0",
        ] {
            let _ = lines(junk);
        }
        // Every prefix of a real datagram decodes.
        let real = b"<13>1 2026-12-02T12:00:01Z pc01 app 12 id [a b=\"\\]\"] m\xff";
        for i in 0..real.len() {
            let _ = lines(&real[..i]);
        }
    }
}

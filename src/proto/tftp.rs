//! TFTP on the wire (RFC 1350) with option negotiation (RFC 2347 blksize 2348, timeout and
//! tsize 2349, windowsize 7440), and the sending side of a read transfer as a sans-I/O state
//! machine: it says which blocks to (re)send; the service owns sockets, files and timers.
//!
//! An option we cannot honour is ignored, never refused (`negotiate`): a `blksize` below 8, a
//! `timeout` of 0 or above 255 seconds, a `windowsize` of 0, or a value that is no number is
//! left out of the OACK, and the transfer goes on with that option's default (512-byte blocks,
//! our own retransmission interval, one block per ACK), which every client must accept. RFC
//! 2347 allows this or an ERROR 8; RFC 2348 and 2349 say a server that does not accept the
//! option ignores it. An ERROR 8 ends the transfer, and firmware that asked for a value out of
//! range (old PXE ROMs are not careful) may never ask again without it: ignoring gets it its
//! file. Values above the range are answered with our cap instead (`MAX_BLKSIZE`,
//! `MAX_WINDOWSIZE`), as RFC 2348 lets a server answer a smaller block size.

use std::fmt;

pub const RRQ: u16 = 1;
pub const WRQ: u16 = 2;
pub const DATA: u16 = 3;
pub const ACK: u16 = 4;
pub const ERROR: u16 = 5;
pub const OACK: u16 = 6;

pub const DEFAULT_BLKSIZE: u16 = 512;
/// Fits an Ethernet frame with IP and UDP headers; larger blocks would fragment.
pub const MAX_BLKSIZE: u16 = 1468;
pub const MAX_WINDOWSIZE: u16 = 64;
/// Longest request we read: a name, a mode and a handful of options.
pub const MAX_REQUEST: usize = 512;

/// RFC 1350 error codes.
pub mod err {
    pub const NOT_DEFINED: u16 = 0;
    pub const NOT_FOUND: u16 = 1;
    pub const ACCESS: u16 = 2;
    pub const ILLEGAL: u16 = 4;
    pub const UNKNOWN_TID: u16 = 5;
    /// RFC 2347: the client refuses the options (EDK2 uses it after its size probe).
    pub const OPTIONS: u16 = 8;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    Read(Request),
    Write(Request),
    Data { block: u16, data: Vec<u8> },
    Ack(u16),
    Error { code: u16, message: String },
    Oack(Vec<(String, String)>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub file: String,
    pub mode: Mode,
    /// Options as sent, names lowercased, in order.
    pub options: Vec<(String, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Octet,
    Netascii,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("shorter than an opcode")]
    Short,
    #[error("unknown opcode {0}")]
    Opcode(u16),
    #[error("request longer than {MAX_REQUEST} bytes")]
    Long,
    #[error("a string is not NUL-terminated")]
    Unterminated,
    #[error("a string is not ASCII")]
    NotAscii,
    #[error("mode `{0}` is not octet or netascii")]
    Mode(String),
    #[error("an option has no value")]
    OddOptions,
    #[error("bytes after the packet")]
    Trailing,
}

/// Reads one packet. Total: never panics, whatever the bytes.
pub fn decode(buf: &[u8]) -> Result<Packet, DecodeError> {
    let (op, body) = match buf {
        [a, b, rest @ ..] => (u16::from_be_bytes([*a, *b]), rest),
        _ => return Err(DecodeError::Short),
    };
    let u16_at = |b: &[u8]| -> Result<u16, DecodeError> {
        match b {
            [x, y, ..] => Ok(u16::from_be_bytes([*x, *y])),
            _ => Err(DecodeError::Short),
        }
    };
    match op {
        RRQ | WRQ => {
            if buf.len() > MAX_REQUEST {
                return Err(DecodeError::Long);
            }
            let mut strings = Strings(body);
            let file = strings.next_str()?.ok_or(DecodeError::Unterminated)?;
            let mode = strings.next_str()?.ok_or(DecodeError::Unterminated)?;
            let mode = match mode.to_ascii_lowercase().as_str() {
                "octet" => Mode::Octet,
                "netascii" => Mode::Netascii,
                _ => return Err(DecodeError::Mode(mode)),
            };
            let mut options = Vec::new();
            while let Some(name) = strings.next_str()? {
                let value = strings.next_str()?.ok_or(DecodeError::OddOptions)?;
                options.push((name.to_ascii_lowercase(), value));
            }
            let req = Request {
                file,
                mode,
                options,
            };
            Ok(if op == RRQ {
                Packet::Read(req)
            } else {
                Packet::Write(req)
            })
        }
        DATA => Ok(Packet::Data {
            block: u16_at(body)?,
            data: body[2..].to_vec(),
        }),
        ACK => {
            if body.len() != 2 {
                return Err(if body.len() < 2 {
                    DecodeError::Short
                } else {
                    DecodeError::Trailing
                });
            }
            Ok(Packet::Ack(u16_at(body)?))
        }
        ERROR => {
            let code = u16_at(body)?;
            // Clients are sloppy about the message: take what is there, NUL or not.
            let text = &body[2..];
            let text = text.split(|b| *b == 0).next().unwrap_or_default();
            Ok(Packet::Error {
                code,
                message: String::from_utf8_lossy(text).into_owned(),
            })
        }
        OACK => {
            let mut strings = Strings(body);
            let mut options = Vec::new();
            while let Some(name) = strings.next_str()? {
                let value = strings.next_str()?.ok_or(DecodeError::OddOptions)?;
                options.push((name, value));
            }
            Ok(Packet::Oack(options))
        }
        other => Err(DecodeError::Opcode(other)),
    }
}

/// NUL-terminated ASCII strings, one after another.
struct Strings<'a>(&'a [u8]);

impl Strings<'_> {
    /// `Ok(None)` at the clean end.
    fn next_str(&mut self) -> Result<Option<String>, DecodeError> {
        if self.0.is_empty() {
            return Ok(None);
        }
        let end = self
            .0
            .iter()
            .position(|b| *b == 0)
            .ok_or(DecodeError::Unterminated)?;
        let s = &self.0[..end];
        if !s.is_ascii() {
            return Err(DecodeError::NotAscii);
        }
        self.0 = &self.0[end + 1..];
        Ok(Some(String::from_utf8_lossy(s).into_owned()))
    }
}

/// The first four bytes of a DATA packet, for senders that build packets in place.
pub fn data_header(block: u16) -> [u8; 4] {
    let [a, b] = DATA.to_be_bytes();
    let [c, d] = block.to_be_bytes();
    [a, b, c, d]
}

pub fn encode_data(block: u16, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + data.len());
    b.extend_from_slice(&DATA.to_be_bytes());
    b.extend_from_slice(&block.to_be_bytes());
    b.extend_from_slice(data);
    b
}

pub fn encode_ack(block: u16) -> Vec<u8> {
    let mut b = ACK.to_be_bytes().to_vec();
    b.extend_from_slice(&block.to_be_bytes());
    b
}

pub fn encode_error(code: u16, message: &str) -> Vec<u8> {
    let mut b = ERROR.to_be_bytes().to_vec();
    b.extend_from_slice(&code.to_be_bytes());
    b.extend(message.bytes().filter(|c| *c != 0 && c.is_ascii()));
    b.push(0);
    b
}

pub fn encode_oack(options: &[(String, String)]) -> Vec<u8> {
    let mut b = OACK.to_be_bytes().to_vec();
    for (k, v) in options {
        b.extend_from_slice(k.as_bytes());
        b.push(0);
        b.extend_from_slice(v.as_bytes());
        b.push(0);
    }
    b
}

/// What a transfer runs with after negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub blksize: u16,
    pub windowsize: u16,
    /// Retransmission timeout the client asked for, in seconds.
    pub timeout_s: Option<u8>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            blksize: DEFAULT_BLKSIZE,
            windowsize: 1,
            timeout_s: None,
        }
    }
}

/// Accepts what we can of the client's options and says what to put in the OACK (empty: no
/// OACK, send data at once). Unknown and malformed options are ignored, as RFC 2347 asks, and
/// so are values out of range (this module's doc says why not an ERROR 8): there is no error
/// to return.
/// `size` is the transfer size (`None` when unknown, e.g. netascii before conversion).
pub fn negotiate(
    options: &[(String, String)],
    size: Option<u64>,
) -> (Settings, Vec<(String, String)>) {
    let mut s = Settings::default();
    let mut oack = Vec::new();
    for (name, value) in options {
        let Ok(n) = value.trim().parse::<u64>() else {
            continue;
        };
        match name.as_str() {
            // RFC 2348: 8..65464; we answer with at most what fits a frame.
            "blksize" if n >= 8 => {
                s.blksize = n.min(u64::from(MAX_BLKSIZE)) as u16;
                oack.push((name.clone(), s.blksize.to_string()));
            }
            // RFC 2349: 1..255 seconds; the server must accept it as is or ignore it.
            "timeout" if (1..=255).contains(&n) => {
                s.timeout_s = Some(n as u8);
                oack.push((name.clone(), n.to_string()));
            }
            // RFC 2349: a read request carries 0 and the OACK carries the size.
            "tsize" => {
                if let Some(size) = size {
                    oack.push((name.clone(), size.to_string()));
                }
            }
            // RFC 7440: 1..65535; capped to keep a burst short.
            "windowsize" if n >= 1 => {
                s.windowsize = n.min(u64::from(MAX_WINDOWSIZE)) as u16;
                oack.push((name.clone(), s.windowsize.to_string()));
            }
            _ => {}
        }
    }
    (s, oack)
}

/// The sending side of a read transfer. Blocks are counted from 1 without limit; on the
/// wire the number wraps to 0 after 65535, as most clients expect for files past 32 MiB at 512.
#[derive(Debug, Clone)]
pub struct Sender {
    size: u64,
    blksize: u64,
    window: u64,
    /// First block not yet acknowledged.
    base: u64,
    /// Number of the last block (the short or empty one).
    last: u64,
}

/// What to do after an ACK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Send these blocks (absolute numbers), in order.
    Send(std::ops::RangeInclusive<u64>),
    /// The ACK was old or a duplicate: wait.
    Wait,
    /// Every block is acknowledged.
    Done,
}

impl Sender {
    pub fn new(size: u64, s: Settings) -> Sender {
        let blksize = u64::from(s.blksize.max(1));
        Sender {
            size,
            blksize,
            window: u64::from(s.windowsize.max(1)),
            base: 1,
            // A file that is a whole number of blocks ends with an empty block.
            last: size / blksize + 1,
        }
    }

    /// The first window (or the window to resend after a timeout).
    pub fn window(&self) -> std::ops::RangeInclusive<u64> {
        self.base..=(self.base + self.window - 1).min(self.last)
    }

    /// Byte range of block `n` in the file.
    pub fn span(&self, n: u64) -> (u64, usize) {
        let start = (n - 1) * self.blksize;
        let len = self.size.saturating_sub(start).min(self.blksize);
        (start, len as usize)
    }

    pub fn wire(n: u64) -> u16 {
        n as u16
    }

    /// Bytes in the file.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes the client has acknowledged.
    pub fn acked_bytes(&self) -> u64 {
        ((self.base - 1) * self.blksize).min(self.size)
    }

    /// Takes an ACK. An ACK inside the window that is not its end means the client lost
    /// something after it: resend from there (RFC 7440 section 4).
    pub fn on_ack(&mut self, wire: u16) -> Next {
        // The ACK names a block in (base-1) ..= end of the window sent.
        let top = (self.base + self.window - 1).min(self.last);
        let Some(n) = (self.base.saturating_sub(1)..=top).find(|n| Self::wire(*n) == wire) else {
            return Next::Wait;
        };
        if n < self.base {
            // A duplicate of an ACK already taken (the Sorcerer's Apprentice bug): ignore.
            return Next::Wait;
        }
        self.base = n + 1;
        if n >= self.last {
            return Next::Done;
        }
        Next::Send(self.window())
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Octet => "octet",
            Mode::Netascii => "netascii",
        })
    }
}

/// Netascii (RFC 764 via 1350): LF becomes CR LF, a bare CR becomes CR NUL.
pub fn to_netascii(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + data.len() / 16);
    extend_netascii(&mut out, data);
    out
}

/// Appends `data` as netascii to `out`. Each byte converts on its own, so a file converts
/// piece by piece, in any cut, to the same bytes as whole.
pub fn extend_netascii(out: &mut Vec<u8>, data: &[u8]) {
    for &b in data {
        match b {
            b'\n' => out.extend_from_slice(b"\r\n"),
            b'\r' => out.extend_from_slice(b"\r\0"),
            _ => out.push(b),
        }
    }
}

/// How long `data` is as netascii.
pub fn netascii_len(data: &[u8]) -> u64 {
    data.len() as u64 + data.iter().filter(|b| matches!(b, b'\n' | b'\r')).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rrq(parts: &[&str]) -> Vec<u8> {
        let mut b = RRQ.to_be_bytes().to_vec();
        for p in parts {
            b.extend_from_slice(p.as_bytes());
            b.push(0);
        }
        b
    }

    #[test]
    fn reads_a_request_with_options() {
        let p = decode(&rrq(&[
            "ipxe.efi", "OCTET", "tsize", "0", "BlkSize", "1468",
        ]))
        .unwrap();
        assert_eq!(
            p,
            Packet::Read(Request {
                file: "ipxe.efi".into(),
                mode: Mode::Octet,
                options: vec![
                    ("tsize".into(), "0".into()),
                    ("blksize".into(), "1468".into())
                ],
            })
        );
    }

    #[test]
    fn refuses_malformed_packets() {
        assert_eq!(decode(&[]), Err(DecodeError::Short));
        assert_eq!(decode(&[0]), Err(DecodeError::Short));
        assert_eq!(decode(&[0, 9, 1]), Err(DecodeError::Opcode(9)));
        assert_eq!(decode(&[0, 1, b'a']), Err(DecodeError::Unterminated));
        assert_eq!(decode(&rrq(&["a"])), Err(DecodeError::Unterminated));
        assert_eq!(
            decode(&rrq(&["a", "mail"])),
            Err(DecodeError::Mode("mail".into()))
        );
        assert_eq!(
            decode(&rrq(&["a", "octet", "blksize"])),
            Err(DecodeError::OddOptions)
        );
        assert_eq!(decode(&[0, 4, 0]), Err(DecodeError::Short));
        assert_eq!(decode(&[0, 4, 0, 1, 2]), Err(DecodeError::Trailing));
        let mut long = rrq(&["a", "octet"]);
        long.resize(MAX_REQUEST + 1, b'x');
        assert_eq!(decode(&long), Err(DecodeError::Long));
        assert_eq!(
            decode(&[0, 1, 0xff, 0, b'o', 0]),
            Err(DecodeError::NotAscii)
        );
        let good = rrq(&["undionly.kpxe", "octet", "blksize", "1468"]);
        for n in 0..good.len() {
            let _ = decode(&good[..n]);
        }
    }

    #[test]
    fn encodes_what_decodes() {
        assert_eq!(decode(&encode_ack(7)).unwrap(), Packet::Ack(7));
        assert_eq!(
            decode(&encode_data(3, b"xyz")).unwrap(),
            Packet::Data {
                block: 3,
                data: b"xyz".to_vec()
            }
        );
        assert_eq!(
            decode(&encode_error(8, "no\0thanks")).unwrap(),
            Packet::Error {
                code: 8,
                message: "nothanks".into()
            }
        );
        let o = vec![("blksize".to_string(), "1468".to_string())];
        assert_eq!(decode(&encode_oack(&o)).unwrap(), Packet::Oack(o));
        // An ERROR without its NUL, as some clients send it.
        assert_eq!(
            decode(&[0, 5, 0, 8, b'x']).unwrap(),
            Packet::Error {
                code: 8,
                message: "x".into()
            }
        );
    }

    fn opts(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn negotiation_caps_and_ignores_what_it_must() {
        let (s, oack) = negotiate(
            &opts(&[
                ("tsize", "0"),
                ("blksize", "65464"),
                ("windowsize", "1000"),
                ("timeout", "3"),
                ("multicast", "1"),
            ]),
            Some(70_000),
        );
        assert_eq!(s.blksize, MAX_BLKSIZE);
        assert_eq!(s.windowsize, MAX_WINDOWSIZE);
        assert_eq!(s.timeout_s, Some(3));
        assert_eq!(
            oack,
            opts(&[
                ("tsize", "70000"),
                ("blksize", "1468"),
                ("windowsize", "64"),
                ("timeout", "3")
            ])
        );
        let (s, oack) = negotiate(
            &opts(&[
                ("blksize", "7"),
                ("timeout", "0"),
                ("windowsize", "x"),
                ("tsize", "0"),
            ]),
            None,
        );
        assert_eq!(s, Settings::default());
        assert!(oack.is_empty());
    }

    /// The choice this module's doc states: an option out of range is ignored (left out of the
    /// OACK, its default kept), never answered with ERROR 8; the rest is still accepted.
    #[test]
    fn out_of_range_options_are_ignored_not_refused() {
        for (name, value) in [
            ("blksize", "0"),
            ("blksize", "7"),
            ("blksize", "-1"),
            ("timeout", "0"),
            ("timeout", "256"),
            ("timeout", "99999999999999999999"),
            ("windowsize", "0"),
        ] {
            let (s, oack) = negotiate(&opts(&[(name, value), ("tsize", "0")]), Some(1000));
            assert_eq!(s, Settings::default(), "{name} {value}");
            assert_eq!(oack, opts(&[("tsize", "1000")]), "{name} {value}");
        }
        // Above the range: answered with our cap, as a smaller block size may be.
        let (s, oack) = negotiate(&opts(&[("blksize", "65465")]), None);
        assert_eq!(s.blksize, MAX_BLKSIZE);
        assert_eq!(oack, opts(&[("blksize", "1468")]));
    }

    #[test]
    fn sender_walks_windows_and_ends_with_the_short_block() {
        let s = Settings {
            blksize: 512,
            windowsize: 4,
            timeout_s: None,
        };
        let mut tx = Sender::new(512 * 10 + 3, s);
        assert_eq!(tx.window(), 1..=4);
        assert_eq!(tx.span(11), (5120, 3));
        assert_eq!(tx.on_ack(4), Next::Send(5..=8));
        // Lost block 7: the client acks 6, we resend from 7.
        assert_eq!(tx.on_ack(6), Next::Send(7..=10));
        assert_eq!(tx.on_ack(6), Next::Wait, "duplicate");
        assert_eq!(tx.on_ack(2), Next::Wait, "old");
        assert_eq!(tx.on_ack(10), Next::Send(11..=11));
        assert_eq!(tx.acked_bytes(), 5120);
        assert_eq!(tx.on_ack(11), Next::Done);
        assert_eq!(tx.acked_bytes(), 5123);
    }

    #[test]
    fn whole_blocks_end_with_an_empty_one_and_empty_files_work() {
        let mut tx = Sender::new(1024, Settings::default());
        assert_eq!(tx.on_ack(1), Next::Send(2..=2));
        assert_eq!(tx.on_ack(2), Next::Send(3..=3));
        assert_eq!(tx.span(3), (1024, 0));
        assert_eq!(tx.on_ack(3), Next::Done);
        let mut tx = Sender::new(0, Settings::default());
        assert_eq!(tx.window(), 1..=1);
        assert_eq!(tx.span(1), (0, 0));
        assert_eq!(tx.on_ack(1), Next::Done);
    }

    #[test]
    fn block_numbers_wrap_past_65535() {
        let s = Settings {
            blksize: 8,
            windowsize: 8,
            timeout_s: None,
        };
        let mut tx = Sender::new(8 * 70_000, s);
        let mut acked;
        loop {
            let top = *tx.window().end();
            acked = top;
            match tx.on_ack(Sender::wire(top)) {
                Next::Send(r) => assert_eq!(*r.start(), top + 1),
                Next::Done => break,
                Next::Wait => panic!("stuck at {top}"),
            }
        }
        assert_eq!(acked, 70_001);
        assert_eq!(tx.acked_bytes(), 8 * 70_000);
    }

    #[test]
    fn netascii_translates_line_ends() {
        assert_eq!(to_netascii(b"a\nb\rc"), b"a\r\nb\r\0c");
        assert_eq!(netascii_len(b"a\nb\rc"), 7);
        let mut pieces = Vec::new();
        for piece in [&b"a\n"[..], b"", b"b\r", b"c"] {
            extend_netascii(&mut pieces, piece);
        }
        assert_eq!(pieces, to_netascii(b"a\nb\rc"));
    }
}

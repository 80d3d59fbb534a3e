//! The NBD wire codec, sans I/O: the fixed-newstyle handshake, option requests and replies,
//! transmission requests and simple replies, after the protocol document
//! (NetworkBlockDevice/nbd, doc/proto.md). Decoders are total: every length is capped and a
//! malformed message is a typed error, never a panic. What to answer a request with on a
//! read-only or a writable export (`Request::verdict`) lives here too, because the document
//! fixes it.

use std::fmt;

/// The port clients use when none is given (IANA's for NBD).
pub const PORT: u16 = 10809;
/// `NBDMAGIC`, first 8 bytes the server sends.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: the newstyle magic, also the prefix of every option request.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Prefix of every option reply.
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Transmission flags.
pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;

// Option reply types.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
pub const REP_ERR_SHUTDOWN: u32 = (1 << 31) + 7;
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) + 9;

// Information types.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Commands.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;

/// Command flag FUA: clients set it on any command even unasked, so it is tolerated.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
/// WRITE_ZEROES may not punch holes; a hint we may ignore, since reads are the same.
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;

// Error values.
pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const ESHUTDOWN: u32 = 108;

/// Strings (export names, messages) MUST be no longer than this.
pub const MAX_STRING: usize = 4096;
/// Option data we are willing to read. GO needs 4 + 4096 + 2 + 2n; anything past this is a
/// denial of service, which the document lets the server hard-disconnect.
pub const MAX_OPTION_DATA: u32 = 64 * 1024;
/// The maximum block size advertised in NBD_INFO_BLOCK_SIZE: the document's 2^25
/// interoperability bound, which a client that asked for block sizes keeps to.
pub const ADVERTISED_MAX_BLOCK: u32 = 1 << 25;
/// Largest READ (and WRITE payload) taken. A client that attached by NBD_OPT_EXPORT_NAME never
/// hears a block size, and for it the document asks a server to take requests of any size; nbd's
/// own integrity test sends up to 47.6 MiB. Twice the advertised bound keeps one request well
/// inside the connections' shared read budget (`service::nbd`), and larger ones are refused.
pub const MAX_PAYLOAD: u32 = 1 << 26;
/// Advertised in NBD_INFO_BLOCK_SIZE. A regular file allows a minimum of 1.
pub const MIN_BLOCK: u32 = 1;
pub const PREFERRED_BLOCK: u32 = 4096;

pub const GREETING_LEN: usize = 18;
pub const OPTION_HEADER_LEN: usize = 16;
pub const REQUEST_LEN: usize = 28;
pub const SIMPLE_REPLY_LEN: usize = 16;

/// What was wrong with bytes from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Malformed {
    BadMagic(u64),
    UnknownClientFlags(u32),
    OptionTooLong(u32),
    /// Option data that does not parse; answered with NBD_REP_ERR_INVALID.
    BadOption(&'static str),
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformed::BadMagic(m) => write!(f, "bad magic {m:#x}"),
            Malformed::UnknownClientFlags(x) => write!(f, "unknown client flags {x:#x}"),
            Malformed::OptionTooLong(n) => write!(f, "option data of {n} bytes"),
            Malformed::BadOption(why) => write!(f, "bad option: {why}"),
        }
    }
}

impl std::error::Error for Malformed {}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
fn be64(b: &[u8]) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// The server's opening: magic, IHAVEOPT, handshake flags.
pub fn greeting() -> [u8; GREETING_LEN] {
    let mut b = [0; GREETING_LEN];
    b[..8].copy_from_slice(&NBD_MAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    b
}

/// What the client said in its 32-bit flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFlags {
    pub fixed_newstyle: bool,
    pub no_zeroes: bool,
}

impl ClientFlags {
    /// The server MUST drop a client that sets a flag it did not offer.
    pub fn decode(b: [u8; 4]) -> Result<ClientFlags, Malformed> {
        let x = u32::from_be_bytes(b);
        if x & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
            return Err(Malformed::UnknownClientFlags(x));
        }
        Ok(ClientFlags {
            fixed_newstyle: x & FLAG_C_FIXED_NEWSTYLE != 0,
            no_zeroes: x & FLAG_C_NO_ZEROES != 0,
        })
    }
}

/// The fixed part of an option request; `len` bytes of data follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub len: u32,
}

impl OptionHeader {
    pub fn decode(b: &[u8; OPTION_HEADER_LEN]) -> Result<OptionHeader, Malformed> {
        let magic = be64(&b[..8]);
        if magic != IHAVEOPT {
            return Err(Malformed::BadMagic(magic));
        }
        let len = be32(&b[12..]);
        if len > MAX_OPTION_DATA {
            return Err(Malformed::OptionTooLong(len));
        }
        Ok(OptionHeader {
            option: be32(&b[8..12]),
            len,
        })
    }
}

/// An option request the server understands, decoded from its header and data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptRequest {
    ExportName(String),
    Abort,
    List,
    /// NBD_OPT_INFO (`go` false) or NBD_OPT_GO (`go` true).
    Info {
        go: bool,
        name: String,
        requests: Vec<u16>,
    },
    /// Any other option: answered NBD_REP_ERR_UNSUP.
    Unsupported(u32),
}

fn export_name(b: &[u8]) -> Result<String, Malformed> {
    if b.len() > MAX_STRING {
        return Err(Malformed::BadOption("name longer than 4096 bytes"));
    }
    if b.contains(&0) {
        return Err(Malformed::BadOption("name contains NUL"));
    }
    String::from_utf8(b.to_vec()).map_err(|_| Malformed::BadOption("name is not UTF-8"))
}

impl OptRequest {
    /// Decodes an option's data (exactly `header.len` bytes).
    pub fn decode(option: u32, data: &[u8]) -> Result<OptRequest, Malformed> {
        match option {
            OPT_EXPORT_NAME => Ok(OptRequest::ExportName(export_name(data)?)),
            // The document asks servers to ignore data sent with ABORT.
            OPT_ABORT => Ok(OptRequest::Abort),
            OPT_LIST if data.is_empty() => Ok(OptRequest::List),
            OPT_LIST => Err(Malformed::BadOption("LIST with data")),
            OPT_INFO | OPT_GO => {
                if data.len() < 6 {
                    return Err(Malformed::BadOption("INFO/GO shorter than 6 bytes"));
                }
                let n = be32(data) as usize;
                // Name, then a 16-bit count: name length MUST be <= data length - 6.
                if n > data.len() - 6 {
                    return Err(Malformed::BadOption("INFO/GO name runs past the data"));
                }
                let name = export_name(&data[4..4 + n])?;
                let rest = &data[4 + n..];
                let count = be16(rest) as usize;
                let list = &rest[2..];
                if list.len() != count * 2 {
                    return Err(Malformed::BadOption("INFO/GO request count mismatch"));
                }
                let requests = list.chunks_exact(2).map(be16).collect();
                Ok(OptRequest::Info {
                    go: option == OPT_GO,
                    name,
                    requests,
                })
            }
            other => Ok(OptRequest::Unsupported(other)),
        }
    }
}

/// Appends one option reply.
pub fn opt_reply(out: &mut Vec<u8>, option: u32, kind: u32, data: &[u8]) {
    out.extend_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// Appends an error reply with a short human message (capped like any string).
pub fn opt_error(out: &mut Vec<u8>, option: u32, kind: u32, msg: &str) {
    let mut m = msg.as_bytes();
    if m.len() > 256 {
        m = &m[..256];
    }
    opt_reply(out, option, kind, m);
}

/// NBD_REP_SERVER for NBD_OPT_LIST.
pub fn opt_server(out: &mut Vec<u8>, name: &str) {
    let mut data = Vec::with_capacity(4 + name.len());
    data.extend_from_slice(&(name.len() as u32).to_be_bytes());
    data.extend_from_slice(name.as_bytes());
    opt_reply(out, OPT_LIST, REP_SERVER, &data);
}

/// NBD_REP_INFO / NBD_INFO_EXPORT.
pub fn info_export(out: &mut Vec<u8>, option: u32, size: u64, flags: u16) {
    let mut d = [0; 12];
    d[..2].copy_from_slice(&INFO_EXPORT.to_be_bytes());
    d[2..10].copy_from_slice(&size.to_be_bytes());
    d[10..].copy_from_slice(&flags.to_be_bytes());
    opt_reply(out, option, REP_INFO, &d);
}

/// NBD_REP_INFO / NBD_INFO_BLOCK_SIZE.
pub fn info_block_size(out: &mut Vec<u8>, option: u32, min: u32, preferred: u32, max: u32) {
    let mut d = [0; 14];
    d[..2].copy_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    d[2..6].copy_from_slice(&min.to_be_bytes());
    d[6..10].copy_from_slice(&preferred.to_be_bytes());
    d[10..].copy_from_slice(&max.to_be_bytes());
    opt_reply(out, option, REP_INFO, &d);
}

/// NBD_REP_INFO / NBD_INFO_NAME: the canonical name, sent when the client asked for "".
pub fn info_name(out: &mut Vec<u8>, option: u32, name: &str) {
    let mut d = Vec::with_capacity(2 + name.len());
    d.extend_from_slice(&INFO_NAME.to_be_bytes());
    d.extend_from_slice(name.as_bytes());
    opt_reply(out, option, REP_INFO, &d);
}

/// The answer to NBD_OPT_EXPORT_NAME: size, flags and, unless NO_ZEROES, 124 zeroes.
pub fn export_name_reply(out: &mut Vec<u8>, size: u64, flags: u16, no_zeroes: bool) {
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    if !no_zeroes {
        out.extend_from_slice(&[0; 124]);
    }
}

/// A transmission request header. WRITE data (`len` bytes) follows it on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset: u64,
    pub len: u32,
}

impl Request {
    pub fn decode(b: &[u8; REQUEST_LEN]) -> Result<Request, Malformed> {
        let magic = be32(b);
        if magic != REQUEST_MAGIC {
            return Err(Malformed::BadMagic(magic as u64));
        }
        Ok(Request {
            flags: be16(&b[4..]),
            kind: be16(&b[6..]),
            cookie: be64(&b[8..]),
            offset: be64(&b[16..]),
            len: be32(&b[24..]),
        })
    }

    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0; REQUEST_LEN];
        b[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// What an export of `size` bytes does with this request; `writable` for a
    /// copy-on-write export, which takes WRITE, TRIM and WRITE_ZEROES.
    pub fn verdict(&self, size: u64, writable: bool) -> Verdict {
        // WRITE carries a payload that must be consumed to stay in step, even when refused.
        let drain = if self.kind == CMD_WRITE {
            if self.len > MAX_PAYLOAD {
                return Verdict::Disconnect;
            }
            self.len
        } else {
            0
        };
        let fail = |errno| Verdict::Error { errno, drain };
        let allowed = match self.kind {
            CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE,
            _ => CMD_FLAG_FUA,
        };
        if self.flags & !allowed != 0 {
            return fail(EINVAL);
        }
        let fua = self.flags & CMD_FLAG_FUA != 0;
        let (offset, len) = (self.offset, self.len);
        let in_bounds = offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= size);
        match self.kind {
            CMD_READ if len > MAX_PAYLOAD || !in_bounds => fail(EINVAL),
            CMD_READ => Verdict::Read { offset, len },
            CMD_DISC => Verdict::Disconnect,
            // Read-only: nothing is ever written, so there is nothing to make durable.
            CMD_FLUSH if !writable => Verdict::Ok,
            CMD_FLUSH => Verdict::Flush,
            CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES if !writable => fail(EPERM),
            // The document asks for ENOSPC on writes past the end.
            CMD_WRITE | CMD_WRITE_ZEROES if !in_bounds => fail(ENOSPC),
            CMD_WRITE => Verdict::Write { offset, len, fua },
            CMD_WRITE_ZEROES => Verdict::Zeroes { offset, len, fua },
            CMD_TRIM if !in_bounds => fail(EINVAL),
            CMD_TRIM => Verdict::Trim { offset, len, fua },
            // CACHE is a hint; honouring it as a no-op is allowed, but only in bounds.
            CMD_CACHE if !in_bounds => fail(EINVAL),
            CMD_CACHE => Verdict::Ok,
            _ => fail(EINVAL),
        }
    }
}

/// The server's decision for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Reply with `len` bytes from `offset`.
    Read {
        offset: u64,
        len: u32,
    },
    /// Take `len` payload bytes and write them at `offset` (durably first if `fua`).
    Write {
        offset: u64,
        len: u32,
        fua: bool,
    },
    Zeroes {
        offset: u64,
        len: u32,
        fua: bool,
    },
    Trim {
        offset: u64,
        len: u32,
        fua: bool,
    },
    /// Make every completed write durable.
    Flush,
    /// Reply with success and no data.
    Ok,
    /// Reply with this error after discarding `drain` payload bytes.
    Error {
        errno: u32,
        drain: u32,
    },
    /// Finish in-flight replies and close (DISC), or close at once (absurd payload).
    Disconnect,
}

/// A simple reply header; READ data follows it when `error` is 0.
pub fn simple_reply(error: u32, cookie: u64) -> [u8; SIMPLE_REPLY_LEN] {
    let mut b = [0; SIMPLE_REPLY_LEN];
    b[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..].copy_from_slice(&cookie.to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(option: u32, len: u32) -> [u8; 16] {
        let mut b = [0; 16];
        b[..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        b[8..12].copy_from_slice(&option.to_be_bytes());
        b[12..].copy_from_slice(&len.to_be_bytes());
        b
    }

    fn go_data(name: &[u8], infos: &[u16]) -> Vec<u8> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name);
        d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            d.extend_from_slice(&i.to_be_bytes());
        }
        d
    }

    #[test]
    fn greeting_offers_fixed_newstyle_and_no_zeroes() {
        let g = greeting();
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(be16(&g[16..]), 3);
    }

    #[test]
    fn client_flags_reject_unknown_bits() {
        assert_eq!(
            ClientFlags::decode([0, 0, 0, 3]),
            Ok(ClientFlags {
                fixed_newstyle: true,
                no_zeroes: true
            })
        );
        assert_eq!(
            ClientFlags::decode([0, 0, 0, 4]),
            Err(Malformed::UnknownClientFlags(4))
        );
    }

    #[test]
    fn option_header_checks_magic_and_caps_length() {
        assert_eq!(
            OptionHeader::decode(&header(OPT_GO, 10)),
            Ok(OptionHeader {
                option: OPT_GO,
                len: 10
            })
        );
        assert_eq!(
            OptionHeader::decode(&header(OPT_GO, u32::MAX)),
            Err(Malformed::OptionTooLong(u32::MAX))
        );
        let mut bad = header(OPT_GO, 0);
        bad[0] ^= 1;
        assert!(matches!(
            OptionHeader::decode(&bad),
            Err(Malformed::BadMagic(_))
        ));
    }

    #[test]
    fn go_and_info_decode_name_and_requests() {
        let d = go_data(b"demo", &[INFO_BLOCK_SIZE, 77]);
        assert_eq!(
            OptRequest::decode(OPT_GO, &d),
            Ok(OptRequest::Info {
                go: true,
                name: "demo".into(),
                requests: vec![INFO_BLOCK_SIZE, 77]
            })
        );
        assert!(matches!(
            OptRequest::decode(OPT_INFO, &go_data(b"", &[])),
            Ok(OptRequest::Info { go: false, ref name, .. }) if name.is_empty()
        ));
    }

    #[test]
    fn malformed_go_is_an_error_never_a_panic() {
        let good = go_data(b"demo", &[INFO_EXPORT]);
        // Every truncation and every extension by one byte must be refused, not panic.
        for cut in 0..good.len() {
            assert!(
                OptRequest::decode(OPT_GO, &good[..cut]).is_err(),
                "cut {cut}"
            );
        }
        let mut long = good.clone();
        long.push(0);
        assert!(OptRequest::decode(OPT_GO, &long).is_err());
        // A name length that points far past the data.
        let mut huge = good.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(OptRequest::decode(OPT_GO, &huge).is_err());
        assert!(OptRequest::decode(OPT_GO, &go_data(b"a\0b", &[])).is_err());
        assert!(OptRequest::decode(OPT_GO, &go_data(&[0xff, 0xfe], &[])).is_err());
        assert!(OptRequest::decode(OPT_EXPORT_NAME, &vec![b'a'; MAX_STRING + 1]).is_err());
    }

    #[test]
    fn list_with_data_is_invalid_and_unknown_options_are_kept() {
        assert_eq!(OptRequest::decode(OPT_LIST, &[]), Ok(OptRequest::List));
        assert!(OptRequest::decode(OPT_LIST, &[1]).is_err());
        assert_eq!(OptRequest::decode(OPT_ABORT, &[9]), Ok(OptRequest::Abort));
        assert_eq!(
            OptRequest::decode(OPT_STRUCTURED_REPLY, &[]),
            Ok(OptRequest::Unsupported(OPT_STRUCTURED_REPLY))
        );
    }

    #[test]
    fn option_replies_have_the_documented_layout() {
        let mut out = Vec::new();
        info_export(&mut out, OPT_GO, 1 << 24, TFLAG_HAS_FLAGS | TFLAG_READ_ONLY);
        assert_eq!(be64(&out), OPT_REPLY_MAGIC);
        assert_eq!(be32(&out[8..]), OPT_GO);
        assert_eq!(be32(&out[12..]), REP_INFO);
        assert_eq!(be32(&out[16..]), 12);
        assert_eq!(be16(&out[20..]), INFO_EXPORT);
        assert_eq!(be64(&out[22..]), 1 << 24);
        assert_eq!(be16(&out[30..]), 3);
        assert_eq!(out.len(), 32);

        let mut out = Vec::new();
        opt_server(&mut out, "demo");
        assert_eq!(be32(&out[16..]), 8);
        assert_eq!(be32(&out[20..]), 4);
        assert_eq!(&out[24..], b"demo");

        let mut out = Vec::new();
        export_name_reply(&mut out, 5, 1, false);
        assert_eq!(out.len(), 8 + 2 + 124);
        let mut out = Vec::new();
        export_name_reply(&mut out, 5, 1, true);
        assert_eq!(out.len(), 10);
    }

    #[test]
    fn requests_round_trip_and_bad_magic_is_refused() {
        let r = Request {
            flags: 0,
            kind: CMD_READ,
            cookie: 0xdead_beef_0102_0304,
            offset: 4096,
            len: 512,
        };
        assert_eq!(Request::decode(&r.encode()), Ok(r));
        let mut b = r.encode();
        b[3] ^= 0xff;
        assert!(matches!(Request::decode(&b), Err(Malformed::BadMagic(_))));
    }

    #[test]
    fn verdicts_follow_the_document_for_a_read_only_export() {
        let size = 1 << 20;
        let req = |kind, offset, len| Request {
            flags: 0,
            kind,
            cookie: 1,
            offset,
            len,
        };
        assert_eq!(
            req(CMD_READ, 0, 4096).verdict(size, false),
            Verdict::Read {
                offset: 0,
                len: 4096
            }
        );
        let einval = Verdict::Error {
            errno: EINVAL,
            drain: 0,
        };
        assert_eq!(req(CMD_READ, size - 1, 2).verdict(size, false), einval);
        assert_eq!(req(CMD_READ, u64::MAX, 2).verdict(size, false), einval);
        assert_eq!(
            req(CMD_READ, 0, MAX_PAYLOAD + 1).verdict(1 << 30, false),
            einval
        );
        // Past the advertised bound, as a client that never heard it may send (nbd's
        // integrity test reads up to 47.6 MiB at once).
        let big = ADVERTISED_MAX_BLOCK + (ADVERTISED_MAX_BLOCK / 2);
        assert_eq!(
            req(CMD_READ, 0, big).verdict(1 << 30, false),
            Verdict::Read {
                offset: 0,
                len: big
            }
        );
        assert_eq!(req(99, 0, 0).verdict(size, false), einval);
        assert_eq!(
            req(CMD_WRITE, 0, 512).verdict(size, false),
            Verdict::Error {
                errno: EPERM,
                drain: 512
            }
        );
        assert_eq!(
            req(CMD_WRITE, 0, MAX_PAYLOAD + 1).verdict(size, false),
            Verdict::Disconnect
        );
        assert_eq!(
            req(CMD_TRIM, 0, 512).verdict(size, false),
            Verdict::Error {
                errno: EPERM,
                drain: 0
            }
        );
        assert_eq!(req(CMD_FLUSH, 0, 0).verdict(size, false), Verdict::Ok);
        assert_eq!(
            req(CMD_DISC, 0, 0).verdict(size, false),
            Verdict::Disconnect
        );
        let mut fua = req(CMD_READ, 0, 512);
        fua.flags = CMD_FLAG_FUA;
        assert!(matches!(fua.verdict(size, false), Verdict::Read { .. }));
        fua.flags = 1 << 9;
        assert_eq!(fua.verdict(size, false), einval);
    }

    #[test]
    fn verdicts_for_a_writable_export() {
        let size = 1 << 20;
        let req = |kind, flags, offset, len| Request {
            flags,
            kind,
            cookie: 1,
            offset,
            len,
        };
        let v = |r: Request| r.verdict(size, true);
        assert_eq!(
            v(req(CMD_WRITE, CMD_FLAG_FUA, 4096, 512)),
            Verdict::Write {
                offset: 4096,
                len: 512,
                fua: true
            }
        );
        assert_eq!(
            v(req(CMD_WRITE, 0, size - 1, 2)),
            Verdict::Error {
                errno: ENOSPC,
                drain: 2
            }
        );
        assert_eq!(
            v(req(CMD_WRITE, 0, 0, MAX_PAYLOAD + 1)),
            Verdict::Disconnect
        );
        assert_eq!(
            v(req(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 0, 100)),
            Verdict::Zeroes {
                offset: 0,
                len: 100,
                fua: false
            }
        );
        // NO_HOLE means nothing on other commands.
        assert!(matches!(
            v(req(CMD_TRIM, CMD_FLAG_NO_HOLE, 0, 100)),
            Verdict::Error { errno: EINVAL, .. }
        ));
        assert!(matches!(
            v(req(CMD_TRIM, 0, size, 1)),
            Verdict::Error { errno: EINVAL, .. }
        ));
        assert!(matches!(
            v(req(CMD_TRIM, 0, 0, 8)),
            Verdict::Trim { len: 8, .. }
        ));
        assert!(matches!(
            v(req(CMD_WRITE_ZEROES, 0, u64::MAX, 8)),
            Verdict::Error { errno: ENOSPC, .. }
        ));
        assert_eq!(v(req(CMD_FLUSH, 0, 0, 0)), Verdict::Flush);
        assert!(matches!(v(req(CMD_READ, 0, 0, 512)), Verdict::Read { .. }));
    }

    #[test]
    fn decoders_survive_random_bytes() {
        // A small stand-in for the cargo-fuzz target (fuzz/): random and mutated inputs
        // through every decoder; the only acceptable outcomes are Ok or Err.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let seed = {
            let mut d = 4u32.to_be_bytes().to_vec();
            d.extend_from_slice(b"demo\0\x01\0\x03");
            d
        };
        for round in 0..20_000 {
            let mut data: Vec<u8> = if round % 2 == 0 {
                (0..next() % 64).map(|_| next() as u8).collect()
            } else {
                seed.clone()
            };
            // Flip a few bytes and sometimes cut, so near-valid input is covered too.
            for _ in 0..next() % 4 {
                if !data.is_empty() {
                    let i = next() as usize % data.len();
                    data[i] = next() as u8;
                }
            }
            if next() % 3 == 0 {
                data.truncate(next() as usize % (data.len() + 1));
            }
            let option = [
                OPT_GO,
                OPT_INFO,
                OPT_EXPORT_NAME,
                OPT_LIST,
                OPT_ABORT,
                next() as u32,
            ][next() as usize % 6];
            let _ = OptRequest::decode(option, &data);
            let mut h = [0; OPTION_HEADER_LEN];
            let mut r = [0; REQUEST_LEN];
            for (i, b) in h.iter_mut().chain(r.iter_mut()).enumerate() {
                *b = data.get(i).copied().unwrap_or(next() as u8);
            }
            if round % 5 == 0 {
                h[..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
                r[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
            }
            if let Ok(h) = OptionHeader::decode(&h) {
                assert!(h.len <= MAX_OPTION_DATA);
            }
            let _ = ClientFlags::decode([h[0], h[1], h[2], h[3]]);
            if let Ok(req) = Request::decode(&r) {
                for writable in [false, true] {
                    match req.verdict(next() % (1 << 40), writable) {
                        Verdict::Read { len, .. } | Verdict::Write { len, .. } => {
                            assert!(len <= MAX_PAYLOAD)
                        }
                        Verdict::Error { drain, .. } => assert!(drain <= MAX_PAYLOAD),
                        _ => {}
                    }
                }
            }
        }
    }

    #[test]
    fn simple_reply_layout() {
        let r = simple_reply(EPERM, 7);
        assert_eq!(be32(&r), SIMPLE_REPLY_MAGIC);
        assert_eq!(be32(&r[4..]), EPERM);
        assert_eq!(be64(&r[8..]), 7);
    }
}

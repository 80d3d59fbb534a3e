//! ONC RPC (RFC 5531) as pure functions: record framing over a TCP byte stream, call
//! headers with AUTH_UNIX credentials, the program numbers and accept/auth codes bootpool
//! answers with, a bounds-checked XDR reader and the XDR writer replies are built in. Every
//! length is capped before anything is allocated; nothing here panics on input.

use std::borrow::Cow;

pub const PROG_NFS: u32 = 100_003;
pub const PROG_MOUNT: u32 = 100_005;
pub const PROG_PORTMAP: u32 = 100_000;
/// NFSACL, POSIX ACLs beside NFSv3 (`proto::nfsacl`).
pub const PROG_NFSACL: u32 = 100_227;
/// RFC 5531: opaque_auth bodies are at most 400 bytes.
const MAX_AUTH: usize = 400;
/// AUTH_UNIX carries at most 16 supplementary groups.
pub(super) const MAX_GIDS: usize = 16;
/// AUTH_UNIX machine names (RFC 5531: machinename<255>).
const MAX_MACHINE: usize = 255;
pub const AUTH_UNIX: u32 = 1;
// accept_stat
pub const SUCCESS: u32 = 0;
pub const PROG_UNAVAIL: u32 = 1;
pub const PROG_MISMATCH: u32 = 2;
pub const PROC_UNAVAIL: u32 = 3;
pub const GARBAGE_ARGS: u32 = 4;
// auth_stat
pub const AUTH_TOOWEAK: u32 = 5;

/// The stream cannot be followed any more: the connection must be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// A record (fragment headers included) longer than the cap.
    TooLong,
}

/// (bytes used from the stream, the record's body).
pub type Record<'a> = (usize, Cow<'a, [u8]>);

/// Takes the next complete record from the front of `buf`: `(bytes used, record body)`, with
/// fragments joined (borrowed when there is only one). `Ok(None)`: more bytes are needed.
/// `max` caps the bytes a record may use, fragment headers included, so a stream of empty
/// fragments cannot grow a buffer either.
pub fn next_record(buf: &[u8], max: usize) -> Result<Option<Record<'_>>, Framing> {
    let mut at = 0usize;
    let mut parts: Vec<(usize, usize)> = Vec::new();
    loop {
        let Some(mark) = buf.get(at..at + 4) else {
            return if at + 4 > max {
                Err(Framing::TooLong)
            } else {
                Ok(None)
            };
        };
        let word = u32::from_be_bytes([mark[0], mark[1], mark[2], mark[3]]);
        let len = (word & 0x7fff_ffff) as usize;
        let end = at + 4 + len;
        if end > max {
            return Err(Framing::TooLong);
        }
        if buf.len() < end {
            return Ok(None);
        }
        parts.push((at + 4, end));
        at = end;
        if word & 0x8000_0000 != 0 {
            break;
        }
    }
    let body = if parts.len() == 1 {
        Cow::Borrowed(&buf[parts[0].0..parts[0].1])
    } else {
        Cow::Owned(
            parts
                .iter()
                .flat_map(|&(a, b)| &buf[a..b])
                .copied()
                .collect(),
        )
    };
    Ok(Some((at, body)))
}

/// A bounds-checked XDR reader.
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    pub fn u32(&mut self) -> Option<u32> {
        let (w, rest) = self.0.split_first_chunk::<4>()?;
        self.0 = rest;
        Some(u32::from_be_bytes(*w))
    }
    pub fn u64(&mut self) -> Option<u64> {
        let (w, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        Some(u64::from_be_bytes(*w))
    }
    pub fn fixed<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (w, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*w)
    }
    /// Variable-length opaque of at most `max` bytes, padding skipped.
    pub fn opaque(&mut self, max: usize) -> Option<&'a [u8]> {
        let len = self.u32()? as usize;
        if len > max {
            return None;
        }
        let body = self.0.get(..len)?;
        self.0 = self.0.get(len.div_ceil(4) * 4..)?;
        Some(body)
    }
    pub fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// Who a call says it comes from (AUTH_UNIX); other flavours carry nobody.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cred {
    pub uid: Option<u32>,
    pub gid: u32,
    pub gids: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call<'a> {
    pub xid: u32,
    pub rpcvers: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub cred: Cred,
    pub args: &'a [u8],
}

/// Decodes a call header. `None`: not a call we can even reply to (no xid, or a REPLY, or a
/// broken header): drop it and close.
pub fn call(rec: &[u8]) -> Option<Call<'_>> {
    let mut r = Reader(rec);
    let xid = r.u32()?;
    if r.u32()? != 0 {
        return None;
    }
    let (rpcvers, prog, vers, proc_) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
    let flavor = r.u32()?;
    let body = r.opaque(MAX_AUTH)?;
    let cred = if flavor == AUTH_UNIX {
        unix_cred(body).unwrap_or_default()
    } else {
        Cred::default()
    };
    r.u32()?;
    r.opaque(MAX_AUTH)?;
    Some(Call {
        xid,
        rpcvers,
        prog,
        vers,
        proc_,
        cred,
        args: r.0,
    })
}

fn unix_cred(body: &[u8]) -> Option<Cred> {
    let mut r = Reader(body);
    r.u32()?; // stamp
    r.opaque(MAX_MACHINE)?; // machine name
    let (uid, gid) = (r.u32()?, r.u32()?);
    let n = r.u32()? as usize;
    if n > MAX_GIDS {
        return None;
    }
    let gids = (0..n).map(|_| r.u32()).collect::<Option<Vec<_>>>()?;
    Some(Cred {
        uid: Some(uid),
        gid,
        gids,
    })
}

/// Why arguments were not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    ProcUnavail,
    GarbageArgs,
}

/// XDR output; replies are built in place, record mark first (patched by `finish`).
#[derive(Debug, Default)]
pub struct Writer {
    pub buf: Vec<u8>,
    start: usize,
}

impl Writer {
    pub fn new() -> Writer {
        Writer::default()
    }

    /// A writer appending to `buf`, for encoding pieces outside a reply (READDIRPLUS entries).
    #[inline]
    pub fn over(buf: Vec<u8>) -> Writer {
        Writer { buf, start: 0 }
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn words(&mut self, ws: &[u32]) -> &mut Self {
        for w in ws {
            self.u32(*w);
        }
        self
    }
    pub fn opaque(&mut self, b: &[u8]) -> &mut Self {
        self.u32(b.len() as u32);
        self.buf.extend_from_slice(b);
        self.pad(b.len())
    }
    pub fn pad(&mut self, len: usize) -> &mut Self {
        let pad = len.div_ceil(4) * 4 - len;
        self.buf.extend_from_slice(&[0u8; 3][..pad]);
        self
    }
    /// Starts a reply record: mark placeholder, xid, REPLY, MSG_ACCEPTED, AUTH_NONE, `stat`.
    pub fn accepted(&mut self, xid: u32, stat: u32) -> &mut Self {
        self.start = self.buf.len();
        self.words(&[0, xid, 1, 0, 0, 0, stat])
    }
    /// A complete MSG_DENIED AUTH_ERROR reply.
    pub fn auth_error(&mut self, xid: u32, why: u32) {
        self.start = self.buf.len();
        self.words(&[0, xid, 1, 1, 1, why]);
        self.finish();
    }
    /// A complete MSG_DENIED RPC_MISMATCH reply (we speak version 2 only).
    pub fn rpc_mismatch(&mut self, xid: u32) {
        self.start = self.buf.len();
        self.words(&[0, xid, 1, 1, 0, 2, 2]);
        self.finish();
    }
    /// A complete record from a body built elsewhere.
    pub fn record(&mut self, body: &[u8]) {
        self.start = self.buf.len();
        self.u32(0);
        self.buf.extend_from_slice(body);
        self.finish();
    }
    /// The status word of the reply started last (nfsstat3, or MOUNT's mountstat3), when it
    /// was accepted with SUCCESS; None for a denied call or a failed one.
    pub fn last_status(&self) -> Option<u32> {
        let word = |i: usize| {
            let b = self.buf.get(self.start + 4 * i..self.start + 4 * i + 4)?;
            Some(u32::from_be_bytes(b.try_into().ok()?))
        };
        // mark, xid, REPLY, MSG_ACCEPTED, verifier flavour and length, accept_stat, status.
        (word(3)? == 0 && word(6)? == SUCCESS)
            .then(|| word(7))
            .flatten()
    }

    /// Writes the record mark of the reply started last: one fragment.
    pub fn finish(&mut self) {
        let len = (self.buf.len() - self.start - 4) as u32;
        self.buf[self.start..self.start + 4].copy_from_slice(&(0x8000_0000 | len).to_be_bytes());
    }
    /// Counts `extra` more bytes into the record finished last: bytes that go out on the
    /// socket right after this buffer, from somewhere else (a READ's data).
    pub fn extend_record(&mut self, extra: u32) {
        let mark = &mut self.buf[self.start..self.start + 4];
        let len = u32::from_be_bytes(mark.try_into().expect("4 bytes")) + extra;
        mark.copy_from_slice(&len.to_be_bytes());
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

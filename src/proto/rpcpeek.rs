//! ONC RPC over TCP, read from the side: splits a byte stream into records (RFC 5531 record
//! marking) and decodes just enough of calls and replies to tell who mounted what and how many
//! READ bytes went out. It never changes the stream; the NFS service forwards bytes as they are.

/// The most of one record we keep to look at; headers and MNT paths fit well inside.
pub const PEEK: usize = 2048;
/// A fragment longer than this is not NFS; the scanner gives up on the stream.
pub const MAX_FRAGMENT: u32 = 64 << 20;
/// RFC 5531 caps authentication bodies at 400 bytes.
const MAX_AUTH: usize = 400;
/// MOUNT's MNTPATHLEN.
const MAX_MNT_PATH: usize = 1024;

pub const PROG_NFS: u32 = 100_003;
pub const PROG_MOUNT: u32 = 100_005;
pub const NFSPROC3_READ: u32 = 6;
pub const MOUNTPROC3_MNT: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// Splits a stream into records, keeping the first `PEEK` bytes of each.
#[derive(Debug, Default)]
pub struct Records {
    header: [u8; 4],
    header_len: usize,
    /// Bytes left in the current fragment; None while reading a fragment header.
    left: Option<u32>,
    last: bool,
    prefix: Vec<u8>,
    broken: bool,
}

impl Records {
    pub fn new() -> Records {
        Records::default()
    }

    /// Feeds stream bytes; `on_record` gets the kept prefix of each complete record.
    pub fn feed(
        &mut self,
        mut data: &[u8],
        mut on_record: impl FnMut(&[u8]),
    ) -> Result<(), Malformed> {
        if self.broken {
            return Err(Malformed);
        }
        while !data.is_empty() {
            match self.left {
                None => {
                    let take = (4 - self.header_len).min(data.len());
                    self.header[self.header_len..self.header_len + take]
                        .copy_from_slice(&data[..take]);
                    self.header_len += take;
                    data = &data[take..];
                    if self.header_len == 4 {
                        let word = u32::from_be_bytes(self.header);
                        let len = word & 0x7fff_ffff;
                        if len > MAX_FRAGMENT {
                            self.broken = true;
                            return Err(Malformed);
                        }
                        self.last = word & 0x8000_0000 != 0;
                        self.header_len = 0;
                        self.left = Some(len);
                    }
                }
                Some(left) => {
                    let take = (left as usize).min(data.len());
                    let room = PEEK.saturating_sub(self.prefix.len()).min(take);
                    self.prefix.extend_from_slice(&data[..room]);
                    data = &data[take..];
                    self.left = Some(left - take as u32);
                }
            }
            if self.left == Some(0) {
                self.left = None;
                if self.last {
                    on_record(&self.prefix);
                    self.prefix.clear();
                }
            }
        }
        Ok(())
    }
}

/// A big-endian XDR reader over a prefix; every read is bounds-checked.
struct Xdr<'a>(&'a [u8]);

impl<'a> Xdr<'a> {
    fn u32(&mut self) -> Option<u32> {
        let (word, rest) = self.0.split_first_chunk::<4>()?;
        self.0 = rest;
        Some(u32::from_be_bytes(*word))
    }
    fn skip(&mut self, n: usize) -> Option<()> {
        self.0 = self.0.get(n..)?;
        Some(())
    }
    /// Variable-length opaque, padded to 4 bytes.
    fn opaque(&mut self, max: usize) -> Option<&'a [u8]> {
        let len = self.u32()? as usize;
        if len > max {
            return None;
        }
        let body = self.0.get(..len)?;
        self.skip(len.div_ceil(4) * 4)?;
        Some(body)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call<'a> {
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    /// The procedure's arguments, as far as the prefix holds them.
    pub args: &'a [u8],
}

pub fn call(rec: &[u8]) -> Option<Call<'_>> {
    let mut x = Xdr(rec);
    let xid = x.u32()?;
    if x.u32()? != 0 || x.u32()? != 2 {
        return None; // not a CALL, or not RPC version 2
    }
    let (prog, vers, proc_) = (x.u32()?, x.u32()?, x.u32()?);
    for _ in 0..2 {
        x.u32()?; // credential, then verifier: flavor and body
        x.opaque(MAX_AUTH)?;
    }
    Some(Call {
        xid,
        prog,
        vers,
        proc_,
        args: x.0,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply<'a> {
    pub xid: u32,
    /// The procedure's results if the call was accepted and ran (SUCCESS).
    pub results: Option<&'a [u8]>,
}

pub fn reply(rec: &[u8]) -> Option<Reply<'_>> {
    let mut x = Xdr(rec);
    let xid = x.u32()?;
    if x.u32()? != 1 {
        return None; // not a REPLY
    }
    if x.u32()? != 0 {
        return Some(Reply { xid, results: None }); // MSG_DENIED
    }
    x.u32()?;
    x.opaque(MAX_AUTH)?;
    let results = (x.u32()? == 0).then_some(x.0);
    Some(Reply { xid, results })
}

/// The path of a MOUNTPROC3_MNT call.
pub fn mnt_path(args: &[u8]) -> Option<&[u8]> {
    Xdr(args).opaque(MAX_MNT_PATH)
}

/// Whether MNT results say MNT3_OK.
pub fn mnt_ok(results: &[u8]) -> bool {
    Xdr(results).u32() == Some(0)
}

/// The payload length of a successful READ3res.
pub fn read_count(results: &[u8]) -> Option<u32> {
    let mut x = Xdr(results);
    if x.u32()? != 0 {
        return None;
    }
    match x.u32()? {
        0 => {}
        1 => x.skip(84)?, // fattr3
        _ => return None,
    }
    x.u32()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    fn framed(fragments: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, f) in fragments.iter().enumerate() {
            let last = if i + 1 == fragments.len() {
                0x8000_0000
            } else {
                0
            };
            out.extend_from_slice(&(last | f.len() as u32).to_be_bytes());
            out.extend_from_slice(f);
        }
        out
    }

    fn mnt_call(xid: u32, path: &[u8]) -> Vec<u8> {
        // AUTH_UNIX credential with a 5-byte body (padded to 8), AUTH_NONE verifier.
        let mut v = words(&[xid, 0, 2, PROG_MOUNT, 3, MOUNTPROC3_MNT, 1, 5]);
        v.extend_from_slice(&[1, 2, 3, 4, 5, 0, 0, 0]);
        v.extend(words(&[0, 0, path.len() as u32]));
        v.extend_from_slice(path);
        v.resize(v.len().div_ceil(4) * 4, 0);
        v
    }

    #[test]
    fn records_survive_any_split_and_fragmentation() {
        let a = mnt_call(7, b"/demo");
        let b = mnt_call(8, b"/demo/usr");
        let mut stream = framed(&[&a[..10], &a[10..]]);
        stream.extend(framed(&[&b]));
        for cut in 0..stream.len() {
            let mut r = Records::new();
            let mut seen = Vec::new();
            r.feed(&stream[..cut], |p| seen.push(p.to_vec())).unwrap();
            r.feed(&stream[cut..], |p| seen.push(p.to_vec())).unwrap();
            assert_eq!(seen, vec![a.clone(), b.clone()], "cut at {cut}");
        }
    }

    #[test]
    fn call_and_mnt_path_decode() {
        let rec = mnt_call(42, b"/demo");
        let c = call(&rec).unwrap();
        assert_eq!((c.xid, c.prog, c.vers, c.proc_), (42, PROG_MOUNT, 3, 1));
        assert_eq!(mnt_path(c.args), Some(&b"/demo"[..]));
    }

    #[test]
    fn read_reply_count_with_and_without_attributes() {
        let mut with = words(&[9, 1, 0, 0, 0, 0, 0, 1]);
        with.extend(vec![0u8; 84]);
        with.extend(words(&[4096, 1, 4096]));
        let r = reply(&with).unwrap();
        assert_eq!(r.xid, 9);
        assert_eq!(read_count(r.results.unwrap()), Some(4096));
        let without = words(&[10, 1, 0, 0, 0, 0, 0, 0, 17, 0, 17]);
        assert_eq!(
            read_count(reply(&without).unwrap().results.unwrap()),
            Some(17)
        );
        // An error status carries no payload.
        let err = words(&[11, 1, 0, 0, 0, 0, 70, 0]);
        assert_eq!(read_count(reply(&err).unwrap().results.unwrap()), None);
    }

    #[test]
    fn garbage_is_rejected_without_panicking() {
        let mut r = Records::new();
        assert_eq!(r.feed(&[0xff, 0xff, 0xff, 0xff], |_| {}), Err(Malformed));
        assert_eq!(r.feed(&[0, 0, 0, 0], |_| {}), Err(Malformed));
        for len in 0..64 {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let _ = call(&junk);
            let _ = reply(&junk);
            let _ = mnt_path(&junk);
            let _ = read_count(&junk);
        }
        // An oversized auth body is not skipped blindly.
        let big = words(&[1, 0, 2, PROG_NFS, 3, 6, 1, 100_000]);
        assert_eq!(call(&big), None);
    }
}

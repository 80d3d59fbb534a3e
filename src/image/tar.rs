//! The tar format, as a codec: one 512-byte header block into a typed entry header (ustar,
//! GNU's long names and base-256 numbers, pax extended records). No files: `unpack.rs` reads
//! the blocks and writes the tree.

/// A tar block.
pub const BLOCK: usize = 512;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    File,
    HardLink,
    Symlink,
    Char,
    Block,
    Dir,
    Fifo,
    /// pax extended header for the next entry (`x`).
    Pax,
    /// pax global header (`g`): ignored.
    PaxGlobal,
    /// GNU long name of the next entry (`L`).
    LongName,
    /// GNU long link target of the next entry (`K`).
    LongLink,
    Other(u8),
}

/// One decoded header block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub name: Vec<u8>,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub size: u64,
    pub mtime: i64,
    pub kind: Type,
    pub link: Vec<u8>,
    pub dev_major: u32,
    pub dev_minor: u32,
}

/// Why a block is not a header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("bad header checksum (not a tar archive, or a damaged one)")]
    Checksum,
    #[error("bad number in header field `{0}`")]
    Number(&'static str),
    #[error("bad pax record")]
    Pax,
}

/// All zeros: one of the two blocks that end an archive.
pub fn is_zero(block: &[u8; BLOCK]) -> bool {
    block.iter().all(|b| *b == 0)
}

/// Decodes a header block (checksum checked).
pub fn header(b: &[u8; BLOCK]) -> Result<Header, Error> {
    let stored = number(&b[148..156], "chksum")?;
    let sum: u64 = b
        .iter()
        .enumerate()
        .map(|(i, v)| {
            if (148..156).contains(&i) {
                u64::from(b' ')
            } else {
                u64::from(*v)
            }
        })
        .sum();
    if stored != sum {
        return Err(Error::Checksum);
    }
    let ustar = &b[257..262] == b"ustar";
    let mut name = cstr(&b[0..100]).to_vec();
    // POSIX ustar's prefix (GNU tar's own format keeps other fields there).
    if ustar && &b[257..263] == b"ustar\0" {
        let prefix = cstr(&b[345..500]);
        if !prefix.is_empty() {
            let mut full = prefix.to_vec();
            full.push(b'/');
            full.extend_from_slice(&name);
            name = full;
        }
    }
    let kind = match b[156] {
        b'0' | 0 | b'7' => Type::File,
        b'1' => Type::HardLink,
        b'2' => Type::Symlink,
        b'3' => Type::Char,
        b'4' => Type::Block,
        b'5' => Type::Dir,
        b'6' => Type::Fifo,
        b'x' => Type::Pax,
        b'g' => Type::PaxGlobal,
        b'L' => Type::LongName,
        b'K' => Type::LongLink,
        t => Type::Other(t),
    };
    let dev = |r: std::ops::Range<usize>, f| -> Result<u32, Error> {
        if !ustar {
            return Ok(0);
        }
        u32::try_from(number(&b[r], f)?).map_err(|_| Error::Number(f))
    };
    Ok(Header {
        name,
        mode: u32::try_from(number(&b[100..108], "mode")? & 0o7777).unwrap_or(0),
        uid: number(&b[108..116], "uid")?,
        gid: number(&b[116..124], "gid")?,
        size: number(&b[124..136], "size")?,
        mtime: i64::try_from(number(&b[136..148], "mtime")?).unwrap_or(0),
        kind,
        link: cstr(&b[157..257]).to_vec(),
        dev_major: dev(329..337, "devmajor")?,
        dev_minor: dev(337..345, "devminor")?,
    })
}

/// Bytes up to the first NUL.
fn cstr(b: &[u8]) -> &[u8] {
    let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
    &b[..end]
}

/// An octal field (spaces and NULs around it allowed), or GNU's base-256 (high bit set).
fn number(b: &[u8], field: &'static str) -> Result<u64, Error> {
    if b.first().is_some_and(|c| c & 0x80 != 0) {
        if b[0] & 0x40 != 0 {
            return Err(Error::Number(field)); // negative
        }
        let mut v: u64 = u64::from(b[0] & 0x3f);
        for c in &b[1..] {
            v = v
                .checked_mul(256)
                .and_then(|v| v.checked_add(u64::from(*c)))
                .ok_or(Error::Number(field))?;
        }
        return Ok(v);
    }
    let text: Vec<u8> = b
        .iter()
        .copied()
        .skip_while(|c| *c == b' ' || *c == 0)
        .take_while(|c| *c != b' ' && *c != 0)
        .collect();
    if text.is_empty() {
        return Ok(0);
    }
    let mut v: u64 = 0;
    for c in text {
        if !(b'0'..=b'7').contains(&c) {
            return Err(Error::Number(field));
        }
        v = v
            .checked_mul(8)
            .and_then(|v| v.checked_add(u64::from(c - b'0')))
            .ok_or(Error::Number(field))?;
    }
    Ok(v)
}

/// The blocks an entry's data takes, padded.
pub fn padded(size: u64) -> u64 {
    size.div_ceil(BLOCK as u64) * BLOCK as u64
}

/// What a pax header says of the next entry.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pax {
    pub path: Option<Vec<u8>>,
    pub linkpath: Option<Vec<u8>>,
    pub size: Option<u64>,
    pub uid: Option<u64>,
    pub gid: Option<u64>,
    pub mtime: Option<i64>,
}

/// Decodes pax records (`LEN key=value\n`, LEN counting the whole record).
pub fn pax(mut data: &[u8]) -> Result<Pax, Error> {
    let mut out = Pax::default();
    while !data.is_empty() {
        if data.iter().all(|c| *c == 0) {
            break;
        }
        let sp = data.iter().position(|c| *c == b' ').ok_or(Error::Pax)?;
        let len: usize = std::str::from_utf8(&data[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(Error::Pax)?;
        if len <= sp + 1 || len > data.len() || data[len - 1] != b'\n' {
            return Err(Error::Pax);
        }
        let record = &data[sp + 1..len - 1];
        let eq = record.iter().position(|c| *c == b'=').ok_or(Error::Pax)?;
        let (key, value) = (&record[..eq], &record[eq + 1..]);
        let num = || -> Result<u64, Error> {
            std::str::from_utf8(value)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(Error::Pax)
        };
        match key {
            b"path" => out.path = Some(value.to_vec()),
            b"linkpath" => out.linkpath = Some(value.to_vec()),
            b"size" => out.size = Some(num()?),
            b"uid" => out.uid = Some(num()?),
            b"gid" => out.gid = Some(num()?),
            b"mtime" => {
                let whole = value.split(|c| *c == b'.').next().unwrap_or(b"0");
                out.mtime = std::str::from_utf8(whole).ok().and_then(|s| s.parse().ok());
            }
            _ => {}
        }
        data = &data[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(name: &str, kind: u8, size: u64) -> [u8; BLOCK] {
        let mut b = [0u8; BLOCK];
        b[..name.len()].copy_from_slice(name.as_bytes());
        b[100..107].copy_from_slice(b"0000644");
        b[108..115].copy_from_slice(b"0000000");
        b[116..123].copy_from_slice(b"0000000");
        b[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        b[136..147].copy_from_slice(b"00000000000");
        b[156] = kind;
        b[257..263].copy_from_slice(b"ustar\0");
        b[263..265].copy_from_slice(b"00");
        b[148..156].copy_from_slice(b"        ");
        let sum: u32 = b.iter().map(|c| u32::from(*c)).sum();
        b[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        b
    }

    #[test]
    fn decodes_a_ustar_header() {
        let h = header(&block("etc/hostname", b'0', 6)).unwrap();
        assert_eq!(h.name, b"etc/hostname");
        assert_eq!((h.size, h.mode, h.kind), (6, 0o644, Type::File));
        assert_eq!(padded(6), 512);
    }

    #[test]
    fn a_damaged_header_is_a_checksum_error() {
        let mut b = block("a", b'0', 1);
        b[0] = b'b';
        assert_eq!(header(&b), Err(Error::Checksum));
        assert_eq!(header(&[7u8; BLOCK]).unwrap_err(), Error::Number("chksum"));
    }

    #[test]
    fn base_256_numbers_and_pax_records() {
        assert_eq!(number(&[0x80, 0, 0, 1, 0], "size"), Ok(256));
        let p = pax(b"25 path=a/very/long/name\n11 size=42\n").unwrap();
        assert_eq!(p.path.as_deref(), Some(&b"a/very/long/name"[..]));
        assert_eq!(p.size, Some(42));
        assert_eq!(pax(b"99 path=x\n"), Err(Error::Pax));
    }
}

//! The block manifest of an NBD root image (docs/swarm.md): the image cut into fixed-size
//! chunks, one SHA-256 per chunk, as text; the manifest's own SHA-256 names the image's
//! content on a client's command line. A codec: bytes in, a manifest out and back, no I/O
//! but `of_reader`'s one pass over a reader. The client agent (`agent/`) compiles this very
//! file too (`#[path]`), so the daemon and the agent read one format from one source: it
//! uses `std` and `sha2` only.
//!
//! ```text
//! bootpool-blocks 1
//! chunk 262144
//! size 419430400
//! 3f2a...e1            the SHA-256 of bytes 0..262144, 64 lowercase hex digits
//! 9c01...7d            of 262144..524288; the last chunk may be shorter
//! ```

use sha2::{Digest, Sha256};
use std::fmt;

/// The first line, with the format's version.
const HEADER: &str = "bootpool-blocks 1";
/// The chunk size bootpool cuts its images into: a kernel's NBD reads are 4-128 KiB, so a
/// miss costs at most 256 KiB from the server (2 ms at 1 Gbit/s), and a 400 MB root is 1600
/// chunks (a manifest of 105 KB).
pub const CHUNK: u32 = 256 * 1024;
/// The chunk sizes a manifest may give: powers of two from 4 KiB to 4 MiB.
pub const MIN_CHUNK: u32 = 4 * 1024;
pub const MAX_CHUNK: u32 = 4 * 1024 * 1024;
/// A manifest naming more chunks than this is refused (4 TiB at 256 KiB a chunk): a decoder
/// never allocates on a stranger's say.
pub const MAX_CHUNKS: u64 = 1 << 24;

/// A SHA-256 digest.
pub type Sha = [u8; 32];

/// An image as chunks: their size, the image's size, and each chunk's digest in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocks {
    pub chunk: u32,
    pub size: u64,
    pub digests: Vec<Sha>,
}

/// Why bytes are not a block manifest; `line` counts from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bad {
    pub line: usize,
    pub why: String,
}

impl fmt::Display for Bad {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "block manifest line {}: {}", self.line, self.why)
    }
}

impl std::error::Error for Bad {}

/// The number of chunks of `size` bytes cut at `chunk`.
pub fn chunks_of(size: u64, chunk: u32) -> u64 {
    size.div_ceil(u64::from(chunk))
}

/// The SHA-256 of `bytes`.
pub fn sha(bytes: &[u8]) -> Sha {
    Sha256::digest(bytes).into()
}

/// `sha` as 64 lowercase hex digits.
pub fn hex(d: &Sha) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// 64 lowercase hex digits as a digest; anything else is `None`.
pub fn parse_hex(s: &str) -> Option<Sha> {
    let s = s.as_bytes();
    if s.len() != 64 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut d = [0; 32];
    for (i, pair) in s.chunks_exact(2).enumerate() {
        d[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(d)
}

impl Blocks {
    /// The manifest of the bytes `read` gives, cut at `chunk` (one of the sizes
    /// `MIN_CHUNK..=MAX_CHUNK`, a power of two), read once to their end.
    pub fn of_reader(mut read: impl std::io::Read, chunk: u32) -> std::io::Result<Blocks> {
        assert!(chunk.is_power_of_two() && (MIN_CHUNK..=MAX_CHUNK).contains(&chunk));
        let mut buf = vec![0u8; chunk as usize];
        let (mut size, mut digests) = (0u64, Vec::new());
        loop {
            let mut n = 0;
            while n < buf.len() {
                match read.read(&mut buf[n..]) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            if n == 0 {
                break;
            }
            size += n as u64;
            digests.push(sha(&buf[..n]));
            if n < buf.len() {
                break;
            }
        }
        Ok(Blocks {
            chunk,
            size,
            digests,
        })
    }

    /// The manifest as text (the bytes its digest is taken of).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = format!("{HEADER}\nchunk {}\nsize {}\n", self.chunk, self.size);
        out.reserve(self.digests.len() * 65);
        for d in &self.digests {
            out.push_str(&hex(d));
            out.push('\n');
        }
        out.into_bytes()
    }

    /// The manifest's own digest: what names the image on a client's command line.
    pub fn digest(&self) -> Sha {
        sha(&self.encode())
    }

    /// Reads a manifest, refusing anything `encode` would not have written: an unknown
    /// version, a chunk size out of range, a size and a count of digests that disagree.
    pub fn decode(bytes: &[u8]) -> Result<Blocks, Bad> {
        let text = std::str::from_utf8(bytes).map_err(|_| Bad {
            line: 0,
            why: "not text".into(),
        })?;
        let Some(body) = text.strip_suffix('\n') else {
            return Err(Bad {
                line: 0,
                why: "no newline at the end (cut short?)".into(),
            });
        };
        let mut lines = body.split('\n').enumerate().map(|(i, l)| (i + 1, l));
        let bad = |line, why: String| Bad { line, why };
        match lines.next() {
            Some((_, HEADER)) => {}
            Some((n, l)) => return Err(bad(n, format!("`{l}` is not `{HEADER}`"))),
            None => return Err(bad(1, "empty".into())),
        }
        let mut field = |key: &str| -> Result<u64, Bad> {
            let (n, l) = lines
                .next()
                .ok_or_else(|| bad(0, format!("no `{key}` line")))?;
            l.strip_prefix(key)
                .and_then(|v| v.strip_prefix(' '))
                .and_then(|v| v.parse::<u64>().ok().filter(|n| n.to_string() == v))
                .ok_or_else(|| bad(n, format!("`{l}` is not `{key} NUMBER`")))
        };
        let chunk = field("chunk")?;
        let size = field("size")?;
        let Some(chunk) = u32::try_from(chunk)
            .ok()
            .filter(|c| c.is_power_of_two() && (MIN_CHUNK..=MAX_CHUNK).contains(c))
        else {
            return Err(bad(
                2,
                format!("chunk {chunk} is not a power of two from {MIN_CHUNK} to {MAX_CHUNK}"),
            ));
        };
        let want = chunks_of(size, chunk);
        if want > MAX_CHUNKS {
            return Err(bad(3, format!("size {size} is over {MAX_CHUNKS} chunks")));
        }
        let mut digests = Vec::with_capacity(want as usize);
        for (n, l) in lines {
            let d = parse_hex(l).ok_or_else(|| bad(n, format!("`{l}` is not a SHA-256")))?;
            if digests.len() as u64 == want {
                return Err(bad(n, format!("more digests than size {size} has chunks")));
            }
            digests.push(d);
        }
        if digests.len() as u64 != want {
            return Err(bad(
                3,
                format!(
                    "size {size} is {want} chunks of {chunk}, and {} digests follow",
                    digests.len()
                ),
            ));
        }
        Ok(Blocks {
            chunk,
            size,
            digests,
        })
    }

    /// Chunk `index`'s place in the image: (offset, length); the last one may be short.
    pub fn span(&self, index: u64) -> Option<(u64, u32)> {
        if index >= self.digests.len() as u64 {
            return None;
        }
        let offset = index * u64::from(self.chunk);
        let len = (self.size - offset).min(u64::from(self.chunk)) as u32;
        Some((offset, len))
    }

    /// Whether `bytes` are chunk `index`: its length and its digest.
    pub fn holds(&self, index: u64, bytes: &[u8]) -> bool {
        self.span(index)
            .is_some_and(|(_, len)| bytes.len() == len as usize)
            && sha(bytes) == self.digests[index as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 4096) as u8).collect()
    }

    #[test]
    fn a_manifest_reads_back_as_written_and_names_each_chunk() {
        let bytes = image(3 * 4096 + 100);
        let b = Blocks::of_reader(&bytes[..], 4096).unwrap();
        assert_eq!((b.chunk, b.size, b.digests.len()), (4096, 12388, 4));
        assert_eq!(Blocks::decode(&b.encode()).unwrap(), b);
        assert_eq!(b.span(3), Some((12288, 100)));
        assert_eq!(b.span(4), None);
        assert!(b.holds(3, &bytes[12288..]));
        assert!(b.holds(0, &bytes[..4096]));
        assert!(!b.holds(0, &bytes[..4095]), "short");
        assert!(!b.holds(1, &bytes[..4096]), "another chunk's bytes");
        // An image of whole chunks has no short one, and an empty image none at all.
        let whole = Blocks::of_reader(&bytes[..8192], 4096).unwrap();
        assert_eq!(whole.digests.len(), 2);
        assert_eq!(whole.span(1), Some((4096, 4096)));
        let empty = Blocks::of_reader(&[][..], 4096).unwrap();
        assert_eq!((empty.size, empty.digests.len()), (0, 0));
        assert_eq!(Blocks::decode(&empty.encode()).unwrap(), empty);
        // The digests are sha256sum's, as an admin checks a chunk with dd and sha256sum.
        assert_eq!(
            hex(&sha(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(parse_hex(&hex(&b.digests[2])), Some(b.digests[2]));
    }

    #[test]
    fn a_changed_byte_changes_its_chunks_digest_alone_and_the_manifests() {
        let bytes = image(5 * 4096);
        let mut changed = bytes.clone();
        changed[2 * 4096 + 17] ^= 1;
        let a = Blocks::of_reader(&bytes[..], 4096).unwrap();
        let b = Blocks::of_reader(&changed[..], 4096).unwrap();
        let differ: Vec<usize> = (0..5).filter(|&i| a.digests[i] != b.digests[i]).collect();
        assert_eq!(differ, [2]);
        assert_ne!(a.digest(), b.digest());
        assert!(!a.holds(2, &changed[2 * 4096..3 * 4096]));
    }

    #[test]
    fn anything_encode_would_not_write_is_refused_with_its_line() {
        let good = Blocks::of_reader(&image(9000)[..], 4096).unwrap().encode();
        let text = String::from_utf8(good.clone()).unwrap();
        let line_of = |t: &str| Blocks::decode(t.as_bytes()).unwrap_err().line;
        assert_eq!(line_of(&text.replace("blocks 1", "blocks 2")), 1);
        assert_eq!(line_of(&text.replace("chunk 4096", "chunk 4095")), 2);
        assert_eq!(line_of(&text.replace("chunk 4096", "chunk 1024")), 2);
        assert_eq!(line_of(&text.replace("size 9000", "size +9000")), 3);
        assert_eq!(line_of(&text.replace("size 9000", "size 90000")), 3);
        assert_eq!(
            line_of(&text.replace("size 9000", "size 8000")),
            6,
            "a digest too many"
        );
        let first = text.lines().nth(3).unwrap();
        assert_eq!(line_of(&text.replace(first, &first.to_uppercase())), 4);
        assert_eq!(line_of(&text.replace("size 9000", "size 09000")), 3);
        let mut cut = good.clone();
        cut.truncate(good.len() - 10);
        assert!(Blocks::decode(&cut).is_err(), "cut short");
        assert!(
            Blocks::decode(&good[..good.len() - 1]).is_err(),
            "no newline"
        );
        let huge = "bootpool-blocks 1\nchunk 4096\nsize 99999999999999999\n";
        assert_eq!(
            line_of(huge),
            3,
            "past MAX_CHUNKS, refused before allocating"
        );
        assert!(Blocks::decode(b"").is_err());
        assert!(Blocks::decode(&[0xff, b'\n']).is_err());
    }
}

//! An initrd's layout as the kernel reads it (pure): uncompressed newc cpio archives, each up
//! to its `TRAILER!!!` entry, with zero bytes between them, then at most one compressed
//! part that runs to the end. Early microcode and firmware ride in front uncompressed
//! (initramfs-tools, dracut); the main archive is the compressed tail. `image::wire` uses
//! this to recompress only that tail and leave the front byte for byte. `write` makes a newc
//! archive (bootpool's own addition, `export::addition`).

/// The newc header: magic, then thirteen 8-digit hex fields.
const HEADER: usize = 110;
const MAGICS: [&[u8]; 2] = [b"070701", b"070702"];
const TRAILER: &[u8] = b"TRAILER!!!\0";

/// What follows an initrd's uncompressed front.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Nothing: the initrd is uncompressed archives (and padding) only.
    None,
    /// A compressed part starting at this offset, by the compressor its magic names.
    Compressed { at: usize, by: Compressor },
    /// Bytes at this offset that are neither an archive, padding nor a known compressor's
    /// magic, or an archive cut short: the kernel would stop there too.
    Unknown { at: usize },
}

/// The compressors the kernel can unpack an initrd part with (`lib/decompress.c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compressor {
    Gzip,
    Zstd,
    Xz,
    Lzma,
    Bzip2,
    Lz4,
    Lzo,
}

impl Compressor {
    fn of(bytes: &[u8]) -> Option<Compressor> {
        Some(match bytes {
            [0x1f, 0x8b | 0x9e, ..] => Compressor::Gzip,
            [0x28, 0xb5, 0x2f, 0xfd, ..] => Compressor::Zstd,
            [0xfd, b'7', b'z', b'X', b'Z', 0, ..] => Compressor::Xz,
            [0x5d, 0x00, 0x00, ..] => Compressor::Lzma,
            [b'B', b'Z', b'h', ..] => Compressor::Bzip2,
            [0x02, 0x21, 0x4c, 0x18, ..] => Compressor::Lz4,
            [0x89, b'L', b'Z', b'O', ..] => Compressor::Lzo,
            _ => return None,
        })
    }
}

/// Walks the initrd's uncompressed front and says what comes after it.
pub fn tail(bytes: &[u8]) -> Tail {
    let mut at = 0;
    loop {
        while bytes.get(at) == Some(&0) {
            at += 1;
        }
        let rest = &bytes[at..];
        if rest.is_empty() {
            return Tail::None;
        }
        if let Some(by) = Compressor::of(rest) {
            return Tail::Compressed { at, by };
        }
        match archive_len(rest) {
            Some(len) => at += len,
            None => return Tail::Unknown { at },
        }
    }
}

/// The length of the newc archive at the start of `bytes`, through its trailer entry and
/// that entry's padding; `None` if it is not one or is cut short.
fn archive_len(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let header = bytes.get(at..at + HEADER)?;
        if !MAGICS.contains(&&header[..6]) {
            return None;
        }
        let field = |i: usize| {
            let hex = std::str::from_utf8(&header[6 + 8 * i..14 + 8 * i]).ok()?;
            usize::from_str_radix(hex, 16).ok()
        };
        let (file_size, name_size) = (field(6)?, field(11)?);
        let name_end = at.checked_add(HEADER)?.checked_add(name_size)?;
        let name = bytes.get(at + HEADER..name_end)?;
        let data = align4(name_end);
        let end = align4(data.checked_add(file_size)?);
        if end > bytes.len() && !(name == TRAILER && data <= bytes.len()) {
            return None;
        }
        if name == TRAILER {
            return Some(end.min(bytes.len()));
        }
        at = end;
    }
}

/// The names of the entries of the newc archives at the start of `bytes`, in order (trailers
/// and the zero padding between archives left out), up to an entry whose header or name is cut
/// short, or to bytes that are no archive.
pub fn names(bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        while bytes.get(at) == Some(&0) {
            at += 1;
        }
        let Some(header) = bytes.get(at..at + HEADER) else {
            return out;
        };
        if !MAGICS.contains(&&header[..6]) {
            return out;
        }
        let field = |i: usize| {
            let hex = std::str::from_utf8(&header[6 + 8 * i..14 + 8 * i]).ok()?;
            usize::from_str_radix(hex, 16).ok()
        };
        let (Some(file_size), Some(name_size)) = (field(6), field(11)) else {
            return out;
        };
        let name_end = at + HEADER + name_size;
        let Some(name) = bytes.get(at + HEADER..name_end) else {
            return out;
        };
        if name != TRAILER {
            out.push(name.strip_suffix(b"\0").unwrap_or(name));
        }
        at = align4(align4(name_end).saturating_add(file_size));
    }
}

fn align4(n: usize) -> usize {
    n.div_ceil(4) * 4
}

/// One entry `write` puts in an archive: a folder (`data: None`) or a file, by its path
/// (no leading `/`), with its permission bits; owned by root, dated 0.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub name: &'a str,
    pub mode: u32,
    pub data: Option<&'a [u8]>,
}

/// A newc archive of `entries`, in order, then its trailer: the same bytes for the same entries.
/// A folder must come before what it holds: the kernel creates no missing parent.
pub fn write(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    let trailer = Entry {
        name: "TRAILER!!!",
        mode: 0,
        data: Some(b""),
    };
    for (ino, e) in entries.iter().chain([&trailer]).enumerate() {
        let (kind, nlink, data) = match e.data {
            None => (0o040000, 2, &b""[..]),
            Some(_) if e.name == trailer.name => (0, 1, &b""[..]),
            Some(d) => (0o100000, 1, d),
        };
        let ino = if e.name == trailer.name { 0 } else { ino + 1 };
        let header = format!(
            "070701{ino:08x}{:08x}{:08x}{:08x}{nlink:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            kind | (e.mode & 0o7777),
            0,
            0,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            e.name.len() + 1,
            0
        );
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(e.name.as_bytes());
        out.push(0);
        out.resize(align4(out.len()), 0);
        out.extend_from_slice(data);
        out.resize(align4(out.len()), 0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A newc entry: header, name with its NUL, padding, data, padding.
    fn entry(name: &str, data: &[u8]) -> Vec<u8> {
        let name = format!("{name}\0");
        let mut out = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            1,
            0o100644,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len(),
            0
        )
        .into_bytes();
        out.extend_from_slice(name.as_bytes());
        out.resize(align4(out.len()), 0);
        out.extend_from_slice(data);
        out.resize(align4(out.len()), 0);
        out
    }

    fn archive(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out: Vec<u8> = files.iter().flat_map(|(n, d)| entry(n, d)).collect();
        out.extend(entry("TRAILER!!!", b""));
        out
    }

    /// Names across archives and their padding, up to an entry cut short in its name.
    #[test]
    fn names_walks_every_archive_to_the_first_entry_cut_short() {
        let mut bytes = archive(&[("kernel/x86/microcode/GenuineIntel.bin", b"ucode")]);
        bytes.extend([0; 512]);
        bytes.extend(archive(&[
            ("init", b"#!/bin/sh\n"),
            ("conf/initramfs.conf", b""),
        ]));
        let all: Vec<&[u8]> = vec![
            b"kernel/x86/microcode/GenuineIntel.bin",
            b"init",
            b"conf/initramfs.conf",
        ];
        assert_eq!(names(&bytes), all);
        let cut = bytes.len() - entry("TRAILER!!!", b"").len() - 10;
        assert_eq!(names(&bytes[..cut]), all[..2]);
        assert!(names(b"\x1f\x8b\x08").is_empty());
    }

    /// `write`'s archive reads back entry for entry (tests/it/addition.rs unpacks one with cpio).
    #[test]
    fn a_written_archive_reads_back() {
        let bytes = write(&[
            Entry {
                name: "scripts",
                mode: 0o755,
                data: None,
            },
            Entry {
                name: "scripts/x",
                mode: 0o755,
                data: Some(b"#!/bin/sh\n"),
            },
        ]);
        let all: Vec<&[u8]> = vec![b"scripts", b"scripts/x"];
        assert_eq!(names(&bytes), all);
        assert_eq!(tail(&bytes), Tail::None);
        assert_eq!(bytes.len() % 4, 0);
        // The file's header: its inode, then its type and permission bits; the trailer last.
        let x = bytes.windows(10).position(|w| w == b"scripts/x\0").unwrap() - HEADER;
        assert_eq!(&bytes[x + 6..x + 22], b"00000002000081ed");
        let last = bytes.windows(6).rposition(|w| w == b"070701").unwrap();
        assert!(bytes[last + HEADER..].starts_with(TRAILER));
    }

    #[test]
    fn a_compressed_initrd_is_all_tail() {
        assert_eq!(
            tail(&[0x1f, 0x8b, 8, 0]),
            Tail::Compressed {
                at: 0,
                by: Compressor::Gzip
            }
        );
        assert_eq!(
            tail(&[0x28, 0xb5, 0x2f, 0xfd, 1]),
            Tail::Compressed {
                at: 0,
                by: Compressor::Zstd
            }
        );
    }

    #[test]
    fn microcode_in_front_is_walked_past_with_its_padding() {
        let mut initrd = archive(&[
            ("kernel", b""),
            ("kernel/x86/microcode/GenuineIntel.bin", b"abcde"),
        ]);
        initrd.extend(archive(&[("early2", b"0123456789")]));
        let front = initrd.len() + 512;
        initrd.resize(front, 0);
        initrd.extend([0x1f, 0x8b, 8, 0, 1, 2, 3]);
        assert_eq!(
            tail(&initrd),
            Tail::Compressed {
                at: front,
                by: Compressor::Gzip
            }
        );
    }

    #[test]
    fn an_uncompressed_initrd_has_no_tail() {
        let mut initrd = archive(&[("init", b"#!/bin/sh\n")]);
        assert_eq!(tail(&initrd), Tail::None);
        initrd.resize(initrd.len() + 100, 0);
        assert_eq!(tail(&initrd), Tail::None);
    }

    #[test]
    fn junk_or_an_archive_cut_short_is_unknown() {
        assert_eq!(tail(b"hello"), Tail::Unknown { at: 0 });
        let whole = archive(&[("init", b"#!/bin/sh\n")]);
        assert_eq!(tail(&whole[..60]), Tail::Unknown { at: 0 });
        assert_eq!(tail(&whole[..HEADER + 8]), Tail::Unknown { at: 0 });
        let mut junk = whole.clone();
        junk.extend(b"junk");
        assert_eq!(tail(&junk), Tail::Unknown { at: whole.len() });
        // Hex fields that are not hex, and sizes past the end: refused, never a panic.
        let mut bad = whole.clone();
        bad[6 + 8 * 6] = b'g';
        assert_eq!(tail(&bad), Tail::Unknown { at: 0 });
        let mut huge = whole;
        huge[6 + 8 * 6..14 + 8 * 6].copy_from_slice(b"ffffffff");
        assert_eq!(tail(&huge), Tail::Unknown { at: 0 });
    }
}

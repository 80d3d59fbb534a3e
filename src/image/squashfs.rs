//! The few fields of a squashfs superblock that bootpool reads (`image::wire` decides by them
//! whether an NBD root image can go out recompressed): magic, block size, compressor. A
//! codec: bytes in, fields out, no I/O.

/// The superblock's length; it starts the image.
pub const SUPERBLOCK_LEN: usize = 96;
/// "hsqs", little-endian.
const MAGIC: u32 = 0x7371_7368;

/// What the superblock says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    /// Bytes of file data compressed as one block (4 KiB to 1 MiB).
    pub block_size: u32,
    pub compressor: Compressor,
}

/// The compressor of the image's blocks and metadata (the superblock's id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compressor {
    Gzip,
    Lzma,
    Lzo,
    Xz,
    Lz4,
    Zstd,
    Unknown(u16),
}

impl Compressor {
    fn of(id: u16) -> Compressor {
        match id {
            1 => Compressor::Gzip,
            2 => Compressor::Lzma,
            3 => Compressor::Lzo,
            4 => Compressor::Xz,
            5 => Compressor::Lz4,
            6 => Compressor::Zstd,
            other => Compressor::Unknown(other),
        }
    }
}

/// The superblock at the start of `bytes`, if they start a squashfs 4 image (the only
/// version Linux has mounted since 2.6.29).
pub fn superblock(bytes: &[u8]) -> Option<Superblock> {
    let head = bytes.get(..SUPERBLOCK_LEN)?;
    let u16_at = |at: usize| u16::from_le_bytes([head[at], head[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().expect("4 bytes"));
    if u32_at(0) != MAGIC || u16_at(28) != 4 {
        return None;
    }
    let block_size = u32_at(12);
    // The block size is a power of two whose log is kept beside it.
    if !block_size.is_power_of_two() || u32::from(u16_at(22)) != block_size.trailing_zeros() {
        return None;
    }
    Some(Superblock {
        block_size,
        compressor: Compressor::of(u16_at(20)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(compressor: u16, block_log: u16, major: u16) -> Vec<u8> {
        let mut b = vec![0; SUPERBLOCK_LEN];
        b[0..4].copy_from_slice(b"hsqs");
        b[12..16].copy_from_slice(&(1u32 << block_log).to_le_bytes());
        b[20..22].copy_from_slice(&compressor.to_le_bytes());
        b[22..24].copy_from_slice(&block_log.to_le_bytes());
        b[28..30].copy_from_slice(&major.to_le_bytes());
        b
    }

    #[test]
    fn a_superblock_gives_its_block_size_and_compressor() {
        assert_eq!(
            superblock(&head(1, 17, 4)),
            Some(Superblock {
                block_size: 131072,
                compressor: Compressor::Gzip
            })
        );
        assert_eq!(
            superblock(&head(6, 20, 4)).unwrap().compressor,
            Compressor::Zstd
        );
        assert_eq!(
            superblock(&head(9, 12, 4)).unwrap().compressor,
            Compressor::Unknown(9)
        );
    }

    #[test]
    fn anything_else_is_not_a_squashfs_image() {
        assert_eq!(superblock(&head(1, 17, 3)), None, "squashfs 3");
        assert_eq!(superblock(&head(1, 17, 4)[..95]), None, "short");
        let mut b = head(1, 17, 4);
        b[22] = 16;
        assert_eq!(superblock(&b), None, "block log disagrees");
        b = head(1, 17, 4);
        b[0] = b'x';
        assert_eq!(superblock(&b), None, "magic");
        assert_eq!(
            superblock(&[0x53, 0xef].repeat(600)),
            None,
            "ext4-ish bytes"
        );
    }
}

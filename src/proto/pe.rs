//! PE/COFF headers (EFI applications, the kernel's EFI stub): whether an image carries an
//! Authenticode signature, which Secure Boot firmware and shim need. Only the headers are
//! read; whose key signed it is for the firmware and shim to judge.

/// Bytes from the start of a file that hold the headers of any EFI image we hand out.
pub const HEADER_BYTES: usize = 4096;

/// Whether the PE image whose first bytes are `head` has a certificate table (the
/// Authenticode signature: data directory 4, `IMAGE_DIRECTORY_ENTRY_SECURITY`); an error
/// for bytes that are no PE image.
pub fn signed(head: &[u8]) -> Result<bool, &'static str> {
    let u16_at = |at: usize| {
        head.get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        head.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    if head.get(..2) != Some(b"MZ") {
        return Err("no MZ header");
    }
    let pe = u32_at(0x3c).ok_or("cut short")? as usize;
    if head.get(pe..pe + 4) != Some(b"PE\0\0") {
        return Err("no PE signature where the MZ header points");
    }
    // The COFF file header is 20 bytes; the optional header follows.
    let opt = pe + 4 + 20;
    let (dirs_at, count_at) = match u16_at(opt).ok_or("cut short")? {
        0x10b => (opt + 96, opt + 92),   // PE32
        0x20b => (opt + 112, opt + 108), // PE32+
        _ => return Err("unknown optional header"),
    };
    const SECURITY: usize = 4;
    let count = u32_at(count_at).ok_or("cut short")? as usize;
    if count <= SECURITY {
        return Ok(false);
    }
    let size = u32_at(dirs_at + SECURITY * 8 + 4).ok_or("cut short")?;
    Ok(size > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PE32+ header with `dirs` data directories, the security one `size` bytes long.
    fn image(dirs: u32, size: u32) -> Vec<u8> {
        let mut b = vec![0u8; 512];
        b[..2].copy_from_slice(b"MZ");
        b[0x3c..0x40].copy_from_slice(&0x80u32.to_le_bytes());
        b[0x80..0x84].copy_from_slice(b"PE\0\0");
        let opt = 0x80 + 24;
        b[opt..opt + 2].copy_from_slice(&0x20bu16.to_le_bytes());
        b[opt + 108..opt + 112].copy_from_slice(&dirs.to_le_bytes());
        let sec = opt + 112 + 4 * 8;
        b[sec..sec + 4].copy_from_slice(&0x1000u32.to_le_bytes());
        b[sec + 4..sec + 8].copy_from_slice(&size.to_le_bytes());
        b
    }

    #[test]
    fn the_certificate_table_says_whether_it_is_signed() {
        assert_eq!(signed(&image(16, 2048)), Ok(true));
        assert_eq!(signed(&image(16, 0)), Ok(false));
        assert_eq!(signed(&image(4, 2048)), Ok(false), "no security directory");
        assert!(signed(b"\x7fELF").is_err());
        assert!(signed(&image(16, 2048)[..0x90]).is_err());
        let mut bad = image(16, 1);
        bad[0x3c] = 0xff;
        assert!(signed(&bad).is_err());
    }
}

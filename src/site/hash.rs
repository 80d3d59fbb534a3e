//! RFC 3074's load-balancing hash, a pure codec: a client's key (its hardware address, or a
//! DHCPv6 client's DUID) to one of 256 buckets, by the Pearson hash over the RFC's mixing
//! table (section 6). ISC dhcpd's failover and Kea's HA hash the same way, so a bucket here is
//! the bucket there.

/// The mixing table of RFC 3074 section 6: the 256 byte values in a fixed pseudo-random order.
const MIX: [u8; 256] = [
    251, 175, 119, 215, 81, 14, 79, 191, 103, 49, 181, 143, 186, 157, 0, 232, 31, 32, 55, 60, 152,
    58, 17, 237, 174, 70, 160, 144, 220, 90, 57, 223, 59, 3, 18, 140, 111, 166, 203, 196, 134, 243,
    124, 95, 222, 179, 197, 65, 180, 48, 36, 15, 107, 46, 233, 130, 165, 30, 123, 161, 209, 23, 97,
    16, 40, 91, 219, 61, 100, 10, 210, 109, 250, 127, 22, 138, 29, 108, 244, 67, 207, 9, 178, 204,
    74, 98, 126, 249, 167, 116, 34, 77, 193, 200, 121, 5, 20, 113, 71, 35, 128, 13, 182, 94, 25,
    226, 227, 199, 75, 27, 41, 245, 230, 224, 43, 225, 177, 26, 155, 150, 212, 142, 218, 115, 241,
    73, 88, 105, 39, 114, 62, 255, 192, 201, 145, 214, 168, 158, 221, 148, 154, 122, 12, 84, 82,
    163, 44, 139, 228, 236, 205, 242, 217, 11, 187, 146, 159, 64, 86, 239, 195, 42, 106, 198, 118,
    112, 184, 172, 87, 2, 173, 117, 176, 229, 247, 253, 137, 185, 99, 164, 102, 147, 45, 66, 231,
    52, 141, 211, 194, 206, 246, 238, 56, 110, 78, 248, 63, 240, 189, 93, 92, 51, 53, 183, 19, 171,
    72, 50, 33, 104, 101, 69, 8, 252, 83, 120, 76, 135, 85, 54, 202, 125, 188, 213, 96, 235, 136,
    208, 162, 129, 190, 132, 156, 38, 47, 1, 7, 254, 24, 4, 216, 131, 89, 21, 28, 133, 37, 153,
    149, 80, 170, 68, 6, 169, 234, 151,
];

/// The bucket of `key` (RFC 3074 section 6): the hash starts as the key's length (mod 256)
/// and takes in the key's bytes from the last to the first, each through the mixing table.
pub fn bucket(key: &[u8]) -> u8 {
    key.iter()
        .rev()
        .fold(key.len() as u8, |hash, &b| MIX[usize::from(hash ^ b)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mixing_table_is_a_permutation_of_every_byte() {
        let mut seen = [false; 256];
        for &v in &MIX {
            assert!(!seen[usize::from(v)], "{v} twice");
            seen[usize::from(v)] = true;
        }
        // Its ends as the RFC prints them.
        assert_eq!((MIX[0], MIX[1], MIX[254], MIX[255]), (251, 175, 234, 151));
    }

    #[test]
    fn known_buckets() {
        // Worked by hand from the RFC's definition: a one-byte key k is MIX[1 ^ k]; an empty
        // key is its length, 0.
        assert_eq!(bucket(&[]), 0);
        assert_eq!(bucket(&[0]), MIX[1]);
        assert_eq!(bucket(&[1]), MIX[0]);
        // Two bytes [a, b]: MIX[MIX[2 ^ b] ^ a].
        let (a, b) = (0x52u8, 0x54u8);
        assert_eq!(
            bucket(&[a, b]),
            MIX[usize::from(MIX[usize::from(2 ^ b)] ^ a)]
        );
        // MACs, as the RFC's C function (loadb_p_hash) gives them, computed apart from this
        // code; pinned so the split never moves between members of different versions.
        assert_eq!(bucket(&[0x52, 0x54, 0x00, 0x12, 0x34, 0x56]), 0x9c);
        assert_eq!(bucket(&[0x00; 6]), 0xfe);
        assert_eq!(bucket(&[0xff; 6]), 0x4f);
    }

    #[test]
    fn the_order_of_the_bytes_counts() {
        let a = [0x52, 0x54, 0x00, 0x00, 0x00, 0x01];
        let b = [0x01, 0x00, 0x00, 0x00, 0x54, 0x52];
        assert_ne!(bucket(&a), bucket(&b));
    }

    #[test]
    fn consecutive_macs_spread_evenly_over_the_buckets() {
        // A room's MACs are often consecutive: the hash must still spread them. 65536 MACs
        // over 256 buckets: 256 each on average; none may be empty or more than twice full.
        let mut counts = [0u32; 256];
        for n in 0..65536u32 {
            let [_, _, hi, lo] = n.to_be_bytes();
            counts[usize::from(bucket(&[0x52, 0x54, 0x00, 0x77, hi, lo]))] += 1;
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*min > 128 && *max < 512, "{min}..{max}");
        // Two servers by bucket parity: close to half each.
        let even: u32 = counts.iter().step_by(2).sum();
        assert!((31_000..34_500).contains(&even), "{even}");
    }
}

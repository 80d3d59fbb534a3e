//! A tickle ACK (as CTDB sends one): an IPv4 TCP segment with only ACK set and zero sequence
//! and acknowledgement numbers, from a server's address and port to a client's. Sent by a host
//! that has just taken the address over (docs/failover.md), it makes the client's TCP answer
//! with an ACK of its own, which the new host's kernel (holding no such connection) answers
//! with a reset: the client then reconnects at once instead of waiting out its retransmission
//! backoff. Pure: bytes only.

/// An IPv4 header and a TCP header, no options, no payload.
pub const LEN: usize = 20 + 20;

/// The window the segment advertises (any will do; CTDB's).
const WINDOW: u16 = 1234;

/// One end of a TCP connection: an IPv4 address (its four bytes) and a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    pub ip: [u8; 4],
    pub port: u16,
}

/// The tickle from `from` (the server's address and port) to `to` (the client's).
pub fn ack(from: End, to: End) -> [u8; LEN] {
    let mut p = [0u8; LEN];
    // IPv4: version 4, 5 words; total length; don't fragment; TTL 64; TCP.
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(LEN as u16).to_be_bytes());
    p[6] = 0x40;
    p[8] = 64;
    p[9] = 6;
    p[12..16].copy_from_slice(&from.ip);
    p[16..20].copy_from_slice(&to.ip);
    let ip_sum = checksum(&[&p[..20]]);
    p[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    // TCP: ports; sequence and acknowledgement 0; 5 words; ACK; the window.
    let t = &mut p[20..];
    t[0..2].copy_from_slice(&from.port.to_be_bytes());
    t[2..4].copy_from_slice(&to.port.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = 0x10;
    t[14..16].copy_from_slice(&WINDOW.to_be_bytes());
    let mut pseudo = [0u8; 12];
    pseudo[0..4].copy_from_slice(&from.ip);
    pseudo[4..8].copy_from_slice(&to.ip);
    pseudo[9] = 6;
    pseudo[10..12].copy_from_slice(&20u16.to_be_bytes());
    let tcp_sum = checksum(&[&pseudo, &p[20..]]);
    p[36..38].copy_from_slice(&tcp_sum.to_be_bytes());
    p
}

/// The Internet checksum (RFC 1071) over `parts`, each of even length.
fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = 0;
    for part in parts {
        for w in part.chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tickle_is_a_bare_ack_with_checksums_that_verify() {
        let from = End {
            ip: [10, 77, 0, 1],
            port: 2049,
        };
        let to = End {
            ip: [10, 77, 0, 100],
            port: 871,
        };
        let p = ack(from, to);
        assert_eq!(p[0], 0x45);
        assert_eq!(u16::from_be_bytes([p[2], p[3]]), 40);
        assert_eq!(
            (p[9], &p[12..16], &p[16..20]),
            (6, &[10, 77, 0, 1][..], &[10, 77, 0, 100][..])
        );
        // A header with its checksum in sums to all ones (RFC 1071).
        assert_eq!(checksum(&[&p[..20]]), 0);
        let mut pseudo = [0u8; 12];
        pseudo[0..4].copy_from_slice(&p[12..16]);
        pseudo[4..8].copy_from_slice(&p[16..20]);
        pseudo[9] = 6;
        pseudo[11] = 20;
        assert_eq!(checksum(&[&pseudo, &p[20..]]), 0);
        let t = &p[20..];
        assert_eq!(
            (
                u16::from_be_bytes([t[0], t[1]]),
                u16::from_be_bytes([t[2], t[3]])
            ),
            (2049, 871)
        );
        assert_eq!((&t[4..12], t[12], t[13]), (&[0u8; 8][..], 0x50, 0x10));
    }

    /// RFC 1071's worked example: the words 0001 f203 f4f5 f6f7 sum to ddf2.
    #[test]
    fn the_checksum_is_rfc_1071s() {
        let words = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(checksum(&[&words]), !0xddf2);
    }
}

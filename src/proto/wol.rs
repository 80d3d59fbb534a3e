//! Wake-on-LAN's magic packet: six 0xFF bytes, then the target's MAC sixteen times (102 bytes,
//! sent as a UDP datagram to port 9); and the MAC read back out of one (the lab's listener).

/// The port magic packets are sent to ("discard").
pub const PORT: u16 = 9;
/// A magic packet's length.
pub const LEN: usize = 6 + 16 * 6;

/// The magic packet that wakes `mac`.
pub fn magic_packet(mac: [u8; 6]) -> [u8; LEN] {
    let mut p = [0xFF; LEN];
    for copy in p[6..].chunks_exact_mut(6) {
        copy.copy_from_slice(&mac);
    }
    p
}

/// The MAC a datagram wakes, if it holds a magic packet: the sync stream and sixteen copies of
/// one MAC, anywhere in it (a SecureOn password after them is allowed and ignored).
pub fn woken(datagram: &[u8]) -> Option<[u8; 6]> {
    let start = datagram
        .windows(LEN)
        .position(|w| w[..6] == [0xFF; 6] && w[6..12] != [0xFF; 6])?;
    let body = &datagram[start + 6..start + LEN];
    let mac: [u8; 6] = body[..6].try_into().ok()?;
    body.chunks_exact(6).all(|c| c == mac).then_some(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x77, 0x00, 0x01];

    #[test]
    fn a_magic_packet_is_the_sync_stream_then_sixteen_macs() {
        let p = magic_packet(MAC);
        assert_eq!(p.len(), 102);
        assert_eq!(p[..6], [0xFF; 6]);
        for i in 0..16 {
            assert_eq!(p[6 + 6 * i..12 + 6 * i], MAC);
        }
        assert_eq!(woken(&p), Some(MAC));
    }

    #[test]
    fn only_whole_magic_packets_wake() {
        let p = magic_packet(MAC);
        // Behind a header, or with a 6-byte SecureOn password after it.
        let mut framed = vec![0u8; 8];
        framed.extend_from_slice(&p);
        framed.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
        assert_eq!(woken(&framed), Some(MAC));
        assert_eq!(woken(&p[..101]), None);
        let mut broken = p;
        broken[50] ^= 1;
        assert_eq!(woken(&broken), None);
        assert_eq!(woken(&[0xFF; 102]), None);
        assert_eq!(woken(&[]), None);
    }
}

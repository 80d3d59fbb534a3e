//! Randomized decoding in the normal suite (cargo-fuzz needs nightly and cargo-fuzz; the
//! targets in fuzz/ check the same properties): mutated real packets through the DHCP and
//! DHCPv6 pre-passes and the TFTP decoder never panic and stay within what was sent.

use bootpool::proto::dhcp::{self, MAX_PACKET};
use bootpool::proto::dhcp6;
use bootpool::proto::tftp::{self, Packet};

/// xorshift64*: reproducible from its seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Flips, overwrites, inserts, deletes and truncates a few bytes of `seed`.
fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(b.len() + 1);
        match rng.below(5) {
            0 if at < b.len() => b[at] ^= 1 << rng.below(8),
            1 if at < b.len() => b[at] = rng.next() as u8,
            2 => b.insert(at, rng.next() as u8),
            3 if at < b.len() => {
                b.remove(at);
            }
            _ => b.truncate(at),
        }
    }
    b
}

/// A PXE DISCOVER as iPXE sends it.
fn discover() -> Vec<u8> {
    let mut b = vec![0u8; 236];
    b[..3].copy_from_slice(&[1, 1, 6]);
    b[28..34].copy_from_slice(&[0x52, 0x54, 0, 0x77, 0, 1]);
    b.extend_from_slice(&[99, 130, 83, 99, 53, 1, 1, 93, 2, 0, 7, 60, 9]);
    b.extend_from_slice(b"PXEClient");
    b.extend_from_slice(&[97, 17, 0]);
    b.extend_from_slice(&[0xab; 16]);
    b.extend_from_slice(&[77, 4]);
    b.extend_from_slice(b"iPXE");
    b.extend_from_slice(&[52, 1, 3, 55, 3, 1, 3, 67, 255]);
    b
}

#[test]
fn dhcp_prepass_survives_mutations() {
    let seed = discover();
    assert!(dhcp::parse_request(&seed).is_ok());
    let mut rng = Rng(0x5eed_d4c9);
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..200_000 {
        let b = mutate(&mut rng, &seed);
        match dhcp::parse_request(&b) {
            Ok(req) => {
                accepted += 1;
                assert!(b.len() <= MAX_PACKET);
                let total: usize = req.options.values().map(Vec::len).sum();
                assert!(total <= b.len(), "{b:?}");
                let _ = (req.arch(), req.uuid(), req.is_pxe(), req.is_ipxe());
            }
            Err(_) => refused += 1,
        }
    }
    // The mutations exercised both sides of the decoder.
    assert!(accepted > 1000 && refused > 1000, "{accepted} {refused}");
    // Pure noise of every length up to past the cap.
    for len in 0..MAX_PACKET + 8 {
        let b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let _ = dhcp::parse_request(&b);
    }
}

/// A SOLICIT as OVMF's PXE over IPv6 sends it (DUID-LLT, IA_NA, ORO, NII, arch 7, vendor
/// class `PXEClient` under enterprise 343).
fn solicit() -> Vec<u8> {
    let mut b = vec![1, 0x12, 0x34, 0x56];
    let mut opt = |code: u16, value: &[u8]| {
        b.extend_from_slice(&code.to_be_bytes());
        b.extend_from_slice(&(value.len() as u16).to_be_bytes());
        b.extend_from_slice(value);
    };
    opt(1, &[0, 1, 0, 1, 1, 2, 3, 4, 0x52, 0x54, 0, 0x77, 1, 1]);
    opt(3, &[0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0]);
    opt(6, &[0, 59, 0, 60]);
    opt(62, &[1, 3, 0]);
    opt(61, &[0, 7]);
    let mut class = vec![0, 0, 1, 87, 0, 9];
    class.extend_from_slice(b"PXEClient");
    opt(16, &class);
    b
}

#[test]
fn dhcp6_prepass_survives_mutations() {
    let seed = solicit();
    assert!(dhcp6::parse_request(&seed).unwrap().is_pxe());
    let mut rng = Rng(0x5eed_d6c9);
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..200_000 {
        let b = mutate(&mut rng, &seed);
        match dhcp6::parse_request(&b) {
            Ok(req) => {
                accepted += 1;
                let total: usize =
                    req.options.values().map(Vec::len).sum::<usize>() + req.client_id.len();
                assert!(total <= b.len(), "{b:?}");
                let _ = (req.arch(), req.requested(), req.is_pxe(), req.is_ipxe());
                let _ = req.mac(std::net::Ipv6Addr::UNSPECIFIED);
            }
            Err(_) => refused += 1,
        }
    }
    assert!(accepted > 1000 && refused > 1000, "{accepted} {refused}");
    for len in 0..dhcp6::MAX_PACKET + 8 {
        let b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let _ = dhcp6::parse_request(&b);
    }
}

#[test]
fn tftp_decoder_survives_mutations_and_round_trips() {
    let seeds: Vec<Vec<u8>> = vec![
        b"\x00\x01ipxe.efi\x00octet\x00tsize\x000\x00blksize\x001468\x00windowsize\x004\x00"
            .to_vec(),
        tftp::encode_data(7, &[0x55; 512]),
        tftp::encode_ack(65535),
        tftp::encode_error(8, "size probe"),
        tftp::encode_oack(&[("blksize".into(), "1468".into())]),
    ];
    for s in &seeds {
        assert!(tftp::decode(s).is_ok(), "{s:?}");
    }
    let mut rng = Rng(0x7f7f_0069);
    let (mut accepted, mut refused) = (0, 0);
    for i in 0..200_000 {
        let b = mutate(&mut rng, &seeds[i % seeds.len()]);
        let Ok(p) = tftp::decode(&b) else {
            refused += 1;
            continue;
        };
        accepted += 1;
        let again = match &p {
            Packet::Data { block, data } => tftp::encode_data(*block, data),
            Packet::Ack(block) => tftp::encode_ack(*block),
            Packet::Error { code, message } => tftp::encode_error(*code, message),
            _ => continue,
        };
        assert_eq!(tftp::decode(&again), Ok(ascii_only(p)), "{b:?}");
    }
    assert!(accepted > 1000 && refused > 1000, "{accepted} {refused}");
}

/// An ERROR's message is read leniently (lossy, for the log) but sent as ASCII only.
fn ascii_only(p: Packet) -> Packet {
    match p {
        Packet::Error { code, message } => Packet::Error {
            code,
            message: message.chars().filter(char::is_ascii).collect(),
        },
        p => p,
    }
}

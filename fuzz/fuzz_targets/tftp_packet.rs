//! Fuzzes the TFTP packet decoder: never a panic, and a decoded DATA, ACK or ERROR encodes
//! back to a packet that decodes the same (an ERROR message as its ASCII part).
#![no_main]

use bootpool::proto::tftp::{self, Packet};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = tftp::decode(data) else { return };
    let again = match &p {
        Packet::Data { block, data } => tftp::encode_data(*block, data),
        Packet::Ack(block) => tftp::encode_ack(*block),
        Packet::Error { code, message } => tftp::encode_error(*code, message),
        _ => return,
    };
    assert_eq!(tftp::decode(&again), Ok(ascii_only(p)));
});

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

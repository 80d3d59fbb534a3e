//! Fuzzes the DHCP request pre-pass: any bytes give a request or a drop reason, never a panic,
//! and what it reads back stays within what was sent.
#![no_main]

use bootpool::proto::dhcp::{MAX_PACKET, parse_request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = parse_request(data) {
        assert!(data.len() <= MAX_PACKET);
        // Option values come from the packet: together they cannot outgrow it.
        let total: usize = req.options.values().map(Vec::len).sum();
        assert!(total <= data.len());
        assert!(req.message_type().is_some());
        let _ = (
            req.arch(),
            req.uuid(),
            req.is_pxe(),
            req.is_ipxe(),
            req.params(),
        );
    }
});

//! Fuzzes the DHCPv6 request pre-pass: any bytes give a request or a drop reason, never a
//! panic, and what it reads back stays within what was sent.
#![no_main]

use bootpool::proto::dhcp6::{MAX_PACKET, parse_request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = parse_request(data) {
        assert!(data.len() <= MAX_PACKET);
        let total: usize =
            req.options.values().map(Vec::len).sum::<usize>() + req.client_id.len();
        assert!(total <= data.len());
        let _ = (
            req.arch(),
            req.requested(),
            req.is_pxe(),
            req.is_ipxe(),
            req.vendor_classes(),
            req.mac(std::net::Ipv6Addr::UNSPECIFIED),
        );
    }
});

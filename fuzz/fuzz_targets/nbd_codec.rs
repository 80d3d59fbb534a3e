//! Fuzzes the NBD codec (`bootpool::proto::nbd`): every decoder on arbitrary bytes, and the
//! request verdicts for read-only and writable exports. Decoders must return Ok or Err, never
//! panic, and whatever they accept must respect the caps the service relies on.
#![no_main]

use bootpool::proto::nbd::{self as p, ClientFlags, OptRequest, OptionHeader, Request, Verdict};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    match selector % 4 {
        0 => {
            // An option header followed by its data, as the handshake reads them.
            if rest.len() < p::OPTION_HEADER_LEN {
                return;
            }
            let (h, body) = rest.split_at(p::OPTION_HEADER_LEN);
            if let Ok(h) = OptionHeader::decode(h.try_into().unwrap()) {
                assert!(h.len <= p::MAX_OPTION_DATA);
                let _ = OptRequest::decode(h.option, body);
            }
        }
        1 => {
            // Option data for each option the server parses.
            for option in [p::OPT_GO, p::OPT_INFO, p::OPT_EXPORT_NAME, p::OPT_LIST, p::OPT_ABORT] {
                if let Ok(OptRequest::Info { name, .. } | OptRequest::ExportName(name)) =
                    OptRequest::decode(option, rest)
                {
                    assert!(name.len() <= p::MAX_STRING && !name.contains('\0'));
                }
            }
        }
        2 => {
            if let Ok(b) = <[u8; 4]>::try_from(rest) {
                let _ = ClientFlags::decode(b);
            }
        }
        _ => {
            // A request header, then an export size from the remaining bytes.
            if rest.len() < p::REQUEST_LEN {
                return;
            }
            let (r, tail) = rest.split_at(p::REQUEST_LEN);
            let Ok(req) = Request::decode(r.try_into().unwrap()) else {
                return;
            };
            assert_eq!(Request::decode(&req.encode()), Ok(req));
            let mut size = [0u8; 8];
            for (d, s) in size.iter_mut().zip(tail) {
                *d = *s;
            }
            let size = u64::from_be_bytes(size);
            for writable in [false, true] {
                match req.verdict(size, writable) {
                    Verdict::Read { offset, len }
                    | Verdict::Write { offset, len, .. }
                    | Verdict::Zeroes { offset, len, .. }
                    | Verdict::Trim { offset, len, .. } => {
                        assert!(len <= p::MAX_PAYLOAD || !matches!(req.kind, p::CMD_READ | p::CMD_WRITE));
                        assert!(offset.checked_add(len as u64).is_some_and(|e| e <= size));
                        assert!(writable || req.kind == p::CMD_READ);
                    }
                    Verdict::Error { drain, .. } => assert!(drain <= p::MAX_PAYLOAD),
                    Verdict::Ok | Verdict::Flush | Verdict::Disconnect => {}
                }
            }
        }
    }
});

//! Fuzzes the RPC path a client controls: TCP record marking, call headers with credentials,
//! NFSv3 and MOUNT arguments, and the portmapper. Nothing may panic, and what comes back must
//! stay inside the input and its caps.
#![no_main]

use bootpool::proto::{mount, nfs3, portmap, rpc};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // As a stream: records until one is incomplete or too long.
    let mut at = 0;
    while let Ok(Some((used, rec))) = rpc::next_record(&data[at..], 4096) {
        assert!(used > 0 && used <= data.len() - at && rec.len() <= used);
        at += used;
        one(&rec);
    }
    // As one record body.
    one(data);
});

fn one(rec: &[u8]) {
    if let Some(c) = rpc::call(rec) {
        if let Ok(nfs3::Nfs::Lookup(fh, name)) = nfs3::nfs_args(c.proc_, c.args) {
            assert!(fh.len() <= nfs3::MAX_FH && name.len() <= nfs3::MAX_NAME);
        }
        if let Ok(mount::Mount::Mnt(p)) = mount::mount_args(c.proc_, c.args) {
            assert!(p.len() <= mount::MAX_PATH);
        }
    }
    if let Some(a) = portmap::answer(rec, &portmap::table(2049, 111)) {
        assert_eq!(a.reply[..4], rec[..4]);
    }
}

//! Writing a connection's buffered replies, a READ's data after its header in one `writev`
//! (from a page-aligned buffer or straight from the file's mapping), and why a write failed.

use super::ended::Ended;
use crate::export::tree::MappedRead;
use crate::proto::rpc::Writer;
use std::io::Write as _;

/// Makes the record last written to `out` cover `len` bytes of data sent after it, and their
/// XDR padding, which it returns.
fn close_record(out: &mut Writer, len: usize) -> &'static [u8] {
    let pad = len.div_ceil(4) * 4 - len;
    out.extend_record((len + pad) as u32);
    &[0u8; 3][..pad]
}

/// Finishes the record last written to `out` with `data` (and its XDR padding) and sends all
/// of `out`, then the data, in one `writev`; false when the client stopped reading.
pub(super) fn send_with_data(s: &mut std::net::TcpStream, out: &mut Writer, data: &[u8]) -> Sent {
    let pad = close_record(out, data.len());
    let mut slices = [
        std::io::IoSlice::new(&out.buf),
        std::io::IoSlice::new(data),
        std::io::IoSlice::new(pad),
    ];
    let mut rest = &mut slices[..];
    let ok = loop {
        if rest.iter().all(|b| b.is_empty()) {
            break Ok(());
        }
        match s.write_vectored(rest) {
            Ok(0) => break Err(NOT_READING),
            Ok(n) => std::io::IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(unsent(&e)),
        }
    };
    out.buf.clear();
    ok
}

/// Like `send_with_data`, with the data written straight from a file's mapping. A file cut
/// short since `read_mapped` fails the write (EFAULT): the connection ends, and the client's
/// retry on a new one sees the new size.
pub(super) fn send_mapped(
    s: &mut std::net::TcpStream,
    out: &mut Writer,
    read: &MappedRead,
) -> Sent {
    let data = read.data();
    let pad = close_record(out, data.len());
    let total = out.buf.len() + data.len() + pad.len();
    let mut done = 0;
    let ok = loop {
        if done == total {
            break Ok(());
        }
        match data.writev(std::os::fd::AsFd::as_fd(s), &out.buf, pad, done) {
            Ok(0) => break Err(NOT_READING),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(unsent(&e)),
        }
    };
    out.buf.clear();
    ok
}

/// Writes the buffered replies.
pub(super) fn send(s: &mut std::net::TcpStream, out: &mut Writer) -> Sent {
    let sent = s.write_all(&out.buf).map_err(|e| unsent(&e));
    out.buf.clear();
    sent
}

/// A send that failed says why the connection ends.
pub(super) type Sent = Result<(), Ended>;
const NOT_READING: Ended = Ended::NotReading;

/// Why a write failed: the client acknowledged nothing for `limits.root_lost_after` (lost),
/// or it stopped taking replies (our `WRITE_TIMEOUT`), or went away.
fn unsent(e: &std::io::Error) -> Ended {
    if crate::service::bounds::is_lost(e) {
        Ended::Lost
    } else {
        NOT_READING
    }
}

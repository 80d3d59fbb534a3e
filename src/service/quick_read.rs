//! Reading a client's next call without going to sleep when it is about to arrive.
//!
//! A client walking its root sends its next call within microseconds of our reply. A thread
//! that slept in `read` must then be woken: an idle CPU leaves its sleep state (in a VM, a
//! trip through the hypervisor), which costs more than answering the call. So a connection
//! whose client has been answering quickly polls its socket for a short while first, and
//! sleeps only when the client is slower than that. Few threads poll at once, so a room of
//! clients cannot turn it into a busy server.

use std::io::Read as _;
use std::net::TcpStream;
use std::os::fd::AsRawFd as _;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a connection polls before it sleeps in `read`.
const SPIN: Duration = Duration::from_micros(100);

/// Connections polling at once: half the CPUs (at least one), so the clients' and the rest
/// of the server's work always has CPUs to run on.
fn max_polling() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get() / 2)
            .unwrap_or(1)
            .max(1)
    })
}
static POLLING: AtomicUsize = AtomicUsize::new(0);

/// One connection's reads. `quick` says its client's last call came within `SPIN` of our
/// last reply (or that we have not learnt otherwise yet).
#[derive(Debug)]
pub struct QuickRead {
    quick: bool,
}

impl Default for QuickRead {
    fn default() -> QuickRead {
        QuickRead { quick: true }
    }
}

impl QuickRead {
    /// Reads what the client sent next, like `Read::read` on the (blocking) socket.
    pub fn read(&mut self, s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
        let started = Instant::now();
        if self.quick
            && let Some(got) = poll_then_read(s, buf)
        {
            return got;
        }
        let got = s.read(buf);
        self.quick = started.elapsed() < SPIN;
        got
    }
}

/// Polls `s` for up to `SPIN` and reads it once ready; `None` when it stayed quiet (or too
/// many connections are polling already).
fn poll_then_read(s: &TcpStream, buf: &mut [u8]) -> Option<std::io::Result<usize>> {
    if POLLING.fetch_add(1, Ordering::Relaxed) >= max_polling() {
        POLLING.fetch_sub(1, Ordering::Relaxed);
        return None;
    }
    // poll() looks at the socket without taking its lock (recv would), so the client's packet
    // is not held up behind our looking.
    let mut fd = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let started = Instant::now();
    let mut ready = false;
    while started.elapsed() < SPIN {
        // SAFETY: one valid pollfd, zero timeout.
        if unsafe { libc::poll(&mut fd, 1, 0) } > 0 {
            ready = true;
            break;
        }
        std::hint::spin_loop();
    }
    POLLING.fetch_sub(1, Ordering::Relaxed);
    if !ready {
        return None;
    }
    // SAFETY: `buf` is valid for `buf.len()` bytes.
    let n = unsafe {
        libc::recv(
            fd.fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n >= 0 {
        return Some(Ok(n as usize));
    }
    match std::io::Error::last_os_error() {
        // Ready but nothing to read after all: wait the ordinary way.
        e if e.kind() == std::io::ErrorKind::WouldBlock => None,
        e => Some(Err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn reads_what_is_waiting_and_what_comes_later() {
        let (mut client, mut server) = pair();
        let mut r = QuickRead::default();
        let mut buf = [0u8; 16];
        client.write_all(b"now").unwrap();
        // Already there: found while polling.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(r.read(&mut server, &mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"now");
        // Arrives after the poll gave up: the blocking read gets it, and the connection
        // is marked slow.
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            client.write_all(b"later").unwrap();
            client
        });
        assert_eq!(r.read(&mut server, &mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"later");
        assert!(!r.quick);
        // A closed peer reads as 0, polled or not.
        drop(writer.join().unwrap());
        assert_eq!(r.read(&mut server, &mut buf).unwrap(), 0);
        r.quick = true;
        assert_eq!(r.read(&mut server, &mut buf).unwrap(), 0);
    }
}

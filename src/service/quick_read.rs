//! Reading a peer's next request without going to sleep when it is about to arrive.
//!
//! A client walking its root sends its next call within microseconds of our reply, and a
//! TFTP client its ACK within microseconds of our block. A thread
//! that slept in `read` must then be woken: an idle CPU leaves its sleep state (in a VM, a
//! trip through the hypervisor), which costs more than answering the call. So a connection
//! whose client has been answering quickly polls its socket for a short while first, and
//! sleeps only when the client is slower than that. Few threads poll at once, so a room of
//! clients cannot turn it into a busy server.

use std::io::Read as _;
use std::net::TcpStream;
use std::os::fd::{AsFd as _, BorrowedFd};
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

/// Whether a peer has been answering quickly, and the short poll that makes use of it.
#[derive(Debug)]
pub struct QuickWait {
    quick: bool,
}

/// Live `QuickWait`s whose peer is quick. When there are more of them than may poll, nobody
/// polls: twenty lock-step transfers at once keep every CPU busy without it (polling there
/// cost a fifth of the aggregate rate).
static QUICK: AtomicUsize = AtomicUsize::new(0);

impl Default for QuickWait {
    fn default() -> QuickWait {
        QUICK.fetch_add(1, Ordering::Relaxed);
        QuickWait { quick: true }
    }
}

impl Drop for QuickWait {
    fn drop(&mut self) {
        self.set_quick(false);
    }
}

impl QuickWait {
    /// Before a blocking read on `fd`: when the peer has been quick (and few others are),
    /// polls for up to `SPIN`. True when something is waiting to be read.
    pub fn poll(&mut self, fd: BorrowedFd<'_>) -> bool {
        // poll() looks at the socket without taking its lock (recv would), so the peer's
        // packet is not held up behind our looking.
        self.spin(|| matches!(crate::sys::sock::poll_readable(fd, 0), Ok(true)))
    }

    /// Like `poll`, with `ready` as the look (called until it says yes or `SPIN` is over).
    pub fn spin(&mut self, ready: impl FnMut() -> bool) -> bool {
        self.quick && QUICK.load(Ordering::Relaxed) <= max_polling() && spin_until(ready)
    }

    /// After a blocking read that took `waited`: was the peer quick this time?
    pub fn waited(&mut self, waited: Duration) {
        self.set_quick(waited < SPIN);
    }

    fn set_quick(&mut self, quick: bool) {
        if quick != self.quick {
            if quick {
                QUICK.fetch_add(1, Ordering::Relaxed);
            } else {
                QUICK.fetch_sub(1, Ordering::Relaxed);
            }
            self.quick = quick;
        }
    }
}

/// One TCP connection's reads.
#[derive(Debug, Default)]
pub struct QuickRead {
    wait: QuickWait,
}

impl QuickRead {
    /// Reads what the client sent next, like `Read::read` on the (blocking) socket.
    pub fn read(&mut self, s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.wait.poll(s.as_fd()) {
            match crate::sys::sock::recv_dontwait(s.as_fd(), buf) {
                Ok(n) => return Ok(n),
                // Ready but nothing to read after all: wait the ordinary way.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        let started = Instant::now();
        let got = s.read(buf);
        self.wait.waited(started.elapsed());
        got
    }
}

/// Calls `ready` for up to `SPIN`; true once it says so. False at once when too many
/// threads are polling already.
fn spin_until(mut ready: impl FnMut() -> bool) -> bool {
    if POLLING.fetch_add(1, Ordering::Relaxed) >= max_polling() {
        POLLING.fetch_sub(1, Ordering::Relaxed);
        return false;
    }
    let started = Instant::now();
    let mut found = false;
    while started.elapsed() < SPIN {
        if ready() {
            found = true;
            break;
        }
        std::hint::spin_loop();
    }
    POLLING.fetch_sub(1, Ordering::Relaxed);
    found
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
        assert!(!r.wait.quick);
        // A closed peer reads as 0, polled or not.
        drop(writer.join().unwrap());
        assert_eq!(r.read(&mut server, &mut buf).unwrap(), 0);
        r.wait.set_quick(true);
        assert_eq!(r.read(&mut server, &mut buf).unwrap(), 0);
    }
}

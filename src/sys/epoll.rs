//! A level-triggered epoll set and an eventfd that wakes its waiter: the few calls the TFTP
//! transfer loops need. Level-triggered (mio is edge-triggered only): a transfer reads one ACK
//! per wake-up and is told again when more wait, so a lock-step transfer makes no extra read
//! just to find its socket empty.

use std::io;
use std::os::fd::{AsFd, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd};
use std::time::Duration;

use super::check;

/// An epoll set, closed on drop.
pub struct Epoll {
    fd: OwnedFd,
}

/// Ready tokens from one `Epoll::wait`.
pub struct Events {
    buf: Vec<libc::epoll_event>,
    len: usize,
}

impl Events {
    pub fn with_capacity(n: usize) -> Events {
        Events {
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; n.max(1)],
            len: 0,
        }
    }

    pub fn tokens(&self) -> impl Iterator<Item = u64> + '_ {
        self.buf[..self.len].iter().map(|e| e.u64)
    }
}

impl Epoll {
    /// A new, empty set (close-on-exec).
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers; the returned descriptor is ours alone.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll { fd })
    }

    /// Watches `fd` for input, reported as `token`.
    pub fn add(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: both descriptors are open; `ev` lives across the call.
        check(unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd.as_raw_fd(),
                &mut ev,
            )
        })?;
        Ok(())
    }

    /// Stops watching `fd` (closing it would too, but only once every copy is closed).
    pub fn remove(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        // SAFETY: both descriptors are open; DEL ignores the event pointer.
        check(unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd.as_raw_fd(),
                std::ptr::null_mut(),
            )
        })?;
        Ok(())
    }

    /// Waits up to `timeout` (rounded up to whole milliseconds) for ready descriptors. An
    /// interrupted wait returns no events.
    pub fn wait(&self, events: &mut Events, timeout: Duration) -> io::Result<()> {
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `buf` has room for `buf.len()` events.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                events.buf.as_mut_ptr(),
                events.buf.len() as libc::c_int,
                ms,
            )
        };
        events.len = match check(n) {
            Ok(n) => n as usize,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(e),
        };
        Ok(())
    }
}

impl AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// An eventfd: `wake` from any thread makes it readable until `clear`.
pub struct Wake {
    fd: OwnedFd,
}

impl Wake {
    /// A new eventfd, not yet readable (non-blocking, close-on-exec).
    pub fn new() -> io::Result<Wake> {
        // SAFETY: no pointers; the returned descriptor is ours alone.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Wake { fd })
    }

    /// Makes the eventfd readable.
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64. It can only fail when the counter is
        // near overflow, and then the descriptor is readable anyway.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Makes it unreadable again.
    pub fn clear(&self) {
        let mut n: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64; EAGAIN (nothing to clear) is fine.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
    }
}

impl AsFd for Wake {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn reports_ready_sockets_by_token_until_read() {
        let ep = Epoll::new().unwrap();
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        ep.add(a.as_fd(), 7).unwrap();
        ep.add(b.as_fd(), 9).unwrap();
        let mut ev = Events::with_capacity(4);
        ep.wait(&mut ev, Duration::ZERO).unwrap();
        assert_eq!(ev.tokens().count(), 0);

        b.send_to(b"x", a.local_addr().unwrap()).unwrap();
        ep.wait(&mut ev, Duration::from_secs(5)).unwrap();
        assert_eq!(ev.tokens().collect::<Vec<_>>(), vec![7]);
        // Level-triggered: still ready while unread.
        ep.wait(&mut ev, Duration::ZERO).unwrap();
        assert_eq!(ev.tokens().collect::<Vec<_>>(), vec![7]);
        let mut buf = [0u8; 4];
        a.recv_from(&mut buf).unwrap();
        ep.wait(&mut ev, Duration::ZERO).unwrap();
        assert_eq!(ev.tokens().count(), 0);

        ep.remove(a.as_fd()).unwrap();
        b.send_to(b"y", a.local_addr().unwrap()).unwrap();
        ep.wait(&mut ev, Duration::from_millis(20)).unwrap();
        assert_eq!(ev.tokens().count(), 0);
    }

    #[test]
    fn wake_is_seen_once_until_cleared() {
        let ep = Epoll::new().unwrap();
        let w = Wake::new().unwrap();
        ep.add(w.as_fd(), 1).unwrap();
        let mut ev = Events::with_capacity(2);
        w.wake();
        w.wake();
        ep.wait(&mut ev, Duration::from_secs(5)).unwrap();
        assert_eq!(ev.tokens().collect::<Vec<_>>(), vec![1]);
        w.clear();
        ep.wait(&mut ev, Duration::ZERO).unwrap();
        assert_eq!(ev.tokens().count(), 0);
    }
}

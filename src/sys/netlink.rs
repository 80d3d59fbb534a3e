//! An rtnetlink socket (`AF_NETLINK`, `NETLINK_ROUTE`) in the calling thread's network
//! namespace: open, a receive timeout, send and receive whole messages. What the messages say
//! is `proto::netlink`'s (pure); what to ask is the caller's.

use std::io;
use std::os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd};
use std::time::Duration;

use super::{check, check_len};

/// An open rtnetlink socket, closed on drop.
pub struct Netlink {
    fd: OwnedFd,
}

impl Netlink {
    /// A new rtnetlink socket (raw, close-on-exec).
    pub fn open() -> io::Result<Netlink> {
        // SAFETY: socket() takes numbers only and returns a new descriptor or -1.
        let fd = check(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        })?;
        // SAFETY: a descriptor just returned by socket() and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Netlink { fd })
    }

    /// `SO_RCVTIMEO`: a `recv` waiting longer than `wait` (whole seconds and microseconds)
    /// fails with `WouldBlock`.
    pub fn set_recv_timeout(&self, wait: Duration) -> io::Result<()> {
        let tv = libc::timeval {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_usec: wait.subsec_micros() as libc::suseconds_t,
        };
        super::sock::set_option(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)
    }

    /// Sends one request (to the kernel); how many bytes went.
    pub fn send(&self, request: &[u8]) -> io::Result<usize> {
        // SAFETY: sends the bytes of `request`, which outlives the call.
        check_len(unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                request.as_ptr().cast(),
                request.len(),
                0,
            )
        })
    }

    /// Receives one datagram of answers into `buf`; its length.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
        check_len(unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) })
    }
}

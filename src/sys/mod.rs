//! The sys room: every call into the operating system that Rust cannot check (`unsafe`) lives
//! here, in small safe wrappers, each `unsafe` block with a `// SAFETY:` comment saying why it
//! is sound. Callers keep their policy: these functions only make the call and report what the
//! kernel said, as an `io::Result` where the call can fail.
//!
//! - `fs`: file locks, `*at` opens and stats, `mknod`, `statvfs`, `fallocate`, `preadv2`.
//! - `process`: rlimits, signals, thread ids, timer slack, network namespaces, `sysconf`.
//! - `mmap`: read-only shared file mappings, `mincore`, `writev` from a mapping.
//! - `epoll`: a level-triggered epoll set and an eventfd.
//! - `sock`: socket options (`TCP_INFO`, `SO_MAX_PACING_RATE`, `IP_PKTINFO`), `poll`, `recv`,
//!   the ARP cache ioctl, the host's interface addresses, packet sockets.
//! - `netlink`: an rtnetlink socket (the messages are `proto::netlink`'s).
//! - `page_buf`: page-aligned byte buffers.
//! - `slabs`: the memory `bootpool-agent` receives chunks into, anonymous mappings populated a
//!   buffer at a time (`MADV_POPULATE_WRITE`); the agent compiles it in by `#[path]`.
//! - `libnbd`: libnbd's C API, loaded at run time (the storm's NBD client).
//! - `time`: the local time zone's offset from UTC at a moment.
//! - `procnet`: who holds a port (`/proc/net`'s sockets, `/proc/PID/fd`); no `unsafe`, but the
//!   kernel's answer reported as it is, like the rest.

pub mod epoll;
pub mod fs;
pub mod libnbd;
pub mod mmap;
pub mod netlink;
pub mod page_buf;
pub mod process;
pub mod procnet;
pub mod slabs;
pub mod sock;
pub mod time;

use std::io;

/// A libc return value: negative is the thread's `errno`.
fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A byte count from `read`-like calls: negative is the thread's `errno`.
fn check_len(n: libc::ssize_t) -> io::Result<usize> {
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

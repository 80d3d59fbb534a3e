//! The process and its threads: the open-file limit, signals to other processes, signals held
//! for a thread to take, a child's death signal, thread ids and timer slack, network
//! namespaces, `sysconf` numbers, whether the process runs as root, and descriptors kept
//! across an `exec` of the process's own program and taken back after it.

use std::io;
use std::os::unix::process::CommandExt as _;
use std::process::Command;

use super::check;

/// `getrlimit(RLIMIT_NOFILE)`: the (soft, hard) limits on open files.
pub fn open_file_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: one valid rlimit for the kernel to fill.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// `setrlimit(RLIMIT_NOFILE)`.
pub fn set_open_file_limit(soft: u64, hard: u64) -> io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: one valid rlimit, read by the kernel.
    check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    Ok(())
}

/// Lets `fd` live on in the program this process `exec`s next (clears `FD_CLOEXEC`).
pub fn keep_across_exec(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: fcntl(F_SETFD) on a borrowed open descriptor; no memory is passed.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) })?;
    Ok(())
}

/// Takes descriptor `fd`, kept open across `exec` by the program this process was before
/// (`keep_across_exec`), which named it: an error if it is not open. It is marked close-on-exec
/// again.
pub fn inherited(fd: std::os::fd::RawFd) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd as _;
    // SAFETY: F_GETFD asks only whether `fd` is open; no memory is passed.
    check(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    // SAFETY: `fd` is open, and nothing in this process owns it: the previous program handed
    // it over by number and nothing here opened it (the caller takes each number once).
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: fcntl(F_SETFD) on the descriptor just taken; no memory is passed.
    check(unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) })?;
    Ok(owned)
}

/// `kill(pid, signal)`: a negative `pid` is that process group. The caller names a process
/// (or group) it started.
pub fn kill(pid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill(2) takes numbers only and touches no memory of ours.
    check(unsafe { libc::kill(pid, signal) })?;
    Ok(())
}

/// Signals the process takes when it is ready (`HeldSignals::wait`), not by their default
/// action.
#[derive(Clone, Copy)]
pub struct HeldSignals(libc::sigset_t);

/// Blocks `signals` in the calling thread and in every thread it starts afterwards (call it
/// before any other thread exists): they stay pending until a thread takes one with
/// `HeldSignals::wait`. A child inherits the mask across exec: start the ones that must still
/// die of these signals with `unblock_signals_in_child`.
pub fn hold_signals(signals: &[libc::c_int]) -> io::Result<HeldSignals> {
    // SAFETY: an all-zero sigset_t is a valid value to hand to sigemptyset, which sets it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t owned by this frame, for each call.
    unsafe {
        check(libc::sigemptyset(&mut set))?;
        for &s in signals {
            check(libc::sigaddset(&mut set, s))?;
        }
    }
    // SAFETY: `set` is initialised; the old mask is not asked for.
    let err = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if err != 0 {
        return Err(io::Error::from_raw_os_error(err));
    }
    Ok(HeldSignals(set))
}

impl HeldSignals {
    /// Waits until one of the held signals arrives, and returns it.
    pub fn wait(&self) -> libc::c_int {
        let mut got: libc::c_int = 0;
        loop {
            // SAFETY: the set is initialised and `got` is a valid place for the answer.
            if unsafe { libc::sigwait(&self.0, &mut got) } == 0 {
                return got;
            }
        }
    }
}

/// Makes the child `cmd` starts begin with no signal blocked, whatever its parent holds
/// (`hold_signals`): a daemon must stop on the SIGTERM it is sent.
pub fn unblock_signals_in_child(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed: sigemptyset and sigprocmask are, and the closure allocates nothing
    // and touches no memory of the parent (the set lives on the child's stack).
    unsafe {
        cmd.pre_exec(|| {
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Makes the child `cmd` starts get `signal` when the thread that started it dies
/// (`PR_SET_PDEATHSIG`, set between fork and exec).
pub fn set_parent_death_signal(cmd: &mut Command, signal: libc::c_int) {
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed: prctl is one, and the closure allocates nothing and touches no memory
    // of the parent.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, signal);
            Ok(())
        });
    }
}

/// The thread id of the calling thread.
pub fn gettid() -> libc::pid_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// `PR_SET_TIMERSLACK`: the calling thread's sleeps end within `ns` nanoseconds of their time.
pub fn set_timer_slack(ns: u64) {
    // SAFETY: prctl with an integer argument; it affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong) };
}

/// `unshare(CLONE_NEWNET)`: moves the calling thread into a new network namespace. Threads
/// started later inherit it; those already running stay where they are.
pub fn unshare_network() -> io::Result<()> {
    // SAFETY: unshare takes a flag and no memory; it changes only the calling thread.
    check(unsafe { libc::unshare(libc::CLONE_NEWNET) })?;
    Ok(())
}

/// `sysconf(_SC_CLK_TCK)`: clock ticks per second, the unit of /proc's CPU times.
pub fn clock_ticks() -> i64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }
}

/// `sysconf(_SC_PAGESIZE)`, or 4096 if the kernel does not say.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// Whether the process's effective user is root (`geteuid() == 0`).
pub fn is_root() -> bool {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

//! The NBD root of a simulated client: replays a trace's `What::Nbd` ops with libnbd (a client
//! this project did not write), closed-loop by `trace::format::Gates`. libnbd is loaded at run
//! time (`dlopen("libnbd.so.0")`), so the daemon binary does not depend on it; only its C API
//! is used, through the few functions in `Lib`.
//!
//! `attach` connects and does the handshake for its export, `read`s are issued with
//! `nbd_aio_pread` (as many in flight on the one connection as overlapped in the recording),
//! `disc` waits for what is in flight and shuts the connection down. Writes, flushes and trims
//! are not expected of a read-only root: they are counted and skipped. Blocking: run it on its
//! own thread.

use crate::trace::format::{Gates, Op, What};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::net::Ipv4Addr;
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NbdStats {
    /// Handshakes that succeeded.
    pub attaches: u64,
    /// Reads answered without an error, and the bytes they carried.
    pub reads: u64,
    pub bytes: u64,
    /// Reads that failed, or that the export is too small for (not sent).
    pub errors: u64,
    /// Ops not sent, by command: writes, flushes, trims, unknown commands, reads with no
    /// connection.
    pub skipped: BTreeMap<String, u64>,
    /// The export's size, as the server reported it at the last attach.
    pub size: u64,
    /// When the first request was sent and when the last answer arrived.
    pub first: Option<Instant>,
    pub last: Option<Instant>,
    /// Each read answered: sent, answered, bytes.
    pub waits: Vec<(Instant, Instant, u64)>,
}

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum NbdError {
    #[error("libnbd is not installed (apt-get install libnbd0): {0}")]
    NoLibnbd(String),
    #[error("nbd attach of `{export}` at {addr}:{port} failed: {why}")]
    Attach {
        addr: Ipv4Addr,
        port: u16,
        export: String,
        why: String,
    },
    #[error("nbd connection failed: {0}")]
    Connection(String),
    #[error("nbd trace reads before any attach")]
    NoAttach,
}

/// Replays the `What::Nbd` ops among `ops` (other kinds are ignored) against the NBD server
/// at `server:port`, waiting `think_scale` times each op's recorded think time. An `attach`
/// without an export name asks for the default export `""`. The replay's clock starts at the
/// call: the first NBD op waits its own `t` (scaled).
pub fn replay_nbd(
    server: Ipv4Addr,
    port: u16,
    ops: &[Op],
    think_scale: f64,
) -> Result<NbdStats, NbdError> {
    let lib = Lib::get()?;
    let mut ops: Vec<Op> = ops
        .iter()
        .filter(|o| matches!(o.what, What::Nbd { .. }))
        .cloned()
        .collect();
    ops.sort_by(|a, b| a.t.total_cmp(&b.t));
    if ops
        .iter()
        .take_while(|o| !matches!(&o.what, What::Nbd { cmd, .. } if cmd == "attach"))
        .any(|o| matches!(&o.what, What::Nbd { cmd, .. } if cmd == "read"))
    {
        return Err(NbdError::NoAttach);
    }
    let think_scale = if think_scale.is_finite() {
        think_scale.max(0.0)
    } else {
        0.0
    };
    let gates = Gates::new(&ops);
    let mut tracker = gates.tracker();
    let mut stats = NbdStats::default();
    // In flight: cookie -> (op, buffer, when sent). A buffer stays here, unmoved, until
    // libnbd has retired its command. Declared before `conn`, so that on an early return the
    // handle is closed before the buffers are freed.
    let mut flight: Flight = HashMap::new();
    let mut conn: Option<Handle> = None;
    let mut ready_upto = 0;
    let mut waiting: Vec<(Instant, usize)> = Vec::new();

    while !tracker.all_done() {
        let now = Instant::now();
        while ready_upto < ops.len() && tracker.ready(ready_upto) {
            let think = Duration::from_secs_f64(gates.think(ready_upto) * think_scale);
            waiting.push((now + think, ready_upto));
            ready_upto += 1;
        }
        waiting.sort_by_key(|w| w.0);
        let mut progressed = false;
        while let Some(&(due, i)) = waiting.first() {
            if due > now {
                break;
            }
            waiting.remove(0);
            let What::Nbd {
                cmd,
                offset,
                len,
                export,
            } = &ops[i].what
            else {
                unreachable!("only nbd ops are kept")
            };
            match cmd.as_str() {
                "attach" | "disc" => {
                    // Whatever the old connection has in flight is answered first.
                    if let Some(h) = conn.take() {
                        drain(&h, &mut flight, &mut stats, &mut tracker)?;
                        h.shutdown();
                    }
                    if cmd == "attach" {
                        stats.first.get_or_insert_with(Instant::now);
                        let export = export.as_deref().unwrap_or("");
                        let h = Handle::connect(lib, server, port, export)?;
                        stats.size = h.size()?;
                        stats.attaches += 1;
                        conn = Some(h);
                        stats.last = Some(Instant::now());
                    }
                    tracker.finish(i);
                }
                "read" => match conn.as_ref() {
                    Some(h) if offset.checked_add(*len).is_some_and(|e| e <= stats.size) => {
                        let mut buf = vec![0u8; *len as usize];
                        stats.first.get_or_insert_with(Instant::now);
                        match h.aio_pread(&mut buf, *offset) {
                            Ok(cookie) => {
                                flight.insert(cookie, (i, buf, Instant::now()));
                            }
                            Err(why) => {
                                tracing::debug!(offset, len, %why, "nbd replay read not issued");
                                stats.errors += 1;
                                tracker.finish(i);
                            }
                        }
                    }
                    Some(_) => {
                        tracing::debug!(
                            offset,
                            len,
                            size = stats.size,
                            "nbd replay read past the export's end"
                        );
                        stats.errors += 1;
                        tracker.finish(i);
                    }
                    None => {
                        *stats
                            .skipped
                            .entry("read without a connection".into())
                            .or_default() += 1;
                        tracker.finish(i);
                    }
                },
                other => {
                    *stats.skipped.entry(other.to_string()).or_default() += 1;
                    tracker.finish(i);
                }
            }
            progressed = true;
        }
        if progressed {
            // Finished ops may have made others ready.
            collect(conn.as_ref(), &mut flight, &mut stats, &mut tracker)?;
            continue;
        }
        let next_due = waiting.first().map(|w| w.0);
        match conn.as_ref() {
            Some(h) if !flight.is_empty() => {
                let ms = next_due.map_or(-1, |d| {
                    d.saturating_duration_since(Instant::now())
                        .as_millis()
                        .clamp(1, 60_000) as c_int
                });
                h.poll(ms)?;
                collect(Some(h), &mut flight, &mut stats, &mut tracker)?;
            }
            _ => match next_due {
                Some(d) => std::thread::sleep(d.saturating_duration_since(Instant::now())),
                None => unreachable!("nbd replay stalled with nothing in flight"),
            },
        }
    }
    if let Some(h) = conn.take() {
        drain(&h, &mut flight, &mut stats, &mut tracker)?;
        h.shutdown();
    }
    Ok(stats)
}

/// Reads in flight: cookie -> (op, buffer, when sent).
type Flight = HashMap<u64, (usize, Vec<u8>, Instant)>;

/// Retires every command libnbd has an answer for.
fn collect(
    h: Option<&Handle>,
    flight: &mut Flight,
    stats: &mut NbdStats,
    tracker: &mut crate::trace::format::Tracker<'_>,
) -> Result<(), NbdError> {
    let Some(h) = h else { return Ok(()) };
    while !flight.is_empty() {
        let Some(cookie) = h.peek_completed()? else {
            break;
        };
        let ok = h.command_completed(cookie);
        let Some((i, buf, sent)) = flight.remove(&cookie) else {
            return Err(NbdError::Connection(format!(
                "libnbd completed cookie {cookie}, which is not ours"
            )));
        };
        let now = Instant::now();
        stats.last = Some(now);
        match ok {
            Ok(()) => {
                stats.reads += 1;
                stats.bytes += buf.len() as u64;
                stats.waits.push((sent, now, buf.len() as u64));
            }
            Err(why) => {
                tracing::debug!(%why, "nbd replay read failed");
                stats.errors += 1;
            }
        }
        tracker.finish(i);
    }
    Ok(())
}

/// Waits for everything in flight on `h`.
fn drain(
    h: &Handle,
    flight: &mut Flight,
    stats: &mut NbdStats,
    tracker: &mut crate::trace::format::Tracker<'_>,
) -> Result<(), NbdError> {
    collect(Some(h), flight, stats, tracker)?;
    while !flight.is_empty() {
        h.poll(-1)?;
        collect(Some(h), flight, stats, tracker)?;
    }
    Ok(())
}

/// libnbd's opaque handle.
#[repr(C)]
struct NbdHandle {
    _private: [u8; 0],
}

/// `nbd_completion_callback` (libnbd.h), passed by value; all null: the command is retired
/// with `nbd_aio_command_completed`.
#[repr(C)]
struct Completion {
    callback: Option<unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int>,
    user_data: *mut c_void,
    free: Option<unsafe extern "C" fn(*mut c_void)>,
}

type CreateFn = unsafe extern "C" fn() -> *mut NbdHandle;
type CloseFn = unsafe extern "C" fn(*mut NbdHandle);
type GetErrorFn = unsafe extern "C" fn() -> *const c_char;
type SetExportNameFn = unsafe extern "C" fn(*mut NbdHandle, *const c_char) -> c_int;
type ConnectTcpFn = unsafe extern "C" fn(*mut NbdHandle, *const c_char, *const c_char) -> c_int;
type GetSizeFn = unsafe extern "C" fn(*mut NbdHandle) -> i64;
type AioPreadFn =
    unsafe extern "C" fn(*mut NbdHandle, *mut c_void, usize, u64, Completion, u32) -> i64;
type AioCommandCompletedFn = unsafe extern "C" fn(*mut NbdHandle, u64) -> c_int;
type AioPeekCommandCompletedFn = unsafe extern "C" fn(*mut NbdHandle) -> i64;
type AioInFlightFn = unsafe extern "C" fn(*mut NbdHandle) -> c_int;
type PollFn = unsafe extern "C" fn(*mut NbdHandle, c_int) -> c_int;
type ShutdownFn = unsafe extern "C" fn(*mut NbdHandle, u32) -> c_int;

/// The libnbd functions used, resolved once per process. The library stays loaded.
struct Lib {
    create: CreateFn,
    close: CloseFn,
    get_error: GetErrorFn,
    set_export_name: SetExportNameFn,
    connect_tcp: ConnectTcpFn,
    get_size: GetSizeFn,
    aio_pread: AioPreadFn,
    aio_command_completed: AioCommandCompletedFn,
    aio_peek_command_completed: AioPeekCommandCompletedFn,
    aio_in_flight: AioInFlightFn,
    poll: PollFn,
    shutdown: ShutdownFn,
}

static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();

impl Lib {
    fn get() -> Result<&'static Lib, NbdError> {
        LIB.get_or_init(Lib::load)
            .as_ref()
            .map_err(|e| NbdError::NoLibnbd(e.clone()))
    }

    fn load() -> Result<Lib, String> {
        let name = c"libnbd.so.0";
        // SAFETY: `name` is a NUL-terminated string; dlopen runs libnbd's constructors, which
        // only set up its own state. The handle is never closed, so resolved symbols stay valid.
        let dl = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if dl.is_null() {
            return Err(dl_error());
        }
        let sym = |s: &CStr| -> Result<*mut c_void, String> {
            // SAFETY: `dl` is a live handle from dlopen and `s` is NUL-terminated.
            let p = unsafe { libc::dlsym(dl, s.as_ptr()) };
            if p.is_null() {
                Err(format!("libnbd.so.0 lacks {}", s.to_string_lossy()))
            } else {
                Ok(p)
            }
        };
        // Each symbol is the libnbd function of that name, as the C prototype in libnbd.h
        // (1.x, a stable ABI) declares it.
        macro_rules! f {
            ($name:literal, $ty:ty) => {{
                let p = sym($name)?;
                // SAFETY: `p` is that function, and `$ty` is its prototype: the same argument
                // and return types, the C calling convention, the callback struct by value.
                unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
            }};
        }
        Ok(Lib {
            create: f!(c"nbd_create", CreateFn),
            close: f!(c"nbd_close", CloseFn),
            get_error: f!(c"nbd_get_error", GetErrorFn),
            set_export_name: f!(c"nbd_set_export_name", SetExportNameFn),
            connect_tcp: f!(c"nbd_connect_tcp", ConnectTcpFn),
            get_size: f!(c"nbd_get_size", GetSizeFn),
            aio_pread: f!(c"nbd_aio_pread", AioPreadFn),
            aio_command_completed: f!(c"nbd_aio_command_completed", AioCommandCompletedFn),
            aio_peek_command_completed: f!(
                c"nbd_aio_peek_command_completed",
                AioPeekCommandCompletedFn
            ),
            aio_in_flight: f!(c"nbd_aio_in_flight", AioInFlightFn),
            poll: f!(c"nbd_poll", PollFn),
            shutdown: f!(c"nbd_shutdown", ShutdownFn),
        })
    }

    /// libnbd's message for the last error on this thread.
    fn error(&self) -> String {
        // SAFETY: nbd_get_error takes nothing and returns a thread-local string or NULL.
        let p = unsafe { (self.get_error)() };
        if p.is_null() {
            return "unknown libnbd error".into();
        }
        // SAFETY: non-null, NUL-terminated, valid until the next libnbd call on this thread;
        // it is copied at once.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns a thread-local NUL-terminated string or NULL.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "dlopen libnbd.so.0 failed".into()
    } else {
        // SAFETY: non-null and NUL-terminated; copied before any other dl call.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// One libnbd handle, connected. Closed on drop. Not `Send`: used on one thread.
struct Handle {
    lib: &'static Lib,
    h: NonNull<NbdHandle>,
}

impl Handle {
    fn connect(
        lib: &'static Lib,
        addr: Ipv4Addr,
        port: u16,
        export: &str,
    ) -> Result<Handle, NbdError> {
        let fail = |why: String| NbdError::Attach {
            addr,
            port,
            export: export.to_string(),
            why,
        };
        // SAFETY: nbd_create takes nothing; it returns a new handle or NULL.
        let h = NonNull::new(unsafe { (lib.create)() }).ok_or_else(|| fail(lib.error()))?;
        let h = Handle { lib, h };
        let name = CString::new(export).map_err(|_| fail("export name has a NUL".into()))?;
        // SAFETY: a live handle and a NUL-terminated name, which libnbd copies.
        if unsafe { (lib.set_export_name)(h.h.as_ptr(), name.as_ptr()) } == -1 {
            return Err(fail(lib.error()));
        }
        let host = CString::new(addr.to_string()).expect("an address has no NUL");
        let service = CString::new(port.to_string()).expect("a number has no NUL");
        // SAFETY: a live handle and two NUL-terminated strings; nbd_connect_tcp blocks until
        // the handshake is done or failed.
        if unsafe { (lib.connect_tcp)(h.h.as_ptr(), host.as_ptr(), service.as_ptr()) } == -1 {
            return Err(fail(lib.error()));
        }
        Ok(h)
    }

    fn size(&self) -> Result<u64, NbdError> {
        // SAFETY: a live, connected handle.
        let n = unsafe { (self.lib.get_size)(self.h.as_ptr()) };
        u64::try_from(n).map_err(|_| NbdError::Connection(self.lib.error()))
    }

    /// Issues a read into `buf` and returns its cookie. `buf` must not be touched, moved or
    /// freed until the command is retired (`command_completed`); the caller keeps it in
    /// `flight` until then (a `Vec`'s heap buffer does not move when the `Vec` does).
    fn aio_pread(&self, buf: &mut [u8], offset: u64) -> Result<u64, String> {
        let none = Completion {
            callback: None,
            user_data: std::ptr::null_mut(),
            free: None,
        };
        // SAFETY: a live handle; `buf` is valid for `buf.len()` bytes of writes and outlives the
        // command (see above); a completion struct with no callback is the documented
        // NBD_NULL_COMPLETION; flags 0.
        let cookie = unsafe {
            (self.lib.aio_pread)(
                self.h.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                offset,
                none,
                0,
            )
        };
        u64::try_from(cookie).map_err(|_| self.lib.error())
    }

    /// A command libnbd has an answer for, if any.
    fn peek_completed(&self) -> Result<Option<u64>, NbdError> {
        // SAFETY: a live handle.
        let c = unsafe { (self.lib.aio_peek_command_completed)(self.h.as_ptr()) };
        match c {
            0 => Ok(None),
            c if c > 0 => Ok(Some(c as u64)),
            // -1: nothing in flight (the caller only asks while something is) or an error.
            _ => {
                let why = self.lib.error();
                // SAFETY: a live handle.
                if unsafe { (self.lib.aio_in_flight)(self.h.as_ptr()) } == 0 {
                    Ok(None)
                } else {
                    Err(NbdError::Connection(why))
                }
            }
        }
    }

    /// Retires a completed command: Ok if it succeeded.
    fn command_completed(&self, cookie: u64) -> Result<(), String> {
        // SAFETY: a live handle and a cookie libnbd reported completed; after this call
        // libnbd no longer touches the command's buffer.
        match unsafe { (self.lib.aio_command_completed)(self.h.as_ptr(), cookie) } {
            1 => Ok(()),
            _ => Err(self.lib.error()),
        }
    }

    /// Waits up to `ms` (-1: until something happens) and moves the connection on.
    fn poll(&self, ms: c_int) -> Result<(), NbdError> {
        // SAFETY: a live handle with commands in flight (so it has a socket to wait on).
        if unsafe { (self.lib.poll)(self.h.as_ptr(), ms) } == -1 {
            return Err(NbdError::Connection(self.lib.error()));
        }
        Ok(())
    }

    /// Sends NBD_CMD_DISC (after whatever is queued) and closes the handle.
    fn shutdown(self) {
        // SAFETY: a live handle; flags 0. The handle is closed by drop.
        if unsafe { (self.lib.shutdown)(self.h.as_ptr(), 0) } == -1 {
            tracing::debug!(error = %self.lib.error(), "nbd replay shutdown failed");
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from nbd_create and is closed once, here. nbd_close drops
        // any command still in flight without touching its buffer again; those buffers are
        // freed only after this (`replay_nbd` declares `flight` before the handle).
        unsafe { (self.lib.close)(self.h.as_ptr()) }
    }
}

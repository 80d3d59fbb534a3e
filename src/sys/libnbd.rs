//! libnbd's C API, loaded at run time (`dlopen("libnbd.so.0")`, so the daemon binary does not
//! depend on it): the few functions the storm's NBD replay uses
//! (`instruments/src/storm/nbd.rs`), behind a safe `Handle`. A read's buffer is owned by the
//! handle while libnbd may write into it, so no caller can free or move it too early. Errors
//! are libnbd's own messages.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::net::Ipv4Addr;
use std::ptr::NonNull;
use std::sync::OnceLock;

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
pub struct Lib {
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
    /// The library, loaded at the first call; why not, when it cannot be.
    pub fn get() -> Result<&'static Lib, String> {
        LIB.get_or_init(Lib::load).as_ref().map_err(Clone::clone)
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
    pub fn error(&self) -> String {
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
pub struct Handle {
    lib: &'static Lib,
    h: NonNull<NbdHandle>,
    /// The buffers of the reads in flight, by cookie: each stays here, unmoved (a `Vec`'s
    /// heap buffer does not move when the `Vec` does), until libnbd has retired its command,
    /// and is freed only after the handle is closed.
    buffers: HashMap<u64, Vec<u8>>,
}

impl Handle {
    /// A new handle, connected over TCP to `addr:port` with the handshake for `export` done.
    pub fn connect(
        lib: &'static Lib,
        addr: Ipv4Addr,
        port: u16,
        export: &str,
    ) -> Result<Handle, String> {
        // SAFETY: nbd_create takes nothing; it returns a new handle or NULL.
        let h = NonNull::new(unsafe { (lib.create)() }).ok_or_else(|| lib.error())?;
        let h = Handle {
            lib,
            h,
            buffers: HashMap::new(),
        };
        let name = CString::new(export).map_err(|_| "export name has a NUL".to_string())?;
        // SAFETY: a live handle and a NUL-terminated name, which libnbd copies.
        if unsafe { (lib.set_export_name)(h.h.as_ptr(), name.as_ptr()) } == -1 {
            return Err(lib.error());
        }
        let host = CString::new(addr.to_string()).expect("an address has no NUL");
        let service = CString::new(port.to_string()).expect("a number has no NUL");
        // SAFETY: a live handle and two NUL-terminated strings; nbd_connect_tcp blocks until
        // the handshake is done or failed.
        if unsafe { (lib.connect_tcp)(h.h.as_ptr(), host.as_ptr(), service.as_ptr()) } == -1 {
            return Err(lib.error());
        }
        Ok(h)
    }

    /// The export's size, as the server said in the handshake.
    pub fn size(&self) -> Result<u64, String> {
        // SAFETY: a live, connected handle.
        let n = unsafe { (self.lib.get_size)(self.h.as_ptr()) };
        u64::try_from(n).map_err(|_| self.lib.error())
    }

    /// Issues a read of `len` bytes at `offset` into a buffer of the handle's and returns its
    /// cookie; the buffer is let go of when the command is retired (`command_completed`).
    pub fn aio_pread(&mut self, len: usize, offset: u64) -> Result<u64, String> {
        let mut buf = vec![0u8; len];
        let none = Completion {
            callback: None,
            user_data: std::ptr::null_mut(),
            free: None,
        };
        // SAFETY: a live handle; `buf` is valid for `buf.len()` bytes of writes and outlives the
        // command: it is kept in `buffers` until the command is retired or the handle closed;
        // a completion struct with no callback is the documented NBD_NULL_COMPLETION; flags 0.
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
        let cookie = u64::try_from(cookie).map_err(|_| self.lib.error())?;
        self.buffers.insert(cookie, buf);
        Ok(cookie)
    }

    /// A command libnbd has an answer for, if any.
    pub fn peek_completed(&self) -> Result<Option<u64>, String> {
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
                    Err(why)
                }
            }
        }
    }

    /// Retires a completed command: the bytes it read if it succeeded.
    pub fn command_completed(&mut self, cookie: u64) -> Result<Vec<u8>, String> {
        // SAFETY: a live handle and a cookie libnbd reported completed; after this call
        // libnbd no longer touches the command's buffer.
        let r = unsafe { (self.lib.aio_command_completed)(self.h.as_ptr(), cookie) };
        // Retired either way (a failed read is retired with its error), so its buffer is
        // ours again.
        let buf = self.buffers.remove(&cookie).unwrap_or_default();
        match r {
            1 => Ok(buf),
            _ => Err(self.lib.error()),
        }
    }

    /// Waits up to `ms` (-1: until something happens) and moves the connection on.
    pub fn poll(&self, ms: c_int) -> Result<(), String> {
        // SAFETY: a live, connected handle (so it has a socket to wait on).
        if unsafe { (self.lib.poll)(self.h.as_ptr(), ms) } == -1 {
            return Err(self.lib.error());
        }
        Ok(())
    }

    /// Sends NBD_CMD_DISC (after whatever is queued) and closes the handle.
    pub fn shutdown(self) {
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
        // in `buffers`, freed only after this (fields drop after `drop` returns).
        unsafe { (self.lib.close)(self.h.as_ptr()) }
    }
}

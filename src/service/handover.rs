//! A restart that drops no attached NBD root (`bootpool restart`, SIGUSR2): the daemon stops
//! reading requests at a request's edge, answers what is in flight, and hands each attached
//! read-only NBD connection (its socket, the export and revision it attached, the bytes of
//! requests read but not yet taken) to the program it then `exec`s, which takes them up again
//! without a handshake. The client sees its next replies a moment late, and no disconnect.
//! The list travels in the environment (`ENV`), the sockets as descriptors kept across exec.

use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd as _, AsRawFd as _};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// The variable the next program finds the handed connections in.
pub const ENV: &str = "BOOTPOOL_HANDOVER";

/// One attached NBD connection passed from one program to the next.
#[derive(Debug)]
pub struct Handed {
    pub stream: std::net::TcpStream,
    /// The export as it was attached, its revision resolved (`NAME@ID`, `NAME~zstd`).
    pub export: String,
    /// The image's size the client was told.
    pub size: u64,
    /// Request bytes read from the socket and not yet taken, in order.
    pub pending: Vec<u8>,
}

/// A handed connection as the environment carries it.
#[derive(Serialize, Deserialize)]
struct Line {
    fd: i32,
    export: String,
    size: u64,
    /// `pending`, hex.
    pending: String,
}

/// The daemon's handover: armed before a restart stops the services, the connections they
/// hand meanwhile, and, in the program after the restart, those it takes up.
#[derive(Debug, Default)]
pub struct Handover {
    armed: AtomicBool,
    handed: Mutex<Vec<Handed>>,
}

impl Handover {
    /// From now on, NBD connections that end because the daemon stops are handed over.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    pub fn armed(&self) -> bool {
        self.armed.load(Ordering::SeqCst)
    }

    pub fn hand(&self, handed: Handed) {
        self.handed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(handed);
    }

    /// How many connections are handed.
    pub fn count(&self) -> usize {
        self.handed.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Takes the connections handed so far (the NBD service, at start, those the previous
    /// program handed).
    pub fn take(&self) -> Vec<Handed> {
        std::mem::take(&mut *self.handed.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The value of `ENV` for the next program, each handed socket kept open across exec.
    /// The connections stay in the list (their descriptors open) until the exec.
    pub fn to_env(&self) -> std::io::Result<String> {
        let handed = self.handed.lock().unwrap_or_else(|e| e.into_inner());
        let mut lines = Vec::new();
        for h in handed.iter() {
            crate::sys::process::keep_across_exec(h.stream.as_fd())?;
            lines.push(Line {
                fd: h.stream.as_raw_fd(),
                export: h.export.clone(),
                size: h.size,
                pending: h.pending.iter().map(|b| format!("{b:02x}")).collect(),
            });
        }
        serde_json::to_string(&lines).map_err(std::io::Error::other)
    }

    /// The connections the previous program handed over, from `ENV` (read once per process:
    /// `app::serve` asks before its daemon starts). A bad entry is logged and left out.
    pub fn inherited() -> Handover {
        let handover = Handover::default();
        let Some(text) = std::env::var_os(ENV) else {
            return handover;
        };
        let lines: Vec<Line> = match serde_json::from_str(&text.to_string_lossy()) {
            Ok(lines) => lines,
            Err(e) => {
                tracing::error!(error = %e, "{ENV} unreadable: no NBD connection taken over");
                return handover;
            }
        };
        for line in lines {
            let pending = (0..line.pending.len() / 2)
                .map(|i| u8::from_str_radix(&line.pending[2 * i..2 * i + 2], 16))
                .collect::<Result<Vec<u8>, _>>();
            match (crate::sys::process::inherited(line.fd), pending) {
                (Ok(fd), Ok(pending)) => handover.hand(Handed {
                    stream: std::net::TcpStream::from(fd),
                    export: line.export,
                    size: line.size,
                    pending,
                }),
                (Err(e), _) => {
                    tracing::error!(fd = line.fd, export = %line.export, error = %e,
                        "nbd connection not taken over: its descriptor is not open")
                }
                (_, Err(e)) => {
                    tracing::error!(fd = line.fd, export = %line.export, error = %e,
                        "nbd connection not taken over: its pending bytes are unreadable")
                }
            }
        }
        handover
    }
}

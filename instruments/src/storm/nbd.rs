//! The NBD root of a simulated client: replays a trace's `What::Nbd` ops with libnbd (a client
//! this project did not write), closed-loop by `trace::format::Gates`. libnbd is loaded at run
//! time (`dlopen("libnbd.so.0")`), so the daemon binary does not depend on it; only its C API
//! is used, through the few functions of `sys::libnbd`.
//!
//! `attach` connects and does the handshake for its export, `read`s are issued with
//! `nbd_aio_pread` (as many in flight on the one connection as overlapped in the recording),
//! `disc` waits for what is in flight and shuts the connection down. Writes, flushes and trims
//! are not expected of a read-only root: they are counted and skipped. Blocking: run it on its
//! own thread. A connection that breaks is made again to the same address and its reads sent
//! again, as the kernel's client with a dead-connection timeout does (`retry`).

use super::retry;
use bootpool::sys::libnbd::{Handle, Lib};
use bootpool::trace::format::{Gates, Op, Schedule, What};
use std::collections::{BTreeMap, HashMap};
use std::ffi::c_int;
use std::net::Ipv4Addr;
use std::time::Instant;

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NbdStats {
    /// Handshakes that succeeded.
    pub attaches: u64,
    /// Reads answered without an error, and the bytes they carried.
    pub reads: u64,
    pub bytes: u64,
    /// Reads that failed, or that the export is too small for (not sent), or answered with
    /// other bytes than the image's.
    pub errors: u64,
    /// Of `errors`, the reads answered with other bytes than the image's (`Target::image`).
    pub wrong: u64,
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
    /// When each attach and read was answered (the client's stalls are the gaps between).
    pub answers: Vec<Instant>,
    /// Connections made again after one broke (the kernel client's reconfigure).
    pub reconnects: u64,
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
    #[error(
        "the boot script names NBD export `{named}`, the trace was recorded against `{recorded}`: its reads are offsets in another image (give --trace a boot recorded against `{named}`, docs/storm.md)"
    )]
    OtherExport { named: String, recorded: String },
}

/// `replay_nbd_to` a server at `server:port`, the answers unchecked.
pub fn replay_nbd(
    server: Ipv4Addr,
    port: u16,
    ops: &[Op],
    think_scale: f64,
    named: Option<&str>,
) -> Result<NbdStats, NbdError> {
    let target = Target {
        server,
        port,
        named,
        through_agent: false,
        image: None,
    };
    replay_nbd_to(&target, ops, think_scale)
}

/// Where a replay reads, and what it checks the answers against.
pub struct Target<'a> {
    pub server: Ipv4Addr,
    pub port: u16,
    /// The export the boot script named.
    pub named: Option<&'a str>,
    /// The server is the client's own agent (`swarm`): it serves the root as `named`, the
    /// export the script gives the kernel, whatever the recording's server called it.
    pub through_agent: bool,
    /// The root image's bytes: each read's answer must be the image's at its offset.
    pub image: Option<&'a [u8]>,
}

/// Replays the `What::Nbd` ops among `ops` (other kinds are ignored) against the NBD server
/// of `target`, waiting `think_scale` times each op's recorded think time. An `attach`
/// without an export name asks for the default export `""`. `named`, the export the boot
/// script named, must be the one the trace attached (else `OtherExport`, before any
/// request), unless the reads go through the agent, which is attached by that name. The
/// replay's clock starts at the call: the first NBD op waits its own `t` (scaled).
pub fn replay_nbd_to(
    target: &Target<'_>,
    ops: &[Op],
    think_scale: f64,
) -> Result<NbdStats, NbdError> {
    let (server, port, named) = (target.server, target.port, target.named);
    let lib = Lib::get().map_err(NbdError::NoLibnbd)?;
    let mut ops: Vec<Op> = ops
        .iter()
        .filter(|o| matches!(o.what, What::Nbd { .. }))
        .cloned()
        .collect();
    ops.sort_by(|a, b| a.t.total_cmp(&b.t));
    if let Some(named) = named.filter(|_| !target.through_agent) {
        let recorded = ops.iter().find_map(|o| match &o.what {
            What::Nbd { cmd, export, .. } if cmd == "attach" => {
                Some(export.clone().unwrap_or_default())
            }
            _ => None,
        });
        if let Some(recorded) = recorded.filter(|r| r != named) {
            return Err(NbdError::OtherExport {
                named: named.to_string(),
                recorded,
            });
        }
    }
    if ops
        .iter()
        .take_while(|o| !matches!(&o.what, What::Nbd { cmd, .. } if cmd == "attach"))
        .any(|o| matches!(&o.what, What::Nbd { cmd, .. } if cmd == "read"))
    {
        return Err(NbdError::NoAttach);
    }
    let gates = Gates::new(&ops);
    let mut schedule = gates.schedule(think_scale);
    let mut stats = NbdStats::default();
    let mut conn: Option<Conn> = None;

    while !schedule.all_done() {
        let now = Instant::now();
        schedule.release(now);
        let mut progressed = false;
        while let Some(i) = schedule.due(now) {
            schedule.start();
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
                    if let Some(mut c) = conn.take() {
                        c.drain(&mut stats, &mut schedule)?;
                        c.shutdown();
                    }
                    if cmd == "attach" {
                        stats.first.get_or_insert_with(Instant::now);
                        let export = match named {
                            Some(n) if target.through_agent => n,
                            _ => export.as_deref().unwrap_or(""),
                        };
                        let h = Handle::connect(lib, server, port, export).map_err(|why| {
                            NbdError::Attach {
                                addr: server,
                                port,
                                export: export.to_string(),
                                why,
                            }
                        })?;
                        stats.size = h.size().map_err(NbdError::Connection)?;
                        stats.attaches += 1;
                        conn = Some(Conn::new(lib, server, port, export, h, target.image));
                        stats.last = Some(Instant::now());
                        stats.answers.push(Instant::now());
                    }
                    schedule.finish(i);
                }
                "read" => match conn.as_mut() {
                    Some(c) if offset.checked_add(*len).is_some_and(|e| e <= stats.size) => {
                        stats.first.get_or_insert_with(Instant::now);
                        c.issue(i, *offset, *len, Instant::now());
                    }
                    Some(_) => {
                        tracing::debug!(
                            offset,
                            len,
                            size = stats.size,
                            "nbd replay read past the export's end"
                        );
                        stats.errors += 1;
                        schedule.finish(i);
                    }
                    None => {
                        *stats
                            .skipped
                            .entry("read without a connection".into())
                            .or_default() += 1;
                        schedule.finish(i);
                    }
                },
                other => {
                    *stats.skipped.entry(other.to_string()).or_default() += 1;
                    schedule.finish(i);
                }
            }
            progressed = true;
        }
        if progressed {
            // Finished ops may have made others ready.
            if let Some(c) = conn.as_mut() {
                c.collect(&mut stats, &mut schedule)?;
            }
            continue;
        }
        let next_due = schedule.next_due();
        match conn.as_mut() {
            Some(c) if c.busy() => {
                let ms = next_due.map_or(1000, |d| {
                    d.saturating_duration_since(Instant::now())
                        .as_millis()
                        .clamp(1, 1000) as c_int
                });
                c.poll(ms, &mut stats, &mut schedule)?;
            }
            _ => match next_due {
                Some(d) => std::thread::sleep(d.saturating_duration_since(Instant::now())),
                None => unreachable!("nbd replay stalled with nothing in flight"),
            },
        }
    }
    if let Some(mut c) = conn.take() {
        c.drain(&mut stats, &mut schedule)?;
        c.shutdown();
    }
    Ok(stats)
}

/// A read asked of the server: its op, offset, length and when it was first sent.
#[derive(Debug, Clone, Copy)]
struct Read {
    op: usize,
    offset: u64,
    len: u64,
    sent: Instant,
}

/// How many times one read is sent, on live or new connections, before its error counts.
const READ_TRIES: u32 = 4;

/// The attached export, as the kernel's NBD client with a dead-connection timeout holds it:
/// reads whose connection broke (or that went `retry::NBD_TIMEOUT` unanswered) stay queued
/// while a new connection to the same address is made (`retry::NBD_RECONNECT_EVERY`), and
/// are sent again on it.
struct Conn<'a> {
    lib: &'static Lib,
    server: Ipv4Addr,
    port: u16,
    export: String,
    h: Option<Handle>,
    /// In flight on `h`, by cookie.
    flight: HashMap<u64, Read>,
    /// To send again once a connection is up.
    redo: Vec<Read>,
    tries: HashMap<usize, u32>,
    /// When `h` last answered (or was made).
    heard: Instant,
    /// The image every answer is checked against.
    image: Option<&'a [u8]>,
}

impl<'a> Conn<'a> {
    fn new(
        lib: &'static Lib,
        server: Ipv4Addr,
        port: u16,
        export: &str,
        h: Handle,
        image: Option<&'a [u8]>,
    ) -> Conn<'a> {
        Conn {
            lib,
            server,
            port,
            export: export.to_string(),
            h: Some(h),
            flight: HashMap::new(),
            redo: Vec::new(),
            tries: HashMap::new(),
            heard: Instant::now(),
            image,
        }
    }

    fn busy(&self) -> bool {
        !self.flight.is_empty() || !self.redo.is_empty()
    }

    fn issue(&mut self, op: usize, offset: u64, len: u64, sent: Instant) {
        let read = Read {
            op,
            offset,
            len,
            sent,
        };
        let Some(h) = self.h.as_mut() else {
            self.redo.push(read);
            return;
        };
        if self.flight.is_empty() {
            self.heard = Instant::now();
        }
        match h.aio_pread(len as usize, offset) {
            Ok(cookie) => {
                self.flight.insert(cookie, read);
            }
            Err(why) => {
                // The handle is dead: the read waits for the next connection.
                tracing::debug!(offset, len, %why, "nbd replay read not issued");
                self.redo.push(read);
                self.lost(&why);
            }
        }
    }

    /// The connection is taken as dead: what was in flight on it is sent again later.
    fn lost(&mut self, why: &str) {
        if let Some(h) = self.h.take() {
            tracing::debug!(%why, server = %self.server, "nbd replay connection lost");
            self.redo.extend(self.flight.drain().map(|(_, r)| r));
            drop(h);
        }
    }

    /// Retires every command libnbd has an answer for.
    fn collect(
        &mut self,
        stats: &mut NbdStats,
        schedule: &mut Schedule<'_>,
    ) -> Result<(), NbdError> {
        while let Some(h) = self.h.as_mut() {
            if self.flight.is_empty() {
                break;
            }
            let cookie = match h.peek_completed() {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(why) => {
                    self.lost(&why);
                    break;
                }
            };
            let ok = h.command_completed(cookie);
            let Some(read) = self.flight.remove(&cookie) else {
                return Err(NbdError::Connection(format!(
                    "libnbd completed cookie {cookie}, which is not ours"
                )));
            };
            let now = Instant::now();
            self.heard = now;
            let wrong = |bytes: &[u8]| {
                let at = read.offset as usize;
                self.image
                    .is_some_and(|img| img.get(at..at + read.len as usize) != Some(bytes))
            };
            match ok {
                Ok(bytes) if wrong(&bytes) => {
                    tracing::warn!(
                        offset = read.offset,
                        len = read.len,
                        "nbd replay read answered with other bytes than the image's"
                    );
                    stats.errors += 1;
                    stats.wrong += 1;
                    stats.last = Some(now);
                    schedule.finish(read.op);
                }
                Ok(_) => {
                    stats.last = Some(now);
                    stats.answers.push(now);
                    stats.reads += 1;
                    stats.bytes += read.len;
                    stats.waits.push((read.sent, now, read.len));
                    schedule.finish(read.op);
                }
                Err(why) => {
                    let tries = self.tries.entry(read.op).or_insert(1);
                    if *tries >= READ_TRIES {
                        tracing::debug!(%why, "nbd replay read failed");
                        stats.errors += 1;
                        stats.last = Some(now);
                        schedule.finish(read.op);
                    } else {
                        // A dead connection fails what it had in flight: sent again, on
                        // this connection if it still works, else on the next.
                        *tries += 1;
                        self.issue(read.op, read.offset, read.len, read.sent);
                    }
                }
            }
        }
        Ok(())
    }

    /// Waits up to `ms` for answers; takes the connection as dead on an error or after
    /// `retry::NBD_TIMEOUT` without one, and makes a new one when reads wait for it.
    fn poll(
        &mut self,
        ms: c_int,
        stats: &mut NbdStats,
        schedule: &mut Schedule<'_>,
    ) -> Result<(), NbdError> {
        if let Some(h) = self.h.as_ref()
            && !self.flight.is_empty()
        {
            if let Err(why) = h.poll(ms) {
                self.lost(&why);
            } else if self.heard.elapsed() >= retry::NBD_TIMEOUT {
                self.lost("no answer within the request timeout");
            }
        }
        self.collect(stats, schedule)?;
        if self.h.is_none() && !self.redo.is_empty() {
            self.reconnect(stats)?;
        }
        Ok(())
    }

    /// A new connection to the same address, tried every `retry::NBD_RECONNECT_EVERY` until
    /// `retry::GIVE_UP`, and the waiting reads sent on it.
    fn reconnect(&mut self, stats: &mut NbdStats) -> Result<(), NbdError> {
        let start = Instant::now();
        let h = loop {
            match Handle::connect(self.lib, self.server, self.port, &self.export) {
                Ok(h) => break h,
                Err(why) if start.elapsed() >= retry::GIVE_UP => {
                    return Err(NbdError::Attach {
                        addr: self.server,
                        port: self.port,
                        export: self.export.clone(),
                        why: format!("reconnecting for {} s: {why}", retry::GIVE_UP.as_secs()),
                    });
                }
                Err(why) => {
                    tracing::debug!(%why, "nbd replay reconnect failed, tries again");
                    std::thread::sleep(retry::NBD_RECONNECT_EVERY);
                }
            }
        };
        stats.reconnects += 1;
        self.h = Some(h);
        self.heard = Instant::now();
        for r in std::mem::take(&mut self.redo) {
            self.issue(r.op, r.offset, r.len, r.sent);
        }
        Ok(())
    }

    /// Waits for everything asked (reconnecting as needed).
    fn drain(&mut self, stats: &mut NbdStats, schedule: &mut Schedule<'_>) -> Result<(), NbdError> {
        self.collect(stats, schedule)?;
        while self.busy() {
            self.poll(1000, stats, schedule)?;
        }
        Ok(())
    }

    /// Sends NBD_CMD_DISC and closes the connection.
    fn shutdown(self) {
        if let Some(h) = self.h {
            h.shutdown();
        }
    }
}

//! The NBD root of a simulated client: replays a trace's `What::Nbd` ops with libnbd (a client
//! this project did not write), closed-loop by `trace::format::Gates`. libnbd is loaded at run
//! time (`dlopen("libnbd.so.0")`), so the daemon binary does not depend on it; only its C API
//! is used, through the few functions of `sys::libnbd`.
//!
//! `attach` connects and does the handshake for its export, `read`s are issued with
//! `nbd_aio_pread` (as many in flight on the one connection as overlapped in the recording),
//! `disc` waits for what is in flight and shuts the connection down. Writes, flushes and trims
//! are not expected of a read-only root: they are counted and skipped. Blocking: run it on its
//! own thread.

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
    #[error(
        "the boot script names NBD export `{named}`, the trace was recorded against `{recorded}`: its reads are offsets in another image (give --trace a boot recorded against `{named}`, docs/storm.md)"
    )]
    OtherExport { named: String, recorded: String },
}

/// Replays the `What::Nbd` ops among `ops` (other kinds are ignored) against the NBD server
/// at `server:port`, waiting `think_scale` times each op's recorded think time. An `attach`
/// without an export name asks for the default export `""`. `named`, the export the boot
/// script named, must be the one the trace attached (else `OtherExport`, before any
/// request). The replay's clock starts at the call: the first NBD op waits its own `t`
/// (scaled).
pub fn replay_nbd(
    server: Ipv4Addr,
    port: u16,
    ops: &[Op],
    think_scale: f64,
    named: Option<&str>,
) -> Result<NbdStats, NbdError> {
    let lib = Lib::get().map_err(NbdError::NoLibnbd)?;
    let mut ops: Vec<Op> = ops
        .iter()
        .filter(|o| matches!(o.what, What::Nbd { .. }))
        .cloned()
        .collect();
    ops.sort_by(|a, b| a.t.total_cmp(&b.t));
    if let Some(named) = named {
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
    // In flight: cookie -> (op, bytes asked, when sent). The buffers are the handle's.
    let mut flight: Flight = HashMap::new();
    let mut conn: Option<Handle> = None;

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
                    if let Some(mut h) = conn.take() {
                        drain(&mut h, &mut flight, &mut stats, &mut schedule)?;
                        h.shutdown();
                    }
                    if cmd == "attach" {
                        stats.first.get_or_insert_with(Instant::now);
                        let export = export.as_deref().unwrap_or("");
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
                        conn = Some(h);
                        stats.last = Some(Instant::now());
                    }
                    schedule.finish(i);
                }
                "read" => match conn.as_mut() {
                    Some(h) if offset.checked_add(*len).is_some_and(|e| e <= stats.size) => {
                        stats.first.get_or_insert_with(Instant::now);
                        match h.aio_pread(*len as usize, *offset) {
                            Ok(cookie) => {
                                flight.insert(cookie, (i, *len, Instant::now()));
                            }
                            Err(why) => {
                                tracing::debug!(offset, len, %why, "nbd replay read not issued");
                                stats.errors += 1;
                                schedule.finish(i);
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
            collect(conn.as_mut(), &mut flight, &mut stats, &mut schedule)?;
            continue;
        }
        let next_due = schedule.next_due();
        match conn.as_mut() {
            Some(h) if !flight.is_empty() => {
                let ms = next_due.map_or(-1, |d| {
                    d.saturating_duration_since(Instant::now())
                        .as_millis()
                        .clamp(1, 60_000) as c_int
                });
                h.poll(ms).map_err(NbdError::Connection)?;
                collect(Some(h), &mut flight, &mut stats, &mut schedule)?;
            }
            _ => match next_due {
                Some(d) => std::thread::sleep(d.saturating_duration_since(Instant::now())),
                None => unreachable!("nbd replay stalled with nothing in flight"),
            },
        }
    }
    if let Some(mut h) = conn.take() {
        drain(&mut h, &mut flight, &mut stats, &mut schedule)?;
        h.shutdown();
    }
    Ok(stats)
}

/// Reads in flight: cookie -> (op, bytes asked, when sent).
type Flight = HashMap<u64, (usize, u64, Instant)>;

/// Retires every command libnbd has an answer for.
fn collect(
    h: Option<&mut Handle>,
    flight: &mut Flight,
    stats: &mut NbdStats,
    schedule: &mut Schedule<'_>,
) -> Result<(), NbdError> {
    let Some(h) = h else { return Ok(()) };
    while !flight.is_empty() {
        let Some(cookie) = h.peek_completed().map_err(NbdError::Connection)? else {
            break;
        };
        let ok = h.command_completed(cookie);
        let Some((i, len, sent)) = flight.remove(&cookie) else {
            return Err(NbdError::Connection(format!(
                "libnbd completed cookie {cookie}, which is not ours"
            )));
        };
        let now = Instant::now();
        stats.last = Some(now);
        match ok {
            Ok(()) => {
                stats.reads += 1;
                stats.bytes += len;
                stats.waits.push((sent, now, len));
            }
            Err(why) => {
                tracing::debug!(%why, "nbd replay read failed");
                stats.errors += 1;
            }
        }
        schedule.finish(i);
    }
    Ok(())
}

/// Waits for everything in flight on `h`.
fn drain(
    h: &mut Handle,
    flight: &mut Flight,
    stats: &mut NbdStats,
    schedule: &mut Schedule<'_>,
) -> Result<(), NbdError> {
    collect(Some(&mut *h), flight, stats, schedule)?;
    while !flight.is_empty() {
        h.poll(-1).map_err(NbdError::Connection)?;
        collect(Some(&mut *h), flight, stats, schedule)?;
    }
    Ok(())
}

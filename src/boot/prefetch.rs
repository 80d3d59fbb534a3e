//! The order in which a room's agents fetch a root ahead of their kernels (docs/swarm.md,
//! "Prefetch in a recorded boot's order"): the chunks a recorded boot of the same root image
//! read over NBD, in the order it first read them. The tracker hands it to every agent of the
//! swarm it makes (`boot::tracker::Swarm::new`); without such a trace, ascending order (the
//! whole root).
//!
//! Pure: traces in, chunk indices out. `recorded_order` is handed the traces the daemon kept of
//! the image's NBD boots, newest first (`record::trace::kept_nbd`, which reads
//! `state_dir/traces` lazily, one trace as this asks for it), and takes the newest whose NBD
//! root was the export the manifest describes (its offsets are offsets in that very file),
//! a boot that reached its booted call before one that did not (a cut trace reads less than a
//! boot does).

use crate::trace::format::{Trace, What};
use std::collections::HashSet;

/// Traces looked at most (the newest first) when looking for one.
pub const LOOKED_AT: usize = 16;

/// The chunks (of `chunk` bytes; `chunks` in the image) that `trace`'s NBD reads on
/// connections attached to `export` touched, each once, in the order they were first read;
/// `None` when the trace never attached `export` or read nothing there. Reads on a
/// connection to another export (another revision's image, a wire copy) are not counted:
/// their offsets are of another file.
pub fn order(trace: &Trace, export: &str, chunk: u64, chunks: u64) -> Option<Vec<u64>> {
    if chunk == 0 {
        return None;
    }
    let mut on_export = false;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for op in &trace.ops {
        let What::Nbd {
            cmd,
            offset,
            len,
            export: attached,
        } = &op.what
        else {
            continue;
        };
        match cmd.as_str() {
            "attach" => on_export = attached.as_deref().unwrap_or("") == export,
            "read" if on_export && *len > 0 => {
                let last = offset.saturating_add(len - 1) / chunk;
                for i in offset / chunk..=last.min(chunks.saturating_sub(1)) {
                    if seen.insert(i) {
                        out.push(i);
                    }
                }
            }
            _ => {}
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The prefetch order from `traces` (a recorded image's NBD boots, newest first) for the
/// root image served as `export`: the first (newest) of them that attached `export` and
/// reached its booted call, else the first that attached it; `None` when none did (the
/// tracker then hands out ascending order). Looks at `LOOKED_AT` traces at most, and takes
/// no more of `traces` than it needs.
pub fn recorded_order(
    traces: impl IntoIterator<Item = Trace>,
    export: &str,
    chunk: u64,
    chunks: u64,
) -> Option<Vec<u64>> {
    let mut unfinished = None;
    for t in traces.into_iter().take(LOOKED_AT) {
        let Some(o) = order(&t, export, chunk, chunks) else {
            continue;
        };
        if t.ops.iter().any(|op| op.what == What::Booted) {
            return Some(o);
        }
        unfinished.get_or_insert(o);
    }
    unfinished
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::format::{Header, Op};

    fn nbd(t: f64, cmd: &str, offset: u64, len: u64, export: Option<&str>) -> Op {
        Op {
            t,
            d: 0.001,
            what: What::Nbd {
                cmd: cmd.into(),
                offset,
                len,
                export: export.map(str::to_string),
            },
        }
    }

    fn trace(recorded: f64, mut ops: Vec<Op>, booted: bool) -> Trace {
        if booted {
            ops.push(Op {
                t: 99.0,
                d: 0.0,
                what: What::Booted,
            });
        }
        Trace {
            header: Header {
                bootpool_trace: 1,
                mac: "52:54:00:00:00:01".into(),
                pool: "p".into(),
                image: "demo".into(),
                root: "nbd".into(),
                recorded,
                note: String::new(),
            },
            ops,
        }
    }

    const K: u64 = 256 * 1024;

    #[test]
    fn the_order_is_each_chunk_at_its_first_read_and_a_read_across_chunks_touches_each() {
        let t = trace(
            1.0,
            vec![
                nbd(0.0, "attach", 0, 0, Some("demo")),
                nbd(0.1, "read", 9 * K, 4096, None),
                nbd(0.2, "read", 0, 4096, None),
                // 128 KiB from the middle of chunk 2 into chunk 3.
                nbd(0.3, "read", 2 * K + K / 2 + 4096, 128 * 1024, None),
                nbd(0.4, "read", 9 * K + 8192, 4096, None),
                // Past the image's end: not a chunk of it.
                nbd(0.5, "read", 40 * K, 4096, None),
            ],
            true,
        );
        assert_eq!(order(&t, "demo", K, 12), Some(vec![9, 0, 2, 3]));
    }

    #[test]
    fn reads_on_another_export_are_of_another_file_and_do_not_count() {
        let t = trace(
            1.0,
            vec![
                nbd(0.0, "attach", 0, 0, Some("demo~zstd")),
                nbd(0.1, "read", 5 * K, 4096, None),
                nbd(0.2, "attach", 0, 0, Some("demo@0123456789ab")),
                nbd(0.3, "read", 7 * K, 4096, None),
            ],
            true,
        );
        assert_eq!(order(&t, "demo@0123456789ab", K, 12), Some(vec![7]));
        assert_eq!(order(&t, "demo", K, 12), None, "never attached");
        assert_eq!(order(&t, "demo~zstd", 0, 12), None, "no chunk size");
    }

    #[test]
    fn the_newest_finished_boot_of_the_export_is_the_order() {
        let read = |i: u64| nbd(0.5, "read", i * K, 4096, None);
        let attach = |e: &str| nbd(0.0, "attach", 0, 0, Some(e));
        let none: Vec<Trace> = Vec::new();
        assert_eq!(recorded_order(none, "demo", K, 16), None);
        // Newest first: another export's, a cut one, then two finished ones.
        let traces = vec![
            trace(5.0, vec![attach("other"), read(5)], true),
            trace(4.0, vec![attach("demo"), read(4)], false),
            trace(3.0, vec![attach("demo"), read(3)], true),
            trace(1.0, vec![attach("demo"), read(1)], true),
        ];
        assert_eq!(recorded_order(traces.clone(), "demo", K, 16), Some(vec![3]));
        // Only cut boots of it: the newest of them.
        assert_eq!(
            recorded_order(traces[..2].to_vec(), "demo", K, 16),
            Some(vec![4])
        );
        // No more traces are taken than needed.
        let mut taken = 0;
        let counted = traces.into_iter().inspect(|_| taken += 1);
        assert_eq!(recorded_order(counted, "demo", K, 16), Some(vec![3]));
        assert_eq!(taken, 3);
    }
}

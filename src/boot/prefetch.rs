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

/// Chunks in one window of a spread order (`spread`): 8 MiB of 256 KiB chunks, two thirds
/// of a second at 100 Mbit/s; no chunk is fetched further than that from its place in the
/// order.
pub const SPREAD_WINDOW: usize = 32;
/// How far apart in a window the next agent starts: the chunks an agent fetches at once
/// (`bootpool-agent`'s `PREFETCH_AT_ONCE`), so that agents that start together fetch
/// different chunks, `SPREAD_WINDOW / SPREAD_STRIDE` groups of them.
pub const SPREAD_STRIDE: usize = 4;

/// `order` as the swarm's `k`-th agent (counted from 0) is to walk it: cut into windows of
/// `SPREAD_WINDOW` chunks, each window rotated to start `k x SPREAD_STRIDE` chunks in (modulo
/// its length). Every agent still walks the windows in the order's order, so what a boot
/// reads first is held first; but agents that start together ask for different chunks of a
/// window at once, the server's one copy goes out as different chunks to different agents,
/// and they then fetch the rest from each other (super-seeding, BEP 16) instead of all from
/// the one agent that fetched each chunk first. Agent 0 walks `order` unchanged.
pub fn spread(order: &[u64], k: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(order.len());
    for window in order.chunks(SPREAD_WINDOW) {
        let at = k.wrapping_mul(SPREAD_STRIDE) % window.len();
        out.extend_from_slice(&window[at..]);
        out.extend_from_slice(&window[..at]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::format::{Header, Op};

    #[test]
    fn a_spread_order_rotates_each_window_by_the_agents_place_and_keeps_every_chunk() {
        let order: Vec<u64> = (100..100 + SPREAD_WINDOW as u64 + 6).collect();
        assert_eq!(spread(&order, 0), order);
        let one = spread(&order, 1);
        // The first window from its fifth chunk, round to its start; the short last window
        // (6 chunks) from 4 mod 6.
        assert_eq!(&one[..3], &[104, 105, 106]);
        assert_eq!(one[SPREAD_WINDOW - SPREAD_STRIDE], 100);
        assert_eq!(
            &one[SPREAD_WINDOW..],
            &[136, 137, 132, 133, 134, 135],
            "{one:?}"
        );
        // Agents that start together start on different chunks, as many as the window has
        // groups; the next one starts where the first did.
        let groups = SPREAD_WINDOW / SPREAD_STRIDE;
        let starts: HashSet<u64> = (0..groups).map(|k| spread(&order, k)[0]).collect();
        assert_eq!(starts.len(), groups);
        assert_eq!(spread(&order, groups)[0], order[0]);
        // Nothing lost, nothing twice, no chunk further than a window from its place.
        for k in [0, 1, 7, 8, 1000, usize::MAX] {
            let s = spread(&order, k);
            let mut sorted = s.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, order);
            for (at, c) in s.iter().enumerate() {
                let was = order.iter().position(|o| o == c).unwrap();
                assert!(at.abs_diff(was) < SPREAD_WINDOW);
            }
        }
        assert!(spread(&[], 3).is_empty());
    }

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

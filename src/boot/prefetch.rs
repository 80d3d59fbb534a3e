//! The order in which a room's agents fetch a root ahead of their kernels (docs/swarm.md,
//! "Prefetch in a recorded boot's order"): the chunks a recorded boot of the same root image
//! read over NBD, in the order it first read them. The tracker hands it to every agent of the
//! swarm it makes (`boot::tracker::Swarm::new`); without such a trace, ascending order (the
//! whole root).
//!
//! `order` is pure: a trace in, chunk indices out. `recorded_order` looks through the traces
//! the daemon kept (`record::trace::kept`, `state_dir/traces`, for pools with `trace: true`)
//! for the newest one of the image whose NBD root was the export the manifest describes: its
//! offsets are offsets in that very file. A boot that reached its booted call is preferred to
//! one that did not (a cut trace reads less than a boot does).

use crate::record::trace;
use crate::trace::format::{Trace, What};
use std::collections::HashSet;
use std::path::Path;

/// Traces read whole at most when looking for one (their headers are read for all).
const LOOKED_AT: usize = 16;

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

/// The prefetch order from the traces kept in `dir` (`state_dir/traces`) of boots of
/// `image` whose NBD root was `export`: the newest such boot that reached its booted call,
/// else the newest such boot; `None` when there is none (the tracker then hands out
/// ascending order). Reads the traces' headers, and at most `LOOKED_AT` traces whole.
pub fn recorded_order(
    dir: &Path,
    image: &str,
    export: &str,
    chunk: u64,
    chunks: u64,
) -> Option<Vec<u64>> {
    let mut unfinished = None;
    for (path, _) in trace::kept(dir, image, "nbd").into_iter().take(LOOKED_AT) {
        let Some(t) = trace::load(&path) else {
            continue;
        };
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

    fn write(dir: &Path, name: &str, t: &Trace) {
        std::fs::write(dir.join(name), t.to_text()).unwrap();
    }

    #[test]
    fn the_newest_finished_boot_of_the_image_and_export_is_the_order() {
        let dir = tempfile::tempdir().unwrap();
        let read = |i: u64| nbd(0.5, "read", i * K, 4096, None);
        let attach = |e: &str| nbd(0.0, "attach", 0, 0, Some(e));
        assert_eq!(recorded_order(dir.path(), "demo", "demo", K, 16), None);
        write(dir.path(), "a-1.trace", &trace(1.0, vec![attach("demo"), read(1)], true));
        write(dir.path(), "a-3.trace", &trace(3.0, vec![attach("demo"), read(3)], true));
        // Newer, but cut before its booted call.
        write(dir.path(), "a-4.trace", &trace(4.0, vec![attach("demo"), read(4)], false));
        // Newer, but of another export, another image, or another root.
        write(dir.path(), "a-5.trace", &trace(5.0, vec![attach("other"), read(5)], true));
        let mut other = trace(6.0, vec![attach("demo"), read(6)], true);
        other.header.image = "other".into();
        write(dir.path(), "b-6.trace", &other);
        let mut nfs = trace(7.0, vec![attach("demo"), read(7)], true);
        nfs.header.root = "nfs".into();
        write(dir.path(), "c-7.trace", &nfs);
        std::fs::write(dir.path().join("d-8.trace"), "{\"cut\n").unwrap();
        assert_eq!(
            recorded_order(dir.path(), "demo", "demo", K, 16),
            Some(vec![3])
        );
        // Only unfinished boots: the newest of them.
        std::fs::remove_file(dir.path().join("a-1.trace")).unwrap();
        std::fs::remove_file(dir.path().join("a-3.trace")).unwrap();
        assert_eq!(
            recorded_order(dir.path(), "demo", "demo", K, 16),
            Some(vec![4])
        );
    }
}

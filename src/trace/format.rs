//! The boot trace format (docs/trace.md): one JSON object a line, a header line first, then one
//! line per request the client made, in the order the server received them. Pure: reading and
//! writing text, and the closed-loop gates a replay waits on. No files, sockets or clock.

use serde::{Deserialize, Serialize};

/// The format's version, in the header's `bootpool_trace` field.
pub const VERSION: u32 = 1;

/// The first line of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always `VERSION`.
    pub bootpool_trace: u32,
    /// The client the trace was recorded from.
    pub mac: String,
    pub pool: String,
    pub image: String,
    /// `nfs` or `nbd`.
    pub root: String,
    /// Unix seconds of the first request.
    pub recorded: f64,
    /// Free text: how the trace was made (e.g. `bootpool lab --accel kvm`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// One request. `t`: seconds from the trace's first request to when the server received this
/// one; `d`: seconds until the server had sent its whole answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Op {
    pub t: f64,
    pub d: f64,
    #[serde(flatten)]
    pub what: What,
}

impl Op {
    /// When the server had answered, in seconds from the trace's start.
    pub fn end(&self) -> f64 {
        self.t + self.d
    }
}

/// What was asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum What {
    /// A DHCP request (`msg`: discover, request, inform) and the server's answer to it.
    /// `pxe`: option 60 `PXEClient`; `ipxe`: iPXE's user class; `arch`: option 93.
    Dhcp {
        msg: String,
        pxe: bool,
        ipxe: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arch: Option<u16>,
    },
    /// A whole file over TFTP or HTTP: `name` as the client asked for it (an HTTP path, a TFTP
    /// file name), `bytes` of payload sent.
    File {
        proto: String,
        name: String,
        bytes: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blksize: Option<u16>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        windowsize: Option<u16>,
    },
    /// One NFS or MOUNT call. `path`: the file or folder the call's handle names (for MNT, the
    /// export), from the image's root; `name`: LOOKUP's name; `offset`/`count`: READ's, or
    /// READDIR's cookie and count; `bytes`: READ data answered; `status`: the answer's
    /// nfsstat3 when it was not NFS3_OK (a LOOKUP of a name that is not there is part of a
    /// normal boot).
    Nfs {
        proc: String,
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(default, skip_serializing_if = "is_zero")]
        offset: u64,
        #[serde(default, skip_serializing_if = "is_zero")]
        count: u64,
        #[serde(default, skip_serializing_if = "is_zero")]
        bytes: u64,
        #[serde(default, skip_serializing_if = "is_zero32")]
        status: u32,
    },
    /// One NBD request (`cmd`: attach for the handshake of `export`, read, write, flush, trim,
    /// write_zeroes, block_status, disc).
    Nbd {
        cmd: String,
        #[serde(default, skip_serializing_if = "is_zero")]
        offset: u64,
        #[serde(default, skip_serializing_if = "is_zero")]
        len: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        export: Option<String>,
    },
    /// The client reported itself up (`POST /api/v1/booted`): the boot's end.
    Booted,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero32(n: &u32) -> bool {
    *n == 0
}

/// A whole trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub header: Header,
    pub ops: Vec<Op>,
}

/// A trace that cannot be read: the line (1-based) and why.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {why}")]
pub struct ParseError {
    pub line: usize,
    pub why: String,
}

impl Trace {
    pub fn parse(text: &str) -> Result<Trace, ParseError> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (_, first) = lines.next().ok_or(ParseError {
            line: 1,
            why: "empty trace".into(),
        })?;
        let header: Header = serde_json::from_str(first).map_err(|e| ParseError {
            line: 1,
            why: format!("not a trace header: {e}"),
        })?;
        if header.bootpool_trace != VERSION {
            return Err(ParseError {
                line: 1,
                why: format!(
                    "trace format {} (this bootpool reads {VERSION})",
                    header.bootpool_trace
                ),
            });
        }
        let mut ops = Vec::new();
        for (i, l) in lines {
            let op: Op = serde_json::from_str(l).map_err(|e| ParseError {
                line: i + 1,
                why: e.to_string(),
            })?;
            if !(op.t.is_finite() && op.d.is_finite() && op.t >= 0.0 && op.d >= 0.0) {
                return Err(ParseError {
                    line: i + 1,
                    why: "t and d must be seconds >= 0".into(),
                });
            }
            ops.push(op);
        }
        ops.sort_by(|a, b| a.t.total_cmp(&b.t));
        Ok(Trace { header, ops })
    }

    pub fn to_text(&self) -> String {
        let mut s = serde_json::to_string(&self.header).expect("header serialises");
        s.push('\n');
        for op in &self.ops {
            s.push_str(&op.to_line());
        }
        s
    }

    /// Payload bytes per protocol (`dhcp` counts none): what a faithful replay moves.
    pub fn bytes(&self) -> Bytes {
        let mut b = Bytes::default();
        for op in &self.ops {
            match &op.what {
                What::File { proto, bytes, .. } if proto == "tftp" => b.tftp += bytes,
                What::File { bytes, .. } => b.http += bytes,
                What::Nfs { bytes, .. } => b.nfs += bytes,
                What::Nbd { cmd, len, .. } if cmd == "read" => b.nbd += len,
                _ => {}
            }
        }
        b
    }
}

impl Op {
    /// The op as one line of the format, with microsecond times.
    pub fn to_line(&self) -> String {
        let mut o = self.clone();
        o.t = (o.t * 1e6).round() / 1e6;
        o.d = (o.d * 1e6).round() / 1e6;
        let mut s = serde_json::to_string(&o).expect("op serialises");
        s.push('\n');
        s
    }
}

/// Payload bytes per protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bytes {
    pub tftp: u64,
    pub http: u64,
    pub nfs: u64,
    pub nbd: u64,
}

impl Bytes {
    pub fn total(&self) -> u64 {
        self.tftp + self.http + self.nfs + self.nbd
    }
}

/// The closed loop of a replay: op `j` may be sent once every op the server had answered
/// before it received `j` in the recording has been answered in the replay, and then after
/// that op's think time (the gap from the latest of those answers to `j`). Ops that overlapped
/// in the recording (a client's read-ahead) stay concurrent.
#[derive(Debug, Clone)]
pub struct Gates {
    /// Op indices in the order their answers came in the recording.
    by_end: Vec<usize>,
    /// For each op: how many of `by_end`'s first entries must be done before it starts.
    need: Vec<usize>,
    /// For each op: seconds between the latest answer it waits for and its own start.
    think: Vec<f64>,
}

impl Gates {
    pub fn new(ops: &[Op]) -> Gates {
        // Answers in order, ties by index: an op answered in no time at the moment another
        // arrived came before it only if it arrived first (else an op with `d` = 0 would
        // wait for itself, and two such ops at one time for each other).
        let mut by_end: Vec<usize> = (0..ops.len()).collect();
        by_end.sort_by(|&a, &b| ops[a].end().total_cmp(&ops[b].end()).then(a.cmp(&b)));
        let mut need = Vec::with_capacity(ops.len());
        let mut think = Vec::with_capacity(ops.len());
        for (j, op) in ops.iter().enumerate() {
            // Answers sent no later than this op arrived: a prefix of `by_end`.
            let n = by_end.partition_point(|&i| {
                ops[i].end().total_cmp(&op.t).then(i.cmp(&j)) == std::cmp::Ordering::Less
            });
            need.push(n);
            let latest = if n == 0 {
                0.0
            } else {
                ops[by_end[n - 1]].end()
            };
            think.push((op.t - latest).max(0.0));
        }
        Gates {
            by_end,
            need,
            think,
        }
    }

    pub fn need(&self, op: usize) -> usize {
        self.need[op]
    }

    pub fn think(&self, op: usize) -> f64 {
        self.think[op]
    }

    /// The most ops a replay can have in flight at once, whatever its timing: for each op,
    /// those that arrived no later (ties by index) and that it does not wait for. `ops` must
    /// be the ops the gates were made from.
    pub fn max_in_flight(&self, ops: &[Op]) -> usize {
        let mut by_start: Vec<usize> = (0..ops.len()).collect();
        by_start.sort_by(|&a, &b| ops[a].t.total_cmp(&ops[b].t).then(a.cmp(&b)));
        by_start
            .iter()
            .enumerate()
            .map(|(rank, &j)| rank + 1 - self.need[j])
            .max()
            .unwrap_or(0)
    }

    /// Tracks which ops are done and how long a prefix of `by_end` that makes.
    pub fn tracker(&self) -> Tracker<'_> {
        Tracker {
            gates: self,
            done: vec![false; self.by_end.len()],
            prefix: 0,
        }
    }
}

/// The replay's progress through `Gates`.
#[derive(Debug)]
pub struct Tracker<'a> {
    gates: &'a Gates,
    done: Vec<bool>,
    prefix: usize,
}

impl Tracker<'_> {
    pub fn finish(&mut self, op: usize) {
        self.done[op] = true;
        while self.prefix < self.done.len() && self.done[self.gates.by_end[self.prefix]] {
            self.prefix += 1;
        }
    }

    /// Whether op `op` may start (its think time aside).
    pub fn ready(&self, op: usize) -> bool {
        self.prefix >= self.gates.need[op]
    }

    pub fn all_done(&self) -> bool {
        self.prefix == self.done.len()
    }
}

/// When a replay's ops may be sent: once `Tracker` says an op is ready, it falls due its think
/// time (times `think_scale`) later. The NFS and NBD replays share it.
#[derive(Debug)]
pub struct Schedule<'a> {
    tracker: Tracker<'a>,
    think_scale: f64,
    /// Ops `[released..]` are not ready yet. Readiness is a prefix: ops are in `t` order, and
    /// none needs fewer answers than one before it.
    released: usize,
    /// Ready ops, soonest due first (ties in op order).
    due: Vec<(std::time::Instant, usize)>,
}

impl Gates {
    /// A schedule of these gates' ops with think times scaled by `think_scale` (0 for one
    /// that is negative or not finite).
    pub fn schedule(&self, think_scale: f64) -> Schedule<'_> {
        Schedule {
            tracker: self.tracker(),
            think_scale: if think_scale.is_finite() {
                think_scale.max(0.0)
            } else {
                0.0
            },
            released: 0,
            due: Vec::new(),
        }
    }
}

impl Schedule<'_> {
    /// Sets every op that has become ready due at `now` plus its think time.
    pub fn release(&mut self, now: std::time::Instant) {
        let gates = self.tracker.gates;
        while self.released < gates.need.len() && self.tracker.ready(self.released) {
            let think = gates.think(self.released) * self.think_scale;
            self.due.push((
                now + std::time::Duration::from_secs_f64(think),
                self.released,
            ));
            self.released += 1;
        }
        self.due.sort_by_key(|d| d.0);
    }

    /// The op that falls due first, if it is due by `now`; it stays first until `start`.
    pub fn due(&self, now: std::time::Instant) -> Option<usize> {
        self.due.first().filter(|d| d.0 <= now).map(|d| d.1)
    }

    /// Takes the op `due` named off the queue: it is being sent.
    pub fn start(&mut self) {
        if !self.due.is_empty() {
            self.due.remove(0);
        }
    }

    /// When the first op waiting for its think time falls due.
    pub fn next_due(&self) -> Option<std::time::Instant> {
        self.due.first().map(|d| d.0)
    }

    /// How many ready ops wait to be sent.
    pub fn waiting(&self) -> usize {
        self.due.len()
    }

    /// Op `op` was answered (or will never be).
    pub fn finish(&mut self, op: usize) {
        self.tracker.finish(op);
    }

    pub fn all_done(&self) -> bool {
        self.tracker.all_done()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(t: f64, d: f64) -> Op {
        Op {
            t,
            d,
            what: What::Booted,
        }
    }

    #[test]
    fn gates_wait_for_answers_sent_before_and_keep_overlaps_concurrent() {
        // 0 and 1 overlap (read-ahead); 2 came after both answers; 3 after 2's.
        let ops = [op(0.0, 1.0), op(0.5, 1.0), op(2.0, 0.5), op(3.0, 0.1)];
        let g = Gates::new(&ops);
        assert_eq!((g.need(0), g.need(1), g.need(2), g.need(3)), (0, 0, 2, 3));
        assert_eq!(g.think(2), 0.5);
        assert!((g.think(3) - 0.5).abs() < 1e-9);
        let mut t = g.tracker();
        assert!(t.ready(0) && t.ready(1) && !t.ready(2));
        t.finish(1);
        assert!(!t.ready(2), "0 is not answered yet");
        t.finish(0);
        assert!(t.ready(2) && !t.ready(3));
        t.finish(2);
        t.finish(3);
        assert!(t.all_done());
    }

    #[test]
    fn ops_answered_in_no_time_wait_only_for_those_before_them() {
        // 0 and 1 arrive together and are answered at once; 2 overlaps 3 and 4.
        let ops = [
            op(1.0, 0.0),
            op(1.0, 0.0),
            op(2.0, 1.0),
            op(2.5, 1.0),
            op(2.6, 0.1),
        ];
        let g = Gates::new(&ops);
        assert_eq!(
            (0..5).map(|i| g.need(i)).collect::<Vec<_>>(),
            [0, 1, 2, 2, 2]
        );
        let mut t = g.tracker();
        assert!(t.ready(0) && !t.ready(1));
        t.finish(0);
        assert!(t.ready(1));
        assert_eq!(g.max_in_flight(&ops), 3);
        assert_eq!(Gates::new(&[]).max_in_flight(&[]), 0);
        for i in 1..5 {
            t.finish(i);
        }
        assert!(t.all_done());
    }

    #[test]
    fn a_schedule_sends_each_op_its_scaled_think_after_it_became_ready() {
        use std::time::{Duration, Instant};
        // 1 waits 0.5 s after 0's answer; 2 overlapped 1 in the recording.
        let ops = [op(0.0, 1.0), op(1.5, 1.0), op(1.6, 0.1)];
        let g = Gates::new(&ops);
        let mut s = g.schedule(2.0);
        let t0 = Instant::now();
        s.release(t0);
        assert_eq!((s.due(t0), s.waiting()), (Some(0), 1));
        s.start();
        assert_eq!((s.due(t0), s.next_due()), (None, None));
        let answered = t0 + Duration::from_secs(1);
        s.finish(0);
        s.release(answered);
        // Thinks x2: 1 is due 1 s after the answer, 2 (0.6 s after it in the recording) 1.2 s.
        assert_eq!(s.waiting(), 2);
        assert_eq!(s.next_due(), Some(answered + Duration::from_secs(1)));
        assert_eq!(s.due(answered + Duration::from_millis(999)), None);
        assert_eq!(s.due(answered + Duration::from_secs(1)), Some(1));
        s.start();
        assert_eq!(s.due(answered + Duration::from_secs(2)), Some(2));
        s.start();
        s.finish(1);
        s.finish(2);
        assert!(s.all_done());
        // A scale that is not a number thinks for nothing.
        let mut s = g.schedule(f64::NAN);
        s.release(t0);
        s.start();
        s.finish(0);
        s.release(t0);
        assert_eq!(s.due(t0), Some(1));
    }

    #[test]
    fn a_trace_round_trips_and_bad_lines_name_their_number() {
        let header = Header {
            bootpool_trace: VERSION,
            mac: "52:54:00:77:00:01".into(),
            pool: "lab".into(),
            image: "demo".into(),
            root: "nbd".into(),
            recorded: 1.5e9,
            note: String::new(),
        };
        let t = Trace {
            header,
            ops: vec![
                Op {
                    t: 0.0,
                    d: 0.001,
                    what: What::Dhcp {
                        msg: "discover".into(),
                        pxe: true,
                        ipxe: false,
                        arch: Some(0),
                    },
                },
                Op {
                    t: 1.25,
                    d: 0.5,
                    what: What::Nbd {
                        cmd: "read".into(),
                        offset: 4096,
                        len: 131072,
                        export: None,
                    },
                },
            ],
        };
        let text = t.to_text();
        assert_eq!(Trace::parse(&text).unwrap(), t);
        assert_eq!(t.bytes().nbd, 131072);
        let bad = format!("{text}{{\"t\":1}}\n");
        let e = Trace::parse(&bad).unwrap_err();
        assert_eq!(e.line, 4);
        assert!(Trace::parse("").is_err());
    }
}

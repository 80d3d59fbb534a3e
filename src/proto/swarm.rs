//! The tracker's wire (docs/swarm.md, "Peers and the tracker"): what a client's agent tells the
//! server in `POST /boot/IMAGE/blocks/DIGEST/where` and what it is answered, as text. A codec:
//! bytes in, typed values out and back, total, no I/O. The client agent (`agent/`) compiles this
//! very file too (`#[path]`), so both ends read one format from one source: it uses `core` and
//! `std`'s collections only.
//!
//! ```text
//! bootpool-swarm 1          the agent's report
//! port 10810                where it serves its peers (its address is the connection's)
//! have 0-17,20              chunks it holds, checked, since its last report
//! want 18,19                chunks it misses now
//! bad 10.77.9.12            a peer that sent it a chunk its manifest refused
//! gone 10.77.9.13           a peer that did not answer it
//! order                     asks for the prefetch order
//!
//! bootpool-swarm 1          the tracker's answer
//! peers 10.77.9.11:10810 10.77.9.12:10810    the room's agents it may serve
//! from 18 10.77.9.11:10810                   where to fetch each chunk wanted, in order;
//! from 19                                    none named: from the server
//! order 0-63                                 the chunks to fetch ahead, in order
//! ```
//!
//! Chunk lists are ranges (`A` or `A-B`, inclusive, comma-separated, each after the last),
//! every index below the manifest's count of chunks.

use core::fmt::Write as _;
use core::net::{IpAddr, SocketAddr};

/// The port an agent serves its peers on (the kernel's `bootpool.peers=PORT` names it): the
/// agent's NBD port, 10809, and one.
pub const PEER_PORT: u16 = 10810;

/// The first line, with the format's version.
const HEADER: &str = "bootpool-swarm 1";
/// At most this many ranges in one list, peers in one line, or lines in one text: a decoder
/// never allocates on an agent's say beyond them.
pub const MAX_ITEMS: usize = 4096;
/// The largest text either side takes.
pub const MAX_TEXT: usize = 256 * 1024;

/// Chunk indices as inclusive ranges: ascending and disjoint, but for a prefetch order's runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ranges(pub Vec<(u64, u64)>);

impl Ranges {
    /// The ranges of `indices` (any order, repeats allowed).
    pub fn of(indices: &[u64]) -> Ranges {
        let mut v = indices.to_vec();
        v.sort_unstable();
        v.dedup();
        let mut out: Vec<(u64, u64)> = Vec::new();
        for i in v {
            match out.last_mut() {
                Some((_, b)) if *b + 1 == i => *b = i,
                _ => out.push((i, i)),
            }
        }
        Ranges(out)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every index, in order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().flat_map(|&(a, b)| a..=b)
    }

    /// How many indices.
    pub fn count(&self) -> u64 {
        self.0.iter().map(|(a, b)| b - a + 1).sum()
    }

    fn write(&self, out: &mut String) {
        for (k, (a, b)) in self.0.iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            let _ = if a == b {
                write!(out, "{a}")
            } else {
                write!(out, "{a}-{b}")
            };
        }
    }

    /// Reads `text`: every index below `chunks`, each range after the one before.
    fn parse(text: &str, chunks: u64) -> Result<Ranges, String> {
        let r = Ranges::parse_runs(text, chunks)?;
        for w in r.0.windows(2) {
            if w[1].0 <= w[0].1 {
                return Err(format!("`{}` is not after the range before it", w[1].0));
            }
        }
        Ok(r)
    }

    /// Reads `text` as runs in any order (a prefetch order): every index below `chunks`.
    fn parse_runs(text: &str, chunks: u64) -> Result<Ranges, String> {
        let mut out = Vec::new();
        for part in text.split(',').filter(|p| !p.is_empty()) {
            if out.len() >= MAX_ITEMS {
                return Err(format!("more than {MAX_ITEMS} ranges"));
            }
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => (number(part)?, number(part)?),
            };
            if a > b || b >= chunks {
                return Err(format!("`{part}` is no range of the {chunks} chunks"));
            }
            out.push((a, b));
        }
        Ok(Ranges(out))
    }
}

/// `order` as runs of consecutive indices, in its order (not sorted: a recorded boot's order).
fn runs(order: &[u64]) -> Ranges {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &i in order {
        match out.last_mut() {
            Some((_, b)) if b.checked_add(1) == Some(i) => *b = i,
            _ => out.push((i, i)),
        }
    }
    Ranges(out)
}

/// A decimal number as the writer writes it: digits only, no leading zero.
fn number(s: &str) -> Result<u64, String> {
    let plain =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    match s.parse::<u64>() {
        Ok(n) if plain => Ok(n),
        _ => Err(format!("`{s}` is not a number")),
    }
}

/// An agent's report and question.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The port it serves peers on (0: it serves none).
    pub port: u16,
    /// Chunks it holds, checked (since its last report; holding is never withdrawn).
    pub have: Ranges,
    /// Chunks it misses and asks sources for.
    pub want: Ranges,
    /// Peers that sent it a bad chunk.
    pub bad: Vec<IpAddr>,
    /// Peers that did not answer it in time.
    pub gone: Vec<IpAddr>,
    /// It asks for the prefetch order.
    pub order: bool,
}

/// The tracker's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// The room's agents (address and peer port) the asker may serve.
    pub peers: Vec<SocketAddr>,
    /// For each chunk wanted, in the report's order, the peers to fetch it from, in order;
    /// none: the server.
    pub from: Vec<(u64, Vec<SocketAddr>)>,
    /// The chunks to fetch ahead, when asked for.
    pub order: Option<Vec<u64>>,
}

impl Report {
    pub fn encode(&self) -> String {
        let mut out = format!("{HEADER}\nport {}\n", self.port);
        for (key, r) in [("have", &self.have), ("want", &self.want)] {
            if !r.is_empty() {
                out.push_str(key);
                out.push(' ');
                r.write(&mut out);
                out.push('\n');
            }
        }
        for (key, list) in [("bad", &self.bad), ("gone", &self.gone)] {
            for ip in list.iter() {
                let _ = writeln!(out, "{key} {ip}");
            }
        }
        if self.order {
            out.push_str("order\n");
        }
        out
    }

    /// Reads a report about an image of `chunks` chunks; the error names the line.
    pub fn decode(text: &[u8], chunks: u64) -> Result<Report, String> {
        let mut r = Report::default();
        let mut port = None;
        for (n, line) in lines(text)? {
            let at = |e: String| format!("line {n}: {e}");
            let (key, value) = line.split_once(' ').unwrap_or((line, ""));
            match key {
                "port" if port.is_none() => {
                    let p = number(value).map_err(at)?;
                    port = Some(u16::try_from(p).map_err(|_| at(format!("`{p}` is not a port")))?);
                }
                "have" if r.have.is_empty() => r.have = Ranges::parse(value, chunks).map_err(at)?,
                "want" if r.want.is_empty() => r.want = Ranges::parse(value, chunks).map_err(at)?,
                "bad" | "gone" => {
                    let ip = value
                        .parse::<IpAddr>()
                        .map_err(|_| at(format!("`{value}` is not an address")))?;
                    if key == "bad" {
                        &mut r.bad
                    } else {
                        &mut r.gone
                    }
                    .push(ip);
                }
                "order" if value.is_empty() => r.order = true,
                _ => {
                    return Err(at(format!(
                        "`{line}` is not a report's line (or is one twice)"
                    )));
                }
            }
        }
        r.port = port.ok_or("no `port` line")?;
        Ok(r)
    }
}

impl Answer {
    pub fn encode(&self) -> String {
        let mut out = format!("{HEADER}\npeers");
        for p in &self.peers {
            let _ = write!(out, " {p}");
        }
        out.push('\n');
        for (i, from) in &self.from {
            let _ = write!(out, "from {i}");
            for p in from {
                let _ = write!(out, " {p}");
            }
            out.push('\n');
        }
        if let Some(order) = &self.order {
            out.push_str("order ");
            runs(order).write(&mut out);
            out.push('\n');
        }
        out
    }

    /// Reads an answer about an image of `chunks` chunks; the error names the line.
    pub fn decode(text: &[u8], chunks: u64) -> Result<Answer, String> {
        let mut a = Answer::default();
        let addrs = |words: core::str::SplitWhitespace<'_>| -> Result<Vec<SocketAddr>, String> {
            let mut v = Vec::new();
            for w in words {
                if v.len() >= MAX_ITEMS {
                    return Err(format!("more than {MAX_ITEMS} peers"));
                }
                v.push(
                    w.parse()
                        .map_err(|_| format!("`{w}` is not ADDRESS:PORT"))?,
                );
            }
            Ok(v)
        };
        let mut seen_peers = false;
        for (n, line) in lines(text)? {
            let at = |e: String| format!("line {n}: {e}");
            let mut words = line.split_whitespace();
            match words.next().unwrap_or_default() {
                "peers" if !seen_peers => {
                    seen_peers = true;
                    a.peers = addrs(words).map_err(at)?;
                }
                "from" => {
                    let i = number(words.next().unwrap_or_default()).map_err(at)?;
                    if i >= chunks {
                        return Err(at(format!("no chunk {i} of {chunks}")));
                    }
                    a.from.push((i, addrs(words).map_err(at)?));
                }
                "order" if a.order.is_none() => {
                    let text = words.next().unwrap_or_default();
                    let r = Ranges::parse_runs(text, chunks).map_err(at)?;
                    a.order = Some(r.iter().collect());
                }
                _ => {
                    return Err(at(format!(
                        "`{line}` is not an answer's line (or is one twice)"
                    )));
                }
            }
        }
        if !seen_peers {
            return Err("no `peers` line".into());
        }
        Ok(a)
    }
}

/// The lines after the header, numbered from 2, at most `MAX_ITEMS`.
fn lines(text: &[u8]) -> Result<Vec<(usize, &str)>, String> {
    if text.len() > MAX_TEXT {
        return Err(format!("over {MAX_TEXT} bytes"));
    }
    let text = core::str::from_utf8(text).map_err(|_| "not text".to_string())?;
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) {
        return Err(format!("line 1 is not `{HEADER}`"));
    }
    let v: Vec<(usize, &str)> = lines
        .enumerate()
        .map(|(k, l)| (k + 2, l))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    if v.len() > MAX_ITEMS {
        return Err(format!("more than {MAX_ITEMS} lines"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_report_reads_back_as_written() {
        let r = Report {
            port: 10810,
            have: Ranges::of(&[5, 0, 1, 2, 9, 3]),
            want: Ranges::of(&[7]),
            bad: vec![ip("10.0.0.5")],
            gone: vec![ip("fd00::7")],
            order: true,
        };
        let text = r.encode();
        assert!(text.contains("have 0-3,5,9\nwant 7\n"), "{text}");
        assert_eq!(Report::decode(text.as_bytes(), 10).unwrap(), r);
        let bare = Report {
            port: 1,
            ..Report::default()
        };
        assert_eq!(Report::decode(bare.encode().as_bytes(), 10).unwrap(), bare);
    }

    #[test]
    fn an_answer_reads_back_as_written() {
        let a = Answer {
            peers: vec![
                "10.0.0.5:10810".parse().unwrap(),
                "[fd00::7]:1".parse().unwrap(),
            ],
            from: vec![(3, vec!["10.0.0.5:10810".parse().unwrap()]), (4, vec![])],
            order: Some(vec![4, 5, 6, 0]),
        };
        let text = a.encode();
        let back = Answer::decode(text.as_bytes(), 10).unwrap();
        // The order is written as runs, in its order.
        assert!(text.contains("order 4-6,0\n"), "{text}");
        assert_eq!(back.order, a.order);
        assert_eq!((back.peers, back.from), (a.peers, a.from));
        let none = Answer::default();
        assert_eq!(Answer::decode(none.encode().as_bytes(), 1).unwrap(), none);
    }

    #[test]
    fn what_a_writer_would_not_write_is_refused_with_its_line() {
        let refused = |text: &str| Report::decode(text.as_bytes(), 10).unwrap_err();
        assert!(refused("bootpool-swarm 2\nport 1\n").contains("line 1"));
        assert!(refused("bootpool-swarm 1\n").contains("no `port`"));
        assert!(refused("bootpool-swarm 1\nport 70000\n").contains("line 2"));
        assert!(refused("bootpool-swarm 1\nport 1\nhave 0-10\n").contains("line 3"));
        assert!(refused("bootpool-swarm 1\nport 1\nhave 5,3\n").contains("not after"));
        assert!(refused("bootpool-swarm 1\nport 1\nwant 03\n").contains("not a number"));
        assert!(refused("bootpool-swarm 1\nport 1\nwant -1\n").contains("line 3"));
        assert!(refused("bootpool-swarm 1\nport 1\nbad x\n").contains("not an address"));
        assert!(refused("bootpool-swarm 1\nport 1\nport 2\n").contains("twice"));
        assert!(refused("bootpool-swarm 1\nport 1\nhello\n").contains("line 3"));
        let big = format!(
            "bootpool-swarm 1\nport 1\n{}",
            "bad 1.2.3.4\n".repeat(MAX_ITEMS + 1)
        );
        assert!(refused(&big).contains("lines"));
        let answer = |text: &str| Answer::decode(text.as_bytes(), 10).unwrap_err();
        assert!(answer("bootpool-swarm 1\n").contains("no `peers`"));
        assert!(answer("bootpool-swarm 1\npeers\nfrom 10\n").contains("no chunk 10"));
        assert!(answer("bootpool-swarm 1\npeers 1.2.3.4\n").contains("ADDRESS:PORT"));
    }
}

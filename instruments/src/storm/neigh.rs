//! The kernel's neighbour (ARP) table as a storm room needs it. The table is one for the whole
//! machine: every network namespace's entries count against its limits
//! (`net.ipv4.neigh.default.gc_thresh1-3`, 128, 512 and 1024 by default, settable only from
//! the first namespace). A room of PCs has a table in each PC; the storm's room has one for
//! all of them. Past `gc_thresh3`, once a forced collection frees nothing (every entry used in
//! the last 5 s), the kernel creates no entry: a datagram that needs one is dropped without
//! an error reaching UDP (`table_fulls` in /proc/net/stat/arp_cache counts each time), a
//! broadcast DISCOVER among them, whose entry for 255.255.255.255 the forced collection had
//! removed; a TCP connection waits for its retransmits. A swarm room's agents talk to each
//! other, up to N x N entries: 120 clients lost a fifth of their initrds' DHCP to it
//! (docs/swarm.md, "Measured in the storm").
//!
//! So the storm raises the limits for its room before it enters its namespace (`raise`, from
//! the first one, where the files are) and puts back what it found when it ends (`restore`,
//! through the files it opened then, also from the signal thread); and it reports how often
//! the table was full during the run (`table_fulls`, the machine's, as the backlog's drops
//! are).

use anyhow::Context;
use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::sync::Mutex;

/// The limits, as the first namespace's /proc/sys names them.
const FILES: [&str; 3] = [
    "/proc/sys/net/ipv4/neigh/default/gc_thresh1",
    "/proc/sys/net/ipv4/neigh/default/gc_thresh2",
    "/proc/sys/net/ipv4/neigh/default/gc_thresh3",
];

/// The table's statistics, per CPU; readable from the first namespace only, or through a
/// process of it.
const STATS: &str = "/proc/1/net/stat/arp_cache";

/// What `raise` changed, to put back: each limit's file (opened in the first namespace),
/// the value found, and the value set.
struct Raised {
    files: Vec<(File, u64, u64)>,
}

static RAISED: Mutex<Option<Raised>> = Mutex::new(None);

/// The table entries a room of `clients` may need at once: each client's namespace one for
/// every other client (a swarm's agents reach any peer), each of the server's `links`, the
/// broadcast address and a spare; the server one per client on each link; and the default
/// limit again for the rest of the machine.
pub fn needed(clients: usize, links: usize) -> u64 {
    let (n, k) = (clients as u64, links as u64);
    n * (n + k + 2) + k * n + 1024
}

/// The limits (`gc_thresh1`, `2`, `3`) to set for `need` entries, given the `found` ones:
/// `gc_thresh1` as found, the others at least `need` (none lowered).
pub fn limits(found: [u64; 3], need: u64) -> [u64; 3] {
    [found[0], found[1].max(need), found[2].max(need)]
}

/// Raises the table's limits for a room of `clients` on `links` server links, unless they
/// suffice already; call before entering the storm's namespace. A machine that does not let
/// them be written (not root, no such files) keeps its own: the report's `table_fulls` then
/// says whether the room went past them.
pub fn raise(clients: usize, links: usize) -> anyhow::Result<()> {
    let mut files = Vec::new();
    for path in FILES {
        let mut f = File::options()
            .read(true)
            .write(true)
            .open(path)
            .with_context(|| format!("opening {path}"))?;
        let found = read_value(&mut f).with_context(|| format!("reading {path}"))?;
        files.push((f, found));
    }
    let found = [files[0].1, files[1].1, files[2].1];
    let set = limits(found, needed(clients, links));
    // The hard limit first, so the soft one is never above it.
    for i in [2, 1, 0] {
        let (f, old) = &mut files[i];
        if set[i] != *old {
            write_value(f, set[i]).with_context(|| format!("writing {}", FILES[i]))?;
        }
    }
    let files = files
        .into_iter()
        .zip(set)
        .map(|((f, old), set)| (f, old, set))
        .collect();
    *RAISED.lock().unwrap_or_else(|e| e.into_inner()) = Some(Raised { files });
    Ok(())
}

/// Puts back the limits `raise` found, where they still hold what it set (another storm may
/// have raised them since); the soft limits first. Once.
pub fn restore() {
    let Some(raised) = RAISED.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return;
    };
    for (mut f, old, set) in raised.files {
        if old != set && read_value(&mut f).ok() == Some(set) {
            let _ = write_value(&mut f, old);
        }
    }
}

fn read_value(f: &mut File) -> anyhow::Result<u64> {
    f.seek(SeekFrom::Start(0))?;
    let mut s = String::new();
    f.read_to_string(&mut s)?;
    Ok(s.trim().parse()?)
}

fn write_value(f: &mut File, v: u64) -> std::io::Result<()> {
    f.seek(SeekFrom::Start(0))?;
    f.write_all(format!("{v}\n").as_bytes())
}

/// How many times the machine's ARP table was full so far (0 when it cannot be read).
pub fn table_fulls() -> u64 {
    std::fs::read_to_string(STATS).map_or(0, |s| fulls(&s).unwrap_or(0))
}

/// The `table_fulls` column of /proc/net/stat/arp_cache's text, summed over its CPUs' lines
/// (hexadecimal); `None` without that column.
pub fn fulls(text: &str) -> Option<u64> {
    let mut lines = text.lines();
    let col = lines
        .next()?
        .split_whitespace()
        .position(|c| c == "table_fulls")?;
    Some(
        lines
            .filter_map(|l| l.split_whitespace().nth(col))
            .filter_map(|c| u64::from_str_radix(c, 16).ok())
            .sum(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_room_needs_a_table_entry_for_every_pair_and_limits_are_never_lowered() {
        assert_eq!(needed(120, 4), 120 * 126 + 480 + 1024);
        assert!(needed(10, 4) < 1024 * 2);
        assert_eq!(limits([128, 512, 1024], 2000), [128, 2000, 2000]);
        assert_eq!(limits([128, 8192, 16384], 2000), [128, 8192, 16384]);
    }

    #[test]
    fn table_fulls_are_summed_over_the_cpus_in_hex() {
        let text = "entries  allocs   destroys hash_grows lookups  hits     res_failed rcv_probes_mcast rcv_probes_ucast periodic_gc_runs forced_gc_runs unresolved_discards table_fulls\n\
            0000003e 0000d313 0000de7f 00000004   001587ca 0002efcf 000010db   00000000         00000000         00000000         00001ece       00000016            00001c27\n\
            0000003e 0000cdad 0000c203 00000004   0010fa2c 000300bb 00000f7b   00000000         00000000         00000b97         0000215d       00000013            00001e8a\n";
        assert_eq!(fulls(text), Some(0x1c27 + 0x1e8a));
        assert_eq!(fulls("entries allocs\n1 2\n"), None);
        assert_eq!(fulls(""), None);
    }
}

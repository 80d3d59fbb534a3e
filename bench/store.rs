//! The record store's rates: how fast a SQLite store (`store.rs` in `src/record/`) takes
//! events in the record writer's batches and replays them at start, and what an event costs on
//! disk. Numbers, not a check: `bench/store.sh` builds and runs it.

use bootpool::config::Database;
use bootpool::record::store::Store;
use bootpool::record::{Event, Kind, Proto, Who};
use std::time::Instant;

struct Args {
    events: u64,
    batch: usize,
    dir: Option<std::path::PathBuf>,
}

fn args() -> Args {
    let mut a = Args {
        events: 200_000,
        batch: 4096,
        dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--events" => a.events = value().parse().unwrap_or_else(|_| usage("--events N")),
            "--batch" => a.batch = value().parse().unwrap_or_else(|_| usage("--batch N")),
            "--dir" => a.dir = Some(value().into()),
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if a.batch == 0 {
        usage("--batch must be at least 1");
    }
    a
}

fn usage(why: &str) -> ! {
    if !why.is_empty() {
        eprintln!("{why}");
    }
    eprintln!(
        "usage: store [--events N] [--batch N] [--dir DIR]\n\
         Appends N root-read events (default 200000) to a fresh SQLite store in batches of\n\
         --batch (default 4096, the record writer's most), replays them, and prints both rates\n\
         and the bytes per event on disk. --dir: where the store is made (default a temporary\n\
         folder; the disk under it is what is measured)."
    );
    std::process::exit(if why.is_empty() { 0 } else { 2 })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let a = args();
    let dir = match &a.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let db = dir.path().join("records.db");
    let store = Store::open(&Database::Sqlite(db.clone())).await?;
    let events: Vec<Event> = (0..a.events)
        .map(|i| Event {
            at: 1_800_000_000_000_000 + i as i64,
            who: Who::Ip([10, 77, 0, (i % 200) as u8].into()),
            kind: Kind::RootRead {
                proto: Proto::Nfs,
                bytes: 65536,
            },
        })
        .collect();

    let t = Instant::now();
    for batch in events.chunks(a.batch) {
        store.append(batch, &[]).await?;
    }
    let append = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let mut n = 0u64;
    store.replay(|_| n += 1).await?;
    let replay = t.elapsed().as_secs_f64();
    assert_eq!(n, a.events, "replay gives back every event appended");

    let size: u64 = ["records.db", "records.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.path().join(f)).ok())
        .map(|m| m.len())
        .sum();
    println!(
        "{n} events: appended at {:.0}/s in batches of {}, replayed at {:.0}/s, {:.0} bytes each on disk",
        n as f64 / append,
        a.batch,
        n as f64 / replay,
        size as f64 / n.max(1) as f64
    );
    Ok(())
}

//! The egress sampler, a service of its own (`app`'s table): at start the last hours' samples
//! from the store, then once a second the served interfaces' counters (`egress`) turned into
//! rates, kept in memory for the API and handed to the record writer. The I/O shell of
//! `egress.rs`, apart from it so that the data types the store keeps do not name the writer.

use super::egress::{
    Egress, Held, KEEP, LinkCounters, ProtoTotals, Sample, Saved, dump_links, fill_speeds, rates,
    read_sysfs, select, sysfs_speed,
};
use super::event::{Micros, Proto, now_micros};
use crate::shutdown::Shutdown;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The samples of the last hours, loaded from the store. `link_speeds` (pools.yaml's
/// `server.link_speeds`) gives the capacity of links the kernel has no speed for.
pub async fn open(
    records: &super::Records,
    link_speeds: &BTreeMap<String, u32>,
) -> anyhow::Result<Arc<Egress>> {
    let egress = Arc::new(Egress::default());
    let cutoff = now_micros() as f64 / 1e6 - KEEP as f64;
    // A PostgreSQL not answering at start (the daemon serves without it): no history.
    let read = tokio::time::timeout(Duration::from_secs(2), records.store.egress_since(cutoff));
    let saved = match read.await {
        Ok(Ok(saved)) => saved,
        Ok(Err(e)) if matches!(records.store, super::store::Store::Sqlite(_)) => return Err(e),
        _ => {
            tracing::warn!("egress history not read: the records' database does not answer");
            Vec::new()
        }
    };
    for mut s in saved {
        fill_speeds(&mut s.links, link_speeds);
        egress.push(&s.links, s.sample);
    }
    Ok(egress)
}

/// The egress sampler, a service of its own: once a second until shutdown, samples
/// `interfaces` and those holding server links (`held`) into `egress` and the records.
/// `link_speeds` gives the capacity of links the kernel has no speed for. Never fails.
pub async fn sample(
    egress: Arc<Egress>,
    mut interfaces: Vec<String>,
    held: Held,
    link_speeds: BTreeMap<String, u32>,
    totals: ProtoTotals,
    recorder: super::Recorder,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    for dev in held.keys() {
        if !interfaces.contains(dev) {
            interfaces.push(dev.clone());
        }
    }
    sample_forever(
        egress,
        interfaces,
        Arc::new(held),
        Arc::new(link_speeds),
        totals,
        recorder,
        shutdown,
    )
    .await;
    Ok(())
}

fn read_links(interfaces: &[String], link_speeds: &BTreeMap<String, u32>) -> Vec<LinkCounters> {
    let mut links = match dump_links() {
        Ok(links) => {
            let index: BTreeMap<String, u32> =
                links.iter().map(|l| (l.name.clone(), l.index)).collect();
            select(&links, interfaces, |name| {
                index.get(name).and_then(|i| sysfs_speed(name, *i))
            })
        }
        Err(e) => {
            tracing::debug!(error = %e, "rtnetlink unavailable; reading sysfs");
            read_sysfs(Path::new("/sys"), interfaces)
        }
    };
    fill_speeds(&mut links, link_speeds);
    links
}

async fn sample_forever(
    egress: Arc<Egress>,
    interfaces: Vec<String>,
    held: Arc<Held>,
    link_speeds: Arc<BTreeMap<String, u32>>,
    totals: ProtoTotals,
    recorder: super::Recorder,
    shutdown: Shutdown,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut before: Option<(Micros, Vec<LinkCounters>, BTreeMap<Proto, u64>)> = None;
    let mut warned = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait() => return,
        }
        let (ifaces, speeds) = (interfaces.clone(), link_speeds.clone());
        let Ok(mut links) = tokio::task::spawn_blocking(move || read_links(&ifaces, &speeds)).await
        else {
            continue;
        };
        for l in &mut links {
            l.addresses = held.get(&l.name).cloned().unwrap_or_default();
        }
        let now = now_micros();
        let proto_now = totals();
        if links.is_empty() && !interfaces.is_empty() && !warned {
            tracing::warn!(interfaces = ?interfaces, "none of the served interfaces exist; egress is not sampled");
            warned = true;
        }
        if let Some((t0, links0, proto0)) = &before {
            let secs = (now - t0) as f64 / 1e6;
            if secs > 0.0 {
                let protocols = proto_now
                    .iter()
                    .map(|(p, n)| {
                        (
                            super::event::proto_name(*p).to_string(),
                            n.saturating_sub(*proto0.get(p).unwrap_or(&0)) as f64 / secs,
                        )
                    })
                    .collect();
                let sample = Sample {
                    t: now as f64 / 1e6,
                    seconds: secs,
                    links: rates(links0, &links, secs),
                    protocols,
                };
                recorder.egress(Saved {
                    sample: sample.clone(),
                    links: links.clone(),
                });
                egress.push(&links, sample);
            }
        }
        before = Some((now, links, proto_now));
    }
}

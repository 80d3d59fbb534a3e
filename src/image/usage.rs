//! Which revision each client runs, from the boot record: a client runs the revision its
//! newest boot attached until that boot is over by evidence (it failed, its client went: an
//! NBD disconnect, a restart, a new boot), or, if the admin asks (`--idle`), has been silent
//! that long. What `prune` keeps, and the "N of M need a reboot to get rX" of the API,
//! `bootpool report` and `bootpool image list`. Pure: boots in, counts out.

use crate::config::{Config, Image};
use crate::record::event::Micros;
use crate::record::timeline::{Boot, BootResult};
use serde::Serialize;
use std::collections::BTreeMap;

/// A client whose newest boot runs a revision of an image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Running {
    pub mac: String,
    pub image: String,
    pub revision: String,
    pub boot: u64,
}

/// The clients running a revision now. `idle`: a boot with no event for this long counts as
/// over (None: only evidence ends one).
pub fn running(config: &Config, boots: &[Boot], now: Micros, idle: Option<Micros>) -> Vec<Running> {
    let mut newest: BTreeMap<String, &Boot> = BTreeMap::new();
    for b in boots {
        let key = b.mac.to_string();
        if newest.get(&key).is_none_or(|n| n.start <= b.start) {
            newest.insert(key, b);
        }
    }
    newest
        .into_values()
        .filter(|b| b.gone.is_none() && b.result != BootResult::Failed)
        .filter(|b| idle.is_none_or(|i| now - b.last_event < i))
        .filter_map(|b| {
            // The image its firmware's architecture booted (`pools.NAME.arch`).
            let pool = config.pools.get(b.pool.as_deref()?)?;
            let image = pool.image_for(b.arch).name.clone();
            Some(Running {
                mac: b.mac.to_string(),
                image,
                revision: b.revision.clone()?.into(),
                boot: b.id,
            })
        })
        .collect()
}

/// One image's clients against its active revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Behind {
    pub image: String,
    /// The active revision's id and label (`r7`).
    pub active: String,
    pub label: String,
    /// Clients running a revision of this image, and those of them on another than `active`.
    pub clients: usize,
    pub need_reboot: usize,
}

impl Behind {
    /// `12 of 40 need a reboot to get r7`.
    pub fn sentence(&self) -> String {
        format!(
            "image {}: {} of {} running clients need a reboot to get {} ({})",
            self.image, self.need_reboot, self.clients, self.label, self.active
        )
    }
}

/// Per image with an active revision: how many of its running clients run another.
/// `active`: image name -> (id, label).
pub fn behind(running: &[Running], active: &BTreeMap<String, (String, String)>) -> Vec<Behind> {
    active
        .iter()
        .map(|(image, (id, label))| {
            let mine: Vec<&Running> = running.iter().filter(|r| &r.image == image).collect();
            Behind {
                image: image.clone(),
                active: id.clone(),
                label: label.clone(),
                clients: mine.len(),
                need_reboot: mine.iter().filter(|r| &r.revision != id).count(),
            }
        })
        .collect()
}

/// The active revision of every image of the config that has revisions.
pub fn active_revisions(config: &Config) -> BTreeMap<String, (String, String)> {
    config
        .images
        .values()
        .flat_map(|i| active_revisions_of(i))
        .collect()
}

/// `image`'s active revision, as `active_revisions` has it.
pub fn active_revisions_of(image: &Image) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    if super::store::managed(&image.dir)
        && let Ok(Some(id)) = super::store::active(&image.dir)
    {
        let label = super::store::read(&image.dir, &id)
            .ok()
            .flatten()
            .map_or_else(|| id.clone(), |r| r.label());
        out.insert(image.name.clone(), (id, label));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mac;
    use crate::record::event::{Event, Kind, Proto, Who};
    use crate::record::timeline::Timelines;
    use std::path::Path;

    /// A client runs a revision of the image its firmware's architecture booted
    /// (`pools.NAME.arch`), not of its pool's own.
    #[test]
    fn a_client_runs_the_image_of_its_architecture() {
        let config = Config::parse(
            Path::new("p.yaml"),
            "server: { address: 10.77.0.1 }\n\
             dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.199 }\n\
             images: { demo: { dir: d }, demo-arm64: { dir: a } }\n\
             pools:\n  room:\n    image: demo\n    arch: { arm64: { image: demo-arm64 } }\n\
             \x20   clients: [ { macs: \"52:54:00:77:00:00-52:54:00:77:00:0f\" } ]\n",
        )
        .unwrap();
        let mut t = Timelines::default();
        for (n, arch, export) in [
            (1, Some(11), "/demo-arm64@0000000000b2"),
            (2, Some(7), "/demo@0000000000a1"),
        ] {
            let who = Who::Mac(Mac([0x52, 0x54, 0, 0x77, 0, n]));
            let kind = Kind::DhcpDiscover {
                pxe: true,
                ipxe: false,
                pool: Some("room".into()),
                answered: true,
                arch,
            };
            t.apply(&Event {
                at: 1_000_000,
                who,
                kind,
            });
            let kind = Kind::RootAttach {
                proto: Proto::Nfs,
                export: export.into(),
            };
            t.apply(&Event {
                at: 2_000_000,
                who,
                kind,
            });
        }
        let mut run: Vec<(String, String)> = running(&config, t.boots(), 3_000_000, None)
            .into_iter()
            .map(|r| (r.image, r.revision))
            .collect();
        run.sort();
        assert_eq!(
            run,
            [
                ("demo".to_string(), "0000000000a1".to_string()),
                ("demo-arm64".to_string(), "0000000000b2".to_string())
            ]
        );
    }
}

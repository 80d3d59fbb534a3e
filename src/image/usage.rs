//! Which revision each client may still be reading, from the boot record: a client runs the
//! revision of the root it attached last until the server's own sockets say that root is over
//! (a root connection ended with evidence of the client's going: an NBD disconnect, a reset, a
//! connection lost for `limits.root_lost_after`; or a later root attach), or, if the admin asks
//! (`--idle`), the client has been silent that long. A console line (a "panic" anyone can send
//! with the client's source address) or a DISCOVER (anyone can send one with its MAC) starts
//! or fails a boot in the record but never ends the use of a root: the revision stays. What
//! `prune` keeps, and the "N of M need a reboot to get rX" of the API, `bootpool report` and
//! `bootpool image list`. Pure: the record in, counts out.

use crate::config::{Config, Image};
use crate::record::Timelines;
use crate::record::event::Micros;
use serde::Serialize;
use std::collections::BTreeMap;

/// A client that may still read a revision of an image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Running {
    pub mac: String,
    pub image: String,
    pub revision: String,
    /// The boot that attached it.
    pub boot: u64,
}

/// The clients that may still read a revision now. `idle`: a client with no event (of any
/// boot) for this long counts as gone (None: only the server's sockets end a root's use).
pub fn running(config: &Config, t: &Timelines, now: Micros, idle: Option<Micros>) -> Vec<Running> {
    t.roots()
        .iter()
        .filter(|(_, u)| u.ended.is_none())
        .filter_map(|(mac, u)| {
            let revision = String::from(u.revision.clone()?);
            let boot = t.boot(u.boot)?;
            // Its newest boot's events count as its own: a forged DISCOVER moved them there.
            let last = t.current(*mac).map_or(u.last, |c| c.last_event.max(u.last));
            if idle.is_some_and(|i| now - last >= i) {
                return None;
            }
            // The image its firmware's architecture booted (`pools.NAME.arch`).
            let pool = config.pools.get(boot.pool.as_deref()?)?;
            let image = pool.image_for(boot.arch).name.clone();
            Some(Running {
                mac: mac.to_string(),
                image,
                revision,
                boot: u.boot,
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
    use crate::record::BootResult;
    use crate::record::event::{Detach, Event, Kind, Proto, Who};
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
        let mut run: Vec<(String, String)> = running(&config, &t, 3_000_000, None)
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

    const S: i64 = 1_000_000;

    fn room() -> Config {
        Config::parse(
            Path::new("p.yaml"),
            "server: { address: 10.77.0.1 }\n\
             dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.199 }\n\
             images: { demo: { dir: d } }\n\
             pools:\n  room:\n    image: demo\n\
             \x20   clients: [ { macs: \"52:54:00:77:00:00-52:54:00:77:00:0f\" } ]\n",
        )
        .unwrap()
    }

    /// Applies `kind` from `who` at `at_s` seconds.
    fn at(t: &mut Timelines, at_s: f64, who: Who, kind: Kind) {
        let at = (at_s * S as f64) as i64;
        t.apply(&Event { at, who, kind });
    }

    fn discover() -> Kind {
        Kind::DhcpDiscover {
            pxe: true,
            ipxe: false,
            pool: Some("room".into()),
            answered: true,
            arch: None,
        }
    }

    fn attach(proto: Proto, revision: &str) -> Kind {
        Kind::RootAttach {
            proto,
            export: format!("/demo@{revision}").into(),
        }
    }

    fn detach(proto: Proto, how: Detach, since_s: f64) -> Kind {
        Kind::RootDetach {
            proto,
            how,
            since: Some((since_s * S as f64) as i64),
        }
    }

    /// A client of `room` that booted at 0 s (its address 10.77.0.1 at 1 s) and attached
    /// `/demo@0000000000a1` over `proto` at 10 s, on a connection accepted just before.
    fn attached(proto: Proto) -> (Timelines, Mac, Who) {
        let mut t = Timelines::default();
        let mac = Mac([0x52, 0x54, 0, 0x77, 0, 1]);
        let ip = std::net::Ipv4Addr::new(10, 77, 0, 1);
        at(&mut t, 0.0, Who::Mac(mac), discover());
        let ack = Kind::DhcpAck {
            ip,
            pxe: true,
            ipxe: true,
            pool: "room".into(),
            link: None,
            relayed: None,
        };
        at(&mut t, 1.0, Who::Mac(mac), ack);
        at(&mut t, 10.0, Who::Ip(ip), attach(proto, "0000000000a1"));
        (t, mac, Who::Ip(ip))
    }

    fn revisions(t: &Timelines, now: i64, idle: Option<i64>) -> Vec<String> {
        running(&room(), t, now, idle)
            .into_iter()
            .map(|r| r.revision)
            .collect()
    }

    /// What anyone on the segment can send (a DISCOVER with the client's MAC, a "panic"
    /// line from its address) starts or fails a boot in the record, and the client still
    /// runs its revision: `prune` keeps it.
    #[test]
    fn a_forged_discover_or_panic_line_leaves_the_revision_in_use() {
        let (mut t, mac, _) = attached(Proto::Nfs);
        assert_eq!(revisions(&t, 20 * S, None), ["0000000000a1"]);
        t.console(
            mac,
            20 * S,
            vec!["Kernel panic - not syncing: forged".into()],
        );
        assert_eq!(t.current(mac).unwrap().result, BootResult::Failed);
        assert_eq!(revisions(&t, 21 * S, None), ["0000000000a1"]);
        // A firmware DISCOVER after a failure: a new boot in the record.
        at(&mut t, 30.0, Who::Mac(mac), discover());
        assert_eq!(t.boots().len(), 2);
        assert_eq!(revisions(&t, 31 * S, None), ["0000000000a1"]);
        // The "N of M need a reboot" view counts it on its revision too.
        let active = BTreeMap::from([(
            "demo".to_string(),
            ("0000000000b2".to_string(), "r2".to_string()),
        )]);
        let b = behind(&running(&room(), &t, 31 * S, None), &active);
        assert_eq!((b[0].clients, b[0].need_reboot), (1, 1));
    }

    /// The server's own sockets end a root's use: an NBD disconnect of the attaching
    /// connection (even one heard after a forged DISCOVER made another boot the newest); not
    /// the end of a connection an NBD reconnect replaced.
    #[test]
    fn an_nbd_disconnect_ends_a_roots_use_and_an_old_connection_does_not() {
        let (mut t, mac, ip) = attached(Proto::Nbd);
        at(&mut t, 30.0, Who::Mac(mac), discover());
        // A read after the forged DISCOVER: still reading.
        let read = Kind::RootRead {
            proto: Proto::Nbd,
            bytes: 4096,
        };
        at(&mut t, 31.0, ip, read);
        assert_eq!(revisions(&t, 32 * S, None), ["0000000000a1"]);
        at(
            &mut t,
            40.0,
            ip,
            detach(Proto::Nbd, Detach::Disconnect, 9.9),
        );
        assert!(revisions(&t, 41 * S, None).is_empty());

        // A reconnect at 20 s; the first connection found lost later says nothing of it.
        let (mut t, _, ip) = attached(Proto::Nbd);
        at(&mut t, 20.0, ip, attach(Proto::Nbd, "0000000000a1"));
        at(&mut t, 300.0, ip, detach(Proto::Nbd, Detach::Lost, 9.9));
        assert_eq!(revisions(&t, 301 * S, None), ["0000000000a1"]);
        at(&mut t, 400.0, ip, detach(Proto::Nbd, Detach::Lost, 19.9));
        assert!(revisions(&t, 401 * S, None).is_empty());
    }

    /// NFS: a closed connection (the kernel closes idle ones) is no end; a lost one is; the
    /// client's next boot attaching the next revision is, and the first boot's connection
    /// lost later says nothing of it.
    #[test]
    fn nfs_connections_lost_and_the_next_attach_end_a_roots_use() {
        let (mut t, mac, ip) = attached(Proto::Nfs);
        at(&mut t, 40.0, ip, detach(Proto::Nfs, Detach::Closed, 10.5));
        assert_eq!(revisions(&t, 41 * S, None), ["0000000000a1"]);
        // Its next boot (a DISCOVER after a long silence) attaches the next revision.
        at(&mut t, 400.0, Who::Mac(mac), discover());
        assert_eq!(t.boots().len(), 2);
        at(&mut t, 410.0, ip, attach(Proto::Nfs, "0000000000b2"));
        assert_eq!(revisions(&t, 411 * S, None), ["0000000000b2"]);
        at(&mut t, 420.0, ip, detach(Proto::Nfs, Detach::Lost, 10.5));
        assert_eq!(revisions(&t, 421 * S, None), ["0000000000b2"]);
        at(&mut t, 500.0, ip, detach(Proto::Nfs, Detach::Lost, 410.5));
        assert!(revisions(&t, 501 * S, None).is_empty());
    }

    /// `--idle`: a client silent that long no longer holds its revision; any event of it
    /// since (a later boot's included) counts as its activity.
    #[test]
    fn idle_ends_a_silent_clients_use() {
        let (t, _, _) = attached(Proto::Nfs);
        assert_eq!(revisions(&t, 100 * S, Some(120 * S)), ["0000000000a1"]);
        assert!(revisions(&t, 200 * S, Some(120 * S)).is_empty());
        assert_eq!(revisions(&t, 200 * S, None), ["0000000000a1"]);
    }
}

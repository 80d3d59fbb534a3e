//! The other members a boot's client agent may read its NBD root from (`nbd: { via: agent }`,
//! docs/failover.md): policy over the site's view, pure. The boot script names the boot's own
//! link first and these after it in `bootpool.blocks=`, so that an agent whose server dies
//! fetches its next chunk from a survivor at once, with or without keepalived moving the
//! dead member's address. A member is named when it is live (as last read), serves the
//! client's pool, and holds the root: for a revision, the site's table says it holds that
//! revision (`image::demand`'s last read); an image without revisions is the same folder
//! name on every member, and the agent refuses any chunk that is not the manifest's, so any
//! member serving the pool may be asked. Its addresses are its links in the subnet of the
//! boot's link (the room's), else all of its links, on the port of its HTTP service.

use super::member::Seen;
use crate::config::Subnet;
use std::net::Ipv4Addr;

/// What the boot is: its pool, the revision its root is (`None`: an image without
/// revisions), and the link it was given, with that link's subnet if the config has it.
#[derive(Debug, Clone, Copy)]
pub struct Boot<'a> {
    pub pool: &'a str,
    pub rev: Option<&'a str>,
    pub link: Ipv4Addr,
    pub subnet: Option<Subnet>,
}

/// `http://ADDR:PORT` of each member the boot's agent may also read its root from, in the
/// view's order (members by name), none twice and never the boot's own link: the other
/// members, and this one (`me`) when the boot was placed on another member's link. `live` is
/// the names the view takes for live; `holders`, the `http` URLs of the other members the
/// site's table says hold `boot.rev` (`None`: not known, and then a revision is read from
/// the boot's link and this member only).
pub fn elsewhere(
    seen: &[Seen],
    me: &str,
    live: &[String],
    holders: Option<&[String]>,
    boot: Boot<'_>,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in seen {
        let m = &s.member;
        if !live.contains(&m.name) || !m.rooms.iter().any(|r| r == boot.pool) {
            continue;
        }
        // This member serves the root the script names; it is a source apart from the boot's
        // link only when the site placed the boot on another member's link.
        let holds = match (boot.rev, holders) {
            _ if m.name == me => !m.links.contains(&boot.link),
            (None, _) => true,
            (Some(_), Some(h)) => h.contains(&m.http),
            (Some(_), None) => false,
        };
        let Some(port) = port_of(&m.http) else {
            continue;
        };
        if !holds {
            continue;
        }
        let in_room: Vec<Ipv4Addr> = match boot.subnet {
            Some(net) => m
                .links
                .iter()
                .copied()
                .filter(|l| net.contains(*l))
                .collect(),
            None => Vec::new(),
        };
        let links = if in_room.is_empty() {
            &m.links
        } else {
            &in_room
        };
        for link in links {
            let url = format!("http://{link}:{port}");
            if *link != boot.link && !out.contains(&url) {
                out.push(url);
            }
        }
    }
    out
}

/// The port of a member's `http` (`http://ADDR:PORT`, as `api_client::api_address` writes it).
fn port_of(http: &str) -> Option<u16> {
    let rest = http.strip_prefix("http://")?;
    let (_, port) = rest.rsplit_once(':')?;
    port.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::member::Member;

    fn seen(name: &str, links: &[[u8; 4]], http: &str, rooms: &[&str]) -> Seen {
        Seen {
            member: Member {
                name: name.into(),
                addresses: Vec::new(),
                links: links.iter().map(|l| Ipv4Addr::from(*l)).collect(),
                rooms: rooms.iter().map(|r| r.to_string()).collect(),
                http: http.into(),
                started: 0,
            },
            heartbeat: 0,
            age_s: 0.1,
            load: Vec::new(),
        }
    }

    fn boot(rev: Option<&str>) -> Boot<'_> {
        Boot {
            pool: "lab",
            rev,
            link: Ipv4Addr::new(10, 77, 0, 1),
            subnet: Some(Subnet {
                network: Ipv4Addr::new(10, 77, 0, 0),
                prefix: 24,
            }),
        }
    }

    #[test]
    fn live_members_serving_the_pool_are_named_by_their_links_in_the_room() {
        let seen = [
            seen("a", &[[10, 77, 0, 1]], "http://10.77.0.1:8080", &["lab"]),
            // Two links: the one in the boot's room only.
            seen(
                "b",
                &[[10, 78, 0, 2], [10, 77, 0, 2]],
                "http://10.77.0.2:8081",
                &["lab"],
            ),
            // Serves another pool only.
            seen("c", &[[10, 77, 0, 3]], "http://10.77.0.3:8080", &["other"]),
            // Dead.
            seen("d", &[[10, 77, 0, 4]], "http://10.77.0.4:8080", &["lab"]),
            // No link in the room: all of its links.
            seen(
                "e",
                &[[10, 79, 0, 5]],
                "http://10.79.0.5:8080",
                &["lab", "x"],
            ),
        ];
        let live: Vec<String> = ["a", "b", "c", "e"].map(String::from).to_vec();
        assert_eq!(
            elsewhere(&seen, "a", &live, None, boot(None)),
            ["http://10.77.0.2:8081", "http://10.79.0.5:8080"]
        );
        // Without the room's subnet, every link of each.
        let mut anywhere = boot(None);
        anywhere.subnet = None;
        assert_eq!(
            elsewhere(&seen, "a", &live, None, anywhere),
            [
                "http://10.78.0.2:8081",
                "http://10.77.0.2:8081",
                "http://10.79.0.5:8080"
            ]
        );
    }

    #[test]
    fn a_revision_is_read_only_from_members_the_table_says_hold_it() {
        let seen = [
            seen("a", &[[10, 77, 0, 1]], "http://10.77.0.1:8080", &["lab"]),
            seen("b", &[[10, 77, 0, 2]], "http://10.77.0.2:8080", &["lab"]),
            seen("c", &[[10, 77, 0, 3]], "http://10.77.0.3:8080", &["lab"]),
        ];
        let live: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let holders = ["http://10.77.0.3:8080".to_string()];
        assert_eq!(
            elsewhere(&seen, "a", &live, Some(&holders), boot(Some("r2"))),
            ["http://10.77.0.3:8080"]
        );
        // Not known (no follower's read yet): this member alone.
        assert!(elsewhere(&seen, "a", &live, None, boot(Some("r2"))).is_empty());
        // Alone in the site: nobody else.
        assert!(elsewhere(&[], "a", &["a".into()], None, boot(None)).is_empty());
    }

    /// A boot the site placed on another member's link (b's) names this member (a) after
    /// it; one on this member's link does not.
    #[test]
    fn this_member_follows_a_boot_placed_on_another_members_link() {
        let seen = [
            seen("a", &[[10, 77, 0, 1]], "http://10.77.0.1:8080", &["lab"]),
            seen("b", &[[10, 77, 0, 2]], "http://10.77.0.2:8080", &["lab"]),
        ];
        let live: Vec<String> = ["a", "b"].map(String::from).to_vec();
        let mut on_b = boot(Some("r2"));
        on_b.link = Ipv4Addr::new(10, 77, 0, 2);
        let holders = ["http://10.77.0.2:8080".to_string()];
        assert_eq!(
            elsewhere(&seen, "a", &live, Some(&holders), on_b),
            ["http://10.77.0.1:8080"]
        );
        assert_eq!(
            elsewhere(&seen, "a", &live, Some(&holders), boot(Some("r2"))),
            ["http://10.77.0.2:8080"]
        );
    }

    /// A member that holds the boot's own link (a takeover) is not named for it twice, and a
    /// row whose `http` carries no port is left out.
    #[test]
    fn the_boots_own_link_and_unreadable_rows_are_left_out() {
        let seen = [
            seen(
                "b",
                &[[10, 77, 0, 1], [10, 77, 0, 2]],
                "http://10.77.0.2:8080",
                &["lab"],
            ),
            seen("c", &[[10, 77, 0, 3]], "10.77.0.3", &["lab"]),
        ];
        let live: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        assert_eq!(
            elsewhere(&seen, "a", &live, None, boot(None)),
            ["http://10.77.0.2:8080"]
        );
    }
}

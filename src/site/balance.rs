//! The site's links as the DHCP owner of a client sees them when it places a boot anywhere
//! in the site (docs/site.md, "Which server answers whom"): policy over the view's rows,
//! plain data in and out. Each live member publishes its own links' capacity in its
//! heartbeat (`steer::placement::Published`); this turns the other live members' into
//! `Elsewhere`, which `steer::placement` offers beside its own links. What the others placed
//! is not read: each owner spreads its own boots (`steer::placement`).

use super::owners::View;
use crate::steer::placement::Elsewhere;

/// The other live members' links, with the capacity their member published. Empty while the
/// view is frozen: a member whose heartbeat cannot be read may be gone, so a boot goes on
/// this member's own links only.
pub fn elsewhere(view: &View) -> Vec<Elsewhere> {
    if view.frozen() {
        return Vec::new();
    }
    let mut out: Vec<Elsewhere> = Vec::new();
    for s in view.seen() {
        if s.member.name == view.me() || !view.live().contains(&s.member.name) {
            continue;
        }
        for p in s.load.iter().filter(|p| p.own) {
            if !out.iter().any(|e| e.address == p.address) {
                out.push(Elsewhere {
                    address: p.address,
                    capacity_bps: p.capacity_bps,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::member::{Member, Seen};
    use crate::steer::placement::Published;
    use std::net::Ipv4Addr;

    fn row(name: &str, age_s: f64, load: Vec<Published>) -> Seen {
        Seen {
            member: Member::named(name),
            heartbeat: 0,
            age_s,
            load,
        }
    }

    fn ip(last: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, 0, last)
    }

    fn own(last: u8, pending: u64, clients: usize) -> Published {
        Published {
            address: ip(last),
            own: true,
            capacity_bps: Some(1_000_000_000),
            egress_bps: 5,
            pending_bytes: pending,
            clients,
        }
    }

    fn placed(last: u8, pending: u64, clients: usize) -> Published {
        Published {
            address: ip(last),
            pending_bytes: pending,
            clients,
            ..Published::default()
        }
    }

    #[test]
    fn the_other_live_members_own_links_with_their_capacity() {
        let mut v = View::alone("a");
        v.read(vec![
            row("a", 0.1, vec![own(1, 999, 9)]),
            // b placed 2 boots on its link, 1 on a's and 1 on c's.
            row(
                "b",
                0.1,
                vec![own(2, 200, 2), placed(1, 100, 1), placed(3, 50, 1)],
            ),
            row("c", 0.1, vec![own(3, 0, 0)]),
            // d is dead: its link is not offered, and what it placed does not count.
            row("d", 9.0, vec![own(4, 0, 0), placed(2, 700, 7)]),
        ]);
        let e = elsewhere(&v);
        let find = |last| e.iter().find(|e| e.address == ip(last)).copied();
        // a's own link is not offered as another's; what b placed on a's and c's links is
        // not read (each owner spreads its own boots).
        assert!(find(1).is_none());
        assert_eq!(find(2).unwrap().capacity_bps, Some(1_000_000_000));
        assert!(find(3).is_some());
        assert_eq!(e.len(), 2, "{e:?}");
        // d is dead: its link is not offered.
        assert!(find(4).is_none());
    }

    #[test]
    fn a_frozen_view_offers_no_other_link() {
        let mut v = View::alone("a");
        v.read(vec![
            row("a", 0.1, vec![]),
            row("b", 0.1, vec![own(2, 0, 0)]),
        ]);
        assert_eq!(elsewhere(&v).len(), 1);
        v.unreachable();
        assert!(elsewhere(&v).is_empty());
    }
}

//! The site's links as the DHCP owner of a client sees them when it places a boot anywhere
//! in the site (docs/site.md, "Which server answers whom"): policy over the view's rows,
//! plain data in and out. Each live member publishes its own links' capacity and egress, and
//! the boots it placed on any link (`steer::placement::Published`); this turns the others'
//! rows into `Elsewhere`, which `steer::placement` adds to its own links and its own boots.

use super::owners::View;
use crate::steer::choice::Load;
use crate::steer::placement::Elsewhere;

/// The other live members' links (capacity and egress as their member published them) and
/// what the other live members placed on every link, this member's included. Empty while
/// the view is frozen: a member whose heartbeat cannot be read may be gone, so a boot goes
/// on this member's own links only.
pub fn elsewhere(view: &View) -> Vec<Elsewhere> {
    if view.frozen() {
        return Vec::new();
    }
    let others: Vec<_> = view
        .seen()
        .iter()
        .filter(|s| s.member.name != view.me() && view.live().contains(&s.member.name))
        .collect();
    let mut out: Vec<Elsewhere> = Vec::new();
    let at = |out: &mut Vec<Elsewhere>, address| match out.iter().position(|e| e.address == address)
    {
        Some(i) => i,
        None => {
            out.push(Elsewhere {
                address,
                load: Load::default(),
                theirs: false,
            });
            out.len() - 1
        }
    };
    for s in &others {
        for p in &s.load {
            let i = at(&mut out, p.address);
            let e = &mut out[i];
            if p.own {
                e.theirs = true;
                e.load.capacity_bps = p.capacity_bps;
                e.load.egress_bps = p.egress_bps;
            }
            e.load.pending_bytes += p.pending_bytes;
            e.load.clients += p.clients;
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
    fn the_others_links_and_what_they_placed_everywhere() {
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
        // a's own row is not read back: its boots are counted by its own placement.
        let a = find(1).unwrap();
        assert!(!a.theirs);
        assert_eq!((a.load.pending_bytes, a.load.clients), (100, 1));
        let b = find(2).unwrap();
        assert!(b.theirs);
        assert_eq!((b.load.pending_bytes, b.load.clients), (200, 2));
        assert_eq!(b.load.capacity_bps, Some(1_000_000_000));
        let c = find(3).unwrap();
        assert!(c.theirs);
        assert_eq!(
            (c.load.pending_bytes, c.load.clients, c.load.egress_bps),
            (50, 1, 5)
        );
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

//! Fair shares across rooms behind uplinks, as a pure function of a round: a room (a DHCP
//! subnet with an `uplink`, docs/subnets.md) whose clients together want more than its uplink
//! carries gets the uplink's budget shared among them, weighted as on their links, whichever
//! server links they use; each link's plan then gives what those clients cannot take to its
//! other clients. Each connection is so capped by its link's share and by its room's uplink's
//! (a two-level weighted max-min). With no uplink, or a room that wants less than its uplink
//! carries, the links' plans are `fair_share`'s alone. `pacing` applies the caps.

use super::fair_share::{self, Link, MAX_BOOST, Plan, Seen, Weights};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// A room's uplink as a round sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Uplink {
    /// Its capacity, bits/s.
    pub capacity_bps: u64,
    /// How far the room's shares are raised above its budget's (`fair_share::trim`, kept by
    /// the pacer for rounds in which the room was bounded).
    pub boost: f64,
}

/// What a room's clients did in a round, and whether its uplink bounded them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RoomPlan {
    /// Its clients that sent something or had bytes waiting, on any link.
    pub clients: usize,
    /// Of them, those that wanted more than they got.
    pub wanting: usize,
    /// What its clients' connections carried together, bytes/s.
    pub carried: u64,
    /// One unit of weight's share of the uplink when the room was bounded (`None`: its
    /// clients wanted no more than the uplink carries, or one client alone was active).
    pub share: Option<u64>,
}

/// The caps of every link (`links`, with what their connections did, `seen`) for the next
/// round, each client's shares bounded by its room's uplink: `room_of` names a client's room
/// (an index into `uplinks`, `None`: a room without one). `headroom` is the round's
/// (`firmware::Firmware::headrooms`): firmware behind an uplink waits on it as on a server link.
pub fn plan(
    links: &[Link<'_>],
    seconds: f64,
    seen: &[Vec<Seen>],
    uplinks: &[Uplink],
    room_of: &dyn Fn(Ipv4Addr) -> Option<usize>,
    headroom: f64,
    weights: Weights,
) -> (Vec<Plan>, Vec<RoomPlan>) {
    let unbounded = |_: Ipv4Addr| None;
    let first: Vec<Plan> = links
        .iter()
        .zip(seen)
        .map(|(l, s)| fair_share::plan_bounded(*l, seconds, s, weights, &unbounded))
        .collect();
    let mut rooms = vec![RoomPlan::default(); uplinks.len()];
    // Per room, its active clients as each link planned them: (link, client, what it may
    // take there, its weight).
    let mut claims: Vec<Vec<(usize, Ipv4Addr, f64, f64)>> = vec![Vec::new(); uplinks.len()];
    let room = |c: Ipv4Addr| room_of(c).filter(|r| *r < uplinks.len());
    for (i, p) in first.iter().enumerate() {
        for &(client, demand) in &p.active {
            let Some(r) = room(client) else {
                continue;
            };
            // What its link lets it take: the sum of its connections' caps there.
            let cap: f64 = seen[i]
                .iter()
                .zip(&p.caps)
                .filter(|(s, _)| s.client == client)
                .map(|(_, c)| c.map_or(f64::INFINITY, |c| c as f64))
                .sum();
            let weight = p.weights.get(&client).copied().unwrap_or(1.0);
            claims[r].push((i, client, demand.min(cap), weight));
            rooms[r].clients += 1;
            rooms[r].wanting += usize::from(demand.is_infinite());
        }
        for s in &seen[i] {
            if let Some(r) = room(s.client) {
                rooms[r].carried += s.sent;
            }
        }
    }
    for r in &mut rooms {
        r.carried = (r.carried as f64 / seconds.max(1e-3)) as u64;
    }
    let mut bounds: BTreeMap<(usize, Ipv4Addr), f64> = BTreeMap::new();
    for (r, up) in uplinks.iter().enumerate() {
        let wanted: f64 = claims[r].iter().map(|c| c.2).sum();
        let budget = fair_share::budget(up.capacity_bps, headroom) * up.boost.clamp(1.0, MAX_BOOST);
        // As on a link, a client alone keeps the whole uplink (TCP finds its rate).
        if claims[r].len() <= 1 || wanted <= budget {
            continue;
        }
        let weighed: Vec<(f64, f64)> = claims[r].iter().map(|c| (c.2, c.3)).collect();
        let level = fair_share::weighted_level(budget, &weighed);
        rooms[r].share = Some(level as u64);
        for &(i, client, _, weight) in &claims[r] {
            bounds.insert((i, client), weight * level);
        }
    }
    if bounds.is_empty() {
        return (first, rooms);
    }
    let plans = links
        .iter()
        .zip(seen)
        .enumerate()
        .map(|(i, (l, s))| {
            fair_share::plan_bounded(*l, seconds, s, weights, &|c| bounds.get(&(i, c)).copied())
        })
        .collect();
    (plans, rooms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steer::fair_share::{Carries, EQUAL, HEADROOM, History, plan_weighted};

    const MBIT: u64 = 1_000_000;

    fn by_address(ip: Ipv4Addr) -> History {
        History {
            arrival: u32::from(ip).into(),
            received: 0,
        }
    }

    fn link(capacity_bps: u64, history: &dyn Fn(Ipv4Addr) -> History) -> Link<'_> {
        Link {
            capacity_bps: Some(capacity_bps),
            headroom: HEADROOM,
            boost: 1.0,
            history,
        }
    }

    /// A connection of `client` that wanted more (bytes waiting) during a one-second round.
    fn hungry(client: Ipv4Addr) -> Seen {
        Seen {
            client,
            carries: Carries::BlockRoot,
            sent: 1_000_000,
            unsent: 64 * 1024,
            cap: None,
        }
    }

    /// The seed's site: rooms A and B (10.77.1.0/24, 17 PCs each) beside the server, and a
    /// remote room (10.30.0.0/24) of `remote` PCs behind its uplink.
    fn local(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, 1, n)
    }
    fn remote(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 30, 0, n)
    }
    fn room_of(c: Ipv4Addr) -> Option<usize> {
        (c.octets()[1] == 30).then_some(0)
    }

    fn gigabit() -> Uplink {
        Uplink {
            capacity_bps: 1000 * MBIT,
            boost: 1.0,
        }
    }

    fn total(p: &Plan, of: impl Fn(Ipv4Addr) -> bool, seen: &[Seen]) -> f64 {
        seen.iter()
            .zip(&p.caps)
            .filter(|(s, _)| of(s.client))
            .map(|(_, c)| c.unwrap() as f64)
            .sum()
    }

    #[test]
    fn a_room_behind_a_gigabit_uplink_gets_at_most_the_uplink_and_the_rest_goes_to_the_others() {
        // Two 10 Gbit links, each with 17 local clients and 7 of the remote room's 14.
        let seen: Vec<Vec<Seen>> = (0..2u8)
            .map(|l| {
                (1..=17)
                    .map(|n| hungry(local(l * 17 + n)))
                    .chain((1..=7).map(|n| hungry(remote(l * 7 + n))))
                    .collect()
            })
            .collect();
        let links = [
            link(10_000 * MBIT, &by_address),
            link(10_000 * MBIT, &by_address),
        ];
        let (plans, rooms) = plan(&links, 1.0, &seen, &[gigabit()], &room_of, HEADROOM, EQUAL);
        let up = fair_share::budget(1000 * MBIT, HEADROOM);
        let b = fair_share::budget(10_000 * MBIT, HEADROOM);
        let is_remote = |c: Ipv4Addr| room_of(c).is_some();
        let room: f64 = plans
            .iter()
            .zip(&seen)
            .map(|(p, s)| total(p, is_remote, s))
            .sum();
        assert!((room - up).abs() <= 14.0, "{room} vs {up}");
        assert_eq!(rooms[0].share, Some((up / 14.0) as u64));
        assert_eq!((rooms[0].clients, rooms[0].wanting), (14, 14));
        // Each link's local clients share what the room's 7 there do not take.
        for (p, s) in plans.iter().zip(&seen) {
            let each = (b - 7.0 * up / 14.0) / 17.0;
            for (seen, cap) in s.iter().zip(&p.caps) {
                let want = if is_remote(seen.client) {
                    up / 14.0
                } else {
                    each
                };
                assert!(
                    (cap.unwrap() as f64 - want).abs() <= 2.0,
                    "{cap:?} vs {want}"
                );
            }
            let sum: f64 = p.caps.iter().flatten().map(|c| *c as f64).sum();
            assert!((sum - b).abs() <= 24.0, "{sum} vs {b}");
            // The room's clients do not count as wanting more of the link.
            assert_eq!(p.wanting, 17);
        }
        // Without the uplink, all 24 on a link share it alike: the room would take 14/24.
        let (plain, _) = plan(&links, 1.0, &seen, &[], &room_of, HEADROOM, EQUAL);
        let room: f64 = plain
            .iter()
            .zip(&seen)
            .map(|(p, s)| total(p, is_remote, s))
            .sum();
        assert!((room - 14.0 * b / 24.0).abs() <= 14.0, "{room}");
    }

    #[test]
    fn nothing_changes_without_an_uplink_or_when_the_room_wants_less() {
        let seen: Vec<Vec<Seen>> = vec![
            (1..=5)
                .map(|n| hungry(local(n)))
                .chain([hungry(remote(1)), hungry(remote(2))])
                .collect(),
        ];
        let links = [link(1000 * MBIT, &by_address)];
        let alone = plan_weighted(links[0], 1.0, &seen[0], fair_share::WEIGHTS);
        let (plans, rooms) = plan(
            &links,
            1.0,
            &seen,
            &[],
            &room_of,
            HEADROOM,
            fair_share::WEIGHTS,
        );
        assert_eq!(plans, std::slice::from_ref(&alone));
        assert!(rooms.is_empty());
        // A 10 Gbit uplink behind a 1 Gbit link never binds.
        let wide = Uplink {
            capacity_bps: 10_000 * MBIT,
            boost: 1.0,
        };
        let (plans, rooms) = plan(
            &links,
            1.0,
            &seen,
            &[wide],
            &room_of,
            HEADROOM,
            fair_share::WEIGHTS,
        );
        assert_eq!(plans, [alone]);
        assert_eq!((rooms[0].clients, rooms[0].share), (2, None));
        assert_eq!(rooms[0].carried, 2_000_000);
    }

    #[test]
    fn the_uplink_binds_a_room_whose_clients_are_alone_on_their_links() {
        // One remote client on each of two links: no link paces a lone client, but together
        // they would fill a 100 Mbit uplink twice over.
        let seen = vec![
            vec![hungry(remote(1))],
            vec![hungry(remote(2)), hungry(remote(2))],
        ];
        let links = [
            link(1000 * MBIT, &by_address),
            link(1000 * MBIT, &by_address),
        ];
        let narrow = Uplink {
            capacity_bps: 100 * MBIT,
            boost: 1.0,
        };
        let (plans, rooms) = plan(&links, 1.0, &seen, &[narrow], &room_of, HEADROOM, EQUAL);
        let half = fair_share::budget(100 * MBIT, HEADROOM) / 2.0;
        assert_eq!(plans[0].caps, [Some(half as u64)]);
        // A client's share is split among its connections.
        assert_eq!(plans[1].caps, [Some((half / 2.0) as u64); 2]);
        assert_eq!(plans[0].share, None);
        assert_eq!(rooms[0].share, Some(half as u64));
        // A lone client behind the uplink keeps it whole, as on a link.
        let (plans, rooms) = plan(
            &links[..1],
            1.0,
            &seen[..1],
            &[narrow],
            &room_of,
            HEADROOM,
            EQUAL,
        );
        assert_eq!((plans[0].caps.clone(), rooms[0].share), (vec![None], None));
    }

    #[test]
    fn the_uplink_is_shared_by_the_links_weights_and_its_boost() {
        // Remote 1 fetches boot files (weight 2 with `boot_first`), remote 2 reads its root.
        let boot = Seen {
            carries: Carries::BootFiles,
            ..hungry(remote(1))
        };
        let seen = vec![vec![boot, hungry(remote(2)), hungry(local(1))]];
        let links = [link(1000 * MBIT, &by_address)];
        let w = Weights {
            boot: 2.0,
            ahead: 1.0,
            behind: 0.0,
        };
        let up = Uplink {
            capacity_bps: 100 * MBIT,
            boost: 1.2,
        };
        let (plans, _) = plan(&links, 1.0, &seen, &[up], &room_of, HEADROOM, w);
        let budget = fair_share::budget(100 * MBIT, HEADROOM) * 1.2;
        let caps: Vec<u64> = plans[0].caps.iter().flatten().copied().collect();
        assert!(
            caps[0].abs_diff((budget * 2.0 / 3.0) as u64) <= 1,
            "{caps:?}"
        );
        assert!(caps[1].abs_diff((budget / 3.0) as u64) <= 1, "{caps:?}");
        let link = fair_share::budget(1000 * MBIT, HEADROOM);
        assert!(caps[2].abs_diff((link - budget) as u64) <= 2, "{caps:?}");
    }
}

//! Which of the server's links a client boots from, when the server has several NICs on the
//! clients' network (`server.links`, no bond). Plain data in, an index out; the state it is
//! computed from (who boots where, what each link sends) is `steer::placement`'.
//!
//! A link's load is the time it needs to send what it owes: the bytes its booting clients are
//! still expected to fetch, or, when more, what it is seen sending (measured egress over
//! `EGRESS_HORIZON_S`, which catches traffic the daemon did not assign, such as clients that
//! started before a restart), divided by its capacity. A new client goes to the link that
//! would finish soonest with its bytes added; ties go to the link with fewer clients, then to
//! the first. A client of a room behind an uplink (`choose_in_room`) draws from a link no
//! faster than the uplink gives: on each link, its room's bytes there take at least the time
//! the uplink needs to carry them, so the room's clients are not piled on one link expecting
//! more than the uplink gives, and the local clients' choice is unchanged.

use std::net::Ipv4Addr;

/// One of the server's links: the address clients are given, the interface holding it, and
/// its capacity in bits/s when the kernel or pools.yaml knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSpec {
    pub address: Ipv4Addr,
    pub device: String,
    pub capacity_bps: Option<u64>,
}

/// How far ahead a link's measured egress counts as load: a link sending at some rate is
/// expected to go on for this long.
pub const EGRESS_HORIZON_S: f64 = 5.0;

/// One link as the choice sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Load {
    /// What the link can send, in bits per second; `None` when unknown.
    pub capacity_bps: Option<u64>,
    /// Bytes its booting clients are still expected to fetch.
    pub pending_bytes: u64,
    /// What it sent lately, in bits per second.
    pub egress_bps: u64,
    /// Clients booting on it.
    pub clients: usize,
    /// Of `pending_bytes`, those owed to the clients of the room of the client being placed
    /// (`choose_in_room`; 0 otherwise).
    pub room_pending_bytes: u64,
    /// The link's address is on no interface (or the link is down): never chosen while another
    /// link is usable.
    pub unusable: bool,
}

/// The link a client expecting to fetch `expected` bytes should boot from. Links whose
/// capacity is unknown count as the mean of the known ones (all equal when none is known).
/// `links` must not be empty.
pub fn choose(links: &[Load], expected: u64) -> usize {
    choose_in_room(links, expected, None)
}

/// `choose` for a client of a room behind an uplink of `uplink_bps` (`None`: a client of no
/// such room, as `choose`): a link's score is also at least the time its room's bytes on it
/// (`room_pending_bytes`), with the client's, take at the smaller of the uplink's rate and
/// the link's.
pub fn choose_in_room(links: &[Load], expected: u64, uplink_bps: Option<u64>) -> usize {
    let known: Vec<u64> = links.iter().filter_map(|l| l.capacity_bps).collect();
    let fallback = if known.is_empty() {
        1e9
    } else {
        known.iter().sum::<u64>() as f64 / known.len() as f64
    };
    let all_unusable = links.iter().all(|l| l.unusable);
    let score = |l: &Load| {
        let owed = (l.pending_bytes.saturating_add(expected) as f64) * 8.0;
        let seen = l.egress_bps as f64 * EGRESS_HORIZON_S;
        let capacity = l.capacity_bps.map_or(fallback, |c| c.max(1) as f64);
        let room = match uplink_bps {
            Some(up) => {
                let mine = (l.room_pending_bytes.saturating_add(expected) as f64) * 8.0;
                mine / capacity.min(up.max(1) as f64)
            }
            None => 0.0,
        };
        (owed.max(seen) / capacity).max(room)
    };
    let mut best = 0;
    for (i, l) in links.iter().enumerate().skip(1) {
        let b = &links[best];
        let better = match (l.unusable && !all_unusable, b.unusable && !all_unusable) {
            (true, _) => false,
            (false, true) => true,
            (false, false) => {
                let (sl, sb) = (score(l), score(b));
                // Scores within a part in a million are a tie (float noise).
                if (sl - sb).abs() <= 1e-6 * sb.max(sl) {
                    l.clients < b.clients
                } else {
                    sl < sb
                }
            }
        };
        if better {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(capacity_mbit: u64, pending_mb: u64, clients: usize) -> Load {
        Load {
            capacity_bps: Some(capacity_mbit * 1_000_000),
            pending_bytes: pending_mb * 1_000_000,
            clients,
            ..Load::default()
        }
    }

    #[test]
    fn a_room_spreads_evenly_over_equal_links() {
        let mut links = vec![link(250, 0, 0); 4];
        let mut counts = [0; 4];
        for _ in 0..40 {
            let i = choose(&links, 88_000_000);
            links[i].pending_bytes += 88_000_000;
            links[i].clients += 1;
            counts[i] += 1;
        }
        assert_eq!(counts, [10; 4]);
    }

    #[test]
    fn heavier_clients_weigh_more_and_faster_links_take_more() {
        // One NFS client (88 MB) on link 0 weighs as much as two NBD clients (44 MB) on 1.
        let links = [link(250, 88, 1), link(250, 88, 2)];
        assert_eq!(
            choose(&links, 44_000_000),
            0,
            "equal bytes: fewer clients wins"
        );
        let links = [link(250, 100, 1), link(250, 88, 2)];
        assert_eq!(choose(&links, 44_000_000), 1);
        // A 1 Gbit/s link owing twice as much still finishes first.
        let links = [link(250, 50, 1), link(1000, 100, 2)];
        assert_eq!(choose(&links, 44_000_000), 1);
    }

    #[test]
    fn measured_egress_counts_when_it_exceeds_what_is_owed() {
        // Link 0 owes nothing it knows of but is sending 200 Mbit/s (clients from before a
        // restart): 125 MB over the horizon, more than link 1's 50 MB.
        let mut busy = link(250, 0, 0);
        busy.egress_bps = 200_000_000;
        assert_eq!(choose(&[busy, link(250, 50, 3)], 10_000_000), 1);
        // Egress that what is owed already explains adds nothing.
        let mut owed = link(250, 100, 1);
        owed.egress_bps = 100_000_000;
        assert_eq!(choose(&[owed, link(250, 90, 1)], 10_000_000), 1);
    }

    #[test]
    fn a_room_behind_an_uplink_is_not_piled_on_one_link() {
        // Two 10 Gbit links: link 0 owes 100 MB to 2 local clients, link 1 owes 60 MB, all of
        // it to the remote room's 10 clients. A local client goes to link 1, which finishes
        // first; a remote client behind a 1 Gbit uplink goes to link 0: on link 1 its room's
        // 60 MB and its own 6 MB would need 0.53 s of the uplink, more than link 0's 0.09 s.
        let mut links = [link(10_000, 100, 2), link(10_000, 60, 10)];
        links[1].room_pending_bytes = 60_000_000;
        assert_eq!(choose(&links, 6_000_000), 1);
        assert_eq!(choose_in_room(&links, 6_000_000, Some(1_000_000_000)), 0);
        // A room of 14 placed one by one behind 1 Gbit spreads evenly over two links, as
        // the local clients do; without an uplink, it would spread the same (equal links).
        let mut links = vec![link(10_000, 0, 0); 2];
        for _ in 0..14 {
            let i = choose_in_room(&links, 50_000_000, Some(1_000_000_000));
            links[i].pending_bytes += 50_000_000;
            links[i].room_pending_bytes += 50_000_000;
            links[i].clients += 1;
        }
        assert_eq!((links[0].clients, links[1].clients), (7, 7));
        // An uplink faster than the links changes nothing.
        let links = [link(100, 50, 1), link(100, 40, 8)];
        assert_eq!(
            choose_in_room(&links, 1, Some(10_000_000_000)),
            choose(&links, 1)
        );
    }

    #[test]
    fn unusable_and_unknown_links() {
        let mut down = link(250, 0, 0);
        down.unusable = true;
        assert_eq!(choose(&[down, link(250, 500, 9)], 1), 1);
        assert_eq!(choose(&[down, down], 1), 0, "nothing usable: the first");
        // Unknown capacity counts as the known mean.
        let unknown = Load {
            pending_bytes: 10_000_000,
            ..Load::default()
        };
        assert_eq!(choose(&[link(100, 20, 1), unknown], 1), 1);
        assert_eq!(choose(&[Load::default(); 3], 1), 0);
    }
}

//! Fair shares of a link, as a pure function of what each connection on it did in the last
//! round: the rate each may send at in the next one. The clients on a link (known by their
//! IPv4 address, so that one client's several connections split one share) get weighted
//! shares of the link's budget (`WEIGHTS`: clients fetching boot files first, in their order
//! of arrival; clients reading their root in blocks by how far they trail the link's leading
//! one, in file calls alike), and
//! what a client does not use goes to the others (max-min fairness); a client's share is split
//! among its connections the same way. While firmware may be waiting on a link (`headroom`,
//! which `firmware` says link by link), its budget is `HEADROOM` of the link's capacity, so
//! paced traffic leaves the link's queue nearly empty and what is not paced (a firmware's DHCP
//! and TFTP) passes at once; otherwise it is the link's whole capacity (`QUIET_HEADROOM`).
//! `pacing` observes the connections and applies the caps; docs/links.md says why
//! and what it costs.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// Share of a link's capacity given to paced TCP payload while firmware may be waiting for an
/// answer. A full segment (1448 bytes of payload) is a 1514-byte frame on a link's counters
/// and in a `tc` shaper, and 1538 bytes of Ethernet wire time (preamble, FCS, gap): 90% of the
/// capacity as payload is 94% of the counters' rate and 96% of the wire's. The rest is for
/// what is not paced (DHCP, TFTP, ACKs) and for what a round's changes let through before the
/// next round.
pub const HEADROOM: f64 = 0.90;

/// The share while no firmware waits on the link (`firmware`): 95% of the capacity as
/// payload is 99% of the counters' rate (the link full as a shaper counts it). Nothing then
/// waits on a timer behind the paced traffic, and the link's last tenth is worth 3-4% of a
/// room's boot time (BENCHMARKS.md, "Storm", sessions 19 and 20).
pub const QUIET_HEADROOM: f64 = 0.95;

/// A connection that sent this much of what its cap allowed during a round wants more: the
/// cap, not the client, held it back.
const FULL: f64 = 0.8;

/// A connection that sent something, but less than this much of what its cap allowed, while
/// bytes waited, was held back by its path (the client's own link, its receive window), not
/// by the cap: it wants what it sent, and the rest of its share goes to the others. The same
/// as `FULL`: a connection is held by its cap or by its path, and one that sent 60% of a cap
/// far above its own link's rate was counted wanting more until session 37, which left up to
/// a tenth of a link idle while rooms fetched their boot files. A connection still growing
/// into its cap keeps the cap (a cap is a share, not a demand), so calling it held by its path
/// only lends its unused part to the others for a round.
const PATH_HELD: f64 = FULL;

/// The lowest cap ever set (bytes/s), whatever the number of clients: below it TCP would
/// send a segment every few seconds.
pub const MIN_CAP: u64 = 16 * 1024;

/// How far the caps may be raised above the budget's shares (`trim`): what a round in which
/// every client did use its whole cap could put into the link's queue.
pub const MAX_BOOST: f64 = 1.25;

/// What one connection did during a round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seen {
    pub client: Ipv4Addr,
    pub carries: Carries,
    /// Bytes sent during the round.
    pub sent: u64,
    /// Bytes the server had written that were not yet sent when the round ended.
    pub unsent: u64,
    /// The cap in force during the round, bytes/s; `None` for none.
    pub cap: Option<u64>,
}

/// The caps for the next round.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Per connection, in the order given: its cap in bytes/s, `None` for none.
    pub caps: Vec<Option<u64>>,
    /// Clients that sent something or had bytes waiting, with their demands: bytes/s sent, or
    /// infinite when they wanted more (what `rebalance` weighs).
    pub active: Vec<(Ipv4Addr, f64)>,
    /// Clients that wanted more than they got.
    pub wanting: usize,
    /// One client's share (bytes/s) when the link is paced.
    pub share: Option<u64>,
    /// What the link's connections carried during the round, bytes/s.
    pub carried: u64,
    /// The active clients' weights when the link is paced (empty when it is not).
    pub weights: BTreeMap<Ipv4Addr, f64>,
}

/// What the pacer remembers of a client since it arrived (`pacing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct History {
    /// Its order of arrival among the clients (smaller came first).
    pub arrival: u64,
    /// Bytes sent to it on paced connections since it arrived.
    pub received: u64,
}

/// What a connection carries, as the service that accepted it knows: the boot files a
/// firmware or iPXE fetches (HTTP: the script, kernel and initrd), or a root, read in blocks
/// (NBD) or in file calls (NFS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carries {
    BootFiles,
    /// A root read in blocks: its reads are large and back to back, so its boot is held by
    /// its bytes, and a reader that trails the link's leading one catches up
    /// (`catch_up_weight`).
    BlockRoot,
    /// A root read in file calls: thousands of small calls, each waited for, so its boot is
    /// held by their round trips and its think times, not its bytes. It weighs 1 whatever it
    /// trails: held level with the leader's bytes, a room's NFS clients reach the same
    /// think-bound stretch of their boot together and the link empties (session 21's model
    /// found no catch-up best for NFS; in session 38 two storms of 20 NFS clients
    /// fell into that lock-step, every client ending within 0.04 s of the others, and booted
    /// in 23.8 and 25.6 s where the others took 20-21 s; docs/links.md).
    FileRoot,
}

/// How the clients held back on a full link are weighed against each other.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    /// A client fetching boot files weighs at least this many times a root's base weight...
    pub boot: f64,
    /// ...and, among the first `AHEAD_RANKS` active clients on the link by their order of
    /// arrival, `ahead` times more than the next one (`arrival_weight`).
    pub ahead: f64,
    /// A client reading its root in blocks weighs 1, plus `behind` times the share by which
    /// the bytes it received trail those of the link's leading block reader
    /// (`catch_up_weight`); one reading it in file calls weighs 1 (`Carries::FileRoot`).
    pub behind: f64,
}

/// Boot files first, in the order of arrival; roots read in blocks by how far behind they are,
/// roots read in file calls alike (`Carries::FileRoot`). A room that
/// powers on together would otherwise fetch its kernels in lock-step, think in the same
/// seconds while the link idles, and then read its roots all at once. Boot files weighed by
/// arrival, each of the first clients on a link 1.5 times the next, let them finish their
/// kernels early and think while later ones still download, so the roots' reads start spread
/// out; weighing boot files above roots keeps the latest clients' kernels (the room's longest
/// remaining path) from waiting behind earlier clients' roots; and a root reader that trails
/// the others (a client that arrived late, with the least slack) weighs up to three times the
/// leader, so the room's last boots come together. Chosen on the storm (BENCHMARKS.md,
/// session 20) against session 19's linear stagger of 5 to 1 and equal roots: 40 clients
/// booted 3% sooner over NBD and NFS alike, the slowest client 1.01-1.07x the median (the
/// bound this project holds to is 1.3x).
pub const WEIGHTS: Weights = Weights {
    boot: 2.0,
    ahead: 1.5,
    behind: 2.0,
};

/// Every client alike: plain max-min fair shares.
pub const EQUAL: Weights = Weights {
    boot: 1.0,
    ahead: 1.0,
    behind: 0.0,
};

/// How many of a link's active clients, in their order of arrival, are weighed ahead of the
/// next: the front of the queue. A link of ten clients (the storm's 40 on four links) is
/// ordered whole; in a larger room the front moves up as its first clients finish, the rest
/// share alike, and none is held far below the others for long. Ordering every client of a
/// 50-client link (the storm's 200, each weighing 1.5 times the next, up to 657 times the
/// latest) held the latest ones' kernels back for half a minute and booted that room 20% later
/// (BENCHMARKS.md, session 20).
pub const AHEAD_RANKS: usize = 9;

/// The arrival weight of the client at `rank` (0: came first) among a link's active clients:
/// `ahead` to the power of how far inside the front of the queue it is (`AHEAD_RANKS` for the
/// first, 0 from rank `AHEAD_RANKS` on).
pub fn arrival_weight(rank: usize, ahead: f64) -> f64 {
    ahead.powi(AHEAD_RANKS.saturating_sub(rank) as i32)
}

/// The weight of a root reader that received `received` bytes when the link's leading root
/// reader received `leader`: 1 for the leader, up to `1 + behind` for one that has nothing.
pub fn catch_up_weight(received: u64, leader: u64, behind: f64) -> f64 {
    if leader == 0 {
        return 1.0;
    }
    let trail = leader.saturating_sub(received) as f64 / leader as f64;
    1.0 + behind * trail
}

/// The cap a new connection of a client starts at on a link being paced, whose unit share
/// (a root's weight) is `share` and on which `active` clients were active in the last round:
/// the cap its client's connections last had (`last`), else a new client's share as it weighs
/// arriving behind those (`WEIGHTS`: boot files at their weight for rank `active`, a root at
/// 1). A connection started far below its share stalls: on a LAN, Linux TCP sends 64 KiB at a
/// time whatever its pacing rate and waits the burst's length at the rate in force when it
/// left, so a burst at 1 Mbit/s holds it for half a second after its cap is raised
/// (docs/links.md, "Why a low cap stalls"). Until session 38 a new client's boot files weighed
/// as the rank behind the front of the queue (2) whatever the link's clients: 2 Mbit/s on a
/// link of five, where it weighs 10.
pub fn first_cap(share: u64, last: Option<u64>, carries: Carries, active: u64) -> u64 {
    let weight = match carries {
        Carries::BootFiles => {
            let rank = usize::try_from(active).unwrap_or(usize::MAX);
            WEIGHTS.boot * arrival_weight(rank, WEIGHTS.ahead)
        }
        Carries::BlockRoot | Carries::FileRoot => 1.0,
    };
    last.unwrap_or((share as f64 * weight) as u64).max(MIN_CAP)
}

/// What an active client of a paced link reads, for its weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reads {
    /// Boot files: a connection of that kind moved bytes in the round.
    BootFiles,
    /// Its root, in blocks (a `Carries::BlockRoot` connection).
    Blocks,
    /// Its root, in file calls.
    Files,
}

/// What a round's plan is given besides the connections.
#[derive(Clone, Copy)]
pub struct Link<'a> {
    /// The link's capacity, bits/s (`None`: unknown).
    pub capacity_bps: Option<u64>,
    /// The share of it the paced traffic may use (`headroom`).
    pub headroom: f64,
    /// How far the shares are raised above the budget's (`trim`).
    pub boost: f64,
    /// What the pacer remembers of each client.
    pub history: &'a dyn Fn(Ipv4Addr) -> History,
}

/// The caps for a link after a round of `seconds`: shares of its budget (`budget`) times its
/// boost, weighted by `WEIGHTS`. Nothing is paced on a link of unknown capacity, nor while
/// at most one client is active: a client alone keeps the whole link (fairness has nothing
/// to do, and the headroom would cost it a tenth).
pub fn plan(link: Link<'_>, seconds: f64, conns: &[Seen]) -> Plan {
    plan_weighted(link, seconds, conns, WEIGHTS)
}

/// `plan` with weights of its own (`EQUAL`: plain max-min fairness).
pub fn plan_weighted(link: Link<'_>, seconds: f64, conns: &[Seen], weights: Weights) -> Plan {
    plan_bounded(link, seconds, conns, weights, &|_| None)
}

/// `plan_weighted` with each client's share on the link bounded by `bound` (bytes/s, `None`:
/// no bound), what its room's uplink gives it (`rooms`): a bounded client wants no more than
/// its bound, so what it cannot take goes to the others, and its connections are capped at
/// it even on a link that is not paced.
pub fn plan_bounded(
    link: Link<'_>,
    seconds: f64,
    conns: &[Seen],
    weights: Weights,
    bound: &dyn Fn(Ipv4Addr) -> Option<f64>,
) -> Plan {
    let mut clients: BTreeMap<Ipv4Addr, Vec<usize>> = BTreeMap::new();
    for (i, c) in conns.iter().enumerate() {
        clients.entry(c.client).or_default().push(i);
    }
    let demands: Vec<f64> = conns.iter().map(|c| demand(c, seconds)).collect();
    // A client's demand: infinite if any of its connections wants more, else their sum.
    let active: Vec<(Ipv4Addr, f64)> = clients
        .iter()
        .filter(|(_, m)| m.iter().any(|&i| conns[i].sent > 0 || conns[i].unsent > 0))
        .map(|(c, m)| {
            let wants: f64 = m.iter().map(|&i| demands[i]).sum();
            (*c, bound(*c).map_or(wants, |b| wants.min(b)))
        })
        .collect();
    let wanting = active.iter().filter(|(_, d)| d.is_infinite()).count();
    let carried = conns.iter().map(|c| c.sent).sum::<u64>() as f64 / seconds.max(1e-3);
    let unpaced = Plan {
        caps: vec![None; conns.len()],
        active,
        wanting,
        share: None,
        carried: carried as u64,
        weights: BTreeMap::new(),
    };
    let capacity = match link.capacity_bps.filter(|c| *c > 0) {
        Some(c) if unpaced.active.len() > 1 => c,
        // Not paced, but a bounded client is held to its bound.
        _ => {
            let mut caps = unpaced.caps.clone();
            for (client, members) in &clients {
                let Some(b) = bound(*client) else {
                    continue;
                };
                let mine: Vec<f64> = members.iter().map(|&i| demands[i]).collect();
                let each = level(b, &mine);
                for &i in members {
                    caps[i] = Some((each as u64).max(MIN_CAP));
                }
            }
            return Plan { caps, ..unpaced };
        }
    };
    // The active clients' weights: boot files by their order of arrival, roots read in
    // blocks by how far they trail the leading block reader, roots read in file calls alike.
    // A client fetches boot files while such a connection of its moves bytes.
    let mut by_arrival: Vec<(History, Ipv4Addr, Reads)> = unpaced
        .active
        .iter()
        .map(|(c, _)| {
            let moving = |kind| {
                clients[c]
                    .iter()
                    .any(|&i| conns[i].carries == kind && demands[i] > 0.0)
            };
            let reads = if moving(Carries::BootFiles) {
                Reads::BootFiles
            } else if clients[c]
                .iter()
                .any(|&i| conns[i].carries == Carries::BlockRoot)
            {
                Reads::Blocks
            } else {
                Reads::Files
            };
            ((link.history)(*c), *c, reads)
        })
        .collect();
    by_arrival.sort_by_key(|(h, c, _)| (h.arrival, *c));
    let leader = by_arrival
        .iter()
        .filter(|(_, _, reads)| *reads == Reads::Blocks)
        .map(|(h, _, _)| h.received)
        .max()
        .unwrap_or(0);
    let weights: BTreeMap<Ipv4Addr, f64> = by_arrival
        .iter()
        .enumerate()
        .map(|(rank, (h, c, reads))| {
            let w = match reads {
                Reads::BootFiles => weights.boot * arrival_weight(rank, weights.ahead),
                Reads::Blocks => catch_up_weight(h.received, leader, weights.behind),
                Reads::Files => 1.0,
            };
            (*c, w)
        })
        .collect();
    let claims: Vec<(f64, f64)> = unpaced
        .active
        .iter()
        .map(|(c, d)| (*d, weights[c]))
        .collect();
    let spend = budget(capacity, link.headroom) * link.boost.clamp(1.0, MAX_BOOST);
    let share = weighted_level(spend, &claims);
    let mut caps = vec![None; conns.len()];
    for (client, members) in &clients {
        let mine: Vec<f64> = members.iter().map(|&i| demands[i]).collect();
        let mut theirs = share * weights.get(client).copied().unwrap_or(1.0);
        if let Some(b) = bound(*client) {
            theirs = theirs.min(b);
        }
        let each = level(theirs, &mine);
        for &i in members {
            caps[i] = Some((each as u64).max(MIN_CAP));
        }
    }
    Plan {
        caps,
        share: Some(share as u64),
        weights,
        ..unpaced
    }
}

/// What the paced connections of a link of `capacity_bps` may send together, bytes/s, at
/// `headroom`.
pub fn budget(capacity_bps: u64, headroom: f64) -> f64 {
    capacity_bps as f64 / 8.0 * headroom
}

/// The boost for the next round, after a paced round that carried `carried` bytes/s against
/// a `budget` with `wanting` clients held back. Connections held back in a round do not all
/// send the whole of their caps (a reply ends and the next request is awaited), so caps that
/// add up to the budget leave the link short of it. While clients want more, the boost moves
/// by half the gap between what the link carried and its budget, up when it carried less and
/// down when it carried more. With nobody held back there is nothing to learn and it stays. It
/// stays between 1 and `MAX_BOOST`. Halving both ways, not falling at once after a round that
/// carried more: what a 50 ms round carried is noisy (bursts, ACKs, a reply's end), and a boost
/// that falls at once on every high reading and climbs back by halves settles below the level
/// that fills the link (20 clients on two links: 94.1% against 94.9% of capacity while
/// waited for, over six storms each; docs/links.md).
pub fn trim(boost: f64, carried: f64, budget: f64, wanting: usize) -> f64 {
    if wanting == 0 {
        return boost.clamp(1.0, MAX_BOOST);
    }
    let gap = budget / carried.max(1.0);
    (boost * (1.0 + (gap - 1.0) / 2.0)).clamp(1.0, MAX_BOOST)
}

/// A connection's demand in bytes/s: infinite when it wanted more (it used nearly all its
/// cap, or bytes were waiting that the cap held back), else what it sent. Bytes waiting
/// under a cap it sent some but not most of were held back by its path (`PATH_HELD`).
fn demand(c: &Seen, seconds: f64) -> f64 {
    let rate = c.sent as f64 / seconds.max(1e-3);
    let full = c.cap.is_some_and(|cap| rate >= FULL * cap as f64);
    let path_held = c
        .cap
        .is_some_and(|cap| rate > 0.0 && rate < PATH_HELD * cap as f64);
    if full || (c.unsent > 0 && !path_held) {
        f64::INFINITY
    } else {
        rate
    }
}

/// The water level of max-min fairness: the cap that, given to every claimant, spends
/// `budget` on those who want more once the others have what they use. When every demand
/// fits, what is left over is split evenly on top of the largest demand, so the caps stay
/// near the budget's size, and meet the fair level without a jump as demand grows into it.
pub fn level(budget: f64, demands: &[f64]) -> f64 {
    let claims: Vec<(f64, f64)> = demands.iter().map(|d| (*d, 1.0)).collect();
    weighted_level(budget, &claims)
}

/// `level` for claimants of different weights, `(demand, weight)`: the level λ at which each
/// gets `min(demand, weight × λ)` and together they spend `budget`; when all fit, the spare
/// goes on top in proportion to the weights.
pub fn weighted_level(budget: f64, claims: &[(f64, f64)]) -> f64 {
    let mut sorted: Vec<(f64, f64)> = claims
        .iter()
        .map(|&(d, w)| (d / w.max(1e-9), w.max(1e-9)))
        .collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut left = budget;
    let mut weight: f64 = sorted.iter().map(|(_, w)| w).sum();
    for (per_weight, w) in &sorted {
        let fair = left / weight;
        if *per_weight >= fair {
            return fair;
        }
        left -= per_weight * w;
        weight -= w;
    }
    let total: f64 = sorted.iter().map(|(_, w)| w).sum();
    sorted.last().map_or(0.0, |(d, _)| *d) + left / total.max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MBIT: u64 = 1_000_000;

    /// Equal shares, at `HEADROOM`, clients arriving in address order: what most tests check.
    fn plan(capacity: Option<u64>, seconds: f64, conns: &[Seen], boost: f64) -> Plan {
        plan_weighted(link(capacity, boost, &by_address), seconds, conns, EQUAL)
    }

    fn link<'a>(
        capacity_bps: Option<u64>,
        boost: f64,
        history: &'a dyn Fn(Ipv4Addr) -> History,
    ) -> Link<'a> {
        Link {
            capacity_bps,
            headroom: HEADROOM,
            boost,
            history,
        }
    }

    /// The budget at `HEADROOM`.
    fn budget(capacity_bps: u64) -> f64 {
        super::budget(capacity_bps, HEADROOM)
    }

    /// Boot files weighed by arrival, each client `ahead` times the next, weighing as much
    /// as roots (the order alone).
    fn boot_first(ahead: f64) -> Weights {
        Weights {
            boot: 1.0,
            ahead,
            behind: 0.0,
        }
    }

    /// Clients arrive in address order and have received nothing.
    fn by_address(ip: Ipv4Addr) -> History {
        History {
            arrival: u32::from(ip).into(),
            received: 0,
        }
    }

    fn ip(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, 0, n)
    }

    /// A connection of client `n` that wanted more (bytes waiting) during a one-second round.
    fn hungry(n: u8) -> Seen {
        Seen {
            client: ip(n),
            carries: Carries::BootFiles,
            sent: 1_000_000,
            unsent: 64 * 1024,
            cap: None,
        }
    }

    /// A connection of client `n` that sent `sent` bytes in a one-second round under `cap`
    /// and had nothing left.
    fn using(n: u8, sent: u64, cap: Option<u64>) -> Seen {
        Seen {
            client: ip(n),
            carries: Carries::BootFiles,
            sent,
            unsent: 0,
            cap,
        }
    }

    fn cap(bytes: f64) -> Option<u64> {
        Some(bytes as u64)
    }

    /// Caps equal to the byte (float sums round either way).
    #[track_caller]
    fn assert_caps(got: &[Option<u64>], want: &[Option<u64>]) {
        let near = |g: &Option<u64>, w: &Option<u64>| match (g, w) {
            (Some(g), Some(w)) => g.abs_diff(*w) <= 1,
            (g, w) => g == w,
        };
        assert!(
            got.len() == want.len() && got.iter().zip(want).all(|(g, w)| near(g, w)),
            "{got:?} vs {want:?}"
        );
    }

    #[test]
    fn clients_who_all_want_more_share_the_budget_equally() {
        let conns: Vec<Seen> = (1..=4).map(hungry).collect();
        let p = plan(Some(100 * MBIT), 1.0, &conns, 1.0);
        let each = budget(100 * MBIT) / 4.0;
        assert_caps(&p.caps, &[cap(each); 4]);
        assert_caps(&[p.share], &[cap(each)]);
        assert_eq!((p.active.len(), p.wanting), (4, 4));
        // The headroom: together they are held to 90% of the link, as payload.
        let sum: u64 = p.caps.iter().flatten().sum();
        assert!(sum as f64 <= 100e6 / 8.0 * HEADROOM, "{sum}");
        assert!(sum as f64 >= 100e6 / 8.0 * HEADROOM - 4.0, "{sum}");
    }

    #[test]
    fn what_a_client_does_not_use_goes_to_the_others() {
        let b = budget(100 * MBIT);
        // Client 3 used a tenth of the budget (well under its cap) and had nothing waiting.
        let conns = [
            hungry(1),
            hungry(2),
            using(3, (b / 10.0) as u64, cap(b / 3.0)),
        ];
        let p = plan(Some(100 * MBIT), 1.0, &conns, 1.0);
        let level = (b - b / 10.0) / 2.0;
        assert_caps(&[p.share], &[cap(level)]);
        // Everyone is capped at the level; the light client stays under it by itself.
        assert_caps(&p.caps, &[cap(level); 3]);
        assert_eq!((p.active.len(), p.wanting), (3, 2));
    }

    #[test]
    fn a_connection_that_used_its_whole_cap_counts_as_wanting_more() {
        let b = budget(100 * MBIT);
        // Nothing waiting at the round's end, but 90% of its cap sent: the cap held it back.
        let conns = [hungry(1), using(2, (b / 2.0 * 0.9) as u64, cap(b / 2.0))];
        let p = plan(Some(100 * MBIT), 1.0, &conns, 1.0);
        assert_eq!(p.wanting, 2);
        assert_caps(&p.caps, &[cap(b / 2.0); 2]);
    }

    #[test]
    fn one_clients_connections_split_its_share() {
        let b = budget(1000 * MBIT);
        // Client 1 has three connections wanting more, client 2 one: equal shares per client.
        let conns = [hungry(1), hungry(1), hungry(1), hungry(2)];
        let p = plan(Some(1000 * MBIT), 1.0, &conns, 1.0);
        assert_eq!(p.active.len(), 2);
        assert_caps(&[p.share], &[cap(b / 2.0)]);
        assert_caps(
            &p.caps,
            &[cap(b / 6.0), cap(b / 6.0), cap(b / 6.0), cap(b / 2.0)],
        );
        // An idle connection of a client leaves the client's share to its busy one.
        let conns = [hungry(1), using(1, 0, None), hungry(2)];
        let p = plan(Some(1000 * MBIT), 1.0, &conns, 1.0);
        assert_caps(&p.caps, &[cap(b / 2.0); 3]);
    }

    #[test]
    fn a_lone_client_and_a_link_of_unknown_capacity_are_not_paced() {
        // One client, however many connections, keeps the whole link.
        let p = plan(Some(100 * MBIT), 1.0, &[hungry(1), hungry(1)], 1.0);
        assert_eq!(p.caps, vec![None, None]);
        assert_eq!((p.active.len(), p.share), (1, None));
        // Clients that are connected but sent nothing are not competing.
        let idle = using(2, 0, None);
        let p = plan(
            Some(100 * MBIT),
            1.0,
            &[hungry(1), idle, using(3, 0, cap(1e6))],
            1.0,
        );
        assert_eq!(p.caps, vec![None; 3]);
        assert_eq!(p.active.len(), 1);
        // Unknown capacity (loopback, a veth without server.link_speeds): never paced.
        let conns: Vec<Seen> = (1..=8).map(hungry).collect();
        for unknown in [None, Some(0)] {
            let p = plan(unknown, 1.0, &conns, 1.0);
            assert_eq!(p.caps, vec![None; 8]);
            assert_eq!((p.active.len(), p.wanting, p.share), (8, 8, None));
        }
    }

    #[test]
    fn on_a_link_with_room_the_spare_goes_on_top_of_the_largest_demand() {
        let b = budget(100 * MBIT);
        // Two light clients using a fifth of the budget each, under caps they did not fill.
        let conns = [
            using(1, (b / 5.0) as u64, cap(b)),
            using(2, (b / 10.0) as u64, cap(b)),
        ];
        let p = plan(Some(100 * MBIT), 1.0, &conns, 1.0);
        assert_eq!(p.wanting, 0);
        let spare = b - b / 5.0 - b / 10.0;
        let want = b / 5.0 + spare / 2.0;
        let got = p.share.unwrap() as f64;
        assert!((got - want).abs() <= 1.0, "{got} vs {want}");
        // Equal demands: the caps add up to the budget, whatever the load.
        for n in [2u8, 5, 40] {
            let conns: Vec<Seen> = (1..=n).map(|i| using(i, 1000, cap(b))).collect();
            let p = plan(Some(100 * MBIT), 1.0, &conns, 1.0);
            let sum: u64 = p.caps.iter().flatten().sum();
            assert!((sum as f64 - b).abs() <= n as f64, "{n}: {sum} vs {b}");
        }
    }

    #[test]
    fn the_level_is_max_min_fair() {
        let inf = f64::INFINITY;
        // Demands that all fit the budget's fair share are met; the rest share what is left.
        assert_eq!(level(100.0, &[10.0, inf, 20.0, inf]), 35.0);
        assert_eq!(level(100.0, &[inf, inf, inf, inf]), 25.0);
        // A demand just at the fair share is met exactly.
        assert_eq!(level(90.0, &[30.0, inf, inf]), 30.0);
        // All fit: largest demand plus an even part of the spare.
        assert_eq!(level(100.0, &[10.0, 30.0]), 30.0 + 60.0 / 2.0);
        assert_eq!(level(100.0, &[]), 100.0);
    }

    #[test]
    fn boot_files_are_weighed_by_arrival() {
        let b = budget(100 * MBIT);
        // Four clients wanting more: weights 8, 4, 2 and 1 (ahead 2) in their order of
        // arrival (client 4 came first), the budget spent whole.
        let conns: Vec<Seen> = (1..=4).map(hungry).collect();
        let first = |ip: Ipv4Addr| History {
            arrival: 10 - u64::from(ip.octets()[3]),
            received: 0,
        };
        let p = plan_weighted(
            link(Some(100 * MBIT), 1.0, &first),
            1.0,
            &conns,
            boot_first(2.0),
        );
        let base = b / 15.0;
        assert_caps(
            &p.caps,
            &[cap(base), cap(base * 2.0), cap(base * 4.0), cap(base * 8.0)],
        );
        // The share is the level of one unit of weight (a root's): the latest weighs 2^6.
        assert_caps(&[p.share], &[cap(base / arrival_weight(3, 2.0))]);
        let sum: u64 = p.caps.iter().flatten().sum();
        assert!((sum as f64 - b).abs() <= 4.0, "{sum} vs {b}");
        // A light client's unused part goes to the others, still by weight; its own cap is
        // its weighted share, which it does not fill.
        let conns = [
            hungry(1),
            hungry(2),
            using(3, (b / 10.0) as u64, cap(b / 3.0)),
        ];
        let p = plan_weighted(
            link(Some(100 * MBIT), 1.0, &by_address),
            1.0,
            &conns,
            boot_first(2.0),
        );
        let base = (b - b / 10.0) / (4.0 + 2.0);
        assert_caps(&p.caps, &[cap(base * 4.0), cap(base * 2.0), cap(base)]);
        // `ahead` times the next one's inside the front of the queue; alike behind it.
        let most = 1.5f64.powi(AHEAD_RANKS as i32);
        assert_eq!(arrival_weight(0, 1.5), most);
        assert_eq!(arrival_weight(1, 1.5) * 1.5, most);
        assert_eq!(arrival_weight(AHEAD_RANKS - 1, 1.5), 1.5);
        assert_eq!(arrival_weight(AHEAD_RANKS, 1.5), 1.0);
        assert_eq!(arrival_weight(199, 1.5), 1.0);
    }

    #[test]
    fn a_client_held_back_by_its_own_path_leaves_its_share_to_the_others() {
        let b = budget(100 * MBIT);
        // Client 1 had bytes waiting but sent only a fifth of its cap of half the budget:
        // its own link held it, not the cap. It wants what it sent; client 2 gets the rest.
        let slow = Seen {
            sent: (b / 10.0) as u64,
            cap: cap(b / 2.0),
            ..hungry(1)
        };
        let p = plan(Some(100 * MBIT), 1.0, &[slow, hungry(2)], 1.0);
        assert_eq!(p.wanting, 1);
        assert_caps(&[p.share], &[cap(b - b / 10.0)]);
        // One that sent nothing under its cap is waiting for its turn, not held by its path.
        let stalled = Seen { sent: 0, ..slow };
        let p = plan(Some(100 * MBIT), 1.0, &[stalled, hungry(2)], 1.0);
        assert_eq!(p.wanting, 2);
        assert_caps(&p.caps, &[cap(b / 2.0); 2]);
        // One that sent 60% of its cap was held by its path too (its own link ran at 60% of a
        // cap above it); it keeps its cap, and lends the rest for the round.
        let most = Seen {
            sent: (b / 2.0 * 0.6) as u64,
            ..slow
        };
        let p = plan(Some(100 * MBIT), 1.0, &[most, hungry(2)], 1.0);
        assert_eq!(p.wanting, 1);
        assert_caps(&[p.caps[1]], &[cap(b - b * 0.3)]);
        // One that sent 80% of it, or more, was held by the cap: it wants more.
        let capped = Seen {
            sent: (b / 2.0 * 0.8) as u64,
            ..slow
        };
        let p = plan(Some(100 * MBIT), 1.0, &[capped, hungry(2)], 1.0);
        assert_eq!(p.wanting, 2);
    }

    #[test]
    fn boot_files_come_first_and_trailing_roots_catch_up() {
        let b = budget(100 * MBIT);
        let root = |n| Seen {
            carries: Carries::BlockRoot,
            ..hungry(n)
        };
        // Client 1 came first and fetches boot files; 2 and 3 read their roots and have
        // received as much. With `WEIGHTS`, 1 weighs 2 x 1.5^9 and each root 1.
        let conns = [hungry(1), root(2), root(3)];
        let w =
            |p: &[Seen]| plan_weighted(link(Some(100 * MBIT), 1.0, &by_address), 1.0, p, WEIGHTS);
        let p = w(&conns);
        let first = 2.0 * arrival_weight(0, 1.5);
        let all = first + 2.0;
        assert_caps(&p.caps, &[cap(b * first / all), cap(b / all), cap(b / all)]);
        // The boot files of a client behind the front of the queue still weigh twice a root
        // read by one that came first.
        let conns: Vec<Seen> = (10..10 + AHEAD_RANKS as u8)
            .map(root)
            .chain([hungry(200)])
            .collect();
        let p = w(&conns);
        let each = b / (AHEAD_RANKS as f64 + 2.0);
        assert_caps(&p.caps[AHEAD_RANKS..], &[cap(2.0 * each)]);
        assert_caps(&p.caps[..1], &[cap(each)]);
        // A client counts as fetching boot files only while that connection moves bytes: an
        // idle HTTP connection (iPXE's, left open) beside a root read weighs as a root.
        let idle_http = using(1, 0, None);
        let p = w(&[idle_http, root(1), root(2)]);
        assert_caps(&p.caps[1..], &[cap(b / 2.0), cap(b / 2.0)]);
        // A root reader that received a quarter of the leader's bytes weighs 1 + 2 x 3/4.
        let received = |a: Ipv4Addr| History {
            arrival: u32::from(a).into(),
            received: if a == ip(1) { 40 } else { 10 },
        };
        let p = plan_weighted(
            link(Some(100 * MBIT), 1.0, &received),
            1.0,
            &[root(1), root(2)],
            WEIGHTS,
        );
        assert_caps(&p.caps, &[cap(b / 3.5), cap(b * 2.5 / 3.5)]);
        assert_eq!(catch_up_weight(0, 0, 2.0), 1.0);
        assert_eq!(catch_up_weight(0, 100, 2.0), 3.0);
        assert_eq!(catch_up_weight(100, 100, 2.0), 1.0);
        // A root read in file calls (NFS) weighs 1 however far it trails, and a block
        // reader's leader is the leading block reader: an NFS client that received more
        // counts for nothing.
        let files = |n| Seen {
            carries: Carries::FileRoot,
            ..hungry(n)
        };
        let p = plan_weighted(
            link(Some(100 * MBIT), 1.0, &received),
            1.0,
            &[files(1), files(2)],
            WEIGHTS,
        );
        assert_caps(&p.caps, &[cap(b / 2.0), cap(b / 2.0)]);
        let p = plan_weighted(
            link(Some(100 * MBIT), 1.0, &received),
            1.0,
            &[files(1), root(2), root(3)],
            WEIGHTS,
        );
        assert_caps(&p.caps, &[cap(b / 3.0), cap(b / 3.0), cap(b / 3.0)]);
        // `EQUAL` ignores all of it.
        let conns = [hungry(1), root(2)];
        let p = plan_weighted(link(Some(100 * MBIT), 1.0, &received), 1.0, &conns, EQUAL);
        assert_caps(&p.caps, &[cap(b / 2.0), cap(b / 2.0)]);
    }

    #[test]
    fn the_headroom_is_kept_while_firmware_may_wait() {
        // The quiet link is full as a shaper counts frames, and no more: 1448 bytes of payload
        // in a 1514-byte frame.
        let frames = QUIET_HEADROOM * 1514.0 / 1448.0;
        assert!((0.98..=1.0).contains(&frames), "{frames}");
        // The budget follows the headroom.
        let quiet = super::budget(100 * MBIT, QUIET_HEADROOM);
        assert!(quiet > budget(100 * MBIT));
        let conns: Vec<Seen> = (1..=4).map(hungry).collect();
        let l = Link {
            headroom: QUIET_HEADROOM,
            ..link(Some(100 * MBIT), 1.0, &by_address)
        };
        let p = plan_weighted(l, 1.0, &conns, EQUAL);
        assert_caps(&p.caps, &[cap(quiet / 4.0); 4]);
    }

    #[test]
    fn weighted_levels_meet_small_demands_first() {
        let inf = f64::INFINITY;
        // Weights 2 and 1 wanting more share 90 as 60 and 30, after a demand of 10 is met.
        assert_eq!(
            weighted_level(100.0, &[(inf, 2.0), (inf, 1.0), (10.0, 1.0)]),
            30.0
        );
        // A demand under its weighted level is met; the level rises for the others.
        assert_eq!(weighted_level(100.0, &[(inf, 1.0), (20.0, 2.0)]), 80.0);
    }

    #[test]
    fn a_new_connection_starts_at_its_clients_last_cap_or_its_weight() {
        // A client capped before: where it was.
        assert_eq!(first_cap(1000, Some(50_000), Carries::BlockRoot, 3), 50_000);
        assert_eq!(first_cap(1000, Some(50_000), Carries::BootFiles, 3), 50_000);
        // A new one: a unit share times its weight arriving behind the link's active
        // clients: behind the front of the queue, a boot file's base weight...
        let boot = (100_000.0 * WEIGHTS.boot) as u64;
        let crowded = AHEAD_RANKS as u64 + 5;
        assert_eq!(first_cap(100_000, None, Carries::BootFiles, crowded), boot);
        // ...inside it, its rank's (behind five: 2 x 1.5^4)...
        let fifth = (100_000.0 * WEIGHTS.boot * WEIGHTS.ahead.powi(4)) as u64;
        assert_eq!(first_cap(100_000, None, Carries::BootFiles, 5), fifth);
        // ...and a root 1, never below the least cap.
        assert_eq!(first_cap(100_000, None, Carries::BlockRoot, 5), 100_000);
        assert_eq!(first_cap(10, None, Carries::BlockRoot, 5), MIN_CAP);
    }

    #[test]
    fn the_boost_makes_up_what_held_back_clients_left_unused() {
        let b = budget(100 * MBIT);
        // Two clients held back, each sending 80% of a half: the link carried 80% of its
        // budget, so the boost rises by half the shortfall, round after round, to its bound.
        let short = trim(1.0, 0.8 * b, b, 2);
        assert!((short - 1.125).abs() < 1e-9, "{short}");
        assert_eq!(trim(short, 0.8 * b, b, 2), MAX_BOOST);
        // A round that carried more than the budget brings it down by half the excess.
        let over = trim(1.2, 1.1 * b, b, 2);
        assert!(
            (over - 1.2 * (1.0 + (1.0 / 1.1 - 1.0) / 2.0)).abs() < 1e-9,
            "{over}"
        );
        assert!(over < 1.2 && over > 1.2 / 1.1, "{over}");
        assert_eq!(trim(1.05, 2.0 * b, b, 2), 1.0);
        // Nobody held back: nothing to learn from the round.
        assert_eq!(trim(1.1, 0.3 * b, b, 0), 1.1);
        // The caps are the shares of the boosted budget, never past MAX_BOOST.
        let conns: Vec<Seen> = (1..=4).map(hungry).collect();
        let p = plan(Some(100 * MBIT), 1.0, &conns, 1.2);
        assert_caps(&p.caps, &[cap(b * 1.2 / 4.0); 4]);
        let p = plan(Some(100 * MBIT), 1.0, &conns, 9.0);
        assert_caps(&p.caps, &[cap(b * MAX_BOOST / 4.0); 4]);
        assert_eq!(p.carried, 4_000_000);
    }

    #[test]
    fn caps_never_fall_below_the_floor() {
        // Two thousand clients on 10 Mbit/s: a share far below a segment per round.
        let conns: Vec<Seen> = (0..2000u32)
            .map(|i| Seen {
                client: Ipv4Addr::from(0x0a00_0000 + i),
                carries: Carries::BlockRoot,
                ..hungry(0)
            })
            .collect();
        let p = plan(Some(10 * MBIT), 1.0, &conns, 1.0);
        assert!(p.caps.iter().all(|c| *c == Some(MIN_CAP)));
        assert_eq!(p.share, Some((budget(10 * MBIT) / 2000.0) as u64));
    }
}

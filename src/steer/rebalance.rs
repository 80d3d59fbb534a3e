//! Which clients move to another link, as a pure function of what each link carried and what
//! its clients wanted in the last round (docs/links.md, "Moving clients between links").
//!
//! A client keeps the link it was given at DHCP time for everything it asks; its replies may
//! leave by another. A full link whose clients want more than their shares while another link
//! has room sends one of its wanting clients' replies by that other link, as long as the client
//! would get a clearly larger share there. Four links of a quarter's capacity then fill as one
//! link of the whole would (a bond's one queue never idles while anybody wants data; separate
//! links do, unless work moves between them). A client moved is left where it is for
//! `COOLDOWN` so that it does not flap between links.

use std::net::Ipv4Addr;
use std::time::Duration;

/// A link carrying this much of its budget is full: only from a full link do clients move.
pub const FULL: f64 = 0.85;

/// A move must raise the moved client's share by this factor at least.
pub const GAIN: f64 = 1.25;

/// At most this many clients move in one round (the shares are measured again before more).
pub const MAX_MOVES: usize = 2;

/// How long a client stays on the link it was moved to before it may move again.
pub const COOLDOWN: Duration = Duration::from_millis(1000);

/// A link as the last round saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkLoad {
    /// What its paced connections may send together, bytes/s (`fair_share::budget`).
    pub budget: f64,
    /// What they sent, bytes/s.
    pub carried: f64,
    /// Its active clients.
    pub clients: Vec<ClientLoad>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientLoad {
    pub client: Ipv4Addr,
    /// Bytes/s it sent, or infinite when it wanted more than it got (`fair_share`).
    pub demand: f64,
    /// It has not moved within `COOLDOWN`.
    pub movable: bool,
}

/// A client whose replies go by link `to` from now on instead of link `from` (indexes into the
/// links given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    pub client: Ipv4Addr,
    pub from: usize,
    pub to: usize,
    /// What a held-back client gets on `to` with the mover there (bytes/s): the share the
    /// move was chosen for (what a connection of the mover with no cap starts at there).
    pub share: u64,
}

/// What a link has to give its wanting clients, and how many they are.
#[derive(Debug, Clone, Copy)]
struct Room {
    /// The budget less what its satisfied clients take.
    spare: f64,
    wanting: usize,
    full: bool,
}

impl Room {
    /// A wanting client's share now; infinite on a link nobody is held back on.
    fn share(&self) -> f64 {
        if self.wanting == 0 {
            f64::INFINITY
        } else {
            self.spare / self.wanting as f64
        }
    }

    /// A wanting client's share with one more of them.
    fn share_with_one_more(&self) -> f64 {
        self.spare / (self.wanting + 1) as f64
    }
}

/// The moves for the next round, at most `MAX_MOVES`.
pub fn moves(links: &[LinkLoad]) -> Vec<Move> {
    let mut rooms: Vec<Room> = links
        .iter()
        .map(|l| {
            let satisfied: f64 = l
                .clients
                .iter()
                .filter(|c| c.demand.is_finite())
                .map(|c| c.demand)
                .sum();
            Room {
                spare: (l.budget - satisfied).max(0.0),
                wanting: l.clients.iter().filter(|c| c.demand.is_infinite()).count(),
                full: l.carried >= FULL * l.budget,
            }
        })
        .collect();
    // Each link's wanting clients that may move, in the order given.
    let mut candidates: Vec<Vec<Ipv4Addr>> = links
        .iter()
        .map(|l| {
            l.clients
                .iter()
                .filter(|c| c.demand.is_infinite() && c.movable)
                .map(|c| c.client)
                .collect()
        })
        .collect();
    let mut out = Vec::new();
    while out.len() < MAX_MOVES {
        // The full link whose wanting clients get the least...
        let Some(from) = (0..rooms.len())
            .filter(|&i| rooms[i].full && !candidates[i].is_empty())
            .min_by(|&a, &b| rooms[a].share().total_cmp(&rooms[b].share()))
        else {
            break;
        };
        // ...and the link where one more would get the most.
        let Some(to) = (0..rooms.len()).filter(|&i| i != from).max_by(|&a, &b| {
            rooms[a]
                .share_with_one_more()
                .total_cmp(&rooms[b].share_with_one_more())
        }) else {
            break;
        };
        if rooms[to].share_with_one_more() < GAIN * rooms[from].share() {
            break;
        }
        let client = candidates[from].remove(0);
        let share = rooms[to].share_with_one_more() as u64;
        rooms[from].wanting -= 1;
        rooms[to].wanting += 1;
        out.push(Move {
            client,
            from,
            to,
            share,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: f64 = 1e6;

    fn client(last: u8, demand: f64) -> ClientLoad {
        ClientLoad {
            client: Ipv4Addr::new(10, 0, 0, last),
            demand,
            movable: true,
        }
    }

    fn wanting(first: u8, n: u8) -> Vec<ClientLoad> {
        (first..first + n)
            .map(|i| client(i, f64::INFINITY))
            .collect()
    }

    fn link(budget: f64, carried: f64, clients: Vec<ClientLoad>) -> LinkLoad {
        LinkLoad {
            budget,
            carried,
            clients,
        }
    }

    #[test]
    fn a_full_link_hands_wanting_clients_to_one_with_room() {
        // Six held back on a full link, one on a half-used one: two move, from the first.
        let links = [
            link(28.0 * MB, 28.0 * MB, wanting(1, 6)),
            link(28.0 * MB, 12.0 * MB, vec![client(20, 12.0 * MB)]),
        ];
        let m = moves(&links);
        assert_eq!(m.len(), MAX_MOVES);
        assert!(m.iter().all(|m| m.from == 0 && m.to == 1), "{m:?}");
        assert_eq!(m[0].client, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(m[1].client, Ipv4Addr::new(10, 0, 0, 2));
        // Each starts there at the share it moved for: the 16 MB/s the light client leaves,
        // alone, then halved with the second.
        assert_eq!((m[0].share, m[1].share), (16_000_000, 8_000_000));
        // The emptiest link is chosen among several.
        let links = [
            link(28.0 * MB, 28.0 * MB, wanting(1, 6)),
            link(28.0 * MB, 28.0 * MB, wanting(10, 2)),
            link(28.0 * MB, 2.0 * MB, vec![client(20, 2.0 * MB)]),
        ];
        assert_eq!(moves(&links)[0].to, 2);
    }

    #[test]
    fn balanced_or_idle_links_move_nobody() {
        // Three and three: a move would give the mover less than it has.
        let links = [
            link(28.0 * MB, 28.0 * MB, wanting(1, 3)),
            link(28.0 * MB, 28.0 * MB, wanting(10, 3)),
        ];
        assert_eq!(moves(&links), []);
        // Four against three: a fourth's share (7) against a three's with one more (7): no gain.
        let links = [
            link(28.0 * MB, 28.0 * MB, wanting(1, 4)),
            link(28.0 * MB, 28.0 * MB, wanting(10, 3)),
        ];
        assert_eq!(moves(&links), []);
        // A link that is not full moves nobody, however many want more (their own links or
        // the client's think time hold them back, not the server's link).
        let links = [
            link(28.0 * MB, 10.0 * MB, wanting(1, 6)),
            link(28.0 * MB, 0.0, vec![]),
        ];
        assert_eq!(moves(&links), []);
        // Nobody wanting, nothing to do; one link, nowhere to go.
        assert_eq!(
            moves(&[link(28.0 * MB, 28.0 * MB, vec![client(1, 28.0 * MB)])]),
            []
        );
        assert_eq!(moves(&[link(28.0 * MB, 28.0 * MB, wanting(1, 6))]), []);
    }

    #[test]
    fn a_client_just_moved_stays() {
        let mut held = wanting(1, 6);
        for c in &mut held {
            c.movable = false;
        }
        held[5].movable = true;
        let links = [
            link(28.0 * MB, 28.0 * MB, held),
            link(28.0 * MB, 0.0, vec![]),
        ];
        let m = moves(&links);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].client, Ipv4Addr::new(10, 0, 0, 6));
    }
}

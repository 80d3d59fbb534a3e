//! The report's rows per server (a site's members with `--servers`; one row for a lone
//! server): what each sent, its share of the servers' mean, its clients, the boots placed on
//! its links (by any member, the DHCP owner of each) and what it answered;
//! and the room's time beside its floor, all the clients' bytes over all servers' capacity.

use serde::Serialize;
use std::collections::BTreeMap;

/// What one of the room's links sent (the report's link row, in short).
#[derive(Debug, Clone, Copy)]
pub struct LinkSent {
    pub capacity_bps: u64,
    pub bytes: u64,
    /// Clients whose root it served.
    pub clients: usize,
}

/// What the storm knows of one server besides its links' counters.
#[derive(Debug, Default)]
pub struct ServerInput {
    pub name: String,
    /// Its links, as indices into the room's links.
    pub links: Vec<usize>,
    /// The MACs of the storm's clients its record gave an address (`None`: not read).
    pub answered: Option<Vec<String>>,
    /// DHCP OFFERs it sent during the storm, and DHCP messages it left to another member
    /// (`bootpool_dhcp_answers_total{kind="offer"}`, `bootpool_dhcp_others_total`).
    pub offers: Option<u64>,
    pub others: Option<u64>,
    /// The storm's clients whose boot any member's record placed on its links (the ACK's
    /// link; `None`: a record not read).
    pub placed: Option<usize>,
}

#[derive(Debug, Serialize)]
pub struct ServerRow {
    pub name: String,
    pub links: usize,
    /// Its links, as indices into the report's links.
    #[serde(skip)]
    pub link_indices: Vec<usize>,
    pub capacity_bps: u64,
    /// What its links sent (frames with their headers).
    pub bytes: u64,
    /// `bytes` over the mean of all servers' `bytes`.
    pub share_of_mean: f64,
    /// Clients whose root it served (by its links' addresses).
    pub clients: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offers: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub others: Option<u64>,
    /// Clients placed on its links, whoever answered them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placed: Option<usize>,
}

/// The servers together.
#[derive(Debug, Serialize)]
pub struct Servers {
    pub rows: Vec<ServerRow>,
    /// All the clients' bytes over all servers' capacity (`Bound::transfer_s`), and the
    /// room's time over it (the goal: 1.15 or less).
    pub floor_s: f64,
    pub over_floor: Option<f64>,
    /// The largest |share_of_mean - 1| (the goal: 0.10 or less).
    pub max_share_off: f64,
    /// Clients two servers or more gave an address (from their records; `None`: not read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered_by_two: Option<Vec<String>>,
}

/// The rows of `inputs` over the room's `links`, and the room's time (`all_booted`) over the
/// floor `floor_s` (the lower bound's `transfer_s`).
pub fn servers(
    inputs: &[ServerInput],
    links: &[LinkSent],
    floor_s: f64,
    all_booted: Option<f64>,
) -> Servers {
    let mut rows: Vec<ServerRow> = inputs
        .iter()
        .map(|s| {
            let mine = || s.links.iter().filter_map(|&k| links.get(k));
            ServerRow {
                name: s.name.clone(),
                links: s.links.len(),
                link_indices: s.links.clone(),
                capacity_bps: mine().map(|l| l.capacity_bps).sum(),
                bytes: mine().map(|l| l.bytes).sum(),
                share_of_mean: 0.0,
                clients: mine().map(|l| l.clients).sum(),
                answered: s.answered.as_ref().map(Vec::len),
                offers: s.offers,
                others: s.others,
                placed: s.placed,
            }
        })
        .collect();
    let mean = rows.iter().map(|r| r.bytes as f64).sum::<f64>() / rows.len().max(1) as f64;
    for r in &mut rows {
        r.share_of_mean = if mean > 0.0 {
            r.bytes as f64 / mean
        } else {
            0.0
        };
    }
    let max_share_off = rows
        .iter()
        .map(|r| (r.share_of_mean - 1.0).abs())
        .fold(0.0, f64::max);
    let answered_by_two = inputs
        .iter()
        .map(|s| s.answered.as_ref())
        .collect::<Option<Vec<_>>>()
        .map(|all| {
            let mut by = BTreeMap::<&str, usize>::new();
            for mac in all.into_iter().flatten() {
                *by.entry(mac.as_str()).or_default() += 1;
            }
            by.into_iter()
                .filter(|(_, n)| *n > 1)
                .map(|(m, _)| m.to_string())
                .collect()
        });
    Servers {
        rows,
        floor_s,
        over_floor: all_booted.filter(|_| floor_s > 0.0).map(|t| t / floor_s),
        max_share_off,
        answered_by_two,
    }
}

/// The report's lines for the servers.
pub fn render(s: &Servers) -> String {
    let mut out = String::new();
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    for r in &s.rows {
        out.push_str(&format!(
            "  server {:<4} {} links {:>6} Mbit/s  {:>3} clients ({} placed on it)  sent {:>8.1} MB  {:.2} of the servers' mean  answered {}, offers {}, left to others {}\n",
            r.name,
            r.links,
            r.capacity_bps / 1_000_000,
            r.clients,
            r.placed.map_or("-".to_string(), |n| n.to_string()),
            r.bytes as f64 / 1e6,
            r.share_of_mean,
            r.answered.map_or("-".to_string(), |n| n.to_string()),
            opt(r.offers),
            opt(r.others),
        ));
    }
    out.push_str(&format!(
        "servers: {}; each within {:.1}% of their mean egress (goal 10%); the floor, all bytes over all servers' capacity, {:.1} s: this run {}x it (goal 1.15)\n",
        s.rows.len(),
        s.max_share_off * 100.0,
        s.floor_s,
        s.over_floor.map_or("-".into(), |v| format!("{v:.2}"))
    ));
    if let Some(two) = &s.answered_by_two
        && !two.is_empty()
    {
        out.push_str(&format!(
            "note: {} clients were given an address by two servers or more: {}\n",
            two.len(),
            two.join(" ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(bytes: u64, clients: usize) -> LinkSent {
        LinkSent {
            capacity_bps: 250_000_000,
            bytes,
            clients,
        }
    }

    #[test]
    fn each_server_sums_its_own_links_and_is_compared_with_the_mean() {
        let links = [link(100, 5), link(120, 6), link(90, 4), link(90, 5)];
        let input = |name: &str, links: Vec<usize>, answered: &[&str]| ServerInput {
            name: name.into(),
            links,
            answered: Some(answered.iter().map(|s| s.to_string()).collect()),
            offers: Some(3),
            others: Some(4),
            placed: Some(answered.len() + 1),
        };
        let s = servers(
            &[
                input("s1", vec![0, 1], &["a", "b"]),
                input("s2", vec![2, 3], &["c", "b"]),
            ],
            &links,
            10.0,
            Some(11.5),
        );
        assert_eq!(s.rows[0].bytes, 220);
        assert_eq!(s.rows[1].bytes, 180);
        assert_eq!(s.rows[0].clients, 11);
        assert_eq!(s.rows[1].capacity_bps, 500_000_000);
        assert!((s.rows[0].share_of_mean - 1.1).abs() < 1e-9);
        assert!((s.max_share_off - 0.1).abs() < 1e-9);
        assert_eq!(s.over_floor, Some(1.15));
        assert_eq!(s.answered_by_two, Some(vec!["b".to_string()]));
        assert!(render(&s).contains("given an address by two servers or more: b"));
        assert!(
            render(&s).contains("11 clients (3 placed on it)"),
            "{}",
            render(&s)
        );
        // A server whose record was not read: no one can say who answered twice.
        let unread = ServerInput {
            name: "s3".into(),
            ..ServerInput::default()
        };
        let s = servers(&[unread], &links, 0.0, None);
        assert_eq!(s.answered_by_two, None);
        assert_eq!(s.rows[0].share_of_mean, 0.0);
        assert_eq!(s.over_floor, None);
    }
}

//! What a member of a site says of itself in its row of `site_members` (`db`), and how long
//! ago it last said it, with the load it published: the type the database, the ownership
//! policy (`owners`), the site-wide placement (`balance`) and the API share.

use crate::steer::placement::Published;
use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr};

/// One `bootpool serve` of a site, as its row says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Member {
    /// `bootpool serve --member NAME`, else the host's name: unique within the site.
    pub name: String,
    /// Its addresses on the clients' network (`server.address`, `server.address6`).
    pub addresses: Vec<IpAddr>,
    /// Its links (`server.links`): the addresses clients boot from.
    pub links: Vec<Ipv4Addr>,
    /// The pools (rooms) its config serves.
    pub rooms: Vec<String>,
    /// Its API and dashboard.
    pub http: String,
    /// When it started, Unix microseconds.
    pub started: i64,
}

#[cfg(test)]
impl Member {
    /// A member with a name and nothing else (tests).
    pub fn named(name: &str) -> Member {
        Member {
            name: name.into(),
            addresses: Vec::new(),
            links: Vec::new(),
            rooms: Vec::new(),
            http: String::new(),
            started: 0,
        }
    }
}

/// Whether `name` may name a member: 1 to 63 letters, digits, `-`, `_` and `.` (a host
/// name fits), so that it reads the same in logs, the API and `bootpool site`.
pub fn check_name(name: &str) -> Result<(), String> {
    let fits = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    match name.len() {
        0 => Err("a member's name is empty".into()),
        64.. => Err(format!(
            "a member's name is at most 63 characters: {name:?}"
        )),
        _ if !name.chars().all(fits) => Err(format!(
            "a member's name is letters, digits, '-', '_' and '.' only: {name:?}"
        )),
        _ => Ok(()),
    }
}

/// A member as last read from the database: its row, when it last beat (Unix microseconds,
/// by the database's clock) and how long before the read that was (seconds, by the same
/// clock, so the members' own clocks never matter).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Seen {
    #[serde(flatten)]
    pub member: Member,
    pub heartbeat: i64,
    pub age_s: f64,
    /// Its links' load and the boots it placed on others', as of its heartbeat
    /// (`steer::placement::Published`; empty from a member that publishes none).
    pub load: Vec<Published>,
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn names_are_short_plain_words() {
        for ok in ["a", "boot-2", "lab.example", "b_1"] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "two words", "x/y", &"n".repeat(64)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}

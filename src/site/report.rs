//! The site as the API (`GET /api/v1/site`) and `bootpool site` show it: every member, live
//! or not, with the share of the clients it answers; and that as a table for people.

use super::member::{Member, Seen};
use super::owners::{DEAD_AFTER, View};
use serde::Serialize;
use std::fmt::Write as _;

#[derive(Debug, Serialize)]
pub struct Report {
    /// The member answering (`None`: read from the database by `bootpool site`).
    pub me: Option<String>,
    /// Several servers may share the clients (the records are in PostgreSQL).
    pub shared: bool,
    /// The database did not answer the last read: the members as last seen.
    pub frozen: bool,
    /// A member whose heartbeat is older is dead.
    pub dead_after_s: f64,
    pub members: Vec<Row>,
}

#[derive(Debug, Serialize)]
pub struct Row {
    #[serde(flatten)]
    pub seen: Seen,
    pub live: bool,
    /// Of RFC 3074's 256 buckets, how many are this member's: its share of the clients.
    pub buckets: usize,
}

impl Report {
    /// What member `me` sees (its own row made up from itself when there is no site).
    pub fn of_member(view: &View, me: &Member, shared: bool) -> Report {
        let mut seen = view.seen().to_vec();
        if !seen.iter().any(|s| s.member.name == me.name) {
            seen.push(Seen {
                member: me.clone(),
                heartbeat: crate::record::event::now_micros(),
                age_s: 0.0,
                load: Vec::new(),
            });
        }
        Report {
            me: Some(me.name.clone()),
            shared,
            frozen: view.frozen(),
            ..Report::rows(view, seen)
        }
    }

    /// What the database says, to someone who is no member.
    pub fn of_rows(seen: Vec<Seen>) -> Report {
        let view = View::outside(seen);
        Report::rows(&view, view.seen().to_vec())
    }

    fn rows(view: &View, mut seen: Vec<Seen>) -> Report {
        seen.sort_by(|a, b| a.member.name.cmp(&b.member.name));
        let members = seen
            .into_iter()
            .map(|seen| Row {
                live: view.live().contains(&seen.member.name),
                buckets: view.buckets_of(&seen.member.name),
                seen,
            })
            .collect();
        Report {
            me: None,
            shared: true,
            frozen: false,
            dead_after_s: DEAD_AFTER.as_secs_f64(),
            members,
        }
    }

    /// One line per member, for people.
    pub fn text(&self) -> String {
        let mut out = String::new();
        if self.members.is_empty() {
            out.push_str("no member has joined this site yet\n");
            return out;
        }
        let _ = writeln!(
            out,
            "{:<16} {:<5} {:>9} {:>7}  {:<24} {:<22} rooms",
            "MEMBER", "STATE", "HEARTBEAT", "SHARE", "HTTP", "LINKS"
        );
        for r in &self.members {
            let m = &r.seen.member;
            let links: Vec<String> = m.links.iter().map(|l| l.to_string()).collect();
            let _ = writeln!(
                out,
                "{:<16} {:<5} {:>8.1}s {:>6.1}%  {:<24} {:<22} {}",
                m.name,
                if r.live { "live" } else { "dead" },
                r.seen.age_s,
                r.buckets as f64 * 100.0 / 256.0,
                m.http,
                links.join(","),
                m.rooms.join(",")
            );
        }
        if self.frozen {
            out.push_str("the database did not answer the last read: members as last seen\n");
        }
        out
    }
}

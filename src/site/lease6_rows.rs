//! The rows of `site_leases6` as plain data, pure: a member's running DHCPv6 binding as a row
//! (one per client, as the bindings are: one address per MAC), and what changed in its
//! bindings since the rows it last sent (`diff`), as the changes its spool keeps and its
//! writer sends. Only running bindings have a row: a released, declined or ended binding, or a
//! client the table forgot, is a row to delete.

use crate::boot::lease_share::Held6;
use crate::boot::leases6::Leases6;
use crate::config::Mac;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::Ipv6Addr;

/// One row: client `mac` holds `addr` until `expires`, bound by `duid`, as `member` wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row6 {
    pub mac: Mac,
    pub addr: Ipv6Addr,
    /// Seconds since the epoch.
    pub expires: u64,
    /// The DUID that bound it, in hex.
    pub duid: String,
    pub member: String,
}

impl Row6 {
    /// The row as the bindings' site share takes it.
    pub fn held(&self) -> Held6 {
        Held6 {
            mac: self.mac,
            ip: self.addr,
            expires: self.expires,
            link: None,
        }
    }
}

/// A change to send: a row written (inserted or replaced) or deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Change6 {
    Put(Row6),
    Delete { mac: Mac },
}

impl Change6 {
    /// The row it is about: one client.
    pub fn key(&self) -> Mac {
        match self {
            Change6::Put(r) => r.mac,
            Change6::Delete { mac } => *mac,
        }
    }
}

/// What `table` changed at `now` since `sent` (the rows last sent, by client), and `sent`
/// brought up to date: a row for each running binding that differs, a delete for each row
/// whose binding ended or is gone. A binding unchanged costs a lookup, no row made.
pub fn diff(
    sent: &mut BTreeMap<Mac, Row6>,
    table: &Leases6,
    member: &str,
    now: u64,
) -> Vec<Change6> {
    let mut changes = Vec::new();
    let running: BTreeMap<Mac, _> = table.bindings().filter(|(_, b)| b.expires > now).collect();
    let gone: Vec<Mac> = sent
        .keys()
        .filter(|m| !running.contains_key(m))
        .copied()
        .collect();
    for mac in gone {
        sent.remove(&mac);
        changes.push(Change6::Delete { mac });
    }
    for (mac, b) in running {
        if sent
            .get(&mac)
            .is_some_and(|r| (r.addr, r.expires) == (b.addr, b.expires))
        {
            continue;
        }
        let row = Row6 {
            mac,
            addr: b.addr,
            expires: b.expires,
            duid: table.duid_hex(mac),
            member: member.to_string(),
        };
        sent.insert(mac, row.clone());
        changes.push(Change6::Put(row));
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(n: u8) -> Mac {
        Mac([0x52, 0x54, 0, 0x46, 6, n])
    }

    #[test]
    fn only_running_bindings_are_rows_and_each_change_is_sent_once() {
        let range = ("fd46::10".parse().unwrap(), "fd46::20".parse().unwrap());
        let mut t = Leases6::new(range);
        let mut sent = BTreeMap::new();
        assert_eq!(diff(&mut sent, &t, "a", 0), []);
        let addr = t.bind(mac(1), &[0, 3, 0xab], 0, 100).unwrap();
        let row = Row6 {
            mac: mac(1),
            addr,
            expires: 100,
            duid: "0003ab".into(),
            member: "a".into(),
        };
        assert_eq!(diff(&mut sent, &t, "a", 1), [Change6::Put(row.clone())]);
        // Nothing changed: nothing sent.
        assert_eq!(diff(&mut sent, &t, "a", 2), []);
        // A renewal is the row again, with its new end.
        t.bind(mac(1), &[0, 3, 0xab], 50, 150);
        let renewed = Row6 {
            expires: 150,
            ..row.clone()
        };
        assert_eq!(
            diff(&mut sent, &t, "a", 50),
            [Change6::Put(renewed.clone())]
        );
        assert_eq!(renewed.held().ip, addr);
        // Released: the row goes, once.
        assert!(t.end(mac(1), &[0, 3, 0xab], &[addr], 60));
        let gone = Change6::Delete { mac: mac(1) };
        assert_eq!(diff(&mut sent, &t, "a", 60), std::slice::from_ref(&gone));
        assert_eq!(diff(&mut sent, &t, "a", 61), []);
        assert_eq!(gone.key(), mac(1));
        // A binding that simply ends goes too.
        t.bind(mac(2), &[2], 70, 80);
        assert_eq!(diff(&mut sent, &t, "a", 70).len(), 1);
        assert_eq!(
            diff(&mut sent, &t, "a", 80),
            [Change6::Delete { mac: mac(2) }]
        );
        assert!(sent.is_empty());
    }

    #[test]
    fn changes_read_back_as_written() {
        let put = Change6::Put(Row6 {
            mac: mac(3),
            addr: "fd46::12".parse().unwrap(),
            expires: 99,
            duid: "00030001525400460603".into(),
            member: "b".into(),
        });
        let line = serde_json::to_string(&put).unwrap();
        assert!(line.starts_with("{\"op\":\"put\""), "{line}");
        assert_eq!(serde_json::from_str::<Change6>(&line).unwrap(), put);
    }
}

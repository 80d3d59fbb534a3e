//! The rows of `site_leases` as plain data, pure: a member's bound lease as a row, and what
//! changed in its lease table since the rows it last sent (`diff`), as the changes its spool
//! keeps and its writer sends. Only bound leases have a row: an offer, a released or an
//! expired lease, or a client the table forgot, is a row to delete.

use crate::boot::lease_share::Held;
use crate::boot::leases::{Lease, Leases, State};
use crate::config::Mac;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// One row: client `mac` on `subnet` holds `ip` until `expires`, as `member` wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    pub mac: Mac,
    /// The subnet's CIDR (`dhcp.subnets[].subnet`), e.g. `10.0.0.0/16`.
    pub subnet: String,
    pub ip: Ipv4Addr,
    /// Seconds since the epoch.
    pub expires: u64,
    pub link: Option<Ipv4Addr>,
    pub member: String,
}

impl Row {
    /// `mac`'s lease as `member`'s row, if it is bound and on a subnet (`subnet_of`).
    pub fn of(
        mac: Mac,
        lease: &Lease,
        subnet_of: impl Fn(Ipv4Addr) -> Option<String>,
        member: &str,
    ) -> Option<Row> {
        if lease.state != State::Bound {
            return None;
        }
        Some(Row {
            mac,
            subnet: subnet_of(lease.ip)?,
            ip: lease.ip,
            expires: lease.expires,
            link: lease.link,
            member: member.to_string(),
        })
    }

    /// The row as the lease table's site share takes it.
    pub fn held(&self) -> Held {
        Held {
            mac: self.mac,
            ip: self.ip,
            expires: self.expires,
            link: self.link,
        }
    }
}

/// A change to send: a row written (inserted or replaced) or deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Change {
    Put(Row),
    Delete { mac: Mac, subnet: String },
}

impl Change {
    /// The row it is about: one client on one subnet.
    pub fn key(&self) -> (Mac, String) {
        match self {
            Change::Put(r) => (r.mac, r.subnet.clone()),
            Change::Delete { mac, subnet } => (*mac, subnet.clone()),
        }
    }
}

/// What `table` changed since `sent` (the rows last sent, by client), and `sent` brought up
/// to date: a row for each bound lease that differs, a delete for each row whose lease is no
/// longer bound (or moved to another subnet). A lease unchanged costs a lookup, no row made:
/// this runs after every batch of answers.
pub fn diff(
    sent: &mut BTreeMap<Mac, Row>,
    table: &Leases,
    subnet_of: impl Fn(Ipv4Addr) -> Option<String>,
    member: &str,
) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut delete = |sent: &mut BTreeMap<Mac, Row>, mac: Mac| {
        if let Some(old) = sent.remove(&mac) {
            changes.push(Change::Delete {
                mac,
                subnet: old.subnet,
            });
        }
    };
    // Rows whose client the table forgot.
    let gone: Vec<Mac> = sent
        .keys()
        .filter(|m| table.get(**m).is_none())
        .copied()
        .collect();
    for mac in gone {
        delete(sent, mac);
    }
    let mut puts = Vec::new();
    for (mac, lease) in table.iter() {
        let same = sent.get(mac).is_some_and(|r| {
            lease.state == State::Bound
                && (r.ip, r.expires, r.link) == (lease.ip, lease.expires, lease.link)
        });
        if same {
            continue;
        }
        match Row::of(*mac, lease, &subnet_of, member) {
            Some(row) => {
                if sent.get(mac).is_some_and(|r| r.subnet != row.subnet) {
                    delete(sent, *mac);
                }
                sent.insert(*mac, row.clone());
                puts.push(Change::Put(row));
            }
            None => delete(sent, *mac),
        }
    }
    changes.extend(puts);
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DhcpSubnet;

    fn mac(n: u8) -> Mac {
        Mac([0x52, 0x54, 0, 0x46, 1, n])
    }
    fn ip(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 46, 1, n)
    }
    fn on() -> DhcpSubnet {
        DhcpSubnet {
            subnet: "10.46.1.0/24".parse().unwrap(),
            range: Some((ip(10), ip(20))),
            router: None,
            dns: Vec::new(),
            lease: std::time::Duration::from_secs(3600),
            uplink_mbps: None,
        }
    }
    fn subnet_of(ip: Ipv4Addr) -> Option<String> {
        on().subnet.contains(ip).then(|| "10.46.1.0/24".to_string())
    }

    #[test]
    fn only_bound_leases_are_rows_and_each_change_is_sent_once() {
        let mut t = Leases::new(vec![(ip(10), ip(20))], []);
        let mut sent = BTreeMap::new();
        // An offer is no row.
        let a = t.offer(mac(1), None, &on(), 0, 60).unwrap();
        assert_eq!(diff(&mut sent, &t, subnet_of, "a"), []);
        t.ack_offer(mac(1), a, &on(), 1, 3600).unwrap();
        let row = Row {
            mac: mac(1),
            subnet: "10.46.1.0/24".into(),
            ip: a,
            expires: 3601,
            link: None,
            member: "a".into(),
        };
        assert_eq!(
            diff(&mut sent, &t, subnet_of, "a"),
            [Change::Put(row.clone())]
        );
        // Nothing changed: nothing sent.
        assert_eq!(diff(&mut sent, &t, subnet_of, "a"), []);
        // A renewal is the row again, with its new end.
        t.ack(mac(1), a, &on(), 100, 3600).unwrap();
        let renewed = Row {
            expires: 3700,
            ..row.clone()
        };
        assert_eq!(diff(&mut sent, &t, subnet_of, "a"), [Change::Put(renewed)]);
        // Released: the row goes.
        assert!(t.release(mac(1), a, 200));
        let gone = Change::Delete {
            mac: mac(1),
            subnet: "10.46.1.0/24".into(),
        };
        assert_eq!(
            diff(&mut sent, &t, subnet_of, "a"),
            std::slice::from_ref(&gone)
        );
        assert_eq!(gone.key(), (mac(1), "10.46.1.0/24".to_string()));
        assert!(sent.is_empty());
        // A lease outside every subnet (a reload moved it) has no row.
        t.observe(mac(2), Ipv4Addr::new(192, 0, 2, 1), 300, 60);
        assert_eq!(diff(&mut sent, &t, subnet_of, "a"), []);
        assert_eq!(row.held().ip, a);
    }

    #[test]
    fn changes_read_back_as_written() {
        let put = Change::Put(Row {
            mac: mac(3),
            subnet: "10.46.1.0/24".into(),
            ip: ip(12),
            expires: 99,
            link: Some(ip(1)),
            member: "b".into(),
        });
        let line = serde_json::to_string(&put).unwrap();
        assert!(line.starts_with("{\"op\":\"put\""), "{line}");
        assert_eq!(serde_json::from_str::<Change>(&line).unwrap(), put);
    }
}

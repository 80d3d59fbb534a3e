//! The site's lease table (`site::leases_db`) on a real PostgreSQL the test starts: the
//! address unique across clients (a second client's row on it refused as a conflict naming
//! the holder), an ended row giving its address up, a client's row never replaced by an older
//! one another member sends, a row deleted only by the member that wrote it last, and each
//! member reading only the others' unexpired rows.

use crate::common::postgres::Postgres;
use bootpool::config::Mac;
use bootpool::site::db::Db;
use bootpool::site::lease_rows::Row;
use bootpool::site::leases_db::{LeasesDb, Put};
use std::net::Ipv4Addr;

const SUBNET: &str = "10.46.0.0/16";

fn mac(n: u8) -> Mac {
    Mac([0x52, 0x54, 0, 0x46, 9, n])
}

fn row(client: u8, ip: u8, expires: u64, member: &str) -> Row {
    Row {
        mac: mac(client),
        subnet: SUBNET.into(),
        ip: Ipv4Addr::new(10, 46, 0, ip),
        expires,
        link: Some(Ipv4Addr::new(10, 46, 0, 1)),
        member: member.into(),
    }
}

#[test]
fn the_table_refuses_one_address_to_two_clients() {
    let pg = Postgres::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let db = LeasesDb::new(Db::connect(&pg.url()).unwrap());
        db.schema().await.unwrap();
        db.schema().await.unwrap();
        let put = |r: Row, now: u64| {
            let db = db.clone();
            async move { db.put(&r, now).await.unwrap() }
        };
        assert_eq!(put(row(1, 10, 2000, "a"), 1000).await, Put::Written);
        // Another client on that address, from another member: refused, the holder named.
        assert_eq!(
            put(row(2, 10, 2000, "b"), 1000).await,
            Put::Conflict {
                holder: mac(1).to_string()
            }
        );
        // Once the first row has ended, the address is free for another client.
        assert_eq!(put(row(2, 10, 4000, "b"), 2000).await, Put::Written);
        // A client's renewal by a survivor (b, ending later) is not undone by the row its
        // old member (a, back from a stop) sends, which ends earlier.
        assert_eq!(put(row(3, 11, 5000, "b"), 2000).await, Put::Written);
        assert_eq!(put(row(3, 11, 3000, "a"), 2000).await, Put::Written);
        let seen = |member: &'static str, now: u64| {
            let db = db.clone();
            async move {
                let mut rows = db.others(member, now).await.unwrap();
                rows.sort_by_key(|r| r.ip);
                rows.into_iter()
                    .map(|r| (r.mac, r.ip.octets()[3], r.expires, r.member))
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(
            seen("c", 2000).await,
            [
                (mac(2), 10, 4000, "b".to_string()),
                (mac(3), 11, 5000, "b".to_string())
            ]
        );
        // Its own rows are not a member's to read back; ended rows are nobody's.
        assert_eq!(seen("b", 2000).await, []);
        assert_eq!(seen("c", 4500).await.len(), 1);
        // Only the member that wrote a row last deletes it.
        db.delete(mac(3), SUBNET, "a").await.unwrap();
        assert_eq!(seen("c", 2000).await.len(), 2);
        db.delete(mac(3), SUBNET, "b").await.unwrap();
        assert_eq!(seen("c", 2000).await.len(), 1);
        assert_eq!(
            pg.query("SELECT count(*) = count(DISTINCT ip) FROM site_leases"),
            "t"
        );
    });
}

//! The site's open NFS and NBD connections (`site_connections` in PostgreSQL: client and
//! server address and port, and the member holding it), so that a member taking over an
//! address knows whom to send tickle ACKs (docs/failover.md). Written behind: a connection's
//! open and close are a message on a channel, never a wait; one task per member batches them
//! into the table every `FLUSH` (an open and close within one batch never reach it), and
//! keeps them for the next batch while the database does not answer.

use super::db::{Db, bounded};
use crate::shutdown::Shutdown;
use anyhow::Context as _;
use std::collections::BTreeMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// How often the changes go to the database.
pub const FLUSH: Duration = Duration::from_millis(500);

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS site_connections (server_ip TEXT NOT NULL, \
    server_port INTEGER NOT NULL, client_ip TEXT NOT NULL, client_port INTEGER NOT NULL, \
    member TEXT NOT NULL, opened TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(), \
    PRIMARY KEY (server_ip, server_port, client_ip, client_port))";

/// One TCP connection: the server's end and the client's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Conn {
    pub server: SocketAddrV4,
    pub client: SocketAddrV4,
}

/// A change to send: opened (`true`) or closed.
type Change = (Conn, bool);

/// Where the services say their connections open (`open`); a clone per service.
#[derive(Debug, Clone, Default)]
pub struct Conns {
    /// `None`: no site, nothing recorded.
    tx: Option<UnboundedSender<Change>>,
}

/// An open connection as recorded: dropping it records the close.
#[derive(Debug)]
pub struct Open {
    conn: Conn,
    tx: UnboundedSender<Change>,
}

impl Drop for Open {
    fn drop(&mut self) {
        let _ = self.tx.send((self.conn, false));
    }
}

impl Conns {
    /// A handle and the receiving end its writer (`write_behind`) drains.
    pub fn channel() -> (Conns, UnboundedReceiver<Change>) {
        let (tx, rx) = unbounded_channel();
        (Conns { tx: Some(tx) }, rx)
    }

    /// Records the connection from `client` to `server` (IPv4 only: tickles are) until the
    /// returned handle is dropped; `None` without a site.
    pub fn open(&self, server: SocketAddr, client: SocketAddr) -> Option<Open> {
        let tx = self.tx.as_ref()?;
        let v4 = |a: SocketAddr| match a {
            SocketAddr::V4(v4) => Some(v4),
            SocketAddr::V6(v6) => Some(SocketAddrV4::new(v6.ip().to_ipv4_mapped()?, v6.port())),
        };
        let conn = Conn {
            server: v4(server)?,
            client: v4(client)?,
        };
        tx.send((conn, true)).ok()?;
        Some(Open {
            conn,
            tx: tx.clone(),
        })
    }
}

/// The changes not yet in the database, each connection's latest: `true` to insert, `false`
/// to delete. An open closed before it was written is dropped whole. Pure.
#[derive(Debug, Default)]
pub struct Pending(BTreeMap<Conn, bool>);

impl Pending {
    pub fn note(&mut self, (conn, open): Change) {
        match (self.0.get(&conn), open) {
            (Some(true), false) => {
                self.0.remove(&conn);
            }
            _ => {
                self.0.insert(conn, open);
            }
        }
    }

    /// The batch to write: (opened, closed); the pending set is empty after.
    pub fn take(&mut self) -> (Vec<Conn>, Vec<Conn>) {
        let all = std::mem::take(&mut self.0);
        let (opened, closed): (Vec<_>, Vec<_>) = all.into_iter().partition(|(_, open)| *open);
        let conns = |v: Vec<(Conn, bool)>| v.into_iter().map(|(c, _)| c).collect();
        (conns(opened), conns(closed))
    }

    /// A batch that was not written, back in front of what came since.
    pub fn put_back(&mut self, opened: Vec<Conn>, closed: Vec<Conn>) {
        let since = std::mem::take(&mut self.0);
        for c in opened {
            self.0.insert(c, true);
        }
        for c in closed {
            self.0.insert(c, false);
        }
        for change in since {
            self.note(change);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The member `member`'s writer: clears the rows its previous process left (killed, it
/// removed none), then writes the changes every `FLUSH` until the shutdown, and at it.
pub async fn write_behind(
    db: Db,
    member: String,
    mut rx: UnboundedReceiver<Change>,
    shutdown: Shutdown,
) {
    let mut cleared = false;
    let mut pending = Pending::default();
    let mut tick = tokio::time::interval(FLUSH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut said = false;
    loop {
        let stopping = tokio::select! {
            _ = shutdown.wait() => true,
            _ = tick.tick() => false,
        };
        while let Ok(change) = rx.try_recv() {
            pending.note(change);
        }
        let written = async {
            if !cleared {
                db.schema_conns().await?;
                db.clear_conns(&member).await?;
                cleared = true;
            }
            if pending.is_empty() {
                return Ok(());
            }
            let (opened, closed) = pending.take();
            match db.write_conns(&member, &opened, &closed).await {
                Ok(()) => Ok(()),
                Err(e) => {
                    pending.put_back(opened, closed);
                    Err(e)
                }
            }
        };
        match written.await {
            Ok(()) => said = false,
            Err(e) if !said => {
                said = true;
                tracing::warn!(error = %format!("{e:#}"), "site connections not written; kept \
                    for the next try");
            }
            Err(_) => {}
        }
        if stopping {
            break;
        }
    }
}

impl Db {
    /// Makes the connections' table if it is not there yet.
    pub async fn schema_conns(&self) -> anyhow::Result<()> {
        bounded(sqlx::query(SCHEMA).execute(self.pool()))
            .await
            .context("creating the site_connections table")?;
        Ok(())
    }

    /// Deletes every row of `member`'s.
    pub async fn clear_conns(&self, member: &str) -> anyhow::Result<()> {
        let q = sqlx::query("DELETE FROM site_connections WHERE member = $1")
            .bind(member)
            .execute(self.pool());
        bounded(q)
            .await
            .context("clearing this member's connections")?;
        Ok(())
    }

    /// Inserts `opened` as `member`'s, deletes `closed` (where still `member`'s).
    pub async fn write_conns(
        &self,
        member: &str,
        opened: &[Conn],
        closed: &[Conn],
    ) -> anyhow::Result<()> {
        if !opened.is_empty() {
            let (s, sp, c, cp) = columns(opened);
            let q = sqlx::query(
                "INSERT INTO site_connections (server_ip, server_port, client_ip, client_port, member) \
                 SELECT s, sp, c, cp, $5 FROM UNNEST($1::text[], $2::int4[], $3::text[], $4::int4[]) \
                 AS t(s, sp, c, cp) ON CONFLICT (server_ip, server_port, client_ip, client_port) \
                 DO UPDATE SET member = excluded.member, opened = excluded.opened",
            )
            .bind(s)
            .bind(sp)
            .bind(c)
            .bind(cp)
            .bind(member)
            .execute(self.pool());
            bounded(q).await.context("recording connections")?;
        }
        if !closed.is_empty() {
            self.delete_conns(closed, "member = $5", member).await?;
        }
        Ok(())
    }

    /// The connections another member than `me` recorded to `ip`.
    pub async fn conns_to(&self, ip: std::net::Ipv4Addr, me: &str) -> anyhow::Result<Vec<Conn>> {
        let q = sqlx::query_as::<_, (String, i32, String, i32)>(
            "SELECT server_ip, server_port, client_ip, client_port FROM site_connections \
             WHERE server_ip = $1 AND member <> $2",
        )
        .bind(ip.to_string())
        .bind(me)
        .fetch_all(self.pool());
        let rows = bounded(q)
            .await
            .context("reading the connections to an address")?;
        Ok(rows
            .into_iter()
            .filter_map(|(s, sp, c, cp)| {
                let end = |ip: String, port: i32| {
                    Some(SocketAddrV4::new(
                        ip.parse().ok()?,
                        u16::try_from(port).ok()?,
                    ))
                };
                Some(Conn {
                    server: end(s, sp)?,
                    client: end(c, cp)?,
                })
            })
            .collect())
    }

    /// Deletes `conns` where another member than `me` recorded them (they were tickled).
    pub async fn forget_conns(&self, conns: &[Conn], me: &str) -> anyhow::Result<()> {
        self.delete_conns(conns, "member <> $5", me).await
    }

    async fn delete_conns(&self, conns: &[Conn], whose: &str, member: &str) -> anyhow::Result<()> {
        if conns.is_empty() {
            return Ok(());
        }
        let (s, sp, c, cp) = columns(conns);
        let sql = format!(
            "DELETE FROM site_connections WHERE {whose} AND (server_ip, server_port, client_ip, \
             client_port) IN (SELECT * FROM UNNEST($1::text[], $2::int4[], $3::text[], $4::int4[]))"
        );
        let q = sqlx::query(&sql)
            .bind(s)
            .bind(sp)
            .bind(c)
            .bind(cp)
            .bind(member)
            .execute(self.pool());
        bounded(q).await.context("deleting connections")?;
        Ok(())
    }
}

/// The table's key columns of `conns`, as arrays to bind.
fn columns(conns: &[Conn]) -> (Vec<String>, Vec<i32>, Vec<String>, Vec<i32>) {
    (
        conns.iter().map(|c| c.server.ip().to_string()).collect(),
        conns.iter().map(|c| i32::from(c.server.port())).collect(),
        conns.iter().map(|c| c.client.ip().to_string()).collect(),
        conns.iter().map(|c| i32::from(c.client.port())).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn conn(port: u16) -> Conn {
        Conn {
            server: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 2049),
            client: SocketAddrV4::new(Ipv4Addr::new(10, 0, 2, 7), port),
        }
    }

    #[test]
    fn a_batch_holds_each_connections_latest_change_and_skips_one_that_came_and_went() {
        let mut p = Pending::default();
        p.note((conn(1), true));
        p.note((conn(2), true));
        p.note((conn(2), false));
        p.note((conn(3), false));
        assert_eq!(p.take(), (vec![conn(1)], vec![conn(3)]));
        assert!(p.is_empty());
        // A batch the database refused goes back; what came since wins (an open never
        // written and closed since is dropped whole).
        p.note((conn(1), false));
        p.note((conn(4), true));
        p.note((conn(6), false));
        p.put_back(vec![conn(1), conn(5), conn(6)], vec![conn(3)]);
        assert_eq!(p.take(), (vec![conn(4), conn(5)], vec![conn(3)]));
    }

    #[test]
    fn an_open_records_itself_and_its_drop_the_close() {
        let (conns, mut rx) = Conns::channel();
        let c = conn(9);
        let open = conns.open(c.server.into(), c.client.into()).unwrap();
        assert_eq!(rx.try_recv(), Ok((c, true)));
        drop(open);
        assert_eq!(rx.try_recv(), Ok((c, false)));
        let v6 = "[2001:db8::1]:2049".parse().unwrap();
        assert!(conns.open(v6, c.client.into()).is_none());
        assert!(
            Conns::default()
                .open(c.server.into(), c.client.into())
                .is_none()
        );
    }
}

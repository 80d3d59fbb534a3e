//! Link steering: which of the server's links (`server.links`, docs/links.md) each client
//! boots from, and how a full link's bandwidth is shared and relieved. The services hand it
//! their sockets; it never listens itself.
//!
//! Pure computation, plain data in and out (no socket, clock or file):
//! - `choice`: the link a new client should boot from, and `LinkSpec`, a link as data.
//! - `fair_share`: each connection's cap on a full link (weighted max-min).
//! - `rebalance`: which clients a full link hands to one with room.
//! - `rooms`: each room's uplink's bound on its clients' shares, across the links.
//!
//! The socket shell around it:
//! - `links`: the links an interface holds, each socket's reply path (marks, devices).
//! - `routes`: the policy routing tables the marks select, over rtnetlink.
//! - `local_addr`: the local address a UDP request came to (IP_PKTINFO), for TFTP.
//! - `pacing`: TCP_INFO in, SO_MAX_PACING_RATE out, one thread, by `fair_share`'s caps.
//! - `firmware`: where firmware waits (the services say), so that link alone keeps headroom.
//! - `placement`: who boots where and what each link sends, for `choice` (once per boot).

pub mod choice;
pub mod fair_share;
pub mod firmware;
pub mod links;
pub mod local_addr;
pub mod pacing;
pub mod placement;
pub mod rebalance;
pub mod rooms;
pub mod routes;

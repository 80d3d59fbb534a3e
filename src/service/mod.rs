//! I/O shells, one per listener. Each serves the socket `app` bound for it, owns its limits,
//! timeouts and retransmission, and records boot events.

pub mod dhcp;
pub mod http;
pub mod lease_file;
pub mod metrics;
pub mod nbd;
pub mod nfs;
pub mod overlays;
pub mod portmap;
pub mod tftp;
pub mod web;

//! Wire codecs and sans-I/O state machines. No tokio, no sockets, no files, no clock: time is
//! an argument. Every decoder is total: it rejects trailing bytes, caps every length and never
//! panics on input.

pub mod console;
pub mod dhcp;
pub mod dhcp6;
pub mod httpfile;
pub mod mount;
pub mod nbd;
pub mod netlink;
pub mod nfs3;
pub mod nfsacl;
pub mod pe;
pub mod portmap;
pub mod ra;
pub mod rpc;
pub mod swarm;
pub mod tcp_info;
pub mod tftp;
pub mod tickle;
pub mod wol;

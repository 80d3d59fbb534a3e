//! How a boot ends when its image says nothing: the evidence bootpool has on its own side that
//! a client is up, or gone. Pure data: no I/O, no clock (the caller says what time it is).
//!
//! A boot is *inferred* up by the first of:
//! - `root_settled`: the root's reads (NFS READ data, NBD read replies, as the services record
//!   them about once a second) went quiet for `QUIET_S` after at least `MIN_ROOT_BYTES` had
//!   been read since the attach. The end is the last read before the quiet: a booted system
//!   has what it needs in its page cache and stops reading.
//! - `dhcp_after_root`: the booted system's own DHCP (a DISCOVER or ACK without PXEClient
//!   after the root attach, as systemd-networkd or ifupdown send); the end is that message.
//!
//! A boot is *gone* (its client powered off or restarted) on: a new boot of the same machine
//! (`new_boot`: its firmware's DISCOVER), the NBD root disconnected (`nbd_disconnect`, the
//! client's NBD_CMD_DISC, or `nbd_closed`, its connection closed) or a root connection reset
//! (`nfs_reset`, `nbd_reset`), or a root connection whose client answered nothing (TCP
//! keepalive probes, sent data) for `limits.root_lost_after` (`nfs_lost`, `nbd_lost`: powered
//! off and staying off, or its link cut). An NFS connection the client closes is not: the kernel closes
//! idle ones and klibc's nfsmount closes its MOUNT connection at once.

use super::event::{Detach, Micros, Proto};
use crate::config::names::Rev;
use serde::Serialize;

/// Seconds without a root read after which the root counts as settled. Generous: under
/// emulation (TCG) a booting client can compute for several seconds between reads.
pub const QUIET_S: i64 = 30;
/// Root bytes that must have been read since the attach before a quiet counts: less is a
/// superblock and a mount, not a booted system.
pub const MIN_ROOT_BYTES: u64 = 4 << 20;

/// Why bootpool believes a boot is up without the client saying so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Evidence {
    RootSettled,
    DhcpAfterRoot,
}

impl Evidence {
    pub fn name(self) -> &'static str {
        match self {
            Evidence::RootSettled => "root_settled",
            Evidence::DhcpAfterRoot => "dhcp_after_root",
        }
    }
}

/// Why bootpool believes a boot's client went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GoneEvidence {
    NewBoot,
    NbdDisconnect,
    NbdClosed,
    NbdReset,
    NfsReset,
    NbdLost,
    NfsLost,
}

impl GoneEvidence {
    pub fn name(self) -> &'static str {
        match self {
            GoneEvidence::NewBoot => "new_boot",
            GoneEvidence::NbdDisconnect => "nbd_disconnect",
            GoneEvidence::NbdClosed => "nbd_closed",
            GoneEvidence::NbdReset => "nbd_reset",
            GoneEvidence::NfsReset => "nfs_reset",
            GoneEvidence::NbdLost => "nbd_lost",
            GoneEvidence::NfsLost => "nfs_lost",
        }
    }

    /// What a root connection's end says of its client, if anything.
    pub fn of_detach(proto: Proto, how: Detach) -> Option<GoneEvidence> {
        match (proto, how) {
            (Proto::Nbd, Detach::Disconnect) => Some(GoneEvidence::NbdDisconnect),
            (Proto::Nbd, Detach::Closed) => Some(GoneEvidence::NbdClosed),
            (Proto::Nbd, Detach::Reset) => Some(GoneEvidence::NbdReset),
            (Proto::Nfs, Detach::Reset) => Some(GoneEvidence::NfsReset),
            (Proto::Nbd, Detach::Lost) => Some(GoneEvidence::NbdLost),
            (Proto::Nfs, Detach::Lost) => Some(GoneEvidence::NfsLost),
            _ => None,
        }
    }
}

/// An end bootpool inferred.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Inferred {
    pub at: Micros,
    pub evidence: Evidence,
}

/// When and why a boot's client was seen to go.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Gone {
    pub at: Micros,
    pub evidence: GoneEvidence,
}

/// A client's use of the root it attached last, whichever boot the record has it in now: what
/// `image::usage` decides "may still be reading" from. Only the server's own sockets move it
/// (a root attach, root reads, a root connection's end by `GoneEvidence::of_detach`); a console
/// line or a DISCOVER, which anyone on the segment can forge with the client's address or MAC,
/// never does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RootUse {
    /// The boot that attached it (`Boot::id`).
    pub boot: u64,
    /// The export's image revision (`EXPORT@ID`), if it names one.
    pub revision: Option<Rev>,
    pub attached: Micros,
    /// A root connection accepted before this belonged to an earlier root: the start of the
    /// attaching boot, or the boot's previous attach (an NBD client's reconnect; a connection
    /// is accepted a moment before its attach).
    pub floor: Micros,
    /// The last attach or read.
    pub last: Micros,
    /// A root connection of this attach ended with evidence of the client's going, and no
    /// attach or read came since.
    pub ended: Option<Micros>,
}

impl RootUse {
    pub fn attach(boot: u64, revision: Option<Rev>, at: Micros, floor: Micros) -> RootUse {
        RootUse {
            boot,
            revision,
            attached: at,
            floor,
            last: at,
            ended: None,
        }
    }

    /// A root read: the client is still there, whatever ended before.
    pub fn read(&mut self, at: Micros) {
        self.last = self.last.max(at);
        self.ended = None;
    }

    /// A root connection accepted at `since` ended (`how`). A connection older than `floor`
    /// belonged to an earlier root and says nothing of this one.
    pub fn detach(&mut self, proto: Proto, how: Detach, since: Option<Micros>, at: Micros) {
        if since.is_some_and(|s| s < self.floor) {
            return;
        }
        if GoneEvidence::of_detach(proto, how).is_some() {
            self.ended.get_or_insert(at);
        }
    }
}

/// A boot's root reads since its first attach: what `root_settled` is decided from.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RootReads {
    attached: bool,
    bytes: u64,
    last: Option<Micros>,
}

impl RootReads {
    pub fn attach(&mut self) {
        self.attached = true;
    }

    pub fn read(&mut self, at: Micros, bytes: u64) {
        if self.attached && bytes > 0 {
            self.bytes += bytes;
            self.last = Some(self.last.map_or(at, |l| l.max(at)));
        }
    }

    /// The last read before the root went quiet, if it has by `now`.
    pub fn settled(&self, now: Micros) -> Option<Micros> {
        let last = self.last?;
        (self.bytes >= MIN_ROOT_BYTES && now - last > QUIET_S * 1_000_000).then_some(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = 1_000_000;

    #[test]
    fn the_root_settles_at_its_last_read_once_quiet_and_read_enough() {
        let mut r = RootReads::default();
        // Reads before the attach are not the root's.
        r.read(S, MIN_ROOT_BYTES);
        r.attach();
        r.read(10 * S, MIN_ROOT_BYTES / 2);
        // Quiet, but too little read: a mount that stopped there.
        assert_eq!(r.settled(100 * S), None);
        r.read(101 * S, MIN_ROOT_BYTES / 2);
        assert_eq!(r.settled(101 * S + QUIET_S * S), None);
        assert_eq!(r.settled(102 * S + QUIET_S * S), Some(101 * S));
    }

    #[test]
    fn only_nbd_ends_resets_and_silence_say_a_client_went() {
        use GoneEvidence as G;
        assert_eq!(
            G::of_detach(Proto::Nbd, Detach::Disconnect),
            Some(G::NbdDisconnect)
        );
        assert_eq!(G::of_detach(Proto::Nbd, Detach::Closed), Some(G::NbdClosed));
        assert_eq!(G::of_detach(Proto::Nfs, Detach::Reset), Some(G::NfsReset));
        assert_eq!(G::of_detach(Proto::Nfs, Detach::Closed), None);
        assert_eq!(G::of_detach(Proto::Nfs, Detach::Lost), Some(G::NfsLost));
        assert_eq!(G::of_detach(Proto::Nbd, Detach::Lost), Some(G::NbdLost));
    }
}

//! Typed boot milestones that services send to the recorder. A service says what happened and
//! to whom (a MAC when it knows one, else the client's IP); the recorder works out which boot
//! and which phase it belongs to.

use crate::config::Mac;
use crate::config::names::ExportName;
use crate::proto::dhcp::Relayed;
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch.
pub type Micros = i64;

pub fn now_micros() -> Micros {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// Who an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Who {
    Mac(#[serde(with = "mac_text")] Mac),
    Ip(Ipv4Addr),
}

/// What the client asked the HTTP or TFTP server for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// A network boot program (iPXE) fetched by firmware.
    Loader,
    /// The generated iPXE script.
    Script,
    /// The Secure Boot chain: the signed shim firmware loads, the signed GRUB shim loads, and
    /// the GRUB config bootpool generates (`boot::grub`).
    Shim,
    Grub,
    #[serde(rename = "grub_cfg")]
    GrubConfig,
    Kernel,
    Initrd,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Dhcp,
    Tftp,
    Http,
    Nfs,
    Nbd,
}

/// How the API and the reports name a protocol.
pub fn proto_name(p: Proto) -> &'static str {
    match p {
        Proto::Dhcp => "dhcp",
        Proto::Tftp => "tftp",
        Proto::Http => "http",
        Proto::Nfs => "nfs",
        Proto::Nbd => "nbd",
    }
}

/// How a transfer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Complete,
    Aborted,
    TimedOut,
}

/// How a root connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Detach {
    /// The client said it was done (NBD_CMD_DISC).
    Disconnect,
    /// The client closed the connection (FIN) without saying so.
    Closed,
    /// The connection was reset (RST).
    Reset,
    /// The client answered nothing for `limits.root_lost_after` (TCP keepalive probes or
    /// sent data unacknowledged): powered off, or its link cut.
    Lost,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Kind {
    /// A DHCPDISCOVER. `pxe`: it came from boot firmware or iPXE (option 60 `PXEClient`);
    /// `ipxe`: from iPXE (user class). `pool`: the client's pool, so that a boot that never
    /// gets an ACK (a firmware that gave up) still counts in its pool's wave.
    DhcpDiscover {
        pxe: bool,
        ipxe: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool: Option<String>,
        /// This server answered it (an OFFER; in proxy mode, its boot offer). False in
        /// journals written before the field.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        answered: bool,
        /// The architecture its firmware or iPXE said (option 93, RFC 4578), if it said one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arch: Option<u16>,
    },
    /// A DHCPACK that gave (or, in proxy mode, confirmed) this address. `link`: the server
    /// address the client was told to boot from (one of `server.links`); `relayed`: the
    /// relay its requests came through and what its option 82 said (the switch port).
    DhcpAck {
        ip: Ipv4Addr,
        pxe: bool,
        ipxe: bool,
        pool: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        link: Option<Ipv4Addr>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        relayed: Option<Relayed>,
    },
    /// A DHCPv6 REPLY that gave this address (firmware, iPXE or the booted system asking over
    /// IPv6): the ACK milestone of a client that boots over IPv6. `pxe`, `ipxe` and `pool` as
    /// in `DhcpAck`; `duid`: the client's DUID (hex), which it is known by besides its MAC.
    /// (Its SOLICIT is recorded as a `DhcpDiscover`.)
    Dhcp6Reply {
        ip: Ipv6Addr,
        pxe: bool,
        ipxe: bool,
        pool: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duid: Option<String>,
    },
    /// A file was sent (or the transfer ended) over TFTP or HTTP.
    File {
        proto: Proto,
        kind: FileKind,
        path: String,
        bytes: u64,
        outcome: Outcome,
    },
    /// The root filesystem was attached: an NFS MNT or an NBD handshake.
    RootAttach { proto: Proto, export: ExportName },
    /// Root filesystem payload sent to the client since its last RootRead event.
    RootRead { proto: Proto, bytes: u64 },
    /// A root connection of the client ended (NBD always; NFS only when reset). `since`: when
    /// the connection was accepted, so that an earlier boot's connection ending (reset by the
    /// client's new kernel at the same address) is not taken for the current boot's.
    RootDetach {
        proto: Proto,
        how: Detach,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since: Option<Micros>,
    },
    /// The client reported that it is up (`POST /api/v1/booted`).
    /// `root_bytes`: what the client says its root read over the network (its kernel's count).
    Booted {
        uptime_s: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        root_bytes: Option<u64>,
    },
    /// The boot cannot go on: the server refused or lacked what the client needed (`proto`
    /// says which service), or the client itself reported a failure (`proto` absent).
    Failed {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proto: Option<Proto>,
        reason: String,
    },
    /// The client's script applied a next boot an admin set, in place of its pool's image.
    NextBoot(NextBootNote),
    /// A Wake-on-LAN magic packet was sent to the client, by wake `wake` (`service::wake`):
    /// the boot it starts next (within `WAKE_STARTS_WITHIN`) is that wake's.
    Woken { wake: u64 },
}

/// How long after its magic packet a client's new boot counts as started by the wake.
pub const WAKE_STARTS_WITHIN: Micros = 10 * 60 * 1_000_000;

/// The next boot an admin set (`boot::next`) that a boot's script applied: what, once or
/// until changed, for whom (`client MAC`, `room SUBNET`, `pool NAME`), by whom and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextBootNote {
    pub target: String,
    pub once: bool,
    pub scope: String,
    /// Unix seconds.
    pub set_at: i64,
    pub by: String,
}

impl Kind {
    /// The event's name, as in its JSON `event` field.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::DhcpDiscover { .. } => "dhcp_discover",
            Kind::DhcpAck { .. } => "dhcp_ack",
            Kind::Dhcp6Reply { .. } => "dhcp6_reply",
            Kind::File { .. } => "file",
            Kind::RootAttach { .. } => "root_attach",
            Kind::RootRead { .. } => "root_read",
            Kind::RootDetach { .. } => "root_detach",
            Kind::Booted { .. } => "booted",
            Kind::Failed { .. } => "failed",
            Kind::NextBoot(_) => "next_boot",
            Kind::Woken { .. } => "woken",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub at: Micros,
    pub who: Who,
    #[serde(flatten)]
    pub kind: Kind,
}

impl Event {
    pub fn now(who: Who, kind: Kind) -> Event {
        Event {
            at: now_micros(),
            who,
            kind,
        }
    }
}

mod mac_text {
    use crate::config::Mac;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(mac: &Mac, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(mac)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Mac, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

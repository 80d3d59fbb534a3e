//! The reference site's DHCP (`--servers 2 --server-cmd`, `reference`): a Kea HA pair, two
//! kea-dhcp4 with ISC's `libdhcp_ha.so` in load-balancing mode, one config per member. Pure:
//! what the pair is told in, Kea's JSON out (`reference` writes it, the reference script runs
//! kea-dhcp4 on it).
//!
//! Load-balancing, not hot-standby: bootpool's site splits a room over its members by RFC
//! 3074's hash, and Kea's load-balancing splits it by the same hash, so in both rows half the
//! room boots from each server and the death of one strikes half the room. Under hot-standby
//! the whole room would boot from the primary and the standby's link would idle, another
//! room than bootpool's.
//!
//! The pair talks over each kea-dhcp4's own HTTP listener (Kea 2.2's `http-dedicated-listener`,
//! which needs its multi-threading on), not through kea-ctrl-agent; each peer's URL is its
//! host's own fixed address, which does not move. The DHCP answers name the member's service
//! address (the one keepalived moves) as server identifier, next-server and in the boot file's
//! URL, as dnsmasq does in the one-server reference.

use serde_json::{Value, json};
use std::net::Ipv4Addr;
use std::path::Path;

/// How fast the survivor of a Kea HA pair decides its partner is dead (milliseconds, and
/// clients): `heartbeat-delay` between two heartbeats, `max-response-delay` without any
/// answer from the partner before its communication counts as interrupted,
/// `max-ack-delay` and `max-unacked-clients`: how many of the partner's clients must have
/// asked that long unanswered before the survivor takes the partner's half (0: at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timers {
    pub heartbeat_delay_ms: u32,
    pub max_response_delay_ms: u32,
    pub max_ack_delay_ms: u32,
    pub max_unacked_clients: u32,
}

/// The fastest we call sane: a heartbeat a second, the partner dead after two seconds without
/// an answer, and no wait for its clients to be seen unanswered (ISC's own HA tests go as low
/// as 1000/1001 ms). Lower heartbeats on a loaded machine risk a pair that splits while both
/// live.
pub const FASTEST: Timers = Timers {
    heartbeat_delay_ms: 1000,
    max_response_delay_ms: 2000,
    max_ack_delay_ms: 1000,
    max_unacked_clients: 0,
};

/// Kea 2.2's defaults (its ARM, "Load-Balancing Configuration"): with them the survivor
/// answers the dead partner's clients no sooner than 60 s after its last answer, and only
/// once 10 of those clients have asked for 10 s unanswered (their `secs` field).
pub const DEFAULTS: Timers = Timers {
    heartbeat_delay_ms: 10_000,
    max_response_delay_ms: 60_000,
    max_ack_delay_ms: 10_000,
    max_unacked_clients: 10,
};

/// The port each kea-dhcp4's HA listener takes on its host's fixed address.
pub const HA_PORT: u16 = 8001;

/// One member of the pair: its name and the fixed address its HA listener is on.
#[derive(Debug, Clone)]
pub struct Peer {
    pub name: String,
    pub address: Ipv4Addr,
}

/// What one member's kea-dhcp4 is told.
#[derive(Debug, Clone)]
pub struct Plan<'a> {
    /// Which of `peers` this one is (the first is the primary).
    pub me: usize,
    pub peers: &'a [Peer],
    /// The address its clients are handed (keepalived's to move).
    pub service: Ipv4Addr,
    pub interface: &'a str,
    pub subnet: (Ipv4Addr, u8),
    pub range: (Ipv4Addr, Ipv4Addr),
    pub lease_s: u64,
    /// The HTTP port of the iPXE script's URL.
    pub http_port: u16,
    /// The folder holding `libdhcp_ha.so` and `libdhcp_lease_cmds.so`.
    pub hooks: &'a Path,
    pub timers: Timers,
    /// Its log file.
    pub log: &'a Path,
}

/// The URL of a peer's HA listener.
pub fn url(peer: &Peer) -> String {
    format!("http://{}:{HA_PORT}/", peer.address)
}

/// The kea-dhcp4 config of `plan.me`: raw sockets on the room's interface, leases in memory,
/// the firmware sent to `undionly.kpxe` over TFTP and iPXE to the script's URL (as the
/// one-server reference's dnsmasq does, by the user class iPXE sends), and the HA hook.
pub fn config(plan: &Plan) -> Value {
    let me = &plan.peers[plan.me];
    let service = plan.service.to_string();
    let script = format!(
        "http://{}:{}/boot/script/room.ipxe",
        plan.service, plan.http_port
    );
    let peers: Vec<Value> = plan
        .peers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            json!({
                "name": p.name,
                "url": url(p),
                "role": if i == 0 { "primary" } else { "secondary" },
                "auto-failover": true,
            })
        })
        .collect();
    let t = plan.timers;
    let hook = |name: &str| plan.hooks.join(name).display().to_string();
    json!({ "Dhcp4": {
        "interfaces-config": {
            "interfaces": [plan.interface],
            "dhcp-socket-type": "raw",
        },
        "lease-database": { "type": "memfile", "persist": false },
        "multi-threading": {
            "enable-multi-threading": true,
            "thread-pool-size": 2,
            "packet-queue-size": 64,
        },
        "valid-lifetime": plan.lease_s,
        "option-data": [
            { "name": "dhcp-server-identifier", "data": service },
        ],
        // Firmware reads the loader's name from the header's `file`, the storm's clients
        // and some firmware from option 67: both are sent.
        "client-classes": [
            {
                "name": "ipxe",
                "test": "substring(option[77].hex,0,4) == 'iPXE'",
                "boot-file-name": script,
                "option-data": [{ "name": "boot-file-name", "data": script }],
            },
            {
                "name": "firmware",
                "test": "not member('ipxe')",
                "next-server": service,
                "boot-file-name": "undionly.kpxe",
                "option-data": [{ "name": "boot-file-name", "data": "undionly.kpxe" }],
            },
        ],
        "subnet4": [{
            "id": 1,
            "subnet": format!("{}/{}", plan.subnet.0, plan.subnet.1),
            "pools": [{ "pool": format!("{} - {}", plan.range.0, plan.range.1) }],
            "next-server": service,
            "option-data": [{ "name": "routers", "data": service }],
        }],
        "hooks-libraries": [
            { "library": hook("libdhcp_lease_cmds.so") },
            { "library": hook("libdhcp_ha.so"), "parameters": { "high-availability": [{
                "this-server-name": me.name,
                "mode": "load-balancing",
                "heartbeat-delay": t.heartbeat_delay_ms,
                "max-response-delay": t.max_response_delay_ms,
                "max-ack-delay": t.max_ack_delay_ms,
                "max-unacked-clients": t.max_unacked_clients,
                "multi-threading": {
                    "enable-multi-threading": true,
                    "http-dedicated-listener": true,
                    "http-listener-threads": 1,
                    "http-client-threads": 1,
                },
                "peers": peers,
            }]}},
        ],
        "loggers": [{
            "name": "kea-dhcp4",
            "output_options": [{ "output": plan.log.display().to_string() }],
            "severity": "INFO",
        }],
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan<'a>(peers: &'a [Peer], me: usize) -> Plan<'a> {
        Plan {
            me,
            peers,
            service: Ipv4Addr::new(10, 78, 0, 2),
            interface: "s0",
            subnet: (Ipv4Addr::new(10, 78, 0, 0), 22),
            range: (Ipv4Addr::new(10, 78, 1, 0), Ipv4Addr::new(10, 78, 2, 250)),
            lease_s: 43200,
            http_port: 8080,
            hooks: Path::new("/usr/lib/x86_64-linux-gnu/kea/hooks"),
            timers: FASTEST,
            log: Path::new("/tmp/s2/kea.log"),
        }
    }

    #[test]
    fn each_member_is_one_of_a_load_balancing_pair_on_its_fixed_address() {
        let peers = [
            Peer {
                name: "s1".into(),
                address: Ipv4Addr::new(10, 78, 3, 254),
            },
            Peer {
                name: "s2".into(),
                address: Ipv4Addr::new(10, 78, 3, 253),
            },
        ];
        let c = config(&plan(&peers, 1));
        let ha = &c["Dhcp4"]["hooks-libraries"][1]["parameters"]["high-availability"][0];
        assert_eq!(ha["this-server-name"], "s2");
        assert_eq!(ha["mode"], "load-balancing");
        assert_eq!(ha["peers"][0]["role"], "primary");
        assert_eq!(ha["peers"][1]["role"], "secondary");
        assert_eq!(ha["peers"][1]["url"], "http://10.78.3.253:8001/");
        assert_eq!(ha["max-unacked-clients"], 0);
        assert_eq!(ha["heartbeat-delay"], 1000);
        assert_eq!(ha["multi-threading"]["http-dedicated-listener"], true);
        assert_eq!(
            c["Dhcp4"]["hooks-libraries"][0]["library"],
            "/usr/lib/x86_64-linux-gnu/kea/hooks/libdhcp_lease_cmds.so"
        );
        // The clients are sent to the member's service address, the one keepalived moves.
        let d = &c["Dhcp4"];
        assert_eq!(d["option-data"][0]["data"], "10.78.0.2");
        assert_eq!(d["subnet4"][0]["next-server"], "10.78.0.2");
        assert_eq!(d["subnet4"][0]["subnet"], "10.78.0.0/22");
        assert_eq!(
            d["subnet4"][0]["pools"][0]["pool"],
            "10.78.1.0 - 10.78.2.250"
        );
        assert_eq!(
            d["client-classes"][0]["boot-file-name"],
            "http://10.78.0.2:8080/boot/script/room.ipxe"
        );
        assert_eq!(d["client-classes"][1]["boot-file-name"], "undionly.kpxe");
    }
}

//! GRUB's config request (`grub/grub.cfg`, the same name for every client): answered for the
//! pool client whose lease holds the address it came from, with `boot::grub::config` from the
//! link its lease keeps. Anyone else gets nothing, as a stranger gets no iPXE script.

use super::identity::Identity;
use crate::boot::grub;
use crate::boot::leases::State;
use crate::config::Config;
use std::net::IpAddr;

/// The config for whoever asks from `peer`, or why there is none.
pub fn for_peer(
    config: &Config,
    identity: &Identity,
    peer: IpAddr,
) -> Result<String, &'static str> {
    let Some(mac) = identity.holder(peer) else {
        return Err("no lease holds this address");
    };
    let Some(member) = config.member(mac) else {
        return Err("no pool lists this client");
    };
    if !member.pool.secure_boot {
        return Err("the client's pool has no secure_boot");
    }
    let (link, client) = {
        let leases = identity.read();
        let client = leases
            .get(mac)
            .filter(|l| l.state == State::Bound)
            .map(|l| l.ip);
        (leases.link(mac).unwrap_or(config.server.address), client)
    };
    Ok(grub::config(config, &member, mac, link, client))
}

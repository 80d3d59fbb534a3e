//! GRUB's config request (`grub/grub.cfg`, the same name for every client): answered for the
//! pool client whose lease holds the address it came from, with `boot::grub::config` from the
//! link its lease keeps, for the architecture its firmware said. Anyone else gets nothing
//! (the name says no client). The iPXE script differs: its URL names the client
//! (`/boot/script/MAC.ipxe`), and it goes to anyone who asks unless `server.read_token` is
//! set, when only that client gets it without the token (`http::boot::boot_script`).

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
    let (link, client, arch) = {
        let leases = identity.read();
        let client = leases
            .get(mac)
            .filter(|l| l.state == State::Bound)
            .map(|l| l.ip);
        let link = leases.link(mac).unwrap_or(config.server.address);
        (link, client, leases.arch(mac))
    };
    if !grub::boots_grub(member.pool, arch) {
        return Err(
            "the client boots no GRUB: its pool has no secure_boot, its firmware is not ARM64",
        );
    }
    let member = member.on_arch(arch);
    let image = crate::image::serve::for_member(config, &member);
    Ok(grub::config(config, &member, &image, mac, link, client))
}

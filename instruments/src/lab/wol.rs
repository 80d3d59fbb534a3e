//! `bootpool lab --wake`: the lab's Wake-on-LAN listener, a UDP socket on port 9 in the lab's
//! network namespace, where the daemon's magic packets to the room's broadcast address
//! arrive; it says which MACs they wake, for the lab to power those VMs on.

use anyhow::Context as _;
use bootpool::config::Mac;

pub struct Listener {
    socket: std::net::UdpSocket,
}

impl Listener {
    /// Binds port 9 on every address of the lab's namespace. Bound before the daemon starts,
    /// so no packet is missed: those that come before the lab asks wait in the socket.
    pub fn bind() -> anyhow::Result<Listener> {
        let port = bootpool::proto::wol::PORT;
        let socket = std::net::UdpSocket::bind(("0.0.0.0", port))
            .with_context(|| format!("binding the Wake-on-LAN listener on UDP port {port}"))?;
        socket.set_nonblocking(true)?;
        Ok(Listener { socket })
    }

    /// The MACs of the magic packets that arrived since the last call, in the order they came
    /// (a datagram holding none is ignored).
    pub fn woken(&self) -> anyhow::Result<Vec<Mac>> {
        let mut macs = Vec::new();
        let mut buf = [0u8; 1500];
        loop {
            match self.socket.recv(&mut buf) {
                Ok(n) => macs.extend(bootpool::proto::wol::woken(&buf[..n]).map(Mac)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(macs),
                Err(e) => return Err(e).context("reading the Wake-on-LAN listener"),
            }
        }
    }
}

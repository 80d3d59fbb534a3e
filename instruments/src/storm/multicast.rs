//! The storm's multicast reference (`bootpool storm --swarm AGENT --multicast`, docs/storm.md
//! and docs/swarm.md): the same room gets its root image by udpcast (Debian's
//! `udpcast`, code nobody here wrote) instead of through bootpool's agents, as FOG and
//! Clonezilla send a disk image to a room, then reads it locally.
//!
//! - `Sender`: in the storm's (the server's) namespace, `udp-sender` of a copy of the image on
//!   the server's first link, run as user `nobody` so an nftables counter (`sent_by`) gives
//!   what it sent. It waits for the whole room to join (`--min-receivers`), then multicasts
//!   the image once at `--max-bitrate` (95% of a client's link, as an admin sets it: faster
//!   overruns the clients' ports), resending what receivers miss.
//! - Each client, when its root phase begins (`swarm::Agents` with `Engine::Multicast`), runs
//!   `udp-receiver` into a file of its own under /dev/shm and then `nbdkit file` of it on its
//!   127.0.0.1 port: its root's first read waits for the whole image.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// The rendezvous group sender and receivers find each other on (udpcast's default is the
/// interface's broadcast address, which the storm's addresses leave unset).
pub const RENDEZVOUS: Ipv4Addr = Ipv4Addr::new(239, 255, 90, 1);
/// udpcast's ports: this one and the next.
pub const PORTBASE: u16 = 9000;
/// The nftables table of the sender's counter.
const TABLE: &str = "bootpool_storm_udpcast";
/// The user the sender runs as.
const SENDER_USER: &str = "nobody";
/// How long the sender waits for the room after its first receiver joined.
pub const ROOM_WITHIN_S: u64 = 120;
/// A udpcast data packet's headers below its payload (IPv4 and UDP: 20 + 8).
const UDP_HEADERS: u64 = 28;

/// udp-sender, its counter and the folder of the image and the clients' copies; ended and
/// removed when dropped.
pub struct Sender {
    /// Where each client writes its copy (`cN/NAME`).
    pub dir: PathBuf,
    child: Child,
    counter: super::sent_by::Counter,
}

impl Sender {
    /// Writes a copy of `image` (named `name`) and starts udp-sender of it on link `dev` for
    /// `clients` receivers at `bitrate` bits a second; `run_dir` takes its log.
    pub fn start(
        name: &str,
        image: &[u8],
        dev: &str,
        clients: usize,
        bitrate: u64,
        run_dir: &Path,
    ) -> anyhow::Result<Sender> {
        let dir = PathBuf::from(format!(
            "/dev/shm/bootpool-storm-udpcast-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sender"))?;
        let file = dir.join("sender").join(name);
        std::fs::write(&file, image)?;
        use std::os::unix::fs::PermissionsExt;
        for p in [dir.clone(), dir.join("sender")] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
        }
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
        let counter = super::sent_by::Counter::start(TABLE, SENDER_USER, 0)?;
        let mut cmd = counter.as_user();
        cmd.arg("udp-sender")
            .arg("--file")
            .arg(&file)
            .args(sender_args(dev, clients, bitrate));
        let child =
            super::procs::spawn_logged(&mut cmd, &run_dir.join("udp-sender.log")).map_err(|e| {
                anyhow::anyhow!("starting udp-sender (scripts/setup installs udpcast): {e:#}")
            })?;
        Ok(Sender {
            dir,
            child,
            counter,
        })
    }

    /// The UDP payload udp-sender sent so far.
    pub fn payload_sent(&self) -> Option<u64> {
        self.counter
            .payload(super::sent_by::TCP_HEADERS, UDP_HEADERS)
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// udp-sender's options after `--file`: on `dev`, no keyboard, starting once `clients`
/// receivers joined (or `ROOM_WITHIN_S` after the first), at most `bitrate`.
fn sender_args(dev: &str, clients: usize, bitrate: u64) -> Vec<String> {
    [
        "--interface",
        dev,
        "--nokbd",
        "--full-duplex",
        "--min-receivers",
        &clients.to_string(),
        "--max-wait",
        &ROOM_WITHIN_S.to_string(),
        "--max-bitrate",
        &format!("{}k", bitrate / 1000),
        "--mcast-rdv-address",
        &RENDEZVOUS.to_string(),
        "--portbase",
        &PORTBASE.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A client's command: udp-receiver into `file` on `dev`, then nbdkit serving that file on
/// 127.0.0.1:`port` (the same process, so its CPU time counts the receiver's too).
pub fn client_command(dev: &str, file: &Path, port: u16) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(
            "udp-receiver --file \"$1\" --interface \"$2\" --nokbd --mcast-rdv-address \"$3\" \
             --portbase \"$4\" </dev/null && exec nbdkit -f -i 127.0.0.1 -p \"$5\" file \"$1\"",
        )
        .arg("udpcast-client")
        .arg(file)
        .arg(dev)
        .arg(RENDEZVOUS.to_string())
        .arg(PORTBASE.to_string())
        .arg(port.to_string());
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sender_waits_for_the_room_and_keeps_to_its_rate() {
        let a = sender_args("s0", 40, 95_000_000).join(" ");
        assert_eq!(
            a,
            "--interface s0 --nokbd --full-duplex --min-receivers 40 --max-wait 120 \
             --max-bitrate 95000k --mcast-rdv-address 239.255.90.1 --portbase 9000"
        );
        let c = client_command("c3", Path::new("/dev/shm/x/c3/root.img"), 10809);
        let args: Vec<String> = c.get_args().map(|a| a.to_string_lossy().into()).collect();
        assert_eq!(
            args[2..],
            [
                "udpcast-client",
                "/dev/shm/x/c3/root.img",
                "c3",
                "239.255.90.1",
                "9000",
                "10809"
            ]
        );
    }
}

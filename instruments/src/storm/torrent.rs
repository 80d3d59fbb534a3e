//! The storm's reference swarm (`bootpool storm --swarm AGENT --torrent`, docs/storm.md and
//! docs/swarm.md): the same room reads its root through nbdkit's torrent plugin (libtorrent, a
//! full BitTorrent client, code nobody here wrote) in every client's namespace instead of
//! through bootpool-agent, so the agent's swarm is measured beside a shipped one on the same
//! bytes.
//!
//! - `metainfo`: a BitTorrent v1 `.torrent` of the root image, its pieces the agent's chunks
//!   (256 KiB), announcing to the tracker beside the server.
//! - `Seed`: in the storm's (the server's) namespace, opentracker on the server's address
//!   (port 6969, the torrent's info hash its only whitelisted one) and the seed, an `nbdkit
//!   torrent` of a copy of the image run as user `nobody`, so that an nftables counter on that
//!   user's sockets (TCP and uTP) gives what the seed sent the room. Ready once the tracker counts one
//!   complete copy.
//! - Each client starts `nbdkit torrent` on its 127.0.0.1 port when its root phase begins
//!   (`swarm::Agents` with `Engine::Torrent`), its pieces kept in a folder of its own under
//!   /dev/shm, as the agent keeps its chunks in memory.

use anyhow::{Context, bail};
use sha1::{Digest, Sha1};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The tracker's port (HTTP and UDP), opentracker's default.
pub const TRACKER_PORT: u16 = 6969;
/// The user the seed runs as: its sockets are the ones the counter counts.
const SEED_USER: &str = "nobody";
/// The nftables table of the seed's counter, in the storm's namespace.
const TABLE: &str = "bootpool_storm_seed";
/// A uTP packet's headers (IPv4, UDP and uTP's own: 20 + 8 + 20): libtorrent tries uTP
/// (BEP 29) before TCP.
const UTP_HEADERS: u64 = 48;
/// How long the seed has to check its copy and announce it.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// A bencoded value (BEP 3).
enum B<'a> {
    Int(u64),
    Bytes(&'a [u8]),
    Dict(BTreeMap<&'a [u8], B<'a>>),
}

impl B<'_> {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            B::Int(i) => out.extend_from_slice(format!("i{i}e").as_bytes()),
            B::Bytes(b) => {
                out.extend_from_slice(format!("{}:", b.len()).as_bytes());
                out.extend_from_slice(b);
            }
            // Keys sorted as raw bytes, as BEP 3 asks: a BTreeMap of byte strings is.
            B::Dict(d) => {
                out.push(b'd');
                for (k, v) in d {
                    B::Bytes(k).encode(out);
                    v.encode(out);
                }
                out.push(b'e');
            }
        }
    }
}

/// A `.torrent` file and its info hash.
pub struct Metainfo {
    pub bytes: Vec<u8>,
    pub info_hash: [u8; 20],
}

/// The single-file `.torrent` of `data` named `name`, in pieces of `piece` bytes (each piece's
/// SHA-1), announcing to `announce`.
pub fn metainfo(name: &str, data: &[u8], piece: usize, announce: &str) -> Metainfo {
    let pieces: Vec<u8> = data
        .chunks(piece)
        .flat_map(|p| Sha1::digest(p).to_vec())
        .collect();
    let info = B::Dict(BTreeMap::from([
        (&b"length"[..], B::Int(data.len() as u64)),
        (&b"name"[..], B::Bytes(name.as_bytes())),
        (&b"piece length"[..], B::Int(piece as u64)),
        (&b"pieces"[..], B::Bytes(&pieces)),
    ]));
    let mut info_bytes = Vec::new();
    info.encode(&mut info_bytes);
    let info_hash: [u8; 20] = Sha1::digest(&info_bytes).into();
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"d8:announce");
    B::Bytes(announce.as_bytes()).encode(&mut bytes);
    bytes.extend_from_slice(b"4:info");
    bytes.extend_from_slice(&info_bytes);
    bytes.push(b'e');
    Metainfo { bytes, info_hash }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The info hash as a URL's query value: every byte percent-encoded.
fn url_bytes(b: &[u8]) -> String {
    b.iter().map(|x| format!("%{x:02X}")).collect()
}

/// The `complete` count of a tracker's scrape answer (`d5:filesd20:HASHd8:completei1e...`).
pub fn complete(scrape: &[u8]) -> Option<u64> {
    let key = b"8:completei";
    let at = scrape.windows(key.len()).position(|w| w == key)? + key.len();
    let digits: Vec<u8> = scrape[at..]
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .copied()
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

/// The tracker and the seed, in the storm's namespace; ended (and the counter's table
/// removed, the folder deleted) when dropped.
pub struct Seed {
    pub torrent: PathBuf,
    /// Where each client keeps its pieces (`cache/cN`).
    pub cache: PathBuf,
    children: Vec<Child>,
    dir: PathBuf,
    counter: super::sent_by::Counter,
}

impl Seed {
    /// Writes the image's `.torrent` (named `name` inside it, announcing to `address`),
    /// starts the tracker and the seed, and returns once the tracker counts the seed's
    /// complete copy. `run_dir` takes their logs.
    pub fn start(
        name: &str,
        image: &[u8],
        address: Ipv4Addr,
        run_dir: &Path,
    ) -> anyhow::Result<Seed> {
        let chunk = bootpool::image::blocks::CHUNK as usize;
        let announce = format!("http://{address}:{TRACKER_PORT}/announce");
        let meta = metainfo(name, image, chunk, &announce);
        // Under /dev/shm: the seed's copy and the clients' pieces are in memory, as the
        // agents' chunks are; readable by the seed's user.
        let dir = PathBuf::from(format!(
            "/dev/shm/bootpool-storm-torrent-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["tracker", "seed", "cache"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let counter = super::sent_by::Counter::start(TABLE, SEED_USER, TRACKER_PORT)?;
        let mut seed = Seed {
            torrent: dir.join("root.torrent"),
            cache: dir.join("cache"),
            children: Vec::new(),
            dir: dir.clone(),
            counter,
        };
        std::fs::write(&seed.torrent, &meta.bytes)?;
        std::fs::write(
            dir.join("tracker/whitelist"),
            format!("{}\n", hex(&meta.info_hash)),
        )?;
        std::fs::write(dir.join("seed").join(name), image)?;
        use std::os::unix::fs::PermissionsExt;
        for p in [
            dir.clone(),
            dir.join("seed"),
            dir.join("cache"),
            dir.join("tracker"),
        ] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
        }
        // opentracker drops root for `-u` and chroots to `-d`: its whitelist is named inside.
        let tracker = super::procs::spawn_logged(
            Command::new("opentracker").args([
                "-i",
                &address.to_string(),
                "-p",
                &TRACKER_PORT.to_string(),
                "-P",
                &TRACKER_PORT.to_string(),
                "-w",
                "/whitelist",
                "-u",
                SEED_USER,
                "-d",
                &dir.join("tracker").display().to_string(),
            ]),
            &run_dir.join("opentracker.log"),
        )
        .context("starting opentracker (scripts/setup installs it)")?;
        seed.children.push(tracker);
        // The seed listens for NBD on the loopback only; nobody reads it there. It runs as
        // the counted user, in a folder of that user's to write in.
        let (uid, gid) = (seed.counter.uid, seed.counter.gid);
        std::os::unix::fs::chown(dir.join("seed"), Some(uid), Some(gid))?;
        std::os::unix::fs::chown(dir.join("seed").join(name), Some(uid), Some(gid))?;
        let nbdkit = super::procs::spawn_logged(
            seed.counter
                .as_user()
                .args(["nbdkit", "-f", "-i", "127.0.0.1", "-p", "10899", "torrent"])
                .arg(&seed.torrent)
                .arg(format!("cache={}", dir.join("seed").display())),
            &run_dir.join("seed.log"),
        )
        .context("starting the seed (nbdkit's torrent plugin; scripts/setup installs nbdkit)")?;
        seed.children.push(nbdkit);
        let scrape = format!(
            "http://{address}:{TRACKER_PORT}/scrape?info_hash={}",
            url_bytes(&meta.info_hash)
        );
        let until = Instant::now() + READY_WITHIN;
        loop {
            let got = ureq::get(&scrape)
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_vec().ok());
            if got.as_deref().and_then(complete).unwrap_or(0) >= 1 {
                return Ok(seed);
            }
            for c in &mut seed.children {
                if let Ok(Some(status)) = c.try_wait() {
                    bail!(
                        "the tracker or the seed exited ({status}): see {}",
                        run_dir.display()
                    );
                }
            }
            if Instant::now() >= until {
                bail!(
                    "the seed was not announced complete within {} s (see {}/seed.log)",
                    READY_WITHIN.as_secs(),
                    run_dir.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The payload the seed sent so far, over TCP and uTP.
    pub fn payload_sent(&self) -> Option<u64> {
        self.counter
            .payload(super::sent_by::TCP_HEADERS, UTP_HEADERS)
    }
}

impl Drop for Seed {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_torrent_is_bencoded_with_sorted_keys_and_a_hash_a_piece() {
        let data = vec![7u8; 5];
        let m = metainfo("root.img", &data, 2, "http://10.0.0.1:6969/announce");
        let p = |b: &[u8]| Sha1::digest(b).to_vec();
        let mut pieces = p(&[7, 7]);
        pieces.extend(p(&[7, 7]));
        pieces.extend(p(&[7]));
        let mut info = b"d6:lengthi5e4:name8:root.img12:piece lengthi2e6:pieces60:".to_vec();
        info.extend(&pieces);
        info.push(b'e');
        let mut want = b"d8:announce29:http://10.0.0.1:6969/announce4:info".to_vec();
        want.extend(&info);
        want.push(b'e');
        assert_eq!(m.bytes, want);
        assert_eq!(m.info_hash.to_vec(), Sha1::digest(&info).to_vec());
        assert_eq!(url_bytes(&[0x0a, 0xff]), "%0A%FF");
        assert_eq!(hex(&[0x0a, 0xff]), "0aff");
    }

    #[test]
    fn a_scrape_says_how_many_hold_the_whole() {
        let scrape =
            b"d5:filesd20:aaaaaaaaaaaaaaaaaaaad8:completei3e10:downloadedi0e10:incompletei2eeee";
        assert_eq!(complete(scrape), Some(3));
        assert_eq!(complete(b"d5:filesdee"), None);
    }
}

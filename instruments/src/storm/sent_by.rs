//! What one user's sockets sent, counted by nftables in the storm's (the server's) namespace:
//! the reference swarms' senders (`torrent.rs`'s seed, `multicast.rs`'s udp-sender) run as
//! that user, so their bytes are told apart from bootpool's on the same links.

use anyhow::{Context, bail};
use std::process::{Command, Stdio};

/// An IPv4 TCP segment's headers with timestamps (20 + 32 bytes).
pub const TCP_HEADERS: u64 = 52;

/// A counter of user `uid`'s IPv4 TCP and UDP packets sent, leaving out those from port
/// `except` (a tracker's answers), in an nftables table of its own (removed when dropped).
pub struct Counter {
    table: String,
    pub uid: u32,
    pub gid: u32,
}

impl Counter {
    /// Counts what user `user` sends from now on, in table `table` (made afresh).
    pub fn start(table: &str, user: &str, except: u16) -> anyhow::Result<Counter> {
        let (uid, gid) = user_ids(user)?;
        delete(table);
        let rules = format!(
            "table inet {table} {{\n  chain out {{\n    type filter hook output priority 0; policy accept;\n    \
             meta nfproto ipv4 meta skuid {uid} tcp sport != {except} counter\n    \
             meta nfproto ipv4 meta skuid {uid} udp sport != {except} counter\n  }}\n}}\n"
        );
        let mut child = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .context("running nft (nftables)")?;
        use std::io::Write;
        child
            .stdin
            .take()
            .context("nft's stdin")?
            .write_all(rules.as_bytes())?;
        let status = child.wait()?;
        if !status.success() {
            bail!("nft could not add the counter of user {user}'s packets ({status})");
        }
        Ok(Counter {
            table: table.to_string(),
            uid,
            gid,
        })
    }

    /// The payload sent so far: each counter's bytes less its packets' headers, `tcp` bytes a
    /// TCP packet and `udp` a UDP one (IP and UDP headers, and any of the protocol's own
    /// above them).
    pub fn payload(&self, tcp: u64, udp: u64) -> Option<u64> {
        let out = Command::new("nft")
            .args(["list", "table", "inet", &self.table])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let [(tcp_packets, tcp_bytes), (udp_packets, udp_bytes)] = counters(&text)[..] else {
            return None;
        };
        Some(
            tcp_bytes.saturating_sub(tcp_packets * tcp)
                + udp_bytes.saturating_sub(udp_packets * udp),
        )
    }

    /// The command line prefix that runs a program as the counted user: setpriv, so its
    /// sockets are the user's from the start (a program's own `-u` may open some first).
    pub fn as_user(&self) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.args([
            &format!("--reuid={}", self.uid),
            &format!("--regid={}", self.gid),
            "--clear-groups",
        ]);
        cmd
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        delete(&self.table);
    }
}

fn delete(table: &str) {
    let _ = Command::new("nft")
        .args(["delete", "table", "inet", table])
        .stderr(Stdio::null())
        .status();
}

/// Each `counter packets P bytes B` in `nft list`'s text, in order.
fn counters(text: &str) -> Vec<(u64, u64)> {
    text.split("counter packets ")
        .skip(1)
        .filter_map(|rest| {
            let mut words = rest.split_whitespace();
            let packets = words.next()?.parse().ok()?;
            match (words.next(), words.next()) {
                (Some("bytes"), Some(b)) => Some((packets, b.parse().ok()?)),
                _ => None,
            }
        })
        .collect()
}

/// The user and group ids of user `name`, from /etc/passwd.
fn user_ids(name: &str) -> anyhow::Result<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    passwd_ids(&passwd, name).with_context(|| format!("no user `{name}` in /etc/passwd"))
}

fn passwd_ids(passwd: &str, name: &str) -> Option<(u32, u32)> {
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 3 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nft_lists_its_counters_in_order_and_passwd_its_ids() {
        let nft = "table inet t {\n\tchain out {\n\t\ttype filter hook output priority filter; policy accept;\n\t\tmeta skuid 65534 tcp sport != 6969 counter packets 12 bytes 9000\n\t\tmeta skuid 65534 udp sport != 6969 counter packets 3 bytes 200\n\t}\n}\n";
        assert_eq!(counters(nft), vec![(12, 9000), (3, 200)]);
        assert_eq!(counters("table inet t {}"), vec![]);
        let passwd = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
        assert_eq!(passwd_ids(passwd, "nobody"), Some((65534, 65534)));
        assert_eq!(passwd_ids(passwd, "nob"), None);
    }
}

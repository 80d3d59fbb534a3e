//! Who holds a port: the sockets `/proc/net/{tcp,udp}[6]` list on it and the processes whose
//! open files (`/proc/PID/fd`) are those sockets, so that a refused bind can name the program in
//! the way. Reports what the kernel lists; what to say about it is the caller's.

use std::collections::BTreeSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

/// Who holds a port, as far as this process may see.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Held {
    /// Each holding process: its PID and its name (`/proc/PID/comm`).
    pub programs: Vec<(u32, String)>,
    /// A socket on the port that no process owns: the kernel's own (knfsd, lockd).
    pub by_kernel: bool,
    /// Sockets on the port whose process this one cannot see (another user's, without root).
    pub unseen: bool,
}

/// One socket of a `/proc/net` table.
#[derive(Debug, PartialEq, Eq)]
struct Row {
    port: u16,
    /// TCP's LISTEN state (0A); a UDP socket is in the way whatever its state.
    listening: bool,
    /// 0 for a socket that belongs to the kernel.
    inode: u64,
}

/// A line of `/proc/net/tcp` (or udp, tcp6, udp6): `sl local rem st tx:rx tr:when retrnsmt uid
/// timeout inode ...`, the local address as `HEXADDR:HEXPORT`; `None` for the header.
fn row(line: &str) -> Option<Row> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (_, port) = fields.get(1)?.rsplit_once(':')?;
    Some(Row {
        port: u16::from_str_radix(port, 16).ok()?,
        listening: fields.get(3)? == &"0A",
        inode: fields.get(9)?.parse().ok()?,
    })
}

/// The inodes of the sockets in the way of a new `proto` socket on `port`, over IPv4 and IPv6
/// (a dual-stack IPv6 socket holds the IPv4 port too): for TCP the listening ones.
fn inodes(proto: Proto, port: u16) -> Vec<u64> {
    let tables: [&str; 2] = match proto {
        Proto::Tcp => ["/proc/net/tcp", "/proc/net/tcp6"],
        Proto::Udp => ["/proc/net/udp", "/proc/net/udp6"],
    };
    tables
        .iter()
        .filter_map(|t| std::fs::read_to_string(t).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(row)
                .filter(|r| r.port == port && (proto == Proto::Udp || r.listening))
                .map(|r| r.inode)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Who holds `port` for `proto`: the processes with one of its sockets open.
pub fn holders(proto: Proto, port: u16) -> Held {
    let inodes = inodes(proto, port);
    let mut held = Held {
        by_kernel: inodes.contains(&0),
        ..Held::default()
    };
    let mut wanted: BTreeSet<u64> = inodes.into_iter().filter(|&i| i != 0).collect();
    if wanted.is_empty() {
        return held;
    }
    let Ok(procs) = std::fs::read_dir("/proc") else {
        held.unseen = true;
        return held;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let mut holds = false;
        for fd in fds.flatten() {
            let Ok(link) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if let Some(inode) = socket_inode(&link.to_string_lossy())
                && wanted.remove(&inode)
            {
                holds = true;
            }
        }
        if holds {
            let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            held.programs.push((pid, name.trim().to_string()));
        }
        if wanted.is_empty() {
            break;
        }
    }
    held.unseen = !wanted.is_empty();
    held
}

/// The inode of an fd link `socket:[INODE]`.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_rows_of_proc_net() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
                   0: 00000000:006F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 16318 1 0000000000000000 100 0 0 10 0\n   \
                   1: 0100007F:0801 0100007F:A2C4 01 00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 20 4 30 10 -1";
        let rows: Vec<Row> = tcp.lines().filter_map(row).collect();
        assert_eq!(
            rows,
            [
                Row {
                    port: 111,
                    listening: true,
                    inode: 16318
                },
                Row {
                    port: 2049,
                    listening: false,
                    inode: 0
                }
            ]
        );
        assert_eq!(socket_inode("socket:[16318]"), Some(16318));
        assert_eq!(socket_inode("pipe:[16318]"), None);
    }

    /// A socket this process holds is found, named by this process's own name.
    #[test]
    fn names_this_process_as_the_holder_of_its_socket() {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        let held = holders(Proto::Udp, port);
        let me = std::process::id();
        assert!(held.programs.iter().any(|(pid, _)| *pid == me), "{held:?}");
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        assert!(
            holders(Proto::Tcp, port)
                .programs
                .iter()
                .any(|(pid, _)| *pid == me)
        );
        drop(tcp);
        assert_eq!(holders(Proto::Tcp, port), Held::default());
    }
}

//! The agent's server for its room's peers (docs/swarm.md, "Peers and the tracker"):
//! `GET /chunks/DIGEST/INDEX` over HTTP/1.1, kept alive, on the client's address (`--peers`),
//! answered only to the peers the tracker named (`swarm.rs`: 403 to anyone else) and only from
//! chunks held and checked (404 for one it lacks; one it is receiving is waited for up to
//! `HOLD_WAIT`, the merged miss the tracker counts on). A thread per connection, at most
//! `MAX_CONNS`; a request is read within `MAX_HEAD` bytes and `IDLE`.

use crate::chunks::Store;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How long a request for a chunk this agent is receiving waits for it.
pub const HOLD_WAIT: Duration = Duration::from_millis(800);
/// Connections served at once; past them a new one is closed at once.
const MAX_CONNS: usize = 64;
/// A request head longer than this closes the connection.
const MAX_HEAD: u64 = 8 * 1024;
/// A connection silent this long is closed.
const IDLE: Duration = Duration::from_secs(30);

/// Serves peers on `listener` for ever.
pub fn serve(listener: TcpListener, store: Arc<Store>) {
    let active = Arc::new(AtomicUsize::new(0));
    for s in listener.incoming().flatten() {
        if active.load(Ordering::Relaxed) >= MAX_CONNS {
            continue;
        }
        active.fetch_add(1, Ordering::Relaxed);
        let (store, active) = (store.clone(), active.clone());
        std::thread::spawn(move || {
            let _ = connection(s, &store);
            active.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// What a request line asks: chunk INDEX of the manifest DIGEST, or the status refusing it.
pub fn parse_request(line: &str) -> Result<(&str, u64), u16> {
    let mut words = line.trim_end().split(' ');
    let (method, target, version) = (words.next(), words.next(), words.next());
    if !matches!(version, Some("HTTP/1.1" | "HTTP/1.0")) || words.next().is_some() {
        return Err(400);
    }
    if method != Some("GET") {
        return Err(405);
    }
    let rest = target
        .and_then(|t| t.strip_prefix("/chunks/"))
        .ok_or(404u16)?;
    let (digest, index) = rest.split_once('/').ok_or(404u16)?;
    let plain = !index.is_empty()
        && index.bytes().all(|b| b.is_ascii_digit())
        && (index == "0" || !index.starts_with('0'));
    match index.parse::<u64>() {
        Ok(i) if plain => Ok((digest, i)),
        _ => Err(404),
    }
}

fn connection(s: TcpStream, store: &Store) -> std::io::Result<()> {
    let peer = s.peer_addr()?.ip();
    s.set_read_timeout(Some(IDLE))?;
    s.set_write_timeout(Some(IDLE))?;
    s.set_nodelay(true)?;
    let mut r = BufReader::new(s.try_clone()?);
    let mut w = s;
    let swarm = store
        .swarm
        .as_ref()
        .ok_or(std::io::ErrorKind::Unsupported)?;
    loop {
        let mut head = Vec::new();
        let mut limited = (&mut r).take(MAX_HEAD);
        loop {
            let before = head.len();
            if limited.read_until(b'\n', &mut head)? == 0 {
                return Ok(());
            }
            if head.ends_with(b"\r\n\r\n") || head.ends_with(b"\n\n") || head.len() == before {
                break;
            }
            if head.len() as u64 >= MAX_HEAD {
                return Ok(());
            }
        }
        let text = String::from_utf8_lossy(&head);
        let line = text.lines().next().unwrap_or_default();
        let has_body = text.lines().skip(1).any(|h| {
            h.split_once(':').is_some_and(|(n, v)| {
                (n.eq_ignore_ascii_case("content-length") && v.trim() != "0")
                    || n.eq_ignore_ascii_case("transfer-encoding")
            })
        });
        let close = has_body
            || text
                .lines()
                .any(|h| h.to_ascii_lowercase().replace(' ', "") == "connection:close");
        let answer = match parse_request(line) {
            Err(status) => Err(status),
            Ok(_) if has_body => Err(400),
            Ok((digest, _)) if digest != swarm.digest() => Err(404),
            Ok(_) if !swarm.may_serve(peer, &store.sources) => Err(403),
            Ok((_, index)) => store.held_within(index, HOLD_WAIT).ok_or(404),
        };
        match answer {
            Ok(bytes) => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\r\n",
                    bytes.len()
                );
                w.write_all(head.as_bytes())?;
                w.write_all(&bytes)?;
                swarm.counts.served.fetch_add(1, Ordering::Relaxed);
            }
            Err(status) => {
                let why = match status {
                    403 => "not a peer the tracker named",
                    404 => "no such chunk held here",
                    405 => "only GET",
                    _ => "a malformed request",
                };
                let head = format!(
                    "HTTP/1.1 {status} {why}\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n{why}\n",
                    why.len() + 1
                );
                w.write_all(head.as_bytes())?;
            }
        }
        if close {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_line_names_a_chunk_or_is_refused() {
        let d = "ab".repeat(32);
        let line = format!("GET /chunks/{d}/12 HTTP/1.1\r\n");
        assert_eq!(parse_request(&line), Ok((d.as_str(), 12)));
        assert_eq!(
            parse_request(&format!("GET /chunks/{d}/0 HTTP/1.0")),
            Ok((d.as_str(), 0))
        );
        assert_eq!(
            parse_request(&format!("POST /chunks/{d}/1 HTTP/1.1")),
            Err(405)
        );
        assert_eq!(
            parse_request(&format!("GET /chunks/{d}/01 HTTP/1.1")),
            Err(404)
        );
        assert_eq!(
            parse_request(&format!("GET /chunks/{d}/-1 HTTP/1.1")),
            Err(404)
        );
        assert_eq!(
            parse_request(&format!("GET /chunks/{d} HTTP/1.1")),
            Err(404)
        );
        assert_eq!(parse_request("GET /boot/demo HTTP/1.1"), Err(404));
        assert_eq!(parse_request("GET /chunks/x/1"), Err(400));
        assert_eq!(parse_request("SSH-2.0-OpenSSH"), Err(400));
    }
}

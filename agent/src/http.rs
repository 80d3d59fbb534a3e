//! The agent's HTTP: a plain HTTP/1.1 GET over std's `TcpStream`, kept alive between
//! requests, with a `Content-Length` body read whole (the daemon's block routes always send
//! one). The response head is read by `parse_head`, pure. No TLS: what the agent fetches is
//! checked against its SHA-256 (docs/swarm.md), not trusted for the channel.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// How long a connect, or a read or write on a connection without a byte moving, may take
/// before the fetch counts as failed (and goes to the next source, `sources.rs`): a server
/// that died with its host, or whose address is held by no one, costs a fetch 2 s.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// A response head longer than this is refused.
const MAX_HEAD: usize = 16 * 1024;

/// An `http://HOST[:PORT]/PATH` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// HOST[:PORT] as given, for the `Host` header.
    pub authority: String,
    pub host: String,
    pub port: u16,
    /// Starts with `/`.
    pub path: String,
}

impl Url {
    pub fn parse(s: &str) -> Result<Url, String> {
        let rest = s
            .strip_prefix("http://")
            .ok_or_else(|| format!("`{s}` is not an http:// URL"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
                let port = p
                    .parse::<u16>()
                    .map_err(|_| format!("`{p}` in `{s}` is not a port"))?;
                (h.trim_start_matches('[').trim_end_matches(']'), port)
            }
            _ => (authority, 80),
        };
        if host.is_empty() {
            return Err(format!("`{s}` names no host"));
        }
        Ok(Url {
            authority: authority.to_string(),
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }

    /// The same server with another path.
    pub fn with_path(&self, path: String) -> Url {
        Url {
            path,
            ..self.clone()
        }
    }
}

/// Why a GET gave no body.
#[derive(Debug)]
pub enum Error {
    Io(std::io::Error),
    /// A status other than 200, with the start of its body.
    Status(u16, String),
    Malformed(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::Status(code, body) => write!(f, "HTTP {code}: {}", body.trim_end()),
            Error::Malformed(why) => write!(f, "a malformed response: {why}"),
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

/// What a response head says that the agent needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub length: u64,
    /// The server closes the connection after this response.
    pub close: bool,
}

/// Reads a response head (the bytes up to and including the blank line).
pub fn parse_head(head: &[u8]) -> Result<Head, String> {
    let text = std::str::from_utf8(head).map_err(|_| "a head that is not text".to_string())?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(format!("status line `{status_line}`"));
    }
    let status = parts
        .next()
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("status line `{status_line}`"))?;
    let (mut length, mut close) = (None, version == "HTTP/1.0");
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("header line `{line}`"))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n = value
                .parse::<u64>()
                .map_err(|_| format!("Content-Length `{value}`"))?;
            if length.is_some_and(|l| l != n) {
                return Err("two Content-Lengths".into());
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(format!(
                "Transfer-Encoding `{value}` (a length is expected)"
            ));
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        }
    }
    Ok(Head {
        status,
        length: length.ok_or("no Content-Length")?,
        close,
    })
}

/// One kept-alive connection to a server.
pub struct Conn {
    stream: BufReader<TcpStream>,
    /// The server said it closes after the last response.
    closed: bool,
    /// How long a read may wait for its next byte.
    io: Duration,
    /// When the next request's answer must be in whole (`within`), if ever.
    deadline: Option<std::time::Instant>,
}

impl Conn {
    pub fn connect(url: &Url) -> Result<Conn, Error> {
        Conn::connect_within(url, CONNECT_TIMEOUT, IO_TIMEOUT)
    }

    /// A connection whose connect may take `connect` and whose reads and writes may each
    /// wait `io` (a peer in the room is given less than a server: `swarm.rs`).
    pub fn connect_within(url: &Url, connect: Duration, io: Duration) -> Result<Conn, Error> {
        let addrs: Vec<SocketAddr> = (url.host.as_str(), url.port).to_socket_addrs()?.collect();
        let mut last = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, connect) {
                Ok(s) => {
                    s.set_read_timeout(Some(io))?;
                    s.set_write_timeout(Some(io))?;
                    s.set_nodelay(true)?;
                    return Ok(Conn {
                        stream: BufReader::with_capacity(64 * 1024, s),
                        closed: false,
                        io,
                        deadline: None,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(Error::Io(last.unwrap_or_else(|| {
            std::io::Error::other(format!("{} has no address", url.host))
        })))
    }

    /// The next request's whole answer must arrive within `total` (a peer that sends, but
    /// slowly, is then left as a silent one is); past it the read fails with `TimedOut` and
    /// the connection is closed.
    pub fn within(&mut self, total: Duration) {
        self.deadline = Some(std::time::Instant::now() + total);
    }

    /// Sets the socket's read timeout to what is left of `io` and the deadline.
    fn pace(&mut self) -> std::io::Result<()> {
        let Some(d) = self.deadline else {
            return Ok(());
        };
        let left = d
            .checked_duration_since(std::time::Instant::now())
            .filter(|l| !l.is_zero())
            .ok_or(std::io::ErrorKind::TimedOut)?;
        self.stream
            .get_ref()
            .set_read_timeout(Some(left.min(self.io)))
    }

    /// Whether the connection may carry another request.
    pub fn reusable(&self) -> bool {
        !self.closed
    }

    /// GETs `url`'s path; its body if the status is 200 and it is at most `max` bytes.
    pub fn get(&mut self, url: &Url, max: u64) -> Result<Vec<u8>, Error> {
        self.request("GET", url, None, max, |n| vec![0; n])
    }

    /// As `get`, the body read straight into `buffer(its length)` (a chunk's place in the
    /// slabs, `slabs.rs`); an error's body is read aside.
    pub fn get_into<B: std::ops::DerefMut<Target = [u8]>>(
        &mut self,
        url: &Url,
        max: u64,
        buffer: impl FnOnce(usize) -> B,
    ) -> Result<B, Error> {
        self.request("GET", url, None, max, buffer)
    }

    /// POSTs `body` to `url`'s path; the answer's body as `get` takes it.
    pub fn post(&mut self, url: &Url, body: &[u8], max: u64) -> Result<Vec<u8>, Error> {
        self.request("POST", url, Some(body), max, |n| vec![0; n])
    }

    fn request<B: std::ops::DerefMut<Target = [u8]>>(
        &mut self,
        method: &str,
        url: &Url,
        body: Option<&[u8]>,
        max: u64,
        buffer: impl FnOnce(usize) -> B,
    ) -> Result<B, Error> {
        let mut request = format!(
            "{method} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: bootpool-agent/{}\r\n",
            url.path,
            url.authority,
            env!("CARGO_PKG_VERSION")
        )
        .into_bytes();
        if let Some(body) = body {
            request.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
            request.extend_from_slice(b"Content-Type: text/plain\r\n\r\n");
            request.extend_from_slice(body);
        } else {
            request.extend_from_slice(b"\r\n");
        }
        self.stream.get_mut().write_all(&request)?;
        let mut head = Vec::with_capacity(512);
        loop {
            if let Err(e) = self.pace() {
                self.closed = true;
                return Err(e.into());
            }
            let n = self.stream.read_until(b'\n', &mut head)?;
            if n == 0 {
                self.closed = true;
                return Err(Error::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
            if head.ends_with(b"\r\n\r\n") {
                break;
            }
            if head.len() > MAX_HEAD {
                self.closed = true;
                return Err(Error::Malformed(format!("a head over {MAX_HEAD} bytes")));
            }
        }
        let h = parse_head(&head).map_err(|e| {
            self.closed = true;
            Error::Malformed(e)
        })?;
        self.closed |= h.close;
        if h.length > max.max(4096) {
            self.closed = true;
            return Err(Error::Malformed(format!(
                "a body of {} bytes, over {max}",
                h.length
            )));
        }
        if h.status != 200 || h.length > max {
            let mut body = vec![0; h.length as usize];
            self.body(&mut body)?;
            if h.status != 200 {
                body.truncate(200);
                return Err(Error::Status(
                    h.status,
                    String::from_utf8_lossy(&body).into(),
                ));
            }
            return Err(Error::Malformed(format!("a body of {} bytes", h.length)));
        }
        let mut body = buffer(h.length as usize);
        self.body(&mut body)?;
        Ok(body)
    }

    /// Reads the body, `into.len()` bytes, into `into`.
    fn body(&mut self, into: &mut [u8]) -> Result<(), Error> {
        let mut got = 0;
        while got < into.len() {
            let read = self
                .pace()
                .and_then(|()| self.stream.read(&mut into[got..]));
            match read {
                Ok(0) => {
                    self.closed = true;
                    return Err(Error::Io(std::io::ErrorKind::UnexpectedEof.into()));
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.closed = true;
                    return Err(e.into());
                }
            }
        }
        self.deadline = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_gives_host_port_and_path() {
        let u = Url::parse("http://10.0.0.1:8080/boot/demo/blocks/ab").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("10.0.0.1", 8080));
        assert_eq!(u.path, "/boot/demo/blocks/ab");
        assert_eq!(u.authority, "10.0.0.1:8080");
        let u = Url::parse("http://server").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("server", 80, "/")
        );
        let u = Url::parse("http://[fd00::1]:81/x").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("fd00::1", 81));
        assert!(Url::parse("https://server/").is_err());
        assert!(Url::parse("http://:80/").is_err());
        assert!(Url::parse("http://server:port/").is_err());
    }

    #[test]
    fn a_head_gives_status_length_and_whether_the_server_closes() {
        let h =
            parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\netag: \"x\"\r\n\r\n").unwrap();
        assert_eq!(
            h,
            Head {
                status: 200,
                length: 12,
                close: false
            }
        );
        let h =
            parse_head(b"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 3\r\n\r\n")
                .unwrap();
        assert_eq!(
            h,
            Head {
                status: 404,
                length: 3,
                close: true
            }
        );
        assert!(
            parse_head(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
                .unwrap()
                .close
        );
        assert!(parse_head(b"HTTP/1.1 200 OK\r\n\r\n").is_err(), "no length");
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").is_err());
        assert!(
            parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
                .is_err()
        );
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n").is_err());
    }
}

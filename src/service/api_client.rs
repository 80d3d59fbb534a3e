//! The admin commands' one request to the running daemon's API (`bootpool next-boot`,
//! `bootpool wake`): HTTP/1.1 over TCP to `server.http` (its address, or `server.address` when
//! it listens on every address), with the admin token as a bearer header; the answer's status
//! and body. Blocking and bounded: 10 s to connect, 30 s for the answer.

use crate::config::Config;
use anyhow::{Context, bail};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Where the API is reached from this host for `config`.
pub fn api_address(config: &Config) -> SocketAddr {
    let http = config.server.http;
    match http.ip().is_unspecified() {
        true => SocketAddr::new(config.server.address.into(), http.port()),
        false => http,
    }
}

/// The admin token: `$BOOTPOOL_ADMIN_TOKEN`, else `server.admin_token`.
fn admin_token(config: &Config) -> anyhow::Result<String> {
    if let Ok(t) = std::env::var("BOOTPOOL_ADMIN_TOKEN")
        && !t.is_empty()
    {
        return Ok(t);
    }
    match &config.server.admin_token {
        Some(t) => Ok(t.clone()),
        None => bail!(
            "actions need the admin token: set server.admin_token in the config (the daemon's \
             too) or BOOTPOOL_ADMIN_TOKEN"
        ),
    }
}

/// POSTs `body` (JSON) to `path` with the admin token; the answer's body when its status is
/// 2xx, else an error holding the status and what the daemon said.
pub fn post(config: &Config, path: &str, body: &serde_json::Value) -> anyhow::Result<String> {
    let token = admin_token(config)?;
    let addr = api_address(config);
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .with_context(|| format!("connecting to bootpool's API at {addr} (server.http)"))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    stream
        .take(1 << 20)
        .read_to_end(&mut answer)
        .with_context(|| format!("reading the answer of {addr}"))?;
    let (status, body) = parse(&answer).with_context(|| format!("the answer of {addr}"))?;
    match status {
        200..=299 => Ok(body),
        _ => bail!("{path}: {status}: {}", body.trim_end()),
    }
}

/// An HTTP/1.1 answer's status and body (whole, or de-chunked).
fn parse(answer: &[u8]) -> anyhow::Result<(u16, String)> {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text.split_once("\r\n\r\n").context("no end of headers")?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no status line")?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = match chunked {
        true => dechunk(body),
        false => body.to_string(),
    };
    Ok((status, body))
}

/// A chunked body's data.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn answers_are_read_whole_or_chunked() {
        let plain = b"HTTP/1.1 409 Conflict\r\ncontent-length: 4\r\n\r\nno\r\n";
        assert_eq!(super::parse(plain).unwrap(), (409, "no\r\n".into()));
        let chunked =
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\n{\"a\r\n2\r\n\":\r\n0\r\n\r\n";
        assert_eq!(super::parse(chunked).unwrap(), (200, "{\"a\":".into()));
        assert!(super::parse(b"garbage").is_err());
    }
}

//! The one HTTP request a pull makes at a time (`pull.rs`): `GET` over plain HTTP/1.1 to a
//! member's base URL (`http://HOST:PORT`), the read token as a bearer header, the answer's
//! body streamed into a writer and cut at a limit. Blocking and bounded: 10 s to connect,
//! 30 s of silence ends it. A body shorter than its `Content-Length` is an error (a truncated
//! copy), whatever the bytes would hash to.

use anyhow::{Context as _, bail};
use std::io::{BufRead as _, BufReader, Read as _, Write};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::time::Duration;

/// A member's base URL, checked: `http://HOST[:PORT][/PREFIX]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    /// `HOST:PORT` (port 80 if none was given).
    pub authority: String,
    /// What the paths go under (`""`, or `/prefix` without a trailing slash).
    pub prefix: String,
    /// As given, for messages.
    pub shown: String,
}

impl Base {
    pub fn parse(url: &str) -> anyhow::Result<Base> {
        let Some(rest) = url.strip_prefix("http://") else {
            if url.starts_with("https://") {
                bail!("`{url}`: a pull speaks plain http:// (its objects are checked by hash)");
            }
            bail!("`{url}` is not an http:// URL (http://HOST:PORT, a member's server.http)");
        };
        let (host, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if host.is_empty() {
            bail!("`{url}` names no host");
        }
        let authority = match host.rsplit_once(':') {
            Some((_, port)) if !host.ends_with(']') => {
                port.parse::<u16>()
                    .with_context(|| format!("`{url}`: `{port}` is not a port"))?;
                host.to_string()
            }
            _ => format!("{host}:80"),
        };
        Ok(Base {
            authority,
            prefix: prefix.to_string(),
            shown: url.trim_end_matches('/').to_string(),
        })
    }
}

/// What a `get` answered with.
#[derive(Debug, PartialEq, Eq)]
pub enum Got {
    /// 200: this many body bytes were written.
    Body(u64),
    /// Another status and what the server said.
    Status(u16, String),
}

/// `GET base/path` with `token`; a 200's body goes to `sink`, refused past `limit` bytes.
pub fn get(
    base: &Base,
    path: &str,
    token: Option<&str>,
    limit: u64,
    sink: &mut dyn Write,
) -> anyhow::Result<Got> {
    let addr = base
        .authority
        .to_socket_addrs()
        .with_context(|| format!("{}: resolving {}", base.shown, base.authority))?
        .next()
        .with_context(|| format!("{}: {} has no address", base.shown, base.authority))?;
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .with_context(|| format!("connecting to {}", base.shown))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!(
        "GET {}{path} HTTP/1.1\r\nHost: {}\r\n{auth}Connection: close\r\n\r\n",
        base.prefix, base.authority
    );
    (&stream).write_all(request.as_bytes())?;
    let mut r = BufReader::with_capacity(1 << 16, &stream);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("{}: not an HTTP answer: `{}`", base.shown, line.trim()))?;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            bail!("{}{path}: the answer ends in its headers", base.shown);
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = v.trim().parse().ok(),
                "transfer-encoding" => chunked = v.to_ascii_lowercase().contains("chunked"),
                _ => {}
            }
        }
    }
    if chunked {
        bail!(
            "{}{path}: a chunked answer (bootpool sends a length)",
            base.shown
        );
    }
    if status != 200 {
        let mut said = String::new();
        let _ = r.take(4096).read_to_string(&mut said);
        return Ok(Got::Status(status, said.trim().to_string()));
    }
    let Some(length) = length else {
        bail!("{}{path}: the answer has no Content-Length", base.shown);
    };
    if length > limit {
        bail!(
            "{}{path}: {length} bytes, more than the {limit} expected",
            base.shown
        );
    }
    let copied = std::io::copy(&mut (&mut r).take(length), sink)
        .with_context(|| format!("{}{path}: reading the body", base.shown))?;
    if copied < length {
        bail!(
            "{}{path}: truncated: {copied} of {length} bytes arrived",
            base.shown
        );
    }
    Ok(Got::Body(copied))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        let b = Base::parse("http://10.0.0.2:8080/").unwrap();
        assert_eq!(
            (b.authority.as_str(), b.prefix.as_str()),
            ("10.0.0.2:8080", "")
        );
        let b = Base::parse("http://boot2.example/bp").unwrap();
        assert_eq!(
            (b.authority.as_str(), b.prefix.as_str()),
            ("boot2.example:80", "/bp")
        );
        assert!(Base::parse("https://x").is_err());
        assert!(Base::parse("ftp://x").is_err());
        assert!(Base::parse("http://x:port").is_err());
        assert!(Base::parse("http:///x").is_err());
    }
}

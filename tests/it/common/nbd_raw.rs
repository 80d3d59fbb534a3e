//! A deliberately small NBD client written from the protocol document, for driving the server
//! with input no real client sends (bad magic, huge options, reads past the end, unknown
//! commands, pipelined bursts). Every wait is bounded; a stall panics.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(10);

pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_ERR_UNSUP: u32 = 0x8000_0001;
pub const REP_ERR_INVALID: u32 = 0x8000_0003;
pub const REP_ERR_UNKNOWN: u32 = 0x8000_0006;
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const EPERM: u32 = 1;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;

pub struct Raw {
    pub s: TcpStream,
}

async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("nbd server stalled on {what}"))
}

impl Raw {
    /// Connects and checks the newstyle greeting; the client flags are still to send.
    pub async fn greeted(addr: SocketAddr) -> Raw {
        let s = bounded("connect", TcpStream::connect(addr)).await.unwrap();
        let mut raw = Raw { s };
        let g = raw.read(18).await;
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(g[17] & 1, 1, "fixed newstyle offered");
        raw
    }

    /// Like `connect`, from another loopback address (127.0.0.2, ...): another client to
    /// the server, which tells clients apart by address.
    pub async fn connect_from(addr: SocketAddr, from: std::net::Ipv4Addr) -> Raw {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind((from, 0).into()).unwrap();
        let s = bounded("connect", sock.connect(addr)).await.unwrap();
        let mut raw = Raw { s };
        let g = raw.read(18).await;
        assert_eq!(&g[..8], b"NBDMAGIC");
        raw.send(&3u32.to_be_bytes()).await;
        raw
    }

    /// Connects and answers the greeting with fixed-newstyle + no-zeroes.
    pub async fn connect(addr: SocketAddr) -> Raw {
        let mut raw = Raw::greeted(addr).await;
        raw.send(&3u32.to_be_bytes()).await;
        raw
    }

    pub async fn send(&mut self, b: &[u8]) {
        bounded("write", self.s.write_all(b)).await.unwrap();
    }

    pub async fn read(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0; n];
        bounded("read", self.s.read_exact(&mut b))
            .await
            .unwrap_or_else(|e| panic!("reading {n} bytes: {e}"));
        b
    }

    pub async fn option(&mut self, option: u32, data: &[u8]) {
        let mut b = b"IHAVEOPT".to_vec();
        b.extend_from_slice(&option.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        self.send(&b).await;
    }

    /// One option reply: (option, type, data).
    pub async fn option_reply(&mut self) -> (u32, u32, Vec<u8>) {
        let h = self.read(20).await;
        assert_eq!(
            h[..8],
            0x3e889045565a9u64.to_be_bytes(),
            "option reply magic"
        );
        let be32 = |b: &[u8]| u32::from_be_bytes(b[..4].try_into().unwrap());
        let len = be32(&h[16..]) as usize;
        assert!(len <= 64 * 1024, "reply length {len}");
        (be32(&h[8..]), be32(&h[12..]), self.read(len).await)
    }

    /// NBD_OPT_GO for `name`, asking for block sizes. Ok(export size) or Err(error reply type).
    pub async fn go(&mut self, name: &str) -> Result<u64, u32> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&1u16.to_be_bytes());
        d.extend_from_slice(&3u16.to_be_bytes());
        self.option(OPT_GO, &d).await;
        let mut size = None;
        loop {
            let (opt, kind, data) = self.option_reply().await;
            assert_eq!(opt, OPT_GO);
            match kind {
                REP_INFO if data[..2] == [0, 0] => {
                    size = Some(u64::from_be_bytes(data[2..10].try_into().unwrap()))
                }
                REP_INFO => {}
                REP_ACK => return Ok(size.expect("NBD_INFO_EXPORT before ACK")),
                err => return Err(err),
            }
        }
    }

    pub async fn request(&mut self, kind: u16, cookie: u64, offset: u64, len: u32) {
        let mut b = 0x25609513u32.to_be_bytes().to_vec();
        b.extend_from_slice(&0u16.to_be_bytes());
        b.extend_from_slice(&kind.to_be_bytes());
        b.extend_from_slice(&cookie.to_be_bytes());
        b.extend_from_slice(&offset.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        self.send(&b).await;
    }

    /// A simple reply header: (error, cookie).
    pub async fn reply(&mut self) -> (u32, u64) {
        let h = self.read(16).await;
        assert_eq!(h[..4], 0x67446698u32.to_be_bytes(), "simple reply magic");
        (
            u32::from_be_bytes(h[4..8].try_into().unwrap()),
            u64::from_be_bytes(h[8..16].try_into().unwrap()),
        )
    }

    /// Waits for the server to close the connection (EOF or reset); panics if it stays open.
    pub async fn expect_closed(&mut self) {
        let mut sink = [0u8; 4096];
        loop {
            match bounded("close", self.s.read(&mut sink)).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    }
}

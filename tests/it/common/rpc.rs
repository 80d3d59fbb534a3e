//! A tiny hand-rolled ONC RPC client for the NFS tests: enough MOUNT and NFSv3 to hold on to
//! raw file handles (across a daemon restart, or an image revision's activation), which no
//! command-line client lets a test keep.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// How long one call may take.
const SECS: u64 = 60;

/// A tiny hand-rolled ONC RPC client: enough MOUNT and NFSv3 to hold on to raw file handles,
/// which no command-line client lets a test keep across a server restart.
pub struct Rpc {
    pub stream: tokio::net::TcpStream,
    xid: u32,
}

/// A TCP connection to `addr` from a free port below 1024.
pub async fn privileged_connect(addr: SocketAddr) -> tokio::net::TcpStream {
    privileged_connect_from(Ipv4Addr::LOCALHOST, addr).await
}

/// A TCP connection to `addr` from a free port below 1024 of `from`.
pub async fn privileged_connect_from(from: Ipv4Addr, addr: SocketAddr) -> tokio::net::TcpStream {
    let start = std::process::id() as u16 % 400;
    for k in 0..700u16 {
        let port = 300 + (start + k) % 700;
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        if sock.bind((from, port).into()).is_err() {
            continue;
        }
        match sock.connect(addr).await {
            Ok(s) => return s,
            Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => continue,
            Err(e) => panic!("connecting to {addr} from port {port}: {e}"),
        }
    }
    panic!("no free port below 1024");
}

pub fn put_u32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_be_bytes());
}

pub fn put_opaque(v: &mut Vec<u8>, b: &[u8]) {
    put_u32(v, b.len() as u32);
    v.extend_from_slice(b);
    v.resize(v.len().div_ceil(4) * 4, 0);
}

pub struct Reader<'a>(pub &'a [u8]);

impl Reader<'_> {
    pub fn u32(&mut self) -> u32 {
        let (w, rest) = self.0.split_first_chunk::<4>().expect("short reply");
        self.0 = rest;
        u32::from_be_bytes(*w)
    }
    pub fn opaque(&mut self) -> Vec<u8> {
        let n = self.u32() as usize;
        let b = self.0[..n].to_vec();
        self.0 = &self.0[n.div_ceil(4) * 4..];
        b
    }
    pub fn skip_post_op_attr(&mut self) {
        if self.u32() == 1 {
            self.0 = &self.0[84..];
        }
    }
}

impl Rpc {
    /// From a port below 1024, as the kernel's client connects (images are `secure_ports`
    /// by default); the tests run as root.
    pub async fn connect(addr: SocketAddr) -> Rpc {
        Rpc {
            stream: privileged_connect(addr).await,
            xid: 1,
        }
    }

    /// `connect`, from an address of `from`'s (a client namespace's).
    pub async fn connect_from(from: Ipv4Addr, addr: SocketAddr) -> Rpc {
        Rpc {
            stream: privileged_connect_from(from, addr).await,
            xid: 1,
        }
    }

    /// One call; returns the whole reply record.
    pub async fn call_any(&mut self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        self.xid += 1;
        let mut m = Vec::new();
        for w in [self.xid, 0, 2, prog, vers, proc_, 0, 0, 0, 0] {
            put_u32(&mut m, w);
        }
        m.extend_from_slice(args);
        let mut framed = (0x8000_0000u32 | m.len() as u32).to_be_bytes().to_vec();
        framed.extend(m);
        let io = async {
            self.stream.write_all(&framed).await.unwrap();
            let mut rec = Vec::new();
            loop {
                let mark = self.stream.read_u32().await.unwrap();
                let mut frag = vec![0u8; (mark & 0x7fff_ffff) as usize];
                self.stream.read_exact(&mut frag).await.unwrap();
                rec.extend(frag);
                if mark & 0x8000_0000 != 0 {
                    return rec;
                }
            }
        };
        let rec = tokio::time::timeout(Duration::from_secs(SECS), io)
            .await
            .expect("rpc reply in time");
        assert_eq!(Reader(&rec).u32(), self.xid);
        rec
    }

    /// One call; returns the procedure's results (after accept_stat SUCCESS).
    pub async fn call(&mut self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        let rec = self.call_any(prog, vers, proc_, args).await;
        let mut r = Reader(&rec);
        r.u32();
        assert_eq!(r.u32(), 1, "a reply");
        assert_eq!(r.u32(), 0, "accepted");
        r.u32();
        r.opaque();
        assert_eq!(r.u32(), 0, "success");
        r.0.to_vec()
    }

    pub async fn mount(&mut self, path: &str) -> Vec<u8> {
        let mut a = Vec::new();
        put_opaque(&mut a, path.as_bytes());
        let res = self.call(100_005, 3, 1, &a).await;
        let mut r = Reader(&res);
        assert_eq!(r.u32(), 0, "MNT3_OK for {path}");
        r.opaque()
    }

    pub async fn lookup(&mut self, dir: &[u8], name: &str) -> Vec<u8> {
        let mut a = Vec::new();
        put_opaque(&mut a, dir);
        put_opaque(&mut a, name.as_bytes());
        let res = self.call(100_003, 3, 3, &a).await;
        let mut r = Reader(&res);
        assert_eq!(r.u32(), 0, "LOOKUP {name}");
        r.opaque()
    }

    /// READ from offset 0: Ok(data, eof) or Err(nfsstat3).
    pub async fn read(&mut self, fh: &[u8], count: u32) -> Result<(Vec<u8>, bool), u32> {
        let mut a = Vec::new();
        put_opaque(&mut a, fh);
        put_u32(&mut a, 0);
        put_u32(&mut a, 0);
        put_u32(&mut a, count);
        let res = self.call(100_003, 3, 6, &a).await;
        let mut r = Reader(&res);
        let status = r.u32();
        if status != 0 {
            return Err(status);
        }
        r.skip_post_op_attr();
        let n = r.u32();
        let eof = r.u32() == 1;
        let data = r.opaque();
        assert_eq!(data.len(), n as usize);
        Ok((data, eof))
    }
}

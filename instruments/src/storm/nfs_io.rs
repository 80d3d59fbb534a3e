//! The NFS replay's TCP connections, for `nfs3_client`: a stream whose read of a connection
//! the server closed fails with `UnexpectedEof`.
//!
//! `nfs3_client`'s own tokio stream (0.9) returns the 0 of a closed connection as a read of
//! nothing, and its `read_exact` asks again: a reply the server's FIN cut off (a server
//! killed with -9 mid-call) spun the replay's task until the 60 s `timeo` fired, where the
//! kernel's client sees the close at once and reconnects after its back-off.

use nfs3_client::io::{AsyncRead, AsyncWrite};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};

/// One connection to the NFS, MOUNT or portmapper program.
pub struct Stream(TcpStream);

impl AsyncRead for Stream {
    async fn async_read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.0.read(buf).await? {
            0 if !buf.is_empty() => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            )),
            n => Ok(n),
        }
    }
}

impl AsyncWrite for Stream {
    async fn async_write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf).await
    }
}

/// Makes `Stream`s, from a given local port when asked (a privileged one, for `secure`).
pub struct Connector;

impl nfs3_client::net::Connector for Connector {
    type Connection = Stream;

    async fn connect(&self, addr: SocketAddr) -> std::io::Result<Stream> {
        Ok(Stream(TcpStream::connect(addr).await?))
    }

    async fn connect_with_port(
        &self,
        addr: SocketAddr,
        local_port: u16,
    ) -> std::io::Result<Stream> {
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            local_port,
        ))?;
        Ok(Stream(socket.connect(addr).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs3_client::net::Connector as _;

    #[tokio::test]
    async fn a_connection_the_server_closed_reads_as_unexpected_eof_not_nothing() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            s.write_all(b"abcd").await.unwrap();
            // Dropped: its FIN follows the four bytes.
        });
        let mut c = Connector.connect(at).await.unwrap();
        server.await.unwrap();
        let mut buf = [0u8; 8];
        // The four bytes, then the close as an error, where nfs3_client's own stream would
        // have read_exact ask again for ever.
        let e = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            c.async_read_exact(&mut buf),
        )
        .await
        .expect("read_exact returned");
        assert_eq!(e.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
    }
}

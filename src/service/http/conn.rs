//! One accepted HTTP connection: hyper's HTTP/1.1 with the header timeout, and the idle
//! watch that closes a connection moving no byte either way.

use crate::shutdown::Shutdown;
use axum::extract::ConnectInfo;
use std::net::SocketAddr;
use std::sync::Arc;

/// One HTTP/1.1 connection, bounded by the header and idle timeouts; ends gracefully (the
/// request being answered finishes) at shutdown. With `tls`, the TLS handshake comes first,
/// within the header timeout.
pub(super) async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    app: axum::Router,
    limits: &crate::config::Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: Shutdown,
) {
    // Until the first request starts, the connection holds no buffer of hyper's (8 KiB): a
    // silent one waits here, for the header timeout at most, as hyper would have.
    // (`peek`, not `readable`, which may wake for nothing.)
    let mut byte = [0u8; 1];
    let first = tokio::select! {
        r = tokio::time::timeout(limits.http_header_timeout, stream.peek(&mut byte)) => r,
        _ = shutdown.wait() => return,
    };
    if !matches!(first, Ok(Ok(n)) if n > 0) {
        return;
    }
    let (io, last) = Watched::new(stream);
    let Some(tls) = tls else {
        // Boxed: a task waiting above is not the size of hyper's connection state.
        return Box::pin(serve_requests(io, last, peer, app, limits, shutdown)).await;
    };
    let handshake = Box::pin(tls.accept(io));
    let io = tokio::select! {
        r = tokio::time::timeout(limits.http_header_timeout, handshake) => r,
        _ = shutdown.wait() => return,
    };
    match io {
        Ok(Ok(io)) => Box::pin(serve_requests(io, last, peer, app, limits, shutdown)).await,
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "tls handshake failed"),
        Err(_) => tracing::debug!(%peer, "tls handshake timed out"),
    }
}

/// `serve_connection` once the client has sent something (and, over TLS, shaken hands).
pub(super) async fn serve_requests<S>(
    io: S,
    last: LastActivity,
    peer: SocketAddr,
    app: axum::Router,
    limits: &crate::config::Limits,
    shutdown: Shutdown,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use hyper_util::rt::{TokioIo, TokioTimer};
    // The handlers learn the peer as they would from `axum::serve`.
    let service = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
        use tower_service::Service as _;
        req.extensions_mut().insert(ConnectInfo(peer));
        app.clone().call(req)
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.http_header_timeout);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let idle = limits.http_idle_timeout;
    let mut stopping = false;
    loop {
        let quiet = last.quiet();
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = tokio::time::sleep(idle.saturating_sub(quiet)) => {
                if last.quiet() >= idle {
                    tracing::debug!(idle_s = idle.as_secs_f64(), "http connection idle; closed");
                    return;
                }
            }
            _ = shutdown.wait(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// When a connection last moved a byte, shared between its stream and its watchdog.
#[derive(Clone)]
pub(super) struct LastActivity(Arc<std::sync::atomic::AtomicU64>, std::time::Instant);

impl LastActivity {
    pub(super) fn touch(&self) {
        let ms = self.1.elapsed().as_millis() as u64;
        self.0.store(ms, std::sync::atomic::Ordering::Relaxed);
    }
    pub(super) fn quiet(&self) -> std::time::Duration {
        let at = self.0.load(std::sync::atomic::Ordering::Relaxed);
        self.1
            .elapsed()
            .saturating_sub(std::time::Duration::from_millis(at))
    }
}

/// A TCP stream that notes when it last read or wrote anything (under TLS, if any, so
/// handshakes and records count as activity too).
pub(super) struct Watched {
    pub(super) inner: tokio::net::TcpStream,
    pub(super) last: LastActivity,
}

impl Watched {
    pub(super) fn new(inner: tokio::net::TcpStream) -> (Watched, LastActivity) {
        let last = LastActivity(Arc::default(), std::time::Instant::now());
        (
            Watched {
                inner,
                last: last.clone(),
            },
            last,
        )
    }
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.last.touch();
        }
        r
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.last.touch();
        }
        r
    }
    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.last.touch();
        }
        r
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

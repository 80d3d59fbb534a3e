//! The agent's NBD server: the root as one read-only export on a local socket (TCP, meant for
//! 127.0.0.1, or a Unix socket), a thread per connection, each request answered in order from
//! the chunk store (`chunks.rs`). The wire is the daemon's codec (`src/proto/nbd.rs`), so the
//! agent answers options and requests as the server does.

use crate::chunks::Store;
use crate::nbd::{self as p, ClientFlags, OptRequest, OptionHeader, Verdict};
use std::io::{self, Read, Write};
use std::sync::Arc;

/// The flags of the export: read-only, FLUSH accepted (nothing to flush), and several
/// connections may share it (they read the same chunks).
const FLAGS: u16 =
    p::TFLAG_HAS_FLAGS | p::TFLAG_READ_ONLY | p::TFLAG_SEND_FLUSH | p::TFLAG_CAN_MULTI_CONN;
/// Options a client may send before it is dropped.
const MAX_OPTIONS: usize = 64;

/// Where the agent listens.
pub enum Listener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

impl Listener {
    /// Serves every connection on its own thread, for ever.
    pub fn serve(self, store: Arc<Store>, name: Arc<str>) {
        let spawn = |stream: Box<dyn Stream>| {
            let (store, name) = (store.clone(), name.clone());
            std::thread::spawn(move || {
                if let Err(e) = connection(stream, &store, &name) {
                    eprintln!("bootpool-agent: an NBD connection ended: {e}");
                }
            });
        };
        match self {
            Listener::Tcp(l) => {
                for s in l.incoming().flatten() {
                    let _ = s.set_nodelay(true);
                    spawn(Box::new(s));
                }
            }
            Listener::Unix(l) => {
                for s in l.incoming().flatten() {
                    spawn(Box::new(s));
                }
            }
        }
    }
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

fn bad(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// One client: the handshake, then its requests until it disconnects.
fn connection(mut s: Box<dyn Stream>, store: &Store, name: &str) -> io::Result<()> {
    if handshake(&mut s, store, name)? {
        transmission(&mut s, store)?;
    }
    Ok(())
}

/// The fixed-newstyle handshake; true when the client chose the export.
fn handshake(s: &mut Box<dyn Stream>, store: &Store, name: &str) -> io::Result<bool> {
    s.write_all(&p::greeting())?;
    let mut f = [0; 4];
    s.read_exact(&mut f)?;
    let flags = ClientFlags::decode(f).map_err(bad)?;
    let size = store.blocks.size;
    let ours = |asked: &str| asked.is_empty() || asked == name;
    for _ in 0..MAX_OPTIONS {
        let mut h = [0; p::OPTION_HEADER_LEN];
        s.read_exact(&mut h)?;
        let h = OptionHeader::decode(&h).map_err(bad)?;
        let mut data = vec![0; h.len as usize];
        s.read_exact(&mut data)?;
        let mut out = Vec::new();
        match OptRequest::decode(h.option, &data) {
            Err(e) if h.option == p::OPT_EXPORT_NAME => return Err(bad(e)),
            Err(e) => p::opt_error(&mut out, h.option, p::REP_ERR_INVALID, &e.to_string()),
            Ok(OptRequest::ExportName(asked)) if ours(&asked) => {
                p::export_name_reply(&mut out, size, FLAGS, flags.no_zeroes);
                s.write_all(&out)?;
                return Ok(true);
            }
            Ok(OptRequest::ExportName(asked)) => {
                return Err(bad(format!("no export `{asked}`")));
            }
            Ok(OptRequest::Abort) => {
                p::opt_reply(&mut out, p::OPT_ABORT, p::REP_ACK, &[]);
                let _ = s.write_all(&out);
                return Ok(false);
            }
            Ok(OptRequest::List) => {
                p::opt_server(&mut out, name);
                p::opt_reply(&mut out, p::OPT_LIST, p::REP_ACK, &[]);
            }
            Ok(OptRequest::Info {
                go,
                name: asked,
                requests,
            }) => {
                let option = if go { p::OPT_GO } else { p::OPT_INFO };
                if !ours(&asked) {
                    let msg = format!("no export named `{asked}`");
                    p::opt_error(&mut out, option, p::REP_ERR_UNKNOWN, &msg);
                } else {
                    p::info_export(&mut out, option, size, FLAGS);
                    if asked.is_empty() || requests.contains(&p::INFO_NAME) {
                        p::info_name(&mut out, option, name);
                    }
                    p::info_block_size(
                        &mut out,
                        option,
                        p::MIN_BLOCK,
                        p::PREFERRED_BLOCK,
                        p::ADVERTISED_MAX_BLOCK,
                    );
                    p::opt_reply(&mut out, option, p::REP_ACK, &[]);
                    if go {
                        s.write_all(&out)?;
                        return Ok(true);
                    }
                }
            }
            Ok(OptRequest::Unsupported(option)) => {
                p::opt_error(&mut out, option, p::REP_ERR_UNSUP, "not supported");
            }
        }
        s.write_all(&out)?;
    }
    Err(bad(format!("more than {MAX_OPTIONS} options")))
}

/// Requests in order until DISC: a READ from the chunks (EIO when a chunk could not be had
/// good from the server), the rest as `Request::verdict` says for a read-only export.
fn transmission(s: &mut Box<dyn Stream>, store: &Store) -> io::Result<()> {
    let mut out = Vec::new();
    loop {
        let mut b = [0; p::REQUEST_LEN];
        match s.read_exact(&mut b) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            r => r?,
        }
        let req = p::Request::decode(&b).map_err(bad)?;
        out.clear();
        match req.verdict(store.blocks.size, false) {
            Verdict::Read { offset, len } => match store.read(offset, len) {
                Ok(pieces) => {
                    // The header and the chunks' bytes as they are held, in one writev
                    // where the socket takes it.
                    let head = p::simple_reply(0, req.cookie);
                    let mut parts: Vec<io::IoSlice> = Vec::with_capacity(pieces.len() + 1);
                    parts.push(io::IoSlice::new(&head));
                    parts.extend(pieces.iter().map(|piece| io::IoSlice::new(piece)));
                    write_all_vectored(s, &mut parts)?;
                    continue;
                }
                Err(e) => {
                    eprintln!("bootpool-agent: read of {len} bytes at {offset} failed: {e}");
                    out.extend_from_slice(&p::simple_reply(p::EIO, req.cookie));
                }
            },
            Verdict::Disconnect => return Ok(()),
            Verdict::Error { errno, drain } => {
                io::copy(&mut Read::by_ref(s).take(u64::from(drain)), &mut io::sink())?;
                out.extend_from_slice(&p::simple_reply(errno, req.cookie));
            }
            // FLUSH and CACHE on a read-only export; nothing else reaches here without
            // `writable`.
            _ => out.extend_from_slice(&p::simple_reply(0, req.cookie)),
        }
        s.write_all(&out)?;
    }
}

/// `write_all` for several buffers: `write_vectored` until every byte went.
fn write_all_vectored(s: &mut Box<dyn Stream>, mut parts: &mut [io::IoSlice]) -> io::Result<()> {
    while !parts.is_empty() {
        match s.write_vectored(parts) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => io::IoSlice::advance_slices(&mut parts, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

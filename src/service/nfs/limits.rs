//! The sizes and times an NFS connection keeps to (the service's `//!` says what each bounds):
//! below every other file of `service/nfs/`, which all read them.

use std::time::Duration;

/// A stranger's connection ends this long after it was accepted.
pub(super) const STRANGER_TIME: Duration = Duration::from_secs(5);
/// A connection that has made no call this long after it was accepted is closed.
pub(super) const FIRST_CALL: Duration = Duration::from_secs(10);
/// Like knfsd: a client that said nothing for this long is dropped; NFS clients reconnect.
pub(super) const IDLE: Duration = Duration::from_secs(360);
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a MNT of a revision this server lacks waits for its pull from another member
/// (`image::demand`); the client's MOUNT retries cover a longer one.
pub(super) const ROOT_PULL: Duration = Duration::from_secs(120);
/// How often READ bytes are reported.
pub(super) const TICK: Duration = Duration::from_secs(1);
/// How often a connection waiting for a call looks at the shutdown flag and its READ bytes.
pub(super) const POLL: Duration = Duration::from_millis(250);
/// Largest call accepted (fragment marks included); WRITE is refused and we advertise
/// `WTMAX`, so calls are small. A larger one closes the connection.
pub(super) const MAX_RECORD: usize = 256 * 1024;
pub(super) const WTMAX: u32 = 64 * 1024;
/// Replies buffered before they are written (a client may pipeline many 1 MiB READs).
pub(super) const MAX_OUT: usize = 2 << 20;
/// READs at least this long are read into a page-aligned buffer and sent from there: the
/// kernel's copy from the page cache into a destination aligned unlike its source runs at a
/// fraction of its speed on some CPUs (see `page_buf`), and a reply buffer's offset is
/// anything.
pub(super) const BIG_READ: u32 = 64 * 1024;
/// Largest READDIR(PLUS) reply we build, whatever the client allows.
pub(super) const MAX_DIR_REPLY: u32 = 1 << 20;
pub(super) const NFS3ERR_TOOSMALL: u32 = 10005;

//! How an NFS connection ended: what its log line says, and whether the record learns that
//! the client went (a reset or a loss, `conn`'s `Detach`). One type for the connection's
//! reads (`conn`) and its writes (`send`).

/// How a connection ended: the log line says it, and a reset or a loss tells the record the
/// client went (`Detach`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ended {
    /// The client closed it (or reading failed otherwise).
    Closed,
    /// The client reset it.
    Reset,
    /// The client acknowledged nothing for `limits.root_lost_after`.
    Lost,
    /// The client stopped taking replies (`WRITE_TIMEOUT`) or its socket refused them.
    NotReading,
    /// No call for `IDLE`.
    Idle,
    /// No first call within `FIRST_CALL`.
    NoCall,
    /// A stranger's `STRANGER_TIME` is up.
    StrangerTimeUp,
    /// Its RPC stream was broken: why.
    Malformed(&'static str),
    Shutdown,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Ended::Closed => "client closed",
            Ended::Reset => "client reset",
            Ended::Lost => "client lost",
            Ended::NotReading => "client not reading",
            Ended::Idle => "idle",
            Ended::NoCall => "no call in time",
            Ended::StrangerTimeUp => "a stranger's time is up",
            Ended::Malformed(why) => why,
            Ended::Shutdown => "shutdown",
        })
    }
}

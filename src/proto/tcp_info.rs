//! TCP_INFO (`struct tcp_info` of linux/tcp.h) as the kernel fills it: the few fields the
//! pacer reads, at their offsets in the uapi layout. The kernel writes as much of the struct
//! as it has and the caller asked for, so a field past the end of what it wrote is absent
//! (an older kernel), never read as zero. libc's `tcp_info` stops before these fields.

/// Bytes to ask for: the struct up to and including `tcpi_bytes_sent` (Linux 4.19).
pub const SIZE: usize = 208;
/// Bytes to ask for when the pacer's trace wants `Stall` too: up to `tcpi_snd_wnd` (5.4).
pub const STALL_SIZE: usize = 232;

const CA_STATE: usize = 1; // __u8 tcpi_ca_state
const BACKOFF: usize = 4; // __u8 tcpi_backoff
const UNACKED: usize = 24; // __u32 tcpi_unacked (segments in flight)
const LAST_DATA_SENT: usize = 44; // __u32 tcpi_last_data_sent (ms ago)
const SND_CWND: usize = 80; // __u32 tcpi_snd_cwnd (segments)
const PACING_RATE: usize = 104; // __u64 tcpi_pacing_rate (3.15)
const SND_WND: usize = 228; // __u32 tcpi_snd_wnd, the peer's window (5.4)
const MAX_PACING_RATE: usize = 112; // __u64 tcpi_max_pacing_rate (Linux 4.1)
const BYTES_ACKED: usize = 120; // __u64 tcpi_bytes_acked (4.1)
const NOTSENT_BYTES: usize = 144; // __u32 tcpi_notsent_bytes (4.6)
const BYTES_SENT: usize = 200; // __u64 tcpi_bytes_sent (4.19)

/// What the pacer reads of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpInfo {
    /// Payload bytes sent so far, retransmissions included (`tcpi_bytes_sent`); on kernels
    /// before 4.19, bytes acknowledged (`tcpi_bytes_acked`).
    pub sent: u64,
    /// Bytes written by the application and not yet sent (`tcpi_notsent_bytes`; 0 on
    /// kernels before 4.6).
    pub unsent: u32,
    /// The cap set with SO_MAX_PACING_RATE, bytes/s (`u64::MAX`: none).
    pub max_pacing_rate: u64,
}

/// Why a connection with bytes waiting may have sent nothing: what the pacer's trace says of
/// it (docs/links.md, "Why a low cap stalls").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    /// Congestion state: 0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss.
    pub ca_state: u8,
    /// Retransmit timeouts backed off.
    pub backoff: u8,
    /// Segments in flight.
    pub unacked: u32,
    pub cwnd: u32,
    /// Milliseconds since data was last sent.
    pub last_data_sent_ms: u32,
    /// The socket's pacing rate in force, bytes/s (below its cap until an ACK raises it).
    pub pacing_rate: u64,
    /// The peer's receive window, bytes (`None` before Linux 5.4).
    pub snd_wnd: Option<u32>,
}

/// Decodes the fields of `Stall`; `None` if the kernel wrote too little for the pacing rate.
pub fn decode_stall(written: &[u8]) -> Option<Stall> {
    Some(Stall {
        ca_state: *written.get(CA_STATE)?,
        backoff: *written.get(BACKOFF)?,
        unacked: u32_at(written, UNACKED)?,
        cwnd: u32_at(written, SND_CWND)?,
        last_data_sent_ms: u32_at(written, LAST_DATA_SENT)?,
        pacing_rate: u64_at(written, PACING_RATE)?,
        snd_wnd: u32_at(written, SND_WND),
    })
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Decodes what getsockopt(TCP_INFO) wrote; `None` if it is too short to say how much was
/// sent (a kernel before 4.1).
pub fn decode(written: &[u8]) -> Option<TcpInfo> {
    let sent = u64_at(written, BYTES_SENT).or_else(|| u64_at(written, BYTES_ACKED))?;
    Some(TcpInfo {
        sent,
        unsent: u32_at(written, NOTSENT_BYTES).unwrap_or(0),
        max_pacing_rate: u64_at(written, MAX_PACING_RATE)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled() -> Vec<u8> {
        let mut b = vec![0u8; SIZE];
        b[MAX_PACING_RATE..MAX_PACING_RATE + 8].copy_from_slice(&1_250_000u64.to_ne_bytes());
        b[BYTES_ACKED..BYTES_ACKED + 8].copy_from_slice(&900u64.to_ne_bytes());
        b[NOTSENT_BYTES..NOTSENT_BYTES + 4].copy_from_slice(&4096u32.to_ne_bytes());
        b[BYTES_SENT..BYTES_SENT + 8].copy_from_slice(&1000u64.to_ne_bytes());
        b
    }

    #[test]
    fn reads_the_fields_an_older_kernel_wrote_and_no_further() {
        let b = filled();
        let info = |n: usize| decode(&b[..n]);
        let full = TcpInfo {
            sent: 1000,
            unsent: 4096,
            max_pacing_rate: 1_250_000,
        };
        assert_eq!(info(SIZE), Some(full));
        // 4.6 to 4.18: no bytes_sent; acknowledged bytes stand in.
        assert_eq!(info(BYTES_SENT), Some(TcpInfo { sent: 900, ..full }));
        // 4.1 to 4.5: no notsent either.
        let early = TcpInfo {
            sent: 900,
            unsent: 0,
            ..full
        };
        assert_eq!(info(NOTSENT_BYTES), Some(early));
        assert_eq!(info(BYTES_ACKED), None);
        for cut in 0..SIZE {
            let _ = info(cut);
        }
    }

    #[test]
    fn a_stalls_fields_come_from_their_offsets_and_the_window_only_where_written() {
        let mut b = vec![0u8; STALL_SIZE];
        b[CA_STATE] = 4;
        b[BACKOFF] = 2;
        b[UNACKED..UNACKED + 4].copy_from_slice(&7u32.to_ne_bytes());
        b[LAST_DATA_SENT..LAST_DATA_SENT + 4].copy_from_slice(&450u32.to_ne_bytes());
        b[SND_CWND..SND_CWND + 4].copy_from_slice(&10u32.to_ne_bytes());
        b[PACING_RATE..PACING_RATE + 8].copy_from_slice(&125_000u64.to_ne_bytes());
        b[SND_WND..SND_WND + 4].copy_from_slice(&(512 * 1024u32).to_ne_bytes());
        let full = Stall {
            ca_state: 4,
            backoff: 2,
            unacked: 7,
            cwnd: 10,
            last_data_sent_ms: 450,
            pacing_rate: 125_000,
            snd_wnd: Some(512 * 1024),
        };
        assert_eq!(decode_stall(&b), Some(full));
        assert_eq!(
            decode_stall(&b[..SIZE]),
            Some(Stall {
                snd_wnd: None,
                ..full
            })
        );
        assert_eq!(decode_stall(&b[..PACING_RATE + 7]), None);
        for cut in 0..STALL_SIZE {
            let _ = decode_stall(&b[..cut]);
        }
    }
}

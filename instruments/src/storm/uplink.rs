//! The storm's room behind an uplink (`--uplink N@RATE`, the seed's remote room): a second
//! switch (`SWITCH`) joined to the server's (`room::BRIDGE`) by a veth pair shaped with
//! `tc tbf` at RATE each way, the room's last N clients plugged into it, on the server's
//! subnet as every storm client is; and what the uplink carried to them against its
//! capacity, for the report.

use super::room;
use super::sample::Sample;
use serde::Serialize;

/// The room's switch.
pub const SWITCH: &str = "sw1";
/// The uplink's end on the server's switch: its egress is what the room is sent.
pub const DOWN: &str = "up0";
/// Its end on the room's switch.
const UP: &str = "up1";

/// An interval in which the uplink carried at least this share of its capacity counts as
/// full: a `tbf` bucket's bursts and the sampling's 100 ms make a full one read 90-100%.
pub const FULL: f64 = 0.9;

/// `N@RATE`: N clients behind an uplink of RATE (`room::parse_rate`).
pub fn parse(s: &str) -> Result<(usize, u64), String> {
    let (n, rate) = s
        .split_once('@')
        .ok_or_else(|| format!("`{s}` is not N@RATE, e.g. 14@1gbit"))?;
    let n: usize = n
        .trim()
        .parse()
        .map_err(|_| format!("`{s}`: N must be a number of clients"))?;
    if n == 0 {
        return Err(format!("`{s}`: a room of no clients"));
    }
    Ok((n, room::parse_rate(rate)?))
}

/// Makes the room's switch and its uplink to the server's, shaped to `rate` both ways.
pub fn wire(rate: u64) -> anyhow::Result<()> {
    room::ip(&[
        format!("link add {SWITCH} type bridge stp_state 0 forward_delay 0"),
        format!("link set {SWITCH} up"),
        format!("link add {DOWN} type veth peer name {UP}"),
        format!("link set {DOWN} master {}", room::BRIDGE),
        format!("link set {UP} master {SWITCH}"),
        format!("link set {DOWN} up"),
        format!("link set {UP} up"),
    ])?;
    room::tc(&[room::shape(DOWN, rate), room::shape(UP, rate)])
}

/// What the uplink carried to its room while clients wanted data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UplinkRow {
    /// The clients behind it.
    pub clients: usize,
    pub capacity_bps: u64,
    /// Bytes it sent to the room (its frames, headers included) while clients wanted data.
    pub bytes: u64,
    /// Its mean and its busiest interval's rate then, bits/s.
    pub mean_bps: u64,
    pub peak_bps: u64,
    /// The share of that time it carried at least `FULL` of its capacity.
    pub full_share: f64,
}

/// The uplink's row from `samples` (its counter `uplink_tx`) between `from` and `to`, seconds
/// of the samples' clock, widened to the samples around them (none of those bytes is lost
/// between a bound and the next sample).
pub fn row(clients: usize, capacity_bps: u64, samples: &[Sample], from: f64, to: f64) -> UplinkRow {
    let first = samples.iter().rposition(|s| s.t <= from).unwrap_or(0);
    let last = samples
        .iter()
        .position(|s| s.t >= to)
        .unwrap_or(samples.len().saturating_sub(1));
    let seen: Vec<(f64, u64)> = samples
        .get(first..=last)
        .unwrap_or_default()
        .iter()
        .filter_map(|s| Some((s.t, *s.uplink_tx.first()?)))
        .collect();
    let (mut bytes, mut secs, mut full, mut peak) = (0u64, 0.0, 0.0, 0.0f64);
    for pair in seen.windows(2) {
        let ((t0, a), (t1, b)) = (pair[0], pair[1]);
        let dt = t1 - t0;
        if dt <= 0.0 {
            continue;
        }
        let sent = b.saturating_sub(a);
        let bps = sent as f64 * 8.0 / dt;
        bytes += sent;
        secs += dt;
        peak = peak.max(bps);
        if bps >= FULL * capacity_bps as f64 {
            full += dt;
        }
    }
    UplinkRow {
        clients,
        capacity_bps,
        bytes,
        mean_bps: if secs > 0.0 {
            (bytes as f64 * 8.0 / secs) as u64
        } else {
            0
        },
        peak_bps: peak as u64,
        full_share: if secs > 0.0 { full / secs } else { 0.0 },
    }
}

/// The report's line for the room behind the uplink.
pub fn render(r: &UplinkRow) -> String {
    format!(
        "room behind an uplink: {} clients, uplink {} Mbit/s: sent {:.1} MB, mean {:.0} Mbit/s ({:.0}%), peak {:.0} Mbit/s, full {:.0}% of the time\n",
        r.clients,
        r.capacity_bps / 1_000_000,
        r.bytes as f64 / 1e6,
        r.mean_bps as f64 / 1e6,
        r.mean_bps as f64 * 100.0 / r.capacity_bps.max(1) as f64,
        r.peak_bps as f64 / 1e6,
        r.full_share * 100.0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: f64, tx: u64) -> Sample {
        Sample {
            t,
            uplink_tx: vec![tx],
            ..Sample::default()
        }
    }

    #[test]
    fn a_room_spec_is_n_clients_at_a_rate() {
        assert_eq!(parse("14@1gbit"), Ok((14, 1_000_000_000)));
        assert_eq!(parse(" 3 @ 20mbit"), Ok((3, 20_000_000)));
        assert!(parse("14").is_err());
        assert!(parse("0@1gbit").is_err());
        assert!(parse("x@1gbit").is_err());
        assert!(parse("2@fast").is_err());
    }

    #[test]
    fn the_uplinks_row_is_its_rate_against_its_capacity_and_its_full_time() {
        // 8 Mbit/s capacity: a second at 1 MB (full), a second at 0.25 MB, then idle; the
        // window (1.2-3.8 s, widened to the samples around it) leaves out the sample before
        // 1 s and the one after 4 s.
        let samples = [
            at(0.5, 0),
            at(1.0, 100),
            at(2.0, 1_000_100),
            at(3.0, 1_250_100),
            at(4.0, 1_250_100),
            at(5.0, 9_000_000),
        ];
        let r = row(3, 8_000_000, &samples, 1.2, 3.8);
        assert_eq!(r.bytes, 1_250_000);
        assert_eq!(r.peak_bps, 8_000_000);
        assert_eq!(r.mean_bps, 1_250_000 * 8 / 3);
        assert!((r.full_share - 1.0 / 3.0).abs() < 1e-9, "{}", r.full_share);
        let line = render(&r);
        assert!(line.contains("3 clients, uplink 8 Mbit/s"), "{line}");
        assert!(line.contains("full 33% of the time"), "{line}");
        // No samples: nothing carried.
        assert_eq!(row(3, 8_000_000, &[], 0.0, 1.0).bytes, 0);
    }
}

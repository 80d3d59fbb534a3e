//! End to end, a client that goes: `bootpool lab --cycles 2` pulls each client's plug after its
//! boot and powers it on again (one over NFS, one over NBD), and the record shows each first
//! boot gone; the second stays off (`--stay-off`), and the record shows it gone too, its root
//! connection lost. `scripts/test` runs it alone, as every `e2e` module, so that its VMs do
//! not boot beside tests/it/e2e.rs's on the same cores (their timing checks would feel it).
//! Needs root and what scripts/setup installs.

use crate::common::lab::{client_consoles, lab_config, run_lab};
use std::process::Command;

/// The root connections of a client that powered off and stays off are lost after this.
const LOST_AFTER_S: u64 = 15;

/// A client whose plug is pulled after its boot and that powers on again (`lab --cycles 2`,
/// over NFS and NBD at once): the record shows the first boot booted and then gone, no later
/// than the second boot's first DISCOVER (over NFS, `new_boot` or `nfs_reset`), and the second
/// boot booted; once that one is off for good (`--stay-off`), it is gone too, its root
/// connection lost (`nfs_lost`, `nbd_lost`: silent for `limits.root_lost_after`).
#[test]
fn a_client_powered_off_and_on_again_is_seen_gone() {
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), |text| {
        format!("{text}limits:\n  root_lost_after: {LOST_AFTER_S}s\n")
    });
    let args = [
        "--clients",
        "1",
        "--pool",
        "lab-nfs",
        "--pool",
        "lab-nbd",
        "--cycles",
        "2",
        "--timeout",
        "500",
        "--stay-off",
        "90",
    ];
    let (table, rows) = run_lab(&config, &args, 600);
    assert_eq!(rows.len(), 2, "{table}");
    let mut report = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    report
        .args(["report", "--format", "json", "--config"])
        .arg(&config);
    let (ok, json, err) = crate::common::run(&mut report, 30);
    assert!(ok, "{err}");
    let waves: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    let boots: Vec<&serde_json::Value> = waves
        .iter()
        .flat_map(|w| w["boots"].as_array().unwrap())
        .collect();
    for cells in &rows {
        assert_eq!(cells[3], "booted", "{table}");
        let (mac, pool) = (&cells[1], cells.last().unwrap());
        let mut mine: Vec<&serde_json::Value> = boots
            .iter()
            .copied()
            .filter(|b| b["mac"] == **mac)
            .collect();
        mine.sort_by(|a, b| {
            a["start"]
                .as_f64()
                .partial_cmp(&b["start"].as_f64())
                .unwrap()
        });
        assert_eq!(mine.len(), 2, "{mac}: {mine:#?}\n{table}");
        let (first, second) = (mine[0], mine[1]);
        assert_eq!(first["result"], "booted", "{first}");
        assert_eq!(second["result"], "booted", "{second}");
        let gone_at = first["gone_at"]
            .as_f64()
            .unwrap_or_else(|| panic!("{mac}'s first boot is not gone: {first}"));
        let second_start = second["start"].as_f64().unwrap();
        assert!(
            gone_at <= second_start + 0.001,
            "gone at {gone_at}, the next boot began at {second_start}: {first}"
        );
        // Over NFS, by the new boot's DISCOVER, or by the reset its kernel (at the same
        // address) sends the server's retransmission on the old connection, whichever is first.
        if pool == "lab-nfs" {
            assert!(
                first["gone"] == "new_boot" || first["gone"] == "nfs_reset",
                "{first}"
            );
        }
        // Off for good: nothing ends the root connection but its silence.
        let lost = if pool == "lab-nfs" {
            "nfs_lost"
        } else {
            "nbd_lost"
        };
        assert_eq!(second["gone"], lost, "{mac}: {second}\n{table}");
    }
    // The lab kept each client's first console beside its second.
    let consoles = client_consoles(&dir.path().join("var"));
    let booted = consoles
        .iter()
        .filter(|c| c.contains("bootpool-demo: booted"))
        .count();
    assert_eq!(booted, 4, "{table}");
}

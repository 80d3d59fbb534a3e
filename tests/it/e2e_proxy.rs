//! End to end in proxy mode: bootpool gives no addresses; dnsmasq (started by the lab on its
//! bridge) does, and a qemu VM's iPXE takes the PXE answer from bootpool's proxy offer and its
//! port 4011 ACK, then boots the demo image over NBD. Needs root, qemu, dnsmasq and the demo
//! image.

use crate::common::lab::{lab_config, run_lab};

#[test]
fn one_client_boots_beside_dnsmasq() {
    let dir = tempfile::tempdir().unwrap();
    // Proxy mode gives no addresses: the range and router are dnsmasq's (the lab's default).
    let config = lab_config(dir.path(), |t| {
        t.replace("mode: authoritative", "mode: proxy")
            .replace("  range: 10.77.0.100-10.77.0.250\n", "")
            .replace("  router: 10.77.0.1\n", "")
    });
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .contains("mode: proxy")
    );
    let (table, rows) = run_lab(
        &config,
        &["--clients", "1", "--root", "nbd", "--timeout", "300"],
        360,
    );
    let cells = rows.first().expect("a row");
    assert_eq!(cells[3], "booted", "{table}");
    // The address came from dnsmasq's lease file; bootpool gave none, and kept only what the
    // client reported on port 4011 (who it is, for NBD's access rule), for a restart.
    let run = crate::common::lab::run_dir(&dir.path().join("var"));
    let leases = std::fs::read_to_string(run.join("dnsmasq.leases")).unwrap();
    assert!(leases.contains(&cells[2]), "{leases}\n{table}");
    let saved = bootpool::service::lease_file::read(&dir.path().join("var")).unwrap();
    let bound: Vec<String> = saved.leases.iter().map(|l| l.ip.to_string()).collect();
    assert_eq!(bound, [cells[2].clone()], "{table}");
    let journal = crate::common::recorded_events(&dir.path().join("var"));
    assert!(journal.contains("\"dhcp_ack\""), "{journal}");
    assert!(journal.contains("\"proto\":\"nbd\""), "{journal}");
}

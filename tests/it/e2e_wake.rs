//! Wake-on-LAN end to end (ignored: `scripts/test --all` runs it alone): `bootpool lab --wake`
//! starts its VMs powered off, `bootpool wake --pool` run in the lab's network namespace sends
//! the pool's magic packets, the lab's listener powers each VM on when its own arrives, they
//! boot, and the record makes the wake's boots its wave. Needs root and what scripts/setup
//! installs.

use crate::common::lab::lab_config;
use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "lab-wake-test-admin-token";
const POOL: &str = "lab-nfs";

/// Two VMs of `lab-nfs` off until woken: the wake sends one packet to each MAC the pool lists,
/// in the pool's order (the pacing's order), one `woken` event each; the VMs power on in that
/// order and boot; each boot carries the wake's id and starts after its own packet; and the
/// record's wave of those boots is the wake's, with its id and the time of its first packet.
#[test]
#[ignore = "boots VMs for minutes; scripts/test --all"]
fn a_wake_powers_the_room_on_and_its_boots_are_its_wave() {
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), |text| {
        text.replacen(
            "  state_dir:",
            &format!("  admin_token: {TOKEN}\n  state_dir:"),
            1,
        )
    });
    let mut lab = Command::new(crate::common::bootpool_with_instruments())
        .args([
            "lab",
            "--wake",
            "--clients",
            "2",
            "--pool",
            POOL,
            "--timeout",
            "400",
        ])
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let table = drain(Box::new(lab.stdout.take().unwrap()));
    let log = drain(Box::new(lab.stderr.take().unwrap()));
    // The lab's namespace is the lab process's (`bootpool lab` runs the instruments in its
    // place): the wake is asked there until the lab's daemon answers.
    let namespace = format!("--net=/proc/{}/ns/net", lab.id());
    let deadline = Instant::now() + Duration::from_secs(180);
    let said = loop {
        assert!(
            lab.try_wait().unwrap().is_none(),
            "the lab ended before the wake:\n{}",
            log.join().unwrap()
        );
        let mut wake = Command::new("nsenter");
        wake.arg(&namespace)
            .arg(env!("CARGO_BIN_EXE_bootpool"))
            .args(["wake", "--pool", POOL, "--per-second", "4", "--config"])
            .arg(&config);
        let (ok, out, err) = crate::common::run(&mut wake, 30);
        if ok {
            break out;
        }
        assert!(Instant::now() < deadline, "the wake was never taken: {err}");
        std::thread::sleep(Duration::from_secs(1));
    };
    let end = Instant::now() + Duration::from_secs(600);
    while lab.try_wait().unwrap().is_none() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = lab.kill();
    let status = lab.wait().unwrap();
    let (table, log) = (table.join().unwrap(), log.join().unwrap());
    assert!(status.success(), "lab failed\n{table}\n{log}");

    // `wake 1: 63 clients of pool lab-nfs, 4 a second ...`: every MAC the pool lists.
    let listed = 63;
    let id: u64 = said
        .strip_prefix("wake ")
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no wake id in {said:?}"));
    assert!(
        said.contains(&format!("{listed} clients of pool {POOL}")),
        "{said}"
    );
    // The VMs powered on by their packets, in the packets' order.
    let first = log.find("pc01's magic packet came").expect(&log);
    let second = log.find("pc02's magic packet came").expect(&log);
    assert!(first < second, "{log}");

    // One packet to each listed MAC, in the pool's order.
    let mut events = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    events.args(["report", "--events", "--config"]).arg(&config);
    let (ok, lines, err) = crate::common::run(&mut events, 30);
    assert!(ok, "{err}");
    let mut woken: Vec<(u64, String)> = lines
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event"] == "woken")
        .map(|e| {
            assert_eq!(e["wake"], id, "{e}");
            (
                e["at"].as_u64().unwrap(),
                e["who"]["mac"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    woken.sort();
    let order: Vec<&str> = woken.iter().map(|(_, mac)| mac.as_str()).collect();
    let expected: Vec<String> = (1..=listed)
        .map(|n| format!("52:54:00:77:00:{n:02x}"))
        .collect();
    assert_eq!(order, expected);

    // The wake's wave: its two boots, each the wake's and after its own packet.
    let mut report = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    report
        .args(["report", "--format", "json", "--config"])
        .arg(&config);
    let (ok, json, err) = crate::common::run(&mut report, 30);
    assert!(ok, "{err}");
    let waves: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    let theirs: Vec<&serde_json::Value> = waves.iter().filter(|w| w["wake"]["id"] == id).collect();
    assert_eq!(theirs.len(), 1, "{json}");
    let wave = theirs[0];
    assert_eq!(wave["wake"]["at"].as_f64(), Some(woken[0].0 as f64 / 1e6));
    let boots = wave["boots"].as_array().unwrap();
    let mut macs: Vec<&str> = boots.iter().map(|b| b["mac"].as_str().unwrap()).collect();
    macs.sort();
    assert_eq!(macs, ["52:54:00:77:00:01", "52:54:00:77:00:02"], "{json}");
    for b in boots {
        assert_eq!(b["wake"], id, "{b}");
        assert_eq!(b["result"], "booted", "{b}");
        let packet = woken.iter().find(|(_, m)| b["mac"] == **m).unwrap().0;
        assert!(b["start"].as_f64().unwrap() * 1e6 >= packet as f64, "{b}");
    }
    assert_eq!(wave["summary"]["clients"], 2, "{json}");
}

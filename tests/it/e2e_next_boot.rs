//! Next boot end to end (ignored: `scripts/test --all` runs it alone): two lab VMs with a
//! virtual disk, off until woken (`bootpool lab --wake --disk`); `bootpool next-boot`, run in
//! the lab's namespace, tells one to boot its local disk and the other memtest86+; woken,
//! the first runs the disk's boot sector (which writes a marker to the serial port) and the
//! second memtest86+, whose own serial console (`console=ttyS0` from the pool) shows its title
//! and a test running, and the record keeps each boot's next boot. Needs root, Debian's memtest86+ and what scripts/setup
//! installs.

use crate::common::lab::lab_config;
use crate::common::run;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "lab-next-boot-admin-token";
const POOL: &str = "lab-nfs";
const DISK_PC: &str = "52:54:00:77:00:01";
const MEMTEST_PC: &str = "52:54:00:77:00:02";
/// What the disk's boot sector writes to COM1.
const DISK_MARK: &str = "bootpool-test: booted from the local disk";
/// What memtest86+ writes to its serial console: its title, and its status once a test runs.
const MEMTEST_MARKS: [&str; 2] = ["Memtest86+ v", "Status: Testing"];

/// A 1 MiB raw disk whose MBR boot sector writes `DISK_MARK` to COM1 (port 0x3f8, each byte
/// once the line status says the transmitter is empty) and halts. 16-bit code, hand-assembled.
fn disk(path: &Path) {
    #[rustfmt::skip]
    let code: [u8; 0x22] = [
        0xFA,                   // 00 cli
        0x31, 0xC0,             // 01 xor ax, ax
        0x8E, 0xD8,             // 03 mov ds, ax
        0xBE, 0x22, 0x7C,       // 05 mov si, 0x7c22 (the text, after the code)
        0xAC,                   // 08 next: lodsb
        0x84, 0xC0,             // 09 test al, al
        0x74, 0x12,             // 0b jz done
        0x88, 0xC4,             // 0d mov ah, al
        0xBA, 0xFD, 0x03,       // 0f wait: mov dx, 0x3fd (line status)
        0xEC,                   // 12 in al, dx
        0xA8, 0x20,             // 13 test al, 0x20 (transmitter empty)
        0x74, 0xF8,             // 15 jz wait
        0xBA, 0xF8, 0x03,       // 17 mov dx, 0x3f8
        0x88, 0xE0,             // 1a mov al, ah
        0xEE,                   // 1c out dx, al
        0xEB, 0xE9,             // 1d jmp next
        0xF4,                   // 1f done: hlt
        0xEB, 0xFD,             // 20 jmp done
    ];
    let mut sector = vec![0u8; 512];
    sector[..code.len()].copy_from_slice(&code);
    let text = format!("\r\n{DISK_MARK}\r\n\0");
    sector[code.len()..code.len() + text.len()].copy_from_slice(text.as_bytes());
    sector[510..].copy_from_slice(&[0x55, 0xAA]);
    sector.resize(1 << 20, 0);
    std::fs::write(path, sector).unwrap();
}

/// `PROGRAM ARGS` in the lab's network namespace, retried (every second, up to 3 minutes)
/// until it succeeds, i.e. once the lab's daemon answers; its output.
fn in_lab(lab: &mut Child, program: &str, args: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        assert!(lab.try_wait().unwrap().is_none(), "the lab ended early");
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/proc/{}/ns/net", lab.id()))
            .arg(program)
            .args(args);
        let (ok, out, err) = run(&mut cmd, 30);
        if ok {
            return out;
        }
        assert!(Instant::now() < deadline, "{args:?} never taken: {err}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The console of lab VM `name` so far (the one lab run under `state`).
fn console(state: &Path, name: &str) -> String {
    let Some(run) = std::fs::read_dir(state.join("lab"))
        .ok()
        .and_then(|mut d| d.next())
        .and_then(Result::ok)
    else {
        return String::new();
    };
    String::from_utf8_lossy(
        &std::fs::read(run.path().join(format!("{name}.log"))).unwrap_or_default(),
    )
    .into_owned()
}

/// Told `local`, a VM boots its disk's boot sector; told `memtest`, it runs memtest86+; both
/// boots record the next boot they took (the once entry used up, the other until changed).
#[test]
#[ignore = "boots VMs for minutes; scripts/test --all"]
fn vms_told_local_and_memtest_boot_their_disk_and_memtest86() {
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), |text| {
        text.replacen(
            "  state_dir:",
            &format!("  admin_token: {TOKEN}\n  state_dir:"),
            1,
        )
    });
    let image = dir.path().join("disk.img");
    disk(&image);
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
        .arg("--disk")
        .arg(&image)
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let bootpool = env!("CARGO_BIN_EXE_bootpool");
    let config_arg = config.to_str().unwrap();
    let set = in_lab(
        &mut lab,
        bootpool,
        &[
            "next-boot",
            "--client",
            DISK_PC,
            "local",
            "--once",
            "--config",
            config_arg,
        ],
    );
    assert!(set.contains("local, once"), "{set}");
    let set = in_lab(
        &mut lab,
        bootpool,
        &[
            "next-boot",
            "--client",
            MEMTEST_PC,
            "memtest",
            "--config",
            config_arg,
        ],
    );
    assert!(set.contains("memtest, until changed"), "{set}");
    in_lab(
        &mut lab,
        bootpool,
        &["wake", "--pool", POOL, "--config", config_arg],
    );

    let state = dir.path().join("var");
    let deadline = Instant::now() + Duration::from_secs(400);
    let seen = || (console(&state, "pc01"), console(&state, "pc02"));
    loop {
        let (disk_console, memtest_console) = seen();
        if disk_console.contains(DISK_MARK)
            && MEMTEST_MARKS.iter().all(|m| memtest_console.contains(m))
            || Instant::now() > deadline
        {
            break;
        }
        assert!(lab.try_wait().unwrap().is_none(), "the lab ended early");
        std::thread::sleep(Duration::from_secs(1));
    }
    // The record, from the lab's daemon before the lab goes (its address is the shipped
    // config's; reading from the server host needs no token).
    let boots = in_lab(
        &mut lab,
        "curl",
        &[
            "-sS",
            "--fail",
            "--max-time",
            "20",
            "http://10.77.0.1:8080/api/v1/boots",
        ],
    );
    let _ = lab.kill();
    let _ = lab.wait();
    let (disk_console, memtest_console) = seen();
    assert!(disk_console.contains(DISK_MARK), "pc01:\n{disk_console}");
    for mark in MEMTEST_MARKS {
        assert!(memtest_console.contains(mark), "pc02:\n{memtest_console}");
    }
    let boots: Vec<serde_json::Value> = serde_json::from_str(&boots).unwrap();
    for (mac, target, once) in [(DISK_PC, "local", true), (MEMTEST_PC, "memtest", false)] {
        let boot = boots
            .iter()
            .find(|b| b["mac"] == mac)
            .unwrap_or_else(|| panic!("no boot of {mac}: {boots:?}"));
        assert_eq!(boot["next_boot"]["target"], target, "{boot}");
        assert_eq!(boot["next_boot"]["once"], once, "{boot}");
    }
}

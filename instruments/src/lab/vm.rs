//! One virtual client: a qemu process that network-boots on a tap device (from its NIC ROM, iPXE,
//! or its firmware's own PXE or HTTP boot; an x86 PC, or an ARM64 `virt` board under AAVMF),
//! its serial console in a file.

use super::login::{Login, Typist};
use bootpool::config::Mac;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How qemu runs guest code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// What the client's board runs before the NIC ROM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Firmware {
    /// SeaBIOS, qemu's default; the NIC ROM is iPXE for BIOS (arch 0).
    #[default]
    Bios,
    /// OVMF (Debian's `ovmf`); qemu's EFI NIC ROM is iPXE for EFI (arch 7).
    Uefi,
    /// OVMF with no NIC ROM: the firmware's own PXE client, as on most real PCs, which loads
    /// iPXE (`snponly.efi`) over TFTP and chains to it.
    UefiPxe,
    /// OVMF with its PXE clients switched off (fw_cfg), so the firmware's UEFI HTTP boot asks
    /// DHCP as `HTTPClient` and fetches `snponly.efi` from the URL it is given.
    UefiHttp,
    /// OVMF with its IPv4 stack and both PXE clients off (fw_cfg): the only boot left is UEFI
    /// HTTP boot over IPv6 (DHCPv6 `HTTPClient`, option 59's URL), after a 4 s boot manager
    /// timeout (docs/clients.md says why). Needs `dhcp6` in the config.
    UefiHttp6,
    /// OVMF with its IPv4 stack and IPv4 PXE off: the firmware's PXE over IPv6 (DHCPv6
    /// `PXEClient`, a `tftp://[ADDR]/NAME` URL). Needs `dhcp6` in the config.
    UefiPxe6,
    /// OVMF with Secure Boot enforced and Microsoft's keys enrolled (Debian's
    /// `OVMF_CODE_4M.secboot.fd` and `OVMF_VARS_4M.ms.fd`, q35 with SMM), no NIC ROM: the
    /// firmware's PXE runs only signed loaders (a `secure_boot` pool's shim and GRUB).
    UefiSecure,
    /// An ARM64 board: qemu-system-aarch64's `virt` machine (Cortex-A57, under TCG) with
    /// AAVMF (Debian's `qemu-efi-aarch64`), whose own PXE (arch 11) loads Debian's network
    /// GRUB over TFTP.
    Arm64,
}

impl Firmware {
    pub fn is_uefi(self) -> bool {
        matches!(
            self,
            Firmware::Uefi
                | Firmware::UefiPxe
                | Firmware::UefiHttp
                | Firmware::UefiHttp6
                | Firmware::UefiPxe6
                | Firmware::UefiSecure
                | Firmware::Arm64
        )
    }

    /// Whether KVM could run it here: not an ARM64 board on an x86 host.
    pub fn native(self) -> bool {
        self != Firmware::Arm64
    }

    /// The Debian packages that hold `files` and the emulator.
    pub fn packages(self) -> &'static str {
        match self {
            Firmware::Bios => "qemu-system-x86",
            Firmware::Arm64 => "qemu-system-arm qemu-efi-aarch64",
            _ => "qemu-system-x86 ovmf",
        }
    }

    /// The firmware files this board needs (for a clear error when one is missing).
    pub fn files(self) -> &'static [&'static str] {
        match self {
            Firmware::Bios => &[],
            Firmware::UefiSecure => &[OVMF_SECURE_CODE, OVMF_SECURE_VARS],
            Firmware::Arm64 => &[AAVMF_CODE, AAVMF_VARS],
            _ => &[OVMF],
        }
    }
}

/// Debian's `ovmf` ships a combined code+vars image here; read-only use needs no copy.
pub const OVMF: &str = "/usr/share/ovmf/OVMF.fd";
/// Debian's Secure Boot build (needs SMM) and its variables with Microsoft's keys enrolled
/// and Secure Boot on; each VM writes its own copy of the variables.
pub const OVMF_SECURE_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd";
pub const OVMF_SECURE_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd";
/// A Secure Boot VM's memory: the SMM build and the signed chain want more than the others.
const SECURE_MEMORY_MIB: u32 = 512;
/// Debian's AAVMF (`qemu-efi-aarch64`): the code, read-only, and the variables each ARM64 VM
/// writes its own copy of (both the 64 MiB the `virt` machine's flash is).
pub const AAVMF_CODE: &str = "/usr/share/AAVMF/AAVMF_CODE.fd";
pub const AAVMF_VARS: &str = "/usr/share/AAVMF/AAVMF_VARS.fd";
/// An ARM64 VM's memory: its 32 MiB kernel (no compression: GRUB 2.06 starts it as it is)
/// and the firmware's share.
const ARM64_MEMORY_MIB: u32 = 512;

/// What a client's console said last, as far as the boot goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Console {
    Running,
    /// The demo root printed its done line, or a stock image's getty its login prompt, this
    /// long after power-on.
    Booted(Duration),
    /// The initrd said it failed.
    Failed(String),
}

/// An x86 client's memory, unless the lab is given `--memory`.
pub const MEMORY_MIB: u32 = 320;
const DONE_LINE: &str = "bootpool-demo: booted";
/// What agetty prints on the serial line of a stock image that reached its getty
/// (`HOSTNAME login: `).
const LOGIN_PROMPT: &str = " login: ";
const FAIL_MARK: &str = "bootpool-initrd: FAILED:";
/// What EDK2's boot manager prints when the firmware will not run what it loaded: Secure Boot
/// refusing an unsigned loader ("BdsDxe: failed to load Boot0001 ... : Access Denied").
const REFUSED_MARKS: [&str; 2] = ["BdsDxe: failed to load", "Access Denied"];
/// What iPXE (in a NIC ROM) or the firmware's own PXE client prints as it starts DHCP: the
/// end of the firmware's own time.
const DHCP_MARKS: [&str; 5] = [
    "Configuring (net0",
    ">>Start PXE over IPv4",
    ">>Start HTTP Boot over IPv4",
    ">>Start PXE over IPv6",
    ">>Start HTTP Boot over IPv6",
];

/// What every client of a lab run is: how qemu runs it, its firmware, memory and disk, and
/// whether the lab logs in on its console.
#[derive(Debug, Clone)]
pub struct Board {
    pub accel: Accel,
    pub firmware: Firmware,
    /// Its memory in MiB; none: the firmware's own (`MEMORY_MIB` for an x86 PC).
    pub memory_mib: Option<u32>,
    pub disk: Option<Disk>,
    /// Logs in on the console once its getty asks (`--login`).
    pub login: Option<Login>,
}

pub struct Vm {
    pub name: String,
    pub mac: Mac,
    pub serial: PathBuf,
    child: Child,
    pub powered_on: Instant,
    /// How long it sat powered off (`--wake`: qemu started stopped, `-S`, until `resume`);
    /// the console's times are counted from its resume.
    held_off: Option<Duration>,
    pub console: Console,
    /// When console lines arrived, as the lab's own clock saw them.
    marks: Arc<Mutex<Marks>>,
}

/// Times since power-on at which the console showed what matters to the boot table.
#[derive(Debug, Default, Clone)]
struct Marks {
    dhcp: Option<Duration>,
    done: Option<Duration>,
    failed: Option<String>,
}

/// Where qemu writes the serial console.
enum Serial<'a> {
    File(&'a Path),
    /// To qemu's stdout, which the lab reads and timestamps.
    Pipe,
}

/// qemu for `board`, its console on `serial`; its stdin piped when the lab logs in on the
/// console (`Board::login`), else closed.
fn qemu(board: &Board, serial: Serial) -> Command {
    let (accel, firmware) = (board.accel, board.firmware);
    let mut cmd = Command::new(emulator(firmware));
    cmd.args([
        "-accel",
        accel.as_str(),
        "-m",
        &MEMORY_MIB.to_string(),
        "-smp",
        "1",
    ])
    // No display: SeaBIOS and iPXE then write to the serial port, which goes to a file.
    .args([
        "-machine",
        "graphics=off",
        "-nodefaults",
        "-display",
        "none",
        "-no-reboot",
    ])
    .stdin(match board.login {
        Some(_) => Stdio::piped(),
        None => Stdio::null(),
    })
    .stderr(Stdio::piped());
    match serial {
        Serial::File(path) => {
            cmd.arg("-serial")
                .arg(format!("file:{}", path.display()))
                .stdout(Stdio::null());
        }
        Serial::Pipe => {
            cmd.args([
                "-chardev",
                "stdio,id=console,signal=off",
                "-serial",
                "chardev:console",
            ])
            .stdout(Stdio::piped());
        }
    }
    super::net::dies_with_lab(&mut cmd, libc::SIGKILL);
    cmd
}

/// The qemu binary that runs this board.
fn emulator(firmware: Firmware) -> &'static str {
    if firmware == Firmware::Arm64 {
        "qemu-system-aarch64"
    } else {
        "qemu-system-x86_64"
    }
}

/// Firmware in two flash devices: `code` read-only, and the VM's own copy (named by its MAC)
/// of the variables `vars`, which the firmware writes.
fn flash(cmd: &mut Command, dir: &Path, mac: Mac, code: &str, vars: &str) {
    let own = dir.join(format!("{}.vars.fd", mac.to_string().replace(':', "")));
    if let Err(e) = std::fs::copy(vars, &own) {
        eprintln!("lab: copying {vars}: {e}");
    }
    cmd.args([
        "-drive",
        &format!("if=pflash,format=raw,unit=0,readonly=on,file={code}"),
    ])
    .args([
        "-drive",
        &format!("if=pflash,format=raw,unit=1,file={}", own.display()),
    ]);
}

fn nic_args(cmd: &mut Command, tap: &str, mac: Mac, firmware: Firmware, dir: &Path) {
    cmd.args([
        "-netdev",
        &format!("tap,id=n0,ifname={tap},script=no,downscript=no"),
    ]);
    match firmware {
        Firmware::Bios => {
            cmd.args(["-device", &format!("virtio-net-pci,netdev=n0,mac={mac}")])
                .args(["-boot", "n"]);
        }
        // OVMF boots by bootindex, not by `-boot n`.
        Firmware::Uefi => {
            cmd.args([
                "-device",
                &format!("virtio-net-pci,netdev=n0,mac={mac},bootindex=1"),
            ])
            .args(["-bios", OVMF]);
        }
        // An empty romfile leaves the NIC to OVMF's own virtio and PXE drivers.
        Firmware::UefiPxe => {
            cmd.args([
                "-device",
                &format!("virtio-net-pci,netdev=n0,mac={mac},bootindex=1,romfile="),
            ])
            .args(["-bios", OVMF]);
        }
        // Secure Boot needs SMM (q35) and the pflash marked secure, so that only SMM code may
        // write the variables that hold the keys.
        Firmware::UefiSecure => {
            cmd.args(["-machine", "q35,smm=on"])
                .args(["-m", &SECURE_MEMORY_MIB.to_string()])
                .args(["-global", "driver=cfi.pflash01,property=secure,value=on"]);
            flash(cmd, dir, mac, OVMF_SECURE_CODE, OVMF_SECURE_VARS);
            cmd.args([
                "-device",
                &format!("virtio-net-pci,netdev=n0,mac={mac},bootindex=1,romfile="),
            ]);
        }
        // AAVMF's own virtio-net driver and PXE (an empty romfile: qemu's EFI ROMs are x86).
        Firmware::Arm64 => {
            cmd.args(["-machine", "virt", "-cpu", "cortex-a57"])
                .args(["-m", &ARM64_MEMORY_MIB.to_string()]);
            flash(cmd, dir, mac, AAVMF_CODE, AAVMF_VARS);
            cmd.args([
                "-device",
                &format!("virtio-net-pci,netdev=n0,mac={mac},bootindex=1,romfile="),
            ]);
        }
        // Without PXE (and IPv6, whose HTTP boot would wait for a router first) the only
        // network boot option left to OVMF is HTTP boot over IPv4.
        Firmware::UefiHttp => {
            cmd.args([
                "-device",
                &format!("virtio-net-pci,netdev=n0,mac={mac},bootindex=1,romfile="),
            ])
            .args(["-bios", OVMF]);
            for off in ["IPv4PXESupport", "IPv6PXESupport", "IPv6Support"] {
                cmd.args([
                    "-fw_cfg",
                    &format!("name=opt/org.tianocore/{off},string=no"),
                ]);
            }
        }
        // IPv6 only: no IPv4 stack (so no HTTP boot over IPv4) and no IPv4 PXE; for HTTP
        // boot no IPv6 PXE either, so HTTP boot over IPv6 is the one boot option left.
        Firmware::UefiHttp6 | Firmware::UefiPxe6 => {
            cmd.args([
                "-device",
                &format!("virtio-net-pci,netdev=n0,mac={mac},bootindex=1,romfile="),
            ])
            .args(["-bios", OVMF]);
            let mut off = vec!["IPv4Support", "IPv4PXESupport"];
            if firmware == Firmware::UefiHttp6 {
                off.push("IPv6PXESupport");
                // OVMF 2022.11's HTTP boot starts DHCPv6 before its link-local address is
                // out of duplicate address detection and gives up at once; a boot manager
                // timeout (qemu's splash-time, which OVMF takes as its own) lets DAD end first.
                cmd.args(["-boot", "menu=on,splash-time=4000"]);
            }
            for off in off {
                cmd.args([
                    "-fw_cfg",
                    &format!("name=opt/org.tianocore/{off},string=no"),
                ]);
            }
        }
    }
}

/// A client's first disk (`lab --disk`).
#[derive(Debug, Clone, PartialEq)]
pub enum Disk {
    /// A local disk of this many MiB with an empty ext4 filesystem, the client's own
    /// (`make_disk`), kept across its power-ons.
    Empty(u64),
    /// A raw disk image every client boots from, copy-on-write in qemu.
    Image(PathBuf),
}

impl Disk {
    /// `--disk`'s value: a number of MiB (at least 8), else a file's path.
    pub fn parse(s: &str) -> Result<Disk, String> {
        match s.parse::<u64>() {
            Ok(mib) if mib >= 8 => Ok(Disk::Empty(mib)),
            Ok(_) => Err(format!("{s}: a local disk needs at least 8 MiB")),
            Err(_) => Ok(Disk::Image(PathBuf::from(s))),
        }
    }

    /// Whether it is there to use (a local disk is made at power-on).
    pub fn exists(&self) -> bool {
        match self {
            Disk::Empty(_) => true,
            Disk::Image(path) => path.is_file(),
        }
    }

    /// The qemu arguments that attach it to client `name`.
    fn args(&self, dir: &Path, name: &str) -> Vec<String> {
        let (file, snapshot) = match self {
            Disk::Empty(_) => (disk_path(dir, name), ""),
            // Copy-on-write (`snapshot=on`): every client may share the file and none
            // changes it.
            Disk::Image(path) => (path.clone(), ",snapshot=on"),
        };
        vec![
            "-drive".into(),
            format!(
                "file={},format=raw,if=virtio{snapshot}",
                file.display().to_string().replace(',', ",,")
            ),
        ]
    }
}

/// The client's local disk in the lab's run folder, `NAME.disk` (`Disk::Empty`).
fn disk_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.disk"))
}

/// Gives the client `name` a local disk of `mib` MiB holding an empty ext4 filesystem (as a
/// PC's spare partition would), unless it has one: the disk is kept across its power-ons.
pub fn make_disk(dir: &Path, name: &str, mib: u64) -> anyhow::Result<()> {
    let disk = disk_path(dir, name);
    if disk.exists() {
        return Ok(());
    }
    let out = Command::new("mke2fs")
        .args(["-q", "-F", "-t", "ext4", "-L", name])
        .arg(&disk)
        .arg(format!("{mib}M"))
        .output()
        .map_err(|e| anyhow::anyhow!("running mke2fs (package e2fsprogs): {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&disk);
        anyhow::bail!(
            "mke2fs {}: {}",
            disk.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Vm {
    /// Powers client `name` on: a `board` with `mac` on `tap`, its files in `dir`.
    pub fn power_on(
        name: &str,
        mac: Mac,
        tap: &str,
        board: &Board,
        dir: &Path,
    ) -> anyhow::Result<Vm> {
        let extra = board
            .disk
            .as_ref()
            .map(|d| d.args(dir, name))
            .unwrap_or_default();
        Vm::start(name, mac, tap, board, dir, extra)
    }

    /// A VM that is off until `resume`: qemu started stopped (`-S`, its NIC already on the
    /// tap, as a powered-off PC's keeps its link for Wake-on-LAN), with a QMP socket beside
    /// its console, `NAME.qmp`, to start it by.
    pub fn powered_off(
        name: &str,
        mac: Mac,
        tap: &str,
        board: &Board,
        dir: &Path,
    ) -> anyhow::Result<Vm> {
        let mut extra = board
            .disk
            .as_ref()
            .map(|d| d.args(dir, name))
            .unwrap_or_default();
        extra.extend([
            "-S".into(),
            "-qmp".into(),
            format!("unix:{},server=on,wait=off", qmp_path(dir, name).display()),
        ]);
        let mut vm = Vm::start(name, mac, tap, board, dir, extra)?;
        vm.held_off = None;
        Ok(vm)
    }

    /// A qemu client of `board` with `extra` arguments after its NIC's.
    fn start(
        name: &str,
        mac: Mac,
        tap: &str,
        board: &Board,
        dir: &Path,
        extra: Vec<String>,
    ) -> anyhow::Result<Vm> {
        let serial = dir.join(format!("{name}.log"));
        let mut cmd = qemu(board, Serial::Pipe);
        nic_args(&mut cmd, tap, mac, board.firmware, dir);
        // After the board's own: qemu takes the last `-m`.
        if let Some(mib) = board.memory_mib {
            cmd.args(["-m", &mib.to_string()]);
        }
        cmd.args(extra);
        let powered_on = Instant::now();
        let mut child = cmd
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {}: {e}", emulator(board.firmware)))?;
        let marks = Arc::new(Mutex::new(Marks::default()));
        let stdout = child.stdout.take().expect("piped stdout");
        // The keyboard of the console, with who types on it (`--login`).
        let keys = child.stdin.take().zip(board.login.clone().map(Typist::new));
        let log = std::fs::File::create(&serial)?;
        let m = marks.clone();
        std::thread::spawn(move || watch_console(stdout, keys, log, powered_on, m));
        Ok(Vm {
            name: name.into(),
            mac,
            serial,
            child,
            powered_on,
            held_off: Some(Duration::ZERO),
            console: Console::Running,
            marks,
        })
    }

    /// Whether it is still off, waiting for `resume`.
    pub fn is_off(&self) -> bool {
        self.held_off.is_none()
    }

    /// Powers on a VM made by `powered_off`: QMP's `cont`, on its socket in `dir`.
    pub fn resume(&mut self, dir: &Path) -> anyhow::Result<()> {
        use anyhow::Context as _;
        use std::io::{BufRead, BufReader, Write};
        let path = qmp_path(dir, &self.name);
        let stream = std::os::unix::net::UnixStream::connect(&path)
            .with_context(|| format!("connecting to {}", path.display()))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut writer = stream.try_clone()?;
        let mut lines = BufReader::new(stream).lines();
        // The greeting, then each command's answer.
        qmp_answer(&mut lines)?;
        for command in ["qmp_capabilities", "cont"] {
            writeln!(writer, "{{\"execute\": \"{command}\"}}")?;
            qmp_answer(&mut lines)?;
        }
        self.held_off = Some(self.powered_on.elapsed());
        Ok(())
    }

    /// Notes the done or failure line. Returns true while qemu runs.
    pub fn poll(&mut self) -> bool {
        if self.console == Console::Running {
            let m = self.marks.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(t) = m.done {
                self.console = Console::Booted(t.saturating_sub(self.held_off.unwrap_or_default()));
            } else if let Some(why) = m.failed {
                self.console = Console::Failed(why);
            }
        }
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Seconds from power-on until iPXE started DHCP: the firmware's share of the boot, which
    /// bootpool cannot see.
    pub fn firmware_s(&self) -> Option<f64> {
        self.marks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .dhcp
            .map(|d| {
                d.saturating_sub(self.held_off.unwrap_or_default())
                    .as_secs_f64()
            })
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The last lines of the console, for a failure report.
    /// Whether the console has shown `text` so far.
    pub fn console_contains(&self, text: &str) -> bool {
        let seen = std::fs::read(&self.serial).unwrap_or_default();
        String::from_utf8_lossy(&seen).contains(text)
    }

    pub fn console_tail(&self, lines: usize) -> String {
        let text = std::fs::read(&self.serial).unwrap_or_default();
        let text = String::from_utf8_lossy(&text).replace('\r', "");
        let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads QMP's lines up to its greeting or a command's answer (events may come between): Ok
/// for a greeting or a `return`, the error for an `error`.
fn qmp_answer(lines: &mut impl Iterator<Item = std::io::Result<String>>) -> anyhow::Result<()> {
    for line in lines {
        let line = line?;
        if line.contains("\"error\"") {
            anyhow::bail!("qemu's QMP said {line}");
        }
        if line.contains("\"return\"") || line.contains("\"QMP\"") {
            return Ok(());
        }
    }
    anyhow::bail!("qemu's QMP socket closed")
}

/// Where the QMP socket of a VM started off (`Vm::powered_off`) is.
fn qmp_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.qmp"))
}

/// Copies the console to its log file and notes when the lines that matter arrive.
/// With `keys`, types on the console what its typist says to as the text arrives.
fn watch_console(
    mut from: impl std::io::Read,
    mut keys: Option<(ChildStdin, Typist)>,
    mut log: std::fs::File,
    start: Instant,
    marks: Arc<Mutex<Marks>>,
) {
    use std::io::Write;
    let mut text = String::new();
    // Where the console's text stood at the last typing.
    let mut typed_at = 0;
    let mut buf = [0u8; 8192];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        let now = start.elapsed();
        let _ = log.write_all(&buf[..n]);
        // Search only the new text and a little before it, for a marker split across reads.
        let from_at = text.len().saturating_sub(64);
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
        if let Some((keyboard, typist)) = keys.as_mut()
            && let Some(typed) = typist.next(&text[typed_at..])
        {
            typed_at = text.len();
            let _ = keyboard.write_all(typed.as_bytes());
            let _ = keyboard.flush();
        }
        let fresh = &text[text.floor_char_boundary(from_at)..];
        let mut m = marks.lock().unwrap_or_else(|e| e.into_inner());
        if m.dhcp.is_none() && DHCP_MARKS.iter().any(|mark| fresh.contains(mark)) {
            m.dhcp = Some(now);
        }
        if m.done.is_none() && (fresh.contains(DONE_LINE) || fresh.contains(LOGIN_PROMPT)) {
            m.done = Some(now);
        }
        if m.failed.is_none()
            && let Some(at) = text.find(REFUSED_MARKS[0])
            && let Some(line) = text[at..].split_once('\n').map(|(l, _)| l)
            && line.contains(REFUSED_MARKS[1])
        {
            m.failed = Some("the firmware refused to run its loader (Access Denied)".into());
        }
        if m.failed.is_none()
            && let Some(at) = text.find(FAIL_MARK)
        {
            let rest = &text[at + FAIL_MARK.len()..];
            // Wait for the end of the line to have the whole reason.
            if let Some(end) = rest.find('\n') {
                m.failed = Some(rest[..end].trim().to_string());
            }
        }
    }
}

/// Whether KVM can run the iPXE ROM here. On some nested hosts /dev/kvm opens but the ROM
/// stops with an emulation failure, so the probe boots the ROM itself and watches the console.
pub fn probe_kvm(tap: &str, dir: &Path) -> bool {
    if !Path::new("/dev/kvm").exists() {
        return false;
    }
    let serial = dir.join("kvm-probe.log");
    let board = Board {
        accel: Accel::Kvm,
        firmware: Firmware::Bios,
        memory_mib: None,
        disk: None,
        login: None,
    };
    let mut cmd = qemu(&board, Serial::File(&serial));
    nic_args(
        &mut cmd,
        tap,
        "52:54:00:00:00:01".parse().expect("valid MAC"),
        Firmware::Bios,
        dir,
    );
    let Ok(mut child) = cmd.spawn() else {
        return false;
    };
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut works = false;
    while Instant::now() < deadline {
        let text = std::fs::read(&serial).unwrap_or_default();
        if String::from_utf8_lossy(&text).contains("iPXE initialising devices") {
            works = true;
            break;
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&serial);
    works
}

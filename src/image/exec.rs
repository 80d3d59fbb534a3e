//! `bootpool image exec NAME -- CMD...` and `bootpool image shell NAME`: an upgrade in place.
//! The command runs in a copy of a revision (the active one by default) that costs nothing
//! to make: an overlay whose lower layer is the revision's tree, so a write copies the file
//! up and never reaches the stored object other revisions share. It runs under
//! systemd-nspawn when the host has it, else chrooted with /proc, /sys and /dev mounted in a
//! mount namespace of its own (they go when it ends). If it exits 0 the overlay's view is
//! imported as a new revision through the store (`import`), not active until activated; if
//! not, nothing is imported and the error gives its exit status and last lines.

use super::import::{self, Imported};
use super::store;
use crate::config::Image;
use anyhow::{Context as _, bail};
use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

/// How many of the command's last output lines a failure shows.
const LAST_LINES: usize = 20;

/// What to run, and in which revision.
#[derive(Debug, Clone)]
pub struct Request {
    /// The revision (`r3`, an id); None: the active one.
    pub rev: Option<String>,
    pub command: Vec<String>,
    /// The command talks to the terminal (`image shell`): its output is not captured.
    pub interactive: bool,
    /// Build the new revision's NBD root image (`serve::nbd_served`).
    pub squashfs: bool,
}

/// What an exec made: the revision it ran in, and the import of the result.
pub struct Done {
    pub base: store::Revision,
    pub imported: Imported,
}

/// Runs `req` in a copy of a revision of `image` and imports the result.
pub fn exec(image: &Image, req: &Request) -> anyhow::Result<Done> {
    let dir = &image.dir;
    if !store::managed(dir) {
        bail!(
            "image {}: {} holds no revisions (bootpool image import {} first)",
            image.name,
            dir.display(),
            image.name
        );
    }
    let base = match &req.rev {
        Some(r) => store::find(dir, r)?,
        None => {
            let id = store::active(dir)?.with_context(|| {
                format!("image {}: no active revision (give --rev)", image.name)
            })?;
            store::read(dir, &id)?
                .with_context(|| format!("image {}: no revision {id}", image.name))?
        }
    };
    let rev = crate::config::names::revision(image, &base.id);
    let mut work = Work::new(dir)?;
    work.mount(&rev.root_tree())?;
    let label = format!("{} ({})", base.label(), base.id);
    eprintln!(
        "exec: running `{}` in a copy of {label}",
        req.command.join(" ")
    );
    let (status, last) = run(&work.merged, req)?;
    if !status.success() {
        let how = match status.code() {
            Some(c) => format!("exit status {c}"),
            None => format!("{status}"),
        };
        let tail = if last.is_empty() {
            String::new()
        } else {
            format!("; its last lines:\n{}", last.join("\n"))
        };
        bail!(
            "image {}: `{}` failed in a copy of {label} ({how}): no revision made{tail}",
            image.name,
            req.command.join(" ")
        );
    }
    // The kernel and initrd: the tree's /boot as an import finds them, else the revision's.
    let (kernel, initrd) = match import::find_boot(&work.merged) {
        Ok(_) => (None, None),
        Err(_) => (Some(rev.kernel()), Some(rev.initrd())),
    };
    let imported = import::import(
        image,
        &import::Request {
            from: work.merged.clone(),
            kernel,
            initrd,
            squashfs: req.squashfs,
            source: Some(format!(
                "exec on {}: {}",
                base.label(),
                req.command.join(" ")
            )),
        },
    )?;
    Ok(Done { base, imported })
}

/// The overlay: `DIR/.exec-PID/{upper,work,merged}`, unmounted and removed when dropped.
struct Work {
    top: PathBuf,
    merged: PathBuf,
    mounted: bool,
}

impl Work {
    fn new(dir: &Path) -> anyhow::Result<Work> {
        clear_leftovers(dir);
        let top = dir.join(format!(".exec-{}", std::process::id()));
        for d in ["upper", "work", "merged"] {
            std::fs::create_dir_all(top.join(d))
                .with_context(|| format!("creating {}", top.join(d).display()))?;
        }
        Ok(Work {
            merged: top.join("merged"),
            top,
            mounted: false,
        })
    }

    fn mount(&mut self, lower: &Path) -> anyhow::Result<()> {
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            self.top.join("upper").display(),
            self.top.join("work").display()
        );
        let out = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &opts])
            .arg(&self.merged)
            .output()
            .context("running mount")?;
        if !out.status.success() {
            bail!(
                "mounting an overlay over {}: {} (an overlay needs root and the overlay module)",
                lower.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        self.mounted = true;
        Ok(())
    }
}

/// The work folders of execs that were killed (their process is gone): unmounted, then
/// removed. One still mounted after `umount` is left alone (removing files through an overlay
/// would write whiteouts into it, not harm the revision, but it is not ours to guess).
fn clear_leftovers(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mounts = || std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(".exec-") else {
            continue;
        };
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        let merged = e.path().join("merged");
        // As mountinfo names it: absolute, no symlinks.
        let shown = std::fs::canonicalize(&merged)
            .unwrap_or_else(|_| merged.clone())
            .display()
            .to_string();
        if mounts().contains(&format!(" {shown} ")) {
            let _ = Command::new("umount").arg(&merged).status();
            if mounts().contains(&format!(" {shown} ")) {
                continue;
            }
        }
        let _ = std::fs::remove_dir_all(e.path());
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.merged).status();
        }
        let _ = std::fs::remove_dir_all(&self.top);
    }
}

/// The command under systemd-nspawn if the host has it, else chrooted in a mount namespace
/// of its own with /proc, /sys and /dev (and the host's resolv.conf, for a package manager).
fn command(root: &Path, args: &[String]) -> Command {
    if which("systemd-nspawn") {
        let mut c = Command::new("systemd-nspawn");
        c.args(["--quiet", "--register=no", "--directory"])
            .arg(root)
            .arg("--")
            .args(args);
        return c;
    }
    let script = r#"set -e
r="$1"; shift
mount -t proc proc "$r/proc"
mount --rbind /sys "$r/sys"
mount --rbind /dev "$r/dev"
if [ -f "$r/etc/resolv.conf" ] && [ ! -L "$r/etc/resolv.conf" ]; then
    mount --bind -o ro /etc/resolv.conf "$r/etc/resolv.conf"
fi
exec chroot "$r" "$@"
"#;
    let mut c = Command::new("unshare");
    c.args([
        "--mount",
        "--propagation",
        "private",
        "--fork",
        "sh",
        "-c",
        script,
        "sh",
    ])
    .arg(root)
    .args(args);
    c
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Runs the command in `root`; its status and (unless interactive) its last output lines,
/// which are passed on to ours as they come.
fn run(root: &Path, req: &Request) -> anyhow::Result<(ExitStatus, Vec<String>)> {
    // Mount points the tree lacks are made for the command and taken away after it, so
    // the new revision has only what the command made.
    let mut made = Vec::new();
    for d in ["proc", "sys", "dev"] {
        if std::fs::symlink_metadata(root.join(d)).is_err() {
            std::fs::create_dir(root.join(d))?;
            made.push(root.join(d));
        }
    }
    let ran = run_in(root, req);
    for d in made {
        let _ = std::fs::remove_dir(d);
    }
    ran
}

fn run_in(root: &Path, req: &Request) -> anyhow::Result<(ExitStatus, Vec<String>)> {
    let mut cmd = command(root, &req.command);
    if req.interactive {
        let status = cmd.status().context("running the command")?;
        return Ok((status, vec![]));
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running the command")?;
    let last = Arc::new(Mutex::new(VecDeque::new()));
    let tee = |r: Box<dyn std::io::Read + Send>, to_err: bool| {
        let last = last.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(r).split(b'\n').map_while(Result::ok) {
                let text = String::from_utf8_lossy(&line).into_owned();
                if to_err {
                    let _ = writeln!(std::io::stderr(), "{text}");
                } else {
                    let _ = writeln!(std::io::stdout(), "{text}");
                }
                let mut l = last.lock().unwrap_or_else(|e| e.into_inner());
                if l.len() == LAST_LINES {
                    l.pop_front();
                }
                l.push_back(text);
            }
        })
    };
    let out = tee(Box::new(child.stdout.take().context("stdout")?), false);
    let err = tee(Box::new(child.stderr.take().context("stderr")?), true);
    let status = child.wait().context("waiting for the command")?;
    let _ = out.join();
    let _ = err.join();
    let last = last
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .cloned()
        .collect();
    Ok((status, last))
}

//! `bootpool image`: import, exec, shell, list, activate, rollback, prune, blocks. Reads the config for each
//! image's folder and the boot record for which revisions clients run; prints what it did.

use super::{blocks, blocks_file, exec, import, objects, pull, serve, store, usage};
use crate::config::{Config, Image, names};
use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct ImageArgs {
    #[arg(short, long, default_value_os_t = crate::config::default_file(), hide_default_value = true, help = crate::config::FILE_HELP, global = true)]
    pub config: PathBuf,
    #[command(subcommand)]
    pub command: ImageCommand,
}

#[derive(Subcommand, Debug)]
pub enum ImageCommand {
    /// Import a root tree, a root tarball or an OCI image as a new revision of image NAME.
    Import {
        /// The image (`images.NAME` in the config; its `dir` holds the revisions).
        name: String,
        /// A folder (a root tree, or an OCI layout), a root tarball (.tar, .tar.gz, .tar.xz,
        /// .tar.zst), or an OCI/docker archive (`docker save`, `podman save`).
        #[arg(long, value_name = "SOURCE")]
        from: PathBuf,
        /// The kernel to boot, a file on this host (default: the tree's /boot/vmlinuz-*).
        #[arg(long, value_name = "FILE")]
        kernel: Option<PathBuf>,
        /// The initrd to boot, a file on this host (default: the tree's matching initrd).
        #[arg(long, value_name = "FILE")]
        initrd: Option<PathBuf>,
        /// Activate the new revision (the first revision of an image is always activated).
        #[arg(long)]
        activate: bool,
    },
    /// Run CMD in a copy of the active revision (an overlay over its tree; systemd-nspawn, or
    /// a chroot with /proc, /sys and /dev) and import the result as a new revision, not
    /// active until `bootpool image activate`. A command that fails makes no revision.
    Exec {
        name: String,
        /// Run in this revision (`r3`, or an id) instead of the active one.
        #[arg(long, value_name = "REV")]
        rev: Option<String>,
        /// The command and its arguments, after `--` (e.g. `-- apt-get -y upgrade`).
        #[arg(required = true, last = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// An interactive shell in a copy of the active revision; what it changes becomes a new
    /// revision when it exits 0 (`exit 1` leaves none), as with `exec`.
    Shell {
        name: String,
        /// Start from this revision (`r3`, or an id) instead of the active one.
        #[arg(long, value_name = "REV")]
        rev: Option<String>,
    },
    /// Fetch a revision another bootpool server holds: its manifest, then only the files
    /// this image's store lacks, each checked against its SHA-256 as it arrives (a bad copy
    /// is fetched again, from the next --from if given); the revision is kept only when
    /// every file checked. The read token the members ask is `$BOOTPOOL_READ_TOKEN`, else
    /// `server.read_token`.
    Pull {
        name: String,
        /// The revision's id (12 hex digits, as `bootpool image list` shows it on the
        /// member; labels such as `r3` differ between servers). Default: the revision the
        /// first member answering has active.
        #[arg(long, value_name = "ID")]
        rev: Option<String>,
        /// A member's HTTP base URL (`http://HOST:PORT`, its `server.http`); repeat for
        /// more, tried in order.
        #[arg(long = "from", value_name = "URL", required = true)]
        from: Vec<String>,
        /// Activate the pulled revision (the first revision of an image is always
        /// activated).
        #[arg(long)]
        activate: bool,
    },
    /// Print the URL of the block manifest of an NBD root image (the active revision's, or
    /// REV's; an image without revisions, its own root image), which `bootpool-agent` serves a
    /// client's root from (docs/swarm.md); the manifest is made first if the image has none.
    Blocks {
        name: String,
        /// This revision (`r3`, or an id) instead of the active one.
        #[arg(long, value_name = "REV")]
        rev: Option<String>,
    },
    /// List each image's revisions, the active one, and which clients run which.
    List {
        /// Only this image.
        name: Option<String>,
    },
    /// Make REV (`r3`, or an id) the revision that boots starting from now get.
    Activate { name: String, rev: String },
    /// Activate the revision that was active before the current one.
    Rollback { name: String },
    /// Remove revisions that are not active and that no running client uses.
    Prune {
        /// Only this image.
        name: Option<String>,
        /// Also count as over a boot that has sent nothing for this long (e.g. `30m`), for
        /// clients whose end left no evidence (by default only evidence ends a boot: an NBD
        /// disconnect, a root connection lost after `limits.root_lost_after`, a restart, a
        /// new boot).
        #[arg(long, value_name = "DURATION")]
        idle: Option<String>,
        /// Show what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Runs one `bootpool image` command on `config` (loaded from `args.config`).
pub fn run(args: ImageArgs, config: Config) -> anyhow::Result<()> {
    match args.command {
        ImageCommand::Import {
            name,
            from,
            kernel,
            initrd,
            activate,
        } => {
            let image = image(&config, &name)?;
            let first = store::active(&image.dir)?.is_none();
            let req = import::Request {
                from,
                kernel,
                initrd,
                squashfs: serve::nbd_served(&config, &name),
                source: None,
            };
            let needs = super::bootable::needs(&config, &name);
            let done = import::import_for(&image, &req, &needs)?;
            let r = &done.revision;
            if done.new {
                println!(
                    "image {name}: imported {} ({}) from {} ({}, {} entries, {} MiB)",
                    r.label(),
                    r.id,
                    r.meta.source,
                    r.meta.format,
                    r.meta.entries,
                    r.meta.tree_bytes >> 20
                );
                println!("image {name}: {}", done.stored.sentence());
            } else {
                println!(
                    "image {name}: same content as {} ({}); nothing added",
                    r.label(),
                    r.id
                );
            }
            if first || activate {
                let _lock = store::lock(&image.dir)?;
                root_image(&config, &image, &r.id)?;
                store::activate(&image.dir, &r.id)?;
                println!("image {name}: {} is active", r.label());
            } else if store::active(&image.dir)?.as_deref() != Some(r.id.as_str()) {
                println!(
                    "image {name}: boots get it after `bootpool image activate {name} {}`",
                    r.label()
                );
            }
            Ok(())
        }
        ImageCommand::Pull {
            name,
            rev,
            from,
            activate,
        } => pull(&config, &name, rev, from, activate),
        ImageCommand::Exec { name, rev, command } => exec(&config, &name, rev, command, false),
        ImageCommand::Shell { name, rev } => {
            let image = image(&config, &name)?;
            let base = match &rev {
                Some(r) => store::find(&image.dir, r)?.id,
                None => store::active(&image.dir)?.unwrap_or_default(),
            };
            let tree = crate::config::names::revision(&image, &base).root_tree();
            let sh = if tree.join("bin/bash").exists() {
                "/bin/bash"
            } else {
                "/bin/sh"
            };
            exec(&config, &name, rev, vec![sh.into(), "-l".into()], true)
        }
        ImageCommand::Blocks { name, rev } => {
            let image = image(&config, &name)?;
            let root = match (&rev, store::managed(&image.dir)) {
                (Some(r), _) => names::revision(&image, &store::find(&image.dir, r)?.id),
                (None, true) => match store::active(&image.dir)? {
                    Some(id) => names::revision(&image, &id),
                    None => bail!("image {name} has no active revision"),
                },
                (None, false) => (*image).clone(),
            }
            .root_image();
            let digest = blocks_file::current(&root)?;
            let s = &config.server;
            println!(
                "http://{}:{}/boot/{name}/blocks/{}",
                s.address,
                s.http.port(),
                blocks::hex(&digest)
            );
            Ok(())
        }
        ImageCommand::List { name } => {
            let running = running(&config, None)?;
            let mut shown = 0;
            for image in config.images.values() {
                if name.as_ref().is_some_and(|n| n != &image.name) {
                    continue;
                }
                shown += 1;
                list(image, &running)?;
            }
            if let Some(n) = name
                && shown == 0
            {
                bail!("no image `{n}` in {}", args.config.display());
            }
            Ok(())
        }
        ImageCommand::Activate { name, rev } => {
            println!("{}", activate(&config, &name, &rev)?);
            Ok(())
        }
        ImageCommand::Rollback { name } => {
            let image = image(&config, &name)?;
            let _lock = store::lock(&image.dir)?;
            let Some(id) = store::previous(&image.dir)? else {
                bail!("image {name}: no earlier revision to go back to");
            };
            root_image(&config, &image, &id)?;
            store::activate(&image.dir, &id)?;
            let label = store::read(&image.dir, &id)?.map_or(id.clone(), |r| r.label());
            println!("image {name}: rolled back to {label} ({id})");
            Ok(())
        }
        ImageCommand::Prune {
            name,
            idle,
            dry_run,
        } => {
            let idle = idle
                .map(|s| {
                    crate::config::parse_duration(&s)
                        .map_err(|e| anyhow::anyhow!("--idle {s}: {e}"))
                })
                .transpose()?;
            let running = running(&config, idle.map(|d| d.as_micros() as i64))?;
            for image in config.images.values() {
                if name.as_ref().is_some_and(|n| n != &image.name) {
                    continue;
                }
                prune(image, &running, &pinned(&config, &image.name), dry_run)?;
            }
            Ok(())
        }
    }
}

/// `image pull`: fetches a revision from the members `from` and says what moved.
fn pull(
    config: &Config,
    name: &str,
    rev: Option<String>,
    from: Vec<String>,
    activate: bool,
) -> anyhow::Result<()> {
    let image = image(config, name)?;
    let first = store::active(&image.dir)?.is_none();
    let token = std::env::var("BOOTPOOL_READ_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .or_else(|| config.server.read_token.clone());
    let req = pull::Request {
        rev,
        from,
        token,
        squashfs: serve::nbd_served(config, name),
    };
    let done = pull::pull(&image, &req)?;
    let r = &done.revision;
    match done.new {
        true => println!(
            "image {name}: pulled {} ({}) from {} ({} entries, {} MiB)",
            r.label(),
            r.id,
            done.from,
            r.meta.entries,
            r.meta.tree_bytes >> 20
        ),
        false => println!(
            "image {name}: {} ({}) is here already; nothing pulled",
            r.label(),
            r.id
        ),
    }
    println!("image {name}: {}", done.moved.sentence());
    if first || activate {
        let _lock = store::lock(&image.dir)?;
        root_image(config, &image, &r.id)?;
        store::activate(&image.dir, &r.id)?;
        println!("image {name}: {} is active", r.label());
    } else if store::active(&image.dir)?.as_deref() != Some(r.id.as_str()) {
        println!(
            "image {name}: boots get it after `bootpool image activate {name} {}`",
            r.label()
        );
    }
    Ok(())
}

/// `image exec` and `image shell`: runs `command` in a copy of a revision, imports the
/// result and says what it added.
fn exec(
    config: &Config,
    name: &str,
    rev: Option<String>,
    command: Vec<String>,
    interactive: bool,
) -> anyhow::Result<()> {
    let image = image(config, name)?;
    let req = exec::Request {
        rev,
        command,
        interactive,
        squashfs: serve::nbd_served(config, name),
    };
    let done = exec::exec(&image, &req)?;
    let r = &done.imported.revision;
    if !done.imported.new {
        println!(
            "image {name}: the copy of {} has the same content as {} ({}); nothing added",
            done.base.label(),
            r.label(),
            r.id
        );
        return Ok(());
    }
    println!(
        "image {name}: imported {} ({}) from {}",
        r.label(),
        r.id,
        r.meta.source
    );
    println!("image {name}: {}", done.imported.stored.sentence());
    println!(
        "image {name}: boots get it after `bootpool image activate {name} {}`",
        r.label()
    );
    Ok(())
}

fn image(config: &Config, name: &str) -> anyhow::Result<Arc<Image>> {
    config.images.get(name).cloned().with_context(|| {
        format!(
            "{}: no image `{name}` (add images.{name}.dir, the folder its revisions go in)",
            config.file.display()
        )
    })
}

/// Who runs what, from the record store (none recorded yet: nobody).
fn running(config: &Config, idle: Option<i64>) -> anyhow::Result<Vec<usage::Running>> {
    let timelines = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(crate::record::load(&config.server))
        .context("reading the boot records (which revisions clients run)")?;
    let now = crate::record::event::now_micros();
    Ok(usage::running(config, &timelines, now, idle))
}

fn list(image: &Image, running: &[usage::Running]) -> anyhow::Result<()> {
    let dir = &image.dir;
    if !store::managed(dir) {
        println!(
            "image {}: {} (assembled by hand, no revisions)",
            image.name,
            dir.display()
        );
        return Ok(());
    }
    let active = store::active(dir)?;
    println!("image {}: {}", image.name, dir.display());
    println!("  rev   id            active  clients  imported              format   MiB  source");
    for r in store::list(dir)? {
        let on = running
            .iter()
            .filter(|c| c.image == image.name && c.revision == r.id)
            .count();
        println!(
            "  {:<5} {}  {:<6}  {:<7}  {:<20}  {:<7} {:>4}  {}",
            r.label(),
            r.id,
            if active.as_deref() == Some(r.id.as_str()) {
                "*"
            } else {
                ""
            },
            on,
            unix_time(r.meta.imported_at),
            r.meta.format,
            r.meta.tree_bytes >> 20,
            r.meta.source
        );
    }
    let act = usage::active_revisions_of(image);
    for b in usage::behind(running, &act) {
        println!("  {}", b.sentence());
    }
    Ok(())
}

/// Makes REV (a label or an id) of image NAME the active revision, under a running daemon or
/// not, and says so (`bootpool image activate`, and the lab's `--activate`).
pub fn activate(config: &Config, name: &str, rev: &str) -> anyhow::Result<String> {
    let image = image(config, name)?;
    let _lock = store::lock(&image.dir)?;
    let r = store::find(&image.dir, rev)?;
    root_image(config, &image, &r.id)?;
    store::activate(&image.dir, &r.id)?;
    Ok(format!(
        "image {name}: {} ({}) is active; boots starting from now get it, running clients keep theirs until they reboot",
        r.label(),
        r.id
    ))
}

/// Makes revision `id`'s squashfs root image if an NBD pool serves the image and it has none
/// (it was imported while none did), before it is activated.
fn root_image(config: &Config, image: &Image, id: &str) -> anyhow::Result<()> {
    if serve::nbd_served(config, &image.name) && import::root_image(image, id)? {
        println!("image {}: made the NBD root image of {id}", image.name);
    }
    Ok(())
}

/// The revisions of image `name` that client entries pin (`clients[].revision`, canaries).
fn pinned(config: &Config, name: &str) -> Vec<String> {
    config
        .pools
        .values()
        .flat_map(|p| {
            p.clients.iter().filter_map(move |e| {
                let image = e.image.as_ref().unwrap_or(&p.image);
                (image.name == name).then(|| e.revision.clone()).flatten()
            })
        })
        .collect()
}

fn prune(
    image: &Image,
    running: &[usage::Running],
    pinned: &[String],
    dry_run: bool,
) -> anyhow::Result<()> {
    let dir = &image.dir;
    if !store::managed(dir) {
        return Ok(());
    }
    let _lock = store::lock(dir)?;
    let active = store::active(dir)?;
    for r in store::list(dir)? {
        let users: Vec<&usage::Running> = running
            .iter()
            .filter(|c| c.image == image.name && c.revision == r.id)
            .collect();
        if active.as_deref() == Some(r.id.as_str()) {
            println!(
                "image {}: keeping {} ({}): active",
                image.name,
                r.label(),
                r.id
            );
        } else if pinned.contains(&r.id) {
            println!(
                "image {}: keeping {} ({}): a client's `revision` in pools.yaml",
                image.name,
                r.label(),
                r.id
            );
        } else if !users.is_empty() {
            let macs: Vec<&str> = users.iter().map(|u| u.mac.as_str()).collect();
            println!(
                "image {}: keeping {} ({}): {} running client(s): {}",
                image.name,
                r.label(),
                r.id,
                users.len(),
                macs.join(" ")
            );
        } else if dry_run {
            println!(
                "image {}: would remove {} ({})",
                image.name,
                r.label(),
                r.id
            );
        } else {
            // Out of `revs/` first (one rename), so nothing serves a half-removed revision.
            let from = store::rev_dir(dir, &r.id);
            let aside = dir.join(format!(".prune-{}", r.id));
            std::fs::rename(&from, &aside)
                .with_context(|| format!("moving {} aside", from.display()))?;
            std::fs::remove_dir_all(&aside)
                .with_context(|| format!("removing {}", aside.display()))?;
            println!("image {}: removed {} ({})", image.name, r.label(), r.id);
        }
    }
    if !dry_run {
        // The files only removed revisions held: the objects no tree links any more.
        let swept = objects::sweep(dir)?;
        if swept.objects > 0 {
            println!(
                "image {}: freed {} stored file(s), {} MiB",
                image.name,
                swept.objects,
                swept.bytes >> 20
            );
        }
    }
    Ok(())
}

/// `2026-12-02 15:04:05` (UTC).
fn unix_time(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

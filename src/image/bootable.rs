//! Whether an imported revision can boot, before it is one: its tree has an init (followed
//! through symlinks inside the tree, never out of it), and its initrd was made by the builder
//! whose root syntax each pool booting the image writes, with the NFS or NBD support that
//! pool's root needs. `import` refuses what fails, with the reason.

use super::initrd;
use crate::config::{Config, Initramfs, RootProto};
use anyhow::bail;
use std::path::{Component, Path, PathBuf};

/// What a pool booting the image asks of its initrd.
#[derive(Debug, Clone)]
pub struct Need {
    pub pool: String,
    pub root: RootProto,
    pub initramfs: Initramfs,
    /// The pool writes its own command line (`cmdline_template`): its syntax is its own.
    pub template: bool,
}

/// What the pools of `config` that boot image `image` ask of it.
pub fn needs(config: &Config, image: &str) -> Vec<Need> {
    config
        .pools
        .values()
        .filter(|p| p.images().iter().any(|i| i.name == image))
        .map(|p| Need {
            pool: p.name.clone(),
            root: p.root,
            initramfs: p.initramfs,
            template: p.cmdline_template.is_some(),
        })
        .collect()
}

/// The programs the kernel may run as init, as the initrds look for them.
const INITS: [&str; 4] = [
    "sbin/init",
    "init",
    "lib/systemd/systemd",
    "usr/lib/systemd/systemd",
];

/// `Err` with the reason when the revision of root `tree` and `initrd` cannot boot for
/// `needs`.
pub fn check(tree: &Path, initrd_path: &Path, needs: &[Need]) -> anyhow::Result<()> {
    if !INITS.iter().any(|i| runnable(tree, i)) {
        bail!(
            "the tree has no init: none of /{} is an executable file (symlinks followed inside \
             the tree); the kernel would have nothing to run",
            INITS.join(", /")
        );
    }
    let Some(names) = initrd::contents(initrd_path) else {
        bail!(
            "the initrd {} cannot be read as an initramfs (or its compressor's program is \
             missing)",
            initrd_path.display()
        );
    };
    let made_by = initrd::builder_of(&names);
    for need in needs {
        let Some(by) = made_by else { continue };
        if !need.template && by != need.initramfs {
            bail!(
                "the initrd was made by {}, but pool {} writes the root argument of {} \
                 (`initramfs: {}`); that initrd cannot read it: set the pool's `initramfs: {}`",
                builder_name(by),
                need.pool,
                builder_name(need.initramfs),
                builder_name(need.initramfs),
                builder_name(by)
            );
        }
        if let Some(lacks) = lacks(by, need.root, &names) {
            bail!(
                "the initrd ({}) has no {} root support, which pool {} needs: it lacks {lacks}",
                builder_name(by),
                need.root,
                need.pool
            );
        }
    }
    Ok(())
}

fn builder_name(by: Initramfs) -> &'static str {
    match by {
        Initramfs::InitramfsTools => "initramfs-tools",
        Initramfs::Dracut => "dracut",
        Initramfs::Bootpool => "bootpool",
    }
}

/// What an initrd of builder `by` with files `names` lacks for a root over `root`, if anything.
fn lacks(by: Initramfs, root: RootProto, names: &[String]) -> Option<String> {
    let has = |f: &dyn Fn(&str) -> bool| names.iter().any(|n| f(n));
    let module = |m: &str| {
        let m = format!("/{m}.ko");
        move |n: &str| n.contains(&m)
    };
    let file = |end: &'static str| move |n: &str| n == end || n.ends_with(&format!("/{end}"));
    match (by, root) {
        (Initramfs::InitramfsTools, RootProto::Nfs) => {
            if !has(&|n| n == "scripts/nfs") {
                Some("scripts/nfs (BOOT=nfs)".into())
            } else if !has(&module("nfs")) && !has(&file("nfsmount")) {
                Some("the nfs module and klibc's nfsmount".into())
            } else {
                None
            }
        }
        (Initramfs::InitramfsTools, RootProto::Nbd) => {
            if !has(&file("nbd-client")) {
                Some("nbd-client (Debian's nbd-client package adds it)".into())
            } else if !has(&module("nbd")) {
                Some("the nbd module".into())
            } else {
                None
            }
        }
        (Initramfs::Dracut, RootProto::Nfs) => {
            (!has(&|n| n.contains("nfsroot") || n.contains("modules.d/95nfs")))
                .then(|| "dracut's nfs module (nfsroot; dracut --add nfs)".into())
        }
        (Initramfs::Dracut, RootProto::Nbd) => {
            (!has(&|n| n.contains("nbdroot") || n.contains("modules.d/95nbd")))
                .then(|| "dracut's nbd module (nbdroot; dracut --add nbd)".into())
        }
        // The demo's own initrd (never what `initrd::builder_of` finds): taken as it is.
        (Initramfs::Bootpool, _) => None,
    }
}

/// Whether `rel` in `tree` is an executable regular file, its symlinks followed inside the
/// tree: an absolute target is taken from the tree's root, and `..` stops there.
fn runnable(tree: &Path, rel: &str) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    resolve(tree, Path::new(rel)).is_some_and(|p| {
        std::fs::symlink_metadata(p)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// `rel` inside `tree` with every symlink on the way resolved as the client would see it
/// (the tree its root), at most 40 of them; `None`: a loop or a missing part.
fn resolve(tree: &Path, rel: &Path) -> Option<PathBuf> {
    let mut done: Vec<std::ffi::OsString> = Vec::new();
    let mut todo: Vec<std::ffi::OsString> = parts(rel).into_iter().rev().collect();
    let mut links = 0;
    while let Some(part) = todo.pop() {
        if part == ".." {
            done.pop();
            continue;
        }
        let here: PathBuf = done.iter().fold(tree.to_path_buf(), |p, c| p.join(c));
        let next = here.join(&part);
        let meta = std::fs::symlink_metadata(&next).ok()?;
        if meta.file_type().is_symlink() {
            links += 1;
            if links > 40 {
                return None;
            }
            let target = std::fs::read_link(&next).ok()?;
            if target.is_absolute() {
                done.clear();
            }
            todo.extend(parts(&target).into_iter().rev());
        } else {
            done.push(part);
        }
    }
    Some(done.iter().fold(tree.to_path_buf(), |p, c| p.join(c)))
}

fn parts(p: &Path) -> Vec<std::ffi::OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_is_found_through_links_inside_the_tree_only() {
        use std::os::unix::fs::{PermissionsExt as _, symlink};
        let t = tempfile::tempdir().unwrap();
        let tree = t.path().join("tree");
        std::fs::create_dir_all(tree.join("usr/lib/systemd")).unwrap();
        std::fs::create_dir_all(tree.join("sbin")).unwrap();
        assert!(!runnable(&tree, "sbin/init"));
        // A link out of the tree reads the tree's own file of that name: missing here.
        let outside = t.path().join("init");
        std::fs::write(&outside, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o755)).unwrap();
        symlink("../../init", tree.join("sbin/init")).unwrap();
        assert!(!runnable(&tree, "sbin/init"));
        std::fs::remove_file(tree.join("sbin/init")).unwrap();
        symlink(&outside, tree.join("sbin/init")).unwrap();
        assert!(!runnable(&tree, "sbin/init"));
        std::fs::remove_file(tree.join("sbin/init")).unwrap();
        // Debian's: /sbin/init -> /lib/systemd/systemd, /lib -> usr/lib.
        let systemd = tree.join("usr/lib/systemd/systemd");
        std::fs::write(&systemd, "elf").unwrap();
        symlink("usr/lib", tree.join("lib")).unwrap();
        symlink("/lib/systemd/systemd", tree.join("sbin/init")).unwrap();
        assert!(!runnable(&tree, "sbin/init"), "not executable");
        std::fs::set_permissions(&systemd, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(runnable(&tree, "sbin/init"));
        // A loop is no init.
        symlink("loop", tree.join("loop")).unwrap();
        assert!(!runnable(&tree, "loop"));
    }

    #[test]
    fn each_builder_needs_its_own_root_support() {
        let names = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let tools = names(&[
            "conf/initramfs.conf",
            "scripts/nfs",
            "usr/lib/klibc/bin/nfsmount",
        ]);
        assert_eq!(
            lacks(Initramfs::InitramfsTools, RootProto::Nfs, &tools),
            None
        );
        let e = lacks(Initramfs::InitramfsTools, RootProto::Nbd, &tools).unwrap();
        assert!(e.contains("nbd-client"), "{e}");
        let nbd = names(&[
            "usr/sbin/nbd-client",
            "usr/lib/modules/6.1.0-1-amd64/kernel/drivers/block/nbd.ko.xz",
        ]);
        assert_eq!(lacks(Initramfs::InitramfsTools, RootProto::Nbd, &nbd), None);
        let dracut = names(&[
            "usr/lib/dracut/hooks/cmdline/90-parse-nfsroot.sh",
            "usr/sbin/nfsroot",
        ]);
        assert_eq!(lacks(Initramfs::Dracut, RootProto::Nfs, &dracut), None);
        let e = lacks(Initramfs::Dracut, RootProto::Nbd, &dracut).unwrap();
        assert!(e.contains("nbdroot"), "{e}");
    }
}

//! Unit tests of the NFS trees: attributes, names, listings, reads from disk, RAM and
//! mappings, handles across trees.

use super::at::stat_at;
use super::attr::attr_from_stat;
use super::cache::Clock;
use super::shared::*;
use super::*;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn fixture_with(ram: bool) -> (tempfile::TempDir, Tree) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rootfs");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::create_dir_all(root.join("big")).unwrap();
    std::fs::write(root.join("bin/su"), b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(root.join("bin/su"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::fs::create_dir_all(root.join("tmp")).unwrap();
    std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("escape")).unwrap();
    let fifo = std::ffi::CString::new(root.join("fifo").as_os_str().as_bytes()).unwrap();
    crate::sys::fs::mkfifo(&fifo, 0o640).unwrap();
    for i in 0..1234 {
        std::fs::write(root.join(format!("big/f{i}")), format!("{i}")).unwrap();
    }
    let tree = Tree::with_store([("demo".to_string(), root, ram)]);
    tree.load_ram();
    (dir, tree)
}

fn fixture() -> (tempfile::TempDir, Tree) {
    fixture_with(false)
}

fn walk(tree: &Tree, path: &[&str]) -> Result<TreeHandle, Status> {
    let mut h = tree.root();
    for p in path {
        h = tree.lookup(&h, p.as_bytes())?.0;
    }
    Ok(h)
}

#[test]
fn attributes_come_from_lstat() {
    let (dir, tree) = fixture();
    let root = dir.path().join("rootfs");
    let su = tree
        .getattr(&walk(&tree, &["demo", "bin", "su"]).unwrap())
        .unwrap();
    let m = std::fs::symlink_metadata(root.join("bin/su")).unwrap();
    assert_eq!(su.mode, 0o4755);
    assert_eq!(su.ftype, NF3REG);
    // The fileid is the handle's (the path's), not this host's inode number.
    let h = walk(&tree, &["demo", "bin", "su"]).unwrap();
    assert_eq!((su.fileid, su.size, su.uid), (h.fileid(0), 10, m.uid()));
    assert_ne!(su.fileid, m.ino());
    assert_eq!(su.mtime.0 as i64, m.mtime());
    let tmp = tree
        .getattr(&walk(&tree, &["demo", "tmp"]).unwrap())
        .unwrap();
    assert_eq!((tmp.ftype, tmp.mode), (NF3DIR, 0o1777));
    let fifo = tree
        .getattr(&walk(&tree, &["demo", "fifo"]).unwrap())
        .unwrap();
    assert_eq!((fifo.ftype, fifo.mode), (NF3FIFO, 0o640));
    let null = attr_from(1, &std::fs::symlink_metadata("/dev/null").unwrap());
    assert_eq!(null.ftype, NF3CHR);
    assert_eq!(null.rdev, (1, 3));
}

#[test]
fn symlinks_are_returned_not_followed() {
    let (_dir, tree) = fixture();
    let link = walk(&tree, &["demo", "escape"]).unwrap();
    assert_eq!(tree.getattr(&link).unwrap().ftype, NF3LNK);
    assert_eq!(tree.readlink(&link).unwrap().1, b"/etc/passwd");
    assert_eq!(
        tree.read(&link, 0, 100, &mut Vec::new()).map(|_| ()),
        Err(Error::Inval)
    );
    assert_eq!(tree.lookup(&link, b"x").map(|_| ()), Err(Error::NotDir));
}

#[test]
fn names_are_single_components_inside_the_image() {
    let (_dir, tree) = fixture();
    let img = walk(&tree, &["demo"]).unwrap();
    assert_eq!(tree.lookup(&img, b"..").unwrap().0, img);
    let bin = walk(&tree, &["demo", "bin"]).unwrap();
    assert_eq!(tree.lookup(&bin, b"..").unwrap().0, img);
    assert_eq!(tree.lookup(&img, b"bin/su").map(|_| ()), Err(Error::Acces));
    assert_eq!(tree.lookup(&img, b"").map(|_| ()), Err(Error::NoEnt));
    assert_eq!(
        tree.lookup(&img, "a".repeat(300).as_bytes()).map(|_| ()),
        Err(Error::NameTooLong)
    );
    assert!(tree.mount(b"/").is_err());
    assert!(tree.mount(b"/../demo").is_err());
    assert_eq!(tree.mount(b"/demo/bin/.."), Ok(img));
    assert_eq!(tree.mount(b"/demo/bin/su"), Err(Error::NotDir));
}

/// MOUNT follows symlinks as rpc.mountd's realpath does, relative targets from the link's
/// folder, and refuses (ACCES) what leaves the image: `..` above its root, an absolute target,
/// a loop.
#[test]
fn mount_follows_symlinks_inside_the_image() {
    let (dir, tree) = fixture();
    let root = dir.path().join("rootfs");
    let link = |target: &str, at: &str| std::os::unix::fs::symlink(target, root.join(at)).unwrap();
    std::fs::create_dir_all(root.join("usr/lib/deep")).unwrap();
    link("usr/lib", "lib");
    link("../bin", "usr/tobin");
    link("lib", "chain");
    link("../..", "usr/lib/up");
    link("../../..", "usr/lib/out");
    link("/usr/lib", "abs");
    link("loop", "loop");
    link("bin/su", "tosu");
    let img = tree.mount(b"/demo").unwrap();
    let usr_lib = walk(&tree, &["demo", "usr", "lib"]).unwrap();
    let bin = walk(&tree, &["demo", "bin"]).unwrap();
    let deep = walk(&tree, &["demo", "usr", "lib", "deep"]).unwrap();
    assert_eq!(tree.mount(b"/demo/lib"), Ok(usr_lib));
    assert_eq!(tree.mount(b"/demo/lib/"), Ok(usr_lib));
    assert_eq!(tree.mount(b"/demo/chain/deep"), Ok(deep));
    assert_eq!(tree.mount(b"/demo/usr/tobin"), Ok(bin));
    // `..` after a link goes up from where the link led, as realpath's does.
    assert_eq!(
        tree.mount(b"/demo/lib/.."),
        Ok(walk(&tree, &["demo", "usr"]).unwrap())
    );
    assert_eq!(tree.mount(b"/demo/usr/lib/up/.."), Err(Error::Acces));
    assert_eq!(tree.mount(b"/demo/usr/lib/up"), Ok(img));
    // Leaving the image: refused, not clamped.
    let outside = [
        &b"/demo/.."[..],
        b"/demo/bin/../..",
        b"/demo/usr/lib/out",
        b"/demo/abs",
        b"/demo/loop",
    ];
    for out in outside {
        assert_eq!(tree.mount(out), Err(Error::Acces), "{out:?}");
    }
    assert_eq!(tree.mount(b"/demo/tosu"), Err(Error::NotDir));
    assert_eq!(tree.mount(b"/demo/bin/su/.."), Err(Error::NotDir));
    assert_eq!(tree.mount(b"/demo/lib/nope"), Err(Error::NoEnt));
}

/// FSSTAT: the file system holding an image's folder (its statvfs), a `store: ram` image's
/// snapshot (its files' bytes and entries, nothing free), nothing for the composite root.
#[test]
fn fsstat_reports_the_image_s_file_system_or_what_ram_holds() {
    let (dir, tree) = fixture();
    let img = tree.mount(b"/demo").unwrap();
    let fs = tree.fsstat(&img).unwrap();
    let path = std::ffi::CString::new(dir.path().as_os_str().as_bytes()).unwrap();
    let st = crate::sys::fs::statvfs(&path).unwrap();
    assert_eq!(fs.tbytes, st.f_blocks * st.f_frsize);
    assert_eq!(fs.tfiles, st.f_files);
    assert!(fs.tbytes > 4096 && fs.abytes <= fs.fbytes, "{fs:?}");
    assert_eq!(fs.ffiles, fs.afiles);
    let bin = walk(&tree, &["demo", "bin"]).unwrap();
    assert_eq!(tree.fsstat(&bin).unwrap().tbytes, fs.tbytes);
    assert_eq!(
        tree.fsstat(&tree.root()),
        Ok(crate::proto::nfs3::FsStat::default())
    );

    let (_dir, ram) = fixture_with(true);
    let img = ram.mount(b"/demo").unwrap();
    // bin/su and big/f0..f1233 (their numbers as text).
    let bytes = 10
        + (0..1234)
            .map(|i: u64| i.to_string().len() as u64)
            .sum::<u64>();
    // Those, the root, bin, big, tmp, the symlink and the fifo.
    let entries = 1 + 1234 + 6;
    assert_eq!(
        ram.fsstat(&img),
        Ok(crate::proto::nfs3::FsStat {
            tbytes: bytes,
            tfiles: entries,
            ..Default::default()
        })
    );
}

/// An image exported under a path of its own is mounted by that path (and folders inside
/// it), not by its name; its handles are those it has under its name.
#[test]
fn an_export_path_names_its_image() {
    let (dir, by_name) = fixture();
    let tree = Tree::with_exports([(
        "/srv/nfs/deb".to_string(),
        "demo".to_string(),
        dir.path().join("rootfs"),
        false,
    )]);
    let img = tree.mount(b"/srv/nfs/deb").unwrap();
    assert_eq!(Ok(img), by_name.mount(b"/demo"));
    assert_eq!(tree.mount(b"//srv/nfs/deb/"), Ok(img));
    assert!(tree.mount(b"/srv/nfs/deb/bin").is_ok());
    assert_eq!(tree.mount(b"/srv/nfs/deb/bin/.."), Ok(img));
    for other in [&b"/demo"[..], b"/srv/nfs", b"/srv", b"/srv/nfs/debian"] {
        assert_eq!(tree.mount(other), Err(Error::NoEnt), "{other:?}");
    }
    assert_eq!(tree.exports().collect::<Vec<_>>(), ["/srv/nfs/deb"]);
}

fn list(tree: &Tree, dir: &TreeHandle, page: usize) -> Vec<String> {
    let mut seen = Vec::new();
    let mut cookie = 0;
    loop {
        let (_, mut it) = tree.entries(dir, cookie).unwrap();
        let mut n = 0;
        while let Some((c, name, _, _)) = it.peek() {
            seen.push(String::from_utf8(name.to_vec()).unwrap());
            cookie = c;
            it.advance();
            n += 1;
            if n == page {
                break;
            }
        }
        if it.peek().is_none() {
            return seen;
        }
    }
}

#[test]
fn readdir_cookies_resume_where_a_page_ended() {
    let (_dir, tree) = fixture();
    let big = walk(&tree, &["demo", "big"]).unwrap();
    let mut seen = list(&tree, &big, 100);
    assert_eq!(seen.len(), 1234 + 2);
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 1234 + 2, "no entry twice");
    assert!(matches!(
        tree.entries(&big, 10_000).map(|_| ()),
        Err(Error::BadCookie)
    ));
}

/// A cached listing answers LOOKUPs, and goes when the directory changes.
#[test]
fn listings_follow_the_directory() {
    let (dir, tree) = fixture();
    let bin = walk(&tree, &["demo", "bin"]).unwrap();
    assert_eq!(list(&tree, &bin, 100).len(), 3);
    assert_eq!(tree.lookup(&bin, b"sh").map(|_| ()), Err(Error::NoEnt));
    // A new name with a different mtime (filesystems with coarse timestamps need a step).
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(dir.path().join("rootfs/bin/sh"), b"x").unwrap();
    let later = std::time::SystemTime::now() + Duration::from_secs(5);
    std::fs::File::open(dir.path().join("rootfs/bin"))
        .unwrap()
        .set_modified(later)
        .unwrap();
    std::thread::sleep(FRESH + Duration::from_millis(50));
    assert!(tree.lookup(&bin, b"sh").is_ok());
    assert_eq!(list(&tree, &bin, 100).len(), 4);
}

#[test]
fn reads_from_disk_and_ram_agree() {
    for ram in [false, true] {
        let (_dir, tree) = fixture_with(ram);
        let f = walk(&tree, &["demo", "big", "f1000"]).unwrap();
        let mut out = Vec::new();
        let (attr, eof) = tree.read(&f, 1, 100, &mut out).unwrap();
        assert_eq!((out.as_slice(), eof, attr.size), (&b"000"[..], true, 4));
        out.clear();
        let (_, eof) = tree.read(&f, 0, 2, &mut out).unwrap();
        assert_eq!((out.as_slice(), eof), (&b"10"[..], false), "ram {ram}");
    }
}

/// A `store: ram` revision added while serving is read from disk until its first MOUNT loads
/// it; from then on it is a snapshot (a change on disk is not seen), and once its folder is
/// removed its contents leave memory.
#[test]
fn a_ram_revision_added_later_is_loaded_at_its_mount_and_dropped_when_removed() {
    let (dir, tree) = fixture();
    let rev = dir.path().join("rev");
    std::fs::create_dir_all(rev.join("etc")).unwrap();
    std::fs::write(rev.join("etc/hostname"), b"r2\n").unwrap();
    let img = tree
        .add_export("/demo@r2".into(), "demo@r2".into(), rev.clone(), true)
        .unwrap();
    let read_all = |tree: &Tree| {
        let h = tree.mount(b"/demo@r2").unwrap();
        let f = tree.lookup(&h, b"etc").unwrap().0;
        let f = tree.lookup(&f, b"hostname").unwrap().0;
        let mut out = Vec::new();
        tree.read(&f, 0, 100, &mut out).unwrap();
        out
    };
    assert_eq!(read_all(&tree), b"r2\n");
    assert!(!tree.images[img].in_ram());
    assert!(
        read_lock(&tree.ram.contents)
            .keys()
            .all(|h| h.image() != tree.images[img].id)
    );

    tree.load_if_ram(img);
    assert!(tree.images[img].in_ram());
    let held = |tree: &Tree| {
        let id = tree.images[img].id;
        read_lock(&tree.ram.contents)
            .keys()
            .filter(|h| h.image() == id)
            .count()
    };
    assert_eq!(held(&tree), 1);
    // Rewritten in place on disk, same size, after the attribute cache's FRESH: still r2.
    std::thread::sleep(FRESH + Duration::from_millis(100));
    std::fs::write(rev.join("etc/hostname"), b"XX\n").unwrap();
    assert_eq!(read_all(&tree), b"r2\n");

    // The disk image beside it is untouched by all this; the folder goes, so do its bytes.
    tree.drop_removed_ram();
    assert_eq!(held(&tree), 1);
    std::fs::remove_dir_all(&rev).unwrap();
    tree.drop_removed_ram();
    assert_eq!(held(&tree), 0);
    assert!(walk(&tree, &["demo", "bin", "su"]).is_ok());
}

/// Sets `path`'s mtime (and atime) to `secs`.`nsecs`.
fn set_mtime(path: &Path, secs: i64, nsecs: i64) {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let t = libc::timespec {
        tv_sec: secs,
        tv_nsec: nsecs,
    };
    crate::sys::fs::set_times(&c, t, t).unwrap();
}

/// A LOOKUP in a folder with no listing cached is remembered, "no such name" too, for as
/// long as the folder's mtime stays; a folder changed within the last second is not.
#[test]
fn names_looked_up_outside_listings_are_kept_while_the_folder_is_unchanged() {
    let (dir, tree) = fixture();
    let bin = dir.path().join("rootfs/bin");
    let old = std::fs::metadata(&bin).unwrap().mtime() - 100;
    set_mtime(&bin, old, 7);
    let binh = walk(&tree, &["demo", "bin"]).unwrap();
    assert_eq!(tree.lookup(&binh, b"late").map(|_| ()), Err(Error::NoEnt));
    let su = tree.lookup(&binh, b"su").unwrap().0;

    // Made behind its back with the folder's mtime put back: the kept answers stand.
    std::fs::write(bin.join("late"), b"x").unwrap();
    std::fs::remove_file(bin.join("su")).unwrap();
    set_mtime(&bin, old, 7);
    std::thread::sleep(FRESH + Duration::from_millis(50));
    assert_eq!(tree.lookup(&binh, b"late").map(|_| ()), Err(Error::NoEnt));
    // The child's own attributes are still checked: a deleted file is not handed out.
    assert!(tree.lookup(&binh, b"su").is_err());
    assert!(tree.getattr(&su).is_err());

    // A new mtime, and the folder is looked at again.
    set_mtime(&bin, old + 50, 0);
    std::thread::sleep(FRESH + Duration::from_millis(50));
    assert!(tree.lookup(&binh, b"late").is_ok());

    // Changed just now: not kept. The folder's attributes are looked at again after
    // FRESH; its mtime is then set to now, so that a slow machine cannot make the change
    // older than a second by the time of the lookup.
    std::fs::write(bin.join("later"), b"x").unwrap();
    std::thread::sleep(FRESH + Duration::from_millis(50));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    set_mtime(&bin, now.as_secs() as i64, now.subsec_nanos() as i64);
    assert!(tree.lookup(&binh, b"later").is_ok());
    let key = (binh, OsString::from("later"));
    assert!(lock(&tree.listings.names).get(&key).is_none());
}

/// `l` as if built `by` ago and last read `used` ago.
fn aged(l: &Listing, by: Duration, used: Duration) -> Arc<Listing> {
    let ago = |d| Instant::now().checked_sub(d).unwrap();
    Arc::new(Listing {
        mtime: l.mtime,
        built: ago(by),
        used: Mutex::new(ago(used)),
        parent: l.parent,
        children: l.children.clone(),
        attrs: l.attrs.clone(),
        plus: OnceLock::new(),
    })
}

/// A listing read lately is served as it is past `LISTING_REFRESH` while a background
/// thread rebuilds it; one unread for `KEEP_FRESH` is left alone; past `LISTING_FRESH` a
/// listing is rebuilt before it is served.
#[test]
fn old_listings_in_use_are_rebuilt_off_the_request_path() {
    let (dir, tree) = fixture();
    let tree = Arc::new(tree);
    let bin = dir.path().join("rootfs/bin");
    let old = std::fs::metadata(&bin).unwrap().mtime() - 100;
    set_mtime(&bin, old, 7);
    let binh = walk(&tree, &["demo", "bin"]).unwrap();
    let listing = |t: &Tree| t.entries(&binh, 0).unwrap().1.listing;
    let su_mode = |l: &Listing| {
        let i = l.children.iter().position(|(n, _)| n == "su").unwrap();
        l.attrs[i].mode
    };
    let first = listing(&tree);
    assert!(Arc::ptr_eq(&first, &listing(&tree)), "a listing is kept");
    assert_eq!(su_mode(&first), 0o4755);
    // A change the folder's mtime does not show: only a rebuild sees it.
    std::fs::set_permissions(bin.join("su"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let put = |l: Arc<Listing>| lock(&tree.listings.cached).insert(binh, l);

    let second = Duration::from_secs(1);
    // Too old to serve: rebuilt first.
    put(aged(&first, LISTING_FRESH + second, LISTING_FRESH + second));
    assert_eq!(su_mode(&listing(&tree)), 0o755);
    std::fs::set_permissions(bin.join("su"), std::fs::Permissions::from_mode(0o4755)).unwrap();

    // Due, but nobody read it for longer than `KEEP_FRESH`: left for a request to rebuild.
    let unread = aged(&first, LISTING_REFRESH + second, KEEP_FRESH + second);
    put(unread.clone());
    tree.refresh_listings();
    assert!(Arc::ptr_eq(&lock(&tree.listings.cached)[&binh], &unread));

    // Due and read lately: served as it is, rebuilt by the background thread with the
    // same last use; the thread ends once the tree is dropped.
    let due = aged(&first, LISTING_REFRESH + second, 10 * second);
    put(due.clone());
    let served = listing(&tree);
    assert!(Arc::ptr_eq(&served, &due));
    assert_eq!(su_mode(&served), 0o4755);
    let read_at = *lock(&due.used);
    std::fs::set_permissions(bin.join("su"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let refresher = {
        let tree = Arc::downgrade(&tree);
        std::thread::spawn(move || Tree::keep_listings_fresh(tree))
    };
    let cached = || lock(&tree.listings.cached)[&binh].clone();
    let start = Instant::now();
    while su_mode(&cached()) != 0o755 {
        assert!(start.elapsed() < Duration::from_secs(10), "not rebuilt");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(*lock(&cached().used), read_at);
    drop(tree);
    let start = Instant::now();
    while !refresher.is_finished() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "refresher still running"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a `writev` of `m`'s data between `<` and `>` sends.
fn sent(m: &MappedRead) -> Vec<u8> {
    let mut out = tempfile::tempfile().unwrap();
    let n = m
        .data()
        .writev(std::os::fd::AsFd::as_fd(&out), b"<", b">", 0)
        .unwrap();
    let mut got = Vec::new();
    std::io::Seek::rewind(&mut out).unwrap();
    std::io::Read::read_to_end(&mut out, &mut got).unwrap();
    assert_eq!(n, got.len());
    got
}

/// Small files are read from mappings kept in their own cache, with no descriptor held:
/// every read has its file's bytes, a file read all along stays (second chance), a file
/// that grew is mapped again, and a read at the end has no data.
#[test]
fn small_files_are_read_from_mappings_kept_without_a_descriptor() {
    let (dir, tree) = fixture();
    *lock(&tree.reads.small) = Clock::new(8);
    let hot = walk(&tree, &["demo", "big", "f1"]).unwrap();
    for i in (0..1234).step_by(7) {
        let f = walk(&tree, &["demo", "big", &format!("f{i}")]).unwrap();
        let m = tree.read_mapped(&f, 0, 1 << 20).unwrap().expect("mapped");
        assert_eq!(sent(&m), format!("<{i}>").as_bytes());
        assert!(m.eof);
        let m = tree.read_mapped(&hot, 0, 1 << 20).unwrap().expect("mapped");
        assert_eq!(sent(&m), b"<1>");
        assert!(lock(&tree.reads.small).map.len() <= 8);
    }
    assert!(
        lock(&tree.reads.small).map.contains_key(&hot),
        "hot file evicted"
    );
    assert!(
        lock(&tree.reads.files).map.is_empty(),
        "a descriptor was kept"
    );

    let at_end = tree.read_mapped(&hot, 1, 100).unwrap().expect("mapped");
    assert_eq!((at_end.len(), at_end.eof), (0, true));
    // Past the end too, from the mapping there is: nothing is mapped again.
    let past = tree.read_mapped(&hot, 1000, 100).unwrap().expect("mapped");
    assert_eq!((sent(&past), past.eof), (b"<>".to_vec(), true));
    assert!(Arc::ptr_eq(&past.mapping, &at_end.mapping));
    std::fs::write(dir.path().join("rootfs/big/f1"), b"1 and more").unwrap();
    std::thread::sleep(FRESH + Duration::from_millis(50));
    let m = tree.read_mapped(&hot, 2, 100).unwrap().expect("mapped");
    assert_eq!((sent(&m), m.eof), (b"<and more>".to_vec(), true));
}

#[test]
fn big_cached_reads_on_disk_are_sent_from_a_mapping_of_the_file() {
    let (dir, tree) = fixture();
    let bytes: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("rootfs/big/data"), &bytes).unwrap();
    let f = walk(&tree, &["demo", "big", "data"]).unwrap();
    // Written just now, so in the page cache; the last READ is cut at the end.
    for (offset, count, want_eof) in [(1000, 200_000, false), (200_000, 150_000, true)] {
        let m = tree
            .read_mapped(&f, offset, count)
            .unwrap()
            .expect("mapped");
        let end = (offset as usize + count).min(bytes.len());
        assert_eq!(
            (m.len(), m.eof, m.attr.size),
            (end - offset as usize, want_eof, 300_000)
        );
        assert!(sent(&m) == [&b"<"[..], &bytes[offset as usize..end], b">"].concat());
    }
    // A short READ of a big file is copied: a mapping would save little.
    assert!(tree.read_mapped(&f, 0, 4096).unwrap().is_none());
    // Not for a folder; and a RAM image's bytes are sent from memory already.
    let big = walk(&tree, &["demo", "big"]).unwrap();
    assert!(matches!(tree.read_mapped(&big, 0, 100_000), Err(st) if st == Error::IsDir));
    let (_dir, ram) = fixture_with(true);
    let f = walk(&ram, &["demo", "big", "f1000"]).unwrap();
    assert!(ram.read_mapped(&f, 0, 100_000).unwrap().is_none());
}

#[test]
fn handles_survive_a_new_tree_and_reject_strangers() {
    let (dir, tree) = fixture();
    let su = walk(&tree, &["demo", "bin", "su"]).unwrap();
    let wire = su.wire();
    let again = Tree::new([("demo".to_string(), dir.path().join("rootfs"))]);
    let h = TreeHandle::from_wire(&wire).unwrap();
    assert_eq!(again.getattr(&h).unwrap().mode, 0o4755);
    assert_eq!(TreeHandle::from_wire(&wire[1..]), Err(Error::BadHandle));
    let mut other = wire;
    other[0] = 2;
    assert_eq!(TreeHandle::from_wire(&other), Err(Error::BadHandle));
    // A handle to a file that no longer exists is stale. (Made by deleting a real file:
    // a handle with a flipped inode byte can land on another fixture file.)
    let path = dir.path().join("rootfs/bin/gone");
    std::fs::write(&path, b"x").unwrap();
    let fresh = Tree::new([("demo".to_string(), dir.path().join("rootfs"))]);
    let gone = walk(&fresh, &["demo", "bin", "gone"]).unwrap().wire();
    std::fs::remove_file(&path).unwrap();
    let later = Tree::new([("demo".to_string(), dir.path().join("rootfs"))]);
    let gone = TreeHandle::from_wire(&gone).unwrap();
    assert_eq!(later.getattr(&gone), Err(Error::Stale));
}

/// Two servers holding the same image (here: two copies of one tree, every inode another)
/// give every file the same handle, fileid and fsid, and each resolves the other's handles:
/// what lets a client's mount continue on a survivor (docs/failover.md).
#[test]
fn handles_are_the_same_on_every_server_holding_the_image() {
    let (dir, a) = fixture();
    let copy = dir.path().join("copy");
    let cp = std::process::Command::new("cp")
        .args(["-a", "--"])
        .arg(dir.path().join("rootfs"))
        .arg(&copy)
        .status()
        .unwrap();
    assert!(cp.success());
    let b = Tree::new([("demo".to_string(), copy.clone())]);
    for path in [
        &["demo"][..],
        &["demo", "bin"],
        &["demo", "bin", "su"],
        &["demo", "tmp"],
        &["demo", "fifo"],
        &["demo", "escape"],
        &["demo", "big", "f7"],
    ] {
        let (ha, hb) = (walk(&a, path).unwrap(), walk(&b, path).unwrap());
        assert_eq!(ha, hb, "{path:?}");
        let (aa, ab) = (a.getattr(&ha).unwrap(), b.getattr(&hb).unwrap());
        assert_eq!(
            (aa.fileid, aa.fsid, aa.ftype),
            (ab.fileid, ab.fsid, ab.ftype),
            "{path:?}"
        );
    }
    let rel = Path::new("bin/su");
    let ino = |root: &Path| std::fs::symlink_metadata(root.join(rel)).unwrap().ino();
    assert_ne!(ino(&dir.path().join("rootfs")), ino(&copy));
    // A server that never met the handle (a survivor) finds it by walking its copy.
    let survivor = Tree::new([("demo".to_string(), copy)]);
    let su = TreeHandle::from_wire(&walk(&a, &["demo", "bin", "su"]).unwrap().wire()).unwrap();
    assert_eq!(survivor.getattr(&su).unwrap().mode, 0o4755);
    let f7 = walk(&a, &["demo", "big", "f7"]).unwrap();
    let mut out = Vec::new();
    let (_, eof) = survivor.read(&f7, 0, 100, &mut out).unwrap();
    assert_eq!((&out[..], eof), (&b"7"[..], true));
    // Another image's name (another revision) is not the same filesystem.
    let other = Tree::new([("demo@2".to_string(), dir.path().join("rootfs"))]);
    assert_eq!(other.getattr(&su), Err(Error::Stale));
}

/// A version-1 handle (one host's inode, as releases before handles were named by path gave
/// out) still resolves, with the fileid it was given with: a client mounted across the upgrade
/// keeps working.
#[test]
fn version_1_handles_still_resolve() {
    let (dir, _tree) = fixture();
    let root = dir.path().join("rootfs");
    let fresh = Tree::new([("demo".to_string(), root.clone())]);
    let m = std::fs::symlink_metadata(root.join("bin/su")).unwrap();
    let v1 = TreeHandle::new(fresh.images[0].id, m.dev(), m.ino());
    let attr = fresh.getattr(&v1).unwrap();
    assert_eq!((attr.mode, attr.fileid), (0o4755, m.ino()));
    let wire = v1.wire();
    assert_eq!(TreeHandle::from_wire(&wire), Ok(v1));
    // Named by path now, the same file is another handle, with the path's fileid.
    let v2 = walk(&fresh, &["demo", "bin", "su"]).unwrap();
    assert_ne!(v1, v2);
    assert_eq!(fresh.getattr(&v2).unwrap().fileid, v2.fileid(0));
}

/// Attributes from a raw `fstatat` are the ones `std`'s metadata gives.
#[test]
fn raw_stat_attributes_match_metadata() {
    let (dir, _tree) = fixture();
    let root = dir.path().join("rootfs");
    let fd: OwnedFd = std::fs::File::open(&root).unwrap().into();
    for rel in ["", "bin", "bin/su", "escape", "fifo", "tmp"] {
        let st = stat_at(&fd, Path::new(rel)).unwrap();
        let m = std::fs::symlink_metadata(root.join(rel)).unwrap();
        assert_eq!(attr_from_stat(3, &st), attr_from(3, &m), "{rel}");
    }
    let null: OwnedFd = std::fs::File::open("/dev").unwrap().into();
    let st = stat_at(&null, Path::new("null")).unwrap();
    assert_eq!(attr_from_stat(1, &st).ftype, NF3CHR);
    assert_eq!(attr_from_stat(1, &st).rdev, (1, 3));
    assert!(stat_at(&fd, Path::new("nope")).is_err());
}

/// A file cache far smaller than the files read evicts, and every read still returns
/// that file's bytes; a file read again while cached stays (second chance).
#[test]
fn open_file_cache_evicts_and_serves_the_right_bytes() {
    let (_dir, tree) = fixture();
    *lock(&tree.reads.files) = Clock::new(8);
    let hot = walk(&tree, &["demo", "big", "f1"]).unwrap();
    for round in 0..2 {
        for i in (0..1234).step_by(7) {
            let f = walk(&tree, &["demo", "big", &format!("f{i}")]).unwrap();
            let mut out = Vec::new();
            tree.read(&f, 0, 100, &mut out).unwrap();
            assert_eq!(out, format!("{i}").as_bytes(), "round {round} f{i}");
            let mut out = Vec::new();
            tree.read(&hot, 0, 100, &mut out).unwrap();
            assert_eq!(out, b"1");
            assert!(lock(&tree.reads.files).map.len() <= 8);
        }
    }
    let files = lock(&tree.reads.files);
    assert!(
        files.map.contains_key(&hot),
        "the file read all along was evicted"
    );
    assert!(files.ring.len() <= 16);
}

/// The opened image root follows the folder: a new tree put in its place is served
/// once the old one's check has expired.
#[test]
fn a_new_tree_in_the_roots_place_is_served() {
    let (dir, tree) = fixture();
    assert!(walk(&tree, &["demo", "bin", "su"]).is_ok());
    let root = dir.path().join("rootfs");
    std::fs::rename(&root, dir.path().join("old")).unwrap();
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::write(root.join("bin/sh"), b"new").unwrap();
    std::thread::sleep(FRESH + Duration::from_millis(50));
    let sh = walk(&tree, &["demo", "bin", "sh"]).unwrap();
    let mut out = Vec::new();
    tree.read(&sh, 0, 10, &mut out).unwrap();
    assert_eq!(out, b"new");
    assert_eq!(
        walk(&tree, &["demo", "bin", "su"]).map(|_| ()),
        Err(Error::NoEnt)
    );
}

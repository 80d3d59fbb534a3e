//! Applies a tar stream to a root tree being built: a root tarball, or one OCI layer over the
//! layers below it (whiteouts `.wh.NAME` and `.wh..wh..opq` honoured). The rules that keep
//! an archive inside its tree: no `..` component, leading `/` dropped, no entry written
//! through a symlink (a link's target is stored, never followed), hard links only to entries
//! already in the tree, device nodes only under `/dev`.

use super::tar::{self, BLOCK, Type};
use anyhow::{Context as _, bail};
use std::collections::HashSet;
use std::ffi::{CString, OsStr};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// How an archive is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A root tarball: whiteout names are ordinary files.
    Plain,
    /// An OCI/docker layer: `.wh.` names delete what lower layers put there.
    Layer,
}

/// What one archive put in the tree.
#[derive(Debug, Default)]
pub struct Unpacked {
    pub entries: u64,
    pub bytes: u64,
}

/// Reads the tar archive `input` (uncompressed) into `root`. `what` names the archive in
/// errors; `progress` gets the bytes read so far. Longer than the house's ~150 lines on
/// purpose: it is one pass over the stream, and what that pass carries from one entry to the
/// next (a long name or pax record waiting for its entry, the paths this archive made, the
/// folders' times) stays local to it; each entry type is a few lines of one match.
pub fn unpack(
    input: &mut dyn Read,
    root: &Path,
    mode: Mode,
    what: &str,
    progress: &mut dyn FnMut(u64),
) -> anyhow::Result<Unpacked> {
    let mut r = Counting {
        inner: input,
        read: 0,
    };
    let mut out = Unpacked::default();
    // Paths this archive created: an opaque whiteout clears only what lower layers left.
    let mut ours: HashSet<PathBuf> = HashSet::new();
    let mut dir_times: Vec<(PathBuf, i64)> = Vec::new();
    let (mut long_name, mut long_link, mut pax) = (None, None, tar::Pax::default());
    let mut block = [0u8; BLOCK];
    loop {
        let at = r.read;
        match read_block(&mut r, &mut block) {
            Ok(true) => {}
            Ok(false) => bail!("{what}: archive ends without its end marker (truncated?)"),
            Err(e) => return Err(e).with_context(|| format!("{what}: reading the archive")),
        }
        if tar::is_zero(&block) {
            break;
        }
        let mut h = tar::header(&block)
            .with_context(|| format!("{what}: header at byte {at} is not a tar header"))?;
        match h.kind {
            Type::Pax | Type::LongName | Type::LongLink | Type::PaxGlobal => {
                if h.size > 1 << 20 {
                    bail!(
                        "{what}: extended header at byte {at} too long ({} bytes)",
                        h.size
                    );
                }
                let mut data = vec![0u8; h.size as usize];
                read_exact(&mut r, &mut data, what)?;
                skip(&mut r, tar::padded(h.size) - h.size, what)?;
                let trim = |mut d: Vec<u8>| {
                    while d.last() == Some(&0) {
                        d.pop();
                    }
                    d
                };
                match h.kind {
                    Type::Pax => {
                        pax = tar::pax(&data)
                            .with_context(|| format!("{what}: pax header at byte {at}"))?
                    }
                    Type::LongName => long_name = Some(trim(data)),
                    Type::LongLink => long_link = Some(trim(data)),
                    _ => {}
                }
                continue;
            }
            _ => {}
        }
        if let Some(n) = long_name.take().or(pax.path.take()) {
            h.name = n;
        }
        if let Some(l) = long_link.take().or(pax.linkpath.take()) {
            h.link = l;
        }
        h.size = pax.size.take().unwrap_or(h.size);
        h.uid = pax.uid.take().unwrap_or(h.uid);
        h.gid = pax.gid.take().unwrap_or(h.gid);
        h.mtime = pax.mtime.take().unwrap_or(h.mtime);
        pax = tar::Pax::default();

        let shown = String::from_utf8_lossy(&h.name).into_owned();
        let rel = inside(&h.name)
            .with_context(|| format!("{what}: entry `{shown}`: a path escaping the tree"))?;
        // Only a file's data is read; any other entry's (none, usually) is skipped.
        let data_len = h.size;
        out.entries += 1;
        if rel.as_os_str().is_empty() {
            // The archive's `./`: the root's own attributes are ours to keep.
            skip(&mut r, tar::padded(data_len), what)?;
            continue;
        }
        let base = rel.file_name().map(OsStr::as_bytes).unwrap_or_default();
        if mode == Mode::Layer && base.starts_with(b".wh.") {
            let parent = rel.parent().unwrap_or(Path::new(""));
            parents(root, parent, &shown, what)?;
            if base == b".wh..wh..opq" {
                clear_lower(root, parent, &ours)
                    .with_context(|| format!("{what}: opaque whiteout `{shown}`"))?;
            } else {
                let gone = parent.join(OsStr::from_bytes(&base[4..]));
                remove(&root.join(&gone)).with_context(|| format!("{what}: whiteout `{shown}`"))?;
            }
            skip(&mut r, tar::padded(data_len), what)?;
            continue;
        }
        let parent = rel.parent().unwrap_or(Path::new(""));
        parents(root, parent, &shown, what)?;
        let full = root.join(&rel);
        let existing = std::fs::symlink_metadata(&full).ok();
        // An entry replaces what was there, but a folder over a folder keeps its children.
        if let Some(m) = &existing
            && !(m.is_dir() && h.kind == Type::Dir)
        {
            remove(&full).with_context(|| format!("{what}: replacing `{shown}`"))?;
        }
        if h.kind != Type::File {
            skip(&mut r, tar::padded(data_len), what)?;
        }
        match h.kind {
            Type::File => {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&full)
                    .with_context(|| format!("{what}: creating `{shown}`"))?;
                let mut left = h.size;
                let mut buf = vec![0u8; 1 << 16];
                while left > 0 {
                    let n = left.min(buf.len() as u64) as usize;
                    read_exact(&mut r, &mut buf[..n], what)?;
                    io::Write::write_all(&mut f, &buf[..n])
                        .with_context(|| format!("{what}: writing `{shown}`"))?;
                    left -= n as u64;
                    progress(r.read);
                }
                skip(&mut r, tar::padded(h.size) - h.size, what)?;
                out.bytes += h.size;
                let t =
                    std::time::UNIX_EPOCH + std::time::Duration::from_secs(h.mtime.max(0) as u64);
                let _ = f.set_modified(t);
            }
            Type::Dir => {
                if existing.as_ref().is_none_or(|m| !m.is_dir()) {
                    std::fs::create_dir(&full)
                        .with_context(|| format!("{what}: creating folder `{shown}`"))?;
                }
                dir_times.push((full.clone(), h.mtime));
            }
            Type::Symlink => {
                if h.link.is_empty() {
                    bail!("{what}: symlink `{shown}` has no target");
                }
                std::os::unix::fs::symlink(OsStr::from_bytes(&h.link), &full)
                    .with_context(|| format!("{what}: creating symlink `{shown}`"))?;
            }
            Type::HardLink => {
                let target_shown = String::from_utf8_lossy(&h.link).into_owned();
                let target = inside(&h.link).with_context(|| {
                    format!(
                        "{what}: hard link `{shown}` -> `{target_shown}`: a path escaping the tree"
                    )
                })?;
                let tparent = target.parent().unwrap_or(Path::new(""));
                parents(root, tparent, &target_shown, what)?;
                let tfull = root.join(&target);
                match std::fs::symlink_metadata(&tfull) {
                    Ok(m) if !m.is_dir() => {}
                    _ => bail!(
                        "{what}: hard link `{shown}` -> `{target_shown}`: no such entry earlier in the archive"
                    ),
                }
                std::fs::hard_link(&tfull, &full)
                    .with_context(|| format!("{what}: creating hard link `{shown}`"))?;
            }
            Type::Char | Type::Block => {
                if !rel.starts_with("dev") {
                    bail!(
                        "{what}: entry `{shown}` is a device node outside /dev (an image holds none there)"
                    );
                }
                let kind = if h.kind == Type::Char {
                    libc::S_IFCHR
                } else {
                    libc::S_IFBLK
                };
                let dev = libc::makedev(h.dev_major, h.dev_minor);
                mknod(&full, kind | (h.mode & 0o777), dev)
                    .with_context(|| format!("{what}: creating device node `{shown}`"))?;
            }
            Type::Fifo => mknod(&full, libc::S_IFIFO | (h.mode & 0o777), 0)
                .with_context(|| format!("{what}: creating fifo `{shown}`"))?,
            Type::Other(t) => bail!(
                "{what}: entry `{shown}` has a type tar flag `{}` this importer does not take",
                t as char
            ),
            Type::Pax | Type::PaxGlobal | Type::LongName | Type::LongLink => unreachable!(),
        }
        if h.kind != Type::HardLink {
            owner_and_mode(&full, &h)
                .with_context(|| format!("{what}: setting owner and mode of `{shown}`"))?;
        }
        ours.insert(rel);
        progress(r.read);
    }
    // Folder times last: every entry written into a folder moved its time.
    for (dir, mtime) in dir_times.into_iter().rev() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime.max(0) as u64);
        if let Ok(f) = std::fs::File::open(&dir) {
            let _ = f.set_modified(t);
        }
    }
    Ok(out)
}

/// An entry's name as a path inside the tree: leading `/` and `./` dropped, `..` refused.
pub fn inside(name: &[u8]) -> anyhow::Result<PathBuf> {
    let mut p = PathBuf::new();
    for c in name.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => bail!("it has a `..` component"),
            c => p.push(OsStr::from_bytes(c)),
        }
    }
    Ok(p)
}

/// Makes sure every folder on the way to `parent` is a real folder in the tree (made if
/// missing), never a symlink: nothing is written through one.
fn parents(root: &Path, parent: &Path, shown: &str, what: &str) -> anyhow::Result<()> {
    let mut at = root.to_path_buf();
    for c in parent.components() {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(m) if m.file_type().is_symlink() => bail!(
                "{what}: entry `{shown}` goes through the symlink `{}`: a path escaping the tree",
                at.strip_prefix(root).unwrap_or(&at).display()
            ),
            Ok(_) => bail!(
                "{what}: entry `{shown}` needs `{}` to be a folder, and it is a file",
                at.strip_prefix(root).unwrap_or(&at).display()
            ),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir(&at)
                    .with_context(|| format!("{what}: creating folder {}", at.display()))?;
            }
            Err(e) => return Err(e).with_context(|| format!("{what}: {}", at.display())),
        }
    }
    Ok(())
}

/// Removes what is at `path` (a folder with everything in it); nothing there is fine.
fn remove(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// An opaque whiteout: the folder's children from lower layers go, this layer's stay.
fn clear_lower(root: &Path, dir: &Path, ours: &HashSet<PathBuf>) -> io::Result<()> {
    let full = root.join(dir);
    let entries = match std::fs::read_dir(&full) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in entries {
        let e = e?;
        if !ours.contains(&dir.join(e.file_name())) {
            remove(&e.path())?;
        }
    }
    Ok(())
}

fn mknod(path: &Path, mode: u32, dev: libc::dev_t) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    crate::sys::fs::mknod(&c, mode, dev)
}

/// Owner first (chown clears set-id bits), then the mode; a symlink keeps 0777.
fn owner_and_mode(path: &Path, h: &tar::Header) -> io::Result<()> {
    let (uid, gid) = (
        u32::try_from(h.uid).unwrap_or(65534),
        u32::try_from(h.gid).unwrap_or(65534),
    );
    match std::os::unix::fs::lchown(path, Some(uid), Some(gid)) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {} // not root: ours it is
        r => r?,
    }
    if h.kind != Type::Symlink {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(h.mode & 0o7777))?;
    }
    Ok(())
}

/// Counts the bytes read, for errors and progress.
struct Counting<'a> {
    inner: &'a mut dyn Read,
    read: u64,
}

impl Read for Counting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// One whole block; `false` at a clean end of input (no byte of the block read).
fn read_block(r: &mut Counting<'_>, b: &mut [u8; BLOCK]) -> io::Result<bool> {
    let mut got = 0;
    while got < BLOCK {
        match r.read(&mut b[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn read_exact(r: &mut Counting<'_>, buf: &mut [u8], what: &str) -> anyhow::Result<()> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            anyhow::anyhow!("{what}: archive cut short at byte {} (truncated?)", r.read)
        }
        _ => anyhow::Error::new(e).context(format!("{what}: reading the archive")),
    })
}

fn skip(r: &mut Counting<'_>, n: u64, what: &str) -> anyhow::Result<()> {
    let copied = io::copy(&mut (&mut *r).take(n), &mut io::sink())
        .with_context(|| format!("{what}: reading the archive"))?;
    if copied != n {
        bail!("{what}: archive cut short at byte {} (truncated?)", r.read);
    }
    Ok(())
}

/// Lists the names of the regular files in a tar archive, with their sizes (no data read
/// into memory): how an OCI archive is recognised.
pub fn names(input: &mut dyn Read, what: &str) -> anyhow::Result<Vec<(PathBuf, u64)>> {
    let mut r = Counting {
        inner: input,
        read: 0,
    };
    let mut out = Vec::new();
    let mut block = [0u8; BLOCK];
    let (mut long_name, mut pax_path) = (None, None);
    loop {
        let at = r.read;
        if !read_block(&mut r, &mut block)
            .with_context(|| format!("{what}: reading the archive"))?
        {
            bail!("{what}: archive ends without its end marker (truncated?)");
        }
        if tar::is_zero(&block) {
            return Ok(out);
        }
        let h = tar::header(&block)
            .with_context(|| format!("{what}: header at byte {at} is not a tar header"))?;
        match h.kind {
            Type::LongName | Type::Pax if h.size <= 1 << 20 => {
                let mut data = vec![0u8; h.size as usize];
                read_exact(&mut r, &mut data, what)?;
                skip(&mut r, tar::padded(h.size) - h.size, what)?;
                if h.kind == Type::LongName {
                    while data.last() == Some(&0) {
                        data.pop();
                    }
                    long_name = Some(data);
                } else {
                    pax_path = tar::pax(&data).ok().and_then(|p| p.path);
                }
                continue;
            }
            _ => {}
        }
        let name = long_name.take().or(pax_path.take()).unwrap_or(h.name);
        let size = if h.kind == Type::File { h.size } else { 0 };
        skip(&mut r, tar::padded(size), what)?;
        if h.kind == Type::File
            && let Ok(p) = inside(&name)
        {
            out.push((p, size));
        }
    }
}

/// Whether `path` (inside a tree) is a device node where none may be.
pub fn stray_device(rel: &Path, m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt as _;
    let ft = m.file_type();
    (ft.is_block_device() || ft.is_char_device()) && !rel.starts_with("dev")
}

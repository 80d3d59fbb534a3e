//! A revision's manifest, the codec (pure; docs/chunks.md): every entry of the revision's
//! folder that a server needs to build it again (the kernel, the initrd, the root tree), in
//! name order, with its type, mode, owner, mtime, size, a symlink's target, a device's number
//! and each regular file's object digest. The manifest's own SHA-256 names the revision's
//! content on the wire; `content_hash` computes from it the revision's content hash (its id),
//! as `import::hash_tree` does from the tree, so a manifest that does not describe the
//! revision it claims is refused before a byte of it is fetched.

use anyhow::{Context as _, bail};
use sha2::{Digest as _, Sha256};

/// The first line: the format and its version.
const MAGIC: &str = "bootpool-manifest 1";

/// What a revision's manifest says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The revision's content hash (sha256 hex, `revision.json`'s `hash`).
    pub revision: String,
    /// The names inside the revision's folder of the kernel, the initrd and the root tree.
    pub kernel: String,
    pub initrd: String,
    pub tree: String,
    /// The kernel, the initrd, the tree's folder and everything under it, in name order
    /// (`sort`).
    pub entries: Vec<Entry>,
}

/// One entry of a revision's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Inside the revision's folder, `/`-separated, as bytes (a tree may hold any name).
    pub path: Vec<u8>,
    pub kind: Kind,
    /// The permission bits (`& 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: i64,
    pub mtime_nsec: i64,
    /// A regular file's size (0 for the others).
    pub size: u64,
}

/// An entry's type, with what the type carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Dir,
    /// A regular file and the SHA-256 of its bytes: its object.
    File([u8; 32]),
    Symlink(Vec<u8>),
    Char(u64),
    Block(u64),
    Fifo,
    Socket,
}

impl Kind {
    fn letter(&self) -> u8 {
        match self {
            Kind::Dir => b'd',
            Kind::File(_) => b'f',
            Kind::Symlink(_) => b'l',
            Kind::Char(_) => b'c',
            Kind::Block(_) => b'b',
            Kind::Fifo => b'p',
            Kind::Socket => b's',
        }
    }
}

impl Manifest {
    /// Puts the entries in name order: by path, compared component by component, so a
    /// folder comes before what it holds.
    pub fn sort(&mut self) {
        self.entries.sort_by(|a, b| {
            a.path
                .split(|c| *c == b'/')
                .cmp(b.path.split(|c| *c == b'/'))
        });
    }

    /// The manifest as text: one line per entry, fields separated by one space, names
    /// %-escaped (`escape`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let line = |out: &mut Vec<u8>, s: String| {
            out.extend_from_slice(s.as_bytes());
            out.push(b'\n');
        };
        line(&mut out, MAGIC.to_string());
        line(&mut out, format!("revision {}", self.revision));
        for (key, name) in [
            ("kernel", &self.kernel),
            ("initrd", &self.initrd),
            ("tree", &self.tree),
        ] {
            line(&mut out, format!("{key} {}", escape(name.as_bytes())));
        }
        for e in &self.entries {
            let (digest, extra) = match &e.kind {
                Kind::File(d) => (hex(d), "-".to_string()),
                Kind::Symlink(t) => ("-".to_string(), escape(t)),
                Kind::Char(r) | Kind::Block(r) => ("-".to_string(), r.to_string()),
                _ => ("-".to_string(), "-".to_string()),
            };
            line(
                &mut out,
                format!(
                    "{} {:o} {} {} {}.{:09} {} {digest} {extra} {}",
                    e.kind.letter() as char,
                    e.mode,
                    e.uid,
                    e.gid,
                    e.mtime,
                    e.mtime_nsec,
                    e.size,
                    escape(&e.path)
                ),
            );
        }
        out
    }

    /// Reads a manifest `encode` wrote; refuses one whose entries are out of order, repeated,
    /// escape the folder, or do not describe the revision it names (`content_hash`).
    pub fn decode(text: &[u8]) -> anyhow::Result<Manifest> {
        let text = std::str::from_utf8(text).context("a manifest is ASCII text")?;
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
        let mut next = |what: &str| {
            lines
                .next()
                .with_context(|| format!("the manifest ends before its {what}"))
        };
        let (_, magic) = next("first line")?;
        if magic != MAGIC {
            bail!("not a bootpool manifest (its first line is `{magic}`, not `{MAGIC}`)");
        }
        let mut header = |key: &str| -> anyhow::Result<String> {
            let (n, l) = next(key)?;
            let v = l
                .strip_prefix(key)
                .and_then(|v| v.strip_prefix(' '))
                .with_context(|| format!("line {n}: `{key} ...` expected"))?;
            Ok(v.to_string())
        };
        let revision = header("revision")?;
        if revision.len() != 64 || !revision.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("line 2: `{revision}` is not a sha256 in hex");
        }
        let mut name = |key: &str| -> anyhow::Result<String> {
            let v = header(key)?;
            String::from_utf8(unescape(&v)?).with_context(|| format!("the {key}'s name"))
        };
        let (kernel, initrd, tree) = (name("kernel")?, name("initrd")?, name("tree")?);
        let mut entries = Vec::new();
        for (n, l) in lines {
            entries.push(entry(l).with_context(|| format!("manifest line {n}"))?);
        }
        let m = Manifest {
            revision,
            kernel,
            initrd,
            tree,
            entries,
        };
        let mut sorted = m.clone();
        sorted.sort();
        if sorted.entries != m.entries {
            bail!("the manifest's entries are not in name order");
        }
        if let Some(w) = m.entries.windows(2).find(|w| w[0].path == w[1].path) {
            bail!(
                "the manifest names {} twice",
                String::from_utf8_lossy(&w[0].path)
            );
        }
        let got = m.content_hash()?;
        if got != m.revision {
            bail!(
                "the manifest's entries make revision {got}, not the {} it names",
                m.revision
            );
        }
        Ok(m)
    }

    /// The SHA-256 of the encoded manifest (hex): what names the revision's content on the
    /// wire.
    pub fn digest(&self) -> String {
        hex(&Sha256::digest(self.encode()))
    }

    /// The revision's content hash as an import computes it (`import::hash_tree` over the
    /// tree: each entry's path, type, permission bits, owner, and a file's size and digest, a
    /// link's target, a device's number, a folder's entries before its subfolders'; then the
    /// kernel's and initrd's names and digests).
    pub fn content_hash(&self) -> anyhow::Result<String> {
        let tree = self.tree.as_bytes();
        let inside = |p: &[u8]| -> Option<Vec<u8>> {
            p.strip_prefix(tree)?.strip_prefix(b"/").map(<[u8]>::to_vec)
        };
        // The tree's entries by folder (relative to the tree; the tree itself is "").
        let mut by_dir: std::collections::BTreeMap<Vec<u8>, Vec<(Vec<u8>, &Entry)>> =
            Default::default();
        for e in &self.entries {
            let Some(rel) = inside(&e.path) else { continue };
            let (parent, name) = match rel.iter().rposition(|c| *c == b'/') {
                Some(i) => (rel[..i].to_vec(), rel[i + 1..].to_vec()),
                None => (Vec::new(), rel),
            };
            by_dir.entry(parent).or_default().push((name, e));
        }
        let mut h = Sha256::new();
        let mut stack = vec![Vec::<u8>::new()];
        while let Some(dir) = stack.pop() {
            let mut children = by_dir.remove(&dir).unwrap_or_default();
            children.sort_by(|a, b| a.0.cmp(&b.0));
            let mut dirs = Vec::new();
            for (name, e) in children {
                let rel = match dir.is_empty() {
                    true => name,
                    false => [&dir[..], b"/", &name[..]].concat(),
                };
                h.update(&rel);
                h.update([0, e.kind.letter()]);
                h.update(format!("{:o} {} {} ", e.mode, e.uid, e.gid));
                match &e.kind {
                    Kind::File(d) => {
                        h.update(e.size.to_le_bytes());
                        h.update(d);
                    }
                    Kind::Symlink(t) => h.update(t),
                    Kind::Char(r) | Kind::Block(r) => h.update(r.to_le_bytes()),
                    Kind::Dir => dirs.push(rel),
                    _ => {}
                }
                h.update([0]);
            }
            stack.extend(dirs.into_iter().rev());
        }
        let tree_hash = h.finalize();
        let mut h = Sha256::new();
        h.update(tree_hash);
        for name in [&self.kernel, &self.initrd] {
            let Some(Entry {
                kind: Kind::File(d),
                ..
            }) = self.entries.iter().find(|e| e.path == name.as_bytes())
            else {
                bail!("the manifest has no file `{name}`");
            };
            h.update(name.as_bytes());
            h.update([0]);
            h.update(d);
        }
        Ok(hex(&h.finalize()))
    }

    /// The regular files' bytes, all of them.
    pub fn file_bytes(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| matches!(e.kind, Kind::File(_)))
            .map(|e| e.size)
            .sum()
    }
}

/// One entry's line.
fn entry(line: &str) -> anyhow::Result<Entry> {
    let f: Vec<&str> = line.split(' ').collect();
    let [kind, mode, uid, gid, mtime, size, digest, extra, path] = f[..] else {
        bail!("{} fields, not 9", f.len());
    };
    let num = |what: &str, v: &str| -> anyhow::Result<u64> {
        v.parse()
            .with_context(|| format!("{what} `{v}` is not a number"))
    };
    let (secs, nsec) = mtime
        .split_once('.')
        .with_context(|| format!("mtime `{mtime}` is not SECS.NANOS"))?;
    let path = unescape(path)?;
    if path.is_empty()
        || path[0] == b'/'
        || path
            .split(|c| *c == b'/')
            .any(|c| c.is_empty() || c == b"." || c == b"..")
    {
        bail!(
            "`{}` is not a path inside the revision",
            String::from_utf8_lossy(&path)
        );
    }
    let kind = match (kind, digest) {
        ("d", "-") => Kind::Dir,
        ("f", d) => Kind::File(digest_of(d)?),
        ("l", "-") => Kind::Symlink(unescape(extra)?),
        ("c", "-") => Kind::Char(num("device", extra)?),
        ("b", "-") => Kind::Block(num("device", extra)?),
        ("p", "-") => Kind::Fifo,
        ("s", "-") => Kind::Socket,
        _ => bail!("type `{kind}` with digest `{digest}`"),
    };
    let mode = u32::from_str_radix(mode, 8).with_context(|| format!("mode `{mode}`"))?;
    if mode > 0o7777 {
        bail!("mode {mode:o} has more than permission bits");
    }
    Ok(Entry {
        path,
        size: match kind {
            Kind::File(_) => num("size", size)?,
            _ => 0,
        },
        kind,
        mode,
        uid: num("uid", uid)?.try_into().context("uid")?,
        gid: num("gid", gid)?.try_into().context("gid")?,
        mtime: secs.parse().with_context(|| format!("mtime `{mtime}`"))?,
        mtime_nsec: nsec.parse().with_context(|| format!("mtime `{mtime}`"))?,
    })
}

/// A digest in hex as bytes.
pub fn digest_of(hex: &str) -> anyhow::Result<[u8; 32]> {
    let b = hex.as_bytes();
    if b.len() != 64 {
        bail!("`{hex}` is not a sha256 in hex");
    }
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).unwrap_or("");
        out[i] = u8::from_str_radix(s, 16).with_context(|| format!("`{hex}` is not hex"))?;
    }
    Ok(out)
}

/// Bytes as one field: printable ASCII but ` ` and `%` as they are, every other byte `%XX`.
pub fn escape(b: &[u8]) -> String {
    let mut s = String::new();
    for &c in b {
        if c.is_ascii_graphic() && c != b'%' {
            s.push(c as char);
        } else {
            s.push_str(&format!("%{c:02X}"));
        }
    }
    s
}

fn unescape(s: &str) -> anyhow::Result<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .with_context(|| format!("`{s}`: a `%` not followed by two hex digits"))?;
            out.push(h);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

fn hex(b: &[u8]) -> String {
    super::objects::hex(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, bytes: &[u8]) -> Entry {
        Entry {
            path: path.as_bytes().to_vec(),
            kind: Kind::File(Sha256::digest(bytes).into()),
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime: 1_700_000_000,
            mtime_nsec: 5,
            size: bytes.len() as u64,
        }
    }

    fn dir(path: &str) -> Entry {
        Entry {
            kind: Kind::Dir,
            mode: 0o755,
            size: 0,
            ..file(path, b"")
        }
    }

    /// A manifest whose revision hash is its own.
    fn sample() -> Manifest {
        let mut m = Manifest {
            revision: String::new(),
            kernel: "vmlinuz".into(),
            initrd: "initrd.img".into(),
            tree: "rootfs".into(),
            entries: vec![
                file("vmlinuz", b"kernel"),
                file("initrd.img", b"initrd"),
                dir("rootfs/etc"),
                dir("rootfs"),
                file("rootfs/etc/motd", b"hello\n"),
                file("rootfs/etc/a name with spaces%", b"odd"),
                Entry {
                    kind: Kind::Symlink(b"../etc/motd".to_vec()),
                    mode: 0o777,
                    size: 0,
                    ..file("rootfs/bin/motd", b"")
                },
                dir("rootfs/bin"),
                Entry {
                    kind: Kind::Char(0x0501),
                    mode: 0o620,
                    size: 0,
                    ..file("rootfs/dev/console", b"")
                },
                dir("rootfs/dev"),
                file(
                    "rootfs/etc.d",
                    b"after etc/ in byte order, before it by component",
                ),
            ],
        };
        m.sort();
        m.revision = m.content_hash().unwrap();
        m
    }

    #[test]
    fn a_manifest_reads_back_as_written_in_name_order() {
        let m = sample();
        let paths: Vec<_> = m
            .entries
            .iter()
            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
            .collect();
        // A folder before what it holds; component order puts `etc/...` before `etc.d`.
        assert_eq!(paths.iter().position(|p| p == "rootfs"), Some(1));
        let etc = paths.iter().position(|p| p == "rootfs/etc").unwrap();
        let etc_d = paths.iter().position(|p| p == "rootfs/etc.d").unwrap();
        let motd = paths.iter().position(|p| p == "rootfs/etc/motd").unwrap();
        assert!(etc < motd && motd < etc_d, "{paths:?}");
        let text = m.encode();
        assert_eq!(Manifest::decode(&text).unwrap(), m);
        assert!(
            String::from_utf8_lossy(&text).contains("rootfs/etc/a%20name%20with%20spaces%25"),
            "a name's spaces and % are escaped"
        );
    }

    #[test]
    fn a_changed_byte_changes_the_digest_and_a_lie_is_refused() {
        let m = sample();
        let mut changed = m.clone();
        let e = changed
            .entries
            .iter_mut()
            .find(|e| e.path == b"rootfs/etc/motd")
            .unwrap();
        e.kind = Kind::File(Sha256::digest(b"hellO\n").into());
        assert_ne!(changed.digest(), m.digest());
        // The entries changed and the revision it names did not: refused.
        let err = Manifest::decode(&changed.encode()).unwrap_err();
        assert!(format!("{err:#}").contains("not the"), "{err:#}");
        // Named again, it is another revision.
        changed.revision = changed.content_hash().unwrap();
        assert_ne!(changed.revision, m.revision);
        assert_eq!(Manifest::decode(&changed.encode()).unwrap(), changed);
        // An mtime is not content (an import of the same files is the same revision), but
        // it is in the manifest, so it changes the manifest's digest.
        let mut touched = m.clone();
        touched.entries[0].mtime += 1;
        assert_eq!(touched.content_hash().unwrap(), m.revision);
        assert_ne!(touched.digest(), m.digest());
    }

    #[test]
    fn out_of_order_repeated_and_escaping_entries_are_refused() {
        let m = sample();
        let text = String::from_utf8(m.encode()).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        let n = lines.len();
        lines.swap(n - 1, n - 2);
        let err = Manifest::decode(lines.join("\n").as_bytes()).unwrap_err();
        assert!(format!("{err:#}").contains("name order"), "{err:#}");
        let escaping = text.replace(" rootfs/etc/motd", " rootfs/../etc/motd");
        let err = Manifest::decode(escaping.as_bytes()).unwrap_err();
        assert!(format!("{err:#}").contains("not a path inside"), "{err:#}");
        let last = text.lines().last().unwrap();
        let twice = format!("{text}{last}\n");
        assert!(Manifest::decode(twice.as_bytes()).is_err());
        assert!(Manifest::decode(b"something else\n").is_err());
    }
}

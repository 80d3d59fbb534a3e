//! The repository's own rules, checked as a test: every source file of both crates (the
//! daemon's `src/`, the instruments' `instruments/src/`) opens with a `//!` line saying what
//! it owns and is named in ARCHITECTURE.md's code map, `proto/` stays pure (no tokio, files or
//! sockets), `unsafe` code lives only in the `sys` room, imports run down each crate's rooms,
//! the daemon names no instrument nor links the storm's clients, and no function runs over
//! ~150 lines without a reason; every integration test
//! file is a module of the one test binary and opens with a `//!` line too.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn src() -> PathBuf {
    repo().join("src")
}

/// The workspace's crates by their source folders: the daemon's (this crate), then the
/// instruments' (the lab, the storm and the trace export), which stands on it, and the client
/// agent's, which stands alone (it compiles two of the daemon's codec files, `AGENT_ROOMS`).
const CRATES: [&str; 3] = ["src", "instruments/src", "agent/src"];

/// How ARCHITECTURE.md may name `rel` (a path under the source folder `dir`): its path, its
/// file name, or, for a folder's `mod.rs`, the folder (`service/nbd/`).
fn named(map: &str, dir: &str, rel: &str) -> bool {
    let file = rel.rsplit('/').next().unwrap_or(rel);
    let quoted = |s: &str| map.contains(&format!("`{s}`")) || map.contains(&format!("`{dir}/{s}`"));
    match rel.strip_suffix("mod.rs") {
        Some(folder) if !folder.is_empty() => quoted(folder) || quoted(rel),
        _ => quoted(rel) || quoted(file),
    }
}

#[test]
fn every_source_file_says_what_it_owns_and_is_in_the_code_map() {
    let map = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut bad = Vec::new();
    for dir in CRATES {
        let root = repo().join(dir);
        for path in sources(&root) {
            let rel = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            if !text.starts_with("//!") {
                bad.push(format!(
                    "{dir}/{rel}:1: does not open with a `//!` line saying what it owns"
                ));
            }
            if !named(&map, dir, &rel) {
                bad.push(format!(
                    "{dir}/{rel}: not named in ARCHITECTURE.md's code map"
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn proto_imports_no_tokio_files_or_sockets() {
    let root = src().join("proto");
    let bad = uses_of(sources(&root), &["tokio", "std::fs", "std::net"]);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Boot policy is plain data in and out: `boot/` opens no file, asks the disk nothing and
/// reads no image's revisions itself; its callers resolve what a boot is served
/// (`image::serve::for_boot`) and hand it in.
#[test]
fn boot_reads_no_disk() {
    let banned = [
        "std::fs",
        "tokio",
        "crate::image",
        ".exists()",
        ".is_file()",
        ".is_dir()",
        "metadata(",
    ];
    let bad = uses_of(sources(&src().join("boot")), &banned);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Link steering's computation is apart from its socket shell: `steer/`'s pure files (the
/// choice of link, the fair shares, the moves) touch no socket, file, thread or clock.
#[test]
fn link_steering_computes_on_plain_data() {
    let root = src().join("steer");
    let pure = ["choice.rs", "fair_share.rs", "rebalance.rs", "rooms.rs"].map(|f| root.join(f));
    let banned = [
        "tokio",
        "socket2",
        "crate::sys",
        "std::fs",
        "Instant",
        "SystemTime",
        "Socket",
        "TcpStream",
        "thread",
    ];
    let bad = uses_of(pure, &banned);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Each line of `paths` whose code (`code_of`: no comment, no string's inside) names one of
/// `banned`, as `FILE:LINE: uses `NAME``.
fn uses_of(paths: impl IntoIterator<Item = PathBuf>, banned: &[&str]) -> Vec<String> {
    let mut bad = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = code_of(line);
            for name in banned.iter().filter(|b| code.contains(*b)) {
                bad.push(format!("{}:{}: uses `{name}`", path.display(), i + 1));
            }
        }
    }
    bad
}

/// `line` without its `//` comment and the insides of its string literals (a plain scan: a
/// `//` inside a string ends the line early, which can only hide code, never invent it).
fn code_of(line: &str) -> String {
    let code = line.split("//").next().unwrap_or("");
    let mut out = String::new();
    let mut in_string = false;
    let mut escaped = false;
    for c in code.chars() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else {
            if c == '"' {
                in_string = true;
            }
            out.push(c);
        }
    }
    out
}

/// Whether `code` has the keyword `unsafe` (a whole word, so `undocumented_unsafe_blocks`
/// is not one).
fn says_unsafe(code: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices("unsafe").any(|(at, w)| {
        !code[..at].chars().next_back().is_some_and(word)
            && !code[at + w.len()..].chars().next().is_some_and(word)
    })
}

/// Every `unsafe` block, `unsafe fn` and `unsafe impl` is in `src/sys/`, where each has its
/// SAFETY comment (`clippy::undocumented_unsafe_blocks`, denied in lib.rs). Unit tests
/// under src/ have none either: they use the sys wrappers, and so do the instruments (whose
/// crate forbids `unsafe_code` besides). (The integration tests in tests/ keep four calls of
/// their own, a client's setns, fadvise, SO_BINDTODEVICE and getpwnam, that no product code
/// needs.)
#[test]
fn unsafe_code_lives_only_in_the_sys_room() {
    let mut bad = Vec::new();
    for path in CRATES.iter().flat_map(|dir| sources(&repo().join(dir))) {
        if path.starts_with(src().join("sys")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            if says_unsafe(&code_of(line)) {
                bad.push(format!(
                    "{}:{}: `unsafe` outside src/sys/",
                    path.display(),
                    i + 1
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The integration tests are one binary (`tests/it/main.rs`): a file in `tests/it/` or
/// `tests/it/common/` that no `mod` line names is never compiled, so its tests would silently
/// not run. Each says what it tests in a `//!` line, as the sources do.
#[test]
fn every_integration_test_file_is_a_module_and_says_what_it_tests() {
    let it = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let mut bad = Vec::new();
    for path in sources(&it) {
        let rel = path
            .strip_prefix(&it)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        if !text.starts_with("//!") {
            bad.push(format!("tests/it/{rel}:1: does not open with a `//!` line"));
        }
        let (parent, name) = match rel.rsplit_once('/') {
            Some((dir, file)) => (format!("{dir}/mod.rs"), file),
            None => ("main.rs".to_string(), rel.as_str()),
        };
        let Some(module) = name.strip_suffix(".rs") else {
            continue;
        };
        if matches!(module, "main" | "mod") {
            continue;
        }
        let declared = std::fs::read_to_string(it.join(&parent))
            .unwrap_or_default()
            .lines()
            .any(|l| {
                let l = l.trim_start_matches("pub ");
                l == format!("mod {module};")
            });
        if !declared {
            bad.push(format!(
                "tests/it/{rel}: no `mod {module};` in tests/it/{parent}, so it is never compiled"
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_unsafe_scan_skips_comments_strings_and_longer_words() {
    assert!(says_unsafe(&code_of("    let n = unsafe { f() };")));
    assert!(says_unsafe(&code_of("unsafe impl Send for X {}")));
    assert!(says_unsafe(&code_of("type F = unsafe extern \"C\" fn();")));
    assert!(!says_unsafe(&code_of("    // SAFETY: unsafe things")));
    assert!(!says_unsafe(&code_of(
        "    let s = \"an unsafe \\\" word\";"
    )));
    assert!(!says_unsafe(&code_of(
        "#![deny(clippy::undocumented_unsafe_blocks)]"
    )));
    assert!(says_unsafe(&code_of("let s = \"x\"; unsafe { g() }")));
}

#[test]
fn the_code_map_check_names_what_it_misses() {
    let map = "| `src/app.rs` | x |\n`service/nbd/` (`handshake.rs`)\n`instruments/src/storm/`";
    assert!(named(map, "src", "app.rs"));
    assert!(named(map, "src", "service/nbd/mod.rs"));
    assert!(named(map, "src", "service/nbd/handshake.rs"));
    assert!(!named(map, "src", "service/nbd/transmit.rs"));
    assert!(!named(map, "src", "export/tree/mod.rs"));
    assert!(named(map, "instruments/src", "storm/mod.rs"));
    assert!(!named(map, "src", "storm/mod.rs"));
    assert!(!named(map, "instruments/src", "app.rs"));
}

/// The rooms of the daemon's crate (its top-level modules), from the ground up. A file may
/// import only from its own room and from rooms below it; ARCHITECTURE.md and docs/design.md
/// say what each room is for.
const ROOMS: &[&str] = &[
    // The ground floor: what every room may use.
    "sys",
    "proto",
    "shutdown",
    "metrics",
    "log_limit",
    // The daemon's middle floors.
    "config",
    "trace",
    "record",
    "image",
    "boot",
    "export",
    "steer",
    "site",
    "service",
    // The composition root.
    "app",
];

/// The rooms of the instruments' crate (`instruments/src/`), from the ground up, all above
/// every room of `ROOMS`: they import the daemon's rooms (`bootpool::`), and the daemon's
/// crate never names theirs.
const INSTRUMENT_ROOMS: &[&str] = &["trace", "lab", "storm"];

/// The modules of the client agent's crate (`agent/src/`), from the ground up: the daemon's
/// block-manifest, NBD and tracker codecs (its `image/blocks.rs`, `proto/nbd.rs` and
/// `proto/swarm.rs`, compiled in by `#[path]`), the memory chunks are received into, HTTP,
/// the choice of a chunk's next source, the servers, the swarm's fetching side, the chunk
/// store, the peers' server, the NBD server.
const AGENT_ROOMS: &[&str] = &[
    "blocks", "nbd", "wire", "slabs", "http", "pick", "sources", "swarm", "chunks", "peers",
    "serve",
];

/// One import: the importing file, its line, the path as written, the file it names.
struct Import {
    from: String,
    line: usize,
    path: String,
    to: String,
}

/// The module path of a source file under `src/` (`service/nbd/mod.rs` is
/// `["service", "nbd"]`).
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The paths of a `use` tree: `a::{b, c::{d as e}}` is `a::b` and `a::c::d`.
fn expand_use(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        return vec![path.trim_end_matches("::self").to_string()];
    };
    let prefix = &tree[..open];
    let body = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut items, mut depth, mut item) = (Vec::new(), 0, String::new());
    for c in body.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    items.push(item);
    items
        .iter()
        .filter(|i| !i.trim().is_empty())
        .flat_map(|i| expand_use(i))
        .map(|p| match p.as_str() {
            "self" => prefix.trim_end_matches("::").to_string(),
            _ => format!("{prefix}{p}"),
        })
        .collect()
}

/// `item` without its visibility (`pub`, `pub(crate)`, `pub(super)`, `pub(in ...)`).
fn without_visibility(item: &str) -> &str {
    let Some(rest) = item.strip_prefix("pub") else {
        return item;
    };
    match rest.strip_prefix('(') {
        Some(scope) => scope.split_once(')').map_or(item, |(_, r)| r.trim_start()),
        None if rest.starts_with(' ') => rest.trim_start(),
        None => item,
    }
}

/// A path from the crate's root, one name a segment: `["service", "nbd", "Conn"]`.
type ModPath = Vec<String>;

/// One path a file names: its line, the path from the crate's root, the path as written.
type Named = (usize, ModPath, String);

/// What one file imports of the crate: each `use` line and each path written inline that
/// starts at `crate::`, `super::`, `self::` or a module the file declares (`mod x;` then
/// `x::y`); and what it re-exports (`pub use`). Test modules (`#[cfg(test)] mod ... { }`)
/// are left out: they may use anything.
fn imports_of(rel: &str, text: &str) -> (Vec<Named>, Vec<ModPath>) {
    let module = module_of(rel);
    let lines: Vec<String> = text.lines().map(code_of).collect();
    let children: Vec<String> = lines
        .iter()
        .filter_map(|l| {
            without_visibility(l.trim())
                .strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect();
    let word = |c: char| c.is_alphanumeric() || c == '_';
    // A path written inside the inline modules `inline`, from the crate's root; None for a
    // path into another crate (or a glob's `*`, which names nothing of its own).
    let resolve = |inline: &[String], path: &str| -> Option<ModPath> {
        let mut here: ModPath = module.iter().chain(inline).cloned().collect();
        let mut segs: Vec<String> = path.split("::").map(|s| s.trim().to_string()).collect();
        match segs[0].as_str() {
            "crate" => here.clear(),
            "super" | "self" => {}
            s if inline.is_empty() && children.iter().any(|c| c == s) => {}
            _ => return None,
        }
        while let Some(s) = segs.first() {
            match s.as_str() {
                "crate" | "self" => {}
                "super" => {
                    here.pop();
                }
                _ => break,
            }
            segs.remove(0);
        }
        here.extend(segs.into_iter().filter(|s| s != "*"));
        Some(here)
    };
    let (mut out, mut reexports) = (Vec::new(), Vec::new());
    let (mut depth, mut skip_to, mut test_next) = (0i32, None::<i32>, false);
    let mut inline: Vec<(String, i32)> = Vec::new();
    let mut statement: Option<(usize, String, bool)> = None;
    for (i, code) in lines.iter().enumerate() {
        let t = code.trim();
        let opens = code.matches('{').count() as i32 - code.matches('}').count() as i32;
        if let Some(level) = skip_to {
            depth += opens;
            if depth <= level {
                skip_to = None;
            }
            continue;
        }
        let bare = without_visibility(t);
        if t.starts_with("#[cfg(test)]") {
            test_next = true;
            continue;
        }
        if let Some(name) = bare.strip_prefix("mod ").and_then(|m| m.strip_suffix('{')) {
            if test_next {
                skip_to = Some(depth);
                depth += opens;
                test_next = false;
                continue;
            }
            inline.push((name.trim().to_string(), depth));
        }
        test_next = false;
        let names: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
        if statement.is_none() {
            let public = t.starts_with("pub");
            if bare.starts_with("use ") {
                statement = Some((i + 1, String::new(), public));
            }
        }
        if let Some((line, mut text, public)) = statement.take() {
            let part = if text.is_empty() {
                bare.strip_prefix("use ").unwrap_or(bare)
            } else {
                t
            };
            text.push_str(part);
            match text.split_once(';') {
                Some((tree, _)) => {
                    for path in expand_use(tree) {
                        if let Some(full) = resolve(&names, &path) {
                            if public {
                                reexports.push(full.clone());
                            }
                            out.push((line, full, path));
                        }
                    }
                }
                None => statement = Some((line, text, public)),
            }
        } else {
            let mut at = 0;
            while let Some(found) = code[at..].find("::") {
                let end = at + found;
                let begin = code[..end].rfind(|c: char| !word(c)).map_or(0, |b| b + 1);
                at = end + 2;
                if code[..begin].ends_with("::") || begin == end {
                    continue;
                }
                let rest = &code[begin..];
                let len = rest
                    .find(|c: char| !(word(c) || c == ':'))
                    .unwrap_or(rest.len());
                let path = rest[..len].trim_end_matches(':');
                if let Some(full) = resolve(&names, path) {
                    out.push((i + 1, full, path.to_string()));
                }
                at = begin + len;
            }
        }
        depth += opens;
        while inline.last().is_some_and(|(_, level)| depth <= *level) {
            inline.pop();
        }
    }
    (out, reexports)
}

/// Every import of a crate's own code (the crate whose sources are under `dir`), by file,
/// each resolved to the file that defines what it names (through `pub use` re-exports).
/// Files named `tests.rs` (a folder's unit tests) and tidy.rs itself import nothing that
/// counts; the binary's `main.rs` is a crate of its own, and another crate's paths
/// (`bootpool::` in the instruments) are not this crate's imports.
fn crate_imports(dir: &str) -> Vec<Import> {
    let root = repo().join(dir);
    let mut files = std::collections::BTreeMap::new();
    let mut texts = Vec::new();
    for path in sources(&root) {
        let rel = path
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if rel == "main.rs" {
            continue;
        }
        files.insert(module_of(&rel), rel.clone());
        texts.push((rel, std::fs::read_to_string(&path).unwrap()));
    }
    let mut reexported = std::collections::BTreeMap::new();
    let mut all = Vec::new();
    for (rel, text) in &texts {
        let (imports, reexports) = imports_of(rel, text);
        for path in reexports {
            let name = path.last().cloned().unwrap_or_default();
            reexported.insert((rel.clone(), name), path);
        }
        if rel == "tidy.rs" || rel.ends_with("/tests.rs") || rel == "lib.rs" {
            continue;
        }
        all.push((rel.clone(), imports));
    }
    // The file a module path names: the longest prefix that is a file, then through what that
    // file re-exports under the next name.
    let resolve = |path: &[String]| -> Option<String> {
        let mut path = path.to_vec();
        for _ in 0..8 {
            let n = (0..=path.len())
                .rev()
                .find(|n| files.contains_key(&path[..*n]))?;
            let file = &files[&path[..n]];
            match path
                .get(n)
                .and_then(|next| reexported.get(&(file.clone(), next.clone())))
            {
                Some(target) if n < path.len() && *target != path => {
                    let mut next = target.clone();
                    next.extend(path[n + 1..].iter().cloned());
                    path = next;
                }
                _ => return Some(file.clone()),
            }
        }
        None
    };
    let mut out = Vec::new();
    for (from, imports) in all {
        for (line, path, written) in imports {
            if let Some(to) = resolve(&path)
                && to != from
                && to != "lib.rs"
            {
                out.push(Import {
                    from: from.clone(),
                    line,
                    path: written,
                    to,
                });
            }
        }
    }
    out
}

/// The room a file is in: its first folder, or its name (`app.rs` is `app`).
fn room_of(rel: &str) -> &str {
    rel.split('/').next().unwrap_or(rel).trim_end_matches(".rs")
}

/// The strongly connected groups of more than one node of a graph (Tarjan's algorithm).
fn circles(edges: &std::collections::BTreeMap<String, Vec<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a std::collections::BTreeMap<String, Vec<String>>,
        index: std::collections::HashMap<&'a str, (usize, usize)>,
        stack: Vec<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a str) {
        let n = w.index.len();
        w.index.insert(v, (n, n));
        w.stack.push(v);
        let edges = w.edges;
        for u in edges.get(v).into_iter().flatten() {
            let low = match w.index.get(u.as_str()) {
                None => {
                    visit(w, u);
                    w.index[u.as_str()].1
                }
                Some(&(at, _)) if w.stack.contains(&u.as_str()) => at,
                Some(_) => continue,
            };
            let me = w.index.get_mut(v).unwrap();
            me.1 = me.1.min(low);
        }
        if w.index[v].0 == w.index[v].1 {
            let at = w.stack.iter().position(|s| *s == v).unwrap();
            let group: Vec<String> = w.stack.drain(at..).map(str::to_string).collect();
            if group.len() > 1 {
                w.out.push(group);
            }
        }
    }
    let mut w = Walk {
        edges,
        index: Default::default(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !w.index.contains_key(v.as_str()) {
            visit(&mut w, v);
        }
    }
    w.out
}

/// Imports run one way: down the order of `ROOMS` in the daemon's crate and of
/// `INSTRUMENT_ROOMS` in the instruments', with no circle between rooms and none between the
/// files of one room.
#[test]
fn imports_run_down_the_rooms_and_never_in_a_circle() {
    let mut bad = rooms_broken("src", ROOMS);
    bad.extend(rooms_broken("instruments/src", INSTRUMENT_ROOMS));
    bad.extend(rooms_broken("agent/src", AGENT_ROOMS));
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// What breaks the order `rooms` in the crate under `dir`: each upward import, each room
/// not in `rooms`, each circle of rooms or of files.
fn rooms_broken(dir: &str, rooms: &[&str]) -> Vec<String> {
    let imports = crate_imports(dir);
    let rank = |room: &str| rooms.iter().position(|r| *r == room);
    let mut bad = Vec::new();
    let mut files: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut ties: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for i in &imports {
        let (from, to) = (room_of(&i.from), room_of(&i.to));
        for room in [from, to] {
            if rank(room).is_none() {
                bad.push(format!("{dir}: room `{room}` is not in tidy.rs's order"));
            }
        }
        if rank(to) > rank(from) {
            bad.push(format!(
                "{dir}/{}:{}: `{}`: room `{from}` imports `{to}`, which is above it",
                i.from, i.line, i.path
            ));
        }
        if from != to {
            ties.entry(from.into()).or_default().push(to.into());
        }
        files.entry(i.from.clone()).or_default().push(i.to.clone());
    }
    for group in circles(&ties) {
        bad.push(format!("{dir}: rooms in a circle: {}", group.join(", ")));
    }
    for group in circles(&files) {
        let lines: Vec<String> = imports
            .iter()
            .filter(|i| group.contains(&i.from) && group.contains(&i.to))
            .map(|i| format!("  {dir}/{}:{}: `{}`", i.from, i.line, i.path))
            .collect();
        bad.push(format!(
            "{dir}: files in a circle: {}\n{}",
            group.join(", "),
            lines.join("\n")
        ));
    }
    bad.sort();
    bad.dedup();
    bad
}

/// The storm's client libraries, code this project did not write, which only the instruments
/// may link.
const STORM_CLIENTS: [&str; 4] = ["dhcp4r", "tftp_client", "ureq", "nfs3_client"];

/// The daemon stands apart from the instruments: its code never names their crate, its
/// manifest's `[dependencies]` never list it, and nothing it depends on, however far down
/// (Cargo.lock), is one of the storm's clients.
#[test]
fn the_daemon_names_no_instrument_and_links_no_storm_client() {
    let mut bad = uses_of(sources(&src()), &["bootpool_instruments"]);
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).expect("Cargo.toml");
    let lock = std::fs::read_to_string(repo().join("Cargo.lock")).expect("Cargo.lock");
    let direct = section_keys(&manifest, "[dependencies]");
    let linked = depends_on(&lock, &direct);
    for name in STORM_CLIENTS.iter().chain(&["bootpool-instruments"]) {
        if direct.iter().any(|d| d == name) {
            bad.push(format!("Cargo.toml: [dependencies] lists `{name}`"));
        } else if linked.contains(*name) {
            bad.push(format!(
                "Cargo.lock: the daemon depends on `{name}` through its [dependencies]"
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The keys of a TOML section written `[name]` (a line-based read: one `key = ...` a line,
/// which is how Cargo.toml is written).
fn section_keys(toml: &str, header: &str) -> Vec<String> {
    toml.lines()
        .skip_while(|l| l.trim() != header)
        .skip(1)
        .map(str::trim)
        .take_while(|l| !l.starts_with('['))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim().to_string()))
        .collect()
}

/// Every package `roots` depend on, themselves included, by a Cargo.lock's `[[package]]`
/// entries (each its `name` and `dependencies`, `"NAME"` or `"NAME VERSION ..."`).
fn depends_on(lock: &str, roots: &[String]) -> std::collections::BTreeSet<String> {
    let mut deps: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for entry in lock.split("[[package]]").skip(1) {
        let quoted = |l: &str| l.split('"').nth(1).map(str::to_string);
        let Some(name) = entry
            .lines()
            .find_map(|l| l.strip_prefix("name = ").and_then(quoted))
        else {
            continue;
        };
        let list = entry
            .lines()
            .skip_while(|l| !l.starts_with("dependencies = ["))
            .skip(1)
            .take_while(|l| !l.starts_with(']'))
            .filter_map(|l| quoted(l)?.split(' ').next().map(str::to_string));
        deps.entry(name).or_default().extend(list);
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut todo: Vec<String> = roots.to_vec();
    while let Some(name) = todo.pop() {
        if seen.insert(name.clone()) {
            todo.extend(deps.get(&name).into_iter().flatten().cloned());
        }
    }
    seen
}

#[test]
fn the_dependency_scan_follows_the_lock_file() {
    let manifest = "[package]\nname = \"x\"\n\n[dependencies]\n# why\na = \"1\"\nb-c = { version = \"2\" }\n\n[dev-dependencies]\nd = \"3\"\n";
    assert_eq!(section_keys(manifest, "[dependencies]"), ["a", "b-c"]);
    let lock = "[[package]]\nname = \"a\"\nversion = \"1.0.0\"\ndependencies = [\n \"e\",\n \"f 0.1.0\",\n]\n\n[[package]]\nname = \"f\"\nversion = \"0.1.0\"\ndependencies = [\n \"g\",\n]\n\n[[package]]\nname = \"h\"\nversion = \"1.0.0\"\n";
    let linked = depends_on(lock, &["a".to_string()]);
    assert_eq!(linked.into_iter().collect::<Vec<_>>(), ["a", "e", "f", "g"]);
}

#[test]
fn the_import_scan_reads_use_trees_inline_paths_and_skips_tests() {
    assert_eq!(
        expand_use("crate::a::{b, c::{self, d as e}}"),
        ["crate::a::b", "crate::a::c", "crate::a::c::d"]
    );
    let text = "mod kid;\nuse super::x::{Y, z};\nuse std::io;\nfn f() { crate::p::q(); kid::g(); a::b(); }\n#[cfg(test)]\nmod tests {\n    use crate::top::T;\n}\n";
    let (found, reexports) = imports_of("room/file.rs", text);
    let paths: Vec<String> = found.iter().map(|(_, p, _)| p.join("::")).collect();
    assert_eq!(
        paths,
        ["room::x::Y", "room::x::z", "p::q", "room::file::kid::g"]
    );
    assert!(reexports.is_empty());
    assert_eq!(without_visibility("pub(in crate::x) use a;"), "use a;");
    assert_eq!(without_visibility("pub(super) mod m;"), "mod m;");
    assert_eq!(without_visibility("public_thing();"), "public_thing();");
    let (found, reexports) = imports_of("r/mod.rs", "pub use inner::Thing;\nmod inner;\n");
    assert_eq!(found[0].1, ["r", "inner", "Thing"]);
    assert_eq!(reexports, [vec!["r", "inner", "Thing"]]);
}

/// The house's longest function, in lines, before it needs a reason beside it.
const LONGEST_FUNCTION: usize = 150;

/// Each line's brace depth at its end and the deepest it reached, scanning the whole text so
/// that braces in strings (raw ones too), character literals and comments are not counted.
fn brace_depths(text: &str) -> Vec<(usize, usize)> {
    let b: Vec<char> = text.chars().collect();
    let (mut depth, mut deepest, mut out) = (0usize, 0usize, Vec::new());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            '\n' => {
                out.push((depth, deepest));
                deepest = depth;
            }
            '/' if b.get(i + 1) == Some(&'/') => {
                while i + 1 < b.len() && b[i + 1] != '\n' {
                    i += 1;
                }
            }
            '/' if b.get(i + 1) == Some(&'*') => {
                while i + 1 < b.len() && !(b[i] == '*' && b[i + 1] == '/') {
                    if b[i] == '\n' {
                        out.push((depth, deepest));
                    }
                    i += 1;
                }
                i += 1;
            }
            'r' if matches!(b.get(i + 1), Some('"' | '#'))
                && !b[..i]
                    .last()
                    .is_some_and(|c| c.is_alphanumeric() || *c == '_') =>
            {
                let hashes = b[i + 1..].iter().take_while(|c| **c == '#').count();
                if b.get(i + 1 + hashes) == Some(&'"') {
                    i += 2 + hashes;
                    let closed = |at: usize| {
                        b[at] == '"' && (1..=hashes).all(|k| b.get(at + k) == Some(&'#'))
                    };
                    while i < b.len() && !closed(i) {
                        if b[i] == '\n' {
                            out.push((depth, deepest));
                        }
                        i += 1;
                    }
                    i += hashes;
                }
            }
            '"' => {
                i += 1;
                while i < b.len() && b[i] != '"' {
                    if b[i] == '\\' {
                        i += 1;
                    }
                    if b.get(i) == Some(&'\n') {
                        out.push((depth, deepest));
                    }
                    i += 1;
                }
            }
            '\'' if b.get(i + 1) == Some(&'\\') => {
                i += 2;
                while i < b.len() && b[i] != '\'' {
                    i += 1;
                }
            }
            '\'' if b.get(i + 2) == Some(&'\'') => i += 2,
            '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    out.push((depth, deepest));
    out
}

/// Whether `line` declares a function (`fn`, after any visibility and qualifiers).
fn declares_fn(line: &str) -> bool {
    let mut rest = without_visibility(line.trim_start());
    for word in ["default ", "const ", "async ", "unsafe ", "extern \"C\" "] {
        rest = rest.strip_prefix(word).unwrap_or(rest);
    }
    rest.starts_with("fn ")
}

/// The functions of `text` (not its tests) longer than `LONGEST_FUNCTION` lines whose doc
/// comment does not say why, as (line, name, length).
fn long_functions(text: &str) -> Vec<(usize, String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let depths = brace_depths(text);
    let tests = lines
        .iter()
        .position(|l| l.starts_with("#[cfg(test)]"))
        .unwrap_or(lines.len());
    let mut out = Vec::new();
    for (at, line) in lines[..tests].iter().enumerate() {
        if !declares_fn(line) {
            continue;
        }
        let before = if at == 0 { 0 } else { depths[at - 1].0 };
        let mut end = None;
        for (j, (depth, deepest)) in depths.iter().enumerate().skip(at) {
            if *deepest <= before && lines[j].trim_end().ends_with(';') {
                break; // a declaration with no body
            }
            if *depth <= before && (at..=j).any(|k| depths[k].1 > before) {
                end = Some(j);
                break;
            }
        }
        let Some(end) = end else { continue };
        let length = end - at + 1;
        let said: Vec<&str> = lines[..at]
            .iter()
            .rev()
            .map(|l| l.trim())
            .take_while(|l| l.starts_with("//") || l.starts_with("#["))
            .map(|l| l.trim_start_matches('/').trim())
            .collect();
        let reason = said.iter().rev().copied().collect::<Vec<_>>().join(" ");
        if length > LONGEST_FUNCTION && !reason.contains("~150 lines") {
            let name = line.split("fn ").nth(1).unwrap_or("");
            let name = name.split(['(', '<']).next().unwrap_or(name).to_string();
            out.push((at + 1, name, length));
        }
    }
    out
}

/// No function (tests apart) runs over the house's ~150 lines without its doc comment saying
/// why ("longer than the house's ~150 lines on purpose: ..."): a long function is split by
/// what it does unless being one piece is the point.
#[test]
fn no_function_runs_long_without_a_reason() {
    let mut bad = Vec::new();
    for dir in CRATES {
        let root = repo().join(dir);
        for path in sources(&root) {
            if path.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let rel = path.strip_prefix(repo()).unwrap().display().to_string();
            for (line, name, length) in long_functions(&text) {
                bad.push(format!(
                    "{rel}:{line}: `{name}` runs {length} lines (over {LONGEST_FUNCTION}) with no reason in its doc comment"
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_long_function_scan_counts_bodies_not_strings() {
    let body = "    x();\n".repeat(LONGEST_FUNCTION);
    let long = format!(
        "/// Short.\npub(crate) fn f() {{\n    let s = \"}}\";\n    let c = '{{';\n    let r = r#\"}}\"#;\n{body}}}\nfn g() {{}}\n"
    );
    assert_eq!(
        long_functions(&long),
        [(2, "f".to_string(), LONGEST_FUNCTION + 5)]
    );
    let reasoned = long.replace(
        "/// Short.",
        "/// Longer than the house's ~150 lines on purpose.",
    );
    assert!(long_functions(&reasoned).is_empty());
    let declared = format!("trait T {{\n    fn f(&self);\n}}\n{}", "x();\n".repeat(200));
    assert!(long_functions(&declared).is_empty());
    let tested = format!("#[cfg(test)]\nmod tests {{\n    fn f() {{\n{body}    }}\n}}\n");
    assert!(long_functions(&tested).is_empty());
}

//! The repository's own rules, checked as a test: every source file opens with a `//!` line
//! saying what it owns and is named in ARCHITECTURE.md's code map, `proto/` stays pure
//! (no tokio, files or sockets), and `unsafe` code lives only in the `sys` room; every
//! integration test file is a module of the one test binary and opens with a `//!` line too.

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

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// How ARCHITECTURE.md may name `rel` (a path under `src/`): its path, its file name, or, for
/// a folder's `mod.rs`, the folder (`service/nbd/`).
fn named(map: &str, rel: &str) -> bool {
    let file = rel.rsplit('/').next().unwrap_or(rel);
    let quoted = |s: &str| map.contains(&format!("`{s}`")) || map.contains(&format!("`src/{s}`"));
    match rel.strip_suffix("mod.rs") {
        Some(dir) if !dir.is_empty() => quoted(dir) || quoted(rel),
        _ => quoted(rel) || quoted(file),
    }
}

#[test]
fn every_source_file_says_what_it_owns_and_is_in_the_code_map() {
    let root = src();
    let map = std::fs::read_to_string(root.join("../ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut bad = Vec::new();
    for path in sources(&root) {
        let rel = path
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        if !text.starts_with("//!") {
            bad.push(format!(
                "src/{rel}:1: does not open with a `//!` line saying what it owns"
            ));
        }
        if !named(&map, &rel) {
            bad.push(format!(
                "src/{rel}: not named in ARCHITECTURE.md's code map"
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn proto_imports_no_tokio_files_or_sockets() {
    let root = src().join("proto");
    let mut bad = Vec::new();
    for path in sources(&root) {
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for banned in ["tokio", "std::fs", "std::net"] {
                if code.contains(banned) {
                    bad.push(format!("{}:{}: uses `{banned}`", path.display(), i + 1));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
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
/// under src/ have none either: they use the sys wrappers. (The integration tests in tests/
/// keep four calls of their own, a client's setns, fadvise, SO_BINDTODEVICE and getpwnam,
/// that no product code needs.)
#[test]
fn unsafe_code_lives_only_in_the_sys_room() {
    let root = src();
    let mut bad = Vec::new();
    for path in sources(&root) {
        if path.starts_with(root.join("sys")) {
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
    let map = "| `src/app.rs` | x |\n`service/nbd/` (`handshake.rs`)";
    assert!(named(map, "app.rs"));
    assert!(named(map, "service/nbd/mod.rs"));
    assert!(named(map, "service/nbd/handshake.rs"));
    assert!(!named(map, "service/nbd/transmit.rs"));
    assert!(!named(map, "export/tree/mod.rs"));
}

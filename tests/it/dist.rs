//! What ships beside the binary, checked against the code: the systemd unit
//! (`dist/bootpool.service`) passes `systemd-analyze verify` and starts the binary with flags it
//! accepts; the service config (`dist/pools.yaml`) parses and keeps its state where the unit
//! lets it write; the man pages (`docs/bootpool.8`, `docs/pools.yaml.5`) render without warnings
//! and name every subcommand, flag, value, exit status and config key (with its default) the
//! code has, and none it lacks. Needs `systemd-analyze` (Debian: systemd) and `groff`
//! (groff-base), which scripts/setup installs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_bootpool");
/// Where the unit expects the binary (the README's install step puts it there).
const INSTALLED_BIN: &str = "/usr/local/bin/bootpool";

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

/// Runs a command to its end (bounded), returning (success, stdout, stderr).
fn run(cmd: &mut Command) -> (bool, String, String) {
    crate::common::run(cmd, 30)
}

/// `bootpool ARGS`, which must succeed; its stdout.
fn bootpool(args: &[&str]) -> String {
    // `bootpool lab --help` (and storm's, trace's) is the instruments' binary's answer.
    let bin = crate::common::bootpool_with_instruments();
    let (ok, out, err) = run(Command::new(bin).args(args));
    assert!(ok, "bootpool {args:?} failed: {out}{err}");
    out
}

// ---- the unit ----------------------------------------------------------------------------

/// Every `Key=value` of the unit, in order (comments and section headers skipped).
fn unit_settings() -> Vec<(String, String)> {
    read("dist/bootpool.service")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('['))
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not Key=value: {l}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn unit_setting(key: &str) -> String {
    let all: Vec<String> = unit_settings()
        .into_iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(all.len(), 1, "the unit should set {key}= once: {all:?}");
    all[0].clone()
}

/// The ExecStart command line, split on whitespace (it uses no quoting).
fn exec_start() -> Vec<String> {
    let line = unit_setting("ExecStart");
    assert!(
        !line.contains(['"', '\'', '$', '%']),
        "ExecStart needs no quoting: {line}"
    );
    line.split_whitespace().map(String::from).collect()
}

#[test]
fn unit_passes_systemd_analyze_verify() {
    // verify checks that ExecStart's (and ExecReload's) binary exists and that `man` finds
    // every Documentation= page, so it runs on a copy naming the binary just built, with
    // MANPATH holding our pages.
    let tmp = tempfile::tempdir().unwrap();
    let text = read("dist/bootpool.service");
    for exec in ["ExecStart", "ExecReload"] {
        let from = format!("{exec}={INSTALLED_BIN} ");
        assert!(text.contains(&from), "{exec} should run {INSTALLED_BIN}");
    }
    let unit = tmp.path().join("bootpool.service");
    let (from, to) = (format!("={INSTALLED_BIN} "), format!("={BIN} "));
    std::fs::write(&unit, text.replace(&from, &to)).unwrap();
    for (section, page) in [("man8", "docs/bootpool.8"), ("man5", "docs/pools.yaml.5")] {
        let dir = tmp.path().join("man").join(section);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(repo(page), dir.join(Path::new(page).file_name().unwrap())).unwrap();
    }
    let (ok, out, err) = run(Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .env("MANPATH", tmp.path().join("man")));
    // verify exits 0 on unknown keys and unparsable values and only prints them: any output is
    // a finding.
    assert!(
        ok && out.trim().is_empty() && err.trim().is_empty(),
        "systemd-analyze verify (success {ok}):\n{out}{err}"
    );
}

#[test]
fn unit_capabilities_exist() {
    // verify ignores a misspelt capability without a word; ask systemd which ones it knows.
    let known = {
        let (ok, out, err) = run(Command::new("systemd-analyze").arg("capability"));
        assert!(ok, "{err}");
        out.to_lowercase()
    };
    let caps = unit_setting("CapabilityBoundingSet");
    assert!(!caps.is_empty());
    for cap in caps.split_whitespace() {
        let name = cap.to_lowercase();
        assert!(
            known
                .lines()
                .any(|l| l.split_whitespace().next() == Some(&name)),
            "{cap} is not a capability systemd knows"
        );
    }
}

#[test]
fn unit_exec_start_is_accepted_by_the_binary() {
    let argv = exec_start();
    assert_eq!(argv[0], INSTALLED_BIN);
    assert_eq!(argv[1], "serve", "the unit runs the daemon");
    // clap reads every argument before `--help`: a flag it does not know fails here.
    let mut args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
    args.push("--help");
    let out = bootpool(&args);
    assert!(out.contains("Usage: bootpool serve"), "{out}");
    // ExecReload likewise runs `bootpool reload` on the config ExecStart serves.
    let reload: Vec<String> = unit_setting("ExecReload")
        .split_whitespace()
        .map(String::from)
        .collect();
    assert_eq!(reload[..2], [INSTALLED_BIN, "reload"]);
    assert_eq!(reload[2..], argv[2..], "ExecReload's flags are ExecStart's");
    let mut args: Vec<&str> = reload[1..].iter().map(String::as_str).collect();
    args.push("--help");
    assert!(bootpool(&args).contains("Usage: bootpool reload"));
    // And a misspelt flag is refused, so the check above can fail.
    let (ok, _, err) = run(Command::new(BIN).args(["serve", "--conf", "x", "--help"]));
    assert!(!ok && err.contains("--conf"), "{err}");
}

#[test]
fn service_config_fits_the_unit() {
    use bootpool::config::{Config, Database};
    let argv = exec_start();
    let at = argv.iter().position(|a| a == "--config" || a == "-c");
    let config_path = &argv[at.expect("ExecStart names --config") + 1];
    // ConfigurationDirectory= and StateDirectory= are relative to /etc and /var/lib.
    let conf_dir = Path::new("/etc").join(unit_setting("ConfigurationDirectory"));
    assert_eq!(Path::new(config_path).parent(), Some(conf_dir.as_path()));
    let state_dir = Path::new("/var/lib").join(unit_setting("StateDirectory"));

    // Parsed as if installed where ExecStart reads it (paths resolve against that folder).
    let config = Config::parse(Path::new(config_path), &read("dist/pools.yaml"))
        .unwrap_or_else(|e| panic!("dist/pools.yaml: {e}"));
    // ProtectSystem=strict: the state folder is the only place the daemon may write.
    assert_eq!(config.server.state_dir, state_dir);
    assert_eq!(
        config.server.database,
        Database::Sqlite(state_dir.join("records.db"))
    );
    // ProtectHome=yes hides these; the state folder is chowned and written by systemd.
    let hidden = ["/home", "/root", "/run/user"];
    let mut read_paths = vec![config.server.loaders.clone()];
    read_paths.extend(config.images.values().map(|i| i.dir.clone()));
    assert_eq!(unit_setting("ProtectHome"), "yes");
    for p in read_paths {
        assert!(
            !hidden.iter().any(|h| p.starts_with(h)) && !p.starts_with(&state_dir),
            "{} is hidden from the service or inside its state folder",
            p.display()
        );
    }
}

#[test]
fn serve_stops_cleanly_on_sigterm() {
    // The unit stops the daemon with SIGTERM and reads status 0 as a wanted stop.
    let fx = crate::common::Fixture::new();
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(fx.config_path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("bootpool serving") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(Duration::from_secs(20)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("bootpool serve did not start");
    }
    // At once: the handler is set before start() logs "bootpool serving", so even this early
    // SIGTERM is a clean stop, not the default action (which would leave no exit code).
    bootpool::sys::process::kill(child.id() as i32, libc::SIGTERM).unwrap();
    let asked = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if asked.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("bootpool serve still running 20 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    reader.join().unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
}

// ---- the man pages -----------------------------------------------------------------------

#[test]
fn man_pages_render_without_warnings() {
    for page in ["docs/bootpool.8", "docs/pools.yaml.5"] {
        let (ok, out, err) = run(Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(repo(page)));
        assert!(ok && err.trim().is_empty(), "groff on {page}:\n{out}{err}");
    }
}

/// A roff source as plain text: escapes that only change fonts or spacing removed, `\-` as `-`.
fn plain(roff: &str) -> String {
    let mut s = roff.replace("\\-", "-").replace("\\(dq", "\"");
    for esc in ["\\fB", "\\fI", "\\fR", "\\fP", "\\&", "\\c"] {
        s = s.replace(esc, "");
    }
    s
}

/// The page split into its `.SH` sections (name -> plain text), and `.SS` subsections too.
fn sections(roff: &str, mark: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut name = String::new();
    for line in plain(roff).lines() {
        if let Some(rest) = line.strip_prefix(mark) {
            name = rest.trim().trim_matches('"').to_string();
        } else if mark == ".SS " && line.starts_with(".SH ") {
            name.clear(); // a section ends its last subsection
        } else if !name.is_empty() {
            let text: &mut String = out.entry(name.clone()).or_default();
            text.push_str(line);
            text.push('\n');
        }
    }
    out
}

/// Words of a text that look like long flags (`--name`).
fn long_flags(text: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("--") {
        let tail = &rest[i + 2..];
        let name: String = tail
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let before = rest[..i].chars().last();
        if !name.is_empty() && !matches!(before, Some(c) if c.is_ascii_alphanumeric() || c == '-') {
            flags.insert(format!("--{name}"));
        }
        rest = &tail[name.len()..];
    }
    flags
}

/// What `bootpool ARGS` (a long help) defines: long flags and their possible values.
fn help_of(args: &[&str]) -> (BTreeSet<String>, BTreeSet<String>) {
    let out = bootpool(args);
    let (mut flags, mut values) = (BTreeSet::new(), BTreeSet::new());
    let mut in_values = false;
    for line in out.lines() {
        let t = line.trim_start();
        // Option lines: `  -c, --config <CONFIG>  ...` or `      --wave <WAVE>  ...`.
        let long = if t.starts_with("--") {
            Some(t)
        } else if t.starts_with('-') && t.get(2..4) == Some(", ") {
            Some(&t[4..])
        } else {
            None
        };
        if let Some(long) = long {
            flags.insert(long.split_whitespace().next().unwrap().to_string());
            in_values = false;
        } else if t.starts_with("Possible values:") {
            in_values = true;
        } else if in_values && let Some(v) = t.strip_prefix("- ") {
            values.insert(v.split(':').next().unwrap().trim().to_string());
        } else if !t.is_empty() {
            in_values = false;
        }
        if let Some(i) = t.find("[possible values: ") {
            let list = &t[i + "[possible values: ".len()..];
            let list = &list[..list.find(']').unwrap()];
            values.extend(list.split(", ").map(String::from));
        }
    }
    (flags, values)
}

/// The subcommands `bootpool --help` lists.
fn subcommands() -> Vec<String> {
    let subs = commands_of(&[]);
    assert!(subs.len() >= 4, "{subs:?}");
    subs
}

/// The commands `bootpool ARGS --help` lists (`bootpool image`'s own: import, list, ...).
fn commands_of(args: &[&str]) -> Vec<String> {
    let mut args = args.to_vec();
    args.push("--help");
    let out = bootpool(&args);
    let mut in_commands = false;
    let mut subs = Vec::new();
    for line in out.lines() {
        if line.starts_with("Commands:") {
            in_commands = true;
        } else if in_commands && line.starts_with("  ") {
            subs.push(line.split_whitespace().next().unwrap().to_string());
        } else if in_commands {
            break;
        }
    }
    subs
}

fn has_word(text: &str, word: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .any(|w| w == word)
}

#[test]
fn man_page_names_every_subcommand_flag_and_value() {
    let roff = read("docs/bootpool.8");
    let sh = sections(&roff, ".SH ");
    let ss = sections(&roff, ".SS ");
    let synopsis = &sh["SYNOPSIS"];
    let mut accepted = BTreeSet::new();
    for sub in subcommands() {
        let title = format!("bootpool {sub}");
        let section = ss
            .get(&title)
            .unwrap_or_else(|| panic!("docs/bootpool.8 has no .SS \"{title}\""));
        assert!(synopsis.contains(&title), "SYNOPSIS lacks `{title}`");
        if sub == "help" {
            continue; // `bootpool help --help` is not a thing
        }
        let (mut flags, mut values) = help_of(&[&sub, "--help"]);
        // A command with commands of its own (`bootpool image import`): theirs are its too.
        for nested in commands_of(&[&sub]).iter().filter(|n| *n != "help") {
            let (f, v) = help_of(&[&sub, nested, "--help"]);
            flags.extend(f);
            values.extend(v);
        }
        for flag in &flags {
            if flag == "--help" {
                continue; // every command's; documented once under OPTIONS
            }
            assert!(
                long_flags(section).contains(flag),
                "docs/bootpool.8, `{title}`, lacks {flag}"
            );
            assert!(
                long_flags(synopsis).contains(flag),
                "SYNOPSIS lacks {sub} {flag}"
            );
        }
        for value in &values {
            assert!(
                has_word(section, value),
                "docs/bootpool.8, `{title}`, lacks the value `{value}`"
            );
        }
        // The other way round: the page names no flag this subcommand does not take.
        for flag in long_flags(section) {
            assert!(
                flags.contains(&flag),
                "docs/bootpool.8, `{title}`, names {flag}, which `bootpool {sub}` does not take"
            );
        }
        accepted.extend(flags);
    }
    let (top, _) = help_of(&["--help"]);
    let options = &sh["OPTIONS"];
    for flag in &top {
        assert!(long_flags(options).contains(flag), "OPTIONS lacks {flag}");
    }
    accepted.extend(top);
    for flag in long_flags(synopsis).union(&long_flags(options)) {
        assert!(
            accepted.contains(flag),
            "docs/bootpool.8 names {flag}, which bootpool does not take"
        );
    }
}

#[test]
fn man_page_names_exit_statuses_and_environment() {
    let main = read("src/main.rs");
    let roff = read("docs/bootpool.8");
    let sh = sections(&roff, ".SH ");
    // Statuses: 0 and 1 (ExitCode::SUCCESS/FAILURE), 2 for clap's usage errors, and each
    // ExitCode::from(N) of main.rs.
    let mut codes: BTreeSet<String> = ["0", "1", "2"].map(String::from).into();
    for part in main.split("ExitCode::from(").skip(1) {
        codes.insert(part[..part.find(')').unwrap()].to_string());
    }
    let tags = tp_tags(&sh["EXIT STATUS"]);
    for code in &codes {
        assert!(tags.contains(code), "EXIT STATUS lacks {code}");
    }
    assert_eq!(
        tags.len(),
        codes.len(),
        "EXIT STATUS has other statuses: {tags:?}"
    );
    // Environment variables the binary reads: main.rs's, and the config file's (named by a
    // constant in config/mod.rs, which `default_file` reads).
    let env = &sh["ENVIRONMENT"];
    let mut vars = 0;
    for marker in ["try_from_env(\"", "env::var(\"", "env::var_os(\""] {
        for part in main.split(marker).skip(1) {
            let var = &part[..part.find('"').unwrap()];
            assert!(tp_tags(env).contains(var), "ENVIRONMENT lacks {var}");
            vars += 1;
        }
    }
    let config = read("src/config/mod.rs");
    for part in config.split("pub const FILE_ENV: &str = \"").skip(1) {
        let var = &part[..part.find('"').unwrap()];
        assert!(tp_tags(env).contains(var), "ENVIRONMENT lacks {var}");
        vars += 1;
    }
    assert!(
        vars > 0,
        "main.rs reads no environment variable? update this test"
    );
}

/// The tags of `.TP` entries (the line after each `.TP`), as plain text.
fn tp_tags(text: &str) -> BTreeSet<String> {
    entries(text).into_keys().collect()
}

/// `.TP` entries: tag -> body, each as plain words (macro names dropped, quotes removed).
fn entries(text: &str) -> BTreeMap<String, String> {
    let words = |line: &str| -> String {
        let line = if line.starts_with('.') {
            line.split_once(' ').map_or("", |(_, rest)| rest)
        } else {
            line
        };
        line.replace('"', "")
    };
    let mut out = BTreeMap::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if !line.starts_with(".TP") {
            continue;
        }
        let Some(tag) = lines.next() else { break };
        let tag = words(tag).split(", ").next().unwrap().trim().to_string();
        let mut body = String::new();
        while let Some(l) = lines.peek() {
            if l.starts_with(".TP") || l.starts_with(".SH") || l.starts_with(".SS") {
                break;
            }
            body.push_str(&words(l));
            body.push(' ');
            lines.next();
        }
        out.insert(tag, body);
    }
    out
}

// ---- the config keys ---------------------------------------------------------------------

/// One field of a serde struct in raw.rs.
struct Field {
    name: String,
    ty: String,
    /// `Some("")` for `#[serde(default)]`, `Some(f)` for `#[serde(default = "f")]`.
    default: Option<String>,
}

/// The `pub struct`s of raw.rs and their fields, read from the source.
fn raw_structs(src: &str) -> BTreeMap<String, Vec<Field>> {
    let mut structs = BTreeMap::new();
    let mut current: Option<(String, Vec<Field>)> = None;
    let mut default = None;
    for line in src.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("pub struct ") {
            let name = rest.trim_end_matches(" {").to_string();
            current = Some((name, Vec::new()));
        } else if line == "}" {
            if let Some((name, fields)) = current.take() {
                structs.insert(name, fields);
            }
        } else if let Some((_, fields)) = current.as_mut() {
            if line.starts_with("#[serde(") && line.contains("default") {
                default = Some(match line.split_once("default = \"") {
                    Some((_, f)) => f[..f.find('"').unwrap()].to_string(),
                    None => String::new(),
                });
            } else if let Some(rest) = line.strip_prefix("pub ") {
                let (name, ty) = rest.split_once(": ").expect("pub name: Type");
                fields.push(Field {
                    name: name.to_string(),
                    ty: ty.trim_end_matches(',').to_string(),
                    default: default.take(),
                });
            }
        }
    }
    assert!(
        structs.contains_key("File"),
        "raw.rs changed shape; update this test"
    );
    structs
}

/// What a documented key must say: its default, or that it is required.
#[derive(Debug)]
enum Want {
    Default(String),
    Required,
    /// Optional, with no default value to show: it must not open with "Required".
    Optional,
}

/// Every key path below `prefix` (`server.ports.dhcp`, `pools.NAME.clients[].mac`) and what its
/// entry must say.
fn key_paths(
    structs: &BTreeMap<String, Vec<Field>>,
    defaults: &BTreeMap<String, String>,
    of: &str,
    prefix: &str,
    out: &mut BTreeMap<String, Want>,
) {
    for f in &structs[of] {
        let path = format!("{prefix}{}", f.name);
        let inner = |wrapper: &str| {
            f.ty.strip_prefix(wrapper)
                .and_then(|t| t.strip_suffix('>'))
                .map(String::from)
        };
        let want = match (&f.default, f.ty.starts_with("Option<")) {
            (Some(func), _) if !func.is_empty() => Want::Default(defaults[func].clone()),
            (Some(_), _) | (None, true) => Want::Optional,
            (None, false) => Want::Required,
        };
        out.insert(path.clone(), want);
        if structs.contains_key(&f.ty) {
            key_paths(structs, defaults, &f.ty, &format!("{path}."), out);
        } else if let Some(t) = inner("Option<").filter(|t| structs.contains_key(t)) {
            key_paths(structs, defaults, &t, &format!("{path}."), out);
        } else if let Some(t) = inner("BTreeMap<String, ").filter(|t| structs.contains_key(t)) {
            key_paths(structs, defaults, &t, &format!("{path}.NAME."), out);
        } else if let Some(t) = inner("Vec<").filter(|t| structs.contains_key(t)) {
            key_paths(structs, defaults, &t, &format!("{path}[]."), out);
        }
    }
}

/// `fn default_x() -> String { "VALUE".into() }` of raw.rs: name -> VALUE.
fn default_fns(src: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for part in src.split("\nfn ").skip(1) {
        let name = &part[..part.find('(').unwrap()];
        let body = &part[part.find('{').unwrap()..part.find('}').unwrap()];
        let value = body
            .split('"')
            .nth(1)
            .expect("a default fn returning a string literal");
        out.insert(name.to_string(), value.to_string());
    }
    out
}

/// Defaults that live in src/config/model.rs: the ports, and `cow_limit`.
fn mod_defaults(src: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let ports = &src[src.find("impl Default for Ports").expect("Ports default")..];
    let ports = &ports[ports.find("-> Self").unwrap()..];
    let ports = &ports[ports.find("Ports {").unwrap()..ports.find('}').unwrap()];
    for line in ports.lines().skip(1) {
        if let Some((k, v)) = line.trim().trim_end_matches(',').split_once(": ") {
            out.insert(format!("server.ports.{k}"), v.to_string());
        }
    }
    let cow = src
        .split("pub const DEFAULT_COW_LIMIT: u64 = ")
        .nth(1)
        .expect("DEFAULT_COW_LIMIT");
    let cow = &cow[..cow.find(';').unwrap()];
    let (n, shift) = cow
        .split_once(" << ")
        .expect("DEFAULT_COW_LIMIT as N << SHIFT");
    let unit = match shift {
        "20" => "MiB",
        "30" => "GiB",
        other => panic!("DEFAULT_COW_LIMIT << {other}: update this test"),
    };
    out.insert("images.NAME.cow_limit".into(), format!("{n}{unit}"));
    assert_eq!(out.len(), 9, "Ports changed shape: {out:?}");
    out
}

#[test]
fn man_page_documents_every_config_key_and_default() {
    let raw = read("src/config/raw.rs");
    let structs = raw_structs(&raw);
    let mut keys = BTreeMap::new();
    key_paths(&structs, &default_fns(&raw), "File", "", &mut keys);
    for (path, value) in mod_defaults(&read("src/config/model.rs")) {
        let want = keys
            .get_mut(&path)
            .unwrap_or_else(|| panic!("{path} not in raw.rs"));
        *want = Want::Default(value);
    }
    let roff = read("docs/pools.yaml.5");
    let sections = sections(&roff, ".SH ");
    // Keys are the entries of the SERVER, DHCP, IMAGES and POOLS sections.
    let documented: BTreeMap<String, String> = sections
        .iter()
        .filter(|(title, _)| title.ends_with(" SECTION"))
        .flat_map(|(_, text)| entries(text))
        .collect();
    let mut checked = 0;
    for (path, want) in &keys {
        if !path.contains('.') {
            // A top-level key is a section of the page.
            let title = format!("{} SECTION", path.to_uppercase());
            assert!(
                sections.contains_key(&title),
                "pools.yaml.5 lacks .SH \"{title}\""
            );
            continue;
        }
        let body = documented
            .get(path)
            .unwrap_or_else(|| panic!("docs/pools.yaml.5 does not document `{path}`"));
        match want {
            Want::Default(value) => {
                let after = body.split("Default:").nth(1).unwrap_or_else(|| {
                    panic!("pools.yaml.5, `{path}`: no `Default:` (the code's is {value})")
                });
                let shown = after.split_whitespace().next().unwrap_or("");
                assert_eq!(
                    shown.trim_end_matches(['.', ',']),
                    value,
                    "pools.yaml.5, `{path}`: default differs from the code's"
                );
            }
            Want::Required => assert!(
                body.contains("Required"),
                "pools.yaml.5, `{path}`: the code requires it; say `Required.`"
            ),
            Want::Optional => assert!(
                !body.trim_start().starts_with("Required"),
                "pools.yaml.5, `{path}`: the code does not require it"
            ),
        }
        checked += 1;
    }
    // And no entry for a key the parser does not take.
    for tag in documented.keys() {
        assert!(
            keys.contains_key(tag),
            "docs/pools.yaml.5 documents `{tag}`, which the parser does not take"
        );
    }
    assert!(
        checked > 25,
        "only {checked} keys found; raw.rs parsing broke?"
    );
}

//! A manifest sent as its difference from one the puller holds (pure; docs/chunks.md,
//! "Manifests and pulls"): a site member pulling revision B while it holds revision A of the
//! same image asks for B's manifest against A's, and gets the lines of B that A lacks plus,
//! for the rest, which runs of A's lines to copy. A manifest has a line per file, so a
//! one-file change of a 50,000-file root moves one line, not 7 MB of them.
//!
//! Nothing in a delta is trusted: the puller rebuilds B's manifest from its own copy of A's
//! and then decodes it as any manifest (`Manifest::decode` refuses one whose entries do not
//! make the revision it names). A delta names the SHA-256 of the manifest it was made
//! against, so it is never applied to another.
//!
//! The format, one op per line after two header lines:
//! ```text
//! bootpool-manifest-delta 1
//! base SHA256-OF-THE-BASE-MANIFEST
//! = START COUNT      the base's lines START .. START+COUNT (0-based), as they are
//! + LINE             this line
//! ```

use anyhow::{Context as _, bail};
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;

/// The first line of a delta.
pub const MAGIC: &str = "bootpool-manifest-delta 1";

/// Whether `body` (a manifest route's answer) is a delta rather than a whole manifest.
pub fn is_delta(body: &[u8]) -> bool {
    body.starts_with(MAGIC.as_bytes()) && body.get(MAGIC.len()).is_some_and(|b| *b == b'\n')
}

/// The SHA-256 (hex) of a manifest's bytes, which a delta names its base by.
pub fn digest(manifest: &[u8]) -> String {
    Sha256::digest(manifest)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `new` as a delta against `base`: each line of `new` that `base` holds is copied from
/// there (consecutive ones as one run), every other line is sent.
pub fn make(base: &[u8], new: &[u8]) -> Vec<u8> {
    let base_lines: Vec<&[u8]> = lines(base).collect();
    // A line's place in the base (manifest lines are unique: each names one path; a header
    // line repeated would only make a longer delta, never a wrong one).
    let mut at: HashMap<&[u8], usize> = HashMap::with_capacity(base_lines.len());
    for (i, l) in base_lines.iter().enumerate() {
        at.entry(l).or_insert(i);
    }
    let mut out = format!("{MAGIC}\nbase {}\n", digest(base)).into_bytes();
    let mut run: Option<(usize, usize)> = None;
    let flush = |out: &mut Vec<u8>, run: &mut Option<(usize, usize)>| {
        if let Some((start, count)) = run.take() {
            out.extend_from_slice(format!("= {start} {count}\n").as_bytes());
        }
    };
    for line in lines(new) {
        match (at.get(line), run) {
            (Some(&i), Some((start, count))) if start + count == i => {
                run = Some((start, count + 1));
            }
            (Some(&i), _) => {
                flush(&mut out, &mut run);
                run = Some((i, 1));
            }
            (None, _) => {
                flush(&mut out, &mut run);
                out.extend_from_slice(b"+ ");
                out.extend_from_slice(line);
                out.push(b'\n');
            }
        }
    }
    flush(&mut out, &mut run);
    out
}

/// The manifest `delta` describes, rebuilt from `base` (which must be the manifest the delta
/// names). The result is still to be decoded and checked by the caller.
pub fn apply(base: &[u8], delta: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut ops = lines(delta);
    if ops.next() != Some(MAGIC.as_bytes()) {
        bail!("not a manifest delta (its first line is not `{MAGIC}`)");
    }
    let named = ops
        .next()
        .and_then(|l| l.strip_prefix(b"base "))
        .context("a manifest delta's second line names its base (`base SHA256`)")?;
    let have = digest(base);
    if named != have.as_bytes() {
        bail!(
            "the delta is against manifest {}, not the {have} held here",
            String::from_utf8_lossy(named)
        );
    }
    let base_lines: Vec<&[u8]> = lines(base).collect();
    let mut out = Vec::with_capacity(base.len());
    for (n, op) in ops.enumerate() {
        let n = n + 3;
        if let Some(line) = op.strip_prefix(b"+ ") {
            out.extend_from_slice(line);
            out.push(b'\n');
        } else if let Some(run) = op.strip_prefix(b"= ") {
            let run = std::str::from_utf8(run).ok();
            let (start, count) = run
                .and_then(|r| r.split_once(' '))
                .and_then(|(s, c)| Some((s.parse::<usize>().ok()?, c.parse::<usize>().ok()?)))
                .with_context(|| format!("delta line {n}: `= START COUNT` expected"))?;
            let lines = start
                .checked_add(count)
                .and_then(|end| base_lines.get(start..end))
                .with_context(|| {
                    format!(
                        "delta line {n}: lines {start}..{} of a base of {}",
                        start.saturating_add(count),
                        base_lines.len()
                    )
                })?;
            for l in lines {
                out.extend_from_slice(l);
                out.push(b'\n');
            }
        } else {
            bail!("delta line {n}: neither `= START COUNT` nor `+ LINE`");
        }
    }
    Ok(out)
}

/// A text's lines, without their `\n` (a manifest's last line ends with one too).
fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    (!text.is_empty())
        .then_some(body)
        .into_iter()
        .flat_map(|b| b.split(|c| *c == b'\n'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(lines: &[&str]) -> Vec<u8> {
        lines
            .iter()
            .flat_map(|l| [l.as_bytes(), b"\n"].concat())
            .collect()
    }

    #[test]
    fn a_one_line_change_is_one_line_and_two_runs_and_rebuilds_the_new_manifest() {
        let base: Vec<String> = (0..1000)
            .map(|i| format!("f 644 0 0 {i} usr/{i:04}"))
            .collect();
        let mut new = base.clone();
        new[500] = "f 644 0 0 1 usr/0500-changed".into();
        new.insert(0, "revision two".into());
        let (base, new) = (
            manifest(&base.iter().map(String::as_str).collect::<Vec<_>>()),
            manifest(&new.iter().map(String::as_str).collect::<Vec<_>>()),
        );
        let d = make(&base, &new);
        assert!(is_delta(&d));
        let text = String::from_utf8(d.clone()).unwrap();
        assert_eq!(text.lines().count(), 2 + 4, "{text}");
        assert!(d.len() < 200, "{text}");
        assert_eq!(apply(&base, &d).unwrap(), new);
    }

    #[test]
    fn reordered_removed_and_new_lines_rebuild_exactly() {
        let base = manifest(&["a", "b", "c", "d", "e"]);
        let new = manifest(&["x", "d", "e", "a", "y", "c"]);
        assert_eq!(apply(&base, &make(&base, &new)).unwrap(), new);
        let empty = manifest(&[]);
        assert_eq!(apply(&base, &make(&base, &empty)).unwrap(), empty);
        assert_eq!(apply(&empty, &make(&empty, &new)).unwrap(), new);
    }

    #[test]
    fn a_delta_against_another_base_or_out_of_range_is_refused() {
        let base = manifest(&["a", "b"]);
        let d = make(&base, &manifest(&["b", "c"]));
        let other = manifest(&["a", "b", "z"]);
        let e = apply(&other, &d).unwrap_err().to_string();
        assert!(e.contains("not the"), "{e}");
        let bad = format!("{MAGIC}\nbase {}\n= 1 5\n", digest(&base));
        let e = format!("{:#}", apply(&base, bad.as_bytes()).unwrap_err());
        assert!(e.contains("lines 1..6 of a base of 2"), "{e}");
        let bad = format!("{MAGIC}\nbase {}\n? what\n", digest(&base));
        assert!(apply(&base, bad.as_bytes()).is_err());
        assert!(!is_delta(b"bootpool-manifest 1\n"));
    }
}

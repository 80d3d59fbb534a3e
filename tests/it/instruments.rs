//! The daemon's binary hands `lab`, `storm` and `trace` to the instruments' binary
//! (`bootpool-instruments`): found beside it, else in PATH, with the arguments as given; when it
//! is in neither, the command fails with an error that says what to build.

use std::path::Path;
use std::process::Command;

/// A copy of the daemon's binary alone in a folder of its own (a copy, not a link: the
/// binary looks beside the file it runs from). cp writes it, so no file descriptor open for
/// writing it is in this process for another test's fork to inherit, which would make
/// running it fail with ETXTBSY.
fn lone_bootpool(dir: &Path) -> std::path::PathBuf {
    let lone = dir.join("bootpool");
    let mut cp = Command::new("cp");
    cp.arg(env!("CARGO_BIN_EXE_bootpool")).arg(&lone);
    let (ok, _, err) = crate::common::run(&mut cp, 20);
    assert!(ok, "cp: {err}");
    lone
}

#[test]
fn an_instrument_neither_beside_nor_in_path_is_an_error_saying_what_to_build() {
    let tmp = tempfile::tempdir().unwrap();
    let lone = lone_bootpool(tmp.path());
    for command in ["lab", "storm", "trace"] {
        let mut c = Command::new(&lone);
        c.args([command, "--help"]).env("PATH", tmp.path());
        let (ok, out, err) = crate::common::run(&mut c, 20);
        assert!(!ok, "{out}");
        let want = format!("error: `bootpool {command}` is run by bootpool-instruments");
        assert!(err.contains(&want), "{err}");
        assert!(err.contains("`cargo build --release`"), "{err}");
    }
}

#[test]
fn an_instrument_in_path_answers_with_the_arguments_as_given() {
    let bootpool = crate::common::bootpool_with_instruments();
    let built = Path::new(bootpool).parent().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let lone = lone_bootpool(tmp.path());
    let help = |args: &[&str]| {
        let mut c = Command::new(&lone);
        c.args(args).env("PATH", built);
        let (ok, out, err) = crate::common::run(&mut c, 20);
        assert!(ok, "bootpool {args:?}: {out}{err}");
        out
    };
    let storm = help(&["storm", "--help"]);
    assert!(storm.contains("Usage: bootpool storm"), "{storm}");
    assert!(storm.contains("--server-links"), "{storm}");
    assert_eq!(help(&["help", "storm"]), storm);
    // An unknown flag reaches the instruments' parser, which refuses it as clap does.
    let mut c = Command::new(&lone);
    c.args(["trace", "--no-such-flag"]).env("PATH", built);
    let (ok, _, err) = crate::common::run(&mut c, 20);
    assert!(!ok);
    assert!(
        err.contains("unexpected argument '--no-such-flag'"),
        "{err}"
    );
    assert!(err.contains("Usage: bootpool trace"), "{err}");
}

//! Shared helpers: paths, running the binary and the Python reference.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tests/data/NAME`.
pub fn data(name: &str) -> PathBuf {
    repo().join("tests/data").join(name)
}

/// Every `.pgn` file shipped in `tests/data`, sorted.
pub fn data_pgns() -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(repo().join("tests/data"))
        .expect("tests/data exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pgn"))
        .collect();
    files.sort();
    files
}

/// The built `pgnload` binary.
pub fn pgnload() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pgnload"))
}

/// Runs a command and returns its output, panicking with context if it could not start.
pub fn run(mut cmd: Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("could not run {cmd:?}: {e}"))
}

/// `python3` running a script from `scripts/`, after checking the reference
/// packages import. Fails the test with instructions when they do not.
pub fn python_script(script: &str) -> Command {
    let check = run({
        let mut c = Command::new("python3");
        c.args([
            "-c",
            "import chess, xxhash; assert chess.__version__.startswith('1.11')",
        ]);
        c
    });
    assert!(
        check.status.success(),
        "python-chess 1.11 and xxhash are required for the parity tests: \
         pip install chess==1.11.2 xxhash\n{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("scripts").join(script));
    cmd
}

/// Asserts two TSV outputs are identical, showing the first differing line.
pub fn assert_same_lines(what: &Path, expected: &[u8], actual: &[u8]) {
    if expected == actual {
        return;
    }
    let exp = String::from_utf8_lossy(expected);
    let act = String::from_utf8_lossy(actual);
    let (mut e, mut a) = (exp.lines(), act.lines());
    for line in 1.. {
        match (e.next(), a.next()) {
            (Some(x), Some(y)) if x == y => continue,
            (x, y) => panic!(
                "{}: first difference at line {line}\n  python: {x:?}\n  rust:   {y:?}\n\
                 ({} python lines, {} rust lines)",
                what.display(),
                exp.lines().count(),
                act.lines().count()
            ),
        }
    }
}

//! How inputs are opened and identified: a fingerprint of every byte,
//! pipes and FIFOs read once and wholly, archives refused by name, file
//! names that are not UTF-8.

use std::{
    ffi::OsStr,
    fmt::Write as _,
    io::Write,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::{
    common::{TestDb, data, fresh_db, run, scratch_dir, stderr},
    import::{assert_ok, content_dump},
    resume::renamed_sample,
};

/// Renamed copies of the Lichess sample (438 games, just under 1 MiB each),
/// one after the other.
fn copies(which: &[usize]) -> String {
    which.iter().map(|&copy| renamed_sample(copy)).collect()
}

fn import(db: &TestDb, files: &[&Path]) -> Output {
    let mut cmd = db.pgnload();
    cmd.args(["-q", "import", "--batch-games", "100"])
        .args(files);
    run(cmd)
}

/// Waits (bounded, so that a hang fails instead of blocking the suite)
/// until `ready` holds, killing `child` and failing if it never does.
fn wait_until(child: &mut Child, what: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        if started.elapsed() > Duration::from_mins(1) || child.try_wait().ok().flatten().is_some() {
            let _ = child.kill();
            let out = child.stderr_rest();
            panic!("never {what}; pgnload: {out}");
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// The exit status of `child`, killing it and failing after a bounded wait.
fn wait_exit(child: &mut Child, what: &str) -> (Option<i32>, String) {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return (status.code(), child.stderr_rest());
        }
        if started.elapsed() > Duration::from_mins(1) {
            let _ = child.kill();
            panic!("{what}: pgnload did not exit: {}", child.stderr_rest());
        }
        thread::sleep(Duration::from_millis(50));
    }
}

trait StderrRest {
    /// The rest of the child's stderr (it must have been piped).
    fn stderr_rest(&mut self) -> String;
}

impl StderrRest for Child {
    fn stderr_rest(&mut self) -> String {
        let _ = self.wait();
        let mut text = String::new();
        if let Some(mut err) = self.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut err, &mut text);
        }
        text
    }
}

#[test]
fn a_file_of_the_same_size_changed_in_the_middle_is_imported_not_skipped() {
    let dir = scratch_dir("pgnload-same-size");
    let file = dir.path().join("games.pgn");
    // Only the middle copy differs: outside the first and last MiB.
    let first = copies(&[1, 2, 3, 4, 5]);
    let second = copies(&[1, 2, 6, 4, 5]);
    assert_eq!(first.len(), second.len());
    let mib = 1 << 20;
    assert!(first[..mib] == second[..mib], "the first MiB differs");
    assert!(
        first[first.len() - mib..] == second[second.len() - mib..],
        "the last MiB differs"
    );
    std::fs::write(&file, &first).expect("write");
    let db = fresh_db("same_size");
    let out = import(&db, &[&file]);
    assert_ok(&out, &[0]);
    std::fs::write(&file, &second).expect("write");
    let out = import(&db, &[&file]);
    assert_ok(&out, &[0]);
    let text = stderr(&out);
    assert!(!text.contains("already imported"), "{text}");
    assert!(
        text.contains("2190 read = 438 imported + 1752 already present + 0 rejected"),
        "{text}"
    );
    // The same bytes again are recognized.
    let out = import(&db, &[&file]);
    assert_ok(&out, &[0]);
    assert!(
        stderr(&out).contains("already imported, skipped"),
        "{}",
        stderr(&out)
    );
}

/// `pgnload … import <(cat FILES…)…` through bash: each argument is a
/// `/dev/fd/N` pipe from a child process.
fn import_substituted(db: &TestDb, groups: &[&[&Path]]) -> Output {
    let mut script = String::from("exec \"$PGNLOAD\" -q import --batch-games 100");
    let mut cmd = Command::new("bash");
    let mut n = 0;
    for group in groups {
        script.push_str(" <(cat");
        for _ in *group {
            n += 1;
            let _ = write!(script, " \"${n}\"");
        }
        script.push(')');
    }
    cmd.arg("-c").arg(&script).arg("bash");
    for group in groups {
        cmd.args(*group);
    }
    cmd.env("PGNLOAD", env!("CARGO_BIN_EXE_pgnload"))
        .env("DATABASE_URL", &db.url);
    run(cmd)
}

#[test]
fn process_substitutions_are_read_once_and_wholly() {
    let dir = scratch_dir("pgnload-procsub");
    let big = dir.path().join("big.pgn");
    std::fs::write(&big, copies(&[1, 2, 3])).expect("write");
    let sample = data("lichess-2025-05-sample.pgn");
    let renamed = dir.path().join("renamed.pgn");
    std::fs::write(&renamed, renamed_sample(7)).expect("write");

    let db = fresh_db("procsub");
    let out = import_substituted(&db, &[&[&sample, &renamed], &[&big]]);
    assert_ok(&out, &[0]);
    let text = stderr(&out);
    assert!(
        text.contains("2190 read = 2190 imported + 0 already present + 0 rejected"),
        "{text}"
    );
    // A pipe has no identity across runs: the same command reads it all
    // again, and finds every game present.
    let out = import_substituted(&db, &[&[&sample, &renamed], &[&big]]);
    assert_ok(&out, &[0]);
    let text = stderr(&out);
    assert!(
        text.contains("2190 read = 0 imported + 2190 already present + 0 rejected"),
        "{text}"
    );
    assert_eq!(
        db.psql("SELECT count(*) FILTER (WHERE state = 'done'), count(*) FROM import_files"),
        "4|4"
    );

    let clean = fresh_db("procsub_ref");
    assert_ok(&import(&clean, &[&sample, &renamed, &big]), &[0]);
    assert_eq!(content_dump(&db), content_dump(&clean));
}

fn mkfifo(dir: &Path) -> PathBuf {
    let fifo = dir.join("games.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    fifo
}

fn spawn_import(db: &TestDb, file: &Path) -> Child {
    let mut cmd = db.pgnload();
    cmd.args(["-q", "import", "--batch-games", "100"])
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd.spawn().expect("spawn pgnload")
}

#[test]
fn a_fifo_is_read_once_compressed_or_not() {
    let dir = scratch_dir("pgnload-fifo");
    let fifo = mkfifo(dir.path());
    let db = fresh_db("fifo");
    let sample = std::fs::read(data("lichess-2025-05-sample.pgn")).expect("sample");
    let compressed = zstd::encode_all(&sample[..], 3).expect("zstd");
    for (run_number, bytes) in [(1, &sample), (2, &compressed)] {
        let mut child = spawn_import(&db, &fifo);
        // Opening for writing waits for pgnload to open the FIFO for reading.
        let mut writer = std::fs::OpenOptions::new()
            .write(true)
            .open(&fifo)
            .expect("open the FIFO for writing");
        writer.write_all(bytes).expect("write into the FIFO");
        drop(writer);
        let (code, text) = wait_exit(&mut child, "FIFO import");
        assert_eq!(code, Some(0), "{text}");
        let expected = if run_number == 1 {
            "438 read = 438 imported + 0 already present + 0 rejected"
        } else {
            "438 read = 0 imported + 438 already present + 0 rejected"
        };
        assert!(text.contains(expected), "run {run_number}: {text}");
    }
    assert_eq!(
        db.psql(
            "SELECT string_agg(compression || ':' || state, ',' ORDER BY id) FROM import_files"
        ),
        "unknown:done,unknown:done"
    );
}

#[test]
fn sigterm_ends_an_import_waiting_for_a_fifo_writer() {
    let dir = scratch_dir("pgnload-fifo-term");
    let fifo = mkfifo(dir.path());
    let db = fresh_db("fifo_term");
    let mut child = spawn_import(&db, &fifo);
    wait_until(&mut child, "started reading the FIFO", || {
        db.psql("SELECT count(*) FROM pg_tables WHERE tablename = 'import_files'") == "1"
            && db.psql("SELECT count(*) FROM import_files WHERE state = 'running'") == "1"
    });
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let (code, text) = wait_exit(&mut child, "SIGTERM while waiting for a writer");
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains("interrupted"), "{text}");
    assert!(text.contains("1 interrupted"), "{text}");
    assert_eq!(db.psql("SELECT state FROM import_files"), "interrupted");
}

#[test]
fn an_archive_fails_its_input_by_name_and_the_others_are_imported() {
    let dir = scratch_dir("pgnload-zip");
    let pgn = std::fs::read(data("lichess-2025-05-sample.pgn")).expect("sample");
    // A zip holding one stored (uncompressed) PGN: the text is readable
    // inside, which is what used to be parsed into garbage rejects.
    let mut zip = Vec::new();
    zip.extend_from_slice(b"PK\x03\x04\x14\x00\x00\x00\x00\x00");
    zip.extend_from_slice(&[0; 16]);
    zip.extend_from_slice(&9u16.to_le_bytes());
    zip.extend_from_slice(&0u16.to_le_bytes());
    zip.extend_from_slice(b"games.pgn");
    zip.extend_from_slice(&pgn[..4000]);
    zip.extend_from_slice(b"PK\x01\x02 central directory follows\n");
    let archive = dir.path().join("games.zip");
    std::fs::write(&archive, &zip).expect("write zip");
    let xz = dir.path().join("games.pgn.xz");
    std::fs::write(&xz, b"\xFD7zXZ\x00\x00\x04garbage").expect("write xz");
    let db = fresh_db("zip");
    let out = import(&db, &[&archive, &xz, &data("lichess-2025-05-sample.pgn")]);
    assert_ok(&out, &[2]);
    let text = stderr(&out);
    assert!(
        text.contains("games.zip: unsupported format: zip archive"),
        "{text}"
    );
    assert!(
        text.contains("games.pgn.xz: unsupported format: xz"),
        "{text}"
    );
    assert!(
        text.contains("438 read = 438 imported + 0 already present + 0 rejected"),
        "{text}"
    );
    assert!(
        text.contains("1 imported, 0 skipped, 0 interrupted, 2 failed"),
        "{text}"
    );
    assert_eq!(db.psql("SELECT count(*) FROM import_rejects"), "0");
}

#[test]
fn a_file_name_that_is_not_utf8_is_named_in_the_error() {
    let dir = scratch_dir("pgnload-latin1");
    let name = dir.path().join(OsStr::from_bytes(b"caf\xe9.pgn"));
    std::fs::copy(data("kasparov-deep-blue-1997.pgn"), &name).expect("copy");
    let db = fresh_db("latin1");
    let out = import(&db, &[&name]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("caf\u{FFFD}.pgn"), "{text}");
    assert!(text.contains("UTF-8"), "{text}");
}

//! How a run behaves as a whole, unattended: single-game changes beside
//! imports (refused only by a bulk load, which they name), no bulk work for
//! inputs that cannot be opened, `--mode auto` on a shared server, the
//! first signal ending a wait for a server that is down, and exit codes
//! that hold when stderr or stdout cannot be written.

use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::{
    common::{TestDb, data, embedded_pgnload, fresh_db, games_of, migrated_db, run, scratch_dir},
    import::{assert_ok, import},
    resume::{corpus_with_copies, renamed_sample},
};

/// A one-game PGN file in `dir`: the first game of `tests/data/NAME`.
fn one_game_file(dir: &Path, name: &str) -> PathBuf {
    let text = std::fs::read_to_string(data(name)).expect("read test data");
    let path = dir.join(format!("one-{name}"));
    std::fs::write(&path, &games_of(&text)[0]).expect("write");
    path
}

/// Polls `done` until it holds, failing with `what` after a minute (a
/// hang bound, not a timing assertion).
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_mins(1), "{what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// An import of a named pipe, fed by the test: it stays mid-run, its
/// locks held, for as long as the writer is open.
struct PipedImport {
    child: Child,
    writer: std::fs::File,
}

impl PipedImport {
    /// Starts `pgnload import ARGS FIFO` in `dir` and writes `first` into
    /// it; returns once a batch of them is committed.
    fn start(db: &TestDb, dir: &Path, args: &[&str], first: &str) -> PipedImport {
        let fifo = dir.join("games.fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        let child = db
            .pgnload()
            .args(["-q", "import", "--batch-games", "5"])
            .args(args)
            .arg(&fifo)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the importer");
        let mut writer = std::fs::OpenOptions::new()
            .write(true)
            .open(&fifo)
            .expect("open the FIFO for writing");
        writer.write_all(first.as_bytes()).expect("write games");
        writer.flush().expect("flush");
        wait_until("the importer committed no batch", || {
            db.psql("SELECT count(*) FROM import_files WHERE state = 'running' AND games_done > 0")
                == "1"
        });
        std::fs::remove_file(&fifo).expect("remove the FIFO");
        PipedImport { child, writer }
    }

    /// Writes `rest`, closes the pipe and waits for the import to end.
    fn finish(mut self, rest: &str) -> Output {
        self.writer.write_all(rest.as_bytes()).expect("write games");
        drop(self.writer);
        self.child
            .wait_with_output()
            .expect("wait for the importer")
    }
}

/// Spawns `cmd` with its stderr read line by line on a thread.
fn spawn_reading_stderr(mut cmd: Command) -> (Child, mpsc::Receiver<String>) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pgnload");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// Waits until `child` writes a line containing `text` to stderr, or
/// exits; returns the lines read, and `Some(code)` if it exited first.
#[expect(
    clippy::option_option,
    reason = "`None`: still running; `Some(None)`: killed by a signal"
)]
fn until_line_or_exit(
    child: &mut Child,
    lines: &mpsc::Receiver<String>,
    text: &str,
) -> (Vec<String>, Option<Option<i32>>) {
    let mut seen = Vec::new();
    let started = Instant::now();
    loop {
        while let Ok(line) = lines.try_recv() {
            let found = line.contains(text);
            seen.push(line);
            if found {
                return (seen, None);
            }
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            seen.extend(lines.iter());
            return (seen, Some(status.code()));
        }
        assert!(
            started.elapsed() < Duration::from_mins(1),
            "neither {text:?} nor an exit: {seen:?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 26 item 14: `game put` and `game delete` beside incremental
/// imports succeed, waiting if `db explorer enable` (or an import counting
/// its queued positions) holds the import lock; before, a delete issued
/// while `enable` waited for a running import was refused, blaming a bulk
/// load. A bulk load is still refused, by name.
///
/// Long: one scenario, step by step; split, its steps would read out of
/// order.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, step by step; split, its steps would read out of order"
)]
fn single_game_changes_beside_imports_wait_and_only_a_bulk_load_refuses_them() {
    let dir = scratch_dir("pgnload-runs-put-");
    let db = migrated_db("runs_put");
    let sample = std::fs::read_to_string(data("lichess-2025-05-sample.pgn")).expect("sample");
    let games = games_of(&sample);
    let kasparov = one_game_file(dir.path(), "kasparov-deep-blue-1997.pgn");
    let molinari = one_game_file(dir.path(), "molinari-bordais-1979.pgn");

    // An incremental import mid-run holds the shared side of the lock.
    let import_dir = scratch_dir("pgnload-runs-put-fifo-");
    let importer = PipedImport::start(
        &db,
        import_dir.path(),
        &["--mode", "incremental"],
        &games[..100].concat(),
    );
    let put = run({
        let mut c = db.pgnload();
        c.args(["game", "put"]).arg(&kasparov);
        c
    });
    assert_ok(&put, &[0]);
    let put_stdout = String::from_utf8_lossy(&put.stdout);
    assert!(put_stdout.starts_with("stored as game "), "{put_stdout}");
    let id = put_stdout["stored as game ".len()..]
        .split_whitespace()
        .next()
        .expect("an id")
        .to_owned();

    // `db explorer enable` waits for the import, queued for the lock's
    // exclusive side: a delete now waits for it, and is not refused.
    let (mut enable, _enable_lines) = spawn_reading_stderr({
        let mut c = db.pgnload();
        c.args(["db", "explorer", "enable"]);
        c
    });
    wait_until("enable does not wait for the import lock", || {
        db.psql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") == "1"
    });
    let (mut delete, delete_lines) = spawn_reading_stderr({
        let mut c = db.pgnload();
        c.args(["game", "delete", &id]);
        c
    });
    let (seen, exited) =
        until_line_or_exit(&mut delete, &delete_lines, "waiting for the import lock");
    assert_eq!(
        exited, None,
        "the delete ended while only an import and `db explorer enable` held the lock: {seen:?}"
    );
    let out = importer.finish(&games[100..].concat());
    assert_ok(&out, &[0]);
    assert!(enable.wait().expect("wait for enable").success());
    let deleted = delete.wait_with_output().expect("wait for the delete");
    assert_eq!(deleted.status.code(), Some(0), "{seen:?}");
    assert!(
        String::from_utf8_lossy(&deleted.stdout).starts_with(&format!("deleted game {id} ")),
        "{deleted:?}"
    );
    assert_eq!(
        db.psql("SELECT count(*) FROM games"),
        games.len().to_string()
    );

    // A bulk load holds the database: refused at once, naming it.
    let bulk_dir = scratch_dir("pgnload-runs-put-bulk-");
    let renamed = games_of(&renamed_sample(1));
    let bulk = PipedImport::start(
        &db,
        bulk_dir.path(),
        &["--mode", "bulk"],
        &renamed[..100].concat(),
    );
    let load = db.psql("SELECT id FROM import_bulk_loads WHERE state <> 'done'");
    for args in [
        vec![
            "game".to_owned(),
            "put".to_owned(),
            molinari.display().to_string(),
        ],
        vec!["game".to_owned(), "delete".to_owned(), "1".to_owned()],
    ] {
        let out = run({
            let mut c = db.pgnload();
            c.args(&args);
            c
        });
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("bulk load #{load} is running")),
            "{args:?}: {stderr}"
        );
    }
    let out = bulk.finish(&renamed[100..].concat());
    assert_ok(&out, &[0]);
    let out = run({
        let mut c = db.pgnload();
        c.args(["game", "put"]).arg(&molinari);
        c
    });
    assert_ok(&out, &[0]);
}

/// OIDs of the indexes of positions, moves and games: a bulk load's
/// drop and rebuild changes them.
fn index_oids(db: &TestDb) -> String {
    db.psql(
        "SELECT string_agg(indexrelid::text, ',' ORDER BY indexrelid) FROM pg_index
         WHERE indrelid IN ('positions'::regclass, 'moves'::regclass, 'games'::regclass)",
    )
}

/// Issue 26 item 15: inputs that all fail to open (a `.db3` that is no
/// SQLite database, a `.zst` that is no zstd stream) begin no bulk load:
/// no `import_bulk_loads` row, no index dropped and rebuilt. Before, the
/// load began before the input was opened and rebuilt every index.
#[test]
fn inputs_that_fail_to_open_begin_no_bulk_load() {
    let dir = scratch_dir("pgnload-runs-unopened-");
    let db = migrated_db("runs_unopened");
    assert_ok(
        &import(
            &db,
            &["-q", "--mode", "incremental"],
            &[data("kasparov-deep-blue-1997.pgn")],
        ),
        &[0],
    );
    let fake = dir.path().join("fake.db3");
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend(std::iter::repeat_n(0xA5, 8192));
    std::fs::write(&fake, bytes).expect("write");
    let broken = dir.path().join("broken.pgn.zst");
    let mut bytes = vec![0x28, 0xB5, 0x2F, 0xFD];
    bytes.extend(std::iter::repeat_n(0xFF, 8192));
    std::fs::write(&broken, bytes).expect("write");
    let before = index_oids(&db);
    let out = import(&db, &["--mode", "bulk"], &[fake, broken]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("0 imported, 0 skipped, 0 interrupted, 2 failed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("mode:      bulk, but nothing to import: no load begun"),
        "{stderr}"
    );
    assert_eq!(db.psql("SELECT count(*) FROM import_bulk_loads"), "0");
    assert_eq!(index_oids(&db), before, "indexes dropped and rebuilt");
}

/// Issue 26 item 20: `--mode auto` on a database given by URL that holds
/// games imports incrementally, even when the inputs bring more positions
/// than it holds (other users rely on its indexes); `--mode bulk` still
/// bulk loads it, and the embedded cluster keeps the size rule.
#[test]
fn auto_mode_never_bulk_loads_a_shared_database_that_holds_games() {
    let dir = scratch_dir("pgnload-runs-auto-");
    let big = corpus_with_copies(dir.path(), 1);
    let small = [data("kasparov-deep-blue-1997.pgn")];
    let db = fresh_db("runs_auto");
    assert_ok(&import(&db, &["-q", "--mode", "incremental"], &small), &[0]);
    let out = import(&db, &[], &big[..big.len() - 1]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ok(&out, &[0]);
    assert!(stderr.contains("mode:      incremental"), "{stderr}");
    assert_eq!(db.psql("SELECT count(*) FROM import_bulk_loads"), "0");
    let out = import(&db, &["--mode", "bulk"], &big[big.len() - 1..]);
    assert_ok(&out, &[0]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("mode:      bulk (load #"), "{stderr}");

    // The embedded cluster is pgnload's alone: the size rule holds.
    let data_dir = dir.path().join("cluster");
    let embedded = |args: &[&str], files: &[PathBuf]| {
        run({
            let mut c = embedded_pgnload(&data_dir);
            c.arg("import").args(args).args(files);
            c
        })
    };
    assert_ok(&embedded(&["-q", "--mode", "incremental"], &small), &[0]);
    let out = embedded(&[], &big);
    let stopped = run({
        let mut c = embedded_pgnload(&data_dir);
        c.args(["db", "stop"]);
        c
    });
    assert_ok(&out, &[0]);
    assert_ok(&stopped, &[0]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("mode:      bulk (load #"), "{stderr}");
}

/// Issue 26 item 16: against a server that is down, the first SIGTERM ends
/// the wait for it at once, with exit code 3. Before, pgnload said
/// "finishing the batch in flight" and kept retrying until
/// `retry_seconds` ran out (here ten minutes).
#[test]
fn the_first_signal_ends_a_wait_for_a_server_that_is_down() {
    let dir = scratch_dir("pgnload-runs-down-");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let config = dir.path().join("pgnload.toml");
    std::fs::write(&config, "[import]\nretry_seconds = 600\n").expect("write");
    let (mut child, lines) = spawn_reading_stderr({
        let mut c = crate::common::pgnload();
        c.env(
            "DATABASE_URL",
            format!("postgresql://pgnload@127.0.0.1:{port}/pgnload"),
        )
        .arg("--config")
        .arg(&config)
        .arg("import")
        .arg(data("kasparov-deep-blue-1997.pgn"));
        c
    });
    assert_sigterm_ends_the_retry_wait(&mut child, &lines);
}

/// Waits until pgnload says it is waiting to retry, sends SIGTERM, and
/// asserts the wait ended at once: exit 3 with "interrupted while waiting to
/// retry". Fails if it is still running 20 s after the signal (a hang bound,
/// not a timing: the wait it is in lasts ten minutes).
fn assert_sigterm_ends_the_retry_wait(child: &mut Child, lines: &mpsc::Receiver<String>) {
    let (seen, exited) = until_line_or_exit(child, lines, "retrying in");
    assert_eq!(exited, None, "{seen:?}");
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let signalled = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if signalled.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still waiting to retry 20 s after SIGTERM: {seen:?}");
        }
        thread::sleep(Duration::from_millis(50));
    };
    let rest: Vec<String> = lines.iter().collect();
    assert_eq!(status.code(), Some(3), "{seen:?} {rest:?}");
    assert!(
        rest.iter()
            .any(|l| l.contains("interrupted while waiting to retry")),
        "{rest:?}"
    );
}

/// An import of a named pipe into a server of the test's own, stopped
/// under it after its first committed batch: `child` waits to retry, and
/// `writer` still feeds the pipe.
struct StoppedMidRun {
    dir: tempfile::TempDir,
    cluster: pgnload::store::embedded::EmbeddedCluster,
    db: TestDb,
    child: Child,
    lines: mpsc::Receiver<String>,
    writer: std::fs::File,
    /// The Lichess sample's games, the first 50 written.
    games: Vec<String>,
}

impl StoppedMidRun {
    /// Starts `pgnload import --mode incremental --batch-games 5 ARGS
    /// FIFO` (retrying for 600 s), writes 50 games, waits for a committed
    /// batch and stops the server.
    fn start(prefix: &str, args: &[&str]) -> StoppedMidRun {
        let dir = scratch_dir(prefix);
        let cluster = pgnload::store::embedded::EmbeddedCluster::new(dir.path().join("cluster"))
            .expect("cluster");
        cluster.start_persistent().expect("start the cluster");
        let db = TestDb::existing(cluster.connection_url());
        let config = dir.path().join("pgnload.toml");
        std::fs::write(&config, "[import]\nretry_seconds = 600\n").expect("write");
        let fifo = dir.path().join("games.fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        let sample = std::fs::read_to_string(data("lichess-2025-05-sample.pgn")).expect("sample");
        let games = games_of(&sample);
        let (child, lines) = spawn_reading_stderr({
            let mut c = db.pgnload();
            c.arg("--config")
                .arg(&config)
                .args(["import", "--mode", "incremental", "--batch-games", "5"])
                .args(args)
                .arg(&fifo);
            c
        });
        let mut writer = std::fs::OpenOptions::new()
            .write(true)
            .open(&fifo)
            .expect("open the FIFO for writing");
        writer
            .write_all(games[..50].concat().as_bytes())
            .expect("write games");
        wait_until("the importer committed no batch", || {
            db.psql("SELECT count(*) FROM import_files WHERE games_done > 0") == "1"
        });
        cluster.stop().expect("stop the server");
        // Fewer bytes than a pipe holds: written at once, whatever the
        // importer does (it keeps the FIFO open across its retries).
        writer
            .write_all(games[50..70].concat().as_bytes())
            .expect("the FIFO stays open while the importer waits to retry");
        StoppedMidRun {
            dir,
            cluster,
            db,
            child,
            lines,
            writer,
            games,
        }
    }
}

/// Item 16 mid-run: the server stops under an import (by URL, so pgnload
/// cannot restart it); the import waits to retry, and the first SIGTERM
/// ends that wait at once with exit code 3, where it used to wait out
/// `retry_seconds`.
#[test]
fn the_first_signal_ends_a_retry_wait_when_the_server_stops_mid_run() {
    let mut run = StoppedMidRun::start("pgnload-runs-stopped-", &[]);
    assert_sigterm_ends_the_retry_wait(&mut run.child, &run.lines);
}

/// A stream survives a server restart mid-input: the retry reads again,
/// from the bytes pgnload kept, the games no batch had committed, then the
/// stream on, and every game is imported once with counts that add up.
/// Before, the retry opened the FIFO again (its writer got EPIPE) and then
/// skipped the checkpoint's bytes of what came next: games lost at exit 0.
#[test]
fn a_stream_goes_on_from_its_last_commit_after_the_server_restarts() {
    let summary = scratch_dir("pgnload-runs-summary-");
    let summary = summary.path().join("summary.json");
    let summary_arg = summary.to_str().expect("utf-8 temp path");
    let StoppedMidRun {
        dir: _dir,
        cluster,
        db,
        mut child,
        lines,
        mut writer,
        games,
    } = StoppedMidRun::start("pgnload-runs-restarted-", &["--summary-json", summary_arg]);
    let (seen, exited) = until_line_or_exit(&mut child, &lines, "retrying in");
    assert_eq!(exited, None, "{seen:?}");
    cluster.start_persistent().expect("restart the cluster");
    // The rest is more than a pipe holds: written beside the import.
    let rest = games[70..].concat();
    let feeder = thread::spawn(move || {
        writer.write_all(rest.as_bytes())?;
        drop(writer);
        std::io::Result::Ok(())
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if started.elapsed() > Duration::from_mins(3) {
            let _ = child.kill();
            panic!(
                "the import did not end: {:?}",
                lines.try_iter().collect::<Vec<_>>()
            );
        }
        thread::sleep(Duration::from_millis(50));
    };
    feeder
        .join()
        .expect("feeder")
        .expect("the importer read the whole stream");
    let rest: Vec<String> = lines.iter().collect();
    assert_eq!(status.code(), Some(0), "{seen:?} {rest:?}");
    assert_eq!(
        db.psql("SELECT count(*) FROM games"),
        games.len().to_string()
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary")).expect("json");
    let counts = &summary["totals"]["games"];
    assert_eq!(counts["read"], games.len(), "{summary}");
    assert_eq!(counts["imported"], games.len(), "{summary}");
    cluster.stop().expect("stop the cluster");
}

/// A pipe whose reader is gone: every write to it fails with EPIPE.
fn closed_pipe() -> Stdio {
    let (read, write) = nix::unistd::pipe().expect("pipe");
    drop(read);
    Stdio::from(write)
}

/// Issue 26 item 17: stderr full (`2>/dev/full`) or gone (`2>&1 | head
/// -1`) never turns a run into a panic (exit 101): the import exits 0 with
/// its games imported, and a failing `status` exits 2. Before, the first
/// message written to stderr panicked.
#[test]
fn a_full_or_closed_stderr_keeps_the_documented_exit_codes() {
    let db = migrated_db("runs_stderr");
    let sample = data("lichess-2025-05-sample.pgn");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("open /dev/full");
    let out = run({
        let mut c = db.pgnload();
        c.arg("import").arg(&sample).stderr(Stdio::from(full));
        c
    });
    assert_eq!(out.status.code(), Some(0), "import 2>/dev/full");
    assert_eq!(db.psql("SELECT count(*) FROM games"), "438");

    // `import … 2>&1 | head -1`, the reader gone at once.
    let dir = scratch_dir("pgnload-runs-stderr-");
    let renamed = dir.path().join("renamed.pgn");
    std::fs::write(&renamed, renamed_sample(2)).expect("write");
    let out = run({
        let mut c = db.pgnload();
        c.arg("import")
            .arg(&renamed)
            .stdout(closed_pipe())
            .stderr(closed_pipe());
        c
    });
    assert_eq!(out.status.code(), Some(0), "import with a closed pipe");
    assert_eq!(db.psql("SELECT count(*) FROM games"), "876");

    // `status 2>&1 | head -1`: its table lost, its error too; the codes
    // stay 0 and 2.
    let status = |url: &str| {
        let out = run({
            let mut c = crate::common::pgnload();
            c.env("DATABASE_URL", url)
                .arg("status")
                .stdout(closed_pipe())
                .stderr(closed_pipe());
            c
        });
        out.status.code()
    };
    assert_eq!(status(&db.url), Some(0));
    let missing = db.url.replacen(
        &format!("postgresql:///{}?", db.psql("SELECT current_database()")),
        "postgresql:///no_such_database?",
        1,
    );
    assert_ne!(missing, db.url);
    assert_eq!(status(&missing), Some(2));
}

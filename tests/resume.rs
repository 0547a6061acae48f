//! Nothing lost, nothing duplicated: crashes, database faults, hostile input.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::{
    common::{
        Lcg, TestDb, assert_rejects_kept, children_peak_rss_kib, data, data_pgns, fresh_db,
        hostile_corpus, import_streamed, migrated_db, run,
    },
    import::content_dump,
};

/// A multi-file corpus: the shipped files, plus `copies` more copies of the
/// Lichess sample with every game id rotated (new games), zstd-compressed.
pub fn corpus_with_copies(dir: &Path, copies: usize) -> Vec<PathBuf> {
    let mut files = data_pgns();
    for copy in 1..=copies {
        let zst = dir.join(format!("renamed-{copy}.pgn.zst"));
        std::fs::write(
            &zst,
            zstd::encode_all(renamed_sample(copy).as_bytes(), 3).expect("zstd"),
        )
        .expect("write");
        files.push(zst);
    }
    files
}

/// The Lichess sample with every game id rotated left by `copy` places: new
/// games of the same size (copy 0 is the sample itself).
pub fn renamed_sample(copy: usize) -> String {
    let sample = std::fs::read_to_string(data("lichess-2025-05-sample.pgn")).expect("sample");
    sample
        .split("https://lichess.org/")
        .enumerate()
        .map(|(i, part)| {
            if i == 0 || part.len() < 8 {
                part.to_owned()
            } else {
                let mut id: Vec<char> = part[..8].chars().collect();
                id.rotate_left(copy);
                let id: String = id.into_iter().collect();
                format!("https://lichess.org/{id}{}", &part[8..])
            }
        })
        .collect()
}

/// The shipped files plus one renamed, compressed copy of the sample.
fn multi_file_corpus(dir: &Path) -> Vec<PathBuf> {
    corpus_with_copies(dir, 1)
}

fn import_cmd(db: &TestDb, files: &[PathBuf]) -> Command {
    let mut cmd = db.pgnload();
    cmd.args(["-q", "import", "--batch-games", "10"])
        .args(files)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn killed_at_random_moments_then_rerun_equals_a_clean_import() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Long enough that ten kills always land before it could finish.
    let files = corpus_with_copies(dir.path(), 4);

    let clean = fresh_db("crash_ref");
    let out = run(import_cmd(&clean, &files));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = content_dump(&clean);

    let db = fresh_db("crash");
    let mut rng = Lcg(20_261_122);
    let mut kills = 0;
    let mut runs = 0;
    loop {
        runs += 1;
        assert!(runs < 200, "the import never finished");
        let mut child = import_cmd(&db, &files).spawn().expect("spawn pgnload");
        // Early kills land in start-up and parsing, later ones in COPY and
        // between batches; after 10 kills let it finish.
        let delay = Duration::from_millis(20 + rng.below(300));
        let started = Instant::now();
        let finished = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break Some(status);
            }
            if kills < 10 && started.elapsed() >= delay {
                break None;
            }
            thread::sleep(Duration::from_millis(5));
        };
        if let Some(status) = finished {
            let out = child.wait_with_output().expect("output");
            assert_eq!(
                status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            break;
        }
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
        kill(pid, Signal::SIGKILL).expect("SIGKILL");
        let _ = child.wait();
        kills += 1;
    }
    assert!(
        kills >= 10,
        "only {kills} kills landed before the import finished"
    );
    assert_eq!(content_dump(&db), expected);
    assert_eq!(
        db.psql("SELECT count(*) FROM import_files WHERE state <> 'done'"),
        "0"
    );
}

/// Terminates every pgnload backend of `db` from another connection.
fn terminate_backends(db: &TestDb) -> u64 {
    db.psql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'pgnload'
           AND pid <> pg_backend_pid()",
    )
    .parse()
    .expect("count")
}

#[test]
fn terminated_backends_are_retried_and_the_result_equals_a_clean_import() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = multi_file_corpus(dir.path());
    let clean = fresh_db("terminate_ref");
    assert_eq!(run(import_cmd(&clean, &files)).status.code(), Some(0));

    let db = fresh_db("terminate");
    let child = import_cmd(&db, &files).spawn().expect("spawn");
    // Three terminations apart, then every session terminated as it
    // starts for a while: a session dropping while the importer reconnects
    // and re-takes its lock must be retried too (a relock on a new session
    // that dropped once ended the run).
    let mut terminated = 0;
    for _ in 0..3 {
        thread::sleep(Duration::from_millis(300));
        terminated += terminate_backends(&db);
    }
    thread::sleep(Duration::from_millis(300));
    terminated += terminate_backends(&db);
    db.psql(
        "DO $$ BEGIN
             FOR i IN 1..300 LOOP
                 PERFORM pg_stat_clear_snapshot();
                 PERFORM pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = current_database() AND application_name = 'pgnload'
                   AND pid <> pg_backend_pid();
                 PERFORM pg_sleep(0.005);
             END LOOP;
         END $$",
    );
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(terminated > 0, "no backend was terminated");
    assert!(stderr.contains("retrying"), "{stderr}");
    assert_eq!(content_dump(&db), content_dump(&clean));
}

#[test]
fn a_server_restart_mid_import_is_survived() {
    let dir = crate::common::scratch_dir("pgnload-restart");
    let files = multi_file_corpus(dir.path());
    let cluster = pgnload::store::embedded::EmbeddedCluster::new(dir.path().join("cluster"))
        .expect("cluster");
    cluster.start_persistent().expect("start");
    let db = TestDb::existing(cluster.connection_url());
    let child = import_cmd(&db, &files).spawn().expect("spawn");
    thread::sleep(Duration::from_millis(400));
    let pid = match cluster.status().expect("status") {
        pgnload::store::embedded::ClusterStatus::Running { pid } => pid,
        other => panic!("cluster not running: {other:?}"),
    };
    // Fast shutdown of the postmaster, as a service restart would do.
    kill(
        Pid::from_raw(i32::try_from(pid).expect("pid")),
        Signal::SIGINT,
    )
    .expect("SIGINT");
    let down = Instant::now();
    while !matches!(
        cluster.status().expect("status"),
        pgnload::store::embedded::ClusterStatus::Stopped
    ) {
        assert!(
            down.elapsed() < Duration::from_secs(30),
            "server did not stop"
        );
        thread::sleep(Duration::from_millis(50));
    }
    thread::sleep(Duration::from_millis(500));
    cluster.start_persistent().expect("restart");
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let after = content_dump(&db);
    cluster.stop().expect("stop");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("retrying"), "{stderr}");
    let clean = fresh_db("restart_ref");
    assert_eq!(run(import_cmd(&clean, &files)).status.code(), Some(0));
    assert_eq!(after, content_dump(&clean));
}

const GOOD: &str = "[Event \"good\"]\n[Site \"https://lichess.org/goodgam1\"]\n[Result \"1-0\"]\n\n1. e4 e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# 1-0\n\n";

#[test]
fn hostile_corpus_every_good_game_imported_every_bad_one_kept_with_its_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let parts: Vec<(Vec<u8>, Option<&str>)> = vec![
        (GOOD.as_bytes().to_vec(), None),
        (b"[Event \"illegal\"]\n\n1. e4 e5 2. Ke3 *\n\n".to_vec(), Some("illegal move")),
        (b"[Event \"garbage\"]\n\n1. e4 @@@@!!xx e5 *\n\n".to_vec(), Some("garbage")),
        (b"[Event \"fen?\"]\n[FEN \"?\"]\n\n1. e4 *\n\n".to_vec(), Some("bad FEN")),
        (
            b"[Event \"impossible\"]\n[FEN \"8/8/8/8/8/8/8/8 w - - 0 1\"]\n\n*\n\n".to_vec(),
            Some("bad FEN"),
        ),
        (GOOD.as_bytes().to_vec(), None),
        (
            b"[Event \"latin1 \xe9v\xe9nement\"]\n[White \"J\xf6rg\"]\n\n1. d4 { bad utf-8 \xff\xfe } d5 1/2-1/2\n\n".to_vec(),
            None,
        ),
        (
            b"[Event \"960 bad castling\"]\n[Variant \"Chess960\"]\n[FEN \"bbqnnrkr/pppppppp/8/8/8/8/PPPPPPPP/BBQNNRK1 w KQkq - 0 1\"]\n\n1. g3 g6 2. Ne3 Ne6 *\n\n".to_vec(),
            None,
        ),
        (
            b"[Event \"racing kings\"]\n[Variant \"Racing Kings\"]\n[FEN \"rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1\"]\n\n1. Kh3 *\n\n".to_vec(),
            None,
        ),
        (b"[Event \"truncated\"]\n\n1. e4 e5 2. Nf3 Nc".to_vec(), Some("unterminated")),
    ];
    let (pgn, expected_rejects) = hostile_corpus(&parts);
    let file = dir.path().join("hostile.pgn");
    std::fs::write(&file, &pgn).expect("write");
    let rejects_file = dir.path().join("rejects.pgn");

    let db = fresh_db("hostile");
    let out = run({
        let mut c = db.pgnload();
        c.arg("import")
            .arg("--rejects")
            .arg(&rejects_file)
            .arg(&file);
        c
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("10 read = 4 imported + 1 already present + 5 rejected"),
        "{stderr}"
    );
    assert_rejects_kept(&db, &expected_rejects);
    let kept = std::fs::read(&rejects_file).expect("rejects file");
    for reject in &expected_rejects {
        let needle = String::from_utf8_lossy(&reject.bytes).trim_end().to_owned();
        assert!(
            String::from_utf8_lossy(&kept).contains(&needle),
            "game {} missing from the rejects file",
            reject.number
        );
    }
    assert_eq!(
        db.psql("SELECT string_agg(w.username, ',') FROM games g JOIN players w ON w.id = g.white_player_id"),
        "Jörg"
    );
    // The rejects file parses as PGN again: every game in it is read (and rejected again).
    let again = run({
        let mut c = crate::common::pgnload();
        c.arg("positions").arg(&rejects_file);
        c
    });
    let again_err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again_err.matches("REJECT").count(), 5, "{again_err}");
}

/// Writes 1.1 GB of hostile PGN to `out`: a good game, a 100 MB comment, a
/// 100,000-ply game, another good game, then a 1 GB line without a newline.
fn write_oversized_games(out: &mut impl Write) -> std::io::Result<()> {
    out.write_all(GOOD.as_bytes())?;
    out.write_all(b"[Event \"comment\"]\n\n1. e4 {")?;
    let block = vec![b'x'; 1 << 20];
    for _ in 0..100 {
        out.write_all(&block)?;
    }
    out.write_all(b"} e5 *\n\n")?;
    out.write_all(b"[Event \"long\"]\n\n")?;
    for _ in 0..25_000 {
        out.write_all(b"Nf3 Nf6 Ng1 Ng8 ")?;
    }
    out.write_all(b"*\n\n")?;
    out.write_all(GOOD.replace("goodgam1", "goodgam2").as_bytes())?;
    out.write_all(b"[Event \"line\"]\n\n1. e4 ")?;
    let block = vec![b'a'; 1 << 20];
    for _ in 0..1024 {
        out.write_all(&block)?;
    }
    Ok(())
}

#[test]
fn oversized_inputs_are_rejected_in_bounded_memory() {
    let db = fresh_db("oversized");
    let started = Instant::now();
    // Streamed through stdin rather than written to a file: 1.1 GB of
    // scratch disk is more than a CI machine may have free.
    let (result, written) = import_streamed(&db, write_oversized_games);
    written.expect("pgnload read the whole input");
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("5 read = 2 imported + 0 already present + 3 rejected"),
        "{stderr}"
    );
    let reasons =
        db.psql("SELECT string_agg(reason, ' | ' ORDER BY game_number) FROM import_rejects");
    assert!(reasons.contains("too large"), "{reasons}");
    assert!(reasons.contains("too long"), "{reasons}");
    let max_rss_kib = children_peak_rss_kib();
    assert!(
        max_rss_kib < 512 * 1024,
        "a child used {max_rss_kib} KiB for 1.1 GB of hostile input"
    );
    assert!(
        started.elapsed() < Duration::from_mins(2),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn a_zstd_frame_asking_for_a_huge_window_is_refused_clearly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("window.pgn.zst");
    let mut encoder =
        zstd::stream::Encoder::new(std::fs::File::create(&file).expect("create"), 3).expect("zstd");
    encoder.window_log(31).expect("window log");
    encoder.long_distance_matching(true).expect("ldm");
    encoder.write_all(GOOD.as_bytes()).expect("write");
    encoder.finish().expect("finish");
    let db = fresh_db("window");
    let out = run({
        let mut c = db.pgnload();
        c.arg("import").arg(&file);
        c
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.to_lowercase().contains("window") || stderr.to_lowercase().contains("memory"),
        "{stderr}"
    );
    assert_eq!(
        db.psql("SELECT state, last_error IS NOT NULL FROM import_files"),
        "failed|t"
    );
}

#[test]
fn a_truncated_compressed_stream_keeps_every_game_before_the_damage() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sample = std::fs::read(data("lichess-2025-05-sample.pgn")).expect("sample");
    let compressed = zstd::encode_all(&sample[..], 3).expect("zstd");
    let file = dir.path().join("cut.pgn.zst");
    std::fs::write(&file, &compressed[..compressed.len() / 2]).expect("write");
    let db = fresh_db("truncated");
    let out = run({
        let mut c = db.pgnload();
        c.args(["import", "--batch-games", "20"]).arg(&file);
        c
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("broken at byte"), "{stderr}");
    let games: u64 = db
        .psql("SELECT count(*) FROM games")
        .parse()
        .expect("count");
    assert!(games > 150, "only {games} games kept before the damage");
    let status = db.psql("SELECT state, games_done FROM import_files");
    assert!(status.starts_with("failed|"), "{status}");
}

#[test]
fn sigterm_finishes_the_batch_in_flight_exits_3_and_the_rerun_completes() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Long enough that the signal lands before the last input is done.
    let files = corpus_with_copies(dir.path(), 4);
    let db = fresh_db("sigterm");
    let child = import_cmd(&db, &files).spawn().expect("spawn");
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    // Wait until an input is part-way through (batches of it committed,
    // more to come), then ask it to stop.
    let started = Instant::now();
    while db
        .psql("SELECT count(*) FROM pg_tables WHERE tablename = 'import_files'")
        .as_str()
        != "1"
        || db.psql("SELECT count(*) FROM import_files WHERE state = 'running' AND games_done >= 10")
            == "0"
    {
        assert!(started.elapsed() < Duration::from_mins(1), "no progress");
        thread::sleep(Duration::from_millis(20));
    }
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(stderr.contains("import summary"), "{stderr}");
    assert_eq!(
        db.psql("SELECT count(*) FROM import_files WHERE state = 'interrupted'"),
        "1"
    );
    // The checkpoint covers exactly the committed games.
    assert_eq!(
        db.psql(
            "SELECT bool_and(f.games_imported + f.games_present + f.games_rejected = f.games_done)
             FROM import_files f"
        ),
        "t"
    );
    let rerun = run(import_cmd(&db, &files));
    assert_eq!(
        rerun.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    let clean = fresh_db("sigterm_ref");
    assert_eq!(run(import_cmd(&clean, &files)).status.code(), Some(0));
    assert_eq!(content_dump(&db), content_dump(&clean));
}

#[test]
fn a_changed_file_is_not_resumed_without_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("games.pgn");
    let sample = std::fs::read(data("lichess-2025-05-sample.pgn")).expect("sample");
    std::fs::write(&file, &sample).expect("write");
    let db = fresh_db("changed");
    let first = run({
        let mut c = db.pgnload();
        c.args(["import", "--batch-games", "50", "--max-rejects", "0"])
            .arg(&file);
        c
    });
    assert_eq!(first.status.code(), Some(0));
    // Pretend the first import was interrupted half-way, then change the
    // file inside that part (a file that only grew is resumed instead).
    db.psql("UPDATE import_files SET state = 'interrupted', games_done = 100, bytes_done = 1000");
    let mut changed = GOOD.as_bytes().to_vec();
    changed.extend_from_slice(&sample);
    std::fs::write(&file, &changed).expect("write");
    let refused = run({
        let mut c = db.pgnload();
        c.arg("import").arg(&file);
        c
    });
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("changed inside the part its interrupted import read"),
        "{stderr}"
    );
    assert!(stderr.contains("--restart"), "{stderr}");
    let restarted = run({
        let mut c = db.pgnload();
        c.args(["import", "--restart"]).arg(&file);
        c
    });
    let stderr = String::from_utf8_lossy(&restarted.stderr);
    assert_eq!(restarted.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("439 read = 1 imported + 438 already present + 0 rejected"),
        "{stderr}"
    );
}

#[test]
fn max_rejects_stops_cleanly_with_exit_code_4() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("bad.pgn");
    let bad = "[Event \"illegal\"]\n\n1. e4 e5 2. Ke3 *\n\n".repeat(30);
    std::fs::write(&file, format!("{GOOD}{bad}")).expect("write");
    let db = fresh_db("maxrejects");
    let out = run({
        let mut c = db.pgnload();
        c.args(["import", "--batch-games", "5", "--max-rejects", "10"])
            .arg(&file);
        c
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    let rejected: u64 = db
        .psql("SELECT count(*) FROM import_rejects")
        .parse()
        .expect("count");
    assert!((11..31).contains(&rejected), "{rejected} rejects kept");
    assert_eq!(db.psql("SELECT state FROM import_files"), "interrupted");
}

#[test]
fn status_reports_every_input_as_json() {
    let db = fresh_db("status");
    let out = run({
        let mut c = db.pgnload();
        c.args(["import", "-q"])
            .arg(data("molinari-bordais-1979.pgn"));
        c
    });
    assert_eq!(out.status.code(), Some(0));
    let status = run({
        let mut c = db.pgnload();
        c.args(["status", "--json"]);
        c
    });
    assert_eq!(status.status.code(), Some(0));
    let json: serde_json::Value =
        serde_json::from_slice(&status.stdout).expect("status --json is JSON");
    let files = json.as_array().expect("an array");
    assert_eq!(files.len(), 1);
    assert_eq!(files[0]["state"], "done");
    assert_eq!(files[0]["games_done"], 1);
    assert_eq!(files[0]["bytes_done"], 241);
    assert!(
        files[0]["fingerprint"]
            .as_str()
            .is_some_and(|f| f.starts_with("xxh3-128:241:"))
    );
}

#[test]
fn a_second_importer_of_the_same_file_waits_or_skips_with_no_wait() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = multi_file_corpus(dir.path());
    let zst = files.last().expect("corpus").clone();
    let db = migrated_db("lock");
    // Incremental imports share the database and lock per input file; a
    // bulk load locks the whole database. Either way --no-wait skips.
    for (mode, busy) in [
        ("incremental", "another pgnload is importing it"),
        ("bulk", "a bulk load holds the database"),
    ] {
        db.psql("TRUNCATE games, moves, positions, import_files CASCADE");
        let mut first = import_cmd(&db, std::slice::from_ref(&zst));
        let first = first.args(["--mode", mode]).spawn().expect("spawn");
        let started = Instant::now();
        while db.psql("SELECT count(*) FROM import_files WHERE state = 'running'") != "1" {
            assert!(
                started.elapsed() < Duration::from_mins(1),
                "first never started"
            );
            thread::sleep(Duration::from_millis(10));
        }
        let skipped = run({
            let mut c = db.pgnload();
            c.args(["import", "--no-wait", "--mode", "incremental"])
                .arg(&zst);
            c
        });
        let stderr = String::from_utf8_lossy(&skipped.stderr);
        let first = first.wait_with_output().expect("wait");
        assert_eq!(first.status.code(), Some(0));
        assert_eq!(skipped.status.code(), Some(0), "{stderr}");
        assert!(
            stderr.contains(busy) || stderr.contains("already imported"),
            "{mode}: {stderr}"
        );
        assert_eq!(db.psql("SELECT count(*) FROM games"), "438");
    }
    assert_eq!(
        db.psql("SELECT count(*) FROM import_runs WHERE finished_at IS NULL"),
        "0"
    );
}

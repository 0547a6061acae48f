//! Every input and every game accounted for, in every record and every
//! exit code: `--restart`s and kills, the summary's inputs, an exact
//! `--max-rejects`, and inputs that are not PGN at all (issue 26, items 8,
//! 13, 18 and 19).

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    thread,
    time::Duration,
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::common::{
    Lcg, TestDb, data, data_pgns, fresh_db, migrated_db, run, scratch_dir, stderr,
};

/// A game every run rejects (an illegal king move).
const BAD: &str = "[Event \"illegal\"]\n\n1. e4 e5 2. Ke3 *\n\n";

/// `pgnload -q import ARGS FILES` on `db`.
fn import(db: &TestDb, args: &[&str], files: &[&Path]) -> Output {
    run(import_cmd(db, args, files))
}

fn import_cmd(db: &TestDb, args: &[&str], files: &[&Path]) -> Command {
    let mut c = db.pgnload();
    c.args(["-q", "import"]).args(args).args(files);
    c
}

/// Asserts how a run ended, showing its stderr otherwise.
fn assert_code(out: &Output, code: i32, context: &str) {
    assert_eq!(out.status.code(), Some(code), "{context}:\n{}", stderr(out));
}

/// `pgnload status --json`, parsed.
fn status_json(db: &TestDb) -> Vec<serde_json::Value> {
    let out = run({
        let mut c = db.pgnload();
        c.args(["status", "--json"]);
        c
    });
    assert_code(&out, 0, "status --json");
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status prints JSON");
    all.as_array().expect("an array").clone()
}

/// Asserts that every input's record adds up: `games_done = imported +
/// present + rejected + filtered`, the rejects stored are the rejects
/// counted, and `status --json` says the same.
fn assert_records_add_up(db: &TestDb, context: &str) {
    let wrong = db.psql(
        "SELECT f.id, f.state, f.games_done, f.games_imported, f.games_present,
                f.games_rejected, f.games_filtered,
                (SELECT count(*) FROM import_rejects r WHERE r.file_id = f.id)
         FROM import_files f
         WHERE f.games_done <> f.games_imported + f.games_present + f.games_rejected
                               + f.games_filtered
            OR f.games_rejected <> (SELECT count(*) FROM import_rejects r WHERE r.file_id = f.id)",
    );
    assert_eq!(wrong, "", "{context}: records that do not add up");
    for input in status_json(db) {
        let n = |key: &str| {
            input[key]
                .as_i64()
                .unwrap_or_else(|| panic!("{key} in {input}"))
        };
        assert_eq!(
            n("games_done"),
            n("games_imported") + n("games_present") + n("rejects") + n("games_filtered"),
            "{context}: status --json does not add up: {input}"
        );
    }
}

/// Starts `cmd` and kills it (SIGKILL) once the database records its input
/// as running with `games` games done; `false` if it ended before.
fn kill_part_way(db: &TestDb, mut cmd: Command, games: u64) -> bool {
    // Only this run's writes count: a record an earlier killed run left
    // running was written before.
    let started = db.psql("SELECT now()");
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn pgnload");
    loop {
        if child.try_wait().expect("wait").is_some() {
            return false;
        }
        let done = db.psql(&format!(
            "SELECT coalesce(max(games_done), 0) FROM import_files
             WHERE state = 'running' AND updated_at > '{started}'"
        ));
        if done.parse::<u64>().expect("a count") >= games {
            let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
            kill(pid, Signal::SIGKILL).expect("SIGKILL");
            child.wait().expect("reap");
            return true;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Like [`kill_part_way`], started again until a kill lands (a run that
/// ends first leaves the input done, and the next `--restart` reads it
/// again).
fn kill_a_restart_part_way(db: &TestDb, file: &Path) {
    for _ in 0..10 {
        let cmd = import_cmd(db, &["--batch-games", "5", "--restart"], &[file]);
        if kill_part_way(db, cmd, 100) {
            return;
        }
    }
    panic!("ten runs of 440 games in batches of 5 each ended before 100 games were done");
}

/// Item 8: after `--restart`s and kills of the same input with rejects,
/// every record and `status --json` add up, and the rejects stored are
/// the rejects counted (they were counted again at each restart: 3,000
/// done = 3,000 imported + 6,000 present, 2 rejects stored and 6 counted).
#[test]
fn restarts_and_kills_leave_every_record_adding_up() {
    let dir = scratch_dir("pgnload-acct-restart-");
    let file = dir.path().join("with-rejects.pgn");
    let sample = std::fs::read_to_string(data("lichess-2025-05-sample.pgn")).expect("sample");
    std::fs::write(&file, format!("{BAD}{sample}{BAD}")).expect("write");
    let db = fresh_db("acct_restart");
    let batches = ["--batch-games", "5"];

    let first = import(&db, &batches, &[&file]);
    assert_code(&first, 1, "first import");
    assert_records_add_up(&db, "first import");

    kill_a_restart_part_way(&db, &file);
    assert_records_add_up(&db, "a --restart killed part-way");

    let restarted = import(&db, &["--batch-games", "5", "--restart"], &[&file]);
    assert_code(&restarted, 1, "--restart after a killed --restart");
    assert!(
        stderr(&restarted)
            .contains("440 read = 0 imported + 438 already present + 2 rejected + 0 filtered"),
        "{}",
        stderr(&restarted)
    );
    assert_records_add_up(&db, "--restart after a killed --restart");

    // A killed --restart resumed without one.
    kill_a_restart_part_way(&db, &file);
    assert_records_add_up(&db, "a second --restart killed part-way");
    let resumed = import(&db, &batches, &[&file]);
    assert_code(&resumed, 1, "resuming the killed --restart");
    assert_records_add_up(&db, "resuming the killed --restart");

    let again = import(&db, &["--restart"], &[&file]);
    assert_code(&again, 1, "a last --restart");
    assert_records_add_up(&db, "a last --restart");
    assert_eq!(
        db.psql(
            "SELECT state, games_done, games_imported, games_present, games_rejected
             FROM import_files"
        ),
        "done|440|0|438|2"
    );
}

/// Item 13: a run stopped by a signal counts the input it stopped in as
/// interrupted and the one after it as not started (the summary said "1
/// imported, 0 skipped, 1 interrupted, 0 failed" for 3 inputs).
#[test]
fn an_interrupted_run_counts_every_input_once() {
    let dir = scratch_dir("pgnload-acct-inputs-");
    let fifo = dir.path().join("games.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let db = migrated_db("acct_inputs_signal");
    let first = data("molinari-bordais-1979.pgn");
    let last = data("kasparov-deep-blue-1997.pgn");
    let mut child = import_cmd(&db, &[], &[&first, &fifo, &last])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pgnload");
    // The FIFO, which has no writer, is registered and waited for.
    while db.psql("SELECT count(*) FROM import_files WHERE fingerprint LIKE 'stream:%'") != "1" {
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the import ended before reading the FIFO"
        );
        thread::sleep(Duration::from_millis(20));
    }
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let out = child.wait_with_output().expect("wait");
    assert_code(&out, 3, "interrupted while waiting for the FIFO");
    assert!(
        stderr(&out).contains("1 imported, 0 skipped, 1 interrupted, 0 failed, 1 not started"),
        "{}",
        stderr(&out)
    );
}

/// Item 13: a failure that stops the run counts the input it happened in
/// as failed and the ones after it as not started (the summary said "1
/// imported, 0 skipped, 0 interrupted, 0 failed" for 3 inputs).
#[test]
fn a_run_stopped_by_a_failure_counts_every_input_once() {
    let dir = scratch_dir("pgnload-acct-inputs-");
    let db = migrated_db("acct_inputs_failure");
    // The database refuses to register the second input: a failure of the
    // bookkeeping connection, which stops the run.
    db.psql(
        "CREATE FUNCTION refuse_second() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.path LIKE '%/second.pgn' THEN
                 RAISE EXCEPTION 'the test refuses this input';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_second BEFORE INSERT ON import_files
             FOR EACH ROW EXECUTE FUNCTION refuse_second()",
    );
    let files: Vec<PathBuf> = ["first.pgn", "second.pgn", "third.pgn"]
        .iter()
        .zip([
            "molinari-bordais-1979.pgn",
            "kasparov-deep-blue-1997.pgn",
            "uci-moves.pgn",
        ])
        .map(|(name, source)| {
            let path = dir.path().join(name);
            std::fs::copy(data(source), &path).expect("copy");
            path
        })
        .collect();
    let files: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let config = dir.path().join("pgnload.toml");
    std::fs::write(&config, "[import]\nretry_seconds = 0\n").expect("write config");
    let out = run({
        let mut c = db.pgnload();
        c.arg("--config").arg(&config);
        c.args(["-q", "import"]).args(&files);
        c
    });
    assert_code(&out, 2, "a run stopped by a failure");
    let text = stderr(&out);
    assert!(text.contains("the test refuses this input"), "{text}");
    assert!(
        text.contains("1 imported, 0 skipped, 0 interrupted, 1 failed, 1 not started"),
        "{text}"
    );
}

/// Item 18: `--max-rejects N` stops the run at the reject past N, inside
/// a batch (133 rejects went in with `--max-rejects 10`, checked per batch
/// of 2,000), and the rerun that finishes the input exits 1 for the rejects
/// the first run stored (it exited 0).
#[test]
fn max_rejects_is_exact_and_earlier_rejects_stay_in_the_exit_code() {
    let dir = scratch_dir("pgnload-acct-maxrej-");
    let sample = std::fs::read_to_string(data("lichess-2025-05-sample.pgn")).expect("sample");
    let file = dir.path().join("rejects-first.pgn");
    std::fs::write(&file, format!("{}{sample}", BAD.repeat(15))).expect("write");

    // One batch holds every game: the cut is inside it.
    let db = fresh_db("acct_maxrej");
    let stopped = import(&db, &["--max-rejects", "10"], &[&file]);
    assert_code(&stopped, 4, "--max-rejects 10");
    assert_eq!(
        db.psql(
            "SELECT state, games_done, games_rejected, (SELECT count(*) FROM import_rejects)
             FROM import_files"
        ),
        "interrupted|11|11|11"
    );
    assert!(
        stderr(&stopped).contains("11 read = 0 imported + 0 already present + 11 rejected"),
        "{}",
        stderr(&stopped)
    );
    // The rerun rejects the other 4 itself, then finishes.
    let rerun = import(&db, &["--max-rejects", "10"], &[&file]);
    assert_code(&rerun, 1, "the rerun");
    assert!(
        stderr(&rerun).contains("442 read = 438 imported + 0 already present + 4 rejected"),
        "{}",
        stderr(&rerun)
    );
    assert_records_add_up(&db, "after the rerun");

    // Batches of 3, the first still in flight when the second is cut.
    let db = fresh_db("acct_maxrej_batches");
    let stopped = import(&db, &["--max-rejects", "4", "--batch-games", "3"], &[&file]);
    assert_code(&stopped, 4, "--max-rejects 4 in batches of 3");
    assert_eq!(
        db.psql("SELECT games_done, (SELECT count(*) FROM import_rejects) FROM import_files"),
        "5|5"
    );

    // A rerun that reads no reject of its own still exits 1, and says why.
    let file = dir.path().join("eleven-rejects-first.pgn");
    std::fs::write(&file, format!("{}{sample}", BAD.repeat(11))).expect("write");
    let db = fresh_db("acct_maxrej_rerun");
    assert_code(
        &import(&db, &["--max-rejects", "10"], &[&file]),
        4,
        "--max-rejects 10 with 11 rejects first",
    );
    let rerun = import(&db, &[], &[&file]);
    assert_code(&rerun, 1, "a rerun finishing an input with stored rejects");
    let text = stderr(&rerun);
    assert!(
        text.contains("438 read = 438 imported + 0 already present + 0 rejected"),
        "{text}"
    );
    assert!(
        text.contains("11 of its games were rejected by earlier runs"),
        "{text}"
    );
    // Finished, it is skipped: that run's code said it all.
    assert_code(&import(&db, &[], &[&file]), 0, "the input imported already");
}

/// Random bytes, seeded.
fn random_bytes(len: usize) -> Vec<u8> {
    let mut rng = Lcg(26_019);
    (0..len)
        .map(|_| u8::try_from(rng.below(256)).expect("below 256"))
        .collect()
}

/// Item 19: a file that is not PGN (random bytes, a text file) fails as
/// "not a PGN file" (exit 2) with nothing stored, its record failed, and is
/// imported once it is replaced by a PGN file (it was recorded as done with
/// thousands of "rejected games", exit 1).
#[test]
fn a_file_that_is_not_pgn_fails_and_is_imported_once_replaced() {
    let dir = scratch_dir("pgnload-acct-notpgn-");
    let text = "pgnload notes\n\nThis file is plain text: a README, a log, a list of things \
                to do. It holds no tag pair and no move; it is read as games whose movetext \
                is garbage.\n\n- one item\n- another item\n";
    let inputs = [
        ("random.pgn", random_bytes(300_000)),
        ("notes.pgn", text.repeat(50).into_bytes()),
    ];
    let real = std::fs::read(data("kasparov-deep-blue-1997.pgn")).expect("test data");
    for (name, bytes) in inputs {
        let db = migrated_db("acct_notpgn");
        let file = dir.path().join(name);
        std::fs::write(&file, &bytes).expect("write");
        let out = import(&db, &[], &[&file]);
        assert_code(&out, 2, name);
        assert!(stderr(&out).contains("not a PGN file"), "{}", stderr(&out));
        assert_eq!(
            db.psql(
                "SELECT state, games_done, games_rejected, (SELECT count(*) FROM import_rejects),
                        last_error LIKE '%not a PGN file%'
                 FROM import_files"
            ),
            "failed|0|0|0|t",
            "{name}"
        );
        let status = status_json(&db);
        assert_eq!(status[0]["state"], "failed", "{name}: {status:?}");
        // Run again unchanged, it fails again (a failed input is retried).
        assert_code(&import(&db, &[], &[&file]), 2, name);

        std::fs::write(&file, &real).expect("replace");
        let replaced = import(&db, &[], &[&file]);
        assert_code(&replaced, 0, &format!("{name} replaced by a PGN file"));
        assert!(
            stderr(&replaced).contains("6 read = 6 imported"),
            "{}",
            stderr(&replaced)
        );
        assert_eq!(db.psql("SELECT count(*) FROM games"), "6");
        assert_records_add_up(&db, name);
    }
}

/// Item 19: what is PGN stays PGN: every file of `tests/data`, an empty
/// file (a clean import of nothing), a file of comments only, a file of
/// bad games only, movetext without tags.
#[test]
fn edge_cases_of_pgn_are_not_refused_as_not_pgn() {
    let dir = scratch_dir("pgnload-acct-edges-");
    let db = fresh_db("acct_edges");
    let files = data_pgns();
    let files: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let out = import(&db, &[], &files);
    assert!(!stderr(&out).contains("not a PGN file"), "{}", stderr(&out));
    assert_code(&out, 0, "tests/data");

    let cases: [(&str, &str, i32); 5] = [
        ("empty.pgn", "", 0),
        ("blank.pgn", "\u{feff}\n\n  \n", 0),
        (
            "comments.pgn",
            "{ a file of comments only }\n\n{ and another }\n",
            1,
        ),
        ("bad-games.pgn", &BAD.repeat(3), 1),
        ("movetext.pgn", "1. e4 e5 2. Nf3 Nc6 1-0\n\n1. d4 @@ *\n", 1),
    ];
    for (name, text, code) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, text).expect("write");
        let db = fresh_db("acct_edge");
        let out = import(&db, &[], &[&file]);
        assert!(
            !stderr(&out).contains("not a PGN file"),
            "{name}: {}",
            stderr(&out)
        );
        assert_code(&out, code, name);
        assert_eq!(db.psql("SELECT state FROM import_files"), "done", "{name}");
    }
}

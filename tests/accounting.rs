//! Every input and every game accounted for, in every record and every
//! exit code: `--restart`s and kills, the summary's inputs, an exact
//! `--max-rejects`, and inputs that are not PGN at all (issue 26, items 8,
//! 13, 18 and 19).

use std::{
    path::Path,
    process::{Command, Output, Stdio},
    thread,
    time::Duration,
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::common::{TestDb, data, fresh_db, run, scratch_dir};

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

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
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

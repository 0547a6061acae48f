//! Bulk and incremental modes give the same database; an interrupted or
//! half-finished bulk load is finished by the next bulk or auto import
//! (an explicit incremental one refuses to write into it).

use std::{
    path::PathBuf,
    thread,
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::{
    common::{TestDb, fresh_db, migrated_db, run, scratch_dir, stderr},
    import::{assert_ok, content_dump, import},
    resume::corpus_with_copies,
};

/// Index and constraint definitions of the tables a bulk load rebuilds.
fn schema_objects(db: &TestDb) -> String {
    db.psql(
        "SELECT string_agg(d, E'\\n' ORDER BY d) FROM (
             SELECT conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid) AS d
             FROM pg_constraint WHERE conrelid IN ('positions'::regclass, 'moves'::regclass, 'games'::regclass)
             UNION ALL
             SELECT pg_get_indexdef(indexrelid) FROM pg_index
             WHERE indrelid IN ('positions'::regclass, 'moves'::regclass, 'games'::regclass)
         ) x",
    )
}

/// The number in "N duplicate positions merged" of a bulk summary.
fn merged(summary: &str) -> u64 {
    let line = summary
        .lines()
        .find(|l| l.contains("duplicate positions merged"))
        .unwrap_or_else(|| panic!("no merge line in {summary}"));
    let after = line.split("); ").nth(1).unwrap_or("");
    after
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {line:?}"))
}

/// The corpus imported incrementally into a fresh database: the reference.
fn incremental_reference(files: &[PathBuf]) -> TestDb {
    let db = fresh_db("mode_ref");
    let out = import(&db, &["-q", "--mode", "incremental"], files);
    assert_ok(&out, &[0]);
    assert!(
        stderr(&out).contains("mode:      incremental"),
        "{}",
        stderr(&out)
    );
    db
}

#[test]
fn bulk_and_incremental_imports_give_the_same_database() {
    let dir = scratch_dir("pgnload-bulk-");
    let files = corpus_with_copies(dir.path(), 1);
    let reference = incremental_reference(&files);

    let db = fresh_db("bulk");
    let out = import(
        &db,
        &["-q", "--mode", "bulk", "--batch-games", "50"],
        &files,
    );
    assert_ok(&out, &[0]);
    let summary = stderr(&out);
    assert!(summary.contains("mode:      bulk"), "{summary}");
    // An empty database and a map that never evicted: no duplicates possible.
    assert_eq!(merged(&summary), 0, "{summary}");
    assert_eq!(content_dump(&db), content_dump(&reference));
    assert_eq!(schema_objects(&db), schema_objects(&reference));
    assert_eq!(
        db.psql("SELECT state, needs_dedup, runs FROM import_bulk_loads"),
        "done|f|1"
    );
    let verify = run({
        let mut c = db.pgnload();
        c.args(["-q", "verify", "--games", "--report"])
            .arg(dir.path().join("verify.tsv"));
        c
    });
    assert_ok(&verify, &[0]);
}

#[test]
fn a_bulk_load_whose_map_evicts_merges_the_duplicates_it_let_through() {
    let dir = scratch_dir("pgnload-bulk-evict-");
    let files = corpus_with_copies(dir.path(), 1);
    let reference = incremental_reference(&files);

    let db = fresh_db("bulk_evict");
    let out = import(
        &db,
        &["-q", "--mode", "bulk", "--cache-positions", "200"],
        &files,
    );
    assert_ok(&out, &[0]);
    let summary = stderr(&out);
    assert!(merged(&summary) > 0, "{summary}");
    assert_eq!(content_dump(&db), content_dump(&reference));
    assert_eq!(schema_objects(&db), schema_objects(&reference));
    assert_eq!(
        db.psql("SELECT count(*) = count(DISTINCT normalized_fen) FROM positions"),
        "t"
    );
}

#[test]
fn auto_mode_bulk_loads_an_empty_database_and_adds_small_files_incrementally() {
    let dir = scratch_dir("pgnload-auto-");
    let files = corpus_with_copies(dir.path(), 1);
    let db = fresh_db("auto");
    let (big, small) = files.split_at(files.len() - 1);
    let first = import(&db, &["-q"], big);
    assert_ok(&first, &[0]);
    assert!(
        stderr(&first).contains("mode:      bulk"),
        "{}",
        stderr(&first)
    );
    // The renamed copy brings fewer positions than the database holds.
    let second = import(&db, &["-q"], small);
    assert_ok(&second, &[0]);
    assert!(
        stderr(&second).contains("mode:      incremental"),
        "{}",
        stderr(&second)
    );
    assert_eq!(
        content_dump(&db),
        content_dump(&incremental_reference(&files))
    );
}

#[test]
fn an_interrupted_bulk_load_is_refused_by_incremental_and_finished_by_auto() {
    let dir = scratch_dir("pgnload-bulk-resume-");
    let files = corpus_with_copies(dir.path(), 3);
    let (first_files, last) = files.split_at(files.len() - 1);
    let db = migrated_db("bulk_resume");

    // Stop a bulk load mid-way: the indexes are gone, the load is open.
    let child = bulk_import_under_way(&db, first_files);
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("unfinished"), "{}", stderr(&out));
    assert_eq!(db.psql("SELECT state FROM import_bulk_loads"), "loading");
    let status = run({
        let mut c = db.pgnload();
        c.arg("status");
        c
    });
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("bulk load #1 unfinished (loading, 1 runs so far)"),
        "{status}"
    );
    assert_eq!(
        db.psql("SELECT count(*) FROM pg_indexes WHERE tablename IN ('positions', 'moves')"),
        "0"
    );

    // An explicit incremental import is refused, not turned into a bulk
    // load; the open load is left as it was.
    let out = import(&db, &["-q", "--mode", "incremental"], first_files);
    assert_ok(&out, &[2]);
    assert!(
        stderr(&out).contains("bulk load #1 stopped unfinished"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        db.psql("SELECT state, runs FROM import_bulk_loads"),
        "loading|1"
    );

    // An auto import continues and finishes the bulk load.
    let out = import(&db, &["-q", "--mode", "auto"], first_files);
    assert_ok(&out, &[0]);
    assert!(
        stderr(&out).contains("continuing an unfinished bulk load"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        db.psql("SELECT state, runs FROM import_bulk_loads"),
        "done|2"
    );
    let reference = incremental_reference(first_files);
    assert_eq!(content_dump(&db), content_dump(&reference));
    assert_eq!(schema_objects(&db), schema_objects(&reference));

    // A finish cut short after rebuilding some objects: the next run drops
    // them again, loads, merges the positions it re-created, and rebuilds.
    db.psql(
        "UPDATE import_bulk_loads SET state = 'finishing';
         DROP INDEX positions_fen_hash_idx;
         ALTER TABLE moves DROP CONSTRAINT moves_pkey",
    );
    let max_before = db.psql("SELECT max(id) FROM positions");
    let ids_before = |db: &TestDb| {
        db.psql(&format!(
            "SELECT md5(string_agg(id || normalized_fen, ',' ORDER BY id)) FROM positions
             WHERE id <= {max_before}"
        ))
    };
    let before = ids_before(&db);
    let out = import(&db, &["-q", "--mode", "auto"], last);
    assert_ok(&out, &[0]);
    assert!(merged(&stderr(&out)) > 0, "{}", stderr(&out));
    assert_eq!(
        db.psql("SELECT state, runs FROM import_bulk_loads"),
        "done|3"
    );
    let reference = incremental_reference(&files);
    assert_eq!(content_dump(&db), content_dump(&reference));
    assert_eq!(schema_objects(&db), schema_objects(&reference));
    // Positions that existed before keep their ids.
    assert_eq!(ids_before(&db), before);
}

/// OIDs of the indexes of positions and moves: a rebuild changes them.
fn index_oids(db: &TestDb) -> String {
    db.psql(
        "SELECT string_agg(indexrelid::text, ',' ORDER BY indexrelid) FROM pg_index
         WHERE indrelid IN ('positions'::regclass, 'moves'::regclass)",
    )
}

/// Starts a slow bulk import and returns once its load is under way: two-game
/// batches make the load last long enough (about a second) for a signal to
/// land in it, not in the finish.
pub fn bulk_import_under_way(db: &TestDb, files: &[PathBuf]) -> std::process::Child {
    let mut cmd = db.pgnload();
    cmd.args(["-q", "import", "--mode", "bulk", "--batch-games", "2"])
        .args(files)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("spawn pgnload");
    let started = Instant::now();
    while db.psql("SELECT count(*) FROM import_files WHERE games_done > 0") == "0" {
        assert!(started.elapsed() < Duration::from_mins(1), "no progress");
        thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn an_explicit_incremental_import_waits_for_a_bulk_load_and_stays_incremental() {
    let dir = scratch_dir("pgnload-bulk-then-inc-");
    let files = corpus_with_copies(dir.path(), 2);
    let (bulk_files, last) = files.split_at(files.len() - 1);
    let db = migrated_db("bulk_then_inc");
    let bulk = bulk_import_under_way(&db, bulk_files);
    let out = import(&db, &["--mode", "incremental"], last);
    assert_ok(&out, &[0]);
    assert!(
        stderr(&out).contains("waiting for a bulk load to finish"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("mode:      incremental"),
        "{}",
        stderr(&out)
    );
    let bulk = bulk.wait_with_output().expect("bulk import");
    assert_ok(&bulk, &[0]);
    assert_eq!(
        db.psql("SELECT count(*), min(state) FROM import_bulk_loads"),
        "1|done"
    );
    let reference = incremental_reference(&files);
    assert_eq!(content_dump(&db), content_dump(&reference));
}

#[test]
fn a_bulk_rerun_with_nothing_to_import_rebuilds_nothing() {
    let db = migrated_db("bulk_noop");
    let file = crate::common::data("lichess-2025-05-sample.pgn");
    assert_ok(
        &import(&db, &["-q", "--mode", "bulk"], std::slice::from_ref(&file)),
        &[0],
    );
    let oids = index_oids(&db);
    let out = import(&db, &["--mode", "bulk"], &[file]);
    assert_ok(&out, &[0]);
    assert!(
        stderr(&out).contains("nothing to import: no load begun"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("rebuilding"), "{}", stderr(&out));
    assert_eq!(index_oids(&db), oids);
    assert_eq!(db.psql("SELECT count(*) FROM import_bulk_loads"), "1");
}

#[test]
fn index_builds_left_running_by_a_killed_finish_are_ended_by_the_rerun() {
    let dir = scratch_dir("pgnload-bulk-orphan-");
    let files = corpus_with_copies(dir.path(), 1);
    let db = migrated_db("bulk_orphan");
    let child = bulk_import_under_way(&db, &files);
    kill(
        Pid::from_raw(i32::try_from(child.id()).expect("pid fits")),
        Signal::SIGKILL,
    )
    .expect("SIGKILL");
    let _ = child.wait_with_output();
    // What a client killed in the middle of the finish leaves behind: a
    // session still building one of the load's indexes, uncommitted.
    let create_sql = db.psql(
        "SELECT create_sql FROM import_bulk_objects
         WHERE table_name = 'moves' AND kind = 'index' AND create_sql LIKE 'CREATE INDEX%' LIMIT 1",
    );
    assert!(create_sql.starts_with("CREATE INDEX"), "{create_sql}");
    let mut orphan = std::process::Command::new("psql")
        .env("PGAPPNAME", "pgnload bulk rebuild")
        .args(["-X", "-q", &db.url, "-c"])
        .arg(format!("{create_sql}; SELECT pg_sleep(120);"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn psql");
    let started = Instant::now();
    while db.psql(
        "SELECT count(*) FROM pg_stat_activity
         WHERE application_name = 'pgnload bulk rebuild' AND query LIKE '%pg_sleep%'",
    ) == "0"
    {
        assert!(
            started.elapsed() < Duration::from_mins(1),
            "orphan not started"
        );
        thread::sleep(Duration::from_millis(20));
    }
    let out = import(&db, &["-q", "--mode", "auto"], &files);
    assert_ok(&out, &[0]);
    let orphan_status = orphan.wait().expect("orphan");
    assert!(!orphan_status.success(), "the orphan build was not ended");
    assert_eq!(db.psql("SELECT state FROM import_bulk_loads"), "done");
    let reference = incremental_reference(&files);
    assert_eq!(schema_objects(&db), schema_objects(&reference));
    assert_eq!(content_dump(&db), content_dump(&reference));
}

#[test]
fn a_bulk_load_stopped_by_max_rejects_is_finished_with_its_indexes() {
    let dir = scratch_dir("pgnload-bulk-maxrej-");
    let bad = "[Event \"bad\"]\n[Result \"1-0\"]\n\n1. e4 e5 2. Ke3 1-0\n\n";
    let good =
        std::fs::read_to_string(crate::common::data("lichess-2025-05-sample.pgn")).expect("sample");
    let file = dir.path().join("rejects-first.pgn");
    std::fs::write(&file, format!("{bad}{bad}{bad}{good}")).expect("write");
    let db = migrated_db("bulk_maxrej");
    let out = import(
        &db,
        &[
            "-q",
            "--mode",
            "bulk",
            "--batch-games",
            "2",
            "--max-rejects",
            "1",
        ],
        &[file],
    );
    assert_ok(&out, &[4]);
    assert_eq!(db.psql("SELECT state FROM import_bulk_loads"), "done");
    let reference = migrated_db("bulk_maxrej_ref");
    assert_eq!(schema_objects(&db), schema_objects(&reference));
}

#[test]
fn settings_that_cost_throughput_are_advised_on_never_changed() {
    let db = fresh_db("advice");
    let dbname = db.psql("SELECT current_database()");
    db.psql(&format!(
        "ALTER DATABASE {dbname} SET maintenance_work_mem = '64MB';
         ALTER DATABASE {dbname} SET wal_compression = off"
    ));
    // Without -q: advice is what -q silences.
    let out = import(
        &db,
        &[],
        &[crate::common::data("lichess-2025-05-sample.pgn")],
    );
    assert_ok(&out, &[0]);
    let text = stderr(&out);
    assert!(
        text.contains("advice: maintenance_work_mem is 64 MiB"),
        "{text}"
    );
    assert!(text.contains("advice: wal_compression is off"), "{text}");
    assert_eq!(db.psql("SHOW maintenance_work_mem"), "64MB");
}

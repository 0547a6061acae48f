//! `import` of the exchange formats: an ocgdb database and a Simple Chess
//! Database exported by pgnload, imported into an empty database, hold the
//! same games and moves as far as the formats keep them; a Lichess game
//! read back is the same game (already present); a bad input gets a clear
//! error, a bad game a clear reject, and the counts add up; a killed import
//! resumes to the same database.

use std::{
    path::{Path, PathBuf},
    process::{Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::{
    common::{
        Lcg, TestDb, data, embedded_pgnload, fresh_db, migrated_db, run, run_measured, scratch_dir,
        stderr,
    },
    import::content_dump,
};

fn import(db: &TestDb, file: &Path) -> Output {
    db.quiet(&["import", &file.display().to_string()])
}

/// `(read, imported, present, rejected, filtered)` of the input at `file`.
fn counts(db: &TestDb, file: &Path) -> (u64, u64, u64, u64, u64) {
    let path = std::fs::canonicalize(file).expect("canonical path");
    let row = db.psql(&format!(
        "SELECT concat_ws(' ', games_done, games_imported, games_present, games_rejected, \
         games_filtered) FROM import_files WHERE path = '{}'",
        path.display()
    ));
    let n: Vec<u64> = row
        .split(' ')
        .map(|n| {
            n.parse()
                .unwrap_or_else(|_| panic!("counts of {}: {row:?}", file.display()))
        })
        .collect();
    assert_eq!(n.len(), 5, "{row}");
    assert_eq!(n[0], n[1] + n[2] + n[3] + n[4], "counts add up: {row}");
    (n[0], n[1], n[2], n[3], n[4])
}

/// Every game of `db` matching `filter` as the exchange formats keep it,
/// one line per game, sorted: players (lower case: ocgdb merges names
/// ignoring case), result, start position, ply count and, per move, its
/// UCI, SAN, the position after it, clock and eval (both formats carry
/// them in comments) and, `with_nag`, its NAG (dcg only: ocgdb has no
/// NAGs). Not compared: the tags the formats drop (and so the digest of
/// a game without a Lichess id), the start time beyond the day, the event
/// and site names (compared through players and moves for all games).
fn kept(db: &TestDb, filter: &str, with_nag: bool) -> Vec<String> {
    let nag = if with_nag { "m.nag" } else { "NULL" };
    let text = db.psql(&format!(
        "SELECT coalesce(string_agg(sig, E'\\n' ORDER BY sig), '') FROM (
             SELECT concat_ws(',', lower(w.username), lower(b.username), g.result,
                 ip.normalized_fen, g.ply_count, encode(g.moves, 'hex'),
                 (SELECT string_agg(concat_ws(':', m.ply, m.uci, m.san, pa.normalized_fen,
                         m.clock_ms, m.eval_cp, m.eval_mate, {nag}), ' ' ORDER BY m.ply)
                  FROM moves m JOIN positions pa ON pa.id = m.position_after_id
                  WHERE m.game_id = g.id)) AS sig
             FROM games g JOIN positions ip ON ip.id = g.initial_position_id
             LEFT JOIN players w ON w.id = g.white_player_id
             LEFT JOIN players b ON b.id = g.black_player_id
             WHERE {filter}) s"
    ));
    text.lines().map(str::to_owned).collect()
}

/// Crafted games: a set-up position with castling and a promotion, NAGs,
/// a zero-move game, a partial date; a game with a time of day (which
/// neither format keeps) and one with a time control (which dcg drops).
fn crafted() -> &'static str {
    r#"[Event "Crafted"]
[Site "Here"]
[Date "1997.05.??"]
[Round "3"]
[White "Ann"]
[Black "Zed"]
[Result "1-0"]
[SetUp "1"]
[FEN "r3k2r/1P6/8/8/8/8/8/R3K2R w KQkq - 0 1"]

1. bxa8=Q+ Ke7 2. O-O $1 Kd6 3. Qd5+ $3 Kxd5 1-0

[Event "Crafted"]
[Site "Here"]
[Date "????.??.??"]
[White "Ann"]
[Black "Zed"]
[Result "1/2-1/2"]

1/2-1/2

[Event "Timed"]
[Site "There"]
[UTCDate "2003.04.05"]
[UTCTime "10:11:12"]
[White "Ann"]
[Black "Zed"]
[Result "*"]

1. e4 e5 *

[Event "Clocked"]
[Site "There"]
[Date "2003.04.05"]
[White "Ann"]
[Black "Zed"]
[Result "*"]
[TimeControl "300+0"]

1. e4 e5 *

"#
}

/// A database with the sources imported; the exports written into `dir`.
fn exported(dir: &Path) -> (TestDb, PathBuf, PathBuf) {
    let db = migrated_db("xin_source");
    let crafted_pgn = dir.join("crafted.pgn");
    std::fs::write(&crafted_pgn, crafted()).expect("write the crafted games");
    for file in [
        data("lichess-2025-05-sample.pgn"),
        data("kasparov-deep-blue-1997.pgn"),
        crafted_pgn,
    ] {
        db.quiet_ok(&["import", &file.display().to_string()]);
    }
    let ocgdb = dir.join("all.ocgdb.db3");
    let base = dir.join("all");
    db.quiet_ok(&[
        "export",
        "--format",
        "ocgdb",
        "-o",
        &ocgdb.display().to_string(),
    ]);
    db.quiet_ok(&[
        "export",
        "--format",
        "dcg",
        "-o",
        &base.display().to_string(),
    ]);
    (db, ocgdb, base)
}

#[test]
fn exported_games_imported_back_are_the_same_games_and_moves() {
    let dir = scratch_dir("xin-round");
    let (source, ocgdb, base) = exported(dir.path());
    let games: u64 = source
        .psql("SELECT count(*) FROM games")
        .parse()
        .expect("count");
    assert!(games > 400, "{games} games");

    let from_ocgdb = fresh_db("xin_ocgdb");
    from_ocgdb.quiet_ok(&["import", &ocgdb.display().to_string()]);
    assert_eq!(counts(&from_ocgdb, &ocgdb), (games, games, 0, 0, 0));
    let expected = kept(&source, "true", false);
    assert_eq!(expected.len() as u64, games);
    assert_eq!(kept(&from_ocgdb, "true", false), expected);

    // Named by its index or by its games file: the same base, whose
    // identity covers its five files.
    let from_dcg = fresh_db("xin_dcg");
    let dci = base.with_extension("dci");
    from_dcg.quiet_ok(&["import", &dci.display().to_string()]);
    assert_eq!(counts(&from_dcg, &dci), (games, games, 0, 0, 0));
    assert_eq!(kept(&from_dcg, "true", true), kept(&source, "true", true));
    let stderr = import_ending(&from_dcg, &base.with_extension("dcg"), 0);
    assert!(stderr.contains("already imported"), "{stderr}");

    // Lichess games keep their key: the Site URL travels in both formats.
    let lichess = |db: &TestDb| {
        db.psql(
            "SELECT count(*) || ' ' || md5(string_agg(external_id, ',' ORDER BY external_id)) \
             FROM games WHERE source = 'lichess'",
        )
    };
    assert_eq!(lichess(&from_ocgdb), lichess(&source));
    assert_eq!(lichess(&from_dcg), lichess(&source));
}

#[test]
fn an_ocgdb_export_imported_into_its_source_is_already_present() {
    let dir = scratch_dir("xin-present");
    let (source, ocgdb, base) = exported(dir.path());
    let lichess: u64 = source
        .psql("SELECT count(*) FROM games WHERE source = 'lichess'")
        .parse()
        .expect("count");
    let others: u64 = source
        .psql("SELECT count(*) FROM games WHERE source <> 'lichess'")
        .parse()
        .expect("count");
    // The Kasparov file holds 6 distinct games; the crafted file 4.
    assert_eq!((lichess, others), (438, 10));
    let before = content_dump(&source);
    // Every Lichess game keeps its key (its id). The 6 Kasparov games carry
    // EventDate and PlyCount, which neither format keeps, and the "Timed"
    // game a time of day: their content digest changes, so ocgdb brings
    // them back as new games (and dcg then finds them present). The other
    // crafted games carry only tags ocgdb keeps: the same games; dcg drops
    // the "Clocked" game's TimeControl: a new game.
    for (file, at, new) in [
        (ocgdb.clone(), "ocgdb", 7),
        (base.with_extension("dci"), "dcg", 1),
    ] {
        let out = import(&source, &file);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{at}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            counts(&source, &file),
            (lichess + others, new, lichess + others - new, 0, 0),
            "{at}"
        );
    }
    // The Kasparov games came back once (ocgdb), then were present (dcg):
    // both formats give a game the same key.
    assert_ne!(content_dump(&source), before);
    assert_eq!(
        source.psql("SELECT count(*) FROM games WHERE source = 'lichess'"),
        lichess.to_string()
    );
}

#[test]
fn a_sqlite_file_of_another_schema_is_refused_naming_what_is_missing() {
    let dir = scratch_dir("xin-schema");
    let file = dir.path().join("other.db3");
    let c = rusqlite::Connection::open(&file).expect("create");
    c.execute_batch(
        "CREATE TABLE Games (ID INTEGER PRIMARY KEY, WhiteID INTEGER);
         CREATE TABLE Players (ID INTEGER PRIMARY KEY, Name TEXT);",
    )
    .expect("schema");
    drop(c);
    let db = fresh_db("xin_schema");
    let out = import(&db, &file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for missing in [
        "not one in the ocgdb or En Croissant schema",
        "column Games.EventID",
        "column Games.Moves2 (ocgdb) or Games.Moves (En Croissant)",
        "table Events",
        "table Sites",
    ] {
        assert!(stderr.contains(missing), "{missing}: {stderr}");
    }
    assert!(!stderr.contains("table Players"), "{stderr}");
}

/// Copies `from` (an ocgdb file) to `to` and runs `sql` on the copy.
fn altered(from: &Path, to: &Path, sql: &str) {
    std::fs::copy(from, to).expect("copy");
    rusqlite::Connection::open(to)
        .expect("open")
        .execute_batch(&format!("PRAGMA foreign_keys = OFF; {sql}"))
        .expect("alter");
}

/// Long: one scenario, step by step; split, its steps would read out of
/// order.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, step by step; split, its steps would read out of order"
)]
fn bad_stored_games_are_rejected_with_a_clear_reason_and_the_others_imported() {
    let dir = scratch_dir("xin-bad");
    let (_source, ocgdb, base) = exported(dir.path());
    let games: u64 = 448;

    // ocgdb: game 3 gets an illegal move (e2e5 at ply 1), game 5 a blob that
    // is no move list, game 7 a player that does not exist, game 9 moves
    // stored as text (not even UTF-8).
    let bad = dir.path().join("bad.ocgdb.db3");
    altered(
        &ocgdb,
        &bad,
        "UPDATE Games SET Moves2 = CAST(x'0c09' || substr(Moves2, 3) AS BLOB) WHERE ID = 3;
         UPDATE Games SET Moves2 = x'0c' WHERE ID = 5;
         UPDATE Games SET WhiteID = 99999 WHERE ID = 7;
         UPDATE Games SET Moves2 = CAST(x'ff0c' AS TEXT) WHERE ID = 9;",
    );
    let db = fresh_db("xin_bad");
    let out = import(&db, &bad);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(counts(&db, &bad), (games, games - 4, 0, 4, 0));
    let rejects = db.psql(
        "SELECT string_agg(game_number || '@' || byte_offset || ': ' || reason, E'\\n' \
         ORDER BY game_number) FROM import_rejects",
    );
    let lines: Vec<&str> = rejects.lines().collect();
    assert_eq!(lines.len(), 4, "{rejects}");
    assert!(
        lines[0].starts_with("3@3: illegal move \"e2e5\" at ply 1"),
        "{rejects}"
    );
    assert!(
        lines[1].starts_with("5@5: undecodable stored game: Games row 5: Moves2 is 1 bytes"),
        "{rejects}"
    );
    assert_eq!(
        lines[2],
        "7@7: undecodable stored game: Games row 7: WhiteID 99999 refers to no row of Players",
    );
    assert_eq!(
        lines[3],
        "9@9: undecodable stored game: Games row 9: Moves2 is not a blob",
    );
    // The illegal game's reject keeps its PGN text.
    let raw = db.psql("SELECT convert_from(raw, 'UTF8') FROM import_rejects WHERE game_number = 3");
    assert!(
        raw.contains("[Site \"https://lichess.org/") && raw.contains("e2e5 "),
        "{raw}"
    );

    // dcg: the games file cut in the middle; every game whose record is
    // whole is imported, the others rejected as truncated.
    let cut = dir.path().join("cut");
    for ext in ["dci", "dcn", "dcs", "dce"] {
        std::fs::copy(base.with_extension(ext), cut.with_extension(ext)).expect("copy");
    }
    let records = std::fs::read(base.with_extension("dcg")).expect("read");
    std::fs::write(cut.with_extension("dcg"), &records[..records.len() / 2]).expect("write");
    let dci = cut.with_extension("dci");
    let db = fresh_db("xin_cut");
    let out = import(&db, &dci);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (read, imported, present, rejected, _) = counts(&db, &dci);
    assert_eq!((read, present), (games, 0));
    assert!(imported > 100 && rejected > 100, "{imported} + {rejected}");
    assert_eq!(
        db.psql(
            "SELECT count(*) FROM import_rejects WHERE reason LIKE \
             'undecodable stored game: the record at byte % runs past the end of the .dcg%'"
        ),
        rejected.to_string()
    );
    // Every imported game is one of the first half's.
    assert_eq!(
        db.psql(&format!(
            "SELECT count(*) FROM games WHERE game_number > {}",
            read - rejected
        )),
        "0"
    );
    // A base missing a file is an input error naming it.
    std::fs::remove_file(cut.with_extension("dce")).expect("remove");
    let out = import(&fresh_db("xin_missing"), &dci);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cut.dce"), "{stderr}");
}

#[test]
fn a_killed_ocgdb_import_reruns_to_the_database_of_a_clean_one() {
    let dir = scratch_dir("xin-kill");
    let (_source, ocgdb, _base) = exported(dir.path());
    let cmd = |db: &TestDb| {
        let mut c = db.pgnload();
        c.args(["-q", "import", "--batch-games", "10"])
            .arg(&ocgdb)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    };
    let clean = fresh_db("xin_kill_ref");
    assert_eq!(run(cmd(&clean)).status.code(), Some(0));
    let db = fresh_db("xin_kill");
    let mut rng = Lcg(20_261_124);
    for _ in 0..5 {
        let mut child = cmd(&db).spawn().expect("spawn pgnload");
        let delay = Duration::from_millis(50 + rng.below(400));
        let started = Instant::now();
        while child.try_wait().expect("wait").is_none() && started.elapsed() < delay {
            thread::sleep(Duration::from_millis(5));
        }
        if child.try_wait().expect("wait").is_none() {
            let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
            kill(pid, Signal::SIGKILL).expect("SIGKILL");
        }
        let _ = child.wait();
    }
    let out = run(cmd(&db));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(content_dump(&db), content_dump(&clean));
    assert_eq!(
        db.psql("SELECT count(*) FROM import_files WHERE state <> 'done'"),
        "0"
    );
}

#[test]
fn an_import_stopped_part_way_resumes_by_game_number() {
    // Deterministic: --max-rejects stops the first run at the 3rd reject
    // (games 31..33 made illegal), inside its batch; the rerun resumes
    // from its checkpoint and ends with what one clean run gives.
    let dir = scratch_dir("xin-resume");
    let (_source, ocgdb, _base) = exported(dir.path());
    let bad = dir.path().join("stops.ocgdb.db3");
    altered(
        &ocgdb,
        &bad,
        "UPDATE Games SET Moves2 = CAST(x'0c09' || substr(Moves2, 3) AS BLOB) WHERE ID BETWEEN 31 AND 33;",
    );
    let args = |db: &TestDb, extra: &[&str]| {
        let mut c = db.pgnload();
        c.args(["-q", "import", "--batch-games", "10"])
            .args(extra)
            .arg(&bad);
        run(c)
    };
    let db = fresh_db("xin_resume");
    let first = args(&db, &["--max-rejects", "2"]);
    assert_eq!(
        first.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(
        db.psql("SELECT state || ' ' || games_done FROM import_files"),
        "interrupted 33"
    );
    // The rejects were the first run's: the rerun that finishes the input
    // still exits 1 for them.
    let rerun = args(&db, &[]);
    assert_eq!(
        rerun.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    let clean = fresh_db("xin_resume_ref");
    assert_eq!(args(&clean, &[]).status.code(), Some(1));
    assert_eq!(content_dump(&db), content_dump(&clean));
    assert_eq!(counts(&db, &bad), (448, 445, 0, 3, 0));
}

/// Runs pgnload on the embedded cluster in `data_dir` and returns its
/// stdout, failing with its stderr unless it succeeds.
fn embedded_ok(data_dir: &Path, args: &[&str]) -> String {
    let out = run({
        let mut c = embedded_pgnload(data_dir);
        c.args(args);
        c
    });
    assert!(
        out.status.success(),
        "pgnload {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The embedded cluster's games as `source:external_id`, sorted.
fn embedded_game_keys(data_dir: &Path) -> Vec<String> {
    let lines = embedded_ok(
        data_dir,
        &["games", "--format", "json", "--limit", "100000"],
    );
    let mut keys: Vec<String> = lines
        .lines()
        .map(|line| {
            let game: serde_json::Value = serde_json::from_str(line).expect("a JSON game");
            format!("{}:{}", game["source"], game["external_id"])
        })
        .collect();
    keys.sort();
    keys
}

/// What a new user does with no database URL: export both formats from one
/// private cluster and import them into another; the Lichess games come
/// back as the same games (their keys), the second format adds nothing.
#[test]
fn the_embedded_default_exports_and_imports_both_formats() {
    let dir = scratch_dir("xin-embedded");
    let source = dir.path().join("source-data");
    let target = dir.path().join("target-data");
    let sample = data("lichess-2025-05-sample.pgn").display().to_string();
    embedded_ok(&source, &["-q", "import", &sample]);
    let ocgdb = dir.path().join("sample.ocgdb.db3").display().to_string();
    let base = dir.path().join("sample");
    embedded_ok(
        &source,
        &["-q", "export", "--format", "ocgdb", "-o", &ocgdb],
    );
    embedded_ok(
        &source,
        &[
            "-q",
            "export",
            "--format",
            "dcg",
            "-o",
            &base.display().to_string(),
        ],
    );
    let expected = embedded_game_keys(&source);
    assert_eq!(expected.len(), 438, "the sample's games");

    embedded_ok(&target, &["-q", "import", &ocgdb]);
    assert_eq!(embedded_game_keys(&target), expected, "from ocgdb");
    let dci = base.with_extension("dci").display().to_string();
    embedded_ok(&target, &["-q", "import", &dci]);
    assert_eq!(embedded_game_keys(&target), expected, "then from dcg");
    for data_dir in [&source, &target] {
        embedded_ok(data_dir, &["db", "stop"]);
    }
}

/// How many `import_files` rows name `file` (one per identity it was
/// imported under).
fn records_of(db: &TestDb, file: &Path) -> u64 {
    let path = std::fs::canonicalize(file).expect("canonical path");
    db.psql(&format!(
        "SELECT count(*) FROM import_files WHERE path = '{}'",
        path.display()
    ))
    .parse()
    .expect("count")
}

/// Copies the base `from` to `to` (both without extension), its
/// manifest left out: a base as another tool writes it.
fn copied_base(from: &Path, to: &Path) {
    for ext in ["dci", "dcg", "dcn", "dcs", "dce"] {
        std::fs::copy(from.with_extension(ext), to.with_extension(ext)).expect("copy");
    }
}

/// Runs `pgnload import FILE` (not quiet: the notices are asserted on),
/// which must end with `code`; its stderr.
fn import_ending(db: &TestDb, file: &Path, code: i32) -> String {
    let out = run({
        let mut c = db.pgnload();
        c.arg("import").arg(file);
        c
    });
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    stderr
}

#[test]
fn a_dcg_base_is_read_again_when_any_of_its_files_changes() {
    let dir = scratch_dir("xin-set");
    let (_source, _ocgdb, base) = exported(dir.path());
    let copy = dir.path().join("copy");
    copied_base(&base, &copy);
    let dci = copy.with_extension("dci");
    let dcg = copy.with_extension("dcg");
    // The index imported while its games file is still being copied: the
    // games whose records are not there yet are rejected.
    let whole = std::fs::read(&dcg).expect("read");
    std::fs::write(&dcg, &whole[..whole.len() / 2]).expect("write");
    let db = fresh_db("xin_set");
    import_ending(&db, &dci, 1);
    let first: u64 = db
        .psql("SELECT count(*) FROM games")
        .parse()
        .expect("count");
    assert!(first > 100 && first < 448, "{first} games");
    // The copy finishes: the index is the same, the base is not.
    std::fs::write(&dcg, &whole).expect("write");
    let stderr = import_ending(&db, &dci, 0);
    assert!(!stderr.contains("already imported"), "{stderr}");
    assert_eq!(db.psql("SELECT count(*) FROM games"), "448");
    assert_eq!(records_of(&db, &dci), 2);
    // A name, a site or an event changed in place (same size), the index
    // untouched: another input each time.
    for (n, ext) in ["dcn", "dcs", "dce"].into_iter().enumerate() {
        let file = copy.with_extension(ext);
        let mut bytes = std::fs::read(&file).expect("read");
        bytes[10] = b'#';
        std::fs::write(&file, &bytes).expect("write");
        let out = import(&db, &dci);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(matches!(out.status.code(), Some(0 | 1)), "{ext}: {stderr}");
        assert!(!stderr.contains("already imported"), "{ext}: {stderr}");
        assert_eq!(records_of(&db, &dci), 3 + n as u64, "{ext}");
    }
    // Unchanged, named by its games file: the same base, skipped.
    let stderr = import_ending(&db, &dcg, 0);
    assert!(stderr.contains("already imported"), "{stderr}");
}

#[test]
fn an_ocgdb_file_is_read_again_when_its_wal_holds_new_games() {
    let dir = scratch_dir("xin-wal");
    let (_source, ocgdb, _base) = exported(dir.path());
    let file = dir.path().join("wal.ocgdb.db3");
    altered(
        &ocgdb,
        &file,
        "DELETE FROM Comments WHERE GameID > 200; DELETE FROM Games WHERE ID > 200; VACUUM;",
    );
    let writer = rusqlite::Connection::open(&file).expect("open");
    writer
        .execute_batch("PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;")
        .expect("WAL mode");
    let db = fresh_db("xin_wal");
    import_ending(&db, &file, 0);
    assert_eq!(db.psql("SELECT count(*) FROM games"), "200");
    // New games committed to the WAL: the database file itself is
    // unchanged until a checkpoint, which the open connection holds off.
    let main_before = std::fs::read(&file).expect("read");
    writer
        .execute_batch(&format!(
            "ATTACH '{}' AS full;
             INSERT INTO Games SELECT * FROM full.Games WHERE ID > 200;
             INSERT INTO Comments SELECT * FROM full.Comments WHERE GameID > 200;",
            ocgdb.display()
        ))
        .expect("add games");
    assert_eq!(std::fs::read(&file).expect("read"), main_before);
    let stderr = import_ending(&db, &file, 0);
    assert!(!stderr.contains("already imported"), "{stderr}");
    assert_eq!(db.psql("SELECT count(*) FROM games"), "448");
    drop(writer);
}

#[test]
fn numbers_read_from_exchange_files_make_rejects_not_failures() {
    let dir = scratch_dir("xin-numbers");
    let (_source, ocgdb, base) = exported(dir.path());
    // Games.ID without its INTEGER PRIMARY KEY, so that it may hold
    // anything: the largest bigint, text, NULL, a real.
    let bad = dir.path().join("ids.ocgdb.db3");
    altered(
        &ocgdb,
        &bad,
        "CREATE TABLE G2 AS SELECT * FROM Games; DROP TABLE Games;
         ALTER TABLE G2 RENAME TO Games;
         UPDATE Games SET ID = 9223372036854775807 WHERE ID = 10;
         UPDATE Games SET ID = 'eleven' WHERE ID = 11;
         UPDATE Games SET ID = NULL WHERE ID = 12;
         UPDATE Games SET ID = 12.5 WHERE ID = 13;",
    );
    let db = fresh_db("xin_ids");
    import_ending(&db, &bad, 1);
    assert_eq!(counts(&db, &bad), (448, 444, 0, 4, 0));
    let reasons = db.psql(
        "SELECT string_agg(byte_offset || ': ' || reason, E'\\n' ORDER BY reason) \
         FROM import_rejects",
    );
    for expected in [
        "0: undecodable stored game: Games.ID 9223372036854775807 is past 2^62",
        "0: undecodable stored game: Games.ID \"eleven\" (text) is not an integer",
        "0: undecodable stored game: Games.ID NULL is not an integer",
        "0: undecodable stored game: Games.ID 12.5 (a real) is not an integer",
    ] {
        assert!(reasons.contains(expected), "{expected}: {reasons}");
    }

    // A .dci entry pointing far past the .dcg (pread fails past 2^63).
    let far = dir.path().join("far");
    copied_base(&base, &far);
    let dci = far.with_extension("dci");
    let mut index = std::fs::read(&dci).expect("read");
    let entry = 19 + 39 * 4;
    index[entry + 1..entry + 9].copy_from_slice(&(u64::MAX - 2).to_be_bytes());
    let entry = 19 + 39 * 5;
    index[entry + 1..entry + 9].copy_from_slice(&((1u64 << 63) - 5).to_be_bytes());
    std::fs::write(&dci, &index).expect("write");
    let db = fresh_db("xin_far");
    import_ending(&db, &dci, 1);
    assert_eq!(counts(&db, &dci), (448, 446, 0, 2, 0));
    assert_eq!(
        db.psql(
            "SELECT string_agg(game_number || '@' || byte_offset || ': ' || reason, E'\\n' \
             ORDER BY game_number) FROM import_rejects"
        ),
        format!(
            "5@0: undecodable stored game: the index points at byte {}, past 2^62 (the .dcg \
             is {len} bytes)\n6@0: undecodable stored game: the index points at byte {}, past \
             2^62 (the .dcg is {len} bytes)",
            u64::MAX - 2,
            (1u64 << 63) - 5,
            len = std::fs::metadata(far.with_extension("dcg"))
                .expect("stat")
                .len()
        )
    );
}

/// Peak RSS of `pgnload import FILE` bounded in bytes: a 9 MiB player
/// name shared by 400 games, and a game with 300,000 comments.
#[test]
fn reading_an_ocgdb_file_is_bounded_in_memory() {
    let dir = scratch_dir("xin-memory");
    let (_source, ocgdb, _base) = exported(dir.path());
    let big = dir.path().join("big.ocgdb.db3");
    altered(
        &ocgdb,
        &big,
        "INSERT INTO Players (ID, Name) VALUES (999999,
             replace(hex(zeroblob(4718592)), '0', 'x'));
         UPDATE Games SET WhiteID = 999999 WHERE ID <= 400;
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000)
         INSERT INTO Comments (GameID, Ply, Comment) SELECT 448, 1, 'c' FROM n;",
    );
    let db = fresh_db("xin_memory");
    import_ending(&db, &big, 1);
    assert_eq!(counts(&db, &big), (448, 47, 0, 401, 0));
    assert_eq!(
        db.psql(
            "SELECT count(*) FROM import_rejects WHERE reason LIKE \
             'undecodable stored game: Games row % bytes (max_game_bytes)'"
        ),
        "401"
    );
    // 2.5 GB before reading was bounded; a wide margin over the ~100 MB
    // an import of the sample takes.
    let max_rss_kib = crate::common::children_peak_rss_kib();
    assert!(
        max_rss_kib < 512 * 1024,
        "a child used {max_rss_kib} KiB for a 9 MiB name"
    );
}

/// Item 10 of issue 45: an En Croissant `Moves` blob of 8,000,000
/// variation starts (`0xFF`, under the 8 MiB cap) took 2.24 GB to decode,
/// each start keeping a position; now its decoding stops, the game a
/// reject, once it would hold more than `max_game_bytes`, in bounded
/// memory, and the other game is imported.
#[test]
fn an_en_croissant_blob_of_variation_starts_is_rejected_in_bounded_memory() {
    let dir = scratch_dir("xin-encroissant-ff");
    let file = dir.path().join("ff.db3");
    let connection = rusqlite::Connection::open(&file).expect("create");
    connection
        .execute_batch(pgnload::export::encroissant::SCHEMA)
        .expect("En Croissant's schema");
    // 12, 12: 1. e4 e5.
    for (id, moves) in [(1, vec![0xFF_u8; 8_000_000]), (2, vec![12, 12])] {
        connection
            .execute(
                "INSERT INTO Games (ID, EventID, SiteID, WhiteID, BlackID, Result, Moves) \
                 VALUES (?1, 0, 0, 0, 0, '*', ?2)",
                rusqlite::params![id, moves],
            )
            .expect("a game");
    }
    drop(connection);
    let db = fresh_db("xin_encroissant_ff");
    let mut import = db.pgnload();
    import.args(["-q", "import"]).arg(&file);
    let (out, peak_rss_kib) = run_measured(&import);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(counts(&db, &file), (2, 1, 0, 1, 0));
    assert_eq!(
        db.psql(
            "SELECT game_number || ' ' || (reason LIKE 'undecodable stored game: Games row 1: \
             its Moves decode to more than the limit of 8388608 bytes %') FROM import_rejects"
        ),
        "1 true"
    );
    assert!(
        peak_rss_kib < 256 * 1024,
        "the import used {peak_rss_kib} KiB for an 8 MB blob"
    );
}

/// Item 7 of issue 45: a `Games` view whose row 150 fails (an integer
/// overflow) lost the 149 rows read before it, on every rerun: they
/// waited in the reading thread's parcel, which the error dropped. They
/// are imported and counted, the input fails naming the error, and a
/// rerun neither loses nor duplicates a game.
#[test]
fn a_games_view_failing_part_way_keeps_the_games_read_before() {
    let dir = scratch_dir("xin-failing-view");
    let (_source, ocgdb, _base) = exported(dir.path());
    let file = dir.path().join("failing.ocgdb.db3");
    altered(
        &ocgdb,
        &file,
        "ALTER TABLE Games RENAME TO G2;
         CREATE VIEW Games AS SELECT ID, EventID, SiteID, Date, Round, WhiteID, WhiteElo,
             BlackID, BlackElo, Result, TimeControl, ECO, PlyCount, FEN,
             CASE WHEN ID = 150 THEN abs(-9223372036854775807 - 1) ELSE Moves2 END AS Moves2
             FROM G2;",
    );
    let db = fresh_db("xin_failing_view");
    for run in 1..=2 {
        let stderr = import_ending(&db, &file, 2);
        assert!(stderr.contains("integer overflow"), "run {run}: {stderr}");
        assert_eq!(
            counts(&db, &file),
            (149, 149, 0, 0, 0),
            "run {run}: {stderr}"
        );
        assert_eq!(db.psql("SELECT count(*) FROM games"), "149", "run {run}");
    }
}

#[test]
fn an_endless_games_view_stops_at_the_first_signal() {
    let dir = scratch_dir("xin-endless");
    let file = dir.path().join("endless.db3");
    rusqlite::Connection::open(&file)
        .expect("create")
        .execute_batch(
            "CREATE TABLE Events (ID INTEGER PRIMARY KEY, Name TEXT);
             CREATE TABLE Sites (ID INTEGER PRIMARY KEY, Name TEXT);
             CREATE TABLE Players (ID INTEGER PRIMARY KEY, Name TEXT);
             CREATE VIEW Games AS WITH RECURSIVE r(ID) AS
                 (SELECT 1 UNION ALL SELECT ID + 1 FROM r)
                 SELECT ID, NULL AS EventID, NULL AS SiteID, NULL AS WhiteID,
                     NULL AS BlackID, NULL AS Moves2 FROM r;",
        )
        .expect("schema");
    let db = fresh_db("xin_endless");
    let mut child = db
        .pgnload()
        .arg("import")
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pgnload");
    // Not a timing assertion: time for the import to reach the view.
    thread::sleep(Duration::from_secs(2));
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    kill(pid, Signal::SIGINT).expect("SIGINT");
    let asked = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if asked.elapsed() > Duration::from_mins(1) {
            let _ = kill(pid, Signal::SIGKILL);
            let _ = child.wait();
            panic!("the import ignored the first SIGINT");
        }
        thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("1 interrupted"), "{stderr}");
    assert!(!stderr.contains("aborted"), "{stderr}");
}

#[test]
fn a_mixed_dcg_export_set_is_refused() {
    let dir = scratch_dir("xin-mixed");
    let (source, _ocgdb, base) = exported(dir.path());
    // A second export of other games beside the first; then the state a
    // kill between the renames leaves: one file of the second export
    // among the first's.
    let other = dir.path().join("other");
    source.quiet_ok(&[
        "export",
        "--format",
        "dcg",
        "--limit",
        "100",
        "-o",
        &other.display().to_string(),
    ]);
    let clean = fresh_db("xin_mixed_ref");
    import_ending(&clean, &base.with_extension("dci"), 0);
    for ext in ["dcn", "dci", "dcg"] {
        let mixed = dir.path().join(format!("mixed-{ext}"));
        copied_base(&base, &mixed);
        std::fs::copy(base.with_extension("dcset"), mixed.with_extension("dcset")).expect("copy");
        std::fs::copy(other.with_extension(ext), mixed.with_extension(ext)).expect("copy");
        let db = migrated_db("xin_mixed");
        let stderr = import_ending(&db, &mixed.with_extension("dci"), 2);
        assert!(
            stderr.contains(&format!(
                "incomplete export set: its .{ext} file differs from what"
            )),
            "{ext}: {stderr}"
        );
        assert_eq!(db.psql("SELECT count(*) FROM import_rejects"), "0");
        assert_eq!(db.psql("SELECT count(*) FROM games"), "0");
    }
}

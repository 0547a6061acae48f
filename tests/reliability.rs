//! Reliability of the import's own bookkeeping: migrations under
//! concurrency, restarts, modes, error messages.

use std::{
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use crate::common::{TestDb, fresh_db, run};

/// Polls `sql` (one boolean) until it is true, failing the test after a minute.
fn wait_until(db: &TestDb, what: &str, sql: &str) {
    let started = Instant::now();
    while db.psql(sql) != "t" {
        assert!(
            started.elapsed() < Duration::from_mins(1),
            "timed out waiting for {what}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// A psql session that takes advisory lock `key` and holds it until its
/// backend is terminated (or the server goes away); returns once it holds
/// it.
pub fn hold_advisory_lock(db: &TestDb, key: i64) -> Child {
    let child = Command::new("psql")
        .args(["-X", "-q", &db.url, "-c"])
        .arg(format!(
            "SELECT pg_advisory_lock({key}); SELECT pg_sleep(600);"
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn psql");
    wait_until(
        db,
        "the test's advisory lock",
        &format!(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                 AND ((classid::bigint << 32) | objid::bigint) = {key})"
        ),
    );
    child
}

/// The key of pgnload's migration lock (`db::MIGRATION_LOCK`).
const MIGRATION_LOCK: i64 = 0x7067_6e6c_6f61_6401;

#[test]
fn migrate_takes_its_lock_before_creating_anything() {
    let db = fresh_db("migrate_lock");
    let mut holder = hold_advisory_lock(&db, MIGRATION_LOCK);
    let mut migrate = db
        .pgnload()
        .args(["db", "migrate"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn migrate");
    // pgnload is now queued behind the held lock…
    wait_until(
        &db,
        "pgnload to wait for the migration lock",
        &format!(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                 AND ((classid::bigint << 32) | objid::bigint) = {MIGRATION_LOCK})"
        ),
    );
    // …having created nothing: a twin started at the same moment cannot
    // collide with it on the catalog.
    assert_eq!(
        db.psql("SELECT to_regclass('pgnload_migrations') IS NULL"),
        "t"
    );
    assert!(migrate.try_wait().expect("wait").is_none());
    // Killing psql would leave its backend sleeping with the lock held.
    db.psql(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
             AND ((classid::bigint << 32) | objid::bigint) = {MIGRATION_LOCK}"
    ));
    let _ = holder.wait();
    let out = migrate.wait_with_output().expect("migrate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        db.psql("SELECT count(*) FROM pgnload_migrations"),
        pgnload::store::db::MIGRATIONS.len().to_string()
    );
}

/// A migrated database answers a search without the migration lock (the
/// locked check is ~20 round trips, most of a search's wall time): with
/// the lock held elsewhere, `games` still answers. `lock_timeout` turns a
/// wait for the lock into an error instead of a hang.
#[test]
fn a_migrated_database_is_searched_without_the_migration_lock() {
    let db = fresh_db("migrated_no_lock");
    let migrate = run({
        let mut c = db.pgnload();
        c.args(["db", "migrate"]);
        c
    });
    assert!(migrate.status.success(), "{migrate:?}");
    let mut holder = hold_advisory_lock(&db, MIGRATION_LOCK);
    let games = run({
        let mut c = db.pgnload();
        c.env(
            "DATABASE_URL",
            format!("{}&options=-c%20lock_timeout%3D2000", db.url),
        )
        .args(["games", "--limit", "1", "--format", "json"]);
        c
    });
    db.psql(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
             AND ((classid::bigint << 32) | objid::bigint) = {MIGRATION_LOCK}"
    ));
    let _ = holder.wait();
    assert!(
        games.status.success(),
        "{}",
        String::from_utf8_lossy(&games.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&games.stdout), "", "no games yet");
}

#[test]
fn concurrent_migrations_apply_each_file_once() {
    for round in 0..4 {
        let db = fresh_db("migrate_race");
        let children: Vec<Child> = (0..6)
            .map(|_| {
                db.pgnload()
                    .args(["db", "migrate"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn migrate")
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().expect("migrate");
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(
            db.psql("SELECT count(*), count(DISTINCT version) FROM pgnload_migrations"),
            format!("{0}|{0}", pgnload::store::db::MIGRATIONS.len())
        );
    }
}

const GOOD: &str = "[Event \"good\"]\n[Site \"https://lichess.org/goodgam1\"]\n[Result \"1-0\"]\n\n1. e4 e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# 1-0\n\n";
const ILLEGAL: &str = "[Event \"bad\"]\n[Site \"https://lichess.org/badgame1\"]\n[Result \"1-0\"]\n\n1. e4 e5 2. Ke3 Nc6 1-0\n\n";

#[test]
fn restart_of_an_input_with_rejects_records_each_reject_once() {
    let dir = crate::common::scratch_dir("pgnload-restart-rejects");
    let file = dir.path().join("mixed.pgn");
    std::fs::write(&file, format!("{GOOD}{ILLEGAL}")).expect("write");
    let db = fresh_db("restart_rejects");
    let import = |extra: &[&str]| {
        let mut cmd = db.pgnload();
        cmd.args(["-q", "import"]).args(extra).arg(&file);
        run(cmd)
    };
    let first = import(&[]);
    assert_eq!(
        first.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    for _ in 0..2 {
        let again = import(&["--restart"]);
        let stderr = String::from_utf8_lossy(&again.stderr);
        assert_eq!(again.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("2 read = 0 imported + 1 already present + 1 rejected"),
            "{stderr}"
        );
    }
    assert_eq!(
        db.psql("SELECT count(*), min(game_number) FROM import_rejects"),
        "1|2"
    );
    assert_eq!(db.psql("SELECT count(*) FROM games"), "1");
}

/// A game with the given Site and movetext.
fn game(site: &str, white: &str, movetext: &str) -> String {
    format!(
        "[Event \"Rated Blitz game\"]\n[Site \"{site}\"]\n[White \"{white}\"]\n[Black \"b\"]\n[Result \"*\"]\n\n{movetext} *\n\n"
    )
}

#[test]
fn a_lichess_game_is_one_game_however_its_site_url_is_spelled() {
    let dir = crate::common::scratch_dir("pgnload-site-case");
    let file = dir.path().join("spellings.pgn");
    let games: String = [
        "https://lichess.org/AbCd1234",
        "https://Lichess.org/AbCd1234",
        "HTTPS://LICHESS.ORG/AbCd1234",
        "https://www.lichess.org/AbCd1234",
    ]
    .iter()
    .map(|site| game(site, "a", "1. e4 e5"))
    .collect();
    std::fs::write(&file, games).expect("write");
    let db = fresh_db("site_case");
    let out = run({
        let mut c = db.pgnload();
        c.args(["import"]).arg(&file);
        c
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("4 read = 1 imported + 3 already present + 0 rejected"),
        "{stderr}"
    );
    assert_eq!(
        db.psql("SELECT source, external_id FROM games"),
        "lichess|AbCd1234"
    );
    assert_eq!(db.psql("SELECT count(*) FROM import_conflicts"), "0");
}

#[test]
fn a_lichess_id_held_by_other_moves_is_a_conflict_located_twice() {
    let dir = crate::common::scratch_dir("pgnload-conflict");
    let first = dir.path().join("first.pgn");
    let second = dir.path().join("second.pgn");
    // In the first file: the id twice, the second copy with other moves.
    std::fs::write(
        &first,
        format!(
            "{}{}",
            game("https://lichess.org/Conf1234", "a", "1. e4 e5"),
            game("https://lichess.org/Conf1234", "a", "1. d4 d5")
        ),
    )
    .expect("write");
    // In another file: the same id with other moves again, after an
    // unrelated game.
    std::fs::write(
        &second,
        format!(
            "{}{}",
            game("https://lichess.org/Othr1234", "c", "1. c4"),
            game("https://lichess.org/Conf1234", "a", "1. Nf3 Nf6")
        ),
    )
    .expect("write");
    let db = fresh_db("conflict");
    let import = |file: &std::path::Path| {
        let mut c = db.pgnload();
        c.args(["import", "--batch-games", "1"]).arg(file);
        run(c)
    };
    let out = import(&first);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("2 read = 1 imported + 1 already present + 0 rejected"),
        "{stderr}"
    );
    assert!(stderr.contains("game #2 at byte"), "{stderr}");
    assert!(
        stderr.contains("lichess:Conf1234 is already held by games.id"),
        "{stderr}"
    );
    let out = import(&second);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("first.pgn, game #1 at byte 0"), "{stderr}");
    let kept = db.psql("SELECT id, byte_offset FROM games WHERE external_id = 'Conf1234'");
    let kept_id = kept.split('|').next().expect("id").to_owned();
    assert_eq!(kept.split('|').nth(1), Some("0"));
    let second_offset = game("https://lichess.org/Othr1234", "c", "1. c4").len();
    let first_offset = game("https://lichess.org/Conf1234", "a", "1. e4 e5").len();
    assert_eq!(
        db.psql(
            "SELECT right(f.path, 10), c.game_number, c.byte_offset,
                    c.existing_game_id, c.existing_game_number, c.existing_byte_offset
             FROM import_conflicts c JOIN import_files f ON f.id = c.file_id
             ORDER BY f.path"
        ),
        format!(
            "/first.pgn|2|{first_offset}|{kept_id}|1|0\nsecond.pgn|2|{second_offset}|{kept_id}|1|0"
        )
    );
    // A rerun finds the conflicts again and records them once.
    let out = run({
        let mut c = db.pgnload();
        c.args(["import", "--restart"]).arg(&first).arg(&second);
        c
    });
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(db.psql("SELECT count(*) FROM import_conflicts"), "2");
    assert_eq!(db.psql("SELECT count(*) FROM games"), "2");
}

#[test]
fn a_non_lichess_game_is_stored_once_whatever_file_or_label_brings_it() {
    let dir = crate::common::scratch_dir("pgnload-same-game");
    let twic = game("Wijk aan Zee NED", "Carlsen, Magnus", "1. e4 c5 2. Nf3");
    let other = game("Oslo NOR", "Carlsen, Magnus", "1. d4 Nf6");
    let kdb = dir.path().join("kdb.pgn");
    let combined = dir.path().join("combined.pgn");
    std::fs::write(&kdb, &twic).expect("write");
    std::fs::write(&combined, format!("{other}{twic}")).expect("write");
    let db = fresh_db("same_game");
    let out = run({
        let mut c = db.pgnload();
        c.args(["import"]).arg(&kdb).arg(&combined);
        c
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("3 read = 2 imported + 1 already present + 0 rejected"),
        "{stderr}"
    );
    // Under another label, too (beside a game new to the database).
    let relabelled = dir.path().join("relabelled.pgn");
    let new = game("Tata Steel", "Giri, Anish", "1. c4 e5");
    std::fs::write(&relabelled, format!("{twic}{new}")).expect("write");
    let out = run({
        let mut c = db.pgnload();
        c.args(["import", "--source", "twic"]).arg(&relabelled);
        c
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("2 read = 1 imported + 1 already present + 0 rejected"),
        "{stderr}"
    );
    assert_eq!(
        db.psql("SELECT source, count(*) FROM games GROUP BY source ORDER BY source"),
        "pgn|2\ntwic|1"
    );
    // One player for the name in both files.
    assert_eq!(
        db.psql("SELECT count(*) FROM players WHERE username = 'Carlsen, Magnus'"),
        "1"
    );
}

#[test]
fn an_import_started_while_the_server_is_down_waits_for_it() {
    let dir = crate::common::scratch_dir("pgnload-late-server");
    let cluster = pgnload::store::embedded::EmbeddedCluster::new(dir.path().join("cluster"))
        .expect("cluster");
    cluster.start_persistent().expect("initialize");
    cluster.stop().expect("stop");
    let mut child = crate::common::pgnload()
        .env("DATABASE_URL", cluster.connection_url())
        .args(["import"])
        .arg(crate::common::data("lichess-2025-05-sample.pgn"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pgnload");
    // Start the server once pgnload has failed to connect and said it retries.
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        child.stderr.take().expect("stderr piped"),
    ));
    let mut stderr = String::new();
    for line in lines.by_ref() {
        let line = line.expect("stderr");
        stderr.push_str(&line);
        stderr.push('\n');
        if line.contains("retrying in") {
            break;
        }
    }
    cluster.start_persistent().expect("start");
    for line in lines {
        stderr.push_str(&line.expect("stderr"));
        stderr.push('\n');
    }
    let out = child.wait_with_output().expect("import");
    let rows = TestDb::existing(cluster.connection_url()).psql("SELECT count(*) FROM games");
    cluster.stop().expect("stop");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("connecting to"), "{stderr}");
    assert!(stderr.contains("retrying in"), "{stderr}");
    assert_eq!(rows, "438");
}

#[test]
fn a_server_error_is_printed_once_with_its_message_and_sqlstate() {
    let db = crate::common::migrated_db("server_error");
    db.psql(
        "CREATE FUNCTION refuse_games() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'games are closed today' USING HINT = 'try tomorrow'; END $$;
         CREATE TRIGGER refuse_games BEFORE INSERT ON games
             FOR EACH ROW EXECUTE FUNCTION refuse_games()",
    );
    let out = run({
        let mut c = db.pgnload();
        c.args(["import", "--mode", "incremental"])
            .arg(crate::common::data("lichess-2025-05-sample.pgn"));
        c
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("ERROR: games are closed today (SQLSTATE P0001); hint: try tomorrow"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("games are closed today").count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("db error"), "{stderr}");
    // The input's record keeps the server's message too.
    assert!(
        db.psql("SELECT last_error FROM import_files")
            .contains("games are closed today (SQLSTATE P0001)")
    );
}

#[test]
fn an_unreadable_input_is_named_once_with_its_os_error_once() {
    let db = fresh_db("missing_input");
    let out = run({
        let mut c = db.pgnload();
        c.args(["import", "/nonexistent-dir/missing-input.pgn"]);
        c
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("missing-input.pgn"))
        .unwrap_or_else(|| panic!("no line names the input:\n{stderr}"));
    assert_eq!(line.matches("missing-input.pgn").count(), 1, "{line}");
    assert_eq!(
        line.matches("No such file or directory").count(),
        1,
        "{line}"
    );
}

#[test]
fn the_nightly_script_reads_only_new_or_changed_files() {
    let dir = crate::common::scratch_dir("pgnload-nightly");
    let sample = std::fs::read(crate::common::data("lichess-2025-05-sample.pgn")).expect("sample");
    let dump = dir.path().join("dump-2025-05.pgn");
    std::fs::write(&dump, &sample).expect("write");
    let db = fresh_db("nightly");
    let nightly = || {
        let mut c = Command::new("bash");
        c.arg(crate::common::repo().join("scripts/nightly-import.sh"))
            .arg(dir.path())
            .env("DATABASE_URL", &db.url)
            .env("PGNLOAD_BIN", env!("CARGO_BIN_EXE_pgnload"))
            .env("PGNLOAD_SETTLE_SECONDS", "0");
        run(c)
    };
    let first = nightly();
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(db.psql("SELECT count(*) FROM games"), "438");
    // Unchanged: not even passed to pgnload (no run recorded, no read).
    let second = nightly();
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert_eq!(second.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("nothing new among 1 PGN file"), "{stdout}");
    assert_eq!(db.psql("SELECT count(*) FROM import_runs"), "1");
    // Written to since: passed again, and pgnload's fingerprint decides.
    let mut changed = sample.clone();
    changed.extend_from_slice(game("https://lichess.org/Nightly1", "n", "1. e4 e5").as_bytes());
    std::fs::write(&dump, &changed).expect("write");
    let third = nightly();
    assert_eq!(
        third.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
    assert_eq!(db.psql("SELECT count(*) FROM games"), "439");
    assert_eq!(db.psql("SELECT count(*) FROM import_runs"), "2");
}

/// A position another writer commits after the import looked it up (found
/// absent) and before the import inserts it: the import's insert waits for
/// that writer, finds the position taken when it commits, and reuses the
/// committed row instead of failing or storing the position twice.
#[test]
fn a_position_committed_by_another_writer_after_the_lookup_is_reused() {
    use std::io::Write;
    let db = crate::common::migrated_db("raced_position");
    let mut writer = Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", &db.url])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn psql");
    let mut sql = writer.stdin.take().expect("psql's stdin");
    writeln!(sql, "BEGIN; {};", crate::import::start_position_row()).expect("write to psql");
    wait_until(
        &db,
        "the other writer's uncommitted position",
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
             WHERE state = 'idle in transaction' AND query LIKE 'INSERT INTO positions%')",
    );
    let import = db
        .pgnload()
        .args(["-q", "import", "--mode", "incremental"])
        .arg(crate::common::data("lichess-2025-05-sample.pgn"))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pgnload");
    wait_until(
        &db,
        "the import's insert to wait for the other writer",
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
             WHERE wait_event_type = 'Lock' AND query LIKE 'COPY positions%')",
    );
    writeln!(sql, "COMMIT;").expect("write to psql");
    drop(sql);
    assert!(writer.wait().expect("wait for psql").success());
    let out = import.wait_with_output().expect("wait for pgnload");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("438 read = 438 imported + 0 already present + 0 rejected"),
        "{stderr}"
    );
    crate::import::assert_start_position_reused(&db);
    let clean = fresh_db("raced_position_ref");
    let sample = crate::common::data("lichess-2025-05-sample.pgn");
    let reference = clean.quiet(&["import", &sample.to_string_lossy()]);
    assert_eq!(reference.status.code(), Some(0), "{reference:?}");
    let positions = "SELECT count(*), count(DISTINCT normalized_fen) FROM positions";
    assert_eq!(db.psql(positions), clean.psql(positions));
}

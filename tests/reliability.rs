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
            started.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// A psql session that takes advisory lock `key` and holds it until its
/// backend is terminated.
fn hold_advisory_lock(db: &TestDb, key: i64) -> Child {
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
        pgnload::db::MIGRATIONS.len().to_string()
    );
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
            format!("{0}|{0}", pgnload::db::MIGRATIONS.len())
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

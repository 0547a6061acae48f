//! `pgnload db backup` / `db restore` against the real `pg_dump`, `pg_restore`
//! and server: a restored database holds exactly what was backed up, and a
//! restore never merges into a database that holds anything.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Output,
};

use pgnload::store::embedded::EmbeddedCluster;

use crate::common::{
    TestDb, assert_games_verify_clean, data, embedded_pgnload, fresh_db, migrated_db, run,
    scratch_dir,
};

/// Row counts of the data tables, and digests of the positions and games
/// in id order: equal on both sides only if the restore is exact.
const CONTENTS: &str = "SELECT (SELECT count(*) FROM games), (SELECT count(*) FROM moves), \
     (SELECT count(*) FROM positions), (SELECT count(*) FROM players), \
     (SELECT count(*) FROM events), \
     (SELECT md5(string_agg(normalized_fen || fen_hash, ',' ORDER BY id)) FROM positions), \
     (SELECT md5(string_agg(concat_ws(',', source, external_id, white_player_id, black_player_id, \
         encode(moves, 'hex'), tags::text), ';' ORDER BY id)) FROM games), \
     (SELECT md5(string_agg(concat_ws(',', game_id, ply, position_id, position_after_id, \
         uci, san, clock_ms), ';' ORDER BY game_id, ply)) FROM moves)";

/// The user objects of a database (what a restore must not merge into).
const OBJECTS: &str = "SELECT count(*) FROM pg_class c \
     WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'S', 'v', 'm')";

/// [`CONTENTS`] of the embedded cluster in `data_dir`, read through a
/// session of its own (the cluster stops again afterwards).
fn embedded_contents(data_dir: &Path) -> String {
    let cluster = EmbeddedCluster::new(data_dir).expect("the cluster's programs");
    let session = cluster.start_session().expect("starting the cluster");
    let contents = TestDb::existing(cluster.connection_url()).psql(CONTENTS);
    session.close().expect("stopping the cluster");
    contents
}

fn sample() -> PathBuf {
    data("lichess-2025-05-sample.pgn")
}

fn assert_ok(output: &Output, what: &str) {
    assert_eq!(
        output.status.code(),
        Some(0),
        "{what}:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Exit code 2 and a message on stderr holding `words`.
fn assert_refused(output: &Output, words: &str, what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{what}: {stderr}");
    assert!(stderr.contains(words), "{what}: {stderr}");
}

/// A database on the test cluster holding the Lichess sample, and a
/// custom-format backup of it in `dir`.
fn imported_with_backup(label: &str, dir: &Path) -> (TestDb, PathBuf) {
    let db = fresh_db(label);
    assert_ok(
        &run({
            let mut c = db.pgnload();
            c.arg("-q").arg("import").arg(sample());
            c
        }),
        "import",
    );
    let file = dir.join("sample.dump");
    assert_ok(
        &run({
            let mut c = db.pgnload();
            c.args(["db", "backup"]).arg(&file);
            c
        }),
        "backup",
    );
    (db, file)
}

/// The case: import into an embedded data dir, back it up as one
/// file and as a directory, restore each into a fresh data dir; both pass
/// `verify --games` and hold exactly the same rows.
#[test]
fn embedded_backup_restores_exactly_into_fresh_data_dirs() {
    let scratch = scratch_dir("pgnload-backup-");
    let source = scratch.path().join("source");
    let import = run({
        let mut c = embedded_pgnload(&source);
        c.arg("-q").arg("import").arg(sample());
        c
    });
    assert_ok(&import, "import");
    let expected = embedded_contents(&source);
    assert!(expected.starts_with("438|28538|"), "{expected}");

    let file = scratch.path().join("backup.dump");
    let dir = scratch.path().join("backup.d/");
    for (path, extra) in [(&file, &[][..]), (&dir, &["--jobs", "2"][..])] {
        let backup = run({
            let mut c = embedded_pgnload(&source);
            c.args(["db", "backup"]).arg(path).args(extra);
            c
        });
        assert_ok(&backup, "backup");
        let said = String::from_utf8_lossy(&backup.stderr);
        assert!(said.contains("pg_dump"), "no progress line: {said}");
    }
    assert!(file.is_file());
    assert!(dir.join("toc.dat").is_file(), "not a directory archive");
    let leftovers: Vec<_> = fs::read_dir(scratch.path())
        .expect("scratch dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    for (name, path) in [("from-file", &file), ("from-dir", &dir)] {
        let target = scratch.path().join(name);
        let restore = run({
            let mut c = embedded_pgnload(&target);
            c.args(["db", "restore"]).arg(path);
            c
        });
        assert_ok(&restore, name);
        assert_games_verify_clean(&target, &scratch.path().join(format!("{name}.tsv")), name);
        assert_eq!(embedded_contents(&target), expected, "{name}");
    }

    // A backup never overwrites: the same file again is refused, untouched.
    let before = fs::read(&file).expect("backup");
    let again = run({
        let mut c = embedded_pgnload(&source);
        c.args(["db", "backup"]).arg(&file);
        c
    });
    assert_refused(&again, "already exists", "backup over a backup");
    assert_eq!(fs::read(&file).expect("backup"), before);
}

/// A restore into a database holding pgnload's tables, or only a table of
/// its own, is refused before anything is written, and the database is
/// left as it was (no merge).
#[test]
fn restore_into_a_non_empty_database_is_refused_and_changes_nothing() {
    let scratch = scratch_dir("pgnload-backup-");
    let (populated, file) = imported_with_backup("bk_full", scratch.path());
    let migrated = migrated_db("bk_migrated");
    let foreign = fresh_db("bk_foreign");
    foreign.psql("CREATE TABLE notes (id int); INSERT INTO notes VALUES (1), (2)");
    for (db, what) in [
        (&populated, "the backed-up database itself"),
        (&migrated, "a migrated, empty schema"),
        (&foreign, "one table of someone else's"),
    ] {
        let objects = db.psql(OBJECTS);
        let before = db.psql("SELECT count(*) FROM pg_class");
        let restore = run({
            let mut c = db.pgnload();
            c.args(["db", "restore"]).arg(&file);
            c
        });
        assert_refused(&restore, "is not empty", what);
        assert_eq!(db.psql(OBJECTS), objects, "{what}");
        assert_eq!(db.psql("SELECT count(*) FROM pg_class"), before, "{what}");
    }
    assert_eq!(foreign.psql("SELECT count(*) FROM notes"), "2");
    assert!(populated.psql(CONTENTS).starts_with("438|28538|"));
}

/// With `--database-url`, and a password in it: the restore into a new
/// database is exact, and the password is printed nowhere.
#[test]
fn backup_and_restore_through_a_database_url() {
    let scratch = scratch_dir("pgnload-backup-");
    let source = fresh_db("bk_url_src");
    assert_ok(
        &run({
            let mut c = source.pgnload();
            c.arg("-q").arg("import").arg(sample());
            c
        }),
        "import",
    );
    // The test cluster trusts local connections, so the password is not
    // checked, but it travels the way a real one would.
    let secret = "hunter2-backup-secret";
    let with_password = |db: &TestDb| format!("{}&password={secret}", db.url);
    let file = scratch.path().join("url.dump");
    let backup = run({
        let mut c = source.pgnload();
        c.env("DATABASE_URL", with_password(&source))
            .args(["db", "backup"])
            .arg(&file);
        c
    });
    assert_ok(&backup, "backup");

    let target = fresh_db("bk_url_dst");
    let restore = run({
        let mut c = target.pgnload();
        c.env("DATABASE_URL", with_password(&target))
            .args(["db", "restore"])
            .arg(&file);
        c
    });
    assert_ok(&restore, "restore");
    for output in [&backup, &restore] {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!text.contains(secret), "{text}");
    }
    assert_eq!(target.psql(CONTENTS), source.psql(CONTENTS));
    let report = scratch.path().join("verify.tsv");
    assert_ok(
        &run({
            let mut c = target.pgnload();
            c.args(["-q", "verify", "--games", "--report"]).arg(&report);
            c
        }),
        "verify --games",
    );
}

/// A missing path, a file that is no archive and a truncated archive are
/// each refused with a message that says so, and the target stays empty.
#[test]
fn a_missing_or_damaged_backup_is_refused_clearly() {
    let scratch = scratch_dir("pgnload-backup-");
    let (_source, file) = imported_with_backup("bk_bad_src", scratch.path());
    let target = fresh_db("bk_bad_dst");
    let restore = |path: &Path| {
        run({
            let mut c = target.pgnload();
            c.args(["db", "restore"]).arg(path);
            c
        })
    };

    let missing = scratch.path().join("no-such.dump");
    assert_refused(&restore(&missing), "no backup at", "a missing file");

    let garbage = scratch.path().join("garbage.dump");
    fs::write(&garbage, b"PGDMP? no: [Event \"x\"] 1. e4 *\n").expect("write");
    assert_refused(
        &restore(&garbage),
        "is not a backup pg_restore can read (nothing was changed)",
        "garbage",
    );
    assert_eq!(target.psql(OBJECTS), "0");

    // The table of contents is whole but the data is cut: pg_restore fails
    // part-way, and the one transaction of a single-job restore rolls back.
    let bytes = fs::read(&file).expect("backup");
    let truncated = scratch.path().join("truncated.dump");
    fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("write");
    let output = restore(&truncated);
    assert_refused(&output, "pg_restore failed", "a truncated backup");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("rolled back"), "{stderr}");
    assert_eq!(target.psql(OBJECTS), "0", "a failed restore left objects");
}

/// SIGTERM (or Ctrl-C) during a backup stops `pg_dump`, removes what it had
/// written, and exits with code 3. `pg_dump` is a stand-in here (found through
/// `PG_BIN`), which writes its file and then waits to be stopped, so that
/// the signal lands while it runs whatever the machine's speed.
#[test]
fn an_interrupted_backup_leaves_no_file_and_exits_3() {
    use nix::{
        sys::signal::{Signal, kill},
        unistd::Pid,
    };

    let scratch = scratch_dir("pgnload-backup-");
    let real = pgnload::store::embedded::PgBinaries::locate().expect("PostgreSQL programs");
    let bin = stand_in(
        scratch.path(),
        &format!(
            "if [ \"$1\" = --version ]; then exec '{}' --version; fi\n\
             for a; do [ \"$prev\" = --file ] && file=$a; prev=$a; done\n\
             echo partial > \"$file\"\n\
             exec sleep 300\n",
            real.tool("pg_dump").display()
        ),
    );

    let db = fresh_db("bk_interrupt");
    let file = scratch.path().join("stopped.dump");
    let child = db
        .pgnload()
        .env("PG_BIN", &bin)
        .args(["db", "backup"])
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn pgnload");
    let partial = || {
        fs::read_dir(scratch.path())
            .expect("scratch dir")
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().contains(".partial-"))
    };
    // Not a timing: the loop only waits for the stand-in's file; the
    // bound keeps a broken build from hanging the suite.
    let mut polls = 0;
    while !partial() {
        polls += 1;
        assert!(polls < 6000, "pg_dump's stand-in never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let output = child.wait_with_output().expect("wait for pgnload");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("stopped by an interrupt; no backup was written"),
        "{stderr}"
    );
    assert!(!file.exists(), "a backup file after an interrupt");
    assert!(!partial(), "the unfinished file was left behind");
}

/// A directory for `PG_BIN` in `dir` whose `pg_dump` is a shell script
/// with `body`.
fn stand_in(dir: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    fs::create_dir(&bin).expect("bin dir");
    let script = bin.join("pg_dump");
    fs::write(&script, format!("#!/bin/sh\n{body}")).expect("write the stand-in");
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).expect("chmod");
    bin
}

/// A `pg_dump` of another major version than the server's, or none at all
/// where `PG_BIN` points, is refused before anything is written, saying
/// which versions and where it looked.
#[test]
fn a_pg_dump_of_another_version_or_none_is_refused() {
    let scratch = scratch_dir("pgnload-backup-");
    let db = fresh_db("bk_version");
    let file = scratch.path().join("never.dump");
    let backup = |bin: &Path| {
        run({
            let mut c = db.pgnload();
            c.env("PG_BIN", bin).args(["db", "backup"]).arg(&file);
            c
        })
    };
    let old = stand_in(scratch.path(), "echo 'pg_dump (PostgreSQL) 9.6.24'\n");
    assert_refused(
        &backup(&old),
        "is PostgreSQL 9.6.24 but the server is PostgreSQL",
        "9.6",
    );
    let empty = scratch.path().join("empty");
    fs::create_dir(&empty).expect("empty dir");
    assert_refused(
        &backup(&empty),
        "pg_dump not found (looked in:",
        "no pg_dump",
    );
    assert!(!file.exists());
}

/// A backup of an older schema (only the first migration applied) is
/// brought up to date by the restore, as an import would.
#[test]
fn a_restored_older_schema_is_migrated() {
    use pgnload::store::db::{MIGRATIONS, checksum};

    let scratch = scratch_dir("pgnload-backup-");
    let old = fresh_db("bk_old_schema");
    let first = &MIGRATIONS[0];
    old.psql(first.sql);
    old.psql(&format!(
        "CREATE TABLE pgnload_migrations (version integer PRIMARY KEY, name text NOT NULL, \
         checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now()); \
         INSERT INTO pgnload_migrations (version, name, checksum) VALUES (1, '{}', '{}')",
        first.name,
        checksum(first.sql)
    ));
    let file = scratch.path().join("old.dump");
    assert_ok(
        &run({
            let mut c = old.pgnload();
            c.args(["db", "backup"]).arg(&file);
            c
        }),
        "backup",
    );
    let target = fresh_db("bk_old_restored");
    let restore = run({
        let mut c = target.pgnload();
        c.args(["db", "restore"]).arg(&file);
        c
    });
    assert_ok(&restore, "restore");
    let said = String::from_utf8_lossy(&restore.stdout);
    for migration in &MIGRATIONS[1..] {
        assert!(
            said.contains(&format!("applied {}", migration.name)),
            "{said}"
        );
    }
    assert_eq!(
        target.psql("SELECT count(*) FROM pgnload_migrations"),
        MIGRATIONS.len().to_string()
    );
}

/// A `kill -9` of pgnload during a backup leaves nothing running and no
/// secret behind (issue 26, item 11): the tool dies with pgnload (the
/// parent-death signal of its guard), and the password it was given was
/// never in a file that could outlive the run. The stand-in `pg_dump` checks
/// the password reached it, records its pid, and waits.
#[test]
fn a_killed_backup_leaves_no_tool_running_and_no_password_file() {
    use nix::{
        sys::signal::{Signal, kill},
        unistd::Pid,
    };

    let scratch = scratch_dir("pgnload-backup-");
    let tmp = scratch.path().join("tmp");
    fs::create_dir(&tmp).expect("private TMPDIR");
    let secret = "hunter2-killed-backup";
    let real = pgnload::store::embedded::PgBinaries::locate().expect("PostgreSQL programs");
    let pid_file = scratch.path().join("tool.pid");
    let seen_file = scratch.path().join("password.seen");
    let bin = stand_in(
        scratch.path(),
        &format!(
            "if [ \"$1\" = --version ]; then exec '{}' --version; fi\n\
             grep -q '{secret}' \"$PGPASSFILE\" && echo yes > '{}'\n\
             echo $$ > '{}.tmp' && mv '{}.tmp' '{}'\n\
             exec sleep 300\n",
            real.tool("pg_dump").display(),
            seen_file.display(),
            pid_file.display(),
            pid_file.display(),
            pid_file.display(),
        ),
    );
    let db = fresh_db("bk_kill9");
    let mut child = db
        .pgnload()
        .env("DATABASE_URL", format!("{}&password={secret}", db.url))
        .env("PG_BIN", &bin)
        .env("TMPDIR", &tmp)
        .args(["db", "backup"])
        .arg(scratch.path().join("killed.dump"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn pgnload");
    // Not a timing: the loops wait for an event; the bounds keep a broken
    // build from hanging the suite.
    let mut polls = 0;
    while !pid_file.exists() {
        polls += 1;
        assert!(polls < 6000, "pg_dump's stand-in never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let tool: i32 = fs::read_to_string(&pid_file)
        .expect("pid file")
        .trim()
        .parse()
        .expect("a pid");
    assert_eq!(
        fs::read_to_string(&seen_file).ok().as_deref(),
        Some("yes\n"),
        "the tool did not get the password through PGPASSFILE"
    );
    kill(
        Pid::from_raw(i32::try_from(child.id()).expect("pid")),
        Signal::SIGKILL,
    )
    .expect("SIGKILL");
    child.wait().expect("reap pgnload");
    let alive = || kill(Pid::from_raw(tool), None).is_ok();
    let mut polls = 0;
    while alive() && polls < 1000 {
        polls += 1;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if alive() {
        let _ = kill(Pid::from_raw(tool), Signal::SIGKILL);
        panic!("pg_dump outlived the killed pgnload");
    }
    let left: Vec<_> = fs::read_dir(&tmp)
        .expect("TMPDIR")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}

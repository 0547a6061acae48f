//! Progress of the long commands, as a log (stderr is no terminal here, so
//! the reporter writes lines): every phase and the index, table or
//! constraint it works on named on stderr, stdout the same as with
//! `--quiet`, and nothing on stderr with `--quiet`.

use std::process::Output;

use crate::common::{TestDb, data, fresh_db, run, scratch_dir, stderr};

/// `pgnload [-q] ARGS` on `db`.
fn pgnload(db: &TestDb, quiet: bool, args: &[&str]) -> Output {
    run({
        let mut c = db.pgnload();
        if quiet {
            c.arg("-q");
        }
        c.args(args);
        c
    })
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_ok(out: &Output, what: &str) {
    assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(out));
}

/// A database holding the Lichess sample, imported quietly.
fn sample_db(label: &str) -> TestDb {
    let db = fresh_db(label);
    let sample = data("lichess-2025-05-sample.pgn");
    assert_ok(
        &pgnload(&db, true, &["import", &sample.to_string_lossy()]),
        "import",
    );
    db
}

/// The one line a command prints on stdout, which must begin with `start`
/// (it holds a path and seconds, so it is not compared whole).
fn assert_one_line(out: &Output, start: &str) {
    let text = stdout(out);
    assert!(
        text.starts_with(start) && text.lines().count() == 1,
        "stdout: {text}"
    );
}

/// The finish of a bulk load is its own phase: every index and constraint
/// it rebuilds is named with its place in the list, then the tables
/// analyzed; `--quiet` names none.
#[test]
fn a_bulk_finish_names_each_index_and_constraint_it_rebuilds() {
    let sample = data("lichess-2025-05-sample.pgn");
    let sample = sample.to_string_lossy();
    let db = fresh_db("progress_bulk");
    let out = pgnload(&db, false, &["import", "--mode", "bulk", &sample]);
    assert_ok(&out, "import");
    assert_eq!(stdout(&out), "");
    let said = stderr(&out);
    let objects =
        db.psql("SELECT kind || ' ' || object_name FROM import_bulk_objects ORDER BY position");
    assert!(objects.lines().count() >= 10, "{objects}");
    for object in objects.lines() {
        assert!(
            said.contains(&format!("pgnload import: rebuilding {object} (")),
            "{object} not named: {said}"
        );
    }
    for table in ["positions", "moves", "games"] {
        assert!(
            said.contains(&format!("rebuilding statistics of {table} (")),
            "{said}"
        );
    }
    let steps = objects.lines().count() + 3;
    assert!(said.contains(&format!("({steps} of {steps})")), "{said}");
    // The longest builds start first: the GIN index on fen_hash before
    // every B-tree and constraint, so that no connection ends alone on it.
    let methods = db.psql(
        "SELECT string_agg(coalesce(a.amname, 'constraint'), ',' ORDER BY o.position)
         FROM import_bulk_objects o
         LEFT JOIN pg_class c ON c.relname = o.object_name AND c.relkind = 'i' AND o.kind = 'index'
         LEFT JOIN pg_am a ON a.oid = c.relam",
    );
    let first_other = methods.split(',').position(|m| m != "gin");
    assert!(
        methods.starts_with("gin,")
            && methods
                .split(',')
                .skip(first_other.unwrap_or(0))
                .all(|m| m != "gin"),
        "{methods}"
    );
    assert!(
        said.contains(&format!(
            "rebuilding index positions_fen_hash_idx (1 of {steps})"
        )),
        "{said}"
    );

    let quiet = fresh_db("progress_bulk_quiet");
    let out = pgnload(&quiet, true, &["import", "--mode", "bulk", &sample]);
    assert_ok(&out, "quiet import");
    assert_eq!(stdout(&out), "");
    assert!(!stderr(&out).contains("rebuilding"), "{}", stderr(&out));
}

/// `db backup` names each table it dumps; `db restore` each table's data,
/// index and constraint with its place among all of them (the last is
/// "N of N"); stdout is the summary line alone, and `--quiet` says nothing.
#[test]
fn backup_and_restore_name_each_table_and_what_they_build() {
    let db = sample_db("progress_backup");
    let dir = scratch_dir("pgnload-progress-");
    let file = dir.path().join("sample.dump");
    let file = file.to_string_lossy();
    let out = pgnload(&db, false, &["db", "backup", &file]);
    assert_ok(&out, "backup");
    assert_one_line(&out, "backup written: ");
    let said = stderr(&out);
    for table in ["games", "moves", "positions", "players"] {
        assert!(
            said.contains(&format!(
                "pgnload db backup: dumping table public.{table}\n"
            )),
            "{table}: {said}"
        );
    }
    let quiet_file = dir.path().join("quiet.dump");
    let out = pgnload(&db, true, &["db", "backup", &quiet_file.to_string_lossy()]);
    assert_ok(&out, "quiet backup");
    assert_one_line(&out, "backup written: ");
    assert_eq!(stderr(&out), "");

    let target = fresh_db("progress_restore");
    let out = pgnload(&target, false, &["db", "restore", &file]);
    assert_ok(&out, "restore");
    assert_one_line(&out, "restored ");
    let said = stderr(&out);
    for step in [
        "table data public.games",
        "table data public.positions",
        "constraint public.positions positions_pkey",
        "index public.moves_position_game_idx",
        "foreign key public.moves moves_game_id_fkey",
    ] {
        assert!(
            said.contains(&format!("pgnload db restore: restoring {step} (")),
            "{step}: {said}"
        );
    }
    let steps: Vec<&str> = said
        .lines()
        .filter(|line| line.starts_with("pgnload db restore: restoring "))
        .collect();
    let n = steps.len();
    assert!(
        steps
            .last()
            .is_some_and(|last| last.ends_with(&format!("({n} of {n})"))),
        "{said}"
    );
    assert!(
        said.contains("pgnload db restore: applying migrations"),
        "{said}"
    );

    let quiet = fresh_db("progress_restore_quiet");
    let out = pgnload(&quiet, true, &["db", "restore", &file]);
    assert_ok(&out, "quiet restore");
    assert_one_line(&out, "restored ");
    assert_eq!(stderr(&out), "");
}

/// `db explorer enable` names the count and the key's build, `compact` its
/// count, `verify --explorer` its recount; stdout is what it is with
/// `--quiet`.
#[test]
fn the_explorer_commands_name_their_phases() {
    let db = sample_db("progress_explorer");
    let out = pgnload(&db, false, &["db", "explorer", "enable"]);
    assert_ok(&out, "enable");
    assert_one_line(&out, "explorer counters enabled: ");
    let said = stderr(&out);
    for phase in [
        "pgnload db explorer: counting the games imported into the explorer counters\n",
        "pgnload db explorer: building the explorer counters' key\n",
    ] {
        assert!(said.contains(phase), "{said}");
    }

    let out = pgnload(&db, false, &["db", "explorer", "compact"]);
    assert_ok(&out, "compact");
    assert_one_line(&out, "explorer counters: ");
    assert_eq!(
        stderr(&out),
        "pgnload db explorer: counting the positions imports queued\n"
    );
    let out = pgnload(&db, true, &["db", "explorer", "compact"]);
    assert_eq!(stderr(&out), "");

    let dir = scratch_dir("pgnload-progress-");
    let report = dir.path().join("explorer.tsv");
    let args = [
        "verify",
        "--explorer",
        "--report",
        &report.to_string_lossy(),
    ];
    let shown = pgnload(&db, false, &args);
    let quiet = pgnload(&db, true, &args);
    assert_ok(&shown, "verify --explorer");
    assert_ok(&quiet, "verify --explorer -q");
    assert_eq!(stdout(&shown), stdout(&quiet));
    assert_eq!(
        stderr(&shown),
        "pgnload verify: recounting the explorer counters from games and moves\n"
    );
    assert_eq!(stderr(&quiet), "");
}

/// Every export format says how many games it writes; a PGN export to
/// stdout writes the same bytes there as with `--quiet`.
#[test]
fn every_export_format_says_what_it_writes_and_leaves_stdout_alone() {
    let db = sample_db("progress_export");
    let games = db.psql("SELECT count(*) FROM games");
    let line = format!("pgnload export: {games} games to write\n");

    let shown = pgnload(&db, false, &["export"]);
    let quiet = pgnload(&db, true, &["export"]);
    assert_ok(&shown, "export");
    assert_ok(&quiet, "export -q");
    assert!(quiet.stdout.starts_with(b"[Event "), "{}", stdout(&quiet));
    assert_eq!(shown.stdout, quiet.stdout);
    assert!(stderr(&shown).starts_with(&line), "{}", stderr(&shown));
    // The summary (stderr when the games go to stdout) stays, alone.
    assert_eq!(stderr(&quiet), format!("pgnload: exported {games} games\n"));

    let dir = scratch_dir("pgnload-progress-");
    for format in ["pgn", "dcg", "ocgdb"] {
        let output = dir.path().join(format!("all-{format}"));
        let output = output.to_string_lossy();
        let out = pgnload(&db, false, &["export", "--format", format, "-o", &output]);
        assert_ok(&out, format);
        assert!(
            stderr(&out).starts_with(&line),
            "{format}: {}",
            stderr(&out)
        );
    }
}

//! The opening explorer: counters kept by both import modes equal a
//! recount (`verify --explorer`, which also catches a corrupted row).

use std::path::{Path, PathBuf};

use crate::{
    common::{TestDb, data, fresh_db, run, scratch_dir},
    import::{assert_ok, import},
    resume::renamed_sample,
};

/// The start position's normalized FEN.
const START: &str = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -";

/// The Lichess sample, a renamed copy of it (same games, other ids: every
/// count doubles), two over-the-board files and an antichess file.
fn corpus(dir: &Path) -> Vec<PathBuf> {
    let copy = dir.join("renamed-1.pgn");
    std::fs::write(&copy, renamed_sample(1)).expect("write the renamed copy");
    vec![
        data("lichess-2025-05-sample.pgn"),
        copy,
        data("kasparov-deep-blue-1997.pgn"),
        data("nepomniachtchi-liren-game1.pgn"),
        data("antichess-programfox.pgn"),
    ]
}

/// `pgnload verify --explorer` on `db`: its exit code and stdout.
fn verify_explorer(db: &TestDb, dir: &Path) -> (Option<i32>, String) {
    let out = run({
        let mut c = db.pgnload();
        c.args(["-q", "verify", "--explorer", "--report"])
            .arg(dir.join("explorer.tsv"));
        c
    });
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn counters_equal_a_recount_after_bulk_and_incremental_imports_and_a_corrupted_one_is_reported() {
    let dir = scratch_dir("pgnload-explorer-verify-");
    let files = corpus(dir.path());
    // Bulk into an empty database, then an incremental import on top.
    let db = fresh_db("explorer_verify");
    let out = import(
        &db,
        &["-q", "--mode", "bulk", "--batch-games", "40"],
        &files[..2],
    );
    assert_ok(&out, &[0]);
    let (code, output) = verify_explorer(&db, dir.path());
    assert_eq!(code, Some(0), "after the bulk load: {output}");
    let out = import(&db, &["-q", "--mode", "incremental"], &files[2..]);
    assert_ok(&out, &[0]);
    let (code, output) = verify_explorer(&db, dir.path());
    assert_eq!(code, Some(0), "after the incremental import: {output}");
    // A second bulk load on a database that has counters: only its own
    // games are added at its finish.
    let extra = dir.path().join("renamed-2.pgn");
    std::fs::write(&extra, renamed_sample(2)).expect("write");
    assert_ok(&import(&db, &["-q", "--mode", "bulk"], &[extra]), &[0]);
    let (code, output) = verify_explorer(&db, dir.path());
    assert_eq!(code, Some(0), "after a second bulk load: {output}");
    assert_eq!(
        db.psql(&format!(
            "SELECT sum(games) FROM explorer_moves e JOIN positions p ON p.id = e.position_id
             WHERE p.normalized_fen = '{START}' AND e.variant = 'standard'"
        )),
        db.psql("SELECT count(*) FROM games WHERE variant = 'standard' AND ply_count > 0 AND start_fen IS NULL")
    );

    // One counter off by one, one row missing: both reported, exit 1.
    db.psql(
        "UPDATE explorer_moves SET white = white + 1
         WHERE ctid = (SELECT ctid FROM explorer_moves ORDER BY games DESC, position_id, move LIMIT 1)",
    );
    db.psql(
        "DELETE FROM explorer_moves WHERE ctid = (SELECT ctid FROM explorer_moves WHERE games = 1 LIMIT 1)",
    );
    let (code, output) = verify_explorer(&db, dir.path());
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains("2 explorer counter rows differ"),
        "{output}"
    );
    assert!(
        output.contains("recount none") || output.contains("stored none"),
        "{output}"
    );
    let report = std::fs::read_to_string(dir.path().join("explorer.tsv")).expect("report");
    assert_eq!(report.lines().count(), 3, "{report}");
}

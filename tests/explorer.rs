//! The opening explorer: counters kept by both import modes equal a
//! recount (`verify --explorer`, which also catches a corrupted row), and
//! `game delete` corrects them.

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

#[test]
fn game_delete_corrects_the_counters_and_refuses_unknown_games() {
    let dir = scratch_dir("pgnload-explorer-delete-");
    let files = corpus(dir.path());
    let db = fresh_db("explorer_delete");
    assert_ok(&import(&db, &["-q"], &files[..1]), &[0]);
    let side_total = |side: &str| {
        db.psql(&format!(
            "SELECT sum(e.{side}) FROM explorer_moves e JOIN positions p ON p.id = e.position_id
             WHERE p.normalized_fen = '{START}' AND e.variant = 'standard'"
        ))
        .parse::<i64>()
        .expect("a sum")
    };
    let before = ["white", "draws", "black"].map(side_total);
    // A game that alone is the last_played of a counter row other games
    // share: that row's last_played must be recomputed.
    let (id, result) = {
        let row = db.psql(
            "WITH latest AS (
                 SELECT min(v.game_id) AS game_id FROM explorer_moves e
                 JOIN explorer_game_moves v USING (position_id, variant, speed, rating_group, month, move)
                 WHERE e.games > 1 AND v.started_at = e.last_played
                 GROUP BY position_id, variant, speed, rating_group, month, move HAVING count(*) = 1
             )
             SELECT g.id || '|' || g.result FROM games g
             WHERE g.id = (SELECT min(game_id) FROM latest)",
        );
        let (id, result) = row.split_once('|').expect("id|result");
        (id.to_owned(), result.parse::<i64>().expect("result"))
    };
    let shared = format!(
        "SELECT count(*) FROM explorer_moves WHERE games > 1
           AND last_played = (SELECT started_at FROM games WHERE id = {id})"
    );
    assert_ne!(db.psql(&shared), "0", "the test needs a shared row");
    let external = db.psql(&format!(
        "SELECT source || ':' || external_id FROM games WHERE id = {id}"
    ));
    let out = run({
        let mut c = db.pgnload();
        c.args(["game", "delete", &external]);
        c
    });
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(&format!("deleted game {id} (")));
    assert_eq!(
        db.psql(&format!("SELECT count(*) FROM games WHERE id = {id}")),
        "0"
    );
    assert_eq!(
        db.psql(&format!("SELECT count(*) FROM moves WHERE game_id = {id}")),
        "0"
    );
    let after = ["white", "draws", "black"].map(side_total);
    let mut expected = before;
    expected[usize::try_from(1 - result).expect("result is -1, 0 or 1")] -= 1;
    assert_eq!(after, expected, "white, draws, black of the start position");
    let (code, output) = verify_explorer(&db, dir.path());
    assert_eq!(code, Some(0), "after the delete: {output}");

    // Deleted already, by id now; and names that are no game.
    for (name, message) in [
        (id.as_str(), format!("no game {id} in the database")),
        (
            external.as_str(),
            format!("no game {external} in the database"),
        ),
    ] {
        let out = run({
            let mut c = db.pgnload();
            c.args(["game", "delete", name]);
            c
        });
        assert_eq!(out.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&message),
            "{out:?}"
        );
    }
    let out = run({
        let mut c = db.pgnload();
        c.args(["game", "delete", "abc"]);
        c
    });
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("neither a game id"));
}

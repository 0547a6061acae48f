//! The opening explorer: counters are opt-in per database (`db explorer
//! enable|disable`; enabling after an import counts exactly what keeping
//! them during it does), counters kept by both import modes equal a
//! recount (`verify --explorer`, which also catches a corrupted row),
//! `explore --json` equals an independent recount in Python over the PGN
//! files, `game delete` corrects the counters, bad input gets a clear
//! message and exit code 2, and the SQL that merges counter rows equals
//! the Rust definition on random rows.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use pgnload::{
    chess::{fen::normalized_fen, model::GameVariant},
    explorer::{
        CounterKey, Counts, GameCounts, ListedArrays,
        answers::{
            Answer, Everywhere, Filter, Found, LISTED_MAX, Plan, Request, TopWalk, explore, find,
            from_rows, listable_by_class, plan_once, read_lists, recent_games, resolve_position,
            top_games, top_group, top_walks,
        },
        counting::add_rows,
        sql::{self, compact_shard},
    },
    store::db::{Prepared, Statements},
};
use proptest::{prelude::*, test_runner::TestRunner};
use serde_json::Value;

use crate::{
    common::{
        EXPLORER_DISABLED, TestDb, data, enable_explorer, fresh_db, games_of, migrated_db,
        python_script, run, scratch_dir,
    },
    import::{assert_ok, import},
    resume::renamed_sample,
};

/// The start position's normalized FEN.
const START: &str = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -";

/// The Lichess sample, a renamed copy of it (same games, other ids: every
/// count doubles), two over-the-board files and an antichess file.
pub(crate) fn corpus(dir: &Path) -> Vec<PathBuf> {
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

/// A fresh database `name` that keeps the explorer counters, with
/// [`corpus`] imported.
fn counted_corpus(name: &str) -> TestDb {
    let dir = scratch_dir(&format!("pgnload-{name}-"));
    let db = fresh_db(name);
    enable_explorer(db.pgnload());
    assert_ok(&import(&db, &["-q"], &corpus(dir.path())), &[0]);
    db
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
    enable_explorer(db.pgnload());
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

    // A bulk load whose position map evicts lets duplicate positions in;
    // its finish merges them, and their counters with them.
    let evicting = fresh_db("explorer_evict");
    enable_explorer(evicting.pgnload());
    let out = import(
        &evicting,
        &["-q", "--mode", "bulk", "--cache-positions", "200"],
        &files,
    );
    assert_ok(&out, &[0]);
    let (code, output) = verify_explorer(&evicting, dir.path());
    assert_eq!(
        code,
        Some(0),
        "after a bulk load that merged duplicates: {output}"
    );
    assert_eq!(
        evicting.psql("SELECT duplicates_merged > 0 FROM import_bulk_loads"),
        "t",
        "the test needs a merge"
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

/// Long: one scenario, step by step; split, its steps would read out of
/// order.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, step by step; split, its steps would read out of order"
)]
fn game_delete_corrects_the_counters_and_refuses_unknown_games() {
    let dir = scratch_dir("pgnload-explorer-delete-");
    let files = corpus(dir.path());
    let db = fresh_db("explorer_delete");
    enable_explorer(db.pgnload());
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

    // The most recent game a row lists among others: the row's list must
    // be recomputed without it (verify compares the lists too).
    let listing = "FROM explorer_moves WHERE cardinality(listed_game_ids) >= 2";
    let best = db.psql(&format!("SELECT min(listed_game_ids[1]) {listing}"));
    let rows_listing = db.psql(&format!(
        "SELECT count(*) {listing} AND listed_game_ids[1] = {best}"
    ));
    assert_ne!(
        rows_listing, "0",
        "the test needs a row listing other games"
    );
    let best_ref = db.psql(&format!(
        "SELECT source || ':' || external_id FROM games WHERE id = {best}"
    ));
    let out = run({
        let mut c = db.pgnload();
        c.args(["game", "delete", &best_ref]);
        c
    });
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        db.psql(&format!(
            "SELECT count(*) FROM explorer_moves WHERE {best} = ANY(listed_game_ids)"
        )),
        "0"
    );
    let (code, output) = verify_explorer(&db, dir.path());
    assert_eq!(code, Some(0), "after deleting a listed game: {output}");

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

/// `pgnload explore ARGS --json` on `db`, every move listed, no top games.
pub(crate) fn explore_json(db: &TestDb, args: &[&str]) -> Value {
    explore_answer(db, &[args, &["--top-games", "0"]].concat())
}

/// `pgnload explore ARGS --json` on `db`, every move listed.
pub(crate) fn explore_answer(db: &TestDb, args: &[&str]) -> Value {
    let out = run({
        let mut c = db.pgnload();
        c.arg("explore")
            .args(args)
            .args(["--json", "--top", "1000"]);
        c
    });
    assert_eq!(
        out.status.code(),
        Some(0),
        "explore {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("explore --json prints JSON")
}

/// `scripts/py_explorer.py` ARGS over `files`.
pub(crate) fn python_json(args: &[&str], files: &[PathBuf]) -> Value {
    let out = run({
        let mut c = python_script("py_explorer.py");
        c.args(args).args(files);
        c
    });
    assert!(
        out.status.success(),
        "py_explorer.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("py_explorer.py prints JSON")
}

/// A move of an answer: uci, averageRating, white, draws, black, opening.
type MoveLine = (String, Value, i64, i64, i64, Value);

/// The totals, the opening and `uci → (averageRating, white, draws,
/// black, opening)` of an answer.
pub(crate) fn summary(answer: &Value) -> (Vec<i64>, Value, Vec<MoveLine>) {
    let n = |v: &Value, k: &str| v[k].as_i64().unwrap_or_else(|| panic!("{k} in {v}"));
    let totals = vec![n(answer, "white"), n(answer, "draws"), n(answer, "black")];
    let mut moves: Vec<_> = answer["moves"]
        .as_array()
        .expect("moves is an array")
        .iter()
        .map(|m| {
            (
                m["uci"].as_str().expect("uci").to_owned(),
                m["averageRating"].clone(),
                n(m, "white"),
                n(m, "draws"),
                n(m, "black"),
                m["opening"].clone(),
            )
        })
        .collect();
    moves.sort_by(|a, b| a.0.cmp(&b.0));
    (totals, answer["opening"].clone(), moves)
}

/// Explore and the Python recount agree on `args`; returns the answer.
/// (`fen`: the position, positional for explore, `--fen` for Python.)
pub(crate) fn assert_explore_matches_python(
    db: &TestDb,
    files: &[PathBuf],
    fen: Option<&str>,
    args: &[&str],
) -> Value {
    let mut ours_args: Vec<&str> = fen.into_iter().collect();
    ours_args.extend(args);
    let mut python_args: Vec<&str> = fen.map(|f| vec!["--fen", f]).unwrap_or_default();
    python_args.extend(args);
    let ours = explore_json(db, &ours_args);
    let python = python_json(&python_args, files);
    assert_eq!(summary(&ours), summary(&python), "explore {args:?}");
    // Most played first (games: white + draws + black here, as the
    // corpus has a result for every game).
    let played: Vec<i64> = ours["moves"]
        .as_array()
        .expect("moves")
        .iter()
        .map(|m| {
            (0..3)
                .map(|i| m[["white", "draws", "black"][i]].as_i64().expect("n"))
                .sum()
        })
        .collect();
    assert!(
        played.windows(2).all(|w| w[0] >= w[1]),
        "explore {args:?}: moves not sorted by games: {played:?}"
    );
    ours
}

#[test]
fn explore_equals_a_python_recount_of_the_pgn_files() {
    let dir = scratch_dir("pgnload-explorer-");
    let files = corpus(dir.path());
    let db = fresh_db("explorer");
    enable_explorer(db.pgnload());
    assert_ok(&import(&db, &["-q", "--mode", "incremental"], &files), &[0]);

    let start = assert_explore_matches_python(&db, &files, None, &[]);
    assert!(
        start["white"].as_i64().expect("white") > 200,
        "the start position counts the whole corpus: {start}"
    );
    let e4 = &start["moves"][0];
    assert_eq!(
        (e4["uci"].as_str(), e4["san"].as_str()),
        (Some("e2e4"), Some("e4"))
    );
    assert_explore_matches_python(&db, &files, None, &["--play", "e2e4"]);
    assert_explore_matches_python(
        &db,
        &files,
        None,
        &["--play", "e2e4,c7c5", "--speeds", "blitz,rapid"],
    );
    assert_explore_matches_python(
        &db,
        &files,
        None,
        &[
            "--ratings",
            "1600,1800",
            "--since",
            "2025-05",
            "--until",
            "2025-05",
        ],
    );
    assert_explore_matches_python(&db, &files, None, &["--until", "2024-12"]);
    assert_explore_matches_python(&db, &files, None, &["--speeds", "correspondence,classical"]);
    assert_explore_matches_python(&db, &files, None, &["--variant", "antichess"]);
    // A rare position, by FEN: one reached by exactly one game, which has
    // no counter rows (sql/0012): explore groups its game instead.
    let rare = db.psql(
        "SELECT p.normalized_fen FROM explorer_game_moves v JOIN positions p ON p.id = v.position_id
         WHERE v.variant = 'standard' GROUP BY p.normalized_fen
         HAVING count(*) = 1 ORDER BY p.normalized_fen LIMIT 1",
    );
    assert_eq!(
        db.psql(&format!(
            "SELECT count(*) FROM explorer_moves e JOIN positions p ON p.id = e.position_id
             WHERE p.normalized_fen = '{rare}'"
        )),
        "0",
        "a position one game reached has no counter rows"
    );
    let answer = assert_explore_matches_python(&db, &files, Some(&rare), &[]);
    assert_eq!(
        answer["moves"].as_array().map(Vec::len),
        Some(1),
        "{answer}"
    );
    // The same position typed with move counters is the same position.
    let typed = format!("{rare} 0 17");
    assert_eq!(summary(&explore_json(&db, &[&typed])), summary(&answer));
    // A position no game reached: an empty answer, exit 0.
    let never = explore_json(&db, &["--play", "h2h4,a7a5,h1h3,a8a6,h3a3"]);
    assert_eq!(never["moves"], serde_json::json!([]), "{never}");
    assert_eq!(never["white"], 0);

    let (code, output) = verify_explorer(&db, dir.path());
    assert_eq!(code, Some(0), "{output}");
}

/// The top and recent games of the standard position `fen`, recounted
/// from games + moves as lila-openingexplorer chooses them: among the
/// games with a result, both ratings and a date that reached it, the top
/// games are the 4 first of those averaging 2000 or more by the best
/// rating of their speed less their band (3200 from 2800 up), then the
/// most recent; the recent games the `recent` most recent of the others.
fn lichess_lists(db: &TestDb, fen: &str, recent: usize) -> (Vec<String>, Vec<String>) {
    let found = db.psql(&format!(
        "WITH here AS (
             SELECT g.id, g.started_at,
                    CASE WHEN g.source = 'lichess' THEN g.external_id
                         ELSE g.source || ':' || g.external_id END AS ref,
                    floor((g.white_elo + g.black_elo) / 2.0) AS a,
                    CASE WHEN g.time_initial_s IS NULL OR g.time_increment_s IS NULL THEN 4000
                         WHEN g.time_initial_s + 40 * g.time_increment_s < 30 THEN 2644
                         WHEN g.time_initial_s + 40 * g.time_increment_s < 180 THEN 3352
                         WHEN g.time_initial_s + 40 * g.time_increment_s < 480 THEN 2974
                         WHEN g.time_initial_s + 40 * g.time_increment_s < 1500 THEN 2949
                         WHEN g.time_initial_s + 40 * g.time_increment_s < 21600 THEN 2533
                         ELSE 4000 END AS highscore
             FROM games g
             WHERE g.variant = 'standard' AND g.result IS NOT NULL AND g.started_at IS NOT NULL
               AND g.white_elo IS NOT NULL AND g.black_elo IS NOT NULL
               AND EXISTS (SELECT 1 FROM moves m JOIN positions p ON p.id = m.position_id
                           WHERE m.game_id = g.id AND p.normalized_fen = '{fen}')),
         top AS (
             SELECT id, ref, started_at, highscore - CASE WHEN a >= 2800 THEN 3200
                 WHEN a >= 2500 THEN 2500 WHEN a >= 2200 THEN 2200 ELSE 2000 END AS rank
             FROM here WHERE a >= 2000 ORDER BY rank, started_at DESC, id DESC LIMIT 4),
         recent AS (
             SELECT id, ref, started_at FROM here WHERE id NOT IN (SELECT id FROM top)
             ORDER BY started_at DESC, id DESC LIMIT {recent})
         SELECT coalesce((SELECT string_agg(ref, ',' ORDER BY rank, started_at DESC, id DESC)
                          FROM top), '')
                || '|' ||
                coalesce((SELECT string_agg(ref, ',' ORDER BY started_at DESC, id DESC)
                          FROM recent), '')"
    ));
    let (top, recent) = found.split_once('|').expect("two lists");
    let list = |text: &str| -> Vec<String> {
        text.split(',')
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
            .collect()
    };
    (list(top), list(recent))
}

/// The ids of an answer's `key` list (`topGames`, `recentGames`).
fn listed_ids(answer: &Value, key: &str) -> Vec<String> {
    answer[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} in {answer}"))
        .iter()
        .map(|game| game["id"].as_str().expect("an id").to_owned())
        .collect()
}

/// `pgnload explore ARGS --json` with its lists of games.
fn explore_lists(db: &TestDb, args: &[&str]) -> Value {
    let out = run({
        let mut c = db.pgnload();
        c.arg("explore").args(args).arg("--json");
        c
    });
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("json")
}

#[test]
fn top_and_recent_games_are_chosen_and_ordered_as_lichess_does() {
    let db = counted_corpus("explorer_top");
    let e4 = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq -";
    let (top, recent) = lichess_lists(&db, e4, 4);
    assert_eq!(top.len(), 4, "the corpus has 4 games of 2000+ after 1.e4");
    let answer = explore_lists(&db, &["--play", "e2e4"]);
    assert_eq!(listed_ids(&answer, "topGames"), top, "{answer}");
    assert_eq!(listed_ids(&answer, "recentGames"), recent, "{answer}");
    // Each listed game with the move it played there.
    for game in answer["topGames"]
        .as_array()
        .into_iter()
        .chain(answer["recentGames"].as_array())
        .flatten()
    {
        let id = game["id"].as_str().expect("id");
        let uci = db.psql(&format!(
            "SELECT m.uci FROM moves m JOIN games g ON g.id = m.game_id
             JOIN positions p ON p.id = m.position_id
             WHERE g.external_id = '{id}' AND p.normalized_fen = '{e4}'
             ORDER BY m.ply DESC LIMIT 1"
        ));
        assert_eq!(game["uci"].as_str(), Some(uci.as_str()), "{game}");
        assert!(
            matches!(game["mode"].as_str(), Some("rated" | "casual")),
            "{game}"
        );
    }
    // Lichess's rule: the recent games fill the 8 it lists less the top
    // games found, whatever the request's top games limit.
    let answer = explore_lists(
        &db,
        &["--play", "e2e4", "--top-games", "1", "--recent-games", "8"],
    );
    assert_eq!(listed_ids(&answer, "topGames"), top[..1]);
    assert_eq!(listed_ids(&answer, "recentGames"), recent);
    let answer = explore_lists(
        &db,
        &["--play", "e2e4", "--top-games", "0", "--recent-games", "2"],
    );
    assert_eq!(listed_ids(&answer, "topGames"), Vec::<String>::new());
    assert_eq!(listed_ids(&answer, "recentGames"), recent[..2]);
    // Without the 2500 band in the filter, Lichess lists no top games.
    let answer = explore_lists(&db, &["--play", "e2e4", "--ratings", "2000,2200"]);
    assert_eq!(listed_ids(&answer, "topGames"), Vec::<String>::new());
    assert!(!listed_ids(&answer, "recentGames").is_empty(), "{answer}");
}

/// `body` with a client of `db`, on a runtime of its own; the connection
/// is driven beside it and ends cleanly after.
fn with_client<T>(db: &TestDb, body: impl AsyncFnOnce(&tokio_postgres::Client) -> T) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        let driver = tokio::spawn(connection);
        let out = body(&client).await;
        drop(client);
        driver.await.expect("driver").expect("connection");
        out
    })
}

/// The top and recent games of `request` found each way `explore` can find
/// them: top games by a scan, by walks from the bound the counters give
/// and from the lowest top band, and from the rows' lists where they hold
/// them; recent games by a scan, a walk and from the lists.
fn games_each_way(db: &TestDb, request: &Request) -> Vec<(String, Vec<i64>)> {
    with_client(db, async |client| {
        let statements = Statements::default();
        let db = Prepared::new(client, &statements);
        let position = resolve_position(request.variant, None, &request.play).expect("position");
        let position = find(db, &normalized_fen(&position))
            .await
            .expect("position lookup")
            .expect("a position of the corpus");
        let id = position.id;
        assert!(position.counted, "a position of the corpus has rows");
        let lists = read_lists(db, id, request).await.expect("the rows' lists");
        let mut found = Vec::new();
        if let Some(group) = top_group(&request.filter) {
            let classes = listable_by_class(db, position, request)
                .await
                .expect("classes");
            let walks = top_walks(&classes, group);
            // Every class of the position from the top group, each as far
            // as its first four games, whatever the classes before it hold.
            let whole: Vec<TopWalk> = classes
                .iter()
                .flat_map(|class| top_walks(&[*class], group))
                .map(|walk| TopWalk { limit: 4, ..walk })
                .collect();
            assert!(whole.len() >= walks.len(), "{whole:?} {walks:?}");
            for (plan, walks, way) in [
                (Plan::Scan, &walks, "as planned"),
                (Plan::Walk, &walks, "as planned"),
                (Plan::Walk, &whole, "every class"),
            ] {
                let games = top_games(db, id, request, plan, walks).await.expect("top");
                found.push((format!("top {plan:?} {way}"), games));
            }
            // From the rows' lists, where they hold them.
            if let Some(games) = from_rows::top(&lists, &walks) {
                found.push(("top from the rows".to_owned(), games));
            }
        }
        let top = found.first().map(|f| f.1.clone()).unwrap_or_default();
        let wanted = LISTED_MAX - top.len();
        for plan in [Plan::Scan, Plan::Walk] {
            let games = recent_games(db, id, request, plan, &top, wanted)
                .await
                .expect("recent");
            found.push((format!("recent {plan:?}"), games));
        }
        found.push((
            "recent from the rows".to_owned(),
            from_rows::recent(&lists, &top, wanted),
        ));
        found
    })
}

/// `plan_once` prepares and plans every statement an answer runs (what a
/// server's new connection does first): answering questions of every
/// kind on the same connection afterwards (the start position, frequent
/// and rare positions, a position one game reached, Chess960, filters)
/// prepares no other statement, and with generic plans forced, as the
/// server forces them, each was planned once.
#[test]
fn plan_once_prepares_every_statement_an_answer_runs() {
    let db = counted_corpus("explorer_plan_once");
    let lone = db.psql(
        "SELECT p.normalized_fen FROM positions p \
         WHERE NOT EXISTS (SELECT 1 FROM explorer_moves e WHERE e.position_id = p.id) \
           AND EXISTS (SELECT 1 FROM moves m WHERE m.position_id = p.id) \
         ORDER BY p.id LIMIT 1",
    );
    assert!(!lone.is_empty(), "a position one game reached");
    with_client(&db, async |client| {
        client
            .batch_execute("SET plan_cache_mode = force_generic_plan")
            .await
            .expect("generic plans");
        let statements = Statements::default();
        let prepared = Prepared::new(client, &statements);
        plan_once(prepared).await.expect("plan_once");
        let (planned, once) = census(client).await;
        assert!(planned >= 12, "{planned} statements");
        assert_eq!(once, planned, "each planned once, generic");
        let everywhere = Everywhere::default();
        for request in questions_of_every_kind(&lone) {
            // An answer or a refusal (a FEN of another variant): either
            // way, through the statements planned.
            let _ = explore(prepared, &request, &everywhere).await;
        }
        assert_eq!(
            census(client).await.0,
            planned,
            "no statement prepared after plan_once"
        );
    });
}

/// The connection's prepared statements, and those planned once, generic.
async fn census(client: &tokio_postgres::Client) -> (i64, i64) {
    let row = client
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE generic_plans = 1 AND custom_plans = 0) \
             FROM pg_prepared_statements",
            &[],
        )
        .await
        .expect("the prepared statements");
    (row.get(0), row.get(1))
}

/// Explorer questions of every kind: the start position, frequent and
/// rare positions, the position `lone` (one game reached it), Chess960,
/// filters.
fn questions_of_every_kind(lone: &str) -> Vec<Request> {
    let blitz = Filter {
        speeds: vec!["blitz".parse().expect("speed")],
        since: Some("2000-01".parse().expect("month")),
        ..Filter::default()
    };
    let lone = Some(lone.to_owned());
    [
        (GameVariant::Standard, None, "", Filter::default()),
        (GameVariant::Standard, None, "e2e4", blitz.clone()),
        (
            GameVariant::Standard,
            None,
            "d2d4,g8f6,c2c4",
            Filter::default(),
        ),
        (
            GameVariant::Standard,
            None,
            "h2h4,a7a5,h1h3",
            Filter::default(),
        ),
        (GameVariant::Standard, lone.clone(), "", Filter::default()),
        (GameVariant::Standard, lone.clone(), "", blitz),
        (GameVariant::Chess960, lone, "", Filter::default()),
    ]
    .into_iter()
    .map(|(variant, fen, play, filter)| Request {
        variant,
        fen,
        moves: 12,
        recent_games: 4,
        ..top_games_request(play, filter)
    })
    .collect()
}

/// A request for the four top games (no moves, no recent games) of the
/// standard position reached by `play` (UCI moves, comma-separated).
fn top_games_request(play: &str, filter: Filter) -> Request {
    Request {
        variant: GameVariant::Standard,
        fen: None,
        play: play
            .split(',')
            .filter(|m| !m.is_empty())
            .map(str::to_owned)
            .collect(),
        filter,
        moves: 0,
        top_games: 4,
        recent_games: 0,
    }
}

/// The top and recent games of positions frequent and rare, under
/// filters, are the same found each way: scanned, walked, and from the
/// lists of the rows (where these hold the top games: at least once).
#[test]
fn listed_games_are_the_same_whether_scanned_or_walked() {
    let db = counted_corpus("explorer_walk");
    let blitz = Filter {
        speeds: vec!["blitz".parse().expect("speed")],
        ..Filter::default()
    };
    let bands = Filter {
        ratings: vec![
            "1600".parse().expect("band"),
            "2200".parse().expect("band"),
            "2500".parse().expect("band"),
        ],
        ..Filter::default()
    };
    let mut from_the_rows = 0;
    for (play, filter) in [
        ("", Filter::default()),
        ("e2e4", Filter::default()),
        ("e2e4", blitz.clone()),
        ("e2e4,c7c5", bands.clone()),
        ("d2d4", bands),
        ("d2d4,g8f6,c2c4", blitz),
    ] {
        let request = Request {
            recent_games: 4,
            ..top_games_request(play, filter.clone())
        };
        let found = games_each_way(&db, &request);
        let context = format!("{play:?} {filter:?}");
        let (tops, recents): (Vec<_>, Vec<_>) =
            found.iter().partition(|(way, _)| way.starts_with("top"));
        assert!(tops.len() >= 3, "{context} {tops:?}");
        from_the_rows += tops.len() - 3;
        assert_eq!(recents.len(), 3, "{context}");
        assert!(
            !tops[0].1.is_empty() && !recents[0].1.is_empty(),
            "{context}"
        );
        for (way, games) in tops[1..].iter().chain(&recents[1..]) {
            let first = if way.starts_with("top") {
                tops[0]
            } else {
                recents[0]
            };
            assert_eq!(games, &first.1, "{context} {way}");
        }
    }
    assert!(from_the_rows > 0, "the rows' lists held some top games");
}

#[test]
fn every_way_to_count_a_position_gives_the_same_answer() {
    // A position is counted from its rows read whole when it has few (at
    // most 64), from its rows grouped by the database when it has more,
    // and, without counter rows (one game reached it, or it is queued for
    // a recount), from its games read whole when it has few (16), else
    // grouped. The same positions each way: as imported; then with 65
    // rows of no games more each (as removals leave them), which must
    // change nothing; then also queued. Every answer (counts, average
    // ratings, top and recent games, a move's game) must be the same.
    let dir = scratch_dir("pgnload-explorer-few-");
    let generated = dir.path().join("classes.pgn");
    std::fs::write(&generated, top_games_corpus(120)).expect("write the corpus");
    let files = [data("lichess-2025-05-sample.pgn"), generated];
    let db = fresh_db("explorer_few");
    enable_explorer(db.pgnload());
    assert_ok(&import(&db, &["-q"], &files), &[0]);
    let sized = "FROM explorer_moves WHERE variant = 'standard' GROUP BY position_id \
                 HAVING sum(games) BETWEEN 2 AND 60";
    let fens = db.psql(&format!(
        "SELECT p.normalized_fen FROM (SELECT position_id, row_number() OVER (ORDER BY position_id) \
         AS n {sized}) s JOIN positions p ON p.id = s.position_id WHERE n % 5 = 0 ORDER BY n"
    ));
    let fens: Vec<&str> = fens.lines().collect();
    assert!((50..=400).contains(&fens.len()), "{} positions", fens.len());
    let requests = few_and_many_requests(&fens);
    let as_imported = answers_of(&db, &requests);
    db.psql(&format!(
        "INSERT INTO explorer_moves (position_id, variant, speed, rating_group, month, move, \
                                     games, white, draws, black, mover_rated_games, \
                                     mover_rating_sum) \
         SELECT position_id, 'standard', 0, -1, -1 - n, min(move), 0, 0, 0, 0, 0, 0 \
         FROM explorer_moves, generate_series(1, 65) n \
         WHERE position_id IN (SELECT position_id {sized}) GROUP BY position_id, n"
    ));
    let grouped = answers_of(&db, &requests);
    db.psql(&format!(
        "INSERT INTO explorer_pending (position_id) SELECT position_id {sized}"
    ));
    let from_games = answers_of(&db, &requests);
    for (i, request) in requests.iter().enumerate() {
        let context = format!("{:?} {:?}", request.fen, request.filter);
        let ((rows, first), (many, second), (queued, third)) =
            (&as_imported[i], &grouped[i], &from_games[i]);
        assert!(rows.counted && many.counted && many.many_rows && !queued.counted);
        assert_eq!(first, second, "{context}");
        assert_eq!(first, third, "{context}");
    }
    // What could differ was there to differ, from few rows and games and
    // from many.
    let with = |listed: fn(&Answer) -> bool| as_imported.iter().filter(|a| listed(&a.1)).count();
    let (top, recent, game) = (
        with(|a| !a.top_games.is_empty()),
        with(|a| !a.recent_games.is_empty()),
        with(|a| a.moves.iter().any(|m| m.game.is_some())),
    );
    assert!(
        top >= 5 && recent >= 5 && game >= 5,
        "{top} {recent} {game}"
    );
    let few_rows = as_imported
        .iter()
        .filter(|(found, _)| !found.many_rows)
        .count();
    assert!(few_rows >= 50, "{few_rows}");
    // Positions of at most 16 games (`answers::FEW_GAMES`) and more.
    let counted: Vec<i64> = as_imported.iter().map(|a| a.1.games).collect();
    assert!(
        counted.iter().any(|&n| (2..=16).contains(&n)),
        "{counted:?}"
    );
    assert!(counted.iter().any(|&n| n > 16), "{counted:?}");
}

/// Questions about the standard positions `fens`, each unfiltered, of
/// rating bands from 1800 up, and of blitz games since 2025-01; 12 moves,
/// 4 top games and 8 recent games (Lichess fills what the top games leave).
fn few_and_many_requests(fens: &[&str]) -> Vec<Request> {
    let bands = Filter {
        ratings: ["1800", "2000", "2200", "2500"]
            .iter()
            .map(|b| b.parse().expect("band"))
            .collect(),
        ..Filter::default()
    };
    let blitz = Filter {
        speeds: vec!["blitz".parse().expect("speed")],
        since: Some("2025-01".parse().expect("month")),
        ..Filter::default()
    };
    fens.iter()
        .flat_map(|fen| {
            [Filter::default(), bands.clone(), blitz.clone()].map(|filter| Request {
                fen: Some((*fen).to_owned()),
                moves: 12,
                recent_games: 8,
                ..top_games_request("", filter)
            })
        })
        .collect()
}

/// The position each of `requests` (each of a FEN) asks about as found on
/// `db`, and its answer.
fn answers_of(db: &TestDb, requests: &[Request]) -> Vec<(Found, Answer)> {
    with_client(db, async |client| {
        let statements = Statements::default();
        let prepared = Prepared::new(client, &statements);
        let everywhere = Everywhere::default();
        let mut answers = Vec::new();
        for request in requests {
            let fen = request.fen.as_deref().expect("a FEN");
            let found = find(prepared, fen).await.expect("lookup").expect("found");
            let answer = explore(prepared, request, &everywhere)
                .await
                .expect("an answer");
            answers.push((found, answer));
        }
        answers
    })
}

/// Games of every speed, of ratings from 1900 to 3000 (so that some
/// average 2800 or more: Lichess's 3200 band), some unrated, unfinished or
/// undated, over a few openings that share their first moves: what the
/// top games' walks split into classes. Deterministic (a fixed
/// generator), Lichess ids `g0000000` up.
fn top_games_corpus(games: u32) -> String {
    let lines = [
        "1. e4 e5 2. Nf3 Nc6",
        "1. e4 e5 2. Nf3 Nf6",
        "1. e4 c5 2. Nf3 d6",
        "1. d4 d5 2. c4 e6",
        "1. d4 Nf6 2. c4 g6",
        "1. c4 e5 2. Nc3 Nf6",
    ];
    let clocks = ["15+0", "60+0", "180+2", "600+0", "1800+0", "-"];
    let results = ["1-0", "0-1", "1/2-1/2", "1-0", "0-1", "*"];
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below
    };
    let mut pgn = String::new();
    for game in 0..games {
        let rating = |r: u64| {
            if r == 0 {
                "?".to_owned()
            } else {
                (1900 + r * 11).to_string()
            }
        };
        let (white, black) = (rating(next(101)), rating(next(101)));
        let date = if next(20) == 0 {
            "????.??.??".to_owned()
        } else {
            format!("2025.{:02}.{:02}", 1 + next(12), 1 + next(28))
        };
        let result = results[usize::try_from(next(6)).expect("small")];
        let line = lines[usize::try_from(next(6)).expect("small")];
        let clock = clocks[usize::try_from(next(6)).expect("small")];
        let time = format!("{:02}:{:02}:{:02}", next(24), next(60), next(60));
        write!(
            pgn,
            "[Event \"Rated game\"]\n[Site \"https://lichess.org/g{game:07}\"]\n\
             [White \"w{game}\"]\n[Black \"b{game}\"]\n[Result \"{result}\"]\n\
             [UTCDate \"{date}\"]\n[UTCTime \"{time}\"]\n[WhiteElo \"{white}\"]\n\
             [BlackElo \"{black}\"]\n[TimeControl \"{clock}\"]\n\n{line} {result}\n\n"
        )
        .expect("writing to a String cannot fail");
    }
    pgn
}

#[test]
fn top_games_found_each_way_are_lichess_s_whatever_the_bands_speeds_and_dates() {
    // An independent recount (`lichess_lists`) of the top games at each
    // position of a corpus that fills every class, against the scan, the
    // walks as planned and every class walked: the walks' limits come
    // from the counts, and the 2500 group's 2800+ games (Lichess's 3200
    // band, ranked first) are counted with the rest of the group.
    let dir = scratch_dir("pgnload-explorer-top-classes-");
    let file = dir.path().join("classes.pgn");
    std::fs::write(&file, top_games_corpus(1500)).expect("write the corpus");
    let db = fresh_db("explorer_top_classes");
    enable_explorer(db.pgnload());
    assert_ok(&import(&db, &["-q"], &[file]), &[0]);
    let above = db.psql(
        "SELECT count(*) FROM games WHERE result IS NOT NULL AND started_at IS NOT NULL \
         AND floor((white_elo + black_elo) / 2.0) >= 2800",
    );
    assert!(above.parse::<i64>().expect("a count") >= 20, "{above}");
    for play in [
        "",
        "e2e4",
        "d2d4",
        "e2e4,e7e5",
        "e2e4,e7e5,g1f3",
        "c2c4",
        "d2d4,g8f6,c2c4",
    ] {
        let request = top_games_request(play, Filter::default());
        let position = resolve_position(request.variant, None, &request.play).expect("position");
        let (expected, _) = lichess_lists(&db, &normalized_fen(&position), 0);
        assert_eq!(expected.len(), 4, "{play:?}");
        for (way, ids) in games_each_way(&db, &request) {
            if !way.starts_with("top") {
                continue;
            }
            let refs: Vec<String> = ids
                .iter()
                .map(|id| db.psql(&format!("SELECT external_id FROM games WHERE id = {id}")))
                .collect();
            assert_eq!(refs, expected, "{play:?} {way}");
        }
        let args: &[&str] = if play.is_empty() {
            &[]
        } else {
            &["--play", play]
        };
        let answer = explore_lists(&db, args);
        assert_eq!(listed_ids(&answer, "topGames"), expected, "{play:?}");
    }
}

/// The planner's estimate of how many games of `db` pass `condition`
/// (on `explorer_games`).
fn estimated_games(db: &TestDb, condition: &str) -> i64 {
    let plan: Value = serde_json::from_str(&db.psql(&format!(
        "EXPLAIN (FORMAT JSON) SELECT 1 FROM explorer_games WHERE {condition}"
    )))
    .expect("EXPLAIN's JSON");
    plan[0]["Plan"]["Plan Rows"]
        .as_i64()
        .unwrap_or_else(|| panic!("no Plan Rows in {plan}"))
}

/// Each value of `category` (a column of `explorer_games`) with its games.
fn games_per_value(db: &TestDb, category: &str) -> Vec<(String, i64)> {
    db.psql(&format!(
        "SELECT {category}, count(*) FROM explorer_games GROUP BY 1 ORDER BY 1"
    ))
    .lines()
    .map(|line| {
        let (value, games) = line.split_once('|').expect("value|games");
        (value.to_owned(), games.parse().expect("a count"))
    })
    .collect()
}

/// A fresh database `label` with the corpus imported (copies in `dir`) and
/// its games analyzed, for the tests of plans.
fn analyzed_corpus(label: &str, dir: &Path) -> TestDb {
    let db = fresh_db(label);
    assert_ok(&import(&db, &["-q"], &corpus(dir)), &[0]);
    db.psql("ANALYZE games");
    db
}

#[test]
fn the_planner_knows_how_many_games_each_category_holds() {
    // The filtered walks (`sql::RECENT_WALK`, `TOP_WALK`) are planned from
    // these estimates: without statistics on the view's expressions
    // (migration 0023), any speed, band or month is 0.5% of the games and
    // a filtered walk becomes a scan of every game. ANALYZE samples all
    // of a small table, so each estimate is the count.
    let dir = scratch_dir("pgnload-explorer-estimates-");
    let db = analyzed_corpus("explorer_estimates", dir.path());
    for category in ["speed", "rating_group", "month"] {
        let values = games_per_value(&db, category);
        assert!(values.len() >= 2, "{category}: {values:?}");
        for (value, games) in &values {
            let condition = format!("{category} = {value}");
            assert_eq!(estimated_games(&db, &condition), *games, "{condition}");
        }
    }
    // The check fails without them.
    db.psql("DROP STATISTICS games_explorer_categories; ANALYZE games");
    let (value, games) = games_per_value(&db, "speed")
        .into_iter()
        .max_by_key(|(_, games)| *games)
        .expect("a speed");
    assert_ne!(estimated_games(&db, &format!("speed = {value}")), games);
}

#[test]
fn the_top_games_walk_reads_its_index() {
    // `sql::TOP_WALK` walks each class of games along `games_top_idx`
    // (migration 0024), an index on `explorer_games`' expressions and on
    // the texts' literals: the planner can use it only while they are the
    // same. Scans are turned off so that the plan says whether the index
    // can be used at all, not whether it is cheaper on a small table; the
    // generic plan is the one a prepared statement ends with.
    let dir = scratch_dir("pgnload-explorer-top-index-");
    let db = analyzed_corpus("explorer_top_index", dir.path());
    let position = db.psql("SELECT min(position_id) FROM moves");
    let plan = |mode: &str| {
        db.psql(&format!(
            "SET enable_seqscan = off; SET enable_bitmapscan = off; \
             SET plan_cache_mode = {mode}; PREPARE walk AS {}; \
             EXPLAIN EXECUTE walk({position}, 'standard', NULL, NULL, NULL, NULL, 4, \
                                  '{{2,3}}', '{{2500,2200}}', '{{t,f}}', '{{4,4}}', '{{-226,749}}')",
            sql::TOP_WALK
        ))
    };
    for mode in ["force_custom_plan", "force_generic_plan"] {
        let plan = plan(mode);
        assert!(
            plan.contains("Index Scan using games_top_idx"),
            "{mode}:\n{plan}"
        );
    }
    // The check fails without it.
    db.psql("DROP INDEX games_top_idx");
    let plan = plan("force_generic_plan");
    assert!(!plan.contains("games_top_idx"), "{plan}");
}

#[test]
fn bad_explore_input_gets_a_clear_message_and_exit_code_2() {
    let db = fresh_db("explorer_bad");
    enable_explorer(db.pgnload());
    for (args, message) in [
        (vec!["8/8/8/8 w - -"], "unparsable FEN"),
        (vec!["--play", "e2e5"], "--play move 1 (\"e2e5\")"),
        (vec!["--play", "e2e4,zz"], "--play move 2 (\"zz\")"),
        (
            vec!["rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR[] w KQkq - 0 1"],
            "crazyhouse pockets",
        ),
        // Antichess has no kings to lose; standard chess needs them.
        (vec!["8/8/8/8/8/8/8/R7 w - - 0 1"], "impossible position"),
        (
            vec!["--variant", "chess960"],
            "chess960 has no single start position",
        ),
        (
            vec!["--since", "2025-06", "--until", "2025-01"],
            "is after --until",
        ),
        (vec!["--speeds", "fast"], "is not a speed"),
        (vec!["--ratings", "1500"], "is not a rating group"),
        (vec!["--since", "2025-13"], "is not a month"),
        (vec!["--variant", "shogi"], "is not a variant"),
    ] {
        let out = run({
            let mut c = db.pgnload();
            c.arg("explore").args(&args);
            c
        });
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

/// The counters of `db`, keyed by FEN rather than position id (ids
/// differ between databases), one line per row in key order.
fn counters_by_fen(db: &TestDb) -> String {
    db.psql(
        "SELECT string_agg(concat_ws(' ', p.normalized_fen, e.variant, e.speed, e.rating_group,
                                     e.month, e.move, e.games, e.white, e.draws, e.black,
                                     e.mover_rated_games, e.mover_rating_sum, e.last_played),
                                     E'\\n'
                           ORDER BY p.normalized_fen, e.variant, e.speed, e.rating_group,
                                    e.month, e.move)
         FROM explorer_moves e JOIN positions p ON p.id = e.position_id",
    )
}

/// `pgnload -q ARGS` on `db`: exit code, stdout, stderr.
fn pgnload_on(db: &TestDb, args: &[&str]) -> (Option<i32>, String, String) {
    let out = run({
        let mut c = db.pgnload();
        c.arg("-q").args(args);
        c
    });
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn counters_are_opt_in_and_enabling_after_an_import_equals_keeping_them_during_it() {
    let dir = scratch_dir("pgnload-explorer-optin-");
    let files = corpus(dir.path());
    let import_both_modes = |db: &TestDb| {
        assert_ok(&import(db, &["-q", "--mode", "bulk"], &files[..2]), &[0]);
        assert_ok(
            &import(db, &["-q", "--mode", "incremental"], &files[2..]),
            &[0],
        );
    };
    // Counters kept by the imports.
    let kept = fresh_db("explorer_kept");
    let enabled = enable_explorer(kept.pgnload());
    assert!(
        enabled.starts_with("explorer counters enabled: 0 rows counted in "),
        "{enabled}"
    );
    import_both_modes(&kept);
    let expected = counters_by_fen(&kept);
    let rows = kept.psql("SELECT count(*) FROM explorer_moves");
    assert_ne!(rows, "0");

    // The same imports without them: nothing counted, and nothing answered.
    let late = fresh_db("explorer_late");
    import_both_modes(&late);
    assert_eq!(
        late.psql("SELECT enabled::text || count(e.*) FROM explorer_state LEFT JOIN explorer_moves e ON true GROUP BY enabled"),
        "false0"
    );
    let (code, _, stderr) = pgnload_on(&late, &["explore"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(EXPLORER_DISABLED), "{stderr}");
    let (code, _, stderr) = pgnload_on(&late, &["db", "explorer", "disable"]);
    assert_eq!(code, Some(0), "{stderr}");

    // Enabled afterwards: the very same rows, and a clean recount.
    let (code, stdout, stderr) = pgnload_on(&late, &["db", "explorer", "enable"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with(&format!(
            "explorer counters enabled: {rows} rows counted in "
        )),
        "{stdout}"
    );
    assert_eq!(counters_by_fen(&late), expected);
    let (code, output) = verify_explorer(&late, dir.path());
    assert_eq!(code, Some(0), "after enabling: {output}");
    // The key is back, under its name.
    assert_eq!(
        late.psql("SELECT count(*) FROM pg_constraint WHERE conname = 'explorer_moves_pkey'"),
        "1"
    );
    let (code, stdout, _) = pgnload_on(&late, &["db", "explorer", "enable"]);
    assert_eq!(
        (code, stdout.as_str()),
        (
            Some(0),
            "explorer counters already enabled; nothing to do\n"
        )
    );

    // Disabled: empty, and explore refuses again.
    let (code, stdout, stderr) = pgnload_on(&late, &["db", "explorer", "disable"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with(&format!(
            "explorer counters disabled: {rows} rows removed in "
        )),
        "{stdout}"
    );
    assert_eq!(late.psql("SELECT count(*) FROM explorer_moves"), "0");
    assert_eq!(late.psql("SELECT enabled FROM explorer_state"), "f");
    let (code, _, stderr) = pgnload_on(&late, &["explore"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(EXPLORER_DISABLED), "{stderr}");
}

#[test]
fn a_database_without_counters_refuses_explore_and_verify_and_an_unfinished_bulk_load_refuses_enable()
 {
    let dir = scratch_dir("pgnload-explorer-off-");
    let db = migrated_db("explorer_off");
    for args in [
        &["explore"][..],
        &["explore", "--json"],
        &["verify", "--explorer", "--report", "x.tsv"],
    ] {
        let out = run({
            let mut c = db.pgnload();
            c.current_dir(dir.path()).arg("-q").args(args);
            c
        });
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(EXPLORER_DISABLED), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: no answer that looks real");
    }
    db.psql("INSERT INTO import_bulk_loads (state) VALUES ('loading')");
    let (code, stdout, stderr) = pgnload_on(&db, &["db", "explorer", "enable"]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("bulk load 1 is unfinished: run `pgnload import` again to finish it"),
        "{stderr}"
    );
    assert_eq!(db.psql("SELECT enabled FROM explorer_state"), "f");
}

/// `sql/0012`: on one node a position one game reached has no counter
/// rows; the others have complete rows, or are queued and answered from
/// the games until counted. Three importers at once, two of them racing
/// through the same games (so for the same new positions), while another
/// session holds the import lock: none is alone at its end, so their
/// queues wait for `db explorer compact`; a later import alone counts its
/// own. `explore` equals the Python recount at every step, and `verify
/// --explorer` (which requires rows for every position two games reached
/// that is not queued) is clean.
/// A psql session holding the import lock shared, as another import
/// would: no import is alone, so none counts its queue at its end.
fn hold_import_lock(db: &TestDb) -> std::process::Child {
    let holder = std::process::Command::new("psql")
        .env("PGAPPNAME", "pgnload-test-lock-holder")
        .args([&db.url, "-XAtq", "-c"])
        // The import lock's key (crates/app/src/ingest/bulk.rs LOCK): were it another,
        // every importer would be alone and the queues counted.
        .arg(format!(
            "SELECT pg_advisory_lock_shared({}); SELECT pg_sleep(600)",
            0x7067_6e6c_6275_6c6b_i64
        ))
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start psql holding the import lock");
    while db.psql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted") == "0" {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    holder
}

/// Ends [`hold_import_lock`]'s session.
fn release_import_lock(db: &TestDb, mut holder: std::process::Child) {
    db.psql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = 'pgnload-test-lock-holder'",
    );
    holder.wait().expect("reap the lock holder");
}

#[test]
fn only_shared_positions_get_rows_and_concurrent_importers_queue_the_rest() {
    let dir = scratch_dir("pgnload-explorer-shared-");
    let mut files = corpus(dir.path());
    let db = fresh_db("explorer_shared");
    enable_explorer(db.pgnload());
    let holder = hold_import_lock(&db);
    let importers: Vec<_> = [&files[0..1], &files[1..2], &files[2..]]
        .into_iter()
        .map(|part| {
            let mut cmd = db.pgnload();
            cmd.args(["import", "--mode", "incremental", "--batch-games", "20"])
                .args(part);
            cmd.spawn().expect("start an importer")
        })
        .collect();
    for importer in importers {
        let out = importer.wait_with_output().expect("wait for an importer");
        assert_ok(&out, &[0]);
    }
    let queued: u64 = db
        .psql("SELECT count(*) FROM explorer_pending")
        .parse()
        .expect("a count");
    assert!(queued > 0, "no importer was alone, so their queues wait");
    let check = |files: &[PathBuf], label: &str| {
        let (code, output) = verify_explorer(&db, dir.path());
        assert_eq!(code, Some(0), "{label}: {output}");
        assert_explore_matches_python(&db, files, None, &[]);
        assert_explore_matches_python(&db, files, None, &["--play", "e2e4,c7c5,g1f3"]);
        assert_explore_matches_python(&db, files, None, &["--play", "d2d4,d7d5,c2c4,e7e6"]);
    };
    check(&files, "queued");
    release_import_lock(&db, holder);

    let said = db.quiet_ok(&["db", "explorer", "compact"]);
    assert!(
        said.starts_with(&format!(
            "explorer counters: {queued} queued positions counted in "
        )),
        "{said}"
    );
    assert_eq!(db.psql("SELECT count(*) FROM explorer_pending"), "0");
    check(&files, "compacted");
    let single_game_positions_with_rows = "SELECT count(*) FROM explorer_moves
         WHERE position_id IN (SELECT position_id FROM explorer_game_moves
                               GROUP BY position_id HAVING count(*) = 1)";
    assert_eq!(db.psql(single_game_positions_with_rows), "0");
    assert_ne!(db.psql("SELECT count(*) FROM explorer_moves"), "0");

    // Alone, an import counts its queue at its end.
    let more = dir.path().join("renamed-2.pgn");
    std::fs::write(&more, renamed_sample(2)).expect("write a second renamed copy");
    assert_ok(
        &import(
            &db,
            &["-q", "--mode", "incremental"],
            std::slice::from_ref(&more),
        ),
        &[0],
    );
    assert_eq!(db.psql("SELECT count(*) FROM explorer_pending"), "0");
    files.push(more);
    check(&files, "alone");
    assert_eq!(db.psql(single_game_positions_with_rows), "0");
}

/// A run gives the positions its batches share their rows itself: a
/// position that one game of an earlier batch of the run reached is
/// counted, when a later batch reaches it, from what the run remembers of
/// that game, instead of queued for a recount; with no memory
/// (`--cache-positions 0`) it is queued. Both are exact. No import is
/// alone here, so nothing queued is counted.
#[test]
fn a_run_counts_the_positions_its_earlier_batches_reached_once_without_queueing_them() {
    let dir = scratch_dir("pgnload-explorer-memory-");
    let files = vec![data("lichess-2025-05-sample.pgn")];
    let mut queued = Vec::new();
    for cache in ["12000000", "0"] {
        let db = fresh_db("explorer_memory");
        enable_explorer(db.pgnload());
        let holder = hold_import_lock(&db);
        assert_ok(
            &import(
                &db,
                &[
                    "-q",
                    "--mode",
                    "incremental",
                    "--batch-games",
                    "20",
                    "--cache-positions",
                    cache,
                ],
                &files,
            ),
            &[0],
        );
        let (code, output) = verify_explorer(&db, dir.path());
        assert_eq!(code, Some(0), "--cache-positions {cache}: {output}");
        for play in ["e2e4", "e2e4,c7c5", "d2d4,d7d5,c2c4"] {
            assert_explore_matches_python(&db, &files, None, &["--play", play]);
        }
        queued.push(
            db.psql("SELECT count(*) FROM explorer_pending")
                .parse::<u64>()
                .expect("a count"),
        );
        release_import_lock(&db, holder);
    }
    // Remembered, only the positions some game ended in are queued when
    // reached again (a final position has no move to count).
    let (remembered, forgotten) = (queued[0], queued[1]);
    assert!(
        forgotten > 100 && remembered * 10 < forgotten,
        "queued with the run's memory {remembered}, without {forgotten}"
    );
}

/// A game the run imported, deleted while the run goes on: the positions
/// it alone reached are in the run's memory with it, and a later batch of
/// the run that reaches one must not count it. `game delete` queues them,
/// so that they are recounted (here at the end of the run, alone).
#[test]
fn deleting_a_game_the_running_import_remembers_keeps_the_counters_exact() {
    use std::io::Write;
    let dir = scratch_dir("pgnload-explorer-delete-running-");
    let db = fresh_db("explorer_delete_running");
    enable_explorer(db.pgnload());
    let fifo = dir.path().join("games.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let sample = std::fs::read_to_string(data("lichess-2025-05-sample.pgn")).expect("sample");
    let games = games_of(&sample);
    // Two games that share a line no game of the sample plays; the first
    // alone reaches it in its batch. (The importer reads its input in
    // blocks: a hundred games more make it read the first batch.)
    let line = |white: &str, end: &str, result: &str| {
        format!(
            "[Event \"Casual\"]\n[White \"{white}\"]\n[Black \"Memory\"]\n[Result \"{result}\"]\n\n\
             1. a3 h6 2. h3 a6 3. Ra2 Rh7 4. {end} {result}\n\n"
        )
    };
    let mut importer = db.pgnload();
    importer
        .args([
            "-q",
            "import",
            "--mode",
            "incremental",
            "--batch-games",
            "5",
        ])
        .arg(&fifo)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let importer = importer.spawn().expect("start the importer");
    let mut writer = std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .expect("open the FIFO for writing");
    let first: String = std::iter::once(line("Deleted", "d4 d5", "1/2-1/2"))
        .chain(games[..100].iter().cloned())
        .collect();
    writer
        .write_all(first.as_bytes())
        .expect("write the first games");
    writer.flush().expect("flush");
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    let deleted = loop {
        let id = db.psql("SELECT g.id FROM games g JOIN players p ON p.id = g.white_player_id WHERE p.username = 'Deleted'");
        if !id.is_empty() {
            break id;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the first batch was not committed"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    db.quiet_ok(&["game", "delete", &deleted]);
    let rest: String = std::iter::once(line("Kept", "e4 e5", "1-0"))
        .chain(games[100..].iter().cloned())
        .collect();
    writer
        .write_all(rest.as_bytes())
        .expect("write the other games");
    drop(writer);
    let out = importer.wait_with_output().expect("wait for the importer");
    assert_ok(&out, &[0]);
    assert_eq!(
        db.psql("SELECT count(*) FROM games"),
        (games.len() + 1).to_string(),
        "every game but the deleted one"
    );
    assert_eq!(db.psql("SELECT count(*) FROM explorer_pending"), "0");
    let (code, output) = verify_explorer(&db, dir.path());
    assert_eq!(code, Some(0), "{output}");
    let answer = explore_json(&db, &["--play", "a2a3,h7h6"]);
    assert_eq!(
        summary(&answer).0,
        vec![1, 0, 0],
        "only the kept game reaches 1. a3 h6: {answer}"
    );
}

/// Migration 25 on a database whose counter rows were written before it
/// (lists of best-rated games, not of the most recent): it lists every
/// row's most recent games as a recount does, and `explore`, which reads
/// its top and recent games and the game of a move played once from
/// those lists, answers as before.
#[test]
fn rows_written_before_their_recent_lists_are_listed_by_the_migration() {
    let dir = scratch_dir("pgnload-explorer-upgrade-");
    let files = corpus(dir.path());
    let db = fresh_db("explorer_upgrade");
    enable_explorer(db.pgnload());
    assert_ok(&import(&db, &["-q"], &[files[0].clone()]), &[0]);
    let args = ["--play", "e2e4,c7c5", "--top", "1000"];
    let expected = explore_lists(&db, &args);
    let once = expected["moves"]
        .as_array()
        .expect("moves")
        .iter()
        .filter(|m| m["game"].is_object())
        .count();
    assert!(once > 0, "moves played once, with their game: {expected}");
    assert!(
        !listed_ids(&expected, "recentGames").is_empty(),
        "{expected}"
    );
    // The schema as version 24 left it, its rows with lists of the
    // best-rated games (migration 13's), as the view counts them.
    let listed = "SELECT count(*) FROM explorer_moves WHERE listed_game_ids IS NOT NULL";
    let rows_listing = db.psql(listed);
    assert_ne!(rows_listing, "0");
    db.psql(BEFORE_0025);
    db.psql(
        "UPDATE explorer_moves e SET top_game_ratings = o.r, top_game_ids = o.g
         FROM (SELECT position_id, variant, speed, rating_group, month, move,
                      (array_agg(rating_sum ORDER BY rating_sum DESC, game_id)
                         FILTER (WHERE rating_sum IS NOT NULL))[1:4] AS r,
                      (array_agg(game_id ORDER BY rating_sum DESC, game_id)
                         FILTER (WHERE rating_sum IS NOT NULL))[1:4] AS g
               FROM explorer_game_moves
               GROUP BY position_id, variant, speed, rating_group, month, move) o
         WHERE (e.position_id, e.variant, e.speed, e.rating_group, e.month, e.move)
             = (o.position_id, o.variant, o.speed, o.rating_group, o.month, o.move)",
    );
    assert_ne!(
        db.psql("SELECT count(*) FROM explorer_moves WHERE top_game_ids IS NOT NULL"),
        "0"
    );
    db.quiet_ok(&["db", "migrate"]);
    assert_eq!(db.psql(listed), rows_listing);
    assert_eq!(db.psql("SELECT count(*) FROM explorer_pending"), "0");
    let (code, output) = verify_explorer(&db, dir.path());
    assert_eq!(code, Some(0), "{output}");
    assert_eq!(explore_lists(&db, &args), expected);
}

/// A fresh database with the explorer counters, into which `sample` was
/// bulk loaded without incident: the counters an interrupted load must
/// end up equal to.
fn clean_bulk_load(label: &str, sample: &Path) -> TestDb {
    let clean = fresh_db(label);
    enable_explorer(clean.pgnload());
    assert_ok(
        &import(&clean, &["-q", "--mode", "bulk"], &[sample.to_path_buf()]),
        &[0],
    );
    clean
}

/// A bulk load holds its counter rows in memory across batches
/// (`crates/app/src/explorer/held.rs`), its games recorded in
/// `explorer_deferred` meanwhile. Killed with rows held, it leaves games
/// no row counts: `explore` and `verify --explorer` refuse until the
/// load finishes, and the rerun's finish counts the positions of those
/// games, so that the counters equal a clean load's.
#[test]
fn a_bulk_load_killed_with_counter_rows_held_counts_their_games_at_its_finish() {
    use std::io::Write;
    let dir = scratch_dir("pgnload-explorer-held-");
    let sample = data("lichess-2025-05-sample.pgn");
    let clean = clean_bulk_load("explorer_held_clean", &sample);

    let db = fresh_db("explorer_held");
    enable_explorer(db.pgnload());
    let fifo = dir.path().join("games.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let mut importer = db.pgnload();
    importer
        .args(["-q", "import", "--mode", "bulk", "--batch-games", "5"])
        .arg(&fifo)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut importer = importer.spawn().expect("start the importer");
    let mut writer = std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .expect("open the FIFO for writing");
    // Half the sample, the FIFO left open: the load waits for more with
    // the rows of its committed batches held.
    let text = std::fs::read_to_string(&sample).expect("sample");
    let half = text
        .match_indices("\n[Event ")
        .nth(200)
        .expect("400 games")
        .0;
    writer
        .write_all(&text.as_bytes()[..half])
        .expect("write half the games");
    writer.flush().expect("flush");
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    while db.psql("SELECT count(*) FROM explorer_deferred") == "0" {
        assert!(
            std::time::Instant::now() < deadline,
            "no batch of the load committed"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    importer.kill().expect("kill the importer");
    importer.wait().expect("reap the importer");
    drop(writer);
    let uncounted = db.psql("SELECT count(*) FROM games");
    assert_ne!(uncounted, "0");
    assert_eq!(
        db.psql("SELECT sum(last_game_id - first_game_id + 1) FROM explorer_deferred"),
        uncounted,
        "every committed game is recorded as not counted"
    );
    for args in [
        &["explore"][..],
        &["verify", "--explorer", "--report", "x.tsv"],
    ] {
        let (code, stdout, stderr) = pgnload_on(&db, args);
        assert_eq!(code, Some(2), "{args:?}: {stdout}{stderr}");
        assert!(
            stderr.contains(&format!(
                "a bulk load has not counted {uncounted} of its games into the explorer counters"
            )),
            "{args:?}: {stderr}"
        );
        assert!(stdout.is_empty(), "{args:?}: no answer that looks real");
    }

    // The rerun continues the load (the games committed are present) and
    // finishes it.
    let rerun = import(&db, &[], &[sample]);
    assert_ok(&rerun, &[0]);
    let said = String::from_utf8_lossy(&rerun.stderr);
    assert!(
        said.contains(&format!(
            "the positions of {uncounted} games whose explorer counter rows were lost (a \
             stopped run, a lost connection) are queued for a recount"
        )),
        "{said}"
    );
    assert_eq!(
        db.psql("SELECT count(*) FROM games"),
        clean.psql("SELECT count(*) FROM games")
    );
    assert_eq!(db.psql("SELECT count(*) FROM explorer_deferred"), "0");
    assert_eq!(db.psql("SELECT count(*) FROM explorer_pending"), "0");
    let (code, output) = verify_explorer(&db, dir.path());
    assert_eq!(code, Some(0), "{output}");
    assert_eq!(counters_by_fen(&db), counters_by_fen(&clean));
}

/// A bulk load's finish writes the held counter rows beside its index
/// rebuilds. When the finish fails after they were written (here its
/// session is terminated as it marks the load done, which the finish
/// retries on a new connection), the retried finish must not write them
/// again: the counters equal a clean load's.
#[test]
fn a_bulk_finish_retried_after_writing_the_held_rows_writes_them_once() {
    let dir = scratch_dir("pgnload-explorer-flush-once-");
    let sample = data("lichess-2025-05-sample.pgn");
    let clean = clean_bulk_load("explorer_flush_once_clean", &sample);

    let db = fresh_db("explorer_flush_once");
    enable_explorer(db.pgnload());
    // Marking the load done waits until the test releases advisory lock
    // 4242.
    db.psql(
        "CREATE FUNCTION hold_done() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.state = 'done' THEN
                 PERFORM pg_advisory_lock(4242);
                 PERFORM pg_advisory_unlock(4242);
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER hold_done BEFORE UPDATE ON import_bulk_loads
             FOR EACH ROW EXECUTE FUNCTION hold_done();",
    );
    let mut holder = std::process::Command::new("psql")
        .args(["-X", "-q", &db.url, "-c"])
        .arg("SELECT pg_advisory_lock(4242); SELECT pg_sleep(120);")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn psql");
    // The lock's holder in this database (advisory locks are per database).
    let holder_pid = "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 \
                      AND granted AND database = (SELECT oid FROM pg_database \
                                                  WHERE datname = current_database())";
    let wait_for = |what: &str, sql: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_mins(2);
        while db.psql(sql) != "t" {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    wait_for(
        "the lock was not taken",
        &format!("SELECT EXISTS ({holder_pid})"),
    );
    let importer = db
        .pgnload()
        .args(["import", "--mode", "bulk", "--batch-games", "50"])
        .arg(&sample)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the importer");

    // The held rows written (their games' records gone) and the finish
    // waiting to mark the load done; then its session is terminated.
    let waiting = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
                   AND application_name = 'pgnload' AND wait_event = 'advisory'";
    wait_for(
        "the finish did not wait with the held rows written",
        &format!(
            "SELECT NOT EXISTS (SELECT FROM explorer_deferred)
                 AND EXISTS (SELECT FROM explorer_moves) AND EXISTS ({waiting})"
        ),
    );
    db.psql(&format!(
        "SELECT pg_terminate_backend(pid) FROM ({waiting}) w"
    ));
    // Released by ending its session (the server would not notice a
    // killed psql before its sleep ends).
    db.psql(&format!(
        "SELECT pg_terminate_backend(pid) FROM ({holder_pid}) h"
    ));
    holder.wait().expect("reap psql");

    let out = importer.wait_with_output().expect("importer");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("retrying"), "the finish was retried: {said}");
    assert_eq!(db.psql("SELECT state FROM import_bulk_loads"), "done");
    assert_eq!(db.psql("SELECT count(*) FROM explorer_deferred"), "0");
    let (code, output) = verify_explorer(&db, dir.path());
    assert_eq!(code, Some(0), "{output}");
    assert_eq!(counters_by_fen(&db), counters_by_fen(&clean));
}

/// A counter row as both sides read it: the key (the variant by its
/// label) and the counts, the best games as the row's two arrays.
type RowValue = (
    (i64, String, i16, i16, i32, i16),
    (i32, i32, i32, i32, i32, i64),
    Option<chrono::DateTime<chrono::Utc>>,
    ListedArrays,
);

/// `rows` (one per key), as [`RowValue`]s in key order.
fn row_values<'a>(rows: impl IntoIterator<Item = &'a (CounterKey, Counts)>) -> Vec<RowValue> {
    let mut values: Vec<RowValue> = rows
        .into_iter()
        .map(|(key, counts)| {
            (
                (
                    key.0,
                    key.1.as_db_label().to_owned(),
                    key.2,
                    key.3,
                    key.4,
                    key.5,
                ),
                (
                    counts.games,
                    counts.white,
                    counts.draws,
                    counts.black,
                    counts.mover_rated_games,
                    counts.mover_rating_sum,
                ),
                counts.last_played,
                counts.listed.arrays(),
            )
        })
        .collect();
    values.sort_by(|a, b| a.0.cmp(&b.0));
    values
}

/// The counter rows of `table` (a key, counts, listed games), in key order.
async fn stored_rows(client: &tokio_postgres::Client, table: &str) -> Vec<RowValue> {
    client
        .query(
            &format!(
                "SELECT position_id, variant::text, speed, rating_group, month, move, games, \
                        white, draws, black, mover_rated_games, mover_rating_sum, last_played, \
                        listed_game_ids, listed_game_started, listed_game_ratings \
                 FROM {table} ORDER BY position_id, variant::text, speed, rating_group, month, move"
            ),
            &[],
        )
        .await
        .expect("read the counter rows")
        .iter()
        .map(|row| {
            (
                (
                    row.get(0),
                    row.get(1),
                    row.get(2),
                    row.get(3),
                    row.get(4),
                    row.get(5),
                ),
                (
                    row.get(6),
                    row.get(7),
                    row.get(8),
                    row.get(9),
                    row.get(10),
                    row.get(11),
                ),
                row.get(12),
                ListedArrays {
                    ids: row.get(13),
                    started: row.get(14),
                    ratings: row.get(15),
                },
            )
        })
        .collect()
}

/// One game of a random batch: where it counts (position and move), its
/// categories, result, ratings and date, and which batch it is in. White
/// moves at the odd positions.
#[derive(Debug, Clone)]
struct RandomGame {
    position: i64,
    code: i16,
    counts: GameCounts,
    batch: usize,
}

/// Random games meeting at a few keys, with tied and negative ratings and
/// tied dates, a fifth of them without a result, a rating or a date (most
/// listable, so that a row's list fills), in up to three batches.
fn random_games() -> impl Strategy<Value = Vec<RandomGame>> {
    let game = (
        1i64..4,
        0i16..3,
        prop_oneof![Just(GameVariant::Standard), Just(GameVariant::Chess960)],
        0i16..2,
        prop_oneof![Just(-1i16), Just(1600i16)],
        prop_oneof![Just(-1i32), Just(24_290i32)],
        prop::option::weighted(0.8, -1i16..=1),
        (
            prop::option::weighted(0.8, prop_oneof![Just(1500i32), Just(-2i32), 1495i32..1505]),
            prop::option::weighted(0.8, prop_oneof![Just(1500i32), Just(-2i32), 1495i32..1505]),
        ),
        prop::option::weighted(0.8, 0i64..5),
        0usize..3,
    )
        .prop_map(
            |(position, code, variant, speed, rating_group, month, score, elos, day, batch)| {
                let (white_rating, black_rating) = elos;
                RandomGame {
                    position,
                    code,
                    counts: GameCounts {
                        variant,
                        speed,
                        rating_group,
                        month,
                        score,
                        ratings: white_rating
                            .zip(black_rating)
                            .map(|(white, black)| i64::from(white) + i64::from(black)),
                        white_rating,
                        black_rating,
                        started_at: day.map(|day| {
                            chrono::DateTime::from_timestamp(1_700_000_000 + day * 86_400, 0)
                                .expect("a time in range")
                        }),
                    },
                    batch,
                }
            },
        );
    prop::collection::vec(game, 1..40)
}

/// Each batch's rows (one per key, in key order), the game `i` of `games`
/// having id `salt[i] * 64 + i`: ids in no order, unique.
fn batch_rows(games: &[RandomGame], salts: &[u16]) -> Vec<Vec<(CounterKey, Counts)>> {
    let mut batches = vec![std::collections::BTreeMap::<CounterKey, Counts>::new(); 3];
    for (index, game) in games.iter().enumerate() {
        let id = i64::from(salts[index % salts.len()]) * 64
            + i64::try_from(index).expect("a game count");
        batches[game.batch]
            .entry(game.counts.key(game.position, game.code))
            .or_default()
            .add(id, &game.counts, game.position % 2 == 1);
    }
    batches
        .into_iter()
        .map(|rows| rows.into_iter().collect())
        .collect()
}

/// The batches' rows merged by key in Rust: the one definition.
fn merged(batches: &[Vec<(CounterKey, Counts)>]) -> Vec<(CounterKey, Counts)> {
    let mut all = std::collections::BTreeMap::<CounterKey, Counts>::new();
    for (key, counts) in batches.iter().flatten() {
        all.entry(*key).or_default().merge(counts);
    }
    all.into_iter().collect()
}

/// The SQL that merges counter rows equals `Counts::merge` on random
/// rows: the import's upsert adding batch after batch to `explorer_moves`
/// (`sql::ADD_STAGED`), and a shard's fold of the rows of a key into one
/// (`sql::compact_shard`). Merging also equals counting every game in one
/// row. The same games at one key make lists longer than a row keeps.
/// (One database for every case: each empties its tables first.)
#[test]
fn the_sql_merge_of_counter_rows_equals_the_rust_merge_on_random_rows() {
    let db = migrated_db("explorer_merge");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    // In a cell: the runner's closure is `Fn`, and the upsert takes the
    // client mutably (for its transaction).
    let client = std::cell::RefCell::new(runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        client
    }));
    let strategy = (random_games(), prop::collection::vec(0u16..1000, 1..8));
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    });
    runner
        .run(&strategy, |(games, salts)| {
            let batches = batch_rows(&games, &salts);
            let expected = row_values(&merged(&batches));
            let one_batch: Vec<RandomGame> = games
                .iter()
                .map(|game| RandomGame {
                    batch: 0,
                    ..game.clone()
                })
                .collect();
            prop_assert_eq!(&expected, &row_values(&batch_rows(&one_batch, &salts)[0]));
            let (upserted, folded) =
                runtime.block_on(merged_in_sql(&mut client.borrow_mut(), &batches));
            prop_assert_eq!(&upserted, &expected, "the upsert");
            prop_assert_eq!(&folded, &expected, "the fold");
            // The same games at one key of a rating group and a month: lists
            // longer than a row keeps, merged across batches.
            let crowded: Vec<RandomGame> = games
                .iter()
                .map(|game| RandomGame {
                    position: 1,
                    code: 0,
                    counts: GameCounts {
                        variant: GameVariant::Standard,
                        speed: 0,
                        rating_group: 1600,
                        month: 24_290,
                        ..game.counts
                    },
                    ..game.clone()
                })
                .collect();
            let batches = batch_rows(&crowded, &salts);
            let expected = row_values(&merged(&batches));
            let (upserted, folded) =
                runtime.block_on(merged_in_sql(&mut client.borrow_mut(), &batches));
            prop_assert_eq!(&upserted, &expected, "the upsert at one key");
            prop_assert_eq!(&folded, &expected, "the fold at one key");
            Ok(())
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
}

/// `batches` merged by the SQL: added batch after batch to
/// `explorer_moves` by the import's upsert, and inserted as rows of a
/// shard (a batch's rows anchored on the batch) into a table then folded
/// in place; both tables' rows.
async fn merged_in_sql(
    client: &mut tokio_postgres::Client,
    batches: &[Vec<(CounterKey, Counts)>],
) -> (Vec<RowValue>, Vec<RowValue>) {
    client
        .batch_execute(
            "TRUNCATE explorer_moves;
             DROP TABLE IF EXISTS fold_rows;
             CREATE TABLE fold_rows (LIKE explorer_moves);
             ALTER TABLE fold_rows ADD COLUMN anchor_game_id bigint NOT NULL",
        )
        .await
        .expect("empty tables");
    for rows in batches {
        add_rows(client, rows).await.expect("the upsert");
    }
    let insert = client
        .prepare(&format!(
            "INSERT INTO fold_rows ({}, {}, anchor_game_id) VALUES ($1, \
                 $2::text::game_variant, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, \
                 $15, $16, $17)",
            pgnload::explorer::sql::KEY,
            pgnload::explorer::sql::COUNTS
        ))
        .await
        .expect("prepare");
    for (batch, rows) in (0i64..).zip(batches) {
        for (key, counts) in rows {
            let listed = counts.listed.arrays();
            client
                .execute(
                    &insert,
                    &[
                        &key.0,
                        &key.1.as_db_label(),
                        &key.2,
                        &key.3,
                        &key.4,
                        &key.5,
                        &counts.games,
                        &counts.white,
                        &counts.draws,
                        &counts.black,
                        &counts.mover_rated_games,
                        &counts.mover_rating_sum,
                        &counts.last_played,
                        &listed.ids,
                        &listed.started,
                        &listed.ratings,
                        &batch,
                    ],
                )
                .await
                .expect("insert a shard's row");
        }
    }
    client
        .execute(&compact_shard("fold_rows"), &[])
        .await
        .expect("the fold");
    (
        stored_rows(client, "explorer_moves").await,
        stored_rows(client, "fold_rows").await,
    )
}

/// Three games whose movers' ratings differ from their averages: two from
/// a FEN with Black to move (Black plays ply 1), one with only White
/// rated, and one from the start with only Black rated. After 1.e4 (Black
/// to move) 1...e5 averages Black's 2100 and 1900; after 1...e5, 2.Nf3
/// White's 1500 and 1700; after 2.Nf3, 2...Nc6 Black's 2100 and 1900 and
/// 2...Nf6 none (its mover has no rating).
const MOVER_GAMES: &str = r#"[Event "Mover 1"]
[White "a"]
[Black "b"]
[WhiteElo "1500"]
[BlackElo "2100"]
[Result "1-0"]
[SetUp "1"]
[FEN "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"]

1... e5 2. Nf3 Nc6 1-0

[Event "Mover 2"]
[White "c"]
[Black "d"]
[WhiteElo "1700"]
[Result "0-1"]
[SetUp "1"]
[FEN "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"]

1... e5 2. Nf3 Nf6 0-1

[Event "Mover 3"]
[White "e"]
[Black "f"]
[BlackElo "1900"]
[Result "1/2-1/2"]

1. e4 e5 2. Nf3 Nc6 1/2-1/2
"#;

/// Takes back what migration 0025 changed of the counters (on a single
/// node or a shard; on a coordinator, of its foreign partitions'
/// columns): the lists of the best-rated games (empty) in place of the
/// most recent, the readable view as 0021 wrote it; and forgets it: a
/// database counted before it. (Before [`BEFORE_0021`], whose view reads
/// those lists.)
pub(crate) const BEFORE_0025: &str = "
DROP VIEW explorer_moves_readable;
ALTER TABLE explorer_moves DROP CONSTRAINT explorer_moves_listed_games_check,
    DROP COLUMN listed_game_ids, DROP COLUMN listed_game_started, DROP COLUMN listed_game_ratings,
    ADD COLUMN top_game_ratings bigint[], ADD COLUMN top_game_ids bigint[],
    ADD CONSTRAINT explorer_moves_top_games_check
        CHECK ((top_game_ratings IS NULL) = (top_game_ids IS NULL)
               AND cardinality(top_game_ratings) = cardinality(top_game_ids)) NOT VALID;
CREATE VIEW explorer_moves_readable AS
SELECT x.position_id, p.normalized_fen AS fen, x.variant, speed_name(x.speed) AS speed,
       x.rating_group, month_text(x.month) AS month, move_uci_lichess(x.move, x.variant) AS uci,
       x.games, x.white, x.draws, x.black,
       floor((2 * x.mover_rating_sum + x.mover_rated_games)::numeric
             / nullif(2 * x.mover_rated_games, 0))::bigint AS average_rating,
       x.last_played, x.top_game_ids
FROM explorer_moves x
LEFT JOIN positions p ON p.id = x.position_id;
DELETE FROM pgnload_migrations WHERE version = 25";

/// Takes back what migration 0021 changed of the counters (on a single
/// node or a shard; on a coordinator, of its foreign partitions' columns):
/// the columns of the games' average ratings in place of the movers',
/// the readable view as 0019 wrote it, without its function; and forgets
/// it: a database counted before it.
pub(crate) const BEFORE_0021: &str = "
ALTER TABLE explorer_moves ADD COLUMN rated_games integer NOT NULL DEFAULT 0,
                           ADD COLUMN rating_sum bigint NOT NULL DEFAULT 0;
CREATE OR REPLACE VIEW explorer_moves_readable AS
SELECT x.position_id, p.normalized_fen AS fen, x.variant, speed_name(x.speed) AS speed,
       x.rating_group, month_text(x.month) AS month, move_uci(x.move, x.variant) AS uci,
       x.games, x.white, x.draws, x.black,
       x.rating_sum / nullif(x.rated_games, 0) AS average_rating, x.last_played, x.top_game_ids
FROM explorer_moves x
LEFT JOIN positions p ON p.id = x.position_id;
DROP FUNCTION move_uci_lichess(integer, game_variant);
ALTER TABLE explorer_moves DROP COLUMN mover_rated_games, DROP COLUMN mover_rating_sum;
DELETE FROM pgnload_migrations WHERE version = 21";

/// A move's `averageRating` in `answer` (`None`: the key is left out).
fn average_of(answer: &Value, uci: &str) -> Option<i64> {
    let found = answer["moves"]
        .as_array()
        .expect("moves")
        .iter()
        .find(|m| m["uci"] == uci)
        .unwrap_or_else(|| panic!("{uci} in {answer}"));
    found
        .get("averageRating")
        .map(|a| a.as_i64().expect("an integer"))
}

#[test]
fn average_ratings_are_the_movers_and_a_database_counted_before_0021_is_recounted() {
    let dir = scratch_dir("pgnload-explorer-mover-");
    let movers = dir.path().join("movers.pgn");
    std::fs::write(&movers, MOVER_GAMES).expect("write the games");
    let files = vec![data("lichess-2025-05-sample.pgn"), movers];
    let db = fresh_db("explorer_mover");
    enable_explorer(db.pgnload());
    assert_ok(&import(&db, &["-q", "--mode", "incremental"], &files), &[0]);
    let answers = |db: &TestDb| {
        let start = assert_explore_matches_python(db, &files, None, &[]);
        // Lichess's own figure for 1.a4 in this sample: White's ratings.
        assert_eq!(average_of(&start, "a2a4"), Some(464), "{start}");
        for play in ["e4", "e4,e5", "e4,e5,Nf3"] {
            assert_explore_matches_python(db, &files, None, &["--play", play]);
        }
        let only_ours = ["--speeds", "correspondence", "--play"];
        let after = |play: &str| {
            let mut args = only_ours.to_vec();
            args.push(play);
            explore_json(db, &args)
        };
        assert_eq!(average_of(&after("e4"), "e7e5"), Some(2000));
        assert_eq!(average_of(&after("e4,e5"), "g1f3"), Some(1600));
        let knights = after("e4,e5,Nf3");
        assert_eq!(average_of(&knights, "b8c6"), Some(2000));
        assert_eq!(average_of(&knights, "g8f6"), None, "{knights}");
    };
    answers(&db);
    // The readable view: the same rule, and castling king to rook.
    assert_eq!(
        db.psql(
            "SELECT count(*) FILTER (WHERE uci = 'e1h1') > 0, count(*) FILTER (WHERE uci = 'e1g1')
             FROM explorer_moves_readable WHERE variant = 'standard'"
        ),
        "t|0"
    );
    // After 2.Nf3, one row per key: game 1's (Black 2100, rating group
    // 1800), game 3's (Black 1900, unrated group), game 2's (Black
    // unrated).
    assert_eq!(
        db.psql(
            "SELECT string_agg(uci || ' ' || coalesce(average_rating::text, '-'), ','
                               ORDER BY uci, average_rating)
             FROM explorer_moves_readable
             WHERE fen = 'rnbqkbnr/pppp1ppp/8/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R b KQkq -'
               AND speed = 'correspondence'"
        ),
        "b8c6 1900,b8c6 2100,g8f6 -"
    );
    let counted = counters_by_fen(&db);

    // Counted before 0021 (averages of both ratings): recounted by it.
    db.psql(BEFORE_0025);
    db.psql(BEFORE_0021);
    db.psql(
        "UPDATE explorer_moves e SET rated_games = r.n, rating_sum = r.s
         FROM (SELECT position_id, variant, speed, rating_group, month, move,
                      count(average)::integer AS n, coalesce(sum(average), 0)::bigint AS s
               FROM explorer_game_moves GROUP BY 1, 2, 3, 4, 5, 6) r
         WHERE (e.position_id, e.variant, e.speed, e.rating_group, e.month, e.move)
             = (r.position_id, r.variant, r.speed, r.rating_group, r.month, r.move)",
    );
    let migrated = db.quiet_ok(&["db", "migrate"]);
    assert!(
        migrated.contains("applied 0021_explorer_mover_rating.sql"),
        "{migrated}"
    );
    assert_eq!(counters_by_fen(&db), counted);
    answers(&db);
    let (code, output) = verify_explorer(&db, dir.path());
    assert_eq!(code, Some(0), "{output}");
}

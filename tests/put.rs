//! `pgnload game put`: a new game is stored as the import would store it
//! (`game show` reads back as the file, by python-chess), the same game
//! again changes nothing, an edited game replaces the stored one (by its
//! Lichess id, or named with `--replace`) with `verify --games` and
//! `verify --explorer` clean after each step, and bad input (several
//! games, none, an illegal move, an unknown or taken `--replace` target,
//! an unfinished bulk load, a failure part-way) gets a clear message,
//! exit code 2, and leaves the database exactly as it was. On
//! `--database-url` and on the embedded cluster.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use crate::{
    common::{
        TestDb, assert_games_verify_clean, data, embedded_pgnload, enable_explorer, migrated_db,
        run, scratch_dir,
    },
    import::{assert_ok, import},
    query::assert_same_games,
};

/// The first game of the PGN file `name` in tests/data.
fn first_game(name: &str) -> String {
    let text = std::fs::read_to_string(data(name)).expect("read test data");
    let end = text[1..].find("\n[Event ").map_or(text.len(), |at| at + 2);
    text[..end].trim_end().to_owned() + "\n"
}

/// `game` with its moves from `marker` (in the movetext) on cut, ending
/// with its result: a legal game with fewer moves.
fn cut_moves(game: &str, marker: &str) -> String {
    let movetext = game.find("\n\n").expect("a movetext after the tags");
    let at = movetext + game[movetext..].find(marker).expect("the marker");
    let result = game.split_whitespace().last().expect("a result");
    format!("{} {result}\n", game[..at].trim_end())
}

/// Writes `text` to `name` in `dir`.
fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a PGN file");
    path
}

/// `game put ARGS FILE` with `cmd` (a `pgnload` for the database).
fn put(mut cmd: Command, args: &[&str], file: &Path) -> Output {
    cmd.args(["game", "put"]).args(args).arg(file);
    run(cmd)
}

/// The stdout of a run that must exit 0.
fn ok_stdout(out: &Output) -> String {
    assert_ok(out, &[0]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every row of every table a put writes (their text forms, sorted), to
/// compare the database before and after.
fn content(db: &TestDb) -> String {
    [
        "games",
        "moves",
        "positions",
        "players",
        "events",
        "explorer_moves",
    ]
    .map(|table| {
        db.psql(&format!(
            "SELECT '{table}: ' || count(*) || ' ' || coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '')
             FROM {table} t"
        ))
    })
    .join("\n")
}

/// `verify --games` and `verify --explorer` on `db` both exit 0.
fn assert_verify_clean(db: &TestDb, dir: &Path, context: &str) {
    for check in ["--games", "--explorer"] {
        let out = run({
            let mut c = db.pgnload();
            c.args(["-q", "verify", check, "--report"])
                .arg(dir.join("verify.tsv"));
            c
        });
        assert_eq!(
            out.status.code(),
            Some(0),
            "{context}: verify {check}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `SELECT` one value for game `id`.
fn of_game(db: &TestDb, id: &str, expr: &str) -> String {
    db.psql(&format!("SELECT {expr} FROM games WHERE id = {id}"))
}

/// The id in "stored as game ID (" / "replaced game ID (" / "unchanged: game ID (".
fn id_in(line: &str) -> String {
    let after = line.split("game ").nth(1).expect("a game id");
    after.split(' ').next().expect("an id").to_owned()
}

/// Long: one scenario, step by step; split, its steps would read out of
/// order.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, step by step; split, its steps would read out of order"
)]
fn put_stores_a_game_as_import_would_then_replaces_it_with_counters_exact() {
    let dir = scratch_dir("pgnload-put-");
    let db = migrated_db("put");
    enable_explorer(db.pgnload());
    // Games sharing positions with the ones put, so that counters are
    // decremented, not only created and dropped.
    assert_ok(
        &import(&db, &["-q"], &[data("lichess-2025-05-sample.pgn")]),
        &[0],
    );
    let games_before: i64 = db
        .psql("SELECT count(*) FROM games")
        .parse()
        .expect("count");

    // A new (non-Lichess) game: stored, shown back as the file.
    let game = first_game("kasparov-deep-blue-1997.pgn");
    let file = write(dir.path(), "kasparov.pgn", &game);
    let stored = ok_stdout(&put(db.pgnload(), &[], &file));
    assert!(stored.starts_with("stored as game "), "{stored}");
    assert!(stored.contains(": 89 moves, "), "{stored}");
    let id = id_in(&stored);
    assert_eq!(
        db.psql("SELECT count(*) FROM games"),
        (games_before + 1).to_string()
    );
    assert_eq!(of_game(&db, &id, "ply_count"), "89");
    assert_eq!(
        of_game(&db, &id, "source || ' ' || (import_file_id IS NULL)"),
        "pgn true"
    );
    let shown = run({
        let mut c = db.pgnload();
        c.args(["game", "show", &id]);
        c
    });
    let written = write(dir.path(), "shown.pgn", &ok_stdout(&shown));
    assert_same_games(&file, &written);
    assert_verify_clean(&db, dir.path(), "after a new game");

    // The same game again: nothing written, and said so.
    let before = content(&db);
    let again = ok_stdout(&put(db.pgnload(), &[], &file));
    assert!(
        again.starts_with(&format!("unchanged: game {id} (pgn:")),
        "{again}"
    );
    assert_eq!(content(&db), before, "an unchanged put wrote something");

    // Edited (its last moves cut): a new digest, so a new key; --replace
    // names the game it replaces, which keeps its id.
    let old_key = of_game(&db, &id, "external_id");
    let edited = write(dir.path(), "edited.pgn", &cut_moves(&game, "44.f6"));
    let replaced = ok_stdout(&put(db.pgnload(), &["--replace", &id], &edited));
    assert!(
        replaced.starts_with(&format!(
            "replaced game {id} (was pgn:{old_key}, 89 moves; now pgn:"
        )),
        "{replaced}"
    );
    assert!(
        replaced.contains("): 86 moves, 0 new positions"),
        "{replaced}"
    );
    assert_eq!(
        db.psql("SELECT count(*) FROM games"),
        (games_before + 1).to_string()
    );
    assert_ne!(of_game(&db, &id, "external_id"), old_key);
    assert_eq!(of_game(&db, &id, "ply_count"), "86");
    assert_eq!(
        db.psql(&format!(
            "SELECT count(*) || ' ' || max(ply) FROM moves WHERE game_id = {id}"
        )),
        "86 86",
        "the old moves are gone, the new ones there"
    );
    assert_eq!(
        db.psql(&format!(
            "SELECT count(*) FROM moves WHERE game_id = {id} AND san IN ('f6', 'Rd1', 'g7')"
        )),
        "0"
    );
    assert_verify_clean(&db, dir.path(), "after --replace");

    // A Lichess game re-put with other moves replaces it by its id.
    let lichess = first_game("lichess-2025-05-sample.pgn");
    let lichess_id = db.psql("SELECT id FROM games WHERE external_id = 'ENPo6ReH'");
    assert_eq!(of_game(&db, &lichess_id, "ply_count"), "42");
    let shorter = write(dir.path(), "lichess.pgn", &cut_moves(&lichess, " 11. "));
    let replaced = ok_stdout(&put(db.pgnload(), &[], &shorter));
    assert!(
        replaced.starts_with(&format!(
            "replaced game {lichess_id} (was lichess:ENPo6ReH, 42 moves; now lichess:ENPo6ReH): 20 moves"
        )),
        "{replaced}"
    );
    assert_eq!(
        db.psql(&format!(
            "SELECT count(*) || ' ' || max(ply) || ' ' || max(clock_ms) FROM moves WHERE game_id = {lichess_id}"
        )),
        "20 20 302000",
        "the new moves with their clocks"
    );
    assert_eq!(
        db.psql("SELECT count(*) FROM games"),
        (games_before + 1).to_string()
    );
    assert_verify_clean(&db, dir.path(), "after a Lichess game replaced by key");
    // And put back as it was: the counters follow again.
    let whole = write(dir.path(), "lichess-whole.pgn", &lichess);
    let back = ok_stdout(&put(db.pgnload(), &[], &whole));
    assert!(
        back.starts_with(&format!("replaced game {lichess_id} (")),
        "{back}"
    );
    assert_verify_clean(&db, dir.path(), "after the Lichess game put back");
}

/// Long: one scenario, step by step; split, its steps would read out of
/// order.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, step by step; split, its steps would read out of order"
)]
fn put_refuses_bad_input_with_a_message_and_changes_nothing() {
    let dir = scratch_dir("pgnload-put-bad-");
    let db = migrated_db("put_bad");
    enable_explorer(db.pgnload());
    assert_ok(
        &import(&db, &["-q"], &[data("lichess-2025-05-sample.pgn")]),
        &[0],
    );
    let game = first_game("kasparov-deep-blue-1997.pgn");
    let file = write(dir.path(), "kasparov.pgn", &game);
    let id = id_in(&ok_stdout(&put(db.pgnload(), &[], &file)));
    let lichess_id = db.psql("SELECT id FROM games WHERE external_id = 'ENPo6ReH'");
    let lichess = write(
        dir.path(),
        "lichess.pgn",
        &first_game("lichess-2025-05-sample.pgn"),
    );
    let edited = write(dir.path(), "edited.pgn", &cut_moves(&game, "44.f6"));
    let two = write(
        dir.path(),
        "two.pgn",
        &format!("{game}\n{}", cut_moves(&game, "44.f6")),
    );
    let empty = write(dir.path(), "empty.pgn", "\n\n");
    let illegal = write(
        dir.path(),
        "illegal.pgn",
        &game.replacen("1.Nf3", "1.Nf6", 1),
    );

    let before = content(&db);
    let cases: [(&[&str], &Path, String); 5] = [
        (
            &[],
            &two,
            format!(
                "{}: holds more than one game (game #2 starts at byte {})",
                two.display(),
                game.len() + 1
            ),
        ),
        (&[], &empty, format!("{}: holds no game", empty.display())),
        (
            &[],
            &illegal,
            format!(
                "{}: its game cannot be stored: illegal move \"Nf6\" at ply 1",
                illegal.display()
            ),
        ),
        (
            &["--replace", "99999999"],
            &edited,
            "no game 99999999 in the database: nothing to replace".to_owned(),
        ),
        (
            &["--replace", &id],
            &lichess,
            format!(
                "conflict: the game put is already stored as game {lichess_id} \
                 (lichess:ENPo6ReH), not as game {id}"
            ),
        ),
    ];
    for (args, file, message) in &cases {
        let out = put(db.pgnload(), args, file);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {file:?}: {stderr}");
        assert!(
            stderr.contains(message.as_str()),
            "{args:?} {file:?}: {stderr}"
        );
        assert_eq!(
            content(&db),
            before,
            "{args:?} {file:?} changed the database"
        );
    }

    // Refused, as a delete is, while a bulk load is unfinished: its games
    // are counted only at its finish.
    db.psql("INSERT INTO import_bulk_loads (state) VALUES ('loading')");
    let out = put(db.pgnload(), &["--replace", &id], &edited);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "stopped unfinished: positions and moves have no indexes and its games are counted \
             only at its finish. Finish it with `pgnload import` (--mode auto or bulk), then put \
             games"
        ),
        "{out:?}"
    );
    db.psql("DELETE FROM import_bulk_loads");
    assert_eq!(content(&db), before, "a refused put changed the database");

    // One transaction: a failure after the old game is out (its counters
    // decremented, its moves and row deleted) and the new row is in
    // (copying the moves) rolls all of it back.
    db.psql(
        "CREATE FUNCTION put_fails() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
         CREATE TRIGGER put_fails BEFORE INSERT ON moves
             FOR EACH STATEMENT EXECUTE FUNCTION put_fails();",
    );
    let out = put(db.pgnload(), &["--replace", &id], &edited);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("injected failure"),
        "{out:?}"
    );
    assert_eq!(content(&db), before, "a failed put left changes behind");
    db.psql("DROP TRIGGER put_fails ON moves");
    assert_verify_clean(&db, dir.path(), "after the refused puts");
}

#[test]
fn put_works_the_same_on_the_embedded_cluster() {
    let dir = scratch_dir("pgnload-put-embedded-");
    let data_dir = dir.path().join("data");
    let game = first_game("nepomniachtchi-liren-game1.pgn");
    let file = write(dir.path(), "game.pgn", &game);
    let stored = ok_stdout(&put(embedded_pgnload(&data_dir), &[], &file));
    assert!(stored.starts_with("stored as game 1 ("), "{stored}");
    enable_explorer(embedded_pgnload(&data_dir));
    let again = ok_stdout(&put(embedded_pgnload(&data_dir), &[], &file));
    assert!(again.starts_with("unchanged: game 1 ("), "{again}");
    let edited = write(dir.path(), "edited.pgn", &cut_moves(&game, "20. Rad1"));
    let replaced = ok_stdout(&put(
        embedded_pgnload(&data_dir),
        &["--replace", "1"],
        &edited,
    ));
    assert!(replaced.starts_with("replaced game 1 (was "), "{replaced}");
    assert!(
        replaced.contains("): 38 moves, 0 new positions"),
        "{replaced}"
    );
    assert_games_verify_clean(
        &data_dir,
        &dir.path().join("verify.tsv"),
        "embedded, after put and --replace",
    );
    let stop = run({
        let mut c = embedded_pgnload(&data_dir);
        c.args(["db", "stop"]);
        c
    });
    assert_ok(&stop, &[0]);
}

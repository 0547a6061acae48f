//! Reading the data back: `games` searches against a python-chess recount,
//! `game show` and `export` read back by python-chess, export → import
//! round trips, and bad input.

use std::path::Path;

use crate::common::{
    TestDb, data, data_pgns, embedded_pgnload, migrated_db, python_script, run, scratch_dir,
};

fn import(db: &TestDb, files: &[&Path]) {
    let mut args = vec!["import".to_owned()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    db.quiet_ok(&args);
}

/// Games with repeated players: Lichess games (one player whose name is
/// spelled three ways) and other games (`alice` and `Alice` are two
/// players, both found by either name), some reaching 1. e4 e5, one
/// ending in a position no other game reaches.
const PLAYERS_PGN: &str = r#"[Event "Casual"]
[Site "https://lichess.org/aaaaaaa1"]
[White "Alice"]
[Black "Bob"]
[Result "1-0"]

1. e4 e5 2. Nf3 Nc6 3. Bb5 1-0

[Event "Casual"]
[Site "https://lichess.org/aaaaaaa2"]
[White "bob"]
[Black "ALICE"]
[Result "0-1"]

1. e4 e5 2. Nf3 Nf6 0-1

[Event "Casual"]
[Site "https://lichess.org/aaaaaaa3"]
[White "alice"]
[Black "Carol"]
[Result "1/2-1/2"]

1. d4 d5 2. c4 e6 1/2-1/2

[Event "Club"]
[Site "Town"]
[White "Alice"]
[Black "Bob"]
[Result "0-1"]

1. e4 e5 2. Qh5 Nc6 3. Bc4 g6 4. Qf3 Nf6 0-1

[Event "Club"]
[Site "Town"]
[White "alice"]
[Black "Alice"]
[Result "*"]

1. c4 e5 2. g3 Nf6 3. Bg2 d5 4. cxd5 Nxd5 5. Nc3 Nb6 6. d3 Be7 *

[Event "Club"]
[Site "Town"]
[White "Dave"]
[Black "alice"]
[Result "1-0"]

1. e4 c5 1-0
"#;

/// Games whose tags no column holds as written, for the round trip: a
/// partial date, a rating with a question mark, a name written twice, a
/// value with a quote and a backslash, a Date that is not the `UTCDate`, a
/// `UTCDate` without a time, a termination without letters, an unknown
/// Result, clocks with tenths and hundredths, mate scores, NAGs, and a
/// start with Black to move.
const EDGE_PGN: &str = r#"[Event "Edge \"one\" \\ back"]
[Site "Somewhere"]
[Date "2020.??.??"]
[White "A"]
[White "A2"]
[Black "B"]
[WhiteElo "2700?"]
[Termination "-"]
[Result "1-0"]
[Annotator "x"]
[Annotator "y"]

1. e4 $1 { [%eval 0.25] [%clk 0:05:00.5] } 1... e5 $6 { [%eval #-3] [%clk 0:04:59.25] } 2. Nf3 1-0

[Event "Edge two"]
[Date "2021.03.04"]
[UTCDate "2021.03.05"]
[UTCTime "10:11:12"]
[White "C"]
[Black "D"]
[Result "garbage"]
[FEN "4k3/8/8/8/8/8/4P3/4K3 b - - 0 40"]
[SetUp "1"]

40... Kd7 41. e4 Kd6 *

[Event "Edge three"]
[UTCDate "2022.01.02"]
[UTCTime "nonsense"]
[White "E"]
[Black "F"]
[Result "1/2-1/2"]
[Termination "Adjudication"]

1. d4 d5 1/2-1/2
"#;

/// The game lines `py_query.py ARGS FILES` prints.
fn python_lines(args: &[&str], files: &[&Path]) -> Vec<String> {
    let out = run({
        let mut c = python_script("py_query.py");
        c.args(args).args(files);
        c
    });
    assert!(
        out.status.success(),
        "py_query.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The same lines from `pgnload games --format json ARGS`.
fn pgnload_lines(db: &TestDb, args: &[&str]) -> Vec<String> {
    let mut full = vec!["games", "--format", "json"];
    full.extend(args);
    let mut lines: Vec<String> = db
        .quiet_ok(&full)
        .lines()
        .map(|line| {
            let game: serde_json::Value = serde_json::from_str(line).expect("a JSON object");
            let lichess = game["source"] == "lichess";
            let name = |side: &str| {
                let name = game[side].as_str().unwrap_or("").to_owned();
                if lichess { name.to_lowercase() } else { name }
            };
            format!(
                "{}\t{}\t{}\t{}",
                name("white"),
                name("black"),
                game["result"].as_str().expect("result"),
                game["ply_count"]
            )
        })
        .collect();
    lines.sort();
    lines
}

/// Long: one scenario, step by step; split, its steps would read out of
/// order.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, step by step; split, its steps would read out of order"
)]
fn player_and_position_searches_match_a_python_recount() {
    let dir = scratch_dir("pgnload-query-");
    let players = dir.path().join("players.pgn");
    std::fs::write(&players, PLAYERS_PGN).expect("write corpus");
    let files = [
        players.as_path(),
        &data("lichess-2025-05-sample.pgn"),
        &data("kasparov-deep-blue-1997.pgn"),
        &data("saturs-jannlee-zh-lichess.pgn"),
        &data("knightvuillaume-jannlee-zh-lichess.pgn"),
        &data("cutechess-fischerrandom.pgn"),
    ];
    let db = migrated_db("query_search");
    import(&db, &files);
    let after_e4_e5 = "rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq e6 0 2";
    let never_reached = "r1b1k2r/ppppqppp/1bn5/4P3/2B5/2P5/PP3PPP/RNBQ1RK1 b kq - 0 1";
    let searches: Vec<Vec<&str>> = vec![
        vec!["--player", "alice"],
        vec!["--player", "ALICE", "--color", "white"],
        vec!["--player", "Alice", "--color", "black"],
        vec!["--player", "alice", "--opponent", "BOB"],
        vec!["--player", "Alice", "--opponent", "alice"],
        vec!["--player", "JannLee"],
        vec!["--player", "Garry Kasparov", "--color", "black"],
        vec![
            "--fen",
            "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
        ],
        vec!["--fen", after_e4_e5],
        vec![
            "--fen",
            "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1",
        ],
        vec![
            "--fen",
            "r1bqkbnr/pppp1ppp/2n5/1B2p3/4P3/5N2/PPPP1PPP/RNBQK2R b KQkq - 3 3",
        ],
        vec![
            "--fen",
            "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR[] w KQkq - 0 1",
            "--variant",
            "crazyhouse",
        ],
        vec!["--player", "alice", "--fen", after_e4_e5],
        // Reached only as a game's final position.
        vec![
            "--fen",
            "rnbqk2r/ppp1bppp/1n6/4p3/8/2NP2P1/PP2PPBP/R1BQK1NR w KQkq - 1 7",
        ],
    ];
    let mut nonempty = 0;
    for search in &searches {
        let expected = python_lines(search, &files);
        let got = pgnload_lines(&db, search);
        assert_eq!(got, expected, "games {search:?}");
        nonempty += usize::from(!got.is_empty());
    }
    assert_eq!(nonempty, searches.len(), "every search finds games");
    // A limited search for a frequent position walks the games newest
    // first; it must list the first games the full search lists.
    let start = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1";
    let all = db.quiet_ok(&["games", "--format", "json", "--fen", start]);
    let limited = db.quiet_ok(&["games", "--format", "json", "--fen", start, "--limit", "5"]);
    assert_eq!(
        limited.lines().collect::<Vec<_>>(),
        all.lines().take(5).collect::<Vec<_>>()
    );
    assert!(
        all.lines().count() > 400,
        "{} games from the start",
        all.lines().count()
    );
    // A name is found in any case in every source: the Lichess "alice"
    // and the other source's `alice` and `Alice`.
    assert_eq!(pgnload_lines(&db, &["--player", "alice"]).len(), 6);
    assert_eq!(pgnload_lines(&db, &["--player", "Alice"]).len(), 6);
    // A legal position no game reached, and filters no game passes: empty, exit 0.
    for args in [
        vec!["--fen", never_reached],
        vec!["--player", "alice", "--since", "2100-01-01"],
        vec!["--player", "bob", "--result", "1/2-1/2"],
    ] {
        assert_eq!(pgnload_lines(&db, &args), Vec::<String>::new(), "{args:?}");
    }
    // Filters on columns, against the rows themselves.
    let count = |args: &[&str]| pgnload_lines(&db, args).len().to_string();
    let sql = |condition: &str| db.psql(&format!("SELECT count(*) FROM games WHERE {condition}"));
    assert_eq!(
        count(&["--speed", "blitz"]),
        sql(
            "time_initial_s + 40 * time_increment_s >= 180 AND time_initial_s + 40 * time_increment_s < 480"
        )
    );
    assert_eq!(
        count(&["--speed", "correspondence"]),
        sql("time_initial_s IS NULL OR time_initial_s + 40 * time_increment_s >= 21600")
    );
    assert_eq!(
        count(&["--min-rating", "2000"]),
        sql("white_elo >= 2000 AND black_elo >= 2000")
    );
    assert_eq!(count(&["--result", "0-1"]), sql("result = -1"));
    assert_eq!(
        count(&["--variant", "Chess960"]),
        sql("variant = 'chess960'")
    );
    assert_eq!(
        count(&["--since", "1997-05-04", "--until", "1997-05-06"]),
        sql("started_at >= '1997-05-04' AND started_at < '1997-05-07'")
    );
    assert_eq!(count(&["--limit", "7"]), "7");
}

/// The cells of each line of a `games` table (columns are separated by
/// two spaces or more, a cell holds no two spaces in a row).
fn table_cells(table: &str) -> Vec<Vec<&str>> {
    table
        .lines()
        .map(|line| {
            line.split("  ")
                .map(str::trim)
                .filter(|cell| !cell.is_empty())
                .collect()
        })
        .collect()
}

#[test]
fn json_lines_and_the_table_say_what_the_game_is() {
    let db = migrated_db("query_json");
    import(
        &db,
        &[
            &data("lichess-2025-05-sample.pgn"),
            &data("kasparov-deep-blue-1997.pgn"),
        ],
    );
    let out = db.quiet_ok(&["games", "--format", "json", "--player", "RAHMAT_TOJENG"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    let game: serde_json::Value = serde_json::from_str(lines[0]).expect("JSON");
    let id = db.psql("SELECT id FROM games WHERE external_id = 'xZhyPFE7'");
    assert_eq!(
        game,
        serde_json::json!({
            "id": id.parse::<i64>().expect("an id"),
            "source": "lichess",
            "external_id": "xZhyPFE7",
            "white": "rahmat_tojeng",
            "black": "vckxlrxmz",
            "white_elo": 1803,
            "black_elo": 1802,
            "result": "0-1",
            // RFC 3339 as jq's fromdate reads it too (issue 28, item 7).
            "started_at": "2025-05-01T00:00:30Z",
            "ply_count": 36,
            "event": "Rated Blitz tournament https://lichess.org/tournament/kMtyy84D",
            "time_control": "300+0",
            "eco": "B01",
            "variant": "standard",
            "termination": "normal",
        })
    );
    let table = db.quiet_ok(&["games", "--player", "rahmat_tojeng"]);
    let rows = table_cells(&table);
    assert_eq!(rows.len(), 2, "a header and one game: {table}");
    let cells: Vec<(&str, &str)> = rows[0]
        .iter()
        .copied()
        .zip(rows[1].iter().copied())
        .collect();
    assert_eq!(
        cells,
        [
            ("id", id.as_str()),
            ("started (UTC)", "2025-05-01 00:00"),
            ("white", "rahmat_tojeng (1803)"),
            ("black", "vckxlrxmz (1802)"),
            ("result", "0-1"),
            ("ply", "36"),
            ("tc", "300+0"),
            ("eco", "B01"),
            ("variant", "standard"),
            ("termination", "normal"),
            (
                "event",
                "Rated Blitz tournament https://lichess.org/tournament/kMtyy84D"
            ),
        ],
        "{table}"
    );
    assert_tags_absent_are_null_and_dashes(&db);
}

/// The games of `Garry Kasparov` (no `TimeControl` nor `Termination`) say
/// so: null in JSON, `-` in the table.
fn assert_tags_absent_are_null_and_dashes(db: &TestDb) {
    let out = db.quiet_ok(&["games", "--format", "json", "--player", "Garry Kasparov"]);
    assert_eq!(out.lines().count(), 6, "{out}");
    for line in out.lines() {
        let game: serde_json::Value = serde_json::from_str(line).expect("JSON");
        assert!(
            game["time_control"].is_null() && game["termination"].is_null(),
            "{game}"
        );
        assert!(game["eco"].is_string(), "{game}");
    }
    let table = db.quiet_ok(&["games", "--player", "Garry Kasparov", "--limit", "1"]);
    let table = table_cells(&table);
    let cells: Vec<(&str, &str)> = table[0]
        .iter()
        .copied()
        .zip(table[1].iter().copied())
        .collect();
    assert!(
        cells.contains(&("tc", "-")) && cells.contains(&("termination", "-")),
        "{cells:?}"
    );
}

/// `py_pgn_same.py SOURCE WRITTEN` must find no difference.
pub fn assert_same_games(source: &Path, written: &Path) {
    let out = run({
        let mut c = python_script("py_pgn_same.py");
        c.arg(source).arg(written);
        c
    });
    assert!(
        out.status.success(),
        "{} read back differs:\n{}{}",
        source.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn game_show_and_export_read_back_as_the_source_games() {
    let dir = scratch_dir("pgnload-show-");
    for file in data_pgns() {
        let db = migrated_db("query_show");
        import(&db, &[&file]);
        // Every game by `game show ID`, in import order…
        let ids = db.psql("SELECT id FROM games ORDER BY id");
        let mut shown = String::new();
        for id in ids.lines() {
            shown.push_str(&db.quiet_ok(&["game", "show", id]));
        }
        let shown_file = dir.path().join("shown.pgn");
        std::fs::write(&shown_file, &shown).expect("write");
        assert_same_games(&file, &shown_file);
        crate::annotations::assert_same_trees(&file, &shown_file);
        // …and all of them by `export`.
        let exported = dir.path().join("exported.pgn");
        let summary = db.quiet_ok(&["export", "-o", &exported.display().to_string()]);
        assert_eq!(
            summary,
            format!(
                "exported {} games to {}\n",
                ids.lines().count(),
                exported.display()
            )
        );
        assert_same_games(&file, &exported);
        crate::annotations::assert_same_trees(&file, &exported);
    }
    // By natural key, the same text as by id.
    let db = migrated_db("query_show_key");
    import(&db, &[&data("lichess-2025-05-sample.pgn")]);
    let id = db.psql("SELECT id FROM games WHERE source = 'lichess' AND external_id = 'xZhyPFE7'");
    let by_key = db.quiet_ok(&["game", "show", "lichess:xZhyPFE7"]);
    assert_eq!(by_key, db.quiet_ok(&["game", "show", &id]));
    assert!(by_key.contains("{ [%clk 0:05:00] }"), "{by_key}");
}

/// Every natural-key row of a database, as text: games (with their
/// players, event and first/last positions), moves (with their
/// positions), positions, players and events.
fn natural_rows(db: &TestDb) -> Vec<(String, String)> {
    let queries = [
        (
            "games",
            "SELECT g.source, g.external_id, g.site, g.round, wp.username, wp.username_key, bp.username,
                    g.white_elo, g.black_elo, g.white_rating_diff, g.black_rating_diff, g.time_control,
                    g.time_initial_s, g.time_increment_s, g.variant, g.termination, g.result, g.eco,
                    g.opening, g.started_at, g.ply_count, md5(g.moves), g.start_fen, g.tags::text,
                    e.event_key, e.name, e.kind, ip.normalized_fen, fp.normalized_fen
             FROM games g LEFT JOIN players wp ON wp.id = g.white_player_id
             LEFT JOIN players bp ON bp.id = g.black_player_id LEFT JOIN events e ON e.id = g.event_id
             JOIN positions ip ON ip.id = g.initial_position_id
             JOIN positions fp ON fp.id = g.final_position_id
             ORDER BY g.source, g.external_id",
        ),
        (
            "moves",
            "SELECT g.source, g.external_id, md5(string_agg(concat_ws(',', m.ply, m.uci, m.san,
                    m.clock_ms, m.eval_cp, m.eval_mate, m.nag, p.normalized_fen, a.normalized_fen),
                    ';' ORDER BY m.ply)), count(*)
             FROM moves m JOIN games g ON g.id = m.game_id
             JOIN positions p ON p.id = m.position_id JOIN positions a ON a.id = m.position_after_id
             GROUP BY g.source, g.external_id ORDER BY g.source, g.external_id",
        ),
        (
            "positions",
            "SELECT normalized_fen, fen_hash, piece_placement, active_color, castling, en_passant
             FROM positions ORDER BY normalized_fen",
        ),
        (
            "players",
            "SELECT source, username, username_key, title, is_bot FROM players
             ORDER BY source, username_key",
        ),
        (
            "events",
            "SELECT source, event_key, external_id, name, kind FROM events ORDER BY source, event_key",
        ),
    ];
    queries
        .iter()
        .flat_map(|(table, sql)| {
            db.psql(sql)
                .lines()
                .map(|line| ((*table).to_owned(), line.to_owned()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Long: one scenario, step by step; split, its steps would read out of
/// order.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, step by step; split, its steps would read out of order"
)]
fn export_then_import_gives_the_same_rows() {
    let dir = scratch_dir("pgnload-roundtrip-");
    let random = dir.path().join("random.pgn");
    let generated = run({
        let mut c = python_script("gen_random_games.py");
        // Enough games for export to read several rounds of batches, on
        // both of its connections.
        c.args(["--seed", "20261123", "--games", "1100", "--out"])
            .arg(&random);
        c
    });
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let edge = dir.path().join("edge.pgn");
    std::fs::write(&edge, EDGE_PGN).expect("write corpus");
    let mut files = data_pgns();
    files.push(random);
    files.push(edge);
    let files: Vec<&Path> = files.iter().map(std::path::PathBuf::as_path).collect();
    let original = migrated_db("query_rt_a");
    import(&original, &files);
    let exported = dir.path().join("all.pgn");
    original.quiet_ok(&["export", "-o", &exported.display().to_string()]);
    let copy = migrated_db("query_rt_b");
    import(&copy, &[&exported]);
    let (a, b) = (natural_rows(&original), natural_rows(&copy));
    let games = original.psql("SELECT count(*) FROM games");
    assert!(games.parse::<u32>().expect("count") > 1500, "{games} games");
    // In the same order: export writes in import order, and the copy
    // numbers its games as it reads them.
    let in_order =
        "SELECT md5(string_agg(source || ':' || external_id, ',' ORDER BY id)) FROM games";
    assert_eq!(
        original.psql(in_order),
        copy.psql(in_order),
        "games reordered"
    );
    for variant in [
        "chess960",
        "crazyhouse",
        "three_check",
        "racing_kings",
        "horde",
    ] {
        assert_ne!(
            original.psql(&format!(
                "SELECT count(*) FROM games WHERE variant = '{variant}'"
            )),
            "0",
            "the corpus lost its {variant} games"
        );
    }
    let only_a: Vec<_> = a.iter().filter(|row| !b.contains(row)).take(5).collect();
    let only_b: Vec<_> = b.iter().filter(|row| !a.contains(row)).take(5).collect();
    assert!(
        only_a.is_empty() && only_b.is_empty() && a.len() == b.len(),
        "rows differ ({} vs {}):\noriginal only: {only_a:#?}\ncopy only: {only_b:#?}",
        a.len(),
        b.len()
    );
    // A filtered export reimports to exactly the games it selected.
    let zh = dir.path().join("zh.pgn");
    original.quiet_ok(&[
        "export",
        "--variant",
        "crazyhouse",
        "-o",
        &zh.display().to_string(),
    ]);
    let part = migrated_db("query_rt_c");
    import(&part, &[&zh]);
    assert_eq!(
        part.psql("SELECT string_agg(external_id, ',' ORDER BY external_id) FROM games"),
        original.psql(
            "SELECT string_agg(external_id, ',' ORDER BY external_id) FROM games
             WHERE variant = 'crazyhouse'"
        )
    );
    // A pipe that exists is written to, not replaced by a finished file
    // renamed onto it (as `-o /dev/null` once was).
    let fifo = dir.path().join("zh.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let (sent, piped) = std::sync::mpsc::channel();
    let reading = fifo.clone();
    std::thread::spawn(move || sent.send(std::fs::read(&reading).expect("read the fifo")));
    original.quiet_ok(&[
        "export",
        "--variant",
        "crazyhouse",
        "-o",
        &fifo.display().to_string(),
    ]);
    let piped = piped
        .recv_timeout(std::time::Duration::from_mins(1))
        .expect("the export wrote into the fifo");
    assert_eq!(piped, std::fs::read(&zh).expect("read zh.pgn"));
    assert!(
        std::os::unix::fs::FileTypeExt::is_fifo(
            &std::fs::metadata(&fifo).expect("stat the fifo").file_type()
        ),
        "the fifo is still a fifo"
    );
}

#[test]
fn bad_input_gets_a_message_and_exit_code_2() {
    let db = migrated_db("query_bad");
    import(
        &db,
        &[
            &data("kasparov-deep-blue-1997.pgn"),
            &data("saturs-jannlee-zh-lichess.pgn"),
        ],
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["games", "--player", "nobody"],
            "--player: no player called \"nobody\"",
        ),
        // A name that is no player's in any case: the nearest names.
        (
            vec!["games", "--player", "kasparov"],
            "--player: no player called \"kasparov\" in the database; \
             did you mean \"Garry Kasparov\"?",
        ),
        (
            vec!["export", "--player", "Gary Kasparow", "-o", "-"],
            "did you mean \"Garry Kasparov\"?",
        ),
        (
            vec![
                "games",
                "--player",
                "Garry Kasparov",
                "--opponent",
                "nobody",
            ],
            "--opponent: no player called \"nobody\"",
        ),
        (vec!["games", "--fen", "not a fen"], "FEN"),
        (
            vec![
                "games",
                "--fen",
                "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
                "--variant",
                "racing_kings",
            ],
            "not a legal racing_kings position",
        ),
        (
            vec![
                "export",
                "--fen",
                "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR[Q] w KQkq - 0 1",
            ],
            "not a legal standard position",
        ),
        (vec!["game", "show", "999999"], "game 999999: no such game"),
        (
            vec!["game", "show", "lichess:zzzzzzzz"],
            "game lichess:zzzzzzzz: no such game",
        ),
        (
            vec!["games", "--since", "2024-02-01", "--until", "2024-01-01"],
            "is after --until",
        ),
    ];
    for (args, message) in cases {
        let out = db.quiet(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} printed {:?}", out.stdout);
    }
    // Not a game reference at all: clap's usage error, naming every form.
    for bad in ["ENPo6Re", "https://lichess.org/tournament/kMtyy84D"] {
        let out = db.quiet(&["game", "show", bad]);
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("invalid value"), "{bad}: {stderr}");
    }
    let out = db.quiet(&["game", "show", "ENPo6Re"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("SOURCE:EXTERNAL_ID"));
}

#[test]
fn the_commands_work_on_the_embedded_cluster() {
    let dir = scratch_dir("pgnload-query-embedded-");
    let data_dir = dir.path().join("data");
    let ok = |args: &[&str]| {
        let out = run({
            let mut c = embedded_pgnload(&data_dir);
            c.arg("-q").args(args);
            c
        });
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let source = data("kasparov-deep-blue-1997.pgn");
    ok(&["import", &source.display().to_string()]);
    let listed = ok(&["games", "--format", "json", "--player", "Garry Kasparov"]);
    assert_eq!(listed.lines().count(), 6, "{listed}");
    let shown = dir.path().join("shown.pgn");
    let mut text = String::new();
    for id in 1..=6 {
        text.push_str(&ok(&["game", "show", &id.to_string()]));
    }
    std::fs::write(&shown, text).expect("write");
    let exported = dir.path().join("export.pgn");
    ok(&["export", "-o", &exported.display().to_string()]);
    assert_eq!(
        std::fs::read_to_string(&exported).expect("export"),
        std::fs::read_to_string(&shown).expect("shown"),
        "export writes what game show writes"
    );
    assert_same_games(&source, &exported);
    ok(&["db", "stop"]);
}

/// Control characters in names (ESC starting a colour sequence, BEL, a
/// tab, DEL, the C1 controls NEL and CSI) are shown escaped in the tables
/// of `games` and `explore`, never sent raw to the terminal.
#[test]
fn control_characters_in_names_are_escaped_in_tables() {
    let dir = scratch_dir("pgnload-controls-");
    let file = dir.path().join("controls.pgn");
    std::fs::write(
        &file,
        "[Event \"Open\u{7}Bell\"]\n[White \"a\u{1b}[31mred\"]\n[Black \"tab\there\u{7f}\u{85}\u{9b}2J\"]\n[Date \"2024.01.02\"]\n[WhiteElo \"2000\"]\n[BlackElo \"2100\"]\n[Result \"1-0\"]\n\n1. e4 e5 2. Qh5 Nc6 1-0\n\n",
    )
    .expect("write");
    let db = migrated_db("controls");
    crate::common::enable_explorer(db.pgnload());
    import(&db, &[&file]);
    let white = "a\\u{1b}[31mred";
    let black = "tab\\u{9}here\\u{7f}\\u{85}\\u{9b}2J";
    let table = db.quiet_ok(&["games"]);
    let explore = db.quiet_ok(&["explore", "--play", "e2e4", "--top-games", "1"]);
    for (what, text) in [("games", &table), ("explore", &explore)] {
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{what} printed a raw control character: {text:?}"
        );
        assert!(text.contains(white), "{what}: {text}");
        assert!(text.contains(black), "{what}: {text}");
    }
    assert!(table.contains("Open\\u{7}Bell"), "{table}");
    // JSON and PGN keep the names as they are.
    let json = db.quiet_ok(&["games", "--format", "json"]);
    let line: serde_json::Value = serde_json::from_str(json.trim()).expect("json");
    assert_eq!(line["white"], "a\u{1b}[31mred");
}

/// Three games with clocks; the second and third give negative ones.
const NEGATIVE_CLOCKS: &str = "[Event \"good\"]\n[White \"a\"]\n[Black \"b\"]\n\n1. e4 { [%clk 0:05:00] } e5 { [%clk 0:05:00] } 1-0\n\n\
[Event \"minus hour\"]\n[White \"a\"]\n[Black \"b\"]\n\n1. d4 { [%clk 0:05:00] } d5 { [%clk -1:00:00] } 1-0\n\n\
[Event \"minus seconds\"]\n[White \"a\"]\n[Black \"b\"]\n\n1. c4 { [%eval 0.1] [%clk 0:00:-5] } c5 1-0\n\n";

/// A `%clk` below zero cannot be written back by any export: the import
/// rejects the game with its reason instead of storing it.
#[test]
fn a_negative_clock_is_rejected_at_import() {
    let dir = scratch_dir("pgnload-negclock-");
    let file = dir.path().join("clocks.pgn");
    std::fs::write(&file, NEGATIVE_CLOCKS).expect("write");
    let db = migrated_db("negclock_import");
    let out = db.quiet(&["import", &file.display().to_string()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(db.psql("SELECT count(*) FROM games"), "1");
    assert_eq!(
        db.psql("SELECT string_agg(game_number || ' ' || reason, ', ' ORDER BY game_number) FROM import_rejects"),
        "2 negative clock after ply 2: -3600000 ms, 3 negative clock after ply 1: -5000 ms"
    );
    // What is stored exports whole.
    let exported = dir.path().join("out.pgn");
    let summary = db.quiet_ok(&["export", "-o", &exported.display().to_string()]);
    assert!(summary.starts_with("exported 1 games to "), "{summary}");
}

/// A clock no format can write, stored by an earlier version (or by
/// hand): every export skips that game, says so and exits 1, and writes
/// the others; `games --format pgn` too; `game show` of that game fails
/// with the reason, not an internal error.
#[test]
fn a_stored_game_no_format_can_write_is_skipped_and_counted() {
    let dir = scratch_dir("pgnload-unwritable-");
    let db = migrated_db("unwritable");
    import(&db, &[&data("kasparov-deep-blue-1997.pgn")]);
    let bad = db.psql("SELECT min(id) FROM games");
    db.psql(&format!(
        "UPDATE moves SET clock_ms = -5000 WHERE game_id = {bad} AND ply = 3"
    ));
    let reason =
        format!("skipped game {bad} cannot be written: negative clock after ply 3: -5000 ms");
    for (format, name) in [
        ("pgn", "out.pgn"),
        ("dcg", "out"),
        ("ocgdb", "out.ocgdb.db3"),
    ] {
        let target = dir.path().join(name);
        let out = db.quiet(&[
            "export",
            "--format",
            format,
            "-o",
            &target.display().to_string(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{format}: {stderr}");
        assert!(stderr.contains(&reason), "{format}: {stderr}");
        assert!(!stderr.contains("internal error"), "{format}: {stderr}");
        assert!(
            stdout.starts_with("exported 5 games to "),
            "{format}: {stdout}"
        );
        assert!(
            stdout.contains("1 that cannot be written"),
            "{format}: {stdout}"
        );
    }
    let written = std::fs::read_to_string(dir.path().join("out.pgn")).expect("export");
    assert_eq!(written.matches("[Event ").count(), 5);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let listing = db.quiet(&["games", "--format", "pgn"]);
    assert_eq!(listing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&listing.stderr).contains(&reason));
    assert_eq!(
        String::from_utf8_lossy(&listing.stdout)
            .matches("[Event ")
            .count(),
        5
    );
    let show = db.quiet(&["game", "show", &bad]);
    let stderr = String::from_utf8_lossy(&show.stderr);
    assert_eq!(show.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("game {bad} cannot be written: negative clock")),
        "{stderr}"
    );
    assert!(!stderr.contains("internal error"), "{stderr}");
}

/// The `.partial` files in `dir`.
fn partial_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".partial"))
        .collect()
}

/// An output that is a directory is refused before any work (here before
/// even connecting: the database named does not exist), and an export that
/// fails leaves no `.partial` file.
#[test]
fn an_export_checks_its_target_first_and_leaves_nothing_when_it_fails() {
    let dir = scratch_dir("pgnload-export-target-");
    let nowhere = "postgresql:///no_such_database?host=/nonexistent-pgnload-socket";
    let existing = dir.path().join("existing");
    std::fs::create_dir(&existing).expect("mkdir");
    std::fs::create_dir(dir.path().join("base.dcg")).expect("mkdir");
    for (format, target) in [
        ("pgn", existing.clone()),
        ("ocgdb", existing.clone()),
        ("dcg", dir.path().join("base")),
    ] {
        let out = run({
            let mut c = crate::common::pgnload();
            c.env("DATABASE_URL", nowhere)
                .args(["-q", "export", "--format", format, "-o"])
                .arg(&target);
            c
        });
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{format}: {stderr}");
        assert!(stderr.contains("is a directory"), "{format}: {stderr}");
    }
    // A failure after the output file was opened: the server is not there.
    let out = run({
        let mut c = crate::common::pgnload();
        c.env("DATABASE_URL", nowhere)
            .args(["-q", "export", "-o"])
            .arg(dir.path().join("out.pgn"));
        c
    });
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(partial_files(dir.path()), Vec::<String>::new());
    assert!(!dir.path().join("out.pgn").exists());
}

/// SIGTERM stops an export even while it waits on the server (here on a
/// lock another session holds): exit code 3, and no `.partial` file left.
#[test]
fn an_interrupted_export_leaves_no_partial_files() {
    use std::io::Write as _;

    use nix::{
        sys::signal::{Signal, kill},
        unistd::Pid,
    };

    let dir = scratch_dir("pgnload-export-term-");
    let db = migrated_db("export_term");
    import(&db, &[&data("kasparov-deep-blue-1997.pgn")]);
    for (format, name) in [("pgn", "out.pgn"), ("dcg", "base"), ("ocgdb", "out.db3")] {
        // A session holding games locked until its input ends.
        let mut locker = std::process::Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", &db.url])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("psql");
        let mut input = locker.stdin.take().expect("stdin");
        input
            .write_all(b"BEGIN; LOCK TABLE games IN ACCESS EXCLUSIVE MODE; SELECT 1;\n")
            .expect("lock");
        input.flush().expect("flush");
        let mut polls = 0;
        while db.psql("SELECT count(*) FROM pg_locks WHERE relation = 'games'::regclass AND mode = 'AccessExclusiveLock' AND granted") != "1" {
            polls += 1;
            assert!(polls < 6000, "the lock was never taken");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let child = db
            .pgnload()
            .args(["-q", "export", "--format", format, "-o"])
            .arg(dir.path().join(name))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn pgnload");
        // Not a timing: wait until the export waits on the lock (its
        // output file is open by then, and its signal handlers set).
        let mut polls = 0;
        while db.psql(
            "SELECT count(*) FROM pg_locks WHERE relation = 'games'::regclass AND NOT granted",
        ) == "0"
        {
            polls += 1;
            assert!(polls < 6000, "the export never waited on the lock");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!partial_files(dir.path()).is_empty() || format != "pgn");
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        kill(pid, Signal::SIGTERM).expect("SIGTERM");
        let output = child.wait_with_output().expect("wait for pgnload");
        drop(input);
        locker.wait().expect("psql");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(3), "{format}: {stderr}");
        assert!(stderr.contains("export interrupted"), "{format}: {stderr}");
        assert_eq!(partial_files(dir.path()), Vec::<String>::new(), "{format}");
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("dir").count(),
            0,
            "{format}: an output was left"
        );
    }
}

/// Every file of `tests/data` exported and imported again into the same
/// database: every game is found already present (the export gives each
/// tag back as read, so no game gets a new identity), Lichess games by
/// their id and the others by their content digest.
#[test]
fn an_export_reimported_finds_every_game_present() {
    let dir = scratch_dir("pgnload-reimport-");
    let db = migrated_db("query_reimport");
    let files = data_pgns();
    let files: Vec<&Path> = files.iter().map(std::path::PathBuf::as_path).collect();
    import(&db, &files);
    let count_by_source = "SELECT string_agg(source || '=' || n, ',' ORDER BY source)
                           FROM (SELECT source, count(*) n FROM games GROUP BY source) s";
    let before = db.psql(count_by_source);
    assert!(
        before.contains("lichess=") && before.contains("pgn="),
        "{before}"
    );
    let games = db.psql("SELECT count(*) FROM games");
    for name in ["export.pgn", "listed.pgn"] {
        let path = dir.path().join(name);
        let path_text = path.display().to_string();
        if name == "export.pgn" {
            db.quiet_ok(&["export", "-o", &path_text]);
        } else {
            let listed = db.quiet_ok(&["games", "--format", "pgn"]);
            std::fs::write(&path, listed).expect("write");
        }
        let out = db.quiet(&["import", "--restart", &path_text]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "{games} read = 0 imported + {games} already present + 0 rejected"
            )),
            "{name}: {stderr}"
        );
        assert_eq!(db.psql(count_by_source), before);
    }
}

/// A partial date keeps its precision: `games` and `export` select a
/// `1997.??.??` game for a period holding all of 1997, a `1997.05.??` one
/// for May, neither for a few days of May, and a date without a year for
/// no bounded period; `export` writes the date as read.
#[test]
fn games_and_export_select_a_partial_date_by_its_whole_span() {
    let dir = scratch_dir("pgnload-partial-");
    let db = migrated_db("query_partial");
    import(
        &db,
        &[
            &data("twic-partial-dates.pgn"),
            &data("kasparov-deep-blue-1997.pgn"),
            &data("lichess-2025-05-sample.pgn"),
        ],
    );
    let selected = |since: &str, until: &str| -> Vec<String> {
        let mut args = vec!["games", "--format", "json"];
        if !since.is_empty() {
            args.extend(["--since", since]);
        }
        if !until.is_empty() {
            args.extend(["--until", until]);
        }
        let mut whites: Vec<String> = db
            .quiet_ok(&args)
            .lines()
            .map(|line| {
                let game: serde_json::Value = serde_json::from_str(line).expect("JSON");
                game["white"].as_str().unwrap_or("").to_owned()
            })
            .collect();
        whites.sort();
        whites.dedup();
        whites
    };
    let bern = ["Keller, Hans", "Meier, Urs"];
    let kasparov_games = ["Deep Blue (Computer)", "Garry Kasparov"];
    let mut year: Vec<&str> = bern.iter().chain(&kasparov_games).copied().collect();
    year.sort_unstable();
    assert_eq!(selected("1997-01-01", "1997-12-31"), year);
    assert_eq!(selected("1997-01", "1997-12"), year);
    assert_eq!(selected("1997-05-01", "1997-05-31"), ["Meier, Urs"]);
    assert_eq!(selected("1997-05-04", "1997-05-06"), Vec::<String>::new());
    assert_eq!(selected("1997-01-02", "1997-12-31"), ["Meier, Urs"]);
    assert_eq!(selected("", "1997-04-30"), Vec::<String>::new());
    assert_eq!(selected("", "1997-12-31"), year);
    // The game of an unknown year only without a period.
    let unknown = "Novak, Petr".to_owned();
    assert!(!selected("0001-01-01", "").contains(&unknown));
    assert!(selected("", "").contains(&unknown));
    // Full dates are read as before: the UTC day, Date aside.
    assert_eq!(selected("2024-01-01", "2024-01-01"), ["Fischer, Lena"]);
    // `export` selects the same games, and writes the date as read.
    let out = dir.path().join("1997.pgn");
    let summary = db.quiet_ok(&[
        "export",
        "--since",
        "1997-05-01",
        "--until",
        "1997-05-31",
        "-o",
        &out.display().to_string(),
    ]);
    assert!(summary.starts_with("exported 1 games"), "{summary}");
    let text = std::fs::read_to_string(&out).expect("read");
    assert_eq!(text.matches("[Date ").count(), 1, "{text}");
    assert!(text.contains("[Date \"1997.05.??\"]"), "{text}");
}

/// `game show` writes each tag once and as read: one `Date` for a partial
/// date and for a `Date` other than `UTCDate`, `Round "-"`, the UTC tags.
#[test]
fn game_show_writes_each_tag_once_as_read() {
    let db = migrated_db("query_show_tags");
    import(&db, &[&data("twic-partial-dates.pgn")]);
    let show = |white: &str| {
        let id = db.psql(&format!(
            "SELECT g.id FROM games g JOIN players p ON p.id = g.white_player_id
             WHERE p.username = '{white}'"
        ));
        db.quiet_ok(&["game", "show", &id])
    };
    let year = show("Keller, Hans");
    assert_eq!(year.matches("[Date ").count(), 1, "{year}");
    assert!(
        year.contains("[Date \"1997.??.??\"]\n[Round \"-\"]"),
        "{year}"
    );
    let utc = show("Fischer, Lena");
    assert!(
        utc.contains("[Date \"2024.01.02\"]")
            && utc.contains("[UTCDate \"2024.01.01\"]\n[UTCTime \"23:30:00\"]"),
        "{utc}"
    );
    assert_eq!(utc.matches("[Date ").count(), 1, "{utc}");
    let twice = show("Novak, Petr");
    assert!(
        twice.contains(
            "[WhiteElo \"?\"]\n[BlackElo \"-\"]\n[Annotator \"Novak\"]\n[Source \"club bulletin\"]\n[Annotator \"Horak\"]"
        ),
        "{twice}"
    );
}

#[test]
fn a_player_is_found_in_any_case_in_every_source_through_an_index() {
    let dir = scratch_dir("pgnload-query-names-");
    let db = migrated_db("query_names");
    import(
        &db,
        &[
            &data("kasparov-deep-blue-1997.pgn"),
            &data("lichess-2025-05-sample.pgn"),
        ],
    );
    // A database from before migration 0020 (players keyed, no index on
    // lower(username)) takes it with its players in place.
    db.psql(
        "DROP INDEX players_username_lower_idx;
         CREATE INDEX players_username_key_idx ON players (username_key);
         DELETE FROM pgnload_migrations WHERE version = 20",
    );
    let migrated = db.quiet_ok(&["db", "migrate"]);
    assert!(
        migrated.contains("applied 0020_player_names.sql"),
        "{migrated}"
    );
    assert_eq!(
        db.psql(
            "SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes
             WHERE tablename = 'players' AND indexname LIKE 'players_username%'"
        ),
        "players_username_lower_idx,players_username_trgm_idx"
    );
    let exact = db.quiet_ok(&["games", "--format", "json", "--player", "Garry Kasparov"]);
    assert_eq!(exact.lines().count(), 6, "{exact}");
    for spelling in ["garry kasparov", "GARRY KASPAROV", "gArRy kAsPaRoV"] {
        let found = db.quiet_ok(&["games", "--format", "json", "--player", spelling]);
        assert_eq!(found, exact, "--player {spelling:?}");
    }
    let against = db.quiet_ok(&[
        "games",
        "--format",
        "json",
        "--player",
        "garry kasparov",
        "--opponent",
        "DEEP BLUE (COMPUTER)",
    ]);
    assert_eq!(against, exact, "all six are against Deep Blue");
    // export selects by the same lookup.
    let written = dir.path().join("kasparov.pgn");
    db.quiet_ok(&[
        "export",
        "--player",
        "GARRY kasparov",
        "-o",
        written.to_str().expect("UTF-8 path"),
    ]);
    let pgn = std::fs::read_to_string(&written).expect("the export");
    assert_eq!(pgn.matches("[Event ").count(), 6, "{pgn}");
    // The lookup reads the index migration 0020 made (a plan that cannot
    // use it would be a sequential scan, even with those disabled).
    let plan = db.psql(&format!(
        "SET enable_seqscan = off; EXPLAIN {}",
        pgnload::query::filter::PLAYER_IDS.replace("$1", "'garry kasparov'")
    ));
    assert!(plan.contains("players_username_lower_idx"), "{plan}");
    assert_unknown_names_get_the_nearest(&db);
}

/// A name found in no case (`Garry Kasparov`, `Deep Blue (Computer)` and
/// `rahmat_tojeng` stored) is refused with the nearest names, from the
/// trigram index, or none when nothing is near.
fn assert_unknown_names_get_the_nearest(db: &TestDb) {
    for (name, nearest) in [
        ("kasparov", "Garry Kasparov"),
        ("Gary Kasparow", "Garry Kasparov"),
        ("rahmat tojeng", "rahmat_tojeng"),
    ] {
        let out = db.quiet(&["games", "--player", name]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("did you mean {nearest:?}")),
            "{name}: {stderr}"
        );
    }
    let out = db.quiet(&[
        "games",
        "--player",
        "Garry Kasparov",
        "--opponent",
        "Deep Bleu",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--opponent: no player called \"Deep Bleu\" in the database; did you mean \"Deep Blue (Computer)\"?"),
        "{stderr}"
    );
    // Nothing near: no suggestion.
    let out = db.quiet(&["games", "--player", "qqqqxxxx"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no player called \"qqqqxxxx\"") && !stderr.contains("did you mean"),
        "{stderr}"
    );
}

/// A game of another source rated above every game of the Lichess sample
/// and dated (the explorer lists only games with ratings, a result and a
/// month, as Lichess), so that `explore` lists it among its games.
const RATED_PGN: &str = r#"[Event "Club"]
[Site "Town"]
[Date "2025.05.20"]
[White "Strong"]
[Black "Stronger"]
[WhiteElo "3100"]
[BlackElo "3200"]
[Result "0-1"]

1. e4 e5 2. Nf3 Nc6 0-1
"#;

#[test]
fn every_id_printed_is_one_game_show_reads_and_so_is_a_lichess_url() {
    let dir = scratch_dir("pgnload-query-ids-");
    let rated = dir.path().join("rated.pgn");
    std::fs::write(&rated, RATED_PGN).expect("write corpus");
    let db = migrated_db("query_ids");
    import(&db, &[&data("lichess-2025-05-sample.pgn"), &rated]);
    let game = db.quiet_ok(&["game", "show", "lichess:xZhyPFE7"]);
    assert!(
        game.contains("[Site \"https://lichess.org/xZhyPFE7\"]"),
        "{game}"
    );
    for form in [
        "xZhyPFE7",
        "https://lichess.org/xZhyPFE7",
        "https://lichess.org/xZhyPFE7/black",
        "https://lichess.org/xZhyPFE7#12",
        "https://lichess.org/xZhyPFE7/white#3",
        "lichess.org/xZhyPFE7",
        "https://lichess.org/xZhyPFE7wxyz",
    ] {
        assert_eq!(
            db.quiet_ok(&["game", "show", form]),
            game,
            "game show {form}"
        );
    }
    // The ids `games` prints.
    let table = db.quiet_ok(&["games", "--limit", "3"]);
    for row in table_cells(&table).iter().skip(1) {
        let shown = db.quiet_ok(&["game", "show", row[0]]);
        assert!(shown.starts_with("[Event "), "{}: {shown}", row[0]);
    }
    // The ids of the games `explore` lists (top, then recent): a Lichess
    // id bare, another source's game as SOURCE:EXTERNAL_ID.
    crate::common::enable_explorer(db.pgnload());
    let explored = db.quiet_ok(&["explore", "--top-games", "4", "--recent-games", "8"]);
    let ids: Vec<&str> = explored
        .lines()
        .skip_while(|line| *line != "top games:" && *line != "recent games:")
        .filter(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    let other = ids
        .iter()
        .find(|id| id.starts_with("pgn:"))
        .unwrap_or_else(|| panic!("the rated game of another source is listed: {explored}"));
    assert!(ids.iter().any(|id| !id.contains(':')), "{explored}");
    let strongest = db.quiet_ok(&["game", "show", other]);
    assert!(strongest.contains("[White \"Strong\"]"), "{strongest}");
    for id in &ids {
        let shown = db.quiet_ok(&["game", "show", id]);
        assert!(shown.starts_with("[Event "), "{id}: {shown}");
    }
}

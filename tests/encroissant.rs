//! `export --format encroissant`: the file has En Croissant's schema (its
//! `create.sql` and `indexes.sql`, as read from its public source), its
//! `Moves` decode (pgnload's decoder) to the stored games, its material
//! and pawn-home columns follow En Croissant's rules, and importing it
//! gives the same games, annotations and variations included.

use std::path::{Path, PathBuf};

use pgnload::export::encroissant;
use rusqlite::Connection;
use shakmaty::{CastlingMode, Chess, fen::Fen};

use crate::common::{data, games_of, migrated_db, scratch_dir, stderr};

/// Games the corpora lack: a null move (skipped), a promotion from a set-up
/// position (its pre-promotion material is the least), a short game from
/// the start (its pawn-home bits).
const CRAFTED: &str = r#"[Event "Crafted"]
[Site "Here"]
[Date "2001.02.03"]
[Round "1"]
[White "Zed"]
[Black "Ann"]
[Result "*"]

1. e4 -- 2. d4 e5 *

[Event "Crafted"]
[Site "Here"]
[Date "2001.02.03"]
[Round "2"]
[White "Ann"]
[Black "Zed"]
[Result "1-0"]
[SetUp "1"]
[FEN "7k/P7/8/8/8/8/8/K7 w - - 0 1"]

1. a8=Q+ Kh7 1-0

[Event "Crafted"]
[Site "Here"]
[Date "2001.02.03"]
[Round "3"]
[White "Ann"]
[Black "Unknown"]
[Result "1/2-1/2"]

1. e4 e5 1/2-1/2
"#;

/// The sources every test imports.
fn sources(dir: &Path) -> Vec<String> {
    let crafted = dir.join("crafted.pgn");
    std::fs::write(&crafted, CRAFTED).expect("write the crafted games");
    [
        data("lichess-2025-05-sample.pgn"),
        data("twic-partial-dates.pgn"),
        data("annotated-games.pgn"),
        crafted,
    ]
    .iter()
    .map(|p| p.display().to_string())
    .collect()
}

/// The value of tag `name` in one exported PGN game.
fn tag<'a>(game: &'a str, name: &str) -> Option<&'a str> {
    let head = format!("[{name} \"");
    game.lines()
        .find_map(|l| l.strip_prefix(head.as_str()))
        .and_then(|v| v.strip_suffix("\"]"))
}

/// The movetext of one exported PGN game (after its tags).
fn movetext(game: &str) -> &str {
    game.split_once("\n\n").map_or("", |(_, m)| m.trim())
}

/// A database of [`sources`] and its En Croissant export: the database,
/// the directory holding the file, the file, and the export's summary.
fn exported(label: &str) -> (crate::common::TestDb, tempfile::TempDir, PathBuf, String) {
    let db = migrated_db(label);
    let dir = scratch_dir(label);
    let mut args = vec!["import".to_owned()];
    args.extend(sources(dir.path()));
    db.quiet_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let file = dir.path().join("all.db3");
    let summary = db.quiet_ok(&[
        "export",
        "--format",
        "encroissant",
        "-o",
        file.to_str().expect("UTF-8 path"),
    ]);
    (db, dir, file, summary)
}

/// One `Games` row with its players' names.
struct Row {
    white: String,
    black: String,
    result: String,
    plies: i64,
    fen: Option<String>,
    moves: Vec<u8>,
    /// `WhiteMaterial`, `BlackMaterial`, `PawnHome`.
    bounds: (i64, i64, i64),
}

/// The games of an export, by ID.
fn rows(c: &Connection) -> Vec<Row> {
    c.prepare(
        "SELECT w.Name, b.Name, g.Result, g.PlyCount, g.FEN, g.Moves, g.WhiteMaterial, \
         g.BlackMaterial, g.PawnHome FROM Games g JOIN Players w ON w.ID = g.WhiteID \
         JOIN Players b ON b.ID = g.BlackID ORDER BY g.ID",
    )
    .expect("query")
    .query_map([], |r| {
        Ok(Row {
            white: r.get(0)?,
            black: r.get(1)?,
            result: r.get(2)?,
            plies: r.get(3)?,
            fen: r.get(4)?,
            moves: r.get(5)?,
            bounds: (r.get(6)?, r.get(7)?, r.get(8)?),
        })
    })
    .expect("rows")
    .collect::<Result<_, _>>()
    .expect("rows")
}

/// Asserts `row` decodes (pgnload's decoder) to the game `pgn` (the PGN
/// export of the same game): names, result, start, and every mainline
/// move in order; returns whether it holds a variation.
fn assert_decodes_to(row: &Row, pgn: &str) -> bool {
    assert_eq!(Some(row.white.as_str()), tag(pgn, "White"), "{pgn}");
    assert_eq!(Some(row.black.as_str()), tag(pgn, "Black"), "{pgn}");
    assert_eq!(Some(row.result.as_str()), tag(pgn, "Result"), "{pgn}");
    assert_eq!(row.fen.as_deref(), tag(pgn, "FEN"), "{pgn}");
    let start: Chess = row.fen.as_deref().map_or_else(Chess::default, |f| {
        Fen::from_ascii(f.as_bytes())
            .expect("a FEN")
            .into_position(CastlingMode::Standard)
            .expect("a position")
    });
    let decoded = encroissant::decode(&row.moves, start, 8 << 20).expect("decodes");
    assert_eq!(
        decoded.mainline.len(),
        usize::try_from(row.plies).expect("plies")
    );
    let text = movetext(pgn);
    let mut rest = text;
    for san in &decoded.mainline {
        let at = rest
            .find(san.as_str())
            .unwrap_or_else(|| panic!("{san} in {text}"));
        rest = &rest[at + san.len()..];
    }
    decoded.movetext.contains('(')
}

/// Asserts the `Info` rows: En Croissant's keys, the counts of the rows
/// written (placeholders included).
fn assert_info(c: &Connection, games: usize) {
    let info: Vec<(String, String)> = c
        .prepare("SELECT Name, Value FROM Info ORDER BY Name")
        .expect("info")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("info")
        .collect::<Result<_, _>>()
        .expect("info");
    let count = |table: &str| -> String {
        c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
            r.get::<_, i64>(0)
        })
        .expect("count")
        .to_string()
    };
    let expected: Vec<(String, String)> = [
        ("Description", "exported by pgnload".to_owned()),
        ("EventCount", count("Events")),
        ("GameCount", games.to_string()),
        ("PlayerCount", count("Players")),
        ("SiteCount", count("Sites")),
        ("Title", "all".to_owned()),
        ("Version", "1.0.0".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(info, expected);
    for table in ["Players", "Events", "Sites"] {
        let name: String = c
            .query_row(&format!("SELECT Name FROM {table} WHERE ID = 0"), [], |r| {
                r.get(0)
            })
            .expect("the placeholder row");
        assert_eq!(name, "Unknown", "{table}");
    }
}

#[test]
fn an_encroissant_export_decodes_to_the_stored_games() {
    let (db, _dir, file, summary) = exported("ecr_decode");
    assert!(
        summary.contains("skipped 1 (0 not standard chess, 1 with a null move)"),
        "{summary}"
    );
    assert!(!summary.contains("not carried"), "{summary}");
    // The PGN export in the same order, less the null-move game.
    let expected: Vec<String> = games_of(&db.quiet_ok(&["export"]))
        .into_iter()
        .filter(|g| !g.contains(" -- "))
        .collect();
    let c = Connection::open(&file).expect("open the export");
    let games = rows(&c);
    assert_eq!(games.len(), expected.len());
    let with_variations = games
        .iter()
        .zip(&expected)
        .filter(|(row, pgn)| assert_decodes_to(row, pgn))
        .count();
    assert!(with_variations > 0, "the corpus has variations");
    // The promotion game: the least material is before the promotion.
    let promotion = games
        .iter()
        .find(|g| g.fen.as_deref() == Some("7k/P7/8/8/8/8/8/K7 w - - 0 1"))
        .expect("the promotion game");
    assert_eq!(promotion.bounds, (1, 0, 0));
    // 1. e4 e5: the e-pawns left home, 39 each.
    let open = games
        .iter()
        .rev()
        .find(|g| g.plies == 2 && g.fen.is_none())
        .expect("1. e4 e5");
    assert_eq!(open.bounds, (39, 39, 0xEFEF));
    assert_eq!(open.black, "Unknown", "a Black named Unknown is row 0");
    assert_info(&c, games.len());
}

/// `(name, declared type, NOT NULL, primary key)` of each column of `table`.
fn columns(c: &Connection, table: &str) -> Vec<(String, String, bool, bool)> {
    c.prepare(&format!(
        "SELECT name, type, \"notnull\", pk FROM pragma_table_info('{table}')"
    ))
    .expect("table_info")
    .query_map([], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get::<_, i64>(2)? == 1,
            r.get::<_, i64>(3)? == 1,
        ))
    })
    .expect("columns")
    .collect::<Result<_, _>>()
    .expect("columns")
}

/// Asserts the tables and indexes of En Croissant's `create.sql` and
/// `indexes.sql`: these columns with these types, only `Info.Name` NOT
/// NULL, the IDs primary keys, one index per column it sorts or filters by.
fn assert_schema(c: &Connection) {
    // En Croissant's create.sql: these columns, these types, only
    // Info.Name NOT NULL, the IDs primary keys.
    let col =
        |n: &str, t: &str, not_null: bool, pk: bool| (n.to_owned(), t.to_owned(), not_null, pk);
    assert_eq!(
        columns(c, "Info"),
        [
            col("Name", "TEXT", true, false),
            col("Value", "TEXT", false, false)
        ]
    );
    for table in ["Events", "Sites"] {
        assert_eq!(
            columns(c, table),
            [
                col("ID", "INTEGER", false, true),
                col("Name", "TEXT", false, false)
            ]
        );
    }
    assert_eq!(
        columns(c, "Players"),
        [
            col("ID", "INTEGER", false, true),
            col("Name", "TEXT", false, false),
            col("Elo", "INTEGER", false, false)
        ]
    );
    let games: Vec<(String, String)> = columns(c, "Games")
        .into_iter()
        .map(|(n, t, not_null, pk)| {
            assert!(!not_null, "{n}");
            assert_eq!(pk, n == "ID", "{n}");
            (n, t)
        })
        .collect();
    let expected = "ID INTEGER, EventID INTEGER, SiteID INTEGER, Date TEXT, UTCTime TEXT, \
                    Round INTEGER, WhiteID INTEGER, WhiteElo INTEGER, BlackID INTEGER, \
                    BlackElo INTEGER, WhiteMaterial INTEGER, BlackMaterial INTEGER, \
                    Result INTEGER, TimeControl TEXT, ECO TEXT, PlyCount INTEGER, FEN TEXT, \
                    Moves BLOB, PawnHome BLOB";
    let games: Vec<String> = games.iter().map(|(n, t)| format!("{n} {t}")).collect();
    assert_eq!(games.join(", "), expected);
    // Its indexes.sql, one column each.
    let indexes: Vec<(String, String)> = c
        .prepare(
            "SELECT il.name, ii.name FROM pragma_index_list('Games') il, \
             pragma_index_info(il.name) ii WHERE il.origin = 'c' ORDER BY il.name",
        )
        .expect("indexes")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("indexes")
        .collect::<Result<_, _>>()
        .expect("indexes");
    let expected: Vec<(String, String)> = [
        ("games_black_elo_idx", "BlackElo"),
        ("games_black_idx", "BlackID"),
        ("games_date_idx", "Date"),
        ("games_plycount_idx", "PlyCount"),
        ("games_result_idx", "Result"),
        ("games_white_elo_idx", "WhiteElo"),
        ("games_white_idx", "WhiteID"),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
    .collect();
    assert_eq!(indexes, expected);
}

#[test]
fn an_encroissant_export_has_en_croissants_schema_and_imports_back_as_the_same_games() {
    let (db, _dir, file, _) = exported("ecr_schema");
    assert_schema(&Connection::open(&file).expect("open the export"));

    // Imported into another database: the same games, in the same order,
    // with the same movetext (comments, NAGs, variations).
    let back = migrated_db("ecr_back");
    back.quiet_ok(&["import", file.to_str().expect("UTF-8 path")]);
    let before: Vec<String> = games_of(&db.quiet_ok(&["export"]))
        .into_iter()
        .filter(|g| !g.contains(" -- "))
        .collect();
    let after = games_of(&back.quiet_ok(&["export"]));
    assert_eq!(before.len(), after.len());
    for (a, b) in before.iter().zip(&after) {
        assert_eq!(movetext(a), movetext(b));
        for t in ["White", "Black", "Result", "Event", "Site", "FEN"] {
            assert_eq!(tag(a, t), tag(b, t), "{t} of\n{a}\n{b}");
        }
    }

    // A file changed by hand: a byte that is no legal move's index, a
    // comment cut short and an unclosed variation are rejects naming
    // their row; the other games are found present.
    let c = Connection::open(&file).expect("open the export");
    c.execute_batch(
        "UPDATE Games SET Moves = x'FA' WHERE ID = 1;
         UPDATE Games SET Moves = x'0CFD0900' WHERE ID = 2;
         UPDATE Games SET Moves = x'0CFF0C' WHERE ID = 3;",
    )
    .expect("alter the file");
    drop(c);
    let out = back.quiet(&["import", file.to_str().expect("UTF-8 path")]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let rejects = back.psql(
        "SELECT string_agg(game_number || ': ' || reason, E'\\n' ORDER BY game_number) \
         FROM import_rejects",
    );
    assert_eq!(
        rejects,
        "1: undecodable stored game: Games row 1: byte 0 (250) is no legal move's index\n\
         2: undecodable stored game: Games row 2: a comment of 9 bytes cut short at byte 2\n\
         3: undecodable stored game: Games row 3: 1 variations left open"
    );
}

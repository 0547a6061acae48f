//! `export --format dcg|ocgdb`: the files read back by an independent
//! decoder (`scripts/py_exchange.py`, written from the formats' descriptions)
//! and compared with python-chess's reading of the source PGN; variant
//! games skipped and counted; a filter selecting what `games` selects.

use std::{fmt::Write as _, path::Path};

use crate::common::{data, migrated_db, python_script, run, scratch_dir};

/// Games the corpora lack: a standard game from a set-up position with a
/// promotion and castling, a null move, NAGs, a partial date, a name
/// longer than a 36-byte record, an `ECO "?"`, a zero-move game, and
/// games whose moves make a record longer than 127 and 255 bytes.
fn crafted() -> String {
    let long_game = (0..40).fold(String::new(), |mut game, i| {
        let n = i % 4;
        let (w, b) = [
            ("Nf3", "Nf6"),
            ("Ng1", "Ng8"),
            ("Nc3", "Nc6"),
            ("Nb1", "Nb8"),
        ][n];
        let _ = write!(game, "{}. {w} {{[%clk 0:01:{:02}]}} {b} ", i + 1, i % 60);
        game
    });
    format!(
        r#"[Event "Crafted"]
[Site "Here"]
[Date "1997.05.??"]
[Round "3"]
[White "Aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa Longname"]
[Black "Zed"]
[Result "1-0"]
[ECO "?"]
[SetUp "1"]
[FEN "r3k2r/1P6/8/8/8/8/8/R3K2R w KQkq - 0 1"]

1. bxa8=Q+ Ke7 2. O-O $1 Kd6 3. Qd5+ $3 Kxd5 1-0

[Event "Crafted"]
[Site "Here"]
[Date "2001.02.03"]
[Round "?"]
[White "Zed"]
[Black "Ann"]
[Result "*"]
[WhiteElo "2100"]
[BlackElo "1999"]

1. e4 -- 2. d4 e5 *

[Event "Crafted"]
[Site "Here"]
[Date "????.??.??"]
[Round "?"]
[White "Ann"]
[Black "Zed"]
[Result "1/2-1/2"]

1/2-1/2

[Event "Crafted"]
[Site "Here"]
[Date "2002.01.01"]
[Round "?"]
[White "Ann"]
[Black "Bob"]
[Result "1/2-1/2"]

{long_game}1/2-1/2
"#
    )
}

/// Runs the independent decoder; returns its `games N skipped M` line.
fn decode(format: &str, export: &Path, sources: &[&Path]) -> String {
    let out = run({
        let mut c = python_script("py_exchange.py");
        c.arg(format).arg(export).args(sources);
        c
    });
    assert!(
        out.status.success(),
        "{format} export read back differs from the source:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim()
        .to_owned()
}

/// Long: one scenario, step by step; split, its steps would read out of
/// order.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, step by step; split, its steps would read out of order"
)]
fn dcg_and_ocgdb_exports_read_back_as_the_source_games() {
    let db = migrated_db("exchange");
    let dir = scratch_dir("exchange");
    let crafted_pgn = dir.path().join("crafted.pgn");
    std::fs::write(&crafted_pgn, crafted()).expect("write the crafted games");
    let sources = [
        data("lichess-2025-05-sample.pgn"),
        data("kasparov-deep-blue-1997.pgn"),
        data("cutechess-fischerrandom.pgn"),
        data("knightvuillaume-jannlee-zh-lichess.pgn"),
        crafted_pgn.clone(),
    ];
    let mut args = vec!["import".to_owned()];
    args.extend(sources.iter().map(|f| f.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    db.quiet_ok(&args);
    let selected: u64 = db
        .psql("SELECT count(*) FROM games")
        .parse()
        .expect("a count");
    let variants: u64 = db
        .psql("SELECT count(*) FROM games WHERE variant <> 'standard'")
        .parse()
        .expect("a count");
    let null_moves: u64 = db
        .psql("SELECT count(DISTINCT game_id) FROM moves WHERE san = '--'")
        .parse()
        .expect("a count");
    assert_eq!(
        (variants, null_moves),
        (5, 1),
        "the corpus has what it tests"
    );
    let sources: Vec<&Path> = sources.iter().map(std::path::PathBuf::as_path).collect();

    // dcg: every standard game, the null move as 0x88.
    let base = dir.path().join("all");
    let summary = db.quiet_ok(&[
        "export",
        "--format",
        "dcg",
        "-o",
        &base.display().to_string(),
    ]);
    let exported = selected - variants;
    assert_eq!(
        summary,
        format!(
            "exported {exported} games to {}, skipped {variants} ({variants} not standard chess, \
             0 with a null move) of {selected} selected\n",
            base.display()
        )
    );
    assert_eq!(
        decode("dcg", &base, &sources),
        format!("games {exported} skipped {variants}")
    );
    for ext in ["dci", "dcg", "dcn", "dcs", "dce"] {
        assert!(!dir.path().join(format!("all.{ext}.partial")).exists());
    }
    assert!(!dir.path().join("all.dci.refs.partial").exists());

    // ocgdb: the game with a null move is skipped too (Moves2 cannot hold it);
    // the decoder's source side still has it, so compare without that file's
    // null-move game by checking the count and reading the rest.
    let file = dir.path().join("all.ocgdb.db3");
    let summary = db.quiet_ok(&[
        "export",
        "--format",
        "ocgdb",
        "-o",
        &file.display().to_string(),
    ]);
    let exported = selected - variants - null_moves;
    // ocgdb has no table for NAGs: the export counts those it drops.
    let nags = db.psql(
        "SELECT count(*) FROM moves m JOIN games g ON g.id = m.game_id
         WHERE g.variant = 'standard' AND m.nag IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM moves n WHERE n.game_id = g.id AND n.san = '--')",
    );
    assert_eq!(
        summary,
        format!(
            "exported {exported} games to {}, skipped {} ({variants} not standard chess, \
             {null_moves} with a null move) of {selected} selected\n\
             not carried by the ocgdb format: 0 comments, 0 variations, {nags} NAGs \
             (`export --format pgn` keeps them)\n",
            file.display(),
            variants + null_moves
        )
    );
    let without_null: Vec<&Path> = sources[..4].to_vec();
    let crafted_rest = dir.path().join("crafted-rest.pgn");
    let text = crafted();
    let games: Vec<&str> = text.split("[Event ").filter(|g| !g.is_empty()).collect();
    let rest: String =
        games
            .iter()
            .filter(|g| !g.contains(" -- "))
            .fold(String::new(), |mut rest, g| {
                rest.push_str("[Event ");
                rest.push_str(g);
                rest
            });
    std::fs::write(&crafted_rest, rest).expect("write");
    let mut ocgdb_sources = without_null;
    ocgdb_sources.push(&crafted_rest);
    assert_eq!(
        decode("ocgdb", &file, &ocgdb_sources),
        format!("games {exported} skipped {variants}")
    );
}

#[test]
fn a_filtered_exchange_export_selects_what_games_selects() {
    let db = migrated_db("exchange_filter");
    let dir = scratch_dir("exchange-filter");
    db.quiet_ok(&[
        "import",
        &data("lichess-2025-05-sample.pgn").display().to_string(),
        &data("kasparov-deep-blue-1997.pgn").display().to_string(),
    ]);
    let player = db.psql(
        "SELECT p.username FROM games g JOIN players p \
         ON p.id IN (g.white_player_id, g.black_player_id) \
         GROUP BY p.username ORDER BY count(*) DESC, p.username LIMIT 1",
    );
    let listed: Vec<String> = db
        .quiet_ok(&["games", "--format", "json", "--player", &player])
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(listed.len() > 1, "{player} has several games");
    let file = dir.path().join("player.ocgdb.db3");
    db.quiet_ok(&[
        "export",
        "--format",
        "ocgdb",
        "--player",
        &player,
        "-o",
        &file.display().to_string(),
    ]);
    let out = run({
        let mut c = std::process::Command::new("python3");
        c.args([
            "-c",
            "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); \
             print(db.execute('SELECT count(*) FROM Games g JOIN Players w ON w.ID = g.WhiteID \
             JOIN Players b ON b.ID = g.BlackID WHERE lower(w.Name) = lower(?1) \
             OR lower(b.Name) = lower(?1)', (sys.argv[2],)).fetchone()[0], \
             db.execute('SELECT count(*) FROM Games').fetchone()[0])",
        ])
        .arg(&file)
        .arg(&player);
        c
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The exchange formats write files: stdout is refused, nothing written.
    let refused = db.quiet(&["export", "--format", "dcg"]);
    assert_eq!(refused.status.code(), Some(2), "a usage error");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--output"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let n = listed.len();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{n} {n}"),
        "every exported game is {player}'s, and all of them are"
    );
}

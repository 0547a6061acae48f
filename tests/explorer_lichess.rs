//! `explore --json` as Lichess clients read it: every answer of a set of
//! positions (the start, frequent and rare ones, each variant of the
//! corpus, with speed, rating and month filters) has the type the real
//! `berserk` package declares for the Lichess explorer's response
//! (`scripts/py_berserk_types.py` loads it from the installed package),
//! and its counts, average ratings and opening names equal the
//! independent recount of `scripts/py_explorer.py`; castling is written
//! king to rook and `--play` takes SAN.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use serde_json::Value;

use crate::{
    common::{data, enable_explorer, fresh_db, python_script, run, scratch_dir},
    explorer::{corpus, explore_answer, python_json, summary},
    import::{assert_ok, import},
};

/// `py_explorer.py` with `args` (a FEN given as `--fen`) over `files`.
fn recount(fen: Option<&str>, args: &[String], files: &[PathBuf]) -> Value {
    let mut all: Vec<&str> = fen.map_or_else(Vec::new, |fen| vec!["--fen", fen]);
    all.extend(args.iter().map(String::as_str));
    python_json(&all, files)
}

/// The words of `text` as arguments.
fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn every_answer_has_berserks_declared_type_and_the_recounted_counts() {
    let dir = scratch_dir("pgnload-explorer-lichess-");
    let mut files = corpus(dir.path());
    files.extend([
        data("knightvuillaume-jannlee-zh-lichess.pgn"),
        data("saturs-jannlee-zh-lichess.pgn"),
        data("cutechess-fischerrandom.pgn"),
    ]);
    let db = fresh_db("explorer_lichess");
    enable_explorer(db.pgnload());
    assert_ok(&import(&db, &["-q"], &files), &[0]);
    let rare = db.psql(
        "SELECT p.normalized_fen FROM explorer_game_moves v JOIN positions p ON p.id = v.position_id
         WHERE v.variant = 'standard' GROUP BY p.normalized_fen
         HAVING count(*) = 1 ORDER BY p.normalized_fen LIMIT 1",
    );
    let chess960 = db.psql(
        "SELECT p.normalized_fen FROM games g JOIN positions p ON p.id = g.initial_position_id
         WHERE g.variant = 'chess960' ORDER BY g.id LIMIT 1",
    );
    assert!(!chess960.is_empty(), "the corpus has a Chess960 game");
    let mut cases: Vec<(Option<&str>, Vec<String>)> = vec![
        (None, vec![]),
        (None, words("--play e4")),
        (None, words("--play e4,c5 --speeds blitz,rapid")),
        (None, words("--play e2e4,e5,Nf3,Nc6,Bc4,Bc5")),
        (None, words("--play d4,Nf6,c4 --ratings 2000,2200,2500")),
        (
            None,
            words("--ratings 1600,1800 --since 2025-05 --until 2025-05"),
        ),
        (None, words("--until 2024-12")),
        (None, words("--speeds correspondence,classical")),
        (Some(rare.as_str()), vec![]),
        (None, words("--variant antichess")),
        (None, words("--variant crazyhouse")),
        (None, words("--variant crazyhouse --play e4")),
    ];
    cases.push((Some(chess960.as_str()), words("--variant chess960")));
    let mut lines = String::new();
    let mut castled = false;
    for (fen, args) in &cases {
        let mut ours_args: Vec<String> = fen.iter().map(|f| (*f).to_owned()).collect();
        ours_args.extend(args.iter().cloned());
        let ours = explore_answer(
            &db,
            &ours_args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        assert_eq!(
            summary(&ours),
            summary(&recount(*fen, args, &files)),
            "explore {ours_args:?}"
        );
        for m in ours["moves"].as_array().expect("moves") {
            if m["san"].as_str().is_some_and(|san| san.starts_with("O-O")) {
                castled = true;
                let uci = m["uci"].as_str().expect("uci");
                assert!(
                    ["e1h1", "e1a1", "e8h8", "e8a8"].contains(&uci),
                    "castling king to rook: {m}"
                );
            }
        }
        let _ = writeln!(lines, "{ours_args:?}\t{ours}");
    }
    assert!(castled, "a case lists a castling move");
    assert_berserk_types(dir.path(), &lines, cases.len());
}

/// `lines` (`LABEL<TAB>JSON`, `count` of them) all have the type berserk
/// declares for the Lichess explorer's response.
fn assert_berserk_types(dir: &Path, lines: &str, count: usize) {
    // Every kind of value the type declares is exercised.
    for key in ["topGames", "recentGames", "moves[].game", "opening"] {
        assert!(
            lines.lines().any(|line| match key {
                "moves[].game" => line.contains("\"game\":{"),
                "opening" => line.contains("\"opening\":{"),
                _ => line.contains(&format!("\"{key}\":[{{")),
            }),
            "no answer has a {key}"
        );
    }
    let input = dir.join("answers.tsv");
    std::fs::write(&input, lines).expect("write the answers");
    let out = run({
        let mut c = python_script("py_berserk_types.py");
        // Where berserk's declaration and the Lichess server disagree
        // (lila-openingexplorer's src/api/response.rs), explore answers as
        // the server: berserk declares averageRating required, the server
        // leaves it out of a move without a rated game
        // (skip_serializing_if), absent there and an int when present; the
        // server sends each move's opening, which berserk does not declare.
        c.args([
            "--type",
            "OpeningStatistic",
            "--absent-ok",
            "Move.averageRating",
            "--extra-ok",
            "Move.opening",
        ])
        .stdin(std::fs::File::open(&input).expect("open the answers"));
        c
    });
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "berserk's types (pip install berserk):\n{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        report.contains(&format!("{count} documents checked, 0 problems")),
        "{report}"
    );
}

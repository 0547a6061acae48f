//! The core contract: `pgnload positions` prints exactly what
//! `scripts/py_digests.py` (python-chess 1.11 + xxhash) prints.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Output,
};

use crate::common::{assert_same_lines, data_pgns, pgnload, python_script, repo, run};

/// What `scripts/py_digests.py` (python-chess) and `pgnload positions`
/// print for `file`, in that order.
fn positions_of(file: &Path) -> (Output, Output) {
    let python = run({
        let mut c = python_script("py_digests.py");
        c.arg(file);
        c
    });
    let rust = run({
        let mut c = pgnload();
        c.arg("positions").arg(file);
        c
    });
    (python, rust)
}

fn compare(file: &Path) {
    let (python, rust) = positions_of(file);
    assert!(
        !python.stdout.is_empty(),
        "{}: the reference printed nothing: {}",
        file.display(),
        String::from_utf8_lossy(&python.stderr)
    );
    assert_same_lines(file, &python.stdout, &rust.stdout);
}

/// `tests/quirks/NAME`: corpora with games python-chess refuses, kept out
/// of `tests/data` (whose every game imports).
fn quirks(name: &str) -> PathBuf {
    repo().join("tests/quirks").join(name)
}

/// The game keys of one run's output lines (stdout) and of its rejected
/// games (stderr: python-chess's `REJECT<TAB>key`, pgnload's `game #N`).
fn keys(out: &Output) -> (BTreeSet<String>, BTreeSet<String>) {
    let read = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split('\t').next().map(str::to_owned))
        .collect();
    let rejected = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("REJECT\t"))
        .filter_map(|l| match l.split_once(" game #") {
            Some((_, rest)) => rest.split(' ').next().map(str::to_owned),
            None => l.split('\t').nth(1).map(str::to_owned),
        })
        .collect();
    (read, rejected)
}

/// Every notation and quirk of `notation-quirks.pgn` (and a game of tags
/// only at the end of a file) is read as python-chess reads it, and every
/// game python-chess refuses there is rejected: same lines, same rejected
/// games, same game count. The counts pin the corpus itself, so a quirk
/// that both sides stopped reading fails too.
#[test]
fn notation_quirks_are_read_and_refused_as_python_chess_does() {
    for (name, read, refused) in [
        ("notation-quirks.pgn", 26, 9),
        ("tags-only-at-eof.pgn", 1, 0),
    ] {
        let file = quirks(name);
        let (python, rust) = positions_of(&file);
        assert_same_lines(&file, &python.stdout, &rust.stdout);
        let (py_read, py_refused) = keys(&python);
        let (rs_read, rs_refused) = keys(&rust);
        assert_eq!(py_refused, rs_refused, "{name}: rejected games");
        assert_eq!((py_read.len(), py_refused.len()), (read, refused), "{name}");
        assert_eq!((rs_read.len(), rs_refused.len()), (read, refused), "{name}");
    }
    let text = std::fs::read_to_string(quirks("notation-quirks.pgn")).expect("corpus");
    for quirk in [
        "d7d8q",
        "d7d8Q",
        "d7d8n",
        "e1g1",
        "e2-e4",
        "Ng1-f3",
        "e4xd5",
        "Bb5xc6",
        "d8Q",
        "b1Q+",
        "a8q",
        "exd6e.p.",
        "e.p.",
        "dxe6ep",
        "Qxf7++",
        "0-0 ",
        "0000",
        "@@@@",
        "\u{feff}e5",
        "\n\n\n\n[Event",
        "\n\n\u{feff}[Event",
        "5+5",
        "+1+0",
        "P7/PPPPPPPP",
        "d6 0 1",
        "\"Suicide\"",
        "\"Giveaway\"",
        "[FEN \"\"]",
        "[FEN \" \"]",
        "[Variant \"\"]",
        "[Qq]",
        "R[]",
        "1. d4 d5 2. c4",
    ] {
        assert!(text.contains(quirk), "the corpus lost {quirk:?}");
    }
    assert!(
        text.ends_with("2. c4"),
        "the last game must end without a result"
    );
}

/// The known divergences on notations and setups (README, "The contract"):
/// games python-chess reads that pgnload rejects, each with its reason,
/// while the game numbers and every other game stay identical.
#[test]
fn the_setup_and_notation_divergences_are_rejected_by_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("divergences.pgn");
    let games: [(&str, &str); 8] = [
        (
            "[Variant \"Suicide\"]\n\n1. e3 b5 2. Bxb5 *",
            "Suicide with castling rights",
        ),
        ("[FEN \"8/8/8/8/8/8/8/8 w - - 0 1\"]\n\n*", "missing king"),
        (
            "[FEN \"4k3/8/8/8/8/8/8/4R1K1 w - - 0 1\"]\n\n1. Kf1 *",
            "opposite check",
        ),
        (
            "[Variant \"Three-check\"]\n[FEN \"4k3/8/8/8/8/8/8/R3K3 w - - 5+5 0 1\"]\n\n\
             1. Ra8+ Kd7 2. Ra7+ Kc6 3. Ra6+ Kb5 4. Ra1 *",
            "illegal move \"Kb5\"",
        ),
        (
            "[Event \"moves on the tag line\"] 1. e4 *\n\n[Site \"merged\"]\n\n1. d4 *",
            "malformed tag line",
        ),
        ("1. e4 e5 2. Nf3 Nc", "unterminated game"),
        ("1. e4 foo e5 *", "garbage in movetext: \"foo\""),
        ("1. e4 e5 *", ""),
    ];
    let text: Vec<&str> = games.iter().map(|(game, _)| *game).collect();
    std::fs::write(&file, text.join("\n\n")).expect("write");
    let (python, rust) = positions_of(&file);
    let (py_read, py_refused) = keys(&python);
    assert_eq!(py_read.len(), games.len(), "python-chess reads them all");
    assert!(py_refused.is_empty());
    let (rs_read, _) = keys(&rust);
    assert_eq!(rs_read, BTreeSet::from([games.len().to_string()]));
    let rejects = String::from_utf8_lossy(&rust.stderr);
    for (number, (_, reason)) in games.iter().enumerate().take(games.len() - 1) {
        let number = number + 1;
        assert!(
            rejects
                .lines()
                .any(|l| l.contains(&format!("game #{number} ")) && l.contains(reason)),
            "game {number} is not rejected for {reason:?}: {rejects}"
        );
    }
    let last = |out: &Output| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with(&format!("{}\t", games.len())))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(last(&rust), last(&python));
}

#[test]
fn every_shipped_corpus_file_matches_python_chess() {
    let files = data_pgns();
    assert!(files.len() >= 13, "tests/data lost its corpus: {files:?}");
    for file in files {
        compare(&file);
    }
}

#[test]
fn seeded_random_games_of_every_variant_match_python_chess() {
    let dir = tempfile::tempdir().expect("temp dir");
    let corpus = dir.path().join("random.pgn");
    let generated = run({
        let mut c = python_script("gen_random_games.py");
        c.args(["--seed", "20261122", "--games", "3000", "--out"])
            .arg(&corpus);
        c
    });
    assert!(
        generated.status.success(),
        "generator failed: {}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let text = std::fs::read_to_string(&corpus).expect("generated corpus");
    for variant in [
        "Chess960",
        "Antichess",
        "Atomic",
        "Crazyhouse",
        "Horde",
        "King of the Hill",
        "Racing Kings",
        "Three-check",
    ] {
        assert!(
            text.contains(&format!("[Variant \"{variant}\"]")),
            "generated corpus lacks {variant}"
        );
    }
    compare(&corpus);
}

#[test]
fn hash_command_matches_the_python_string_normalizer() {
    let fens = [
        "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq e3 0 1",
        "8/8/8/8/8/8/8/8 w",
        "r1bk3r/p1p2pQ~p/1pn5/3N4/2B1P3/8/PPP2PPP/R4RK1[QNPbp] w - - 0 1",
    ];
    let python = run({
        let mut c = python_script("py_digests.py");
        c.arg("--fens").args(fens);
        c
    });
    let rust = run({
        let mut c = pgnload();
        c.arg("hash").args(fens);
        c
    });
    assert!(rust.status.success());
    assert_same_lines(Path::new("hash"), &python.stdout, &rust.stdout);
}

#[test]
fn crlf_line_ends_and_a_bom_change_no_position() {
    let original = crate::common::data("lichess-2025-05-sample.pgn");
    let text = std::fs::read(&original).expect("sample");
    let mut crlf = b"\xef\xbb\xbf".to_vec();
    for &b in &text {
        if b == b'\n' {
            crlf.push(b'\r');
        }
        crlf.push(b);
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("crlf.pgn");
    std::fs::write(&copy, crlf).expect("write");
    let positions = |file: &Path| {
        run({
            let mut c = pgnload();
            c.arg("positions").arg(file);
            c
        })
        .stdout
    };
    let expected = positions(&original);
    assert!(!expected.is_empty());
    assert_same_lines(&copy, &expected, &positions(&copy));
}

/// The one documented divergence (README, "The contract"): python-chess
/// plays a null move while in check and goes on from a position where the
/// king can be captured; pgnload rejects that game, naming why. Every other
/// game of the file still matches line for line.
#[test]
fn a_null_move_while_in_check_is_the_documented_divergence() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("null-in-check.pgn");
    std::fs::write(
        &file,
        "[Event \"null move in check\"]\n[Result \"*\"]\n\n1. e4 f5 2. Qh5+ -- 3. Qxe8 *\n\n\
         [Event \"null move out of check\"]\n[Result \"*\"]\n\n1. e4 f5 2. Qh5+ g6 3. Z0 Nf6 *\n",
    )
    .expect("write");
    let (python, rust) = positions_of(&file);
    let lines = |out: &[u8], key: &str| -> Vec<String> {
        String::from_utf8_lossy(out)
            .lines()
            .filter(|l| l.split('\t').next() == Some(key))
            .map(str::to_owned)
            .collect()
    };
    // python-chess: 6 positions for game 1, the last one without a black king.
    let game1 = lines(&python.stdout, "1");
    assert_eq!(game1.len(), 6, "{game1:?}");
    assert!(!game1[5].split('\t').nth(2).expect("fen").contains('k'));
    // pgnload: game 1 rejected with the reason, game 2 identical.
    assert!(lines(&rust.stdout, "1").is_empty());
    let rejects = String::from_utf8_lossy(&rust.stderr);
    assert!(
        rejects.contains("game #1") && rejects.contains("null move while in check"),
        "{rejects}"
    );
    let game2 = lines(&python.stdout, "2");
    assert_eq!(game2.len(), 7, "{game2:?}");
    assert_eq!(lines(&rust.stdout, "2"), game2);
}

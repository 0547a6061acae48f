//! Hostile PGN (issue 12): whatever the bytes, a game is read whole or
//! rejected whole, never stops the file, and never reaches the database in
//! a form PostgreSQL refuses.

use std::sync::Arc;

use pgnload::{
    pipeline::{Outcome, PipelineConfig, process_chunk},
    reader::GameSplitter,
};

use crate::common::data;

/// Every game of `bytes`, processed: a game or a rejection each.
fn outcomes(bytes: &[u8]) -> Vec<Outcome> {
    let limits = PipelineConfig::default().limits;
    let mut splitter = GameSplitter::new(bytes, Arc::from("t.pgn"), 0, 0, limits);
    let mut out = Vec::new();
    while let Some(chunk) = splitter.next_chunk().expect("in-memory input cannot fail") {
        out.push(process_chunk(chunk, limits));
    }
    out
}

fn external_ids(bytes: &[u8]) -> Vec<String> {
    outcomes(bytes)
        .into_iter()
        .map(|o| match o {
            Outcome::Game(g) => g.external_id(),
            Outcome::Rejected(r) => format!("rejected: {}", r.rejection.reason),
        })
        .collect()
}

/// `games.external_id` recognizes a non-Lichess game on re-import: these
/// values were computed by pgnload before the hostile-input changes, and a
/// database imported then must see the same games as present now.
#[test]
fn content_digests_are_pinned() {
    let pinned: &[(&[u8], &str)] = &[
        (
            b"[Event \"Partial\"]\n[Site \"Here\"]\n[Date \"1997.05.??\"]\n[White \"A\"]\n[Black \"B\"]\n[WhiteElo \"2700?\"]\n[Result \"1-0\"]\n\n1. e4 e5 2. Nf3 1-0\n\n",
            "88ac6451e9516ef6d63a2d513d725c13",
        ),
        (
            b"[Event \"Twice\"]\n[White \"First\"]\n[White \"Second\"]\n[Black \"B\"]\n[Annotator \"x\"]\n[Annotator \"y\"]\n\n1. d4 d5 *\n\n",
            "acac210555682b77e0962809f88dedfc",
        ),
        (
            b"[Event \"The \\\"Big\\\" Open\"]\n[White \"Esc\\\\aped\"]\n\n1. c4 *\n\n",
            "17f6ef51e40133464cb25c62ffec5e84",
        ),
        (
            b"[Event \"J\xf6rg Latin\"]\n[White \"J\xc3\xb6rg\"]\n\n1. e4 *\n\n",
            "6c761ac2320e66c9631b13ee38d30a79",
        ),
        (
            b"[Event \"x]\n[White \"y\"]\n\n1. e4 e5 *\n\n",
            "7c46fcd08a03ecb51f442bc5c0bbbb6a",
        ),
        (
            b"[Event \"a\"] [White \"b\"]\n\n1. e4 *\n\n",
            "cd573a45336a73705fc0af7471249d04",
        ),
        (
            b"[Event \"same line\"] 1. e4 e5 *\n\n",
            "78a00b3e9221055cf3a814b17a6fb891",
        ),
        (
            b"[Event \"crlf\"]\r\n[White \"w\"]\r\n\r\n1. e4 e5 *\r\n\r\n",
            "05ae2fecc458d8f03a35e4c78fdbca53",
        ),
        (
            b"[Event  \"twospaces\"]\n[ Site \"lead\"]\n[Round \"-\"]\n[ECO \"C20\"]\n[TimeControl \"300+3\"]\n[UTCDate \"2020.01.02\"]\n[UTCTime \"03:04:05\"]\n\n1. e4 e5 *\n\n",
            "13f0673e730370ce982dac5801abc03e",
        ),
        (
            b"[Event \"noquote]\n[Foo]\n[Bar bar]\n[White \"w\"]\n\n\n\n1. e4 *\n\n",
            "f17c72da65a41adea6a10dfff7940f00",
        ),
        (
            b"[Event \"semi\"]\n\n1. e4 ; comment { not\n e5 *\n\n",
            "80764e77db6d1af20244fe568de671b1",
        ),
        (
            b"[Event \"tabs\"]\t\n[White\t\"tab\"]\n\n1. e4 *\n\n",
            "cac1a023cc7260b31d6fa4a3b6a45716",
        ),
        (b"1. e4 e5 *\n\n", "48e63790502160129cb635ed99354c81"),
        (
            b"[FEN \"rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1\"]\n[SetUp \"1\"]\n\n1... e5 *\n\n",
            "21fda1e7ba8e3231b6234dec2c97f624",
        ),
    ];
    for (pgn, digest) in pinned {
        assert_eq!(
            external_ids(pgn),
            [*digest],
            "{}",
            String::from_utf8_lossy(pgn)
        );
    }
    // Two games without a blank line between them, `%` escapes, a comment
    // holding a blank line and a `[`, a variation over two lines.
    assert_eq!(
        external_ids(
            b"%escape\n[Event \"after escape\"]\n%mid\n[White \"w\"]\n\n1. e4 {multi\n\n[line comment} e5 (1... c5\n2. Nf3) *\n[Event \"no blank\"]\n1. d4 *\n"
        ),
        [
            "123928df3298200cabfd8919421a65f2",
            "02e4a88bd01ba3423370c7f153bbcf59"
        ]
    );
    let files: &[(&str, &[&str])] = &[
        (
            "kasparov-deep-blue-1997.pgn",
            &[
                "15844af7b42e1e6542a7687852e50339",
                "5dc0652e5484971a41a0e44d67296f04",
                "25e2a015024a9e492c34584405c9af03",
                "3a88cd73428879db84888dfe4c5eb21c",
                "73f9fc0491632a502571df606cc03c73",
                "0366f144f92f4d30e10cb43c673595fd",
            ],
        ),
        (
            "cutechess-fischerrandom.pgn",
            &[
                "c2dbddd93c58e4c618baa27996747487",
                "35910f10614fdc5ce86482bf3ed7e02f",
                "b895b0ee886cd16fddb19718bec63140",
                "b0f2124f3afc74fdf5a184b58170bd76",
            ],
        ),
        (
            "chessbase-empty-line.pgn",
            &["2a10f4852345b529a736d37ec358bcab"],
        ),
        (
            "molinari-bordais-1979.pgn",
            &["839394a8dce7e5a2662fe895e6ce70b4"],
        ),
        (
            "stockfish-learning.pgn",
            &["61af8bb1561758c9a954d4abe7edc01b"],
        ),
        ("uci-moves.pgn", &["6084a10d9c955480b9e92bc99087f738"]),
        (
            "utf8-bom.pgn",
            &[
                "ef233ff1a82ebae1a6d7795ff61b27e0",
                "35d08225367892899ccc2a97d1749d39",
            ],
        ),
    ];
    for (file, digests) in files {
        let bytes = std::fs::read(data(file)).expect("corpus file");
        assert_eq!(external_ids(&bytes), *digests, "{file}");
    }
}

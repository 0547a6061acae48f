//! No bytes make pgnload panic, and every game read is accounted for.
//!
//! Property tests over random bytes and over real games mutated at random:
//! the splitter's chunks tile the stream exactly (nothing lost, nothing read
//! twice), and every chunk becomes exactly one game or one rejection.

use std::sync::Arc;

use pgnload::{
    chess::reader::{GameSplitter, ParseLimits},
    ingest::pipeline::{Outcome, PipelineConfig, process_chunk},
};
use proptest::prelude::*;

use crate::common::data;

/// Splits and processes `bytes`, checking the accounting invariants.
fn check_accounting(bytes: &[u8]) {
    let limits = PipelineConfig::default().limits;
    let mut splitter = GameSplitter::new(
        bytes,
        Arc::from("prop"),
        0,
        0,
        ParseLimits {
            max_game_bytes: 64 * 1024,
            ..limits
        },
    );
    let mut expected_offset = None;
    let mut games = 0u64;
    while let Some(chunk) = splitter.next_chunk().expect("in-memory input cannot fail") {
        games += 1;
        assert_eq!(chunk.pos.game_number, games);
        if let Some(expected) = expected_offset {
            assert_eq!(
                chunk.pos.byte_offset, expected,
                "chunks must tile the stream"
            );
        } else {
            // Only whitespace, `%` escape lines (pgn-reader also takes them
            // after leading blanks) or a BOM may precede the first game.
            let lead =
                &bytes[..usize::try_from(chunk.pos.byte_offset).expect("an offset in memory")];
            let escape_lines = lead.split(|b| *b == b'\n').all(|line| {
                let line = line.trim_ascii_start();
                line.is_empty() || line.starts_with(b"%")
            });
            assert!(
                lead.len() <= 3 || escape_lines || lead.starts_with(b"%"),
                "unexpected lead-in {lead:?}"
            );
        }
        let start = usize::try_from(chunk.pos.byte_offset).expect("an offset in memory");
        if !chunk.is_truncated() {
            assert_eq!(&bytes[start..start + chunk.bytes.len()], &chunk.bytes[..]);
        }
        expected_offset = Some(chunk.pos.byte_offset + chunk.total_len);
        match process_chunk(chunk, limits) {
            Outcome::Game(game) => assert_eq!(game.positions.len(), game.plies.len() + 1),
            Outcome::Rejected(r) => assert_eq!(r.rejection.pos.game_number, games),
        }
    }
    if let Some(end) = expected_offset {
        assert_eq!(
            end,
            bytes.len() as u64,
            "the last chunk must end the stream"
        );
    }
}

fn sample_games() -> &'static [Vec<u8>] {
    static GAMES: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    GAMES.get_or_init(load_sample_games)
}

fn load_sample_games() -> Vec<Vec<u8>> {
    let text = std::fs::read(data("lichess-2025-05-sample.pgn")).expect("sample");
    let mut splitter = GameSplitter::new(
        &text[..],
        Arc::from("s"),
        0,
        0,
        PipelineConfig::default().limits,
    );
    let mut games = Vec::new();
    while let Ok(Some(chunk)) = splitter.next_chunk() {
        games.push(chunk.bytes);
        if games.len() == 40 {
            break;
        }
    }
    games
}

/// One random edit of a byte string.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Truncate(usize),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let special = prop::sample::select(vec![
        b"{".to_vec(),
        b"}".to_vec(),
        b"(".to_vec(),
        b")".to_vec(),
        b"[".to_vec(),
        b"]".to_vec(),
        b"\"".to_vec(),
        b"\n".to_vec(),
        b"\n\n".to_vec(),
        b"\r\n".to_vec(),
        b"%".to_vec(),
        b";".to_vec(),
        b"\\".to_vec(),
        b"\xef\xbb\xbf".to_vec(),
        b"\xff\xfe".to_vec(),
        b"[FEN \"?\"]\n".to_vec(),
        b"[Variant \"Crazyhouse\"]\n".to_vec(),
        b"[FEN \"8/8/8/8/8/8/8/8 w - - 0 1\"]\n".to_vec(),
        b" Z0 ".to_vec(),
        b" e8=K ".to_vec(),
        b" O-O-O ".to_vec(),
        b" P@e4 ".to_vec(),
        b" 1-0 ".to_vec(),
        b" $255 ".to_vec(),
        b" 999999999999999999999. ".to_vec(),
    ]);
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), special).prop_map(|(i, s)| Mutation::Insert(i, s)),
        (any::<usize>(), 0usize..64).prop_map(|(i, n)| Mutation::Delete(i, n)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 0usize..256).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    let at = |i: usize| i % bytes.len();
    match m {
        Mutation::Flip(i, b) => {
            let i = at(*i);
            bytes[i] = *b;
        }
        Mutation::Insert(i, s) => {
            let i = at(*i);
            bytes.splice(i..i, s.iter().copied());
        }
        Mutation::Delete(i, n) => {
            let i = at(*i);
            let end = (i + n).min(bytes.len());
            bytes.drain(i..end);
        }
        Mutation::Truncate(i) => {
            let i = at(*i);
            bytes.truncate(i);
        }
        Mutation::Duplicate(i, n) => {
            let i = at(*i);
            let end = (i + n).min(bytes.len());
            let copy = bytes[i..end].to_vec();
            bytes.splice(i..i, copy);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_and_are_accounted_for(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        check_accounting(&bytes);
    }

    #[test]
    fn mutated_real_games_never_panic_and_are_accounted_for(
        picks in prop::collection::vec(0usize..40, 1..6),
        mutations in prop::collection::vec(mutation(), 0..12),
    ) {
        let games = sample_games();
        let mut bytes: Vec<u8> = picks.iter().flat_map(|&i| games[i % games.len()].clone()).collect();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        check_accounting(&bytes);
    }
}

#[test]
fn a_huge_comment_is_rejected_in_bounded_memory_and_the_next_game_survives() {
    let mut pgn = b"[Event \"huge\"]\n\n1. e4 {".to_vec();
    pgn.extend(std::iter::repeat_n(b'x', 3 << 20));
    pgn.extend_from_slice(b"} e5 *\n\n[Event \"ok\"]\n\n1. d4 d5 *\n");
    check_accounting(&pgn);
}

//! What the crate's unit tests share: a game read and replayed from PGN
//! text exactly as the import's pipeline does, so tests of the writer, the
//! explorer and verify start from the records the import would hand them.

use crate::chess::{
    reader::{GameSplitter, ParseLimits, take_game},
    replay::{GameRecord, replay_game},
};

/// The first game of `pgn` (tags optional), read from a file named `t` and
/// replayed; panics if it does not read, parse or replay, since a test's
/// own fixture is wrong then.
pub(crate) fn replayed(pgn: &str) -> GameRecord {
    let text = format!("{pgn}\n");
    let limits = ParseLimits {
        max_plies: 100,
        max_game_bytes: 1 << 20,
    };
    let mut splitter = GameSplitter::new(text.as_bytes(), "t".into(), 0, 0, limits);
    let mut chunk = splitter.next_chunk().expect("reads").expect("one game");
    let raw = take_game(&mut chunk, limits).expect("parses");
    replay_game(raw, chunk.pos.clone()).expect("replays")
}

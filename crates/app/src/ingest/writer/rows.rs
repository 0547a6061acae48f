//! The row of each table the writer `COPY`s, each declared once with
//! [`copy_row!`]: its columns' names, binary types and values in one list,
//! from which the `COPY` statements, the staging tables and the
//! `INSERT … SELECT`s from them are written. Adding a column is a line
//! here, its migration, and filling it where the phases build the row.
//!
//! It must not decide what is written: the phases build the rows.

use chrono::{DateTime, Utc};
use tokio_postgres::types::Json;

use super::copy::copy_row;
use crate::{chess::replay::GameRecord, ingest::dedup::PositionKey};

copy_row! {
    /// A `positions` row: staged for the get-or-create (incremental mode,
    /// shards), or copied straight into the table with its id (bulk mode).
    #[derive(Clone, Copy)]
    pub(super) struct PositionRow<'a> {
        /// Set in bulk mode; otherwise the table's identity decides.
        id: Option<i64> = INT8,
        normalized_fen: &'a str = TEXT,
        fen_hash: i64 = INT8,
        piece_placement: &'a str = TEXT,
        active_color: &'a str = TEXT,
        castling: &'a str = TEXT,
        en_passant: &'a str = TEXT,
    }
}

copy_row! {
    /// A `players` row, staged for the get-or-create.
    pub(super) struct PlayerRow<'a> {
        source: &'a str = TEXT,
        username: &'a str = TEXT,
        username_key: String = TEXT,
        title: Option<&'a str> = TEXT,
        is_bot: bool = BOOL,
    }
}

copy_row! {
    /// An `events` row, staged for the get-or-create.
    pub(super) struct EventRow<'a> {
        source: &'a str = TEXT,
        event_key: &'a str = TEXT,
        external_id: Option<&'a str> = TEXT,
        name: &'a str = TEXT,
        kind: Option<&'static str> = TEXT,
    }
}

copy_row! {
    /// A `games` row: staged and inserted where absent (incremental mode,
    /// `game put`, shards), or copied straight into the table with its id
    /// (bulk mode).
    pub(super) struct GameRow<'a> {
        /// Set in bulk mode and on shards (the claimed id); otherwise the
        /// table's identity decides.
        id: Option<i64> = INT8,
        source: &'a str = TEXT,
        external_id: String = TEXT,
        event_id: Option<i64> = INT8,
        site: Option<&'a str> = TEXT,
        round: Option<&'a str> = TEXT,
        white_player_id: Option<i64> = INT8,
        black_player_id: Option<i64> = INT8,
        white_elo: Option<i32> = INT4,
        black_elo: Option<i32> = INT4,
        white_rating_diff: Option<i32> = INT4,
        black_rating_diff: Option<i32> = INT4,
        time_control: Option<&'a str> = TEXT,
        time_initial_s: Option<i32> = INT4,
        time_increment_s: Option<i32> = INT4,
        /// The enum's binary form is its label's text.
        variant: &'static str = TEXT in "game_variant",
        termination: Option<&'static str> = TEXT in "game_termination",
        result: Option<i16> = INT2,
        eco: Option<&'a str> = TEXT,
        opening: Option<&'a str> = TEXT,
        started_at: Option<DateTime<Utc>> = TIMESTAMPTZ,
        initial_position_id: i64 = INT8,
        final_position_id: i64 = INT8,
        ply_count: i32 = INT4,
        moves: Vec<u8> = BYTEA,
        start_fen: Option<&'a str> = TEXT,
        tags: Json<serde_json::Value> = JSONB,
        /// Where the game was read (input, game number, byte offset):
        /// `None` for a game stored by `game put`, which comes from no
        /// import.
        import_file_id: Option<i64> = INT8,
        game_number: Option<i64> = INT8,
        byte_offset: Option<i64> = INT8,
        /// See [`crate::chess::scope::recorded_cap`].
        positions_max_ply: Option<i32> = INT4,
        /// What the typed columns cannot say (see
        /// [`crate::chess::annotation`]): NULL for most games.
        annotations: Option<Json<serde_json::Value>> = JSONB,
    }
    also {
        /// The game's position keys.
        keys: &'a [PositionKey],
        game: &'a GameRecord,
    }
}

copy_row! {
    /// A `moves` row.
    pub(super) struct MoveRow<'a> {
        game_id: i64 = INT8,
        ply: i32 = INT4,
        position_id: i64 = INT8,
        position_after_id: i64 = INT8,
        uci: &'a str = TEXT,
        san: &'a str = TEXT,
        clock_ms: Option<i32> = INT4,
        eval_cp: Option<i32> = INT4,
        eval_mate: Option<i32> = INT4,
        nag: Option<i16> = INT2,
    }
}

copy_row! {
    /// An `import_rejects` row.
    pub(super) struct RejectRow<'a> {
        file_id: i64 = INT8,
        game_number: i64 = INT8,
        byte_offset: i64 = INT8,
        reason: String = TEXT,
        raw: &'a [u8] = BYTEA,
        raw_length: i64 = INT8,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use tokio_postgres::types::Type;

    use super::*;
    use crate::ingest::{
        dedup::KeyMap,
        writer::{
            CopyRow, FileContext, TableRow,
            copy::{decode_rows, encode_rows},
            games::{NewGame, game_row, move_rows},
        },
    };

    /// The width of a value of a fixed-width binary type.
    fn width(ty: &Type) -> Option<usize> {
        [
            (Type::INT8, 8),
            (Type::TIMESTAMPTZ, 8),
            (Type::INT4, 4),
            (Type::INT2, 2),
            (Type::BOOL, 1),
        ]
        .into_iter()
        .find(|(fixed, _)| fixed == ty)
        .map(|(_, width)| width)
    }

    /// Encodes `row`, every column of which has a value, and checks the
    /// encoding against the declaration: one field per column, none NULL,
    /// each of its type's width where the type has one; the columns are
    /// named once each.
    fn assert_agrees<const N: usize, R: TableRow<N>>(row: &R) {
        let encoded = encode_rows(std::slice::from_ref(row)).expect("encodes");
        let fields = decode_rows(&encoded).pop().expect("one row");
        assert_eq!(fields.len(), R::COLUMNS.len());
        for ((column, ty), field) in R::COLUMNS.iter().zip(&R::TYPES).zip(&fields) {
            let Some(bytes) = field else {
                panic!("{column}: NULL from a row whose every column has a value");
            };
            if let Some(width) = width(ty) {
                assert_eq!(bytes.len(), width, "{column} ({ty})");
            }
        }
        let mut names = R::COLUMNS.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), N);
        assert_eq!(<R as CopyRow<N>>::TYPES.len(), N);
    }

    /// A game with every tag a `games` column holds, from a set-up
    /// position.
    fn full_game() -> GameRecord {
        let pgn = "[Event \"Rated Blitz game\"]\n[Site \"https://example.org/x\"]\n\
                   [Round \"3\"]\n[White \"alice\"]\n[Black \"bob\"]\n[Result \"1-0\"]\n\
                   [UTCDate \"2025.05.01\"]\n[UTCTime \"10:00:00\"]\n[WhiteElo \"1500\"]\n\
                   [BlackElo \"1480\"]\n[WhiteRatingDiff \"+6\"]\n[BlackRatingDiff \"-6\"]\n\
                   [ECO \"C20\"]\n[Opening \"King's Pawn Game\"]\n[TimeControl \"300+3\"]\n\
                   [Termination \"Normal\"]\n[Annotator \"someone\"]\n[SetUp \"1\"]\n\
                   [FEN \"rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1\"]\n\n\
                   1. e4 { [%clk 0:05:00] [%eval 0.3] } e5 $1 2. Nf3 Nc6 1-0\n";
        crate::testing::replayed(pgn)
    }

    #[test]
    fn each_declared_row_encodes_a_value_of_its_type_for_each_of_its_columns() {
        let game = full_game();
        let keys: Vec<PositionKey> = (game.positions.iter())
            .map(|(fen, _)| PositionKey::of(fen))
            .collect();
        let position_ids: KeyMap<i64> = keys.iter().zip(1..).map(|(k, id)| (*k, id)).collect();
        let new = NewGame {
            game: &game,
            source: "pgn",
            external_id: game.external_id(),
            keys: &keys[..3],
            extends: None,
            claimed: Some(9),
        };
        let player_ids: HashMap<(&str, String), i64> = [("alice", 1), ("bob", 2)]
            .into_iter()
            .map(|(name, id)| (("pgn", crate::chess::model::username_key("pgn", name)), id))
            .collect();
        let event_ids = HashMap::from([(("pgn", "Rated Blitz game".to_owned()), 5)]);
        let file = FileContext {
            file_id: 12,
            source: "pgn".to_owned(),
            expected_bytes_done: 0,
            explorer: false,
            positions_max_ply: Some(2),
            shards: None,
        };
        let row = game_row(&new, &position_ids, &player_ids, &event_ids, Some(&file))
            .expect("every position has an id");
        assert_agrees(&row);
        let moves = move_rows(std::iter::once((9, &game, &keys[..], 0)), &position_ids)
            .expect("every position has an id");
        assert_eq!(moves.len(), 4);
        // The first ply has a clock and an evaluation in centipawns; a
        // mate in N and a NAG (the second ply's) complete its columns.
        let mut first = moves.into_iter().next().expect("four moves");
        first.eval_mate = Some(3);
        first.nag = Some(1);
        assert_agrees(&first);
        let fen = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -";
        assert_agrees(&PositionRow {
            id: Some(1),
            normalized_fen: fen,
            fen_hash: -3,
            piece_placement: "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR",
            active_color: "w",
            castling: "KQkq",
            en_passant: "-",
        });
        assert_agrees(&PlayerRow {
            source: "lichess",
            username: "Alice",
            username_key: "alice".to_owned(),
            title: Some("GM"),
            is_bot: false,
        });
        assert_agrees(&EventRow {
            source: "lichess",
            event_key: "abcd1234",
            external_id: Some("abcd1234"),
            name: "Hourly Blitz Arena",
            kind: Some("arena"),
        });
        assert_agrees(&RejectRow {
            file_id: 12,
            game_number: 3,
            byte_offset: 400,
            reason: "illegal move".to_owned(),
            raw: b"1. e5",
            raw_length: 5,
        });
    }
}

//! Opening names (ECO code and name) of positions, as the Lichess opening
//! explorer gives them: from the table of lichess-org/chess-openings (CC0,
//! shipped as data: `crates/app/data/chess-openings/NOTICE.md`), a
//! position named by the row whose line ends there, matched by the
//! position itself (its Zobrist hash, en passant counted only when legal,
//! as lila-openingexplorer's `opening.rs` does), so that a transposition
//! gets the name too.

use std::{collections::HashMap, sync::OnceLock};

use serde::Serialize;
use shakmaty::{
    Chess, EnPassantMode, Position, san::San, variant::VariantPosition, zobrist::Zobrist64,
};

use crate::{chess::model::GameVariant, error::Error};

/// The table's five files (one per ECO volume), compiled in.
const TABLES: [(&str, &str); 5] = [
    ("a.tsv", include_str!("../../data/chess-openings/a.tsv")),
    ("b.tsv", include_str!("../../data/chess-openings/b.tsv")),
    ("c.tsv", include_str!("../../data/chess-openings/c.tsv")),
    ("d.tsv", include_str!("../../data/chess-openings/d.tsv")),
    ("e.tsv", include_str!("../../data/chess-openings/e.tsv")),
];

/// A named opening: the `opening` of the Lichess explorer's answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Opening {
    /// The ECO code (`B20`).
    pub eco: String,
    /// The name (`Sicilian Defense`).
    pub name: String,
}

/// The table by position, read once.
type Table = HashMap<Zobrist64, Opening>;

/// Reads the shipped files: every row's line replayed from the start
/// position. A row that does not replay, or a position named twice, is a
/// broken table (what lila-openingexplorer refuses too), said with the
/// file and line.
fn load() -> Result<Table, String> {
    let mut table = Table::new();
    for (file, text) in TABLES {
        for (i, line) in text.lines().enumerate().skip(1) {
            let at = || format!("{file} line {}", i + 1);
            let mut fields = line.split('\t');
            let (Some(eco), Some(name), Some(pgn), None) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                return Err(format!("{}: not three tab-separated fields", at()));
            };
            let mut position = Chess::default();
            // Move numbers ("1.") are not SAN: skipped, as Lichess does.
            for san in pgn.split(' ').filter_map(|t| t.parse::<San>().ok()) {
                let m = san
                    .to_move(&position)
                    .map_err(|e| format!("{}: {san}: {e}", at()))?;
                position.play_unchecked(m);
            }
            let opening = Opening {
                eco: eco.to_owned(),
                name: name.to_owned(),
            };
            if table
                .insert(position.zobrist_hash(EnPassantMode::Legal), opening)
                .is_some()
            {
                return Err(format!("{}: a position named twice", at()));
            }
        }
    }
    Ok(table)
}

/// The table, read on first use.
fn table() -> Result<&'static Table, Error> {
    static TABLE: OnceLock<Result<Table, String>> = OnceLock::new();
    TABLE
        .get_or_init(load)
        .as_ref()
        .map_err(|e| Error::bug(format!("the shipped opening table is broken: {e}")))
}

/// The opening named at `position` exactly, if any. Only the variants
/// Lichess names openings in (standard, crazyhouse, three-check, king of
/// the hill) have names; a crazyhouse position with pieces in hand or a
/// three-check one after a check is not a table position.
pub fn classify(
    variant: GameVariant,
    position: &VariantPosition,
) -> Result<Option<Opening>, Error> {
    let named = matches!(
        variant,
        GameVariant::Standard
            | GameVariant::Crazyhouse
            | GameVariant::ThreeCheck
            | GameVariant::KingOfTheHill
    );
    if !named {
        return Ok(None);
    }
    let hash: Zobrist64 = position.zobrist_hash(EnPassantMode::Legal);
    Ok(table()?.get(&hash).cloned())
}

#[cfg(test)]
mod tests {
    use shakmaty::{fen::Fen, uci::UciMove};

    use super::*;

    fn after(variant: GameVariant, moves: &str) -> VariantPosition {
        let mut position = VariantPosition::new(variant.rules());
        for uci in moves.split_whitespace() {
            let m = uci
                .parse::<UciMove>()
                .expect("a UCI move")
                .to_move(&position)
                .expect("legal");
            position.play_unchecked(m);
        }
        position
    }

    fn named(variant: GameVariant, moves: &str) -> Option<(String, String)> {
        classify(variant, &after(variant, moves))
            .expect("the table loads")
            .map(|o| (o.eco, o.name))
    }

    #[test]
    fn every_row_of_the_shipped_table_loads() {
        let rows: usize = TABLES.iter().map(|(_, t)| t.lines().count() - 1).sum();
        assert_eq!(load().expect("the table loads").len(), rows);
        assert!(rows > 3000, "{rows}");
    }

    #[test]
    fn positions_are_named_by_the_line_that_ends_there_or_a_transposition() {
        let sicilian = Some(("B20".to_owned(), "Sicilian Defense".to_owned()));
        assert_eq!(named(GameVariant::Standard, "e2e4 c7c5"), sicilian);
        // The start position and 1.a3 h6 2.h3 a6 have no name.
        assert_eq!(named(GameVariant::Standard, ""), None);
        assert_eq!(named(GameVariant::Standard, "a2a3 h7h6 h2h3 a7a6"), None);
        // 1.Nf3 d5 2.d4 and 1.d4 d5 2.Nf3 are one position, one name.
        assert_eq!(
            named(GameVariant::Standard, "g1f3 d7d5 d2d4"),
            named(GameVariant::Standard, "d2d4 d7d5 g1f3")
        );
        assert!(named(GameVariant::Standard, "d2d4 d7d5 g1f3").is_some());
        // Named in crazyhouse with empty hands, not in atomic or chess960.
        assert_eq!(named(GameVariant::Crazyhouse, "e2e4 c7c5"), sicilian);
        assert_eq!(named(GameVariant::Atomic, "e2e4 c7c5"), None);
        let fen: Fen = "rnbqkbnr/pp1ppppp/8/2p5/4P3/8/PPPP1PPP/RNBQKBNR w KQkq - 0 2"
            .parse()
            .expect("fen");
        let chess960 = VariantPosition::from_setup(
            shakmaty::variant::Variant::Chess,
            fen.into_setup(),
            shakmaty::CastlingMode::Chess960,
        )
        .expect("position");
        assert_eq!(
            classify(GameVariant::Chess960, &chess960).expect("loads"),
            None
        );
    }
}

//! Writers of other formats, reading games through `query` so that a
//! filter means the same thing in every export. Pure formatting: no
//! database access and no files of their own (the caller owns the output),
//! except the exchange formats' writers ([`dcg`], [`ocgdb`], [`encroissant`]), whose output
//! is a set of files or a database that they create under a temporary name.

pub mod dcg;
pub mod encroissant;
pub mod ocgdb;
pub mod pgn;

use shakmaty::{CastlingMode, Chess, Position, Square, san::San, uci::UciMove, variant::Variant};

use crate::{
    chess::{
        annotation::{MoveNotes, NoteCounts},
        fen::position_from_fen,
        replay::null_move_of,
    },
    error::Error,
    query::games::{StoredGame, StoredMove},
};

/// What holding one comment of a stored game costs beyond its text (its
/// slot, its allocation), counted against the per-game cap when the
/// import reads an exchange format: a game of millions of one-byte
/// comments must not cost hundreds of MB before it is found too large.
pub const COMMENT_COST: u64 = 64;

/// A mainline move as the exchange formats store it: squares and
/// promotion, which the stored SAN only gives after a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainMove {
    /// A move; castling is the king moving two squares (both formats).
    Move {
        /// From square, a1 = 0 … h8 = 63.
        from: u8,
        /// To square.
        to: u8,
        /// Promotion as both formats code it: N = 2, B = 3, R = 4, Q = 5.
        promotion: u8,
    },
    /// A null move (`--`).
    Null,
}

/// The start position of a standard-chess `game`: its `FEN`, else the
/// standard start. A start that does not read as standard chess is a
/// damaged row: a game that cannot be written ([`Error::Unwritable`]).
pub fn start_position(game: &StoredGame) -> Result<Chess, Error> {
    let damaged = |reason: String| Error::Unwritable {
        game: game.id,
        reason,
    };
    match &game.start_fen {
        None => Ok(Chess::default()),
        Some(fen) => match position_from_fen(fen, Variant::Chess, false) {
            Ok(shakmaty::variant::VariantPosition::Chess(board)) => Ok(board),
            Ok(_) => Err(damaged("start position is not standard chess".into())),
            Err(e) => Err(damaged(format!("start position {fen:?}: {e}"))),
        },
    }
}

/// The moves of a standard-chess `game`, replayed from its start position
/// to recover squares. The stored SAN was replayed at import, so a move
/// that does not replay now is a damaged row: a game that cannot be
/// written ([`Error::Unwritable`]) naming the ply, never a silently
/// shortened game.
pub fn plain_moves(game: &StoredGame, moves: &[StoredMove]) -> Result<Vec<PlainMove>, Error> {
    let damaged = |ply: usize, why: String| Error::Unwritable {
        game: game.id,
        reason: format!("stored move {} does not replay: {why}", ply + 1),
    };
    let mut board = start_position(game)?;
    let mut out = Vec::with_capacity(moves.len());
    for (ply, stored) in moves.iter().enumerate() {
        let san: San = stored
            .san
            .parse::<shakmaty::san::SanPlus>()
            .map_err(|e| damaged(ply, format!("{:?}: {e}", stored.san)))?
            .san;
        if san == San::Null {
            board = null_move_of(board).map_err(|e| damaged(ply, e))?;
            out.push(PlainMove::Null);
            continue;
        }
        let m = san
            .to_move(&board)
            .map_err(|e| damaged(ply, format!("{:?}: {e}", stored.san)))?;
        let UciMove::Normal {
            from,
            to,
            promotion,
        } = m.to_uci(CastlingMode::Standard)
        else {
            return Err(damaged(ply, format!("{:?} is a drop", stored.san)));
        };
        let promotion = match promotion {
            None => 0,
            Some(shakmaty::Role::Knight) => 2,
            Some(shakmaty::Role::Bishop) => 3,
            Some(shakmaty::Role::Rook) => 4,
            Some(shakmaty::Role::Queen) => 5,
            Some(role) => return Err(damaged(ply, format!("promotion to {role:?}"))),
        };
        let square = |s: Square| u8::from(s);
        out.push(PlainMove::Move {
            from: square(from),
            to: square(to),
            promotion,
        });
        board.play_unchecked(m);
    }
    Ok(out)
}

/// A move's NAGs and comment, as the exchange formats carry them.
pub type MoveAnnotation = (Vec<u8>, String);

/// What the exchange formats can carry of a game's annotations: per
/// mainline move (0-based), its NAGs and its comment (from its stored
/// notes where it has some, else from its typed columns); and what they
/// cannot: the game's starting comment and every variation with what it
/// holds, counted so that the export says what it dropped.
pub fn move_annotations(
    game: &StoredGame,
    moves: &[StoredMove],
) -> Result<(Vec<MoveAnnotation>, NoteCounts), Error> {
    let mut dropped = NoteCounts::default();
    if let Some(start) = game.notes.at(0) {
        let start = MoveNotes::of(start);
        dropped.comments += u64::from(!start.comment.is_empty());
        dropped.add(start.below);
    }
    let mut out = Vec::with_capacity(moves.len());
    for (ply, m) in moves.iter().enumerate() {
        let notes = u32::try_from(ply + 1).ok().and_then(|p| game.notes.at(p));
        if let Some(notes) = notes {
            let notes = MoveNotes::of(notes);
            dropped.add(notes.below);
            // The formats store a NAG in a byte: a larger one is not carried.
            let mut nags = Vec::with_capacity(notes.nags.len());
            for nag in notes.nags {
                match u8::try_from(nag) {
                    Ok(nag) => nags.push(nag),
                    Err(_) => dropped.nags += 1,
                }
            }
            out.push((nags, notes.comment));
            continue;
        }
        let nag = m
            .nag
            .map(|nag| {
                u8::try_from(nag).map_err(|_| Error::Unwritable {
                    game: game.id,
                    reason: format!("NAG {nag} out of range"),
                })
            })
            .transpose()?;
        out.push((
            nag.into_iter().collect(),
            pgn::move_comment(game.id, ply, m)?,
        ));
    }
    Ok((out, dropped))
}

/// The date a game was played, as year, month and day, each known or not:
/// from the start time when the import held a whole date, else from the
/// raw `Date` tag kept in `games.tags` (`1997.05.??`), whose known parts
/// are kept and whose unknown ones stay unknown.
pub fn date_parts(game: &StoredGame) -> (Option<u16>, Option<u8>, Option<u8>) {
    use chrono::Datelike;
    if let Some(at) = game.started_at {
        return (
            u16::try_from(at.year()).ok(),
            u8::try_from(at.month()).ok(),
            u8::try_from(at.day()).ok(),
        );
    }
    let raw = match game.tags.get("Date") {
        Some(serde_json::Value::String(text)) => text.as_str(),
        Some(serde_json::Value::Array(values)) => match values.first() {
            Some(serde_json::Value::String(text)) => text.as_str(),
            _ => return (None, None, None),
        },
        _ => return (None, None, None),
    };
    let mut fields = raw.trim().split('.');
    let mut field = |len: usize, max: u16| {
        fields
            .next()
            .filter(|f| f.len() == len && f.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|f| f.parse::<u16>().ok())
            .filter(|&n| n >= 1 && n <= max)
    };
    let year = field(4, 9999);
    let month = field(2, 12).and_then(|m| u8::try_from(m).ok());
    let day = field(2, 31).and_then(|d| u8::try_from(d).ok());
    (year, month, day)
}

/// The selected games a writer could not write ([`Error::Unwritable`]): an
/// export or a listing skips them and goes on, and says in its summary
/// how many and why, rather than die on a row the import accepted.
#[derive(Debug, Default)]
pub struct Unwritten {
    /// Games skipped.
    pub count: u64,
    /// Why, the first [`Unwritten::SHOWN`] of them.
    pub reasons: Vec<String>,
}

impl Unwritten {
    /// Reasons kept for the summary: one line each; the count says the rest.
    pub const SHOWN: usize = 10;

    /// Passes `result` of writing one game on; an unwritable game is
    /// counted and gives `None`, any other error stays an error.
    pub fn skip<T>(&mut self, result: Result<T, Error>) -> Result<Option<T>, Error> {
        match result {
            Ok(value) => Ok(Some(value)),
            Err(e @ Error::Unwritable { .. }) => {
                self.count += 1;
                if self.reasons.len() < Self::SHOWN {
                    self.reasons.push(e.to_string());
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Adds the games another part of the same export skipped.
    pub fn merge(&mut self, other: Unwritten) {
        self.count += other.count;
        let room = Self::SHOWN.saturating_sub(self.reasons.len());
        self.reasons.extend(other.reasons.into_iter().take(room));
    }

    /// The lines that say what was skipped (none when nothing was), for
    /// stderr: one per reason kept, then the count if it holds more.
    pub fn report(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .reasons
            .iter()
            .map(|reason| format!("skipped {reason}"))
            .collect();
        let unshown = self.count - self.reasons.len() as u64;
        if unshown > 0 {
            lines.push(format!(
                "skipped {unshown} more games that cannot be written"
            ));
        }
        lines
    }
}

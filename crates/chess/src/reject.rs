//! Why a game is rejected, and where it is: the chess core's own error
//! types. A [`Rejection`] is one bad game (illegal move, broken FEN,
//! garbage): counted, kept with its position in the input, and the run goes
//! on. Errors that stop a run are the database crate's (`pgnload_db::error`).

use std::{fmt, sync::Arc};

/// Where a game came from: file, 1-based game number within that file, and
/// the byte offset of the game's first byte in the decompressed stream.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SourcePos {
    /// The input as the user named it (`-` for stdin).
    pub file: Arc<str>,
    /// 1-based number of the game within its file.
    pub game_number: u64,
    /// Offset of the game's first byte in the decompressed stream.
    pub byte_offset: u64,
}

impl fmt::Display for SourcePos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: game #{} at byte {}",
            self.file, self.game_number, self.byte_offset
        )
    }
}

/// Why a single game was rejected. The game is skipped whole; the run goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RejectReason {
    /// The PGN syntax is broken (unterminated tag or comment).
    #[error("syntax error: {0}")]
    Syntax(String),
    /// A movetext token is neither a move, a move number, a NAG, a comment nor a result.
    #[error("garbage in movetext: {token:?}")]
    Garbage {
        /// The offending token (truncated to 40 bytes).
        token: String,
    },
    /// The game has no termination marker (`1-0`, `0-1`, `1/2-1/2`, `*`)
    /// and ends in the middle of a token: it was cut off. (A game without
    /// a marker that ends cleanly is read, as python-chess reads it.)
    #[error("unterminated game: no result marker, and the movetext ends mid-token")]
    Unterminated,
    /// The game holds no tags and no moves.
    #[error("empty game")]
    Empty,
    /// A move is illegal, ambiguous or unparsable in its position.
    #[error("illegal move {san:?} at ply {ply}: {reason}")]
    IllegalMove {
        /// 1-based ply of the offending move.
        ply: u32,
        /// The move as written.
        san: String,
        /// What shakmaty said.
        reason: String,
    },
    /// A move of a variation is illegal, ambiguous or unparsable in its
    /// position: python-chess records an error for it, as for the mainline.
    #[error("illegal move {san:?} in a variation of ply {ply}: {reason}")]
    IllegalVariationMove {
        /// 1-based ply of the mainline move the (outermost) variation replaces.
        ply: u32,
        /// The move as written.
        san: String,
        /// What shakmaty said.
        reason: String,
    },
    /// The `[FEN]` tag cannot be parsed or is an impossible position.
    #[error("bad FEN tag: {0}")]
    BadFen(String),
    /// The `[Variant]` tag names a variant pgnload cannot replay.
    #[error("unsupported variant {0:?}")]
    UnsupportedVariant(String),
    /// The game is larger than the configured limit (`max_game_bytes`).
    #[error("game too large: {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Bytes the game occupies in the decompressed stream.
        size: u64,
        /// The configured limit.
        limit: u64,
    },
    /// The game's variations take more than the configured limit
    /// (`max_game_bytes`) to hold while it is read and replayed
    /// ([`crate::annotation::Held`] says how they are counted).
    #[error(
        "game too large: its variations take more than the limit of {limit} bytes to hold \
         (max_game_bytes; each of their moves counts {move_cost} bytes, each level of \
         nesting {level_cost})",
        move_cost = crate::annotation::MOVE_COST,
        level_cost = crate::annotation::LEVEL_COST
    )]
    VariationsTooLarge {
        /// The configured limit.
        limit: u64,
    },
    /// The game has more tags than pgnload keeps per game
    /// ([`crate::reader::MAX_TAGS`]), which bounds the memory a game costs.
    #[error("too many tags: more than {limit}")]
    TooManyTags {
        /// The limit.
        limit: usize,
    },
    /// A tag name or value holds a NUL byte, which PostgreSQL `text` and
    /// `jsonb` cannot store.
    #[error("NUL byte in tag {tag:?}")]
    NulByte {
        /// The tag's name (NUL bytes shown escaped).
        tag: String,
    },
    /// A player or event name is longer than pgnload stores
    /// ([`crate::model::MAX_NAME_BYTES`]): the unique keys on players and
    /// events could not index it.
    #[error("tag {tag} is {bytes} bytes long; names are limited to {limit} bytes")]
    NameTooLong {
        /// `White`, `Black` or `Event`.
        tag: String,
        /// The value's length.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A `%clk` comment gives a negative time: a clock stops at zero, and
    /// no PGN clock (`h:mm:ss`) can say a time below it, so an export could
    /// not write the game back.
    #[error("negative clock after ply {ply}: {ms} ms")]
    NegativeClock {
        /// 1-based ply the clock follows.
        ply: u32,
        /// The clock read, in milliseconds.
        ms: i32,
    },
    /// The game has more plies than the configured limit (`max_plies`).
    #[error("game too long: more than {limit} plies")]
    TooManyPlies {
        /// The configured limit.
        limit: u32,
    },
    /// A game stored in an exchange format (ocgdb, Simple Chess Database)
    /// cannot be decoded into a game: a move code that is no move, a
    /// record cut short, a reference to a missing name.
    #[error("undecodable stored game: {0}")]
    Undecodable(String),
}

/// What kind of [`RejectReason`] a game was rejected for, without its
/// details: what a machine-readable summary counts rejects by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectKind {
    /// [`RejectReason::Syntax`].
    Syntax,
    /// [`RejectReason::Garbage`].
    Garbage,
    /// [`RejectReason::Unterminated`].
    Unterminated,
    /// [`RejectReason::Empty`].
    Empty,
    /// [`RejectReason::IllegalMove`].
    IllegalMove,
    /// [`RejectReason::IllegalVariationMove`].
    IllegalVariationMove,
    /// [`RejectReason::BadFen`].
    BadFen,
    /// [`RejectReason::UnsupportedVariant`].
    UnsupportedVariant,
    /// [`RejectReason::TooLarge`].
    TooLarge,
    /// [`RejectReason::TooManyTags`].
    TooManyTags,
    /// [`RejectReason::NulByte`].
    NulByte,
    /// [`RejectReason::NameTooLong`].
    NameTooLong,
    /// [`RejectReason::NegativeClock`].
    NegativeClock,
    /// [`RejectReason::TooManyPlies`].
    TooManyPlies,
    /// [`RejectReason::Undecodable`].
    Undecodable,
}

impl RejectKind {
    /// Every kind, in the order of their counters.
    pub const ALL: [RejectKind; 15] = [
        RejectKind::Syntax,
        RejectKind::Garbage,
        RejectKind::Unterminated,
        RejectKind::Empty,
        RejectKind::IllegalMove,
        RejectKind::IllegalVariationMove,
        RejectKind::BadFen,
        RejectKind::UnsupportedVariant,
        RejectKind::TooLarge,
        RejectKind::TooManyTags,
        RejectKind::NulByte,
        RejectKind::NameTooLong,
        RejectKind::NegativeClock,
        RejectKind::TooManyPlies,
        RejectKind::Undecodable,
    ];

    /// Its name in machine-readable output (`illegal_move`), stable.
    pub fn name(self) -> &'static str {
        match self {
            RejectKind::Syntax => "syntax",
            RejectKind::Garbage => "garbage",
            RejectKind::Unterminated => "unterminated",
            RejectKind::Empty => "empty",
            RejectKind::IllegalMove => "illegal_move",
            RejectKind::IllegalVariationMove => "illegal_variation_move",
            RejectKind::BadFen => "bad_fen",
            RejectKind::UnsupportedVariant => "unsupported_variant",
            RejectKind::TooLarge => "too_large",
            RejectKind::TooManyTags => "too_many_tags",
            RejectKind::NulByte => "nul_byte",
            RejectKind::NameTooLong => "name_too_long",
            RejectKind::NegativeClock => "negative_clock",
            RejectKind::TooManyPlies => "too_many_plies",
            RejectKind::Undecodable => "undecodable",
        }
    }
}

impl RejectReason {
    /// Its kind.
    pub fn kind(&self) -> RejectKind {
        match self {
            RejectReason::Syntax(_) => RejectKind::Syntax,
            RejectReason::Garbage { .. } => RejectKind::Garbage,
            RejectReason::Unterminated => RejectKind::Unterminated,
            RejectReason::Empty => RejectKind::Empty,
            RejectReason::IllegalMove { .. } => RejectKind::IllegalMove,
            RejectReason::IllegalVariationMove { .. } => RejectKind::IllegalVariationMove,
            RejectReason::BadFen(_) => RejectKind::BadFen,
            RejectReason::UnsupportedVariant(_) => RejectKind::UnsupportedVariant,
            RejectReason::TooLarge { .. } | RejectReason::VariationsTooLarge { .. } => {
                RejectKind::TooLarge
            }
            RejectReason::TooManyTags { .. } => RejectKind::TooManyTags,
            RejectReason::NulByte { .. } => RejectKind::NulByte,
            RejectReason::NameTooLong { .. } => RejectKind::NameTooLong,
            RejectReason::NegativeClock { .. } => RejectKind::NegativeClock,
            RejectReason::TooManyPlies { .. } => RejectKind::TooManyPlies,
            RejectReason::Undecodable(_) => RejectKind::Undecodable,
        }
    }
}

/// A rejected game: where it is and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{pos}: {reason}")]
pub struct Rejection {
    /// Where the game is.
    pub pos: SourcePos,
    /// Why it was rejected.
    pub reason: RejectReason,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counters are indexed by `kind as usize` in `ALL`'s order, and
    /// machine-readable output names each kind once.
    #[test]
    fn every_kind_is_listed_once_at_its_index_with_its_own_name() {
        let mut names = std::collections::HashSet::new();
        for (i, kind) in RejectKind::ALL.into_iter().enumerate() {
            assert_eq!(kind as usize, i, "{kind:?}");
            assert!(names.insert(kind.name()), "{kind:?}");
        }
        assert_eq!(
            RejectReason::IllegalMove {
                ply: 3,
                san: "Ke3".into(),
                reason: "illegal".into()
            }
            .kind()
            .name(),
            "illegal_move"
        );
    }
}

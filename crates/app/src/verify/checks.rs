//! The checks behind `pgnload verify`, as pure functions over one row, one
//! digest-file line or one game. [`super::engine`] streams rows out of the
//! database and runs these in parallel; keeping them free of I/O lets them be
//! unit-tested without a database.
//!
//! # What a stored digest can look like when it is wrong
//!
//! `positions.fen_hash` is `xxh64(normalized_fen)` read as two's complement
//! (see [`crate::chess::hash`]). An importer that kept the *unsigned* digest `d`
//! cannot have stored it as is when `d ≥ 2^63`: bigint cannot hold it, and
//! drivers refuse it (`bigint out of range`). For `d < 2^63` the unsigned and
//! signed values are the same number, so the row is correct by accident and
//! there is nothing to detect. What a buggy importer realistically left
//! behind, and what [`classify_stored_hash`] recognizes:
//!
//! | kind | stored value | how it happens |
//! |------|--------------|----------------|
//! | `unsigned_digest` | `d mod 2^63` when `d ≥ 2^63` (= signed XOR `i64::MIN`) | "fix" for the range error: `d % 2**63`, `d & 0x7fff…`, or `d - 2**63` (an offset mapping, which also moves every `d < 2^63` to `d - 2^63`: the same XOR) |
//! | `unsigned_digest` | `i64::MAX` when `d ≥ 2^63` | the unsigned value clamped/saturated into range (`min(d, 2**63-1)`, a saturating cast) |
//! | `unsigned_digest` | `d >> 1` | halved to fit (`d // 2`) |
//! | `byte_swapped` | signed digest with its bytes reversed | `int.from_bytes(h.digest(), 'little', signed=True)`: `digest()` is big-endian |
//! | `precision_loss` | the digest rounded to a 64-bit float | went through a float column (pandas with NULLs, JSON in JavaScript) |
//! | `hash_mismatch` | anything else | hashed different text, corrupted, or computed with another function |

use std::fmt::{self, Write as _};

use shakmaty::{
    CastlingMode, Position,
    uci::UciMove,
    variant::{Variant, VariantPosition},
};

use crate::chess::{
    encoding::decode_move_uci,
    fen::{canonical_fen, normalize_fen_text, position_from_fen, split_normalized},
    hash::{fen_digest, fen_digest_unsigned, to_signed},
    model::GameVariant,
};

/// What is wrong with a row, a digest-file line or a game. The label
/// ([`MismatchKind::label`]) is the `kind` column of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MismatchKind {
    /// `fen_hash` is not the signed xxh64 of `normalized_fen`, and not a
    /// recognizable mis-mapping of it either.
    HashMismatch,
    /// `fen_hash` is the unsigned digest squeezed into bigint without the
    /// two's-complement conversion (see the module docs for the forms).
    UnsignedDigest,
    /// `fen_hash` is the digest with its bytes in the wrong order.
    ByteSwapped,
    /// `fen_hash` is the digest after a round trip through a 64-bit float.
    PrecisionLoss,
    /// `normalized_fen` is not exactly four fields separated by single spaces.
    NotNormalized,
    /// The split columns disagree with `normalized_fen`.
    SplitMismatch,
    /// `normalized_fen` is not what python-chess writes for that position
    /// (`--canonical`).
    NotCanonical,
    /// A digest-file line cannot be read: wrong shape, or a digest that is not
    /// a 64-bit number of the declared signedness.
    BadLine,
    /// A digest-file line's digest does not match its FEN.
    DigestMismatch,
    /// A digest-file FEN is not in `positions` (`--against-db`).
    DbMissing,
    /// A digest-file FEN has another `fen_hash` in `positions` (`--against-db`).
    DbMismatch,
    /// `games.moves` does not hold `2 × ply_count` bytes.
    PlyCount,
    /// The game cannot be replayed: unknown variant, bad start FEN, or a move
    /// code that is not legal in its position.
    ReplayFailed,
    /// A `moves` row's `uci` differs from the decoded `games.moves` code.
    MoveMismatch,
    /// A `moves` row's `position_id` / `position_after_id` names another
    /// position than the replay reaches (or none).
    PositionMismatch,
    /// `moves` rows are missing (or extra) for the game's plies.
    MissingMoves,
    /// `games.initial_position_id` is not the replayed start position.
    InitialPosition,
    /// `games.final_position_id` is not the replayed final position.
    FinalPosition,
}

impl MismatchKind {
    /// Every kind, in report order.
    pub const ALL: [MismatchKind; 18] = [
        MismatchKind::HashMismatch,
        MismatchKind::UnsignedDigest,
        MismatchKind::ByteSwapped,
        MismatchKind::PrecisionLoss,
        MismatchKind::NotNormalized,
        MismatchKind::SplitMismatch,
        MismatchKind::NotCanonical,
        MismatchKind::BadLine,
        MismatchKind::DigestMismatch,
        MismatchKind::DbMissing,
        MismatchKind::DbMismatch,
        MismatchKind::PlyCount,
        MismatchKind::ReplayFailed,
        MismatchKind::MoveMismatch,
        MismatchKind::PositionMismatch,
        MismatchKind::MissingMoves,
        MismatchKind::InitialPosition,
        MismatchKind::FinalPosition,
    ];

    /// The label written in the report's `kind` column (stable: scripts parse it).
    pub fn label(self) -> &'static str {
        match self {
            MismatchKind::HashMismatch => "hash_mismatch",
            MismatchKind::UnsignedDigest => "unsigned_digest",
            MismatchKind::ByteSwapped => "byte_swapped",
            MismatchKind::PrecisionLoss => "precision_loss",
            MismatchKind::NotNormalized => "not_normalized",
            MismatchKind::SplitMismatch => "split_mismatch",
            MismatchKind::NotCanonical => "not_canonical",
            MismatchKind::BadLine => "bad_line",
            MismatchKind::DigestMismatch => "digest_mismatch",
            MismatchKind::DbMissing => "db_missing",
            MismatchKind::DbMismatch => "db_mismatch",
            MismatchKind::PlyCount => "ply_count",
            MismatchKind::ReplayFailed => "replay_failed",
            MismatchKind::MoveMismatch => "move_mismatch",
            MismatchKind::PositionMismatch => "position_mismatch",
            MismatchKind::MissingMoves => "missing_moves",
            MismatchKind::InitialPosition => "initial_position",
            MismatchKind::FinalPosition => "final_position",
        }
    }

    /// Index into [`MismatchKind::ALL`], for per-kind counters without a map.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for MismatchKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One line of the report: `id, normalized_fen, stored, expected, kind`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `positions.id`, `games.id`, or the 1-based line of the digest file.
    pub id: i64,
    /// The FEN concerned: the stored one for positions and digest lines, the
    /// replayed one for games.
    pub normalized_fen: String,
    /// What the database (or file) holds.
    pub stored: String,
    /// What it should hold.
    pub expected: String,
    /// What is wrong.
    pub kind: MismatchKind,
}

/// Counts of findings per kind (indexed like [`MismatchKind::ALL`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KindCounts([u64; MismatchKind::ALL.len()]);

impl KindCounts {
    /// Counts one finding.
    pub fn add(&mut self, kind: MismatchKind) {
        self.0[kind.index()] += 1;
    }

    /// Findings of `kind`.
    pub fn get(&self, kind: MismatchKind) -> u64 {
        self.0[kind.index()]
    }

    /// All findings.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// `(kind, count)` for every kind that occurred, in report order.
    pub fn nonzero(&self) -> impl Iterator<Item = (MismatchKind, u64)> + '_ {
        MismatchKind::ALL
            .iter()
            .map(|&k| (k, self.get(k)))
            .filter(|&(_, n)| n > 0)
    }
}

// ---------------------------------------------------------------------------
// Positions
// ---------------------------------------------------------------------------

/// One `positions` row as read back for checking (the writer's own row,
/// `ingest::writer`, is what COPY writes: other columns, text not bytes),
/// borrowed from the COPY buffer it was decoded from.
/// The split columns stay raw bytes: they are only compared with the FEN's
/// fields, and skipping their UTF-8 validation is measurable at a million
/// rows per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredPosition<'a> {
    /// `id`.
    pub id: i64,
    /// `normalized_fen`.
    pub normalized_fen: &'a str,
    /// `fen_hash`.
    pub fen_hash: i64,
    /// `piece_placement`.
    pub piece_placement: &'a [u8],
    /// `active_color`.
    pub active_color: &'a [u8],
    /// `castling`.
    pub castling: &'a [u8],
    /// `en_passant`.
    pub en_passant: &'a [u8],
}

/// Names a wrong stored digest (see the module docs for the forms). `None`
/// when `stored` is the correct signed digest of `fen`.
pub fn classify_stored_hash(fen: &str, stored: i64) -> Option<MismatchKind> {
    let unsigned = fen_digest_unsigned(fen);
    let signed = to_signed(unsigned);
    if stored == signed {
        return None;
    }
    let high = unsigned >= 1 << 63;
    let kind = if stored == signed ^ i64::MIN
        || (high && stored == i64::MAX)
        || stored == to_signed(unsigned >> 1)
    {
        MismatchKind::UnsignedDigest
    } else if stored == signed.swap_bytes() {
        MismatchKind::ByteSwapped
    } else if is_float_rounding_of(stored, signed) {
        MismatchKind::PrecisionLoss
    } else {
        MismatchKind::HashMismatch
    };
    Some(kind)
}

/// Whether `stored` is `value` after a round trip through an f64 (which
/// keeps 53 significant bits, so digests above 2^53 lose their low bits).
/// Below 2^63 the unsigned digest is the signed one, so this also covers an
/// unsigned digest that went through a float.
fn is_float_rounding_of(stored: i64, value: i64) -> bool {
    stored != value && stored == through_float(value)
}

/// `value` after a round trip through an f64, the way a float column or a
/// JavaScript number leaves a digest.
#[expect(
    clippy::cast_possible_truncation,
    reason = "the rounding is what this models; `as` saturates, as a database cast \
              of an out-of-range double would fail or clamp, and either way a rounded \
              digest is within one float step"
)]
fn through_float(value: i64) -> i64 {
    value as f64 as i64
}

/// Whether `fen` is in the stored form: exactly four non-empty fields
/// separated by single spaces, nothing else (what
/// [`normalize_fen_text`] would leave unchanged).
pub fn is_normalized(fen: &str) -> bool {
    split_ascii_fields(fen).is_some() || normalize_fen_text(fen) == fen
}

/// The four fields of an all-ASCII FEN in normal form, in one pass over its
/// bytes (the hot path of `verify`); `None` for anything else, including
/// normalized FENs with non-ASCII bytes, which [`check_position`] then
/// handles the slow way.
fn split_ascii_fields(fen: &str) -> Option<[&str; 4]> {
    let bytes = fen.as_bytes();
    let mut cuts = [0usize; 3];
    let mut spaces = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b' ' {
            *cuts.get_mut(spaces)? = i;
            spaces += 1;
        } else if !b.is_ascii_graphic() {
            return None;
        }
    }
    let [a, b, c] = cuts;
    let nonempty = spaces == 3 && a > 0 && b > a + 1 && c > b + 1 && bytes.len() > c + 1;
    // Cut at ASCII spaces, so every slice is on a char boundary.
    nonempty.then(|| [&fen[..a], &fen[a + 1..b], &fen[b + 1..c], &fen[c + 1..]])
}

/// Checks one `positions` row, appending what is wrong to `out`: the digest,
/// the normal form, the split columns, and (with `canonical`) that the FEN is
/// what python-chess writes for its position. A FEN that is not normalized
/// is not checked further than its digest (its split columns and position
/// are ill-defined).
pub fn check_position(row: &StoredPosition<'_>, canonical: bool, out: &mut Vec<Finding>) {
    let fen = row.normalized_fen;
    let finding = |kind, stored: String, expected: String| Finding {
        id: row.id,
        normalized_fen: fen.to_owned(),
        stored,
        expected,
        kind,
    };
    if let Some(kind) = classify_stored_hash(fen, row.fen_hash) {
        out.push(finding(
            kind,
            row.fen_hash.to_string(),
            fen_digest(fen).to_string(),
        ));
    }
    let fields = split_ascii_fields(fen).or_else(|| {
        split_normalized(fen)
            .filter(|_| normalize_fen_text(fen) == fen)
            .map(|p| [p.piece_placement, p.active_color, p.castling, p.en_passant])
    });
    let Some(fields) = fields else {
        out.push(finding(
            MismatchKind::NotNormalized,
            fen.to_owned(),
            normalize_fen_text(fen),
        ));
        return;
    };
    let columns = [
        ("piece_placement", row.piece_placement, fields[0]),
        ("active_color", row.active_color, fields[1]),
        ("castling", row.castling, fields[2]),
        ("en_passant", row.en_passant, fields[3]),
    ];
    if columns
        .iter()
        .any(|(_, stored, want)| *stored != want.as_bytes())
    {
        let describe = |stored_side: bool| {
            columns
                .iter()
                .filter(|(_, stored, want)| *stored != want.as_bytes())
                .map(|(name, stored, want)| {
                    if stored_side {
                        format!("{name}={}", String::from_utf8_lossy(stored))
                    } else {
                        format!("{name}={want}")
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        out.push(finding(
            MismatchKind::SplitMismatch,
            describe(true),
            describe(false),
        ));
    }
    if canonical && let Some(expected) = canonical_mismatch(fen) {
        out.push(finding(
            MismatchKind::NotCanonical,
            fen.to_owned(),
            expected,
        ));
    }
}

/// `None` when `fen` (normalized) is what python-chess writes for its
/// position under some variant's rules, else what standard rules make of it
/// (or why they cannot).
///
/// The variant is not stored with a position, so it is inferred: crazyhouse
/// pockets (`[...]`) mean Crazyhouse; castling letters other than `KQkq`
/// mean Chess960 castling. When standard rules do not reproduce the FEN
/// (e.g. a Horde or Racing Kings position, which standard chess calls
/// impossible, or an en passant square only legal in Atomic), every other
/// variant is tried, and the FEN is accepted if any reproduces it exactly.
pub fn canonical_mismatch(fen: &str) -> Option<String> {
    let (pockets, shredder) = match split_normalized(fen) {
        Some(parts) => (
            parts.piece_placement.contains('['),
            parts
                .castling
                .bytes()
                .any(|b| !matches!(b, b'K' | b'Q' | b'k' | b'q' | b'-')),
        ),
        None => (false, false),
    };
    let first = if pockets {
        Variant::Crazyhouse
    } else {
        Variant::Chess
    };
    let primary = canonical_fen(fen, first, shredder);
    if primary.as_deref() == Ok(fen) {
        return None;
    }
    let reproduces = |variant: Variant, chess960: bool| {
        canonical_fen(fen, variant, chess960).is_ok_and(|c| c == fen)
    };
    let others: &[Variant] = if pockets {
        &[Variant::Crazyhouse]
    } else {
        &[
            Variant::Chess,
            Variant::Atomic,
            Variant::KingOfTheHill,
            Variant::ThreeCheck,
            Variant::Antichess,
            Variant::Horde,
            Variant::RacingKings,
        ]
    };
    let accepted = others.iter().any(|&variant| {
        (variant != first && reproduces(variant, shredder)) || reproduces(variant, !shredder)
    });
    if accepted {
        return None;
    }
    Some(match primary {
        Ok(canonical) => canonical,
        Err(e) => format!("error: {e}"),
    })
}

// ---------------------------------------------------------------------------
// Games
// ---------------------------------------------------------------------------

/// The `games` columns `verify --games` reads back (not the writer's row:
/// that one holds what a new game becomes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredGame {
    /// `id`.
    pub id: i64,
    /// `variant` as its enum label.
    pub variant: String,
    /// `start_fen`.
    pub start_fen: Option<String>,
    /// `moves`: two bytes per ply, big-endian.
    pub moves: Vec<u8>,
    /// `ply_count`.
    pub ply_count: i32,
    /// `initial_position_id`.
    pub initial_position_id: i64,
    /// `final_position_id`.
    pub final_position_id: i64,
    /// `positions_max_ply`: rows for plies `1..=N` only, the final
    /// position being the one after ply N (`None`: every ply).
    pub positions_max_ply: Option<i32>,
}

/// The `moves` columns `verify --games` reads back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMove {
    /// `ply` (1-based).
    pub ply: i32,
    /// `uci`.
    pub uci: String,
    /// `position_id`: the position before the move.
    pub position_id: i64,
    /// `position_after_id`: the position after it.
    pub position_after_id: i64,
}

/// The position a game starts from, as `replay_game` sets it up: the FEN tag
/// under the variant's rules, else the variant's start position.
pub fn start_position(
    variant: GameVariant,
    start_fen: Option<&str>,
) -> Result<VariantPosition, String> {
    let chess960 = variant == GameVariant::Chess960;
    match start_fen {
        Some(fen) => position_from_fen(fen, variant.rules(), chess960).map_err(|e| e.to_string()),
        None if chess960 => VariantPosition::from_setup(
            variant.rules(),
            shakmaty::Setup::default(),
            CastlingMode::Chess960,
        )
        .map_err(|e| e.to_string()),
        None => Ok(VariantPosition::new(variant.rules())),
    }
}

/// A game replayed from `games.moves`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayed {
    /// Normalized FEN before the first ply and after each replayed ply.
    pub fens: Vec<String>,
    /// UCI of each replayed ply, as `moves.uci` stores it.
    pub ucis: Vec<String>,
    /// Why replay stopped early (ply, reason), if it did.
    pub failure: Option<(usize, String)>,
}

/// Replays the move codes of a game. Castling is decoded in the notation of
/// the game's castling mode (king-to-rook in Chess960 mode, which a game of
/// any variant can have when its start FEN needs it), as `replay_game` wrote
/// `moves.uci`.
pub fn replay_codes(mut board: VariantPosition, codes: &[u16]) -> Replayed {
    let chess960 = board.castles().mode() == CastlingMode::Chess960;
    let mut fens = Vec::with_capacity(codes.len() + 1);
    let mut ucis = Vec::with_capacity(codes.len());
    fens.push(crate::chess::fen::normalized_fen(&board));
    let mut failure = None;
    for (i, &code) in codes.iter().enumerate() {
        let uci = decode_move_uci(code, chess960);
        let next = if code == 0 {
            crate::chess::replay::null_move(board.clone())
        } else {
            uci.parse::<UciMove>()
                .map_err(|e| e.to_string())
                .and_then(|m| m.to_move(&board).map_err(|e| e.to_string()))
                .map(|m| {
                    let mut next = board.clone();
                    next.play_unchecked(m);
                    next
                })
        };
        match next {
            Ok(next) => board = next,
            Err(reason) => {
                failure = Some((i + 1, format!("code {code:#06x} ({uci}): {reason}")));
                break;
            }
        }
        fens.push(crate::chess::fen::normalized_fen(&board));
        ucis.push(uci);
    }
    Replayed {
        fens,
        ucis,
        failure,
    }
}

/// Checks one game against its `moves` rows (sorted by ply) and the FENs of
/// the positions they reference (`fen_of(id)`, `None` for an id with no
/// row): the move count, each row's UCI and positions before and after, and
/// the game's initial and final positions, all against a replay of
/// `games.moves`.
pub fn check_game<'a>(
    game: &StoredGame,
    moves: &[StoredMove],
    fen_of: impl Fn(i64) -> Option<&'a str>,
) -> Vec<Finding> {
    let mut check = GameCheck {
        game,
        fen_of,
        out: Vec::new(),
    };
    let Some(board) = check.start_board() else {
        return check.out;
    };
    check.ply_count();
    let codes: Vec<u16> = game
        .moves
        .chunks_exact(2)
        .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
        .collect();
    let replayed = replay_codes(board, &codes);
    check.replay_and_start(&replayed);
    let plies = check.stored_plies(codes.len());
    if replayed.failure.is_none() {
        check.final_position(&replayed.fens[plies]);
    }
    check.move_rows(moves, &replayed, plies);
    check.out
}

/// One game's check in progress: the game, where the FENs of its positions
/// come from, and the findings so far, in the order the steps of
/// [`check_game`] append them.
struct GameCheck<'g, F> {
    game: &'g StoredGame,
    fen_of: F,
    out: Vec<Finding>,
}

impl<'a, F: Fn(i64) -> Option<&'a str>> GameCheck<'_, F> {
    fn push(&mut self, kind: MismatchKind, fen: &str, stored: String, expected: String) {
        self.out.push(Finding {
            id: self.game.id,
            normalized_fen: fen.to_owned(),
            stored,
            expected,
            kind,
        });
    }

    /// A stored position id as a finding shows it: with its FEN, or saying
    /// it has no row.
    fn describe(&self, id: i64) -> String {
        match (self.fen_of)(id) {
            Some(fen) => format!("position {id}: {fen}"),
            None => format!("position {id}: (no such row)"),
        }
    }

    /// The position the game starts from; `None`, with the finding, when its
    /// variant or start FEN cannot be replayed (nothing else is checked then).
    fn start_board(&mut self) -> Option<VariantPosition> {
        let game = self.game;
        let Some(variant) = GameVariant::from_db_label(&game.variant) else {
            self.push(
                MismatchKind::ReplayFailed,
                "",
                format!("variant {}", game.variant),
                "a variant pgnload replays".into(),
            );
            return None;
        };
        match start_position(variant, game.start_fen.as_deref()) {
            Ok(board) => Some(board),
            Err(reason) => {
                self.push(
                    MismatchKind::ReplayFailed,
                    "",
                    format!("start_fen {:?}", game.start_fen.as_deref().unwrap_or("")),
                    format!("a valid start position: {reason}"),
                );
                None
            }
        }
    }

    /// `ply_count` against the length of `moves`, two bytes a ply.
    fn ply_count(&mut self) {
        let game = self.game;
        let bytes = game.moves.len();
        let consistent = bytes.is_multiple_of(2)
            && i64::try_from(bytes).is_ok_and(|bytes| i64::from(game.ply_count) * 2 == bytes);
        if !consistent {
            self.push(
                MismatchKind::PlyCount,
                "",
                format!("ply_count {}", game.ply_count),
                format!("{bytes} bytes of moves = {} plies", bytes / 2),
            );
        }
    }

    /// Where the replay of `moves` stopped, if it did, and the game's
    /// initial position against the replay's first.
    fn replay_and_start(&mut self, replayed: &Replayed) {
        let fens = &replayed.fens;
        if let Some((ply, reason)) = &replayed.failure {
            self.push(
                MismatchKind::ReplayFailed,
                &fens[ply - 1],
                format!("ply {ply}: {reason}"),
                "a legal move".into(),
            );
        }
        let initial = self.game.initial_position_id;
        if (self.fen_of)(initial) != Some(fens[0].as_str()) {
            let stored = self.describe(initial);
            self.push(
                MismatchKind::InitialPosition,
                &fens[0],
                stored,
                fens[0].clone(),
            );
        }
    }

    /// How many plies have stored rows, of the `replayed` the moves hold.
    /// A capped game stores plies 1..=N and ends at the position after ply
    /// N. A cap outside 0..plies (which the importer never writes and the
    /// column's check refuses) is a finding, and the rows are then checked
    /// against every ply.
    fn stored_plies(&mut self, replayed: usize) -> usize {
        let Some(cap) = self.game.positions_max_ply else {
            return replayed;
        };
        match usize::try_from(cap) {
            Ok(cap) if cap < replayed => cap,
            _ => {
                self.push(
                    MismatchKind::PlyCount,
                    "",
                    format!("positions_max_ply {cap}"),
                    format!(
                        "a cap from 0 to {} plies, or none",
                        replayed.saturating_sub(1)
                    ),
                );
                replayed
            }
        }
    }

    /// The game's final position against the replay's position after the
    /// last stored ply.
    fn final_position(&mut self, last: &str) {
        let id = self.game.final_position_id;
        if (self.fen_of)(id) != Some(last) {
            let stored = self.describe(id);
            self.push(MismatchKind::FinalPosition, last, stored, last.to_owned());
        }
    }

    /// The `moves` rows: one per stored ply 1..=`plies`, each compared with
    /// the replay where it got that far; then the plies with no row and the
    /// rows of no ply (or a second row of one).
    fn move_rows(&mut self, moves: &[StoredMove], replayed: &Replayed, plies: usize) {
        let mut seen = vec![false; plies];
        let mut extra = Vec::new();
        for row in moves {
            let index = usize::try_from(row.ply)
                .ok()
                .and_then(|p| p.checked_sub(1))
                .filter(|&i| i < plies);
            let Some(i) = index else {
                extra.push(row.ply);
                continue;
            };
            if std::mem::replace(&mut seen[i], true) {
                extra.push(row.ply);
                continue;
            }
            if i < replayed.ucis.len() {
                self.move_row(row, replayed, i);
            } // else after a failed replay: nothing to compare with
        }
        let missing: Vec<usize> = (0..plies).filter(|&i| !seen[i]).map(|i| i + 1).collect();
        if !missing.is_empty() || !extra.is_empty() {
            let mut stored = format!("{} rows", moves.len());
            if !missing.is_empty() {
                let _ = write!(stored, "; missing plies {}", first_plies(&missing));
            }
            if !extra.is_empty() {
                let _ = write!(stored, "; unexpected plies {}", first_plies(&extra));
            }
            self.push(
                MismatchKind::MissingMoves,
                &replayed.fens[0],
                stored,
                format!("{plies} rows (plies 1..={plies})"),
            );
        }
    }

    /// One `moves` row of a replayed ply (index `i`): its UCI and its
    /// positions before and after.
    fn move_row(&mut self, row: &StoredMove, replayed: &Replayed, i: usize) {
        let (uci, fens) = (&replayed.ucis[i], &replayed.fens);
        let ply = row.ply;
        if &row.uci != uci {
            self.push(
                MismatchKind::MoveMismatch,
                &fens[i],
                format!("ply {ply}: {}", row.uci),
                format!("ply {ply}: {uci}"),
            );
        }
        for (column, id, want) in [
            ("position_id", row.position_id, &fens[i]),
            ("position_after_id", row.position_after_id, &fens[i + 1]),
        ] {
            if (self.fen_of)(id) != Some(want.as_str()) {
                let stored = format!("ply {ply} {column}: {}", self.describe(id));
                self.push(MismatchKind::PositionMismatch, want, stored, want.clone());
            }
        }
    }
}

/// Ply numbers as a finding lists them: the first 20, comma-separated, then
/// an ellipsis if there are more.
fn first_plies<T: fmt::Display>(plies: &[T]) -> String {
    let shown: Vec<String> = plies.iter().take(20).map(ToString::to_string).collect();
    let more = if plies.len() > 20 { ", …" } else { "" };
    format!("{}{more}", shown.join(","))
}

/// Which rows `verify` reads: `--id-range`. Written `A..B` (half-open, as in
/// Rust), `A..=B` (inclusive), `A..` or `..B`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    /// Lowest id, inclusive.
    pub start: i64,
    /// Highest id, inclusive.
    pub end: i64,
}

impl IdRange {
    /// Parses `A..B`, `A..=B`, `A..`, `..B`.
    pub fn parse(text: &str) -> Result<IdRange, String> {
        let bad = || format!("{text:?} is not an id range (A..B, A..=B, A.. or ..B)");
        let (a, b) = text.trim().split_once("..").ok_or_else(bad)?;
        let (b, inclusive) = match b.strip_prefix('=') {
            Some(b) => (b, true),
            None => (b, false),
        };
        let num = |s: &str| s.trim().parse::<i64>().map_err(|_| bad());
        let start = if a.trim().is_empty() {
            i64::MIN
        } else {
            num(a)?
        };
        let end = match (b.trim().is_empty(), inclusive) {
            (true, false) => i64::MAX,
            (true, true) => return Err(bad()),
            (false, true) => num(b)?,
            (false, false) => num(b)?.checked_sub(1).ok_or_else(bad)?,
        };
        if end < start {
            return Err(format!("{text:?} is an empty id range"));
        }
        Ok(IdRange { start, end })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chess::fen::normalized_fen;
    use crate::verify::{digest::*, report::*};
    use std::collections::HashMap;

    const START: &str = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -";

    fn row(fen: &str) -> StoredPosition<'_> {
        let parts = split_normalized(fen).expect("test FEN is normalized");
        StoredPosition {
            id: 7,
            normalized_fen: fen,
            fen_hash: fen_digest(fen),
            piece_placement: parts.piece_placement.as_bytes(),
            active_color: parts.active_color.as_bytes(),
            castling: parts.castling.as_bytes(),
            en_passant: parts.en_passant.as_bytes(),
        }
    }

    fn check(row: &StoredPosition<'_>, canonical: bool) -> Vec<(MismatchKind, String, String)> {
        let mut out = Vec::new();
        check_position(row, canonical, &mut out);
        out.into_iter()
            .map(|f| (f.kind, f.stored, f.expected))
            .collect()
    }

    /// A FEN whose unsigned digest is ≥ 2^63 and one whose digest is < 2^63.
    fn fens_by_digest_half() -> (String, String) {
        let mut high = None;
        let mut low = None;
        for n in 1..100 {
            let fen = format!("8/8/8/8/8/8/8/{n} w - -");
            if fen_digest_unsigned(&fen) >= 1 << 63 {
                high.get_or_insert(fen);
            } else {
                low.get_or_insert(fen);
            }
        }
        (
            high.expect("some digest is high"),
            low.expect("some is low"),
        )
    }

    #[test]
    fn a_correct_row_is_clean_even_canonically() {
        assert_eq!(check(&row(START), true), []);
    }

    #[test]
    fn every_wrong_digest_form_gets_its_kind() {
        let (high, low) = fens_by_digest_half();
        let d = fen_digest_unsigned(&high);
        let s = to_signed(d);
        let cases = [
            (s ^ (1 << 12), MismatchKind::HashMismatch),
            (
                (d & (i64::MAX as u64)).cast_signed(),
                MismatchKind::UnsignedDigest,
            ),
            (i64::MAX, MismatchKind::UnsignedDigest),
            ((d >> 1).cast_signed(), MismatchKind::UnsignedDigest),
            (s.swap_bytes(), MismatchKind::ByteSwapped),
            (through_float(s), MismatchKind::PrecisionLoss),
        ];
        for (stored, kind) in cases {
            assert_eq!(classify_stored_hash(&high, stored), Some(kind), "{stored}");
        }
        assert_eq!(classify_stored_hash(&high, s), None);
        // Below 2^63 the unsigned digest *is* the signed one: nothing to find,
        // but the offset mapping d - 2^63 still shows.
        let d = fen_digest_unsigned(&low);
        let d = d.cast_signed();
        assert_eq!(classify_stored_hash(&low, d), None);
        assert_eq!(
            classify_stored_hash(&low, d.wrapping_sub(i64::MIN)),
            Some(MismatchKind::UnsignedDigest)
        );
        assert_eq!(
            classify_stored_hash(&low, through_float(d)),
            (through_float(d) != d).then_some(MismatchKind::PrecisionLoss)
        );
    }

    #[test]
    fn five_fields_are_not_normalized_and_not_checked_further() {
        let fen = format!("{START} 0");
        let mut r = row(START);
        r.normalized_fen = &fen;
        r.fen_hash = fen_digest(&fen);
        assert_eq!(
            check(&r, true),
            [(MismatchKind::NotNormalized, fen.clone(), START.to_owned())]
        );
        let doubled = START.replace(" w ", "  w ");
        r.normalized_fen = &doubled;
        r.fen_hash = fen_digest(&doubled);
        assert_eq!(check(&r, false)[0].0, MismatchKind::NotNormalized);
        let tabbed = START.replace("KQkq", "KQ\tkq");
        assert!(!is_normalized(&tabbed));
        assert!(is_normalized(START));
        for bad in [
            " a b c d",
            "a b c d ",
            "a  b c d",
            "a b c",
            "a b c d e",
            "",
            "a b c\u{a0}d",
        ] {
            assert!(!is_normalized(bad), "{bad:?}");
            assert_eq!(split_ascii_fields(bad), None, "{bad:?}");
        }
        // Non-ASCII but in normal form: the slow path agrees with the normalizer.
        let odd = "8/8/8/8/8/8/8/8 w é -";
        assert!(is_normalized(odd));
        let mut r = row(odd);
        r.fen_hash = fen_digest(odd);
        assert_eq!(check(&r, false), []);
    }

    #[test]
    fn split_columns_must_agree() {
        let mut r = row(START);
        r.castling = b"KQ";
        r.active_color = b"b";
        assert_eq!(
            check(&r, false),
            [(
                MismatchKind::SplitMismatch,
                "active_color=b castling=KQ".to_owned(),
                "active_color=w castling=KQkq".to_owned()
            )]
        );
    }

    #[test]
    fn canonical_accepts_variant_positions_and_flags_uncapturable_en_passant() {
        for fen in [
            START,
            // Crazyhouse with pockets and a promoted piece.
            "r1bk3r/p1p2pQ~p/1pn5/3N4/2B1P3/8/PPP2PPP/R4RK1[QNPbp] w - -",
            // Racing Kings start: standard chess calls it impossible.
            "8/8/8/8/8/8/krbnNBRK/qrbnNBRQ w - -",
            // Horde start: no white king.
            "rnbqkbnr/pppppppp/8/1PP2PP1/PPPPPPPP/PPPPPPPP/PPPPPPPP/PPPPPPPP w kq -",
            // Antichess: no kings at all.
            "8/8/8/8/8/8/8/R6r w - -",
            // Chess960 with a rook that is not the outermost one.
            "1r2k1rr/8/8/8/8/8/8/1R2K1RR w GQgq -",
        ] {
            assert_eq!(canonical_mismatch(fen), None, "{fen}");
        }
        assert_eq!(
            canonical_mismatch("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq e3"),
            Some("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq -".to_owned())
        );
        assert_eq!(
            canonical_mismatch("4k3/8/8/8/8/8/8/4K3 w KQkq -"),
            Some("4k3/8/8/8/8/8/8/4K3 w - -".to_owned())
        );
        assert!(
            canonical_mismatch("8/8/8/8/8/8/8/8 w - x").is_some_and(|e| e.starts_with("error: "))
        );
        let r = row("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq e3");
        assert_eq!(check(&r, true)[0].0, MismatchKind::NotCanonical);
        assert_eq!(check(&r, false), []);
    }

    #[test]
    fn digest_lines_of_every_shape_parse() {
        let tsv3 = parse_digest_line(&format!("{START}\t-1\t18446744073709551615\r"))
            .expect("valid")
            .expect("data");
        assert_eq!(tsv3.shape, DigestShape::FenSignedUnsigned);
        assert_eq!(tsv3.fen, START);
        let tsv4 = parse_digest_line(&format!("abcdEFGH\t3\t{START}\t5"))
            .expect("valid")
            .expect("data");
        assert_eq!(tsv4.shape, DigestShape::KeyPlyFenDigest);
        let csv = parse_digest_line(&format!("\"{START}\", \"12\""))
            .expect("valid")
            .expect("data");
        assert_eq!(csv.shape, DigestShape::FenDigest);
        assert_eq!(csv.fen, START);
        assert_eq!(csv.digests, [(DigestColumn::Single, "12".to_owned())]);
        assert_eq!(split_fields(r#"a,"b ""q"" c",d"#), ["a", "b \"q\" c", "d"]);
        assert_eq!(parse_digest_line("# comment"), Ok(None));
        assert_eq!(parse_digest_line("  \r"), Ok(None));
        assert!(parse_digest_line("just one field").is_err());
        assert!(parse_digest_line(&format!("{START}\tnope")).is_err());
        assert!(parse_digest_line(&format!("{START}\t18446744073709551616")).is_err());
    }

    #[test]
    fn digest_values_read_the_same_signed_or_unsigned() {
        let (high, _) = fens_by_digest_half();
        let fen = high.as_str();
        let d = fen_digest_unsigned(fen);
        let mut det = SignDetector::default();
        for text in [d.to_string(), to_signed(d).to_string()] {
            let line = DigestLine {
                fen: fen.to_owned(),
                shape: DigestShape::FenDigest,
                digests: vec![(DigestColumn::Single, text)],
            };
            let checked = check_digest_line(1, &line, SignMode::Auto, &mut det);
            assert_eq!(checked.finding, None);
            assert_eq!(checked.claimed, Some(to_signed(d)));
        }
        assert_eq!(
            (det.negative, det.high),
            (1, 1),
            "both notations are unambiguous"
        );
    }

    #[test]
    fn a_wrong_digest_is_reported_in_the_lines_notation() {
        let (high, _) = fens_by_digest_half();
        let d = fen_digest_unsigned(&high);
        let line = DigestLine {
            fen: high.clone(),
            shape: DigestShape::FenSignedUnsigned,
            digests: vec![
                (DigestColumn::Signed, to_signed(d).to_string()),
                (DigestColumn::Unsigned, (d - 1).to_string()),
            ],
        };
        let mut det = SignDetector::default();
        let checked = check_digest_line(4, &line, SignMode::Auto, &mut det);
        let finding = checked.finding.expect("mismatch");
        assert_eq!(finding.kind, MismatchKind::DigestMismatch);
        assert_eq!(finding.id, 4);
        assert_eq!(finding.expected, d.to_string());
        assert_eq!(checked.claimed, None);
        // --signed looks at the signed column only, which is right.
        let checked = check_digest_line(4, &line, SignMode::Signed, &mut det);
        assert_eq!(checked.finding, None);
        // A negative value in an --unsigned file cannot be right.
        let single = DigestLine {
            fen: high.clone(),
            shape: DigestShape::FenDigest,
            digests: vec![(DigestColumn::Single, to_signed(d).to_string())],
        };
        let checked = check_digest_line(5, &single, SignMode::Unsigned, &mut det);
        assert_eq!(checked.finding.map(|f| f.kind), Some(MismatchKind::BadLine));
    }

    #[test]
    fn against_db_reports_missing_and_different_digests() {
        let line = DigestLine {
            fen: START.to_owned(),
            shape: DigestShape::FenDigest,
            digests: vec![(DigestColumn::Single, fen_digest(START).to_string())],
        };
        let mut det = SignDetector::default();
        let checked = check_digest_line(2, &line, SignMode::Auto, &mut det);
        let mut db = HashMap::new();
        assert_eq!(
            check_against_db(2, &checked, &db).map(|f| f.kind),
            Some(MismatchKind::DbMissing)
        );
        db.insert(START.to_owned(), fen_digest(START) ^ 1);
        assert_eq!(
            check_against_db(2, &checked, &db).map(|f| f.kind),
            Some(MismatchKind::DbMismatch)
        );
        db.insert(START.to_owned(), fen_digest(START));
        assert_eq!(check_against_db(2, &checked, &db), None);
    }

    fn game_fixture() -> (StoredGame, Vec<StoredMove>, HashMap<i64, String>) {
        let game = crate::testing::replayed(
            "1. e4 d5 2. exd5 Nf6 3. Z0 Nxd5 4. Nf3 e5 5. Bc4 Be7 6. O-O *",
        );
        let mut ids = HashMap::new();
        let mut fens = HashMap::new();
        for (fen, _) in game.positions.iter() {
            let next = i64::try_from(ids.len() + 1).expect("a fixture has few positions");
            let id = *ids.entry(fen.to_owned()).or_insert(next);
            fens.insert(id, fen.to_owned());
        }
        let id = |i: usize| ids[game.positions.fen(i)];
        let moves = game
            .plies
            .iter()
            .enumerate()
            .map(|(i, p)| StoredMove {
                ply: i32::try_from(i + 1).expect("a fixture has few plies"),
                uci: p.uci.to_string(),
                position_id: id(i),
                position_after_id: id(i + 1),
            })
            .collect();
        let row = StoredGame {
            id: 42,
            variant: game.variant.as_db_label().to_owned(),
            start_fen: None,
            moves: game.encoded_moves(),
            ply_count: i32::try_from(game.plies.len()).expect("a fixture has few plies"),
            initial_position_id: id(0),
            final_position_id: id(game.plies.len()),
            positions_max_ply: None,
        };
        (row, moves, fens)
    }

    #[test]
    fn a_capped_game_is_checked_up_to_its_cap() {
        let (mut game, mut moves, fens) = game_fixture();
        let fen_of = |id: i64| fens.get(&id).map(String::as_str);
        assert!(moves.len() > 2, "the fixture has more than 2 plies");
        moves.truncate(2);
        game.final_position_id = moves[1].position_after_id;
        let kinds = |game: &StoredGame| -> Vec<MismatchKind> {
            check_game(game, &moves, fen_of)
                .iter()
                .map(|f| f.kind)
                .collect()
        };
        assert_eq!(
            kinds(&game),
            [MismatchKind::FinalPosition, MismatchKind::MissingMoves],
            "uncapped, the rows past ply 2 are missing"
        );
        game.positions_max_ply = Some(2);
        assert_eq!(check_game(&game, &moves, fen_of), []);
        game.positions_max_ply = Some(1);
        assert_eq!(
            kinds(&game),
            [MismatchKind::FinalPosition, MismatchKind::MissingMoves],
            "a row past the cap is unexpected"
        );
        for impossible in [-1, 1000] {
            game.positions_max_ply = Some(impossible);
            assert_eq!(
                kinds(&game)[0],
                MismatchKind::PlyCount,
                "cap {impossible} is named, not clamped"
            );
        }
    }

    #[test]
    fn a_replayed_game_checks_clean_and_each_defect_is_named() {
        let (game, moves, fens) = game_fixture();
        let fen_of = |id: i64| fens.get(&id).map(String::as_str);
        assert_eq!(check_game(&game, &moves, fen_of), []);

        let kinds = |game: &StoredGame, moves: &[StoredMove]| -> Vec<MismatchKind> {
            check_game(game, moves, fen_of)
                .into_iter()
                .map(|f| f.kind)
                .collect()
        };
        let mut wrong = moves.clone();
        wrong[3].position_after_id = wrong[0].position_id;
        assert_eq!(kinds(&game, &wrong), [MismatchKind::PositionMismatch]);
        let mut wrong = moves.clone();
        wrong[3].uci = "a2a3".into();
        assert_eq!(kinds(&game, &wrong), [MismatchKind::MoveMismatch]);
        let mut wrong = moves.clone();
        wrong.remove(2);
        assert_eq!(kinds(&game, &wrong), [MismatchKind::MissingMoves]);
        let mut g = game.clone();
        g.initial_position_id = 9999;
        assert_eq!(kinds(&g, &moves), [MismatchKind::InitialPosition]);
        let mut g = game.clone();
        g.final_position_id = game.initial_position_id;
        assert_eq!(kinds(&g, &moves), [MismatchKind::FinalPosition]);
        let mut g = game.clone();
        g.ply_count += 1;
        assert_eq!(kinds(&g, &moves), [MismatchKind::PlyCount]);
        let mut g = game.clone();
        g.moves[0] ^= 0x3f; // e2 → somewhere with no piece
        assert!(kinds(&g, &moves).contains(&MismatchKind::ReplayFailed));
        let mut g = game.clone();
        g.variant = "bughouse".into();
        assert_eq!(kinds(&g, &moves), [MismatchKind::ReplayFailed]);
    }

    #[test]
    fn replay_covers_castling_null_moves_and_drops() {
        let board = start_position(GameVariant::Crazyhouse, None).expect("start");
        let codes = [
            crate::chess::encoding::encode_move(
                "e2e4"
                    .parse::<UciMove>()
                    .expect("uci")
                    .to_move(&board)
                    .expect("legal"),
            ),
            0,
        ];
        let replayed = replay_codes(board, &codes);
        assert_eq!(replayed.failure, None);
        assert_eq!(replayed.ucis, ["e2e4", "0000"]);
        assert!(replayed.fens[1].contains(" b "), "{:?}", replayed.fens);
        assert!(replayed.fens[2].contains(" w "), "{:?}", replayed.fens);
        assert_eq!(
            normalized_fen(&start_position(GameVariant::RacingKings, None).expect("start")),
            "8/8/8/8/8/8/krbnNBRK/qrbnNBRQ w - -"
        );
    }

    #[test]
    fn id_ranges_parse_like_rust_ranges() {
        assert_eq!(IdRange::parse("10..20"), Ok(IdRange { start: 10, end: 19 }));
        assert_eq!(
            IdRange::parse("10..=20"),
            Ok(IdRange { start: 10, end: 20 })
        );
        assert_eq!(
            IdRange::parse("5.."),
            Ok(IdRange {
                start: 5,
                end: i64::MAX
            })
        );
        assert_eq!(
            IdRange::parse("..5"),
            Ok(IdRange {
                start: i64::MIN,
                end: 4
            })
        );
        assert!(IdRange::parse("20..10").is_err());
        assert!(IdRange::parse("x").is_err());
        assert!(IdRange::parse("1..=").is_err());
    }

    #[test]
    fn report_fields_cannot_break_the_tsv() {
        let mut out = Vec::new();
        write_finding(
            &mut out,
            &Finding {
                id: 1,
                normalized_fen: "a\tb\nc\\".into(),
                stored: "x".into(),
                expected: "y".into(),
                kind: MismatchKind::NotNormalized,
            },
        )
        .expect("in memory");
        assert_eq!(out, b"1\ta\\tb\\nc\\\\\tx\ty\tnot_normalized\n");
    }
}

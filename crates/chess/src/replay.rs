//! Replay: a parsed game → its positions, normalized FENs and digests.
//!
//! This is the contract with the historical Python importer: for the initial
//! position and after every ply, the normalized FEN ([`crate::fen`]) and its
//! signed xxh64 digest ([`crate::hash`]). Move resolution is as lenient as
//! python-chess's `parse_san` (a missing or extra `x` is tolerated, fully
//! specified moves like `e2e4` or `g1f3` are accepted for any piece) so both
//! accept the same games.
//!
//! It must not parse PGN text again (the reader did) nor know how a game is
//! stored.

use std::{fmt::Write as _, sync::Arc};

use shakmaty::{
    Bitboard, CastlingMode, CastlingSide, Chess, Color, EnPassantMode, FromSetup, Move, Position,
    PositionError, PositionErrorKinds, Rank, Role, Square, attacks,
    san::{San, Suffix},
    uci::UciMove,
    variant::{
        Antichess, Atomic, Crazyhouse, Horde, KingOfTheHill, RacingKings, ThreeCheck,
        VariantPosition,
    },
};

use crate::{
    annotation::{Node, Notes, PlyNotes, Step, digits},
    encoding::encode_move,
    fen::{FEN_CAP, position_from_fen, write_fen},
    hash::fen_digest_bytes,
    headers::{Columns, StoredTags},
    model::{
        Eval, GameMeta, GameResult, GameVariant, RawGame, RawMove, Tags, game_key,
        termination_label,
    },
    reject::{RejectReason, SourcePos},
};

/// Normalized FENs of a game's positions, stored back to back in one string
/// (one allocation per game instead of one per position), with their digests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PositionList {
    text: String,
    ends: Vec<u32>,
    digests: Vec<i64>,
}

/// A [`PositionList`] being filled: FENs are written straight into the
/// byte buffer (no copy, no UTF-8 check per position), which becomes the
/// list's string once, at the end of the game.
struct PositionsBuilder {
    /// The FENs so far (`..len`), then at least `FEN_CAP` zeroed bytes that
    /// the next FEN is written into in place: zeroing them once per game,
    /// not per ply, and copying nothing (a per-ply memset, then a per-ply
    /// memcpy, were each a few percent of a replay).
    text: Vec<u8>,
    len: usize,
    ends: Vec<u32>,
}

impl PositionsBuilder {
    fn with_capacity(positions: usize) -> Self {
        PositionsBuilder {
            text: vec![0; 64 * positions + FEN_CAP],
            len: 0,
            ends: Vec::with_capacity(positions),
        }
    }

    #[inline]
    fn push<P: Position>(&mut self, pos: &P) {
        if self.text.len() < self.len + FEN_CAP {
            self.text.resize(2 * self.text.len() + FEN_CAP, 0);
        }
        let out = <&mut [u8; FEN_CAP]>::try_from(&mut self.text[self.len..self.len + FEN_CAP])
            .expect("the text was just grown to hold FEN_CAP bytes past len");
        self.len += write_fen(pos, out);
        self.ends.push(u32::try_from(self.len).expect(
            "a game's FEN text is far below 4 GiB: its plies are capped by max_plies \
             (at most 1,000,000) and a FEN is under 100 bytes",
        ));
    }

    /// Hashes every FEN in one loop at the end: the hashes are independent
    /// latency-bound chains, which the CPU overlaps when they run back to
    /// back (interleaved with move generation they did not).
    fn finish(mut self) -> PositionList {
        self.text.truncate(self.len);
        let mut start = 0;
        let digests = self
            .ends
            .iter()
            .map(|&end| {
                let fen = self.text.get(start..end as usize).expect(
                    "each end was the text's length when its FEN was appended, and the text only grows",
                );
                start = end as usize;
                fen_digest_bytes(fen)
            })
            .collect();
        PositionList {
            text: String::from_utf8(self.text)
                .expect("only FENs are written, and a FEN is ASCII (board, side, castling, square, numbers)"),
            ends: self.ends,
            digests,
        }
    }
}

impl PositionList {
    /// Number of positions (plies + 1).
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are no positions (never true for a replayed game).
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Normalized FEN of position `i` (0 = initial).
    pub fn fen(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.text[start..self.ends[i] as usize]
    }

    /// Signed digest of position `i`.
    pub fn digest(&self, i: usize) -> i64 {
        self.digests[i]
    }

    /// `(fen, digest)` for every position in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, i64)> + '_ {
        (0..self.len()).map(|i| (self.fen(i), self.digests[i]))
    }
}

/// A move's UCI or SAN text stored inline (at most 15 ASCII bytes; the
/// longest SAN is 7, e.g. `Qh4xe1#`), so a ply costs no heap allocation:
/// two `String`s per ply were a measurable share of the replay time.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MoveText {
    len: u8,
    bytes: [u8; 15],
}

impl MoveText {
    /// The text.
    ///
    /// # Panics
    ///
    /// Never: it holds ASCII chars or whole `str`s, so no cut character.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).expect(
            "a MoveText holds ASCII chars from shakmaty (push) or whole strs (write_str), \
             so never a cut character",
        )
    }

    /// Formats `value` into a `MoveText` (truncated if it would not fit).
    pub fn from_display(value: impl std::fmt::Display) -> MoveText {
        let mut text = MoveText::default();
        let _ = std::fmt::Write::write_fmt(&mut text, format_args!("{value}"));
        text
    }

    /// The move's canonical SAN, byte for byte what shakmaty's `SanPlus`
    /// `Display` writes, without going through `fmt` (which cost ~5% of a
    /// replay, twice per ply).
    fn san(san: San, suffix: Option<Suffix>) -> MoveText {
        let mut text = MoveText::default();
        match san {
            San::Normal {
                role,
                file,
                rank,
                capture,
                to,
                promotion,
            } => {
                if role != Role::Pawn {
                    text.push(role.upper_char());
                }
                if let Some(file) = file {
                    text.push(file.char());
                }
                if let Some(rank) = rank {
                    text.push(rank.char());
                }
                if capture {
                    text.push('x');
                }
                text.push_square(to);
                if let Some(promotion) = promotion {
                    text.push('=');
                    text.push(promotion.upper_char());
                }
            }
            San::Castle(CastlingSide::KingSide) => text.push_str("O-O"),
            San::Castle(CastlingSide::QueenSide) => text.push_str("O-O-O"),
            San::Put { role, to } => {
                if role != Role::Pawn {
                    text.push(role.upper_char());
                }
                text.push('@');
                text.push_square(to);
            }
            San::Null => text.push_str("--"),
        }
        if let Some(suffix) = suffix {
            text.push(suffix.char());
        }
        text
    }

    /// The move in UCI, byte for byte what shakmaty's
    /// `UciMove::from_move(m, mode)` displays.
    fn uci(m: Move, mode: CastlingMode) -> MoveText {
        let mut text = MoveText::default();
        let (from, to, promotion) = match m {
            Move::Normal {
                from,
                to,
                promotion,
                ..
            } => (from, to, promotion),
            Move::EnPassant { from, to } => (from, to, None),
            Move::Castle { king, rook } => match mode {
                CastlingMode::Standard => {
                    let side = CastlingSide::from_king_side(king < rook);
                    (
                        king,
                        Square::from_coords(side.king_to_file(), king.rank()),
                        None,
                    )
                }
                CastlingMode::Chess960 => (king, rook, None),
            },
            Move::Put { role, to } => {
                text.push(role.upper_char());
                text.push('@');
                text.push_square(to);
                return text;
            }
        };
        text.push_square(from);
        text.push_square(to);
        if let Some(promotion) = promotion {
            text.push(promotion.char());
        }
        text
    }

    /// Appends an ASCII character (dropped if the text is full, which the
    /// at most 9-byte SAN and 5-byte UCI never are).
    fn push(&mut self, ch: char) {
        if let Some(slot) = self.bytes.get_mut(usize::from(self.len)) {
            *slot = ch as u8;
            self.len += 1;
        }
    }

    fn push_str(&mut self, s: &str) {
        s.chars().for_each(|ch| self.push(ch));
    }

    fn push_square(&mut self, sq: Square) {
        self.push(sq.file().char());
        self.push(sq.rank().char());
    }
}

impl std::fmt::Write for MoveText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let start = usize::from(self.len);
        let end = start + s.len();
        let slot = self.bytes.get_mut(start..end).ok_or(std::fmt::Error)?;
        slot.copy_from_slice(s.as_bytes());
        // At most the 15 bytes of `bytes`, or `get_mut` failed.
        self.len = u8::try_from(end).map_err(|_| std::fmt::Error)?;
        Ok(())
    }
}

impl std::ops::Deref for MoveText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for MoveText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for MoveText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// One ply of the mainline, as stored in the `moves` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ply {
    /// UCI (`e2e4`, `e1g1` standard castling, `e1h1` Chess960, `P@e4`, `0000`).
    pub uci: MoveText,
    /// Canonical SAN of the move in its position, with `+`/`#` (`--` for a null move).
    pub san: MoveText,
    /// Clock after the move in milliseconds (`%clk`).
    pub clock_ms: Option<i32>,
    /// Evaluation in centipawns (`%eval`).
    pub eval_cp: Option<i32>,
    /// Mate in N (`%eval #N`).
    pub eval_mate: Option<i32>,
    /// First NAG after the move.
    pub nag: Option<i16>,
    /// Compact 2-byte encoding (see [`encode_move`]).
    pub code: u16,
}

/// A fully replayed game: the unit the import pipeline writes.
#[derive(Debug, Clone)]
pub struct GameRecord {
    /// Where it came from.
    pub pos: SourcePos,
    /// Typed tags.
    pub meta: GameMeta,
    /// Rules the game was replayed with.
    pub variant: GameVariant,
    /// The `FEN` tag, when the game did not start from the variant's start position.
    pub start_fen: Option<String>,
    /// Result: the `Result` tag, else the movetext's termination marker.
    pub result: Option<GameResult>,
    /// Every tag, as read.
    pub tags: Tags,
    /// What `games.tags` keeps of `tags`: what the columns cannot say
    /// ([`StoredTags`]); nothing for a Lichess game.
    pub stored_tags: StoredTags,
    /// Positions 0..=plies.
    pub positions: PositionList,
    /// The mainline.
    pub plies: Vec<Ply>,
    /// What the movetext says that the plies' typed fields cannot:
    /// comments, NAGs after the first, variations (checked legal).
    pub notes: Notes,
}

impl GameRecord {
    /// Key used by `pgnload positions`: Lichess id, else game number.
    pub fn key(&self) -> Arc<str> {
        game_key(&self.meta, &self.pos)
    }

    /// `games.tags`, made where the game is written.
    pub fn stored_tags_json(&self) -> serde_json::Map<String, serde_json::Value> {
        self.stored_tags.json(&self.tags)
    }
}

const STANDARD_START: &str = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1";

/// Replays `raw` and computes every position's normalized FEN and digest.
pub fn replay_game(raw: RawGame, pos: SourcePos) -> Result<GameRecord, RejectReason> {
    let variant_tag = raw.tag("Variant");
    let suicide = variant_tag.is_some_and(is_suicide_or_giveaway);
    let mut variant = match variant_tag {
        Some(_) if suicide => GameVariant::Antichess,
        Some(tag) => GameVariant::from_tag(tag)
            .ok_or_else(|| RejectReason::UnsupportedVariant(tag.to_owned()))?,
        None => GameVariant::Standard,
    };
    let fen_tag = raw.tag("FEN").map(str::trim);
    if fen_tag == Some("") {
        return Err(RejectReason::BadFen("empty FEN tag".into()));
    }
    let castling = |fen: &str| fen.split_whitespace().nth(2).is_some_and(|c| c != "-");
    if suicide && fen_tag.is_none_or(castling) {
        // python-chess keeps castling rights there (the standard start's
        // `KQkq` in every FEN until a king or rook moves, and castling is
        // legal), which shakmaty's antichess does not hold.
        return Err(RejectReason::UnsupportedVariant(format!(
            "{} with castling rights (from the standard start, or in its FEN)",
            variant_tag.unwrap_or_default()
        )));
    }
    let start_fen: Option<String> = fen_tag
        .filter(|fen| {
            // Lichess dumps hold Racing Kings (and other variant) games with a
            // standard-start FEN tag; the variant's own start is meant.
            *fen != STANDARD_START
                || suicide
                || matches!(variant, GameVariant::Standard | GameVariant::Chess960)
        })
        .map(str::to_owned);
    let board = initial_position(variant, start_fen.as_deref())?;
    if variant == GameVariant::Standard && board.castles().mode() == CastlingMode::Chess960 {
        variant = GameVariant::Chess960;
    }
    let mode = board.castles().mode();

    let meta = GameMeta::from_tags(&raw.tags);
    let result = meta.result.or(raw.movetext_result);
    let stored_tags = StoredTags::of(
        &raw.tags,
        &Columns::imported(&meta, variant, start_fen.as_deref(), result),
    );
    // One dispatch per game: the loop runs on the concrete position type, so
    // move generation is neither dispatched nor its move lists copied per ply.
    let written = (raw.moves, raw.notes);
    let (positions, plies, notes) = match board {
        VariantPosition::Chess(board) => replay_mainline(board, written, mode),
        VariantPosition::Atomic(board) => replay_mainline(board, written, mode),
        VariantPosition::Antichess(board) => replay_mainline(board, written, mode),
        VariantPosition::KingOfTheHill(board) => replay_mainline(board, written, mode),
        VariantPosition::ThreeCheck(board) => replay_mainline(board, written, mode),
        VariantPosition::Crazyhouse(board) => replay_mainline(board, written, mode),
        VariantPosition::RacingKings(board) => replay_mainline(board, written, mode),
        VariantPosition::Horde(board) => replay_mainline(board, written, mode),
    }?;

    Ok(GameRecord {
        pos,
        meta,
        variant,
        start_fen,
        result,
        tags: raw.tags,
        stored_tags,
        positions,
        plies,
        notes,
    })
}

/// python-chess's Suicide and Giveaway boards (`find_variant` aliases,
/// case-insensitive) play antichess moves, but start from the standard
/// start, castling rights included, where its Antichess board starts
/// without them: such a game with a `FEN` tag is stored as antichess.
fn is_suicide_or_giveaway(tag: &str) -> bool {
    [
        "suicide",
        "suicide chess",
        "giveaway",
        "giveaway chess",
        "give away",
        "give away chess",
    ]
    .iter()
    .any(|alias| alias.eq_ignore_ascii_case(tag.trim()))
}

/// Replays the mainline from `board`: every position's FEN and digest and
/// every ply; and the notes of its plies, their variations replayed from
/// the position before the move they replace (an illegal move there
/// rejects the game, as python-chess records an error for it).
fn replay_mainline<P: Rules + Clone>(
    mut board: P,
    (moves, raw_notes): (Vec<RawMove>, Vec<PlyNotes>),
    mode: CastlingMode,
) -> Result<(PositionList, Vec<Ply>, Notes), RejectReason> {
    let mut notes = Notes(Vec::with_capacity(raw_notes.len()));
    let mut raw_notes = raw_notes.into_iter().peekable();
    if let Some(start) = raw_notes.next_if(|n| n.ply == 0) {
        notes.0.push((0, write_notes(&board, &start)?));
    }
    let mut positions = PositionsBuilder::with_capacity(moves.len() + 1);
    positions.push(&board);
    let mut plies = Vec::with_capacity(moves.len());
    // Whether the side to move is in check: the previous ply's suffix says
    // so, which spares the legality test most of its work (see chess_froms).
    let mut in_check = board.is_check();
    for (i, raw_move) in moves.into_iter().enumerate() {
        let ply = u32::try_from(i + 1)
            .expect("a game held in memory has far fewer than 2^32 moves (the reader caps them at max_plies)");
        let illegal = |reason: String| RejectReason::IllegalMove {
            ply,
            san: raw_move.san.to_string(),
            reason,
        };
        if let Some(ply_notes) = raw_notes.next_if(|n| n.ply == ply) {
            notes.0.push((ply, write_notes(&board, &ply_notes)?));
        }
        let (uci, san, code) = if raw_move.san.san == San::Null {
            board = null_move_of(board).map_err(illegal)?;
            in_check = board.is_check();
            (
                MoveText::from_display("0000"),
                MoveText::from_display("--"),
                0,
            )
        } else {
            let (m, san, suffix) =
                play_written(raw_move.san.san, &mut board, in_check).map_err(illegal)?;
            // A check or a mate suffix: the side now to move is in check.
            in_check = suffix.is_some();
            (MoveText::uci(m, mode), san, encode_move(m))
        };
        if let Some(ms) = raw_move.clock_ms.filter(|&ms| ms < 0) {
            return Err(RejectReason::NegativeClock { ply, ms });
        }
        positions.push(&board);
        let (eval_cp, eval_mate) = match raw_move.eval {
            Some(Eval::Centipawns(cp)) => (Some(cp), None),
            Some(Eval::MateIn(n)) => (None, Some(n)),
            None => (None, None),
        };
        plies.push(Ply {
            uci,
            san,
            clock_ms: raw_move.clock_ms,
            eval_cp,
            eval_mate,
            nag: raw_move.nag.map(i16::from),
            code,
        });
    }
    Ok((positions.finish(), plies, notes))
}

/// The stored text of a mainline ply's notes (see [`Notes`]): its NAGs,
/// its comment, then its variations, each replayed from `before`, the
/// position before the move.
fn write_notes<P: Rules + Clone>(before: &P, notes: &PlyNotes) -> Result<String, RejectReason> {
    let mut out = String::new();
    write_nags_and_comment(&notes.nags, &notes.comment, &mut out);
    write_variations(before, &notes.variations, notes.ply, &mut out)?;
    Ok(out.trim_start().to_owned())
}

/// Appends ` $n` per NAG and ` { comment }` when there is one; whether a
/// comment was written (the next move then needs its number).
fn write_nags_and_comment(nags: &[u32], comment: &str, out: &mut String) -> bool {
    for &nag in nags {
        out.push_str(" $");
        digits(nag, 1, out);
    }
    if comment.is_empty() {
        return false;
    }
    out.push_str(" { ");
    out.push_str(comment);
    out.push_str(" }");
    true
}

/// The variation being written: its position, whether its next move
/// needs its number, and, when a variation follows its last move, the
/// position before that move with the move (`None`: a null move).
struct Line<P> {
    board: P,
    number_due: bool,
    before_last: Option<(P, Option<Move>)>,
}

impl<P: Rules + Clone> Line<P> {
    /// A variation starting at `board`.
    fn at(board: P) -> Line<P> {
        Line {
            board,
            number_due: true,
            before_last: None,
        }
    }

    /// The line a nested variation suspended, going on after it: its
    /// last move played again from the position before it.
    fn resumed((before, last): (P, Option<Move>), ply: u32) -> Result<Line<P>, RejectReason> {
        let mut board = before.clone();
        match last {
            Some(m) => board.play_unchecked(m),
            None => {
                board =
                    null_move_of(board).map_err(|reason| RejectReason::IllegalVariationMove {
                        ply,
                        san: "--".to_owned(),
                        reason,
                    })?;
            }
        }
        Ok(Line {
            board,
            number_due: true,
            before_last: Some((before, last)),
        })
    }

    /// Appends `node`, numbered as python-chess numbers it, with its
    /// comments and NAGs, and plays it. `keep`: a variation follows it, so
    /// the position before it is kept. `ply`: as for [`write_variations`].
    fn write_move(
        &mut self,
        node: &Node,
        keep: bool,
        ply: u32,
        out: &mut String,
    ) -> Result<(), RejectReason> {
        let notes = node.notes.as_deref();
        if let Some(comment) = notes.map(|n| n.starting_comment.as_str())
            && !comment.is_empty()
        {
            out.push_str(" { ");
            out.push_str(comment);
            out.push_str(" }");
            self.number_due = true;
        }
        let board = &mut self.board;
        let white = board.turn() == Color::White;
        if white || self.number_due {
            out.push(' ');
            digits(board.fullmoves().get(), 1, out);
            out.push_str(if white { "." } else { "..." });
        }
        let prior = keep.then(|| board.clone());
        let illegal = |reason: String| RejectReason::IllegalVariationMove {
            ply,
            san: node.san.to_string(),
            reason,
        };
        let (played, san) = if node.san.san == San::Null {
            *board = null_move_of(board.clone()).map_err(illegal)?;
            (None, MoveText::from_display("--"))
        } else {
            let in_check = board.is_check();
            let (m, san, _) = play_written(node.san.san, board, in_check).map_err(illegal)?;
            (Some(m), san)
        };
        self.before_last = prior.map(|prior| (prior, played));
        out.push(' ');
        out.push_str(san.as_str());
        self.number_due = notes.is_some_and(|n| write_nags_and_comment(&n.nags, &n.comment, out));
        Ok(())
    }
}

/// Appends the variations `steps` (` ( … ) ( … )`), each replayed from
/// `before`, the position before the mainline move they replace, with move
/// numbers as python-chess writes them and every move's canonical SAN.
/// `ply`: the mainline ply they replace, for the reason a game is
/// rejected. A loop over the steps: a variation nested in the one being
/// written suspends it, keeping only the position before its last move
/// (whence the nested one starts, and its own line goes on once that
/// move is played again), so its depth costs memory, never stack.
fn write_variations<P: Rules + Clone>(
    before: &P,
    steps: &[Step],
    ply: u32,
    out: &mut String,
) -> Result<(), RejectReason> {
    let disorder = |what: &str| {
        RejectReason::Syntax(format!(
            "the variations of ply {ply} {what}: python-chess reads no game tree from it"
        ))
    };
    // The variation being written (`None`: between two of the mainline's)
    // and the enclosing ones it suspended, innermost last.
    let mut line: Option<Line<P>> = None;
    let mut suspended: Vec<(P, Option<Move>)> = Vec::new();
    for (at, step) in steps.iter().enumerate() {
        match step {
            Step::Open => {
                out.push_str(" (");
                line = Some(Line::at(match line.take() {
                    None => before.clone(),
                    Some(Line {
                        before_last: Some(last),
                        ..
                    }) => {
                        let board = last.0.clone();
                        suspended.push(last);
                        board
                    }
                    Some(_) => return Err(disorder("open one before any move")),
                }));
            }
            Step::Close => {
                out.push_str(" )");
                line = suspended
                    .pop()
                    .map(|last| Line::resumed(last, ply))
                    .transpose()?;
            }
            Step::Move(node) => {
                let keep = matches!(steps.get(at + 1), Some(Step::Open));
                line.as_mut()
                    .ok_or_else(|| disorder("hold a move outside any variation"))?
                    .write_move(node, keep, ply, out)?;
            }
        }
    }
    if line.is_some() {
        return Err(disorder("leave one open"));
    }
    Ok(())
}

/// The position a game of `variant` with the `FEN` tag `fen` starts from
/// (also what [`crate::scope::sans_after`] replays a stored game from).
pub fn initial_position(
    variant: GameVariant,
    fen: Option<&str>,
) -> Result<VariantPosition, RejectReason> {
    let chess960 = variant == GameVariant::Chess960;
    match fen {
        Some(fen) => position_from_fen(fen, variant.rules(), chess960)
            .map_err(|e| RejectReason::BadFen(e.to_string())),
        None if chess960 => VariantPosition::from_setup(
            variant.rules(),
            shakmaty::Setup::default(),
            CastlingMode::Chess960,
        )
        .map_err(|e| RejectReason::BadFen(e.to_string())),
        None => Ok(VariantPosition::new(variant.rules())),
    }
}

/// What replay needs from a concrete position type beyond `Position`:
/// shortcuts for standard chess, where nearly all games are.
trait Rules: Position + FromSetup {
    /// The unique legal move matching a written normal move, with its
    /// canonical SAN, exactly as [`resolve_written`] would find it; `None`
    /// (no shortcut, no match, several matches) leaves the move to
    /// [`resolve_written`]. `in_check`: whether the side to move is in
    /// check (exactly `self.is_check()`, known from the previous ply).
    fn resolve_unique(&self, _san: San, _in_check: bool) -> Option<(Move, San)> {
        None
    }

    /// The check or checkmate suffix of the position just reached.
    fn suffix(&self) -> Option<Suffix> {
        Suffix::from_position(self)
    }
}

impl Rules for Chess {
    fn resolve_unique(&self, san: San, in_check: bool) -> Option<(Move, San)> {
        chess_unique(self, san, in_check)
    }

    fn suffix(&self) -> Option<Suffix> {
        // A decisive outcome is a checkmate, which needs a check.
        self.is_check().then(|| {
            if chess_has_evasion(self) {
                Suffix::Check
            } else {
                Suffix::Checkmate
            }
        })
    }
}

impl Rules for Atomic {}
impl Rules for Antichess {}
impl Rules for KingOfTheHill {}
impl Rules for ThreeCheck {}
impl Rules for Crazyhouse {}
impl Rules for RacingKings {}
impl Rules for Horde {}

/// Resolves a written move like python-chess `parse_san` does, plays it,
/// and returns the move with its canonical SAN. This is the hottest loop of
/// an import. `in_check` is `board.is_check()`; the suffix returned with
/// the SAN text says whether the position reached is check (or mate).
/// Inlined: since the variations call it too, the compiler no longer
/// inlined it into the mainline's loop, which cost that loop a tenth more
/// instructions (callgrind, unannotated games).
#[expect(
    clippy::inline_always,
    reason = "measured: the mainline loop needs it inlined, and a hint alone is not taken"
)]
#[inline(always)]
fn play_written<P: Rules>(
    san: San,
    board: &mut P,
    in_check: bool,
) -> Result<(Move, MoveText, Option<Suffix>), String> {
    let (m, canonical) = match board.resolve_unique(san, in_check) {
        Some(found) => found,
        None => resolve_written(san, board)?,
    };
    board.play_unchecked(m);
    let suffix = board.suffix();
    Ok((m, MoveText::san(canonical, suffix), suffix))
}

/// The general resolution: the SAN candidates are generated once and serve
/// both to resolve the written move and to disambiguate the canonical SAN.
fn resolve_written<P: Position>(san: San, board: &P) -> Result<(Move, San), String> {
    let candidates = match san {
        San::Normal { role, to, .. } | San::Put { role, to } => board.san_candidates(role, to),
        San::Castle(side) => board.castling_moves(side),
        San::Null => return Err("null move".to_owned()),
    };
    // MoveList is a 2 KiB array: disambiguate in place rather than moving it.
    Ok(match find_written(san, &candidates) {
        Ok(m) => (m, San::disambiguate(m, &candidates)),
        Err(reason) => {
            let m = uci_fallback(san, board).ok_or(reason)?;
            let canonical = match m {
                Move::Castle { .. } => San::disambiguate(m, &candidates_of_castle(board, m)),
                _ => San::disambiguate(m, &board.san_candidates(m.role(), m.to())),
            };
            (m, canonical)
        }
    })
}

/// Standard chess: the squares from which a piece of `role` of the side to
/// move can legally move to `to` (castling aside), and apart from them the
/// pawns that can take en passant there. These are the moves shakmaty's
/// `san_candidates` lists, found from bitboards without building (and
/// copying) a 2.7 KB move list. Legal means: the own king is not attacked
/// afterwards. `in_check` must be `pos.is_check()`: when it is false, a
/// piece that does not stand on a line with its king cannot expose it
/// (leaving its square opens no line to the king, and landing on `to` only
/// blocks or captures), so only the king's own moves and the pieces on its
/// lines need the full attack test.
fn chess_froms(pos: &Chess, role: Role, to: Square, in_check: bool) -> (Bitboard, Bitboard) {
    let board = pos.board();
    let us = pos.turn();
    let them = !us;
    let none = (Bitboard::EMPTY, Bitboard::EMPTY);
    let Some(king) = board.king_of(us) else {
        return none;
    };
    if pos.us().contains(to) {
        return none;
    }
    let occupied = board.occupied();
    let ours = pos.our(role);
    let pseudo = match role {
        Role::Pawn if pos.them().contains(to) => attacks::pawn_attacks(them, to) & ours,
        Role::Pawn => {
            // Pushes: one step, or two from the second rank over an empty square.
            let back = |steps: i32| to.offset(us.fold_wb(-8, 8) * steps);
            match back(1) {
                Some(from) if ours.contains(from) => Bitboard::from(from),
                Some(over)
                    if !occupied.contains(over) && to.rank() == us.relative_rank(Rank::Fourth) =>
                {
                    back(2).map_or(Bitboard::EMPTY, |from| ours & Bitboard::from(from))
                }
                _ => Bitboard::EMPTY,
            }
        }
        _ => attacks::attacks(to, role.of(us), occupied) & ours,
    };
    let safe = |from: Square| {
        if role == Role::King {
            board
                .attacks_to(to, them, occupied.without(from))
                .is_empty()
        } else if !in_check && attacks::ray(king, from).is_empty() {
            true
        } else {
            board
                .attacks_to(king, them, occupied.without(from).with(to))
                .without(to)
                .is_empty()
        }
    };
    let legal = pseudo.into_iter().filter(|&from| safe(from)).collect();
    let en_passant = if role == Role::Pawn && pos.maybe_ep_square() == Some(to) {
        (attacks::pawn_attacks(them, to) & ours)
            .into_iter()
            .filter(|&from| {
                let captured = Square::from_coords(to.file(), from.rank());
                board
                    .attacks_to(
                        king,
                        them,
                        occupied.without(from).without(captured).with(to),
                    )
                    .without(captured)
                    .is_empty()
            })
            .collect()
    } else {
        Bitboard::EMPTY
    };
    (legal, en_passant)
}

/// [`resolve_written`] for standard chess when exactly one legal move
/// matches a written normal move: the same move and canonical SAN (the
/// filter of [`find_written`] and the disambiguation of
/// `San::disambiguate`, over the sets of [`chess_froms`]).
fn chess_unique(pos: &Chess, san: San, in_check: bool) -> Option<(Move, San)> {
    let San::Normal {
        role,
        file,
        rank,
        to,
        promotion,
        ..
    } = san
    else {
        return None;
    };
    let (froms, en_passant) = chess_froms(pos, role, to, in_check);
    let written = |mut squares: Bitboard| {
        if let Some(file) = file {
            squares &= Bitboard::from_file(file);
        }
        if let Some(rank) = rank {
            squares &= Bitboard::from_rank(rank);
        }
        squares
    };
    // A pawn reaching a back rank promotes to one of these; no other move
    // promotes.
    let promotion_fits = if role == Role::Pawn && Bitboard::BACKRANKS.contains(to) {
        matches!(
            promotion,
            Some(Role::Queen | Role::Rook | Role::Bishop | Role::Knight)
        )
    } else {
        promotion.is_none()
    };
    let normal = if promotion_fits {
        written(froms)
    } else {
        Bitboard::EMPTY
    };
    let en_passant = if promotion.is_none() {
        written(en_passant)
    } else {
        Bitboard::EMPTY
    };
    let capture = pos.board().role_at(to);
    Some(match (normal.single_square(), en_passant.single_square()) {
        (Some(from), None) if en_passant.is_empty() => {
            let m = Move::Normal {
                role,
                from,
                capture,
                to,
                promotion,
            };
            (m, canonical_san(role, from, capture, to, promotion, froms))
        }
        (None, Some(from)) if normal.is_empty() => (
            Move::EnPassant { from, to },
            San::Normal {
                role: Role::Pawn,
                file: Some(from.file()),
                rank: None,
                capture: true,
                to,
                promotion: None,
            },
        ),
        _ => return None,
    })
}

/// The canonical SAN of the one normal move of `role` from `from` (among
/// the squares `froms` it could come from) to `to`: `San::disambiguate`
/// over the others in `froms` (a pawn names its file only when it captures).
fn canonical_san(
    role: Role,
    from: Square,
    capture: Option<Role>,
    to: Square,
    promotion: Option<Role>,
    froms: Bitboard,
) -> San {
    if role == Role::Pawn {
        San::Normal {
            role,
            file: capture.is_some().then(|| from.file()),
            rank: None,
            capture: capture.is_some(),
            to,
            promotion,
        }
    } else {
        let others = froms.without(from);
        let same_rank = (others & Bitboard::from_rank(from.rank())).any();
        let same_file = (others & Bitboard::from_file(from.file())).any();
        San::Normal {
            role,
            file: (others.any() && (!same_file || same_rank)).then(|| from.file()),
            rank: same_file.then(|| from.rank()),
            capture: capture.is_some(),
            to,
            promotion,
        }
    }
}

/// Whether the side to move, in check in standard chess, has a legal move:
/// a king move to a safe square, an en passant capture, or (against a
/// single checker) a capture of the checker or a block. Castling never
/// answers a check.
fn chess_has_evasion(pos: &Chess) -> bool {
    let board = pos.board();
    let us = pos.turn();
    let Some(king) = board.king_of(us) else {
        return false;
    };
    let king_moves = attacks::king_attacks(king) & !pos.us();
    if king_moves.into_iter().any(|to| {
        board
            .attacks_to(to, !us, board.occupied().without(king))
            .is_empty()
    }) {
        return true;
    }
    if let Some(ep) = pos.maybe_ep_square()
        && chess_froms(pos, Role::Pawn, ep, true).1.any()
    {
        return true;
    }
    let Some(checker) = pos.checkers().single_square() else {
        return false;
    };
    attacks::between(king, checker)
        .with(checker)
        .into_iter()
        .any(|to| {
            [
                Role::Pawn,
                Role::Knight,
                Role::Bishop,
                Role::Rook,
                Role::Queen,
            ]
            .into_iter()
            .any(|role| chess_froms(pos, role, to, true).0.any())
        })
}

fn candidates_of_castle<P: Position>(board: &P, m: Move) -> shakmaty::MoveList {
    match m {
        Move::Castle { king, rook } if king.file() < rook.file() => {
            board.castling_moves(shakmaty::CastlingSide::KingSide)
        }
        _ => board.castling_moves(shakmaty::CastlingSide::QueenSide),
    }
}

/// Picks the written move among the candidates for its piece and target.
/// Like python-chess, the capture marker is not checked (whether a move
/// captures depends only on its target square, so this never adds ambiguity).
fn find_written(san: San, candidates: &shakmaty::MoveList) -> Result<Move, String> {
    let mut matching = candidates.iter().filter(|m| match (san, **m) {
        (
            San::Normal {
                file,
                rank,
                promotion,
                ..
            },
            Move::Normal {
                from, promotion: p, ..
            },
        ) => {
            file.is_none_or(|f| f == from.file())
                && rank.is_none_or(|r| r == from.rank())
                && promotion == p
        }
        (
            San::Normal {
                file,
                rank,
                promotion,
                ..
            },
            Move::EnPassant { from, .. },
        ) => {
            file.is_none_or(|f| f == from.file())
                && rank.is_none_or(|r| r == from.rank())
                && promotion.is_none()
        }
        (San::Put { .. }, Move::Put { .. }) | (San::Castle(_), Move::Castle { .. }) => true,
        _ => false,
    });
    match (matching.next(), matching.next()) {
        (Some(_), Some(_)) if !matches!(san, San::Put { .. } | San::Castle(_)) => {
            Err("ambiguous move".to_owned())
        }
        (Some(m), _) => Ok(*m),
        (None, _) => Err("illegal move".to_owned()),
    }
}

/// A fully specified origin without a piece letter (`g1f3`, UCI movetext)
/// names any piece, castling included, as python-chess accepts it.
fn uci_fallback<P: Position>(san: San, board: &P) -> Option<Move> {
    let San::Normal {
        role: Role::Pawn,
        file: Some(file),
        rank: Some(rank),
        to,
        promotion,
        ..
    } = san
    else {
        return None;
    };
    UciMove::Normal {
        from: Square::from_coords(file, rank),
        to,
        promotion,
    }
    .to_move(board)
    .ok()
}

/// A null move (`--`, `Z0`): the other side to move, no en passant, as
/// python-chess `push(Move.null())` does. Shared with `verify --games`.
///
/// A null move while in check is refused: it leaves the side that just
/// "moved" in check, a position shakmaty cannot hold (the other side could
/// capture the king). python-chess plays it and goes on generating moves,
/// king captures included, from positions no legal game reaches; matching
/// that would take a second move generator for impossible positions, so
/// such a game is rejected (see the README's contract section).
pub fn null_move(pos: VariantPosition) -> Result<VariantPosition, String> {
    match pos {
        VariantPosition::Chess(pos) => null_move_of(pos).map(Into::into),
        VariantPosition::Atomic(pos) => null_move_of(pos).map(Into::into),
        VariantPosition::Antichess(pos) => null_move_of(pos).map(Into::into),
        VariantPosition::KingOfTheHill(pos) => null_move_of(pos).map(Into::into),
        VariantPosition::ThreeCheck(pos) => null_move_of(pos).map(Into::into),
        VariantPosition::Crazyhouse(pos) => null_move_of(pos).map(Into::into),
        VariantPosition::RacingKings(pos) => null_move_of(pos).map(Into::into),
        VariantPosition::Horde(pos) => null_move_of(pos).map(Into::into),
    }
}

/// [`null_move`] on a concrete position type (the replay loop's).
#[expect(
    clippy::needless_pass_by_value,
    reason = "a move: every caller replaces its board with the result"
)]
pub fn null_move_of<P: Position + FromSetup>(pos: P) -> Result<P, String> {
    let mode = pos.castles().mode();
    let mut setup = pos.to_setup(EnPassantMode::Legal);
    setup.ep_square = None;
    setup.turn = !setup.turn;
    if setup.turn == Color::White {
        setup.fullmoves = setup.fullmoves.saturating_add(1);
    }
    P::from_setup(setup, mode)
        .or_else(PositionError::ignore_invalid_castling_rights)
        .map_err(|e| {
            if e.kinds().contains(PositionErrorKinds::OPPOSITE_CHECK) {
                "null move while in check (python-chess plays it; the king could then be \
                 captured, a position pgnload does not replay)"
                    .to_owned()
            } else {
                format!("null move leads to an impossible position: {e}")
            }
        })
}

/// The prefix of the content digests [`GameRecord::external_id`] writes:
/// the digests of earlier versions ([`GameRecord::legacy_external_id`])
/// are bare hex, so the two forms never collide.
pub const DIGEST_VERSION: &str = "v2-";

impl GameRecord {
    /// `games.source`: `lichess` for Lichess games, else `fallback` (the
    /// `--source` label, or `pgn`).
    pub fn source<'a>(&self, fallback: &'a str) -> &'a str {
        if self.meta.lichess_id.is_some() {
            "lichess"
        } else {
            fallback
        }
    }

    /// `games.external_id`: the Lichess id, else a content digest (xxh3-128
    /// in hex after [`DIGEST_VERSION`]) of everything stored of the game
    /// that tells it from another: every tag in the form its column or
    /// `games.tags` holds it (typed or not, kept raw values included), the
    /// result, the variant, the start position and the moves. So
    /// re-importing the same game from any file (an export of it included)
    /// is recognized, and two games that differ in any of these are two
    /// games. Player titles are left out: `players` holds one title per
    /// player, not one per game, so an export could not give a game's back.
    /// Clocks, evaluations and NAGs are annotations of the same game.
    ///
    /// Databases written by earlier versions hold
    /// [`legacy_external_id`](Self::legacy_external_id) instead; the prefix
    /// keeps the two forms apart, and the import looks a game up by both.
    pub fn external_id(&self) -> String {
        if let Some(id) = &self.meta.lichess_id {
            return id.clone();
        }
        let meta = &self.meta;
        let mut content = String::with_capacity(16 * self.plies.len() + 512);
        // Each value length-prefixed, so no value can read as another
        // field or tag whatever it holds.
        let mut field = |name: &str, value: Option<&str>| {
            content.push_str(name);
            match value {
                Some(value) => {
                    let _ = write!(content, "={}:", value.len());
                    content.push_str(value);
                }
                None => content.push('!'),
            }
            content.push('\n');
        };
        let number = |n: Option<i32>| n.map(|n| n.to_string());
        let [white_elo, black_elo, white_diff, black_diff] = [
            meta.white.elo,
            meta.black.elo,
            meta.white.rating_diff,
            meta.black.rating_diff,
        ]
        .map(number);
        let result = self
            .result
            .and_then(GameResult::score)
            .map(|r| r.to_string());
        let started_at = meta.started_at.map(|at| at.to_rfc3339());
        let typed = [
            ("Event", meta.event.as_deref()),
            ("Site", meta.site.as_deref()),
            ("Round", meta.round.as_deref()),
            ("White", meta.white.name.as_deref()),
            ("Black", meta.black.name.as_deref()),
            ("WhiteElo", white_elo.as_deref()),
            ("BlackElo", black_elo.as_deref()),
            ("WhiteRatingDiff", white_diff.as_deref()),
            ("BlackRatingDiff", black_diff.as_deref()),
            ("TimeControl", meta.time_control.as_deref()),
            ("ECO", meta.eco.as_deref()),
            ("Opening", meta.opening.as_deref()),
            (
                "Termination",
                meta.termination.as_deref().map(termination_label),
            ),
            ("Result", result.as_deref()),
            ("Variant", Some(self.variant.as_db_label())),
            ("Start", started_at.as_deref()),
        ];
        for (name, value) in typed {
            field(name, value);
        }
        // `games.tags` keeps no order between names: sorted.
        let mut tags: Vec<&(String, String)> =
            meta.other_tags.iter().chain(&meta.kept_tags).collect();
        tags.sort_unstable();
        for (name, value) in tags {
            field("Tag", Some(name));
            field("", Some(value));
        }
        field("Position", Some(self.positions.fen(0)));
        for ply in &self.plies {
            content.push_str(&ply.uci);
            content.push(' ');
        }
        format!(
            "{DIGEST_VERSION}{:032x}",
            xxhash_rust::xxh3::xxh3_128(content.as_bytes())
        )
    }

    /// The content digest of versions before [`DIGEST_VERSION`]: the tags
    /// no column holds, Event, Site, Round, White, Black, `TimeControl`,
    /// ECO, the start time, the start position and the moves, but not the
    /// other typed tags (Result, Elo, Variant, ...), so games differing
    /// only in those shared it. Kept to recognize the games those versions
    /// stored (see `ingest::writer::existing`); never written any more.
    pub fn legacy_external_id(&self) -> String {
        if let Some(id) = &self.meta.lichess_id {
            return id.clone();
        }
        let mut content = String::with_capacity(64 * self.plies.len() + 256);
        let mut tags: Vec<(&str, &str)> = Vec::new();
        for (k, v) in &self.meta.other_tags {
            tags.push((k, v));
        }
        let typed = [
            ("Event", self.meta.event.as_deref()),
            ("Site", self.meta.site.as_deref()),
            ("Round", self.meta.round.as_deref()),
            ("White", self.meta.white.name.as_deref()),
            ("Black", self.meta.black.name.as_deref()),
            ("TimeControl", self.meta.time_control.as_deref()),
            ("ECO", self.meta.eco.as_deref()),
        ];
        tags.extend(typed.iter().filter_map(|(k, v)| v.map(|v| (*k, v))));
        tags.sort_unstable();
        for (k, v) in tags {
            content.push_str(k);
            content.push('=');
            content.push_str(v);
            content.push('\n');
        }
        if let Some(at) = self.meta.started_at {
            content.push_str(&at.to_rfc3339());
        }
        content.push('\n');
        content.push_str(self.positions.fen(0));
        for ply in &self.plies {
            content.push(' ');
            content.push_str(&ply.uci);
        }
        format!("{:032x}", xxhash_rust::xxh3::xxh3_128(content.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::decode_move_uci;
    use crate::hash::fen_digest;
    use crate::reader::{GameSplitter, ParseLimits, take_game};

    fn replay_pgn(pgn: &str) -> Result<GameRecord, RejectReason> {
        // The default cap (config/pgnload.toml), which a game nested
        // 20,000 deep needs for its variations.
        let limits = ParseLimits {
            max_plies: 10_000,
            max_game_bytes: 8 << 20,
        };
        let mut splitter = GameSplitter::new(pgn.as_bytes(), Arc::from("t"), 0, 0, limits);
        let mut chunk = splitter
            .next_chunk()
            .expect("in-memory source cannot fail")
            .expect("one game");
        replay_game(take_game(&mut chunk, limits)?, chunk.pos)
    }

    /// Standard-chess positions from seeded random games (biased towards
    /// checks, captures, double pushes and promotions so that pins, en
    /// passant, double checks and mates occur), Chess960 starts included.
    fn random_chess_positions() -> Vec<Chess> {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            usize::try_from(seed % n as u64).expect("below n, a usize")
        };
        let mut out = Vec::new();
        for game in 0..160 {
            let mut pos = if game % 4 == 3 {
                let fen = "nrbbqkrn/pppppppp/8/8/8/8/PPPPPPPP/NRBBQKRN w GBgb - 0 1";
                match position_from_fen(fen, shakmaty::variant::Variant::Chess, true) {
                    Ok(VariantPosition::Chess(pos)) => pos,
                    other => panic!("960 start: {other:?}"),
                }
            } else {
                Chess::default()
            };
            for _ in 0..200 {
                out.push(pos.clone());
                let moves = pos.legal_moves();
                if moves.is_empty() {
                    break;
                }
                let special: Vec<Move> = moves
                    .iter()
                    .copied()
                    .filter(|m| {
                        m.is_capture()
                            || m.is_promotion()
                            || m.is_en_passant()
                            || (m.role() == Role::Pawn
                                && m.from().is_some_and(|f| f.distance(m.to()) == 2))
                            || pos.clone().play(*m).is_ok_and(|p| p.is_check())
                    })
                    .collect();
                let m = if !special.is_empty() && next(3) > 0 {
                    special[next(special.len())]
                } else {
                    moves[next(moves.len())]
                };
                pos.play_unchecked(m);
            }
        }
        out
    }

    #[test]
    fn chess_shortcuts_agree_with_shakmaty() {
        let positions = random_chess_positions();
        let (mut checks, mut mates, mut en_passant, mut unique) = (0, 0, 0, 0);
        for pos in &positions {
            // chess_froms: the san_candidates sets, square for square.
            for role in Role::ALL {
                for to in Square::ALL {
                    let mut froms = Bitboard::EMPTY;
                    let mut ep = Bitboard::EMPTY;
                    for m in pos.san_candidates(role, to) {
                        match m {
                            Move::EnPassant { from, .. } => ep.add(from),
                            Move::Normal { from, .. } => froms.add(from),
                            other => panic!("unexpected candidate {other:?}"),
                        }
                    }
                    en_passant += ep.count();
                    assert_eq!(
                        chess_froms(pos, role, to, pos.is_check()),
                        (froms, ep),
                        "{role:?} to {to} in {pos:?}"
                    );
                }
            }
            if pos.is_check() {
                checks += 1;
                let mate = pos.legal_moves().is_empty();
                mates += usize::from(mate);
                assert_eq!(chess_has_evasion(pos), !mate, "{pos:?}");
            }
            // chess_unique: whenever it answers, the general path agrees.
            for m in pos.legal_moves() {
                let canonical = San::from_move(pos, m);
                let mut written = vec![canonical];
                if let San::Normal {
                    role,
                    to,
                    promotion,
                    ..
                } = canonical
                {
                    let from = m.from().expect("normal moves have an origin");
                    for (file, rank) in [
                        (None, None),
                        (Some(from.file()), None),
                        (None, Some(from.rank())),
                        (Some(from.file()), Some(from.rank())),
                    ] {
                        for capture in [false, true] {
                            for promotion in [promotion, None, Some(Role::Queen), Some(Role::King)]
                            {
                                written.push(San::Normal {
                                    role,
                                    file,
                                    rank,
                                    capture,
                                    to,
                                    promotion,
                                });
                            }
                        }
                    }
                }
                for san in written {
                    if let Some(found) = chess_unique(pos, san, pos.is_check()) {
                        unique += 1;
                        assert_eq!(Ok(found), resolve_written(san, pos), "{san} in {pos:?}");
                    }
                }
            }
        }
        assert!(
            checks > 500 && mates > 10 && en_passant > 50 && unique > 10_000,
            "{checks} checks, {mates} mates, {en_passant} en passant, {unique} unique"
        );
    }

    /// A game nested 20,000 variations deep (each line two moves, the
    /// second replaced by the next line) reads and replays on a test
    /// thread's 2 MiB stack, as on the import's workers: nothing recurses
    /// per level, and dropping it does not either.
    #[test]
    fn a_game_nested_twenty_thousand_deep_replays_on_a_small_stack() {
        let depth = 20_000;
        let knights = ["Nf3", "Nf6", "Ng1", "Ng8"];
        let pawn = |ply: usize| if ply.is_multiple_of(2) { "a3" } else { "a6" };
        let mut pgn = String::from("Nf3 a6");
        for level in 1..=depth {
            let _ = write!(pgn, " ( {} {}", knights[level % 4], pawn(level + 1));
        }
        pgn.push_str(&" )".repeat(depth));
        pgn.push_str(" *\n");
        let game = replay_pgn(&pgn).expect("legal at every level");
        let [(2, notes)] = &game.notes.0[..] else {
            panic!("one ply with notes: {:?}", &game.notes.0[..1]);
        };
        assert!(
            notes.starts_with("( 1... Nf6 2. a3 ( 2. Ng1 a6 ( 2... Ng8 3. a3 ( 3. Nf3 a6 ("),
            "{}",
            &notes[..80]
        );
        assert!(notes.ends_with(&" )".repeat(depth)[1..]));
        assert_eq!(notes.matches('(').count(), depth);
    }

    /// NAGs above 255, which pgn-reader reads into a byte, are read in
    /// place through a placeholder no other NAG of the game uses; one past
    /// u32, or with no placeholder left, rejects the game with its reason.
    #[test]
    fn nags_above_a_byte_are_kept_where_written() {
        let game =
            replay_pgn("1. e4 $7 $256 e5 ( $300 1... c5 $01000 ) 2. Nf3 $8 *").expect("legal");
        assert_eq!(
            game.notes.0,
            [
                (1, "$7 $256 $300".to_owned()),
                (2, "( 1... c5 $1000 )".to_owned())
            ]
        );
        assert_eq!(game.plies[2].nag, Some(8));
        let every = (7..=255).fold(String::new(), |mut every, n| {
            let _ = write!(every, "${n} ");
            every
        });
        assert_eq!(
            replay_pgn(&format!("1. e4 {every}e5 $256 *")).map(|g| g.notes),
            Err(RejectReason::Syntax(
                "NAGs above 255 in a game that also uses every NAG from 7 to 255: pgnload \
                 cannot tell them apart"
                    .to_owned()
            ))
        );
        assert_eq!(
            replay_pgn("1. e4 $4294967295 e5 $4294967296 *").map(|g| g.notes),
            Err(RejectReason::Syntax(
                "NAG $4294967296 is above 4294967295, the largest pgnload keeps".to_owned()
            ))
        );
    }

    #[test]
    fn positions_include_the_start_and_every_ply() {
        let game = replay_pgn("1. e4 e5 2. Nf3 *").expect("legal");
        assert_eq!(game.positions.len(), 4);
        assert_eq!(
            game.positions.fen(0),
            "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -"
        );
        assert_eq!(
            game.positions.fen(3),
            "rnbqkbnr/pppp1ppp/8/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R b KQkq -"
        );
        assert_eq!(game.positions.digest(3), fen_digest(game.positions.fen(3)));
        assert_eq!(game.plies[2].uci.as_str(), "g1f3");
        assert_eq!(game.plies[2].san.as_str(), "Nf3");
    }

    #[test]
    fn lenient_resolution_matches_python_chess() {
        // Missing capture marker, UCI-style movetext, null move.
        let game = replay_pgn("1. e4 d5 2. ed5 Qxd5 3. b1c3 Qa5 4. Z0 Nf6 *").expect("lenient");
        assert_eq!(game.plies[2].san.as_str(), "exd5");
        assert_eq!(game.plies[4].uci.as_str(), "b1c3");
        assert_eq!(game.plies[6].uci.as_str(), "0000");
        assert!(game.positions.fen(7).contains(" b "));
    }

    #[test]
    fn a_null_move_while_in_check_is_rejected_by_name() {
        for null in ["--", "Z0"] {
            let pgn = format!("1. e4 f5 2. Qh5+ {null} 3. Qe2 *");
            match replay_pgn(&pgn) {
                Err(RejectReason::IllegalMove { ply: 4, reason, .. }) => {
                    assert!(reason.starts_with("null move while in check"), "{reason}");
                }
                other => panic!("{pgn}: {other:?}"),
            }
        }
        // Out of check it is a null move like any other.
        let game = replay_pgn("1. e4 f5 2. Qh5+ g6 3. -- Nf6 *").expect("legal");
        assert_eq!(game.plies[4].uci.as_str(), "0000");
    }

    #[test]
    fn illegal_moves_and_bad_fens_reject_the_game() {
        assert!(matches!(
            replay_pgn("1. e4 e5 2. Ke3 *"),
            Err(RejectReason::IllegalMove { ply: 3, .. })
        ));
        assert!(matches!(
            replay_pgn("[FEN \"?\"]\n\n1. e4 *"),
            Err(RejectReason::BadFen(_))
        ));
        assert!(matches!(
            replay_pgn("[Variant \"Suicide\"]\n\n1. e4 *"),
            Err(RejectReason::UnsupportedVariant(_))
        ));
    }

    #[test]
    fn move_codes_round_trip_to_uci() {
        let game = replay_pgn(
            "[Variant \"Crazyhouse\"]\n\n1. e4 d5 2. exd5 Qxd5 3. Nf3 Qe4+ 4. Be2 Qxe2+ 5. Qxe2 P@e4 6. O-O *",
        )
        .expect("legal");
        for ply in &game.plies {
            assert_eq!(decode_move_uci(ply.code, false), ply.uci.as_str());
        }
        let game = replay_pgn("[Variant \"Chess960\"]\n[FEN \"rk5r/8/8/8/8/8/8/RK5R w HAha - 0 1\"]\n\n1. O-O O-O-O *")
            .expect("legal");
        assert_eq!(game.variant, GameVariant::Chess960);
        let ucis: Vec<_> = game.plies.iter().map(|p| p.uci.as_str()).collect();
        assert_eq!(ucis, ["b1h1", "b8a8"]);
        assert_eq!(MoveText::from_display("Qh4xe1#").len(), 7);
        for ply in &game.plies {
            assert_eq!(decode_move_uci(ply.code, true), ply.uci.as_str());
        }
    }

    #[test]
    fn racing_kings_with_a_standard_start_fen_uses_the_variant_start() {
        let game = replay_pgn(&format!(
            "[Variant \"Racing Kings\"]\n[FEN \"{STANDARD_START}\"]\n\n1. Kh3 *"
        ))
        .expect("lichess defect tolerated");
        assert_eq!(game.start_fen, None);
        assert_eq!(game.positions.fen(0), "8/8/8/8/8/8/krbnNBRK/qrbnNBRQ w - -");
    }

    /// Every stored field that tells two games apart changes the content
    /// digest: the same game with one tag changed is another game (the
    /// legacy digest merged many of these). Tag order does not count.
    #[test]
    fn every_stored_field_distinguishes_the_content_digest() {
        let base = "[Event \"E\"]\n[Site \"S\"]\n[Date \"2024.01.02\"]\n[Round \"1\"]\n[White \"W\"]\n[Black \"B\"]\n[Result \"1-0\"]\n";
        let moves = "\n1. e4 e5 2. Qh5 Nc6 1-0\n\n";
        let digest = |extra: &str| {
            let game = replay_pgn(&format!("{base}{extra}{moves}")).expect("replays");
            (game.external_id(), game.legacy_external_id())
        };
        let (plain, plain_legacy) = digest("");
        assert!(plain.starts_with(DIGEST_VERSION), "{plain}");
        assert_eq!(plain.len(), DIGEST_VERSION.len() + 32);
        assert!(!plain_legacy.starts_with(DIGEST_VERSION));
        let mut seen = std::collections::HashSet::from([plain.clone()]);
        for extra in [
            "[WhiteElo \"1500\"]\n",
            "[WhiteElo \"2500\"]\n",
            "[BlackElo \"1500\"]\n",
            "[WhiteRatingDiff \"+5\"]\n",
            "[BlackRatingDiff \"-5\"]\n",
            "[Variant \"King of the Hill\"]\n",
            "[Termination \"Time forfeit\"]\n",
            "[Opening \"King's Pawn\"]\n",
            "[WhiteElo \"2700?\"]\n",
            "[Annotator \"x\"]\n",
            "[Annotator \"x=1:\"]\n",
            "[TimeControl \"300+3\"]\n",
        ] {
            let (id, legacy) = digest(extra);
            assert!(seen.insert(id), "{extra} did not change the digest");
            if !extra.contains("Annotator") && !extra.contains("TimeControl") {
                assert_eq!(
                    legacy, plain_legacy,
                    "{extra}: the legacy digest left it out"
                );
            }
        }
        let other_result = replay_pgn(&format!("{}{moves}", base.replace("1-0", "0-1")))
            .expect("replays")
            .external_id();
        assert!(seen.insert(other_result));
        // The same tags in another order: the same game.
        let reordered = "[Round \"1\"]\n[Event \"E\"]\n[Site \"S\"]\n[Date \"2024.01.02\"]\n[Black \"B\"]\n[White \"W\"]\n[Result \"1-0\"]\n";
        let game = replay_pgn(&format!("{reordered}{moves}")).expect("replays");
        assert_eq!(game.external_id(), plain);
    }
}

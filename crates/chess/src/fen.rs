//! Normalized FEN: the position key shared with the historical Python importer.
//!
//! The normalized FEN is the first four fields of what python-chess 1.11
//! `board.fen()` writes: piece placement (with crazyhouse pockets and `~`
//! promotion marks exactly as python-chess writes them), side to move,
//! castling rights in X-FEN (python-chess `castling_xfen()`), and an en
//! passant square only when an en passant capture is legal. Halfmove and
//! fullmove clocks, and the three-check counters (python-chess's fifth
//! field), are not part of it.
//!
//! FEN formatting is a large share of the per-position cost of an import,
//! so the replay loop writes each FEN with `write_fen` straight into the
//! game's text (no allocation, copy or UTF-8 check per position);
//! [`write_normalized_fen`] and [`normalized_fen`] serve the cold paths.
//!
//! It must not change a byte of what python-chess writes: the normalized
//! FEN is the stored key of `positions`, and any difference would split the
//! table in two.

use shakmaty::{
    Bitboard, ByColor, ByRole, CastlingMode, Color, Position, PositionError, Role, Square,
    fen::Fen,
    variant::{Variant, VariantPosition},
};

/// Writes the normalized FEN of `pos` into `out` (which is cleared first).
///
/// # Panics
///
/// Never: the FEN is ASCII by construction (checked, not assumed, as it
/// becomes a `str`).
pub fn write_normalized_fen<P: Position>(pos: &P, out: &mut String) {
    let mut bytes = [0; FEN_CAP];
    let len = write_fen(pos, &mut bytes);
    out.clear();
    out.push_str(std::str::from_utf8(&bytes[..len]).expect(
        "write_fen writes only ASCII: byte literals and shakmaty's piece, file and rank chars",
    ));
}

/// The normalized FEN of `pos` as a fresh string (convenience for cold paths).
pub fn normalized_fen<P: Position>(pos: &P) -> String {
    let mut out = String::with_capacity(90);
    write_normalized_fen(pos, &mut out);
    out
}

/// Room for one normalized FEN. The longest fits with room to spare: at
/// most 64 pieces counting a crazyhouse pocket (shakmaty refuses more), a
/// `~` after each piece on the board, 7 slashes, 2 pocket brackets, and at
/// most 12 bytes of other fields. Being exactly `u8::MAX + 1` lets a `u8`
/// length index it without bounds checks.
pub(crate) const FEN_CAP: usize = 256;

/// Writes the normalized FEN of `pos` (ASCII) at the start of `out` and
/// returns its length. The hot path: the replay loop writes each position
/// straight into the game's text with it, so the length lives in a register
/// and no byte is copied or validated twice.
#[inline]
pub(crate) fn write_fen<P: Position>(pos: &P, out: &mut [u8; FEN_CAP]) -> usize {
    let mut len = write_placement(pos, out);
    put(out, &mut len, b' ');
    put(
        out,
        &mut len,
        match pos.turn() {
            Color::White => b'w',
            Color::Black => b'b',
        },
    );
    put(out, &mut len, b' ');
    write_castling_xfen(pos, out, &mut len);
    put(out, &mut len, b' ');
    // Only a double push leaves an en passant square behind; skip the
    // legality check (a move generation) for every other position.
    match pos.maybe_ep_square().and_then(|_| pos.legal_ep_square()) {
        Some(sq) => {
            put(out, &mut len, sq.file().char() as u8);
            put(out, &mut len, sq.rank().char() as u8);
        }
        None => put(out, &mut len, b'-'),
    }
    usize::from(len)
}

#[inline]
fn put(out: &mut [u8; FEN_CAP], len: &mut u8, byte: u8) {
    out[usize::from(*len)] = byte;
    *len = len.wrapping_add(1);
}

/// `SPREAD[m]` has byte `f` set to 1 when bit `f` of `m` is set: one rank
/// of a bitboard widened to one byte per file.
const SPREAD: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut m = 0;
    while m < 256 {
        let mut f = 0;
        while f < 8 {
            if m & (1 << f) != 0 {
                table[m] |= 1 << (8 * f);
            }
            f += 1;
        }
        m += 1;
    }
    table
};

/// The FEN text of one rank by its occupancy `m`, pieces left out:
/// `digits` holds the empty-square digits in place (zero bytes where the
/// pieces go), `len` its length, and `slot[f]` where the piece on file `f`
/// goes (`len`, a scratch byte the next write overwrites, for an empty file).
struct RankLayout {
    digits: [u64; 256],
    slot: [[u8; 8]; 256],
    len: [u8; 256],
}

const RANK_LAYOUT: RankLayout = {
    let mut layout = RankLayout {
        digits: [0; 256],
        slot: [[0; 8]; 256],
        len: [0; 256],
    };
    let mut m = 0;
    while m < 256 {
        let mut len = 0u8;
        let mut gap = 0u8;
        let mut f = 0;
        while f < 8 {
            if m & (1 << f) != 0 {
                if gap > 0 {
                    layout.digits[m] |= ((b'0' + gap) as u64) << (8 * len);
                    len += 1;
                    gap = 0;
                }
                layout.slot[m][f] = len;
                len += 1;
            } else {
                gap += 1;
            }
            f += 1;
        }
        if gap > 0 {
            layout.digits[m] |= ((b'0' + gap) as u64) << (8 * len);
            len += 1;
        }
        let mut f = 0;
        while f < 8 {
            if m & (1 << f) == 0 {
                layout.slot[m][f] = len;
            }
            f += 1;
        }
        layout.len[m] = len;
        m += 1;
    }
    layout
};

/// Piece placement, rank by rank without data-dependent branches (they
/// mispredicted on almost every position): the rank's letters are computed
/// for all eight files at once, one byte per file, and dropped into the
/// rank's precomputed layout. Returns the length written.
#[inline]
fn write_placement<P: Position>(pos: &P, out: &mut [u8; FEN_CAP]) -> u8 {
    let board = pos.board();
    let roles = [
        (board.pawns().0, b'p'),
        (board.knights().0, b'n'),
        (board.bishops().0, b'b'),
        (board.rooks().0, b'r'),
        (board.queens().0, b'q'),
        (board.kings().0, b'k'),
    ];
    let white = board.white().0;
    let occupied = board.occupied().0;
    let promoted = pos.promoted().0;
    let mut len = 0u8;
    for rank in (0..8u32).rev() {
        let byte = |bb: u64| usize::from(bb.to_le_bytes()[rank as usize]);
        // One letter per file (lowercase, minus 0x20 for white pieces:
        // uppercase); a zero byte on an empty square. No byte carries.
        let mut letters = 0u64;
        for (bb, letter) in roles {
            letters += SPREAD[byte(bb)] * u64::from(letter);
        }
        letters -= SPREAD[byte(white)] * 0x20;
        let letters = letters.to_le_bytes();
        let m = byte(occupied);
        let marks = byte(promoted);
        if marks == 0 {
            // A 16-byte window: the layout's 8 bytes plus the scratch byte
            // (the placement never reaches past byte 71, so it always fits).
            let at = usize::from(len);
            if let Some(window) = out.get_mut(at..at + 16) {
                window[..8].copy_from_slice(&RANK_LAYOUT.digits[m].to_le_bytes());
                for (slot, letter) in RANK_LAYOUT.slot[m].iter().zip(letters) {
                    window[usize::from(*slot) & 15] = letter;
                }
            }
            len = len.wrapping_add(RANK_LAYOUT.len[m]);
        } else {
            write_marked_rank(out, &mut len, letters, m, marks);
        }
        if rank != 0 {
            put(out, &mut len, b'/');
        }
    }
    if let Some(pockets) = pos.pockets() {
        write_pockets(pockets, out, &mut len);
    }
    len
}

/// A rank holding Crazyhouse promoted pieces (`marks`, one bit per file,
/// among the occupied files `m`): a `~` after each, file by file.
fn write_marked_rank(
    out: &mut [u8; FEN_CAP],
    len: &mut u8,
    letters: [u8; 8],
    m: usize,
    marks: usize,
) {
    let mut gap = 0u8;
    for (file, letter) in letters.into_iter().enumerate() {
        if m & (1 << file) == 0 {
            gap += 1;
            continue;
        }
        if gap > 0 {
            put(out, len, b'0' + gap);
            gap = 0;
        }
        put(out, len, letter);
        if marks & (1 << file) != 0 {
            put(out, len, b'~');
        }
    }
    if gap > 0 {
        put(out, len, b'0' + gap);
    }
}

/// Crazyhouse pockets: python-chess's str(pocket) lists K, Q, R, B, N, P
/// (reversed `PIECE_TYPES`); white's pocket upper-cased first, then black's.
fn write_pockets(pockets: &ByColor<ByRole<u8>>, out: &mut [u8; FEN_CAP], len: &mut u8) {
    put(out, len, b'[');
    for color in [Color::White, Color::Black] {
        let pocket = pockets.get(color);
        for role in Role::ALL.into_iter().rev() {
            let symbol = match color {
                Color::White => role.upper_char(),
                Color::Black => role.char(),
            } as u8;
            for _ in 0..*pocket.get(role) {
                put(out, len, symbol);
            }
        }
    }
    put(out, len, b']');
}

/// python-chess `castling_xfen()`: per color (white first), castling rooks
/// from the h-side to the a-side; `K`/`Q` when the rook is the outermost rook
/// on its side of the king, else the rook's file letter.
#[inline]
fn write_castling_xfen<P: Position>(pos: &P, out: &mut [u8; FEN_CAP], len: &mut u8) {
    let rights = pos.castles().castling_rights();
    let before = *len;
    if rights.any() {
        let board = pos.board();
        for color in [Color::White, Color::Black] {
            let backrank = Bitboard::from_rank(color.backrank());
            let ours = rights & backrank;
            if ours.is_empty() {
                continue;
            }
            let Some(king) = board.king_of(color) else {
                continue;
            };
            let case = match color {
                Color::White => 0,
                Color::Black => b'a' - b'A',
            };
            let rooks_on_backrank = (board.rooks() & board.by_color(color) & backrank).0;
            for rook in ours.into_iter().rev() {
                // Other back-rank rooks further out: on one rank, lower
                // squares are lower files.
                let bit = 1u64 << u32::from(rook);
                let a_side = rook.file() < king.file();
                let outer_rooks = if a_side {
                    rooks_on_backrank & (bit - 1)
                } else {
                    rooks_on_backrank & !(bit - 1) & !bit
                };
                let letter = if outer_rooks != 0 {
                    rook.file().upper_char() as u8
                } else if a_side {
                    b'Q'
                } else {
                    b'K'
                };
                put(out, len, letter + case);
            }
        }
    }
    if *len == before {
        put(out, len, b'-');
    }
}

/// The four fields of a normalized FEN, as stored in the split columns of
/// `positions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenParts<'a> {
    /// Piece placement, including crazyhouse pockets.
    pub piece_placement: &'a str,
    /// `w` or `b`.
    pub active_color: &'a str,
    /// X-FEN castling rights or `-`.
    pub castling: &'a str,
    /// Legal en passant target square or `-`.
    pub en_passant: &'a str,
}

/// Splits a normalized FEN into its four fields. `None` unless it has exactly
/// four non-empty fields separated by single spaces (the stored form).
pub fn split_normalized(fen: &str) -> Option<FenParts<'_>> {
    let mut fields = fen.split(' ');
    let parts = FenParts {
        piece_placement: fields.next()?,
        active_color: fields.next()?,
        castling: fields.next()?,
        en_passant: fields.next()?,
    };
    let all_present = [
        parts.piece_placement,
        parts.active_color,
        parts.castling,
        parts.en_passant,
    ]
    .iter()
    .all(|f| !f.is_empty());
    (fields.next().is_none() && all_present).then_some(parts)
}

/// The seeds' string normalizer for raw FEN text: the first four
/// whitespace-separated fields, missing ones padded with `-`, joined by single
/// spaces. It does not parse the position; see [`canonical_fen`] for that.
pub fn normalize_fen_text(raw: &str) -> String {
    let mut fields = raw.split_whitespace();
    let mut out = String::with_capacity(raw.len().min(128));
    for i in 0..4 {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(fields.next().unwrap_or("-"));
    }
    out
}

/// Why a FEN could not be turned into a position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenError {
    /// The text is not FEN syntax.
    #[error("unparsable FEN {fen:?}: {reason}")]
    Syntax {
        /// The offending text.
        fen: String,
        /// shakmaty's description.
        reason: String,
    },
    /// The text parses but describes an impossible position.
    #[error("impossible position {fen:?}: {reason}")]
    Impossible {
        /// The offending text.
        fen: String,
        /// shakmaty's description.
        reason: String,
    },
}

/// Sets up a position from FEN text the way python-chess reads a `[FEN]` tag:
/// invalid castling rights and en passant squares are dropped silently (as
/// python-chess's `clean_castling_rights` and legal-en-passant output do),
/// too much material and impossible checks are kept, anything else
/// impossible (no king, the side not to move in check) is an error. Chess960 castling is used when
/// `chess960` is set or when the castling rights need it.
pub fn position_from_fen(
    fen: &str,
    variant: Variant,
    chess960: bool,
) -> Result<VariantPosition, FenError> {
    let syntax = |reason: String| FenError::Syntax {
        fen: fen.to_owned(),
        reason,
    };
    // shakmaty refuses some castling fields python-chess accepts (a `K`
    // without a rook on that side); parse the rest with shakmaty and the
    // castling field with python-chess's own rules.
    let mut fields: Vec<&str> = fen.split_whitespace().collect();
    let castling = fields.get(2).copied();
    if fields.len() > 2 {
        fields[2] = "-";
    }
    let checks = fields.get(4).and_then(|field| at_most_three_checks(field));
    if let Some(checks) = &checks {
        fields[4] = checks;
    }
    let parsed = Fen::from_ascii(fields.join(" ").as_bytes()).map_err(|e| syntax(e.to_string()))?;
    let mut setup = parsed.into_setup();
    // python-chess reads pockets only for crazyhouse; shakmaty would drop
    // them silently for other variants.
    if setup.pockets.is_some() && variant != Variant::Crazyhouse {
        return Err(syntax(
            "a pocket in the FEN of a variant without pockets".into(),
        ));
    }
    setup.castling_rights = python_castling_rights(&setup.board, castling.unwrap_or("-"))
        .ok_or_else(|| {
            syntax(format!(
                "invalid castling field {:?}",
                castling.unwrap_or("-")
            ))
        })?;
    let mode = if chess960 {
        CastlingMode::Chess960
    } else {
        CastlingMode::detect(&setup)
    };
    // python-chess plays from positions it does not call valid: those of
    // them shakmaty can hold (too much material, impossible checks) are
    // kept; each `ignore_` drops its kind from the error's remaining set.
    VariantPosition::from_setup(variant, setup, mode)
        .or_else(PositionError::ignore_invalid_castling_rights)
        .or_else(PositionError::ignore_invalid_ep_square)
        .or_else(PositionError::ignore_too_much_material)
        .or_else(PositionError::ignore_impossible_check)
        .map_err(|e| FenError::Impossible {
            fen: fen.to_owned(),
            reason: e.to_string(),
        })
}

/// Three-check counters in the `5+5` form above 3 (remaining checks, as
/// python-chess reads them) brought down to 3, the most shakmaty holds:
/// the same game until a side gives its third check. `None` when the field
/// needs no change.
fn at_most_three_checks(field: &str) -> Option<String> {
    let (white, black) = field
        .split_once('+')
        .filter(|(white, _)| !white.is_empty())?;
    let (white, black) = (white.parse::<u32>().ok()?, black.parse::<u32>().ok()?);
    (white > 3 || black > 3).then(|| format!("{}+{}", white.min(3), black.min(3)))
}

/// python-chess `Board.set_castling_fen`: `K`/`Q` pick the outermost rook
/// on that side of the king (or the h/a corner when there is none: an
/// invalid right, cleaned away later like python-chess's
/// `clean_castling_rights`); file letters pick the back-rank square of that
/// file. `None` when the field does not match python-chess's
/// `^(-|[KQA-H]{0,4}[kqa-h]{0,4})$`.
fn python_castling_rights(board: &shakmaty::Board, field: &str) -> Option<Bitboard> {
    if field == "-" {
        return Some(Bitboard::EMPTY);
    }
    let upper = field
        .bytes()
        .take_while(|b| matches!(b, b'K' | b'Q' | b'A'..=b'H'))
        .count();
    let lower = field[upper..]
        .bytes()
        .take_while(|b| matches!(b, b'k' | b'q' | b'a'..=b'h'))
        .count();
    if upper > 4 || lower > 4 || upper + lower != field.len() {
        return None;
    }
    let mut rights = Bitboard::EMPTY;
    for flag in field.bytes() {
        let color = if flag.is_ascii_uppercase() {
            Color::White
        } else {
            Color::Black
        };
        let backrank = Bitboard::from_rank(color.backrank());
        let rooks = board.rooks() & board.by_color(color) & backrank;
        let king = board.king_of(color);
        let corner =
            |file: shakmaty::File| Bitboard::from(Square::from_coords(file, color.backrank()));
        rights |= match flag.to_ascii_lowercase() {
            b'q' => match (rooks.first(), king) {
                (Some(rook), Some(king)) if rook < king => Bitboard::from(rook),
                (None, Some(_)) => Bitboard::EMPTY,
                _ => corner(shakmaty::File::A),
            },
            b'k' => match (rooks.last(), king) {
                (Some(rook), Some(king)) if king < rook => Bitboard::from(rook),
                _ => corner(shakmaty::File::H),
            },
            file => corner(shakmaty::File::new(u32::from(file - b'a'))),
        };
    }
    Some(rights)
}

/// Parses a FEN and re-emits it as python-chess would (`pgnload hash --canonical`).
pub fn canonical_fen(fen: &str, variant: Variant, chess960: bool) -> Result<String, FenError> {
    position_from_fen(fen, variant, chess960).map(|pos| normalized_fen(&pos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shakmaty::{Chess, san::San};

    fn play(mut pos: VariantPosition, sans: &[&str]) -> VariantPosition {
        for san in sans {
            let m = san
                .parse::<San>()
                .expect("test SAN is valid syntax")
                .to_move(&pos)
                .expect("test move is legal");
            pos = pos.play(m).expect("legal move plays");
        }
        pos
    }

    #[test]
    fn start_position_is_four_fields() {
        assert_eq!(
            normalized_fen(&Chess::default()),
            "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -"
        );
    }

    #[test]
    fn en_passant_square_only_when_capturable() {
        let pos = play(VariantPosition::new(Variant::Chess), &["e4"]);
        assert!(normalized_fen(&pos).ends_with(" b KQkq -"));
        let pos = play(
            VariantPosition::new(Variant::Chess),
            &["e4", "a6", "e5", "d5"],
        );
        assert!(
            normalized_fen(&pos).ends_with(" w KQkq d6"),
            "{}",
            normalized_fen(&pos)
        );
    }

    #[test]
    fn chess960_castling_uses_file_letters_when_rook_is_not_outermost() {
        // Rooks on b1 and g1, plus another white rook on h1 outside the g1 castling rook.
        let pos = position_from_fen(
            "1r2k1rr/8/8/8/8/8/8/1R2K1RR w GBgb - 0 1",
            Variant::Chess,
            true,
        )
        .expect("valid 960 position");
        assert_eq!(normalized_fen(&pos), "1r2k1rr/8/8/8/8/8/8/1R2K1RR w GQgq -");
    }

    #[test]
    fn crazyhouse_pockets_and_promoted_pieces_follow_python_chess() {
        let pos = position_from_fen(
            "r1bk3r/p1p2pQ~p/1pn5/3N4/2B1P3/8/PPP2PPP/R4RK1/QNPbp w - - 0 1",
            Variant::Crazyhouse,
            false,
        );
        // shakmaty accepts the slash-pocket form; python-chess writes brackets.
        let fen = normalized_fen(&pos.expect("valid crazyhouse position"));
        assert_eq!(
            fen,
            "r1bk3r/p1p2pQ~p/1pn5/3N4/2B1P3/8/PPP2PPP/R4RK1[QNPbp] w - -"
        );
    }

    #[test]
    fn castling_fields_are_read_like_python_chess() {
        // `K` with no rook on the king side: python-chess cleans it away.
        let pos = position_from_fen(
            "bbqnnrkr/pppppppp/8/8/8/8/PPPPPPPP/BBQNNRK1 w KQkq - 0 1",
            Variant::Chess,
            true,
        )
        .expect("python-chess accepts it");
        assert_eq!(
            normalized_fen(&pos),
            "bbqnnrkr/pppppppp/8/8/8/8/PPPPPPPP/BBQNNRK1 w Qkq -"
        );
        // Not python-chess castling syntax.
        assert!(
            position_from_fen("4k3/8/8/8/8/8/8/4K3 w KQkqA - 0 1", Variant::Chess, false).is_err()
        );
        assert!(
            position_from_fen("4k3/8/8/8/8/8/8/4K3 w KX - 0 1", Variant::Chess, false).is_err()
        );
    }

    #[test]
    fn string_normalizer_pads_and_truncates() {
        assert_eq!(
            normalize_fen_text("8/8/8/8/8/8/8/8 w"),
            "8/8/8/8/8/8/8/8 w - -"
        );
        assert_eq!(normalize_fen_text("  a  b c d e f "), "a b c d");
        assert_eq!(normalize_fen_text(""), "- - - -");
    }

    #[test]
    fn split_requires_exactly_four_single_spaced_fields() {
        let parts = split_normalized("8/8/8/8/8/8/8/8 w - -").expect("four fields");
        assert_eq!(parts.active_color, "w");
        assert!(split_normalized("8/8/8/8/8/8/8/8 w - - 0").is_none());
        assert!(split_normalized("8/8/8/8/8/8/8/8  w - -").is_none());
        assert!(split_normalized("8/8/8/8/8/8/8/8 w -").is_none());
    }

    #[test]
    fn canonical_drops_an_uncapturable_en_passant_square_and_bad_castling() {
        assert_eq!(
            canonical_fen(
                "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq e3 0 1",
                Variant::Chess,
                false
            )
            .expect("valid"),
            "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq -"
        );
        assert_eq!(
            canonical_fen("4k3/8/8/8/8/8/8/4K3 w KQkq - 0 1", Variant::Chess, false)
                .expect("valid"),
            "4k3/8/8/8/8/8/8/4K3 w - -"
        );
        assert!(canonical_fen("8/8/8/8/8/8/8/8 w - - 0 1", Variant::Chess, false).is_err());
        assert!(canonical_fen("not a fen", Variant::Chess, false).is_err());
    }
}

//! The storage move encoding: two bytes per move, for `games.moves`.
//!
//! It exists apart from replay because it is a storage format, read back by
//! `verify` (and by the exports to come) without replaying anything; replay
//! only produces the codes. It must stay pure (no I/O, no database): the
//! layout of a code is part of the schema's contract, so a change here is a
//! migration, never an edit.

use shakmaty::{Move, Role, Square};

use crate::replay::GameRecord;

impl GameRecord {
    /// `games.moves`: two bytes per ply, big-endian.
    pub fn encoded_moves(&self) -> Vec<u8> {
        self.plies
            .iter()
            .flat_map(|p| p.code.to_be_bytes())
            .collect()
    }
}

/// Role codes of the move encoding.
fn role_code(role: Role) -> u16 {
    match role {
        Role::Pawn => 1,
        Role::Knight => 2,
        Role::Bishop => 3,
        Role::Rook => 4,
        Role::Queen => 5,
        Role::King => 6,
    }
}

/// Marks castling in the promotion field: `to` is then the rook's square.
const CASTLE_CODE: u16 = 7;
/// Marks a crazyhouse drop: the role field holds the dropped piece, from = to.
const DROP_FLAG: u16 = 1 << 15;

/// Compact 2-byte move encoding for `games.moves` (after the Simple Chess
/// Database / ocgdb "Moves2" layout):
///
/// | bits  | meaning                                                       |
/// |-------|---------------------------------------------------------------|
/// | 0–5   | from square (a1 = 0 … h8 = 63)                                |
/// | 6–11  | to square (the rook's square for castling, in every variant)  |
/// | 12–14 | 0 none; 2–6 promotion to N, B, R, Q, K (antichess); 7 castling; with bit 15: dropped role 1–5 (P…Q) |
/// | 15    | crazyhouse drop (from = to = target square)                   |
///
/// A null move is `0x0000` (a normal move never has from = to).
pub fn encode_move(m: Move) -> u16 {
    let sq = |s: Square| u16::from(u8::from(s));
    match m {
        Move::Normal {
            from,
            to,
            promotion,
            ..
        } => sq(from) | sq(to) << 6 | promotion.map_or(0, role_code) << 12,
        Move::EnPassant { from, to } => sq(from) | sq(to) << 6,
        Move::Castle { king, rook } => sq(king) | sq(rook) << 6 | CASTLE_CODE << 12,
        Move::Put { role, to } => DROP_FLAG | sq(to) | sq(to) << 6 | role_code(role) << 12,
    }
}

/// Decodes one [`encode_move`] code back to UCI. `chess960` selects the
/// castling notation (king-to-rook) as in `moves.uci`.
pub fn decode_move_uci(code: u16, chess960: bool) -> String {
    if code == 0 {
        return "0000".to_owned();
    }
    let square = |bits: u16| Square::new(u32::from(bits & 63));
    let from = square(code);
    let to = square(code >> 6);
    let field = (code >> 12) & 7;
    let role = |c: u16| match c {
        1 => Some(Role::Pawn),
        2 => Some(Role::Knight),
        3 => Some(Role::Bishop),
        4 => Some(Role::Rook),
        5 => Some(Role::Queen),
        6 => Some(Role::King),
        _ => None,
    };
    if code & DROP_FLAG != 0 {
        let piece = role(field).map_or('?', Role::upper_char);
        return format!("{piece}@{to}");
    }
    if field == CASTLE_CODE {
        let king_to = if chess960 {
            to
        } else {
            let file = if to.file() > from.file() {
                shakmaty::File::G
            } else {
                shakmaty::File::C
            };
            Square::from_coords(file, from.rank())
        };
        return format!("{from}{king_to}");
    }
    match role(field) {
        Some(promotion) => format!("{from}{to}{}", promotion.char()),
        None => format!("{from}{to}"),
    }
}

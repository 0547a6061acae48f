//! A stored game as PGN: what `game show`, `games --format pgn` and
//! `export` write.
//!
//! The text is chosen so that importing it gives back the same rows: the
//! same natural key (`source`, `external_id`: the Lichess id, or the
//! content digest of [`crate::chess::replay::GameRecord::external_id`],
//! which covers every tag in the form its column or `games.tags` holds
//! it, the result, the variant, the start position and the moves), the
//! same columns, the same `tags` and the same moves with their clocks,
//! evaluations and NAGs. Tags come as they were read, each once: the
//! Seven Tag Roster first, then the others in the order read
//! ([`crate::chess::headers`]).

use std::fmt::Write as _;

use crate::{
    chess::{
        annotation::{digits, tokens, typed_comment},
        headers::written_tags,
        model::Eval,
    },
    error::Error,
    query::games::{StoredGame, StoredMove},
};

/// Longest movetext line written (PGN allows 255; 80 is the export norm).
const LINE: usize = 80;

/// The tags of `game`, in the order written: its columns' tags, replaced
/// and ordered by what `games.tags` kept of the tags as read
/// ([`written_tags`]), so each tag comes once, with its value as read.
pub fn tags(game: &StoredGame) -> Result<Vec<(String, String)>, Error> {
    written_tags(&game.columns(), &game.tags).map_err(|e| Error::Unwritable {
        game: game.id,
        reason: e.to_string(),
    })
}

/// `value` between quotes, with `\` and `"` escaped (pgn-reader unescapes
/// any `\x` to `x`).
fn quoted(value: &str, out: &mut String) {
    out.push('"');
    for c in value.chars() {
        if c == '\\' || c == '"' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// The side to move and move number of the start position: from the FEN
/// tag's second and sixth fields, else White at move 1.
fn first_move(start_fen: Option<&str>) -> (bool, u32) {
    let Some(fen) = start_fen else {
        return (true, 1);
    };
    let fields: Vec<&str> = fen.split_whitespace().collect();
    let white = fields.get(1) != Some(&"b");
    let number = fields
        .get(5)
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1);
    (white, number)
}

/// Appends to `out` the comment PGN writes after move `ply` (0-based) of
/// game `game_id` from its typed columns: its evaluation and clock as
/// `[%eval …] [%clk …]` ([`typed_comment`]), nothing when it has neither.
/// One function, so that PGN and the exchange formats store the same text
/// (and the reader keeps no comment this reproduces).
pub fn write_move_comment(
    game_id: i64,
    ply: usize,
    m: &StoredMove,
    out: &mut String,
) -> Result<(), Error> {
    let eval = match (m.eval_mate, m.eval_cp) {
        (Some(mate), _) => Some(Eval::MateIn(mate)),
        (None, Some(cp)) => Some(Eval::Centipawns(cp)),
        (None, None) => None,
    };
    typed_comment(eval, m.clock_ms, out).ok_or_else(|| Error::Unwritable {
        game: game_id,
        reason: format!(
            "negative clock after ply {}: {} ms",
            ply + 1,
            m.clock_ms.unwrap_or_default()
        ),
    })
}

/// [`write_move_comment`] as a string of its own (empty: no comment).
pub fn move_comment(game_id: i64, ply: usize, m: &StoredMove) -> Result<String, Error> {
    let mut comment = String::new();
    write_move_comment(game_id, ply, m, &mut comment)?;
    Ok(comment)
}

/// Movetext being written into a PGN text: tokens separated by one space,
/// a new line before a token that would pass [`LINE`] columns. Tokens are
/// appended straight to the output (no token list, no per-token string),
/// since export formats every move of every game.
struct Movetext<'a> {
    out: &'a mut String,
    /// Columns used on the current line.
    line: usize,
}

impl Movetext<'_> {
    /// Appends `token` after a space, or on a new line if it would not fit.
    fn token(&mut self, token: &str) {
        if self.line > 0 && self.line + 1 + token.len() > LINE {
            self.out.push('\n');
            self.line = 0;
        } else if self.line > 0 {
            self.out.push(' ');
            self.line += 1;
        }
        self.out.push_str(token);
        self.line += token.len();
    }

    /// Appends a ply's stored notes (see [`crate::chess::annotation::Notes`])
    /// token by token, a comment being one token: never broken across
    /// lines, where python-chess would read the line end into it.
    fn notes(&mut self, notes: &str) {
        for token in tokens(notes) {
            self.token(token);
        }
    }
}

/// Appends `game` with `moves` as one PGN game (tags, blank line,
/// movetext wrapped at 80 columns, blank line) to `out`: each ply's
/// stored notes, where it has some, in place of its typed NAG and comment.
pub fn write_game(game: &StoredGame, moves: &[StoredMove], out: &mut String) -> Result<(), Error> {
    for (name, value) in tags(game)? {
        out.push('[');
        out.push_str(&name);
        out.push(' ');
        quoted(&value, out);
        out.push_str("]\n");
    }
    out.push('\n');
    let (mut white, mut number) = first_move(game.start_fen.as_deref());
    let mut text = Movetext { out, line: 0 };
    // One scratch buffer for the tokens that are formatted (numbers, NAGs,
    // comments): reused, so a game costs a handful of allocations.
    let mut scratch = String::with_capacity(48);
    let formatting = |e: std::fmt::Error| Error::bug_from("formatting movetext", e);
    if let Some(start) = game.notes.at(0) {
        text.notes(start);
    }
    let mut after_comment = true;
    for (ply, m) in moves.iter().enumerate() {
        if white || after_comment {
            scratch.clear();
            digits(number, 1, &mut scratch);
            scratch.push_str(if white { "." } else { "..." });
            text.token(&scratch);
        }
        text.token(&m.san);
        let notes = u32::try_from(ply + 1)
            .ok()
            .and_then(|ply| game.notes.at(ply));
        if let Some(notes) = notes {
            text.notes(notes);
            after_comment = !notes.is_empty();
        } else {
            if let Some(nag) = m.nag {
                scratch.clear();
                write!(scratch, "${nag}").map_err(formatting)?;
                text.token(&scratch);
            }
            scratch.clear();
            scratch.push_str("{ ");
            write_move_comment(game.id, ply, m, &mut scratch)?;
            after_comment = scratch.len() > 2;
            if after_comment {
                scratch.push_str(" }");
                text.token(&scratch);
            }
        }
        if !white {
            number += 1;
        }
        white = !white;
    }
    text.token(game.result_text());
    out.push_str("\n\n");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_black_first_start_numbers_its_first_move_with_dots() {
        assert_eq!(first_move(None), (true, 1));
        assert_eq!(
            first_move(Some("8/8/8/8/8/8/8/K6k b - - 3 41")),
            (false, 41)
        );
        assert_eq!(first_move(Some("8/8/8/8/8/8/8/K6k w - -")), (true, 1));
    }

    #[test]
    fn quotes_and_backslashes_are_escaped() {
        let mut out = String::new();
        quoted(r#"a "b" \c"#, &mut out);
        assert_eq!(out, r#""a \"b\" \\c""#);
    }
}

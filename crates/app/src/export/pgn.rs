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
    chess::headers::written_tags,
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

/// Appends the decimal digits of `n` to `out`, at least `width` (up to
/// ten) of them (zeros in front). By hand rather than through `write!`: export writes a
/// clock and a move number for most moves, and the formatting machinery
/// was a tenth of its client time.
fn digits(n: u32, width: usize, out: &mut String) {
    let mut buf = [b'0'; 10];
    let mut start = buf.len();
    let mut rest = n;
    loop {
        start -= 1;
        buf[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    start = start.min(buf.len().saturating_sub(width));
    for &digit in &buf[start..] {
        out.push(char::from(digit));
    }
}

/// Appends `h:mm:ss`, with as many fraction digits as the milliseconds
/// need (the importer reads up to three), to `out`; `None` (and nothing
/// written) for a negative clock, which no PGN clock can say.
fn clock(ms: i32, out: &mut String) -> Option<()> {
    let ms = u32::try_from(ms).ok()?;
    let (h, m, s, frac) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    digits(h, 1, out);
    out.push(':');
    digits(m, 2, out);
    out.push(':');
    digits(s, 2, out);
    match frac {
        0 => {}
        f if f % 100 == 0 => {
            out.push('.');
            digits(f / 100, 1, out);
        }
        f if f % 10 == 0 => {
            out.push('.');
            digits(f / 10, 2, out);
        }
        f => {
            out.push('.');
            digits(f, 3, out);
        }
    }
    Some(())
}

/// Appends centipawns as pawns with two decimals (`17` → `0.17`, `-5` →
/// `-0.05`) to `out`.
fn pawns(cp: i32, out: &mut String) {
    if cp < 0 {
        out.push('-');
    }
    let abs = cp.unsigned_abs();
    digits(abs / 100, 1, out);
    out.push('.');
    digits(abs % 100, 2, out);
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
/// game `game_id`: its evaluation and clock as `[%eval …] [%clk …]`,
/// nothing when it has neither. One function, so that PGN and the exchange
/// formats store the same text.
pub fn write_move_comment(
    game_id: i64,
    ply: usize,
    m: &StoredMove,
    out: &mut String,
) -> Result<(), Error> {
    let formatting = |e: std::fmt::Error| Error::bug_from("formatting a comment", e);
    let start = out.len();
    match (m.eval_mate, m.eval_cp) {
        (Some(mate), _) => write!(out, "[%eval #{mate}]").map_err(formatting)?,
        (None, Some(cp)) => {
            out.push_str("[%eval ");
            pawns(cp, out);
            out.push(']');
        }
        (None, None) => {}
    }
    if let Some(ms) = m.clock_ms {
        if out.len() > start {
            out.push(' ');
        }
        out.push_str("[%clk ");
        clock(ms, out).ok_or_else(|| Error::Unwritable {
            game: game_id,
            reason: format!("negative clock after ply {}: {ms} ms", ply + 1),
        })?;
        out.push(']');
    }
    Ok(())
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
}

/// Appends `game` with `moves` as one PGN game (tags, blank line,
/// movetext wrapped at 80 columns, blank line) to `out`.
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
    let mut after_comment = true;
    for (ply, m) in moves.iter().enumerate() {
        if white || after_comment {
            scratch.clear();
            digits(number, 1, &mut scratch);
            scratch.push_str(if white { "." } else { "..." });
            text.token(&scratch);
        }
        text.token(&m.san);
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
    fn clocks_and_evals_read_back_as_written() {
        let clock = |ms| {
            let mut text = String::new();
            clock(ms, &mut text).map(|()| text)
        };
        let pawns = |cp| {
            let mut text = String::new();
            pawns(cp, &mut text);
            text
        };
        for ms in [
            0,
            9_300,
            30_000,
            60_050,
            60_007,
            3_600_000 + 61_001,
            5_400_000,
        ] {
            let text = clock(ms).expect("non-negative");
            let (parsed, _) =
                crate::chess::model::parse_comment_commands(format!("[%clk {text}]").as_bytes());
            assert_eq!(parsed, Some(ms), "{text}");
        }
        assert_eq!(clock(300_000).as_deref(), Some("0:05:00"));
        assert_eq!(clock(9_300).as_deref(), Some("0:00:09.3"));
        assert_eq!(clock(60_050).as_deref(), Some("0:01:00.05"));
        assert_eq!(clock(60_007).as_deref(), Some("0:01:00.007"));
        assert_eq!(clock(-1), None);
        for cp in [0, 17, -5, -150, 1234, -99999] {
            let (_, eval) = crate::chess::model::parse_comment_commands(
                format!("[%eval {}]", pawns(cp)).as_bytes(),
            );
            assert_eq!(eval, Some(crate::chess::model::Eval::Centipawns(cp)));
        }
    }

    #[test]
    fn digits_by_hand_are_what_format_writes() {
        for n in [0, 1, 9, 10, 59, 99, 100, 999, 1000, 4_294_967_295] {
            for width in 0..=10 {
                let mut out = String::from("x");
                digits(n, width, &mut out);
                assert_eq!(out, format!("x{n:0width$}"));
            }
        }
        let mut text = String::new();
        for cp in [
            -100_001,
            -101,
            -99,
            -1,
            0,
            1,
            5,
            99,
            100,
            1234,
            i32::MIN,
            i32::MAX,
        ] {
            text.clear();
            pawns(cp, &mut text);
            let abs = cp.unsigned_abs();
            let sign = if cp < 0 { "-" } else { "" };
            assert_eq!(text, format!("{sign}{}.{:02}", abs / 100, abs % 100));
        }
    }

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

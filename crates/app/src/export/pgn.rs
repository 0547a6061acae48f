//! A stored game as PGN: what `game show`, `games --format pgn` and
//! `export` write.
//!
//! The text is chosen so that importing it gives back the same rows: the
//! same natural key (`source`, `external_id`: the Lichess id, or the
//! content digest of [`crate::chess::replay::GameRecord::external_id`],
//! which covers every tag in the form its column or `games.tags` holds
//! it, the result, the variant, the start position and the moves), the
//! same columns, the same `tags` and the same moves with their clocks,
//! evaluations and NAGs. Tags come as the Seven Tag Roster first,
//! then the columns, then `games.tags` (kept raw values after the typed
//! ones of the same name, in file order, as the importer reads them).

use std::fmt::Write as _;

use chrono::{NaiveTime, Timelike};

use crate::{
    chess::{
        annotation::{digits, tokens, typed_comment},
        model::{Eval, GameVariant},
    },
    error::Error,
    query::games::{StoredGame, StoredMove},
};

/// Longest movetext line written (PGN allows 255; 80 is the export norm).
const LINE: usize = 80;

/// The `Variant` tag of a variant, as Lichess writes it; none for standard.
fn variant_tag(variant: GameVariant) -> Option<&'static str> {
    Some(match variant {
        GameVariant::Standard => return None,
        GameVariant::Chess960 => "Chess960",
        GameVariant::Antichess => "Antichess",
        GameVariant::Atomic => "Atomic",
        GameVariant::Crazyhouse => "Crazyhouse",
        GameVariant::Horde => "Horde",
        GameVariant::KingOfTheHill => "King of the Hill",
        GameVariant::RacingKings => "Racing Kings",
        GameVariant::ThreeCheck => "Three-check",
    })
}

/// The `Termination` tag of a `game_termination` label. `other` without a
/// raw value in `games.tags` was a value without letters or digits (the
/// importer keeps only values with some): `-` reads back as `other` too.
fn termination_tag(label: &str) -> &'static str {
    match label {
        "normal" => "Normal",
        "time_forfeit" => "Time forfeit",
        "abandoned" => "Abandoned",
        "rules_infraction" => "Rules infraction",
        "unterminated" => "Unterminated",
        _ => "-",
    }
}

/// The values of `games.tags`, in order, as `(name, value)`; a name
/// written several times holds an array.
fn stored_tags(game: &StoredGame) -> Result<Vec<(String, String)>, Error> {
    let mut out = Vec::new();
    for (name, value) in &game.tags {
        let values = match value {
            serde_json::Value::Array(values) => values.iter().collect(),
            single => vec![single],
        };
        for value in values {
            let serde_json::Value::String(text) = value else {
                return Err(Error::Unwritable {
                    game: game.id,
                    reason: format!("tag {name} holds {value}, not text"),
                });
            };
            out.push((name.clone(), text.clone()));
        }
    }
    Ok(out)
}

/// The tags of `game`, in the order written. A Seven Tag Roster tag no
/// column holds gets PGN's placeholder, which the importer reads as
/// absent and never keeps, so the raw values kept in `games.tags` (written
/// last) stay after it as they were after the first value in the source.
pub fn tags(game: &StoredGame) -> Result<Vec<(String, String)>, Error> {
    let kept = stored_tags(game)?;
    let lichess = game.source == "lichess";
    let day = game.started_at.map(|at| at.format("%Y.%m.%d").to_string());
    let or = |column: &Option<String>, placeholder: &str| {
        Some(column.clone().unwrap_or_else(|| placeholder.to_owned()))
    };
    let mut columns: Vec<(&str, Option<String>)> = vec![
        ("Event", or(&game.event, "?")),
        ("Site", or(&game.site, "?")),
        ("Date", or(&day, "????.??.??")),
        ("Round", or(&game.round, if lichess { "-" } else { "?" })),
        ("White", or(&game.white, "?")),
        ("Black", or(&game.black, "?")),
        ("Result", Some(game.result_text().to_owned())),
    ];
    // UTCDate/UTCTime when the time is known (Lichess writes them always);
    // not when a raw one is kept: it must stay the first of its name.
    let utc_kept = game.tags.contains_key("UTCDate") || game.tags.contains_key("UTCTime");
    if let Some(at) = game.started_at
        && !utc_kept
        && (lichess || at.time() != NaiveTime::MIN)
    {
        columns.push(("UTCDate", day));
        let time = format!("{:02}:{:02}:{:02}", at.hour(), at.minute(), at.second());
        columns.push(("UTCTime", Some(time)));
    }
    let signed = |diff: Option<i32>| diff.map(|d| format!("{d:+}"));
    // `other` with its raw value kept: that value is written with the kept ones.
    let termination = match game.termination.as_deref() {
        Some("other") if game.tags.contains_key("Termination") => None,
        label => label.map(|label| termination_tag(label).to_owned()),
    };
    columns.extend([
        ("WhiteElo", game.white_elo.map(|e| e.to_string())),
        ("BlackElo", game.black_elo.map(|e| e.to_string())),
        ("WhiteRatingDiff", signed(game.white_rating_diff)),
        ("BlackRatingDiff", signed(game.black_rating_diff)),
        ("WhiteTitle", game.white_title.clone()),
        ("BlackTitle", game.black_title.clone()),
        ("Variant", variant_tag(game.variant).map(str::to_owned)),
        ("TimeControl", game.time_control.clone()),
        ("ECO", game.eco.clone()),
        ("Opening", game.opening.clone()),
        ("Termination", termination),
    ]);
    if let Some(fen) = &game.start_fen {
        columns.push(("FEN", Some(fen.clone())));
        columns.push(("SetUp", Some("1".to_owned())));
    }
    let mut out: Vec<(String, String)> = columns
        .into_iter()
        .filter_map(|(name, value)| value.map(|v| (name.to_owned(), v)))
        .collect();
    out.extend(kept);
    Ok(out)
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

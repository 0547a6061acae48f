//! What a game's movetext says besides its mainline moves and what the
//! typed columns hold (the first NAG, `%clk`, `%eval`): free-text
//! comments, `[%…]` commands pgnload does not type, every NAG, the
//! game's starting comment and variations, nested to any depth.
//!
//! Why a separate, sparse record: a Lichess game's only comments are
//! `[%eval …] [%clk …]`, which the `moves` rows type and export writes
//! back exactly, so keeping its comments again would grow the database
//! for nothing. The reader compares each comment with what export
//! renders from its typed values ([`typed_comment`]) and keeps only what
//! that cannot reproduce: nothing for such a game. The kept notes are
//! stored per mainline ply as the PGN text written after that ply's move
//! ([`Notes`]), generated from the replay (canonical SAN, move numbers),
//! so that writing the game back is splicing text in, and python-chess
//! reads the same game tree from it as from the original.
//!
//! Comments are kept as python-chess 1.11 reads them: one space after
//! `{` and one before `}` are the delimiters' (dropped), CRLF is a line
//! end, and several comments in a row are one comment joined by a space.

use std::borrow::Cow;

use shakmaty::{Move, san::SanPlus, variant::VariantPosition};

use crate::{model::Eval, reject::RejectReason};

/// A move of a variation as read, before its replay.
#[derive(Debug, Clone)]
pub struct Node {
    /// The move as written.
    pub san: SanPlus,
    /// Its NAGs and comments; none for most moves (boxed, so that a move
    /// without them costs its move alone).
    pub notes: Option<Box<NodeNotes>>,
}

/// What was written around a move of a variation.
#[derive(Debug, Clone, Default)]
pub struct NodeNotes {
    /// Its NAGs, in the order written.
    pub nags: Vec<u32>,
    /// The comment after it (joined), empty when none.
    pub comment: String,
    /// The comment before it: only the first move of a variation has one.
    pub starting_comment: String,
}

impl Node {
    /// Its notes, made empty when it has none yet.
    pub fn notes_mut(&mut self) -> &mut NodeNotes {
        self.notes.get_or_insert_with(Box::default)
    }
}

/// One step of the variations of a mainline ply, in the order written:
/// the variations are a flat list of steps, not a tree, so that reading,
/// replaying, writing and dropping them walk it in a loop, never a
/// recursion as deep as the input nests (a game nested thousands of
/// variations deep would overflow a thread's stack).
#[derive(Debug, Clone)]
pub enum Step {
    /// `(`: a variation opens, an alternative to the last move before it
    /// in the enclosing line (the mainline's: the ply's own move).
    Open,
    /// A move of the innermost open variation.
    Move(Node),
    /// `)`: the innermost open variation ends.
    Close,
}

/// What a move of a variation costs to hold: its step, and the text its
/// replay writes for it (a move number of up to ten digits, its dots, its
/// SAN, the spaces: at most 24 bytes).
pub const MOVE_COST: u64 = size_of::<Step>() as u64 + 24;

/// What a `(` or a `)` costs to hold: its step and the two bytes written.
pub const PAREN_COST: u64 = size_of::<Step>() as u64 + 2;

/// What a move's own notes cost beyond their text: their box.
pub const NOTES_COST: u64 = size_of::<NodeNotes>() as u64;

/// What a NAG of a variation's move costs: its number, and ` $N` written.
pub const NAG_COST: u64 = size_of::<u32>() as u64 + 12;

/// What a level of nesting costs while it is open, beyond its steps: the
/// line the reader keeps (where its last two moves are), and the position
/// the replay keeps to come back to (the largest of any variant's) with
/// the move played from it. An En Croissant `Moves` blob decoded keeps
/// the same per level (a standard position and a move).
pub const LEVEL_COST: u64 = (size_of::<VariantPosition>()
    + size_of::<Option<Move>>()
    + 2 * size_of::<Option<usize>>()) as u64;

/// The bytes the variations of a game take to hold while it is read and
/// replayed (or, for an En Croissant `Moves` blob, decoded), counted
/// against the cap its text has, `max_game_bytes`: a game of half a
/// million sibling variations, or one nested a million deep, costs what
/// it would hold, and is rejected as too large before it holds more than
/// the cap, like a game whose text is over it. Counted: [`MOVE_COST`] per
/// move, [`PAREN_COST`] per parenthesis, each comment twice (held, then
/// written) with its braces, [`NAG_COST`] per NAG, [`NOTES_COST`] per move
/// that has any, and [`LEVEL_COST`] per level of the deepest nesting; not
/// the slack of growing buffers (at most as much again).
#[derive(Debug, Clone, Copy)]
pub struct Held {
    bytes: u64,
    limit: u64,
    /// Levels of nesting counted so far: the deepest open at once.
    levels: usize,
}

impl Held {
    /// Nothing held yet, at most `limit` bytes (`max_game_bytes`).
    pub fn within(limit: u64) -> Held {
        Held {
            bytes: 0,
            limit,
            levels: 0,
        }
    }

    /// Counts `bytes` more; an error once they pass the limit.
    pub fn add(&mut self, bytes: u64) -> Result<(), RejectReason> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > self.limit {
            return Err(RejectReason::VariationsTooLarge { limit: self.limit });
        }
        Ok(())
    }

    /// Counts a comment of `text` bytes: held, then written as ` { text }`.
    pub fn comment(&mut self, text: usize) -> Result<(), RejectReason> {
        self.add(2 * text as u64 + 5)
    }

    /// Counts the level of nesting `depth` (1: a variation of the
    /// mainline) when it is deeper than any counted before.
    pub fn level(&mut self, depth: usize) -> Result<(), RejectReason> {
        while self.levels < depth {
            self.levels += 1;
            self.add(LEVEL_COST)?;
        }
        Ok(())
    }
}

/// What one mainline ply carries beyond its typed columns, as read: when
/// a ply has one, it replaces the ply's typed NAG and comment in what
/// export writes, so it holds all of them.
#[derive(Debug, Clone, Default)]
pub struct PlyNotes {
    /// The mainline ply (1-based) these follow; 0: before the first move
    /// (the game's comment).
    pub ply: u32,
    /// Every NAG of the move, in the order written.
    pub nags: Vec<u32>,
    /// The move's comment (joined), empty when none.
    pub comment: String,
    /// The variations that are alternatives to this move, each a
    /// balanced `Open … Close` run of steps, none of them empty.
    pub variations: Vec<Step>,
}

/// The notes of a stored game: for each mainline ply that has any, the
/// PGN text written after its move (`$2 $18 { text } ( 24. Qxd6 … )`),
/// in ply order; ply 0 is the game's comment, written before the first
/// move. Stored in `games.annotations` as a JSON array of `[ply, text]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Notes(pub Vec<(u32, String)>);

impl Notes {
    /// The JSON stored in `games.annotations`; `None` when there are none
    /// (the column stays NULL).
    pub fn to_json(&self) -> Option<serde_json::Value> {
        if self.0.is_empty() {
            return None;
        }
        Some(serde_json::Value::Array(
            self.0
                .iter()
                .map(|(ply, text)| serde_json::json!([ply, text]))
                .collect(),
        ))
    }

    /// Reads back what [`Notes::to_json`] stored; an error names what is
    /// not in that form.
    pub fn from_json(value: &serde_json::Value) -> Result<Notes, String> {
        let serde_json::Value::Array(entries) = value else {
            return Err(format!("not an array: {value}"));
        };
        entries
            .iter()
            .map(|entry| match entry.as_array().map(Vec::as_slice) {
                Some([ply, serde_json::Value::String(text)]) => ply
                    .as_u64()
                    .and_then(|p| u32::try_from(p).ok())
                    .map(|p| (p, text.clone()))
                    .ok_or_else(|| format!("not a ply: {ply}")),
                _ => Err(format!("not a [ply, text] pair: {entry}")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Notes)
    }

    /// The text written after mainline ply `ply` (0: before the first
    /// move), if the game has notes there.
    pub fn at(&self, ply: u32) -> Option<&str> {
        self.0
            .binary_search_by_key(&ply, |(p, _)| *p)
            .ok()
            .map(|i| self.0[i].1.as_str())
    }

    /// How many comments, variations (nested ones included) and NAGs the
    /// notes hold, for the exports that say what they could not carry.
    pub fn counts(&self) -> NoteCounts {
        let mut counts = NoteCounts::default();
        for (_, text) in &self.0 {
            for token in tokens(text) {
                match token.as_bytes().first() {
                    Some(b'{') => counts.comments += 1,
                    Some(b'(') => counts.variations += 1,
                    Some(b'$') => counts.nags += 1,
                    _ => {}
                }
            }
        }
        counts
    }
}

/// Counts of comments, variations and NAGs (see [`Notes::counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoteCounts {
    /// Comments (`{…}`).
    pub comments: u64,
    /// Variations, nested ones included.
    pub variations: u64,
    /// NAGs.
    pub nags: u64,
}

impl NoteCounts {
    /// Adds `other` to these counts.
    pub fn add(&mut self, other: NoteCounts) {
        self.comments += other.comments;
        self.variations += other.variations;
        self.nags += other.nags;
    }

    /// Whether all three are zero.
    pub fn is_empty(self) -> bool {
        self == NoteCounts::default()
    }
}

/// What one mainline ply's stored notes say at its own level (not inside
/// its variations): its NAGs and its comment, which the exchange formats
/// carry per move, and the counts of what they hold below that level.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MoveNotes {
    /// The move's NAGs.
    pub nags: Vec<u32>,
    /// The move's comment (empty: none).
    pub comment: String,
    /// What its variations hold (variations, their comments and NAGs).
    pub below: NoteCounts,
}

impl MoveNotes {
    /// Splits the text [`Notes::at`] gives for a ply.
    pub fn of(text: &str) -> MoveNotes {
        let mut notes = MoveNotes::default();
        let mut depth = 0_u32;
        for token in tokens(text) {
            let top = depth == 0;
            match token.as_bytes().first() {
                Some(b'(') => {
                    depth += 1;
                    notes.below.variations += 1;
                }
                Some(b')') => depth = depth.saturating_sub(1),
                Some(b'{') if top => comment_text(token).clone_into(&mut notes.comment),
                Some(b'{') => notes.below.comments += 1,
                // A NAG the reader would not keep (none is stored) is not
                // carried either.
                Some(b'$') if top => match token[1..].parse::<u32>() {
                    Ok(nag) => notes.nags.push(nag),
                    Err(_) => notes.below.nags += 1,
                },
                Some(b'$') => notes.below.nags += 1,
                _ => {}
            }
        }
        notes
    }
}

/// The text of a comment token written as `{ text }`.
fn comment_text(token: &str) -> &str {
    let inner = token.strip_prefix('{').unwrap_or(token);
    let inner = inner.strip_suffix('}').unwrap_or(inner);
    let inner = inner.strip_prefix(' ').unwrap_or(inner);
    inner.strip_suffix(' ').unwrap_or(inner)
}

/// The tokens of a notes text: words separated by single spaces, a
/// `{ comment }` being one token however many spaces it holds (the
/// writer must not break a comment across lines: python-chess would read
/// the line end into it).
pub fn tokens(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text.trim_start_matches(' ');
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = if rest.starts_with('{') {
            rest.find('}').map_or(rest.len(), |close| close + 1)
        } else {
            rest.find(' ').unwrap_or(rest.len())
        };
        let (token, after) = rest.split_at(end);
        rest = after.trim_start_matches(' ');
        Some(token)
    })
}

/// A comment's text as python-chess 1.11 reads it from the bytes between
/// `{` and `}`: without one space after `{` and one before `}`, CRLF read
/// as a line end, and no `}` (none can be in a comment).
pub fn comment_value(raw: &[u8]) -> Cow<'_, str> {
    let text = crate::reader::decode_text(between_braces(raw));
    if text.contains('\r') {
        Cow::Owned(text.replace("\r\n", "\n"))
    } else {
        text
    }
}

/// The bytes of a comment without the space after `{` and the one before
/// `}` that python-chess takes as the braces' own.
pub fn between_braces(raw: &[u8]) -> &[u8] {
    let raw = raw.strip_prefix(b" ").unwrap_or(raw);
    raw.strip_suffix(b" ").unwrap_or(raw)
}

/// Appends to `comment` the comment `more`, as python-chess joins the
/// comments of one move: by a space, an empty one adding nothing.
pub fn join_comment(comment: &mut String, more: &str) {
    if more.is_empty() {
        return;
    }
    if !comment.is_empty() {
        comment.push(' ');
    }
    comment.push_str(more);
}

/// Appends the comment export writes from a move's typed evaluation and
/// clock (`[%eval 0.17] [%clk 0:05:00]`, nothing when it has neither),
/// in Lichess's own form, so that a Lichess comment is reproduced byte for
/// byte and not stored again. `None` (and `out` unchanged) for a negative
/// clock, which no PGN clock can say.
pub fn typed_comment(eval: Option<Eval>, clock_ms: Option<i32>, out: &mut String) -> Option<()> {
    let start = out.len();
    match eval {
        Some(Eval::MateIn(n)) => {
            out.push_str("[%eval #");
            if n < 0 {
                out.push('-');
            }
            digits(n.unsigned_abs(), 1, out);
            out.push(']');
        }
        Some(Eval::Centipawns(cp)) => {
            out.push_str("[%eval ");
            pawns(cp, out);
            out.push(']');
        }
        None => {}
    }
    if let Some(ms) = clock_ms {
        let Ok(ms) = u32::try_from(ms) else {
            out.truncate(start);
            return None;
        };
        if out.len() > start {
            out.push(' ');
        }
        out.push_str("[%clk ");
        clock(ms, out);
        out.push(']');
    }
    Some(())
}

/// The evaluation and clock of a comment whose text is exactly what
/// [`typed_comment`] writes for them, in the forms Lichess writes on
/// nearly every move: `[%clk h:mm:ss]` (a clock under ten hours), `[%eval
/// E]`, or both, `[%eval E] [%clk h:mm:ss]`, where `E` is pawns with one
/// or two decimals (up to four digits before the point) or a mate `#N` /
/// `#-N`; `None` for any other text, which the reader then parses and
/// renders back. Recognized by its bytes, without parsing then rendering
/// it: for these comments that pair was a sixth of the reader's time.
pub fn lichess_comment(text: &[u8]) -> Option<(Option<Eval>, Option<i32>)> {
    let Some(rest) = text.strip_prefix(b"[%eval ") else {
        return lichess_clock(text).map(|clock| (None, Some(clock)));
    };
    let end = rest.iter().position(|&b| b == b']')?;
    let eval = lichess_eval(&rest[..end])?;
    match &rest[end + 1..] {
        [] => Some((Some(eval), None)),
        [b' ', clock @ ..] => lichess_clock(clock).map(|clock| (Some(eval), Some(clock))),
        _ => None,
    }
}

/// `[%clk h:mm:ss]` as [`typed_comment`] writes it: its milliseconds.
fn lichess_clock(text: &[u8]) -> Option<i32> {
    let value = text.strip_prefix(b"[%clk ")?.strip_suffix(b"]")?;
    // Minutes and seconds as `clock` writes them: below 60.
    let rendered_back = matches!(value, &[_, _, m1, _, _, s1, _] if m1 < b'6' && s1 < b'6');
    rendered_back
        .then(|| crate::model::positional_clock(value))
        .flatten()
}

/// An evaluation as [`typed_comment`] writes it (what [`pawns`] writes,
/// or `#N` / `#-N` without leading zeros), up to four digits before the
/// point or four of a mate; `None` for any other bytes.
fn lichess_eval(value: &[u8]) -> Option<Eval> {
    // Digits without a leading zero (a lone `0` allowed when `zero`),
    // one to four of them, as `digits` writes a number.
    let number = |d: &[u8], zero: bool| -> Option<i32> {
        let leading_ok = d.first().is_some_and(|&b| b != b'0') || (zero && d == b"0");
        (leading_ok && d.len() <= 4 && d.iter().all(u8::is_ascii_digit))
            .then(|| d.iter().fold(0, |n, &b| n * 10 + i32::from(b - b'0')))
    };
    if let Some(mate) = value.strip_prefix(b"#") {
        return match mate.strip_prefix(b"-") {
            Some(moves) => number(moves, false).map(|n| Eval::MateIn(-n)),
            None => number(mate, false).map(Eval::MateIn),
        };
    }
    let (negative, value) = match value.strip_prefix(b"-") {
        Some(abs) => (true, abs),
        None => (false, value),
    };
    let point = value.iter().position(|&b| b == b'.')?;
    let whole = number(&value[..point], true)?;
    // One decimal for whole tens of centipawns, else two, the last not 0.
    let cents = match value[point + 1..] {
        [d] if d.is_ascii_digit() => i32::from(d - b'0') * 10,
        [d, e] if d.is_ascii_digit() && (b'1'..=b'9').contains(&e) => {
            i32::from(d - b'0') * 10 + i32::from(e - b'0')
        }
        _ => return None,
    };
    let cp = whole * 100 + cents;
    // `pawns` writes no sign for zero.
    match (negative, cp) {
        (true, 0) => None,
        (true, cp) => Some(Eval::Centipawns(-cp)),
        (false, cp) => Some(Eval::Centipawns(cp)),
    }
}

/// Appends the decimal digits of `n` to `out`, at least `width` (up to
/// ten) of them (zeros in front). By hand rather than through `write!`: export writes a
/// clock and a move number for most moves, and the formatting machinery
/// was a tenth of its client time.
pub fn digits(n: u32, width: usize, out: &mut String) {
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
/// need (the importer reads up to three), to `out`.
pub fn clock(ms: u32, out: &mut String) {
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
}

/// Appends centipawns as pawns as Lichess writes them, with one or two
/// decimals (`17` → `0.17`, `50` → `0.5`, `0` → `0.0`, `-5` → `-0.05`),
/// to `out`.
pub fn pawns(cp: i32, out: &mut String) {
    if cp < 0 {
        out.push('-');
    }
    let abs = cp.unsigned_abs();
    digits(abs / 100, 1, out);
    out.push('.');
    let cents = abs % 100;
    if cents.is_multiple_of(10) {
        digits(cents / 10, 1, out);
    } else {
        digits(cents, 2, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_split_into_tokens_with_comments_whole() {
        let text = "$2 $18 { The  Immortal } ( 24. Qxd6 { a (b) } Rxd6 $10 ( 24... Kd8 ) )";
        let all: Vec<&str> = tokens(text).collect();
        assert_eq!(
            all,
            [
                "$2",
                "$18",
                "{ The  Immortal }",
                "(",
                "24.",
                "Qxd6",
                "{ a (b) }",
                "Rxd6",
                "$10",
                "(",
                "24...",
                "Kd8",
                ")",
                ")"
            ]
        );
        let notes = Notes(vec![(3, text.to_owned())]);
        assert_eq!(
            notes.counts(),
            NoteCounts {
                comments: 2,
                variations: 2,
                nags: 3
            }
        );
        let own = MoveNotes::of(text);
        assert_eq!(own.nags, [2, 18]);
        assert_eq!(own.comment, "The  Immortal");
        assert_eq!(
            own.below,
            NoteCounts {
                comments: 1,
                variations: 2,
                nags: 1
            }
        );
        let json = notes.to_json().expect("notes");
        assert_eq!(Notes::from_json(&json), Ok(notes));
        assert_eq!(Notes::default().to_json(), None);
    }

    #[test]
    fn comments_are_read_as_python_chess_reads_them() {
        assert_eq!(comment_value(b" a "), "a");
        assert_eq!(comment_value(b"  a  "), " a ");
        assert_eq!(comment_value(b"a\r\nb"), "a\nb");
        assert_eq!(comment_value(b" "), "");
        let mut joined = String::new();
        for part in ["", "a", "", "b"] {
            join_comment(&mut joined, part);
        }
        assert_eq!(joined, "a b");
    }

    #[test]
    fn typed_comments_are_written_as_lichess_writes_them() {
        let typed = |eval, clock| {
            let mut out = String::new();
            typed_comment(eval, clock, &mut out).map(|()| out)
        };
        assert_eq!(
            typed(Some(Eval::Centipawns(17)), Some(300_000)).as_deref(),
            Some("[%eval 0.17] [%clk 0:05:00]")
        );
        assert_eq!(
            typed(Some(Eval::Centipawns(-50)), None).as_deref(),
            Some("[%eval -0.5]")
        );
        assert_eq!(
            typed(Some(Eval::Centipawns(0)), None).as_deref(),
            Some("[%eval 0.0]")
        );
        assert_eq!(
            typed(Some(Eval::MateIn(-3)), Some(9_300)).as_deref(),
            Some("[%eval #-3] [%clk 0:00:09.3]")
        );
        assert_eq!(typed(None, None).as_deref(), Some(""));
        assert_eq!(typed(None, Some(-1)), None);
        for cp in [0, 5, 10, 17, 50, 99, 100, 105, 110, -1, -10, -101, 12345] {
            let text = typed(Some(Eval::Centipawns(cp)), None).expect("no clock");
            let (_, eval) = crate::model::parse_comment_commands(text.as_bytes());
            assert_eq!(eval, Some(Eval::Centipawns(cp)), "{text}");
        }
    }

    /// What the reader makes of a comment's text without the recognizer:
    /// its commands parsed, kept as typed values only when they render
    /// back to the text byte for byte.
    fn typed_by_parsing(text: &str) -> Option<(Option<Eval>, Option<i32>)> {
        let (clock, eval) = crate::model::parse_comment_commands(text.as_bytes());
        let mut rendered = String::new();
        let same = typed_comment(eval, clock, &mut rendered).is_some() && rendered == text;
        same.then_some((eval, clock))
    }

    #[test]
    fn a_lichess_clock_is_recognized_exactly_when_it_reads_and_renders_back() {
        for h in 0..=9u8 {
            for m in 0..=99u8 {
                for sec in 0..=99u8 {
                    let text = format!("[%clk {h}:{m:02}:{sec:02}]");
                    let expected = typed_by_parsing(&text);
                    assert_eq!(lichess_comment(text.as_bytes()), expected, "{text}");
                }
            }
        }
        for other in [
            "[%clk 10:00:00]",
            "[%clk 0:00:00.5]",
            "[%clk  0:00:00]",
            "[%clk 0:0:00]",
            "[%clk a:00:00]",
            "[%eval 0.1",
            "",
        ] {
            assert_eq!(lichess_comment(other.as_bytes()), None, "{other}");
        }
    }

    #[test]
    fn a_lichess_evaluation_is_recognized_only_where_parsing_reads_the_same() {
        let mut recognized = 0;
        let mut values: Vec<String> = Vec::new();
        for sign in ["", "-", "+", "#", "#-", "#+"] {
            for whole in [
                "", "0", "00", "1", "01", "9", "10", "99", "100", "1234", "9999", "12345",
            ] {
                for fraction in [
                    "", ".", ".0", ".5", ".05", ".10", ".17", ".00", ".123", ".1a",
                ] {
                    values.push(format!("{sign}{whole}{fraction}"));
                }
            }
        }
        values.extend(
            ["0.17,20", " 0.17", "0.17 ", "x", "#", "-0.0", "1e2", "inf"].map(String::from),
        );
        for value in &values {
            for clock in [
                "",
                " [%clk 0:05:00]",
                " [%clk 0:61:00]",
                "  [%clk 0:05:00]",
                " [%clk 0:05:00] ",
                "[%clk 0:05:00]",
                " x",
            ] {
                let text = format!("[%eval {value}]{clock}");
                let found = lichess_comment(text.as_bytes());
                // Whatever the recognizer takes, parsing reads the same.
                if found.is_some() {
                    assert_eq!(found, typed_by_parsing(&text), "{text}");
                    recognized += 1;
                }
            }
        }
        assert!(recognized > 100, "only {recognized} recognized");
        // Every evaluation typed_comment writes (with up to four digits
        // before the point), with and without a clock, is recognized.
        for eval in (-10_000..=10_000)
            .step_by(7)
            .map(Eval::Centipawns)
            .chain((-300..=300).filter(|&n| n != 0).map(Eval::MateIn))
        {
            for clock in [None, Some(300_000), Some(35_999_000)] {
                let mut text = String::new();
                typed_comment(Some(eval), clock, &mut text).expect("a clock of at least 0");
                assert_eq!(
                    lichess_comment(text.as_bytes()),
                    Some((Some(eval), clock)),
                    "{text}"
                );
            }
        }
        for refused in [
            "[%eval 0.17] [%clk 0:05:00] x",
            "[%eval 0.17][%clk 0:05:00]",
            "[%clk 0:05:00] [%eval 0.17]",
            "[%eval 0.17] { [%clk 0:05:00]",
            "[%eval 0.17]]",
            "[%eval 0.10]",
            "[%eval 00.1]",
            "[%eval -0.0]",
            "[%eval #0]",
            "[%eval #03]",
            "[%eval 12345.0]",
        ] {
            assert_eq!(lichess_comment(refused.as_bytes()), None, "{refused}");
        }
    }

    #[test]
    fn clocks_read_back_as_written() {
        let clock = |ms| {
            let mut text = String::new();
            clock(ms, &mut text);
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
            let text = clock(ms);
            let (parsed, _) =
                crate::model::parse_comment_commands(format!("[%clk {text}]").as_bytes());
            assert_eq!(parsed.map(i64::from), Some(i64::from(ms)), "{text}");
        }
        assert_eq!(clock(300_000), "0:05:00");
        assert_eq!(clock(9_300), "0:00:09.3");
        assert_eq!(clock(60_050), "0:01:00.05");
        assert_eq!(clock(60_007), "0:01:00.007");
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
            10,
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
            let cents = if abs % 10 == 0 {
                format!("{}", abs % 100 / 10)
            } else {
                format!("{:02}", abs % 100)
            };
            assert_eq!(text, format!("{sign}{}.{cents}", abs / 100));
        }
    }
}

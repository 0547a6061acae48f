//! Step 2: one game's tags decoded and its movetext parsed by pgn-reader
//! (mainline, clocks, evals, NAGs), with the checks that need raw bytes;
//! and the bare token counter of [`scan_only`].

use std::{
    borrow::Cow,
    io::{self, Read},
    ops::{ControlFlow, Range},
};

use pgn_reader::{Nag, Outcome, RawComment, RawTag, Reader, SanPlus, Skip, Visitor};
use shakmaty::KnownOutcome;

use super::{
    GameChunk, TAG_LINE_BYTES, TagSpan, decode_text,
    garbage::{read_tokens, skip_to},
};
use crate::{
    model::{GameResult, RawGame, RawMove, check_storable, parse_comment_commands},
    reject::RejectReason,
};

/// Limits applied while parsing one game.
#[derive(Debug, Clone, Copy)]
pub struct ParseLimits {
    /// Games longer than this are rejected.
    pub max_plies: u32,
    /// Games larger than this (in bytes) are rejected. A game is held
    /// whole up to this size, so it must fit in memory: the settings bound
    /// it to `config::MAX_GAME_BYTES`.
    pub max_game_bytes: u64,
}

/// Parses the game in a chunk after the checks that need its raw bytes
/// (size cap, tags, garbage tokens, result marker, bytes PostgreSQL cannot
/// store), or says why the game is rejected. Pure; runs in the parallel
/// workers.
///
/// # Panics
///
/// Never: the spans it reads are those the splitter found in this chunk.
pub fn take_game(chunk: &mut GameChunk, limits: ParseLimits) -> Result<RawGame, RejectReason> {
    if chunk.is_truncated() {
        return Err(RejectReason::TooLarge {
            size: chunk.total_len,
            limit: limits.max_game_bytes,
        });
    }
    let scan = std::mem::take(&mut chunk.scan);
    if let Some(problem) = scan.problem {
        return Err(problem);
    }
    let text = lone_cr_as_newline(&chunk.bytes);
    let tags = scan
        .tags
        .iter()
        .map(|span| decode_tag(&text, span))
        .collect::<Result<Vec<_>, _>>()?;
    let movetext_at = scan.movetext.unwrap_or(text.len());
    let tokens = read_tokens(&text, movetext_at);
    let text = rewritten(text, &tokens.rewrites);
    let movetext = text.get(movetext_at..).expect(SPAN_WITHIN_GAME);
    let mut game = parse_movetext(movetext, limits.max_plies)?;
    game.tags = tags;
    if game.tags.is_empty() && game.moves.is_empty() && game.movetext_result.is_none() {
        return Err(RejectReason::Empty);
    }
    // A game without a result marker is read to its end, as python-chess
    // reads it, unless it was cut off mid-token.
    match tokens.garbage {
        Some((_, true)) if game.movetext_result.is_none() => {
            return Err(RejectReason::Unterminated);
        }
        Some((token, _)) => return Err(RejectReason::Garbage { token }),
        None => {}
    }
    check_storable(&game.tags)?;
    Ok(game)
}

/// The game's text with the tokens python-chess reads and pgn-reader does
/// not written as pgn-reader reads them; borrowed when there is none (the
/// tags come before the first rewrite, so their spans stay valid).
fn rewritten<'a>(text: Cow<'a, [u8]>, rewrites: &[(Range<usize>, Vec<u8>)]) -> Cow<'a, [u8]> {
    if rewrites.is_empty() {
        return text;
    }
    let mut out = Vec::with_capacity(text.len() + 2 * rewrites.len());
    let mut copied = 0;
    for (range, replacement) in rewrites {
        out.extend_from_slice(&text[copied..range.start]);
        out.extend_from_slice(replacement);
        copied = range.end;
    }
    out.extend_from_slice(&text[copied..]);
    Cow::Owned(out)
}

/// The game's bytes with each lone CR (old Mac line ends) turned into a
/// newline, as the splitter saw them; borrowed when there is none.
pub(super) fn lone_cr_as_newline(bytes: &[u8]) -> Cow<'_, [u8]> {
    let lone = |i: usize| bytes[i] == b'\r' && bytes.get(i + 1) != Some(&b'\n');
    // Most games hold no CR at all: look for CRs eight bytes at a time and
    // test only those, instead of every byte (a twentieth of a game's time).
    let mut cr = skip_to(bytes, 0, b'\r');
    while cr < bytes.len() && !lone(cr) {
        cr = skip_to(bytes, cr + 1, b'\r');
    }
    if cr == bytes.len() {
        return Cow::Borrowed(bytes);
    }
    Cow::Owned(
        (0..bytes.len())
            .map(|i| if lone(i) { b'\n' } else { bytes[i] })
            .collect(),
    )
}

/// Why a span the scanner recorded lies within the game's bytes.
const SPAN_WITHIN_GAME: &str = "the scanner records spans of the game it reads, which ends at the \
     next game or the end of the stream, and a game cut at the size cap is rejected before its \
     spans are read";

/// A tag's name and value, decoded.
fn decode_tag(text: &[u8], span: &TagSpan) -> Result<(String, String), RejectReason> {
    let slice = |r: &Range<usize>| text.get(r.clone()).expect(SPAN_WITHIN_GAME);
    match span {
        TagSpan::Quoted { name, value } => Ok((
            decode_text(slice(name)).into_owned(),
            decode_text(&RawTag(slice(value)).decode()).into_owned(),
        )),
        TagSpan::Line(line) => python_tag_line(slice(line)).ok_or_else(|| {
            let shown = &slice(line)[..line.len().min(60)];
            RejectReason::Syntax(format!("malformed tag line {:?}", decode_text(shown)))
        }),
    }
}

/// A tag line as python-chess reads it
/// (`^\[([A-Za-z0-9][A-Za-z0-9_+#=:-]*)\s+"([^\r]*)"\]\s*$`): the value runs
/// from the first quote to the last `"]`, unescaped. `None` when the line
/// does not match (python-chess then ignores it; pgnload rejects the game).
fn python_tag_line(line: &[u8]) -> Option<(String, String)> {
    let line = line.trim_ascii_end().strip_prefix(b"[")?;
    let is_name = |b: &u8| b.is_ascii_alphanumeric() || b"_+#=:-".contains(b);
    let name_len = line.iter().take_while(|b| is_name(b)).count();
    if name_len == 0 || !line[0].is_ascii_alphanumeric() {
        return None;
    }
    let rest = &line[name_len..];
    let spaces = rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
    let value = rest[spaces..]
        .strip_prefix(b"\"")?
        .strip_suffix(b"\"]")
        .filter(|_| spaces > 0)?;
    if value.contains(&b'\r') {
        return None;
    }
    Some((
        decode_text(&line[..name_len]).into_owned(),
        decode_text(value).into_owned(),
    ))
}

/// Parses a game's movetext (mainline, clocks, evals, NAGs) with pgn-reader.
fn parse_movetext(movetext: &[u8], max_plies: u32) -> Result<RawGame, RejectReason> {
    let mut reader = Reader::new(movetext);
    let mut visitor = GameVisitor { max_plies };
    let game = match reader.read_game(&mut visitor) {
        Ok(Some(parsed)) => parsed?,
        Ok(None) => RawGame::default(),
        Err(e) => return Err(RejectReason::Syntax(e.to_string())),
    };
    // The splitter follows pgn-reader's rules; should they ever disagree,
    // the game is rejected whole rather than read in part.
    if !matches!(reader.has_more(), Ok(false)) {
        return Err(RejectReason::Syntax(
            "the movetext holds more than one game".into(),
        ));
    }
    Ok(game)
}

/// Builds a [`RawGame`] from pgn-reader callbacks.
struct GameVisitor {
    max_plies: u32,
}

/// Movetext state: the game so far, and whether a move is open for annotations.
struct Movetext {
    game: RawGame,
}

impl Visitor for GameVisitor {
    type Tags = ();
    type Movetext = Movetext;
    type Output = Result<RawGame, RejectReason>;

    fn begin_tags(&mut self) -> ControlFlow<Self::Output, Self::Tags> {
        ControlFlow::Continue(())
    }

    fn begin_movetext(&mut self, _tags: ()) -> ControlFlow<Self::Output, Self::Movetext> {
        ControlFlow::Continue(Movetext {
            game: RawGame {
                tags: Vec::new(),
                moves: Vec::with_capacity(128),
                movetext_result: None,
            },
        })
    }

    fn san(&mut self, movetext: &mut Self::Movetext, san: SanPlus) -> ControlFlow<Self::Output> {
        if movetext.game.moves.len() >= self.max_plies as usize {
            return ControlFlow::Break(Err(RejectReason::TooManyPlies {
                limit: self.max_plies,
            }));
        }
        movetext.game.moves.push(RawMove {
            san,
            clock_ms: None,
            eval: None,
            nag: None,
        });
        ControlFlow::Continue(())
    }

    fn nag(&mut self, movetext: &mut Self::Movetext, nag: Nag) -> ControlFlow<Self::Output> {
        if let Some(last) = movetext.game.moves.last_mut() {
            last.nag = last.nag.or(Some(nag.0));
        }
        ControlFlow::Continue(())
    }

    fn comment(
        &mut self,
        movetext: &mut Self::Movetext,
        comment: RawComment<'_>,
    ) -> ControlFlow<Self::Output> {
        if let Some(last) = movetext.game.moves.last_mut() {
            let (clock, eval) = parse_comment_commands(comment.as_bytes());
            last.clock_ms = last.clock_ms.or(clock);
            last.eval = last.eval.or(eval);
        }
        ControlFlow::Continue(())
    }

    fn partial_comment(
        &mut self,
        _movetext: &mut Self::Movetext,
        _comment: RawComment<'_>,
    ) -> ControlFlow<Self::Output> {
        // Only the final piece of a huge comment is inspected for commands;
        // %clk/%eval comments are short and never split.
        ControlFlow::Continue(())
    }

    fn begin_variation(
        &mut self,
        _movetext: &mut Self::Movetext,
    ) -> ControlFlow<Self::Output, Skip> {
        ControlFlow::Continue(Skip(true))
    }

    fn outcome(
        &mut self,
        movetext: &mut Self::Movetext,
        outcome: Outcome,
    ) -> ControlFlow<Self::Output> {
        movetext.game.movetext_result = Some(match outcome {
            Outcome::Known(KnownOutcome::Decisive { winner }) => {
                if winner.is_white() {
                    GameResult::WhiteWins
                } else {
                    GameResult::BlackWins
                }
            }
            Outcome::Known(KnownOutcome::Draw) => GameResult::Draw,
            Outcome::Unknown => GameResult::Unknown,
        });
        ControlFlow::Continue(())
    }

    fn end_game(&mut self, movetext: Self::Movetext) -> Self::Output {
        Ok(movetext.game)
    }
}

/// Counts of a parse-only pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Games seen.
    pub games: u64,
    /// Mainline move tokens seen.
    pub moves: u64,
}

/// A parse-only pass with pgn-reader (tokenizing, no replay, no FEN): the
/// baseline the benchmark compares the full per-position work against.
pub fn scan_only(input: impl Read) -> io::Result<ScanStats> {
    struct Counter;
    impl Visitor for Counter {
        type Tags = ();
        type Movetext = u64;
        type Output = u64;
        fn begin_tags(&mut self) -> ControlFlow<Self::Output, Self::Tags> {
            ControlFlow::Continue(())
        }
        fn begin_movetext(&mut self, _tags: ()) -> ControlFlow<Self::Output, Self::Movetext> {
            ControlFlow::Continue(0)
        }
        fn san(&mut self, moves: &mut u64, _san: SanPlus) -> ControlFlow<Self::Output> {
            *moves += 1;
            ControlFlow::Continue(())
        }
        fn end_game(&mut self, moves: u64) -> u64 {
            moves
        }
    }
    let mut reader = Reader::build(input)
        .set_supported_tag_line_length(TAG_LINE_BYTES)
        .finish();
    let mut stats = ScanStats::default();
    while let Some(moves) = reader.read_game(&mut Counter)? {
        stats.games += 1;
        stats.moves += moves;
    }
    Ok(stats)
}

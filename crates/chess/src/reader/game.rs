//! Step 2: one game's tags decoded and its movetext parsed by pgn-reader
//! (mainline, clocks, evals, NAGs, and the comments, NAGs and variations
//! the typed fields cannot hold: [`crate::annotation`]), with the checks
//! that need raw bytes;
//! and the bare token counter of [`scan_only`].

use std::{
    borrow::Cow,
    cell::{Cell, RefCell},
    io::{self, Read},
    ops::{ControlFlow, Range},
    rc::Rc,
};

use pgn_reader::{Nag, Outcome, RawComment, RawTag, Reader, SanPlus, Skip, Visitor};
use shakmaty::KnownOutcome;

use super::{
    GameChunk, TAG_LINE_BYTES, TagSpan, decode_text,
    garbage::{LargeNags, read_tokens, skip_to},
};
use crate::{
    annotation::{
        Held, MOVE_COST, NAG_COST, NOTES_COST, Node, NodeNotes, PAREN_COST, PlyNotes, Step,
        between_braces, comment_value, join_comment, lichess_comment, typed_comment,
    },
    model::{GameResult, RawGame, RawMove, Tags, check_storable, parse_comment_commands},
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
    let tags = read_tags(&text, &scan.tags)?;
    let movetext_at = scan.movetext.unwrap_or(text.len());
    let mut tokens = read_tokens(&text, movetext_at);
    if let Some(reason) = tokens.unkept_nag {
        return Err(RejectReason::Syntax(reason));
    }
    let text = rewritten(text, &tokens.rewrites);
    let movetext = text.get(movetext_at..).expect(SPAN_WITHIN_GAME);
    let large_nags = std::mem::take(&mut tokens.large_nags);
    let mut game = parse_movetext(movetext, limits, large_nags)?;
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

/// The tags at `spans`, decoded.
fn read_tags(text: &[u8], spans: &[TagSpan]) -> Result<Tags, RejectReason> {
    let slice = |r: &Range<usize>| text.get(r.clone()).expect(SPAN_WITHIN_GAME);
    // Unescaping shortens values: the bytes read are room enough.
    let room = spans
        .iter()
        .map(|span| match span {
            TagSpan::Quoted { name, value } => name.len() + value.len(),
            TagSpan::Line(line) => line.len(),
        })
        .sum();
    let mut bytes = Vec::with_capacity(room);
    let mut ends = Vec::with_capacity(spans.len());
    for span in spans {
        let (name, value) = match span {
            TagSpan::Quoted { name, value } => (slice(name), RawTag(slice(value)).decode()),
            TagSpan::Line(line) => {
                let (name, value) = python_tag_line(slice(line)).ok_or_else(|| {
                    let shown = &slice(line)[..line.len().min(60)];
                    RejectReason::Syntax(format!("malformed tag line {:?}", decode_text(shown)))
                })?;
                (name, Cow::Borrowed(value))
            }
        };
        bytes.extend_from_slice(name);
        let name_end = bytes.len();
        bytes.extend_from_slice(&value);
        ends.push((name_end, bytes.len()));
    }
    Ok(Tags::decoded(bytes, ends))
}

/// A tag line as python-chess reads it
/// (`^\[([A-Za-z0-9][A-Za-z0-9_+#=:-]*)\s+"([^\r]*)"\]\s*$`): the value runs
/// from the first quote to the last `"]`, unescaped. `None` when the line
/// does not match (python-chess then ignores it; pgnload rejects the game).
fn python_tag_line(line: &[u8]) -> Option<(&[u8], &[u8])> {
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
    Some((&line[..name_len], value))
}

/// The movetext a [`MovetextReader`] reads: the bytes of one game at a
/// time, copied in (a `Reader` owns its source, so it cannot borrow them).
#[derive(Clone, Default)]
struct Feed(Rc<RefCell<io::Cursor<Vec<u8>>>>);

impl Feed {
    /// Makes `movetext` what is read next.
    fn refill(&self, movetext: &[u8]) {
        let mut cursor = self.0.borrow_mut();
        cursor.get_mut().clear();
        cursor.get_mut().extend_from_slice(movetext);
        cursor.set_position(0);
    }
}

impl Read for Feed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.borrow_mut().read(buf)
    }
}

/// A pgn-reader `Reader` and the feed it reads from, kept by a thread
/// from one game to the next: a new `Reader` zeroes a 16 KiB buffer, which
/// cost a twentieth of the work of a Lichess game (callgrind).
struct MovetextReader {
    reader: Reader<Feed>,
    feed: Feed,
}

thread_local! {
    /// This thread's [`MovetextReader`], when the last game read left it
    /// clean (read to its end).
    static MOVETEXT_READER: Cell<Option<MovetextReader>> = const { Cell::new(None) };
}

/// Parses a game's movetext (mainline, clocks, evals, NAGs) with pgn-reader.
fn parse_movetext(
    movetext: &[u8],
    limits: ParseLimits,
    large_nags: LargeNags,
) -> Result<RawGame, RejectReason> {
    let MovetextReader { mut reader, feed } = MOVETEXT_READER.take().unwrap_or_else(|| {
        let feed = Feed::default();
        MovetextReader {
            reader: Reader::new(feed.clone()),
            feed,
        }
    });
    feed.refill(movetext);
    let mut visitor = GameVisitor {
        limits,
        large_nags: ReadBack {
            placeholder: large_nags.placeholder,
            values: large_nags.values.into_iter(),
        },
    };
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
    // Read to its end, with nothing left to skip: as good as new. (A game
    // that stopped early returned above, and its reader is dropped.)
    MOVETEXT_READER.set(Some(MovetextReader { reader, feed }));
    Ok(game)
}

/// Builds a [`RawGame`] from pgn-reader callbacks.
struct GameVisitor {
    limits: ParseLimits,
    /// The NAGs above 255 the token walk found, and their placeholder.
    large_nags: ReadBack,
}

/// [`LargeNags`] being read back: the placeholder, and the values still
/// to come.
struct ReadBack {
    placeholder: Option<u8>,
    values: std::vec::IntoIter<u32>,
}

/// Movetext state: the game so far, and the variations being read.
struct Movetext {
    game: RawGame,
    /// The steps of the outermost variation being read (its nested ones
    /// included), handed to the mainline ply's notes when it closes.
    steps: Vec<Step>,
    /// The variations open, innermost last: where their last moves are
    /// in `steps`.
    open: Vec<Line>,
    /// python-chess's `in_variation`: whether a move was read since the
    /// last variation opened (a comment then follows that move, else it
    /// is the starting comment of the next one).
    after_move: bool,
    /// A comment waiting for the first move of a variation.
    pending: String,
    /// The first pieces of a comment too long for pgn-reader's buffer.
    partial: Vec<u8>,
    /// Scratch for the comment the typed clock and evaluation render.
    typed: String,
    /// What the variations read so far take to hold, within the cap.
    held: Held,
}

/// An open variation: where its last two moves are in [`Movetext::steps`]
/// (none yet: `None`).
#[derive(Clone, Copy, Default)]
struct Line {
    last: Option<usize>,
    before_last: Option<usize>,
}

/// The node of the move at `at` in `steps`, which [`Line`] recorded.
fn node_at(steps: &mut [Step], at: usize) -> &mut Node {
    match steps.get_mut(at) {
        Some(Step::Move(node)) => node,
        _ => unreachable!(
            "a Line records the indexes of Move steps only, and steps only grow while a variation is open"
        ),
    }
}

/// Why a game whose variations python-chess cannot place is rejected.
fn misplaced(what: &str) -> RejectReason {
    RejectReason::Syntax(format!("{what}: python-chess reads no game tree from it"))
}

impl Movetext {
    /// The notes of the last mainline ply (0: the game's start), made
    /// from its typed NAG and comment when it has none yet: once a ply has
    /// notes they say everything written after its move.
    fn notes(&mut self) -> &mut PlyNotes {
        let ply = u32::try_from(self.game.moves.len())
            .expect("the reader caps the mainline at max_plies, a u32");
        let at = match self
            .game
            .notes
            .binary_search_by_key(&ply, |notes| notes.ply)
        {
            Ok(at) => at,
            Err(at) => {
                let mut notes = PlyNotes {
                    ply,
                    ..PlyNotes::default()
                };
                if let Some(last) = self.game.moves.last() {
                    notes.nags.extend(last.nag.map(u32::from));
                    // A clock the import refuses (negative) renders
                    // nothing: the game is rejected anyway.
                    let _ = typed_comment(last.eval, last.clock_ms, &mut notes.comment);
                }
                self.game.notes.insert(at, notes);
                at
            }
        };
        &mut self.game.notes[at]
    }

    /// Whether the last mainline ply has notes.
    fn has_notes(&self) -> bool {
        let ply = self.game.moves.len();
        // Notes are made in ply order, but for a NAG python-chess gives the
        // ply before an open variation's: so not only the last is looked at.
        self.game
            .notes
            .iter()
            .rev()
            .take(2)
            .any(|notes| notes.ply as usize == ply)
    }

    /// A comment after a mainline move (or before the first one).
    fn mainline_comment(&mut self, raw: &[u8]) {
        if self.game.moves.is_empty() {
            join_comment(&mut self.notes().comment, &comment_value(raw));
            return;
        }
        let has_notes = self.has_notes();
        let last = self
            .game
            .moves
            .last_mut()
            .expect("the mainline has a move: checked above");
        let typed_only = !has_notes && last.clock_ms.is_none() && last.eval.is_none();
        if typed_only && let Some((eval, clock)) = lichess_comment(between_braces(raw)) {
            last.clock_ms = clock;
            last.eval = eval;
            return;
        }
        let (clock, eval) = parse_comment_commands(raw);
        if typed_only {
            self.typed.clear();
            let rendered = typed_comment(eval, clock, &mut self.typed).is_some();
            // Bytes compared, nothing decoded: most comments end here.
            if rendered && self.typed.as_bytes() == between_braces(raw) {
                last.clock_ms = clock;
                last.eval = eval;
                return;
            }
        }
        self.notes();
        let last = self
            .game
            .moves
            .last_mut()
            .expect("the mainline has a move: checked above");
        last.clock_ms = last.clock_ms.or(clock);
        last.eval = last.eval.or(eval);
        join_comment(&mut self.notes().comment, &comment_value(raw));
    }

    /// A move of the innermost open variation. Out of line and cold: with
    /// it inside, the callback for every mainline move was no longer
    /// inlined into pgn-reader's loop (callgrind: 30 instructions more per
    /// move of an unannotated game).
    #[cold]
    fn variation_move(&mut self, san: SanPlus) -> Result<(), RejectReason> {
        let Some(line) = self.open.last_mut() else {
            return Ok(());
        };
        self.held.add(MOVE_COST)?;
        let starting_comment = std::mem::take(&mut self.pending);
        let notes = if starting_comment.is_empty() {
            None
        } else {
            self.held.add(NOTES_COST)?;
            self.held.comment(starting_comment.len())?;
            Some(Box::new(NodeNotes {
                starting_comment,
                ..NodeNotes::default()
            }))
        };
        line.before_last = line.last;
        line.last = Some(self.steps.len());
        self.steps.push(Step::Move(Node { san, notes }));
        Ok(())
    }

    /// The notes of the variation's move at `at` in `steps`, made (and
    /// counted) when it has none yet.
    fn notes_at(&mut self, at: usize) -> Result<&mut NodeNotes, RejectReason> {
        let node = node_at(&mut self.steps, at);
        if node.notes.is_none() {
            self.held.add(NOTES_COST)?;
        }
        Ok(node.notes_mut())
    }

    /// Gives `nag` to the variation's move at `at` in `steps`.
    fn variation_nag(&mut self, at: usize, nag: u32) -> Result<(), RejectReason> {
        self.held.add(NAG_COST)?;
        self.notes_at(at)?.nags.push(nag);
        Ok(())
    }

    /// Appends `text` to the comment of the variation's move at `at` in
    /// `steps`, as [`join_comment`] does (its notes made only for a comment).
    fn variation_comment(&mut self, at: usize, text: &str) -> Result<(), RejectReason> {
        if !text.is_empty() {
            self.held.comment(text.len())?;
            join_comment(&mut self.notes_at(at)?.comment, text);
        }
        Ok(())
    }

    /// A NAG after a mainline move.
    /// Gives `nag` to the parent of the innermost open variation, which
    /// has no move yet: the move before the one it replaces. That move is
    /// the one before the last in the enclosing line; when the replaced
    /// move is its line's first, the parent is that line's own parent, up
    /// to the mainline.
    fn parent_nag(&mut self, nag: u32) -> Result<(), RejectReason> {
        let enclosing = self.open.len() - 1;
        for level in (0..enclosing).rev() {
            if let Some(parent) = self.open[level].before_last {
                return self.variation_nag(parent, nag);
            }
        }
        let replaced = self.game.moves.pop();
        self.mainline_nag(nag);
        self.game.moves.extend(replaced);
        Ok(())
    }

    /// A NAG after a mainline move: the move's typed NAG when it is its
    /// first and fits the column's byte, else one of its notes.
    fn mainline_nag(&mut self, nag: u32) {
        let has_notes = self.has_notes();
        let Some(last) = self.game.moves.last_mut() else {
            // python-chess keeps it on the game's root, which no PGN
            // writer writes: nothing a move could carry.
            return;
        };
        if !has_notes
            && last.nag.is_none()
            && let Ok(byte) = u8::try_from(nag)
        {
            last.nag = Some(byte);
        } else {
            self.notes().nags.push(nag);
        }
    }
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
                tags: Tags::default(),
                moves: Vec::with_capacity(128),
                movetext_result: None,
                notes: Vec::new(),
            },
            steps: Vec::new(),
            open: Vec::new(),
            after_move: false,
            pending: String::new(),
            partial: Vec::new(),
            typed: String::new(),
            held: Held::within(self.limits.max_game_bytes),
        })
    }

    fn san(&mut self, movetext: &mut Self::Movetext, san: SanPlus) -> ControlFlow<Self::Output> {
        movetext.after_move = true;
        if !movetext.open.is_empty() {
            return broken_by(movetext.variation_move(san));
        }
        if movetext.game.moves.len() >= self.limits.max_plies as usize {
            return ControlFlow::Break(Err(RejectReason::TooManyPlies {
                limit: self.limits.max_plies,
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
        let nag = match self.large_nags.placeholder {
            Some(placeholder) if nag.0 == placeholder => {
                // A NAG above 255, rewritten as the placeholder; should the
                // two ever disagree, the game is rejected for its garbage.
                self.large_nags.values.next().unwrap_or(u32::from(nag.0))
            }
            _ => u32::from(nag.0),
        };
        let placed = match movetext.open.last() {
            None => {
                movetext.mainline_nag(nag);
                Ok(())
            }
            Some(line) => match line.last {
                Some(at) => movetext.variation_nag(at, nag),
                // Before the variation's first move: python-chess gives it
                // to the variation's parent, the move before the one the
                // variation replaces.
                None => movetext.parent_nag(nag),
            },
        };
        broken_by(placed)
    }

    fn comment(
        &mut self,
        movetext: &mut Self::Movetext,
        comment: RawComment<'_>,
    ) -> ControlFlow<Self::Output> {
        let whole: Cow<'_, [u8]> = if movetext.partial.is_empty() {
            Cow::Borrowed(comment.as_bytes())
        } else {
            let mut whole = std::mem::take(&mut movetext.partial);
            whole.extend_from_slice(comment.as_bytes());
            Cow::Owned(whole)
        };
        let Some(line) = movetext.open.last() else {
            movetext.mainline_comment(&whole);
            return ControlFlow::Continue(());
        };
        let text = comment_value(&whole);
        match line.last {
            Some(at) if movetext.after_move => broken_by(movetext.variation_comment(at, &text)),
            _ => {
                join_comment(&mut movetext.pending, &text);
                ControlFlow::Continue(())
            }
        }
    }

    fn partial_comment(
        &mut self,
        movetext: &mut Self::Movetext,
        comment: RawComment<'_>,
    ) -> ControlFlow<Self::Output> {
        movetext.partial.extend_from_slice(comment.as_bytes());
        ControlFlow::Continue(())
    }

    fn begin_variation(
        &mut self,
        movetext: &mut Self::Movetext,
    ) -> ControlFlow<Self::Output, Skip> {
        let replaces_a_move = match movetext.open.last() {
            None => !movetext.game.moves.is_empty(),
            Some(line) => line.last.is_some(),
        };
        if !replaces_a_move {
            return ControlFlow::Break(Err(misplaced(
                "a variation before any move it could replace",
            )));
        }
        // Its `(` and its `)` to come, and the level it opens.
        let counted = movetext
            .held
            .add(2 * PAREN_COST)
            .and_then(|()| movetext.held.level(movetext.open.len() + 1));
        if let Err(reason) = counted {
            return ControlFlow::Break(Err(reason));
        }
        movetext.steps.push(Step::Open);
        movetext.open.push(Line::default());
        movetext.after_move = false;
        ControlFlow::Continue(Skip(false))
    }

    fn end_variation(&mut self, movetext: &mut Self::Movetext) -> ControlFlow<Self::Output> {
        // A `)` without its `(` is ignored, as python-chess ignores it.
        let Some(line) = movetext.open.pop() else {
            return ControlFlow::Continue(());
        };
        movetext.after_move = line.last.is_some();
        if movetext.after_move {
            movetext.steps.push(Step::Close);
        } else {
            // An empty variation is no variation: its `Open`, the last
            // step (nothing opens inside a variation before its first
            // move), goes.
            movetext.steps.pop();
        }
        let pending = std::mem::take(&mut movetext.pending);
        match movetext.open.last() {
            None => {
                let mut steps = std::mem::take(&mut movetext.steps);
                let notes = movetext.notes();
                notes.variations.append(&mut steps);
                // A comment that started an empty variation: the mainline
                // move's, where it was written.
                join_comment(&mut notes.comment, &pending);
                // The buffer, emptied, serves the next variation.
                movetext.steps = steps;
            }
            Some(outer) => {
                let at = outer
                    .last
                    .expect("begin_variation opens a nested variation only after a move");
                return broken_by(movetext.variation_comment(at, &pending));
            }
        }
        ControlFlow::Continue(())
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
        if !movetext.open.is_empty() {
            return Err(misplaced("a variation without its closing parenthesis"));
        }
        Ok(movetext.game)
    }
}

/// Reading goes on after `Ok`, and stops with the game rejected for the
/// reason of an `Err`.
fn broken_by(result: Result<(), RejectReason>) -> ControlFlow<Result<RawGame, RejectReason>> {
    match result {
        Ok(()) => ControlFlow::Continue(()),
        Err(reason) => ControlFlow::Break(Err(reason)),
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

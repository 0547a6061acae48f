//! PGN reading: the only module that touches pgn-reader's `Visitor` API, so
//! that crate's API churn stays in one file. It holds two visitors: the
//! game parser behind [`take_game`], and the bare token counter of
//! [`scan_only`] (the benchmark's parse-only baseline).
//!
//! Two steps, on purpose:
//!
//! 1. [`GameSplitter`] (one thread, over the decompressed stream) finds
//!    where each game ends and where its tags are, with a small state
//!    machine that follows pgn-reader's own rules, so the game boundaries
//!    (and game numbers, offsets and tags of well-formed games) are
//!    exactly pgn-reader's. Where pgn-reader would lose its footing in the
//!    tags (a quote inside a value, a value cut by a newline, a stray `]`)
//!    and split one game into a fragment and a phantom game, the splitter
//!    keeps the game whole. A lone CR ends a line, as in python-chess.
//!    Each game keeps its verbatim bytes (for the rejects table), its game
//!    number and the byte offset of its first byte. Memory is bounded: a
//!    game larger than `max_game_bytes` is kept only as its first bytes and
//!    marked too large, whatever its size, and at most [`MAX_TAGS`] tags
//!    are recorded.
//! 2. [`take_game`] (in parallel, per chunk) decodes the tags, parses the
//!    movetext with pgn-reader (mainline, clocks, evals, NAGs), makes the
//!    checks that need the raw bytes (size, garbage, a missing result
//!    marker, bytes PostgreSQL cannot store) and hands the [`RawGame`] on
//!    to replay.
//!
//! It must not replay moves (that is `replay`) nor read anything but the
//! `Read` it is given.

use std::{
    borrow::Cow,
    io::{self, Read},
    ops::{ControlFlow, Range},
    sync::Arc,
};

use pgn_reader::{Nag, Outcome, RawComment, RawTag, Reader, SanPlus, Skip, Visitor};
use shakmaty::KnownOutcome;

use crate::{
    model::{GameResult, RawGame, RawMove, check_storable, parse_comment_commands},
    reject::{RejectReason, SourcePos},
};

/// Longest tag line pgn-reader is asked to support in [`scan_only`], and
/// how far the splitter looks past a tag value cut by a newline for the
/// rest of that value.
const TAG_LINE_BYTES: usize = 4096;

/// Tags recorded per game at most; a game with more is rejected. Real games
/// carry a few dozen; without a bound, a hostile game of tiny tags costs
/// ~100 bytes of memory per 7 bytes of input.
pub const MAX_TAGS: usize = 1000;

/// Bytes read from the source at a time.
const BLOCK: usize = 64 * 1024;

/// One game as read: its verbatim bytes and where its parts are.
#[derive(Debug, Clone)]
pub struct GameChunk {
    /// Where the game is.
    pub pos: SourcePos,
    /// The game's bytes; only the first `max_game_bytes` when `total_len` is larger.
    pub bytes: Vec<u8>,
    /// The game's full length in the stream.
    pub total_len: u64,
    /// Where the splitter found the tags and the movetext.
    scan: GameScan,
}

impl GameChunk {
    /// A game of an exchange format that cannot be rendered as PGN: it is
    /// rejected for `reason` by [`take_game`], `bytes` (what was stored)
    /// kept as its raw bytes.
    pub fn undecodable(pos: SourcePos, bytes: Vec<u8>, reason: String) -> GameChunk {
        GameChunk {
            pos,
            total_len: bytes.len() as u64,
            bytes,
            scan: GameScan {
                problem: Some(RejectReason::Undecodable(reason)),
                ..GameScan::default()
            },
        }
    }

    /// Whether the chunk holds only the head of a larger game.
    pub fn is_truncated(&self) -> bool {
        self.total_len > self.bytes.len() as u64
    }
}

/// A tag found by the splitter, by offsets into the game's bytes.
#[derive(Debug, Clone)]
enum TagSpan {
    /// `[Name "value"]` as pgn-reader reads it: the name is what precedes
    /// the opening quote (less one space); the value is backslash-escaped.
    Quoted {
        name: Range<usize>,
        value: Range<usize>,
    },
    /// A whole tag line pgn-reader misreads (`[Event "The "Big" Open"]`):
    /// read as python-chess reads it, else the game is rejected.
    Line(Range<usize>),
}

/// What the splitter learnt about one game.
#[derive(Debug, Clone, Default)]
struct GameScan {
    tags: Vec<TagSpan>,
    /// Offset of the movetext in the game's bytes (its length when none).
    movetext: Option<usize>,
    /// Why the game cannot be read, when the splitter already knows.
    problem: Option<RejectReason>,
}

/// The scanner needs bytes that are not read yet.
#[derive(Debug)]
struct More;

/// Where the scanner stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Boundary {
    /// The next game starts at this stream offset.
    NextGame(u64),
    /// The stream ended.
    End,
}

/// The bytes read so far, seen with every lone CR as a newline (1:1, so
/// offsets are the stream's).
struct Window<'a> {
    data: &'a [u8],
    base: u64,
    eof: bool,
}

impl Window<'_> {
    /// The bytes read from stream offset `at` on (empty past them).
    fn from(&self, at: u64) -> &[u8] {
        let i = at.checked_sub(self.base).expect(
            "the scanner never looks behind its position, and the splitter keeps every byte \
             from there on",
        );
        // Past `usize` is past the bytes in memory.
        usize::try_from(i)
            .ok()
            .and_then(|i| self.data.get(i..))
            .unwrap_or_default()
    }

    /// The byte at stream offset `at`, `None` at the end of the stream.
    fn get(&self, at: u64) -> Result<Option<u8>, More> {
        let rest = self.from(at);
        match rest.first() {
            Some(b'\r') => match rest.get(1) {
                Some(b'\n') => Ok(Some(b'\r')),
                Some(_) => Ok(Some(b'\n')),
                None if self.eof => Ok(Some(b'\n')),
                None => Err(More),
            },
            Some(&b) => Ok(Some(b)),
            None if self.eof => Ok(None),
            None => Err(More),
        }
    }

    /// The first offset at or after `from` whose byte is `needle` (CR
    /// counting as a newline when it is one); `None` at the end. When the
    /// bytes read so far hold none, `Err` gives the offset to search on from.
    fn find(&self, from: u64, needle: u8) -> Result<Option<u64>, u64> {
        let rest = self.from(from);
        let mut at = 0;
        loop {
            let hit = rest[at..]
                .iter()
                .position(|&c| c == needle || (needle == b'\n' && c == b'\r'));
            match hit {
                Some(p) => {
                    let offset = from + (at + p) as u64;
                    match self.get(offset) {
                        Ok(Some(b)) if b == needle => return Ok(Some(offset)),
                        Ok(_) => at += p + 1,
                        // A CR at the end of what was read: look again there.
                        Err(More) => return Err(offset),
                    }
                }
                None if self.eof => return Ok(None),
                None => return Err(from + rest.len() as u64),
            }
        }
    }
}

/// Scanner state, between calls (pgn-reader's reading loop, unrolled).
#[derive(Debug, Clone, Copy)]
enum State {
    /// Whitespace and `%` lines before a game (pgn-reader's `before_game`).
    Between {
        new_line: bool,
        bom: bool,
    },
    /// Whitespace after a tag (pgn-reader's `skip_whitespace`); `line` is
    /// the tag's `[` while still on the tag's line.
    AfterTag {
        new_line: bool,
        line: Option<u64>,
    },
    /// A `%` line, skipped through its newline.
    Escape {
        between: bool,
    },
    /// `[` opens a tag, anything else the movetext.
    TagOrMovetext,
    /// After `[`: the name, up to `"`, `]` or a newline (`space`: the
    /// last byte was a space, which is not part of the name).
    TagName {
        open: u64,
        space: bool,
    },
    /// Inside the quotes.
    TagValue {
        open: u64,
        name: (u64, u64),
        value: u64,
    },
    /// pgn-reader's `skip_ket`, with the tag to record when it ends well.
    Ket {
        open: u64,
        tag: Option<(u64, u64, u64, u64)>,
    },
    /// The rest of a malformed tag line.
    RestOfLine {
        open: u64,
        replace: bool,
    },
    Movetext,
    Comment,
    /// `;` comment or `%` line inside the movetext: up to the newline.
    LineComment,
}

/// One step of the scanner in one state: `Some` when the scan ends at a
/// boundary, `None` to go on in the state it set.
type Step = Result<Option<Boundary>, More>;

/// Finds game boundaries and tags; see the module documentation.
#[derive(Debug)]
struct Scanner {
    pos: u64,
    state: State,
    start: u64,
    tag_count: usize,
    scan: GameScan,
}

impl Scanner {
    fn begin(&mut self, start: u64) {
        self.start = start;
        self.pos = start;
        self.state = State::TagOrMovetext;
        self.tag_count = 0;
        self.scan = GameScan::default();
    }

    /// [`Window::find`] from the scanner's position, which moves on over
    /// the bytes searched when more are needed (so a long comment is
    /// searched once, and its bytes can be dropped).
    fn seek(&mut self, w: &Window<'_>, needle: u8) -> Result<Option<u64>, More> {
        w.find(self.pos, needle).map_err(|resume| {
            self.pos = resume;
            More
        })
    }

    /// Stream offset `at` within the current game, `None` past `usize`: a
    /// game that long is past any size cap (a `usize`), so it is rejected
    /// as too large before its spans are read, and none is recorded.
    fn rel(&self, at: u64) -> Option<usize> {
        let within = at
            .checked_sub(self.start)
            .expect("the scanner records offsets of the game it is in, at or after its start");
        usize::try_from(within).ok()
    }

    fn push(&mut self, span: TagSpan) {
        if self.scan.tags.len() < MAX_TAGS {
            self.scan.tags.push(span);
        }
    }

    fn fail(&mut self, problem: RejectReason) {
        self.scan.problem.get_or_insert(problem);
    }

    fn push_quoted(&mut self, (name_start, name_end, value, value_end): (u64, u64, u64, u64)) {
        let (Some(name_start), Some(name_end), Some(value), Some(value_end)) = (
            self.rel(name_start),
            self.rel(name_end),
            self.rel(value),
            self.rel(value_end),
        ) else {
            return;
        };
        self.push(TagSpan::Quoted {
            name: name_start..name_end,
            value: value..value_end,
        });
    }

    /// Scans on until the current game ends (or, between games, until the
    /// next one starts).
    fn scan(&mut self, w: &Window<'_>) -> Result<Boundary, More> {
        loop {
            let ended = match self.state {
                State::Between { new_line, bom } => self.between(w, new_line, bom)?,
                State::Escape { between } => self.escape(w, between)?,
                State::AfterTag { new_line, line } => self.after_tag(w, new_line, line)?,
                State::TagOrMovetext => self.tag_or_movetext(w)?,
                State::TagName { open, space } => self.tag_name(w, open, space)?,
                State::TagValue { open, name, value } => self.tag_value(w, open, name, value)?,
                State::Ket { open, tag } => self.ket(w, open, tag)?,
                State::RestOfLine { open, replace } => self.rest_of_line(w, open, replace)?,
                State::Movetext => self.movetext(w)?,
                State::Comment => self.comment(w)?,
                State::LineComment => self.line_comment(w)?,
            };
            if let Some(boundary) = ended {
                return Ok(boundary);
            }
        }
    }

    /// Whitespace and `%` lines before a game, and a BOM where a game may
    /// start.
    fn between(&mut self, w: &Window<'_>, new_line: bool, bom: bool) -> Step {
        if bom {
            let mut head = [0u8; 3];
            for (k, slot) in head.iter_mut().enumerate() {
                *slot = w.get(self.pos + k as u64)?.unwrap_or(0);
            }
            if head == *b"\xef\xbb\xbf" {
                self.pos += 3;
            }
            self.state = State::Between {
                new_line,
                bom: false,
            };
            return Ok(None);
        }
        match w.get(self.pos)? {
            None => return Ok(Some(Boundary::End)),
            Some(b' ' | b'\t' | b'\r') => self.pos += 1,
            Some(b'\n') => {
                self.pos += 1;
                self.state = State::Between {
                    new_line: true,
                    bom: false,
                };
            }
            Some(b'%') if new_line => {
                self.pos += 1;
                self.state = State::Escape { between: true };
            }
            Some(_) => return Ok(Some(Boundary::NextGame(self.pos))),
        }
        Ok(None)
    }

    /// A `%` line, skipped through its newline.
    fn escape(&mut self, w: &Window<'_>, between: bool) -> Step {
        let Some(eol) = self.seek(w, b'\n')? else {
            return Ok(Some(Boundary::End));
        };
        self.pos = eol + 1;
        self.state = if between {
            State::Between {
                new_line: true,
                bom: false,
            }
        } else {
            State::AfterTag {
                new_line: true,
                line: None,
            }
        };
        Ok(None)
    }

    /// Whitespace after a tag, or a stray `]` or `"` on its line.
    fn after_tag(&mut self, w: &Window<'_>, new_line: bool, line: Option<u64>) -> Step {
        match w.get(self.pos)? {
            None => return Ok(Some(Boundary::End)),
            Some(b' ' | b'\t' | b'\r') => self.pos += 1,
            Some(b'\n') => {
                self.pos += 1;
                self.state = State::AfterTag {
                    new_line: true,
                    line: None,
                };
            }
            Some(b'%') if new_line => {
                self.pos += 1;
                self.state = State::Escape { between: false };
            }
            // A stray `]` or `"` after a tag on its line: pgn-reader
            // would start the movetext there.
            Some(b']' | b'"') if line.is_some() => {
                self.state = State::RestOfLine {
                    open: line.unwrap_or(self.pos),
                    replace: true,
                };
            }
            Some(_) => self.state = State::TagOrMovetext,
        }
        Ok(None)
    }

    /// A tag opens, or the movetext starts.
    fn tag_or_movetext(&mut self, w: &Window<'_>) -> Step {
        match w.get(self.pos)? {
            None => return Ok(Some(Boundary::End)),
            Some(b'[') => {
                self.tag_count += 1;
                if self.tag_count > MAX_TAGS {
                    self.fail(RejectReason::TooManyTags { limit: MAX_TAGS });
                }
                self.state = State::TagName {
                    open: self.pos,
                    space: false,
                };
                self.pos += 1;
            }
            Some(_) => {
                self.scan.movetext = self.rel(self.pos);
                self.state = State::Movetext;
            }
        }
        Ok(None)
    }

    /// A tag's name, up to its opening quote.
    fn tag_name(&mut self, w: &Window<'_>, open: u64, space: bool) -> Step {
        match w.get(self.pos)? {
            None => {
                self.fail(RejectReason::Syntax("unterminated tag".into()));
                return Ok(Some(Boundary::End));
            }
            Some(b'"') => {
                let name_end = if space { self.pos - 1 } else { self.pos };
                self.state = State::TagValue {
                    open,
                    name: (open + 1, name_end),
                    value: self.pos + 1,
                };
                self.pos += 1;
            }
            Some(b'\n' | b']') => {
                self.pos += 1;
                self.state = State::Ket { open, tag: None };
            }
            Some(b) => {
                self.pos += 1;
                self.state = State::TagName {
                    open,
                    space: b == b' ',
                };
            }
        }
        Ok(None)
    }

    /// A tag's quoted value, escapes skipped; a newline inside it either ends
    /// it (pgn-reader) or is read through (a value cut by a newline).
    fn tag_value(&mut self, w: &Window<'_>, open: u64, name: (u64, u64), value: u64) -> Step {
        match w.get(self.pos)? {
            None => {
                self.fail(RejectReason::Syntax("unterminated tag".into()));
                return Ok(Some(Boundary::End));
            }
            Some(b'\\') => {
                // pgn-reader skips the escaped byte, whatever it is.
                self.pos += 1;
                if w.get(self.pos)?.is_some() {
                    self.pos += 1;
                }
            }
            Some(b'"') => {
                self.state = State::Ket {
                    open,
                    tag: Some((name.0, name.1, value, self.pos)),
                };
                self.pos += 1;
            }
            Some(b'\n') => {
                if let Some(close) = continued_value(w, open, self.pos)? {
                    self.fail(RejectReason::Syntax("newline inside a tag value".into()));
                    self.pos = close + 1;
                    self.state = State::AfterTag {
                        new_line: false,
                        line: None,
                    };
                } else {
                    // pgn-reader's reading: the value ends at the newline.
                    self.push_quoted((name.0, name.1, value, self.pos));
                    self.state = State::Ket { open, tag: None };
                }
            }
            Some(_) => self.pos += 1,
        }
        Ok(None)
    }

    /// After the closing quote, up to the `]`: the tag is recorded when it ends
    /// well.
    fn ket(&mut self, w: &Window<'_>, open: u64, tag: Option<(u64, u64, u64, u64)>) -> Step {
        match w.get(self.pos)? {
            Some(b' ' | b'\t' | b'\r') => self.pos += 1,
            byte @ (None | Some(b']' | b'\n' | b'[')) => {
                if let Some(tag) = tag {
                    self.push_quoted(tag);
                }
                match byte {
                    None => return Ok(Some(Boundary::End)),
                    Some(b'[') => self.state = State::TagOrMovetext,
                    Some(b']') => {
                        self.pos += 1;
                        self.state = State::AfterTag {
                            new_line: false,
                            line: tag.map(|_| open),
                        };
                    }
                    Some(_) => {
                        self.pos += 1;
                        self.state = State::AfterTag {
                            new_line: true,
                            line: None,
                        };
                    }
                }
            }
            // Text after a closing quote: a quote inside the value.
            Some(_) if tag.is_some() => {
                self.state = State::RestOfLine {
                    open,
                    replace: false,
                };
            }
            Some(_) => self.state = State::TagOrMovetext,
        }
        Ok(None)
    }

    /// The rest of a malformed tag line, recorded whole.
    fn rest_of_line(&mut self, w: &Window<'_>, open: u64, replace: bool) -> Step {
        let eol = self.seek(w, b'\n')?;
        let end = eol.unwrap_or(self.pos.max(w.base + w.data.len() as u64));
        if replace && self.scan.tags.len() < MAX_TAGS {
            self.scan.tags.pop();
        }
        if let (Some(open), Some(end)) = (self.rel(open), self.rel(end)) {
            self.push(TagSpan::Line(open..end));
        }
        let Some(eol) = eol else {
            return Ok(Some(Boundary::End));
        };
        self.pos = eol + 1;
        self.state = State::AfterTag {
            new_line: true,
            line: None,
        };
        Ok(None)
    }

    /// The movetext, up to a comment or a line that starts the next game.
    fn movetext(&mut self, w: &Window<'_>) -> Step {
        let rest = w.from(self.pos);
        let Some(p) = rest.iter().position(|&c| MOVETEXT_STOP[usize::from(c)]) else {
            if w.eof {
                return Ok(Some(Boundary::End));
            }
            self.pos += rest.len() as u64;
            return Err(More);
        };
        let at = self.pos + p as u64;
        match w.get(at)? {
            Some(b'{') => {
                self.pos = at + 1;
                self.state = State::Comment;
            }
            Some(b';') => {
                self.pos = at + 1;
                self.state = State::LineComment;
            }
            Some(b'\n') => match w.get(at + 1)? {
                None => return Ok(Some(Boundary::End)),
                Some(b'%') => {
                    self.pos = at + 2;
                    self.state = State::LineComment;
                }
                Some(b'[' | b'\n') => {
                    self.pos = at + 1;
                    self.state = State::Between {
                        new_line: true,
                        bom: true,
                    };
                }
                // A CR that is not a newline is followed by one.
                Some(b'\r') => {
                    self.pos = at + 2;
                    self.state = State::Between {
                        new_line: true,
                        bom: true,
                    };
                }
                Some(_) => self.pos = at + 1,
            },
            _ => self.pos = at + 1,
        }
        Ok(None)
    }

    /// A `{` comment, through its `}`.
    fn comment(&mut self, w: &Window<'_>) -> Step {
        let Some(close) = self.seek(w, b'}')? else {
            return Ok(Some(Boundary::End));
        };
        self.pos = close + 1;
        self.state = State::Movetext;
        Ok(None)
    }

    /// A `;` comment or `%` line in the movetext, up to its newline.
    fn line_comment(&mut self, w: &Window<'_>) -> Step {
        let Some(eol) = self.seek(w, b'\n')? else {
            return Ok(Some(Boundary::End));
        };
        self.pos = eol;
        self.state = State::Movetext;
        Ok(None)
    }
}

/// Bytes the movetext scan stops at: a comment opens, a line ends.
const MOVETEXT_STOP: [bool; 256] = {
    let mut table = [false; 256];
    table[b'{' as usize] = true;
    table[b';' as usize] = true;
    table[b'\n' as usize] = true;
    table[b'\r' as usize] = true;
    table
};

/// A tag value that a newline cut (`[Event "The` / `Big"]`): whether the
/// following lines, up to a blank line, a `[` or `%` line, hold the rest of
/// it, i.e. an unescaped `"` followed by `]`. Then the offset of that `]`;
/// else pgn-reader's reading stands (the value ends at the newline). Looks
/// at most [`TAG_LINE_BYTES`] past the tag's `[`.
fn continued_value(w: &Window<'_>, open: u64, newline: u64) -> Result<Option<u64>, More> {
    let limit = open + TAG_LINE_BYTES as u64;
    let mut at = newline + 1;
    'lines: loop {
        while let Some(b' ' | b'\t' | b'\r') = w.get(at)? {
            at += 1;
        }
        if matches!(w.get(at)?, None | Some(b'\n' | b'[' | b'%')) {
            return Ok(None);
        }
        while at < limit {
            match w.get(at)? {
                None => return Ok(None),
                Some(b'\n') => {
                    at += 1;
                    continue 'lines;
                }
                Some(b'\\') => at += 2,
                Some(b'"') => {
                    let mut ket = at + 1;
                    while let Some(b' ' | b'\t' | b'\r') = w.get(ket)? {
                        ket += 1;
                    }
                    if w.get(ket)? == Some(b']') {
                        return Ok(Some(ket));
                    }
                    at += 1;
                }
                Some(_) => at += 1,
            }
        }
        return Ok(None);
    }
}

/// Cuts a decompressed PGN stream into one [`GameChunk`] per game.
pub struct GameSplitter<R> {
    input: R,
    file: Arc<str>,
    games: u64,
    cap: usize,
    /// Stream bytes from offset `base` on: the current game's (all of them
    /// while it is within the cap) and the read-ahead.
    buf: Vec<u8>,
    base: u64,
    eof: bool,
    scanner: Scanner,
    /// Where the next game starts, once found.
    next_start: Option<u64>,
    /// The current game's first `cap` bytes, once it outgrew the cap.
    head: Option<Vec<u8>>,
    game_start: Option<u64>,
}

impl<R: Read> GameSplitter<R> {
    /// Splits `input`, whose first byte is at `start_offset` of the
    /// decompressed stream (non-zero when resuming) and whose first game is
    /// game number `games_before + 1`.
    pub fn new(
        input: R,
        file: Arc<str>,
        start_offset: u64,
        games_before: u64,
        limits: ParseLimits,
    ) -> Self {
        GameSplitter {
            input,
            file,
            games: games_before,
            // A game is held whole up to the cap, so the cap is a size in
            // memory; a larger one would be reported as a limit it is not.
            cap: usize::try_from(limits.max_game_bytes)
                .expect(
                    "max_game_bytes is at most config::MAX_GAME_BYTES (1 GiB) from the settings, \
                     and a few MiB from every other caller",
                )
                .max(1),
            buf: Vec::new(),
            base: start_offset,
            eof: false,
            scanner: Scanner {
                pos: start_offset,
                state: State::Between {
                    new_line: true,
                    bom: true,
                },
                start: start_offset,
                tag_count: 0,
                scan: GameScan::default(),
            },
            next_start: None,
            head: None,
            game_start: None,
        }
    }

    /// Games handed out so far (including the ones skipped before a resume).
    pub fn games_read(&self) -> u64 {
        self.games
    }

    /// Scans until a boundary, reading more input as needed.
    fn run(&mut self) -> io::Result<Boundary> {
        loop {
            let window = Window {
                data: &self.buf,
                base: self.base,
                eof: self.eof,
            };
            match self.scanner.scan(&window) {
                Ok(boundary) => return Ok(boundary),
                Err(More) => self.fill()?,
            }
        }
    }

    /// Where stream offset `at` is in the buffer: `at` is the current game's
    /// start, the scanner's position or the game's end, which the buffer
    /// holds (only bytes before them are ever dropped) or ends at.
    fn index(&self, at: u64) -> usize {
        at.checked_sub(self.base)
            .and_then(|i| usize::try_from(i).ok())
            .filter(|&i| i <= self.buf.len())
            .expect("the buffer keeps the current game and the scanner's position, and ends at the read-ahead")
    }

    /// Reads the next block, first dropping what is no longer needed.
    fn fill(&mut self) -> io::Result<()> {
        let pos = self.scanner.pos;
        if let Some(start) = self.game_start
            && self.head.is_none()
            && pos - start > self.cap as u64
        {
            let from = self.index(start);
            self.head = self.buf.get(from..from + self.cap).map(<[u8]>::to_vec);
        }
        let keep = match self.game_start {
            Some(start) if self.head.is_none() => start,
            _ => pos,
        };
        let dead = self.index(keep);
        if dead >= BLOCK && dead * 2 >= self.buf.len() {
            self.buf.drain(..dead);
            self.base += dead as u64;
        }
        let len = self.buf.len();
        self.buf.resize(len + BLOCK, 0);
        loop {
            match self.input.read(&mut self.buf[len..]) {
                Ok(n) => {
                    self.buf.truncate(len + n);
                    self.eof = n == 0;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.buf.truncate(len);
                    return Err(e);
                }
            }
        }
    }

    /// The next game, split and with its tags located, `None` at the end of
    /// the stream. An `Err` means the source itself failed (e.g. a corrupt
    /// compressed stream); every game returned before it is complete.
    pub fn next_chunk(&mut self) -> io::Result<Option<GameChunk>> {
        let start = match self.next_start.take() {
            Some(start) => start,
            None => match self.run()? {
                Boundary::NextGame(start) => start,
                Boundary::End => return Ok(None),
            },
        };
        self.scanner.begin(start);
        self.game_start = Some(start);
        self.head = None;
        let end = match self.run() {
            Ok(Boundary::NextGame(next)) => {
                self.next_start = Some(next);
                next
            }
            Ok(Boundary::End) => self.base + self.buf.len() as u64,
            Err(e) => {
                // Resume scanning this game if asked again.
                self.next_start = Some(start);
                return Err(e);
            }
        };
        self.game_start = None;
        let bytes = match self.head.take() {
            Some(head) => head,
            None => {
                let (from, to) = (self.index(start), self.index(end));
                self.buf[from..to].to_vec()
            }
        };
        self.games += 1;
        Ok(Some(GameChunk {
            pos: SourcePos {
                file: Arc::clone(&self.file),
                game_number: self.games,
                byte_offset: start,
            },
            bytes,
            total_len: end - start,
            scan: std::mem::take(&mut self.scanner.scan),
        }))
    }
}

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
    let movetext = text
        .get(scan.movetext.unwrap_or(text.len())..)
        .expect(SPAN_WITHIN_GAME);
    let mut game = parse_movetext(movetext, limits.max_plies)?;
    game.tags = tags;
    if game.tags.is_empty() && game.moves.is_empty() && game.movetext_result.is_none() {
        return Err(RejectReason::Empty);
    }
    // Before the garbage check: a game cut off mid-token is "unterminated".
    if game.movetext_result.is_none() {
        return Err(RejectReason::Unterminated);
    }
    if let Some(token) = find_garbage(&text) {
        return Err(RejectReason::Garbage { token });
    }
    check_storable(&game.tags)?;
    Ok(game)
}

/// The game's bytes with each lone CR (old Mac line ends) turned into a
/// newline, as the splitter saw them; borrowed when there is none.
fn lone_cr_as_newline(bytes: &[u8]) -> Cow<'_, [u8]> {
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

/// Tag text is UTF-8 in modern PGN; older files use Latin-1, which is
/// decoded byte-for-char rather than replaced, so names survive.
pub fn decode_text(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(bytes.iter().map(|&b| char::from(b)).collect()),
    }
}

/// Finds a movetext token that is neither a move, a move number, a result,
/// a NAG nor an annotation. pgn-reader skips such tokens silently; pgnload
/// rejects the game instead of importing something other than what was
/// written.
fn find_garbage(chunk: &[u8]) -> Option<String> {
    let mut i = 0;
    let mut line_start = true;
    let mut in_tags = true;
    while let Some(&b) = chunk.get(i) {
        match b {
            b'\n' => {
                line_start = true;
                i += 1;
                continue;
            }
            b' ' | b'\t' | b'\r' | b'(' | b')' => {}
            b'[' if line_start && in_tags => {
                i = skip_to(chunk, i, b'\n');
                continue;
            }
            b'%' if line_start => {
                i = skip_to(chunk, i, b'\n');
                continue;
            }
            b'{' => {
                in_tags = false;
                i = skip_to(chunk, i, b'}') + 1;
                line_start = false;
                continue;
            }
            b';' => {
                in_tags = false;
                i = skip_to(chunk, i, b'\n');
                continue;
            }
            _ => {
                in_tags = false;
                // At least one byte: a stray `}` is a token of its own.
                let end = chunk[i + 1..]
                    .iter()
                    .position(|&c| TOKEN_END[usize::from(c)])
                    .map_or(chunk.len(), |p| i + 1 + p);
                let token = &chunk[i..end];
                if !is_movetext_token(token) {
                    let shown = &token[..token.len().min(40)];
                    return Some(decode_text(shown).into_owned());
                }
                i = end;
                line_start = false;
                continue;
            }
        }
        line_start = false;
        i += 1;
    }
    None
}

/// Bytes that end a movetext token: whitespace, braces, parentheses, `;`.
const TOKEN_END: [bool; 256] = {
    let mut table = [false; 256];
    let ends = b" \t\r\n{}();";
    let mut k = 0;
    while k < ends.len() {
        table[ends[k] as usize] = true;
        k += 1;
    }
    table
};

/// The index of the first `needle` at or after `from`, else `chunk.len()`.
/// Eight bytes per step (tag lines and clock comments are most of a game's
/// bytes): a byte equal to `needle` becomes zero, and the classic zero-byte
/// test finds it; its lowest hit is always exact.
fn skip_to(chunk: &[u8], from: usize, needle: u8) -> usize {
    const LOW: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let splat = u64::from_ne_bytes([needle; 8]);
    let rest = chunk.get(from..).unwrap_or_default();
    let mut words = rest.chunks_exact(8);
    let mut at = from;
    for word in &mut words {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        let x = u64::from_le_bytes(bytes) ^ splat;
        let hits = x.wrapping_sub(LOW) & !x & HIGH;
        if hits != 0 {
            return at + (hits.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&c| c == needle)
        .map_or(chunk.len(), |p| at + p)
}

fn is_movetext_token(token: &[u8]) -> bool {
    // A move number, possibly glued to the move: `12.`, `12...`, `7.N1f3`.
    let digits = token.iter().take_while(|b| b.is_ascii_digit()).count();
    let dots = token[digits..].iter().take_while(|&&b| b == b'.').count();
    let rest = if digits > 0 && (dots > 0 || digits == token.len()) {
        &token[digits + dots..]
    } else {
        token
    };
    if rest.is_empty() || is_plain_san(rest) {
        return true;
    }
    const RESULTS: &[&[u8]] = &[b"1-0", b"0-1", b"1/2-1/2", b"*", "½-½".as_bytes()];
    const SYMBOLS: &[&[u8]] = &[
        b"e.p.", b"ep", b"+-", b"-+", b"=", b"+/-", b"-/+", b"+=", b"=+", b"+/=", b"=/+", b"0-0",
        b"0-0-0", b"0-0+", b"0-0-0+", b"0-0#", b"0-0-0#",
    ];
    if RESULTS.contains(&rest) || SYMBOLS.contains(&rest) {
        return true;
    }
    if let Some(nag) = rest.strip_prefix(b"$") {
        return !nag.is_empty() && nag.iter().all(u8::is_ascii_digit);
    }
    let annotations = rest
        .iter()
        .rev()
        .take_while(|&&b| b == b'!' || b == b'?')
        .count();
    let mv = &rest[..rest.len() - annotations];
    mv.is_empty() || SanPlus::from_ascii(mv).is_ok()
}

/// The common SAN shapes (`e4`, `exd5`, `Nbd7`, `R1xe2+`, `e8=Q#`:
/// `[NBRQK]?[a-h]?[1-8]?x?[a-h][1-8](=[NBRQ])?[+#]?`), checked without
/// running the SAN parser again. Every such token parses as `SanPlus`, so
/// this only skips work: anything else still goes to the parser.
fn is_plain_san(token: &[u8]) -> bool {
    let t = match token {
        [rest @ .., b'+' | b'#'] => rest,
        _ => token,
    };
    let t = match t {
        [rest @ .., b'=', b'N' | b'B' | b'R' | b'Q'] => rest,
        _ => t,
    };
    let [prefix @ .., b'a'..=b'h', b'1'..=b'8'] = t else {
        return false;
    };
    let mut prefix = prefix;
    if let [b'N' | b'B' | b'R' | b'Q' | b'K', rest @ ..] = prefix {
        prefix = rest;
    }
    if let [b'a'..=b'h', rest @ ..] = prefix {
        prefix = rest;
    }
    if let [b'1'..=b'8', rest @ ..] = prefix {
        prefix = rest;
    }
    if let [b'x', rest @ ..] = prefix {
        prefix = rest;
    }
    prefix.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_san_shapes_all_parse_as_san() {
        // Every string of up to 5 bytes over SAN's alphabet: whatever the
        // shortcut accepts, the parser accepts too.
        let alphabet = b"NBRQKPaeh18x=+#-O@";
        let mut tokens: Vec<Vec<u8>> = vec![Vec::new()];
        let mut accepted = 0;
        for _ in 0..5 {
            tokens = tokens
                .iter()
                .flat_map(|t| {
                    alphabet.iter().map(move |&b| {
                        let mut next = t.clone();
                        next.push(b);
                        next
                    })
                })
                .collect();
            for token in &tokens {
                if is_plain_san(token) {
                    assert!(
                        SanPlus::from_ascii(token).is_ok(),
                        "{}",
                        String::from_utf8_lossy(token)
                    );
                    accepted += 1;
                }
            }
        }
        assert!(accepted > 1000, "only {accepted} tokens took the shortcut");
        assert!(is_plain_san(b"Qh4xe1#") && is_plain_san(b"Nb1c3") && is_plain_san(b"e8=Q+"));
    }

    #[test]
    fn skip_to_finds_the_first_needle_at_any_offset() {
        let text: Vec<u8> = (0..200u32)
            .map(|i| b"ab}\n{x"[(i * 7 % 11 % 6) as usize])
            .collect();
        for from in 0..=text.len() {
            for needle in [b'}', b'\n', b'{', b'z'] {
                let expected = text[from..]
                    .iter()
                    .position(|&c| c == needle)
                    .map_or(text.len(), |p| from + p);
                assert_eq!(skip_to(&text, from, needle), expected, "from {from}");
            }
        }
    }

    #[test]
    fn only_lone_crs_become_newlines_wherever_they_are() {
        let naive = |bytes: &[u8]| -> Vec<u8> {
            (0..bytes.len())
                .map(|i| match (bytes[i], bytes.get(i + 1)) {
                    (b'\r', Some(b'\n')) => b'\r',
                    (b'\r', _) => b'\n',
                    (b, _) => b,
                })
                .collect()
        };
        // Every placement of a CR, a CRLF and a CRCRLF in a 19-byte line,
        // across the eight-byte steps of the search.
        let mut changed = 0;
        for at in 0..19 {
            for insert in [&b"\r"[..], b"\r\n", b"\r\r\n", b"\r\nx\r"] {
                let mut text = b"1. e4 e5 2. Nf3 *\r\n".to_vec();
                text.splice(at..at, insert.iter().copied());
                let out = lone_cr_as_newline(&text);
                assert_eq!(&*out, &naive(&text)[..], "{text:?}");
                assert_eq!(matches!(out, Cow::Borrowed(_)), *out == *text, "{text:?}");
                changed += usize::from(*out != *text);
            }
        }
        assert!(changed >= 19 * 3, "{changed}");
        assert!(matches!(
            lone_cr_as_newline(b"no cr at all"),
            Cow::Borrowed(_)
        ));
    }

    fn split_all(pgn: &[u8], cap: u64) -> Vec<GameChunk> {
        let limits = ParseLimits {
            max_game_bytes: cap,
            ..LIMITS
        };
        let mut splitter = GameSplitter::new(pgn, Arc::from("t.pgn"), 0, 0, limits);
        let mut chunks = Vec::new();
        while let Some(chunk) = splitter.next_chunk().expect("in-memory source cannot fail") {
            chunks.push(chunk);
        }
        chunks
    }

    const LIMITS: ParseLimits = ParseLimits {
        max_plies: 1000,
        max_game_bytes: 1 << 20,
    };

    #[test]
    fn splitter_gives_offsets_and_numbers_of_each_game() {
        let pgn = b"\xef\xbb\xbf[Event \"a\"]\n\n1. e4 e5 1-0\n\n[Event \"b\"]\n\n1. d4 *\n";
        let chunks = split_all(pgn, 1 << 20);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].pos.byte_offset, 3);
        assert_eq!(chunks[0].pos.game_number, 1);
        assert!(chunks[0].bytes.starts_with(b"[Event \"a\"]"));
        let second = chunks[1].pos.byte_offset as usize;
        assert!(pgn[second..].starts_with(b"[Event \"b\"]"));
        assert_eq!(chunks[1].bytes, &pgn[second..]);
        assert_eq!(chunks[1].pos.game_number, 2);
    }

    #[test]
    fn parse_keeps_mainline_clock_eval_and_nag() {
        let pgn = b"[Site \"https://lichess.org/abcdefgh\"]\n\n1. e4 { [%eval 0.2] [%clk 0:05:00] } e5?! (1... c5 2. Nf3) 2. Nf3 $1 *\n";
        let mut chunk = split_all(pgn, 1 << 20).remove(0);
        let game = take_game(&mut chunk, LIMITS).expect("valid game");
        assert_eq!(game.moves.len(), 3);
        assert_eq!(game.moves[0].clock_ms, Some(300_000));
        assert_eq!(game.moves[1].nag, Some(6));
        assert_eq!(game.moves[2].nag, Some(1));
        assert_eq!(game.movetext_result, Some(GameResult::Unknown));
    }

    #[test]
    fn oversized_game_is_cut_but_the_next_game_survives() {
        let mut pgn = b"[Event \"big\"]\n\n1. e4 {".to_vec();
        pgn.extend(std::iter::repeat_n(b'x', 2_000_000));
        pgn.extend_from_slice(b"} e5 *\n\n[Event \"small\"]\n\n1. d4 *\n");
        let mut chunks = split_all(&pgn, 1000);
        assert_eq!(chunks.len(), 2);
        assert!(chunks[0].is_truncated());
        assert_eq!(chunks[0].bytes.len(), 1000);
        assert!(matches!(
            take_game(&mut chunks[0], LIMITS),
            Err(RejectReason::TooLarge { .. })
        ));
        assert!(chunks[1].bytes.starts_with(b"[Event \"small\"]"));
        assert!(take_game(&mut chunks[1], LIMITS).is_ok());
    }

    #[test]
    fn garbage_unterminated_and_long_games_are_rejected() {
        let reject = |pgn: &[u8], limits: ParseLimits| {
            let mut splitter = GameSplitter::new(pgn, Arc::from("t.pgn"), 0, 0, limits);
            let mut chunk = splitter.next_chunk().expect("in memory").expect("one game");
            take_game(&mut chunk, limits)
        };
        assert!(matches!(
            reject(b"[Event \"x\"]\n\n1. e4 fooo e5 *\n", LIMITS),
            Err(RejectReason::Garbage { .. })
        ));
        assert!(matches!(
            reject(b"[Event \"x\"]\n\n1. e4 } e5 *\n", LIMITS),
            Err(RejectReason::Garbage { .. })
        ));
        assert!(matches!(
            reject(b"[Event \"x\"]\n\n1. e4 e5\n", LIMITS),
            Err(RejectReason::Unterminated)
        ));
        assert!(matches!(
            reject(b"[Event \"x\"]\n\n1. e4 {never closed\n", LIMITS),
            Err(RejectReason::Syntax(_))
        ));
        let short = ParseLimits {
            max_plies: 1,
            ..LIMITS
        };
        assert!(matches!(
            reject(b"1. e4 e5 *\n", short),
            Err(RejectReason::TooManyPlies { limit: 1 })
        ));
    }

    #[test]
    fn common_movetext_forms_are_not_garbage() {
        for token in [
            &b"12."[..],
            b"12...",
            b"7.N1f3",
            b"Bg6?!",
            b"e4!!",
            b"$14",
            b"O-O-O+",
            b"0-0",
            b"1/2-1/2",
            b"P@e4",
            b"e8=Q#",
            b"e2e4",
            b"--",
            b"Z0",
            b"1...e5",
        ] {
            assert!(
                is_movetext_token(token),
                "{}",
                String::from_utf8_lossy(token)
            );
        }
        for token in [&b"foo"[..], b"1-", b"$", b"e9", b"}"] {
            assert!(
                !is_movetext_token(token),
                "{}",
                String::from_utf8_lossy(token)
            );
        }
    }

    #[test]
    fn latin1_tags_are_decoded_byte_for_char() {
        assert_eq!(decode_text(b"J\xf6rg"), "Jörg");
        assert_eq!(decode_text("Jörg".as_bytes()), "Jörg");
    }
}

//! Step 1: where each game ends and where its tags are, by a state machine
//! that follows pgn-reader's reading loop over the raw stream.

use std::{
    io::{self, Read},
    sync::Arc,
};

use super::{GameChunk, GameScan, MAX_TAGS, ParseLimits, TAG_LINE_BYTES, TagSpan};
use crate::reject::{RejectReason, SourcePos};

/// Bytes read from the source at a time.
const BLOCK: usize = 64 * 1024;

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
        /// An empty line was seen since the last tag: python-chess allows
        /// one between tags, and a second one ends the game.
        blank: bool,
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
                State::AfterTag {
                    new_line,
                    line,
                    blank,
                } => self.after_tag(w, new_line, line, blank)?,
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
            // A byte-order mark at the start of a game's first line (files
            // joined with `cat`) is skipped, as python-chess skips it.
            Some(0xef) if new_line && w.from(self.pos).starts_with(b"\xef\xbb\xbf") => {
                self.pos += 3;
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
                blank: false,
            }
        };
        Ok(None)
    }

    /// Whitespace after a tag, or a stray `]` or `"` on its line.
    fn after_tag(
        &mut self,
        w: &Window<'_>,
        new_line: bool,
        line: Option<u64>,
        blank: bool,
    ) -> Step {
        match w.get(self.pos)? {
            None => return Ok(Some(Boundary::End)),
            Some(b' ' | b'\t' | b'\r') => self.pos += 1,
            // A second empty line after the tags ends a game of tags only
            // (python-chess; pgn-reader would read on into the next tags).
            Some(b'\n') if new_line && blank => {
                self.pos += 1;
                self.state = State::Between {
                    new_line: true,
                    bom: false,
                };
            }
            Some(b'\n') => {
                self.pos += 1;
                self.state = State::AfterTag {
                    new_line: true,
                    line: None,
                    blank: blank || new_line,
                };
            }
            Some(b'%') if new_line => {
                self.pos += 1;
                self.state = State::Escape { between: false };
            }
            // Another tag on the line: read as pgn-reader reads it (the
            // positions are python-chess's either way, and the games
            // imported so keep their digests).
            Some(b'[') => self.state = State::TagOrMovetext,
            // Anything else after a tag on its line (a stray `]` or `"`,
            // moves): python-chess ignores the line, or reads it whole as
            // one tag, and goes on reading tags.
            Some(_) if line.is_some() => {
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
                        blank: false,
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
                            blank: false,
                        };
                    }
                    Some(_) => {
                        self.pos += 1;
                        self.state = State::AfterTag {
                            new_line: true,
                            line: None,
                            blank: false,
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
            blank: false,
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
    ///
    /// # Panics
    ///
    /// If `limits.max_game_bytes` does not fit in memory's address space:
    /// the settings cap it at 1 GiB, every other caller at a few MiB.
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
        let bytes = if let Some(head) = self.head.take() {
            head
        } else {
            let (from, to) = (self.index(start), self.index(end));
            self.buf[from..to].to_vec()
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

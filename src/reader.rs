//! PGN reading: the only module that touches pgn-reader's `Visitor` API, so
//! that crate's API churn stays in one file.
//!
//! Two steps, on purpose:
//!
//! 1. [`GameSplitter`] (one thread, over the decompressed stream) reads one
//!    game at a time with pgn-reader, so the game boundaries are exactly
//!    pgn-reader's, and keeps with each game its verbatim bytes (for the
//!    rejects table), its game number and the byte offset of its first byte
//!    (for error messages and checkpoints), plus what the visitor parsed:
//!    tags and the mainline with clocks, evals and NAGs (variations are
//!    skipped: only the mainline is imported). Memory is bounded: a game
//!    larger than `max_game_bytes` is kept only as its first bytes and
//!    marked too large, whatever its size.
//! 2. [`take_game`] (in parallel, per chunk) makes the checks that need the
//!    raw bytes (size, garbage in the movetext, a missing result marker) and
//!    hands the [`RawGame`] on to replay.

use std::{
    borrow::Cow,
    io::{self, Read},
    ops::ControlFlow,
    sync::{Arc, Mutex, PoisonError},
};

use pgn_reader::{Nag, Outcome, RawComment, RawTag, Reader, SanPlus, Skip, Visitor};
use shakmaty::KnownOutcome;

use crate::{
    error::{RejectReason, SourcePos},
    model::{GameResult, RawGame, RawMove, parse_comment_commands},
};

/// Longest tag line pgn-reader is asked to support (Lichess `Opening` names
/// and long `Event`s exceed the PGN standard's 255).
const TAG_LINE_BYTES: usize = 4096;

/// How many bytes the splitter keeps after an oversized game's head: more
/// than pgn-reader's read-ahead (16 KiB with our settings), so the start of
/// the next game is never lost.
const TAIL_KEEP: usize = 256 * 1024;

/// One game as read: its verbatim bytes and what the visitor made of them.
#[derive(Debug, Clone)]
pub struct GameChunk {
    /// Where the game is.
    pub pos: SourcePos,
    /// The game's bytes; only the first `max_game_bytes` when `total_len` is larger.
    pub bytes: Vec<u8>,
    /// The game's full length in the stream.
    pub total_len: u64,
    /// Tags and mainline, or why pgn-reader could not read them.
    pub parsed: Result<RawGame, RejectReason>,
}

impl GameChunk {
    /// Whether the chunk holds only the head of a larger game.
    pub fn is_truncated(&self) -> bool {
        self.total_len > self.bytes.len() as u64
    }
}

/// Bytes read from the source, kept from the current game's start.
///
/// `buf[start..]` holds stream bytes from offset `base` on; consumed games
/// advance `start` and the buffer is compacted only when the dead prefix is
/// large, so a game costs one copy in and one copy out, not a memmove of the
/// whole read-ahead.
#[derive(Debug, Default)]
struct Recording {
    /// Stream offset of `buf[start]`.
    base: u64,
    buf: Vec<u8>,
    start: usize,
    /// Set once the current game outgrew the cap: its first `cap` bytes.
    head: Option<Vec<u8>>,
    cap: usize,
    /// The source failed (as opposed to a PGN syntax complaint).
    source_failed: bool,
}

impl Recording {
    fn live(&self) -> usize {
        self.buf.len() - self.start
    }

    fn end(&self) -> u64 {
        self.base + self.live() as u64
    }

    fn append(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
        if self.head.is_none() && self.live() > self.cap + TAIL_KEEP {
            self.head = Some(self.buf[self.start..self.start + self.cap].to_vec());
        }
        if self.head.is_some() && self.live() > 2 * TAIL_KEEP {
            let drop = self.live() - TAIL_KEEP;
            self.advance(drop);
        }
    }

    fn advance(&mut self, n: usize) {
        self.start += n;
        self.base += n as u64;
        if self.start >= TAIL_KEEP && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }

    /// Forgets everything before stream offset `start` (the next game's start).
    fn restart_at(&mut self, offset: u64) {
        let drop = usize::try_from(offset.saturating_sub(self.base))
            .unwrap_or(usize::MAX)
            .min(self.live());
        self.advance(drop);
        self.head = None;
    }

    /// The bytes of the game spanning `start..end`, capped.
    fn take_game(&mut self, start: u64, end: u64) -> Vec<u8> {
        if let Some(head) = self.head.take() {
            return head;
        }
        let offset = |at: u64| {
            usize::try_from(at.saturating_sub(self.base))
                .unwrap_or(usize::MAX)
                .min(self.live())
        };
        let (from, to) = (offset(start), offset(end));
        self.buf[self.start + from.min(to)..self.start + to].to_vec()
    }
}

/// A `Read` adapter that copies everything it reads into the shared recording.
struct Recorder<R> {
    inner: R,
    recording: Arc<Mutex<Recording>>,
}

impl<R: Read> Read for Recorder<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let result = self.inner.read(buf);
        let mut rec = self
            .recording
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match &result {
            Ok(n) => rec.append(&buf[..*n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => rec.source_failed = true,
        }
        result
    }
}

/// Cuts a decompressed PGN stream into one [`GameChunk`] per game.
pub struct GameSplitter<R> {
    reader: Reader<Recorder<R>>,
    recording: Arc<Mutex<Recording>>,
    visitor: GameVisitor,
    file: Arc<str>,
    games: u64,
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
        let recording = Arc::new(Mutex::new(Recording {
            base: start_offset,
            cap: usize::try_from(limits.max_game_bytes)
                .unwrap_or(usize::MAX)
                .max(1),
            ..Recording::default()
        }));
        let recorder = Recorder {
            inner: input,
            recording: Arc::clone(&recording),
        };
        let reader = Reader::build(recorder)
            .set_supported_tag_line_length(TAG_LINE_BYTES)
            .finish();
        GameSplitter {
            reader,
            recording,
            visitor: GameVisitor {
                max_plies: limits.max_plies,
            },
            file,
            games: games_before,
        }
    }

    /// Stream offset just past everything handed out so far.
    fn offset(&self) -> u64 {
        self.lock().end() - self.reader.buffer().len() as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recording> {
        self.recording
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Games handed out so far (including the ones skipped before a resume).
    pub fn games_read(&self) -> u64 {
        self.games
    }

    /// The next game, read and parsed, `None` at the end of the stream.
    /// Parsing here (rather than in the workers) reads each byte once and
    /// reuses one pgn-reader buffer; replay, the expensive part, is left to
    /// the workers. An `Err` means the
    /// source itself failed (e.g. a corrupt compressed stream); every game
    /// returned before it is complete.
    pub fn next_chunk(&mut self) -> io::Result<Option<GameChunk>> {
        let more = self.reader.has_more();
        if !self.source_checked(more)? {
            return Ok(None);
        }
        let start = self.offset();
        self.lock().restart_at(start);
        let parsed = match self.reader.read_game(&mut self.visitor) {
            Ok(Some(parsed)) => parsed,
            Ok(None) => Err(RejectReason::Empty),
            Err(e) if self.lock().source_failed => return Err(e),
            Err(e) => Err(RejectReason::Syntax(e.to_string())),
        };
        // Look ahead to the next game's start so the trailing whitespace
        // belongs to this chunk and the offset of the next one is exact.
        let more = self.reader.has_more();
        self.source_checked(more)?;
        let end = self.offset();
        let bytes = self.lock().take_game(start, end);
        self.games += 1;
        Ok(Some(GameChunk {
            pos: SourcePos {
                file: Arc::clone(&self.file),
                game_number: self.games,
                byte_offset: start,
            },
            bytes,
            total_len: end - start,
            parsed,
        }))
    }

    fn source_checked(&self, result: io::Result<bool>) -> io::Result<bool> {
        match result {
            Ok(more) => Ok(more),
            Err(e) if self.lock().source_failed => Err(e),
            // A PGN complaint while skipping whitespace: let the next chunk carry it.
            Err(_) => Ok(true),
        }
    }
}

/// Limits applied while parsing one game.
#[derive(Debug, Clone, Copy)]
pub struct ParseLimits {
    /// Games longer than this are rejected.
    pub max_plies: u32,
    /// Games larger than this (in bytes) are rejected.
    pub max_game_bytes: u64,
}

/// Takes the parsed game out of a chunk after the checks that need its raw
/// bytes (size cap, garbage tokens, result marker), or says why the game is
/// rejected. Pure and cheap; runs in the parallel workers.
pub fn take_game(chunk: &mut GameChunk, limits: ParseLimits) -> Result<RawGame, RejectReason> {
    if chunk.is_truncated() {
        return Err(RejectReason::TooLarge {
            size: chunk.total_len,
            limit: limits.max_game_bytes,
        });
    }
    let game = std::mem::replace(&mut chunk.parsed, Err(RejectReason::Empty))?;
    if game.tags.is_empty() && game.moves.is_empty() && game.movetext_result.is_none() {
        return Err(RejectReason::Empty);
    }
    // Before the garbage check: a game cut off mid-token is "unterminated".
    if game.movetext_result.is_none() {
        return Err(RejectReason::Unterminated);
    }
    if let Some(token) = find_garbage(&chunk.bytes) {
        return Err(RejectReason::Garbage { token });
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
    type Tags = Vec<(String, String)>;
    type Movetext = Movetext;
    type Output = Result<RawGame, RejectReason>;

    fn begin_tags(&mut self) -> ControlFlow<Self::Output, Self::Tags> {
        ControlFlow::Continue(Vec::with_capacity(20))
    }

    fn tag(
        &mut self,
        tags: &mut Self::Tags,
        name: &[u8],
        value: RawTag<'_>,
    ) -> ControlFlow<Self::Output> {
        tags.push((
            decode_text(name).into_owned(),
            decode_text(&value.decode()).into_owned(),
        ));
        ControlFlow::Continue(())
    }

    fn begin_movetext(&mut self, tags: Self::Tags) -> ControlFlow<Self::Output, Self::Movetext> {
        ControlFlow::Continue(Movetext {
            game: RawGame {
                tags,
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

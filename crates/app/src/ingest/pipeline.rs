//! The parse side of every command, as stages connected by bounded channels:
//!
//! ```text
//! read thread:    open → GameSplitter (split, locate tags) → ChunkBatch ──bounded──▶
//! process thread: rayon over the batch: take_game (parse) + replay_game → Batch ──bounded──▶ consumer
//! ```
//!
//! Bounded channels make a slow consumer (the database) hold back the
//! reader, so memory stays at about `channel_capacity × batch_bytes` per
//! stage whatever the input size. Batches keep file order; games inside a
//! batch are processed in parallel but returned in order, so output and
//! checkpoints are deterministic.
//!
//! It must not touch the database nor buffer beyond its bounded channels:
//! the consumer decides what is written, and when.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    thread,
};

use crossbeam_channel::{Receiver, Sender, bounded};
use rayon::prelude::*;

use crate::{
    chess::{
        reader::{GameChunk, GameSplitter, ParseLimits, take_game},
        replay::{GameRecord, replay_game},
        scope::{Scope, in_scope},
    },
    error::{Error, RejectReason, Rejection},
    ingest::{
        exchange::StoredGames,
        replay::StreamReplay,
        source::{self, Compression, Input, SourceOptions, open_input_interruptible},
    },
};

/// Sizes and limits of the parse side.
#[derive(Debug, Clone, Copy)]
pub struct PipelineConfig {
    /// Games per batch at most.
    pub batch_games: usize,
    /// Bytes of PGN per batch at most (a batch closes at whichever comes first).
    pub batch_bytes: usize,
    /// Batches waiting between two stages at most.
    pub channel_capacity: usize,
    /// Per-game limits.
    pub limits: ParseLimits,
    /// Decompression options.
    pub source: SourceOptions,
}

/// The defaults: batches of 10,000 games because an incremental batch
/// inserts its new positions sorted, so each index page it touches is read
/// once per batch; into a database 14x the server's memory, 10,000-game
/// batches read 0.60 index pages per new position where 2,000-game ones
/// read 0.96 (`scripts/bench_growth.sh`, issue 31). Two batches queued per
/// stage keep the memory of the larger batches near what four 2,000-game
/// ones took.
impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            batch_games: 10_000,
            batch_bytes: 32 << 20,
            channel_capacity: 2,
            limits: ParseLimits {
                max_plies: 20_000,
                max_game_bytes: 8 << 20,
            },
            source: SourceOptions::default(),
        }
    }
}

/// Batches an input smaller than one batch is cut into at least. Why: the
/// writer overlaps the positions phase of batch N+1 with the games and
/// moves of batch N, which a one-batch input never does. Measured on
/// 2,500-game generated inputs into a 30,000-game database (`--mode
/// incremental`, alternating runs at load 6-7): 12.0 s median in batches
/// of 625 games against 15.2 s in one batch of 2,500.
const SMALL_INPUT_BATCHES: usize = 4;

/// The smallest batch that cut makes (about 400 games): below it a
/// batch's fixed costs (lookups, commit, checkpoint) outweigh the overlap.
const SMALL_INPUT_MIN_BATCH_BYTES: usize = 1 << 20;

impl PipelineConfig {
    /// The sizes for one input of about `plain_bytes` bytes of PGN
    /// ([`Input::estimated_plain_len`]; `None` when unknown, a
    /// stream): an input under `batch_bytes` is cut into
    /// [`SMALL_INPUT_BATCHES`] batches, not smaller than
    /// [`SMALL_INPUT_MIN_BATCH_BYTES`]; a larger one, or one of unknown
    /// size, keeps the configured batches, which an incremental import
    /// into a database larger than memory needs large.
    #[must_use]
    pub fn for_input(self, plain_bytes: Option<u64>) -> PipelineConfig {
        let small = plain_bytes.and_then(|plain| usize::try_from(plain).ok());
        match small {
            Some(plain) if plain < self.batch_bytes => PipelineConfig {
                batch_bytes: (plain / SMALL_INPUT_BATCHES)
                    .max(SMALL_INPUT_MIN_BATCH_BYTES)
                    .min(self.batch_bytes),
                ..self
            },
            _ => self,
        }
    }
}

/// One input to read, possibly resuming part-way.
#[derive(Debug, Clone)]
pub struct InputSpec {
    /// Path or `-`.
    pub name: String,
    /// Decompressed bytes to skip before reading (resume point).
    pub skip_bytes: u64,
    /// Games contained in the skipped bytes.
    pub skip_games: u64,
    /// For a stream, what keeps it and its uncommitted bytes across the
    /// attempts of one import ([`crate::ingest::replay`]).
    pub replay: Option<Arc<StreamReplay>>,
}

impl InputSpec {
    /// Read the whole input.
    pub fn whole(name: impl Into<String>) -> Self {
        InputSpec {
            name: name.into(),
            skip_bytes: 0,
            skip_games: 0,
            replay: None,
        }
    }
}

/// A rejected game with its verbatim bytes (the head only, for a game over
/// the size limit).
#[derive(Debug, Clone)]
pub struct RejectedGame {
    /// Where and why.
    pub rejection: Rejection,
    /// The game's bytes as read.
    pub raw: Vec<u8>,
    /// The game's full length in the stream (more than `raw` when cut).
    pub total_len: u64,
}

/// What processing one game produced.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A replayed game.
    Game(Box<GameRecord>),
    /// A rejected game.
    Rejected(Box<RejectedGame>),
}

/// Consecutive games of one input, in order.
#[derive(Debug)]
pub struct Batch {
    /// Index into the inputs.
    pub input: usize,
    /// One outcome per game, in file order.
    pub outcomes: Vec<Outcome>,
    /// Decompressed stream offset just after the batch's last game.
    pub end_offset: u64,
    /// Games in the input up to and including this batch.
    pub games_through: u64,
    /// Games of the batch left out by the import's scope (removed from
    /// `outcomes` by [`Batch::apply_scope`]); counted, never written.
    pub filtered: u64,
}

impl Batch {
    /// Whether the batch reads as PGN: a game of it parsed, or was
    /// rejected for what only a game read as PGN can have (an illegal
    /// move, a bad FEN, a name too long...), or is nothing but comments,
    /// or begins a line with a tag pair or its movetext with a move.
    /// An input whose first batch does not (random bytes, a text file of
    /// another kind) is not PGN: refused whole rather than stored as
    /// thousands of "rejected games". Must come before
    /// [`Batch::apply_scope`]: a game the scope leaves out is PGN too.
    pub fn reads_as_pgn(&self) -> bool {
        self.outcomes.iter().any(|outcome| match outcome {
            Outcome::Game(_) => true,
            Outcome::Rejected(reject) => match reject.rejection.reason {
                RejectReason::Syntax(_)
                | RejectReason::Garbage { .. }
                | RejectReason::Unterminated
                | RejectReason::TooLarge { .. }
                | RejectReason::TooManyTags { .. } => looks_like_pgn(&reject.raw),
                // Nothing but comments, or a broken tag line of junk.
                RejectReason::Empty => {
                    matches!(reject.raw.trim_ascii_start(), [b'{' | b';', ..])
                        || looks_like_pgn(&reject.raw)
                }
                RejectReason::IllegalMove { .. }
                | RejectReason::IllegalVariationMove { .. }
                | RejectReason::BadFen(_)
                | RejectReason::UnsupportedVariant(_)
                | RejectReason::NulByte { .. }
                | RejectReason::NameTooLong { .. }
                | RejectReason::TooManyPlies { .. }
                | RejectReason::VariationsTooLarge { .. }
                | RejectReason::NegativeClock { .. }
                | RejectReason::Undecodable(_) => true,
            },
        })
    }

    /// Keeps the games up to and including the `n`-th rejected one
    /// (1-based), drops the ones after it, and moves the batch's end there:
    /// the part of the batch a run that stops at that reject commits (see
    /// `--max-rejects`), so that a rerun resumes just after it. Leaves the
    /// batch whole, and returns `false`, when it holds fewer rejects. Must
    /// come before [`Batch::apply_scope`], which counts what it drops.
    pub fn cut_after_reject(&mut self, n: u64) -> bool {
        let mut seen = 0;
        let cut = self.outcomes.iter().position(|outcome| {
            seen += u64::from(matches!(outcome, Outcome::Rejected(_)));
            seen == n
        });
        let Some(last) = cut else {
            return false;
        };
        if let Outcome::Rejected(reject) = &self.outcomes[last] {
            let pos = &reject.rejection.pos;
            self.end_offset = pos.byte_offset + reject.total_len;
            self.games_through = pos.game_number;
        }
        self.outcomes.truncate(last + 1);
        true
    }

    /// Removes the replayed games `scope` leaves out, counting them in
    /// `filtered`. Rejected games stay: a broken game is a reject whatever
    /// its tags, so its bytes are kept to be fixed.
    pub fn apply_scope(&mut self, scope: &Scope) {
        if scope.is_everything() {
            return;
        }
        let before = self.outcomes.len();
        self.outcomes.retain(|outcome| match outcome {
            Outcome::Game(game) => in_scope(game, scope).is_ok(),
            Outcome::Rejected(_) => true,
        });
        self.filtered += (before - self.outcomes.len()) as u64;
    }
}

/// What the consumer receives (`B` = [`Batch`]); the read stage sends the
/// same events with raw chunks instead.
#[derive(Debug)]
pub enum Event<B = Batch> {
    /// An input was opened.
    Opened {
        /// Index into the inputs.
        input: usize,
        /// Its size on disk, when known.
        len: Option<u64>,
        /// Bytes consumed from disk so far (for progress).
        consumed: Arc<std::sync::atomic::AtomicU64>,
    },
    /// Games.
    Batch(B),
    /// An input ended cleanly.
    Finished {
        /// Index into the inputs.
        input: usize,
        /// Games in the input.
        games: u64,
        /// Decompressed bytes in the input.
        bytes: u64,
    },
    /// An input could not be opened or broke part-way; earlier batches of it
    /// are complete.
    Failed {
        /// Index into the inputs.
        input: usize,
        /// What went wrong.
        error: Error,
    },
}

/// Parses and replays one chunk: the pure per-game function of the process stage.
pub fn process_chunk(mut chunk: GameChunk, limits: ParseLimits) -> Outcome {
    match take_game(&mut chunk, limits).and_then(|raw| replay_game(raw, chunk.pos.clone())) {
        Ok(record) => Outcome::Game(Box::new(record)),
        Err(reason) => Outcome::Rejected(Box::new(RejectedGame {
            rejection: Rejection {
                pos: chunk.pos,
                reason,
            },
            raw: chunk.bytes,
            total_len: chunk.total_len,
        })),
    }
}

/// Whether a game's bytes look like PGN though they did not parse: a line
/// beginning (after blanks) with a tag pair's `[Name "`, or a movetext
/// beginning with a move number and the start of a move (`1. e4`,
/// `1.Nf3`, `12... O-O`). Text of another kind and binary data have
/// neither: in random bytes, about one line in ten million and one game
/// in a million would.
fn looks_like_pgn(raw: &[u8]) -> bool {
    let raw = raw.strip_prefix(b"\xef\xbb\xbf").unwrap_or(raw);
    let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\r');
    let starts_with_a_move = {
        let text = raw.trim_ascii_start();
        let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
        let dots = text[digits..].iter().take_while(|&&b| b == b'.').count();
        let text = text[digits + dots..].trim_ascii_start();
        digits > 0
            && dots > 0
            && matches!(
                text,
                [b'a'..=b'h', b'1'..=b'8' | b'x', ..]
                    | [b'K' | b'Q' | b'R' | b'B' | b'N', b'a'..=b'h' | b'1'..=b'8' | b'x', ..]
                    | [b'O' | b'0', b'-', ..]
            )
    };
    starts_with_a_move
        || raw.split(|&b| b == b'\n').any(|line| {
            let line = &line[line.iter().take_while(|b| blank(b)).count()..];
            let Some(rest) = line.strip_prefix(b"[") else {
                return false;
            };
            let name = rest
                .iter()
                .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
                .count();
            let spaces = rest[name..].iter().take_while(|b| blank(b)).count();
            name > 0 && spaces > 0 && rest.get(name + spaces) == Some(&b'"')
        })
}

struct ChunkBatch {
    input: usize,
    chunks: Vec<GameChunk>,
    end_offset: u64,
    games_through: u64,
}

type ReadEvent = Event<ChunkBatch>;

/// Handle on a running parse pipeline.
pub struct Pipeline {
    /// Events in input order.
    pub events: Receiver<Event>,
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Pipeline {
    /// Starts reading `inputs` in order.
    pub fn start(inputs: Vec<InputSpec>, config: PipelineConfig) -> Pipeline {
        Pipeline::start_interruptible(inputs, config, Arc::default())
    }

    /// [`Pipeline::start`] for a run that handles signals itself: once
    /// `interrupts` is non-zero, waiting for a stream's data (a FIFO with no
    /// writer, a silent pipe) ends the input with an error for which
    /// `crate::ingest::source::is_cancelled` holds. Games already read are still
    /// delivered; a regular file is read on until [`Pipeline::stop`].
    pub fn start_interruptible(
        inputs: Vec<InputSpec>,
        config: PipelineConfig,
        interrupts: Arc<AtomicUsize>,
    ) -> Pipeline {
        let stop = Arc::new(AtomicBool::new(false));
        let (read_tx, read_rx) = bounded(config.channel_capacity.max(1));
        let (event_tx, event_rx) = bounded(config.channel_capacity.max(1));
        let reader_stop = Arc::clone(&stop);
        let reader = thread::Builder::new()
            .name("pgnload-read".into())
            .spawn(move || read_loop(&inputs, config, &interrupts, &read_tx, &reader_stop));
        let processor = thread::Builder::new()
            .name("pgnload-process".into())
            .spawn(move || process_loop(&read_rx, &event_tx, config.limits));
        let threads = [reader, processor]
            .into_iter()
            .filter_map(Result::ok)
            .collect();
        Pipeline {
            events: event_rx,
            stop,
            threads,
        }
    }

    /// Asks the reader to stop after the current game; events already
    /// queued are still delivered.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.stop();
        // Unblock the stages: drain what they still try to send.
        while self.events.try_recv().is_ok() {}
        for handle in self.threads.drain(..) {
            while !handle.is_finished() {
                while self.events.try_recv().is_ok() {}
                thread::yield_now();
            }
            let _ = handle.join();
        }
    }
}

fn read_loop(
    inputs: &[InputSpec],
    config: PipelineConfig,
    interrupts: &Arc<AtomicUsize>,
    tx: &Sender<ReadEvent>,
    stop: &AtomicBool,
) {
    for (index, spec) in inputs.iter().enumerate() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let opened = match source::sniff_file(std::path::Path::new(&spec.name)) {
            Some(format @ (Compression::Sqlite | Compression::Dcg)) => StoredGames::open(
                &spec.name,
                format,
                spec.skip_games,
                config.limits,
                Arc::clone(interrupts),
            )
            .map(|games| Opened::Stored(Box::new(games))),
            _ => match &spec.replay {
                Some(replay) => replay.open(config.source, Arc::clone(interrupts)),
                None => open_input_interruptible(&spec.name, config.source, Arc::clone(interrupts)),
            }
            .map(Opened::Pgn),
        };
        let input = match opened {
            Ok(input) => input,
            Err(error) => {
                if tx
                    .send(ReadEvent::Failed {
                        input: index,
                        error,
                    })
                    .is_err()
                {
                    return;
                }
                continue;
            }
        };
        let (len, consumed) = match &input {
            Opened::Pgn(input) => (input.len, &input.consumed),
            Opened::Stored(games) => (games.len, &games.consumed),
        };
        let opened = ReadEvent::Opened {
            input: index,
            len,
            consumed: Arc::clone(consumed),
        };
        if tx.send(opened).is_err() {
            return;
        }
        let last = match read_input(index, spec, input, config, tx, stop) {
            Ok(Some(finished)) => finished,
            Ok(None) => return,
            Err(error) => ReadEvent::Failed {
                input: index,
                error,
            },
        };
        if tx.send(last).is_err() {
            return;
        }
    }
}

/// The splitter of a PGN input, past the checkpoint's bytes.
fn pgn_splitter(
    spec: &InputSpec,
    mut input: Input,
    config: PipelineConfig,
) -> Result<GameSplitter<Box<dyn std::io::Read + Send>>, Error> {
    let broken = |offset: u64, games: u64, source| Error::InputBroken {
        file: Arc::clone(&input.name),
        byte_offset: offset,
        games_read: games,
        source,
    };
    // A stream read again starts at its first uncommitted byte, at or
    // before the checkpoint: only the bytes between are skipped.
    let Some(to_skip) = spec.skip_bytes.checked_sub(input.start_offset) else {
        return Err(Error::inconsistent(format!(
            "{}: the database's checkpoint (byte {}) is before the first byte the stream \
             still holds ({}): a commit pgnload saw succeed is gone, and the stream cannot \
             be read again from there",
            input.name, spec.skip_bytes, input.start_offset
        )));
    };
    if to_skip > 0 {
        let skipped = std::io::copy(
            &mut std::io::Read::take(&mut input.reader, to_skip),
            &mut std::io::sink(),
        )
        .map_err(|e| broken(input.start_offset, spec.skip_games, e))?;
        if skipped < to_skip {
            return Err(broken(
                input.start_offset + skipped,
                spec.skip_games,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "input is shorter than the checkpoint ({} bytes); did it change?",
                        spec.skip_bytes
                    ),
                ),
            ));
        }
    }
    Ok(GameSplitter::new(
        input.reader,
        input.name,
        spec.skip_bytes,
        spec.skip_games,
        config.limits,
    ))
}

/// An opened input: PGN (plain or compressed), or an exchange format's
/// stored games (`ingest::exchange`), which come out as PGN chunks too.
enum Opened {
    Pgn(Input),
    Stored(Box<StoredGames>),
}

/// Where one input's chunks come from.
enum Games {
    Pgn(GameSplitter<Box<dyn std::io::Read + Send>>),
    Stored(StoredGames),
}

impl Games {
    fn next_chunk(&mut self) -> std::io::Result<Option<GameChunk>> {
        match self {
            Games::Pgn(splitter) => splitter.next_chunk(),
            Games::Stored(games) => games.next_chunk(),
        }
    }

    fn games_read(&self) -> u64 {
        match self {
            Games::Pgn(splitter) => splitter.games_read(),
            Games::Stored(games) => games.games_read(),
        }
    }
}

/// Reads one input into batches. `Ok(None)` when stopped or the consumer
/// left. Stored games resume by game number (they were opened past
/// `skip_games`); PGN by skipping the checkpoint's bytes.
fn read_input(
    index: usize,
    spec: &InputSpec,
    input: Opened,
    config: PipelineConfig,
    tx: &Sender<ReadEvent>,
    stop: &AtomicBool,
) -> Result<Option<ReadEvent>, Error> {
    let (name, mut splitter, config) = match input {
        Opened::Pgn(input) => {
            let name = Arc::clone(&input.name);
            let config = config.for_input(input.estimated_plain_len());
            (name, Games::Pgn(pgn_splitter(spec, input, config)?), config)
        }
        Opened::Stored(games) => (Arc::from(spec.name.as_str()), Games::Stored(*games), config),
    };
    let broken = |offset: u64, games: u64, source| Error::InputBroken {
        file: Arc::clone(&name),
        byte_offset: offset,
        games_read: games,
        source,
    };
    let mut end_offset = spec.skip_bytes;
    loop {
        let mut chunks = Vec::with_capacity(config.batch_games);
        let mut bytes = 0usize;
        let mut failure = None;
        while chunks.len() < config.batch_games && bytes < config.batch_bytes {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            match splitter.next_chunk() {
                Ok(Some(chunk)) => {
                    bytes += chunk.bytes.len();
                    end_offset = chunk.pos.byte_offset + chunk.total_len;
                    chunks.push(chunk);
                }
                Ok(None) => break,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let done = chunks.len() < config.batch_games && bytes < config.batch_bytes;
        if !chunks.is_empty() {
            let batch = ChunkBatch {
                input: index,
                chunks,
                end_offset,
                games_through: splitter.games_read(),
            };
            if tx.send(ReadEvent::Batch(batch)).is_err() {
                return Ok(None);
            }
        }
        if let Some(e) = failure {
            return Err(broken(end_offset, splitter.games_read(), e));
        }
        if stop.load(Ordering::SeqCst) {
            return Ok(None);
        }
        if done {
            return Ok(Some(ReadEvent::Finished {
                input: index,
                games: splitter.games_read(),
                bytes: end_offset,
            }));
        }
    }
}

fn process_loop(rx: &Receiver<ReadEvent>, tx: &Sender<Event>, limits: ParseLimits) {
    for event in rx {
        let out = match event {
            Event::Batch(batch) => Event::Batch(Batch {
                input: batch.input,
                outcomes: batch
                    .chunks
                    .into_par_iter()
                    .map(|chunk| process_chunk(chunk, limits))
                    .collect(),
                end_offset: batch.end_offset,
                games_through: batch.games_through,
                filtered: 0,
            }),
            Event::Opened {
                input,
                len,
                consumed,
            } => Event::Opened {
                input,
                len,
                consumed,
            },
            Event::Finished {
                input,
                games,
                bytes,
            } => Event::Finished {
                input,
                games,
                bytes,
            },
            Event::Failed { input, error } => Event::Failed { input, error },
        };
        if tx.send(out).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An input under one batch's bytes is cut in four (not below 1 MiB);
    /// a larger one, or a stream, keeps the configured batches.
    #[test]
    fn small_inputs_are_cut_into_several_batches_and_large_ones_are_not() {
        let config = PipelineConfig::default();
        let mib = 1usize << 20;
        let sized = |bytes: Option<u64>| config.for_input(bytes).batch_bytes;
        assert_eq!(sized(Some(6 * (1 << 20))), 6 * mib / 4);
        assert_eq!(sized(Some(3 * (1 << 20))), mib);
        assert_eq!(sized(Some(0)), mib);
        assert_eq!(sized(Some(32 << 20)), config.batch_bytes);
        assert_eq!(sized(Some(46 << 20)), config.batch_bytes);
        assert_eq!(sized(None), config.batch_bytes);
        assert_eq!(config.for_input(Some(1000)).batch_games, config.batch_games);
        // A configured batch under the floor is never raised.
        let tiny = PipelineConfig {
            batch_bytes: 4096,
            ..config
        };
        assert_eq!(tiny.for_input(Some(2048)).batch_bytes, 4096);
    }

    /// The bytes of a game that did not parse look like PGN when a line
    /// starts a tag pair or the movetext starts with a move; prose and
    /// markup do not.
    #[test]
    fn pgn_is_told_from_other_text_by_tag_pairs_and_first_moves() {
        for pgn in [
            &b"[Event \"x\"]\n\n1. e4 @@ *"[..],
            b"\xef\xbb\xbf  [White   \"w\"]",
            b"1. e4 e5 2. @@",
            b"\n 12... Nxd4 ?? 13.",
            b"1.O-O-O",
        ] {
            assert!(looks_like_pgn(pgn), "{:?}", String::from_utf8_lossy(pgn));
        }
        for other in [
            &b"Hello world. 1. First point"[..],
            b"1. Introduction\n2. Usage",
            b"[section]\nkey = \"value\"",
            b"[\"a\", \"b\"]",
            b"{\"json\": [1, 2]}",
            b"",
        ] {
            assert!(
                !looks_like_pgn(other),
                "{:?}",
                String::from_utf8_lossy(other)
            );
        }
    }

    #[test]
    fn process_chunk_accounts_for_good_and_bad_games() {
        let pgn = b"1. e4 e5 *\n\n1. e4 e5 2. Ke3 *\n";
        let limits = PipelineConfig::default().limits;
        let mut splitter = GameSplitter::new(&pgn[..], Arc::from("t"), 0, 0, limits);
        let first = splitter.next_chunk().expect("ok").expect("game 1");
        let second = splitter.next_chunk().expect("ok").expect("game 2");
        assert!(matches!(process_chunk(first, limits), Outcome::Game(_)));
        match process_chunk(second, limits) {
            Outcome::Rejected(rejected) => {
                assert_eq!(rejected.rejection.pos.game_number, 2);
                assert_eq!(rejected.raw, b"1. e4 e5 2. Ke3 *\n");
            }
            Outcome::Game(_) => panic!("illegal game accepted"),
        }
    }
}

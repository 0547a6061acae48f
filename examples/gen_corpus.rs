//! Generates a large, realistic Lichess-like PGN corpus for benchmarks.
//!
//! ```text
//! cargo run --release --example gen_corpus -- --games 200000 --seed 1 --out a.pgn
//! cargo run --release --example gen_corpus -- --games 50000 --seed 2 --out b.pgn \
//!     --known-seed 1 --known-games 200000 --known-fraction 0.5
//! ```
//!
//! Real PGN dumps are large and cannot be shipped, and random games from an
//! empty board look nothing like real ones to an importer: real games share
//! openings (so positions deduplicate), carry clocks in every comment, and
//! repeat players and tournaments. So every game here:
//!
//! * starts with the first 4–16 plies of a real game of the shipped Lichess
//!   sample (and copies its ECO and Opening tags);
//! * continues with random legal moves, biased towards captures, checks and
//!   mates so that games end, and towards "book" moves (a pick that depends
//!   only on the position, taken with a probability that falls with depth)
//!   so that popular lines form a tree and positions repeat across games
//!   the way they do in real dumps, instead of every game leaving the
//!   opening into a private line;
//! * stops at checkmate, stalemate or insufficient material, or at a target
//!   length (20–150 plies, about 70 on average);
//! * has a unique 8-character Lichess id, Lichess's tag set (players from a
//!   fixed pool of 4,000 so they repeat across games *and* corpora, Elo and
//!   rating changes, tournaments and swisses, time controls) and a
//!   `[%clk]` comment after every move with plausible falling clocks.
//!
//! Generation is parallel (rayon) yet deterministic: game `i` of seed `s`
//! depends only on `(s, i)`, through two independent random streams (one for
//! the moves, one for tags and clocks). That is what makes the incremental
//! benchmark's second corpus cheap: with `--known-seed S1 --known-games N1
//! --known-fraction F`, each game regenerates the moves of a random game of
//! corpus `S1` (without reading its file), follows it for `F` of its own
//! target length, then leaves that line with a move the source game did not
//! play. About `F` of the second corpus's position occurrences then already
//! exist in the first corpus; `--stats` measures it exactly.
//!
//! Game ids are a fixed 47-bit permutation of `(seed mod 32768) << 32 | index`,
//! so they are unique within a corpus and across corpora whose seeds differ
//! modulo 32768 (an importer would otherwise see the second corpus's games
//! as already imported).
//!
//! The summary goes to stderr (`--out -` writes the PGN to stdout).

use std::{
    fmt::Write as _,
    fs::File,
    io::{self, BufWriter, Write},
    path::PathBuf,
    sync::Arc,
    time::Instant,
};

use anyhow::{Context as _, bail};
use chrono::{Duration, NaiveDate, NaiveDateTime};
use clap::Parser;
use foldhash::{HashMap, HashSet, HashSetExt as _};
use pgnload::{
    chess::{model::GameVariant, reader::GameSplitter},
    ingest::pipeline::{Outcome as PipelineOutcome, PipelineConfig, process_chunk},
};
use rayon::prelude::*;
use shakmaty::{
    Chess, Color, EnPassantMode, KnownOutcome, Move, Position, san::SanPlus, uci::UciMove,
    zobrist::Zobrist64,
};

/// Generate a Lichess-like PGN corpus (see the module documentation).
#[derive(Debug, Parser)]
#[command(name = "gen_corpus")]
struct Args {
    /// Number of games to write.
    #[arg(long)]
    games: u64,
    /// Seed; the same seed and game count give the same file.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output file (`-` for stdout).
    #[arg(long)]
    out: PathBuf,
    /// PGN whose games supply the openings (standard games only are used).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/lichess-2025-05-sample.pgn"))]
    sample: PathBuf,
    /// Seed of the corpus whose positions this one should partly repeat.
    #[arg(long, requires_all = ["known_games", "known_fraction"])]
    known_seed: Option<u64>,
    /// Game count of that corpus (games are picked among its first N).
    #[arg(long, requires = "known_seed")]
    known_games: Option<u64>,
    /// Share of each game's plies that follow a game of that corpus (0–1).
    #[arg(long, requires = "known_seed")]
    known_fraction: Option<f64>,
    /// Also count distinct positions (and, with --known-seed, how many are
    /// already in the known corpus, which is regenerated for that). Slower.
    #[arg(long)]
    stats: bool,
}

/// Games generated (in parallel) per block before the block is written in order.
const BLOCK: u64 = 8192;
/// Size of the player pool.
const PLAYERS: usize = 4000;
/// Tournaments (and swisses) per speed.
const TOURNAMENTS: u64 = 48;
/// Shortest and longest target length in plies.
const MIN_PLIES: usize = 20;
const MAX_PLIES: usize = 150;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let known = known_corpus(&args)?;
    if args.games > u64::from(u32::MAX) {
        bail!("at most {} games per corpus", u32::MAX);
    }

    let started = Instant::now();
    let ctx = Context {
        openings: load_openings(&args.sample)?,
        players: player_pool(),
        seed: args.seed,
        games: args.games,
        known,
    };
    let mut out: Box<dyn Write> = if args.out.as_os_str() == "-" {
        Box::new(BufWriter::with_capacity(1 << 20, io::stdout().lock()))
    } else {
        let file =
            File::create(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
        Box::new(BufWriter::with_capacity(1 << 20, file))
    };
    let written = write_corpus(&ctx, &args, &mut out)?;
    out.flush()
        .with_context(|| format!("writing {}", args.out.display()))?;
    drop(out);
    let elapsed = started.elapsed().as_secs_f64();
    summarize(&ctx, &args, &written, elapsed);
    Ok(())
}

/// The corpus of `--known-seed`, checked, if asked for.
fn known_corpus(args: &Args) -> anyhow::Result<Option<Known>> {
    let (Some(seed), Some(games), Some(fraction)) =
        (args.known_seed, args.known_games, args.known_fraction)
    else {
        return Ok(None);
    };
    if !(0.0..=1.0).contains(&fraction) {
        bail!("--known-fraction must be between 0 and 1");
    }
    if games == 0 {
        bail!("--known-games must be at least 1");
    }
    if seed & LANE_MASK == args.seed & LANE_MASK {
        bail!(
            "--known-seed and --seed must differ modulo 32768, or the two corpora share game ids"
        );
    }
    Ok(Some(Known {
        seed,
        games,
        fraction,
    }))
}

/// What was written, for the summary.
struct Written {
    plies: u64,
    /// Position occurrences, with `--stats`.
    occurrences: u64,
    /// Position hash → occurrences, with `--stats`.
    seen: Option<HashMap<u64, u32>>,
}

/// Generates the corpus in blocks of [`BLOCK`] games (in parallel), each
/// written in order.
fn write_corpus(ctx: &Context, args: &Args, out: &mut dyn Write) -> anyhow::Result<Written> {
    let mut written = Written {
        plies: 0,
        occurrences: 0,
        seen: args.stats.then(HashMap::<u64, u32>::default),
    };
    let mut start = 0;
    while start < args.games {
        let end = (start + BLOCK).min(args.games);
        let block: Vec<(String, usize, Vec<u64>)> = (start..end)
            .into_par_iter()
            .map(|index| {
                let line = ctx.line(index);
                let hashes = if args.stats {
                    position_hashes(&line.moves)
                } else {
                    Vec::new()
                };
                (ctx.render(index, &line), line.moves.len(), hashes)
            })
            .collect();
        for (text, n, hashes) in block {
            out.write_all(text.as_bytes())
                .with_context(|| format!("writing {}", args.out.display()))?;
            written.plies += n as u64;
            if let Some(seen) = written.seen.as_mut() {
                written.occurrences += hashes.len() as u64;
                for hash in hashes {
                    *seen.entry(hash).or_default() += 1;
                }
            }
        }
        start = end;
    }
    Ok(written)
}

/// The summary, on stderr.
fn summarize(ctx: &Context, args: &Args, written: &Written, elapsed: f64) {
    let Written {
        plies,
        occurrences,
        seen,
    } = written;
    let games = args.games.max(1) as f64;
    eprintln!("games written: {}", args.games);
    eprintln!("plies: {plies}");
    eprintln!("average plies: {:.1}", *plies as f64 / games);
    eprintln!(
        "elapsed: {elapsed:.2} s ({:.0} games/s)",
        args.games as f64 / elapsed.max(1e-9)
    );
    let Some(seen) = seen else {
        return;
    };
    eprintln!(
        "positions: {occurrences}, distinct: {} ({:.1} distinct per game)",
        seen.len(),
        seen.len() as f64 / games
    );
    if let Some(known) = &ctx.known {
        let base = known_positions(ctx, known);
        let (hits, known_occurrences) = seen
            .iter()
            .filter(|(hash, _)| base.contains(*hash))
            .fold((0u64, 0u64), |(d, o), (_, &n)| (d + 1, o + u64::from(n)));
        eprintln!(
            "known in corpus seed {} ({} games): {:.1}% of positions, {:.1}% of distinct positions",
            known.seed,
            known.games,
            100.0 * known_occurrences as f64 / (*occurrences).max(1) as f64,
            100.0 * hits as f64 / seen.len().max(1) as f64,
        );
    }
}

/// The corpus whose positions a second corpus partly repeats.
#[derive(Debug, Clone, Copy)]
struct Known {
    seed: u64,
    games: u64,
    fraction: f64,
}

/// Everything a game depends on besides its seed and index.
struct Context {
    openings: Vec<Opening>,
    players: Vec<Player>,
    seed: u64,
    games: u64,
    known: Option<Known>,
}

/// A real game's first plies and its opening tags.
struct Opening {
    /// Up to 16 moves, each legal after the previous ones from the start;
    /// the position after each of them still has legal moves.
    moves: Vec<Move>,
    eco: String,
    name: String,
}

/// A generated game's moves, before tags and clocks.
struct Line {
    opening: usize,
    moves: Vec<Move>,
    /// The final position.
    end: Chess,
}

struct Player {
    name: String,
    rating: i32,
    title: Option<&'static str>,
}

/// Reads the sample with pgnload's own reader and replay, so the openings
/// are exactly what pgnload accepts; keeps standard games with ≥ 4 plies.
fn load_openings(path: &std::path::Path) -> anyhow::Result<Vec<Opening>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let limits = PipelineConfig::default().limits;
    let mut splitter = GameSplitter::new(&bytes[..], Arc::from("sample"), 0, 0, limits);
    let mut openings = Vec::new();
    while let Some(chunk) = splitter
        .next_chunk()
        .with_context(|| format!("reading {}", path.display()))?
    {
        let PipelineOutcome::Game(record) = process_chunk(chunk, limits) else {
            continue;
        };
        if record.variant != GameVariant::Standard || record.start_fen.is_some() {
            continue;
        }
        let mut pos = Chess::default();
        let mut moves = Vec::new();
        for ply in record.plies.iter().take(16) {
            let Some(m) = UciMove::from_ascii(ply.uci.as_bytes())
                .ok()
                .and_then(|uci| uci.to_move(&pos).ok())
            else {
                break;
            };
            pos.play_unchecked(m);
            if pos.legal_moves().is_empty() {
                break;
            }
            moves.push(m);
        }
        if moves.len() >= 4 {
            openings.push(Opening {
                moves,
                eco: record.meta.eco.clone().unwrap_or_else(|| "?".into()),
                name: record.meta.opening.clone().unwrap_or_else(|| "?".into()),
            });
        }
    }
    if openings.is_empty() {
        bail!("{}: no standard game with 4 plies or more", path.display());
    }
    Ok(openings)
}

impl Context {
    /// The moves of game `index` of this corpus.
    fn line(&self, index: u64) -> Line {
        match self.known {
            Some(known) => self.shared_line(known, index),
            None => fresh_line(&self.openings, self.seed, index),
        }
    }

    /// A game that follows a game of the known corpus for `fraction` of its
    /// own target length, then leaves it.
    fn shared_line(&self, known: Known, index: u64) -> Line {
        let mut rng = Rng::new(self.seed, index, Stream::Moves);
        let source = fresh_line(&self.openings, known.seed, rng.below(known.games));
        let target = target_length(&mut rng);
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a fraction in [0, 1] of a target of at most MAX_PLIES"
        )]
        let mut follow =
            ((known.fraction * target as f64).round() as usize).min(source.moves.len());
        if follow == source.moves.len() && source.end.legal_moves().is_empty() {
            // Stop one ply before the source's mate or stalemate, to continue.
            follow -= 1;
        }
        let mut pos = Chess::default();
        for &m in &source.moves[..follow] {
            pos.play_unchecked(m);
        }
        let mut moves = source.moves[..follow].to_vec();
        let avoid = source.moves.get(follow).copied();
        continue_line(
            &mut pos,
            &mut moves,
            target.max(follow + 1),
            &mut rng,
            avoid,
        );
        Line {
            opening: source.opening,
            moves,
            end: pos,
        }
    }

    /// Tags, movetext with clocks, and result of game `index`.
    fn render(&self, index: u64, line: &Line) -> String {
        let mut rng = Rng::new(self.seed, index, Stream::Tags);
        let (base, increment) = TIME_CONTROLS[rng.weighted(&TIME_CONTROL_WEIGHTS)];
        let event = event_name(speed(base, increment), &mut rng);
        let (white, black) = self.pairing(&mut rng);
        let white_elo = white.rating + rng.range_i32(-60, 60);
        let black_elo = black.rating + rng.range_i32(-60, 60);
        let (result, termination) = outcome(line, white_elo, black_elo, &mut rng);
        let (white_diff, black_diff) = rating_diffs(white_elo, black_elo, result, &mut rng);
        let header = Header {
            event,
            white,
            black,
            elos: [white_elo, black_elo],
            diffs: [white_diff, black_diff],
            result,
            termination,
            time_control: (base, increment),
        };
        let mut s = String::with_capacity(900 + 28 * line.moves.len());
        self.write_tags(&mut s, index, &self.openings[line.opening], &header);
        write_movetext(&mut s, line, &header, &mut rng);
        s
    }

    /// White and Black: White at random, paired with the closest-rated of
    /// three candidates, as matchmaking would.
    fn pairing(&self, rng: &mut Rng) -> (&Player, &Player) {
        let white_index = rng.index(PLAYERS);
        let black_index = (0..3)
            .map(|_| rng.index(PLAYERS))
            .filter(|&i| i != white_index)
            .min_by_key(|&i| (self.players[i].rating - self.players[white_index].rating).abs())
            .unwrap_or((white_index + 1) % PLAYERS);
        (&self.players[white_index], &self.players[black_index])
    }

    /// The tag section of game `index`, and the blank line after it.
    fn write_tags(&self, s: &mut String, index: u64, opening: &Opening, header: &Header) {
        let when = self.start_time(index);
        let (base, increment) = header.time_control;
        let [white_elo, black_elo] = header.elos;
        let [white_diff, black_diff] = header.diffs;
        let mut tag = |name: &str, value: &str| {
            // Writing to a String cannot fail.
            let _ = writeln!(s, "[{name} \"{value}\"]");
        };
        tag("Event", &header.event);
        tag(
            "Site",
            &format!("https://lichess.org/{}", game_id(self.seed, index)),
        );
        tag("Date", &when.format("%Y.%m.%d").to_string());
        tag("Round", "-");
        tag("White", &header.white.name);
        tag("Black", &header.black.name);
        tag("Result", header.result_text());
        tag("UTCDate", &when.format("%Y.%m.%d").to_string());
        tag("UTCTime", &when.format("%H:%M:%S").to_string());
        tag("WhiteElo", &white_elo.to_string());
        tag("BlackElo", &black_elo.to_string());
        tag("WhiteRatingDiff", &format!("{white_diff:+}"));
        tag("BlackRatingDiff", &format!("{black_diff:+}"));
        if let Some(title) = header.white.title {
            tag("WhiteTitle", title);
        }
        if let Some(title) = header.black.title {
            tag("BlackTitle", title);
        }
        tag("ECO", &opening.eco);
        tag("Opening", &opening.name);
        tag("TimeControl", &format!("{base}+{increment}"));
        tag("Termination", header.termination);
        s.push('\n');
    }

    /// Games are spread evenly over 30 days, in file order like a dump;
    /// each seed gets its own month so corpora do not overlap in time.
    fn start_time(&self, index: u64) -> NaiveDateTime {
        let epoch = NaiveDate::from_ymd_opt(2024, 1, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .unwrap_or_default();
        let month = Duration::days(30 * (self.seed % 24).cast_signed());
        let offset = u128::from(index) * 30 * 86_400 / u128::from(self.games.max(1));
        let offset = i64::try_from(offset).expect("at most 30 days of seconds: index < games");
        epoch + month + Duration::seconds(offset)
    }
}

/// What a game's tags say besides its date, site and opening.
struct Header<'a> {
    event: String,
    white: &'a Player,
    black: &'a Player,
    /// White's, then Black's.
    elos: [i32; 2],
    diffs: [i32; 2],
    /// The winner, `None` for a draw.
    result: Option<Color>,
    termination: &'static str,
    /// Base seconds, increment.
    time_control: (u32, u32),
}

impl Header<'_> {
    fn result_text(&self) -> &'static str {
        match self.result {
            Some(Color::White) => "1-0",
            Some(Color::Black) => "0-1",
            None => "1/2-1/2",
        }
    }
}

/// A Lichess event name: mostly casual rated games, else a tournament or
/// a swiss of the speed.
fn event_name(speed: &str, rng: &mut Rng) -> String {
    match rng.below(100) {
        0..80 => format!("Rated {speed} game"),
        80..95 => format!(
            "Rated {speed} tournament https://lichess.org/tournament/{}",
            event_id(speed, rng.below(TOURNAMENTS))
        ),
        _ => format!(
            "{speed} swiss https://lichess.org/swiss/{}",
            event_id(speed, TOURNAMENTS + rng.below(TOURNAMENTS))
        ),
    }
}

/// The winner (`None`: a draw) and the Termination tag: the board's
/// verdict if the line ended the game, else a draw now and then, or a win
/// by the Elo expectation, some of them on time.
fn outcome(
    line: &Line,
    white_elo: i32,
    black_elo: i32,
    rng: &mut Rng,
) -> (Option<Color>, &'static str) {
    match line.end.outcome().known() {
        Some(KnownOutcome::Decisive { winner }) => (Some(winner), "Normal"),
        Some(KnownOutcome::Draw) => (None, "Normal"),
        None => {
            let expected = 1.0 / (1.0 + 10f64.powf(f64::from(black_elo - white_elo) / 400.0));
            let winner = if rng.chance(0.06) {
                None
            } else if rng.chance(expected) {
                Some(Color::White)
            } else {
                Some(Color::Black)
            };
            let termination = if winner.is_some() && rng.chance(0.3) {
                "Time forfeit"
            } else {
                "Normal"
            };
            (winner, termination)
        }
    }
}

/// The moves with a clock comment after each, then the result. Each side
/// starts at the base time (Lichess shows it after the first move), then
/// spends a random share of what is left.
fn write_movetext(s: &mut String, line: &Line, header: &Header, rng: &mut Rng) {
    let (base, increment) = header.time_control;
    let mut clocks = [i64::from(base), i64::from(base)];
    let mut pos = Chess::default();
    let plies = line.moves.len();
    for (ply, &m) in line.moves.iter().enumerate() {
        let side = ply % 2;
        if ply >= 2 {
            // Players budget for about 40 moves, whatever the game's length.
            let remaining_moves = (40usize.saturating_sub(ply / 2)).max(20) as f64;
            let budget = clocks[side] as f64 / remaining_moves;
            #[expect(
                clippy::cast_possible_truncation,
                reason = "at most four times a clock's seconds"
            )]
            let spent = (budget * 4.0 * rng.unit() * rng.unit()).round() as i64;
            clocks[side] = (clocks[side] - spent + i64::from(increment)).max(1);
        }
        if header.termination == "Time forfeit" && ply + 2 >= plies && header.result.is_some() {
            // The loser's flag is about to fall.
            let loser = usize::from(header.result == Some(Color::White));
            if side == loser {
                clocks[side] = clocks[side].min(i64::from(rng.small(3)));
            }
        }
        let san = SanPlus::from_move_and_play_unchecked(&mut pos, m);
        let number = ply / 2 + 1;
        let c = clocks[side];
        let dots = if side == 0 { "." } else { "..." };
        // Writing to a String cannot fail.
        let _ = write!(
            s,
            "{number}{dots} {san} {{ [%clk {}:{:02}:{:02}] }} ",
            c / 3600,
            c / 60 % 60,
            c % 60
        );
    }
    s.push_str(header.result_text());
    s.push_str("\n\n");
}

/// Game `index` of corpus `seed`: an opening of the sample, then random play.
fn fresh_line(openings: &[Opening], seed: u64, index: u64) -> Line {
    let mut rng = Rng::new(seed, index, Stream::Moves);
    let which = rng.index(openings.len());
    let opening = &openings[which];
    let k = (4 + rng.index(13)).min(opening.moves.len());
    let target = target_length(&mut rng);
    let mut pos = Chess::default();
    for &m in &opening.moves[..k] {
        pos.play_unchecked(m);
    }
    let mut moves = Vec::with_capacity(target);
    moves.extend_from_slice(&opening.moves[..k]);
    continue_line(&mut pos, &mut moves, target, &mut rng, None);
    Line {
        opening: which,
        moves,
        end: pos,
    }
}

/// 20–150 plies, skewed towards short games: about 77 on average before
/// mates and draws shorten some (≈ 70 after).
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "x is in [0, 1]: at most MAX_PLIES - MIN_PLIES"
)]
fn target_length(rng: &mut Rng) -> usize {
    let x = (rng.unit() * rng.unit()).sqrt();
    MIN_PLIES + ((MAX_PLIES - MIN_PLIES) as f64 * x).round() as usize
}

/// Plays moves until `target` plies or the game is over. `avoid` is not
/// played first (when there is another move), to leave a known line.
fn continue_line(
    pos: &mut Chess,
    moves: &mut Vec<Move>,
    target: usize,
    rng: &mut Rng,
    mut avoid: Option<Move>,
) {
    while moves.len() < target && !pos.is_insufficient_material() {
        let Some(m) = choose_move(pos, moves.len(), rng, avoid.take()) else {
            break;
        };
        pos.play_unchecked(m);
        moves.push(m);
    }
}

/// Probability of playing a "book" move at `ply`: high in the opening,
/// none from ply 45, so positions repeat across games mostly early on.
/// Tuned so a 200,000-game corpus has about 50 distinct positions per
/// 71-position game (`--stats`): large real databases share openings, but
/// almost every position past move 10–20 is unique.
fn book_probability(ply: usize) -> f64 {
    match ply {
        0..20 => 0.99,
        20..45 => 0.99 * (45 - ply) as f64 / 25.0,
        _ => 0.0,
    }
}

/// Popularity of the first, second and third book move of a position.
const BOOK_RANKS: [u32; 3] = [95, 4, 1];

/// Picks a legal move, or `None` when there is none.
fn choose_move(pos: &Chess, ply: usize, rng: &mut Rng, avoid: Option<Move>) -> Option<Move> {
    let mut moves = pos.legal_moves();
    if let Some(avoid) = avoid
        && moves.len() > 1
    {
        moves.retain(|m| *m != avoid);
    }
    if moves.is_empty() {
        return None;
    }
    if rng.chance(book_probability(ply)) {
        // One of (up to) three moves that depend only on the position, with
        // falling popularity: the opening tree branches like real play.
        let key = pos.zobrist_hash::<Zobrist64>(EnPassantMode::Legal).0;
        let rank = rng.weighted(&BOOK_RANKS) as u64;
        let pick = splitmix(key ^ rank.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % moves.len() as u64;
        return Some(moves[usize::try_from(pick).expect("below moves.len()")]);
    }
    let mut weights = [0u32; 256];
    let mut mate = None;
    for (i, &m) in moves.iter().enumerate() {
        let mut after = pos.clone();
        after.play_unchecked(m);
        let check = after.is_check();
        if check && after.legal_moves().is_empty() {
            mate = Some(m);
        }
        weights[i] = 1
            + 3 * u32::from(m.is_capture())
            + 2 * u32::from(check)
            + 3 * u32::from(m.is_promotion());
    }
    if let Some(m) = mate
        && rng.chance(0.7)
    {
        return Some(m);
    }
    Some(moves[rng.weighted(&weights[..moves.len()])])
}

/// Zobrist hashes (en passant only when legal, i.e. the normalized FEN's
/// identity) of a line's positions, the start included.
fn position_hashes(moves: &[Move]) -> Vec<u64> {
    let mut pos = Chess::default();
    let mut out = Vec::with_capacity(moves.len() + 1);
    out.push(pos.zobrist_hash::<Zobrist64>(EnPassantMode::Legal).0);
    for &m in moves {
        pos.play_unchecked(m);
        out.push(pos.zobrist_hash::<Zobrist64>(EnPassantMode::Legal).0);
    }
    out
}

/// Every position of the known corpus (regenerated, not read).
fn known_positions(ctx: &Context, known: &Known) -> HashSet<u64> {
    let mut set = HashSet::new();
    let mut start = 0;
    while start < known.games {
        let end = (start + 16 * BLOCK).min(known.games);
        let hashes: Vec<Vec<u64>> = (start..end)
            .into_par_iter()
            .map(|i| position_hashes(&fresh_line(&ctx.openings, known.seed, i).moves))
            .collect();
        for h in hashes {
            set.extend(h);
        }
        start = end;
    }
    set
}

/// (base seconds, increment) with their weights, after the sample's mix.
const TIME_CONTROLS: [(u32, u32); 12] = [
    (60, 0),
    (180, 0),
    (300, 0),
    (600, 0),
    (300, 3),
    (180, 2),
    (120, 1),
    (600, 5),
    (30, 0),
    (600, 1),
    (900, 10),
    (15, 0),
];
const TIME_CONTROL_WEIGHTS: [u32; 12] = [107, 83, 70, 52, 26, 19, 14, 12, 4, 6, 6, 1];

/// Lichess's speed from the estimated duration `base + 40 × increment`.
fn speed(base: u32, increment: u32) -> &'static str {
    match base + 40 * increment {
        0..30 => "UltraBullet",
        30..180 => "Bullet",
        180..480 => "Blitz",
        480..1500 => "Rapid",
        _ => "Classical",
    }
}

/// Rating changes: the winner gains what the loser loses, more for an upset.
fn rating_diffs(white: i32, black: i32, winner: Option<Color>, rng: &mut Rng) -> (i32, i32) {
    let mut swing = |winner_elo: i32, loser_elo: i32| {
        (6 + (loser_elo - winner_elo) / 60 + rng.range_i32(-1, 1)).clamp(1, 12)
    };
    match winner {
        Some(Color::White) => {
            let d = swing(white, black);
            (d, -d)
        }
        Some(Color::Black) => {
            let d = swing(black, white);
            (-d, d)
        }
        None => {
            let d = ((black - white) / 100).clamp(-3, 3);
            (d, -d)
        }
    }
}

/// A fixed pool (the same for every seed, so corpora share players) of
/// Lichess-looking usernames, unique case-insensitively as Lichess's are.
fn player_pool() -> Vec<Player> {
    const PARTS: [&str; 48] = [
        "alan", "brito", "meri", "dyan", "chess", "king", "knight", "rook", "pawn", "magnus",
        "tal", "blitz", "wolf", "shadow", "dragon", "tiger", "nova", "zen", "max", "leo", "ana",
        "maria", "ivan", "olga", "sasha", "raj", "chen", "li", "kim", "omar", "yusuf", "pedro",
        "luca", "emma", "noah", "mia", "dark", "fire", "ice", "storm", "gambit", "fork", "pin",
        "mate", "castle", "queen", "bishop", "ultra",
    ];
    const TITLES: [&str; 6] = ["GM", "IM", "FM", "CM", "NM", "BOT"];
    let mut rng = Rng::new(0x706c_6179_6572, 0, Stream::Tags);
    let mut taken = HashSet::new();
    let mut pool = Vec::with_capacity(PLAYERS);
    while pool.len() < PLAYERS {
        let mut name = String::new();
        for i in 0..2 + rng.below(2) {
            let part = PARTS[rng.index(PARTS.len())];
            if i > 0 && rng.chance(0.2) {
                name.push(if rng.chance(0.5) { '_' } else { '-' });
            }
            if rng.chance(0.3) {
                let mut chars = part.chars();
                if let Some(first) = chars.next() {
                    name.push(first.to_ascii_uppercase());
                    name.push_str(chars.as_str());
                }
            } else {
                name.push_str(part);
            }
        }
        if rng.chance(0.5) {
            let digits = 1 + rng.small(4);
            let _ = write!(name, "{}", rng.below(10u64.pow(digits)));
        }
        if name.len() > 20 || !taken.insert(name.to_ascii_lowercase()) {
            continue;
        }
        // Roughly normal ratings around 1500, as on Lichess.
        let normal: f64 = (0..4).map(|_| rng.unit()).sum::<f64>() - 2.0;
        #[expect(clippy::cast_possible_truncation, reason = "clamped to 600..=3000")]
        let rating = (1500.0 + 600.0 * normal).clamp(600.0, 3000.0) as i32;
        let title = rng.chance(0.01).then(|| TITLES[rng.index(TITLES.len())]);
        pool.push(Player {
            name,
            rating,
            title,
        });
    }
    pool
}

/// Bits of the seed that go into game ids.
const LANE_MASK: u64 = 0x7fff;
const ID_BITS: u32 = 47;
const ID_MASK: u64 = (1 << ID_BITS) - 1;

/// 8 base-62 characters from a 47-bit permutation of `(seed lane, index)`:
/// unique, yet random-looking like Lichess ids (62⁸ > 2⁴⁷).
fn game_id(seed: u64, index: u64) -> String {
    base62_id(permute47(
        ((seed & LANE_MASK) << 32) | (index & 0xffff_ffff),
    ))
}

/// Tournament and swiss ids: the same for every seed, so corpora share events.
fn event_id(speed: &str, n: u64) -> String {
    let salt = speed.bytes().fold(0u64, |h, b| splitmix(h ^ u64::from(b)));
    base62_id(splitmix(salt ^ n) & ID_MASK)
}

/// A bijection of [0, 2⁴⁷): xor-shifts and odd multiplications modulo 2⁴⁷
/// are each invertible.
fn permute47(mut x: u64) -> u64 {
    x &= ID_MASK;
    x ^= x >> 23;
    x = x.wrapping_mul(0x2545_f491_4f6c_dd1d) & ID_MASK;
    x ^= x >> 19;
    x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15 | 1) & ID_MASK;
    x ^= x >> 21;
    x
}

fn base62_id(mut x: u64) -> String {
    const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut id = [0u8; 8];
    for c in id.iter_mut().rev() {
        *c = DIGITS[(x % 62) as usize];
        x /= 62;
    }
    id.iter().map(|&b| char::from(b)).collect()
}

/// `SplitMix64`'s finalizer: a good 64-bit mixer.
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Independent random streams of one game: the moves must not depend on
/// tag choices, so that a second corpus can regenerate a game's moves.
#[derive(Clone, Copy)]
enum Stream {
    Moves = 1,
    Tags = 2,
}

/// `SplitMix64`: tiny, fast, and stable across crate versions, so a seed
/// means the same corpus forever.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, index: u64, stream: Stream) -> Rng {
        Rng(splitmix(
            splitmix(seed ^ (stream as u64).rotate_left(56)) ^ index,
        ))
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        splitmix(self.0)
    }

    /// Uniform in [0, n) (n > 0), by multiply-high.
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// [`Self::below`] `n`, as an index.
    fn index(&mut self, n: usize) -> usize {
        usize::try_from(self.below(n as u64)).expect("below n, a usize")
    }

    /// [`Self::below`] `n`, as a `u32`.
    fn small(&mut self, n: u32) -> u32 {
        u32::try_from(self.below(u64::from(n))).expect("below n, a u32")
    }

    /// Uniform in [lo, hi] (lo <= hi).
    fn range_i32(&mut self, lo: i32, hi: i32) -> i32 {
        let span = u64::try_from(i64::from(hi) - i64::from(lo) + 1).expect("lo <= hi");
        let offset = i64::try_from(self.below(span)).expect("below the span of two i32s");
        i32::try_from(i64::from(lo) + offset).expect("between lo and hi")
    }

    /// An index drawn with the given weights (not all zero).
    fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let mut x = self.below(total.max(1));
        for (i, &w) in weights.iter().enumerate() {
            if x < u64::from(w) {
                return i;
            }
            x -= u64::from(w);
        }
        weights.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_lichess_shaped() {
        let ids: HashSet<String> = (0..50_000).map(|i| game_id(1, i)).collect();
        assert_eq!(ids.len(), 50_000);
        assert!(
            ids.iter()
                .all(|id| id.len() == 8 && id.bytes().all(|b| b.is_ascii_alphanumeric()))
        );
        assert!((0..50_000).all(|i| !ids.contains(&game_id(2, i))));
    }
}

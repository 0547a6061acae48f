//! En Croissant's SQLite database: the schema of its `create.sql`, the
//! columns its queries read as not null, and `Moves` in its own encoding,
//! so that En Croissant opens pgnload's file (it cannot open ocgdb's: its
//! queries need `UTCTime`, `WhiteMaterial`, `BlackMaterial`, `PawnHome`
//! and `Moves`, which ocgdb's schema has not).
//!
//! `Moves` is one byte per move, the move's index in shakmaty's
//! `legal_moves()` of the position (at most 218 moves, so below the
//! markers), with four marker bytes: 252 a NAG and 253 a comment (each
//! followed by a little-endian `u16` length and that many bytes: `$N`, the
//! comment's text between its braces), 255 and 254 the start and end of a
//! variation, which starts from the position before the last move of the
//! line it is in. The move order is shakmaty's move generation: En
//! Croissant pins shakmaty 0.27.1, pgnload 0.30.1, and the two generate
//! the same order (checked position by position on the sample and TWIC
//! files, docs/exchange-formats.md).
//!
//! The other columns are what En Croissant's importer writes from the PGN
//! tags (here the tags `export --format pgn` writes): `Date` the last of
//! `Date`/`UTCDate`, `UTCTime`, `Round`, `Result` and `TimeControl` as
//! written, an Elo of `-` as 0, `FEN` none for the standard start (a start
//! shakmaty refuses, which En Croissant's reader would panic on, as the
//! position pgnload replayed); names exactly as written (SQLite's `UNIQUE`
//! is case-sensitive), none being the placeholder row 0 `Unknown`; `WhiteMaterial`/`BlackMaterial` the
//! least material (P 1, N B 3, R 5, Q 9, at most 39) the mainline has
//! before a promotion or at its end, and `PawnHome` the pawns still on
//! their home ranks at its end: bounds its position search prunes by.
//!
//! Carried: every comment, NAG and variation at any depth. Not carried:
//! nothing of the annotations; a game with a null move (no index in
//! `legal_moves()`) is skipped and counted, as in the other formats.

use std::{
    collections::HashMap,
    io,
    path::{Path, PathBuf},
};

use rusqlite::{Connection, params};
use shakmaty::{
    Bitboard, CastlingMode, Chess, Color, EnPassantMode, FromSetup, Move, Position, Role,
    fen::Fen,
    san::{San, SanPlus},
};

use crate::{
    chess::annotation::{Held, LEVEL_COST, comment_value, tokens},
    error::Error,
    export::{pgn, start_position},
    query::games::{StoredGame, StoredMove},
};

/// A NAG: `u16` length, then `$N`.
pub const NAG_MARKER: u8 = 252;
/// A comment: `u16` length, then its text.
pub const COMMENT_MARKER: u8 = 253;
/// The end of a variation.
pub const VARIATION_END: u8 = 254;
/// The start of a variation.
pub const VARIATION_START: u8 = 255;

/// En Croissant's `DATABASE_VERSION`, its `Info` row `Version`.
const DATABASE_VERSION: &str = "1.0.0";

/// The tables of En Croissant's `create.sql`, with its placeholder rows.
pub const SCHEMA: &str = "
CREATE TABLE Info (Name TEXT UNIQUE NOT NULL, Value TEXT);
CREATE TABLE Events (ID INTEGER PRIMARY KEY AUTOINCREMENT, Name TEXT UNIQUE);
CREATE TABLE Sites (ID INTEGER PRIMARY KEY AUTOINCREMENT, Name TEXT UNIQUE);
CREATE TABLE Players (ID INTEGER PRIMARY KEY, Name TEXT UNIQUE, Elo INTEGER);
CREATE TABLE Games (ID INTEGER PRIMARY KEY AUTOINCREMENT, EventID INTEGER, SiteID INTEGER, \
Date TEXT, UTCTime TEXT, Round INTEGER, WhiteID INTEGER, WhiteElo INTEGER, BlackID INTEGER, \
BlackElo INTEGER, WhiteMaterial INTEGER, BlackMaterial INTEGER, Result INTEGER, \
TimeControl TEXT, ECO TEXT, PlyCount INTEGER, FEN TEXT, Moves BLOB, PawnHome BLOB, \
FOREIGN KEY(EventID) REFERENCES Events, FOREIGN KEY(SiteID) REFERENCES Sites, \
FOREIGN KEY(WhiteID) REFERENCES Players, FOREIGN KEY(BlackID) REFERENCES Players);
INSERT INTO Players (ID, Name, Elo) VALUES (0, 'Unknown', NULL);
INSERT INTO Events (ID, Name) VALUES (0, 'Unknown');
INSERT INTO Sites (ID, Name) VALUES (0, 'Unknown');
";

/// The indexes of En Croissant's `indexes.sql`, created once the games are
/// in (as its importer does); its `get_db_info` reports a file without
/// them as not indexed.
pub const INDEXES: &str = "
CREATE INDEX games_date_idx ON Games(Date);
CREATE INDEX games_white_idx ON Games(WhiteID);
CREATE INDEX games_black_idx ON Games(BlackID);
CREATE INDEX games_result_idx ON Games(Result);
CREATE INDEX games_white_elo_idx ON Games(WhiteElo);
CREATE INDEX games_black_elo_idx ON Games(BlackElo);
CREATE INDEX games_plycount_idx ON Games(PlyCount);
";

/// The standard start, which En Croissant stores as no `FEN`.
const START_FEN: &str = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1";

/// Material as En Croissant counts it: P 1, N 3, B 3, R 5, Q 9, per side.
pub fn material(board: &shakmaty::Board) -> (u8, u8) {
    let side = |color: Color| {
        let of = |role: Role, worth: u32| {
            u32::try_from((board.by_color(color) & board.by_role(role)).count()).unwrap_or(0)
                * worth
        };
        let sum = of(Role::Pawn, 1) + of(Role::Knight, 3) + of(Role::Bishop, 3);
        u8::try_from(sum + of(Role::Rook, 5) + of(Role::Queen, 9)).unwrap_or(u8::MAX)
    };
    (side(Color::White), side(Color::Black))
}

/// The white pawns on rank 2 (bits 0–7, file a first) and the black pawns
/// on rank 7 (bits 8–15): En Croissant's `PawnHome`.
pub fn pawn_home(board: &shakmaty::Board) -> u16 {
    let white =
        (board.by_color(Color::White) & board.pawns() & Bitboard::from(shakmaty::Rank::Second)).0;
    let black =
        (board.by_color(Color::Black) & board.pawns() & Bitboard::from(shakmaty::Rank::Seventh)).0;
    let rank = |bits: u64| u16::try_from(bits & 0xff).unwrap_or(0);
    rank(white >> 8) | rank(black >> 48) << 8
}

/// The index of `m` in `position`'s legal moves: its byte in `Moves`.
pub fn move_code(position: &Chess, m: &Move) -> Option<u8> {
    position
        .legal_moves()
        .iter()
        .position(|legal| legal == m)
        .and_then(|i| u8::try_from(i).ok())
        .filter(|&code| code < NAG_MARKER)
}

/// A `Games` row's move columns: `Moves`, `PlyCount`, the least material
/// and the final `PawnHome`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// `Moves`.
    pub moves: Vec<u8>,
    /// Mainline moves.
    pub ply_count: usize,
    /// `WhiteMaterial`.
    pub white_material: u8,
    /// `BlackMaterial`.
    pub black_material: u8,
    /// `PawnHome`.
    pub pawn_home: u16,
}

/// Why a game cannot be encoded: a null move (skipped and counted), or a
/// value the encoding cannot hold (the reason).
#[derive(Debug, PartialEq, Eq)]
pub enum NotEncoded {
    /// A null move, mainline or variation.
    NullMove,
    /// Anything else, with why.
    Unwritable(String),
}

/// One line being encoded: its position and the one before its last move
/// (where a variation of that move starts).
#[derive(Clone)]
struct Line {
    position: Chess,
    before_last: Option<Chess>,
}

impl Line {
    fn new(position: Chess) -> Line {
        Line {
            position,
            before_last: None,
        }
    }
}

/// Encodes a game being built: the bytes and the stack of lines.
struct Encoder {
    out: Vec<u8>,
    lines: Vec<Line>,
}

impl Encoder {
    /// Appends `san` played in the current line.
    fn play(&mut self, san: SanPlus) -> Result<(), NotEncoded> {
        let line = self
            .lines
            .last_mut()
            .ok_or_else(|| NotEncoded::Unwritable("a move after its variation closed".into()))?;
        if san.san == San::Null {
            return Err(NotEncoded::NullMove);
        }
        let m = san
            .san
            .to_move(&line.position)
            .map_err(|e| NotEncoded::Unwritable(format!("{san} does not replay: {e}")))?;
        let code = move_code(&line.position, &m)
            .ok_or_else(|| NotEncoded::Unwritable(format!("{san} has no legal-move index")))?;
        self.out.push(code);
        line.before_last = Some(line.position.clone());
        line.position.play_unchecked(m);
        Ok(())
    }

    /// Appends a marker with its length-prefixed text.
    fn text(&mut self, marker: u8, text: &str) -> Result<(), NotEncoded> {
        let len = u16::try_from(text.len()).map_err(|_| {
            NotEncoded::Unwritable(format!(
                "a comment of {} bytes, over the format's 65,535",
                text.len()
            ))
        })?;
        self.out.push(marker);
        self.out.extend(len.to_le_bytes());
        self.out.extend_from_slice(text.as_bytes());
        Ok(())
    }

    /// A comment as En Croissant's importer stores one read from PGN: the
    /// text between the braces, so with the spaces `{ text }` puts there.
    fn comment(&mut self, comment: &str) -> Result<(), NotEncoded> {
        if comment.is_empty() {
            return Ok(());
        }
        self.text(COMMENT_MARKER, &format!(" {comment} "))
    }

    fn nag(&mut self, nag: impl std::fmt::Display) -> Result<(), NotEncoded> {
        self.text(NAG_MARKER, &format!("${nag}"))
    }

    /// Appends a ply's stored notes (`$2 { text } ( 24. Qxd6 … )`): the
    /// NAGs, comment and variations after the move just played.
    fn notes(&mut self, text: &str) -> Result<(), NotEncoded> {
        for token in tokens(text) {
            match token.as_bytes().first() {
                Some(b'$') => self.nag(&token[1..])?,
                Some(b'{') => {
                    let inner = token.strip_prefix('{').unwrap_or(token);
                    let inner = inner.strip_suffix('}').unwrap_or(inner);
                    self.comment(&comment_value(inner.as_bytes()))?;
                }
                Some(b'(') => {
                    let parent = self.lines.last().ok_or_else(|| {
                        NotEncoded::Unwritable("a variation outside any line".into())
                    })?;
                    let start = parent
                        .before_last
                        .clone()
                        .unwrap_or_else(|| parent.position.clone());
                    self.out.push(VARIATION_START);
                    self.lines.push(Line::new(start));
                }
                Some(b')') => {
                    if self.lines.len() < 2 {
                        return Err(NotEncoded::Unwritable("an unbalanced `)` in notes".into()));
                    }
                    self.lines.pop();
                    self.out.push(VARIATION_END);
                }
                Some(b'0'..=b'9') => {} // a move number
                _ => {
                    let san: SanPlus = token.parse().map_err(|e| {
                        NotEncoded::Unwritable(format!("{token:?} in notes is no move: {e}"))
                    })?;
                    self.play(san)?;
                }
            }
        }
        Ok(())
    }
}

/// Encodes `game`'s moves with its annotations (its stored notes where a
/// ply has some, else its typed NAG and `%eval`/`%clk` comment), and the
/// material and pawn bounds of its mainline.
pub fn encode(game: &StoredGame, moves: &[StoredMove]) -> Result<Encoded, NotEncoded> {
    let start = start_position(game).map_err(|e| NotEncoded::Unwritable(e.to_string()))?;
    let mut encoder = Encoder {
        out: Vec::with_capacity(moves.len() * 2),
        lines: vec![Line::new(start)],
    };
    let (mut least_white, mut least_black) = (39_u8, 39_u8);
    if let Some(notes) = game.notes.at(0) {
        encoder.notes(notes)?;
    }
    for (ply, stored) in moves.iter().enumerate() {
        let san: SanPlus = stored.san.parse().map_err(|e| {
            NotEncoded::Unwritable(format!("stored move {} {:?}: {e}", ply + 1, stored.san))
        })?;
        if matches!(
            san.san,
            San::Normal {
                promotion: Some(_),
                ..
            }
        ) {
            let (white, black) = material(encoder.lines[0].position.board());
            least_white = least_white.min(white);
            least_black = least_black.min(black);
        }
        encoder.play(san)?;
        if let Some(notes) = u32::try_from(ply + 1).ok().and_then(|p| game.notes.at(p)) {
            encoder.notes(notes)?;
        } else {
            if let Some(nag) = stored.nag {
                encoder.nag(nag)?;
            }
            let comment = pgn::move_comment(game.id, ply, stored)
                .map_err(|e| NotEncoded::Unwritable(e.to_string()))?;
            encoder.comment(&comment)?;
        }
        if encoder.lines.len() != 1 {
            return Err(NotEncoded::Unwritable(format!(
                "the notes of ply {} leave a variation open",
                ply + 1
            )));
        }
    }
    let end = encoder.lines[0].position.board().clone();
    let (white, black) = material(&end);
    Ok(Encoded {
        moves: encoder.out,
        ply_count: moves.len(),
        white_material: least_white.min(white),
        black_material: least_black.min(black),
        pawn_home: pawn_home(&end),
    })
}

/// A `Moves` blob read back: the mainline in SAN, and the whole tree as
/// PGN movetext (numbered, `{ comments }`, `$N`, `( variations )`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecodedMoves {
    /// The mainline moves, SAN with check marks.
    pub mainline: Vec<String>,
    /// The movetext, without a result.
    pub movetext: String,
}

/// The line being decoded: its position, whether its next move needs its
/// number (at its start, after a comment or a variation), and the
/// position before its last move with that move (where a variation after
/// the move starts).
struct DecodeLine {
    position: Chess,
    numbered: bool,
    before_last: Option<(Chess, Move)>,
}

/// A line a variation suspended: the position before its last move with
/// that move (it goes on from the position after it), or, before its
/// first move, its position.
enum Suspended {
    Before(Chess, Move),
    At(Chess),
}

impl DecodeLine {
    /// A line starting at `position`.
    fn at(position: Chess) -> DecodeLine {
        DecodeLine {
            position,
            numbered: true,
            before_last: None,
        }
    }

    /// A variation opening after this line's last move (before its first:
    /// at its position): the line it starts, and this one suspended.
    fn open(self) -> (DecodeLine, Suspended) {
        match self.before_last {
            Some((before, last)) => (
                DecodeLine::at(before.clone()),
                Suspended::Before(before, last),
            ),
            None => (
                DecodeLine::at(self.position.clone()),
                Suspended::At(self.position),
            ),
        }
    }

    /// The line `suspended` going on after its variation.
    fn resumed(suspended: Suspended) -> DecodeLine {
        match suspended {
            Suspended::At(position) => DecodeLine::at(position),
            Suspended::Before(before, last) => {
                let mut position = before.clone();
                position.play_unchecked(last);
                DecodeLine {
                    position,
                    numbered: true,
                    before_last: Some((before, last)),
                }
            }
        }
    }

    /// Plays the move `code` (at byte `at`) indexes in the legal moves:
    /// its token (numbered when it needs to be) and its SAN.
    fn play(&mut self, code: u8, at: usize) -> Result<(String, String), String> {
        let m = self
            .position
            .legal_moves()
            .get(usize::from(code))
            .copied()
            .ok_or_else(|| format!("byte {at} ({code}) is no legal move's index"))?;
        let number = self.position.fullmoves();
        let white = self.position.turn() == Color::White;
        let before = self.position.clone();
        let san = SanPlus::from_move_and_play_unchecked(&mut self.position, m).to_string();
        self.before_last = Some((before, m));
        let token = match (white, self.numbered) {
            (true, _) => format!("{number}. {san}"),
            (false, true) => format!("{number}... {san}"),
            (false, false) => san.clone(),
        };
        self.numbered = false;
        Ok((token, san))
    }
}

/// The `u16`-length-prefixed text after a marker at `at`, and where the
/// next byte is.
fn marked_text<'a>(blob: &'a [u8], at: usize, what: &str) -> Result<(&'a [u8], usize), String> {
    let len = blob
        .get(at..at + 2)
        .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))
        .ok_or_else(|| format!("{what} length cut short at byte {at}"))?;
    let text = blob
        .get(at + 2..at + 2 + len)
        .ok_or_else(|| format!("{what} of {len} bytes cut short at byte {at}"))?;
    Ok((text, at + 2 + len))
}

/// A NAG as En Croissant stores it (`$N`; its renderer also knows the
/// six symbols), as PGN writes it: `$N` with its digits as stored, so
/// that the PGN reader judges its number as it judges any PGN game's.
fn nag_token(text: &[u8]) -> Result<String, String> {
    let text = String::from_utf8_lossy(text);
    let symbol = match text.as_ref() {
        "!" => Some(1),
        "?" => Some(2),
        "!!" => Some(3),
        "??" => Some(4),
        "!?" => Some(5),
        "?!" => Some(6),
        _ => None,
    };
    if let Some(number) = symbol {
        return Ok(format!("${number}"));
    }
    match text.strip_prefix('$') {
        Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(text.into_owned())
        }
        _ => Err(format!("NAG {text:?} is no NAG")),
    }
}

/// Reads a `Moves` blob from `start` (the game's `FEN`, else the standard
/// start): an error names the byte that is not a legal move, a marker cut
/// short, or an unbalanced variation. What it builds is bounded by
/// `max_bytes` (`max_game_bytes`), counted as [`Held`] counts a PGN
/// game's variations: the movetext and mainline written, and
/// [`LEVEL_COST`] per level of nesting (each suspended line keeps one
/// position); a blob that would take more is an error saying so.
pub fn decode(blob: &[u8], start: Chess, max_bytes: u64) -> Result<DecodedMoves, String> {
    let mut out = DecodedMoves::default();
    let mut held = Held::within(max_bytes);
    let too_large = |_| {
        format!(
            "its Moves decode to more than the limit of {max_bytes} bytes of movetext and \
             nesting (max_game_bytes; each level of nesting counts {LEVEL_COST} bytes)"
        )
    };
    let mut line = DecodeLine::at(start);
    let mut suspended: Vec<Suspended> = Vec::new();
    let mut at = 0;
    while let Some(&byte) = blob.get(at) {
        at += 1;
        let token = match byte {
            NAG_MARKER => {
                let (text, next) = marked_text(blob, at, "a NAG")?;
                at = next;
                nag_token(text)?
            }
            COMMENT_MARKER => {
                let (text, next) = marked_text(blob, at, "a comment")?;
                at = next;
                line.numbered = true;
                format!("{{ {} }}", comment_value(text).replace('}', ")"))
            }
            VARIATION_START => {
                let parent;
                (line, parent) =
                    std::mem::replace(&mut line, DecodeLine::at(Chess::default())).open();
                suspended.push(parent);
                held.level(suspended.len()).map_err(too_large)?;
                "(".to_owned()
            }
            VARIATION_END => {
                let parent = suspended
                    .pop()
                    .ok_or_else(|| format!("a variation end at byte {} closes none", at - 1))?;
                line = DecodeLine::resumed(parent);
                ")".to_owned()
            }
            code => {
                let (token, san) = line.play(code, at - 1)?;
                if suspended.is_empty() {
                    held.add((size_of::<String>() + san.len()) as u64)
                        .map_err(too_large)?;
                    out.mainline.push(san);
                }
                token
            }
        };
        held.add(token.len() as u64 + 1).map_err(too_large)?;
        if !out.movetext.is_empty() {
            out.movetext.push(' ');
        }
        out.movetext.push_str(&token);
    }
    if !suspended.is_empty() {
        return Err(format!("{} variations left open", suspended.len()));
    }
    Ok(out)
}

/// The `Games` columns En Croissant's importer takes from a game's tags,
/// read from `tags` as it reads them (a later `Date`/`UTCDate` replaces an
/// earlier one; an Elo of `-` is 0, one that is no number none).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TagColumns {
    /// `Event`, `Site`, `White`, `Black`: a row of their tables.
    pub names: [Option<String>; 4],
    /// `Date`.
    pub date: Option<String>,
    /// `UTCTime`.
    pub utc_time: Option<String>,
    /// `Round`.
    pub round: Option<String>,
    /// `WhiteElo`, `BlackElo`.
    pub elos: [Option<i32>; 2],
    /// `Result`.
    pub result: Option<String>,
    /// `TimeControl`.
    pub time_control: Option<String>,
    /// `ECO`.
    pub eco: Option<String>,
    /// `FEN`, none for the standard start.
    pub fen: Option<String>,
}

impl TagColumns {
    /// The columns of `tags` (name, value), in the order written.
    pub fn of(tags: &[(String, String)]) -> TagColumns {
        let mut c = TagColumns::default();
        let elo = |v: &str| if v == "-" { Some(0) } else { v.parse().ok() };
        for (name, value) in tags {
            let value = value.clone();
            match name.as_str() {
                "Event" => c.names[0] = Some(value),
                "Site" => c.names[1] = Some(value),
                "White" => c.names[2] = Some(value),
                "Black" => c.names[3] = Some(value),
                "Date" | "UTCDate" => c.date = Some(value),
                "UTCTime" => c.utc_time = Some(value),
                "Round" => c.round = Some(value),
                "WhiteElo" => c.elos[0] = elo(&value),
                "BlackElo" => c.elos[1] = elo(&value),
                "Result" => c.result = Some(value),
                "TimeControl" => c.time_control = Some(value),
                "ECO" => c.eco = Some(value),
                "FEN" => c.fen = Some(value).filter(|f| f != START_FEN),
                _ => {}
            }
        }
        c
    }
}

/// Whether En Croissant's readers accept `fen` (as they read it: shakmaty's
/// parse, the castling mode detected, too much material allowed).
fn readable_by_en_croissant(fen: &str) -> bool {
    Fen::from_ascii(fen.as_bytes()).is_ok_and(|fen| {
        let setup = fen.into_setup();
        let mode = CastlingMode::detect(&setup);
        Chess::from_setup(setup, mode)
            .or_else(shakmaty::PositionError::ignore_too_much_material)
            .is_ok()
    })
}

/// A SQLite error while writing `what`, as an output error.
fn sql(what: &'static str) -> impl Fn(rusqlite::Error) -> Error {
    move |e| {
        Error::Output(io::Error::other(format!(
            "writing the En Croissant file ({what}): {e}"
        )))
    }
}

/// An En Croissant database being written, game by game.
#[derive(Debug)]
pub struct EncroissantWriter {
    target: PathBuf,
    partial: PathBuf,
    connection: Connection,
    /// Ids by exact name of `Events`, `Sites`, `Players`; `Unknown` is 0.
    names: [HashMap<String, i64>; 3],
    games: i64,
}

/// The tables of [`EncroissantWriter::names`], for `Event`, `Site`,
/// `White`, `Black`.
const NAME_TABLES: [(usize, &str); 4] =
    [(0, "Events"), (1, "Sites"), (2, "Players"), (2, "Players")];

impl EncroissantWriter {
    /// Creates the database at `target` (under the `.partial` name of
    /// [`super::ocgdb::OcgdbWriter::partial`] until [`finish`]), with the
    /// tables and the `Info` rows En Croissant's importer writes first.
    ///
    /// [`finish`]: EncroissantWriter::finish
    pub fn create(target: &Path) -> Result<EncroissantWriter, Error> {
        let (partial, connection) = super::ocgdb::OcgdbWriter::create_partial(target, SCHEMA)?;
        let title = target.file_stem().map_or_else(
            || "pgnload".to_owned(),
            |s| s.to_string_lossy().into_owned(),
        );
        for (key, value) in [
            ("Version", DATABASE_VERSION),
            ("Title", title.as_str()),
            ("Description", "exported by pgnload"),
        ] {
            connection
                .execute(
                    "INSERT INTO Info (Name, Value) VALUES (?1, ?2)",
                    params![key, value],
                )
                .map_err(sql("Info"))?;
        }
        connection.execute_batch("BEGIN").map_err(sql("BEGIN"))?;
        let unknown = || HashMap::from([("Unknown".to_owned(), 0)]);
        Ok(EncroissantWriter {
            target: target.to_owned(),
            partial,
            connection,
            names: [unknown(), unknown(), unknown()],
            games: 0,
        })
    }

    /// Appends a standard-chess game; `false` (nothing written) for a game
    /// with a null move, which `Moves` cannot hold.
    pub fn write(&mut self, game: &StoredGame, moves: &[StoredMove]) -> Result<bool, Error> {
        let encoded = match encode(game, moves) {
            Ok(encoded) => encoded,
            Err(NotEncoded::NullMove) => return Ok(false),
            Err(NotEncoded::Unwritable(reason)) => {
                return Err(Error::Unwritable {
                    game: game.id,
                    reason,
                });
            }
        };
        let mut tags = TagColumns::of(&pgn::tags(game)?);
        if let Some(fen) = &tags.fen
            && !readable_by_en_croissant(fen)
        {
            // A start python-chess reads and shakmaty refuses (castling
            // rights without their rook): En Croissant's reader would
            // panic on it; written as the position pgnload replayed.
            let start = start_position(game)?;
            tags.fen = Some(Fen::from_position(&start, EnPassantMode::Legal).to_string());
        }
        let mut ids = [0_i64; 4];
        for (slot, (table, name)) in NAME_TABLES.iter().enumerate() {
            ids[slot] = self.name_id(*table, name, tags.names[slot].as_deref())?;
        }
        self.games += 1;
        let ply_count = i64::try_from(encoded.ply_count)
            .map_err(|_| Error::bug(format!("game {}: too many moves", game.id)))?;
        self.connection
            .prepare_cached(
                "INSERT INTO Games (ID, EventID, SiteID, Date, UTCTime, Round, WhiteID, WhiteElo, \
                 BlackID, BlackElo, WhiteMaterial, BlackMaterial, Result, TimeControl, ECO, \
                 PlyCount, FEN, Moves, PawnHome) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, \
                 ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    self.games,
                    ids[0],
                    ids[1],
                    tags.date,
                    tags.utc_time,
                    tags.round,
                    ids[2],
                    tags.elos[0],
                    ids[3],
                    tags.elos[1],
                    encoded.white_material,
                    encoded.black_material,
                    tags.result,
                    tags.time_control,
                    tags.eco,
                    ply_count,
                    tags.fen,
                    encoded.moves,
                    encoded.pawn_home,
                ])
            })
            .map_err(sql("Games"))?;
        Ok(true)
    }

    /// The id of `name` in `table` (0 for none), its row inserted the
    /// first time it is seen.
    fn name_id(
        &mut self,
        slot: usize,
        table: &'static str,
        name: Option<&str>,
    ) -> Result<i64, Error> {
        let Some(name) = name else { return Ok(0) };
        let ids = &mut self.names[slot];
        if let Some(&id) = ids.get(name) {
            return Ok(id);
        }
        let id = i64::try_from(ids.len()).map_err(|_| Error::bug("too many names"))?;
        let insert = match table {
            "Players" => "INSERT INTO Players (ID, Name) VALUES (?1, ?2)",
            "Events" => "INSERT INTO Events (ID, Name) VALUES (?1, ?2)",
            _ => "INSERT INTO Sites (ID, Name) VALUES (?1, ?2)",
        };
        self.connection
            .prepare_cached(insert)
            .and_then(|mut s| s.execute(params![id, name]))
            .map_err(sql(table))?;
        ids.insert(name.to_owned(), id);
        Ok(id)
    }

    /// Writes the counts into `Info` as En Croissant's importer does (rows
    /// counted with the `Unknown` placeholders), creates its indexes,
    /// commits, closes and renames the file to its name.
    pub fn finish(self) -> Result<(), Error> {
        let EncroissantWriter {
            target,
            partial,
            connection,
            names,
            games,
        } = self;
        for (key, n) in [
            ("GameCount", usize::try_from(games).unwrap_or(0)),
            ("PlayerCount", names[2].len()),
            ("EventCount", names[0].len()),
            ("SiteCount", names[1].len()),
        ] {
            connection
                .execute(
                    "INSERT INTO Info (Name, Value) VALUES (?1, ?2)",
                    params![key, n.to_string()],
                )
                .map_err(sql("Info"))?;
        }
        connection.execute_batch(INDEXES).map_err(sql("indexes"))?;
        super::ocgdb::OcgdbWriter::finish_partial(connection, &partial, &target)
    }
}

#[cfg(test)]
mod tests {
    use shakmaty::{Board, CastlingMode, fen::Fen};

    use super::*;

    #[test]
    fn pawn_home_and_material_are_en_croissants() {
        assert_eq!(pawn_home(&Board::default()), 0xFFFF);
        let board = Fen::from_ascii(b"8/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/8 w - - 0 1")
            .expect("a FEN")
            .into_setup()
            .board;
        // The e-pawns (bit 4 of each rank) left home.
        assert_eq!(pawn_home(&board), 0b1110_1111_1110_1111);
        assert_eq!(material(&Board::default()), (39, 39));
        assert_eq!(material(&board), (8, 8));
    }

    #[test]
    fn moves_decode_with_markers_and_variations() {
        // At the start e2e4 is legal move 12, and after it e7e5 too
        // (En Croissant's own test: `[12, 12]` is 1. e4 e5).
        let mut blob = vec![12, NAG_MARKER, 2, 0, b'$', b'1'];
        blob.extend([COMMENT_MARKER, 4, 0, b' ', b'h', b'i', b' ']);
        blob.extend([VARIATION_START, 12, VARIATION_END, 12]);
        let decoded = decode(&blob, Chess::default(), 1 << 20).expect("decodes");
        assert_eq!(decoded.mainline, ["e4", "e5"]);
        assert_eq!(decoded.movetext, "1. e4 $1 { hi } ( 1. e4 ) 1... e5");
        // En Croissant's symbolic NAGs read as their numbers.
        assert_eq!(nag_token(b"?!").as_deref(), Ok("$6"));
        assert_eq!(nag_token(b"$99999").as_deref(), Ok("$99999"));
        assert!(nag_token(b"$x").is_err() && nag_token(b"$").is_err());
    }

    #[test]
    fn a_start_en_croissant_refuses_is_found() {
        assert!(readable_by_en_croissant(START_FEN));
        // Too much material: En Croissant allows it.
        assert!(readable_by_en_croissant(
            "rnbqkbnr/pppppppp/8/8/8/NNNN4/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
        ));
        // White may castle short without a rook on h1: python-chess reads
        // it, shakmaty (so En Croissant) refuses it.
        assert!(!readable_by_en_croissant("4k3/8/8/8/8/8/8/4K3 w K - 0 1"));
        assert!(!readable_by_en_croissant("not a fen"));
    }

    #[test]
    fn a_bad_blob_is_an_error_naming_what() {
        let start = Chess::default;
        assert!(decode(&[250], start(), 1 << 20).is_err_and(|e| e.contains("no legal move")));
        assert!(
            decode(&[COMMENT_MARKER, 9, 0, b'a'], start(), 1 << 20)
                .is_err_and(|e| e.contains("cut short"))
        );
        assert!(
            decode(&[VARIATION_END], start(), 1 << 20).is_err_and(|e| e.contains("closes none"))
        );
        assert!(
            decode(&[12, VARIATION_START, 12], start(), 1 << 20)
                .is_err_and(|e| e.contains("left open"))
        );
        // A set-up start: Black to move, numbered from its FEN.
        let black = Fen::from_ascii(b"7k/8/8/8/8/8/8/K7 b - - 0 40")
            .expect("a FEN")
            .into_position(CastlingMode::Standard)
            .expect("a position");
        let decoded = decode(&[0], black, 1 << 20).expect("decodes");
        assert!(
            decoded.movetext.starts_with("40... K"),
            "{}",
            decoded.movetext
        );
    }
}

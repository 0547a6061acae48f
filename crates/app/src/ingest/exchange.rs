//! Imports from the exchange formats: an ocgdb or En Croissant SQLite
//! database and a Simple Chess Database (`.dci/.dcg/.dcn/.dcs/.dce`), read
//! game by game and handed on as PGN text, so that their games go through
//! the very pipeline PGN goes through (replay, normalized FEN, digests,
//! dedup, checkpoints, rejects, scope filters, explorer counters).
//!
//! Each stored game is decoded by a pure function ([`render`], from the
//! formats' decoders next to their encoders in `export`) into PGN: the tags
//! the format keeps, the moves in UCI (which the replay reads, castling
//! included, as python-chess does), comments and NAGs; En Croissant's
//! moves in SAN, with their variations. That text is what a reject keeps. A game the decoders refuse (a code that is no move, a
//! record cut short, a reference to a missing name) is a reject of its own
//! ([`RejectReason::Undecodable`](crate::error::RejectReason)); an illegal
//! move is the replay's reject, as in PGN. The other games go on.
//!
//! Positions: game number is the game's ordinal in the input (ocgdb: rows
//! by `ID`; dcg: index entries, deleted ones skipped), and it is what a
//! resume skips; the byte offset is the `Games.ID` (ocgdb) or the record's
//! offset in the `.dcg` file. Numbers read from the file are not trusted:
//! an ID that is no integer, is negative or is past 2^62, and an index
//! offset past 2^62, make that game a reject recorded at byte 0; the
//! other games go on.
//!
//! Memory, bounded in bytes whatever the file holds: an ocgdb file is read
//! by one thread over two cursors (games by ID, comments by game), which
//! measures each row before copying it (a row holding more than
//! `max_game_bytes` of names, moves and comments, or more moves than
//! `max_plies`, is a reject, never copied) and hands the rendered games
//! over in parcels of about a MiB, two ahead; a dcg base is read entry by
//! entry from the index, each record by its offset, at most
//! `max_game_bytes` long, and decoded into at most `max_plies` moves and
//! comments costing at most `max_game_bytes` ([`COMMENT_COST`] each more
//! than their text); En Croissant's `Moves` decode into at most
//! `max_game_bytes` of movetext and nesting ([`encroissant::decode`]).
//! Reading stops at the run's first interrupt, even inside a SQLite query
//! that would never end.
//!
//! Identity: an input is every file it is read from ([`fingerprint`]), and
//! a dcg base that does not match the manifest its export wrote is refused
//! as an incomplete export set.

use std::{
    fmt::Write as _,
    fs::File,
    io::{self, BufReader, Read},
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    thread,
};

use crossbeam_channel::Receiver;
use rusqlite::{
    Connection, OpenFlags,
    types::{Value, ValueRef},
};

use crate::{
    chess::{
        fen::position_from_fen,
        reader::{GameChunk, GameSplitter, ParseLimits},
    },
    error::{Error, SourcePos},
    export::{
        COMMENT_COST, PlainMove,
        dcg::{self, AnnotatedMove},
        encroissant, ocgdb,
    },
    ingest::source::{self, Compression},
};

/// A game as decoded from a stored format, before it is PGN.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// Tags in PGN order, only the known ones.
    pub tags: Vec<(&'static str, String)>,
    /// Comments before the first move.
    pub lead: Vec<Vec<u8>>,
    /// The moves with their annotations.
    pub moves: Vec<AnnotatedMove>,
    /// The movetext in SAN, in place of `lead` and `moves`: En
    /// Croissant's `Moves`, whose variations they cannot hold.
    pub movetext: Option<String>,
    /// The result marker ending the movetext.
    pub result: &'static str,
}

/// The movetext result for a `Result` value (`*` for none or another text,
/// which the tag keeps).
fn result_marker(result: Option<&str>) -> &'static str {
    match result.map(str::trim) {
        Some("1-0") => "1-0",
        Some("0-1") => "0-1",
        Some("1/2-1/2") => "1/2-1/2",
        _ => "*",
    }
}

/// `m` in UCI (`e7e8q`, castling as the king's two squares, `--` for a
/// null move), which the replay reads as python-chess does.
fn uci(m: PlainMove) -> String {
    match m {
        PlainMove::Null => "--".to_owned(),
        PlainMove::Move {
            from,
            to,
            promotion,
        } => {
            let square = |s: u8| {
                let file = char::from(b'a' + s % 8);
                let rank = char::from(b'1' + s / 8);
                format!("{file}{rank}")
            };
            let piece = match promotion {
                2 => "=N",
                3 => "=B",
                4 => "=R",
                5 => "=Q",
                _ => "",
            };
            format!("{}{}{piece}", square(from), square(to))
        }
    }
}

/// A comment's bytes as a PGN comment body: `}` (which would end it) is
/// written `)`, a NUL byte as a space.
fn comment_text(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'{');
    out.extend(bytes.iter().map(|&b| match b {
        b'}' => b')',
        0 => b' ',
        b => b,
    }));
    out.extend_from_slice(b"} ");
}

/// The PGN text of a decoded game: tags (values escaped as PGN escapes
/// them, line breaks as spaces), then the movetext in UCI.
pub fn render(game: &Decoded) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + 8 * game.moves.len());
    for (name, value) in &game.tags {
        out.push(b'[');
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b" \"");
        for c in value.chars() {
            match c {
                '\\' | '"' => {
                    out.push(b'\\');
                    out.push(c as u8);
                }
                '\n' | '\r' => out.push(b' '),
                c => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        out.extend_from_slice(b"\"]\n");
    }
    out.push(b'\n');
    for comment in &game.lead {
        comment_text(comment, &mut out);
    }
    if let Some(movetext) = &game.movetext {
        out.extend_from_slice(movetext.as_bytes());
        out.push(b' ');
    }
    for m in &game.moves {
        out.extend_from_slice(uci(m.plain).as_bytes());
        out.push(b' ');
        for nag in &m.nags {
            out.extend_from_slice(format!("${nag} ").as_bytes());
        }
        for comment in &m.comments {
            comment_text(comment, &mut out);
        }
    }
    out.extend_from_slice(game.result.as_bytes());
    out.extend_from_slice(b"\n\n");
    out
}

/// One input of stored games, read as a sequence of [`GameChunk`]s.
pub struct StoredGames {
    file: Arc<str>,
    limits: ParseLimits,
    /// Games handed out, those skipped on resume included.
    games: u64,
    /// Size of the named file, for progress.
    pub len: Option<u64>,
    /// Progress: the named file's size times the share of games read.
    pub consumed: Arc<AtomicU64>,
    reader: Format,
}

enum Format {
    Ocgdb(OcgdbRows),
    Dcg(DcgBase),
}

impl StoredGames {
    /// Opens `name`, sniffed as `format`, for reading from its
    /// `skip_games + 1`-th game on. A SQLite file that is not an ocgdb
    /// database, or a dcg base missing a file, fails here, naming what is
    /// missing. Reading stops (with an error for which
    /// [`source::is_cancelled`] holds) once `interrupts` is non-zero, even
    /// inside a SQLite query.
    pub fn open(
        name: &str,
        format: Compression,
        skip_games: u64,
        limits: ParseLimits,
        interrupts: Arc<AtomicUsize>,
    ) -> Result<StoredGames, Error> {
        let path = Path::new(name);
        let len = std::fs::metadata(path)
            .map_err(|source| Error::Open {
                path: path.to_path_buf(),
                source,
            })?
            .len();
        let reader = match format {
            Compression::Sqlite => Format::Ocgdb(
                OcgdbRows::open(path, skip_games, limits, interrupts).map_err(|source| {
                    Error::Open {
                        path: path.to_path_buf(),
                        source,
                    }
                })?,
            ),
            Compression::Dcg => Format::Dcg(DcgBase::open(path, skip_games, interrupts)?),
            other => {
                return Err(Error::bug(format!(
                    "{name}: {other} input handed to the exchange reader"
                )));
            }
        };
        Ok(StoredGames {
            file: Arc::from(name),
            limits,
            games: skip_games,
            len: Some(len),
            consumed: Arc::new(AtomicU64::new(0)),
            reader,
        })
    }

    /// Games handed out so far (including the ones skipped before a resume).
    pub fn games_read(&self) -> u64 {
        self.games
    }

    /// The next game, `None` at the end. An `Err` means the input itself
    /// failed (a SQLite or file read error); every game before it is whole.
    pub fn next_chunk(&mut self) -> io::Result<Option<GameChunk>> {
        let (offset, text, progress) = match &mut self.reader {
            Format::Ocgdb(rows) => match rows.next()? {
                None => return Ok(None),
                Some((id, game)) => (id, game, rows.progress(id)),
            },
            Format::Dcg(base) => match base.next(self.limits)? {
                None => return Ok(None),
                Some((offset, game)) => (offset, game, base.progress()),
            },
        };
        if let Some(len) = self.len {
            let done = (u128::from(len) * u128::from(progress.0) / u128::from(progress.1.max(1)))
                .min(u128::from(len));
            self.consumed
                .store(u64::try_from(done).unwrap_or(len), Ordering::Relaxed);
        }
        self.games += 1;
        let pos = SourcePos {
            file: Arc::clone(&self.file),
            game_number: self.games,
            byte_offset: offset,
        };
        Ok(Some(match text {
            Err((raw, reason)) => GameChunk::undecodable(pos, raw, reason),
            Ok(pgn) => self.split(pos, pgn),
        }))
    }

    /// The chunk of one rendered game, as the splitter cuts PGN (so its
    /// tags are found as in any PGN).
    fn split(&self, pos: SourcePos, pgn: Vec<u8>) -> GameChunk {
        let mut splitter = GameSplitter::new(
            &pgn[..],
            Arc::clone(&pos.file),
            pos.byte_offset,
            pos.game_number - 1,
            self.limits,
        );
        match (splitter.next_chunk(), splitter.next_chunk()) {
            (Ok(Some(chunk)), Ok(None)) => chunk,
            _ => GameChunk::undecodable(
                pos,
                pgn,
                "its tags and comments do not read back as one PGN game".into(),
            ),
        }
    }
}

/// The identity of an exchange input (`format` as sniffed): a digest over
/// every file it is read from, so that a change to any of them makes it
/// another input (see [`source::fingerprint`] for one file). A dcg base is
/// its five files whichever one is named (`dcg-set:…`); an ocgdb file is
/// itself plus its `-wal` and `-journal` when they hold bytes, since
/// SQLite reads committed games from the WAL before they reach the file
/// (`sqlite-set:…`; without them, the file's own fingerprint). The digest
/// is xxh3-128 over one `NAME SIZE DIGEST` line per file, in that fixed
/// order. A dcg base whose files differ from the manifest its export
/// wrote ([`dcg::SetManifest`]) fails here: it is an incomplete export
/// set, not a base. Returns the fingerprint and the named file's size.
///
/// Inputs recorded by pgnload before this (the named file's fingerprint
/// only): a dcg base, and an ocgdb file with a WAL or journal, no longer
/// match their record, so they are read once more and their games found
/// already present; one whose import was interrupted is "changed since
/// its interrupted import" and needs `--restart` once.
pub fn fingerprint(
    path: &Path,
    format: Compression,
    interrupts: &AtomicUsize,
) -> Result<(String, u64), Error> {
    let (kind, files): (&str, Vec<(&str, PathBuf)>) = match format {
        Compression::Dcg => {
            let base = path.with_extension("");
            let files = dcg::FILES
                .iter()
                .map(|&ext| (ext, with_suffix(&base, &format!(".{ext}"))))
                .collect();
            ("dcg-set", files)
        }
        Compression::Sqlite => {
            let mut files = vec![("db", path.to_path_buf())];
            for suffix in ["-wal", "-journal"] {
                let companion = with_suffix(path, suffix);
                if std::fs::metadata(&companion).is_ok_and(|m| m.len() > 0) {
                    files.push((suffix, companion));
                }
            }
            if files.len() == 1 {
                return source::fingerprint(path, interrupts);
            }
            ("sqlite-set", files)
        }
        other => {
            return Err(Error::bug(format!(
                "{}: {other} input handed to the exchange fingerprint",
                path.display()
            )));
        }
    };
    let mut lines = String::new();
    let (mut total, mut named) = (0u64, None);
    let mut digests = Vec::with_capacity(files.len());
    for (name, file) in &files {
        let (size, digest) =
            source::digest_file(file, None, interrupts).map_err(|source| Error::Open {
                path: file.clone(),
                source,
            })?;
        let _ = writeln!(lines, "{name} {size} {digest:032x}");
        total += size;
        if file == path {
            named = Some(size);
        }
        digests.push((size, Some(digest)));
    }
    if format == Compression::Dcg {
        // One (size, digest) per file of dcg::FILES, in its order.
        let actual = <[(u64, Option<u128>); 5]>::try_from(digests)
            .map_err(|_| Error::bug("a dcg base is five files"))?;
        check_set(path, &actual)?;
    }
    let digest = xxhash_rust::xxh3::xxh3_128(lines.as_bytes());
    Ok((
        format!("{kind}:xxh3-128:{total}:{digest:032x}"),
        named.unwrap_or(total),
    ))
}

/// `path` with `suffix` appended to its name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Refuses the dcg base `path` names when a manifest beside it
/// ([`dcg::SetManifest`]) lists other sizes or digests than `actual`
/// (`(size, digest)` of each file in [`dcg::FILES`] order; a digest of
/// `None` is not compared): an export interrupted between its renames, or
/// files changed since. A base without a manifest (pgn2dcg's) is read as
/// it is.
fn check_set(path: &Path, actual: &[(u64, Option<u128>); 5]) -> Result<(), Error> {
    let base = path.with_extension("");
    let Some(manifest) = dcg::SetManifest::read(&base)? else {
        return Ok(());
    };
    let differing = manifest.differing(actual);
    if differing.is_empty() {
        return Ok(());
    }
    let manifest = dcg::manifest_path(&base);
    Err(Error::Input {
        file: path.display().to_string(),
        message: format!(
            "incomplete export set: its .{} {} from what {} lists (an export stopped \
             between its renames, or files changed since); export the base again, or delete {} \
             to read the files as they are",
            differing.join(", ."),
            if differing.len() == 1 {
                "file differs"
            } else {
                "files differ"
            },
            manifest.display(),
            manifest.display()
        ),
    })
}

/// A decoded game's PGN, or the stored bytes and why it cannot be decoded.
type Stored = Result<Vec<u8>, (Vec<u8>, String)>;

/// The columns of `Games` read; the optional ones are NULL when absent.
const GAMES_REQUIRED: [&str; 5] = ["ID", "EventID", "SiteID", "WhiteID", "BlackID"];
const GAMES_OPTIONAL: [&str; 9] = [
    "Date",
    "Round",
    "WhiteElo",
    "BlackElo",
    "Result",
    "TimeControl",
    "ECO",
    "FEN",
    "UTCTime",
];

/// One `Games` row with its names and comments, as SQLite gave them (its
/// ID apart: a reject's reason names it). [`Default`]: every column NULL.
#[derive(Debug)]
pub struct OcgdbRow {
    /// `(the ref, the referred row's ID, its Name)` for Event, Site,
    /// White, Black (a ref to no row has an ID of NULL).
    pub refs: [(Value, Value, Value); 4],
    /// The optional columns, in [`GAMES_OPTIONAL`] order.
    pub columns: [Value; 9],
    /// `Moves2`, or En Croissant's `Moves` when `encroissant`.
    pub moves2: Value,
    /// Whether the file is En Croissant's: `moves2` is its `Moves`.
    pub encroissant: bool,
    /// `(Ply, Comment)` of the game's comments, by ply.
    pub comments: Vec<(Value, Value)>,
}

impl Default for OcgdbRow {
    fn default() -> OcgdbRow {
        let null = || (Value::Null, Value::Null, Value::Null);
        OcgdbRow {
            refs: [null(), null(), null(), null()],
            columns: std::array::from_fn(|_| Value::Null),
            moves2: Value::Null,
            encroissant: false,
            comments: Vec::new(),
        }
    }
}

/// A column value as text; `what` names it in errors.
fn text(value: &Value, what: &str) -> Result<Option<String>, String> {
    match value {
        Value::Null => Ok(None),
        Value::Text(t) => Ok(Some(t.clone())),
        Value::Integer(n) => Ok(Some(n.to_string())),
        Value::Real(x) => Ok(Some(x.to_string())),
        Value::Blob(_) => Err(format!("{what} is a blob, not text")),
    }
}

/// Decodes one ocgdb game row (pure); En Croissant's `Moves` decode to
/// at most `max_bytes` (`max_game_bytes`, see [`encroissant::decode`]).
pub fn decode_ocgdb(row: &OcgdbRow, max_bytes: u64) -> Result<Decoded, String> {
    let names = ref_names(row)?;
    let column = |i: usize| text(&row.columns[i], GAMES_OPTIONAL[i]);
    let [event, site, white, black] = names;
    let date = column(0)?.map(|d| d.replace('-', "."));
    let result = column(4)?;
    let fen = column(7)?.filter(|f| !f.trim().is_empty());
    let mut tags = Vec::with_capacity(14);
    let mut tag = |name: &'static str, value: Option<String>| {
        if let Some(value) = value {
            tags.push((name, value));
        }
    };
    tag("Event", event);
    tag("Site", site);
    let utc_time = column(8)?;
    if utc_time.is_some() {
        tag("UTCDate", date.clone());
    }
    tag("Date", date);
    tag("UTCTime", utc_time);
    tag("Round", column(1)?);
    tag("White", white);
    tag("Black", black);
    tag("Result", Some(result.clone().unwrap_or_else(|| "*".into())));
    tag("WhiteElo", column(2)?.filter(|e| e != "0"));
    tag("BlackElo", column(3)?.filter(|e| e != "0"));
    tag("TimeControl", column(5)?);
    tag("ECO", column(6)?);
    if fen.is_some() {
        tag("SetUp", Some("1".into()));
    }
    if row.encroissant {
        let movetext = match &row.moves2 {
            Value::Blob(blob) => {
                let start = match &fen {
                    None => shakmaty::Chess::default(),
                    Some(fen) => {
                        match position_from_fen(fen, shakmaty::variant::Variant::Chess, false) {
                            Ok(shakmaty::variant::VariantPosition::Chess(start)) => start,
                            Ok(_) => return Err(format!("FEN {fen:?} is not standard chess")),
                            Err(e) => return Err(format!("FEN {fen:?}: {e}")),
                        }
                    }
                };
                encroissant::decode(blob, start, max_bytes)?.movetext
            }
            _ => return Err("Moves is not a blob".into()),
        };
        tag("FEN", fen);
        return Ok(Decoded {
            tags,
            movetext: Some(movetext),
            result: result_marker(result.as_deref()),
            ..Decoded::default()
        });
    }
    tag("FEN", fen);
    let plain = match &row.moves2 {
        Value::Null => Vec::new(),
        Value::Blob(blob) => ocgdb::moves_of_moves2(blob)?,
        _ => return Err("Moves2 is not a blob".into()),
    };
    let mut moves: Vec<AnnotatedMove> = plain
        .into_iter()
        .map(|plain| AnnotatedMove {
            plain,
            nags: Vec::new(),
            comments: Vec::new(),
        })
        .collect();
    let lead = attach_comments(&row.comments, &mut moves)?;
    Ok(Decoded {
        tags,
        lead,
        moves,
        movetext: None,
        result: result_marker(result.as_deref()),
    })
}

/// The names an ocgdb row refers to (event, site, white, black; a blank
/// name is none), or an error naming a reference to no row.
fn ref_names(row: &OcgdbRow) -> Result<[Option<String>; 4], String> {
    const REFS: [(&str, &str); 4] = [
        ("EventID", "Events"),
        ("SiteID", "Sites"),
        ("WhiteID", "Players"),
        ("BlackID", "Players"),
    ];
    let mut names: [Option<String>; 4] = Default::default();
    for (slot, ((column, table), (id, found, name))) in REFS.iter().zip(&row.refs).enumerate() {
        match (id, found) {
            (Value::Null, _) => {}
            (_, Value::Null) => {
                return Err(format!(
                    "{column} {} refers to no row of {table}",
                    text(id, column)?.unwrap_or_default()
                ));
            }
            _ => names[slot] = text(name, table)?.filter(|n| !n.trim().is_empty()),
        }
    }
    Ok(names)
}

/// Puts each `(Ply, Comment)` after its move (a ply past the last move
/// after the last); returns the comments before the first move (all of
/// them when the game has no moves).
fn attach_comments(
    comments: &[(Value, Value)],
    moves: &mut [AnnotatedMove],
) -> Result<Vec<Vec<u8>>, String> {
    let mut lead = Vec::new();
    for (ply, comment) in comments {
        let Some(comment) = text(comment, "Comments.Comment")? else {
            continue;
        };
        let ply = match ply {
            Value::Integer(n) => *n,
            _ => return Err("Comments.Ply is not an integer".into()),
        };
        // The 0-based move the comment follows; past the last, the last.
        match usize::try_from(ply)
            .ok()
            .map(|p| p.min(moves.len().saturating_sub(1)))
        {
            Some(p) if !moves.is_empty() => moves[p].comments.push(comment.into_bytes()),
            _ => lead.push(comment.into_bytes()),
        }
    }
    Ok(lead)
}

/// An ocgdb database's games, read, decoded and rendered by a thread of
/// their own, handed over in parcels bounded in bytes.
struct OcgdbRows {
    parcels: Receiver<io::Result<Vec<(u64, Stored)>>>,
    /// The parcel being handed out.
    parcel: std::vec::IntoIter<(u64, Stored)>,
    /// The largest integer `Games.ID`: progress is the ID read over it.
    max_id: u64,
}

/// Bytes of rendered games (or of rejects' stored bytes) the reading
/// thread gathers before handing them over; with [`PARCELS_AHEAD`] and the
/// per-game cap ([`ParseLimits::max_game_bytes`], which also bounds what
/// one row may hold before it is copied) this bounds the memory of an
/// ocgdb input whatever the file holds: about `(PARCELS_AHEAD + 2) ×
/// (PARCEL_BYTES + max_game_bytes)`.
const PARCEL_BYTES: usize = 1 << 20;
/// Games per parcel at most (small games: a handover per game would cost
/// more than reading it).
const PARCEL_GAMES: usize = 256;
/// Parcels waiting between the reading thread and the pipeline.
const PARCELS_AHEAD: usize = 2;
/// SQLite virtual machine steps between two looks at the run's interrupt
/// counter: a query that never ends (a `Games` view recursing forever)
/// stops at the first signal.
const INTERRUPT_CHECK_STEPS: i32 = 10_000;
/// Largest byte offset an exchange input's game is recorded at: an ocgdb
/// `Games.ID` or a `.dci` record offset above it is a reject, since the
/// offset plus the game's length must fit PostgreSQL's `bigint` (every
/// real file is far below: 2^62 bytes is four exbibytes).
const MAX_OFFSET: u64 = 1 << 62;

/// A SQLite error while reading an ocgdb input, as an I/O error: the
/// cancellation of [`source::cancelled`] when the run was interrupted (the
/// progress handler stopped SQLite), else SQLite's message.
fn sqlite_error(error: &rusqlite::Error, interrupts: &AtomicUsize) -> io::Error {
    if stopped_by_signal(error, interrupts) {
        source::cancelled()
    } else {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("reading it as SQLite: {error}"),
        )
    }
}

/// Whether SQLite stopped because the progress handler saw the run
/// interrupted.
fn stopped_by_signal(error: &rusqlite::Error, interrupts: &AtomicUsize) -> bool {
    interrupts.load(Ordering::SeqCst) > 0
        && error.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted)
}

impl OcgdbRows {
    /// Checks the schema (an error lists what is missing) and starts the
    /// reading thread past the first `skip` games. Every query of the
    /// connection stops once `interrupts` is non-zero.
    fn open(
        path: &Path,
        skip: u64,
        limits: ParseLimits,
        interrupts: Arc<AtomicUsize>,
    ) -> io::Result<OcgdbRows> {
        let sqlite = |e: rusqlite::Error| sqlite_error(&e, &interrupts);
        let mut connection = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sqlite)?;
        let watched = Arc::clone(&interrupts);
        connection
            .progress_handler(
                INTERRUPT_CHECK_STEPS,
                Some(move || watched.load(Ordering::SeqCst) > 0),
            )
            .map_err(sqlite)?;
        let invalid = |message: String| io::Error::new(io::ErrorKind::InvalidData, message);
        let columns = |table: &str| -> io::Result<Vec<String>> {
            let mut statement = connection
                .prepare("SELECT name FROM pragma_table_info(?1)")
                .map_err(sqlite)?;
            statement
                .query_map([table], |row| row.get::<_, String>(0))
                .map_err(sqlite)?
                .collect::<Result<_, _>>()
                .map_err(sqlite)
        };
        let games = check_schema(&columns)?;
        let encroissant = moves_column(&games) == Some("Moves");
        let comments = columns("Comments")?;
        let with_comments = ["GameID", "Ply", "Comment"]
            .iter()
            .all(|c| comments.iter().any(|h| h.eq_ignore_ascii_case(c)));
        let sql = games_query(&games);
        // An ID that is no integer is a reject of its own, not the input's
        // failure: the progress counts integer IDs only.
        let max_id: Option<i64> = connection
            .query_row(
                "SELECT max(ID) FROM Games WHERE typeof(ID) = 'integer'",
                [],
                |row| row.get(0),
            )
            .map_err(sqlite)?;
        let skip = i64::try_from(skip).map_err(|_| invalid(format!("cannot skip {skip} games")))?;
        // Prepared here so that a statement SQLite refuses is an error now.
        connection.prepare(&sql).map_err(sqlite)?;
        let (tx, rx) = crossbeam_channel::bounded(PARCELS_AHEAD);
        // Detached: it ends at its next send once the reader is dropped.
        thread::spawn(move || {
            let read = OcgdbRead {
                sql: &sql,
                skip,
                with_comments,
                encroissant,
                limits,
                tx: &tx,
            };
            if let Err(e) = read.run(&connection) {
                let _ = tx.send(Err(if stopped_by_signal(&e, &interrupts) {
                    source::cancelled()
                } else {
                    io::Error::other(format!("reading the ocgdb database: {e}"))
                }));
            }
        });
        Ok(OcgdbRows {
            parcels: rx,
            parcel: Vec::new().into_iter(),
            max_id: max_id.and_then(|id| u64::try_from(id).ok()).unwrap_or(0),
        })
    }

    /// The next game: its byte offset (its ID) and its PGN (or why it
    /// cannot be decoded).
    fn next(&mut self) -> io::Result<Option<(u64, Stored)>> {
        loop {
            if let Some(game) = self.parcel.next() {
                return Ok(Some(game));
            }
            let Ok(parcel) = self.parcels.recv() else {
                return Ok(None);
            };
            self.parcel = parcel?.into_iter();
        }
    }

    fn progress(&self, id: u64) -> (u64, u64) {
        (id, self.max_id)
    }
}

/// The columns of `Games` once the ocgdb schema is checked (`columns`
/// lists a table's columns, none for a missing table): an error lists
/// every table and column missing. SQLite's names ignore ASCII case; so
/// does the check.
fn check_schema(columns: &dyn Fn(&str) -> io::Result<Vec<String>>) -> io::Result<Vec<String>> {
    let mut missing = Vec::new();
    let games = columns("Games")?;
    if games.is_empty() {
        missing.push("table Games".to_owned());
    } else {
        for c in GAMES_REQUIRED {
            if !games.iter().any(|g| g.eq_ignore_ascii_case(c)) {
                missing.push(format!("column Games.{c}"));
            }
        }
        if moves_column(&games).is_none() {
            missing.push("column Games.Moves2 (ocgdb) or Games.Moves (En Croissant)".to_owned());
        }
    }
    for table in ["Events", "Sites", "Players"] {
        let have = columns(table)?;
        if have.is_empty() {
            missing.push(format!("table {table}"));
        }
        for c in ["ID", "Name"] {
            if !have.is_empty() && !have.iter().any(|h| h.eq_ignore_ascii_case(c)) {
                missing.push(format!("column {table}.{c}"));
            }
        }
    }
    if missing.is_empty() {
        return Ok(games);
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "a SQLite database, but not one in the ocgdb or En Croissant schema (pgnload \
             reads ocgdb's Games with a Moves2 column, En Croissant's with Moves): missing {}",
            missing.join(", ")
        ),
    ))
}

/// The column of `Games` (`games` are its columns) that holds the moves:
/// ocgdb's `Moves2`, else En Croissant's `Moves`; none when it has neither.
fn moves_column(games: &[String]) -> Option<&'static str> {
    ["Moves2", "Moves"]
        .into_iter()
        .find(|c| games.iter().any(|g| g.eq_ignore_ascii_case(c)))
}

/// The query of the games past `?1`, with their names, in ID order; an
/// optional column `Games` lacks (`games` are its columns) reads as NULL.
fn games_query(games: &[String]) -> String {
    let optional: Vec<String> = GAMES_OPTIONAL
        .iter()
        .map(|c| {
            if games.iter().any(|g| g.eq_ignore_ascii_case(c)) {
                format!("g.{c}")
            } else {
                "NULL".to_owned()
            }
        })
        .collect();
    format!(
        "SELECT g.ID, g.EventID, e.ID, e.Name, g.SiteID, s.ID, s.Name, g.WhiteID, w.ID, \
         w.Name, g.BlackID, b.ID, b.Name, {}, g.{} FROM Games g \
         LEFT JOIN Events e ON e.ID = g.EventID LEFT JOIN Sites s ON s.ID = g.SiteID \
         LEFT JOIN Players w ON w.ID = g.WhiteID LEFT JOIN Players b ON b.ID = g.BlackID \
         ORDER BY g.ID LIMIT -1 OFFSET ?1",
        optional.join(", "),
        moves_column(games).unwrap_or("Moves2")
    )
}

/// A value as read, text that is not UTF-8 decoded lossily: a bad byte in
/// one game must not stop the input (rusqlite refuses such text).
fn owned(value: ValueRef<'_>) -> Value {
    match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(n) => Value::Integer(n),
        ValueRef::Real(x) => Value::Real(x),
        ValueRef::Text(bytes) => Value::Text(String::from_utf8_lossy(bytes).into_owned()),
        ValueRef::Blob(bytes) => Value::Blob(bytes.to_vec()),
    }
}

/// Bytes a value holds (text and blobs; numbers count nothing).
fn held(value: ValueRef<'_>) -> u64 {
    match value {
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => bytes.len() as u64,
        _ => 0,
    }
}

/// A comment read ahead of its game: kept, or only its size when it alone
/// is over the per-game cap (it is never copied then).
enum Comment {
    Kept(Value, Value),
    Over(u64),
}

/// The comments of one game as read: those kept (none once the game is
/// over the cap), how many there were, and what they cost
/// ([`COMMENT_COST`] each plus their bytes).
#[derive(Default)]
struct GameComments {
    kept: Vec<(Value, Value)>,
    count: u64,
    cost: u64,
}

/// What the reading thread needs besides its connection.
struct OcgdbRead<'a> {
    sql: &'a str,
    skip: i64,
    with_comments: bool,
    /// The file is En Croissant's: its `Moves`, one byte per move at most.
    encroissant: bool,
    limits: ParseLimits,
    tx: &'a crossbeam_channel::Sender<io::Result<Vec<(u64, Stored)>>>,
}

/// Columns of the games query: ID, four `(ref, ID, Name)` triples, the
/// optional columns, `Moves2`.
const GAME_QUERY_COLUMNS: usize = 13 + GAMES_OPTIONAL.len() + 1;

impl OcgdbRead<'_> {
    /// Games by ID, each with its comments (a second cursor, by game,
    /// merged in), decoded and rendered, handed over in parcels. The games
    /// read before an error (a view failing at some row) are handed over
    /// before it, so that they are imported and the input resumes after
    /// them; the parcel they waited in is never dropped with the error.
    fn run(&self, connection: &Connection) -> rusqlite::Result<()> {
        let mut parcel = Vec::new();
        let read = self.read(connection, &mut parcel);
        if !parcel.is_empty() {
            let _ = self.tx.send(Ok(parcel));
        }
        read
    }

    /// [`OcgdbRead::run`]'s reading: full parcels sent, the last one left
    /// in `parcel`.
    fn read(
        &self,
        connection: &Connection,
        parcel: &mut Vec<(u64, Stored)>,
    ) -> rusqlite::Result<()> {
        let mut games = connection.prepare(self.sql)?;
        let mut rows = games.query([self.skip])?;
        let mut comments_statement = if self.with_comments {
            Some(connection.prepare(
                "SELECT GameID, Ply, Comment FROM Comments WHERE typeof(GameID) = 'integer' \
                 ORDER BY GameID, Ply, rowid",
            )?)
        } else {
            None
        };
        let mut comments = match &mut comments_statement {
            Some(statement) => Some(statement.query([])?),
            None => None,
        };
        let mut ahead: Option<(i64, Comment)> = None;
        let mut parcel_bytes = 0;
        while let Some(row) = rows.next()? {
            let game = match row.get_ref(0)? {
                ValueRef::Integer(id) => {
                    let found = self.comments_of(&mut comments, &mut ahead, id)?;
                    self.game(row, id, found)?
                }
                other => {
                    let reason = format!(
                        "Games.ID {} is not an integer: pgnload reads games by their integer ID",
                        describe(other)
                    );
                    (0, Err((self.moves_head(row)?, reason)))
                }
            };
            parcel_bytes += match &game.1 {
                Ok(pgn) => pgn.len(),
                Err((raw, _)) => raw.len(),
            };
            parcel.push(game);
            if parcel_bytes >= PARCEL_BYTES || parcel.len() >= PARCEL_GAMES {
                parcel_bytes = 0;
                if self.tx.send(Ok(std::mem::take(parcel))).is_err() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// The comments of game `id`, past those of lower IDs (games not read:
    /// skipped, or missing). A game's comments stop being kept once their
    /// cost passes the per-game cap, but are all read, to count them.
    fn comments_of(
        &self,
        rows: &mut Option<rusqlite::Rows<'_>>,
        ahead: &mut Option<(i64, Comment)>,
        id: i64,
    ) -> rusqlite::Result<GameComments> {
        let cap = self.limits.max_game_bytes;
        let mut found = GameComments::default();
        let Some(rows) = rows else {
            return Ok(found);
        };
        loop {
            let (game, comment) = match ahead.take() {
                Some(next) => next,
                None => match rows.next()? {
                    None => break,
                    Some(c) => {
                        let text = c.get_ref(2)?;
                        let comment = if held(text) > cap {
                            Comment::Over(held(text))
                        } else {
                            Comment::Kept(owned(c.get_ref(1)?), owned(text))
                        };
                        (c.get(0)?, comment)
                    }
                },
            };
            if game < id {
                continue;
            }
            if game > id {
                *ahead = Some((game, comment));
                break;
            }
            found.count += 1;
            match comment {
                Comment::Kept(ply, text) => {
                    found.cost += COMMENT_COST + held((&text).into());
                    if found.cost <= cap {
                        found.kept.push((ply, text));
                    }
                }
                Comment::Over(bytes) => found.cost += COMMENT_COST + bytes,
            }
            if found.cost > cap && !found.kept.is_empty() {
                found.kept = Vec::new();
            }
        }
        Ok(found)
    }

    /// The head of the row's `Moves2` blob (up to the per-game cap): what a
    /// reject of the row keeps.
    fn moves_head(&self, row: &rusqlite::Row<'_>) -> rusqlite::Result<Vec<u8>> {
        Ok(match row.get_ref(GAME_QUERY_COLUMNS - 1)? {
            ValueRef::Blob(blob) => {
                let cap = usize::try_from(self.limits.max_game_bytes).unwrap_or(usize::MAX);
                blob[..blob.len().min(cap)].to_vec()
            }
            _ => Vec::new(),
        })
    }

    /// One game row of integer `id` with its comments: its byte offset and
    /// its PGN, or a reject when its ID cannot be an offset, it holds more
    /// plies or bytes than a game may, or it cannot be decoded. Nothing of
    /// the row is copied before it is known to fit the cap.
    fn game(
        &self,
        row: &rusqlite::Row<'_>,
        id: i64,
        comments: GameComments,
    ) -> rusqlite::Result<(u64, Stored)> {
        let Ok(offset) = u64::try_from(id) else {
            let reason =
                format!("Games.ID {id} is negative: pgnload records a row's ID as its byte offset");
            return Ok((0, Err((self.moves_head(row)?, reason))));
        };
        if offset > MAX_OFFSET {
            let reason = format!(
                "Games.ID {id} is past 2^62: pgnload records a row's ID as its byte offset, \
                 which must leave room for the game's length in PostgreSQL's bigint"
            );
            return Ok((0, Err((self.moves_head(row)?, reason))));
        }
        // En Croissant's `Moves` mixes moves with comments: its plies are
        // counted when its PGN is read, and its decoding is bounded by the
        // byte cap (`encroissant::decode`).
        let plies = held(row.get_ref(GAME_QUERY_COLUMNS - 1)?) / 2;
        if !self.encroissant && plies > u64::from(self.limits.max_plies) {
            let reason = format!(
                "Games row {id}: Moves2 holds {plies} moves, more than the limit of {} plies",
                self.limits.max_plies
            );
            return Ok((offset, Err((self.moves_head(row)?, reason))));
        }
        let mut bytes = comments.cost;
        for i in 0..GAME_QUERY_COLUMNS {
            bytes += held(row.get_ref(i)?);
        }
        if bytes > self.limits.max_game_bytes {
            let reason = format!(
                "Games row {id}: its names, moves and {} comments take {bytes} bytes (each \
                 comment counting {COMMENT_COST} more), more than the limit of {} bytes \
                 (max_game_bytes)",
                comments.count, self.limits.max_game_bytes
            );
            return Ok((offset, Err((self.moves_head(row)?, reason))));
        }
        let value = |i: usize| row.get_ref(i).map(owned);
        let mut game = OcgdbRow::default();
        for (slot, at) in [1, 4, 7, 10].into_iter().enumerate() {
            game.refs[slot] = (value(at)?, value(at + 1)?, value(at + 2)?);
        }
        for i in 0..GAMES_OPTIONAL.len() {
            game.columns[i] = value(13 + i)?;
        }
        game.moves2 = value(GAME_QUERY_COLUMNS - 1)?;
        game.encroissant = self.encroissant;
        game.comments = comments.kept;
        let rendered = decode_ocgdb(&game, self.limits.max_game_bytes)
            .map(|decoded| render(&decoded))
            .map_err(|reason| {
                let raw = match game.moves2 {
                    Value::Blob(blob) => blob,
                    _ => Vec::new(),
                };
                (raw, format!("Games row {id}: {reason}"))
            });
        Ok((offset, rendered))
    }
}

/// A value that should have been an integer, described for a reject.
fn describe(value: ValueRef<'_>) -> String {
    match value {
        ValueRef::Null => "NULL".to_owned(),
        ValueRef::Integer(n) => n.to_string(),
        ValueRef::Real(x) => format!("{x} (a real)"),
        ValueRef::Text(t) => format!(
            "{:?} (text)",
            String::from_utf8_lossy(&t[..t.len().min(40)])
        ),
        ValueRef::Blob(b) => format!("a blob of {} bytes", b.len()),
    }
}

/// Bytes of each dcg file's magic, and of the index header.
const MAGIC: usize = 10;
const INDEX_HEADER: usize = MAGIC + 1 + 8;

/// One of the five files of a base, with its length.
struct Part {
    path: PathBuf,
    file: File,
    len: u64,
}

impl Part {
    fn open(base: &Path, ext: &str, magic: &[u8]) -> Result<Part, Error> {
        let mut name = base.as_os_str().to_owned();
        name.push(".");
        name.push(ext);
        let path = PathBuf::from(name);
        let err = |source| Error::Open {
            path: path.clone(),
            source,
        };
        let file = File::open(&path).map_err(err)?;
        let len = file.metadata().map_err(err)?.len();
        let mut head = [0u8; MAGIC];
        let ok = file.read_exact_at(&mut head, 0).is_ok() && head == magic;
        if !ok {
            return Err(err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "not a Simple Chess Database .{ext} file (no {:?} magic)",
                    String::from_utf8_lossy(magic)
                ),
            )));
        }
        Ok(Part { path, file, len })
    }

    /// Up to `n` bytes at `at` (fewer at the end of the file).
    fn read(&self, at: u64, n: usize) -> io::Result<Vec<u8>> {
        let mut chunk = vec![0u8; n];
        let mut got = 0;
        while got < n {
            match self.file.read_at(&mut chunk[got..], at + got as u64) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{}: {e}", self.path.display()),
                    ));
                }
            }
        }
        chunk.truncate(got);
        Ok(chunk)
    }
}

/// An index entry, or the bytes of one cut short by the end of the index.
type Entry = Result<[u8; dcg::ENTRY], Vec<u8>>;

/// A Simple Chess Database: its index read in order, the rest by offset.
struct DcgBase {
    index: BufReader<File>,
    index_len: u64,
    /// Bytes of the index read.
    at: u64,
    games: Part,
    names: Part,
    sites: Part,
    events: Part,
    /// The run's interrupt counter: reading stops once it is non-zero.
    interrupts: Arc<AtomicUsize>,
}

impl DcgBase {
    /// Opens the base `path` names (its `.dci` or `.dcg`; the others are
    /// found beside it) and skips the first `skip` games of the index.
    fn open(path: &Path, skip: u64, interrupts: Arc<AtomicUsize>) -> Result<DcgBase, Error> {
        let base = path.with_extension("");
        let index = Part::open(&base, "dci", b"SimpleCDbi")?;
        let mut version = [0u8; 1];
        index
            .file
            .read_exact_at(&mut version, MAGIC as u64)
            .map_err(|source| Error::Open {
                path: index.path.clone(),
                source,
            })?;
        if version[0] != 0 {
            return Err(Error::Open {
                path: index.path.clone(),
                source: io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("index version {} (pgnload reads version 0)", version[0]),
                ),
            });
        }
        let index_len = index.len;
        let mut reader = BufReader::with_capacity(1 << 16, index.file);
        io::copy(
            &mut (&mut reader).take(INDEX_HEADER as u64),
            &mut io::sink(),
        )
        .map_err(|source| Error::Open {
            path: index.path.clone(),
            source,
        })?;
        let mut base_files = DcgBase {
            index: reader,
            index_len,
            at: INDEX_HEADER as u64,
            games: Part::open(&base, "dcg", b"SimpleCDbg")?,
            names: Part::open(&base, "dcn", b"SimpleCDbn")?,
            sites: Part::open(&base, "dcs", b"SimpleCDbs")?,
            events: Part::open(&base, "dce", b"SimpleCDbe")?,
            interrupts,
        };
        // Sizes only (the import's fingerprint compared the digests):
        // every reader of a base refuses a set its manifest disowns.
        let parts = [
            &base_files.games,
            &base_files.names,
            &base_files.sites,
            &base_files.events,
        ];
        let mut sizes = [(index_len, None); 5];
        for (slot, part) in sizes[1..].iter_mut().zip(parts) {
            *slot = (part.len, None);
        }
        check_set(path, &sizes)?;
        let mut skipped = 0;
        while skipped < skip {
            match base_files.entry().map_err(|source| Error::Open {
                path: index.path.clone(),
                source,
            })? {
                Some(Ok(e)) if e[0] == DELETED => {}
                Some(_) => skipped += 1,
                None => break,
            }
        }
        Ok(base_files)
    }

    /// The next index entry, `Err` with its bytes when it is cut short.
    /// Fails (cancelled) once the run is interrupted: an index of millions
    /// of deleted entries is read without handing out a game.
    fn entry(&mut self) -> io::Result<Option<Entry>> {
        if self.interrupts.load(Ordering::SeqCst) > 0 {
            return Err(source::cancelled());
        }
        let mut e = [0u8; dcg::ENTRY];
        let mut got = 0;
        while got < e.len() {
            match self.index.read(&mut e[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
        self.at += got as u64;
        Ok(match got {
            0 => None,
            dcg::ENTRY => Some(Ok(e)),
            _ => Some(Err(e[..got].to_vec())),
        })
    }

    /// The next game not marked deleted: its record's offset (0 when the
    /// index points past 2^62) and its PGN.
    fn next(&mut self, limits: ParseLimits) -> io::Result<Option<(u64, Stored)>> {
        loop {
            let e = match self.entry()? {
                None => return Ok(None),
                Some(Err(cut)) => {
                    let reason = format!(
                        "the index ends inside an entry ({} of {} bytes)",
                        cut.len(),
                        dcg::ENTRY
                    );
                    return Ok(Some((0, Err((cut, reason)))));
                }
                Some(Ok(e)) if e[0] == DELETED => continue,
                Some(Ok(e)) => e,
            };
            let offset = u64::from_be_bytes(e[1..9].try_into().expect("eight bytes"));
            // Past 2^62 an offset is no position pgnload can record (and
            // reading there fails past 2^63): a reject recorded at byte 0.
            // Below, a record past the end is a truncated file's.
            if offset > MAX_OFFSET {
                let reason = format!(
                    "the index points at byte {offset}, past 2^62 (the .dcg is {} bytes)",
                    self.games.len
                );
                return Ok(Some((0, Err((e.to_vec(), reason)))));
            }
            return Ok(Some((offset, self.game(&e, offset, limits)?)));
        }
    }

    /// The game of index entry `e`, whose record is at `offset`: its PGN,
    /// or the bytes to store and why it cannot be decoded.
    fn game(&self, e: &[u8; dcg::ENTRY], offset: u64, limits: ParseLimits) -> io::Result<Stored> {
        let record = match self.record(offset, limits)? {
            Ok(record) => record,
            Err(reason) => return Ok(Err((e.to_vec(), reason))),
        };
        let names = match self.names(e)? {
            Ok(names) => names,
            Err(reason) => return Ok(Err((record, reason))),
        };
        let (fen, moves) = match dcg::parse_game(&record, limits.max_plies, limits.max_game_bytes) {
            Ok(parsed) => parsed,
            Err(reason) => {
                return Ok(Err((record, format!("record at byte {offset}: {reason}"))));
            }
        };
        let result = match e[31] {
            1 => "1-0",
            2 => "0-1",
            3 => "1/2-1/2",
            0 => "*",
            other => return Ok(Err((record, format!("result code {other} in the index")))),
        };
        Ok(Ok(render(&Decoded {
            tags: entry_tags(e, names, result, fen),
            lead: Vec::new(),
            moves,
            movetext: None,
            result,
        })))
    }

    /// The game record at `offset` (the length header checked against the
    /// file's end and the per-game limit), or why it cannot be read.
    fn record(&self, offset: u64, limits: ParseLimits) -> io::Result<Result<Vec<u8>, String>> {
        let truncated = || {
            format!(
                "the record at byte {offset} runs past the end of the .dcg ({} bytes): the \
                 file is truncated",
                self.games.len
            )
        };
        let head = self.games.read(offset, 5)?;
        let Some((len, header)) = dcg::read_length(&head) else {
            // Fewer than five bytes: the file ends there.
            let reason = if head.len() < 5 {
                truncated()
            } else {
                format!("no record length at byte {offset} of the .dcg")
            };
            return Ok(Err(reason));
        };
        let end = offset
            .checked_add(header as u64)
            .and_then(|start| start.checked_add(len));
        if end.is_none_or(|end| end > self.games.len) {
            return Ok(Err(truncated()));
        }
        if len > limits.max_game_bytes {
            return Ok(Err(format!(
                "the record at byte {offset} is {len} bytes, more than the limit of {}",
                limits.max_game_bytes
            )));
        }
        let len = usize::try_from(len).expect("at most max_game_bytes, which fits in memory");
        Ok(Ok(self.games.read(offset + header as u64, len)?))
    }

    /// The names index entry `e` refers to (white, black, site, event), or
    /// why one cannot be read.
    fn names(&self, e: &[u8; dcg::ENTRY]) -> io::Result<Result<[Option<String>; 4], String>> {
        let names = [
            (9, &self.names, "white name"),
            (13, &self.names, "black name"),
            (19, &self.sites, "site"),
            (23, &self.events, "event"),
        ];
        let mut found: [Option<String>; 4] = Default::default();
        for (slot, (at, part, what)) in names.into_iter().enumerate() {
            let r = u32::from_be_bytes(e[at..at + 4].try_into().expect("four bytes"));
            match name(part, r)? {
                Ok(n) => found[slot] = n,
                Err(reason) => return Ok(Err(format!("{what}: {reason}"))),
            }
        }
        Ok(Ok(found))
    }

    fn progress(&self) -> (u64, u64) {
        (self.at, self.index_len)
    }
}

/// Status byte of an index entry marked deleted (the spec's 0xFF).
const DELETED: u8 = 0xFF;

/// The tags of a dcg game: its index entry `e` (round, ratings, date,
/// ECO), the `names` it refers to (white, black, site, event), its
/// `result` and its record's starting position.
fn entry_tags(
    e: &[u8; dcg::ENTRY],
    names: [Option<String>; 4],
    result: &str,
    fen: Option<Vec<u8>>,
) -> Vec<(&'static str, String)> {
    let [white, black, site, event] = names;
    let round = u16::from_be_bytes([e[17], e[18]]);
    let elo = |at: usize| u16::from_be_bytes([e[at], e[at + 1]]);
    let year = u16::from_be_bytes([e[35], e[36]]);
    let (month, day) = (e[37], e[38]);
    let two = |n: u8| {
        if n == 0 {
            "??".to_owned()
        } else {
            format!("{n:02}")
        }
    };
    let mut tags = Vec::with_capacity(12);
    let mut tag = |name: &'static str, value: Option<String>| {
        if let Some(value) = value {
            tags.push((name, value));
        }
    };
    tag("Event", event);
    tag("Site", site);
    tag(
        "Date",
        (year, month, day).ne(&(0, 0, 0)).then(|| {
            let year = if year == 0 {
                "????".to_owned()
            } else {
                format!("{year:04}")
            };
            format!("{year}.{}.{}", two(month), two(day))
        }),
    );
    tag("Round", (round != 0).then(|| round.to_string()));
    tag("White", white);
    tag("Black", black);
    tag("Result", Some(result.to_owned()));
    tag("WhiteElo", (elo(27) != 0).then(|| elo(27).to_string()));
    tag("BlackElo", (elo(29) != 0).then(|| elo(29).to_string()));
    tag(
        "ECO",
        (e[32..35] != [0, 0, 0]).then(|| String::from_utf8_lossy(&e[32..35]).into_owned()),
    );
    let fen = fen.map(|f| String::from_utf8_lossy(&f).into_owned());
    if fen.is_some() {
        tag("SetUp", Some("1".into()));
    }
    tag("FEN", fen);
    tags
}

/// The name a reference points at: `None` for pgn2dcg's reference into
/// the magic (it writes 0 for a name over 36 bytes) and for `?`; an error
/// for an offset that is no record of the file.
fn name(part: &Part, r: u32) -> io::Result<Result<Option<String>, String>> {
    let r = u64::from(r);
    if r < MAGIC as u64 {
        return Ok(Ok(None));
    }
    let record = dcg::RECORD as u64;
    if !(r - MAGIC as u64).is_multiple_of(record) || r + record > part.len {
        return Ok(Err(format!(
            "reference {r} is no record of {} ({} bytes)",
            part.path.display(),
            part.len
        )));
    }
    let bytes = part.read(r, dcg::RECORD)?;
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim_end_matches([' ', '\0']);
    Ok(Ok(
        (!text.is_empty() && text != "?").then(|| text.to_owned())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decoded_game_renders_as_pgn_with_uci_moves() {
        let game = Decoded {
            tags: vec![("White", "A \"B\" \\ C".into()), ("Result", "1-0".into())],
            lead: vec![b"before".to_vec()],
            movetext: None,
            moves: vec![
                AnnotatedMove {
                    plain: PlainMove::Move {
                        from: 12,
                        to: 28,
                        promotion: 0,
                    },
                    nags: vec![1],
                    comments: vec![b"[%clk 0:03:00] }x".to_vec()],
                },
                AnnotatedMove {
                    plain: PlainMove::Null,
                    nags: vec![],
                    comments: vec![],
                },
                AnnotatedMove {
                    plain: PlainMove::Move {
                        from: 52,
                        to: 60,
                        promotion: 2,
                    },
                    nags: vec![],
                    comments: vec![],
                },
            ],
            result: "1-0",
        };
        assert_eq!(
            String::from_utf8(render(&game)).expect("utf-8"),
            "[White \"A \\\"B\\\" \\\\ C\"]\n[Result \"1-0\"]\n\n{before} e2e4 $1 \
             {[%clk 0:03:00] )x} -- e7e8=N 1-0\n\n"
        );
    }

    /// A base of two entries, the first marked deleted, both pointing at
    /// one record (e2e4 with a NAG), White "Ann" and Black 0 (pgn2dcg's
    /// reference for a long name).
    fn tiny_base(dir: &Path) -> PathBuf {
        let base = dir.join("tiny");
        let write = |ext: &str, bytes: &[u8]| {
            std::fs::write(base.with_extension(ext), bytes).expect("write a base file");
        };
        let mut names = b"SimpleCDbn".to_vec();
        names.extend(dcg::record("Ann"));
        write("dcn", &names);
        let mut sites = b"SimpleCDbs".to_vec();
        sites.extend(dcg::record("Here"));
        write("dcs", &sites);
        write("dce", b"SimpleCDbe");
        let mut games = b"SimpleCDbg".to_vec();
        games.extend([6, 0x00, 0x03, 0x1c, 0x87, 0x01, 0x01]);
        write("dcg", &games);
        let mut index = b"SimpleCDbi".to_vec();
        index.extend([0; 9]);
        for status in [DELETED, 0] {
            let mut e = [0u8; dcg::ENTRY];
            e[0] = status;
            e[1..9].copy_from_slice(&10u64.to_be_bytes());
            e[9..13].copy_from_slice(&10u32.to_be_bytes());
            e[19..23].copy_from_slice(&10u32.to_be_bytes());
            e[31] = 1;
            e[35..37].copy_from_slice(&2001u16.to_be_bytes());
            index.extend(e);
        }
        write("dci", &index);
        base.with_extension("dci")
    }

    #[test]
    fn a_dcg_base_skips_deleted_entries_and_resumes_by_game() {
        let dir = tempfile::tempdir().expect("temp dir");
        let dci = tiny_base(dir.path());
        let name = dci.to_str().expect("utf-8 temp path");
        let limits = ParseLimits {
            max_plies: 100,
            max_game_bytes: 1 << 20,
        };
        let mut games = StoredGames::open(name, Compression::Dcg, 0, limits, Arc::default())
            .expect("opens the base");
        let chunk = games.next_chunk().expect("reads").expect("one game");
        assert_eq!((chunk.pos.game_number, chunk.pos.byte_offset), (1, 10));
        assert_eq!(
            String::from_utf8_lossy(&chunk.bytes),
            "[Site \"Here\"]\n[Date \"2001.??.??\"]\n[White \"Ann\"]\n[Result \"1-0\"]\n\n\
             e2e4 $1 1-0\n\n"
        );
        assert!(games.next_chunk().expect("reads").is_none());
        assert_eq!(games.games_read(), 1);
        // Interrupted: opening past a game, then reading, stop at once.
        let interrupted = Arc::new(AtomicUsize::new(1));
        let err = StoredGames::open(name, Compression::Dcg, 1, limits, Arc::clone(&interrupted))
            .err()
            .expect("interrupted");
        assert!(source::is_cancelled(&err), "{err}");
        let mut stopped =
            StoredGames::open(name, Compression::Dcg, 0, limits, Arc::default()).expect("opens");
        if let Format::Dcg(base) = &mut stopped.reader {
            base.interrupts = interrupted;
        }
        let cause = stopped.next_chunk().expect_err("interrupted");
        let err = Error::Open {
            path: dci.clone(),
            source: cause,
        };
        assert!(source::is_cancelled(&err), "{err}");
        let mut resumed =
            StoredGames::open(name, Compression::Dcg, 1, limits, Arc::default()).expect("opens");
        assert!(resumed.next_chunk().expect("reads").is_none());
        // A base without its event file is refused, naming the file.
        std::fs::remove_file(dir.path().join("tiny.dce")).expect("remove");
        let err = StoredGames::open(name, Compression::Dcg, 0, limits, Arc::default())
            .err()
            .expect("incomplete base");
        assert!(err.to_string().contains("tiny.dce"), "{err}");
    }

    #[test]
    fn an_exchange_input_is_identified_by_every_file_it_is_read_from() {
        let never = AtomicUsize::new(0);
        let dir = tempfile::tempdir().expect("temp dir");
        let dci = tiny_base(dir.path());
        let fp = |path: &Path, format| fingerprint(path, format, &never).expect("fingerprint").0;
        let first = fp(&dci, Compression::Dcg);
        assert!(first.starts_with("dcg-set:xxh3-128:"), "{first}");
        // Named by its games file: the same base.
        assert_eq!(fp(&dci.with_extension("dcg"), Compression::Dcg), first);
        let mut seen = vec![first];
        for ext in ["dcg", "dcn", "dcs", "dce"] {
            let file = dci.with_extension(ext);
            let mut bytes = std::fs::read(&file).expect("read");
            bytes.push(b' ');
            std::fs::write(&file, &bytes).expect("write");
            let now = fp(&dci, Compression::Dcg);
            assert!(!seen.contains(&now), "{ext}");
            seen.push(now);
        }
        std::fs::remove_file(dci.with_extension("dce")).expect("remove");
        let err = fingerprint(&dci, Compression::Dcg, &never).expect_err("a file missing");
        assert!(err.to_string().contains("tiny.dce"), "{err}");

        // SQLite: the file alone is its own fingerprint; a WAL or journal
        // holding bytes joins it, an empty one does not.
        let db = dir.path().join("games.db3");
        std::fs::write(&db, b"SQLite format 3\0 and pages").expect("write");
        let alone = fp(&db, Compression::Sqlite);
        assert_eq!(
            alone,
            source::fingerprint(&db, &never).expect("fingerprint").0
        );
        let wal = with_suffix(&db, "-wal");
        std::fs::write(&wal, b"").expect("write");
        assert_eq!(fp(&db, Compression::Sqlite), alone);
        std::fs::write(&wal, b"frames").expect("write");
        let with_wal = fp(&db, Compression::Sqlite);
        assert!(with_wal.starts_with("sqlite-set:xxh3-128:"), "{with_wal}");
        std::fs::write(&wal, b"frameS").expect("write");
        assert_ne!(fp(&db, Compression::Sqlite), with_wal);
        std::fs::remove_file(&wal).expect("remove");
        std::fs::write(with_suffix(&db, "-journal"), b"pages").expect("write");
        let with_journal = fp(&db, Compression::Sqlite);
        assert!(![alone, with_wal].contains(&with_journal), "{with_journal}");
    }

    #[test]
    fn a_base_its_manifest_disowns_is_an_incomplete_export_set() {
        let never = AtomicUsize::new(0);
        let dir = tempfile::tempdir().expect("temp dir");
        let dci = tiny_base(dir.path());
        let base = dci.with_extension("");
        let mut files = [(0, None); 5];
        for (slot, ext) in files.iter_mut().zip(dcg::FILES) {
            let (size, digest) =
                source::digest_file(&dci.with_extension(ext), None, &never).expect("digest");
            *slot = (size, Some(digest));
        }
        check_set(&dci, &files).expect("no manifest: read as it is");
        let line = |ext: &str, (size, digest): (u64, Option<u128>)| {
            format!("{ext} {size} {:032x}\n", digest.unwrap_or(0))
        };
        let mut text = "pgnload dc set 1\n".to_owned();
        for (ext, file) in dcg::FILES.iter().zip(files) {
            text.push_str(&line(ext, file));
        }
        std::fs::write(dcg::manifest_path(&base), &text).expect("write");
        check_set(&dci, &files).expect("the set its manifest lists");
        let limits = ParseLimits {
            max_plies: 100,
            max_game_bytes: 1 << 20,
        };
        let name = dci.to_str().expect("utf-8 temp path");
        StoredGames::open(name, Compression::Dcg, 0, limits, Arc::default()).expect("opens");
        // The names file of another export: same size, other bytes.
        let dcn = dci.with_extension("dcn");
        let mut names = std::fs::read(&dcn).expect("read");
        names[10] = b'B';
        std::fs::write(&dcn, &names).expect("write");
        let err = fingerprint(&dci, Compression::Dcg, &never).expect_err("mixed set");
        assert!(
            err.to_string()
                .contains("incomplete export set: its .dcn file differs from what"),
            "{err}"
        );
        // Another size: every reader of the base refuses it.
        names.extend(dcg::record("Bob"));
        std::fs::write(&dcn, &names).expect("write");
        let err = StoredGames::open(name, Compression::Dcg, 0, limits, Arc::default())
            .err()
            .expect("mixed set");
        assert!(err.to_string().contains("incomplete export set"), "{err}");
        std::fs::write(dcg::manifest_path(&base), "something else").expect("write");
        let err = fingerprint(&dci, Compression::Dcg, &never).expect_err("no manifest");
        assert!(err.to_string().contains("not a manifest"), "{err}");
    }

    #[test]
    fn a_damaged_sqlite_file_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("broken.db3");
        let mut bytes = b"SQLite format 3\0".to_vec();
        bytes.extend([0xAB; 200]);
        std::fs::write(&path, bytes).expect("write");
        let limits = ParseLimits {
            max_plies: 100,
            max_game_bytes: 1 << 20,
        };
        let err = StoredGames::open(
            path.to_str().expect("utf-8 temp path"),
            Compression::Sqlite,
            0,
            limits,
            Arc::default(),
        )
        .err()
        .expect("not a database");
        assert!(err.to_string().contains("reading it as SQLite"), "{err}");
    }

    #[test]
    fn an_ocgdb_row_decodes_its_refs_and_moves() {
        let mut row = OcgdbRow::default();
        row.refs[2] = (
            Value::Integer(2),
            Value::Integer(2),
            Value::Text("Carlsen".into()),
        );
        row.columns[4] = Value::Text("1-0".into());
        row.moves2 = Value::Blob(vec![0x0c, 0x07]);
        row.comments = vec![(Value::Integer(0), Value::Text("[%clk 0:01:00]".into()))];
        let game = decode_ocgdb(&row, 1 << 20).expect("decodes");
        assert_eq!(
            game.tags,
            vec![
                ("White", "Carlsen".to_owned()),
                ("Result", "1-0".to_owned())
            ]
        );
        assert_eq!(game.result, "1-0");
        assert_eq!(game.moves[0].comments, [b"[%clk 0:01:00]".to_vec()]);
        // A reference to no row, and a blob that is no move list.
        row.refs[3] = (Value::Integer(99), Value::Null, Value::Null);
        let err = decode_ocgdb(&row, 1 << 20).expect_err("missing player");
        assert!(
            err.contains("BlackID 99 refers to no row of Players"),
            "{err}"
        );
        row.refs[3] = (Value::Null, Value::Null, Value::Null);
        row.moves2 = Value::Blob(vec![0x0c]);
        assert!(decode_ocgdb(&row, 1 << 20).is_err());
    }
}

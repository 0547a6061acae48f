//! The Simple Chess Database format (`.dci` index, `.dcg` games, `.dcn`
//! names, `.dcs` sites, `.dce` events), byte for byte as its reference
//! converter (pgn2dcg) writes it, so that the programs that read its files
//! read pgnload's. Where the converter and its written spec disagree the
//! converter wins (it is what readers were tested against): squares a1 = 0,
//! promotion N = 2 … Q = 5, a one-byte length only below 127. Where the
//! converter is wrong pgnload does the right thing (docs/exchange-formats.md): a name longer than a record is cut at a character boundary
//! and referenced (pgn2dcg refers to offset 0, inside the magic bytes), an
//! ECO that is not three characters is written as unknown (pgn2dcg writes
//! a short index entry), a game without a date still gets four date bytes.
//!
//! Memory: games and index entries stream to disk; only the distinct
//! names, sites and events are held, since their records must be sorted
//! before any reference to them is known. The index is written first with
//! provisional references (first-seen numbers) to a side file, then
//! rewritten with the records' offsets once the names are sorted.

use std::{
    collections::HashMap,
    fs,
    io::{self, BufReader, BufWriter, Read, Write},
    path::{Path, PathBuf},
};

use xxhash_rust::xxh3::Xxh3;

use crate::{
    chess::annotation::NoteCounts,
    error::Error,
    export::{COMMENT_COST, MoveAnnotation, PlainMove, date_parts, move_annotations, plain_moves},
    query::games::{StoredGame, StoredMove},
};

/// Bytes of a name, site or event record.
pub const RECORD: usize = 36;
/// Bytes of an index entry.
pub const ENTRY: usize = 39;
/// Bytes of each file's magic.
const MAGIC_LEN: usize = 10;
/// The index's header: magic, version 0, the 8-byte "open by default"
/// offset (0: the first game).
const INDEX_HEADER: usize = MAGIC_LEN + 1 + 8;

/// Where a provisional reference sits in an index entry (white, black,
/// site, event) and which dictionary it numbers.
const REFS: [(usize, Kind); 4] = [
    (9, Kind::Name),
    (13, Kind::Name),
    (19, Kind::Site),
    (23, Kind::Event),
];

/// Marker bytes inside a game.
const NULL_MOVE: u8 = 0x88;
const COMMENT: u8 = 0x86;
const NAGS: u8 = 0x87;

/// The three dictionaries of a base.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Name,
    Site,
    Event,
}

impl Kind {
    fn extension(self) -> &'static str {
        match self {
            Kind::Name => "dcn",
            Kind::Site => "dcs",
            Kind::Event => "dce",
        }
    }

    fn magic(self) -> &'static [u8; MAGIC_LEN] {
        match self {
            Kind::Name => b"SimpleCDbn",
            Kind::Site => b"SimpleCDbs",
            Kind::Event => b"SimpleCDbe",
        }
    }
}

/// The error for `what`, which the format's fixed-width fields cannot say.
fn beyond_format(what: String) -> Error {
    Error::FormatLimit {
        format: "the .dcg format",
        detail: what,
    }
}

/// Appends `len` as the format's length: one byte below 127, else `0x81`
/// … `0x84` and one to four big-endian bytes (pgn2dcg's thresholds: 127
/// itself takes two bytes, 255 three, 65535 four). A length that does not
/// fit four bytes is an error (pgn2dcg writes nothing then).
pub fn push_length(len: usize, out: &mut Vec<u8>) -> Result<(), Error> {
    let len = u32::try_from(len).map_err(|_| beyond_format(format!("a length of {len} bytes")))?;
    let bytes = len.to_be_bytes();
    match len {
        0..127 => out.push(bytes[3]),
        127..255 => out.extend([0x81, bytes[3]]),
        255..65535 => out.extend([0x82, bytes[2], bytes[3]]),
        65535..16_777_215 => out.extend([0x83, bytes[1], bytes[2], bytes[3]]),
        _ => {
            out.push(0x84);
            out.extend(bytes);
        }
    }
    Ok(())
}

/// Appends one game record (length, start marker and FEN, moves with their
/// NAGs and comment) to `out`. A zero-move game from the start is `01 00`.
pub fn push_game(
    start_fen: Option<&str>,
    moves: &[PlainMove],
    annotations: &[MoveAnnotation],
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let mut body = Vec::with_capacity(1 + moves.len() * 2);
    match start_fen {
        None => body.push(0x00),
        Some(fen) => {
            body.push(0x01);
            push_length(fen.len(), &mut body)?;
            body.extend_from_slice(fen.as_bytes());
        }
    }
    for (ply, m) in moves.iter().enumerate() {
        match *m {
            PlainMove::Null => body.push(NULL_MOVE),
            PlainMove::Move {
                from,
                to,
                promotion,
            } => {
                let code = u16::from(promotion) << 12 | u16::from(from) << 6 | u16::from(to);
                body.extend(code.to_be_bytes());
            }
        }
        if let Some((nags, comment)) = annotations.get(ply) {
            if !nags.is_empty() {
                // The marker's count is one byte: a move has far fewer
                // NAGs than that (pgn-reader's are one byte each too).
                let count = u8::try_from(nags.len())
                    .map_err(|_| Error::bug(format!("{} NAGs on one move", nags.len())))?;
                body.extend([NAGS, count]);
                body.extend_from_slice(nags);
            }
            if !comment.is_empty() {
                body.push(COMMENT);
                push_length(comment.len(), &mut body)?;
                body.extend_from_slice(comment.as_bytes());
            }
        }
    }
    push_length(body.len(), out)?;
    out.extend_from_slice(&body);
    Ok(())
}

/// Reads a length written by [`push_length`] at the start of `bytes`:
/// the length and how many bytes it took. `None` when `bytes` ends first
/// or the first byte is no length (`0x7f`, `0x80`, `0x85` and above).
pub fn read_length(bytes: &[u8]) -> Option<(u64, usize)> {
    let first = *bytes.first()?;
    let wide = match first {
        0..127 => return Some((u64::from(first), 1)),
        0x81..=0x84 => usize::from(first - 0x80),
        _ => return None,
    };
    let digits = bytes.get(1..=wide)?;
    let len = digits.iter().fold(0u64, |len, &b| len << 8 | u64::from(b));
    Some((len, 1 + wide))
}

/// One move of a `.dcg` game as [`push_game`] writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotatedMove {
    /// The move.
    pub plain: PlainMove,
    /// Its NAGs, in order.
    pub nags: Vec<u8>,
    /// Its comments, in order (bytes as stored; the format says UTF-8).
    pub comments: Vec<Vec<u8>>,
}

/// A `.dcg` game record's body (after its length), read back: the start
/// position (`None`: the standard one) and the moves. Pure, for the
/// import. A marker the format does not define, a move code that is no
/// move or a length running past the body is an error naming the byte;
/// so are more than `max_plies` moves, and comments costing more than
/// `max_bytes` to hold (the body plus [`COMMENT_COST`] per comment), so
/// that what a record becomes stays bounded whatever it holds.
pub fn parse_game(
    body: &[u8],
    max_plies: u32,
    max_bytes: u64,
) -> Result<(Option<Vec<u8>>, Vec<AnnotatedMove>), String> {
    let record = Record { body };
    let (start_fen, mut at) = record.start()?;
    let mut moves: Vec<AnnotatedMove> = Vec::new();
    let mut cost = body.len() as u64;
    while let Some(&first) = body.get(at) {
        at = match first {
            NAGS => {
                let (nags, next) = record.item(at + 1)?;
                last_move(&mut moves, at)?.nags.extend_from_slice(nags);
                next
            }
            COMMENT => {
                let (text, next) = record.item(at + 1)?;
                cost += COMMENT_COST;
                if cost > max_bytes {
                    return Err(format!(
                        "its comments take more than the limit of {max_bytes} bytes to hold \
                         (max_game_bytes; each comment counts {COMMENT_COST} bytes more)"
                    ));
                }
                last_move(&mut moves, at)?.comments.push(text.to_vec());
                next
            }
            _ => {
                if moves.len() >= max_plies as usize {
                    return Err(format!("more than {max_plies} moves (max_plies)"));
                }
                let (plain, next) = record.move_at(at)?;
                moves.push(AnnotatedMove {
                    plain,
                    nags: Vec::new(),
                    comments: Vec::new(),
                });
                next
            }
        };
    }
    Ok((start_fen, moves))
}

/// A `.dcg` record's body as [`parse_game`] reads it, item by item, each
/// error naming the byte it is at.
struct Record<'b> {
    body: &'b [u8],
}

impl<'b> Record<'b> {
    fn cut(at: usize) -> String {
        format!("the record ends inside the item at byte {at}")
    }

    /// A length-prefixed item at `at`: its bytes, and where the next starts.
    fn item(&self, at: usize) -> Result<(&'b [u8], usize), String> {
        let body = self.body;
        let (len, header) = body
            .get(at..)
            .and_then(read_length)
            .ok_or_else(|| Self::cut(at))?;
        let start = at + header;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| start.checked_add(len))
            .filter(|&end| end <= body.len())
            .ok_or_else(|| Self::cut(at))?;
        Ok((&body[start..end], end))
    }

    /// The start position (`None`: the standard one) and where the moves
    /// begin.
    fn start(&self) -> Result<(Option<Vec<u8>>, usize), String> {
        match self.body.first() {
            Some(0x00) => Ok((None, 1)),
            Some(0x01) => {
                let (fen, next) = self.item(1)?;
                Ok((Some(fen.to_vec()), next))
            }
            Some(other) => Err(format!(
                "start marker {other:#04x} is neither 0x00 nor 0x01"
            )),
            None => Err("the record is empty".into()),
        }
    }

    /// The move at `at` (a null move's one byte, or a two-byte code), and
    /// where the next item starts.
    fn move_at(&self, at: usize) -> Result<(PlainMove, usize), String> {
        let first = *self.body.get(at).ok_or_else(|| Self::cut(at))?;
        if first == NULL_MOVE {
            return Ok((PlainMove::Null, at + 1));
        }
        let second = *self.body.get(at + 1).ok_or_else(|| Self::cut(at))?;
        let code = u16::from_be_bytes([first, second]);
        let bits = |shift: u16| u8::try_from((code >> shift) & 63).expect("six bits fit a u8");
        let (promotion, from, to) = (bits(12), bits(6), bits(0));
        if from == to || !matches!(promotion, 0 | 2..=5) {
            return Err(format!("code {code:#06x} at byte {at} is not a move"));
        }
        let plain = PlainMove::Move {
            from,
            to,
            promotion,
        };
        Ok((plain, at + 2))
    }
}

/// The move an annotation at byte `at` belongs to.
fn last_move(moves: &mut [AnnotatedMove], at: usize) -> Result<&mut AnnotatedMove, String> {
    moves
        .last_mut()
        .ok_or_else(|| format!("an annotation at byte {at} precedes every move"))
}

/// `name` as a 36-byte record: UTF-8, cut at the last character boundary
/// that fits, padded with spaces.
pub fn record(name: &str) -> [u8; RECORD] {
    let mut end = name.len().min(RECORD);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = [b' '; RECORD];
    out[..end].copy_from_slice(&name.as_bytes()[..end]);
    out
}

/// The distinct values of one dictionary, numbered as first seen.
#[derive(Debug, Default)]
struct Dictionary {
    numbers: HashMap<String, u32>,
}

impl Dictionary {
    /// The provisional number of `name` (PGN's `?` for none, which is what
    /// pgn2dcg reads from a game with the Seven Tag Roster's placeholder).
    fn number(&mut self, name: Option<&str>) -> Result<u32, Error> {
        let name = name.unwrap_or("?");
        if let Some(&n) = self.numbers.get(name) {
            return Ok(n);
        }
        let n = u32::try_from(self.numbers.len())
            .map_err(|_| beyond_format("more than 2^32 distinct names".into()))?;
        self.numbers.insert(name.to_owned(), n);
        Ok(n)
    }

    /// Writes the records sorted as pgn2dcg sorts them (Qt's string order:
    /// UTF-16 code units), one record per distinct cut name, and returns
    /// each provisional number's byte offset in the file.
    fn write(self, out: &mut impl Write, magic: &[u8]) -> Result<Vec<u32>, Error> {
        out.write_all(magic).map_err(Error::Output)?;
        let mut names: Vec<(String, u32)> = self.numbers.into_iter().collect();
        names.sort_unstable_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
        let mut offsets = vec![0u32; names.len()];
        let mut written: HashMap<[u8; RECORD], u32> = HashMap::with_capacity(names.len());
        for (name, number) in names {
            let bytes = record(&name);
            let next = MAGIC_LEN + RECORD * written.len();
            let offset = if let Some(&offset) = written.get(&bytes) {
                offset
            } else {
                let offset = u32::try_from(next)
                    .map_err(|_| beyond_format("a reference into a name file past 4 GiB".into()))?;
                out.write_all(&bytes).map_err(Error::Output)?;
                written.insert(bytes, offset);
                offset
            };
            let slot = usize::try_from(number)
                .map_err(|_| Error::bug(format!("name number {number} does not fit usize")))?;
            offsets[slot] = offset;
        }
        Ok(offsets)
    }
}

/// The index entry of `game` with provisional references.
fn entry(game: &StoredGame, offset: u64, refs: [u32; 4]) -> [u8; ENTRY] {
    let mut e = [0u8; ENTRY];
    e[1..9].copy_from_slice(&offset.to_be_bytes());
    for ((at, _), r) in REFS.iter().zip(refs) {
        e[*at..at + 4].copy_from_slice(&r.to_be_bytes());
    }
    // pgn2dcg reads Round as a number (0: unknown or not a number).
    let round = game
        .round
        .as_deref()
        .and_then(|r| r.trim().parse::<u16>().ok())
        .unwrap_or(0);
    e[17..19].copy_from_slice(&round.to_be_bytes());
    let elo = |elo: Option<i32>| elo.and_then(|e| u16::try_from(e).ok()).unwrap_or(0);
    e[27..29].copy_from_slice(&elo(game.white_elo).to_be_bytes());
    e[29..31].copy_from_slice(&elo(game.black_elo).to_be_bytes());
    e[31] = match game.result {
        Some(1) => 1,
        Some(-1) => 2,
        Some(0) => 3,
        _ => 0,
    };
    if let Some(eco) = game.eco.as_deref().filter(|eco| eco.len() == 3) {
        e[32..35].copy_from_slice(eco.as_bytes());
    }
    let (year, month, day) = date_parts(game);
    e[35..37].copy_from_slice(&year.unwrap_or(0).to_be_bytes());
    e[37] = month.unwrap_or(0);
    e[38] = day.unwrap_or(0);
    e
}

/// `base` with `.ext` appended (a base name may itself hold dots).
fn with_extension(base: &Path, ext: &str) -> PathBuf {
    let mut name = base.as_os_str().to_owned();
    name.push(".");
    name.push(ext);
    PathBuf::from(name)
}

/// `path` with `.partial` appended: where a file is written before its
/// rename, so that a file with the asked name is always whole.
fn partial(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// A file of a base being written, its size and digest taken as it is
/// written (for the set's manifest).
struct Hashed {
    out: BufWriter<fs::File>,
    /// Boxed: the hasher's state is half a KiB, and a writer holds two.
    hasher: Box<Xxh3>,
    len: u64,
}

impl Write for Hashed {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

impl std::fmt::Debug for Hashed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hashed")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl Hashed {
    /// Flushes and syncs the file; its size and xxh3-128 digest.
    fn close(self) -> Result<(u64, u128), Error> {
        let file = self
            .out
            .into_inner()
            .map_err(|e| Error::Output(e.into_error()))?;
        file.sync_all().map_err(Error::Output)?;
        Ok((self.len, self.hasher.digest128()))
    }
}

/// Every file a [`DcgWriter`] for `base` writes under a temporary name, and
/// the final names it renames them to (the manifest first, as the writer
/// renames them): what an export that does not finish removes, and what
/// must not be a directory before it starts.
pub fn files(base: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let finals: Vec<PathBuf> = [MANIFEST, "dcn", "dcs", "dce", "dcg", "dci"]
        .into_iter()
        .map(|ext| with_extension(base, ext))
        .collect();
    let mut temporary: Vec<PathBuf> = finals.iter().map(|path| partial(path)).collect();
    temporary.push(partial(&with_extension(base, "dci.refs")));
    (temporary, finals)
}

fn create(path: &Path) -> Result<Hashed, Error> {
    let file = fs::File::create(path).map_err(|source| Error::Open {
        path: path.to_owned(),
        source,
    })?;
    Ok(Hashed {
        out: BufWriter::with_capacity(1 << 16, file),
        hasher: Box::new(Xxh3::new()),
        len: 0,
    })
}

/// The five files of a base, in the order a [`SetManifest`] lists them.
pub const FILES: [&str; 5] = ["dci", "dcg", "dcn", "dcs", "dce"];

/// Extension of the manifest an export writes beside a base's five files.
pub const MANIFEST: &str = "dcset";

/// First line of a manifest (its version).
const MANIFEST_HEAD: &str = "pgnload dc set 1";

/// What an export wrote: the size and xxh3-128 digest of each of the five
/// files, in [`FILES`] order, in a small text file beside them
/// (`BASE.dcset`), since the format has no header field to hold a set id
/// and its five files cannot be renamed at once. The export renames the
/// manifest into place before the five files, so that a failure or kill
/// between the renames leaves a manifest the files do not match, whether
/// the files it replaces had one or not (a base of pgn2dcg's has none);
/// the import refuses such a set instead of reading it as a base. Readers
/// of the format ignore the extra file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetManifest {
    /// `(size, digest)` of each file, in [`FILES`] order.
    pub files: [(u64, u128); 5],
}

impl SetManifest {
    fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut text = format!("{MANIFEST_HEAD}\n");
        for (ext, (size, digest)) in FILES.iter().zip(self.files) {
            let _ = writeln!(text, "{ext} {size} {digest:032x}");
        }
        text
    }

    /// Reads a manifest's text; `None` when it is not one.
    fn parse(text: &str) -> Option<SetManifest> {
        let mut lines = text.lines();
        if lines.next()? != MANIFEST_HEAD {
            return None;
        }
        let mut files = [(0, 0); 5];
        for (slot, ext) in files.iter_mut().zip(FILES) {
            let mut fields = lines.next()?.split(' ');
            if fields.next()? != ext {
                return None;
            }
            let size = fields.next()?.parse().ok()?;
            let digest = u128::from_str_radix(fields.next()?, 16).ok()?;
            *slot = (size, digest);
        }
        lines.next().is_none().then_some(SetManifest { files })
    }

    /// The manifest beside `base` (its path without extension): `None`
    /// when there is none; an error when it cannot be read or is no
    /// manifest.
    pub fn read(base: &Path) -> Result<Option<SetManifest>, Error> {
        let path = with_extension(base, MANIFEST);
        let text = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(Error::Open { path, source }),
        };
        match std::str::from_utf8(&text).ok().and_then(SetManifest::parse) {
            Some(manifest) => Ok(Some(manifest)),
            None => Err(Error::Open {
                path,
                source: io::Error::new(
                    io::ErrorKind::InvalidData,
                    "not a manifest of a pgnload export",
                ),
            }),
        }
    }

    /// The extensions of the files whose size, or digest when `actual`
    /// gives one, differ from the manifest's.
    pub fn differing(&self, actual: &[(u64, Option<u128>); 5]) -> Vec<&'static str> {
        FILES
            .iter()
            .zip(self.files.iter().zip(actual))
            .filter(|(_, ((size, digest), (got_size, got_digest)))| {
                size != got_size || got_digest.is_some_and(|got| got != *digest)
            })
            .map(|(ext, _)| *ext)
            .collect()
    }
}

/// The path of the manifest of the base `base` (for messages).
pub fn manifest_path(base: &Path) -> PathBuf {
    with_extension(base, MANIFEST)
}

/// A Simple Chess Database being written, game by game.
#[derive(Debug)]
pub struct DcgWriter {
    base: PathBuf,
    games: Hashed,
    provisional: Hashed,
    games_len: u64,
    names: Dictionary,
    sites: Dictionary,
    events: Dictionary,
    buf: Vec<u8>,
    /// What the games written held that the format cannot: their
    /// starting comments and variations (see [`move_annotations`]).
    dropped: NoteCounts,
}

impl DcgWriter {
    /// Starts a base named `base` (the five files get its name plus their
    /// extension), writing under `.partial` names until [`finish`].
    ///
    /// [`finish`]: DcgWriter::finish
    pub fn create(base: &Path) -> Result<DcgWriter, Error> {
        let mut games = create(&partial(&with_extension(base, "dcg")))?;
        games.write_all(b"SimpleCDbg").map_err(Error::Output)?;
        let provisional = create(&partial(&with_extension(base, "dci.refs")))?;
        Ok(DcgWriter {
            base: base.to_owned(),
            games,
            provisional,
            games_len: MAGIC_LEN as u64,
            names: Dictionary::default(),
            sites: Dictionary::default(),
            events: Dictionary::default(),
            buf: Vec::new(),
            dropped: NoteCounts::default(),
        })
    }

    /// Appends a standard-chess game.
    pub fn write(&mut self, game: &StoredGame, moves: &[StoredMove]) -> Result<(), Error> {
        let plain = plain_moves(game, moves)?;
        let (annotations, dropped) = move_annotations(game, moves)?;
        self.buf.clear();
        push_game(
            game.start_fen.as_deref(),
            &plain,
            &annotations,
            &mut self.buf,
        )?;
        let refs = [
            self.names.number(game.white.as_deref())?,
            self.names.number(game.black.as_deref())?,
            self.sites.number(game.site.as_deref())?,
            self.events.number(game.event.as_deref())?,
        ];
        self.provisional
            .write_all(&entry(game, self.games_len, refs))
            .map_err(Error::Output)?;
        self.games.write_all(&self.buf).map_err(Error::Output)?;
        self.games_len += self.buf.len() as u64;
        self.dropped.add(dropped);
        Ok(())
    }

    /// What the games written so far held that the format cannot carry.
    pub fn dropped(&self) -> NoteCounts {
        self.dropped
    }

    /// Writes the name, site and event files, the index with the records'
    /// offsets and the set's [`SetManifest`], then renames the manifest
    /// and the five files to their names, the manifest first.
    pub fn finish(self) -> Result<(), Error> {
        let DcgWriter {
            base,
            games,
            provisional,
            names,
            sites,
            events,
            ..
        } = self;
        // In FILES order: dci, dcg, dcn, dcs, dce.
        let mut files = [(0, 0); 5];
        files[1] = games.close()?;
        provisional.close()?;
        let mut offsets = Vec::with_capacity(3);
        for (slot, (dictionary, kind)) in [
            (names, Kind::Name),
            (sites, Kind::Site),
            (events, Kind::Event),
        ]
        .into_iter()
        .enumerate()
        {
            let mut out = create(&partial(&with_extension(&base, kind.extension())))?;
            offsets.push(dictionary.write(&mut out, kind.magic())?);
            files[2 + slot] = out.close()?;
        }
        let refs_path = partial(&with_extension(&base, "dci.refs"));
        let mut input = BufReader::with_capacity(
            1 << 16,
            fs::File::open(&refs_path).map_err(|source| Error::Open {
                path: refs_path.clone(),
                source,
            })?,
        );
        let mut index = create(&partial(&with_extension(&base, "dci")))?;
        let mut header = [0u8; INDEX_HEADER];
        header[..MAGIC_LEN].copy_from_slice(b"SimpleCDbi");
        index.write_all(&header).map_err(Error::Output)?;
        let mut e = [0u8; ENTRY];
        loop {
            match input.read_exact(&mut e) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => break,
                Err(err) => return Err(Error::Output(err)),
            }
            for (at, kind) in REFS {
                let n = u32::from_be_bytes([e[at], e[at + 1], e[at + 2], e[at + 3]]);
                let table = &offsets[kind as usize];
                let offset = usize::try_from(n)
                    .ok()
                    .and_then(|n| table.get(n))
                    .ok_or_else(|| {
                        Error::bug(format!("provisional reference {n} has no record"))
                    })?;
                e[at..at + 4].copy_from_slice(&offset.to_be_bytes());
            }
            index.write_all(&e).map_err(Error::Output)?;
        }
        files[0] = index.close()?;
        fs::remove_file(&refs_path).map_err(Error::Output)?;
        let manifest = with_extension(&base, MANIFEST);
        let mut out = create(&partial(&manifest))?;
        out.write_all(SetManifest { files }.text().as_bytes())
            .map_err(Error::Output)?;
        out.close()?;
        for target in self::files(&base).1 {
            fs::rename(partial(&target), &target).map_err(|source| Error::Open {
                path: target.clone(),
                source,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// e2e4, and a pawn promoting to a queen on e8: the moves the encoding
    /// tests write.
    const E2E4: PlainMove = PlainMove::Move {
        from: 12,
        to: 28,
        promotion: 0,
    };
    const PROMOTE: PlainMove = PlainMove::Move {
        from: 52,
        to: 60,
        promotion: 5,
    };

    fn length(len: usize) -> Vec<u8> {
        let mut out = Vec::new();
        push_length(len, &mut out).expect("small lengths fit");
        out
    }

    #[test]
    fn lengths_switch_form_at_pgn2dcgs_thresholds() {
        assert_eq!(length(0), [0x00]);
        assert_eq!(length(126), [0x7e]);
        assert_eq!(length(127), [0x81, 0x7f]);
        assert_eq!(length(254), [0x81, 0xfe]);
        assert_eq!(length(255), [0x82, 0x00, 0xff]);
        assert_eq!(length(65534), [0x82, 0xff, 0xfe]);
        assert_eq!(length(65535), [0x83, 0x00, 0xff, 0xff]);
        assert_eq!(length(16_777_215), [0x84, 0x00, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn a_game_is_its_length_marker_and_big_endian_moves() {
        let mut out = Vec::new();
        push_game(None, &[], &[], &mut out).expect("an empty game encodes");
        assert_eq!(out, [0x01, 0x00]);
        out.clear();
        push_game(
            None,
            &[E2E4, PlainMove::Null, PROMOTE],
            &[(vec![1], "[%clk 0:03:00]".into())],
            &mut out,
        )
        .expect("a short game encodes");
        let mut expected = vec![0x00, 0x03, 0x1c, 0x87, 0x01, 0x01, 0x86, 14];
        expected.extend_from_slice(b"[%clk 0:03:00]");
        expected.extend([0x88, 0x5d, 0x3c]);
        expected.insert(0, u8::try_from(expected.len()).expect("short"));
        assert_eq!(out, expected);
    }

    #[test]
    fn games_read_back_as_written() {
        for len in [0, 126, 127, 254, 255, 65534, 65535, 16_777_215] {
            let bytes = length(len);
            assert_eq!(read_length(&bytes), Some((len as u64, bytes.len())));
        }
        assert_eq!(read_length(&[0x82, 0x01]), None);
        assert_eq!(read_length(&[0x7f]), None);
        let mut out = Vec::new();
        push_game(
            Some("8/8/8/8/8/8/8/K6k w - - 0 1"),
            &[E2E4, PlainMove::Null, PROMOTE],
            &[(vec![1], "[%clk 0:03:00]".into())],
            &mut out,
        )
        .expect("a short game encodes");
        let (len, header) = read_length(&out).expect("a length");
        let len = usize::try_from(len).expect("a short game's length fits");
        assert_eq!(len + header, out.len());
        let (fen, moves) = parse_game(&out[header..], 3, 1 << 20).expect("reads back");
        assert_eq!(fen.as_deref(), Some(&b"8/8/8/8/8/8/8/K6k w - - 0 1"[..]));
        let plain: Vec<PlainMove> = moves.iter().map(|m| m.plain).collect();
        assert_eq!(plain, [E2E4, PlainMove::Null, PROMOTE]);
        assert_eq!(moves[0].nags, [1]);
        assert_eq!(moves[0].comments, [b"[%clk 0:03:00]".to_vec()]);
        // Cut inside the comment, and a code that is no move.
        assert!(parse_game(&out[header..out.len() - 6], 3, 1 << 20).is_err());
        assert!(parse_game(&[0x00, 0x03, 0x0c], 3, 1 << 20).is_err());
        assert!(parse_game(&[0x02], 3, 1 << 20).is_err());
        // More moves than max_plies; comments costing more than the cap.
        let err = parse_game(&out[header..], 2, 1 << 20).expect_err("three moves");
        assert_eq!(err, "more than 2 moves (max_plies)");
        let mut comments = vec![0x00, 0x03, 0x1c];
        for _ in 0..100 {
            comments.extend([COMMENT, 0]);
        }
        assert!(parse_game(&comments, 3, 100 * COMMENT_COST).is_err());
        assert!(parse_game(&comments, 3, 300 * COMMENT_COST).is_ok());
    }

    #[test]
    fn records_are_padded_and_cut_at_a_character_boundary() {
        assert_eq!(&record("Carlsen")[..9], b"Carlsen  ");
        let long = format!("{}é", "a".repeat(35));
        let r = record(&long);
        assert_eq!(&r[..35], "a".repeat(35).as_bytes());
        assert_eq!(r[35], b' ');
    }

    #[test]
    fn a_manifest_reads_back_and_names_the_files_that_differ() {
        let manifest = SetManifest {
            files: [(19, 1), (10, u128::MAX), (46, 3), (10, 4), (10, 5)],
        };
        let text = manifest.text();
        assert!(text.starts_with("pgnload dc set 1\ndci 19 "), "{text}");
        assert_eq!(SetManifest::parse(&text), Some(manifest));
        assert_eq!(SetManifest::parse(&text.replace("dcn", "dcx")), None);
        assert_eq!(SetManifest::parse(&format!("{text}more\n")), None);
        let mut actual = manifest.files.map(|(size, digest)| (size, Some(digest)));
        assert!(manifest.differing(&actual).is_empty());
        actual[2].1 = Some(7);
        actual[4].0 = 11;
        assert_eq!(manifest.differing(&actual), ["dcn", "dce"]);
        // Sizes only: the digest is not compared.
        actual[2].1 = None;
        assert_eq!(manifest.differing(&actual), ["dce"]);
    }

    #[test]
    fn dictionaries_sort_and_offset_their_records() {
        let mut d = Dictionary::default();
        let zed = d.number(Some("Zed")).expect("few names");
        let ann = d.number(Some("Ann")).expect("few names");
        let none = d.number(None).expect("few names");
        let mut out = Vec::new();
        let offsets = d.write(&mut out, b"SimpleCDbn").expect("writes to memory");
        // "?" < "Ann" < "Zed"
        assert_eq!(offsets[none as usize], 10);
        assert_eq!(offsets[ann as usize], 46);
        assert_eq!(offsets[zed as usize], 82);
        assert_eq!(out.len(), 10 + 3 * 36);
    }
}

//! The ocgdb SQLite schema: tables `Info`, `Events`, `Sites`, `Players`,
//! `Games` and `Comments`, created and filled as ocgdb's builder does, so
//! that ocgdb opens pgnload's files. (En Croissant cannot: it needs
//! columns and a move encoding of its own, [`super::encroissant`].)
//!
//! As ocgdb writes them: `Moves2` is two bytes per ply, `from | to << 6 |
//! promotion << 12` (a1 = 0; N = 2 … Q = 5; castling is the king moving
//! two squares) in little-endian order (ocgdb stores its native 16-bit
//! integers); `Result` is the result tag with `*` as NULL; names, sites
//! and events are merged ignoring ASCII case, with row 1 an empty
//! placeholder that an unknown one refers to; a player's `Elo` is the
//! first positive one seen; a comment's `Ply` is the 0-based index of the
//! move it follows; `Info` holds the counts, placeholders included.
//!
//! Where ocgdb loses information pgnload does not (docs/exchange-formats.md): a partial date keeps its unknown parts as `??` (ocgdb turns
//! `2020.??.??` into `2020-11-11`), a game without moves has an empty
//! `Moves2` and `PlyCount` 0 (ocgdb writes NULL, and its exporter then
//! drops the game), a Lichess game's URL stays its `Site`.
//!
//! One transaction with prepared statements; the file is written under a
//! `.partial` name with SQLite's journal off (the name is only given once
//! the file is whole, so a crash leaves nothing to recover), then renamed.

use std::{
    collections::HashMap,
    fs, io,
    path::{Path, PathBuf},
};

use rusqlite::{Connection, params};

use crate::{
    chess::annotation::NoteCounts,
    error::Error,
    export::{PlainMove, date_parts, move_annotations, plain_moves},
    query::games::{StoredGame, StoredMove},
};

/// ocgdb's `Data Structure Version` (`VersionDatabaseString`).
const DATA_STRUCTURE_VERSION: &str = "0.6";
/// ocgdb's user data `Version` (`VersionUserDatabaseString`).
const USER_VERSION: &str = "0.1";

/// The schema, statement for statement as ocgdb's `createDb` with its
/// default columns and `Moves2`.
const SCHEMA: &str = "
CREATE TABLE Info (Name TEXT UNIQUE NOT NULL, Value TEXT);
CREATE TABLE Events (ID INTEGER PRIMARY KEY AUTOINCREMENT, Name TEXT UNIQUE);
INSERT INTO Events (Name) VALUES ('');
CREATE TABLE Sites (ID INTEGER PRIMARY KEY AUTOINCREMENT, Name TEXT UNIQUE);
INSERT INTO Sites (Name) VALUES ('');
CREATE TABLE Players (ID INTEGER PRIMARY KEY, Name TEXT UNIQUE, Elo INTEGER);
INSERT INTO Players (ID, Name) VALUES (1, '');
CREATE TABLE Games (ID INTEGER PRIMARY KEY AUTOINCREMENT, EventID INTEGER, SiteID INTEGER, \
Date TEXT, Round TEXT, WhiteID INTEGER, WhiteElo INTEGER, BlackID INTEGER, BlackElo INTEGER, \
Result TEXT, TimeControl TEXT, ECO TEXT, PlyCount INTEGER, FEN TEXT, Moves2 BLOB DEFAULT NULL, \
FOREIGN KEY(EventID) REFERENCES Events, FOREIGN KEY(SiteID) REFERENCES Sites, \
FOREIGN KEY(WhiteID) REFERENCES Players, FOREIGN KEY(BlackID) REFERENCES Players);
CREATE TABLE Comments (ID INTEGER PRIMARY KEY AUTOINCREMENT, GameID INTEGER, Ply INTEGER, Comment TEXT);
";

/// A SQLite error while writing `what`, as an output error.
fn sql(what: &'static str) -> impl Fn(rusqlite::Error) -> Error {
    move |e| {
        Error::Output(io::Error::other(format!(
            "writing the ocgdb file ({what}): {e}"
        )))
    }
}

/// `Moves2` of `moves`: two little-endian bytes per ply. A null move has
/// no code in this encoding: the caller skips such games.
pub fn moves2(moves: &[PlainMove]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(moves.len() * 2);
    for m in moves {
        let PlainMove::Move {
            from,
            to,
            promotion,
        } = *m
        else {
            return None;
        };
        let code = u16::from(from) | u16::from(to) << 6 | u16::from(promotion) << 12;
        out.extend(code.to_le_bytes());
    }
    Some(out)
}

/// The moves of a `Moves2` blob, read back as [`moves2`] writes them (and
/// ocgdb does): for the import, which replays them. A blob of odd length, a
/// promotion code outside N = 2 … Q = 5 or a move from a square to itself is
/// not a move list (the error says which ply); whether a move is legal is
/// the replay's question.
#[expect(
    clippy::missing_panics_doc,
    reason = "its one expect is on six masked bits fitting a u8: it cannot panic"
)]
pub fn moves_of_moves2(blob: &[u8]) -> Result<Vec<PlainMove>, String> {
    if !blob.len().is_multiple_of(2) {
        return Err(format!(
            "Moves2 is {} bytes long, not two bytes per move",
            blob.len()
        ));
    }
    blob.chunks_exact(2)
        .enumerate()
        .map(|(ply, pair)| {
            let code = u16::from_le_bytes([pair[0], pair[1]]);
            let bits = |shift: u16| u8::try_from((code >> shift) & 63).expect("six bits fit a u8");
            let (from, to, promotion) = (bits(0), bits(6), bits(12));
            if from == to || !matches!(promotion, 0 | 2..=5) {
                return Err(format!(
                    "Moves2 code {code:#06x} at ply {} is not a move",
                    ply + 1
                ));
            }
            Ok(PlainMove::Move {
                from,
                to,
                promotion,
            })
        })
        .collect()
}

/// `Date` text: `YYYY-MM-DD`, an unknown part as `??`, NULL when nothing
/// is known.
pub fn date_text(game: &StoredGame) -> Option<String> {
    let (year, month, day) = date_parts(game);
    if (year, month, day) == (None, None, None) {
        return None;
    }
    let two = |n: Option<u8>| n.map_or("??".to_owned(), |n| format!("{n:02}"));
    Some(format!(
        "{}-{}-{}",
        year.map_or("????".to_owned(), |y| format!("{y:04}")),
        two(month),
        two(day)
    ))
}

/// One of `Events`, `Sites`, `Players`: ids by name, ignoring ASCII case
/// as ocgdb does, the first spelling kept.
#[derive(Debug)]
struct Names {
    ids: HashMap<String, i64>,
    next: i64,
}

impl Default for Names {
    fn default() -> Names {
        // Row 1 is the empty placeholder.
        Names {
            ids: HashMap::new(),
            next: 2,
        }
    }
}

impl Names {
    /// The id of `name` (1 for none, empty, or starting with `?` or `*`,
    /// as ocgdb), and whether it is new (then the caller inserts it).
    fn id(&mut self, name: Option<&str>) -> (i64, bool) {
        let Some(name) = name
            .map(str::trim)
            .filter(|n| !n.is_empty() && !n.starts_with('?') && !n.starts_with('*'))
        else {
            return (1, false);
        };
        let key = name.to_ascii_lowercase();
        if let Some(&id) = self.ids.get(&key) {
            return (id, false);
        }
        let id = self.next;
        self.next += 1;
        self.ids.insert(key, id);
        (id, true)
    }

    /// Rows, the placeholder included (ocgdb's counts).
    fn count(&self) -> i64 {
        self.next - 1
    }
}

/// An ocgdb database being written, game by game.
#[derive(Debug)]
pub struct OcgdbWriter {
    target: PathBuf,
    partial: PathBuf,
    connection: Connection,
    players: Names,
    events: Names,
    sites: Names,
    games: i64,
    comments: i64,
    /// What the games written held that the format cannot carry: their
    /// starting comments, variations and every NAG (no table holds them).
    dropped: NoteCounts,
}

impl OcgdbWriter {
    /// The temporary name the database for `target` is written under
    /// until [`finish`](OcgdbWriter::finish): what an export that does not
    /// finish removes.
    pub fn partial(target: &Path) -> PathBuf {
        let mut name = target.as_os_str().to_owned();
        name.push(".partial");
        PathBuf::from(name)
    }

    /// A new SQLite file for `target` under its [`partial`](Self::partial)
    /// name (an earlier one removed), journal off, with `schema`: how
    /// every SQLite export starts.
    pub(super) fn create_partial(
        target: &Path,
        schema: &str,
    ) -> Result<(PathBuf, Connection), Error> {
        let partial = Self::partial(target);
        match fs::remove_file(&partial) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(Error::Open {
                    path: partial,
                    source,
                });
            }
        }
        let connection = Connection::open(&partial).map_err(sql("creating the file"))?;
        connection
            .execute_batch("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;")
            .map_err(sql("setting up"))?;
        connection
            .execute_batch(schema)
            .map_err(sql("creating the tables"))?;
        Ok((partial, connection))
    }

    /// Creates the database at `target` (under a `.partial` name until
    /// [`finish`]), with the schema and the `Info` rows ocgdb writes first,
    /// and opens the transaction every game goes into.
    ///
    /// [`finish`]: OcgdbWriter::finish
    pub fn create(target: &Path) -> Result<OcgdbWriter, Error> {
        let (partial, connection) = Self::create_partial(target, SCHEMA)?;
        let mut info = connection
            .prepare("INSERT INTO Info (Name, Value) VALUES (?1, ?2)")
            .map_err(sql("Info"))?;
        for (key, value) in [
            ("Data Structure Version", DATA_STRUCTURE_VERSION),
            ("Version", USER_VERSION),
            ("Variant", "standard"),
            ("License", "free"),
            ("Description", "exported by pgnload"),
        ] {
            info.execute(params![key, value]).map_err(sql("Info"))?;
        }
        drop(info);
        connection.execute_batch("BEGIN").map_err(sql("BEGIN"))?;
        Ok(OcgdbWriter {
            target: target.to_owned(),
            partial,
            connection,
            players: Names::default(),
            events: Names::default(),
            sites: Names::default(),
            games: 0,
            comments: 0,
            dropped: NoteCounts::default(),
        })
    }

    /// Appends a standard-chess game; `false` (nothing written) for a game
    /// with a null move, which `Moves2` cannot hold.
    pub fn write(&mut self, game: &StoredGame, moves: &[StoredMove]) -> Result<bool, Error> {
        let plain = plain_moves(game, moves)?;
        let Some(blob) = moves2(&plain) else {
            return Ok(false);
        };
        // Every comment before the first row: a game that cannot be
        // written leaves nothing of itself in the file.
        let (comments, dropped) = comments_of(game, moves)?;
        let c = &self.connection;
        let event = named(c, &mut self.events, "Events", game.event.as_deref(), None)?;
        let site = named(c, &mut self.sites, "Sites", game.site.as_deref(), None)?;
        let white = named(
            c,
            &mut self.players,
            "Players",
            game.white.as_deref(),
            game.white_elo,
        )?;
        let black = named(
            c,
            &mut self.players,
            "Players",
            game.black.as_deref(),
            game.black_elo,
        )?;
        self.games += 1;
        let id = self.games;
        let result = match game.result {
            Some(1) => Some("1-0"),
            Some(-1) => Some("0-1"),
            Some(0) => Some("1/2-1/2"),
            _ => None,
        };
        let ply_count = i64::try_from(moves.len())
            .map_err(|_| Error::bug(format!("game {}: too many moves", game.id)))?;
        c.prepare_cached(
            "INSERT INTO Games (ID, EventID, SiteID, Date, Round, WhiteID, WhiteElo, BlackID, \
             BlackElo, Result, TimeControl, ECO, PlyCount, FEN, Moves2) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        )
        .and_then(|mut s| {
            s.execute(params![
                id,
                event,
                site,
                date_text(game),
                game.round.as_deref().filter(|r| !r.starts_with('?')),
                white,
                game.white_elo.filter(|&e| e > 0),
                black,
                game.black_elo.filter(|&e| e > 0),
                result,
                game.time_control,
                game.eco,
                ply_count,
                game.start_fen,
                blob,
            ])
        })
        .map_err(sql("Games"))?;
        for (ply, comment) in comments {
            c.prepare_cached("INSERT INTO Comments (GameID, Ply, Comment) VALUES (?1, ?2, ?3)")
                .and_then(|mut s| s.execute(params![id, ply, comment]))
                .map_err(sql("Comments"))?;
            self.comments += 1;
        }
        self.dropped.add(dropped);
        Ok(true)
    }

    /// What the games written so far held that the format cannot carry.
    pub fn dropped(&self) -> NoteCounts {
        self.dropped
    }

    /// Writes the counts into `Info` as ocgdb's `updateInfoTable` does,
    /// commits, closes and renames the file to its name.
    pub fn finish(self) -> Result<(), Error> {
        let OcgdbWriter {
            target,
            partial,
            connection,
            players,
            events,
            sites,
            games,
            comments,
            ..
        } = self;
        connection
            .execute(
                "DELETE FROM Info WHERE Name IN ('Variant', 'GameCount', 'PlayerCount', \
                 'EventCount', 'SiteCount', 'CommentCount')",
                [],
            )
            .map_err(sql("Info"))?;
        {
            let mut info = connection
                .prepare("INSERT INTO Info (Name, Value) VALUES (?1, ?2)")
                .map_err(sql("Info"))?;
            info.execute(params!["Variant", "standard"])
                .map_err(sql("Info"))?;
            for (key, n) in [
                ("GameCount", games),
                ("PlayerCount", players.count()),
                ("EventCount", events.count()),
                ("SiteCount", sites.count()),
                ("CommentCount", comments),
            ] {
                info.execute(params![key, n.to_string()])
                    .map_err(sql("Info"))?;
            }
        }
        Self::finish_partial(connection, &partial, &target)
    }

    /// Commits the transaction every game went into, closes the file and
    /// gives it its name `target`: how every SQLite export ends.
    pub(super) fn finish_partial(
        connection: Connection,
        partial: &Path,
        target: &Path,
    ) -> Result<(), Error> {
        connection.execute_batch("COMMIT").map_err(sql("COMMIT"))?;
        connection
            .close()
            .map_err(|(_, e)| sql("closing the file")(e))?;
        fs::rename(partial, target).map_err(|source| Error::Open {
            path: target.to_path_buf(),
            source,
        })
    }
}

/// The non-empty comments of a game's moves, by ply (0-based), as
/// `Comments` rows hold them; and what the format cannot hold (see
/// [`move_annotations`]), NAGs included.
fn comments_of(
    game: &StoredGame,
    moves: &[StoredMove],
) -> Result<(Vec<(i64, String)>, NoteCounts), Error> {
    let (annotations, mut dropped) = move_annotations(game, moves)?;
    let mut comments = Vec::new();
    for (ply, (nags, comment)) in annotations.into_iter().enumerate() {
        dropped.nags += nags.len() as u64;
        if !comment.is_empty() {
            let ply = i64::try_from(ply)
                .map_err(|_| Error::bug(format!("game {}: too many moves", game.id)))?;
            comments.push((ply, comment));
        }
    }
    Ok((comments, dropped))
}

/// The id of `name` in `table` (`Players`, `Events` or `Sites`), its row
/// inserted the first time it is seen (a player's with `elo`).
fn named(
    c: &Connection,
    names: &mut Names,
    table: &'static str,
    name: Option<&str>,
    elo: Option<i32>,
) -> Result<i64, Error> {
    let (id, new) = names.id(name);
    if new {
        let name = name.map(str::trim);
        let result = match table {
            "Players" => c
                .prepare_cached("INSERT INTO Players (ID, Name, Elo) VALUES (?1, ?2, ?3)")
                .and_then(|mut s| s.execute(params![id, name, elo.filter(|&e| e > 0)])),
            "Events" => c
                .prepare_cached("INSERT INTO Events (ID, Name) VALUES (?1, ?2)")
                .and_then(|mut s| s.execute(params![id, name])),
            _ => c
                .prepare_cached("INSERT INTO Sites (ID, Name) VALUES (?1, ?2)")
                .and_then(|mut s| s.execute(params![id, name])),
        };
        result.map_err(sql(table))?;
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves2_is_from_to_promotion_little_endian() {
        let e2e4 = PlainMove::Move {
            from: 12,
            to: 28,
            promotion: 0,
        };
        let castle = PlainMove::Move {
            from: 4,
            to: 6,
            promotion: 0,
        };
        let promote = PlainMove::Move {
            from: 52,
            to: 60,
            promotion: 5,
        };
        // e2e4: 12 | 28 << 6 = 0x070c; e1g1: 4 | 6 << 6 = 0x0184;
        // e7e8=Q: 52 | 60 << 6 | 5 << 12 = 0x5f34.
        assert_eq!(
            moves2(&[e2e4, castle, promote]),
            Some(vec![0x0c, 0x07, 0x84, 0x01, 0x34, 0x5f])
        );
        assert_eq!(moves2(&[e2e4, PlainMove::Null]), None);
        let blob = moves2(&[e2e4, castle, promote]).expect("no null move");
        assert_eq!(moves_of_moves2(&blob), Ok(vec![e2e4, castle, promote]));
        assert!(moves_of_moves2(&blob[..3]).is_err());
        // From = to, and promotion code 7.
        assert!(moves_of_moves2(&[0x0c, 0x03]).is_err());
        assert!(moves_of_moves2(&[0x34, 0x7f]).is_err());
    }

    #[test]
    fn names_merge_ignoring_ascii_case_after_the_placeholder() {
        let mut names = Names::default();
        assert_eq!(names.id(Some("Carlsen")), (2, true));
        assert_eq!(names.id(Some("CARLSEN ")), (2, false));
        assert_eq!(names.id(Some("?")), (1, false));
        assert_eq!(names.id(None), (1, false));
        assert_eq!(names.id(Some("Caruana")), (3, true));
        assert_eq!(names.count(), 3);
    }
}

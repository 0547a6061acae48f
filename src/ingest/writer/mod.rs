//! The database side of an import: each batch of games in two phases, two
//! transactions, on two connections (so that PostgreSQL works on the next
//! batch's positions while it ingests this batch's games and moves).
//!
//! [`resolve_positions`], one transaction:
//! 1. games already in the database (by `(source, external_id)`) or
//!    repeated in the batch are set aside;
//! 2. positions of the new games are resolved, cache first. In incremental
//!    mode the misses are `COPY`ed (binary) into a temporary staging table,
//!    inserted with `ON CONFLICT DO NOTHING` (sorted, so concurrent
//!    importers take row locks in the same order) and joined back for their
//!    ids; in bulk mode a miss is a new position, given the next id and
//!    `COPY`ed straight into the table (see [`crate::ingest::bulk`]). After the
//!    commit the cache learns the new ids.
//!
//! [`write_games`], one transaction:
//! 1. games already present are looked up again (an earlier batch or
//!    another importer may have committed them since);
//! 2. players and events are get-or-created through staging tables (both
//!    modes: they are few, and their unique keys stay);
//! 3. games go through staging with `ON CONFLICT DO NOTHING RETURNING`, so a
//!    game another importer committed meanwhile is "already present" too
//!    (bulk mode: `COPY`ed with their own ids);
//! 4. moves of the inserted games and the rejected games are `COPY`ed;
//! 5. the input's checkpoint (games read, bytes consumed, counts) is updated.
//!
//! Rows reach PostgreSQL through the binary COPY encoder of [`copy`].
//!
//! The database never holds games a checkpoint does not cover, or the
//! reverse. Positions may be committed without their games (a crash
//! between the phases): they are shared rows that a rerun reuses.

use std::collections::HashMap;

use foldhash::fast::RandomState;
use rayon::prelude::*;
use tokio_postgres::{Client, Transaction, types::Json};

mod copy;

use self::copy::{
    CopyRow, EventRow, GameRow, MoveRow, NewPosition, PlayerRow, PositionRow, RejectRow,
    WriteError, copy_rows,
};
use crate::{
    chess::{fen::split_normalized, model::termination_label, replay::GameRecord},
    error::Error,
    ingest::{
        dedup::{KeyMap, PositionCache, PositionKey},
        explorer,
        pipeline::{Batch, Outcome, RejectedGame},
    },
};

/// Temporary staging tables, created once per connection.
const STAGING_DDL: &str = "
CREATE TEMP TABLE IF NOT EXISTS stage_positions (
    normalized_fen text, fen_hash bigint, piece_placement text,
    active_color text, castling text, en_passant text
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS stage_players (
    source text, username text, username_key text, title text, is_bot boolean
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS stage_events (
    source text, event_key text, external_id text, name text, kind text
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS stage_games (
    id bigint, source text, external_id text, event_id bigint, site text, round text,
    white_player_id bigint, black_player_id bigint,
    white_elo integer, black_elo integer, white_rating_diff integer, black_rating_diff integer,
    time_control text, time_initial_s integer, time_increment_s integer,
    variant text, termination text, result smallint, eco text, opening text,
    started_at timestamptz, initial_position_id bigint, final_position_id bigint,
    ply_count integer, moves bytea, start_fen text, tags jsonb,
    import_file_id bigint, game_number bigint, byte_offset bigint
) ON COMMIT DELETE ROWS;
";

/// Which input file the batch belongs to.
#[derive(Debug, Clone)]
pub struct FileContext {
    /// `import_files.id`.
    pub file_id: i64,
    /// Source label for games without a Lichess id.
    pub source: String,
    /// The checkpoint this batch continues from. The update is refused if
    /// the stored checkpoint differs: another process wrote this input.
    pub expected_bytes_done: i64,
}

/// What one committed batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Games in the batch.
    pub read: u64,
    /// Games inserted.
    pub imported: u64,
    /// Games skipped because their `(source, external_id)` was already there.
    pub present: u64,
    /// Games rejected.
    pub rejected: u64,
    /// Positions inserted.
    pub positions_new: u64,
    /// Position references resolved to existing rows (cache or database).
    pub positions_reused: u64,
    /// Position references resolved in memory: repeats within the batch
    /// and cache hits (the rest went to the database, or were new).
    pub positions_in_memory: u64,
    /// Move rows inserted.
    pub moves: u64,
    /// Games not imported because their identity is held by a game with
    /// other moves (counted in `present` too).
    pub conflicts: u64,
}

impl BatchStats {
    /// Fraction of position references resolved in memory (0 when none).
    pub fn memory_hit_rate(&self) -> f64 {
        let total = self.positions_new + self.positions_reused;
        if total == 0 {
            0.0
        } else {
            self.positions_in_memory as f64 / total as f64
        }
    }

    /// Adds another batch's counts.
    pub fn add(&mut self, other: BatchStats) {
        self.read += other.read;
        self.imported += other.imported;
        self.present += other.present;
        self.rejected += other.rejected;
        self.positions_new += other.positions_new;
        self.positions_reused += other.positions_reused;
        self.positions_in_memory += other.positions_in_memory;
        self.moves += other.moves;
        self.conflicts += other.conflicts;
    }
}

/// Prepares a fresh data connection: its staging tables. (Its commits are
/// synchronous, as every pgnload session's: see [`crate::store::db::connect`].)
pub async fn prepare_connection(client: &Client) -> Result<(), Error> {
    client
        .batch_execute(STAGING_DDL)
        .await
        .map_err(crate::store::db::db_err("creating staging tables"))
}

/// A batch's position in its input as PostgreSQL `bigint`s: the game
/// count through the batch and the byte offset just after it. Every game
/// number, byte offset, length and count written for the batch is at most
/// one of these two, so once they fit, [`to_i64`] cannot fail. They cannot
/// be over `i64::MAX` from any real input (2^63 bytes), but an impossible
/// value is an error naming the batch, never a clamped number in the table.
fn batch_bounds(batch: &Batch, file: &FileContext) -> Result<(i64, i64), Error> {
    bigint_bounds(batch.games_through, batch.end_offset).map_err(|value| {
        Error::Internal(format!(
            "input {}: batch ending at game #{} (byte {}) has {value} past PostgreSQL's bigint",
            file.file_id, batch.games_through, batch.end_offset
        ))
    })
}

/// [`batch_bounds`] over the raw numbers; `Err` names the one that does not fit.
fn bigint_bounds(games_through: u64, end_offset: u64) -> Result<(i64, i64), &'static str> {
    let games = i64::try_from(games_through).map_err(|_| "a game number")?;
    let bytes = i64::try_from(end_offset).map_err(|_| "a byte offset")?;
    Ok((games, bytes))
}

/// A game number, byte offset, length or count of a batch whose
/// [`batch_bounds`] were checked, as a `bigint`.
pub(crate) fn to_i64(n: u64) -> i64 {
    i64::try_from(n)
        .expect("at most the batch's game count or end offset, which batch_bounds checked fit")
}

/// A game of the batch that is new to the database (so far).
struct NewGame<'a> {
    game: &'a GameRecord,
    source: &'a str,
    external_id: String,
    /// The dedup key of each of the game's positions, in order.
    keys: &'a [PositionKey],
}

/// Position ids resolved in this transaction, to be cached after commit.
pub type PendingIds = Vec<(PositionKey, i64)>;

/// A batch whose positions are in the database (committed), ready for its
/// games to be written by [`write_games`].
#[derive(Debug, Default)]
pub struct ResolvedBatch {
    /// The games that were new when the positions were resolved (not in
    /// the database, not repeated within the batch), in batch order.
    games: Vec<ResolvedGame>,
    /// The id of every position of those games.
    position_ids: KeyMap<i64>,
    /// The position counts.
    stats: BatchStats,
    /// Games of the batch whose identity was taken by a game with other
    /// moves, found by this phase (recorded by [`write_games`]).
    conflicts: Vec<Conflict>,
}

/// Where a game that holds an identity is: in `games` (with its id), or
/// earlier in the same batch (no id yet).
#[derive(Debug, Clone, Default)]
pub struct Holder {
    /// `games.id`, if it is in the table.
    pub game_id: Option<i64>,
    /// Its input (`import_files.id`).
    pub file_id: Option<i64>,
    /// The input's path as recorded.
    pub path: Option<String>,
    /// Its number in that input.
    pub game_number: Option<i64>,
    /// Its byte offset in that input.
    pub byte_offset: Option<i64>,
}

/// A game of a batch not imported because its identity (a Lichess id) is
/// held by a game with other moves: reported with both locations, counted
/// with the games already present.
#[derive(Debug, Clone)]
pub struct Conflict {
    /// Index into the batch's outcomes.
    pub index: usize,
    /// Its identity.
    pub source: String,
    /// Its identity.
    pub external_id: String,
    /// The game that holds the identity.
    pub holder: Holder,
}

/// A game of a [`ResolvedBatch`].
#[derive(Debug)]
struct ResolvedGame {
    /// Index into the batch's outcomes.
    index: usize,
    /// Its `games.external_id` (a content digest for non-Lichess games:
    /// computed once, in the first phase).
    external_id: String,
    /// The dedup key of each of its positions, in order.
    keys: Vec<PositionKey>,
}

/// A game of a batch, as the existing-games check needs it.
struct Candidate<'a> {
    index: usize,
    game: &'a GameRecord,
    source: &'a str,
    external_id: String,
}

/// What the existing-games check found for one candidate.
#[derive(Debug)]
enum Found {
    /// Not in `games`.
    New,
    /// In `games`, the same game: already present.
    Present,
    /// In `games` with other moves: a conflict.
    Other(Holder),
}

/// How a game is recognized: a Lichess game by its id, any other game by
/// the digest of its content whatever its source label (so the same game
/// from two files, or imported under two labels, is stored once).
fn identity<'a>(source: &str, external_id: &'a str) -> (bool, &'a str) {
    (source == LICHESS, external_id)
}

/// `games.source` of Lichess games.
const LICHESS: &str = "lichess";

/// Looks the candidates up in `games` by their identity (see [`identity`]):
/// one index probe each, through games' unique key for Lichess games and
/// the partial index on the digest for the others. A game found with
/// other moves or another start position is a conflict.
async fn existing_games(
    tx: &Transaction<'_>,
    candidates: &[Candidate<'_>],
) -> Result<Vec<Found>, tokio_postgres::Error> {
    let sources: Vec<&str> = candidates.iter().map(|c| c.source).collect();
    let ids: Vec<&str> = candidates.iter().map(|c| c.external_id.as_str()).collect();
    let moves: Vec<Vec<u8>> = candidates.iter().map(|c| c.game.encoded_moves()).collect();
    let start_fens: Vec<Option<&str>> = candidates
        .iter()
        .map(|c| c.game.start_fen.as_deref())
        .collect();
    let rows = tx
        .query(
            "WITH k AS (
                 SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[])
                     WITH ORDINALITY AS k(source, external_id, moves, start_fen, i)
             ), found AS (
                 SELECT k.i, g.id, g.moves = k.moves AND g.start_fen IS NOT DISTINCT FROM k.start_fen AS same,
                        g.import_file_id, g.game_number, g.byte_offset
                 FROM k JOIN games g ON g.source = 'lichess' AND g.external_id = k.external_id
                 WHERE k.source = 'lichess'
                 UNION ALL
                 SELECT k.i, g.id, g.moves = k.moves AND g.start_fen IS NOT DISTINCT FROM k.start_fen,
                        g.import_file_id, g.game_number, g.byte_offset
                 FROM k JOIN games g ON g.source <> 'lichess' AND g.external_id = k.external_id
                 WHERE k.source <> 'lichess'
             )
             -- The holder's path is only reported for a conflict: a rerun,
             -- where every game is present, looks up no input.
             SELECT found.*, f.path FROM found
             LEFT JOIN import_files f ON f.id = found.import_file_id AND NOT found.same",
            &[&sources, &ids, &moves, &start_fens],
        )
        .await?;
    let mut found: Vec<Found> = candidates.iter().map(|_| Found::New).collect();
    for row in rows {
        let ordinality: i64 = row.get(0);
        let Some(slot) = usize::try_from(ordinality - 1)
            .ok()
            .and_then(|i| found.get_mut(i))
        else {
            continue;
        };
        let same: bool = row.get(2);
        *slot = match (&slot, same) {
            // Several rows can hold one digest (labels of earlier
            // versions): the same game anywhere makes it present.
            (Found::Present, _) | (_, true) => Found::Present,
            _ => Found::Other(Holder {
                game_id: row.get(1),
                file_id: row.get(3),
                game_number: row.get(4),
                byte_offset: row.get(5),
                path: row.get(6),
            }),
        };
    }
    Ok(found)
}

/// Splits `candidates` into the games to import, the present ones and the
/// conflicts: the database decides first, then the batch itself (the
/// first of two games with one identity wins; a later one with other
/// moves is a conflict, with the same moves it is present).
async fn classify<'a>(
    tx: &Transaction<'_>,
    candidates: Vec<Candidate<'a>>,
    file: &FileContext,
) -> Result<(Vec<Candidate<'a>>, Vec<Conflict>), tokio_postgres::Error> {
    let found = existing_games(tx, &candidates).await?;
    let mut first_of: HashMap<(bool, String), usize> = HashMap::with_capacity(candidates.len());
    let mut new = Vec::with_capacity(candidates.len());
    let mut conflicts = Vec::new();
    for (candidate, found) in candidates.into_iter().zip(found) {
        let conflict = |holder: Holder| Conflict {
            index: candidate.index,
            source: candidate.source.to_owned(),
            external_id: candidate.external_id.clone(),
            holder,
        };
        match found {
            Found::Present => {}
            Found::Other(holder) => conflicts.push(conflict(holder)),
            Found::New => {
                let (lichess, id) = identity(candidate.source, &candidate.external_id);
                match first_of.get(&(lichess, id.to_owned())) {
                    None => {
                        first_of.insert((lichess, id.to_owned()), new.len());
                        new.push(candidate);
                    }
                    Some(&earlier) => {
                        let first: &Candidate<'_> = &new[earlier];
                        let same = first.game.encoded_moves() == candidate.game.encoded_moves()
                            && first.game.start_fen == candidate.game.start_fen;
                        if !same {
                            conflicts.push(conflict(Holder {
                                game_id: None,
                                file_id: Some(file.file_id),
                                path: None,
                                game_number: Some(to_i64(first.game.pos.game_number)),
                                byte_offset: Some(to_i64(first.game.pos.byte_offset)),
                            }));
                        }
                    }
                }
            }
        }
    }
    Ok((new, conflicts))
}

/// The games of `batch` that are not in the database and not repeated
/// within the batch, and the conflicts found.
async fn games_to_import<'b>(
    tx: &Transaction<'_>,
    batch: &'b Batch,
    file: &'b FileContext,
) -> Result<(Vec<Candidate<'b>>, Vec<Conflict>), tokio_postgres::Error> {
    let candidates: Vec<Candidate<'b>> = batch
        .outcomes
        .iter()
        .enumerate()
        .filter_map(|(index, outcome)| match outcome {
            Outcome::Game(game) => Some(Candidate {
                index,
                game,
                source: game.source(&file.source),
                external_id: game.external_id(),
            }),
            Outcome::Rejected(_) => None,
        })
        .collect();
    classify(tx, candidates, file).await
}

/// Phase one of a batch: the positions of its new games, cache first, the
/// misses get-or-created (incremental) or given new ids (bulk), in a
/// transaction of their own that commits before the games are written.
///
/// Why a separate transaction (and connection): so that the next batch's
/// positions are resolved while PostgreSQL ingests this batch's games and
/// moves, which keeps both cores busy. Committing positions first is safe:
/// positions are shared, get-or-created rows, so a crash between the two
/// phases leaves positions no game uses yet, which the rerun reuses
/// (incremental) or the bulk load's duplicate merge folds (bulk). Returns
/// the ids to add to the cache now that they are committed.
pub async fn resolve_positions(
    client: &mut Client,
    batch: &Batch,
    file: &FileContext,
    cache: &mut PositionCache,
    ids: Option<&mut IdSequence>,
) -> Result<(ResolvedBatch, PendingIds), Error> {
    let at = BatchContext { batch, file };
    batch_bounds(batch, file)?;
    let tx = client
        .transaction()
        .await
        .map_err(|e| at.err("starting a transaction", e))?;
    let (new_games, conflicts) = games_to_import(&tx, batch, file)
        .await
        .map_err(|e| at.err("looking up existing games", e))?;
    // Every later lookup of a position in this batch is by key: hashing
    // each FEN once, on all cores, is cheaper than hashing and comparing
    // the text in each map.
    let resolved_games: Vec<ResolvedGame> = new_games
        .into_par_iter()
        .map(|candidate| ResolvedGame {
            index: candidate.index,
            keys: candidate
                .game
                .positions
                .iter()
                .map(|(fen, _)| PositionKey::of(fen))
                .collect(),
            external_id: candidate.external_id,
        })
        .collect();
    let mut stats = BatchStats::default();
    let games = resolved_games
        .iter()
        .filter_map(|g| Some((batch_game(batch, g.index)?, &g.keys[..])));
    let Unresolved {
        mut position_ids,
        misses,
    } = collect_positions(games, cache, &mut stats);
    let mut pending: PendingIds = Vec::with_capacity(misses.len());
    match ids {
        None => {
            get_or_create_positions(&tx, &misses, &mut position_ids, &mut pending, &mut stats)
                .await
                .map_err(|e| at.err("get-or-create positions", e))?;
        }
        Some(ids) => {
            insert_new_positions(&tx, &misses, ids, &mut position_ids, &mut pending)
                .await
                .map_err(|e| at.err("copying new positions", e))?;
            stats.positions_new = misses.len() as u64;
        }
    }
    tx.commit()
        .await
        .map_err(|e| at.err("committing the positions", e))?;
    let resolved = ResolvedBatch {
        games: resolved_games,
        position_ids,
        stats,
        conflicts,
    };
    Ok((resolved, pending))
}

/// The game at `index` of the batch's outcomes (`None` if that outcome is
/// a reject, which a [`ResolvedBatch`] never points at).
fn batch_game(batch: &Batch, index: usize) -> Option<&GameRecord> {
    match batch.outcomes.get(index)? {
        Outcome::Game(game) => Some(game),
        Outcome::Rejected(_) => None,
    }
}

/// Where in the input a batch ends, for the context of its errors.
struct BatchContext<'b> {
    batch: &'b Batch,
    file: &'b FileContext,
}

impl BatchContext<'_> {
    /// The error `what` failed with, naming the batch and the input.
    fn err(&self, what: &str, error: impl Into<WriteError>) -> Error {
        let what = format!(
            "{what} (batch ending at game #{} of input {})",
            self.batch.games_through, self.file.file_id
        );
        match error.into() {
            WriteError::Database(e) => crate::store::db::db_err(what)(e),
            WriteError::Encode(e) => {
                Error::Internal(format!("{what}: encoding a row for COPY: {e}"))
            }
        }
    }
}

/// Phase two of a batch, after [`resolve_positions`]: its games, moves and
/// rejects, and the input's checkpoint, in one transaction, so that the
/// database never holds games a checkpoint does not cover, or the reverse.
/// `ids` hands out game ids in bulk mode (`None`: incremental). On error
/// nothing of this phase was committed.
pub async fn write_games(
    client: &mut Client,
    batch: &Batch,
    file: &FileContext,
    resolved: &ResolvedBatch,
    ids: Option<&mut IdSequence>,
) -> Result<WrittenBatch, Error> {
    let at = BatchContext { batch, file };
    let (games_through, end_offset) = batch_bounds(batch, file)?;
    let mut stats = BatchStats {
        read: batch.outcomes.len() as u64,
        ..resolved.stats
    };
    let position_ids = &resolved.position_ids;
    let tx = client
        .transaction()
        .await
        .map_err(|e| at.err("starting a transaction", e))?;

    // 1. The resolved games already in the database, again: another
    //    importer, or the previous batch, may have committed some since
    //    their positions were resolved.
    let (new_games, late_conflicts) = recheck_games(&tx, batch, file, resolved)
        .await
        .map_err(|e| at.err("looking up existing games", e))?;
    let conflicts: Vec<Conflict> = resolved
        .conflicts
        .iter()
        .cloned()
        .chain(late_conflicts)
        .collect();
    let rejected: Vec<&RejectedGame> = batch
        .outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            Outcome::Rejected(r) => Some(&**r),
            Outcome::Game(_) => None,
        })
        .collect();

    // 2. Players and events.
    let player_ids = get_or_create_players(&tx, &new_games)
        .await
        .map_err(|e| at.err("get-or-create players", e))?;
    let event_ids = get_or_create_events(&tx, &new_games)
        .await
        .map_err(|e| at.err("get-or-create events", e))?;

    // 3. Games.
    let mut game_rows = new_games
        .iter()
        .map(|new| game_row(new, position_ids, &player_ids, &event_ids, file))
        .collect::<Result<Vec<GameRow<'_>>, Error>>()?;
    let mut inserted: HashMap<(String, String), i64> = HashMap::new();
    if !game_rows.is_empty() {
        match ids {
            None => {
                insert_games_if_absent(&tx, &game_rows, &mut inserted)
                    .await
                    .map_err(|e| at.err("inserting games", e))?;
            }
            Some(ids) => {
                copy_new_games(&tx, &mut game_rows, ids, &mut inserted)
                    .await
                    .map_err(|e| at.err("copying games", e))?;
            }
        }
    }
    stats.imported = inserted.len() as u64;
    stats.rejected = rejected.len() as u64;
    stats.present = stats.read - stats.imported - stats.rejected;

    // 4. Moves of the inserted games, the rejects and the conflicts.
    let move_rows = move_rows(&game_rows, &inserted, position_ids)?;
    if !move_rows.is_empty() {
        stats.moves = copy_rows(
            &tx,
            "COPY moves (game_id, ply, position_id, position_after_id, uci, san, clock_ms, eval_cp, eval_mate, nag) FROM STDIN (FORMAT binary)",
            &move_rows,
        )
        .await
        .map_err(|e| at.err("copying moves", e))?;
    }
    // The explorer counters of the games inserted (both modes: the
    // counters keep their key during a bulk load).
    let counted = game_rows.iter().filter_map(|row| {
        let id = inserted.get(&(row.source.to_owned(), row.external_id.clone()))?;
        Some((*id, row.game, row.keys))
    });
    explorer::add_batch(&tx, counted, position_ids).await?;
    let reject_rows: Vec<RejectRow<'_>> = rejected
        .iter()
        .map(|r| RejectRow {
            file_id: file.file_id,
            game_number: to_i64(r.rejection.pos.game_number),
            byte_offset: to_i64(r.rejection.pos.byte_offset),
            reason: r.rejection.reason.to_string(),
            raw: &r.raw,
            raw_length: to_i64(r.total_len),
        })
        .collect();
    if !reject_rows.is_empty() {
        copy_rows(
            &tx,
            "COPY import_rejects (file_id, game_number, byte_offset, reason, raw, raw_length) FROM STDIN (FORMAT binary)",
            &reject_rows,
        )
        .await
        .map_err(|e| at.err("copying rejects", e))?;
    }
    if !conflicts.is_empty() {
        record_conflicts(&tx, batch, file, &conflicts)
            .await
            .map_err(|e| at.err("recording conflicts", e))?;
    }
    stats.conflicts = conflicts.len() as u64;

    // 5. The checkpoint, in the same transaction.
    advance_checkpoint(&tx, file, (games_through, end_offset), &stats)
        .await
        .map_err(|e| at.err("updating the checkpoint", e))??;
    tx.commit().await.map_err(|e| at.err("committing", e))?;
    Ok(WrittenBatch { stats, conflicts })
}

/// The games [`resolve_positions`] kept, looked up again by identity
/// (another importer, or the previous batch, may have committed some
/// since): the ones still new, with their position keys, and the
/// conflicts found now.
async fn recheck_games<'b>(
    tx: &Transaction<'_>,
    batch: &'b Batch,
    file: &'b FileContext,
    resolved: &'b ResolvedBatch,
) -> Result<(Vec<NewGame<'b>>, Vec<Conflict>), tokio_postgres::Error> {
    let keys_of: HashMap<usize, &[PositionKey]> = resolved
        .games
        .iter()
        .map(|g| (g.index, &g.keys[..]))
        .collect();
    let candidates: Vec<Candidate<'_>> = resolved
        .games
        .iter()
        .filter_map(|g| {
            let game = batch_game(batch, g.index)?;
            Some(Candidate {
                index: g.index,
                game,
                source: game.source(&file.source),
                external_id: g.external_id.clone(),
            })
        })
        .collect();
    let (fresh, conflicts) = classify(tx, candidates, file).await?;
    let new_games = fresh
        .into_iter()
        .filter_map(|c| {
            Some(NewGame {
                keys: keys_of.get(&c.index).copied()?,
                game: c.game,
                source: c.source,
                external_id: c.external_id,
            })
        })
        .collect();
    Ok((new_games, conflicts))
}

/// The `games` row of a new game: its positions, players and event
/// resolved to ids.
fn game_row<'a>(
    new: &NewGame<'a>,
    position_ids: &KeyMap<i64>,
    player_ids: &HashMap<(&'a str, String), i64>,
    event_ids: &HashMap<(&'a str, String), i64>,
    file: &FileContext,
) -> Result<GameRow<'a>, Error> {
    let game = new.game;
    let id_of = |i: usize| id_at(new.keys, position_ids, i);
    let (Some(initial_id), Some(final_id)) = (id_of(0), id_of(game.positions.len() - 1)) else {
        return Err(unresolved(game));
    };
    let player = |name: &Option<String>| {
        name.as_ref()
            .and_then(|n| player_ids.get(&(new.source, username_key(new.source, n))))
            .copied()
    };
    let event = game.meta.event.as_ref().and_then(|name| {
        let key = event_key(game, name);
        event_ids.get(&(new.source, key.to_owned())).copied()
    });
    Ok(GameRow {
        id: None,
        keys: new.keys,
        game,
        source: new.source,
        external_id: new.external_id.clone(),
        event_id: event,
        white_id: player(&game.meta.white.name),
        black_id: player(&game.meta.black.name),
        initial_id,
        final_id,
        ply_count: ply_number(game.plies.len()),
        moves: game.encoded_moves(),
        variant: game.variant.as_db_label(),
        termination: game.meta.termination.as_deref().map(termination_label),
        result: game.result.and_then(|r| r.score()),
        initial_s: game.meta.clock.map(|c| c.initial_s),
        increment_s: game.meta.clock.map(|c| c.increment_s),
        tags: Json(serde_json::Value::Object(game.meta.tags_json())),
        file_id: file.file_id,
        game_number: to_i64(game.pos.game_number),
        byte_offset: to_i64(game.pos.byte_offset),
    })
}

/// The `moves` rows of the games that were inserted (`inserted`: their
/// ids by identity).
fn move_rows<'a>(
    game_rows: &[GameRow<'a>],
    inserted: &HashMap<(String, String), i64>,
    position_ids: &KeyMap<i64>,
) -> Result<Vec<MoveRow<'a>>, Error> {
    let mut rows = Vec::new();
    for row in game_rows {
        let Some(&game_id) = inserted.get(&(row.source.to_owned(), row.external_id.clone())) else {
            continue;
        };
        let game = row.game;
        let id_of = |i: usize| id_at(row.keys, position_ids, i);
        for (i, ply) in game.plies.iter().enumerate() {
            let (Some(before), Some(after)) = (id_of(i), id_of(i + 1)) else {
                return Err(unresolved(game));
            };
            rows.push(MoveRow {
                game_id,
                ply: ply_number(i + 1),
                before,
                after,
                uci: &ply.uci,
                san: &ply.san,
                clock_ms: ply.clock_ms,
                eval_cp: ply.eval_cp,
                eval_mate: ply.eval_mate,
                nag: ply.nag,
            });
        }
    }
    Ok(rows)
}

/// Moves the input's checkpoint to the end of the batch (`through`: games
/// read, bytes consumed) and adds the batch's counts, if the checkpoint is
/// still where this import left it; otherwise another process wrote this
/// input: a conflict, and the transaction must roll back.
async fn advance_checkpoint(
    tx: &Transaction<'_>,
    file: &FileContext,
    (games_through, end_offset): (i64, i64),
    stats: &BatchStats,
) -> Result<Result<(), Error>, tokio_postgres::Error> {
    let updated = tx
        .execute(
            "UPDATE import_files SET games_done = $2, bytes_done = $3,
             games_imported = games_imported + $4, games_present = games_present + $5,
             games_rejected = games_rejected + $6, updated_at = now()
         WHERE id = $1 AND bytes_done = $7",
            &[
                &file.file_id,
                &games_through,
                &end_offset,
                &to_i64(stats.imported),
                &to_i64(stats.present),
                &to_i64(stats.rejected),
                &file.expected_bytes_done,
            ],
        )
        .await?;
    if updated != 1 {
        return Ok(Err(Error::Conflict(format!(
            "the checkpoint of input {} moved under this import (expected byte {}); \
             another process imported the same input; rolled back",
            file.file_id, file.expected_bytes_done
        ))));
    }
    Ok(Ok(()))
}

/// What [`write_games`] committed.
#[derive(Debug)]
pub struct WrittenBatch {
    /// The batch's counts.
    pub stats: BatchStats,
    /// Its games not imported because their identity was taken by a game
    /// with other moves (recorded in `import_conflicts`).
    pub conflicts: Vec<Conflict>,
}

/// Records the batch's conflicts in `import_conflicts`, once per game (a
/// rerun finds them again).
async fn record_conflicts(
    tx: &Transaction<'_>,
    batch: &Batch,
    file: &FileContext,
    conflicts: &[Conflict],
) -> Result<(), tokio_postgres::Error> {
    let mut numbers = Vec::with_capacity(conflicts.len());
    let mut offsets = Vec::with_capacity(conflicts.len());
    for conflict in conflicts {
        let pos = batch_game(batch, conflict.index).map(|g| &g.pos);
        numbers.push(pos.map(|p| to_i64(p.game_number)));
        offsets.push(pos.map(|p| to_i64(p.byte_offset)));
    }
    let sources: Vec<&str> = conflicts.iter().map(|c| c.source.as_str()).collect();
    let ids: Vec<&str> = conflicts.iter().map(|c| c.external_id.as_str()).collect();
    let holder_ids: Vec<Option<i64>> = conflicts.iter().map(|c| c.holder.game_id).collect();
    let holder_files: Vec<Option<i64>> = conflicts.iter().map(|c| c.holder.file_id).collect();
    let holder_numbers: Vec<Option<i64>> = conflicts.iter().map(|c| c.holder.game_number).collect();
    let holder_offsets: Vec<Option<i64>> = conflicts.iter().map(|c| c.holder.byte_offset).collect();
    tx.execute(
        "INSERT INTO import_conflicts (file_id, game_number, byte_offset, source, external_id,
             existing_game_id, existing_file_id, existing_game_number, existing_byte_offset)
         SELECT $1, * FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[],
             $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[])
         ON CONFLICT (file_id, game_number) DO NOTHING",
        &[
            &file.file_id,
            &numbers,
            &offsets,
            &sources,
            &ids,
            &holder_ids,
            &holder_files,
            &holder_numbers,
            &holder_offsets,
        ],
    )
    .await?;
    Ok(())
}

/// How a batch's new rows get their ids.
#[derive(Debug)]
pub enum WriteMode {
    /// Get-or-create positions against the unique index on
    /// `normalized_fen`, insert games with `ON CONFLICT DO NOTHING`: correct
    /// whatever the tables hold and whoever else is importing.
    Incremental,
    /// Bulk load, which has the database to itself: the cache is the dedup,
    /// a miss is a new position; positions and games get the next ids
    /// without asking the database and are `COPY`ed straight into their
    /// tables (see [`crate::ingest::bulk`]).
    Bulk {
        /// `positions.id`.
        positions: IdSequence,
        /// `games.id`.
        games: IdSequence,
    },
}

impl WriteMode {
    /// The id sequences of positions and of games, for
    /// [`resolve_positions`] and [`write_games`] (`None` in incremental
    /// mode), borrowed apart so that the two phases can run at once.
    pub fn sequences(&mut self) -> (Option<&mut IdSequence>, Option<&mut IdSequence>) {
        match self {
            WriteMode::Incremental => (None, None),
            WriteMode::Bulk { positions, games } => (Some(positions), Some(games)),
        }
    }
}

/// Hands out a table's ids in bulk mode. The table's identity sequence is
/// advanced past every id handed out before the batch commits, so ids are
/// never reused even across crashes (a rolled-back batch leaves a gap,
/// nothing worse).
#[derive(Debug)]
pub struct IdSequence {
    /// The next id to hand out.
    pub next: i64,
    /// The identity sequence of the table's `id`.
    pub sequence: String,
}

impl IdSequence {
    /// The next id.
    fn take(&mut self) -> i64 {
        let id = self.next;
        self.next += 1;
        id
    }

    /// Moves the sequence past every id taken so far.
    async fn advance(&self, tx: &Transaction<'_>) -> Result<(), WriteError> {
        tx.execute(
            "SELECT setval($1::text::regclass, $2)",
            &[&self.sequence, &(self.next - 1)],
        )
        .await?;
        Ok(())
    }
}

/// A batch's positions after the cache: ids known so far, and the rest.
struct Unresolved<'a> {
    position_ids: KeyMap<i64>,
    misses: Vec<(PositionRow<'a>, PositionKey)>,
}

/// Looks every distinct position of the new games (each with its position
/// keys) up in the cache.
fn collect_positions<'a>(
    new_games: impl Iterator<Item = (&'a GameRecord, &'a [PositionKey])>,
    cache: &mut PositionCache,
    stats: &mut BatchStats,
) -> Unresolved<'a> {
    let mut position_ids = KeyMap::default();
    let mut misses = Vec::new();
    let mut missing = KeyMap::default();
    for (game, keys) in new_games {
        for ((fen, hash), &key) in game.positions.iter().zip(keys) {
            if position_ids.contains_key(&key) || missing.contains_key(&key) {
                stats.positions_reused += 1;
                stats.positions_in_memory += 1;
                continue;
            }
            if let Some(id) = cache.get(key) {
                stats.positions_reused += 1;
                stats.positions_in_memory += 1;
                position_ids.insert(key, id);
                continue;
            }
            missing.insert(key, ());
            if let Some(parts) = split_normalized(fen) {
                let row = PositionRow {
                    fen,
                    hash,
                    placement: parts.piece_placement,
                    color: parts.active_color,
                    castling: parts.castling,
                    en_passant: parts.en_passant,
                };
                misses.push((row, key));
            }
        }
    }
    Unresolved {
        position_ids,
        misses,
    }
}

/// Incremental mode: staged `INSERT … ON CONFLICT DO NOTHING`, sorted so
/// concurrent importers take row locks in the same order. New rows' ids
/// come back from RETURNING; only the conflicting ones (rows that existed,
/// or a concurrent importer just committed) need a second index probe.
async fn get_or_create_positions<'a>(
    tx: &Transaction<'_>,
    misses: &[(PositionRow<'a>, PositionKey)],
    position_ids: &mut KeyMap<i64>,
    pending: &mut PendingIds,
    stats: &mut BatchStats,
) -> Result<(), WriteError> {
    if misses.is_empty() {
        return Ok(());
    }
    let staged: Vec<&PositionRow<'a>> = misses.iter().map(|(row, _)| row).collect();
    copy_rows(
        tx,
        "COPY stage_positions FROM STDIN (FORMAT binary)",
        &staged,
    )
    .await?;
    let inserted = tx
        .query(
            "INSERT INTO positions (normalized_fen, fen_hash, piece_placement, active_color, castling, en_passant)
             SELECT normalized_fen, fen_hash, piece_placement, active_color, castling, en_passant
             FROM stage_positions ORDER BY normalized_fen
             ON CONFLICT (normalized_fen) DO NOTHING
             RETURNING id, normalized_fen",
            &[],
        )
        .await?;
    stats.positions_new = inserted.len() as u64;
    stats.positions_reused += misses.len() as u64 - stats.positions_new;
    let by_text: HashMap<&str, PositionKey, RandomState> =
        misses.iter().map(|(row, key)| (row.fen, *key)).collect();
    learn_ids(inserted, &by_text, position_ids, pending);
    let existing: Vec<&str> = misses
        .iter()
        .filter(|(_, key)| !position_ids.contains_key(key))
        .map(|(row, _)| row.fen)
        .collect();
    if !existing.is_empty() {
        let rows = tx
            .query(
                "SELECT id, normalized_fen FROM positions WHERE normalized_fen = ANY($1)",
                &[&existing],
            )
            .await?;
        learn_ids(rows, &by_text, position_ids, pending);
    }
    Ok(())
}

/// Bulk mode: every miss is a new position with the next id, `COPY`ed
/// straight into the (index-less) table.
async fn insert_new_positions<'a>(
    tx: &Transaction<'_>,
    misses: &[(PositionRow<'a>, PositionKey)],
    ids: &mut IdSequence,
    position_ids: &mut KeyMap<i64>,
    pending: &mut PendingIds,
) -> Result<(), WriteError> {
    if misses.is_empty() {
        return Ok(());
    }
    let mut rows = Vec::with_capacity(misses.len());
    for (row, key) in misses {
        let id = ids.take();
        position_ids.insert(*key, id);
        pending.push((*key, id));
        rows.push(NewPosition { id, row });
    }
    ids.advance(tx).await?;
    copy_rows(
        tx,
        "COPY positions (id, normalized_fen, fen_hash, piece_placement, active_color, castling, en_passant) FROM STDIN (FORMAT binary)",
        &rows,
    )
    .await?;
    Ok(())
}

/// Incremental mode: staged, then `INSERT … ON CONFLICT DO NOTHING
/// RETURNING`, so a game another importer committed meanwhile is "already
/// present" rather than an error.
async fn insert_games_if_absent(
    tx: &Transaction<'_>,
    game_rows: &[GameRow<'_>],
    inserted: &mut HashMap<(String, String), i64>,
) -> Result<(), WriteError> {
    copy_rows(tx, "COPY stage_games FROM STDIN (FORMAT binary)", game_rows).await?;
    let rows = tx
        .query(
            "INSERT INTO games (source, external_id, event_id, site, round, white_player_id, black_player_id, white_elo, black_elo, white_rating_diff, black_rating_diff, time_control, time_initial_s, time_increment_s, variant, termination, result, eco, opening, started_at, initial_position_id, final_position_id, ply_count, moves, start_fen, tags, import_file_id, game_number, byte_offset)
             SELECT source, external_id, event_id, site, round,
                 white_player_id, black_player_id, white_elo, black_elo,
                 white_rating_diff, black_rating_diff, time_control, time_initial_s,
                 time_increment_s, variant::game_variant, termination::game_termination,
                 result, eco, opening, started_at,
                 initial_position_id, final_position_id, ply_count, moves, start_fen, tags,
                 import_file_id, game_number, byte_offset
             FROM stage_games ORDER BY source, external_id
             ON CONFLICT (source, external_id) DO NOTHING
             RETURNING id, source, external_id",
            &[],
        )
        .await?;
    for row in rows {
        inserted.insert((row.get(1), row.get(2)), row.get(0));
    }
    Ok(())
}

/// Bulk mode: nobody else writes, and the batch's games were checked
/// against the table and each other, so they get ids here and go straight
/// in (the unique key would still refuse a duplicate).
async fn copy_new_games(
    tx: &Transaction<'_>,
    game_rows: &mut [GameRow<'_>],
    ids: &mut IdSequence,
    inserted: &mut HashMap<(String, String), i64>,
) -> Result<(), WriteError> {
    for row in game_rows.iter_mut() {
        let id = ids.take();
        row.id = Some(id);
        inserted.insert((row.source.to_owned(), row.external_id.clone()), id);
    }
    ids.advance(tx).await?;
    copy_rows(
        tx,
        "COPY games (id, source, external_id, event_id, site, round, white_player_id, black_player_id, white_elo, black_elo, white_rating_diff, black_rating_diff, time_control, time_initial_s, time_increment_s, variant, termination, result, eco, opening, started_at, initial_position_id, final_position_id, ply_count, moves, start_fen, tags, import_file_id, game_number, byte_offset) FROM STDIN (FORMAT binary)",
        game_rows,
    )
    .await?;
    Ok(())
}

/// Records `(id, normalized_fen)` rows as resolved positions of the batch.
fn learn_ids(
    rows: Vec<tokio_postgres::Row>,
    by_text: &HashMap<&str, PositionKey, RandomState>,
    position_ids: &mut KeyMap<i64>,
    pending: &mut PendingIds,
) {
    for row in rows {
        let id: i64 = row.get(0);
        let fen: &str = row.get(1);
        if let Some(&key) = by_text.get(fen) {
            position_ids.insert(key, id);
            pending.push((key, id));
        }
    }
}

/// A ply number or count as the `integer` columns hold it.
fn ply_number(n: usize) -> i32 {
    i32::try_from(n).expect(
        "an imported game has at most max_plies plies (at most 1,000,000, checked in config), \
         far below 2^31",
    )
}

/// The id resolved for a game's `i`-th position.
fn id_at(keys: &[PositionKey], ids: &KeyMap<i64>, i: usize) -> Option<i64> {
    keys.get(i).and_then(|key| ids.get(key)).copied()
}

fn unresolved(game: &GameRecord) -> Error {
    Error::Internal(format!(
        "{}: a position of this game has no id after get-or-create",
        game.pos
    ))
}

/// Lichess usernames are case-insensitive; other sources keep names as written.
pub fn username_key(source: &str, name: &str) -> String {
    if source == "lichess" {
        name.to_lowercase()
    } else {
        name.to_owned()
    }
}

fn event_key<'a>(game: &'a GameRecord, name: &'a str) -> &'a str {
    game.meta
        .event_ref
        .as_ref()
        .map_or(name, |e| e.external_id.as_str())
}

async fn get_or_create_players<'a>(
    tx: &Transaction<'_>,
    games: &[NewGame<'a>],
) -> Result<HashMap<(&'a str, String), i64>, WriteError> {
    let mut rows: HashMap<(&str, String), PlayerRow<'a>> = HashMap::new();
    for new in games {
        for side in [&new.game.meta.white, &new.game.meta.black] {
            let Some(name) = side.name.as_deref() else {
                continue;
            };
            let key = username_key(new.source, name);
            rows.entry((new.source, key.clone()))
                .or_insert_with(|| PlayerRow {
                    source: new.source,
                    username: name,
                    key,
                    title: side.title.as_deref(),
                    is_bot: side.is_bot(),
                });
        }
    }
    let rows: Vec<PlayerRow<'a>> = rows.into_values().collect();
    staged_get_or_create(
        tx,
        &rows,
        StagedSql {
            copy: "COPY stage_players FROM STDIN (FORMAT binary)",
            insert: "INSERT INTO players (source, username, username_key, title, is_bot)
                 SELECT source, username, username_key, title, is_bot
                 FROM stage_players ORDER BY source, username_key
                 ON CONFLICT (source, username_key) DO UPDATE
                     SET title = COALESCE(EXCLUDED.title, players.title),
                         is_bot = players.is_bot OR EXCLUDED.is_bot,
                         updated_at = now()
                     WHERE (EXCLUDED.title IS NOT NULL AND players.title IS DISTINCT FROM EXCLUDED.title)
                        OR (EXCLUDED.is_bot AND NOT players.is_bot)",
            select: "SELECT p.id, p.source, p.username_key FROM stage_players s
                 JOIN players p ON p.source = s.source AND p.username_key = s.username_key",
        },
        games,
    )
    .await
}

/// The statements of a staged get-or-create.
struct StagedSql {
    /// `COPY` into the staging table.
    copy: &'static str,
    /// Inserts the staged rows that are new (`ON CONFLICT`).
    insert: &'static str,
    /// Reads back `(id, source, key)` for every staged row.
    select: &'static str,
}

/// Players and events: the rows are `COPY`ed into their staging table,
/// the new ones inserted, and every id read back, keyed by `(source, key)`.
async fn staged_get_or_create<'a, const N: usize, R: CopyRow<N> + Sync>(
    tx: &Transaction<'_>,
    rows: &[R],
    sql: StagedSql,
    games: &[NewGame<'a>],
) -> Result<HashMap<(&'a str, String), i64>, WriteError> {
    let mut ids = HashMap::with_capacity(rows.len());
    if rows.is_empty() {
        return Ok(ids);
    }
    copy_rows(tx, sql.copy, rows).await?;
    tx.execute(sql.insert, &[]).await?;
    let found = tx.query(sql.select, &[]).await?;
    collect_ids(&mut ids, found, games);
    Ok(ids)
}

/// Maps `(id, source, key)` rows back to `(source, key) → id`, with the
/// source borrowed from the batch so the map outlives the rows.
fn collect_ids<'a>(
    ids: &mut HashMap<(&'a str, String), i64>,
    rows: Vec<tokio_postgres::Row>,
    games: &[NewGame<'a>],
) {
    let sources: HashMap<&str, &'a str> = games.iter().map(|g| (g.source, g.source)).collect();
    for row in rows {
        let source: &str = row.get(1);
        if let Some(&source) = sources.get(source) {
            ids.insert((source, row.get::<_, String>(2)), row.get(0));
        }
    }
}

async fn get_or_create_events<'a>(
    tx: &Transaction<'_>,
    games: &[NewGame<'a>],
) -> Result<HashMap<(&'a str, String), i64>, WriteError> {
    let mut rows: HashMap<(&str, &str), EventRow<'a>> = HashMap::new();
    for new in games {
        let Some(name) = new.game.meta.event.as_deref() else {
            continue;
        };
        let key = event_key(new.game, name);
        let event_ref = new.game.meta.event_ref.as_ref();
        rows.entry((new.source, key)).or_insert_with(|| EventRow {
            source: new.source,
            key,
            external_id: event_ref.map(|e| e.external_id.as_str()),
            name,
            kind: event_ref.map(|e| e.kind),
        });
    }
    let rows: Vec<EventRow<'a>> = rows.into_values().collect();
    staged_get_or_create(
        tx,
        &rows,
        StagedSql {
            copy: "COPY stage_events FROM STDIN (FORMAT binary)",
            insert: "INSERT INTO events (source, event_key, external_id, name, kind)
                 SELECT source, event_key, external_id, name, kind
                 FROM stage_events ORDER BY source, event_key
                 ON CONFLICT (source, event_key) DO NOTHING",
            select: "SELECT e.id, e.source, e.event_key FROM stage_events s
                 JOIN events e ON e.source = s.source AND e.event_key = s.event_key",
        },
        games,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_past_bigint_is_an_error_naming_the_number_not_a_clamp() {
        let max = i64::MAX as u64;
        assert_eq!(bigint_bounds(7, max), Ok((7, i64::MAX)));
        assert_eq!(bigint_bounds(7, max + 1), Err("a byte offset"));
        assert_eq!(bigint_bounds(max + 1, 9), Err("a game number"));
        let batch = Batch {
            input: 0,
            outcomes: Vec::new(),
            end_offset: u64::MAX,
            games_through: 3,
        };
        let file = FileContext {
            file_id: 12,
            source: "pgn".to_owned(),
            expected_bytes_done: 0,
        };
        let error = batch_bounds(&batch, &file).expect_err("past bigint");
        assert_eq!(
            error.to_string(),
            format!(
                "internal error: input 12: batch ending at game #3 (byte {}) has a byte offset \
                 past PostgreSQL's bigint",
                u64::MAX
            )
        );
    }
}

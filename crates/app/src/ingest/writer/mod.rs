//! The database side of an import: each batch of games in two phases, two
//! transactions, on two connections (so that PostgreSQL works on the next
//! batch's positions while it ingests this batch's games and moves).
//!
//! [`resolve_positions`], one transaction:
//! 1. games already in the database (by `(source, external_id)`) or
//!    repeated in the batch are set aside;
//! 2. positions of the new games are resolved, cache first. In incremental
//!    mode the misses are looked up, and the absent ones `COPY`ed (binary,
//!    sorted, so concurrent importers take them in the same order) with ids
//!    from the sequence; if a concurrent importer committed one meanwhile,
//!    they are staged and inserted with `ON CONFLICT DO NOTHING` instead;
//!    in bulk mode a miss is a new position, given the next id and
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
//!    Games present under a smaller positions cap (`--positions-max-ply`,
//!    `--games-only`) get their cap and final position updated instead,
//!    if no other importer did it first (the backfill);
//! 4. moves of the inserted games (and of the backfilled games' plies past
//!    their old cap) and the rejected games are `COPY`ed;
//! 5. the input's checkpoint (games read, bytes consumed, counts) is updated.
//!
//! One file per idea: `positions` is phase one, `games` phase two with
//! the checkpoint, `existing` the existing-games check both phases run,
//! `players_events` the staged get-or-create of the rows games refer to,
//! `layout` phase two's steps that differ between a single node
//! (incremental or bulk) and shards (`sharded`), `copy` the binary COPY
//! encoder and `rows` the row of each table.
//!
//! The database never holds games a checkpoint does not cover, or the
//! reverse. Positions may be committed without their games (a crash
//! between the phases): they are shared rows that a rerun reuses.

use tokio_postgres::{Client, Transaction};

use crate::chess::reject::RejectKind;

mod copy;
mod existing;
mod games;
mod layout;
mod players_events;
mod positions;
mod rows;
mod sharded;
mod single;

pub(crate) use self::copy::{CopyRow, TableRow, WriteError, copy_rows};
/// Where a conflict's identity is held ([`Conflict::holder`]), named for
/// the report's tests, which build conflicts.
#[cfg(test)]
pub(crate) use self::existing::Holder;
pub(crate) use self::existing::legacy_holders;
use self::rows::{EventRow, GameRow, MoveRow, PlayerRow, PositionRow};
pub use self::{
    existing::Conflict,
    games::{WrittenBatch, write_games},
    positions::{PendingIds, ResolvedBatch, merge_pending_hash_entries, resolve_positions},
    single::prepare_game,
};
use crate::{
    chess::replay::GameRecord,
    error::Error,
    ingest::pipeline::{Batch, Outcome},
    store::shards::Shards,
};

/// Temporary staging tables, created once per connection: one per
/// declared row staged ([`rows`]; moves on a sharded layout), then the
/// explorer's counter rows.
fn staging_ddl() -> String {
    [
        PositionRow::staging_table("stage_positions"),
        PlayerRow::staging_table("stage_players"),
        EventRow::staging_table("stage_events"),
        GameRow::staging_table("stage_games"),
        MoveRow::staging_table("stage_moves"),
        STAGING_DDL.to_owned(),
    ]
    .concat()
}

/// The staging table not written from a row's declaration: the explorer's
/// counter rows (declared by the explorer).
const STAGING_DDL: &str = "
CREATE TEMP TABLE IF NOT EXISTS stage_explorer (
    position_id bigint, variant game_variant, speed smallint, rating_group smallint,
    month integer, move smallint, games integer, white integer, draws integer, black integer,
    mover_rated_games integer, mover_rating_sum bigint, last_played timestamptz,
    listed_game_ids bigint[], listed_game_started timestamptz[], listed_game_ratings bigint[],
    anchor_game_id bigint
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
    /// Whether the database keeps the explorer counters, as the run read
    /// it once under the import lock (which `db explorer enable|disable`
    /// take exclusively, so it holds for the whole run).
    pub explorer: bool,
    /// The run's positions cap (`--positions-max-ply`, `--games-only`):
    /// rows for plies `0..=cap` of each game only.
    pub positions_max_ply: Option<u32>,
    /// The database's layout: `Some` on the coordinator of shards, where
    /// rows go through foreign tables (see [`crate::store::shards`]).
    pub shards: Option<Shards>,
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
    /// Games left out by the import's scope.
    pub filtered: u64,
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
    /// Games present under a smaller positions cap that got their rows
    /// past it (counted in `present` too): the backfill.
    pub backfilled: u64,
    /// The rejected games by kind of reason (adding up to `rejected` for
    /// the batches written: see [`RejectCounts`]).
    pub rejects: RejectCounts,
}

/// Rejected games counted by [`RejectKind`], for the machine-readable
/// summary of a run (`import --summary-json`). A fixed array, so that the
/// stats stay `Copy`. They are counted as the batches write their rejects,
/// whereas a run's `rejected` is what the database committed for each
/// input: the two differ only when a lost connection left a batch's commit
/// in doubt (its rejects then counted here once too few or too many).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RejectCounts([u64; RejectKind::ALL.len()]);

impl RejectCounts {
    /// Counts one reject of `kind`.
    pub fn count(&mut self, kind: RejectKind) {
        self.0[kind as usize] += 1;
    }

    /// Adds another's counts.
    pub fn add(&mut self, other: RejectCounts) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine += theirs;
        }
    }

    /// The kinds counted at least once, with their counts, in
    /// [`RejectKind::ALL`]'s order.
    pub fn counted(&self) -> impl Iterator<Item = (RejectKind, u64)> + '_ {
        RejectKind::ALL
            .into_iter()
            .zip(self.0)
            .filter(|&(_, n)| n > 0)
    }
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
        self.filtered += other.filtered;
        self.positions_new += other.positions_new;
        self.positions_reused += other.positions_reused;
        self.positions_in_memory += other.positions_in_memory;
        self.moves += other.moves;
        self.conflicts += other.conflicts;
        self.backfilled += other.backfilled;
        self.rejects.add(other.rejects);
    }

    /// The counts added since `earlier`, a copy of these taken before
    /// (each count only grows).
    #[must_use]
    pub fn since(&self, earlier: &BatchStats) -> BatchStats {
        let mut rejects = self.rejects;
        for (mine, before) in rejects.0.iter_mut().zip(earlier.rejects.0) {
            *mine = mine.saturating_sub(before);
        }
        BatchStats {
            read: self.read.saturating_sub(earlier.read),
            imported: self.imported.saturating_sub(earlier.imported),
            present: self.present.saturating_sub(earlier.present),
            rejected: self.rejected.saturating_sub(earlier.rejected),
            filtered: self.filtered.saturating_sub(earlier.filtered),
            positions_new: self.positions_new.saturating_sub(earlier.positions_new),
            positions_reused: self
                .positions_reused
                .saturating_sub(earlier.positions_reused),
            positions_in_memory: (self.positions_in_memory)
                .saturating_sub(earlier.positions_in_memory),
            moves: self.moves.saturating_sub(earlier.moves),
            conflicts: self.conflicts.saturating_sub(earlier.conflicts),
            backfilled: self.backfilled.saturating_sub(earlier.backfilled),
            rejects,
        }
    }
}

/// Prepares a fresh data connection: its staging tables, and the memory
/// its inserts into positions' `fen_hash` index may use. (Its commits are
/// synchronous, as every pgnload session's: see [`crate::store::db::connect`].)
pub async fn prepare_connection(client: &Client) -> Result<(), Error> {
    client
        .batch_execute(&staging_ddl())
        .await
        .map_err(crate::store::db::db_err("creating staging tables"))?;
    client
        .batch_execute(SESSION_SETTINGS)
        .await
        .map_err(crate::store::db::db_err(
            "setting the session's index memory",
        ))
}

/// The import sessions' settings for positions' `fen_hash` GIN index
/// (migration 0017): new entries wait in its pending list until it holds
/// 64 MiB, and a merge sorts up to 64 MiB of them at once (`work_mem`), so
/// each merge reads each index page once for many entries. Smaller, as the
/// server's defaults (4 MiB each), a database 14x the server's memory read
/// 0.72 index pages per new position in these merges (`scripts/bench_growth.sh`,
/// issue 31). Lookups by `fen_hash` scan the pending list until the import
/// ends and merges it.
const SESSION_SETTINGS: &str = "SET gin_pending_list_limit = '64MB'; SET work_mem = '64MB'";

/// A batch's position in its input as PostgreSQL `bigint`s: the game
/// count through the batch and the byte offset just after it. Every game
/// number, byte offset, length and count written for the batch is at most
/// one of these two, so once they fit, [`to_i64`] cannot fail. They cannot
/// be over `i64::MAX` from any real input (2^63 bytes), but an impossible
/// value is an error naming the batch, never a clamped number in the table.
fn batch_bounds(batch: &Batch, file: &FileContext) -> Result<(i64, i64), Error> {
    bigint_bounds(batch.games_through, batch.end_offset).map_err(|value| {
        Error::bug(format!(
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
        write_err(what, error)
    }
}

/// The error a write step `what` failed with: the database's, or a row
/// that could not be encoded (a bug: the rows are built to fit).
pub(crate) fn write_err(what: String, error: impl Into<WriteError>) -> Error {
    match error.into() {
        WriteError::Database(e) => crate::store::db::db_err(what)(e),
        WriteError::Encode(e) => Error::bug_from(format!("{what}: encoding a row for COPY"), e),
    }
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

/// `count` new ids of the sequence `sequence`, drawn with `nextval`, so
/// that no concurrent writer is ever given one of them (incremental
/// positions, sharded games' claims). The sequence is named in the
/// statement, a constant the planner resolves once: read from a subquery
/// (`pg_get_serial_sequence`), each id cost 13 times as much.
pub(super) async fn draw_ids(
    tx: &Transaction<'_>,
    sequence: &str,
    count: usize,
) -> Result<Vec<i64>, tokio_postgres::Error> {
    let count = i64::try_from(count).expect("a batch holds far fewer than 2^63 rows");
    let rows = tx
        .query(
            &format!("SELECT nextval('{sequence}') FROM generate_series(1, $1::bigint)"),
            &[&count],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
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
            filtered: 0,
        };
        let file = FileContext {
            file_id: 12,
            source: "pgn".to_owned(),
            expected_bytes_done: 0,
            explorer: false,
            positions_max_ply: None,
            shards: None,
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

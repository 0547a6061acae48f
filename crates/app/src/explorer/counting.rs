//! What the import keeps of the explorer counters with each batch, in
//! the batch's transaction, and what corrects them: a game's removal, a
//! bulk load's merge of duplicate positions, the recount of queued
//! positions.
//!
//! A delete and a queued position's count group the view
//! `explorer_game_moves` ([`sql`]), restricted to the games or positions
//! they are about. An import batch (either mode) instead aggregates its
//! games in memory with the categories of [`crate::chess::category`]
//! ([`add_batch`], [`Counts`]), stages one row per counter by `COPY` and
//! adds them with one `INSERT`: grouping the view over the moves just
//! written cost half the import's time again (measured, 20k games), this
//! costs a fraction. The two definitions cannot drift unseen: `verify
//! --explorer` recounts through the view, and the tests run it after
//! incremental imports.
//!
//! A position's rows are complete (they count every game that reached
//! it) unless it is queued in `explorer_pending`; a position without rows,
//! or queued, is answered by grouping its games from the view
//! (`sql/0012_explorer_shared_positions.sql` says why). On a single node,
//! a batch of either mode ([`Counting::Shared`]) adds its games to
//! positions that have rows, gives first rows to those it created and
//! reached twice or more and to those an earlier batch of its run created
//! and reached once (the run's [`super::memory`] of that game), and queues the
//! others that two games may have reached; [`count_pending`] counts the
//! queue with the import lock held exclusively. Only the import that
//! created a position gives it first rows (a recount holds the lock
//! exclusively), so they need no claim: a game of another import there
//! queues the position, which then stays queued whatever rows it has.
//! Rows reaching zero games stay, so that no batch sees a position's rows
//! disappear between looking and adding. First rows go by `COPY` straight
//! into the table (nothing to add to), the others by an upsert
//! (`write_rows`).
//!
//! A bulk load holds its rows in memory across batches ([`super::held`]) and
//! writes them when it holds too many or its run ends, its games recorded
//! in `explorer_deferred` meanwhile; the load's finish queues the
//! positions of any games whose held rows a run lost ([`queue_deferred`]).
//!
//! Each row also lists its most recent listable games
//! (`sql/0025_explorer_recent_lists.sql`), kept wherever its counts are:
//! merged by a batch's upsert, recounted
//! with the counts, recomputed by a removal of a game it lists, folded
//! with the rows of a key on shards.
//!
//! On a sharded layout ([`crate::store::shards`]) a batch adds rows of
//! counts instead of updating one row per key (no `ON CONFLICT DO UPDATE`
//! through a foreign table), one per key and shard, anchored on a game of
//! that shard so that they commit with the games they count; readers sum
//! a key's rows.

use foldhash::{HashMap, HashMapExt, HashSet};
use rayon::prelude::*;
use tokio_postgres::{
    Client, GenericClient, Transaction,
    types::{ToSql, Type},
};

use super::{
    CounterKey, Counts, GameCounts, ListedArrays,
    held::{BatchRows, Held, HeldRows},
    memory::{Learnt, LoneVisit, RunMemory},
    sql,
};
use crate::{
    chess::replay::GameRecord,
    error::Error,
    ingest::{
        dedup::{KeyMap, PositionKey},
        writer::{CopyRow, WriteError, copy_rows, write_err},
    },
    store::shards::Shards,
};

/// Which positions a batch writes counter rows for.
#[derive(Debug)]
pub enum Counting<'a> {
    /// Every position, as rows added per shard (a sharded layout).
    Sharded(Shards),
    /// A batch (either mode) or `game put` on a single node: positions
    /// with rows get the batch's games; so do the positions it created and
    /// reached twice or more, and the lone ones of `memory` it reaches
    /// again (their first rows); the others are queued in
    /// `explorer_pending` if two games may have reached them (see
    /// `plan_positions`). A position it created and reached once needs
    /// neither a row nor a look: any other game there comes from an import
    /// that did not create it, which queues it, or from this run, which
    /// finds it in `memory`.
    Shared {
        /// Positions created by the batch.
        fresh: &'a Fresh,
        /// What the run knows of its positions' counters (`None`: `game
        /// put`, which has no run).
        memory: Option<&'a mut RunMemory>,
        /// A bulk load: the rows are held in `memory` ([`held`](super::held)) rather
        /// than written, until it holds too many.
        hold: bool,
    },
}

/// Positions a batch created (in its first phase), which no row can count
/// yet unless queued positions were counted or the counters filled since:
/// `epoch` is `explorer_rows_epoch` read before they were created, and
/// [`add_batch`] trusts `ids` only if it still reads the same.
#[derive(Debug, Clone, Default)]
pub struct Fresh {
    /// `explorer_rows_epoch` before the positions were created.
    pub epoch: i64,
    /// The positions created.
    pub ids: HashSet<i64>,
}

impl Fresh {
    /// Reads `explorer_rows_epoch`: call before creating the positions. A
    /// sequence never advanced shows `last_value` 1 as after its first
    /// `nextval`, so that state reads as 0.
    pub async fn epoch(client: &impl GenericClient) -> Result<i64, Error> {
        Ok(client
            .query_one(
                "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM explorer_rows_epoch",
                &[],
            )
            .await
            .map_err(crate::store::db::db_err("reading explorer_rows_epoch"))?
            .get(0))
    }
}

/// Advances `explorer_rows_epoch`: call before giving existing positions
/// rows (see [`Fresh`]).
pub(super) async fn advance_epoch(client: &impl GenericClient) -> Result<(), Error> {
    client
        .execute("SELECT nextval('explorer_rows_epoch')", &[])
        .await
        .map_err(crate::store::db::db_err("advancing explorer_rows_epoch"))?;
    Ok(())
}

/// A position a batch reached: how many of its games did, and the first
/// of them's visit (what a position one game reached is remembered with).
#[derive(Debug, Clone, Copy)]
struct Reached {
    games: usize,
    first: LoneVisit,
}

/// A game's last visit to a position it counts in: the position, the move
/// played there, whether White played it (so whose rating the row sums),
/// and the game (an index into the batch's games).
#[derive(Debug, Clone, Copy)]
struct Visit {
    position: i64,
    code: i16,
    white_moves: bool,
    game: usize,
}

/// Whether White moves first in `game`: its first position's side to move
/// (the second field of its FEN). Sides alternate in every variant, so
/// White moves at ply `i` (0-based) when this is `i % 2 == 0`, as the view
/// `explorer_game_moves` computes it from `games.start_fen`
/// (`sql/0021_explorer_mover_rating.sql`).
fn white_starts(game: &GameRecord) -> bool {
    game.positions.fen(0).split(' ').nth(1) != Some("b")
}

/// The visits game `index` (`games.id` `id`) counts in: its last visit to
/// each position it has a moves row at (`keys` covers positions 0..=N of a
/// game capped at N plies, and the view counts the rows stored), with
/// `ids` resolving the keys.
fn last_visits(
    index: usize,
    id: i64,
    game: &GameRecord,
    keys: &[PositionKey],
    ids: &KeyMap<i64>,
) -> Result<Vec<Visit>, Error> {
    let stored = keys.len().saturating_sub(1);
    let white_first = white_starts(game);
    let mut visits = game
        .plies
        .iter()
        .enumerate()
        .take(stored)
        .map(|(ply, move_played)| {
            let position = keys.get(ply).and_then(|key| ids.get(key)).ok_or_else(|| {
                Error::bug(format!(
                    "{}: position {ply} of game {id} has no id when counting it in the explorer",
                    game.pos
                ))
            })?;
            Ok((
                *position,
                std::cmp::Reverse(ply),
                move_played.code.cast_signed(),
            ))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    // Each position's last visit first, then the others dropped.
    visits.sort_unstable_by_key(|&(position, ply, _)| (position, ply));
    visits.dedup_by_key(|visit| visit.0);
    Ok(visits
        .into_iter()
        .map(|(position, std::cmp::Reverse(ply), code)| Visit {
            position,
            code,
            white_moves: (ply % 2 == 0) == white_first,
            game: index,
        })
        .collect())
}

/// Counts the games of a batch just inserted with their moves, in the
/// caller's transaction: each `(games.id, game, position keys)`, with `ids`
/// resolving the keys, and `counting` saying which positions get rows. The
/// same counts as the view's, grouped by key ([`sql`]), built in memory
/// (`rows_by_key`), staged and added to `explorer_moves`. Returns what
/// the run's memory is to learn once the transaction commits.
pub async fn add_batch<'a>(
    tx: &Transaction<'_>,
    games: impl Iterator<Item = (i64, &'a GameRecord, &'a [PositionKey])>,
    ids: &KeyMap<i64>,
    counting: Counting<'_>,
) -> Result<Learnt, Error> {
    let games: Vec<(i64, &GameRecord, &[PositionKey])> = games.collect();
    let shards = match &counting {
        Counting::Sharded(shards) => Some(*shards),
        Counting::Shared { .. } => None,
    };
    let counted = counted_games(tx, &games, shards).await?;
    let mut visits: Vec<Visit> = games
        .par_iter()
        .enumerate()
        .map(|(index, &(id, game, keys))| last_visits(index, id, game, keys, ids))
        .collect::<Result<Vec<Vec<Visit>>, Error>>()?
        .concat();
    let mut plan = Plan::default();
    let mut held = None;
    if let Counting::Shared {
        fresh,
        mut memory,
        hold,
    } = counting
    {
        plan = plan_visits(tx, &mut visits, &counted, fresh, memory.as_deref_mut()).await?;
        held = memory.filter(|_| hold).map(|memory| &*memory);
    }
    let rows = rows_by_key(&visits, &counted, &plan.taken);
    let mut learnt = plan.learnt;
    if let Some(memory) = held {
        if memory.holds_more() {
            let ids: Vec<i64> = counted.iter().map(|&(id, _, _)| id).collect();
            learnt.held = Held::Add(BatchRows {
                rows: rows
                    .into_iter()
                    .map(|((key, _), counts)| (key, counts))
                    .collect(),
                first: plan.first.into_iter().collect(),
                deferred: defer_games(tx, ids).await?,
            });
            return Ok(learnt);
        }
        // Too many held: written now with the batch's, in its transaction.
        write_held(tx, memory.held_rows()).await?;
        learnt.held = Held::Written;
    }
    let staged: Vec<StagedRow<'_>> = rows
        .iter()
        .map(|((key, anchor), counts)| StagedRow::new(key, counts, shards.map(|_| *anchor)))
        .collect();
    write_rows(tx, staged, &plan.first)
        .await
        .map_err(|e| write_err("adding the batch to the explorer counters".into(), e))?;
    Ok(learnt)
}

/// Each game's id, anchor and categories. On shards a counter row counts
/// the games of one shard ([`anchors`]); anchor 0 on a single node, where
/// one row per key is updated.
async fn counted_games(
    tx: &Transaction<'_>,
    games: &[(i64, &GameRecord, &[PositionKey])],
    shards: Option<Shards>,
) -> Result<Vec<(i64, i64, GameCounts)>, Error> {
    let anchors = match shards {
        None => HashMap::new(),
        Some(shards) => anchors(tx, games, shards).await?,
    };
    games
        .iter()
        .map(|&(id, game, _)| {
            let anchor = match shards {
                None => 0,
                Some(_) => anchors.get(&id).copied().ok_or_else(|| {
                    Error::bug(format!(
                        "{}: game {id} was not placed on a shard with its batch",
                        game.pos
                    ))
                })?,
            };
            Ok((id, anchor, GameCounts::of(game)))
        })
        .collect()
}

/// [`Counting::Shared`]: plans the positions `visits` reached
/// ([`plan_positions`]) and keeps the visits of those whose rows count the
/// batch; the plan's `learnt` gets the categories of its lone visits'
/// games (of `counted`).
async fn plan_visits(
    tx: &Transaction<'_>,
    visits: &mut Vec<Visit>,
    counted: &[(i64, i64, GameCounts)],
    fresh: &Fresh,
    memory: Option<&mut RunMemory>,
) -> Result<Plan, Error> {
    visits.par_sort_unstable_by_key(|visit| visit.position);
    let reached: Vec<(i64, Reached)> = visits
        .chunk_by(|a, b| a.position == b.position)
        .map(|visits| {
            let first = visits[0];
            let reached = Reached {
                games: visits.len(),
                first: LoneVisit {
                    position: first.position,
                    game: counted[first.game].0,
                    code: first.code,
                    white_moves: first.white_moves,
                },
            };
            (first.position, reached)
        })
        .collect();
    let mut plan = plan_positions(tx, &reached, fresh, memory).await?;
    visits.retain(|visit| plan.counted.contains(&visit.position));
    let categories: HashMap<i64, GameCounts> = counted
        .iter()
        .map(|&(id, _, counts)| (id, counts))
        .collect();
    let mut games: Vec<i64> = plan.learnt.visits.iter().map(|visit| visit.game).collect();
    games.sort_unstable();
    games.dedup();
    plan.learnt.games = games
        .into_iter()
        .filter_map(|id| Some((id, *categories.get(&id)?)))
        .collect();
    Ok(plan)
}

/// The counter rows of `visits` (of the games `counted`) and of the run's
/// remembered visits `taken`, one per key and anchor, in that order:
/// visits sorted by key, then folded ([`Counts::add`]), under a third of
/// the time of a hash map entry per counter (0.6 s against 2.2 for 50,000
/// games).
fn rows_by_key(
    visits: &[Visit],
    counted: &[(i64, i64, GameCounts)],
    taken: &[(LoneVisit, GameCounts)],
) -> Vec<((CounterKey, i64), Counts)> {
    let mut keyed: Vec<((CounterKey, i64), i64, bool, &GameCounts)> = visits
        .iter()
        .map(|visit| {
            let (id, anchor, counts) = &counted[visit.game];
            (
                (counts.key(visit.position, visit.code), *anchor),
                *id,
                visit.white_moves,
                counts,
            )
        })
        .chain(taken.iter().map(|(visit, counts)| {
            (
                (counts.key(visit.position, visit.code), 0),
                visit.game,
                visit.white_moves,
                counts,
            )
        }))
        .collect();
    keyed.par_sort_unstable_by(|a, b| a.0.cmp(&b.0));
    keyed
        .chunk_by(|a, b| a.0 == b.0)
        .map(|visits| {
            let mut counts = Counts::default();
            for &(_, id, white_moves, game) in visits {
                counts.add(id, game, white_moves);
            }
            (visits[0].0, counts)
        })
        .collect()
}

/// Writes counter rows in key order (`rows`: a sharded layout's if they
/// have anchors). On a single node, the rows of `first` positions go by
/// `COPY` straight into `explorer_moves`: those positions have no row
/// yet, and nobody else gives them any (module doc), and new positions'
/// keys come last in the key's index, where PostgreSQL appends without
/// searching. The others are staged by `COPY` and added with one
/// `INSERT … SELECT … ON CONFLICT` (one of every counter row: [`sql::ADD_STAGED`]);
/// on a sharded layout all are staged and added as rows
/// of their own.
async fn write_rows(
    tx: &Transaction<'_>,
    rows: Vec<StagedRow<'_>>,
    first: &HashSet<i64>,
) -> Result<(), WriteError> {
    let sharded = rows.first().is_some_and(|row| row.anchor.is_some());
    let (new, added): (Vec<StagedRow<'_>>, Vec<StagedRow<'_>>) = rows
        .into_iter()
        .partition(|row| !sharded && first.contains(&row.key.0));
    if !new.is_empty() {
        copy_rows::<UNANCHORED, _>(tx, sql::COPY_NEW_ROWS, &new).await?;
    }
    if added.is_empty() {
        return Ok(());
    }
    // Rows staged earlier in the transaction (the held ones) were added.
    tx.execute("DELETE FROM stage_explorer", &[]).await?;
    copy_rows::<{ UNANCHORED + 1 }, _>(tx, sql::COPY_STAGE, &added).await?;
    let sql = if sharded {
        sql::INSERT_STAGED_SHARDED
    } else {
        sql::ADD_STAGED
    };
    tx.execute(sql, &[]).await?;
    Ok(())
}

/// Adds `rows` (one per key) to a single node's `explorer_moves` in a
/// transaction of their own, as a batch adds the rows of positions that
/// have rows: staged by `COPY`, then one upsert ([`sql::ADD_STAGED`]).
/// The import runs `write_rows` in its batch's transaction instead; this
/// is that SQL merge on its own, which `tests/explorer.rs` checks against
/// [`Counts::merge`] on random rows.
pub async fn add_rows(client: &mut Client, rows: &[(CounterKey, Counts)]) -> Result<(), Error> {
    let err = crate::store::db::db_err;
    crate::ingest::writer::prepare_connection(client).await?;
    let tx = client
        .transaction()
        .await
        .map_err(err("starting to add explorer counter rows"))?;
    let staged = rows
        .iter()
        .map(|(key, counts)| StagedRow::new(key, counts, None))
        .collect();
    write_rows(&tx, staged, &HashSet::default())
        .await
        .map_err(|e| write_err("adding explorer counter rows".into(), e))?;
    tx.commit()
        .await
        .map_err(err("committing explorer counter rows"))
}

/// Records the games `ids` of a batch whose rows are held, as runs of
/// consecutive ids in `explorer_deferred` (a bulk load's ids come in
/// runs); returns the records' ids.
async fn defer_games(tx: &Transaction<'_>, mut ids: Vec<i64>) -> Result<Vec<i64>, Error> {
    ids.sort_unstable();
    let runs: Vec<&[i64]> = ids.chunk_by(|a, b| a + 1 == *b).collect();
    let firsts: Vec<i64> = runs.iter().map(|run| run[0]).collect();
    let lasts: Vec<i64> = runs.iter().map(|run| run[run.len() - 1]).collect();
    Ok(tx
        .query(
            "INSERT INTO explorer_deferred (first_game_id, last_game_id)
             SELECT * FROM unnest($1::bigint[], $2::bigint[]) RETURNING id",
            &[&firsts, &lasts],
        )
        .await
        .map_err(crate::store::db::db_err(
            "recording the games whose explorer counters are held",
        ))?
        .iter()
        .map(|row| row.get(0))
        .collect())
}

/// Writes `held` into `explorer_moves` and deletes the records of its
/// games from `explorer_deferred`, in the caller's transaction.
async fn write_held(tx: &Transaction<'_>, held: &HeldRows) -> Result<(), Error> {
    let rows = held.added();
    let staged: Vec<StagedRow<'_>> = rows
        .iter()
        .map(|(key, counts)| StagedRow::new(key, counts, None))
        .collect();
    let first: HashSet<i64> = held.first.iter().copied().collect();
    write_rows(tx, staged, &first)
        .await
        .map_err(|e| write_err("writing the held explorer counters".into(), e))?;
    tx.execute(
        "DELETE FROM explorer_deferred WHERE id = ANY($1)",
        &[&held.deferred],
    )
    .await
    .map_err(crate::store::db::db_err(
        "deleting the records of games now counted",
    ))?;
    Ok(())
}

/// Writes the rows a bulk load holds ([`held`](super::held)) in a transaction of their
/// own: at the end of its run. The caller forgets them once it committed
/// ([`RunMemory::held_written`]).
pub async fn flush(client: &mut Client, held: &HeldRows) -> Result<(), Error> {
    let err = crate::store::db::db_err;
    let tx = client
        .transaction()
        .await
        .map_err(err("starting to write the held explorer counters"))?;
    write_held(&tx, held).await?;
    tx.commit()
        .await
        .map_err(err("committing the held explorer counters"))
}

/// [`flush`]es `held` unless an earlier call did (`None`): at a bulk
/// load's finish, which may be attempted again after a failure. Written,
/// they become `None`; so do they if the connection was lost, unwritten (a
/// server crash may have undone batches they count): the records of their
/// games make the finish queue their positions ([`queue_deferred`]). Any
/// other failure leaves them for the next attempt: a server that answered
/// did not commit them.
pub async fn flush_once(client: &mut Client, held: &mut Option<HeldRows>) -> Result<(), Error> {
    let Some(rows) = held.as_ref() else {
        return Ok(());
    };
    match flush(client, rows).await {
        Ok(()) => {}
        Err(_) if client.is_closed() => {}
        Err(error) => return Err(error),
    }
    *held = None;
    Ok(())
}

/// Queues for [`count_pending`] the positions of the games whose rows
/// were held by a run that ended before writing them (a crash, a lost
/// connection), and forgets their records, in one transaction: at the
/// finish of a bulk load, once `moves` has its indexes again. Returns how
/// many games were recorded.
pub async fn queue_deferred(client: &mut Client) -> Result<u64, Error> {
    let err = crate::store::db::db_err;
    let tx = client
        .transaction()
        .await
        .map_err(err("starting to queue the positions of uncounted games"))?;
    tx.execute(
        "INSERT INTO explorer_pending (position_id)
         SELECT DISTINCT m.position_id
         FROM explorer_deferred d JOIN moves m
           ON m.game_id BETWEEN d.first_game_id AND d.last_game_id
         ORDER BY 1
         ON CONFLICT DO NOTHING",
        &[],
    )
    .await
    .map_err(err("queueing the positions of uncounted games"))?;
    let games: i64 = tx
        .query_one(
            "WITH d AS (DELETE FROM explorer_deferred RETURNING *)
             SELECT coalesce(sum(last_game_id - first_game_id + 1), 0)::bigint FROM d",
            &[],
        )
        .await
        .map_err(err("emptying explorer_deferred"))?
        .get(0);
    tx.commit()
        .await
        .map_err(err("committing the queued positions of uncounted games"))?;
    u64::try_from(games).map_err(|_| {
        Error::inconsistent(format!(
            "explorer_deferred recorded {games} games (its check keeps every run non-empty)"
        ))
    })
}

/// A counter row as [`write_rows`] copies it: the columns of
/// [`counter_columns!`], its key ([`sql::KEY`]), then its counts
/// ([`sql::COUNTS`]), then the anchor on a sharded layout. (Staged by
/// `COPY`, then added by one `INSERT … SELECT`, for both layouts: as cheap
/// as sending each column as an array to `unnest` was, 8.2 s against 8.1
/// for 50,000 games, with one row format instead of two.)
struct StagedRow<'a> {
    key: &'a CounterKey,
    /// The key's variant as its label: the binary form of the enum.
    variant: &'static str,
    counts: &'a Counts,
    listed: ListedArrays,
    anchor: Option<i64>,
}

impl<'a> StagedRow<'a> {
    fn new(key: &'a CounterKey, counts: &'a Counts, anchor: Option<i64>) -> Self {
        Self {
            key,
            variant: key.1.as_db_label(),
            counts,
            listed: counts.listed.arrays(),
            anchor,
        }
    }
}

/// The `COPY` row of [`counter_columns!`]: its key and counts
/// ([`UNANCHORED`] columns, a single node's row), and with its anchor
/// (a sharded layout's), types and values in the declaration's order.
macro_rules! staged_row {
    (
        key [$($key:ident : $key_ty:ident = ($($key_value:tt)+)),+ $(,)?]
        counts [$($count:ident : $count_ty:ident = ($($count_value:tt)+)),+ $(,)?]
        anchor [$anchor:ident : $anchor_ty:ident = ($($anchor_value:tt)+) $(,)?]
    ) => {
        /// The columns of a counter row without its anchor.
        const UNANCHORED: usize = [$(stringify!($key),)+ $(stringify!($count)),+].len();

        impl CopyRow<UNANCHORED> for StagedRow<'_> {
            const TYPES: [Type; UNANCHORED] = [$(Type::$key_ty,)+ $(Type::$count_ty),+];
            fn fields(&self) -> [&(dyn ToSql + Sync); UNANCHORED] {
                [$(&self.$($key_value)+,)+ $(&self.$($count_value)+),+]
            }
        }

        impl CopyRow<{ UNANCHORED + 1 }> for StagedRow<'_> {
            const TYPES: [Type; UNANCHORED + 1] =
                [$(Type::$key_ty,)+ $(Type::$count_ty,)+ Type::$anchor_ty];
            fn fields(&self) -> [&(dyn ToSql + Sync); UNANCHORED + 1] {
                [$(&self.$($key_value)+,)+ $(&self.$($count_value)+,)+ &self.$($anchor_value)+]
            }
        }
    };
}

counter_columns!(staged_row!());

/// Which positions of a batch get its games, on a single node.
#[derive(Debug, Default)]
struct Plan {
    /// The positions whose rows count the batch's games: those with rows,
    /// and those getting their first rows here.
    counted: HashSet<i64>,
    /// Of `counted`, those getting their first rows here.
    first: HashSet<i64>,
    /// The lone visits of the run to positions getting their first rows,
    /// taken out of the memory: counted with the batch's games.
    taken: Vec<(LoneVisit, GameCounts)>,
    /// What the memory is to learn once the batch commits (the games of
    /// its lone visits left for the caller to fill).
    learnt: Learnt,
}

/// [`Counting::Shared`]: of the positions the batch reached, which get
/// their first rows (the fresh ones it reached twice or more, and the lone
/// ones of `memory` it reaches again: nobody else can give them rows, see
/// [`memory`](super::memory)), which have rows to add to (known to `memory`, else looked
/// up), and which are remembered as lone (the fresh ones it reached once).
/// It queues the others (without rows: two games may have reached them)
/// for [`count_pending`]. Fresh positions are trusted only if
/// `explorer_rows_epoch` still reads `fresh.epoch`, and `memory` only if
/// it reads what its entries were made under.
async fn plan_positions(
    tx: &Transaction<'_>,
    reached: &[(i64, Reached)],
    fresh: &Fresh,
    mut memory: Option<&mut RunMemory>,
) -> Result<Plan, Error> {
    let epoch = Fresh::epoch(tx).await?;
    let trusted = epoch == fresh.epoch;
    if let Some(memory) = memory.as_deref_mut() {
        memory.keep_if_epoch(epoch);
    }
    let mut plan = Plan {
        learnt: Learnt {
            epoch,
            ..Learnt::default()
        },
        ..Plan::default()
    };
    let mut unknown = Vec::new();
    for &(position, reached) in reached {
        if trusted && fresh.ids.contains(&position) {
            if reached.games >= 2 {
                plan.counted.insert(position);
                plan.first.insert(position);
            } else if memory.is_some() {
                plan.learnt.visits.push(reached.first);
            }
        } else if memory
            .as_deref()
            .is_some_and(|memory| memory.has_rows(position))
        {
            plan.counted.insert(position);
        } else if let Some(taken) = memory
            .as_deref_mut()
            .and_then(|memory| memory.take(position))
        {
            plan.counted.insert(position);
            plan.first.insert(position);
            plan.taken.push(taken);
        } else {
            unknown.push(position);
        }
    }
    plan.counted.extend(with_rows_or_queued(tx, unknown).await?);
    if memory.is_some() {
        plan.learnt.with_rows = plan.counted.iter().copied().collect();
    }
    Ok(plan)
}

/// Of `unknown` (positions unknown to the batch and the run), those that have
/// rows; the others are queued in `explorer_pending` (two games may have
/// reached them).
async fn with_rows_or_queued(
    tx: &Transaction<'_>,
    mut unknown: Vec<i64>,
) -> Result<HashSet<i64>, Error> {
    let err = crate::store::db::db_err;
    unknown.sort_unstable();
    let with_rows: HashSet<i64> = tx
        .query(
            "SELECT p FROM unnest($1::bigint[]) p
             WHERE EXISTS (SELECT 1 FROM explorer_moves e WHERE e.position_id = p)",
            &[&unknown],
        )
        .await
        .map_err(err("looking up which positions have explorer counters"))?
        .iter()
        .map(|row| row.get(0))
        .collect();
    // Sorted: concurrent batches wait for each other's entries in one order.
    let queued: Vec<i64> = unknown
        .into_iter()
        .filter(|position| !with_rows.contains(position))
        .collect();
    if !queued.is_empty() {
        tx.execute(
            "INSERT INTO explorer_pending (position_id) SELECT unnest($1::bigint[])
             ON CONFLICT DO NOTHING",
            &[&queued],
        )
        .await
        .map_err(err("queueing positions for the explorer counters"))?;
    }
    Ok(with_rows)
}

/// How many queued positions [`count_pending`] counts per transaction.
const PENDING_CHUNK: i64 = 1_000;

/// Counts the positions queued in `explorer_pending` (single node) from
/// games + moves, a chunk per transaction: each one's rows are replaced
/// by a recount, kept if two games or more reached it, and it leaves the
/// queue. Call with the import lock held exclusively, so that no import
/// adds games while a position is recounted. Returns the positions counted.
pub async fn count_pending(client: &mut Client) -> Result<u64, Error> {
    let err = crate::store::db::db_err;
    let mut counted = 0u64;
    advance_epoch(&*client).await?;
    loop {
        let tx = client
            .transaction()
            .await
            .map_err(err("starting to count queued positions"))?;
        let chunk: Vec<i64> = tx
            .query(
                "SELECT position_id FROM explorer_pending ORDER BY position_id LIMIT $1",
                &[&PENDING_CHUNK],
            )
            .await
            .map_err(err("reading explorer_pending"))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        if chunk.is_empty() {
            return Ok(counted);
        }
        // A chunk's positions reach a few counter rows, moves rows and
        // games each, by their indexes; a small database's estimates would
        // hash-join the whole games table per chunk instead, and a table
        // not analyzed yet (explorer_moves just after a bulk load wrote its
        // rows) is estimated to match a third of its rows: the delete of
        // 115 positions' rows scanned all 554,000 of them (45 ms against 2).
        tx.batch_execute(
            "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off;
             SET LOCAL enable_seqscan = off",
        )
        .await
        .map_err(err("setting up the count of queued positions"))?;
        for (what, sql) in [
            (
                "removing the rows of queued positions",
                "DELETE FROM explorer_moves WHERE position_id = ANY($1)",
            ),
            ("counting queued positions", sql::INSERT_SHARED_OF_POSITIONS),
            (
                "emptying explorer_pending",
                "DELETE FROM explorer_pending WHERE position_id = ANY($1)",
            ),
        ] {
            tx.execute(sql, &[&chunk]).await.map_err(err(what))?;
        }
        tx.commit()
            .await
            .map_err(err("committing counted positions"))?;
        counted += chunk.len() as u64;
    }
}

/// [`count_pending`] at the end of an import run on a single node, if no
/// other import runs (the import lock, held shared by the run on
/// `control`, can be taken exclusively without waiting); else the queue
/// waits for the next run alone or `pgnload db explorer compact`. Returns
/// the positions counted, `None` if others were importing.
pub async fn count_pending_if_alone(control: &mut Client) -> Result<Option<u64>, Error> {
    if !super::admin::try_lock_imports(control).await? {
        return Ok(None);
    }
    let counted = count_pending(control).await;
    control
        .execute(
            "SELECT pg_advisory_unlock($1)",
            &[&crate::ingest::bulk::LOCK],
        )
        .await
        .map_err(crate::store::db::db_err(
            "releasing the exclusive import lock",
        ))?;
    counted.map(Some)
}

/// Each game's anchor on a sharded layout: the first game of the batch on
/// its shard, whose id puts the counter rows of that shard's games there.
async fn anchors(
    tx: &Transaction<'_>,
    games: &[(i64, &GameRecord, &[PositionKey])],
    shards: Shards,
) -> Result<HashMap<i64, i64>, Error> {
    let ids: Vec<i64> = games.iter().map(|(id, _, _)| *id).collect();
    let rows = tx
        .query(
            &sql::shards_of_games(&shards.shard_of("games", "id")),
            &[&ids],
        )
        .await
        .map_err(crate::store::db::db_err(
            "placing the batch's games on their shards",
        ))?;
    let mut first_on_shard: HashMap<i32, i64> = HashMap::new();
    Ok(rows
        .iter()
        .map(|row| {
            let id: i64 = row.get(0);
            (id, *first_on_shard.entry(row.get(1)).or_insert(id))
        })
        .collect())
}

/// Queues the positions a bulk load merged duplicates into, for
/// [`count_pending`], and drops the rows of both: the table
/// `pgnload_position_remap` of `(old_id, keep_id)`, whose games' rows
/// already point at `keep_id`. Each
/// duplicate was counted apart (with rows or without), so only a recount
/// of the merged position is whole. Called in the merge's transaction.
pub async fn merge_positions(tx: &Transaction<'_>) -> Result<(), tokio_postgres::Error> {
    tx.execute(sql::QUEUE_MERGED, &[]).await?;
    tx.execute(sql::DELETE_MERGED, &[]).await?;
    Ok(())
}

/// Takes the games `ids` (still in `games` and `moves`) out of the
/// counters, before they are deleted in the same transaction: their rows
/// are decremented (a row left at zero games stays, with no
/// `last_played` nor listed games: see the module doc), and the
/// `last_played` of rows that one of them was the latest of, and the
/// listed games of rows that listed one of them, recomputed from the other games
/// of the position. Positions without rows have nothing to take out, but
/// are queued: an import running may remember one of these games as the
/// only one there ([`memory`](super::memory)) and give the position rows that count it.
/// Games a bulk load has not counted yet ([`held`](super::held)) are taken out of no
/// row.
pub async fn remove_games(tx: &Transaction<'_>, ids: &[i64]) -> Result<(), Error> {
    let err = |what: &'static str| crate::store::db::db_err(what);
    tx.execute(
        "INSERT INTO explorer_pending (position_id)
         SELECT DISTINCT m.position_id FROM moves m
         WHERE m.game_id = ANY($1)
           AND NOT EXISTS (SELECT 1 FROM explorer_moves e WHERE e.position_id = m.position_id)
         ORDER BY 1
         ON CONFLICT DO NOTHING",
        &[&ids],
    )
    .await
    .map_err(err(
        "queueing the positions without rows of the games to remove",
    ))?;
    // Games of a bulk load whose rows it holds or lost are in no row.
    let counted: Vec<i64> = tx
        .query(
            "SELECT id FROM unnest($1::bigint[]) AS id
             WHERE NOT EXISTS (SELECT 1 FROM explorer_deferred d
                               WHERE id BETWEEN d.first_game_id AND d.last_game_id)",
            &[&ids],
        )
        .await
        .map_err(err("looking up which games to remove the counters count"))?
        .iter()
        .map(|row| row.get(0))
        .collect();
    tx.batch_execute("DROP TABLE IF EXISTS explorer_delta")
        .await
        .map_err(err("dropping a leftover explorer_delta"))?;
    tx.execute(sql::CREATE_DELTA, &[&counted])
        .await
        .map_err(err("counting the games to remove from the explorer"))?;
    tx.execute(sql::DECREMENT, &[])
        .await
        .map_err(err("decrementing explorer rows"))?;
    tx.execute(sql::RECOMPUTE_AFTER_REMOVAL, &[&ids])
        .await
        .map_err(err("recomputing explorer last_played and listed games"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::replayed;

    /// The keys of a game's positions, and ids from `first` up for the
    /// distinct ones in order of first visit.
    fn keys_and_ids(record: &GameRecord, first: i64) -> (Vec<PositionKey>, KeyMap<i64>) {
        let keys: Vec<PositionKey> = record
            .positions
            .iter()
            .map(|(fen, _)| PositionKey::of(fen))
            .collect();
        let mut ids = KeyMap::default();
        for (id, key) in (first..).zip(&keys) {
            ids.entry(*key).or_insert(id);
        }
        (keys, ids)
    }

    #[test]
    fn a_game_counts_in_each_position_once_with_the_move_of_its_last_visit() {
        // The start position again after four plies: its move is 3. e4.
        let record = replayed("1. Nf3 Nf6 2. Ng1 Ng8 3. e4 *");
        let (keys, mut ids) = keys_and_ids(&record, 100);
        let visits = last_visits(7, 42, &record, &keys, &ids).expect("every key has an id");
        let found: Vec<(i64, i16, bool, usize)> = visits
            .iter()
            .map(|visit| (visit.position, visit.code, visit.white_moves, visit.game))
            .collect();
        let code = |ply: usize| record.plies[ply].code.cast_signed();
        assert_eq!(
            found,
            vec![
                (100, code(4), true, 7),
                (101, code(1), false, 7),
                (102, code(2), true, 7),
                (103, code(3), false, 7)
            ]
        );
        // A game capped at two plies counts in its first two positions.
        let capped = last_visits(0, 42, &record, &keys[..3], &ids).expect("ids");
        assert_eq!(capped.len(), 2);
        // A position without an id is a bug, said with the game's id.
        ids.remove(&keys[2]);
        let error = last_visits(0, 42, &record, &keys, &ids).expect_err("a key has no id");
        assert!(error.to_string().contains("game 42"), "{error}");
        // From a FEN with Black to move, Black plays the first move.
        let record = replayed(
            "[FEN \"rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1\"]\n\n1... e5 2. Nf3 *",
        );
        let (keys, ids) = keys_and_ids(&record, 200);
        let visits = last_visits(0, 43, &record, &keys, &ids).expect("every key has an id");
        let movers: Vec<(i64, bool)> = visits
            .iter()
            .map(|visit| (visit.position, visit.white_moves))
            .collect();
        assert_eq!(movers, vec![(200, false), (201, true)]);
    }
}

//! The opening explorer's counters (`explorer_moves`): opt-in per
//! database ([`enable`], [`disable`], the flag in `explorer_state`), then
//! kept by the import in the same transactions as the games they count,
//! corrected when games are deleted, and recounted by `pgnload verify
//! --explorer`.
//!
//! What a game contributes is defined by the view `explorer_game_moves`
//! of `sql/0004_explorer.sql` (its categories and the move of its last
//! visit to each position); a delete and the recount group that view with
//! [`grouped`], restricted to the games they are about. An import batch
//! (either mode) instead aggregates its games in memory with the
//! categories of [`crate::chess::category`] ([`add_batch`]), stages one
//! row per counter by `COPY` and adds them with one `INSERT`: grouping the
//! view over the moves just written cost half the import's time again
//! (measured, 20k games), this costs a fraction. The two definitions
//! cannot drift unseen: `verify --explorer` recounts through the view, and
//! the tests run it after incremental imports.
//!
//! A position's rows are complete (they count every game that reached
//! it) unless it is queued in `explorer_pending`; a position without rows,
//! or queued, is answered by grouping its games from the view
//! (`sql/0012_explorer_shared_positions.sql` says why). On a single node,
//! a batch of either mode ([`Counting::Shared`]) adds its games to
//! positions that have rows, gives first rows to those it created and
//! reached twice or more and to those an earlier batch of its run created
//! and reached once (the run's [`memory`] of that game), and queues the
//! others that two games may have reached; [`count_pending`] counts the
//! queue with the import lock held exclusively. Only the import that
//! created a position gives it first rows (a recount holds the lock
//! exclusively), so they need no claim: a game of another import there
//! queues the position, which then stays queued whatever rows it has.
//! Rows reaching zero games stay, so that no batch sees a position's rows
//! disappear between looking and adding. First rows go by `COPY` straight
//! into the table (nothing to add to), the others by an upsert
//! ([`write_rows`]).
//!
//! A bulk load holds its rows in memory across batches ([`held`]) and
//! writes them when it holds too many or its run ends, its games recorded
//! in `explorer_deferred` meanwhile; the load's finish queues the
//! positions of any games whose held rows a run lost ([`queue_deferred`]).
//!
//! Each row also lists its best-rated games (`sql/0013_explorer_top_games.sql`),
//! kept wherever its counts are: merged by a batch's upsert, recounted
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

pub mod held;
pub mod memory;

use tokio_postgres::{
    Client, GenericClient, Transaction,
    types::{ToSql, Type},
};

use crate::{
    chess::{
        category::{Month, RatingGroup, Speed},
        model::GameVariant,
        replay::GameRecord,
    },
    counts::{COUNTS, KEY, TOP_GAMES, grouped},
    error::Error,
    ingest::{
        dedup::{KeyMap, PositionKey},
        writer::{CopyRow, WriteError, copy_rows, write_err},
    },
    store::shards::Shards,
};

use self::{
    held::{BatchRows, Held, HeldRows},
    memory::{Learnt, LoneVisit, RunMemory},
};

/// [`grouped`] restricted to the positions that two games or more
/// reached: what a single node keeps rows for (the others are counted
/// from the view when asked).
fn shared_positions_only(filter: &str) -> String {
    format!(
        "SELECT {KEY}, {COUNTS}
         FROM (SELECT *, sum(games) OVER (PARTITION BY position_id) AS position_games
               FROM ({grouped}) g) s
         WHERE position_games >= 2",
        grouped = grouped(filter)
    )
}

/// Inserts `rows` (a select of [`KEY`] and [`COUNTS`], as [`grouped`]
/// gives) into `explorer_moves`, a single node's.
fn insert_sql(rows: &str) -> String {
    format!("INSERT INTO explorer_moves ({KEY}, {COUNTS}) {rows}")
}

/// [`grouped`] per shard of the games counted, with the lowest of their
/// ids as each row's `anchor_game_id` (a sharded layout's counters live
/// on the shard of the games they count).
fn grouped_by_shard(filter: &str, shards: Shards) -> String {
    grouped(filter)
        .replace(
            "\nFROM explorer_game_moves",
            ", min(game_id) AS anchor_game_id\nFROM explorer_game_moves",
        )
        .replace(
            "GROUP BY position_id",
            &format!(
                "GROUP BY {}, position_id",
                shards.shard_of("games", "game_id")
            ),
        )
}

/// The rows of a sharded layout's counters (`rows`, a `FROM` item with
/// their columns) folded into one per key: [`KEY`], [`COUNTS`] (summed;
/// the best-rated games, the best [`TOP_GAMES`] of the rows' lists
/// together) and, if `anchored`, the lowest of their `anchor_game_id`s.
fn folded(rows: &str, anchored: bool) -> String {
    let anchor = if anchored { ", s.anchor_game_id" } else { "" };
    let min_anchor = if anchored {
        ", min(anchor_game_id) AS anchor_game_id"
    } else {
        ""
    };
    format!(
        "SELECT {KEY}, s.games, s.white, s.draws, s.black, s.rated_games, s.rating_sum,
                s.last_played, t.top_game_ratings, t.top_game_ids{anchor}
         FROM (SELECT {KEY}, sum(games)::integer AS games, sum(white)::integer AS white,
                      sum(draws)::integer AS draws, sum(black)::integer AS black,
                      sum(rated_games)::integer AS rated_games,
                      sum(rating_sum)::bigint AS rating_sum,
                      max(last_played) AS last_played{min_anchor}
               FROM {rows} GROUP BY {KEY}) s
         LEFT JOIN (SELECT {KEY},
                           (array_agg(r ORDER BY r DESC, g))[1:{TOP_GAMES}] AS top_game_ratings,
                           (array_agg(g ORDER BY r DESC, g))[1:{TOP_GAMES}] AS top_game_ids
                    FROM {rows} f, unnest(f.top_game_ratings, f.top_game_ids) AS t(r, g)
                    GROUP BY {KEY}) t USING ({KEY})"
    )
}

/// Adds the counts of `rows` (a select of [`KEY`] and [`COUNTS`]) to
/// `explorer_moves`, the best-rated games of both merged ([`merged_top`]).
fn add_sql(rows: &str) -> String {
    format!(
        "{insert}
         ON CONFLICT ({KEY}) DO UPDATE SET
             games = explorer_moves.games + excluded.games,
             white = explorer_moves.white + excluded.white,
             draws = explorer_moves.draws + excluded.draws,
             black = explorer_moves.black + excluded.black,
             rated_games = explorer_moves.rated_games + excluded.rated_games,
             rating_sum = explorer_moves.rating_sum + excluded.rating_sum,
             last_played = greatest(explorer_moves.last_played, excluded.last_played),
             top_game_ratings = {ratings},
             top_game_ids = {ids}",
        insert = insert_sql(&format!("SELECT * FROM ({rows}) d")),
        ratings = merged_top("top_game_ratings", "r"),
        ids = merged_top("top_game_ids", "g"),
    )
}

/// The upsert's value of `column` (`top_game_ratings` or `top_game_ids`,
/// `pick` naming it in the subquery: `r` or `g`) when a row's list of
/// best-rated games (`explorer_moves`) meets a batch's (`excluded`): the
/// best [`TOP_GAMES`] of both. Both lists are sorted, so when one's worst
/// game is better than the other's best (mostly, for lists of one game or
/// two), they are concatenated; otherwise sorted by a subquery, written
/// inline (`sql/0015_explorer_inline_top_games.sql` says why). The
/// subquery in every update was a quarter of the upsert's time (50,000
/// games).
fn merged_top(column: &str, pick: &str) -> String {
    let (old, new) = ("explorer_moves", "excluded");
    // `list`'s game at `at` as (ratings, -id): a larger one is better.
    let game = |list: &str, at: &str| {
        format!("({list}.top_game_ratings[{at}], -{list}.top_game_ids[{at}])")
    };
    let last = |list: &str| format!("cardinality({list}.top_game_ids)");
    format!(
        "CASE WHEN {new}.top_game_ids IS NULL THEN {old}.{column}
              WHEN {old}.top_game_ids IS NULL THEN {new}.{column}
              WHEN {new_best} < {old_worst} THEN ({old}.{column} || {new}.{column})[1:{TOP_GAMES}]
              WHEN {old_best} < {new_worst} THEN ({new}.{column} || {old}.{column})[1:{TOP_GAMES}]
              ELSE (SELECT array_agg({pick} ORDER BY r DESC, g)
                    FROM (SELECT r, g
                          FROM unnest({old}.top_game_ratings || {new}.top_game_ratings,
                                      {old}.top_game_ids || {new}.top_game_ids) AS u(r, g)
                          ORDER BY r DESC, g LIMIT {TOP_GAMES}) t) END",
        new_best = game(new, "1"),
        old_worst = game(old, &last(old)),
        old_best = game(old, "1"),
        new_worst = game(new, &last(new)),
    )
}

/// The key of a counter row: position, variant, speed, rating group,
/// month, move (as [`KEY`]). (The variant as the enum, not its label: a
/// key is hashed and compared for every counter of a batch and every row
/// held.)
type CounterKey = (i64, GameVariant, i16, i16, i32, i16);

/// What one game adds to each counter row that counts it, but the
/// position and the move: its categories, result and ratings (and what a
/// remembered lone visit keeps of its game, see [`memory`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GameCounts {
    variant: GameVariant,
    speed: i16,
    rating_group: i16,
    month: i32,
    /// 1, 0, -1 for a white win, a draw, a black win.
    score: Option<i16>,
    /// Both ratings added, if both are known: what orders the best-rated
    /// games, and twice the average the row sums.
    ratings: Option<i64>,
    started_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl GameCounts {
    /// The categories of `game`, as [`crate::chess::category`] and the
    /// view `explorer_game_moves` compute them.
    fn of(game: &GameRecord) -> Self {
        let meta = &game.meta;
        Self {
            variant: game.variant,
            speed: Speed::from_clock(meta.clock).code(),
            rating_group: RatingGroup::of_game(meta.white.elo, meta.black.elo)
                .map_or(-1, RatingGroup::lower_bound),
            month: meta
                .started_at
                .and_then(Month::of_time)
                .map_or(-1, Month::code),
            score: game.result.and_then(|r| r.score()),
            ratings: match (meta.white.elo, meta.black.elo) {
                (Some(white), Some(black)) => Some(i64::from(white) + i64::from(black)),
                _ => None,
            },
            started_at: meta.started_at,
        }
    }

    /// The key of the row counting this game's `code` move at `position`.
    fn key(&self, position: i64, code: i16) -> CounterKey {
        (
            position,
            self.variant,
            self.speed,
            self.rating_group,
            self.month,
            code,
        )
    }
}

/// The values of a counter row being built.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    games: i32,
    white: i32,
    draws: i32,
    black: i32,
    rated_games: i32,
    rating_sum: i64,
    last_played: Option<chrono::DateTime<chrono::Utc>>,
    top: TopGames,
}

impl Counts {
    /// Counts the game `id`, of `game`'s categories, in this row.
    fn add(&mut self, id: i64, game: &GameCounts) {
        self.games += 1;
        match game.score {
            Some(1) => self.white += 1,
            Some(0) => self.draws += 1,
            Some(-1) => self.black += 1,
            _ => {}
        }
        if let Some(ratings) = game.ratings {
            self.rated_games += 1;
            // The average of both, rounded down as the view's.
            self.rating_sum += ratings.div_euclid(2);
            self.top.offer(ratings, id);
        }
        self.last_played = self.last_played.max(game.started_at);
    }

    /// Adds `other`'s games, as if each had been [`Self::add`]ed here.
    fn merge(&mut self, other: &Counts) {
        self.games += other.games;
        self.white += other.white;
        self.draws += other.draws;
        self.black += other.black;
        self.rated_games += other.rated_games;
        self.rating_sum += other.rating_sum;
        self.last_played = self.last_played.max(other.last_played);
        for &(ratings, id) in other.top.kept() {
            self.top.offer(ratings, id);
        }
    }
}

/// The best-rated games of a counter row being built, as
/// `sql/0013_explorer_top_games.sql` keeps them:
/// at most [`TOP_GAMES`] `(white + black rating, game id)`, best first
/// (higher ratings first, then lower ids).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct TopGames {
    /// The first `len` are kept, in order.
    games: [(i64, i64); TOP_GAMES as usize],
    len: usize,
}

impl TopGames {
    /// Keeps the game if it is among the best so far.
    fn offer(&mut self, ratings: i64, id: i64) {
        let order = |(ratings, id): (i64, i64)| (std::cmp::Reverse(ratings), id);
        let at = self
            .kept()
            .partition_point(|&kept| order(kept) < order((ratings, id)));
        if at == self.games.len() {
            return;
        }
        let len = (self.len + 1).min(self.games.len());
        self.games.copy_within(at..len - 1, at + 1);
        self.games[at] = (ratings, id);
        self.len = len;
    }

    /// The games kept, best first.
    fn kept(&self) -> &[(i64, i64)] {
        &self.games[..self.len]
    }

    /// The kept games' ratings and ids, as the row's two arrays (`None`
    /// when there are none).
    fn arrays(&self) -> (Option<Vec<i64>>, Option<Vec<i64>>) {
        if self.len == 0 {
            return (None, None);
        }
        (
            Some(self.kept().iter().map(|game| game.0).collect()),
            Some(self.kept().iter().map(|game| game.1).collect()),
        )
    }
}

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
    /// [`plan_positions`]). A position it created and reached once needs
    /// neither a row nor a look: any other game there comes from an import
    /// that did not create it, which queues it, or from this run, which
    /// finds it in `memory`.
    Shared {
        /// Positions created by the batch.
        fresh: &'a Fresh,
        /// What the run knows of its positions' counters (`None`: `game
        /// put`, which has no run).
        memory: Option<&'a mut RunMemory>,
        /// A bulk load: the rows are held in `memory` ([`held`]) rather
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
async fn advance_epoch(client: &impl GenericClient) -> Result<(), Error> {
    client
        .execute("SELECT nextval('explorer_rows_epoch')", &[])
        .await
        .map_err(crate::store::db::db_err("advancing explorer_rows_epoch"))?;
    Ok(())
}

/// A position a batch reached: how many of its games did, and the first
/// of them with the move of its last visit (what a position one game
/// reached is remembered with).
#[derive(Debug, Clone, Copy)]
struct Reached {
    games: usize,
    first: (i64, i16),
}

/// A game's last visit to a position it counts in: the position, the move
/// played there, and the game (an index into the batch's games).
#[derive(Debug, Clone, Copy)]
struct Visit {
    position: i64,
    code: i16,
    game: usize,
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
        .map(|(position, _, code)| Visit {
            position,
            code,
            game: index,
        })
        .collect())
}

/// Counts the games of a batch just inserted with their moves, in the
/// caller's transaction: each `(games.id, game, position keys)`, with `ids`
/// resolving the keys, and `counting` saying which positions get rows. The
/// same counts as [`grouped`] over the view, built in memory (visits sorted
/// by key, then folded: under a third of the time of a hash map entry per
/// counter, 0.6 s against 2.2 for 50,000 games), staged and added to
/// `explorer_moves`. Returns what the run's memory is to learn once the
/// transaction commits.
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
    let anchors = match shards {
        None => HashMap::new(),
        Some(shards) => anchors(tx, &games, shards).await?,
    };
    // Each game's id, anchor and categories. On shards a counter row
    // counts the games of one shard (anchor 0 on a single node, where one
    // row per key is updated).
    let counted = games
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
        .collect::<Result<Vec<(i64, i64, GameCounts)>, Error>>()?;
    let mut visits: Vec<Visit> = games
        .par_iter()
        .enumerate()
        .map(|(index, &(id, game, keys))| last_visits(index, id, game, keys, ids))
        .collect::<Result<Vec<Vec<Visit>>, Error>>()?
        .concat();
    let mut learnt = Learnt::default();
    let mut taken = Vec::new();
    let mut first = HashSet::default();
    let mut held = None;
    if let Counting::Shared {
        fresh,
        mut memory,
        hold,
    } = counting
    {
        visits.par_sort_unstable_by_key(|visit| visit.position);
        let reached: Vec<(i64, Reached)> = visits
            .chunk_by(|a, b| a.position == b.position)
            .map(|visits| {
                let first = visits[0];
                let reached = Reached {
                    games: visits.len(),
                    first: (counted[first.game].0, first.code),
                };
                (first.position, reached)
            })
            .collect();
        let plan = plan_positions(tx, &reached, fresh, memory.as_deref_mut()).await?;
        visits.retain(|visit| plan.counted.contains(&visit.position));
        taken = plan.taken;
        learnt = plan.learnt;
        first = plan.first;
        let categories: HashMap<i64, GameCounts> = counted
            .iter()
            .map(|&(id, _, counts)| (id, counts))
            .collect();
        let mut games: Vec<i64> = learnt.visits.iter().map(|visit| visit.game).collect();
        games.sort_unstable();
        games.dedup();
        learnt.games = games
            .into_iter()
            .filter_map(|id| Some((id, *categories.get(&id)?)))
            .collect();
        held = memory.filter(|_| hold).map(|memory| &*memory);
    }
    // Every visit counted, the run's remembered ones too, by key.
    let mut keyed: Vec<((CounterKey, i64), i64, &GameCounts)> = visits
        .iter()
        .map(|visit| {
            let (id, anchor, counts) = &counted[visit.game];
            (
                (counts.key(visit.position, visit.code), *anchor),
                *id,
                counts,
            )
        })
        .chain(taken.iter().map(|(visit, counts)| {
            (
                (counts.key(visit.position, visit.code), 0),
                visit.game,
                counts,
            )
        }))
        .collect();
    keyed.par_sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let rows: Vec<((CounterKey, i64), Counts)> = keyed
        .chunk_by(|a, b| a.0 == b.0)
        .map(|visits| {
            let mut counts = Counts::default();
            for &(_, id, game) in visits {
                counts.add(id, game);
            }
            (visits[0].0, counts)
        })
        .collect();
    if let Some(memory) = held {
        if memory.holds_more() {
            let ids: Vec<i64> = counted.iter().map(|&(id, _, _)| id).collect();
            learnt.held = Held::Add(BatchRows {
                rows: rows
                    .into_iter()
                    .map(|((key, _), counts)| (key, counts))
                    .collect(),
                first: first.into_iter().collect(),
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
    write_rows(tx, staged, &first)
        .await
        .map_err(|e| write_err("adding the batch to the explorer counters".into(), e))?;
    Ok(learnt)
}

/// Writes counter rows in key order (`rows`: a sharded layout's if they
/// have anchors). On a single node, the rows of `first` positions go by
/// `COPY` straight into `explorer_moves`: those positions have no row
/// yet, and nobody else gives them any (module doc), and new positions'
/// keys come last in the key's index, where PostgreSQL appends without
/// searching. The others are staged by `COPY` and added with one
/// `INSERT … SELECT … ON CONFLICT` (one of every counter row: [`add_sql`]);
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
        copy_rows::<15, _>(tx, &copy_new_rows(), &new).await?;
    }
    if added.is_empty() {
        return Ok(());
    }
    // Rows staged earlier in the transaction (the held ones) were added.
    tx.execute("DELETE FROM stage_explorer", &[]).await?;
    copy_rows::<16, _>(tx, COPY_STAGE, &added).await?;
    // Key order, so that concurrent importers lock rows in the same order.
    let staged = format!("SELECT {KEY}, {COUNTS} FROM stage_explorer ORDER BY {KEY}");
    let sql = if sharded {
        // Rows added, never updated: no row of another importer to wait for.
        format!(
            "INSERT INTO explorer_moves ({KEY}, {COUNTS}, anchor_game_id)
             SELECT {KEY}, {COUNTS}, anchor_game_id FROM stage_explorer"
        )
    } else {
        add_sql(&staged)
    };
    tx.execute(&sql, &[]).await?;
    Ok(())
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

/// Writes the rows a bulk load holds ([`held`]) in a transaction of their
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

/// The `COPY` of [`StagedRow`]s into the connection's `stage_explorer`
/// (`crate::ingest::writer::prepare_connection` creates it), anchors
/// included: `copy_rows::<16, _>`.
const COPY_STAGE: &str = "COPY stage_explorer (position_id, variant, speed, rating_group, month, \
                          move, games, white, draws, black, rated_games, rating_sum, last_played, \
                          top_game_ratings, top_game_ids, anchor_game_id) FROM STDIN (FORMAT binary)";

/// The `COPY` of [`StagedRow`]s without anchors straight into a single
/// node's `explorer_moves`: `copy_rows::<15, _>`.
fn copy_new_rows() -> String {
    format!("COPY explorer_moves ({KEY}, {COUNTS}) FROM STDIN (FORMAT binary)")
}

/// A counter row as [`write_rows`] copies it: [`KEY`], then [`COUNTS`]
/// (15 columns), then the anchor on a sharded layout (16). (Staged by
/// `COPY`, then added by one `INSERT … SELECT`, for both layouts: as cheap
/// as sending each column as an array to `unnest` was, 8.2 s against 8.1
/// for 50,000 games, with one row format instead of two.)
struct StagedRow<'a> {
    key: &'a CounterKey,
    /// The key's variant as its label: the binary form of the enum.
    variant: &'static str,
    counts: &'a Counts,
    top_game_ratings: Option<Vec<i64>>,
    top_game_ids: Option<Vec<i64>>,
    anchor: Option<i64>,
}

impl<'a> StagedRow<'a> {
    fn new(key: &'a CounterKey, counts: &'a Counts, anchor: Option<i64>) -> Self {
        let (top_game_ratings, top_game_ids) = counts.top.arrays();
        Self {
            key,
            variant: key.1.as_db_label(),
            counts,
            top_game_ratings,
            top_game_ids,
            anchor,
        }
    }
}

/// The column types of a counter row as copied, [`KEY`] then [`COUNTS`],
/// then `$anchor` if given.
macro_rules! counter_row_types {
    ($($anchor:expr)?) => {
        [
            Type::INT8,
            // The enum `game_variant`: its binary form is its label's text.
            Type::TEXT,
            Type::INT2,
            Type::INT2,
            Type::INT4,
            Type::INT2,
            Type::INT4,
            Type::INT4,
            Type::INT4,
            Type::INT4,
            Type::INT4,
            Type::INT8,
            Type::TIMESTAMPTZ,
            Type::INT8_ARRAY,
            Type::INT8_ARRAY,
            $($anchor)?
        ]
    };
}

impl CopyRow<15> for StagedRow<'_> {
    const TYPES: [Type; 15] = counter_row_types!();
    fn fields(&self) -> [&(dyn ToSql + Sync); 15] {
        let (key, counts) = (self.key, self.counts);
        [
            &key.0,
            &self.variant,
            &key.2,
            &key.3,
            &key.4,
            &key.5,
            &counts.games,
            &counts.white,
            &counts.draws,
            &counts.black,
            &counts.rated_games,
            &counts.rating_sum,
            &counts.last_played,
            &self.top_game_ratings,
            &self.top_game_ids,
        ]
    }
}

impl CopyRow<16> for StagedRow<'_> {
    const TYPES: [Type; 16] = counter_row_types!(Type::INT8);
    fn fields(&self) -> [&(dyn ToSql + Sync); 16] {
        let counters = <Self as CopyRow<15>>::fields(self);
        std::array::from_fn(|at| counters.get(at).copied().unwrap_or(&self.anchor))
    }
}

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
/// [`memory`]), which have rows to add to (known to `memory`, else looked
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
    let err = crate::store::db::db_err;
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
                let (game, code) = reached.first;
                plan.learnt.visits.push(LoneVisit {
                    position,
                    game,
                    code,
                });
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
    plan.counted.extend(with_rows);
    if memory.is_some() {
        plan.learnt.with_rows = plan.counted.iter().copied().collect();
    }
    Ok(plan)
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
                "DELETE FROM explorer_moves WHERE position_id = ANY($1)".to_owned(),
            ),
            (
                "counting queued positions",
                insert_sql(&shared_positions_only("position_id = ANY($1)")),
            ),
            (
                "emptying explorer_pending",
                "DELETE FROM explorer_pending WHERE position_id = ANY($1)".to_owned(),
            ),
        ] {
            tx.execute(&sql, &[&chunk]).await.map_err(err(what))?;
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
    if !try_lock_imports(control).await? {
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
            &format!(
                "SELECT id, {} FROM unnest($1::bigint[]) AS id",
                shards.shard_of("games", "id")
            ),
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
/// [`count_pending`], and drops the rows of both: `remap` is a table of
/// `(old_id, keep_id)`, whose games' rows already point at `keep_id`. Each
/// duplicate was counted apart (with rows or without), so only a recount
/// of the merged position is whole. Called in the merge's transaction.
pub async fn merge_positions(
    tx: &Transaction<'_>,
    remap: &str,
) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        &format!(
            "INSERT INTO explorer_pending (position_id)
             SELECT DISTINCT keep_id FROM {remap} ORDER BY keep_id
             ON CONFLICT DO NOTHING"
        ),
        &[],
    )
    .await?;
    tx.execute(
        &format!(
            "DELETE FROM explorer_moves e USING {remap} r
             WHERE e.position_id = r.old_id OR e.position_id = r.keep_id"
        ),
        &[],
    )
    .await?;
    Ok(())
}

/// Takes the games `ids` (still in `games` and `moves`) out of the
/// counters, before they are deleted in the same transaction: their rows
/// are decremented (a row left at zero games stays, with no
/// `last_played` nor best games: see the module doc), and the
/// `last_played` of rows that one of them was the latest of, and the best
/// games of rows that listed one of them, recomputed from the other games
/// of the position. Positions without rows have nothing to take out, but
/// are queued: an import running may remember one of these games as the
/// only one there ([`memory`]) and give the position rows that count it.
/// Games a bulk load has not counted yet ([`held`]) are taken out of no
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
    tx.execute(
        &format!(
            "CREATE TEMP TABLE explorer_delta ON COMMIT DROP AS {}",
            grouped("game_id = ANY($1)")
        ),
        &[&counted],
    )
    .await
    .map_err(err("counting the games to remove from the explorer"))?;
    let on_key = "e.position_id = d.position_id AND e.variant = d.variant AND e.speed = d.speed
        AND e.rating_group = d.rating_group AND e.month = d.month AND e.move = d.move";
    tx.execute(
        &format!(
            "UPDATE explorer_moves e SET games = e.games - d.games, white = e.white - d.white,
                 draws = e.draws - d.draws, black = e.black - d.black,
                 rated_games = e.rated_games - d.rated_games, rating_sum = e.rating_sum - d.rating_sum,
                 last_played = CASE WHEN e.games = d.games THEN NULL ELSE e.last_played END,
                 top_game_ratings = CASE WHEN e.games = d.games THEN NULL
                                         ELSE e.top_game_ratings END,
                 top_game_ids = CASE WHEN e.games = d.games THEN NULL ELSE e.top_game_ids END
             FROM explorer_delta d WHERE {on_key}"
        ),
        &[],
    )
    .await
    .map_err(err("decrementing explorer rows"))?;
    let others =
        grouped("position_id IN (SELECT position_id FROM explorer_delta) AND game_id <> ALL($1)");
    tx.execute(
        &format!(
            "UPDATE explorer_moves e SET last_played = o.last_played,
                 top_game_ratings = o.top_game_ratings, top_game_ids = o.top_game_ids
             FROM explorer_delta d, ({others}) o
             WHERE {on_key} AND e.games > 0
               AND (e.last_played IS NOT DISTINCT FROM d.last_played OR e.top_game_ids && $1)
               AND o.position_id = e.position_id AND o.variant = e.variant AND o.speed = e.speed
               AND o.rating_group = e.rating_group AND o.month = e.month AND o.move = e.move"
        ),
        &[&ids],
    )
    .await
    .map_err(err("recomputing explorer last_played and best games"))?;
    Ok(())
}

/// A counter row that differs from its recount: `stored` or `expected` is
/// `None` when the row is missing on that side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The key, as `position_id variant speed rating_group month move`.
    pub key: String,
    /// The stored counts (`games white draws black rated_games rating_sum
    /// last_played top_game_ratings top_game_ids`).
    pub stored: Option<String>,
    /// What the recount says.
    pub expected: Option<String>,
}

/// How many differences [`recount`] returns at most (it counts them all).
pub const DIFFERENCES_SHOWN: i64 = 1000;

/// Recounts the counters from `games` + `moves` and compares, for every
/// position not queued in `explorer_pending`: its rows, if it has any or
/// two games reached it (it must have them then, see the module doc).
/// Returns the number of rows that differ, and the first
/// [`DIFFERENCES_SHOWN`] of them.
pub async fn recount(client: &impl GenericClient) -> Result<(u64, Vec<Difference>), Error> {
    let counts = |alias: &str| {
        COUNTS
            .split(", ")
            .map(|column| format!("{alias}.{column}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let text = |alias: &str| {
        format!(
            "CASE WHEN {alias}.games IS NOT NULL THEN concat_ws(' ', {alias}.games, {alias}.white,
                 {alias}.draws, {alias}.black, {alias}.rated_games, {alias}.rating_sum,
                 coalesce(to_char({alias}.last_played AT TIME ZONE 'UTC',
                                  'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), '-'),
                 coalesce(array_to_string({alias}.top_game_ratings, ','), '-'),
                 coalesce(array_to_string({alias}.top_game_ids, ','), '-')) END"
        )
    };
    // A sharded layout's counters are added rows: a key's rows summed.
    // Rows left at zero games by a removal count nothing.
    let stored_rows = match crate::store::shards::layout(client).await? {
        None => "(SELECT * FROM explorer_moves WHERE games > 0
                  AND position_id NOT IN (SELECT position_id FROM explorer_pending))"
            .to_owned(),
        Some(_) => format!(
            "(SELECT * FROM ({}) f WHERE games > 0)",
            folded("explorer_moves", false)
        ),
    };
    // What must be stored: the recount of every position that has rows,
    // and of every one two games reached that is not queued (module doc).
    let sql = format!(
        "WITH all_counts AS (
             SELECT *, sum(games) OVER (PARTITION BY position_id) AS position_games
             FROM ({recount}) g
         ), r AS (
             SELECT {KEY}, {COUNTS}
             FROM all_counts
             WHERE position_id NOT IN (SELECT position_id FROM explorer_pending)
               AND (position_games >= 2
                    OR position_id IN (SELECT position_id FROM explorer_moves))
         ), diff AS (
             SELECT concat_ws(' ', {KEY}) AS key, {stored} AS stored, {expected} AS expected
             FROM {stored_rows} e FULL JOIN r USING ({KEY})
             WHERE ({e}) IS DISTINCT FROM ({r})
         )
         SELECT key, stored, expected, count(*) OVER () FROM diff ORDER BY key LIMIT $1",
        recount = grouped("true"),
        stored_rows = stored_rows,
        stored = text("e"),
        expected = text("r"),
        e = counts("e"),
        r = counts("r"),
    );
    let rows = client
        .query(&sql, &[&DIFFERENCES_SHOWN])
        .await
        .map_err(crate::store::db::db_err("recounting the explorer counters"))?;
    let total = rows.first().map_or(0, |row| row.get::<_, i64>(3));
    let differences = rows
        .iter()
        .map(|row| Difference {
            key: row.get(0),
            stored: row.get(1),
            expected: row.get(2),
        })
        .collect();
    Ok((
        u64::try_from(total).expect("count(*) is never negative"),
        differences,
    ))
}

/// Whether this database keeps the counters. An import reads it once,
/// with the import lock held (so [`enable`] and [`disable`], which take it
/// exclusively, cannot change it during the run); `lock` adds `FOR SHARE`,
/// for a transaction that must keep it unchanged until it commits.
pub async fn enabled(client: &impl GenericClient, lock: bool) -> Result<bool, Error> {
    let sql = if lock {
        "SELECT enabled FROM explorer_state FOR SHARE"
    } else {
        "SELECT enabled FROM explorer_state"
    };
    client
        .query_opt(sql, &[])
        .await
        .map_err(crate::store::db::db_err("reading explorer_state"))?
        .map(|row| row.get(0))
        .ok_or_else(|| {
            Error::inconsistent("explorer_state has no row (sql/0004_explorer.sql inserts it)")
        })
}

/// A configuration error unless the counters are kept: a database without
/// them would answer every question with nothing, which looks real. A
/// conflict while a bulk load holds or lost the rows of some games (their
/// records in `explorer_deferred`, see [`held`]): the counters lack them
/// until the load finishes.
pub async fn require_usable(client: &impl GenericClient) -> Result<(), Error> {
    if !enabled(client, false).await? {
        return Err(Error::Config(
            "this database keeps no explorer counters; run `pgnload db explorer enable` \
             (it counts the games already imported, and imports keep them from then on)"
                .to_owned(),
        ));
    }
    let uncounted: i64 = client
        .query_one(
            "SELECT coalesce(sum(last_game_id - first_game_id + 1), 0)::bigint
             FROM explorer_deferred",
            &[],
        )
        .await
        .map_err(crate::store::db::db_err("reading explorer_deferred"))?
        .get(0);
    if uncounted > 0 {
        return Err(Error::Conflict(format!(
            "a bulk load has not counted {uncounted} of its games into the explorer counters \
             yet (it does at its finish): wait for it to end, or if it stopped, run `pgnload \
             import` again to finish it"
        )));
    }
    Ok(())
}

/// What [`enable`] or [`disable`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switched {
    /// The counters were already in the asked state; nothing changed.
    Already,
    /// The state changed; `rows` counter rows were written (enable) or
    /// removed (disable).
    Changed {
        /// Counter rows written or removed.
        rows: u64,
    },
}

/// Takes the import lock ([`bulk::LOCK`](crate::ingest::bulk::LOCK))
/// exclusively for this session, calling `waiting` first if imports hold
/// it: no import runs while the counters are switched, so each import sees
/// one state for its whole run.
async fn lock_imports(client: &Client, waiting: &dyn Fn()) -> Result<(), Error> {
    if !try_lock_imports(client).await? {
        waiting();
        client
            .execute("SELECT pg_advisory_lock($1)", &[&crate::ingest::bulk::LOCK])
            .await
            .map_err(crate::store::db::db_err("waiting for the import lock"))?;
    }
    Ok(())
}

/// Takes the import lock exclusively for this session if nobody else
/// holds it (a lock this session holds already does not count): whether
/// it was taken.
async fn try_lock_imports(client: &Client) -> Result<bool, Error> {
    Ok(client
        .query_one(
            "SELECT pg_try_advisory_lock($1)",
            &[&crate::ingest::bulk::LOCK],
        )
        .await
        .map_err(crate::store::db::db_err("taking the import lock"))?
        .get(0))
}

/// Starts keeping the counters: with the import lock held exclusively
/// (`waiting` is called if imports hold it), and refused while a bulk load
/// is unfinished (its games get counted only at its finish), counts every
/// game already in the database and sets the flag, in one transaction: a
/// crash leaves the counters either off and empty or on and complete.
/// The table is filled without its primary key, which is added back
/// after (one index build instead of one insert per row into it).
pub async fn enable(client: &mut Client, waiting: &dyn Fn()) -> Result<Switched, Error> {
    let err = crate::store::db::db_err;
    lock_imports(client, waiting).await?;
    if let Some(load) = crate::ingest::bulk::unfinished(client).await? {
        return Err(Error::Conflict(format!(
            "bulk load {load} is unfinished: run `pgnload import` again to finish it, then enable \
             the explorer counters"
        )));
    }
    let tx = client
        .transaction()
        .await
        .map_err(err("starting to enable the explorer counters"))?;
    let on: bool = tx
        .query_one("SELECT enabled FROM explorer_state FOR UPDATE", &[])
        .await
        .map_err(err("reading explorer_state"))?
        .get(0);
    if on {
        return Ok(Switched::Already);
    }
    // Disabled means empty (disable truncates in the flag's transaction).
    advance_epoch(&tx).await?;
    let rows = match crate::store::shards::layout(&tx).await? {
        None => {
            tx.batch_execute("ALTER TABLE explorer_moves DROP CONSTRAINT explorer_moves_pkey")
                .await
                .map_err(err("dropping the explorer counters' key"))?;
            let rows = tx
                .execute(&insert_sql(&shared_positions_only("true")), &[])
                .await
                .map_err(err("counting the games into the explorer counters"))?;
            tx.batch_execute(&format!(
                "ALTER TABLE explorer_moves ADD CONSTRAINT explorer_moves_pkey PRIMARY KEY ({KEY})"
            ))
            .await
            .map_err(err("building the explorer counters' key"))?;
            rows
        }
        // Shards: no key to drop; each row counts the games of one shard,
        // anchored on one of them (see crate::store::shards).
        Some(shards) => tx
            .execute(
                &format!(
                    "INSERT INTO explorer_moves ({KEY}, {COUNTS}, anchor_game_id) {}",
                    grouped_by_shard("true", shards)
                ),
                &[],
            )
            .await
            .map_err(err("counting the games into the explorer counters"))?,
    };
    tx.execute(
        "UPDATE explorer_state SET enabled = true, changed_at = now()",
        &[],
    )
    .await
    .map_err(err("recording the explorer counters enabled"))?;
    tx.commit()
        .await
        .map_err(err("committing the explorer counters"))?;
    Ok(Switched::Changed { rows })
}

/// What [`compact`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compacted {
    /// A single node: the queued positions counted.
    Queue {
        /// Positions taken from `explorer_pending`.
        positions: u64,
    },
    /// A sharded layout: counter rows before and after.
    Shards {
        /// Rows before.
        before: u64,
        /// Rows after: one per key and shard.
        after: u64,
    },
}

/// On a single node, counts the positions queued in `explorer_pending`
/// ([`count_pending`]), with the import lock taken exclusively (`waiting`
/// is called if imports hold it), so that `explore` reads their rows
/// instead of grouping their games.
///
/// On a sharded layout, folds each shard's counter rows into one per key (a
/// batch adds rows rather than updating them, see the module doc), so that
/// `explore` sums few rows however many batches counted a position.
///
/// Each shard is folded in one transaction of its own (`postgres_fdw`
/// reads and writes a shard in one remote transaction, at one snapshot):
/// its rows are deleted and their sums inserted back on that shard,
/// anchored on the lowest of their anchors, which is on that shard. Rows
/// an import adds meanwhile are not in the snapshot and stay as they are,
/// so the counts stay exact while imports run.
pub async fn compact(client: &mut Client, waiting: &dyn Fn()) -> Result<Compacted, Error> {
    let err = crate::store::db::db_err;
    let Some(shards) = crate::store::shards::layout(&*client).await? else {
        lock_imports(client, waiting).await?;
        return Ok(Compacted::Queue {
            positions: count_pending(client).await?,
        });
    };
    let (mut before_all, mut after_all) = (0u64, 0u64);
    for shard in 0..shards.count() {
        let table = format!("explorer_moves_shard_{shard}");
        let tx = client
            .transaction()
            .await
            .map_err(err(format!("starting to compact {table}")))?;
        let before: i64 = tx
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .map_err(err(format!("counting {table}")))?
            .get(0);
        let after = tx
            .execute(
                &format!(
                    "WITH d AS (DELETE FROM {table} RETURNING *)
                     INSERT INTO {table} ({KEY}, {COUNTS}, anchor_game_id) {folded}",
                    folded = folded("d", true)
                ),
                &[],
            )
            .await
            .map_err(err(format!("compacting {table}")))?;
        tx.commit()
            .await
            .map_err(err(format!("committing the compaction of {table}")))?;
        before_all += u64::try_from(before).expect("count(*) is never negative");
        after_all += after;
    }
    Ok(Compacted::Shards {
        before: before_all,
        after: after_all,
    })
}

/// Stops keeping the counters: with the import lock held exclusively,
/// empties the table and clears the flag in one transaction.
pub async fn disable(client: &mut Client, waiting: &dyn Fn()) -> Result<Switched, Error> {
    let err = crate::store::db::db_err;
    lock_imports(client, waiting).await?;
    let tx = client
        .transaction()
        .await
        .map_err(err("starting to disable the explorer counters"))?;
    let on: bool = tx
        .query_one("SELECT enabled FROM explorer_state FOR UPDATE", &[])
        .await
        .map_err(err("reading explorer_state"))?
        .get(0);
    if !on {
        return Ok(Switched::Already);
    }
    let rows: i64 = tx
        .query_one("SELECT count(*) FROM explorer_moves", &[])
        .await
        .map_err(err("counting the explorer counters"))?
        .get(0);
    tx.batch_execute(
        "TRUNCATE explorer_moves, explorer_pending, explorer_deferred;
         UPDATE explorer_state SET enabled = false, changed_at = now();",
    )
    .await
    .map_err(err("emptying the explorer counters"))?;
    tx.commit()
        .await
        .map_err(err("committing the explorer counters disabled"))?;
    Ok(Switched::Changed {
        rows: u64::try_from(rows).expect("count(*) is never negative"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The game of `movetext` (a PGN without tags), replayed.
    fn game(movetext: &str) -> GameRecord {
        use crate::chess::{
            reader::{GameSplitter, ParseLimits, take_game},
            replay::replay_game,
        };
        let pgn = format!("{movetext}\n");
        let limits = ParseLimits {
            max_plies: 100,
            max_game_bytes: 1 << 20,
        };
        let mut splitter = GameSplitter::new(pgn.as_bytes(), "t".into(), 0, 0, limits);
        let mut chunk = splitter.next_chunk().expect("reads").expect("one game");
        let raw = take_game(&mut chunk, limits).expect("parses");
        replay_game(raw, chunk.pos.clone()).expect("replays")
    }

    #[test]
    fn a_game_counts_in_each_position_once_with_the_move_of_its_last_visit() {
        // The start position again after four plies: its move is 3. e4.
        let record = game("1. Nf3 Nf6 2. Ng1 Ng8 3. e4 *");
        let keys: Vec<PositionKey> = record
            .positions
            .iter()
            .map(|(fen, _)| PositionKey::of(fen))
            .collect();
        let mut ids = KeyMap::default();
        for (id, key) in (100..).zip(&keys) {
            ids.entry(*key).or_insert(id);
        }
        let visits = last_visits(7, 42, &record, &keys, &ids).expect("every key has an id");
        let found: Vec<(i64, i16, usize)> = visits
            .iter()
            .map(|visit| (visit.position, visit.code, visit.game))
            .collect();
        let code = |ply: usize| record.plies[ply].code.cast_signed();
        assert_eq!(
            found,
            vec![
                (100, code(4), 7),
                (101, code(1), 7),
                (102, code(2), 7),
                (103, code(3), 7)
            ]
        );
        // A game capped at two plies counts in its first two positions.
        let capped = last_visits(0, 42, &record, &keys[..3], &ids).expect("ids");
        assert_eq!(capped.len(), 2);
        // A position without an id is a bug, said with the game's id.
        ids.remove(&keys[2]);
        let error = last_visits(0, 42, &record, &keys, &ids).expect_err("a key has no id");
        assert!(error.to_string().contains("game 42"), "{error}");
    }

    #[test]
    fn a_row_keeps_its_best_rated_games_highest_ratings_then_lowest_ids_first() {
        let mut top = TopGames::default();
        assert!(top.kept().is_empty());
        for (ratings, id) in [
            (3000, 9),
            (3100, 4),
            (3000, 2),
            (2900, 1),
            (3000, 5),
            (4000, 7),
        ] {
            top.offer(ratings, id);
        }
        assert_eq!(top.kept(), [(4000, 7), (3100, 4), (3000, 2), (3000, 5)]);
        // Worse than the last kept: not kept; better: the last one drops.
        top.offer(3000, 6);
        assert_eq!(top.kept().last(), Some(&(3000, 5)));
        top.offer(3000, 1);
        assert_eq!(top.kept(), [(4000, 7), (3100, 4), (3000, 1), (3000, 2)]);
        // Any ratings, negative included (the Elo tags are not bounded).
        let mut low = TopGames::default();
        low.offer(-5, 3);
        low.offer(i64::from(i32::MIN) * 2, 1);
        assert_eq!(low.kept(), [(-5, 3), (i64::from(i32::MIN) * 2, 1)]);
    }
}

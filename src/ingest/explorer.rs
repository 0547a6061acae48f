//! The opening explorer's counters (`explorer_moves`): opt-in per
//! database ([`enable`], [`disable`], the flag in `explorer_state`), then
//! kept by the import in the same transactions as the games they count,
//! corrected when games are deleted, and recounted by `pgnload verify
//! --explorer`.
//!
//! What a game contributes is defined by the view `explorer_game_moves`
//! of `sql/0004_explorer.sql` (its categories and the move of its last
//! visit to each position); a delete and the recount group that view with
//! [`grouped`], restricted to the games they are about. An import batch (either mode) instead aggregates its games in memory with the
//! categories of [`crate::chess::category`] ([`add_batch`]) and sends one
//! row per counter: grouping the view over the moves just written cost
//! half the import's time again (measured, 20k games), this costs a
//! fraction. The two definitions cannot drift unseen: `verify --explorer`
//! recounts through the view, and the tests run it after incremental
//! imports.
//!
//! A position's rows are complete (they count every game that reached
//! it) unless it is queued in `explorer_pending`; a position without rows,
//! or queued, is answered by grouping its games from the view
//! (`sql/0012_explorer_shared_positions.sql` says why). On a single node,
//! a batch of either mode ([`Counting::Shared`]) adds its games to positions
//! that have rows and to those it created and reached twice or more, and
//! queues the others that two games may have reached; [`count_pending`]
//! counts the queue with the import lock held exclusively. Rows reaching
//! zero games stay, so that no batch sees a position's rows disappear
//! between looking and adding.
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

use std::collections::{HashMap, HashSet};

use tokio_postgres::{Client, GenericClient, Transaction, types::ToSql};

use crate::{
    chess::{
        category::{Month, RatingGroup, Speed},
        replay::GameRecord,
    },
    error::Error,
    ingest::dedup::{KeyMap, PositionKey},
    store::{
        counts::{COUNTS, KEY, TOP_GAMES, grouped},
        shards::Shards,
    },
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
/// `explorer_moves`, the best-rated games of both merged.
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
             (top_game_ratings, top_game_ids) = (SELECT * FROM explorer_top_games(
                 explorer_moves.top_game_ratings || excluded.top_game_ratings,
                 explorer_moves.top_game_ids || excluded.top_game_ids, {TOP_GAMES}))",
        insert = insert_sql(&format!("SELECT * FROM ({rows}) d"))
    )
}

/// The key of a counter row: position, variant label, speed, rating
/// group, month, move (as [`KEY`]).
type CounterKey = (i64, &'static str, i16, i16, i32, i16);

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

/// The best-rated games of a counter row being built, as
/// `explorer_top_games` keeps them (`sql/0013_explorer_top_games.sql`):
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
}

/// Which positions a batch writes counter rows for.
#[derive(Debug, Clone, Copy)]
pub enum Counting<'a> {
    /// Every position, as rows added per shard (a sharded layout).
    Sharded(Shards),
    /// A batch (either mode) or `game put` on a single node: positions
    /// with rows get the batch's games, and so do the positions it created
    /// and reached twice or more; the others are queued in
    /// `explorer_pending` if two games may have reached them (see
    /// `positions_to_count`). A position it created and reached once needs
    /// neither a row nor a look: any other game there comes from an import
    /// that did not create it, which queues it.
    Shared {
        /// Positions created by the batch.
        fresh: &'a Fresh,
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

/// Counts the games of a batch just inserted with their moves, in the
/// caller's transaction: each `(games.id, game, position keys)`, with `ids`
/// resolving the keys, and `counting` saying which positions get rows. The
/// same counts as [`grouped`] over the view, built in memory and sent as
/// one array per column (the best-rated games as [`TOP_GAMES`] columns,
/// padded with NULL).
pub async fn add_batch<'a>(
    tx: &Transaction<'_>,
    games: impl Iterator<Item = (i64, &'a GameRecord, &'a [PositionKey])>,
    ids: &KeyMap<i64>,
    counting: Counting<'_>,
) -> Result<(), Error> {
    let games: Vec<(i64, &GameRecord, &[PositionKey])> = games.collect();
    let shards = match counting {
        Counting::Sharded(shards) => Some(shards),
        Counting::Shared { .. } => None,
    };
    let anchors = match shards {
        None => HashMap::new(),
        Some(shards) => anchors(tx, &games, shards).await?,
    };
    // Keyed by anchor too: on shards a counter row counts the games of
    // one shard (0 on a single node, where one row per key is updated).
    let mut counters: HashMap<(i64, CounterKey), Counts> = HashMap::new();
    // How many of the batch's games reached each position.
    let mut reached: HashMap<i64, u32> = HashMap::new();
    let mut last_visit: HashMap<i64, i16> = HashMap::new();
    for (game_id, game, keys) in games {
        let anchor = match shards {
            None => 0,
            Some(_) => anchors.get(&game_id).copied().ok_or_else(|| {
                Error::Internal(format!(
                    "{}: game {game_id} was not placed on a shard with its batch",
                    game.pos
                ))
            })?,
        };
        let meta = &game.meta;
        let speed = Speed::from_clock(meta.clock).code();
        // Both ratings added: what orders the best-rated games.
        let ratings = match (meta.white.elo, meta.black.elo) {
            (Some(white), Some(black)) => Some(i64::from(white) + i64::from(black)),
            _ => None,
        };
        let average = ratings.map(|ratings| ratings.div_euclid(2));
        let rating_group = RatingGroup::of_game(meta.white.elo, meta.black.elo)
            .map_or(-1, RatingGroup::lower_bound);
        let month = meta
            .started_at
            .and_then(Month::of_time)
            .map_or(-1, Month::code);
        let variant = game.variant.as_db_label();
        // The move of the last visit to each position.
        last_visit.clear();
        // The plies with moves rows: `keys` covers positions 0..=N of a
        // game capped at N plies, and the view counts the rows stored.
        let stored = keys.len().saturating_sub(1);
        for (i, ply) in game.plies.iter().enumerate().take(stored) {
            let position = keys.get(i).and_then(|key| ids.get(key)).ok_or_else(|| {
                Error::Internal(format!(
                    "{}: position {i} of game {game_id} has no id when counting it in the explorer",
                    game.pos
                ))
            })?;
            last_visit.insert(*position, ply.code.cast_signed());
        }
        for (&position, &code) in &last_visit {
            *reached.entry(position).or_default() += 1;
            let counts = counters
                .entry((
                    anchor,
                    (position, variant, speed, rating_group, month, code),
                ))
                .or_default();
            counts.games += 1;
            match game.result.and_then(|r| r.score()) {
                Some(1) => counts.white += 1,
                Some(0) => counts.draws += 1,
                Some(-1) => counts.black += 1,
                _ => {}
            }
            if let (Some(average), Some(ratings)) = (average, ratings) {
                counts.rated_games += 1;
                counts.rating_sum += average;
                counts.top.offer(ratings, game_id);
            }
            counts.last_played = counts.last_played.max(meta.started_at);
        }
    }
    if let Counting::Shared { fresh } = counting {
        let counted = positions_to_count(tx, &reached, fresh).await?;
        counters.retain(|(_, key), _| counted.contains(&key.0));
    }
    if counters.is_empty() {
        return Ok(());
    }
    // Key order, so that concurrent importers lock rows in the same order.
    let mut rows: Vec<((i64, CounterKey), Counts)> = counters.into_iter().collect();
    rows.sort_unstable_by_key(|((anchor, key), _)| (*key, *anchor));
    macro_rules! column {
        ($f:expr) => {
            rows.iter().map($f).collect::<Vec<_>>()
        };
    }
    let sql = match shards {
        None => add_sql(&batch_values(false)),
        // Rows added, never updated: no row of another importer to wait for.
        Some(_) => format!(
            "INSERT INTO explorer_moves ({KEY}, {COUNTS}, anchor_game_id) {}",
            batch_values(true)
        ),
    };
    let (positions, variants, speeds, rating_groups, months, moves) = (
        column!(|((_, k), _)| k.0),
        column!(|((_, k), _)| k.1),
        column!(|((_, k), _)| k.2),
        column!(|((_, k), _)| k.3),
        column!(|((_, k), _)| k.4),
        column!(|((_, k), _)| k.5),
    );
    let (games, white, draws, black) = (
        column!(|(_, c)| c.games),
        column!(|(_, c)| c.white),
        column!(|(_, c)| c.draws),
        column!(|(_, c)| c.black),
    );
    let (rated_games, rating_sum, last_played) = (
        column!(|(_, c)| c.rated_games),
        column!(|(_, c)| c.rating_sum),
        column!(|(_, c)| c.last_played),
    );
    let top: Vec<Vec<Option<i64>>> = (0..TOP_GAMES as usize)
        .map(|i| column!(|(_, c)| c.top.kept().get(i).map(|game| game.0)))
        .chain(
            (0..TOP_GAMES as usize)
                .map(|i| column!(|(_, c)| c.top.kept().get(i).map(|game| game.1))),
        )
        .collect();
    let anchor_ids = column!(|((anchor, _), _)| *anchor);
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &positions,
        &variants,
        &speeds,
        &rating_groups,
        &months,
        &moves,
        &games,
        &white,
        &draws,
        &black,
        &rated_games,
        &rating_sum,
        &last_played,
    ];
    params.extend(top.iter().map(|column| column as &(dyn ToSql + Sync)));
    if shards.is_some() {
        params.push(&anchor_ids);
    }
    tx.execute(&sql, &params)
        .await
        .map_err(crate::store::db::db_err(
            "adding the batch to the explorer counters",
        ))?;
    Ok(())
}

/// The rows [`add_batch`] sends, as a select of [`KEY`] and [`COUNTS`]
/// (and `anchor_game_id` if `anchored`): one array parameter per column,
/// the best-rated games as [`TOP_GAMES`] ratings then as many ids, one
/// array each, NULL past a row's last game.
fn batch_values(anchored: bool) -> String {
    let top = TOP_GAMES as usize;
    let list = |prefix: &str| {
        (1..=top)
            .map(|i| format!("{prefix}{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let params: Vec<String> = (14..14 + 2 * top + usize::from(anchored))
        .map(|n| format!("${n}::bigint[]"))
        .collect();
    format!(
        "SELECT {KEY}, games, white, draws, black, rated_games, rating_sum, last_played,
                nullif(array_remove(ARRAY[{ratings}], NULL), '{{}}') AS top_game_ratings,
                nullif(array_remove(ARRAY[{ids}], NULL), '{{}}') AS top_game_ids{anchor}
         FROM unnest($1::bigint[], $2::text[]::game_variant[], $3::smallint[], $4::smallint[],
                     $5::integer[], $6::smallint[], $7::integer[], $8::integer[], $9::integer[],
                     $10::integer[], $11::integer[], $12::bigint[], $13::timestamptz[], {params})
              AS u({KEY}, games, white, draws, black, rated_games, rating_sum, last_played,
                   {ratings}, {ids}{anchor})",
        ratings = list("r"),
        ids = list("g"),
        anchor = if anchored { ", anchor_game_id" } else { "" },
        params = params.join(", "),
    )
}

/// [`Counting::Shared`]: of the positions the batch reached (each with how
/// many of its games did), returns those to add the batch's games to: the
/// ones with rows, and the fresh ones it reached twice or more (all their
/// games are the batch's, unless another import reached them since, which
/// then queued them: a position is claimed by queueing it here, and left
/// queued if it was). It queues the others that two games may have reached
/// (all but the fresh ones reached once), for [`count_pending`].
async fn positions_to_count(
    tx: &Transaction<'_>,
    reached: &HashMap<i64, u32>,
    fresh: &Fresh,
) -> Result<HashSet<i64>, Error> {
    let err = crate::store::db::db_err;
    let none = HashSet::new();
    let fresh = if Fresh::epoch(tx).await? == fresh.epoch {
        &fresh.ids
    } else {
        &none
    };
    let mut known: Vec<i64> = reached
        .keys()
        .copied()
        .filter(|position| !fresh.contains(position))
        .collect();
    known.sort_unstable();
    let mut counted: HashSet<i64> = tx
        .query(
            "SELECT p FROM unnest($1::bigint[]) p
             WHERE EXISTS (SELECT 1 FROM explorer_moves e WHERE e.position_id = p)",
            &[&known],
        )
        .await
        .map_err(err("looking up which positions have explorer counters"))?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let claims = |position: &i64, games: u32| fresh.contains(position) && games >= 2;
    let mut queued: Vec<i64> = reached
        .iter()
        .filter(|&(position, &games)| {
            !counted.contains(position) && (!fresh.contains(position) || claims(position, games))
        })
        .map(|(&position, _)| position)
        .collect();
    if queued.is_empty() {
        return Ok(counted);
    }
    // Sorted: concurrent batches wait for each other's entries in one order.
    queued.sort_unstable();
    let claimed: Vec<i64> = tx
        .query(
            "INSERT INTO explorer_pending (position_id) SELECT unnest($1::bigint[])
             ON CONFLICT DO NOTHING RETURNING position_id",
            &[&queued],
        )
        .await
        .map_err(err("queueing positions for the explorer counters"))?
        .iter()
        .map(|row| row.get(0))
        .filter(|position| {
            reached
                .get(position)
                .is_some_and(|&games| claims(position, games))
        })
        .collect();
    if !claimed.is_empty() {
        // Out of the queue again, in this transaction: an import that
        // queues one meanwhile waits for it to commit, and then its games
        // are recounted with the position's.
        tx.execute(
            "DELETE FROM explorer_pending WHERE position_id = ANY($1)",
            &[&claimed],
        )
        .await
        .map_err(err("claiming fresh positions for the explorer counters"))?;
        counted.extend(claimed);
    }
    Ok(counted)
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
        // A chunk's positions reach a few moves rows and games each, by
        // their indexes; a small database's estimates would hash-join the
        // whole games table per chunk instead.
        tx.batch_execute("SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off")
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
/// of the position. Positions without rows have nothing to take out.
pub async fn remove_games(tx: &Transaction<'_>, ids: &[i64]) -> Result<(), Error> {
    let err = |what: &'static str| crate::store::db::db_err(what);
    tx.batch_execute("DROP TABLE IF EXISTS explorer_delta")
        .await
        .map_err(err("dropping a leftover explorer_delta"))?;
    tx.execute(
        &format!(
            "CREATE TEMP TABLE explorer_delta ON COMMIT DROP AS {}",
            grouped("game_id = ANY($1)")
        ),
        &[&ids],
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
            Error::Internal("explorer_state has no row (sql/0004_explorer.sql inserts it)".into())
        })
}

/// A configuration error unless the counters are kept: a database without
/// them would answer every question with nothing, which looks real.
pub async fn require_enabled(client: &impl GenericClient) -> Result<(), Error> {
    if enabled(client, false).await? {
        Ok(())
    } else {
        Err(Error::Config(
            "this database keeps no explorer counters; run `pgnload db explorer enable` \
             (it counts the games already imported, and imports keep them from then on)"
                .to_owned(),
        ))
    }
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
        "TRUNCATE explorer_moves, explorer_pending;
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

    #[test]
    fn a_batch_sends_one_array_per_column_and_its_best_games_padded() {
        let sql = batch_values(true);
        let last = 13 + 2 * TOP_GAMES as usize + 1;
        assert!(sql.contains(&format!("${last}::bigint[]")), "{sql}");
        assert!(!sql.contains(&format!("${}::", last + 1)), "{sql}");
        assert!(sql.contains("anchor_game_id"), "{sql}");
        assert!(!batch_values(false).contains("anchor_game_id"));
    }
}

//! Phase one of a batch: the positions of its new games, resolved cache
//! first, the misses get-or-created (incremental) or given new ids (bulk),
//! in a transaction of their own. It must not write games or the
//! checkpoint: those are phase two's, in one transaction together.

use std::collections::HashMap;

use foldhash::{HashSet, HashSetExt, fast::RandomState};
use rayon::prelude::*;
use tokio_postgres::{Client, Transaction};

use super::{
    BatchContext, BatchStats, FileContext, IdSequence, batch_bounds, batch_game,
    copy::{TableRow, WriteError, copy_rows},
    existing::{Conflict, games_to_import},
    rows::PositionRow,
    sharded,
};
use crate::{
    chess::{fen::split_normalized, replay::GameRecord, scope::stored_plies},
    error::Error,
    explorer::Fresh,
    ingest::{
        dedup::{KeyMap, PositionCache, PositionKey},
        pipeline::Batch,
    },
};

/// Position ids resolved in this transaction, to be cached after commit.
pub type PendingIds = Vec<(PositionKey, i64)>;

/// A batch whose positions are in the database (committed), ready for its
/// games to be written by [`write_games`](super::write_games).
#[derive(Debug, Default)]
pub struct ResolvedBatch {
    /// The games that were new when the positions were resolved (not in
    /// the database, not repeated within the batch), in batch order, and
    /// the ones present under a smaller positions cap (phase two finds
    /// them again, as it does every game).
    pub(super) games: Vec<ResolvedGame>,
    /// The id of every position of those games.
    pub(super) position_ids: KeyMap<i64>,
    /// The positions this batch created (on one node).
    pub(super) fresh: Fresh,
    /// The position counts.
    pub(super) stats: BatchStats,
    /// Games of the batch whose identity was taken by a game with other
    /// moves, found by this phase (recorded by [`write_games`](super::write_games)).
    pub(super) conflicts: Vec<Conflict>,
}

/// A game of a [`ResolvedBatch`].
#[derive(Debug)]
pub(super) struct ResolvedGame {
    /// Index into the batch's outcomes.
    pub(super) index: usize,
    /// Its `games.external_id` (a content digest for non-Lichess games:
    /// computed once, in the first phase).
    pub(super) external_id: String,
    /// The dedup key of each of its positions stored (all, or plies
    /// `0..=cap` under a positions cap), in order.
    pub(super) keys: Vec<PositionKey>,
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
    let (mut new_games, conflicts) = games_to_import(&tx, batch, file)
        .await
        .map_err(|e| at.err("looking up existing games", e))?;
    if let Some(shards) = file.shards {
        sharded::claim_games(&tx, shards, file, &mut new_games)
            .await
            .map_err(|e| at.err("claiming the identities of new games", e))?;
    }
    // Every later lookup of a position in this batch is by key: hashing
    // each FEN once, on all cores, is cheaper than hashing and comparing
    // the text in each map.
    // A capped game (`--positions-max-ply`) has keys for the positions it
    // stores only, so every later step (positions, moves rows, final
    // position, explorer) covers exactly those.
    let cap = file.positions_max_ply;
    let resolved_games: Vec<ResolvedGame> = new_games
        .into_par_iter()
        .map(|candidate| ResolvedGame {
            index: candidate.index,
            keys: candidate
                .game
                .positions
                .iter()
                .take(stored_plies(cap, candidate.game.plies.len()) + 1)
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
    let mut fresh = Fresh::default();
    match ids {
        None => match file.shards {
            None => {
                if file.explorer {
                    fresh.epoch = Fresh::epoch(&tx).await?;
                }
                fresh.ids = get_or_create_positions(
                    &tx,
                    &misses,
                    &mut position_ids,
                    &mut pending,
                    &mut stats,
                )
                .await
                .map_err(|e| at.err("get-or-create positions", e))?;
            }
            Some(shards) => sharded::get_or_create_positions(
                &tx,
                shards,
                &misses,
                &mut position_ids,
                &mut pending,
                &mut stats,
            )
            .await
            .map_err(|e| at.err("get-or-create positions on the shards", e))?,
        },
        Some(ids) => {
            if file.explorer {
                fresh.epoch = Fresh::epoch(&tx).await?;
            }
            fresh.ids = insert_new_positions(&tx, &misses, ids, &mut position_ids, &mut pending)
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
        fresh,
        stats,
        conflicts,
    };
    Ok((resolved, pending))
}

/// A batch's positions after the cache: ids known so far, and the rest.
pub(super) struct Unresolved<'a> {
    pub(super) position_ids: KeyMap<i64>,
    pub(super) misses: Vec<(PositionRow<'a>, PositionKey)>,
}

/// Looks every distinct position of the new games (each with its position
/// keys) up in the cache.
pub(super) fn collect_positions<'a>(
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
                    id: None,
                    normalized_fen: fen,
                    fen_hash: hash,
                    piece_placement: parts.piece_placement,
                    active_color: parts.active_color,
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
/// Returns the ids of the positions it created.
pub(super) async fn get_or_create_positions<'a>(
    tx: &Transaction<'_>,
    misses: &[(PositionRow<'a>, PositionKey)],
    position_ids: &mut KeyMap<i64>,
    pending: &mut PendingIds,
    stats: &mut BatchStats,
) -> Result<HashSet<i64>, WriteError> {
    if misses.is_empty() {
        return Ok(HashSet::new());
    }
    stage_positions(tx, misses).await?;
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
    let created: HashSet<i64> = inserted.iter().map(|row| row.get(0)).collect();
    let by_text: HashMap<&str, PositionKey, RandomState> = misses
        .iter()
        .map(|(row, key)| (row.normalized_fen, *key))
        .collect();
    learn_ids(inserted, &by_text, position_ids, pending);
    let existing: Vec<&str> = misses
        .iter()
        .filter(|(_, key)| !position_ids.contains_key(key))
        .map(|(row, _)| row.normalized_fen)
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
    Ok(created)
}

/// `COPY`s the `misses` into `stage_positions` (emptied at commit), where
/// both get-or-creates (one node, shards) insert them from.
pub(super) async fn stage_positions(
    tx: &Transaction<'_>,
    misses: &[(PositionRow<'_>, PositionKey)],
) -> Result<(), WriteError> {
    let staged: Vec<&PositionRow<'_>> = misses.iter().map(|(row, _)| row).collect();
    copy_rows(tx, &PositionRow::copy_into("stage_positions"), &staged).await?;
    Ok(())
}

/// Bulk mode: every miss is a new position with the next id, `COPY`ed
/// straight into the (index-less) table. Returns their ids.
async fn insert_new_positions<'a>(
    tx: &Transaction<'_>,
    misses: &[(PositionRow<'a>, PositionKey)],
    ids: &mut IdSequence,
    position_ids: &mut KeyMap<i64>,
    pending: &mut PendingIds,
) -> Result<HashSet<i64>, WriteError> {
    if misses.is_empty() {
        return Ok(HashSet::new());
    }
    let mut rows = Vec::with_capacity(misses.len());
    let mut created = HashSet::with_capacity(misses.len());
    for (row, key) in misses {
        let id = ids.take();
        position_ids.insert(*key, id);
        pending.push((*key, id));
        created.insert(id);
        rows.push(PositionRow {
            id: Some(id),
            ..*row
        });
    }
    ids.advance(tx).await?;
    copy_rows(tx, &PositionRow::copy_into("positions"), &rows).await?;
    Ok(created)
}

/// Records `(id, normalized_fen)` rows as resolved positions of the batch.
pub(super) fn learn_ids(
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

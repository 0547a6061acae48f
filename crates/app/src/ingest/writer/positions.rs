//! Phase one of a batch: the positions of its new games, resolved cache
//! first, the misses get-or-created (incremental) or given new ids (bulk),
//! in a transaction of their own. It must not write games or the
//! checkpoint: those are phase two's, in one transaction together.

use std::collections::HashMap;

use foldhash::{HashSet, HashSetExt, fast::RandomState};
use rayon::prelude::*;
use tokio_postgres::{Client, Transaction, error::SqlState};

use super::{
    BatchContext, BatchStats, FileContext, IdSequence, batch_bounds, batch_game,
    copy::{TableRow, WriteError, copy_rows},
    draw_ids,
    existing::{Candidate, Conflict, games_to_import},
    layout::Layout,
    rows::PositionRow,
};
use crate::{
    chess::{fen::split_normalized, replay::GameRecord, scope::stored_plies},
    error::Error,
    explorer::Fresh,
    ingest::{
        dedup::{KeyMap, KeySet, PositionCache, PositionKey},
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
    let mut layout = Layout::of(file, ids)?;
    let (mut new_games, conflicts) = games_to_import(&tx, batch, file)
        .await
        .map_err(|e| at.err("looking up existing games", e))?;
    layout.claim_games(&tx, &at, &mut new_games).await?;
    let resolved_games = keyed(new_games, file.positions_max_ply);
    let mut stats = BatchStats::default();
    let games = resolved_games
        .iter()
        .filter_map(|g| Some((batch_game(batch, g.index)?, &g.keys[..])));
    let Unresolved {
        position_ids,
        misses,
    } = collect_positions(games, cache, &mut stats);
    let mut found = Found {
        position_ids,
        pending: Vec::with_capacity(misses.len()),
        stats,
    };
    let fresh = layout
        .create_positions(&tx, &at, &misses, &mut found)
        .await?;
    tx.commit()
        .await
        .map_err(|e| at.err("committing the positions", e))?;
    let resolved = ResolvedBatch {
        games: resolved_games,
        position_ids: found.position_ids,
        fresh,
        stats: found.stats,
        conflicts,
    };
    Ok((resolved, found.pending))
}

/// Each new game with the dedup key of every position it stores.
///
/// Every later lookup of a position in the batch is by key: hashing each
/// FEN once, on all cores, is cheaper than hashing and comparing the text
/// in each map. A capped game (`--positions-max-ply`) has keys for the
/// positions it stores only, so every later step (positions, moves rows,
/// final position, explorer) covers exactly those.
fn keyed(new_games: Vec<Candidate<'_>>, cap: Option<u32>) -> Vec<ResolvedGame> {
    new_games
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
        .collect()
}

/// What phase one has learnt of a batch's positions so far: the ids
/// resolved, those to cache after commit, and the counts.
pub(super) struct Found {
    /// The id of every position resolved so far.
    pub(super) position_ids: KeyMap<i64>,
    /// The ids resolved in this transaction, to be cached after commit.
    pub(super) pending: PendingIds,
    /// The position counts.
    pub(super) stats: BatchStats,
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
    let mut missing = KeySet::default();
    for (game, keys) in new_games {
        for ((fen, hash), &key) in game.positions.iter().zip(keys) {
            if position_ids.contains_key(&key) || missing.contains(&key) {
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
            missing.insert(key);
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

/// Positions per round of [`get_or_create_positions`]: its lookup and its
/// insert walk the same index pages, which stay in memory between the two
/// when a round's key range is this small (about 3,000 pages of the unique
/// index on `normalized_fen` at 60 bytes a key); for the whole batch at
/// once, the insert read again what the lookup had read, once the index
/// outgrew memory.
const ROUND_POSITIONS: usize = 50_000;

/// Incremental mode, over the unique index on `normalized_fen`, which
/// carries `id` (migration 0017), in rounds of consecutive keys (the misses
/// sorted by `normalized_fen`, in [`ROUND_POSITIONS`]): in each, the misses
/// already stored are read from that index alone; the others are inserted
/// sorted ([`copy_absent`], or staged and inserted `ON CONFLICT DO NOTHING`
/// when a concurrent importer committed one of them in between, those then
/// read back), so that the insert walks every index of positions from left
/// to right (one read per index page, not per position, once the database
/// outgrows memory) and concurrent importers take them in the same order.
/// Returns the ids of the positions it created.
pub(super) async fn get_or_create_positions(
    tx: &Transaction<'_>,
    misses: &[(PositionRow<'_>, PositionKey)],
    found: &mut Found,
) -> Result<HashSet<i64>, WriteError> {
    let mut sorted: Vec<&(PositionRow<'_>, PositionKey)> = misses.iter().collect();
    sorted.sort_unstable_by_key(|(row, _)| row.normalized_fen);
    let mut created = HashSet::new();
    for round in sorted.chunks(ROUND_POSITIONS) {
        get_or_create_round(tx, round, found, &mut created).await?;
    }
    found.stats.positions_new = created.len() as u64;
    found.stats.positions_reused += misses.len() as u64 - created.len() as u64;
    Ok(created)
}

/// One round of [`get_or_create_positions`]: `round`'s positions looked up,
/// the absent ones inserted (their ids added to `created`), the ones a
/// concurrent importer inserted meanwhile read back.
async fn get_or_create_round(
    tx: &Transaction<'_>,
    round: &[&(PositionRow<'_>, PositionKey)],
    found: &mut Found,
    created: &mut HashSet<i64>,
) -> Result<(), WriteError> {
    let Found {
        position_ids,
        pending,
        ..
    } = found;
    let by_text: HashMap<&str, PositionKey, RandomState> = round
        .iter()
        .map(|(row, key)| (row.normalized_fen, *key))
        .collect();
    let texts: Vec<&str> = round.iter().map(|(row, _)| row.normalized_fen).collect();
    learn_ids(
        stored_ids(tx, &texts).await?,
        &by_text,
        position_ids,
        pending,
    );
    let absent: Vec<&(PositionRow<'_>, PositionKey)> = round
        .iter()
        .copied()
        .filter(|(_, key)| !position_ids.contains_key(key))
        .collect();
    if absent.is_empty() || copy_absent(tx, &absent, position_ids, pending, created).await? {
        return Ok(());
    }
    let staged: Vec<&PositionRow<'_>> = absent.iter().map(|(row, _)| row).collect();
    tx.batch_execute("TRUNCATE stage_positions").await?;
    stage_positions(tx, &staged).await?;
    let inserted = tx
        .query(
            &format!(
                "INSERT INTO positions ({columns}) SELECT {columns}
                 FROM stage_positions ORDER BY normalized_fen
                 ON CONFLICT (normalized_fen) DO NOTHING
                 RETURNING id, normalized_fen",
                columns = PositionRow::columns_except(&["id"]),
            ),
            &[],
        )
        .await?;
    created.extend(inserted.iter().map(|row| row.get::<_, i64>(0)));
    learn_ids(inserted, &by_text, position_ids, pending);
    // What a concurrent importer committed between the lookup and the
    // insert: absent then, not inserted by this one.
    let raced: Vec<&str> = absent
        .iter()
        .filter(|(_, key)| !position_ids.contains_key(key))
        .map(|(row, _)| row.normalized_fen)
        .collect();
    if !raced.is_empty() {
        learn_ids(
            stored_ids(tx, &raced).await?,
            &by_text,
            position_ids,
            pending,
        );
    }
    Ok(())
}

/// Inserts a round's `absent` positions (sorted by `normalized_fen`) by
/// `COPY`, with ids drawn from the table's sequence, and records their ids;
/// `false`, with nothing inserted, if another writer committed one of them
/// since the lookup (a unique violation, undone by a savepoint): the caller
/// then inserts them `ON CONFLICT DO NOTHING`.
///
/// Why not `ON CONFLICT` every time: the lookup has just found them absent,
/// and only a concurrent importer can make one present. `COPY` inserts
/// each position with one descent of the unique index where a speculative
/// insert makes two, and needs no staging table nor `RETURNING`: measured
/// on 89,000 new positions into a 10,000-game database, the server spent
/// 1.26–1.51 CPU seconds on the `COPY` and 1.58–2.34 on the staged insert.
/// Waiting on a concurrent importer's uncommitted position is the same for
/// both, and both take the positions in the same (sorted) order.
async fn copy_absent(
    tx: &Transaction<'_>,
    absent: &[&(PositionRow<'_>, PositionKey)],
    position_ids: &mut KeyMap<i64>,
    pending: &mut PendingIds,
    created: &mut HashSet<i64>,
) -> Result<bool, WriteError> {
    let ids = draw_ids(tx, "positions_id_seq", absent.len()).await?;
    let rows: Vec<PositionRow<'_>> = absent
        .iter()
        .zip(&ids)
        .map(|((row, _), &id)| PositionRow {
            id: Some(id),
            ..*row
        })
        .collect();
    tx.batch_execute("SAVEPOINT absent_positions").await?;
    match copy_rows(tx, &PositionRow::copy_into("positions"), &rows).await {
        Ok(_) => {
            tx.batch_execute("RELEASE SAVEPOINT absent_positions")
                .await?;
        }
        Err(WriteError::Database(e)) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            tx.batch_execute("ROLLBACK TO SAVEPOINT absent_positions")
                .await?;
            return Ok(false);
        }
        Err(e) => return Err(e),
    }
    for ((_, key), &id) in absent.iter().zip(&ids) {
        position_ids.insert(*key, id);
        pending.push((*key, id));
        created.insert(id);
    }
    Ok(true)
}

/// `(id, normalized_fen)` of the stored positions among `fens`, read from
/// the unique index on `normalized_fen` alone (an index-only scan: the index
/// carries `id`). The planner is told not to scan the table instead: for a
/// batch of many positions it may estimate a sequential scan cheaper, which
/// reads the whole table once the database outgrows memory, where the
/// sorted index probes read each index page the batch needs once. The two
/// settings return to the session's own values after the query.
async fn stored_ids(
    tx: &Transaction<'_>,
    fens: &[&str],
) -> Result<Vec<tokio_postgres::Row>, WriteError> {
    tx.batch_execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off")
        .await?;
    let rows = tx
        .query(
            "SELECT id, normalized_fen FROM positions WHERE normalized_fen = ANY($1)",
            &[&fens],
        )
        .await?;
    tx.batch_execute("RESET enable_seqscan; RESET enable_bitmapscan")
        .await?;
    Ok(rows)
}

/// `COPY`s `rows` into `stage_positions` (emptied at commit), where both
/// get-or-creates (one node, shards) insert them from.
pub(super) async fn stage_positions(
    tx: &Transaction<'_>,
    rows: &[&PositionRow<'_>],
) -> Result<(), WriteError> {
    copy_rows(tx, &PositionRow::copy_into("stage_positions"), rows).await?;
    Ok(())
}

/// Bulk mode: every miss is a new position with the next id, `COPY`ed
/// straight into the (index-less) table. Returns their ids.
pub(super) async fn insert_new_positions(
    tx: &Transaction<'_>,
    misses: &[(PositionRow<'_>, PositionKey)],
    ids: &mut IdSequence,
    found: &mut Found,
) -> Result<HashSet<i64>, WriteError> {
    found.stats.positions_new = misses.len() as u64;
    let Found {
        position_ids,
        pending,
        ..
    } = found;
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

/// Merges the entries an incremental import appended to the pending list
/// of positions' `fen_hash` index (a GIN index with `fastupdate`, migration
/// 0017) into the index proper, sorted, so that lookups by `fen_hash` after
/// the import do not scan that list. Returns how many index pages the merge
/// removed from the list (0 when it was empty).
///
/// Why at the end of an import and not left to autovacuum: the list holds
/// up to `gin_pending_list_limit` (16 MiB) of entries that every lookup by
/// `fen_hash` reads in full until the next vacuum, which may be hours away
/// on a server whose autovacuum is busy.
pub async fn merge_pending_hash_entries(client: &Client) -> Result<i64, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT gin_clean_pending_list('positions_fen_hash_idx'::regclass)",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

//! The writer's steps on a sharded layout ([`crate::store::shards`]),
//! where positions, games, moves and `game_keys` are partitioned tables
//! whose partitions are `postgres_fdw` foreign tables. Three things that
//! a single node relies on do not cross a foreign table, and this module
//! replaces each:
//! * no unique index spans the partitions, so `ON CONFLICT` names no
//!   target: each shard's own unique index decides, on a key that holds
//!   the partition key (equal keys are on one shard);
//! * `RETURNING` (and `COPY` before PostgreSQL 16) sends rows to a shard
//!   one at a time, where `INSERT … SELECT` sends them in batches: new
//!   rows are inserted from the staging tables without `RETURNING`, and
//!   ids are read back or drawn beforehand;
//! * a commit is not atomic across shards (`postgres_fdw` commits each
//!   shard in turn), so a batch can be half committed. Nothing depends on
//!   it being whole: a game and its moves are on one shard (one remote
//!   transaction); positions are shared rows a rerun reuses; and a game's
//!   identity is claimed in `game_keys`, committed, before the game is
//!   written, so that a half-written batch is finished by its rerun
//!   (which finds its own claims) and never written twice (a claim is
//!   unique).
//!
//! Statements that may wait on another importer's row locks (the
//! get-or-create of positions, the claims) take their rows in one global
//! order, shard first, then key: PostgreSQL cannot see a deadlock that
//! spans two servers.

use std::collections::HashMap;

use foldhash::fast::RandomState;
use tokio_postgres::Transaction;

use super::{
    FileContext, TableRow,
    copy::{WriteError, copy_rows},
    draw_ids,
    existing::{Candidate, identity},
    layout::CapUpdate,
    positions::{Found, learn_ids, stage_positions},
    rows::{GameRow, MoveRow, PositionRow},
    to_i64,
};
use crate::{ingest::dedup::PositionKey, store::shards::Shards};

/// A row of `game_keys`: who claimed an identity, and for which game id.
#[derive(Debug, Clone, Copy)]
pub(super) struct GameKey {
    /// The id the game has, or will have once written.
    pub(super) game_id: i64,
    /// The input that claimed it (`None`: a game put on its own).
    pub(super) import_file_id: Option<i64>,
    /// Its number in that input.
    pub(super) game_number: Option<i64>,
}

/// The claims on `external_ids`, by `(external_id, lichess)`.
pub(super) async fn game_keys(
    tx: &Transaction<'_>,
    external_ids: &[&str],
) -> Result<HashMap<(String, bool), GameKey>, tokio_postgres::Error> {
    let rows = tx
        .query(
            "SELECT external_id, lichess, game_id, import_file_id, game_number
             FROM game_keys WHERE external_id = ANY($1)",
            &[&external_ids],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| {
            let key = GameKey {
                game_id: row.get("game_id"),
                import_file_id: row.get("import_file_id"),
                game_number: row.get("game_number"),
            };
            ((row.get("external_id"), row.get("lichess")), key)
        })
        .collect())
}

/// Claims the identity of each new game of `candidates` (those neither
/// claimed already nor extending a stored game) for `file` and its game
/// number, with an id drawn from the coordinator's sequence. A game whose
/// identity another importer claimed first is dropped from `candidates`:
/// it is present (that importer writes it). The claims commit with the
/// caller's transaction, before any game is written.
pub(super) async fn claim_games(
    tx: &Transaction<'_>,
    shards: Shards,
    file: &FileContext,
    candidates: &mut Vec<Candidate<'_>>,
) -> Result<(), tokio_postgres::Error> {
    let unclaimed: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].claimed.is_none() && candidates[i].extends.is_none())
        .collect();
    if unclaimed.is_empty() {
        return Ok(());
    }
    let drawn = draw_ids(tx, "games_id_seq", unclaimed.len()).await?;
    let mut external_ids = Vec::with_capacity(unclaimed.len());
    let mut lichess = Vec::with_capacity(unclaimed.len());
    let mut numbers = Vec::with_capacity(unclaimed.len());
    for &i in &unclaimed {
        let candidate = &candidates[i];
        let (is_lichess, id) = identity(candidate.source, &candidate.external_id);
        external_ids.push(id);
        lichess.push(is_lichess);
        numbers.push(to_i64(candidate.game.pos.game_number));
    }
    tx.execute(
        &format!(
            "INSERT INTO game_keys (external_id, lichess, game_id, import_file_id, game_number)
             SELECT u.external_id, u.lichess, u.game_id, $4, u.game_number
             FROM unnest($1::text[], $2::boolean[], $3::bigint[], $5::bigint[])
                 AS u(external_id, lichess, game_id, game_number)
             ORDER BY {}, u.external_id, u.lichess
             ON CONFLICT DO NOTHING",
            shards.shard_of("game_keys", "u.external_id")
        ),
        &[&external_ids, &lichess, &drawn, &file.file_id, &numbers],
    )
    .await?;
    let keys = game_keys(tx, &external_ids).await?;
    let mut lost = Vec::new();
    for (&i, id) in unclaimed.iter().zip(&drawn) {
        let candidate = &mut candidates[i];
        let (is_lichess, external_id) = identity(candidate.source, &candidate.external_id);
        match keys.get(&(external_id.to_owned(), is_lichess)) {
            Some(key) if key.game_id == *id => candidate.claimed = Some(*id),
            _ => lost.push(i),
        }
    }
    for i in lost.into_iter().rev() {
        candidates.remove(i);
    }
    Ok(())
}

/// The get-or-create of positions: `misses` inserted where absent (each
/// shard's unique index on `normalized_fen` decides), then every one's id
/// read back, in two statements that each send rows to a shard in batches.
pub(super) async fn get_or_create_positions(
    tx: &Transaction<'_>,
    shards: Shards,
    misses: &[(PositionRow<'_>, PositionKey)],
    found: &mut Found,
) -> Result<(), WriteError> {
    let Found {
        position_ids,
        pending,
        stats,
    } = found;
    if misses.is_empty() {
        return Ok(());
    }
    let staged: Vec<&PositionRow<'_>> = misses.iter().map(|(row, _)| row).collect();
    stage_positions(tx, &staged).await?;
    let inserted = tx
        .execute(
            &format!(
                "INSERT INTO positions ({columns}) SELECT {columns}
                 FROM stage_positions s ORDER BY {}, s.normalized_fen
                 ON CONFLICT DO NOTHING",
                shards.shard_of("positions", "s.fen_hash"),
                columns = PositionRow::columns_except(&["id"]),
            ),
            &[],
        )
        .await?;
    stats.positions_new = inserted;
    stats.positions_reused += misses.len() as u64 - inserted;
    let hashes: Vec<i64> = misses.iter().map(|(row, _)| row.fen_hash).collect();
    let fens: Vec<&str> = misses.iter().map(|(row, _)| row.normalized_fen).collect();
    let rows = tx
        .query(
            "SELECT id, normalized_fen FROM positions
             WHERE fen_hash = ANY($1) AND normalized_fen = ANY($2)",
            &[&hashes, &fens],
        )
        .await?;
    let by_text: HashMap<&str, PositionKey, RandomState> = misses
        .iter()
        .map(|(row, key)| (row.normalized_fen, *key))
        .collect();
    learn_ids(rows, &by_text, position_ids, pending);
    Ok(())
}

/// The staged games (`stage_games`, each with its claimed id) inserted,
/// in batches per shard.
pub(super) async fn insert_staged_games(tx: &Transaction<'_>) -> Result<u64, WriteError> {
    let columns = GameRow::columns_except(&[]);
    Ok(tx
        .execute(
            &format!("INSERT INTO games ({columns}) SELECT {columns} FROM stage_games ORDER BY id"),
            &[],
        )
        .await?)
}

/// The backfill's update of each game's cap and final position (see
/// [`Layout::update_caps`](super::layout::Layout::update_caps)): one
/// UPDATE per game, each sent to its shard whole (a join with the list
/// would read every shard's games), pipelined on the connection.
pub(super) async fn update_caps(
    tx: &Transaction<'_>,
    updates: &[CapUpdate],
) -> Result<Vec<i64>, tokio_postgres::Error> {
    let updates = updates
        .iter()
        .map(|(id, old_cap, cap, final_id)| async move {
            tx.execute(
                "UPDATE games SET positions_max_ply = $2, final_position_id = $3
             WHERE id = $1 AND positions_max_ply = $4",
                &[id, cap, final_id, old_cap],
            )
            .await
            .map(|n| (n == 1).then_some(*id))
        });
    Ok(futures_util::future::try_join_all(updates)
        .await?
        .into_iter()
        .flatten()
        .collect())
}

/// `rows` inserted into `moves` through the staging table, in batches
/// per shard.
pub(super) async fn insert_moves(
    tx: &Transaction<'_>,
    rows: &[MoveRow<'_>],
) -> Result<u64, WriteError> {
    copy_rows(tx, &MoveRow::copy_into("stage_moves"), rows).await?;
    let columns = MoveRow::columns_except(&[]);
    Ok(tx
        .execute(
            &format!("INSERT INTO moves ({columns}) SELECT {columns} FROM stage_moves"),
            &[],
        )
        .await?)
}

//! The writer's one choice of where a batch's rows go and how its new
//! positions and games get their ids: a single node in incremental mode or
//! in a bulk load, or the coordinator of shards. Each phase
//! ([`resolve_positions`](super::resolve_positions),
//! [`write_games`](super::write_games)) makes it once, and its steps that
//! differ are the methods of [`Layout`]; the steps themselves know no
//! layout.
//!
//! It must not decide which games are written: the phases do.

use std::collections::HashMap;

use tokio_postgres::Transaction;

use super::{
    BatchContext, FileContext, IdSequence, TableRow,
    copy::{WriteError, copy_rows},
    existing::Candidate,
    games::{insert_staged_games, stage_games},
    positions::{Found, ResolvedBatch, get_or_create_positions, insert_new_positions},
    rows::{GameRow, MoveRow, PositionRow},
    sharded,
};
use crate::{
    error::Error,
    explorer::{self, Fresh, memory::RunMemory},
    ingest::dedup::PositionKey,
    store::shards::Shards,
};

/// The ids of the games a batch inserted, by `(source, external_id)`.
pub(super) type Inserted = HashMap<(String, String), i64>;

/// A game stored under a smaller positions cap, to be given this run's
/// cap and final position: `(games.id, cap it was found with, new cap,
/// new final position)`.
pub(super) type CapUpdate = (i64, i32, Option<i32>, i64);

/// Where a batch's rows go and how its new games get their ids.
pub(super) enum Layout<'i> {
    /// One node, incremental mode: games are staged and inserted where
    /// absent, so that one another importer committed meanwhile is
    /// "already present" rather than an error.
    Incremental,
    /// One node, a bulk load, which has the database to itself: games get
    /// the next ids here and are `COPY`ed straight in.
    Bulk(&'i mut IdSequence),
    /// The coordinator of shards ([`sharded`]): games are inserted with the
    /// ids their identities were claimed with, in batches per shard.
    Sharded(Shards),
}

impl<'i> Layout<'i> {
    /// The layout of `file`'s database, in bulk mode when `ids` hands out
    /// game ids.
    pub(super) fn of(file: &FileContext, ids: Option<&'i mut IdSequence>) -> Result<Self, Error> {
        match (file.shards, ids) {
            (None, None) => Ok(Layout::Incremental),
            (None, Some(ids)) => Ok(Layout::Bulk(ids)),
            (Some(shards), None) => Ok(Layout::Sharded(shards)),
            (Some(shards), Some(_)) => Err(Error::bug(format!(
                "a bulk load on a sharded layout ({} shards), which the import refuses before \
                 it begins",
                shards.count()
            ))),
        }
    }

    /// Phase one: on the coordinator of shards, claims the identities of
    /// the batch's new games (a game another importer claimed first
    /// leaves `candidates`); one node has nothing to claim.
    pub(super) async fn claim_games(
        &self,
        tx: &Transaction<'_>,
        at: &BatchContext<'_>,
        candidates: &mut Vec<Candidate<'_>>,
    ) -> Result<(), Error> {
        if let Layout::Sharded(shards) = self {
            sharded::claim_games(tx, *shards, at.file, candidates)
                .await
                .map_err(|e| at.err("claiming the identities of new games", e))?;
        }
        Ok(())
    }

    /// Phase one: the batch's positions missing from the cache,
    /// get-or-created (incremental, shards) or given the next ids and
    /// copied (bulk). Returns the positions it created on one node, with
    /// the explorer's epoch read before when the counters are on.
    pub(super) async fn create_positions(
        &mut self,
        tx: &Transaction<'_>,
        at: &BatchContext<'_>,
        misses: &[(PositionRow<'_>, PositionKey)],
        found: &mut Found,
    ) -> Result<Fresh, Error> {
        let mut fresh = Fresh::default();
        if at.file.explorer && !matches!(self, Layout::Sharded(_)) {
            fresh.epoch = Fresh::epoch(tx).await?;
        }
        match self {
            Layout::Incremental => {
                fresh.ids = get_or_create_positions(tx, misses, found)
                    .await
                    .map_err(|e| at.err("get-or-create positions", e))?;
            }
            Layout::Bulk(ids) => {
                fresh.ids = insert_new_positions(tx, misses, ids, found)
                    .await
                    .map_err(|e| at.err("copying new positions", e))?;
            }
            Layout::Sharded(shards) => sharded::get_or_create_positions(tx, *shards, misses, found)
                .await
                .map_err(|e| at.err("get-or-create positions on the shards", e))?,
        }
        Ok(fresh)
    }

    /// Inserts the batch's new games, returning the ids of those inserted
    /// (a game another importer committed meanwhile is left out).
    pub(super) async fn insert_games(
        &mut self,
        tx: &Transaction<'_>,
        at: &BatchContext<'_>,
        rows: &mut [GameRow<'_>],
    ) -> Result<Inserted, Error> {
        let mut inserted = Inserted::new();
        if rows.is_empty() {
            return Ok(inserted);
        }
        match self {
            Layout::Incremental => {
                let staged = async {
                    stage_games(tx, rows).await?;
                    insert_staged_games(tx, None, &mut inserted).await
                };
                staged.await.map_err(|e| at.err("inserting games", e))?;
            }
            Layout::Bulk(ids) => copy_new_games(tx, rows, ids, &mut inserted)
                .await
                .map_err(|e| at.err("copying games", e))?,
            Layout::Sharded(_) => {
                for row in rows.iter() {
                    let id = row.id.ok_or_else(|| {
                        Error::bug(format!(
                            "{}: a game to insert on a sharded layout has no claimed id \
                             (the first phase claims every new game's identity)",
                            row.game.pos
                        ))
                    })?;
                    inserted.insert((row.source.to_owned(), row.external_id.clone()), id);
                }
                stage_games(tx, rows)
                    .await
                    .map_err(|e| at.err("staging games", e))?;
                sharded::insert_staged_games(tx)
                    .await
                    .map_err(|e| at.err("inserting games on the shards", e))?;
            }
        }
        Ok(inserted)
    }

    /// Gives each game of `updates` its new cap and final position if it
    /// still has the cap it was found with (another importer may have
    /// extended it since). Returns the ids of the games updated.
    pub(super) async fn update_caps(
        &self,
        tx: &Transaction<'_>,
        at: &BatchContext<'_>,
        updates: &[CapUpdate],
    ) -> Result<Vec<i64>, Error> {
        if let Layout::Sharded(_) = self {
            return sharded::update_caps(tx, updates)
                .await
                .map_err(|e| at.err("extending capped games on the shards", e));
        }
        let ids: Vec<i64> = updates.iter().map(|u| u.0).collect();
        let old_caps: Vec<i32> = updates.iter().map(|u| u.1).collect();
        let new_caps: Vec<Option<i32>> = updates.iter().map(|u| u.2).collect();
        let finals: Vec<i64> = updates.iter().map(|u| u.3).collect();
        Ok(tx
            .query(
                "UPDATE games g SET positions_max_ply = u.cap, final_position_id = u.final_id
                 FROM unnest($1::bigint[], $2::integer[], $3::integer[], $4::bigint[])
                     AS u(id, old_cap, cap, final_id)
                 WHERE g.id = u.id AND g.positions_max_ply = u.old_cap
                 RETURNING g.id",
                &[&ids, &old_caps, &new_caps, &finals],
            )
            .await
            .map_err(|e| at.err("extending capped games", e))?
            .iter()
            .map(|row| row.get("id"))
            .collect())
    }

    /// Takes the explorer counts of the games `ids` (extended: their
    /// counters are recounted whole with the batch's, since a ply past the
    /// old cap can change the move of a position's last visit).
    pub(super) async fn take_out_counts(
        &self,
        tx: &Transaction<'_>,
        ids: &[i64],
    ) -> Result<(), Error> {
        match self {
            // A sharded layout's counters are only ever added to: taking a
            // game's old counts out cannot lower another row's last_played.
            Layout::Sharded(_) => Err(Error::Config(format!(
                "{} games stored under a smaller positions cap would get their missing rows, \
                 which a sharded layout does with the explorer counters off only: run \
                 `pgnload db explorer disable`, import, then enable them again",
                ids.len()
            ))),
            Layout::Incremental | Layout::Bulk(_) => explorer::remove_games(tx, ids).await,
        }
    }

    /// Writes `rows` into `moves`, returning how many.
    pub(super) async fn insert_moves(
        &self,
        tx: &Transaction<'_>,
        at: &BatchContext<'_>,
        rows: &[MoveRow<'_>],
    ) -> Result<u64, Error> {
        if rows.is_empty() {
            return Ok(0);
        }
        match self {
            Layout::Sharded(_) => sharded::insert_moves(tx, rows)
                .await
                .map_err(|e| at.err("inserting moves on the shards", e)),
            Layout::Incremental | Layout::Bulk(_) => {
                copy_rows(tx, &MoveRow::copy_into("moves"), rows)
                    .await
                    .map_err(|e| at.err("copying moves", e))
            }
        }
    }

    /// How the batch's games are added to the explorer counters (a bulk
    /// load holds its rows across batches).
    pub(super) fn counting<'a>(
        &self,
        resolved: &'a ResolvedBatch,
        memory: &'a mut RunMemory,
    ) -> explorer::Counting<'a> {
        match self {
            Layout::Sharded(shards) => explorer::Counting::Sharded(*shards),
            Layout::Incremental | Layout::Bulk(_) => explorer::Counting::Shared {
                fresh: &resolved.fresh,
                memory: Some(memory),
                hold: matches!(self, Layout::Bulk(_)),
            },
        }
    }
}

/// Bulk mode: nobody else writes, and the batch's games were checked
/// against the table and each other, so they get ids here and go straight
/// in (the unique key would still refuse a duplicate).
async fn copy_new_games(
    tx: &Transaction<'_>,
    game_rows: &mut [GameRow<'_>],
    ids: &mut IdSequence,
    inserted: &mut Inserted,
) -> Result<(), WriteError> {
    for row in game_rows.iter_mut() {
        let id = ids.take();
        row.id = Some(id);
        inserted.insert((row.source.to_owned(), row.external_id.clone()), id);
    }
    ids.advance(tx).await?;
    copy_rows(tx, &GameRow::copy_into("games"), game_rows).await?;
    Ok(())
}

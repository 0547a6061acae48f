//! Phase two of a batch: its games, moves, rejects and conflicts, and the
//! input's checkpoint, in one transaction, so that the database never
//! holds games a checkpoint does not cover, or the reverse. It must not
//! create positions: phase one committed every one it needs.

use std::collections::HashMap;

use tokio_postgres::{Client, Transaction, types::Json};

use super::{
    BatchContext, BatchStats, FileContext, IdSequence, batch_bounds, batch_game,
    copy::{GameRow, MoveRow, RejectRow, WriteError, copy_rows},
    existing::{Candidate, Conflict, Extension, classify},
    players_events::{event_key, get_or_create_events, get_or_create_players},
    positions::ResolvedBatch,
    sharded, to_i64,
};
use crate::{
    chess::{
        model::{termination_label, username_key},
        replay::GameRecord,
        scope::recorded_cap,
    },
    error::Error,
    explorer::{
        self,
        memory::{Learnt, RunMemory},
    },
    ingest::{
        dedup::{KeyMap, PositionKey},
        pipeline::{Batch, Outcome, RejectedGame},
    },
};

/// The `COPY` of [`MoveRow`]s into `moves`.
pub(super) const COPY_MOVES: &str = "COPY moves (game_id, ply, position_id, position_after_id, uci, san, clock_ms, eval_cp, eval_mate, nag) FROM STDIN (FORMAT binary)";

/// A game of the batch that is new to the database (so far).
pub(super) struct NewGame<'a> {
    pub(super) game: &'a GameRecord,
    pub(super) source: &'a str,
    pub(super) external_id: String,
    /// The dedup key of each of the game's positions stored, in order.
    pub(super) keys: &'a [PositionKey],
    /// Present under a smaller cap: its rows past it are added instead.
    pub(super) extends: Option<Extension>,
    /// Sharded layout: the id its identity was claimed with.
    pub(super) claimed: Option<i64>,
}

/// Phase two of a batch, after [`resolve_positions`](super::resolve_positions): its games, moves and
/// rejects, and the input's checkpoint, in one transaction, so that the
/// database never holds games a checkpoint does not cover, or the reverse.
/// `ids` hands out game ids in bulk mode (`None`: incremental); `memory`
/// is what the run knows of its positions' explorer counters, which the
/// batch reads (what it learnt comes back in the [`WrittenBatch`], for the
/// caller to remember now that it committed). On error nothing of this
/// phase was committed.
pub async fn write_games(
    client: &mut Client,
    batch: &Batch,
    file: &FileContext,
    resolved: &ResolvedBatch,
    ids: Option<&mut IdSequence>,
    memory: &mut RunMemory,
) -> Result<WrittenBatch, Error> {
    let at = BatchContext { batch, file };
    // A bulk load holds its explorer counters' rows across batches.
    let bulk = ids.is_some();
    let (games_through, end_offset) = batch_bounds(batch, file)?;
    let mut stats = BatchStats {
        read: batch.outcomes.len() as u64 + batch.filtered,
        filtered: batch.filtered,
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

    // Games present under a smaller positions cap get their missing rows
    // (the backfill); the others are inserted.
    let (extensions, new_games): (Vec<NewGame<'_>>, Vec<NewGame<'_>>) = new_games
        .into_iter()
        .partition(|game| game.extends.is_some());

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
        .map(|new| game_row(new, position_ids, &player_ids, &event_ids, Some(file)))
        .collect::<Result<Vec<GameRow<'_>>, Error>>()?;
    let mut inserted: HashMap<(String, String), i64> = HashMap::new();
    if !game_rows.is_empty() {
        match ids {
            None if file.shards.is_some() => {
                for row in &game_rows {
                    let id = row.id.ok_or_else(|| {
                        Error::Internal(format!(
                            "{}: a game to insert on a sharded layout has no claimed id \
                             (the first phase claims every new game's identity)",
                            row.game.pos
                        ))
                    })?;
                    inserted.insert((row.source.to_owned(), row.external_id.clone()), id);
                }
                stage_games(&tx, &game_rows)
                    .await
                    .map_err(|e| at.err("staging games", e))?;
                sharded::insert_staged_games(&tx, GAME_COLUMNS, STAGED_GAME_VALUES)
                    .await
                    .map_err(|e| at.err("inserting games on the shards", e))?;
            }
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
    stats.present = stats.read - stats.imported - stats.rejected - stats.filtered;
    let extended = extend_games(&tx, &at, &extensions, position_ids).await?;
    stats.backfilled = extended.len() as u64;
    if file.explorer && !extended.is_empty() && file.shards.is_some() {
        // A sharded layout's counters are only ever added to: taking a
        // game's old counts out cannot lower another row's last_played.
        return Err(Error::Config(format!(
            "{} games stored under a smaller positions cap would get their missing rows, \
             which a sharded layout does with the explorer counters off only: run \
             `pgnload db explorer disable`, import, then enable them again",
            extended.len()
        )));
    }
    if file.explorer && !extended.is_empty() {
        // Their counters are recounted whole below: a ply past the old cap
        // can change the move of a position's last visit.
        let ids: Vec<i64> = extended.iter().map(|(id, _, _)| *id).collect();
        explorer::remove_games(&tx, &ids).await?;
    }

    // 4. Moves of the inserted games (and the added ones of the extended
    //    games), the rejects and the conflicts.
    let inserted_games = game_rows.iter().filter_map(|row| {
        let id = inserted.get(&(row.source.to_owned(), row.external_id.clone()))?;
        Some((*id, row.game, row.keys, 0))
    });
    let extended_games = extended
        .iter()
        .map(|(id, new, from)| (*id, new.game, new.keys, *from));
    let move_rows = move_rows(inserted_games.chain(extended_games), position_ids)?;
    if !move_rows.is_empty() {
        stats.moves = match file.shards {
            None => copy_rows(&tx, COPY_MOVES, &move_rows)
                .await
                .map_err(|e| at.err("copying moves", e))?,
            Some(_) => sharded::insert_moves(&tx, &move_rows)
                .await
                .map_err(|e| at.err("inserting moves on the shards", e))?,
        };
    }
    // The explorer counters of the games inserted, if the database keeps
    // them (both modes: the counters keep their key during a bulk load,
    // which holds the rows in memory and records the games instead).
    let mut learnt = Learnt::default();
    if file.explorer {
        let counted = game_rows
            .iter()
            .filter_map(|row| {
                let id = inserted.get(&(row.source.to_owned(), row.external_id.clone()))?;
                Some((*id, row.game, row.keys))
            })
            .chain(
                extended
                    .iter()
                    .map(|(id, new, _)| (*id, new.game, new.keys)),
            );
        let counting = match file.shards {
            Some(shards) => explorer::Counting::Sharded(shards),
            None => explorer::Counting::Shared {
                fresh: &resolved.fresh,
                memory: Some(memory),
                hold: bulk,
            },
        };
        learnt = explorer::add_batch(&tx, counted, position_ids, counting).await?;
    }
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
    Ok(WrittenBatch {
        stats,
        conflicts,
        learnt,
    })
}

/// The games [`resolve_positions`](super::resolve_positions) kept, looked up again by identity
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
                extends: None,
                claimed: None,
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
                extends: c.extends,
                claimed: c.claimed,
            })
        })
        .collect();
    Ok((new_games, conflicts))
}

/// The `games` row of a new game: its positions, players and event
/// resolved to ids. `file`: the input it was read from, with its ply cap
/// (`None`: a game put on its own, which has no input, game number nor
/// offset to record, and all its plies).
pub(super) fn game_row<'a>(
    new: &NewGame<'a>,
    position_ids: &KeyMap<i64>,
    player_ids: &HashMap<(&'a str, String), i64>,
    event_ids: &HashMap<(&'a str, String), i64>,
    file: Option<&FileContext>,
) -> Result<GameRow<'a>, Error> {
    let game = new.game;
    let id_of = |i: usize| id_at(new.keys, position_ids, i);
    // The last position stored: the game's final position, or under a cap
    // the one after its last moves row (see sql/0010_positions_cap.sql).
    let stored = new.keys.len().saturating_sub(1);
    let (Some(initial_id), Some(final_id)) = (id_of(0), id_of(stored)) else {
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
        id: new.claimed,
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
        file_id: file.map(|f| f.file_id),
        game_number: file.map(|_| to_i64(game.pos.game_number)),
        byte_offset: file.map(|_| to_i64(game.pos.byte_offset)),
        positions_max_ply: file.and_then(|f| cap_column(f, game)),
    })
}

/// The `moves` rows of `games`: each `(games.id, game, position keys,
/// plies it already has rows for)`, rows for the rest of its stored plies.
pub(super) fn move_rows<'a>(
    games: impl Iterator<Item = (i64, &'a GameRecord, &'a [PositionKey], usize)>,
    position_ids: &KeyMap<i64>,
) -> Result<Vec<MoveRow<'a>>, Error> {
    let mut rows = Vec::new();
    for (game_id, game, keys, from) in games {
        let id_of = |i: usize| id_at(keys, position_ids, i);
        // Rows for the plies whose positions are stored (a cap's first N).
        let stored = keys.len().saturating_sub(1);
        for (i, ply) in game.plies.iter().enumerate().take(stored).skip(from) {
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
             games_rejected = games_rejected + $6, games_filtered = games_filtered + $8,
             updated_at = now()
         WHERE id = $1 AND bytes_done = $7",
            &[
                &file.file_id,
                &games_through,
                &end_offset,
                &to_i64(stats.imported),
                &to_i64(stats.present),
                &to_i64(stats.rejected),
                &file.expected_bytes_done,
                &to_i64(stats.filtered),
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
    /// What the run's [`RunMemory`] learns from it.
    pub learnt: Learnt,
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

/// Incremental mode: staged, then `INSERT … ON CONFLICT DO NOTHING
/// RETURNING`, so a game another importer committed meanwhile is "already
/// present" rather than an error.
async fn insert_games_if_absent(
    tx: &Transaction<'_>,
    game_rows: &[GameRow<'_>],
    inserted: &mut HashMap<(String, String), i64>,
) -> Result<(), WriteError> {
    stage_games(tx, game_rows).await?;
    insert_staged_games(tx, None, inserted).await
}

/// The columns of `games` every writer fills, in [`GameRow`]'s order after
/// its id.
const GAME_COLUMNS: &str = "source, external_id, event_id, site, round, white_player_id, black_player_id, white_elo, black_elo, white_rating_diff, black_rating_diff, time_control, time_initial_s, time_increment_s, variant, termination, result, eco, opening, started_at, initial_position_id, final_position_id, ply_count, moves, start_fen, tags, import_file_id, game_number, byte_offset, positions_max_ply";

/// [`GAME_COLUMNS`] as `stage_games` holds them (its enums as text).
const STAGED_GAME_VALUES: &str = "source, external_id, event_id, site, round,
                 white_player_id, black_player_id, white_elo, black_elo,
                 white_rating_diff, black_rating_diff, time_control, time_initial_s,
                 time_increment_s, variant::game_variant, termination::game_termination,
                 result, eco, opening, started_at,
                 initial_position_id, final_position_id, ply_count, moves, start_fen, tags,
                 import_file_id, game_number, byte_offset, positions_max_ply";

/// `COPY`s `game_rows` into `stage_games` (emptied at commit).
pub(super) async fn stage_games(
    tx: &Transaction<'_>,
    game_rows: &[GameRow<'_>],
) -> Result<(), WriteError> {
    copy_rows(tx, "COPY stage_games FROM STDIN (FORMAT binary)", game_rows).await?;
    Ok(())
}

/// Inserts the staged games with `ON CONFLICT DO NOTHING RETURNING`,
/// recording the ids of those inserted in `inserted`. `id`: the id to give
/// the one staged game (`game put` replacing a game keeps its id), else
/// the table's identity decides.
pub(super) async fn insert_staged_games(
    tx: &Transaction<'_>,
    id: Option<i64>,
    inserted: &mut HashMap<(String, String), i64>,
) -> Result<(), WriteError> {
    let values = STAGED_GAME_VALUES;
    let tail = "FROM stage_games ORDER BY source, external_id
             ON CONFLICT (source, external_id) DO NOTHING
             RETURNING id, source, external_id";
    let rows = match id {
        None => {
            let sql = format!("INSERT INTO games ({GAME_COLUMNS}) SELECT {values} {tail}");
            tx.query(&sql, &[]).await?
        }
        Some(id) => {
            let sql = format!(
                "INSERT INTO games (id, {GAME_COLUMNS}) SELECT $1::bigint, {values} {tail}"
            );
            tx.query(&sql, &[&id]).await?
        }
    };
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
        &format!("COPY games (id, {GAME_COLUMNS}) FROM STDIN (FORMAT binary)"),
        game_rows,
    )
    .await?;
    Ok(())
}

/// `games.positions_max_ply` of `game` imported under `file`'s cap.
fn cap_column(file: &FileContext, game: &GameRecord) -> Option<i32> {
    // Below the game's ply count, which ply_number takes.
    recorded_cap(file.positions_max_ply, game.plies.len()).map(|cap| ply_number(cap as usize))
}

/// The backfill of games present under a smaller positions cap: each gets
/// the final position and cap of this run (`file`), if it still has the
/// cap it was found with (another importer may have extended it since;
/// then it is left to that one). Returns the games this transaction
/// extended, with their ids and the plies they had rows for, whose rows
/// past those the caller adds.
async fn extend_games<'g, 'a>(
    tx: &Transaction<'_>,
    at: &BatchContext<'_>,
    extensions: &'g [NewGame<'a>],
    position_ids: &KeyMap<i64>,
) -> Result<Vec<(i64, &'g NewGame<'a>, usize)>, Error> {
    if extensions.is_empty() {
        return Ok(Vec::new());
    }
    let mut ids = Vec::with_capacity(extensions.len());
    let mut old_caps = Vec::with_capacity(extensions.len());
    let mut new_caps: Vec<Option<i32>> = Vec::with_capacity(extensions.len());
    let mut finals = Vec::with_capacity(extensions.len());
    let mut by_id = HashMap::with_capacity(extensions.len());
    for new in extensions {
        let Some(extends) = new.extends else {
            continue;
        };
        let stored = new.keys.len().saturating_sub(1);
        let final_id = id_at(new.keys, position_ids, stored).ok_or_else(|| unresolved(new.game))?;
        let from = usize::try_from(extends.stored_cap).map_err(|_| {
            Error::Internal(format!(
                "game {}: positions_max_ply {} is negative (the column's check refuses it)",
                extends.game_id, extends.stored_cap
            ))
        })?;
        ids.push(extends.game_id);
        old_caps.push(extends.stored_cap);
        new_caps.push(cap_column(at.file, new.game));
        finals.push(final_id);
        by_id.insert(extends.game_id, (new, from));
    }
    let updated: Vec<i64> = if at.file.shards.is_none() {
        tx.query(
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
        .map(|row| row.get(0))
        .collect()
    } else {
        // On shards, one UPDATE per game, each sent to its shard whole
        // (a join with the list would read every shard's games);
        // pipelined on the connection.
        let updates = ids.iter().zip(&old_caps).zip(&new_caps).zip(&finals).map(
            |(((id, old_cap), cap), final_id)| async move {
                tx.execute(
                    "UPDATE games SET positions_max_ply = $2, final_position_id = $3
                     WHERE id = $1 AND positions_max_ply = $4",
                    &[id, cap, final_id, old_cap],
                )
                .await
                .map(|n| (n == 1).then_some(*id))
            },
        );
        futures_util::future::try_join_all(updates)
            .await
            .map_err(|e| at.err("extending capped games on the shards", e))?
            .into_iter()
            .flatten()
            .collect()
    };
    let mut extended: Vec<(i64, &NewGame<'a>, usize)> = updated
        .into_iter()
        .filter_map(|id| {
            let &(new, from) = by_id.get(&id)?;
            Some((id, new, from))
        })
        .collect();
    extended.sort_unstable_by_key(|(id, _, _)| *id);
    Ok(extended)
}

/// A ply number or count as the `integer` columns hold it.
pub(super) fn ply_number(n: usize) -> i32 {
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

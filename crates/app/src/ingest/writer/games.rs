//! Phase two of a batch: its games, moves, rejects and conflicts, and the
//! input's checkpoint, in one transaction, so that the database never
//! holds games a checkpoint does not cover, or the reverse. It must not
//! create positions: phase one committed every one it needs.

use std::collections::HashMap;

use tokio_postgres::{Client, Transaction, types::Json};

use super::{
    BatchContext, BatchStats, FileContext, IdSequence, RejectCounts, TableRow, batch_bounds,
    batch_game,
    copy::{WriteError, copy_rows},
    existing::{Candidate, Conflict, Extension, classify},
    layout::{CapUpdate, Inserted, Layout},
    players_events::{event_key, get_or_create_events, get_or_create_players},
    positions::ResolvedBatch,
    rows::{GameRow, MoveRow, RejectRow},
    to_i64,
};
use crate::{
    chess::{
        model::{GameResult, termination_label, username_key},
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
        pipeline::{Batch, Outcome},
    },
};

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

/// A game of the batch that got rows in this transaction: `(games.id, the
/// game, its position keys, the plies it already had rows for)` (0 for a
/// game inserted, the old cap for a game extended).
type Written<'a> = (i64, &'a GameRecord, &'a [PositionKey], usize);

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
    let mut layout = Layout::of(file, ids)?;
    let bounds = batch_bounds(batch, file)?;
    let position_ids = &resolved.position_ids;
    let tx = client
        .transaction()
        .await
        .map_err(|e| at.err("starting a transaction", e))?;

    // 1. The resolved games already in the database, again: another
    //    importer, or the previous batch, may have committed some since
    //    their positions were resolved.
    let (new_games, extensions, conflicts) = recheck_games(&tx, batch, file, resolved)
        .await
        .map_err(|e| at.err("looking up existing games", e))?;

    // 2. Players and events, and 3. games.
    let game_rows = insert_games(&tx, &at, &mut layout, &new_games, position_ids).await?;
    let extended = extend_games(&tx, &at, &layout, &extensions, position_ids).await?;

    // 4. Moves of the inserted games (and the added ones of the extended
    //    games), their explorer counters, the rejects and the conflicts.
    let written = written_in_id_order(&game_rows, &extended);
    let move_rows = move_rows(written.iter().copied(), position_ids)?;
    let moves = layout.insert_moves(&tx, &at, &move_rows).await?;
    let learnt = if file.explorer {
        let counted = written.iter().map(|&(id, game, keys, _)| (id, game, keys));
        let counting = layout.counting(resolved, memory);
        explorer::add_batch(&tx, counted, position_ids, counting).await?
    } else {
        Learnt::default()
    };
    let (rejected, rejects) = copy_rejects(&tx, &at).await?;
    record_conflicts(&tx, batch, file, &conflicts)
        .await
        .map_err(|e| at.err("recording conflicts", e))?;

    // 5. The checkpoint, in the same transaction.
    let read = batch.outcomes.len() as u64 + batch.filtered;
    let imported = game_rows.len() as u64;
    let stats = BatchStats {
        read,
        imported,
        present: read - imported - rejected - batch.filtered,
        rejected,
        filtered: batch.filtered,
        moves,
        conflicts: conflicts.len() as u64,
        backfilled: extended.len() as u64,
        rejects,
        ..resolved.stats
    };
    advance_checkpoint(&tx, file, bounds, &stats)
        .await
        .map_err(|e| at.err("updating the checkpoint", e))??;
    tx.commit().await.map_err(|e| at.err("committing", e))?;
    Ok(WrittenBatch {
        stats,
        conflicts,
        learnt,
    })
}

/// The games whose moves a batch writes: the inserted games in id order,
/// then the extended ones. Why in id order: the ids were given in the
/// insert's key order, not the batch's, and rows copied out of key order
/// split the leaves of moves' primary key in the middle, leaving them half
/// empty (54 bytes a row against 29 in order, measured at 20,000 games).
fn written_in_id_order<'w>(
    inserted: &'w [(i64, GameRow<'_>)],
    extended: &[(i64, &'w NewGame<'_>, usize)],
) -> Vec<Written<'w>> {
    let mut written: Vec<Written<'w>> = Vec::with_capacity(inserted.len() + extended.len());
    written.extend(
        inserted
            .iter()
            .map(|(id, row)| (*id, row.game, row.keys, 0)),
    );
    written.sort_unstable_by_key(|&(id, ..)| id);
    written.extend(
        extended
            .iter()
            .map(|(id, new, from)| (*id, new.game, new.keys, *from)),
    );
    written
}

/// Steps 2 and 3 of [`write_games`]: the players and events of the
/// `new_games`, then the games, as `layout` inserts them. Returns the
/// games inserted, with their ids, in batch order (a game another importer
/// committed meanwhile is left out: it is present).
async fn insert_games<'a>(
    tx: &Transaction<'_>,
    at: &BatchContext<'_>,
    layout: &mut Layout<'_>,
    new_games: &[NewGame<'a>],
    position_ids: &KeyMap<i64>,
) -> Result<Vec<(i64, GameRow<'a>)>, Error> {
    let player_ids = get_or_create_players(tx, new_games)
        .await
        .map_err(|e| at.err("get-or-create players", e))?;
    let event_ids = get_or_create_events(tx, new_games)
        .await
        .map_err(|e| at.err("get-or-create events", e))?;
    let mut game_rows = new_games
        .iter()
        .map(|new| game_row(new, position_ids, &player_ids, &event_ids, Some(at.file)))
        .collect::<Result<Vec<GameRow<'_>>, Error>>()?;
    let inserted = layout.insert_games(tx, at, &mut game_rows).await?;
    Ok(game_rows
        .into_iter()
        .filter_map(|row| {
            let id = inserted.get(&(row.source.to_owned(), row.external_id.clone()))?;
            Some((*id, row))
        })
        .collect())
}

/// Copies the batch's rejected games into `import_rejects`; returns how
/// many.
async fn copy_rejects(
    tx: &Transaction<'_>,
    at: &BatchContext<'_>,
) -> Result<(u64, RejectCounts), Error> {
    let mut kinds = RejectCounts::default();
    let rows: Vec<RejectRow<'_>> = (at.batch.outcomes.iter())
        .filter_map(|outcome| match outcome {
            Outcome::Rejected(r) => Some({
                kinds.count(r.rejection.reason.kind());
                RejectRow {
                    file_id: at.file.file_id,
                    game_number: to_i64(r.rejection.pos.game_number),
                    byte_offset: to_i64(r.rejection.pos.byte_offset),
                    reason: r.rejection.reason.to_string(),
                    raw: &r.raw,
                    raw_length: to_i64(r.total_len),
                }
            }),
            Outcome::Game(_) => None,
        })
        .collect();
    if !rows.is_empty() {
        copy_rows(tx, &RejectRow::copy_into("import_rejects"), &rows)
            .await
            .map_err(|e| at.err("copying rejects", e))?;
    }
    Ok((rows.len() as u64, kinds))
}

/// The games [`resolve_positions`](super::resolve_positions) kept, looked up again by identity
/// (another importer, or the previous batch, may have committed some
/// since): the ones still new, with their position keys; the ones present
/// under a smaller positions cap, which get their missing rows instead
/// (the backfill); and the batch's conflicts, the first phase's and the
/// ones found now.
async fn recheck_games<'b>(
    tx: &Transaction<'_>,
    batch: &'b Batch,
    file: &'b FileContext,
    resolved: &'b ResolvedBatch,
) -> Result<(Vec<NewGame<'b>>, Vec<NewGame<'b>>, Vec<Conflict>), tokio_postgres::Error> {
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
    let (fresh, late_conflicts) = classify(tx, candidates, file).await?;
    let (extensions, new_games) = fresh
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
        .partition(|game| game.extends.is_some());
    let conflicts = (resolved.conflicts.iter().cloned())
        .chain(late_conflicts)
        .collect();
    Ok((new_games, extensions, conflicts))
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
    let (Some(initial_position_id), Some(final_position_id)) = (id_of(0), id_of(stored)) else {
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
    let meta = &game.meta;
    Ok(GameRow {
        id: new.claimed,
        source: new.source,
        external_id: new.external_id.clone(),
        event_id: event,
        site: meta.site.as_deref(),
        round: meta.round.as_deref(),
        white_player_id: player(&meta.white.name),
        black_player_id: player(&meta.black.name),
        white_elo: meta.white.elo,
        black_elo: meta.black.elo,
        white_rating_diff: meta.white.rating_diff,
        black_rating_diff: meta.black.rating_diff,
        time_control: meta.time_control.as_deref(),
        time_initial_s: meta.clock.map(|c| c.initial_s),
        time_increment_s: meta.clock.map(|c| c.increment_s),
        variant: game.variant.as_db_label(),
        termination: meta.termination.as_deref().map(termination_label),
        result: game.result.and_then(GameResult::score),
        eco: meta.eco.as_deref(),
        opening: meta.opening.as_deref(),
        started_at: meta.started_at,
        initial_position_id,
        final_position_id,
        ply_count: ply_number(game.plies.len()),
        moves: game.encoded_moves(),
        start_fen: game.start_fen.as_deref(),
        tags: Json(serde_json::Value::Object(game.stored_tags_json())),
        import_file_id: file.map(|f| f.file_id),
        game_number: file.map(|_| to_i64(game.pos.game_number)),
        byte_offset: file.map(|_| to_i64(game.pos.byte_offset)),
        positions_max_ply: file.and_then(|f| cap_column(f, game)),
        annotations: game.notes.to_json().map(Json),
        keys: new.keys,
        game,
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
            let (Some(position_id), Some(position_after_id)) = (id_of(i), id_of(i + 1)) else {
                return Err(unresolved(game));
            };
            rows.push(MoveRow {
                game_id,
                ply: ply_number(i + 1),
                position_id,
                position_after_id,
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
    if conflicts.is_empty() {
        return Ok(());
    }
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

/// `COPY`s `game_rows` into `stage_games` (emptied at commit).
pub(super) async fn stage_games(
    tx: &Transaction<'_>,
    game_rows: &[GameRow<'_>],
) -> Result<(), WriteError> {
    copy_rows(tx, &GameRow::copy_into("stage_games"), game_rows).await?;
    Ok(())
}

/// Inserts the staged games with `ON CONFLICT DO NOTHING RETURNING`,
/// recording the ids of those inserted in `inserted`. `id`: the id to give
/// the one staged game (`game put` replacing a game keeps its id), else
/// the table's identity decides.
pub(super) async fn insert_staged_games(
    tx: &Transaction<'_>,
    id: Option<i64>,
    inserted: &mut Inserted,
) -> Result<(), WriteError> {
    let columns = GameRow::columns_except(&["id"]);
    let tail = "FROM stage_games ORDER BY source, external_id
             ON CONFLICT (source, external_id) DO NOTHING
             RETURNING id, source, external_id";
    let rows = match id {
        None => {
            let sql = format!("INSERT INTO games ({columns}) SELECT {columns} {tail}");
            tx.query(&sql, &[]).await?
        }
        Some(id) => {
            let sql =
                format!("INSERT INTO games (id, {columns}) SELECT $1::bigint, {columns} {tail}");
            tx.query(&sql, &[&id]).await?
        }
    };
    for row in rows {
        inserted.insert((row.get("source"), row.get("external_id")), row.get("id"));
    }
    Ok(())
}

/// `games.positions_max_ply` of `game` imported under `file`'s cap.
fn cap_column(file: &FileContext, game: &GameRecord) -> Option<i32> {
    // Below the game's ply count, which ply_number takes.
    recorded_cap(file.positions_max_ply, game.plies.len()).map(|cap| ply_number(cap as usize))
}

/// The backfill of games present under a smaller positions cap: each gets
/// the final position and cap of this run, if it still has the cap it was
/// found with (another importer may have extended it since; then it is
/// left to that one), and, if the database keeps them, its explorer
/// counts are taken out, to be counted again whole with the batch's.
/// Returns the games this transaction extended, with their ids and the
/// plies they had rows for, whose rows past those the caller adds.
async fn extend_games<'g, 'a>(
    tx: &Transaction<'_>,
    at: &BatchContext<'_>,
    layout: &Layout<'_>,
    extensions: &'g [NewGame<'a>],
    position_ids: &KeyMap<i64>,
) -> Result<Vec<(i64, &'g NewGame<'a>, usize)>, Error> {
    if extensions.is_empty() {
        return Ok(Vec::new());
    }
    let mut updates: Vec<CapUpdate> = Vec::with_capacity(extensions.len());
    let mut by_id = HashMap::with_capacity(extensions.len());
    for new in extensions {
        let Some(extends) = new.extends else {
            continue;
        };
        let stored = new.keys.len().saturating_sub(1);
        let final_id = id_at(new.keys, position_ids, stored).ok_or_else(|| unresolved(new.game))?;
        let from = usize::try_from(extends.stored_cap).map_err(|_| {
            Error::inconsistent(format!(
                "game {}: positions_max_ply {} is negative (the column's check refuses it)",
                extends.game_id, extends.stored_cap
            ))
        })?;
        let new_cap = cap_column(at.file, new.game);
        updates.push((extends.game_id, extends.stored_cap, new_cap, final_id));
        by_id.insert(extends.game_id, (new, from));
    }
    let mut grown: Vec<(i64, &NewGame<'a>, usize)> = layout
        .update_caps(tx, at, &updates)
        .await?
        .into_iter()
        .filter_map(|id| {
            let &(new, from) = by_id.get(&id)?;
            Some((id, new, from))
        })
        .collect();
    grown.sort_unstable_by_key(|(id, _, _)| *id);
    if at.file.explorer && !grown.is_empty() {
        let ids: Vec<i64> = grown.iter().map(|(id, _, _)| *id).collect();
        layout.take_out_counts(tx, &ids).await?;
    }
    Ok(grown)
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
    Error::bug(format!(
        "{}: a position of this game has no id after get-or-create",
        game.pos
    ))
}

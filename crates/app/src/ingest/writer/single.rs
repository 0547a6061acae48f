//! One game written inside a transaction its caller owns (`game put`),
//! with the same steps as a batch's: positions get-or-created as in
//! incremental mode, players and events get-or-created, the `games` row
//! staged and inserted, its moves copied, its explorer counters added. The
//! caller decides, between [`prepare_game`] and [`PreparedGame::insert`],
//! whether the game replaces one (taking the old one out first) or is the
//! same as the one stored ([`PreparedGame::same_as`]).
//!
//! It must not commit: the caller's transaction holds the whole put.

use std::{collections::HashMap, slice};

use tokio_postgres::Transaction;

use super::{
    BatchStats, PendingIds, TableRow,
    copy::{WriteError, copy_rows},
    games::{NewGame, game_row, insert_staged_games, move_rows, stage_games},
    players_events::{get_or_create_events, get_or_create_players},
    positions::{Found, Unresolved, collect_positions, get_or_create_positions},
    rows::{GameRow, MoveRow},
    write_err,
};
use crate::{
    chess::replay::GameRecord,
    error::Error,
    explorer,
    ingest::dedup::{KeyMap, PositionCache, PositionKey},
};

/// A game whose positions, players and event are in the database (in the
/// caller's transaction) and whose `games` row is staged, not yet inserted.
pub struct PreparedGame<'a> {
    row: GameRow<'a>,
    position_ids: KeyMap<i64>,
    /// The positions it created, in the caller's transaction.
    fresh: explorer::Fresh,
    /// Positions this game added to `positions` (none were there before).
    pub positions_new: u64,
}

/// What [`PreparedGame::insert`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InsertedGame {
    /// `games.id`.
    pub id: i64,
    /// Move rows written.
    pub moves: u64,
}

/// Resolves `game`'s positions (`keys`: their dedup keys, in order),
/// players and event to ids in `tx`, creating the missing ones, and stages
/// its `games` row under the key `(source, external_id)`. The connection
/// must have its staging tables ([`super::prepare_connection`]).
pub async fn prepare_game<'a>(
    tx: &Transaction<'_>,
    game: &'a GameRecord,
    keys: &'a [PositionKey],
    source: &'a str,
    external_id: String,
) -> Result<PreparedGame<'a>, Error> {
    let err =
        |what: &'static str| move |e: WriteError| write_err(format!("{what} of {}", game.pos), e);
    let mut stats = BatchStats::default();
    // No cache: one game's positions are looked up in the database.
    let Unresolved {
        position_ids,
        misses,
    } = collect_positions(
        std::iter::once((game, keys)),
        &mut PositionCache::new(0),
        &mut stats,
    );
    let mut found = Found {
        position_ids,
        pending: PendingIds::new(),
        stats,
    };
    let epoch = explorer::Fresh::epoch(tx).await?;
    let created = get_or_create_positions(tx, &misses, &mut found)
        .await
        .map_err(err("get-or-create the positions"))?;
    let Found {
        position_ids,
        stats,
        ..
    } = found;
    let new = NewGame {
        game,
        source,
        external_id,
        keys,
        // A put game replaces any stored one whole, never extends it.
        extends: None,
        claimed: None,
    };
    let players = get_or_create_players(tx, slice::from_ref(&new))
        .await
        .map_err(err("get-or-create the players"))?;
    let events = get_or_create_events(tx, slice::from_ref(&new))
        .await
        .map_err(err("get-or-create the event"))?;
    let row = game_row(&new, &position_ids, &players, &events, None)?;
    stage_games(tx, slice::from_ref(&row))
        .await
        .map_err(err("staging the game"))?;
    Ok(PreparedGame {
        row,
        position_ids,
        fresh: explorer::Fresh {
            epoch,
            ids: created,
        },
        positions_new: stats.positions_new,
    })
}

impl PreparedGame<'_> {
    /// Whether the game `id` in the database is this one: the same row
    /// and the same moves rows. Where and when it was read, and its source
    /// label, do not count: an import recognizes a game whatever its label.
    pub async fn same_as(&self, tx: &Transaction<'_>, id: i64) -> Result<bool, Error> {
        let err = |what: &'static str| crate::store::db::db_err(format!("{what} (game {id})"));
        // Every column a writer fills but the id, the label, the origin
        // (import_file_id, game_number, byte_offset) and the cap.
        let compared = GameRow::COLUMNS.into_iter().filter(|c| {
            ![
                "id",
                "source",
                "import_file_id",
                "game_number",
                "byte_offset",
                "positions_max_ply",
            ]
            .contains(c)
        });
        let columns = |t: &str| {
            (compared.clone().map(|c| format!("{t}.{c}")))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let same_row: bool = tx
            .query_opt(
                &format!(
                    "SELECT ({}) IS NOT DISTINCT FROM ({}) AS same FROM games g, stage_games s
                     WHERE g.id = $1",
                    columns("g"),
                    columns("s")
                ),
                &[&id],
            )
            .await
            .map_err(err("comparing the game's row"))?
            .is_some_and(|row| row.get("same"));
        if !same_row {
            return Ok(false);
        }
        let stored = tx
            .query(
                "SELECT ply, position_id, position_after_id, uci, san, clock_ms, eval_cp,
                        eval_mate, nag
                 FROM moves WHERE game_id = $1 ORDER BY ply",
                &[&id],
            )
            .await
            .map_err(err("reading the game's moves"))?;
        let ours = self.move_rows(id)?;
        Ok(stored.len() == ours.len()
            && stored.iter().zip(&ours).all(|(s, m)| {
                s.get::<_, i32>("ply") == m.ply
                    && s.get::<_, i64>("position_id") == m.position_id
                    && s.get::<_, i64>("position_after_id") == m.position_after_id
                    && s.get::<_, &str>("uci") == m.uci
                    && s.get::<_, &str>("san") == m.san
                    && s.get::<_, Option<i32>>("clock_ms") == m.clock_ms
                    && s.get::<_, Option<i32>>("eval_cp") == m.eval_cp
                    && s.get::<_, Option<i32>>("eval_mate") == m.eval_mate
                    && s.get::<_, Option<i16>>("nag") == m.nag
            }))
    }

    /// Inserts the staged game (as `id` when given: a replaced game keeps
    /// its id, else the table's identity decides), its moves, and, if
    /// `explorer`, its explorer counters. `None` if a game with its key is
    /// already in `games` (nothing was written then).
    pub async fn insert(
        &self,
        tx: &Transaction<'_>,
        id: Option<i64>,
        explorer: bool,
    ) -> Result<Option<InsertedGame>, Error> {
        let game = self.row.game;
        let err = |what: &'static str| {
            move |e: WriteError| write_err(format!("{what} of {}", game.pos), e)
        };
        let mut inserted = HashMap::new();
        insert_staged_games(tx, id, &mut inserted)
            .await
            .map_err(err("inserting the game"))?;
        let Some(&id) = inserted.values().next() else {
            return Ok(None);
        };
        let rows = self.move_rows(id)?;
        let moves = if rows.is_empty() {
            0
        } else {
            copy_rows(tx, &MoveRow::copy_into("moves"), &rows)
                .await
                .map_err(err("copying the moves"))?
        };
        if explorer {
            explorer::add_batch(
                tx,
                std::iter::once((id, game, self.row.keys)),
                &self.position_ids,
                // `game put` is refused on a sharded layout (lock_for_one_game).
                explorer::Counting::Shared {
                    fresh: &self.fresh,
                    memory: None,
                    hold: false,
                },
            )
            .await?;
        }
        Ok(Some(InsertedGame { id, moves }))
    }

    /// The game's `moves` rows as game `id`.
    fn move_rows(&self, id: i64) -> Result<Vec<MoveRow<'_>>, Error> {
        move_rows(
            std::iter::once((id, self.row.game, self.row.keys, 0)),
            &self.position_ids,
        )
    }
}

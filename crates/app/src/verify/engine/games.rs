//! `verify --games`: games fetched a batch at a time through a
//! server-side cursor, replayed from `games.moves` in parallel, and
//! compared with their `moves` rows and the positions those reference. It
//! reads, never writes.

use std::collections::HashMap;

use rayon::prelude::*;
use tokio_postgres::{Client, Portal, Statement, Transaction};

use super::{Checked, Interrupt, Run, Selection, estimate, for_layout, selection_sql};
use crate::{
    error::Error,
    progress::Progress,
    store::db::{self, db_err},
    verify::{Finding, Report, StoredGame, StoredMove, check_game},
};

/// Games fetched (and replayed in parallel) at a time.
const GAME_BATCH: i32 = 256;

fn game_from_row(row: &tokio_postgres::Row) -> Result<StoredGame, tokio_postgres::Error> {
    Ok(StoredGame {
        id: row.try_get(0)?,
        variant: row.try_get(1)?,
        start_fen: row.try_get(2)?,
        moves: row.try_get(3)?,
        ply_count: row.try_get(4)?,
        initial_position_id: row.try_get(5)?,
        final_position_id: row.try_get(6)?,
        positions_max_ply: row.try_get(7)?,
    })
}

/// `verify --games`: every selected game replayed and compared with its
/// `moves` rows and the positions they reference; the summary says how
/// many plies were replayed.
pub(super) fn verify_games(run: Run<'_>) -> Result<Checked, Error> {
    let Run {
        selection,
        settings,
        runtime,
        interrupt,
        meter,
        report,
    } = run;
    let Some(mut database) = runtime
        .block_on(interrupt.or_stop(db::connect(&settings.target())))
        .transpose()?
    else {
        return Ok(Checked::stopped());
    };
    let mut plies = 0u64;
    let mut check = GamesCheck {
        interrupt,
        meter,
        report,
        plies: &mut plies,
    };
    // A batch's findings and counts are written with no await between them,
    // so stopping at any await leaves report and counts in step.
    let complete =
        runtime.block_on(interrupt.or_stop(check.all_games(&mut database.client, selection)));
    let complete = complete.transpose()?.unwrap_or(false);
    database.close()?;
    Ok(Checked {
        extra: vec![format!("{plies} plies replayed")],
        complete,
    })
}

/// Where [`verify_games`] reports, and what it has counted so far.
struct GamesCheck<'r> {
    interrupt: &'r Interrupt,
    meter: &'r mut Progress,
    report: &'r mut Report,
    plies: &'r mut u64,
}

/// The games cursor of a run and the two lookups of a batch's rows, all
/// of its read-only transaction.
struct GameCursor {
    portal: Portal,
    moves_query: Statement,
    positions_query: Statement,
}

impl GamesCheck<'_> {
    /// Checks the games `selection` selects, a batch at a time, in one
    /// snapshot; `false` if a signal stopped it between batches.
    async fn all_games(
        &mut self,
        client: &mut Client,
        selection: &Selection,
    ) -> Result<bool, Error> {
        let selection = &for_layout(client, selection).await?;
        self.meter
            .set_total(estimate(client, "games", selection).await);
        // One snapshot for the cursor and the per-batch lookups.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(db_err("starting a read-only transaction"))?;
        let cursor = GameCursor::open(&tx, selection).await?;
        loop {
            if self.interrupt.requested() {
                return Ok(false);
            }
            let rows = tx
                .query_portal(&cursor.portal, GAME_BATCH)
                .await
                .map_err(db_err("reading games"))?;
            if rows.is_empty() {
                break;
            }
            let games = rows
                .iter()
                .map(game_from_row)
                .collect::<Result<Vec<_>, _>>()
                .map_err(db_err("decoding a games row"))?;
            self.batch(&tx, &cursor, &games).await?;
            if rows.len() < GAME_BATCH as usize {
                break;
            }
        }
        tx.commit()
            .await
            .map_err(db_err("ending the transaction"))?;
        Ok(true)
    }

    /// Checks one batch of games and reports what it found.
    async fn batch(
        &mut self,
        tx: &Transaction<'_>,
        cursor: &GameCursor,
        games: &[StoredGame],
    ) -> Result<(), Error> {
        let (moves, fens) =
            batch_rows(tx, &cursor.moves_query, &cursor.positions_query, games).await?;
        // Replay is the CPU part: all cores, results in game order.
        let findings: Vec<Vec<Finding>> = games
            .par_iter()
            .map(|game| {
                let rows = moves.get(&game.id).map_or(&[][..], Vec::as_slice);
                check_game(game, rows, |id| fens.get(&id).map(String::as_str))
            })
            .collect();
        self.report.write_all(findings.iter().flatten())?;
        *self.plies += games.iter().map(|g| g.moves.len() as u64 / 2).sum::<u64>();
        self.meter
            .add(games.len() as u64, self.report.counts.total());
        Ok(())
    }
}

impl GameCursor {
    /// Opens the cursor over the selected games, in id order, and prepares
    /// the lookups, all in `tx`.
    async fn open(tx: &Transaction<'_>, selection: &Selection) -> Result<GameCursor, Error> {
        let query = format!(
            "SELECT id, variant::text, start_fen, moves, ply_count, initial_position_id, \
             final_position_id, positions_max_ply FROM games{}",
            selection_sql(selection, true)
        );
        let portal = tx
            .bind(query.as_str(), &[])
            .await
            .map_err(db_err("opening a cursor over games"))?;
        let moves_query = tx
            .prepare(
                "SELECT game_id, ply, uci, position_id, position_after_id FROM moves \
                 WHERE game_id = ANY($1) ORDER BY game_id, ply",
            )
            .await
            .map_err(db_err("preparing the moves lookup"))?;
        let positions_query = tx
            .prepare("SELECT id, normalized_fen FROM positions WHERE id = ANY($1)")
            .await
            .map_err(db_err("preparing the positions lookup"))?;
        Ok(GameCursor {
            portal,
            moves_query,
            positions_query,
        })
    }
}

/// The `moves` rows of `games` (by game id, in ply order) and the FEN of
/// every position they or the games reference (by position id), read in
/// the transaction of the cursor with the two prepared lookups.
async fn batch_rows(
    tx: &Transaction<'_>,
    moves_query: &Statement,
    positions_query: &Statement,
    games: &[StoredGame],
) -> Result<(HashMap<i64, Vec<StoredMove>>, HashMap<i64, String>), Error> {
    let ids: Vec<i64> = games.iter().map(|g| g.id).collect();
    let mut moves: HashMap<i64, Vec<StoredMove>> = HashMap::with_capacity(games.len());
    let mut position_ids: Vec<i64> = games
        .iter()
        .flat_map(|g| [g.initial_position_id, g.final_position_id])
        .collect();
    for row in tx
        .query(moves_query, &[&ids])
        .await
        .map_err(db_err("reading moves"))?
    {
        let (game_id, m) = (|| {
            Ok::<_, tokio_postgres::Error>((
                row.try_get::<_, i64>(0)?,
                StoredMove {
                    ply: row.try_get(1)?,
                    uci: row.try_get(2)?,
                    position_id: row.try_get(3)?,
                    position_after_id: row.try_get(4)?,
                },
            ))
        })()
        .map_err(db_err("decoding a moves row"))?;
        position_ids.extend([m.position_id, m.position_after_id]);
        moves.entry(game_id).or_default().push(m);
    }
    position_ids.sort_unstable();
    position_ids.dedup();
    let mut fens: HashMap<i64, String> = HashMap::with_capacity(position_ids.len());
    for row in tx
        .query(positions_query, &[&position_ids])
        .await
        .map_err(db_err("reading positions"))?
    {
        let id: i64 = row.try_get(0).map_err(db_err("decoding a positions row"))?;
        let fen: String = row.try_get(1).map_err(db_err("decoding a positions row"))?;
        fens.insert(id, fen);
    }
    Ok((moves, fens))
}

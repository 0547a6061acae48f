//! Games as stored, read back: one game by id or natural key, or every
//! game a [`GameFilter`] selects, streamed in batches through a
//! server-side cursor so that memory stays bounded by the batch, whatever
//! the number of games.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use tokio_postgres::{Client, GenericClient, Row, types::Json};

use crate::{
    chess::{
        model::{GameRef, GameVariant},
        scope::sans_after,
    },
    error::Error,
    query::filter::GameFilter,
    store::db::db_err,
};

/// Games fetched per round trip of the cursor (and moves per query: the
/// moves of this many games).
const BATCH: i64 = 500;

/// The columns of [`StoredGame`], over `games g` and its joins.
const SELECT: &str = "
SELECT g.id, g.source, g.external_id, wp.username, bp.username, g.white_elo, g.black_elo,
       g.result, g.started_at, g.ply_count, e.name, g.site, g.round, g.white_rating_diff,
       g.black_rating_diff, wp.title, bp.title, g.time_control, g.variant::text,
       g.termination::text, g.eco, g.opening, g.start_fen, g.tags
FROM games g
LEFT JOIN players wp ON wp.id = g.white_player_id
LEFT JOIN players bp ON bp.id = g.black_player_id
LEFT JOIN events e ON e.id = g.event_id";

/// A `games` row with its players' and event's names: what `games` prints
/// and what the PGN writer turns back into tags.
#[derive(Debug, Clone)]
pub struct StoredGame {
    /// `games.id`.
    pub id: i64,
    /// `games.source`.
    pub source: String,
    /// `games.external_id`.
    pub external_id: String,
    /// White's name as the players table keeps it.
    pub white: Option<String>,
    /// Black's name.
    pub black: Option<String>,
    /// `WhiteElo`.
    pub white_elo: Option<i32>,
    /// `BlackElo`.
    pub black_elo: Option<i32>,
    /// 1, 0, -1 or none.
    pub result: Option<i16>,
    /// `UTCDate` + `UTCTime` (else `Date`).
    pub started_at: Option<DateTime<Utc>>,
    /// Plies in the mainline.
    pub ply_count: i32,
    /// The event's name.
    pub event: Option<String>,
    /// `Site`.
    pub site: Option<String>,
    /// `Round`.
    pub round: Option<String>,
    /// `WhiteRatingDiff`.
    pub white_rating_diff: Option<i32>,
    /// `BlackRatingDiff`.
    pub black_rating_diff: Option<i32>,
    /// White's title (the player's, not per game: the last seen).
    pub white_title: Option<String>,
    /// Black's title.
    pub black_title: Option<String>,
    /// `TimeControl` as written.
    pub time_control: Option<String>,
    /// The variant.
    pub variant: GameVariant,
    /// The `game_termination` label.
    pub termination: Option<String>,
    /// `ECO`.
    pub eco: Option<String>,
    /// `Opening`.
    pub opening: Option<String>,
    /// The `FEN` tag of a game that did not start from its variant's start.
    pub start_fen: Option<String>,
    /// Every tag no column holds (a name written twice maps to an array).
    pub tags: serde_json::Map<String, serde_json::Value>,
}

impl StoredGame {
    fn from_row(row: &Row) -> Result<StoredGame, Error> {
        let variant: String = row.get(18);
        let variant = GameVariant::ALL
            .into_iter()
            .find(|v| v.as_db_label() == variant)
            .ok_or_else(|| {
                Error::Internal(format!(
                    "game {}: unknown variant {variant:?}",
                    row.get::<_, i64>(0)
                ))
            })?;
        let tags = match row.get::<_, Json<serde_json::Value>>(23).0 {
            serde_json::Value::Object(map) => map,
            other => {
                return Err(Error::Internal(format!(
                    "game {}: tags is not a JSON object: {other}",
                    row.get::<_, i64>(0)
                )));
            }
        };
        Ok(StoredGame {
            id: row.get(0),
            source: row.get(1),
            external_id: row.get(2),
            white: row.get(3),
            black: row.get(4),
            white_elo: row.get(5),
            black_elo: row.get(6),
            result: row.get(7),
            started_at: row.get(8),
            ply_count: row.get(9),
            event: row.get(10),
            site: row.get(11),
            round: row.get(12),
            white_rating_diff: row.get(13),
            black_rating_diff: row.get(14),
            white_title: row.get(15),
            black_title: row.get(16),
            time_control: row.get(17),
            variant,
            termination: row.get(19),
            eco: row.get(20),
            opening: row.get(21),
            start_fen: row.get(22),
            tags,
        })
    }

    /// The result as PGN writes it.
    pub fn result_text(&self) -> &'static str {
        match self.result {
            Some(1) => "1-0",
            Some(-1) => "0-1",
            Some(0) => "1/2-1/2",
            _ => "*",
        }
    }
}

/// One `moves` row, as the PGN writer needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMove {
    /// SAN with its check suffix.
    pub san: String,
    /// Clock after the move.
    pub clock_ms: Option<i32>,
    /// Evaluation in centipawns.
    pub eval_cp: Option<i32>,
    /// Mate in N.
    pub eval_mate: Option<i32>,
    /// First NAG.
    pub nag: Option<i16>,
}

/// The game `game` names with its moves, or `None` if there is none.
pub async fn find(
    client: &Client,
    game: &GameRef,
) -> Result<Option<(StoredGame, Vec<StoredMove>)>, Error> {
    let row = match game {
        GameRef::Id(id) => {
            client
                .query_opt(&format!("{SELECT} WHERE g.id = $1"), &[id])
                .await
        }
        GameRef::Key {
            source,
            external_id,
        } => {
            client
                .query_opt(
                    &format!("{SELECT} WHERE g.source = $1 AND g.external_id = $2"),
                    &[source, external_id],
                )
                .await
        }
    }
    .map_err(db_err(format!("reading game {game}")))?;
    let Some(row) = row else {
        return Ok(None);
    };
    let stored = StoredGame::from_row(&row)?;
    let mut moves = moves_of(client, &[stored.id]).await?;
    let moves = moves.remove(&stored.id).unwrap_or_default();
    Ok(Some((stored, moves)))
}

/// The moves of `ids`, by game, in ply order.
async fn moves_of<C: GenericClient>(
    client: &C,
    ids: &[i64],
) -> Result<HashMap<i64, Vec<StoredMove>>, Error> {
    let rows = client
        .query(
            "SELECT game_id, san, clock_ms, eval_cp, eval_mate, nag FROM moves
             WHERE game_id = ANY($1) ORDER BY game_id, ply",
            &[&ids],
        )
        .await
        .map_err(db_err("reading moves"))?;
    let mut moves: HashMap<i64, Vec<StoredMove>> = HashMap::with_capacity(ids.len());
    for row in rows {
        moves.entry(row.get(0)).or_default().push(StoredMove {
            san: row.get(1),
            clock_ms: row.get(2),
            eval_cp: row.get(3),
            eval_mate: row.get(4),
            nag: row.get(5),
        });
    }
    complete_capped(client, ids, &mut moves).await?;
    Ok(moves)
}

/// Adds to `moves` the plies that capped games (`positions_max_ply`, see
/// `sql/0010_positions_cap.sql`) have no rows for, replayed from
/// `games.moves`: every move is written, past the cap without annotations.
async fn complete_capped<C: GenericClient>(
    client: &C,
    ids: &[i64],
    moves: &mut HashMap<i64, Vec<StoredMove>>,
) -> Result<(), Error> {
    let rows = client
        .query(
            "SELECT id, variant::text, start_fen, moves FROM games
             WHERE id = ANY($1) AND positions_max_ply IS NOT NULL",
            &[&ids],
        )
        .await
        .map_err(db_err("reading the moves of capped games"))?;
    for row in rows {
        let id: i64 = row.get(0);
        let label: String = row.get(1);
        let variant = GameVariant::ALL
            .into_iter()
            .find(|v| v.as_db_label() == label)
            .ok_or_else(|| Error::Internal(format!("game {id}: unknown variant {label:?}")))?;
        let start_fen: Option<String> = row.get(2);
        let codes: Vec<u8> = row.get(3);
        let stored = moves.entry(id).or_default();
        let rest = sans_after(variant, start_fen.as_deref(), &codes, stored.len())
            .map_err(|e| Error::Internal(format!("game {id}: games.moves does not replay: {e}")))?;
        stored.extend(rest.into_iter().map(|san| StoredMove {
            san,
            clock_ms: None,
            eval_cp: None,
            eval_mate: None,
            nag: None,
        }));
    }
    Ok(())
}

/// The order games are listed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Newest first (games without a date last), as a search shows them.
    Newest,
    /// Import order (`games.id`), as an export writes them: importing the
    /// export then numbers and keys players and events as the original did.
    Imported,
}

/// How many games `filter` selects (for a progress bar's total).
pub async fn count(client: &Client, filter: &GameFilter) -> Result<u64, Error> {
    let w = filter.where_clause();
    let row = client
        .query_one(
            &format!("SELECT count(*) FROM games g WHERE {}", w.clause),
            &w.values(),
        )
        .await
        .map_err(db_err("counting games"))?;
    let n: i64 = row.get(0);
    let n = u64::try_from(n).map_err(|_| Error::Internal(format!("count(*) was {n}")))?;
    Ok(filter.limit.map_or(n, |limit| n.min(u64::from(limit))))
}

/// A game with its moves, as [`for_each_batch`] hands them over.
pub type GameWithMoves = (StoredGame, Vec<StoredMove>);

/// Calls `each` for every game `filter` selects, in `order`, with its
/// moves when `with_moves` (else with none). Reads through a cursor in
/// one read-only repeatable-read transaction, so games and moves come
/// from one snapshot and at most a few batches are held at a time.
/// Returns the number of games.
pub async fn for_each(
    client: &mut Client,
    filter: &GameFilter,
    order: Order,
    with_moves: bool,
    mut each: impl FnMut(&StoredGame, &[StoredMove]) -> Result<(), Error>,
) -> Result<u64, Error> {
    for_each_batch(client, filter, order, with_moves, |batch| {
        batch.iter().try_for_each(|(game, moves)| each(game, moves))
    })
    .await
}

/// [`for_each`] a batch at a time (up to [`BATCH`] games, in order), for
/// callers that work on several games at once (export formats a batch in
/// parallel). The next batch is read by another thread while `each` works
/// on the current one, so the server's and the caller's work overlap:
/// export was the sum of the two before. At most three batches are held
/// (one read, one queued, one in `each`), whatever the number of games.
pub async fn for_each_batch(
    client: &mut Client,
    filter: &GameFilter,
    order: Order,
    with_moves: bool,
    mut each: impl FnMut(&[GameWithMoves]) -> Result<(), Error>,
) -> Result<u64, Error> {
    let w = filter.where_clause();
    let order_by = match order {
        Order::Newest => "g.started_at DESC NULLS LAST, g.id DESC",
        Order::Imported => "g.id",
    };
    let limit = filter
        .limit
        .map_or(String::new(), |limit| format!(" LIMIT {limit}"));
    let tx = client
        .build_transaction()
        .read_only(true)
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await
        .map_err(db_err("starting a read transaction"))?;
    tx.execute(
        &format!(
            "DECLARE pgnload_games NO SCROLL CURSOR FOR {SELECT} WHERE {} ORDER BY {order_by}{limit}",
            w.clause
        ),
        &w.values(),
    )
    .await
    .map_err(db_err("opening the games cursor"))?;
    // The reader runs the queries on its own thread (the runtime's worker
    // drives the connection); this thread stays with `each`, which need
    // not be Send (export's output may be stdout's lock).
    let handle = tokio::runtime::Handle::current();
    let (sender, batches) = std::sync::mpsc::sync_channel::<Vec<GameWithMoves>>(1);
    let read = (&handle, &tx);
    let done = std::thread::scope(|scope| {
        // `move`: the reader owns the sender, so the channel closes when
        // it stops, which ends the loop below.
        let reader = scope.spawn(move || {
            let (handle, tx) = read;
            handle.block_on(async {
                loop {
                    let batch = next_batch(tx, with_moves).await?;
                    if batch.is_empty() || sender.send(batch).is_err() {
                        // The end, or `each` failed and stopped listening.
                        return Ok::<_, Error>(());
                    }
                }
            })
        });
        let mut done = 0u64;
        let mut outcome = Ok(());
        for batch in &batches {
            outcome = each(&batch);
            if outcome.is_err() {
                break;
            }
            done += batch.len() as u64;
        }
        // Stop the reader (its next send fails) before waiting for it.
        drop(batches);
        let read = reader
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        outcome.and(read).map(|()| done)
    })?;
    tx.commit()
        .await
        .map_err(db_err("ending the read transaction"))?;
    Ok(done)
}

/// The next batch of the `pgnload_games` cursor with the games' moves
/// (none when not `with_moves`); empty at the end.
async fn next_batch(
    tx: &tokio_postgres::Transaction<'_>,
    with_moves: bool,
) -> Result<Vec<GameWithMoves>, Error> {
    let rows = tx
        .query(&format!("FETCH {BATCH} FROM pgnload_games"), &[])
        .await
        .map_err(db_err("reading games"))?;
    let games = rows
        .iter()
        .map(StoredGame::from_row)
        .collect::<Result<Vec<_>, _>>()?;
    let mut moves = if with_moves && !games.is_empty() {
        let ids: Vec<i64> = games.iter().map(|g| g.id).collect();
        moves_of(tx, &ids).await?
    } else {
        HashMap::new()
    };
    Ok(games
        .into_iter()
        .map(|game| {
            let game_moves = moves.remove(&game.id).unwrap_or_default();
            (game, game_moves)
        })
        .collect())
}

//! Games as stored, read back: one game by id or natural key, or every
//! game a [`GameFilter`] selects, streamed in batches through a
//! server-side cursor so that memory stays bounded by the batch, whatever
//! the number of games.

use std::{
    collections::{HashMap, HashSet},
    fmt::Write as _,
};

use chrono::{DateTime, Utc};
use compact_str::CompactString;
use futures_util::{TryStreamExt, future::try_join_all};
use tokio_postgres::{
    Client, CopyOutStream, Row, Transaction,
    binary_copy::BinaryCopyOutStream,
    types::{Json, Type},
};

use crate::{
    chess::{
        annotation::Notes,
        headers::{Columns, result_tag},
        model::{GameRef, GameVariant},
        scope::sans_after,
    },
    error::Error,
    query::filter::GameFilter,
    store::db::db_err,
};

/// Games fetched per round trip of the cursor (and moves per query: the
/// moves of this many games).
const BATCH: usize = 500;

/// The columns of [`StoredGame`], over `games g` and its joins, then the
/// move codes of a game whose positions are capped (null for the others):
/// what [`complete_capped`] replays, read with the game rather than by a
/// query of their own.
const SELECT: &str = "
SELECT g.id, g.source, g.external_id, wp.username, bp.username, g.white_elo, g.black_elo,
       g.result, g.started_at, g.ply_count, e.name, g.site, g.round, g.white_rating_diff,
       g.black_rating_diff, wp.title, bp.title, g.time_control, g.variant::text,
       g.termination::text, g.eco, g.opening, g.start_fen, g.tags,
       CASE WHEN g.positions_max_ply IS NOT NULL THEN g.moves END, g.annotations
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
    /// `games.annotations`: the comments, NAGs and variations the typed
    /// columns cannot say, by ply (none for most games).
    pub notes: Notes,
}

/// A game as read by [`SELECT`], before its moves: the game, and the move
/// codes of `games.moves` when its positions are capped.
type Fetched = (StoredGame, Option<Vec<u8>>);

impl StoredGame {
    fn from_row(row: &Row) -> Result<Fetched, Error> {
        let variant: String = row.get(18);
        let variant = GameVariant::from_db_label(&variant).ok_or_else(|| {
            Error::inconsistent(format!(
                "game {}: unknown variant {variant:?}",
                row.get::<_, i64>(0)
            ))
        })?;
        let tags = match row.get::<_, Json<serde_json::Value>>(23).0 {
            serde_json::Value::Object(map) => map,
            other => {
                return Err(Error::inconsistent(format!(
                    "game {}: tags is not a JSON object: {other}",
                    row.get::<_, i64>(0)
                )));
            }
        };
        let notes = match row.get::<_, Option<Json<serde_json::Value>>>(25) {
            None => Notes::default(),
            Some(Json(value)) => Notes::from_json(&value).map_err(|why| {
                Error::inconsistent(format!(
                    "game {}: annotations are not [ply, text] pairs: {why}",
                    row.get::<_, i64>(0)
                ))
            })?,
        };
        let game = StoredGame {
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
            notes,
        };
        Ok((game, row.get(24)))
    }

    /// The result as PGN writes it.
    pub fn result_text(&self) -> &'static str {
        result_tag(self.result)
    }

    /// Its typed columns, as the PGN writer renders them into tags.
    pub fn columns(&self) -> Columns<'_> {
        Columns {
            lichess: self.source == "lichess",
            event: self.event.as_deref(),
            site: self.site.as_deref(),
            round: self.round.as_deref(),
            white: self.white.as_deref(),
            black: self.black.as_deref(),
            result: self.result,
            started_at: self.started_at,
            white_elo: self.white_elo,
            black_elo: self.black_elo,
            white_rating_diff: self.white_rating_diff,
            black_rating_diff: self.black_rating_diff,
            white_title: self.white_title.as_deref(),
            black_title: self.black_title.as_deref(),
            variant: self.variant,
            eco: self.eco.as_deref(),
            opening: self.opening.as_deref(),
            time_control: self.time_control.as_deref(),
            termination: self.termination.as_deref(),
            start_fen: self.start_fen.as_deref(),
        }
    }
}

/// One `moves` row, as the PGN writer needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMove {
    /// SAN with its check suffix. A [`CompactString`]: a SAN (at most 7
    /// bytes) is kept inline, so export does not allocate (and free, on
    /// another thread) a string for each of its tens of millions of moves.
    pub san: CompactString,
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
    let mut found = attach_moves(client, vec![StoredGame::from_row(&row)?]).await?;
    Ok(found.pop())
}

/// A connection that runs `COPY … TO STDOUT`: a client or a transaction
/// (tokio-postgres' `GenericClient` has no `copy_out`).
trait CopyOut {
    async fn copy_out_of(&self, sql: &str) -> Result<CopyOutStream, tokio_postgres::Error>;
}

impl CopyOut for Client {
    async fn copy_out_of(&self, sql: &str) -> Result<CopyOutStream, tokio_postgres::Error> {
        self.copy_out(sql).await
    }
}

impl CopyOut for Transaction<'_> {
    async fn copy_out_of(&self, sql: &str) -> Result<CopyOutStream, tokio_postgres::Error> {
        self.copy_out(sql).await
    }
}

/// `games` with their moves, in ply order. The moves come as one row per
/// game (its SANs joined by spaces, its plies, clocks, evaluations and
/// NAGs as arrays) in one binary `COPY` read with tokio-postgres' typed
/// [`BinaryCopyOutStream`]: export reads every move of every game, and
/// with a row per move (70 a game), decoding them on the one thread that
/// reads was export's slowest stage.
///
/// The arrays take their order from the sorted subquery they aggregate,
/// an order PostgreSQL keeps but does not promise: so the plies come
/// along, and [`moves_of_game`] sorts by them a game that came otherwise.
/// (An aggregate's own `ORDER BY` sorts every game again: four times the
/// server's time on PostgreSQL 15.)
async fn attach_moves<C: CopyOut>(
    client: &C,
    games: Vec<Fetched>,
) -> Result<Vec<GameWithMoves>, Error> {
    if games.is_empty() {
        return Ok(Vec::new());
    }
    let mut moves = read_moves(client, &moves_sql(&games), games.len()).await?;
    let asked: HashSet<i64> = games.iter().map(|(game, _)| game.id).collect();
    if let Some(other) = moves.keys().find(|id| !asked.contains(id)) {
        return Err(Error::bug(format!(
            "reading moves: a row of game {other}, not asked for"
        )));
    }
    games
        .into_iter()
        .map(|(game, codes)| {
            let mut game_moves = moves.remove(&game.id).unwrap_or_default();
            if let Some(codes) = codes {
                complete_capped(&game, &codes, &mut game_moves)?;
            }
            Ok((game, game_moves))
        })
        .collect()
}

/// The `COPY` of [`attach_moves`] for the moves of `games` (not empty).
fn moves_sql(games: &[Fetched]) -> String {
    // COPY takes no parameters; ids are integers, so written in the text.
    let mut ids = String::with_capacity(games.len() * 8);
    for (i, (game, _)) in games.iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        write!(ids, "{sep}{}", game.id).expect("formatting into a String cannot fail");
    }
    // The range too: with it the index scan walks the batch's part of
    // the index once rather than descending from the root for every id
    // (a third of the server's time for an export in import order).
    let (low, high) = games
        .iter()
        .fold((i64::MAX, i64::MIN), |(low, high), (game, _)| {
            (low.min(game.id), high.max(game.id))
        });
    format!(
        "COPY (SELECT game_id, string_agg(san, ' '), array_agg(ply), array_agg(clock_ms),
                      array_agg(eval_cp), array_agg(eval_mate), array_agg(nag)
               FROM (SELECT game_id, ply, san, clock_ms, eval_cp, eval_mate, nag FROM moves
                     WHERE game_id = ANY('{{{ids}}}'::bigint[]) AND game_id BETWEEN {low} AND {high}
                     ORDER BY game_id, ply) m
               GROUP BY game_id)
         TO STDOUT (FORMAT binary)"
    )
}

/// Runs the `COPY` of [`moves_sql`] and decodes its rows: each game's
/// moves by its id (room for `games` of them), a game that comes twice
/// being a bug.
async fn read_moves<C: CopyOut>(
    client: &C,
    sql: &str,
    games: usize,
) -> Result<HashMap<i64, Vec<StoredMove>>, Error> {
    let stream = client
        .copy_out_of(sql)
        .await
        .map_err(db_err("reading moves"))?;
    // The types of the columns selected (`moves` in sql/0001_schema.sql).
    let rows = BinaryCopyOutStream::new(
        stream,
        &[
            Type::INT8,
            Type::TEXT,
            Type::INT4_ARRAY,
            Type::INT4_ARRAY,
            Type::INT4_ARRAY,
            Type::INT4_ARRAY,
            Type::INT2_ARRAY,
        ],
    );
    let mut rows = std::pin::pin!(rows);
    let mut moves: HashMap<i64, Vec<StoredMove>> = HashMap::with_capacity(games);
    // The error's context built only on an error, not per row.
    let read_err = |cause| Error::Database {
        context: "reading moves".to_owned(),
        cause,
    };
    while let Some(row) = rows.try_next().await.map_err(read_err)? {
        let game_id: i64 = row.try_get(0).map_err(read_err)?;
        let columns = MoveColumns {
            sans: row.try_get(1).map_err(read_err)?,
            plies: row.try_get(2).map_err(read_err)?,
            clocks: row.try_get(3).map_err(read_err)?,
            eval_cps: row.try_get(4).map_err(read_err)?,
            eval_mates: row.try_get(5).map_err(read_err)?,
            nags: row.try_get(6).map_err(read_err)?,
        };
        if moves
            .insert(game_id, moves_of_game(game_id, columns)?)
            .is_some()
        {
            return Err(Error::bug(format!(
                "reading moves: game {game_id} came twice"
            )));
        }
    }
    Ok(moves)
}

/// One game's `moves` columns as [`attach_moves`] reads them: the SANs
/// joined by spaces, and each other column as an array, all in one order.
#[derive(Debug, Clone)]
struct MoveColumns<'a> {
    sans: &'a str,
    plies: Vec<i32>,
    clocks: Vec<Option<i32>>,
    eval_cps: Vec<Option<i32>>,
    eval_mates: Vec<Option<i32>>,
    nags: Vec<Option<i16>>,
}

/// The moves of game `game_id` from its columns, in ply order. Columns of
/// different lengths (a SAN with a space, say) are an error: they would
/// pair one move's SAN with another's clock.
fn moves_of_game(game_id: i64, columns: MoveColumns<'_>) -> Result<Vec<StoredMove>, Error> {
    let MoveColumns {
        sans,
        plies,
        clocks,
        eval_cps,
        eval_mates,
        nags,
    } = columns;
    let n = plies.len();
    let sans: Vec<&str> = sans.split(' ').collect();
    if [
        sans.len(),
        clocks.len(),
        eval_cps.len(),
        eval_mates.len(),
        nags.len(),
    ]
    .iter()
    .any(|&len| len != n)
    {
        return Err(Error::inconsistent(format!(
            "reading moves: game {game_id}'s columns do not pair up ({n} plies, {} SANs)",
            sans.len()
        )));
    }
    let mut moves: Vec<(i32, StoredMove)> = plies
        .into_iter()
        .zip(sans)
        .zip(clocks.into_iter().zip(eval_cps))
        .zip(eval_mates.into_iter().zip(nags))
        .map(|(((ply, san), (clock_ms, eval_cp)), (eval_mate, nag))| {
            let m = StoredMove {
                san: CompactString::from(san),
                clock_ms,
                eval_cp,
                eval_mate,
                nag,
            };
            (ply, m)
        })
        .collect();
    if !moves.is_sorted_by_key(|(ply, _)| *ply) {
        moves.sort_by_key(|(ply, _)| *ply);
    }
    Ok(moves.into_iter().map(|(_, m)| m).collect())
}

/// Adds to `moves` the plies that a capped game (`positions_max_ply`, see
/// `sql/0010_positions_cap.sql`) has no rows for, replayed from its move
/// codes (`games.moves`): every move is written, past the cap without
/// annotations.
fn complete_capped(
    game: &StoredGame,
    codes: &[u8],
    moves: &mut Vec<StoredMove>,
) -> Result<(), Error> {
    let rest =
        sans_after(game.variant, game.start_fen.as_deref(), codes, moves.len()).map_err(|e| {
            Error::inconsistent(format!(
                "game {}: games.moves does not replay: {e}",
                game.id
            ))
        })?;
    moves.extend(rest.into_iter().map(|san| StoredMove {
        san: san.into(),
        clock_ms: None,
        eval_cp: None,
        eval_mate: None,
        nag: None,
    }));
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
    let n = u64::try_from(n).map_err(|_| Error::inconsistent(format!("count(*) was {n}")))?;
    Ok(filter.limit.map_or(n, |limit| n.min(u64::from(limit))))
}

/// A game with its moves, as [`for_each_batch`] hands them over.
pub type GameWithMoves = (StoredGame, Vec<StoredMove>);

/// Calls `each` for every game `filter` selects, in `order`, with its
/// moves when `with_moves` (else with none). Reads through a cursor in
/// one read-only repeatable-read transaction, so games and moves come
/// from one snapshot and at most a few batches are held at a time.
/// `helper`, a second connection, reads half the moves (see
/// [`for_each_batch`]). Returns the number of games.
pub async fn for_each(
    client: &mut Client,
    helper: Option<&mut Client>,
    filter: &GameFilter,
    order: Order,
    with_moves: bool,
    mut each: impl FnMut(&StoredGame, &[StoredMove]) -> Result<(), Error>,
) -> Result<u64, Error> {
    for_each_batch(client, helper, filter, order, with_moves, |batch| {
        batch.iter().try_for_each(|(game, moves)| each(game, moves))
    })
    .await
}

/// [`for_each`] a batch at a time (up to `BATCH` games, in order), for
/// callers that work on several games at once (export formats a batch in
/// parallel). The next batch is read by another thread while `each` works
/// on the current one, so the server's and the caller's work overlap:
/// export was the sum of the two before.
///
/// With `helper`, the moves of every other batch are read through it, in
/// a transaction on the same snapshot (`pg_export_snapshot`, as `pg_dump`'s
/// parallel jobs do): one server process reading the moves was export's
/// slowest stage, busy all the time while the client waited on it. At
/// most three rounds of batches are held (one read, one queued, one in
/// `each`, a batch per connection each), whatever the number of games.
pub async fn for_each_batch(
    client: &mut Client,
    helper: Option<&mut Client>,
    filter: &GameFilter,
    order: Order,
    with_moves: bool,
    mut each: impl FnMut(&[GameWithMoves]) -> Result<(), Error>,
) -> Result<u64, Error> {
    let w = filter.where_clause();
    let selection = cursor_selection(&w.clause, order, filter.limit);
    let tx = read_transaction(client).await?;
    let helper = match helper.filter(|_| with_moves) {
        Some(helper) => Some(on_same_snapshot(&tx, helper).await?),
        None => None,
    };
    tx.execute(
        &format!("DECLARE pgnload_games NO SCROLL CURSOR FOR {SELECT} WHERE {selection}"),
        &w.values(),
    )
    .await
    .map_err(db_err("opening the games cursor"))?;
    // The connections that read moves, a batch each per round.
    let readers: Vec<&Transaction<'_>> = std::iter::once(&tx).chain(helper.as_ref()).collect();
    let done = read_while_each(&tx, &readers, with_moves, &mut each)?;
    drop(readers);
    if let Some(helper) = helper {
        helper
            .commit()
            .await
            .map_err(db_err("ending the second read transaction"))?;
    }
    tx.commit()
        .await
        .map_err(db_err("ending the read transaction"))?;
    Ok(done)
}

/// What follows `WHERE` in [`for_each_batch`]'s cursor: the filter's
/// `clause` and the order, or with a limit the chosen ids.
fn cursor_selection(clause: &str, order: Order, limit: Option<u32>) -> String {
    let order_by = match order {
        Order::Newest => "g.started_at DESC NULLS LAST, g.id DESC",
        Order::Imported => "g.id",
    };
    // With a limit, the games are chosen from `games` alone, then only
    // the chosen ones are read whole and joined to their names: a search
    // that collects every game of a position sorted thousands of whole
    // rows before (71 ms for a 2,154-game position at 1M games, 40 ms so).
    // The outer LIMIT too: without it, a cursor (planned for its first
    // rows) walked every game newest first asking each whether it was
    // chosen (3.5 s for the frequent positions at 1M games).
    match limit {
        None => format!("{clause} ORDER BY {order_by}"),
        Some(limit) => format!(
            "g.id IN (SELECT g.id FROM games g WHERE {clause} ORDER BY {order_by} LIMIT {limit})
             ORDER BY {order_by} LIMIT {limit}"
        ),
    }
}

/// Starts `helper`'s read transaction on the snapshot of `tx`
/// (`pg_export_snapshot`), so that the moves it reads are those of the
/// games `tx` reads.
async fn on_same_snapshot<'h>(
    tx: &Transaction<'_>,
    helper: &'h mut Client,
) -> Result<Transaction<'h>, Error> {
    let snapshot: String = tx
        .query_one("SELECT pg_export_snapshot()", &[])
        .await
        .map_err(db_err("exporting the read snapshot"))?
        .get(0);
    let helper = read_transaction(helper).await?;
    // The server's own name for it (hex digits and dashes), checked
    // all the same since SET takes no parameter.
    if !snapshot.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return Err(Error::inconsistent(format!(
            "pg_export_snapshot() named its snapshot {snapshot:?}"
        )));
    }
    helper
        .batch_execute(&format!("SET TRANSACTION SNAPSHOT '{snapshot}'"))
        .await
        .map_err(db_err(
            "reading the export's snapshot on a second connection",
        ))?;
    Ok(helper)
}

/// Reads the open cursor's batches on a thread of its own while this one
/// calls `each` on them; returns the number of games `each` took.
fn read_while_each(
    tx: &Transaction<'_>,
    readers: &[&Transaction<'_>],
    with_moves: bool,
    each: &mut impl FnMut(&[GameWithMoves]) -> Result<(), Error>,
) -> Result<u64, Error> {
    // The reader runs the queries on its own thread (the runtime's worker
    // drives the connection); this thread stays with `each`, which need
    // not be Send (export's output may be stdout's lock).
    let handle = tokio::runtime::Handle::current();
    let (sender, batches) = std::sync::mpsc::sync_channel::<Vec<GameWithMoves>>(readers.len());
    std::thread::scope(|scope| {
        // `move`: the reader owns the sender, so the channel closes when
        // it stops, which ends the loop below.
        let reader =
            scope.spawn(move || handle.block_on(read_rounds(tx, readers, with_moves, sender)));
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
    })
}

/// The reader's side of [`read_while_each`]: rounds of games from the
/// cursor, a batch for each of `readers` to read the moves of, each batch
/// sent to `sender` until the cursor is done or the receiver gone.
async fn read_rounds(
    tx: &Transaction<'_>,
    readers: &[&Transaction<'_>],
    with_moves: bool,
    sender: std::sync::mpsc::SyncSender<Vec<GameWithMoves>>,
) -> Result<(), Error> {
    let round = BATCH * readers.len();
    let mut games = next_games(tx, round).await?;
    while !games.is_empty() {
        let mut parts = Vec::with_capacity(readers.len());
        while games.len() > BATCH {
            let rest = games.split_off(BATCH);
            parts.push(games);
            games = rest;
        }
        parts.push(games);
        // The next games are asked for with this round's
        // moves: the server has its next query at hand
        // instead of waiting a round trip for it.
        let (batches, next) = if with_moves {
            let moves = parts
                .into_iter()
                .zip(readers.iter())
                .map(|(part, reader)| attach_moves(*reader, part));
            tokio::try_join!(try_join_all(moves), next_games(tx, round))?
        } else {
            let batches = parts
                .into_iter()
                .map(|part| {
                    part.into_iter()
                        .map(|(game, _)| (game, Vec::new()))
                        .collect()
                })
                .collect();
            (batches, next_games(tx, round).await?)
        };
        for batch in batches {
            if sender.send(batch).is_err() {
                // `each` failed and stopped listening.
                return Ok(());
            }
        }
        games = next;
    }
    Ok(())
}

/// Starts a read-only repeatable-read transaction: one snapshot for all
/// that [`for_each_batch`] reads.
async fn read_transaction(client: &mut Client) -> Result<Transaction<'_>, Error> {
    client
        .build_transaction()
        .read_only(true)
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await
        .map_err(db_err("starting a read transaction"))
}

/// The next `count` games of the `pgnload_games` cursor, without moves
/// yet; empty at the end.
async fn next_games(tx: &Transaction<'_>, count: usize) -> Result<Vec<Fetched>, Error> {
    let rows = tx
        .query(&format!("FETCH {count} FROM pgnload_games"), &[])
        .await
        .map_err(db_err("reading games"))?;
    rows.iter().map(StoredGame::from_row).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(
        san: &str,
        clock_ms: Option<i32>,
        eval_cp: Option<i32>,
        eval_mate: Option<i32>,
        nag: Option<i16>,
    ) -> StoredMove {
        StoredMove {
            san: san.into(),
            clock_ms,
            eval_cp,
            eval_mate,
            nag,
        }
    }

    #[test]
    fn a_games_columns_become_its_moves_in_ply_order() {
        let columns = MoveColumns {
            sans: "e4 e5 Nf3",
            plies: vec![1, 2, 3],
            clocks: vec![Some(60_000), None, Some(59_000)],
            eval_cps: vec![Some(17), None, None],
            eval_mates: vec![None, Some(-3), None],
            nags: vec![None, Some(2), None],
        };
        let expected = [
            m("e4", Some(60_000), Some(17), None, None),
            m("e5", None, None, Some(-3), Some(2)),
            m("Nf3", Some(59_000), None, None, None),
        ];
        assert_eq!(moves_of_game(7, columns.clone()).expect("paired"), expected);
        // Aggregated in another order: sorted by ply, each column with its move.
        let shuffled = MoveColumns {
            sans: "Nf3 e4 e5",
            plies: vec![3, 1, 2],
            clocks: vec![Some(59_000), Some(60_000), None],
            eval_cps: vec![None, Some(17), None],
            eval_mates: vec![None, None, Some(-3)],
            nags: vec![None, None, Some(2)],
        };
        assert_eq!(moves_of_game(7, shuffled).expect("paired"), expected);
        // A SAN with a space would shift every later SAN: an error.
        let err = moves_of_game(
            7,
            MoveColumns {
                sans: "e4 e5 Nf 3",
                ..columns
            },
        )
        .expect_err("four SANs for three plies");
        assert_eq!(err.kind(), crate::error::ErrorKind::Inconsistent, "{err}");
        assert!(err.to_string().contains("game 7"), "{err}");
    }
}

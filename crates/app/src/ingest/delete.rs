//! Deleting a game: its row, its moves, and its share of the explorer
//! counters, in one transaction. Positions stay: other games may share
//! them, and a position without games costs one row.

use tokio_postgres::{Client, Transaction};

use crate::{chess::model::GameRef, error::Error, explorer, ingest::bulk, store::db::db_err};

/// What [`delete_game`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deleted {
    /// `games.id`.
    pub id: i64,
    /// `games.source`.
    pub source: String,
    /// `games.external_id`.
    pub external_id: String,
    /// Move rows removed.
    pub moves: u64,
}

/// Deletes the game `game` with its moves and takes it out of the explorer
/// counters (if the database keeps them), all in one transaction. A game that does not exist is an
/// [`Error::Request`]. Refused (a conflict) because of a bulk load, whose
/// games are counted only at its finish; waits (calling `waiting` first)
/// for the other holders of the import lock (`lock_for_one_game`).
pub async fn delete_game(
    client: &mut Client,
    game: &GameRef,
    waiting: &dyn Fn(),
) -> Result<Deleted, Error> {
    let tx = client
        .transaction()
        .await
        .map_err(db_err("starting the delete"))?;
    lock_for_one_game(&tx, "delete games", waiting).await?;
    let found = locate(&tx, game)
        .await?
        .ok_or_else(|| Error::Request(format!("no game {game} in the database")))?;
    // FOR SHARE: `db explorer enable|disable` update the row, so they wait
    // for this transaction, and it for them.
    let explorer = explorer::enabled(&tx, true).await?;
    let moves = remove_game(&tx, found.id, explorer).await?;
    tx.commit().await.map_err(db_err("committing the delete"))?;
    Ok(Deleted {
        id: found.id,
        source: found.source,
        external_id: found.external_id,
        moves,
    })
}

/// A game found by [`locate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    /// `games.id`.
    pub(crate) id: i64,
    /// `games.source`.
    pub(crate) source: String,
    /// `games.external_id`.
    pub(crate) external_id: String,
}

/// The game `game` names, its row locked (`FOR UPDATE`) until `tx` ends;
/// `None` if there is none.
pub(crate) async fn locate(tx: &Transaction<'_>, game: &GameRef) -> Result<Option<Located>, Error> {
    let row = match game {
        GameRef::Id(id) => {
            tx.query_opt(
                "SELECT id, source, external_id FROM games WHERE id = $1 FOR UPDATE",
                &[id],
            )
            .await
        }
        GameRef::Key {
            source,
            external_id,
        } => {
            tx.query_opt(
                "SELECT id, source, external_id FROM games
                 WHERE source = $1 AND external_id = $2 FOR UPDATE",
                &[source, external_id],
            )
            .await
        }
    }
    .map_err(db_err("looking the game up"))?;
    Ok(row.map(|row| Located {
        id: row.get(0),
        source: row.get(1),
        external_id: row.get(2),
    }))
}

/// How often a single-game change that waits for the import lock tries
/// it again.
const LOCK_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Takes the incremental side of the import lock for `tx`, so that a bulk
/// load cannot begin or finish meanwhile. Refused (a conflict naming it)
/// only because of a bulk load: one running or about to begin (it holds
/// or awaits the lock, [`bulk::RUN`] says so), or one stopped unfinished
/// (its tables have no indexes, and its games are counted only at its
/// finish). Other holders of the exclusive side end soon and are waited
/// for, `waiting` called once first: `db explorer enable|disable|compact`,
/// and an import counting the positions it queued for the explorer
/// counters at its end. Incremental imports hold the shared side, so they
/// never stop a single-game change. `what` is what the caller does, for
/// the message ("delete games").
pub(crate) async fn lock_for_one_game(
    tx: &Transaction<'_>,
    what: &str,
    waiting: &dyn Fn(),
) -> Result<(), Error> {
    crate::store::shards::refuse_if_sharded(
        tx,
        &format!("`{what}`"),
        "a game's row and its identity key live on different shards, which postgres_fdw \
         cannot change in one atomic commit; change single games on a single node",
    )
    .await?;
    let mut told = false;
    loop {
        // Polled, not waited for in the lock's queue: a bulk load that
        // begins meanwhile must be refused, not waited for until it ends.
        let locked: bool = tx
            .query_one(
                "SELECT pg_try_advisory_xact_lock_shared($1)",
                &[&bulk::LOCK],
            )
            .await
            .map_err(db_err("taking the import lock"))?
            .get(0);
        let open = bulk::unfinished(tx).await?;
        match (locked, open) {
            (true, None) => return Ok(()),
            (true, Some(load)) => {
                return Err(Error::Conflict(format!(
                    "bulk load #{load} stopped unfinished: positions and moves have no indexes \
                     and its games are counted only at its finish. Finish it with `pgnload \
                     import` (--mode auto or bulk), then {what}"
                )));
            }
            (false, Some(load)) => {
                return Err(Error::Conflict(format!(
                    "bulk load #{load} is running and holds the database: {what} once it has \
                     finished"
                )));
            }
            (false, None) if bulk::run_waiting_or_starting(tx).await? => {
                return Err(Error::Conflict(format!(
                    "a bulk load (`import --mode bulk`) is starting or waiting for the running \
                     imports to end, and will hold the database: {what} once it has finished"
                )));
            }
            (false, None) => {
                if !std::mem::replace(&mut told, true) {
                    waiting();
                }
                tokio::time::sleep(LOCK_POLL).await;
            }
        }
    }
}

/// Takes the game `id` (locked by the caller) out, in `tx`: out of the
/// explorer counters if `explorer` (the database keeps them), then its
/// moves and its row. Returns the move rows removed.
pub(crate) async fn remove_game(
    tx: &Transaction<'_>,
    id: i64,
    explorer: bool,
) -> Result<u64, Error> {
    if explorer {
        explorer::remove_games(tx, &[id]).await?;
    }
    let moves = tx
        .execute("DELETE FROM moves WHERE game_id = $1", &[&id])
        .await
        .map_err(db_err("deleting the game's moves"))?;
    tx.execute("DELETE FROM games WHERE id = $1", &[&id])
        .await
        .map_err(db_err("deleting the game"))?;
    Ok(moves)
}

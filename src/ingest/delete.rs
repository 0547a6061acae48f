//! Deleting a game: its row, its moves, and its share of the explorer
//! counters, in one transaction. Positions stay: other games may share
//! them, and a position without games costs one row.

use tokio_postgres::Client;

use crate::{
    chess::model::GameRef,
    error::Error,
    ingest::{bulk, explorer},
    store::db::db_err,
};

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
/// [`Error::Request`]. Refused (a conflict) while a bulk load is open: its
/// games are counted only at its finish.
pub async fn delete_game(client: &mut Client, game: &GameRef) -> Result<Deleted, Error> {
    let tx = client
        .transaction()
        .await
        .map_err(db_err("starting the delete"))?;
    // The incremental side of the import lock, for this transaction: a
    // bulk load cannot begin or finish meanwhile.
    let locked: bool = tx
        .query_one(
            "SELECT pg_try_advisory_xact_lock_shared($1)",
            &[&bulk::LOCK],
        )
        .await
        .map_err(db_err("taking the import lock"))?
        .get(0);
    let open = tx
        .query_opt(
            "SELECT id FROM import_bulk_loads WHERE state <> 'done'",
            &[],
        )
        .await
        .map_err(db_err("reading import_bulk_loads"))?;
    if !locked || open.is_some() {
        return Err(Error::Conflict(
            "a bulk load is running or unfinished, or the explorer counters are being enabled or \
             disabled: delete games once that has finished"
                .to_owned(),
        ));
    }
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
    .map_err(db_err("looking the game up"))?
    .ok_or_else(|| Error::Request(format!("no game {game} in the database")))?;
    let id: i64 = row.get(0);
    // FOR SHARE: `db explorer enable|disable` update the row, so they wait
    // for this transaction, and it for them.
    if explorer::enabled(&tx, true).await? {
        explorer::remove_games(&tx, &[id]).await?;
    }
    let moves = tx
        .execute("DELETE FROM moves WHERE game_id = $1", &[&id])
        .await
        .map_err(db_err("deleting the game's moves"))?;
    tx.execute("DELETE FROM games WHERE id = $1", &[&id])
        .await
        .map_err(db_err("deleting the game"))?;
    tx.commit().await.map_err(db_err("committing the delete"))?;
    Ok(Deleted {
        id,
        source: row.get(1),
        external_id: row.get(2),
        moves,
    })
}

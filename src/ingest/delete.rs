//! Deleting a game: its row, its moves, and its share of the explorer
//! counters, in one transaction. Positions stay: other games may share
//! them, and a position without games costs one row.

use tokio_postgres::Client;

use crate::{
    error::Error,
    ingest::{bulk, explorer},
    store::db::db_err,
};

/// How a game is named on the command line: its `games.id`, or its
/// identity `SOURCE:EXTERNAL_ID` (`lichess:abcd1234`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GameRef {
    /// `games.id`.
    Id(i64),
    /// `(source, external_id)`.
    Key(String, String),
}

impl std::str::FromStr for GameRef {
    type Err = String;

    /// Digits are an id; anything else must be `SOURCE:EXTERNAL_ID`.
    fn from_str(text: &str) -> Result<GameRef, String> {
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return text
                .parse()
                .map(GameRef::Id)
                .map_err(|_| format!("{text} is past the largest game id (2^63 - 1)"));
        }
        match text.split_once(':') {
            Some((source, id)) if !source.is_empty() && !id.is_empty() => {
                Ok(GameRef::Key(source.to_owned(), id.to_owned()))
            }
            _ => Err(format!(
                "{text:?} is neither a game id (digits) nor SOURCE:EXTERNAL_ID (e.g. lichess:abcd1234)"
            )),
        }
    }
}

impl std::fmt::Display for GameRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GameRef::Id(id) => write!(f, "{id}"),
            GameRef::Key(source, id) => write!(f, "{source}:{id}"),
        }
    }
}

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
/// counters, all in one transaction. A game that does not exist is an
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
            "a bulk load is running or unfinished: delete games once it has finished".to_owned(),
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
        GameRef::Key(source, external_id) => {
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
    explorer::remove_games(&tx, &[id]).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_game_is_named_by_id_or_source_and_external_id() {
        assert_eq!("42".parse(), Ok(GameRef::Id(42)));
        assert_eq!(
            "lichess:abcd1234".parse(),
            Ok(GameRef::Key("lichess".into(), "abcd1234".into()))
        );
        assert_eq!(
            "pgn:e6d1:x".parse(),
            Ok(GameRef::Key("pgn".into(), "e6d1:x".into()))
        );
        for bad in ["", "abc", ":x", "x:", "99999999999999999999"] {
            assert!(bad.parse::<GameRef>().is_err(), "{bad}");
        }
    }
}
